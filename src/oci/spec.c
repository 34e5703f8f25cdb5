/* oci/spec: config.json → struct oci_spec.
 *
 * Pure (no I/O but oci_spec_load): every error names the JSON field at
 * fault, e.g. "`mounts[2].destination`: must be an absolute path". Unknown
 * fields are ignored, as the runtime spec asks. Sizes are bounded by the
 * OCI_*_MAX limits. */
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/capability.h>

#include "oci/internal.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static const char *const ns_names[OCI_NS_COUNT] = {
    [OCI_NS_USER] = "user",     [OCI_NS_PID] = "pid",   [OCI_NS_NET] = "network",
    [OCI_NS_IPC] = "ipc",       [OCI_NS_UTS] = "uts",   [OCI_NS_MOUNT] = "mount",
    [OCI_NS_CGROUP] = "cgroup", [OCI_NS_TIME] = "time",
};
static const int ns_flags[OCI_NS_COUNT] = {
    [OCI_NS_USER] = CLONE_NEWUSER,     [OCI_NS_PID] = CLONE_NEWPID,   [OCI_NS_NET] = CLONE_NEWNET,
    [OCI_NS_IPC] = CLONE_NEWIPC,       [OCI_NS_UTS] = CLONE_NEWUTS,   [OCI_NS_MOUNT] = CLONE_NEWNS,
    [OCI_NS_CGROUP] = CLONE_NEWCGROUP, [OCI_NS_TIME] = CLONE_NEWTIME,
};

const char *oci_ns_name(enum oci_ns_kind k) { return ns_names[k]; }
int oci_ns_clone_flag(enum oci_ns_kind k) { return ns_flags[k]; }

static void argv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static int type_error(struct err *err, const char *field, const char *what)
{
    return err_set(err, EINVAL, "`%s`: expected %s", field, what);
}

/* Optional string member; *ret stays NULL when absent. */
static int get_str(json_t *obj, const char *key, const char *field, bool required, char **ret,
                   struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return err_set(err, EINVAL, "`%s`: missing", field);
        return 0;
    }
    if (!json_is_string(v))
        return type_error(err, field, "a string");
    if (json_string_length(v) > OCI_STR_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
        return err_set(err, EINVAL, "`%s`: too long or contains NUL", field);
    *ret = strdup(json_string_value(v));
    return *ret ? 0 : err_set(err, ENOMEM, "`%s`", field);
}

static int get_strv(json_t *arr, const char *field, char ***ret, size_t *ret_n, struct err *err)
{
    *ret = NULL;
    if (ret_n)
        *ret_n = 0;
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return type_error(err, field, "an array of strings");
    size_t n = json_array_size(arr);
    if (n > OCI_LIST_MAX)
        return err_set(err, E2BIG, "`%s`: more than %u entries", field, OCI_LIST_MAX);
    char **v = calloc(n + 1, sizeof(char *));
    if (!v)
        return err_set(err, ENOMEM, "`%s`", field);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_string(s) || json_string_length(s) > OCI_STR_MAX ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            argv_free(v);
            return err_set(err, EINVAL, "`%s[%zu]`: expected a string", field, i);
        }
        v[i] = strdup(json_string_value(s));
        if (!v[i]) {
            argv_free(v);
            return err_set(err, ENOMEM, "`%s`", field);
        }
    }
    *ret = v;
    if (ret_n)
        *ret_n = n;
    return 0;
}

static int get_uint(json_t *obj, const char *key, const char *field, uint64_t max, bool *has,
                    uint64_t *ret, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (has)
        *has = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return err_set(err, EINVAL, "`%s`: expected an integer from 0 to %llu", field,
                       (unsigned long long)max);
    *ret = (uint64_t)json_integer_value(v);
    if (has)
        *has = true;
    return 0;
}

static int get_bool(json_t *obj, const char *key, const char *field, bool *ret, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return type_error(err, field, "true or false");
    *ret = json_is_true(v);
    return 0;
}

/* ---- capabilities, rlimits, signals ---------------------------------------- */

int oci_cap_parse(const char *name, int *ret)
{
    cap_value_t v;
    if (!str_has_prefix(name, "CAP_") || cap_from_name(name, &v) < 0)
        return -EINVAL;
    /* cap_from_name also takes numbers; the spec wants names. */
    if (v < 0 || v > 63)
        return -EINVAL;
    *ret = v;
    return 0;
}

static const struct {
    const char *name;
    int res;
} rlimit_names[] = {
    {"RLIMIT_AS", RLIMIT_AS},
    {"RLIMIT_CORE", RLIMIT_CORE},
    {"RLIMIT_CPU", RLIMIT_CPU},
    {"RLIMIT_DATA", RLIMIT_DATA},
    {"RLIMIT_FSIZE", RLIMIT_FSIZE},
    {"RLIMIT_LOCKS", RLIMIT_LOCKS},
    {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK},
    {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE},
    {"RLIMIT_NICE", RLIMIT_NICE},
    {"RLIMIT_NOFILE", RLIMIT_NOFILE},
    {"RLIMIT_NPROC", RLIMIT_NPROC},
    {"RLIMIT_RSS", RLIMIT_RSS},
    {"RLIMIT_RTPRIO", RLIMIT_RTPRIO},
    {"RLIMIT_RTTIME", RLIMIT_RTTIME},
    {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING},
    {"RLIMIT_STACK", RLIMIT_STACK},
};

static const struct {
    const char *name;
    int sig;
} signal_names[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},     {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"IOT", SIGIOT},       {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL}, {"USR1", SIGUSR1},     {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},     {"TERM", SIGTERM},
    {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},     {"URG", SIGURG},
    {"XCPU", SIGXCPU},     {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
    {"WINCH", SIGWINCH},   {"IO", SIGIO},     {"POLL", SIGPOLL},     {"PWR", SIGPWR},
    {"SYS", SIGSYS},
};

int oci_signal_parse(const char *s, int *ret)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (*s && !*end && !errno) {
        if (n <= 0 || n > SIGRTMAX)
            return -EINVAL;
        *ret = (int)n;
        return 0;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < ARRAY_SIZE(signal_names); i++)
        if (strcasecmp(s, signal_names[i].name) == 0) {
            *ret = signal_names[i].sig;
            return 0;
        }
    if (strncasecmp(s, "RTMIN", 5) == 0 || strncasecmp(s, "RTMAX", 5) == 0) {
        bool min = strncasecmp(s, "RTMIN", 5) == 0;
        long off = 0;
        if (s[5]) {
            off = strtol(s + 5, &end, 10);
            if (*end)
                return -EINVAL;
        }
        int sig = (int)(min ? SIGRTMIN + off : SIGRTMAX + off);
        if (sig < SIGRTMIN || sig > SIGRTMAX)
            return -EINVAL;
        *ret = sig;
        return 0;
    }
    return -EINVAL;
}

