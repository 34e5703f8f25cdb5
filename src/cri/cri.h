/* cri: the CRI v1 RuntimeService and ImageService on top of the gRPC
 * server. One file per RPC or RPC family; this header is what the daemon
 * (src/main.c) uses to wire it. */
#pragma once

#include <uv.h>

#include "base/base.h"
#include "grpc/grpc.h"
#include "image/image.h"

struct cri_config {
    const char *socket_path; /* for status info */
    const char *root_dir;    /* persistent state */
    const char *state_dir;   /* volatile state */
    /* Image service settings (mirrors, insecure registries, ...); NULL =
     * defaults. Its root is root_dir whatever it says. */
    const struct image_config *image;
    /* Pod networking: subnets ("10.88.0.0/16[,fd00::/64]", NULL: kubelet's pod
     * CIDR from UpdateRuntimeConfig, else the embedded default), bridge
     * (NULL: kinglet0), MTU (0: 1500); network_disabled: no pod network, only
     * host-network pods. */
    const char *pod_cidr;
    const char *bridge;
    unsigned mtu;
    bool network_disabled;
    /* StopPodSandbox gives each container of the pod this long after its
     * stop signal before SIGKILL; 0: 10 s, as CRI-O. */
    unsigned pod_stop_grace_s;
    /* the streaming server's HOST:PORT; NULL: 127.0.0.1:0 (a free port,
     * as containerd) */
    const char *stream_address;
    const char *stream_tls_cert, *stream_tls_key; /* NULL: plain HTTP */
    /* RuntimeClass handlers accepted besides the default ("") */
    const char *const *runtime_handlers;
    size_t n_runtime_handlers;
    /* CDI spec directories, comma-separated, later ones win (NULL: none) */
    const char *cdi_spec_dirs;
};

struct cri;

/* Loads persisted runtime settings (blocking: call before the loop runs). */
int cri_new(uv_loop_t *loop, const struct cri_config *cfg, struct cri **ret, struct err *err);
/* Routes every method of both CRI services to its handler; RPCs whose
 * handlers have not been built answer UNIMPLEMENTED naming the RPC. */
int cri_register(struct cri *cri, struct grpc_server *srv, struct err *err);
/* Ends long-running calls (event streams) and cancels image pulls (their
 * calls fail CANCELLED) ahead of a server shutdown. */
void cri_shutdown(struct cri *cri);
void cri_free(struct cri *cri);

/* `kinglet image ...`: through the daemon's socket when the daemon owns the
 * store or --socket is given, else directly on the store. */
int cri_image_cli(int argc, char **argv);
