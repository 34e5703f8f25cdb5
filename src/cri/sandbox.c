/* The pod sandbox registry: records loaded at start, lookups, the per-pod
 * operation queue, the network configuration and NetworkReady.
 *
 * Recovery at start (cri_new, before the loop runs): every record under
 * <root>/pods is loaded; a ready pod whose network namespace mount is gone
 * (the volatile state directory was wiped by a reboot) becomes NOTREADY.
 * Then, off the loop, before any RunPodSandbox runs: the node network is
 * prepared, address leases held by pods that are not ready (or unknown: a
 * RunPodSandbox cut short by a crash) are released with their links and
 * rules, and state directories without a record are removed. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>

#include "cri/containers.h"

void sandbox_dir(struct cri *cri, const char *id, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", cri->sandboxes->state_dir, id);
}

void sandbox_ref(struct cri *cri, const struct sandbox *sb, char *dirbuf, size_t dirsize,
                 struct pod_sandbox_ref *ret)
{
    sandbox_dir(cri, sb->rec.id, dirbuf, dirsize);
    *ret = (struct pod_sandbox_ref){
        .id = sb->rec.id,
        .dir = dirbuf,
        .cgroup_path = sb->rec.cgroup_path,
        .init_pid = sb->rec.init_pid,
        .init_start = sb->rec.init_start,
        .net = sb->host_network ? NULL : &cri->sandboxes->net,
    };
}

Runtime__V1__PodSandboxState sandbox_state(const struct sandbox *sb)
{
    if (sb->rec.state != STORE_POD_READY || sb->init_gone)
        return RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY;
    struct pollfd p = {.fd = sb->init_fd, .events = POLLIN};
    if (sb->init_fd >= 0 && poll(&p, 1, 0) == 1)
        return RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY;
    return RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY;
}

void sandbox_free(struct sandbox *sb)
{
    if (!sb)
        return;
    if (sb->init_fd >= 0)
        close(sb->init_fd);
    store_pod_clear(&sb->rec);
    if (sb->config)
        protobuf_c_message_free_unpacked(&sb->config->base, NULL);
    free(sb);
}

void sandbox_link(struct cri *cri, struct sandbox *sb)
{
    struct sandboxes *s = cri->sandboxes;
    sb->prev = NULL;
    sb->next = s->head;
    if (s->head)
        s->head->prev = sb;
    s->head = sb;
    s->n++;
}

void sandbox_unlink_free(struct cri *cri, struct sandbox *sb)
{
    struct sandboxes *s = cri->sandboxes;
    cri_cursors_skip(s->cursors, sb, sb->next);
    if (sb->prev)
        sb->prev->next = sb->next;
    else
        s->head = sb->next;
    if (sb->next)
        sb->next->prev = sb->prev;
    s->n--;
    sandbox_free(sb);
}

struct sandbox *sandbox_find(struct cri *cri, const char *id, bool *ret_ambiguous)
{
    *ret_ambiguous = false;
    size_t len = strlen(id);
    if (len == 0 || len > STORE_ID_LEN)
        return NULL;
    struct sandbox *found = NULL;
    for (struct sandbox *sb = cri->sandboxes->head; sb; sb = sb->next) {
        if (sb->creating || strncmp(sb->rec.id, id, len) != 0)
            continue;
        if (len == STORE_ID_LEN)
            return sb;
        if (found) {
            *ret_ambiguous = true;
            return NULL;
        }
        found = sb;
    }
    return found;
}

struct sandbox *sandbox_find_or_fail(struct cri_call *call, const char *rpc, const char *id)
{
    bool ambiguous;
    struct sandbox *sb = sandbox_find(call->cri, id, &ambiguous);
    if (!sb)
        cri_fail_lookup(call, rpc, "pod sandbox", id, ambiguous);
    return sb;
}

void sandbox_op_begin(struct cri_call *call, struct sandbox *sb, sandbox_op_fn fn)
{
    if (!sb->busy) {
        sb->busy = true;
        fn(call, sb);
        return;
    }
    struct sandbox_waiter *w = calloc(1, sizeof(*w));
    if (!w) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->call = call;
    w->fn = fn;
    if (sb->waiters_tail)
        sb->waiters_tail->next = w;
    else
        sb->waiters = w;
    sb->waiters_tail = w;
}

void sandbox_op_end(struct cri *cri, struct sandbox *sb, bool removed)
{
    sb->busy = false;
    if (removed) {
        struct sandbox_waiter *w = sb->waiters;
        sb->waiters = sb->waiters_tail = NULL;
        sandbox_unlink_free(cri, sb);
        while (w) {
            struct sandbox_waiter *next = w->next;
            w->fn(w->call, NULL); /* the pod is gone */
            free(w);
            w = next;
        }
        return;
    }
    struct sandbox_waiter *w = sb->waiters;
    if (!w)
        return;
    sb->waiters = w->next;
    if (!sb->waiters)
        sb->waiters_tail = NULL;
    sb->busy = true;
    w->fn(w->call, sb);
    free(w);
}

