/* Status, RuntimeConfig and UpdateRuntimeConfig: what the runtime can do
 * and how it is configured. The pod CIDR kubelet sends is persisted under
 * the root directory (off the loop) and reloaded at start. */
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>

#include "cri/sandbox.h"
#include "oci/oci.h"

#define RUNTIME_CONFIG_FILE "runtime-config.json"

/* kubelet's pod CIDR: empty (none: the daemon's own) or what the network
 * code takes, checked there (net_pod_cidrs_parse) and nowhere else. */
static int pod_cidr_check(const char *cidr, struct err *err)
{
    return *cidr ? net_pod_cidrs_parse(cidr, NULL, NULL, err) : 0;
}

/* Finds the cgroup2 mount and whether it has controllers: on hybrid hosts
 * it exists without controllers and limits cannot be enforced. */
static void detect_cgroup2(struct cri *cri)
{
    _cleanup_free_ char *info = NULL;
    /* unreadable: as good as none found */
    if (read_file_at(AT_FDCWD, "/proc/self/mountinfo", 4 << 20, &info, NULL) < 0)
        info = NULL;
    char *save = NULL;
    for (char *line = info ? strtok_r(info, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        const char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        char mnt[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        cri->cgroup2_mount = strdup(mnt);
        break;
    }
    if (!cri->cgroup2_mount) {
        cri->limits_unenforced =
            strdup("no cgroup2 mount found: container resource limits will not be enforced");
        if (cri->limits_unenforced)
            log_warn("%s", cri->limits_unenforced);
        return;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/cgroup.controllers", cri->cgroup2_mount);
    _cleanup_free_ char *ctl = NULL;
    if (read_file_at(AT_FDCWD, path, 4096, &ctl, NULL) < 0)
        ctl = strdup("");
    if (!ctl)
        return;
    ctl[strcspn(ctl, "\n")] = '\0';
    cri->cgroup2_controllers = strdup(ctl);
    /* The controllers container limits need; hybrid hosts lack them. */
    static const char *const needed[] = {"cpu", "cpuset", "io", "memory", "pids"};
    struct buf missing = {0};
    for (size_t i = 0; i < ARRAY_SIZE(needed); i++) {
        bool found = false;
        char copy[4096];
        snprintf(copy, sizeof(copy), "%s", ctl);
        char *save2 = NULL;
        for (char *t = strtok_r(copy, " ", &save2); t; t = strtok_r(NULL, " ", &save2))
            found |= strcmp(t, needed[i]) == 0;
        if (!found)
            buf_printf(&missing, "%s%s", missing.len ? ", " : "", needed[i]);
    }
    if (missing.len) {
        cri->cgroup2_missing = strndup((char *)missing.data, missing.len);
        if (asprintf(&cri->limits_unenforced,
                     "cgroup2 at `%s` lacks the %s controller(s) (hybrid cgroup layout?): those "
                     "container resource limits will not be enforced",
                     cri->cgroup2_mount, cri->cgroup2_missing ? cri->cgroup2_missing : "") < 0)
            cri->limits_unenforced = NULL;
        else
            log_warn("%s", cri->limits_unenforced);
    }
    buf_free(&missing);
}

int cri_runtime_config_parse(const char *text, size_t len, char **ret_cidr)
{
    *ret_cidr = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return -EBADMSG;
    json_t *v = json_object_get(root, "podCIDR");
    const char *cidr = json_is_string(v) ? json_string_value(v) : NULL;
    /* json_string_value stops at an embedded NUL: require there is none */
    struct err e = {0};
    int r = cidr && strlen(cidr) == json_string_length(v) && pod_cidr_check(cidr, &e) == 0
                ? 0
                : -EBADMSG;
    if (r == 0 && !(*ret_cidr = strdup(cidr)))
        r = -ENOMEM;
    json_decref(root);
    return r;
}

/* Whether the kernel has what pods with hostUsers: false need: user
 * namespaces, and overlayfs layers given as descriptors of (idmapped)
 * detached mounts. A few syscalls, nothing that blocks. */
static bool userns_supported(void)
{
    _cleanup_free_ char *max = NULL;
    if (read_file_at(AT_FDCWD, "/proc/sys/user/max_user_namespaces", 64, &max, NULL) < 0 ||
        atoi(max) <= 0)
        return false;
    _cleanup_close_ int ctx = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int tree =
        root < 0 ? -1
                 : (int)syscall(SYS_open_tree, root, "",
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    return ctx >= 0 && tree >= 0 &&
           syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "lowerdir+", NULL, tree) == 0;
}

int cri_runtime_config_load(struct cri *cri, struct err *err)
{
    detect_cgroup2(cri);
    /* Host facts Status reports, probed once here, before the loop runs:
     * recursive read-only binds need mount_setattr (Linux 5.12), there
     * when it refuses a bad fd rather than being unknown; pods with a user
     * namespace of their own need an idmapped overlay lower layer given by
     * descriptor (Linux 6.13). */
    cri->host_rro = syscall(SYS_mount_setattr, -1, "", 0, NULL, 0) < 0 && errno != ENOSYS;
    cri->host_userns = userns_supported();
    log_info("pods with user namespaces (hostUsers: false): %s",
             cri->host_userns ? "supported" : "not supported by this kernel");
    /* temporaries of saves cut short by a crash */
    size_t removed = 0;
    if (remove_stale_tmp_files(cri->root_dir, &removed) == 0 && removed)
        log_info("removed %zu unfinished record write(s) in `%s`", removed, cri->root_dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/" RUNTIME_CONFIG_FILE, cri->root_dir);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = read_file_at(AT_FDCWD, path, 64 * 1024, &text, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return err_set(err, -r, "read `%s`", path);
    char *cidr = NULL;
    r = cri_runtime_config_parse(text, len, &cidr);
    if (r == -ENOMEM)
        return err_set(err, ENOMEM, "read `%s`", path);
    if (r < 0) {
        log_warn("ignoring unreadable `%s`", path);
        return 0;
    }
    free(cri->pod_cidr);
    cri->pod_cidr = *cidr ? cidr : NULL;
    if (!*cidr)
        free(cidr);
    return 0;
}

static Runtime__V1__RuntimeCondition *condition(Runtime__V1__RuntimeCondition *c, const char *type,
                                                bool ok, const char *reason, const char *message)
{
    runtime__v1__runtime_condition__init(c);
    c->type = (char *)type;
    c->status = ok;
    c->reason = (char *)(ok ? "" : reason);
    c->message = (char *)(ok ? "" : message);
    return c;
}

static void config_json(struct cri *cri, struct buf *b)
{
    buf_printf(
        b, "{\"runtimeName\":\"kinglet\",\"runtimeVersion\":\"%s\",\"socket\":", PACKAGE_VERSION);
    buf_append_json_string(b, cri->socket_path);
    buf_printf(b, ",\"rootDir\":");
    buf_append_json_string(b, cri->root_dir);
    buf_printf(b, ",\"stateDir\":");
    buf_append_json_string(b, cri->state_dir);
    buf_printf(b, ",\"cgroupDriver\":\"cgroupfs\",\"cgroup2Mount\":");
    buf_append_json_string(b, cri->cgroup2_mount ? cri->cgroup2_mount : "");
    buf_printf(b, ",\"cgroup2Controllers\":");
    buf_append_json_string(b, cri->cgroup2_controllers ? cri->cgroup2_controllers : "");
    /* The limits containers get but the host cannot enforce (hybrid). */
    buf_printf(b, ",\"limitsNotEnforced\":");
    buf_append_json_string(b, !cri->cgroup2_mount    ? "all (no cgroup2 mount)"
                              : cri->cgroup2_missing ? cri->cgroup2_missing
                                                     : "");
    buf_printf(b, ",\"podCIDR\":");
    buf_append_json_string(b, cri->pod_cidr ? cri->pod_cidr : "");
    /* CRI has no field for it; kubelet's own check reads the same files.
     * Two small sysfs reads, once (the host cannot change it without a
     * reboot). */
    static int apparmor = -1;
    if (apparmor < 0)
        apparmor = oci_apparmor_enabled();
    buf_printf(b, ",\"apparmor\":%s,\"apparmorDefaultProfile\":\"%s\"", apparmor ? "true" : "false",
               apparmor ? OCI_APPARMOR_DEFAULT : "");
    buf_printf(b, ",\"pid\":%d}", (int)getpid());
}

/* Limits the host cannot enforce, as a condition of their own: kubelet
 * gates the node's readiness on RuntimeReady and NetworkReady only; any
 * other condition it keeps as it comes (toKubeRuntimeStatus) and shows with
 * the runtime's status (its log, `crictl info`), so a hybrid host says what
 * it lacks without taking the node out of service. */
#define LIMITS_CONDITION "ResourceLimitsEnforced"

void cri_status(struct cri_call *call)
{
    const Runtime__V1__StatusRequest *req = (const void *)call->req;
    Runtime__V1__RuntimeCondition conds[3], *condp[3];
    /* Tell the truth: kubelet keeps the node NotReady until these are
     * true. Containers are ready once recovery after a start is over. */
    bool ready = call->cri->recovered;
    condp[0] = condition(&conds[0], "RuntimeReady", ready, "Recovering",
                         ready ? "" : "kinglet is recovering its pods and containers");
    /* NetworkReady as last checked off the loop (net_status); a check
     * older than a few seconds is renewed for the next caller. */
    struct sandboxes *sbs = call->cri->sandboxes;
    sandbox_net_status_refresh(call->cri, false);
    condp[1] = condition(&conds[1], "NetworkReady", sbs->net_ready,
                         sbs->network_enabled ? "NetworkPluginNotReady" : "NetworkDisabled",
                         sbs->net_reason);
    const char *unenforced = call->cri->limits_unenforced;
    condp[2] =
        condition(&conds[2], LIMITS_CONDITION, !unenforced,
                  call->cri->cgroup2_mount ? "CgroupControllersMissing" : "NoCgroup2", unenforced);
    Runtime__V1__RuntimeStatus status = RUNTIME__V1__RUNTIME_STATUS__INIT;
    status.n_conditions = 3;
    status.conditions = condp;

    Runtime__V1__RuntimeHandlerFeatures features = RUNTIME__V1__RUNTIME_HANDLER_FEATURES__INIT;
    features.recursive_read_only_mounts = call->cri->host_rro;
    features.user_namespaces = call->cri->host_userns;
    /* the default handler and the configured ones */
    Runtime__V1__RuntimeHandler hs[65], *handlers[65];
    size_t nh = 0;
    for (size_t i = 0; i <= sbs->n_handlers && i < ARRAY_SIZE(hs); i++) {
        runtime__v1__runtime_handler__init(&hs[nh]);
        hs[nh].name = i == 0 ? "" : sbs->handlers[i - 1];
        hs[nh].features = &features;
        handlers[nh] = &hs[nh];
        nh++;
    }
    Runtime__V1__RuntimeFeatures rf = RUNTIME__V1__RUNTIME_FEATURES__INIT;
    /* refused (sandbox checks): the host's network namespace is not the
     * pod's user namespace's to administer */
    rf.user_namespaces_host_network = false;
    rf.supplemental_groups_policy = true; /* container_spec.c, ContainerStatus.user */

    Runtime__V1__StatusResponse resp = RUNTIME__V1__STATUS_RESPONSE__INIT;
    resp.status = &status;
    resp.n_runtime_handlers = nh;
    resp.runtime_handlers = handlers;
    resp.features = &rf;

    struct buf json = {0};
    Runtime__V1__StatusResponse__InfoEntry entry = RUNTIME__V1__STATUS_RESPONSE__INFO_ENTRY__INIT;
    Runtime__V1__StatusResponse__InfoEntry *entries[] = {&entry};
    if (req->verbose) {
        config_json(call->cri, &json);
        if (buf_append(&json, "", 1) < 0) {
            buf_free(&json);
            cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        entry.key = "config";
        entry.value = (char *)json.data;
        resp.n_info = 1;
        resp.info = entries;
    }
    cri_reply(call, &resp.base);
    buf_free(&json);
}

void cri_runtime_config(struct cri_call *call)
{
    Runtime__V1__LinuxRuntimeConfiguration linux_cfg =
        RUNTIME__V1__LINUX_RUNTIME_CONFIGURATION__INIT;
    linux_cfg.cgroup_driver = RUNTIME__V1__CGROUP_DRIVER__CGROUPFS;
    Runtime__V1__RuntimeConfigResponse resp = RUNTIME__V1__RUNTIME_CONFIG_RESPONSE__INIT;
    resp.linux = &linux_cfg;
    cri_reply(call, &resp.base);
}

/* UpdateRuntimeConfig persists the CIDR before it takes effect. Saves run
 * one at a time in arrival order (cri->cfg_saves): concurrent calls would
 * otherwise finish in any order, and the CIDR in use could differ from the
 * one on disk, and change at the next start. */
struct cfg_save {
    uv_work_t req;
    struct cfg_save *next;
    struct cri_call *call;
    const char *dir; /* the root directory, created if missing */
    char *path;
    struct buf content;
    char *cidr;
    int result;
};

static void cfg_save_free(struct cfg_save *w)
{
    free(w->path);
    free(w->cidr);
    buf_free(&w->content);
    free(w);
}

static void save_work(uv_work_t *req)
{
    struct cfg_save *w = req->data;
    w->result = mkdir_p(w->dir, 0700);
    if (w->result == 0)
        w->result = write_file_atomic(AT_FDCWD, w->path, w->content.data, w->content.len, 0600);
}

static void save_done(uv_work_t *req, int status);

static void save_next(struct cri *cri)
{
    struct cfg_save *w = cri->cfg_saves;
    if (cri->cfg_saving || !w)
        return;
    cri->cfg_saves = w->next;
    if (!cri->cfg_saves)
        cri->cfg_saves_tail = NULL;
    cri->cfg_saving = true;
    w->req.data = w;
    uv_queue_work(cri->loop, &w->req, save_work, save_done);
}

static void save_done(uv_work_t *req, int status)
{
    struct cfg_save *w = req->data;
    struct cri_call *call = w->call;
    struct cri *cri = call->cri;
    if (status < 0)
        w->result = status;
    if (w->result < 0) {
        cri_fail(call, GRPC_STATUS_INTERNAL, "persist the pod CIDR in `%s`: %s", w->path,
                 strerror(-w->result));
    } else {
        bool changed = !cri->pod_cidr || strcmp(cri->pod_cidr, w->cidr) != 0;
        free(cri->pod_cidr);
        cri->pod_cidr = TAKE_PTR(w->cidr);
        if (changed) {
            log_info("pod CIDR set to `%s`", cri->pod_cidr);
            sandbox_net_status_refresh(cri, true);
        }
        Runtime__V1__UpdateRuntimeConfigResponse resp =
            RUNTIME__V1__UPDATE_RUNTIME_CONFIG_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    }
    cfg_save_free(w);
    cri->cfg_saving = false;
    save_next(cri);
}

void cri_runtime_config_shutdown(struct cri *cri)
{
    /* the save in flight ends in save_done; the queued ones end now */
    struct cfg_save *w = cri->cfg_saves;
    cri->cfg_saves = cri->cfg_saves_tail = NULL;
    while (w) {
        struct cfg_save *next = w->next;
        cri_fail(w->call, GRPC_STATUS_UNAVAILABLE, "kinglet is shutting down");
        cfg_save_free(w);
        w = next;
    }
}

void cri_update_runtime_config(struct cri_call *call)
{
    const Runtime__V1__UpdateRuntimeConfigRequest *req = (const void *)call->req;
    const char *cidr = req->runtime_config && req->runtime_config->network_config
                           ? req->runtime_config->network_config->pod_cidr
                           : "";
    struct err err = {0};
    if (pod_cidr_check(cidr, &err) < 0) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "UpdateRuntimeConfig: pod_cidr: %s",
                 err_str(&err));
        return;
    }
    struct cri *cri = call->cri;
    /* Nothing to save when nothing else is queued and it is in use. */
    if (!cri->cfg_saving && !cri->cfg_saves && cri->pod_cidr && strcmp(cri->pod_cidr, cidr) == 0) {
        Runtime__V1__UpdateRuntimeConfigResponse resp =
            RUNTIME__V1__UPDATE_RUNTIME_CONFIG_RESPONSE__INIT;
        cri_reply(call, &resp.base);
        return;
    }
    struct cfg_save *w = calloc(1, sizeof(*w));
    if (w && asprintf(&w->path, "%s/" RUNTIME_CONFIG_FILE, cri->root_dir) < 0)
        w->path = NULL;
    if (!w || !w->path || !(w->cidr = strdup(cidr)) ||
        buf_printf(&w->content, "{\"podCIDR\":") < 0 ||
        buf_append_json_string(&w->content, cidr) < 0 || buf_append(&w->content, "}\n", 2) < 0) {
        if (w)
            cfg_save_free(w);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "prepare runtime config: out of memory");
        return;
    }
    w->call = call;
    w->dir = cri->root_dir;
    if (cri->cfg_saves_tail)
        cri->cfg_saves_tail->next = w;
    else
        cri->cfg_saves = w;
    cri->cfg_saves_tail = w;
    save_next(cri);
}
