/* stream/tls: TLS on the streaming port (--stream-tls-cert/--stream-tls-key),
 * with OpenSSL driven through memory BIOs so that the loop keeps doing all
 * socket I/O: bytes from the socket go in, bytes for the socket and
 * plaintext come out. libssl and libcrypto are loaded on first use (see
 * src/base/lazy.c): a daemon without TLS never maps them. TLS 1.2 at least,
 * OpenSSL's default ciphers. */
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>

#include "stream/internal.h"

static struct lazy_lib ssl_lib = {"libssl.so.3", "libssl3", NULL};
static struct lazy_lib crypto_lib = {"libcrypto.so.3", "libssl3", NULL};

LAZY_WRAP(ssl_lib, const SSL_METHOD *, TLS_server_method, (void), ())
LAZY_WRAP(ssl_lib, SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *m), (m))
LAZY_WRAP(ssl_lib, void, SSL_CTX_free, (SSL_CTX * c), (c))
LAZY_WRAP(ssl_lib, long, SSL_CTX_ctrl, (SSL_CTX * c, int cmd, long larg, void *parg),
          (c, cmd, larg, parg))
LAZY_WRAP(ssl_lib, int, SSL_CTX_use_certificate_chain_file, (SSL_CTX * c, const char *f), (c, f))
LAZY_WRAP(ssl_lib, int, SSL_CTX_use_PrivateKey_file, (SSL_CTX * c, const char *f, int t), (c, f, t))
LAZY_WRAP(ssl_lib, int, SSL_CTX_check_private_key, (const SSL_CTX *c), (c))
LAZY_WRAP(ssl_lib, SSL *, SSL_new, (SSL_CTX * c), (c))
LAZY_WRAP(ssl_lib, void, SSL_free, (SSL * s), (s))
LAZY_WRAP(ssl_lib, void, SSL_set_bio, (SSL * s, BIO *r, BIO *w), (s, r, w))
LAZY_WRAP(ssl_lib, void, SSL_set_accept_state, (SSL * s), (s))
LAZY_WRAP(ssl_lib, int, SSL_read, (SSL * s, void *b, int n), (s, b, n))
LAZY_WRAP(ssl_lib, int, SSL_write, (SSL * s, const void *b, int n), (s, b, n))
LAZY_WRAP(ssl_lib, int, SSL_get_error, (const SSL *s, int r), (s, r))
LAZY_WRAP(crypto_lib, BIO *, BIO_new, (const BIO_METHOD *m), (m))
LAZY_WRAP(crypto_lib, const BIO_METHOD *, BIO_s_mem, (void), ())
LAZY_WRAP(crypto_lib, int, BIO_read, (BIO * b, void *d, int n), (b, d, n))
LAZY_WRAP(crypto_lib, int, BIO_write, (BIO * b, const void *d, int n), (b, d, n))
LAZY_WRAP(crypto_lib, int, BIO_free, (BIO * b), (b))
LAZY_WRAP(crypto_lib, unsigned long, ERR_get_error, (void), ())
LAZY_WRAP(crypto_lib, void, ERR_error_string_n, (unsigned long e, char *b, size_t n), (e, b, n))
LAZY_WRAP(crypto_lib, void, ERR_clear_error, (void), ())

struct tls_ctx {
    SSL_CTX *ctx;
};

struct tls_conn {
    SSL *ssl;
    BIO *in, *out; /* owned by ssl */
    bool failed;
};

static int ssl_err(struct err *err, const char *what, const char *path)
{
    char text[256] = "";
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, text, sizeof(text));
    ERR_clear_error();
    return err_set_msg(err, EINVAL, "%s `%.200s`: %s", what, path, text);
}

int tls_ctx_new(const char *cert, const char *key, struct tls_ctx **ret, struct err *err)
{
    struct tls_ctx *t = calloc(1, sizeof(*t));
    if (!t)
        return err_set(err, ENOMEM, "TLS");
    if (!(t->ctx = SSL_CTX_new(TLS_server_method()))) {
        free(t);
        return ssl_err(err, "TLS context for", cert);
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    int r = 0;
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1)
        r = ssl_err(err, "the streaming certificate", cert);
    else if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1)
        r = ssl_err(err, "the streaming key", key);
    else if (SSL_CTX_check_private_key(t->ctx) != 1)
        r = ssl_err(err, "the streaming key does not match the certificate", cert);
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
    SSL_CTX_free(t->ctx);
    free(t);
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx)
{
    struct tls_conn *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ssl = SSL_new(ctx->ctx);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->in || !t->out) {
        if (t->in)
            BIO_free(t->in);
        if (t->out)
            BIO_free(t->out);
        if (t->ssl)
            SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    SSL_set_bio(t->ssl, t->in, t->out);
    SSL_set_accept_state(t->ssl);
    return t;
}

void tls_conn_free(struct tls_conn *t)
{
    if (!t)
        return;
    SSL_free(t->ssl); /* and its BIOs */
    free(t);
}

/* What OpenSSL has for the socket, appended to out. */
static int drain(struct tls_conn *t, struct buf *out)
{
    char tmp[16384];
    for (int n; (n = BIO_read(t->out, tmp, sizeof(tmp))) > 0;)
        if (buf_append(out, tmp, (size_t)n) < 0)
            return -ENOMEM;
    return 0;
}

int tls_conn_feed(struct tls_conn *t, const uint8_t *in, size_t len, struct buf *plain,
                  struct buf *out)
{
    if (t->failed)
        return -EPROTO;
    while (len > 0) {
        int n = BIO_write(t->in, in, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n <= 0)
            return -ENOMEM;
        in += n;
        len -= (size_t)n;
    }
    char tmp[16384];
    for (;;) {
        int n = SSL_read(t->ssl, tmp, sizeof(tmp));
        if (n > 0) {
            if (buf_append(plain, tmp, (size_t)n) < 0)
                return -ENOMEM;
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        if (e == SSL_ERROR_ZERO_RETURN) {
            drain(t, out);
            return -ECONNRESET; /* the client closed TLS */
        }
        t->failed = true;
        ERR_clear_error();
        drain(t, out); /* the alert, if any */
        return -EPROTO;
    }
    return drain(t, out);
}

int tls_conn_write(struct tls_conn *t, const void *data, size_t len, struct buf *out)
{
    if (t->failed)
        return -EPROTO;
    const uint8_t *p = data;
    while (len > 0) {
        int n = SSL_write(t->ssl, p, len > 16384 ? 16384 : (int)len);
        if (n <= 0) {
            /* memory BIOs take everything: this is a broken session */
            t->failed = true;
            ERR_clear_error();
            return -EPROTO;
        }
        p += n;
        len -= (size_t)n;
        if (drain(t, out) < 0)
            return -ENOMEM;
    }
    return drain(t, out);
}
