/* URLs and proxies for the registry client's HTTP (http.c): where a
 * request goes, and through which proxy. Proxies are read as libcurl 7.88
 * reads them (see http.c's top comment); no_proxy entries are host names
 * (matching their subdomains too), IP addresses and CIDR ranges, or "*".
 * Pure but for getenv: fuzzed by tests/fuzz/fuzz_image_http.c. */
#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "image/http_internal.h"
#include "image/internal.h"

/* ---- URLs ------------------------------------------------------------------- */

int http_url_parse(const char *s, struct http_url *u)
{
    struct reg_url ru;
    int r = reg_url_split(s, &ru);
    if (r < 0)
        return r;
    u->https = ru.https;
    snprintf(u->host, sizeof(u->host), "%s", ru.host);
    u->port = ru.port;
    if (ru.port == (ru.https ? 443u : 80u))
        snprintf(u->hostport, sizeof(u->hostport), "%s", ru.host);
    else
        snprintf(u->hostport, sizeof(u->hostport), "%s:%u", ru.host, ru.port);
    const char *a = strstr(s, "://") + 3;
    const char *t = a + strcspn(a, "/?#");
    u->target = *t == '#' ? "" : t;
    return 0;
}

char *http_url_resolve(const char *base, const char *loc)
{
    char *ret = NULL;
    const char *bs = strstr(base, "://");
    if (!bs)
        return NULL;
    size_t slen = (size_t)(bs - base); /* the scheme's length */
    /* an absolute URL (a scheme of letters, digits, + - .) */
    size_t k = 0;
    while (isalnum((unsigned char)loc[k]) || loc[k] == '+' || loc[k] == '-' || loc[k] == '.')
        k++;
    if (k > 0 && isalpha((unsigned char)loc[0]) && loc[k] == ':')
        return strdup(loc);
    if (loc[0] == '/' && loc[1] == '/') {
        if (asprintf(&ret, "%.*s:%s", (int)slen, base, loc) < 0)
            return NULL;
        return ret;
    }
    const char *auth = bs + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *path = auth + alen;
    if (loc[0] == '/') {
        if (asprintf(&ret, "%.*s%s", (int)(path - base), base, loc) < 0)
            return NULL;
        return ret;
    }
    size_t plen = strcspn(path, "?#");
    if (loc[0] == '#') { /* the same document: path and query kept */
        if (asprintf(&ret, "%.*s%s", (int)(path + strcspn(path, "#") - base), base, loc) < 0)
            return NULL;
        return ret;
    }
    if (loc[0] == '?') {
        if (asprintf(&ret, "%.*s%s", (int)(path + plen - base), base, loc) < 0)
            return NULL;
        return ret;
    }
    /* relative to the base's directory */
    size_t dir = plen;
    while (dir > 0 && path[dir - 1] != '/')
        dir--;
    if (asprintf(&ret, "%.*s%s%s", (int)(path + dir - base), base, dir == 0 ? "/" : "", loc) < 0)
        return NULL;
    return ret;
}

/* ---- proxies ----------------------------------------------------------------- */

bool http_ip_parse(const char *host, int *af, uint8_t addr[16])
{
    char tmp[256];
    size_t n = strlen(host);
    if (host[0] == '[' && n >= 2 && n - 2 < sizeof(tmp)) {
        memcpy(tmp, host + 1, n - 2);
        tmp[n - 2] = '\0';
        *af = AF_INET6;
        return inet_pton(AF_INET6, tmp, addr) == 1;
    }
    if (inet_pton(AF_INET, host, addr) == 1) {
        *af = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, host, addr) == 1) {
        *af = AF_INET6;
        return true;
    }
    return false;
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, b, bytes) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

static bool no_proxy_entry(const char *tok, size_t len, const char *host, bool host_is_ip, int haf,
                           const uint8_t *haddr)
{
    char t[256];
    if (len == 0 || len >= sizeof(t))
        return false;
    memcpy(t, tok, len);
    t[len] = '\0';
    if (strcmp(t, "*") == 0)
        return true;
    if (host_is_ip) {
        char *slash = strchr(t, '/');
        unsigned bits = 0;
        bool has_bits = false;
        if (slash) {
            *slash = '\0';
            char *end;
            unsigned long b = strtoul(slash + 1, &end, 10);
            if (*end || slash[1] == '\0')
                return false;
            bits = (unsigned)b;
            has_bits = true;
        }
        int af;
        uint8_t a[16];
        if (!http_ip_parse(t, &af, a) || af != haf)
            return false;
        unsigned max = af == AF_INET ? 32 : 128;
        if (!has_bits || bits > max)
            bits = max;
        return prefix_match(a, haddr, bits);
    }
    /* a host name: itself and its subdomains; dots around ignored */
    char *name = t;
    size_t nl = len;
    if (nl && name[nl - 1] == '.')
        name[--nl] = '\0';
    if (nl && name[0] == '.') {
        name++;
        nl--;
    }
    size_t hl = strlen(host);
    if (nl == 0)
        return false;
    if (nl == hl)
        return strcasecmp(name, host) == 0;
    return nl < hl && host[hl - nl - 1] == '.' && strcasecmp(name, host + hl - nl) == 0;
}

