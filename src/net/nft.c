/* net/nft: kinglet's nftables table.
 *
 * Everything kinglet does in netfilter lives in one table, `inet kinglet`;
 * no command here names any other table, so rules of other software are
 * never touched, and deleting the table removes all of kinglet's rules.
 *
 *   prerouting, output (nat, dstnat priority):
 *       fib daddr type local jump hostports
 *   hostports: one DNAT rule per pod port mapping (and address family), each
 *       with the comment "kinglet:<pod id>" so that teardown deletes exactly
 *       that pod's rules
 *   postrouting (nat, srcnat priority):
 *       localhost-to-hostport traffic (route_localnet) and hairpin traffic
 *       (a pod reaching itself or a neighbour through a host port) are
 *       masqueraded; egress from the pod subnet to anywhere outside it is
 *       masqueraded
 *
 * Every change is one nfnetlink batch of nf_tables messages, so the kernel
 * applies all of it or nothing. The messages are built with libnftnl by
 * functions without I/O (unit-tested), with the very expressions nft(8)
 * generates for the rule text quoted next to each (`nft --debug=netlink`),
 * so that `nft list table inet kinglet` shows that text (tests/net compares
 * it with what nft makes of the text). Teardown lists the hostports chain
 * over netlink and deletes the pod's rules by handle, found by the comment
 * in their userdata (parsed here without libnftnl, fuzzed). A process-wide
 * mutex keeps one thread's list-then-delete apart from another's; the kernel
 * serializes the transactions themselves. libnftnl is loaded on first use
 * (src/net/lazy.c): a daemon without host ports never maps it. */
#include <arpa/inet.h>
#include <assert.h>
#include <endian.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_ipv4.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "net/internal.h"

#define TABLE          NET_NFT_TABLE
#define HOSTPORTS      "hostports"
#define COMMENT_PREFIX "kinglet:"
#define MSG_MAX        4096      /* room for one message; ours stay under 1 KiB */
#define HANDLES_MAX    (1 << 16) /* rules of one pod that teardown deletes */

static pthread_mutex_t nft_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- batches (no I/O) --------------------------------------------------- */

void net_nft_batch_free(struct net_nft_batch *b)
{
    buf_free(&b->buf);
    free(b->what);
    memset(b, 0, sizeof(*b));
}

/* Room for the next message, zeroed; NULL when out of memory. */
static struct nlmsghdr *msg_room(struct net_nft_batch *b)
{
    if (buf_reserve(&b->buf, MSG_MAX) < 0)
        return NULL;
    if (b->nmsgs >= b->what_cap) {
        size_t cap = b->what_cap ? 2 * b->what_cap : 16;
        void *w = reallocarray(b->what, cap, sizeof(*b->what));
        if (!w)
            return NULL;
        b->what = w;
        b->what_cap = cap;
    }
    memset(b->buf.data + b->buf.len, 0, MSG_MAX);
    return (struct nlmsghdr *)(b->buf.data + b->buf.len);
}

static _printf_(3, 4) void msg_add(struct net_nft_batch *b, struct nlmsghdr *nlh, const char *fmt,
                                   ...)
{
    assert(nlh->nlmsg_len <= MSG_MAX);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->what[b->nmsgs], sizeof(b->what[0]), fmt, ap);
    va_end(ap);
    b->buf.len += MNL_ALIGN(nlh->nlmsg_len);
    b->nmsgs++;
}

const struct nlmsghdr *net_nft_batch_msg(const struct net_nft_batch *b, unsigned i)
{
    size_t off = 0;
    for (unsigned k = 0; k < b->nmsgs; k++) {
        const struct nlmsghdr *nlh = (const struct nlmsghdr *)(b->buf.data + off);
        if (k == i)
            return nlh;
        off += MNL_ALIGN(nlh->nlmsg_len);
    }
    return NULL;
}

int net_nft_batch_begin(struct net_nft_batch *b)
{
    struct nlmsghdr *nlh = msg_room(b);
    if (!nlh)
        return -ENOMEM;
    nftnl_batch_begin((char *)nlh, 0);
    msg_add(b, nlh, "transaction");
    return 0;
}

int net_nft_batch_end(struct net_nft_batch *b)
{
    /* The kernel answers only errors, and acks what asks for it: one ack,
     * for the last message, says the whole batch was committed. */
    if (b->nmsgs > 0)
        ((struct nlmsghdr *)net_nft_batch_msg(b, b->nmsgs - 1))->nlmsg_flags |= NLM_F_ACK;
    struct nlmsghdr *nlh = msg_room(b);
    if (!nlh)
        return -ENOMEM;
    nftnl_batch_end((char *)nlh, 0);
    msg_add(b, nlh, "transaction");
    return 0;
}

