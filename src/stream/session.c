/* stream/session: what an upgraded connection's channels are joined to.
 *
 *   exec        the command, started in the thread pool by the request's
 *               exec function with pipes (or a terminal whose master comes
 *               back over a socket); a child of ours, seen through a pidfd
 *               from before its execve (the worker never waits for that: a
 *               process of the container may put it off for good), reaped
 *               on the loop, then asked whether it ran (exec_result).
 *   attach      the container's monitor, through its control socket
 *               (packets: OUT/ERR from it, IN/CLOSE/RESIZE to it).
 *   portforward a TCP connection to 127.0.0.1:PORT made from a socket
 *               created inside the pod's network namespace (setns in a
 *               pool thread, then back), one per client stream pair.
 *
 * Output backpressure: sess_pause stops reading the sources while the
 * client lags (the exec's pipes fill and the command blocks; the monitor
 * pauses the container's output; TCP windows close). Input backpressure:
 * the client is not read while a destination holds more than
 * STREAM_OUT_HIGH unwritten. The end: a vanished client gets the command
 * SIGKILLed, as kubelet expects; every handle is closed and the session
 * frees itself, then lets the connection go. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/pidfd.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "monitor/monitor.h"
#include "stream/internal.h"

#define DRAIN_MS      2000
#define REAP_RETRY_MS 100 /* a command held by a tracer */

/* What waits to be written to a destination (the command's stdin or
 * terminal, the monitor, a pod's connection), in bytes of our memory (a
 * queued write's request counts). The session's destinations share one
 * budget: while they hold more than STREAM_OUT_HIGH together the client is
 * not read (128 port-forward connections of 256 KiB each would
 * be 32 MiB). */
struct dstq {
    size_t pending;
};

struct pipe_h {
    uv_pipe_t p;
    bool open, eof;
    struct dstq q;
};

struct pf_conn {
    struct sess *s;
    size_t k;
    uv_work_t work;
    int fd, r;
    uv_tcp_t tcp; /* .data: the session */
    uv_connect_t cr;
    bool open, connected, eof;
    struct dstq q;
    struct buf early; /* what the client sent before the connection was up */
    bool early_fin;
};

#define PF_OF(st) ((struct pf_conn *)((char *)(st)-offsetof(struct pf_conn, tcp)))

static void on_pf_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

struct sess {
    struct conn *c;
    int refs; /* handles open and work queued; the session goes at 0 */
    bool ended, finished;
    /* exec */
    uv_work_t work;
    struct err err;
    int r;
    int cmd_fd, start_fd; /* the command's pidfd, its start (exec_result) */
    int fd_in, fd_out, fd_err, fd_master, fd_mon;
    struct pipe_h in, out, errp, master, mon;
    uv_poll_t exit_poll; /* with the timer: the exit watch */
    bool poll_open, exited;
    int status;
    int cannot_run; /* 127, 126: the command could not run (why in err) */
    struct buf resize;
    /* before the command or the monitor is there: the client's input */
    bool ready;
    struct buf early;
    bool early_fin;
    struct dstq early_q; /* the early input */
    size_t in_pending;   /* what every destination holds */
    bool in_full;        /* past STREAM_OUT_HIGH: the client is not read */
    uv_timer_t drain;    /* the reap asked again, then the output's drain */
    bool drain_open;
    struct pf_conn *pf[STREAM_PF_STREAMS_MAX];
};

static void unref(struct sess *s)
{
    if (--s->refs > 0)
        return;
    struct conn *c = s->c;
    if (s->cmd_fd >= 0)
        close(s->cmd_fd);
    if (s->start_fd >= 0)
        close(s->start_fd);
    buf_free(&s->resize);
    buf_free(&s->early);
    for (size_t k = 0; k < STREAM_PF_STREAMS_MAX; k++)
        if (s->pf[k]) {
            buf_free(&s->pf[k]->early);
            free(s->pf[k]);
        }
    free(s);
    c->sess = NULL;
    conn_unref(c);
}

static void on_handle_closed(uv_handle_t *h) { unref(h->data); }

static void close_pipe(struct sess *s, struct pipe_h *p)
{
    if (!p->open)
        return;
    p->open = false;
    uv_close((uv_handle_t *)&p->p, on_handle_closed);
}

