/* oci/container: the lifecycle operations (create, start, run, state,
 * kill, delete, list, pause, update, pids) over the state directory.
 *
 * create: the caller parses the spec, makes <root>/<id>/ (mkdir is the
 * lock: a second create of the same id fails there), the cgroup and
 * exec.fifo, then forks the monitor, which clones the init straight into
 * the cgroup (clone3 CLONE_INTO_CGROUP) and the new namespaces. The caller
 * serves the init's sync requests (id maps, runtime hooks) and writes
 * state.json once the init is READY. Any failure kills what was started
 * and removes the directory and the cgroup. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>

#include "oci/cgroup.h"
#include "monitor/monitor.h"
#include "oci/internal.h"

static const char *root_or_default(const char *root) { return root ? root : OCI_ROOT_DEFAULT; }

static void cgroup_freep(struct oci_cgroup **cg) { oci_cgroup_free(*cg); }

static char *state_json_for_hooks(const char *id, const char *status, pid_t pid, const char *bundle,
                                  json_t *annotations)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:s}", "ociVersion", OCI_VERSION, "id", id,
                          "status", status, "pid", (int)pid, "bundle", bundle);
    if (!j)
        return NULL;
    if (annotations)
        json_object_set(j, "annotations", annotations);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static int connect_console(const char *path, struct err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return err_set(err, ENAMETOOLONG, "--console-socket `%s`", path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, errno, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return err_set(err, e, "--console-socket `%s`", path);
    }
    return fd;
}

static int write_pid_file(const char *path, pid_t pid, struct err *err)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%d", (int)pid);
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return err_set(err, ENAMETOOLONG, "--pid-file `%s`", path);
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)n) != n || rename(tmp, path) < 0)
        return err_set(err, errno ? errno : EIO, "--pid-file `%s`", path);
    return 0;
}

/* clone3 into cgroup_fd's cgroup if it can (*ret_in_cgroup: whether it
 * did), else as a plain child the caller moves there afterwards. */
static pid_t clone3_into(uint64_t flags, int cgroup_fd, bool *ret_in_cgroup)
{
    struct clone_args ca = {.flags = flags, .exit_signal = SIGCHLD};
    *ret_in_cgroup = false;
    if (cgroup_fd >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)cgroup_fd;
    }
    long r = syscall(SYS_clone3, &ca, sizeof(ca));
    if (r < 0 && errno == EBUSY && cgroup_fd >= 0) {
        /* A cgroup with controllers in "domain invalid" state and the
         * like: fall back to moving the process afterwards. */
        ca.flags &= ~CLONE_INTO_CGROUP;
        r = syscall(SYS_clone3, &ca, sizeof(ca));
    } else if (r >= 0 && cgroup_fd >= 0) {
        *ret_in_cgroup = true;
    }
    return (pid_t)r;
}

/* Waits until pid (not our child) is gone, up to timeout_ms. */
static int wait_gone(pid_t pid, uint64_t start, int timeout_ms)
{
    int fd = pidfd_open_started(pid, start);
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    close(fd);
    return r > 0 ? 0 : -ETIMEDOUT;
}

/* A CRI container's stdio, made by the creating process: the init gets
 * the `init` ends as its fds 0, 1, 2 (or the console end, with a tty); the
 * monitor keeps the others. -1 where unused. */
struct cri_io {
    int init_in, init_out, init_err; /* the init's */
    int mon_in, mon_out, mon_err;    /* the monitor's */
    int con_init, con_mon;           /* console socket pair (tty) */
    int ctl;                         /* the listening control socket */
};

static void cri_io_close(struct cri_io *io)
{
    int *fds[] = {&io->init_in, &io->init_out, &io->init_err, &io->mon_in, &io->mon_out,
                  &io->mon_err, &io->con_init, &io->con_mon,  &io->ctl};
    for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

struct create_ctx {
    struct oci_spec *spec;
    struct oci_cgroup *cg;
    int rootfd, dirfd;
    struct cri_io io;
    int exec_check; /* the monitor's end: closed by its execve */
    pid_t init, monitor;
    int sync_fd, mon_fd;
    int cancel_fd; /* readable when the caller is told to stop (run), or -1 */
    bool dir_made;
};

/* Waits until fd is readable, or cancel_fd (a signalfd) says stop: then
 * -EINTR (oci_cancel_read), so that `run` stops creating when told to
 * (SIGTERM, SIGINT) instead of waiting with those signals blocked. */
static int wait_or_cancel(int fd, int cancel_fd, struct err *err)
{
    if (cancel_fd < 0)
        return 0;
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = cancel_fd, .events = POLLIN}};
    for (;;) {
        int r = poll(p, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_set(err, errno, "poll");
        if (p[0].revents)
            return 0;
        if ((r = oci_cancel_read(cancel_fd, err)) < 0)
            return r;
    }
}

static void create_abort(struct create_ctx *c, const char *id)
{
    if (c->init > 0)
        kill(c->init, SIGKILL);
    if (c->monitor > 0) {
        /* The monitor is our child until we exit: reap it. */
        waitpid(c->monitor, NULL, 0);
    }
    if (c->cg) {
        oci_cgroup_kill(c->cg, SIGKILL, NULL);
        oci_cgroup_destroy(c->cg, NULL);
    }
    if (c->dir_made)
        rm_rf_at(c->rootfd, id);
}

/* A CRI container's stdio goes through its monitor (see oci.h). */
static bool cri_io(const struct oci_create_opts *o) { return o->cri_log || o->cri_stdin; }

