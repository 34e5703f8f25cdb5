/* kinglet-monitor: the per-container supervisor, a program of its own.
 *
 * It is built as a small static binary against musl (Debian's musl-tools),
 * embedded in kinglet, and executed from a sealed memfd (launch.c) by the
 * process that cloned the container's init, which stays its child. So it
 * maps no library and no file of the host: /proc/PID/exe of a monitor is a
 * memfd that cannot be written, it costs well under 200 kB of memory, and
 * it runs the same code in every build of kinglet, sanitizers or not.
 *
 * Its duties, in one poll loop with one writer thread:
 *  - the start time: the init writes one byte on the exec pipe right before
 *    its execve (EOF: it died first);
 *  - the exit: it reaps the init (and, as a subreaper, whatever is
 *    reparented to it), and writes exit.json (exit code, signal, start and
 *    finish times, whether the cgroup saw an OOM kill) durably into the
 *    container's state directory, tells a waiting `kinglet oci run` over its
 *    report socket, and exits;
 *  - CRI logs (with --log-path): the container's stdout and stderr (pipes,
 *    or the pty master of a tty container, logged as stdout) become CRI log
 *    records (logfmt.c). Records go through a bounded buffer to a writer
 *    thread. While the log keeps up (its last write took under 250 ms,
 *    LOG_STALL_NS), a buffer more than half full pauses the reading of the
 *    container's output, so a burst waits in its pipe, as containerd's
 *    would, and the log is whole when the exit is recorded (a crash's last
 *    words are what `kubectl logs --previous` is for). A log that stalls (a
 *    hung disk, a FIFO read at a trickle) never blocks the container: the
 *    reading goes on, what does not fit is dropped and counted, and a
 *    marker record says how much. A full disk fails its writes at once,
 *    which drops too;
 *  - ReopenContainerLog: `reopen` on the control socket (ctl.sock in the
 *    state directory) makes the writer reopen the log file, and the answer
 *    says whether it could;
 *  - stdin: it holds the write end of the container's stdin pipe (or the
 *    pty master), so that the container sees no EOF until it should.
 *
 * Arguments: fds it inherits, by number (see launch.c). */
#define _GNU_SOURCE /* setns */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "monitor/logfmt.h"
#include "monitor/proto.h"

struct opts {
    pid_t init;
    int dir_fd, exec_fd, report_fd;
    const char *cgroup;
    const char *log_path;
    int out_fd, err_fd, tty_fd, stdin_fd;
    int ctl_fd;
    bool stdin_once;
    size_t buffer;
};

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Times recorded (the wall clock); durations (a clock that is never set). */
static uint64_t real_ns(void) { return clock_ns(CLOCK_REALTIME); }
static uint64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* ---- the log writer ---- */

/* A write of the log that takes longer marks the log as stalled: the
 * container's output is no longer held back for it. */
#define LOG_STALL_NS (250 * 1000000ull)

struct writer {
    pthread_mutex_t mu;
    pthread_cond_t cond, idle, room;
    uint8_t *ring;
    size_t cap, head, len; /* bytes [head, head+len) mod cap are pending */
    bool busy;             /* a write is in progress */
    uint64_t busy_since;   /* since when (mono_ns) */
    bool slow;             /* the last write took LOG_STALL_NS or more */
    int wake_fd;           /* an eventfd: a write ended (room, perhaps) */
    bool stop;
    const char *path;
    int fd;
    /* a reopen request: the client to answer, -1 when none */
    int reopen_client;
    /* dropped since the last marker */
    uint64_t dropped_bytes, dropped_records;
    uint64_t dropped_total;
};

static struct writer W = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
    .room = PTHREAD_COND_INITIALIZER,
    .fd = -1,
    .wake_fd = -1,
    .reopen_client = -1,
};

