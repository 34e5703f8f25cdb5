/* GetContainerEvents: a server-streaming RPC kubelet keeps open (evented
 * PLEG). Subscribers get every event published by the container lifecycle
 * code; a subscriber that stops reading is dropped rather than letting its
 * queue grow without bound. */
#include <string.h>

#include "cri/internal.h"

#define MAX_SUBSCRIBERS   64
#define MAX_PENDING_BYTES (4u << 20)

struct cri_events {
    struct cri_call **subs;
    size_t n, cap;
    bool shutting_down;
};

int cri_events_new(struct cri_events **ret)
{
    *ret = calloc(1, sizeof(**ret));
    return *ret ? 0 : -ENOMEM;
}

static void remove_sub(struct cri_events *ev, struct cri_call *call)
{
    for (size_t i = 0; i < ev->n; i++)
        if (ev->subs[i] == call) {
            ev->subs[i] = ev->subs[--ev->n];
            return;
        }
}

static void on_cancel(struct grpc_call *gc, void *data)
{
    struct cri_call *call = data;
    struct cri_events *ev = call->cri->events;
    remove_sub(ev, call);
    if (ev->shutting_down)
        cri_finish(call, GRPC_STATUS_UNAVAILABLE, "kinglet is shutting down");
    else
        cri_finish(call, GRPC_STATUS_CANCELLED, "event stream cancelled");
}

void cri_get_container_events(struct cri_call *call)
{
    struct cri_events *ev = call->cri->events;
    if (ev->shutting_down) {
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "kinglet is shutting down");
        return;
    }
    if (ev->n >= MAX_SUBSCRIBERS) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many event subscribers (limit %d)",
                 MAX_SUBSCRIBERS);
        return;
    }
    if (ev->n == ev->cap) {
        size_t cap = ev->cap ? ev->cap * 2 : 4;
        struct cri_call **subs = realloc(ev->subs, cap * sizeof(*subs));
        if (!subs) {
            cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        ev->subs = subs;
        ev->cap = cap;
    }
    ev->subs[ev->n++] = call;
    grpc_call_on_cancel(call->gc, on_cancel, call);
    log_debug("event subscriber added (%zu now)", ev->n);
}

void cri_events_publish(struct cri *cri, const Runtime__V1__ContainerEventResponse *msg)
{
    struct cri_events *ev = cri->events;
    if (!ev->n)
        return;
    size_t len = protobuf_c_message_get_packed_size(&msg->base);
    _cleanup_free_ uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return;
    protobuf_c_message_pack(&msg->base, data);
    for (size_t i = 0; i < ev->n;) {
        struct cri_call *call = ev->subs[i];
        if (grpc_call_pending(call->gc) > MAX_PENDING_BYTES) {
            ev->subs[i] = ev->subs[--ev->n];
            cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                     "event subscriber is not reading; dropped");
            continue;
        }
        grpc_call_send(call->gc, data, len);
        i++;
    }
}

void cri_events_shutdown(struct cri_events *ev)
{
    ev->shutting_down = true;
    while (ev->n) {
        struct cri_call *call = ev->subs[--ev->n];
        cri_finish(call, GRPC_STATUS_UNAVAILABLE, "kinglet is shutting down");
    }
}

void cri_events_free(struct cri_events *ev)
{
    if (!ev)
        return;
    free(ev->subs);
    free(ev);
}
