/* ImageFsInfo: bytes and inodes of the unpacked layers, from the image
 * service's counters (no disk walk on the loop). Containers' writable
 * layers live on the same filesystem, so container_filesystems stays empty
 * as the CRI asks. */
#include "cri/internal.h"

void cri_image_fs_info(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    struct image_fs_usage u;
    struct err err = {0};
    if (image_fs_info(call->cri->images, &u, &err) < 0) {
        cri_fail_err(call, &err);
        return;
    }
    Runtime__V1__FilesystemIdentifier id = RUNTIME__V1__FILESYSTEM_IDENTIFIER__INIT;
    Runtime__V1__UInt64Value bytes = RUNTIME__V1__UINT64_VALUE__INIT;
    Runtime__V1__UInt64Value inodes = RUNTIME__V1__UINT64_VALUE__INIT;
    Runtime__V1__FilesystemUsage fs = RUNTIME__V1__FILESYSTEM_USAGE__INIT;
    id.mountpoint = u.mountpoint;
    bytes.value = u.used_bytes;
    inodes.value = u.inodes_used;
    fs.timestamp = (int64_t)u.timestamp_ns;
    fs.fs_id = &id;
    fs.used_bytes = &bytes;
    fs.inodes_used = &inodes;
    Runtime__V1__FilesystemUsage *list[1] = {&fs};
    Runtime__V1__ImageFsInfoResponse resp = RUNTIME__V1__IMAGE_FS_INFO_RESPONSE__INIT;
    resp.image_filesystems = list;
    resp.n_image_filesystems = 1;
    cri_reply(call, &resp.base);
    image_fs_usage_clear(&u);
}
