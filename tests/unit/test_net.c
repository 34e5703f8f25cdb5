/* Unit tests for src/net: subnet arithmetic, IPAM (in a temporary directory,
 * including concurrent allocators), netlink message building and reply
 * parsing, nftables messages and rule listings. No network configuration is touched. */
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/rule.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/veth.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

#include "net/internal.h"
#include "net/net.h"

static void addr_text(int family, const uint8_t a[16], char *buf)
{
    net_addr_format(family, a, buf, INET6_ADDRSTRLEN);
}

/* ---- subnets ------------------------------------------------------------ */

static void test_subnet_parse(void **state)
{
    struct net_subnet s;
    char buf[NET_SUBNET_STRLEN];
    assert_int_equal(net_subnet_parse("10.88.7.9/16", &s), 0);
    assert_int_equal(s.family, AF_INET);
    assert_int_equal(s.prefix, 16);
    net_subnet_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "10.88.0.0/16");
    assert_int_equal(net_subnet_parse("fd00:88::17/64", &s), 0);
    assert_int_equal(s.family, AF_INET6);
    net_subnet_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "fd00:88::/64");

    const char *bad[] = {"",
                         "10.0.0.0",
                         "10.0.0.0/",
                         "10.0.0.0/31",
                         "10.0.0.0/7",
                         "10.0.0.0/33",
                         "10.0.0.0/1a",
                         "10.0.0.0/-1",
                         "300.0.0.0/8",
                         "fd00::/127",
                         "fd00::/0",
                         "hello/8",
                         "10.0.0.0/0016",
                         "10.0.0.0/16/2"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (net_subnet_parse(bad[i], &s) != -EINVAL)
            fail_msg("`%s` was accepted", bad[i]);
    }
    assert_int_equal(net_subnet_parse(NULL, &s), -EINVAL);
}

/* The one pod CIDR grammar (flag, config file, UpdateRuntimeConfig). */
static void test_pod_cidrs_parse(void **state)
{
    struct net_subnet s[2];
    size_t n = 0;
    struct err e = {0};
    const char *good[] = {
        "10.88.0.0/16", "10.88.0.0/16,fd00::/64",   "fd00::/8", "192.168.1.0/30", "fd00::/126",
        "10.0.0.0/8",   "fd00:5::/64 , 10.5.0.0/16"};
    for (size_t i = 0; i < ARRAY_SIZE(good); i++)
        if (net_pod_cidrs_parse(good[i], s, &n, &e) != 0)
            fail_msg("`%s` refused: %s", good[i], e.msg);
    assert_int_equal(n, 2); /* the IPv6-first one: stored IPv4 first */
    assert_int_equal(s[0].family, AF_INET);
    assert_int_equal(s[1].family, AF_INET6);
    struct {
        const char *in, *msg;
    } bad[] = {
        {"", "empty"},
        {"10.0.0.0", "not a CIDR"},
        {"10.0.0.0/31", "IPv4 /8 to /30"},
        {"10.0.0.0/32", "IPv4 /8 to /30"},
        {"10.0.0.0/7", "IPv4 /8 to /30"},
        {"0.0.0.0/0", "IPv4 /8 to /30"},
        {"10.0.0.0/33", "not a CIDR"},
        {"fd00::/127", "IPv6 /8 to /126"},
        {"::/128", "IPv6 /8 to /126"},
        {"fd00::/129", "not a CIDR"},
        {"10.0.0.0/-1", "not a CIDR"},
        {"x/8", "`x/8`"},
        {"garbage", "`garbage`"},
        {"10.0.0.0/8,", "empty item"},
        {",10.0.0.0/8", "empty item"},
        {"10.0.0.0/8,,fd00::/8", "empty item"},
        {"10.0.0.0/8x", "not a CIDR"},
        {"10.0.0.0/", "not a CIDR"},
        {"10.0.0.0/8,fd00::/64,10.2.0.0/16", "more than two"},
        {"10.5.0.0/16,10.6.0.0/16", "one per family"},
        {"10.0.0.0/0008", "not a CIDR"},
        {"10.1.2.3/16", "host bits set (the network is `10.1.0.0/16`)"},
        {"fd00::1/64", "host bits set (the network is `fd00::/64`)"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        e = (struct err){0};
        if (net_pod_cidrs_parse(bad[i].in, s, &n, &e) != -EINVAL)
            fail_msg("`%s` accepted", bad[i].in);
        if (!strstr(e.msg, bad[i].msg))
            fail_msg("`%s`: `%s` lacks `%s`", bad[i].in, e.msg, bad[i].msg);
    }
    char longs[400];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    assert_int_equal(net_pod_cidrs_parse(longs, NULL, NULL, &e), -EINVAL);
    assert_int_equal(net_pod_cidrs_parse(NULL, NULL, NULL, &e), -EINVAL);
}

static void test_subnet_pool(void **state)
{
    struct net_subnet s;
    uint8_t a[16];
    char t[INET6_ADDRSTRLEN];
    assert_int_equal(net_subnet_parse("10.88.0.0/24", &s), 0);
    net_subnet_gateway(&s, a);
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "10.88.0.1");
    assert_int_equal(net_subnet_pool_size(&s), 253); /* .2 .. .254 */
    net_subnet_pool_addr(&s, 0, a);
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "10.88.0.2");
    net_subnet_pool_addr(&s, 252, a);
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "10.88.0.254");
    assert_int_equal(net_subnet_pool_index(&s, a), 252);
    /* network, gateway, broadcast and outside addresses are not in the pool */
    const char *out[] = {"10.88.0.0", "10.88.0.1", "10.88.0.255", "10.88.1.2", "10.87.0.2"};
    for (size_t i = 0; i < ARRAY_SIZE(out); i++) {
        int fam;
        assert_int_equal(net_addr_parse(out[i], &fam, a), 0);
        if (net_subnet_pool_index(&s, a) != -1)
            fail_msg("%s is in the pool", out[i]);
    }
    assert_int_equal(net_subnet_parse("192.168.5.4/30", &s), 0);
    assert_int_equal(net_subnet_pool_size(&s), 1);
    net_subnet_pool_addr(&s, 0, a);
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "192.168.5.6");

    assert_int_equal(net_subnet_parse("fd00:1::/120", &s), 0);
    assert_int_equal(net_subnet_pool_size(&s), 253);
    net_subnet_gateway(&s, a);
    addr_text(AF_INET6, a, t);
    assert_string_equal(t, "fd00:1::1");
    net_subnet_pool_addr(&s, 0, a);
    addr_text(AF_INET6, a, t);
    assert_string_equal(t, "fd00:1::2");
    assert_int_equal(net_subnet_parse("fd00:1::/64", &s), 0);
    assert_true(net_subnet_pool_size(&s) == UINT64_MAX);
    net_subnet_pool_addr(&s, 0xfffe, a);
    addr_text(AF_INET6, a, t);
    assert_string_equal(t, "fd00:1::1:0");
}

