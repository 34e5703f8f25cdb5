/* CreateContainer: checks the request on the loop, pins the image's layers
 * (image_hold), then builds the container in a worker: the writable layer
 * and the overlay rootfs, the OCI spec from the ContainerConfig, the image's
 * config and the pod, and the executor's container (an exec of this very
 * binary as `kinglet oci create`, as containerd drives runc: a fresh
 * single-threaded process, not a fork of the daemon). The container is
 * linked into the registry only when all of it is done; a failure anywhere
 * removes what was made and releases the image.
 *
 * The worker gets copies of everything it reads (the record to write, the
 * serialized configs, paths) in its job and touches nothing of the loop's. */
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "cri/containers.h"
#include "oci/oci.h"

#define CTR_LAYERS_MAX 256

/* (pod, name, attempt) of a create in flight. */
struct ctr_pending {
    struct ctr_pending *next;
    char pod_id[STORE_ID_LEN + 1];
    char *name;
    uint32_t attempt;
};

struct create_job {
    uv_work_t req;
    struct cri_call *call;       /* loop side only */
    struct ctr_pending *pending; /* loop side only */
    /* in: copies */
    struct store_container rec; /* to be completed and written */
    char *oci_root, *bundles_dir, *records_dir;
    char **lowers; /* snapshot directories, bottom layer first */
    size_t n_lowers;
    char *image_config; /* path of the image's config blob */
    char pod_dir[4200];
    uint8_t *pod_config; /* serialized PodSandboxConfig */
    size_t pod_config_len;
    bool pod_host_network, pod_host_ipc;
    char *pod_cgroup; /* NULL: none */
    /* out */
    int monitor_fd;
    pid_t pid;
    struct err err;
    int r;
};

static void create_job_free(struct create_job *j)
{
    store_ctr_clear(&j->rec);
    free(j->oci_root);
    free(j->bundles_dir);
    free(j->records_dir);
    for (size_t i = 0; i < j->n_lowers; i++)
        free(j->lowers[i]);
    free(j->lowers);
    free(j->image_config);
    free(j->pod_config);
    free(j->pod_cgroup);
    if (j->monitor_fd >= 0)
        close(j->monitor_fd);
    free(j);
}

/* ---- the worker ---- */

/* The overlay rootfs: lower directories given as /proc/self/fd/N of
 * O_PATH descriptors (short, and immune to renames meanwhile), the
 * writable layer's upper and work directories. */
static int mount_rootfs(struct create_job *j, const char *layer, const char *rootfs,
                        struct err *err)
{
    int fds[CTR_LAYERS_MAX];
    size_t nfd = 0;
    struct buf opts = {0};
    int r = 0;
    if (j->n_lowers == 0 || j->n_lowers > CTR_LAYERS_MAX)
        return err_set(err, EINVAL, "image has %zu layers (1 to %d supported)", j->n_lowers,
                       CTR_LAYERS_MAX);
    buf_printf(&opts, "lowerdir=");
    /* overlayfs lists the top layer first */
    for (size_t i = j->n_lowers; i-- > 0;) {
        int fd = open(j->lowers[i], O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            r = err_set(err, errno, "image layer `%s`", j->lowers[i]);
            goto out;
        }
        fds[nfd++] = fd;
        buf_printf(&opts, "%s/proc/self/fd/%d", i + 1 == j->n_lowers ? "" : ":", fd);
    }
    buf_printf(&opts, ",upperdir=%s/upper,workdir=%s/work,index=off,xino=off", layer, layer);
    if (buf_append(&opts, "", 1) < 0) {
        r = err_set(err, ENOMEM, "overlay options");
        goto out;
    }
    if (opts.len > 4095) {
        r = err_set(err, E2BIG, "image has too many layers (%zu) for one overlay mount",
                    j->n_lowers);
        goto out;
    }
    if (mount("overlay", rootfs, "overlay", MS_NODEV, (char *)opts.data) < 0)
        r = err_set(err, errno, "mount the container's overlay rootfs");
out:
    for (size_t i = 0; i < nfd; i++)
        close(fds[i]);
    buf_free(&opts);
    return r;
}

/* ---- the OCI spec (a first translation; see container_spec.c) ---- */

/* Appends the strings of v to a. */
static void strv_append(json_t *a, char **v, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
}

