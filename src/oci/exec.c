/* oci/exec: a new process in a running container.
 *
 * The process spec starts from the container's own (config.json copy in
 * the state dir) with args, env, cwd, user and tty overridden, or is a
 * whole `process` object. It becomes a recipe (enter/proto.h: ids,
 * capability sets, rlimits, the seccomp filter compiled to BPF here, args,
 * env) for kinglet-enter, a small static program (src/enter) that we clone
 * straight into the container's cgroup (CLONE_INTO_CGROUP: never anywhere
 * else; a clone that cannot go there fails the exec) and execute from a
 * sealed memfd with an empty environment. It joins every namespace of the
 * init at once through its pidfd (setns with a pidfd is atomic; the cgroup
 * namespace after the cgroup, which cgroup2's nsdelegate requires) and
 * clones the command as our own child (CLONE_PARENT), which then runs
 * process.c's steps in process.c's order. So no copy of kinglet, of its
 * memory or of its environment ever enters a container's PID namespace
 * (CVE-2016-9962: a container with CAP_SYS_PTRACE could read it). Failures
 * before execve come back over a close-on-exec socket as {errno, message};
 * EOF there means exec happened. The daemon (in_process) and `kinglet oci
 * exec` take the same path up to the pid kinglet-enter sends. `kinglet oci
 * exec`, a process of its own, then waits for the execve and the command.
 * The daemon's worker does not: a container granted CAP_SYS_PTRACE (or,
 * without Yama, any process of its uid once the command has exec'd) can
 * stop the command before its execve, or hold its zombie, for good, and
 * would hold the worker with it. The command's pidfd and the socket go to
 * the caller, which watches the pidfd on its loop, where its timeout and
 * cancel apply, and reads the socket once the command has ended
 * (oci_exec_result). */
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stddef.h>
#include <sys/capability.h>
#include <sys/socket.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "enter/enter.h"
#include "oci/cgroup.h"
#include "oci/internal.h"
#include "oci/seccomp.h"

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
        /* as runc: an exec runs under the container's profile unless it
         * names its own */
        if (!p->apparmor && spec->process.apparmor &&
            !(p->apparmor = strdup(spec->process.apparmor)))
            return err_set(err, ENOMEM, "--process");
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

static void cgroup_freep(struct oci_cgroup **cg) { oci_cgroup_free(*cg); }

/* ---- the recipe (enter/proto.h) ---- */

static int recipe_strings(struct buf *b, char *const *v, uint32_t *ret_n)
{
    uint32_t n = 0;
    for (; v && v[n]; n++)
        if (buf_append(b, v[n], strlen(v[n]) + 1) < 0)
            return -ENOMEM;
    *ret_n = n;
    return 0;
}

