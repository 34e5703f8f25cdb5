/* Listeners, method routing and graceful shutdown. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "grpc/internal.h"

static int method_cmp(const void *a, const void *b)
{
    return strcmp(((const struct method *)a)->path, ((const struct method *)b)->path);
}

int grpc_server_new(uv_loop_t *loop, const struct grpc_server_options *opts,
                    struct grpc_server **ret)
{
    struct grpc_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->loop = loop;
    if (opts)
        srv->opts = *opts;
    if (!srv->opts.max_concurrent_streams)
        srv->opts.max_concurrent_streams = 1024;
    if (!srv->opts.max_connections)
        srv->opts.max_connections = 1024;
    struct {
        uint64_t *v, def;
    } defaults[] = {
        {&srv->opts.handshake_timeout_ms, 10000},
        {&srv->opts.idle_timeout_ms, 300000},
        {&srv->opts.keepalive_time_ms, 120000},
        {&srv->opts.keepalive_timeout_ms, 20000},
        {&srv->opts.request_timeout_ms, 60000},
        {&srv->opts.stall_timeout_ms, 60000},
        {&srv->opts.max_request_memory, 128u << 20},
        {&srv->opts.max_connection_response_memory, 32u << 20},
        {&srv->opts.max_response_memory, 256u << 20},
    };
    for (size_t i = 0; i < ARRAY_SIZE(defaults); i++)
        if (!*defaults[i].v)
            *defaults[i].v = defaults[i].def;
    link_init(&srv->conns);
    if (conn_callbacks_new(&srv->callbacks) < 0 || nghttp2_option_new(&srv->h2opts) != 0) {
        grpc_server_free(srv);
        return -ENOMEM;
    }
    /* Keep a misbehaving peer from making us queue unbounded control
     * frames or reserve unbounded stream state. */
    nghttp2_option_set_max_outbound_ack(srv->h2opts, 1000);
    nghttp2_option_set_max_settings(srv->h2opts, 32);
    nghttp2_option_set_max_deflate_dynamic_table_size(srv->h2opts, 4096);
    /* The library's defaults, stated: a client resetting streams faster
     * than 33 a second after a burst of 1000 (rapid reset, CVE-2023-44487)
     * and a header block of more than 8 CONTINUATION frames (CVE-2024-28182)
     * end the connection. */
    nghttp2_option_set_stream_reset_rate_limit(srv->h2opts, 1000, 33);
    nghttp2_option_set_max_continuations(srv->h2opts, 8);
    /* By default a server session keeps each closed stream (~160 bytes)
     * for the priority tree, up to SETTINGS_MAX_CONCURRENT_STREAMS of
     * them: a busy connection ends up holding ~160 kB that gRPC never
     * uses (it sends no PRIORITY frames). */
    nghttp2_option_set_no_closed_streams(srv->h2opts, 1);
    *ret = srv;
    return 0;
}

int grpc_server_add_method(struct grpc_server *srv, const char *path, grpc_handler_fn fn,
                           void *data)
{
    bool known;
    if (server_find_method(srv, path, &known))
        return -EEXIST;
    struct method *m = realloc(srv->methods, (srv->n_methods + 1) * sizeof(*m));
    if (!m)
        return -ENOMEM;
    srv->methods = m;
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    m[srv->n_methods++] = (struct method){.path = p, .fn = fn, .data = data};
    qsort(srv->methods, srv->n_methods, sizeof(*m), method_cmp);
    return 0;
}

const struct method *server_find_method(const struct grpc_server *srv, const char *path,
                                        bool *ret_service_known)
{
    struct method key = {.path = (char *)path};
    const struct method *m =
        srv->n_methods ? bsearch(&key, srv->methods, srv->n_methods, sizeof(key), method_cmp)
                       : NULL;
    *ret_service_known = false;
    if (m) {
        *ret_service_known = true;
        return m;
    }
    const char *slash = path[0] == '/' ? strchr(path + 1, '/') : NULL;
    if (!slash)
        return NULL;
    size_t n = (size_t)(slash - path + 1); /* "/pkg.Service/" */
    for (size_t i = 0; i < srv->n_methods; i++)
        if (strncmp(srv->methods[i].path, path, n) == 0) {
            *ret_service_known = true;
            break;
        }
    return NULL;
}

int server_make_room(struct grpc_server *srv, struct conn *c, size_t add)
{
    while (srv->pending + add > srv->opts.max_response_memory) {
        struct conn *big = NULL;
        for (struct link *l = srv->conns.next; l != &srv->conns; l = l->next) {
            struct conn *x = container_of(l, struct conn, node);
            if (x != c && !x->evicting && (!big || x->pending > big->pending))
                big = x;
        }
        /* Never close a connection for one that already holds more. */
        if (!big || big->pending <= c->pending)
            return -ENOBUFS;
        conn_evict(big, "the daemon's response memory is exhausted");
    }
    return 0;
}