static _Noreturn void monitor_child(struct create_ctx *c, const struct oci_create_opts *o,
                                    int init_sync, int fifo_fd, int console_fd, bool run)
{
    const struct oci_spec *spec = c->spec;
    close(c->sync_fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    /* The init resolves relative bind sources from the bundle; chdir here,
     * where the host's permissions still apply to us. */
    if (chdir(o->bundle) < 0) {
        oci_sync_send(c->mon_fd, OCI_SYNC_ERROR, errno, "bundle");
        _exit(1);
    }
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) {
        oci_sync_send(c->mon_fd, OCI_SYNC_ERROR, errno, "pipe");
        _exit(1);
    }
    bool joined_user = spec->ns[OCI_NS_USER].enabled && spec->ns[OCI_NS_USER].path;
    uint64_t flags = 0;
    for (int k = 0; k < OCI_NS_COUNT; k++) {
        if (!spec->ns[k].enabled)
            continue;
        if (spec->ns[k].path) {
            if (k == OCI_NS_PID) {
                struct err err = {0};
                int fd = oci_ns_open_path(spec->ns[k].path, k, &err);
                if (fd < 0 || setns(fd, CLONE_NEWPID) < 0) {
                    if (fd >= 0)
                        err_set(&err, errno, "`linux.namespaces`: join pid namespace `%s`",
                                spec->ns[k].path);
                    oci_sync_send_err(c->mon_fd, &err);
                    _exit(1);
                }
                close(fd);
            }
            continue;
        }
        if (joined_user && k != OCI_NS_PID)
            continue;
        /* A new time namespace is unshared by the init, which writes its
         * offsets before anything enters it (at execve). */
        if (k == OCI_NS_TIME)
            continue;
        flags |= (uint64_t)oci_ns_clone_flag(k);
    }
    int cgfd = c->cg ? oci_cgroup_fd(c->cg) : -1;
    struct cri_io *io = &c->io;
    if (cri_io(o)) {
        /* The init's stdio: the pipes to the monitor (a tty replaces them
         * at execve), stdin a pipe or /dev/null. */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        int in = io->init_in >= 0 ? io->init_in : null;
        int out = io->init_out >= 0 ? io->init_out : null;
        int errfd = io->init_err >= 0 ? io->init_err : null;
        if (null < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0) {
            oci_sync_send(c->mon_fd, OCI_SYNC_ERROR, errno, "the container's stdio");
            _exit(1);
        }
        close(null);
        if (io->con_init >= 0)
            console_fd = io->con_init;
    }
    /* A new PID namespace made here would be the host's user namespace's
     * (the container's root could not mount its /proc): the init is
     * cloned from inside the joined one. */
    bool clone_in_userns = joined_user && (flags & CLONE_NEWPID);
    struct err cerr = {0};
    bool in_cgroup = false;
    pid_t pid = clone_in_userns ? oci_clone_in_userns(spec->ns[OCI_NS_USER].path, flags, cgfd,
                                                      &in_cgroup, &cerr)
                                : clone3_into(flags, cgfd, &in_cgroup);
    if (pid < 0 && clone_in_userns) {
        oci_sync_send_err(c->mon_fd, &cerr);
        _exit(1);
    }
    if (pid == 0) {
        close(c->mon_fd);
        close(c->exec_check);
        if (c->io.con_mon >= 0)
            close(c->io.con_mon);
        close(ep[0]);
        struct oci_init_args a = {
            .spec = spec,
            .id = o->id,
            .bundle = spec->json ? o->bundle : ".",
            .sync_fd = init_sync,
            .fifo_fd = fifo_fd,
            .console_fd = console_fd,
            .exec_fd = ep[1],
            .preserve_fds = o->preserve_fds,
            .joined_userns = joined_user,
            .in_userns = clone_in_userns,
            .no_pivot = o->no_pivot,
            .new_keyring = !o->no_new_keyring,
        };
        oci_init_main(&a);
    }
    if (pid < 0) {
        oci_sync_send(c->mon_fd, OCI_SYNC_ERROR, errno, "clone the container init");
        _exit(1);
    }
    /* Only where clone3 could not place it: a write to cgroup.procs costs
     * an RCU grace period (milliseconds) even for a process already there. */
    if (c->cg && pid > 0 && !in_cgroup)
        oci_cgroup_enter(c->cg, pid, NULL);
    close(ep[1]);
    close(init_sync);
    if (fifo_fd >= 0)
        close(fifo_fd);
    if (console_fd >= 0)
        close(console_fd);
    oci_sync_send(c->mon_fd, OCI_SYNC_PID, pid, NULL);
    /* A tty container's pty master comes from the init before it is
     * ready (EOF if it dies first); the monitor logs it and holds it. */
    int master = -1;
    if (cri_io(o) && io->con_mon >= 0 && oci_fd_recv(io->con_mon, false, &master) < 0)
        master = -1;
    /* The container has our stdio; we keep none of it. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
    /* Only what the monitor is given stays: monitor_exec keeps those. */
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    struct monitor_args ma = {
        .init = pid,
        .dir_fd = c->dirfd,
        .exec_fd = ep[0],
        .report_fd = run ? c->mon_fd : -1,
        .cgroup_path = c->cg ? oci_cgroup_path(c->cg) : NULL,
        .log_path = o->cri_log,
        .stdout_fd = master >= 0 ? -1 : io->mon_out,
        .stderr_fd = master >= 0 ? -1 : io->mon_err,
        .tty_fd = master,
        .stdin_fd = master >= 0 ? -1 : io->mon_in,
        .stdin_once = o->cri_stdin_once,
        .ctl_fd = io->ctl,
    };
    if (!run)
        close(c->mon_fd);
    int r = monitor_exec(&ma);
    /* Tell the creating process; the init, without its parent, must go. */
    struct err merr = {0};
    err_set(&merr, r, "start the container monitor");
    err_record_write(c->exec_check, &merr);
    kill(pid, SIGKILL);
    _exit(1);
}

/* For each idmap mount, a detached copy of the source tree idmapped to the
 * container's user namespace, handed to the init to attach; in a joined
 * user namespace, a plain copy for every other bind too (its source may
 * be below directories the namespace's root cannot search). */