int sandbox_net_config(struct cri *cri, struct net_config *ret, struct err *err)
{
    struct sandboxes *s = cri->sandboxes;
    *ret = s->net;
    const char *cidr = s->cfg_pod_cidr && *s->cfg_pod_cidr ? s->cfg_pod_cidr
                       : cri->pod_cidr && *cri->pod_cidr   ? cri->pod_cidr
                                                           : NULL;
    if (cidr)
        return net_config_set_subnets(ret, cidr, err);
    return 0;
}

/* ---- NetworkReady ---- */

struct status_work {
    uv_work_t req;
    struct cri *cri;
    struct net_config net;
    bool ready;
    char reason[256];
};

static void status_work(uv_work_t *req)
{
    struct status_work *w = req->data;
    if (net_status_deferred(&w->net, &w->ready, w->reason, sizeof(w->reason)) < 0) {
        w->ready = false;
        snprintf(w->reason, sizeof(w->reason), "cannot check the pod network");
    }
}

static void status_done(uv_work_t *req, int status)
{
    struct status_work *w = req->data;
    struct sandboxes *s = w->cri->sandboxes;
    if (s) {
        s->net_checking = false;
        s->net_ready = status == 0 && w->ready;
        snprintf(s->net_reason, sizeof(s->net_reason), "%s",
                 status == 0 ? w->reason : "check cancelled");
        s->net_checked_ns = now_mono_ns();
    }
    free(w);
}

void sandbox_net_status_refresh(struct cri *cri, bool force)
{
    struct sandboxes *s = cri->sandboxes;
    if (!s->network_enabled || s->net_checking)
        return;
    if (!force && now_mono_ns() - s->net_checked_ns < 5000000000ULL)
        return;
    struct status_work *w = calloc(1, sizeof(*w));
    if (!w)
        return;
    w->cri = cri;
    struct err e = {0};
    if (sandbox_net_config(cri, &w->net, &e) < 0) {
        snprintf(s->net_reason, sizeof(s->net_reason), "%.200s", err_str(&e));
        s->net_ready = false;
        free(w);
        return;
    }
    w->req.data = w;
    s->net_checking = true;
    uv_queue_work(cri->loop, &w->req, status_work, status_done);
}

/* ---- recovery ---- */

struct start_work {
    uv_work_t req;
    struct cri *cri;
    struct net_config net;
    bool network;
    bool find_mtu;             /* no --mtu: use the uplink's */
    char mtu_ifname[IFNAMSIZ]; /* where it came from ("": the default) */
    char **keep;               /* ids of ready pods */
    size_t nkeep;
    char *state_dir;
    char *records_dir;
    bool ready;
    char reason[256];
};

static bool kept(struct start_work *w, const char *id)
{
    for (size_t i = 0; i < w->nkeep; i++)
        if (strcmp(w->keep[i], id) == 0)
            return true;
    return false;
}

static bool has_record(struct start_work *w, const char *id)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s.json", w->records_dir, id);
    return access(path, F_OK) == 0;
}

