/* oci/monitor: the per-container supervisor.
 *
 * A fork of the creating process (no exec), in its own session, a child
 * subreaper, the parent of the container init. It waits for the init's
 * execve (a byte on a pipe right before it: the start time) and its exit, then
 * writes exit.json (write + fsync + rename + directory fsync) with the
 * exit code, signal, start and finish times and whether the cgroup saw an
 * OOM kill, tells a waiting `run` over its socket, reaps whatever else was
 * reparented to it, and exits.
 *
 * Memory: a forked child shares the parent's pages, and every page it
 * touches counts in its resident set: the code it runs (libc's sits in
 * large page-cache folios that are mapped whole) and the relocated data of
 * every library the binary links (the full kinglet links some fifty, TLS
 * and HTTP included). So, once set up, the monitor runs only the few
 * functions of this file, on raw system calls, without calling into any
 * library again, and unmaps every library (shed_file_pages). It allocates
 * nothing. Measured with the full binary: about 500 kB VmRSS, against
 * 1.9 MB without this (tests/oci/test_errors_monitor.py checks < 1 MB). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "oci/internal.h"

#if defined(__GNUC__) && !defined(__clang__)
/* Keep gcc from turning the copy loops below into memcpy calls (libc). */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

/* Sanitizer builds instrument this file with calls into their runtime
 * library: keep every library mapped there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#if defined(__x86_64__)
#define RAW_SYSCALLS 1
static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#define RAW_SYSCALLS 1
static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}
#else
/* Elsewhere: libc's syscall(), and no shedding of code pages. */
#define RAW_SYSCALLS 0
static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
    long r = syscall(n, a, b, c, d, e, f);
    return r < 0 ? -errno : r;
}
#endif

#define SYS(n, a, b, c) sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

struct out {
    char b[320];
    size_t n;
};

static void out_str(struct out *o, const char *s)
{
    while (*s && o->n < sizeof(o->b) - 1)
        o->b[o->n++] = *s++;
}

