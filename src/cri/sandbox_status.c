/* PodSandboxStatus and ListPodSandbox, answered from memory on the loop.
 *
 * The label and annotation entries of the stored PodSandboxConfig are
 * passed as the response's entries: the map entry messages of both have
 * the same fields (key = 1, value = 2), so they encode identically. */
#include <string.h>

#include "cri/containers.h"

#define state_of sandbox_state

static void verbose_info(struct cri *cri, const struct sandbox *sb, struct buf *b)
{
    char dir[4200];
    sandbox_dir(cri, sb->rec.id, dir, sizeof(dir));
    buf_printf(b, "{\"pid\":%d,\"netns\":", (int)sb->rec.init_pid);
    char path[4300];
    snprintf(path, sizeof(path), "%s/ns/net", dir);
    buf_append_json_string(b, sb->host_network ? "" : path);
    buf_printf(b, ",\"stateDir\":");
    buf_append_json_string(b, dir);
    static const char *const files[] = {"hostname", "hosts", "resolv.conf", "shm"};
    static const char *const keys[] = {"hostnamePath", "hostsPath", "resolvPath", "shmPath"};
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        buf_printf(b, ",\"%s\":", keys[i]);
        buf_append_json_string(b, path);
    }
    static const char *const nss[] = {"ipc", "uts", "pid"};
    for (size_t i = 0; i < ARRAY_SIZE(nss); i++) {
        snprintf(path, sizeof(path), "%s/ns/%s", dir, nss[i]);
        buf_printf(b, ",\"%sNamespace\":", nss[i]);
        buf_append_json_string(b, path);
    }
    buf_printf(b, ",\"cgroupPath\":");
    buf_append_json_string(b, sb->rec.cgroup_path ? sb->rec.cgroup_path : "");
    buf_printf(b, ",\"createdAt\":%llu}", (unsigned long long)sb->rec.created_ns);
}

void sandbox_status_fill(const struct sandbox *sb, struct sb_status_scratch *s)
{
    Runtime__V1__PodSandboxConfig *c = sb->config;
    Runtime__V1__PodSandboxStatus *st = &s->st;
    runtime__v1__pod_sandbox_status__init(st);
    st->id = (char *)sb->rec.id;
    st->metadata = c->metadata;
    st->state = state_of(sb);
    st->created_at = (int64_t)sb->rec.created_ns;
    st->n_labels = c->n_labels;
    st->labels = (Runtime__V1__PodSandboxStatus__LabelsEntry **)c->labels;
    st->n_annotations = c->n_annotations;
    st->annotations = (Runtime__V1__PodSandboxStatus__AnnotationsEntry **)c->annotations;
    st->runtime_handler = sb->rec.runtime_handler;

    runtime__v1__pod_sandbox_network_status__init(&s->net);
    runtime__v1__pod_ip__init(&s->extra);
    s->extras[0] = &s->extra;
    if (sb->rec.nips) {
        s->net.ip = (char *)sb->rec.ips[0];
        if (sb->rec.nips > 1) {
            s->extra.ip = (char *)sb->rec.ips[1];
            s->net.n_additional_ips = 1;
            s->net.additional_ips = s->extras;
        }
    }
    st->network = &s->net;

    runtime__v1__namespace_option__init(&s->nsopt);
    const Runtime__V1__LinuxPodSandboxConfig *lx = c->linux;
    if (lx && lx->security_context && lx->security_context->namespace_options)
        s->nsopt = *lx->security_context->namespace_options;
    s->nsopt.userns_options = NULL;
    runtime__v1__namespace__init(&s->nsmsg);
    s->nsmsg.options = &s->nsopt;
    runtime__v1__linux_pod_sandbox_status__init(&s->lst);
    s->lst.namespaces = &s->nsmsg;
    st->linux = &s->lst;
}

