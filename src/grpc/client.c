/* A blocking gRPC client over a unix socket, for command-line tools
 * (`kinglet image ... --socket`): one connection, one call (unary, or
 * server-streaming with each message handed over as it comes), then close.
 * Never used on the daemon's loop. */
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <nghttp2/nghttp2.h>

#include "grpc/grpc.h"

struct client {
    int fd;
    struct buf out; /* framed request */
    size_t out_off;
    struct buf in; /* framed response bytes not yet handed to on_msg */
    grpc_client_msg_fn on_msg;
    void *data;
    bool bad_frame;
    int status; /* -1 until grpc-status arrives */
    char *message;
    int http_status;
    bool closed;
    int32_t stream_id;
};

static ssize_t send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *u)
{
    struct client *c = u;
    ssize_t n;
    do
        n = send(c->fd, data, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
    return n;
}

static ssize_t read_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *u)
{
    struct client *c = u;
    size_t n = c->out.len - c->out_off;
    if (n > len)
        n = len;
    memcpy(buf, c->out.data + c->out_off, n);
    c->out_off += n;
    if (c->out_off == c->out.len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int data_cb(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *u)
{
    struct client *c = u;
    if (c->in.len + len > GRPC_MAX_RECV_MESSAGE + 5)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (buf_append(&c->in, data, len) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    /* each whole message to on_msg as it comes */
    for (;;) {
        uint32_t n;
        enum grpc_frame_result fr =
            grpc_frame_peek(c->in.data, c->in.len, GRPC_MAX_RECV_MESSAGE, &n);
        if (fr == GRPC_FRAME_INCOMPLETE)
            return 0;
        if (fr != GRPC_FRAME_OK) {
            c->bad_frame = true;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (c->on_msg(c->data, c->in.data + 5, n) < 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        buf_consume(&c->in, 5 + (size_t)n);
    }
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int header_cb(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *u)
{
    struct client *c = u;
    if (nl == 7 && memcmp(name, ":status", 7) == 0) {
        c->http_status = atoi((const char *)value);
    } else if (nl == 11 && memcmp(name, "grpc-status", 11) == 0) {
        c->status = atoi((const char *)value);
    } else if (nl == 12 && memcmp(name, "grpc-message", 12) == 0) {
        free(c->message);
        c->message = malloc(vl + 1);
        if (!c->message)
            return 0;
        size_t o = 0;
        for (size_t i = 0; i < vl; i++) {
            if (value[i] == '%' && i + 2 < vl && hexval((char)value[i + 1]) >= 0 &&
                hexval((char)value[i + 2]) >= 0) {
                c->message[o++] =
                    (char)(hexval((char)value[i + 1]) * 16 + hexval((char)value[i + 2]));
                i += 2;
            } else {
                c->message[o++] = (char)value[i];
            }
        }
        c->message[o] = '\0';
    }
    return 0;
}

static int close_cb(nghttp2_session *s, int32_t id, uint32_t code, void *u)
{
    struct client *c = u;
    if (id == c->stream_id)
        c->closed = true;
    return 0;
}

/* The unary call's one message. */
struct unary {
    struct buf msg;
    size_t n;
};

static int unary_msg(void *data, const uint8_t *msg, size_t len)
{
    struct unary *u = data;
    u->n++;
    u->msg.len = 0;
    if (buf_reserve(&u->msg, len + 1) < 0)
        return -ENOMEM;
    if (len)
        memcpy(u->msg.data, msg, len);
    u->msg.len = len;
    return 0;
}

int grpc_client_call(const char *socket_path, const char *path, const void *req, size_t req_len,
                     uint64_t timeout_ms, uint8_t **ret_resp, size_t *ret_len, int *ret_status,
                     char **ret_message, struct err *err)
{
    struct unary u = {0};
    *ret_resp = NULL;
    *ret_len = 0;
    int r = grpc_client_stream(socket_path, path, req, req_len, timeout_ms, unary_msg, &u,
                               ret_status, ret_message, err);
    if (r == 0 && *ret_status == 0 && u.n != 1) {
        free(TAKE_PTR(*ret_message));
        r = err_set(err, EPROTO, "malformed gRPC response");
    }
    if (r < 0 || *ret_status != 0) {
        buf_free(&u.msg);
        return r;
    }
    *ret_len = u.msg.len;
    *ret_resp = u.msg.data ? u.msg.data : malloc(1);
    return *ret_resp ? 0 : err_set(err, ENOMEM, "gRPC response");
}

int grpc_client_stream(const char *socket_path, const char *path, const void *req, size_t req_len,
                       uint64_t timeout_ms, grpc_client_msg_fn on_msg, void *data, int *ret_status,
                       char **ret_message, struct err *err)
{
    struct client c = {.fd = -1, .status = -1, .on_msg = on_msg, .data = data};
    nghttp2_session *s = NULL;
    nghttp2_session_callbacks *cbs = NULL;
    int r = 0;
    *ret_message = NULL;

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof(sa.sun_path))
        return err_set(err, ENAMETOOLONG, "socket `%s`", socket_path);
    strcpy(sa.sun_path, socket_path);
    c.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c.fd < 0 || connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        r = err_set(err, errno, "connect to the daemon at `%s`", socket_path);
        goto out;
    }
    uint8_t prefix[5] = {0, (uint8_t)(req_len >> 24), (uint8_t)(req_len >> 16),
                         (uint8_t)(req_len >> 8), (uint8_t)req_len};
    if (buf_append(&c.out, prefix, 5) < 0 || buf_append(&c.out, req, req_len) < 0) {
        r = err_set(err, ENOMEM, "gRPC request");
        goto out;
    }
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        r = err_set(err, ENOMEM, "gRPC client");
        goto out;
    }
    nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_cb);
    nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, close_cb);
    if (nghttp2_session_client_new(&s, cbs, &c) != 0) {
        r = err_set(err, ENOMEM, "gRPC client");
        goto out;
    }
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%lluS", (unsigned long long)(timeout_ms / 1000 + 1));
#define HDR(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        HDR(":method", "POST"),
        HDR(":scheme", "http"),
        HDR(":authority", "localhost"),
        HDR(":path", path),
        HDR("content-type", "application/grpc"),
        HDR("te", "trailers"),
        HDR("grpc-timeout", timeout),
    };
#undef HDR
    nghttp2_data_provider dp = {.read_callback = read_cb};
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
    c.stream_id = nghttp2_submit_request(s, NULL, hdrs, ARRAY_SIZE(hdrs), &dp, NULL);
    if (c.stream_id < 0) {
        r = err_set(err, EIO, "gRPC request: %s", nghttp2_strerror(c.stream_id));
        goto out;
    }
    uint64_t deadline = now_mono_ns() + timeout_ms * 1000000ull;
    while (!c.closed) {
        if (nghttp2_session_send(s) != 0) {
            r = err_set(err, EIO, "send to the daemon");
            goto out;
        }
        uint64_t now = now_mono_ns();
        if (now >= deadline) {
            r = err_set(err, ETIMEDOUT, "no answer from the daemon");
            goto out;
        }
        struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        uint8_t buf[65536];
        ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = err_set(err, n < 0 ? errno : ECONNRESET, "the daemon closed the connection");
            goto out;
        }
        if (nghttp2_session_mem_recv(s, buf, (size_t)n) < 0) {
            r = err_set(err, EPROTO,
                        c.bad_frame ? "malformed gRPC response" : "bad HTTP/2 from the daemon");
            goto out;
        }
    }
    if (c.status < 0) {
        r = err_set(err, EPROTO, "no grpc-status from the daemon (HTTP %d)", c.http_status);
        goto out;
    }
    if (c.in.len) {
        r = err_set(err, EPROTO, "malformed gRPC response");
        goto out;
    }
    *ret_status = c.status;
    *ret_message = TAKE_PTR(c.message);
out:
    if (s)
        nghttp2_session_del(s);
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    if (c.fd >= 0)
        close(c.fd);
    buf_free(&c.out);
    buf_free(&c.in);
    free(c.message);
    return r;
}
