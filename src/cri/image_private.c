/* kinglet's own image routes, for `kinglet image` through the daemon (CRI
 * has none of these): /kinglet.v1.Images/Import, Hold, Release and
 * PullProgress (below). The first three take an ImageSpec; the socket is
 * root's, as is the caller.
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
#include "kinglet.pb-c.h"
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
    if (image_hold(call->cri->images, holder, req->image, cri_image_op_done, call, &err) < 0)
        cri_fail_err(call, &err);
}

void cri_release_image(struct cri_call *call)
{
    const char *holder = holder_of(call, "Release");
    if (!holder)
        return;
    struct err err = {0};
    if (image_release(call->cri->images, holder, cri_image_op_done, call, &err) < 0)
        cri_fail_err(call, &err);
}

/* ---- PullProgress ------------------------------------------------------------
 *
 * /kinglet.v1.Images/PullProgress: a PullImageRequest answered with a
 * stream of kinglet.v1.PullProgress: each layer's steps, then the image id
 * (or the pull's error as the status). It starts the pull or joins one of
 * the same image under way ("waiting" first then), as PullImage would; a
 * client that goes away gives up its share of the pull, as with PullImage.
 *
 * A client that reads slowly or not at all costs a bounded amount: the
 * stream keeps the latest step of each layer (a row, at most
 * PROGRESS_ROWS_MAX), and sends a changed row only while less than
 * PROGRESS_SEND_LIMIT is queued for the client; a step that finds no room
 * replaces the one before it in the row. The last step of each layer and
 * the final message wait for room, and are never dropped. */
#define PROGRESS_SEND_LIMIT 512 /* a few steps: a terminal takes them at once */
#define PROGRESS_ROWS_MAX   257 /* a pull's layers (IMAGE_LAYERS_MAX), and the image's row */

struct progress_row {
    char digest[72], phase[16];
    uint64_t bytes, total;
    bool dirty;
};

struct pull_stream {
    struct cri_call *call; /* NULL once finished */
    struct progress_row *rows;
    size_t n_rows;
    bool pulling;      /* the pull's callback is still to come */
    bool waiting_room; /* grpc_call_when_room armed */
    bool have_result;
    int r;
    struct err err;
    char *image_id;
};

static void stream_free(struct pull_stream *ps)
{
    free(ps->rows);
    free(ps->image_id);
    free(ps);
}

static void stream_pulled(void *data, int r, const struct err *err, const char *image_id);

/* Ends the call; the stream goes with it unless the pull's callback is
 * still to come (it is given up, and frees the stream when it runs). */
static void stream_end(struct pull_stream *ps, int status, const char *message,
                       const struct err *err)
{
    struct cri_call *call = TAKE_PTR(ps->call);
    if (ps->pulling && call->cri->images)
        image_pull_abandon(call->cri->images, stream_pulled, ps);
    if (err)
        cri_fail_err(call, err);
    else
        cri_finish(call, status, message);
    if (!ps->pulling)
        stream_free(ps);
}

static void stream_pump(struct pull_stream *ps);

static void on_room(struct grpc_call *gc, void *data)
{
    (void)gc;
    struct pull_stream *ps = data;
    ps->waiting_room = false;
    stream_pump(ps);
}

static void stream_wait_room(struct pull_stream *ps)
{
    if (ps->waiting_room)
        return;
    int r = grpc_call_when_room(ps->call->gc, on_room, ps);
    if (r == 0)
        ps->waiting_room = true;
    else if (r == -ECANCELED)
        stream_end(ps, GRPC_STATUS_CANCELLED, "the client went away", NULL);
    else
        stream_end(ps, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "the daemon's response memory is held by other clients", NULL);
}

/* Sends msg; false when the stream cannot take it now (it waits for room)
 * or has ended. */
static bool stream_send(struct pull_stream *ps, const Kinglet__V1__PullProgress *msg)
{
    if (grpc_call_pending(ps->call->gc) >= PROGRESS_SEND_LIMIT) {
        stream_wait_room(ps);
        return false;
    }
    int r = cri_send(ps->call, &msg->base);
    if (r == -ENOBUFS) {
        stream_wait_room(ps);
        return false;
    }
    if (r < 0) {
        stream_end(ps, r == -ECANCELED ? GRPC_STATUS_CANCELLED : GRPC_STATUS_RESOURCE_EXHAUSTED,
                   strerror(-r), NULL);
        return false;
    }
    return true;
}