static void test_config(void **state)
{
    struct net_config cfg;
    struct err e = {0};
    net_config_init(&cfg);
    assert_string_equal(cfg.bridge, "kinglet0");
    assert_int_equal(cfg.nsubnets, 1);
    assert_int_equal(net_config_validate(&cfg, &e), 0);
    /* IPv6 first in the text: stored IPv4 first */
    assert_int_equal(net_config_set_subnets(&cfg, "fd00:5::/64, 10.5.0.0/16", &e), 0);
    assert_int_equal(cfg.nsubnets, 2);
    assert_int_equal(cfg.subnets[0].family, AF_INET);
    assert_int_equal(cfg.subnets[1].family, AF_INET6);
    assert_int_equal(net_config_set_subnets(&cfg, "10.5.0.0/16,10.6.0.0/16", &e), -EINVAL);
    assert_non_null(strstr(e.msg, "one per family"));
    assert_int_equal(net_config_set_subnets(&cfg, "10.5.0.0/16,fd00::/64,10.7.0.0/16", &e),
                     -EINVAL);
    assert_int_equal(net_config_set_subnets(&cfg, "bogus", &e), -EINVAL);
    assert_int_equal(net_config_set_subnets(&cfg, "", &e), -EINVAL);
    assert_int_equal(cfg.nsubnets, 2); /* unchanged by failures */
    assert_int_equal(net_config_set_bridge(&cfg, "br-pods", &e), 0);
    assert_int_equal(net_config_set_bridge(&cfg, "much-too-long-name", &e), -EINVAL);
    assert_int_equal(net_config_set_bridge(&cfg, "a/b", &e), -EINVAL);
    assert_int_equal(net_config_set_bridge(&cfg, "..", &e), -EINVAL);
    cfg.mtu = 100;
    assert_int_equal(net_config_validate(&cfg, &e), -EINVAL);
}

static void test_pod_id(void **state)
{
    assert_true(net_pod_id_valid("3f2a9c"));
    assert_true(net_pod_id_valid("pod_a-1.x"));
    assert_false(net_pod_id_valid(""));
    assert_false(net_pod_id_valid(NULL));
    assert_false(net_pod_id_valid(".hidden"));
    assert_false(net_pod_id_valid("../x"));
    assert_false(net_pod_id_valid("a b"));
    assert_false(net_pod_id_valid("a\"b"));
    char longid[NET_POD_ID_MAX + 2];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_false(net_pod_id_valid(longid));
    longid[NET_POD_ID_MAX] = '\0';
    assert_true(net_pod_id_valid(longid));

    char a[IFNAMSIZ], b[IFNAMSIZ], c[IFNAMSIZ];
    net_pod_host_ifname("pod-a", a);
    net_pod_host_ifname("pod-a", b);
    net_pod_host_ifname("pod-b", c);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_int_equal(strlen(a), 14);
    assert_true(str_has_prefix(a, "kl"));
}

/* ---- IPAM --------------------------------------------------------------- */

static char tmpdir[64];

static int ipam_setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-net-ipam-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        rm_rf(p);
    }
    closedir(d);
    rmdir(path);
}

static int ipam_teardown(void **state)
{
    rm_rf(tmpdir);
    return 0;
}

static void test_ipam_alloc_release(void **state)
{
    struct net_subnet s;
    struct err e = {0};
    uint8_t a[16], b[16], c[16];
    char t[INET6_ADDRSTRLEN];
    assert_int_equal(net_subnet_parse("10.1.0.0/29", &s), 0); /* pool .2-.6 */
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "pa", NULL, a, &e), 0);
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "10.1.0.2");
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "pb", NET_IPAM_HOSTPORTS_FLAG, b, &e), 0);
    addr_text(AF_INET, b, t);
    assert_string_equal(t, "10.1.0.3");
    /* release pa: the next allocation goes on round the pool, not back to .2 */
    assert_int_equal(net_ipam_release(tmpdir, "pa", &e), 0);
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "pc", NULL, c, &e), 0);
    addr_text(AF_INET, c, t);
    assert_string_equal(t, "10.1.0.4");
    /* the directory is the state: a "restarted" reader sees the leases */
    struct net_ipam_lease *l = NULL;
    size_t n = 0;
    assert_int_equal(net_ipam_list(tmpdir, &l, &n, &e), 0);
    assert_int_equal(n, 2);
    bool seen_b = false, seen_c = false;
    for (size_t i = 0; i < n; i++) {
        addr_text(l[i].family, l[i].addr, t);
        if (!strcmp(l[i].pod_id, "pb")) {
            seen_b = true;
            assert_string_equal(t, "10.1.0.3");
            assert_true(l[i].hostports);
            assert_int_equal(l[i].prefix, 29);
        } else if (!strcmp(l[i].pod_id, "pc")) {
            seen_c = true;
            assert_string_equal(t, "10.1.0.4");
            assert_false(l[i].hostports);
        }
    }
    free(l);
    assert_true(seen_b && seen_c);
    /* releasing twice and releasing an unknown pod are success */
    assert_int_equal(net_ipam_release(tmpdir, "pb", &e), 0);
    assert_int_equal(net_ipam_release(tmpdir, "pb", &e), 0);
    assert_int_equal(net_ipam_release(tmpdir, "nobody", &e), 0);
    assert_int_equal(net_ipam_release(tmpdir, "../x", &e), -EINVAL);
    /* a temporary lease of a process that died is cleaned up, a live one not */
    char stale[256], live[256];
    snprintf(stale, sizeof(stale), "%s/10.1.0.0-29/.tmp.2147483646.1", tmpdir);
    snprintf(live, sizeof(live), "%s/10.1.0.0-29/.tmp.%d.1", tmpdir, (int)getpid());
    fclose(fopen(stale, "w"));
    fclose(fopen(live, "w"));
    assert_int_equal(net_ipam_list(tmpdir, &l, &n, &e), 0);
    free(l);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    unlink(live);
    /* no temporary file is left next to the leases */
    char sub[256];
    snprintf(sub, sizeof(sub), "%s/10.1.0.0-29", tmpdir);
    DIR *d = opendir(sub);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        if (str_has_prefix(de->d_name, ".tmp"))
            fail_msg("left behind: %s", de->d_name);
    closedir(d);
    assert_int_equal(net_ipam_release_addr(tmpdir, &s, c, &e), 0);
    assert_int_equal(net_ipam_list(tmpdir, &l, &n, &e), 0);
    assert_int_equal(n, 0);
    free(l);
}

static void test_ipam_exhausted(void **state)
{
    struct net_subnet s;
    struct err e = {0};
    uint8_t a[16];
    assert_int_equal(net_subnet_parse("10.2.0.0/29", &s), 0);
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof(id), "p%d", i);
        assert_int_equal(net_ipam_alloc(tmpdir, &s, id, NULL, a, &e), 0);
    }
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "p5", NULL, a, &e), -ENOSPC);
    assert_int_equal(e.code, ENOSPC);
    assert_non_null(strstr(e.msg, "no free address in pod subnet 10.2.0.0/29"));
    /* one released: exactly that one comes back */
    assert_int_equal(net_ipam_release(tmpdir, "p3", &e), 0);
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "p6", NULL, a, &e), 0);
    char t[INET6_ADDRSTRLEN];
    addr_text(AF_INET, a, t);
    assert_string_equal(t, "10.2.0.5");
    assert_int_equal(net_ipam_alloc(tmpdir, &s, "p7", NULL, a, &e), -ENOSPC);
}

#define NTHREADS 50
struct alloc_arg {
    const struct net_subnet *s;
    char id[16];
    uint8_t addr[16];
    int r;
};
static pthread_barrier_t barrier;

static void *alloc_thread(void *data)
{
    struct alloc_arg *a = data;
    struct err e = {0};
    pthread_barrier_wait(&barrier);
    a->r = net_ipam_alloc(tmpdir, a->s, a->id, NULL, a->addr, &e);
    return NULL;
}

