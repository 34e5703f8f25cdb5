/* `kinglet image ...` through a running daemon. When the daemon owns the
 * store (its lock is taken) or --socket is given, the command goes over the
 * daemon's gRPC socket: CRI ImageService calls for pull, ls, inspect, rm and
 * fsinfo, and kinglet's own /kinglet.v1.Images/Import for import (CRI has
 * none). Otherwise image_cli_main() works on the store directly. */
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <sys/file.h>

#include <jansson.h>

#include "cri/internal.h"

#define DEFAULT_SOCKET  "/run/kinglet/kinglet.sock"
#define DEFAULT_ROOT    "/var/lib/kinglet"
#define IS              "/runtime.v1.ImageService/"
#define CALL_TIMEOUT_MS (3600u * 1000)

/* The handler of the private Import route: ImageSpec.image is the path of
 * an archive the daemon reads (the socket is root's: the caller could read
 * it anyway); the answer is a PullImageResponse with the last image's id. */
static void import_done(void *data, int r, const struct err *err, const char *image_id)
{
    struct cri_call *call = data;
    if (r < 0) {
        cri_fail_err(call, err);
        return;
    }
    Runtime__V1__PullImageResponse resp = RUNTIME__V1__PULL_IMAGE_RESPONSE__INIT;
    resp.image_ref = (char *)image_id;
    cri_reply(call, &resp.base);
}

void cri_import_image(struct cri_call *call)
{
    Runtime__V1__ImageSpec *req = (Runtime__V1__ImageSpec *)call->req;
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    if (!req->image || req->image[0] != '/') {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "Import: `%s` is not an absolute path",
                 req->image ? req->image : "");
        return;
    }
    struct err err = {0};
    if (image_import(call->cri->images, req->image, import_done, call, &err) < 0)
        cri_fail_err(call, &err);
}

/* ---- the client --------------------------------------------------------- */

static int call(const char *sock, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *out, ProtobufCMessage **ret)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    _cleanup_free_ uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return -ENOMEM;
    protobuf_c_message_pack(req, data);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int status = 0;
    char *message = NULL;
    struct err err = {0};
    int r = grpc_client_call(sock, method, data, len, CALL_TIMEOUT_MS, &resp, &resp_len, &status,
                             &message, &err);
    if (r < 0) {
        fprintf(stderr, "kinglet image: %s\n", err_str(&err));
        return r;
    }
    if (status != 0) {
        fprintf(stderr, "kinglet image: %s: %s\n", grpc_status_name(status),
                message ? message : "");
        free(message);
        free(resp);
        return -EIO;
    }
    free(message);
    *ret = protobuf_c_message_unpack(out, NULL, resp_len, resp);
    free(resp);
    if (!*ret) {
        fprintf(stderr, "kinglet image: cannot decode the daemon's answer\n");
        return -EPROTO;
    }
    return 0;
}

static json_t *strv_json(char **v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *image_json(const Runtime__V1__Image *img)
{
    return json_pack("{s:s,s:o,s:o,s:I,s:s,s:b}", "id", img->id, "repo_tags",
                     strv_json(img->repo_tags, img->n_repo_tags), "repo_digests",
                     strv_json(img->repo_digests, img->n_repo_digests), "size",
                     (json_int_t)img->size, "user",
                     img->uid ? "" : (img->username ? img->username : ""), "pinned", img->pinned);
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(1));
    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(j);
}

static int spool(char **ret)
{
    char tmpl[] = "/var/tmp/kinglet-import-XXXXXX";
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (n > 0 && write(fd, buf, (size_t)n) != n)) {
            int e = -errno;
            close(fd);
            unlink(tmpl);
            return e ? e : -EIO;
        }
        if (n == 0)
            break;
    }
    close(fd);
    *ret = strdup(tmpl);
    return *ret ? 0 : -ENOMEM;
}

