/* The overlay mounts a container is made of, in CreateContainer's worker:
 * its rootfs (the image's layers under its writable layer) and its image
 * volumes (KEP-4639: another image's layers, read-only, at a path of the
 * container, or a directory of them: image_sub_path).
 *
 * An image volume is mounted in the host's mount namespace at
 * <bundle>/imagevols/<k> (k: the index of its Mount in the config), as the
 * rootfs is at <bundle>/rootfs, and the container gets a read-only bind of
 * it (or of its sub path): both live as long as the bundle, so a restart
 * of the daemon finds them in place, and container_remains_remove unmounts
 * them before it removes the bundle. The image's layers are never written
 * (a read-only overlay without an upper directory, or a read-only bind of
 * a one-layer image, which overlayfs would refuse), so a sub path
 * resolved once stays what it was. Blocking: workers only. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>

#include "cri/containers.h"

int ctr_overlay_mount(char *const *lowers, size_t n, const char *layer, const char *target,
                      struct err *err)
{
    int fds[CTR_LAYERS_MAX];
    size_t nfd = 0;
    struct buf opts = {0};
    int r = 0;
    if (n == 0 || n > CTR_LAYERS_MAX)
        return err_set(err, EINVAL, "image has %zu layers (1 to %d supported)", n, CTR_LAYERS_MAX);
    /* Lower directories as /proc/self/fd/N of O_PATH descriptors: short,
     * and immune to renames meanwhile. overlayfs lists the top layer
     * first. */
    buf_printf(&opts, "lowerdir=");
    for (size_t i = n; i-- > 0;) {
        int fd = open(lowers[i], O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            r = err_set(err, errno, "image layer `%s`", lowers[i]);
            goto out;
        }
        fds[nfd++] = fd;
        buf_printf(&opts, "%s/proc/self/fd/%d", i + 1 == n ? "" : ":", fd);
    }
    if (!layer && n == 1) {
        /* overlayfs wants two lower directories without an upper one */
        char src[64];
        snprintf(src, sizeof(src), "/proc/self/fd/%d", fds[0]);
        if (mount(src, target, NULL, MS_BIND, NULL) < 0) {
            r = err_set(err, errno, "bind the image's layer");
        } else if (mount(NULL, target, NULL,
                         MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV | MS_NOSUID, NULL) < 0) {
            r = err_set(err, errno, "make the image's layer read-only");
            umount2(target, MNT_DETACH);
        }
        goto out;
    }
    if (layer)
        buf_printf(&opts, ",upperdir=%s/upper,workdir=%s/work", layer, layer);
    buf_printf(&opts, ",index=off,xino=off");
    if (buf_append(&opts, "", 1) < 0) {
        r = err_set(err, ENOMEM, "overlay options");
        goto out;
    }
    if (opts.len > 4095) {
        r = err_set(err, E2BIG, "image has too many layers (%zu) for one overlay mount", n);
        goto out;
    }
    unsigned long flags = MS_NODEV | (layer ? 0 : MS_RDONLY | MS_NOSUID);
    if (mount("overlay", target, "overlay", flags, (char *)opts.data) < 0)
        r = err_set(err, errno, "mount an overlay of the image's layers");
out:
    for (size_t i = 0; i < nfd; i++)
        close(fds[i]);
    buf_free(&opts);
    return r;
}

/* A detached copy of the directory at path, idmapped through userns (the
 * pod's user namespace: its ID 0 sees the files of host ID 0 as its own). */
static int idmapped_tree(const char *path, int userns, struct err *err)
{
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "open `%s`", path);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns};
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
        int e = errno;
        close(fd);
        return err_set(err, e, "idmap `%s` (does its filesystem support idmapped mounts?)", path);
    }
    return fd;
}

