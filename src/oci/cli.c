/* oci/cli: `kinglet oci [global options] COMMAND ...`, the runc/crun
 * command line over oci.h. Errors end as one line on stderr (or in --log)
 * and exit status 1. */
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <sys/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "oci/cgroup.h"
#include "oci/internal.h"

struct gopts {
    const char *root;
};

/* --error-fd N: the failure also goes there as an error record (base.h:
 * code and message apart), for a caller that maps the code (the daemon's
 * CreateContainer) rather than scrape a log line for people. */
static int error_fd = -1;
static struct err cli_err;

static int fail(struct err *err)
{
    log_error("%s", err_str(err));
    cli_err = *err;
    return 1;
}

/* fail() for an error made here: with the system's text for code, or
 * (no_sys) a message that says it all. */
_printf_(3, 4) static int failf(int code, bool no_sys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[ERR_MSG_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct err err = {0};
    if (no_sys)
        err_set_msg(&err, code, "%s", msg);
    else
        err_set(&err, code, "%s", msg);
    return fail(&err);
}

static int usage_error(const char *cmd, const char *what)
{
    log_error("%s: %s", cmd, what);
    err_set_msg(&cli_err, EINVAL, "%s: %s", cmd, what);
    return 2;
}

/* ---- help ---------------------------------------------------------------- */

static const char global_usage[] =
    "usage: kinglet oci [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGS]\n"
    "       kinglet oci help [COMMAND]\n"
    "\n"
    "An OCI runtime with runc's command line.\n"
    "\n"
    "Global options:\n"
    "  --root DIR               container state (default " OCI_ROOT_DEFAULT ")\n"
    "  --log FILE               write errors to FILE instead of stderr\n"
    "  --log-format text|json   the format of those lines\n"
    "  --error-fd N             also write a failure to fd N as a binary record\n"
    "                           (errno and message apart; see src/base/base.h)\n"
    "  --debug                  log each step\n"
    "  --systemd-cgroup, --rootless VALUE   accepted for runc compatibility; ignored\n"
    "  -h, --help               show this help\n"
    "\n"
    "Commands:\n";

struct cmd_help {
    const char *name, *summary, *usage;
};

static const struct cmd_help helps[] = {
    {"create", "create a container from a bundle; its process waits for start",
     "create [-b BUNDLE] [--pid-file FILE] [--console-socket SOCK]\n"
     "       [--preserve-fds N] [--no-pivot] [--no-new-keyring] ID\n"
     "  -b, --bundle DIR         the bundle (default: the current directory)\n"
     "  --pid-file FILE          write the container's pid to FILE\n"
     "  --console-socket SOCK    send the terminal's master to this AF_UNIX socket\n"
     "  --preserve-fds N         pass N more fds (from 3) to the container\n"
     "  --no-pivot, --no-new-keyring   as in runc\n"
     "  --cri-log FILE, --cri-stdin, --cri-stdin-once   CRI-format log and stdin (kinglet)\n"},
    {"run", "create and start a container, and wait for it (unless -d)",
     "run [-d] [-b BUNDLE] [--pid-file FILE] [--console-socket SOCK]\n"
     "       [--preserve-fds N] [--keep] ID\n"
     "  -d, --detach             do not wait for the container; otherwise the exit status\n"
     "                           is the container's, and SIGTERM/SIGINT are forwarded\n"
     "  other options as for create\n"},
    {"start", "start a created container's process", "start ID\n"},
    {"state", "print a container's state as JSON", "state ID\n"},
    {"kill", "send a signal (default SIGTERM) to the container's process",
     "kill [-a] ID [SIGNAL]\n"
     "  -a, --all                signal every process of the container's cgroup\n"
     "  SIGNAL                   a name (TERM, SIGKILL) or a number\n"},
    {"delete", "delete a stopped container (a running one with --force)",
     "delete [-f] ID\n"
     "  -f, --force              kill the container first; a missing one is no error\n"},
    {"list", "list the containers",
     "list [-q] [--format table|json]\n"
     "  -q, --quiet              ids only\n"},
    {"exec", "run another process in a running container",
     "exec [OPTIONS] ID [--] COMMAND [ARG...]\n"
     "       kinglet oci exec [OPTIONS] -p PROCESS.json ID\n"
     "  -p, --process FILE       the process as an OCI process object\n"
     "  -t, --tty                give it a terminal (with --console-socket)\n"
     "  -d, --detach             do not wait for it\n"
     "  -u, --user UID[:GID]     run as this user\n"
     "  -e, --env NAME=VALUE     set a variable (repeatable)\n"
     "  --cwd DIR                working directory\n"
     "  --pid-file FILE, --pid-fd FD   report its pid\n"
     "  --console-socket SOCK, --preserve-fds N   as for create\n"
     "  --console-fd FD          as --console-socket, on a connected socket fd\n"},
    {"ps", "list the container's processes",
     "ps [--format table|json] ID [PS OPTIONS]\n"
     "  --format json            the pids as a JSON array\n"},
    {"pause", "freeze every process of the container", "pause ID\n"},
    {"resume", "thaw a paused container", "resume ID\n"},
    {"update", "change a running container's resources",
     "update --resources FILE ID\n"
     "  -r, --resources FILE     an OCI linux.resources object (- for stdin)\n"},
    {"spec", "write a default config.json",
     "spec [-b BUNDLE] [--rootless]\n"
     "  -b, --bundle DIR         where to write config.json (default: .)\n"
     "  --rootless               for a user namespace with the caller's ids\n"},
    {"features", "print what this runtime supports, as JSON", "features\n"},
    {"help", "show the help of a command", "help [COMMAND]\n"},
};

static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* The usage of one command (or, for NULL, of them all) on stdout: 0, or 2
 * for an unknown command. */
static int help(const char *cmd)
{
    if (!cmd) {
        fputs(global_usage, stdout);
        for (size_t i = 0; i < ARRAY_SIZE(helps); i++)
            printf("  %-10s %s\n", helps[i].name, helps[i].summary);
        printf("\nSee `kinglet oci COMMAND --help` for a command's options.\n");
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(helps); i++)
        if (strcmp(helps[i].name, cmd) == 0) {
            /* The synopsis lines, the summary, then the options. */
            const char *opts = helps[i].usage;
            while ((opts = strstr(opts, "\n  ")) && opts[3] == ' ')
                opts++; /* a synopsis' continuation line */
            int syn = opts ? (int)(opts - helps[i].usage) + 1 : (int)strlen(helps[i].usage);
            printf("usage: kinglet oci %.*s\n%s.\n", syn, helps[i].usage, helps[i].summary);
            if (opts)
                printf("\nOptions:\n%s", opts + 1);
            return 0;
        }
    log_error("oci: unknown command `%s`; see `kinglet oci --help`", cmd);
    return 2;
}

/* --preserve-fds N of create, run and exec: fds 3 .. 3+N-1 (the exec
 * helper's socket and program go above them). */
#define PRESERVE_FDS_ERROR "--preserve-fds: expected a number from 0 to 1024"
static int parse_preserve_fds(const char *s, int *ret)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (end == s || *end || errno || n < 0 || n > 1024)
        return -EINVAL;
    *ret = (int)n;
    return 0;
}

