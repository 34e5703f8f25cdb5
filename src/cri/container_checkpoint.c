/* CheckpointContainer (KEP-2008): a running container dumped with CRIU
 * into the archive kubelet names, in the layout CRI-O and containerd write
 * and checkpointctl reads (an uncompressed tar):
 *   checkpoint/       CRIU's images (and descriptors.json: the init's stdio)
 *   config.dump       {id, name, rootfsImageName, rootfsImageRef, runtime,
 *                      createdTime, checkpointedTime}
 *   spec.dump         the container's OCI config.json
 *   rootfs-diff.tar   what the container changed in its root file system
 *                     (the overlay's upper directory, whiteouts left out)
 *   deleted.files     a JSON list of the image's files it deleted (when any)
 *   dump.log, stats-dump  CRIU's log and statistics
 * The container keeps running. All of it is put together in a directory of
 * the daemon's state and written to <location>.tmp.* next to the location,
 * renamed over it only when complete: a failed checkpoint leaves nothing at
 * the location. One operation of the container's queue, in a worker. */
#include <dirent.h>
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "cri/containers.h"
#include "oci/checkpoint.h"

#define CKPT_TIMEOUT_DEFAULT_S 300 /* kubelet's default is 4 minutes */

struct ckpt_job {
    uv_work_t req;
    struct cri_call *call; /* loop side only */
    char id[STORE_ID_LEN + 1];
    char *name, *image, *image_ref, *location;
    char *oci_root, *bundle, *layer, *work_root;
    uint64_t created_ns;
    int64_t timeout_s;
    struct err err;
    int r;
};

static void job_free(struct ckpt_job *j)
{
    free(j->name);
    free(j->image);
    free(j->image_ref);
    free(j->location);
    free(j->oci_root);
    free(j->bundle);
    free(j->layer);
    free(j->work_root);
    free(j);
}

static void rfc3339(uint64_t ns, char *buf, size_t size)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%09lluZ", base, (unsigned long long)(ns % 1000000000ull));
}

static int write_json(const char *dir, const char *name, json_t *v, struct err *err)
{
    char *text = v ? json_dumps(v, JSON_INDENT(2)) : NULL;
    json_decref(v);
    if (!text)
        return err_set(err, ENOMEM, "%s", name);
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = dfd < 0 ? -errno : write_file_atomic(dfd, name, text, strlen(text), 0600);
    free(text);
    return r < 0 ? err_set(err, -r, "write `%s/%s`", dir, name) : 0;
}

static int tar_add(struct archive *a, const char *path, const char *name, json_t *deleted,
                   struct err *err);

/* The entries of directory path into the tar, named below name ("" for
 * the top). */
static int tar_children(struct archive *a, const char *path, const char *name, json_t *deleted,
                        struct err *err)
{
    DIR *d = opendir(path);
    if (!d)
        return err_set(err, errno, "open `%s`", path);
    int r = 0;
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char cp[PATH_MAX], cn[PATH_MAX];
        if ((size_t)snprintf(cp, sizeof(cp), "%s/%s", path, de->d_name) >= sizeof(cp) ||
            (size_t)snprintf(cn, sizeof(cn), "%s%s%s", name, *name ? "/" : "", de->d_name) >=
                sizeof(cn)) {
            r = err_set(err, ENAMETOOLONG, "`%s/%s`", path, de->d_name);
            break;
        }
        r = tar_add(a, cp, cn, deleted, err);
    }
    closedir(d);
    return r;
}

/* Adds path (on disk) to a as name, and a directory's entries below it.
 * With deleted, overlay whiteouts (0/0 character devices) are not added
 * but listed there, as paths of the container ("/etc/x"). */
static int tar_add(struct archive *a, const char *path, const char *name, json_t *deleted,
                   struct err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : err_set(err, errno, "stat `%s`", path);
    if (deleted && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        char *p;
        if (asprintf(&p, "/%s", name) < 0)
            return err_set(err, ENOMEM, "deleted.files");
        json_array_append_new(deleted, json_string(p));
        free(p);
        return 0;
    }
    _cleanup_close_ int fd = -1;
    if (S_ISREG(st.st_mode) && (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return err_set(err, errno, "open `%s`", path);
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return err_set(err, ENOMEM, "archive entry");
    archive_entry_copy_pathname(e, name);
    archive_entry_copy_stat(e, &st);
    int r = 0;
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len < 0) {
            r = err_set(err, errno, "read link `%s`", path);
            goto out;
        }
        target[len] = '\0';
        archive_entry_copy_symlink(e, target);
    }
    if (archive_write_header(a, e) != ARCHIVE_OK) {
        r = err_set_msg(err, EIO, "archive `%s`: %s", path, archive_error_string(a));
        goto out;
    }
    if (fd >= 0 && archive_entry_size(e) > 0) {
        char buf[65536];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            if (archive_write_data(a, buf, (size_t)n) != n) {
                r = err_set_msg(err, EIO, "archive `%s`: %s", path, archive_error_string(a));
                goto out;
            }
        if (n < 0) {
            r = err_set(err, errno, "read `%s`", path);
            goto out;
        }
    }
    if (S_ISDIR(st.st_mode))
        r = tar_children(a, path, name, deleted, err);
out:
    archive_entry_free(e);
    return r;
}

