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
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "cdi/cdi.h"
#include "cri/container_spec.h"
#include "cri/containers.h"
#include "cri/validate.h"
#include "oci/oci.h"

/* (pod, name, attempt) of a create in flight. */
struct ctr_pending {
    struct ctr_pending *next;
    char pod_id[STORE_ID_LEN + 1];
    char *name;
    uint32_t attempt;
};

/* An image volume: the config's mounts[mount] and its image's layers. */
struct imagevol {
    size_t mount;
    char **lowers; /* snapshot directories, bottom layer first */
    size_t n_lowers;
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
    struct imagevol *vols;
    size_t n_vols;
    char *image_config; /* path of the image's config blob */
    char pod_dir[4200];
    uint8_t *pod_config; /* serialized PodSandboxConfig */
    size_t pod_config_len;
    bool pod_host_network, pod_host_ipc;
    bool pod_userns; /* the pod has a user namespace of its own (ns/user) */
    struct pod_idmap uid_map, gid_map;
    char *cgroup_parent; /* the container cgroup's parent, NULL: none */
    char *target_pid_ns; /* PID mode TARGET: /proc/PID/ns/pid of the target */
    char *cgroup_mount;  /* the cgroup2 mount, with cgroup_parent */
    char *cdi_dirs;      /* CDI spec directories, comma-separated */
    /* out */
    int monitor_fd;
    pid_t pid;
    struct err err;
    bool err_named; /* err names the container already (the executor's) */
    int r;
};

static void paths_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void create_job_free(struct create_job *j)
{
    store_ctr_clear(&j->rec);
    free(j->oci_root);
    free(j->bundles_dir);
    free(j->records_dir);
    paths_free(j->lowers, j->n_lowers);
    for (size_t i = 0; i < j->n_vols; i++)
        paths_free(j->vols[i].lowers, j->vols[i].n_lowers);
    free(j->vols);
    free(j->image_config);
    free(j->pod_config);
    free(j->cgroup_parent);
    free(j->target_pid_ns);
    free(j->cgroup_mount);
    free(j->cdi_dirs);
    if (j->monitor_fd >= 0)
        close(j->monitor_fd);
    free(j);
}

/* ---- the worker ---- */

/* ---- facts for the spec (container_spec.c), gathered in the worker ---- */

#define DEVICES_MAX 4096

struct facts {
    json_t *image;         /* the image's config blob */
    char *passwd, *group;  /* the container's /etc files */
    char *seccomp_profile; /* Localhost */
    struct ctr_device *devices, *host_devices;
    size_t n_devices, n_host_devices;
};

static void facts_clear(struct facts *f)
{
    json_decref(f->image);
    free(f->passwd);
    free(f->group);
    free(f->seccomp_profile);
    for (size_t i = 0; i < f->n_devices; i++)
        free(f->devices[i].path);
    for (size_t i = 0; i < f->n_host_devices; i++)
        free(f->host_devices[i].path);
    free(f->devices);
    free(f->host_devices);
}

/* Adds the device node at host (seen in the container at ctr). Not a
 * device: -ENODEV. */
