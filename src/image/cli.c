/* `kinglet image pull|ls|inspect|rm|import|fsinfo|hold|release`: the one
 * command line. Options, help, output and exit status live here; the work
 * goes to a back end (struct image_cli_ops): a running daemon over its
 * socket when it owns the store or --socket says so (the connect function
 * src/cri gives), the store directly otherwise (cli_store.c). Pull progress
 * is shown per layer on a terminal only (cli_progress.c), with either. */
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "image/internal.h"

#define DEFAULT_ROOT "/var/lib/kinglet"

static const char global_usage[] =
    "usage: kinglet image [OPTIONS] COMMAND [ARGS]\n"
    "       kinglet image help [COMMAND]\n"
    "\n"
    "The image store: through the daemon's socket when a daemon owns it (or with\n"
    "--socket PATH), directly otherwise.\n"
    "\n"
    "Options:\n"
    "  --root DIR                   daemon root (default " DEFAULT_ROOT ")\n"
    "  --socket PATH                go through the daemon at PATH\n"
    "  --registry-mirror HOST=URL   pull HOST's images from URL first (repeatable)\n"
    "  --insecure-registry HOST     allow plain HTTP / unverified TLS (repeatable)\n"
    "  --certs-dir DIR              per-registry ca.crt, client.cert, client.key\n"
    "  --no-origin-fallback         with mirrors, never contact the origin\n"
    "  --pull-concurrency N         layers downloaded at once (default 3)\n"
    "  --max-layer-size SIZE        refuse layers unpacking to more (default: none)\n"
    "  --max-layer-ratio N          refuse layers whose tar grows past N times\n"
    "                               their compressed size, at least 64M\n"
    "                               (default 100; 0 = none)\n"
    "  --image-min-free SIZE|N%     free space and inodes a pull leaves\n"
    "                               (default 15%: kubelet evicts below it)\n"
    "  --platform OS/ARCH[/VARIANT] platform to pick from an index\n"
    "  -h, --help                   show this help\n"
    "\n"
    "Commands:\n";

static const struct {
    const char *name, *summary, *usage;
} helps[] = {
    {"pull", "pull images from their registries",
     "pull [--creds USER[:PASS]] [--password-stdin] [--creds-file FILE]\n"
     "       [--auth B64] [--identity-token T] [--registry-token T] [-q] REF...\n"
     "  --creds USER[:PASS]          basic credentials for the registry (a\n"
     "                               password here shows in ps: prefer the next two)\n"
     "  --password-stdin             the password of --creds USER from stdin\n"
     "  --creds-file FILE            USER:PASS from the first line of FILE\n"
     "  --auth B64                   USER:PASS base64-encoded\n"
     "  --identity-token T, --registry-token T   token credentials\n"
     "  -q, --quiet                  print nothing on success\n"},
    {"ls", "list the images",
     "ls [--json] [-q] [FILTER]\n"
     "  --json                       as JSON\n"
     "  -q, --quiet                  ids only\n"},
    {"inspect", "print an image as JSON", "inspect REF\n"},
    {"rm", "remove images", "rm REF...\n"},
    {"import", "import a docker-archive or oci-archive tarball",
     "import [--socket PATH] FILE|-\n"
     "  FILE|-                       the archive, or - for stdin\n"},
    {"fsinfo", "print the image filesystem's usage", "fsinfo\n"},
    {"hold", "keep an image's layers for a holder, even if the image is removed",
     "hold HOLDER REF\n"},
    {"release", "end a hold", "release HOLDER\n"},
    {"help", "show the help of a command", "help [COMMAND]\n"},
};

static void usage(FILE *f)
{
    fputs(global_usage, f);
    for (size_t i = 0; i < ARRAY_SIZE(helps); i++)
        fprintf(f, "  %-8s %s\n", helps[i].name, helps[i].summary);
    fprintf(f, "\nSee `kinglet image COMMAND --help` for a command's options.\n");
}