/* A tar of dir's entries (not dir itself) at fd. */
static int tar_dir(int fd, const char *dir, json_t *deleted, struct err *err)
{
    struct archive *a = archive_write_new();
    int r = 0;
    if (!a || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_open_fd(a, fd) != ARCHIVE_OK) {
        r = err_set_msg(err, ENOMEM, "archive: %s", a ? archive_error_string(a) : "no memory");
        goto out;
    }
    r = tar_children(a, dir, "", deleted, err);
    if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
        r = err_set_msg(err, EIO, "archive: %s", archive_error_string(a));
out:
    if (a)
        archive_write_free(a);
    return r;
}

/* rootfs-diff.tar and deleted.files from the writable layer's upper/. */
static int write_rootfs_diff(struct ckpt_job *j, const char *work, struct err *err)
{
    char upper[PATH_MAX + 8], tarp[PATH_MAX + 32];
    snprintf(upper, sizeof(upper), "%s/upper", j->layer);
    snprintf(tarp, sizeof(tarp), "%s/rootfs-diff.tar", work);
    _cleanup_close_ int fd = open(tarp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return err_set(err, errno, "create `%s`", tarp);
    json_t *deleted = json_array();
    if (!deleted)
        return err_set(err, ENOMEM, "deleted.files");
    int r = tar_dir(fd, upper, deleted, err);
    if (r == 0 && json_array_size(deleted) > 0)
        return write_json(work, "deleted.files", deleted, err);
    json_decref(deleted);
    return r;
}

static int write_metadata(struct ckpt_job *j, const char *work, struct err *err)
{
    char now[64], created[64];
    rfc3339(now_real_ns(), now, sizeof(now));
    rfc3339(j->created_ns, created, sizeof(created));
    json_t *cfg = json_pack("{s:s, s:s, s:s?, s:s?, s:s, s:s, s:s}", "id", j->id, "name", j->name,
                            "rootfsImageName", j->image, "rootfsImageRef", j->image_ref, "runtime",
                            "kinglet", "createdTime", created, "checkpointedTime", now);
    int r = write_json(work, "config.dump", cfg, err);
    if (r < 0)
        return r;
    char spec[PATH_MAX];
    snprintf(spec, sizeof(spec), "%s/config.json", j->bundle);
    _cleanup_free_ char *text = NULL;
    size_t len;
    r = read_file_at(AT_FDCWD, spec, 64u << 20, &text, &len);
    if (r < 0)
        return err_set(err, -r, "read `%s`", spec);
    _cleanup_close_ int dfd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = dfd < 0 ? -errno : write_file_atomic(dfd, "spec.dump", text, len, 0600);
    return r < 0 ? err_set(err, -r, "write `%s/spec.dump`", work) : 0;
}

/* The archive of work at the location: a temporary beside it, renamed over
 * it once complete and synced. */
static int write_archive(struct ckpt_job *j, const char *work, struct err *err)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", j->location) >= sizeof(tmp))
        return err_set(err, ENAMETOOLONG, "location `%s`", j->location);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "create `%s`", tmp);
    int r = tar_dir(fd, work, NULL, err);
    if (r == 0 && (fchmod(fd, 0600) < 0 || fsync(fd) < 0))
        r = err_set(err, errno, "write `%s`", tmp);
    close(fd);
    if (r == 0 && rename(tmp, j->location) < 0)
        r = err_set(err, errno, "rename `%s` to `%s`", tmp, j->location);
    if (r < 0) {
        unlink(tmp);
        return r;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", j->location);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        fsync(dfd);
    return 0;
}