static int send_idmapped_trees(struct create_ctx *c, struct err *err)
{
    _cleanup_close_ int userns = -1;
    bool joined = c->spec->ns[OCI_NS_USER].enabled && c->spec->ns[OCI_NS_USER].path;
    for (size_t i = 0; i < c->spec->n_mounts; i++) {
        const struct oci_mount *m = &c->spec->mounts[i];
        if (!m->idmap && !(joined && m->bind))
            continue;
        if (!m->idmap) {
            _cleanup_close_ int tree =
                open_tree(AT_FDCWD, m->source ? m->source : "",
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
                              (m->flags & MS_REC || m->rro ? AT_RECURSIVE : 0));
            if (tree < 0)
                return err_set(err, errno, "`mounts[%zu].source`: `%s`", i,
                               m->source ? m->source : "");
            int r = oci_sync_send_fd(c->sync_fd, OCI_SYNC_IDMAP, (int)i, tree);
            if (r < 0)
                return err_set(err, r, "send the bind's tree");
            continue;
        }
        _cleanup_close_ int own = -1;
        if (m->n_uid_maps) {
            /* The mount's own mappings (OCI 1.1). */
            char field[64];
            snprintf(field, sizeof(field), "mounts[%zu].uidMappings", i);
            own =
                oci_userns_make(m->uid_maps, m->n_uid_maps, m->gid_maps, m->n_gid_maps, field, err);
            if (own < 0)
                return own;
        } else if (userns < 0) {
            if (!c->spec->ns[OCI_NS_USER].enabled)
                return err_set(err, EINVAL,
                               "`mounts[%zu]`: idmap needs uidMappings and gidMappings on the "
                               "mount or a user namespace for the container",
                               i);
            char p[64];
            snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)c->init);
            userns = open(p, O_RDONLY | O_CLOEXEC);
            if (userns < 0)
                return err_set(err, errno, "open the container's user namespace");
        }
        bool rec = m->flags & MS_REC;
        _cleanup_close_ int tree =
            open_tree(AT_FDCWD, m->source ? m->source : "",
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (rec ? AT_RECURSIVE : 0));
        if (tree < 0)
            return err_set(err, errno, "`mounts[%zu].source`: `%s`", i, m->source ? m->source : "");
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP,
                                  .userns_fd = (uint64_t)(own >= 0 ? own : userns)};
        if (mount_setattr(tree, "", AT_EMPTY_PATH | (rec ? AT_RECURSIVE : 0), &attr, sizeof(attr)) <
            0)
            return err_set(err, errno,
                           "`mounts[%zu]`: idmap `%s` (does its filesystem support "
                           "idmapped mounts?)",
                           i, m->source);
        int r = oci_sync_send_fd(c->sync_fd, OCI_SYNC_IDMAP, (int)i, tree);
        if (r < 0)
            return err_set(err, r, "send the idmapped tree");
    }
    return 0;
}

static int serve_init(struct create_ctx *c, const struct oci_create_opts *o, const char *bundle,
                      struct err *err)
{
    for (;;) {
        struct oci_sync_msg m;
        int r = wait_or_cancel(c->sync_fd, c->cancel_fd, err);
        if (r < 0)
            return r;
        r = oci_sync_recv(c->sync_fd, &m, -1);
        if (r < 0)
            return err_set(err, r == -EPIPE ? ECHILD : r, "the container init exited during setup");
        switch (m.type) {
        case OCI_SYNC_USERMAP:
            /* Maps only for a new user namespace of the container's own;
             * the init may ask just for idmapped trees. */
            if ((c->spec->ns[OCI_NS_USER].enabled && !c->spec->ns[OCI_NS_USER].path &&
                 (r = oci_idmap_write(c->init, c->spec, err)) < 0) ||
                (r = send_idmapped_trees(c, err)) < 0) {
                oci_sync_send_err(c->sync_fd, err);
                return r;
            }
            oci_sync_send(c->sync_fd, OCI_SYNC_ACK, 0, NULL);
            break;
        case OCI_SYNC_HOOKS: {
            const struct oci_hooks *h = &c->spec->hooks;
            if (h->n[OCI_HOOK_PRESTART] || h->n[OCI_HOOK_CREATE_RUNTIME]) {
                _cleanup_free_ char *st =
                    state_json_for_hooks(o->id, "creating", c->init, bundle, c->spec->annotations);
                if (!st)
                    return err_set(err, ENOMEM, "hook state");
                r = oci_hooks_run_cancel(h->list[OCI_HOOK_PRESTART], h->n[OCI_HOOK_PRESTART], st,
                                         "prestart", c->cancel_fd, err);
                if (r == 0)
                    r = oci_hooks_run_cancel(h->list[OCI_HOOK_CREATE_RUNTIME],
                                             h->n[OCI_HOOK_CREATE_RUNTIME], st, "createRuntime",
                                             c->cancel_fd, err);
                if (r < 0) {
                    oci_sync_send_err(c->sync_fd, err);
                    return r;
                }
            }
            oci_sync_send(c->sync_fd, OCI_SYNC_ACK, c->init, NULL);
            break;
        }
        case OCI_SYNC_READY:
            return 0;
        case OCI_SYNC_ERROR:
            return oci_sync_err(&m, err);
        default:
            return err_set(err, EPROTO, "unexpected message %d from the container init", m.type);
        }
    }
}

