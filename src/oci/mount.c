/* oci/mount: the spec's `mounts`, made safely inside the rootfs.
 *
 * Every destination is resolved with openat2(RESOLVE_IN_ROOT) against the
 * rootfs, component by component when something must be created, so that a
 * symlink in the (untrusted) image cannot redirect a mount outside it: a
 * link to "/etc" means <rootfs>/etc. The mount then targets the resolved
 * file descriptor through /proc/self/fd/N, never the path again. Runs in
 * the container init, before pivot_root, with the host /proc visible. */
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>

#include "oci/internal.h"

static int openat2_in_root(int rootfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    while (*path == '/')
        path++;
    if (!*path)
        path = ".";
    int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
    return fd < 0 ? -errno : fd;
}

static int open_in_root(int rootfd, const char *path, bool create, bool as_dir, int depth,
                        struct err *err);

int oci_path_open_in_root(int rootfd, const char *path, bool create, bool as_dir, struct err *err)
{
    return open_in_root(rootfd, path, create, as_dir, 0, err);
}

/* p names a dangling symlink (inside the root): the path its target gives,
 * followed by the rest of the original path. */
static int follow_dangling(int rootfd, const char *p, const char *rest, char *out, size_t size)
{
    char link[PATH_MAX];
    _cleanup_close_ int fd = openat2_in_root(rootfd, p, O_PATH | O_NOFOLLOW);
    if (fd < 0)
        return fd;
    ssize_t n = readlinkat(fd, "", link, sizeof(link) - 1);
    if (n < 0)
        return -errno;
    link[n] = '\0';
    int w;
    if (link[0] == '/') {
        w = snprintf(out, size, "%s/%s", link, rest);
    } else {
        const char *slash = strrchr(p, '/');
        int plen = slash ? (int)(slash - p) : 0;
        w = snprintf(out, size, "%.*s/%s/%s", plen, p, link, rest);
    }
    return w >= (int)size ? -ENAMETOOLONG : 0;
}

static int open_in_root(int rootfd, const char *path, bool create, bool as_dir, int depth,
                        struct err *err)
{
    if (depth > 40)
        return err_set(err, ELOOP, "`%s` in the rootfs", path);
    int fd = openat2_in_root(rootfd, path, O_PATH);
    if (fd >= 0 || fd != -ENOENT || !create) {
        if (fd < 0)
            return err_set(err, -fd, "open `%s` in the rootfs", path);
        return fd;
    }
    /* Create the missing components one by one, each below a parent that
     * was itself resolved inside the root. */
    char p[PATH_MAX];
    if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
        return err_set(err, ENAMETOOLONG, "`%s`", path);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        p[--len] = '\0';
    char *s = p;
    while (*s == '/')
        s++;
    for (;;) {
        char *e = strchrnul(s, '/');
        bool last = *e == '\0';
        char saved = *e;
        *e = '\0';
        fd = openat2_in_root(rootfd, p, O_PATH);
        if (fd == -ENOENT) {
            char *slash = strrchr(p, '/');
            const char *name = slash ? slash + 1 : p;
            int pfd;
            if (slash && slash != p) {
                *slash = '\0';
                pfd = openat2_in_root(rootfd, p, O_PATH | O_DIRECTORY);
                *slash = '/';
            } else {
                pfd = openat2_in_root(rootfd, "/", O_PATH | O_DIRECTORY);
            }
            if (pfd < 0) {
                *e = saved;
                return err_set(err, -pfd, "open the parent of `%s` in the rootfs", path);
            }
            int r;
            if (!last || as_dir) {
                r = mkdirat(pfd, name, 0755);
            } else {
                r = openat(pfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (r >= 0) {
                    close(r);
                    r = 0;
                }
            }
            if (r < 0 && errno != EEXIST) {
                int e2 = errno;
                close(pfd);
                *e = saved;
                return err_set(err, e2, "create `%s` in the rootfs", p);
            }
            close(pfd);
            fd = openat2_in_root(rootfd, p, O_PATH);
            if (fd == -ENOENT) {
                /* A dangling symlink: create what it points to, resolved
                 * inside the root like everything else. */
                char next[PATH_MAX];
                const char *rest = last ? "" : e + 1;
                int q = follow_dangling(rootfd, p, rest, next, sizeof(next));
                *e = saved;
                if (q < 0)
                    return err_set(err, -q, "`%s` in the rootfs: a dangling symlink", p);
                return open_in_root(rootfd, next, create, as_dir, depth + 1, err);
            }
        }
        *e = saved;
        if (fd < 0)
            return err_set(err, -fd, "open `%s` in the rootfs", path);
        if (last)
            return fd;
        close(fd);
        s = e + 1;
        while (*s == '/')
            s++;
        if (!*s)
            return openat2_in_root(rootfd, p, O_PATH);
    }
}

static void fd_path(char *buf, size_t size, int fd) { snprintf(buf, size, "/proc/self/fd/%d", fd); }

/* Flags a remount must keep: in a user namespace the kernel refuses to
 * drop them (they are "locked"). */
static unsigned long locked_flags(int fd)
{
    struct statvfs sv;
    if (fstatvfs(fd, &sv) < 0)
        return 0;
    unsigned long f = 0;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_RDONLY)
        f |= MS_RDONLY;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

int oci_mount_fd_remount(int fd, unsigned long flags, struct err *err)
{
    char p[64];
    fd_path(p, sizeof(p), fd);
    unsigned long keep = locked_flags(fd) & ~(MS_RDONLY | MS_NOATIME | MS_NODIRATIME | MS_RELATIME);
    if (mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | flags | keep, NULL) < 0) {
        /* Retry keeping every current flag (a locked atime flag). */
        if (mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | flags | locked_flags(fd), NULL) < 0)
            return err_set(err, errno, "remount");
    }
    return 0;
}

