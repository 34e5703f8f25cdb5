/* Distribution API v2 client with libcurl, used from pull worker threads
 * (never from the loop: see service.c).
 *
 * Small documents (manifests, configs, tokens) use curl_easy_perform with a
 * capped body. Layer blobs are streamed: a private curl multi handle is
 * driven from reg_stream_read(), which the unpacker calls whenever it needs
 * bytes, so download, hashing and extraction proceed together in one thread
 * without an intermediate file; a full buffer pauses the transfer.
 *
 * Each session walks a list of endpoints (mirrors, then the origin; for an
 * insecure origin https without verification and then plain http). A 401
 * triggers the auth flow once per endpoint: Bearer (token from the
 * challenge's realm/service/scope, with basic credentials, an OAuth2 refresh
 * token or anonymously) or Basic. Credentials go to the origin only, never to
 * mirrors, and are never logged. Redirects (blob storage) are followed; curl
 * drops our Authorization header when the host changes. Proxies come from the
 * environment (libcurl's default). */
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "image/internal.h"

#define STREAM_HIGH       (4u << 20)
#define ATTEMPTS          4
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
    pthread_mutex_t mu; /* authz: layer workers share the session */
    /* DNS answers and TLS sessions shared by the session's transfers, so
     * that parallel layer downloads resume TLS instead of full handshakes
     * (connections themselves cannot be shared between threads) */
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
};

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
    struct reg_session *s = u;
    pthread_mutex_lock(&s->share_mu[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *u)
{
    struct reg_session *s = u;
    pthread_mutex_unlock(&s->share_mu[d]);
}

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
    CURLM *m;
    CURL *h;
    struct curl_slist *hdrs;
    long status;
    bool has_location;
    bool headers_done;
    bool done;
    bool paused;
    CURLcode result;
    char *www_auth;
    struct buf body;
    size_t consumed;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
void reg_global_init(void) { pthread_once(&global_once, global_init_once); }

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

static char *b64(const void *data, size_t len)
{
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, data, (int)len);
    return out;
}

int reg_session_new(const struct reg_endpoint *eps, size_t n_eps, const char *repo,
                    const struct image_auth *auth, const struct reg_options *opt,
                    struct reg_session **ret, struct err *err)
{
    reg_global_init();
    struct reg_session *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(err, ENOMEM, "registry session");
    pthread_mutex_init(&s->mu, NULL);
    for (size_t i = 0; i < ARRAY_SIZE(s->share_mu); i++)
        pthread_mutex_init(&s->share_mu[i], NULL);
    s->share = curl_share_init();
    if (s->share) {
        curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    s->eps = calloc(n_eps, sizeof(*s->eps));
    s->authz = calloc(n_eps, sizeof(char *));
    s->repo = strdup(repo);
    s->certs_dir = strdup(opt && opt->certs_dir ? opt->certs_dir : DEFAULT_CERTS_DIR);
    s->cancel = opt ? opt->cancel : NULL;
    bool oom = !s->eps || !s->authz || !s->repo || !s->certs_dir;
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
                oom = !(s->basic = b64(up, strlen(up)));
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
    if (s->share)
        curl_share_cleanup(s->share); /* every easy handle is gone by now */
    for (size_t i = 0; i < ARRAY_SIZE(s->share_mu); i++)
        pthread_mutex_destroy(&s->share_mu[i]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- curl helpers ----------------------------------------------------------- */

static int cancelled(const atomic_bool *c) { return c && atomic_load(c); }

static int xfer_cb(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    return cancelled(p) ? 1 : 0;
}

static void setup_tls(struct reg_session *s, CURL *h, const struct reg_endpoint *ep)
{
    if (s->share)
        curl_easy_setopt(h, CURLOPT_SHARE, s->share);
    if (ep->skip_verify) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/ca.crt", s->certs_dir, ep->host);
    if (access(path, R_OK) == 0)
        curl_easy_setopt(h, CURLOPT_CAINFO, path); /* the system CApath still applies */
    snprintf(path, sizeof(path), "%s/%s/client.cert", s->certs_dir, ep->host);
    if (access(path, R_OK) == 0) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, path);
        snprintf(path, sizeof(path), "%s/%s/client.key", s->certs_dir, ep->host);
        curl_easy_setopt(h, CURLOPT_SSLKEY, path);
    }
}

static void setup_common(CURL *h, const char *url, char *errbuf)
{
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kinglet/" PACKAGE_VERSION);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    errbuf[0] = '\0';
}

static int curl_error(struct err *err, CURLcode c, const char *errbuf, const char *what)
{
    int code;
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        code = ECONNREFUSED;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        code = ETIMEDOUT;
        break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        code = ECONNRESET;
        break;
    case CURLE_ABORTED_BY_CALLBACK:
        code = ECANCELED;
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
        code = EPROTO;
        break;
    default:
        code = EIO;
    }
    return err_set(err, code, "%s: %s", what, errbuf[0] ? errbuf : curl_easy_strerror(c));
}

