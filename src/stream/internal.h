/* stream: internal pieces (the protocol codecs, I/O-free, and the
 * server's types). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "base/base.h"

/* ---- SPDY/3.1 (spdy.c): framing and header compression, no I/O ---- */

#define SPDY_DICT_LEN 1423
extern const unsigned char spdy_dictionary[SPDY_DICT_LEN];

#define SPDY_FLAG_FIN     0x01
#define SPDY_CONTROL_MAX  (64u << 10)  /* a control frame's payload */
#define SPDY_HEADERS_MAX  (256u << 10) /* a decompressed header block */
#define SPDY_HEADER_PAIRS 64
#define SPDY_RST_PROTOCOL 1
#define SPDY_RST_REFUSED  3
#define SPDY_RST_CANCEL   5

struct spdy_header {
    const char *name, *value; /* NUL-terminated, in the codec's buffer */
};

struct spdy_callbacks {
    /* A new stream from the peer; headers valid during the call. */
    int (*on_syn_stream)(void *ud, uint32_t id, uint8_t flags, const struct spdy_header *h,
                         size_t n);
    /* Payload of a data frame, delivered as it arrives; fin with the last
     * piece (possibly empty). */
    int (*on_data)(void *ud, uint32_t id, const uint8_t *data, size_t len, bool fin);
    int (*on_rst)(void *ud, uint32_t id, uint32_t status);
    int (*on_ping)(void *ud, uint32_t id);
    int (*on_goaway)(void *ud);
};

struct spdy {
    const struct spdy_callbacks *cb;
    void *ud;
    z_stream in, out; /* header (de)compression, one per direction */
    bool in_init, out_init;
    /* the frame being read */
    uint8_t head[8];
    size_t head_len;
    bool control;
    uint16_t type;
    uint8_t flags;
    uint32_t len, got, stream;
    struct buf body; /* a control frame's payload */
    uint8_t *hbuf;   /* decompressed headers */
    size_t hcap;
    bool dead;
};

int spdy_init(struct spdy *s, const struct spdy_callbacks *cb, void *ud);
void spdy_free(struct spdy *s);
/* Consumes len bytes; -EPROTO on a malformed frame (the connection must
 * go), or a callback's negative result. */
int spdy_feed(struct spdy *s, const uint8_t *data, size_t len);

/* Frames to send, appended to out. */
int spdy_syn_reply(struct spdy *s, struct buf *out, uint32_t id, const struct spdy_header *h,
                   size_t n, bool fin);
int spdy_data(struct buf *out, uint32_t id, const void *data, size_t len, bool fin);
int spdy_rst(struct buf *out, uint32_t id, uint32_t status);
int spdy_ping(struct buf *out, uint32_t id);
int spdy_goaway(struct buf *out, uint32_t last, uint32_t status);
/* For clients and tests: a SYN_STREAM. */
int spdy_syn_stream(struct spdy *s, struct buf *out, uint32_t id, const struct spdy_header *h,
                    size_t n, bool fin);

/* ---- HTTP/1.1 request heads (http.c) ---- */

#define HTTP_HEAD_MAX    (16u << 10)
#define HTTP_HEADERS_MAX 64

struct http_request {
    char method[16];
    char path[2048]; /* the path, without the query */
    char query[2048];
    struct {
        char *name, *value; /* in buf */
    } h[HTTP_HEADERS_MAX];
    size_t n;
    char buf[HTTP_HEAD_MAX];
};

/* Parses a complete request head (up to and including the blank line).
 * -EAGAIN: incomplete; -EPROTO: malformed; -E2BIG: over the limits. On
 * success, *ret_used is the head's length. */
int http_request_parse(const char *data, size_t len, struct http_request *ret, size_t *ret_used);
/* The first header named name (case-insensitive), NULL. */
const char *http_header(const struct http_request *r, const char *name);
/* Whether the comma-separated list in any header named name holds token
 * (case-insensitive). */
bool http_header_has(const struct http_request *r, const char *name, const char *token);

/* ---- WebSocket (ws.c): the handshake's key and RFC 6455 framing, no I/O ---- */

/* Sec-WebSocket-Accept for key (28 chars + NUL). */
void ws_accept_key(const char *key, char out[29]);

#define WS_MSG_MAX       (1u << 20)   /* a client's message, reassembled */
#define WS_CONTROL_MAX   125          /* a control frame's payload (RFC) */
#define WS_FRAME_OUT_MAX (128u << 10) /* our frames' payload: longer messages go in fragments */
#define WS_MSG_KEEP      (64u << 10)  /* a message buffer kept for the next one */
#define WS_CLOSED        1            /* ws_feed: the client closed; our reply is queued */

