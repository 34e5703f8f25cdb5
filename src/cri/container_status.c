/* ContainerStatus and ListContainers, answered from memory on the loop (the
 * verbose runtime spec is the one exception: it is read from the bundle in
 * a worker). kubelet lists containers every second: the list walks the
 * in-memory registry once and encodes pointers into it, copying nothing.
 *
 * The label and annotation entries of the stored ContainerConfig are passed
 * as the response's entries: their map entry messages have the same fields
 * (key = 1, value = 2), so they encode identically. */
#include <signal.h>
#include <string.h>

#include "cri/containers.h"

/* The CRI Signal enum in the order of its values (RUNTIME_DEFAULT = 0). */
static const int signal_of_enum[] = {
    0,       SIGABRT, SIGALRM,   SIGBUS,  SIGCHLD,   SIGCHLD,  SIGCONT, SIGFPE,  SIGHUP,
    SIGILL,  SIGINT,  SIGIO,     SIGIOT,  SIGKILL,   SIGPIPE,  SIGPOLL, SIGPROF, SIGPWR,
    SIGQUIT, SIGSEGV, SIGSTKFLT, SIGSTOP, SIGSYS,    SIGTERM,  SIGTRAP, SIGTSTP, SIGTTIN,
    SIGTTOU, SIGURG,  SIGUSR1,   SIGUSR2, SIGVTALRM, SIGWINCH, SIGXCPU, SIGXFSZ,
};

int cri_signal_from_enum(int e)
{
    if (e <= 0)
        return 0;
    if ((size_t)e < ARRAY_SIZE(signal_of_enum))
        return signal_of_enum[e];
    /* SIGRTMIN = 35 ... SIGRTMAX = 65 */
    if (e >= 35 && e <= 65)
        return SIGRTMIN + (e - 35);
    return -EINVAL;
}

int cri_signal_to_enum(int sig)
{
    if (sig >= SIGRTMIN && sig <= SIGRTMAX)
        return 35 + (sig - SIGRTMIN);
    for (size_t e = 1; e < ARRAY_SIZE(signal_of_enum); e++)
        if (signal_of_enum[e] == sig)
            return (int)e;
    return 0;
}

void container_status_fill(struct cri *cri, const struct container *c, struct ctr_status_scratch *s)
{
    (void)cri;
    const Runtime__V1__ContainerConfig *cfg = c->config;
    Runtime__V1__ContainerStatus *st = &s->st;
    runtime__v1__container_status__init(st);
    st->id = (char *)c->rec.id;
    st->metadata = cfg->metadata;
    st->state = container_state(c);
    st->created_at = (int64_t)c->rec.created_ns;
    st->started_at = (int64_t)c->rec.started_ns;
    st->finished_at = c->rec.state == STORE_CTR_EXITED ? (int64_t)c->rec.finished_ns : 0;
    st->exit_code = c->rec.state == STORE_CTR_EXITED ? c->rec.exit_code : 0;
    runtime__v1__image_spec__init(&s->image);
    s->image.image = c->rec.image;
    if (cfg->image) {
        /* the record of an older kinglet holds the image as kubelet sent
         * it (an id): the pod's reference wins, as for a new record */
        if (cfg->image->user_specified_image && *cfg->image->user_specified_image)
            s->image.image = cfg->image->user_specified_image;
        s->image.annotations = cfg->image->annotations;
        s->image.n_annotations = cfg->image->n_annotations;
        s->image.user_specified_image = cfg->image->user_specified_image;
        s->image.runtime_handler = cfg->image->runtime_handler;
    }
    st->image = &s->image;
    st->image_ref = c->rec.image_ref;
    st->image_id = c->rec.image_id;
    st->reason = c->rec.state == STORE_CTR_EXITED && c->rec.reason ? c->rec.reason : "";
    st->message = c->rec.message ? c->rec.message : "";
    st->n_labels = cfg->n_labels;
    st->labels = (Runtime__V1__ContainerStatus__LabelsEntry **)cfg->labels;
    st->n_annotations = cfg->n_annotations;
    st->annotations = (Runtime__V1__ContainerStatus__AnnotationsEntry **)cfg->annotations;
    st->n_mounts = cfg->n_mounts;
    st->mounts = cfg->mounts;
    st->log_path = c->rec.log_path ? c->rec.log_path : "";
    runtime__v1__container_resources__init(&s->res);
    s->res.linux = c->resources ? c->resources : (cfg->linux ? cfg->linux->resources : NULL);
    if (s->res.linux)
        st->resources = &s->res;
    runtime__v1__container_user__init(&s->user);
    runtime__v1__linux_container_user__init(&s->luser);
    s->luser.uid = c->rec.uid;
    s->luser.gid = c->rec.gid;
    s->n_groups = c->rec.n_groups < STORE_CTR_GROUPS_MAX ? c->rec.n_groups : STORE_CTR_GROUPS_MAX;
    for (size_t i = 0; i < s->n_groups; i++)
        s->groups[i] = c->rec.groups[i];
    s->luser.supplemental_groups = s->groups;
    s->luser.n_supplemental_groups = s->n_groups;
    s->user.linux = &s->luser;
    st->user = &s->user;
    st->stop_signal = (Runtime__V1__Signal)cri_signal_to_enum(c->rec.stop_signal);
}

