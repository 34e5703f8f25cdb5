/* oci/exec: a new process in a running container.
 *
 * The process spec starts from the container's own (config.json copy in
 * the state dir) with args, env, cwd, user and tty overridden, or is a
 * whole `process` object. A child (cloned into the container's cgroup)
 * joins every namespace of the init at once through its pidfd (setns with
 * a pidfd is atomic), forks once more so that the grandchild is inside the
 * pid namespace, and that one runs process.c's sequence: same capabilities,
 * no_new_privs, rlimits, seccomp as the spec asks. Failures before execve
 * come back over a close-on-exec socket; EOF there means exec happened. */
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "oci/cgroup.h"
#include "oci/internal.h"

static int parse_user(const char *s, struct oci_process *p, struct err *err)
{
    char *end;
    unsigned long uid = strtoul(s, &end, 10);
    if (end == s || (*end && *end != ':'))
        return err_set(err, EINVAL, "--user `%s`: expected uid[:gid]", s);
    p->uid = (uid_t)uid;
    if (*end == ':') {
        const char *g = end + 1;
        unsigned long gid = strtoul(g, &end, 10);
        if (end == g || *end)
            return err_set(err, EINVAL, "--user `%s`: expected uid[:gid]", s);
        p->gid = (gid_t)gid;
    }
    return 0;
}

static char **strv_dup_plus(char *const *a, char *const *b)
{
    size_t n = 0, m = 0;
    while (a && a[n])
        n++;
    while (b && b[m])
        m++;
    char **v = calloc(n + m + 1, sizeof(char *));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = strdup(a[i]);
    for (size_t i = 0; i < m; i++)
        v[n + i] = strdup(b[i]);
    return v;
}

static int build_process(const struct oci_exec_opts *o, struct oci_spec *spec,
                         struct oci_process *p, struct err *err)
{
    int r;
    if (o->process_json) {
        json_error_t jerr;
        json_t *j = json_loads(o->process_json, 0, &jerr);
        if (!j)
            return err_set(err, EINVAL, "--process: line %d: %s", jerr.line, jerr.text);
        r = oci_process_parse(j, "process", p, err);
        json_decref(j);
        if (r < 0)
            return err_wrap(err, "--process");
    } else {
        /* The container's process with new args. */
        *p = spec->process;
        memset(&spec->process, 0, sizeof(spec->process));
        for (char **a = p->args; a && *a; a++)
            free(*a);
        free(p->args);
        p->args = strv_dup_plus(o->args, NULL);
        if (!p->args)
            return err_set(err, ENOMEM, "args");
        p->terminal = false;
    }
    if (o->tty)
        p->terminal = true;
    if (o->cwd) {
        free(p->cwd);
        p->cwd = strdup(o->cwd);
    }
    if (o->env) {
        char **e = strv_dup_plus(p->env, o->env);
        for (char **a = p->env; a && *a; a++)
            free(*a);
        free(p->env);
        p->env = e;
    }
    if (o->user && (r = parse_user(o->user, p, err)) < 0)
        return r;
    if (p->terminal && !o->console_socket && o->console_fd < 0)
        return err_set(err, EINVAL, "`process.terminal`: true needs --console-socket");
    oci_process_clamp_oom(p);
    return 0;
}

static int connect_console(const char *path, struct err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return err_set(err, ENAMETOOLONG, "--console-socket `%s`", path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return err_set(err, e, "--console-socket `%s`", path);
    }
    return fd;
}

/* What the child needs: fds are the parent's, valid in the child. */
struct exec_child {
    const struct oci_process *p;
    const struct oci_spec *spec;
    int pidfd, nsflags, sync, console, preserve;
    int cgroup_fd;    /* the cgroup to clone the process into, or -1 (we are in it) */
    const int *stdio; /* or NULL */
    bool in_process;
};

