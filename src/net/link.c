/* net/link: bridge, veth pairs, bridge ports, link state.
 *
 * The pod's end of a veth pair is created directly inside the pod's network
 * namespace (IFLA_NET_NS_FD in the peer's attributes) with its final name
 * `eth0`, so no rename or move is needed and the host never sees it. The
 * host end is created up and already enslaved to the bridge (IFLA_MASTER);
 * hairpin mode is set through the bridge's port attributes in the same
 * datagram. */
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

/* The room left for attributes of the message being built. */
#define ROOM(b, nlh) ((size_t)(NL_BATCH_MSG_MAX - ((uint8_t *)(nlh) - ((b)->buf + (b)->len))))

static bool ifname_ok(const char *name)
{
    size_t n = name ? strnlen(name, IFNAMSIZ) : 0;
    return n > 0 && n < IFNAMSIZ && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

static struct ifinfomsg *put_ifinfo(struct nlmsghdr *nlh, int family, int ifindex)
{
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = (unsigned char)family;
    ifi->ifi_index = ifindex;
    return ifi;
}

int nl_build_link_get(struct nl_batch *b, const char *ifname)
{
    if (!ifname_ok(ifname))
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_GETLINK, 0);
    if (!nlh)
        return -ENOBUFS;
    put_ifinfo(nlh, AF_UNSPEC, 0);
    mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
    mnl_attr_put_strz(nlh, IFLA_IFNAME, ifname);
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_bridge_create(struct nl_batch *b, const char *name, unsigned mtu)
{
    if (!ifname_ok(name))
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    if (!nlh)
        return -ENOBUFS;
    struct ifinfomsg *ifi = put_ifinfo(nlh, AF_UNSPEC, 0);
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    if (mtu)
        mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    struct nlattr *li = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
    mnl_attr_nest_end(nlh, li);
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_veth_create(struct nl_batch *b, const char *host, const char *peer, int peer_netns_fd,
                         unsigned mtu, int master_ifindex)
{
    if (!ifname_ok(host) || !ifname_ok(peer))
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    if (!nlh)
        return -ENOBUFS;
    struct ifinfomsg *ifi = put_ifinfo(nlh, AF_UNSPEC, 0);
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, host);
    if (mtu)
        mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    if (master_ifindex > 0)
        mnl_attr_put_u32(nlh, IFLA_MASTER, (uint32_t)master_ifindex);
    struct nlattr *li = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
    struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
    /* VETH_INFO_PEER is not a plain nest (an ifinfomsg comes first): the
     * kernel rejects it with NLA_F_NESTED set, which mnl_attr_nest_start adds. */
    struct nlattr *p = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
    p->nla_type = VETH_INFO_PEER;
    /* The peer's attributes follow its own ifinfomsg. */
    struct ifinfomsg *pifi = mnl_nlmsg_get_payload_tail(nlh);
    nlh->nlmsg_len += MNL_ALIGN(sizeof(*pifi));
    memset(pifi, 0, sizeof(*pifi));
    pifi->ifi_family = AF_UNSPEC;
    /* The peer stays down: bringing it up in another namespace at creation
     * fails on recent kernels (ENOTCONN); the pod side brings it up. */
    mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
    if (mtu)
        mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    if (peer_netns_fd >= 0)
        mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t)peer_netns_fd);
    mnl_attr_nest_end(nlh, p);
    mnl_attr_nest_end(nlh, data);
    mnl_attr_nest_end(nlh, li);
    if (nlh->nlmsg_len > ROOM(b, nlh))
        return -ENOBUFS;
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_brport_hairpin(struct nl_batch *b, const char *ifname, bool on)
{
    if (!ifname_ok(ifname))
        return -EINVAL;
    /* An existing link addressed by name; the bridge (its master) applies the
     * slave data as a port change (br_port_slave_changelink). */
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_NEWLINK, 0);
    if (!nlh)
        return -ENOBUFS;
    put_ifinfo(nlh, AF_UNSPEC, 0);
    mnl_attr_put_strz(nlh, IFLA_IFNAME, ifname);
    struct nlattr *li = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_SLAVE_KIND, "bridge");
    struct nlattr *sd = mnl_attr_nest_start(nlh, IFLA_INFO_SLAVE_DATA);
    mnl_attr_put_u8(nlh, IFLA_BRPORT_MODE, on ? 1 : 0);
    mnl_attr_nest_end(nlh, sd);
    mnl_attr_nest_end(nlh, li);
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_link_set(struct nl_batch *b, const char *ifname, bool up, unsigned mtu)
{
    if (!ifname_ok(ifname))
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_NEWLINK, 0);
    if (!nlh)
        return -ENOBUFS;
    struct ifinfomsg *ifi = put_ifinfo(nlh, AF_UNSPEC, 0);
    ifi->ifi_flags = up ? IFF_UP : 0;
    ifi->ifi_change = IFF_UP;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, ifname);
    if (mtu)
        mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    nl_batch_end(b, nlh);
    return 0;
}

