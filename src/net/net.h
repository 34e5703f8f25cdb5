/* net: kinglet's built-in pod networking (no CNI).
 *
 * A bridge (default `kinglet0`) carries the gateway address of each pod
 * subnet; every pod gets a veth pair whose host end is a hairpin bridge port
 * and whose other end is created directly inside the pod's network namespace
 * as `eth0`, with its address(es), MTU and default route(s); loopback is
 * brought up. Addresses come from a file-backed IPAM (one file per allocated
 * address, claimed atomically with link(2), so concurrent allocators in
 * threads or processes never hand out the same address). Egress masquerade and
 * PortMapping host ports live in kinglet's own nftables table `inet kinglet`;
 * kinglet never touches any other table.
 *
 * Everything here is blocking (netlink, nftables, file I/O, setns on the
 * calling thread): call it from a worker thread or a child process, never from
 * the event loop. Different threads may set up and tear down different pods
 * concurrently. The calling thread's network namespace is switched
 * temporarily (setns is per thread) and always restored.
 *
 * Errors: functions return 0 on success or a negative errno and fill `err`:
 * -EINVAL bad configuration, pod id or port mapping; -ENOSPC address pool
 * exhausted; -EEXIST the pod already has network; -EPERM/-EACCES missing
 * privileges; other values come from the kernel (with its extended ack
 * message in err->msg when it gave one). */
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define NET_BRIDGE_DEFAULT   "kinglet0"
#define NET_SUBNET_DEFAULT   "10.88.0.0/16"
#define NET_IPAM_DIR_DEFAULT "/var/lib/kinglet/net/ipam"
#define NET_MTU_DEFAULT      1500
#define NET_POD_IFNAME       "eth0"
#define NET_NFT_TABLE        "kinglet" /* family inet */

/* Limits on what a client can make us build. */
#define NET_POD_ID_MAX 128
#define NET_PORTS_MAX  256

/* ---- subnets (pure) ----------------------------------------------------- */

struct net_subnet {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network address, host bits zero */
    unsigned prefix;
};

/* Parses "10.88.0.0/16" or "fd00:10:88::/64"; host bits are cleared. The pool
 * must leave room for a gateway and at least one pod (IPv4 prefix 8..30,
 * IPv6 prefix 8..126). -EINVAL otherwise. */
int net_subnet_parse(const char *s, struct net_subnet *ret);
/* "10.88.0.0/16" into buf (at least NET_SUBNET_STRLEN bytes). */
#define NET_SUBNET_STRLEN (INET6_ADDRSTRLEN + 4)
void net_subnet_format(const struct net_subnet *s, char *buf, size_t size);
/* The gateway: the first host address (network + 1). */
void net_subnet_gateway(const struct net_subnet *s, uint8_t ret[16]);
/* Number of addresses the IPAM hands to pods: everything except the network
 * address, the gateway and the broadcast (all-ones) address. */
uint64_t net_subnet_pool_size(const struct net_subnet *s);
/* The n-th pool address (0 <= n < pool_size), i.e. network + 2 + n. */
void net_subnet_pool_addr(const struct net_subnet *s, uint64_t n, uint8_t ret[16]);
/* Index of addr in the pool, or -1 when it is outside the pool. */
int64_t net_subnet_pool_index(const struct net_subnet *s, const uint8_t addr[16]);
bool net_subnet_contains(const struct net_subnet *s, const uint8_t addr[16]);

/* ---- configuration ------------------------------------------------------ */

struct net_config {
    char bridge[IFNAMSIZ];        /* default NET_BRIDGE_DEFAULT */
    struct net_subnet subnets[2]; /* at most one IPv4 and one IPv6 */
    size_t nsubnets;
    unsigned mtu;       /* default NET_MTU_DEFAULT */
    char ipam_dir[256]; /* lease directory, default NET_IPAM_DIR_DEFAULT */
};

/* Embedded defaults: bridge kinglet0, 10.88.0.0/16, MTU 1500. */
void net_config_init(struct net_config *cfg);
/* The pod CIDR grammar, checked here and nowhere else (the daemon's
 * --pod-cidr, the config file, UpdateRuntimeConfig, the saved runtime
 * config): one or two CIDRs separated by a comma (spaces around it
 * allowed), at most one per family, at most NET_POD_CIDRS_MAX bytes; each
 * a network address (no host bits set) of a subnet net_subnet_parse takes
 * (IPv4 /8 to /30, IPv6 /8 to /126). ret (may be NULL) gets them IPv4
 * first, *ret_n their count. -EINVAL with err naming the CIDR and what is
 * allowed. */
#define NET_POD_CIDRS_MAX 255
int net_pod_cidrs_parse(const char *cidrs, struct net_subnet ret[2], size_t *ret_n,
                        struct err *err);
/* Replaces the subnets with what net_pod_cidrs_parse accepts ("10.88.0.0/16",
 * "10.88.0.0/16,fd00:88::/64": kubelet's pod CIDR from UpdateRuntimeConfig
 * has this form); unchanged on failure. */
int net_config_set_subnets(struct net_config *cfg, const char *cidrs, struct err *err);
int net_config_set_bridge(struct net_config *cfg, const char *name, struct err *err);
int net_config_validate(const struct net_config *cfg, struct err *err);