static int daemon_main(const char *sock, int argc, char **argv)
{
    const char *cmd = argv[0];
    int ok = 0;
    if (strcmp(cmd, "pull") == 0) {
        struct image_pull_opts po;
        int first = image_pull_opts_parse(argc, argv, &po);
        if (first < 0)
            return 2;
        Runtime__V1__AuthConfig auth = RUNTIME__V1__AUTH_CONFIG__INIT;
        auth.username = (char *)po.auth.username;
        auth.password = (char *)po.auth.password;
        auth.auth = (char *)po.auth.auth;
        auth.identity_token = (char *)po.auth.identity_token;
        auth.registry_token = (char *)po.auth.registry_token;
        for (int i = first; i < argc; i++) {
            Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
            spec.image = argv[i];
            Runtime__V1__PullImageRequest req = RUNTIME__V1__PULL_IMAGE_REQUEST__INIT;
            req.image = &spec;
            req.auth = po.have_auth ? &auth : NULL;
            ProtobufCMessage *resp;
            if (call(sock, IS "PullImage", &req.base, &runtime__v1__pull_image_response__descriptor,
                     &resp) < 0) {
                ok = 1;
                continue;
            }
            if (!po.quiet)
                printf("%s\n", ((Runtime__V1__PullImageResponse *)resp)->image_ref);
            protobuf_c_message_free_unpacked(resp, NULL);
        }
        image_pull_opts_clear(&po);
        return ok;
    }
    if (strcmp(cmd, "ls") == 0) {
        bool as_json = false, quiet = false;
        const char *filter = NULL;
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "--json") == 0)
                as_json = true;
            else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0)
                quiet = true;
            else
                filter = argv[i];
        }
        Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
        Runtime__V1__ImageFilter f = RUNTIME__V1__IMAGE_FILTER__INIT;
        Runtime__V1__ListImagesRequest req = RUNTIME__V1__LIST_IMAGES_REQUEST__INIT;
        if (filter) {
            spec.image = (char *)filter;
            f.image = &spec;
            req.filter = &f;
        }
        ProtobufCMessage *m;
        if (call(sock, IS "ListImages", &req.base, &runtime__v1__list_images_response__descriptor,
                 &m) < 0)
            return 1;
        Runtime__V1__ListImagesResponse *resp = (Runtime__V1__ListImagesResponse *)m;
        json_t *a = json_array();
        if (!as_json && !quiet)
            printf("%-72s  %-12s  %s\n", "IMAGE ID", "SIZE", "TAGS");
        for (size_t i = 0; i < resp->n_images; i++) {
            Runtime__V1__Image *img = resp->images[i];
            if (as_json) {
                json_array_append_new(a, image_json(img));
            } else if (quiet) {
                printf("%s\n", img->id);
            } else {
                printf("%-72s  %-12llu  ", img->id, (unsigned long long)img->size);
                for (size_t t = 0; t < img->n_repo_tags; t++)
                    printf("%s%s", t ? "," : "", img->repo_tags[t]);
                printf("%s\n", img->n_repo_tags ? "" : "<none>");
            }
        }
        if (as_json)
            print_json(a);
        else
            json_decref(a);
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    if (strcmp(cmd, "inspect") == 0 && argc == 2) {
        Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
        spec.image = argv[1];
        Runtime__V1__ImageStatusRequest req = RUNTIME__V1__IMAGE_STATUS_REQUEST__INIT;
        req.image = &spec;
        req.verbose = true;
        ProtobufCMessage *m;
        if (call(sock, IS "ImageStatus", &req.base, &runtime__v1__image_status_response__descriptor,
                 &m) < 0)
            return 1;
        Runtime__V1__ImageStatusResponse *resp = (Runtime__V1__ImageStatusResponse *)m;
        if (!resp->image) {
            fprintf(stderr, "kinglet image: `%s`: no such image\n", argv[1]);
            protobuf_c_message_free_unpacked(m, NULL);
            return 1;
        }
        json_t *o = image_json(resp->image);
        for (size_t i = 0; i < resp->n_info; i++) {
            json_t *v = json_loads(resp->info[i]->value, 0, NULL);
            json_object_set_new(o, resp->info[i]->key, v ? v : json_string(resp->info[i]->value));
        }
        print_json(o);
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    if (strcmp(cmd, "rm") == 0 && argc >= 2) {
        for (int i = 1; i < argc; i++) {
            Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
            spec.image = argv[i];
            Runtime__V1__RemoveImageRequest req = RUNTIME__V1__REMOVE_IMAGE_REQUEST__INIT;
            req.image = &spec;
            ProtobufCMessage *m;
            if (call(sock, IS "RemoveImage", &req.base,
                     &runtime__v1__remove_image_response__descriptor, &m) < 0) {
                ok = 1;
                continue;
            }
            protobuf_c_message_free_unpacked(m, NULL);
        }
        return ok;
    }
    if (strcmp(cmd, "fsinfo") == 0) {
        Runtime__V1__ImageFsInfoRequest req = RUNTIME__V1__IMAGE_FS_INFO_REQUEST__INIT;
        ProtobufCMessage *m;
        if (call(sock, IS "ImageFsInfo", &req.base,
                 &runtime__v1__image_fs_info_response__descriptor, &m) < 0)
            return 1;
        Runtime__V1__ImageFsInfoResponse *resp = (Runtime__V1__ImageFsInfoResponse *)m;
        for (size_t i = 0; i < resp->n_image_filesystems; i++) {
            Runtime__V1__FilesystemUsage *u = resp->image_filesystems[i];
            printf("{\"mountpoint\": \"%s\", \"used_bytes\": %llu, \"inodes_used\": %llu}\n",
                   u->fs_id ? u->fs_id->mountpoint : "",
                   (unsigned long long)(u->used_bytes ? u->used_bytes->value : 0),
                   (unsigned long long)(u->inodes_used ? u->inodes_used->value : 0));
        }
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    if (strcmp(cmd, "import") == 0) {
        const char *path = NULL;
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
                i++;
            else if (!str_has_prefix(argv[i], "--socket="))
                path = argv[i];
        }
        if (!path)
            return 2;
        _cleanup_free_ char *spooled = NULL, *abs = NULL;
        if (strcmp(path, "-") == 0) {
            int r = spool(&spooled);
            if (r < 0) {
                fprintf(stderr, "kinglet image: read stdin: %s\n", strerror(-r));
                return 1;
            }
            path = spooled;
        } else if (!(abs = realpath(path, NULL))) {
            fprintf(stderr, "kinglet image: `%s`: %s\n", path, strerror(errno));
            return 1;
        } else {
            path = abs;
        }
        Runtime__V1__ImageSpec req = RUNTIME__V1__IMAGE_SPEC__INIT;
        req.image = (char *)path;
        ProtobufCMessage *m;
        int r = call(sock, "/kinglet.v1.Images/Import", &req.base,
                     &runtime__v1__pull_image_response__descriptor, &m);
        if (spooled)
            unlink(spooled);
        if (r < 0)
            return 1;
        printf("%s\n", ((Runtime__V1__PullImageResponse *)m)->image_ref);
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    fprintf(stderr, "kinglet image: `%s` is not available through the daemon\n", cmd);
    return 2;
}

static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* True when a process (the daemon) holds the store's lock. */
static bool store_busy(const char *root)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/image/lock", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return false;
    bool busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd); /* releases the lock if we got it */
    return busy;
}