/* O_NONBLOCK for the open only: a FIFO nobody reads must not hang us. */
static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0640);
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static void answer(int client, const char *msg)
{
    send(client, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(client);
}

static void *writer_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&W.mu);
    for (;;) {
        while (!W.len && W.reopen_client < 0 && !W.stop)
            pthread_cond_wait(&W.cond, &W.mu);
        if (W.reopen_client >= 0) {
            int client = W.reopen_client;
            W.reopen_client = -1;
            int old = W.fd;
            pthread_mutex_unlock(&W.mu);
            int fd = open_log(W.path);
            char msg[300];
            if (fd < 0) {
                snprintf(msg, sizeof(msg), "error errno %d open `%.200s`", errno, W.path);
            } else {
                if (old >= 0)
                    close(old);
                snprintf(msg, sizeof(msg), "ok");
            }
            pthread_mutex_lock(&W.mu);
            if (fd >= 0)
                W.fd = fd;
            pthread_mutex_unlock(&W.mu);
            answer(client, msg);
            pthread_mutex_lock(&W.mu);
            continue;
        }
        if (!W.len) {
            if (W.stop)
                break;
            continue;
        }
        size_t n = W.len < W.cap - W.head ? W.len : W.cap - W.head;
        const uint8_t *p = W.ring + W.head;
        int fd = W.fd;
        W.busy = true;
        W.busy_since = mono_ns();
        pthread_mutex_unlock(&W.mu);
        ssize_t w = fd >= 0 ? write(fd, p, n) : -1;
        uint64_t took = mono_ns() - W.busy_since;
        pthread_mutex_lock(&W.mu);
        W.busy = false;
        W.slow = took >= LOG_STALL_NS;
        if (w <= 0) {
            /* Full disk, I/O error, no file: this output is lost; count
             * it, never wait for the disk to come back. */
            w = (ssize_t)n;
            W.dropped_bytes += n;
            W.dropped_total += n;
        }
        W.head = (W.head + (size_t)w) % W.cap;
        W.len -= (size_t)w;
        if (!W.len)
            pthread_cond_broadcast(&W.idle);
        pthread_cond_broadcast(&W.room);
        if (W.wake_fd >= 0) {
            uint64_t one = 1;
            ssize_t k = write(W.wake_fd, &one, sizeof(one));
            (void)k;
        }
    }
    pthread_cond_broadcast(&W.idle);
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

/* Room that records leave free for the drop marker, so that the count of
 * what was dropped always finds a place: the last one too, queued when the
 * container has ended and no record follows it. */
#define MARKER_ROOM 256

/* Appends one record whole, leaving keep bytes free, or drops it whole
 * (the caller holds W.mu). */
static bool ring_put(const void *a, size_t alen, const void *b, size_t blen, const void *c,
                     size_t clen, size_t keep)
{
    size_t n = alen + blen + clen;
    if (W.cap - W.len < n + keep)
        return false;
    const void *parts[3] = {a, b, c};
    size_t lens[3] = {alen, blen, clen};
    size_t tail = (W.head + W.len) % W.cap;
    for (int i = 0; i < 3; i++) {
        const uint8_t *src = parts[i];
        size_t left = lens[i];
        while (left) {
            size_t k = left < W.cap - tail ? left : W.cap - tail;
            memcpy(W.ring + tail, src, k);
            tail = (tail + k) % W.cap;
            src += k;
            left -= k;
        }
    }
    W.len += n;
    return true;
}

static uint64_t record_ns; /* the time the output being framed was read */

/* Queues a marker saying how much was dropped since the last one, if
 * anything was, leaving keep bytes free: MARKER_ROOM but for the last
 * marker (the caller holds W.mu). */
static void mark_dropped(size_t keep)
{
    if (!W.dropped_bytes)
        return;
    char head[LOGFMT_TS_LEN + 16];
    char note[MARKER_ROOM - sizeof(head) - 1];
    int k = snprintf(note, sizeof(note),
                     "[kinglet: %llu bytes of output in %llu records were dropped: the log "
                     "file could not be written fast enough]",
                     (unsigned long long)W.dropped_bytes, (unsigned long long)W.dropped_records);
    size_t h = logfmt_header(record_ns, LOGFMT_STDERR, 'F', head);
    if (ring_put(head, h, note, (size_t)k, "\n", 1, keep)) {
        W.dropped_bytes = W.dropped_records = 0;
        pthread_cond_signal(&W.cond);
    }
}

static void emit(void *ctx, enum logfmt_stream s, char tag, const uint8_t *data, size_t len)
{
    (void)ctx;
    char head[LOGFMT_TS_LEN + 16];
    pthread_mutex_lock(&W.mu);
    mark_dropped(MARKER_ROOM);
    size_t h = logfmt_header(record_ns, s, tag, head);
    if (!ring_put(head, h, data, len, "\n", 1, MARKER_ROOM)) {
        W.dropped_bytes += h + len + 1;
        W.dropped_records++;
        W.dropped_total += h + len + 1;
    } else {
        pthread_cond_signal(&W.cond);
    }
    pthread_mutex_unlock(&W.mu);
}

