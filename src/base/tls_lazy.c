/* mbedTLS (2.28, Debian's) through wrappers that load it on first use (see
 * lazy.c): the streaming server's TLS (src/stream/tls.c) and the registry
 * client's (src/image/http.c). The idle daemon never maps it. */
#include <mbedtls/asn1.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include <sys/random.h>

#include "base.h"
#include "tls.h"

static struct lazy_lib tls_lib = {"libmbedtls.so.14", "libmbedtls14", NULL};
static struct lazy_lib x509_lib = {"libmbedx509.so.1", "libmbedx509-1", NULL};
static struct lazy_lib crypto_lib = {"libmbedcrypto.so.7", "libmbedcrypto7", NULL};

LAZY_WRAP(tls_lib, void, mbedtls_ssl_config_init, (mbedtls_ssl_config * c), (c))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_config_defaults,
          (mbedtls_ssl_config * c, int endpoint, int transport, int preset),
          (c, endpoint, transport, preset))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_config_free, (mbedtls_ssl_config * c), (c))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_rng,
          (mbedtls_ssl_config * c, int (*f_rng)(void *, unsigned char *, size_t), void *p_rng),
          (c, f_rng, p_rng))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_min_version, (mbedtls_ssl_config * c, int ma, int mi),
          (c, ma, mi))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_max_version, (mbedtls_ssl_config * c, int ma, int mi),
          (c, ma, mi))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_ciphersuites, (mbedtls_ssl_config * c, const int *l),
          (c, l))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_curves,
          (mbedtls_ssl_config * c, const mbedtls_ecp_group_id *l), (c, l))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_sig_hashes, (mbedtls_ssl_config * c, const int *l),
          (c, l))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_renegotiation, (mbedtls_ssl_config * c, int r), (c, r))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_conf_own_cert,
          (mbedtls_ssl_config * c, mbedtls_x509_crt *crt, mbedtls_pk_context *key), (c, crt, key))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_init, (mbedtls_ssl_context * s), (s))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_setup, (mbedtls_ssl_context * s, const mbedtls_ssl_config *c),
          (s, c))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_set_bio,
          (mbedtls_ssl_context * s, void *p, mbedtls_ssl_send_t *snd, mbedtls_ssl_recv_t *rcv,
           mbedtls_ssl_recv_timeout_t *rcv_t),
          (s, p, snd, rcv, rcv_t))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_handshake, (mbedtls_ssl_context * s), (s))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_read, (mbedtls_ssl_context * s, unsigned char *b, size_t n),
          (s, b, n))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_write,
          (mbedtls_ssl_context * s, const unsigned char *b, size_t n), (s, b, n))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_close_notify, (mbedtls_ssl_context * s), (s))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_free, (mbedtls_ssl_context * s), (s))
LAZY_WRAP(x509_lib, void, mbedtls_x509_crt_init, (mbedtls_x509_crt * c), (c))
LAZY_WRAP(x509_lib, int, mbedtls_x509_crt_parse,
          (mbedtls_x509_crt * c, const unsigned char *buf, size_t len), (c, buf, len))
LAZY_WRAP(x509_lib, void, mbedtls_x509_crt_free, (mbedtls_x509_crt * c), (c))
LAZY_WRAP(crypto_lib, void, mbedtls_pk_init, (mbedtls_pk_context * k), (k))
LAZY_WRAP(crypto_lib, int, mbedtls_pk_parse_key,
          (mbedtls_pk_context * k, const unsigned char *key, size_t keylen,
           const unsigned char *pwd, size_t pwdlen),
          (k, key, keylen, pwd, pwdlen))
LAZY_WRAP(crypto_lib, int, mbedtls_pk_check_pair,
          (const mbedtls_pk_context *pub, const mbedtls_pk_context *prv), (pub, prv))
LAZY_WRAP(crypto_lib, void, mbedtls_pk_free, (mbedtls_pk_context * k), (k))
LAZY_WRAP(crypto_lib, void, mbedtls_strerror, (int e, char *b, size_t n), (e, b, n))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_authmode, (mbedtls_ssl_config * c, int m), (c, m))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_conf_ca_chain,
          (mbedtls_ssl_config * c, mbedtls_x509_crt *ca, mbedtls_x509_crl *crl), (c, ca, crl))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_set_verify,
          (mbedtls_ssl_context * s, int (*f)(void *, mbedtls_x509_crt *, int, uint32_t *), void *p),
          (s, f, p))
LAZY_WRAP(x509_lib, int, mbedtls_x509_dn_gets,
          (char *buf, size_t size, const mbedtls_x509_name *dn), (buf, size, dn))
LAZY_WRAP(crypto_lib, int, mbedtls_asn1_get_tag,
          (unsigned char **p, const unsigned char *end, size_t *len, int tag), (p, end, len, tag))
LAZY_WRAP(crypto_lib, int, mbedtls_asn1_get_len,
          (unsigned char **p, const unsigned char *end, size_t *len), (p, end, len))
LAZY_WRAP(crypto_lib, int, mbedtls_asn1_get_bool,
          (unsigned char **p, const unsigned char *end, int *val), (p, end, val))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_set_hostname, (mbedtls_ssl_context * s, const char *h), (s, h))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_session_init, (mbedtls_ssl_session * s), (s))
LAZY_WRAP(tls_lib, void, mbedtls_ssl_session_free, (mbedtls_ssl_session * s), (s))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_get_session,
          (const mbedtls_ssl_context *s, mbedtls_ssl_session *d), (s, d))
LAZY_WRAP(tls_lib, int, mbedtls_ssl_set_session,
          (mbedtls_ssl_context * s, const mbedtls_ssl_session *d), (s, d))
LAZY_WRAP(tls_lib, uint32_t, mbedtls_ssl_get_verify_result, (const mbedtls_ssl_context *s), (s))
LAZY_WRAP(x509_lib, int, mbedtls_x509_crt_parse_file, (mbedtls_x509_crt * c, const char *path),
          (c, path))
LAZY_WRAP(x509_lib, int, mbedtls_x509_crt_verify_info,
          (char *buf, size_t size, const char *prefix, uint32_t flags), (buf, size, prefix, flags))
LAZY_WRAP(crypto_lib, int, mbedtls_pk_parse_keyfile,
          (mbedtls_pk_context * k, const char *path, const char *pwd), (k, path, pwd))

/* ---- the shared policy (tls.h) ---- */

static int kernel_random(void *unused, unsigned char *p, size_t n)
{
    (void)unused;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return MBEDTLS_ERR_SSL_INTERNAL_ERROR;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static const mbedtls_ecp_group_id curves[] = {MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1,
                                              MBEDTLS_ECP_DP_SECP384R1, MBEDTLS_ECP_DP_NONE};
static const int sig_hashes[] = {MBEDTLS_MD_SHA512, MBEDTLS_MD_SHA384, MBEDTLS_MD_SHA256,
                                 MBEDTLS_MD_NONE};

void tls_conf_policy(mbedtls_ssl_config *conf, const int *ciphersuites)
{
    mbedtls_ssl_conf_rng(conf, kernel_random, NULL);
    mbedtls_ssl_conf_min_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_max_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_ciphersuites(conf, ciphersuites);
    mbedtls_ssl_conf_curves(conf, curves);
    mbedtls_ssl_conf_sig_hashes(conf, sig_hashes);
    mbedtls_ssl_conf_renegotiation(conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
}