static void test_ipam_concurrent(void **state)
{
    struct net_subnet s;
    assert_int_equal(net_subnet_parse("fd00:9::/120", &s), 0);
    struct alloc_arg args[NTHREADS];
    pthread_t t[NTHREADS];
    assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++) {
        args[i].s = &s;
        snprintf(args[i].id, sizeof(args[i].id), "t%d", i);
        assert_int_equal(pthread_create(&t[i], NULL, alloc_thread, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(args[i].r, 0);
        assert_true(net_subnet_pool_index(&s, args[i].addr) >= 0);
        for (int k = 0; k < i; k++)
            if (!memcmp(args[i].addr, args[k].addr, 16))
                fail_msg("threads %d and %d got the same address", i, k);
    }
}

/* ---- netlink building --------------------------------------------------- */

struct attrs {
    const struct nlattr *tb[IFLA_MAX + 1];
};

static int collect_cb(const struct nlattr *a, void *data)
{
    struct attrs *at = data;
    if (mnl_attr_type_valid(a, IFLA_MAX) > 0)
        at->tb[mnl_attr_get_type(a)] = a;
    return MNL_CB_OK;
}

static void test_nl_veth(void **state)
{
    struct nl_batch b;
    nl_batch_init(&b);
    assert_int_equal(nl_build_veth_create(&b, "klabc", "eth0", 7, 1400, 3), 0);
    assert_int_equal(nl_build_brport_hairpin(&b, "klabc", true), 0);
    assert_int_equal(b.nmsgs, 2);
    const struct nlmsghdr *nlh = nl_batch_msg(&b, 0);
    assert_non_null(nlh);
    assert_int_equal(nlh->nlmsg_type, RTM_NEWLINK);
    assert_int_equal(nlh->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
    assert_int_equal(ifi->ifi_flags & IFF_UP, IFF_UP);
    struct attrs at = {0};
    assert_int_equal(mnl_attr_parse(nlh, sizeof(*ifi), collect_cb, &at), MNL_CB_OK);
    assert_string_equal(mnl_attr_get_str(at.tb[IFLA_IFNAME]), "klabc");
    assert_int_equal(mnl_attr_get_u32(at.tb[IFLA_MTU]), 1400);
    assert_int_equal(mnl_attr_get_u32(at.tb[IFLA_MASTER]), 3);
    struct attrs li = {0};
    assert_int_equal(mnl_attr_parse_nested(at.tb[IFLA_LINKINFO], collect_cb, &li), MNL_CB_OK);
    assert_string_equal(mnl_attr_get_str(li.tb[IFLA_INFO_KIND]), "veth");
    /* IFLA_INFO_DATA > VETH_INFO_PEER (not flagged nested) > ifinfomsg + attrs */
    const struct nlattr *data = li.tb[IFLA_INFO_DATA];
    const struct nlattr *peer = mnl_attr_get_payload(data);
    assert_int_equal(peer->nla_type, VETH_INFO_PEER);
    const struct ifinfomsg *pifi = mnl_attr_get_payload(peer);
    assert_int_equal(pifi->ifi_flags & IFF_UP, 0);
    struct attrs pa = {0};
    const uint8_t *p = (const uint8_t *)pifi + MNL_ALIGN(sizeof(*pifi));
    const uint8_t *end = (const uint8_t *)peer + peer->nla_len;
    while (p < end) {
        const struct nlattr *a = (const struct nlattr *)p;
        collect_cb(a, &pa);
        p += MNL_ALIGN(a->nla_len);
    }
    assert_non_null(pa.tb[IFLA_IFNAME]);
    assert_string_equal(mnl_attr_get_str(pa.tb[IFLA_IFNAME]), "eth0");
    assert_int_equal(mnl_attr_get_u32(pa.tb[IFLA_NET_NS_FD]), 7);

    /* hairpin: an existing port by name, bridge slave data */
    nlh = nl_batch_msg(&b, 1);
    assert_int_equal(nlh->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK);
    memset(&at, 0, sizeof(at));
    assert_int_equal(mnl_attr_parse(nlh, sizeof(*ifi), collect_cb, &at), MNL_CB_OK);
    memset(&li, 0, sizeof(li));
    assert_int_equal(mnl_attr_parse_nested(at.tb[IFLA_LINKINFO], collect_cb, &li), MNL_CB_OK);
    assert_string_equal(mnl_attr_get_str(li.tb[IFLA_INFO_SLAVE_KIND]), "bridge");
    const struct nlattr *mode = mnl_attr_get_payload(li.tb[IFLA_INFO_SLAVE_DATA]);
    assert_int_equal(mnl_attr_get_type(mode), IFLA_BRPORT_MODE);
    assert_int_equal(mnl_attr_get_u8(mode), 1);
}

static void test_nl_bad_names(void **state)
{
    struct nl_batch b;
    nl_batch_init(&b);
    assert_int_equal(nl_build_veth_create(&b, "0123456789abcdef", "eth0", 3, 0, 0), -EINVAL);
    assert_int_equal(nl_build_link_get(&b, ""), -EINVAL);
    assert_int_equal(nl_build_link_del(&b, "a/b"), -EINVAL);
    assert_int_equal(nl_build_bridge_create(&b, NULL, 0), -EINVAL);
    assert_int_equal(b.nmsgs, 0);
    /* a full batch refuses more messages instead of overflowing */
    int n = 0;
    while (nl_build_link_get(&b, "lo") == 0)
        n++;
    assert_int_equal(n, NL_BATCH_MSGS);
    assert_int_equal(nl_build_link_get(&b, "lo"), -ENOBUFS);
}

static void test_nl_addr_route(void **state)
{
    struct nl_batch b;
    nl_batch_init(&b);
    uint8_t a6[16], gw4[16] = {0};
    int fam;
    assert_int_equal(net_addr_parse("fd00::5", &fam, a6), 0);
    assert_int_equal(net_addr_parse("10.0.0.1", &fam, gw4), 0);
    assert_int_equal(nl_build_addr(&b, true, AF_INET6, 4, a6, 64), 0);
    assert_int_equal(nl_build_route_default(&b, true, AF_INET, 4, gw4), 0);
    assert_int_equal(nl_build_addr(&b, true, AF_INET, 4, gw4, 33), -EINVAL);
    assert_int_equal(nl_build_addr(&b, true, AF_INET, 0, gw4, 8), -EINVAL);
    assert_int_equal(b.nmsgs, 2);
    const struct nlmsghdr *nlh = nl_batch_msg(&b, 0);
    assert_int_equal(nlh->nlmsg_type, RTM_NEWADDR);
    assert_true(nlh->nlmsg_flags & NLM_F_REPLACE);
    const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
    assert_int_equal(ifa->ifa_prefixlen, 64);
    assert_int_equal(ifa->ifa_index, 4);
    const struct nlattr *a;
    bool nodad = false, local = false;
    mnl_attr_for_each(a, nlh, sizeof(*ifa))
    {
        if (mnl_attr_get_type(a) == IFA_FLAGS)
            nodad = mnl_attr_get_u32(a) & IFA_F_NODAD;
        if (mnl_attr_get_type(a) == IFA_LOCAL)
            local = !memcmp(mnl_attr_get_payload(a), a6, 16);
    }
    assert_true(nodad);
    assert_true(local);
    nlh = nl_batch_msg(&b, 1);
    assert_int_equal(nlh->nlmsg_type, RTM_NEWROUTE);
    const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
    assert_int_equal(rtm->rtm_dst_len, 0);
    assert_int_equal(rtm->rtm_family, AF_INET);
    bool gw = false, oif = false;
    mnl_attr_for_each(a, nlh, sizeof(*rtm))
    {
        if (mnl_attr_get_type(a) == RTA_GATEWAY)
            gw = mnl_attr_get_payload_len(a) == 4 && !memcmp(mnl_attr_get_payload(a), gw4, 4);
        if (mnl_attr_get_type(a) == RTA_OIF)
            oif = mnl_attr_get_u32(a) == 4;
    }
    assert_true(gw && oif);
}

/* ---- netlink replies ---------------------------------------------------- */

/* An NLMSG_ERROR for seq, capped, optionally with an extack message. */
static size_t put_error(uint8_t *buf, uint32_t seq, uint32_t portid, int error, const char *msg)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = NLMSG_ERROR;
    nlh->nlmsg_seq = seq;
    nlh->nlmsg_pid = portid;
    nlh->nlmsg_flags = NLM_F_CAPPED;
    struct nlmsgerr *e = mnl_nlmsg_put_extra_header(nlh, sizeof(*e));
    e->error = error;
    e->msg.nlmsg_len = 64; /* the original's header only (capped) */
    e->msg.nlmsg_seq = seq;
    if (msg) {
        nlh->nlmsg_flags |= NLM_F_ACK_TLVS;
        mnl_attr_put_strz(nlh, NLMSGERR_ATTR_MSG, msg);
    }
    return nlh->nlmsg_len;
}

static int count_cb(const struct nlmsghdr *nlh, void *data)
{
    (*(int *)data)++;
    return 0;
}

static void test_nl_reply(void **state)
{
    uint8_t buf[4096] = {0};
    size_t len = 0;
    len += put_error(buf + len, 10, 77, 0, NULL);
    len += put_error(buf + len, 99, 77, -EPERM, "someone else's"); /* other seq */
    len += put_error(buf + len, 11, 77, -EEXIST, "File exists, says the kernel");
    /* a data message for seq 12 then its ack */
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf + len);
    nlh->nlmsg_type = RTM_NEWLINK;
    nlh->nlmsg_seq = 12;
    nlh->nlmsg_pid = 77;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_index = 42;
    ifi->ifi_flags = IFF_UP;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, "kinglet0");
    mnl_attr_put_u32(nlh, IFLA_MTU, 1450);
    struct nlattr *li = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
    mnl_attr_nest_end(nlh, li);
    const struct nlmsghdr *link = nlh;
    len += nlh->nlmsg_len;
    len += put_error(buf + len, 12, 77, -ENODEV, NULL);

    struct nl_result res;
    struct nl_reply_state st = {.portid = 77, .seq_first = 10, .seq_last = 12, .res = &res};
    memset(&res, 0, sizeof(res));
    int n = 0;
    assert_int_equal(nl_reply_parse(buf, len, &st, count_cb, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(st.acked, 3);
    assert_int_equal(st.first_error, -EEXIST);
    assert_int_equal(st.first_error_index, 1);
    assert_string_equal(st.ext_msg, "File exists, says the kernel");
    assert_int_equal(res.errors[0], 0);
    assert_int_equal(res.errors[1], -EEXIST);
    assert_int_equal(res.errors[2], -ENODEV);
    struct err e = {0};
    assert_int_equal(nl_result_err(&res, 1, &e, "create"), -EEXIST);
    assert_non_null(strstr(e.msg, "create: File exists, says the kernel"));
    assert_int_equal(nl_result_err(&res, 0, &e, "x"), 0);

    struct nl_link_info info;
    assert_int_equal(nl_link_parse(link, &info), 0);
    assert_int_equal(info.ifindex, 42);
    assert_string_equal(info.name, "kinglet0");
    assert_int_equal(info.mtu, 1450);
    assert_string_equal(info.kind, "bridge");

    /* truncated datagrams are malformed, not silently fine */
    struct nl_reply_state st2 = {.portid = 77, .seq_first = 10, .seq_last = 12};
    assert_int_equal(nl_reply_parse(buf, 10, &st2, NULL, NULL), -EBADMSG);
    /* a length above INT_MAX must not pass as negative (fuzzer finding) */
    uint8_t huge[64] = {0};
    size_t hl = put_error(huge, 10, 77, 0, NULL);
    ((struct nlmsghdr *)huge)->nlmsg_len = 0xffffffefu;
    assert_int_equal(nl_reply_parse(huge, hl, &st2, NULL, NULL), -EBADMSG);
    ((struct nlmsghdr *)huge)->nlmsg_len = (uint32_t)hl;
    struct nlmsghdr *second = (struct nlmsghdr *)(huge + hl);
    second->nlmsg_len = 0xfffffff0u;
    second->nlmsg_seq = 11;
    assert_int_equal(nl_reply_parse(huge, sizeof(huge), &st2, count_cb, &n), 0);
    /* an error message too short for nlmsgerr */
    uint8_t small[64] = {0};
    struct nlmsghdr *sh = mnl_nlmsg_put_header(small);
    sh->nlmsg_type = NLMSG_ERROR;
    sh->nlmsg_seq = 10;
    sh->nlmsg_len += 4;
    assert_int_equal(nl_reply_parse(small, sh->nlmsg_len, &st2, NULL, NULL), -EBADMSG);
    /* an extack string without its NUL is ignored, the error kept */
    uint8_t nonul[256] = {0};
    size_t l = put_error(nonul, 10, 77, -EINVAL, "abc");
    struct nlmsghdr *eh = (struct nlmsghdr *)nonul;
    struct nlattr *ma =
        (struct nlattr *)(nonul + MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(struct nlmsgerr)));
    ((char *)(ma + 1))[3] = 'd';
    ma->nla_len = sizeof(*ma) + 4;
    eh->nlmsg_len = (uint32_t)(l - 0);
    struct nl_reply_state st3 = {.portid = 77, .seq_first = 10, .seq_last = 10};
    assert_int_equal(nl_reply_parse(nonul, l, &st3, NULL, NULL), 0);
    assert_int_equal(st3.first_error, -EINVAL);
    assert_string_equal(st3.ext_msg, "");
}

