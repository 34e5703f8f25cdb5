/* net/conntrack: forget stale UDP flows to a new host port.
 *
 * A UDP client that sent to <node>:<port> before the port was published
 * has a conntrack entry without DNAT; as long as it keeps sending, its
 * packets follow that entry and never reach the pod. Like the CNI portmap
 * plugin, setup deletes the UDP entries whose original destination port is
 * a newly published host port. The entries are dumped with a kernel-side
 * filter (protocol and destination port, kernel >= 5.8), checked again
 * here, and deleted by their original tuple in batches. */
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

/* Kernel-internal filter bits (net/netfilter/nf_internals.h). */
#define CT_FILTER_PROTO_NUM      (1u << 3)
#define CT_FILTER_PROTO_DST_PORT (1u << 5)

#define CT_FLUSH_MAX 4096 /* entries deleted per call */
#define CT_TUPLE_MAX 256

static struct nlmsghdr *ct_begin(struct nl_batch *b, uint16_t msg, uint16_t flags, int family)
{
    struct nlmsghdr *nlh = nl_batch_begin(b, (NFNL_SUBSYS_CTNETLINK << 8) | msg, flags);
    if (!nlh)
        return NULL;
    struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
    nfg->nfgen_family = (uint8_t)family;
    nfg->version = NFNETLINK_V0;
    nfg->res_id = 0;
    return nlh;
}

int nl_build_ct_dump(struct nl_batch *b, int family, uint8_t l4proto, uint16_t dport)
{
    if (family != AF_INET && family != AF_INET6)
        return -EINVAL;
    struct nlmsghdr *nlh = ct_begin(b, IPCTNL_MSG_CT_GET, NLM_F_DUMP, family);
    if (!nlh)
        return -ENOBUFS;
    nlh->nlmsg_flags &= (uint16_t)~NLM_F_ACK; /* a dump ends with NLMSG_DONE */
    struct nlattr *t = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
    struct nlattr *p = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
    mnl_attr_put_u8(nlh, CTA_PROTO_NUM, l4proto);
    mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(dport));
    mnl_attr_nest_end(nlh, p);
    mnl_attr_nest_end(nlh, t);
    struct nlattr *f = mnl_attr_nest_start(nlh, CTA_FILTER);
    mnl_attr_put_u32(nlh, CTA_FILTER_ORIG_FLAGS, CT_FILTER_PROTO_NUM | CT_FILTER_PROTO_DST_PORT);
    mnl_attr_put_u32(nlh, CTA_FILTER_REPLY_FLAGS, 0);
    mnl_attr_nest_end(nlh, f);
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_ct_delete(struct nl_batch *b, int family, const void *tuple, size_t len)
{
    if ((family != AF_INET && family != AF_INET6) || len > CT_TUPLE_MAX)
        return -EINVAL;
    struct nlmsghdr *nlh = ct_begin(b, IPCTNL_MSG_CT_DELETE, 0, family);
    if (!nlh)
        return -ENOBUFS;
    mnl_attr_put(nlh, CTA_TUPLE_ORIG | NLA_F_NESTED, len, tuple);
    nl_batch_end(b, nlh);
    return 0;
}

struct ct_match {
    uint8_t l4proto;
    uint16_t dport;
    bool proto_ok, port_ok, bad;
};

static int proto_cb(const struct nlattr *a, void *data)
{
    struct ct_match *m = data;
    switch (mnl_attr_get_type(a)) {
    case CTA_PROTO_NUM:
        if (mnl_attr_validate(a, MNL_TYPE_U8) < 0)
            return m->bad = true, MNL_CB_ERROR;
        m->proto_ok = mnl_attr_get_u8(a) == m->l4proto;
        break;
    case CTA_PROTO_DST_PORT:
        if (mnl_attr_validate(a, MNL_TYPE_U16) < 0)
            return m->bad = true, MNL_CB_ERROR;
        m->port_ok = ntohs(mnl_attr_get_u16(a)) == m->dport;
        break;
    }
    return MNL_CB_OK;
}

