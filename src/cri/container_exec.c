/* ExecSync: a command in a running container, with its output and exit
 * code, as kubelet's exec probes use it.
 *
 * The command is started from a worker by oci_exec in_process (the same
 * namespaces, cgroup, user, capabilities, no_new_privs and seccomp as the
 * container's process, see src/oci/exec.c; kinglet-enter, a small sealed
 * program cloned into the container's cgroup, makes it the daemon's own
 * child). The worker returns once the command has a pid, before its
 * execve, which a process of the container allowed to trace it can put off
 * for good: everything after is on the loop. Its stdout and stderr come
 * back over pipes; its end is watched through a pidfd, and then the socket
 * of its start says whether it ran (oci_exec_result). A timeout kills the
 * command and answers DEADLINE_EXCEEDED once it has ended, as containerd
 * does. A command that cannot be started gives exit code 127 (missing) or
 * 126 (not executable) and the reason on stderr. After the exit, output
 * still held by the command's own children is waited for at most
 * EXEC_DRAIN_MS. A client that goes away (cancel, deadline) kills the
 * command, also one still being started: the cancel is only recorded on the
 * loop, and spawn_done, the first place the loop may read what the worker
 * wrote, acts on it. A command that has ended but that a tracer in the
 * container keeps from us (its zombie is the tracer's to reap first) is
 * asked for again every EXEC_REAP_RETRY_MS: the call is answered at its
 * timeout or cancel all the same, and the command reaped later.
 *
 * Output: stdout and stderr together are kept up to EXEC_ANSWER_MAX, so the
 * whole answer fits the 16 MiB message kubelet reads (containerd keeps
 * 16 MiB of each, CRI-O 16 MiB of both through conmon's
 * --log-global-size-max; an answer of 32 MiB is refused by the client, and
 * the probe fails), each stream with room for the other's first EXEC_SHARE
 * bytes. The rest is read and dropped, never held up: a probe's
 * command must not hang because of us. What was dropped is said at the end
 * of stderr. Memory: each call may hold EXEC_FLOOR bytes of buffer whatever
 * the others do (a probe's few lines always come back); past that, buffers
 * (counted as allocated) come from one pool of EXEC_POOL bytes for all
 * calls, and output that finds the pool empty is dropped the same way. So
 * all calls together hold at most EXEC_MAX * EXEC_FLOOR + EXEC_POOL
 * (80 MiB); an answer, once sent, is the gRPC server's to bound. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>

#include "cri/containers.h"
#include "oci/oci.h"

#define EXEC_NOTE_MAX      256u                                 /* the "output cut" line */
#define EXEC_ANSWER_MAX    ((16u << 20) - 4096 - EXEC_NOTE_MAX) /* 4 KiB for the framing */
#define EXEC_SHARE         (64u << 10) /* of the answer, kept for each stream */
#define EXEC_FLOOR         (64u << 10) /* buffer a call may always hold */
#define EXEC_POOL          (64u << 20) /* buffer beyond the floors, all calls together */
#define EXEC_DRAIN_MS      2000
#define EXEC_REAP_RETRY_MS 100 /* a command held by a tracer */
#define EXEC_MAX           256 /* ExecSync calls at once */

struct exec_stream {
    uv_pipe_t pipe;
    struct buf data;
    uint64_t dropped; /* bytes read and not kept */
    bool open, eof;
};

struct exec_sync {
    struct cri_call *call;
    struct cri *cri;
    uv_work_t req;
    /* spawn job: in */
    char **argv; /* the command */
    char *id, *oci_root;
    /* spawn job: out */
    int pidfd, sync, out_fd, err_fd; /* the command's pidfd and start socket */
    struct err err;
    int r;
    /* on the loop */
    struct exec_stream out, errs;
    uv_poll_t exit_poll;
    bool poll_open;
    uv_timer_t timer;
    bool timer_open;
    bool ended;  /* the command has ended (a zombie, maybe a tracer's) */
    bool exited; /* ... and it is reaped (or there was none) */
    bool timed_out, replied;
    int cannot_run;    /* 127, 126: its start failed (the reason in err) */
    bool spawned;      /* spawn_done ran: the worker's fields are the loop's */
    bool waiting_room; /* the answer waits for room on the connection */
    bool cancelled;    /* the client went away */
    size_t pooled;     /* buffer bytes taken from the pool */
    int status;
    int handles; /* handles closing and holds; freed at 0 */
    int64_t timeout_s;
    uint64_t deadline; /* of the loop's clock, with timeout_s */
};

