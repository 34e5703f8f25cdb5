/* kinglet-pod-init: pid 1 of a pod's shared PID namespace, a program of
 * its own.
 *
 * It holds the namespace for the pod's containers and reaps the orphans
 * they leave; it runs nothing and ends when killed (SIGKILL from Stop, or
 * SIGTERM and SIGINT, which pid 1 would otherwise ignore). Every container
 * of the pod sees it, and one with ptrace rights could reach through it, so
 * it holds what a pause process holds, and less:
 *
 *  - no file of the host: it is built static against musl, embedded in
 *    kinglet and executed from a sealed memfd (init.c), so /proc/1/exe is
 *    a memfd nothing can write and no library is mapped;
 *  - no filesystem of the host: a mount namespace of its own whose root is
 *    an empty read-only tmpfs (pivot_root, the old root detached), so
 *    /proc/1/root and /proc/1/cwd lead nowhere; no fd open but its report
 *    pipe, closed once set up;
 *  - no privilege: uid and gid 65535 (a pause image's), no supplementary
 *    groups, every capability set empty (bounding and ambient included),
 *    no_new_privs, not dumpable;
 *  - a seccomp filter that allows what its loop needs and nothing else;
 *  - the pod's cgroup, which its parent puts it in before it reports.
 *
 * Steps run in the order listed in main(); the first that fails is written
 * to fd 3 (struct pod_init_report) and the program exits 1. Success writes
 * a report with code 0. It costs about 20 kB of file and well under 200 kB
 * of memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pod/init_proto.h"

#if defined(__x86_64__)
#define AUDIT_ARCH_SELF AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_SELF AUDIT_ARCH_AARCH64
#else
#error "pod init: the seccomp filter does not know this architecture"
#endif

#define UNPRIVILEGED 65535

static _Noreturn void fail(const char *step)
{
    struct pod_init_report r = {.code = errno ? errno : EIO};
    strncpy(r.step, step, sizeof(r.step) - 1);
    (void)!write(POD_INIT_REPORT_FD, &r, sizeof(r));
    _exit(1);
}

/* A mount namespace with nothing in it: an empty read-only tmpfs as root.
 * /proc serves as the mount point: it exists wherever kinglet runs. */
static void empty_root(void)
{
    if (unshare(CLONE_NEWNS) < 0)
        fail("unshare the mount namespace");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        fail("make the mounts private");
    if (mount("pod-init", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=4k,nr_inodes=1,mode=0555") < 0)
        fail("mount the empty root");
    if (chdir("/proc") < 0)
        fail("enter the empty root");
    /* The old root goes on top of the new one, and is detached from there. */
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        fail("pivot_root");
    if (umount2(".", MNT_DETACH) < 0)
        fail("detach the host's root");
    if (chdir("/") < 0)
        fail("chdir /");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0)
        fail("make the root read-only");
}

static void drop_privileges(void)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail("no_new_privs");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            fail("drop the bounding set");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        fail("clear the ambient set");
    if (setgroups(0, NULL) < 0)
        fail("setgroups");
    if (setresgid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED) < 0)
        fail("setresgid");
    if (setresuid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED) < 0)
        fail("setresuid");
    /* setresuid emptied the permitted and effective sets; not the
     * inheritable one. */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capset, &h, d) < 0)
        fail("capset");
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        fail("not dumpable");
}

#define ALLOW(sys)                                                                                 \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (sys), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
/* sys allowed only on POD_INIT_REPORT_FD (write and close of the report). */
#define ALLOW_ON_REPORT_FD(sys)                                                                    \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (sys), 0, 4),                                              \
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),                \
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, POD_INIT_REPORT_FD, 0, 1),                             \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),                                              \
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

static void seccomp_filter(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_SELF, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __x86_64__
        /* x32 system calls share the architecture: refused as a whole. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000U, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
#endif
        ALLOW(SYS_rt_sigtimedwait),
        ALLOW(SYS_wait4),
        ALLOW(SYS_rt_sigprocmask),
        ALLOW(SYS_rt_sigreturn),
        ALLOW(SYS_restart_syscall),
        ALLOW(SYS_exit),
        ALLOW(SYS_exit_group),
        ALLOW_ON_REPORT_FD(SYS_write),
        ALLOW_ON_REPORT_FD(SYS_close),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        fail("seccomp");
}

int main(void)
{
    prctl(PR_SET_NAME, "pod-init");
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    /* Only the report pipe stays: stdio was the host's /dev/null. */
    close(0);
    close(1);
    close(2);
    syscall(SYS_close_range, POD_INIT_REPORT_FD + 1, ~0U, 0);
    empty_root();
    drop_privileges();
    seccomp_filter();
    struct pod_init_report ok = {0};
    (void)!write(POD_INIT_REPORT_FD, &ok, sizeof(ok));
    close(POD_INIT_REPORT_FD);
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&all, &si);
        if (sig == SIGCHLD) {
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        } else if (sig == SIGTERM || sig == SIGINT) {
            return 0;
        }
    }
}
