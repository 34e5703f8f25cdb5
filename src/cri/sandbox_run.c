/* RunPodSandbox: checks the request on the loop, then builds the sandbox
 * (namespaces, cgroup, /dev/shm, /etc files, network) and persists its
 * record in a worker. A failure anywhere undoes what was done (pod/ does
 * that); the pod becomes visible to other RPCs only once it is ready. */
#include <arpa/inet.h>
#include <string.h>

#include "cri/sandbox.h"
#include "cri/validate.h"

struct run_work {
    uv_work_t req;
    struct cri_call *call;
    struct sandbox *sb;
    struct pod_sandbox_spec spec;
    struct net_config net;
    struct pod_idmap uid_map, gid_map;
    char dir[4200];
    char *records_dir;
    struct pod_sysctl *sysctls;
    struct net_port_mapping *ports;
    json_t *resources;
    struct pod_sandbox_result res;
    int init_fd;
    struct err err;
    int r;
};

static void run_work_free(struct run_work *w)
{
    free(w->records_dir);
    free(w->sysctls);
    free(w->ports);
    json_decref(w->resources);
    if (w->init_fd >= 0)
        close(w->init_fd);
    pod_sandbox_result_clear(&w->res);
    free(w);
}

static void run_work(uv_work_t *req)
{
    struct run_work *w = req->data;
    struct store_pod *rec = &w->sb->rec;
    w->r = pod_sandbox_create(&w->spec, &w->res, &w->err);
    if (w->r < 0)
        return;
    rec->nips = w->res.net.nips;
    for (size_t i = 0; i < w->res.net.nips; i++)
        snprintf(rec->ips[i], sizeof(rec->ips[i]), "%s", w->res.net.ips[i].addr);
    rec->init_pid = w->res.init_pid;
    rec->init_start = w->res.init_start;
    if (rec->init_pid > 0)
        w->init_fd = pidfd_open_started(rec->init_pid, rec->init_start);
    rec->cgroup_path = TAKE_PTR(w->res.cgroup_path);
    _cleanup_free_ char *json = NULL;
    size_t len = 0;
    w->r = store_pod_to_json(rec, &json, &len, &w->err);
    if (w->r == 0)
        w->r = store_pod_write(w->records_dir, rec->id, json, len, &w->err);
    if (w->r < 0) {
        struct pod_sandbox_ref ref = {.id = rec->id,
                                      .dir = w->dir,
                                      .cgroup_path = rec->cgroup_path,
                                      .init_pid = rec->init_pid,
                                      .init_start = rec->init_start,
                                      .net = w->spec.net};
        struct err ignored = {0};
        pod_sandbox_remove(&ref, &ignored);
    }
}

static void run_done(uv_work_t *req, int status)
{
    struct run_work *w = req->data;
    struct cri_call *call = w->call;
    struct cri *cri = call->cri;
    struct sandbox *sb = w->sb;
    if (status < 0 && w->r == 0)
        w->r = err_set(&w->err, -status, "cancelled");
    if (w->r < 0) {
        sb->config = NULL; /* borrowed from the request */
        sandbox_unlink_free(cri, sb);
        err_wrap(&w->err, "run pod sandbox");
        cri_fail_err(call, &w->err);
        run_work_free(w);
        return;
    }
    /* The configuration moves from the request to the pod. */
    Runtime__V1__RunPodSandboxRequest *rq = (Runtime__V1__RunPodSandboxRequest *)call->req;
    rq->config = NULL;
    sb->creating = false;
    sb->init_fd = TAKE_FD(w->init_fd);
    sb->rec.state = STORE_POD_READY;
    log_info("pod sandbox `%s` (%s/%s) ready%s%s", sb->rec.id, sb->config->metadata->namespace_,
             sb->config->metadata->name, sb->rec.nips ? " at " : "",
             sb->rec.nips ? sb->rec.ips[0] : "");
    Runtime__V1__RunPodSandboxResponse resp = RUNTIME__V1__RUN_POD_SANDBOX_RESPONSE__INIT;
    resp.pod_sandbox_id = sb->rec.id;
    cri_reply(call, &resp.base);
    if (w->spec.net)
        sandbox_net_status_refresh(cri, false);
    run_work_free(w);
}

