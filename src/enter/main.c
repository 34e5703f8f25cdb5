/* kinglet-enter: puts an exec'd command into a running container, a
 * program of its own.
 *
 * Why a program: the process that joins a container's PID namespace can be
 * seen by the container before its execve, and one granted CAP_SYS_PTRACE
 * can read its memory and environment or attach to it. A copy of kinglet
 * there (a fork of the daemon) would hold the daemon's memory (credentials
 * of registries and proxies, every pod's state); this program holds only
 * the recipe of the command, which is the container's own. It is built
 * static against musl, embedded in kinglet and executed from a sealed memfd
 * (src/oci/exec.c) with an empty environment, so it maps no file of the
 * host and no write can reach its binary through /proc/PID/exe.
 *
 * kinglet clones it straight into the container's cgroup (CLONE_INTO_CGROUP)
 * before it joins any namespace, so that the command is in the cgroup even
 * where cgroup2 is mounted with nsdelegate (a process inside a cgroup
 * namespace cannot move to a cgroup outside it). It then, in this order
 * (see enter/proto.h for the messages):
 *  1. resets signals, makes itself non-dumpable, reads the recipe, writes
 *     the oom score and asks for the AppArmor profile at the command's
 *     execve (through the daemon's /proc, before its mounts go);
 *  2. joins every namespace of the container's init at once (setns through
 *     its pidfd);
 *  3. takes every step that needs privileges, in src/oci/process.c's
 *     order: rlimits, terminal, cwd, fds (close-on-exec), seccomp (early
 *     without no_new_privs), bounding set, groups and ids, capabilities,
 *     umask, no_new_privs, seccomp (late with no_new_privs). This program
 *     is outside the container's PID namespace (setns applies it to
 *     children only), so no container process can trace it, not even one
 *     granted CAP_SYS_PTRACE (which non-dumpable does not stop): the
 *     command is never seen holding more than the container may, nor
 *     without its seccomp filter;
 *  4. clones the command with CLONE_PARENT (kinglet's child, which kinglet
 *     watches by pidfd), says its pid and exits;
 *  5. the command, born with the container's credentials and filter:
 *     PATH lookup, setsid, terminal, execve.
 * Any failure is sent as {errno, message} and ends the process (255). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include "enter/proto.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT           47
#define PR_CAP_AMBIENT_RAISE     2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

_Static_assert(sizeof(struct sock_filter) == ENTER_FILTER_INSN, "a BPF instruction");

static int sync_fd = -1;

static _Noreturn void fail(int code, const char *fmt, ...)
{
    struct enter_msg m = {.type = ENTER_MSG_ERROR, .value = code ? code : EIO};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof(m.text), fmt, ap);
    va_end(ap);
    size_t len = offsetof(struct enter_msg, text) + strlen(m.text) + 1;
    while (send(sync_fd, &m, len, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
    _exit(255);
}

/* ---- the recipe ---- */

struct recipe {
    struct enter_recipe h;
    int pidfd, console;
    const uint32_t *gids;
    const struct enter_rlimit *rlimits;
    const struct sock_filter *filter;
    const char *cwd, *apparmor;
    char **args, **env;
};

static void recv_header(struct recipe *r)
{
    int fds[2] = {-1, -1};
    struct iovec iov = {.iov_base = &r->h, .iov_len = sizeof(r->h)};
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sync_fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(r->h) || r->h.magic != ENTER_MAGIC || (msg.msg_flags & MSG_CTRUNC))
        fail(EPROTO, "the exec helper got no recipe");
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(sizeof(int)))
        fail(EPROTO, "the exec helper got no pidfd");
    size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
    r->pidfd = fds[0];
    r->console = nfds > 1 ? fds[1] : -1;
}