/* Closes every handle; with keep_exit, not the exit watch (to reap the
 * command). */
static void close_handles(struct sess *s, bool keep_exit)
{
    close_pipe(s, &s->in);
    close_pipe(s, &s->out);
    close_pipe(s, &s->errp);
    close_pipe(s, &s->master);
    close_pipe(s, &s->mon);
    if (!keep_exit && s->poll_open) {
        s->poll_open = false;
        uv_close((uv_handle_t *)&s->exit_poll, on_handle_closed);
    }
    if (!keep_exit && s->drain_open) {
        s->drain_open = false;
        uv_close((uv_handle_t *)&s->drain, on_handle_closed);
    }
    for (size_t k = 0; k < STREAM_PF_STREAMS_MAX; k++) {
        struct pf_conn *p = s->pf[k];
        if (p && p->open) {
            p->open = false;
            uv_close((uv_handle_t *)&p->tcp, on_handle_closed);
        }
    }
}

static void close_all(struct sess *s) { close_handles(s, false); }

/* ---- the end: the status on the error channel ---- */

static void write_status(struct sess *s, int code, const char *why)
{
    struct conn *c = s->c;
    char text[1024];
    if (c->version >= 4) {
        if (!why && code == 0) {
            snprintf(text, sizeof(text), "{\"metadata\":{},\"status\":\"Success\"}");
        } else if (!why) {
            snprintf(text, sizeof(text),
                     "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated "
                     "with non-zero exit code: exit code %d\",\"reason\":\"NonZeroExitCode\","
                     "\"details\":{\"causes\":[{\"reason\":\"ExitCode\",\"message\":\"%d\"}]}}",
                     code, code);
        } else {
            json_t *j = json_pack("{s:{}, s:s, s:s, s:s}", "metadata", "status", "Failure",
                                  "message", why, "reason", "InternalError");
            char *d = j ? json_dumps(j, JSON_COMPACT) : NULL;
            snprintf(text, sizeof(text), "%s", d ? d : "{\"status\":\"Failure\"}");
            free(d);
            json_decref(j);
        }
        conn_send(c, CH_ERROR, text, strlen(text));
    } else if (why || code != 0) {
        if (why)
            snprintf(text, sizeof(text), "%s", why);
        else
            snprintf(text, sizeof(text), "command terminated with non-zero exit code: exit code %d",
                     code);
        conn_send(c, CH_ERROR, text, strlen(text));
    }
}

static void finish(struct sess *s, int code, const char *why)
{
    if (s->finished)
        return;
    s->finished = true;
    struct conn *c = s->c;
    if (!s->ended) {
        conn_close_ch(c, CH_STDOUT);
        conn_close_ch(c, CH_STDERR);
        write_status(s, code, why);
        conn_close_ch(c, CH_ERROR);
        conn_finish(c);
    }
}

static void maybe_done(struct sess *s)
{
    if (s->exited && (!s->out.open || s->out.eof) && (!s->errp.open || s->errp.eof) &&
        (!s->master.open || s->master.eof))
        finish(s, s->status, NULL);
}

/* ---- reading the sources ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    static char scratch[65536];
    *b = uv_buf_init(scratch, sizeof(scratch));
}

static void on_src_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct pipe_h *p = (struct pipe_h *)st;
    struct sess *s = st->data;
    if (n > 0) {
        if (p == &s->mon) {
            /* a packet: its type, then the bytes */
            uint8_t type = (uint8_t)b->base[0];
            if (type == MONITOR_ATT_OUT || type == MONITOR_ATT_ERR)
                conn_send(s->c, type == MONITOR_ATT_ERR && !s->c->req->tty ? CH_STDERR : CH_STDOUT,
                          b->base + 1, (size_t)n - 1);
        } else {
            conn_send(s->c, p == &s->errp ? CH_STDERR : CH_STDOUT, b->base, (size_t)n);
        }
        return;
    }
    if (n == 0)
        return;
    /* EOF, or EIO on a terminal whose last holder closed it */
    p->eof = true;
    uv_read_stop(st);
    if (p == &s->mon) {
        /* the monitor closed: the container has exited, or the client's
         * stdin ended and the container keeps its own (MONITOR_ATT_CLOSE) */
        finish(s, 0, NULL);
        return;
    }
    maybe_done(s);
}

