/* oci/rootfs: the container's root: propagation, the self bind mount,
 * pivot_root (or MS_MOVE + chroot where pivot_root is impossible, as on an
 * initramfs), then what is done from inside: sysctl, readonlyPaths,
 * maskedPaths and a read-only root. */
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "oci/internal.h"

/* The mount point of the mount that holds path (an absolute path): the
 * highest directory from path up that is on the same mount. */
static int mount_point_of(const char *path, char *buf, size_t size)
{
    struct statx sx;
    if (statx(AT_FDCWD, path, 0, STATX_MNT_ID, &sx) < 0)
        return -errno;
    uint64_t id = sx.stx_mnt_id;
    if ((size_t)snprintf(buf, size, "%s", path) >= size)
        return -ENAMETOOLONG;
    for (;;) {
        char *slash = strrchr(buf, '/');
        if (!slash || (slash == buf && !buf[1]))
            return 0;
        char keep = slash == buf ? slash[1] : '\0';
        if (slash == buf)
            slash[1] = '\0'; /* the parent is "/" */
        else
            *slash = '\0';
        if (statx(AT_FDCWD, buf, 0, STATX_MNT_ID, &sx) < 0 || sx.stx_mnt_id != id) {
            /* back to the child: it is the mount point */
            if (slash == buf)
                slash[1] = keep;
            else
                *slash = '/';
            return 0;
        }
    }
}

int oci_rootfs_prepare(const struct oci_spec *spec, int root, int *ret_rootfd, struct err *err)
{
    /* Nothing we mount may propagate back to the host, unless the spec
     * asks for a shared root (bidirectional volumes): then the copies of
     * the host's mounts stay peers of theirs, so that a bind mount of a
     * shared host directory made rshared is one, both ways. */
    unsigned long prop = MS_REC | MS_SLAVE;
    if (spec->rootfs_propagation & (MS_PRIVATE | MS_SLAVE | MS_SHARED))
        prop = spec->rootfs_propagation | MS_REC;
    if (mount(NULL, "/", NULL, prop, NULL) < 0)
        return err_set(err, errno, "make `/` %s",
                       prop & MS_PRIVATE  ? "private"
                       : prop & MS_SHARED ? "shared"
                                          : "slave");
    if (prop & MS_SHARED) {
        /* As runc does: the mount that holds the rootfs becomes private
         * here, so that the rootfs bind below (and all that is mounted in
         * it) does not propagate to the host, and pivot_root accepts it. */
        char mp[PATH_MAX];
        int r = mount_point_of(spec->root_path, mp, sizeof(mp));
        if (r < 0)
            return err_set(err, -r, "`root.path`: find the mount of `%s`", spec->root_path);
        if (mount(NULL, mp, NULL, MS_PRIVATE, NULL) < 0)
            return err_set(err, errno, "make `%s` private", mp);
    }
    if (root >= 0) {
        /* The self bind by descriptor: a clone of the tree attached on
         * top of it; the clone's descriptor is then the root. */
        int tree = (int)syscall(SYS_open_tree, root, "",
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
        if (tree < 0)
            return err_set(err, errno, "`root.path`: clone `%s`", spec->root_path);
        if (syscall(SYS_move_mount, tree, "", root, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
            int e = errno;
            close(tree);
            return err_set(err, e, "`root.path`: bind `%s`", spec->root_path);
        }
        *ret_rootfd = tree;
        return 0;
    }
    if (mount(spec->root_path, spec->root_path, NULL, MS_BIND | MS_REC, NULL) < 0)
        return err_set(err, errno, "`root.path`: bind `%s`", spec->root_path);
    int fd = open(spec->root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "`root.path`: open `%s`", spec->root_path);
    *ret_rootfd = fd;
    return 0;
}

int oci_rootfs_pivot(int rootfd, bool no_pivot, struct err *err)
{
    _cleanup_close_ int oldroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (oldroot < 0)
        return err_set(err, errno, "open `/`");
    if (fchdir(rootfd) < 0)
        return err_set(err, errno, "chdir to the rootfs");
    if (!no_pivot && oci_pivot_root(".", ".") == 0) {
        /* The old root is now stacked on the new one; detach it without
         * propagating the unmount to the host. From inside it, as runc
         * does: "." in the new root would make the new root's mounts
         * slaves (and a bidirectional volume one-way). */
        if (fchdir(oldroot) < 0)
            return err_set(err, errno, "chdir to the old root");
        if (mount(NULL, ".", NULL, MS_SLAVE | MS_REC, NULL) < 0)
            return err_set(err, errno, "make the old root slave");
        if (umount2(".", MNT_DETACH) < 0)
            return err_set(err, errno, "detach the old root");
    } else if (no_pivot || errno == EINVAL) {
        /* An initramfs root cannot be pivoted away from. */
        if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
            return err_set(err, errno, "move the rootfs to `/`");
        if (chroot(".") < 0)
            return err_set(err, errno, "chroot");
    } else {
        return err_set(err, errno, "pivot_root");
    }
    if (chdir("/") < 0)
        return err_set(err, errno, "chdir `/`");
    return 0;
}

/* Masks and read-only copies are attached through descriptors (the path is
 * never resolved again), which needs no /proc in the container. */
static int mask_path(const char *path, int nullfd, struct err *err)
{
    _cleanup_close_ int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errno, "`linux.maskedPaths`: `%s`", path);
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_set(err, errno, "`linux.maskedPaths`: `%s`", path);
    if (S_ISLNK(st.st_mode))
        return 0;
    _cleanup_close_ int tree = -1;
    if (S_ISDIR(st.st_mode))
        tree = oci_mount_fs_detached("tmpfs", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                     "size=0,mode=0555", err);
    else if ((tree = open_tree(nullfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)) <
             0)
        err_set(err, errno, "bind /dev/null");
    if (tree < 0 || oci_mount_tree_attach(tree, fd, 0, false, 0, err) < 0)
        return err_wrap(err, "`linux.maskedPaths`: mask `%s`", path);
    return 0;
}

static int readonly_path(const char *path, struct err *err)
{
    _cleanup_close_ int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errno, "`linux.readonlyPaths`: `%s`", path);
    }
    /* A read-only copy of the whole tree there, attached on it: a mount
     * below (a volume in /proc/sys) is read-only too. */
    _cleanup_close_ int tree =
        open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    if (tree < 0)
        return err_set(err, errno, "`linux.readonlyPaths`: bind `%s`", path);
    if (oci_mount_tree_attach(tree, fd, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, true, 0,
                              err) < 0)
        return err_wrap(err, "`linux.readonlyPaths`: `%s`", path);
    return 0;
}