/* Every parser below runs getopt_long over argv from the command's own
 * name on; "+" stops at the first operand (exec's command line). -h and
 * --help show the command's usage wherever they stand among its options. */

static int cmd_create_run(const struct gopts *g, int argc, char **argv, bool run)
{
    static const struct option lo[] = {
        {"bundle", required_argument, NULL, 'b'},
        {"pid-file", required_argument, NULL, 'p'},
        {"console-socket", required_argument, NULL, 'c'},
        {"preserve-fds", required_argument, NULL, 'f'},
        {"detach", no_argument, NULL, 'd'},
        {"no-pivot", no_argument, NULL, 'n'},
        {"no-new-keyring", no_argument, NULL, 'k'},
        {"keep", no_argument, NULL, 'K'},
        {"cri-log", required_argument, NULL, 'L'},
        {"cri-stdin", no_argument, NULL, 'S'},
        {"cri-stdin-once", no_argument, NULL, 'O'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct oci_create_opts o = {.root = g->root};
    bool detach = false;
    const char *cmd = run ? "run" : "create";
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+b:dp:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'b':
            o.bundle = optarg;
            break;
        case 'p':
            o.pid_file = optarg;
            break;
        case 'c':
            o.console_socket = optarg;
            break;
        case 'f':
            if (parse_preserve_fds(optarg, &o.preserve_fds) < 0)
                return usage_error(cmd, PRESERVE_FDS_ERROR);
            break;
        case 'd':
            detach = true;
            break;
        case 'n':
            o.no_pivot = true;
            break;
        case 'k':
            o.no_new_keyring = true;
            break;
        case 'K':
            break;
        case 'L':
            if (optarg[0] != '/')
                return usage_error(cmd, "--cri-log: expected an absolute path");
            o.cri_log = optarg;
            break;
        case 'S':
            o.cri_stdin = true;
            break;
        case 'O':
            o.cri_stdin_once = true;
            break;
        case 'h':
            return help(cmd);
        default:
            return usage_error(cmd, "unknown option or missing argument");
        }
    }
    if (optind + 1 != argc)
        return usage_error(cmd, "expected one container id");
    o.id = argv[optind];
    struct err err = {0};
    if (!run)
        return oci_container_create(&o, &err) < 0 ? fail(&err) : 0;
    int status = 0;
    if (oci_container_run(&o, detach, &status, &err) < 0)
        return fail(&err);
    return status;
}

