/* Pure checks of CRI requests: names, namespace modes, host ports (see
 * validate.h). Nothing here allocates or touches the system, so every
 * refusal can be tested in isolation, and handlers call these before any
 * work starts. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <string.h>

#include "cri/validate.h"

static bool alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* One label of n bytes at s. */
static bool label_ok(const char *s, size_t n)
{
    if (n == 0 || !alnum(s[0]) || !alnum(s[n - 1]))
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (!alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

bool cri_dns_label_valid(const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    return n <= max && label_ok(s, n);
}

bool cri_dns_subdomain_valid(const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    if (n == 0 || n > max)
        return false;
    for (const char *p = s;;) {
        const char *dot = memchr(p, '.', (size_t)(s + n - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(s + n - p);
        if (!label_ok(p, len))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

static bool uid_valid(const char *s)
{
    size_t n = s ? strnlen(s, CRI_UID_MAX + 1) : 0;
    if (n == 0 || n > CRI_UID_MAX || !alnum(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!alnum(s[i]) && s[i] != '-' && s[i] != '.' && s[i] != '_')
            return false;
    return true;
}

int cri_pod_metadata_check(const Runtime__V1__PodSandboxMetadata *md, struct err *err)
{
    if (!md || !md->name || !*md->name || !md->namespace_ || !*md->namespace_ || !md->uid ||
        !*md->uid)
        return err_set(err, EINVAL, "config.metadata needs a name, a namespace and a uid");
    if (!cri_dns_subdomain_valid(md->name, CRI_DNS_SUBDOMAIN_MAX))
        return err_set(err, EINVAL,
                       "config.metadata.name `%.64s` is not a DNS-1123 subdomain (letters, "
                       "digits, '-' and '.', at most %d)",
                       md->name, CRI_DNS_SUBDOMAIN_MAX);
    if (!cri_dns_label_valid(md->namespace_, CRI_DNS_LABEL_MAX))
        return err_set(err, EINVAL,
                       "config.metadata.namespace `%.64s` is not a DNS-1123 label (letters, "
                       "digits and '-', at most %d)",
                       md->namespace_, CRI_DNS_LABEL_MAX);
    if (!uid_valid(md->uid))
        return err_set(err, EINVAL,
                       "config.metadata.uid `%.64s` is not a uid (letters, digits, '-', '.' "
                       "and '_', at most %d)",
                       md->uid, CRI_UID_MAX);
    return 0;
}

int cri_container_metadata_check(const Runtime__V1__ContainerMetadata *md, struct err *err)
{
    if (!md || !md->name || !*md->name)
        return err_set(err, EINVAL, "config.metadata needs a name");
    if (!cri_dns_label_valid(md->name, CRI_DNS_SUBDOMAIN_MAX))
        return err_set(err, EINVAL,
                       "config.metadata.name `%.64s` is not a DNS-1123 label (letters, digits "
                       "and '-', at most %d)",
                       md->name, CRI_DNS_SUBDOMAIN_MAX);
    return 0;
}

static const char *mode_name(int m)
{
    switch (m) {
    case RUNTIME__V1__NAMESPACE_MODE__POD:
        return "POD";
    case RUNTIME__V1__NAMESPACE_MODE__CONTAINER:
        return "CONTAINER";
    case RUNTIME__V1__NAMESPACE_MODE__NODE:
        return "NODE";
    case RUNTIME__V1__NAMESPACE_MODE__TARGET:
        return "TARGET";
    }
    return NULL;
}

/* mode must be one of the allowed ones (a bit mask of 1 << mode). */
static int mode_check(const char *field, int mode, unsigned allowed, struct err *err)
{
    const char *name = mode_name(mode);
    if (!name)
        return err_set(err, EINVAL, "namespace_options.%s: undefined namespace mode %d", field,
                       mode);
    if (!(allowed & (1u << mode)))
        return err_set(err, EINVAL, "namespace_options.%s: a pod cannot use mode %s", field, name);
    return 0;
}

int cri_pod_namespace_check(const Runtime__V1__NamespaceOption *ns, struct err *err)
{
    if (!ns)
        return 0;
    const unsigned pod = 1u << RUNTIME__V1__NAMESPACE_MODE__POD,
                   ctr = 1u << RUNTIME__V1__NAMESPACE_MODE__CONTAINER,
                   node = 1u << RUNTIME__V1__NAMESPACE_MODE__NODE;
    int r;
    if ((r = mode_check("network", ns->network, pod | node, err)) < 0 ||
        (r = mode_check("ipc", ns->ipc, pod | node, err)) < 0)
        return r;
    if (ns->pid == RUNTIME__V1__NAMESPACE_MODE__TARGET) {
        /* TARGET joins the PID namespace of the container named by
         * target_id: it is how a container (an ephemeral debug container)
         * shares another's, and a pod sandbox, made before any of its
         * containers, has none to name. */
        if (!ns->target_id || !*ns->target_id)
            return err_set(err, EINVAL,
                           "namespace_options.pid: TARGET needs target_id naming a container");
        return err_set(err, EINVAL,
                       "namespace_options.pid: TARGET (container `%.64s`) is for containers; a "
                       "pod sandbox cannot join a container's PID namespace",
                       ns->target_id);
    }
    if ((r = mode_check("pid", ns->pid, pod | ctr | node, err)) < 0)
        return r;
    if (ns->userns_options && (r = cri_userns_check(ns->userns_options, err)) < 0)
        return r;
    return 0;
}

static int idmap_check(const char *what, Runtime__V1__IDMapping *const *m, size_t n,
                       struct err *err)
{
    if (n != 1)
        return err_set(err, EINVAL,
                       "namespace_options.userns_options.%s: exactly one mapping is supported, "
                       "got %zu",
                       what, n);
    if (m[0]->container_id != 0)
        return err_set(err, EINVAL,
                       "namespace_options.userns_options.%s: container ID 0 must be mapped (the "
                       "mapping starts at %u)",
                       what, m[0]->container_id);
    if (m[0]->length == 0 || (uint64_t)m[0]->host_id + m[0]->length > UINT32_MAX)
        return err_set(err, EINVAL,
                       "namespace_options.userns_options.%s: host ID %u length %u is not a range",
                       what, m[0]->host_id, m[0]->length);
    /* kubelet gives each pod 65536 IDs or a multiple (idsPerPod); the
     * pod's init runs as ID 65535, which a shorter range leaves unmapped */
    if (m[0]->length < 65536)
        return err_set(err, EINVAL,
                       "namespace_options.userns_options.%s: length %u is below 65536 (kubelet "
                       "maps 65536 IDs or more per pod; the pod's init runs as ID 65535)",
                       what, m[0]->length);
    return 0;
}

int cri_userns_check(const Runtime__V1__UserNamespace *u, struct err *err)
{
    const unsigned pod = 1u << RUNTIME__V1__NAMESPACE_MODE__POD,
                   node = 1u << RUNTIME__V1__NAMESPACE_MODE__NODE;
    int r;
    if (!u)
        return 0;
    if ((r = mode_check("userns_options.mode", u->mode, pod | node, err)) < 0)
        return r;
    if (u->mode == RUNTIME__V1__NAMESPACE_MODE__NODE) {
        if (u->n_uids || u->n_gids)
            return err_set(err, EINVAL,
                           "namespace_options.userns_options: mode NODE takes no mappings (got %zu "
                           "uid and %zu gid mappings)",
                           u->n_uids, u->n_gids);
        return 0;
    }
    if ((r = idmap_check("uids", u->uids, u->n_uids, err)) < 0 ||
        (r = idmap_check("gids", u->gids, u->n_gids, err)) < 0)
        return r;
    return 0;
}

/* family 0 for every address (empty, 0.0.0.0, ::, or unparsable: the
 * mapping is refused later by net for the latter). */
static int host_ip(const char *s, uint8_t addr[16])
{
    static const uint8_t zero[16];
    memset(addr, 0, 16);
    if (!s || !*s)
        return 0;
    if (inet_pton(AF_INET, s, addr) == 1)
        return memcmp(addr, zero, 4) ? AF_INET : 0;
    if (inet_pton(AF_INET6, s, addr) == 1)
        return memcmp(addr, zero, 16) ? AF_INET6 : 0;
    return 0;
}

bool cri_port_mappings_conflict(const Runtime__V1__PortMapping *a,
                                const Runtime__V1__PortMapping *b)
{
    if (a->host_port <= 0 || b->host_port <= 0 || a->host_port != b->host_port ||
        a->protocol != b->protocol)
        return false;
    uint8_t x[16], y[16];
    int fx = host_ip(a->host_ip, x), fy = host_ip(b->host_ip, y);
    if (!fx || !fy)
        return true; /* a wildcard overlaps every address */
    return fx == fy && memcmp(x, y, 16) == 0;
}

void cri_port_mapping_format(const Runtime__V1__PortMapping *m, char *buf, size_t size)
{
    const char *proto = m->protocol == RUNTIME__V1__PROTOCOL__UDP    ? "udp"
                        : m->protocol == RUNTIME__V1__PROTOCOL__SCTP ? "sctp"
                                                                     : "tcp";
    uint8_t a[16];
    snprintf(buf, size, "%s/%d on %.64s", proto, (int)m->host_port,
             host_ip(m->host_ip, a) ? m->host_ip : "every address");
}

int cri_run_as_group_check(const char *where, const Runtime__V1__Int64Value *user,
                           const char *username, const Runtime__V1__Int64Value *group,
                           struct err *err)
{
    if (group && !user && !(username && *username))
        return err_set(err, EINVAL, "%srun_as_group %" PRId64 " is set without run_as_user%s",
                       where, group->value, *where ? "" : " or run_as_username");
    return 0;
}