static void start_work(uv_work_t *req)
{
    struct start_work *w = req->data;
    struct err err = {0};
    if (w->network && w->find_mtu) {
        /* Before the bridge exists: pods default to the MTU of the node's
         * uplink, as a larger one breaks their large packets there. */
        unsigned mtu = 0;
        if (net_uplink_mtu(w->net.bridge, &mtu, w->mtu_ifname, sizeof(w->mtu_ifname), &err) == 0 &&
            mtu >= 576 && mtu <= 65535)
            w->net.mtu = mtu;
        else
            w->mtu_ifname[0] = '\0';
        err_clear(&err);
    }
    if (w->network) {
        /* The nftables table (and libnftnl with it) only when a pod needs
         * it: running pods keep their masquerade and host ports, leftovers
         * lose theirs; a daemon without pods leaves it to the first one. */
        char **ids = NULL;
        size_t n = 0;
        bool listed = net_pod_ids(&w->net, &ids, &n, &err) == 0;
        if ((w->nkeep || (listed && n) ? net_node_setup(&w->net, &err)
                                       : net_node_prepare(&w->net, &err)) < 0)
            log_warn("pod network: %s", err_str(&err));
        if (listed) {
            for (size_t i = 0; i < n; i++) {
                if (kept(w, ids[i]))
                    continue;
                struct err e = {0};
                if (net_pod_teardown(&w->net, ids[i], &e) < 0)
                    log_warn("release the network of pod `%s`: %s", ids[i], err_str(&e));
                else
                    log_info("released the network of pod `%s` (not running)", ids[i]);
            }
            net_pod_ids_free(ids, n);
        }
    }
    /* state directories of pods without a record: RunPodSandbox cut short */
    DIR *d = opendir(w->state_dir);
    while (d) {
        struct dirent *de = readdir(d);
        if (!de)
            break;
        if (!store_id_valid(de->d_name) || has_record(w, de->d_name))
            continue;
        char dir[4200];
        snprintf(dir, sizeof(dir), "%s/%s", w->state_dir, de->d_name);
        struct err e = {0};
        if (pod_sandbox_remove_orphan(de->d_name, dir, w->network ? &w->net : NULL, &e) < 0)
            log_warn("remove the remains of pod `%s`: %s", de->d_name, err_str(&e));
        else
            log_info("removed the remains of pod `%s` (never finished)", de->d_name);
    }
    if (d)
        closedir(d);
    if (w->network)
        net_status_deferred(&w->net, &w->ready, w->reason, sizeof(w->reason));
}

static void start_done(uv_work_t *req, int status)
{
    struct start_work *w = req->data;
    struct cri *cri = w->cri;
    struct sandboxes *s = cri->sandboxes;
    if (s && w->network && w->find_mtu) {
        s->net.mtu = w->net.mtu;
        if (w->mtu_ifname[0])
            log_info("pod MTU %u, the MTU of `%s` (the default route's interface)", s->net.mtu,
                     w->mtu_ifname);
        else
            log_info("pod MTU %u (no default route to take it from)", s->net.mtu);
    }
    if (s && w->network) {
        s->net_ready = status == 0 && w->ready;
        snprintf(s->net_reason, sizeof(s->net_reason), "%s", w->reason);
        s->net_checked_ns = now_mono_ns();
        s->net_checking = false;
    }
    for (size_t i = 0; i < w->nkeep; i++)
        free(w->keep[i]);
    free(w->keep);
    free(w->state_dir);
    free(w->records_dir);
    free(w);
    if (s)
        sandbox_started(cri);
}

