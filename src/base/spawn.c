/* base/spawn: run a program, from a thread of a multi-threaded process.
 * posix_spawn (a vfork-style clone in glibc) never runs our own code
 * between fork and exec, so it is safe whatever locks the other threads
 * hold, and costs no copy of the address space. */
#include <fcntl.h>
#include <spawn.h>
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