static int checkpoint(struct ckpt_job *j, struct err *err)
{
    struct stat st;
    if (stat(j->location, &st) == 0 && S_ISDIR(st.st_mode))
        return err_set_msg(err, EINVAL, "location `%s` is a directory: it names the archive",
                           j->location);
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", j->location);
    char *slash = strrchr(parent, '/');
    slash[slash == parent ? 1 : 0] = '\0';
    if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
        return err_set_msg(err, EINVAL, "the directory of location `%s` does not exist",
                           j->location);

    int r = mkdir_p(j->work_root, 0700);
    if (r < 0)
        return err_set(err, -r, "create `%s`", j->work_root);
    char work[PATH_MAX], images[PATH_MAX + 16];
    snprintf(work, sizeof(work), "%s/%s.XXXXXX", j->work_root, j->id);
    if (!mkdtemp(work))
        return err_set(err, errno, "create `%s`", work);
    snprintf(images, sizeof(images), "%s/checkpoint", work);
    if (mkdir(images, 0700) < 0) {
        r = err_set(err, errno, "create `%s`", images);
        goto out;
    }
    struct oci_checkpoint_opts o = {.root = j->oci_root,
                                    .id = j->id,
                                    .images_dir = images,
                                    .work_dir = work,
                                    .timeout_s = j->timeout_s};
    if ((r = oci_container_checkpoint(&o, err)) < 0 || (r = write_metadata(j, work, err)) < 0 ||
        (r = write_rootfs_diff(j, work, err)) < 0)
        goto out;
    r = write_archive(j, work, err);
out:;
    int wfd = open(j->work_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rr = wfd < 0 ? -errno : rm_rf_at(wfd, strrchr(work, '/') + 1);
    if (wfd >= 0)
        close(wfd);
    if (rr < 0)
        log_warn("checkpoint `%s`: cannot remove `%s`: %s", j->id, work, strerror(-rr));
    return r;
}

static void ckpt_work(uv_work_t *req)
{
    struct ckpt_job *j = req->data;
    j->r = checkpoint(j, &j->err);
}

static void ckpt_done(uv_work_t *req, int status)
{
    struct ckpt_job *j = req->data;
    struct cri_call *call = j->call;
    struct container *c = container_find_exact(call->cri, j->id);
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    if (j->r < 0) {
        err_wrap(&j->err, "checkpoint container `%s`", j->id);
        cri_fail_err(call, &j->err);
    } else {
        log_info("container `%s` checkpointed to `%s`", j->id, j->location);
        Runtime__V1__CheckpointContainerResponse resp =
            RUNTIME__V1__CHECKPOINT_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
    if (c)
        opq_end(&c->ops, c, false);
    job_free(j);
}

static void ckpt_op(void *data, void *obj)
{
    struct cri_call *call = data;
    struct container *c = obj;
    struct cri *cri = call->cri;
    Runtime__V1__CheckpointContainerRequest *req =
        (Runtime__V1__CheckpointContainerRequest *)call->req;
    if (!c) {
        cri_fail(call, GRPC_STATUS_NOT_FOUND, "container `%.64s` not found", req->container_id);
        return;
    }
    if (c->rec.state != STORE_CTR_RUNNING || c->pid <= 0) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "CheckpointContainer: container `%s` is %s, not running", c->rec.id,
                 store_ctr_state_name(c->rec.state));
        opq_end(&c->ops, c, false);
        return;
    }
    struct ckpt_job *j = calloc(1, sizeof(*j));
    char bundle[PATH_MAX], layer[PATH_MAX];
    container_dirs(cri, c->rec.id, bundle, sizeof(bundle), layer, sizeof(layer));
    const char *name = c->config && c->config->metadata && c->config->metadata->name
                           ? c->config->metadata->name
                           : c->rec.id;
    if (!j || !(j->name = strdup(name)) || !(j->location = strdup(req->location)) ||
        !(j->oci_root = strdup(cri->containers->oci_root)) || !(j->bundle = strdup(bundle)) ||
        !(j->layer = strdup(layer)) ||
        asprintf(&j->work_root, "%s/checkpoints", cri->state_dir) < 0 ||
        (c->rec.image && !(j->image = strdup(c->rec.image))) ||
        (c->rec.image_ref && !(j->image_ref = strdup(c->rec.image_ref)))) {
        if (j)
            job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        opq_end(&c->ops, c, false);
        return;
    }
    memcpy(j->id, c->rec.id, sizeof(j->id));
    j->created_ns = c->rec.created_ns;
    j->timeout_s = req->timeout > 0 ? req->timeout : CKPT_TIMEOUT_DEFAULT_S;
    j->call = call;
    j->req.data = j;
    uv_queue_work(cri->loop, &j->req, ckpt_work, ckpt_done);
}

void cri_checkpoint_container(struct cri_call *call)
{
    Runtime__V1__CheckpointContainerRequest *req =
        (Runtime__V1__CheckpointContainerRequest *)call->req;
    const char *loc = req->location;
    if (!loc || loc[0] != '/' || strlen(loc) >= PATH_MAX - 32 || loc[strlen(loc) - 1] == '/') {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "CheckpointContainer: location `%.256s` must be an absolute path of a file",
                 loc ? loc : "");
        return;
    }
    bool ambiguous;
    struct container *c = container_find(call->cri, req->container_id, &ambiguous);
    if (!c) {
        cri_fail(call, ambiguous ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_NOT_FOUND,
                 "container `%.64s` %s", req->container_id,
                 ambiguous ? "is an ambiguous prefix" : "not found");
        return;
    }
    opq_begin_call(&c->ops, call, ckpt_op, c);
}
