/* libFuzzer target: one server connection — the HTTP/2 session, gRPC
 * framing and header handling, routing, and the protobuf decoding and
 * handlers of the CRI services — fed exactly as it would be from the socket.
 *
 * Two modes, chosen by the first byte:
 * - raw (even): the rest is written to the socket as it is;
 * - client (odd): the rest is a program for a real HTTP/2 client (an
 *   nghttp2 client session): submit well-formed Version calls with bodies
 *   of chosen sizes and grpc-timeouts, reset some of them, change the
 *   client's window, deliver the client's bytes in chosen pieces, run the
 *   server's loop, read its answers.
 *
 * Oracles, besides the sanitizers: every well-formed call the client did
 * not reset ends with grpc-status 0 and a VersionResponse naming kinglet
 * (an INTERNAL answer, a stream reset by the server, a connection the
 * server closed or a call that never ends is a bug); after raw bytes, a
 * well-formed call on a fresh connection is still served; and once every
 * connection is closed the server holds no request or response bytes
 * (grpc_server_usage). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <nghttp2/nghttp2.h>

#include "base/base.h"
#include "cri/cri.h"
#include "grpc/grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t *loop;
static struct grpc_server *srv;

static char root[] = "/tmp/kinglet-fuzz-XXXXXX";

static void root_remove(void) { rm_rf_at(AT_FDCWD, root); }

static void setup(void)
{
    if (!mkdtemp(root))
        abort();
    atexit(root_remove);
    /* as the daemon does: a write to a peer that closed is EPIPE */
    signal(SIGPIPE, SIG_IGN);
    log_set_level(LOG_LEVEL_ERROR);
    loop = uv_default_loop();
    struct err err = {0};
    struct cri *cri;
    struct cri_config cfg = {.socket_path = "/nonexistent", .root_dir = root, .state_dir = root};
    if (cri_new(loop, &cfg, &cri, &err) < 0 || grpc_server_new(loop, NULL, &srv) < 0 ||
        cri_register(cri, srv, &err) < 0)
        abort();
}

static void fail(const char *what, int stream)
{
    fprintf(stderr, "fuzz_grpc_conn: logic error: %s (stream %d)\n", what, stream);
    abort();
}

/* ---- a real HTTP/2 client ------------------------------------------------ */

#define MAX_CALLS 64

struct call {
    int32_t id;
    uint8_t *body;
    size_t len, off;
    bool reset;  /* by the client */
    bool closed; /* the stream is gone */
    uint32_t close_code;
    int status; /* grpc-status, -1 until seen */
    struct buf resp;
};

struct client {
    int fd; /* our end of the socketpair */
    nghttp2_session *s;
    struct call calls[MAX_CALLS];
    size_t n;
    struct buf out; /* bytes for the server not yet written */
    bool server_closed;
};

static struct call *call_of(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *u)
{
    struct call *c = src->ptr;
    size_t n = c->len - c->off < len ? c->len - c->off : len;
    memcpy(buf, c->body + c->off, n);
    c->off += n;
    if (c->off == c->len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *u)
{
    struct call *c = call_of(s, f->hd.stream_id);
    if (c && namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char v[16] = "";
        snprintf(v, sizeof(v), "%.*s", (int)(valuelen < 15 ? valuelen : 15), value);
        c->status = atoi(v);
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *u)
{
    struct call *c = call_of(s, id);
    if (c && buf_append(&c->resp, data, len) < 0)
        abort();
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *u)
{
    struct call *c = call_of(s, id);
    if (c) {
        c->closed = true;
        c->close_code = code;
    }
    return 0;
}

static void client_init(struct client *cl, int fd)
{
    memset(cl, 0, sizeof(*cl));
    cl->fd = fd;
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        abort();
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&cl->s, cbs, cl) != 0)
        abort();
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(cl->s, NGHTTP2_FLAG_NONE, NULL, 0);
}

static void client_free(struct client *cl)
{
    nghttp2_session_del(cl->s);
    for (size_t i = 0; i < cl->n; i++) {
        free(cl->calls[i].body);
        buf_free(&cl->calls[i].resp);
    }
    buf_free(&cl->out);
}

/* A well-formed Version call: VersionRequest{version: len bytes}. */
static void client_call(struct client *cl, size_t len, bool timeout)
{
    if (cl->n == MAX_CALLS)
        return;
    struct call *c = &cl->calls[cl->n];
    size_t pb = len ? 1 + 3 + len : 0; /* tag, a 3-byte varint, bytes */
    c->body = malloc(5 + pb + 1);
    if (!c->body)
        abort();
    grpc_frame_header(c->body, (uint32_t)pb);
    if (len) {
        c->body[5] = 0x0a;
        c->body[6] = (uint8_t)(0x80 | (len & 0x7f));
        c->body[7] = (uint8_t)(0x80 | ((len >> 7) & 0x7f));
        c->body[8] = (uint8_t)(len >> 14);
        memset(c->body + 9, 'v', len);
    }
    c->len = 5 + pb;
    c->status = -1;
    nghttp2_nv nva[7] = {
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, 0}
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", "/runtime.v1.RuntimeService/Version"),
        NV(":authority", "localhost"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("grpc-timeout", "1H"),
#undef NV
    };
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = body_read};
    c->id = nghttp2_submit_request(cl->s, NULL, nva, timeout ? 7 : 6, &prd, c);
    if (c->id < 0)
        abort();
    cl->n++;
}