/* ---- conntrack ---------------------------------------------------------- */

static void test_ct_messages(void **state)
{
    struct nl_batch b;
    nl_batch_init(&b);
    assert_int_equal(nl_build_ct_dump(&b, AF_INET, IPPROTO_UDP, 5353), 0);
    assert_int_equal(nl_build_ct_dump(&b, AF_UNIX, IPPROTO_UDP, 5353), -EINVAL);
    const struct nlmsghdr *nlh = nl_batch_msg(&b, 0);
    assert_int_equal(nlh->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET);
    assert_int_equal(nlh->nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP); /* no ACK on a dump */
    const struct nfgenmsg *nfg = mnl_nlmsg_get_payload(nlh);
    assert_int_equal(nfg->nfgen_family, AF_INET);
    const struct nlattr *a, *tuple = NULL, *filter = NULL;
    mnl_attr_for_each(a, nlh, sizeof(*nfg))
    {
        if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG)
            tuple = a;
        if (mnl_attr_get_type(a) == CTA_FILTER)
            filter = a;
    }
    assert_non_null(tuple);
    assert_non_null(filter);
    assert_int_equal(net_ct_tuple_matches(tuple, IPPROTO_UDP, 5353), 1);
    assert_int_equal(net_ct_tuple_matches(tuple, IPPROTO_UDP, 5354), 0);
    assert_int_equal(net_ct_tuple_matches(tuple, IPPROTO_TCP, 5353), 0);
    const struct nlattr *f = mnl_attr_get_payload(filter);
    assert_int_equal(mnl_attr_get_type(f), CTA_FILTER_ORIG_FLAGS);
    assert_int_equal(mnl_attr_get_u32(f), (1u << 3) | (1u << 5)); /* proto num, dst port */

    /* delete by the original tuple, as dumped */
    static struct nl_batch b2;
    nl_batch_init(&b2);
    assert_int_equal(nl_build_ct_delete(&b2, AF_INET6, mnl_attr_get_payload(tuple),
                                        mnl_attr_get_payload_len(tuple)),
                     0);
    nlh = nl_batch_msg(&b2, 0);
    assert_int_equal(nlh->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE);
    assert_true(nlh->nlmsg_flags & NLM_F_ACK);
    const struct nlattr *d = NULL;
    mnl_attr_for_each(a, nlh, sizeof(*nfg)) d = a;
    assert_int_equal(d->nla_type, CTA_TUPLE_ORIG | NLA_F_NESTED);
    assert_int_equal(net_ct_tuple_matches(d, IPPROTO_UDP, 5353), 1);
    uint8_t big[300] = {0};
    assert_int_equal(nl_build_ct_delete(&b2, AF_INET, big, sizeof(big)), -EINVAL);

    /* a malformed tuple: protocol number of the wrong size */
    uint8_t buf[64] = {0};
    struct nlmsghdr *m = mnl_nlmsg_put_header(buf);
    struct nlattr *t = mnl_attr_nest_start(m, CTA_TUPLE_ORIG);
    struct nlattr *p = mnl_attr_nest_start(m, CTA_TUPLE_PROTO);
    mnl_attr_put_u32(m, CTA_PROTO_NUM, IPPROTO_UDP);
    mnl_attr_nest_end(m, p);
    mnl_attr_nest_end(m, t);
    assert_int_equal(net_ct_tuple_matches(t, IPPROTO_UDP, 53), -EBADMSG);
}

