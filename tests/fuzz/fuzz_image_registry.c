/* libFuzzer: what a registry sends back, parsed (src/image/regparse.c):
 * WWW-Authenticate challenges, token answers, error bodies, and the redirect and token-realm rules
 * for credentials; and the names of its certificates (src/image/tlsname.c).
 *
 * Input: one selector byte (which parser), then its bytes. For the URL
 * rules the bytes are two URLs separated by a newline. For certificate
 * names: a host name and a certificate name (each a length byte, then its
 * bytes), subjectAltName entries (tag, length, bytes) up to an empty one,
 * then a nameConstraints extension value (or, when the selector byte is
 * odd, a whole raw extensions block). Besides memory errors, the target
 * traps when a parser breaks its contract: a value not NUL-terminated or
 * with bytes it promised to strip or escape, a status out of range,
 * credentials allowed to another host or port or over a downgrade, a
 * wildcard matching what curl's rules refuse, a constraint check with an
 * answer outside 0, -EPERM, -EINVAL. */
#include <string.h>
#include <strings.h>

#include <mbedtls/asn1.h>
#include <mbedtls/oid.h>
#include <mbedtls/x509_crt.h>

#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            __builtin_trap();
}

static void urls(const char *s)
{
    const char *nl = strchr(s, '\n');
    if (!nl)
        return;
    char from[2048], to[2048];
    size_t n = (size_t)(nl - s);
    if (n >= sizeof(from) || strlen(nl + 1) >= sizeof(to))
        return;
    memcpy(from, s, n);
    from[n] = '\0';
    strcpy(to, nl + 1);
    struct reg_url a, b;
    int ra = reg_url_split(from, &a), rb = reg_url_split(to, &b);
    if (ra == 0 && (!a.host[0] || a.port == 0 || a.port > 65535 || strlen(a.host) >= 256))
        __builtin_trap();
    for (int insecure = 0; insecure < 2; insecure++) {
        bool same = false;
        struct err err = {0};
        int r = reg_redirect_check(from, to, insecure, &same, &err);
        if (r == 0 && (ra < 0 || rb < 0))
            __builtin_trap(); /* an unusable URL was followed */
        if (r == 0 && a.https && !b.https && !insecure)
            __builtin_trap(); /* a downgrade was followed */
        if (r == 0 && same && (a.https != b.https || a.port != b.port || strcmp(a.host, b.host)))
            __builtin_trap(); /* credentials would go to another origin */
        if (r < 0 && err.code != EPROTO)
            __builtin_trap();
        bool creds = reg_realm_gets_credentials(from, to, insecure);
        if (creds && (ra < 0 || rb < 0 || (a.https && !b.https && !insecure)))
            __builtin_trap();
        if (creds && b.port != a.port && b.port != (b.https ? 443u : 80u))
            __builtin_trap(); /* another port is another service */
        if (creds && strcmp(a.host, b.host) != 0) {
            /* another host: only a sibling in the registry's parent
             * domain, over https */
            if (!a.https || !b.https)
                __builtin_trap();
            const char *parent = strchr(a.host, '.');
            size_t pl = parent ? strlen(parent) : 0, bl = strlen(b.host);
            if (!parent || !strchr(parent + 1, '.') ||
                !(strcmp(b.host, parent + 1) == 0 ||
                  (bl > pl && strcmp(b.host + bl - pl, parent) == 0)))
                __builtin_trap();
        }
    }
}

/* Control and non-ASCII bytes (and '\\') appear only as \xNN escapes. */
static void escaped(const char *s)
{
    printable(s);
    for (; *s; s++)
        if (*s == '\\' && (s[1] != 'x' || !strchr("0123456789abcdef", s[2]) || !s[2] ||
                           !strchr("0123456789abcdef", s[3]) || !s[3]))
            __builtin_trap();
}

/* curl's rule, written out: an exact name, or "*." and at least two
 * labels matching all but the host's first (non-empty) label. */
static bool want_match(const char *pat, size_t plen, const char *host)
{
    char p[300], h[300];
    if (plen >= sizeof(p) || strlen(host) >= sizeof(h) || memchr(pat, '\0', plen))
        return false;
    memcpy(p, pat, plen);
    p[plen] = '\0';
    strcpy(h, host);
    if (plen && p[plen - 1] == '.') /* one final dot each */
        p[--plen] = '\0';
    size_t hl = strlen(h);
    if (hl && h[hl - 1] == '.')
        h[--hl] = '\0';
    if (!plen || !hl || strstr(p, "..") || p[0] == '.' || p[plen - 1] == '.')
        return false;
    if (!strchr(p, '*'))
        return strcasecmp(p, h) == 0;
    if (strncmp(p, "*.", 2) != 0 || strchr(p + 1, '*') || !strchr(p + 2, '.'))
        return false;
    const char *dot = strchr(h, '.');
    return dot && dot != h && strcasecmp(dot, p + 1) == 0;
}

/* DER: tag, a definite length, the bytes. */
static size_t der(uint8_t *out, uint8_t tag, const uint8_t *v, size_t n)
{
    size_t o = 0;
    out[o++] = tag;
    if (n < 0x80) {
        out[o++] = (uint8_t)n;
    } else {
        out[o++] = 0x82;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)n;
    }
    memmove(out + o, v, n);
    return o + n;
}