static int build_spec(struct create_job *j, const Runtime__V1__ContainerConfig *cfg,
                      const char *rootfs, json_t **ret, struct err *err)
{
    _cleanup_free_ char *imgtext = NULL;
    size_t imglen = 0;
    int r = read_file_at(AT_FDCWD, j->image_config, 4u << 20, &imgtext, &imglen);
    if (r < 0)
        return err_set(err, -r, "read the image's config");
    json_t *img = json_loadb(imgtext, imglen, 0, NULL);
    json_t *ic = json_object_get(img, "config");
    json_t *args = json_array(), *env = json_array();
    json_t *ep = json_object_get(ic, "Entrypoint"), *cmd = json_object_get(ic, "Cmd");
    if (cfg->n_command) {
        strv_append(args, cfg->command, cfg->n_command);
        if (cfg->n_args)
            strv_append(args, cfg->args, cfg->n_args);
    } else {
        if (json_is_array(ep))
            json_array_extend(args, ep);
        if (cfg->n_args)
            strv_append(args, cfg->args, cfg->n_args);
        else if (json_is_array(cmd))
            json_array_extend(args, cmd);
    }
    json_t *ienv = json_object_get(ic, "Env");
    if (json_is_array(ienv))
        json_array_extend(env, ienv);
    for (size_t i = 0; i < cfg->n_envs; i++) {
        char *kv;
        if (asprintf(&kv, "%s=%s", cfg->envs[i]->key, cfg->envs[i]->value) >= 0) {
            json_array_append_new(env, json_string(kv));
            free(kv);
        }
    }
    const char *cwd = cfg->working_dir && *cfg->working_dir
                          ? cfg->working_dir
                          : json_string_value(json_object_get(ic, "WorkingDir"));
    if (!json_array_size(args)) {
        json_decref(img);
        json_decref(args);
        json_decref(env);
        return err_set(err, EINVAL, "no command: the config and the image give none");
    }
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        cfg->linux ? cfg->linux->security_context : NULL;
    int64_t uid = sc && sc->run_as_user ? sc->run_as_user->value : 0;
    int64_t gid = sc && sc->run_as_group ? sc->run_as_group->value : 0;
    j->rec.uid = (uint32_t)uid;
    j->rec.gid = (uint32_t)gid;
    const char *stopsig = json_string_value(json_object_get(ic, "StopSignal"));
    j->rec.stop_signal = SIGTERM;
    if (cfg->stop_signal)
        j->rec.stop_signal = cri_signal_from_enum(cfg->stop_signal);
    else if (stopsig && !strcmp(stopsig, "SIGQUIT"))
        j->rec.stop_signal = SIGQUIT;
    json_decref(img);

    static const char *const caps[] = {
        "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
        "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
        "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
        "CAP_KILL",    "CAP_AUDIT_WRITE"};
    json_t *capv = json_array();
    for (size_t i = 0; i < ARRAY_SIZE(caps); i++)
        json_array_append_new(capv, json_string(caps[i]));
    json_t *spec = json_pack(
        "{s:s, s:{s:b, s:o, s:o, s:s, s:{s:I, s:I}, s:{s:O, s:O, s:O, s:o}, s:b}, s:{s:s, s:b}}",
        "ociVersion", "1.2.0", "process", "terminal", cfg->tty, "args", args, "env", env, "cwd",
        cwd && *cwd ? cwd : "/", "user", "uid", (json_int_t)uid, "gid", (json_int_t)gid,
        "capabilities", "bounding", capv, "effective", capv, "permitted", capv, "inheritable",
        json_array(), "noNewPrivileges", 0, "root", "path", rootfs, "readonly",
        sc && sc->readonly_rootfs);
    json_decref(capv);
    if (!spec)
        return err_set(err, ENOMEM, "spec");
    char path[4400];
    json_t *mounts = json_array();
#define MNT(dst, type, src, fmt, ...)                                                              \
    json_array_append_new(mounts, json_pack("{s:s,s:s,s:s,s:[" fmt "]}", "destination", dst,       \
                                            "type", type, "source", src, "options", __VA_ARGS__))
    MNT("/proc", "proc", "proc", "s,s,s", "nosuid", "noexec", "nodev");
    MNT("/dev", "tmpfs", "tmpfs", "s,s,s,s", "nosuid", "strictatime", "mode=755", "size=65536k");
    MNT("/dev/pts", "devpts", "devpts", "s,s,s,s,s", "nosuid", "noexec", "newinstance",
        "ptmxmode=0666", "mode=0620");
    MNT("/dev/mqueue", "mqueue", "mqueue", "s,s,s", "nosuid", "noexec", "nodev");
    MNT("/sys", "sysfs", "sysfs", "s,s,s,s", "nosuid", "noexec", "nodev", "ro");
    MNT("/sys/fs/cgroup", "cgroup", "cgroup", "s,s,s,s,s", "nosuid", "noexec", "nodev", "relatime",
        "ro");
    static const char *const files[][2] = {{"shm", "/dev/shm"},
                                           {"hosts", "/etc/hosts"},
                                           {"hostname", "/etc/hostname"},
                                           {"resolv.conf", "/etc/resolv.conf"}};
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        bool taken = false;
        for (size_t k = 0; k < cfg->n_mounts; k++)
            taken |= !strcmp(cfg->mounts[k]->container_path, files[i][1]);
        if (taken)
            continue;
        snprintf(path, sizeof(path), "%s/%s", j->pod_dir, files[i][0]);
        MNT(files[i][1], "bind", path, "s,s", "rbind", i == 0 ? "rw" : "rw");
    }
    for (size_t k = 0; k < cfg->n_mounts; k++) {
        const Runtime__V1__Mount *m = cfg->mounts[k];
        MNT(m->container_path, "bind", m->host_path, "s,s,s", "rbind", m->readonly ? "ro" : "rw",
            "rprivate");
    }
