/* The container registry: lookups, the operation queue, the watch on each
 * running container's monitor, exits, events and recovery (see
 * containers.h for who may touch what).
 *
 * Exits: the monitor of a running container exits right after it has
 * written the exit record (durably) to the executor's state directory, so
 * its pidfd becoming readable means "read the exit record". That read and
 * the record update run in a worker; the loop then marks the container
 * exited, publishes CONTAINER_STOPPED_EVENT and answers the StopContainer
 * calls that waited for it. A daemon that was down meanwhile finds the exit
 * record at start, the same way.
 *
 * Recovery at start: records are loaded before the loop serves (records
 * with an unreadable config are skipped and logged); then, off the loop,
 * every container is checked against the executor: a container whose
 * executor state is gone (a reboot wiped the volatile state directory) is
 * exited with exit code 255 and reason "Unknown", as containerd reports it;
 * one whose monitor is alive is watched again; one that ended meanwhile gets
 * its real exit code and finish time; and directories left by a creation
 * that never wrote its record are removed. */
#include <assert.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>

#include "cri/containers.h"
#include "oci/oci.h"

/* ---- the operation queue ---- */

int opq_begin(struct opq *q, void *data, opq_fn fn, void *obj)
{
    if (!q->busy) {
        q->busy = true;
        fn(data, obj);
        return 0;
    }
    struct opq_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->data = data;
    w->fn = fn;
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    return 0;
}

void opq_begin_call(struct opq *q, struct cri_call *call, opq_fn fn, void *obj)
{
    if (opq_begin(q, call, fn, obj) < 0)
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
}

void opq_end(struct opq *q, void *obj, bool gone)
{
    q->busy = false;
    if (gone) {
        struct opq_waiter *w = q->head;
        q->head = q->tail = NULL;
        while (w) {
            struct opq_waiter *next = w->next;
            w->fn(w->data, NULL);
            free(w);
            w = next;
        }
        return;
    }
    struct opq_waiter *w = q->head;
    if (!w)
        return;
    q->head = w->next;
    if (!q->head)
        q->tail = NULL;
    q->busy = true;
    w->fn(w->data, obj);
    free(w);
}

/* ---- the registry ---- */

void container_dirs(struct cri *cri, const char *id, char *bundle, size_t bsize, char *layer,
                    size_t lsize)
{
    struct containers *cs = cri->containers;
    if (bundle)
        snprintf(bundle, bsize, "%s/%s", cs->bundles_dir, id);
    if (layer)
        snprintf(layer, lsize, "%s/%s", cs->records_dir, id);
}

static void on_watch_close(uv_handle_t *h) { free(h); }

static void unwatch(struct container *c)
{
    if (c->watch) {
        uv_close((uv_handle_t *)c->watch, on_watch_close);
        c->watch = NULL;
    }
    if (c->monitor_fd >= 0) {
        close(c->monitor_fd);
        c->monitor_fd = -1;
    }
}

static void container_free(struct container *c)
{
    if (!c)
        return;
    unwatch(c);
    store_ctr_clear(&c->rec);
    if (c->config)
        protobuf_c_message_free_unpacked(&c->config->base, NULL);
    if (c->resources)
        protobuf_c_message_free_unpacked(&c->resources->base, NULL);
    free(c);
}

void container_link(struct cri *cri, struct container *c)
{
    struct containers *cs = cri->containers;
    c->prev = NULL;
    c->next = cs->head;
    if (cs->head)
        cs->head->prev = c;
    cs->head = c;
    cs->n++;
}

void container_unlink_free(struct cri *cri, struct container *c)
{
    struct containers *cs = cri->containers;
    cri_cursors_skip(cs->cursors, c, c->next);
    if (c->prev)
        c->prev->next = c->next;
    else
        cs->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    cs->n--;
    container_free(c);
}

struct container *container_find_exact(struct cri *cri, const char *id)
{
    for (struct container *c = cri->containers->head; c; c = c->next)
        if (strcmp(c->rec.id, id) == 0)
            return c;
    return NULL;
}

struct container *container_find(struct cri *cri, const char *id, bool *ret_ambiguous)
{
    *ret_ambiguous = false;
    size_t len = strlen(id);
    if (len == 0 || len > STORE_ID_LEN)
        return NULL;
    struct container *found = NULL;
    for (struct container *c = cri->containers->head; c; c = c->next) {
        if (strncmp(c->rec.id, id, len) != 0)
            continue;
        if (len == STORE_ID_LEN)
            return c;
        if (found) {
            *ret_ambiguous = true;
            return NULL;
        }
        found = c;
    }
    return found;
}

