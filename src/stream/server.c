/* stream/server: the listener, the tokens, the HTTP/1.1 upgrade and the
 * two framings (SPDY/3.1, WebSocket) of a connection, on the loop. What a
 * session does with its channels is session.c's.
 *
 * A connection's life: CONN_HTTP reads one request head (HTTP_HEAD_MAX),
 * consumes its token (single use, so a replayed URL gets 404), negotiates
 * the subprotocol and answers 101; then CONN_SPDY or CONN_WS until either
 * side ends it. Every byte we send goes through write_raw into one queue
 * per connection behind at most one write in flight, and counts against
 * one budget: past STREAM_OUT_HIGH the session's sources and the reading
 * of the client stop, below STREAM_OUT_LOW they resume, and a connection
 * that stays over it with no byte taken for STREAM_STALL_MS is reset.
 * Connections without a token have a budget of their own
 * (STREAM_UNAUTH_MAX), the one whose TLS handshake went least far evicted
 * first, the oldest of those. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "stream/internal.h"

#define TOKENS_MAX 4096

struct token {
    struct token *next;
    char id[65];
    uint64_t expires_ms;
    struct stream_request *req;
};

struct stream_server {
    uv_loop_t *loop;
    struct tls_ctx *tls; /* NULL: plain HTTP */
    uv_tcp_t tcp;
    uv_timer_t sweep;
    char host[64];
    int port;
    struct token *tokens;
    size_t n_tokens;
    struct conn *conns; /* newest first, until their handles are closed */
    size_t n_active;    /* not closed yet: against STREAM_SESSIONS_MAX */
    size_t n_unauth;    /* of those, without a token: STREAM_UNAUTH_MAX */
    bool closing;
    int handles;
};

void stream_request_free(struct stream_request *r)
{
    if (!r)
        return;
    for (char **a = r->argv; a && *a; a++)
        free(*a);
    free(r->argv);
    if (r->free_data)
        r->free_data(r->data);
    free(r->socket_dir);
    free(r->netns);
    free(r->ports);
    free(r);
}

uv_loop_t *conn_loop(struct conn *c) { return c->srv->loop; }

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b);

/* The client is read unless a reason in c->read_stop says otherwise. */
static void read_stop_set(struct conn *c, unsigned bit, bool on)
{
    unsigned was = c->read_stop;
    c->read_stop = on ? was | bit : was & ~bit;
    if (c->state == CONN_DONE || c->closing || !was == !c->read_stop)
        return;
    if (c->read_stop)
        uv_read_stop((uv_stream_t *)&c->tcp);
    else
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

void conn_read_pause(struct conn *c, bool pause) { read_stop_set(c, READ_STOP_IN, pause); }

/* ---- writing ---- */

static void conn_maybe_free(struct conn *c);
static void conn_abort(struct conn *c);
static void conn_drop(struct conn *c);
static void on_stall(uv_timer_t *t);

/* The bytes of ours the client's TCP has acknowledged, ever: handed to
 * libuv, less what libuv still holds, less what the kernel holds unsent or
 * unacknowledged (SIOCOUTQ). A client that reads, however slowly, moves it;
 * what libuv alone sees moves only when a third of a (megabytes) send
 * buffer is free. */
static uint64_t client_took(struct conn *c)
{
    int fd, outq = 0;
    uint64_t n = c->out_handed - uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, SIOCOUTQ, &outq) == 0 && outq > 0)
        n -= (uint64_t)outq;
    return n;
}

/* Over the budget, or back under its low mark: the session's sources and
 * the reading of the client stop or resume together, and the stall watch
 * starts or stops. */
static void budget_set(struct conn *c, bool over)
{
    if (c->paused == over)
        return;
    c->paused = over;
    if (c->sess)
        sess_pause(c, over);
    read_stop_set(c, READ_STOP_OUT, over);
    if (!c->stall_on)
        return;
    if (over) {
        c->stall_mark = client_took(c);
        c->stall_since = uv_now(c->srv->loop);
        uv_timer_start(&c->stall, on_stall, STREAM_STALL_MS / 4, STREAM_STALL_MS / 4);
    } else {
        uv_timer_stop(&c->stall);
    }
}

/* Over the budget: reset once the client has acknowledged no byte of ours
 * for STREAM_STALL_MS (a client that reads slowly is not one that never
 * does). */
static void on_stall(uv_timer_t *t)
{
    struct conn *c = t->data;
    uint64_t mark = client_took(c);
    uint64_t now = uv_now(c->srv->loop);
    if (mark != c->stall_mark) {
        c->stall_mark = mark;
        c->stall_since = now;
    } else if (now - c->stall_since >= STREAM_STALL_MS && c->state != CONN_DONE) {
        log_debug("streaming: a client took nothing of %zu bytes for %d s: closed", c->out_pending,
                  STREAM_STALL_MS / 1000);
        conn_drop(c);
    }
}

