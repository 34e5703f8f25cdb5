/* monitor/launch: monitor_exec (see monitor.h). A memfd costs a copy of the
 * program (about 50 kB) per container, which is what it takes for the
 * monitor to have no file on the host behind it; the seals make the copy
 * immutable once written, so neither a write through /proc/PID/exe nor a
 * truncation can change what any monitor runs (memfd_sealed, base/exe.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"
#include "monitor/monitor.h"

static int keep(int fd)
{
    if (fd < 0)
        return 0;
    int fl = fcntl(fd, F_GETFD);
    return fl < 0 ? -errno : fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0 ? -errno : 0;
}

#ifdef KINGLET_SANITIZERS
/* A sanitizer build's monitor (local.mk) gets the test run's sanitizer
 * options and the file for its reports (its stderr is /dev/null). They are
 * taken at start, as the paths that create containers clear their
 * environment; nothing else of it is passed, as in a plain build. */
static char san_env[3][512];

__attribute__((constructor)) static void san_env_take(void)
{
    static const char *const from[] = {"KINGLET_MONITOR_ASAN_OPTIONS",
                                       "KINGLET_MONITOR_UBSAN_OPTIONS", "KINGLET_MONITOR_REPORT"};
    static const char *const to[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "KINGLET_MONITOR_REPORT"};
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(from[i]);
        if (v)
            snprintf(san_env[i], sizeof(san_env[i]), "%s=%s", to[i], v);
    }
}
#endif

int monitor_exec(const struct monitor_args *a)
{
    char init[24], dir[16], exec_[16], report[16], out[16], err[16], tty[16], in[16], ctl[16];
    char *argv[32];
    int n = 0;
    argv[n++] = "kinglet-monitor";
#define FD_ARG(flag, buf, fd)                                                                      \
    do {                                                                                           \
        if ((fd) >= 0) {                                                                           \
            snprintf(buf, sizeof(buf), "%d", (fd));                                                \
            argv[n++] = flag;                                                                      \
            argv[n++] = buf;                                                                       \
        }                                                                                          \
    } while (0)
    snprintf(init, sizeof(init), "%d", (int)a->init);
    argv[n++] = "--init";
    argv[n++] = init;
    FD_ARG("--dir-fd", dir, a->dir_fd);
    FD_ARG("--exec-fd", exec_, a->exec_fd);
    FD_ARG("--report-fd", report, a->report_fd);
    if (a->log_path) {
        argv[n++] = "--log-path";
        argv[n++] = (char *)a->log_path;
    }
    /* also without a log: attached clients read the output */
    FD_ARG("--stdout-fd", out, a->stdout_fd);
    FD_ARG("--stderr-fd", err, a->stderr_fd);
    FD_ARG("--tty-fd", tty, a->tty_fd);
    FD_ARG("--stdin-fd", in, a->stdin_fd);
    if (a->stdin_once)
        argv[n++] = "--stdin-once";
    FD_ARG("--ctl-fd", ctl, a->ctl_fd);
#undef FD_ARG
    if (a->cgroup_path) {
        argv[n++] = "--cgroup";
        argv[n++] = (char *)a->cgroup_path;
    }
    argv[n] = NULL;
    const int fds[] = {a->dir_fd,    a->exec_fd, a->report_fd, a->stdout_fd,
                       a->stderr_fd, a->tty_fd,  a->stdin_fd,  a->ctl_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        int r = keep(fds[i]);
        if (r < 0)
            return r;
    }
    int fd = memfd_sealed("kinglet-monitor", monitor_program,
                          (size_t)(monitor_program_end - monitor_program));
    if (fd < 0)
        return fd;
    char *envp[4] = {NULL};
#ifdef KINGLET_SANITIZERS
    size_t ne = 0;
    for (size_t i = 0; i < 3; i++)
        if (san_env[i][0])
            envp[ne++] = san_env[i];
#endif
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
    int e = errno;
    close(fd);
    return -e;
}