/* The pipes, console pair and control socket of a CRI container. */
static int cri_io_make(struct create_ctx *c, const struct oci_create_opts *o, int dirfd,
                       struct err *err)
{
    struct cri_io *io = &c->io;
    int p[2];
    if (c->spec->process.terminal) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0)
            return err_set(err, errno, "console socket pair");
        io->con_mon = p[0];
        io->con_init = p[1];
    } else {
        if (pipe2(p, O_CLOEXEC) < 0)
            return err_set(err, errno, "stdout pipe");
        io->mon_out = p[0];
        io->init_out = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
            return err_set(err, errno, "stderr pipe");
        io->mon_err = p[0];
        io->init_err = p[1];
        if (o->cri_stdin) {
            if (pipe2(p, O_CLOEXEC) < 0)
                return err_set(err, errno, "stdin pipe");
            io->init_in = p[0];
            io->mon_in = p[1];
        }
    }
    io->ctl = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (io->ctl < 0)
        return err_set(err, errno, "control socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dirfd, MONITOR_CTL_SOCK);
    if (bind(io->ctl, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(io->ctl, 8) < 0)
        return err_set(err, errno, "control socket");
    return 0;
}

/* console_in: for `run` in the foreground, a socket of the caller's that
 * receives the pty when process.terminal is set and no --console-socket
 * was given; -1 otherwise. cancel_fd: a signalfd that ends every wait
 * (the create is undone), or -1. */
static int container_create(const struct oci_create_opts *o, bool run, int console_in,
                            int cancel_fd, int *ret_mon_fd, pid_t *ret_init, struct err *err)
{
    const char *root = root_or_default(o->root);
    int r = oci_id_validate(o->id, err);
    if (r < 0)
        return r;
    char bundle[PATH_MAX];
    if (!realpath(o->bundle ? o->bundle : ".", bundle))
        return err_set(err, errno, "bundle `%s`", o->bundle ? o->bundle : ".");
    struct oci_create_opts opts = *o;
    opts.bundle = bundle;

    struct create_ctx c = {.rootfd = -1,
                           .dirfd = -1,
                           .cancel_fd = cancel_fd,
                           .sync_fd = -1,
                           .mon_fd = -1,
                           .exec_check = -1,
                           .io = {-1, -1, -1, -1, -1, -1, -1, -1, -1}};
    _cleanup_close_ int exec_check = -1;
    _cleanup_free_ char *raw = NULL;
    size_t raw_len = 0;
    if ((r = oci_spec_load(bundle, &c.spec, &raw, &raw_len, err)) < 0)
        return r;
    _cleanup_(oci_spec_freep) _unused_ struct oci_spec *spec_owner = c.spec;
    if (!c.spec->has_process)
        return err_set(err, EINVAL, "`process`: missing");
    if (c.spec->process.terminal && !o->console_socket && console_in < 0 && !cri_io(o))
        return err_set(err, EINVAL, "`process.terminal`: true needs --console-socket");
    oci_process_clamp_oom(&c.spec->process);
    log_debug("create `%s`: spec loaded", o->id);

    if ((r = mkdir_p(root, 0700)) < 0)
        return err_set(err, r, "--root `%s`", root);
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return err_set(err, errno, "--root `%s`", root);
    c.rootfd = rootfd;
    if (mkdirat(rootfd, o->id, 0700) < 0) {
        if (errno == EEXIST)
            return err_set(err, EEXIST, "container `%s` already exists", o->id);
        return err_set(err, errno, "create `%s/%s`", root, o->id);
    }
    c.dir_made = true;
    _cleanup_close_ int dirfd = openat(rootfd, o->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int fifo_fd = -1, console_fd = -1, init_sync = -1;
    _cleanup_close_ int sync_fd = -1, mon_fd = -1, mon_child = -1;
    _cleanup_(cgroup_freep) struct oci_cgroup *cg = NULL;
    if (dirfd < 0) {
        r = err_set(err, errno, "open `%s/%s`", root, o->id);
        goto fail;
    }
    c.dirfd = dirfd;
    {
        _cleanup_close_ int cfd =
            openat(dirfd, "config.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (cfd < 0 || write(cfd, raw, raw_len) != (ssize_t)raw_len) {
            r = err_set(err, errno ? errno : EIO, "write the config copy");
            goto fail;
        }
    }
    {
        /* The nodes of linux.devices must get through the device program
         * (deny by default), as runc allows them. */
        json_t *linux_devices = json_object_get(json_object_get(c.spec->json, "linux"), "devices");
        json_t *res = NULL;
        if ((r = oci_cgroup_resources_with_devices(c.spec->resources, linux_devices, &res, err)) <
            0)
            goto fail;
        r = oci_cgroup_create(c.spec->cgroups_path, o->id, res, &cg, err);
        json_decref(res);
        if (r < 0) {
            err_wrap(err, "`linux.cgroupsPath`");
            goto fail;
        }
    }
    c.cg = cg;
    log_debug("create `%s`: cgroup `%s` ready", o->id, cg ? oci_cgroup_path(cg) : "");
    if (!run) {
        if (mkfifoat(dirfd, "exec.fifo", 0600) < 0 ||
            (fifo_fd = openat(dirfd, "exec.fifo", O_RDWR | O_CLOEXEC)) < 0) {
            r = err_set(err, errno, "create exec.fifo");
            goto fail;
        }
    }
    if (o->console_socket && (console_fd = connect_console(o->console_socket, err)) < 0) {
        r = console_fd;
        goto fail;
    }
    if (!o->console_socket && !cri_io(o) && c.spec->process.terminal &&
        (console_fd = fcntl(console_in, F_DUPFD_CLOEXEC, 3)) < 0) {
        r = err_set(err, errno, "console");
        goto fail;
    }
    int sp[2], mp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        r = err_set(err, errno, "socketpair");
        goto fail;
    }
    sync_fd = sp[0];
    init_sync = sp[1];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, mp) < 0) {
        r = err_set(err, errno, "socketpair");
        goto fail;
    }
    mon_fd = mp[0];
    mon_child = mp[1];
    c.sync_fd = sync_fd;
    c.mon_fd = mon_child;
    if (cri_io(o) && (r = cri_io_make(&c, o, dirfd, err)) < 0)
        goto fail;
    {
        int cp[2];
        if (pipe2(cp, O_CLOEXEC) < 0) {
            r = err_set(err, errno, "pipe");
            goto fail;
        }
        exec_check = cp[0];
        c.exec_check = cp[1];
    }
    pid_t mon = fork();
    if (mon < 0) {
        r = err_set(err, errno, "fork the monitor");
        goto fail;
    }
    if (mon == 0) {
        close(mon_fd);
        monitor_child(&c, &opts, init_sync, fifo_fd, console_fd, run);
    }
    c.monitor = mon;
    close(TAKE_FD(mon_child));
    close(c.exec_check);
    c.exec_check = -1;
    /* The init's and the monitor's ends are theirs now; the creator keeps
     * none (the pipes must see EOF when the container is done with them). */
    cri_io_close(&c.io);
    close(TAKE_FD(init_sync));
    if (fifo_fd >= 0)
        close(TAKE_FD(fifo_fd));
    if (console_fd >= 0)
        close(TAKE_FD(console_fd));
    c.mon_fd = mon_fd;

    struct oci_sync_msg m;
    if ((r = wait_or_cancel(mon_fd, cancel_fd, err)) < 0)
        goto fail;
    if ((r = oci_sync_recv(mon_fd, &m, -1)) < 0) {
        r = err_set(err, r, "the monitor exited");
        goto fail;
    }
    if (m.type == OCI_SYNC_ERROR) {
        r = oci_sync_err(&m, err);
        goto fail;
    }
    c.init = m.value;
    log_debug("create `%s`: init pid %d cloned", o->id, (int)c.init);
    /* A first record, so that a create that dies half-way (killed, say)
     * leaves what delete --force needs: the init, the monitor and the
     * cgroup. */
    struct oci_record rec = {.pid = c.init, .monitor = mon, .creating = true};
    snprintf(rec.id, sizeof(rec.id), "%s", o->id);
    snprintf(rec.bundle, sizeof(rec.bundle), "%s", bundle);
    if (cg)
        snprintf(rec.cgroup, sizeof(rec.cgroup), "%s", oci_cgroup_path(cg));
    proc_start_time(c.init, &rec.pid_start, NULL);
    proc_start_time(mon, &rec.monitor_start, NULL);
    if ((r = oci_record_write(dirfd, &rec, err)) < 0)
        goto fail;
    if ((r = serve_init(&c, &opts, bundle, err)) < 0)
        goto fail;

    log_debug("create `%s`: init ready", o->id);
    /* The monitor has replaced itself with the monitor program (EOF) or
     * says why it could not (an error record). */
    if ((r = wait_or_cancel(exec_check, cancel_fd, err)) < 0)
        goto fail;
    if ((r = err_record_read(exec_check, err)) != -ENODATA) {
        if (r == 0)
            r = -err->code;
        else
            err_set(err, EPROTO, "the container monitor's report");
        goto fail;
    }
    rec.creating = false;
    rec.created_ns = now_real_ns();
    if (c.spec->annotations && json_object_size(c.spec->annotations))
        rec.annotations_json = json_dumps(c.spec->annotations, JSON_COMPACT);
    r = oci_record_write(dirfd, &rec, err);
    oci_record_clear(&rec);
    if (r < 0)
        goto fail;
    if (o->pid_file && (r = write_pid_file(o->pid_file, c.init, err)) < 0)
        goto fail;
    if (run) {
        oci_sync_send(sync_fd, OCI_SYNC_ACK, 0, NULL);
        *ret_mon_fd = TAKE_FD(mon_fd);
        if (c.spec->hooks.n[OCI_HOOK_POSTSTART]) {
            struct err herr = {0};
            _cleanup_free_ char *st =
                state_json_for_hooks(o->id, "running", c.init, bundle, c.spec->annotations);
            if (st &&
                oci_hooks_run(c.spec->hooks.list[OCI_HOOK_POSTSTART],
                              c.spec->hooks.n[OCI_HOOK_POSTSTART], st, "poststart", &herr) < 0)
                log_warn("container `%s`: %s", o->id, err_str(&herr));
        }
    }
    if (ret_init)
        *ret_init = c.init;
    return 0;