int cri_image_cli(int argc, char **argv)
{
    const char *root = DEFAULT_ROOT, *sock = NULL;
    int cmd = 0;
    /* find --root/--socket and the command without disturbing the options
     * image_cli_main parses itself */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--socket") == 0 && v) {
            sock = v;
            i++;
        } else if (str_has_prefix(a, "--socket=")) {
            sock = a + 9;
        } else if (!cmd && strcmp(a, "--root") == 0 && v) {
            root = v;
            i++;
        } else if (!cmd && str_has_prefix(a, "--root=")) {
            root = a + 7;
        } else if (!cmd && v && v[0] != '-' && image_cli_opt_has_arg(a)) {
            i++;
        } else if (!cmd && a[0] != '-') {
            cmd = i;
        }
    }
    /* Help needs neither the store nor the daemon: `help [COMMAND]`, or -h
     * or --help anywhere before a `--` (no image reference or option value
     * can be either). */
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
    /* no daemon socket to talk to: the store's own error ("in use by
     * another kinglet process") says more than a failed connect */
    if (!cmd || (!sock && (!store_busy(root) || access(DEFAULT_SOCKET, F_OK) < 0)))
        return image_cli_main(argc, argv);
    if (!sock)
        sock = DEFAULT_SOCKET;
    /* the command's own arguments, without a global --socket */
    int n = 0;
    char **v = calloc((size_t)argc + 1, sizeof(char *));
    if (!v)
        return 1;
    for (int i = cmd; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            i++;
            continue;
        }
        if (str_has_prefix(argv[i], "--socket="))
            continue;
        v[n++] = argv[i];
    }
    int rc = daemon_main(sock, n, v);
    if (rc == 2)
        fprintf(stderr, "kinglet image: bad usage; see `kinglet image --help`\n");
    free(v);
    return rc;
}