struct container *container_find_or_fail(struct cri_call *call, const char *rpc, const char *id)
{
    bool ambiguous;
    struct container *c = container_find(call->cri, id, &ambiguous);
    if (!c)
        cri_fail_lookup(call, rpc, "container", id, ambiguous);
    return c;
}

struct sandbox *container_pod(struct cri *cri, const struct container *c)
{
    bool ambiguous;
    struct sandbox *sb = sandbox_find(cri, c->rec.pod_id, &ambiguous);
    return sb;
}

Runtime__V1__ContainerState container_state(const struct container *c)
{
    switch (c->rec.state) {
    case STORE_CTR_CREATED:
        return RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED;
    case STORE_CTR_RUNNING:
        return RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING;
    case STORE_CTR_EXITED:
        return RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED;
    }
    return RUNTIME__V1__CONTAINER_STATE__CONTAINER_UNKNOWN;
}

/* ---- exits ---- */

struct exit_job {
    uv_work_t req;
    struct cri *cri; /* for the after-work callback only */
    /* in */
    char *oci_root;
    char *records_dir;
    struct store_container rec; /* a copy to update and write */
    /* out */
    bool exited;
    struct err err;
    int r;
};

/* The reason kubelet shows for an exited container. */
static const char *exit_reason(const struct oci_state *st)
{
    if (st->oom_killed)
        return "OOMKilled";
    return st->exit_code == 0 ? "Completed" : "Error";
}

/* The exit record of rec's container into rec (worker). A container whose
 * executor state is gone ended without a record (a reboot): exit code 255,
 * reason Unknown, as containerd reports it. */
static int read_exit(const char *oci_root, struct store_container *rec, bool *ret_exited,
                     struct err *err)
{
    struct oci_state st = {0};
    struct err e = {0};
    int r = oci_container_state(oci_root, rec->id, &st, &e);
    *ret_exited = false;
    if (r == -ENOENT) {
        *ret_exited = true;
        rec->exit_code = 255;
        free(rec->reason);
        rec->reason = strdup("Unknown");
        free(rec->message);
        rec->message = strdup("the container's state was lost (the node rebooted?)");
        if (!rec->finished_ns)
            rec->finished_ns = now_real_ns();
        return 0;
    }
    if (r < 0) {
        *err = e;
        return r;
    }
    if (st.status == OCI_STATUS_STOPPED) {
        *ret_exited = true;
        rec->exit_code = st.exited ? st.exit_code : 255;
        free(rec->reason);
        rec->reason = strdup(st.exited ? exit_reason(&st) : "Unknown");
        if (st.started_ns && !rec->started_ns)
            rec->started_ns = st.started_ns;
        rec->finished_ns = st.finished_ns ? st.finished_ns : now_real_ns();
    }
    oci_state_clear(&st);
    return 0;
}

static void exit_work(uv_work_t *req)
{
    struct exit_job *j = req->data;
    j->r = read_exit(j->oci_root, &j->rec, &j->exited, &j->err);
}

/* Takes the exit fields of x into c, unless c has exited already (a failed
 * start records its own reason), and saves the record. */
static void apply_exit(struct cri *cri, struct container *c, struct store_container *x)
{
    if (c->rec.state == STORE_CTR_EXITED)
        return;
    c->rec.state = STORE_CTR_EXITED;
    c->rec.exit_code = x->exit_code;
    c->rec.started_ns = c->rec.started_ns ? c->rec.started_ns : x->started_ns;
    c->rec.finished_ns = x->finished_ns;
    free(c->rec.reason);
    free(c->rec.message);
    c->rec.reason = TAKE_PTR(x->reason);
    c->rec.message = TAKE_PTR(x->message);
    c->pid = 0;
    container_save(cri, c);
}

/* ---- saving records ----
 * Every change to a linked container's record is saved through here: one
 * write at a time per container, and the latest state wins (a change made
 * while a write is in flight is written again after it). */

struct save_job {
    uv_work_t req;
    struct cri *cri; /* for the after-work callback only */
    char *records_dir;
    struct store_container rec;
    struct err err;
    int r;
};