int nl_build_link_del(struct nl_batch *b, const char *ifname)
{
    if (!ifname_ok(ifname))
        return -EINVAL;
    struct nlmsghdr *nlh = nl_batch_begin(b, RTM_DELLINK, 0);
    if (!nlh)
        return -ENOBUFS;
    put_ifinfo(nlh, AF_UNSPEC, 0);
    mnl_attr_put_strz(nlh, IFLA_IFNAME, ifname);
    nl_batch_end(b, nlh);
    return 0;
}

struct link_parse {
    struct nl_link_info *info;
    bool bad;
};

static int linkinfo_attr_cb(const struct nlattr *a, void *data)
{
    struct link_parse *lp = data;
    if (mnl_attr_get_type(a) == IFLA_INFO_KIND) {
        if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0) {
            lp->bad = true;
            return MNL_CB_ERROR;
        }
        snprintf(lp->info->kind, sizeof(lp->info->kind), "%s", mnl_attr_get_str(a));
    }
    return MNL_CB_OK;
}

static int link_attr_cb(const struct nlattr *a, void *data)
{
    struct link_parse *lp = data;
    switch (mnl_attr_get_type(a)) {
    case IFLA_IFNAME:
        if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0 ||
            mnl_attr_get_payload_len(a) > IFNAMSIZ) {
            lp->bad = true;
            return MNL_CB_ERROR;
        }
        snprintf(lp->info->name, sizeof(lp->info->name), "%s", mnl_attr_get_str(a));
        break;
    case IFLA_MTU:
        if (mnl_attr_validate(a, MNL_TYPE_U32) < 0) {
            lp->bad = true;
            return MNL_CB_ERROR;
        }
        lp->info->mtu = mnl_attr_get_u32(a);
        break;
    case IFLA_MASTER:
        if (mnl_attr_validate(a, MNL_TYPE_U32) < 0) {
            lp->bad = true;
            return MNL_CB_ERROR;
        }
        lp->info->master = (int)mnl_attr_get_u32(a);
        break;
    case IFLA_LINKINFO:
        if (mnl_attr_validate(a, MNL_TYPE_NESTED) < 0 ||
            mnl_attr_parse_nested(a, linkinfo_attr_cb, lp) < 0) {
            lp->bad = true;
            return MNL_CB_ERROR;
        }
        break;
    default:
        break;
    }
    return MNL_CB_OK;
}

int nl_link_parse(const struct nlmsghdr *nlh, struct nl_link_info *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (nlh->nlmsg_type != RTM_NEWLINK || nlh->nlmsg_len < MNL_NLMSG_HDRLEN ||
        mnl_nlmsg_get_payload_len(nlh) < sizeof(struct ifinfomsg))
        return -EBADMSG;
    const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
    ret->ifindex = ifi->ifi_index;
    ret->flags = ifi->ifi_flags;
    struct link_parse lp = {.info = ret};
    if (mnl_attr_parse(nlh, sizeof(*ifi), link_attr_cb, &lp) < 0 || lp.bad || ret->ifindex <= 0)
        return -EBADMSG;
    return 0;
}

/* ---- operations --------------------------------------------------------- */

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
    if (nlh->nlmsg_type != RTM_NEWLINK)
        return 0;
    return nl_link_parse(nlh, data);
}