/* ---- tables and chains -------------------------------------------------- */

static void table_freep(struct nftnl_table **t)
{
    if (*t)
        nftnl_table_free(*t);
}

static void chain_freep(struct nftnl_chain **c)
{
    if (*c)
        nftnl_chain_free(*c);
}

static void rule_freep(struct nftnl_rule **r)
{
    if (*r)
        nftnl_rule_free(*r);
}

/* "add table inet kinglet" (NEWTABLE, create) or "delete table" (DELTABLE). */
static int table_msg(struct net_nft_batch *b, bool add)
{
    _cleanup_(table_freep) struct nftnl_table *t = nftnl_table_alloc();
    if (!t || nftnl_table_set_str(t, NFTNL_TABLE_NAME, TABLE) < 0)
        return -ENOMEM;
    if (add)
        nftnl_table_set_u32(t, NFTNL_TABLE_FLAGS, 0);
    struct nlmsghdr *nlh = msg_room(b);
    if (!nlh)
        return -ENOMEM;
    nftnl_nlmsg_build_hdr((char *)nlh, add ? NFT_MSG_NEWTABLE : NFT_MSG_DELTABLE, NFPROTO_INET,
                          add ? NLM_F_CREATE : 0, 0);
    nftnl_table_nlmsg_build_payload(nlh, t);
    msg_add(b, nlh, "%s table `inet " TABLE "`", add ? "add" : "delete");
    return 0;
}

/* "add chain inet kinglet <name>", and for a base chain (hook >= 0)
 * "{ type nat hook <hook> priority <prio>; policy accept; }". */
static int chain_msg(struct net_nft_batch *b, const char *name, int hook, int prio)
{
    _cleanup_(chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
    if (!c || nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, TABLE) < 0 ||
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name) < 0)
        return -ENOMEM;
    if (hook >= 0) {
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "nat") < 0)
            return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
    }
    struct nlmsghdr *nlh = msg_room(b);
    if (!nlh)
        return -ENOMEM;
    nftnl_nlmsg_build_hdr((char *)nlh, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE, 0);
    nftnl_chain_nlmsg_build_payload(nlh, c);
    msg_add(b, nlh, "add chain `%s`", name);
    return 0;
}

static struct nftnl_rule *rule_new(const char *chain)
{
    struct nftnl_rule *r = nftnl_rule_alloc();
    if (r && (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, TABLE) < 0 ||
              nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)) {
        nftnl_rule_free(r);
        return NULL;
    }
    return r;
}

/* "flush chain": DELRULE naming only the chain. */
static int flush_msg(struct net_nft_batch *b, const char *chain)
{
    _cleanup_(rule_freep) struct nftnl_rule *r = rule_new(chain);
    struct nlmsghdr *nlh = r ? msg_room(b) : NULL;
    if (!nlh)
        return -ENOMEM;
    nftnl_nlmsg_build_hdr((char *)nlh, NFT_MSG_DELRULE, NFPROTO_INET, 0, 0);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    msg_add(b, nlh, "flush chain `%s`", chain);
    return 0;
}

/* ---- expressions -------------------------------------------------------- */

/* Each appends one expression to r; false when out of memory. */

static struct nftnl_expr *expr_add(struct nftnl_rule *r, const char *name)
{
    struct nftnl_expr *e = nftnl_expr_alloc(name);
    if (e)
        nftnl_rule_add_expr(r, e); /* r owns it now */
    return e;
}

/* [ meta load <key> => reg 1 ] */
static bool meta_load(struct nftnl_rule *r, uint32_t key)
{
    struct nftnl_expr *e = expr_add(r, "meta");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
    return true;
}

/* [ cmp <op> reg 1 <data> ] */
static bool cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len)
{
    struct nftnl_expr *e = expr_add(r, "cmp");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
    return nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len) >= 0;
}

/* [ payload load <len>b @ <base> header + <off> => reg 1 ] */
static bool payload(struct nftnl_rule *r, uint32_t base, uint32_t off, uint32_t len)
{
    struct nftnl_expr *e = expr_add(r, "payload");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
    return true;
}

