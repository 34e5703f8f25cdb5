/* StartContainer: lets the created container's init execve (the executor's
 * `start`, in a worker) and records it as running. A start that fails
 * leaves the container exited with reason ContainerCannotRun and the
 * executor's message, as Docker and containerd report it, so that kubelet
 * sees why and restarts it with back-off. */
#include <signal.h>
#include <string.h>

#include "cri/containers.h"
#include "oci/oci.h"

struct start_job {
    uv_work_t req;
    struct cri_call *call; /* loop side only */
    char *oci_root;
    char id[STORE_ID_LEN + 1];
    uint64_t started_ns;
    struct err err;
    int r;
};

static void start_work(uv_work_t *req)
{
    struct start_job *j = req->data;
    j->r = oci_container_start(j->oci_root, j->id, &j->err);
    j->started_ns = now_real_ns();
    if (j->r < 0) {
        /* Kill what is left of it; its exit is recorded with our reason. */
        struct err e = {0};
        oci_container_kill(j->oci_root, j->id, SIGKILL, true, &e);
    }
}

static void start_saved(struct container *c, void *data)
{
    struct cri_call *call = data;
    Runtime__V1__StartContainerResponse resp = RUNTIME__V1__START_CONTAINER_RESPONSE__INIT;
    cri_reply(call, &resp.base);
    container_event(c->cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STARTED_EVENT);
    container_start_end(c->cri, c);
    opq_end(&c->ops, c, false);
}

static void start_done(uv_work_t *req, int status)
{
    struct start_job *j = req->data;
    struct cri_call *call = j->call;
    struct cri *cri = call->cri;
    struct container *c = container_find_exact(cri, j->id);
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    bool stopped = false;
    if (c && j->r == 0 && c->rec.state == STORE_CTR_CREATED) {
        c->rec.state = STORE_CTR_RUNNING;
        c->rec.started_ns = j->started_ns;
        container_save(cri, c);
    } else if (c && j->r < 0 && c->rec.state != STORE_CTR_EXITED) {
        stopped = true;
        c->rec.state = STORE_CTR_EXITED;
        c->rec.exit_code = 128;
        c->rec.finished_ns = j->started_ns;
        free(c->rec.reason);
        free(c->rec.message);
        c->rec.reason = strdup("ContainerCannotRun");
        c->rec.message = strdup(err_str(&j->err));
        container_save(cri, c);
    }
    if (j->r < 0) {
        err_wrap(&j->err, "start container `%s`", j->id);
        cri_fail_err(call, &j->err);
        if (c) {
            if (stopped)
                container_event(cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT);
            container_start_end(cri, c);
            opq_end(&c->ops, c, false);
        }
    } else if (c) {
        log_info("container `%s` started", j->id);
        /* The answer once "running" is on disk. */
        container_when_saved(c, start_saved, call);
    } else {
        Runtime__V1__StartContainerResponse resp = RUNTIME__V1__START_CONTAINER_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
    free(j->oci_root);
    free(j);
}

static void start_op(void *data, void *obj)
{
    struct cri_call *call = data;
    struct container *c = obj;
    Runtime__V1__StartContainerRequest *req = (Runtime__V1__StartContainerRequest *)call->req;
    if (!c) {
        cri_fail(call, GRPC_STATUS_NOT_FOUND, "container `%.64s` not found", req->container_id);
        return;
    }
    if (c->rec.state != STORE_CTR_CREATED) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "StartContainer: container `%s` is %s, not created", c->rec.id,
                 store_ctr_state_name(c->rec.state));
        opq_end(&c->ops, c, false);
        return;
    }
    struct containers *cs = call->cri->containers;
    struct start_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->oci_root = strdup(cs->oci_root))) {
        free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        opq_end(&c->ops, c, false);
        return;
    }
    j->call = call;
    memcpy(j->id, c->rec.id, sizeof(j->id));
    j->req.data = j;
    container_start_begin(c);
    uv_queue_work(call->cri->loop, &j->req, start_work, start_done);
}

void cri_start_container(struct cri_call *call)
{
    Runtime__V1__StartContainerRequest *req = (Runtime__V1__StartContainerRequest *)call->req;
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
    opq_begin_call(&c->ops, call, start_op, c);
}