/* ---- process ----------------------------------------------------------- */

void oci_process_clear(struct oci_process *p)
{
    free(p->cwd);
    argv_free(p->args);
    argv_free(p->env);
    free(p->gids);
    free(p->rlimits);
    free(p->apparmor);
    free(p->selinux_label);
    memset(p, 0, sizeof(*p));
}

static int parse_caps(json_t *caps, const char *field, struct oci_process *p, struct err *err)
{
    static const char *const sets[OCI_CAP_SETS] = {
        [OCI_CAP_BOUNDING] = "bounding",       [OCI_CAP_EFFECTIVE] = "effective",
        [OCI_CAP_INHERITABLE] = "inheritable", [OCI_CAP_PERMITTED] = "permitted",
        [OCI_CAP_AMBIENT] = "ambient",
    };
    if (!caps || json_is_null(caps))
        return 0;
    if (!json_is_object(caps))
        return type_error(err, field, "an object");
    p->has_caps = true;
    for (int s = 0; s < OCI_CAP_SETS; s++) {
        json_t *arr = json_object_get(caps, sets[s]);
        if (!arr || json_is_null(arr))
            continue;
        if (!json_is_array(arr) || json_array_size(arr) > 256)
            return err_set(err, EINVAL, "`%s.%s`: expected an array of names", field, sets[s]);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            json_t *v = json_array_get(arr, i);
            int cap;
            if (!json_is_string(v) || oci_cap_parse(json_string_value(v), &cap) < 0)
                return err_set(err, EINVAL, "`%s.%s[%zu]`: unknown capability `%s`", field, sets[s],
                               i, json_is_string(v) ? json_string_value(v) : "?");
            /* Capabilities this kernel does not know are skipped, as
             * runc and crun do, so that one spec serves many kernels. */
            if (cap > (int)cap_max_bits() - 1)
                continue;
            p->caps[s] |= 1ull << cap;
        }
    }
    return 0;
}