/* ---- nftables messages -------------------------------------------------- */

#define NFT_TYPE(msg) ((NFNL_SUBSYS_NFTABLES << 8) | (msg))

/* A rule message as `nft --debug=netlink` shows it: the expressions, one
 * "[ ... ]" per line, as libnftnl reads them back from the bytes. */
static void rule_exprs(const struct nlmsghdr *nlh, char *out, size_t size)
{
    struct nftnl_rule *r = nftnl_rule_alloc();
    assert_non_null(r);
    assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
    char text[4096];
    nftnl_rule_snprintf(text, sizeof(text), r, NFTNL_OUTPUT_DEFAULT, 0);
    nftnl_rule_free(r);
    /* keep the expression lines only */
    size_t n = 0;
    out[0] = '\0';
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *b = strstr(line, "[ ");
        if (b && n + strlen(b) + 2 < size)
            n += (size_t)snprintf(out + n, size - n, "%s\n", b);
    }
}

static const char *rule_chain(const struct nlmsghdr *nlh, char *buf, size_t size)
{
    struct nftnl_rule *r = nftnl_rule_alloc();
    assert_non_null(r);
    assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
    snprintf(buf, size, "%s/%s", nftnl_rule_get_str(r, NFTNL_RULE_TABLE),
             nftnl_rule_get_str(r, NFTNL_RULE_CHAIN));
    nftnl_rule_free(r);
    return buf;
}

/* Begin and end of the batch, NLM_F_ACK on the last message only, every
 * message of nf_tables for family inet. */
static void check_batch(const struct net_nft_batch *b)
{
    assert_true(b->nmsgs >= 3);
    const struct nlmsghdr *first = net_nft_batch_msg(b, 0);
    const struct nlmsghdr *last = net_nft_batch_msg(b, b->nmsgs - 1);
    assert_int_equal(first->nlmsg_type, NFNL_MSG_BATCH_BEGIN);
    assert_int_equal(last->nlmsg_type, NFNL_MSG_BATCH_END);
    const struct nfgenmsg *g = mnl_nlmsg_get_payload(first);
    assert_int_equal(ntohs(g->res_id), NFNL_SUBSYS_NFTABLES);
    for (unsigned i = 1; i + 1 < b->nmsgs; i++) {
        const struct nlmsghdr *nlh = net_nft_batch_msg(b, i);
        assert_int_equal(nlh->nlmsg_type >> 8, NFNL_SUBSYS_NFTABLES);
        assert_int_equal(((const struct nfgenmsg *)mnl_nlmsg_get_payload(nlh))->nfgen_family,
                         NFPROTO_INET);
        assert_int_equal(!!(nlh->nlmsg_flags & NLM_F_ACK), i + 2 == b->nmsgs);
        assert_true(nlh->nlmsg_flags & NLM_F_REQUEST);
    }
    size_t len = 0;
    for (unsigned i = 0; i < b->nmsgs; i++)
        len += MNL_ALIGN(net_nft_batch_msg(b, i)->nlmsg_len);
    assert_int_equal(len, b->buf.len);
}

/* The expressions nft 1.0.6 generates for the former rule text (copied from
 * `nft --debug=netlink -f`), for the rules of the base chains. */
static const char *const BASE_RULES[][2] = {
    {"kinglet/prerouting", /* fib daddr type local jump hostports */
     "[ fib daddr type => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000002 ]\n"
     "[ immediate reg 0 jump -> hostports ]\n"},
    {"kinglet/output", /* ip6 daddr ::1 return */
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000000a ]\n"
     "[ payload load 16b @ network header + 24 => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000000 0x00000000 0x00000000 0x01000000 ]\n"
     "[ immediate reg 0 return ]\n"},
    {"kinglet/output", /* fib daddr type local jump hostports */
     "[ fib daddr type => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000002 ]\n"
     "[ immediate reg 0 jump -> hostports ]\n"},
    {"kinglet/postrouting", /* ct status dnat ip saddr 127.0.0.0/8 masquerade */
     "[ ct load status => reg 1 ]\n"
     "[ bitwise reg 1 = ( reg 1 & 0x00000020 ) ^ 0x00000000 ]\n"
     "[ cmp neq reg 1 0x00000000 ]\n"
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000002 ]\n"
     "[ payload load 1b @ network header + 12 => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000007f ]\n"
     "[ masq ]\n"},
    {"kinglet/postrouting", /* ct status dnat ip saddr 10.88.0.0/16 ip daddr 10.88.0.0/16 */
     "[ ct load status => reg 1 ]\n"
     "[ bitwise reg 1 = ( reg 1 & 0x00000020 ) ^ 0x00000000 ]\n"
     "[ cmp neq reg 1 0x00000000 ]\n"
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000002 ]\n"
     "[ payload load 2b @ network header + 12 => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000580a ]\n"
     "[ payload load 2b @ network header + 16 => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000580a ]\n"
     "[ masq ]\n"},
    {"kinglet/postrouting", /* ip saddr 10.88.0.0/16 ip daddr != 10.88.0.0/16 masquerade */
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x00000002 ]\n"
     "[ payload load 2b @ network header + 12 => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000580a ]\n"
     "[ payload load 2b @ network header + 16 => reg 1 ]\n"
     "[ cmp neq reg 1 0x0000580a ]\n"
     "[ masq ]\n"},
    {"kinglet/postrouting", /* ct status dnat ip6 saddr fd00:88::/64 ip6 daddr fd00:88::/64 */
     "[ ct load status => reg 1 ]\n"
     "[ bitwise reg 1 = ( reg 1 & 0x00000020 ) ^ 0x00000000 ]\n"
     "[ cmp neq reg 1 0x00000000 ]\n"
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000000a ]\n"
     "[ payload load 8b @ network header + 8 => reg 1 ]\n"
     "[ cmp eq reg 1 0x880000fd 0x00000000 ]\n"
     "[ payload load 8b @ network header + 24 => reg 1 ]\n"
     "[ cmp eq reg 1 0x880000fd 0x00000000 ]\n"
     "[ masq ]\n"},
    {"kinglet/postrouting", /* ip6 saddr fd00:88::/64 ip6 daddr != fd00:88::/64 masquerade */
     "[ meta load nfproto => reg 1 ]\n"
     "[ cmp eq reg 1 0x0000000a ]\n"
     "[ payload load 8b @ network header + 8 => reg 1 ]\n"
     "[ cmp eq reg 1 0x880000fd 0x00000000 ]\n"
     "[ payload load 8b @ network header + 24 => reg 1 ]\n"
     "[ cmp neq reg 1 0x880000fd 0x00000000 ]\n"
     "[ masq ]\n"},
};

