/* net/ipam: pod address allocation.
 *
 * Subnet parsing and arithmetic are in subnet.c. Leases are files
 * in <dir>/<subnet>/ named by the address ("10.88.0.7", "fd00:88::7"), each
 * holding the pod id and optional flags. A lease is taken by linking a
 * complete file to the address's name (link fails with EEXIST like
 * O_CREAT|O_EXCL): the file system is the lock, so allocators in different
 * threads or processes can never take the same address, and after
 * a restart the directory itself is the state — nothing to recover but to
 * read it. <dir>/<subnet>/.last remembers the last address handed out so
 * allocation goes round the pool instead of reusing a just-released address
 * (whose conntrack entries and ARP caches may still be around).
 *
 * Leases are not fsynced: they describe pods whose network namespaces do not
 * outlive a machine crash either, and a daemon crash keeps the page cache. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>

#include "net/internal.h"

/* ---- leases on disk ----------------------------------------------------- */

#define LEASE_MAX 512
#define LAST_FILE ".last"

/* "10.88.0.0/16" -> "10.88.0.0-16" (a directory name). */
static void subnet_dirname(const struct net_subnet *s, char *buf, size_t size)
{
    net_subnet_format(s, buf, size);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '-';
}

static int open_subnet_dir(const char *dir, const struct net_subnet *s, bool create,
                           struct err *err)
{
    char sub[NET_SUBNET_STRLEN];
    subnet_dirname(s, sub, sizeof(sub));
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", dir, sub) >= (int)sizeof(path))
        return err_set(err, ENAMETOOLONG, "IPAM directory `%s`", dir);
    if (create) {
        int r = mkdir_p(path, 0700);
        if (r < 0)
            return err_set(err, r, "create IPAM directory `%s`", path);
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "open IPAM directory `%s`", path);
    return fd;
}

static uint64_t read_last(int dfd, const struct net_subnet *s)
{
    _cleanup_free_ char *data = NULL;
    if (read_file_at(dfd, LAST_FILE, 64, &data, NULL) < 0)
        return 0;
    data[strcspn(data, "\n")] = '\0';
    int fam;
    uint8_t a[16];
    if (net_addr_parse(data, &fam, a) < 0 || fam != s->family)
        return 0;
    int64_t idx = net_subnet_pool_index(s, a);
    if (idx < 0)
        return 0;
    return (uint64_t)idx + 1;
}

static void write_last(int dfd, const char *addr)
{
    /* A hint only: no fsync, and a torn or lost write costs nothing. */
    char tmp[64];
    snprintf(tmp, sizeof(tmp), LAST_FILE ".%d.%ld", (int)getpid(), (long)gettid());
    _cleanup_close_ int fd =
        openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    size_t len = strlen(addr);
    if (write(fd, addr, len) != (ssize_t)len || renameat(dfd, tmp, dfd, LAST_FILE) < 0)
        unlinkat(dfd, tmp, 0);
}

int net_ipam_alloc(const char *dir, const struct net_subnet *s, const char *pod_id,
                   const char *flags, uint8_t ret_addr[16], struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    _cleanup_close_ int dfd = open_subnet_dir(dir, s, true, err);
    if (dfd < 0)
        return dfd;
    char content[LEASE_MAX];
    int clen = snprintf(content, sizeof(content), "%s\n%s%s", pod_id, flags ? flags : "",
                        flags ? "\n" : "");
    if (clen < 0 || clen >= (int)sizeof(content))
        return err_set(err, EINVAL, "lease too long");
    /* The lease is written complete under a private name first and then
     * linked to the address's name: link() fails with EEXIST when the address
     * is taken, so the claim stays atomic and a crash never leaves an empty
     * lease that nobody owns. */
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".tmp.%d.%ld", (int)getpid(), (long)gettid());
    _cleanup_close_ int fd =
        openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_set(err, errno, "create lease");
    if (write(fd, content, (size_t)clen) != clen) {
        int e = errno ? errno : EIO;
        unlinkat(dfd, tmp, 0);
        return err_set(err, e, "write lease");
    }
    uint64_t size = net_subnet_pool_size(s);
    uint64_t start = read_last(dfd, s);
    if (start >= size)
        start = 0;
    /* Bounded by the pool: every address is tried at most once. */
    for (uint64_t i = 0; i < size; i++) {
        uint64_t n = start + i;
        if (n >= size || n < start)
            n -= size;
        uint8_t a[16];
        char name[INET6_ADDRSTRLEN];
        net_subnet_pool_addr(s, n, a);
        net_addr_format(s->family, a, name, sizeof(name));
        if (linkat(dfd, tmp, dfd, name, 0) < 0) {
            if (errno == EEXIST)
                continue;
            int e = errno;
            unlinkat(dfd, tmp, 0);
            return err_set(err, e, "create lease `%s`", name);
        }
        unlinkat(dfd, tmp, 0);
        write_last(dfd, name);
        memcpy(ret_addr, a, 16);
        return 0;
    }
    unlinkat(dfd, tmp, 0);
    char sub[NET_SUBNET_STRLEN];
    net_subnet_format(s, sub, sizeof(sub));
    return err_set(err, ENOSPC, "no free address in pod subnet %s (all %llu addresses leased)", sub,
                   (unsigned long long)size);
}

int net_ipam_release_addr(const char *dir, const struct net_subnet *s, const uint8_t addr[16],
                          struct err *err)
{
    _cleanup_close_ int dfd = open_subnet_dir(dir, s, false, err);
    if (dfd == -ENOENT) {
        err_clear(err);
        return 0;
    }
    if (dfd < 0)
        return dfd;
    char name[INET6_ADDRSTRLEN];
    net_addr_format(s->family, addr, name, sizeof(name));
    if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
        return err_set(err, errno, "release lease `%s`", name);
    return 0;
}