void cri_sandboxes_start(struct cri *cri)
{
    struct sandboxes *s = cri->sandboxes;
    struct start_work *w = calloc(1, sizeof(*w));
    struct err e = {0};
    if (!w || !(w->state_dir = strdup(s->state_dir)) ||
        !(w->records_dir = strdup(s->records_dir)) ||
        !(w->keep = calloc(s->n + 1, sizeof(char *)))) {
        log_error("pod recovery: out of memory");
        if (w) {
            free(w->state_dir);
            free(w->records_dir);
            free(w);
        }
        sandbox_started(cri);
        return;
    }
    w->cri = cri;
    w->network = s->network_enabled;
    w->find_mtu = !s->mtu_configured;
    if (w->network && sandbox_net_config(cri, &w->net, &e) < 0) {
        log_warn("pod network configuration: %s", err_str(&e));
        w->net = s->net;
    }
    for (struct sandbox *sb = s->head; sb; sb = sb->next)
        if (sb->rec.state == STORE_POD_READY && !sb->host_network &&
            (w->keep[w->nkeep] = strdup(sb->rec.id)))
            w->nkeep++;
    w->req.data = w;
    s->net_checking = w->network;
    uv_queue_work(cri->loop, &w->req, start_work, start_done);
}

static int load_records(struct cri *cri, struct err *err)
{
    struct sandboxes *s = cri->sandboxes;
    struct store_pod *pods = NULL;
    size_t n = 0, bad = 0;
    int r = store_pod_load_all(s->records_dir, &pods, &n, &bad, err);
    if (r < 0)
        return r;
    if (bad)
        log_warn("%zu unreadable pod record(s) in `%s` ignored", bad, s->records_dir);
    for (size_t i = 0; i < n; i++) {
        struct sandbox *sb = calloc(1, sizeof(*sb));
        if (!sb) {
            store_pods_free(pods, n);
            return err_set(err, ENOMEM, "load pods");
        }
        sb->rec = pods[i];
        sb->init_fd = -1;
        pods[i] = (struct store_pod){0};
        sb->config = (Runtime__V1__PodSandboxConfig *)protobuf_c_message_unpack(
            &runtime__v1__pod_sandbox_config__descriptor, NULL, sb->rec.config_len, sb->rec.config);
        if (!sb->config) {
            log_warn("pod `%s`: unreadable configuration in its record; ignored", sb->rec.id);
            sandbox_free(sb);
            continue;
        }
        const Runtime__V1__LinuxPodSandboxConfig *lx = sb->config->linux;
        const Runtime__V1__NamespaceOption *ns =
            lx && lx->security_context ? lx->security_context->namespace_options : NULL;
        sb->host_network = ns && ns->network == RUNTIME__V1__NAMESPACE_MODE__NODE;
        char dir[4200];
        sandbox_dir(cri, sb->rec.id, dir, sizeof(dir));
        bool alive = sb->host_network ? access(dir, F_OK) == 0 : pod_sandbox_netns_alive(dir);
        if (sb->rec.state == STORE_POD_READY && !alive) {
            log_warn("pod `%s`: its namespaces are gone (reboot?); it is NOTREADY now", sb->rec.id);
            sb->rec.state = STORE_POD_NOTREADY;
            sb->rec.nips = 0;
            _cleanup_free_ char *json = NULL;
            size_t len;
            struct err e = {0};
            if (store_pod_to_json(&sb->rec, &json, &len, &e) < 0 ||
                store_pod_write(s->records_dir, sb->rec.id, json, len, &e) < 0)
                log_warn("pod `%s`: %s", sb->rec.id, err_str(&e));
        }
        if (sb->rec.state == STORE_POD_READY && sb->rec.init_pid > 0) {
            sb->init_fd = pidfd_open_started(sb->rec.init_pid, sb->rec.init_start);
            sb->init_gone = sb->init_fd < 0;
            if (sb->init_gone)
                log_warn("pod `%s`: its init (pid %d) is gone; the pod is NOTREADY", sb->rec.id,
                         (int)sb->rec.init_pid);
        }
        sandbox_link(cri, sb);
    }
    free(pods);
    if (s->n)
        log_info("recovered %zu pod sandbox(es)", s->n);
    return 0;
}