/* [ bitwise reg 1 = ( reg 1 & <mask> ) ^ 0 ] */
static bool bitwise_and(struct nftnl_rule *r, const void *mask, uint32_t len)
{
    static const uint8_t zero[16];
    assert(len <= sizeof(zero));
    struct nftnl_expr *e = expr_add(r, "bitwise");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
    return nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len) >= 0 &&
           nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, len) >= 0;
}

/* "meta nfproto ipv4|ipv6", also the implicit dependency of "ip ..." and
 * "ip6 ...": [ meta load nfproto => reg 1 ] [ cmp eq reg 1 <nfproto> ] */
static bool nfproto(struct nftnl_rule *r, int family)
{
    uint8_t p = family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6;
    return meta_load(r, NFT_META_NFPROTO) && cmp(r, NFT_CMP_EQ, &p, 1);
}

/* "ip|ip6 saddr|daddr [!=] <addr>/<prefix>", after nfproto(): nft loads the
 * whole bytes of the prefix, or the address and a mask when the prefix ends
 * inside a byte. */
static bool addr_match(struct nftnl_rule *r, int family, bool dst, const uint8_t addr[16],
                       unsigned prefix, bool neq)
{
    uint32_t alen = family == AF_INET ? 4 : 16;
    uint32_t off = family == AF_INET ? (dst ? 16 : 12) : (dst ? 24 : 8);
    uint32_t op = neq ? NFT_CMP_NEQ : NFT_CMP_EQ;
    assert(prefix <= alen * 8);
    if (prefix % 8 == 0 && prefix > 0)
        return payload(r, NFT_PAYLOAD_NETWORK_HEADER, off, prefix / 8) &&
               cmp(r, op, addr, prefix / 8);
    uint8_t mask[16] = {0}, net[16] = {0};
    for (unsigned i = 0; i < alen; i++) {
        unsigned bits = prefix > 8 * i ? prefix - 8 * i : 0;
        mask[i] = bits >= 8 ? 0xff : (uint8_t)(0xff00 >> bits);
        net[i] = addr[i] & mask[i];
    }
    return payload(r, NFT_PAYLOAD_NETWORK_HEADER, off, alen) && bitwise_and(r, mask, alen) &&
           cmp(r, op, net, alen);
}

/* "fib daddr type local": [ fib daddr type => reg 1 ] [ cmp eq reg 1 0x2 ] */
static bool fib_daddr_local(struct nftnl_rule *r)
{
    struct nftnl_expr *e = expr_add(r, "fib");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_DADDR);
    uint32_t local = RTN_LOCAL;
    return cmp(r, NFT_CMP_EQ, &local, sizeof(local));
}

/* "ct status dnat": [ ct load status => reg 1 ]
 * [ bitwise reg 1 = ( reg 1 & 0x20 ) ^ 0 ] [ cmp neq reg 1 0 ] */
static bool ct_status_dnat(struct nftnl_rule *r)
{
    struct nftnl_expr *e = expr_add(r, "ct");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATUS);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
    uint32_t mask = IPS_DST_NAT, zero = 0;
    return bitwise_and(r, &mask, sizeof(mask)) && cmp(r, NFT_CMP_NEQ, &zero, sizeof(zero));
}

/* "jump <chain>" / "return": [ immediate reg 0 ... ] */
static bool verdict(struct nftnl_rule *r, int code, const char *chain)
{
    struct nftnl_expr *e = expr_add(r, "immediate");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)code);
    return !chain || nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain) >= 0;
}

/* [ immediate reg <reg> <data> ] */
static bool immediate(struct nftnl_rule *r, uint32_t reg, const void *data, uint32_t len)
{
    struct nftnl_expr *e = expr_add(r, "immediate");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, reg);
    return nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, data, len) >= 0;
}

/* "masquerade": [ masq ] */
static bool masquerade(struct nftnl_rule *r) { return expr_add(r, "masq") != NULL; }

/* "dnat ip|ip6 to <addr>:<port>": the address in reg 1, the port in reg 2,
 * [ nat dnat ip|ip6 addr_min reg 1 proto_min reg 2 flags 0x2 ] */
static bool dnat(struct nftnl_rule *r, int family, const uint8_t addr[16], uint16_t port)
{
    uint16_t nport = htons(port);
    if (!immediate(r, NFT_REG_1, addr, family == AF_INET ? 4 : 16) ||
        !immediate(r, NFT_REG_2, &nport, sizeof(nport)))
        return false;
    struct nftnl_expr *e = expr_add(r, "nat");
    if (!e)
        return false;
    nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_TYPE, NFT_NAT_DNAT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FAMILY, family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_PROTO_MIN, NFT_REG_2);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
    return true;
}