static size_t active;
static size_t pool_used; /* of EXEC_POOL */

static void output_release(struct exec_sync *x)
{
    buf_free(&x->out.data);
    buf_free(&x->errs.data);
    pool_used -= x->pooled;
    x->pooled = 0;
}

static void exec_free(struct exec_sync *x)
{
    for (char **a = x->argv; a && *a; a++)
        free(*a);
    free(x->argv);
    free(x->id);
    free(x->oci_root);
    output_release(x);
    if (x->pidfd >= 0)
        close(x->pidfd);
    if (x->sync >= 0)
        close(x->sync);
    free(x);
    active--;
}

static void on_close(uv_handle_t *h)
{
    struct exec_sync *x = h->data;
    if (--x->handles == 0)
        exec_free(x);
}

static void unhold(struct exec_sync *x)
{
    if (--x->handles == 0)
        exec_free(x);
}

static void close_handle(struct exec_sync *x, uv_handle_t *h, bool *open)
{
    if (!*open)
        return;
    *open = false;
    x->handles++;
    uv_close(h, on_close);
}

/* The output, once answered; the exit watch too once the command is
 * reaped. */
static void close_output(struct exec_sync *x)
{
    close_handle(x, (uv_handle_t *)&x->out.pipe, &x->out.open);
    close_handle(x, (uv_handle_t *)&x->errs.pipe, &x->errs.open);
}

static void close_all(struct exec_sync *x)
{
    x->handles++; /* held while closing */
    close_output(x);
    close_handle(x, (uv_handle_t *)&x->exit_poll, &x->poll_open);
    close_handle(x, (uv_handle_t *)&x->timer, &x->timer_open);
    unhold(x);
}

static void on_room(struct grpc_call *gc, void *data);

/* Sends the answer; one the connection has no room for yet (its client is
 * reading earlier answers) waits, its output still counted in the pool. */
static void send_answer(struct exec_sync *x)
{
    Runtime__V1__ExecSyncResponse resp = RUNTIME__V1__EXEC_SYNC_RESPONSE__INIT;
    resp.stdout.data = x->out.data.data;
    resp.stdout.len = x->out.data.len;
    resp.stderr.data = x->errs.data.data;
    resp.stderr.len = x->errs.data.len;
    resp.exit_code = x->status;
    int r = cri_send(x->call, &resp.base);
    x->waiting_room = r == -ENOBUFS && grpc_call_when_room(x->call->gc, on_room, x) == 0;
    if (x->waiting_room)
        return;
    if (r < 0 && r != -ECANCELED)
        cri_fail(x->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "cannot send the response: %s",
                 strerror(-r));
    else
        cri_finish(x->call, GRPC_STATUS_OK, NULL);
    output_release(x); /* the answer is the gRPC server's now */
    unhold(x);
}

static void on_room(struct grpc_call *gc, void *data)
{
    (void)gc;
    send_answer(data);
}

/* Answers; a command not reaped yet (a tracer holds its zombie) keeps its
 * exit watch, and this record, until it is. */
static void reply(struct exec_sync *x)
{
    if (x->replied)
        return;
    x->replied = true;
    x->handles++; /* held by the answer */
    if (x->sync >= 0)
        close(TAKE_FD(x->sync)); /* whether it ran is moot now */
    if (x->exited) {
        close_all(x);
    } else {
        close_output(x);
        x->handles++; /* held by the exit watch until the command is reaped */
    }
    if (!x->timed_out) {
        send_answer(x);
        return;
    }
    cri_fail(x->call, GRPC_STATUS_DEADLINE_EXCEEDED,
             "ExecSync: the command timed out after %lld s and was killed",
             (long long)x->timeout_s);
    output_release(x);
    unhold(x);
}

