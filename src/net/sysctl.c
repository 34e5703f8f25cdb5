/* net/sysctl: network sysctls under /proc/sys/net.
 *
 * The files under /proc/sys/net show the network namespace of the thread
 * that opens them, so a write inside a pod's namespace happens from a thread
 * that entered it (net_netns_run). Keys are checked strictly: net.* only, no
 * "..", no empty components. */
#include <fcntl.h>
#include <limits.h>
#include <string.h>

#include "net/internal.h"

static int sysctl_path(const char *key, char *path, size_t size)
{
    if (!key || !(str_has_prefix(key, "net.") || str_has_prefix(key, "net/")))
        return -EINVAL;
    size_t klen = strnlen(key, 256);
    if (klen >= 256)
        return -EINVAL;
    /* Interface names may contain dots ("net.ipv4.conf.eth0.1.rp_filter" is
     * ambiguous); like sysctl(8), a key written with slashes keeps its dots. */
    bool slashes = strchr(key, '/') != NULL;
    int n = snprintf(path, size, "/proc/sys/%s", key);
    if (n < 0 || (size_t)n >= size)
        return -EINVAL;
    char *k = path + strlen("/proc/sys/");
    for (char *c = k; *c; c++) {
        if (!slashes && *c == '.')
            *c = '/';
        else if (*c != '/' && *c != '.' && *c != '-' && *c != '_' && *c != '@' && *c != ':' &&
                 !(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') &&
                 !(*c >= '0' && *c <= '9'))
            return -EINVAL;
    }
    /* Each component: non-empty, not "." or "..". */
    for (const char *c = k; *c;) {
        const char *e = strchrnul(c, '/');
        size_t len = (size_t)(e - c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return -EINVAL;
        c = *e ? e + 1 : e;
    }
    if (k[strlen(k) - 1] == '/')
        return -EINVAL;
    return 0;
}

int net_sysctl_write(const char *key, const char *value, struct err *err)
{
    char path[PATH_MAX];
    if (sysctl_path(key, path, sizeof(path)) < 0)
        return err_set(err, EINVAL, "invalid network sysctl `%s`", key ? key : "");
    if (!value || strnlen(value, 4096) >= 4096 || strchr(value, '\n'))
        return err_set(err, EINVAL, "invalid value for sysctl `%s`", key);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0)
        return err_set(err, errno, "sysctl `%s`", key);
    size_t len = strlen(value);
    ssize_t n = write(fd, value, len);
    if (n < 0)
        return err_set(err, errno, "write sysctl `%s`", key);
    if ((size_t)n != len)
        return err_set(err, EIO, "short write to sysctl `%s`", key);
    return 0;
}

int net_sysctl_read(const char *key, char *buf, size_t size, struct err *err)
{
    char path[PATH_MAX];
    if (sysctl_path(key, path, sizeof(path)) < 0)
        return err_set(err, EINVAL, "invalid network sysctl `%s`", key ? key : "");
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    int r = read_file_at(AT_FDCWD, path, 4096, &data, &len);
    if (r < 0)
        return err_set(err, r, "sysctl `%s`", key);
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == ' '))
        data[--len] = '\0';
    if (len >= size)
        return err_set(err, ENOBUFS, "sysctl `%s`", key);
    memcpy(buf, data, len + 1);
    return 0;
}

struct sysctl_args {
    const char *key, *value;
};

static int sysctl_cb(void *data, struct err *err)
{
    struct sysctl_args *a = data;
    return net_sysctl_write(a->key, a->value, err);
}

int net_sysctl_set_in(int netns_fd, const char *key, const char *value, struct err *err)
{
    struct sysctl_args a = {key, value};
    if (netns_fd < 0)
        return net_sysctl_write(key, value, err);
    return net_netns_run(netns_fd, sysctl_cb, &a, err);
}
