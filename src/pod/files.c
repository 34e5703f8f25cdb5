/* pod/files: what a pod's /etc files and sysctls look like (pure). */
#include <arpa/inet.h>
#include <sched.h>
#include <string.h>

#include "pod/pod.h"

int pod_sysctl_namespace(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > 255 || key[0] == '.' || key[0] == '/' || strstr(key, "..") ||
        strstr(key, "//") || key[n - 1] == '.' || key[n - 1] == '/')
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '/' || c == '_' || c == '-'))
            return -EINVAL;
    }
    char norm[256];
    pod_sysctl_path(key, norm, sizeof(norm));
    if (str_has_prefix(norm, "net/"))
        return CLONE_NEWNET;
    if (str_has_prefix(norm, "kernel/shm") || str_has_prefix(norm, "kernel/msg") ||
        strcmp(norm, "kernel/sem") == 0 || str_has_prefix(norm, "fs/mqueue/"))
        return CLONE_NEWIPC;
    return -EINVAL;
}

int pod_sysctl_path(const char *key, char *buf, size_t size)
{
    /* With a '/' the separators are slashes and dots are literal (an
     * interface such as eth0.1), as kubelet accepts. */
    bool slashes = strchr(key, '/') != NULL;
    if (strlen(key) >= size)
        return -ENAMETOOLONG;
    size_t i = 0;
    for (; key[i]; i++)
        buf[i] = !slashes && key[i] == '.' ? '/' : key[i];
    buf[i] = '\0';
    return 0;
}

static bool dns_item_valid(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == '#' || s[i] == ';' || s[i] == 0x7f)
            return false;
    return true;
}

int pod_resolv_conf_build(const struct pod_sandbox_spec *s, struct buf *b, struct err *err)
{
    if (s->n_dns_servers > POD_DNS_SERVERS_MAX)
        return err_set(err, EINVAL, "dns_config.servers: more than %d", POD_DNS_SERVERS_MAX);
    if (s->n_dns_searches > POD_DNS_SEARCHES_MAX)
        return err_set(err, EINVAL, "dns_config.searches: more than %d", POD_DNS_SEARCHES_MAX);
    if (s->n_dns_options > POD_DNS_OPTIONS_MAX)
        return err_set(err, EINVAL, "dns_config.options: more than %d", POD_DNS_OPTIONS_MAX);
    for (size_t i = 0; i < s->n_dns_servers; i++) {
        uint8_t a[16];
        if (inet_pton(AF_INET, s->dns_servers[i], a) != 1 &&
            inet_pton(AF_INET6, s->dns_servers[i], a) != 1)
            return err_set(err, EINVAL, "dns_config.servers: `%.64s` is not an IP address",
                           s->dns_servers[i]);
        if (buf_printf(b, "nameserver %s\n", s->dns_servers[i]) < 0)
            return err_set(err, ENOMEM, "resolv.conf");
    }
    for (size_t i = 0; i < s->n_dns_searches; i++) {
        if (!dns_item_valid(s->dns_searches[i], 253))
            return err_set(err, EINVAL, "dns_config.searches: `%.64s` is not a domain",
                           s->dns_searches[i]);
        if (buf_printf(b, "%s%s", i ? " " : "search ", s->dns_searches[i]) < 0)
            return err_set(err, ENOMEM, "resolv.conf");
    }
    if (s->n_dns_searches && buf_append(b, "\n", 1) < 0)
        return err_set(err, ENOMEM, "resolv.conf");
    for (size_t i = 0; i < s->n_dns_options; i++) {
        if (!dns_item_valid(s->dns_options[i], 128))
            return err_set(err, EINVAL, "dns_config.options: `%.64s` is not an option",
                           s->dns_options[i]);
        if (buf_printf(b, "%s%s", i ? " " : "options ", s->dns_options[i]) < 0)
            return err_set(err, ENOMEM, "resolv.conf");
    }
    if (s->n_dns_options && buf_append(b, "\n", 1) < 0)
        return err_set(err, ENOMEM, "resolv.conf");
    return 0;
}

int pod_hosts_build(const char *hostname, const struct net_pod_result *net, struct buf *b)
{
    if (buf_printf(b, "127.0.0.1\tlocalhost\n"
                      "::1\tlocalhost ip6-localhost ip6-loopback\n"
                      "fe00::0\tip6-localnet\n"
                      "fe00::0\tip6-mcastprefix\n"
                      "fe00::1\tip6-allnodes\n"
                      "fe00::2\tip6-allrouters\n") < 0)
        return -ENOMEM;
    for (size_t i = 0; net && i < net->nips; i++)
        if (buf_printf(b, "%s\t%s\n", net->ips[i].addr, hostname) < 0)
            return -ENOMEM;
    return 0;
}

bool pod_hostname_valid(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return false;
    }
    return h[0] != '-' && h[0] != '.';
}

int pod_sandbox_spec_check(const struct pod_sandbox_spec *s, struct err *err)
{
    if (s->hostname && *s->hostname && !pod_hostname_valid(s->hostname))
        return err_set(err, EINVAL, "hostname `%.80s` is not a valid host name", s->hostname);
    if (s->n_sysctls > POD_SYSCTLS_MAX)
        return err_set(err, EINVAL, "sysctls: more than %d", POD_SYSCTLS_MAX);
    /* A pod in a user namespace of its own owns every namespace it has:
     * the host's network, IPC or PID namespace is not the user
     * namespace's to administer (sysfs, mqueue and /proc could not be
     * mounted), so these are refused, as kubelet's validation does. */
    if (s->uid_map && (s->host_network || s->host_ipc || s->pid_mode == POD_PID_NODE))
        return err_set(err, EINVAL,
                       "a pod with a user namespace (hostUsers: false) cannot use the host's %s "
                       "namespace",
                       s->host_network ? "network"
                       : s->host_ipc   ? "IPC"
                                       : "PID");
    if (!s->uid_map != !s->gid_map)
        return err_set(err, EINVAL, "a user namespace needs uid and gid mappings");
    for (size_t i = 0; i < s->n_sysctls; i++) {
        const char *k = s->sysctls[i].key, *v = s->sysctls[i].value;
        int ns = pod_sysctl_namespace(k);
        if (ns < 0)
            return err_set(err, EINVAL,
                           "sysctl `%.128s` is not namespaced (allowed: net.*, kernel.shm*, "
                           "kernel.msg*, kernel.sem, fs.mqueue.*)",
                           k);
        if (ns == CLONE_NEWNET && s->host_network)
            return err_set(err, EINVAL,
                           "sysctl `%.128s` needs the pod's own network namespace, "
                           "not the host network",
                           k);
        if (ns == CLONE_NEWIPC && s->host_ipc)
            return err_set(err, EINVAL, "sysctl `%.128s` needs the pod's own IPC namespace", k);
        if (strlen(v) > 1024 || strchr(v, '\n'))
            return err_set(err, EINVAL, "sysctl `%.128s`: bad value", k);
    }
    struct buf b = {0};
    int r = pod_resolv_conf_build(s, &b, err);
    buf_free(&b);
    return r;
}