fail:
    cri_io_close(&c.io);
    if (c.exec_check >= 0)
        close(c.exec_check);
    create_abort(&c, o->id);
    return r;
}

int oci_container_create(const struct oci_create_opts *opts, struct err *err)
{
    int r = container_create(opts, false, -1, -1, NULL, NULL, err);
    if (r < 0)
        return err_wrap(err, "create container `%s`", opts->id);
    return 0;
}

static int run_poststart(int dirfd, const struct oci_record *rec, struct err *err)
{
    _cleanup_free_ char *raw = NULL;
    size_t len;
    if (read_file_at(dirfd, "config.json", OCI_CONFIG_MAX, &raw, &len) < 0)
        return 0;
    /* Parse only when there is something to run: start stays cheap. */
    if (!strstr(raw, "\"poststart\""))
        return 0;
    _cleanup_(oci_spec_freep) struct oci_spec *spec = NULL;
    if (oci_spec_parse(raw, len, rec->bundle, &spec, err) < 0)
        return -EINVAL;
    _cleanup_free_ char *st =
        state_json_for_hooks(rec->id, "running", rec->pid, rec->bundle, spec->annotations);
    if (oci_hooks_run(spec->hooks.list[OCI_HOOK_POSTSTART], spec->hooks.n[OCI_HOOK_POSTSTART], st,
                      "poststart", err) < 0)
        log_warn("container `%s`: %s", rec->id, err_str(err));
    return 0;
}

static int start_locked(int dirfd, const char *id, struct err *err)
{
    struct oci_record rec;
    int r = oci_record_read(dirfd, &rec, err);
    if (r < 0)
        return r;
    enum oci_status st = oci_status_get(dirfd, &rec);
    if (st != OCI_STATUS_CREATED) {
        oci_record_clear(&rec);
        return err_set(err, EINVAL, "container `%s` is %s, not created", id, oci_status_name(st));
    }
    int fd = openat(dirfd, "exec.fifo", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        r = err_set(err, errno == ENXIO ? ESRCH : errno, "container `%s`: the init is gone", id);
        oci_record_clear(&rec);
        return r;
    }
    ssize_t n = write(fd, "0", 1);
    int e = errno;
    close(fd);
    unlinkat(dirfd, "exec.fifo", 0);
    if (n != 1) {
        oci_record_clear(&rec);
        return err_set(err, e, "container `%s`: start", id);
    }
    run_poststart(dirfd, &rec, err);
    oci_record_clear(&rec);
    return 0;
}

