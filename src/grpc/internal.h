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
    uv_timer_t handshake_timer;
    int open_handles; /* h and handshake_timer; freed when both closed */
    nghttp2_session *session;
    struct link calls;
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
    int32_t stream_id;
    const struct method *method;
    char path[256];
    bool path_too_long;
    bool is_post;
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

    uv_timer_t *deadline; /* freed in its close callback */
    grpc_cancel_fn cancel_fn;
    void *cancel_data;
};

/* conn.c */
void conn_accept(struct grpc_server *srv, uv_stream_t *listener);
void conn_close(struct conn *c);
void conn_flush(struct conn *c);
void conn_goaway(struct conn *c);
int conn_callbacks_new(nghttp2_session_callbacks **ret);

/* call.c */
struct grpc_call *call_new(struct conn *c, int32_t stream_id);
void call_stream_closed(struct grpc_call *call);
void call_request_complete(struct grpc_call *call);
void call_headers_complete(struct grpc_call *call);
void call_data(struct grpc_call *call, const uint8_t *data, size_t len);
void call_cancel(struct grpc_call *call, int status, const char *why);
void call_respond_error(struct grpc_call *call, int status, const char *fmt, ...) _printf_(3, 4);
const struct method *server_find_method(const struct grpc_server *srv, const char *path,
                                        bool *ret_service_known);
/* A handle (listener, timer or a connection) finished closing. */
void server_handle_closed(struct grpc_server *srv);
