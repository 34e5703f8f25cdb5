/* kinglet: the daemon (default) and the command-line tools, in one binary.
 * This file wires the event loop: settings, the gRPC server, the CRI
 * services and signals. */
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include "base/base.h"
#include "config.h"
#include "cri/cri.h"
#include "grpc/grpc.h"
#include "image/image.h"
#include "oci/oci.h"
#include "pod/pod.h"

static const char usage_text[] =
    "Usage: kinglet [daemon] [OPTIONS]\n"
    "       kinglet oci [--root DIR] COMMAND ...    OCI runtime (runc-compatible)\n"
    "       kinglet image COMMAND ...               image store tools\n"
    "       kinglet help [COMMAND [SUBCOMMAND]]     the help of a command\n"
    "\n"
    "Runs the CRI v1 runtime daemon that kubelet talks to:\n"
    "  kubelet --container-runtime-endpoint=unix:///run/kinglet/kinglet.sock\n"
    "\n"
    "Daemon options (each may also be set in the config file as `name = value`):\n"
    "  -s, --socket PATH           gRPC unix socket (default /run/kinglet/kinglet.sock),\n"
    "                              created with mode 0660; a stale socket is replaced\n"
    "      --root DIR              persistent state (default /var/lib/kinglet)\n"
    "      --state DIR             volatile state (default /run/kinglet)\n"
    "  -c, --config FILE           read settings from FILE (optional; embedded defaults\n"
    "                              otherwise); command-line flags override it\n"
    "  -l, --log-level LEVEL       error, warning, info (default) or debug; debug logs\n"
    "                              every RPC with its status and duration\n"
    "      --log-format FORMAT     text (default) or json, one line per event on stderr\n"
    "      --listen-tcp HOST:PORT  also serve gRPC on a TCP address (for benchmarks and\n"
    "                              debugging; off by default; no authentication)\n"
    "      --shutdown-timeout SEC  on SIGTERM/SIGINT, how long in-flight calls may\n"
    "                              finish (default 10)\n"
    "      --registry-mirror HOST=URL  pull HOST's images from URL first, falling back\n"
    "                              to HOST (repeatable; http:// means plain HTTP)\n"
    "      --registry-mirror-only HOST  pull HOST from its mirrors only, never from\n"
    "                              HOST itself (repeatable)\n"
    "      --insecure-registry HOST[:PORT]  allow plain HTTP and unverified TLS\n"
    "                              (repeatable)\n"
    "      --registry-certs-dir DIR  per-registry DIR/HOST[:PORT]/{ca.crt,client.cert,\n"
    "                              client.key} (default /etc/kinglet/certs.d)\n"
    "      --pull-concurrency N    layers downloaded at once per pull (default 3)\n"
    "      --max-layer-size SIZE   refuse layers that unpack to more than SIZE\n"
    "                              (e.g. 64G; default 0 = no limit)\n"
    "      --max-layer-ratio N     refuse layers whose tar grows past N times their\n"
    "                              compressed size, at least 64M (default 100;\n"
    "                              0 = no limit)\n"
    "      --image-min-free SIZE|N%  free space a pull never goes below on the image\n"
    "                              filesystem (default 15%, kubelet's imagefs.available\n"
    "                              eviction threshold; 0 = none); free inodes are kept\n"
    "                              at N% too (5% for a SIZE)\n"
    "      --image-pull-progress-timeout SEC  each step of a pull that waits for a\n"
    "                              registry or proxy (connect, TLS, CONNECT, an answer)\n"
    "                              fails after SEC, and so does a download slower than\n"
    "                              the minimum rate over SEC of waiting (default 60)\n"
    "      --image-pull-min-rate BYTES  that minimum rate, per second (default 1K;\n"
    "                              0 = any byte is progress)\n"
    "      --pod-cidr CIDR[,CIDR]  pod subnets, IPv4 and/or IPv6 (default: kubelet's\n"
    "                              pod CIDR from UpdateRuntimeConfig, else 10.88.0.0/16)\n"
    "      --bridge NAME           the pods' bridge (default kinglet0)\n"
    "      --mtu N                 pod interface MTU (default: the MTU of the\n"
    "                              interface holding the default route)\n"
    "      --pod-network MODE      builtin (default) or none (host-network pods only)\n"
    "      --stream-address HOST:PORT  the streaming server of exec, attach and\n"
    "                              port-forward (default 127.0.0.1:0, a free port)\n"
    "      --stream-tls-cert FILE  serve the streaming port over TLS with this\n"
    "      --stream-tls-key FILE   certificate chain and key (PEM; both or neither)\n"
    "      --runtime-handler NAME  accept RuntimeClass handler NAME besides the default\n"
    "                              (repeatable; every handler runs kinglet's executor)\n"
    "      --cdi-spec-dirs DIR[,DIR]  where CDI device specs are read, later ones\n"
    "                              overriding earlier ones (default /etc/cdi,/var/run/cdi)\n"
    "gRPC endpoint limits (timeouts in seconds, 0 = never):\n"
    "      --grpc-max-connections N  connections at once (default 1024); when full, a\n"
    "                              new one replaces the connection idle the longest\n"
    "      --grpc-idle-timeout SEC  close a connection without calls (default 300)\n"
    "      --grpc-keepalive-time SEC  ping a client silent this long (default 120)\n"
    "      --grpc-keepalive-timeout SEC  close it if the ping is not answered (default 20)\n"
    "      --grpc-request-timeout SEC  a started request must be complete within SEC\n"
    "                              (default 60)\n"
    "      --grpc-stall-timeout SEC  close a connection whose client takes none of its\n"
    "                              queued responses for SEC (default 60)\n"
    "      --grpc-request-memory SIZE  request bytes buffered, all connections together\n"
    "                              (default 128M; at most 64M per connection)\n"
    "      --grpc-response-memory SIZE  responses queued for clients, all connections\n"
    "                              together (default 256M)\n"
    "      --grpc-connection-response-memory SIZE  responses queued per connection\n"
    "                              before its new calls wait (default 32M)\n"
    "  -h, --help                  show this help\n"
    "  -V, --version               show the version\n"
    "\n"
    "Signals: SIGTERM and SIGINT stop accepting, send GOAWAY, let in-flight calls\n"
    "finish (up to --shutdown-timeout) and exit 0. SIGHUP is reserved.\n";

