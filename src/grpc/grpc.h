/* grpc: gRPC over HTTP/2 cleartext (prior knowledge) on libuv + nghttp2.
 *
 * The server knows nothing of CRI: it routes ":path" to a handler, hands it
 * the request message bytes (length prefix removed, size-checked), and
 * carries response messages, status and trailers back. Unary and
 * server-streaming calls are supported. Everything here runs on the loop
 * thread.
 *
 * A call's lifetime: the handler receives it with the request and must end
 * it exactly once with grpc_call_finish(), at once or later (after work in
 * the thread pool). If the client goes away, the deadline passes or the
 * server shuts down first, the call is marked cancelled and its cancel
 * callback runs; the handler still calls grpc_call_finish(), which then only
 * releases the call. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/base.h"

enum grpc_status {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_ALREADY_EXISTS = 6,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_ABORTED = 10,
    GRPC_STATUS_OUT_OF_RANGE = 11,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_DATA_LOSS = 15,
    GRPC_STATUS_UNAUTHENTICATED = 16,
};

/* Largest request message accepted (RESOURCE_EXHAUSTED beyond). */
#define GRPC_MAX_RECV_MESSAGE (16u * 1024 * 1024)
/* Largest response message sent (grpc_call_send: -EMSGSIZE beyond), and what
 * one call may have queued and not yet taken by the client: the 16 MiB
 * kubelet reads (ExecSync keeps its answer within it). */
#define GRPC_MAX_SEND_MESSAGE (16u * 1024 * 1024)
/* A timeout option that never fires. */
#define GRPC_NEVER UINT64_MAX

struct grpc_server;
struct grpc_call;

/* Called when the request message is complete; msg is valid only during
 * the call. */
typedef void (*grpc_handler_fn)(struct grpc_call *call, const uint8_t *msg, size_t len, void *data);
typedef void (*grpc_cancel_fn)(struct grpc_call *call, void *data);

/* Limits on what clients can make the server hold. 0 means the default;
 * a timeout of GRPC_NEVER turns it off. */
struct grpc_server_options {
    uint32_t max_concurrent_streams; /* per connection (1024) */
    /* Connections (1024). When the table is full, a new connection takes
     * the place of the connection idle the longest (one that never made a
     * call first); it is refused only if every connection has calls. */
    uint32_t max_connections;
    uint64_t handshake_timeout_ms; /* to complete the HTTP/2 preface (10 s) */
    /* A connection with no calls for this long gets GOAWAY and is closed
     * (5 min); gRPC clients reconnect on their next call. */
    uint64_t idle_timeout_ms;
    /* After this long without a byte from the client, the server sends a
     * PING (2 min); no answer within keepalive_timeout_ms (20 s) closes
     * the connection. */
    uint64_t keepalive_time_ms;
    uint64_t keepalive_timeout_ms;
    /* A request whose headers arrived must be complete (END_STREAM) within
     * this (60 s); DEADLINE_EXCEEDED otherwise. */
    uint64_t request_timeout_ms;
    /* A connection with responses queued whose client takes none of them
     * for this long is closed (60 s). */
    uint64_t stall_timeout_ms;
    /* Request bytes buffered before dispatch, all connections together
     * (128 MiB); one connection holds at most 64 MiB of them. Past the
     * limit, the largest buffered request is refused with
     * RESOURCE_EXHAUSTED. */
    uint64_t max_request_memory;
    /* Response bytes queued and not yet taken by clients: per connection
     * (32 MiB) and all connections together (256 MiB). A connection under
     * its budget may queue one more message; once over, its new calls
     * wait, in order, until it drains, and grpc_call_send refuses more.
     * Past the daemon-wide budget the connections holding more than the
     * sender are closed, largest first. */
    uint64_t max_connection_response_memory;
    uint64_t max_response_memory;
};

int grpc_server_new(uv_loop_t *loop, const struct grpc_server_options *opts,
                    struct grpc_server **ret);
/* path is "/package.Service/Method". -EEXIST if registered twice. */
int grpc_server_add_method(struct grpc_server *srv, const char *path, grpc_handler_fn fn,
                           void *data);
/* Listens on a unix socket created with `mode`. A stale socket (nothing
 * accepts on it) is replaced; a live one or a non-socket file is an error. */
int grpc_server_listen_unix(struct grpc_server *srv, const char *path, int mode, struct err *err);
int grpc_server_listen_tcp(struct grpc_server *srv, const char *host, int port, struct err *err);
/* Serves one already-connected unix stream socket (socket activation,
 * tests, fuzzing); the server owns fd from then on. */
int grpc_server_adopt(struct grpc_server *srv, int fd);
/* Stops accepting, sends GOAWAY, cancels calls, lets in-flight calls finish
 * for up to grace_ms, then closes what is left; done runs once everything
 * is closed. */
