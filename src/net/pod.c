/* net/pod: the high-level API of net.h.
 *
 * Setup, in order: node-wide preparation (once per process and
 * configuration), the bridge, address leases, the veth pair (pod end created
 * as eth0 inside the pod's namespace), addresses/routes/loopback inside the
 * pod (one netlink datagram), host port rules. A failure undoes what this
 * call did, in reverse. Teardown needs only the pod id: the host veth name
 * is derived from it and leases are found by content, so it works after a
 * restart and is idempotent (missing pieces are success). The lease is
 * released last, so an address is never handed out again while a rule or
 * link of its previous pod may still exist. */
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#include "net/internal.h"

void net_config_init(struct net_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->bridge, sizeof(cfg->bridge), "%s", NET_BRIDGE_DEFAULT);
    net_subnet_parse(NET_SUBNET_DEFAULT, &cfg->subnets[0]);
    cfg->nsubnets = 1;
    cfg->mtu = NET_MTU_DEFAULT;
    snprintf(cfg->ipam_dir, sizeof(cfg->ipam_dir), "%s", NET_IPAM_DIR_DEFAULT);
}

#define POD_CIDR_RANGES "IPv4 /8 to /30, IPv6 /8 to /126"

int net_pod_cidrs_parse(const char *cidrs, struct net_subnet ret[2], size_t *ret_n, struct err *err)
{
    struct net_subnet s[2];
    size_t n = 0;
    if (!cidrs || !*cidrs)
        return err_set(err, EINVAL, "empty pod CIDR (" POD_CIDR_RANGES ")");
    if (strnlen(cidrs, NET_POD_CIDRS_MAX + 1) > NET_POD_CIDRS_MAX)
        return err_set(err, EINVAL, "pod CIDR list longer than %d bytes", NET_POD_CIDRS_MAX);
    for (const char *p = cidrs;; p++) {
        p += strspn(p, " ");
        size_t len = strcspn(p, ",");
        while (len && p[len - 1] == ' ')
            len--;
        char one[NET_SUBNET_STRLEN + 8];
        if (len == 0)
            return err_set(err, EINVAL, "pod CIDRs `%s`: an empty item", cidrs);
        if (n == 2)
            return err_set(err, EINVAL, "pod CIDRs `%s`: more than two (one per family)", cidrs);
        if (len >= sizeof(one))
            return err_set(err, EINVAL, "pod CIDR `%.*s` is not a CIDR (" POD_CIDR_RANGES ")",
                           (int)len, p);
        memcpy(one, p, len);
        one[len] = '\0';
        /* what net_subnet_parse would mask must be zero already */
        int family;
        uint8_t given[16];
        char *slash = strchr(one, '/');
        if (slash)
            *slash = '\0';
        int r = net_addr_parse(one, &family, given);
        if (slash)
            *slash = '/';
        if (r < 0 || net_subnet_parse(one, &s[n]) < 0)
            return err_set(err, EINVAL,
                           "pod CIDR `%s` is not a CIDR of a pod subnet (" POD_CIDR_RANGES ")",
                           one);
        if (memcmp(given, s[n].addr, 16) != 0) {
            char net[NET_SUBNET_STRLEN];
            net_subnet_format(&s[n], net, sizeof(net));
            return err_set(err, EINVAL, "pod CIDR `%s` has host bits set (the network is `%s`)",
                           one, net);
        }
        if (n == 1 && s[0].family == s[1].family)
            return err_set(err, EINVAL, "pod CIDRs `%s`: at most one per family", cidrs);
        n++;
        p += strcspn(p, ",");
        if (!*p)
            break;
    }
    if (n == 2 && s[0].family == AF_INET6) {
        struct net_subnet t = s[0];
        s[0] = s[1];
        s[1] = t;
    }
    if (ret)
        memcpy(ret, s, n * sizeof(s[0]));
    if (ret_n)
        *ret_n = n;
    return 0;
}

int net_config_set_subnets(struct net_config *cfg, const char *cidrs, struct err *err)
{
    struct net_subnet s[2];
    size_t n;
    int r = net_pod_cidrs_parse(cidrs, s, &n, err);
    if (r < 0)
        return r;
    memcpy(cfg->subnets, s, n * sizeof(s[0]));
    cfg->nsubnets = n;
    return 0;
}