/* CLOCK_REALTIME (the condition variables' clock) ms from now. */
static struct timespec real_after(int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    return until;
}

/* Waits up to ms for the writer to empty the buffer. */
static void writer_drain(int ms)
{
    struct timespec until = real_after(ms);
    pthread_mutex_lock(&W.mu);
    while ((W.len || W.busy) && pthread_cond_timedwait(&W.idle, &W.mu, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&W.mu);
}

/* Whether to hold the container's output back now: the buffer is more
 * than half full and the log keeps up. The other half takes the records
 * one read of ATT_CHUNK makes (all but a flood of empty lines, whose
 * headers can outgrow it: the excess is dropped). The caller holds W.mu. */
static bool log_hold(void)
{
    if (!W.ring || W.len <= W.cap / 2)
        return false;
    if (W.slow || (W.busy && mono_ns() - W.busy_since >= LOG_STALL_NS))
        return false;
    return true;
}

/* Waits while the output is held back (after the exit: nothing else to
 * serve). */
static void log_wait_room(void)
{
    pthread_mutex_lock(&W.mu);
    while (log_hold()) {
        /* woken by each write's end; a stall is seen within 50 ms */
        struct timespec until = real_after(50);
        pthread_cond_timedwait(&W.room, &W.mu, &until);
    }
    pthread_mutex_unlock(&W.mu);
}

/* ---- the exit record ---- */

static bool oom_killed(const char *cg)
{
    if (!cg || !*cg)
        return false;
    char path[4200], buf[512];
    snprintf(path, sizeof(path), "%s/memory.events", cg);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *p = strstr(buf, "oom_kill ");
    return p && p[9] >= '1' && p[9] <= '9';
}

static void record_exit(const struct opts *o, int status, uint64_t started)
{
    int code, sig = 0;
    if (WIFSIGNALED(status)) {
        sig = WTERMSIG(status);
        code = 128 + sig;
    } else {
        code = WEXITSTATUS(status);
    }
    char buf[320];
    int n = snprintf(buf, sizeof(buf),
                     "{\"exitCode\":%d,\"signal\":%d,\"started\":%llu,\"finished\":%llu,"
                     "\"oomKilled\":%s}\n",
                     code, sig, (unsigned long long)started, (unsigned long long)real_ns(),
                     oom_killed(o->cgroup) ? "true" : "false");
    /* Whole or absent (write + rename), not fsynced: the state directory
     * is volatile (/run), a power loss takes it and the container with it,
     * and a crash of any process leaves the rename atomic (runc and crun do
     * not fsync their state either; on a disk-backed /run the two fsyncs
     * cost a millisecond per container). */
    int fd = openat(o->dir_fd, "exit.json.tmp",
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        bool ok = write(fd, buf, (size_t)n) == n;
        close(fd);
        if (ok)
            renameat(o->dir_fd, "exit.json.tmp", o->dir_fd, "exit.json");
    }
    if (o->report_fd >= 0) {
        struct monitor_exit_msg m = {.type = MONITOR_MSG_EXIT, .value = code};
        send(o->report_fd, &m, sizeof(m), MSG_NOSIGNAL);
    }
}

/* ---- the control socket: reopen, attach ----
 * Each connection sends one request. "reopen" is answered by the writer
 * thread. "attach" (with the words stdin, stdout, stderr for what it wants)
 * turns the connection into a stream of packets: from us, MONITOR_ATT_OUT
 * or MONITOR_ATT_ERR + output; from it, MONITOR_ATT_IN + input,
 * MONITOR_ATT_CLOSE (no more input: see client_input for what it ends) or
 * MONITOR_ATT_RESIZE + "WIDTH HEIGHT".
 * An attached client that does not keep up pauses the container's output
 * in its pipe (we stop reading it) rather than being buffered for. */

#define CLIENTS_MAX 16
#define ATT_CHUNK   16384 /* output per packet */
/* At the container's exit, how long attached clients may take to read its
 * last output before they are dropped (the exit is recorded after). */
#define EXIT_FLUSH_NS (2000 * 1000000ull)

struct client {
    int fd;
    bool attached, want_in, want_out, want_err;
    uint8_t *pending; /* a packet not yet taken by a full socket */
    size_t pending_len;
};

static struct client clients[CLIENTS_MAX];
static size_t n_clients;

struct io {
    int stdin_fd; /* the container's stdin (pipe write end or pty master), -1 */
    bool tty;     /* stdin_fd is the pty master */
    bool stdin_once;
    bool stdin_claimed; /* a client attached stdin once */
    uint8_t in_buf[ATT_CHUNK];
    size_t in_len; /* input not yet taken by the container's stdin */
};

static void client_drop(size_t i, struct io *io)
{
    struct client *c = &clients[i];
    if (c->attached && c->want_in && io->stdin_once && io->stdin_fd >= 0) {
        /* stdin_once: the first attached client's detach closes stdin */
        if (io->tty) {
            ssize_t w = write(io->stdin_fd, "\x04", 1); /* EOF at the terminal */
            (void)w;
        } else {
            close(io->stdin_fd);
            io->stdin_fd = -1;
        }
    }
    close(c->fd);
    free(c->pending);
    clients[i] = clients[--n_clients];
}

static void ctl_request(size_t i, struct io *io, const char *req)
{
    struct client *c = &clients[i];
    if (strcmp(req, MONITOR_CTL_REOPEN) == 0) {
        int fd = c->fd;
        clients[i] = clients[--n_clients]; /* the writer answers and closes */
        if (!W.path) {
            answer(fd, "error this container has no log file");
            return;
        }
        pthread_mutex_lock(&W.mu);
        if (W.reopen_client >= 0)
            answer(W.reopen_client, "error superseded by a newer reopen");
        W.reopen_client = fd;
        pthread_cond_signal(&W.cond);
        pthread_mutex_unlock(&W.mu);
        return;
    }
    if (strncmp(req, MONITOR_CTL_ATTACH, strlen(MONITOR_CTL_ATTACH)) == 0) {
        /* attached clients leave a slot free: for a reopen (kubelet's log
         * rotation), which idle attach sessions must not lock out */
        size_t attached = 0;
        for (size_t k = 0; k < n_clients; k++)
            attached += clients[k].attached;
        if (attached >= CLIENTS_MAX - 1) {
            int fd = c->fd;
            clients[i] = clients[--n_clients];
            answer(fd, "error too many clients attached");
            return;
        }
        c->attached = true;
        c->want_in = strstr(req, " stdin") != NULL;
        c->want_out = strstr(req, " stdout") != NULL;
        c->want_err = strstr(req, " stderr") != NULL;
        if (c->want_in && (io->stdin_fd < 0 || (io->stdin_once && io->stdin_claimed))) {
            int fd = c->fd;
            clients[i] = clients[--n_clients];
            answer(fd, "error stdin is closed");
            return;
        }
        if (c->want_in)
            io->stdin_claimed = true;
        if (send(c->fd, "ok", 2, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            client_drop(i, io);
        return;
    }
    answer(c->fd, "error unknown request");
    clients[i] = clients[--n_clients];
}

/* Sends one packet to every attached client that wants stream s; a client
 * whose socket is full keeps it pending (and pauses our reading). */
static void fan_out(uint8_t tag, const uint8_t *data, size_t len, struct io *io)
{
    uint8_t pkt[ATT_CHUNK + 1];
    pkt[0] = tag;
    memcpy(pkt + 1, data, len);
    for (size_t i = 0; i < n_clients;) {
        struct client *c = &clients[i];
        bool wants = c->attached && (tag == MONITOR_ATT_OUT ? c->want_out : c->want_err);
        if (!wants) {
            i++;
            continue;
        }
        ssize_t n = send(c->fd, pkt, len + 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->pending = malloc(len + 1);
            if (!c->pending) {
                client_drop(i, io);
                continue;
            }
            memcpy(c->pending, pkt, len + 1);
            c->pending_len = len + 1;
        } else if (n < 0) {
            client_drop(i, io);
            continue;
        }
        i++;
    }
}

static bool any_pending(void)
{
    for (size_t i = 0; i < n_clients; i++)
        if (clients[i].pending)
            return true;
    return false;
}

/* Waits (polling for room) until no attached client holds a packet its
 * socket could not take, or until deadline (mono_ns): at exit, so that a
 * client that reads gets the container's last output. A client whose
 * socket fails, or that still holds one at the deadline, is dropped: the
 * output after it goes to the others, and it is never overwritten. */
static void clients_flush(uint64_t deadline, struct io *io)
{
    while (any_pending()) {
        uint64_t now = mono_ns();
        struct pollfd p[CLIENTS_MAX];
        size_t at[CLIENTS_MAX];
        nfds_t np = 0;
        for (size_t i = 0; i < n_clients; i++)
            if (clients[i].pending) {
                p[np] = (struct pollfd){.fd = clients[i].fd, .events = POLLOUT};
                at[np++] = i;
            }
        if (now >= deadline) {
            for (nfds_t k = np; k-- > 0;)
                client_drop(at[k], io);
            return;
        }
        int r = poll(p, np, (int)((deadline - now + 999999) / 1000000));
        if (r < 0 && errno != EINTR)
            deadline = now; /* cannot wait: drop them */
        /* from the last: client_drop moves the last client into a hole */
        for (nfds_t k = np; r > 0 && k-- > 0;) {
            struct client *c = &clients[at[k]];
            if (!p[k].revents)
                continue;
            ssize_t n = send(c->fd, c->pending, c->pending_len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n >= 0) {
                free(c->pending);
                c->pending = NULL;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                client_drop(at[k], io);
            }
        }
    }
}

/* A packet from client i. */
static void client_input(size_t i, struct io *io)
{
    struct client *c = &clients[i];
    uint8_t pkt[ATT_CHUNK + 1];
    ssize_t n = recv(c->fd, pkt, sizeof(pkt) - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        client_drop(i, io);
        return;
    }
    if (!c->attached) {
        pkt[n] = '\0';
        ctl_request(i, io, (const char *)pkt);
        return;
    }
    switch (pkt[0]) {
    case MONITOR_ATT_IN:
        if (c->want_in && io->stdin_fd >= 0 && n > 1) {
            memcpy(io->in_buf, pkt + 1, (size_t)n - 1);
            io->in_len = (size_t)n - 1;
        }
        break;
    case MONITOR_ATT_CLOSE:
        /* The client's input ended. As Docker and containerd: with
         * stdin_once and no terminal the container's stdin closes and the
         * client stays for the output; otherwise the client's session
         * ends and the container's stdin stays open for the next one
         * (client_drop closes it for stdin_once: ^D on a terminal). */
        if (!c->want_in)
            break;
        if (io->stdin_once && !io->tty) {
            if (io->stdin_fd >= 0)
                close(io->stdin_fd);
            io->stdin_fd = -1;
            break;
        }
        client_drop(i, io);
        return;
    case MONITOR_ATT_RESIZE:
        if (io->tty && io->stdin_fd >= 0) {
            pkt[n] = '\0';
            unsigned w = 0, h = 0;
            if (sscanf((const char *)pkt + 1, "%u %u", &w, &h) == 2 && w < 65536 && h < 65536) {
                struct winsize ws = {.ws_row = (unsigned short)h, .ws_col = (unsigned short)w};
                ioctl(io->stdin_fd, TIOCSWINSZ, &ws);
            }
        }
        break;
    default:
        client_drop(i, io);
    }
}

/* Input taken by the container's stdin, as far as it goes. */
static void stdin_flush(struct io *io)
{
    if (!io->in_len || io->stdin_fd < 0) {
        io->in_len = 0;
        return;
    }
    ssize_t w = write(io->stdin_fd, io->in_buf, io->in_len);
    if (w > 0) {
        memmove(io->in_buf, io->in_buf + w, io->in_len - (size_t)w);
        io->in_len -= (size_t)w;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        io->in_len = 0; /* the container closed its stdin */
    }
}

/* ---- the loop ---- */

static int parse_fd(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v >= 0 && v < 65536 ? (int)v : -1;
}

static int usage(void)
{
    fputs("kinglet-monitor: started by kinglet only\n", stderr);
    return 2;
}

#ifdef KINGLET_SANITIZERS
/* A sanitizer build (local.mk) reports on stderr, which is /dev/null here:
 * to the file the test run names instead, appended to by every monitor. */
__attribute__((constructor)) static void sanitizer_report_to(void)
{
    const char *path = getenv("KINGLET_MONITOR_REPORT");
    int fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}
#endif

static const struct option long_opts[] = {
    {"init", required_argument, NULL, 'i'},      {"dir-fd", required_argument, NULL, 'd'},
    {"exec-fd", required_argument, NULL, 'e'},   {"report-fd", required_argument, NULL, 'r'},
    {"cgroup", required_argument, NULL, 'c'},    {"log-path", required_argument, NULL, 'l'},
    {"stdout-fd", required_argument, NULL, 'o'}, {"stderr-fd", required_argument, NULL, 'E'},
    {"tty-fd", required_argument, NULL, 't'},    {"stdin-fd", required_argument, NULL, 's'},
    {"ctl-fd", required_argument, NULL, 'C'},    {"stdin-once", no_argument, NULL, 'O'},
    {"buffer", required_argument, NULL, 'b'},    {NULL, 0, NULL, 0},
};

/* The options kinglet starts us with; 0 or -1 for usage. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.dir_fd = -1,
                       .exec_fd = -1,
                       .report_fd = -1,
                       .out_fd = -1,
                       .err_fd = -1,
                       .tty_fd = -1,
                       .stdin_fd = -1,
                       .ctl_fd = -1,
                       .buffer = 256 << 10};
    for (int c; (c = getopt_long(argc, argv, "", long_opts, NULL)) != -1;) {
        switch (c) {
        case 'i':
            o->init = (pid_t)atoi(optarg);
            break;
        case 'd':
            o->dir_fd = parse_fd(optarg);
            break;
        case 'e':
            o->exec_fd = parse_fd(optarg);
            break;
        case 'r':
            o->report_fd = parse_fd(optarg);
            break;
        case 'c':
            o->cgroup = optarg;
            break;
        case 'l':
            o->log_path = optarg;
            break;
        case 'o':
            o->out_fd = parse_fd(optarg);
            break;
        case 'E':
            o->err_fd = parse_fd(optarg);
            break;
        case 't':
            o->tty_fd = parse_fd(optarg);
            break;
        case 's':
            o->stdin_fd = parse_fd(optarg);
            break;
        case 'C':
            o->ctl_fd = parse_fd(optarg);
            break;
        case 'O':
            o->stdin_once = true;
            break;
        case 'b':
            o->buffer = (size_t)strtoul(optarg, NULL, 10);
            break;
        default:
            return -1;
        }
    }
    return o->init <= 0 || o->dir_fd < 0 ? -1 : 0;
}

/* Ignores the signals a terminal or kinglet could send, takes SIGCHLD
 * through a signalfd (returned; -1 when there is none) and leaves the PID
 * namespace our children would be born into. */
static int process_setup(void)
{
    prctl(PR_SET_NAME, "kinglet-monitor");
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);

    /* The process that cloned the init into a pod-wide PID namespace
     * (joined with setns) became us with that namespace still set for its
     * children, and the kernel refuses threads to a process whose
     * children's PID namespace is not its own (EINVAL): back to our own
     * before the writer thread is made. */
    int pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (pidns >= 0) {
        setns(pidns, CLONE_NEWPID);
        close(pidns);
    }
    return sfd;
}

/* Starts the log writer thread for o->log_path; the formatter of the log's
 * lines, or NULL. */
static struct logfmt *log_start(struct opts *o)
{
    if (o->buffer < 64 << 10 || o->buffer > 64 << 20)
        o->buffer = 256 << 10;
    struct logfmt *fmt = malloc(sizeof(*fmt));
    W.ring = malloc(o->buffer);
    W.cap = o->buffer;
    W.path = o->log_path;
    W.fd = open_log(o->log_path);
    W.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    if (!fmt || !W.ring || pthread_create(&th, &attr, writer_main, NULL) != 0) {
        /* Without a writer the output is drained and lost rather than
         * left to block the container. */
        free(W.ring);
        W.ring = NULL;
        W.cap = 0;
    }
    if (fmt)
        logfmt_init(fmt, LOGFMT_LINE_MAX);
    return fmt;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* What the loop works on. */
struct mon {
    struct opts o;
    int sfd;            /* SIGCHLD's signalfd, -1 */
    struct logfmt *fmt; /* NULL without a log */
    int outs[2];        /* the container's stdout (or pty master) and stderr; -1 at EOF */
    struct io io;
    uint64_t started; /* when the container's process started (exec-fd), 0 = unknown */
    bool init_done;
    int init_status;
};

static uint8_t out_buf[ATT_CHUNK];

/* n bytes of output stream i (in out_buf) to the log and attached clients */
static void out_data(struct mon *m, int i, size_t n)
{
    record_ns = real_ns();
    if (m->fmt)
        logfmt_feed(m->fmt, (enum logfmt_stream)i, out_buf, n, emit, NULL);
    fan_out(i ? MONITOR_ATT_ERR : MONITOR_ATT_OUT, out_buf, n, &m->io);
}

/* the end of output stream i: its partial line to the log */
static void out_end(struct mon *m, int i)
{
    record_ns = real_ns();
    if (m->fmt)
        logfmt_flush(m->fmt, (enum logfmt_stream)i, emit, NULL);
}

/* One round's poll set, and where each fd is in it (-1: not polled). */
struct polls {
    struct pollfd p[7 + CLIENTS_MAX];
    int np, at_sig, at_exec, at_out[2], at_ctl, at_in, at_wake, at_client;
    bool held; /* the log is behind: output paused, the writer's eventfd polled */
};

static void polls_build(const struct mon *m, struct polls *ps)
{
    struct pollfd *p = ps->p;
    int np = 0;
    ps->at_sig = ps->at_exec = ps->at_out[0] = ps->at_out[1] = ps->at_ctl = ps->at_in =
        ps->at_wake = -1;
    if (m->sfd >= 0)
        p[ps->at_sig = np++] = (struct pollfd){.fd = m->sfd, .events = POLLIN};
    if (m->o.exec_fd >= 0)
        p[ps->at_exec = np++] = (struct pollfd){.fd = m->o.exec_fd, .events = POLLIN};
    /* A client that has not taken its last packet pauses the output;
     * so does a log that keeps up but is behind (the writer's eventfd
     * says when a write ends; a stall is seen within LOG_STALL_NS). */
    bool paused = any_pending();
    bool held = false;
    if (W.ring) {
        pthread_mutex_lock(&W.mu);
        held = log_hold();
        pthread_mutex_unlock(&W.mu);
    }
    for (int i = 0; i < 2; i++)
        if (m->outs[i] >= 0 && !paused && !held)
            p[ps->at_out[i] = np++] = (struct pollfd){.fd = m->outs[i], .events = POLLIN};
    if (held && W.wake_fd >= 0)
        p[ps->at_wake = np++] = (struct pollfd){.fd = W.wake_fd, .events = POLLIN};
    if (m->o.ctl_fd >= 0 && n_clients < CLIENTS_MAX)
        p[ps->at_ctl = np++] = (struct pollfd){.fd = m->o.ctl_fd, .events = POLLIN};
    if (m->io.in_len && m->io.stdin_fd >= 0 && !m->io.tty)
        p[ps->at_in = np++] = (struct pollfd){.fd = m->io.stdin_fd, .events = POLLOUT};
    ps->at_client = np;
    for (size_t i = 0; i < n_clients; i++)
        /* no new input while the last is not taken */
        p[np++] = (struct pollfd){
            .fd = clients[i].fd,
            .events = (short)((m->io.in_len ? 0 : POLLIN) | (clients[i].pending ? POLLOUT : 0))};
    ps->np = np;
    ps->held = held;
}

static bool ready(const struct polls *ps, int at) { return at >= 0 && ps->p[at].revents; }

/* The container's output that is ready: read, or closed at its end. */
static void outs_read(struct mon *m, const struct polls *ps)
{
    for (int i = 0; i < 2; i++) {
        if (!ready(ps, ps->at_out[i]))
            continue;
        ssize_t n = read(m->outs[i], out_buf, sizeof(out_buf));
        if (n > 0) {
            out_data(m, i, (size_t)n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            /* EOF, or EIO from a pty whose last holder closed it */
            out_end(m, i);
            if (m->io.tty && m->outs[i] == m->io.stdin_fd)
                m->io.stdin_fd = -1;
            close(m->outs[i]);
            m->outs[i] = -1;
        }
    }
}

/* Clients, from the last (client_drop moves the last into a hole). */
static void clients_serve(struct mon *m, const struct polls *ps)
{
    for (size_t k = n_clients; k-- > 0;) {
        short rev = ps->p[ps->at_client + (int)k].revents;
        struct client *c = &clients[k];
        if ((rev & POLLOUT) && c->pending) {
            ssize_t n = send(c->fd, c->pending, c->pending_len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n >= 0) {
                free(c->pending);
                c->pending = NULL;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                client_drop(k, &m->io);
                continue;
            }
        }
        if (rev & (POLLIN | POLLHUP | POLLERR))
            client_input(k, &m->io);
    }
}

/* Reaps what has ended; the init's status when it is among them. */
static void children_reap(struct mon *m)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            break;
        if (pid == m->o.init) {
            m->init_status = st;
            m->init_done = true;
        }
    }
}

/* One round of the loop; -1 when poll fails. */
static int loop_once(struct mon *m)
{
    struct polls ps;
    polls_build(m, &ps);
    /* Without a signalfd, look for the exit now and then. */
    int r = poll(ps.p, (nfds_t)ps.np, ps.held ? 50 : m->sfd >= 0 ? -1 : 200);
    if (r < 0 && errno != EINTR)
        return -1;
    if (ready(&ps, ps.at_wake)) {
        uint64_t n;
        ssize_t k = read(W.wake_fd, &n, sizeof(n));
        (void)k;
    }
    if (ready(&ps, ps.at_exec)) {
        char c;
        if (read(m->o.exec_fd, &c, 1) == 1)
            m->started = real_ns();
        close(m->o.exec_fd);
        m->o.exec_fd = -1;
    }
    outs_read(m, &ps);
    clients_serve(m, &ps);
    stdin_flush(&m->io);
    if (ready(&ps, ps.at_ctl)) {
        int fd = accept4(m->o.ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0)
            clients[n_clients++] = (struct client){.fd = fd};
    }
    if (ready(&ps, ps.at_sig)) {
        struct signalfd_siginfo si;
        while (read(m->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
            ;
    }
    children_reap(m);
    return 0;
}

/* At the init's exit: what the container wrote before it ended goes to the
 * log and to attached clients first (orphans holding the pipes do not hold
 * us), then clients get EOF and the log is written out. */
static void outs_finish(struct mon *m)
{
    uint64_t flush_by = mono_ns() + EXIT_FLUSH_NS;
    for (int i = 0; i < 2; i++) {
        if (m->outs[i] < 0)
            continue;
        for (int rounds = 0; rounds < 1024; rounds++) {
            log_wait_room();
            /* a client keeps one packet pending: the next waits for it */
            clients_flush(flush_by, &m->io);
            ssize_t n = read(m->outs[i], out_buf, sizeof(out_buf));
            if (n <= 0)
                break;
            out_data(m, i, (size_t)n);
        }
        out_end(m, i);
    }
    /* Attached clients get what they have not taken (until the deadline),
     * then EOF. */
    clients_flush(flush_by, &m->io);
    while (n_clients)
        client_drop(n_clients - 1, &m->io);
    if (W.ring) {
        /* what was dropped since the last record, counted too */
        record_ns = real_ns();
        pthread_mutex_lock(&W.mu);
        mark_dropped(0);
        pthread_mutex_unlock(&W.mu);
        writer_drain(5000);
    }
    if (W.fd >= 0)
        fsync(W.fd);
}

int main(int argc, char **argv)
{
    static struct mon m;
    if (parse_opts(argc, argv, &m.o) < 0)
        return usage();
    m.sfd = process_setup();
    if (m.o.log_path)
        m.fmt = log_start(&m.o);
    struct opts *o = &m.o;
    m.outs[0] = o->tty_fd >= 0 ? o->tty_fd : o->out_fd;
    m.outs[1] = o->tty_fd >= 0 ? -1 : o->err_fd;
    for (int i = 0; i < 2; i++)
        if (m.outs[i] >= 0)
            set_nonblock(m.outs[i]);
    if (o->ctl_fd >= 0)
        set_nonblock(o->ctl_fd);
    m.io = (struct io){.stdin_fd = o->tty_fd >= 0 ? o->tty_fd : o->stdin_fd,
                       .tty = o->tty_fd >= 0,
                       .stdin_once = o->stdin_once};
    if (m.io.stdin_fd >= 0 && !m.io.tty)
        set_nonblock(m.io.stdin_fd);
    while (!m.init_done)
        if (loop_once(&m) < 0)
            break;
    if (o->exec_fd >= 0) {
        char c;
        if (read(o->exec_fd, &c, 1) == 1)
            m.started = real_ns();
    }
    outs_finish(&m);
    record_exit(o, m.init_status, m.started);
    /* Reparented leftovers of a container without a pid namespace: reap
     * what is already dead, leave the rest to the system. */
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    _exit(0);
}
