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
 * The rules are built as nft command text by pure functions (unit-tested)
 * and every change is applied as one nft transaction, so the kernel sees all
 * of it or nothing. libnftables contexts are not shared between threads: the
 * calls are serialized by a process-wide mutex (transactions from several
 * processes are serialized by the kernel). */
#include <jansson.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <string.h>

#include "net/internal.h"

#define T              "inet " NET_NFT_TABLE
#define COMMENT_PREFIX "kinglet:"

static pthread_mutex_t nft_lock = PTHREAD_MUTEX_INITIALIZER;

int net_nft_base_build(const struct net_config *cfg, struct buf *out)
{
    int r = 0;
    r |= buf_printf(out, "add table " T "\n");
    r |= buf_printf(out, "add chain " T " hostports\n");
    r |= buf_printf(out, "add chain " T " prerouting { type nat hook prerouting priority -100; "
                         "policy accept; }\n");
    r |= buf_printf(out, "flush chain " T " prerouting\n");
    r |= buf_printf(out, "add rule " T " prerouting fib daddr type local jump hostports\n");
    r |= buf_printf(out, "add chain " T " output { type nat hook output priority -100; "
                         "policy accept; }\n");
    r |= buf_printf(out, "flush chain " T " output\n");
    /* IPv6 has no route_localnet: ::1 cannot be DNATed to a pod, so let such
     * connections be refused instead of black-holed. */
    r |= buf_printf(out, "add rule " T " output ip6 daddr ::1 return\n");
    r |= buf_printf(out, "add rule " T " output fib daddr type local jump hostports\n");
    r |= buf_printf(out, "add chain " T " postrouting { type nat hook postrouting priority 100; "
                         "policy accept; }\n");
    r |= buf_printf(out, "flush chain " T " postrouting\n");
    r |= buf_printf(out, "add rule " T " postrouting ct status dnat ip saddr 127.0.0.0/8 "
                         "masquerade\n");
    for (size_t i = 0; i < cfg->nsubnets; i++) {
        char s[NET_SUBNET_STRLEN];
        net_subnet_format(&cfg->subnets[i], s, sizeof(s));
        const char *ip = cfg->subnets[i].family == AF_INET ? "ip" : "ip6";
        r |= buf_printf(out,
                        "add rule " T " postrouting ct status dnat %s saddr %s %s daddr %s "
                        "masquerade\n",
                        ip, s, ip, s);
        r |= buf_printf(out, "add rule " T " postrouting %s saddr %s %s daddr != %s masquerade\n",
                        ip, s, ip, s);
    }
    return r ? -ENOMEM : 0;
}

static const char *proto_name(enum net_proto p)
{
    switch (p) {
    case NET_PROTO_TCP:
        return "tcp";
    case NET_PROTO_UDP:
        return "udp";
    case NET_PROTO_SCTP:
        return "sctp";
    }
    return NULL;
}

int net_nft_pod_build(const char *pod_id, const struct net_nft_dnat *ips, size_t nips,
                      const struct net_port_mapping *ports, size_t nports, struct buf *out,
                      struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    if (nports > NET_PORTS_MAX)
        return err_set(err, EINVAL, "too many port mappings (%zu, at most %d)", nports,
                       NET_PORTS_MAX);
    int r = 0;
    for (size_t i = 0; i < nports; i++) {
        const struct net_port_mapping *m = &ports[i];
        const char *proto = proto_name(m->protocol);
        if (!proto)
            return err_set(err, EINVAL, "port mapping %zu: unknown protocol %d", i,
                           (int)m->protocol);
        if (m->host_port == 0)
            continue; /* no host port: nothing to publish */
        if (m->container_port == 0)
            return err_set(err, EINVAL, "port mapping %zu: container port 0", i);
        int hfam = 0;
        uint8_t haddr[16];
        char hip[INET6_ADDRSTRLEN] = "";
        if (m->host_ip && m->host_ip[0]) {
            if (net_addr_parse(m->host_ip, &hfam, haddr) < 0)
                return err_set(err, EINVAL, "port mapping %zu: invalid host IP `%.64s`", i,
                               m->host_ip);
            static const uint8_t zero[16];
            if (!memcmp(haddr, zero, 16))
                hfam = 0; /* 0.0.0.0 / :: mean every address, as with kubelet */
            else
                net_addr_format(hfam, haddr, hip, sizeof(hip));
        }
        for (size_t k = 0; k < nips; k++) {
            const struct net_nft_dnat *d = &ips[k];
            if (hfam && hfam != d->family)
                continue;
            bool v4 = d->family == AF_INET;
            r |= buf_printf(out, "add rule " T " hostports ");
            if (hfam)
                r |= buf_printf(out, "%s daddr %s ", v4 ? "ip" : "ip6", hip);
            else
                r |= buf_printf(out, "meta nfproto %s ", v4 ? "ipv4" : "ipv6");
            r |= buf_printf(out,
                            "meta l4proto %s th dport %u dnat %s to %s%s%s:%u comment \"%s%s\"\n",
                            proto, m->host_port, v4 ? "ip" : "ip6", v4 ? "" : "[", d->addr,
                            v4 ? "" : "]", m->container_port, COMMENT_PREFIX, pod_id);
        }
    }
    return r ? err_set(err, ENOMEM, "build host port rules") : 0;
}

