/* The direct back end of `kinglet image` (struct image_cli_ops): the image
 * service on a loop of the command's own, on the store itself. The store's
 * lock makes it refuse to run next to a daemon that owns the same root;
 * each call runs the loop until its callbacks are done. */
#include <fcntl.h>
#include <string.h>

#include "image/internal.h"

struct direct {
    uv_loop_t loop;
    struct image_service *svc;
    char *root;
    struct image_cli_display *show;
};

struct pending {
    int n;
    int r;
    struct err err;
    char *id;
    image_cli_pulled_fn done;
    void *data;
    const char *ref;
};

static void run(struct direct *d, struct pending *p)
{
    while (p->n > 0 && uv_run(&d->loop, UV_RUN_ONCE))
        ;
}

struct pull_one {
    struct pending *p;
    struct image_cli_display *show;
    const char *ref;
};

static void pulled(void *data, int r, const struct err *err, const char *image_id)
{
    struct pull_one *o = data;
    o->p->n--;
    image_cli_display_pulled(o->show, o->ref, o->p->done, o->p->data, r, err, image_id);
}

static void d_pull(void *ctx, char *const *refs, size_t n, const struct image_auth *auth,
                   bool progress, image_cli_pulled_fn done, void *data)
{
    struct direct *d = ctx;
    struct pending p = {.done = done, .data = data};
    image_cli_display_on(d->show, progress);
    struct pull_one *v = calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        struct err err = {0};
        if (!v) {
            err_set(&err, ENOMEM, "pull `%s`", refs[i]);
            done(data, refs[i], -ENOMEM, &err, NULL);
            continue;
        }
        v[i] = (struct pull_one){.p = &p, .show = d->show, .ref = refs[i]};
        if (image_pull(d->svc, refs[i], auth, pulled, &v[i], &err) < 0)
            done(data, refs[i], -err.code, &err, NULL);
        else
            p.n++;
    }
    run(d, &p);
    image_cli_display_on(d->show, false);
    free(v);
}

static void one_done(void *data, int r, const struct err *err)
{
    struct pending *p = data;
    p->n--;
    p->r = r;
    if (r < 0)
        p->err = *err;
}

static void id_done(void *data, int r, const struct err *err, const char *image_id)
{
    struct pending *p = data;
    one_done(p, r, err);
    if (r >= 0)
        p->id = image_id ? strdup(image_id) : NULL;
}

static int finish(struct direct *d, struct pending *p, int r, struct err *err)
{
    if (r < 0)
        return r;
    p->n = 1;
    run(d, p);
    if (p->r < 0) {
        *err = p->err;
        return p->r;
    }
    return 0;
}

static json_t *summary(const struct image_info *img)
{
    return image_cli_image_json(img->id, img->repo_tags, img->n_repo_tags, img->repo_digests,
                                img->n_repo_digests, img->size, img->user, img->pinned);
}

static int d_list(void *ctx, const char *filter, json_t **ret, struct err *err)
{
    struct direct *d = ctx;
    const struct image_info **v;
    int n = image_list(d->svc, filter, &v);
    if (n < 0)
        return err_set(err, -n, "list images");
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, summary(v[i]));
    free(v);
    *ret = a;
    return 0;
}

static int d_inspect(void *ctx, const char *ref, json_t **ret, struct err *err)
{
    struct direct *d = ctx;
    const struct image_info *img = image_lookup(d->svc, ref);
    if (!img)
        return err_set_msg(err, ENOENT, "`%s`: no such image", ref);
    json_t *o = summary(img);
    json_object_set_new(o, "info", image_info_verbose_json(d->svc, img));
    *ret = o;
    return 0;
}

static int d_remove(void *ctx, const char *ref, struct err *err)
{
    struct direct *d = ctx;
    struct pending p = {0};
    return finish(d, &p, image_remove(d->svc, ref, one_done, &p, err), err);
}

static int d_hold(void *ctx, const char *holder, const char *ref, struct err *err)
{
    struct direct *d = ctx;
    struct pending p = {0};
    return finish(d, &p, image_hold(d->svc, holder, ref, one_done, &p, err), err);
}

static int d_release(void *ctx, const char *holder, struct err *err)
{
    struct direct *d = ctx;
    struct pending p = {0};
    return finish(d, &p, image_release(d->svc, holder, one_done, &p, err), err);
}

/* Spools stdin into a file under the store's tmp/ (removed at next start if
 * we die). */
static int spool_stdin(const char *root, char **ret)
{
    char *path;
    if (asprintf(&path, "%s/image/tmp/stdin-%d.tar", root, (int)getpid()) < 0)
        return -ENOMEM;
    _cleanup_close_ int fd =
        open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int r = fd < 0 ? -errno : 0;
    char buf[1 << 16];
    while (r == 0) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : 1;
            break;
        }
        r = write_all(fd, buf, (size_t)n);
    }
    if (r < 0) {
        unlink(path);
        free(path);
        return r;
    }
    *ret = path;
    return 0;
}

static int d_import(void *ctx, const char *path, char **ret_id, struct err *err)
{
    struct direct *d = ctx;
    _cleanup_free_ char *spooled = NULL;
    if (strcmp(path, "-") == 0) {
        int r = spool_stdin(d->root, &spooled);
        if (r < 0)
            return err_set(err, -r, "read stdin");
        path = spooled;
    }
    struct pending p = {0};
    int r = finish(d, &p, image_import(d->svc, path, id_done, &p, err), err);
    if (spooled)
        unlink(spooled);
    *ret_id = p.id;
    return r;
}

static int d_fsinfo(void *ctx, json_t **ret, struct err *err)
{
    struct direct *d = ctx;
    struct image_fs_usage u;
    if (image_fs_info(d->svc, &u, err) < 0)
        return -err->code;
    *ret = json_pack("{s:s,s:I,s:I}", "mountpoint", u.mountpoint, "used_bytes",
                     (json_int_t)u.used_bytes, "inodes_used", (json_int_t)u.inodes_used);
    image_fs_usage_clear(&u);
    return 0;
}

static void d_close(void *ctx)
{
    struct direct *d = ctx;
    image_service_free(d->svc);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    uv_loop_close(&d->loop);
    image_cli_display_free(d->show);
    free(d->root);
    free(d);
}

static const struct image_cli_ops direct_ops = {
    .pull = d_pull,
    .list = d_list,
    .inspect = d_inspect,
    .remove = d_remove,
    .import = d_import,
    .fsinfo = d_fsinfo,
    .hold = d_hold,
    .release = d_release,
    .close = d_close,
};

int image_cli_store_open(const struct image_config *cfg, const struct image_cli_ops **ret_ops,
                         void **ret_ctx, struct err *err)
{
    struct direct *d = calloc(1, sizeof(*d));
    if (!d || !(d->root = strdup(cfg->root)) || !(d->show = image_cli_display_new())) {
        if (d)
            free(d->root);
        free(d);
        return err_set(err, ENOMEM, "kinglet image");
    }
    int r = uv_loop_init(&d->loop);
    if (r < 0) {
        image_cli_display_free(d->show);
        free(d->root);
        free(d);
        return err_set(err, -r, "event loop");
    }
    struct image_config c = *cfg;
    c.progress = image_cli_display_step;
    c.progress_data = d->show;
    if (image_service_new(&d->loop, &c, &d->svc, err) < 0) {
        image_cli_display_free(d->show);
        uv_loop_close(&d->loop);
        free(d->root);
        free(d);
        return -err->code;
    }
    *ret_ops = &direct_ops;
    *ret_ctx = d;
    return 0;
}
