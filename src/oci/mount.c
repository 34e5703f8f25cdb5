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
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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
    int fd = openat2_retry(rootfd, path, &how);
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

/* The per-mount flags of `flags` as mount_setattr(2) takes them. */
static struct mount_attr attr_of(unsigned long flags)
{
    static const struct {
        unsigned long ms;
        uint64_t attr;
    } map[] = {
        {MS_RDONLY, MOUNT_ATTR_RDONLY},         {MS_NOSUID, MOUNT_ATTR_NOSUID},
        {MS_NODEV, MOUNT_ATTR_NODEV},           {MS_NOEXEC, MOUNT_ATTR_NOEXEC},
        {MS_NODIRATIME, MOUNT_ATTR_NODIRATIME},
    };
    struct mount_attr a = {0};
    for (size_t i = 0; i < ARRAY_SIZE(map); i++)
        if (flags & map[i].ms)
            a.attr_set |= map[i].attr;
    if (flags & (MS_NOATIME | MS_RELATIME | MS_STRICTATIME)) {
        /* one atime mode replaces the other */
        a.attr_clr |= MOUNT_ATTR__ATIME;
        a.attr_set |= flags & MS_NOATIME       ? MOUNT_ATTR_NOATIME
                      : flags & MS_STRICTATIME ? MOUNT_ATTR_STRICTATIME
                                               : MOUNT_ATTR_RELATIME;
    }
    return a;
}

static bool have_mount_setattr(void)
{
    static int have = -1;
    if (have < 0)
        have = syscall(SYS_mount_setattr, -1, "", 0, NULL, 0) < 0 && errno != ENOSYS;
    return have;
}

int oci_mount_tree_attach(int tree, int dfd, unsigned long flags, bool rec,
                          unsigned long propagation, struct err *err)
{
    bool setattr = have_mount_setattr();
    struct mount_attr a = attr_of(flags);
    unsigned at = AT_EMPTY_PATH | (rec ? AT_RECURSIVE : 0);
    /* Read-only and the rest before the tree is attached: it is never
     * seen writable, and no path is resolved again after the attach (a
     * sibling sharing a volume could swap a directory on that path for a
     * symlink to `/`, CVE-2021-30465). */
    if (setattr && (a.attr_set || a.attr_clr) &&
        syscall(SYS_mount_setattr, tree, "", at, &a, sizeof(a)) < 0)
        return err_set(err, errno, "set the mount's flags");
    if (move_mount(tree, "", dfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return err_set(err, errno, "attach the mount");
    /* From here the tree's descriptor is the attached mount's root. */
    if (!setattr && (a.attr_set || a.attr_clr) &&
        oci_mount_fd_remount(tree, flags & ~(MS_REC | MS_BIND), err) < 0)
        return err_wrap(err, "set the mount's flags (a kernel without mount_setattr: not below "
                             "the mount)");
    /* Propagation once attached: a peer group is made with its place. */
    propagation &= MS_SHARED | MS_SLAVE | MS_PRIVATE | MS_UNBINDABLE;
    if (!propagation)
        return 0;
    if (setattr) {
        struct mount_attr p = {.propagation = propagation};
        if (syscall(SYS_mount_setattr, tree, "", at, &p, sizeof(p)) < 0)
            return err_set(err, errno, "set the mount's propagation");
        return 0;
    }
    char path[64];
    fd_path(path, sizeof(path), tree);
    if (mount(NULL, path, NULL, propagation | (rec ? MS_REC : 0), NULL) < 0)
        return err_set(err, errno, "set the mount's propagation");
    return 0;
}

int oci_mount_fs_detached(const char *fstype, const char *source, unsigned long flags,
                          const char *data, struct err *err)
{
    _cleanup_close_ int fs = (int)syscall(SYS_fsopen, fstype, FSOPEN_CLOEXEC);
    if (fs < 0)
        return err_set(err, errno, "fsopen %s", fstype);
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", source, 0) < 0)
        return err_set(err, errno, "%s: source `%s`", fstype, source);
    static const struct {
        unsigned long ms;
        const char *name;
    } sb[] = {{MS_SYNCHRONOUS, "sync"}, {MS_DIRSYNC, "dirsync"}, {MS_LAZYTIME, "lazytime"}};
    for (size_t i = 0; i < ARRAY_SIZE(sb); i++)
        if ((flags & sb[i].ms) &&
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, sb[i].name, NULL, 0) < 0)
            return err_set(err, errno, "%s: `%s`", fstype, sb[i].name);
    _cleanup_free_ char *opts = data ? strdup(data) : NULL;
    if (data && !opts)
        return err_set(err, ENOMEM, "%s", fstype);
    for (char *save = NULL, *o = opts ? strtok_r(opts, ",", &save) : NULL; o;
         o = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(o, '=');
        if (eq)
            *eq = '\0';
        long r = eq ? syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, o, eq + 1, 0)
                    : syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, o, NULL, 0);
        if (r < 0)
            return err_set(err, errno, "%s: option `%s`", fstype, o);
    }
    if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return err_set(err, errno, "create a %s", fstype);
    struct mount_attr a = attr_of(flags);
    int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, (unsigned)a.attr_set);
    if (m < 0)
        return err_set(err, errno, "fsmount %s", fstype);
    return m;
}

/* Binds source (a host path, or a host directory for sysfs and cgroup2)
 * on dfd. */
static int bind_at(int srcfd, int dfd, unsigned long flags, unsigned long propagation,
                   struct err *err)
{
    bool rec = flags & MS_REC;
    _cleanup_close_ int tree = open_tree(
        srcfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | (rec ? AT_RECURSIVE : 0));
    if (tree < 0)
        return err_set(err, errno, "bind");
    return oci_mount_tree_attach(tree, dfd, flags & ~(MS_REC | MS_BIND), rec, propagation, err);
}