int oci_exec_recipe_build(const struct oci_process *p, json_t *seccomp, int nsflags, int preserve,
                          struct enter_recipe *h, struct buf *body, struct err *err)
{
    *h = (struct enter_recipe){.magic = ENTER_MAGIC,
                               .nsflags = nsflags,
                               .uid = p->uid,
                               .gid = p->gid,
                               .n_gids = (uint32_t)p->n_gids,
                               .n_rlimits = (uint32_t)p->n_rlimits,
                               .umask = p->umask,
                               .oom_score_adj = p->oom_score_adj,
                               .cap_last = (uint32_t)cap_max_bits() - 1,
                               .preserve_fds = (uint32_t)(preserve > 0 ? preserve : 0),
                               .cons_height = p->cons_height,
                               .cons_width = p->cons_width};
    h->flags = (p->terminal ? ENTER_TERMINAL : 0) | (p->has_caps ? ENTER_HAS_CAPS : 0) |
               (p->no_new_privileges ? ENTER_NNP : 0) | (p->has_oom_score_adj ? ENTER_HAS_OOM : 0) |
               (p->has_umask ? ENTER_HAS_UMASK : 0);
    _Static_assert(
        (int)OCI_CAP_SETS == ENTER_CAP_SETS && (int)OCI_CAP_BOUNDING == ENTER_CAP_BOUNDING &&
            (int)OCI_CAP_EFFECTIVE == ENTER_CAP_EFFECTIVE &&
            (int)OCI_CAP_INHERITABLE == ENTER_CAP_INHERITABLE &&
            (int)OCI_CAP_PERMITTED == ENTER_CAP_PERMITTED &&
            (int)OCI_CAP_AMBIENT == ENTER_CAP_AMBIENT && OCI_SYNC_ERROR == ENTER_MSG_ERROR &&
            OCI_SYNC_PID == ENTER_MSG_PID && ERR_MSG_MAX == ENTER_TEXT_MAX,
        "the recipe and the messages of enter/proto.h");
    memcpy(h->caps, p->caps, sizeof(h->caps));
    for (size_t i = 0; i < p->n_rlimits; i++) {
        struct enter_rlimit rl = {.resource = p->rlimits[i].resource,
                                  .soft = p->rlimits[i].soft,
                                  .hard = p->rlimits[i].hard};
        if (buf_append(body, &rl, sizeof(rl)) < 0)
            return err_set(err, ENOMEM, "the exec recipe");
    }
    if (seccomp && !json_is_null(seccomp)) {
        size_t before = body->len;
        int r = oci_seccomp_export(seccomp, body, &h->seccomp_flags, err);
        if (r < 0)
            return err_wrap(err, "`linux.seccomp`");
        h->n_filter = (uint32_t)((body->len - before) / 8);
        h->flags |= ENTER_SECCOMP;
    }
    for (size_t i = 0; i < p->n_gids; i++) {
        uint32_t g = p->gids[i];
        if (buf_append(body, &g, sizeof(g)) < 0)
            return err_set(err, ENOMEM, "the exec recipe");
    }
    const char *cwd = p->cwd ? p->cwd : "/";
    if (buf_append(body, cwd, strlen(cwd) + 1) < 0)
        return err_set(err, ENOMEM, "the exec recipe");
    if (p->apparmor && *p->apparmor) {
        h->flags |= ENTER_APPARMOR;
        if (buf_append(body, p->apparmor, strlen(p->apparmor) + 1) < 0)
            return err_set(err, ENOMEM, "the exec recipe");
    }
    if (recipe_strings(body, p->args, &h->n_args) < 0 ||
        recipe_strings(body, p->env, &h->n_env) < 0)
        return err_set(err, ENOMEM, "the exec recipe");
    if (body->len > ENTER_BODY_MAX || h->n_args > ENTER_LIST_MAX || h->n_env > ENTER_LIST_MAX ||
        h->n_gids > ENTER_LIST_MAX || h->n_rlimits > ENTER_LIST_MAX)
        return err_set(err, E2BIG, "the process (args, env) is too large");
    h->size = (uint32_t)body->len;
    return 0;
}

static int recipe_send(int sock, const struct enter_recipe *h, const struct buf *body, int pidfd,
                       int console)
{
    int fds[2] = {pidfd, console};
    size_t nfds = console >= 0 ? 2 : 1;
    struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof(*h)};
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = u.buf,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    ssize_t n;
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (size_t off = 0; off < body->len;) {
        size_t want = body->len - off < ENTER_PACKET_MAX ? body->len - off : ENTER_PACKET_MAX;
        n = send(sock, body->data + off, want, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        off += (size_t)n;
    }
    return 0;
}

/* ---- the helper's process ---- */

/* What the child of clone3 needs, prepared before it: it runs in a copy of
 * a threaded process, so it does async-signal-safe work only. */
struct helper_spawn {
    int stdio[3]; /* moved to 0-2, or -1: kept as they are */
    int sync, exe;
    int preserve; /* fds 3 .. 3+preserve-1 cross into the command */
    char *argv[3];
    char fdarg[16];
};

static _Noreturn void helper_child(struct helper_spawn *s)
{
    int base = 3 + s->preserve; /* the socket there, the program after it */
    int src[5] = {s->stdio[0], s->stdio[1], s->stdio[2], s->sync, s->exe}, tmp[5];
    for (int i = 0; i < 5; i++)
        tmp[i] = src[i] < 0 ? -1 : fcntl(src[i], F_DUPFD_CLOEXEC, base + 2);
    for (int i = 0; i < 3; i++)
        if (tmp[i] >= 0)
            dup2(tmp[i], i); /* clears close-on-exec */
    if (tmp[3] < 0 || tmp[4] < 0 || dup2(tmp[3], base) < 0 || dup2(tmp[4], base + 1) < 0)
        _exit(127);
    fcntl(base + 1, F_SETFD, FD_CLOEXEC);
    for (int fd = 3; fd < base; fd++)
        fcntl(fd, F_SETFD, 0);
    syscall(SYS_close_range, base + 2, ~0U, 0);
    char *envp[] = {NULL};
    syscall(SYS_execveat, base + 1, "", s->argv, envp, AT_EMPTY_PATH);
    struct oci_sync_msg m = {.type = OCI_SYNC_ERROR, .value = errno};
    static const char what[] = "run the exec helper";
    memcpy(m.text, what, sizeof(what));
    send(base, &m, offsetof(struct oci_sync_msg, text) + sizeof(what), MSG_NOSIGNAL);
    _exit(127);
}

/* Starts the helper in the cgroup (cgroup_fd, or ours with -1) with sync
 * as its socket; returns its pid. Never outside the cgroup: a clone that
 * cannot go into it fails. */
