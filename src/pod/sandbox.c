/* pod/sandbox: create, stop and remove a sandbox (see pod.h).
 *
 * Namespaces are created by a short-lived child (fork from the worker
 * thread): it unshares them (the pod's user namespace first, on its own,
 * when it has one: the worker writes its maps), sets the host name and the
 * IPC sysctls, forks the pod's init when the PID namespace is shared,
 * reports over a close-on-exec pipe and waits; the worker bind-mounts the
 * child's namespace files onto <dir>/ns/<kind> (the mounts live in the
 * daemon's mount namespace, where a child in a user namespace could not
 * mount, and hold the namespaces open after the child exits) and lets it
 * go. Everything else (cgroup, /dev/shm, files, network) is done by the
 * calling worker thread. */
#include <dirent.h>
#include <grp.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/pidfd.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "oci/cgroup.h"
#include "pod/init_proto.h"
#include "pod/pod.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

static const struct {
    int flag;
    const char *name; /* file under <dir>/ns */
    const char *proc; /* what is bind-mounted: /proc/<child>/ns/<proc> */
} ns_kinds[] = {
    {CLONE_NEWUSER, "user", "user"},
    {CLONE_NEWNET, "net", "net"},
    {CLONE_NEWIPC, "ipc", "ipc"},
    {CLONE_NEWUTS, "uts", "uts"},
    {CLONE_NEWPID, "pid", "pid_for_children"},
};

/* The child's messages on its report pipe: STAGE_USERNS once it is in the
 * pod's new user namespace (the parent writes the maps and answers on the
 * go pipe), then STAGE_DONE (or a failure); it stays until the parent has
 * bind-mounted its namespace files and closed the go pipe. */
enum { STAGE_DONE, STAGE_USERNS };

struct child_report {
    int code; /* errno, 0 = success */
    int stage;
    pid_t init_pid;
    char msg[256];
};

static int write_proc_sys(const char *key, const char *value)
{
    char rel[256], path[300];
    if (pod_sysctl_path(key, rel, sizeof(rel)) < 0)
        return -ENAMETOOLONG;
    snprintf(path, sizeof(path), "/proc/sys/%s", rel);
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    size_t n = strlen(value);
    int r = write(fd, value, n) == (ssize_t)n ? 0 : -errno;
    close(fd);
    return r;
}

static int write_idmap(pid_t pid, const char *file, const struct pod_idmap *m, struct err *err);
static int write_file(const char *dir, const char *name, const void *data, size_t len, int mode,
                      struct err *err);
#define ORPHAN_CGROUP ".cgroup"
#define ORPHAN_INIT   ".init"

/* The pod init's side of the fork: stdio on /dev/null, the report pipe as
 * fd 3, nothing else; then the program (pod_init_exec). */
static _Noreturn void init_exec(int report, bool userns)
{
    setsid();
    /* In the pod's user namespace, its root (the host's uid 0 is nobody
     * there: execve would drop every capability the setup needs). */
    if (userns && (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)) {
        struct pod_init_report rep = {.code = errno};
        snprintf(rep.step, sizeof(rep.step), "become root in the pod's user namespace");
        (void)!write(report, &rep, sizeof(rep));
        _exit(127);
    }
    /* dup2 clears close-on-exec; an fd already in place keeps it. */
    if (report == POD_INIT_REPORT_FD ? fcntl(report, F_SETFD, 0) < 0
                                     : dup2(report, POD_INIT_REPORT_FD) < 0 || close(report) < 0)
        _exit(127);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    syscall(SYS_close_range, POD_INIT_REPORT_FD + 1U, ~0U, 0U);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int r = pod_init_exec();
    struct pod_init_report rep = {.code = -r};
    snprintf(rep.step, sizeof(rep.step), "execute the pod init");
    (void)!write(POD_INIT_REPORT_FD, &rep, sizeof(rep));
    _exit(127);
}

