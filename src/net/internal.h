/* net/internal.h: private to src/net.
 *
 * nl.c      netlink: message batches built without I/O, one sendmsg per
 *           batch, replies parsed by nl_reply_parse() (pure, fuzzed)
 * link.c    bridge, veth, bridge port, MTU, up/down, delete
 * addr.c    RTM_NEWADDR / RTM_DELADDR
 * route.c   default routes
 * ipam.c    file-backed address allocation
 * nft.c     kinglet's nftables table: nf_tables messages built with
 *           libnftnl (no I/O), applied as one atomic nfnetlink batch
 * sysctl.c  /proc/sys/net writes, in a given network namespace
 * netns.c   running a step inside another network namespace (setns on the
 *           calling thread, restored afterwards)
 * pod.c     the high-level API of net.h */
#pragma once

#include <linux/netlink.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "net/net.h"

struct nlmsghdr;
struct nlattr;

/* ---- netlink batches (no I/O) ------------------------------------------- */

#define NL_BATCH_SIZE    16384
#define NL_BATCH_MSG_MAX 1024 /* room reserved for each message being built */
#define NL_BATCH_MSGS    16   /* messages per batch (per-message results) */
#define NL_RECV_SIZE     32768

struct nl_batch {
    uint8_t buf[NL_BATCH_SIZE];
    size_t len;
    unsigned nmsgs;
};

void nl_batch_init(struct nl_batch *b);
/* Starts a message with NLM_F_REQUEST|NLM_F_ACK|flags; NULL when full. The
 * sequence number is assigned when the batch is sent. */
struct nlmsghdr *nl_batch_begin(struct nl_batch *b, uint16_t type, uint16_t flags);
void nl_batch_end(struct nl_batch *b, struct nlmsghdr *nlh);
/* The i-th message of the batch (tests). */
const struct nlmsghdr *nl_batch_msg(const struct nl_batch *b, unsigned i);

static inline bool nl_family_ok(int family, unsigned prefix)
{
    return (family == AF_INET && prefix <= 32) || (family == AF_INET6 && prefix <= 128);
}

/* Link messages. ifname/peer may be NULL where documented. */
int nl_build_link_get(struct nl_batch *b, const char *ifname);
int nl_build_bridge_create(struct nl_batch *b, const char *name, unsigned mtu);
/* A veth pair host<->peer: host end attached to master (0: none) and up,
 * peer created (down) directly in the namespace peer_netns_fd. */
int nl_build_veth_create(struct nl_batch *b, const char *host, const char *peer, int peer_netns_fd,
                         unsigned mtu, int master_ifindex);
/* Bridge port flags on an existing port, addressed by name (hairpin). */
int nl_build_brport_hairpin(struct nl_batch *b, const char *ifname, bool on);
/* Up/down (and MTU when mtu != 0) by name. */
int nl_build_link_set(struct nl_batch *b, const char *ifname, bool up, unsigned mtu);
int nl_build_link_del(struct nl_batch *b, const char *ifname);
/* Address add (create-or-replace, IFA_F_NODAD for IPv6) / delete. */
int nl_build_addr(struct nl_batch *b, bool add, int family, int ifindex, const uint8_t *addr,
                  unsigned prefix);
/* Default route via gw out of ifindex (replace). */
int nl_build_route_default(struct nl_batch *b, bool add, int family, int ifindex,
                           const uint8_t *gw);

/* Dumps of every route (both families) and every link. */
int nl_build_route_dump(struct nl_batch *b);
int nl_build_link_dump(struct nl_batch *b);

/* ---- netlink replies (pure) --------------------------------------------- */

/* A default route of the main table: its output interfaces (RTA_OIF, or
 * each next hop of RTA_MULTIPATH) and its own MTU metric (0: none). */
struct net_default_route {
    int family;
    int oifs[8];
    size_t noifs;
    unsigned mtu;
};
/* 1 when nlh (RTM_NEWROUTE) is such a route, 0 for any other route,
 * -EBADMSG when malformed. */
