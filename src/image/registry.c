/* Distribution API v2 client on our HTTP/1.1 client (http.c), used from
 * pull worker threads (never from the loop: see service.c).
 *
 * Small documents (manifests, configs, tokens) are read whole with a capped
 * body. Layer blobs are streamed: reg_stream_read(), which the unpacker
 * calls whenever it needs bytes, reads the connection, so download, hashing
 * and extraction proceed together in one thread without an intermediate
 * file. The session's connections are kept alive and shared by its
 * threads (http.c's pool).
 *
 * Each session walks a list of endpoints (mirrors, then the origin; for an
 * insecure origin https without verification and then plain http). A 401
 * triggers the auth flow once per endpoint: Bearer (token from the
 * challenge's realm/service/scope, with basic credentials, an OAuth2 refresh
 * token or anonymously) or Basic. Credentials go to the origin only, never to
 * mirrors, and are never logged. Redirects (blob storage) are followed here,
 * not by the HTTP client, so that each hop is checked (regparse.c): https never turns
 * into plain http unless the registry is configured insecure, and
 * credentials (basic, bearer) never leave the origin they were meant for,
 * neither on a redirect nor to a token realm on a foreign host. Proxies
 * come from the environment, as libcurl read them (http.c). */
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "image/http.h"
#include "image/internal.h"

#define ATTEMPTS          4
#define MAX_REDIRECTS     10
#define DEFAULT_CERTS_DIR "/etc/kinglet/certs.d"

struct reg_session {
    struct reg_endpoint *eps;
    size_t n_eps;
    size_t preferred;
    char *repo;
    char **authz; /* per endpoint: "Bearer ..." / "Basic ..." or NULL */
    char *basic;  /* base64(user:password) or NULL */
    char *identity_token;
    char *registry_token;
    char *certs_dir;
    const atomic_bool *cancel;
    int cancel_fd;      /* reg_options' */
    pthread_mutex_t mu; /* authz: layer workers share the session */
    /* a token realm on another host or port got no credentials (for the message
     * if the registry then refuses the anonymous token) */
    atomic_bool creds_withheld;
    /* connections kept alive, TLS configurations and sessions, shared by
     * the session's threads */
    struct http_pool *pool;
};

static char *authz_copy(struct reg_session *s, size_t i)
{
    pthread_mutex_lock(&s->mu);
    char *r = s->authz[i] ? strdup(s->authz[i]) : NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

static void free_secret(char *s);

static void authz_set(struct reg_session *s, size_t i, char *v)
{
    pthread_mutex_lock(&s->mu);
    char *old = s->authz[i];
    s->authz[i] = v;
    pthread_mutex_unlock(&s->mu);
    free_secret(old);
}

struct reg_stream {
    struct reg_session *s;
    struct http_xfer *x;
    long status;
    char *www_auth;
    struct buf body; /* an error answer's start */
};

/* ---- endpoints ------------------------------------------------------------ */

void reg_endpoints_free(struct reg_endpoint *eps, size_t n)
{
    for (size_t i = 0; i < n && eps; i++) {
        free(eps[i].base);
        free(eps[i].host);
    }
    free(eps);
}

static bool host_listed(const char *host, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], host) == 0)
            return true;
    return false;
}

