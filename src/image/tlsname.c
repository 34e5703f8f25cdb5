/* Certificate names, checked the way curl and OpenSSL check them, where
 * mbedTLS 2.28 is looser. Called from http.c's verify callback; no I/O.
 *
 * Why: mbedTLS matches `*.test` against `evil.test` (a wildcard over a
 * whole top-level domain), and it ignores a nameConstraints extension it
 * was not told is critical, so an intermediate CA limited to `.good.test`
 * could issue for any name. Here:
 *   - a leaf's names (its DNS subjectAltNames, or its CN when it has no
 *     subjectAltName extension, as mbedTLS matches) match the host exactly
 *     (ASCII case aside), or as a wildcard that is the whole left-most
 *     label (`*.example.com`: never `f*.example.com`, `*` elsewhere, or an
 *     empty label) followed by at least two labels, matching exactly one
 *     non-empty label of the host (never an IP address: those are matched
 *     against iPAddress names in http.c);
 *   - every CA of the verified chain (root included) with a nameConstraints
 *     extension constrains the leaf's DNS and IP names and the host the
 *     connection asked for: none may fall in an excluded subtree, and when
 *     a CA permits subtrees of a type, each name of that type must fall in
 *     one of them (RFC 5280 4.2.1.10, with OpenSSL's reading of a leading
 *     dot: `.good.test` holds a.good.test but not good.test). A subtree
 *     with minimum or maximum, or a malformed extension, fails the chain
 *     as OpenSSL does. Other name types (directory names, e-mail, URIs) do
 *     not constrain DNS names or addresses and are left alone. */
#include <string.h>
#include <strings.h>

#include <mbedtls/asn1.h>
#include <mbedtls/oid.h>
#include <mbedtls/x509_crt.h>

#include "image/internal.h"

#define TAG_DNS (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 2)
#define TAG_IP  (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7)

/* ---- wildcards ------------------------------------------------------------ */

static size_t without_final_dot(const char *s, size_t n)
{
    return n && s[n - 1] == '.' ? n - 1 : n;
}

static bool name_eq(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && strncasecmp(a, b, an) == 0;
}

bool tls_name_matches(const char *pat, size_t plen, const char *host)
{
    size_t hlen = without_final_dot(host, strlen(host));
    plen = without_final_dot(pat, plen);
    if (!plen || !hlen || memchr(pat, '\0', plen))
        return false;
    /* no empty label anywhere in the pattern */
    for (size_t i = 0; i < plen; i++)
        if (pat[i] == '.' && (i == 0 || i + 1 == plen || pat[i + 1] == '.'))
            return false;
    if (!memchr(pat, '*', plen))
        return name_eq(pat, plen, host, hlen);
    /* "*." then at least two labels, and no other '*' */
    if (plen < 3 || pat[0] != '*' || pat[1] != '.' || memchr(pat + 1, '*', plen - 1))
        return false;
    const char *rest = pat + 1; /* ".example.com" */
    size_t rlen = plen - 1;
    if (!memchr(rest + 1, '.', rlen - 1))
        return false;
    const char *dot = memchr(host, '.', hlen);
    if (!dot || dot == host)
        return false;
    return name_eq(dot, hlen - (size_t)(dot - host), rest, rlen);
}

bool tls_leaf_name_ok(const mbedtls_x509_crt *leaf, const char *host)
{
    if (leaf->ext_types & MBEDTLS_X509_EXT_SUBJECT_ALT_NAME) {
        for (const mbedtls_x509_sequence *s = &leaf->subject_alt_names; s && s->buf.p; s = s->next)
            if (s->buf.tag == TAG_DNS && tls_name_matches((const char *)s->buf.p, s->buf.len, host))
                return true;
        return false;
    }
    for (const mbedtls_x509_name *n = &leaf->subject; n && n->oid.p; n = n->next)
        if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0 &&
            tls_name_matches((const char *)n->val.p, n->val.len, host))
            return true;
    return false;
}

/* ---- name constraints ------------------------------------------------------- */

/* The value of crt's extension oid: 1 found, 0 absent, -EINVAL malformed. */
static int find_ext(const mbedtls_x509_crt *crt, const char *oid, size_t oid_len,
                    unsigned char **ret, size_t *ret_len)
{
    unsigned char *p = crt->v3_ext.p;
    if (!p || !crt->v3_ext.len)
        return 0;
    const unsigned char *end = p + crt->v3_ext.len;
    size_t len;
    /* mbedTLS keeps the SEQUENCE inside [3]; take either */
    if (*p == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 3)) {
        if (mbedtls_asn1_get_tag(&p, end, &len,
                                 MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 3))
            return -EINVAL;
        end = p + len;
    }
    if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE))
        return -EINVAL;
    end = p + len;
    while (p < end) {
        if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE))
            return -EINVAL;
        const unsigned char *eend = p + len;
        size_t olen;
        if (mbedtls_asn1_get_tag(&p, eend, &olen, MBEDTLS_ASN1_OID))
            return -EINVAL;
        bool match = olen == oid_len && memcmp(p, oid, olen) == 0;
        p += olen;
        int crit = 0;
        if (p < eend && *p == MBEDTLS_ASN1_BOOLEAN && mbedtls_asn1_get_bool(&p, eend, &crit))
            return -EINVAL;
        size_t vlen;
        if (mbedtls_asn1_get_tag(&p, eend, &vlen, MBEDTLS_ASN1_OCTET_STRING) || p + vlen != eend)
            return -EINVAL;
        if (match) {
            *ret = p;
            *ret_len = vlen;
            return 1;
        }
        p = (unsigned char *)eend;
    }
    return 0;
}