/* What the pod init says once set up (or why it could not be). */
static int init_wait_ready(int report, struct child_report *rep)
{
    struct pod_init_report r;
    ssize_t n;
    do
        n = read(report, &r, sizeof(r));
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(r) && r.code == 0)
        return 0;
    if (n != (ssize_t)sizeof(r)) {
        errno = EIO;
        snprintf(rep->msg, sizeof(rep->msg), "the pod init died while setting up");
    } else {
        errno = r.code;
        r.step[sizeof(r.step) - 1] = '\0';
        snprintf(rep->msg, sizeof(rep->msg), "pod init: %s", r.step);
    }
    return -1;
}

static _Noreturn void ns_child(const struct pod_sandbox_spec *s, int flags, int fd, int go,
                               int cgfd)
{
    struct child_report rep = {0};
    const char *step = "unshare";
    char c;
    fds_close_all_but((const int[]){fd, go, cgfd}, 3);
    if (flags & CLONE_NEWUSER) {
        /* The user namespace first, on its own: every other namespace
         * unshared below (and the init's) is then owned by it. We stay
         * the host's uid 0 (the crash note below is written to the
         * daemon's directory); the init drops to an unprivileged id of
         * the pod's range. */
        step = "unshare the user namespace";
        if (unshare(CLONE_NEWUSER) < 0)
            goto fail;
        rep.stage = STAGE_USERNS;
        if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
            _exit(1);
        rep.stage = STAGE_DONE;
        if (read(go, &c, 1) != 1)
            _exit(1); /* the parent could not write the maps: it says why */
        flags &= ~CLONE_NEWUSER;
    }
    if (flags && unshare(flags) < 0)
        goto fail;
    if (flags & CLONE_NEWUTS) {
        step = "sethostname";
        if (sethostname(s->hostname, strlen(s->hostname)) < 0)
            goto fail;
    }
    for (size_t i = 0; i < s->n_sysctls; i++) {
        if (pod_sysctl_namespace(s->sysctls[i].key) != CLONE_NEWIPC)
            continue;
        int r = write_proc_sys(s->sysctls[i].key, s->sysctls[i].value);
        if (r < 0) {
            errno = -r;
            snprintf(rep.msg, sizeof(rep.msg), "sysctl `%.128s`", s->sysctls[i].key);
            step = NULL;
            goto fail;
        }
    }
    if (flags & CLONE_NEWPID) {
        step = "fork the pod init";
        int rp[2];
        if (pipe2(rp, O_CLOEXEC) < 0)
            goto fail;
        /* A bare clone, not fork(): the daemon's atfork handlers (libuv's
         * reopens its signal lock pipe) would close fds that are ours by
         * now, the report pipe among them. */
        pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (pid < 0)
            goto fail;
        if (pid == 0) {
            close(rp[0]);
            init_exec(rp[1], s->uid_map != NULL);
        }
        close(rp[1]);
        rep.init_pid = pid;
        /* Into the pod cgroup at once: from here on, killing the cgroup
         * kills the init, whatever becomes of the daemon. */
        step = "move the pod init into its cgroup";
        char num[16];
        int n = snprintf(num, sizeof(num), "%d", (int)pid);
        int cfd = cgfd >= 0 ? openat(cgfd, "cgroup.procs", O_WRONLY | O_CLOEXEC) : -1;
        if (cgfd >= 0 && (cfd < 0 || write(cfd, num, (size_t)n) != n))
            goto fail;
        if (cfd >= 0)
            close(cfd);
        /* Set up (own mount namespace, no privilege, seccomp) and in its
         * cgroup before anything can join the PID namespace. */
        int ready = init_wait_ready(rp[0], &rep);
        close(rp[0]);
        if (ready < 0) {
            step = NULL;
            goto fail;
        }
        /* Recorded here, not by the caller: this child finishes its work
         * even if the daemon dies meanwhile, and the next start must be
         * able to find the init (pod_sandbox_remove_orphan). */
        uint64_t start;
        step = "record the pod init";
        if (proc_start_time(pid, &start, NULL) < 0)
            goto fail;
        char text[64];
        int len = snprintf(text, sizeof(text), "%d %llu", (int)pid, (unsigned long long)start);
        if (write_file(s->dir, ORPHAN_INIT, text, (size_t)len, 0600, NULL) < 0)
            goto fail;
    }
    /* The parent bind-mounts our namespace files (a child in a user
     * namespace of its own could not mount in the daemon's mount
     * namespace) and lets us go by closing the go pipe. */
    (void)!write(fd, &rep, sizeof(rep));
    while (read(go, &c, 1) < 0 && errno == EINTR)
        ;
    _exit(0);
fail:
    rep.code = errno ? errno : EIO;
    if (step)
        snprintf(rep.msg, sizeof(rep.msg), "%s", step);
    if (rep.init_pid > 0)
        kill(rep.init_pid, SIGKILL);
    (void)!write(fd, &rep, sizeof(rep));
    _exit(1);
}

