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

/* The layers, top first (as overlayfs lists them), as descriptors: O_PATH
 * ones, short to name as /proc/self/fd/N and immune to renames meanwhile;
 * or detached trees idmapped through userns (userns >= 0), which stay open
 * until the superblock holds its own clones of them. */
static int layers_open(char *const *lowers, size_t n, int userns, int *fds, struct err *err)
{
    for (size_t k = 0; k < n; k++) {
        const char *path = lowers[n - 1 - k];
        int fd = userns >= 0 ? idmapped_tree(path, userns, err)
                             : open(path, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            int r = userns >= 0 ? err_wrap(err, "image layer")
                                : err_set(err, errno, "image layer `%s`", path);
            while (k-- > 0)
                close(fds[k]);
            return r;
        }
        fds[k] = fd;
    }
    return 0;
}

/* A one-layer image without a writable layer: overlayfs wants two lower
 * directories without an upper one, so the layer itself, read-only. */
static int layer_attach(int fd, bool idmapped, const char *target, struct err *err)
{
    if (idmapped) {
        struct mount_attr a = {.attr_set =
                                   MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID};
        if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 ||
            syscall(SYS_move_mount, fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
            return err_set(err, errno, "attach the image's idmapped layer at `%s`", target);
        return 0;
    }
    char src[64];
    snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
    if (mount(src, target, NULL, MS_BIND, NULL) < 0)
        return err_set(err, errno, "bind the image's layer");
    if (mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV | MS_NOSUID, NULL) <
        0) {
        int e = errno;
        umount2(target, MNT_DETACH);
        return err_set(err, e, "make the image's layer read-only");
    }
    return 0;
}

/* The overlay through mount(2), its layers named by descriptor: any
 * kernel with overlayfs. */
static int overlay_mount_fds(const int *fds, size_t n, const char *layer, const char *target,
                             struct err *err)
{
    struct buf opts = {0};
    buf_printf(&opts, "lowerdir=");
    for (size_t k = 0; k < n; k++)
        buf_printf(&opts, "%s/proc/self/fd/%d", k ? ":" : "", fds[k]);
    if (layer)
        buf_printf(&opts, ",upperdir=%s/upper,workdir=%s/work", layer, layer);
    buf_printf(&opts, ",index=off,xino=off");
    int r = 0;
    if (buf_append(&opts, "", 1) < 0)
        r = err_set(err, ENOMEM, "overlay options");
    else if (opts.len > 4095)
        r = err_set(err, E2BIG, "image has too many layers (%zu) for one overlay mount", n);
    else if (mount("overlay", target, "overlay", MS_NODEV | (layer ? 0 : MS_RDONLY | MS_NOSUID),
                   (char *)opts.data) < 0)
        r = err_set(err, errno, "mount an overlay of the image's layers");
    buf_free(&opts);
    return r;
}

/* The overlay through fsconfig, its layers given as descriptors of
 * idmapped trees (Linux 6.13). */
static int overlay_fsmount(char *const *lowers, const int *fds, size_t n, const char *layer,
                           const char *target, const struct ctr_overlay_idmap *idmap,
                           struct err *err)
{
    _cleanup_close_ int ctx = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    _cleanup_close_ int upper = -1, work = -1, mnt = -1;
    if (ctx < 0)
        return err_set(err, errno, "overlayfs");
    for (size_t k = 0; k < n; k++)
        if (syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "lowerdir+", NULL, fds[k]) < 0)
            return err_set(err, errno, "overlayfs: image layer `%s`", lowers[n - 1 - k]);
    if (layer) {
        /* The writable layer is not idmapped: overlayfs creates its work
         * directories with our credentials, which an idmapping of the
         * pod's range cannot express. What the container writes is thus
         * its mapped IDs' on disk, and the upper directory itself (empty,
         * made by us) is the pod's root's, so that `/` is root's inside. */
        upper = openat(AT_FDCWD, layer, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (upper >= 0) {
            int dir = upper;
            upper = openat(dir, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            work = openat(dir, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            close(dir);
        }
        if (upper < 0 || work < 0)
            return err_set(err, errno, "open `%s/upper` and `%s/work`", layer, layer);
        if (fchown(upper, idmap->root_uid, idmap->root_gid) < 0)
            return err_set(err, errno, "chown `%s/upper` to the pod's root", layer);
        if (syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "upperdir", NULL, upper) < 0 ||
            syscall(SYS_fsconfig, ctx, FSCONFIG_SET_FD, "workdir", NULL, work) < 0)
            return err_set(err, errno, "overlayfs: the writable layer `%s`", layer);
    }
    if (syscall(SYS_fsconfig, ctx, FSCONFIG_SET_STRING, "index", "off", 0) < 0 ||
        syscall(SYS_fsconfig, ctx, FSCONFIG_SET_STRING, "xino", "off", 0) < 0 ||
        syscall(SYS_fsconfig, ctx, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return err_set(err, errno, "mount an idmapped overlay of the image's layers");
    mnt = (int)syscall(SYS_fsmount, ctx, FSMOUNT_CLOEXEC,
                       MOUNT_ATTR_NODEV | (layer ? 0 : MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID));
    if (mnt < 0 || syscall(SYS_move_mount, mnt, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return err_set(err, errno, "attach the idmapped overlay at `%s`", target);
    return 0;
}

int ctr_overlay_mount(char *const *lowers, size_t n, const char *layer, const char *target,
                      const struct ctr_overlay_idmap *idmap, struct err *err)
{
    int fds[CTR_LAYERS_MAX];
    if (n == 0 || n > CTR_LAYERS_MAX)
        return err_set(err, EINVAL, "image has %zu layers (1 to %d supported)", n, CTR_LAYERS_MAX);
    int r = layers_open(lowers, n, idmap ? idmap->userns : -1, fds, err);
    if (r < 0)
        return r;
    if (!layer && n == 1)
        r = layer_attach(fds[0], idmap != NULL, target, err);
    else if (idmap)
        r = overlay_fsmount(lowers, fds, n, layer, target, idmap, err);
    else
        r = overlay_mount_fds(fds, n, layer, target, err);
    for (size_t k = 0; k < n; k++)
        close(fds[k]);
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
    _cleanup_close_ int fd = openat2_retry(root, sub, &how);
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
    struct ctr_overlay_idmap idmap = {.userns = userns};
    int r = ctr_overlay_mount(lowers, n, NULL, mnt, userns >= 0 ? &idmap : NULL, err);
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