/* "comment <text>": the userdata TLV nft writes (type, length, the text
 * with its NUL). */
static bool comment(struct nftnl_rule *r, const char *text)
{
    uint8_t ud[2 + 255];
    size_t n = strlen(text) + 1;
    if (n > 255)
        return false;
    ud[0] = NFTNL_UDATA_RULE_COMMENT;
    ud[1] = (uint8_t)n;
    memcpy(ud + 2, text, n);
    return nftnl_rule_set_data(r, NFTNL_RULE_USERDATA, ud, (uint32_t)(2 + n)) >= 0;
}

/* "add rule inet kinglet <chain> ..." (appended). */
static _printf_(3, 4) int rule_msg(struct net_nft_batch *b, struct nftnl_rule *r, const char *fmt,
                                   ...)
{
    struct nlmsghdr *nlh = msg_room(b);
    if (!nlh)
        return -ENOMEM;
    nftnl_nlmsg_build_hdr((char *)nlh, NFT_MSG_NEWRULE, NFPROTO_INET, NLM_F_CREATE | NLM_F_APPEND,
                          0);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    char what[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    msg_add(b, nlh, "%s", what);
    return 0;
}

/* ---- the base chains ---------------------------------------------------- */

/* "add rule ... <chain> fib daddr type local jump hostports" */
static int rule_dispatch(struct net_nft_batch *b, const char *chain)
{
    _cleanup_(rule_freep) struct nftnl_rule *r = rule_new(chain);
    if (!r || !fib_daddr_local(r) || !verdict(r, NFT_JUMP, HOSTPORTS))
        return -ENOMEM;
    return rule_msg(b, r, "add rule to chain `%s`", chain);
}

/* "add rule ... output ip6 daddr ::1 return" */
static int rule_ip6_loopback_return(struct net_nft_batch *b)
{
    static const uint8_t lo[16] = {[15] = 1};
    _cleanup_(rule_freep) struct nftnl_rule *r = rule_new("output");
    if (!r || !nfproto(r, AF_INET6) || !addr_match(r, AF_INET6, true, lo, 128, false) ||
        !verdict(r, NFT_RETURN, NULL))
        return -ENOMEM;
    return rule_msg(b, r, "add rule to chain `output`");
}

/* "add rule ... postrouting [ct status dnat] <ip> saddr <s> [<ip> daddr [!=]
 * <d>] masquerade"; d NULL for none. */
static int rule_masq(struct net_nft_batch *b, bool ct_dnat, const struct net_subnet *s,
                     const struct net_subnet *d, bool d_neq)
{
    _cleanup_(rule_freep) struct nftnl_rule *r = rule_new("postrouting");
    if (!r || (ct_dnat && !ct_status_dnat(r)) || !nfproto(r, s->family) ||
        !addr_match(r, s->family, false, s->addr, s->prefix, false) ||
        (d && !addr_match(r, d->family, true, d->addr, d->prefix, d_neq)) || !masquerade(r))
        return -ENOMEM;
    return rule_msg(b, r, "add rule to chain `postrouting`");
}

int net_nft_base_build(const struct net_config *cfg, struct net_nft_batch *b)
{
    static const struct net_subnet loopback = {AF_INET, {127}, 8};
    int r;
    if ((r = table_msg(b, true)) < 0 || (r = chain_msg(b, HOSTPORTS, -1, 0)) < 0 ||
        (r = chain_msg(b, "prerouting", NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST)) < 0 ||
        (r = flush_msg(b, "prerouting")) < 0 || (r = rule_dispatch(b, "prerouting")) < 0 ||
        (r = chain_msg(b, "output", NF_INET_LOCAL_OUT, NF_IP_PRI_NAT_DST)) < 0 ||
        (r = flush_msg(b, "output")) < 0)
        return r;
    /* IPv6 has no route_localnet: ::1 cannot be DNATed to a pod, so let such
     * connections be refused instead of black-holed. */
    if ((r = rule_ip6_loopback_return(b)) < 0 || (r = rule_dispatch(b, "output")) < 0 ||
        (r = chain_msg(b, "postrouting", NF_INET_POST_ROUTING, NF_IP_PRI_NAT_SRC)) < 0 ||
        (r = flush_msg(b, "postrouting")) < 0)
        return r;
    /* ct status dnat ip saddr 127.0.0.0/8 masquerade */
    if ((r = rule_masq(b, true, &loopback, NULL, false)) < 0)
        return r;
    for (size_t i = 0; i < cfg->nsubnets; i++) {
        const struct net_subnet *s = &cfg->subnets[i];
        /* ct status dnat <ip> saddr <s> <ip> daddr <s> masquerade (hairpin) */
        if ((r = rule_masq(b, true, s, s, false)) < 0)
            return r;
        /* <ip> saddr <s> <ip> daddr != <s> masquerade (egress) */
        if ((r = rule_masq(b, false, s, s, true)) < 0)
            return r;
    }
    return 0;
}

/* ---- pods' host ports --------------------------------------------------- */

static const char *proto_name(enum net_proto p, uint8_t *ret_num)
{
    switch (p) {
    case NET_PROTO_TCP:
        *ret_num = IPPROTO_TCP;
        return "tcp";
    case NET_PROTO_UDP:
        *ret_num = IPPROTO_UDP;
        return "udp";
    case NET_PROTO_SCTP:
        *ret_num = IPPROTO_SCTP;
        return "sctp";
    }
    return NULL;
}

/* The host address a mapping is bound to: family 0 for every address. */
static int host_ip(const struct net_port_mapping *m, int *ret_family, uint8_t ret[16])
{
    *ret_family = 0;
    if (!m->host_ip || !m->host_ip[0])
        return 0;
    if (net_addr_parse(m->host_ip, ret_family, ret) < 0)
        return -EINVAL;
    static const uint8_t zero[16];
    if (!memcmp(ret, zero, 16))
        *ret_family = 0; /* 0.0.0.0 / :: mean every address, as with kubelet */
    return 0;
}

int net_nft_ports_check(const char *pod_id, const struct net_port_mapping *ports, size_t nports,
                        struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    if (nports > NET_PORTS_MAX)
        return err_set(err, EINVAL, "too many port mappings (%zu, at most %d)", nports,
                       NET_PORTS_MAX);
    for (size_t i = 0; i < nports; i++) {
        const struct net_port_mapping *m = &ports[i];
        uint8_t num, addr[16];
        int fam;
        if (!proto_name(m->protocol, &num))
            return err_set(err, EINVAL, "port mapping %zu: unknown protocol %d", i,
                           (int)m->protocol);
        if (m->host_port == 0)
            continue; /* no host port: nothing to publish */
        if (m->container_port == 0)
            return err_set(err, EINVAL, "port mapping %zu: container port 0", i);
        if (host_ip(m, &fam, addr) < 0)
            return err_set(err, EINVAL, "port mapping %zu: invalid host IP `%.64s`", i, m->host_ip);
    }
    return 0;
}

/* "add rule inet kinglet hostports {ip|ip6 daddr <host ip>|meta nfproto
 * ipv4|ipv6} meta l4proto <proto> th dport <host port> dnat ip|ip6 to
 * <pod>:<port> comment "kinglet:<pod id>"" */
static int rule_dnat(struct net_nft_batch *b, const char *pod_id, const struct net_port_mapping *m,
                     int hfam, const uint8_t haddr[16], int family, const uint8_t addr[16])
{
    char text[sizeof(COMMENT_PREFIX) + NET_POD_ID_MAX];
    snprintf(text, sizeof(text), COMMENT_PREFIX "%s", pod_id);
    uint8_t l4;
    const char *pname = proto_name(m->protocol, &l4);
    uint16_t dport = htons(m->host_port);
    _cleanup_(rule_freep) struct nftnl_rule *r = rule_new(HOSTPORTS);
    if (!r || !nfproto(r, family) ||
        (hfam && !addr_match(r, family, true, haddr, family == AF_INET ? 32 : 128, false)) ||
        !meta_load(r, NFT_META_L4PROTO) || !cmp(r, NFT_CMP_EQ, &l4, 1) ||
        !payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2) || !cmp(r, NFT_CMP_EQ, &dport, 2) ||
        !dnat(r, family, addr, m->container_port) || !comment(r, text))
        return -ENOMEM;
    return rule_msg(b, r, "add host port rule %s %u -> %u (IPv%c)", pname, m->host_port,
                    m->container_port, family == AF_INET ? '4' : '6');
}