static int one_id(int argc, char **argv, const char *cmd, const char **id)
{
    if (argc != 2)
        return usage_error(cmd, "expected one container id");
    *id = argv[1];
    return 0;
}

static int cmd_start(const struct gopts *g, int argc, char **argv)
{
    const char *id = NULL;
    int r = one_id(argc, argv, "start", &id);
    if (r)
        return r;
    struct err err = {0};
    return oci_container_start(g->root, id, &err) < 0 ? fail(&err) : 0;
}

static int cmd_state(const struct gopts *g, int argc, char **argv)
{
    const char *id = NULL;
    int r = one_id(argc, argv, "state", &id);
    if (r)
        return r;
    struct err err = {0};
    struct oci_state s;
    if (oci_container_state(g->root, id, &s, &err) < 0)
        return fail(&err);
    _cleanup_free_ char *json = NULL;
    r = oci_state_to_json(&s, &json, &err);
    oci_state_clear(&s);
    if (r < 0)
        return fail(&err);
    printf("%s\n", json);
    return 0;
}

static int cmd_kill(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {
        {"all", no_argument, NULL, 'a'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    bool all = false;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+ah", lo, NULL)) != -1;) {
        switch (c_) {
        case 'a':
            all = true;
            break;
        case 'h':
            return help("kill");
        default:
            return usage_error("kill", "unknown option or missing argument");
        }
    }
    if (optind >= argc || argc - optind > 2)
        return usage_error("kill", "expected a container id and an optional signal");
    int sig = SIGTERM;
    if (argc - optind == 2 && oci_signal_parse(argv[optind + 1], &sig) < 0) {
        return failf(EINVAL, true, "kill: unknown signal `%s`", argv[optind + 1]);
    }
    struct err err = {0};
    return oci_container_kill(g->root, argv[optind], sig, all, &err) < 0 ? fail(&err) : 0;
}

static int cmd_delete(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {
        {"force", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    bool force = false;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+fh", lo, NULL)) != -1;) {
        switch (c_) {
        case 'f':
            force = true;
            break;
        case 'h':
            return help("delete");
        default:
            return usage_error("delete", "unknown option or missing argument");
        }
    }
    if (optind + 1 != argc)
        return usage_error("delete", "expected one container id");
    struct err err = {0};
    int r = oci_container_delete(g->root, argv[optind], force, &err);
    /* `delete --force` of a missing container succeeds, as in runc. */
    if (r == -ENOENT && force)
        return 0;
    return r < 0 ? fail(&err) : 0;
}

static int cmd_list(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"format", required_argument, NULL, 'f'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    bool quiet = false, json = false;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+qf:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'q':
            quiet = true;
            break;
        case 'f':
            json = strcmp(optarg, "json") == 0;
            break;
        case 'h':
            return help("list");
        default:
            return usage_error("list", "unknown option or missing argument");
        }
    }
    struct err err = {0};
    char **ids;
    size_t n;
    if (oci_container_list(g->root, &ids, &n, &err) < 0)
        return fail(&err);
    json_t *arr = json ? json_array() : NULL;
    if (!quiet && !json)
        printf("%-24s %-8s %-10s %s\n", "ID", "PID", "STATUS", "BUNDLE");
    for (size_t i = 0; i < n; i++) {
        struct oci_state s;
        if (quiet) {
            printf("%s\n", ids[i]);
        } else if (oci_container_state(g->root, ids[i], &s, NULL) == 0) {
            if (json)
                json_array_append_new(
                    arr, json_pack("{s:s, s:i, s:s, s:s}", "id", s.id, "pid", (int)s.pid, "status",
                                   oci_status_name(s.status), "bundle", s.bundle));
            else
                printf("%-24s %-8d %-10s %s\n", s.id, (int)s.pid, oci_status_name(s.status),
                       s.bundle);
            oci_state_clear(&s);
        }
        free(ids[i]);
    }
    free(ids);
    if (json) {
        char *s = json_dumps(arr, 0);
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
    }
    return 0;
}