static int tuple_cb(const struct nlattr *a, void *data)
{
    struct ct_match *m = data;
    if (mnl_attr_get_type(a) == CTA_TUPLE_PROTO) {
        if (mnl_attr_validate(a, MNL_TYPE_NESTED) < 0 || mnl_attr_parse_nested(a, proto_cb, m) < 0)
            return m->bad = true, MNL_CB_ERROR;
    }
    return MNL_CB_OK;
}

/* Whether a CTA_TUPLE_ORIG attribute has this protocol and destination port;
 * -EBADMSG when malformed. */
int net_ct_tuple_matches(const struct nlattr *tuple, uint8_t l4proto, uint16_t dport)
{
    struct ct_match m = {.l4proto = l4proto, .dport = dport};
    if (mnl_attr_validate(tuple, MNL_TYPE_NESTED) < 0 ||
        mnl_attr_parse_nested(tuple, tuple_cb, &m) < 0 || m.bad)
        return -EBADMSG;
    return m.proto_ok && m.port_ok;
}

struct ct_list {
    uint8_t l4proto;
    uint16_t dport;
    uint8_t (*tuples)[CT_TUPLE_MAX];
    uint16_t *lens;
    size_t n;
};

static int entry_attr_cb(const struct nlattr *a, void *data)
{
    const struct nlattr **orig = data;
    if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG)
        *orig = a;
    return MNL_CB_OK;
}

static int dump_cb(const struct nlmsghdr *nlh, void *data)
{
    struct ct_list *l = data;
    if ((nlh->nlmsg_type >> 8) != NFNL_SUBSYS_CTNETLINK || l->n >= CT_FLUSH_MAX)
        return 0;
    if (mnl_nlmsg_get_payload_len(nlh) < sizeof(struct nfgenmsg))
        return -EBADMSG;
    const struct nlattr *orig = NULL;
    if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), entry_attr_cb, &orig) < 0 || !orig)
        return 0;
    size_t len = mnl_attr_get_payload_len(orig);
    if (len > CT_TUPLE_MAX || net_ct_tuple_matches(orig, l->l4proto, l->dport) != 1)
        return 0;
    memcpy(l->tuples[l->n], mnl_attr_get_payload(orig), len);
    l->lens[l->n] = (uint16_t)len;
    l->n++;
    return 0;
}

int net_conntrack_flush_dport(int family, uint8_t l4proto, uint16_t dport, struct err *err)
{
    _cleanup_(nl_closep) struct nl *nl = NULL;
    int r = nl_open_bus(NETLINK_NETFILTER, -1, &nl, err);
    if (r < 0)
        return r;
    struct ct_list l = {.l4proto = l4proto, .dport = dport};
    _cleanup_free_ uint8_t(*tuples)[CT_TUPLE_MAX] = calloc(CT_FLUSH_MAX, CT_TUPLE_MAX);
    _cleanup_free_ uint16_t *lens = calloc(CT_FLUSH_MAX, sizeof(uint16_t));
    if (!tuples || !lens)
        return err_set(err, ENOMEM, "conntrack");
    l.tuples = tuples;
    l.lens = lens;
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_ct_dump(&b, family, l4proto, dport) < 0)
        return err_set(err, EINVAL, "conntrack dump");
    r = nl_dump(nl, &b, dump_cb, &l, err);
    if (r < 0)
        return err_wrap(err, "list conntrack entries for port %u", dport);
    for (size_t i = 0; i < l.n;) {
        nl_batch_init(&b);
        while (i < l.n && nl_build_ct_delete(&b, family, l.tuples[i], l.lens[i]) == 0)
            i++;
        struct nl_result res;
        r = nl_transact(nl, &b, NULL, NULL, &res, err);
        if (r < 0)
            return err_wrap(err, "delete conntrack entries for port %u", dport);
        for (unsigned k = 0; k < b.nmsgs; k++)
            if (res.errors[k] && res.errors[k] != -ENOENT) /* gone meanwhile: fine */
                return nl_result_err(&res, k, err, "delete conntrack entry");
    }
    return 0;
}