static int status_error(struct err *err, long status, const char *what, const struct buf *body)
{
    int code = status == 401 || status == 403   ? EACCES
               : status == 404                  ? ENOENT
               : status == 429 || status >= 500 ? EAGAIN
                                                : EPROTO;
    /* registries explain in a JSON errors array: show its start */
    char excerpt[200] = "";
    if (body && body->len) {
        size_t n = body->len < sizeof(excerpt) - 1 ? body->len : sizeof(excerpt) - 1;
        for (size_t i = 0; i < n; i++)
            excerpt[i] = isprint(body->data[i]) ? (char)body->data[i] : ' ';
        excerpt[n] = '\0';
    }
    return err_set(err, code, "%s: HTTP %ld%s%s", what, status, excerpt[0] ? " " : "", excerpt);
}

/* ---- WWW-Authenticate ---------------------------------------------------- */

struct challenge {
    bool bearer, basic;
    char realm[1024], service[1024], scope[1024];
};

static void parse_challenge(const char *h, struct challenge *c)
{
    *c = (struct challenge){0};
    while (isspace((unsigned char)*h))
        h++;
    if (strncasecmp(h, "Bearer", 6) == 0) {
        c->bearer = true;
        h += 6;
    } else if (strncasecmp(h, "Basic", 5) == 0) {
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
        char val[1024];
        size_t vl = 0;
        if (*v == '"') {
            v++;
            while (*v && *v != '"' && vl < sizeof(val) - 1) {
                if (*v == '\\' && v[1])
                    v++;
                val[vl++] = *v++;
            }
            if (*v == '"')
                v++;
        } else {
            while (*v && *v != ',' && vl < sizeof(val) - 1)
                val[vl++] = *v++;
        }
        val[vl] = '\0';
        if (klen == 5 && strncasecmp(h, "realm", 5) == 0)
            snprintf(c->realm, sizeof(c->realm), "%s", val);
        else if (klen == 7 && strncasecmp(h, "service", 7) == 0)
            snprintf(c->service, sizeof(c->service), "%s", val);
        else if (klen == 5 && strncasecmp(h, "scope", 5) == 0)
            snprintf(c->scope, sizeof(c->scope), "%s", val);
        h = v;
    }
}

/* ---- small GETs ----------------------------------------------------------- */

struct sink {
    struct buf *b;
    size_t max;
    bool too_big;
    char **content_type;
    char **www_auth;
};

static size_t sink_write(char *p, size_t sz, size_t n, void *data)
{
    struct sink *k = data;
    size_t len = sz * n;
    if (k->b->len + len > k->max) {
        k->too_big = true;
        return 0;
    }
    return buf_append(k->b, p, len) < 0 ? 0 : len;
}

static char *header_value(const char *line, size_t len, const char *name)
{
    size_t nl = strlen(name);
    if (len <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return NULL;
    const char *v = line + nl + 1;
    const char *end = line + len;
    while (v < end && isspace((unsigned char)*v))
        v++;
    while (end > v && isspace((unsigned char)end[-1]))
        end--;
    return strndup(v, (size_t)(end - v));
}

static size_t sink_header(char *p, size_t sz, size_t n, void *data)
{
    struct sink *k = data;
    size_t len = sz * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* a new response (redirect): forget the previous one's headers */
        if (k->content_type) {
            free(*k->content_type);
            *k->content_type = NULL;
        }
        free(*k->www_auth);
        *k->www_auth = NULL;
        k->b->len = 0;
        return len;
    }
    char *v;
    if (k->content_type && (v = header_value(p, len, "Content-Type"))) {
        free(*k->content_type);
        *k->content_type = v;
    } else if ((v = header_value(p, len, "WWW-Authenticate"))) {
        free(*k->www_auth);
        *k->www_auth = v;
    }
    return len;
}