#undef MNT
    json_object_set_new(spec, "mounts", mounts);
    json_t *ns = json_array();
    json_array_append_new(ns, json_pack("{s:s}", "type", "mount"));
    static const char *const kinds[][2] = {{"network", "net"}, {"ipc", "ipc"}, {"uts", "uts"}};
    for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
        if ((i == 0 && j->pod_host_network) || (i == 1 && j->pod_host_ipc))
            continue;
        snprintf(path, sizeof(path), "%s/ns/%s", j->pod_dir, kinds[i][1]);
        json_array_append_new(ns, json_pack("{s:s,s:s}", "type", kinds[i][0], "path", path));
    }
    snprintf(path, sizeof(path), "%s/ns/pid", j->pod_dir);
    if (access(path, F_OK) == 0)
        json_array_append_new(ns, json_pack("{s:s,s:s}", "type", "pid", "path", path));
    else
        json_array_append_new(ns, json_pack("{s:s}", "type", "pid"));
    json_t *lx = json_pack(
        "{s:o, s:[s,s,s,s,s,s,s,s,s], s:[s,s,s,s,s,s]}", "namespaces", ns, "maskedPaths",
        "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
        "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "readonlyPaths",
        "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger");
    if (j->pod_cgroup) {
        snprintf(path, sizeof(path), "%s/%s", j->pod_cgroup, j->rec.id);
        json_object_set_new(lx, "cgroupsPath", json_string(path));
        free(j->rec.cgroup_path);
        j->rec.cgroup_path = strdup(path);
    }
    json_object_set_new(spec, "linux", lx);
    *ret = spec;
    return 0;
}

/* mkdir -p of path inside the tree at rootfd, never leaving it. */
static int mkdir_in_root(int rootfd, const char *path, struct err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return err_set(err, ENAMETOOLONG, "`%s`", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                   .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
            int fd = (int)syscall(SYS_openat2, rootfd, buf, &how, sizeof(how));
            if (fd < 0) {
                /* make the missing component in its (resolved) parent */
                char *slash = strrchr(buf, '/');
                char name[256];
                snprintf(name, sizeof(name), "%s", slash + 1);
                *slash = '\0';
                int pfd = (int)syscall(SYS_openat2, rootfd, *buf ? buf : "/", &how, sizeof(how));
                *slash = '/';
                if (pfd < 0 || (mkdirat(pfd, name, 0755) < 0 && errno != EEXIST)) {
                    int e = errno;
                    if (pfd >= 0)
                        close(pfd);
                    return err_set(err, e, "create `%s` in the container", path);
                }
                close(pfd);
            } else {
                close(fd);
            }
            if (end)
                break;
            *p = '/';
        }
    }
    return 0;
}