static pid_t helper_start(const int stdio[3], int preserve, int sync, int cgroup_fd,
                          const char *cgroup_path, struct err *err)
{
    /* A copy of some 50 kB per exec (about 20 us), as each monitor has:
     * nothing of the daemon's stays open for it. */
    _cleanup_close_ int exe =
        memfd_sealed("kinglet-enter", enter_program, (size_t)(enter_program_end - enter_program));
    if (exe < 0)
        return err_set(err, -exe, "copy the exec helper into a sealed memfd");
    struct helper_spawn s = {.stdio = {stdio[0], stdio[1], stdio[2]},
                             .sync = sync,
                             .exe = exe,
                             .preserve = preserve > 0 ? preserve : 0};
    snprintf(s.fdarg, sizeof(s.fdarg), "%d", 3 + s.preserve);
    s.argv[0] = "kinglet-enter";
    s.argv[1] = s.fdarg;
    s.argv[2] = NULL;
    struct clone_args ca = {.exit_signal = SIGCHLD};
    if (cgroup_fd >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)cgroup_fd;
    }
    /* No handler of ours may run in the child: every signal blocked until
     * the helper, a new program, resets them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0)
        helper_child(&s);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid > 0)
        return pid;
    if (cgroup_fd < 0)
        return err_set(err, e, "clone");
    if (e == EAGAIN)
        return err_set(err, e,
                       "start a process in the container's cgroup `%s`: it is at its pids.max "
                       "(or the node at its process limit)",
                       cgroup_path);
    return err_set(err, e, "start a process in the container's cgroup `%s`", cgroup_path);
}

/* ---- waiting for the command ---- */

/* What comes back over the socket: kinglet-enter's error or the command's
 * pid, then the command's error (before its execve) or EOF (at it). */
struct exec_wait {
    pid_t helper; /* kinglet-enter: its messages alone name the command */
    pid_t pid;    /* the command, once named */
    int status;   /* 127 (missing) or 126 once an error came, r its return */
    int r;
};

/* Takes one message: 1 (also one too short, skipped), 0 at EOF, -errno
 * (-EAGAIN on a non-blocking socket that holds none yet). The first error
 * sets err. */
static int exec_wait_take(int sync, struct exec_wait *w, struct err *err)
{
    struct oci_sync_msg m;
    pid_t from;
    int q = oci_sync_recv_from(sync, &m, NULL, &from);
    if (q == -EPROTO)
        return 1; /* short: the command's, made to send it; the pid still comes */
    if (q < 0)
        return q == -EPIPE ? 0 : q;
    /* the pid from kinglet-enter only, once (not from the command) */
    if (m.type == OCI_SYNC_PID && from == w->helper && w->pid == 0)
        w->pid = m.value;
    if (m.type == OCI_SYNC_ERROR && !w->status) {
        w->r = err_set(err, m.value ? m.value : EIO, "%s", m.text);
        /* A shell's codes for a command that cannot run. */
        w->status = m.value == ENOENT ? 127 : 126;
    }
    return 1;
}

static void pid_publish(const struct oci_exec_opts *o, pid_t pid)
{
    if (o->pid_fd >= 0) {
        dprintf(o->pid_fd, "%d", (int)pid);
        close(o->pid_fd);
    }
    if (o->pid_file) {
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "%d", (int)pid);
        if (write_file_atomic(AT_FDCWD, o->pid_file, buf, (size_t)n, 0644) < 0)
            log_warn("exec: --pid-file `%s`: write failed", o->pid_file);
    }
}

/* A daemon's command is the caller's from here, before its execve: its
 * pidfd, and the socket the rest of its start comes over
 * (oci_exec_result). An error that came before its pid fails the exec, the
 * command still to be reaped. */
