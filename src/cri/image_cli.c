/* The remote back end of `kinglet image` (struct image_cli_ops, declared by
 * src/image): the daemon over its gRPC socket. It lives here, above the
 * image module, because it speaks the daemon's CRI messages through
 * src/grpc's client: CRI ImageService calls for pull, ls, inspect, rm and
 * fsinfo, and kinglet's own /kinglet.v1.Images/{Import,Hold,Release}
 * (image_private.c) for the rest, and PullProgress for a pull on a
 * terminal (per-layer progress as the direct back end shows it). The command line itself (options,
 * help, output) is src/image/cli.c's; this file decides whether to use a daemon: with --socket, or
 * when the daemon owns the store (its lock is taken) and its default socket exists. */
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

#include <jansson.h>

#include "cri/internal.h"
#include "kinglet.pb-c.h"

#define DEFAULT_SOCKET  "/run/kinglet/kinglet.sock"
#define IS              "/runtime.v1.ImageService/"
#define OWN             "/kinglet.v1.Images/"
#define CALL_TIMEOUT_MS (3600u * 1000)

static int call(const char *sock, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *out, ProtobufCMessage **ret, struct err *err)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    _cleanup_free_ uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return err_set(err, ENOMEM, "request");
    protobuf_c_message_pack(req, data);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int status = 0;
    char *message = NULL;
    int r = grpc_client_call(sock, method, data, len, CALL_TIMEOUT_MS, &resp, &resp_len, &status,
                             &message, err);
    if (r < 0)
        return r;
    if (status != 0) {
        /* the daemon's text, already whole: no system text added */
        r = err_set_msg(err, status == GRPC_STATUS_NOT_FOUND ? ENOENT : EIO, "%s: %s",
                        grpc_status_name(status), message ? message : "");
        free(message);
        free(resp);
        return r;
    }
    free(message);
    *ret = protobuf_c_message_unpack(out, NULL, resp_len, resp);
    free(resp);
    if (!*ret)
        return err_set_msg(err, EPROTO, "cannot decode the daemon's answer");
    return 0;
}

static json_t *image_json(const Runtime__V1__Image *img)
{
    return image_cli_image_json(img->id, img->repo_tags, img->n_repo_tags, img->repo_digests,
                                img->n_repo_digests, img->size,
                                img->uid ? "" : (img->username ? img->username : ""), img->pinned);
}

/* A PullProgress stream's messages: steps to the display, the last one's
 * image id kept. */
struct progress_call {
    struct image_cli_display *show;
    const char *ref;
    char *image_id;
};

static int progress_msg(void *data, const uint8_t *msg, size_t len)
{
    struct progress_call *pc = data;
    Kinglet__V1__PullProgress *m = kinglet__v1__pull_progress__unpack(NULL, len, msg);
    if (!m)
        return -EPROTO;
    if (m->image_id && *m->image_id) {
        free(pc->image_id);
        pc->image_id = strdup(m->image_id);
    } else if (m->phase && *m->phase) {
        image_cli_display_step(pc->show,
                               &(struct image_progress){.ref = pc->ref,
                                                        .digest = *m->digest ? m->digest : NULL,
                                                        .phase = m->phase,
                                                        .bytes = m->bytes,
                                                        .total = m->total});
    }
    kinglet__v1__pull_progress__free_unpacked(m, NULL);
    return 0;
}

/* One pull over /kinglet.v1.Images/PullProgress, its steps drawn as they
 * come. */
static int pull_shown(const char *sock, const Runtime__V1__PullImageRequest *req,
                      struct progress_call *pc, struct err *err)
{
    size_t len = protobuf_c_message_get_packed_size(&req->base);
    _cleanup_free_ uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return err_set(err, ENOMEM, "request");
    protobuf_c_message_pack(&req->base, data);
    int status = 0;
    _cleanup_free_ char *message = NULL;
    int r = grpc_client_stream(sock, OWN "PullProgress", data, len, CALL_TIMEOUT_MS, progress_msg,
                               pc, &status, &message, err);
    if (r < 0)
        return r;
    if (status == GRPC_STATUS_UNIMPLEMENTED)
        return -ENOSYS; /* a daemon from before the route: PullImage then */
    if (status != 0)
        return err_set_msg(err, status == GRPC_STATUS_NOT_FOUND ? ENOENT : EIO, "%s: %s",
                           grpc_status_name(status), message ? message : "");
    if (!pc->image_id)
        return err_set_msg(err, EPROTO, "the daemon's pull stream ended without an image id");
    return 0;
}