static void read_recipe(struct recipe *r)
{
    recv_header(r);
    const struct enter_recipe *h = &r->h;
    if (h->size > ENTER_BODY_MAX)
        fail(EPROTO, "the exec helper's recipe is out of bounds");
    char *body = malloc(h->size + 1);
    if (!body)
        fail(ENOMEM, "the exec helper's recipe");
    for (uint32_t off = 0; off < h->size;) {
        uint32_t want = h->size - off < ENTER_PACKET_MAX ? h->size - off : ENTER_PACKET_MAX;
        ssize_t n = recv(sync_fd, body + off, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail(n < 0 ? errno : EPIPE, "read the exec helper's recipe");
        off += (uint32_t)n;
    }
    struct enter_parsed p;
    int e = enter_recipe_parse(h, body, &p);
    if (e < 0)
        fail(-e, "the exec helper's recipe is malformed");
    r->rlimits = p.rlimits;
    r->filter = p.filter;
    r->gids = p.gids;
    r->cwd = p.cwd;
    r->apparmor = p.apparmor;
    r->args = p.args;
    r->env = p.env;
}

/* openat2, retried while the kernel says EAGAIN: a rename or mount
 * anywhere raced a ".." of a RESOLVE_IN_ROOT or RESOLVE_BENEATH lookup
 * (as base's openat2_retry, which this program does not link). */
static int openat2_retry(int dirfd, const char *path, const struct open_how *how)
{
    for (int i = 1;; i++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
        if (fd >= 0 || errno != EAGAIN || i == 64)
            return fd;
    }
}

/* ---- the command's steps (src/oci/process.c's order) ---- */

/* A file of our own below /proc for writing, as oci_proc_open does: /proc
 * must be the root of a procfs, and nothing mounted on the way may take
 * the write elsewhere (a container that covers its /proc could otherwise
 * aim it at a file of its choosing: the CVE-2025-52881 class). -errno. */
static int proc_open(const char *rel, const char *field)
{
    int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct statfs sf;
    struct stat st;
    if (proc < 0 || fstatfs(proc, &sf) < 0 || fstat(proc, &st) < 0)
        fail(errno, "`%s`: open /proc", field);
    if (sf.f_type != PROC_SUPER_MAGIC || st.st_ino != 1)
        fail(EPERM, "`%s`: /proc is not the root of a procfs", field);
    struct open_how how = {
        .flags = O_WRONLY | O_CLOEXEC | O_NOFOLLOW,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS,
    };
    int fd = openat2_retry(proc, rel, &how);
    int e = errno;
    close(proc);
    return fd < 0 ? -e : fd;
}

static void oom_score_adj(const struct recipe *r)
{
    if (!(r->h.flags & ENTER_HAS_OOM))
        return;
    int fd = proc_open("self/oom_score_adj", "process.oomScoreAdj");
    if (fd < 0)
        fail(-fd, "`process.oomScoreAdj`: open /proc/self/oom_score_adj");
    char v[16];
    int n = snprintf(v, sizeof(v), "%d", (int)r->h.oom_score_adj);
    if (write(fd, v, (size_t)n) != n)
        fail(errno, "`process.oomScoreAdj`: write %d", (int)r->h.oom_score_adj);
    close(fd);
}

/* The container's AppArmor profile for the command's execve: the request
 * stays with this task and is copied to the command at clone (as
 * oci_apparmor_exec does in the init). */
static void apparmor(const struct recipe *r)
{
    if (!r->apparmor)
        return;
    int fd = proc_open("thread-self/attr/apparmor/exec", "process.apparmorProfile");
    if (fd == -ENOENT)
        fd = proc_open("thread-self/attr/exec", "process.apparmorProfile");
    if (fd < 0)
        fail(-fd, "`process.apparmorProfile`: open /proc/thread-self/attr/exec");
    char buf[1100];
    int n = snprintf(buf, sizeof(buf), "exec %s", r->apparmor);
    if (n >= (int)sizeof(buf))
        fail(ENAMETOOLONG, "`process.apparmorProfile`: `%.64s...`", r->apparmor);
    if (write(fd, buf, (size_t)n) != n)
        fail(errno, "`process.apparmorProfile`: change to `%s` at exec", r->apparmor);
    close(fd);
}

static void rlimits(const struct recipe *r)
{
    for (uint32_t i = 0; i < r->h.n_rlimits; i++) {
        struct rlimit rl = {(rlim_t)r->rlimits[i].soft, (rlim_t)r->rlimits[i].hard};
        if (setrlimit(r->rlimits[i].resource, &rl) < 0)
            fail(errno, "`process.rlimits[%u]`: setrlimit", i);
    }
}

static int terminal(const struct recipe *r)
{
    if (!(r->h.flags & ENTER_TERMINAL))
        return -1;
    int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0)
        fail(errno, "`process.terminal`: open /dev/ptmx");
    int unlock = 0;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0)
        fail(errno, "`process.terminal`: unlock the pty");
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0)
        fail(errno, "`process.terminal`: open the pty peer");
    (void)!fchown(slave, r->h.uid, (gid_t)-1); /* an unmapped uid keeps root's */
    if (r->h.cons_height || r->h.cons_width) {
        struct winsize ws = {.ws_row = (unsigned short)r->h.cons_height,
                             .ws_col = (unsigned short)r->h.cons_width};
        ioctl(slave, TIOCSWINSZ, &ws);
    }
    if (r->console >= 0) {
        char dummy = 'F';
        struct iovec iov = {.iov_base = &dummy, .iov_len = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &master, sizeof(int));
        ssize_t n;
        do
            n = sendmsg(r->console, &msg, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            fail(errno, "send the pty over the console socket");
        close(r->console);
    }
    close(master);
    return slave;
}

static int openat2_in_root(int root, const char *path)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT};
    int fd = openat2_retry(root, path, &how);
    return fd < 0 ? -errno : fd;
}

