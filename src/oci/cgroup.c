/* oci/cgroup: the container's cgroup v2 (see cgroup.h).
 *
 * Every file is opened relative to a directory fd with O_NOFOLLOW, starting
 * from the cgroup2 mount found in /proc/self/mountinfo: nothing in a spec or
 * a state file can redirect us outside the cgroup file system. Resources are
 * converted by cgroup_resources.c (pure) and applied here; a controller
 * that is not available in the cgroup (hybrid hosts have none at all) is
 * skipped with one warning, so that the container still runs. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "oci/cgroup.h"
#include "oci/cgroup_internal.h"

struct oci_cgroup {
    char *mount;  /* cgroup2 mount point */
    char *rel;    /* path below it, no leading slash */
    char *abs;    /* mount/rel */
    int root_fd;  /* the mount */
    int fd;       /* the cgroup, O_RDONLY|O_DIRECTORY */
    bool created; /* by this oci_cgroup_create */
};

#define CG_FILE_MAX        (1 << 20)
#define CG_WAIT_MS         30000 /* the test VM is 20-40x slower than a host */
#define CG_DESTROY_WAIT_MS 10000

/* ---- pure helpers ---------------------------------------------------------- */

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)(((p[1] - '0') << 6) | ((p[2] - '0') << 3) | (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

int oci_cgroup_mountinfo_find(const char *mountinfo, char **ret)
{
    _cleanup_free_ char *best = NULL;
    const char *line = mountinfo;
    while (line && *line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        _cleanup_free_ char *l = strndup(line, len);
        line = eol ? eol + 1 : NULL;
        if (!l)
            return -ENOMEM;
        /* id parent maj:min root mountpoint options [optional...] - fstype src super */
        char *sep = strstr(l, " - ");
        if (!sep)
            continue;
        *sep = '\0';
        char *fstype = sep + 3;
        char *sp = strchr(fstype, ' ');
        if (sp)
            *sp = '\0';
        if (strcmp(fstype, "cgroup2") != 0)
            continue;
        char *save = NULL, *f[5];
        int i = 0;
        for (char *t = strtok_r(l, " ", &save); t && i < 5; t = strtok_r(NULL, " ", &save))
            f[i++] = t;
        if (i < 5)
            continue;
        unescape_octal(f[4]);
        if (f[4][0] != '/')
            continue;
        /* The canonical places win over any other mount of the hierarchy. */
        bool canonical =
            strcmp(f[4], "/sys/fs/cgroup") == 0 || strcmp(f[4], "/sys/fs/cgroup/unified") == 0;
        if (!best || canonical) {
            free(best);
            if (!(best = strdup(f[4])))
                return -ENOMEM;
            if (canonical)
                break;
        }
    }
    if (!best)
        return -ENOENT;
    *ret = TAKE_PTR(best);
    return 0;
}

static bool component_valid(const char *c, size_t len)
{
    if (len == 0 || len > NAME_MAX)
        return false;
    if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
        return false;
    for (size_t i = 0; i < len; i++)
        if (c[i] == '\n' || c[i] == ':' || (unsigned char)c[i] < 0x20)
            return false;
    return true;
}

/* Normalises "a//b/" to "a/b" and checks every component. */
static int rel_normalize(const char *in, char **ret)
{
    struct buf b = {0};
    const char *p = in;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchrnul(p, '/');
        if (!component_valid(p, (size_t)(e - p))) {
            buf_free(&b);
            return -EINVAL;
        }
        if ((b.len && buf_append(&b, "/", 1) < 0) || buf_append(&b, p, (size_t)(e - p)) < 0) {
            buf_free(&b);
            return -ENOMEM;
        }
        p = e;
    }
    if (b.len == 0 || b.len > CG_MAX_PATH) {
        buf_free(&b);
        return -EINVAL;
    }
    if (buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return -ENOMEM;
    }
    *ret = (char *)b.data;
    return 0;
}

int oci_cgroup_path_resolve(const char *cgroups_path, const char *id, char **ret, struct err *err)
{
    _cleanup_free_ char *joined = NULL;
    if (!cgroups_path || !*cgroups_path) {
        if (!id || !*id)
            return err_set(err, EINVAL, "cgroupsPath: empty and no container id");
        if (asprintf(&joined, "%s/%s", CG_DEFAULT_PARENT, id) < 0)
            return err_set(err, ENOMEM, "cgroupsPath");
    } else if (strlen(cgroups_path) > CG_MAX_PATH) {
        return err_set(err, ENAMETOOLONG, "cgroupsPath: longer than %d bytes", CG_MAX_PATH);
    } else if (strchr(cgroups_path, ':')) {
        return err_set(err, EINVAL,
                       "cgroupsPath `%.256s`: the systemd form `slice:prefix:name` needs systemd, "
                       "which this host does not run; use a cgroupfs path such as "
                       "`/kubepods/burstable/pod<uid>/<id>`",
                       cgroups_path);
    } else if (cgroups_path[0] == '/') {
        if (!(joined = strdup(cgroups_path)))
            return err_set(err, ENOMEM, "cgroupsPath");
    } else if (asprintf(&joined, "%s/%s", CG_DEFAULT_PARENT, cgroups_path) < 0) {
        return err_set(err, ENOMEM, "cgroupsPath");
    }
    int r = rel_normalize(joined, ret);
    if (r == -ENOMEM)
        return err_set(err, ENOMEM, "cgroupsPath");
    if (r < 0)
        return err_set(err, EINVAL,
                       "cgroupsPath `%.256s`: invalid (empty, `.` or `..` components are "
                       "refused)",
                       cgroups_path ? cgroups_path : "");
    return 0;
}

/* ---- file access -------------------------------------------------------- */

static int write_at(int dfd, const char *file, const char *value)
{
    _cleanup_close_ int fd = openat(dfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0)
        return -errno;
    size_t len = strlen(value);
    ssize_t n = write(fd, value, len);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EIO;
}

static int read_at(int dfd, const char *file, char **ret)
{
    /* read_file_at follows symlinks on the last component: cgroupfs has
     * none, and fstatfs on the root made sure this is cgroupfs. */
    return read_file_at(dfd, file, CG_FILE_MAX, ret, NULL);
}

/* Is `name` a word of the space-separated list? */
static bool word_in(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == '\n')
            p++;
        const char *e = p;
        while (*e && *e != ' ' && *e != '\n')
            e++;
        if ((size_t)(e - p) == n && memcmp(p, name, n) == 0)
            return true;
        p = e;
    }
    return false;
}

