/* net/route: routes (RTM_NEWROUTE/RTM_DELROUTE); the pod's default route
 * goes via the bridge's gateway address out of eth0. */
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

int nl_build_route_default(struct nl_batch *b, bool add, int family, int ifindex, const uint8_t *gw)
{
    if (!nl_family_ok(family, 0) || ifindex <= 0)
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, add ? RTM_NEWROUTE : RTM_DELROUTE,
                                          add ? NLM_F_CREATE | NLM_F_REPLACE : 0);
    if (!nlh)
        return -ENOBUFS;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = (unsigned char)family;
    rtm->rtm_dst_len = 0;
    rtm->rtm_table = RT_TABLE_MAIN;
    rtm->rtm_protocol = RTPROT_BOOT;
    rtm->rtm_scope = RT_SCOPE_UNIVERSE;
    rtm->rtm_type = RTN_UNICAST;
    mnl_attr_put_u32(nlh, RTA_TABLE, RT_TABLE_MAIN);
    mnl_attr_put(nlh, RTA_GATEWAY, family == AF_INET ? 4 : 16, gw);
    mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)ifindex);
    nl_batch_end(b, nlh);
    return 0;
}

/* ---- the uplink MTU ------------------------------------------------------ */

int nl_build_route_dump(struct nl_batch *b)
{
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_GETROUTE, NLM_F_DUMP);
    if (!nlh)
        return -ENOBUFS;
    nlh->nlmsg_flags &= (uint16_t)~NLM_F_ACK; /* a dump ends with NLMSG_DONE */
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = AF_UNSPEC;
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_link_dump(struct nl_batch *b)
{
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_GETLINK, NLM_F_DUMP);
    if (!nlh)
        return -ENOBUFS;
    nlh->nlmsg_flags &= (uint16_t)~NLM_F_ACK;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
    nl_batch_end(b, nlh);
    return 0;
}

struct route_parse {
    struct net_default_route *r;
    uint32_t table;
    bool bad;
};

static void add_oif(struct net_default_route *r, int ifindex)
{
    if (ifindex <= 0 || r->noifs >= ARRAY_SIZE(r->oifs))
        return;
    for (size_t i = 0; i < r->noifs; i++)
        if (r->oifs[i] == ifindex)
            return;
    r->oifs[r->noifs++] = ifindex;
}

static int metrics_cb(const struct nlattr *a, void *data)
{
    struct route_parse *rp = data;
    if (mnl_attr_get_type(a) == RTAX_MTU) {
        if (mnl_attr_validate(a, MNL_TYPE_U32) < 0) {
            rp->bad = true;
            return MNL_CB_ERROR;
        }
        rp->r->mtu = mnl_attr_get_u32(a);
    }
    return MNL_CB_OK;
}

static int route_attr_cb(const struct nlattr *a, void *data)
{
    struct route_parse *rp = data;
    switch (mnl_attr_get_type(a)) {
    case RTA_TABLE:
        if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
            goto bad;
        rp->table = mnl_attr_get_u32(a);
        break;
    case RTA_OIF:
        if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
            goto bad;
        add_oif(rp->r, (int)mnl_attr_get_u32(a));
        break;
    case RTA_METRICS:
        if (mnl_attr_validate(a, MNL_TYPE_NESTED) < 0 ||
            mnl_attr_parse_nested(a, metrics_cb, rp) < 0)
            goto bad;
        break;
    case RTA_MULTIPATH: {
        /* struct rtnexthop records, each followed by its attributes */
        const uint8_t *p = mnl_attr_get_payload(a);
        size_t left = mnl_attr_get_payload_len(a);
        while (left >= sizeof(struct rtnexthop)) {
            const struct rtnexthop *nh = (const void *)p;
            if (nh->rtnh_len < sizeof(*nh) || nh->rtnh_len > left)
                goto bad;
            add_oif(rp->r, nh->rtnh_ifindex);
            size_t step = RTNH_ALIGN(nh->rtnh_len);
            if (step > left)
                break;
            p += step;
            left -= step;
        }
        break;
    }
    default:
        break;
    }
    return MNL_CB_OK;
bad:
    rp->bad = true;
    return MNL_CB_ERROR;
}

