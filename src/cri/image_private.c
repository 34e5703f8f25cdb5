/* kinglet's own image routes, for `kinglet image` through the daemon (CRI
 * has none of these): /kinglet.v1.Images/Import, Hold and Release. Each
 * takes an ImageSpec; the socket is root's, as is the caller.
 *   Import:  image = the absolute path of an archive the daemon reads;
 *            answers a PullImageResponse with the last image's id.
 *   Hold:    image = the reference, annotations["holder"] = the holder;
 *   Release: annotations["holder"]; both answer a RemoveImageResponse
 *            (empty). A holder shaped like a container id (or a
 *            sub-holder of one, "ID/...") is refused: those holds are the
 *            runtime's, and a release of one would free a running
 *            container's layers. */
#include <string.h>

#include "cri/internal.h"
#include "store/store.h"

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

static void hold_done(void *data, int r, const struct err *err)
{
    struct cri_call *call = data;
    if (r < 0) {
        cri_fail_err(call, err);
        return;
    }
    Runtime__V1__RemoveImageResponse resp = RUNTIME__V1__REMOVE_IMAGE_RESPONSE__INIT;
    cri_reply(call, &resp.base);
}

/* The holder of the request, or NULL (the call failed). */
static const char *holder_of(struct cri_call *call, const char *rpc)
{
    Runtime__V1__ImageSpec *req = (Runtime__V1__ImageSpec *)call->req;
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return NULL;
    }
    const char *h = NULL;
    for (size_t i = 0; i < req->n_annotations; i++)
        if (strcmp(req->annotations[i]->key, "holder") == 0)
            h = req->annotations[i]->value;
    if (!h || !*h || strlen(h) > 256) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s: no holder (1 to 256 bytes)", rpc);
        return NULL;
    }
    char id[STORE_ID_LEN + 1];
    size_t n = strcspn(h, "/");
    snprintf(id, sizeof(id), "%.*s", (int)(n < STORE_ID_LEN ? n : STORE_ID_LEN), h);
    if (n == STORE_ID_LEN && store_id_valid(id)) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "%s: holder `%s` has the form of a container id: those holds are the runtime's",
                 rpc, h);
        return NULL;
    }
    return h;
}

void cri_hold_image(struct cri_call *call)
{
    Runtime__V1__ImageSpec *req = (Runtime__V1__ImageSpec *)call->req;
    const char *holder = holder_of(call, "Hold");
    if (!holder)
        return;
    if (!req->image || !*req->image) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "Hold: the image is empty");
        return;
    }
    struct err err = {0};
    if (image_hold(call->cri->images, holder, req->image, hold_done, call, &err) < 0)
        cri_fail_err(call, &err);
}

void cri_release_image(struct cri_call *call)
{
    const char *holder = holder_of(call, "Release");
    if (!holder)
        return;
    struct err err = {0};
    if (image_release(call->cri->images, holder, hold_done, call, &err) < 0)
        cri_fail_err(call, &err);
}