static int open_pipe(struct sess *s, struct pipe_h *p, int fd, bool read)
{
    if (fd < 0)
        return 0;
    if (uv_pipe_init(conn_loop(s->c), &p->p, 0) < 0) {
        close(fd);
        return -ENOMEM;
    }
    p->p.data = s;
    s->refs++;
    p->open = true;
    if (uv_pipe_open(&p->p, fd) < 0) {
        close(fd);
        p->eof = true;
        return -EIO;
    }
    if (read)
        uv_read_start((uv_stream_t *)&p->p, on_alloc, on_src_read);
    return 0;
}

void sess_pause(struct conn *c, bool pause)
{
    struct sess *s = c->sess;
    if (!s || s->ended)
        return;
    struct pipe_h *src[] = {&s->out, &s->errp, &s->master, &s->mon};
    for (size_t i = 0; i < ARRAY_SIZE(src); i++) {
        if (!src[i]->open || src[i]->eof)
            continue;
        if (pause)
            uv_read_stop((uv_stream_t *)&src[i]->p);
        else
            uv_read_start((uv_stream_t *)&src[i]->p, on_alloc, on_src_read);
    }
    for (size_t k = 0; k < STREAM_PF_STREAMS_MAX; k++) {
        struct pf_conn *p = s->pf[k];
        if (!p || !p->connected || p->eof || !p->open)
            continue;
        if (pause)
            uv_read_stop((uv_stream_t *)&p->tcp);
        else
            uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_pf_read);
    }
}

/* ---- writing to the destinations ---- */

/* Input backpressure: the client is read while the destinations hold no
 * more than STREAM_OUT_HIGH together. */
static void dstq_update(struct sess *s, struct dstq *q, size_t pending)
{
    s->in_pending = s->in_pending - q->pending + pending;
    q->pending = pending;
    bool full = s->in_pending > STREAM_OUT_HIGH;
    if (full == s->in_full)
        return;
    s->in_full = full;
    if (!s->ended)
        conn_read_pause(s->c, full);
}

struct wr {
    uv_write_t w;
    struct sess *s;
    struct dstq *q;
    size_t len;
    char data[];
};

static void on_dst_written(uv_write_t *w, int status)
{
    (void)status;
    struct wr *r = (struct wr *)w;
    struct sess *s = r->s;
    dstq_update(s, r->q, r->q->pending - (sizeof(*r) + r->len));
    free(r);
    unref(s);
}

/* Queues a copy of data on stream dst; prefix (if any) is one byte
 * written first in the same write (a monitor packet's type). */
static void dst_write(struct sess *s, uv_stream_t *dst, struct dstq *q, int prefix,
                      const void *data, size_t len)
{
    size_t extra = prefix >= 0;
    struct wr *r = malloc(sizeof(*r) + len + extra);
    if (!r)
        return;
    r->s = s;
    r->q = q;
    r->len = len + extra;
    if (extra)
        r->data[0] = (char)prefix;
    memcpy(r->data + extra, data, len);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)r->len);
    if (uv_write(&r->w, dst, &b, 1, on_dst_written) < 0) {
        free(r);
        return;
    }
    s->refs++;
    /* the request counts with its bytes: a client's one-byte frames would
     * otherwise hold some 240 bytes each against one of the budget */
    dstq_update(s, q, q->pending + sizeof(*r) + r->len);
}

/* {"Width":W,"Height":H} objects, one after another. */
static void resize(struct sess *s, const uint8_t *data, size_t len)
{
    if (s->resize.len + len > 4096) {
        s->resize.len = 0;
        return;
    }
    if (len)
        buf_append(&s->resize, data, len);
    if (!s->ready)
        return; /* applied once the terminal is there */
    for (;;) {
        json_error_t je;
        json_t *o =
            json_loadb((const char *)s->resize.data, s->resize.len, JSON_DISABLE_EOF_CHECK, &je);
        if (!o)
            return;
        size_t used = je.position;
        json_int_t w = json_integer_value(json_object_get(o, "Width"));
        json_int_t h = json_integer_value(json_object_get(o, "Height"));
        json_decref(o);
        memmove(s->resize.data, s->resize.data + used, s->resize.len - used);
        s->resize.len -= used;
        if (w <= 0 || h <= 0 || w > 65535 || h > 65535)
            continue;
        if (s->master.open) {
            struct winsize ws = {.ws_row = (unsigned short)h, .ws_col = (unsigned short)w};
            int fd = -1;
            if (uv_fileno((uv_handle_t *)&s->master.p, &fd) == 0)
                ioctl(fd, TIOCSWINSZ, &ws);
        } else if (s->mon.open) {
            char msg[32];
            int n = snprintf(msg, sizeof(msg), "%d %d", (int)w, (int)h);
            dst_write(s, (uv_stream_t *)&s->mon.p, &s->mon.q, MONITOR_ATT_RESIZE, msg, (size_t)n);
        }
    }
}