static int spawn_namespaces(const struct pod_sandbox_spec *s, int flags, int cgfd, pid_t *ret_init,
                            struct err *err)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/ns", s->dir);
    if (mkdir(path, 0711) < 0 && errno != EEXIST)
        return err_set(err, errno, "create `%s`", path);
    for (size_t i = 0; i < ARRAY_SIZE(ns_kinds); i++) {
        if (!(flags & ns_kinds[i].flag))
            continue;
        snprintf(path, sizeof(path), "%s/ns/%s", s->dir, ns_kinds[i].name);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
        if (fd < 0)
            return err_set(err, errno, "create `%s`", path);
        close(fd);
    }
    int p[2], g[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_set(err, errno, "pipe");
    if (pipe2(g, O_CLOEXEC) < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return err_set(err, e, "pipe");
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        close(g[0]);
        close(g[1]);
        return err_set(err, e, "fork");
    }
    if (pid == 0) {
        close(p[0]);
        close(g[1]);
        ns_child(s, flags, p[1], g[0], cgfd);
    }
    close(p[1]);
    close(g[0]);
    struct child_report rep = {0};
    ssize_t n;
    int r = 0;
    for (;;) {
        do
            n = read(p[0], &rep, sizeof(rep));
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(rep) || rep.code || rep.stage != STAGE_USERNS)
            break;
        if ((r = write_idmap(pid, "uid_map", s->uid_map, err)) < 0 ||
            (r = write_idmap(pid, "gid_map", s->gid_map, err)) < 0 || write(g[1], "g", 1) != 1)
            break;
    }
    if (r == 0 && n == (ssize_t)sizeof(rep) && !rep.code) {
        for (size_t i = 0; i < ARRAY_SIZE(ns_kinds); i++) {
            if (!(flags & ns_kinds[i].flag))
                continue;
            char src[64], target[4200];
            snprintf(src, sizeof(src), "/proc/%d/ns/%s", (int)pid, ns_kinds[i].proc);
            snprintf(target, sizeof(target), "%s/ns/%s", s->dir, ns_kinds[i].name);
            if (mount(src, target, NULL, MS_BIND, NULL) < 0) {
                r = err_set(err, errno, "create namespaces: bind-mount the %s namespace",
                            ns_kinds[i].name);
                break;
            }
        }
        if (r < 0 && rep.init_pid > 0)
            kill(rep.init_pid, SIGKILL);
    }
    close(g[1]); /* the child exits */
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return r;
    if (n != (ssize_t)sizeof(rep))
        return err_set(err, EIO, "namespace child died (status %d)", status);
    if (rep.code) {
        rep.msg[sizeof(rep.msg) - 1] = '\0';
        return err_set(err, rep.code, "create namespaces: %s", rep.msg);
    }
    *ret_init = rep.init_pid;
    return 0;
}

/* One mapping into /proc/<pid>/<file> of the child in the new user
 * namespace (we hold CAP_SETUID/CAP_SETGID over its parent). */
static int write_idmap(pid_t pid, const char *file, const struct pod_idmap *m, struct err *err)
{
    char path[64], line[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int len = snprintf(line, sizeof(line), "%u %u %u\n", m->container_id, m->host_id, m->length);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, line, (size_t)len) != len)
        return err_set(err, errno ? errno : EIO, "user namespace: write %s `%u %u %u`", file,
                       m->container_id, m->host_id, m->length);
    return 0;
}

/* mode: 0644 for what containers see through bind mounts (any user must
 * read it), 0600 for the daemon's own notes. */
