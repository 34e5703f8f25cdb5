/* grpc-load: a closed-loop load generator for one unary gRPC method.
 *
 * Usage: grpc-load -a unix:PATH|tcp:HOST:PORT [-p /pkg.Service/Method]
 *                  [-c CONNECTIONS] [-m STREAMS_PER_CONNECTION] [-t THREADS]
 *                  [-w WARMUP_S] [-d DURATION_S] [-P SERVER_PID]
 *
 * Opens CONNECTIONS HTTP/2 (prior knowledge) connections, spread over
 * THREADS threads (each its own epoll loop), and keeps STREAMS requests in
 * flight on each: a new request is sent as soon as one completes, so
 * CONNECTIONS x STREAMS is the number of concurrent callers. The request is
 * an empty protobuf message (5-byte gRPC prefix, length 0).
 *
 * A call counts as a success only with HTTP status 200, at least one
 * response message, and `grpc-status: 0` in the trailers; everything else
 * (other status, RST_STREAM, missing trailers) is an error. Calls completed
 * during the warm-up are not counted. Prints one line of key=value pairs:
 *   ok=N errors=N rps=X p50_us=X p90_us=X p99_us=X max_us=X mean_us=X
 *   client_cpu_pct=X (CPU used by this process, in % of one core, during the
 *   measured window), host_busy_pct=X (the whole machine's CPUs, in % of
 *   all of them: near 100 means client + server + others saturated it)
 *   and, with -P, server_cpu_pct=X (like client_cpu_pct, for that process,
 *   all its threads)
 * Exits 1 on a usage or connection error.
 *
 * Built by bench/grpc-bench with: cc -O2 -o grpc-load grpc-load.c -lnghttp2 -lpthread */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define MAX_CONNS 4096
#define MAX_THREADS 64

struct stream {
    uint64_t start_ns;
    int http_status;
    int grpc_status; /* -1 until seen */
    size_t body_bytes;
};

struct worker;

struct conn {
    struct worker *w;
    int fd;
    nghttp2_session *session;
    uint8_t *wbuf;
    size_t wlen, wcap;
    bool want_out;
    bool dead;
};

struct worker {
    pthread_t thread;
    int epfd;
    struct conn *conns;
    int n_conns;
    uint64_t *samples; /* latencies (ns) of successful calls in the window */
    size_t n_samples, cap_samples;
    uint64_t errors;
    uint64_t warmup_end_ns, end_ns;
    const char *fail; /* a fatal error */
};

static const char *opt_addr;
static const char *opt_path = "/runtime.v1.RuntimeService/Version";
static int opt_conns = 1, opt_streams = 1, opt_threads = 1;
static double opt_warmup = 1.0, opt_duration = 5.0;
static int opt_server_pid;
static const uint8_t request_body[5] = {0, 0, 0, 0, 0};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static ssize_t body_read(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *user_data)
{
    size_t *off = src->ptr;
    size_t n = sizeof(request_body) - *off;
    if (n > len)
        n = len;
    memcpy(buf, request_body + *off, n);
    *off += n;
    if (*off == sizeof(request_body)) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        free(off);
    }
    return (ssize_t)n;
}

#define NV(n, v)                                                                                 \
    {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}

static int submit_one(struct conn *c)
{
    struct stream *st = calloc(1, sizeof(*st));
    size_t *off = calloc(1, sizeof(*off));
    if (!st || !off) {
        free(st);
        free(off);
        return -1;
    }
    st->grpc_status = -1;
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", opt_path),
        NV(":authority", "localhost"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "grpc-load"),
    };
    nghttp2_data_provider dp = {.source.ptr = off, .read_callback = body_read};
    st->start_ns = now_ns();
    int32_t id = nghttp2_submit_request(c->session, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]),
                                        &dp, st);
    if (id < 0) {
        free(st);
        free(off);
        return -1;
    }
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct stream *st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    if (!st)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        st->http_status = atoi((const char *)value);
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        st->grpc_status = (valuelen == 1 && value[0] == '0') ? 0 : 1000;
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user_data)
{
    struct stream *st = nghttp2_session_get_stream_user_data(s, stream_id);
    if (st)
        st->body_bytes += len;
    return 0;
}