static void on_shut_free(uv_shutdown_t *sh, int status)
{
    (void)status;
    free(sh);
}

static void on_in_shut(uv_shutdown_t *sh, int status)
{
    (void)status;
    struct sess *s = sh->data;
    free(sh);
    close_pipe(s, &s->in);
    unref(s);
}

void sess_input(struct conn *c, int ch, const uint8_t *data, size_t len, bool fin)
{
    struct sess *s = c->sess;
    if (!s || s->ended)
        return;
    if (c->pf) {
        struct pf_conn *p = ch % 2 == 0 ? s->pf[ch / 2] : NULL;
        if (!p || p->eof)
            return;
        if (!p->connected) {
            /* kept until the connection is up; the client waits meanwhile */
            if (len && buf_append(&p->early, data, len) < 0)
                return;
            p->early_fin |= fin;
            dstq_update(s, &p->q, p->early.len);
            return;
        }
        if (!p->open)
            return;
        if (len)
            dst_write(s, (uv_stream_t *)&p->tcp, &p->q, -1, data, len);
        if (fin) {
            uv_shutdown_t *sh = calloc(1, sizeof(*sh));
            if (sh && uv_shutdown(sh, (uv_stream_t *)&p->tcp, on_shut_free) < 0)
                free(sh);
        }
        return;
    }
    if (ch == CH_RESIZE) {
        resize(s, data, len);
        return;
    }
    if (ch != CH_STDIN)
        return;
    if (!s->ready) {
        if (len && buf_append(&s->early, data, len) < 0)
            return;
        s->early_fin |= fin;
        dstq_update(s, &s->early_q, s->early.len);
        return;
    }
    if (s->mon.open) {
        for (size_t off = 0; off < len; off += 32768)
            dst_write(s, (uv_stream_t *)&s->mon.p, &s->mon.q, MONITOR_ATT_IN, data + off,
                      len - off < 32768 ? len - off : 32768);
        if (fin)
            dst_write(s, (uv_stream_t *)&s->mon.p, &s->mon.q, MONITOR_ATT_CLOSE, "", 0);
    } else if (s->master.open) {
        if (len)
            dst_write(s, (uv_stream_t *)&s->master.p, &s->master.q, -1, data, len);
        if (fin)
            dst_write(s, (uv_stream_t *)&s->master.p, &s->master.q, -1, "\x04", 1);
    } else if (s->in.open) {
        if (len)
            dst_write(s, (uv_stream_t *)&s->in.p, &s->in.q, -1, data, len);
        if (fin) {
            uv_shutdown_t *sh = calloc(1, sizeof(*sh));
            if (sh) {
                sh->data = s;
                if (uv_shutdown(sh, (uv_stream_t *)&s->in.p, on_in_shut) < 0)
                    free(sh);
                else
                    s->refs++;
            }
        }
    }
}

/* The command or the monitor is there: what the client sent meanwhile
 * goes to it. */
static void became_ready(struct sess *s)
{
    s->ready = true;
    if (s->ended)
        return;
    struct buf e = s->early;
    s->early = (struct buf){0};
    dstq_update(s, &s->early_q, 0);
    if (e.len || s->early_fin)
        sess_input(s->c, CH_STDIN, e.data, e.len, s->early_fin);
    buf_free(&e);
    resize(s, NULL, 0);
}

/* ---- exec ---- */

static int recv_fd(int sock)
{
    char cbuf[CMSG_SPACE(sizeof(int))], b;
    struct iovec iov = {&b, 1};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) <= 0)
        return -1;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (!h || h->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(h), sizeof(fd));
    return fd;
}