int oci_process_parse(json_t *obj, const char *field, struct oci_process *p, struct err *err)
{
    char f[128];
    int r;
    memset(p, 0, sizeof(*p));
    if (!json_is_object(obj))
        return type_error(err, field, "an object");

    snprintf(f, sizeof(f), "%s.terminal", field);
    if ((r = get_bool(obj, "terminal", f, &p->terminal, err)) < 0)
        return r;
    json_t *cs = json_object_get(obj, "consoleSize");
    if (cs && !json_is_null(cs)) {
        uint64_t h = 0, w = 0;
        snprintf(f, sizeof(f), "%s.consoleSize.height", field);
        if ((r = get_uint(cs, "height", f, 65535, NULL, &h, err)) < 0)
            return r;
        snprintf(f, sizeof(f), "%s.consoleSize.width", field);
        if ((r = get_uint(cs, "width", f, 65535, NULL, &w, err)) < 0)
            return r;
        p->cons_height = (unsigned)h;
        p->cons_width = (unsigned)w;
    }
    snprintf(f, sizeof(f), "%s.cwd", field);
    if ((r = get_str(obj, "cwd", f, true, &p->cwd, err)) < 0)
        return r;
    if (p->cwd[0] != '/')
        return err_set(err, EINVAL, "`%s`: must be an absolute path", f);
    snprintf(f, sizeof(f), "%s.args", field);
    if ((r = get_strv(json_object_get(obj, "args"), f, &p->args, NULL, err)) < 0)
        return r;
    if (!p->args || !p->args[0] || !p->args[0][0])
        return err_set(err, EINVAL, "`%s`: expected a non-empty array", f);
    snprintf(f, sizeof(f), "%s.env", field);
    if ((r = get_strv(json_object_get(obj, "env"), f, &p->env, NULL, err)) < 0)
        return r;
    for (size_t i = 0; p->env && p->env[i]; i++)
        if (!strchr(p->env[i], '=') || p->env[i][0] == '=')
            return err_set(err, EINVAL, "`%s[%zu]`: expected KEY=VALUE", f, i);

    json_t *user = json_object_get(obj, "user");
    if (user && !json_is_null(user)) {
        uint64_t v = 0;
        bool has;
        snprintf(f, sizeof(f), "%s.user", field);
        if (!json_is_object(user))
            return type_error(err, f, "an object");
        snprintf(f, sizeof(f), "%s.user.uid", field);
        if ((r = get_uint(user, "uid", f, UINT32_MAX - 1, NULL, &v, err)) < 0)
            return r;
        p->uid = (uid_t)v;
        v = 0;
        snprintf(f, sizeof(f), "%s.user.gid", field);
        if ((r = get_uint(user, "gid", f, UINT32_MAX - 1, NULL, &v, err)) < 0)
            return r;
        p->gid = (gid_t)v;
        snprintf(f, sizeof(f), "%s.user.umask", field);
        if ((r = get_uint(user, "umask", f, 0777, &has, &v, err)) < 0)
            return r;
        p->has_umask = has;
        p->umask = (mode_t)v;
        json_t *gids = json_object_get(user, "additionalGids");
        snprintf(f, sizeof(f), "%s.user.additionalGids", field);
        if (gids && !json_is_null(gids)) {
            if (!json_is_array(gids) || json_array_size(gids) > 65536)
                return type_error(err, f, "an array of gids");
            p->n_gids = json_array_size(gids);
            p->gids = calloc(p->n_gids + 1, sizeof(gid_t));
            if (!p->gids)
                return err_set(err, ENOMEM, "`%s`", f);
            for (size_t i = 0; i < p->n_gids; i++) {
                json_t *g = json_array_get(gids, i);
                if (!json_is_integer(g) || json_integer_value(g) < 0 ||
                    json_integer_value(g) >= UINT32_MAX)
                    return err_set(err, EINVAL, "`%s[%zu]`: expected a gid", f, i);
                p->gids[i] = (gid_t)json_integer_value(g);
            }
        }
    }

    json_t *rl = json_object_get(obj, "rlimits");
    snprintf(f, sizeof(f), "%s.rlimits", field);
    if (rl && !json_is_null(rl)) {
        if (!json_is_array(rl) || json_array_size(rl) > 64)
            return type_error(err, f, "an array");
        p->rlimits = calloc(json_array_size(rl) + 1, sizeof(*p->rlimits));
        if (!p->rlimits)
            return err_set(err, ENOMEM, "`%s`", f);
        for (size_t i = 0; i < json_array_size(rl); i++) {
            json_t *e = json_array_get(rl, i);
            json_t *t = json_object_get(e, "type");
            int res = -1;
            for (size_t k = 0; json_is_string(t) && k < ARRAY_SIZE(rlimit_names); k++)
                if (strcmp(json_string_value(t), rlimit_names[k].name) == 0)
                    res = rlimit_names[k].res;
            if (res < 0)
                return err_set(err, EINVAL, "`%s[%zu].type`: unknown rlimit `%s`", f, i,
                               json_is_string(t) ? json_string_value(t) : "?");
            json_t *soft = json_object_get(e, "soft"), *hard = json_object_get(e, "hard");
            if (!json_is_integer(soft) || !json_is_integer(hard))
                return err_set(err, EINVAL, "`%s[%zu]`: `soft` and `hard` must be integers", f, i);
            /* jansson holds int64: -1 and huge values mean unlimited. */
            p->rlimits[i].resource = res;
            p->rlimits[i].soft = (rlim_t)json_integer_value(soft);
            p->rlimits[i].hard = (rlim_t)json_integer_value(hard);
            p->n_rlimits++;
        }
    }

    snprintf(f, sizeof(f), "%s.capabilities", field);
    if ((r = parse_caps(json_object_get(obj, "capabilities"), f, p, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.noNewPrivileges", field);
    if ((r = get_bool(obj, "noNewPrivileges", f, &p->no_new_privileges, err)) < 0)
        return r;
    json_t *oom = json_object_get(obj, "oomScoreAdj");
    if (oom && !json_is_null(oom)) {
        if (!json_is_integer(oom) || json_integer_value(oom) < -1000 ||
            json_integer_value(oom) > 1000)
            return err_set(err, EINVAL, "`%s.oomScoreAdj`: expected an integer from -1000 to 1000",
                           field);
        p->has_oom_score_adj = true;
        p->oom_score_adj = (int)json_integer_value(oom);
    }
    snprintf(f, sizeof(f), "%s.apparmorProfile", field);
    if ((r = get_str(obj, "apparmorProfile", f, false, &p->apparmor, err)) < 0)
        return r;
    if (p->apparmor && *p->apparmor && (r = oci_apparmor_name_valid(p->apparmor)) < 0)
        return err_set(err, -r, "`%s`: a control character, or longer than %d bytes", f,
                       OCI_APPARMOR_NAME_MAX);
    snprintf(f, sizeof(f), "%s.selinuxLabel", field);
    if ((r = get_str(obj, "selinuxLabel", f, false, &p->selinux_label, err)) < 0)
        return r;
    return 0;
}

/* Checked here, where process.apparmorProfile is read (apparmor.c writes it
 * to the kernel). */
int oci_apparmor_name_valid(const char *name)
{
    if (!name || !*name)
        return -EINVAL;
    size_t n = strlen(name);
    if (n > OCI_APPARMOR_NAME_MAX)
        return -ENAMETOOLONG;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '\n' || (unsigned char)name[i] < 0x20)
            return -EINVAL;
    return 0;
}

/* ---- mounts ------------------------------------------------------------- */

static const struct {
    const char *name;
    bool clear;
    unsigned long flag;
} mount_flags[] = {
    {"ro", false, MS_RDONLY},
    {"rw", true, MS_RDONLY},
    {"nosuid", false, MS_NOSUID},
    {"suid", true, MS_NOSUID},
    {"nodev", false, MS_NODEV},
    {"dev", true, MS_NODEV},
    {"noexec", false, MS_NOEXEC},
    {"exec", true, MS_NOEXEC},
    {"sync", false, MS_SYNCHRONOUS},
    {"async", true, MS_SYNCHRONOUS},
    {"dirsync", false, MS_DIRSYNC},
    {"remount", false, MS_REMOUNT},
    {"mand", false, MS_MANDLOCK},
    {"nomand", true, MS_MANDLOCK},
    {"atime", true, MS_NOATIME},
    {"noatime", false, MS_NOATIME},
    {"diratime", true, MS_NODIRATIME},
    {"nodiratime", false, MS_NODIRATIME},
    {"relatime", false, MS_RELATIME},
    {"norelatime", true, MS_RELATIME},
    {"strictatime", false, MS_STRICTATIME},
    {"nostrictatime", true, MS_STRICTATIME},
    {"silent", false, MS_SILENT},
    {"loud", true, MS_SILENT},
    {"lazytime", false, MS_LAZYTIME},
    {"nolazytime", true, MS_LAZYTIME},
    {"iversion", false, MS_I_VERSION},
    {"noiversion", true, MS_I_VERSION},
};

static const struct {
    const char *name;
    unsigned long flag;
} propagation_flags[] = {
    {"private", MS_PRIVATE},       {"rprivate", MS_PRIVATE | MS_REC},
    {"shared", MS_SHARED},         {"rshared", MS_SHARED | MS_REC},
    {"slave", MS_SLAVE},           {"rslave", MS_SLAVE | MS_REC},
    {"unbindable", MS_UNBINDABLE}, {"runbindable", MS_UNBINDABLE | MS_REC},
};

int oci_mount_options_parse(json_t *options, struct oci_mount *m, const char *field,
                            struct err *err)
{
    if (!options || json_is_null(options))
        return 0;
    if (!json_is_array(options) || json_array_size(options) > 256)
        return type_error(err, field, "an array of strings");
    struct buf data = {0};
    for (size_t i = 0; i < json_array_size(options); i++) {
        json_t *o = json_array_get(options, i);
        if (!json_is_string(o) || json_string_length(o) > 4096) {
            buf_free(&data);
            return err_set(err, EINVAL, "`%s[%zu]`: expected a string", field, i);
        }
        const char *s = json_string_value(o);
        bool done = false;
        if (strcmp(s, "bind") == 0) {
            m->bind = true;
            done = true;
        } else if (strcmp(s, "rbind") == 0) {
            m->bind = true;
            m->flags |= MS_REC;
            done = true;
        } else if (strcmp(s, "tmpcopyup") == 0 || strcmp(s, "notmpcopyup") == 0 ||
                   strcmp(s, "copy-symlink") == 0 || strcmp(s, "nocopyup") == 0 ||
                   strcmp(s, "z") == 0 || strcmp(s, "Z") == 0) {
            /* Hints some tools add for other runtimes (crun's tmpfs
             * copy-up, SELinux relabelling): not filesystem options. */
            done = true;
        } else if (strcmp(s, "rro") == 0) {
            m->rro = true;
            m->flags |= MS_RDONLY;
            done = true;
        } else if (strcmp(s, "idmap") == 0 || strcmp(s, "ridmap") == 0) {
            m->idmap = true;
            if (s[0] == 'r')
                m->flags |= MS_REC;
            done = true;
        }
        for (size_t k = 0; !done && k < ARRAY_SIZE(mount_flags); k++)
            if (strcmp(s, mount_flags[k].name) == 0) {
                if (mount_flags[k].clear) {
                    m->flags &= ~mount_flags[k].flag;
                    m->clear |= mount_flags[k].flag;
                } else {
                    m->flags |= mount_flags[k].flag;
                    m->clear &= ~mount_flags[k].flag;
                }
                done = true;
            }
        for (size_t k = 0; !done && k < ARRAY_SIZE(propagation_flags); k++)
            if (strcmp(s, propagation_flags[k].name) == 0) {
                m->propagation = propagation_flags[k].flag;
                done = true;
            }
        if (done)
            continue;
        if ((data.len && buf_append(&data, ",", 1) < 0) || buf_append(&data, s, strlen(s)) < 0) {
            buf_free(&data);
            return err_set(err, ENOMEM, "`%s`", field);
        }
    }
    if (data.len) {
        if (buf_append(&data, "", 1) < 0) {
            buf_free(&data);
            return err_set(err, ENOMEM, "`%s`", field);
        }
        free(m->data);
        m->data = (char *)data.data;
    } else {
        buf_free(&data); /* only empty options: allocated, nothing kept */
    }
    return 0;
}

bool oci_path_is_clean(const char *p)
{
    /* Rejects NUL-free paths with ".." components; "." and "//" are fine. */
    for (const char *s = p; *s;) {
        const char *e = strchrnul(s, '/');
        if (e - s == 2 && s[0] == '.' && s[1] == '.')
            return false;
        s = *e ? e + 1 : e;
    }
    return true;
}

static int parse_idmaps(json_t *arr, const char *field, struct oci_idmap **ret, size_t *ret_n,
                        struct err *err);

enum oci_proc_place oci_mount_proc_place(const char *dest)
{
    static const char *const allowed[] = {
        "/proc/cpuinfo", "/proc/diskstats",
        "/proc/meminfo", "/proc/stat",
        "/proc/swaps",   "/proc/uptime",
        "/proc/loadavg", "/proc/slabinfo",
        "/proc/net/dev", "/proc/sys/kernel/ns_last_pid",
    };
    /* Fold the path as the kernel walks it with no symlink: ".." at the
     * root stays there. */
    char clean[PATH_MAX];
    size_t len = 0;
    for (const char *s = dest; *s;) {
        while (*s == '/')
            s++;
        const char *e = strchrnul(s, '/');
        size_t n = (size_t)(e - s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            while (len && clean[len - 1] != '/')
                len--;
            if (len)
                len--;
        } else if (n && !(n == 1 && s[0] == '.')) {
            if (len + 1 + n >= sizeof(clean))
                return OCI_PROC_REFUSED; /* too long to be one of ours */
            clean[len++] = '/';
            memcpy(clean + len, s, n);
            len += n;
        }
        s = e;
    }
    clean[len] = '\0';
    if (strcmp(clean, "/proc") == 0)
        return OCI_PROC_ROOT;
    if (strncmp(clean, "/proc/", 6) != 0)
        return OCI_PROC_OUTSIDE;
    for (size_t i = 0; i < ARRAY_SIZE(allowed); i++)
        if (strcmp(clean, allowed[i]) == 0)
            return OCI_PROC_ALLOWED;
    return OCI_PROC_REFUSED;
}

int oci_mount_destination_check(const char *dest, const char *type, bool bind, struct err *err)
{
    switch (oci_mount_proc_place(dest)) {
    case OCI_PROC_REFUSED:
        return err_set(err, EINVAL,
                       "`%s` is inside /proc, where only /proc/cpuinfo, diskstats, meminfo, stat, "
                       "swaps, uptime, loadavg, slabinfo, net/dev and sys/kernel/ns_last_pid may "
                       "be mounted over",
                       dest);
    case OCI_PROC_ROOT:
        if (!bind && (!type || strcmp(type, "proc") != 0))
            return err_set(err, EINVAL, "`%s`: only a procfs may be mounted on /proc", dest);
        return 0;
    default:
        return 0;
    }
}

static int parse_mounts(json_t *arr, struct oci_spec *spec, struct err *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > OCI_LIST_MAX)
        return type_error(err, "mounts", "an array");
    spec->mounts = calloc(json_array_size(arr) + 1, sizeof(*spec->mounts));
    if (!spec->mounts)
        return err_set(err, ENOMEM, "`mounts`");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        struct oci_mount *m = &spec->mounts[i];
        spec->n_mounts++;
        char f[64];
        int r;
        snprintf(f, sizeof(f), "mounts[%zu]", i);
        if (!json_is_object(o))
            return type_error(err, f, "an object");
        snprintf(f, sizeof(f), "mounts[%zu].destination", i);
        if ((r = get_str(o, "destination", f, true, &m->destination, err)) < 0)
            return r;
        if (m->destination[0] != '/')
            return err_set(err, EINVAL, "`%s`: `%s` must be an absolute path", f, m->destination);
        snprintf(f, sizeof(f), "mounts[%zu].source", i);
        if ((r = get_str(o, "source", f, false, &m->source, err)) < 0)
            return r;
        snprintf(f, sizeof(f), "mounts[%zu].type", i);
        if ((r = get_str(o, "type", f, false, &m->type, err)) < 0)
            return r;
        snprintf(f, sizeof(f), "mounts[%zu].options", i);
        if ((r = oci_mount_options_parse(json_object_get(o, "options"), m, f, err)) < 0)
            return r;
        if (m->type && strcmp(m->type, "bind") == 0)
            m->bind = true;
        if (m->bind && !m->source)
            return err_set(err, EINVAL, "`mounts[%zu].source`: a bind mount needs a source", i);
        if (!m->bind && !m->type)
            return err_set(err, EINVAL, "`mounts[%zu].type`: missing", i);
        if (oci_mount_destination_check(m->destination, m->type, m->bind, err) < 0)
            return err_wrap(err, "`mounts[%zu].destination`", i);
        json_t *um = json_object_get(o, "uidMappings"), *gm = json_object_get(o, "gidMappings");
        if ((um && !json_is_null(um)) || (gm && !json_is_null(gm))) {
            /* The runtime spec: mappings on a mount need idmap or ridmap. */
            if (!m->idmap)
                return err_set(err, EINVAL,
                               "`mounts[%zu].uidMappings`: id mappings need the `idmap` or "
                               "`ridmap` option",
                               i);
            snprintf(f, sizeof(f), "mounts[%zu].uidMappings", i);
            if ((r = parse_idmaps(um, f, &m->uid_maps, &m->n_uid_maps, err)) < 0)
                return r;
            snprintf(f, sizeof(f), "mounts[%zu].gidMappings", i);
            if ((r = parse_idmaps(gm, f, &m->gid_maps, &m->n_gid_maps, err)) < 0)
                return r;
            if (!m->n_uid_maps || !m->n_gid_maps)
                return err_set(err, EINVAL,
                               "`mounts[%zu]`: uidMappings and gidMappings go together", i);
        }
    }
    return 0;
}

