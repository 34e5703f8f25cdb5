/* One HTTP/2 connection: libuv reads feed nghttp2, nghttp2's output is
 * written with uv_try_write/uv_write. Only one uv_write is in flight at a
 * time; while it is, nghttp2 keeps further frames queued, and reading stops
 * when the client leaves too much output unread (backpressure).
 *
 * A client that reads its socket but not its streams (an HTTP/2 window of
 * 0) is held by the output budget instead: past it, complete requests are
 * parked, not dispatched, until the queued responses drain; a connection
 * whose output makes no progress for the stall timeout is closed. One timer
 * per connection carries every deadline (handshake, stall, keepalive, idle,
 * unfinished requests): it is armed for the earliest, and deadlines that
 * move later (another byte read) are only looked at when it fires. */
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "grpc/internal.h"

#define WRITE_BATCH           (256 * 1024)
#define INITIAL_STREAM_WINDOW (1 << 20)
#define CONN_WINDOW           (16 << 20)

static void conn_handle_closed(uv_handle_t *h);
static void conn_timer_cb(uv_timer_t *t);

static struct grpc_call *stream_call(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *user_data)
{
    struct conn *c = user_data;
    if (c->closing || frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (c->srv->shutting_down) {
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    struct grpc_call *call = call_new(c, frame->hd.stream_id);
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, call);
    return 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    struct conn *c = user_data;
    if (c->closing || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct grpc_call *call = stream_call(s, frame->hd.stream_id);
    if (!call)
        return 0;
    call->header_bytes += namelen + valuelen + 32;
    if (call->header_bytes > 64 * 1024)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* request trailers carry nothing we use */
    if (header_is(name, namelen, ":method")) {
        call->is_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (header_is(name, namelen, ":path")) {
        if (valuelen >= sizeof(call->path)) {
            call->path_too_long = true;
        } else {
            memcpy(call->path, value, valuelen);
            call->path[valuelen] = '\0';
        }
    } else if (header_is(name, namelen, "content-type")) {
        static const char ct[] = "application/grpc";
        size_t n = sizeof(ct) - 1;
        call->content_type_ok = valuelen >= n && memcmp(value, ct, n) == 0 &&
                                (valuelen == n || value[n] == '+' || value[n] == ';');
    } else if (header_is(name, namelen, "grpc-timeout")) {
        call->have_timeout = true;
        call->bad_timeout =
            grpc_timeout_parse((const char *)value, valuelen, &call->timeout_ns) < 0;
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *user_data)
{
    struct conn *c = user_data;
    if (c->closing)
        return 0;
    c->got_frame = true;
    struct grpc_call *call = frame->hd.stream_id ? stream_call(s, frame->hd.stream_id) : NULL;
    if (!call)
        return 0;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            call_headers_complete(call);
        if (end)
            call_request_complete(call);
        break;
    case NGHTTP2_DATA:
        if (end)
            call_request_complete(call);
        break;
    default:
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data)
{
    struct conn *c = user_data;
    if (c->closing)
        return 0;
    struct grpc_call *call = stream_call(s, stream_id);
    if (call)
        call_data(call, data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *frame, void *user_data)
{
    struct conn *c = user_data;
    if (c->closing || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    /* Our side is done while the client still sends (an early error such
     * as an oversized message): tell it to stop. */
    struct grpc_call *call = stream_call(s, frame->hd.stream_id);
    if (call && !call->remote_closed)
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    struct conn *c = user_data;
    if (c->closing)
        return 0;
    struct grpc_call *call = stream_call(s, stream_id);
    if (call) {
        nghttp2_session_set_stream_user_data(s, stream_id, NULL);
        call_stream_closed(call);
    }
    return 0;
}

static int on_error(nghttp2_session *s, int lib_error_code, const char *msg, size_t len,
                    void *user_data)
{
    log_debug("http2: %.*s", (int)len, msg);
    return 0;
}

int conn_callbacks_new(nghttp2_session_callbacks **ret)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_error_callback2(cbs, on_error);
    *ret = cbs;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    buf->base = (char *)c->srv->rbuf;
    buf->len = sizeof(c->srv->rbuf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void write_cb(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    c->writing = false;
    c->wbuf.len = 0;
    if (c->closing)
        return;
    if (status < 0) {
        log_debug("grpc: write failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    c->progress_ms = uv_now(c->srv->loop);
    if (c->reading_stopped) {
        c->reading_stopped = false;
        uv_read_start(&c->h.stream, on_alloc, on_read);
    }
    conn_flush(c);
    conn_dispatch_parked(c);
}

void conn_flush(struct conn *c)
{
    while (!c->closing && !c->writing) {
        while (c->wbuf.len < WRITE_BATCH) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->session, &data);
            if (n < 0) {
                log_debug("grpc: http2 send: %s", nghttp2_strerror((int)n));
                conn_close(c);
                return;
            }
            if (n == 0)
                break;
            if (buf_append(&c->wbuf, data, (size_t)n) < 0) {
                conn_close(c);
                return;
            }
        }
        if (c->wbuf.len == 0) {
            if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session))
                conn_close(c);
            return;
        }
        uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n > 0)
            c->progress_ms = uv_now(c->srv->loop);
        if (n == (int)c->wbuf.len) {
            c->wbuf.len = 0;
            continue;
        }
        if (n > 0)
            buf_consume(&c->wbuf, (size_t)n);
        else if (n != UV_EAGAIN && n != UV_ENOSYS) {
            conn_close(c);
            return;
        }
        b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
        c->wreq.data = c;
        if (uv_write(&c->wreq, &c->h.stream, &b, 1, write_cb) < 0) {
            conn_close(c);
            return;
        }
        c->writing = true;
        conn_timer_update(c);
        /* The socket is full: the client is not keeping up with its
         * responses. Stop taking new requests until this write completes;
         * reading on would dispatch calls whose answers cannot leave, and
         * their streams would stay open until the client passes the stream
         * limit without fault of its own. */
        if (!c->reading_stopped) {
            uv_read_stop(&c->h.stream);
            c->reading_stopped = true;
        }
    }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = stream->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->last_read_ms = uv_now(c->srv->loop);
    c->ping_outstanding = false;
    c->in_recv = true;
    ssize_t r = nghttp2_session_mem_recv(c->session, (const uint8_t *)buf->base, (size_t)nread);
    c->in_recv = false;
    if (r < 0) {
        log_debug("grpc: http2 receive: %s", nghttp2_strerror((int)r));
        if (r != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            nghttp2_session_terminate_session(c->session, NGHTTP2_PROTOCOL_ERROR);
        conn_flush(c);
        conn_close(c);
        return;
    }
    conn_flush(c);
    conn_dispatch_parked(c);
}

bool conn_over_budget(const struct conn *c)
{
    const struct grpc_server *srv = c->srv;
    return c->pending >= srv->opts.max_connection_response_memory ||
           (c->pending > 0 && srv->pending >= srv->opts.max_response_memory);
}

void conn_dispatch_parked(struct conn *c)
{
    if (c->dispatching)
        return;
    c->dispatching = true;
    while (!c->closing && !c->evicting && !link_empty(&c->parked) && !conn_over_budget(c)) {
        struct grpc_call *call = container_of(c->parked.next, struct grpc_call, wait);
        link_remove(&call->wait);
        if (call->room_fn)
            call_room(call);
        else
            call_dispatch(call);
    }
    /* Calls held by their own send limit, once their output drained under
     * it; one that sends past it again goes back to the end of the list. */
    for (bool again = true; again;) {
        again = false;
        for (struct link *l = c->draining.next; l != &c->draining; l = l->next) {
            struct grpc_call *call = container_of(l, struct grpc_call, wait);
            if (c->closing || c->evicting || conn_over_budget(c))
                break;
            if (call_over_limit(call))
                continue;
            link_remove(&call->wait);
            call_room(call);
            again = true;
            break;
        }
    }
    c->dispatching = false;
}

/* Output the client has not taken: queued in calls, parked behind them, or
 * handed to the socket and not yet written. */
static bool output_waiting(const struct conn *c)
{
    return c->pending > 0 || !link_empty(&c->parked) || c->writing;
}

static uint64_t due_min(uint64_t due, uint64_t since, uint64_t span)
{
    if (span == GRPC_NEVER)
        return due;
    return since + span < due ? since + span : due;
}

static bool expired(uint64_t now, uint64_t since, uint64_t span)
{
    return span != GRPC_NEVER && now >= since + span;
}

static uint64_t conn_next_due(const struct conn *c)
{
    const struct grpc_server_options *o = &c->srv->opts;
    if (c->evicting)
        return 0;
    uint64_t due = GRPC_NEVER;
    if (!c->got_frame)
        due = due_min(due, c->created_ms, o->handshake_timeout_ms);
    if (!link_empty(&c->incomplete)) {
        const struct grpc_call *old = container_of(c->incomplete.next, struct grpc_call, wait);
        due = due_min(due, old->started_ms, o->request_timeout_ms);
    }
    if (output_waiting(c))
        due = due_min(due, c->progress_ms, o->stall_timeout_ms);
    if (c->ping_outstanding)
        due = due_min(due, c->ping_ms, o->keepalive_timeout_ms);
    else
        due = due_min(due, c->last_read_ms, o->keepalive_time_ms);
    if (link_empty(&c->calls))
        due = due_min(due, c->idle_since_ms, o->idle_timeout_ms);
    return due;
}

static void conn_timer_arm(struct conn *c, uint64_t due)
{
    c->timer_due = due;
    if (due == GRPC_NEVER) {
        uv_timer_stop(&c->timer);
        return;
    }
    uint64_t now = uv_now(c->srv->loop);
    uv_timer_start(&c->timer, conn_timer_cb, due > now ? due - now : 0, 0);
}

void conn_timer_update(struct conn *c)
{
    if (c->closing)
        return;
    uint64_t due = conn_next_due(c);
    if (due < c->timer_due)
        conn_timer_arm(c, due);
}

/* Closes at once, after one try to tell the client why (a GOAWAY it may
 * never read: this is for clients that do not). */
static void conn_drop(struct conn *c, uint32_t code)
{
    if (c->closing)
        return;
    if (c->session) {
        nghttp2_session_terminate_session(c->session, code);
        conn_flush(c);
    }
    conn_close(c);
}

/* Closes after a GOAWAY, once it is written (the client is reading). */
static void conn_goaway_close(struct conn *c)
{
    nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
    conn_flush(c);
}

void conn_evict(struct conn *c, const char *why)
{
    if (c->closing || c->evicting)
        return;
    log_warn("grpc: closing a connection holding %zu response bytes: %s", c->pending, why);
    c->evicting = true;
    for (struct link *l = c->calls.next; l != &c->calls; l = l->next)
        call_drop_output(container_of(l, struct grpc_call, node));
    conn_timer_arm(c, 0);
}

static void conn_timer_cb(uv_timer_t *t)
{
    struct conn *c = t->data;
    const struct grpc_server_options *o = &c->srv->opts;
    uint64_t now = uv_now(c->srv->loop);
    c->timer_due = GRPC_NEVER;
    if (c->closing)
        return;
    if (c->evicting) {
        conn_drop(c, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    if (!c->got_frame && expired(now, c->created_ms, o->handshake_timeout_ms)) {
        log_debug("grpc: connection sent no HTTP/2 preface in time");
        conn_close(c);
        return;
    }
    if (output_waiting(c) && expired(now, c->progress_ms, o->stall_timeout_ms)) {
        log_warn("grpc: closing a connection whose client took none of its %zu queued response "
                 "bytes for %llu ms",
                 c->pending, (unsigned long long)o->stall_timeout_ms);
        conn_drop(c, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    if (c->ping_outstanding && expired(now, c->ping_ms, o->keepalive_timeout_ms)) {
        log_info("grpc: closing a connection that did not answer a keepalive ping");
        conn_drop(c, NGHTTP2_NO_ERROR);
        return;
    }
    if (!c->ping_outstanding && expired(now, c->last_read_ms, o->keepalive_time_ms)) {
        c->ping_outstanding = true;
        c->ping_ms = now;
        nghttp2_submit_ping(c->session, NGHTTP2_FLAG_NONE, NULL);
        conn_flush(c);
        if (c->closing)
            return;
    }
    if (link_empty(&c->calls) && expired(now, c->idle_since_ms, o->idle_timeout_ms)) {
        log_debug("grpc: closing a connection idle for %llu ms",
                  (unsigned long long)o->idle_timeout_ms);
        conn_goaway_close(c);
        if (c->closing)
            return;
    }
    while (!link_empty(&c->incomplete)) {
        struct grpc_call *call = container_of(c->incomplete.next, struct grpc_call, wait);
        if (!expired(now, call->started_ms, o->request_timeout_ms))
            break;
        link_remove(&call->wait);
        if (!call->headers_done) {
            /* Stuck inside a header block: nothing else can arrive on the
             * connection until it ends. */
            log_debug("grpc: closing a connection stuck in a header block");
            conn_drop(c, NGHTTP2_PROTOCOL_ERROR);
            return;
        }
        call_respond_error(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                           "request not received in full within %llu ms",
                           (unsigned long long)o->request_timeout_ms);
        if (c->closing)
            return;
    }
    conn_dispatch_parked(c);
    if (!c->closing)
        conn_timer_arm(c, conn_next_due(c));
}

/* The connection to close for a new one when the table is full: one with
 * no calls, one that never made a call first, idle the longest. */
static struct conn *idle_victim(struct grpc_server *srv, const struct conn *except)
{
    struct conn *best = NULL;
    for (struct link *l = srv->conns.next; l != &srv->conns; l = l->next) {
        struct conn *x = container_of(l, struct conn, node);
        if (x == except || x->closing || !link_empty(&x->calls))
            continue;
        if (!best || (best->served && !x->served) ||
            (best->served == x->served &&
             (x->idle_since_ms < best->idle_since_ms ||
              (x->idle_since_ms == best->idle_since_ms && x->seq < best->seq))))
            best = x;
    }
    return best;
}

/* Creates a connection on an accepted (listener) or given (fd) stream. */
static struct conn *conn_new(struct grpc_server *srv, bool tcp)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->srv = srv;
    link_init(&c->calls);
    link_init(&c->incomplete);
    link_init(&c->parked);
    link_init(&c->draining);
    int r = tcp ? uv_tcp_init(srv->loop, &c->h.tcp) : uv_pipe_init(srv->loop, &c->h.pipe, 0);
    if (r < 0) {
        free(c);
        return NULL;
    }
    c->h.stream.data = c;
    uv_timer_init(srv->loop, &c->timer);
    c->timer.data = c;
    c->timer_due = GRPC_NEVER;
    c->seq = srv->conn_seq++;
    c->created_ms = c->last_read_ms = c->idle_since_ms = c->progress_ms = uv_now(srv->loop);
    c->open_handles = 2;
    link_insert(&srv->conns, &c->node);
    srv->n_conns++;
    return c;
}

static void conn_start(struct conn *c)
{
    struct grpc_server *srv = c->srv;
    if (srv->n_conns > srv->opts.max_connections) {
        struct conn *victim = idle_victim(srv, c);
        if (victim) {
            log_debug("grpc: connection limit (%u) reached: closing the connection idle the "
                      "longest",
                      srv->opts.max_connections);
            conn_drop(victim, NGHTTP2_NO_ERROR);
        } else {
            uint64_t now = uv_now(srv->loop);
            srv->refused++;
            if (!srv->refused_logged_ms || now - srv->refused_logged_ms >= 10000) {
                log_warn("grpc: connection limit (%u) reached and every connection has calls: "
                         "refused %zu connection(s)",
                         srv->opts.max_connections, srv->refused);
                srv->refused_logged_ms = now;
                srv->refused = 0;
            }
            conn_close(c);
            return;
        }
    }
    if (nghttp2_session_server_new2(&c->session, srv->callbacks, c, srv->h2opts) != 0) {
        conn_close(c);
        return;
    }
    if (c->h.stream.type == UV_TCP)
        uv_tcp_nodelay(&c->h.tcp, 1);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, srv->opts.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, INITIAL_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 64 * 1024},
    };
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv));
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
    conn_timer_update(c);
    uv_read_start(&c->h.stream, on_alloc, on_read);
    conn_flush(c);
}

void conn_accept(struct grpc_server *srv, uv_stream_t *listener)
{
    struct conn *c = conn_new(srv, listener->type == UV_TCP);
    if (!c)
        return;
    if (uv_accept(listener, &c->h.stream) < 0) {
        conn_close(c);
        return;
    }
    conn_start(c);
}

int grpc_server_adopt(struct grpc_server *srv, int fd)
{
    if (srv->shutting_down)
        return -ESHUTDOWN;
    struct conn *c = conn_new(srv, false);
    if (!c)
        return -ENOMEM;
    int r = uv_pipe_open(&c->h.pipe, fd);
    if (r < 0) {
        conn_close(c);
        return r;
    }
    conn_start(c);
    return 0;
}

void conn_goaway(struct conn *c)
{
    if (c->closing)
        return;
    nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(c->session), NGHTTP2_NO_ERROR,
                          NULL, 0);
    /* Long-running calls (event streams) end when asked. */
    struct link *l = c->calls.next;
    while (l != &c->calls) {
        struct grpc_call *call = container_of(l, struct grpc_call, node);
        l = l->next;
        if (call->dispatched)
            call_cancel(call, GRPC_STATUS_UNAVAILABLE, "server shutting down");
    }
    if (!c->in_recv)
        conn_flush(c);
}

void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    link_remove(&c->node);
    c->srv->n_conns--;
    c->srv->pending_closes++;
    /* Every call loses its stream; handlers still running are cancelled
     * and free their call when they finish. */
    while (!link_empty(&c->calls)) {
        struct grpc_call *call = container_of(c->calls.next, struct grpc_call, node);
        call_stream_closed(call);
    }
    if (c->session) {
        nghttp2_session_del(c->session);
        c->session = NULL;
    }
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->h.stream, conn_handle_closed);
}

static void conn_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    struct grpc_server *srv = c->srv;
    buf_free(&c->wbuf);
    free(c);
#ifdef __GLIBC__
    /* The last connection is gone: hand the pages its sessions, streams
     * and buffers used back to the kernel. glibc's free() only returns
     * memory at the top of the heap, so after a burst of connections the
     * idle daemon would otherwise keep ~1-2 MB it no longer uses. Cheap
     * at this point (few free chunks), and rare for kubelet, which keeps
     * one connection open. */
    if (srv->n_conns == 0)
        malloc_trim(0);
#endif
    server_handle_closed(srv);
}