static int image_cli_help(const char *cmd)
{
    if (!cmd) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(helps); i++) {
        if (strcmp(helps[i].name, cmd) != 0)
            continue;
        /* The synopsis lines, the summary, then the options. */
        const char *opts = helps[i].usage;
        while ((opts = strstr(opts, "\n  ")) && opts[3] == ' ')
            opts++;
        int syn = opts ? (int)(opts - helps[i].usage) + 1 : (int)strlen(helps[i].usage);
        printf("usage: kinglet image [OPTIONS] %.*s\n%s.\n", syn, helps[i].usage, helps[i].summary);
        if (opts)
            printf("\nOptions:\n%s", opts + 1);
        return 0;
    }
    fprintf(stderr, "kinglet image: unknown command `%s`; see `kinglet image --help`\n", cmd);
    return 2;
}

void image_size_human(uint64_t bytes, char buf[16])
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, 16, "%u B", (unsigned)bytes);
        return;
    }
    double v = (double)bytes / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    /* 1023.96 would print as "1024.0": go up a unit instead */
    if (v >= 1023.95 && u + 1 < ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    snprintf(buf, 16, "%.1f %s", v, units[u]);
}

static json_t *strv_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

json_t *image_cli_image_json(const char *id, char *const *tags, size_t n_tags, char *const *digests,
                             size_t n_digests, uint64_t size, const char *user, bool pinned)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "repo_tags", strv_json(tags, n_tags));
    json_object_set_new(o, "repo_digests", strv_json(digests, n_digests));
    json_object_set_new(o, "size", json_integer((json_int_t)size));
    json_object_set_new(o, "user", json_string(user ? user : ""));
    json_object_set_new(o, "pinned", json_boolean(pinned));
    return o;
}

json_t *image_info_verbose_json(struct image_service *svc, const struct image_info *img)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(img->id));
    json_object_set_new(o, "manifest", json_string(img->manifest));
    json_object_set_new(o, "user", json_string(img->user));
    json_object_set_new(o, "createdAt", json_integer((json_int_t)img->created_ns));
    json_t *layers = json_array();
    for (size_t i = 0; i < img->n_layers; i++) {
        char *p = image_snapshot_path(svc, img->chain_ids[i]);
        json_array_append_new(
            layers, json_pack("{s:s,s:s}", "chainID", img->chain_ids[i], "path", p ? p : ""));
        free(p);
    }
    json_object_set_new(o, "layers", layers);
    return o;
}

/* ---- the commands ----------------------------------------------------------- */

struct cli {
    const struct image_cli_ops *ops;
    void *ctx;
    int failures;
    bool quiet;
};

static void fail(struct cli *c, const struct err *err)
{
    fprintf(stderr, "kinglet image: %s\n", err_str(err));
    c->failures++;
}

static void print_json(json_t *j, size_t flags)
{
    char *s = json_dumps(j, flags);
    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(j);
}

static void pulled(void *data, const char *ref, int r, const struct err *err, const char *image_id)
{
    (void)ref;
    struct cli *c = data;
    if (r < 0)
        fail(c, err);
    else if (!c->quiet)
        printf("%s\n", image_id);
    fflush(stdout);
}

static int cmd_pull(struct cli *c, int argc, char **argv)
{
    struct image_pull_opts po;
    int first = image_pull_opts_parse(argc, argv, &po);
    if (first < 0)
        return 2;
    c->quiet = po.quiet;
    bool progress = !po.quiet && isatty(STDOUT_FILENO);
    c->ops->pull(c->ctx, argv + first, (size_t)(argc - first), &po.auth, progress, pulled, c);
    image_pull_opts_clear(&po);
    return c->failures ? 1 : 0;
}

static void ls_row(json_t *img)
{
    char size[16];
    image_size_human((uint64_t)json_integer_value(json_object_get(img, "size")), size);
    printf("%-72s  %-10s  ", json_string_value(json_object_get(img, "id")), size);
    json_t *tags = json_object_get(img, "repo_tags");
    for (size_t t = 0; t < json_array_size(tags); t++)
        printf("%s%s", t ? "," : "", json_string_value(json_array_get(tags, t)));
    printf("%s\n", json_array_size(tags) ? "" : "<none>");
}

