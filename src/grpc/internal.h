/* Private to src/grpc. */
#pragma once

#include <nghttp2/nghttp2.h>

#include "grpc/grpc.h"

struct conn;

/* Intrusive doubly linked list. */
struct link {
    struct link *prev, *next;
};
static inline void link_init(struct link *l) { l->prev = l->next = l; }
static inline bool link_empty(const struct link *l) { return l->next == l; }
static inline void link_insert(struct link *head, struct link *l)
{
    l->next = head->next;
    l->prev = head;
    head->next->prev = l;
    head->next = l;
}
/* Inserts l last (head->prev). */
static inline void link_append(struct link *head, struct link *l) { link_insert(head->prev, l); }
static inline void link_remove(struct link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    link_init(l);
}
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

struct method {
    char *path;
    grpc_handler_fn fn;
    void *data;
};

struct grpc_server {
    uv_loop_t *loop;
    struct grpc_server_options opts;
    struct method *methods; /* sorted by path */
    size_t n_methods;
    uv_pipe_t *unix_listener;
    char *unix_path;
    dev_t unix_dev;
    ino_t unix_ino;
    uv_tcp_t *tcp_listener;
    struct link conns;
    size_t n_conns;
    bool shutting_down;
    size_t pending_closes;
    uv_timer_t *grace_timer;
    void (*done)(void *);
    void *done_data;
    nghttp2_session_callbacks *callbacks;
    nghttp2_option *h2opts;
    size_t buffered;            /* request bytes held by every connection's calls */
    size_t pending;             /* response bytes queued by every connection's calls */
    uint64_t refused_logged_ms; /* rate limit for "connection table full" */
    size_t refused;
    uint64_t conn_seq;
    /* One read buffer for every connection: nghttp2 consumes what was
     * read before on_read returns, and the loop reads one stream at a
     * time. */
    uint8_t rbuf[64 * 1024];
};

struct conn {
    struct grpc_server *srv;
    struct link node;
    union {
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    /* One timer for every deadline of the connection: handshake, idle,
     * keepalive, stall and unfinished requests. It is armed for the
     * earliest; when it fires it acts on what is due and re-arms
     * (conn_timer_cb). */
    uv_timer_t timer;
    uint64_t timer_due; /* loop time it is armed for, GRPC_NEVER if not */
    int open_handles;   /* h and timer; freed when both closed */
    nghttp2_session *session;
    struct link calls;
    struct link incomplete; /* calls whose request is not complete, oldest first */
    struct link parked;     /* complete requests waiting for the output budget */
    struct link draining;   /* calls waiting for their own output (send_limit) */
    uint64_t created_ms, last_read_ms, idle_since_ms, progress_ms, ping_ms;
    size_t pending; /* response bytes its calls have queued */
    uint64_t seq;   /* order of arrival, to break ties of idle_since_ms */
    bool ping_outstanding;
    bool served;   /* a call was dispatched on it once */
    bool evicting; /* closed at the next loop iteration; takes no output */
    bool dispatching;
    struct buf wbuf; /* bytes handed to uv_write */
    uv_write_t wreq;
    bool writing;
    bool closing;
    bool in_recv;   /* inside nghttp2_session_mem_recv: flush afterwards */
    bool got_frame; /* the preface and a first frame arrived */
    bool reading_stopped;
    size_t buffered; /* request bytes held by this connection's calls */
};

struct grpc_call {
    struct conn *conn; /* NULL once the stream is gone */
    struct link node;
    struct link wait; /* in conn->incomplete, conn->parked or conn->draining */
    uint64_t started_ms;
    int32_t stream_id;
    const struct method *method;
    char path[256];
    bool path_too_long;
    bool is_post;
    bool headers_done;
    bool content_type_ok;
    bool have_timeout;
    bool bad_timeout;
    uint64_t timeout_ns;
    size_t header_bytes;

    struct buf in; /* request body as received */
    bool remote_closed;

    int refs;        /* the stream, the handler, and short holds */
    bool dispatched; /* the handler owns a reference */
    bool responded;  /* status sent (or being sent): no more output */
    bool headers_sent;
    bool finished; /* trailers queued behind the output */
    bool deferred; /* data provider is waiting for output */
    bool cancelled;
    bool stream_open; /* nghttp2 stream not closed yet */
    int status;
    char *status_message;

    struct buf out; /* framed response messages */
    size_t out_off;
    size_t send_limit; /* grpc_call_set_send_limit; 0: one message */

    uv_timer_t *deadline; /* freed in its close callback */
    grpc_cancel_fn cancel_fn;
    void *cancel_data;
    grpc_cancel_fn room_fn; /* parked until the connection has room */
    void *room_data;
};

/* conn.c */
void conn_accept(struct grpc_server *srv, uv_stream_t *listener);
void conn_close(struct conn *c);
void conn_flush(struct conn *c);
void conn_goaway(struct conn *c);
/* The earliest deadline of c may have moved closer. */
void conn_timer_update(struct conn *c);
/* Dispatches parked calls while the connection is within its budget, and
 * resumes calls whose own output drained under their send limit. */
void conn_dispatch_parked(struct conn *c);
bool conn_over_budget(const struct conn *c);
/* call.c: a call parked by grpc_call_when_room is resumed. */
void call_room(struct grpc_call *call);
/* call.c: the call is over its own send limit (grpc_call_set_send_limit). */
bool call_over_limit(const struct grpc_call *call);
/* Frees c's queued output now and closes it at the next loop iteration
 * (safe from inside a handler of another connection). */
void conn_evict(struct conn *c, const char *why);
int conn_callbacks_new(nghttp2_session_callbacks **ret);

/* call.c */
struct grpc_call *call_new(struct conn *c, int32_t stream_id);
void call_stream_closed(struct grpc_call *call);
void call_request_complete(struct grpc_call *call);
void call_headers_complete(struct grpc_call *call);
void call_data(struct grpc_call *call, const uint8_t *data, size_t len);
void call_cancel(struct grpc_call *call, int status, const char *why);
void call_dispatch(struct grpc_call *call);
/* Drops the call's queued output and its accounting. */
void call_drop_output(struct grpc_call *call);
void call_respond_error(struct grpc_call *call, int status, const char *fmt, ...) _printf_(3, 4);
const struct method *server_find_method(const struct grpc_server *srv, const char *path,
                                        bool *ret_service_known);
/* Makes room for `add` more response bytes past the daemon-wide budget by
 * evicting connections that hold more than c; -ENOBUFS if it cannot. */
int server_make_room(struct grpc_server *srv, struct conn *c, size_t add);
/* Makes room for `add` more request bytes past the daemon-wide limit by
 * refusing larger buffered requests than call's; -ENOBUFS if it cannot. */
int server_shed_requests(struct grpc_server *srv, struct grpc_call *call, size_t add);
/* A handle (listener, timer or a connection) finished closing. */
void server_handle_closed(struct grpc_server *srv);