struct daemon {
    uv_loop_t loop;
    struct config cfg;
    struct grpc_server *srv;
    struct cri *cri;
    uv_signal_t sig_term, sig_int, sig_hup;
    bool stopping;
};

static void shutdown_done(void *data)
{
    struct daemon *d = data;
    uv_close((uv_handle_t *)&d->sig_term, NULL);
    uv_close((uv_handle_t *)&d->sig_int, NULL);
    uv_close((uv_handle_t *)&d->sig_hup, NULL);
    log_info("stopped");
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    if (signum == SIGHUP) {
        log_info("SIGHUP: configuration reload is not supported yet; ignored");
        return;
    }
    if (d->stopping) {
        log_info("%s again: still finishing in-flight calls", strsignal(signum));
        return;
    }
    d->stopping = true;
    log_info("%s: shutting down", strsignal(signum));
    cri_shutdown(d->cri);
    grpc_server_shutdown(d->srv, (uint64_t)d->cfg.shutdown_timeout_s * 1000, shutdown_done, d);
}

static int parse_args(struct config *cfg, int argc, char **argv, struct err *err)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"root", required_argument, NULL, 'r'},
        {"state", required_argument, NULL, 't'},
        {"config", required_argument, NULL, 'c'},
        {"log-level", required_argument, NULL, 'l'},
        {"log-format", required_argument, NULL, 'f'},
        {"listen-tcp", required_argument, NULL, 'p'},
        {"shutdown-timeout", required_argument, NULL, 'g'},
        {"registry-mirror", required_argument, NULL, 'M'},
        {"registry-mirror-only", required_argument, NULL, 'O'},
        {"insecure-registry", required_argument, NULL, 'I'},
        {"registry-certs-dir", required_argument, NULL, 'C'},
        {"pull-concurrency", required_argument, NULL, 'P'},
        {"max-layer-size", required_argument, NULL, 'L'},
        {"image-min-free", required_argument, NULL, 'F'},
        {"max-layer-ratio", required_argument, NULL, 'R'},
        {"pod-cidr", required_argument, NULL, 'D'},
        {"bridge", required_argument, NULL, 'B'},
        {"mtu", required_argument, NULL, 'U'},
        {"pod-network", required_argument, NULL, 'N'},
        {"runtime-handler", required_argument, NULL, 'H'},
        {"stream-address", required_argument, NULL, 'A'},
        {"stream-tls-cert", required_argument, NULL, 'T'},
        {"stream-tls-key", required_argument, NULL, 'K'},
        /* long-only options (>= 256): the setting is the option's name */
        {"cdi-spec-dirs", required_argument, NULL, 256},
        {"grpc-max-connections", required_argument, NULL, 256},
        {"image-pull-progress-timeout", required_argument, NULL, 256},
        {"image-pull-min-rate", required_argument, NULL, 256},
        {"grpc-idle-timeout", required_argument, NULL, 256},
        {"grpc-keepalive-time", required_argument, NULL, 256},
        {"grpc-keepalive-timeout", required_argument, NULL, 256},
        {"grpc-request-timeout", required_argument, NULL, 256},
        {"grpc-stall-timeout", required_argument, NULL, 256},
        {"grpc-request-memory", required_argument, NULL, 256},
        {"grpc-response-memory", required_argument, NULL, 256},
        {"grpc-connection-response-memory", required_argument, NULL, 256},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    /* The config file comes first, so that flags override it wherever
     * they stand on the command line. */
    for (int i = 1; i < argc; i++) {
        const char *file = NULL;
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) && i + 1 < argc)
            file = argv[i + 1];
        else if (str_has_prefix(argv[i], "--config="))
            file = argv[i] + strlen("--config=");
        if (!file)
            continue;
        _cleanup_free_ char *text = NULL;
        int r = read_file_at(AT_FDCWD, file, 1 << 20, &text, NULL);
        if (r < 0)
            return err_set(err, -r, "read config `%s`", file);
        r = config_parse(cfg, text, file, err);
        if (r < 0)
            return r;
    }
    optind = 1;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "s:c:l:hV", opts, &idx)) != -1) {
        const char *key = NULL;
        switch (c) {
        case 256:
            key = opts[idx].name;
            break;
        case 's':
            key = "socket";
            break;
        case 'r':
            key = "root";
            break;
        case 't':
            key = "state";
            break;
        case 'l':
            key = "log-level";
            break;
        case 'f':
            key = "log-format";
            break;
        case 'p':
            key = "listen-tcp";
            break;
        case 'g':
            key = "shutdown-timeout";
            break;
        case 'M':
            key = "registry-mirror";
            break;
        case 'O':
            key = "registry-mirror-only";
            break;
        case 'I':
            key = "insecure-registry";
            break;
        case 'C':
            key = "registry-certs-dir";
            break;
        case 'P':
            key = "pull-concurrency";
            break;
        case 'L':
            key = "max-layer-size";
            break;
        case 'F':
            key = "image-min-free";
            break;
        case 'R':
            key = "max-layer-ratio";
            break;
        case 'D':
            key = "pod-cidr";
            break;
        case 'B':
            key = "bridge";
            break;
        case 'U':
            key = "mtu";
            break;
        case 'N':
            key = "pod-network";
            break;
        case 'H':
            key = "runtime-handler";
            break;
        case 'A':
            key = "stream-address";
            break;
        case 'T':
            key = "stream-tls-cert";
            break;
        case 'K':
            key = "stream-tls-key";
            break;
        case 'c':
            continue;
        case 'h':
            fputs(usage_text, stdout);
            return 1;
        case 'V':
            printf("kinglet %s (CRI v1)\n", PACKAGE_VERSION);
            return 1;
        default:
            return err_set(err, EINVAL, "see `kinglet --help`");
        }
        int r = config_set(cfg, key, optarg, err);
        if (r < 0)
            return r;
    }
    if (optind < argc)
        return err_set(err, EINVAL, "unexpected argument `%s`", argv[optind]);
    return 0;
}