/* Says at the end of stderr what was dropped (EXEC_NOTE_MAX is kept free
 * for it). */
static void note_dropped(struct exec_sync *x)
{
    if (!x->out.dropped && !x->errs.dropped)
        return;
    char note[EXEC_NOTE_MAX];
    int n = snprintf(note, sizeof(note),
                     "\nkinglet: ExecSync output cut: %llu bytes of stdout and %llu bytes of "
                     "stderr dropped (the answer holds at most %u bytes of both)\n",
                     (unsigned long long)x->out.dropped, (unsigned long long)x->errs.dropped,
                     EXEC_ANSWER_MAX);
    if (buf_append(&x->errs.data, note, (size_t)n) < 0)
        log_warn("ExecSync: out of memory for the output-cut note");
}

static void maybe_done(struct exec_sync *x)
{
    if (x->exited && (!x->out.open || x->out.eof) && (!x->errs.open || x->errs.eof)) {
        note_dropped(x);
        reply(x);
    }
}

/* ---- output ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    static char scratch[65536];
    *b = uv_buf_init(scratch, sizeof(scratch));
}

/* How many of n bytes st may keep: within the answer's bound, and with
 * the buffer grown (as buf_reserve grows it, counted as allocated) only
 * within the call's floor and what the pool has left. */
static size_t output_room(struct exec_sync *x, struct exec_stream *st, size_t n)
{
    struct buf *b = &st->data;
    const struct buf *other = st == &x->out ? &x->errs.data : &x->out.data;
    /* the other stream's first EXEC_SHARE bytes have room whatever this one
     * prints (an error line after a flood of stdout) */
    size_t held = b->len + (other->len > EXEC_SHARE ? other->len : EXEC_SHARE);
    size_t take = held < EXEC_ANSWER_MAX ? EXEC_ANSWER_MAX - held : 0;
    if (take > n)
        take = n;
    if (b->cap - b->len >= take)
        return take;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + take)
        cap *= 2;
    size_t charge = x->out.data.cap + x->errs.data.cap - b->cap + cap;
    size_t pooled = charge > EXEC_FLOOR ? charge - EXEC_FLOOR : 0;
    if ((pooled > x->pooled && pooled - x->pooled > EXEC_POOL - pool_used) ||
        buf_reserve(b, take) < 0)
        return b->cap - b->len; /* no growth: what fits now */
    if (pooled > x->pooled) {
        pool_used += pooled - x->pooled;
        x->pooled = pooled;
    }
    return take;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct exec_sync *x = s->data;
    struct exec_stream *st = (uv_pipe_t *)s == &x->out.pipe ? &x->out : &x->errs;
    if (n > 0) {
        size_t take = output_room(x, st, (size_t)n);
        buf_append(&st->data, b->base, take); /* within the room reserved */
        st->dropped += (size_t)n - take;
        return;
    }
    if (n < 0) {
        st->eof = true;
        uv_read_stop(s);
        maybe_done(x);
    }
}

static int stream_open(struct cri *cri, struct exec_sync *x, struct exec_stream *st, int fd)
{
    if (uv_pipe_init(cri->loop, &st->pipe, 0) < 0)
        return -ENOMEM;
    st->pipe.data = x;
    if (uv_pipe_open(&st->pipe, fd) < 0) {
        close(fd);
        st->open = true;
        st->eof = true;
        return 0;
    }
    st->open = true;
    uv_read_start((uv_stream_t *)&st->pipe, on_alloc, on_read);
    return 0;
}

/* ---- the exit and the timeout ---- */

static void on_drain_timeout(uv_timer_t *t)
{
    struct exec_sync *x = t->data;
    /* The command has exited; its children keep the pipes: done anyway. */
    x->out.eof = x->errs.eof = true;
    note_dropped(x);
    reply(x);
}