static int ep_add(struct reg_endpoint **eps, size_t *n, const char *url, bool skip_verify,
                  bool mirror, bool send_auth)
{
    struct reg_endpoint *v = realloc(*eps, (*n + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    *eps = v;
    struct reg_endpoint *e = &v[*n];
    *e =
        (struct reg_endpoint){.skip_verify = skip_verify, .mirror = mirror, .send_auth = send_auth};
    if (strstr(url, "://"))
        e->base = strdup(url);
    else if (asprintf(&e->base, "https://%s", url) < 0)
        e->base = NULL;
    if (!e->base)
        return -ENOMEM;
    size_t len = strlen(e->base);
    while (len > 0 && e->base[len - 1] == '/')
        e->base[--len] = '\0';
    if (len >= 3 && strcmp(e->base + len - 3, "/v2") == 0)
        e->base[len - 3] = '\0';
    const char *h = strstr(e->base, "://") + 3;
    size_t hl = strcspn(h, "/");
    e->host = strndup(h, hl);
    if (!e->host) {
        free(e->base);
        return -ENOMEM;
    }
    (*n)++;
    return 0;
}

int reg_endpoints_for(const char *host, const char *const *mirrors, size_t n_mirrors,
                      const char *const *insecure, size_t n_insecure, bool no_origin,
                      struct reg_endpoint **ret, size_t *ret_n, struct err *err)
{
    struct reg_endpoint *eps = NULL;
    size_t n = 0;
    int r = 0;
    size_t hlen = strlen(host);
    bool have_mirror = false;
    for (size_t i = 0; i < n_mirrors && r == 0; i++) {
        const char *m = mirrors[i];
        if (strncmp(m, host, hlen) != 0 || m[hlen] != '=')
            continue;
        const char *url = m + hlen + 1;
        /* the mirror's own host may be listed as insecure */
        const char *mh = strstr(url, "://") ? strstr(url, "://") + 3 : url;
        char mhost[256];
        snprintf(mhost, sizeof(mhost), "%.*s", (int)strcspn(mh, "/"), mh);
        r = ep_add(&eps, &n, url, host_listed(mhost, insecure, n_insecure), true, false);
        have_mirror = true;
    }
    if (r == 0 && !(no_origin && have_mirror)) {
        const char *origin = strcmp(host, "docker.io") == 0 ? "registry-1.docker.io" : host;
        char url[300];
        snprintf(url, sizeof(url), "https://%s", origin);
        bool insec = host_listed(host, insecure, n_insecure);
        r = ep_add(&eps, &n, url, insec, false, true);
        if (r == 0 && insec) {
            snprintf(url, sizeof(url), "http://%s", origin);
            r = ep_add(&eps, &n, url, true, false, true);
        }
    }
    if (r < 0) {
        reg_endpoints_free(eps, n);
        return err_set(err, -r, "registry endpoints");
    }
    *ret = eps;
    *ret_n = n;
    return 0;
}

/* ---- session -------------------------------------------------------------- */

int reg_session_new(const struct reg_endpoint *eps, size_t n_eps, const char *repo,
                    const struct image_auth *auth, const struct reg_options *opt,
                    struct reg_session **ret, struct err *err)
{
    struct reg_session *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(err, ENOMEM, "registry session");
    pthread_mutex_init(&s->mu, NULL);
    s->eps = calloc(n_eps, sizeof(*s->eps));
    s->authz = calloc(n_eps, sizeof(char *));
    s->repo = strdup(repo);
    s->certs_dir = strdup(opt && opt->certs_dir ? opt->certs_dir : DEFAULT_CERTS_DIR);
    s->cancel = opt ? opt->cancel : NULL;
    s->cancel_fd = opt ? opt->cancel_fd : -1;
    struct http_timeouts to = {.progress_ms = opt ? opt->progress_timeout_ms : 0,
                               .min_rate = opt ? opt->min_rate : 0};
    s->pool = s->certs_dir ? http_pool_new(s->certs_dir, s->cancel, &to) : NULL;
    bool oom = !s->eps || !s->authz || !s->repo || !s->certs_dir || !s->pool;
    for (size_t i = 0; i < n_eps && !oom; i++) {
        s->eps[i] = eps[i];
        s->eps[i].base = strdup(eps[i].base);
        s->eps[i].host = strdup(eps[i].host);
        s->n_eps = i + 1;
        oom = !s->eps[i].base || !s->eps[i].host;
    }
    if (!oom && auth) {
        if (auth->auth && *auth->auth) {
            s->basic = strdup(auth->auth);
            oom = !s->basic;
        } else if (auth->username && *auth->username) {
            _cleanup_free_ char *up = NULL;
            if (asprintf(&up, "%s:%s", auth->username, auth->password ? auth->password : "") < 0)
                oom = true;
            else
                oom = !(s->basic = b64_encode((const uint8_t *)up, strlen(up)));
            if (up)
                explicit_bzero(up, strlen(up));
        }
        if (!oom && auth->identity_token && *auth->identity_token)
            oom = !(s->identity_token = strdup(auth->identity_token));
        if (!oom && auth->registry_token && *auth->registry_token)
            oom = !(s->registry_token = strdup(auth->registry_token));
    }
    for (size_t i = 0; i < s->n_eps && !oom && s->registry_token; i++)
        if (s->eps[i].send_auth && asprintf(&s->authz[i], "Bearer %s", s->registry_token) < 0)
            oom = true;
    if (oom) {
        reg_session_free(s);
        return err_set(err, ENOMEM, "registry session");
    }
    *ret = s;
    return 0;
}

static void free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void reg_session_free(struct reg_session *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_eps; i++) {
        free(s->eps[i].base);
        free(s->eps[i].host);
        if (s->authz)
            free_secret(s->authz[i]);
    }
    free(s->eps);
    free(s->authz);
    free(s->repo);
    free_secret(s->basic);
    free_secret(s->identity_token);
    free_secret(s->registry_token);
    free(s->certs_dir);
    http_pool_free(s->pool); /* every transfer is over by now */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- HTTP helpers ----------------------------------------------------------- */

static int cancelled(const atomic_bool *c) { return c && atomic_load(c); }

/* An HTTP error status, with what the registry said about it ("GET URL:
 * MANIFEST_UNKNOWN: manifest unknown (HTTP 404)"). */
static int status_error(struct err *err, long status, const char *what, const struct buf *body)
{
    int code = status == 401 || status == 403   ? EACCES
               : status == 404                  ? ENOENT
               : status == 429 || status >= 500 ? EAGAIN
                                                : EPROTO;
    char detail[300];
    reg_error_message(body ? body->data : NULL, body ? body->len : 0, detail, sizeof(detail));
    return reg_err_plain(err, code, "%s: %s%s(HTTP %ld)", what, detail, detail[0] ? " " : "",
                         status);
}

static bool is_redirect(long status)
{
    return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

/* The endpoint a request to url is made as, for TLS: certs.d by the URL's
 * host[:port]; verification skipped only on the insecure registry's own
 * host (a redirect to blob storage elsewhere is verified). */
static void hop_endpoint(const struct reg_endpoint *ep, const char *url, struct reg_endpoint *ret,
                         char hostbuf[300])
{
    struct reg_url u;
    *ret = (struct reg_endpoint){.host = hostbuf};
    if (reg_url_split(url, &u) < 0) {
        snprintf(hostbuf, 300, "%s", ep->host);
        return;
    }
    if (u.port == (u.https ? 443u : 80u))
        snprintf(hostbuf, 300, "%s", u.host);
    else
        snprintf(hostbuf, 300, "%s:%u", u.host, u.port);
    struct reg_url e;
    bool same_host = ep->base && reg_url_split(ep->base, &e) == 0 && strcmp(e.host, u.host) == 0;
    if (same_host && e.port == u.port)
        snprintf(hostbuf, 300, "%s", ep->host); /* certs.d as configured */
    ret->skip_verify = ep->skip_verify && same_host;
}

/* A redirect answer: the next URL (malloc'ed) after the policy check, and
 * whether credentials may still go along (*same stays true only while every
 * hop keeps the origin). */
static int follow_redirect(const char *location, const struct reg_endpoint *ep, const char *url,
                           unsigned hops, bool *same, char **ret_next, struct err *err)
{
    _cleanup_free_ char *loc = location && *location ? http_url_resolve(url, location) : NULL;
    if (!loc)
        return reg_err_plain(err, EPROTO, "GET %s: redirect without a usable Location", url);
    if (hops >= MAX_REDIRECTS)
        return reg_err_plain(err, EPROTO, "GET %s: more than %d redirects", url, MAX_REDIRECTS);
    bool so = false;
    int r = reg_redirect_check(url, loc, ep->skip_verify, &so, err);
    if (r < 0)
        return err_wrap(err, "GET %s", url);
    *same = *same && so;
    *ret_next = TAKE_PTR(loc);
    return 0;
}

/* ---- small GETs ----------------------------------------------------------- */

/* The wait before another attempt after a transient error: ends at once
 * when the pull is cancelled. */
static int backoff(struct reg_session *s, unsigned attempt, struct err *err)
{
    if (image_backoff(s->cancel_fd, s->cancel, 250u << attempt) < 0)
        return err_set(err, ECANCELED, "pull cancelled");
    return 0;
}

/* One request to url, no redirect followed: *ret_next gets the checked
 * target of a redirect answer, NULL otherwise. */
static int http_once(struct reg_session *s, const struct reg_endpoint *ep, const char *url,
                     const char *accept, const char *authz, size_t max, struct buf *body,
                     char **ret_ct, char **ret_www, long *ret_status, const char *post,
                     unsigned hops, bool *same, char **ret_next, struct err *err)
{
    char hostbuf[300];
    struct reg_endpoint tls_ep;
    hop_endpoint(ep, url, &tls_ep, hostbuf);
    struct http_request rq = {.method = post ? "POST" : "GET",
                              .url = url,
                              .accept = accept,
                              .authz = authz,
                              .form = post,
                              .tls_host = tls_ep.host,
                              .skip_verify = tls_ep.skip_verify};
    *ret_status = 0;
    *ret_next = NULL;
    struct http_xfer *x = NULL;
    int r = http_xfer_start(s->pool, &rq, &x, err);
    if (r < 0)
        return r;
    long status = http_xfer_status(x);
    *ret_status = status;
    if (ret_ct) {
        free(*ret_ct);
        const char *ct = http_xfer_header(x, "Content-Type");
        *ret_ct = ct ? strdup(ct) : NULL;
    }
    free(*ret_www);
    const char *www = http_xfer_header(x, "WWW-Authenticate");
    *ret_www = www ? strdup(www) : NULL;
    body->len = 0;
    if (is_redirect(status) || status != 200) {
        /* an error's or a redirect's body: its start, for the message */
        r = http_xfer_read_all(x, body, IMAGE_ERROR_BODY_MAX, err);
        if (r == -EFBIG)
            r = 0; /* the start is enough; the connection is not reused */
    } else {
        r = http_xfer_read_all(x, body, max, err);
    }
    if (r == -EFBIG)
        r = err_set(err, EFBIG, "GET %s: response larger than %zu bytes", url, max);
    else if (r < 0 && r != -ECANCELED)
        err_wrap(err, "GET %s", url);
    else if (is_redirect(status) && post)
        r = reg_err_plain(err, EPROTO, "POST %s: redirected (HTTP %ld): not followed", url, status);
    else if (is_redirect(status))
        r = follow_redirect(http_xfer_header(x, "Location"), ep, url, hops, same, ret_next, err);
    http_xfer_free(x);
    return r;
}

/* One GET (or POST of post), following redirects; *ret_status gets the
 * final HTTP status (0 on transport failure). authz goes to url's origin
 * only. */
static int http_get(struct reg_session *s, const struct reg_endpoint *ep, const char *url,
                    const char *accept, const char *authz, size_t max, struct buf *body,
                    char **ret_ct, char **ret_www, long *ret_status, const char *post,
                    struct err *err)
{
    _cleanup_free_ char *cur = strdup(url);
    if (!cur)
        return err_set(err, ENOMEM, "GET");
    bool same = true;
    for (unsigned hops = 0;; hops++) {
        char *next = NULL;
        int r = http_once(s, ep, cur, accept, same ? authz : NULL, max, body, ret_ct, ret_www,
                          ret_status, post, hops, &same, &next, err);
        if (r < 0 || !next)
            return r;
        free(cur);
        cur = next;
        body->len = 0;
    }
}

/* Percent-encodes everything but RFC 3986's unreserved characters, as
 * curl_easy_escape did. */
static char *url_escape(const char *s)
{
    struct buf b = {0};
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int r = isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~'
                    ? buf_append(&b, p, 1)
                    : buf_printf(&b, "%%%02X", *p);
        if (r < 0) {
            buf_free(&b);
            return NULL;
        }
    }
    if (buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* Answers a challenge: sets s->authz[i] or fails with EACCES. */
static int authenticate(struct reg_session *s, size_t i, const char *www, struct err *err)
{
    const struct reg_endpoint *ep = &s->eps[i];
    struct reg_challenge c;
    reg_challenge_parse(www ? www : "", &c);
    const char *basic = ep->send_auth ? s->basic : NULL;
    if (c.basic) {
        if (!basic)
            return err_set(err, EACCES, "registry %s requires credentials", ep->host);
        char *v;
        if (asprintf(&v, "Basic %s", basic) < 0)
            return err_set(err, ENOMEM, "auth");
        authz_set(s, i, v);
        return 0;
    }
    if (!c.bearer || (!str_has_prefix(c.realm, "https://") && !str_has_prefix(c.realm, "http://")))
        return err_set(err, EACCES, "registry %s: unsupported authentication challenge", ep->host);
    const char *idt = ep->send_auth ? s->identity_token : NULL;
    bool withheld = false;
    if ((basic || idt) && !reg_realm_gets_credentials(ep->base, c.realm, ep->skip_verify)) {
        /* the realm is someone else's: ask it anonymously */
        basic = idt = NULL;
        withheld = true;
        atomic_store(&s->creds_withheld, true);
        log_debug("registry %s: token realm on another host or port: credentials withheld",
                  ep->host);
    }
    _cleanup_free_ char *scope_def = NULL;
    if (asprintf(&scope_def, "repository:%s:pull", s->repo) < 0)
        return err_set(err, ENOMEM, "auth");
    _cleanup_free_ char *svc = url_escape(c.service);
    _cleanup_free_ char *scope = url_escape(c.scope[0] ? c.scope : scope_def);
    if (!svc || !scope)
        return err_set(err, ENOMEM, "auth");
    struct buf body = {0};
    _cleanup_free_ char *www2 = NULL;
    long status = 0;
    int r;
    if (idt) {
        /* OAuth2 refresh-token grant, as docker does with identity tokens */
        _cleanup_free_ char *tok = url_escape(idt);
        _cleanup_free_ char *form = NULL;
        if (!tok || asprintf(&form,
                             "grant_type=refresh_token&refresh_token=%s&service=%s&scope=%s"
                             "&client_id=kinglet",
                             tok, svc, scope) < 0)
            return err_set(err, ENOMEM, "auth");
        r = http_get(s, ep, c.realm, NULL, NULL, IMAGE_TOKEN_MAX, &body, NULL, &www2, &status, form,
                     err);
        explicit_bzero(form, strlen(form));
        if (tok)
            explicit_bzero(tok, strlen(tok));
    } else {
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "%s%sservice=%s&scope=%s", c.realm, strchr(c.realm, '?') ? "&" : "?",
                     svc, scope) < 0)
            return err_set(err, ENOMEM, "auth");
        _cleanup_free_ char *authz = NULL;
        if (basic && asprintf(&authz, "Basic %s", basic) < 0)
            return err_set(err, ENOMEM, "auth");
        r = http_get(s, ep, url, "application/json", authz, IMAGE_TOKEN_MAX, &body, NULL, &www2,
                     &status, NULL, err);
        if (authz)
            explicit_bzero(authz, strlen(authz));
    }
    if (r == 0 && status != 200)
        r = status_error(err, status, "token request", NULL);
    if (r < 0) {
        buf_free(&body);
        if (withheld)
            err_wrap(err, "credentials not sent to the token realm on another host or port");
        return err_wrap(err, "authenticate to %s", ep->host);
    }
    char *tok = NULL;
    r = reg_token_parse(body.data, body.len, &tok, err);
    explicit_bzero(body.data, body.len);
    buf_free(&body);
    if (r < 0)
        return err_wrap(err, "authenticate to %s", ep->host);
    char *v;
    r = asprintf(&v, "Bearer %s", tok);
    free_secret(tok);
    if (r < 0)
        return err_set(err, ENOMEM, "auth");
    authz_set(s, i, v);
    return 0;
}

/* After a final 401/403: says so when the credentials were held back. */
static int refused(struct reg_session *s, long status, struct err *err)
{
    if ((status == 401 || status == 403) && atomic_load(&s->creds_withheld))
        err_wrap(err,
                 "credentials were not sent to the registry's token realm on another host or port");
    return -err->code;
}

/* GET path from endpoint i with auth and retries. */
static int ep_get(struct reg_session *s, size_t i, const char *path, const char *accept, size_t max,
                  struct buf *body, char **ret_ct, struct err *err)
{
    _cleanup_free_ char *url = NULL;
    if (asprintf(&url, "%s/v2/%s", s->eps[i].base, path) < 0)
        return err_set(err, ENOMEM, "GET");
    bool authed = false;
    for (unsigned attempt = 0;; attempt++) {
        if (cancelled(s->cancel))
            return err_set(err, ECANCELED, "pull cancelled");
        body->len = 0;
        _cleanup_free_ char *www = NULL;
        long status = 0;
        char *authz = authz_copy(s, i);
        int r = http_get(s, &s->eps[i], url, accept, authz, max, body, ret_ct, &www, &status, NULL,
                         err);
        free_secret(authz);
        if (r == 0 && status == 401 && !authed) {
            authed = true;
            r = authenticate(s, i, www, err);
            if (r < 0)
                return r;
            attempt--;
            continue;
        }
        if (r == 0 && status == 200)
            return 0;
        if (r == 0) {
            char what[600];
            snprintf(what, sizeof(what), "GET %s", url);
            status_error(err, status, what, body);
            r = refused(s, status, err);
        }
        if (!reg_err_transient(err) || attempt + 1 >= ATTEMPTS)
            return r;
        if (backoff(s, attempt, err) < 0)
            return -ECANCELED;
    }
}

int reg_get_manifest(struct reg_session *s, const char *reference, struct buf *ret_body,
                     char **ret_content_type, struct err *err)
{
    _cleanup_free_ char *path = NULL;
    if (asprintf(&path, "%s/manifests/%s", s->repo, reference) < 0)
        return err_set(err, ENOMEM, "GET manifest");
    struct err first = {0};
    int r = -ENOENT;
    for (size_t i = 0; i < s->n_eps; i++) {
        free(*ret_content_type);
        *ret_content_type = NULL;
        r = ep_get(s, i, path, MT_ACCEPT, IMAGE_MANIFEST_MAX, ret_body, ret_content_type, err);
        if (r == 0) {
            s->preferred = i;
            return 0;
        }
        if (r == -ECANCELED)
            return r;
        log_debug("manifest %s from %s: %s", reference, s->eps[i].base, err_str(err));
        /* report the origin's answer (the last endpoint) unless a mirror's
         * was more telling than "unreachable" */
        if (!first.code || (s->eps[i].mirror == false && err->code != ECONNREFUSED))
            first = *err;
    }
    if (first.code && err)
        *err = first;
    return r;
}

int reg_get_blob(struct reg_session *s, const char *digest, size_t max, struct buf *ret,
                 struct err *err)
{
    _cleanup_free_ char *path = NULL;
    if (asprintf(&path, "%s/blobs/%s", s->repo, digest) < 0)
        return err_set(err, ENOMEM, "GET blob");
    int r = -ENOENT;
    for (size_t k = 0; k < s->n_eps; k++) {
        size_t i = (s->preferred + k) % s->n_eps;
        r = ep_get(s, i, path, NULL, max, ret, NULL, err);
        if (r == 0 || r == -ECANCELED || r == -EFBIG)
            return r;
    }
    return r;
}

/* ---- streams ---------------------------------------------------------------- */

void reg_stream_free(struct reg_stream *st)
{
    if (!st)
        return;
    http_xfer_free(st->x);
    free(st->www_auth);
    buf_free(&st->body);
    free(st);
}

/* Starts a GET of url (no redirect followed) and reads its head. ep is the
 * registry endpoint the request belongs to (TLS per hop). */
static int stream_start(struct reg_session *s, const struct reg_endpoint *ep, const char *url,
                        const char *authz, struct reg_stream **ret, struct err *err)
{
    struct reg_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return err_set(err, ENOMEM, "GET blob");
    st->s = s;
    char hostbuf[300];
    struct reg_endpoint tls_ep;
    hop_endpoint(ep, url, &tls_ep, hostbuf);
    struct http_request rq = {.method = "GET",
                              .url = url,
                              .authz = authz,
                              .tls_host = tls_ep.host,
                              .skip_verify = tls_ep.skip_verify};
    int r = http_xfer_start(s->pool, &rq, &st->x, err);
    if (r < 0) {
        reg_stream_free(st);
        return r;
    }
    st->status = http_xfer_status(st->x);
    const char *www = http_xfer_header(st->x, "WWW-Authenticate");
    if (www && !(st->www_auth = strdup(www))) {
        reg_stream_free(st);
        return err_set(err, ENOMEM, "GET blob");
    }
    *ret = st;
    return 0;
}

/* The start of a non-200 answer's body, for the message. */
static void stream_error_body(struct reg_stream *st)
{
    struct err ignored = {0};
    st->body.len = 0;
    (void)http_xfer_read_all(st->x, &st->body, IMAGE_ERROR_BODY_MAX, &ignored);
}

/* stream_start on endpoint i's url, following redirects: the answer that
 * is not a redirect. */
static int stream_follow(struct reg_session *s, size_t i, const char *url, const char *authz,
                         struct reg_stream **ret, struct err *err)
{
    const struct reg_endpoint *ep = &s->eps[i];
    _cleanup_free_ char *cur = strdup(url);
    if (!cur)
        return err_set(err, ENOMEM, "GET blob");
    bool same = true;
    for (unsigned hops = 0;; hops++) {
        struct reg_stream *st = NULL;
        int r = stream_start(s, ep, cur, same ? authz : NULL, &st, err);
        if (r < 0)
            return r;
        if (!is_redirect(st->status)) {
            *ret = st;
            return 0;
        }
        stream_error_body(st); /* the redirect's own (small, capped) body */
        char *next = NULL;
        r = follow_redirect(http_xfer_header(st->x, "Location"), ep, cur, hops, &same, &next, err);
        reg_stream_free(st);
        if (r < 0)
            return r;
        free(cur);
        cur = next;
    }
}

int reg_blob_open(struct reg_session *s, const char *digest, struct reg_stream **ret,
                  struct err *err)
{
    int r = -ENOENT;
    for (size_t k = 0; k < s->n_eps; k++) {
        size_t i = (s->preferred + k) % s->n_eps;
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "%s/v2/%s/blobs/%s", s->eps[i].base, s->repo, digest) < 0)
            return err_set(err, ENOMEM, "GET blob");
        bool authed = false;
        for (unsigned attempt = 0; attempt < ATTEMPTS; attempt++) {
            struct reg_stream *st = NULL;
            char *authz = authz_copy(s, i);
            r = stream_follow(s, i, url, authz, &st, err);
            free_secret(authz);
            if (r == -ECANCELED)
                return r;
            if (r == 0 && st->status == 401 && !authed) {
                authed = true;
                char *www = TAKE_PTR(st->www_auth);
                reg_stream_free(st);
                r = authenticate(s, i, www, err);
                free(www);
                if (r < 0)
                    break;
                attempt--;
                continue;
            }
            if (r == 0 && st->status == 200) {
                *ret = st;
                return 0;
            }
            if (r == 0) {
                stream_error_body(st);
                char what[600];
                snprintf(what, sizeof(what), "GET %s", url);
                status_error(err, st->status, what, &st->body);
                r = refused(s, st->status, err);
                reg_stream_free(st);
            }
            if (!reg_err_transient(err))
                break;
            if (attempt + 1 < ATTEMPTS && backoff(s, attempt, err) < 0)
                return -ECANCELED;
        }
    }
    return r;
}

int reg_stream_read(void *stream, const void **ret_buf, size_t *ret_len, struct err *err)
{
    struct reg_stream *st = stream;
    if (cancelled(st->s->cancel))
        return err_set(err, ECANCELED, "pull cancelled");
    int r = http_xfer_read(st->x, ret_buf, ret_len, err);
    if (r < 0 && r != -ECANCELED)
        err_wrap(err, "download blob");
    return r;
}