static int daemon_start(struct daemon *d, struct err *err)
{
    int r = mkdir_p(d->cfg.root_dir, 0700);
    if (r < 0)
        return err_set(err, -r, "create root directory `%s`", d->cfg.root_dir);
    r = mkdir_p(d->cfg.state_dir, 0700);
    if (r < 0)
        return err_set(err, -r, "create state directory `%s`", d->cfg.state_dir);

    struct image_config ic = {
        .pull_concurrency = d->cfg.pull_concurrency,
        .limits = {.max_layer_size = d->cfg.max_layer_size,
                   .min_free = d->cfg.image_min_free,
                   .min_free_pct = d->cfg.image_min_free_pct,
                   .max_layer_ratio = d->cfg.max_layer_ratio,
                   .progress_timeout_ms = d->cfg.image_pull_progress_timeout_ms,
                   .min_rate = d->cfg.image_pull_min_rate},
        .mirrors = (const char *const *)d->cfg.registry_mirrors,
        .n_mirrors = d->cfg.n_registry_mirrors,
        .insecure = (const char *const *)d->cfg.insecure_registries,
        .n_insecure = d->cfg.n_insecure_registries,
        .certs_dir = d->cfg.registry_certs_dir,
        .mirror_only = (const char *const *)d->cfg.registry_mirror_only,
        .n_mirror_only = d->cfg.n_registry_mirror_only,
    };
    struct cri_config cc = {
        .socket_path = d->cfg.socket_path,
        .root_dir = d->cfg.root_dir,
        .state_dir = d->cfg.state_dir,
        .image = &ic,
        .pod_cidr = d->cfg.pod_cidr,
        .bridge = d->cfg.bridge,
        .mtu = d->cfg.mtu,
        .network_disabled = d->cfg.network_disabled,
        .stream_address = d->cfg.stream_address,
        .stream_tls_cert = d->cfg.stream_tls_cert,
        .stream_tls_key = d->cfg.stream_tls_key,
        .runtime_handlers = (const char *const *)d->cfg.runtime_handlers,
        .n_runtime_handlers = d->cfg.n_runtime_handlers,
        .cdi_spec_dirs = d->cfg.cdi_spec_dirs ? d->cfg.cdi_spec_dirs : CONFIG_CDI_SPEC_DIRS,
    };
    /* The `kinglet oci` processes we start put processes into containers:
     * they start from a view of our binary that nothing can write, made
     * once here rather than by each of them (one execve less per create
     * and exec). Where it cannot be made they make their own. */
    int sr = exe_seal_for_children();
    if (sr < 0)
        log_debug("no sealed view of the binary for our children: %s", strerror(-sr));
    r = cri_new(&d->loop, &cc, &d->cri, err);
    if (r < 0)
        return r;
    r = grpc_server_new(&d->loop, &d->cfg.grpc, &d->srv);
    if (r < 0)
        return err_set(err, -r, "create the gRPC server");
    r = cri_register(d->cri, d->srv, err);
    if (r < 0)
        return r;
    r = grpc_server_listen_unix(d->srv, d->cfg.socket_path, 0660, err);
    if (r < 0)
        return r;
    if (d->cfg.listen_tcp) {
        char host[256];
        int port;
        config_split_hostport(d->cfg.listen_tcp, host, sizeof(host), &port);
        r = grpc_server_listen_tcp(d->srv, host, port, err);
        if (r < 0)
            return r;
        log_warn("serving gRPC without authentication on tcp %s", d->cfg.listen_tcp);
    }
    uv_signal_t *sigs[] = {&d->sig_term, &d->sig_int, &d->sig_hup};
    int nums[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
        uv_signal_init(&d->loop, sigs[i]);
        sigs[i]->data = d;
        uv_signal_start(sigs[i], on_signal, nums[i]);
    }
    log_info("kinglet %s serving CRI v1 on unix://%s (root %s, state %s)", PACKAGE_VERSION,
             d->cfg.socket_path, d->cfg.root_dir, d->cfg.state_dir);
    return 0;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static int daemon_main(int argc, char **argv, char **full_argv)
{
    /* Whatever the parent left open (a shell's pipe, a supervisor's
     * sockets) is no business of the daemon's, and would leak into every
     * child and container it starts. kinglet does not take sockets by
     * systemd activation, so nothing above stderr is kept. */
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    struct daemon d = {0};
    struct err err = {0};
    config_defaults(&d.cfg);
    int r = parse_args(&d.cfg, argc, argv, &err);
    if (r > 0) {
        config_free(&d.cfg);
        return 0;
    }
    if (r < 0) {
        fprintf(stderr, "kinglet: %s\n", err_str(&err));
        config_free(&d.cfg);
        return 2;
    }
    enum log_level level = LOG_LEVEL_INFO;
    log_level_parse(d.cfg.log_level, &level);
    log_set_level(level);
    log_set_json(strcmp(d.cfg.log_format, "json") == 0);
    /* The daemon's `kinglet oci` children put copies of themselves into
     * containers (the init), so it runs from a view of its binary that
     * nothing can write, and they start from it already sealed: a
     * container that reaches such a process's /proc/PID/exe (through a
     * `#!/proc/self/exe` script, say) finds no host file behind it. */
    r = exe_reexec_sealed(full_argv);
    if (r < 0) {
        log_error("cannot run from a sealed view of the kinglet binary: %s", strerror(-r));
        config_free(&d.cfg);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* The modes the daemon asks for are the modes it gets, whatever the
     * umask of the shell that started it: state directories 0700, records
     * 0600, and the files pods see (resolv.conf, hosts) readable. A umask
     * of 0177 once made <root>/net a directory without x. */
    umask(022);
    /* One malloc arena for every thread: glibc gives each worker thread an
     * arena of its own, whose freed pages stay resident, and the daemon's
     * allocations are small and short. */
    mallopt(M_ARENA_MAX, 1);
    /* Buffers a client makes us hold (requests, responses of megabytes)
     * are mapped and unmapped on their own: glibc's default raises this
     * threshold after the first large free, and a burst of large responses
     * then stays in the heap, resident after the client is gone. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);

    uv_loop_init(&d.loop);
    int status = 0;
    if (daemon_start(&d, &err) < 0) {
        log_error("cannot start: %s", err_str(&err));
        status = 1;
        uv_walk(&d.loop, close_walk, NULL);
    }
    uv_run(&d.loop, UV_RUN_DEFAULT);
    uv_loop_close(&d.loop);
    grpc_server_free(d.srv);
    cri_free(d.cri);
    config_free(&d.cfg);
    return status;
}

/* The daemon's internal commands: started by the daemon, never by hand, but
 * they answer --help like the others. */
static const struct {
    const char *name, *usage;
} internal_cmds[] = {
    {"image-pull", "Usage: kinglet image-pull\n"
                   "\n"
                   "The daemon's sandboxed helper that pulls or imports one image: it reads\n"
                   "its request on fd 3 and answers there. The daemon starts it; it takes\n"
                   "no options. For tests only, `kinglet image-pull --test-attack=STEPS\n"
                   "STORE` sets the same sandbox up and runs attacker steps in it.\n"},
};

static const char *internal_usage(const char *cmd)
{
    for (size_t i = 0; i < ARRAY_SIZE(internal_cmds); i++)
        if (strcmp(internal_cmds[i].name, cmd) == 0)
            return internal_cmds[i].usage;
    return NULL;
}

static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* `kinglet help [COMMAND [SUBCOMMAND]]`: the same text as `--help` of that
 * command, on stdout. */
static int help_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "daemon") == 0 || strcmp(argv[1], "help") == 0 ||
        is_help(argv[1])) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (internal_usage(argv[1])) {
        fputs(internal_usage(argv[1]), stdout);
        return 0;
    }
    if (argc > 3) {
        fprintf(stderr, "kinglet: help: expected a command and at most one subcommand\n");
        return 2;
    }
    /* kinglet help oci [CMD] -> kinglet oci help [CMD], the same for image. */
    char *v[] = {argv[1], "help", argc > 2 ? argv[2] : NULL, NULL};
    int n = argc > 2 ? 3 : 2;
    if (strcmp(argv[1], "oci") == 0)
        return oci_cli_main(n, v, v); /* help: never executes itself again */
    if (strcmp(argv[1], "image") == 0)
        return cri_image_cli(n, v);
    fprintf(stderr, "kinglet: unknown command `%s`; see `kinglet help`\n", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "help") == 0)
        return help_main(argc - 1, argv + 1);
    /* The internal commands take no arguments: -h must not start a pull
     * helper. */
    if (argc > 2 && internal_usage(argv[1]) && is_help(argv[2])) {
        fputs(internal_usage(argv[1]), stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "oci") == 0)
        return oci_cli_main(argc - 1, argv + 1, argv);
    if (argc > 1 && strcmp(argv[1], "image-pull") == 0)
        return image_helper_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "image") == 0)
        return cri_image_cli(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "daemon") == 0)
        return daemon_main(argc - 1, argv + 1, argv);
    return daemon_main(argc, argv, argv);
}