static void on_reap_retry(uv_timer_t *t);

/* Whether a command that ended ran, from the socket of its start. */
static void read_result(struct exec_sync *x)
{
    if (!x->cannot_run && x->sync >= 0)
        x->cannot_run = oci_exec_result(x->sync, x->id, &x->err);
    if (x->sync >= 0)
        close(TAKE_FD(x->sync));
    if (!x->cannot_run)
        return;
    /* The command cannot run: a shell's code and the reason. */
    const char *m = err_str(&x->err);
    if (buf_append(&x->errs.data, m, strlen(m)) < 0 || buf_append(&x->errs.data, "\n", 1) < 0)
        log_warn("ExecSync: out of memory for the error text");
}

/* The command was reaped (its status in x->status). */
static void exited(struct exec_sync *x)
{
    x->exited = true;
    if (x->replied) {
        close_all(x);
        unhold(x); /* the exit watch's */
        return;
    }
    read_result(x);
    if (x->cannot_run)
        x->status = x->cannot_run;
    if (x->timed_out || x->cancelled) {
        reply(x);
        return;
    }
    uv_timer_stop(&x->timer);
    uv_timer_start(&x->timer, on_drain_timeout, EXEC_DRAIN_MS, 0);
    maybe_done(x);
}

static void on_exit_(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct exec_sync *x = p->data;
    int r = pidfd_reap(x->pidfd, &x->status);
    uv_poll_stop(p); /* readable for good once the command has ended */
    x->ended = true;
    if (r > 0) {
        exited(x);
        return;
    }
    /* Ended but not ours to reap yet: a process of the container traces
     * it, and a traced zombie is its tracer's until the tracer waits or
     * ends. Polled again it would spin the loop; asked again every
     * EXEC_REAP_RETRY_MS. Killed, it is answered now. */
    if (x->timed_out || x->cancelled)
        reply(x);
    uv_timer_stop(&x->timer);
    uv_timer_start(&x->timer, on_reap_retry, EXEC_REAP_RETRY_MS, EXEC_REAP_RETRY_MS);
}

static void on_reap_retry(uv_timer_t *t)
{
    struct exec_sync *x = t->data;
    if (pidfd_reap(x->pidfd, &x->status) > 0) {
        uv_timer_stop(t);
        exited(x);
        return;
    }
    /* the timeout holds for a command held this way too */
    if (!x->replied && x->timeout_s > 0 && uv_now(t->loop) >= x->deadline) {
        x->timed_out = true;
        reply(x);
    }
}

static void kill_command(struct exec_sync *x) { pidfd_send_signal(x->pidfd, SIGKILL, NULL, 0); }

static void on_timeout(uv_timer_t *t)
{
    struct exec_sync *x = t->data;
    x->timed_out = true;
    kill_command(x);
}

/* ---- the spawn ---- */

static void spawn_work(uv_work_t *req)
{
    struct exec_sync *x = req->data;
    int out[2] = {-1, -1}, errp[2] = {-1, -1};
    _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        x->r = err_set(&x->err, errno, "pipe");
        goto fail;
    }
    /* No executor process: kinglet-enter is cloned from here. Back once
     * the command has a pid, before its execve. */
    struct oci_exec_opts o = {.root = x->oci_root,
                              .id = x->id,
                              .args = x->argv,
                              .pid_fd = -1,
                              .console_fd = -1,
                              .detach = true,
                              .in_process = true,
                              .ret_pidfd = &x->pidfd,
                              .ret_sync = &x->sync,
                              .stdio = (const int[]){devnull, out[1], errp[1]}};
    int status = 0;
    x->r = oci_exec(&o, &status, &x->err);
    close(out[1]);
    close(errp[1]);
    out[1] = errp[1] = -1;
    if (x->r < 0 && status) {
        /* The command cannot run (when there is one, it is reaped on the
         * loop all the same). */
        x->r = 0;
        x->status = x->cannot_run = status;
    }
    if (x->r < 0 || x->pidfd < 0)
        goto fail;
    x->out_fd = out[0];
    x->err_fd = errp[0];
    return;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
}