int cri_sandboxes_init(struct cri *cri, const struct cri_config *cfg, struct err *err)
{
    struct sandboxes *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(err, ENOMEM, "sandboxes");
    cri->sandboxes = s;
    if (asprintf(&s->records_dir, "%s/pods", cfg->root_dir) < 0 ||
        asprintf(&s->state_dir, "%s/pods", cfg->state_dir) < 0) {
        s->records_dir = s->state_dir = NULL;
        return err_set(err, ENOMEM, "sandboxes");
    }
    net_config_init(&s->net);
    if (cfg->n_runtime_handlers && !(s->handlers = calloc(cfg->n_runtime_handlers, sizeof(char *))))
        return err_set(err, ENOMEM, "sandboxes");
    for (size_t i = 0; i < cfg->n_runtime_handlers; i++)
        if (!(s->handlers[s->n_handlers++] = strdup(cfg->runtime_handlers[i])))
            return err_set(err, ENOMEM, "sandboxes");
    s->network_enabled = !cfg->network_disabled;
    int r;
    if (cfg->bridge && *cfg->bridge && (r = net_config_set_bridge(&s->net, cfg->bridge, err)) < 0)
        return err_wrap(err, "bridge");
    if (cfg->mtu)
        s->net.mtu = cfg->mtu;
    s->mtu_configured = cfg->mtu != 0;
    if ((size_t)snprintf(s->net.ipam_dir, sizeof(s->net.ipam_dir), "%s/net/ipam", cfg->root_dir) >=
        sizeof(s->net.ipam_dir))
        return err_set(err, ENAMETOOLONG, "root directory `%s`", cfg->root_dir);
    if (cfg->pod_cidr && *cfg->pod_cidr) {
        struct net_config check = s->net;
        if ((r = net_config_set_subnets(&check, cfg->pod_cidr, err)) < 0)
            return err_wrap(err, "pod CIDR");
        if (!(s->cfg_pod_cidr = strdup(cfg->pod_cidr)))
            return err_set(err, ENOMEM, "sandboxes");
    }
    snprintf(s->net_reason, sizeof(s->net_reason), "%s",
             s->network_enabled ? "the pod network is being prepared"
                                : "pod networking is disabled (pod-network = none)");
    return load_records(cri, err);
}

bool sandbox_handler_known(struct cri *cri, const char *name)
{
    struct sandboxes *s = cri->sandboxes;
    if (!*name)
        return true;
    for (size_t i = 0; i < s->n_handlers; i++)
        if (strcmp(s->handlers[i], name) == 0)
            return true;
    return false;
}

void cri_sandboxes_free(struct cri *cri)
{
    struct sandboxes *s = cri->sandboxes;
    if (!s)
        return;
    for (size_t i = 0; i < s->n_handlers; i++)
        free(s->handlers[i]);
    free(s->handlers);
    while (s->head)
        sandbox_unlink_free(cri, s->head);
    free(s->records_dir);
    free(s->state_dir);
    free(s->cfg_pod_cidr);
    free(s);
    cri->sandboxes = NULL;
}

void sandbox_started(struct cri *cri)
{
    /* Containers recover once their pods have. */
    cri_containers_start(cri);
}

void cri_containers_started(struct cri *cri) { cri_recovered(cri); }

bool sandbox_userns(const Runtime__V1__PodSandboxConfig *c, struct pod_idmap *ret_uid,
                    struct pod_idmap *ret_gid)
{
    const Runtime__V1__LinuxSandboxSecurityContext *sc =
        c && c->linux ? c->linux->security_context : NULL;
    const Runtime__V1__UserNamespace *u =
        sc && sc->namespace_options ? sc->namespace_options->userns_options : NULL;
    if (!u || u->mode != RUNTIME__V1__NAMESPACE_MODE__POD || u->n_uids != 1 || u->n_gids != 1)
        return false;
    *ret_uid =
        (struct pod_idmap){u->uids[0]->container_id, u->uids[0]->host_id, u->uids[0]->length};
    *ret_gid =
        (struct pod_idmap){u->gids[0]->container_id, u->gids[0]->host_id, u->gids[0]->length};
    return true;
}