int server_shed_requests(struct grpc_server *srv, struct grpc_call *call, size_t add)
{
    while (srv->buffered + add > srv->opts.max_request_memory) {
        struct conn *big = NULL;
        for (struct link *l = srv->conns.next; l != &srv->conns; l = l->next) {
            struct conn *x = container_of(l, struct conn, node);
            if (!big || x->buffered > big->buffered)
                big = x;
        }
        struct grpc_call *victim = NULL;
        for (struct link *l = big ? big->calls.next : NULL; l && l != &big->calls; l = l->next) {
            struct grpc_call *x = container_of(l, struct grpc_call, node);
            if (!victim || x->in.len > victim->in.len)
                victim = x;
        }
        /* Refuse the largest request, unless it is this one (or this one
         * would become as large). */
        if (!victim || victim == call || victim->in.len <= call->in.len + add)
            return -ENOBUFS;
        size_t before = srv->buffered;
        call_respond_error(victim, GRPC_STATUS_RESOURCE_EXHAUSTED,
                           "too many request bytes in flight in the daemon (limit %llu)",
                           (unsigned long long)srv->opts.max_request_memory);
        if (srv->buffered >= before)
            return -ENOBUFS;
    }
    return 0;
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct grpc_server *srv = listener->data;
    if (status < 0) {
        log_warn("grpc: accept: %s", uv_strerror(status));
        return;
    }
    conn_accept(srv, listener);
}

/* A socket file left by a daemon that is gone can be replaced; one that
 * still accepts connections belongs to a live daemon. */
static int check_stale_socket(const char *path, struct err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : err_set(err, errno, "stat `%s`", path);
    if (!S_ISSOCK(st.st_mode))
        return err_set(err, EEXIST, "`%s` exists and is not a socket; not replacing it", path);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, errno, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return err_set(err, EADDRINUSE, "another daemon is listening on `%s`", path);
    if (errno != ECONNREFUSED)
        return err_set(err, errno, "probe `%s`", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return err_set(err, errno, "remove stale socket `%s`", path);
    log_info("replaced stale socket `%s`", path);
    return 0;
}

int grpc_server_listen_unix(struct grpc_server *srv, const char *path, int mode, struct err *err)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path))
        return err_set(err, ENAMETOOLONG, "socket path `%s`", path);
    char dir[sizeof(sa.sun_path)];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        int r = mkdir_p(dir, 0711);
        if (r < 0)
            return err_set(err, -r, "create `%s`", dir);
    }
    /* The socket is bound and listening under a temporary name, then
     * renamed into place: whoever sees the path (kubelet polling for it)
     * can connect at once, and a connect never meets a bound socket that
     * does not listen yet. RENAME_NOREPLACE keeps a daemon that started at
     * the same moment from being replaced. The temporary name does not fit
     * sun_path when the path is near its limit: then the socket is bound
     * in place. A leftover at the temporary name is replaced only if it is
     * a socket nobody listens on, like one at the path itself. */
    char tmp[sizeof(sa.sun_path)];
    int n = snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    const char *bind_path = n > 0 && (size_t)n < sizeof(tmp) ? tmp : path;
    int r = check_stale_socket(path, err);
    if (r == 0 && bind_path == tmp)
        r = check_stale_socket(tmp, err);
    if (r < 0)
        return r;
    uv_pipe_t *p = malloc(sizeof(*p));
    if (!p)
        return err_set(err, ENOMEM, "listener");
    uv_pipe_init(srv->loop, p, 0);
    p->data = srv;
    /* No umask switch around the bind: the umask belongs to the whole
     * process, and worker threads creating state directories meanwhile
     * got it (a 0117 umask made <root>/net a 0600 directory). The daemon's
     * umask (022, set at start) lets nobody but the owner write to, that
     * is connect to, the new socket before the chmod below. */
    r = uv_pipe_bind(p, bind_path);
    if (r == 0 && chmod(bind_path, (mode_t)mode) < 0)
        r = -errno;
    if (r == 0)
        r = uv_listen((uv_stream_t *)p, 511, on_connection);
    if (r == 0 && bind_path == tmp && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE)) {
        r = -errno;
        if (r == -EINVAL && rename(tmp, path) == 0) /* a filesystem without NOREPLACE */
            r = 0;
    }
    if (r < 0) {
        if (bind_path == tmp)
            unlink(tmp);
        uv_close((uv_handle_t *)p, (uv_close_cb)free);
        if (r == -EEXIST)
            return err_set(err, EADDRINUSE, "another daemon took `%s` while this one started",
                           path);
        return err_set(err, -r, "listen on `%s`", path);
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        srv->unix_dev = st.st_dev;
        srv->unix_ino = st.st_ino;
    }
    srv->unix_listener = p;
    srv->unix_path = strdup(path);
    return 0;
}

