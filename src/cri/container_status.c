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
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
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

/* ---- ListContainers and StreamContainers ---- */

/* The filter, with its id and pod prefixes resolved to full ids once (a
 * stream keeps no pointer into the registry across loop turns). */
struct ctr_list {
    const Runtime__V1__ContainerFilter *f;
    const char *idf, *podf;
    char id[STORE_ID_LEN + 1], pod[STORE_ID_LEN + 1]; /* "": no match */
};

/* A chunk's items: the containers and their image specs. */
struct ctr_items {
    Runtime__V1__Container *items;
    Runtime__V1__ImageSpec *images;
    Runtime__V1__Container **ptrs;
};

static void ctr_list_init(struct cri *cri, const Runtime__V1__ContainerFilter *f,
                          struct ctr_list *l)
{
    *l = (struct ctr_list){.f = f};
    /* The id filter takes a full id or a unique prefix of one; so does the
     * pod filter. */
    l->idf = f && f->id && *f->id ? f->id : NULL;
    l->podf = f && f->pod_sandbox_id && *f->pod_sandbox_id ? f->pod_sandbox_id : NULL;
    bool ambiguous;
    struct container *only = l->idf ? container_find(cri, l->idf, &ambiguous) : NULL;
    struct sandbox *pod = l->podf ? sandbox_find(cri, l->podf, &ambiguous) : NULL;
    if (only)
        memcpy(l->id, only->rec.id, sizeof(l->id));
    if (pod)
        memcpy(l->pod, pod->rec.id, sizeof(l->pod));
}

static bool ctr_list_match(const struct ctr_list *l, const struct container *c)
{
    const Runtime__V1__ContainerFilter *f = l->f;
    if (l->idf && strcmp(l->id, c->rec.id) != 0)
        return false;
    if (l->podf && strcmp(l->pod, c->rec.pod_id) != 0)
        return false;
    if (f && f->state && f->state->state != container_state(c))
        return false;
    return !f || CRI_LABELS_MATCH(c->config, f);
}

/* Fills out with the matching containers from *at on, at most max of them
 * and, chunked, at most a list stream's chunk; *at ends at the first
 * container not looked at. Returns the count. */
static size_t ctr_list_fill(const struct ctr_list *l, struct container **at, struct ctr_items *out,
                            size_t max, bool chunked)
{
    size_t n = 0, bytes = 0;
    struct container *c = *at;
    for (; c && n < max; c = c->next) {
        if (!ctr_list_match(l, c))
            continue;
        Runtime__V1__Container *it = &out->items[n];
        runtime__v1__container__init(it);
        /* the image as kubelet sent it, as containerd lists it; the
         * status shows the one the pod names (container_status_fill) */
        runtime__v1__image_spec__init(&out->images[n]);
        out->images[n].image = c->rec.image;
        it->id = c->rec.id;
        it->pod_sandbox_id = c->rec.pod_id;
        it->metadata = c->config->metadata;
        it->image = c->config->image ? c->config->image : &out->images[n];
        it->image_ref = c->rec.image_ref;
        it->image_id = c->rec.image_id;
        it->state = container_state(c);
        it->created_at = (int64_t)c->rec.created_ns;
        it->n_labels = c->config->n_labels;
        it->labels = (Runtime__V1__Container__LabelsEntry **)c->config->labels;
        it->n_annotations = c->config->n_annotations;
        it->annotations = (Runtime__V1__Container__AnnotationsEntry **)c->config->annotations;
        out->ptrs[n++] = it;
        if (chunked && list_chunk_full(n, &bytes, &it->base)) {
            c = c->next;
            break;
        }
    }
    *at = c;
    return n;
}

static int ctr_items_new(struct ctr_items *out, size_t n)
{
    out->items = calloc(n + 1, sizeof(*out->items));
    out->images = calloc(n + 1, sizeof(*out->images));
    out->ptrs = calloc(n + 1, sizeof(*out->ptrs));
    return out->items && out->images && out->ptrs ? 0 : -ENOMEM;
}

static void ctr_items_clear(struct ctr_items *out)
{
    free(out->items);
    free(out->images);
    free(out->ptrs);
}

void cri_list_containers(struct cri_call *call)
{
    Runtime__V1__ListContainersRequest *req = (Runtime__V1__ListContainersRequest *)call->req;
    struct containers *cs = call->cri->containers;
    struct ctr_items out;
    if (ctr_items_new(&out, cs->n) < 0) {
        ctr_items_clear(&out);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    struct ctr_list l;
    ctr_list_init(call->cri, req->filter, &l);
    struct container *at = cs->head;
    Runtime__V1__ListContainersResponse resp = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
    resp.n_containers = ctr_list_fill(&l, &at, &out, cs->n, false);
    resp.containers = out.ptrs;
    cri_reply(call, &resp.base);
    ctr_items_clear(&out);
}

struct ctr_stream {
    struct list_stream ls;
    struct ctr_list l;
    struct cri_cursor cur;
    struct ctr_items out;
};

static int ctr_stream_fill(struct list_stream *ls)
{
    struct ctr_stream *s = (struct ctr_stream *)ls;
    struct container *at = s->cur.at;
    Runtime__V1__StreamContainersResponse resp = RUNTIME__V1__STREAM_CONTAINERS_RESPONSE__INIT;
    resp.n_containers = ctr_list_fill(&s->l, &at, &s->out, LIST_CHUNK_ITEMS, true);
    resp.containers = s->out.ptrs;
    s->cur.at = at;
    ls->done = !at;
    return list_stream_pack(ls, &resp.base);
}

static void ctr_stream_release(struct list_stream *ls)
{
    struct ctr_stream *s = (struct ctr_stream *)ls;
    cri_cursor_close(&ls->call->cri->containers->cursors, &s->cur);
    ctr_items_clear(&s->out);
}

void cri_stream_containers(struct cri_call *call)
{
    Runtime__V1__StreamContainersRequest *req = (Runtime__V1__StreamContainersRequest *)call->req;
    struct ctr_stream *s = calloc(1, sizeof(*s));
    if (!s || ctr_items_new(&s->out, LIST_CHUNK_ITEMS) < 0) {
        if (s)
            ctr_items_clear(&s->out);
        free(s);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ctr_list_init(call->cri, req->filter, &s->l);
    s->ls.fill = ctr_stream_fill;
    s->ls.release = ctr_stream_release;
    cri_cursor_open(&call->cri->containers->cursors, &s->cur, call->cri->containers->head);
    list_stream_start(call, &s->ls);
}
