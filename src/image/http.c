/* HTTP/1.1 for the registry client, over TCP or TLS (mbedTLS 2.28), with
 * proxies from the environment; blocking, for pull worker threads and the
 * sandboxed helper process (which allows what this uses: IPv4/IPv6
 * sockets, rtnetlink for getaddrinfo, poll).
 *
 * Why our own: libcurl was the only user of OpenSSL in the binary (Debian
 * builds it on OpenSSL, 3.9 MB of a static kinglet), while a registry needs
 * little of HTTP: GET and a form POST, answers read by http-parser (the
 * parser the streaming server uses), no redirect followed here (registry.c
 * checks each hop), connections kept alive and reused by the session's
 * threads, TLS sessions resumed across the parallel layer downloads.
 *
 * What curl did and this keeps: a 30 s connect timeout; TCP keepalive (60 s
 * idle, 60 s interval);
 * TCP_NODELAY; "User-Agent: kinglet/VERSION"; "Accept: * / *" by default;
 * the server certificate verified against the registry's certs.d ca.crt
 * and the system bundle (curl's CAINFO plus OpenSSL's CApath), its name
 * against the host (DNS names by mbedTLS, IP addresses here: mbedTLS 2.28
 * checks none), the certs.d client.cert/client.key presented when asked;
 * no verification only for a registry configured insecure. TLS 1.2 with
 * ECDHE and AEAD suites only, as the streaming server offers.
 *
 * Proxies, read as libcurl 7.88 reads them: http_proxy (lowercase only,
 * against httpoxy) for http URLs, https_proxy or HTTPS_PROXY for https,
 * then all_proxy or ALL_PROXY; no_proxy or NO_PROXY exempts hosts. Plain
 * http goes to the proxy in absolute form, https through a CONNECT tunnel;
 * credentials in the proxy URL go as Proxy-Authorization: Basic. Only
 * http:// proxies are spoken (curl's socks and https:// proxies are
 * refused with a message naming the proxy). URLs and the choice of proxy
 * are in http_url.c.
 *
 * Deadlines (the progress timeout T and minimum rate R of the pool, the
 * daemon's --image-pull-progress-timeout and --image-pull-min-rate): each
 * phase that waits for a peer has T at most, counted from its start and
 * never reset by what arrives: the TCP connect (30 s at most), the TLS
 * handshake, a proxy's answer to CONNECT, and an answer's head (1xx
 * answers do not reset it, so 100-Continue forever ends). A body is read
 * as long as it comes at R bytes/s or faster: fewer than R * T bytes over
 * T of waiting for it fails the transfer. Only time spent waiting on the
 * socket counts, so a consumer that is slow to read (unpacking) is not
 * taken for a slow server; and a transfer of S bytes cannot last longer
 * than about S / R + T of waiting. As containerd's and CRI-O's pull
 * progress timeouts (kubelet's image-pull-progress-deadline, 1 min). */
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h> /* its error codes only */
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "base/tls.h"
#include "image/http_internal.h"
#include "image/internal.h"

#define CONNECT_TIMEOUT_MS 30000
#define SLICE_MS           500 /* how often a wait looks at the cancel flag */
#define READ_CHUNK         (256u << 10)
#define IDLE_MAX           16 /* idle connections kept per pool */
#define TLS_IDLE_MS        60000

static const char *const system_ca_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL */
    "/etc/ssl/ca-bundle.pem",                            /* openSUSE */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* RHEL */
    "/etc/ssl/cert.pem",                                 /* Alpine, the BSDs */
};

/* ---- response parsing ------------------------------------------------------ */

static int on_message_begin(http_parser *p)
{
    struct http_resp *r = p->data;
    r->field.len = r->value.len = 0;
    r->in_value = false;
    free(r->content_type);
    free(r->www_auth);
    free(r->location);
    r->content_type = r->www_auth = r->location = NULL;
    return 0;
}

static int head_add(struct http_resp *r, struct buf *b, const char *at, size_t len)
{
    r->head_bytes += len;
    if (r->head_bytes > HTTP_HEAD_MAX)
        return -1;
    if (buf_append(b, at, len) < 0) {
        r->oom = true;
        return -1;
    }
    return 0;
}

static char *trimmed(const struct buf *b)
{
    size_t s = 0, e = b->len;
    while (s < e && (b->data[s] == ' ' || b->data[s] == '\t'))
        s++;
    while (e > s && (b->data[e - 1] == ' ' || b->data[e - 1] == '\t'))
        e--;
    return strndup((const char *)b->data + s, e - s);
}