static void r_pull(void *ctx, char *const *refs, size_t n, const struct image_auth *a,
                   bool progress, image_cli_pulled_fn done, void *data)
{
    const char *sock = ctx;
    Runtime__V1__AuthConfig auth = RUNTIME__V1__AUTH_CONFIG__INIT;
    bool have_auth =
        a->username || a->password || a->auth || a->identity_token || a->registry_token;
    auth.username = (char *)a->username;
    auth.password = (char *)a->password;
    auth.auth = (char *)a->auth;
    auth.identity_token = (char *)a->identity_token;
    auth.registry_token = (char *)a->registry_token;
    struct image_cli_display *show = progress ? image_cli_display_new() : NULL;
    if (show)
        image_cli_display_on(show, true);
    for (size_t i = 0; i < n; i++) {
        Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
        spec.image = refs[i];
        Runtime__V1__PullImageRequest req = RUNTIME__V1__PULL_IMAGE_REQUEST__INIT;
        req.image = &spec;
        req.auth = have_auth ? &auth : NULL;
        struct err err = {0};
        if (show) {
            /* on a terminal: the layers' progress through kinglet's own
             * stream (PullImage stays the CRI path, and says nothing
             * until the end) */
            struct progress_call pc = {.show = show, .ref = refs[i]};
            int r = pull_shown(sock, &req, &pc, &err);
            if (r != -ENOSYS) {
                image_cli_display_pulled(show, refs[i], done, data, r, &err, pc.image_id);
                free(pc.image_id);
                continue;
            }
            free(pc.image_id);
        }
        ProtobufCMessage *m;
        int r = call(sock, IS "PullImage", &req.base, &runtime__v1__pull_image_response__descriptor,
                     &m, &err);
        done(data, refs[i], r, &err,
             r < 0 ? NULL : ((Runtime__V1__PullImageResponse *)m)->image_ref);
        if (r == 0)
            protobuf_c_message_free_unpacked(m, NULL);
    }
    image_cli_display_free(show);
}

static int r_list(void *ctx, const char *filter, json_t **ret, struct err *err)
{
    Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
    Runtime__V1__ImageFilter f = RUNTIME__V1__IMAGE_FILTER__INIT;
    Runtime__V1__ListImagesRequest req = RUNTIME__V1__LIST_IMAGES_REQUEST__INIT;
    if (filter) {
        spec.image = (char *)filter;
        f.image = &spec;
        req.filter = &f;
    }
    ProtobufCMessage *m;
    int r = call(ctx, IS "ListImages", &req.base, &runtime__v1__list_images_response__descriptor,
                 &m, err);
    if (r < 0)
        return r;
    Runtime__V1__ListImagesResponse *resp = (Runtime__V1__ListImagesResponse *)m;
    json_t *a = json_array();
    for (size_t i = 0; i < resp->n_images; i++)
        json_array_append_new(a, image_json(resp->images[i]));
    protobuf_c_message_free_unpacked(m, NULL);
    *ret = a;
    return 0;
}

static int r_inspect(void *ctx, const char *ref, json_t **ret, struct err *err)
{
    Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
    spec.image = (char *)ref;
    Runtime__V1__ImageStatusRequest req = RUNTIME__V1__IMAGE_STATUS_REQUEST__INIT;
    req.image = &spec;
    req.verbose = true;
    ProtobufCMessage *m;
    int r = call(ctx, IS "ImageStatus", &req.base, &runtime__v1__image_status_response__descriptor,
                 &m, err);
    if (r < 0)
        return r;
    Runtime__V1__ImageStatusResponse *resp = (Runtime__V1__ImageStatusResponse *)m;
    if (!resp->image) {
        protobuf_c_message_free_unpacked(m, NULL);
        return err_set_msg(err, ENOENT, "`%s`: no such image", ref);
    }
    json_t *o = image_json(resp->image);
    for (size_t i = 0; i < resp->n_info; i++) {
        json_t *v = json_loads(resp->info[i]->value, 0, NULL);
        json_object_set_new(o, resp->info[i]->key, v ? v : json_string(resp->info[i]->value));
    }
    protobuf_c_message_free_unpacked(m, NULL);
    *ret = o;
    return 0;
}