static int mount_one(const struct oci_mount *m, size_t idx, int rootfd, int idmap_fd,
                     struct err *err)
{
    const char *type = m->type ? m->type : "none";
    bool is_dir = true;
    _cleanup_close_ int srcfd = -1;
    if (m->bind) {
        srcfd = open(m->source, O_PATH | O_CLOEXEC);
        if (srcfd < 0)
            return err_set(err, errno, "`mounts[%zu].source`: `%s`", idx, m->source);
        struct stat st;
        if (fstat(srcfd, &st) < 0)
            return err_set(err, errno, "`mounts[%zu].source`: `%s`", idx, m->source);
        is_dir = S_ISDIR(st.st_mode);
    }
    _cleanup_close_ int dfd = oci_path_open_in_root(rootfd, m->destination, true, is_dir, err);
    if (dfd < 0)
        return err_wrap(err, "`mounts[%zu].destination`", idx);
    char dst[64], src[64];
    fd_path(dst, sizeof(dst), dfd);
    unsigned long flags = m->flags & ~MS_REMOUNT;
    if (m->idmap) {
        /* The parent made the idmapped tree (it needs privileges over the
         * source's filesystem that we, in the user namespace, lack). */
        if (idmap_fd < 0)
            return err_set(err, ENOTSUP, "`mounts[%zu]`: idmap needs a new user namespace", idx);
        if (move_mount(idmap_fd, "", dfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) <
            0)
            return err_set(err, errno, "`mounts[%zu]`: attach the idmapped `%s` on `%s`", idx,
                           m->source, m->destination);
        unsigned long extra = flags & ~(MS_REC | MS_BIND);
        if (extra) {
            _cleanup_close_ int nfd =
                oci_path_open_in_root(rootfd, m->destination, false, false, err);
            if (nfd < 0 || oci_mount_fd_remount(nfd, extra, err) < 0)
                return err_wrap(err, "`mounts[%zu]`: `%s`", idx, m->destination);
        }
    } else if (m->bind) {
        fd_path(src, sizeof(src), srcfd);
        if (mount(src, dst, NULL, MS_BIND | (flags & MS_REC), NULL) < 0)
            return err_set(err, errno, "`mounts[%zu]`: bind `%s` on `%s`", idx, m->source,
                           m->destination);
        unsigned long extra = flags & ~(MS_REC | MS_BIND);
        if (extra) {
            _cleanup_close_ int nfd =
                oci_path_open_in_root(rootfd, m->destination, false, false, err);
            if (nfd < 0)
                return err_wrap(err, "`mounts[%zu]`", idx);
            if (oci_mount_fd_remount(nfd, extra, err) < 0)
                return err_wrap(err, "`mounts[%zu]`: `%s`", idx, m->destination);
        }
    } else {
        const char *fstype = type;
        /* cgroup v1 is not a goal: a "cgroup" mount gets the unified
         * hierarchy, which every kernel we run on has. */
        if (strcmp(type, "cgroup") == 0)
            fstype = "cgroup2";
        int r = mount(m->source ? m->source : fstype, dst, fstype, flags & ~MS_REC, m->data);
        if (r < 0 && errno == EPERM &&
            (strcmp(fstype, "sysfs") == 0 || strcmp(fstype, "cgroup2") == 0)) {
            /* No sysfs or cgroup2 of our own without a network or cgroup
             * namespace of our own in a user namespace: bind the host's,
             * as runc does. */
            const char *host = strcmp(fstype, "sysfs") == 0 ? "/sys" : "/sys/fs/cgroup";
            r = mount(host, dst, NULL, MS_BIND | MS_REC, NULL);
            if (r == 0) {
                _cleanup_close_ int nfd =
                    oci_path_open_in_root(rootfd, m->destination, false, false, err);
                if (nfd >= 0)
                    oci_mount_fd_remount(nfd, flags & ~MS_REC, NULL);
            }
        }
        if (r < 0)
            return err_set(err, errno, "`mounts[%zu]`: mount %s on `%s`", idx, fstype,
                           m->destination);
    }
    if (m->rro) {
        /* every mount below too, which a remount cannot reach */
        _cleanup_close_ int nfd = oci_path_open_in_root(rootfd, m->destination, false, false, err);
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
        if (nfd < 0)
            return err_wrap(err, "`mounts[%zu]`", idx);
        if (syscall(SYS_mount_setattr, nfd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) <
            0)
            return err_set(err, errno, "`mounts[%zu]`: make `%s` read-only recursively", idx,
                           m->destination);
    }
    if (m->propagation) {
        _cleanup_close_ int nfd = oci_path_open_in_root(rootfd, m->destination, false, false, err);
        if (nfd < 0)
            return err_wrap(err, "`mounts[%zu]`", idx);
        fd_path(dst, sizeof(dst), nfd);
        if (mount(NULL, dst, NULL, m->propagation, NULL) < 0)
            return err_set(err, errno, "`mounts[%zu]`: propagation of `%s`", idx, m->destination);
    }
    return 0;
}

int oci_mounts_setup(const struct oci_spec *spec, int rootfd, const int *idmap_fds, struct err *err)
{
    for (size_t i = 0; i < spec->n_mounts; i++) {
        int r = mount_one(&spec->mounts[i], i, rootfd, idmap_fds ? idmap_fds[i] : -1, err);
        if (r < 0)
            return r;
    }
    return 0;
}