int net_route_default_parse(const struct nlmsghdr *nlh, struct net_default_route *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (nlh->nlmsg_type != RTM_NEWROUTE || nlh->nlmsg_len < MNL_NLMSG_HDRLEN ||
        mnl_nlmsg_get_payload_len(nlh) < sizeof(struct rtmsg))
        return -EBADMSG;
    const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
    struct route_parse rp = {.r = ret, .table = rtm->rtm_table};
    if (mnl_attr_parse(nlh, sizeof(*rtm), route_attr_cb, &rp) < 0 || rp.bad)
        return -EBADMSG;
    if (rtm->rtm_dst_len != 0 || rtm->rtm_type != RTN_UNICAST || rp.table != RT_TABLE_MAIN ||
        (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6) || ret->noifs == 0)
        return 0;
    ret->family = rtm->rtm_family;
    return 1;
}

struct uplink_ctx {
    struct net_default_route routes[8];
    size_t nroutes;
    struct nl_link_info links[8]; /* those of the routes' interfaces */
};

static int route_dump_cb(const struct nlmsghdr *nlh, void *data)
{
    struct uplink_ctx *c = data;
    if (nlh->nlmsg_type != RTM_NEWROUTE)
        return 0;
    struct net_default_route r;
    int k = net_route_default_parse(nlh, &r);
    if (k < 0)
        return k;
    if (k > 0 && c->nroutes < ARRAY_SIZE(c->routes))
        c->routes[c->nroutes++] = r;
    return 0;
}

static int link_dump_cb(const struct nlmsghdr *nlh, void *data)
{
    struct uplink_ctx *c = data;
    if (nlh->nlmsg_type != RTM_NEWLINK)
        return 0;
    struct nl_link_info l;
    if (nl_link_parse(nlh, &l) < 0)
        return 0; /* a link we cannot read is not an uplink we can use */
    bool wanted = false;
    for (size_t r = 0; r < c->nroutes; r++)
        for (size_t k = 0; k < c->routes[r].noifs; k++)
            wanted |= c->routes[r].oifs[k] == l.ifindex;
    if (!wanted)
        return 0;
    for (size_t i = 0; i < ARRAY_SIZE(c->links); i++)
        if (!c->links[i].ifindex) {
            c->links[i] = l;
            break;
        }
    return 0;
}

int net_uplink_mtu(const char *skip_ifname, unsigned *ret_mtu, char *ret_ifname, size_t ifname_size,
                   struct err *err)
{
    struct nl *nl _cleanup_(nl_closep) = NULL;
    int r = nl_open(-1, &nl, err);
    if (r < 0)
        return r;
    struct uplink_ctx c = {0};
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_route_dump(&b) < 0)
        return err_set(err, ENOBUFS, "route dump");
    if ((r = nl_dump(nl, &b, route_dump_cb, &c, err)) < 0)
        return err_wrap(err, "list routes");
    if (!c.nroutes)
        return err_set(err, ENOENT, "no default route");
    nl_batch_init(&b);
    if (nl_build_link_dump(&b) < 0)
        return err_set(err, ENOBUFS, "link dump");
    if ((r = nl_dump(nl, &b, link_dump_cb, &c, err)) < 0)
        return err_wrap(err, "list links");
    /* The lowest MTU a packet leaving the node by a default route can
     * meet: the interface's, or the route's own when it sets one. */
    unsigned best = 0;
    const char *name = NULL;
    for (size_t i = 0; i < c.nroutes; i++)
        for (size_t k = 0; k < c.routes[i].noifs; k++)
            for (size_t l = 0; l < ARRAY_SIZE(c.links); l++) {
                const struct nl_link_info *li = &c.links[l];
                if (li->ifindex != c.routes[i].oifs[k] || !li->mtu ||
                    (skip_ifname && strcmp(li->name, skip_ifname) == 0))
                    continue;
                unsigned m = li->mtu;
                if (c.routes[i].mtu && c.routes[i].mtu < m)
                    m = c.routes[i].mtu;
                if (!best || m < best) {
                    best = m;
                    name = li->name;
                }
            }
    if (!best)
        return err_set(err, ENOENT, "no interface holds a default route");
    *ret_mtu = best;
    if (ret_ifname)
        snprintf(ret_ifname, ifname_size, "%s", name);
    return 0;
}
