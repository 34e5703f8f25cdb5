/* libFuzzer target: netlink replies as the kernel would send them to
 * nl_transact (nl_reply_parse), with every RTM_NEWLINK handed to
 * nl_link_parse as net_link_get does and conntrack entries to
 * net_ct_tuple_matches as the UDP flush does. Neither may crash, read out of
 * bounds or leave an unterminated string. */
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/rtnetlink.h>
#include <string.h>

#include "net/internal.h"

static int ct_attr_cb(const struct nlattr *a, void *data)
{
    if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG)
        net_ct_tuple_matches(a, 17, 53);
    return MNL_CB_OK;
}

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
    /* conntrack dump entries, as net_conntrack_flush_dport reads them */
    if ((nlh->nlmsg_type >> 8) == NFNL_SUBSYS_CTNETLINK &&
        mnl_nlmsg_get_payload_len(nlh) >= sizeof(struct nfgenmsg))
        mnl_attr_parse(nlh, sizeof(struct nfgenmsg), ct_attr_cb, NULL);
    if (nlh->nlmsg_type != RTM_NEWLINK)
        return 0;
    struct nl_link_info info;
    if (nl_link_parse(nlh, &info) == 0) {
        if (strnlen(info.name, sizeof(info.name)) >= sizeof(info.name) ||
            strnlen(info.kind, sizeof(info.kind)) >= sizeof(info.kind))
            __builtin_trap();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > NL_RECV_SIZE)
        return 0;
    /* The kernel's datagrams are 4-byte aligned in our receive buffer. */
    static uint32_t buf[NL_RECV_SIZE / 4];
    memcpy(buf, data, size);
    struct nl_result res;
    struct nl_reply_state st = {
        .portid = 4242, .seq_first = 1, .seq_last = NL_BATCH_MSGS, .res = &res};
    memset(&res, 0, sizeof(res));
    nl_reply_parse(buf, size, &st, link_cb, NULL);
    if (strnlen(st.ext_msg, sizeof(st.ext_msg)) >= sizeof(st.ext_msg))
        __builtin_trap();
    for (unsigned i = 0; i < NL_BATCH_MSGS; i++)
        if (strnlen(res.ext_msg[i], sizeof(res.ext_msg[i])) >= sizeof(res.ext_msg[i]))
            __builtin_trap();
    return 0;
}