/* The last error line of `kinglet oci --log-format json`. */
static void oci_log_error(const char *log, struct err *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (read_file_at(AT_FDCWD, log, 1 << 20, &text, &len) < 0 || !len) {
        err_set(err, EIO, "the executor failed without a message");
        return;
    }
    char *line = text, *last = NULL;
    for (char *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        if (strstr(line, "\"level\":\"error\""))
            last = line;
    }
    if (!last && strstr(line, "\"level\":\"error\""))
        last = line;
    json_t *o = last ? json_loads(last, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(o, "msg"));
    err_set(err, EIO, "%s", msg ? msg : "the executor failed");
    json_decref(o);
}

static void create_work(uv_work_t *req)
{
    struct create_job *j = req->data;
    const char *id = j->rec.id;
    char bundle[4200], layer[4200], rootfs[4300], path[4400];
    snprintf(bundle, sizeof(bundle), "%s/%s", j->bundles_dir, id);
    snprintf(layer, sizeof(layer), "%s/%s", j->records_dir, id);
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs", bundle);
    Runtime__V1__ContainerConfig *cfg = (Runtime__V1__ContainerConfig *)protobuf_c_message_unpack(
        &runtime__v1__container_config__descriptor, NULL, j->rec.config_len, j->rec.config);
    json_t *spec = NULL;
    int r;
    if (!cfg) {
        j->r = err_set(&j->err, ENOMEM, "unpack the container config");
        return;
    }
    /* The writable layer survives reboots (kubelet expects it to stay
     * until removal); the bundle and the mount are volatile. Its root
     * directory is the container's "/": world-readable, as images have it. */
    if ((r = mkdir_p(j->records_dir, 0711)) < 0 || (mkdir(layer, 0700) < 0 && errno != EEXIST)) {
        j->r = err_set(&j->err, r < 0 ? -r : errno, "create `%s`", layer);
        goto fail;
    }
    snprintf(path, sizeof(path), "%s/upper", layer);
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        j->r = err_set(&j->err, errno, "create `%s`", path);
        goto fail;
    }
    snprintf(path, sizeof(path), "%s/work", layer);
    if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        j->r = err_set(&j->err, errno, "create `%s`", path);
        goto fail;
    }
    if ((r = mkdir_p(j->bundles_dir, 0700)) < 0 || mkdir(bundle, 0700) < 0 ||
        mkdir(rootfs, 0755) < 0) {
        j->r = err_set(&j->err, r < 0 ? -r : errno, "create `%s`", bundle);
        goto fail;
    }
    if ((j->r = mount_rootfs(j, layer, rootfs, &j->err)) < 0)
        goto fail;
    if ((j->r = build_spec(j, cfg, rootfs, &spec, &j->err)) < 0)
        goto fail;
    /* Missing bind sources become directories, as kubelet expects. */
    for (size_t i = 0; i < cfg->n_mounts; i++) {
        const char *src = cfg->mounts[i]->host_path;
        struct stat st;
        if (src && src[0] == '/' && stat(src, &st) < 0 && errno == ENOENT &&
            (r = mkdir_p(src, 0755)) < 0) {
            j->r = err_set(&j->err, -r, "create the mount source `%s`", src);
            goto fail;
        }
    }
    {
        const char *cwd =
            json_string_value(json_object_get(json_object_get(spec, "process"), "cwd"));
        _cleanup_close_ int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0 || (cwd && strcmp(cwd, "/") && (j->r = mkdir_in_root(rfd, cwd, &j->err)) < 0)) {
            if (rfd < 0)
                j->r = err_set(&j->err, errno, "open the rootfs");
            goto fail;
        }
    }
    if (j->rec.log_path) {
        char dir[4200];
        snprintf(dir, sizeof(dir), "%s", j->rec.log_path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            if ((r = mkdir_p(dir, 0755)) < 0) {
                j->r = err_set(&j->err, -r, "create the log directory `%s`", dir);
                goto fail;
            }
        }
    }
    {
        _cleanup_free_ char *text = json_dumps(spec, JSON_COMPACT);
        snprintf(path, sizeof(path), "%s/config.json", bundle);
        if (!text || (r = write_file_atomic(AT_FDCWD, path, text, strlen(text), 0600)) < 0) {
            j->r = err_set(&j->err, text ? -r : ENOMEM, "write `%s`", path);
            goto fail;
        }
    }
    {
        char log[4400];
        snprintf(log, sizeof(log), "%s/oci.log", bundle);
        char *argv[20];
        int n = 0;
        argv[n++] = "kinglet";
        argv[n++] = "oci";
        argv[n++] = "--root";
        argv[n++] = j->oci_root;
        argv[n++] = "--log";
        argv[n++] = log;
        argv[n++] = "--log-format";
        argv[n++] = "json";
        argv[n++] = "create";
        argv[n++] = "--bundle";
        argv[n++] = bundle;
        if (j->rec.log_path) {
            argv[n++] = "--cri-log";
            argv[n++] = j->rec.log_path;
        }
        if (cfg->stdin)
            argv[n++] = "--cri-stdin";
        if (cfg->stdin && cfg->stdin_once)
            argv[n++] = "--cri-stdin-once";
        argv[n++] = (char *)id;
        argv[n] = NULL;
        int status = 0;
        if ((r = spawn_wait("/proc/self/exe", argv, NULL, -1, -1, -1, &status)) < 0) {
            j->r = err_set(&j->err, -r, "run the executor");
            goto fail;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            oci_log_error(log, &j->err);
            j->r = -j->err.code;
            goto fail;
        }
    }
    r = oci_container_monitor(j->oci_root, id, &j->pid, &j->err);
    if (r < 0) {
        j->r = r;
        goto fail;
    }
    j->monitor_fd = r;
    j->rec.state = STORE_CTR_CREATED;
    {
        _cleanup_free_ char *json = NULL;
        size_t len = 0;
        if ((j->r = store_ctr_to_json(&j->rec, &json, &len, &j->err)) < 0 ||
            (j->r = store_record_write(j->records_dir, id, json, len, &j->err)) < 0)
            goto fail;
    }
    json_decref(spec);
    protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return;
