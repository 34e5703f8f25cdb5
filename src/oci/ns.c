/* oci/ns: namespaces joined by path and user namespace id maps. */
#include <fcntl.h>
#include <linux/nsfs.h>
#include <string.h>
#include <sys/ioctl.h>

#include "oci/internal.h"

int oci_ns_open_path(const char *path, enum oci_ns_kind k, struct err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "`linux.namespaces`: %s namespace `%s`", oci_ns_name(k), path);
    /* A path that is not a namespace of the right kind is an error here,
     * not a confusing EINVAL from setns later. */
    int type = ioctl(fd, NS_GET_NSTYPE);
    if (type >= 0 && type != oci_ns_clone_flag(k)) {
        close(fd);
        return err_set(err, EINVAL, "`linux.namespaces`: `%s` is not a %s namespace", path,
                       oci_ns_name(k));
    }
    return fd;
}

static int write_map(pid_t pid, const char *file, const struct oci_idmap *maps, size_t n,
                     const char *field, struct err *err)
{
    struct buf b = {0};
    for (size_t i = 0; i < n; i++)
        if (buf_printf(&b, "%u %u %u\n", maps[i].container_id, maps[i].host_id, maps[i].size) < 0) {
            buf_free(&b);
            return err_set(err, ENOMEM, "`%s`", field);
        }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int r = 0;
    if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len)
        r = err_set(err, errno ? errno : EIO, "`%s`: write %s", field, path);
    if (fd >= 0)
        close(fd);
    buf_free(&b);
    return r;
}

int oci_idmap_write(pid_t pid, const struct oci_spec *spec, struct err *err)
{
    int r = write_map(pid, "uid_map", spec->uid_maps, spec->n_uid_maps, "linux.uidMappings", err);
    if (r < 0)
        return r;
    return write_map(pid, "gid_map", spec->gid_maps, spec->n_gid_maps, "linux.gidMappings", err);
}