void cri_pod_sandbox_status(struct cri_call *call)
{
    Runtime__V1__PodSandboxStatusRequest *req = (Runtime__V1__PodSandboxStatusRequest *)call->req;
    struct sandbox *sb = sandbox_find_or_fail(call, NULL, req->pod_sandbox_id);
    if (!sb)
        return;
    struct sb_status_scratch s;
    sandbox_status_fill(sb, &s);
    Runtime__V1__PodSandboxStatusResponse resp = RUNTIME__V1__POD_SANDBOX_STATUS_RESPONSE__INIT;
    resp.status = &s.st;
    resp.timestamp = (int64_t)now_real_ns();
    struct ctr_statuses cst = {0};
    if (container_statuses_of_pod(call->cri, sb->rec.id, &cst) < 0) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    resp.n_containers_statuses = cst.n;
    resp.containers_statuses = cst.ptrs;
    struct buf info = {0};
    Runtime__V1__PodSandboxStatusResponse__InfoEntry entry =
        RUNTIME__V1__POD_SANDBOX_STATUS_RESPONSE__INFO_ENTRY__INIT;
    Runtime__V1__PodSandboxStatusResponse__InfoEntry *entries[] = {&entry};
    if (req->verbose) {
        verbose_info(call->cri, sb, &info);
        if (buf_append(&info, "", 1) < 0) {
            buf_free(&info);
            container_statuses_clear(&cst);
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
    container_statuses_clear(&cst);
}

/* ---- ListPodSandbox and StreamPodSandboxes ---- */

/* The filter, with its id prefix resolved to a full id once. */
struct sb_list {
    const Runtime__V1__PodSandboxFilter *f;
    const char *idf;
    char id[STORE_ID_LEN + 1]; /* "": no match */
};

struct sb_items {
    Runtime__V1__PodSandbox *items;
    Runtime__V1__PodSandbox **ptrs;
};

static void sb_list_init(struct cri *cri, const Runtime__V1__PodSandboxFilter *f, struct sb_list *l)
{
    *l = (struct sb_list){.f = f};
    /* The id filter takes a full id or a unique prefix of one. */
    l->idf = f && f->id && *f->id ? f->id : NULL;
    bool ambiguous;
    struct sandbox *only = l->idf ? sandbox_find(cri, l->idf, &ambiguous) : NULL;
    if (only)
        memcpy(l->id, only->rec.id, sizeof(l->id));
}

static bool sb_list_match(const struct sb_list *l, const struct sandbox *sb)
{
    const Runtime__V1__PodSandboxFilter *f = l->f;
    if (sb->creating)
        return false;
    if (l->idf && strcmp(l->id, sb->rec.id) != 0)
        return false;
    if (f && f->state && f->state->state != state_of(sb))
        return false;
    return !f || CRI_LABELS_MATCH(sb->config, f);
}

/* As ctr_list_fill (container_status.c), for sandboxes. */
static size_t sb_list_fill(const struct sb_list *l, struct sandbox **at, struct sb_items *out,
                           size_t max, bool chunked)
{
    size_t n = 0, bytes = 0;
    struct sandbox *sb = *at;
    for (; sb && n < max; sb = sb->next) {
        if (!sb_list_match(l, sb))
            continue;
        Runtime__V1__PodSandbox *it = &out->items[n];
        runtime__v1__pod_sandbox__init(it);
        it->id = sb->rec.id;
        it->metadata = sb->config->metadata;
        it->state = state_of(sb);
        it->created_at = (int64_t)sb->rec.created_ns;
        it->n_labels = sb->config->n_labels;
        it->labels = (Runtime__V1__PodSandbox__LabelsEntry **)sb->config->labels;
        it->n_annotations = sb->config->n_annotations;
        it->annotations = (Runtime__V1__PodSandbox__AnnotationsEntry **)sb->config->annotations;
        it->runtime_handler = sb->rec.runtime_handler;
        out->ptrs[n++] = it;
        if (chunked && list_chunk_full(n, &bytes, &it->base)) {
            sb = sb->next;
            break;
        }
    }
    *at = sb;
    return n;
}

static int sb_items_new(struct sb_items *out, size_t n)
{
    out->items = calloc(n + 1, sizeof(*out->items));
    out->ptrs = calloc(n + 1, sizeof(*out->ptrs));
    return out->items && out->ptrs ? 0 : -ENOMEM;
}

static void sb_items_clear(struct sb_items *out)
{
    free(out->items);
    free(out->ptrs);
}

void cri_list_pod_sandbox(struct cri_call *call)
{
    Runtime__V1__ListPodSandboxRequest *req = (Runtime__V1__ListPodSandboxRequest *)call->req;
    struct sandboxes *s = call->cri->sandboxes;
    struct sb_items out;
    if (sb_items_new(&out, s->n) < 0) {
        sb_items_clear(&out);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    struct sb_list l;
    sb_list_init(call->cri, req->filter, &l);
    struct sandbox *at = s->head;
    Runtime__V1__ListPodSandboxResponse resp = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;
    resp.n_items = sb_list_fill(&l, &at, &out, s->n, false);
    resp.items = out.ptrs;
    cri_reply(call, &resp.base);
    sb_items_clear(&out);
}

struct sb_stream {
    struct list_stream ls;
    struct sb_list l;
    struct cri_cursor cur;
    struct sb_items out;
};

static int sb_stream_fill(struct list_stream *ls)
{
    struct sb_stream *s = (struct sb_stream *)ls;
    struct sandbox *at = s->cur.at;
    Runtime__V1__StreamPodSandboxesResponse resp = RUNTIME__V1__STREAM_POD_SANDBOXES_RESPONSE__INIT;
    resp.n_pod_sandboxes = sb_list_fill(&s->l, &at, &s->out, LIST_CHUNK_ITEMS, true);
    resp.pod_sandboxes = s->out.ptrs;
    s->cur.at = at;
    ls->done = !at;
    return list_stream_pack(ls, &resp.base);
}

static void sb_stream_release(struct list_stream *ls)
{
    struct sb_stream *s = (struct sb_stream *)ls;
    cri_cursor_close(&ls->call->cri->sandboxes->cursors, &s->cur);
    sb_items_clear(&s->out);
}

void cri_stream_pod_sandboxes(struct cri_call *call)
{
    Runtime__V1__StreamPodSandboxesRequest *req =
        (Runtime__V1__StreamPodSandboxesRequest *)call->req;
    struct sb_stream *s = calloc(1, sizeof(*s));
    if (!s || sb_items_new(&s->out, LIST_CHUNK_ITEMS) < 0) {
        if (s)
            sb_items_clear(&s->out);
        free(s);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    sb_list_init(call->cri, req->filter, &s->l);
    s->ls.fill = sb_stream_fill;
    s->ls.release = sb_stream_release;
    cri_cursor_open(&call->cri->sandboxes->cursors, &s->cur, call->cri->sandboxes->head);
    list_stream_start(call, &s->ls);
}
