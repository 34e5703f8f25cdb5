/* oci/ns: namespaces joined by path and user namespace id maps. */
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

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

/* A short-lived child enters a new user namespace; we write its maps, keep
 * a reference to the namespace, and let the child go. */
int oci_userns_make(const struct oci_idmap *uid, size_t n_uid, const struct oci_idmap *gid,
                    size_t n_gid, const char *field, struct err *err)
{
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return err_set(err, errno, "`%s`: pipe", field);
    if (pipe2(go, O_CLOEXEC) < 0) {
        int e = errno;
        close(ready[0]);
        close(ready[1]);
        return err_set(err, e, "`%s`: pipe", field);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        (void)!read(go[0], &c, 1); /* until the parent is done */
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    int r = 0;
    char c = 'n';
    if (pid < 0)
        r = err_set(err, errno, "`%s`: fork", field);
    else if (read(ready[0], &c, 1) != 1 || c != 'y')
        r = err_set(err, EPERM, "`%s`: create a user namespace", field);
    struct oci_spec maps = {.uid_maps = (struct oci_idmap *)uid,
                            .n_uid_maps = n_uid,
                            .gid_maps = (struct oci_idmap *)gid,
                            .n_gid_maps = n_gid};
    int fd = -1;
    if (r == 0 && (r = oci_idmap_write(pid, &maps, err)) == 0) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)pid);
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            r = err_set(err, errno, "`%s`: open the user namespace", field);
    }
    close(ready[0]);
    close(go[1]); /* the child reads EOF and exits */
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    return r < 0 ? r : fd;
}

/* A short-lived helper joins the user namespace and clones the container's
 * init with CLONE_PARENT: the init is our child, and its new PID
 * namespace (flags hold CLONE_NEWPID) is owned by that user namespace, so
 * the container's root may mount /proc there. (A PID namespace the helper
 * unshared could not be handed over: pid_for_children cannot be opened
 * before the namespace has its pid 1.) In the init, returns 0 as clone
 * does; in the caller, the init's pid or -errno with err set, and
 * *ret_in_cgroup whether the init was cloned into cgroup_fd's cgroup (else
 * the caller moves it: a write to cgroup.procs, which costs an RCU grace
 * period even for a process already there, so it is made only if needed). */
pid_t oci_clone_in_userns(const char *userns_path, uint64_t flags, int cgroup_fd,
                          bool *ret_in_cgroup, struct err *err)
{
    *ret_in_cgroup = false;
    _cleanup_close_ int userns = oci_ns_open_path(userns_path, OCI_NS_USER, err);
    if (userns < 0)
        return userns;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_set(err, errno, "`linux.namespaces`: pipe");
    pid_t helper = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (helper == 0) {
        close(p[0]);
        int rep[3] = {0, 0, 0}; /* pid, errno, cloned into the cgroup */
        if (setns(userns, CLONE_NEWUSER) < 0) {
            rep[1] = errno;
        } else {
            struct clone_args ca = {.flags = flags | CLONE_PARENT};
            if (cgroup_fd >= 0) {
                ca.flags |= CLONE_INTO_CGROUP;
                ca.cgroup = (uint64_t)cgroup_fd;
            }
            long r = syscall(SYS_clone3, &ca, sizeof(ca));
            rep[2] = r >= 0 && cgroup_fd >= 0;
            if (r < 0 && cgroup_fd >= 0) {
                /* moved by the caller afterwards */
                ca.flags &= ~CLONE_INTO_CGROUP;
                r = syscall(SYS_clone3, &ca, sizeof(ca));
            }
            if (r == 0) {
                close(p[1]);
                return 0; /* the init */
            }
            rep[0] = (int)r;
            rep[1] = r < 0 ? errno : 0;
        }
        (void)!write(p[1], rep, sizeof(rep));
        _exit(0);
    }
    close(p[1]);
    int rep[3] = {0, EIO, 0};
    if (helper < 0)
        rep[1] = errno;
    else if (read(p[0], rep, sizeof(rep)) != (ssize_t)sizeof(rep))
        rep[1] = EIO;
    close(p[0]);
    if (helper > 0)
        while (waitpid(helper, NULL, 0) < 0 && errno == EINTR)
            ;
    if (rep[1] || rep[0] <= 0)
        return err_set(err, rep[1] ? rep[1] : EIO,
                       "`linux.namespaces`: clone the init in the user namespace `%s`",
                       userns_path);
    *ret_in_cgroup = rep[2] != 0;
    return rep[0];
}