/* Moves the client's output into cl->out. */
static void client_produce(struct client *cl)
{
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(cl->s, &d);
        if (n < 0)
            abort();
        if (n == 0)
            break;
        if (buf_append(&cl->out, d, (size_t)n) < 0)
            abort();
    }
}

static void client_deliver(struct client *cl, size_t max)
{
    size_t n = cl->out.len < max ? cl->out.len : max;
    if (!n || cl->server_closed)
        return;
    ssize_t w = write(cl->fd, cl->out.data, n);
    if (w > 0)
        buf_consume(&cl->out, (size_t)w);
}

static void client_read(struct client *cl)
{
    uint8_t b[65536];
    for (;;) {
        ssize_t n = read(cl->fd, b, sizeof(b));
        if (n == 0)
            cl->server_closed = true;
        if (n <= 0)
            return;
        if (nghttp2_session_mem_recv(cl->s, b, (size_t)n) < 0)
            fail("the server's bytes are not valid HTTP/2", 0);
    }
}

static bool client_done(const struct client *cl)
{
    for (size_t i = 0; i < cl->n; i++)
        if (!cl->calls[i].closed)
            return false;
    return true;
}

static void client_check(const struct client *cl)
{
    for (size_t i = 0; i < cl->n; i++) {
        const struct call *c = &cl->calls[i];
        if (c->reset)
            continue;
        if (!c->closed)
            fail(cl->server_closed ? "the server closed a good connection" : "a call never ended",
                 c->id);
        if (c->close_code != NGHTTP2_NO_ERROR)
            fail("the server reset a well-formed call", c->id);
        if (c->status != 0)
            fail("a well-formed call did not end OK", c->id);
        if (c->resp.len < 5 || !memmem(c->resp.data, c->resp.len, "kinglet", 7))
            fail("a well-formed call got no VersionResponse", c->id);
    }
}

/* Runs the client program in p; then delivers everything and waits for
 * every call to end. */
static void run_client(int fd, const uint8_t *p, size_t n)
{
    struct client cl;
    client_init(&cl, fd);
    size_t i = 0;
    int settings = 0;
    while (i < n) {
        uint8_t op = p[i++];
        uint8_t arg = i < n ? p[i++] : 0;
        switch (op % 6) {
        case 0: /* a call with a body of arg * arg * 4 bytes (up to 260 kB) */
            client_call(&cl, (size_t)arg * arg * 4, op & 0x10);
            break;
        case 1: /* the client resets one of its calls */
            if (cl.n) {
                struct call *c = &cl.calls[arg % cl.n];
                if (c->id > 0 && !c->closed && !c->reset) {
                    c->reset = true;
                    nghttp2_submit_rst_stream(cl.s, NGHTTP2_FLAG_NONE, c->id, NGHTTP2_CANCEL);
                }
            }
            break;
        case 2: { /* the client's window: small ones make the server wait */
            /* (a bounded number: a flood of SETTINGS is refused, rightly) */
            if (++settings > 64)
                break;
            nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                         (uint32_t)arg * 257 + 1};
            nghttp2_submit_settings(cl.s, NGHTTP2_FLAG_NONE, &iv, 1);
            break;
        }
        case 3: /* deliver a piece of the client's bytes */
            client_produce(&cl);
            client_deliver(&cl, (size_t)arg * 64 + 1);
            break;
        case 4:
            uv_run(loop, UV_RUN_NOWAIT);
            break;
        case 5:
            client_read(&cl);
            client_produce(&cl);
            break;
        }
    }
    for (int k = 0; k < 200000 && !client_done(&cl) && !cl.server_closed; k++) {
        client_produce(&cl);
        client_deliver(&cl, SIZE_MAX);
        uv_run(loop, UV_RUN_NOWAIT);
        client_read(&cl);
    }
    client_check(&cl);
    client_free(&cl);
}

static int adopt(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        abort();
    if (grpc_server_adopt(srv, sv[0]) < 0)
        abort();
    return sv[1];
}

static void close_and_settle(int fd)
{
    close(fd);
    for (int i = 0; i < 1000 && grpc_server_connections(srv); i++)
        uv_run(loop, UV_RUN_NOWAIT);
    uv_run(loop, UV_RUN_NOWAIT);
    size_t in, out;
    grpc_server_usage(srv, &in, &out);
    if (grpc_server_connections(srv) == 0 && (in || out))
        fail("request or response bytes still counted with no connection", 0);
}

static void run_raw(const uint8_t *data, size_t size)
{
    int fd = adopt();
    size_t off = 0;
    bool shut = false;
    uint8_t sink[65536];
    /* Feed, drain and run the loop until the server has closed its end. */
    for (int i = 0; i < 100000; i++) {
        if (off < size) {
            ssize_t n = write(fd, data + off, size - off);
            if (n > 0)
                off += (size_t)n;
        } else if (!shut) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
        while (read(fd, sink, sizeof(sink)) > 0)
            ;
        uv_run(loop, UV_RUN_NOWAIT);
        if (shut && grpc_server_connections(srv) == 0)
            break;
    }
    close_and_settle(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loop)
        setup();
    if (size == 0)
        return 0;
    if (data[0] & 1) {
        int fd = adopt();
        run_client(fd, data + 1, size - 1);
        close_and_settle(fd);
    } else {
        run_raw(data + 1, size - 1);
        /* Whatever came before, a good client is served. */
        static const uint8_t one_call[] = {0, 0};
        int fd = adopt();
        run_client(fd, one_call, sizeof(one_call));
        close_and_settle(fd);
    }
    return 0;
}