static _Noreturn void exec_child(const struct exec_child *c)
{
    struct err err = {0};
    int console = c->console, sync = c->sync;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (c->in_process) {
        /* A copy of a threaded daemon: default signal handling, none of
         * its fds but ours; stdio moved to 0-2 (dup2 clears CLOEXEC). */
        sigset_t none;
        sigemptyset(&none);
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                signal(sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int keep[] = {c->pidfd, sync, console, c->cgroup_fd};
        if (c->stdio) {
            /* out of the way of 0-2 first, then into place */
            int moved[3];
            for (int i = 0; i < 3; i++)
                moved[i] = c->stdio[i] >= 0 ? fcntl(c->stdio[i], F_DUPFD_CLOEXEC, 16)
                                            : open("/dev/null", O_RDWR | O_CLOEXEC);
            for (int i = 0; i < 3; i++)
                if (moved[i] >= 0 && dup2(moved[i], i) < 0) {
                    err_set(&err, errno, "dup2");
                    goto fail;
                }
        }
        fds_close_all_but(keep, ARRAY_SIZE(keep));
    }
    if (setns(c->pidfd, c->nsflags) < 0) {
        err_set(&err, errno, "join the container's namespaces");
        goto fail;
    }
    close(c->pidfd);
    /* setns(CLONE_NEWPID) applies to children: one more fork, which
     * becomes the process; we relay its exit status. In a daemon's relay
     * the process becomes the daemon's own child instead (CLONE_PARENT),
     * and the relay ends at once: nothing waits in a copy of the daemon
     * (whose pages it would keep as the daemon changes them). */
    pid_t pid = -1;
    if (c->in_process) {
        struct clone_args ca = {.flags = CLONE_PARENT};
        if (c->cgroup_fd >= 0) {
            ca.flags |= CLONE_INTO_CGROUP;
            ca.cgroup = (uint64_t)c->cgroup_fd;
        }
        pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid < 0 && (ca.flags & CLONE_INTO_CGROUP)) {
            ca.flags = CLONE_PARENT;
            pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        }
    } else {
        pid = fork();
    }
    if (pid < 0) {
        err_set(&err, errno, "fork");
        goto fail;
    }
    if (pid > 0) {
        oci_sync_send(sync, OCI_SYNC_PID, pid, NULL);
        if (c->in_process)
            _exit(0);
        close(sync);
        if (console >= 0)
            close(console);
        int status;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                _exit(255);
        if (WIFSIGNALED(status))
            _exit(128 + WTERMSIG(status));
        _exit(WEXITSTATUS(status));
    }
    char *exe = NULL;
    int slave = -1;
    const struct oci_process *p = c->p;
    if (oci_process_oom_score_adj(p, &err) < 0 || oci_process_rlimits(p, &err) < 0)
        goto fail;
    if (p->terminal && oci_terminal_setup(p, console, &slave, &err) < 0)
        goto fail;
    if (console >= 0)
        close(console);
    if (oci_process_cwd(p, &err) < 0 || oci_process_find(p, &exe, &err) < 0)
        goto fail;
    if (setsid() < 0) {
        err_set(&err, errno, "setsid");
        goto fail;
    }
    oci_process_exec(p, exe, c->spec->seccomp, c->preserve, slave, &err);
fail:
    oci_sync_send(sync, OCI_SYNC_ERROR, err.code, err.msg);
    _exit(255);
}