fail:
    json_decref(spec);
    protobuf_c_message_free_unpacked(&cfg->base, NULL);
    if (j->monitor_fd >= 0) {
        close(j->monitor_fd);
        j->monitor_fd = -1;
    }
    struct err e = {0};
    if (container_remains_remove(j->oci_root, j->bundles_dir, j->records_dir, id, &e) < 0)
        log_warn("container `%s`: clean up a failed create: %s", id, err_str(&e));
}

/* ---- the loop ---- */

static void pending_drop(struct containers *cs, struct ctr_pending *p)
{
    for (struct ctr_pending **pp = &cs->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    free(p->name);
    free(p);
}

static void release_done(void *data, int r, const struct err *err)
{
    (void)data;
    if (r < 0)
        log_warn("release an image after a failed create: %s", err_str(err));
}

static void unwanted_removed(void *data, int r, const struct err *err)
{
    struct cri_call *call = data;
    if (r < 0)
        log_warn("remove a container made for a pod that stopped meanwhile: %s", err_str(err));
    cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
             "CreateContainer: the pod sandbox stopped while the container was created");
}

static void remove_unwanted(void *data, void *obj)
{
    struct container *c = obj;
    container_remove(c->cri, c, unwanted_removed, data);
}

static void create_done(uv_work_t *req, int status)
{
    struct create_job *j = req->data;
    struct cri_call *call = j->call;
    struct cri *cri = call->cri;
    pending_drop(cri->containers, j->pending);
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    if (j->r < 0) {
        struct err e = {0};
        image_release(cri->images, j->rec.id, release_done, NULL, &e);
        err_wrap(&j->err, "create container");
        cri_fail_err(call, &j->err);
        create_job_free(j);
        return;
    }
    struct container *c = calloc(1, sizeof(*c));
    if (c) {
        c->cri = cri;
        c->monitor_fd = -1;
        c->rec = j->rec;
        j->rec = (struct store_container){0};
        c->config = (Runtime__V1__ContainerConfig *)protobuf_c_message_unpack(
            &runtime__v1__container_config__descriptor, NULL, c->rec.config_len, c->rec.config);
    }
    if (!c || !c->config) {
        /* The container exists on disk: the next start recovers it. */
        if (c)
            store_ctr_clear(&c->rec);
        free(c);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        create_job_free(j);
        return;
    }
    container_link(cri, c);
    container_watch(cri, c, TAKE_FD(j->monitor_fd), j->pid);
    bool amb;
    struct sandbox *sb = sandbox_find(cri, c->rec.pod_id, &amb);
    if (!sb || sandbox_state(sb) != RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY) {
        /* The pod was stopped or removed while this container was made:
         * it goes again, and the call fails. */
        opq_begin(&c->ops, call, remove_unwanted, c);
        create_job_free(j);
        return;
    }
    log_info("container `%s` (%s) created in pod `%s`", c->rec.id, c->config->metadata->name,
             c->rec.pod_id);
    Runtime__V1__CreateContainerResponse resp = RUNTIME__V1__CREATE_CONTAINER_RESPONSE__INIT;
    resp.container_id = c->rec.id;
    cri_reply(call, &resp.base);
    container_event(cri, c, RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_CREATED_EVENT);
    create_job_free(j);
}

