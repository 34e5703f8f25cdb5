/* ImageStatus and ListImages: synchronous reads of the image service's
 * in-memory index. */
#include <string.h>

#include <jansson.h>

#include "cri/internal.h"

/* Fills an Image message; strings are borrowed from the index (valid until
 * the loop runs again, i.e. through the reply). */
struct image_msg {
    Runtime__V1__Image img;
    Runtime__V1__Int64Value uid;
    Runtime__V1__ImageSpec spec;
    char *username; /* owned */
};

static void image_msg_fill(struct image_msg *m, const struct image_info *info)
{
    runtime__v1__image__init(&m->img);
    runtime__v1__int64_value__init(&m->uid);
    runtime__v1__image_spec__init(&m->spec);
    m->username = NULL;
    m->img.id = info->id;
    m->img.repo_tags = info->repo_tags;
    m->img.n_repo_tags = info->n_repo_tags;
    m->img.repo_digests = info->repo_digests;
    m->img.n_repo_digests = info->n_repo_digests;
    m->img.size = info->size;
    m->img.pinned = info->pinned;
    m->spec.image = info->id;
    m->img.spec = &m->spec;
    /* "uid[:gid]" numeric -> uid; "name[:group]" -> username; "" -> neither
     * (kubelet reads that as root), as containerd does */
    const char *u = info->user ? info->user : "";
    size_t ulen = strcspn(u, ":");
    if (ulen == 0)
        return;
    char *end = NULL;
    char buf[64];
    if (ulen < sizeof(buf)) {
        memcpy(buf, u, ulen);
        buf[ulen] = '\0';
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (errno == 0 && end && *end == '\0' && v >= 0) {
            m->uid.value = v;
            m->img.uid = &m->uid;
            return;
        }
    }
    m->username = strndup(u, ulen);
    m->img.username = m->username;
}

static char *verbose_info(struct cri *cri, const struct image_info *img)
{
    json_t *o = image_info_verbose_json(cri->images, img);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

void cri_image_status(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    Runtime__V1__ImageStatusRequest *req = (Runtime__V1__ImageStatusRequest *)call->req;
    const char *ref = req->image ? req->image->image : NULL;
    if (!ref || !*ref) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "ImageStatus: the image is empty");
        return;
    }
    Runtime__V1__ImageStatusResponse resp = RUNTIME__V1__IMAGE_STATUS_RESPONSE__INIT;
    const struct image_info *info = image_lookup(call->cri->images, ref);
    if (!info) {
        /* absent: OK with no image, as kubelet expects */
        cri_reply(call, &resp.base);
        return;
    }
    struct image_msg m;
    image_msg_fill(&m, info);
    resp.image = &m.img;
    Runtime__V1__ImageStatusResponse__InfoEntry entry =
        RUNTIME__V1__IMAGE_STATUS_RESPONSE__INFO_ENTRY__INIT;
    Runtime__V1__ImageStatusResponse__InfoEntry *entries[1] = {&entry};
    char *json = NULL;
    if (req->verbose && (json = verbose_info(call->cri, info))) {
        entry.key = "info";
        entry.value = json;
        resp.info = entries;
        resp.n_info = 1;
    }
    cri_reply(call, &resp.base);
    free(json);
    free(m.username);
}

/* ---- ListImages and StreamImages ---- */

static void image_msgs_clear(struct image_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(msgs[i].username);
        msgs[i].username = NULL;
    }
}

void cri_list_images(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    Runtime__V1__ListImagesRequest *req = (Runtime__V1__ListImagesRequest *)call->req;
    const char *filter = req->filter && req->filter->image ? req->filter->image->image : NULL;
    const struct image_info **v = NULL;
    int n = image_list(call->cri->images, filter, &v);
    if (n < 0) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "ListImages: out of memory");
        return;
    }
    struct image_msg *msgs = calloc((size_t)n + 1, sizeof(*msgs));
    Runtime__V1__Image **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
    if (!msgs || !ptrs) {
        free(msgs);
        free(ptrs);
        free(v);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "ListImages: out of memory");
        return;
    }
    Runtime__V1__ListImagesResponse resp = RUNTIME__V1__LIST_IMAGES_RESPONSE__INIT;
    resp.images = ptrs;
    for (int i = 0; i < n; i++) {
        image_msg_fill(&msgs[i], v[i]);
        ptrs[i] = &msgs[i].img;
    }
    resp.n_images = (size_t)n;
    cri_reply(call, &resp.base);
    image_msgs_clear(msgs, resp.n_images);
    free(msgs);
    free(ptrs);
    free(v);
}

/* The image index is small (each image is layers on disk) and its entries
 * move when one is removed: a stream takes the ids of the matching images
 * at its start and looks each up again when its chunk is made, skipping
 * those removed meanwhile. */
struct image_stream {
    struct list_stream ls;
    char **ids;
    size_t n, next;
    struct image_msg msgs[LIST_CHUNK_ITEMS];
    Runtime__V1__Image *ptrs[LIST_CHUNK_ITEMS];
};

static int image_stream_fill(struct list_stream *ls)
{
    struct image_stream *s = (struct image_stream *)ls;
    struct image_service *svc = ls->call->cri->images;
    if (!svc)
        return -EAGAIN; /* shutting down: UNAVAILABLE */
    size_t k = 0, bytes = 0;
    while (s->next < s->n) {
        const struct image_info *img = image_lookup(svc, s->ids[s->next++]);
        if (!img)
            continue; /* removed meanwhile */
        image_msg_fill(&s->msgs[k], img);
        s->ptrs[k] = &s->msgs[k].img;
        k++;
        if (list_chunk_full(k, &bytes, &s->msgs[k - 1].img.base))
            break;
    }
    Runtime__V1__StreamImagesResponse resp = RUNTIME__V1__STREAM_IMAGES_RESPONSE__INIT;
    resp.images = s->ptrs;
    resp.n_images = k;
    ls->done = s->next >= s->n;
    int r = list_stream_pack(ls, &resp.base);
    image_msgs_clear(s->msgs, resp.n_images);
    return r;
}

static void image_stream_release(struct list_stream *ls)
{
    struct image_stream *s = (struct image_stream *)ls;
    for (size_t i = 0; i < s->n; i++)
        free(s->ids[i]);
    free(s->ids);
}

void cri_stream_images(struct cri_call *call)
{
    if (!call->cri->images) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "the image service is shutting down");
        return;
    }
    Runtime__V1__StreamImagesRequest *req = (Runtime__V1__StreamImagesRequest *)call->req;
    const char *filter = req->filter && req->filter->image ? req->filter->image->image : NULL;
    _cleanup_free_ const struct image_info **v = NULL;
    int n = image_list(call->cri->images, filter, &v);
    struct image_stream *s = n < 0 ? NULL : calloc(1, sizeof(*s));
    if (s && !(s->ids = calloc((size_t)n + 1, sizeof(*s->ids)))) {
        free(s);
        s = NULL;
    }
    for (int i = 0; s && i < n; i++) {
        if (!(s->ids[s->n++] = strdup(v[i]->id))) {
            image_stream_release(&s->ls);
            free(s);
            s = NULL;
        }
    }
    if (!s) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "StreamImages: out of memory");
        return;
    }
    s->ls.fill = image_stream_fill;
    s->ls.release = image_stream_release;
    list_stream_start(call, &s->ls);
}
