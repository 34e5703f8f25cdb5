/* One gRPC call per HTTP/2 stream: request assembly and validation,
 * dispatch, response output through an nghttp2 data provider, trailers,
 * deadlines and cancellation.
 *
 * A call is referenced by its stream (until nghttp2 closes the stream or the
 * connection goes away) and by its handler (from dispatch until
 * grpc_call_finish); it is freed when neither holds it.
 *
 * Memory a client can make a call hold is counted where it is held: request
 * bytes (call->in) in conn->buffered and srv->buffered until dispatch or
 * refusal, response bytes (call->out) in conn->pending and srv->pending
 * until nghttp2 takes them for a DATA frame. The limits on both are in
 * grpc.h (struct grpc_server_options). */
#include <assert.h>
#include <string.h>

#include "grpc/internal.h"

#define MAX_HEADER_BYTES (64 * 1024)
/* Request bytes one connection may hold at once across its calls. */
#define MAX_CONN_BUFFERED (64u * 1024 * 1024)

#define NV(n, v, vlen)                                                                             \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vlen), NGHTTP2_NV_FLAG_NONE                \
    }
#define NVS(n, v) NV(n, v, sizeof(v) - 1)

static void call_unref(struct grpc_call *call);

struct grpc_call *call_new(struct conn *c, int32_t stream_id)
{
    struct grpc_call *call = calloc(1, sizeof(*call));
    if (!call)
        return NULL;
    call->conn = c;
    call->stream_id = stream_id;
    call->stream_open = true;
    call->refs = 1; /* the stream's */
    call->started_ms = uv_now(c->srv->loop);
    link_insert(&c->calls, &call->node);
    link_init(&call->wait);
    link_append(&c->incomplete, &call->wait);
    conn_timer_update(c);
    return call;
}

static void timer_free_cb(uv_handle_t *h)
{
    struct grpc_server *srv = h->data;
    (void)srv;
    free(h);
}

static void call_release_input(struct grpc_call *call)
{
    if (call->conn) {
        call->conn->buffered -= call->in.len;
        call->conn->srv->buffered -= call->in.len;
    }
    buf_free(&call->in);
}

void call_drop_output(struct grpc_call *call)
{
    size_t n = call->out.len - call->out_off;
    if (call->conn) {
        call->conn->pending -= n;
        call->conn->srv->pending -= n;
    }
    buf_free(&call->out);
    call->out_off = 0;
}

static void call_unref(struct grpc_call *call)
{
    assert(call->refs > 0);
    if (--call->refs > 0)
        return;
    call_release_input(call);
    if (call->node.next)
        link_remove(&call->node);
    link_remove(&call->wait);
    if (call->deadline) {
        uv_timer_stop(call->deadline);
        uv_close((uv_handle_t *)call->deadline, timer_free_cb);
    }
    buf_free(&call->out);
    free(call->status_message);
    free(call);
}

static void flush_later(struct grpc_call *call)
{
    if (call->conn && !call->conn->in_recv)
        conn_flush(call->conn);
}

static void run_cancel(struct grpc_call *call)
{
    if (call->cancelled)
        return;
    call->cancelled = true;
    if (call->dispatched && call->cancel_fn) {
        /* The handler may finish (and drop its reference) from here. */
        call->refs++;
        call->cancel_fn(call, call->cancel_data);
        call_unref(call);
    }
}

void call_cancel(struct grpc_call *call, int status, const char *why)
{
    (void)status;
    (void)why;
    run_cancel(call);
}

void call_stream_closed(struct grpc_call *call)
{
    if (!call->stream_open)
        return;
    call->stream_open = false;
    call_release_input(call);
    call_drop_output(call);
    link_remove(&call->wait);
    struct conn *c = call->conn;
    if (call->node.next)
        link_remove(&call->node);
    call->conn = NULL;
    if (c && !c->closing && link_empty(&c->calls)) {
        c->idle_since_ms = uv_now(c->srv->loop);
        conn_timer_update(c);
    }
    if (call->deadline)
        uv_timer_stop(call->deadline);
    /* The client went away (or the response is complete): nothing more can
     * be delivered. */
    if (!call->responded)
        run_cancel(call);
    call_unref(call);
}

