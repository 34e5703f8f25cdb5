/* base/exe: programs that nothing can write through /proc/PID/exe.
 *
 * A process that runs in a container, or that a container can see, and
 * whose executable is a file of the host hands that file to the container:
 * /proc/PID/exe opened with O_PATH and reopened for writing once no process
 * runs it any more replaces the host's binary (CVE-2019-5736). Two ways out,
 * as runc (libcontainer/exeseal) and crun do:
 *
 * - our small programs (monitor, pod init) are embedded and run from a
 *   sealed memfd (memfd_sealed): a copy of some 50 kB per process, which no
 *   write, truncation or growth can change;
 * - kinglet itself, when it is about to put processes into a container
 *   (`oci create`, `run`, `exec`), re-executes once from a private
 *   read-only overlayfs whose only layers are its own directory and an
 *   empty detached tmpfs (exe_reexec_sealed). overlayfs without an upper
 *   layer refuses every write (EROFS), and the mount was never attached to
 *   any tree, so nobody can remount it or reach it by path. It costs no
 *   copy (the pages are the binary's own page cache), the view (0.15 ms,
 *   0.05 ms of CPU, its teardown included) and one execve of kinglet (on
 *   the test VM about 1.8 ms and 1.1 ms of CPU: what any execve costs
 *   there; crun 1.8 re-executes itself through a read-only bind mount on
 *   every command). Kernels without
 *   overlayfs layers given by fd (Linux 6.13) or callers without
 *   CAP_SYS_ADMIN fall back to a sealed memfd copy of the binary. */
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>

#include "base/base.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif

#define SEALS    (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)
#define MARK_ENV "KINGLET_SEALED_EXE"

extern char **environ;

static int memfd_new(const char *name)
{
    /* MFD_EXEC: kernels with vm.memfd_noexec refuse to run a memfd that
     * does not ask for it; older kernels reject the flag. */
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if (fd < 0 && errno == EINVAL)
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    return fd < 0 ? -errno : fd;
}

