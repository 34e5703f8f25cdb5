/* Image archives for air-gapped nodes, on the job thread:
 *  - `docker save` archives: manifest.json lists Config, RepoTags, Layers;
 *  - OCI image layouts (oci-layout + index.json + blobs/sha256/...), as
 *    written by `ctr export`, skopeo, buildkit and docker >= 25.
 * The archive (tar, optionally compressed) is first spooled into a private
 * directory under tmp/ with the same care as a layer: regular files,
 * directories and symlinks only, paths cleaned, everything opened with
 * RESOLVE_BENEATH. Then each image is verified like a pull: configs and
 * manifests by digest, layers by digest (OCI) and always by diff_id, and
 * unpacked into the shared snapshots. */
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <archive.h>
#include <archive_entry.h>
#include <jansson.h>

#include "image/internal.h"

#define IMPORT_IMAGES_MAX 1024
#define IMPORT_JSON_MAX   (4u << 20)

static int open_beneath(int dirfd, const char *path, int flags)
{
    while (*path == '/')
        path++;
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    int fd = openat2_retry(dirfd, *path ? path : ".", &how);
    return fd < 0 ? -errno : fd;
}

static int read_beneath(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len)
{
    int fd = open_beneath(dirfd, path, O_RDONLY);
    if (fd < 0)
        return fd;
    struct buf b = {0};
    int r = 0;
    for (;;) {
        if (buf_reserve(&b, 65536) < 0) {
            r = -ENOMEM;
            break;
        }
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            break;
        }
        if (n == 0)
            break;
        b.len += (size_t)n;
        if (b.len > max) {
            r = -EFBIG;
            break;
        }
    }
    close(fd);
    if (r < 0) {
        buf_free(&b);
        return r;
    }
    if (buf_reserve(&b, 1) < 0) {
        buf_free(&b);
        return -ENOMEM;
    }
    b.data[b.len] = '\0';
    *ret = (char *)b.data;
    *ret_len = b.len;
    return 0;
}

/* Opens directory path beneath dirfd, creating what is missing. */
static int mkdirs_beneath(int dirfd, const char *path)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", path);
    int cur = open_beneath(dirfd, "", O_PATH | O_DIRECTORY);
    for (char *c = p; cur >= 0 && *c;) {
        char *s = strchr(c, '/');
        if (s)
            *s = '\0';
        int next = open_beneath(cur, c, O_PATH | O_DIRECTORY);
        if (next == -ENOENT) {
            if (mkdirat(cur, c, 0700) < 0 && errno != EEXIST)
                next = -errno;
            else
                next = open_beneath(cur, c, O_PATH | O_DIRECTORY);
        }
        close(cur);
        cur = next;
        if (!s)
            break;
        c = s + 1;
    }
    return cur;
}

/* Spools the archive's files into dirfd. */
static int spool_archive(const char *path, int dirfd, struct err *err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return err_set(err, ENOMEM, "import");
    archive_read_support_format_tar(a);
    archive_read_support_filter_all(a);
    int r = 0;
    if (archive_read_open_filename(a, path, 1 << 20) != ARCHIVE_OK) {
        r = err_set(err, EINVAL, "open archive `%s`: %s", path, archive_error_string(a));
        goto out;
    }
    for (unsigned n = 0;; n++) {
        struct archive_entry *e;
        int ar = archive_read_next_header(a, &e);
        if (ar == ARCHIVE_EOF)
            break;
        if ((ar != ARCHIVE_OK && ar != ARCHIVE_WARN) || n > 100000) {
            r = err_set(err, EINVAL, "read archive `%s`: %s", path,
                        n > 100000 ? "too many entries" : archive_error_string(a));
            goto out;
        }
        const char *name = archive_entry_pathname(e);
        char clean[4096];
        size_t o = 0;
        bool bad = !name;
        for (const char *p = name ? name : ""; *p && !bad;) {
            while (*p == '/')
                p++;
            const char *s = strchr(p, '/');
            size_t len = s ? (size_t)(s - p) : strlen(p);
            if (len == 0)
                break;
            if (len == 2 && p[0] == '.' && p[1] == '.')
                bad = true;
            else if (!(len == 1 && p[0] == '.')) {
                if (o + len + 2 > sizeof(clean))
                    bad = true;
                else {
                    if (o)
                        clean[o++] = '/';
                    memcpy(clean + o, p, len);
                    o += len;
                }
            }
            p += len;
        }
        clean[o] = '\0';
        if (bad) {
            r = err_set(err, EPERM, "archive entry `%.200s` escapes the archive", name);
            goto out;
        }
        if (!o)
            continue;
        /* parent */
        char *slash = strrchr(clean, '/');
        const char *base = clean;
        int pfd;
        if (slash) {
            *slash = '\0';
            base = slash + 1;
            pfd = mkdirs_beneath(dirfd, clean);
        } else {
            pfd = open_beneath(dirfd, "", O_PATH | O_DIRECTORY);
        }
        if (pfd < 0) {
            r = err_set(err, -pfd, "archive entry `%.200s`", name);
            goto out;
        }
        mode_t type = archive_entry_filetype(e);
        int q = 0;
        if (type == AE_IFDIR) {
            if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
                q = -errno;
        } else if (type == AE_IFLNK) {
            const char *t = archive_entry_symlink(e);
            if (t && symlinkat(t, pfd, base) < 0)
                q = -errno;
        } else if (type == AE_IFREG && !archive_entry_hardlink(e)) {
            int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd < 0) {
                q = -errno;
            } else {
                const void *buf;
                size_t size;
                la_int64_t off;
                while (q == 0 && (ar = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK)
                    if (pwrite(fd, buf, size, off) != (ssize_t)size)
                        q = -EIO;
                if (q == 0 && ar != ARCHIVE_EOF)
                    q = -EIO;
                close(fd);
            }
        }
        /* hardlinks, devices and the rest have no place in an image archive */
        close(pfd);
        if (q < 0) {
            r = err_set(err, -q, "archive entry `%.200s`", name);
            goto out;
        }
    }
out:
    archive_read_free(a);
    return r;
}