int net_nft_pod_build(const char *pod_id, const struct net_nft_dnat *ips, size_t nips,
                      const struct net_port_mapping *ports, size_t nports, struct net_nft_batch *b,
                      size_t *ret_nrules, struct err *err)
{
    *ret_nrules = 0;
    int r = net_nft_ports_check(pod_id, ports, nports, err);
    if (r < 0)
        return r;
    uint8_t addrs[2][16];
    int fams[2];
    if (nips > 2)
        return err_set(err, EINVAL, "more than two pod addresses");
    for (size_t k = 0; k < nips; k++)
        if (net_addr_parse(ips[k].addr, &fams[k], addrs[k]) < 0 || fams[k] != ips[k].family)
            return err_set(err, EINVAL, "invalid pod address `%.64s`", ips[k].addr);
    for (size_t i = 0; i < nports; i++) {
        const struct net_port_mapping *m = &ports[i];
        if (m->host_port == 0)
            continue;
        int hfam;
        uint8_t haddr[16];
        host_ip(m, &hfam, haddr); /* checked above */
        for (size_t k = 0; k < nips; k++) {
            if (hfam && hfam != fams[k])
                continue;
            if (rule_dnat(b, pod_id, m, hfam, haddr, fams[k], addrs[k]) < 0)
                return err_set(err, ENOMEM, "build host port rules");
            ++*ret_nrules;
        }
    }
    return 0;
}