static bool ifname_valid(const char *name)
{
    size_t n = strnlen(name, IFNAMSIZ);
    if (n == 0 || n >= IFNAMSIZ || !strcmp(name, ".") || !strcmp(name, ".."))
        return false;
    for (const char *c = name; *c; c++)
        if (*c == '/' || *c == ':' || *c <= ' ' || *c == 0x7f)
            return false;
    return true;
}

int net_config_set_bridge(struct net_config *cfg, const char *name, struct err *err)
{
    if (!name || !ifname_valid(name))
        return err_set(err, EINVAL, "invalid bridge name `%.32s`", name ? name : "");
    snprintf(cfg->bridge, sizeof(cfg->bridge), "%s", name);
    return 0;
}

int net_config_validate(const struct net_config *cfg, struct err *err)
{
    if (!ifname_valid(cfg->bridge))
        return err_set(err, EINVAL, "invalid bridge name `%.32s`", cfg->bridge);
    if (cfg->nsubnets == 0 || cfg->nsubnets > 2)
        return err_set(err, EINVAL, "no pod subnet configured");
    if (cfg->nsubnets == 2 && cfg->subnets[0].family == cfg->subnets[1].family)
        return err_set(err, EINVAL, "at most one pod subnet per address family");
    if (cfg->mtu && (cfg->mtu < 576 || cfg->mtu > 65535))
        return err_set(err, EINVAL, "invalid MTU %u", cfg->mtu);
    if (cfg->ipam_dir[0] != '/')
        return err_set(err, EINVAL, "IPAM directory must be absolute");
    return 0;
}

/* ---- node --------------------------------------------------------------- */

static pthread_mutex_t node_lock = PTHREAD_MUTEX_INITIALIZER;
static struct net_config node_done; /* the configuration last prepared */
static bool node_done_valid;

static int ensure_sysctl(const char *key, const char *value, struct err *err)
{
    char cur[32];
    if (net_sysctl_read(key, cur, sizeof(cur), NULL) >= 0 && !strcmp(cur, value))
        return 0;
    return net_sysctl_write(key, value, err);
}

/* Everything node-wide but the nftables table. */
static int node_prepare(const struct net_config *cfg, struct err *err)
{
    int r = net_config_validate(cfg, err);
    if (r < 0)
        return r;
    bool v6 = false;
    for (size_t i = 0; i < cfg->nsubnets; i++)
        v6 |= cfg->subnets[i].family == AF_INET6;
    if ((r = ensure_sysctl("net.ipv4.ip_forward", "1", err)) < 0)
        return r;
    if (v6 && (r = ensure_sysctl("net.ipv6.conf.all.forwarding", "1", err)) < 0)
        return r;
    if ((r = mkdir_p(cfg->ipam_dir, 0700)) < 0)
        return err_set(err, r, "create IPAM directory `%s`", cfg->ipam_dir);
    /* Leases are the daemon's alone; older versions could leave the IPAM
     * directory and its parent (<root>/net) 0600. */
    char parent[sizeof(cfg->ipam_dir)];
    snprintf(parent, sizeof(parent), "%s", cfg->ipam_dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        if ((r = dir_set_mode(parent, 0700)) < 0)
            return err_set(err, -r, "mode of `%s`", parent);
    }
    if ((r = dir_set_mode(cfg->ipam_dir, 0700)) < 0)
        return err_set(err, -r, "mode of `%s`", cfg->ipam_dir);
    return 0;
}

static int node_setup_locked(const struct net_config *cfg, struct err *err)
{
    int r = node_prepare(cfg, err);
    if (r < 0)
        return r;
    if ((r = net_nft_base_ensure(cfg, err)) < 0)
        return r;
    node_done = *cfg;
    node_done_valid = true;
    return 0;
}

int net_node_setup(const struct net_config *cfg, struct err *err)
{
    pthread_mutex_lock(&node_lock);
    node_done_valid = false;
    int r = node_setup_locked(cfg, err);
    pthread_mutex_unlock(&node_lock);
    return r < 0 ? err_wrap(err, "prepare node network") : 0;
}

int net_node_prepare(const struct net_config *cfg, struct err *err)
{
    int r = node_prepare(cfg, err);
    return r < 0 ? err_wrap(err, "prepare node network") : 0;
}