/* ---- linux -------------------------------------------------------------- */

static int parse_idmaps(json_t *arr, const char *field, struct oci_idmap **ret, size_t *ret_n,
                        struct err *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > 340)
        return type_error(err, field, "an array of at most 340 mappings");
    *ret = calloc(json_array_size(arr) + 1, sizeof(**ret));
    if (!*ret)
        return err_set(err, ENOMEM, "`%s`", field);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        uint64_t c = 0, h = 0, s = 0;
        bool hc, hh, hs;
        char f[96];
        int r;
        snprintf(f, sizeof(f), "%s[%zu].containerID", field, i);
        if ((r = get_uint(o, "containerID", f, UINT32_MAX, &hc, &c, err)) < 0)
            return r;
        snprintf(f, sizeof(f), "%s[%zu].hostID", field, i);
        if ((r = get_uint(o, "hostID", f, UINT32_MAX, &hh, &h, err)) < 0)
            return r;
        snprintf(f, sizeof(f), "%s[%zu].size", field, i);
        if ((r = get_uint(o, "size", f, UINT32_MAX, &hs, &s, err)) < 0)
            return r;
        if (!hc || !hh || !hs || s == 0)
            return err_set(err, EINVAL, "`%s[%zu]`: containerID, hostID and size are required",
                           field, i);
        (*ret)[i] = (struct oci_idmap){(uint32_t)c, (uint32_t)h, (uint32_t)s};
        (*ret_n)++;
    }
    return 0;
}