int oci_exec(const struct oci_exec_opts *o, int *ret_status, struct err *err)
{
    if (o->pid_fd >= 0)
        fcntl(o->pid_fd, F_SETFD, FD_CLOEXEC); /* ours, not the container's */
    /* A daemon's console fd is ours from here, whatever happens. */
    _cleanup_close_ int console_owned = o->in_process ? o->console_fd : -1;
    _cleanup_close_ int dirfd = -1;
    int r = oci_state_dir_open(o->root ? o->root : OCI_ROOT_DEFAULT, o->id, &dirfd, err);
    if (r < 0)
        return r;
    struct oci_record rec;
    if ((r = oci_record_read(dirfd, &rec, err)) < 0)
        return err_wrap(err, "container `%s`", o->id);
    enum oci_status st = oci_status_get(dirfd, &rec);
    if (st != OCI_STATUS_RUNNING && st != OCI_STATUS_CREATED) {
        oci_record_clear(&rec);
        return err_set(err, EINVAL, "container `%s` is %s", o->id, oci_status_name(st));
    }
    _cleanup_free_ char *raw = NULL;
    size_t len;
    _cleanup_(oci_spec_freep) struct oci_spec *spec = NULL;
    if ((r = read_file_at(dirfd, "config.json", OCI_CONFIG_MAX, &raw, &len)) < 0) {
        oci_record_clear(&rec);
        return err_set(err, r, "container `%s`: read config.json", o->id);
    }
    r = oci_spec_parse(raw, len, rec.bundle, &spec, err);
    if (r < 0) {
        oci_record_clear(&rec);
        return err_wrap(err, "container `%s`", o->id);
    }
    struct oci_process p = {0};
    _cleanup_close_ int pidfd = -1, console = -1;
    if ((r = build_process(o, spec, &p, err)) < 0)
        goto out;

    pidfd = oci_pidfd_open(rec.pid);
    uint64_t start;
    if (pidfd < 0 || oci_proc_start_time(rec.pid, &start, NULL) < 0 || start != rec.pid_start) {
        r = err_set(err, ESRCH, "container `%s` is not running", o->id);
        goto out;
    }
    /* The namespaces the container has that we do not share. */
    int nsflags = 0;
    static const char *const files[OCI_NS_COUNT] = {
        [OCI_NS_USER] = "user",     [OCI_NS_PID] = "pid",   [OCI_NS_NET] = "net",
        [OCI_NS_IPC] = "ipc",       [OCI_NS_UTS] = "uts",   [OCI_NS_MOUNT] = "mnt",
        [OCI_NS_CGROUP] = "cgroup", [OCI_NS_TIME] = "time",
    };
    for (int k = 0; k < OCI_NS_COUNT; k++) {
        char a[64], b[64];
        struct stat sa, sb;
        snprintf(a, sizeof(a), "/proc/%d/ns/%s", (int)rec.pid, files[k]);
        snprintf(b, sizeof(b), "/proc/self/ns/%s", files[k]);
        if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_ino != sb.st_ino)
            nsflags |= oci_ns_clone_flag(k);
    }
    if (p.terminal && o->console_fd >= 0) {
        console = o->in_process ? TAKE_FD(console_owned) : o->console_fd;
        fcntl(console, F_SETFD, FD_CLOEXEC);
    } else if (p.terminal && (console = connect_console(o->console_socket, err)) < 0) {
        r = console;
        goto out;
    }
    struct oci_cgroup *cg = NULL;
    if (rec.cgroup[0] && oci_cgroup_open(rec.cgroup, &cg, NULL) < 0)
        cg = NULL;
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        oci_cgroup_free(cg);
        r = err_set(err, errno, "socketpair");
        goto out;
    }
    struct exec_child ec = {.p = &p,
                            .spec = spec,
                            .pidfd = pidfd,
                            .nsflags = nsflags,
                            .sync = sp[1],
                            .console = console,
                            .preserve = o->preserve_fds,
                            .cgroup_fd = -1,
                            .stdio = o->stdio,
                            .in_process = o->in_process};
    pid_t child;
    if (o->in_process) {
        /* glibc's fork keeps malloc usable in the child of a threaded
         * process (the seccomp and capability libraries allocate); that
         * child, single-threaded, clones the process into the cgroup (a
         * write to cgroup.procs would wait for an RCU grace period, up to
         * 40 ms here). */
        if (cg)
            ec.cgroup_fd = oci_cgroup_fd(cg);
        child = fork();
    } else {
        struct clone_args ca = {.exit_signal = SIGCHLD};
        if (cg && oci_cgroup_fd(cg) >= 0) {
            ca.flags |= CLONE_INTO_CGROUP;
            ca.cgroup = (uint64_t)oci_cgroup_fd(cg);
        }
        child = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        if (child < 0 && (ca.flags & CLONE_INTO_CGROUP)) {
            ca.flags = 0;
            child = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        }
    }
    if (child == 0) {
        close(sp[0]);
        if (o->pid_fd >= 0)
            close(o->pid_fd); /* EOF there when we are done with it */
        exec_child(&ec);
    }
    close(sp[1]);
    oci_cgroup_free(cg);
    if (child < 0) {
        close(sp[0]);
        r = err_set(err, errno, "clone");
        goto out;
    }
    if (console >= 0)
        close(TAKE_FD(console));
    pid_t procpid = 0;
    bool failed = false;
    for (;;) {
        /* Until EOF: exec'd, or every end gone after an error (which the
         * process may send before the relay has sent its pid). */
        struct oci_sync_msg m;
        int q = oci_sync_recv(sp[0], &m, -1);
        if (q < 0)
            break;
        if (m.type == OCI_SYNC_PID)
            procpid = m.value;
        if (m.type == OCI_SYNC_ERROR && !failed) {
            failed = true;
            r = err_set(err, m.value ? m.value : EIO, "%s", m.text);
            /* A shell's codes for a command that cannot run. */
            if (ret_status)
                *ret_status = m.value == ENOENT ? 127 : 126;
        }
    }
    close(sp[0]);
    if (failed) {
        waitpid(child, NULL, 0);
        if (o->in_process && procpid > 0)
            waitpid(procpid, NULL, 0); /* ours (CLONE_PARENT) */
        goto out;
    }
    if (o->pid_fd >= 0) {
        if (procpid > 0)
            dprintf(o->pid_fd, "%d", (int)procpid);
        close(o->pid_fd);
    }
    if (o->pid_file && procpid > 0) {
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "%d", (int)procpid);
        if (write_file_atomic(AT_FDCWD, o->pid_file, buf, (size_t)n, 0644) < 0)
            log_warn("exec: --pid-file `%s`: write failed", o->pid_file);
    }
    int status = 0;
    if (o->in_process) {
        /* the relay has ended (or is about to); the process is ours */
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
        if (procpid <= 0) {
            r = err_set(err, EIO, "the relay ended before it started the process");
            goto out;
        }
        if (o->ret_pid)
            *o->ret_pid = procpid;
    }
    if (!o->detach && !o->in_process) {
        /* Forward the common signals while we wait. */
        while (waitpid(child, &status, 0) < 0)
            if (errno != EINTR) {
                r = err_set(err, errno, "wait");
                goto out;
            }
        status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (ret_status)
        *ret_status = status;
    r = 0;
out:
    if (r < 0)
        err_wrap(err, "exec in container `%s`", o->id);
    oci_process_clear(&p);
    oci_record_clear(&rec);
    return r;
}
