/* StopContainer and RemoveContainer. Both are idempotent, as kubelet
 * expects: stopping a container that is stopped or unknown, and removing
 * one that is unknown, are not errors.
 *
 * Stop sends the container's stop signal (from its config, else its
 * image, else SIGTERM) to its init and, after `timeout` seconds (a timer,
 * never a sleep), SIGKILL to every process of its cgroup; timeout 0 kills
 * at once. It ends when the monitor has recorded the exit (container.c).
 * Remove stops a running container with SIGKILL first, then removes the
 * executor's state, the rootfs mount, the bundle, the writable layer and
 * the record last (a crash in the middle leaves a record that a second
 * Remove finishes), and lets the image's layers go. The log file stays, as
 * kubelet expects. */
#include <signal.h>
#include <string.h>

#include "cri/containers.h"
#include "oci/oci.h"

struct ctr_stop {
    struct ctr_stop *next;
    struct container *c;
    struct cri_call *call;
    ctr_stopped_fn done;
    uv_timer_t *timer; /* SIGKILL when it fires */
};

struct kill_job {
    uv_work_t req;
    struct cri *cri; /* for the after-work callback only */
    char *oci_root;
    char id[STORE_ID_LEN + 1];
    int sig;
    bool all;
    struct err err;
    int r;
};

static void kill_work(uv_work_t *req)
{
    struct kill_job *j = req->data;
    j->r = oci_container_kill(j->oci_root, j->id, j->sig, j->all, &j->err);
}

static void kill_done(uv_work_t *req, int status)
{
    struct kill_job *j = req->data;
    struct container *c = container_find_exact(j->cri, j->id);
    if (status == 0 && j->r < 0 && c && c->rec.state == STORE_CTR_RUNNING && c->watch) {
        /* The init may be gone already (ESRCH): the exit is on its way. */
        if (j->r != -ESRCH && j->r != -ENOENT)
            log_warn("container `%s`: signal %d: %s", j->id, j->sig, j->err.msg);
    }
    if (c && c->rec.state == STORE_CTR_RUNNING && !c->watch && !c->exit_reading) {
        /* Nothing watches this container (its monitor was killed from
         * outside): look at its state instead. */
        struct err e = {0};
        err_set(&e, ESRCH, "container `%s` has no monitor; its exit cannot be recorded", j->id);
        container_stops_done(c, -ESRCH, &e);
    }
    free(j->oci_root);
    free(j);
}

static void send_signal(struct cri *cri, struct container *c, int sig, bool all)
{
    struct kill_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->oci_root = strdup(cri->containers->oci_root))) {
        free(j);
        log_error("container `%s`: out of memory sending signal %d", c->rec.id, sig);
        return;
    }
    j->cri = cri;
    memcpy(j->id, c->rec.id, sizeof(j->id));
    j->sig = sig;
    j->all = all;
    j->req.data = j;
    uv_queue_work(cri->loop, &j->req, kill_work, kill_done);
}

static void on_timer_close(uv_handle_t *h) { free(h); }

static void on_stop_timeout(uv_timer_t *t)
{
    struct ctr_stop *s = t->data;
    log_info("container `%s`: still running after its stop timeout; killing it", s->c->rec.id);
    send_signal(s->c->cri, s->c, SIGKILL, true);
}

void container_stops_done(struct container *c, int r, const struct err *err)
{
    struct ctr_stop *s = c->stops;
    c->stops = NULL;
    while (s) {
        struct ctr_stop *next = s->next;
        if (s->timer)
            uv_close((uv_handle_t *)s->timer, on_timer_close);
        s->done(s->call, c, r, err);
        free(s);
        s = next;
    }
}

void container_stop(struct cri *cri, struct container *c, int64_t timeout_s, struct cri_call *call,
                    ctr_stopped_fn done)
{
    if (c->rec.state != STORE_CTR_RUNNING && !(c->rec.state == STORE_CTR_CREATED && c->watch)) {
        done(call, c, 0, NULL);
        return;
    }
    struct ctr_stop *s = calloc(1, sizeof(*s));
    if (!s) {
        struct err e = {0};
        err_set(&e, ENOMEM, "stop container `%s`", c->rec.id);
        done(call, c, -ENOMEM, &e);
        return;
    }
    s->c = c;
    s->call = call;
    s->done = done;
    s->next = c->stops;
    c->stops = s;
    /* A created container never started: nothing to be graceful with. */
    if (timeout_s <= 0 || c->rec.state == STORE_CTR_CREATED) {
        send_signal(cri, c, SIGKILL, true);
        return;
    }
    send_signal(cri, c, c->rec.stop_signal ? c->rec.stop_signal : SIGTERM, false);
    s->timer = malloc(sizeof(*s->timer));
    if (!s->timer || uv_timer_init(cri->loop, s->timer) < 0) {
        free(s->timer);
        s->timer = NULL;
        send_signal(cri, c, SIGKILL, true);
        return;
    }
    s->timer->data = s;
    uint64_t ms = (uint64_t)timeout_s > UINT64_MAX / 1000 ? UINT64_MAX : (uint64_t)timeout_s * 1000;
    uv_timer_start(s->timer, on_stop_timeout, ms, 0);
}

/* ---- StopContainer ---- */