static bool node_prepared(void)
{
    pthread_mutex_lock(&node_lock);
    bool r = node_done_valid;
    pthread_mutex_unlock(&node_lock);
    return r;
}

static int node_setup_once(const struct net_config *cfg, struct err *err)
{
    pthread_mutex_lock(&node_lock);
    int r = 0;
    if (!node_done_valid || memcmp(&node_done, cfg, sizeof(*cfg)) != 0)
        r = node_setup_locked(cfg, err);
    pthread_mutex_unlock(&node_lock);
    return r < 0 ? err_wrap(err, "prepare node network") : 0;
}

int net_node_teardown(const struct net_config *cfg, struct err *err)
{
    pthread_mutex_lock(&node_lock);
    node_done_valid = false;
    pthread_mutex_unlock(&node_lock);
    int r = net_nft_table_delete(err);
    if (r < 0)
        return r;
    _cleanup_(nl_closep) struct nl *nl = NULL;
    if ((r = nl_open(-1, &nl, err)) < 0)
        return r;
    return net_link_delete(nl, cfg->bridge, err);
}

static int status(const struct net_config *cfg, bool table, bool *ret_ready, char *reason,
                  size_t reason_size)
{
    struct err e = {0};
    *ret_ready = false;
    if (net_config_validate(cfg, &e) < 0) {
        snprintf(reason, reason_size, "invalid network configuration: %s", err_str(&e));
        return 0;
    }
    char cur[32];
    if (net_sysctl_read("net.ipv4.ip_forward", cur, sizeof(cur), &e) < 0) {
        snprintf(reason, reason_size, "%s", err_str(&e));
        return 0;
    }
    if (strcmp(cur, "1") != 0) {
        snprintf(reason, reason_size, "net.ipv4.ip_forward is %s", cur);
        return 0;
    }
    bool exists = true;
    int r = table ? net_nft_table_exists(&exists, &e) : 0;
    if (r < 0) {
        snprintf(reason, reason_size, "%s", err_str(&e));
        return 0;
    }
    if (!exists) {
        snprintf(reason, reason_size, "nftables table `inet %s` is missing", NET_NFT_TABLE);
        return 0;
    }
    *ret_ready = true;
    if (reason_size)
        reason[0] = '\0';
    return 0;
}

int net_status(const struct net_config *cfg, bool *ret_ready, char *reason, size_t reason_size)
{
    return status(cfg, true, ret_ready, reason, reason_size);
}

int net_status_deferred(const struct net_config *cfg, bool *ret_ready, char *reason,
                        size_t reason_size)
{
    return status(cfg, node_prepared(), ret_ready, reason, reason_size);
}

/* ---- pods --------------------------------------------------------------- */

static int link_info_cb(const struct nlmsghdr *nlh, void *data)
{
    return nlh->nlmsg_type == RTM_NEWLINK ? nl_link_parse(nlh, data) : 0;
}

static int pod_netns_configure(struct nl *pnl, const struct net_config *cfg,
                               const uint8_t addrs[][16], struct err *err)
{
    /* eth0 up, and its index for the addresses, in one round trip. */
    struct nl_batch b;
    nl_batch_init(&b);
    nl_build_link_set(&b, NET_POD_IFNAME, true, 0);
    nl_build_link_get(&b, NET_POD_IFNAME);
    struct nl_link_info eth = {0};
    struct nl_result res;
    int r = nl_transact(pnl, &b, link_info_cb, &eth, &res, err);
    if (r < 0 || (r = nl_result_err(&res, 0, err, "bring `" NET_POD_IFNAME "` up")) < 0 ||
        (r = nl_result_err(&res, 1, err, "get `" NET_POD_IFNAME "`")) < 0)
        return r;
    if (eth.ifindex <= 0)
        return err_set(err, EBADMSG, "get `%s`: no reply", NET_POD_IFNAME);
    nl_batch_init(&b);
    nl_build_link_set(&b, "lo", true, 0);
    for (size_t i = 0; i < cfg->nsubnets; i++)
        nl_build_addr(&b, true, cfg->subnets[i].family, eth.ifindex, addrs[i],
                      cfg->subnets[i].prefix);
    for (size_t i = 0; i < cfg->nsubnets; i++) {
        uint8_t gw[16];
        net_subnet_gateway(&cfg->subnets[i], gw);
        nl_build_route_default(&b, true, cfg->subnets[i].family, eth.ifindex, gw);
    }
    r = nl_transact(pnl, &b, NULL, NULL, &res, err);
    if (r < 0)
        return r;
    static const char *const what[] = {"loopback up", "address", "address", "default route",
                                       "default route"};
    for (unsigned i = 0; i < b.nmsgs; i++) {
        unsigned w = i == 0 ? 0 : i <= cfg->nsubnets ? 1 : 3;
        if ((r = nl_result_err(&res, i, err, what[w])) < 0)
            return r;
    }
    return 0;
}

