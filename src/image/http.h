/* image/http: the registry client's HTTP/1.1 over TCP and TLS (mbedTLS),
 * blocking: pull worker threads and the helper process only. */
#pragma once

#include <http_parser.h>
#include <stdatomic.h>

#include "base/base.h"

/* Response heads are refused past this size (every header line together). */
#define HTTP_HEAD_MAX (64u << 10)

/* ---- response parsing (pure: fuzzed by tests/fuzz/fuzz_image_http.c) ----- */

struct http_resp {
    http_parser p;
    http_parser_settings settings;
    long status;
    char *content_type, *www_auth, *location; /* of the final (non-1xx) answer */
    struct buf field, value;                  /* the header line being read */
    bool in_value;
    size_t head_bytes;
    bool head_only;    /* the answer to a CONNECT: a head, no body */
    bool headers_done; /* of the final answer */
    bool complete;     /* the whole message */
    bool got_bytes;    /* anything at all came */
    struct buf *body;  /* body bytes are appended here */
    size_t body_max;   /* appended beyond this: too_big, parsing stops */
    bool too_big;
    bool bad_status; /* under 100 */
    bool oom;
};

void http_resp_init(struct http_resp *r, struct buf *body, size_t body_max, bool head_only);
void http_resp_clear(struct http_resp *r);
/* Parses n bytes; *ret_used gets how many belong to this message (the rest
 * would be a next one). -EPROTO (reason in err) for a malformed answer,
 * -EFBIG past body_max, -ENOMEM. */
int http_resp_feed(struct http_resp *r, const char *data, size_t n, size_t *ret_used,
                   struct err *err);
/* The connection closed: completes a body that runs to the end of the
 * connection; -ECONNRESET when the answer was cut short. */
int http_resp_eof(struct http_resp *r, struct err *err);

/* ---- proxies from the environment, as libcurl reads them ---------------- */

/* Does no_proxy (comma/space separated: "*", host names matching
 * themselves and their subdomains, IP addresses with an optional /bits)
 * exempt host (lowercase, an IPv6 literal in brackets)? */
bool http_no_proxy_match(const char *no_proxy, const char *host);

/* ---- connections and requests ------------------------------------------ */

struct http_pool; /* idle connections, TLS configurations and sessions */

/* How long a transfer may wait (see http.c's top comment). */
struct http_timeouts {
    unsigned progress_ms; /* each phase's deadline, and the low-speed window */
    unsigned min_rate;    /* bytes/s a body must come at, over that window */
};
#define HTTP_TIMEOUTS_DEFAULT ((struct http_timeouts){.progress_ms = 60000, .min_rate = 1024})

/* to NULL or 0: HTTP_TIMEOUTS_DEFAULT. */
struct http_pool *http_pool_new(const char *certs_dir, const atomic_bool *cancel,
                                const struct http_timeouts *to);
void http_pool_free(struct http_pool *p);

struct http_request {
    const char *method; /* "GET" or "POST" */
    const char *url;
    const char *accept;   /* NULL: any */
    const char *authz;    /* Authorization value or NULL */
    const char *form;     /* POST body (application/x-www-form-urlencoded) */
    const char *tls_host; /* certs.d entry: host[:port] */
    bool skip_verify;
};

struct http_xfer;

/* Sends the request and reads the answer's head. The body follows with
 * http_xfer_read, at most body_max bytes for a body read whole. */
int http_xfer_start(struct http_pool *p, const struct http_request *rq, struct http_xfer **ret,
                    struct err *err);
long http_xfer_status(const struct http_xfer *x);
const char *http_xfer_header(const struct http_xfer *x, const char *name);
/* Next body bytes (valid until the next call); *ret_len == 0 at the end. */
int http_xfer_read(struct http_xfer *x, const void **ret_buf, size_t *ret_len, struct err *err);
/* Reads the whole (rest of the) body into out, failing with -EFBIG past
 * max bytes (out then holds the first max). */
int http_xfer_read_all(struct http_xfer *x, struct buf *out, size_t max, struct err *err);
/* Ends the exchange: the connection goes back to the pool when the answer
 * was read to its end and both sides keep it alive. */
void http_xfer_free(struct http_xfer *x);

/* Resolves a Location value against the URL it answered (malloc'ed), or
 * NULL. */
char *http_url_resolve(const char *base, const char *loc);
