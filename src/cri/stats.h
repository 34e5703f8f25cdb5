/* Private to src/cri: what stats.c measures for one container or pod, and
 * the cAdvisor metrics (metrics.c) made of it.
 *
 * stats.c fills a struct sample in a thread pool worker (cgroup files,
 * /proc of the processes, the pod's network namespace) and builds the
 * answers on the loop; metrics.c turns a sample into the Metric messages
 * of ListPodSandboxMetrics and offers their descriptors. */
#pragma once

#include "cri/containers.h"
#include "cri/sandbox.h"
#include "oci/cgroup.h"

#define STATS_IFACES 8

struct iface {
    char name[32];
    uint64_t rx_bytes, rx_packets, rx_errors, rx_dropped;
    uint64_t tx_bytes, tx_packets, tx_errors, tx_dropped;
};

/* What the processes of a container tell in /proc (metrics only). */
struct procs_sample {
    bool ok;
    uint64_t threads, fds, sockets;
    bool has_nofile;
    uint64_t nofile_soft; /* of the container's init: RLIMIT_NOFILE */
};

/* The filesystem that holds a container's writable layer (metrics only). */
struct fs_sample {
    bool ok;
    char device[256]; /* the mount's source, as /proc/self/mountinfo names it */
    uint64_t limit_bytes, inodes_total, inodes_free;
};

/* What a worker measures for one container or pod. */
struct sample {
    char id[STORE_ID_LEN + 1];
    /* Loop side: the container or sandbox measured, reached without a
     * search. ref is a cursor on its list (moved on if it is removed), so
     * it still names it when ref.at == obj and the ids agree. */
    struct cri_cursor ref;
    struct cri_cursor **refs; /* the list's cursors; NULL: ref not open */
    const void *obj;
    size_t ctr0, n_ctrs; /* a pod's: its containers' samples in the job */
    char *cgroup;        /* absolute path of its cgroup, NULL: none */
    char *layer;         /* a container's upper directory, NULL: no du now */
    char *netns;         /* a pod's network namespace file, NULL: none */
    pid_t init_pid;      /* metrics: the container's init, 0: none */
    bool metrics;        /* measure what only metrics report */
    uint64_t ts;         /* when it was measured (wall clock ns) */
    bool ok;             /* cgroup figures read */
    struct oci_cgroup_stats cg;
    bool du_ok;
    uint64_t du_bytes, du_inodes;
    struct iface ifaces[STATS_IFACES];
    size_t n_ifaces;
    struct procs_sample pr;
    const struct fs_sample *fs; /* the writable layers' (the job's, measured once) */
};

/* One metric message, its value and its label values, all in one piece. */
struct metric_msg {
    Runtime__V1__Metric m;
    Runtime__V1__UInt64Value v;
    char *labels[5];
};

/* At most this many metrics for one container, and for one pod. */
size_t cri_metrics_ctr_max(void);
size_t cri_metrics_pod_max(void);
/* The metrics of a container's sample into out[] (and pointers to them
 * into ptrs[]); returns how many. Label values point into c and s. */
size_t cri_metrics_ctr(const struct container *c, const struct sample *s, struct metric_msg *out,
                       Runtime__V1__Metric **ptrs);
/* The pod's own metrics (its network interfaces). */
size_t cri_metrics_pod(const struct sandbox *sb, const struct sample *s, struct metric_msg *out,
                       Runtime__V1__Metric **ptrs);