/* Is the DNS name within subtree base? OpenSSL's nc_dns: an empty base
 * holds everything; otherwise the name ends with base, at a label
 * boundary unless base starts with a dot. */
static bool dns_within(const char *name, size_t nlen, const unsigned char *base, size_t blen)
{
    nlen = without_final_dot(name, nlen);
    if (blen == 0)
        return true;
    if (nlen < blen)
        return false;
    const char *tail = name + nlen - blen;
    if (nlen > blen && base[0] != '.' && tail[-1] != '.')
        return false;
    return strncasecmp(tail, (const char *)base, blen) == 0 && !memchr(base, '\0', blen);
}

static bool ip_within(const uint8_t *ip, size_t iplen, const unsigned char *base, size_t blen)
{
    if (blen != 2 * iplen)
        return false;
    for (size_t i = 0; i < iplen; i++)
        if ((ip[i] & base[iplen + i]) != (base[i] & base[iplen + i]))
            return false;
    return true;
}

/* Does name (tag TAG_DNS or TAG_IP) fall in a subtree of `trees` (a
 * GeneralSubtrees body) of its type? *ret_any: the trees have its type.
 * -EINVAL for a malformed or minimum/maximum-bearing subtree. */
static int within_trees(unsigned char *p, const unsigned char *end, int tag, const void *name,
                        size_t nlen, bool *ret_any, bool *ret_in)
{
    *ret_any = *ret_in = false;
    while (p < end) {
        size_t len;
        if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE))
            return -EINVAL;
        const unsigned char *send = p + len;
        if (p >= send)
            return -EINVAL;
        int btag = *p++;
        size_t blen;
        if (mbedtls_asn1_get_len(&p, send, &blen) || p + blen != send)
            return -EINVAL; /* minimum or maximum after the base: refused */
        if (btag == tag) {
            *ret_any = true;
            if (tag == TAG_DNS ? dns_within(name, nlen, p, blen) : ip_within(name, nlen, p, blen))
                *ret_in = true;
            if (tag == TAG_IP && blen != 8 && blen != 32)
                return -EINVAL;
        }
        p = (unsigned char *)send;
    }
    return 0;
}

/* One name against a CA's permitted ([0]) and excluded ([1]) subtrees. */
static int check_name(unsigned char *nc, size_t nclen, int tag, const void *name, size_t nlen)
{
    unsigned char *p = nc;
    const unsigned char *end = nc + nclen;
    size_t len;
    if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) ||
        p + len != end)
        return -EINVAL;
    while (p < end) {
        int which = *p;
        if (mbedtls_asn1_get_tag(&p, end, &len, which) ||
            (which != (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 0) &&
             which != (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 1)))
            return -EINVAL;
        bool any, in;
        int r = within_trees(p, p + len, tag, name, nlen, &any, &in);
        if (r < 0)
            return r;
        bool permitted = (which & 0x1f) == 0;
        if (permitted ? any && !in : in)
            return -EPERM;
        p += len;
    }
    return 0;
}

int tls_name_constraints_check(const mbedtls_x509_crt *ca, const mbedtls_x509_crt *leaf,
                               const char *host, const uint8_t *ip, size_t iplen)
{
    unsigned char *nc;
    size_t nclen;
    int r = find_ext(ca, MBEDTLS_OID_NAME_CONSTRAINTS,
                     MBEDTLS_OID_SIZE(MBEDTLS_OID_NAME_CONSTRAINTS), &nc, &nclen);
    if (r <= 0)
        return r;
    bool dns_san = false;
    for (const mbedtls_x509_sequence *s = &leaf->subject_alt_names; s && s->buf.p; s = s->next) {
        if (s->buf.tag == TAG_DNS) {
            dns_san = true;
            r = check_name(nc, nclen, TAG_DNS, s->buf.p, s->buf.len);
        } else if (s->buf.tag == TAG_IP) {
            r = check_name(nc, nclen, TAG_IP, s->buf.p, s->buf.len);
        }
        if (r < 0)
            return r;
    }
    /* the CN stands for a DNS name when no subjectAltName does (OpenSSL) */
    for (const mbedtls_x509_name *n = &leaf->subject; !dns_san && n && n->oid.p; n = n->next)
        if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0 && n->val.len &&
            memchr(n->val.p, '.', n->val.len) &&
            (r = check_name(nc, nclen, TAG_DNS, n->val.p, n->val.len)) < 0)
            return r;
    /* and the name asked for: a wildcard may cover an excluded host */
    if (host && (r = check_name(nc, nclen, TAG_DNS, host, strlen(host))) < 0)
        return r;
    if (ip && iplen && (r = check_name(nc, nclen, TAG_IP, ip, iplen)) < 0)
        return r;
    return 0;
}