static int write_file(const char *dir, const char *name, const void *data, size_t len, int mode,
                      struct err *err)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    _cleanup_close_ int fd =
        open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return err_set(err, errno, "create `%s`", path);
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, errno, "write `%s`", path);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int copy_file(const char *src, const char *dir, const char *name, struct err *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = read_file_at(AT_FDCWD, src, 1 << 20, &text, &len);
    if (r == -ENOENT) {
        text = strdup("");
        len = 0;
    } else if (r < 0) {
        return err_set(err, -r, "read `%s`", src);
    }
    return write_file(dir, name, text ? text : "", len, 0644, err);
}

static int write_etc_files(const struct pod_sandbox_spec *s, const char *hostname,
                           const struct net_pod_result *net, struct err *err)
{
    struct buf b = {0};
    int r = buf_printf(&b, "%s\n", hostname) < 0
                ? err_set(err, ENOMEM, "hostname")
                : write_file(s->dir, "hostname", b.data, b.len, 0644, err);
    buf_free(&b);
    if (r < 0)
        return r;
    if (s->n_dns_servers || s->n_dns_searches || s->n_dns_options) {
        r = pod_resolv_conf_build(s, &b, err);
        if (r == 0)
            r = write_file(s->dir, "resolv.conf", b.data, b.len, 0644, err);
        buf_free(&b);
    } else {
        r = copy_file(s->host_resolv_conf ? s->host_resolv_conf : "/etc/resolv.conf", s->dir,
                      "resolv.conf", err);
    }
    if (r < 0)
        return r;
    if (s->host_network)
        return copy_file("/etc/hosts", s->dir, "hosts", err);
    if (pod_hosts_build(hostname, net, &b) < 0) {
        buf_free(&b);
        return err_set(err, ENOMEM, "hosts");
    }
    r = write_file(s->dir, "hosts", b.data, b.len, 0644, err);
    buf_free(&b);
    return r;
}

/* In a pod with a user namespace, the files its containers see are its
 * root's on the host (as containerd and CRI-O make them), bound without an
 * idmapping: through one, the pod's root would write, chmod and chown them
 * as the host's root (a set-user-ID file of the host's uid 0 with the
 * content of its choice). */