/* A "key value" line of a flat-keyed file such as cgroup.events. */
static int keyed_value(const char *text, const char *key, uint64_t *ret)
{
    size_t n = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p + n + 1, &end, 10);
            if (errno || end == p + n + 1)
                return -EINVAL;
            *ret = v;
            return 0;
        }
    }
    return -ENOENT;
}

static int root_open(char **ret_mount, int *ret_fd, struct err *err)
{
    /* The canonical places first (what oci_cgroup_mountinfo_find prefers
     * anyway): every oci command opens the root, and a node with many pods
     * has a mountinfo of hundreds of lines to parse. */
    static const char *const canonical[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    for (size_t i = 0; i < ARRAY_SIZE(canonical); i++) {
        _cleanup_close_ int fd = open(canonical[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct statfs sfs;
        if (fd >= 0 && fstatfs(fd, &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC) {
            if (!(*ret_mount = strdup(canonical[i])))
                return err_set(err, ENOMEM, "cgroup2 mount");
            *ret_fd = TAKE_FD(fd);
            return 0;
        }
    }
    _cleanup_free_ char *mi = NULL;
    int r = read_file_at(AT_FDCWD, "/proc/self/mountinfo", 4 << 20, &mi, NULL);
    if (r < 0)
        return err_set(err, r, "read /proc/self/mountinfo");
    _cleanup_free_ char *mount = NULL;
    r = oci_cgroup_mountinfo_find(mi, &mount);
    if (r == -ENOENT)
        return err_set(err, ENOENT, "no cgroup2 file system is mounted");
    if (r < 0)
        return err_set(err, r, "parse /proc/self/mountinfo");
    _cleanup_close_ int fd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "open cgroup2 mount `%s`", mount);
    struct statfs sfs;
    if (fstatfs(fd, &sfs) < 0)
        return err_set(err, errno, "statfs `%s`", mount);
    if (sfs.f_type != CGROUP2_SUPER_MAGIC)
        return err_set(err, ENOTSUP, "`%s` is not a cgroup2 file system", mount);
    *ret_mount = TAKE_PTR(mount);
    *ret_fd = TAKE_FD(fd);
    return 0;
}

/* Enables every controller of dfd in its cgroup.subtree_control, one at a
 * time so that one refusal (processes in an inner cgroup) does not stop the
 * others. Best effort: what ends up available is read from the leaf. */
static void enable_controllers(int dfd)
{
    _cleanup_free_ char *avail = NULL, *enabled = NULL;
    if (read_at(dfd, "cgroup.controllers", &avail) < 0)
        return;
    if (read_at(dfd, "cgroup.subtree_control", &enabled) < 0)
        return;
    char *save = NULL;
    for (char *c = strtok_r(avail, " \n", &save); c; c = strtok_r(NULL, " \n", &save)) {
        if (word_in(enabled, c))
            continue;
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "+%s", c);
        int r = write_at(dfd, "cgroup.subtree_control", cmd);
        if (r < 0)
            log_debug("cgroup: enable controller `%s`: %s", c, strerror(-r));
    }
}

/* Opens rel below root, creating the missing components when create. */
static int walk(int root_fd, const char *rel, bool create, int *ret_fd, bool *ret_created,
                struct err *err)
{
    bool created = false;
    _cleanup_close_ int cur = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return err_set(err, errno, "dup");
    _cleanup_free_ char *copy = strdup(rel);
    if (!copy)
        return err_set(err, ENOMEM, "cgroup path");
    char *save = NULL;
    for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (create) {
            enable_controllers(cur);
            created = mkdirat(cur, c, 0755) == 0;
            if (!created && errno != EEXIST)
                return err_set(err, errno, "create cgroup `%s` (at `%s`)", rel, c);
        }
        int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            return err_set(err, errno, "open cgroup `%s` (at `%s`)", rel, c);
        close(cur);
        cur = next;
    }
    *ret_fd = TAKE_FD(cur);
    if (ret_created)
        *ret_created = created; /* the leaf is new */
    return 0;
}

void oci_cgroup_free(struct oci_cgroup *cg)
{
    if (!cg)
        return;
    free(cg->mount);
    free(cg->rel);
    free(cg->abs);
    if (cg->root_fd >= 0)
        close(cg->root_fd);
    if (cg->fd >= 0)
        close(cg->fd);
    free(cg);
}

static void oci_cgroup_freep(struct oci_cgroup **cg) { oci_cgroup_free(*cg); }

static int cg_new(const char *rel, bool create, struct oci_cgroup **ret, struct err *err)
{
    _cleanup_(oci_cgroup_freep) struct oci_cgroup *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return err_set(err, ENOMEM, "cgroup");
    cg->root_fd = cg->fd = -1;
    int r = root_open(&cg->mount, &cg->root_fd, err);
    if (r < 0)
        return r;
    if (!(cg->rel = strdup(rel)))
        return err_set(err, ENOMEM, "cgroup");
    if (asprintf(&cg->abs, "%s/%s", strcmp(cg->mount, "/") == 0 ? "" : cg->mount, rel) < 0) {
        cg->abs = NULL;
        return err_set(err, ENOMEM, "cgroup");
    }
    if ((r = walk(cg->root_fd, rel, create, &cg->fd, &cg->created, err)) < 0)
        return r;
    /* Nothing mounted over a cgroup directory takes us elsewhere. */
    struct statfs sfs;
    if (fstatfs(cg->fd, &sfs) < 0)
        return err_set(err, errno, "statfs cgroup `%s`", cg->abs);
    if (sfs.f_type != CGROUP2_SUPER_MAGIC)
        return err_set(err, EXDEV, "cgroup `%s` is not on the cgroup2 file system", cg->abs);
    *ret = TAKE_PTR(cg);
    return 0;
}

/* ---- resources ----------------------------------------------------------------- */

static int read_memory_max(struct oci_cgroup *cg, int64_t *ret)
{
    _cleanup_free_ char *s = NULL;
    *ret = 0;
    if (read_at(cg->fd, "memory.max", &s) < 0)
        return 0;
    if (strncmp(s, "max", 3) == 0)
        *ret = -1;
    else
        *ret = strtoll(s, NULL, 10);
    return 0;
}

/* Warns once per controller and apply call. */
struct warned {
    char names[16][32];
    size_t n;
};

static bool warn_once(struct warned *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->names[i], name) == 0)
            return false;
    if (w->n < ARRAY_SIZE(w->names))
        snprintf(w->names[w->n++], sizeof(w->names[0]), "%s", name);
    return true;
}