static void cert_names(bool raw_ext, const uint8_t *d, size_t n)
{
    char host[256], cn[256];
    for (char *dst = host; dst; dst = dst == host ? cn : NULL) {
        if (n < 1 || d[0] >= 255 || n < 1u + d[0])
            return;
        memcpy(dst, d + 1, d[0]);
        dst[d[0]] = '\0';
        n -= 1u + d[0];
        d += 1u + d[0];
    }
    mbedtls_x509_crt leaf, ca;
    memset(&leaf, 0, sizeof(leaf));
    memset(&ca, 0, sizeof(ca));
    mbedtls_x509_sequence sans[8];
    size_t n_sans = 0;
    while (n >= 2 && d[1] && n >= 2u + d[1] && n_sans < 8) {
        mbedtls_x509_sequence *q = &sans[n_sans];
        *q = (mbedtls_x509_sequence){.buf = {.tag = d[0], .len = d[1], .p = (uint8_t *)d + 2}};
        if (n_sans)
            sans[n_sans - 1].next = q;
        n_sans++;
        n -= 2u + d[1];
        d += 2u + d[1];
    }
    if (n >= 2 && !d[1]) {
        n -= 2;
        d += 2;
    }
    if (n_sans) {
        leaf.subject_alt_names = sans[0];
        leaf.ext_types |= MBEDTLS_X509_EXT_SUBJECT_ALT_NAME;
    }
    static const char cn_oid[] = MBEDTLS_OID_AT_CN;
    leaf.subject =
        (mbedtls_x509_name){.oid = {.tag = MBEDTLS_ASN1_OID, .len = 3, .p = (uint8_t *)cn_oid},
                            .val = {.len = strlen(cn), .p = (uint8_t *)cn}};
    /* the names: ours against curl's rule written out */
    bool any = false;
    if (n_sans) {
        for (size_t i = 0; i < n_sans; i++)
            if (sans[i].buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 2)) {
                bool got = tls_name_matches((const char *)sans[i].buf.p, sans[i].buf.len, host);
                if (got != want_match((const char *)sans[i].buf.p, sans[i].buf.len, host))
                    __builtin_trap();
                any |= got;
            }
    } else {
        any = want_match(cn, strlen(cn), host);
    }
    if (tls_leaf_name_ok(&leaf, host) != any)
        __builtin_trap();
    /* the constraints: a whole extensions block, or one nameConstraints */
    static uint8_t ext[70000];
    if (n > 60000)
        return;
    size_t len;
    if (raw_ext) {
        memcpy(ext, d, n);
        len = n;
    } else {
        static const char nc_oid[] = MBEDTLS_OID_NAME_CONSTRAINTS;
        uint8_t one[65000];
        size_t o = der(one, MBEDTLS_ASN1_OID, (const uint8_t *)nc_oid, 3);
        o += der(one + o, MBEDTLS_ASN1_OCTET_STRING, d, n);
        uint8_t seq[65100];
        size_t so = der(seq, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE, one, o);
        len = der(ext, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE, seq, so);
    }
    ca.v3_ext = (mbedtls_x509_buf){
        .tag = MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE, .len = len, .p = ext};
    static const uint8_t ip4[4] = {127, 0, 0, 1};
    int r = tls_name_constraints_check(&ca, &leaf, host[0] ? host : NULL, host[0] ? NULL : ip4,
                                       host[0] ? 0 : 4);
    if (r != 0 && r != -EPERM && r != -EINVAL)
        __builtin_trap();
    memset(&ca, 0, sizeof(ca));
    if (tls_name_constraints_check(&ca, &leaf, host, NULL, 0) != 0)
        __builtin_trap(); /* no extension, no constraint */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    if (data[0] % 6 >= 4) {
        cert_names(data[0] & 1, data + 1, size - 1);
        return 0;
    }
    unsigned sel = data[0] % 4;
    data++;
    size--;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    switch (sel) {
    case 0: {
        struct reg_challenge c;
        reg_challenge_parse(s, &c);
        if (strnlen(c.realm, sizeof(c.realm)) == sizeof(c.realm) ||
            strnlen(c.service, sizeof(c.service)) == sizeof(c.service) ||
            strnlen(c.scope, sizeof(c.scope)) == sizeof(c.scope) || (c.basic && c.bearer))
            __builtin_trap();
        break;
    }
    case 1: {
        char *tok = NULL;
        struct err err = {0};
        if (reg_token_parse(data, size, &tok, &err) == 0) {
            if (!tok || !*tok || strchr(tok, ' '))
                __builtin_trap();
            printable(tok);
            free(tok);
        }
        break;
    }
    case 2: {
        char out[300];
        memset(out, 'x', sizeof(out));
        reg_error_message(data, size, out, sizeof(out));
        if (!memchr(out, '\0', sizeof(out)))
            __builtin_trap();
        escaped(out);
        break;
    }
    case 3:
        urls(s);
        break;
    }
    free(s);
    return 0;
}
