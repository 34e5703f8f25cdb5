#include <string.h>

#include "config.h"
#include "image/image.h"
#include "net/net.h"

void config_defaults(struct config *cfg)
{
    *cfg = (struct config){0};
    cfg->socket_path = strdup("/run/kinglet/kinglet.sock");
    cfg->root_dir = strdup("/var/lib/kinglet");
    cfg->state_dir = strdup("/run/kinglet");
    cfg->log_level = strdup("info");
    cfg->log_format = strdup("text");
    cfg->shutdown_timeout_s = 10;
    cfg->image_min_free = IMAGE_LIMITS_DEFAULT.min_free;
    cfg->image_min_free_pct = IMAGE_LIMITS_DEFAULT.min_free_pct;
    cfg->max_layer_ratio = IMAGE_LIMITS_DEFAULT.max_layer_ratio;
    cfg->image_pull_progress_timeout_ms = IMAGE_LIMITS_DEFAULT.progress_timeout_ms;
    cfg->image_pull_min_rate = IMAGE_LIMITS_DEFAULT.min_rate;
}

static int set_str(char **field, const char *value)
{
    char *v = strdup(value);
    if (!v)
        return -ENOMEM;
    free(*field);
    *field = v;
    return 0;
}

int config_split_hostport(const char *s, char *host, size_t hostlen, int *ret_port)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return -EINVAL;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *ret_port = (int)port;
    return 0;
}

/* One setting: its name (the long flag's), the setter that checks and
 * stores the value, and what the setter needs to know of the field. */
struct option {
    const char *key;
    int (*set)(struct config *cfg, const struct option *o, const char *value, struct err *err);
    size_t off;        /* the field */
    size_t n_off;      /* lists: the field counting entries */
    long min, max;     /* integers */
    const char *range; /* integers: the error's "is not ..." */
};

#define FIELD(cfg, o, type) ((type *)((char *)(cfg) + (o)->off))

static int set_path(struct config *cfg, const struct option *o, const char *value, struct err *err)
{
    if (value[0] != '/')
        return err_set(err, EINVAL, "%s: `%s` is not an absolute path", o->key, value);
    return set_str(FIELD(cfg, o, char *), value);
}

/* an unsigned int (uint32_t too) in o->min..o->max */
static int set_uint(struct config *cfg, const struct option *o, const char *value, struct err *err)
{
    char *end;
    long v = strtol(value, &end, 10);
    if (!value[0] || *end || v < o->min || v > o->max)
        return err_set(err, EINVAL, "%s: `%s` is not %s", o->key, value, o->range);
    *FIELD(cfg, o, unsigned) = (unsigned)v;
    return 0;
}

static int set_log_level(struct config *cfg, const struct option *o, const char *value,
                         struct err *err)
{
    (void)o;
    enum log_level l;
    if (log_level_parse(value, &l) < 0)
        return err_set(err, EINVAL, "log-level: `%s` is not error, warning, info or debug", value);
    return set_str(&cfg->log_level, value);
}

static int set_log_format(struct config *cfg, const struct option *o, const char *value,
                          struct err *err)
{
    (void)o;
    if (strcmp(value, "text") != 0 && strcmp(value, "json") != 0)
        return err_set(err, EINVAL, "log-format: `%s` is not text or json", value);
    return set_str(&cfg->log_format, value);
}

static int set_listen_tcp(struct config *cfg, const struct option *o, const char *value,
                          struct err *err)
{
    (void)o;
    char host[256];
    int port;
    if (value[0] && config_split_hostport(value, host, sizeof(host), &port) < 0)
        return err_set(err, EINVAL, "listen-tcp: `%s` is not HOST:PORT", value);
    if (!value[0]) {
        free(cfg->listen_tcp);
        cfg->listen_tcp = NULL;
        return 0;
    }
    return set_str(&cfg->listen_tcp, value);
}

/* seconds, stored as milliseconds; 0 = GRPC_NEVER */
static int set_grpc_timeout(struct config *cfg, const struct option *o, const char *value,
                            struct err *err)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (!value[0] || *end || errno || !(v >= 0 && v <= 86400))
        return err_set(err, EINVAL, "%s: `%s` is not 0..86400 seconds (0 = never)", o->key, value);
    uint64_t ms = (uint64_t)(v * 1000 + 0.5);
    *FIELD(cfg, o, uint64_t) = ms ? ms : GRPC_NEVER;
    return 0;
}

