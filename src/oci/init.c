/* oci/init: the container's first process, from clone to execve.
 *
 * Order: id maps (written by the parent), joined namespaces, hostname,
 * mounts and /dev below the rootfs, prestart/createRuntime (the parent runs
 * them) and createContainer hooks, oom score and rlimits, pivot_root,
 * sysctl and masked/read-only paths, pty, cwd, then READY and the wait for
 * `start`, startContainer hooks, and process.c's user/caps/seccomp/execve.
 * Any failure before READY goes back to the parent as one line; after it,
 * to the container's stderr. Never returns. */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/keyctl.h>

#include "oci/internal.h"

/* nsfds: namespaces opened already (-1: by path now), or NULL. */
static int join_namespaces(const struct oci_spec *spec, bool user_too, int *nsfds, struct err *err)
{
    for (int k = 0; k < OCI_NS_COUNT; k++) {
        if (!spec->ns[k].enabled || !spec->ns[k].path || k == OCI_NS_PID)
            continue;
        if ((k == OCI_NS_USER) != user_too)
            continue;
        _cleanup_close_ int fd =
            nsfds && nsfds[k] >= 0 ? TAKE_FD(nsfds[k]) : oci_ns_open_path(spec->ns[k].path, k, err);
        if (fd < 0)
            return fd;
        if (setns(fd, oci_ns_clone_flag(k)) < 0)
            return err_set(err, errno, "`linux.namespaces`: join %s namespace `%s`", oci_ns_name(k),
                           spec->ns[k].path);
    }
    return 0;
}

/* Our children, and we ourselves at execve, enter it: its offsets must be
 * written before that. */
static int new_time_namespace(const struct oci_spec *spec, struct err *err)
{
    if (unshare(CLONE_NEWTIME) < 0)
        return err_set(err, errno, "`linux.namespaces`: new time namespace");
    if (!spec->has_time_offsets)
        return 0;
    char buf[160];
    int n = snprintf(buf, sizeof(buf), "monotonic %lld %u\nboottime %lld %u\n",
                     (long long)spec->monotonic_secs, spec->monotonic_nsecs,
                     (long long)spec->boottime_secs, spec->boottime_nsecs);
    /* A joined mount namespace's /proc is not ours to trust. */
    _cleanup_close_ int fd = oci_proc_open("self/timens_offsets", O_WRONLY, err);
    if (fd < 0)
        return err_wrap(err, "`linux.timeOffsets`");
    if (write(fd, buf, (size_t)n) != n)
        return err_set(err, errno ? errno : EIO, "`linux.timeOffsets`: write timens_offsets");
    return 0;
}

static char *hook_state(const struct oci_init_args *a, pid_t pid)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:s}", "ociVersion", OCI_VERSION, "id", a->id,
                          "status", "creating", "pid", (int)pid, "bundle", a->bundle);
    if (!j)
        return NULL;
    if (a->spec->annotations)
        json_object_set(j, "annotations", a->spec->annotations);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static int run_hooks_here(const struct oci_init_args *a, enum oci_hook_kind k, const char *name,
                          pid_t host_pid, struct err *err)
{
    if (!a->spec->hooks.n[k])
        return 0;
    _cleanup_free_ char *st = hook_state(a, host_pid);
    if (!st)
        return err_set(err, ENOMEM, "hook state");
    return oci_hooks_run(a->spec->hooks.list[k], a->spec->hooks.n[k], st, name, err);
}

static int setup(const struct oci_init_args *a, pid_t *host_pid, int *tty_slave, char **exe,
                 struct err *err)
{
    const struct oci_spec *spec = a->spec;
    struct oci_sync_msg m;
    int r;
    _cleanup_free_ int *idmap_fds = calloc(spec->n_mounts + 1, sizeof(int));
    if (!idmap_fds)
        return err_set(err, ENOMEM, "mounts");
    for (size_t i = 0; i < spec->n_mounts; i++)
        idmap_fds[i] = -1;