static int apply_devices(struct oci_cgroup *cg, json_t *devices, struct warned *warned,
                         struct err *err)
{
    _cleanup_free_ struct oci_dev_rule *rules = NULL;
    _cleanup_free_ struct bpf_insn *insns = NULL;
    size_t n_rules = 0, n_insns = 0;
    int r = oci_cgroup_devices_parse(devices, &rules, &n_rules, err);
    if (r < 0)
        return r;
    if ((r = oci_bpf_devices_build(rules, n_rules, &insns, &n_insns, err)) < 0)
        return r;
    _cleanup_close_ int dfd = openat(cg->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return err_set(err, errno, "open cgroup directory");
    struct err e = {0};
    r = oci_bpf_devices_apply(dfd, insns, n_insns, &e);
    if (r == -EPERM || r == -ENOSYS || r == -EINVAL || r == -EOPNOTSUPP) {
        /* No BPF for cgroups here: the container still runs. */
        if (warn_once(warned, "devices"))
            log_warn("cgroup `%s`: device access control is not enforced (%s)", cg->rel,
                     err_str(&e));
        return 0;
    }
    if (r < 0) {
        if (err)
            *err = e;
        return err ? err_wrap(err, "linux.resources.devices") : r;
    }
    return 0;
}

static int apply(struct oci_cgroup *cg, json_t *resources, bool creating, struct err *err)
{
    struct warned warned = {0};
    int64_t cur_mem = 0;
    if (!creating)
        read_memory_max(cg, &cur_mem);

    _cleanup_(oci_cgroup_writes_free) struct cg_writes w = {0};
    int r = oci_cgroup_resources_convert(resources, cur_mem, &w, err);
    if (r < 0)
        return r;

    /* Devices first, so the container never starts without its filter. On
     * create the program always goes in (deny by default, the usual devices
     * allowed, as runc); an update replaces it only when asked. */
    json_t *devices = resources ? json_object_get(resources, "devices") : NULL;
    if ((creating || devices) && (r = apply_devices(cg, devices, &warned, err)) < 0)
        return r;

    for (size_t i = 0; i < w.n_warnings; i++)
        log_warn("cgroup `%s`: %s", cg->rel, w.warnings[i]);

    _cleanup_free_ char *avail = NULL;
    if (w.n && (r = read_at(cg->fd, "cgroup.controllers", &avail)) < 0)
        return err_set(err, r, "read cgroup.controllers");

    for (size_t i = 0; i < w.n; i++) {
        struct cg_write *x = &w.v[i];
        if (x->controller[0] && !word_in(avail, x->controller)) {
            if (warn_once(&warned, x->controller))
                log_warn("cgroup `%s`: the %s controller is not available: %s limits are not "
                         "applied",
                         cg->rel, x->controller, x->controller);
            continue;
        }
        r = write_at(cg->fd, x->file, x->value);
        if (r == -ENOENT && x->alt_file)
            r = write_at(cg->fd, x->alt_file, x->alt_value);
        if (r == -ENOENT && x->optional) {
            /* A swap limit without swap accounting cannot hold: say so. */
            if (strcmp(x->file, "memory.swap.max") == 0 && strcmp(x->value, "max") != 0 &&
                warn_once(&warned, "memory.swap.max"))
                log_warn("cgroup `%s`: no memory.swap.max (swap accounting is off): the swap "
                         "limit is not applied",
                         cg->rel);
            else
                log_debug("cgroup `%s`: no `%s`: skipped", cg->rel, x->file);
            continue;
        }
        if (r < 0)
            return err_set(err, r, "write `%s` to %s", x->value,
                           r == -ENOENT && x->alt_file ? x->alt_file : x->file);
    }
    return 0;
}

/* ---- public ------------------------------------------------------------------- */

int oci_cgroup_create(const char *cgroups_path, const char *id, json_t *resources,
                      struct oci_cgroup **ret, struct err *err)
{
    _cleanup_free_ char *rel = NULL;
    int r = oci_cgroup_path_resolve(cgroups_path, id, &rel, err);
    if (r < 0)
        return r;
    _cleanup_(oci_cgroup_freep) struct oci_cgroup *cg = NULL;
    if ((r = cg_new(rel, true, &cg, err)) < 0)
        return r;
    /* Reused only when empty: two containers never share a cgroup. */
    _cleanup_free_ char *procs = NULL;
    if ((r = read_at(cg->fd, "cgroup.procs", &procs)) < 0)
        return err_set(err, r, "read cgroup.procs of `%s`", cg->abs);
    if (procs[0])
        return err_set(err, EBUSY, "cgroup `%s` already has processes", cg->abs);
    if ((r = apply(cg, resources, true, err)) < 0) {
        /* Leave nothing behind that this call made. */
        if (cg->created)
            (void)unlinkat(cg->root_fd, cg->rel, AT_REMOVEDIR);
        return err ? err_wrap(err, "cgroup `%s`", cg->abs) : r;
    }
    *ret = TAKE_PTR(cg);
    return 0;
}

int oci_cgroup_open(const char *abs_path, struct oci_cgroup **ret, struct err *err)
{
    _cleanup_free_ char *mount = NULL;
    _cleanup_close_ int rfd = -1;
    int r = root_open(&mount, &rfd, err);
    if (r < 0)
        return r;
    size_t ml = strcmp(mount, "/") == 0 ? 0 : strlen(mount);
    if (!abs_path || strncmp(abs_path, mount, ml) != 0 || abs_path[ml] != '/')
        return err_set(err, EINVAL, "cgroup `%s` is not below the cgroup2 mount `%s`",
                       abs_path ? abs_path : "", mount);
    _cleanup_free_ char *rel = NULL;
    if ((r = rel_normalize(abs_path + ml, &rel)) < 0)
        return err_set(err, r == -ENOMEM ? ENOMEM : EINVAL, "cgroup `%s`: invalid path", abs_path);
    return cg_new(rel, false, ret, err);
}

int oci_cgroup_enter(struct oci_cgroup *cg, pid_t pid, struct err *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%d", (int)pid);
    int r = write_at(cg->fd, "cgroup.procs", buf);
    if (r < 0)
        return err_set(err, r, "move pid %d into cgroup `%s`", (int)pid, cg->abs);
    return 0;
}

int oci_cgroup_update(struct oci_cgroup *cg, json_t *resources, struct err *err)
{
    /* checkBeforeUpdate: refuse a memory limit below the current usage. */
    json_t *mem = resources ? json_object_get(resources, "memory") : NULL;
    json_t *limit = mem ? json_object_get(mem, "limit") : NULL;
    if (json_is_true(json_object_get(mem, "checkBeforeUpdate")) && json_is_integer(limit) &&
        json_integer_value(limit) > 0) {
        _cleanup_free_ char *cur = NULL;
        if (read_at(cg->fd, "memory.current", &cur) == 0) {
            unsigned long long usage = strtoull(cur, NULL, 10);
            if ((unsigned long long)json_integer_value(limit) < usage)
                return err_set(err, EBUSY,
                               "linux.resources.memory.limit: %lld is below the current usage "
                               "%llu of cgroup `%s` (checkBeforeUpdate)",
                               (long long)json_integer_value(limit), usage, cg->abs);
        }
    }
    int r = apply(cg, resources, false, err);
    if (r < 0)
        return err ? err_wrap(err, "update cgroup `%s`", cg->abs) : r;
    return 0;
}

/* Waits until `key` in cgroup.events has the value want (ETIMEDOUT after
 * timeout_ms). The kernel signals every change of cgroup.events with
 * POLLPRI (kernfs_notify), so this sleeps in poll until a change, with no
 * tick. */
static int events_wait(struct oci_cgroup *cg, const char *key, uint64_t want, int timeout_ms,
                       struct err *err)
{
    _cleanup_close_ int fd = openat(cg->fd, "cgroup.events", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return err_set(err, errno, "open cgroup.events of `%s`", cg->abs);
    uint64_t deadline = now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        /* the read re-arms the notification: a change after it wakes poll */
        char buf[512];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n < 0)
            return err_set(err, errno, "read cgroup.events of `%s`", cg->abs);
        buf[n] = '\0';
        uint64_t v;
        if (keyed_value(buf, key, &v) < 0)
            return err_set(err, ENOTSUP, "cgroup.events of `%s` has no `%s`", cg->abs, key);
        if (v == want)
            return 0;
        uint64_t now = now_mono_ns();
        if (now >= deadline)
            return err_set(err, ETIMEDOUT, "cgroup `%s`: `%s` did not become %" PRIu64, cg->abs,
                           key, want);
        struct pollfd p = {.fd = fd, .events = POLLPRI};
        uint64_t ms = (deadline - now) / 1000000ull + 1;
        if (poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms) < 0 && errno != EINTR)
            return err_set(err, errno, "poll cgroup.events of `%s`", cg->abs);
    }
}