static void hold_done(void *data, int r, const struct err *err)
{
    struct create_job *j = data;
    struct cri_call *call = j->call;
    if (r < 0) {
        pending_drop(call->cri->containers, j->pending);
        cri_fail(call, cri_status_from_errno(r), "create container: hold its image: %s",
                 err ? err_str(err) : "");
        create_job_free(j);
        return;
    }
    j->req.data = j;
    uv_queue_work(call->cri->loop, &j->req, create_work, create_done);
}

/* Who holds (pod, name, attempt): a container's id, "a create in
 * progress", or NULL. */
static const char *name_holder(struct cri *cri, const char *pod_id,
                               const Runtime__V1__ContainerMetadata *md)
{
    for (struct container *c = cri->containers->head; c; c = c->next)
        if (!strcmp(c->rec.pod_id, pod_id) && c->config->metadata->attempt == md->attempt &&
            !strcmp(c->config->metadata->name, md->name))
            return c->rec.id;
    for (struct ctr_pending *p = cri->containers->pending; p; p = p->next)
        if (!strcmp(p->pod_id, pod_id) && p->attempt == md->attempt && !strcmp(p->name, md->name))
            return "a create in progress";
    return NULL;
}

/* log_directory (the pod's) + log_path (the container's), as kubelet sends
 * them: an absolute directory and a relative path that stays inside it. */
static int log_path(const Runtime__V1__PodSandboxConfig *pod, const char *rel, char **ret,
                    struct err *err)
{
    *ret = NULL;
    if (!rel || !*rel)
        return 0;
    const char *dir = pod->log_directory;
    if (!dir || dir[0] != '/')
        return err_set(err, EINVAL, "log_path `%.200s` needs the pod's log_directory", rel);
    if (rel[0] == '/' || strstr(rel, "..") || strlen(dir) + strlen(rel) > 4000)
        return err_set(err, EINVAL,
                       "log_path `%.200s` must be a relative path inside the "
                       "pod's log directory",
                       rel);
    if (asprintf(ret, "%s/%s", dir, rel) < 0) {
        *ret = NULL;
        return err_set(err, ENOMEM, "log path");
    }
    return 0;
}