int net_nft_pod_delete_build(const char *json, const char *pod_id, struct buf *out, struct err *err)
{
    char want[NET_POD_ID_MAX + sizeof(COMMENT_PREFIX) + 1];
    snprintf(want, sizeof(want), COMMENT_PREFIX "%s", pod_id);
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root)
        return err_set(err, EBADMSG, "nft listing: %s", jerr.text);
    json_t *items = json_object_get(root, "nftables");
    if (!json_is_array(items)) {
        json_decref(root);
        return err_set(err, EBADMSG, "nft listing: no `nftables` array");
    }
    int r = 0;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        json_t *rule = json_object_get(it, "rule");
        if (!json_is_object(rule))
            continue;
        const char *comment = json_string_value(json_object_get(rule, "comment"));
        const char *chain = json_string_value(json_object_get(rule, "chain"));
        const char *table = json_string_value(json_object_get(rule, "table"));
        const char *family = json_string_value(json_object_get(rule, "family"));
        json_t *handle = json_object_get(rule, "handle");
        if (!comment || strcmp(comment, want) != 0 || !chain || strcmp(chain, "hostports") ||
            !table || strcmp(table, NET_NFT_TABLE) || !family || strcmp(family, "inet") ||
            !json_is_integer(handle) || json_integer_value(handle) <= 0)
            continue;
        r |= buf_printf(out, "delete rule " T " hostports handle %lld\n",
                        (long long)json_integer_value(handle));
    }
    json_decref(root);
    return r ? err_set(err, ENOMEM, "build rule deletion") : 0;
}

/* errno for an nft error text: libnftables reports only text. */
static int nft_errno(const char *msg)
{
    if (!msg)
        return EIO;
    if (strstr(msg, "No such file or directory"))
        return ENOENT;
    if (strstr(msg, "Operation not permitted"))
        return EPERM;
    if (strstr(msg, "File exists"))
        return EEXIST;
    if (strstr(msg, "Device or resource busy"))
        return EBUSY;
    if (strstr(msg, "Cannot allocate memory"))
        return ENOMEM;
    return EIO;
}

/* One libnftables context for the process, created on first use and only
 * used under nft_lock (creating one per call costs more than the
 * transaction itself). Its cache is revalidated by libnftables against the
 * kernel's ruleset generation, so changes made by others are seen. */
static struct nft_ctx *nft_ctx;

/* Runs cmds; with ret_out, the (JSON) output is returned. Caller holds the
 * lock. */
static int nft_run_locked(const char *cmds, bool json, char **ret_out, struct err *err)
{
    if (!nft_ctx) {
        nft_ctx = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!nft_ctx)
            return err_set(err, ENOMEM, "nftables context");
        /* libnftables opens its netlink socket without SOCK_CLOEXEC: every
         * child the daemon spawns would inherit it. */
        fds_set_cloexec(3);
        if (nft_ctx_buffer_output(nft_ctx) < 0 || nft_ctx_buffer_error(nft_ctx) < 0) {
            nft_ctx_free(nft_ctx);
            nft_ctx = NULL;
            return err_set(err, ENOMEM, "nftables buffers");
        }
    }
    nft_ctx_output_set_flags(nft_ctx, json ? NFT_CTX_OUTPUT_JSON | NFT_CTX_OUTPUT_HANDLE : 0);
    int r = 0;
    int rc = nft_run_cmd_from_buffer(nft_ctx, cmds);
    /* Reading a buffer also rewinds it for the next command. */
    const char *msg = nft_ctx_get_error_buffer(nft_ctx);
    const char *out = nft_ctx_get_output_buffer(nft_ctx);
    if (rc != 0) {
        char first[256] = "";
        if (msg) {
            /* The first line says what failed; the rest echoes the command. */
            snprintf(first, sizeof(first), "%.*s", (int)strcspn(msg, "\n"), msg);
        }
        /* The text already ends with the strerror() of the failure. */
        err_set(err, 0, "nftables: %s", first[0] ? first : "command failed");
        r = -nft_errno(msg);
        if (err)
            err->code = -r;
    } else if (ret_out) {
        *ret_out = strdup(out ? out : "");
        if (!*ret_out)
            r = err_set(err, ENOMEM, "nftables output");
    }
    return r;
}