int ctr_overlay_mount_idmapped(char *const *lowers, size_t n, const char *layer, const char *target,
                               int userns, uid_t root_uid, gid_t root_gid, struct err *err)
{
    int fds[CTR_LAYERS_MAX];
    size_t nfd = 0;
    int r = 0;
    if (n == 0 || n > CTR_LAYERS_MAX)
        return err_set(err, EINVAL, "image has %zu layers (1 to %d supported)", n, CTR_LAYERS_MAX);
    _cleanup_close_ int ctx = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    _cleanup_close_ int upper = -1, work = -1, mnt = -1;
    if (ctx < 0)
        return err_set(err, errno, "overlayfs");
    /* Layers given as descriptors of idmapped trees (Linux 6.13), top
     * first; the trees stay open until the superblock holds its own
     * private clones of them. */
    for (size_t i = n; i-- > 0;) {
        if ((fds[nfd] = idmapped_tree(lowers[i], userns, err)) < 0) {
            r = fds[nfd];
            err_wrap(err, "image layer");
            goto out;
        }
        if (!layer && n == 1) {
            /* overlayfs wants two lower directories without an upper
             * one: the layer's idmapped tree itself, read-only */
            struct mount_attr a = {.attr_set =
                                       MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID};
            if (syscall(SYS_mount_setattr, fds[0], "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 ||
                syscall(SYS_move_mount, fds[0], "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                r = err_set(err, errno, "attach the image's idmapped layer at `%s`", target);
            nfd++;
            goto out;
        }
        if (syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "lowerdir+", NULL, fds[nfd++]) < 0) {
            r = err_set(err, errno, "overlayfs: image layer `%s`", lowers[i]);
            goto out;
        }
    }
    if (!layer)
        goto create; /* read-only: an image volume */
    /* The writable layer is not idmapped: overlayfs creates its work
     * directories with our credentials, which an idmapping of the pod's
     * range cannot express. What the container writes is thus its mapped
     * IDs' on disk, and the upper directory itself (empty, made by us) is
     * the pod's root's, so that `/` is root's inside. */
    upper = openat(AT_FDCWD, layer, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (upper >= 0) {
        int dir = upper;
        upper = openat(dir, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        work = openat(dir, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(dir);
    }
    if (upper < 0 || work < 0) {
        r = err_set(err, errno, "open `%s/upper` and `%s/work`", layer, layer);
        goto out;
    }
    if (fchown(upper, root_uid, root_gid) < 0) {
        r = err_set(err, errno, "chown `%s/upper` to the pod's root", layer);
        goto out;
    }
    if (syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "upperdir", NULL, upper) < 0 ||
        syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "workdir", NULL, work) < 0 ||
        syscall(SYS_fsconfig, ctx, FSCONFIG_SET_STRING, "index", "off", 0) < 0 ||
        syscall(SYS_fsconfig, ctx, FSCONFIG_SET_STRING, "xino", "off", 0) < 0) {
        r = err_set(err, errno, "overlayfs: the writable layer `%s`", layer);
        goto out;
    }
create:
    syscall(SYS_fsconfig, ctx, FSCONFIG_SET_STRING, "xino", "off", 0);
    if (syscall(SYS_fsconfig, ctx, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
        r = err_set(err, errno, "mount an idmapped overlay of the image's layers");
        goto out;
    }
    mnt = (int)syscall(SYS_fsmount, ctx, FSMOUNT_CLOEXEC,
                       MOUNT_ATTR_NODEV | (layer ? 0 : MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID));
    if (mnt < 0 || syscall(SYS_move_mount, mnt, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        r = err_set(err, errno, "attach the idmapped overlay at `%s`", target);
out:
    for (size_t i = 0; i < nfd; i++)
        close(fds[i]);
    return r;
}

/* The host path of sub inside the image mounted at mnt: resolved beneath
 * it (a `..` or an absolute symlink that would leave it is refused, never
 * followed), without magic links or other mounts. */
static int sub_path_resolve(const char *mnt, const char *sub, char **ret, struct err *err)
{
    _cleanup_close_ int root = open(mnt, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return err_set(err, errno, "open the image volume `%s`", mnt);
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    _cleanup_close_ int fd = (int)syscall(SYS_openat2, root, sub, &how, sizeof(how));
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return err_set_msg(err, ENOENT, "image_sub_path `%.200s` does not exist in the image",
                               sub);
        if (errno == EXDEV || errno == ELOOP)
            return err_set_msg(err, EINVAL,
                               "image_sub_path `%.200s` leads out of the image (through `..` or "
                               "an absolute symlink)",
                               sub);
        return err_set(err, errno, "image_sub_path `%.200s`", sub);
    }
    char proc[64], path[PATH_MAX + 1];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    /* The host path goes into the spec as the bind's source: one the
     * kernel cannot name in full (ENAMETOOLONG past PATH_MAX), or that
     * fills the buffer and may be cut short, is refused, never used cut. */
    ssize_t n = readlink(proc, path, sizeof(path));
    if ((n < 0 && errno == ENAMETOOLONG) || n >= (ssize_t)sizeof(path) - 1)
        return err_set_msg(err, ENAMETOOLONG,
                           "image_sub_path `%.200s` resolves to a host path longer than PATH_MAX",
                           sub);
    if (n < 0)
        return err_set(err, errno, "image_sub_path `%.200s`", sub);
    path[n] = '\0';
    size_t ml = strlen(mnt);
    /* what openat2 resolved beneath root is below mnt: checked anyway */
    if (strncmp(path, mnt, ml) != 0 || (path[ml] != '/' && path[ml] != '\0'))
        return err_set_msg(err, EINVAL, "image_sub_path `%.200s` leads out of the image", sub);
    if (!(*ret = strdup(path)))
        return err_set(err, ENOMEM, "image_sub_path");
    return 0;
}

int ctr_imagevol_mount(const char *bundle, size_t k, char *const *lowers, size_t n, const char *sub,
                       int userns, char **ret_source, struct err *err)
{
    char dir[4300], mnt[4400];
    snprintf(dir, sizeof(dir), "%s/imagevols", bundle);
    snprintf(mnt, sizeof(mnt), "%s/%zu", dir, k);
    if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || mkdir(mnt, 0755) < 0)
        return err_set(err, errno, "create `%s`", mnt);
    int r = userns >= 0 ? ctr_overlay_mount_idmapped(lowers, n, NULL, mnt, userns, 0, 0, err)
                        : ctr_overlay_mount(lowers, n, NULL, mnt, err);
    if (r < 0)
        return r;
    if (sub && *sub)
        return sub_path_resolve(mnt, sub, ret_source, err);
    if (!(*ret_source = strdup(mnt)))
        return err_set(err, ENOMEM, "image volume");
    return 0;
}

int ctr_imagevols_unmount(const char *bundle, struct err *err)
{
    char dir[4300];
    snprintf(dir, sizeof(dir), "%s/imagevols", bundle);
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : err_set(err, errno, "open `%s`", dir);
    int r = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char mnt[4600];
        snprintf(mnt, sizeof(mnt), "%s/%s", dir, de->d_name);
        if (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT &&
            r == 0)
            r = err_set(err, errno, "unmount `%s`", mnt);
    }
    closedir(d);
    return r;
}