static int etc_files_own(const struct pod_sandbox_spec *s, struct err *err)
{
    static const char *const names[] = {"hostname", "resolv.conf", "hosts"};
    for (size_t i = 0; s->uid_map && i < ARRAY_SIZE(names); i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", s->dir, names[i]);
        if (fchownat(AT_FDCWD, path, s->uid_map->host_id, s->gid_map->host_id,
                     AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(err, errno, "chown `%s` to the pod's root", path);
    }
    return 0;
}

void pod_sandbox_result_clear(struct pod_sandbox_result *r)
{
    free(r->cgroup_path);
    *r = (struct pod_sandbox_result){0};
}

int pod_sandbox_create(const struct pod_sandbox_spec *s, struct pod_sandbox_result *ret,
                       struct err *err)
{
    *ret = (struct pod_sandbox_result){0};
    int r = pod_sandbox_spec_check(s, err);
    if (r < 0)
        return r;
    char hostname[128];
    if (s->hostname && *s->hostname)
        snprintf(hostname, sizeof(hostname), "%s", s->hostname);
    else if (s->host_network)
        gethostname(hostname, sizeof(hostname) - 1);
    else
        snprintf(hostname, sizeof(hostname), "%.12s", s->id);
    hostname[sizeof(hostname) - 1] = '\0';
    struct pod_sandbox_spec spec = *s;
    spec.hostname = hostname;

    char parent[4200];
    snprintf(parent, sizeof(parent), "%s", s->dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        if ((r = mkdir_p(parent, 0711)) < 0)
            return err_set(err, -r, "create `%s`", parent);
    }
    if (mkdir(s->dir, 0711) < 0)
        return err_set(err, errno, "create `%s`", s->dir);

    struct pod_sandbox_ref ref = {.id = s->id, .dir = s->dir};
    struct oci_cgroup *cg = NULL;
    _cleanup_free_ char *cgpath = NULL;
    if (s->cgroup_parent && *s->cgroup_parent &&
        asprintf(&cgpath, "%s/%s", s->cgroup_parent, s->id) < 0) {
        r = err_set(err, ENOMEM, "cgroup path");
        goto fail;
    }
    /* For pod_sandbox_remove_orphan, should the daemon die before the
     * caller has a record of the pod: the cgroup's path is written before
     * the cgroup exists (the oci default parent is `kinglet`), and again
     * should oci have normalized it differently. */
    char predicted[8400] = "";
    if (s->cgroup_root && strcmp(s->cgroup_root, "/") != 0)
        snprintf(predicted, sizeof(predicted), "%s", s->cgroup_root);
    size_t pl = strlen(predicted);
    snprintf(predicted + pl, sizeof(predicted) - pl, "%s%s", cgpath ? "" : "/kinglet/",
             cgpath ? cgpath : s->id);
    if (s->cgroup_root) {
        r = write_file(s->dir, ORPHAN_CGROUP, predicted, strlen(predicted), 0600, err);
        if (r < 0)
            goto fail;
    }
    r = oci_cgroup_create(cgpath, s->id, s->cgroup_resources, &cg, err);
    if (r < 0) {
        err_wrap(err, "pod cgroup");
        goto fail;
    }
    ret->cgroup_path = strdup(oci_cgroup_path(cg));
    ref.cgroup_path = ret->cgroup_path;
    if (!ret->cgroup_path) {
        r = err_set(err, ENOMEM, "cgroup path");
        goto fail;
    }
    if (strcmp(predicted, ret->cgroup_path) != 0) {
        r = write_file(s->dir, ORPHAN_CGROUP, ret->cgroup_path, strlen(ret->cgroup_path), 0600,
                       err);
        if (r < 0)
            goto fail;
    }

    int flags = s->uid_map ? CLONE_NEWUSER : 0;
    if (!s->host_network)
        flags |= CLONE_NEWNET | CLONE_NEWUTS;
    if (!s->host_ipc)
        flags |= CLONE_NEWIPC;
    if (s->pid_mode == POD_PID_POD)
        flags |= CLONE_NEWPID;
    if (flags) {
        r = spawn_namespaces(&spec, flags, oci_cgroup_fd(cg), &ret->init_pid, err);
        if (r < 0)
            goto fail;
    }
    if (ret->init_pid > 0) {
        ref.init_pid = ret->init_pid;
        if (proc_start_time(ret->init_pid, &ret->init_start, NULL) < 0) {
            r = err_set(err, ESRCH, "the pod init exited at once");
            goto fail;
        }
        ref.init_start = ret->init_start;
    }
    if (!s->host_ipc) {
        char path[4200], opts[128];
        snprintf(path, sizeof(path), "%s/shm", s->dir);
        int n = snprintf(opts, sizeof(opts), "mode=1777,size=%llu",
                         (unsigned long long)(s->shm_size ? s->shm_size : POD_SHM_SIZE_DEFAULT));
        /* the pod's root's, bound without an idmapping (see etc_files_own) */
        if (s->uid_map)
            snprintf(opts + n, sizeof(opts) - (size_t)n, ",uid=%u,gid=%u", s->uid_map->host_id,
                     s->gid_map->host_id);
        if (mkdir(path, 0755) < 0 && errno != EEXIST) {
            r = err_set(err, errno, "create `%s`", path);
            goto fail;
        }
        if (mount("shm", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0) {
            r = err_set(err, errno, "mount /dev/shm at `%s`", path);
            goto fail;
        }
    }
    if (!s->host_network && s->net) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/ns/net", s->dir);
        _cleanup_close_ int nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0) {
            r = err_set(err, errno, "open `%s`", path);
            goto fail;
        }
        ref.net = s->net;
        r = net_pod_setup(s->net, s->id, nsfd, s->ports, s->nports, &ret->net, err);
        if (r < 0) {
            err_wrap(err, "pod network");
            goto fail;
        }
        for (size_t i = 0; i < s->n_sysctls; i++) {
            if (pod_sysctl_namespace(s->sysctls[i].key) != CLONE_NEWNET)
                continue;
            r = net_sysctl_set_in(nsfd, s->sysctls[i].key, s->sysctls[i].value, err);
            if (r < 0)
                goto fail;
        }
    }
    r = write_etc_files(&spec, hostname, &ret->net, err);
    if (r == 0)
        r = etc_files_own(&spec, err);
    if (r < 0)
        goto fail;
    oci_cgroup_free(cg);
    return 0;
fail:;
    struct err ignored = {0};
    oci_cgroup_free(cg);
    pod_sandbox_remove(&ref, &ignored);
    pod_sandbox_result_clear(ret);
    return r;
}

static int kill_init(pid_t pid, uint64_t start)
{
    /* a different process that reuses the pid is left alone */
    int fd = pidfd_open_started(pid, start);
    if (fd < 0)
        return fd == -ESRCH ? 0 : fd;
    pidfd_send_signal(fd, SIGKILL, NULL, 0);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, 10000);
    close(fd);
    return r == 1 ? 0 : -ETIMEDOUT;
}

