/* net/addr: interface addresses (RTM_NEWADDR/RTM_DELADDR). Adds are
 * create-or-replace so that re-running a setup step is harmless; IPv6
 * addresses skip duplicate address detection (they are leased, and must be
 * usable at once). */
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

int nl_build_addr(struct nl_batch *b, bool add, int family, int ifindex, const uint8_t *addr,
                  unsigned prefix)
{
    if (!nl_family_ok(family, prefix) || ifindex <= 0)
        return -EINVAL;
    struct nlmsghdr *nlh =
        nl_batch_begin(b, add ? RTM_NEWADDR : RTM_DELADDR, add ? NLM_F_CREATE | NLM_F_REPLACE : 0);
    if (!nlh)
        return -ENOBUFS;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = (unsigned char)family;
    ifa->ifa_prefixlen = (unsigned char)prefix;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = (unsigned)ifindex;
    size_t alen = family == AF_INET ? 4 : 16;
    mnl_attr_put(nlh, IFA_LOCAL, alen, addr);
    mnl_attr_put(nlh, IFA_ADDRESS, alen, addr);
    if (family == AF_INET6) {
        /* No duplicate address detection: the address is ours by lease and
         * must be usable at once, not "tentative" for a second. */
        ifa->ifa_flags = IFA_F_NODAD;
        mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
    }
    nl_batch_end(b, nlh);
    return 0;
}