/* ---- listing and deleting a pod's rules --------------------------------- */

/* A NUL-terminated string attribute into out. */
static int attr_str(const struct nlattr *a, char *out, size_t size)
{
    const char *s = mnl_attr_get_payload(a);
    size_t len = mnl_attr_get_payload_len(a);
    size_t n = strnlen(s, len);
    if (n == len || n >= size)
        return -EBADMSG;
    memcpy(out, s, n + 1);
    return 0;
}

/* The comment among the userdata TLVs, as nft shows it: the text up to
 * its first NUL, from the last comment TLV; a comment TLV not ending in a
 * NUL makes nft ignore the userdata. A TLV running past the end is no
 * comment here (nft would read past it). */
static void udata_comment(const uint8_t *p, size_t len, struct net_nft_rule *ret)
{
    const uint8_t *found = NULL;
    while (len >= 2) {
        uint8_t type = p[0], n = p[1];
        if ((size_t)n + 2 > len)
            return;
        if (type == NFTNL_UDATA_RULE_COMMENT) {
            if (n == 0 || p[2 + n - 1] != '\0')
                return;
            found = p + 2;
        }
        p += 2 + n;
        len -= 2 + (size_t)n;
    }
    if (len != 0 || !found)
        return;
    snprintf(ret->comment, sizeof(ret->comment), "%s", (const char *)found);
    ret->has_comment = true;
}

int net_nft_rule_parse(const struct nlmsghdr *nlh, struct net_nft_rule *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (nlh->nlmsg_type != ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE))
        return 0;
    if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(struct nfgenmsg)))
        return -EBADMSG;
    const struct nfgenmsg *g = mnl_nlmsg_get_payload(nlh);
    ret->family = g->nfgen_family;
    const uint8_t *p = (const uint8_t *)g + MNL_ALIGN(sizeof(*g));
    size_t left = nlh->nlmsg_len - MNL_NLMSG_HDRLEN - MNL_ALIGN(sizeof(*g));
    while (left >= sizeof(struct nlattr)) {
        const struct nlattr *a = (const struct nlattr *)p;
        if (a->nla_len < sizeof(*a) || a->nla_len > left)
            return -EBADMSG;
        size_t plen = a->nla_len - sizeof(*a);
        switch (a->nla_type & NLA_TYPE_MASK) {
        case NFTA_RULE_TABLE:
            if (attr_str(a, ret->table, sizeof(ret->table)) < 0)
                return -EBADMSG;
            break;
        case NFTA_RULE_CHAIN:
            if (attr_str(a, ret->chain, sizeof(ret->chain)) < 0)
                return -EBADMSG;
            break;
        case NFTA_RULE_HANDLE: {
            if (plen != sizeof(uint64_t))
                return -EBADMSG;
            uint64_t h;
            memcpy(&h, mnl_attr_get_payload(a), sizeof(h));
            ret->handle = be64toh(h);
            break;
        }
        case NFTA_RULE_USERDATA:
            udata_comment(mnl_attr_get_payload(a), plen, ret);
            break;
        default:
            break;
        }
        size_t step = MNL_ALIGN((size_t)a->nla_len);
        if (step >= left)
            break;
        p += step;
        left -= step;
    }
    return 1;
}

