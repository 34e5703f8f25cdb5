/* StopPodSandbox and RemovePodSandbox. Both are idempotent, as kubelet
 * expects: a pod that is unknown (already removed, or never finished) is not
 * an error, a pod already stopped stops again at no cost, and every step
 * (killing, network teardown, unmounts, cgroup and directory removal) accepts
 * what is already gone. Stop persists NOTREADY once the pod is down; Remove
 * deletes the record last, so a crash in the middle leaves a record that a
 * second Remove finishes. */
#include <string.h>

#include "cri/containers.h"

struct stop_work {
    uv_work_t req;
    struct cri_call *call;
    struct sandbox *sb;
    bool remove;
    char dir[4200];
    struct pod_sandbox_ref ref;
    char *records_dir;
    char *json; /* the NOTREADY record (stop) */
    size_t json_len;
    struct err err;
    int r;
};

static void stop_work(uv_work_t *req)
{
    struct stop_work *w = req->data;
    if (w->remove) {
        w->r = pod_sandbox_remove(&w->ref, &w->err);
        if (w->r == 0)
            w->r = store_pod_delete(w->records_dir, w->ref.id, &w->err);
        return;
    }
    w->r = pod_sandbox_stop(&w->ref, &w->err);
    if (w->r == 0 && w->json)
        w->r = store_pod_write(w->records_dir, w->ref.id, w->json, w->json_len, &w->err);
}

static void reply_ok(struct cri_call *call, bool remove)
{
    if (remove) {
        Runtime__V1__RemovePodSandboxResponse resp = RUNTIME__V1__REMOVE_POD_SANDBOX_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    } else {
        Runtime__V1__StopPodSandboxResponse resp = RUNTIME__V1__STOP_POD_SANDBOX_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
}

static void stop_done(uv_work_t *req, int status)
{
    struct stop_work *w = req->data;
    struct cri_call *call = w->call;
    struct cri *cri = call->cri;
    struct sandbox *sb = w->sb;
    if (status < 0 && w->r == 0)
        w->r = err_set(&w->err, -status, "cancelled");
    if (w->r < 0) {
        err_wrap(&w->err, "%s pod sandbox `%s`", w->remove ? "remove" : "stop", sb->rec.id);
        cri_fail_err(call, &w->err);
        sandbox_op_end(cri, sb, false);
    } else if (w->remove) {
        log_info("pod sandbox `%s` removed", sb->rec.id);
        reply_ok(call, true);
        sandbox_op_end(cri, sb, true);
    } else {
        if (sb->rec.state == STORE_POD_READY)
            log_info("pod sandbox `%s` stopped", sb->rec.id);
        sb->rec.state = STORE_POD_NOTREADY;
        sb->rec.nips = 0;
        reply_ok(call, false);
        sandbox_op_end(cri, sb, false);
    }
    free(w->records_dir);
    free(w->json);
    free(w);
}

static void op_pod(struct cri_call *call, struct sandbox *sb, bool remove);

struct sweep_ctx {
    struct cri_call *call;
    struct sandbox *sb; /* the pod's operation holds it */
    bool remove;
};

static void after_sweep(void *data, int r, const struct err *err)
{
    struct sweep_ctx *x = data;
    struct cri_call *call = x->call;
    struct sandbox *sb = x->sb;
    bool remove = x->remove;
    free(x);
    if (r < 0) {
        struct err e = *err;
        err_wrap(&e, "%s pod sandbox `%s`", remove ? "remove" : "stop", sb->rec.id);
        cri_fail_err(call, &e);
        sandbox_op_end(call->cri, sb, false);
        return;
    }
    op_pod(call, sb, remove);
}

/* The pod's containers first: stopped (their stop signal, then SIGKILL
 * after the pod stop grace period, as CRI-O does) or removed. */
static void op(struct cri_call *call, struct sandbox *sb, bool remove)
{
    if (!sb) { /* removed while this call waited */
        reply_ok(call, remove);
        return;
    }
    struct sweep_ctx *x = calloc(1, sizeof(*x));
    if (!x) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        sandbox_op_end(call->cri, sb, false);
        return;
    }
    *x = (struct sweep_ctx){call, sb, remove};
    container_sweep_pod(call->cri, sb->rec.id, remove, call->cri->pod_stop_grace_s, after_sweep, x);
}

static void op_pod(struct cri_call *call, struct sandbox *sb, bool remove)
{
    struct cri *cri = call->cri;
    /* Stopped already (the record says so only once every step succeeded). */
    if (!remove && sb->rec.state == STORE_POD_NOTREADY) {
        reply_ok(call, false);
        sandbox_op_end(cri, sb, false);
        return;
    }
    struct err err = {0};
    struct stop_work *w = calloc(1, sizeof(*w));
    if (!w || !(w->records_dir = strdup(cri->sandboxes->records_dir))) {
        free(w);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        sandbox_op_end(cri, sb, false);
        return;
    }
    if (!remove) {
        struct store_pod copy = sb->rec;
        copy.state = STORE_POD_NOTREADY;
        copy.nips = 0;
        if (store_pod_to_json(&copy, &w->json, &w->json_len, &err) < 0) {
            free(w->records_dir);
            free(w);
            cri_fail_err(call, &err);
            sandbox_op_end(cri, sb, false);
            return;
        }
    }
    w->call = call;
    w->sb = sb;
    w->remove = remove;
    sandbox_ref(cri, sb, w->dir, sizeof(w->dir), &w->ref);
    /* Stop tears the network down in the background (the host ports at
     * once, then the veth, then the leases); a pod stopped already has
     * had that done, so Remove does not race it. */
    w->ref.net_async = true;
    if (sb->rec.state == STORE_POD_NOTREADY)
        w->ref.net = NULL;
    w->req.data = w;
    uv_queue_work(cri->loop, &w->req, stop_work, stop_done);
}

static void stop_op(struct cri_call *call, struct sandbox *sb) { op(call, sb, false); }
static void remove_op(struct cri_call *call, struct sandbox *sb) { op(call, sb, true); }

static void begin(struct cri_call *call, const char *id, bool remove)
{
    if (!*id) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s: pod_sandbox_id is empty",
                 remove ? "RemovePodSandbox" : "StopPodSandbox");
        return;
    }
    bool ambiguous;
    struct sandbox *sb = sandbox_find(call->cri, id, &ambiguous);
    if (ambiguous) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "pod sandbox id prefix `%.64s` is ambiguous",
                 id);
        return;
    }
    if (!sb) { /* idempotent: an unknown pod is already stopped and removed */
        reply_ok(call, remove);
        return;
    }
    sandbox_op_begin(call, sb, remove ? remove_op : stop_op);
}

void cri_stop_pod_sandbox(struct cri_call *call)
{
    begin(call, ((Runtime__V1__StopPodSandboxRequest *)call->req)->pod_sandbox_id, false);
}

void cri_remove_pod_sandbox(struct cri_call *call)
{
    begin(call, ((Runtime__V1__RemovePodSandboxRequest *)call->req)->pod_sandbox_id, true);
}