static void msleep(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* One GET; *ret_status gets the HTTP status (0 on transport failure). */
static int http_get(struct reg_session *s, const struct reg_endpoint *ep, const char *url,
                    const char *accept, const char *authz, size_t max, struct buf *body,
                    char **ret_ct, char **ret_www, long *ret_status, const char *post,
                    struct err *err)
{
    CURL *h = curl_easy_init();
    if (!h)
        return err_set(err, ENOMEM, "curl");
    char errbuf[CURL_ERROR_SIZE];
    setup_common(h, url, errbuf);
    setup_tls(s, h, ep);
    struct curl_slist *hdrs = NULL;
    _cleanup_free_ char *ah = NULL, *zh = NULL;
    if (accept && asprintf(&ah, "Accept: %s", accept) >= 0)
        hdrs = curl_slist_append(hdrs, ah);
    if (authz && asprintf(&zh, "Authorization: %s", authz) >= 0)
        hdrs = curl_slist_append(hdrs, zh);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (post)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, post);
    struct sink k = {.b = body, .max = max, .content_type = ret_ct, .www_auth = ret_www};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, sink_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &k);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xfer_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)s->cancel);
    CURLcode c = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    *ret_status = status;
    int r = 0;
    if (k.too_big)
        r = err_set(err, EFBIG, "GET %s: response larger than %zu bytes", url, max);
    else if (c != CURLE_OK)
        r = curl_error(err, c, errbuf, "GET");
    curl_slist_free_all(hdrs);
    if (zh)
        explicit_bzero(zh, strlen(zh));
    curl_easy_cleanup(h);
    if (r < 0 && r != -EFBIG)
        err_wrap(err, "%s", url);
    return r;
}

static char *url_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *r = e ? strdup(e) : NULL;
    curl_free(e);
    return r;
}

/* Answers a challenge: sets s->authz[i] or fails with EACCES. */
static int authenticate(struct reg_session *s, size_t i, const char *www, struct err *err)
{
    const struct reg_endpoint *ep = &s->eps[i];
    struct challenge c;
    parse_challenge(www ? www : "", &c);
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
    const char *idt = ep->send_auth ? s->identity_token : NULL;
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
        return err_wrap(err, "authenticate to %s", ep->host);
    }
    json_t *j = json_loadb((const char *)body.data, body.len, 0, NULL);
    explicit_bzero(body.data, body.len);
    buf_free(&body);
    const char *tok = json_string_value(json_object_get(j, "token"));
    if (!tok || !*tok)
        tok = json_string_value(json_object_get(j, "access_token"));
    if (!tok || !*tok) {
        json_decref(j);
        return err_set(err, EACCES, "authenticate to %s: no token in the answer", ep->host);
    }
    char *v;
    r = asprintf(&v, "Bearer %s", tok);
    json_decref(j);
    if (r < 0)
        return err_set(err, ENOMEM, "auth");
    authz_set(s, i, v);
    return 0;
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
        if (r == 0)
            r = status_error(err, status, url, body);
        if (!reg_err_transient(err) || attempt + 1 >= ATTEMPTS)
            return r;
        msleep(250u << attempt);
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

static size_t stream_write(char *p, size_t sz, size_t n, void *data)
{
    struct reg_stream *st = data;
    size_t len = sz * n;
    if (st->status != 200 && st->headers_done) {
        /* an error body: keep the start for the message */
        size_t room = st->body.len < IMAGE_ERROR_BODY_MAX ? IMAGE_ERROR_BODY_MAX - st->body.len : 0;
        buf_append(&st->body, p, len < room ? len : room);
        return len;
    }
    if (st->body.len - st->consumed >= STREAM_HIGH) {
        st->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (st->consumed > 0 && st->consumed == st->body.len) {
        st->body.len = 0;
        st->consumed = 0;
    }
    return buf_append(&st->body, p, len) < 0 ? 0 : len;
}

static size_t stream_header(char *p, size_t sz, size_t n, void *data)
{
    struct reg_stream *st = data;
    size_t len = sz * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        st->has_location = false;
        st->headers_done = false;
        free(st->www_auth);
        st->www_auth = NULL;
        st->status = 0;
        const char *sp = memchr(p, ' ', len);
        if (sp)
            st->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
        bool redirect = st->status >= 300 && st->status < 400 && st->has_location;
        if (!redirect && st->status != 100)
            st->headers_done = true;
        return len;
    }
    char *v;
    if ((v = header_value(p, len, "Location"))) {
        st->has_location = true;
        free(v);
    } else if ((v = header_value(p, len, "WWW-Authenticate"))) {
        free(st->www_auth);
        st->www_auth = v;
    }
    return len;
}