int net_nft_handles_cb(const struct nlmsghdr *nlh, void *data)
{
    struct net_nft_handles *h = data;
    struct net_nft_rule rule;
    int r = net_nft_rule_parse(nlh, &rule);
    if (r <= 0)
        return r;
    char want[sizeof(COMMENT_PREFIX) + NET_POD_ID_MAX];
    snprintf(want, sizeof(want), COMMENT_PREFIX "%s", h->pod_id);
    if (rule.family != NFPROTO_INET || strcmp(rule.table, TABLE) || strcmp(rule.chain, HOSTPORTS) ||
        !rule.has_comment || strcmp(rule.comment, want) || rule.handle == 0)
        return 0;
    if (h->n == h->cap) {
        if (h->cap >= HANDLES_MAX)
            return -E2BIG;
        size_t cap = h->cap ? 2 * h->cap : 16;
        uint64_t *v = reallocarray(h->v, cap, sizeof(*v));
        if (!v)
            return -ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    h->v[h->n++] = rule.handle;
    return 0;
}

int net_nft_pod_delete_build(const uint64_t *handles, size_t n, struct net_nft_batch *b)
{
    for (size_t i = 0; i < n; i++) {
        _cleanup_(rule_freep) struct nftnl_rule *r = rule_new(HOSTPORTS);
        struct nlmsghdr *nlh = r ? msg_room(b) : NULL;
        if (!nlh)
            return -ENOMEM;
        nftnl_rule_set_u64(r, NFTNL_RULE_HANDLE, handles[i]);
        nftnl_nlmsg_build_hdr((char *)nlh, NFT_MSG_DELRULE, NFPROTO_INET, 0, 0);
        nftnl_rule_nlmsg_build_payload(nlh, r);
        msg_add(b, nlh, "delete rule %llu of chain `" HOSTPORTS "`",
                (unsigned long long)handles[i]);
    }
    return 0;
}

/* A request of nf_tables with an nfgenmsg of family inet (built with libmnl
 * alone: reading the table needs no libnftnl). */
static struct nlmsghdr *get_begin(struct nl_batch *b, uint16_t msg, uint16_t flags)
{
    struct nlmsghdr *nlh = nl_batch_begin(b, (NFNL_SUBSYS_NFTABLES << 8) | msg, flags);
    if (!nlh)
        return NULL;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->nfgen_family = NFPROTO_INET;
    g->version = NFNETLINK_V0;
    g->res_id = 0;
    return nlh;
}

int net_nft_list_build(struct nl_batch *b)
{
    struct nlmsghdr *nlh = get_begin(b, NFT_MSG_GETRULE, NLM_F_DUMP);
    if (!nlh)
        return -ENOBUFS;
    nlh->nlmsg_flags &= (uint16_t)~NLM_F_ACK; /* a dump ends with NLMSG_DONE */
    mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, TABLE);
    mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, HOSTPORTS);
    nl_batch_end(b, nlh);
    return 0;
}

/* ---- I/O ---------------------------------------------------------------- */

/* Sends a finished batch; the error names the message the kernel refused. */
static int run(struct net_nft_batch *b, struct err *err)
{
    _cleanup_(nl_closep) struct nl *nl = NULL;
    int r = nl_open_bus(NETLINK_NETFILTER, -1, &nl, err);
    if (r < 0)
        return err_wrap(err, "nftables");
    unsigned idx = 0;
    r = nl_send_batch(nl, b->buf.data, b->buf.len, &idx, err);
    if (r < 0)
        return err_wrap(err, "nftables: %s", idx < b->nmsgs ? b->what[idx] : "transaction");
    return 0;
}

static int base_run(const struct net_config *cfg, const char *pod_id,
                    const struct net_nft_dnat *ips, size_t nips,
                    const struct net_port_mapping *ports, size_t nports, struct err *err)
{
    struct net_nft_batch b = {0};
    size_t nrules = 0;
    int r = net_nft_batch_begin(&b);
    if (r >= 0)
        r = net_nft_base_build(cfg, &b);
    if (r < 0) {
        net_nft_batch_free(&b);
        return err_set(err, ENOMEM, "build base ruleset");
    }
    if (pod_id) {
        r = net_nft_pod_build(pod_id, ips, nips, ports, nports, &b, &nrules, err);
        if (r < 0 || nrules == 0) {
            net_nft_batch_free(&b);
            return r;
        }
    }
    if (net_nft_batch_end(&b) < 0) {
        net_nft_batch_free(&b);
        return err_set(err, ENOMEM, "build base ruleset");
    }
    pthread_mutex_lock(&nft_lock);
    r = run(&b, err);
    pthread_mutex_unlock(&nft_lock);
    net_nft_batch_free(&b);
    return r;
}