static int cmd_pause(const struct gopts *g, int argc, char **argv, bool pause)
{
    const char *id = NULL;
    int r = one_id(argc, argv, pause ? "pause" : "resume", &id);
    if (r)
        return r;
    struct err err = {0};
    return oci_container_pause(g->root, id, pause, &err) < 0 ? fail(&err) : 0;
}

/* Runs ps(1) with the caller's options (default -ef) and keeps the header
 * and the lines of the container's processes, as runc does. */
static int ps_table(const pid_t *pids, size_t n, char **ps_args, int n_args)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -errno;
    _cleanup_free_ char **argv = calloc((size_t)n_args + 3, sizeof(char *));
    if (!argv)
        return -ENOMEM;
    argv[0] = "ps";
    if (n_args == 0)
        argv[1] = "-ef";
    for (int i = 0; i < n_args; i++)
        argv[1 + i] = ps_args[i];
    pid_t child = fork();
    if (child == 0) {
        dup2(pfd[1], STDOUT_FILENO);
        execvp("ps", argv);
        _exit(127);
    }
    close(pfd[1]);
    if (child < 0) {
        close(pfd[0]);
        return -errno;
    }
    FILE *f = fdopen(pfd[0], "r");
    int pid_col = -1, r = 0;
    char *line = NULL;
    size_t cap = 0;
    for (bool header = true; f && getline(&line, &cap, f) > 0; header = false) {
        char copy[4096];
        snprintf(copy, sizeof(copy), "%s", line);
        char *save = NULL;
        int col = 0;
        bool keep = header;
        for (char *t = strtok_r(copy, " \t\n", &save); t;
             t = strtok_r(NULL, " \t\n", &save), col++) {
            if (header && strcmp(t, "PID") == 0)
                pid_col = col;
            if (!header && col == pid_col)
                for (size_t i = 0; i < n; i++)
                    keep |= atoi(t) == (int)pids[i];
        }
        if (header && pid_col < 0) {
            fprintf(stderr, "kinglet oci ps: ps output has no PID column\n");
            r = -EINVAL;
            break;
        }
        if (keep)
            fputs(line, stdout);
    }
    free(line);
    if (f)
        fclose(f);
    else
        close(pfd[0]);
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR)
        ;
    if (r == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        r = -ECHILD;
    return r;
}

static int cmd_ps(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {{"format", required_argument, NULL, 'f'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    bool json = false;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+f:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'f':
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "table") != 0)
                return usage_error("ps", "--format is table or json");
            json = strcmp(optarg, "json") == 0;
            break;
        case 'h':
            return help("ps");
        default:
            return usage_error("ps", "unknown option or missing argument");
        }
    }
    if (optind >= argc)
        return usage_error("ps", "expected a container id [ps options]");
    if (json && optind + 1 != argc)
        return usage_error("ps", "ps options go with --format table");
    struct err err = {0};
    pid_t *pids;
    size_t n;
    if (oci_container_pids(g->root, argv[optind], &pids, &n, &err) < 0)
        return fail(&err);
    int r = 0;
    if (json) {
        printf("[");
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", (int)pids[i]);
        printf("]\n");
    } else {
        fflush(stdout);
        r = ps_table(pids, n, argv + optind + 1, argc - optind - 1);
        if (r < 0)
            fprintf(stderr, "kinglet oci ps: running ps(1) failed: %s\n", strerror(-r));
    }
    free(pids);
    return r < 0 ? 1 : 0;
}

