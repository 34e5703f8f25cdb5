/* oci/process: the last steps before the container's process runs, shared
 * by the init and exec: rlimits, oom score, the pty, the user and its
 * groups, capabilities, no_new_privs, the working directory (checked to be
 * inside the root: CVE-2024-21626), file descriptors (everything beyond
 * stdio and the preserved ones closed at exec), the AppArmor profile for
 * the execve, seccomp last, execve. */
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/close_range.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <pty.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <termios.h>

#include "oci/internal.h"
#include "oci/seccomp.h"

#define PROC_ROOT_INO 1

int oci_process_rlimits(const struct oci_process *p, struct err *err)
{
    for (size_t i = 0; i < p->n_rlimits; i++) {
        struct rlimit rl = {p->rlimits[i].soft, p->rlimits[i].hard};
        if (setrlimit(p->rlimits[i].resource, &rl) < 0)
            return err_set(err, errno, "`process.rlimits[%zu]`: setrlimit", i);
    }
    return 0;
}

static bool have_cap(cap_value_t v)
{
    cap_t c = cap_get_proc();
    if (!c)
        return false;
    cap_flag_value_t f = CAP_CLEAR;
    cap_get_flag(c, v, CAP_EFFECTIVE, &f);
    cap_free(c);
    return f == CAP_SET;
}

void oci_process_clamp_oom(struct oci_process *p)
{
    if (!p->has_oom_score_adj || p->oom_score_adj >= 0 || have_cap(CAP_SYS_RESOURCE))
        return;
    _cleanup_free_ char *own = NULL;
    int cur = 0;
    if (read_file_at(AT_FDCWD, "/proc/self/oom_score_adj", 32, &own, NULL) == 0)
        cur = atoi(own);
    if (p->oom_score_adj >= cur)
        return;
    log_warn("process.oomScoreAdj %d is below the runtime's own %d and the runtime lacks "
             "CAP_SYS_RESOURCE: using %d",
             p->oom_score_adj, cur, cur);
    p->oom_score_adj = cur;
}

int oci_proc_open(const char *rel, int flags, struct err *err)
{
    _cleanup_close_ int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct statfs sf;
    struct stat st;
    if (proc < 0 || fstatfs(proc, &sf) < 0 || fstat(proc, &st) < 0)
        return err_set(err, errno, "open /proc");
    if (sf.f_type != PROC_SUPER_MAGIC || st.st_ino != PROC_ROOT_INO)
        return err_set(err, EPERM, "/proc is not the root of a procfs");
    /* "self" is a plain symlink below /proc; anything mounted on the way
     * (a file of another procfs bound over the one we write) refuses. */
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS,
    };
    int fd = openat2_retry(proc, rel, &how);
    if (fd < 0)
        return err_set(err, errno, "open /proc/%s", rel);
    return fd;
}

int oci_process_oom_score_adj(const struct oci_process *p, struct err *err)
{
    if (!p->has_oom_score_adj)
        return 0;
    _cleanup_close_ int fd = oci_proc_open("self/oom_score_adj", O_WRONLY, err);
    if (fd < 0)
        return err_wrap(err, "`process.oomScoreAdj`");
    char v[16];
    int n = snprintf(v, sizeof(v), "%d", p->oom_score_adj);
    if (write(fd, v, (size_t)n) != n)
        return err_set(err, errno, "`process.oomScoreAdj`: write %d", p->oom_score_adj);
    return 0;
}

int oci_send_with_fd(int sock, const void *data, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ssize_t n;
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : 0;
}

int oci_fd_send(int sock, int fd, struct err *err)
{
    char dummy = 'F';
    int r = oci_send_with_fd(sock, &dummy, 1, fd);
    if (r < 0)
        return err_set(err, -r, "send the pty over the console socket");
    return 0;
}

int oci_fd_recv(int sock, bool nonblock, int *ret_fd)
{
    char dummy;
    struct iovec iov = {.iov_base = &dummy, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (nonblock ? MSG_DONTWAIT : 0));
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n == 0)
        return -EPIPE;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
        return -EPROTO;
    memcpy(ret_fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

int oci_terminal_setup(const struct oci_process *p, int console_fd, int *ret_slave, struct err *err)
{
    _cleanup_close_ int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0)
        return err_set(err, errno, "`process.terminal`: open /dev/ptmx");
    int unlock = 0;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0)
        return err_set(err, errno, "`process.terminal`: unlock the pty");
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0)
        return err_set(err, errno, "`process.terminal`: open the pty peer");
    if (fchown(slave, p->uid, (gid_t)-1) < 0 && errno != EINVAL) {
        /* An unmapped uid: keep root's ownership. */
    }
    if (p->cons_height || p->cons_width) {
        struct winsize ws = {.ws_row = (unsigned short)p->cons_height,
                             .ws_col = (unsigned short)p->cons_width};
        ioctl(slave, TIOCSWINSZ, &ws);
    }
    if (console_fd >= 0 && oci_fd_send(console_fd, master, err) < 0) {
        close(slave);
        return err->code ? -err->code : -EIO;
    }
    *ret_slave = slave;
    return 0;
}

static const char *env_get(char **env, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], key, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