static void write_next(struct conn *c);

static void on_written(uv_write_t *w, int status)
{
    struct conn *c = w->data;
    c->out_pending -= c->outw.len;
    buf_free(&c->outw); /* a drained connection holds no buffer */
    if (c->state == CONN_DONE)
        return; /* cancelled by the close */
    if (status < 0) {
        conn_abort(c);
        return;
    }
    write_next(c);
    if (c->paused && c->out_pending < STREAM_OUT_LOW)
        budget_set(c, false);
    if (c->closing && c->out_pending == 0)
        conn_maybe_free(c);
}

/* The queue becomes the write in flight. */
static void write_next(struct conn *c)
{
    if (c->outw.len || !c->outq.len)
        return;
    c->outw = c->outq;
    c->outq = (struct buf){0};
    uv_buf_t b = uv_buf_init((char *)c->outw.data, (unsigned)c->outw.len);
    c->w.data = c;
    c->out_handed += c->outw.len;
    if (uv_write(&c->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
        c->out_pending -= c->outw.len;
        buf_free(&c->outw);
        conn_abort(c);
    }
}

static int sock_write(struct conn *c, const void *data, size_t len)
{
    if (c->state == CONN_DONE || c->aborted || !len)
        return 0;
    if (!c->out_pending) {
        /* nothing waits: straight to the kernel, no copy */
        int n =
            uv_try_write((uv_stream_t *)&c->tcp, &(uv_buf_t){.base = (char *)data, .len = len}, 1);
        if (n > 0) {
            c->out_handed += (size_t)n;
            data = (const char *)data + n;
            len -= (size_t)n;
            if (!len)
                return 0;
        }
    }
    if (buf_append(&c->outq, data, len) < 0)
        return -ENOMEM;
    c->out_pending += len;
    write_next(c);
    if (c->out_pending > STREAM_OUT_HIGH)
        budget_set(c, true);
    return 0;
}

/* Everything we send: encrypted first on a TLS connection. */
static int write_raw(struct conn *c, const void *data, size_t len)
{
    if (!c->tls)
        return sock_write(c, data, len);
    if (c->state == CONN_DONE || !len)
        return 0;
    struct buf out = {0};
    int r = tls_conn_write(c->tls, data, len, &out);
    if (r == 0)
        r = sock_write(c, out.data, out.len);
    buf_free(&out);
    return r;
}

static int write_buf(struct conn *c, struct buf *b)
{
    int r = write_raw(c, b->data, b->len);
    b->len = 0;
    return r;
}

static void respond(struct conn *c, const char *status, const char *msg)
{
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, strlen(msg), msg);
    write_raw(c, text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
    conn_finish(c);
}

int conn_send(struct conn *c, int ch, const void *data, size_t len)
{
    if (ch < 0 || ch >= STREAM_CHANNELS || c->state == CONN_DONE || c->closing)
        return 0;
    struct chan *k = &c->ch[ch];
    if (k->out_closed)
        return 0;
    if (c->state == CONN_SPDY) {
        if (!k->spdy_id)
            return 0;
        struct buf b = {0};
        int r = 0;
        for (size_t off = 0; r == 0 && off < len; off += 65536) {
            size_t n = len - off < 65536 ? len - off : 65536;
            r = spdy_data(&b, k->spdy_id, (const uint8_t *)data + off, n, false);
            if (r == 0)
                r = write_buf(c, &b);
        }
        buf_free(&b);
        return r;
    }
    if (c->state != CONN_WS)
        return 0;
    if (c->ws.close_sent)
        return 0;
    /* a message: the channel (a byte, or a digit in base64), the data */
    struct buf f = {0};
    int r;
    if (c->base64) {
        char *enc = b64_encode(data, len);
        char digit = (char)('0' + ch);
        r = enc ? ws_message(&f, WS_TEXT, &digit, 1, enc, strlen(enc)) : -ENOMEM;
        free(enc);
    } else {
        uint8_t b = (uint8_t)ch;
        r = ws_message(&f, WS_BINARY, &b, 1, data, len);
    }
    if (r == 0)
        r = write_buf(c, &f);
    buf_free(&f);
    return r;
}

void conn_close_ch(struct conn *c, int ch)
{
    if (ch < 0 || ch >= STREAM_CHANNELS || c->ch[ch].out_closed)
        return;
    c->ch[ch].out_closed = true;
    if (c->state == CONN_SPDY && c->ch[ch].spdy_id && !c->closing) {
        struct buf b = {0};
        if (spdy_data(&b, c->ch[ch].spdy_id, NULL, 0, true) == 0)
            write_buf(c, &b);
        buf_free(&b);
    }
}

/* ---- closing ---- */

static void server_maybe_free(struct stream_server *s);
static void on_conn_timeout(uv_timer_t *t);

void conn_unref(struct conn *c)
{
    if (--c->handles > 0)
        return;
    struct stream_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    buf_free(&c->in);
    buf_free(&c->outq);
    buf_free(&c->outw);
    if (c->spdy_init)
        spdy_free(&c->spdy);
    if (c->ws_init)
        ws_free(&c->ws);
    tls_conn_free(c->tls);
    stream_request_free(c->req);
    free(c);
    server_maybe_free(s);
}

static void on_conn_closed(uv_handle_t *h) { conn_unref(h->data); }

/* Closes the handles once nothing is queued; the session is told first. */
static void conn_maybe_free(struct conn *c)
{
    if (c->state == CONN_DONE)
        return;
    if (c->closing && c->out_pending > 0 && !c->aborted)
        return;
    if (!c->authed)
        c->srv->n_unauth--;
    c->srv->n_active--;
    c->state = CONN_DONE;
    if (c->sess)
        sess_end(c);
    if (c->timer_on) {
        c->timer_on = false;
        uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    }
    if (c->stall_on) {
        c->stall_on = false;
        uv_close((uv_handle_t *)&c->stall, on_conn_closed);
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

void conn_finish(struct conn *c)
{
    if (c->state == CONN_DONE)
        return;
    if (c->state == CONN_WS && !c->closing) {
        /* our close frame, unless we sent one already; after the codec's
         * answers when a message it delivers ends the session */
        struct buf b = {0};
        if (c->ws_out)
            write_buf(c, c->ws_out);
        if (ws_close(&c->ws, &b, WS_CLOSE_NORMAL) == 0)
            write_buf(c, &b);
        buf_free(&b);
    }
    c->closing = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    /* what is queued has STREAM_HEAD_MS to go out */
    if (c->timer_on && c->out_pending)
        uv_timer_start(&c->timer, on_conn_timeout, STREAM_HEAD_MS, 0);
    conn_maybe_free(c);
}

/* The client went away: nothing more is written. */
static void conn_abort(struct conn *c)
{
    c->closing = true;
    c->aborted = true; /* queued writes fail with the close */
    conn_maybe_free(c);
}

/* We end a client that does not read (or sent no head in time): reset, so
 * that what the kernel still holds for it goes at once, not after minutes
 * of probing a closed window. */
static void conn_drop(struct conn *c)
{
    int fd;
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    if (c->state != CONN_DONE && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    conn_abort(c);
}

/* ---- SPDY ---- */

static const char *hget(const struct spdy_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(h[i].name, name))
            return h[i].value;
    return NULL;
}

static int ch_of_spdy(struct conn *c, uint32_t id)
{
    for (int i = 0; i < STREAM_CHANNELS; i++)
        if (c->ch[i].spdy_id == id)
            return i;
    return -1;
}

static bool exec_streams_ready(struct conn *c)
{
    const struct stream_request *q = c->req;
    if (!c->ch[CH_ERROR].spdy_id)
        return false;
    if (q->in && !c->ch[CH_STDIN].spdy_id)
        return false;
    if (q->out && !c->ch[CH_STDOUT].spdy_id)
        return false;
    if (q->err && !q->tty && !c->ch[CH_STDERR].spdy_id)
        return false;
    if (q->tty && c->version >= 3 && !c->ch[CH_RESIZE].spdy_id)
        return false;
    return true;
}

static void start_session(struct conn *c)
{
    if (c->timer_on)
        uv_timer_stop(&c->timer);
    if (sess_start(c) < 0)
        conn_finish(c);
}

static int pf_stream(struct conn *c, uint32_t id, const char *type, const struct spdy_header *h,
                     size_t n)
{
    const char *port = hget(h, n, "port"), *rid = hget(h, n, "requestid");
    char *end;
    long p = port ? strtol(port, &end, 10) : 0;
    if (!port || *end || p < 1 || p > 65535)
        return -EPROTO;
    if (!rid)
        rid = "";
    size_t k = 0;
    while (k < c->n_pf && strcmp(c->pf_slots[k].request_id, rid))
        k++;
    if (k == c->n_pf) {
        if (c->n_pf >= STREAM_PF_STREAMS_MAX)
            return -E2BIG;
        snprintf(c->pf_slots[k].request_id, sizeof(c->pf_slots[k].request_id), "%s", rid);
        c->pf_slots[k].port = (int32_t)p;
        c->n_pf++;
    }
    int ch = (int)(2 * k) + (strcasecmp(type, "error") == 0);
    if (c->ch[ch].spdy_id)
        return -EPROTO;
    c->ch[ch].spdy_id = id;
    if (c->ch[2 * k].spdy_id && c->ch[2 * k + 1].spdy_id) {
        if (!c->sess && sess_start(c) < 0)
            return -EIO;
        sess_pf_open(c, k);
    }
    return 0;
}

static int on_syn_stream(void *ud, uint32_t id, uint8_t flags, const struct spdy_header *h,
                         size_t n)
{
    struct conn *c = ud;
    struct buf b = {0};
    const char *type = hget(h, n, "streamtype");
    int r = -EPROTO;
    if (type) {
        if (c->pf) {
            r = strcasecmp(type, "data") && strcasecmp(type, "error")
                    ? -EPROTO
                    : pf_stream(c, id, type, h, n);
        } else {
            static const char *const names[] = {"stdin", "stdout", "stderr", "error", "resize"};
            for (int i = 0; i < 5; i++)
                if (!strcasecmp(type, names[i]) && !c->ch[i].spdy_id) {
                    c->ch[i].spdy_id = id;
                    r = 0;
                }
        }
    }
    if (r < 0) {
        /* a stream we do not know, or a port-forward pair past
         * STREAM_PF_STREAMS_MAX: refused, the rest goes on */
        spdy_rst(&b, id, SPDY_RST_REFUSED);
        write_buf(c, &b);
        buf_free(&b);
        return r == -EIO ? r : 0;
    }
    spdy_syn_reply(&c->spdy, &b, id, NULL, 0, false);
    write_buf(c, &b);
    buf_free(&b);
    int ch = ch_of_spdy(c, id);
    if (flags & SPDY_FLAG_FIN)
        c->ch[ch].in_closed = true;
    if (!c->pf && !c->sess && exec_streams_ready(c))
        start_session(c);
    return 0;
}

static int on_data(void *ud, uint32_t id, const uint8_t *data, size_t len, bool fin)
{
    struct conn *c = ud;
    int ch = ch_of_spdy(c, id);
    if (ch < 0 || c->ch[ch].in_closed)
        return 0; /* a stream we refused or closed: dropped */
    if (fin)
        c->ch[ch].in_closed = true;
    if (c->sess)
        sess_input(c, ch, data, len, fin);
    return 0;
}

static int on_rst(void *ud, uint32_t id, uint32_t status)
{
    (void)status;
    struct conn *c = ud;
    int ch = ch_of_spdy(c, id);
    if (ch < 0)
        return 0;
    c->ch[ch].out_closed = true;
    if (!c->ch[ch].in_closed) {
        c->ch[ch].in_closed = true;
        if (c->sess)
            sess_input(c, ch, NULL, 0, true);
    }
    return 0;
}

static int on_ping(void *ud, uint32_t id)
{
    struct conn *c = ud;
    struct buf b = {0};
    spdy_ping(&b, id);
    write_buf(c, &b);
    buf_free(&b);
    return 0;
}

static int on_goaway(void *ud)
{
    conn_finish(ud);
    return 0;
}

static const struct spdy_callbacks spdy_cb = {
    .on_syn_stream = on_syn_stream,
    .on_data = on_data,
    .on_rst = on_rst,
    .on_ping = on_ping,
    .on_goaway = on_goaway,
};

/* ---- WebSocket ---- */

static int ws_on_message(void *ud, uint8_t op, const uint8_t *m, size_t len)
{
    (void)op;
    struct conn *c = ud;
    if (!len || !c->sess)
        return 0;
    int ch;
    uint8_t *dec = NULL;
    size_t dlen = 0;
    if (c->base64) {
        ch = m[0] - '0';
        char *text = strndup((const char *)m + 1, len - 1);
        if (!text || b64_decode(text, &dec, &dlen) < 0) {
            free(text);
            return 0;
        }
        free(text);
        m = dec;
        len = dlen;
    } else {
        ch = m[0];
        m++;
        len--;
    }
    if (ch == 255 && !c->pf && c->version >= 5 && len >= 1) {
        /* v5: the client closes one of its channels */
        int which = m[0];
        if (which >= 0 && which < STREAM_CHANNELS && !c->ch[which].in_closed) {
            c->ch[which].in_closed = true;
            sess_input(c, which, NULL, 0, true);
        }
    } else if (ch >= 0 && ch < STREAM_CHANNELS && !c->ch[ch].in_closed) {
        if (c->pf && ch % 2 == 0 && (size_t)ch / 2 < c->n_pf)
            sess_input(c, ch, m, len, false);
        else if (!c->pf)
            sess_input(c, ch, m, len, false);
    }
    free(dec);
    return 0;
}

static const struct ws_callbacks ws_cb = {.on_message = ws_on_message};

/* Bytes from the client: what the codec answers (pong, close) goes out;
 * once the client closed or broke the protocol, our close frame is
 * flushed and the connection closed (within STREAM_HEAD_MS even if the
 * client does not read: conn_finish). */
static void ws_input(struct conn *c, const uint8_t *data, size_t n)
{
    struct buf out = {0};
    c->ws_out = &out;
    int r = ws_feed(&c->ws, data, n, &out);
    c->ws_out = NULL;
    if (out.len)
        write_buf(c, &out);
    buf_free(&out);
    if (r != 0 && c->state != CONN_DONE)
        conn_finish(c);
}

/* ---- the upgrade ---- */

struct proto {
    const char *name;
    int version;
    bool base64;
};

static const struct proto spdy_protos[] = {
    {"v5.channel.k8s.io", 5, false}, {"v4.channel.k8s.io", 4, false},
    {"v3.channel.k8s.io", 3, false}, {"v2.channel.k8s.io", 2, false},
    {"channel.k8s.io", 1, false},
};
static const struct proto ws_protos[] = {
    {"v5.channel.k8s.io", 5, false},
    {"v4.channel.k8s.io", 4, false},
    {"base64.channel.k8s.io", 4, true},
    {"channel.k8s.io", 1, false},
};

/* The first protocol of ours (in our order of preference) the client
 * offers in any header named name; NULL; *offered says whether it offered
 * any. */
static const struct proto *negotiate(const struct http_request *r, const char *name,
                                     const struct proto *ours, size_t n, bool *offered)
{
    *offered = http_header(r, name) != NULL;
    for (size_t i = 0; i < n; i++)
        if (http_header_has(r, name, ours[i].name))
            return &ours[i];
    return NULL;
}

static struct token *token_take(struct stream_server *s, const char *id)
{
    uint64_t now = uv_now(s->loop);
    for (struct token **pp = &s->tokens; *pp; pp = &(*pp)->next) {
        struct token *t = *pp;
        if (strcmp(t->id, id) != 0)
            continue;
        *pp = t->next;
        s->n_tokens--;
        if (t->expires_ms < now) {
            stream_request_free(t->req);
            free(t);
            return NULL;
        }
        return t;
    }
    return NULL;
}

/* The request head must come within STREAM_HEAD_MS of the connection, and
 * after a SPDY upgrade the client's streams within STREAM_CREATION_MS (for
 * port forwarding: its first pair; a forward may then last for hours). */
static void on_conn_timeout(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (c->closing) {
        conn_drop(c); /* what we queued last was not read in time */
        return;
    }
    if (c->state == CONN_HTTP || (c->state == CONN_SPDY && !c->sess) ||
        (c->state == CONN_SPDY && c->pf && c->n_pf == 0))
        conn_finish(c);
}

static void upgrade(struct conn *c, const struct http_request *r, size_t used)
{
    static const char *const prefixes[] = {"/exec/", "/attach/", "/portforward/"};
    int kind = -1;
    const char *tok = NULL;
    for (int i = 0; i < 3; i++)
        if (!strncmp(r->path, prefixes[i], strlen(prefixes[i]))) {
            kind = i;
            tok = r->path + strlen(prefixes[i]);
        }
    struct token *t = tok ? token_take(c->srv, tok) : NULL;
    if (!t || (int)t->req->kind != kind) {
        if (t) {
            stream_request_free(t->req);
            free(t);
        }
        respond(c, "404 Not Found", "404 page not found\n");
        return;
    }
    c->req = t->req;
    free(t);
    c->authed = true;
    c->srv->n_unauth--;
    c->pf = c->req->kind == STREAM_PORTFORWARD;
    char head[1024];
    int n;
    bool offered;
    if (http_header_has(r, "Upgrade", "SPDY/3.1") && http_header_has(r, "Connection", "Upgrade")) {
        const char *chosen = "";
        if (c->pf) {
            if (http_header(r, "X-Stream-Protocol-Version") &&
                !http_header_has(r, "X-Stream-Protocol-Version", "portforward.k8s.io")) {
                respond(c, "403 Forbidden",
                        "unable to upgrade: unable to negotiate protocol: server supports "
                        "[portforward.k8s.io]\n");
                return;
            }
            chosen = "portforward.k8s.io";
        } else {
            const struct proto *p = negotiate(r, "X-Stream-Protocol-Version", spdy_protos,
                                              ARRAY_SIZE(spdy_protos), &offered);
            if (offered && !p) {
                respond(c, "403 Forbidden",
                        "unable to upgrade: unable to negotiate protocol: server supports "
                        "[v5.channel.k8s.io v4.channel.k8s.io v3.channel.k8s.io "
                        "v2.channel.k8s.io channel.k8s.io]\n");
                return;
            }
            c->version = p ? p->version : 1;
            chosen = p ? p->name : "";
        }
        if (spdy_init(&c->spdy, &spdy_cb, c) < 0) {
            respond(c, "500 Internal Server Error", "out of memory\n");
            return;
        }
        c->spdy_init = true;
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                     "Upgrade: SPDY/3.1\r\n%s%s%s\r\n",
                     *chosen ? "X-Stream-Protocol-Version: " : "", chosen, *chosen ? "\r\n" : "");
        write_raw(c, head, (size_t)n);
        c->state = CONN_SPDY;
        /* the client's streams must come in time */
        uv_timer_start(&c->timer, on_conn_timeout, STREAM_CREATION_MS, 0);
    } else if (http_header_has(r, "Upgrade", "websocket") &&
               http_header_has(r, "Connection", "Upgrade")) {
        const char *key = http_header(r, "Sec-WebSocket-Key");
        const char *ver = http_header(r, "Sec-WebSocket-Version");
        if (!key || strlen(key) != 24 || !ver || strcmp(ver, "13")) {
            respond(c, "400 Bad Request", "a WebSocket upgrade needs a key and version 13\n");
            return;
        }
        const char *chosen;
        if (c->pf) {
            if (!http_header_has(r, "Sec-WebSocket-Protocol", "portforward.k8s.io") &&
                http_header(r, "Sec-WebSocket-Protocol")) {
                respond(c, "400 Bad Request", "no supported WebSocket subprotocol\n");
                return;
            }
            chosen = "portforward.k8s.io";
        } else {
            const struct proto *p =
                negotiate(r, "Sec-WebSocket-Protocol", ws_protos, ARRAY_SIZE(ws_protos), &offered);
            if (!p) {
                respond(c, "400 Bad Request",
                        "no supported WebSocket subprotocol (v5.channel.k8s.io, "
                        "v4.channel.k8s.io, base64.channel.k8s.io, channel.k8s.io)\n");
                return;
            }
            c->version = p->version;
            c->base64 = p->base64;
            chosen = p->name;
        }
        if (c->pf) {
            /* the ports: the URL's ?ports=, else the request's */
            const char *q = strstr(r->query, "ports=");
            if (q && (q == r->query || q[-1] == '&')) {
                c->req->n_ports = 0;
                free(c->req->ports);
                c->req->ports = calloc(STREAM_PF_STREAMS_MAX, sizeof(int32_t));
                for (const char *p = q + 6;
                     c->req->ports && *p && *p != '&' && c->req->n_ports < STREAM_PF_STREAMS_MAX;) {
                    long v = strtol(p, (char **)&p, 10);
                    if (v < 1 || v > 65535)
                        break;
                    c->req->ports[c->req->n_ports++] = (int32_t)v;
                    if (*p == ',')
                        p++;
                }
            }
            if (!c->req->n_ports) {
                respond(c, "400 Bad Request", "port forwarding needs ports\n");
                return;
            }
        }
        char accept[29];
        ws_accept_key(key, accept);
        ws_init(&c->ws, &ws_cb, c);
        c->ws_init = true;
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                     "Sec-WebSocket-Protocol: %s\r\n\r\n",
                     accept, chosen);
        write_raw(c, head, (size_t)n);
        c->state = CONN_WS;
        uv_timer_stop(&c->timer);
        if (c->pf) {
            c->n_pf = c->req->n_ports;
            for (size_t k = 0; k < c->n_pf; k++)
                c->pf_slots[k].port = c->req->ports[k];
        }
        if (sess_start(c) < 0) {
            conn_finish(c);
            return;
        }
        for (size_t k = 0; c->pf && k < c->n_pf; k++) {
            /* each channel opens with its port, little-endian */
            uint8_t port[2] = {(uint8_t)c->pf_slots[k].port, (uint8_t)(c->pf_slots[k].port >> 8)};
            conn_send(c, (int)(2 * k), port, 2);
            conn_send(c, (int)(2 * k + 1), port, 2);
            sess_pf_open(c, k);
        }
    } else {
        respond(c, "400 Bad Request", "this URL needs an upgrade to SPDY/3.1 or websocket\n");
        return;
    }
    /* what came after the head belongs to the new protocol */
    if (c->in.len > used && c->state != CONN_DONE) {
        struct buf rest = c->in;
        c->in = (struct buf){0};
        if (c->state == CONN_SPDY && spdy_feed(&c->spdy, rest.data + used, rest.len - used) < 0)
            conn_abort(c);
        else if (c->state == CONN_WS)
            ws_input(c, rest.data + used, rest.len - used);
        buf_free(&rest);
    } else {
        buf_free(&c->in);
        c->in = (struct buf){0};
    }
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    static char scratch[65536];
    *b = uv_buf_init(scratch, sizeof(scratch));
}

/* Plaintext from the client. */
static void conn_input(struct conn *c, const char *data, size_t n)
{
    const uv_buf_t one = uv_buf_init((char *)data, (unsigned)n);
    const uv_buf_t *b = &one;
    if (c->state == CONN_DONE || c->closing)
        return;
    switch (c->state) {
    case CONN_HTTP: {
        if (buf_append(&c->in, b->base, n) < 0) {
            conn_abort(c);
            return;
        }
        static struct http_request req; /* the loop's only thread uses it */
        size_t used = 0;
        int r = http_request_parse((const char *)c->in.data, c->in.len, &req, &used);
        if (r == -EAGAIN)
            return;
        if (r < 0) {
            respond(c, r == -E2BIG ? "431 Request Header Fields Too Large" : "400 Bad Request",
                    r == -E2BIG ? "request head too large\n" : "malformed request\n");
            return;
        }
        upgrade(c, &req, used);
        return;
    }
    case CONN_SPDY:
        if (spdy_feed(&c->spdy, (const uint8_t *)b->base, n) < 0) {
            struct buf g = {0};
            spdy_goaway(&g, 0, SPDY_RST_PROTOCOL);
            write_buf(c, &g);
            buf_free(&g);
            conn_finish(c);
        }
        return;
    case CONN_WS:
        ws_input(c, (const uint8_t *)b->base, n);
        return;
    default:
        return;
    }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = st->data;
    if (n < 0) {
        conn_abort(c);
        return;
    }
    if (n == 0 || c->state == CONN_DONE)
        return;
    if (!c->tls) {
        conn_input(c, b->base, (size_t)n);
        return;
    }
    struct buf plain = {0}, out = {0};
    int r = tls_conn_feed(c->tls, (const uint8_t *)b->base, (size_t)n, &plain, &out);
    if (out.len)
        sock_write(c, out.data, out.len);
    if (plain.len)
        conn_input(c, (const char *)plain.data, plain.len);
    buf_free(&plain);
    buf_free(&out);
    if (r < 0)
        conn_finish(c);
}

/* Reads what a connection without a token has sent, now: a request head
 * already in the socket is served before the connection could be evicted.
 * Into on_alloc's buffer: this never runs inside a read callback. */
static void read_now(struct conn *c)
{
    uv_buf_t b;
    int fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0)
        return;
    on_alloc((uv_handle_t *)&c->tcp, 0, &b);
    while (c->state == CONN_HTTP && !c->closing) {
        ssize_t n = recv(fd, b.base, b.len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        on_read((uv_stream_t *)&c->tcp, n < 0 ? -errno : (n == 0 ? UV_EOF : n),
                &(uv_buf_t){.base = b.base, .len = n > 0 ? (size_t)n : 0});
    }
}

/* Room for a new connection: connections without a token have a budget of
 * their own (STREAM_UNAUTH_MAX), under the whole (STREAM_SESSIONS_MAX), and
 * when either is full one of them goes: the one whose TLS handshake went
 * least far, the oldest of those. A TLS client's request head comes only
 * after its handshake: oldest first alone let 64 connections sending one
 * byte each evict it meanwhile; now a flood must complete handshakes
 * (a signature of ours each) to pass it. A connection that presented a
 * valid token is never evicted for one that has not. Whether there is
 * room now. */
static bool make_room(struct stream_server *s)
{
    while (s->n_unauth >= STREAM_UNAUTH_MAX || s->n_active >= STREAM_SESSIONS_MAX) {
        struct conn *old = NULL;
        int least = INT_MAX;
        for (struct conn *c = s->conns; c; c = c->next) /* newest first */
            if (!c->authed && c->state != CONN_DONE) {
                int progress = c->tls ? tls_conn_progress(c->tls) : 0;
                if (progress <= least) {
                    least = progress;
                    old = c;
                }
            }
        if (!old)
            return false;
        read_now(old);
        if (!old->authed && old->state != CONN_DONE)
            conn_drop(old);
    }
    return true;
}

static void on_connection(uv_stream_t *l, int status)
{
    struct stream_server *s = l->data;
    if (status < 0)
        return;
    struct conn *c = calloc(1, sizeof(*c));
    if (!c || !make_room(s)) {
        /* accept and drop, so the backlog does not fill */
        uv_tcp_t *t = malloc(sizeof(*t));
        free(c);
        if (t && uv_tcp_init(s->loop, t) == 0 && uv_accept(l, (uv_stream_t *)t) == 0)
            uv_close((uv_handle_t *)t, (uv_close_cb)free);
        else
            free(t);
        return;
    }
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->handles = 1;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_active++;
    s->n_unauth++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        conn_abort(c);
        return;
    }
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->timer_on = true;
    c->handles++;
    uv_timer_init(s->loop, &c->stall);
    c->stall.data = c;
    c->stall_on = true;
    c->handles++;
    uv_timer_start(&c->timer, on_conn_timeout, STREAM_HEAD_MS, 0);
    if (s->tls && !(c->tls = tls_conn_new(s->tls))) {
        conn_abort(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    /* the kernel hands us a connection once its first bytes are in
     * (TCP_DEFER_ACCEPT): a request head in one segment authenticates it
     * now, before any later connection could evict it */
    read_now(c);
}

/* ---- the server ---- */

static void on_sweep(uv_timer_t *t)
{
    struct stream_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    for (struct token **pp = &s->tokens; *pp;) {
        struct token *k = *pp;
        if (k->expires_ms < now) {
            *pp = k->next;
            s->n_tokens--;
            stream_request_free(k->req);
            free(k);
        } else {
            pp = &k->next;
        }
    }
}

int stream_server_start(uv_loop_t *loop, const char *address, const char *tls_cert,
                        const char *tls_key, struct stream_server **ret, struct err *err)
{
    char host[64];
    const char *colon = strrchr(address, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || *end || port < 0 || port > 65535 || colon == address ||
        (size_t)(colon - address) >= sizeof(host))
        return err_set(err, EINVAL, "stream address `%.64s`: expected HOST:PORT", address);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct sockaddr_storage sa;
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&sa) != 0)
        return err_set(err, EINVAL, "stream address `%.64s`: not an IP address", address);
    struct stream_server *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(err, ENOMEM, "stream server");
    s->loop = loop;
    snprintf(s->host, sizeof(s->host), "%s", host);
    if ((tls_cert || tls_key) && (!tls_cert || !tls_key)) {
        free(s);
        return err_set(err, EINVAL, "streaming TLS needs both a certificate and a key");
    }
    if (tls_cert) {
        int r = tls_ctx_new(tls_cert, tls_key, &s->tls, err);
        if (r < 0) {
            free(s);
            return r;
        }
    }
    uv_tcp_init(loop, &s->tcp);
    s->tcp.data = s;
    s->handles = 1;
    int e = uv_tcp_bind(&s->tcp, (struct sockaddr *)&sa, 0);
    int fd, defer = STREAM_HEAD_MS / 1000;
    /* a connection that sends nothing waits in the kernel, not in a slot
     * of ours, for about as long as a request head may take */
    if (e == 0 && uv_fileno((uv_handle_t *)&s->tcp, &fd) == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
    if (e == 0)
        e = uv_listen((uv_stream_t *)&s->tcp, 128, on_connection);
    if (e < 0) {
        stream_server_close(s);
        return err_set(err, -e, "stream server: listen on `%.64s`", address);
    }
    int len = sizeof(sa);
    uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&sa, &len);
    s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    log_info("streaming server on %s%s%s:%d%s", strchr(s->host, ':') ? "[" : "", s->host,
             strchr(s->host, ':') ? "]" : "", s->port, s->tls ? " (TLS)" : "");
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    s->handles++;
    uv_timer_start(&s->sweep, on_sweep, 10000, 10000);
    uv_unref((uv_handle_t *)&s->sweep);
    *ret = s;
    return 0;
}