static int cmd_update(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {{"resources", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    const char *file = NULL;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+r:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'r':
            file = optarg;
            break;
        case 'h':
            return help("update");
        default:
            return usage_error("update", "unknown option or missing argument");
        }
    }
    if (optind + 1 != argc || !file)
        return usage_error("update", "expected --resources FILE and one container id");
    _cleanup_free_ char *data = NULL;
    int r =
        read_file_at(AT_FDCWD, strcmp(file, "-") == 0 ? "/dev/stdin" : file, 1 << 20, &data, NULL);
    if (r < 0) {
        return failf(-r, false, "update: --resources `%s`", file);
    }
    struct err err = {0};
    return oci_container_update(g->root, argv[optind], data, &err) < 0 ? fail(&err) : 0;
}

static int cmd_exec(const struct gopts *g, int argc, char **argv)
{
    static const struct option lo[] = {
        {"process", required_argument, NULL, 'p'},
        {"tty", no_argument, NULL, 't'},
        {"detach", no_argument, NULL, 'd'},
        {"pid-file", required_argument, NULL, 'P'},
        {"pid-fd", required_argument, NULL, 'F'},
        {"console-socket", required_argument, NULL, 'c'},
        {"console-fd", required_argument, NULL, 'C'},
        {"cwd", required_argument, NULL, 'w'},
        {"env", required_argument, NULL, 'e'},
        {"user", required_argument, NULL, 'u'},
        {"preserve-fds", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct oci_exec_opts o = {.root = g->root, .pid_fd = -1, .console_fd = -1};
    const char *process_file = NULL;
    char *envs[65] = {NULL};
    size_t n_env = 0;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+p:tdu:e:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'p':
            process_file = optarg;
            break;
        case 't':
            o.tty = true;
            break;
        case 'd':
            o.detach = true;
            break;
        case 'P':
            o.pid_file = optarg;
            break;
        case 'F': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 3 || n > 65535 || fcntl((int)n, F_GETFD) < 0)
                return usage_error("exec", "--pid-fd: expected an open fd above 2");
            o.pid_fd = (int)n;
            break;
        }
        case 'c':
            o.console_socket = optarg;
            break;
        case 'C': {
            /* a connected unix socket, as --console-socket would give */
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 3 || n > 65535 || fcntl((int)n, F_GETFD) < 0)
                return usage_error("exec", "--console-fd: expected an open fd above 2");
            o.console_fd = (int)n;
            break;
        }
        case 'w':
            o.cwd = optarg;
            break;
        case 'e':
            if (n_env >= 64)
                return usage_error("exec", "at most 64 --env");
            envs[n_env++] = optarg;
            break;
        case 'u':
            o.user = optarg;
            break;
        case 'f':
            if (parse_preserve_fds(optarg, &o.preserve_fds) < 0)
                return usage_error("exec", PRESERVE_FDS_ERROR);
            break;
        case 'h':
            return help("exec");
        default:
            return usage_error("exec", "unknown option or missing argument");
        }
    }
    if (optind >= argc)
        return usage_error("exec", "expected a container id");
    o.id = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    _cleanup_free_ char *pj = NULL;
    if (process_file) {
        int r = read_file_at(AT_FDCWD, process_file, OCI_CONFIG_MAX, &pj, NULL);
        if (r < 0) {
            return failf(-r, false, "exec: --process `%s`", process_file);
        }
        o.process_json = pj;
    } else if (optind >= argc) {
        return usage_error("exec", "expected --process FILE or a command");
    }
    o.args = argv + optind;
    o.env = n_env ? envs : NULL;
    struct err err = {0};
    int status = 0;
    if (oci_exec(&o, &status, &err) < 0) {
        fail(&err);
        /* The process could not be started: 127 when its program is not
         * there, 126 when it cannot be run, as a shell says it. */
        return status ? status : 1;
    }
    return status;
}