void grpc_server_shutdown(struct grpc_server *srv, uint64_t grace_ms, void (*done)(void *),
                          void *data);
/* After shutdown's done callback. */
void grpc_server_free(struct grpc_server *srv);
size_t grpc_server_connections(const struct grpc_server *srv);
/* Request bytes buffered and response bytes queued, all connections
 * together (what the memory limits count; both 0 with no connection). */
void grpc_server_usage(const struct grpc_server *srv, size_t *ret_request_bytes,
                       size_t *ret_response_bytes);

/* Queues one response message (copied). Returns -ECANCELED once the call
 * is cancelled or finished, -EMSGSIZE for a message over
 * GRPC_MAX_SEND_MESSAGE, -ENOBUFS when the call already has a message's
 * worth queued, or its connection its budget, or the daemon its budget
 * (the client is not reading), -ENOMEM. */
int grpc_call_send(struct grpc_call *call, const void *msg, size_t len);
/* After grpc_call_send's -ENOBUFS: fn runs once the call's connection is
 * back under its budget (in order with the requests parked behind it), and
 * may send again; if the client goes away first, the cancel callback runs
 * instead. -ECANCELED once the call is cancelled or finished, -EAGAIN when
 * nothing the connection holds would drain (the daemon's budget is held by
 * other connections): give up then. */
int grpc_call_when_room(struct grpc_call *call, grpc_cancel_fn fn, void *data);
/* Bounds what this call may hold queued for its client: once `bytes` are
 * queued and not yet taken, grpc_call_send refuses with -ENOBUFS (a call
 * under its limit may take one more message, whatever its size), and
 * grpc_call_when_room waits until the call's own output is back under the
 * limit as well as its connection under its budget. A server-streaming
 * handler with much to send sets it, so that a client that reads slowly
 * makes the daemon hold at most this much for it. 0 restores the default
 * (one message of up to GRPC_MAX_SEND_MESSAGE). */
void grpc_call_set_send_limit(struct grpc_call *call, size_t bytes);
/* Ends the call: trailers with status and message (percent-encoded on the
 * wire), or a trailers-only response when nothing was sent. The call must
 * not be used afterwards. */
void grpc_call_finish(struct grpc_call *call, int status, const char *message);
bool grpc_call_cancelled(const struct grpc_call *call);
void grpc_call_on_cancel(struct grpc_call *call, grpc_cancel_fn fn, void *data);
/* Bytes queued for the client and not yet taken by HTTP/2 flow control. */
size_t grpc_call_pending(const struct grpc_call *call);
const char *grpc_call_path(const struct grpc_call *call);

/* ---- pure helpers (exposed for tests and fuzzing) ----------------------- */

/* Parses a grpc-timeout value ("1-8 digits" + H|M|S|m|u|n) into ns. */
int grpc_timeout_parse(const char *s, size_t len, uint64_t *ret_ns);
/* Percent-encodes a grpc-message value into out (NUL-terminated). */
int grpc_message_encode(const char *msg, struct buf *out);
/* Length-prefixed message framing. */
enum grpc_frame_result {
    GRPC_FRAME_INCOMPLETE = 0, /* need more bytes */
    GRPC_FRAME_OK = 1,
    GRPC_FRAME_COMPRESSED = -1,
    GRPC_FRAME_TOO_LARGE = -2,
    GRPC_FRAME_BAD_FLAG = -3,
};
/* Looks at the start of buf: on OK, *ret_len is the message length and the
 * message starts at buf + 5. */
enum grpc_frame_result grpc_frame_peek(const uint8_t *buf, size_t len, size_t max,
                                       uint32_t *ret_len);
void grpc_frame_header(uint8_t out[5], uint32_t len);
const char *grpc_status_name(int status);

/* Client side, for command-line tools (blocking; never on the loop): one
 * unary call on a fresh connection to the unix socket. On a transport
 * failure returns < 0 with err set; otherwise 0 with *ret_status the gRPC
 * status, *ret_message its message (or NULL) and, when OK, the response
 * message in *ret_resp (caller frees both). */
int grpc_client_call(const char *socket_path, const char *path, const void *req, size_t req_len,
                     uint64_t timeout_ms, uint8_t **ret_resp, size_t *ret_len, int *ret_status,
                     char **ret_message, struct err *err);
/* A server-streaming call, as grpc_client_call: on_msg(data, msg, len)
 * runs for each response message as it arrives (< 0 from it ends the call
 * with a transport error). The gRPC status says how the stream ended. */
typedef int (*grpc_client_msg_fn)(void *data, const uint8_t *msg, size_t len);
int grpc_client_stream(const char *socket_path, const char *path, const void *req, size_t req_len,
                       uint64_t timeout_ms, grpc_client_msg_fn on_msg, void *data, int *ret_status,
                       char **ret_message, struct err *err);
