/* base/spawn: run a program, from a thread of a multi-threaded process.
 * posix_spawn (a vfork-style clone in glibc) never runs our own code
 * between fork and exec, so it is safe whatever locks the other threads
 * hold, and costs no copy of the address space. Also the reads that watch
 * a process without racing pid reuse: its pidfd and its start time. */
#include <fcntl.h>
#include <spawn.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "base/base.h"

int spawn_start(const char *path, char *const argv[], char *const envp[], int in, int out,
                int errfd, const int *extra, size_t n_extra, pid_t *ret_pid)
{
    static char *const empty[] = {NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int r = posix_spawn_file_actions_init(&fa);
    if (r)
        return -r;
    r = posix_spawnattr_init(&attr);
    if (r) {
        posix_spawn_file_actions_destroy(&fa);
        return -r;
    }
    /* The child starts with no signal blocked and default dispositions. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int fds[3] = {in, out, errfd};
    for (int i = 0; i < 3 && !r; i++)
        r = fds[i] >= 0
                ? posix_spawn_file_actions_adddup2(&fa, fds[i], i)
                : posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i ? O_WRONLY : O_RDONLY, 0);
    for (size_t i = 0; !r && i < n_extra; i++)
        r = posix_spawn_file_actions_adddup2(&fa, extra[i], 3 + (int)i);
    pid_t pid = -1;
    if (!r)
        r = posix_spawn(&pid, path, &fa, &attr, argv, envp ? envp : empty);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (r)
        return -r;
    *ret_pid = pid;
    return 0;
}

int spawn_wait(const char *path, char *const argv[], char *const envp[], int in, int out, int errfd,
               int *ret_status)
{
    pid_t pid;
    int r = spawn_start(path, argv, envp, in, out, errfd, NULL, 0, &pid);
    if (r < 0)
        return r;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    *ret_status = st;
    return 0;
}

int pidfd_reap(int pidfd, int *ret_status)
{
    siginfo_t si = {0};
    if (syscall(SYS_waitid, P_PIDFD, pidfd, &si, WEXITED | WNOHANG, NULL) < 0)
        return -errno;
    if (si.si_pid == 0)
        return 0;
    *ret_status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
    return 1;
}

int proc_start_time(pid_t pid, uint64_t *ret, char *ret_state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -ESRCH;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: start after the
     * last ')'. Field 3 is the state, field 22 the start time. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return -EINVAL;
    p += 2;
    if (ret_state)
        *ret_state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -EINVAL;
        p++;
    }
    *ret = strtoull(p, NULL, 10);
    return 0;
}

int pidfd_open_started(pid_t pid, uint64_t start)
{
    int fd = pidfd_open(pid, 0);
    if (fd < 0)
        return -errno;
    uint64_t now;
    if (proc_start_time(pid, &now, NULL) < 0 || now != start) {
        close(fd);
        return -ESRCH;
    }
    return fd;
}