/* process.cwd, resolved inside the container's root (created when missing,
 * as runc and crun do), then checked to be below it (CVE-2024-21626). */
static void cwd(const struct recipe *r)
{
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        fail(errno, "open `/`");
    int fd = openat2_in_root(root, r->cwd);
    if (fd == -ENOENT) {
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s", r->cwd) >= (int)sizeof(p))
            fail(ENAMETOOLONG, "`process.cwd`: `%s`", r->cwd);
        /* each missing component made below a parent resolved in the root */
        for (char *s = p + strspn(p, "/");; s += strspn(s, "/")) {
            char *e = strchrnul(s, '/');
            char saved = *e;
            *e = '\0';
            fd = openat2_in_root(root, p);
            if (fd == -ENOENT) {
                char *slash = strrchr(p, '/');
                int pfd = root;
                if (slash && slash != p) {
                    *slash = '\0';
                    pfd = openat2_in_root(root, p);
                    *slash = '/';
                } else if (slash) {
                    pfd = openat2_in_root(root, "/");
                }
                if (pfd < 0)
                    fail(-pfd, "`process.cwd`: open `%s` in the rootfs", p);
                if (mkdirat(pfd, slash ? slash + 1 : p, 0755) < 0 && errno != EEXIST)
                    fail(errno, "`process.cwd`: create `%s` in the rootfs", p);
                if (pfd != root)
                    close(pfd);
                fd = openat2_in_root(root, p);
            }
            if (fd < 0)
                fail(-fd, "`process.cwd`: open `%s` in the rootfs", p);
            *e = saved;
            if (!saved || !e[strspn(e, "/")])
                break;
            close(fd);
            s = e;
        }
    }
    if (fd < 0)
        fail(-fd, "`process.cwd`: open `%s` in the rootfs", r->cwd);
    if (fchdir(fd) < 0)
        fail(errno, "`process.cwd`: chdir `%s`", r->cwd);
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof(buf)) || buf[0] != '/')
        fail(EPERM, "`process.cwd`: `%s` is outside the container", r->cwd);
    close(fd);
    close(root);
}

static const char *env_get(char **env, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], key, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

static char *find(const struct recipe *r)
{
    const char *a0 = r->args[0];
    if (strchr(a0, '/')) {
        if (access(a0, F_OK) < 0)
            fail(errno, "`process.args[0]`: `%s`", a0);
        return (char *)a0;
    }
    const char *path = env_get(r->env, "PATH");
    if (!path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    static char cand[PATH_MAX];
    for (const char *s = path;;) {
        const char *e = strchrnul(s, ':');
        if (snprintf(cand, sizeof(cand), "%.*s/%s", (int)(e - s), e == s ? "." : s, a0) <
            (int)sizeof(cand)) {
            struct stat st;
            if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
                return cand;
        }
        if (!*e)
            break;
        s = e + 1;
    }
    fail(ENOENT, "`process.args[0]`: `%s` not found in $PATH", a0);
}

static void seccomp_load(const struct recipe *r)
{
    struct sock_fprog prog = {.len = (unsigned short)r->h.n_filter,
                              .filter = (struct sock_filter *)r->filter};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, r->h.seccomp_flags, &prog) < 0) {
        if (errno == EACCES)
            fail(EACCES, "`linux.seccomp`: load seccomp filter (needs no_new_privs or "
                         "CAP_SYS_ADMIN)");
        fail(errno, "`linux.seccomp`: load seccomp filter");
    }
}

static void caps_apply(const struct recipe *r)
{
    const uint64_t *c = r->h.caps;
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    for (int i = 0; i < 2; i++) {
        d[i].effective = (uint32_t)(c[ENTER_CAP_EFFECTIVE] >> (32 * i));
        d[i].permitted = (uint32_t)(c[ENTER_CAP_PERMITTED] >> (32 * i));
        d[i].inheritable = (uint32_t)(c[ENTER_CAP_INHERITABLE] >> (32 * i));
    }
    if (syscall(SYS_capset, &h, d) < 0)
        fail(errno, "`process.capabilities`: set the process capabilities");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        fail(errno, "clear the ambient capabilities");
    for (uint32_t v = 0; v <= r->h.cap_last; v++)
        if ((c[ENTER_CAP_AMBIENT] >> v) & 1)
            if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, (unsigned long)v, 0, 0) < 0)
                fail(errno, "`process.capabilities.ambient`: raise capability %u", v);
}

/* Every step that needs the daemon's privileges, in this program before
 * the command is cloned: this program is outside the container's PID
 * namespace (setns(CLONE_NEWPID) applies to children only), so no
 * container process can trace it, even one granted CAP_SYS_PTRACE, which
 * ignores non-dumpable. The command is born with the container's
 * credentials and inherits the rest (rlimits, cwd, umask, the terminal's
 * peer, no_new_privs, an early seccomp filter). Returns the pty peer or
 * -1. */
