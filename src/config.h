/* The daemon's settings: embedded defaults, then the optional config file,
 * then command-line flags. */
#pragma once

#include "base/base.h"
#include "grpc/grpc.h"

struct config {
    char *socket_path;
    char *root_dir;
    char *state_dir;
    char *log_level;
    char *log_format;
    char *listen_tcp; /* "HOST:PORT", NULL = off */
    unsigned shutdown_timeout_s;
    /* images: repeatable "HOST=URL" and "HOST[:PORT]" entries */
    char **registry_mirrors;
    size_t n_registry_mirrors;
    char **insecure_registries;
    size_t n_insecure_registries;
    char **registry_mirror_only;
    size_t n_registry_mirror_only;
    char *registry_certs_dir;  /* NULL = /etc/kinglet/certs.d */
    unsigned pull_concurrency; /* 0 = the image service's default */
    uint64_t max_layer_size;   /* unpacked bytes per layer, 0 = no limit */
    /* free space a pull leaves on the image filesystem: bytes, or a
     * percentage of its size when image_min_free_pct */
    uint64_t image_min_free;
    bool image_min_free_pct;
    unsigned max_layer_ratio; /* tar bytes per compressed byte of a layer, 0 = no limit */
    unsigned image_pull_progress_timeout_ms; /* struct image_limits' progress_timeout_ms */
    unsigned image_pull_min_rate;            /* bytes/s */
    /* pod networking */
    char *pod_cidr;        /* NULL = kubelet's (UpdateRuntimeConfig), else 10.88.0.0/16 */
    char *bridge;          /* NULL = kinglet0 */
    unsigned mtu;          /* 0 = 1500 */
    bool network_disabled; /* pod-network = none */
    /* the streaming server (exec, attach, port-forward): HOST:PORT, NULL =
     * 127.0.0.1:0 (a free port) */
    char *stream_address;
    char *stream_tls_cert, *stream_tls_key; /* PEM files; NULL: plain HTTP */
    /* RuntimeClass handlers accepted besides the default (""); they all run
     * kinglet's own executor */
    char **runtime_handlers;
    size_t n_runtime_handlers;
    /* CDI spec directories, comma-separated, later ones win; NULL =
     * CONFIG_CDI_SPEC_DIRS */
    char *cdi_spec_dirs;
    /* the gRPC endpoint's limits (grpc-* settings); 0 = the server's
     * default, a timeout set to 0 is GRPC_NEVER */
    struct grpc_server_options grpc;
};

#define CONFIG_CDI_SPEC_DIRS "/etc/cdi,/var/run/cdi"

void config_defaults(struct config *cfg);
/* Sets one setting by its name (the long flag's name); -EINVAL with the
 * reason in err for an unknown name or a bad value. */
int config_set(struct config *cfg, const char *key, const char *value, struct err *err);
/* Parses a config file's text: `key = value` lines, values bare or in
 * double quotes (\" and \\ escapes), '#' comments. Errors name the line. */
int config_parse(struct config *cfg, const char *text, const char *name, struct err *err);
/* Splits "HOST:PORT" / "[V6]:PORT". */
int config_split_hostport(const char *s, char *host, size_t hostlen, int *ret_port);
void config_free(struct config *cfg);