void cri_create_container(struct cri_call *call)
{
    struct cri *cri = call->cri;
    struct containers *cs = cri->containers;
    Runtime__V1__CreateContainerRequest *req = (Runtime__V1__CreateContainerRequest *)call->req;
    Runtime__V1__ContainerConfig *cfg = req->config;
    struct err err = {0};
    if (!cfg || !cfg->metadata || !*cfg->metadata->name) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "CreateContainer: config.metadata needs a name");
        return;
    }
    if (!cfg->image || !*cfg->image->image) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "CreateContainer: config.image is empty");
        return;
    }
    bool ambiguous;
    struct sandbox *sb = sandbox_find(cri, req->pod_sandbox_id, &ambiguous);
    if (!sb) {
        cri_fail(call, ambiguous ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_NOT_FOUND,
                 "CreateContainer: pod sandbox `%.64s` %s", req->pod_sandbox_id,
                 ambiguous ? "is an ambiguous prefix" : "not found");
        return;
    }
    if (sandbox_state(sb) != RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "CreateContainer: pod sandbox `%s` is not ready", sb->rec.id);
        return;
    }
    const char *holder = name_holder(cri, sb->rec.id, cfg->metadata);
    if (holder) {
        cri_fail(call, GRPC_STATUS_ALREADY_EXISTS,
                 "CreateContainer: container `%.128s` (attempt %u) of pod `%s` already exists: "
                 "`%s`",
                 cfg->metadata->name, cfg->metadata->attempt, sb->rec.id, holder);
        return;
    }
    const struct image_info *img = image_lookup(cri->images, cfg->image->image);
    if (!img) {
        cri_fail(call, GRPC_STATUS_NOT_FOUND, "CreateContainer: image `%.256s` not found",
                 cfg->image->image);
        return;
    }
    size_t packed = protobuf_c_message_get_packed_size(&cfg->base);
    if (packed > STORE_CONFIG_MAX) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "CreateContainer: the container configuration is larger than %d bytes",
                 STORE_CONFIG_MAX);
        return;
    }
    struct create_job *j = calloc(1, sizeof(*j));
    struct ctr_pending *p = calloc(1, sizeof(*p));
    if (!j || !p) {
        free(j);
        free(p);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    j->monitor_fd = -1;
    j->pending = p;
    struct store_container *rec = &j->rec;
    if (log_path(sb->config, cfg->log_path, &rec->log_path, &err) < 0)
        goto fail;
    if (store_id_new(rec->id) < 0) {
        err_set(&err, errno, "random id");
        goto fail;
    }
    memcpy(rec->pod_id, sb->rec.id, sizeof(rec->pod_id));
    rec->created_ns = now_real_ns();
    rec->stop_signal = SIGTERM;
    if (!(rec->config = malloc(packed ? packed : 1)) || !(rec->image = strdup(cfg->image->image)) ||
        !(rec->image_id = strdup(img->id)) ||
        !(rec->image_ref = strdup(img->n_repo_digests ? img->repo_digests[0] : img->id)) ||
        !(j->oci_root = strdup(cs->oci_root)) || !(j->bundles_dir = strdup(cs->bundles_dir)) ||
        !(j->records_dir = strdup(cs->records_dir)) ||
        !(j->image_config = image_blob_path(cri->images, img->id)) ||
        (sb->rec.cgroup_path && !(j->pod_cgroup = strdup(sb->rec.cgroup_path))) ||
        !(j->pod_config = malloc(sb->rec.config_len ? sb->rec.config_len : 1)) ||
        !(p->name = strdup(cfg->metadata->name)) ||
        !(j->lowers = calloc(img->n_layers + 1, sizeof(char *)))) {
        err_set(&err, ENOMEM, "CreateContainer");
        goto fail;
    }
    rec->config_len = protobuf_c_message_pack(&cfg->base, rec->config);
    memcpy(j->pod_config, sb->rec.config, sb->rec.config_len);
    j->pod_config_len = sb->rec.config_len;
    for (size_t i = 0; i < img->n_layers; i++, j->n_lowers++)
        if (!(j->lowers[i] = image_snapshot_path(cri->images, img->chain_ids[i]))) {
            err_set(&err, ENOMEM, "CreateContainer");
            goto fail;
        }
    sandbox_dir(cri, sb->rec.id, j->pod_dir, sizeof(j->pod_dir));
    j->pod_host_network = sb->host_network;
    const Runtime__V1__LinuxPodSandboxConfig *lx = sb->config->linux;
    const Runtime__V1__NamespaceOption *ns =
        lx && lx->security_context ? lx->security_context->namespace_options : NULL;
    j->pod_host_ipc = ns && ns->ipc == RUNTIME__V1__NAMESPACE_MODE__NODE;
    memcpy(p->pod_id, sb->rec.id, sizeof(p->pod_id));
    p->attempt = cfg->metadata->attempt;
    p->next = cs->pending;
    cs->pending = p;
    j->call = call;
    if (image_hold(cri->images, rec->id, img->id, hold_done, j, &err) < 0) {
        pending_drop(cs, p);
        j->pending = NULL;
        cri_fail_err(call, &err);
        create_job_free(j);
        return;
    }
    return;
fail:
    free(p->name);
    free(p);
    create_job_free(j);
    err_wrap(&err, "create container");
    cri_fail_err(call, &err);
}
