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