static int cmd_spec(int argc, char **argv)
{
    static const struct option lo[] = {{"rootless", no_argument, NULL, 'r'},
                                       {"bundle", required_argument, NULL, 'b'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    bool rootless = false;
    const char *bundle = ".";
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+b:h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'r':
            rootless = true;
            break;
        case 'b':
            bundle = optarg;
            break;
        case 'h':
            return help("spec");
        default:
            return usage_error("spec", "unknown option or missing argument");
        }
    }
    json_t *j = oci_spec_default(rootless);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/config.json", bundle);
    if (access(path, F_OK) == 0) {
        json_decref(j);
        return failf(EEXIST, true, "spec: `%s` already exists", path);
    }
    int r = j ? json_dump_file(j, path, JSON_INDENT(2)) : -1;
    json_decref(j);
    if (r < 0) {
        log_error("spec: write `%s` failed", path);
        return 1;
    }
    return 0;
}

static int cmd_features(void)
{
    json_t *mo = json_array();
    static const char *const opts[] = {
        "async",      "atime",      "bind",      "dev",        "diratime",
        "dirsync",    "exec",       "iversion",  "lazytime",   "loud",
        "mand",       "noatime",    "nodev",     "nodiratime", "noexec",
        "noiversion", "nolazytime", "nomand",    "norelatime", "nostrictatime",
        "nosuid",     "private",    "rbind",     "relatime",   "remount",
        "ro",         "rprivate",   "rshared",   "rslave",     "runbindable",
        "rw",         "shared",     "silent",    "slave",      "strictatime",
        "suid",       "sync",       "unbindable"};
    for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
        json_array_append_new(mo, json_string(opts[i]));
    json_t *ns = json_array();
    for (int k = 0; k < OCI_NS_COUNT; k++)
        json_array_append_new(ns, json_string(oci_ns_name(k)));
    json_t *caps = json_array();
    for (int c = 0; c < (int)cap_max_bits(); c++) {
        char *name = cap_to_name((cap_value_t)c);
        if (name) {
            for (char *p = name; *p; p++)
                *p = (char)toupper((unsigned char)*p);
            json_array_append_new(caps, json_string(name));
            cap_free(name);
        }
    }
    json_t *j = json_pack(
        "{s:s, s:s, s:[s,s,s,s,s,s], s:o, s:{s:o, s:o, s:{s:b, s:b, s:b}, s:{s:b}, s:{s:b}, "
        "s:{s:b}}, s:{s:s}}",
        "ociVersionMin", "1.0.0", "ociVersionMax", OCI_VERSION, "hooks", "prestart",
        "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
        "mountOptions", mo, "linux", "namespaces", ns, "capabilities", caps, "cgroup", "v1", false,
        "v2", true, "systemd", false, "seccomp", "enabled", true, "apparmor", "enabled", true,
        "selinux", "enabled", false, "annotations", "io.kinglet.runtime", "kinglet");
    char *s = json_dumps(j, JSON_INDENT(2));
    printf("%s\n", s);
    free(s);
    json_decref(j);
    return 0;
}

static int cli_main(int argc, char **argv, char **full_argv);

int oci_cli_main(int argc, char **argv, char **full_argv)
{
    int rc = cli_main(argc, argv, full_argv);
    /* A nonzero status without an error (run's, the container's) is no
     * failure of ours: nothing is written. */
    if (rc && error_fd >= 0 && cli_err.code)
        err_record_write(error_fd, &cli_err);
    return rc;
}

