/* pod: the machinery of a pod sandbox, without a pause image.
 *
 * A sandbox is a directory <state>/pods/<id>/ holding:
 *   ns/{user,net,ipc,uts,pid}  the pod's namespaces, kept alive by bind
 *                         mounts of the namespace files of a short-lived
 *                         child that unshared them;
 *   shm/                  the pod's /dev/shm (a size-limited tmpfs);
 *   hostname, hosts, resolv.conf   the files containers get as /etc/...
 * plus, for a shared (POD) PID namespace, a minimal init (a small program
 * of its own, init_main.c, with no privilege and no host filesystem) that
 * is pid 1 there and reaps orphans; and the pod's cgroup. Networking comes from src/net (veth,
 * address, host ports).
 *
 * Everything here blocks (fork, mount, netlink, file I/O): call it from a
 * worker thread, never from the event loop. pod_sandbox_create undoes its own
 * work on failure; pod_sandbox_stop and pod_sandbox_remove are idempotent.
 *
 * Errors: -EINVAL for a bad spec (the message names the field), otherwise
 * the errno of the failed step with the step in the message. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"
#include "net/net.h"

#define POD_DNS_SERVERS_MAX  16
#define POD_DNS_SEARCHES_MAX 32
#define POD_DNS_OPTIONS_MAX  32
#define POD_SYSCTLS_MAX      128
#define POD_SHM_SIZE_DEFAULT (64ULL << 20) /* as Docker and containerd */

enum pod_pid_mode { POD_PID_POD, POD_PID_CONTAINER, POD_PID_NODE, POD_PID_TARGET };

/* One id mapping of a pod's user namespace (as uid_map writes it). */
struct pod_idmap {
    uint32_t container_id, host_id, length;
};

struct pod_sysctl {
    const char *key;
    const char *value;
};

struct pod_sandbox_spec {
    const char *id;
    const char *dir;      /* <state>/pods/<id> */
    const char *hostname; /* "" or NULL: the node's for host network, else the id's first 12 */
    bool host_network, host_ipc;
    enum pod_pid_mode pid_mode;
    const char *const *dns_servers;
    size_t n_dns_servers;
    const char *const *dns_searches;
    size_t n_dns_searches;
    const char *const *dns_options;
    size_t n_dns_options;
    const struct pod_sysctl *sysctls;
    size_t n_sysctls;
    uint64_t shm_size;            /* 0: POD_SHM_SIZE_DEFAULT */
    const char *cgroup_parent;    /* NULL/"": kinglet's default parent */
    const char *cgroup_root;      /* the cgroup2 mount point, NULL: unknown */
    json_t *cgroup_resources;     /* OCI linux.resources for the pod cgroup, NULL: none */
    const struct net_config *net; /* NULL: no pod networking */
    const struct net_port_mapping *ports;
    size_t nports;
    const char *host_resolv_conf; /* NULL: /etc/resolv.conf */
    /* A user namespace of the pod's own (hostUsers: false), with these
     * mappings; NULL: the host's. The pod's other namespaces and its init
     * are then owned by it, so containers that join it may mount /proc,
     * /sys and mqueue there. */
    const struct pod_idmap *uid_map, *gid_map;
};

struct pod_sandbox_result {
    struct net_pod_result net; /* nips 0 without networking */
    pid_t init_pid;            /* 0 without a POD pid namespace */
    uint64_t init_start;
    char *cgroup_path; /* absolute below the cgroup2 root, malloc'd */
};

/* What stop and remove need; all of it is in the pod's record. */
struct pod_sandbox_ref {
    const char *id;
    const char *dir;
    const char *cgroup_path; /* NULL: none */
    pid_t init_pid;
    uint64_t init_start;
    const struct net_config *net; /* NULL: the pod had no networking */
    /* Leave the veth deletion and the lease release to a background thread
     * (net_pod_teardown_async): the kernel's RCU wait is not the caller's. */
    bool net_async;
};

/* Checks a spec without touching anything (pure): sysctl names against the
 * namespaces the pod has, DNS entries, hostname. */
int pod_sandbox_spec_check(const struct pod_sandbox_spec *s, struct err *err);
int pod_sandbox_create(const struct pod_sandbox_spec *s, struct pod_sandbox_result *ret,
                       struct err *err);
void pod_sandbox_result_clear(struct pod_sandbox_result *r);
/* Kills what runs in the pod (its cgroup and init), tears its network down
 * (releasing its addresses) and unmounts its namespaces and /dev/shm. */
int pod_sandbox_stop(const struct pod_sandbox_ref *ref, struct err *err);
/* Stop, then remove the cgroup and the directory. */
int pod_sandbox_remove(const struct pod_sandbox_ref *ref, struct err *err);
/* Removes the remains of a pod whose creation was cut short (the daemon
 * died before it had a record): what the directory says of its cgroup and
 * init, its network by id, its mounts and directory. */
int pod_sandbox_remove_orphan(const char *id, const char *dir, const struct net_config *net,
                              struct err *err);
/* Whether the pod's network namespace is still held (its bind mount is
 * there): false after a reboot wiped the state directory. */
bool pod_sandbox_netns_alive(const char *dir);

/* ---- pure helpers (files.c) ---- */

/* Which namespace a sysctl belongs to: CLONE_NEWNET for net.*, CLONE_NEWIPC
 * for kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*; -EINVAL for any
 * other (not namespaced: refused) or a malformed name. */
int pod_sysctl_namespace(const char *key);
/* "net.ipv4.ip_forward" or "net/ipv4/conf/eth0.1/rp_filter" → the path below
 * /proc/sys ("net/ipv4/ip_forward"), into buf. */
int pod_sysctl_path(const char *key, char *buf, size_t size);
/* resolv.conf text for the given DNS config (buf appended). */
int pod_resolv_conf_build(const struct pod_sandbox_spec *s, struct buf *b, struct err *err);
/* /etc/hosts for a pod with its own network. */
int pod_hosts_build(const char *hostname, const struct net_pod_result *net, struct buf *b);
bool pod_hostname_valid(const char *h);

/* Replaces the calling process with the pod init program (init_main.c),
 * pid 1 of a pod's PID namespace, run from a sealed memfd. Its report pipe
 * must be fd 3 (POD_INIT_REPORT_FD, init_proto.h); every other fd is closed
 * by the program. Returns only on failure, with -errno. */
int pod_init_exec(void);