static uint64_t timeout_ms(const struct exec_sync *x)
{
    uint64_t s = x->timeout_s > 0 ? (uint64_t)x->timeout_s : 0;
    return s > UINT64_MAX / 2000 ? UINT64_MAX / 2 : s * 1000;
}

static void spawn_done(uv_work_t *req, int status)
{
    struct exec_sync *x = req->data;
    struct cri *cri = x->cri;
    x->spawned = true;
    if (status < 0 && x->r == 0) /* never started: uv_cancel */
        x->r = err_set(&x->err, -status, "cancelled");
    if (x->cannot_run && x->pidfd < 0) {
        read_result(x); /* nothing was started: the reason only */
        x->ended = x->exited = true;
        x->handles++; /* held while closing */
        reply(x);
        unhold(x);
        return;
    }
    if (x->r < 0) {
        err_wrap(&x->err, "ExecSync");
        cri_fail_err(x->call, &x->err);
        x->replied = true;
        close_all(x);
        return;
    }
    stream_open(cri, x, &x->out, x->out_fd);
    stream_open(cri, x, &x->errs, x->err_fd);
    uv_timer_init(cri->loop, &x->timer);
    x->timer.data = x;
    x->timer_open = true;
    uv_poll_init(cri->loop, &x->exit_poll, x->pidfd);
    x->exit_poll.data = x;
    x->poll_open = true;
    uv_poll_start(&x->exit_poll, UV_READABLE, on_exit_);
    x->deadline = uv_now(cri->loop) + timeout_ms(x);
    if (x->cancelled) {
        /* The client went away while the command was being started: it is
         * killed, and reaped (on_exit_) like any other. */
        kill_command(x);
        return;
    }
    if (x->timeout_s > 0)
        uv_timer_start(&x->timer, on_timeout, timeout_ms(x), 0);
}

static void on_cancel(struct grpc_call *gc, void *data)
{
    (void)gc;
    struct exec_sync *x = data;
    /* The client went away: the command goes too, as kubelet expects. Until
     * spawn_done the worker owns pidfd: it acts on this then. */
    x->cancelled = true;
    if (x->waiting_room)
        send_answer(x); /* finishes the call */
    else if (!x->spawned || x->replied)
        return;
    else if (!x->ended)
        kill_command(x); /* answered once it has ended */
    else
        reply(x); /* ended: nothing left to wait for */
}

void cri_exec_sync(struct cri_call *call)
{
    Runtime__V1__ExecSyncRequest *req = (Runtime__V1__ExecSyncRequest *)call->req;
    struct cri *cri = call->cri;
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
    if (c->rec.state != STORE_CTR_RUNNING) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "ExecSync: container `%s` is not running (%s)", c->rec.id,
                 store_ctr_state_name(c->rec.state));
        return;
    }
    if (!req->n_cmd || req->n_cmd > 4096) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "ExecSync: cmd must have 1 to 4096 words");
        return;
    }
    if (active >= EXEC_MAX) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "ExecSync: %d commands are running already",
                 EXEC_MAX);
        return;
    }
    struct exec_sync *x = calloc(1, sizeof(*x));
    if (!x) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    active++;
    x->call = call;
    x->cri = cri;
    x->pidfd = x->sync = x->out_fd = x->err_fd = -1;
    x->timeout_s = req->timeout;
    size_t n = 0;
    x->argv = calloc(req->n_cmd + 1, sizeof(char *));
    x->id = strdup(c->rec.id);
    x->oci_root = strdup(cri->containers->oci_root);
    bool oom = !x->argv || !x->id || !x->oci_root;
    for (size_t i = 0; !oom && i < req->n_cmd; i++)
        oom = !(x->argv[n++] = strdup(req->cmd[i]));
    if (oom) {
        exec_free(x);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    grpc_call_on_cancel(call->gc, on_cancel, x);
    x->req.data = x;
    uv_queue_work(cri->loop, &x->req, spawn_work, spawn_done);
}