static int r_remove(void *ctx, const char *ref, struct err *err)
{
    Runtime__V1__ImageSpec spec = RUNTIME__V1__IMAGE_SPEC__INIT;
    spec.image = (char *)ref;
    Runtime__V1__RemoveImageRequest req = RUNTIME__V1__REMOVE_IMAGE_REQUEST__INIT;
    req.image = &spec;
    ProtobufCMessage *m;
    int r = call(ctx, IS "RemoveImage", &req.base, &runtime__v1__remove_image_response__descriptor,
                 &m, err);
    if (r == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return r;
}

static int r_fsinfo(void *ctx, json_t **ret, struct err *err)
{
    Runtime__V1__ImageFsInfoRequest req = RUNTIME__V1__IMAGE_FS_INFO_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = call(ctx, IS "ImageFsInfo", &req.base, &runtime__v1__image_fs_info_response__descriptor,
                 &m, err);
    if (r < 0)
        return r;
    Runtime__V1__ImageFsInfoResponse *resp = (Runtime__V1__ImageFsInfoResponse *)m;
    Runtime__V1__FilesystemUsage *u = resp->n_image_filesystems ? resp->image_filesystems[0] : NULL;
    const char *mp = u && u->fs_id && u->fs_id->mountpoint ? u->fs_id->mountpoint : "";
    json_int_t used = (json_int_t)(u && u->used_bytes ? u->used_bytes->value : 0);
    json_int_t inodes = (json_int_t)(u && u->inodes_used ? u->inodes_used->value : 0);
    *ret = json_pack("{s:s,s:I,s:I}", "mountpoint", mp, "used_bytes", used, "inodes_used", inodes);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
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

static int r_import(void *ctx, const char *path, char **ret_id, struct err *err)
{
    _cleanup_free_ char *spooled = NULL, *abs = NULL;
    if (strcmp(path, "-") == 0) {
        int r = spool(&spooled);
        if (r < 0)
            return err_set(err, -r, "read stdin");
        path = spooled;
    } else if (!(abs = realpath(path, NULL))) {
        return err_set(err, errno, "`%s`", path);
    } else {
        path = abs;
    }
    Runtime__V1__ImageSpec req = RUNTIME__V1__IMAGE_SPEC__INIT;
    req.image = (char *)path;
    ProtobufCMessage *m;
    int r =
        call(ctx, OWN "Import", &req.base, &runtime__v1__pull_image_response__descriptor, &m, err);
    if (spooled)
        unlink(spooled);
    if (r < 0)
        return r;
    *ret_id = strdup(((Runtime__V1__PullImageResponse *)m)->image_ref);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

static int hold_call(const char *sock, const char *method, const char *holder, const char *ref,
                     struct err *err)
{
    Runtime__V1__ImageSpec__AnnotationsEntry e = RUNTIME__V1__IMAGE_SPEC__ANNOTATIONS_ENTRY__INIT;
    e.key = "holder";
    e.value = (char *)holder;
    Runtime__V1__ImageSpec__AnnotationsEntry *ev[] = {&e};
    Runtime__V1__ImageSpec req = RUNTIME__V1__IMAGE_SPEC__INIT;
    req.image = (char *)(ref ? ref : "");
    req.annotations = ev;
    req.n_annotations = 1;
    ProtobufCMessage *m;
    int r = call(sock, method, &req.base, &runtime__v1__remove_image_response__descriptor, &m, err);
    if (r == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return r;
}

static int r_hold(void *ctx, const char *holder, const char *ref, struct err *err)
{
    return hold_call(ctx, OWN "Hold", holder, ref, err);
}

static int r_release(void *ctx, const char *holder, struct err *err)
{
    return hold_call(ctx, OWN "Release", holder, NULL, err);
}

static void r_close(void *ctx) { free(ctx); }

static const struct image_cli_ops remote_ops = {
    .pull = r_pull,
    .list = r_list,
    .inspect = r_inspect,
    .remove = r_remove,
    .import = r_import,
    .fsinfo = r_fsinfo,
    .hold = r_hold,
    .release = r_release,
    .close = r_close,
};

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

/* image_cli_connect_fn: without --socket and a daemon to talk to, the
 * store's own error ("in use by another kinglet process") says more than a
 * failed connect. */
static int connect_daemon(const char *root, const char *sock, const struct image_cli_ops **ret_ops,
                          void **ret_ctx)
{
    if (!sock && (!store_busy(root) || access(DEFAULT_SOCKET, F_OK) < 0))
        return 0;
    char *s = strdup(sock ? sock : DEFAULT_SOCKET);
    if (!s) {
        fprintf(stderr, "kinglet image: out of memory\n");
        return -ENOMEM;
    }
    *ret_ops = &remote_ops;
    *ret_ctx = s;
    return 1;
}

int cri_image_cli(int argc, char **argv) { return image_cli_main(argc, argv, connect_daemon); }