int oci_cgroup_freeze(struct oci_cgroup *cg, bool frozen, struct err *err)
{
    int r = write_at(cg->fd, "cgroup.freeze", frozen ? "1" : "0");
    if (r == -ENOENT)
        return err_set(err, ENOTSUP, "cgroup `%s`: no cgroup.freeze (kernel older than 5.2)",
                       cg->abs);
    if (r < 0)
        return err_set(err, r, "%s cgroup `%s`", frozen ? "freeze" : "thaw", cg->abs);
    return events_wait(cg, "frozen", frozen ? 1 : 0, CG_WAIT_MS, err);
}

/* Appends the pids of dfd and of every cgroup below it. */
static int pids_collect(int dfd, int depth, pid_t **v, size_t *n, size_t *cap)
{
    if (depth > 64)
        return -ELOOP;
    _cleanup_free_ char *procs = NULL;
    int r = read_at(dfd, "cgroup.procs", &procs);
    if (r < 0)
        return r;
    for (char *p = procs; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            if (nc > (1u << 22))
                return -E2BIG;
            pid_t *nv = realloc(*v, nc * sizeof(**v));
            if (!nv)
                return -ENOMEM;
            *v = nv;
            *cap = nc;
        }
        (*v)[(*n)++] = (pid_t)pid;
        p = end;
        while (*p == '\n')
            p++;
    }
    _cleanup_close_ int dup = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup < 0)
        return -errno;
    DIR *d = fdopendir(dup);
    if (!d)
        return -errno;
    dup = -1;
    struct dirent *de;
    r = 0;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        _cleanup_close_ int sub =
            openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue; /* removed meanwhile */
        if ((r = pids_collect(sub, depth + 1, v, n, cap)) < 0 && r != -ENOENT)
            break;
        r = 0;
    }
    closedir(d);
    return r;
}