static int write_sysctl(const struct oci_sysctl *s, struct err *err)
{
    char path[PATH_MAX] = "sys/";
    size_t off = strlen(path);
    for (const char *k = s->key; *k && off < sizeof(path) - 1; k++)
        path[off++] = *k == '.' ? '/' : *k;
    path[off] = '\0';
    _cleanup_close_ int fd = oci_proc_open(path, O_WRONLY, err);
    if (fd < 0)
        return err_wrap(err, "`linux.sysctl.%s`", s->key);
    size_t len = strlen(s->value);
    if (write(fd, s->value, len) != (ssize_t)len)
        return err_set(err, errno ? errno : EIO, "`linux.sysctl.%s`: write `%s`", s->key, s->value);
    return 0;
}

int oci_rootfs_finalize(const struct oci_spec *spec, struct err *err)
{
    int r;
    for (size_t i = 0; i < spec->n_sysctl; i++)
        if ((r = write_sysctl(&spec->sysctl[i], err)) < 0)
            return r;
    if (spec->rootfs_propagation && mount(NULL, "/", NULL, spec->rootfs_propagation, NULL) < 0)
        return err_set(err, errno, "`linux.rootfsPropagation`");
    for (size_t i = 0; i < spec->n_readonly; i++)
        if ((r = readonly_path(spec->readonly_paths[i], err)) < 0)
            return r;
    if (spec->n_masked) {
        /* Only ever bind a real /dev/null: the image could have put
         * anything there. */
        _cleanup_close_ int nullfd = open("/dev/null", O_PATH | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (nullfd < 0 || fstat(nullfd, &st) < 0 || !S_ISCHR(st.st_mode) ||
            st.st_rdev != makedev(1, 3))
            return err_set(err, nullfd < 0 ? errno : EPERM,
                           "`linux.maskedPaths`: `/dev/null` in the container is not the null "
                           "device");
        for (size_t i = 0; i < spec->n_masked; i++)
            if ((r = mask_path(spec->masked_paths[i], nullfd, err)) < 0)
                return r;
    }
    if (spec->root_readonly) {
        _cleanup_close_ int fd = open("/", O_PATH | O_CLOEXEC);
        if (fd < 0 || oci_mount_fd_remount(fd, MS_RDONLY, err) < 0) {
            /* Without /proc: by path. */
            if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
                return err_set(err, errno, "`root.readonly`: remount `/` read-only");
        }
    }
    return 0;
}
