/* PullImage: an adapter from the protobuf request to image_pull(); the pull
 * itself runs on the image service's threads and completes on the loop. A
 * caller that goes away (its deadline passed, it hung up) stops waiting;
 * the pull is cancelled when no caller waits for it any more (concurrent
 * calls for one image share one pull), as containerd cancels a pull whose
 * context is done. */
#include "cri/internal.h"

static void pull_done(void *data, int r, const struct err *err, const char *image_id)
{
    struct cri_call *call = data;
    if (r < 0) {
        cri_fail_err(call, err);
        return;
    }
    Runtime__V1__PullImageResponse resp = RUNTIME__V1__PULL_IMAGE_RESPONSE__INIT;
    resp.image_ref = (char *)image_id; /* the image id, as containerd answers */
    cri_reply(call, &resp.base);
}

static void on_cancel(struct grpc_call *gc, void *data)
{
    (void)gc;
    struct cri_call *call = data;
    /* pull_done still runs (and finishes the call) */
    if (call->cri->images)
        image_pull_abandon(call->cri->images, pull_done, call);
}

void cri_image_auth(const Runtime__V1__AuthConfig *a, struct image_auth *ret)
{
    *ret = (struct image_auth){0};
    if (!a)
        return;
    /* borrowed: image_pull copies what it keeps; never logged */
    ret->username = a->username;
    ret->password = a->password;
    ret->auth = a->auth;
    ret->server_address = a->server_address;
    ret->identity_token = a->identity_token;
    ret->registry_token = a->registry_token;
}

void cri_pull_image(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    Runtime__V1__PullImageRequest *req = (Runtime__V1__PullImageRequest *)call->req;
    const char *ref = req->image ? req->image->image : NULL;
    if (!ref || !*ref) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "PullImage: the image reference is empty");
        return;
    }
    struct image_auth auth;
    cri_image_auth(req->auth, &auth);
    struct err err = {0};
    if (image_pull(call->cri->images, ref, &auth, pull_done, call, &err) < 0) {
        cri_fail_err(call, &err);
        return;
    }
    grpc_call_on_cancel(call->gc, on_cancel, call);
    if (grpc_call_cancelled(call->gc))
        on_cancel(call->gc, call);
}