int net_route_default_parse(const struct nlmsghdr *nlh, struct net_default_route *ret);

struct nl_link_info {
    int ifindex;
    char name[IFNAMSIZ];
    unsigned mtu;
    int master;
    unsigned flags;
    char kind[16];
};

/* Called for each reply message that is not an ack/error. */
typedef int (*nl_msg_cb)(const struct nlmsghdr *nlh, void *data);

/* Per-message outcome of a batch: 0 or a negative errno, and the kernel's
 * extended ack message. */
struct nl_result {
    int errors[NL_BATCH_MSGS];
    char ext_msg[NL_BATCH_MSGS][128];
};

struct nl_reply_state {
    uint32_t portid, seq_first, seq_last; /* what we expect */
    bool done;                            /* NLMSG_DONE seen (end of a dump) */
    struct nl_result *res;                /* optional: per-message results */
    unsigned acked;                       /* acks/errors seen for our sequence numbers */
    int first_error;                      /* negative errno of the first failed request, or 0 */
    unsigned first_error_index;           /* which message of the batch */
    char ext_msg[256];                    /* the kernel's extended ack message, if any */
};

/* Parses one datagram received from the kernel: ACKs and errors (with
 * NLMSGERR_ATTR_MSG) are recorded in st, other messages for our sequence
 * numbers go to cb. Messages for other ports or sequences are skipped.
 * Returns 0, or -EBADMSG for a malformed datagram, or cb's negative value. */
int nl_reply_parse(const void *buf, size_t len, struct nl_reply_state *st, nl_msg_cb cb,
                   void *data);
/* Parses an RTM_NEWLINK message. -EBADMSG when malformed. */
int nl_link_parse(const struct nlmsghdr *nlh, struct nl_link_info *ret);

/* ---- netlink I/O -------------------------------------------------------- */

struct nl;
/* A NETLINK_ROUTE socket (extended acks on) in netns_fd, or in the caller's
 * namespace when netns_fd < 0. */
int nl_open(int netns_fd, struct nl **ret, struct err *err);
/* The same on another netlink bus (NETLINK_NETFILTER for conntrack). */
int nl_open_bus(int bus, int netns_fd, struct nl **ret, struct err *err);
void nl_close(struct nl *nl);
static inline void nl_closep(struct nl **p)
{
    if (*p)
        nl_close(*p);
}
/* Sends the batch in one datagram and waits for every ack; replies go to cb.
 * Without res: returns 0 or the first failed request's error (later requests
 * were still processed by the kernel), with the kernel's extended ack
 * message. With res: every request's outcome is stored there and only I/O
 * failures are returned. */
int nl_transact(struct nl *nl, struct nl_batch *b, nl_msg_cb cb, void *data, struct nl_result *res,
                struct err *err);
/* Sends a batch holding one dump request and passes every reply to cb until
 * the dump ends. */
int nl_dump(struct nl *nl, struct nl_batch *b, nl_msg_cb cb, void *data, struct err *err);
/* Sends an nfnetlink batch (NFNL_MSG_BATCH_BEGIN, messages, BATCH_END, as
 * built by the caller) in one datagram, numbering its messages. The kernel
 * applies all of it or nothing; it answers errors, and acks messages with
 * NLM_F_ACK (the caller sets it on the last one). Returns 0, or the first
 * error with *ret_index the failing message's index in the batch (0: the
 * batch itself) and the kernel's extended ack message; -EIO when nothing
 * was answered. */
int nl_send_batch(struct nl *nl, void *buf, size_t len, unsigned *ret_index, struct err *err);
/* Sets err from the i-th outcome ("<what>: <ext ack>: <strerror>"); returns
 * its negative errno, or 0 when that request succeeded. */
int nl_result_err(const struct nl_result *res, unsigned i, struct err *err, const char *what);

/* ---- conntrack ---------------------------------------------------------- */

