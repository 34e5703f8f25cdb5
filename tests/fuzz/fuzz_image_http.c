/* libFuzzer: a registry's raw HTTP answer through the registry client's
 * response parser (src/image/http.c: http-parser and our callbacks), and
 * the Location and no_proxy rules.
 *
 * Input: one selector byte, then the bytes. Selector 0-2: a response fed in
 * pieces (the selector and the first bytes choose the cuts, as a socket
 * would), body capped at 64 KiB, then the end of the connection; 3: two
 * lines, a base URL and a Location; 4: two lines, a no_proxy list and a
 * host. Besides memory errors and leaks, the target traps when the parser
 * breaks its contract: more body than the cap, a status outside 100-999 on
 * a complete answer, bytes used past what it was given, a header value
 * with a line break; and when a Location resolves otherwise than RFC 3986
 * section 5.2 says (a reference resolver here, without dot-segment
 * removal, which registries never need), or, being relative, leaves the
 * origin of the URL it answered (another scheme, host or port: where
 * credentials would follow it). */
#include <string.h>

#include "image/http.h"
#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BODY_CAP (64u << 10)

static void no_breaks(const char *s)
{
    for (; s && *s; s++)
        if (*s == '\r' || *s == '\n')
            __builtin_trap();
}

static void response(unsigned sel, const char *p, size_t n)
{
    struct buf body = {0};
    struct http_resp r;
    http_resp_init(&r, &body, BODY_CAP, sel == 2);
    struct err err = {0};
    size_t step = sel == 0 ? n : 1 + (n ? (unsigned char)p[0] % 97 : 0);
    size_t off = 0;
    int rc = 0;
    while (off < n && rc == 0 && !r.complete) {
        size_t k = n - off < step ? n - off : step;
        size_t used = 0;
        rc = http_resp_feed(&r, p + off, k, &used, &err);
        if (used > k)
            __builtin_trap();
        if (rc == 0 && !r.complete && used != k)
            __builtin_trap(); /* stops early only at the end of the message */
        off += used;
    }
    if (rc == 0)
        rc = http_resp_eof(&r, &err);
    if (body.len > BODY_CAP)
        __builtin_trap();
    if (rc == 0 && (!r.complete || r.status < 100 || r.status > 999))
        __builtin_trap();
    if (rc < 0 && !err.code)
        __builtin_trap();
    no_breaks(r.content_type);
    no_breaks(r.www_auth);
    no_breaks(r.location);
    http_resp_clear(&r);
    buf_free(&body);
}

/* RFC 3986 5.2.2 for a base of the form scheme://authority[path][?q][#f],
 * dot segments kept: a reference written from the RFC, not from http.c. */
static bool has_scheme(const char *ref)
{
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then ':' */
    static const char more[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.";
    if (!ref[0] || !strchr(more, ref[0]) || strchr("0123456789+-.", ref[0]))
        return false;
    size_t n = strspn(ref, more);
    return ref[n] == ':';
}

static char *reference_resolve(const char *base, const char *ref)
{
    char *r = NULL;
    int n;
    const char *auth = strstr(base, "://") + 3;
    const char *path = auth + strcspn(auth, "/?#");
    size_t plen = strcspn(path, "?#");
    size_t qlen = strcspn(path, "#");
    if (has_scheme(ref))
        n = asprintf(&r, "%s", ref); /* T = R */
    else if (ref[0] == '/' && ref[1] == '/')
        n = asprintf(&r, "%.*s:%s", (int)(auth - 3 - base), base, ref);
    else if (ref[0] == '/')
        n = asprintf(&r, "%.*s%s", (int)(path - base), base, ref);
    else if (ref[0] == '#')
        n = asprintf(&r, "%.*s%s", (int)(path + qlen - base), base, ref);
    else if (ref[0] == '?')
        n = asprintf(&r, "%.*s%s", (int)(path + plen - base), base, ref);
    else if (plen == 0) /* merge with an empty base path: "/" + ref */
        n = asprintf(&r, "%.*s/%s", (int)(path - base), base, ref);
    else {
        const char *slash = path + plen;
        while (slash > path && slash[-1] != '/')
            slash--;
        n = asprintf(&r, "%.*s%s", (int)(slash - base), base, ref);
    }
    return n < 0 ? NULL : r;
}

static void check_resolve(const char *base, const char *loc)
{
    struct reg_url b, u;
    if (reg_url_split(base, &b) < 0)
        return; /* registry.c resolves only against URLs it requested */
    char *got = http_url_resolve(base, loc);
    char *want = reference_resolve(base, loc);
    if (!got || !want || strcmp(got, want) != 0)
        __builtin_trap();
    bool absolute = has_scheme(loc);
    bool network = loc[0] == '/' && loc[1] == '/';
    if (!absolute && !network) {
        /* relative: the same origin, whatever the reference holds */
        if (reg_url_split(got, &u) < 0 || u.https != b.https || u.port != b.port ||
            strcmp(u.host, b.host) != 0)
            __builtin_trap();
    } else if (network && reg_url_split(got, &u) == 0 && u.https != b.https) {
        __builtin_trap();
    }
    free(got);
    free(want);
}

static void two_lines(unsigned sel, const char *s)
{
    const char *nl = strchr(s, '\n');
    if (!nl)
        return;
    char a[2048];
    size_t n = (size_t)(nl - s);
    if (n >= sizeof(a))
        return;
    memcpy(a, s, n);
    a[n] = '\0';
    if (sel == 3) {
        check_resolve(a, nl + 1);
    } else {
        (void)http_no_proxy_match(a, nl + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0] % 5;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (sel <= 2) {
        response(sel, p, n);
        return 0;
    }
    char *s = strndup(p, n);
    if (s)
        two_lines(sel, s);
    free(s);
    return 0;
}
