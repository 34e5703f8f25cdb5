/* `kinglet image pull|ls|rm|import|inspect|fsinfo`: the image service run
 * in-process on its own loop, directly on the store. The store's lock makes
 * this refuse to run next to a daemon that owns the same root. */
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "image/internal.h"

#define DEFAULT_ROOT "/var/lib/kinglet"

struct cli {
    struct image_service *svc;
    int pending;
    int failures;
    bool quiet;
};

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
    {"hold", "keep an image from removal for a holder (the runtime's use)", "hold REF HOLDER\n"},
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

int image_cli_help(const char *cmd)
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

static void pull_done(void *data, int r, const struct err *err, const char *image_id)
{
    struct cli *c = data;
    c->pending--;
    if (r < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(err));
        c->failures++;
        return;
    }
    if (!c->quiet)
        printf("%s\n", image_id);
}

static void rm_done(void *data, int r, const struct err *err)
{
    struct cli *c = data;
    c->pending--;
    if (r < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(err));
        c->failures++;
    }
}

static json_t *strv_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *image_json(struct image_service *svc, const struct image_info *img, bool paths)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(img->id));
    json_object_set_new(o, "manifest", json_string(img->manifest));
    json_object_set_new(o, "repo_tags", strv_json(img->repo_tags, img->n_repo_tags));
    json_object_set_new(o, "repo_digests", strv_json(img->repo_digests, img->n_repo_digests));
    json_object_set_new(o, "size", json_integer((json_int_t)img->size));
    json_object_set_new(o, "user", json_string(img->user));
    json_object_set_new(o, "pinned", json_boolean(img->pinned));
    json_object_set_new(o, "layers", strv_json(img->chain_ids, img->n_layers));
    if (paths) {
        json_t *a = json_array();
        for (size_t i = 0; i < img->n_layers; i++) {
            char *p = image_snapshot_path(svc, img->chain_ids[i]);
            json_array_append_new(a, json_string(p ? p : ""));
            free(p);
        }
        json_object_set_new(o, "snapshots", a);
    }
    return o;
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
    const struct image_info **v;
    int n = image_list(c->svc, optind < argc ? argv[optind] : NULL, &v);
    if (n < 0)
        return 1;
    if (as_json) {
        json_t *a = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(a, image_json(c->svc, v[i], false));
        char *s = json_dumps(a, JSON_INDENT(1));
        printf("%s\n", s);
        free(s);
        json_decref(a);
    } else {
        if (!quiet)
            printf("%-72s  %-12s  %s\n", "IMAGE ID", "SIZE", "TAGS");
        for (int i = 0; i < n; i++) {
            if (quiet) {
                printf("%s\n", v[i]->id);
                continue;
            }
            printf("%-72s  %-12llu  ", v[i]->id, (unsigned long long)v[i]->size);
            for (size_t t = 0; t < v[i]->n_repo_tags; t++)
                printf("%s%s", t ? "," : "", v[i]->repo_tags[t]);
            printf("%s\n", v[i]->n_repo_tags ? "" : "<none>");
        }
    }
    free(v);
    return 0;
}

static int cmd_inspect(struct cli *c, int argc, char **argv)
{
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    const struct image_info *img = image_lookup(c->svc, argv[1]);
    if (!img) {
        fprintf(stderr, "kinglet image: `%s`: no such image\n", argv[1]);
        return 1;
    }
    json_t *o = image_json(c->svc, img, true);
    char *s = json_dumps(o, JSON_INDENT(1));
    printf("%s\n", s);
    free(s);
    json_decref(o);
    return 0;
}

static int cmd_fsinfo(struct cli *c)
{
    struct image_fs_usage u;
    struct err err = {0};
    if (image_fs_info(c->svc, &u, &err) < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(&err));
        return 1;
    }
    printf("{\"mountpoint\": \"%s\", \"used_bytes\": %llu, \"inodes_used\": %llu}\n", u.mountpoint,
           (unsigned long long)u.used_bytes, (unsigned long long)u.inodes_used);
    image_fs_usage_clear(&u);
    return 0;
}