int oci_container_start(const char *root, const char *id, struct err *err)
{
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root_or_default(root), id, &dirfd, err);
    if (r < 0)
        return r;
    return start_locked(dirfd, id, err);
}

int oci_container_run(const struct oci_create_opts *opts, bool detach, int *ret_status,
                      struct err *err)
{
    /* Forward the usual signals to the container, as runc does. */
    sigset_t fwd, old;
    sigemptyset(&fwd);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
        sigaddset(&fwd, sigs[i]);
    if (!detach)
        sigprocmask(SIG_BLOCK, &fwd, &old);
    _cleanup_close_ int mon_fd = -1, console_mine = -1, console_theirs = -1, master = -1;
    if (!detach && !opts->console_socket) {
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0) {
            console_mine = sp[0];
            console_theirs = sp[1];
        }
    }
    /* The forwarded signals, read from here; SIGTERM, SIGINT, SIGHUP and
     * SIGQUIT also end the create (undone) while it waits. */
    _cleanup_close_ int sfd = detach ? -1 : signalfd(-1, &fwd, SFD_CLOEXEC);
    pid_t init = 0;
    int r = container_create(opts, true, console_theirs, sfd, &mon_fd, &init, err);
    if (console_theirs >= 0)
        close(TAKE_FD(console_theirs));
    /* A pty came back (sent before READY) when process.terminal is set. */
    if (r == 0 && console_mine >= 0 && oci_fd_recv(console_mine, true, &master) < 0)
        master = -1;
    if (r < 0) {
        if (!detach)
            sigprocmask(SIG_SETMASK, &old, NULL);
        return err_wrap(err, "run container `%s`", opts->id);
    }
    if (detach) {
        if (ret_status)
            *ret_status = 0;
        return 0;
    }
    int status = 255;
    struct termios saved_tio;
    bool raw = false;
    if (master >= 0) {
        /* Our terminal, raw, proxied to the container's pty. */
        struct winsize ws;
        if (ioctl(0, TIOCGWINSZ, &ws) == 0)
            ioctl(master, TIOCSWINSZ, &ws);
        if (tcgetattr(0, &saved_tio) == 0) {
            struct termios t = saved_tio;
            cfmakeraw(&t);
            raw = tcsetattr(0, TCSANOW, &t) == 0;
        }
    }
    bool in_open = master >= 0;
    int stop_sig = 0; /* a SIGTERM or SIGINT was forwarded */
    for (;;) {
        struct pollfd p[4] = {{.fd = mon_fd, .events = POLLIN},
                              {.fd = sfd, .events = POLLIN},
                              {.fd = master, .events = POLLIN},
                              {.fd = in_open ? 0 : -1, .events = POLLIN}};
        if (poll(p, 4, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (sfd >= 0 && (p[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                struct winsize ws;
                int sig = (int)si.ssi_signo;
                if (sig == SIGWINCH && master >= 0 && ioctl(0, TIOCGWINSZ, &ws) == 0)
                    ioctl(master, TIOCSWINSZ, &ws);
                else
                    kill(init, sig);
                /* A paused container cannot act on the signal, and a
                 * second SIGTERM or SIGINT means "now": stop waiting; the
                 * container is killed and deleted below. */
                if (sig == SIGTERM || sig == SIGINT) {
                    struct oci_state st;
                    bool paused = false;
                    if (oci_container_state(opts->root, opts->id, &st, NULL) == 0) {
                        paused = st.status == OCI_STATUS_PAUSED;
                        oci_state_clear(&st);
                    }
                    if (paused || stop_sig) {
                        log_warn("run `%s`: %s%s: killing the container", opts->id, strsignal(sig),
                                 paused ? " while paused" : " again");
                        status = 128 + sig;
                        break;
                    }
                    stop_sig = sig;
                }
            }
        }
        if (master >= 0 && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[4096];
            ssize_t n = read(master, buf, sizeof(buf));
            if (n > 0) {
                ssize_t w = write(1, buf, (size_t)n);
                (void)w;
            } else if (n == 0 || errno != EINTR) {
                close(TAKE_FD(master)); /* the last slave is gone */
            }
        }
        if (in_open && (p[3].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[4096];
            ssize_t n = read(0, buf, sizeof(buf));
            if (n > 0 && master >= 0) {
                ssize_t w = write(master, buf, (size_t)n);
                (void)w;
            } else if (n <= 0) {
                in_open = false;
            }
        }
        if (p[0].revents) {
            struct oci_sync_msg m;
            if (oci_sync_recv(mon_fd, &m, 0) == 0 && m.type == OCI_SYNC_EXIT)
                status = m.value;
            /* What the process wrote last is still in the pty. */
            while (master >= 0) {
                struct pollfd q = {.fd = master, .events = POLLIN};
                char buf[4096];
                ssize_t n;
                if (poll(&q, 1, 0) <= 0 || (n = read(master, buf, sizeof(buf))) <= 0)
                    break;
                ssize_t w = write(1, buf, (size_t)n);
                (void)w;
            }
            break;
        }
    }
    if (raw)
        tcsetattr(0, TCSANOW, &saved_tio);
    sigprocmask(SIG_SETMASK, &old, NULL);
    log_debug("run `%s`: exit status %d", opts->id, status);
    struct err derr = {0};
    if (oci_container_delete(opts->root, opts->id, true, &derr) < 0)
        log_warn("%s", err_str(&derr));
    if (ret_status)
        *ret_status = status;
    return 0;
}

void oci_state_clear(struct oci_state *s)
{
    free(s->annotations_json);
    s->annotations_json = NULL;
}

int oci_container_state(const char *root, const char *id, struct oci_state *ret, struct err *err)
{
    memset(ret, 0, sizeof(*ret));
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root_or_default(root), id, &dirfd, err);
    if (r < 0)
        return r;
    struct oci_record rec;
    if ((r = oci_record_read(dirfd, &rec, err)) < 0)
        return err_wrap(err, "container `%s`", id);
    snprintf(ret->id, sizeof(ret->id), "%s", rec.id);
    snprintf(ret->bundle, sizeof(ret->bundle), "%s", rec.bundle);
    ret->created_ns = rec.created_ns;
    ret->status = oci_status_get(dirfd, &rec);
    ret->pid = ret->status == OCI_STATUS_STOPPED ? 0 : rec.pid;
    ret->annotations_json = TAKE_PTR(rec.annotations_json);
    struct oci_exit ex;
    r = ret->status == OCI_STATUS_STOPPED ? oci_exit_read(dirfd, &ex) : -ENOENT;
    if (r == -ENOENT && ret->status == OCI_STATUS_STOPPED) {
        /* The init is gone and the monitor is writing its record: give it
         * a moment, so that a stopped state comes with its exit code. */
        wait_gone(rec.monitor, rec.monitor_start, 2000);
        r = oci_exit_read(dirfd, &ex);
    }
    if (r == 0) {
        ret->exited = true;
        ret->exit_code = ex.exit_code;
        ret->exit_signal = ex.signal;
        ret->oom_killed = ex.oom_killed;
        ret->started_ns = ex.started_ns;
        ret->finished_ns = ex.finished_ns;
    }
    oci_record_clear(&rec);
    return 0;
}

int oci_container_monitor(const char *root, const char *id, pid_t *ret_init, struct err *err)
{
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root_or_default(root), id, &dirfd, err);
    if (r < 0)
        return r;
    struct oci_record rec;
    if ((r = oci_record_read(dirfd, &rec, err)) < 0)
        return err_wrap(err, "container `%s`", id);
    pid_t mon = rec.monitor;
    uint64_t mon_start = rec.monitor_start;
    *ret_init = rec.pid;
    oci_record_clear(&rec);
    int fd = mon > 0 ? pidfd_open(mon, 0) : -1;
    uint64_t st;
    char state = 0;
    if (fd >= 0 && (proc_start_time(mon, &st, &state) < 0 || st != mon_start || state == 'Z' ||
                    state == 'X')) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        return err_set(err, ESRCH, "container `%s`: its monitor is gone", id);
    return fd;
}

static void rfc3339(uint64_t ns, char *buf, size_t size)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%09lluZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (unsigned long long)(ns % 1000000000ull));
}