static void test_nft_base(void **state)
{
    struct net_config cfg;
    struct err e = {0};
    net_config_init(&cfg);
    assert_int_equal(net_config_set_subnets(&cfg, "10.88.0.0/16,fd00:88::/64", &e), 0);
    struct net_nft_batch b = {0};
    assert_int_equal(net_nft_batch_begin(&b), 0);
    assert_int_equal(net_nft_base_build(&cfg, &b), 0);
    assert_int_equal(net_nft_batch_end(&b), 0);
    check_batch(&b);
    /* table, chains (hostports without a hook), flush of the base chains
     * only, then their rules */
    const uint16_t types[] = {
        NFT_MSG_NEWTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_NEWCHAIN, NFT_MSG_DELRULE,
        NFT_MSG_NEWRULE,  NFT_MSG_NEWCHAIN, NFT_MSG_DELRULE,  NFT_MSG_NEWRULE,
        NFT_MSG_NEWRULE,  NFT_MSG_NEWCHAIN, NFT_MSG_DELRULE,  NFT_MSG_NEWRULE,
        NFT_MSG_NEWRULE,  NFT_MSG_NEWRULE,  NFT_MSG_NEWRULE,  NFT_MSG_NEWRULE,
    };
    assert_int_equal(b.nmsgs, ARRAY_SIZE(types) + 2);
    size_t nrule = 0;
    char chain[128], exprs[4096];
    for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
        const struct nlmsghdr *nlh = net_nft_batch_msg(&b, i + 1);
        assert_int_equal(nlh->nlmsg_type, NFT_TYPE(types[i]));
        if (types[i] == NFT_MSG_DELRULE)
            assert_string_not_equal(rule_chain(nlh, chain, sizeof(chain)), "kinglet/hostports");
        if (types[i] != NFT_MSG_NEWRULE)
            continue;
        assert_true(nrule < ARRAY_SIZE(BASE_RULES));
        assert_string_equal(rule_chain(nlh, chain, sizeof(chain)), BASE_RULES[nrule][0]);
        rule_exprs(nlh, exprs, sizeof(exprs));
        if (strcmp(exprs, BASE_RULES[nrule][1]))
            fail_msg("rule %zu:\n%s\nwant:\n%s", nrule, exprs, BASE_RULES[nrule][1]);
        nrule++;
    }
    assert_int_equal(nrule, ARRAY_SIZE(BASE_RULES));
    net_nft_batch_free(&b);

    /* a prefix that ends inside a byte: the address and a mask */
    assert_int_equal(net_config_set_subnets(&cfg, "10.80.0.0/12", &e), 0);
    assert_int_equal(net_nft_base_build(&cfg, &b), 0);
    rule_exprs(net_nft_batch_msg(&b, b.nmsgs - 1), exprs, sizeof(exprs));
    assert_string_equal(exprs, "[ meta load nfproto => reg 1 ]\n"
                               "[ cmp eq reg 1 0x00000002 ]\n"
                               "[ payload load 4b @ network header + 12 => reg 1 ]\n"
                               "[ bitwise reg 1 = ( reg 1 & 0x0000f0ff ) ^ 0x00000000 ]\n"
                               "[ cmp eq reg 1 0x0000500a ]\n"
                               "[ payload load 4b @ network header + 16 => reg 1 ]\n"
                               "[ bitwise reg 1 = ( reg 1 & 0x0000f0ff ) ^ 0x00000000 ]\n"
                               "[ cmp neq reg 1 0x0000500a ]\n"
                               "[ masq ]\n");
    net_nft_batch_free(&b);
}

static void test_nft_pod(void **state)
{
    struct net_nft_dnat ips[2] = {{AF_INET, "10.88.0.5"}, {AF_INET6, "fd00:88::5"}};
    struct net_port_mapping ports[] = {
        {NET_PROTO_TCP, 8080, 80, NULL},
        {NET_PROTO_UDP, 5353, 53, "192.0.2.7"},
        {NET_PROTO_SCTP, 9999, 999, "0.0.0.0"},
        {NET_PROTO_TCP, 0, 22, NULL}, /* no host port: nothing */
        {NET_PROTO_TCP, 4443, 443, "2001:db8::1"},
    };
    struct net_nft_batch b = {0};
    struct err e = {0};
    size_t n = 0;
    assert_int_equal(net_nft_batch_begin(&b), 0);
    assert_int_equal(net_nft_pod_build("podx", ips, 2, ports, ARRAY_SIZE(ports), &b, &n, &e), 0);
    assert_int_equal(net_nft_batch_end(&b), 0);
    check_batch(&b);
    assert_int_equal(n, 6);
    assert_int_equal(b.nmsgs, 8);
    /* as nft --debug=netlink shows "meta nfproto ipv4 meta l4proto tcp th
     * dport 8080 dnat ip to 10.88.0.5:80", "ip daddr 192.0.2.7 meta
     * l4proto udp th dport 5353 dnat ip to 10.88.0.5:53", ... */
    const char *want[] = {
        "[ meta load nfproto => reg 1 ]\n[ cmp eq reg 1 0x00000002 ]\n"
        "[ meta load l4proto => reg 1 ]\n[ cmp eq reg 1 0x00000006 ]\n"
        "[ payload load 2b @ transport header + 2 => reg 1 ]\n[ cmp eq reg 1 0x0000901f ]\n"
        "[ immediate reg 1 0x0500580a ]\n[ immediate reg 2 0x00005000 ]\n"
        "[ nat dnat ip addr_min reg 1 proto_min reg 2 flags 0x2 ]\n",
        "[ meta load nfproto => reg 1 ]\n[ cmp eq reg 1 0x0000000a ]\n"
        "[ meta load l4proto => reg 1 ]\n[ cmp eq reg 1 0x00000006 ]\n"
        "[ payload load 2b @ transport header + 2 => reg 1 ]\n[ cmp eq reg 1 0x0000901f ]\n"
        "[ immediate reg 1 0x880000fd 0x00000000 0x00000000 0x05000000 ]\n"
        "[ immediate reg 2 0x00005000 ]\n"
        "[ nat dnat ip6 addr_min reg 1 proto_min reg 2 flags 0x2 ]\n",
        "[ meta load nfproto => reg 1 ]\n[ cmp eq reg 1 0x00000002 ]\n"
        "[ payload load 4b @ network header + 16 => reg 1 ]\n[ cmp eq reg 1 0x070200c0 ]\n"
        "[ meta load l4proto => reg 1 ]\n[ cmp eq reg 1 0x00000011 ]\n"
        "[ payload load 2b @ transport header + 2 => reg 1 ]\n[ cmp eq reg 1 0x0000e914 ]\n"
        "[ immediate reg 1 0x0500580a ]\n[ immediate reg 2 0x00003500 ]\n"
        "[ nat dnat ip addr_min reg 1 proto_min reg 2 flags 0x2 ]\n",
        NULL, /* sctp, IPv4 */
        NULL, /* sctp, IPv6 */
        "[ meta load nfproto => reg 1 ]\n[ cmp eq reg 1 0x0000000a ]\n"
        "[ payload load 16b @ network header + 24 => reg 1 ]\n"
        "[ cmp eq reg 1 0xb80d0120 0x00000000 0x00000000 0x01000000 ]\n"
        "[ meta load l4proto => reg 1 ]\n[ cmp eq reg 1 0x00000006 ]\n"
        "[ payload load 2b @ transport header + 2 => reg 1 ]\n[ cmp eq reg 1 0x00005b11 ]\n"
        "[ immediate reg 1 0x880000fd 0x00000000 0x00000000 0x05000000 ]\n"
        "[ immediate reg 2 0x0000bb01 ]\n"
        "[ nat dnat ip6 addr_min reg 1 proto_min reg 2 flags 0x2 ]\n",
    };
    char exprs[4096], chain[128];
    for (unsigned i = 0; i < 6; i++) {
        const struct nlmsghdr *nlh = net_nft_batch_msg(&b, i + 1);
        assert_int_equal(nlh->nlmsg_type, NFT_TYPE(NFT_MSG_NEWRULE));
        assert_string_equal(rule_chain(nlh, chain, sizeof(chain)), "kinglet/hostports");
        /* the comment, as teardown reads it back */
        struct net_nft_rule rule;
        assert_int_equal(net_nft_rule_parse(nlh, &rule), 1);
        assert_true(rule.has_comment);
        assert_string_equal(rule.comment, "kinglet:podx");
        rule_exprs(nlh, exprs, sizeof(exprs));
        if (want[i] && strcmp(exprs, want[i]))
            fail_msg("rule %u:\n%s\nwant:\n%s", i, exprs, want[i]);
        if (!want[i])
            assert_non_null(strstr(exprs, "[ cmp eq reg 1 0x00000084 ]")); /* sctp */
    }
    net_nft_batch_free(&b);

    /* bad mappings: an error and nothing appended */
    struct net_port_mapping bad_ip = {NET_PROTO_TCP, 1, 2, "1.2.3.4; flush ruleset"};
    assert_int_equal(net_nft_pod_build("podx", ips, 2, &bad_ip, 1, &b, &n, &e), -EINVAL);
    struct net_port_mapping bad_proto = {(enum net_proto)7, 1, 2, NULL};
    assert_int_equal(net_nft_pod_build("podx", ips, 2, &bad_proto, 1, &b, &n, &e), -EINVAL);
    struct net_port_mapping bad_cport = {NET_PROTO_TCP, 1, 0, NULL};
    assert_int_equal(net_nft_pod_build("podx", ips, 2, &bad_cport, 1, &b, &n, &e), -EINVAL);
    assert_int_equal(net_nft_pod_build("pod\"x", ips, 2, ports, 1, &b, &n, &e), -EINVAL);
    assert_int_equal(net_nft_ports_check("podx", &bad_ip, 1, &e), -EINVAL);
    assert_int_equal(net_nft_ports_check("podx", ports, ARRAY_SIZE(ports), &e), 0);
    assert_int_equal(b.nmsgs, 0);
    assert_int_equal(b.buf.len, 0);
    net_nft_batch_free(&b);
}