static int device_add(struct ctr_device **v, size_t *n, const char *host, const char *ctr,
                      const char *perms)
{
    struct stat st;
    if (stat(host, &st) < 0)
        return -errno;
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode))
        return -ENODEV;
    if (*n >= DEVICES_MAX)
        return -E2BIG;
    if (*n % 64 == 0) {
        struct ctr_device *nv = realloc(*v, (*n + 64) * sizeof(**v));
        if (!nv)
            return -ENOMEM;
        *v = nv;
    }
    struct ctr_device *d = &(*v)[*n];
    *d = (struct ctr_device){.type = S_ISCHR(st.st_mode) ? 'c' : 'b',
                             .major = major(st.st_rdev),
                             .minor = minor(st.st_rdev),
                             .mode = st.st_mode & 07777,
                             .perms = perms};
    if (!(d->path = strdup(ctr)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

/* Every device node below dir (host), as ctr below the container's path;
 * what is not a device is skipped. */
static int devices_walk(struct ctr_device **v, size_t *n, const char *dir, const char *ctr,
                        const char *perms, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r >= 0 && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char h[4096], c[4096];
        if (snprintf(h, sizeof(h), "%s/%s", dir, de->d_name) >= (int)sizeof(h) ||
            snprintf(c, sizeof(c), "%s/%s", ctr, de->d_name) >= (int)sizeof(c))
            continue;
        if (de->d_type == DT_DIR) {
            /* the pty and shm mounts are the container's own */
            if (depth < 4 && strcmp(h, "/dev/pts") && strcmp(h, "/dev/shm") &&
                strcmp(h, "/dev/mqueue"))
                r = devices_walk(v, n, h, c, perms, depth + 1);
        } else if (de->d_type == DT_CHR || de->d_type == DT_BLK) {
            r = device_add(v, n, h, c, perms);
            if (r == -ENOENT || r == -ENODEV)
                r = 0;
        }
    }
    closedir(d);
    return r;
}

static int gather_facts(const struct create_job *j, const Runtime__V1__ContainerConfig *cfg,
                        int rootfd, struct facts *f, struct err *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = read_file_at(AT_FDCWD, j->image_config, 4u << 20, &text, &len);
    if (r < 0)
        return err_set(err, -r, "read the image's config");
    if (!(f->image = json_loadb(text, len, 0, NULL)))
        return err_set(err, EINVAL, "the image's config is not JSON");
    /* the image's own user database; missing files are fine */
    r = read_file_in_root(rootfd, "/etc/passwd", 1u << 20, &f->passwd, NULL);
    if (r < 0 && r != -ENOENT && r != -ENOTDIR)
        return err_set(err, -r, "read the image's /etc/passwd");
    r = read_file_in_root(rootfd, "/etc/group", 1u << 20, &f->group, NULL);
    if (r < 0 && r != -ENOENT && r != -ENOTDIR)
        return err_set(err, -r, "read the image's /etc/group");
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        cfg->linux ? cfg->linux->security_context : NULL;
    if (sc && sc->seccomp &&
        sc->seccomp->profile_type == RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost &&
        !sc->privileged) {
        r = read_file_at(AT_FDCWD, sc->seccomp->localhost_ref, 1u << 20, &f->seccomp_profile, NULL);
        if (r < 0)
            return err_set(err, -r, "seccomp Localhost profile `%.200s`",
                           sc->seccomp->localhost_ref);
    }
    for (size_t i = 0; i < cfg->n_devices; i++) {
        const Runtime__V1__Device *d = cfg->devices[i];
        struct stat st;
        if (stat(d->host_path, &st) < 0)
            return err_set(err, errno, "devices[%zu]: `%.200s`", i, d->host_path);
        r = S_ISDIR(st.st_mode) ? devices_walk(&f->devices, &f->n_devices, d->host_path,
                                               d->container_path, d->permissions, 0)
                                : device_add(&f->devices, &f->n_devices, d->host_path,
                                             d->container_path, d->permissions);
        if (r < 0)
            return err_set(err, -r, "devices[%zu]: `%.200s`", i, d->host_path);
    }
    if (sc && sc->privileged &&
        (r = devices_walk(&f->host_devices, &f->n_host_devices, "/dev", "/dev", NULL, 0)) < 0)
        return err_set(err, -r, "list the host's devices");
    return 0;
}

/* The spec's AppArmor profile in the kernel before the container asks for
 * it: kinglet's default loaded on first use, a Localhost one refused when
 * the host has not loaded it (as containerd does). */
static int apparmor_ready(json_t *spec, struct err *err)
{
    const char *name =
        json_string_value(json_object_get(json_object_get(spec, "process"), "apparmorProfile"));
    if (!name)
        return 0;
    if (strcmp(name, OCI_APPARMOR_DEFAULT) == 0)
        return oci_apparmor_ensure_default(err);
    int r = oci_apparmor_loaded(name, err);
    if (r == 0)
        return err_set(err, EINVAL, "apparmor: the Localhost profile `%.200s` is not loaded", name);
    return r < 0 ? r : 0;
}

static void host_facts(struct ctr_host_facts *h)
{
    h->apparmor = oci_apparmor_enabled();
    h->selinux = access("/sys/fs/selinux/enforce", F_OK) == 0;
    /* mount_setattr exists when it refuses bad flags rather than being
     * unknown */
    h->rro = syscall(SYS_mount_setattr, -1, "", 0, NULL, 0) < 0 && errno != ENOSYS;
    /* Without CAP_SYS_RESOURCE nothing we start may go below our own
     * value. */
    h->oom_score_adj_min = -1000;
    _cleanup_free_ char *status = NULL;
    if (read_file_at(AT_FDCWD, "/proc/self/status", 1 << 16, &status, NULL) == 0) {
        const char *b = strstr(status, "\nCapBnd:");
        if (b)
            h->caps = strtoull(b + 9, NULL, 16);
    }
    _cleanup_free_ char *v = NULL;
    if (read_file_at(AT_FDCWD, "/proc/self/oom_score_adj", 64, &v, NULL) == 0) {
        int own = atoi(v);
        struct __user_cap_header_struct hd = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2] = {0};
        if (syscall(SYS_capget, &hd, d) == 0 &&
            !(d[CAP_SYS_RESOURCE / 32].effective & (1u << (CAP_SYS_RESOURCE % 32))))
            h->oom_score_adj_min = own;
    }
}