static int cli_main(int argc, char **argv, char **full_argv)
{
    static const struct option lo[] = {
        {"root", required_argument, NULL, 'r'},
        {"log", required_argument, NULL, 'l'},
        {"log-format", required_argument, NULL, 'f'},
        {"error-fd", required_argument, NULL, 'e'},
        {"debug", no_argument, NULL, 'd'},
        {"systemd-cgroup", no_argument, NULL, 's'},
        {"rootless", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct gopts g = {0};
    static FILE *logf;
    optind = 1;
    opterr = 0;
    for (int c_; (c_ = getopt_long(argc, argv, "+h", lo, NULL)) != -1;) {
        switch (c_) {
        case 'r':
            g.root = optarg;
            break;
        case 'l':
            logf = fopen(optarg, "ae");
            if (!logf) {
                fprintf(stderr, "kinglet oci: --log `%s`: %s\n", optarg, strerror(errno));
                return 1;
            }
            log_set_file(logf);
            break;
        case 'f':
            if (strcmp(optarg, "json") == 0)
                log_set_json(true);
            else if (strcmp(optarg, "text") != 0)
                return usage_error("oci", "--log-format: expected text or json");
            break;
        case 'd':
            log_set_level(LOG_LEVEL_DEBUG);
            break;
        case 'e': {
            char *end;
            errno = 0;
            long fd = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || fd < 0 || fd > INT_MAX ||
                fcntl((int)fd, F_GETFD) < 0)
                return usage_error("oci", "--error-fd: expected an open file descriptor");
            error_fd = (int)fd;
            break;
        }
        case 's':
        case 'R':
            break;
        case 'h':
            return help(NULL);
        default:
            return usage_error("oci", "unknown option or missing argument; see `kinglet oci "
                                      "--help`");
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "usage: kinglet oci [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGS]\n"
                        "see `kinglet oci --help`\n");
        return 2;
    }
    /* Commands see argv from their own name on. */
    char **cargv = argv + optind;
    int cargc = argc - optind;
    const char *cmd = cargv[0];
    if (strcmp(cmd, "help") == 0) {
        if (cargc > 2)
            return usage_error("help", "expected at most one command");
        return help(cargc == 2 && !is_help(cargv[1]) ? cargv[1] : NULL);
    }
    /* Commands without options of their own: -h or --help as the first
     * argument (the others see it in their option loops). */
    if (cargc >= 2 && is_help(cargv[1]))
        return help(cmd);
    /* Commands that put a copy of themselves into a container (the init:
     * what execs the container's program) run from a binary that nothing
     * there can write (base/exe.c). exec does not: its process runs
     * kinglet-enter, a sealed program of its own, until its execve. */
    if (strcmp(cmd, "create") == 0 || strcmp(cmd, "run") == 0) {
        int r = exe_reexec_sealed(full_argv);
        if (r < 0) {
            return failf(-r, false, "oci %s: cannot run from a sealed view of the kinglet binary",
                         cmd);
        }
    }
    /* Inherited on purpose, through the sealed re-execution above; not by
     * the container's process nor the monitor program. */
    if (error_fd >= 0)
        fcntl(error_fd, F_SETFD, FD_CLOEXEC);
    if (strcmp(cmd, "create") == 0)
        return cmd_create_run(&g, cargc, cargv, false);
    if (strcmp(cmd, "run") == 0)
        return cmd_create_run(&g, cargc, cargv, true);
    if (strcmp(cmd, "start") == 0)
        return cmd_start(&g, cargc, cargv);
    if (strcmp(cmd, "state") == 0)
        return cmd_state(&g, cargc, cargv);
    if (strcmp(cmd, "kill") == 0)
        return cmd_kill(&g, cargc, cargv);
    if (strcmp(cmd, "delete") == 0)
        return cmd_delete(&g, cargc, cargv);
    if (strcmp(cmd, "list") == 0)
        return cmd_list(&g, cargc, cargv);
    if (strcmp(cmd, "exec") == 0)
        return cmd_exec(&g, cargc, cargv);
    if (strcmp(cmd, "ps") == 0)
        return cmd_ps(&g, cargc, cargv);
    if (strcmp(cmd, "pause") == 0)
        return cmd_pause(&g, cargc, cargv, true);
    if (strcmp(cmd, "resume") == 0)
        return cmd_pause(&g, cargc, cargv, false);
    if (strcmp(cmd, "update") == 0)
        return cmd_update(&g, cargc, cargv);
    if (strcmp(cmd, "spec") == 0)
        return cmd_spec(cargc, cargv);
    if (strcmp(cmd, "features") == 0)
        return cmd_features();
    log_error("oci: unknown command `%s`; see `kinglet oci --help`", cmd);
    return 2;
}