static void save_work(uv_work_t *req)
{
    struct save_job *j = req->data;
    _cleanup_free_ char *json = NULL;
    size_t len = 0;
    if ((j->r = store_ctr_to_json(&j->rec, &json, &len, &j->err)) == 0)
        j->r = store_record_write(j->records_dir, j->rec.id, json, len, &j->err);
}

static void save_done(uv_work_t *req, int status)
{
    struct save_job *j = req->data;
    struct container *c = container_find_exact(j->cri, j->rec.id);
    if (status < 0 || j->r < 0)
        log_error("container `%s`: save its record: %s", j->rec.id,
                  status < 0 ? "cancelled" : err_str(&j->err));
    store_ctr_clear(&j->rec);
    free(j->records_dir);
    struct cri *cri = j->cri;
    free(j);
    if (!c)
        return;
    c->saving = false;
    if (c->save_again) {
        c->save_again = false;
        container_save(cri, c);
        return;
    }
    if (c->on_saved) {
        ctr_saved_fn fn = c->on_saved;
        c->on_saved = NULL;
        fn(c, TAKE_PTR(c->on_saved_data));
    }
}

void container_save(struct cri *cri, struct container *c)
{
    if (c->saving) {
        c->save_again = true;
        return;
    }
    struct save_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->records_dir = strdup(cri->containers->records_dir)) ||
        container_rec_copy(&c->rec, &j->rec) < 0) {
        log_error("container `%s`: out of memory saving its record", c->rec.id);
        if (j)
            free(j->records_dir);
        free(j);
        return;
    }
    j->cri = cri;
    c->saving = true;
    j->req.data = j;
    uv_queue_work(cri->loop, &j->req, save_work, save_done);
}

void container_when_saved(struct container *c, ctr_saved_fn fn, void *data)
{
    assert(!c->on_saved);
    if (!c->saving) {
        fn(c, data);
        return;
    }
    c->on_saved = fn;
    c->on_saved_data = data;
}

static void exit_job_free(struct exit_job *j)
{
    free(j->oci_root);
    free(j->records_dir);
    store_ctr_clear(&j->rec);
    free(j);
}

/* Deep copy of a record for a worker. */
int container_rec_copy(const struct store_container *src, struct store_container *dst)
{
    *dst = *src;
    dst->reason = dst->message = dst->image = dst->image_id = dst->image_ref = NULL;
    dst->log_path = dst->cgroup_path = NULL;
    dst->config = dst->resources = NULL;
    dst->groups = NULL;
#define DUP(f)                                                                                     \
    do {                                                                                           \
        if (src->f && !(dst->f = strdup(src->f)))                                                  \
            goto oom;                                                                              \
    } while (0)
    DUP(reason);
    DUP(message);
    DUP(image);
    DUP(image_id);
    DUP(image_ref);
    DUP(log_path);
    DUP(cgroup_path);
#undef DUP
    if (src->config_len && !(dst->config = malloc(src->config_len)))
        goto oom;
    if (src->config_len)
        memcpy(dst->config, src->config, src->config_len);
    if (src->resources && !(dst->resources = malloc(src->resources_len ? src->resources_len : 1)))
        goto oom;
    if (src->resources_len)
        memcpy(dst->resources, src->resources, src->resources_len);
    if (src->n_groups && !(dst->groups = malloc(src->n_groups * sizeof(*dst->groups))))
        goto oom;
    if (src->n_groups)
        memcpy(dst->groups, src->groups, src->n_groups * sizeof(*dst->groups));
    return 0;
oom:
    store_ctr_clear(dst);
    return -ENOMEM;
}

static void exit_done(uv_work_t *req, int status);

static void exit_read(struct cri *cri, struct container *c)
{
    if (c->exit_reading)
        return;
    struct containers *cs = cri->containers;
    struct exit_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->oci_root = strdup(cs->oci_root)) ||
        !(j->records_dir = strdup(cs->records_dir)) || container_rec_copy(&c->rec, &j->rec) < 0) {
        log_error("container `%s`: out of memory reading its exit", c->rec.id);
        if (j)
            exit_job_free(j);
        return;
    }
    c->exit_reading = true;
    j->cri = cri;
    j->req.data = j;
    uv_queue_work(cri->loop, &j->req, exit_work, exit_done);
}