static void record(struct worker *w, uint64_t lat, bool ok, uint64_t end)
{
    if (end < w->warmup_end_ns || end > w->end_ns)
        return;
    if (!ok) {
        w->errors++;
        return;
    }
    if (w->n_samples == w->cap_samples) {
        size_t cap = w->cap_samples ? w->cap_samples * 2 : 65536;
        uint64_t *p = realloc(w->samples, cap * sizeof(*p));
        if (!p) {
            w->fail = "out of memory";
            return;
        }
        w->samples = p;
        w->cap_samples = cap;
    }
    w->samples[w->n_samples++] = lat;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    struct conn *c = user_data;
    struct stream *st = nghttp2_session_get_stream_user_data(s, stream_id);
    if (!st)
        return 0;
    uint64_t end = now_ns();
    bool ok = error_code == NGHTTP2_NO_ERROR && st->http_status == 200 && st->grpc_status == 0 &&
              st->body_bytes >= 5;
    record(c->w, end - st->start_ns, ok, end);
    free(st);
    if (end < c->w->end_ns && submit_one(c) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int conn_flush(struct conn *c)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c->session, &data)) > 0) {
            if (c->wlen + (size_t)n > c->wcap) {
                size_t cap = (c->wlen + (size_t)n) * 2;
                uint8_t *p = realloc(c->wbuf, cap);
                if (!p)
                    return -1;
                c->wbuf = p;
                c->wcap = cap;
            }
            memcpy(c->wbuf + c->wlen, data, (size_t)n);
            c->wlen += (size_t)n;
        }
        if (n < 0)
            return -1;
        if (c->wlen == 0)
            break;
        ssize_t k = write(c->fd, c->wbuf, c->wlen);
        if (k < 0) {
            if (errno == EAGAIN)
                break;
            return -1;
        }
        memmove(c->wbuf, c->wbuf + k, c->wlen - (size_t)k);
        c->wlen -= (size_t)k;
        if (c->wlen > 0)
            break;
    }
    bool want_out = c->wlen > 0;
    if (want_out != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(c->w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want_out;
    }
    return 0;
}

static int dial(void)
{
    int fd;
    if (strncmp(opt_addr, "unix:", 5) == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(opt_addr + 5) >= sizeof(sa.sun_path))
            return -1;
        strcpy(sa.sun_path, opt_addr + 5);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            goto fail;
    } else if (strncmp(opt_addr, "tcp:", 4) == 0) {
        char host[256];
        const char *colon = strrchr(opt_addr + 4, ':');
        if (!colon || (size_t)(colon - opt_addr - 4) >= sizeof(host))
            return -1;
        memcpy(host, opt_addr + 4, (size_t)(colon - opt_addr - 4));
        host[colon - opt_addr - 4] = '\0';
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
        if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
            return -1;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int r = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (r < 0)
            goto fail;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    } else {
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < w->n_conns; i++) {
        struct conn *c = &w->conns[i];
        c->w = w;
        c->fd = dial();
        if (c->fd < 0) {
            w->fail = "cannot connect";
            return NULL;
        }
        nghttp2_session_client_new(&c->session, cbs, c);
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
            {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
        };
        nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2);
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 16 << 20);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev);
        for (int k = 0; k < opt_streams; k++)
            if (submit_one(c) < 0) {
                w->fail = "cannot submit";
                return NULL;
            }
        if (conn_flush(c) < 0) {
            w->fail = "write failed";
            return NULL;
        }
    }
    nghttp2_session_callbacks_del(cbs);

    uint8_t rbuf[64 * 1024];
    struct epoll_event evs[64];
    while (!w->fail) {
        uint64_t t = now_ns();
        if (t >= w->end_ns)
            break;
        int timeout = (int)((w->end_ns - t) / 1000000) + 1;
        int n = epoll_wait(w->epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR) {
            w->fail = "epoll_wait failed";
            break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->dead)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                ssize_t k = read(c->fd, rbuf, sizeof(rbuf));
                if (k == 0 || (k < 0 && errno != EAGAIN)) {
                    w->fail = "server closed a connection";
                    c->dead = true;
                    continue;
                }
                if (k > 0 && nghttp2_session_mem_recv(c->session, rbuf, (size_t)k) < 0) {
                    w->fail = "HTTP/2 protocol error";
                    c->dead = true;
                    continue;
                }
            }
            if (conn_flush(c) < 0) {
                w->fail = "write failed";
                c->dead = true;
            }
        }
    }
    for (int i = 0; i < w->n_conns; i++) {
        struct conn *c = &w->conns[i];
        if (c->session) {
            /* Streams still open are not counted. */
            nghttp2_session_del(c->session);
        }
        if (c->fd >= 0)
            close(c->fd);
        free(c->wbuf);
    }
    close(w->epfd);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* utime + stime of a process, from /proc/PID/stat; -1 if unreadable. */
