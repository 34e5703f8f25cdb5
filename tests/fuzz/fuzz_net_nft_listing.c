/* net/nft: the kernel's listing of kinglet's hostports chain (NFT_MSG_NEWRULE
 * messages of a dump), read to delete one pod's rules. The input's first
 * byte picks the pod, the rest is one datagram as received. It goes through
 * the daemon's own path (nl_reply_parse with net_nft_handles_cb), then the
 * deletion is built from what was found.
 *
 * Oracle, for a listing that parses: libnftnl reads the same rule
 * attributes (table, chain, handle, userdata, copied into a clean message
 * so that libnftnl never sees the rest) and its userdata parser finds the
 * comment as nft does; a rule is the pod's exactly when that says so, in
 * listing order. The deletion holds one DELRULE of the hostports chain per
 * handle found, in that order. */
#include <arpa/inet.h>
#include <endian.h>
#include <libmnl/libmnl.h>
#include <libnftnl/rule.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RULES 4096

struct comment_state {
    const char *text;
    bool bad;
};

/* nft's reading of a rule's userdata (src/netlink.c parse_rule_udata_cb),
 * with a bounds check nft leaves out. */
static int udata_cb(const struct nftnl_udata *attr, void *data)
{
    struct comment_state *c = data;
    const uint8_t *v = nftnl_udata_get(attr);
    uint8_t len = nftnl_udata_len(attr);
    if (nftnl_udata_type(attr) == NFTNL_UDATA_RULE_COMMENT) {
        if (len == 0 || v[len - 1] != '\0') {
            c->bad = true;
            return -1;
        }
        c->text = (const char *)v;
    }
    return 0;
}

static bool udata_sane(const uint8_t *p, uint32_t len)
{
    while (len >= 2) {
        if ((uint32_t)p[1] + 2 > len)
            return false;
        len -= 2u + p[1];
        p += 2u + p[1];
    }
    return len == 0;
}

/* Whether the rule message is the pod's, by libnftnl. */
static bool oracle_match(const struct nlmsghdr *nlh, const char *want, uint64_t *ret_handle)
{
    static uint8_t clean[1 << 17];
    struct nlmsghdr *c = mnl_nlmsg_put_header(clean);
    c->nlmsg_type = nlh->nlmsg_type;
    const struct nfgenmsg *g = mnl_nlmsg_get_payload(nlh);
    struct nfgenmsg *cg = mnl_nlmsg_put_extra_header(c, sizeof(*cg));
    *cg = *g;
    const struct nlattr *a;
    mnl_attr_for_each(a, nlh, sizeof(*g))
    {
        uint16_t t = mnl_attr_get_type(a);
        /* libnftnl exit()s on an attribute of the wrong shape ("kernel ABI
         * is broken"): checked first as it checks them, and such a rule is
         * nobody's, as nft would refuse it */
        if ((t == NFTA_RULE_TABLE || t == NFTA_RULE_CHAIN) &&
            mnl_attr_validate(a, MNL_TYPE_STRING) < 0)
            return false;
        if (t == NFTA_RULE_HANDLE && mnl_attr_validate(a, MNL_TYPE_U64) < 0)
            return false;
        if (t == NFTA_RULE_TABLE || t == NFTA_RULE_CHAIN || t == NFTA_RULE_HANDLE ||
            t == NFTA_RULE_USERDATA)
            mnl_attr_put(c, t, mnl_attr_get_payload_len(a), mnl_attr_get_payload(a));
    }
    struct nftnl_rule *r = nftnl_rule_alloc();
    if (!r)
        abort();
    bool match = false;
    if (nftnl_rule_nlmsg_parse(c, r) == 0 && g->nfgen_family == NFPROTO_INET &&
        nftnl_rule_is_set(r, NFTNL_RULE_TABLE) && nftnl_rule_is_set(r, NFTNL_RULE_CHAIN) &&
        nftnl_rule_is_set(r, NFTNL_RULE_HANDLE) && nftnl_rule_is_set(r, NFTNL_RULE_USERDATA) &&
        !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), NET_NFT_TABLE) &&
        !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "hostports") &&
        nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE) != 0) {
        uint32_t ulen = 0;
        const void *ud = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &ulen);
        struct comment_state cs = {0};
        if (udata_sane(ud, ulen) && nftnl_udata_parse(ud, ulen, udata_cb, &cs) >= 0 && !cs.bad &&
            cs.text && !strcmp(cs.text, want)) {
            match = true;
            *ret_handle = nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE);
        }
    }
    nftnl_rule_free(r);
    return match;
}

struct oracle {
    const char *want;
    uint64_t handles[MAX_RULES];
    size_t n;
};

static int oracle_cb(const struct nlmsghdr *nlh, void *data)
{
    struct oracle *o = data;
    if (nlh->nlmsg_type != ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE))
        return 0;
    uint64_t h;
    if (o->n < MAX_RULES && oracle_match(nlh, o->want, &h))
        o->handles[o->n++] = h;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const pods[] = {
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "p", "a.b-c_d"};
    if (size < 1 || size > 1 << 16)
        return 0;
    const char *pod = pods[data[0] % 3];
    /* aligned, as a receive buffer is */
    uint8_t *buf = malloc(size - 1 ? size - 1 : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    struct nl_reply_state st = {.seq_last = UINT32_MAX};
    struct net_nft_handles h = {.pod_id = pod};
    int r = nl_reply_parse(buf, size - 1, &st, net_nft_handles_cb, &h);
    if (r == 0) {
        static struct oracle o;
        char want[128];
        snprintf(want, sizeof(want), "kinglet:%s", pod);
        o.want = want;
        o.n = 0;
        struct nl_reply_state st2 = {.seq_last = UINT32_MAX};
        if (nl_reply_parse(buf, size - 1, &st2, oracle_cb, &o) != 0)
            __builtin_trap(); /* the same framing parsed twice */
        if (o.n != h.n)
            __builtin_trap();
        for (size_t i = 0; i < h.n; i++)
            if (h.v[i] != o.handles[i])
                __builtin_trap();
        struct net_nft_batch b = {0};
        if (net_nft_pod_delete_build(h.v, h.n, &b) < 0 || b.nmsgs != h.n)
            __builtin_trap();
        for (unsigned i = 0; i < b.nmsgs; i++) {
            const struct nlmsghdr *m = net_nft_batch_msg(&b, i);
            struct nftnl_rule *rule = nftnl_rule_alloc();
            if (!rule || m->nlmsg_type != ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELRULE) ||
                nftnl_rule_nlmsg_parse(m, rule) < 0 ||
                strcmp(nftnl_rule_get_str(rule, NFTNL_RULE_CHAIN), "hostports") ||
                strcmp(nftnl_rule_get_str(rule, NFTNL_RULE_TABLE), NET_NFT_TABLE) ||
                nftnl_rule_get_u64(rule, NFTNL_RULE_HANDLE) != h.v[i])
                __builtin_trap();
            nftnl_rule_free(rule);
        }
        net_nft_batch_free(&b);
    }
    free(h.v);
    free(buf);
    return 0;
}