static void exit_done(uv_work_t *req, int status)
{
    struct exit_job *j = req->data;
    struct cri *cri = j->cri;
    struct container *c = container_find_exact(cri, j->rec.id);
    if (!c) {
        exit_job_free(j);
        return;
    }
    c->exit_reading = false;
    if (status < 0 || j->r < 0) {
        log_error("container `%s`: read its exit: %s", c->rec.id,
                  status < 0 ? "cancelled" : err_str(&j->err));
        exit_job_free(j);
        return;
    }
    if (c->starting) {
        /* read again once the start has published STARTED */
        c->exit_deferred = true;
        exit_job_free(j);
        return;
    }
    unwatch(c);
    if (!j->exited) {
        /* The monitor went away but the executor says the container still
         * runs (a monitor killed from outside): nothing records its exit
         * any more, so the container is reported as it is until removal. */
        log_warn("container `%s`: its monitor is gone while it runs", c->rec.id);
        exit_job_free(j);
        container_stops_done(c, 0, NULL);
        return;
    }
    bool was_exited = c->rec.state == STORE_CTR_EXITED;
    apply_exit(cri, c, &j->rec);
    exit_job_free(j);
    if (!was_exited) {
        log_info("container `%s` exited with %d (%s)", c->rec.id, c->rec.exit_code,
                 c->rec.reason ? c->rec.reason : "");
        container_event(cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT);
    }
    container_stops_done(c, 0, NULL);
}

void container_start_begin(struct container *c) { c->starting = true; }

void container_start_end(struct cri *cri, struct container *c)
{
    c->starting = false;
    if (c->exit_deferred) {
        c->exit_deferred = false;
        exit_read(cri, c);
    }
}

static void on_monitor_exit(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    struct container *c = h->data;
    uv_poll_stop(h);
    exit_read(c->cri, c);
}

void container_watch(struct cri *cri, struct container *c, int monitor_fd, pid_t pid)
{
    unwatch(c);
    c->monitor_fd = monitor_fd;
    c->pid = pid;
    uv_poll_t *h = malloc(sizeof(*h));
    if (!h || uv_poll_init(cri->loop, h, monitor_fd) < 0) {
        free(h);
        log_error("container `%s`: cannot watch its monitor; reading its state now", c->rec.id);
        exit_read(cri, c);
        return;
    }
    h->data = c;
    c->watch = h;
    uv_poll_start(h, UV_READABLE, on_monitor_exit);
}

/* ---- statuses and events ---- */

int container_statuses_of_pod(struct cri *cri, const char *pod_id, struct ctr_statuses *ret)
{
    *ret = (struct ctr_statuses){0};
    size_t n = 0;
    for (struct container *c = cri->containers->head; c; c = c->next)
        n += strcmp(c->rec.pod_id, pod_id) == 0;
    if (!n)
        return 0;
    ret->s = calloc(n, sizeof(*ret->s));
    ret->ptrs = calloc(n, sizeof(*ret->ptrs));
    if (!ret->s || !ret->ptrs) {
        container_statuses_clear(ret);
        return -ENOMEM;
    }
    for (struct container *c = cri->containers->head; c; c = c->next) {
        if (strcmp(c->rec.pod_id, pod_id) != 0)
            continue;
        container_status_fill(cri, c, &ret->s[ret->n]);
        ret->ptrs[ret->n] = &ret->s[ret->n].st;
        ret->n++;
    }
    return 0;
}

void container_statuses_clear(struct ctr_statuses *cs)
{
    free(cs->s);
    free(cs->ptrs);
    *cs = (struct ctr_statuses){0};
}

void container_event(struct cri *cri, const struct container *c,
                     Runtime__V1__ContainerEventType type)
{
    Runtime__V1__ContainerEventResponse ev = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
    ev.container_id = (char *)c->rec.id;
    ev.container_event_type = type;
    ev.created_at = (int64_t)now_real_ns();
    struct sb_status_scratch pod;
    struct sandbox *sb = container_pod(cri, c);
    if (sb) {
        sandbox_status_fill(sb, &pod);
        ev.pod_sandbox_status = &pod.st;
    }
    struct ctr_statuses cst = {0};
    struct ctr_status_scratch one;
    Runtime__V1__ContainerStatus *onep[1];
    if (container_statuses_of_pod(cri, c->rec.pod_id, &cst) < 0) {
        log_warn("container `%s`: out of memory for the event's pod statuses", c->rec.id);
        cst = (struct ctr_statuses){0};
    }
    if (type == RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT || !cst.n) {
        /* A deleted container is no longer in the registry: its last
         * status goes alone. */
        container_statuses_clear(&cst);
        container_status_fill(cri, c, &one);
        onep[0] = &one.st;
        ev.containers_statuses = onep;
        ev.n_containers_statuses = 1;
    } else {
        ev.containers_statuses = cst.ptrs;
        ev.n_containers_statuses = cst.n;
    }
    cri_events_publish(cri, &ev);
    container_statuses_clear(&cst);
}

