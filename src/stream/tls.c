/* stream/tls: TLS on the streaming port (--stream-tls-cert/--stream-tls-key),
 * with mbedTLS driven through callbacks over our buffers so that the loop
 * keeps doing all socket I/O: bytes from the socket go in, bytes for the
 * socket and plaintext come out.
 *
 * Why mbedTLS: the static build must stay under 4 MB and OpenSSL alone is
 * 4.9 MB linked statically; mbedTLS 2.28 (Debian's, long-term support) is
 * about 1 MB for all three of its libraries. libmbedtls, libmbedx509 and
 * libmbedcrypto are loaded on first use (see src/base/lazy.c): a daemon
 * maps them at the first TLS connection, never before (the files are
 * checked at start in a child process).
 *
 * What a client gets: TLS 1.2 only (mbedTLS 2.28 has no TLS 1.3 server),
 * ECDHE key exchange with AES-GCM or ChaCha20-Poly1305 only, X25519 or
 * P-256/P-384, SHA-2 signatures, no renegotiation; random numbers straight
 * from the kernel (getrandom). A handshake must finish, and the request
 * head come, within STREAM_HEAD_MS (server.c). */
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>

#include "base/tls.h"
#include "stream/internal.h"

#define TLS_PEM_MAX (1u << 20) /* a certificate chain or a key */

/* Forward secrecy and AEAD only, strongest first; what Go, Python and
 * browsers offer for TLS 1.2. */
static const int ciphersuites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    0,
};

/* The files are read when the daemon starts and checked in a child process
 * (a bad certificate stops the start, as it should); the daemon itself
 * parses them, and so maps the libraries, at the first connection. */
struct tls_ctx {
    char *cert_path, *key_path;
    char *cert_pem, *key_pem; /* until loaded; the key's wiped then */
    size_t cert_len, key_len;
    bool loaded, broken;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt chain;
    mbedtls_pk_context key;
};

struct tls_conn {
    mbedtls_ssl_context ssl;
    const uint8_t *in; /* socket bytes not yet taken, during tls_conn_feed */
    size_t in_len;
    struct buf *out; /* where records for the socket go, during a call */
    bool out_failed; /* out of memory while appending to out */
    bool handshake_done;
    bool failed;
};

static int tls_err(struct err *err, int e, const char *what, const char *path)
{
    char text[200];
    mbedtls_strerror(e, text, sizeof(text));
    return err_set_msg(err, EINVAL, "%s `%.200s`: %s", what, path, text);
}

/* The PEM text into mbedTLS's objects and its configuration. */
static int load(struct tls_ctx *t, struct err *err)
{
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->chain);
    mbedtls_pk_init(&t->key);
    t->loaded = true; /* from here on, tls_ctx_free frees them */
    /* PEM's length counts its NUL for mbedTLS (DER's does not), as in
     * mbedtls_pk_load_file */
    size_t cert_len = t->cert_len + !!strstr(t->cert_pem, "-----BEGIN ");
    size_t key_len = t->key_len + !!strstr(t->key_pem, "-----BEGIN ");
    int e;
    if ((e = mbedtls_x509_crt_parse(&t->chain, (const unsigned char *)t->cert_pem, cert_len)) != 0)
        return tls_err(err, e, "the streaming certificate", t->cert_path);
    if ((e = mbedtls_pk_parse_key(&t->key, (const unsigned char *)t->key_pem, key_len, NULL, 0)) !=
        0)
        return tls_err(err, e, "the streaming key", t->key_path);
    if ((e = mbedtls_pk_check_pair(&t->chain.pk, &t->key)) != 0)
        return tls_err(err, e, "the streaming key does not match the certificate", t->cert_path);
    if ((e = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_SERVER,
                                         MBEDTLS_SSL_TRANSPORT_STREAM,
                                         MBEDTLS_SSL_PRESET_DEFAULT)) != 0 ||
        (e = mbedtls_ssl_conf_own_cert(&t->conf, &t->chain, &t->key)) != 0)
        return tls_err(err, e, "TLS configuration for", t->cert_path);
    tls_conf_policy(&t->conf, ciphersuites);
    return 0;
}

/* load() in a child process, which reports its error over a pipe: the
 * daemon learns whether the files are good without mapping the libraries.
 * Called at start, before the loop serves anything (it waits for the
 * child), while the daemon has no other thread: the child may dlopen and
 * malloc safely. */