static void stop_reply(struct cri_call *call, struct container *c, int r, const struct err *err)
{
    if (r < 0)
        cri_fail_err(call, err);
    else {
        Runtime__V1__StopContainerResponse resp = RUNTIME__V1__STOP_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
    if (c)
        opq_end(&c->ops, c, false);
}

static void stop_op(struct cri_call *call, void *obj)
{
    struct container *c = obj;
    if (!c) { /* removed while this call waited: stopped for good */
        Runtime__V1__StopContainerResponse resp = RUNTIME__V1__STOP_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
        return;
    }
    Runtime__V1__StopContainerRequest *req = (Runtime__V1__StopContainerRequest *)call->req;
    container_stop(call->cri, c, req->timeout, call, stop_reply);
}

void cri_stop_container(struct cri_call *call)
{
    Runtime__V1__StopContainerRequest *req = (Runtime__V1__StopContainerRequest *)call->req;
    if (!*req->container_id) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "StopContainer: container_id is empty");
        return;
    }
    bool ambiguous;
    struct container *c = container_find(call->cri, req->container_id, &ambiguous);
    if (ambiguous) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "container id prefix `%.64s` is ambiguous",
                 req->container_id);
        return;
    }
    if (!c) { /* idempotent: an unknown container is stopped */
        Runtime__V1__StopContainerResponse resp = RUNTIME__V1__STOP_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
        return;
    }
    opq_begin(&c->ops, call, stop_op, c);
}

/* ---- RemoveContainer ---- */

struct remove_job {
    uv_work_t req;
    struct cri_call *call; /* for the after-work callback only */
    char id[STORE_ID_LEN + 1];
    char *oci_root, *bundles_dir, *records_dir;
    struct err err;
    int r;
};

static void remove_work(uv_work_t *req)
{
    struct remove_job *j = req->data;
    j->r = container_remains_remove(j->oci_root, j->bundles_dir, j->records_dir, j->id, &j->err);
    if (j->r == 0)
        j->r = store_record_delete(j->records_dir, j->id, &j->err);
}

static void remove_reply(struct cri_call *call)
{
    Runtime__V1__RemoveContainerResponse resp = RUNTIME__V1__REMOVE_CONTAINER_RESPONSE__INIT;
    cri_reply(call, &resp.base);
}

static void release_done(void *data, int r, const struct err *err)
{
    char *id = data;
    if (r < 0)
        log_warn("container `%s`: release its image: %s", id, err->msg);
    free(id);
}

static void remove_done(uv_work_t *req, int status)
{
    struct remove_job *j = req->data;
    struct cri_call *call = j->call;
    struct cri *cri = call->cri;
    struct container *c = container_find_exact(cri, j->id);
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    if (j->r < 0) {
        err_wrap(&j->err, "remove container `%s`", j->id);
        cri_fail_err(call, &j->err);
        if (c)
            opq_end(&c->ops, c, false);
    } else {
        log_info("container `%s` removed", j->id);
        remove_reply(call);
        if (c) {
            char *hid = strdup(j->id);
            struct err e = {0};
            if (!hid || image_release(cri->images, j->id, release_done, hid, &e) < 0) {
                log_warn("container `%s`: release its image: %s", j->id,
                         hid ? e.msg : "out of memory");
                free(hid);
            }
            container_event(cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT);
            opq_end(&c->ops, c, true);
            container_unlink_free(cri, c);
        }
    }
    free(j->oci_root);
    free(j->bundles_dir);
    free(j->records_dir);
    free(j);
}

static void remove_start(struct container *c)
{
    struct cri_call *call = c->remove_call;
    c->remove_call = NULL;
    struct containers *cs = call->cri->containers;
    struct remove_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->oci_root = strdup(cs->oci_root)) ||
        !(j->bundles_dir = strdup(cs->bundles_dir)) ||
        !(j->records_dir = strdup(cs->records_dir))) {
        if (j) {
            free(j->oci_root);
            free(j->bundles_dir);
        }
        free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        opq_end(&c->ops, c, false);
        return;
    }
    j->call = call;
    memcpy(j->id, c->rec.id, sizeof(j->id));
    j->req.data = j;
    uv_queue_work(call->cri->loop, &j->req, remove_work, remove_done);
}

static void remove_after_stop(struct cri_call *call, struct container *c, int r,
                              const struct err *err)
{
    if (r < 0 && r != -ESRCH) {
        cri_fail_err(call, err);
        opq_end(&c->ops, c, false);
        return;
    }
    /* The record goes last: no save may be in flight to bring it back. */
    c->remove_call = call;
    container_when_saved(c, remove_start);
}

static void remove_op(struct cri_call *call, void *obj)
{
    struct container *c = obj;
    if (!c) { /* removed while this call waited */
        remove_reply(call);
        return;
    }
    /* A running container is killed first. */
    container_stop(call->cri, c, 0, call, remove_after_stop);
}

void cri_remove_container(struct cri_call *call)
{
    Runtime__V1__RemoveContainerRequest *req = (Runtime__V1__RemoveContainerRequest *)call->req;
    if (!*req->container_id) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "RemoveContainer: container_id is empty");
        return;
    }
    bool ambiguous;
    struct container *c = container_find(call->cri, req->container_id, &ambiguous);
    if (ambiguous) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "container id prefix `%.64s` is ambiguous",
                 req->container_id);
        return;
    }
    if (!c) { /* idempotent: an unknown container is removed */
        remove_reply(call);
        return;
    }
    opq_begin(&c->ops, call, remove_op, c);
}