static bool same_metadata(const Runtime__V1__PodSandboxMetadata *a,
                          const Runtime__V1__PodSandboxMetadata *b)
{
    return a && b && a->attempt == b->attempt && !strcmp(a->name, b->name) &&
           !strcmp(a->namespace_, b->namespace_) && !strcmp(a->uid, b->uid);
}

static int port_mappings(Runtime__V1__PodSandboxConfig *c, struct net_port_mapping **ret,
                         struct err *err)
{
    *ret = NULL;
    if (c->n_port_mappings > NET_PORTS_MAX)
        return err_set(err, EINVAL, "port_mappings: more than %d", NET_PORTS_MAX);
    if (!c->n_port_mappings)
        return 0;
    struct net_port_mapping *pm = calloc(c->n_port_mappings, sizeof(*pm));
    if (!pm)
        return err_set(err, ENOMEM, "port_mappings");
    for (size_t i = 0; i < c->n_port_mappings; i++) {
        const Runtime__V1__PortMapping *m = c->port_mappings[i];
        if (m->container_port < 1 || m->container_port > 65535 || m->host_port < 0 ||
            m->host_port > 65535) {
            free(pm);
            return err_set(err, EINVAL, "port_mappings[%zu]: port out of range", i);
        }
        switch (m->protocol) {
        case RUNTIME__V1__PROTOCOL__TCP:
            pm[i].protocol = NET_PROTO_TCP;
            break;
        case RUNTIME__V1__PROTOCOL__UDP:
            pm[i].protocol = NET_PROTO_UDP;
            break;
        case RUNTIME__V1__PROTOCOL__SCTP:
            pm[i].protocol = NET_PROTO_SCTP;
            break;
        default:
            free(pm);
            return err_set(err, EINVAL, "port_mappings[%zu]: unknown protocol", i);
        }
        pm[i].host_port = (uint16_t)m->host_port;
        pm[i].container_port = (uint16_t)m->container_port;
        pm[i].host_ip = m->host_ip;
    }
    *ret = pm;
    return 0;
}

/* Whether pod sb holds its host ports: from RunPodSandbox until its
 * network is torn down by StopPodSandbox (NOTREADY), and across daemon
 * restarts (a recovered ready pod keeps its rules). */
static bool holds_host_ports(const struct sandbox *sb)
{
    return !sb->host_network && sb->config && (sb->creating || sb->rec.state == STORE_POD_READY);
}

/* Refuses a host port that the request maps twice (EINVAL) or that a pod
 * holds (EADDRINUSE, naming it): nftables would take the first DNAT rule
 * and silently shadow the second. */
static int host_ports_check(struct cri *cri, const Runtime__V1__PodSandboxConfig *c,
                            struct err *err)
{
    char what[128];
    for (size_t i = 0; i < c->n_port_mappings; i++) {
        const Runtime__V1__PortMapping *m = c->port_mappings[i];
        for (size_t j = 0; j < i; j++)
            if (cri_port_mappings_conflict(m, c->port_mappings[j])) {
                cri_port_mapping_format(m, what, sizeof(what));
                return err_set(err, EINVAL,
                               "port_mappings[%zu]: host port %s is already mapped by "
                               "port_mappings[%zu]",
                               i, what, j);
            }
        for (struct sandbox *o = cri->sandboxes->head; o; o = o->next) {
            if (!holds_host_ports(o))
                continue;
            const Runtime__V1__PodSandboxConfig *oc = o->config;
            for (size_t j = 0; j < oc->n_port_mappings; j++)
                if (cri_port_mappings_conflict(m, oc->port_mappings[j])) {
                    cri_port_mapping_format(oc->port_mappings[j], what, sizeof(what));
                    const Runtime__V1__PodSandboxMetadata *om = oc->metadata;
                    return err_set(err, EADDRINUSE,
                                   "port_mappings[%zu]: host port %s is held by pod %s/%s "
                                   "(`%s`)",
                                   i, what, om ? om->namespace_ : "?", om ? om->name : "?",
                                   o->rec.id);
                }
        }
    }
    return 0;
}