static void exec_work(uv_work_t *w)
{
    struct sess *s = w->data;
    const struct stream_request *q = s->c->req;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1};
    int cons[2] = {-1, -1};
    bool ok;
    if (q->tty)
        ok = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cons) == 0;
    else
        ok = (!q->in || pipe2(in, O_CLOEXEC) == 0) && pipe2(out, O_CLOEXEC) == 0 &&
             pipe2(er, O_CLOEXEC) == 0;
    if (!ok) {
        s->r = err_set(&s->err, errno, "pipes for the command");
        goto out;
    }
    /* a terminal's output is stdout, and its input the master */
    int r = q->exec(q, (const int[]){in[0], out[1], er[1]}, TAKE_FD(cons[1]), &s->cmd_fd,
                    &s->start_fd, &s->err);
    if (r < 0)
        s->r = r;
    else
        s->cannot_run = r;
    if (s->cmd_fd < 0) /* not started, or nothing to watch */
        goto out;
    if (q->tty) {
        struct timeval tv = {.tv_sec = 10};
        setsockopt(cons[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        s->fd_master = recv_fd(cons[0]); /* -1: the executor failed first */
    }
    s->fd_in = TAKE_FD(in[1]);
    s->fd_out = TAKE_FD(out[0]);
    s->fd_err = TAKE_FD(er[0]);
out:;
    int all[] = {in[0], in[1], out[0], out[1], er[0], er[1], cons[0], cons[1]};
    for (size_t i = 0; i < ARRAY_SIZE(all); i++)
        if (all[i] >= 0)
            close(all[i]);
}

static void on_drain(uv_timer_t *t)
{
    struct sess *s = t->data;
    /* the command is gone; its children keep the pipes: done anyway */
    finish(s, s->status, NULL);
}

/* The command could not run: why, on stderr (a terminal has none), and a
 * shell's code. */
static void tell_cannot_run(struct sess *s)
{
    s->status = s->cannot_run;
    if (s->c->req->tty || s->ended)
        return;
    char why[ERR_MSG_MAX + 1];
    int n = snprintf(why, sizeof(why), "%s\n", err_str(&s->err));
    conn_send(s->c, CH_STDERR, why, (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
}

static void on_reap_retry(uv_timer_t *t);

/* The command is reaped (its status in s->status). */
static void exited(struct sess *s)
{
    s->exited = true;
    if (!s->cannot_run && !s->ended)
        s->cannot_run = s->c->req->exec_result(s->c->req, s->start_fd, &s->err);
    if (s->cannot_run)
        tell_cannot_run(s);
    if (s->ended) {
        close_all(s);
        return;
    }
    if (s->drain_open)
        uv_timer_start(&s->drain, on_drain, DRAIN_MS, 0);
    maybe_done(s);
}

static void on_exit_(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct sess *s = p->data;
    int r = pidfd_reap(s->cmd_fd, &s->status);
    uv_poll_stop(p); /* readable for good once the command has ended */
    if (r > 0) {
        exited(s);
        return;
    }
    /* Ended but not ours to reap yet: a process of the container traces
     * it (a traced zombie is its tracer's until the tracer waits or ends).
     * Polled again it would spin the loop: asked again every
     * REAP_RETRY_MS. */
    uv_timer_start(&s->drain, on_reap_retry, REAP_RETRY_MS, REAP_RETRY_MS);
}

static void on_reap_retry(uv_timer_t *t)
{
    struct sess *s = t->data;
    if (pidfd_reap(s->cmd_fd, &s->status) <= 0)
        return;
    uv_timer_stop(t);
    exited(s);
}

static void exec_done(uv_work_t *w, int status)
{
    struct sess *s = w->data;
    struct conn *c = s->c;
    if (status < 0 && s->r == 0)
        s->r = err_set(&s->err, ECANCELED, "cancelled");
    if (s->r < 0) {
        char why[600];
        snprintf(why, sizeof(why), "exec: %s", err_str(&s->err));
        finish(s, 0, why);
        unref(s);
        return;
    }
    if (s->cmd_fd < 0) {
        /* could not run, and nothing was started */
        tell_cannot_run(s);
        finish(s, s->status, NULL);
        unref(s);
        return;
    }
    open_pipe(s, &s->in, s->fd_in, false);
    open_pipe(s, &s->out, s->fd_out, true);
    open_pipe(s, &s->errp, s->fd_err, true);
    open_pipe(s, &s->master, s->fd_master, true);
    if (c->req->tty && s->fd_master < 0)
        s->master.eof = true;
    uv_timer_init(conn_loop(c), &s->drain);
    s->drain.data = s;
    s->drain_open = true;
    s->refs++;
    uv_poll_init(conn_loop(c), &s->exit_poll, s->cmd_fd);
    s->exit_poll.data = s;
    s->poll_open = true;
    s->refs++;
    uv_poll_start(&s->exit_poll, UV_READABLE, on_exit_);
    became_ready(s);
    if (s->ended) /* the client left while the command started */
        sess_end(c);
    if (c->paused)
        sess_pause(c, true);
    unref(s); /* the work's reference */
}

/* ---- attach ---- */

static void attach_work(uv_work_t *w)
{
    struct sess *s = w->data;
    const struct stream_request *q = s->c->req;
    /* the socket through an fd of its directory: the path may not fit a
     * socket address */
    int dfd = open(q->socket_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        s->r = err_set(&s->err, errno, "the container's monitor");
        return;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, MONITOR_CTL_SOCK);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    char msg[64], ans[256];
    snprintf(msg, sizeof(msg), "%s%s%s%s", MONITOR_CTL_ATTACH, q->in ? " stdin" : "",
             q->out ? " stdout" : "", q->err ? " stderr" : "");
    struct timeval tv = {.tv_sec = 10};
    ssize_t n = -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        send(fd, msg, strlen(msg), MSG_NOSIGNAL) >= 0)
        n = recv(fd, ans, sizeof(ans) - 1, 0);
    close(dfd);
    if (n < 0) {
        s->r = err_set(&s->err, errno, "attach to the container's monitor");
        if (fd >= 0)
            close(fd);
        return;
    }
    ans[n] = '\0';
    if (monitor_answer_err(ans, &s->err) < 0) {
        s->r = err_wrap(&s->err, "the monitor refused");
        close(fd);
        return;
    }
    tv.tv_sec = 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    s->fd_mon = fd;
}

static void attach_done(uv_work_t *w, int status)
{
    struct sess *s = w->data;
    if (status < 0 && s->r == 0)
        s->r = err_set(&s->err, ECANCELED, "cancelled");
    if (s->r < 0) {
        char why[600];
        snprintf(why, sizeof(why), "attach: %s", err_str(&s->err));
        finish(s, 0, why);
    } else {
        open_pipe(s, &s->mon, s->fd_mon, true);
        became_ready(s);
        if (s->ended)
            sess_end(s->c);
        else if (s->c->paused)
            sess_pause(s->c, true);
    }
    unref(s);
}

/* ---- port forwarding ---- */

/* Over WebSocket a session forwards a fixed set of ports; once every one
 * has ended, so does the connection (the client learns it by the close). */
static void pf_maybe_done(struct sess *s)
{
    struct conn *c = s->c;
    if (c->state != CONN_WS || s->ended)
        return;
    for (size_t k = 0; k < c->n_pf; k++)
        if (!s->pf[k] || !s->pf[k]->eof)
            return;
    conn_finish(c);
}

static void pf_error(struct pf_conn *p, int e)
{
    struct conn *c = p->s->c;
    char msg[256];
    snprintf(msg, sizeof(msg), "error forwarding port %d to pod: %s", (int)c->pf_slots[p->k].port,
             strerror(e));
    conn_send(c, (int)(2 * p->k + 1), msg, strlen(msg));
    conn_close_ch(c, (int)(2 * p->k + 1));
    conn_close_ch(c, (int)(2 * p->k));
    p->eof = true;
    /* never connected: what the client sent for it is dropped */
    buf_free(&p->early);
    dstq_update(p->s, &p->q, 0);
    pf_maybe_done(p->s);
}

/* In a pool thread: a socket of the pod's network namespace. */
static void pf_work(uv_work_t *w)
{
    struct pf_conn *p = w->data;
    const char *netns = p->s->c->req->netns;
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int pod = open(netns, O_RDONLY | O_CLOEXEC);
    p->fd = -1;
    if (self < 0 || pod < 0 || setns(pod, CLONE_NEWNET) < 0) {
        p->r = -errno;
    } else {
        p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        p->r = p->fd < 0 ? -errno : 0;
        if (setns(self, CLONE_NEWNET) < 0) {
            /* this pool thread would serve others from the pod's
             * namespace: nothing sane is left to do */
            log_error("port forward: return to the daemon's network namespace: %s",
                      strerror(errno));
            abort();
        }
    }
    if (self >= 0)
        close(self);
    if (pod >= 0)
        close(pod);
}

static void on_pf_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct pf_conn *p = PF_OF(st);
    struct conn *c = p->s->c;
    if (n > 0) {
        conn_send(c, (int)(2 * p->k), b->base, (size_t)n);
        return;
    }
    if (n == 0)
        return;
    p->eof = true;
    uv_read_stop(st);
    conn_close_ch(c, (int)(2 * p->k));
    conn_close_ch(c, (int)(2 * p->k + 1));
    pf_maybe_done(p->s);
}

static void on_pf_connected(uv_connect_t *cr, int status)
{
    struct pf_conn *p = cr->data;
    struct sess *s = p->s;
    if (status < 0 || s->ended) {
        if (status < 0 && !s->ended)
            pf_error(p, -status);
        p->eof = true;
        unref(s);
        return;
    }
    p->connected = true;
    dstq_update(s, &p->q, 0); /* the early input now waits as writes */
    if (p->early.len || p->early_fin) {
        struct buf e = p->early;
        p->early = (struct buf){0};
        sess_input(s->c, (int)(2 * p->k), e.data, e.len, p->early_fin);
        buf_free(&e);
    }
    if (!s->c->paused)
        uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_pf_read);
    unref(s);
}