static int exec_hand_over(const struct oci_exec_opts *o, struct exec_wait *w, int *sync,
                          int *ret_status, struct err *err)
{
    int pidfd = pidfd_open(w->pid, 0); /* our child (CLONE_PARENT), not reaped */
    if (pidfd < 0) {
        /* cannot happen for our own child; reap it rather than leak it */
        int e = errno;
        kill(w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
        return err_set(err, e, "pidfd of the command");
    }
    pid_publish(o, w->pid);
    *o->ret_pidfd = pidfd;
    if (w->status) {
        if (ret_status)
            *ret_status = w->status;
        return w->r;
    }
    *o->ret_sync = TAKE_FD(*sync);
    if (ret_status)
        *ret_status = 0;
    return 0;
}

/* `kinglet oci exec`, its own process: waits for the execve, and without
 * detach for the command's end. */
static int exec_wait_cli(const struct oci_exec_opts *o, struct exec_wait *w, int sync,
                         int *ret_status, struct err *err)
{
    while (exec_wait_take(sync, w, err) > 0)
        ; /* until EOF: exec'd, or every end gone after an error */
    if (w->status) {
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
            ; /* ours (CLONE_PARENT) */
        if (ret_status)
            *ret_status = w->status;
        return w->r;
    }
    pid_publish(o, w->pid);
    int status = 0;
    if (!o->detach) {
        /* The command is our child (CLONE_PARENT from the helper). */
        while (waitpid(w->pid, &status, 0) < 0)
            if (errno != EINTR)
                return err_set(err, errno, "wait");
        status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (ret_status)
        *ret_status = status;
    return 0;
}

int oci_exec_result(int sync, const char *id, struct err *err)
{
    /* Only the command and what it handed its socket to can still send:
     * a few messages are read, never a stream. */
    int fl = fcntl(sync, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(sync, F_SETFL, fl | O_NONBLOCK);
    struct exec_wait w = {.helper = -1};
    for (int i = 0; i < 16 && !w.status && exec_wait_take(sync, &w, err) > 0; i++)
        ;
    if (w.status)
        err_wrap(err, "exec in container `%s`", id);
    return w.status;
}

int oci_exec(const struct oci_exec_opts *o, int *ret_status, struct err *err)
{
    if (o->pid_fd >= 0)
        fcntl(o->pid_fd, F_SETFD, FD_CLOEXEC); /* ours, not the container's */
    if (o->in_process)
        *o->ret_pidfd = *o->ret_sync = -1;
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
    _cleanup_close_ int pidfd = -1, console = -1, devnull = -1, sync = -1;
    _cleanup_(buf_free) struct buf body = {0};
    _cleanup_(cgroup_freep) struct oci_cgroup *cg = NULL;
    if ((r = build_process(o, spec, &p, err)) < 0)
        goto out;

    pidfd = pidfd_open_started(rec.pid, rec.pid_start);
    if (pidfd < 0) {
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
    /* The command runs in the container's cgroup or not at all. */
    if (rec.cgroup[0] && (r = oci_cgroup_open(rec.cgroup, &cg, err)) < 0) {
        err_wrap(err, "the container's cgroup");
        goto out;
    }
    struct enter_recipe h;
    if ((r = oci_exec_recipe_build(&p, spec->seccomp, nsflags, o->preserve_fds, &h, &body, err)) <
        0)
        goto out;
    /* A daemon's command gets the stdio it is given, /dev/null for the
     * rest, never the daemon's own. */
    int stdio[3] = {-1, -1, -1};
    if (o->in_process) {
        for (int i = 0; i < 3; i++) {
            stdio[i] = o->stdio ? o->stdio[i] : -1;
            if (stdio[i] < 0 && devnull < 0 &&
                (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
                r = err_set(err, errno, "open /dev/null");
                goto out;
            }
            if (stdio[i] < 0)
                stdio[i] = devnull;
        }
    }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        r = err_set(err, errno, "socketpair");
        goto out;
    }
    sync = sp[0];
    int on = 1;
    if (setsockopt(sync, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) < 0) {
        r = err_set(err, errno, "SO_PASSCRED");
        close(sp[1]);
        goto out;
    }
    pid_t helper = helper_start(stdio, o->preserve_fds, sp[1], cg ? oci_cgroup_fd(cg) : -1,
                                cg ? oci_cgroup_path(cg) : NULL, err);
    close(sp[1]);
    if (helper < 0) {
        r = helper;
        goto out;
    }
    /* A helper that ends early leaves its error on the socket: read it
     * whatever the send says. */
    int sent = recipe_send(sync, &h, &body, pidfd, console);
    if (console >= 0)
        close(TAKE_FD(console));
    struct exec_wait w = {.helper = helper};
    /* Until kinglet-enter names the command (or EOF: it failed), never
     * until the command's execve, which a process of the container that
     * may trace it can put off for good. */
    while (!w.pid && exec_wait_take(sync, &w, err) > 0)
        ;
    int hstatus = 0;
    while (waitpid(helper, &hstatus, 0) < 0 && errno == EINTR)
        ; /* it exits once it has named the command */
    if (!w.pid && w.status) {
        r = w.r;
        if (ret_status)
            *ret_status = w.status;
        goto out;
    }
    if (!w.pid) {
        r = err_set(err, sent < 0 ? -sent : EIO,
                    "the exec helper ended (status %#x) before it started the command", hstatus);
        goto out;
    }
    if (o->in_process)
        r = exec_hand_over(o, &w, &sync, ret_status, err);
    else
        r = exec_wait_cli(o, &w, sync, ret_status, err);
out:
    if (r < 0)
        err_wrap(err, "exec in container `%s`", o->id);
    oci_process_clear(&p);
    oci_record_clear(&rec);
    return r;
}
