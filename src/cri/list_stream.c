/* The list streaming RPCs (KEP-5825): StreamPodSandboxes, StreamContainers,
 * StreamImages, StreamContainerStats, StreamPodSandboxStats and
 * StreamPodSandboxMetrics answer what their unary List calls answer, in
 * chunks, so that a node with tens of thousands of containers never meets
 * the 16 MiB message limit the unary answer runs into.
 *
 * This file is the pump they share; each family's file fills the chunks
 * with the same matching and item code as its unary call. A chunk holds at
 * most LIST_CHUNK_ITEMS items and about LIST_CHUNK_BYTES; the next one is
 * made only once the call's queued output is under LIST_SEND_LIMIT, so a
 * client that reads slowly (or not at all) makes the daemon hold about two
 * chunks for it, never the list. Lists are walked with cursors that
 * survive removals (struct cri_cursor), not copied.
 *
 * A chunk may be made off the loop (the stats are measured in the thread
 * pool): the filler returns LIST_ASYNC and calls list_stream_resume() from
 * its after-work callback. A client that goes away ends the stream at once,
 * or when that work returns. */
#include <stddef.h>
#include <string.h>

#include "cri/internal.h"

#define LIST_SEND_LIMIT (2u * LIST_CHUNK_BYTES)

static void list_stream_free(struct list_stream *ls)
{
    if (ls->release)
        ls->release(ls);
    buf_free(&ls->chunk);
    free(ls);
}

static void end(struct list_stream *ls, int status, const char *message)
{
    struct cri_call *call = ls->call;
    list_stream_free(ls); /* release may use the call */
    cri_finish(call, status, message);
}

static void on_cancel(struct grpc_call *gc, void *data)
{
    (void)gc;
    struct list_stream *ls = data;
    if (ls->busy) {
        ls->cancelled = true; /* ended where the pump or the work returns */
        return;
    }
    end(ls, GRPC_STATUS_CANCELLED, "the client went away");
}

static void pump(struct list_stream *ls);

static void on_room(struct grpc_call *gc, void *data)
{
    (void)gc;
    pump(data);
}

/* Waits for the client to take what is queued; false: it cannot be waited
 * for (the stream has ended). */
static bool wait_room(struct list_stream *ls)
{
    int r = grpc_call_when_room(ls->call->gc, on_room, ls);
    if (r == 0)
        return true;
    if (r == -ECANCELED)
        end(ls, GRPC_STATUS_CANCELLED, "the client went away");
    else
        end(ls, GRPC_STATUS_RESOURCE_EXHAUSTED,
            "the daemon's response memory is held by other clients");
    return false;
}

static void pump(struct list_stream *ls)
{
    ls->busy = true;
    for (;;) {
        if (ls->cancelled) {
            end(ls, GRPC_STATUS_CANCELLED, "the client went away");
            return;
        }
        if (!ls->chunk.len) {
            if (ls->done) {
                end(ls, GRPC_STATUS_OK, NULL);
                return;
            }
            /* Make the next chunk only once the client took the last. */
            if (grpc_call_pending(ls->call->gc) >= LIST_SEND_LIMIT) {
                ls->busy = false;
                wait_room(ls);
                return;
            }
            int r = ls->fill(ls);
            if (r == LIST_ASYNC)
                return; /* busy until list_stream_resume */
            if (r < 0) {
                end(ls, cri_status_from_errno(r), strerror(-r));
                return;
            }
            if (!ls->chunk.len)
                continue;
        }
        int r = grpc_call_send(ls->call->gc, ls->chunk.data, ls->chunk.len);
        if (r == -ENOBUFS) {
            ls->busy = false;
            wait_room(ls);
            return;
        }
        if (r < 0) {
            end(ls, r == -ECANCELED ? GRPC_STATUS_CANCELLED : GRPC_STATUS_RESOURCE_EXHAUSTED,
                strerror(-r));
            return;
        }
        ls->chunk.len = 0;
        ls->sent++;
    }
}

void list_stream_start(struct cri_call *call, struct list_stream *ls)
{
    ls->call = call;
    grpc_call_set_send_limit(call->gc, LIST_SEND_LIMIT);
    grpc_call_on_cancel(call->gc, on_cancel, ls);
    pump(ls);
}

void list_stream_resume(struct list_stream *ls, int r)
{
    if (r < 0 && !ls->cancelled) {
        end(ls, cri_status_from_errno(r), strerror(-r));
        return;
    }
    pump(ls);
}

int list_stream_pack(struct list_stream *ls, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > GRPC_MAX_SEND_MESSAGE)
        return -EFBIG;
    ls->chunk.len = 0;
    if (buf_reserve(&ls->chunk, len ? len : 1) < 0)
        return -ENOMEM;
    /* an empty message (no item) packs to nothing and is not sent */
    ls->chunk.len = protobuf_c_message_pack(msg, ls->chunk.data);
    return 0;
}

bool list_chunk_full(size_t items, size_t *bytes, const ProtobufCMessage *item)
{
    return list_chunk_full_size(items, bytes, protobuf_c_message_get_packed_size(item));
}

bool list_chunk_full_size(size_t items, size_t *bytes, size_t size)
{
    if (items >= LIST_CHUNK_ITEMS)
        return true;
    *bytes += size + 6; /* + tag and length */
    return *bytes >= LIST_CHUNK_BYTES;
}

/* ---- cursors ---- */

void cri_cursor_open(struct cri_cursor **head, struct cri_cursor *cur, void *at)
{
    cur->at = at;
    cur->prev = NULL;
    cur->next = *head;
    if (*head)
        (*head)->prev = cur;
    *head = cur;
}

void cri_cursor_close(struct cri_cursor **head, struct cri_cursor *cur)
{
    if (cur->prev)
        cur->prev->next = cur->next;
    else if (*head == cur)
        *head = cur->next;
    if (cur->next)
        cur->next->prev = cur->prev;
    cur->prev = cur->next = NULL;
}

void cri_cursors_skip(struct cri_cursor *head, const void *gone, void *next)
{
    for (struct cri_cursor *cur = head; cur; cur = cur->next)
        if (cur->at == gone)
            cur->at = next;
}

typedef Runtime__V1__ContainerConfig__LabelsEntry map_entry;
#define SAME_LAYOUT(T)                                                                             \
    _Static_assert(offsetof(T, key) == offsetof(map_entry, key) &&                                 \
                       offsetof(T, value) == offsetof(map_entry, value),                           \
                   #T " is laid out as a map entry")
SAME_LAYOUT(Runtime__V1__PodSandboxConfig__LabelsEntry);
SAME_LAYOUT(Runtime__V1__ContainerFilter__LabelSelectorEntry);
SAME_LAYOUT(Runtime__V1__PodSandboxFilter__LabelSelectorEntry);
SAME_LAYOUT(Runtime__V1__ContainerStatsFilter__LabelSelectorEntry);
SAME_LAYOUT(Runtime__V1__PodSandboxStatsFilter__LabelSelectorEntry);

bool cri_labels_match(const void *labels, size_t n, const void *sel, size_t n_sel)
{
    map_entry *const *l = labels, *const *s = sel;
    for (size_t i = 0; i < n_sel; i++) {
        bool ok = false;
        for (size_t k = 0; k < n && !ok; k++)
            ok = !strcmp(l[k]->key, s[i]->key) && !strcmp(l[k]->value, s[i]->value);
        if (!ok)
            return false;
    }
    return true;
}