/* The verbose info's manifest and chain ids (and with paths, the snapshot
 * paths), also at the top of an image object, as `ls --json` and `inspect`
 * have always shown them. */
static void add_layers(json_t *o, bool paths)
{
    json_t *info = json_object_get(o, "info"), *layers = json_object_get(info, "layers");
    json_t *ids = json_array(), *dirs = json_array();
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *l = json_array_get(layers, i);
        json_array_append(ids, json_object_get(l, "chainID"));
        json_array_append(dirs, json_object_get(l, "path"));
    }
    json_t *manifest = json_object_get(info, "manifest");
    json_object_set(o, "manifest", manifest ? manifest : json_null());
    json_object_set_new(o, "layers", ids);
    if (paths)
        json_object_set_new(o, "snapshots", dirs);
    else
        json_decref(dirs);
}

/* ls --json: each image as inspect knows it, less the info and paths. */
static int ls_details(struct cli *c, json_t *a)
{
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *img = json_array_get(a, i), *full;
        struct err err = {0};
        if (c->ops->inspect(c->ctx, json_string_value(json_object_get(img, "id")), &full, &err) < 0)
            continue; /* removed meanwhile */
        add_layers(full, false);
        json_object_del(full, "info");
        json_array_set_new(a, i, full);
    }
    return 0;
}

static int cmd_ls(struct cli *c, int argc, char **argv)
{
    bool as_json = false, quiet = false;
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"quiet", no_argument, NULL, 'q'}, {0}};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+jq", opts, NULL)) != -1) {
        if (ch == 'j')
            as_json = true;
        else if (ch == 'q')
            quiet = true;
        else
            return 2;
    }
    if (argc - optind > 1)
        return 2;
    json_t *a;
    struct err err = {0};
    if (c->ops->list(c->ctx, optind < argc ? argv[optind] : NULL, &a, &err) < 0) {
        fail(c, &err);
        return 1;
    }
    if (as_json) {
        ls_details(c, a);
        print_json(a, JSON_INDENT(1));
        return 0;
    }
    if (!quiet)
        printf("%-72s  %-10s  %s\n", "IMAGE ID", "SIZE", "TAGS");
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *img = json_array_get(a, i);
        if (quiet)
            printf("%s\n", json_string_value(json_object_get(img, "id")));
        else
            ls_row(img);
    }
    json_decref(a);
    return 0;
}

static int cmd_inspect(struct cli *c, int argc, char **argv)
{
    if (argc != 2)
        return 2;
    json_t *o;
    struct err err = {0};
    if (c->ops->inspect(c->ctx, argv[1], &o, &err) < 0) {
        fail(c, &err);
        return 1;
    }
    add_layers(o, true);
    print_json(o, JSON_INDENT(1));
    return 0;
}

static int cmd_rm(struct cli *c, int argc, char **argv)
{
    if (argc < 2)
        return 2;
    for (int i = 1; i < argc; i++) {
        struct err err = {0};
        if (c->ops->remove(c->ctx, argv[i], &err) < 0)
            fail(c, &err);
    }
    return c->failures ? 1 : 0;
}

static int cmd_import(struct cli *c, int argc, char **argv)
{
    if (argc != 2)
        return 2;
    char *id = NULL;
    struct err err = {0};
    if (c->ops->import(c->ctx, argv[1], &id, &err) < 0) {
        fail(c, &err);
        return 1;
    }
    printf("%s\n", id ? id : "");
    free(id);
    return 0;
}

static int cmd_fsinfo(struct cli *c, int argc)
{
    if (argc != 1)
        return 2;
    json_t *o;
    struct err err = {0};
    if (c->ops->fsinfo(c->ctx, &o, &err) < 0) {
        fail(c, &err);
        return 1;
    }
    print_json(o, JSON_PRESERVE_ORDER);
    return 0;
}

static int cmd_hold(struct cli *c, int argc, char **argv)
{
    bool hold = argv[0][0] == 'h';
    if (argc != (hold ? 3 : 2))
        return 2;
    struct err err = {0};
    int r = hold ? c->ops->hold(c->ctx, argv[1], argv[2], &err)
                 : c->ops->release(c->ctx, argv[1], &err);
    if (r < 0) {
        fail(c, &err);
        return 1;
    }
    return 0;
}

