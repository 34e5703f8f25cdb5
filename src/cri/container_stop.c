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
    ctr_stopped_fn done;
    void *data;
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
            log_warn("container `%s`: signal %d: %s", j->id, j->sig, err_str(&j->err));
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
        s->done(s->data, c, r, err);
        free(s);
        s = next;
    }
}

void container_stop(struct cri *cri, struct container *c, int64_t timeout_s, ctr_stopped_fn done,
                    void *data)
{
    if (c->rec.state != STORE_CTR_RUNNING && !(c->rec.state == STORE_CTR_CREATED && c->watch)) {
        done(data, c, 0, NULL);
        return;
    }
    struct ctr_stop *s = calloc(1, sizeof(*s));
    if (!s) {
        struct err e = {0};
        err_set(&e, ENOMEM, "stop container `%s`", c->rec.id);
        done(data, c, -ENOMEM, &e);
        return;
    }
    s->c = c;
    s->done = done;
    s->data = data;
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

/* ---- removal ---- */

struct ctr_remove {
    uv_work_t req;
    struct cri *cri; /* loop side only */
    ctr_done_fn done;
    void *data;
    char id[STORE_ID_LEN + 1];
    char *oci_root, *bundles_dir, *records_dir;
    struct err err;
    int r;
};

static void remove_work(uv_work_t *req)
{
    struct ctr_remove *rm = req->data;
    rm->r =
        container_remains_remove(rm->oci_root, rm->bundles_dir, rm->records_dir, rm->id, &rm->err);
    if (rm->r == 0)
        rm->r = store_record_delete(rm->records_dir, rm->id, &rm->err);
}

static void release_done(void *data, int r, const struct err *err)
{
    char *id = data;
    if (r < 0)
        log_warn("container `%s`: release its image: %s", id, err_str(err));
    free(id);
}

static void remove_free(struct ctr_remove *rm)
{
    free(rm->oci_root);
    free(rm->bundles_dir);
    free(rm->records_dir);
    free(rm);
}

static void remove_done(uv_work_t *req, int status)
{
    struct ctr_remove *rm = req->data;
    struct cri *cri = rm->cri;
    struct container *c = container_find_exact(cri, rm->id);
    if (status < 0 && rm->r == 0)
        rm->r = err_set(&rm->err, -status, "cancelled");
    if (rm->r < 0) {
        err_wrap(&rm->err, "remove container `%s`", rm->id);
        if (c)
            opq_end(&c->ops, c, false);
    } else {
        log_info("container `%s` removed", rm->id);
        char *hid = strdup(rm->id);
        struct err e = {0};
        if (!hid || image_release(cri->images, rm->id, release_done, hid, &e) < 0) {
            log_warn("container `%s`: release its image: %s", rm->id,
                     hid ? err_str(&e) : "out of memory");
            free(hid);
        }
        if (c) {
            container_event(cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT);
            opq_end(&c->ops, c, true);
            container_unlink_free(cri, c);
        }
    }
    rm->done(rm->data, rm->r, &rm->err);
    remove_free(rm);
}

static void remove_start(struct container *c, void *data)
{
    (void)c;
    struct ctr_remove *rm = data;
    rm->req.data = rm;
    uv_queue_work(rm->cri->loop, &rm->req, remove_work, remove_done);
}

static void remove_after_stop(void *data, struct container *c, int r, const struct err *err)
{
    struct ctr_remove *rm = data;
    if (r < 0 && r != -ESRCH) {
        rm->err = *err;
        opq_end(&c->ops, c, false);
        rm->done(rm->data, r, &rm->err);
        remove_free(rm);
        return;
    }
    /* The record goes last: no save may be in flight to bring it back. */
    container_when_saved(c, remove_start, rm);
}

void container_remove(struct cri *cri, struct container *c, ctr_done_fn done, void *data)
{
    struct containers *cs = cri->containers;
    struct ctr_remove *rm = calloc(1, sizeof(*rm));
    if (!rm || !(rm->oci_root = strdup(cs->oci_root)) ||
        !(rm->bundles_dir = strdup(cs->bundles_dir)) ||
        !(rm->records_dir = strdup(cs->records_dir))) {
        if (rm) {
            free(rm->oci_root);
            free(rm->bundles_dir);
        }
        free(rm);
        struct err e = {0};
        err_set(&e, ENOMEM, "remove container `%s`", c->rec.id);
        opq_end(&c->ops, c, false);
        done(data, -ENOMEM, &e);
        return;
    }
    rm->cri = cri;
    rm->done = done;
    rm->data = data;
    memcpy(rm->id, c->rec.id, sizeof(rm->id));
    /* A running container is killed first. */
    container_stop(cri, c, 0, remove_after_stop, rm);
}

/* ---- StopContainer ---- */

static void stop_reply(void *data, struct container *c, int r, const struct err *err)
{
    struct cri_call *call = data;
    if (r < 0)
        cri_fail_err(call, err);
    else {
        Runtime__V1__StopContainerResponse resp = RUNTIME__V1__STOP_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
    opq_end(&c->ops, c, false);
}

static void stop_op(void *data, void *obj)
{
    struct cri_call *call = data;
    struct container *c = obj;
    if (!c) { /* removed while this call waited: stopped for good */
        Runtime__V1__StopContainerResponse resp = RUNTIME__V1__STOP_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
        return;
    }
    Runtime__V1__StopContainerRequest *req = (Runtime__V1__StopContainerRequest *)call->req;
    container_stop(call->cri, c, req->timeout, stop_reply, call);
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
    opq_begin_call(&c->ops, call, stop_op, c);
}

/* ---- RemoveContainer ---- */

static void remove_reply(void *data, int r, const struct err *err)
{
    struct cri_call *call = data;
    if (r < 0) {
        cri_fail_err(call, err);
        return;
    }
    Runtime__V1__RemoveContainerResponse resp = RUNTIME__V1__REMOVE_CONTAINER_RESPONSE__INIT;
    cri_reply(call, &resp.base);
}

static void remove_op(void *data, void *obj)
{
    struct cri_call *call = data;
    struct container *c = obj;
    if (!c) { /* removed while this call waited */
        remove_reply(call, 0, NULL);
        return;
    }
    container_remove(call->cri, c, remove_reply, call);
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
        remove_reply(call, 0, NULL);
        return;
    }
    opq_begin_call(&c->ops, call, remove_op, c);
}

/* ---- every container of a pod (StopPodSandbox, RemovePodSandbox) ---- */

struct pod_sweep {
    size_t left;
    int r;
    struct err err;
    ctr_done_fn done;
    void *data;
};

/* Returns true when that was the last one (sw is freed then). */
static bool sweep_one_done(struct pod_sweep *sw, int r, const struct err *err)
{
    if (r < 0 && sw->r == 0) {
        sw->r = r;
        sw->err = *err;
    }
    if (--sw->left > 0)
        return false;
    sw->done(sw->data, sw->r, &sw->err);
    free(sw);
    return true;
}

static void sweep_stopped(void *data, struct container *c, int r, const struct err *err)
{
    (void)c;
    (void)sweep_one_done(data, r == -ESRCH ? 0 : r, err);
}

static void sweep_removed(void *data, int r, const struct err *err)
{
    (void)sweep_one_done(data, r, err);
}

static void sweep_remove_op(void *data, void *obj)
{
    struct container *c = obj;
    if (!c) { /* removed meanwhile */
        (void)sweep_one_done(data, 0, NULL);
        return;
    }
    container_remove(c->cri, c, sweep_removed, data);
}

void container_sweep_pod(struct cri *cri, const char *pod_id, bool remove, int64_t grace_s,
                         ctr_done_fn done, void *data)
{
    struct pod_sweep *sw = calloc(1, sizeof(*sw));
    if (!sw) {
        struct err e = {0};
        err_set(&e, ENOMEM, "the containers of pod `%s`", pod_id);
        done(data, -ENOMEM, &e);
        return;
    }
    sw->done = done;
    sw->data = data;
    /* Every share is counted before any can end; this function holds one
     * more, dropped at the end. Nothing here completes synchronously but a
     * stop of a container that does not run, which only drops its own. */
    sw->left = 1;
    for (struct container *c = cri->containers->head; c; c = c->next)
        sw->left += strcmp(c->rec.pod_id, pod_id) == 0;
    for (struct container *c = cri->containers->head, *next; c; c = next) {
        next = c->next;
        if (strcmp(c->rec.pod_id, pod_id) != 0)
            continue;
        if (!remove) {
            container_stop(cri, c, grace_s, sweep_stopped, sw);
        } else if (opq_begin(&c->ops, sw, sweep_remove_op, c) < 0) {
            struct err e = {0};
            err_set(&e, ENOMEM, "remove container `%s`", c->rec.id);
            (void)sweep_one_done(sw, -ENOMEM, &e);
        }
    }
    (void)sweep_one_done(sw, 0, NULL);
}
