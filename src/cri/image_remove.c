/* RemoveImage by id, tag or digest. Idempotent: an absent image is OK
 * (kubelet retries removals and races its own garbage collection). An
 * image mounted as an image volume is refused with FAILED_PRECONDITION
 * (CRI-O refuses it too) until its containers are removed. */
#include "cri/internal.h"

/* The end of an image operation whose answer is empty (RemoveImage's, and
 * the private Hold and Release, image_private.c): the error, or an empty
 * RemoveImageResponse. */
void cri_image_op_done(void *data, int r, const struct err *err)
{
    struct cri_call *call = data;
    if (r < 0) {
        cri_fail_err(call, err);
        return;
    }
    Runtime__V1__RemoveImageResponse resp = RUNTIME__V1__REMOVE_IMAGE_RESPONSE__INIT;
    cri_reply(call, &resp.base);
}

void cri_remove_image(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    Runtime__V1__RemoveImageRequest *req = (Runtime__V1__RemoveImageRequest *)call->req;
    const char *ref = req->image ? req->image->image : NULL;
    if (!ref || !*ref) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "RemoveImage: the image is empty");
        return;
    }
    struct err err = {0};
    if (image_remove(call->cri->images, ref, cri_image_op_done, call, &err) < 0) {
        if (err.code == EBUSY)
            cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "RemoveImage: %s", err_str(&err));
        else
            cri_fail_err(call, &err);
    }
}