/* The edits of the CDI devices the container asks for, resolved from the
 * spec directories as they are now (a spec rewritten since the last
 * container is read again) and completed from the host's nodes. *ret
 * NULL: none asked for. Before anything of the container is made, so that
 * an unknown device or a broken spec costs nothing to undo. */
static int cdi_edits(const struct create_job *j, const Runtime__V1__ContainerConfig *cfg,
                     json_t **ret, struct err *err)
{
    char **names = NULL;
    size_t n = 0;
    int r;
    *ret = NULL;
    if ((r = ctr_cdi_names(cfg, &names, &n, err)) < 0 || n == 0)
        return r;
    const char *dirs[16];
    size_t nd = 0;
    _cleanup_free_ char *copy = strdup(j->cdi_dirs);
    struct cdi_registry reg = {0};
    if (!copy) {
        r = err_set(err, ENOMEM, "CDI");
        goto out;
    }
    for (char *save = NULL, *d = strtok_r(copy, ",", &save); d && nd < ARRAY_SIZE(dirs);
         d = strtok_r(NULL, ",", &save))
        dirs[nd++] = d;
    if ((r = cdi_registry_load(dirs, nd, &reg, err)) < 0 ||
        (r = cdi_resolve(&reg, names, n, ret, err)) < 0 || (r = cdi_edits_fill(*ret, err)) < 0) {
        json_decref(*ret);
        *ret = NULL;
    }
out:
    cdi_registry_clear(&reg);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

/* mkdir -p of path inside the tree at rootfd, never leaving it; what it
 * makes is owned by uid and gid (the container's root on the host: the
 * pod's mapped root in a user namespace, whose root could not write in a
 * directory of the host's). */
static int mkdir_in_root(int rootfd, const char *path, uid_t uid, gid_t gid, struct err *err)
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
            int fd = openat2_retry(rootfd, buf, &how);
            if (fd < 0) {
                /* make the missing component in its (resolved) parent */
                char *slash = strrchr(buf, '/');
                char name[256];
                snprintf(name, sizeof(name), "%s", slash + 1);
                *slash = '\0';
                int pfd = openat2_retry(rootfd, *buf ? buf : "/", &how);
                *slash = '/';
                int made = pfd < 0 ? -1 : mkdirat(pfd, name, 0755);
                if (pfd < 0 || (made < 0 && errno != EEXIST) ||
                    (made == 0 && (uid || gid) &&
                     fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)) {
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

/* Runs `kinglet oci` with argv and waits for it. Its failure comes back
 * as the error record it writes to --error-fd (base.h: the code and the
 * message apart), so that the status map sees the executor's errno and
 * the system's text is added once; its --log is for people. The record is
 * read once it has exited, from a non-blocking pipe: the container's init
 * holds a copy of the write end until its execve. */
static int executor_run(char **argv, struct err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
        return err_set(err, errno, "the executor's error pipe");
    _cleanup_close_ int rd = p[0];
    _cleanup_close_ int wr = p[1];
    /* the write end becomes the executor's fd 3 */
    pid_t pid;
    int r = spawn_start(exe_children_path(), argv, exe_children_env(), -1, -1, -1, &wr, 1, &pid);
    if (r < 0)
        return err_set(err, -r, "run the executor");
    close(TAKE_FD(wr));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return err_set(err, errno, "wait for the executor");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    r = err_record_read(rd, err);
    if (r == 0)
        return -err->code;
    if (r != -ENODATA)
        return err_set(err, EPROTO, "the executor's error record");
    if (WIFSIGNALED(status))
        return err_set_msg(err, EIO, "the executor was killed by signal %d", WTERMSIG(status));
    return err_set_msg(err, EIO, "the executor failed with exit status %d without an error",
                       WEXITSTATUS(status));
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
    json_t *spec = NULL; /* cs's */
    json_t *cdi = NULL;
    struct facts facts = {0};
    struct ctr_spec cs = {0};
    char **sources = NULL; /* per config mount: an image volume's host path */
    int userns = -1;       /* the pod's user namespace, if it has one */
    int r;
    if (!cfg) {
        j->r = err_set(&j->err, ENOMEM, "unpack the container config");
        return;
    }
    if ((j->r = cdi_edits(j, cfg, &cdi, &j->err)) < 0) {
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
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
    if (j->pod_userns) {
        snprintf(path, sizeof(path), "%s/ns/user", j->pod_dir);
        userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0) {
            j->r = err_set(&j->err, errno, "the pod's user namespace `%s`", path);
            goto fail;
        }
        struct ctr_overlay_idmap idmap = {
            .userns = userns, .root_uid = j->uid_map.host_id, .root_gid = j->gid_map.host_id};
        j->r = ctr_overlay_mount(j->lowers, j->n_lowers, layer, rootfs, &idmap, &j->err);
    } else {
        j->r = ctr_overlay_mount(j->lowers, j->n_lowers, layer, rootfs, NULL, &j->err);
    }
    if (j->r < 0)
        goto fail;
    if (j->n_vols && !(sources = calloc(cfg->n_mounts, sizeof(*sources)))) {
        j->r = err_set(&j->err, ENOMEM, "image volumes");
        goto fail;
    }
    for (size_t i = 0; i < j->n_vols; i++) {
        const struct imagevol *v = &j->vols[i];
        if ((j->r = ctr_imagevol_mount(bundle, v->mount, v->lowers, v->n_lowers,
                                       cfg->mounts[v->mount]->image_sub_path, userns,
                                       &sources[v->mount], &j->err)) < 0) {
            err_wrap(&j->err, "image volume mounts[%zu] (`%.200s`)", v->mount,
                     cfg->mounts[v->mount]->image->image);
            goto fail;
        }
    }
    if (userns >= 0) {
        close(userns);
        userns = -1;
    }
    {
        _cleanup_close_ int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0) {
            j->r = err_set(&j->err, errno, "open the rootfs");
            goto fail;
        }
        if ((j->r = gather_facts(j, cfg, rfd, &facts, &j->err)) < 0)
            goto fail;
    }
    struct ctr_spec_input in = {
        .id = id,
        .cfg = cfg,
        .image_config = json_object_get(facts.image, "config"),
        .passwd = facts.passwd,
        .group = facts.group,
        .rootfs = rootfs,
        .pod_dir = j->pod_dir,
        .pod_host_network = j->pod_host_network,
        .pod_host_ipc = j->pod_host_ipc,
        .target_pid_ns = j->target_pid_ns,
        .cgroup_parent = j->cgroup_parent,
        .seccomp_profile = facts.seccomp_profile,
        .devices = facts.devices,
        .n_devices = facts.n_devices,
        .host_devices = facts.host_devices,
        .n_host_devices = facts.n_host_devices,
        .mount_sources = (const char *const *)sources,
        .cdi_edits = cdi,
        .uid_map = j->pod_userns ? &j->uid_map : NULL,
        .gid_map = j->pod_userns ? &j->gid_map : NULL,
    };
    snprintf(path, sizeof(path), "%s/ns/pid", j->pod_dir);
    in.pod_pid_ns = access(path, F_OK) == 0;
    host_facts(&in.host);
    if ((j->r = ctr_spec_build(&in, &cs, &j->err)) < 0)
        goto fail;
    spec = cs.spec;
    if ((j->r = apparmor_ready(spec, &j->err)) < 0)
        goto fail;
    j->rec.uid = cs.uid;
    j->rec.gid = cs.gid;
    j->rec.groups = TAKE_PTR(cs.groups);
    j->rec.n_groups = cs.n_groups;
    j->rec.stop_signal = cs.stop_signal;
    if (cs.cgroup_path &&
        asprintf(&j->rec.cgroup_path, "%s%s", strcmp(j->cgroup_mount, "/") ? j->cgroup_mount : "",
                 cs.cgroup_path) < 0) {
        j->rec.cgroup_path = NULL;
        j->r = err_set(&j->err, ENOMEM, "cgroup path");
        goto fail;
    }
    /* What the host could not give (an oom_score_adj it forbids, AppArmor
     * it lacks) is logged once, here, and never put in the status message:
     * kubelet prepends that message to the container's termination
     * message, which is the application's own. */
    if (cs.warnings.len)
        log_warn("container `%s`: %s", id, (char *)cs.warnings.data);
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
        if (rfd < 0 ||
            (cwd && strcmp(cwd, "/") &&
             (j->r = mkdir_in_root(rfd, cwd, j->pod_userns ? j->uid_map.host_id : 0,
                                   j->pod_userns ? j->gid_map.host_id : 0, &j->err)) < 0)) {
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
        char *argv[24];
        int n = 0;
        argv[n++] = "kinglet";
        argv[n++] = "oci";
        argv[n++] = "--root";
        argv[n++] = j->oci_root;
        argv[n++] = "--log";
        argv[n++] = log;
        argv[n++] = "--log-format";
        argv[n++] = "json";
        argv[n++] = "--error-fd";
        argv[n++] = "3";
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
        if ((j->r = executor_run(argv, &j->err)) < 0) {
            j->err_named = true; /* "create container `ID`: ..." */
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
    ctr_spec_clear(&cs);
    facts_clear(&facts);
    paths_free(sources, cfg->n_mounts);
    json_decref(cdi);
    protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return;
fail:
    if (userns >= 0)
        close(userns);
    ctr_spec_clear(&cs);
    facts_clear(&facts);
    paths_free(sources, cfg->n_mounts);
    json_decref(cdi);
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
        if (!j->err_named)
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

/* The snapshot directories of img's layers, bottom first; -ENOMEM. */
static int snapshot_paths(struct cri *cri, const struct image_info *img, char ***ret, size_t *ret_n)
{
    char **v = calloc(img->n_layers + 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < img->n_layers; i++)
        if (!(v[i] = image_snapshot_path(cri->images, img->chain_ids[i]))) {
            paths_free(v, i);
            return -ENOMEM;
        }
    *ret = v;
    *ret_n = img->n_layers;
    return 0;
}

static void set_str(char **field, const char *v, bool *ok)
{
    char *d = strdup(v);
    if (!d) {
        *ok = false;
        return;
    }
    if (*field != protobuf_c_empty_string)
        free(*field);
    *field = d;
}

/* Image volumes: each image must be in the store (kubelet pulls it first;
 * a missing one is NOT_FOUND, as in containerd). The config the container
 * keeps names each by its id and repo digest (image_ref), what
 * ContainerStatus reports and kubelet's image garbage collection reads. */
static int imagevols_resolve(struct cri *cri, Runtime__V1__ContainerConfig *cfg,
                             struct create_job *j, struct err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_mounts; i++)
        if (cfg->mounts[i]->image && *cfg->mounts[i]->image->image) {
            Runtime__V1__ImageSpec *is = cfg->mounts[i]->image;
            if (!image_lookup(cri->images, is->image))
                return err_set_msg(err, ENOENT,
                                   "image volume mounts[%zu]: image `%.256s` not found", i,
                                   is->image);
            n++;
        }
    if (!n)
        return 0;
    if (!(j->vols = calloc(n, sizeof(*j->vols))))
        return err_set(err, ENOMEM, "image volumes");
    for (size_t i = 0; i < cfg->n_mounts; i++) {
        Runtime__V1__ImageSpec *is = cfg->mounts[i]->image;
        if (!is || !*is->image)
            continue;
        const struct image_info *img = image_lookup(cri->images, is->image);
        struct imagevol *v = &j->vols[j->n_vols++];
        v->mount = i;
        bool ok = snapshot_paths(cri, img, &v->lowers, &v->n_lowers) == 0;
        set_str(&is->image_ref, img->n_repo_digests ? img->repo_digests[0] : img->id, &ok);
        set_str(&is->image, img->id, &ok); /* last: img was found by the old one */
        if (!ok)
            return err_set(err, ENOMEM, "image volumes");
    }
    return 0;
}

/* Holds each image volume's image for container id (its sub-holders
 * "<id>/<k>", released with the container). */
static int imagevols_hold(struct cri *cri, const Runtime__V1__ContainerConfig *cfg,
                          const struct create_job *j, struct err *err)
{
    for (size_t i = 0; i < j->n_vols; i++) {
        char holder[STORE_ID_LEN + 32];
        snprintf(holder, sizeof(holder), "%s/%zu", j->rec.id, j->vols[i].mount);
        int r = image_hold_volume(cri->images, holder, cfg->mounts[j->vols[i].mount]->image->image,
                                  NULL, NULL, err);
        if (r < 0)
            return r;
    }
    return 0;
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

/* What ContainerStatus shows as the container's image, as containerd does:
 * the reference the pod names (kubelet sends it as user_specified_image,
 * and the resolved id as image), else the image's first tag, else its id.
 * kubelet copies it into the pod's status, where users and controllers
 * compare it with the spec. Chosen at creation and kept in the record, so a
 * tag that moves to another image later does not rename this container's. */
static const char *status_image(const Runtime__V1__ImageSpec *spec, const struct image_info *img)
{
    if (spec->user_specified_image && *spec->user_specified_image)
        return spec->user_specified_image;
    return img->n_repo_tags ? img->repo_tags[0] : img->id;
}

/* What would let the container of a pod with its own user namespace
 * remount its read-only volumes, rootfs or /sys read-write (privileged,
 * CAP_SYS_ADMIN, ALL), or NULL. Its mounts are made in a mount namespace
 * that namespace owns, so their flags are not locked. */
static const char *userns_remount_power(const struct sandbox *sb,
                                        const Runtime__V1__ContainerConfig *cfg)
{
    struct pod_idmap uids, gids;
    if (!sandbox_userns(sb->config, &uids, &gids))
        return NULL;
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        cfg->linux ? cfg->linux->security_context : NULL;
    if (!sc)
        return NULL;
    if (sc->privileged)
        return "a privileged container";
    const Runtime__V1__Capability *caps = sc->capabilities;
    for (size_t i = 0; caps && i < caps->n_add_capabilities; i++) {
        const char *c = caps->add_capabilities[i];
        if (!strcasecmp(c, "ALL"))
            return "adding every capability (ALL)";
        if (!strcasecmp(c, "CAP_SYS_ADMIN") || !strcasecmp(c, "SYS_ADMIN"))
            return "CAP_SYS_ADMIN";
    }
    return NULL;
}

void cri_create_container(struct cri_call *call)
{
    struct cri *cri = call->cri;
    struct containers *cs = cri->containers;
    Runtime__V1__CreateContainerRequest *req = (Runtime__V1__CreateContainerRequest *)call->req;
    Runtime__V1__ContainerConfig *cfg = req->config;
    struct err err = {0};
    if (cri_container_metadata_check(cfg ? cfg->metadata : NULL, &err) < 0) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "CreateContainer: %s", err_str(&err));
        return;
    }
    if (!cfg->image || !*cfg->image->image) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "CreateContainer: config.image is empty");
        return;
    }
    if (cfg->image->user_specified_image &&
        strlen(cfg->image->user_specified_image) > STORE_CTR_TEXT_MAX) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "CreateContainer: config.image.user_specified_image is longer than %d bytes",
                 STORE_CTR_TEXT_MAX);
        return;
    }
    struct sandbox *sb = sandbox_find_or_fail(call, "CreateContainer", req->pod_sandbox_id);
    if (!sb)
        return;
    if (sandbox_state(sb) != RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "CreateContainer: pod sandbox `%s` is not ready", sb->rec.id);
        return;
    }
    const char *remount = userns_remount_power(sb, cfg);
    if (remount) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "CreateContainer: %s in a pod with its own user namespace is not supported: "
                 "kinglet makes the container's mounts inside that namespace, where the kernel "
                 "does not lock their read-only flags",
                 remount);
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
    if (ctr_config_check(cfg, &err) < 0) {
        err_wrap(&err, "CreateContainer");
        cri_fail_err(call, &err);
        return;
    }
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        cfg->linux ? cfg->linux->security_context : NULL;
    const Runtime__V1__NamespaceOption *cns = sc ? sc->namespace_options : NULL;
    const struct container *target = NULL;
    if (cns && cns->pid == RUNTIME__V1__NAMESPACE_MODE__TARGET) {
        bool amb;
        target = container_find(cri, cns->target_id, &amb);
        if (!target || strcmp(target->rec.pod_id, sb->rec.id) || !target->pid) {
            cri_fail(call, GRPC_STATUS_NOT_FOUND,
                     "CreateContainer: namespace_options.target_id `%.64s` is no running "
                     "container of pod `%s`",
                     cns->target_id, sb->rec.id);
            return;
        }
    }
    const struct image_info *img = image_lookup(cri->images, cfg->image->image);
    if (!img) {
        cri_fail(call, GRPC_STATUS_NOT_FOUND, "CreateContainer: image `%.256s` not found",
                 cfg->image->image);
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
    if (imagevols_resolve(cri, cfg, j, &err) < 0)
        goto fail;
    size_t packed = protobuf_c_message_get_packed_size(&cfg->base);
    if (packed > STORE_CONFIG_MAX) {
        err_set_msg(&err, EINVAL, "the container configuration is larger than %d bytes",
                    STORE_CONFIG_MAX);
        goto fail;
    }
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
    if (!(rec->config = malloc(packed ? packed : 1)) ||
        !(rec->image = strdup(status_image(cfg->image, img))) ||
        !(rec->image_id = strdup(img->id)) ||
        !(rec->image_ref = strdup(img->n_repo_digests ? img->repo_digests[0] : img->id)) ||
        !(j->oci_root = strdup(cs->oci_root)) || !(j->bundles_dir = strdup(cs->bundles_dir)) ||
        !(j->records_dir = strdup(cs->records_dir)) ||
        !(j->cdi_dirs = strdup(cri->cdi_spec_dirs)) ||
        !(j->image_config = image_blob_path(cri->images, img->id)) ||
        (sb->rec.cgroup_path && !(j->cgroup_parent = strdup(sb->rec.cgroup_path))) ||
        !(j->pod_config = malloc(sb->rec.config_len ? sb->rec.config_len : 1)) ||
        !(p->name = strdup(cfg->metadata->name)) ||
        snapshot_paths(cri, img, &j->lowers, &j->n_lowers) < 0) {
        err_set(&err, ENOMEM, "CreateContainer");
        goto fail;
    }
    if (target && asprintf(&j->target_pid_ns, "/proc/%d/ns/pid", (int)target->pid) < 0) {
        j->target_pid_ns = NULL;
        err_set(&err, ENOMEM, "CreateContainer");
        goto fail;
    }
    /* The container's cgroup is a sibling of the sandbox's own, below the
     * pod's cgroup parent (kubelet's pod cgroup): cgroup v2 lets only
     * leaves hold processes, and the sandbox's cgroup holds its init. */
    if (j->cgroup_parent && !cri_cgroup_parent_of(cri, j->cgroup_parent)) {
        free(j->cgroup_parent);
        j->cgroup_parent = NULL;
    }
    if (j->cgroup_parent && !(j->cgroup_mount = strdup(cri->cgroup2_mount))) {
        err_set(&err, ENOMEM, "CreateContainer");
        goto fail;
    }
    rec->config_len = protobuf_c_message_pack(&cfg->base, rec->config);
    memcpy(j->pod_config, sb->rec.config, sb->rec.config_len);
    j->pod_config_len = sb->rec.config_len;
    sandbox_dir(cri, sb->rec.id, j->pod_dir, sizeof(j->pod_dir));
    j->pod_host_network = sb->host_network;
    const Runtime__V1__LinuxPodSandboxConfig *lx = sb->config->linux;
    const Runtime__V1__NamespaceOption *ns =
        lx && lx->security_context ? lx->security_context->namespace_options : NULL;
    j->pod_host_ipc = ns && ns->ipc == RUNTIME__V1__NAMESPACE_MODE__NODE;
    j->pod_userns = sandbox_userns(sb->config, &j->uid_map, &j->gid_map);
    memcpy(p->pod_id, sb->rec.id, sizeof(p->pod_id));
    p->attempt = cfg->metadata->attempt;
    p->next = cs->pending;
    cs->pending = p;
    j->call = call;
    /* the volumes' holds first: the container's own answers once all of
     * them are saved */
    if (imagevols_hold(cri, cfg, j, &err) < 0 ||
        image_hold(cri->images, rec->id, img->id, hold_done, j, &err) < 0) {
        struct err e = {0};
        image_release(cri->images, rec->id, release_done, NULL, &e);
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