enum { WS_CONT = 0, WS_TEXT = 1, WS_BINARY = 2, WS_CLOSE = 8, WS_PING = 9, WS_PONG = 10 };
enum {
    WS_CLOSE_NORMAL = 1000,
    WS_CLOSE_PROTOCOL = 1002,
    WS_CLOSE_INVALID = 1007, /* a text message that is not UTF-8 */
    WS_CLOSE_TOO_BIG = 1009,
    WS_CLOSE_INTERNAL = 1011,
};

struct ws_callbacks {
    /* A whole data message (op WS_TEXT, valid UTF-8, or WS_BINARY), its
     * fragments reassembled; data valid during the call. */
    int (*on_message)(void *ud, uint8_t op, const uint8_t *data, size_t len);
};

struct ws {
    const struct ws_callbacks *cb;
    void *ud;
    /* the frame being read */
    uint8_t head[14];
    size_t head_len;
    bool in_payload;
    bool fin;
    uint8_t op;
    uint8_t mask[4];
    uint64_t len, got;
    uint8_t ctl[WS_CONTROL_MAX];  /* a control frame's payload */
    uint8_t pong[WS_CONTROL_MAX]; /* the last ping's payload, answered at the feed's end */
    uint8_t pong_len;
    bool pong_due;
    uint8_t msg_op; /* the message being reassembled: WS_TEXT/WS_BINARY, 0: none */
    struct buf msg;
    bool close_sent;
    int result; /* != 0: the connection is over (WS_CLOSED or an error) */
};

void ws_init(struct ws *w, const struct ws_callbacks *cb, void *ud);
void ws_free(struct ws *w);
/* Consumes len bytes a client sent; frames to send back (pong, close) are
 * appended to out: one pong per call, for the last ping among the bytes. 0: read on. WS_CLOSED: the
 * client closed and our close is in out: flush it and close the connection. Negative: a close frame
 * saying why is in out (if out could grow), flush it and close: -EPROTO
 * (a protocol error: RSV bits, an unknown opcode, an unmasked frame, a
 * non-minimal or 2^63+ length, a control frame over 125 bytes or
 * fragmented, a continuation out of place, a bad close code; close 1002),
 * -EMSGSIZE (a message over WS_MSG_MAX; 1009), -EILSEQ (text that is not
 * UTF-8; 1007), -ENOMEM (1011), or the callback's negative result (1011).
 * Once over, every call returns the same. */
int ws_feed(struct ws *w, const uint8_t *data, size_t len, struct buf *out);
/* Appends our close frame (code 0: no code) unless one was sent; -ENOMEM. */
int ws_close(struct ws *w, struct buf *out, uint16_t code);

/* One frame; mask NULL for a server's frames (a client's: 4 bytes). -ENOMEM. */
int ws_frame(struct buf *out, uint8_t op, bool fin, const void *data, size_t len,
             const uint8_t *mask);
/* A server's data message of head then data, in frames of at most
 * WS_FRAME_OUT_MAX bytes. -ENOMEM. */
int ws_message(struct buf *out, uint8_t op, const void *head, size_t head_len, const void *data,
               size_t len);
/* Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF). */
bool ws_utf8_valid(const uint8_t *s, size_t len);

/* ---- the server's connections (server.c) and sessions (session.c) ---- */

#include <uv.h>

#include "stream/stream.h"

#define STREAM_CHANNELS (2 * STREAM_PF_STREAMS_MAX)
/* One budget per connection for every byte queued to its client (data,
 * control replies, TLS records): past it the sources and the reading of the
 * client stop; below STREAM_OUT_LOW both resume; a connection over it whose
 * client acknowledges no byte for STREAM_STALL_MS is reset. */
#define STREAM_OUT_HIGH (256u << 10)
#define STREAM_OUT_LOW  (64u << 10)
#define STREAM_STALL_MS 30000
/* Connections that have not presented a token (their request head is not
 * in): at most this many, the oldest evicted first for a new one. */
#define STREAM_UNAUTH_MAX  64
#define STREAM_CREATION_MS 30000 /* for the client's streams, as kubelet */
#define STREAM_HEAD_MS     10000 /* for the request head (and TLS handshake) */

/* exec/attach channels (the WebSocket channel bytes) */
enum { CH_STDIN, CH_STDOUT, CH_STDERR, CH_ERROR, CH_RESIZE };

enum conn_state { CONN_HTTP, CONN_SPDY, CONN_WS, CONN_DONE };
enum { READ_STOP_OUT = 1, READ_STOP_IN = 2 };