static int parse_namespaces(json_t *arr, struct oci_spec *spec, struct err *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > 32)
        return type_error(err, "linux.namespaces", "an array");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        json_t *t = json_object_get(o, "type");
        int k = -1;
        for (int j = 0; json_is_string(t) && j < OCI_NS_COUNT; j++)
            if (strcmp(json_string_value(t), ns_names[j]) == 0)
                k = j;
        if (k < 0)
            return err_set(err, EINVAL, "`linux.namespaces[%zu].type`: unknown namespace `%s`", i,
                           json_is_string(t) ? json_string_value(t) : "?");
        if (spec->ns[k].enabled)
            return err_set(err, EINVAL, "`linux.namespaces[%zu].type`: `%s` given twice", i,
                           ns_names[k]);
        spec->ns[k].enabled = true;
        char f[64];
        snprintf(f, sizeof(f), "linux.namespaces[%zu].path", i);
        int r = get_str(o, "path", f, false, &spec->ns[k].path, err);
        if (r < 0)
            return r;
        if (spec->ns[k].path && spec->ns[k].path[0] != '/')
            return err_set(err, EINVAL, "`%s`: must be an absolute path", f);
    }
    return 0;
}

static int parse_devices(json_t *arr, struct oci_spec *spec, struct err *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > OCI_LIST_MAX)
        return type_error(err, "linux.devices", "an array");
    spec->devices = calloc(json_array_size(arr) + 1, sizeof(*spec->devices));
    if (!spec->devices)
        return err_set(err, ENOMEM, "`linux.devices`");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        struct oci_device *d = &spec->devices[i];
        spec->n_devices++;
        char f[64];
        int r;
        uint64_t v = 0;
        snprintf(f, sizeof(f), "linux.devices[%zu].path", i);
        if ((r = get_str(o, "path", f, true, &d->path, err)) < 0)
            return r;
        if (d->path[0] != '/' || !oci_path_is_clean(d->path))
            return err_set(err, EINVAL, "`%s`: `%s` must be an absolute path without `..`", f,
                           d->path);
        json_t *t = json_object_get(o, "type");
        if (!json_is_string(t) || json_string_length(t) != 1 ||
            !strchr("cbup", json_string_value(t)[0]))
            return err_set(err, EINVAL, "`linux.devices[%zu].type`: expected c, b, u or p", i);
        d->type = json_string_value(t)[0];
        snprintf(f, sizeof(f), "linux.devices[%zu].major", i);
        if ((r = get_uint(o, "major", f, 0xfff, NULL, &v, err)) < 0)
            return r;
        d->major = (int64_t)v;
        v = 0;
        snprintf(f, sizeof(f), "linux.devices[%zu].minor", i);
        if ((r = get_uint(o, "minor", f, 0xfffff, NULL, &v, err)) < 0)
            return r;
        d->minor = (int64_t)v;
        if (d->type != 'p' && (!json_object_get(o, "major") || !json_object_get(o, "minor")))
            return err_set(err, EINVAL, "`linux.devices[%zu]`: major and minor are required", i);
        snprintf(f, sizeof(f), "linux.devices[%zu].fileMode", i);
        if ((r = get_uint(o, "fileMode", f, 07777, &d->has_mode, &v, err)) < 0)
            return r;
        d->mode = (mode_t)v;
        snprintf(f, sizeof(f), "linux.devices[%zu].uid", i);
        if ((r = get_uint(o, "uid", f, UINT32_MAX - 1, &d->has_uid, &v, err)) < 0)
            return r;
        d->uid = (uid_t)v;
        snprintf(f, sizeof(f), "linux.devices[%zu].gid", i);
        if ((r = get_uint(o, "gid", f, UINT32_MAX - 1, &d->has_gid, &v, err)) < 0)
            return r;
        d->gid = (gid_t)v;
    }
    return 0;
}