/* ---- start-up and recovery ---- */

static int load_records(struct cri *cri, struct err *err)
{
    struct containers *cs = cri->containers;
    struct store_container *recs = NULL;
    size_t n = 0, bad = 0;
    int r = store_ctr_load_all(cs->records_dir, &recs, &n, &cs->unloaded, &bad, err);
    if (r < 0)
        return r;
    cs->n_unloaded = bad;
    for (size_t i = 0; i < bad; i++)
        log_warn("container record `%s/%s.json` is unreadable: the container is ignored, and "
                 "what it holds is kept",
                 cs->records_dir, cs->unloaded[i]);
    for (size_t i = 0; i < n; i++) {
        struct container *c = calloc(1, sizeof(*c));
        if (!c) {
            store_ctrs_free(recs, n);
            return err_set(err, ENOMEM, "load containers");
        }
        c->cri = cri;
        c->monitor_fd = -1;
        c->rec = recs[i];
        recs[i] = (struct store_container){0};
        c->config = (Runtime__V1__ContainerConfig *)protobuf_c_message_unpack(
            &runtime__v1__container_config__descriptor, NULL, c->rec.config_len, c->rec.config);
        if (c->config && c->rec.resources)
            c->resources = (Runtime__V1__LinuxContainerResources *)protobuf_c_message_unpack(
                &runtime__v1__linux_container_resources__descriptor, NULL, c->rec.resources_len,
                c->rec.resources);
        /* Only an exit sets a message: one on a container that has not
         * exited is a warning an older kinglet kept there. */
        if (c->rec.state != STORE_CTR_EXITED) {
            free(c->rec.message);
            c->rec.message = NULL;
        }
        if (!c->config || !c->config->metadata || (c->rec.resources && !c->resources)) {
            log_warn("container `%s`: unreadable configuration in its record: the container "
                     "is ignored, and what it holds is kept",
                     c->rec.id);
            char **v = reallocarray(cs->unloaded, cs->n_unloaded + 1, sizeof(char *));
            if (v)
                cs->unloaded = v;
            if (!v || !(v[cs->n_unloaded] = strdup(c->rec.id))) {
                container_free(c);
                store_ctrs_free(recs, n);
                return err_set(err, ENOMEM, "load containers");
            }
            cs->n_unloaded++;
            container_free(c);
            continue;
        }
        container_link(cri, c);
    }
    free(recs);
    if (cs->n)
        log_info("recovered %zu container(s)", cs->n);
    return 0;
}

int cri_containers_init(struct cri *cri, struct err *err)
{
    struct containers *cs = calloc(1, sizeof(*cs));
    if (!cs)
        return err_set(err, ENOMEM, "containers");
    cri->containers = cs;
    if (asprintf(&cs->records_dir, "%s/containers", cri->root_dir) < 0 ||
        asprintf(&cs->bundles_dir, "%s/containers", cri->state_dir) < 0 ||
        asprintf(&cs->oci_root, "%s/oci", cri->state_dir) < 0) {
        cs->records_dir = cs->bundles_dir = cs->oci_root = NULL;
        return err_set(err, ENOMEM, "containers");
    }
    return load_records(cri, err);
}

void cri_containers_free(struct cri *cri)
{
    struct containers *cs = cri->containers;
    if (!cs)
        return;
    while (cs->head)
        container_unlink_free(cri, cs->head);
    strv_free(cs->unloaded, cs->n_unloaded);
    free(cs->records_dir);
    free(cs->bundles_dir);
    free(cs->oci_root);
    free(cs);
    cri->containers = NULL;
}