bool http_no_proxy_match(const char *no_proxy, const char *host)
{
    if (!no_proxy || !*no_proxy)
        return false;
    int af = 0;
    uint8_t addr[16];
    bool is_ip = http_ip_parse(host, &af, addr);
    const char *p = no_proxy;
    while (*p) {
        p += strspn(p, ", \t");
        size_t n = strcspn(p, ", \t");
        if (n && no_proxy_entry(p, n, host, is_ip, af, addr))
            return true;
        p += n;
    }
    return false;
}

static const char *env_first(const char *a, const char *b)
{
    const char *v = a ? getenv(a) : NULL;
    if (v && *v)
        return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : NULL;
}

const char *http_proxy_for(const struct http_url *u)
{
    const char *np = env_first("no_proxy", "NO_PROXY");
    if (http_no_proxy_match(np, u->host))
        return NULL;
    const char *p =
        u->https ? env_first("https_proxy", "HTTPS_PROXY") : env_first("http_proxy", NULL);
    return p ? p : env_first("all_proxy", "ALL_PROXY");
}

static int unescape(const char *s, size_t n, struct buf *out)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n + 0 && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            c = (char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (buf_append(out, &c, 1) < 0)
            return -ENOMEM;
    }
    return 0;
}

int http_proxy_parse(const char *spec, struct http_proxy *px, struct err *err)
{
    *px = (struct http_proxy){.port = 1080};
    const char *s = spec;
    const char *sep = strstr(spec, "://");
    if (sep) {
        size_t sl = (size_t)(sep - spec);
        if (!(sl == 4 && strncasecmp(spec, "http", 4) == 0))
            return reg_err_plain(err, EPROTONOSUPPORT,
                                 "proxy %.*s://...: only http:// proxies are supported", (int)sl,
                                 spec);
        s = sep + 3;
    }
    size_t alen = strcspn(s, "/?#");
    const char *at = memchr(s, '@', alen);
    for (const char *q = at; q && q < s + alen; q++) /* the last @ of the authority */
        if (*q == '@')
            at = q;
    const char *hp = at ? at + 1 : s;
    size_t hplen = alen - (size_t)(hp - s);
    if (at) {
        struct buf ui = {0};
        const char *colon = memchr(s, ':', (size_t)(at - s));
        struct buf user = {0}, pass = {0};
        int r = unescape(s, colon ? (size_t)(colon - s) : (size_t)(at - s), &user);
        if (r == 0 && colon)
            r = unescape(colon + 1, (size_t)(at - colon - 1), &pass);
        if (r == 0 && (buf_append(&ui, user.data, user.len) < 0 || buf_append(&ui, ":", 1) < 0 ||
                       buf_append(&ui, pass.data, pass.len) < 0))
            r = -ENOMEM;
        if (r == 0 && !(px->basic = b64_encode((const uint8_t *)ui.data, ui.len)))
            r = -ENOMEM;
        if (ui.data)
            explicit_bzero(ui.data, ui.len);
        if (pass.data)
            explicit_bzero(pass.data, pass.len);
        buf_free(&ui);
        buf_free(&user);
        buf_free(&pass);
        if (r < 0)
            return err_set(err, ENOMEM, "proxy");
    }
    const char *portp = NULL;
    size_t hl = hplen;
    if (hplen && hp[0] == '[') {
        const char *rb = memchr(hp, ']', hplen);
        if (!rb)
            return reg_err_plain(err, EINVAL, "proxy %s: malformed address",
                                 "from the environment");
        hl = (size_t)(rb - hp) + 1;
        if (hl < hplen && hp[hl] == ':')
            portp = hp + hl + 1;
    } else {
        const char *c = memchr(hp, ':', hplen);
        if (c) {
            hl = (size_t)(c - hp);
            portp = c + 1;
        }
    }
    if (hl == 0 || hl >= sizeof(px->host))
        return reg_err_plain(err, EINVAL, "proxy from the environment: no host");
    memcpy(px->host, hp, hl);
    px->host[hl] = '\0';
    if (portp && portp < hp + hplen) {
        char *end;
        unsigned long port = strtoul(portp, &end, 10);
        if (end != hp + hplen || port == 0 || port > 65535)
            return reg_err_plain(err, EINVAL, "proxy %s: bad port", px->host);
        px->port = (unsigned)port;
    }
    return 0;
}