int stream_server_url(struct stream_server *s, struct stream_request *req, char **ret_url,
                      struct err *err)
{
    if (s->n_tokens >= TOKENS_MAX) {
        stream_request_free(req);
        return err_set(err, EAGAIN, "%d streaming URLs wait to be used already", TOKENS_MAX);
    }
    struct token *t = calloc(1, sizeof(*t));
    uint8_t raw[32];
    if (!t || getrandom(raw, sizeof(raw), 0) != sizeof(raw)) {
        free(t);
        stream_request_free(req);
        return err_set(err, t ? EIO : ENOMEM, "streaming token");
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(t->id + 2 * i, 3, "%02x", raw[i]);
    static const char *const kinds[] = {"exec", "attach", "portforward"};
    bool v6 = strchr(s->host, ':') != NULL;
    if (asprintf(ret_url, "%s://%s%s%s:%d/%s/%s", s->tls ? "https" : "http", v6 ? "[" : "", s->host,
                 v6 ? "]" : "", s->port, kinds[req->kind], t->id) < 0) {
        free(t);
        stream_request_free(req);
        return err_set(err, ENOMEM, "streaming URL");
    }
    t->req = req;
    t->expires_ms = uv_now(s->loop) + STREAM_TOKEN_TTL_MS;
    t->next = s->tokens;
    s->tokens = t;
    s->n_tokens++;
    return 0;
}

static void on_server_closed(uv_handle_t *h)
{
    struct stream_server *s = h->data;
    s->handles--;
    server_maybe_free(s);
}

static void server_maybe_free(struct stream_server *s)
{
    if (!s->closing || s->handles > 0 || s->conns)
        return;
    while (s->tokens) {
        struct token *t = s->tokens;
        s->tokens = t->next;
        stream_request_free(t->req);
        free(t);
    }
    tls_ctx_free(s->tls);
    free(s);
}

void stream_server_close(struct stream_server *s)
{
    if (!s || s->closing)
        return;
    s->closing = true;
    for (struct conn *c = s->conns; c; c = c->next)
        conn_abort(c);
    uv_close((uv_handle_t *)&s->tcp, on_server_closed);
    if (s->handles > 1)
        uv_close((uv_handle_t *)&s->sweep, on_server_closed);
}