int net_pod_setup(const struct net_config *cfg, const char *pod_id, int netns_fd,
                  const struct net_port_mapping *ports, size_t nports, struct net_pod_result *ret,
                  struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    if (netns_fd < 0)
        return err_set(err, EBADF, "pod `%s`: no network namespace", pod_id);
    int r = net_config_validate(cfg, err);
    if (r < 0)
        return r;
    /* A pod given the node's own namespace would get eth0 and a default
     * route in it, taking over the node's network. */
    struct stat pst, sst;
    if (fstat(netns_fd, &pst) < 0)
        return err_set(err, errno, "pod `%s`: network namespace", pod_id);
    if (stat("/proc/thread-self/ns/net", &sst) == 0 && pst.st_dev == sst.st_dev &&
        pst.st_ino == sst.st_ino)
        return err_set(err, EINVAL, "pod `%s`: the network namespace is the node's own", pod_id);
    /* Check the port mappings before touching anything. */
    r = net_nft_ports_check(pod_id, ports, nports, err);
    if (r < 0)
        return err_wrap(err, "pod `%s`", pod_id);
    bool hostports = false;
    for (size_t i = 0; i < nports; i++)
        hostports |= ports[i].host_port != 0;

    if ((r = node_setup_once(cfg, err)) < 0)
        return r;

    char host[IFNAMSIZ];
    net_pod_host_ifname(pod_id, host);
    uint8_t addrs[2][16];
    size_t nalloc = 0;
    bool veth = false, rules = false;
    struct err ignored;
    _cleanup_(nl_closep) struct nl *nl = NULL;
    _cleanup_(nl_closep) struct nl *pnl = NULL;
    int bridge = 0;

    if ((r = nl_open(-1, &nl, err)) < 0)
        goto fail;
    if ((r = net_bridge_ensure(nl, cfg, &bridge, err)) < 0)
        goto fail;
    for (; nalloc < cfg->nsubnets; nalloc++) {
        r = net_ipam_alloc(cfg->ipam_dir, &cfg->subnets[nalloc], pod_id,
                           hostports ? NET_IPAM_HOSTPORTS_FLAG : NULL, addrs[nalloc], err);
        if (r < 0)
            goto fail;
    }
    if ((r = net_veth_create(nl, host, netns_fd, cfg->mtu, bridge, err)) < 0) {
        if (r == -EEXIST)
            err_set(err, EEXIST, "pod already has network (`%s` or the pod's `%s` exists)", host,
                    NET_POD_IFNAME);
        goto fail;
    }
    veth = true;
    if ((r = nl_open(netns_fd, &pnl, err)) < 0)
        goto fail;
    if ((r = pod_netns_configure(pnl, cfg, (const uint8_t(*)[16])addrs, err)) < 0)
        goto fail;

    memset(ret, 0, sizeof(*ret));
    snprintf(ret->host_ifname, sizeof(ret->host_ifname), "%s", host);
    struct net_nft_dnat dnat[2];
    for (size_t i = 0; i < cfg->nsubnets; i++) {
        const struct net_subnet *s = &cfg->subnets[i];
        struct net_pod_ip *ip = &ret->ips[ret->nips++];
        uint8_t gw[16];
        net_subnet_gateway(s, gw);
        ip->family = s->family;
        ip->prefix = s->prefix;
        net_addr_format(s->family, addrs[i], ip->addr, sizeof(ip->addr));
        net_addr_format(s->family, gw, ip->gateway, sizeof(ip->gateway));
        dnat[i].family = s->family;
        memcpy(dnat[i].addr, ip->addr, sizeof(dnat[i].addr));
    }
    if (hostports) {
        /* Connections to 127.0.0.1:<host port> are DNATed out of the bridge
         * with a loopback source until masqueraded: allow that there. */
        char key[64];
        snprintf(key, sizeof(key), "net/ipv4/conf/%s/route_localnet", cfg->bridge);
        if ((r = ensure_sysctl(key, "1", err)) < 0)
            goto fail;
        rules = true;
        if ((r = net_nft_pod_add(cfg, pod_id, dnat, cfg->nsubnets, ports, nports, err)) < 0)
            goto fail;
        /* Stale UDP flows to the new host ports would bypass the DNAT. Best
         * effort, like CNI portmap: a failure here leaves a degraded port,
         * not a broken pod. */
        for (size_t i = 0; i < nports; i++) {
            if (ports[i].protocol != NET_PROTO_UDP || !ports[i].host_port)
                continue;
            for (size_t k = 0; k < cfg->nsubnets; k++)
                if (net_conntrack_flush_dport(cfg->subnets[k].family, IPPROTO_UDP,
                                              ports[i].host_port, &ignored) < 0)
                    log_debug("pod `%s`: UDP port %u: %s", pod_id, ports[i].host_port,
                              err_str(&ignored));
        }
    }
    return 0;

fail:
    if (rules)
        net_nft_pod_remove(pod_id, &ignored);
    if (veth && nl)
        net_link_delete(nl, host, &ignored);
    while (nalloc-- > 0)
        net_ipam_release_addr(cfg->ipam_dir, &cfg->subnets[nalloc], addrs[nalloc], &ignored);
    return err_wrap(err, "set up network of pod `%s`", pod_id);
}