/* A complete header line (field and value): keeps the ones we use. */
static int header_done(struct http_resp *r)
{
    if (!r->in_value)
        return 0;
    char **slot = NULL;
    size_t fl = r->field.len;
    const char *f = (const char *)r->field.data;
    if (fl == 12 && strncasecmp(f, "Content-Type", fl) == 0)
        slot = &r->content_type;
    else if (fl == 16 && strncasecmp(f, "WWW-Authenticate", fl) == 0)
        slot = &r->www_auth;
    else if (fl == 8 && strncasecmp(f, "Location", fl) == 0)
        slot = &r->location;
    if (slot) {
        char *v = trimmed(&r->value);
        if (!v) {
            r->oom = true;
            return -1;
        }
        free(*slot);
        *slot = v;
    }
    r->field.len = r->value.len = 0;
    r->in_value = false;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct http_resp *r = p->data;
    if (header_done(r) < 0)
        return -1;
    return head_add(r, &r->field, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct http_resp *r = p->data;
    r->in_value = true;
    return head_add(r, &r->value, at, len);
}

static int on_status(http_parser *p, const char *at, size_t len)
{
    struct http_resp *r = p->data;
    r->head_bytes += len;
    return r->head_bytes > HTTP_HEAD_MAX ? -1 : 0;
}

static int on_headers_complete(http_parser *p)
{
    struct http_resp *r = p->data;
    if (header_done(r) < 0)
        return -1;
    r->head_bytes = 0; /* a next (final) answer after a 1xx has its own */
    if (p->status_code < 100) {
        r->bad_status = true; /* http-parser takes 000-099 */
        return -1;
    }
    if (p->status_code / 100 == 1)
        return 0;
    r->status = p->status_code;
    r->headers_done = true;
    return r->head_only ? 1 : 0; /* 1: no body (a CONNECT's answer) */
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct http_resp *r = p->data;
    if (r->body->len + len > r->body_max || r->body->len + len < len) {
        r->too_big = true;
        return -1;
    }
    if (buf_append(r->body, at, len) < 0) {
        r->oom = true;
        return -1;
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct http_resp *r = p->data;
    if (!r->headers_done)
        return 0; /* a 1xx: the final answer follows */
    r->complete = true;
    http_parser_pause(p, 1); /* what follows is not this message's */
    return 0;
}

void http_resp_init(struct http_resp *r, struct buf *body, size_t body_max, bool head_only)
{
    *r = (struct http_resp){.body = body, .body_max = body_max, .head_only = head_only};
    http_parser_init(&r->p, HTTP_RESPONSE);
    r->p.data = r;
    http_parser_settings_init(&r->settings);
    r->settings.on_message_begin = on_message_begin;
    r->settings.on_status = on_status;
    r->settings.on_header_field = on_header_field;
    r->settings.on_header_value = on_header_value;
    r->settings.on_headers_complete = on_headers_complete;
    r->settings.on_body = on_body;
    r->settings.on_message_complete = on_message_complete;
}

void http_resp_clear(struct http_resp *r)
{
    free(r->content_type);
    free(r->www_auth);
    free(r->location);
    buf_free(&r->field);
    buf_free(&r->value);
    r->content_type = r->www_auth = r->location = NULL;
}

static int resp_error(struct http_resp *r, struct err *err)
{
    if (r->oom)
        return err_set(err, ENOMEM, "HTTP response");
    if (r->too_big)
        return err_set(err, EFBIG, "response larger than %zu bytes", r->body_max);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (r->bad_status)
        return reg_err_plain(err, EPROTO, "malformed response: status %03u", r->p.status_code);
    if (r->head_bytes > HTTP_HEAD_MAX || e == HPE_HEADER_OVERFLOW)
        return reg_err_plain(err, EPROTO, "response head larger than %u bytes", HTTP_HEAD_MAX);
    if (e == HPE_INVALID_CHUNK_SIZE)
        return reg_err_plain(err, EPROTO, "malformed response: bad chunk size");
    if (e == HPE_INVALID_CONTENT_LENGTH || e == HPE_UNEXPECTED_CONTENT_LENGTH)
        /* http-parser's word for a length or a chunk size too large too */
        return reg_err_plain(err, EPROTO, "malformed response: bad length or chunk size");
    return reg_err_plain(err, EPROTO, "malformed response: %s", http_errno_description(e));
}

int http_resp_feed(struct http_resp *r, const char *data, size_t n, size_t *ret_used,
                   struct err *err)
{
    *ret_used = 0;
    if (n == 0 || r->complete)
        return 0;
    r->got_bytes = true;
    size_t used = http_parser_execute(&r->p, &r->settings, data, n);
    *ret_used = used;
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (e == HPE_PAUSED && r->complete)
        return 0;
    if (e != HPE_OK)
        return resp_error(r, err);
    if (r->p.upgrade)
        return reg_err_plain(err, EPROTO, "malformed response: a protocol switch");
    return 0;
}

int http_resp_eof(struct http_resp *r, struct err *err)
{
    if (r->complete)
        return 0;
    if (r->got_bytes && HTTP_PARSER_ERRNO(&r->p) == HPE_OK)
        http_parser_execute(&r->p, &r->settings, NULL, 0);
    if (r->complete)
        return 0;
    if (!r->got_bytes)
        return reg_err_plain(err, ECONNRESET, "connection closed without an answer");
    if (!r->headers_done)
        return reg_err_plain(err, ECONNRESET, "connection closed in the response head");
    return reg_err_plain(err, ECONNRESET, "connection closed before the end of the response");
}

/* ---- connections ------------------------------------------------------------- */

struct tls_cfg {
    char key[640];
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca, own;
    mbedtls_pk_context own_key;
    bool check_ip; /* the host is an IP address: checked in verify_cb */
    int ip_af;
    uint8_t ip[16];
    char host[256];              /* the DNS name checked in verify_cb otherwise */
    mbedtls_ssl_session session; /* the last one, for resumption */
    bool has_session;
    struct tls_cfg *next;
};

struct conn {
    char key[640]; /* what it is connected to: scheme, host, port, proxy, TLS key */
    int fd;
    bool tls;
    mbedtls_ssl_context ssl;
    struct tls_cfg *cfg;
    const atomic_bool *cancel;
    int io_err; /* what the transport failed with (errno) */
    /* the CAs of the chain being verified, root first (verify_cb), and
     * why the names failed, for the message */
    const mbedtls_x509_crt *chain[MBEDTLS_X509_MAX_INTERMEDIATE_CA + 2];
    size_t n_chain;
    char name_err[200];
    const struct http_timeouts *to;
    uint64_t deadline;  /* of the phase under way (ms, monotonic), 0 = none */
    bool past_deadline; /* why the last wait timed out: the phase's deadline */
    /* low-speed check: bytes received over time spent waiting */
    uint64_t win_waited;
    uint64_t win_bytes;
    /* bytes read past the end of a CONNECT answer: none expected */
    struct conn *next;
};

struct http_pool {
    pthread_mutex_t mu;
    struct conn *idle;
    unsigned n_idle;
    struct tls_cfg *cfgs;
    char *certs_dir;
    const atomic_bool *cancel;
    struct http_timeouts to;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void conn_free(struct conn *c)
{
    if (!c)
        return;
    if (c->tls)
        mbedtls_ssl_free(&c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static void tls_cfg_free(struct tls_cfg *t)
{
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_x509_crt_free(&t->ca);
    mbedtls_x509_crt_free(&t->own);
    mbedtls_pk_free(&t->own_key);
    mbedtls_ssl_session_free(&t->session);
    free(t);
}

struct http_pool *http_pool_new(const char *certs_dir, const atomic_bool *cancel,
                                const struct http_timeouts *to)
{
    struct http_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->certs_dir = strdup(certs_dir);
    if (!p->certs_dir) {
        free(p);
        return NULL;
    }
    p->cancel = cancel;
    p->to = to && to->progress_ms ? *to : HTTP_TIMEOUTS_DEFAULT;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

void http_pool_free(struct http_pool *p)
{
    if (!p)
        return;
    while (p->idle) {
        struct conn *c = p->idle;
        p->idle = c->next;
        conn_free(c);
    }
    while (p->cfgs) {
        struct tls_cfg *t = p->cfgs;
        p->cfgs = t->next;
        tls_cfg_free(t);
    }
    pthread_mutex_destroy(&p->mu);
    free(p->certs_dir);
    free(p);
}

/* Starts a phase that must be over within the progress timeout (and
 * within cap_ms, when not 0); phase_end ends it. A phase has its deadline
 * and no minimum rate: the low-speed window counts a body's waiting only,
 * and starts afresh when a phase ends (a body may follow), so the time a
 * proxy took to answer CONNECT is not held against the TLS handshake. */
static void phase_start(struct conn *c, uint64_t cap_ms)
{
    uint64_t t = c->to->progress_ms;
    c->deadline = now_ms() + (cap_ms && cap_ms < t ? cap_ms : t);
}

static void phase_end(struct conn *c)
{
    c->deadline = 0;
    c->win_waited = c->win_bytes = 0;
}

/* Waits for events on c's socket, in slices that look at the cancel flag,
 * the phase's deadline and the low-speed window; 0 when ready, -errno. */
static int conn_wait(struct conn *c, short events)
{
    uint64_t window = c->to->progress_ms;
    uint64_t need = (uint64_t)c->to->min_rate * window / 1000;
    if (need == 0)
        need = 1; /* min_rate 0: any byte is progress */
    for (;;) {
        if (c->cancel && atomic_load(c->cancel))
            return -ECANCELED;
        uint64_t now = now_ms();
        if (c->deadline && now >= c->deadline) {
            c->past_deadline = true;
            return -ETIMEDOUT;
        }
        if (!c->deadline && c->win_waited >= window) {
            if (c->win_bytes < need) {
                c->past_deadline = false;
                return -ETIMEDOUT;
            }
            c->win_waited = 0;
            c->win_bytes = 0;
        }
        uint64_t ms = SLICE_MS;
        if (c->deadline && c->deadline - now < ms)
            ms = c->deadline - now;
        if (!c->deadline && window - c->win_waited < ms)
            ms = window - c->win_waited;
        struct pollfd pfd = {.fd = c->fd, .events = events};
        int n = poll(&pfd, 1, (int)ms);
        if (n < 0 && errno != EINTR)
            return -errno;
        c->win_waited += now_ms() - now;
        if (n > 0)
            return 0;
    }
}

static void speed_count(struct conn *c, size_t n) { c->win_bytes += n; }

/* Plain socket I/O; n bytes or -errno (0 at the end for recv). */
static ssize_t sock_send(struct conn *c, const void *p, size_t n)
{
    for (;;) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w >= 0)
            return w;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int r = conn_wait(c, POLLOUT);
        if (r < 0)
            return r;
    }
}

static ssize_t sock_recv(struct conn *c, void *p, size_t n)
{
    for (;;) {
        ssize_t got = recv(c->fd, p, n, 0);
        if (got >= 0) {
            speed_count(c, (size_t)got);
            return got;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int r = conn_wait(c, POLLIN);
        if (r < 0)
            return r;
    }
}

static int bio_send(void *ctx, const unsigned char *p, size_t n)
{
    struct conn *c = ctx;
    ssize_t w = sock_send(c, p, n > INT32_MAX ? INT32_MAX : n);
    if (w < 0) {
        c->io_err = (int)-w;
        return MBEDTLS_ERR_NET_SEND_FAILED;
    }
    return (int)w;
}

static int bio_recv(void *ctx, unsigned char *p, size_t n)
{
    struct conn *c = ctx;
    ssize_t got = sock_recv(c, p, n > INT32_MAX ? INT32_MAX : n);
    if (got < 0) {
        c->io_err = (int)-got;
        return MBEDTLS_ERR_NET_RECV_FAILED;
    }
    if (got == 0)
        return MBEDTLS_ERR_NET_CONN_RESET; /* closed without close_notify */
    return (int)got;
}

static int io_error(const struct conn *c, struct err *err, int e, const char *what,
                    const char *where)
{
    if (e == ECANCELED)
        return err_set(err, ECANCELED, "pull cancelled");
    if (e == ETIMEDOUT && c->past_deadline)
        return reg_err_plain(err, ETIMEDOUT, "%s %s: timed out (no answer within %.3g s)", what,
                             where, c->to->progress_ms / 1000.0);
    if (e == ETIMEDOUT)
        return reg_err_plain(err, ETIMEDOUT,
                             "%s %s: timed out (less than %u bytes/s over %.3g s of waiting)", what,
                             where, c->to->min_rate, c->to->progress_ms / 1000.0);
    return reg_err_plain(err, e == EPIPE ? ECONNRESET : e, "%s %s: %s", what, where, strerror(e));
}

/* Writes everything; -errno. */
static int conn_write(struct conn *c, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w;
        if (c->tls) {
            int e = mbedtls_ssl_write(&c->ssl, (const unsigned char *)p, n);
            if (e < 0)
                return c->io_err ? -c->io_err : -ECONNRESET;
            w = e;
        } else {
            w = sock_send(c, p, n);
            if (w < 0)
                return (int)w;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads some bytes: n, 0 at the end of the connection, -errno. */
static ssize_t conn_read(struct conn *c, char *p, size_t n)
{
    if (!c->tls)
        return sock_recv(c, p, n);
    for (;;) {
        int e = mbedtls_ssl_read(&c->ssl, (unsigned char *)p, n);
        if (e > 0)
            return e;
        if (e == 0 || e == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || e == MBEDTLS_ERR_NET_CONN_RESET)
            return 0;
        if (e == MBEDTLS_ERR_SSL_WANT_READ || e == MBEDTLS_ERR_SSL_WANT_WRITE)
            continue;
        if (c->io_err)
            return -c->io_err;
        return -EPROTO;
    }
}

/* Connects to host:port within CONNECT_TIMEOUT_MS; -errno with err set. */
static int tcp_connect(struct conn *c, const char *host, unsigned port, struct err *err)
{
    char name[256], service[8];
    size_t hl = strlen(host);
    if (host[0] == '[' && hl >= 2)
        snprintf(name, sizeof(name), "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(name, sizeof(name), "%s", host);
    snprintf(service, sizeof(service), "%u", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(name, service, &hints, &res);
    if (g != 0)
        return reg_err_plain(err, ECONNREFUSED, "resolve %s: %s", name,
                             g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    phase_start(c, CONNECT_TIMEOUT_MS);
    uint64_t limit = c->deadline - now_ms();
    int last = ECONNREFUSED;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1, idle = 60;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
        c->fd = fd;
        int r = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            r = errno == EINPROGRESS ? conn_wait(c, POLLOUT) : -errno;
            if (r == 0) {
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
                    soerr = errno;
                r = -soerr;
            }
        }
        if (r == 0) {
            freeaddrinfo(res);
            phase_end(c);
            return 0;
        }
        close(fd);
        c->fd = -1;
        last = -r;
        if (r == -ECANCELED || r == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    phase_end(c);
    if (last == ECANCELED)
        return err_set(err, ECANCELED, "pull cancelled");
    if (last == ETIMEDOUT)
        return reg_err_plain(err, ETIMEDOUT,
                             "Failed to connect to %s port %u: timed out after %.3g s", name, port,
                             limit / 1000.0);
    return reg_err_plain(
        err,
        last == ECONNREFUSED || last == EHOSTUNREACH || last == ENETUNREACH ? last : ECONNREFUSED,
        "Failed to connect to %s port %u: %s", name, port, strerror(last));
}

/* Forward secrecy and AEAD only, as the streaming server (stream/tls.c),
 * ChaCha20-Poly1305 first: mbedTLS's is faster than its AES-GCM here (194
 * against 157 MB/s with AES-NI; it has no stitched GCM as OpenSSL does),
 * and a server that follows the client's first choice (Go's, the
 * distribution registry's) takes it. */
static const int ciphersuites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    0,
};

static bool leaf_has_ip(const mbedtls_x509_crt *crt, const uint8_t *ip, size_t len)
{
    for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s && s->buf.p; s = s->next)
        if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && s->buf.len == len &&
            memcmp(s->buf.p, ip, len) == 0)
            return true;
    return false;
}

/* Per connection, called for each certificate of the verified chain, the
 * root first and the leaf last (depth 0). mbedTLS 2.28 matches DNS names
 * only, accepts wildcards over a whole top-level domain and ignores name
 * constraints it was not told are critical: at the leaf, an IP address is
 * matched against its iPAddress names, a DNS name again by curl's rules,
 * and the name constraints of every CA seen are applied (tlsname.c). Only
 * ever adds failures to mbedTLS's verdict. */
static int verify_cb(void *ctx, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
    struct conn *c = ctx;
    const struct tls_cfg *t = c->cfg;
    if (depth > 0) {
        if (c->n_chain < ARRAY_SIZE(c->chain))
            c->chain[c->n_chain++] = crt;
        else
            *flags |= MBEDTLS_X509_BADCERT_OTHER;
        return 0;
    }
    size_t iplen = t->check_ip ? (t->ip_af == AF_INET ? 4 : 16) : 0;
    if (t->check_ip ? !leaf_has_ip(crt, t->ip, iplen) : !tls_leaf_name_ok(crt, t->host))
        *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
    for (size_t i = 0; i < c->n_chain; i++) {
        int r = tls_name_constraints_check(c->chain[i], crt, t->check_ip ? NULL : t->host,
                                           t->check_ip ? t->ip : NULL, iplen);
        if (r < 0) {
            char dn[120];
            if (mbedtls_x509_dn_gets(dn, sizeof(dn), &c->chain[i]->subject) < 0)
                snprintf(dn, sizeof(dn), "?");
            snprintf(c->name_err, sizeof(c->name_err), "%s `%s`",
                     r == -EPERM ? "a name outside the name constraints of"
                                 : "unreadable name constraints in",
                     dn);
            *flags |= MBEDTLS_X509_BADCERT_OTHER;
            break;
        }
    }
    c->n_chain = 0;
    return 0;
}

static int tls_text(struct err *err, int code, int e, const char *what, const char *arg)
{
    char text[200];
    mbedtls_strerror(e, text, sizeof(text));
    return reg_err_plain(err, code, "%s %s: %s", what, arg, text);
}

/* The TLS configuration for a server (host, port) as certs.d entry
 * tls_host knows it; made once per pool. Called under p->mu. */
static int tls_cfg_get(struct http_pool *p, const struct http_url *u, const char *tls_host,
                       bool skip_verify, struct tls_cfg **ret, struct err *err)
{
    char key[640];
    snprintf(key, sizeof(key), "%s:%u|%s|%d", u->host, u->port, tls_host, skip_verify);
    for (struct tls_cfg *t = p->cfgs; t; t = t->next)
        if (strcmp(t->key, key) == 0) {
            *ret = t;
            return 0;
        }
    struct tls_cfg *t = calloc(1, sizeof(*t));
    if (!t)
        return err_set(err, ENOMEM, "TLS");
    snprintf(t->key, sizeof(t->key), "%s", key);
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->ca);
    mbedtls_x509_crt_init(&t->own);
    mbedtls_pk_init(&t->own_key);
    mbedtls_ssl_session_init(&t->session);
    int e = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT,
                                        MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (e != 0) {
        tls_cfg_free(t);
        return tls_text(err, ENOMEM, e, "TLS configuration for", u->hostport);
    }
    tls_conf_policy(&t->conf, ciphersuites);
    char path[600];
    int r = 0;
    if (skip_verify) {
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE);
    } else {
        /* the registry's own CA, and the system's as well (curl's CAINFO
         * with OpenSSL's CApath); AT_EACCESS: checked with the filesystem
         * ids, as the read will be (the pull helper's real uid is not 0) */
        snprintf(path, sizeof(path), "%s/%s/ca.crt", p->certs_dir, tls_host);
        if (faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) == 0 &&
            (e = mbedtls_x509_crt_parse_file(&t->ca, path)) < 0)
            r = tls_text(err, EPROTO, e, "the CA certificate", path);
        for (size_t i = 0; r == 0 && i < ARRAY_SIZE(system_ca_bundles); i++)
            if (faccessat(AT_FDCWD, system_ca_bundles[i], R_OK, AT_EACCESS) == 0) {
                /* a bundle may hold a certificate mbedTLS cannot parse:
                 * the others still count (>= 0: how many failed) */
                mbedtls_x509_crt_parse_file(&t->ca, system_ca_bundles[i]);
                break;
            }
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
        mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
        t->check_ip = http_ip_parse(u->host, &t->ip_af, t->ip);
        snprintf(t->host, sizeof(t->host), "%s", u->host);
    }
    snprintf(path, sizeof(path), "%s/%s/client.cert", p->certs_dir, tls_host);
    if (r == 0 && faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) == 0) {
        if ((e = mbedtls_x509_crt_parse_file(&t->own, path)) != 0)
            r = tls_text(err, EPROTO, e, "the client certificate", path);
        snprintf(path, sizeof(path), "%s/%s/client.key", p->certs_dir, tls_host);
        /* Docker and containerd use such a key without a word (docker's
         * dind even makes its client key 0644): warn, as the key then
         * proves nothing about who holds it, but do not break the pull */
        struct stat st;
        if (r == 0 && stat(path, &st) == 0 && (st.st_mode & S_IROTH))
            log_warn("the registry client key `%s` is readable by every user (mode %04o): "
                     "chmod o-r it",
                     path, (unsigned)(st.st_mode & 07777));
        if (r == 0 && (e = mbedtls_pk_parse_keyfile(&t->own_key, path, NULL)) != 0)
            r = tls_text(err, EPROTO, e, "the client key", path);
        if (r == 0 && (e = mbedtls_ssl_conf_own_cert(&t->conf, &t->own, &t->own_key)) != 0)
            r = tls_text(err, EPROTO, e, "the client certificate", path);
    }
    if (r < 0) {
        tls_cfg_free(t);
        return r;
    }
    t->next = p->cfgs;
    p->cfgs = t;
    *ret = t;
    return 0;
}

static int tls_start(struct http_pool *p, struct conn *c, const struct http_url *u,
                     const struct http_request *rq, struct err *err)
{
    pthread_mutex_lock(&p->mu);
    int r = tls_cfg_get(p, u, rq->tls_host, rq->skip_verify, &c->cfg, err);
    pthread_mutex_unlock(&p->mu);
    if (r < 0)
        return r;
    mbedtls_ssl_init(&c->ssl);
    c->tls = true;
    int af;
    uint8_t ip[16];
    int e = mbedtls_ssl_setup(&c->ssl, &c->cfg->conf);
    /* SNI and the name checked: DNS names only (IP addresses: verify_cb) */
    if (e == 0)
        e = mbedtls_ssl_set_hostname(&c->ssl, http_ip_parse(u->host, &af, ip) ? NULL : u->host);
    if (e != 0)
        return tls_text(err, ENOMEM, e, "TLS with", u->hostport);
    c->n_chain = 0;
    c->name_err[0] = '\0';
    if (!rq->skip_verify)
        mbedtls_ssl_set_verify(&c->ssl, verify_cb, c);
    pthread_mutex_lock(&p->mu);
    if (c->cfg->has_session)
        mbedtls_ssl_set_session(&c->ssl, &c->cfg->session);
    pthread_mutex_unlock(&p->mu);
    mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
    phase_start(c, 0);
    while ((e = mbedtls_ssl_handshake(&c->ssl)) != 0) {
        if (e == MBEDTLS_ERR_SSL_WANT_READ || e == MBEDTLS_ERR_SSL_WANT_WRITE)
            continue;
        if (c->io_err)
            return io_error(c, err, c->io_err, "TLS handshake with", u->hostport);
        if (e == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
            char info[512];
            uint32_t flags = mbedtls_ssl_get_verify_result(&c->ssl);
            int n = mbedtls_x509_crt_verify_info(info, sizeof(info), "", flags);
            while (n > 0 && (info[n - 1] == '\n' || info[n - 1] == ' '))
                info[--n] = '\0';
            for (char *q = info; *q; q++)
                if (*q == '\n')
                    *q = ';';
            return reg_err_plain(err, EPROTO,
                                 "TLS with %s: server certificate verification failed: %s%s%s",
                                 u->hostport, n > 0 ? info : "unknown reason",
                                 c->name_err[0] ? "; " : "", c->name_err);
        }
        return tls_text(err, EPROTO, e, "TLS handshake with", u->hostport);
    }
    phase_end(c);
    /* a session to resume on the next connection (parallel layers) */
    mbedtls_ssl_session s;
    mbedtls_ssl_session_init(&s);
    if (mbedtls_ssl_get_session(&c->ssl, &s) == 0) {
        pthread_mutex_lock(&p->mu);
        mbedtls_ssl_session_free(&c->cfg->session);
        c->cfg->session = s;
        c->cfg->has_session = true;
        pthread_mutex_unlock(&p->mu);
    } else {
        mbedtls_ssl_session_free(&s);
    }
    return 0;
}

/* Through an http proxy to u: CONNECT, the answer's head. */
static int proxy_tunnel(struct conn *c, const struct http_url *u, const struct http_proxy *px,
                        struct err *err)
{
    struct buf rq = {0};
    int r =
        buf_printf(&rq,
                   "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\nUser-Agent: kinglet/" PACKAGE_VERSION
                   "\r\nProxy-Connection: Keep-Alive\r\n",
                   u->host, u->port, u->host, u->port);
    if (r >= 0 && px->basic)
        r = buf_printf(&rq, "Proxy-Authorization: Basic %s\r\n", px->basic);
    if (r >= 0)
        r = buf_printf(&rq, "\r\n");
    if (r < 0) {
        buf_free(&rq);
        return err_set(err, ENOMEM, "proxy");
    }
    /* the proxy's whole answer within the deadline, whatever it sends */
    phase_start(c, 0);
    r = conn_write(c, (const char *)rq.data, rq.len);
    explicit_bzero(rq.data, rq.len);
    buf_free(&rq);
    if (r < 0)
        return io_error(c, err, -r, "CONNECT through proxy", px->host);
    struct buf body = {0};
    struct http_resp resp;
    http_resp_init(&resp, &body, 0, true);
    char tmp[4096];
    while (r == 0 && !resp.complete) {
        /* byte by byte is wasteful, but nothing of the tunnel may be read
         * into our buffer: the head is short */
        ssize_t n = conn_read(c, tmp, 1);
        if (n < 0) {
            r = io_error(c, err, (int)-n, "CONNECT through proxy", px->host);
            break;
        }
        size_t used;
        if (n == 0)
            r = http_resp_eof(&resp, err);
        else
            r = http_resp_feed(&resp, tmp, (size_t)n, &used, err);
        if (r == 0 && n == 0 && !resp.complete)
            r = reg_err_plain(err, ECONNRESET, "proxy %s closed the connection", px->host);
    }
    phase_end(c);
    if (r == 0 && resp.status != 200)
        r = reg_err_plain(err, resp.status == 407 ? EACCES : ECONNREFUSED,
                          "proxy %s refused the tunnel to %s (HTTP %ld)", px->host, u->hostport,
                          resp.status);
    http_resp_clear(&resp);
    buf_free(&body);
    return r;
}

/* ---- transfers -------------------------------------------------------------- */

struct http_xfer {
    struct http_pool *p;
    struct conn *c;
    struct http_resp resp;
    struct buf body; /* parsed body bytes not yet handed out */
    char *rbuf;      /* raw bytes from the connection */
    size_t rlen, rused;
    bool eof;
    bool reusable;
    bool handed; /* body's bytes went to the caller */
    char where[300];
};

static struct conn *pool_take(struct http_pool *p, const char *key)
{
    pthread_mutex_lock(&p->mu);
    struct conn **pp = &p->idle, *c = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->key, key) == 0) {
            c = *pp;
            *pp = c->next;
            p->n_idle--;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return c;
}

static void pool_put(struct http_pool *p, struct conn *c)
{
    pthread_mutex_lock(&p->mu);
    if (p->n_idle >= IDLE_MAX) {
        pthread_mutex_unlock(&p->mu);
        conn_free(c);
        return;
    }
    c->next = p->idle;
    p->idle = c;
    p->n_idle++;
    pthread_mutex_unlock(&p->mu);
}

/* A connection for u: an idle one, else a new one (*ret_reused). */
static int conn_get(struct http_pool *p, const struct http_url *u, const struct http_request *rq,
                    const struct http_proxy *px, bool allow_reuse, struct conn **ret,
                    bool *ret_reused, struct err *err)
{
    char key[640];
    snprintf(key, sizeof(key), "%s://%s:%u|%s:%u|%s|%d", u->https ? "https" : "http", u->host,
             u->port, px ? px->host : "", px ? px->port : 0, u->https ? rq->tls_host : "",
             rq->skip_verify);
    *ret_reused = false;
    struct conn *c = allow_reuse ? pool_take(p, key) : NULL;
    if (c) {
        /* a connection the server closed meanwhile reads as ready */
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 0) {
            c->cancel = p->cancel;
            c->to = &p->to;
            *ret = c;
            *ret_reused = true;
            return 0;
        }
        conn_free(c);
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(err, ENOMEM, "connection");
    c->fd = -1;
    c->cancel = p->cancel;
    c->to = &p->to;
    snprintf(c->key, sizeof(c->key), "%s", key);
    int r = px ? tcp_connect(c, px->host, px->port, err) : tcp_connect(c, u->host, u->port, err);
    if (r == 0 && px && u->https)
        r = proxy_tunnel(c, u, px, err);
    if (r == 0 && u->https)
        r = tls_start(p, c, u, rq, err);
    if (r < 0) {
        conn_free(c);
        return r;
    }
    *ret = c;
    return 0;
}

static int fill(struct http_xfer *x, struct err *err)
{
    x->rused = x->rlen = 0;
    ssize_t n = conn_read(x->c, x->rbuf, READ_CHUNK);
    if (n < 0)
        return io_error(x->c, err, (int)-n, "read from", x->where);
    if (n == 0)
        x->eof = true;
    x->rlen = (size_t)n;
    return 0;
}

/* Parses buffered bytes, reading more when they are used up, until the
 * head is read (want_body false) or some body bytes or the end came. */
static int advance(struct http_xfer *x, bool want_body, struct err *err)
{
    for (;;) {
        if (x->resp.complete)
            return 0;
        if (want_body ? x->body.len > 0 : x->resp.headers_done)
            return 0;
        if (x->rused == x->rlen) {
            if (x->eof)
                return http_resp_eof(&x->resp, err);
            int r = fill(x, err);
            if (r < 0)
                return r;
            if (x->eof)
                continue;
        }
        size_t used;
        int r = http_resp_feed(&x->resp, x->rbuf + x->rused, x->rlen - x->rused, &used, err);
        if (r < 0)
            return r;
        x->rused += used;
        if (x->resp.complete && x->rused < x->rlen)
            x->reusable = false; /* bytes past the answer: not a clean stream */
    }
}

/* The request target, bytes a request line cannot hold percent-encoded
 * (as curl sends a Location with spaces). */
static int put_target(struct buf *b, const char *t, size_t n)
{
    if (n == 0)
        return buf_append(b, "/", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        int r = ch <= 0x20 || ch >= 0x7f ? buf_printf(b, "%%%02X", ch) : buf_append(b, &ch, 1);
        if (r < 0)
            return r;
    }
    return 0;
}

static int send_request(struct http_xfer *x, const struct http_url *u,
                        const struct http_request *rq, const struct http_proxy *px, const char *url,
                        struct err *err)
{
    struct buf b = {0};
    /* the last line against header injection: callers check what they
     * are given (image_auth_check, token answers), but no value with a
     * line break goes out, whatever its origin (a C string ends at NUL) */
    const char *values[] = {u->hostport, rq->accept, rq->authz, px ? px->basic : NULL};
    for (size_t i = 0; i < ARRAY_SIZE(values); i++)
        if (values[i] && values[i][strcspn(values[i], "\r\n")])
            return err_set(err, EINVAL, "HTTP request to %s: a header value holds a line break",
                           u->hostport[strcspn(u->hostport, "\r\n")] ? "?" : u->hostport);
    bool absolute = px && !u->https; /* plain http through a proxy */
    int r = buf_printf(&b, "%s ", rq->method);
    if (r >= 0 && absolute) {
        size_t pre = (size_t)(u->target - url);
        r = put_target(&b, url, pre);
        if (r >= 0 && (!*u->target || *u->target == '?'))
            r = buf_append(&b, "/", 1);
        if (r >= 0)
            r = put_target(&b, u->target, strcspn(u->target, "#"));
    } else if (r >= 0) {
        size_t n = strcspn(u->target, "#");
        if (n && *u->target == '?')
            r = buf_append(&b, "/", 1);
        if (r >= 0)
            r = put_target(&b, u->target, n);
    }
    if (r >= 0)
        r = buf_printf(&b,
                       " HTTP/1.1\r\nHost: %s\r\nUser-Agent: kinglet/" PACKAGE_VERSION
                       "\r\nAccept: %s\r\n",
                       u->hostport, rq->accept ? rq->accept : "*/*");
    if (r >= 0 && absolute && px->basic)
        r = buf_printf(&b, "Proxy-Authorization: Basic %s\r\n", px->basic);
    if (r >= 0 && rq->authz)
        r = buf_printf(&b, "Authorization: %s\r\n", rq->authz);
    if (r >= 0 && rq->form)
        r = buf_printf(&b,
                       "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: "
                       "%zu\r\n\r\n%s",
                       strlen(rq->form), rq->form);
    else if (r >= 0)
        r = buf_printf(&b, "\r\n");
    if (r < 0) {
        if (b.data)
            explicit_bzero(b.data, b.len);
        buf_free(&b);
        return err_set(err, ENOMEM, "HTTP request");
    }
    /* the request sent and the answer's head read within the deadline */
    phase_start(x->c, 0);
    r = conn_write(x->c, (const char *)b.data, b.len);
    explicit_bzero(b.data, b.len);
    buf_free(&b);
    return r < 0 ? io_error(x->c, err, -r, "send to", x->where) : 0;
}

int http_xfer_start(struct http_pool *p, const struct http_request *rq, struct http_xfer **ret,
                    struct err *err)
{
    struct http_url u;
    if (http_url_parse(rq->url, &u) < 0)
        return reg_err_plain(err, EINVAL, "%s %s: not an http(s) URL", rq->method, rq->url);
    struct http_proxy pxs, *px = NULL;
    const char *pspec = http_proxy_for(&u);
    if (pspec) {
        int r = http_proxy_parse(pspec, &pxs, err);
        if (r < 0)
            return r;
        px = &pxs;
    }
    int r = 0;
    struct http_xfer *x = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        x = calloc(1, sizeof(*x));
        if (!x || !(x->rbuf = malloc(READ_CHUNK))) {
            r = err_set(err, ENOMEM, "HTTP");
            break;
        }
        x->p = p;
        snprintf(x->where, sizeof(x->where), "%s", u.hostport);
        http_resp_init(&x->resp, &x->body, SIZE_MAX, false);
        bool reused = false;
        r = conn_get(p, &u, rq, px, attempt == 0, &x->c, &reused, err);
        if (r == 0)
            r = send_request(x, &u, rq, px, rq->url, err);
        if (r == 0)
            r = advance(x, false, err);
        if (r == 0) {
            phase_end(x->c);
            break;
        }
        bool retry = reused && !x->resp.got_bytes && r != -ECANCELED;
        http_xfer_free(x);
        x = NULL;
        if (!retry)
            break;
        /* an idle connection the server had closed: once more, afresh */
    }
    if (px && px->basic) {
        explicit_bzero(px->basic, strlen(px->basic));
        free(px->basic);
    }
    if (r < 0) {
        if (err && err->code != ECANCELED)
            err_wrap(err, "%s %s", rq->method, rq->url);
        return r;
    }
    x->reusable = true;
    *ret = x;
    return 0;
}

long http_xfer_status(const struct http_xfer *x) { return x->resp.status; }

const char *http_xfer_header(const struct http_xfer *x, const char *name)
{
    if (strcasecmp(name, "Content-Type") == 0)
        return x->resp.content_type;
    if (strcasecmp(name, "WWW-Authenticate") == 0)
        return x->resp.www_auth;
    if (strcasecmp(name, "Location") == 0)
        return x->resp.location;
    return NULL;
}

int http_xfer_read(struct http_xfer *x, const void **ret_buf, size_t *ret_len, struct err *err)
{
    if (x->handed)
        x->body.len = 0;
    x->handed = false;
    int r = advance(x, true, err);
    if (r < 0) {
        x->reusable = false;
        return r;
    }
    *ret_buf = x->body.data;
    *ret_len = x->body.len;
    x->handed = true;
    return 0;
}

int http_xfer_read_all(struct http_xfer *x, struct buf *out, size_t max, struct err *err)
{
    for (;;) {
        const void *p;
        size_t n;
        int r = http_xfer_read(x, &p, &n, err);
        if (r < 0)
            return r;
        if (n == 0)
            return 0;
        if (out->len + n > max) {
            /* what fits stays (the start of an error answer, for its message) */
            if (out->len < max && buf_append(out, p, max - out->len) < 0)
                return err_set(err, ENOMEM, "HTTP");
            x->reusable = false;
            return err_set(err, EFBIG, "response larger than %zu bytes", max);
        }
        if (buf_append(out, p, n) < 0)
            return err_set(err, ENOMEM, "HTTP");
    }
}

void http_xfer_free(struct http_xfer *x)
{
    if (!x)
        return;
    if (x->c) {
        if (x->reusable && x->resp.complete && http_should_keep_alive(&x->resp.p) &&
            x->rused == x->rlen && !x->eof)
            pool_put(x->p, x->c);
        else
            conn_free(x->c);
    }
    http_resp_clear(&x->resp);
    buf_free(&x->body);
    free(x->rbuf);
    free(x);
}