int net_link_get(struct nl *nl, const char *name, struct nl_link_info *ret, struct err *err)
{
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_link_get(&b, name) < 0)
        return err_set(err, EINVAL, "invalid interface name `%s`", name);
    memset(ret, 0, sizeof(*ret));
    int r = nl_transact(nl, &b, link_cb, ret, NULL, err);
    if (r < 0)
        return r == -ENODEV ? r : err_wrap(err, "get link `%s`", name);
    if (ret->ifindex <= 0)
        return err_set(err, EBADMSG, "get link `%s`: no reply", name);
    return 0;
}

int net_bridge_ensure(struct nl *nl, const struct net_config *cfg, int *ret_ifindex,
                      struct err *err)
{
    /* One round trip whether the bridge exists or not: create (exclusive),
     * then read it back. EEXIST on the first request is the common case. */
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_bridge_create(&b, cfg->bridge, cfg->mtu) < 0 ||
        nl_build_link_get(&b, cfg->bridge) < 0)
        return err_set(err, EINVAL, "invalid bridge name `%s`", cfg->bridge);
    struct nl_link_info info = {0};
    struct nl_result res;
    int r = nl_transact(nl, &b, link_cb, &info, &res, err);
    if (r < 0)
        return err_wrap(err, "bridge `%s`", cfg->bridge);
    bool created = res.errors[0] == 0;
    if (res.errors[0] != -EEXIST && (r = nl_result_err(&res, 0, err, "create")) < 0)
        return err_wrap(err, "bridge `%s`", cfg->bridge);
    if ((r = nl_result_err(&res, 1, err, "get")) < 0)
        return err_wrap(err, "bridge `%s`", cfg->bridge);
    if (info.ifindex <= 0)
        return err_set(err, EBADMSG, "bridge `%s`: no link in reply", cfg->bridge);
    if (strcmp(info.kind, "bridge") != 0)
        return err_set(err, EEXIST, "`%s` exists and is not a bridge (%s)", cfg->bridge,
                       info.kind[0] ? info.kind : "no kind");

    /* Gateway addresses (create-or-replace, so this is idempotent) and up. */
    nl_batch_init(&b);
    for (size_t i = 0; i < cfg->nsubnets; i++) {
        const struct net_subnet *s = &cfg->subnets[i];
        uint8_t gw[16];
        net_subnet_gateway(s, gw);
        nl_build_addr(&b, true, s->family, info.ifindex, gw, s->prefix);
    }
    if (!created || !(info.flags & IFF_UP))
        nl_build_link_set(&b, cfg->bridge, true, 0);
    r = nl_transact(nl, &b, NULL, NULL, NULL, err);
    if (r < 0)
        return err_wrap(err, "configure bridge `%s`", cfg->bridge);
    *ret_ifindex = info.ifindex;
    return 0;
}

int net_veth_create(struct nl *nl, const char *host, int peer_netns_fd, unsigned mtu,
                    int bridge_ifindex, struct err *err)
{
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_veth_create(&b, host, NET_POD_IFNAME, peer_netns_fd, mtu, bridge_ifindex) < 0 ||
        nl_build_brport_hairpin(&b, host, true) < 0)
        return err_set(err, EINVAL, "invalid veth name `%s`", host);
    struct nl_result res;
    int r = nl_transact(nl, &b, NULL, NULL, &res, err);
    if (r < 0)
        return err_wrap(err, "create veth `%s`", host);
    if ((r = nl_result_err(&res, 0, err, "create veth")) < 0)
        return err_wrap(err, "`%s`", host);
    if ((r = nl_result_err(&res, 1, err, "hairpin mode")) < 0) {
        struct err ignored;
        net_link_delete(nl, host, &ignored);
        return err_wrap(err, "veth `%s`", host);
    }
    return 0;
}

int net_link_delete(struct nl *nl, const char *name, struct err *err)
{
    struct nl_batch b;
    nl_batch_init(&b);
    if (nl_build_link_del(&b, name) < 0)
        return err_set(err, EINVAL, "invalid interface name `%s`", name);
    int r = nl_transact(nl, &b, NULL, NULL, NULL, err);
    if (r == -ENODEV) {
        err_clear(err);
        return 0;
    }
    if (r < 0)
        return err_wrap(err, "delete link `%s`", name);
    return 0;
}