    bool new_user = spec->ns[OCI_NS_USER].enabled && !spec->ns[OCI_NS_USER].path;
    int nsfds[OCI_NS_COUNT];
    for (int k = 0; k < OCI_NS_COUNT; k++)
        nsfds[k] = -1;
    _cleanup_close_ int pre_root = -1;
    if (a->joined_userns) {
        if (!a->in_userns && (r = join_namespaces(spec, true, NULL, err)) < 0)
            return r;
        int flags = 0;
        for (int k = 0; k < OCI_NS_COUNT; k++)
            if (k != OCI_NS_PID && k != OCI_NS_USER && k != OCI_NS_TIME && spec->ns[k].enabled &&
                !spec->ns[k].path)
                flags |= oci_ns_clone_flag(k);
        if (flags && unshare(flags) < 0)
            return err_set(err, errno, "`linux.namespaces`: unshare");
    }
    bool idmap_mounts = false;
    for (size_t i = 0; i < spec->n_mounts; i++)
        idmap_mounts |= spec->mounts[i].idmap || (a->joined_userns && spec->mounts[i].bind);
    /* The parent writes our id maps (new user namespace) and prepares
     * idmapped trees for idmap mounts, which need its privileges, and, in
     * a joined user namespace, the trees of every bind (whose sources the
     * namespace's root may not reach). */
    if (new_user || idmap_mounts) {
        if ((r = oci_sync_send(a->sync_fd, OCI_SYNC_USERMAP, 0, NULL)) < 0)
            return err_set(err, r, "wait for the id mappings");
        /* Idmapped trees for idmap mounts come first, then the ACK. */
        for (;;) {
            int fd = -1;
            if ((r = oci_sync_recv_fd(a->sync_fd, &m, &fd)) < 0)
                return err_set(err, r, "wait for the id mappings");
            if (m.type == OCI_SYNC_IDMAP && fd >= 0 && m.value >= 0 &&
                (size_t)m.value < spec->n_mounts) {
                if (idmap_fds[m.value] >= 0)
                    close(idmap_fds[m.value]);
                idmap_fds[m.value] = fd;
                continue;
            }
            if (fd >= 0)
                close(fd);
            if (m.type == OCI_SYNC_ERROR)
                return oci_sync_err(&m, err);
            if (m.type != OCI_SYNC_ACK)
                return err_set(err, EPROTO, "id mappings not written");
            break;
        }
    }
    if (a->joined_userns) {
        /* Still the runtime's host uid (with the joined namespace's
         * capabilities): what the namespace's root may not reach on the
         * host (namespace files and the rootfs below the runtime's 0700
         * directories) is opened now, and used by descriptor. */
        for (int k = 0; k < OCI_NS_COUNT; k++)
            if (spec->ns[k].enabled && spec->ns[k].path && k != OCI_NS_PID && k != OCI_NS_USER &&
                (r = nsfds[k] = oci_ns_open_path(spec->ns[k].path, k, err)) < 0)
                goto close_nsfds;
        pre_root = open(spec->root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (pre_root < 0) {
            r = err_set(err, errno, "`root.path`: open `%s`", spec->root_path);
            goto close_nsfds;
        }
    }
    if (spec->ns[OCI_NS_USER].enabled) {
        if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
            r = err_set(err, errno, "`linux.uidMappings`: become root in the user namespace");
            goto close_nsfds;
        }
    }
    r = join_namespaces(spec, false, nsfds, err);
close_nsfds:
    for (int k = 0; k < OCI_NS_COUNT; k++)
        if (nsfds[k] >= 0)
            close(nsfds[k]);
    if (r < 0)
        return r;
    if (spec->ns[OCI_NS_TIME].enabled && !spec->ns[OCI_NS_TIME].path &&
        (r = new_time_namespace(spec, err)) < 0)
        return r;
    /* Keys the runtime's session holds are not the container's (as runc
     * and crun do). Kernels or user namespaces that refuse keyrings: go on
     * without one. */
    if (a->new_keyring && syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, a->id) < 0 &&
        errno != ENOSYS && errno != EACCES && errno != EPERM && errno != EDQUOT)
        return err_set(err, errno, "create the session keyring");
    if (spec->hostname && sethostname(spec->hostname, strlen(spec->hostname)) < 0)
        return err_set(err, errno, "`hostname`: `%s`", spec->hostname);
    if (spec->domainname && setdomainname(spec->domainname, strlen(spec->domainname)) < 0)
        return err_set(err, errno, "`domainname`: `%s`", spec->domainname);

    umask(0);
    _cleanup_close_ int rootfd = -1;
    if ((r = oci_rootfs_prepare(spec, pre_root, &rootfd, err)) < 0)
        return r;
    if ((r = oci_mounts_setup(spec, rootfd, idmap_fds, err)) < 0)
        return r;
    if ((r = oci_dev_setup(spec, rootfd, spec->ns[OCI_NS_USER].enabled, err)) < 0)
        return r;

    /* The parent runs prestart and createRuntime in the runtime's
     * namespaces, and tells us our pid as the host sees it (for the hooks
     * we run). Without hooks, no round trip. */
    if (oci_spec_needs_hook_sync(spec)) {
        if ((r = oci_sync_send(a->sync_fd, OCI_SYNC_HOOKS, 0, NULL)) < 0 ||
            (r = oci_sync_recv(a->sync_fd, &m, -1)) < 0)
            return err_set(err, r, "wait for the runtime hooks");
        if (m.type == OCI_SYNC_ERROR)
            return err_set(err, ECANCELED, "%s", m.text);
        *host_pid = m.value;
    }
    if ((r = run_hooks_here(a, OCI_HOOK_CREATE_CONTAINER, "createContainer", *host_pid, err)) < 0)
        return r;

    if ((r = oci_process_oom_score_adj(&spec->process, err)) < 0)
        return r;
    if ((r = oci_process_rlimits(&spec->process, err)) < 0)
        return r;
    if ((r = oci_rootfs_pivot(rootfd, a->no_pivot, err)) < 0)
        return r;
    if ((r = oci_rootfs_finalize(spec, err)) < 0)
        return r;
    if (spec->process.terminal &&
        (r = oci_terminal_setup(&spec->process, a->console_fd, tty_slave, err)) < 0)
        return r;
    if ((r = oci_process_cwd(&spec->process, err)) < 0)
        return r;
    if ((r = oci_process_find(&spec->process, exe, err)) < 0)
        return r;
    if (spec->has_personality && personality(spec->personality) < 0)
        return err_set(err, errno, "`linux.personality`");
    if (setsid() < 0)
        return err_set(err, errno, "setsid");
    return 0;
}