static int parse_sysctl(json_t *obj, struct oci_spec *spec, struct err *err)
{
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj) || json_object_size(obj) > OCI_LIST_MAX)
        return type_error(err, "linux.sysctl", "an object of strings");
    spec->sysctl = calloc(json_object_size(obj) + 1, sizeof(*spec->sysctl));
    if (!spec->sysctl)
        return err_set(err, ENOMEM, "`linux.sysctl`");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        if (!json_is_string(v))
            return err_set(err, EINVAL, "`linux.sysctl.%s`: expected a string", key);
        if (!*key || strstr(key, "..") || key[0] == '/' || key[0] == '.' || strlen(key) > 256)
            return err_set(err, EINVAL, "`linux.sysctl`: invalid key `%s`", key);
        struct oci_sysctl *s = &spec->sysctl[spec->n_sysctl++];
        s->key = strdup(key);
        s->value = strdup(json_string_value(v));
        if (!s->key || !s->value)
            return err_set(err, ENOMEM, "`linux.sysctl`");
    }
    return 0;
}

static int parse_hooks(json_t *obj, struct oci_spec *spec, struct err *err)
{
    static const char *const names[OCI_HOOK_COUNT] = {
        [OCI_HOOK_PRESTART] = "prestart",
        [OCI_HOOK_CREATE_RUNTIME] = "createRuntime",
        [OCI_HOOK_CREATE_CONTAINER] = "createContainer",
        [OCI_HOOK_START_CONTAINER] = "startContainer",
        [OCI_HOOK_POSTSTART] = "poststart",
        [OCI_HOOK_POSTSTOP] = "poststop",
    };
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj))
        return type_error(err, "hooks", "an object");
    for (int k = 0; k < OCI_HOOK_COUNT; k++) {
        json_t *arr = json_object_get(obj, names[k]);
        if (!arr || json_is_null(arr))
            continue;
        if (!json_is_array(arr) || json_array_size(arr) > 256)
            return err_set(err, EINVAL, "`hooks.%s`: expected an array", names[k]);
        spec->hooks.list[k] = calloc(json_array_size(arr) + 1, sizeof(struct oci_hook));
        if (!spec->hooks.list[k])
            return err_set(err, ENOMEM, "`hooks`");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            json_t *o = json_array_get(arr, i);
            struct oci_hook *h = &spec->hooks.list[k][i];
            spec->hooks.n[k]++;
            char f[96];
            int r;
            snprintf(f, sizeof(f), "hooks.%s[%zu].path", names[k], i);
            if ((r = get_str(o, "path", f, true, &h->path, err)) < 0)
                return r;
            if (h->path[0] != '/')
                return err_set(err, EINVAL, "`%s`: must be an absolute path", f);
            snprintf(f, sizeof(f), "hooks.%s[%zu].args", names[k], i);
            if ((r = get_strv(json_object_get(o, "args"), f, &h->args, NULL, err)) < 0)
                return r;
            snprintf(f, sizeof(f), "hooks.%s[%zu].env", names[k], i);
            if ((r = get_strv(json_object_get(o, "env"), f, &h->env, NULL, err)) < 0)
                return r;
            uint64_t t = 0;
            bool has;
            snprintf(f, sizeof(f), "hooks.%s[%zu].timeout", names[k], i);
            if ((r = get_uint(o, "timeout", f, 86400, &has, &t, err)) < 0)
                return r;
            if (has && t == 0)
                return err_set(err, EINVAL, "`%s`: must be greater than zero", f);
            h->timeout = (int)t;
        }
    }
    return 0;
}

static int parse_linux(json_t *linux_obj, struct oci_spec *spec, struct err *err)
{
    int r;
    if (!linux_obj || json_is_null(linux_obj))
        return 0;
    if (!json_is_object(linux_obj))
        return type_error(err, "linux", "an object");
    if ((r = parse_namespaces(json_object_get(linux_obj, "namespaces"), spec, err)) < 0)
        return r;
    if ((r = parse_idmaps(json_object_get(linux_obj, "uidMappings"), "linux.uidMappings",
                          &spec->uid_maps, &spec->n_uid_maps, err)) < 0)
        return r;
    if ((r = parse_idmaps(json_object_get(linux_obj, "gidMappings"), "linux.gidMappings",
                          &spec->gid_maps, &spec->n_gid_maps, err)) < 0)
        return r;
    if ((r = parse_devices(json_object_get(linux_obj, "devices"), spec, err)) < 0)
        return r;
    if ((r = parse_sysctl(json_object_get(linux_obj, "sysctl"), spec, err)) < 0)
        return r;
    if ((r = get_strv(json_object_get(linux_obj, "maskedPaths"), "linux.maskedPaths",
                      &spec->masked_paths, &spec->n_masked, err)) < 0)
        return r;
    if ((r = get_strv(json_object_get(linux_obj, "readonlyPaths"), "linux.readonlyPaths",
                      &spec->readonly_paths, &spec->n_readonly, err)) < 0)
        return r;
    for (size_t i = 0; i < spec->n_masked; i++)
        if (spec->masked_paths[i][0] != '/')
            return err_set(err, EINVAL, "`linux.maskedPaths[%zu]`: must be an absolute path", i);
    for (size_t i = 0; i < spec->n_readonly; i++)
        if (spec->readonly_paths[i][0] != '/')
            return err_set(err, EINVAL, "`linux.readonlyPaths[%zu]`: must be an absolute path", i);
    _cleanup_free_ char *prop = NULL;
    if ((r = get_str(linux_obj, "rootfsPropagation", "linux.rootfsPropagation", false, &prop,
                     err)) < 0)
        return r;
    if (prop) {
        for (size_t k = 0; k < ARRAY_SIZE(propagation_flags); k++)
            if (strcmp(prop, propagation_flags[k].name) == 0)
                spec->rootfs_propagation = propagation_flags[k].flag;
        if (!spec->rootfs_propagation)
            return err_set(err, EINVAL, "`linux.rootfsPropagation`: unknown value `%s`", prop);
    }
    if ((r = get_str(linux_obj, "cgroupsPath", "linux.cgroupsPath", false, &spec->cgroups_path,
                     err)) < 0)
        return r;
    spec->resources = json_object_get(linux_obj, "resources");
    if (spec->resources && !json_is_object(spec->resources) && !json_is_null(spec->resources))
        return type_error(err, "linux.resources", "an object");
    spec->seccomp = json_object_get(linux_obj, "seccomp");
    if (spec->seccomp && !json_is_object(spec->seccomp) && !json_is_null(spec->seccomp))
        return type_error(err, "linux.seccomp", "an object");
    json_t *to = json_object_get(linux_obj, "timeOffsets");
    if (to && !json_is_null(to)) {
        if (!json_is_object(to))
            return type_error(err, "linux.timeOffsets", "an object");
        static const char *const clocks[] = {"boottime", "monotonic"};
        for (int i = 0; i < 2; i++) {
            json_t *c = json_object_get(to, clocks[i]);
            if (!c || json_is_null(c))
                continue;
            json_t *secs = json_object_get(c, "secs"), *ns = json_object_get(c, "nanosecs");
            if ((secs && !json_is_integer(secs)) ||
                (ns && (!json_is_integer(ns) || json_integer_value(ns) < 0 ||
                        json_integer_value(ns) >= 1000000000)))
                return err_set(err, EINVAL,
                               "`linux.timeOffsets.%s`: expected integer secs and "
                               "nanosecs below 1e9",
                               clocks[i]);
            int64_t s = secs ? (int64_t)json_integer_value(secs) : 0;
            uint32_t n = ns ? (uint32_t)json_integer_value(ns) : 0;
            if (i == 0) {
                spec->boottime_secs = s;
                spec->boottime_nsecs = n;
            } else {
                spec->monotonic_secs = s;
                spec->monotonic_nsecs = n;
            }
            spec->has_time_offsets = true;
        }
        if (spec->has_time_offsets &&
            !(spec->ns[OCI_NS_TIME].enabled && !spec->ns[OCI_NS_TIME].path))
            return err_set(err, EINVAL, "`linux.timeOffsets`: needs a new time namespace");
    }
    json_t *pers = json_object_get(linux_obj, "personality");
    if (pers && !json_is_null(pers)) {
        json_t *d = json_object_get(pers, "domain");
        if (!json_is_string(d))
            return err_set(err, EINVAL, "`linux.personality.domain`: missing");
        if (strcmp(json_string_value(d), "LINUX") == 0)
            spec->personality = PER_LINUX;
        else if (strcmp(json_string_value(d), "LINUX32") == 0)
            spec->personality = PER_LINUX32;
        else
            return err_set(err, EINVAL, "`linux.personality.domain`: unknown domain `%s`",
                           json_string_value(d));
        spec->has_personality = true;
    }
    if (spec->ns[OCI_NS_USER].enabled && !spec->ns[OCI_NS_USER].path &&
        (!spec->n_uid_maps || !spec->n_gid_maps))
        return err_set(err, EINVAL,
                       "`linux.uidMappings`: a new user namespace needs uid and gid mappings");
    return 0;
}