static int set_grpc_size(struct config *cfg, const struct option *o, const char *value,
                         struct err *err)
{
    uint64_t v;
    if (parse_size(value, &v) < 0 || v < 64 * 1024 || v > SIZE_MAX / 2)
        return err_set(err, EINVAL, "%s: `%s` is not a size of at least 64K (e.g. 256M)", o->key,
                       value);
    *FIELD(cfg, o, uint64_t) = v;
    return 0;
}

/* Appends a copy of value to the list *v of *n entries. */
static int list_add(char ***v, size_t *n, const char *value)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(char *));
    if (!nv)
        return -ENOMEM;
    *v = nv;
    if (!(nv[*n] = strdup(value)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

/* registry-mirror (HOST=URL), insecure-registry and registry-mirror-only
 * (HOST[:PORT]), each repeatable */
static int set_registry(struct config *cfg, const struct option *o, const char *value,
                        struct err *err)
{
    bool mirror = strcmp(o->key, "registry-mirror") == 0;
    const char *eq = strchr(value, '=');
    if (mirror && (!eq || eq == value || !eq[1]))
        return err_set(err, EINVAL, "registry-mirror: `%s` is not HOST=URL", value);
    if (!mirror && (!value[0] || strchr(value, '/')))
        return err_set(err, EINVAL, "%s: `%s` is not HOST[:PORT]", o->key, value);
    size_t *n = (size_t *)((char *)cfg + o->n_off);
    if (*n >= 256)
        return err_set(err, E2BIG, "%s: more than 256 entries", o->key);
    return list_add(FIELD(cfg, o, char **), n, value);
}

static int set_max_layer_size(struct config *cfg, const struct option *o, const char *value,
                              struct err *err)
{
    (void)o;
    if (parse_size(value, &cfg->max_layer_size) < 0)
        return err_set(err, EINVAL, "max-layer-size: `%s` is not a size (0 = no limit, 64G)",
                       value);
    return 0;
}

static int set_max_layer_ratio(struct config *cfg, const struct option *o, const char *value,
                               struct err *err)
{
    (void)o;
    char *end;
    unsigned long v = strtoul(value, &end, 10);
    if (!value[0] || *end || value[0] == '-' || v > 1000000)
        return err_set(err, EINVAL, "max-layer-ratio: `%s` is not 0..1000000 (0 = no limit)",
                       value);
    cfg->max_layer_ratio = (unsigned)v;
    return 0;
}

static int set_progress_timeout(struct config *cfg, const struct option *o, const char *value,
                                struct err *err)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (!value[0] || *end || errno || !(v >= 0.1 && v <= 3600))
        return err_set(err, EINVAL, "%s: `%s` is not 0.1..3600 seconds", o->key, value);
    cfg->image_pull_progress_timeout_ms = (unsigned)(v * 1000 + 0.5);
    return 0;
}

static int set_min_rate(struct config *cfg, const struct option *o, const char *value,
                        struct err *err)
{
    uint64_t v;
    if (parse_size(value, &v) < 0 || v > (1u << 30))
        return err_set(err, EINVAL, "%s: `%s` is not 0..1G bytes/s (e.g. 1K)", o->key, value);
    cfg->image_pull_min_rate = (unsigned)v;
    return 0;
}

static int set_min_free(struct config *cfg, const struct option *o, const char *value,
                        struct err *err)
{
    (void)o;
    if (parse_size_or_percent(value, &cfg->image_min_free, &cfg->image_min_free_pct) < 0)
        return err_set(err, EINVAL,
                       "image-min-free: `%s` is not a size (128M) or a percentage (0%%..99%%)",
                       value);
    return 0;
}

static int set_pod_cidr(struct config *cfg, const struct option *o, const char *value,
                        struct err *err)
{
    (void)o;
    if (net_pod_cidrs_parse(value, NULL, NULL, err) < 0)
        return err_wrap(err, "pod-cidr");
    return set_str(&cfg->pod_cidr, value);
}

static int set_bridge(struct config *cfg, const struct option *o, const char *value,
                      struct err *err)
{
    (void)o;
    size_t n = strlen(value);
    if (n == 0 || n >= 16 || strchr(value, '/') || strchr(value, ' ') || strcmp(value, ".") == 0 ||
        strcmp(value, "..") == 0)
        return err_set(err, EINVAL, "bridge: `%s` is not an interface name", value);
    return set_str(&cfg->bridge, value);
}

static int set_stream_address(struct config *cfg, const struct option *o, const char *value,
                              struct err *err)
{
    (void)o;
    const char *colon = strrchr(value, ':');
    if (!colon || colon == value || !colon[1])
        return err_set(err, EINVAL, "stream-address: `%s` is not HOST:PORT", value);
    return set_str(&cfg->stream_address, value);
}

static int set_runtime_handler(struct config *cfg, const struct option *o, const char *value,
                               struct err *err)
{
    (void)o;
    size_t n = strlen(value);
    bool ok = n > 0 && n <= 63 && value[0] != '-' && value[n - 1] != '-';
    for (size_t i = 0; ok && i < n; i++)
        ok = (value[i] >= 'a' && value[i] <= 'z') || (value[i] >= '0' && value[i] <= '9') ||
             value[i] == '-' || value[i] == '.';
    if (!ok)
        return err_set(err, EINVAL,
                       "runtime-handler: `%s` is not a DNS label (lowercase letters, digits, "
                       "'-', '.')",
                       value);
    if (cfg->n_runtime_handlers >= 64)
        return err_set(err, E2BIG, "runtime-handler: more than 64");
    return list_add(&cfg->runtime_handlers, &cfg->n_runtime_handlers, value);
}

/* absolute directories, comma-separated; "" = none (every CDI device asked
 * for is then unresolvable) */
static int set_cdi_spec_dirs(struct config *cfg, const struct option *o, const char *value,
                             struct err *err)
{
    (void)o;
    size_t n = 0, vlen = strlen(value);
    for (const char *p = value; *p;) {
        size_t len = strcspn(p, ",");
        if (p[0] != '/' || ++n > 16 || value[vlen - 1] == ',')
            return err_set(err, EINVAL,
                           "cdi-spec-dirs: `%s` is not up to 16 absolute directories, "
                           "comma-separated",
                           value);
        p += len + (p[len] == ',');
    }
    return set_str(&cfg->cdi_spec_dirs, value);
}

static int set_pod_network(struct config *cfg, const struct option *o, const char *value,
                           struct err *err)
{
    (void)o;
    if (strcmp(value, "builtin") != 0 && strcmp(value, "none") != 0)
        return err_set(err, EINVAL, "pod-network: `%s` is not builtin or none", value);
    cfg->network_disabled = strcmp(value, "none") == 0;
    return 0;
}

/* clang-format off */
#define AT(field) offsetof(struct config, field)
#define OPT(k, fn) {.key = k, .set = fn}
#define SET(k, fn, field) {.key = k, .set = fn, .off = AT(field)}
#define PATH(k, field) SET(k, set_path, field)
#define UINT(k, field, lo, hi, text) \
    {.key = k, .set = set_uint, .off = AT(field), .min = lo, .max = hi, .range = text}
#define LIST(k, field, n_field) \
    {.key = k, .set = set_registry, .off = AT(field), .n_off = AT(n_field)}
/* clang-format on */

static const struct option options[] = {
    PATH("socket", socket_path),
    PATH("root", root_dir),
    PATH("state", state_dir),
    OPT("log-level", set_log_level),
    OPT("log-format", set_log_format),
    OPT("listen-tcp", set_listen_tcp),
    UINT("shutdown-timeout", shutdown_timeout_s, 0, 3600, "0..3600 seconds"),
    SET("grpc-idle-timeout", set_grpc_timeout, grpc.idle_timeout_ms),
    SET("grpc-keepalive-time", set_grpc_timeout, grpc.keepalive_time_ms),
    SET("grpc-keepalive-timeout", set_grpc_timeout, grpc.keepalive_timeout_ms),
    SET("grpc-request-timeout", set_grpc_timeout, grpc.request_timeout_ms),
    SET("grpc-stall-timeout", set_grpc_timeout, grpc.stall_timeout_ms),
    SET("grpc-request-memory", set_grpc_size, grpc.max_request_memory),
    SET("grpc-response-memory", set_grpc_size, grpc.max_response_memory),
    SET("grpc-connection-response-memory", set_grpc_size, grpc.max_connection_response_memory),
    UINT("grpc-max-connections", grpc.max_connections, 1, 65536, "1..65536"),
    LIST("registry-mirror", registry_mirrors, n_registry_mirrors),
    LIST("insecure-registry", insecure_registries, n_insecure_registries),
    LIST("registry-mirror-only", registry_mirror_only, n_registry_mirror_only),
    PATH("registry-certs-dir", registry_certs_dir),
    UINT("pull-concurrency", pull_concurrency, 1, 32, "1..32"),
    OPT("max-layer-size", set_max_layer_size),
    OPT("max-layer-ratio", set_max_layer_ratio),
    OPT("image-pull-progress-timeout", set_progress_timeout),
    OPT("image-pull-min-rate", set_min_rate),
    OPT("image-min-free", set_min_free),
    OPT("pod-cidr", set_pod_cidr),
    OPT("bridge", set_bridge),
    OPT("stream-address", set_stream_address),
    PATH("stream-tls-cert", stream_tls_cert),
    PATH("stream-tls-key", stream_tls_key),
    UINT("mtu", mtu, 576, 65535, "576..65535"),
    OPT("runtime-handler", set_runtime_handler),
    OPT("cdi-spec-dirs", set_cdi_spec_dirs),
    OPT("pod-network", set_pod_network),
};

int config_set(struct config *cfg, const char *key, const char *value, struct err *err)
{
    for (size_t i = 0; i < ARRAY_SIZE(options); i++)
        if (strcmp(key, options[i].key) == 0)
            return options[i].set(cfg, &options[i], value, err);
    return err_set(err, EINVAL, "unknown setting `%s`", key);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Parses the value in place; returns NULL on a syntax error. */
static char *parse_value(char *v)
{
    v = trim(v);
    if (*v != '"') {
        char *hash = strchr(v, '#');
        if (hash)
            *hash = '\0';
        v = trim(v);
        return strchr(v, '"') ? NULL : v;
    }
    char *out = v, *p = v + 1;
    while (*p && *p != '"') {
        if (*p == '\\') {
            p++;
            if (*p != '"' && *p != '\\')
                return NULL;
        }
        *out++ = *p++;
    }
    if (*p != '"')
        return NULL;
    char *rest = trim(p + 1);
    if (*rest && *rest != '#')
        return NULL;
    *out = '\0';
    return v;
}

int config_parse(struct config *cfg, const char *text, const char *name, struct err *err)
{
    _cleanup_free_ char *copy = strdup(text);
    if (!copy)
        return err_set(err, ENOMEM, "config");
    int lineno = 0;
    for (char *line = copy, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq)
            return err_set(err, EINVAL, "%s:%d: expected `key = value`", name, lineno);
        *eq = '\0';
        char *key = trim(l);
        char *value = parse_value(eq + 1);
        if (!*key || !value)
            return err_set(err, EINVAL, "%s:%d: expected `key = value`", name, lineno);
        int r = config_set(cfg, key, value, err);
        if (r < 0)
            return err_wrap(err, "%s:%d", name, lineno);
    }
    return 0;
}

void config_free(struct config *cfg)
{
    free(cfg->socket_path);
    free(cfg->root_dir);
    free(cfg->state_dir);
    free(cfg->log_level);
    free(cfg->log_format);
    free(cfg->listen_tcp);
    for (size_t i = 0; i < cfg->n_registry_mirrors; i++)
        free(cfg->registry_mirrors[i]);
    free(cfg->registry_mirrors);
    for (size_t i = 0; i < cfg->n_insecure_registries; i++)
        free(cfg->insecure_registries[i]);
    free(cfg->insecure_registries);
    for (size_t i = 0; i < cfg->n_registry_mirror_only; i++)
        free(cfg->registry_mirror_only[i]);
    free(cfg->registry_mirror_only);
    free(cfg->registry_certs_dir);
    free(cfg->pod_cidr);
    free(cfg->bridge);
    free(cfg->stream_address);
    free(cfg->stream_tls_cert);
    free(cfg->stream_tls_key);
    for (size_t i = 0; i < cfg->n_runtime_handlers; i++)
        free(cfg->runtime_handlers[i]);
    free(cfg->runtime_handlers);
    free(cfg->cdi_spec_dirs);
    *cfg = (struct config){0};
}
