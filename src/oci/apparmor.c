/* oci/apparmor: the host's AppArmor, the profiles it has loaded, the
 * profile kinglet loads as the runtime default, and the switch a container
 * process makes to its profile at execve.
 *
 * A process asks for its next execve to run under a profile by writing
 * `exec NAME` to its own /proc/PID/attr/apparmor/exec (attr/exec on kernels
 * before 5.8). The request stays with the task until execve and is copied
 * to a child at fork: the container's init makes it in its last steps, and
 * kinglet-enter before it starts the command (src/enter/main.c), so that an
 * exec runs under the container's profile too.
 *
 * The default profile is containerd's policy for its own default (which is
 * docker's): everything a container normally does (files, network,
 * capabilities the container holds anyway), no mount, no write to /proc
 * outside the process directories and /proc/sys/kernel/shm*, nothing below
 * /sys but the cgroup file system, /sys/kernel/security and firmware
 * unreadable; signals and ptrace only among the profile's own processes
 * and from unconfined (the monitor) and kinglet's own profile. It is
 * loaded with apparmor_parser (Debian's `apparmor` package) once, when a
 * container first asks for it and the kernel does not have it. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "oci/internal.h"

#define PROFILES_MAX (16u << 20)

bool oci_apparmor_enabled(void)
{
    char c = 0;
    int fd = open("/sys/module/apparmor/parameters/enabled", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n == 1 && c == 'Y' && access("/sys/kernel/security/apparmor", F_OK) == 0;
}

bool oci_apparmor_profile_listed(const char *profiles, const char *name)
{
    size_t n = strlen(name);
    for (const char *l = profiles; l && *l;) {
        const char *e = strchrnul(l, '\n');
        /* "NAME (MODE)" */
        if ((size_t)(e - l) > n + 1 && strncmp(l, name, n) == 0 && l[n] == ' ' && l[n + 1] == '(')
            return true;
        l = *e ? e + 1 : e;
    }
    return false;
}

int oci_apparmor_loaded(const char *name, struct err *err)
{
    _cleanup_free_ char *text = NULL;
    int r =
        read_file_at(AT_FDCWD, "/sys/kernel/security/apparmor/profiles", PROFILES_MAX, &text, NULL);
    if (r < 0)
        return err_set(err, -r, "read the loaded AppArmor profiles");
    return oci_apparmor_profile_listed(text, name) ? 1 : 0;
}

int oci_apparmor_default_text(const char *name, const char *daemon, bool abi3, struct buf *ret)
{
    int r = 0;
    if (abi3)
        r |= buf_printf(ret, "abi <abi/3.0>,\n");
    r |= buf_printf(ret,
                    "@{PROC}=/proc/\n\n"
                    "profile %s flags=(attach_disconnected,mediate_deleted) {\n"
                    "  network,\n  capability,\n  file,\n  umount,\n",
                    name);
    /* who may signal the container: the monitor (unconfined), kinglet
     * where it runs confined, and the container itself */
    r |= buf_printf(ret, "  signal (receive) peer=unconfined,\n");
    if (daemon && *daemon && strcmp(daemon, "unconfined") && strcmp(daemon, name))
        r |= buf_printf(ret, "  signal (receive) peer=%s,\n", daemon);
    r |= buf_printf(ret, "  signal (send,receive) peer=%s,\n", name);
    r |= buf_printf(ret, "%s",
                    "  deny @{PROC}/* w,\n"
                    "  deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],"
                    "[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,\n"
                    "  deny @{PROC}/sys/[^k]** w,\n"
                    "  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,\n"
                    "  deny @{PROC}/sysrq-trigger rwklx,\n"
                    "  deny @{PROC}/kcore rwklx,\n"
                    "  deny mount,\n"
                    "  deny /sys/[^f]*/** wklx,\n"
                    "  deny /sys/f[^s]*/** wklx,\n"
                    "  deny /sys/fs/[^c]*/** wklx,\n"
                    "  deny /sys/fs/c[^g]*/** wklx,\n"
                    "  deny /sys/fs/cg[^r]*/** wklx,\n"
                    "  deny /sys/firmware/** rwklx,\n"
                    "  deny /sys/devices/virtual/powercap/** rwklx,\n"
                    "  deny /sys/kernel/security/** rwklx,\n");
    r |= buf_printf(ret, "  ptrace (trace,tracedby,read,readby) peer=%s,\n}\n", name);
    return r < 0 ? -ENOMEM : 0;
}

