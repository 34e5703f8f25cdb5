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
 * with a line break, a resolved URL that is not absolute. */
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
        if (!strstr(a, "://"))
            return;
        char *u = http_url_resolve(a, nl + 1);
        if (u && !strstr(u, ":"))
            __builtin_trap();
        free(u);
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