_Noreturn void oci_init_main(const struct oci_init_args *a)
{
    struct err err = {0};
    pid_t host_pid = 0;
    int tty_slave = -1;
    char *exe = NULL;

    /* Nothing in the container may ptrace us or open our /proc/PID/exe
     * (the kinglet binary) while we still run it. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* Nothing blocked or ignored by the runtime reaches the container. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Handlers do not survive execve; ignored signals would. */
    static const int sigs[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1,
                               SIGUSR2, SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH};
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
        signal(sigs[i], SIG_DFL);
    if (setup(a, &host_pid, &tty_slave, &exe, &err) < 0) {
        oci_sync_send_err(a->sync_fd, &err);
        _exit(1);
    }
    if (a->console_fd >= 0)
        close(a->console_fd);
    oci_sync_send(a->sync_fd, OCI_SYNC_READY, 0, NULL);
    if (a->fifo_fd >= 0) {
        /* `start` writes one byte. */
        char c;
        ssize_t n;
        do
            n = read(a->fifo_fd, &c, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1)
            _exit(1);
        close(a->fifo_fd);
    } else {
        /* run: the parent has the final state on disk before the process
         * starts (a caller killed in between leaves nothing half-said). */
        struct oci_sync_msg m;
        if (oci_sync_recv(a->sync_fd, &m, -1) < 0 || m.type != OCI_SYNC_ACK)
            _exit(1);
    }
    close(a->sync_fd);
    if (run_hooks_here(a, OCI_HOOK_START_CONTAINER, "startContainer", host_pid, &err) < 0) {
        dprintf(2, "kinglet: %s\n", err_str(&err));
        _exit(127);
    }
    /* The monitor takes this as the start time. */
    if (a->exec_fd >= 0) {
        ssize_t w = write(a->exec_fd, "s", 1);
        (void)w;
    }
    oci_process_exec(&a->spec->process, exe, a->spec->seccomp, a->preserve_fds, tty_slave, &err);
    dprintf(2, "kinglet: %s\n", err_str(&err));
    _exit(127);
}