void oci_spec_free(struct oci_spec *spec)
{
    if (!spec)
        return;
    free(spec->root_path);
    free(spec->hostname);
    free(spec->domainname);
    oci_process_clear(&spec->process);
    for (size_t i = 0; i < spec->n_mounts; i++) {
        free(spec->mounts[i].destination);
        free(spec->mounts[i].source);
        free(spec->mounts[i].type);
        free(spec->mounts[i].data);
        free(spec->mounts[i].uid_maps);
        free(spec->mounts[i].gid_maps);
    }
    free(spec->mounts);
    for (int k = 0; k < OCI_NS_COUNT; k++)
        free(spec->ns[k].path);
    free(spec->uid_maps);
    free(spec->gid_maps);
    for (size_t i = 0; i < spec->n_devices; i++)
        free(spec->devices[i].path);
    free(spec->devices);
    for (size_t i = 0; i < spec->n_sysctl; i++) {
        free(spec->sysctl[i].key);
        free(spec->sysctl[i].value);
    }
    free(spec->sysctl);
    argv_free(spec->masked_paths);
    argv_free(spec->readonly_paths);
    free(spec->cgroups_path);
    for (int k = 0; k < OCI_HOOK_COUNT; k++) {
        for (size_t i = 0; i < spec->hooks.n[k]; i++) {
            free(spec->hooks.list[k][i].path);
            argv_free(spec->hooks.list[k][i].args);
            argv_free(spec->hooks.list[k][i].env);
        }
        free(spec->hooks.list[k]);
    }
    json_decref(spec->json);
    free(spec);
}

void oci_spec_freep(struct oci_spec **spec) { oci_spec_free(*spec); }

int oci_spec_parse(const char *data, size_t len, const char *bundle, struct oci_spec **ret,
                   struct err *err)
{
    int r;
    if (len > OCI_CONFIG_MAX)
        return err_set(err, EFBIG, "config.json: larger than %u bytes", OCI_CONFIG_MAX);
    _cleanup_(oci_spec_freep) struct oci_spec *spec = calloc(1, sizeof(*spec));
    if (!spec)
        return err_set(err, ENOMEM, "config.json");
    json_error_t jerr;
    spec->json = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!spec->json)
        return err_set(err, EINVAL, "config.json: line %d column %d: %s", jerr.line, jerr.column,
                       jerr.text);
    json_t *j = spec->json;
    if (!json_is_object(j))
        return err_set(err, EINVAL, "config.json: expected an object");
    json_t *ver = json_object_get(j, "ociVersion");
    if (!json_is_string(ver))
        return err_set(err, EINVAL, "`ociVersion`: missing");
    if (!str_has_prefix(json_string_value(ver), "1."))
        return err_set(err, EINVAL, "`ociVersion`: unsupported version `%s`",
                       json_string_value(ver));

    json_t *root = json_object_get(j, "root");
    if (!json_is_object(root))
        return err_set(err, EINVAL, "`root`: missing");
    _cleanup_free_ char *rp = NULL;
    if ((r = get_str(root, "path", "root.path", true, &rp, err)) < 0)
        return r;
    if (rp[0] == '/') {
        spec->root_path = TAKE_PTR(rp);
    } else {
        if (!bundle)
            bundle = ".";
        if (asprintf(&spec->root_path, "%s/%s", bundle, rp) < 0) {
            spec->root_path = NULL;
            return err_set(err, ENOMEM, "`root.path`");
        }
    }
    if ((r = get_bool(root, "readonly", "root.readonly", &spec->root_readonly, err)) < 0)
        return r;

    json_t *proc = json_object_get(j, "process");
    if (proc && !json_is_null(proc)) {
        if ((r = oci_process_parse(proc, "process", &spec->process, err)) < 0)
            return r;
        spec->has_process = true;
    }
    if ((r = get_str(j, "hostname", "hostname", false, &spec->hostname, err)) < 0)
        return r;
    if ((r = get_str(j, "domainname", "domainname", false, &spec->domainname, err)) < 0)
        return r;
    if ((r = parse_mounts(json_object_get(j, "mounts"), spec, err)) < 0)
        return r;
    if ((r = parse_linux(json_object_get(j, "linux"), spec, err)) < 0)
        return r;
    if ((r = parse_hooks(json_object_get(j, "hooks"), spec, err)) < 0)
        return r;
    spec->annotations = json_object_get(j, "annotations");
    if (spec->annotations && !json_is_object(spec->annotations) && !json_is_null(spec->annotations))
        return type_error(err, "annotations", "an object");
    if ((spec->hostname || spec->domainname) && !spec->ns[OCI_NS_UTS].enabled)
        return err_set(err, EINVAL, "`hostname`: needs a new uts namespace");
    *ret = TAKE_PTR(spec);
    return 0;
}