int net_nft_base_ensure(const struct net_config *cfg, struct err *err)
{
    int r = base_run(cfg, NULL, NULL, 0, NULL, 0, err);
    return r < 0 ? err_wrap(err, "nftables table `inet " TABLE "`") : 0;
}

int net_nft_pod_add(const struct net_config *cfg, const char *pod_id,
                    const struct net_nft_dnat *ips, size_t nips,
                    const struct net_port_mapping *ports, size_t nports, struct err *err)
{
    /* The base chains go in the same transaction: the table may have been
     * removed behind our back, and then the masquerade must come back too. */
    int r = base_run(cfg, pod_id, ips, nips, ports, nports, err);
    return r < 0 ? err_wrap(err, "host ports") : 0;
}

static int pod_remove_locked(const char *pod_id, struct err *err)
{
    _cleanup_(nl_closep) struct nl *nl = NULL;
    int r = nl_open_bus(NETLINK_NETFILTER, -1, &nl, err);
    if (r < 0)
        return r;
    struct nl_batch *req = malloc(sizeof(*req));
    if (!req)
        return err_set(err, ENOMEM, "nftables listing");
    nl_batch_init(req);
    struct net_nft_handles h = {.pod_id = pod_id};
    r = net_nft_list_build(req);
    if (r >= 0)
        r = nl_dump(nl, req, net_nft_handles_cb, &h, err);
    free(req);
    if (r == -ENOENT) {
        /* No table or chain: no rules of this pod either. */
        err_clear(err);
        r = 0;
    }
    if (r < 0 || h.n == 0) {
        free(h.v);
        return r < 0 ? err_wrap(err, "list chain `" HOSTPORTS "`") : 0;
    }
    struct net_nft_batch b = {0};
    if (net_nft_batch_begin(&b) < 0 || net_nft_pod_delete_build(h.v, h.n, &b) < 0 ||
        net_nft_batch_end(&b) < 0)
        r = err_set(err, ENOMEM, "build rule deletion");
    else
        r = run(&b, err);
    net_nft_batch_free(&b);
    free(h.v);
    return r;
}

int net_nft_pod_remove(const char *pod_id, struct err *err)
{
    pthread_mutex_lock(&nft_lock);
    int r = pod_remove_locked(pod_id, err);
    pthread_mutex_unlock(&nft_lock);
    return r < 0 ? err_wrap(err, "remove host ports") : 0;
}

int net_nft_table_delete(struct err *err)
{
    /* NFT_MSG_DESTROYTABLE needs Linux 6.3; add+delete in one transaction
     * never fails on a missing table and is just as atomic. */
    struct net_nft_batch b = {0};
    int r;
    if (net_nft_batch_begin(&b) < 0 || table_msg(&b, true) < 0 || table_msg(&b, false) < 0 ||
        net_nft_batch_end(&b) < 0) {
        r = err_set(err, ENOMEM, "build table deletion");
    } else {
        pthread_mutex_lock(&nft_lock);
        r = run(&b, err);
        pthread_mutex_unlock(&nft_lock);
    }
    net_nft_batch_free(&b);
    return r < 0 ? err_wrap(err, "delete table `inet " TABLE "`") : 0;
}

int net_nft_table_exists(bool *ret, struct err *err)
{
    _cleanup_(nl_closep) struct nl *nl = NULL;
    int r = nl_open_bus(NETLINK_NETFILTER, -1, &nl, err);
    if (r < 0)
        return err_wrap(err, "nftables");
    struct nl_batch *req = malloc(sizeof(*req));
    if (!req)
        return err_set(err, ENOMEM, "nftables");
    nl_batch_init(req);
    struct nlmsghdr *nlh = get_begin(req, NFT_MSG_GETTABLE, 0);
    mnl_attr_put_strz(nlh, NFTA_TABLE_NAME, TABLE);
    nl_batch_end(req, nlh);
    pthread_mutex_lock(&nft_lock);
    r = nl_transact(nl, req, NULL, NULL, NULL, err);
    pthread_mutex_unlock(&nft_lock);
    free(req);
    if (r == -ENOENT) {
        err_clear(err);
        *ret = false;
        return 0;
    }
    if (r < 0)
        return err_wrap(err, "nftables table `inet " TABLE "`");
    *ret = true;
    return 0;
}