/* Sends the changed rows while the client takes them, then the result. */
static void stream_pump(struct pull_stream *ps)
{
    if (!ps->call || ps->waiting_room)
        return;
    for (size_t i = 0; i < ps->n_rows; i++) {
        struct progress_row *row = &ps->rows[i];
        if (!row->dirty)
            continue;
        Kinglet__V1__PullProgress m = KINGLET__V1__PULL_PROGRESS__INIT;
        m.digest = row->digest;
        m.phase = row->phase;
        m.bytes = row->bytes;
        m.total = row->total;
        if (!stream_send(ps, &m))
            return;
        row->dirty = false;
    }
    if (ps->pulling || !ps->have_result)
        return;
    if (ps->r < 0) {
        stream_end(ps, 0, NULL, &ps->err);
        return;
    }
    Kinglet__V1__PullProgress m = KINGLET__V1__PULL_PROGRESS__INIT;
    m.image_id = ps->image_id;
    if (stream_send(ps, &m))
        stream_end(ps, GRPC_STATUS_OK, NULL, NULL);
}

static void stream_step(void *data, const struct image_progress *p)
{
    struct pull_stream *ps = data;
    if (!ps->call)
        return;
    const char *digest = p->digest ? p->digest : "";
    struct progress_row *row = NULL;
    for (size_t i = 0; i < ps->n_rows && !row; i++)
        if (strcmp(ps->rows[i].digest, digest) == 0)
            row = &ps->rows[i];
    if (!row && ps->n_rows < PROGRESS_ROWS_MAX) {
        struct progress_row *v = realloc(ps->rows, (ps->n_rows + 1) * sizeof(*v));
        if (!v)
            return; /* a step less shown */
        ps->rows = v;
        row = &v[ps->n_rows++];
        *row = (struct progress_row){0};
        snprintf(row->digest, sizeof(row->digest), "%s", digest);
    }
    if (!row)
        return;
    snprintf(row->phase, sizeof(row->phase), "%s", p->phase);
    row->bytes = p->bytes;
    row->total = p->total;
    row->dirty = true;
    stream_pump(ps);
}

static void stream_pulled(void *data, int r, const struct err *err, const char *image_id)
{
    struct pull_stream *ps = data;
    ps->pulling = false;
    if (!ps->call) {
        stream_free(ps); /* the call ended first */
        return;
    }
    ps->have_result = true;
    ps->r = r;
    if (r < 0)
        ps->err = *err;
    else if (!(ps->image_id = strdup(image_id ? image_id : ""))) {
        ps->r = err_set(&ps->err, ENOMEM, "pull");
    }
    stream_pump(ps);
}

static void stream_cancel(struct grpc_call *gc, void *data)
{
    (void)gc;
    struct pull_stream *ps = data;
    if (ps->call)
        stream_end(ps, GRPC_STATUS_CANCELLED, "the client went away", NULL);
}

void cri_pull_progress(struct cri_call *call)
{
    Runtime__V1__PullImageRequest *req = (Runtime__V1__PullImageRequest *)call->req;
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    const char *ref = req->image ? req->image->image : NULL;
    if (!ref || !*ref) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "PullProgress: the image reference is empty");
        return;
    }
    struct pull_stream *ps = calloc(1, sizeof(*ps));
    if (!ps) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    struct image_auth auth;
    cri_image_auth(req->auth, &auth);
    ps->call = call;
    ps->pulling = true;
    grpc_call_set_send_limit(call->gc, PROGRESS_SEND_LIMIT);
    struct err err = {0};
    if (image_pull_progress(call->cri->images, ref, &auth, stream_pulled, stream_step, ps, &err) <
        0) {
        stream_free(ps);
        cri_fail_err(call, &err);
        return;
    }
    if (!ps->call)
        return; /* ended while joining (it could not send) */
    grpc_call_on_cancel(call->gc, stream_cancel, ps);
    if (grpc_call_cancelled(call->gc))
        stream_cancel(call->gc, ps);
}