int net_ipam_lease_parse(const char *name, const char *data, size_t len, int family,
                         struct net_ipam_lease *ret)
{
    memset(ret, 0, sizeof(*ret));
    int fam;
    if (net_addr_parse(name, &fam, ret->addr) < 0 || fam != family)
        return -EBADMSG;
    ret->family = fam;
    if (len > LEASE_MAX || memchr(data, '\0', len))
        return -EBADMSG;
    const char *nl = memchr(data, '\n', len);
    size_t idlen = nl ? (size_t)(nl - data) : 0;
    if (!nl || idlen > NET_POD_ID_MAX)
        return -EBADMSG;
    memcpy(ret->pod_id, data, idlen);
    ret->pod_id[idlen] = '\0';
    if (!net_pod_id_valid(ret->pod_id))
        return -EBADMSG;
    const char *end = data + len;
    for (const char *line = nl + 1; line < end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            eol = end;
        if ((size_t)(eol - line) == strlen(NET_IPAM_HOSTPORTS_FLAG) &&
            !strncmp(line, NET_IPAM_HOSTPORTS_FLAG, (size_t)(eol - line)))
            ret->hostports = true;
        line = eol < end ? eol + 1 : end;
    }
    return 0;
}

/* Reads one lease file; 0 with ret filled, -ENOENT gone, -EBADMSG garbage. */
static int lease_read(int dfd, const char *name, int family, struct net_ipam_lease *ret)
{
    memset(ret, 0, sizeof(*ret));
    int fam;
    uint8_t a[16];
    if (net_addr_parse(name, &fam, a) < 0 || fam != family)
        return -EBADMSG;
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    int r = read_file_at(dfd, name, LEASE_MAX, &data, &len);
    if (r < 0)
        return r;
    return net_ipam_lease_parse(name, data, len, family, ret);
}

/* A lease or hint written by a process that died before renaming or
 * linking it (".tmp.<pid>.<tid>", ".last.<pid>.<tid>"): removed once that
 * process is gone. */
static void remove_stale_tmp(int dfd, const char *name)
{
    const char *p = NULL;
    if (str_has_prefix(name, ".tmp."))
        p = name + 5;
    else if (str_has_prefix(name, LAST_FILE "."))
        p = name + strlen(LAST_FILE) + 1;
    if (!p)
        return;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || end == p || *end != '.' || pid <= 0 || pid > INT32_MAX)
        return;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
        unlinkat(dfd, name, 0);
}

/* Calls fn for each lease in every subnet directory under dir. */
static int lease_walk(const char *dir,
                      int (*fn)(int dfd, const char *name, const struct net_ipam_lease *l,
                                void *data),
                      void *data, struct err *err)
{
    _cleanup_close_ int top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errno, "open IPAM directory `%s`", dir);
    }
    DIR *d = fdopendir(top);
    if (!d)
        return err_set(err, errno, "read IPAM directory `%s`", dir);
    top = -1;
    int r = 0;
    struct dirent *de;
    while (r >= 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char sn_text[NET_SUBNET_STRLEN + 8];
        size_t nlen = strnlen(de->d_name, sizeof(sn_text));
        if (nlen >= sizeof(sn_text))
            continue;
        memcpy(sn_text, de->d_name, nlen + 1);
        char *dash = strrchr(sn_text, '-');
        if (!dash)
            continue;
        *dash = '/';
        struct net_subnet sn;
        if (net_subnet_parse(sn_text, &sn) < 0)
            continue;
        int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sfd < 0)
            continue;
        DIR *sd = fdopendir(sfd);
        if (!sd) {
            close(sfd);
            continue;
        }
        struct dirent *le;
        while (r >= 0 && (le = readdir(sd))) {
            if (le->d_name[0] == '.') {
                remove_stale_tmp(dirfd(sd), le->d_name);
                continue;
            }
            struct net_ipam_lease l;
            if (lease_read(dirfd(sd), le->d_name, sn.family, &l) < 0 ||
                !net_subnet_contains(&sn, l.addr))
                continue; /* vanished meanwhile, or not a lease */
            l.prefix = sn.prefix;
            r = fn(dirfd(sd), le->d_name, &l, data);
        }
        closedir(sd);
    }
    closedir(d);
    if (r < 0)
        return err_set(err, r, "IPAM directory `%s`", dir);
    return 0;
}

struct list_ctx {
    struct net_ipam_lease *v;
    size_t n, cap;
};

static int list_cb(int dfd, const char *name, const struct net_ipam_lease *l, void *data)
{
    struct list_ctx *c = data;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct net_ipam_lease *v = realloc(c->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *l;
    return 0;
}

int net_ipam_list(const char *dir, struct net_ipam_lease **ret, size_t *ret_n, struct err *err)
{
    struct list_ctx c = {0};
    int r = lease_walk(dir, list_cb, &c, err);
    if (r < 0) {
        free(c.v);
        return r;
    }
    *ret = c.v;
    *ret_n = c.n;
    return 0;
}

static int release_cb(int dfd, const char *name, const struct net_ipam_lease *l, void *data)
{
    if (strcmp(l->pod_id, data) != 0)
        return 0;
    if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int net_ipam_release(const char *dir, const char *pod_id, struct err *err)
{
    if (!net_pod_id_valid(pod_id))
        return err_set(err, EINVAL, "invalid pod id");
    return lease_walk(dir, release_cb, (void *)pod_id, err);
}