int oci_cgroup_pids(struct oci_cgroup *cg, pid_t **ret, size_t *ret_n, struct err *err)
{
    _cleanup_free_ pid_t *v = NULL;
    size_t n = 0, cap = 0;
    int r = pids_collect(cg->fd, 0, &v, &n, &cap);
    if (r < 0)
        return err_set(err, r, "list processes of cgroup `%s`", cg->abs);
    *ret = TAKE_PTR(v);
    *ret_n = n;
    return 0;
}

int oci_cgroup_kill(struct oci_cgroup *cg, int sig, struct err *err)
{
    if (sig == SIGKILL) {
        int r = write_at(cg->fd, "cgroup.kill", "1");
        if (r == 0)
            return 0;
        if (r != -ENOENT)
            return err_set(err, r, "kill cgroup `%s`", cg->abs);
        /* Kernels before 5.14: signal each process. */
    }
    /* Frozen, nothing can fork past the list; thawed again afterwards,
     * unless it was paused to begin with (a kill must not resume it). */
    struct err ferr = {0};
    _cleanup_free_ char *was = NULL;
    bool paused = read_at(cg->fd, "cgroup.freeze", &was) == 0 && was[0] == '1';
    bool frozen = !paused && oci_cgroup_freeze(cg, true, &ferr) == 0;
    _cleanup_free_ pid_t *pids = NULL;
    size_t n = 0;
    int r = oci_cgroup_pids(cg, &pids, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++)
        if (kill(pids[i], sig) < 0 && errno != ESRCH)
            r = err_set(err, errno, "signal %d to pid %d of cgroup `%s`", sig, (int)pids[i],
                        cg->abs);
    if (frozen)
        (void)oci_cgroup_freeze(cg, false, &ferr);
    return r;
}