static double proc_cpu_s(int pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    char *p = strrchr(line, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Busy and total jiffies of all CPUs, from /proc/stat. */
static void host_cpu(unsigned long long *busy, unsigned long long *total)
{
    unsigned long long v[8] = {0};
    *busy = *total = 0;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n != 8)
        return;
    for (int i = 0; i < 8; i++)
        *total += v[i];
    *busy = *total - v[3] - v[4]; /* minus idle and iowait */
}

static void usage(void)
{
    fprintf(stderr, "usage: grpc-load -a unix:PATH|tcp:HOST:PORT [-p METHOD_PATH] [-c CONNS] "
                    "[-m STREAMS] [-t THREADS] [-w WARMUP_S] [-d DURATION_S] [-P SERVER_PID]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "a:p:c:m:t:w:d:P:")) != -1) {
        switch (opt) {
        case 'a': opt_addr = optarg; break;
        case 'p': opt_path = optarg; break;
        case 'c': opt_conns = atoi(optarg); break;
        case 'm': opt_streams = atoi(optarg); break;
        case 't': opt_threads = atoi(optarg); break;
        case 'w': opt_warmup = atof(optarg); break;
        case 'd': opt_duration = atof(optarg); break;
        case 'P': opt_server_pid = atoi(optarg); break;
        default: usage();
        }
    }
    if (!opt_addr || opt_conns < 1 || opt_conns > MAX_CONNS || opt_streams < 1 ||
        opt_streams > 1000 || opt_threads < 1 || opt_threads > MAX_THREADS ||
        opt_warmup < 0 || opt_duration <= 0)
        usage();
    if (opt_threads > opt_conns)
        opt_threads = opt_conns;

    struct worker ws[MAX_THREADS] = {0};
    struct conn *conns = calloc((size_t)opt_conns, sizeof(*conns));
    if (!conns)
        return 1;
    uint64_t start = now_ns();
    uint64_t warmup_end = start + (uint64_t)(opt_warmup * 1e9);
    uint64_t end = warmup_end + (uint64_t)(opt_duration * 1e9);
    int next = 0;
    for (int i = 0; i < opt_threads; i++) {
        struct worker *w = &ws[i];
        w->n_conns = opt_conns / opt_threads + (i < opt_conns % opt_threads);
        w->conns = conns + next;
        next += w->n_conns;
        w->warmup_end_ns = warmup_end;
        w->end_ns = end;
    }
    for (int i = 0; i < opt_threads; i++)
        pthread_create(&ws[i].thread, NULL, worker_run, &ws[i]);
    /* CPU over the measured window only. */
    uint64_t t = now_ns();
    if (t < warmup_end) {
        struct timespec d = {(time_t)((warmup_end - t) / 1000000000u),
                             (long)((warmup_end - t) % 1000000000u)};
        nanosleep(&d, NULL);
    }
    double cpu0 = cpu_s();
    double scpu0 = opt_server_pid ? proc_cpu_s(opt_server_pid) : -1;
    unsigned long long hb0, ht0, hb1, ht1;
    host_cpu(&hb0, &ht0);
    uint64_t w0 = now_ns();
    t = now_ns();
    if (t < end) {
        struct timespec d = {(time_t)((end - t) / 1000000000u), (long)((end - t) % 1000000000u)};
        nanosleep(&d, NULL);
    }
    double cpu1 = cpu_s();
    double scpu1 = opt_server_pid ? proc_cpu_s(opt_server_pid) : -1;
    host_cpu(&hb1, &ht1);
    double wall = (double)(now_ns() - w0) / 1e9;
    for (int i = 0; i < opt_threads; i++)
        pthread_join(ws[i].thread, NULL);

    size_t total = 0;
    uint64_t errors = 0;
    for (int i = 0; i < opt_threads; i++) {
        if (ws[i].fail) {
            fprintf(stderr, "grpc-load: %s: %s\n", opt_addr, ws[i].fail);
            return 1;
        }
        total += ws[i].n_samples;
        errors += ws[i].errors;
    }
    uint64_t *all = malloc((total ? total : 1) * sizeof(*all));
    if (!all)
        return 1;
    size_t k = 0;
    double sum = 0;
    for (int i = 0; i < opt_threads; i++) {
        memcpy(all + k, ws[i].samples, ws[i].n_samples * sizeof(*all));
        k += ws[i].n_samples;
        free(ws[i].samples);
    }
    qsort(all, total, sizeof(*all), cmp_u64);
    for (size_t i = 0; i < total; i++)
        sum += (double)all[i];
#define PCT(p) (total ? (double)all[(size_t)((double)(total - 1) * (p))] / 1e3 : 0.0)
    printf("ok=%zu errors=%llu rps=%.0f p50_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f "
           "mean_us=%.1f client_cpu_pct=%.0f",
           total, (unsigned long long)errors, (double)total / opt_duration, PCT(0.50), PCT(0.90),
           PCT(0.99), total ? (double)all[total - 1] / 1e3 : 0.0, total ? sum / total / 1e3 : 0.0,
           (cpu1 - cpu0) / wall * 100);
    printf(" host_busy_pct=%.0f", ht1 > ht0 ? 100.0 * (double)(hb1 - hb0) / (double)(ht1 - ht0) : -1.0);
    if (opt_server_pid)
        printf(" server_cpu_pct=%.0f", scpu0 >= 0 && scpu1 >= 0 ? (scpu1 - scpu0) / wall * 100 : -1.0);
    printf("\n");
    free(all);
    free(conns);
    return 0;
}