/* ---- layer sources from files ------------------------------------------------ */

struct file_opener {
    int dirfd;
    const char *path;
    int fd;
    uint8_t *buf;
};

static int file_read(void *ctx, const void **ret, size_t *len, struct err *err)
{
    struct file_opener *o = ctx;
    for (;;) {
        ssize_t n = read(o->fd, o->buf, 1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_set(err, errno, "read `%s`", o->path);
        *ret = o->buf;
        *len = (size_t)n;
        return 0;
    }
}

static int file_open(void *ctx, struct layer_source *ret, struct err *err)
{
    struct file_opener *o = ctx;
    o->fd = open_beneath(o->dirfd, o->path, O_RDONLY);
    if (o->fd < 0)
        return err_set(err, -o->fd, "open layer `%s` in the archive", o->path);
    o->buf = malloc(1 << 20);
    if (!o->buf) {
        close(o->fd);
        return err_set(err, ENOMEM, "import");
    }
    *ret = (struct layer_source){.read = file_read, .ctx = o};
    return 0;
}

static void file_close(void *ctx)
{
    struct file_opener *o = ctx;
    if (o->fd >= 0)
        close(o->fd);
    free(o->buf);
    o->fd = -1;
    o->buf = NULL;
}

/* Unpacks the layers (paths inside dirfd) of one image and adds its record. */
static int import_image(struct job *job, int dirfd, const char *config, size_t config_len,
                        char *const *layer_paths, char *const *layer_digests,
                        const int64_t *layer_sizes, size_t n_layers, const char *manifest_json,
                        size_t manifest_len, char **tags, size_t n_tags, char **digests,
                        size_t n_digests, struct err *err)
{
    const struct image_service_shared *sh = job->sh;
    struct image_config_info ci = {0};
    char **chain = NULL;
    int r = image_config_parse(config, config_len, &ci, err);
    if (r < 0)
        return r;
    if (ci.n_diff_ids != n_layers) {
        r = err_set(err, EINVAL, "image has %zu layers but its config lists %zu", n_layers,
                    ci.n_diff_ids);
        goto out;
    }
    if (image_chain_ids(ci.diff_ids, n_layers, &chain) < 0) {
        r = err_set(err, ENOMEM, "import");
        goto out;
    }
    /* each layer is one acquire from the daemon's snapshot table, which
     * stops a helper that asks for more */
    if (n_layers > IMAGE_IMPORT_LAYERS_MAX - job->n_layers) {
        r = err_set_msg(err, E2BIG, "the archive's images have more than %d layers in all",
                        IMAGE_IMPORT_LAYERS_MAX);
        goto out;
    }
    job->n_layers += n_layers;
    uint64_t size = config_len;
    for (size_t i = 0; i < n_layers; i++) {
        struct file_opener fo = {.dirfd = dirfd, .path = layer_paths[i], .fd = -1};
        struct layer_opener op = {.open = file_open, .close = file_close, .ctx = &fo};
        struct layer_expect ex = {.digest = layer_digests ? layer_digests[i] : NULL,
                                  .size = layer_sizes ? layer_sizes[i] : -1,
                                  .diff_id = ci.diff_ids[i]};
        r = layer_build(job, chain[i], &ex, &op, 1, NULL, err);
        if (r < 0) {
            err_wrap(err, "layer `%s`", layer_paths[i]);
            goto out;
        }
        struct stat st;
        int fd = open_beneath(dirfd, layer_paths[i], O_RDONLY);
        if (fd >= 0 && fstat(fd, &st) == 0)
            size += (uint64_t)st.st_size;
        if (fd >= 0)
            close(fd);
    }
    char cfg_digest[72], man_digest[72];
    digest_of(config, config_len, cfg_digest);
    digest_of(manifest_json, manifest_len, man_digest);
    r = store_blob_write(sh->st, cfg_digest, config, config_len, err);
    if (r == 0)
        r = store_blob_write(sh->st, man_digest, manifest_json, manifest_len, err);
    if (r < 0)
        goto out;
    struct image_info *img = calloc(1, sizeof(*img));
    if (!img) {
        r = err_set(err, ENOMEM, "import");
        goto out;
    }
    img->id = strdup(cfg_digest);
    img->manifest = strdup(man_digest);
    img->user = strdup(ci.user);
    img->size = size;
    img->created_ns = now_real_ns();
    img->chain_ids = TAKE_PTR(chain);
    img->n_layers = n_layers;
    img->repo_tags = tags;
    img->n_repo_tags = n_tags;
    img->repo_digests = digests;
    img->n_repo_digests = n_digests;
    if (!img->id || !img->manifest || !img->user || job_add_result(job, img) < 0) {
        img->repo_tags = NULL;
        img->n_repo_tags = 0;
        img->repo_digests = NULL;
        img->n_repo_digests = 0;
        image_info_free(img);
        r = err_set(err, ENOMEM, "import");
        goto out;
    }
    r = 1; /* tags and digests taken */
out:
    if (chain)
        strv_free(chain, n_layers);
    image_config_info_clear(&ci);
    return r;
}

/* A tag as given ("busybox:latest", "reg/x:y") in normalised form, or NULL. */
static char *normalise_tag(const char *s)
{
    struct image_ref r;
    if (image_ref_parse(s, &r, NULL) < 0)
        return NULL;
    char *out = NULL;
    if (r.tag && !r.digest) {
        _cleanup_free_ char *name = image_ref_name(&r);
        if (name && asprintf(&out, "%s:%s", name, r.tag) < 0)
            out = NULL;
    }
    image_ref_clear(&r);
    return out;
}

/* ---- docker save ---------------------------------------------------------------- */

static int import_docker(struct job *job, int dirfd, json_t *manifest, struct err *err)
{
    if (!json_is_array(manifest) || json_array_size(manifest) > IMPORT_IMAGES_MAX)
        return err_set(err, EINVAL, "manifest.json is not a list of images");
    size_t i;
    json_t *m;
    json_array_foreach(manifest, i, m)
    {
        const char *config_path = json_string_value(json_object_get(m, "Config"));
        json_t *layers = json_object_get(m, "Layers");
        if (!config_path || !json_is_array(layers) || json_array_size(layers) > IMAGE_LAYERS_MAX)
            return err_set(err, EINVAL, "manifest.json entry %zu is incomplete", i);
        _cleanup_free_ char *config = NULL;
        size_t config_len;
        int r = read_beneath(dirfd, config_path, IMAGE_CONFIG_MAX, &config, &config_len);
        if (r < 0)
            return err_set(err, -r, "read config `%.200s`", config_path);
        size_t n = json_array_size(layers);
        char **paths = calloc(n ? n : 1, sizeof(char *));
        if (!paths)
            return err_set(err, ENOMEM, "import");
        for (size_t k = 0; k < n; k++) {
            const char *p = json_string_value(json_array_get(layers, k));
            paths[k] = p ? (char *)p : (char *)"";
        }
        /* a schema 2 manifest describing the image as it is stored */
        struct image_config_info ci = {0};
        if (image_config_parse(config, config_len, &ci, err) < 0) {
            free(paths);
            return -err->code;
        }
        char cfg_digest[72];
        digest_of(config, config_len, cfg_digest);
        json_t *jl = json_array();
        for (size_t k = 0; k < n && k < ci.n_diff_ids; k++) {
            struct stat st = {0};
            int fd = open_beneath(dirfd, paths[k], O_RDONLY);
            if (fd >= 0) {
                fstat(fd, &st);
                close(fd);
            }
            json_array_append_new(jl, json_pack("{s:s,s:s,s:I}", "mediaType",
                                                "application/vnd.docker.image.rootfs.diff.tar",
                                                "digest", ci.diff_ids[k], "size",
                                                (json_int_t)st.st_size));
        }
        image_config_info_clear(&ci);
        json_t *man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:o}", "schemaVersion", 2, "mediaType",
                                MT_DOCKER_MANIFEST, "config", "mediaType",
                                "application/vnd.docker.container.image.v1+json", "digest",
                                cfg_digest, "size", (json_int_t)config_len, "layers", jl);
        char *man_json = man ? json_dumps(man, JSON_COMPACT) : NULL;
        json_decref(man);
        char **tags = NULL;
        size_t n_tags = 0;
        json_t *rt = json_object_get(m, "RepoTags");
        size_t k;
        json_t *t;
        json_array_foreach(rt, k, t)
        {
            _cleanup_free_ char *s = json_is_string(t) ? normalise_tag(json_string_value(t)) : NULL;
            if (s && strv_push(&tags, &n_tags, s) < 0)
                break;
        }
        r = man_json ? import_image(job, dirfd, config, config_len, paths, NULL, NULL, n, man_json,
                                    strlen(man_json), tags, n_tags, NULL, 0, err)
                     : err_set(err, ENOMEM, "import");
        free(man_json);
        free(paths);
        if (r != 1)
            strv_free(tags, n_tags);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ---- OCI layout --------------------------------------------------------------------- */

static int read_blob(int dirfd, const char *digest, size_t max, char **ret, size_t *ret_len,
                     struct err *err)
{
    if (!image_digest_valid(digest))
        return err_set(err, EINVAL, "invalid digest in the layout");
    char path[96];
    snprintf(path, sizeof(path), "blobs/sha256/%s", digest + 7);
    int r = read_beneath(dirfd, path, max, ret, ret_len);
    if (r < 0)
        return err_set(err, -r, "read blob %s", digest);
    char got[72];
    digest_of(*ret, *ret_len, got);
    if (strcmp(got, digest) != 0) {
        free(*ret);
        *ret = NULL;
        return err_set(err, EPROTO, "blob %s has digest %s", digest, got);
    }
    return 0;
}

static int import_oci(struct job *job, int dirfd, json_t *index, struct err *err)
{
    const struct image_service_shared *sh = job->sh;
    json_t *mans = json_object_get(index, "manifests");
    if (!json_is_array(mans) || json_array_size(mans) > IMPORT_IMAGES_MAX)
        return err_set(err, EINVAL, "index.json has no manifests");
    size_t i;
    json_t *m;
    json_array_foreach(mans, i, m)
    {
        const char *digest = json_string_value(json_object_get(m, "digest"));
        json_t *ann = json_object_get(m, "annotations");
        const char *name = json_string_value(json_object_get(ann, "io.containerd.image.name"));
        if (!name) {
            name = json_string_value(json_object_get(ann, "org.opencontainers.image.ref.name"));
            /* a bare tag ("latest") names no repository */
            if (name && !strchr(name, '/') && !strchr(name, ':'))
                name = NULL;
        }
        _cleanup_free_ char *top = NULL, *doc = NULL, *config = NULL;
        size_t top_len, doc_len, config_len;
        int r = read_blob(dirfd, digest, IMAGE_MANIFEST_MAX, &top, &top_len, err);
        if (r < 0)
            return r;
        struct image_manifest *tm = NULL, *mm = NULL;
        r = image_manifest_parse(json_string_value(json_object_get(m, "mediaType")), top, top_len,
                                 &tm, err);
        if (r < 0)
            return r;
        if (tm->kind == IMAGE_MANIFEST_INDEX) {
            const struct image_descriptor *d;
            r = image_index_select(tm, sh->os, sh->arch, sh->variant, &d, err);
            if (r == 0)
                r = read_blob(dirfd, d->digest, IMAGE_MANIFEST_MAX, &doc, &doc_len, err);
            if (r == 0)
                r = image_manifest_parse(d->media_type, doc, doc_len, &mm, err);
            image_manifest_free(tm);
            if (r == 0 && mm->kind != IMAGE_MANIFEST_IMAGE)
                r = err_set(err, EINVAL, "nested image index");
            if (r < 0) {
                image_manifest_free(mm);
                return r;
            }
        } else {
            mm = tm;
            doc = TAKE_PTR(top);
            doc_len = top_len;
        }
        r = read_blob(dirfd, mm->config.digest, IMAGE_CONFIG_MAX, &config, &config_len, err);
        char **paths = calloc(mm->n_descs + 1, sizeof(char *));
        char **digests = calloc(mm->n_descs + 1, sizeof(char *));
        int64_t *sizes = calloc(mm->n_descs + 1, sizeof(int64_t));
        if (r == 0 && (!paths || !digests || !sizes))
            r = err_set(err, ENOMEM, "import");
        for (size_t k = 0; r == 0 && k < mm->n_descs; k++) {
            if (asprintf(&paths[k], "blobs/sha256/%s", mm->descs[k].digest + 7) < 0)
                r = err_set(err, ENOMEM, "import");
            digests[k] = mm->descs[k].digest;
            sizes[k] = (int64_t)mm->descs[k].size;
        }
        char **tags = NULL, **rds = NULL;
        size_t n_tags = 0, n_rds = 0;
        if (r == 0 && name) {
            _cleanup_free_ char *t = normalise_tag(name);
            if (t)
                strv_push(&tags, &n_tags, t);
            struct image_ref ref;
            if (image_ref_parse(name, &ref, NULL) == 0) {
                char *rn = image_ref_name(&ref), *rd = NULL;
                if (rn && asprintf(&rd, "%s@%s", rn, digest) >= 0)
                    strv_push(&rds, &n_rds, rd);
                free(rd);
                free(rn);
                image_ref_clear(&ref);
            }
        }
        if (r == 0)
            r = import_image(job, dirfd, config, config_len, paths, digests, sizes, mm->n_descs,
                             doc, doc_len, tags, n_tags, rds, n_rds, err);
        if (r != 1) {
            strv_free(tags, n_tags);
            strv_free(rds, n_rds);
        }
        if (paths)
            strv_free(paths, mm->n_descs);
        free(digests);
        free(sizes);
        image_manifest_free(mm);
        if (r < 0)
            return r;
    }
    return 0;
}

void job_import_run(struct job *job)
{
    const struct image_service_shared *sh = job->sh;
    struct err *err = &job->err;
    char tmp[64] = "";
    int dirfd = -1;
    json_t *j = NULL;
    char *data = NULL;
    size_t len = 0;
    int r = store_tmpdir(sh->st, tmp, err);
    if (r < 0)
        goto out;
    dirfd = openat(sh->st->root_fd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dirfd < 0) {
        r = err_set(err, errno, "open `%s`", tmp);
        goto out;
    }
    r = spool_archive(job->ref_str, dirfd, err);
    if (r < 0)
        goto out;
    bool docker = true;
    r = read_beneath(dirfd, "manifest.json", IMPORT_JSON_MAX, &data, &len);
    if (r == -ENOENT) {
        docker = false;
        r = read_beneath(dirfd, "index.json", IMPORT_JSON_MAX, &data, &len);
    }
    if (r < 0) {
        r = r == -ENOENT ? err_set(err, EINVAL,
                                   "neither a docker-save archive (manifest.json) "
                                   "nor an OCI image layout (index.json)")
            : r == -EXDEV || r == -ELOOP
                ? err_set(err, EPERM, "the archive's %s is a symlink that leads outside it",
                          docker ? "manifest.json" : "index.json")
                : err_set(err, -r, "read the archive's index");
        goto out;
    }
    j = json_loadb(data, len, 0, NULL);
    if (!j) {
        r = err_set(err, EINVAL, "%s is not valid JSON", docker ? "manifest.json" : "index.json");
        goto out;
    }
    r = docker ? import_docker(job, dirfd, j, err) : import_oci(job, dirfd, j, err);
    if (r == 0 && job->n_results == 0)
        r = err_set(err, EINVAL, "the archive holds no image");
    if (r == 0)
        r = store_sync(sh->st, err);
out:
    if (r < 0)
        err_wrap(err, "import `%s`", job->ref_str);
    job->r = r < 0 ? r : 0;
    free(data);
    json_decref(j);
    if (dirfd >= 0)
        close(dirfd);
    if (tmp[0] && sh->st->root_fd >= 0)
        rm_rf_at(sh->st->root_fd, tmp);
}