/* The MTU pods should get by default: the lowest MTU of the interfaces
 * holding a default route of the main table (IPv4 or IPv6; a route's own
 * MTU metric when lower), the interface skip_ifname (kinglet's bridge)
 * excepted. Its name goes to ret_ifname (may be NULL). -ENOENT when there
 * is no default route. Blocking (netlink), in the caller's namespace. */
int net_uplink_mtu(const char *skip_ifname, unsigned *ret_mtu, char *ret_ifname, size_t ifname_size,
                   struct err *err);

/* ---- pods --------------------------------------------------------------- */

enum net_proto { NET_PROTO_TCP, NET_PROTO_UDP, NET_PROTO_SCTP };

struct net_port_mapping {
    enum net_proto protocol;
    uint16_t host_port; /* 0: no host port, the mapping is ignored */
    uint16_t container_port;
    const char *host_ip; /* NULL, "", "0.0.0.0" or "::": every local address */
};

struct net_pod_ip {
    int family;
    char addr[INET6_ADDRSTRLEN];
    char gateway[INET6_ADDRSTRLEN];
    unsigned prefix;
};

struct net_pod_result {
    struct net_pod_ip ips[2]; /* IPv4 first when both */
    size_t nips;
    char host_ifname[IFNAMSIZ]; /* the host end of the veth pair */
};

/* Valid pod ids: 1..NET_POD_ID_MAX of [A-Za-z0-9_.-], not starting with '.'. */
bool net_pod_id_valid(const char *pod_id);
/* The host-side veth name for a pod: "kl" + 12 hex digits of a hash of the
 * id (stable, so teardown needs no stored state). */
void net_pod_host_ifname(const char *pod_id, char ret[IFNAMSIZ]);

/* Gives the pod its network inside netns_fd (an fd of the pod's network
 * namespace): bridge and node-side setup on first use, addresses, veth,
 * routes, loopback, host ports. On failure everything done so far is undone.
 * -EEXIST when the pod already has network (tear it down first). */
int net_pod_setup(const struct net_config *cfg, const char *pod_id, int netns_fd,
                  const struct net_port_mapping *ports, size_t nports, struct net_pod_result *ret,
                  struct err *err);
/* Removes the pod's host ports, veth pair and address leases. Idempotent:
 * whatever is already gone (including the pod's netns) is success. */
int net_pod_teardown(const struct net_config *cfg, const char *pod_id, struct err *err);
/* The same, except that the veth pair and the leases go away in a background
 * thread: the kernel's device deletion waits for RCU (20-30 ms) and the
 * caller need not. When it returns, the pod's host ports are gone; its link
 * and leases follow (a lease is released only after its link is gone, so an
 * address is never handed out while still in use). If the process exits
 * first, the leases remain and net_pod_ids finds the pod for a new teardown.
 * At most 16 run at once; beyond that it behaves like net_pod_teardown. */
int net_pod_teardown_async(const struct net_config *cfg, const char *pod_id, struct err *err);
/* Waits until every background teardown has finished (shutdown, tests). */
void net_pod_teardown_wait(void);
/* The addresses currently leased to the pod (after a restart too). */
int net_pod_ips(const struct net_config *cfg, const char *pod_id, struct net_pod_result *ret,
                struct err *err);

/* The ids of every pod holding address leases (*ret and each id malloc'd;
 * free with net_pod_ids_free). After a crash, a caller compares them with
 * the pods it knows and tears the others down. */
int net_pod_ids(const struct net_config *cfg, char ***ret, size_t *ret_n, struct err *err);
void net_pod_ids_free(char **ids, size_t n);

/* Node-wide preparation (idempotent): forwarding sysctls, the nftables table
 * with masquerade for the pod subnets, the IPAM directory. net_pod_setup does
 * it on first use as well. */
int net_node_setup(const struct net_config *cfg, struct err *err);
/* The part of net_node_setup that needs no nftables (forwarding sysctls,
 * the IPAM directory): a daemon without pods runs this at start and leaves
 * the table to its first pod, so that libnftnl (about 0.5 MB of RSS) is
 * only loaded once a pod needs it. */
int net_node_prepare(const struct net_config *cfg, struct err *err);
/* Removes everything node-wide kinglet created: the nftables table and the
 * bridge (pods must be torn down first). Idempotent. */
int net_node_teardown(const struct net_config *cfg, struct err *err);

/* NetworkReady: true when the configuration is valid, forwarding is on and
 * kinglet's nftables table is in place; otherwise false with the reason in
 * `reason`. Returns a negative errno only when the check itself failed. */
int net_status(const struct net_config *cfg, bool *ret_ready, char *reason, size_t reason_size);
/* The same, except that the nftables table is required only once this
 * process has made it (net_node_setup, or the setup of a pod): until then the
 * first pod creates it, and a daemon without pods has no table to show. */
int net_status_deferred(const struct net_config *cfg, bool *ret_ready, char *reason,
                        size_t reason_size);

/* Writes a namespaced sysctl ("net.ipv4.ip_unprivileged_port_start" or
 * "net/ipv4/...") inside the network namespace netns_fd (-1: the caller's).
 * Only net.* keys; -EINVAL for anything else or for path tricks. */
int net_sysctl_set_in(int netns_fd, const char *key, const char *value, struct err *err);