static void pf_done(uv_work_t *w, int status)
{
    struct pf_conn *p = w->data;
    struct sess *s = p->s;
    if (status < 0 && p->r == 0)
        p->r = -ECANCELED;
    if (p->r < 0 || s->ended) {
        if (!s->ended)
            pf_error(p, -p->r);
        if (p->fd >= 0)
            close(p->fd);
        p->eof = true;
        unref(s);
        return;
    }
    uv_tcp_init(conn_loop(s->c), &p->tcp);
    p->tcp.data = s;
    p->open = true;
    s->refs++;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", s->c->pf_slots[p->k].port, &sa);
    int e = uv_tcp_open(&p->tcp, p->fd);
    if (e < 0)
        close(p->fd);
    if (e == 0) {
        p->cr.data = p;
        e = uv_tcp_connect(&p->cr, &p->tcp, (struct sockaddr *)&sa, on_pf_connected);
    }
    if (e < 0) {
        pf_error(p, -e);
        p->eof = true;
        unref(s);
    }
    /* else the work's reference now belongs to the connect */
}

void sess_pf_open(struct conn *c, size_t k)
{
    struct sess *s = c->sess;
    if (!s || s->ended || s->pf[k])
        return;
    struct pf_conn *p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->s = s;
    p->k = k;
    p->fd = -1;
    p->work.data = p;
    s->pf[k] = p;
    s->refs++;
    uv_queue_work(conn_loop(c), &p->work, pf_work, pf_done);
}

