/* What a registry says, parsed without any I/O (its HTTP answers are read
 * by http.c): WWW-Authenticate challenges, token answers and error bodies, and
 * the rules for where credentials may go (redirects, token realms). All of
 * it is hostile input: every function bounds what it copies and reads
 * only the bytes it is given. registry.c does the talking; the fuzz
 * targets feed these directly. */
#include <ctype.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "image/internal.h"

int reg_err_plain(struct err *err, int code, const char *fmt, ...)
{
    if (!err)
        return -code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    err->code = code;
    err->no_sys = true; /* the registry's words: no errno text when shown */
    return -code;
}

bool reg_err_transient(const struct err *err)
{
    switch (err->code) {
    case EAGAIN:
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return true;
    default:
        return false;
    }
}

/* ---- WWW-Authenticate ---------------------------------------------------- */

void reg_challenge_parse(const char *h, struct reg_challenge *c)
{
    *c = (struct reg_challenge){0};
    while (isspace((unsigned char)*h))
        h++;
    if (strncasecmp(h, "Bearer", 6) == 0 && (h[6] == '\0' || isspace((unsigned char)h[6]))) {
        c->bearer = true;
        h += 6;
    } else if (strncasecmp(h, "Basic", 5) == 0 && (h[5] == '\0' || isspace((unsigned char)h[5]))) {
        c->basic = true;
        return;
    } else {
        return;
    }
    while (*h) {
        while (*h == ' ' || *h == ',' || *h == '\t')
            h++;
        const char *eq = strchr(h, '=');
        if (!eq)
            break;
        size_t klen = (size_t)(eq - h);
        const char *v = eq + 1;
        char val[sizeof(c->realm)];
        size_t vl = 0;
        if (*v == '"') {
            v++;
            while (*v && *v != '"') {
                if (*v == '\\' && v[1])
                    v++;
                if (vl < sizeof(val) - 1)
                    val[vl++] = *v;
                v++;
            }
            if (*v == '"')
                v++;
        } else {
            while (*v && *v != ',') {
                if (vl < sizeof(val) - 1)
                    val[vl++] = *v;
                v++;
            }
        }
        val[vl] = '\0';
        if (klen == 5 && strncasecmp(h, "realm", 5) == 0)
            memcpy(c->realm, val, vl + 1);
        else if (klen == 7 && strncasecmp(h, "service", 7) == 0)
            memcpy(c->service, val, vl + 1);
        else if (klen == 5 && strncasecmp(h, "scope", 5) == 0)
            memcpy(c->scope, val, vl + 1);
        h = v;
    }
}

/* ---- token answers ------------------------------------------------------- */

int reg_token_parse(const void *data, size_t len, char **ret, struct err *err)
{
    if (len > IMAGE_TOKEN_MAX)
        return err_set(err, EFBIG, "token answer larger than %u bytes", IMAGE_TOKEN_MAX);
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
    const char *tok = json_string_value(json_object_get(j, "token"));
    if (!tok || !*tok)
        tok = json_string_value(json_object_get(j, "access_token"));
    /* a token goes into an Authorization header: printable ASCII only */
    bool ok = tok && *tok;
    for (const char *p = tok; ok && *p; p++)
        ok = *p > 0x20 && *p < 0x7f;
    char *v = ok ? strdup(tok) : NULL;
    json_decref(j);
    if (!ok)
        return err_set(err, EACCES, "no usable token in the answer");
    if (!v)
        return err_set(err, ENOMEM, "token");
    *ret = v;
    return 0;
}

/* ---- error bodies -------------------------------------------------------- */

/* Appends s (at most max bytes of it) to out with control and non-ASCII
 * bytes (and the backslash) escaped as \xNN: the registry chose these
 * bytes, and they go to a terminal or a log. An escape never gets cut. */
static void append_clean(char *out, size_t outsz, size_t *o, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max && *o + 1 < outsz; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            out[(*o)++] = (char)ch;
        } else if (*o + 5 < outsz) {
            snprintf(out + *o, 5, "\\x%02x", ch);
            *o += 4;
        } else {
            break;
        }
    }
    out[*o] = '\0';
}

void reg_error_message(const void *body, size_t len, char *out, size_t outsz)
{
    if (!outsz)
        return;
    out[0] = '\0';
    if (!body || !len)
        return;
    size_t o = 0;
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *errors = json_object_get(j, "errors");
    size_t i;
    json_t *e;
    json_array_foreach(errors, i, e)
    {
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        if (!code && !msg)
            continue;
        if (o && o + 2 < outsz) {
            append_clean(out, outsz, &o, "; ", 2);
        }
        if (code)
            append_clean(out, outsz, &o, code, 64);
        if (code && msg && *msg)
            append_clean(out, outsz, &o, ": ", 2);
        if (msg)
            append_clean(out, outsz, &o, msg, 200);
        if (i >= 3)
            break;
    }
    /* Anything else (an HTML page, a proxy's text, whatever a hostile
     * server sends) is never echoed: the status says enough. */
    json_decref(j);
}