static ssize_t out_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
    struct grpc_call *call = source->ptr;
    size_t avail = call->out.len - call->out_off;
    if (avail > 0) {
        size_t n = avail < length ? avail : length;
        memcpy(buf, call->out.data + call->out_off, n);
        call->out_off += n;
        struct conn *c = call->conn;
        c->pending -= n;
        c->srv->pending -= n;
        c->progress_ms = uv_now(c->srv->loop);
        if (call->out_off == call->out.len) {
            call->out.len = call->out_off = 0;
            /* A large response is done: give its buffer back rather than
             * keep it for the life of the call. */
            if (call->out.cap > 64 * 1024)
                buf_free(&call->out);
        }
        return (ssize_t)n;
    }
    if (!call->finished) {
        call->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    /* Output drained and the status is known: end with trailers. */
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    char code[16];
    int clen = snprintf(code, sizeof(code), "%d", call->status);
    nghttp2_nv nva[2] = {NV("grpc-status", code, (size_t)clen)};
    size_t n = 1;
    struct buf enc = {0};
    if (call->status_message && call->status_message[0] &&
        grpc_message_encode(call->status_message, &enc) == 0) {
        nghttp2_nv m = NV("grpc-message", enc.data, enc.len);
        nva[n++] = m;
    }
    int r = nghttp2_submit_trailer(session, stream_id, nva, n);
    buf_free(&enc);
    if (r < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int submit_headers(struct grpc_call *call)
{
    nghttp2_nv nva[] = {NVS(":status", "200"), NVS("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = out_read_cb};
    int r =
        nghttp2_submit_response(call->conn->session, call->stream_id, nva, ARRAY_SIZE(nva), &prd);
    if (r == 0)
        call->headers_sent = true;
    return r;
}

static void submit_trailers_only(struct grpc_call *call, int status, const char *message)
{
    char code[16];
    int clen = snprintf(code, sizeof(code), "%d", status);
    struct buf enc = {0};
    nghttp2_nv nva[4] = {NVS(":status", "200"), NVS("content-type", "application/grpc"),
                         NV("grpc-status", code, (size_t)clen)};
    size_t n = 3;
    if (message && message[0] && grpc_message_encode(message, &enc) == 0) {
        nghttp2_nv m = NV("grpc-message", enc.data, enc.len);
        nva[n++] = m;
    }
    nghttp2_submit_response(call->conn->session, call->stream_id, nva, n, NULL);
    buf_free(&enc);
}

/* Ends the response with a status: trailers-only, or trailers behind what is
 * already queued. */
static void respond(struct grpc_call *call, int status, const char *message)
{
    if (call->responded || !call->stream_open || !call->conn)
        return;
    call->responded = true;
    link_remove(&call->wait);
    if (call->deadline)
        uv_timer_stop(call->deadline);
    if (!call->headers_sent) {
        submit_trailers_only(call, status, message);
    } else {
        call->status = status;
        call->status_message = message ? strdup(message) : NULL;
        call->finished = true;
        if (call->deferred) {
            call->deferred = false;
            nghttp2_session_resume_data(call->conn->session, call->stream_id);
        }
    }
    call_release_input(call);
    flush_later(call);
}

void call_respond_error(struct grpc_call *call, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_debug("grpc: %s: %s: %s", call->path[0] ? call->path : "(no path)",
              grpc_status_name(status), msg);
    respond(call, status, msg);
}

static void deadline_cb(uv_timer_t *t)
{
    struct grpc_call *call = t->data;
    call->refs++;
    call_respond_error(call, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
    run_cancel(call);
    call_unref(call);
}

static bool split_path(const char *path, const char **svc, size_t *svc_len, const char **name)
{
    if (path[0] != '/')
        return false;
    const char *slash = strchr(path + 1, '/');
    if (!slash || slash == path + 1 || !slash[1])
        return false;
    *svc = path + 1;
    *svc_len = (size_t)(slash - path - 1);
    *name = slash + 1;
    return true;
}

void call_headers_complete(struct grpc_call *call)
{
    struct grpc_server *srv = call->conn->srv;
    call->headers_done = true;
    if (!call->content_type_ok) {
        /* Not gRPC: the gRPC spec asks for HTTP 415. */
        nghttp2_nv nva[] = {NVS(":status", "415")};
        call->responded = true;
        nghttp2_submit_response(call->conn->session, call->stream_id, nva, ARRAY_SIZE(nva), NULL);
        return;
    }
    if (!call->is_post) {
        call_respond_error(call, GRPC_STATUS_UNIMPLEMENTED, "method must be POST");
        return;
    }
    bool service_known = false;
    if (!call->path_too_long)
        call->method = server_find_method(srv, call->path, &service_known);
    if (!call->method) {
        const char *svc, *name;
        size_t svc_len;
        if (call->path_too_long || !split_path(call->path, &svc, &svc_len, &name))
            call_respond_error(call, GRPC_STATUS_UNIMPLEMENTED, "malformed method name");
        else if (!service_known)
            call_respond_error(call, GRPC_STATUS_UNIMPLEMENTED, "unknown service %.*s",
                               (int)svc_len, svc);
        else
            call_respond_error(call, GRPC_STATUS_UNIMPLEMENTED,
                               "unknown method %s for service %.*s", name, (int)svc_len, svc);
        return;
    }
    if (call->bad_timeout) {
        call_respond_error(call, GRPC_STATUS_INTERNAL, "malformed grpc-timeout header");
        return;
    }
    if (call->have_timeout) {
        call->deadline = malloc(sizeof(*call->deadline));
        if (!call->deadline) {
            call_respond_error(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        uv_timer_init(srv->loop, call->deadline);
        call->deadline->data = call;
        uint64_t ms = call->timeout_ns / 1000000 + (call->timeout_ns % 1000000 ? 1 : 0);
        uv_timer_start(call->deadline, deadline_cb, ms, 0);
    }
}

/* Grows the request buffer towards the size its prefix announced, never
 * past it: doubling alone would leave up to twice the message allocated. */
static int in_reserve(struct buf *in, size_t extra, size_t want)
{
    size_t need = in->len + extra;
    if (need <= in->cap)
        return 0;
    size_t cap = in->cap ? in->cap * 2 : 4096;
    if (want && cap > want)
        cap = want;
    if (cap < need)
        cap = need;
    uint8_t *d = realloc(in->data, cap);
    if (!d)
        return -ENOMEM;
    in->data = d;
    in->cap = cap;
    return 0;
}

void call_data(struct grpc_call *call, const uint8_t *data, size_t len)
{
    if (call->responded || !call->method)
        return;
    struct conn *c = call->conn;
    struct grpc_server *srv = c->srv;
    size_t conn_max = MAX_CONN_BUFFERED < srv->opts.max_request_memory
                          ? MAX_CONN_BUFFERED
                          : (size_t)srv->opts.max_request_memory;
    if (c->buffered + len > conn_max) {
        call_respond_error(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                           "too many request bytes in flight on this connection");
        return;
    }
    if (srv->buffered + len > srv->opts.max_request_memory &&
        server_shed_requests(srv, call, len) < 0) {
        call_respond_error(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                           "too many request bytes in flight in the daemon (limit %llu)",
                           (unsigned long long)srv->opts.max_request_memory);
        return;
    }
    uint32_t n = 0;
    /* Look at the prefix before buffering, so an oversized or compressed
     * message is refused without holding its bytes. */
    if (call->in.len < 5) {
        uint8_t head[5];
        size_t have = call->in.len, take = len < 5 - have ? len : 5 - have;
        if (have)
            memcpy(head, call->in.data, have);
        memcpy(head + have, data, take);
        enum grpc_frame_result fr = grpc_frame_peek(head, have + take, GRPC_MAX_RECV_MESSAGE, &n);
        if (fr == GRPC_FRAME_TOO_LARGE) {
            call_respond_error(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                               "grpc: received message larger than max (%u vs. %u)", n,
                               GRPC_MAX_RECV_MESSAGE);
            return;
        }
        if (fr == GRPC_FRAME_COMPRESSED) {
            call_respond_error(
                call, GRPC_STATUS_UNIMPLEMENTED,
                "compressed messages are not supported (grpc-encoding identity only)");
            return;
        }
        if (fr == GRPC_FRAME_BAD_FLAG) {
            call_respond_error(call, GRPC_STATUS_INTERNAL, "invalid message compression flag");
            return;
        }
    }
    size_t want = 0;
    if (call->in.len >= 5 || len + call->in.len >= 5) {
        uint8_t head[5];
        size_t have = call->in.len < 5 ? call->in.len : 5;
        if (have)
            memcpy(head, call->in.data, have);
        if (have < 5)
            memcpy(head + have, data, 5 - have);
        want = 5 + ((size_t)head[1] << 24 | (size_t)head[2] << 16 | (size_t)head[3] << 8 | head[4]);
    }
    if (in_reserve(&call->in, len, want) < 0) {
        call_respond_error(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (len)
        memcpy(call->in.data + call->in.len, data, len);
    call->in.len += len;
    c->buffered += len;
    srv->buffered += len;
    if (grpc_frame_peek(call->in.data, call->in.len, GRPC_MAX_RECV_MESSAGE, &n) == GRPC_FRAME_OK &&
        call->in.len > 5 + (size_t)n)
        call_respond_error(call, GRPC_STATUS_INTERNAL,
                           "more than one request message for a unary or server-streaming call");
}

void call_request_complete(struct grpc_call *call)
{
    call->remote_closed = true;
    link_remove(&call->wait);
    if (call->responded || !call->method)
        return;
    uint32_t n = 0;
    enum grpc_frame_result fr =
        grpc_frame_peek(call->in.data, call->in.len, GRPC_MAX_RECV_MESSAGE, &n);
    if (fr != GRPC_FRAME_OK) {
        call_respond_error(call, GRPC_STATUS_INTERNAL,
                           call->in.len ? "truncated request message" : "no request message");
        return;
    }
    struct conn *c = call->conn;
    if (!link_empty(&c->parked) || conn_over_budget(c)) {
        /* The client is not taking its responses: this request waits (in
         * order) until they drain, or the connection is closed as stuck. */
        link_append(&c->parked, &call->wait);
        conn_timer_update(c);
        return;
    }
    call_dispatch(call);
}

void call_dispatch(struct grpc_call *call)
{
    uint32_t n = 0;
    grpc_frame_peek(call->in.data, call->in.len, GRPC_MAX_RECV_MESSAGE, &n);
    call->dispatched = true;
    call->conn->served = true;
    call->refs++; /* the handler's, until grpc_call_finish */
    call->refs++; /* ours: the handler may finish and the stream close */
    const struct method *m = call->method;
    m->fn(call, call->in.data + 5, n, m->data);
    call_release_input(call);
    call_unref(call);
}

int grpc_call_send(struct grpc_call *call, const void *msg, size_t len)
{
    if (call->responded || call->cancelled || !call->stream_open || !call->conn ||
        call->conn->evicting)
        return -ECANCELED;
    if (len > GRPC_MAX_SEND_MESSAGE)
        return -EMSGSIZE;
    struct conn *c = call->conn;
    struct grpc_server *srv = c->srv;
    size_t add = len + 5, mine = call->out.len - call->out_off;
    if (call->send_limit ? call_over_limit(call) : mine + add > GRPC_MAX_SEND_MESSAGE + 5)
        return -ENOBUFS;
    /* A connection under its budget may take one more message, whatever
     * its size: a client that reads is served whatever its budget, and a
     * connection holds at most its budget plus one message. Its new calls
     * wait while it is over (conn_over_budget). */
    if (c->pending >= srv->opts.max_connection_response_memory)
        return -ENOBUFS;
    if (srv->pending + add > srv->opts.max_response_memory && server_make_room(srv, c, add) < 0)
        return -ENOBUFS;
    if (call->out_off) {
        buf_consume(&call->out, call->out_off);
        call->out_off = 0;
    }
    uint8_t head[5];
    grpc_frame_header(head, (uint32_t)len);
    if (buf_reserve(&call->out, add) < 0)
        return -ENOMEM;
    buf_append(&call->out, head, 5);
    buf_append(&call->out, msg, len);
    if (c->pending == 0) {
        c->progress_ms = uv_now(srv->loop);
        c->pending += add;
        conn_timer_update(c);
    } else {
        c->pending += add;
    }
    srv->pending += add;
    if (!call->headers_sent) {
        if (submit_headers(call) < 0)
            return -EIO;
    } else if (call->deferred) {
        call->deferred = false;
        nghttp2_session_resume_data(call->conn->session, call->stream_id);
    }
    flush_later(call);
    return 0;
}

void grpc_call_finish(struct grpc_call *call, int status, const char *message)
{
    assert(call->dispatched);
    respond(call, status, message);
    call->dispatched = false;
    call->cancel_fn = NULL;
    if (call->room_fn) {
        call->room_fn = NULL;
        link_remove(&call->wait);
    }
    call_unref(call);
}

int grpc_call_when_room(struct grpc_call *call, grpc_cancel_fn fn, void *data)
{
    struct conn *c = call->conn;
    if (call->responded || call->cancelled || !call->stream_open || !c || c->evicting)
        return -ECANCELED;
    call->room_fn = fn;
    call->room_data = data;
    if (call_over_limit(call)) {
        /* Its own output draining wakes it (conn_dispatch_parked). */
        link_append(&c->draining, &call->wait);
        return 0;
    }
    /* Only the connection's own output draining wakes it. */
    if (c->pending == 0 || !conn_over_budget(c)) {
        call->room_fn = NULL;
        return -EAGAIN;
    }
    link_append(&c->parked, &call->wait);
    conn_timer_update(c);
    return 0;
}

bool call_over_limit(const struct grpc_call *call)
{
    return call->send_limit && call->out.len - call->out_off >= call->send_limit;
}

void grpc_call_set_send_limit(struct grpc_call *call, size_t bytes) { call->send_limit = bytes; }

void call_room(struct grpc_call *call)
{
    grpc_cancel_fn fn = call->room_fn;
    call->room_fn = NULL;
    call->refs++;
    fn(call, call->room_data);
    call_unref(call);
}

bool grpc_call_cancelled(const struct grpc_call *call) { return call->cancelled; }

void grpc_call_on_cancel(struct grpc_call *call, grpc_cancel_fn fn, void *data)
{
    call->cancel_fn = fn;
    call->cancel_data = data;
}

size_t grpc_call_pending(const struct grpc_call *call) { return call->out.len - call->out_off; }

const char *grpc_call_path(const struct grpc_call *call) { return call->path; }