static int run_command(struct cli *c, int argc, char **argv)
{
    const char *cmd = argv[0];
    if (strcmp(cmd, "pull") == 0)
        return cmd_pull(c, argc, argv);
    if (strcmp(cmd, "ls") == 0)
        return cmd_ls(c, argc, argv);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(c, argc, argv);
    if (strcmp(cmd, "rm") == 0)
        return cmd_rm(c, argc, argv);
    if (strcmp(cmd, "import") == 0)
        return cmd_import(c, argc, argv);
    if (strcmp(cmd, "fsinfo") == 0)
        return cmd_fsinfo(c, argc);
    return cmd_hold(c, argc, argv);
}

static bool known(const char *cmd)
{
    for (size_t i = 0; i < ARRAY_SIZE(helps); i++)
        if (strcmp(helps[i].name, cmd) == 0 && strcmp(cmd, "help") != 0)
            return true;
    return false;
}

static const struct option cli_opts[] = {
    {"root", required_argument, NULL, 'r'},
    {"socket", required_argument, NULL, 's'},
    {"registry-mirror", required_argument, NULL, 'm'},
    {"insecure-registry", required_argument, NULL, 'i'},
    {"certs-dir", required_argument, NULL, 'c'},
    {"no-origin-fallback", no_argument, NULL, 'n'},
    {"pull-concurrency", required_argument, NULL, 'j'},
    {"max-layer-size", required_argument, NULL, 'L'},
    {"image-min-free", required_argument, NULL, 'F'},
    {"max-layer-ratio", required_argument, NULL, 'R'},
    {"platform", required_argument, NULL, 'p'},
    {"help", no_argument, NULL, 'h'},
    {0},
};

static bool opt_has_arg(const char *arg)
{
    if (!str_has_prefix(arg, "--"))
        return false;
    for (const struct option *o = cli_opts; o->name; o++)
        if (strcmp(arg + 2, o->name) == 0)
            return o->has_arg == required_argument;
    return false;
}

static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* What the global options set. */
struct globals {
    struct image_config cfg;
    const char *root, *socket;
    const char **mirrors, **insecure;
    char *platform;
};

static int parse_platform(struct globals *g, const char *arg)
{
    free(g->platform);
    g->platform = strdup(arg);
    char *s1 = g->platform ? strchr(g->platform, '/') : NULL;
    if (!s1) {
        fprintf(stderr, "kinglet image: --platform wants OS/ARCH[/VARIANT]\n");
        return -EINVAL;
    }
    *s1 = '\0';
    char *s2 = strchr(s1 + 1, '/');
    if (s2)
        *s2 = '\0';
    g->cfg.os = g->platform;
    g->cfg.arch = s1 + 1;
    g->cfg.variant = s2 ? s2 + 1 : NULL;
    return 0;
}

static int parse_global(struct globals *g, int ch)
{
    struct image_config *cfg = &g->cfg;
    char *end;
    unsigned long v;
    switch (ch) {
    case 'r':
        g->root = optarg;
        return 0;
    case 's':
        g->socket = optarg;
        return 0;
    case 'm':
        g->mirrors[cfg->n_mirrors++] = optarg;
        return 0;
    case 'i':
        g->insecure[cfg->n_insecure++] = optarg;
        return 0;
    case 'c':
        cfg->certs_dir = optarg;
        return 0;
    case 'n':
        cfg->no_origin_fallback = true;
        return 0;
    case 'j':
        cfg->pull_concurrency = (unsigned)strtoul(optarg, NULL, 10);
        return 0;
    case 'L':
        if (parse_size(optarg, &cfg->limits.max_layer_size) == 0)
            return 0;
        fprintf(stderr, "kinglet image: --max-layer-size: `%s` is not a size\n", optarg);
        return -EINVAL;
    case 'F':
        if (parse_size_or_percent(optarg, &cfg->limits.min_free, &cfg->limits.min_free_pct) == 0)
            return 0;
        fprintf(stderr, "kinglet image: --image-min-free: `%s` is not a size or N%%\n", optarg);
        return -EINVAL;
    case 'R':
        v = strtoul(optarg, &end, 10);
        if (!optarg[0] || *end || optarg[0] == '-' || v > 1000000) {
            fprintf(stderr, "kinglet image: --max-layer-ratio: `%s` is not 0..1000000\n", optarg);
            return -EINVAL;
        }
        cfg->limits.max_layer_ratio = (unsigned)v;
        return 0;
    case 'p':
        return parse_platform(g, optarg);
    default:
        usage(stderr);
        return -EINVAL;
    }
}