void cri_run_pod_sandbox(struct cri_call *call)
{
    struct cri *cri = call->cri;
    struct sandboxes *s = cri->sandboxes;
    Runtime__V1__RunPodSandboxRequest *req = (Runtime__V1__RunPodSandboxRequest *)call->req;
    Runtime__V1__PodSandboxConfig *c = req->config;
    const Runtime__V1__PodSandboxMetadata *md = c ? c->metadata : NULL;
    struct err err = {0};
    if (cri_pod_metadata_check(md, &err) < 0) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "RunPodSandbox: %s", err_str(&err));
        return;
    }
    const char *handler = req->runtime_handler ? req->runtime_handler : "";
    if (!sandbox_handler_known(cri, handler)) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "RunPodSandbox: no runtime handler `%.128s` is configured (kinglet "
                 "--runtime-handler)",
                 handler);
        return;
    }
    const Runtime__V1__LinuxPodSandboxConfig *lx = c->linux;
    const Runtime__V1__NamespaceOption *ns =
        lx && lx->security_context ? lx->security_context->namespace_options : NULL;
    Runtime__V1__NamespaceMode netm = ns ? ns->network : RUNTIME__V1__NAMESPACE_MODE__POD;
    Runtime__V1__NamespaceMode ipcm = ns ? ns->ipc : RUNTIME__V1__NAMESPACE_MODE__POD;
    Runtime__V1__NamespaceMode pidm = ns ? ns->pid : RUNTIME__V1__NAMESPACE_MODE__POD;
    const Runtime__V1__LinuxSandboxSecurityContext *psc = lx ? lx->security_context : NULL;
    if (cri_pod_namespace_check(ns, &err) < 0 ||
        (psc && cri_run_as_group_check("linux.security_context.", psc->run_as_user, NULL,
                                       psc->run_as_group, &err) < 0)) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "RunPodSandbox: %s", err_str(&err));
        return;
    }
    bool host_network = netm == RUNTIME__V1__NAMESPACE_MODE__NODE;
    if (!host_network && !s->network_enabled) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "RunPodSandbox: pod networking is disabled (pod-network = none); only "
                 "host-network pods can run");
        return;
    }
    for (struct sandbox *o = s->head; o; o = o->next)
        if (o->config && same_metadata(o->config->metadata, md)) {
            cri_fail(call, GRPC_STATUS_ALREADY_EXISTS,
                     "RunPodSandbox: pod %s/%s (uid %s, attempt %u) already exists as `%s`",
                     md->namespace_, md->name, md->uid, md->attempt, o->rec.id);
            return;
        }
    if (lx && lx->cgroup_parent && *lx->cgroup_parent &&
        (lx->cgroup_parent[0] != '/' || strstr(lx->cgroup_parent, "..") ||
         strlen(lx->cgroup_parent) > 1024)) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "RunPodSandbox: cgroup_parent `%.256s` is not an absolute cgroupfs path",
                 lx->cgroup_parent);
        return;
    }
    size_t packed = protobuf_c_message_get_packed_size(&c->base);
    if (packed > STORE_CONFIG_MAX) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "RunPodSandbox: the pod configuration is larger than %d bytes", STORE_CONFIG_MAX);
        return;
    }
    if (!host_network && host_ports_check(cri, c, &err) < 0) {
        err_wrap(&err, "RunPodSandbox %s/%s", md->namespace_, md->name);
        cri_fail_err(call, &err);
        return;
    }

    struct run_work *w = calloc(1, sizeof(*w));
    struct sandbox *sb = calloc(1, sizeof(*sb));
    if (w)
        w->init_fd = -1;
    if (sb)
        sb->init_fd = -1;
    if (!w || !sb || !(w->records_dir = strdup(s->records_dir)) ||
        !(sb->rec.config = malloc(packed ? packed : 1)) ||
        !(sb->rec.runtime_handler = strdup(handler))) {
        err_set(&err, ENOMEM, "RunPodSandbox");
        goto fail;
    }
    sb->rec.config_len = protobuf_c_message_pack(&c->base, sb->rec.config);
    if (store_id_new(sb->rec.id) < 0) {
        err_set(&err, errno, "RunPodSandbox: random id");
        goto fail;
    }
    sb->rec.created_ns = now_real_ns();
    sb->host_network = host_network;
    sb->creating = true;
    sb->config = c; /* borrowed until the pod is ready */

    if (port_mappings(c, &w->ports, &err) < 0)
        goto fail;
    if (lx && lx->n_sysctls) {
        if (lx->n_sysctls > POD_SYSCTLS_MAX) {
            err_set(&err, EINVAL, "sysctls: more than %d", POD_SYSCTLS_MAX);
            goto fail;
        }
        if (!(w->sysctls = calloc(lx->n_sysctls, sizeof(*w->sysctls)))) {
            err_set(&err, ENOMEM, "sysctls");
            goto fail;
        }
        for (size_t i = 0; i < lx->n_sysctls; i++)
            w->sysctls[i] = (struct pod_sysctl){lx->sysctls[i]->key, lx->sysctls[i]->value};
    }
    /* The sandbox's own cgroup holds what the sandbox itself runs (its
     * init): RuntimeClass overhead is what limits it. kubelet manages the
     * pod cgroup (cgroup_parent) and its limits itself. */
    if (lx && lx->overhead && !(w->resources = cri_resources_to_oci(lx->overhead)))
        log_debug("pod %s/%s: empty overhead", md->namespace_, md->name);
    if (!host_network && sandbox_net_config(cri, &w->net, &err) < 0)
        goto fail;
    sandbox_dir(cri, sb->rec.id, w->dir, sizeof(w->dir));
    const Runtime__V1__DNSConfig *dns = c->dns_config;
    w->spec = (struct pod_sandbox_spec){
        .id = sb->rec.id,
        .dir = w->dir,
        .hostname = c->hostname,
        .host_network = host_network,
        .host_ipc = ipcm == RUNTIME__V1__NAMESPACE_MODE__NODE,
        .pid_mode = pidm == RUNTIME__V1__NAMESPACE_MODE__POD         ? POD_PID_POD
                    : pidm == RUNTIME__V1__NAMESPACE_MODE__CONTAINER ? POD_PID_CONTAINER
                    : pidm == RUNTIME__V1__NAMESPACE_MODE__NODE      ? POD_PID_NODE
                                                                     : POD_PID_TARGET,
        .dns_servers = dns ? (const char *const *)dns->servers : NULL,
        .n_dns_servers = dns ? dns->n_servers : 0,
        .dns_searches = dns ? (const char *const *)dns->searches : NULL,
        .n_dns_searches = dns ? dns->n_searches : 0,
        .dns_options = dns ? (const char *const *)dns->options : NULL,
        .n_dns_options = dns ? dns->n_options : 0,
        .sysctls = w->sysctls,
        .n_sysctls = lx ? lx->n_sysctls : 0,
        .cgroup_parent = lx ? lx->cgroup_parent : NULL,
        .cgroup_root = cri->cgroup2_mount,
        .cgroup_resources = w->resources,
        .net = host_network ? NULL : &w->net,
        .ports = w->ports,
        .nports = host_network ? 0 : c->n_port_mappings,
    };
    if (sandbox_userns(c, &w->uid_map, &w->gid_map)) {
        w->spec.uid_map = &w->uid_map;
        w->spec.gid_map = &w->gid_map;
    }
    if (pod_sandbox_spec_check(&w->spec, &err) < 0)
        goto fail;
    w->call = call;
    w->sb = sb;
    w->req.data = w;
    sandbox_link(cri, sb);
    uv_queue_work(cri->loop, &w->req, run_work, run_done);
    return;
fail:
    if (sb)
        sb->config = NULL;
    sandbox_free(sb);
    if (w)
        run_work_free(w);
    err_wrap(&err, "run pod sandbox %s/%s", md->namespace_, md->name);
    cri_fail_err(call, &err);
}