/* Spools stdin into a file under the store's tmp/ (removed at next start if
 * we die). */
static int spool_stdin(const char *root, char **ret)
{
    char *path;
    if (asprintf(&path, "%s/image/tmp/stdin-%d.tar", root, (int)getpid()) < 0)
        return -ENOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        free(path);
        return -errno;
    }
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? -errno : 0;
            close(fd);
            if (e < 0) {
                unlink(path);
                free(path);
                return e;
            }
            *ret = path;
            return 0;
        }
        int e = write_all(fd, buf, (size_t)n);
        if (e < 0) {
            close(fd);
            unlink(path);
            free(path);
            return e;
        }
    }
}

static const struct option cli_opts[] = {
    {"root", required_argument, NULL, 'r'},
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

bool image_cli_opt_has_arg(const char *arg)
{
    if (!str_has_prefix(arg, "--"))
        return false;
    for (const struct option *o = cli_opts; o->name; o++)
        if (strcmp(arg + 2, o->name) == 0)
            return o->has_arg == required_argument;
    return false;
}

int image_cli_main(int argc, char **argv)
{
    const char *root = DEFAULT_ROOT;
    struct image_config cfg = {.limits = IMAGE_LIMITS_DEFAULT};
    const char **mirrors = calloc((size_t)argc, sizeof(char *));
    const char **insecure = calloc((size_t)argc, sizeof(char *));
    char *platform = NULL;
    int rc = 2;
    if (!mirrors || !insecure)
        goto out;
    cfg.mirrors = mirrors;
    cfg.insecure = insecure;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+h", cli_opts, NULL)) != -1) {
        switch (ch) {
        case 'r':
            root = optarg;
            break;
        case 'm':
            mirrors[cfg.n_mirrors++] = optarg;
            break;
        case 'i':
            insecure[cfg.n_insecure++] = optarg;
            break;
        case 'c':
            cfg.certs_dir = optarg;
            break;
        case 'n':
            cfg.no_origin_fallback = true;
            break;
        case 'j':
            cfg.pull_concurrency = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'L':
            if (parse_size(optarg, &cfg.limits.max_layer_size) < 0) {
                fprintf(stderr, "kinglet image: --max-layer-size: `%s` is not a size\n", optarg);
                goto out;
            }
            break;
        case 'F':
            if (parse_size_or_percent(optarg, &cfg.limits.min_free, &cfg.limits.min_free_pct) < 0) {
                fprintf(stderr, "kinglet image: --image-min-free: `%s` is not a size or N%%\n",
                        optarg);
                goto out;
            }
            break;
        case 'R': {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (!optarg[0] || *end || optarg[0] == '-' || v > 1000000) {
                fprintf(stderr, "kinglet image: --max-layer-ratio: `%s` is not 0..1000000\n",
                        optarg);
                goto out;
            }
            cfg.limits.max_layer_ratio = (unsigned)v;
            break;
        }
        case 'p': {
            free(platform);
            platform = strdup(optarg);
            char *s1 = platform ? strchr(platform, '/') : NULL;
            if (!s1) {
                fprintf(stderr, "kinglet image: --platform wants OS/ARCH[/VARIANT]\n");
                goto out;
            }
            *s1 = '\0';
            char *s2 = strchr(s1 + 1, '/');
            if (s2)
                *s2 = '\0';
            cfg.os = platform;
            cfg.arch = s1 + 1;
            cfg.variant = s2 ? s2 + 1 : NULL;
            break;
        }
        case 'h':
            usage(stdout);
            rc = 0;
            goto out;
        default:
            usage(stderr);
            goto out;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        goto out;
    }
    char *cmd = argv[optind];
    argc -= optind;
    argv += optind;
    if (strcmp(cmd, "pull") && strcmp(cmd, "ls") && strcmp(cmd, "rm") && strcmp(cmd, "import") &&
        strcmp(cmd, "inspect") && strcmp(cmd, "fsinfo") && strcmp(cmd, "hold") &&
        strcmp(cmd, "release")) {
        fprintf(stderr, "kinglet image: unknown command `%s`\n", cmd);
        usage(stderr);
        goto out;
    }
    cfg.root = root;

    uv_loop_t loop;
    if (uv_loop_init(&loop) < 0)
        goto out;
    struct cli c = {0};
    struct err err = {0};
    if (image_service_new(&loop, &cfg, &c.svc, &err) < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(&err));
        uv_loop_close(&loop);
        rc = 1;
        goto out;
    }
    rc = 0;
    if (strcmp(cmd, "ls") == 0) {
        rc = cmd_ls(&c, argc, argv);
    } else if (strcmp(cmd, "inspect") == 0) {
        rc = cmd_inspect(&c, argc, argv);
    } else if (strcmp(cmd, "fsinfo") == 0) {
        rc = cmd_fsinfo(&c);
    } else if (strcmp(cmd, "pull") == 0) {
        struct image_pull_opts po;
        int first = image_pull_opts_parse(argc, argv, &po);
        if (first < 0)
            rc = 2;
        c.quiet = po.quiet;
        for (int i = first; i < argc && rc == 0; i++) {
            err_clear(&err);
            if (image_pull(c.svc, argv[i], &po.auth, pull_done, &c, &err) < 0) {
                fprintf(stderr, "kinglet image: %s\n", err_str(&err));
                c.failures++;
            } else {
                c.pending++;
            }
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        image_pull_opts_clear(&po);
        if (c.failures)
            rc = 1;
    } else if (strcmp(cmd, "hold") == 0 || strcmp(cmd, "release") == 0) {
        bool hold = cmd[0] == 'h';
        if (argc != (hold ? 3 : 2)) {
            rc = 2;
        } else {
            int r = hold ? image_hold(c.svc, argv[1], argv[2], rm_done, &c, &err)
                         : image_release(c.svc, argv[1], rm_done, &c, &err);
            if (r < 0) {
                fprintf(stderr, "kinglet image: %s\n", err_str(&err));
                rc = 1;
            } else {
                c.pending++;
                uv_run(&loop, UV_RUN_DEFAULT);
                rc = c.failures ? 1 : 0;
            }
        }
    } else if (strcmp(cmd, "rm") == 0) {
        for (int i = 1; i < argc; i++) {
            err_clear(&err);
            if (image_remove(c.svc, argv[i], rm_done, &c, &err) < 0) {
                fprintf(stderr, "kinglet image: %s\n", err_str(&err));
                c.failures++;
            } else {
                c.pending++;
            }
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = argc < 2 ? 2 : c.failures ? 1 : 0;
    } else if (strcmp(cmd, "import") == 0) {
        static const struct option iopts[] = {{"socket", required_argument, NULL, 's'}, {0}};
        optind = 1;
        while ((ch = getopt_long(argc, argv, "+", iopts, NULL)) != -1)
            if (ch != 's')
                rc = 2;
        _cleanup_free_ char *spooled = NULL;
        const char *path = optind < argc ? argv[optind] : NULL;
        if (!path)
            rc = 2;
        if (rc == 0 && strcmp(path, "-") == 0) {
            int r = spool_stdin(root, &spooled);
            if (r < 0) {
                fprintf(stderr, "kinglet image: read stdin: %s\n", strerror(-r));
                rc = 1;
            }
            path = spooled;
        }
        if (rc == 0) {
            if (image_import(c.svc, path, pull_done, &c, &err) < 0) {
                fprintf(stderr, "kinglet image: %s\n", err_str(&err));
                rc = 1;
            } else {
                c.pending++;
                uv_run(&loop, UV_RUN_DEFAULT);
                rc = c.failures ? 1 : 0;
            }
        }
        if (spooled)
            unlink(spooled);
    }
    if (rc == 2)
        usage(stderr);
    image_service_free(c.svc);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
out:
    free(mirrors);
    free(insecure);
    free(platform);
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