struct chan {
    uint32_t spdy_id; /* 0: the client has not opened it (SPDY) */
    bool out_closed;  /* we sent FIN */
    bool in_closed;   /* the client sent FIN */
};

struct pf_slot {
    char request_id[32];
    int32_t port;
    struct pf_conn *pc; /* the pod-side connection, session.c */
};

struct sess;

struct conn {
    struct conn *prev, *next;
    struct stream_server *srv;
    uv_tcp_t tcp;
    enum conn_state state;
    struct buf in; /* the request head, until the upgrade */
    struct stream_request *req;
    int version; /* channel protocol 1..5 (exec/attach) */
    bool base64; /* base64.channel.k8s.io */
    bool pf;     /* port forwarding */
    /* output: at most one write in flight (outw), the rest queued behind
     * it in one buffer (outq), so a frame costs its bytes, not a request */
    uv_write_t w;
    struct buf outw, outq;
    size_t out_pending;   /* outw.len + outq.len */
    uint64_t out_handed;  /* bytes handed to the kernel or to libuv, ever */
    uint64_t stall_mark;  /* what the client had acknowledged at the last look */
    uint64_t stall_since; /* when it last acknowledged a byte, while paused */
    uv_timer_t stall;
    bool stall_on;
    bool paused;        /* over the budget: sources and client reading stopped */
    unsigned read_stop; /* READ_STOP_* bits: the client is not read */
    bool authed;        /* a valid token came: never evicted */
    bool closing;
    bool aborted; /* the client is gone: nothing more is written */
    struct spdy spdy;
    bool spdy_init;
    struct ws ws;
    bool ws_init;
    struct buf *ws_out;   /* during ws_feed: the codec's answers, not sent yet */
    struct tls_conn *tls; /* NULL: plain */
    struct chan ch[STREAM_CHANNELS];
    struct pf_slot pf_slots[STREAM_PF_STREAMS_MAX];
    size_t n_pf;
    uv_timer_t timer; /* stream creation */
    bool timer_on;
    struct sess *sess;
    int handles;
};

/* server.c, for sessions */
int conn_send(struct conn *c, int ch, const void *data, size_t len);
void conn_close_ch(struct conn *c, int ch);
/* Flushes what is queued, then closes the connection. */
void conn_finish(struct conn *c);
uv_loop_t *conn_loop(struct conn *c);
/* Stops or resumes reading the client (input backpressure). */
void conn_read_pause(struct conn *c, bool pause);
/* A session holds the connection (c->handles) until it is done with it. */
void conn_unref(struct conn *c);

/* session.c */
/* The client's streams are there (SPDY) or the upgrade is done (WS). */
int sess_start(struct conn *c);
void sess_input(struct conn *c, int ch, const uint8_t *data, size_t len, bool fin);
/* Port forwarding: slot k has both streams. */
void sess_pf_open(struct conn *c, size_t k);
/* Output fell below STREAM_OUT_LOW / rose above STREAM_OUT_HIGH. */
void sess_pause(struct conn *c, bool pause);
/* The client is gone or the server closes: end everything, then free. */
void sess_end(struct conn *c);

/* ---- TLS (tls.c): mbedTLS over our buffers, loaded on first use ---- */

struct tls_ctx;
struct tls_conn;
/* Reads the certificate chain and key (PEM) and checks them in a child
 * process, at start only (it blocks). -EINVAL naming the file that is bad,
 * or its read error (-ENOENT, -EACCES, -EFBIG past 1 MiB...). The libraries
 * are loaded by the first tls_conn_new. */
int tls_ctx_new(const char *cert, const char *key, struct tls_ctx **ret, struct err *err);
void tls_ctx_free(struct tls_ctx *t);
struct tls_conn *tls_conn_new(struct tls_ctx *ctx); /* NULL: no memory */
void tls_conn_free(struct tls_conn *t);
/* How far the handshake has gone: higher is further, the highest once it
 * is done. */
int tls_conn_progress(const struct tls_conn *t);
/* Bytes from the socket: plaintext appended to plain, what must go back to
 * the socket (handshake, alerts) to out. -EPROTO on a TLS error,
 * -ECONNRESET when the client closed the session, -ENOMEM. */
int tls_conn_feed(struct tls_conn *t, const uint8_t *in, size_t len, struct buf *plain,
                  struct buf *out);
/* Plaintext to send: the records appended to out. */
int tls_conn_write(struct tls_conn *t, const void *data, size_t len, struct buf *out);