/* ---- start and end ---- */

int sess_start(struct conn *c)
{
    struct sess *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = c;
    s->refs = 1; /* the session's own, dropped by sess_end */
    s->cmd_fd = s->start_fd = s->fd_in = s->fd_out = s->fd_err = s->fd_master = s->fd_mon = -1;
    c->sess = s;
    c->handles++;
    s->work.data = s;
    switch (c->req->kind) {
    case STREAM_EXEC:
        s->refs++;
        uv_queue_work(conn_loop(c), &s->work, exec_work, exec_done);
        break;
    case STREAM_ATTACH:
        s->refs++;
        uv_queue_work(conn_loop(c), &s->work, attach_work, attach_done);
        break;
    case STREAM_PORTFORWARD:
        break;
    }
    return 0;
}

void sess_end(struct conn *c)
{
    struct sess *s = c->sess;
    if (!s)
        return;
    bool first = !s->ended;
    s->ended = true;
    /* a vanished client ends the command, as kubelet expects */
    /* (until exec_done opens the watch, cmd_fd is the worker's) */
    bool watching = s->poll_open && !s->exited;
    if (watching)
        pidfd_send_signal(s->cmd_fd, SIGKILL, NULL, 0);
    close_handles(s, watching);
    if (first)
        unref(s);
}