/* Host port rules first: they point at the pod's address. */
static int teardown_rules(const struct net_config *cfg, const char *pod_id, struct err *err)
{
    _cleanup_free_ struct net_ipam_lease *leases = NULL;
    size_t n = 0;
    int r = net_ipam_list(cfg->ipam_dir, &leases, &n, err);
    if (r < 0)
        return r;
    bool hostports = false;
    for (size_t i = 0; i < n; i++)
        hostports |= leases[i].hostports && !strcmp(leases[i].pod_id, pod_id);
    return hostports ? net_nft_pod_remove(pod_id, err) : 0;
}

/* Then the veth pair (deleting the host end removes the pod end too; if the
 * pod's namespace is already gone, so is the pair), and only then the
 * leases, so an address is never reused while its old link exists. */
static int teardown_link_leases(const char *ipam_dir, const char *pod_id, struct err *err)
{
    char host[IFNAMSIZ];
    net_pod_host_ifname(pod_id, host);
    _cleanup_(nl_closep) struct nl *nl = NULL;
    int r;
    if ((r = nl_open(-1, &nl, err)) < 0 || (r = net_link_delete(nl, host, err)) < 0)
        return r;
    return net_ipam_release(ipam_dir, pod_id, err);
}

int net_pod_teardown(const struct net_config *cfg, const char *pod_id, struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    if (teardown_rules(cfg, pod_id, err) < 0 ||
        teardown_link_leases(cfg->ipam_dir, pod_id, err) < 0)
        return err_wrap(err, "tear down network of pod `%s`", pod_id);
    return 0;
}

/* ---- background link deletion -------------------------------------------
 * Deleting a network device waits for RCU (rcu_barrier in netdev_run_todo):
 * some 20-30 ms whatever we do. net_pod_teardown_async leaves that wait to
 * a detached thread, at most BG_MAX at a time (beyond that the caller waits
 * as with net_pod_teardown). */

#define BG_MAX 16

static pthread_mutex_t bg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bg_cond = PTHREAD_COND_INITIALIZER;
static unsigned bg_running;

struct bg_job {
    char ipam_dir[sizeof(((struct net_config *)0)->ipam_dir)];
    char pod_id[NET_POD_ID_MAX + 1];
};