int net_nft_apply(const char *cmds, struct err *err)
{
    pthread_mutex_lock(&nft_lock);
    int r = nft_run_locked(cmds, false, NULL, err);
    pthread_mutex_unlock(&nft_lock);
    return r;
}

int net_nft_base_ensure(const struct net_config *cfg, struct err *err)
{
    struct buf b = {0};
    if (net_nft_base_build(cfg, &b) < 0 || buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return err_set(err, ENOMEM, "build base ruleset");
    }
    pthread_mutex_lock(&nft_lock);
    int r = nft_run_locked((const char *)b.data, false, NULL, err);
    pthread_mutex_unlock(&nft_lock);
    buf_free(&b);
    return r < 0 ? err_wrap(err, "nftables table `" T "`") : 0;
}

int net_nft_pod_add(const struct net_config *cfg, const char *pod_id,
                    const struct net_nft_dnat *ips, size_t nips,
                    const struct net_port_mapping *ports, size_t nports, struct err *err)
{
    struct buf pod = {0}, all = {0};
    int r = net_nft_pod_build(pod_id, ips, nips, ports, nports, &pod, err);
    if (r < 0 || pod.len == 0) {
        buf_free(&pod);
        return r < 0 ? r : 0;
    }
    /* The base chains go in the same transaction: the table may have been
     * removed behind our back, and then the masquerade must come back too. */
    if (net_nft_base_build(cfg, &all) < 0 || buf_append(&all, pod.data, pod.len) < 0 ||
        buf_append(&all, "", 1) < 0) {
        buf_free(&pod);
        buf_free(&all);
        return err_set(err, ENOMEM, "host port rules");
    }
    buf_free(&pod);
    pthread_mutex_lock(&nft_lock);
    r = nft_run_locked((const char *)all.data, false, NULL, err);
    pthread_mutex_unlock(&nft_lock);
    buf_free(&all);
    return r < 0 ? err_wrap(err, "host ports") : 0;
}

int net_nft_pod_remove(const char *pod_id, struct err *err)
{
    pthread_mutex_lock(&nft_lock);
    _cleanup_free_ char *listing = NULL;
    int r = nft_run_locked("list chain " T " hostports", true, &listing, err);
    if (r == -ENOENT) {
        /* No table or chain: no rules of this pod either. */
        pthread_mutex_unlock(&nft_lock);
        err_clear(err);
        return 0;
    }
    struct buf b = {0};
    if (r >= 0)
        r = net_nft_pod_delete_build(listing, pod_id, &b, err);
    if (r >= 0 && b.len > 0) {
        if (buf_append(&b, "", 1) < 0)
            r = err_set(err, ENOMEM, "host port rules");
        else
            r = nft_run_locked((const char *)b.data, false, NULL, err);
    }
    pthread_mutex_unlock(&nft_lock);
    buf_free(&b);
    return r < 0 ? err_wrap(err, "remove host ports") : 0;
}

int net_nft_table_delete(struct err *err)
{
    pthread_mutex_lock(&nft_lock);
    /* "destroy" needs nft 1.0.8; add+delete in one transaction never fails
     * on a missing table and is just as atomic. */
    int r = nft_run_locked("add table " T "\ndelete table " T "\n", false, NULL, err);
    pthread_mutex_unlock(&nft_lock);
    return r < 0 ? err_wrap(err, "delete table `" T "`") : 0;
}

int net_nft_table_exists(bool *ret, struct err *err)
{
    pthread_mutex_lock(&nft_lock);
    _cleanup_free_ char *out = NULL;
    int r = nft_run_locked("list table " T, true, &out, err);
    pthread_mutex_unlock(&nft_lock);
    if (r == -ENOENT) {
        err_clear(err);
        *ret = false;
        return 0;
    }
    if (r < 0)
        return r;
    *ret = true;
    return 0;
}