/* ---- where credentials may go -------------------------------------------- */

int reg_url_split(const char *url, struct reg_url *ret)
{
    *ret = (struct reg_url){0};
    const char *p;
    if (strncasecmp(url, "https://", 8) == 0) {
        ret->https = true;
        p = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        p = url + 7;
    } else {
        return -EPROTONOSUPPORT;
    }
    size_t alen = strcspn(p, "/?#");
    const char *at = memchr(p, '@', alen);
    if (at) { /* userinfo: never ours to send */
        alen -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    const char *host = p, *hend = p + alen;
    const char *colon = NULL;
    if (*host == '[') {
        const char *rb = memchr(host, ']', alen);
        if (!rb)
            return -EINVAL;
        colon = rb + 1 < hend && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 < hend && !colon)
            return -EINVAL;
        hend = rb + 1;
    } else {
        colon = memchr(host, ':', alen);
        if (colon)
            hend = colon;
    }
    size_t hl = (size_t)(hend - host);
    if (hl == 0 || hl >= sizeof(ret->host))
        return -EINVAL;
    for (size_t i = 0; i < hl && *host != '['; i++) {
        /* a DNS name or an IPv4 address: no empty label, nothing else */
        unsigned char ch = (unsigned char)host[i];
        if (!isalnum(ch) && ch != '-' && ch != '_' && ch != '.')
            return -EINVAL;
        if (ch == '.' && (i == 0 || i + 1 == hl || host[i + 1] == '.'))
            return -EINVAL;
    }
    for (size_t i = 0; i < hl; i++)
        ret->host[i] = (char)tolower((unsigned char)host[i]);
    ret->host[hl] = '\0';
    ret->port = ret->https ? 443 : 80;
    if (colon) {
        const char *d = colon + 1, *end = p + alen;
        if (d == end)
            return 0; /* "host:" is the default port */
        unsigned long port = 0;
        for (; d < end; d++) {
            if (!isdigit((unsigned char)*d))
                return -EINVAL;
            port = port * 10 + (unsigned long)(*d - '0');
            if (port > 65535)
                return -EINVAL;
        }
        if (port == 0)
            return -EINVAL;
        ret->port = (unsigned)port;
    }
    return 0;
}

int reg_redirect_check(const char *from, const char *to, bool allow_http, bool *ret_same_origin,
                       struct err *err)
{
    struct reg_url a, b;
    if (reg_url_split(from, &a) < 0)
        return reg_err_plain(err, EPROTO, "redirect from an unusable URL");
    int r = reg_url_split(to, &b);
    if (r == -EPROTONOSUPPORT)
        return reg_err_plain(err, EPROTO, "redirect to a scheme other than http and https refused");
    if (r < 0)
        return reg_err_plain(err, EPROTO, "redirect to an invalid URL refused");
    if (a.https && !b.https && !allow_http)
        return reg_err_plain(err, EPROTO,
                             "redirect from https to plain http (%.200s) refused: only registries "
                             "configured as insecure may use plain http",
                             b.host);
    *ret_same_origin = a.https == b.https && a.port == b.port && strcmp(a.host, b.host) == 0;
    return 0;
}

static bool is_ip_literal(const char *h)
{
    if (*h == '[')
        return true;
    for (; *h; h++)
        if (!isdigit((unsigned char)*h) && *h != '.')
            return false;
    return true;
}

bool reg_realm_gets_credentials(const char *registry_url, const char *realm, bool allow_http)
{
    struct reg_url r, t;
    if (reg_url_split(registry_url, &r) < 0 || reg_url_split(realm, &t) < 0)
        return false;
    if (r.https && !t.https && !allow_http)
        return false;
    /* A port is another service, maybe another user's (any local user may
     * listen on 127.0.0.1:18705): only the registry's own port, or the
     * scheme's default one, where the host's own web service answers (a
     * registry on :5050 with its token service on the host's https). */
    if (t.port != r.port && t.port != (t.https ? 443u : 80u))
        return false;
    if (strcmp(r.host, t.host) == 0)
        return true;
    /* A token service beside the registry in its own domain, as Docker Hub
     * (registry-1.docker.io, auth.docker.io) and GitLab (registry.gitlab.com,
     * gitlab.com) run theirs: the registry's name without its first label,
     * if that still has a dot, is the domain both must share; over https
     * only. IP addresses have no domain. */
    if (!r.https || !t.https || is_ip_literal(r.host) || is_ip_literal(t.host))
        return false;
    const char *dot = strchr(r.host, '.');
    if (!dot || !strchr(dot + 1, '.'))
        return false;
    const char *parent = dot + 1;
    size_t pl = strlen(parent), tl = strlen(t.host);
    if (tl == pl)
        return strcmp(t.host, parent) == 0;
    return tl > pl && t.host[tl - pl - 1] == '.' && strcmp(t.host + tl - pl, parent) == 0;
}