struct recover_item {
    char id[STORE_ID_LEN + 1];
    bool check;                 /* created or running: ask the executor */
    struct store_container rec; /* in: a copy; out: updated when exited */
    int monitor_fd;             /* out: still alive */
    pid_t pid;
    bool running; /* the executor says it runs (a start not recorded yet) */
    bool exited;
    int r;
    struct err err;
};

struct recover_job {
    uv_work_t req;
    struct cri *cri; /* for the after-work callback only */
    char *oci_root, *records_dir, *bundles_dir;
    struct recover_item *items;
    size_t n;
};

static bool recover_known(const struct recover_job *j, const char *id)
{
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->items[i].id, id) == 0)
            return true;
    return false;
}

/* Removes what a creation cut short left: the executor's state (killing
 * whatever it started), the rootfs mount, the bundle and the writable
 * layer. Idempotent; used by recovery and by a failed create. */
int container_remains_remove(const char *oci_root, const char *bundles_dir, const char *records_dir,
                             const char *id, struct err *err)
{
    struct err e = {0};
    int r = oci_container_delete(oci_root, id, true, &e);
    if (r < 0 && r != -ENOENT) {
        *err = e;
        return err_wrap(err, "remove the executor state");
    }
    char path[4300];
    snprintf(path, sizeof(path), "%s/%s/rootfs", bundles_dir, id);
    if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return err_set(err, errno, "unmount `%s`", path);
    snprintf(path, sizeof(path), "%s/%s", bundles_dir, id);
    if ((r = ctr_imagevols_unmount(path, err)) < 0)
        return r;
    _cleanup_close_ int bfd = open(bundles_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (bfd >= 0 && (r = rm_rf_at(bfd, id)) < 0)
        return err_set(err, -r, "remove `%s/%s`", bundles_dir, id);
    _cleanup_close_ int lfd = open(records_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lfd >= 0 && (r = rm_rf_at(lfd, id)) < 0)
        return err_set(err, -r, "remove `%s/%s`", records_dir, id);
    return 0;
}

/* A record on disk that was not loaded (unreadable, or its configuration
 * is) still names a container: its bundle, layer and executor state stay
 * for an operator to look at, or for a daemon that reads it to use. */
static bool has_record(const struct recover_job *j, const char *id)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s.json", j->records_dir, id);
    return access(path, F_OK) == 0 || errno != ENOENT;
}

/* Strangers are what no record names at all: creations cut short. */
static void remove_strangers(struct recover_job *j, const char *dir)
{
    DIR *d = opendir(dir);
    while (d) {
        struct dirent *de = readdir(d);
        if (!de)
            break;
        if (!store_id_valid(de->d_name) || has_record(j, de->d_name) ||
            recover_known(j, de->d_name))
            continue;
        struct err e = {0};
        if (container_remains_remove(j->oci_root, j->bundles_dir, j->records_dir, de->d_name, &e) <
            0)
            log_warn("remove the remains of container `%s`: %s", de->d_name, err_str(&e));
        else
            log_info("removed the remains of container `%s` (never finished)", de->d_name);
    }
    if (d)
        closedir(d);
}

static void recover_work(uv_work_t *req)
{
    struct recover_job *j = req->data;
    for (size_t i = 0; i < j->n; i++) {
        struct recover_item *it = &j->items[i];
        it->monitor_fd = -1;
        if (!it->check)
            continue;
        struct err e = {0};
        int fd = oci_container_monitor(j->oci_root, it->id, &it->pid, &e);
        if (fd >= 0) {
            it->monitor_fd = fd;
            struct oci_state st;
            if (oci_container_state(j->oci_root, it->id, &st, &e) == 0) {
                it->running = st.status == OCI_STATUS_RUNNING || st.status == OCI_STATUS_PAUSED;
                oci_state_clear(&st);
            }
            continue;
        }
        it->r = read_exit(j->oci_root, &it->rec, &it->exited, &it->err);
    }
    /* Directories of containers without a record: creations cut short. */
    remove_strangers(j, j->bundles_dir);
    remove_strangers(j, j->records_dir);
    remove_strangers(j, j->oci_root);
}

static void recover_job_free(struct recover_job *j)
{
    for (size_t i = 0; i < j->n; i++) {
        if (j->items[i].monitor_fd >= 0)
            close(j->items[i].monitor_fd);
        store_ctr_clear(&j->items[i].rec);
    }
    free(j->items);
    free(j->oci_root);
    free(j->records_dir);
    free(j->bundles_dir);
    free(j);
}