int oci_state_to_json(const struct oci_state *s, char **ret, struct err *err)
{
    char created[64];
    rfc3339(s->created_ns, created, sizeof(created));
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "ociVersion", OCI_VERSION, "id",
                          s->id, "pid", (int)s->pid, "status", oci_status_name(s->status), "bundle",
                          s->bundle, "rootfs", "", "created", created);
    if (!j)
        return err_set(err, ENOMEM, "state");
    json_object_del(j, "rootfs");
    if (s->annotations_json) {
        json_t *a = json_loads(s->annotations_json, 0, NULL);
        if (a)
            json_object_set_new(j, "annotations", a);
    }
    if (s->exited) {
        json_object_set_new(j, "exitCode", json_integer(s->exit_code));
        if (s->exit_signal)
            json_object_set_new(j, "exitSignal", json_integer(s->exit_signal));
        if (s->oom_killed)
            json_object_set_new(j, "oomKilled", json_true());
        if (s->started_ns) {
            char b[64];
            rfc3339(s->started_ns, b, sizeof(b));
            json_object_set_new(j, "started", json_string(b));
        }
        char f[64];
        rfc3339(s->finished_ns, f, sizeof(f));
        json_object_set_new(j, "finished", json_string(f));
    }
    *ret = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    return *ret ? 0 : err_set(err, ENOMEM, "state");
}

static int signal_init(const struct oci_record *rec, int sig, struct err *err)
{
    _cleanup_close_ int pidfd = pidfd_open_started(rec->pid, rec->pid_start);
    if (pidfd < 0)
        return err_set(err, ESRCH, "container `%s` is not running", rec->id);
    if (pidfd_send_signal(pidfd, sig, NULL, 0) < 0)
        return err_set(err, errno, "container `%s`: signal %d", rec->id, sig);
    return 0;
}

int oci_container_kill(const char *root, const char *id, int sig, bool all, struct err *err)
{
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root_or_default(root), id, &dirfd, err);
    if (r < 0)
        return r;
    struct oci_record rec;
    if ((r = oci_record_read(dirfd, &rec, err)) < 0)
        return err_wrap(err, "container `%s`", id);
    enum oci_status st = oci_status_get(dirfd, &rec);
    if (st == OCI_STATUS_STOPPED) {
        oci_record_clear(&rec);
        return err_set(err, ESRCH, "container `%s` is not running", id);
    }
    if (all && rec.cgroup[0]) {
        struct oci_cgroup *cg = NULL;
        r = oci_cgroup_open(rec.cgroup, &cg, err);
        if (r == 0) {
            r = oci_cgroup_kill(cg, sig, err);
            oci_cgroup_free(cg);
        }
    } else {
        r = signal_init(&rec, sig, err);
    }
    oci_record_clear(&rec);
    return r;
}

static void run_poststop(int dirfd, const struct oci_record *rec)
{
    _cleanup_free_ char *raw = NULL;
    size_t len;
    if (read_file_at(dirfd, "config.json", OCI_CONFIG_MAX, &raw, &len) < 0 ||
        !strstr(raw, "\"poststop\""))
        return;
    struct err err = {0};
    _cleanup_(oci_spec_freep) struct oci_spec *spec = NULL;
    if (oci_spec_parse(raw, len, rec->bundle, &spec, &err) < 0)
        return;
    _cleanup_free_ char *st =
        state_json_for_hooks(rec->id, "stopped", 0, rec->bundle, spec->annotations);
    if (oci_hooks_run(spec->hooks.list[OCI_HOOK_POSTSTOP], spec->hooks.n[OCI_HOOK_POSTSTOP], st,
                      "poststop", &err) < 0)
        log_warn("container `%s`: %s", rec->id, err_str(&err));
}

