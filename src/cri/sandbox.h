/* Private to src/cri: the in-memory pod sandboxes (loop thread only) and
 * what the sandbox RPC files share. Each pod is a store record (persisted
 * under <root>/pods) plus its unpacked PodSandboxConfig. Operations on one
 * pod (stop, remove) run one at a time: a call that finds the pod busy waits
 * in its queue and runs when the current one ends. */
#pragma once

#include "cri/internal.h"
#include "net/net.h"
#include "pod/pod.h"
#include "store/store.h"

struct sandbox;
typedef void (*sandbox_op_fn)(struct cri_call *call, struct sandbox *sb);

struct sandbox_waiter {
    struct sandbox_waiter *next;
    struct cri_call *call;
    sandbox_op_fn fn;
};

struct sandbox {
    struct sandbox *prev, *next;
    struct store_pod rec;
    Runtime__V1__PodSandboxConfig *config;
    bool creating; /* RunPodSandbox in progress: invisible to other RPCs */
    bool busy;
    bool host_network;
    int init_fd;    /* pidfd of the pod's init, -1: none */
    bool init_gone; /* found dead at start */
    struct sandbox_waiter *waiters, *waiters_tail;
    uint64_t cpu_prev_ns, cpu_prev_ts; /* stats.c: the previous CPU sample */
};

struct sandboxes {
    struct sandbox *head;
    size_t n;
    char *records_dir;     /* <root>/pods */
    char *state_dir;       /* <state>/pods */
    struct net_config net; /* base: bridge, ipam dir, MTU; subnets per pod */
    char *cfg_pod_cidr;    /* from the daemon's configuration, NULL: none */
    bool network_enabled;
    bool mtu_configured; /* --mtu given; else the uplink's, found at start */
    char **handlers;     /* configured RuntimeClass handlers besides "" */
    size_t n_handlers;
    /* NetworkReady, refreshed off the loop */
    bool net_ready, net_checking;
    char net_reason[256];
    uint64_t net_checked_ns;
    struct cri_cursor *cursors; /* of list streams, moved on by unlink */
};

int cri_sandboxes_init(struct cri *cri, const struct cri_config *cfg, struct err *err);
void cri_sandboxes_start(struct cri *cri); /* node network + recovery, off the loop */
void cri_sandboxes_free(struct cri *cri);
/* Recovery is over: runs the RunPodSandbox calls that waited for it. */
void sandbox_started(struct cri *cri);

struct sandbox *sandbox_find(struct cri *cri, const char *id_or_prefix, bool *ret_ambiguous);
/* sandbox_find for an RPC that needs the pod: NULL once the call has failed
 * with NOT_FOUND (INVALID_ARGUMENT for an ambiguous prefix), the message
 * opened by rpc ("PortForward: ") when not NULL. */
struct sandbox *sandbox_find_or_fail(struct cri_call *call, const char *rpc, const char *id);
void sandbox_link(struct cri *cri, struct sandbox *sb);
void sandbox_unlink_free(struct cri *cri, struct sandbox *sb);
void sandbox_free(struct sandbox *sb);
/* READY or NOTREADY: a ready pod whose init (shared PID namespace) has died
 * is NOTREADY, as kubelet must then make a new sandbox. */
Runtime__V1__PodSandboxState sandbox_state(const struct sandbox *sb);
/* Runs fn now, or once the pod's current operation ends. */
void sandbox_op_begin(struct cri_call *call, struct sandbox *sb, sandbox_op_fn fn);
/* Ends the current operation; removed: the pod is gone (unlinked and freed
 * here after the queued calls were answered as for a missing pod). */
void sandbox_op_end(struct cri *cri, struct sandbox *sb, bool removed);
/* The net config for a new pod: the configured subnets, else kubelet's pod
 * CIDR, else the embedded default. */
int sandbox_net_config(struct cri *cri, struct net_config *ret, struct err *err);
/* Whether name is "" or a configured handler. */
bool sandbox_handler_known(struct cri *cri, const char *name);
/* Whether the pod has a user namespace of its own (userns_options mode
 * POD, checked by cri_userns_check), and its one uid and gid mapping. */
bool sandbox_userns(const Runtime__V1__PodSandboxConfig *c, struct pod_idmap *ret_uid,
                    struct pod_idmap *ret_gid);
void sandbox_dir(struct cri *cri, const char *id, char *buf, size_t size);
void sandbox_ref(struct cri *cri, const struct sandbox *sb, char *dirbuf, size_t dirsize,
                 struct pod_sandbox_ref *ret);
/* Asks for a fresh NetworkReady off the loop when the cached one is older
 * than a few seconds. */
void sandbox_net_status_refresh(struct cri *cri, bool force);

/* A PodSandboxStatus message pointing into sb (valid while sb is
 * unchanged). */
struct sb_status_scratch {
    Runtime__V1__PodSandboxStatus st;
    Runtime__V1__PodSandboxNetworkStatus net;
    Runtime__V1__PodIP extra, *extras[1];
    Runtime__V1__NamespaceOption nsopt;
    Runtime__V1__Namespace nsmsg;
    Runtime__V1__LinuxPodSandboxStatus lst;
};
void sandbox_status_fill(const struct sandbox *sb, struct sb_status_scratch *s);

/* Handlers. */
void cri_run_pod_sandbox(struct cri_call *call);    /* sandbox_run.c */
void cri_stop_pod_sandbox(struct cri_call *call);   /* sandbox_stop.c */
void cri_remove_pod_sandbox(struct cri_call *call); /* sandbox_stop.c */
void cri_pod_sandbox_status(struct cri_call *call); /* sandbox_status.c */
void cri_list_pod_sandbox(struct cri_call *call);   /* sandbox_status.c */
void cri_stream_pod_sandboxes(struct cri_call *call);
