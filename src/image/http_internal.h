/* image/http's internals: the target of a request (http_url.c: URLs, and
 * the proxy the environment names for them) as the transport (http.c)
 * uses it. Pure but for getenv; no I/O. */
#pragma once

#include "image/http.h"

struct http_url {
    bool https;
    char host[256]; /* an IPv6 literal in brackets */
    unsigned port;
    char hostport[300]; /* for Host: and CONNECT (the port when not the default) */
    const char *target; /* path and query (from the URL string) */
};

/* Splits an absolute http(s) URL (reg_url_split): -EPROTONOSUPPORT for
 * another scheme, -EINVAL for a malformed authority. */
int http_url_parse(const char *s, struct http_url *u);
/* Whether host is an IP address (IPv6 bare or in brackets): its family and
 * bytes in *af and addr. */
bool http_ip_parse(const char *host, int *af, uint8_t addr[16]);

struct http_proxy {
    char host[256];
    unsigned port;
    char *basic; /* base64(user:password), or NULL */
};

/* The proxy for a request to u, as libcurl picks it from the environment,
 * or NULL for none. */
const char *http_proxy_for(const struct http_url *u);
/* Parses a proxy URL ("[http://][user[:password]@]host[:port]", port 1080
 * by default); -EPROTONOSUPPORT for another scheme, -EINVAL for a
 * malformed one, -ENOMEM; the reason in err. px->basic is the caller's to
 * free. */
int http_proxy_parse(const char *spec, struct http_proxy *px, struct err *err);