bool oci_spec_needs_hook_sync(const struct oci_spec *spec)
{
    return spec->hooks.n[OCI_HOOK_PRESTART] || spec->hooks.n[OCI_HOOK_CREATE_RUNTIME] ||
           spec->hooks.n[OCI_HOOK_CREATE_CONTAINER] || spec->hooks.n[OCI_HOOK_START_CONTAINER];
}

int oci_spec_load(const char *bundle, struct oci_spec **ret, char **ret_raw, size_t *ret_len,
                  struct err *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/config.json", bundle) >= (int)sizeof(path))
        return err_set(err, ENAMETOOLONG, "bundle `%s`", bundle);
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    int r = read_file_at(AT_FDCWD, path, OCI_CONFIG_MAX, &data, &len);
    if (r < 0)
        return err_set(err, r, "read `%s`", path);
    r = oci_spec_parse(data, len, bundle, ret, err);
    if (r < 0)
        return err_wrap(err, "`%s`", path);
    if (ret_raw) {
        *ret_raw = TAKE_PTR(data);
        *ret_len = len;
    }
    return 0;
}

/* ---- `kinglet oci spec` -------------------------------------------------- */

json_t *oci_spec_default(bool rootless)
{
    static const char *const caps[] = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
    json_t *capl = json_array();
    for (size_t i = 0; i < ARRAY_SIZE(caps); i++)
        json_array_append_new(capl, json_string(caps[i]));
    json_t *spec = json_pack(
        "{s:s, s:{s:b, s:{s:i, s:i}, s:[s], s:[s, s], s:s, s:{s:o, s:o, s:o}, s:[{s:s, s:i, s:i}], "
        "s:b}, s:{s:s, s:b}, s:s, s:[{s:s, s:s, s:s}, {s:s, s:s, s:s, s:[s, s, s, s]}, "
        "{s:s, s:s, s:s, s:[s, s, s, s, s, s]}, {s:s, s:s, s:s, s:[s, s, s, s]}, "
        "{s:s, s:s, s:s, s:[s, s, s, s]}, {s:s, s:s, s:s, s:[s, s, s, s]}, "
        "{s:s, s:s, s:s, s:[s, s, s, s, s]}]}",
        "ociVersion", OCI_VERSION, "process", "terminal", false, "user", "uid", 0, "gid", 0, "args",
        "sh", "env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TERM=xterm", "cwd", "/", "capabilities", "bounding", json_deep_copy(capl), "effective",
        json_deep_copy(capl), "permitted", capl, "rlimits", "type", "RLIMIT_NOFILE", "hard", 1024,
        "soft", 1024, "noNewPrivileges", true, "root", "path", "rootfs", "readonly", true,
        "hostname", "kinglet", "mounts", "destination", "/proc", "type", "proc", "source", "proc",
        "destination", "/dev", "type", "tmpfs", "source", "tmpfs", "options", "nosuid",
        "strictatime", "mode=755", "size=65536k", "destination", "/dev/pts", "type", "devpts",
        "source", "devpts", "options", "nosuid", "noexec", "newinstance", "ptmxmode=0666",
        "mode=0620", "gid=5", "destination", "/dev/shm", "type", "tmpfs", "source", "shm",
        "options", "nosuid", "noexec", "nodev", "mode=1777", "destination", "/dev/mqueue", "type",
        "mqueue", "source", "mqueue", "options", "nosuid", "noexec", "nodev", "ro", "destination",
        "/sys", "type", "sysfs", "source", "sysfs", "options", "nosuid", "noexec", "nodev", "ro",
        /* As in runc's and crun's default specs: the container's own
         * cgroup (a cgroup namespace), read-only. */
        "destination", "/sys/fs/cgroup", "type", "cgroup", "source", "cgroup", "options", "nosuid",
        "noexec", "nodev", "relatime", "ro");
    if (!spec)
        return NULL;
    json_t *ns = json_array();
    const char *kinds[] = {"pid", "network", "ipc", "uts", "mount", "cgroup", "user"};
    for (size_t i = 0; i < ARRAY_SIZE(kinds) - (rootless ? 0 : 1); i++)
        json_array_append_new(ns, json_pack("{s:s}", "type", kinds[i]));
    json_t *masked =
        json_pack("[s,s,s,s,s,s,s,s,s,s]", "/proc/acpi", "/proc/asound", "/proc/kcore",
                  "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                  "/proc/sched_debug", "/sys/firmware", "/proc/scsi");
    json_t *ro = json_pack("[s,s,s,s,s,s]", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                           "/proc/sysrq-trigger", "/sys/fs/cgroup");
    json_t *linux_obj =
        json_pack("{s:o, s:o, s:o}", "namespaces", ns, "maskedPaths", masked, "readonlyPaths", ro);
    if (rootless) {
        json_object_set_new(
            linux_obj, "uidMappings",
            json_pack("[{s:i,s:i,s:i}]", "containerID", 0, "hostID", (int)getuid(), "size", 1));
        json_object_set_new(
            linux_obj, "gidMappings",
            json_pack("[{s:i,s:i,s:i}]", "containerID", 0, "hostID", (int)getgid(), "size", 1));
    }
    json_object_set_new(spec, "linux", linux_obj);
    return spec;
}

int oci_spec_check(const char *data, size_t len, struct err *err)
{
    struct oci_spec *spec = NULL;
    int r = oci_spec_parse(data, len, "/", &spec, err);
    oci_spec_free(spec);
    return r;
}