int oci_container_delete(const char *root, const char *id, bool force, struct err *err)
{
    root = root_or_default(root);
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root, id, &dirfd, err);
    if (r < 0)
        return r;
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return err_set(err, errno, "--root `%s`", root);
    struct oci_record rec;
    if (oci_record_read(dirfd, &rec, NULL) < 0) {
        /* A create that died half-way: nothing runs, remove the rest. */
        r = rm_rf_at(rootfd, id);
        return r < 0 ? err_set(err, r, "remove `%s/%s`", root, id) : 0;
    }
    enum oci_status st = oci_status_get(dirfd, &rec);
    if ((st == OCI_STATUS_RUNNING || st == OCI_STATUS_PAUSED || st == OCI_STATUS_CREATING) &&
        !force) {
        oci_record_clear(&rec);
        return err_set(err, EBUSY, "container `%s` is %s: stop it first or use --force", id,
                       oci_status_name(st));
    }
    struct oci_cgroup *cg = NULL;
    if (rec.cgroup[0] && oci_cgroup_open(rec.cgroup, &cg, NULL) < 0)
        cg = NULL;
    if (st != OCI_STATUS_STOPPED) {
        if (cg)
            oci_cgroup_kill(cg, SIGKILL, NULL);
        signal_init(&rec, SIGKILL, NULL);
    } else if (cg) {
        /* Leftovers of a container without its own pid namespace. */
        oci_cgroup_kill(cg, SIGKILL, NULL);
    }
    /* The monitor records the exit and goes; wait for it so that the
     * cgroup is empty and exit.json is complete. */
    log_debug("delete `%s`: waiting for the monitor", id);
    if (wait_gone(rec.monitor, rec.monitor_start, 10000) < 0)
        log_warn("container `%s`: the monitor (pid %d) did not exit", id, (int)rec.monitor);
    if (cg) {
        /* waits on the cgroup's cgroup.events until it is empty (bounded) */
        struct err cgerr = {0};
        if (oci_cgroup_destroy(cg, &cgerr) < 0)
            log_warn("container `%s`: %s", id, err_str(&cgerr));
        oci_cgroup_free(cg);
    }
    run_poststop(dirfd, &rec);
    oci_record_clear(&rec);
    r = rm_rf_at(rootfd, id);
    if (r < 0)
        return err_set(err, r, "remove `%s/%s`", root, id);
    log_debug("delete `%s`: done", id);
    return 0;
}

int oci_container_list(const char *root, char ***ret, size_t *ret_n, struct err *err)
{
    *ret = NULL;
    *ret_n = 0;
    DIR *d = opendir(root_or_default(root));
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errno, "--root `%s`", root_or_default(root));
    }
    char **v = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || oci_id_validate(de->d_name, NULL) < 0)
            continue;
        char **nv = realloc(v, (n + 2) * sizeof(char *));
        if (!nv)
            break;
        v = nv;
        v[n++] = strdup(de->d_name);
        v[n] = NULL;
    }
    closedir(d);
    *ret = v;
    *ret_n = n;
    return 0;
}

static int open_cgroup(const char *root, const char *id, struct oci_cgroup **ret,
                       struct oci_record *rec, struct err *err)
{
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(root_or_default(root), id, &dirfd, err);
    if (r < 0)
        return r;
    if ((r = oci_record_read(dirfd, rec, err)) < 0)
        return err_wrap(err, "container `%s`", id);
    enum oci_status st = oci_status_get(dirfd, rec);
    if (st == OCI_STATUS_STOPPED) {
        oci_record_clear(rec);
        return err_set(err, ESRCH, "container `%s` is not running", id);
    }
    if (!rec->cgroup[0]) {
        oci_record_clear(rec);
        return err_set(err, ENOENT, "container `%s` has no cgroup", id);
    }
    r = oci_cgroup_open(rec->cgroup, ret, err);
    if (r < 0)
        oci_record_clear(rec);
    return r;
}

int oci_container_pause(const char *root, const char *id, bool pause, struct err *err)
{
    struct oci_cgroup *cg = NULL;
    struct oci_record rec;
    int r = open_cgroup(root, id, &cg, &rec, err);
    if (r < 0)
        return r;
    r = oci_cgroup_freeze(cg, pause, err);
    oci_cgroup_free(cg);
    oci_record_clear(&rec);
    return r < 0 ? err_wrap(err, "container `%s`", id) : 0;
}

int oci_container_update(const char *root, const char *id, const char *resources_json,
                         struct err *err)
{
    json_error_t jerr;
    json_t *res = json_loads(resources_json, 0, &jerr);
    if (!res || !json_is_object(res)) {
        json_decref(res);
        return err_set(err, EINVAL, "resources: line %d: %s", jerr.line,
                       res ? "expected an object" : jerr.text);
    }
    struct oci_cgroup *cg = NULL;
    struct oci_record rec;
    int r = open_cgroup(root, id, &cg, &rec, err);
    if (r == 0) {
        r = oci_cgroup_update(cg, res, err);
        oci_cgroup_free(cg);
        oci_record_clear(&rec);
    }
    json_decref(res);
    return r < 0 ? err_wrap(err, "update container `%s`", id) : 0;
}

int oci_container_pids(const char *root, const char *id, pid_t **ret, size_t *ret_n,
                       struct err *err)
{
    struct oci_cgroup *cg = NULL;
    struct oci_record rec;
    int r = open_cgroup(root, id, &cg, &rec, err);
    if (r < 0)
        return r;
    r = oci_cgroup_pids(cg, ret, ret_n, err);
    oci_cgroup_free(cg);
    oci_record_clear(&rec);
    return r;
}