static int unmount_all(const char *dir, struct err *err)
{
    static const char *const mounts[] = {"shm", "ns/net", "ns/ipc", "ns/uts", "ns/pid", "ns/user"};
    for (size_t i = 0; i < ARRAY_SIZE(mounts); i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, mounts[i]);
        if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
            return err_set(err, errno, "unmount `%s`", path);
    }
    return 0;
}

int pod_sandbox_stop(const struct pod_sandbox_ref *ref, struct err *err)
{
    int r;
    if (ref->cgroup_path) {
        struct oci_cgroup *cg = NULL;
        struct err e = {0};
        if (oci_cgroup_open(ref->cgroup_path, &cg, &e) == 0) {
            r = oci_cgroup_kill(cg, SIGKILL, &e);
            oci_cgroup_free(cg);
            if (r < 0 && e.code != ENOENT && e.code != ESRCH) {
                *err = e;
                return err_wrap(err, "kill the pod's processes");
            }
        }
    }
    if (ref->init_pid > 0 && (r = kill_init(ref->init_pid, ref->init_start)) < 0)
        return err_set(err, -r, "kill the pod init (pid %d)", (int)ref->init_pid);
    if (ref->net && (r = ref->net_async ? net_pod_teardown_async(ref->net, ref->id, err)
                                        : net_pod_teardown(ref->net, ref->id, err)) < 0)
        return err_wrap(err, "tear the pod network down");
    return unmount_all(ref->dir, err);
}

int pod_sandbox_remove(const struct pod_sandbox_ref *ref, struct err *err)
{
    int r = pod_sandbox_stop(ref, err);
    if (r < 0)
        return r;
    if (ref->cgroup_path) {
        struct oci_cgroup *cg = NULL;
        struct err e = {0};
        if (oci_cgroup_open(ref->cgroup_path, &cg, &e) == 0) {
            r = oci_cgroup_destroy(cg, &e);
            oci_cgroup_free(cg);
            if (r < 0 && e.code != ENOENT) {
                *err = e;
                return err_wrap(err, "remove the pod cgroup");
            }
        }
    }
    r = rm_rf_at(AT_FDCWD, ref->dir);
    if (r < 0)
        return err_set(err, -r, "remove `%s`", ref->dir);
    return 0;
}

int pod_sandbox_remove_orphan(const char *id, const char *dir, const struct net_config *net,
                              struct err *err)
{
    struct pod_sandbox_ref ref = {.id = id, .dir = dir, .net = net};
    char path[4200];
    _cleanup_free_ char *cg = NULL, *init = NULL;
    snprintf(path, sizeof(path), "%s/" ORPHAN_CGROUP, dir);
    if (read_file_at(AT_FDCWD, path, 4096, &cg, NULL) == 0 && cg[0] == '/' && !strstr(cg, ".."))
        ref.cgroup_path = cg;
    snprintf(path, sizeof(path), "%s/" ORPHAN_INIT, dir);
    unsigned long long start;
    int pid;
    if (read_file_at(AT_FDCWD, path, 64, &init, NULL) == 0 &&
        sscanf(init, "%d %llu", &pid, &start) == 2 && pid > 1) {
        ref.init_pid = pid;
        ref.init_start = start;
    }
    return pod_sandbox_remove(&ref, err);
}

bool pod_sandbox_netns_alive(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/ns/net", dir);
    struct statfs sf;
    return statfs(path, &sf) == 0 && sf.f_type == NSFS_MAGIC;
}