static int check_in_child(struct tls_ctx *t, struct err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_set(err, errno, "check the streaming certificate");
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return err_set(err, e, "check the streaming certificate");
    }
    if (pid == 0) {
        close(p[0]);
        struct err e = {0};
        if (load(t, &e) == 0)
            _exit(0);
        (void)!write(p[1], &e, sizeof(e));
        _exit(1);
    }
    close(p[1]);
    struct err child = {0};
    size_t got = 0;
    while (got < sizeof(child)) {
        ssize_t n = read(p[0], (char *)&child + got, sizeof(child) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (got == sizeof(child) && child.code) {
        child.msg[sizeof(child.msg) - 1] = '\0';
        return err_set_msg(err, child.code, "%s", child.msg);
    }
    return err_set_msg(err, EINVAL,
                       "checking the streaming certificate `%.200s` failed (status %d)",
                       t->cert_path, status);
}

static void wipe_pem(struct tls_ctx *t)
{
    if (t->key_pem)
        explicit_bzero(t->key_pem, t->key_len);
    free(t->key_pem);
    free(t->cert_pem);
    t->key_pem = t->cert_pem = NULL;
}

int tls_ctx_new(const char *cert, const char *key, struct tls_ctx **ret, struct err *err)
{
    struct tls_ctx *t = calloc(1, sizeof(*t));
    if (!t || !(t->cert_path = strdup(cert)) || !(t->key_path = strdup(key))) {
        tls_ctx_free(t);
        return err_set(err, ENOMEM, "TLS");
    }
    int r = read_file_at(AT_FDCWD, cert, TLS_PEM_MAX, &t->cert_pem, &t->cert_len);
    if (r < 0)
        r = err_set(err, -r, "the streaming certificate `%s`", cert);
    else if ((r = read_file_at(AT_FDCWD, key, TLS_PEM_MAX, &t->key_pem, &t->key_len)) < 0)
        r = err_set(err, -r, "the streaming key `%s`", key);
    else
        r = check_in_child(t, err);
    if (r < 0) {
        tls_ctx_free(t);
        return r;
    }
    *ret = t;
    return 0;
}

void tls_ctx_free(struct tls_ctx *t)
{
    if (!t)
        return;
    if (t->loaded) {
        mbedtls_ssl_config_free(&t->conf);
        mbedtls_x509_crt_free(&t->chain);
        mbedtls_pk_free(&t->key); /* zeroes the key */
    }
    wipe_pem(t);
    free(t->cert_path);
    free(t->key_path);
    free(t);
}

/* mbedTLS's transport: records for the socket are appended to the call's
 * output buffer (it takes everything); socket bytes come from the chunk
 * tls_conn_feed was given, and "want read" when it is used up. */
static int send_cb(void *ctx, const unsigned char *p, size_t n)
{
    struct tls_conn *t = ctx;
    if (!t->out || buf_append(t->out, p, n) < 0) {
        t->out_failed = true;
        return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    }
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

static int recv_cb(void *ctx, unsigned char *p, size_t n)
{
    struct tls_conn *t = ctx;
    if (t->in_len == 0)
        return MBEDTLS_ERR_SSL_WANT_READ;
    if (n > t->in_len)
        n = t->in_len;
    if (n > INT32_MAX)
        n = INT32_MAX;
    memcpy(p, t->in, n);
    t->in += n;
    t->in_len -= n;
    return (int)n;
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx)
{
    if (!ctx->loaded) {
        /* the files checked out at start: this fails only for memory */
        struct err err = {0};
        if (load(ctx, &err) < 0) {
            log_error("stream: %s", err_str(&err));
            ctx->broken = true;
        }
        wipe_pem(ctx);
    }
    if (ctx->broken)
        return NULL;
    struct tls_conn *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    mbedtls_ssl_init(&t->ssl);
    if (mbedtls_ssl_setup(&t->ssl, &ctx->conf) != 0) {
        mbedtls_ssl_free(&t->ssl);
        free(t);
        return NULL;
    }
    mbedtls_ssl_set_bio(&t->ssl, t, send_cb, recv_cb, NULL);
    return t;
}

int tls_conn_progress(const struct tls_conn *t)
{
    return t->handshake_done ? MBEDTLS_SSL_HANDSHAKE_OVER + 1 : t->ssl.state;
}

void tls_conn_free(struct tls_conn *t)
{
    if (!t)
        return;
    mbedtls_ssl_free(&t->ssl);
    free(t);
}

/* A failed session: whatever mbedTLS queued (its alert) stays in out. */
static int fail(struct tls_conn *t, int e)
{
    t->failed = true;
    if (t->out_failed)
        return -ENOMEM;
    if (log_enabled(LOG_LEVEL_DEBUG)) {
        char text[160];
        mbedtls_strerror(e, text, sizeof(text));
        log_debug("stream: TLS: %s", text);
    }
    return -EPROTO;
}

static int feed(struct tls_conn *t, struct buf *plain)
{
    while (!t->handshake_done) {
        int e = mbedtls_ssl_handshake(&t->ssl);
        if (e == MBEDTLS_ERR_SSL_WANT_READ)
            return 0;
        if (e != 0)
            return fail(t, e);
        t->handshake_done = true;
    }
    unsigned char tmp[16384];
    for (;;) {
        size_t before = t->in_len;
        int n = mbedtls_ssl_read(&t->ssl, tmp, sizeof(tmp));
        if (n > 0) {
            if (buf_append(plain, tmp, (size_t)n) < 0)
                return -ENOMEM;
            continue;
        }
        if (n == MBEDTLS_ERR_SSL_WANT_READ) {
            /* a record with nothing for us (an empty one, a warning):
             * go on while it takes input */
            if (t->in_len > 0 && t->in_len < before)
                continue;
            return 0;
        }
        if (n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || n == 0) {
            mbedtls_ssl_close_notify(&t->ssl); /* ours, into out */
            t->failed = true;
            return -ECONNRESET; /* the client closed TLS */
        }
        return fail(t, n);
    }
}

int tls_conn_feed(struct tls_conn *t, const uint8_t *in, size_t len, struct buf *plain,
                  struct buf *out)
{
    if (t->failed)
        return -EPROTO;
    t->in = in;
    t->in_len = len;
    t->out = out;
    int r = feed(t, plain);
    t->in = NULL;
    t->in_len = 0;
    t->out = NULL;
    return r;
}

int tls_conn_write(struct tls_conn *t, const void *data, size_t len, struct buf *out)
{
    if (t->failed || !t->handshake_done)
        return -EPROTO;
    t->out = out;
    const unsigned char *p = data;
    int r = 0;
    while (len > 0) {
        int n = mbedtls_ssl_write(&t->ssl, p, len);
        if (n <= 0) {
            /* the output callback takes everything: a broken session */
            r = fail(t, n);
            break;
        }
        p += n;
        len -= (size_t)n;
    }
    t->out = NULL;
    return r;
}