static void recover_done(uv_work_t *req, int status)
{
    struct recover_job *j = req->data;
    struct cri *cri = j->cri;
    for (size_t i = 0; status == 0 && i < j->n; i++) {
        struct recover_item *it = &j->items[i];
        struct container *c = container_find_exact(cri, it->id);
        if (!c || !it->check)
            continue;
        if (it->monitor_fd >= 0) {
            container_watch(cri, c, TAKE_FD(it->monitor_fd), it->pid);
            if (it->running && c->rec.state == STORE_CTR_CREATED) {
                /* Started, but the daemon died before it said so. */
                c->rec.state = STORE_CTR_RUNNING;
                c->rec.started_ns = now_real_ns();
                container_save(cri, c);
            }
        } else if (it->r < 0) {
            log_error("container `%s`: recover its state: %s", it->id, err_str(&it->err));
        } else if (it->exited) {
            apply_exit(cri, c, &it->rec);
            log_info("container `%s` exited while kinglet was down (exit code %d)", c->rec.id,
                     c->rec.exit_code);
        }
    }
    recover_job_free(j);
    cri_containers_started(cri);
}

/* The ids of every record, loaded or not, sorted: holds are looked up
 * among them once each (tens of thousands of containers, each holding). */
struct record_ids {
    const char **v;
    size_t n;
};

static int id_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int record_ids_sorted(const struct containers *cs, struct record_ids *ret)
{
    ret->n = 0;
    ret->v = calloc(cs->n + cs->n_unloaded + 1, sizeof(*ret->v));
    if (!ret->v)
        return -ENOMEM;
    for (const struct container *c = cs->head; c; c = c->next)
        ret->v[ret->n++] = c->rec.id;
    for (size_t i = 0; i < cs->n_unloaded; i++)
        ret->v[ret->n++] = cs->unloaded[i];
    qsort(ret->v, ret->n, sizeof(*ret->v), id_cmp);
    return 0;
}

/* A hold of a container (its id, or "<id>/<k>" for its image volumes)
 * is kept while the container has a record, loaded or not; other holders
 * are not ours. */
static bool hold_wanted(void *data, const char *holder)
{
    const struct record_ids *ids = data;
    char id[STORE_ID_LEN + 1];
    size_t n = strcspn(holder, "/");
    if (n != STORE_ID_LEN)
        return true;
    memcpy(id, holder, n);
    id[n] = '\0';
    const char *key = id;
    return !store_id_valid(id) || bsearch(&key, ids->v, ids->n, sizeof(*ids->v), id_cmp);
}

void cri_containers_start(struct cri *cri)
{
    /* Before any create: holds of containers without a record are what a
     * create cut short left (its holds are saved before its record). */
    struct containers *cs = cri->containers;
    struct record_ids ids;
    if (cri->images && record_ids_sorted(cs, &ids) == 0) {
        size_t pruned = image_holds_prune(cri->images, hold_wanted, &ids);
        free(ids.v);
        if (pruned)
            log_info("dropped %zu image hold(s) of containers that were never created", pruned);
    } else if (cri->images) {
        log_error("container recovery: out of memory; image holds kept as they are");
    }
    struct recover_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->oci_root = strdup(cs->oci_root)) ||
        !(j->records_dir = strdup(cs->records_dir)) ||
        !(j->bundles_dir = strdup(cs->bundles_dir)) ||
        !(j->items = calloc(cs->n + 1, sizeof(*j->items)))) {
        log_error("container recovery: out of memory");
        if (j)
            recover_job_free(j);
        cri_containers_started(cri);
        return;
    }
    for (struct container *c = cs->head; c; c = c->next) {
        struct recover_item *it = &j->items[j->n];
        memcpy(it->id, c->rec.id, sizeof(it->id));
        it->monitor_fd = -1;
        it->check = c->rec.state != STORE_CTR_EXITED;
        if (it->check && container_rec_copy(&c->rec, &it->rec) < 0) {
            log_error("container recovery: out of memory");
            recover_job_free(j);
            cri_containers_started(cri);
            return;
        }
        j->n++;
    }
    j->cri = cri;
    j->req.data = j;
    uv_queue_work(cri->loop, &j->req, recover_work, recover_done);
}
