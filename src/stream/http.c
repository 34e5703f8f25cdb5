/* stream/http: the head of an HTTP/1.1 request (method, path, query,
 * headers), parsed by Node's http-parser (Debian's libhttp-parser) once
 * the blank line that ends it has arrived. The streaming server reads
 * nothing but heads: every request it accepts upgrades the connection. */
#include <errno.h>
#include <http_parser.h>
#include <string.h>
#include <strings.h>

#include "stream/internal.h"

struct ctx {
    struct http_request *r;
    size_t used; /* of r->buf */
    char url[4096];
    size_t url_len;
    bool in_value; /* the last callback was a header value */
    bool too_big;
};

/* Appends to the string being built at the end of r->buf. */
static int add(struct ctx *c, const char *at, size_t len)
{
    if (c->used + len + 1 > sizeof(c->r->buf)) {
        c->too_big = true;
        return -1;
    }
    memcpy(c->r->buf + c->used, at, len);
    c->used += len;
    c->r->buf[c->used] = '\0';
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct ctx *c = p->data;
    if (c->url_len + len >= sizeof(c->url)) {
        c->too_big = true;
        return -1;
    }
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    c->url[c->url_len] = '\0';
    return 0;
}

static int on_field(http_parser *p, const char *at, size_t len)
{
    struct ctx *c = p->data;
    struct http_request *r = c->r;
    if (c->in_value || r->n == 0 || !r->h[r->n - 1].name) {
        if (r->n >= HTTP_HEADERS_MAX) {
            c->too_big = true;
            return -1;
        }
        c->used++; /* past the previous string's NUL */
        r->h[r->n].name = r->buf + c->used;
        r->h[r->n].value = NULL;
        r->n++;
        c->in_value = false;
    }
    return add(c, at, len);
}

static int on_value(http_parser *p, const char *at, size_t len)
{
    struct ctx *c = p->data;
    struct http_request *r = c->r;
    if (!c->in_value) {
        c->used++;
        r->h[r->n - 1].value = r->buf + c->used;
        c->in_value = true;
        if (c->used >= sizeof(r->buf)) {
            c->too_big = true;
            return -1;
        }
        r->buf[c->used] = '\0';
    }
    return add(c, at, len);
}

static int on_headers_complete(http_parser *p)
{
    (void)p;
    return 1; /* no body: stop here */
}

int http_request_parse(const char *data, size_t len, struct http_request *r, size_t *ret_used)
{
    const char *end = memmem(data, len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX, "\r\n\r\n", 4);
    if (!end)
        return len >= HTTP_HEAD_MAX ? -E2BIG : -EAGAIN;
    size_t head = (size_t)(end - data) + 4;
    memset(r, 0, offsetof(struct http_request, buf));
    r->buf[0] = '\0';
    struct ctx c = {.r = r};
    http_parser p;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &c;
    http_parser_settings s = {.on_url = on_url,
                              .on_header_field = on_field,
                              .on_header_value = on_value,
                              .on_headers_complete = on_headers_complete};
    http_parser_execute(&p, &s, data, head);
    if (c.too_big)
        return -E2BIG;
    if (HTTP_PARSER_ERRNO(&p) != HPE_OK && HTTP_PARSER_ERRNO(&p) != HPE_CB_headers_complete)
        return -EPROTO;
    for (size_t i = 0; i < r->n; i++)
        if (!r->h[i].value)
            r->h[i].value = r->buf + c.used; /* "" (the NUL after the last string) */
    snprintf(r->method, sizeof(r->method), "%s", http_method_str(p.method));
    /* origin-form only ("/path?query"): the server hands out nothing else */
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (c.url[0] != '/' || http_parser_parse_url(c.url, c.url_len, 0, &u) != 0 ||
        !(u.field_set & (1 << UF_PATH)))
        return -EPROTO;
    if (u.field_data[UF_PATH].len >= sizeof(r->path))
        return -E2BIG;
    memcpy(r->path, c.url + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len);
    r->path[u.field_data[UF_PATH].len] = '\0';
    if (u.field_set & (1 << UF_QUERY)) {
        if (u.field_data[UF_QUERY].len >= sizeof(r->query))
            return -E2BIG;
        memcpy(r->query, c.url + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
        r->query[u.field_data[UF_QUERY].len] = '\0';
    }
    *ret_used = head;
    return 0;
}

const char *http_header(const struct http_request *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcasecmp(r->h[i].name, name))
            return r->h[i].value;
    return NULL;
}

bool http_header_has(const struct http_request *r, const char *name, const char *token)
{
    size_t tl = strlen(token);
    for (size_t i = 0; i < r->n; i++) {
        if (strcasecmp(r->h[i].name, name))
            continue;
        for (const char *p = r->h[i].value; *p;) {
            p += strspn(p, " \t,");
            size_t l = strcspn(p, ",");
            size_t t = l;
            while (t > 0 && (p[t - 1] == ' ' || p[t - 1] == '\t'))
                t--;
            if (t == tl && !strncasecmp(p, token, tl))
                return true;
            p += l;
        }
    }
    return false;
}