int oci_cgroup_oom_kills(struct oci_cgroup *cg, uint64_t *ret, struct err *err)
{
    _cleanup_free_ char *s = NULL;
    *ret = 0;
    int r = read_at(cg->fd, "memory.events", &s);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return err_set(err, r, "read memory.events of `%s`", cg->abs);
    uint64_t v;
    if (keyed_value(s, "oom_kill", &v) == 0)
        *ret = v;
    return 0;
}

/* rmdir of every cgroup below dfd, deepest first. */
static int rmdir_children(int dfd, int depth)
{
    if (depth > 64)
        return -ELOOP;
    _cleanup_close_ int dup = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup < 0)
        return -errno;
    DIR *d = fdopendir(dup);
    if (!d)
        return -errno;
    dup = -1;
    struct dirent *de;
    int r = 0;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        _cleanup_close_ int sub =
            openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0 && (r = rmdir_children(sub, depth + 1)) < 0)
            break;
        if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
            r = -errno;
            break;
        }
    }
    closedir(d);
    return r;
}

int oci_cgroup_destroy(struct oci_cgroup *cg, struct err *err)
{
    struct stat st;
    if (fstatat(cg->root_fd, cg->rel, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
        return 0;
    /* Processes that were just killed leave the cgroup asynchronously: wait
     * for cgroup.events to say the tree is empty (the kernel counts a task
     * out when it exits, before its parent reaps it, so rmdir then works). */
    int r = events_wait(cg, "populated", 0, CG_DESTROY_WAIT_MS, err);
    if (r == -ETIMEDOUT)
        return err_set(err, EBUSY, "remove cgroup `%s`: it still has processes", cg->abs);
    if (r < 0)
        return err ? err_wrap(err, "remove cgroup") : r;
    if ((r = rmdir_children(cg->fd, 0)) < 0)
        return err_set(err, r, "remove cgroups below `%s`", cg->abs);
    if (unlinkat(cg->root_fd, cg->rel, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return err_set(err, errno, "remove cgroup `%s`", cg->abs);
    return 0;
}

int oci_cgroup_fd(struct oci_cgroup *cg) { return cg->fd; }

const char *oci_cgroup_path(struct oci_cgroup *cg) { return cg->abs; }

int oci_psi_parse(const char *text, struct oci_psi *ret)
{
    struct oci_psi psi = {0};
    bool some = false;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        bool full = str_has_prefix(p, "full ");
        if (!full && !str_has_prefix(p, "some "))
            return -EINVAL;
        double a10, a60, a300;
        unsigned long long total;
        if (sscanf(p + 5, "avg10=%lf avg60=%lf avg300=%lf total=%llu", &a10, &a60, &a300, &total) !=
            4)
            return -EINVAL;
        double *avg = full ? psi.full_avg : psi.some_avg;
        avg[0] = a10;
        avg[1] = a60;
        avg[2] = a300;
        *(full ? &psi.full_total : &psi.some_total) = total;
        some |= !full;
    }
    if (!some)
        return -EINVAL;
    *ret = psi;
    return 0;
}

/* Processes in the cgroup at dfd and below (depth-bounded). */
static uint64_t count_procs(int dfd, int depth)
{
    uint64_t n = 0;
    _cleanup_free_ char *procs = NULL;
    if (read_at(dfd, "cgroup.procs", &procs) == 0)
        for (const char *p = procs; *p; p++)
            n += *p == '\n';
    if (depth >= 16)
        return n;
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return n;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_type == DT_DIR && de->d_name[0] != '.') {
            _cleanup_close_ int sub =
                openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
            if (sub >= 0)
                n += count_procs(sub, depth + 1);
        }
    closedir(d);
    return n;
}

int oci_cgroup_stats(struct oci_cgroup *cg, struct oci_cgroup_stats *ret, struct err *err)
{
    struct oci_cgroup_stats st = {0};
    _cleanup_free_ char *cpu = NULL;
    int r = read_at(cg->fd, "cpu.stat", &cpu);
    if (r < 0)
        return err_set(err, r, "read cpu.stat of `%s`", cg->abs);
    (void)keyed_value(cpu, "usage_usec", &st.cpu_usage_usec);
    (void)keyed_value(cpu, "user_usec", &st.cpu_user_usec);
    (void)keyed_value(cpu, "system_usec", &st.cpu_system_usec);
    _cleanup_free_ char *weight = NULL, *cmax = NULL;
    if (keyed_value(cpu, "nr_periods", &st.cfs_periods) == 0 &&
        read_at(cg->fd, "cpu.weight", &weight) == 0 && read_at(cg->fd, "cpu.max", &cmax) == 0) {
        st.has_cpu = true;
        (void)keyed_value(cpu, "nr_throttled", &st.cfs_throttled);
        (void)keyed_value(cpu, "throttled_usec", &st.cfs_throttled_usec);
        st.cpu_weight = strtoull(weight, NULL, 10);
        st.cpu_quota = strncmp(cmax, "max", 3) == 0 ? UINT64_MAX : strtoull(cmax, NULL, 10);
        const char *sp = strchr(cmax, ' ');
        st.cpu_period = sp ? strtoull(sp + 1, NULL, 10) : 0;
    }

    _cleanup_free_ char *cur = NULL, *mstat = NULL, *mmax = NULL;
    if (read_at(cg->fd, "memory.current", &cur) == 0) {
        st.has_memory = true;
        st.memory_current = strtoull(cur, NULL, 10);
        uint64_t inactive = 0;
        if (read_at(cg->fd, "memory.stat", &mstat) == 0) {
            (void)keyed_value(mstat, "inactive_file", &inactive);
            (void)keyed_value(mstat, "anon", &st.memory_rss);
            (void)keyed_value(mstat, "pgfault", &st.pgfault);
            (void)keyed_value(mstat, "pgmajfault", &st.pgmajfault);
            (void)keyed_value(mstat, "file", &st.memory_file);
            (void)keyed_value(mstat, "file_mapped", &st.memory_mapped);
            st.has_kernel = keyed_value(mstat, "kernel", &st.memory_kernel) == 0;
        }
        _cleanup_free_ char *mmin = NULL, *events = NULL, *peak = NULL;
        if (read_at(cg->fd, "memory.min", &mmin) == 0)
            st.memory_min = strtoull(mmin, NULL, 10);
        if (read_at(cg->fd, "memory.events", &events) == 0)
            (void)keyed_value(events, "max", &st.memory_events_max);
        if (read_at(cg->fd, "memory.peak", &peak) == 0) {
            st.has_peak = true;
            st.memory_peak = strtoull(peak, NULL, 10);
        }
        st.memory_working_set = inactive < st.memory_current ? st.memory_current - inactive : 0;
        st.memory_max = UINT64_MAX;
        if (read_at(cg->fd, "memory.max", &mmax) == 0 && strncmp(mmax, "max", 3) != 0)
            st.memory_max = strtoull(mmax, NULL, 10);
        if ((r = oci_cgroup_oom_kills(cg, &st.oom_kills, err)) < 0)
            return r;
        _cleanup_free_ char *scur = NULL, *smax = NULL;
        if (read_at(cg->fd, "memory.swap.current", &scur) == 0) {
            st.has_swap = true;
            st.swap_current = strtoull(scur, NULL, 10);
            st.swap_max = UINT64_MAX;
            if (read_at(cg->fd, "memory.swap.max", &smax) == 0 && strncmp(smax, "max", 3) != 0)
                st.swap_max = strtoull(smax, NULL, 10);
        }
    }
    _cleanup_free_ char *pids = NULL;
    if (read_at(cg->fd, "pids.current", &pids) == 0) {
        st.has_pids = true;
        st.pids_current = strtoull(pids, NULL, 10);
        _cleanup_free_ char *pmax = NULL;
        st.pids_max = UINT64_MAX;
        if (read_at(cg->fd, "pids.max", &pmax) == 0 && strncmp(pmax, "max", 3) != 0)
            st.pids_max = strtoull(pmax, NULL, 10);
    }
    st.processes = count_procs(cg->fd, 0);
    static const char *const pressure[] = {"cpu.pressure", "memory.pressure", "io.pressure"};
    for (size_t i = 0; i < ARRAY_SIZE(pressure); i++) {
        _cleanup_free_ char *text = NULL;
        st.has_psi[i] =
            read_at(cg->fd, pressure[i], &text) == 0 && oci_psi_parse(text, &st.psi[i]) == 0;
    }
    *ret = st;
    return 0;
}