static void out_u64(struct out *o, uint64_t v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i < 23);
    while (i > 0 && o->n < sizeof(o->b) - 1)
        o->b[o->n++] = tmp[--i];
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    if (SYS(SYS_clock_gettime, CLOCK_REALTIME, &ts, 0) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool oom_killed(const char *cg)
{
    if (!cg)
        return false;
    struct out path;
    path.n = 0;
    out_str(&path, cg);
    out_str(&path, "/memory.events");
    path.b[path.n] = '\0';
    long fd = sys6(SYS_openat, AT_FDCWD, (long)path.b, O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return false;
    char buf[512];
    long n = SYS(SYS_read, fd, buf, sizeof(buf) - 1);
    SYS(SYS_close, fd, 0, 0);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    static const char key[] = "oom_kill ";
    for (long i = 0; i + (long)sizeof(key) - 1 < n; i++) {
        size_t k = 0;
        while (key[k] && buf[i + (long)k] == key[k])
            k++;
        if (key[k])
            continue;
        const char *p = buf + i + k;
        return *p >= '1' && *p <= '9';
    }
    return false;
}

static void record(const struct oci_monitor_args *a, int status, uint64_t started)
{
    int code, sig = 0;
    if (WIFSIGNALED(status)) {
        sig = WTERMSIG(status);
        code = 128 + sig;
    } else {
        code = WEXITSTATUS(status);
    }
    struct out o;
    o.n = 0;
    out_str(&o, "{\"exitCode\":");
    out_u64(&o, (uint64_t)code);
    out_str(&o, ",\"signal\":");
    out_u64(&o, (uint64_t)sig);
    out_str(&o, ",\"started\":");
    out_u64(&o, started);
    out_str(&o, ",\"finished\":");
    out_u64(&o, real_ns());
    out_str(&o, ",\"oomKilled\":");
    out_str(&o, oom_killed(a->cgroup_path) ? "true" : "false");
    out_str(&o, "}\n");
    /* Durable: the exit status is all that is left of the container. */
    long fd = sys6(SYS_openat, a->dirfd, (long)"exit.json.tmp",
                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600, 0, 0);
    if (fd >= 0) {
        long w = SYS(SYS_write, fd, o.b, o.n);
        long s = SYS(SYS_fsync, fd, 0, 0);
        SYS(SYS_close, fd, 0, 0);
        if (w == (long)o.n && s == 0 &&
            sys6(SYS_renameat, a->dirfd, (long)"exit.json.tmp", a->dirfd, (long)"exit.json", 0,
                 0) == 0)
            SYS(SYS_fsync, a->dirfd, 0, 0);
    }
    if (a->report_fd >= 0) {
        struct oci_sync_msg m;
        m.type = OCI_SYNC_EXIT;
        m.value = code;
        sys6(SYS_sendto, a->report_fd, (long)&m, offsetof(struct oci_sync_msg, text), MSG_NOSIGNAL,
             0, 0);
    }
}

static unsigned long hex(const char **p)
{
    unsigned long v = 0;
    for (;; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9')
            v = v * 16 + (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (unsigned long)(c - 'a' + 10);
        else
            return v;
    }
}

#define SHED_MAX 1024

/* From here on the monitor runs only this file's code, on raw system
 * calls: it needs none of the shared libraries the binary links (libc
 * included), so every file mapping that is not the binary's own is
 * unmapped, relocated data and all. Of the binary's own mappings, the
 * code is dropped (MADV_DONTNEED: the pages come back unchanged from the
 * page cache when touched), and so are its constants; its relocated and
 * writable data stays. Anonymous mappings (heap,
 * stack, TLS) stay. Nothing of the libraries can run again: no thread,
 * no signal handler, no atexit (exit_group). */
static void shed_file_pages(void)
{
    static unsigned long start[SHED_MAX], end[SHED_MAX], ino[SHED_MAX];
    static bool code[SHED_MAX], writable[SHED_MAX];
    size_t n_maps = 0;
    char buf[8192];
    long fd = sys6(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return;
    size_t len = 0;
    for (;;) {
        long n = SYS(SYS_read, fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        size_t line = 0;
        for (size_t i = 0; i < len; i++) {
            if (buf[i] != '\n')
                continue;
            buf[i] = '\0';
            /* start-end perms offset dev inode path */
            const char *p = buf + line;
            line = i + 1;
            if (n_maps >= SHED_MAX)
                continue;
            unsigned long a = hex(&p);
            if (*p++ != '-')
                continue;
            unsigned long b = hex(&p);
            p++;
            bool x = p[0] == 'r' && p[1] != 'w' && p[2] == 'x';
            bool w = p[1] == 'w';
            int spaces = 0;
            while (*p && spaces < 3)
                if (*p++ == ' ')
                    spaces++;
            unsigned long inode = 0;
            while (*p >= '0' && *p <= '9')
                inode = inode * 10 + (unsigned long)(*p++ - '0');
            start[n_maps] = a;
            end[n_maps] = b;
            ino[n_maps] = inode;
            code[n_maps] = x;
            writable[n_maps] = w;
            n_maps++;
        }
        size_t rest = len - line;
        for (size_t i = 0; i < rest; i++)
            buf[i] = buf[line + i];
        len = rest;
        if (len >= sizeof(buf) - 1)
            len = 0; /* a line longer than the buffer: skip it */
    }
    SYS(SYS_close, fd, 0, 0);

    /* The binary: the mapping this very function runs from. */
    unsigned long self = (unsigned long)&shed_file_pages, self_ino = 0;
    for (size_t i = 0; i < n_maps; i++)
        if (start[i] <= self && self < end[i])
            self_ino = ino[i];
    if (!self_ino)
        return;
    for (size_t i = 0; i < n_maps; i++) {
        if (ino[i] == 0)
            continue;
        if (ino[i] != self_ino) {
            SYS(SYS_munmap, start[i], end[i] - start[i], 0);
            continue;
        }
        /* Ours: code, and read-only data but the RELRO part (relocated,
         * private: the read-only mapping right before the writable one). */
        bool relro = i + 1 < n_maps && ino[i + 1] == self_ino && writable[i + 1];
        if (code[i] || (!writable[i] && !relro))
            SYS(SYS_madvise, start[i], end[i] - start[i], MADV_DONTNEED);
    }
}

/* The init writes one byte right before execve: the start time. EOF means
 * it died first, and there is no start time. */
static void read_exec_byte(int fd, uint64_t *started)
{
    char c;
    long n;
    while ((n = SYS(SYS_read, fd, &c, 1)) == -EINTR)
        ;
    if (n == 1)
        *started = real_ns();
    SYS(SYS_close, fd, 0, 0);
}

/* Shedding is for monitors that stay: a container that is gone within
 * SHED_DELAY_MS (a `run` of a short command) never pays for it, and the
 * init's setup, on the critical path, does not share the CPU with it. */
#define SHED_DELAY_MS 100

_Noreturn void oci_monitor_main(const struct oci_monitor_args *a)
{
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    uint64_t started = 0;
    int exec_fd = a->exec_fd;
    int pidfd = oci_pidfd_open(a->init);
    bool gone = false;
    uint64_t deadline = now_mono_ns() + SHED_DELAY_MS * 1000000ull;
    while (pidfd >= 0 && !gone) {
        uint64_t now = now_mono_ns();
        if (now >= deadline)
            break;
        struct pollfd p[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = exec_fd, .events = POLLIN}};
        int r = poll(p, 2, (int)((deadline - now) / 1000000ull) + 1);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            read_exec_byte(exec_fd, &started);
            exec_fd = -1;
        }
        if (r > 0 && (p[0].revents & POLLIN))
            gone = true;
    }
    if (pidfd >= 0)
        close(pidfd);
    /* From here on: no libc. */
    if (!gone && RAW_SYSCALLS && !SANITIZED)
        shed_file_pages();
    if (exec_fd >= 0)
        read_exec_byte(exec_fd, &started);
    for (;;) {
        int status = 0;
        long pid = sys6(SYS_wait4, -1, (long)&status, 0, 0, 0, 0);
        if (pid == -EINTR)
            continue;
        if (pid < 0)
            sys6(SYS_exit_group, 1, 0, 0, 0, 0, 0);
        if (pid != a->init)
            continue;
        record(a, status, started);
        /* Reparented leftovers of a container without a pid namespace:
         * reap what is already dead, leave the rest to the system. */
        while (sys6(SYS_wait4, -1, 0, WNOHANG, 0, 0, 0) > 0)
            ;
        sys6(SYS_exit_group, 0, 0, 0, 0, 0, 0);
    }
    __builtin_unreachable();
}