void reg_stream_free(struct reg_stream *st)
{
    if (!st)
        return;
    if (st->m && st->h)
        curl_multi_remove_handle(st->m, st->h);
    if (st->h)
        curl_easy_cleanup(st->h);
    if (st->m)
        curl_multi_cleanup(st->m);
    curl_slist_free_all(st->hdrs);
    free(st->www_auth);
    buf_free(&st->body);
    free(st);
}

/* Runs the transfer a little: until data, headers or the end arrive. */
static int stream_step(struct reg_stream *st)
{
    int running = 0;
    if (curl_multi_perform(st->m, &running) != CURLM_OK)
        return -EIO;
    int q;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(st->m, &q)))
        if (msg->msg == CURLMSG_DONE) {
            st->done = true;
            st->result = msg->data.result;
        }
    return 0;
}

static int stream_wait(struct reg_stream *st)
{
    if (cancelled(st->s->cancel))
        return -ECANCELED;
    if (!st->done && curl_multi_poll(st->m, NULL, 0, 500, NULL) != CURLM_OK)
        return -EIO;
    return stream_step(st);
}

static int stream_start(struct reg_session *s, size_t i, const char *url, struct reg_stream **ret,
                        struct err *err)
{
    struct reg_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return err_set(err, ENOMEM, "GET blob");
    st->s = s;
    st->m = curl_multi_init();
    st->h = curl_easy_init();
    if (!st->m || !st->h) {
        reg_stream_free(st);
        return err_set(err, ENOMEM, "curl");
    }
    setup_common(st->h, url, st->errbuf);
    setup_tls(s, st->h, &s->eps[i]);
    char *authz = authz_copy(s, i);
    if (authz) {
        _cleanup_free_ char *zh = NULL;
        if (asprintf(&zh, "Authorization: %s", authz) >= 0) {
            st->hdrs = curl_slist_append(st->hdrs, zh);
            explicit_bzero(zh, strlen(zh));
        }
        free_secret(authz);
    }
    curl_easy_setopt(st->h, CURLOPT_HTTPHEADER, st->hdrs);
    curl_easy_setopt(st->h, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(st->h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(st->h, CURLOPT_HEADERFUNCTION, stream_header);
    curl_easy_setopt(st->h, CURLOPT_HEADERDATA, st);
    curl_multi_add_handle(st->m, st->h);
    int r = stream_step(st);
    while (r == 0 && !st->headers_done && !st->done)
        r = stream_wait(st);
    if (r < 0) {
        reg_stream_free(st);
        return r == -ECANCELED ? err_set(err, ECANCELED, "pull cancelled")
                               : err_set(err, -r, "GET %s", url);
    }
    if (!st->headers_done && st->result != CURLE_OK) {
        curl_error(err, st->result, st->errbuf, "GET");
        reg_stream_free(st);
        return err_wrap(err, "%s", url);
    }
    *ret = st;
    return 0;
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
            r = stream_start(s, i, url, &st, err);
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
                /* wait for the error body, a little */
                while (!st->done && stream_wait(st) == 0)
                    ;
                r = status_error(err, st->status, url, &st->body);
                reg_stream_free(st);
            }
            if (!reg_err_transient(err))
                break;
            msleep(250u << attempt);
        }
    }
    return r;
}

int reg_stream_read(void *stream, const void **ret_buf, size_t *ret_len, struct err *err)
{
    struct reg_stream *st = stream;
    if (st->consumed == st->body.len) {
        st->body.len = 0;
        st->consumed = 0;
        if (st->paused) {
            st->paused = false;
            curl_easy_pause(st->h, CURLPAUSE_CONT);
        }
        while (st->body.len == 0 && !st->done) {
            int r = stream_wait(st);
            if (r == -ECANCELED)
                return err_set(err, ECANCELED, "pull cancelled");
            if (r < 0)
                return err_set(err, -r, "download blob");
        }
        if (st->body.len == 0) {
            if (st->result != CURLE_OK)
                return curl_error(err, st->result, st->errbuf, "download blob");
            *ret_len = 0;
            return 0;
        }
    }
    *ret_buf = st->body.data + st->consumed;
    *ret_len = st->body.len - st->consumed;
    st->consumed = st->body.len;
    return 0;
}