/* A dump of the conntrack entries of family with this protocol and original
 * destination port (kernel-side filter). */
int nl_build_ct_dump(struct nl_batch *b, int family, uint8_t l4proto, uint16_t dport);
/* Deletes the entry with this CTA_TUPLE_ORIG payload. */
int nl_build_ct_delete(struct nl_batch *b, int family, const void *tuple, size_t len);
/* 1 when a CTA_TUPLE_ORIG attribute has l4proto and dport, 0 when not,
 * -EBADMSG when malformed. */
int net_ct_tuple_matches(const struct nlattr *tuple, uint8_t l4proto, uint16_t dport);
/* Deletes the entries of family with l4proto and original destination port
 * dport (at most 4096 per call). */
int net_conntrack_flush_dport(int family, uint8_t l4proto, uint16_t dport, struct err *err);

/* ---- links, addresses, routes ------------------------------------------- */

/* -ENODEV when there is no such link. */
int net_link_get(struct nl *nl, const char *name, struct nl_link_info *ret, struct err *err);
/* Creates the bridge unless it exists (a non-bridge of that name is -EEXIST),
 * gives it the gateway addresses, the MTU and brings it up. */
int net_bridge_ensure(struct nl *nl, const struct net_config *cfg, int *ret_ifindex,
                      struct err *err);
/* The veth pair of a pod, host end on the bridge with hairpin on. */
int net_veth_create(struct nl *nl, const char *host, int peer_netns_fd, unsigned mtu,
                    int bridge_ifindex, struct err *err);
/* Deletes a link; a missing one is success. */
int net_link_delete(struct nl *nl, const char *name, struct err *err);

/* ---- IPAM --------------------------------------------------------------- */

#define NET_IPAM_HOSTPORTS_FLAG "hostports"

/* Reserves one address of subnet for pod_id under dir (created if needed):
 * the first free address after the last one handed out, wrapping around.
 * -ENOSPC with a clear message when the pool is full. flags is stored with
 * the lease (NULL for none). */
int net_ipam_alloc(const char *dir, const struct net_subnet *s, const char *pod_id,
                   const char *flags, uint8_t ret_addr[16], struct err *err);
struct net_ipam_lease {
    int family;
    uint8_t addr[16];
    unsigned prefix; /* of the subnet the lease belongs to */
    char pod_id[NET_POD_ID_MAX + 1];
    bool hostports;
};
/* One lease file: its name (the address, of family) and content ("<pod
 * id>\n" then flag lines). 0 with ret filled (prefix left 0), -EBADMSG for
 * anything else. Pure. */
int net_ipam_lease_parse(const char *name, const char *data, size_t len, int family,
                         struct net_ipam_lease *ret);
/* Every lease under dir (all subnets, including ones no longer configured);
 * *ret is malloc'd. A missing dir is an empty list. */
int net_ipam_list(const char *dir, struct net_ipam_lease **ret, size_t *ret_n, struct err *err);
/* Releases pod_id's leases (all subnets). Missing ones are success. */
int net_ipam_release(const char *dir, const char *pod_id, struct err *err);
/* Releases one address (undo of an alloc). */
int net_ipam_release_addr(const char *dir, const struct net_subnet *s, const uint8_t addr[16],
                          struct err *err);

/* ---- nftables ----------------------------------------------------------- */

struct net_nft_dnat {
    int family;
    char addr[INET6_ADDRSTRLEN];
};

/* A transaction being built: nfnetlink messages for nf_tables, made with
 * libnftnl without any I/O, and what each one does (for error messages). */
struct net_nft_batch {
    struct buf buf;
    unsigned nmsgs;
    char (*what)[96];
    size_t what_cap;
};
void net_nft_batch_free(struct net_nft_batch *b);
/* Starts a batch (NFNL_MSG_BATCH_BEGIN); -ENOMEM. */
int net_nft_batch_begin(struct net_nft_batch *b);
/* Ends it: NLM_F_ACK on the last message, then NFNL_MSG_BATCH_END. */
int net_nft_batch_end(struct net_nft_batch *b);
/* The i-th message (tests). */
const struct nlmsghdr *net_nft_batch_msg(const struct net_nft_batch *b, unsigned i);