static int seal(int fd)
{
    if (fcntl(fd, F_ADD_SEALS, SEALS) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int memfd_sealed(const char *name, const void *data, size_t len)
{
    int fd = memfd_new(name);
    if (fd < 0)
        return fd;
    int r = write_all(fd, data, len);
    if (r < 0) {
        close(fd);
        return r;
    }
    return seal(fd);
}

static int memfd_copy_of_self(void)
{
    _cleanup_close_ int src = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (src < 0 || fstat(src, &st) < 0)
        return -errno;
    int fd = memfd_new("kinglet");
    if (fd < 0)
        return fd;
    off_t left = st.st_size;
    while (left > 0) {
        ssize_t n = sendfile(fd, src, NULL, (size_t)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            close(fd);
            return -e;
        }
        left -= n;
    }
    return seal(fd);
}

/* An O_PATH fd of our binary seen through a fresh, detached, read-only
 * overlayfs (see the top of the file), or -errno. */
static int overlay_view_of_self(void)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0)
        return n < 0 ? -errno : -ENOENT;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (path[0] != '/' || !slash || !slash[1])
        return -ENOENT; /* deleted, or not a path we can open again */
    *slash = '\0';
    const char *dir = path[0] ? path : "/", *name = slash + 1;

    _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return -errno;
    _cleanup_close_ int tctx = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    if (tctx < 0)
        return -errno;
    if (syscall(SYS_fsconfig, tctx, FSCONFIG_SET_STRING, "size", "4k", 0) < 0 ||
        syscall(SYS_fsconfig, tctx, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return -errno;
    _cleanup_close_ int empty =
        (int)syscall(SYS_fsmount, tctx, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC);
    if (empty < 0)
        return -errno;
    _cleanup_close_ int octx = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    if (octx < 0)
        return -errno;
    /* Two lower layers and no upper one: a read-only overlay. The binary's
     * directory on top, so that nothing in the empty one can mask it. */
    if (syscall(SYS_fsconfig, octx, FSCONFIG_SET_FD, "lowerdir+", NULL, dirfd) < 0 ||
        syscall(SYS_fsconfig, octx, FSCONFIG_SET_FD, "lowerdir+", NULL, empty) < 0)
        return -errno;
    /* Only to keep "xino" notices out of the kernel log. */
    syscall(SYS_fsconfig, octx, FSCONFIG_SET_STRING, "xino", "off", 0);
    if (syscall(SYS_fsconfig, octx, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return -errno;
    _cleanup_close_ int mnt =
        (int)syscall(SYS_fsmount, octx, FSMOUNT_CLOEXEC,
                     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
    if (mnt < 0)
        return -errno;
    int fd = openat(mnt, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* The same file as the one we run (overlayfs has its own st_dev and
     * st_ino, so compare what it cannot change). */
    struct stat a, b;
    if (fstat(fd, &a) < 0 || stat("/proc/self/exe", &b) < 0 || !S_ISREG(a.st_mode) ||
        a.st_size != b.st_size || a.st_mtim.tv_sec != b.st_mtim.tv_sec ||
        a.st_mtim.tv_nsec != b.st_mtim.tv_nsec) {
        close(fd);
        return -ESTALE;
    }
    return fd;
}

bool exe_is_sealed(void)
{
    _cleanup_close_ int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    /* A sealed memfd cannot be written whoever made it. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals >= 0)
        return (seals & SEALS) == SEALS;
    /* A read-only overlayfs only if we made it: a read-only mount of the
     * host could be made writable again. */
    struct statfs sf;
    return getenv(MARK_ENV) && fstatfs(fd, &sf) == 0 &&
           (unsigned long)sf.f_type == OVERLAYFS_SUPER_MAGIC && (sf.f_flags & ST_RDONLY);
}

static bool self_sealed;

int exe_reexec_sealed(char **argv)
{
    if (self_sealed || exe_is_sealed()) {
        /* Nothing of ours that we run later needs to know. */
        self_sealed = true;
        unsetenv(MARK_ENV);
        return 0;
    }
    /* The mark says how we were executed again: "overlay", or "memfd" (a
     * mark inherited from elsewhere, or an overlay view this process does
     * not recognise, falls back to the memfd; never loop). */
    const char *mark = getenv(MARK_ENV);
    if (mark && strcmp(mark, "memfd") == 0) {
        unsetenv(MARK_ENV);
        return -ELOOP;
    }
    int fd = mark ? -1 : overlay_view_of_self();
    const char *how = "overlay";
    if (fd < 0) {
        fd = memfd_copy_of_self();
        how = "memfd";
    }
    if (fd < 0)
        return fd;
    if (setenv(MARK_ENV, how, 1) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    syscall(SYS_execveat, fd, "", argv, environ, AT_EMPTY_PATH);
    int e = errno;
    unsetenv(MARK_ENV);
    close(fd);
    return -e;
}

/* ---- the daemon's children ---- */

static int children_fd = -1;
static char children_path[64];
static char *children_env[8] = {MARK_ENV "=overlay", NULL};

#ifdef KINGLET_SANITIZERS
/* A sanitizer build hands the sanitizers' options on to its children (and
 * they to their monitors, monitor/launch.c), so that the test run's
 * settings and report paths reach every process of ours; a plain build
 * passes nothing of its environment. */
__attribute__((constructor)) static void children_env_sanitizers(void)
{
    static const char *const names[] = {"ASAN_OPTIONS",
                                        "UBSAN_OPTIONS",
                                        "TSAN_OPTIONS",
                                        "KINGLET_MONITOR_ASAN_OPTIONS",
                                        "KINGLET_MONITOR_UBSAN_OPTIONS",
                                        "KINGLET_MONITOR_REPORT"};
    size_t n = 1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v && asprintf(&children_env[n], "%s=%s", names[i], v) > 0)
            n++;
    }
}
#endif

int exe_seal_for_children(void)
{
    if (children_fd >= 0 || self_sealed)
        return 0; /* a sealed daemon's children start from its own view */
    int fd = overlay_view_of_self();
    if (fd < 0)
        return fd;
    children_fd = fd;
    snprintf(children_path, sizeof(children_path), "/proc/self/fd/%d", fd);
    return 0;
}

const char *exe_children_path(void) { return children_fd >= 0 ? children_path : "/proc/self/exe"; }

char *const *exe_children_env(void)
{
#ifdef KINGLET_SANITIZERS
    return children_fd >= 0 || self_sealed ? children_env : children_env + 1;
#else
    return children_fd >= 0 || self_sealed ? children_env : NULL;
#endif
}