/* Help needs neither the store nor the daemon: `help [COMMAND]`, or -h or
 * --help anywhere before a `--` (no image reference or option value can be
 * either). Returns -1 when this is no call for help. */
static int help_asked(int argc, char **argv)
{
    int cmd = 0;
    for (int i = 1; i < argc && !cmd; i++) {
        if (i + 1 < argc && argv[i + 1][0] != '-' && opt_has_arg(argv[i]))
            i++;
        else if (argv[i][0] != '-')
            cmd = i;
    }
    if (cmd && strcmp(argv[cmd], "help") == 0) {
        if (argc - cmd > 2) {
            fprintf(stderr, "kinglet image: help: expected at most one command\n");
            return 2;
        }
        const char *what = cmd + 1 < argc ? argv[cmd + 1] : NULL;
        return image_cli_help(what && !is_help(what) ? what : NULL);
    }
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (is_help(argv[i]))
            return image_cli_help(cmd && i > cmd ? argv[cmd] : NULL);
    return -1;
}

/* The command's arguments without a --socket among them (accepted after
 * the command too, as `import --socket PATH FILE` always was). */
static int take_socket(struct globals *g, int argc, char **argv, char **out)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            g->socket = argv[++i];
        else if (str_has_prefix(argv[i], "--socket="))
            g->socket = argv[i] + 9;
        else
            out[n++] = argv[i];
    }
    out[n] = NULL;
    return n;
}

static int open_backend(struct globals *g, image_cli_connect_fn connect, struct cli *c)
{
    int r = connect ? connect(g->root, g->socket, &c->ops, &c->ctx) : 0;
    if (r != 0)
        return r < 0 ? 1 : 0;
    struct err err = {0};
    g->cfg.root = g->root;
    if (image_cli_store_open(&g->cfg, &c->ops, &c->ctx, &err) < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(&err));
        return 1;
    }
    return 0;
}

int image_cli_main(int argc, char **argv, image_cli_connect_fn connect)
{
    int rc = help_asked(argc, argv);
    if (rc >= 0)
        return rc;
    struct globals g = {.cfg = {.limits = IMAGE_LIMITS_DEFAULT}, .root = DEFAULT_ROOT};
    g.mirrors = calloc((size_t)argc, sizeof(char *));
    g.insecure = calloc((size_t)argc, sizeof(char *));
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    rc = 2;
    if (!g.mirrors || !g.insecure || !args)
        goto out;
    g.cfg.mirrors = g.mirrors;
    g.cfg.insecure = g.insecure;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+h", cli_opts, NULL)) != -1)
        if (parse_global(&g, ch) < 0)
            goto out;
    if (optind >= argc) {
        usage(stderr);
        goto out;
    }
    int n = take_socket(&g, argc - optind, argv + optind, args);
    if (!known(args[0])) {
        fprintf(stderr, "kinglet image: unknown command `%s`\n", args[0]);
        usage(stderr);
        goto out;
    }
    struct cli c = {0};
    if ((rc = open_backend(&g, connect, &c)) != 0)
        goto out;
    rc = run_command(&c, n, args);
    c.ops->close(c.ctx);
    if (rc == 2)
        fprintf(stderr, "kinglet image: bad usage; see `kinglet image %s --help`\n", args[0]);
out:
    free(g.mirrors);
    free(g.insecure);
    free(g.platform);
    free(args);
    return rc;
}