int oci_process_find(const struct oci_process *p, char **ret, struct err *err)
{
    const char *a0 = p->args[0];
    if (strchr(a0, '/')) {
        /* What execve would refuse, refused now, while create can still
         * say so (as runc's create does). */
        struct stat st;
        if (stat(a0, &st) < 0)
            return err_set(err, errno, "`process.args[0]`: `%s`", a0);
        if (S_ISDIR(st.st_mode) || !(st.st_mode & 0111))
            return err_set(err, EACCES, "`process.args[0]`: `%s`", a0);
        *ret = strdup(a0);
        return *ret ? 0 : -ENOMEM;
    }
    const char *path = env_get(p->env, "PATH");
    if (!path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (const char *s = path;;) {
        const char *e = strchrnul(s, ':');
        char cand[PATH_MAX];
        if (snprintf(cand, sizeof(cand), "%.*s/%s", (int)(e - s), e == s ? "." : s, a0) <
            (int)sizeof(cand)) {
            struct stat st;
            if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
                *ret = strdup(cand);
                return *ret ? 0 : -ENOMEM;
            }
        }
        if (!*e)
            break;
        s = e + 1;
    }
    return err_set_msg(err, ENOENT, "`process.args[0]`: `%s` not found in $PATH", a0);
}

int oci_process_cwd(const struct oci_process *p, struct err *err)
{
    /* The root is the container's now: resolve cwd inside it, then make
     * sure the kernel agrees that we are below it (a leaked host directory
     * fd, or /proc/self/fd/N as cwd, gives an unreachable path). */
    _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return err_set(err, errno, "open `/`");
    _cleanup_close_ int fd = oci_path_open_in_root(root, p->cwd, false, true, err);
    if (fd < 0) {
        if (err && err->code == ENOENT) {
            /* runc and crun create a missing cwd. */
            err_clear(err);
            fd = oci_path_open_in_root(root, p->cwd, true, true, err);
        }
        if (fd < 0)
            return err_wrap(err, "`process.cwd`");
    }
    if (fchdir(fd) < 0)
        return err_set(err, errno, "`process.cwd`: chdir `%s`", p->cwd);
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof(buf)) || buf[0] != '/')
        return err_set(err, EPERM, "`process.cwd`: `%s` is outside the container", p->cwd);
    return 0;
}

int oci_process_exec(const struct oci_process *p, const char *path, json_t *seccomp,
                     int preserve_fds, int tty_slave, struct err *err)
{
    int r;
    if (tty_slave >= 0) {
        if (ioctl(tty_slave, TIOCSCTTY, 0) < 0)
            return err_set(err, errno, "`process.terminal`: set the controlling terminal");
        for (int i = 0; i < 3; i++)
            if (dup2(tty_slave, i) < 0)
                return err_set(err, errno, "`process.terminal`: dup2");
        if (tty_slave > 2)
            close(tty_slave);
    }
    /* Nothing of ours crosses execve but stdio and the preserved fds. */
    if (syscall(SYS_close_range, 3 + preserve_fds, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        return err_set(err, errno, "close_range");
    /* The profile for our execve, asked while we may still open /proc
     * (it is the one we mounted) and before anything drops privileges. */
    if (p->apparmor && *p->apparmor && (r = oci_apparmor_exec(p->apparmor, err)) < 0)
        return r;
    /* With no_new_privs the filter goes last, right before execve; without
     * it the kernel wants CAP_SYS_ADMIN, which the uid change may drop, so
     * it goes in now, while we are still privileged (as runc and crun do). */
    bool has_seccomp = seccomp && !json_is_null(seccomp);
    if (has_seccomp && !p->no_new_privileges && (r = oci_seccomp_load(seccomp, err)) < 0)
        return err_wrap(err, "`linux.seccomp`");
    if ((r = oci_caps_drop_bounding(p, err)) < 0)
        return r;
    if (p->has_caps && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
        return err_set(err, errno, "PR_SET_KEEPCAPS");
    if (setgroups(p->n_gids, p->gids) < 0 && !(errno == EPERM && p->n_gids == 0))
        return err_set(err, errno, "`process.user.additionalGids`: setgroups");
    if (setresgid(p->gid, p->gid, p->gid) < 0)
        return err_set(err, errno, "`process.user.gid`: setgid %u", (unsigned)p->gid);
    if (setresuid(p->uid, p->uid, p->uid) < 0)
        return err_set(err, errno, "`process.user.uid`: setuid %u", (unsigned)p->uid);
    if ((r = oci_caps_apply(p, err)) < 0)
        return r;
    if (p->has_caps)
        prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    if (p->has_umask)
        umask(p->umask);
    else
        umask(022);
    if (p->no_new_privileges && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return err_set(err, errno, "`process.noNewPrivileges`");
    char **env = p->env;
    static char *empty_env[] = {NULL};
    if (!env)
        env = empty_env;
    if (has_seccomp && p->no_new_privileges && (r = oci_seccomp_load(seccomp, err)) < 0)
        return err_wrap(err, "`linux.seccomp`");
    execve(path, p->args, env);
    return err_set(err, errno, "exec `%s`", path);
}
