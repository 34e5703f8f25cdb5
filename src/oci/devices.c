/* oci/devices: /dev inside the container.
 *
 * The default devices (null, zero, full, random, urandom, tty) and
 * `linux.devices` are created with mknod, or, in a user namespace where
 * mknod is refused, bind-mounted from the host. Paths are resolved inside
 * the rootfs like mount destinations. Then the usual symlinks. */
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "oci/internal.h"

static int make_device(int rootfd, const struct oci_device *d, bool in_userns, struct err *err)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", d->path);
    char *slash = strrchr(parent, '/');
    const char *name = slash + 1;
    if (!*name)
        return err_set(err, EINVAL, "device `%s`: no file name", d->path);
    *slash = '\0';
    _cleanup_close_ int pfd =
        oci_path_open_in_root(rootfd, parent[0] ? parent : "/", true, true, err);
    if (pfd < 0)
        return err_wrap(err, "device `%s`", d->path);
    mode_t type = d->type == 'b' ? S_IFBLK : d->type == 'p' ? S_IFIFO : S_IFCHR;
    mode_t mode = d->has_mode ? (d->mode & 07777) : 0666;
    if (!in_userns) {
        unlinkat(pfd, name, 0);
        if (mknodat(pfd, name, type | mode, makedev(d->major, d->minor)) < 0)
            return err_set(err, errno, "mknod `%s`", d->path);
        if (fchownat(pfd, name, d->has_uid ? d->uid : 0, d->has_gid ? d->gid : 0,
                     AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(err, errno, "chown `%s`", d->path);
        /* mknod obeys the umask: set the mode exactly. */
        _cleanup_close_ int f = openat(pfd, name, O_PATH | O_CLOEXEC | O_NOFOLLOW);
        char p[64];
        snprintf(p, sizeof(p), "/proc/self/fd/%d", f);
        if (f < 0 || chmod(p, mode) < 0)
            return err_set(err, errno, "chmod `%s`", d->path);
        return 0;
    }
    /* A user namespace: bind the host's node over an empty file. */
    int f = openat(pfd, name, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0000);
    if (f < 0 && errno != EEXIST)
        return err_set(err, errno, "create `%s`", d->path);
    if (f >= 0)
        close(f);
    _cleanup_close_ int dst = openat(pfd, name, O_PATH | O_CLOEXEC | O_NOFOLLOW);
    if (dst < 0)
        return err_set(err, errno, "open `%s`", d->path);
    char hostpath[PATH_MAX];
    snprintf(hostpath, sizeof(hostpath), "%s", d->path);
    struct stat st;
    if (stat(hostpath, &st) < 0 || (st.st_mode & S_IFMT) != type ||
        st.st_rdev != makedev(d->major, d->minor)) {
        snprintf(hostpath, sizeof(hostpath), "/dev/%s", d->type == 'b' ? "block" : "char");
        snprintf(hostpath + strlen(hostpath), sizeof(hostpath) - strlen(hostpath), "/%u:%u",
                 (unsigned)d->major, (unsigned)d->minor);
    }
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", dst);
    if (mount(hostpath, p, NULL, MS_BIND, NULL) < 0)
        return err_set(err, errno, "bind the host's `%s` on `%s`", hostpath, d->path);
    return 0;
}

static const struct oci_device default_devices[] = {
    {.path = "/dev/null", .type = 'c', .major = 1, .minor = 3},
    {.path = "/dev/zero", .type = 'c', .major = 1, .minor = 5},
    {.path = "/dev/full", .type = 'c', .major = 1, .minor = 7},
    {.path = "/dev/random", .type = 'c', .major = 1, .minor = 8},
    {.path = "/dev/urandom", .type = 'c', .major = 1, .minor = 9},
    {.path = "/dev/tty", .type = 'c', .major = 5, .minor = 0},
};

int oci_dev_setup(const struct oci_spec *spec, int rootfd, bool in_userns, struct err *err)
{
    bool own_dev = false;
    for (size_t i = 0; i < spec->n_mounts; i++)
        if (strcmp(spec->mounts[i].destination, "/dev") == 0 && !spec->mounts[i].bind)
            own_dev = true;
    if (own_dev) {
        for (size_t i = 0; i < ARRAY_SIZE(default_devices); i++) {
            bool overridden = false;
            for (size_t k = 0; k < spec->n_devices; k++)
                if (strcmp(spec->devices[k].path, default_devices[i].path) == 0)
                    overridden = true;
            if (overridden)
                continue;
            int r = make_device(rootfd, &default_devices[i], in_userns, err);
            if (r < 0)
                return r;
        }
        int r = oci_dev_links(rootfd, err);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < spec->n_devices; i++) {
        int r = make_device(rootfd, &spec->devices[i], in_userns, err);
        if (r < 0)
            return err_wrap(err, "`linux.devices[%zu]`", i);
    }
    return 0;
}

int oci_dev_links(int rootfd, struct err *err)
{
    static const struct {
        const char *name, *target;
    } links[] = {
        {"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
        {"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"},
    };
    _cleanup_close_ int dev = oci_path_open_in_root(rootfd, "/dev", false, true, err);
    if (dev < 0)
        return dev;
    for (size_t i = 0; i < ARRAY_SIZE(links); i++)
        if (symlinkat(links[i].target, dev, links[i].name) < 0 && errno != EEXIST)
            return err_set(err, errno, "symlink `/dev/%s`", links[i].name);
    /* /dev/ptmx goes to the container's own devpts instance. */
    struct stat st;
    if (fstatat(dev, "pts", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        if (fstatat(dev, "ptmx", &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISLNK(st.st_mode))
            unlinkat(dev, "ptmx", 0);
        if (symlinkat("pts/ptmx", dev, "ptmx") < 0 && errno != EEXIST)
            return err_set(err, errno, "symlink `/dev/ptmx`");
    }
    return 0;
}
