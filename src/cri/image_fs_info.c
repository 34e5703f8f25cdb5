/* ImageFsInfo: the image filesystem (the unpacked layers, from the image
 * service's counters) and the container filesystem (<root>/containers,
 * where containers' writable layers live), as CRI-O reports them: kubelet
 * reads both for its imagefs and containerfs eviction signals and, when
 * the two mountpoints are on different devices, treats the node as having
 * a split image filesystem.
 *
 * The container side is measured by walking the tree (du) on the thread
 * pool for each call; several calls at once share one walk. */
#include <string.h>
#include <sys/stat.h>

#include "cri/internal.h"

struct fs_waiter {
    struct cri_call *call;
    struct fs_waiter *next;
};

struct fs_walk {
    uv_work_t req;
    struct cri *cri;
    uint64_t bytes, inodes;
    int r;
    struct fs_waiter *waiters;
};

static void fill_usage(Runtime__V1__FilesystemUsage *fs, Runtime__V1__FilesystemIdentifier *id,
                       Runtime__V1__UInt64Value *bytes, Runtime__V1__UInt64Value *inodes,
                       char *mountpoint, uint64_t b, uint64_t n, uint64_t ts)
{
    runtime__v1__filesystem_usage__init(fs);
    runtime__v1__filesystem_identifier__init(id);
    runtime__v1__uint64_value__init(bytes);
    runtime__v1__uint64_value__init(inodes);
    id->mountpoint = mountpoint;
    bytes->value = b;
    inodes->value = n;
    fs->timestamp = (int64_t)ts;
    fs->fs_id = id;
    fs->used_bytes = bytes;
    fs->inodes_used = inodes;
}

static void reply(struct cri_call *call, const struct fs_walk *w)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    if (w->r < 0) {
        cri_fail(call, cri_status_from_errno(w->r), "measure `%s`: %s", w->cri->containers_dir,
                 strerror(-w->r));
        return;
    }
    struct image_fs_usage u;
    struct err err = {0};
    if (image_fs_info(call->cri->images, &u, &err) < 0) {
        cri_fail_err(call, &err);
        return;
    }
    Runtime__V1__FilesystemIdentifier ids[2];
    Runtime__V1__UInt64Value bytes[2], inodes[2];
    Runtime__V1__FilesystemUsage fs[2];
    fill_usage(&fs[0], &ids[0], &bytes[0], &inodes[0], u.mountpoint, u.used_bytes, u.inodes_used,
               u.timestamp_ns);
    fill_usage(&fs[1], &ids[1], &bytes[1], &inodes[1], w->cri->containers_dir, w->bytes, w->inodes,
               now_real_ns());
    Runtime__V1__FilesystemUsage *images[1] = {&fs[0]}, *containers[1] = {&fs[1]};
    Runtime__V1__ImageFsInfoResponse resp = RUNTIME__V1__IMAGE_FS_INFO_RESPONSE__INIT;
    resp.image_filesystems = images;
    resp.n_image_filesystems = 1;
    resp.container_filesystems = containers;
    resp.n_container_filesystems = 1;
    cri_reply(call, &resp.base);
    image_fs_usage_clear(&u);
}

static void walk_work(uv_work_t *req)
{
    struct fs_walk *w = req->data;
    w->r = du_path(w->cri->containers_dir, &w->bytes, &w->inodes);
    if (w->r == -ENOENT) { /* removed behind our back: recreate, it is empty */
        w->r = mkdir(w->cri->containers_dir, 0711) < 0 && errno != EEXIST ? -errno : 0;
        w->bytes = w->inodes = 0;
    }
}

static void walk_done(uv_work_t *req, int status)
{
    struct fs_walk *w = req->data;
    if (status < 0)
        w->r = status == UV_ECANCELED ? -ECANCELED : -EIO;
    if (w->cri->fs_walk == w)
        w->cri->fs_walk = NULL;
    for (struct fs_waiter *q = w->waiters, *next; q; q = next) {
        next = q->next;
        reply(q->call, w);
        free(q);
    }
    free(w);
}

void cri_image_fs_info(struct cri_call *call)
{
    struct cri *cri = call->cri;
    if (!cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    struct fs_waiter *q = calloc(1, sizeof(*q));
    if (!q) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "image fs info: out of memory");
        return;
    }
    q->call = call;
    struct fs_walk *w = cri->fs_walk;
    if (!w) {
        w = calloc(1, sizeof(*w));
        if (!w) {
            free(q);
            cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "image fs info: out of memory");
            return;
        }
        w->cri = cri;
        w->req.data = w;
        cri->fs_walk = w;
        uv_queue_work(cri->loop, &w->req, walk_work, walk_done);
    }
    q->next = w->waiters;
    w->waiters = q;
}