/* A NEWRULE message as the kernel lists it. udata/ulen: NFTA_RULE_USERDATA
 * (NULL: none). */
static struct nlmsghdr *listed_rule(uint8_t *buf, int family, const char *table, const char *chain,
                                    uint64_t handle, const void *udata, size_t ulen)
{
    memset(buf, 0, 1024);
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = NFT_TYPE(NFT_MSG_NEWRULE);
    nlh->nlmsg_flags = NLM_F_MULTI;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->nfgen_family = (uint8_t)family;
    mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, table);
    mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, chain);
    mnl_attr_put_u64(nlh, NFTA_RULE_HANDLE, htobe64(handle));
    if (udata)
        mnl_attr_put(nlh, NFTA_RULE_USERDATA, ulen, udata);
    return nlh;
}

static void test_nft_pod_delete(void **state)
{
    uint8_t buf[1024];
    struct net_nft_handles h = {.pod_id = "poda"};
    const uint8_t poda[] = "\x00\x0dkinglet:poda";            /* with its NUL */
    const uint8_t podab[] = "\x00\x0ekinglet:podab";          /* another pod */
    const uint8_t twice[] = "\x01\x02xy\x00\x0dkinglet:poda"; /* after another TLV */
    const uint8_t nonul[] = "\x00\x0ckinglet:podaX";          /* no NUL: no comment */
    const uint8_t overrun[] = "\x00\x20kinglet:poda";         /* runs past the end */
    struct {
        int family;
        const char *table, *chain;
        uint64_t handle;
        const uint8_t *ud;
        size_t ulen;
        bool match;
    } cases[] = {
        {NFPROTO_INET, "kinglet", "hostports", 7, poda, sizeof(poda), true},
        {NFPROTO_INET, "kinglet", "hostports", 8, podab, sizeof(podab), false},
        {NFPROTO_INET, "kinglet", "hostports", 1ull << 40, twice, sizeof(twice), true},
        {NFPROTO_INET, "other", "hostports", 10, poda, sizeof(poda), false},
        {NFPROTO_INET, "kinglet", "output", 11, poda, sizeof(poda), false},
        {NFPROTO_IPV4, "kinglet", "hostports", 12, poda, sizeof(poda), false},
        {NFPROTO_INET, "kinglet", "hostports", 0, poda, sizeof(poda), false},
        {NFPROTO_INET, "kinglet", "hostports", 13, NULL, 0, false},
        {NFPROTO_INET, "kinglet", "hostports", 14, nonul, sizeof(nonul) - 1, false},
        {NFPROTO_INET, "kinglet", "hostports", 15, overrun, sizeof(overrun), false},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct nlmsghdr *nlh = listed_rule(buf, cases[i].family, cases[i].table, cases[i].chain,
                                           cases[i].handle, cases[i].ud, cases[i].ulen);
        size_t before = h.n;
        assert_int_equal(net_nft_handles_cb(nlh, &h), 0);
        if ((h.n > before) != cases[i].match)
            fail_msg("case %zu: matched %d", i, h.n > before);
    }
    assert_int_equal(h.n, 2);
    assert_true(h.v[0] == 7 && h.v[1] == 1ull << 40);

    /* not a rule: skipped; a broken attribute: the listing is refused */
    struct nlmsghdr *nlh =
        listed_rule(buf, NFPROTO_INET, "kinglet", "hostports", 3, poda, sizeof(poda));
    nlh->nlmsg_type = NFT_TYPE(NFT_MSG_NEWCHAIN);
    assert_int_equal(net_nft_handles_cb(nlh, &h), 0);
    nlh->nlmsg_type = NFT_TYPE(NFT_MSG_NEWRULE);
    struct nlattr *a = (struct nlattr *)((uint8_t *)mnl_nlmsg_get_payload(nlh) + 4);
    a->nla_len = 0xfff0;
    assert_int_equal(net_nft_handles_cb(nlh, &h), -EBADMSG);
    a->nla_len = 5; /* "kinglet" cut short: no NUL */
    assert_int_equal(net_nft_handles_cb(nlh, &h), -EBADMSG);
    nlh->nlmsg_len = MNL_NLMSG_HDRLEN + 2;
    assert_int_equal(net_nft_handles_cb(nlh, &h), -EBADMSG);
    assert_int_equal(h.n, 2);

    /* the deletion: by handle, in the hostports chain, one batch */
    struct net_nft_batch b = {0};
    assert_int_equal(net_nft_batch_begin(&b), 0);
    assert_int_equal(net_nft_pod_delete_build(h.v, h.n, &b), 0);
    assert_int_equal(net_nft_batch_end(&b), 0);
    check_batch(&b);
    assert_int_equal(b.nmsgs, 4);
    for (unsigned i = 0; i < 2; i++) {
        const struct nlmsghdr *m = net_nft_batch_msg(&b, i + 1);
        assert_int_equal(m->nlmsg_type, NFT_TYPE(NFT_MSG_DELRULE));
        struct nftnl_rule *r = nftnl_rule_alloc();
        assert_int_equal(nftnl_rule_nlmsg_parse(m, r), 0);
        assert_string_equal(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), "kinglet");
        assert_string_equal(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "hostports");
        assert_true(nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE) == h.v[i]);
        nftnl_rule_free(r);
    }
    net_nft_batch_free(&b);
    free(h.v);

    /* the listing request: a dump of kinglet's hostports chain */
    struct nl_batch req;
    nl_batch_init(&req);
    assert_int_equal(net_nft_list_build(&req), 0);
    const struct nlmsghdr *q = nl_batch_msg(&req, 0);
    assert_int_equal(q->nlmsg_type, NFT_TYPE(NFT_MSG_GETRULE));
    assert_true(q->nlmsg_flags & NLM_F_DUMP);
    struct nftnl_rule *r = nftnl_rule_alloc();
    assert_int_equal(nftnl_rule_nlmsg_parse(q, r), 0);
    assert_string_equal(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), "kinglet");
    assert_string_equal(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "hostports");
    nftnl_rule_free(r);
}