/* Appends the messages that (re)build the base chains: hostport dispatch
 * from prerouting and output, masquerade for the pod subnets (not for
 * traffic staying in the subnet), hairpin and localhost masquerade.
 * Idempotent: it flushes and refills only the base chains, never the pods'
 * rules. -ENOMEM. */
int net_nft_base_build(const struct net_config *cfg, struct net_nft_batch *b);
/* Checks a pod's id and port mappings (no libnftnl): -EINVAL for a bad
 * mapping. */
int net_nft_ports_check(const char *pod_id, const struct net_port_mapping *ports, size_t nports,
                        struct err *err);
/* Appends the messages that add a pod's DNAT rules, each with the comment
 * "kinglet:<pod_id>"; *ret_nrules is how many. -EINVAL for a bad mapping
 * (nothing appended), -ENOMEM. Mappings whose host_ip family has no pod
 * address are skipped. */
int net_nft_pod_build(const char *pod_id, const struct net_nft_dnat *ips, size_t nips,
                      const struct net_port_mapping *ports, size_t nports, struct net_nft_batch *b,
                      size_t *ret_nrules, struct err *err);

/* A rule as the kernel lists it (NFT_MSG_NEWRULE), what teardown needs. */
struct net_nft_rule {
    int family;
    char table[64];
    char chain[64];
    uint64_t handle; /* 0: none */
    bool has_comment;
    char comment[256]; /* NFTNL_UDATA_RULE_COMMENT */
};
/* Parses one rule message of a listing. 1 when nlh is a rule, 0 for any
 * other message, -EBADMSG when malformed. Pure (no libnftnl). */
int net_nft_rule_parse(const struct nlmsghdr *nlh, struct net_nft_rule *ret);
/* The handles of one pod's rules in kinglet's hostports chain, collected
 * from a listing by net_nft_handles_cb (an nl_msg_cb). */
struct net_nft_handles {
    const char *pod_id;
    uint64_t *v;
    size_t n, cap;
};
int net_nft_handles_cb(const struct nlmsghdr *nlh, void *data);
/* Appends the deletion of these hostports rules by handle. -ENOMEM. */
int net_nft_pod_delete_build(const uint64_t *handles, size_t n, struct net_nft_batch *b);
/* The request that lists the hostports chain's rules (a dump). */
int net_nft_list_build(struct nl_batch *b);

int net_nft_base_ensure(const struct net_config *cfg, struct err *err);
int net_nft_pod_add(const struct net_config *cfg, const char *pod_id,
                    const struct net_nft_dnat *ips, size_t nips,
                    const struct net_port_mapping *ports, size_t nports, struct err *err);
int net_nft_pod_remove(const char *pod_id, struct err *err);
/* Deletes the whole table; missing is success. */
int net_nft_table_delete(struct err *err);
int net_nft_table_exists(bool *ret, struct err *err);

/* ---- sysctl and namespaces ---------------------------------------------- */

/* Writes value to /proc/sys/<key with dots as slashes> in the caller's
 * network namespace; key must start with "net." or "net/". */
int net_sysctl_write(const char *key, const char *value, struct err *err);
int net_sysctl_read(const char *key, char *buf, size_t size, struct err *err);

/* Runs fn(data) with the calling thread inside netns_fd, then returns the
 * thread to its namespace. If returning fails the process aborts: going on
 * in the wrong namespace could reconfigure the wrong network. */
int net_netns_run(int netns_fd, int (*fn)(void *data, struct err *err), void *data,
                  struct err *err);

/* Parse a textual address of either family; family of the result. */
int net_addr_parse(const char *s, int *ret_family, uint8_t ret[16]);
void net_addr_format(int family, const uint8_t addr[16], char *buf, size_t size);