static int prepare(const struct recipe *r)
{
    const struct enter_recipe *h = &r->h;
    rlimits(r);
    int slave = terminal(r);
    cwd(r);
    /* Nothing of ours crosses execve but stdio and the preserved fds (our
     * socket stays ours until we end: close-on-exec only). */
    if (syscall(SYS_close_range, 3 + h->preserve_fds, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        fail(errno, "close_range");
    int has_seccomp = (h->flags & ENTER_SECCOMP) != 0, nnp = (h->flags & ENTER_NNP) != 0;
    if (has_seccomp && !nnp)
        seccomp_load(r);
    if (h->flags & ENTER_HAS_CAPS) {
        for (uint32_t c = 0; c <= h->cap_last; c++)
            if (!((h->caps[ENTER_CAP_BOUNDING] >> c) & 1) &&
                prctl(PR_CAPBSET_DROP, (unsigned long)c, 0, 0, 0) < 0 && errno != EINVAL)
                fail(errno, "`process.capabilities.bounding`: drop capability %u", c);
        if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
            fail(errno, "PR_SET_KEEPCAPS");
    }
    if (setgroups(h->n_gids, (const gid_t *)r->gids) < 0 && !(errno == EPERM && h->n_gids == 0))
        fail(errno, "`process.user.additionalGids`: setgroups");
    if (setresgid(h->gid, h->gid, h->gid) < 0)
        fail(errno, "`process.user.gid`: setgid %u", (unsigned)h->gid);
    if (setresuid(h->uid, h->uid, h->uid) < 0)
        fail(errno, "`process.user.uid`: setuid %u", (unsigned)h->uid);
    if (h->flags & ENTER_HAS_CAPS) {
        caps_apply(r);
        prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    /* the change of ids made us dumpable again if suid_dumpable says so */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    umask(h->flags & ENTER_HAS_UMASK ? h->umask : 022);
    if (nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail(errno, "`process.noNewPrivileges`");
    /* The late filter here too: a command seen before its execve is never
     * without it (a CAP_SYS_PTRACE container could otherwise make it run
     * what the filter refuses). */
    if (has_seccomp && nnp)
        seccomp_load(r);
    return slave;
}

/* The command, in the container's PID namespace: only what must be done
 * by the process itself, with the container's credentials already. The
 * PATH lookup is here, where /proc/self is the command's. */
static _Noreturn void command(const struct recipe *r, int slave)
{
    char *exe = find(r);
    if (setsid() < 0)
        fail(errno, "setsid");
    if (slave >= 0) {
        if (ioctl(slave, TIOCSCTTY, 0) < 0)
            fail(errno, "`process.terminal`: set the controlling terminal");
        for (int i = 0; i < 3; i++)
            if (dup2(slave, i) < 0)
                fail(errno, "`process.terminal`: dup2");
        if (slave > 2)
            close(slave);
    }
    execve(exe, r->args, r->env);
    fail(errno, "exec `%s`", exe);
}

int main(int argc, char **argv)
{
    /* Only kinglet starts this program, with the fd of its socket. */
    char *end;
    long fd = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (argc != 2 || *end || fd < 3 || fd > 65535 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0) {
        static const char usage[] = "kinglet-enter: started by kinglet only\n";
        (void)!write(2, usage, sizeof(usage) - 1);
        return 2;
    }
    sync_fd = (int)fd;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* kinglet blocked every signal around the clone: default handling and
     * an empty mask from here, for the command too. */
    for (int sig = 1; sig < _NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    struct recipe r = {.pidfd = -1, .console = -1};
    read_recipe(&r);
    /* through the daemon's /proc, before we join the container's mounts
     * (our pid is not in the container's procfs) */
    oom_score_adj(&r);
    apparmor(&r);
    if (setns(r.pidfd, r.h.nsflags) < 0)
        fail(errno, "join the container's namespaces");
    close(r.pidfd);
    int slave = prepare(&r);
    /* setns(CLONE_NEWPID) applies to children: the command is one, made
     * kinglet's own (CLONE_PARENT) so that kinglet waits for it; this
     * program ends at once. It is in our cgroup already. A seccomp filter
     * may refuse clone3 (ENOSYS, as the runtime default does): clone then. */
    struct clone_args ca = {.flags = CLONE_PARENT};
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid < 0 && (errno == ENOSYS || errno == EPERM))
        pid = (pid_t)syscall(SYS_clone, CLONE_PARENT, 0, 0, 0, 0);
    if (pid < 0)
        fail(errno, "start the command in the container");
    if (pid == 0)
        command(&r, slave);
    struct enter_msg m = {.type = ENTER_MSG_PID, .value = pid};
    while (send(sync_fd, &m, offsetof(struct enter_msg, text), MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
    return 0;
}