static void test_sysctl_keys(void **state)
{
    struct err e = {0};
    const char *bad[] = {
        "kernel.shmmax", "net/../kernel/x",      "net..ipv4",           "net.ipv4.",
        "net",           "net/ipv4//ip_forward", "net.ipv4.ip forward", "/net/ipv4"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        int r = net_sysctl_write(bad[i], "1", &e);
        if (r != -EINVAL)
            fail_msg("`%s` gave %d, not -EINVAL", bad[i], r);
    }
    assert_int_equal(net_sysctl_write("net.ipv4.ip_forward", "1\n0", &e), -EINVAL);
    char v[16];
    assert_int_equal(net_sysctl_read("net.ipv4.ip_forward", v, sizeof(v), &e), 0);
    assert_true(!strcmp(v, "0") || !strcmp(v, "1"));
}

/* An RTM_NEWROUTE as the kernel dumps it. */
static struct nlmsghdr *route_msg(uint8_t *buf, int family, unsigned dst_len, uint8_t type,
                                  uint32_t table, int oif, unsigned mtu)
{
    memset(buf, 0, 512);
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWROUTE;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = (uint8_t)family;
    rtm->rtm_dst_len = (uint8_t)dst_len;
    rtm->rtm_type = type;
    rtm->rtm_table = table < 256 ? (uint8_t)table : RT_TABLE_COMPAT;
    mnl_attr_put_u32(nlh, RTA_TABLE, table);
    if (oif)
        mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)oif);
    if (mtu) {
        struct nlattr *m = mnl_attr_nest_start(nlh, RTA_METRICS);
        mnl_attr_put_u32(nlh, RTAX_MTU, mtu);
        mnl_attr_nest_end(nlh, m);
    }
    return nlh;
}

static void test_route_default_parse(void **state)
{
    uint8_t buf[512];
    struct net_default_route r;
    struct nlmsghdr *nlh = route_msg(buf, AF_INET, 0, RTN_UNICAST, RT_TABLE_MAIN, 4, 0);
    assert_int_equal(net_route_default_parse(nlh, &r), 1);
    assert_int_equal(r.family, AF_INET);
    assert_int_equal(r.noifs, 1);
    assert_int_equal(r.oifs[0], 4);
    assert_int_equal(r.mtu, 0);
    nlh = route_msg(buf, AF_INET6, 0, RTN_UNICAST, RT_TABLE_MAIN, 2, 1280);
    assert_int_equal(net_route_default_parse(nlh, &r), 1);
    assert_int_equal(r.mtu, 1280);
    /* not default routes of the main table */
    nlh = route_msg(buf, AF_INET, 24, RTN_UNICAST, RT_TABLE_MAIN, 4, 0);
    assert_int_equal(net_route_default_parse(nlh, &r), 0);
    nlh = route_msg(buf, AF_INET, 0, RTN_UNICAST, RT_TABLE_LOCAL, 4, 0);
    assert_int_equal(net_route_default_parse(nlh, &r), 0);
    nlh = route_msg(buf, AF_INET, 0, RTN_UNICAST, 1000, 4, 0);
    assert_int_equal(net_route_default_parse(nlh, &r), 0);
    nlh = route_msg(buf, AF_INET, 0, RTN_BLACKHOLE, RT_TABLE_MAIN, 0, 0);
    assert_int_equal(net_route_default_parse(nlh, &r), 0);
    /* multipath: every next hop's interface */
    nlh = route_msg(buf, AF_INET, 0, RTN_UNICAST, RT_TABLE_MAIN, 0, 0);
    struct nlattr *mp = mnl_attr_nest_start(nlh, RTA_MULTIPATH);
    for (int i = 5; i <= 6; i++) {
        struct rtnexthop *nh = mnl_nlmsg_get_payload_tail(nlh);
        memset(nh, 0, sizeof(*nh));
        nh->rtnh_len = sizeof(*nh);
        nh->rtnh_ifindex = i;
        nlh->nlmsg_len += (uint32_t)RTNH_ALIGN(sizeof(*nh));
    }
    mnl_attr_nest_end(nlh, mp);
    assert_int_equal(net_route_default_parse(nlh, &r), 1);
    assert_int_equal(r.noifs, 2);
    assert_int_equal(r.oifs[0], 5);
    assert_int_equal(r.oifs[1], 6);
    /* a next hop claiming more than there is */
    struct rtnexthop *nh = (struct rtnexthop *)mnl_attr_get_payload(mp);
    nh->rtnh_len = 200;
    assert_int_equal(net_route_default_parse(nlh, &r), -EBADMSG);
    nlh->nlmsg_len = MNL_NLMSG_HDRLEN + 2; /* too short for an rtmsg */
    assert_int_equal(net_route_default_parse(nlh, &r), -EBADMSG);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_route_default_parse),
    cmocka_unit_test(test_subnet_parse),
    cmocka_unit_test(test_subnet_pool),
    cmocka_unit_test(test_pod_cidrs_parse),
    cmocka_unit_test(test_config),
    cmocka_unit_test(test_pod_id),
    cmocka_unit_test_setup_teardown(test_ipam_alloc_release, ipam_setup, ipam_teardown),
    cmocka_unit_test_setup_teardown(test_ipam_exhausted, ipam_setup, ipam_teardown),
    cmocka_unit_test_setup_teardown(test_ipam_concurrent, ipam_setup, ipam_teardown),
    cmocka_unit_test(test_nl_veth),
    cmocka_unit_test(test_nl_bad_names),
    cmocka_unit_test(test_nl_addr_route),
    cmocka_unit_test(test_nl_reply),
    cmocka_unit_test(test_ct_messages),
    cmocka_unit_test(test_nft_base),
    cmocka_unit_test(test_nft_pod),
    cmocka_unit_test(test_nft_pod_delete),
    cmocka_unit_test(test_sysctl_keys),
};

UNIT_MAIN(tests)