/* A destination that, resolved, lands on procfs (through a symlink in the
 * image to /proc, say) must still be a place runc allows. */
static int check_proc_destination(const struct oci_mount *m, size_t idx, int dfd, struct err *err)
{
    struct statfs sf;
    if (fstatfs(dfd, &sf) < 0)
        return err_set(err, errno, "`mounts[%zu].destination`", idx);
    enum oci_proc_place place = oci_mount_proc_place(m->destination);
    if (sf.f_type == PROC_SUPER_MAGIC && place != OCI_PROC_ROOT && place != OCI_PROC_ALLOWED)
        return err_set(err, EINVAL,
                       "`mounts[%zu].destination`: `%s` resolves inside /proc, where only a few "
                       "files may be mounted over",
                       idx, m->destination);
    return 0;
}

static int mount_one(const struct oci_mount *m, size_t idx, int rootfd, int idmap_fd,
                     struct err *err)
{
    const char *type = m->type ? m->type : "none";
    bool is_dir = true;
    _cleanup_close_ int srcfd = -1;
    if (m->bind) {
        /* A source the parent opened for us (see below): its path may be
         * beyond the reach of the user namespace's root. */
        srcfd = idmap_fd >= 0 ? fcntl(idmap_fd, F_DUPFD_CLOEXEC, 3)
                              : open(m->source, O_PATH | O_CLOEXEC);
        if (srcfd < 0)
            return err_set(err, errno, "`mounts[%zu].source`: `%s`", idx, m->source);
        struct stat st;
        struct statfs sf;
        if (fstat(srcfd, &st) < 0 || fstatfs(srcfd, &sf) < 0)
            return err_set(err, errno, "`mounts[%zu].source`: `%s`", idx, m->source);
        is_dir = S_ISDIR(st.st_mode);
        if (oci_mount_proc_place(m->destination) == OCI_PROC_ROOT && sf.f_type != PROC_SUPER_MAGIC)
            return err_set(err, EINVAL,
                           "`mounts[%zu]`: `%s` is not a procfs: it cannot be mounted on /proc",
                           idx, m->source);
    }
    _cleanup_close_ int dfd = oci_path_open_in_root(rootfd, m->destination, true, is_dir, err);
    if (dfd < 0)
        return err_wrap(err, "`mounts[%zu].destination`", idx);
    if (check_proc_destination(m, idx, dfd, err) < 0)
        return -EINVAL;
    unsigned long flags = m->flags & ~MS_REMOUNT;
    if (m->rro && !have_mount_setattr())
        return err_set(err, ENOTSUP, "`mounts[%zu]`: rro needs mount_setattr (Linux 5.12)", idx);
    /* Read-only recursively: every mount below too. A plain read-only
     * rbind is made read-only recursively as well, or a mount below a
     * read-only volume would stay writable. */
    bool rec = (flags & MS_REC) || m->rro;
    if (m->idmap || (m->bind && idmap_fd >= 0)) {
        /* The parent made the idmapped tree (it needs privileges over the
         * source's filesystem that we, in the user namespace, lack), or
         * the plain tree of a bind whose source we could not reach. */
        if (idmap_fd < 0)
            return err_set(err, ENOTSUP, "`mounts[%zu]`: idmap needs a new user namespace", idx);
        if (oci_mount_tree_attach(idmap_fd, dfd, flags & ~(MS_REC | MS_BIND), rec, m->propagation,
                                  err) < 0)
            return err_wrap(err, "`mounts[%zu]`: the idmapped `%s` on `%s`", idx, m->source,
                            m->destination);
        return 0;
    }
    if (m->bind) {
        if (m->rro)
            flags |= MS_REC;
        if (bind_at(srcfd, dfd, flags, m->propagation, err) < 0)
            return err_wrap(err, "`mounts[%zu]`: `%s` on `%s`", idx, m->source, m->destination);
        return 0;
    }
    const char *fstype = type;
    /* cgroup v1 is not a goal: a "cgroup" mount gets the unified
     * hierarchy, which every kernel we run on has. A new filesystem has
     * nothing below it yet: read-only recursively is read-only. */
    if (strcmp(type, "cgroup") == 0)
        fstype = "cgroup2";
    flags &= ~MS_REC;
    const char *source = m->source ? m->source : fstype;
    int r;
    if (m->propagation) {
        _cleanup_close_ int fs = oci_mount_fs_detached(fstype, source, flags, m->data, err);
        r = fs < 0 ? fs : oci_mount_tree_attach(fs, dfd, 0, false, m->propagation, err);
    } else {
        char dst[64];
        fd_path(dst, sizeof(dst), dfd);
        r = mount(source, dst, fstype, flags, m->data) < 0 ? err_set(err, errno, "mount") : 0;
    }
    if (r == -EPERM && (strcmp(fstype, "sysfs") == 0 || strcmp(fstype, "cgroup2") == 0)) {
        /* No sysfs or cgroup2 of our own without a network or cgroup
         * namespace of our own in a user namespace: bind the host's,
         * as runc does. */
        const char *host = strcmp(fstype, "sysfs") == 0 ? "/sys" : "/sys/fs/cgroup";
        _cleanup_close_ int hfd = open(host, O_PATH | O_DIRECTORY | O_CLOEXEC);
        r = hfd < 0 ? err_set(err, errno, "open `%s`", host)
                    : bind_at(hfd, dfd, flags | MS_REC, m->propagation, err);
    }
    if (r < 0)
        return err_wrap(err, "`mounts[%zu]`: %s on `%s`", idx, fstype, m->destination);
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