static const char *parser_path(void)
{
    static const char *const paths[] = {"/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"};
    for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

int oci_apparmor_ensure_default(struct err *err)
{
    int r = oci_apparmor_loaded(OCI_APPARMOR_DEFAULT, err);
    if (r != 0)
        return r < 0 ? r : 0;
    const char *parser = parser_path();
    if (!parser)
        return err_set(err, ENOENT,
                       "load the AppArmor profile `%s`: apparmor_parser not found (Debian's "
                       "`apparmor` package)",
                       OCI_APPARMOR_DEFAULT);
    /* our own label, so that a confined kinglet may still signal */
    _cleanup_free_ char *self = NULL;
    if (read_file_at(AT_FDCWD, "/proc/self/attr/current", 4096, &self, NULL) == 0) {
        char *cut = strstr(self, " (");
        if (!cut)
            cut = strchrnul(self, '\n');
        *cut = '\0';
    }
    _cleanup_(buf_free) struct buf text = {0};
    if (oci_apparmor_default_text(OCI_APPARMOR_DEFAULT, self,
                                  access("/etc/apparmor.d/abi/3.0", F_OK) == 0, &text) < 0)
        return err_set(err, ENOMEM, "the AppArmor profile");
    _cleanup_close_ int in = memfd_create("kinglet-apparmor", MFD_CLOEXEC);
    _cleanup_close_ int out = memfd_create("kinglet-apparmor-err", MFD_CLOEXEC);
    if (in < 0 || out < 0)
        return err_set(err, errno, "load the AppArmor profile `%s`", OCI_APPARMOR_DEFAULT);
    if (write(in, text.data, text.len) != (ssize_t)text.len || lseek(in, 0, SEEK_SET) < 0)
        return err_set(err, errno ? errno : EIO, "load the AppArmor profile `%s`",
                       OCI_APPARMOR_DEFAULT);
    /* -K: no cache of ours on the host's disk; -r: replace a copy another
     * create loaded meanwhile */
    char *argv[] = {(char *)parser, "-Kr", NULL};
    int status;
    if ((r = spawn_wait(parser, argv, NULL, in, out, out, &status)) < 0)
        return err_set(err, -r, "load the AppArmor profile `%s`: run `%s`", OCI_APPARMOR_DEFAULT,
                       parser);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char msg[256] = "";
        ssize_t n = pread(out, msg, sizeof(msg) - 1, 0);
        msg[n > 0 ? n : 0] = '\0';
        msg[strcspn(msg, "\n")] = '\0';
        return err_set(err, EIO, "load the AppArmor profile `%s`: apparmor_parser failed: %s",
                       OCI_APPARMOR_DEFAULT, msg);
    }
    return 0;
}

int oci_apparmor_exec(const char *profile, struct err *err)
{
    int r;
    if ((r = oci_apparmor_name_valid(profile)) < 0)
        return err_set(err, -r, "`process.apparmorProfile`: a bad profile name");
    _cleanup_close_ int fd = oci_proc_open("thread-self/attr/apparmor/exec", O_WRONLY, err);
    if (fd == -ENOENT)
        fd = oci_proc_open("thread-self/attr/exec", O_WRONLY, err);
    if (fd < 0)
        return err_wrap(err, "`process.apparmorProfile`");
    char buf[OCI_APPARMOR_NAME_MAX + 8];
    int n = snprintf(buf, sizeof(buf), "exec %s", profile);
    if (write(fd, buf, (size_t)n) != n) {
        /* EINVAL without AppArmor (attr/exec belongs to no LSM), ENOENT
         * for a profile the kernel does not have */
        int e = errno ? errno : EIO;
        if (!oci_apparmor_enabled())
            return err_set(err, EINVAL, "`process.apparmorProfile`: `%s`: the host has no AppArmor",
                           profile);
        return err_set(err, e, "`process.apparmorProfile`: change to `%s` at exec", profile);
    }
    return 0;
}