#define SECRET_MAX (64u << 10)

/* The first line of what fd holds (at most SECRET_MAX bytes), without its
 * line end: the way docker's --password-stdin reads. */
static int read_secret(int fd, char **ret)
{
    char *s = NULL;
    int r = read_fd_all(fd, SECRET_MAX, &s, NULL);
    if (r < 0)
        return r;
    s[strcspn(s, "\r\n")] = '\0';
    *ret = s;
    return 0;
}

/* Sets the username and password from "USER[:PASS]" (owned by o->creds). */
static int set_creds(struct image_pull_opts *o, char *creds)
{
    if (!creds)
        return -ENOMEM;
    if (o->creds)
        explicit_bzero(o->creds, strlen(o->creds));
    free(o->creds);
    o->creds = creds;
    char *colon = strchr(creds, ':');
    o->auth.password = NULL;
    if (colon) {
        *colon = '\0';
        o->auth.password = colon + 1;
    }
    o->auth.username = creds;
    return 0;
}

int image_pull_opts_parse(int argc, char **argv, struct image_pull_opts *ret)
{
    static const struct option popts[] = {
        {"creds", required_argument, NULL, 'u'},
        {"creds-file", required_argument, NULL, 'F'},
        {"password-stdin", no_argument, NULL, 'P'},
        {"auth", required_argument, NULL, 'a'},
        {"identity-token", required_argument, NULL, 'I'},
        {"registry-token", required_argument, NULL, 'T'},
        {"quiet", no_argument, NULL, 'q'},
        {0},
    };
    *ret = (struct image_pull_opts){0};
    int ch, r = 0;
    bool pw_stdin = false;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+q", popts, NULL)) != -1) {
        ret->have_auth |= ch != 'q';
        if (ch == 'u') {
            if (strchr(optarg, ':'))
                fprintf(stderr, "kinglet image: warning: a password given with --creds shows in "
                                "ps; use --password-stdin or --creds-file\n");
            r = set_creds(ret, strdup(optarg));
        } else if (ch == 'F') {
            _cleanup_close_ int fd = open(optarg, O_RDONLY | O_CLOEXEC);
            char *line = NULL;
            r = fd < 0 ? -errno : read_secret(fd, &line);
            if (r == 0 && !strchr(line, ':'))
                r = -EINVAL;
            if (r == 0)
                r = set_creds(ret, line);
            else
                free(line);
            if (r < 0)
                fprintf(stderr, "kinglet image: --creds-file `%s`: %s\n", optarg,
                        r == -EINVAL ? "no USER:PASSWORD line" : strerror(-r));
        } else if (ch == 'P') {
            pw_stdin = true;
        } else if (ch == 'a') {
            ret->auth.auth = optarg;
        } else if (ch == 'I') {
            ret->auth.identity_token = optarg;
        } else if (ch == 'T') {
            ret->auth.registry_token = optarg;
        } else if (ch == 'q') {
            ret->quiet = true;
        } else {
            r = -EINVAL;
        }
        if (r < 0)
            break;
    }
    if (r == 0 && pw_stdin) {
        /* docker login's rule: the user on the command line, the
         * password alone on stdin */
        if (!ret->auth.username || ret->auth.password) {
            fprintf(stderr, "kinglet image: --password-stdin wants --creds USER (no password)\n");
            r = -EINVAL;
        } else if ((r = read_secret(STDIN_FILENO, &ret->secret)) < 0) {
            fprintf(stderr, "kinglet image: --password-stdin: %s\n", strerror(-r));
        } else {
            ret->auth.password = ret->secret;
        }
    }
    if (r < 0 || optind >= argc) {
        image_pull_opts_clear(ret);
        return -EINVAL;
    }
    return optind;
}

void image_pull_opts_clear(struct image_pull_opts *o)
{
    if (o->creds)
        explicit_bzero(o->creds, strlen(o->creds));
    if (o->secret)
        explicit_bzero(o->secret, strlen(o->secret));
    free(o->creds);
    free(o->secret);
    *o = (struct image_pull_opts){0};
}