/* ---- ContainerStatus ---- */

struct verbose_job {
    uv_work_t req;
    struct cri_call *call; /* loop side only */
    char path[4300];       /* in: the bundle's config.json */
    char *spec;            /* out: its text, or NULL */
};

static void reply_status(struct cri_call *call, const char *spec_json)
{
    Runtime__V1__ContainerStatusRequest *req = (Runtime__V1__ContainerStatusRequest *)call->req;
    bool ambiguous;
    struct container *c = container_find(call->cri, req->container_id, &ambiguous);
    if (!c) {
        cri_fail(call, ambiguous ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_NOT_FOUND,
                 "container `%.64s` %s", req->container_id,
                 ambiguous ? "is an ambiguous prefix" : "not found");
        return;
    }
    struct ctr_status_scratch s;
    container_status_fill(call->cri, c, &s);
    Runtime__V1__ContainerStatusResponse resp = RUNTIME__V1__CONTAINER_STATUS_RESPONSE__INIT;
    resp.status = &s.st;
    struct buf info = {0};
    Runtime__V1__ContainerStatusResponse__InfoEntry entry =
        RUNTIME__V1__CONTAINER_STATUS_RESPONSE__INFO_ENTRY__INIT;
    Runtime__V1__ContainerStatusResponse__InfoEntry *entries[] = {&entry};
    if (req->verbose) {
        buf_printf(&info, "{\"sandboxID\":\"%s\",\"pid\":%d,\"state\":", c->rec.pod_id,
                   (int)c->pid);
        buf_append_json_string(&info, store_ctr_state_name(c->rec.state));
        buf_printf(&info, ",\"cgroupPath\":");
        buf_append_json_string(&info, c->rec.cgroup_path ? c->rec.cgroup_path : "");
        buf_printf(&info, ",\"runtimeSpec\":%s}", spec_json ? spec_json : "null");
        if (buf_append(&info, "", 1) < 0) {
            buf_free(&info);
            cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        entry.key = "info";
        entry.value = (char *)info.data;
        resp.n_info = 1;
        resp.info = entries;
    }
    cri_reply(call, &resp.base);
    buf_free(&info);
}

static void verbose_work(uv_work_t *req)
{
    struct verbose_job *j = req->data;
    size_t len;
    if (read_file_at(AT_FDCWD, j->path, 4u << 20, &j->spec, &len) < 0)
        j->spec = NULL;
}

static void verbose_done(uv_work_t *req, int status)
{
    (void)status;
    struct verbose_job *j = req->data;
    reply_status(j->call, j->spec);
    free(j->spec);
    free(j);
}

void cri_container_status(struct cri_call *call)
{
    Runtime__V1__ContainerStatusRequest *req = (Runtime__V1__ContainerStatusRequest *)call->req;
    bool ambiguous;
    struct container *c = container_find(call->cri, req->container_id, &ambiguous);
    if (!c || !req->verbose) {
        reply_status(call, NULL);
        return;
    }
    struct verbose_job *j = calloc(1, sizeof(*j));
    if (!j) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    char bundle[4200];
    container_dirs(call->cri, c->rec.id, bundle, sizeof(bundle), NULL, 0);
    snprintf(j->path, sizeof(j->path), "%s/config.json", bundle);
    j->call = call;
    j->req.data = j;
    uv_queue_work(call->cri->loop, &j->req, verbose_work, verbose_done);
}

/* ---- ListContainers ---- */

static bool labels_match(const Runtime__V1__ContainerConfig *c,
                         const Runtime__V1__ContainerFilter *f)
{
    for (size_t i = 0; i < f->n_label_selector; i++) {
        bool ok = false;
        for (size_t k = 0; k < c->n_labels && !ok; k++)
            ok = !strcmp(c->labels[k]->key, f->label_selector[i]->key) &&
                 !strcmp(c->labels[k]->value, f->label_selector[i]->value);
        if (!ok)
            return false;
    }
    return true;
}

void cri_list_containers(struct cri_call *call)
{
    Runtime__V1__ListContainersRequest *req = (Runtime__V1__ListContainersRequest *)call->req;
    const Runtime__V1__ContainerFilter *f = req->filter;
    struct containers *cs = call->cri->containers;
    Runtime__V1__Container *items = calloc(cs->n + 1, sizeof(*items));
    Runtime__V1__ImageSpec *images = calloc(cs->n + 1, sizeof(*images));
    Runtime__V1__Container **ptrs = calloc(cs->n + 1, sizeof(*ptrs));
    if (!items || !images || !ptrs) {
        free(items);
        free(images);
        free(ptrs);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* The id filter takes a full id or a unique prefix of one; so does the
     * pod filter. */
    const char *idf = f && f->id && *f->id ? f->id : NULL;
    const char *podf = f && f->pod_sandbox_id && *f->pod_sandbox_id ? f->pod_sandbox_id : NULL;
    bool ambiguous = false;
    struct container *only = idf ? container_find(call->cri, idf, &ambiguous) : NULL;
    struct sandbox *pod = podf ? sandbox_find(call->cri, podf, &ambiguous) : NULL;
    size_t n = 0;
    for (struct container *c = cs->head; c; c = c->next) {
        if (idf && c != only)
            continue;
        if (podf && (!pod || strcmp(pod->rec.id, c->rec.pod_id) != 0))
            continue;
        if (f && f->state && f->state->state != container_state(c))
            continue;
        if (f && !labels_match(c->config, f))
            continue;
        Runtime__V1__Container *it = &items[n];
        runtime__v1__container__init(it);
        /* the image as kubelet sent it, as containerd lists it; the
         * status shows the one the pod names (container_status_fill) */
        runtime__v1__image_spec__init(&images[n]);
        images[n].image = c->rec.image;
        it->id = c->rec.id;
        it->pod_sandbox_id = c->rec.pod_id;
        it->metadata = c->config->metadata;
        it->image = c->config->image ? c->config->image : &images[n];
        it->image_ref = c->rec.image_ref;
        it->image_id = c->rec.image_id;
        it->state = container_state(c);
        it->created_at = (int64_t)c->rec.created_ns;
        it->n_labels = c->config->n_labels;
        it->labels = (Runtime__V1__Container__LabelsEntry **)c->config->labels;
        it->n_annotations = c->config->n_annotations;
        it->annotations = (Runtime__V1__Container__AnnotationsEntry **)c->config->annotations;
        ptrs[n++] = it;
    }
    Runtime__V1__ListContainersResponse resp = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
    resp.n_containers = n;
    resp.containers = ptrs;
    cri_reply(call, &resp.base);
    free(items);
    free(images);
    free(ptrs);
}