int grpc_server_listen_tcp(struct grpc_server *srv, const char *host, int port, struct err *err)
{
    struct sockaddr_storage sa;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) < 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) < 0)
        return err_set(err, EINVAL, "bad listen address `%s`", host);
    uv_tcp_t *t = malloc(sizeof(*t));
    if (!t)
        return err_set(err, ENOMEM, "listener");
    uv_tcp_init(srv->loop, t);
    t->data = srv;
    int r = uv_tcp_bind(t, (struct sockaddr *)&sa, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)t, 511, on_connection);
    if (r < 0) {
        uv_close((uv_handle_t *)t, (uv_close_cb)free);
        return err_set(err, -r, "listen on %s:%d", host, port);
    }
    srv->tcp_listener = t;
    return 0;
}

static void handle_free_cb(uv_handle_t *h)
{
    struct grpc_server *srv = h->data;
    free(h);
    server_handle_closed(srv);
}

static void close_handle(struct grpc_server *srv, uv_handle_t *h)
{
    srv->pending_closes++;
    uv_close(h, handle_free_cb);
}

static void close_listeners(struct grpc_server *srv)
{
    if (srv->unix_listener) {
        /* Remove the socket only if it is still ours. */
        struct stat st;
        if (srv->unix_path && stat(srv->unix_path, &st) == 0 && st.st_dev == srv->unix_dev &&
            st.st_ino == srv->unix_ino)
            unlink(srv->unix_path);
        close_handle(srv, (uv_handle_t *)srv->unix_listener);
        srv->unix_listener = NULL;
    }
    if (srv->tcp_listener) {
        close_handle(srv, (uv_handle_t *)srv->tcp_listener);
        srv->tcp_listener = NULL;
    }
}

static void grace_expired(uv_timer_t *t)
{
    struct grpc_server *srv = t->data;
    if (srv->n_conns)
        log_warn("shutdown: closing %zu connection(s) with calls still in flight", srv->n_conns);
    while (!link_empty(&srv->conns))
        conn_close(container_of(srv->conns.next, struct conn, node));
}

/* Reports shutdown done once every connection and handle is closed. */
static void maybe_done(struct grpc_server *srv)
{
    if (!srv->shutting_down || !srv->done || srv->n_conns || srv->pending_closes)
        return;
    if (srv->grace_timer) {
        uv_timer_stop(srv->grace_timer);
        close_handle(srv, (uv_handle_t *)srv->grace_timer);
        srv->grace_timer = NULL;
        return;
    }
    void (*done)(void *) = srv->done;
    srv->done = NULL;
    done(srv->done_data);
}

void server_handle_closed(struct grpc_server *srv)
{
    srv->pending_closes--;
    maybe_done(srv);
}

void grpc_server_shutdown(struct grpc_server *srv, uint64_t grace_ms, void (*done)(void *),
                          void *data)
{
    if (srv->shutting_down)
        return;
    srv->shutting_down = true;
    srv->done = done;
    srv->done_data = data;
    close_listeners(srv);
    srv->grace_timer = malloc(sizeof(*srv->grace_timer));
    if (srv->grace_timer) {
        uv_timer_init(srv->loop, srv->grace_timer);
        srv->grace_timer->data = srv;
        uv_timer_start(srv->grace_timer, grace_expired, grace_ms, 0);
    }
    struct link *l = srv->conns.next;
    while (l != &srv->conns) {
        struct conn *c = container_of(l, struct conn, node);
        l = l->next;
        conn_goaway(c);
    }
    maybe_done(srv);
}

size_t grpc_server_connections(const struct grpc_server *srv) { return srv->n_conns; }

void grpc_server_usage(const struct grpc_server *srv, size_t *ret_request_bytes,
                       size_t *ret_response_bytes)
{
    *ret_request_bytes = srv->buffered;
    *ret_response_bytes = srv->pending;
}

void grpc_server_free(struct grpc_server *srv)
{
    if (!srv)
        return;
    for (size_t i = 0; i < srv->n_methods; i++)
        free(srv->methods[i].path);
    free(srv->methods);
    free(srv->unix_path);
    if (srv->callbacks)
        nghttp2_session_callbacks_del(srv->callbacks);
    if (srv->h2opts)
        nghttp2_option_del(srv->h2opts);
    free(srv);
}
