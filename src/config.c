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

int config_set(struct config *cfg, const char *key, const char *value, struct err *err)
{
    static const struct {
        const char *key;
        size_t off;
    } strs[] = {
        {"socket", offsetof(struct config, socket_path)},
        {"root", offsetof(struct config, root_dir)},
        {"state", offsetof(struct config, state_dir)},
    };
    for (size_t i = 0; i < ARRAY_SIZE(strs); i++) {
        if (strcmp(key, strs[i].key) != 0)
            continue;
        if (value[0] != '/')
            return err_set(err, EINVAL, "%s: `%s` is not an absolute path", key, value);
        return set_str((char **)((char *)cfg + strs[i].off), value);
    }
    if (strcmp(key, "log-level") == 0) {
        enum log_level l;
        if (log_level_parse(value, &l) < 0)
            return err_set(err, EINVAL, "log-level: `%s` is not error, warning, info or debug",
                           value);
        return set_str(&cfg->log_level, value);
    }
    if (strcmp(key, "log-format") == 0) {
        if (strcmp(value, "text") != 0 && strcmp(value, "json") != 0)
            return err_set(err, EINVAL, "log-format: `%s` is not text or json", value);
        return set_str(&cfg->log_format, value);
    }
    if (strcmp(key, "listen-tcp") == 0) {
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
    if (strcmp(key, "shutdown-timeout") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (!value[0] || *end || v < 0 || v > 3600)
            return err_set(err, EINVAL, "shutdown-timeout: `%s` is not 0..3600 seconds", value);
        cfg->shutdown_timeout_s = (unsigned)v;
        return 0;
    }
    static const struct {
        const char *key;
        size_t off;
    } grpc_timeouts[] =
        {
            {"grpc-idle-timeout", offsetof(struct config, grpc.idle_timeout_ms)},
            {"grpc-keepalive-time", offsetof(struct config, grpc.keepalive_time_ms)},
            {"grpc-keepalive-timeout", offsetof(struct config, grpc.keepalive_timeout_ms)},
            {"grpc-request-timeout", offsetof(struct config, grpc.request_timeout_ms)},
            {"grpc-stall-timeout", offsetof(struct config, grpc.stall_timeout_ms)},
        },
      grpc_sizes[] = {
          {"grpc-request-memory", offsetof(struct config, grpc.max_request_memory)},
          {"grpc-response-memory", offsetof(struct config, grpc.max_response_memory)},
          {"grpc-connection-response-memory",
           offsetof(struct config, grpc.max_connection_response_memory)},
      };
    for (size_t i = 0; i < ARRAY_SIZE(grpc_timeouts); i++) {
        if (strcmp(key, grpc_timeouts[i].key) != 0)
            continue;
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (!value[0] || *end || errno || !(v >= 0 && v <= 86400))
            return err_set(err, EINVAL, "%s: `%s` is not 0..86400 seconds (0 = never)", key, value);
        uint64_t ms = (uint64_t)(v * 1000 + 0.5);
        *(uint64_t *)((char *)cfg + grpc_timeouts[i].off) = ms ? ms : GRPC_NEVER;
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(grpc_sizes); i++) {
        if (strcmp(key, grpc_sizes[i].key) != 0)
            continue;
        uint64_t v;
        if (parse_size(value, &v) < 0 || v < 64 * 1024 || v > SIZE_MAX / 2)
            return err_set(err, EINVAL, "%s: `%s` is not a size of at least 64K (e.g. 256M)", key,
                           value);
        *(uint64_t *)((char *)cfg + grpc_sizes[i].off) = v;
        return 0;
    }
    if (strcmp(key, "grpc-max-connections") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (!value[0] || *end || v < 1 || v > 65536)
            return err_set(err, EINVAL, "grpc-max-connections: `%s` is not 1..65536", value);
        cfg->grpc.max_connections = (uint32_t)v;
        return 0;
    }
    if (strcmp(key, "registry-mirror") == 0 || strcmp(key, "insecure-registry") == 0 ||
        strcmp(key, "registry-mirror-only") == 0) {
        bool mirror = strcmp(key, "registry-mirror") == 0;
        const char *eq = strchr(value, '=');
        if (mirror && (!eq || eq == value || !eq[1]))
            return err_set(err, EINVAL, "registry-mirror: `%s` is not HOST=URL", value);
        if (!mirror && (!value[0] || strchr(value, '/')))
            return err_set(err, EINVAL, "%s: `%s` is not HOST[:PORT]", key, value);
        bool only = key[0] == 'r' && !mirror;
        char ***v = mirror ? &cfg->registry_mirrors
                    : only ? &cfg->registry_mirror_only
                           : &cfg->insecure_registries;
        size_t *n = mirror ? &cfg->n_registry_mirrors
                    : only ? &cfg->n_registry_mirror_only
                           : &cfg->n_insecure_registries;
        if (*n >= 256)
            return err_set(err, E2BIG, "%s: more than 256 entries", key);
        char **nv = realloc(*v, (*n + 1) * sizeof(char *));
        if (!nv || !(nv[*n] = strdup(value))) {
            if (nv)
                *v = nv;
            return -ENOMEM;
        }
        *v = nv;
        (*n)++;
        return 0;
    }
    if (strcmp(key, "registry-certs-dir") == 0) {
        if (value[0] != '/')
            return err_set(err, EINVAL, "%s: `%s` is not an absolute path", key, value);
        return set_str(&cfg->registry_certs_dir, value);
    }
    if (strcmp(key, "pull-concurrency") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (!value[0] || *end || v < 1 || v > 32)
            return err_set(err, EINVAL, "pull-concurrency: `%s` is not 1..32", value);
        cfg->pull_concurrency = (unsigned)v;
        return 0;
    }
    if (strcmp(key, "max-layer-size") == 0) {
        if (parse_size(value, &cfg->max_layer_size) < 0)
            return err_set(err, EINVAL, "max-layer-size: `%s` is not a size (0 = no limit, 64G)",
                           value);
        return 0;
    }
    if (strcmp(key, "max-layer-ratio") == 0) {
        char *end;
        unsigned long v = strtoul(value, &end, 10);
        if (!value[0] || *end || value[0] == '-' || v > 1000000)
            return err_set(err, EINVAL, "max-layer-ratio: `%s` is not 0..1000000 (0 = no limit)",
                           value);
        cfg->max_layer_ratio = (unsigned)v;
        return 0;
    }
    if (strcmp(key, "image-pull-progress-timeout") == 0) {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (!value[0] || *end || errno || !(v >= 0.1 && v <= 3600))
            return err_set(err, EINVAL, "%s: `%s` is not 0.1..3600 seconds", key, value);
        cfg->image_pull_progress_timeout_ms = (unsigned)(v * 1000 + 0.5);
        return 0;
    }
    if (strcmp(key, "image-pull-min-rate") == 0) {
        uint64_t v;
        if (parse_size(value, &v) < 0 || v > (1u << 30))
            return err_set(err, EINVAL, "%s: `%s` is not 0..1G bytes/s (e.g. 1K)", key, value);
        cfg->image_pull_min_rate = (unsigned)v;
        return 0;
    }
    if (strcmp(key, "image-min-free") == 0) {
        if (parse_size_or_percent(value, &cfg->image_min_free, &cfg->image_min_free_pct) < 0)
            return err_set(err, EINVAL,
                           "image-min-free: `%s` is not a size (128M) or a percentage (0%%..99%%)",
                           value);
        return 0;
    }
    if (strcmp(key, "pod-cidr") == 0) {
        if (net_pod_cidrs_parse(value, NULL, NULL, err) < 0)
            return err_wrap(err, "pod-cidr");
        return set_str(&cfg->pod_cidr, value);
    }
    if (strcmp(key, "bridge") == 0) {
        size_t n = strlen(value);
        if (n == 0 || n >= 16 || strchr(value, '/') || strchr(value, ' ') ||
            strcmp(value, ".") == 0 || strcmp(value, "..") == 0)
            return err_set(err, EINVAL, "bridge: `%s` is not an interface name", value);
        return set_str(&cfg->bridge, value);
    }
    if (strcmp(key, "stream-address") == 0) {
        const char *colon = strrchr(value, ':');
        if (!colon || colon == value || !colon[1])
            return err_set(err, EINVAL, "stream-address: `%s` is not HOST:PORT", value);
        return set_str(&cfg->stream_address, value);
    }
    if (strcmp(key, "stream-tls-cert") == 0 || strcmp(key, "stream-tls-key") == 0) {
        if (value[0] != '/')
            return err_set(err, EINVAL, "%s: `%s` is not an absolute path", key, value);
        return set_str(key[11] == 'c' ? &cfg->stream_tls_cert : &cfg->stream_tls_key, value);
    }
    if (strcmp(key, "mtu") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (!value[0] || *end || v < 576 || v > 65535)
            return err_set(err, EINVAL, "mtu: `%s` is not 576..65535", value);
        cfg->mtu = (unsigned)v;
        return 0;
    }
    if (strcmp(key, "runtime-handler") == 0) {
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
        char **nv = realloc(cfg->runtime_handlers, (cfg->n_runtime_handlers + 1) * sizeof(char *));
        if (!nv)
            return -ENOMEM;
        cfg->runtime_handlers = nv;
        if (!(nv[cfg->n_runtime_handlers] = strdup(value)))
            return -ENOMEM;
        cfg->n_runtime_handlers++;
        return 0;
    }
    if (strcmp(key, "cdi-spec-dirs") == 0) {
        /* absolute directories, comma-separated; "" = none (every CDI
         * device asked for is then unresolvable) */
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
    if (strcmp(key, "pod-network") == 0) {
        if (strcmp(value, "builtin") != 0 && strcmp(value, "none") != 0)
            return err_set(err, EINVAL, "pod-network: `%s` is not builtin or none", value);
        cfg->network_disabled = strcmp(value, "none") == 0;
        return 0;
    }
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