static void *bg_main(void *data)
{
    struct bg_job *job = data;
    struct err e = {0};
    /* On failure the leases stay: a later teardown (or the restart's
     * recovery through net_pod_ids) finishes the job. */
    if (teardown_link_leases(job->ipam_dir, job->pod_id, &e) < 0)
        log_debug("pod `%s`: background network teardown: %s", job->pod_id, err_str(&e));
    free(job);
    pthread_mutex_lock(&bg_lock);
    bg_running--;
    pthread_cond_broadcast(&bg_cond);
    pthread_mutex_unlock(&bg_lock);
    return NULL;
}

int net_pod_teardown_async(const struct net_config *cfg, const char *pod_id, struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    if (teardown_rules(cfg, pod_id, err) < 0)
        return err_wrap(err, "tear down network of pod `%s`", pod_id);
    struct bg_job *job = calloc(1, sizeof(*job));
    bool started = false;
    if (job) {
        snprintf(job->ipam_dir, sizeof(job->ipam_dir), "%s", cfg->ipam_dir);
        snprintf(job->pod_id, sizeof(job->pod_id), "%s", pod_id);
        pthread_mutex_lock(&bg_lock);
        if (bg_running < BG_MAX) {
            pthread_attr_t attr;
            pthread_t t;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            started = pthread_create(&t, &attr, bg_main, job) == 0;
            pthread_attr_destroy(&attr);
            if (started)
                bg_running++;
        }
        pthread_mutex_unlock(&bg_lock);
        if (!started)
            free(job);
    }
    if (!started && teardown_link_leases(cfg->ipam_dir, pod_id, err) < 0)
        return err_wrap(err, "tear down network of pod `%s`", pod_id);
    return 0;
}

void net_pod_teardown_wait(void)
{
    pthread_mutex_lock(&bg_lock);
    while (bg_running)
        pthread_cond_wait(&bg_cond, &bg_lock);
    pthread_mutex_unlock(&bg_lock);
}

int net_pod_ips(const struct net_config *cfg, const char *pod_id, struct net_pod_result *ret,
                struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    _cleanup_free_ struct net_ipam_lease *leases = NULL;
    size_t n = 0;
    int r = net_ipam_list(cfg->ipam_dir, &leases, &n, err);
    if (r < 0)
        return r;
    memset(ret, 0, sizeof(*ret));
    net_pod_host_ifname(pod_id, ret->host_ifname);
    for (int fam = 0; fam < 2; fam++) {
        int want = fam == 0 ? AF_INET : AF_INET6;
        for (size_t i = 0; i < n && ret->nips < 2; i++) {
            if (leases[i].family != want || strcmp(leases[i].pod_id, pod_id) != 0)
                continue;
            struct net_pod_ip *ip = &ret->ips[ret->nips++];
            struct net_subnet s = {.family = want, .prefix = leases[i].prefix};
            memcpy(s.addr, leases[i].addr, 16);
            char text[NET_SUBNET_STRLEN];
            net_subnet_format(&s, text, sizeof(text));
            net_subnet_parse(text, &s); /* masks the host bits */
            uint8_t gw[16];
            net_subnet_gateway(&s, gw);
            ip->family = want;
            ip->prefix = leases[i].prefix;
            net_addr_format(want, leases[i].addr, ip->addr, sizeof(ip->addr));
            net_addr_format(want, gw, ip->gateway, sizeof(ip->gateway));
            break;
        }
    }
    return 0;
}

void net_pod_ids_free(char **ids, size_t n)
{
    for (size_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
}

int net_pod_ids(const struct net_config *cfg, char ***ret, size_t *ret_n, struct err *err)
{
    _cleanup_free_ struct net_ipam_lease *leases = NULL;
    size_t n = 0, k = 0;
    int r = net_ipam_list(cfg->ipam_dir, &leases, &n, err);
    if (r < 0)
        return r;
    char **ids = calloc(n ? n : 1, sizeof(char *));
    if (!ids)
        return err_set(err, ENOMEM, "pod ids");
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        for (size_t j = 0; j < k && !dup; j++)
            dup = !strcmp(ids[j], leases[i].pod_id);
        if (dup)
            continue;
        ids[k] = strdup(leases[i].pod_id);
        if (!ids[k]) {
            net_pod_ids_free(ids, k);
            return err_set(err, ENOMEM, "pod ids");
        }
        k++;
    }
    *ret = ids;
    *ret_n = k;
    return 0;
}
