/* CRI ContainerConfig → OCI spec (see container_spec.h). Pure: every fact
 * of the host or the image's files comes in through ctr_spec_input, so the
 * whole translation is unit-tested and fuzzed. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"
#include "cri/container_spec.h"
#include "cri/containers.h"
#include "cri/validate.h"
#include "oci/oci.h"

#define CTR_GROUPS_MAX 64

/* ---- warnings ---- */

static void warn(struct ctr_spec *s, const char *fmt, ...) _printf_(2, 3);
static void warn(struct ctr_spec *s, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (s->warnings.len) {
        s->warnings.len--; /* the NUL */
        buf_append(&s->warnings, "; ", 2);
    }
    buf_append(&s->warnings, line, strlen(line));
    buf_append(&s->warnings, "", 1);
}

/* ---- process: args, env, cwd ---- */

static void strv_append(json_t *a, char *const *v, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
}

json_t *ctr_spec_args(const Runtime__V1__ContainerConfig *cfg, json_t *image_config)
{
    json_t *args = json_array();
    json_t *ep = json_object_get(image_config, "Entrypoint");
    json_t *cmd = json_object_get(image_config, "Cmd");
    if (!args)
        return NULL;
    if (cfg->n_command) {
        /* command replaces the entrypoint, and the image's Cmd goes with it */
        strv_append(args, cfg->command, cfg->n_command);
        strv_append(args, cfg->args, cfg->n_args);
    } else {
        if (json_is_array(ep))
            json_array_extend(args, ep);
        if (cfg->n_args)
            strv_append(args, cfg->args, cfg->n_args);
        else if (json_is_array(cmd))
            json_array_extend(args, cmd);
    }
    /* the image's arrays could hold other things than strings */
    for (size_t i = 0; i < json_array_size(args); i++)
        if (!json_is_string(json_array_get(args, i))) {
            json_decref(args);
            return json_array();
        }
    return args;
}

/* Appends data to b, each byte sequence that is not UTF-8 replaced by
 * U+FFFD: the spec is JSON, which cannot carry them (Go's encoding/json,
 * which writes containerd's and reads runc's, does the same). */
static int utf8_repair(struct buf *b, const uint8_t *p, size_t n)
{
    static const char fffd[] = "\xef\xbf\xbd";
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (p[i + k] & 0xc0) == 0x80;
        if (ok && len > 1) {
            /* no overlong forms, surrogates or values past U+10FFFF */
            uint32_t cp = c & (0xff >> (len + 1));
            for (size_t k = 1; k < len; k++)
                cp = cp << 6 | (p[i + k] & 0x3f);
            ok = (len == 2 && cp >= 0x80) ||
                 (len == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
                 (len == 4 && cp >= 0x10000 && cp <= 0x10ffff);
        }
        if (!ok) {
            if (buf_append(b, fffd, 3) < 0)
                return -ENOMEM;
            i++;
            continue;
        }
        if (buf_append(b, p + i, len) < 0)
            return -ENOMEM;
        i += len;
    }
    return 0;
}

/* Appends or replaces KEY=VALUE by key. */
static int env_set(json_t *env, const char *kv, size_t klen)
{
    for (size_t i = 0; i < json_array_size(env); i++) {
        const char *e = json_string_value(json_array_get(env, i));
        if (e && !strncmp(e, kv, klen) && (e[klen] == '=' || e[klen] == '\0'))
            return json_array_set_new(env, i, json_string_nocheck(kv));
    }
    return json_array_append_new(env, json_string_nocheck(kv));
}

static int build_env(const struct ctr_spec_input *in, json_t **ret, struct err *err)
{
    const Runtime__V1__ContainerConfig *cfg = in->cfg;
    json_t *env = json_array();
    json_t *ienv = json_object_get(in->image_config, "Env");
    if (!env)
        return err_set(err, ENOMEM, "env");
    for (size_t i = 0; i < json_array_size(ienv); i++) {
        const char *e = json_string_value(json_array_get(ienv, i));
        if (e)
            env_set(env, e, strcspn(e, "="));
    }
    bool has_path = false;
    for (size_t i = 0; i < json_array_size(env); i++)
        has_path |= !strncmp(json_string_value(json_array_get(env, i)), "PATH=", 5);
    if (!has_path)
        env_set(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 4);
    for (size_t i = 0; i < cfg->n_envs; i++) {
        const char *k = cfg->envs[i]->key;
        const ProtobufCBinaryData *v = &cfg->envs[i]->value;
        if (!k || !*k || strchr(k, '=')) {
            json_decref(env);
            return err_set(err, EINVAL, "envs[%zu]: `%.128s` is not a variable name", i,
                           k ? k : "");
        }
        struct buf kv = {0};
        if (buf_append(&kv, k, strlen(k)) < 0 || buf_append(&kv, "=", 1) < 0 ||
            utf8_repair(&kv, v->data, v->len) < 0 || buf_append(&kv, "", 1) < 0) {
            buf_free(&kv);
            json_decref(env);
            return err_set(err, ENOMEM, "env");
        }
        env_set(env, (const char *)kv.data, strlen(k));
        buf_free(&kv);
    }
    *ret = env;
    return 0;
}

/* ---- the user ---- */

/* Finds the line of a passwd/group file whose field `field` (0-based,
 * ':'-separated) equals key; copies its fields into f (up to nf). */
static bool db_find(const char *db, int field, const char *key, char f[][256], int nf)
{
    for (const char *line = db; db && line && *line;) {
        const char *end = strchrnul(line, '\n');
        const char *p = line;
        int n = 0;
        while (n < nf && p <= end) {
            const char *q = p;
            while (q < end && *q != ':')
                q++;
            size_t len = (size_t)(q - p) < 255 ? (size_t)(q - p) : 255;
            memcpy(f[n], p, len);
            f[n][len] = '\0';
            n++;
            p = q + 1;
        }
        for (int k = n; k < nf; k++)
            f[k][0] = '\0';
        if (n > field && line[0] != '#' && !strcmp(f[field], key))
            return true;
        line = *end ? end + 1 : NULL;
    }
    return false;
}

static bool parse_id(const char *s, uint32_t *ret)
{
    char *end;
    if (!*s || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > UINT32_MAX - 1)
        return false;
    *ret = (uint32_t)v;
    return true;
}

static void groups_add(struct ctr_spec *s, uint32_t g)
{
    for (size_t i = 0; i < s->n_groups; i++)
        if (s->groups[i] == g)
            return;
    if (s->n_groups < CTR_GROUPS_MAX)
        s->groups[s->n_groups++] = g;
}

int ctr_spec_user(const struct ctr_spec_input *in, struct ctr_spec *ret, struct err *err)
{
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        in->cfg->linux ? in->cfg->linux->security_context : NULL;
    const char *iuser = json_string_value(json_object_get(in->image_config, "User"));
    char user[256] = "", group[256] = "";
    char f[7][256];
    if (iuser) {
        const char *colon = strchr(iuser, ':');
        snprintf(user, sizeof(user), "%.*s", colon ? (int)(colon - iuser) : (int)strlen(iuser),
                 iuser);
        if (colon)
            snprintf(group, sizeof(group), "%s", colon + 1);
    }
    if (sc && sc->run_as_user) {
        if (sc->run_as_user->value < 0 || sc->run_as_user->value > UINT32_MAX - 1)
            return err_set(err, EINVAL, "run_as_user %" PRId64 " is out of range",
                           sc->run_as_user->value);
        snprintf(user, sizeof(user), "%" PRId64, sc->run_as_user->value);
        group[0] = '\0';
    } else if (sc && sc->run_as_username && *sc->run_as_username) {
        snprintf(user, sizeof(user), "%s", sc->run_as_username);
        group[0] = '\0';
    }
    if (sc && sc->run_as_group) {
        if (sc->run_as_group->value < 0 || sc->run_as_group->value > UINT32_MAX - 1)
            return err_set(err, EINVAL, "run_as_group %" PRId64 " is out of range",
                           sc->run_as_group->value);
        snprintf(group, sizeof(group), "%" PRId64, sc->run_as_group->value);
    }
    /* the user: a number (looked up for its name and primary group, which
     * it may lack) or a name (which the image must have) */
    uint32_t uid = 0, gid = 0;
    char name[256] = "";
    if (!*user) {
        uid = 0;
        if (db_find(in->passwd, 2, "0", f, 7)) {
            snprintf(name, sizeof(name), "%s", f[0]);
            parse_id(f[3], &gid);
        }
    } else if (parse_id(user, &uid)) {
        if (db_find(in->passwd, 2, user, f, 7)) {
            snprintf(name, sizeof(name), "%s", f[0]);
            parse_id(f[3], &gid);
        }
    } else {
        if (!db_find(in->passwd, 0, user, f, 7) || !parse_id(f[2], &uid))
            return err_set(err, EINVAL, "user `%.128s` is not in the image's /etc/passwd", user);
        snprintf(name, sizeof(name), "%s", user);
        parse_id(f[3], &gid);
    }
    if (*group && !parse_id(group, &gid)) {
        if (!db_find(in->group, 0, group, f, 4) || !parse_id(f[2], &gid))
            return err_set(err, EINVAL, "group `%.128s` is not in the image's /etc/group", group);
    }
    free(ret->groups);
    ret->n_groups = 0;
    if (!(ret->groups = calloc(CTR_GROUPS_MAX, sizeof(*ret->groups))))
        return err_set(err, ENOMEM, "groups");
    ret->uid = uid;
    ret->gid = gid;
    groups_add(ret, gid);
    bool strict =
        sc && sc->supplemental_groups_policy == RUNTIME__V1__SUPPLEMENTAL_GROUPS_POLICY__Strict;
    if (!strict && *name && in->group) {
        /* every group of the image's /etc/group that lists the user */
        for (const char *line = in->group; *line;) {
            const char *end = strchrnul(line, '\n');
            char l[4096];
            snprintf(l, sizeof(l), "%.*s", (int)(end - line), line);
            char *fields[4] = {0};
            char *p = l;
            for (int k = 0; k < 4 && p; k++) {
                fields[k] = p;
                p = strchr(p, ':');
                if (p)
                    *p++ = '\0';
            }
            uint32_t g;
            if (l[0] != '#' && fields[3] && fields[2] && parse_id(fields[2], &g)) {
                for (char *m = strtok_r(fields[3], ",", &p); m; m = strtok_r(NULL, ",", &p))
                    if (!strcmp(m, name))
                        groups_add(ret, g);
            }
            line = *end ? end + 1 : end;
        }
    }
    for (size_t i = 0; sc && i < sc->n_supplemental_groups; i++) {
        if (sc->supplemental_groups[i] < 0 || sc->supplemental_groups[i] > UINT32_MAX - 1)
            return err_set(err, EINVAL, "supplemental_groups[%zu] is out of range", i);
        groups_add(ret, (uint32_t)sc->supplemental_groups[i]);
    }
    return 0;
}

/* ---- capabilities ---- */

static const char *const all_caps[] = {"CAP_CHOWN",
                                       "CAP_DAC_OVERRIDE",
                                       "CAP_DAC_READ_SEARCH",
                                       "CAP_FOWNER",
                                       "CAP_FSETID",
                                       "CAP_KILL",
                                       "CAP_SETGID",
                                       "CAP_SETUID",
                                       "CAP_SETPCAP",
                                       "CAP_LINUX_IMMUTABLE",
                                       "CAP_NET_BIND_SERVICE",
                                       "CAP_NET_BROADCAST",
                                       "CAP_NET_ADMIN",
                                       "CAP_NET_RAW",
                                       "CAP_IPC_LOCK",
                                       "CAP_IPC_OWNER",
                                       "CAP_SYS_MODULE",
                                       "CAP_SYS_RAWIO",
                                       "CAP_SYS_CHROOT",
                                       "CAP_SYS_PTRACE",
                                       "CAP_SYS_PACCT",
                                       "CAP_SYS_ADMIN",
                                       "CAP_SYS_BOOT",
                                       "CAP_SYS_NICE",
                                       "CAP_SYS_RESOURCE",
                                       "CAP_SYS_TIME",
                                       "CAP_SYS_TTY_CONFIG",
                                       "CAP_MKNOD",
                                       "CAP_LEASE",
                                       "CAP_AUDIT_WRITE",
                                       "CAP_AUDIT_CONTROL",
                                       "CAP_SETFCAP",
                                       "CAP_MAC_OVERRIDE",
                                       "CAP_MAC_ADMIN",
                                       "CAP_SYSLOG",
                                       "CAP_WAKE_ALARM",
                                       "CAP_BLOCK_SUSPEND",
                                       "CAP_AUDIT_READ",
                                       "CAP_PERFMON",
                                       "CAP_BPF",
                                       "CAP_CHECKPOINT_RESTORE"};

/* containerd's default set (Docker's). */
static const char *const default_caps[] = {
    "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
    "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
    "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_KILL",    "CAP_AUDIT_WRITE"};

#define NCAPS ARRAY_SIZE(all_caps)

/* The index of a capability named with or without CAP_, in any case; -1. */
static int cap_index(const char *name)
{
    char up[64];
    size_t n = 0;
    if (strncasecmp(name, "CAP_", 4) != 0)
        n = (size_t)snprintf(up, sizeof(up), "CAP_");
    for (const char *p = name; *p && n + 1 < sizeof(up); p++)
        up[n++] = (char)toupper((unsigned char)*p);
    up[n] = '\0';
    for (size_t i = 0; i < NCAPS; i++)
        if (!strcmp(all_caps[i], up))
            return (int)i;
    return -1;
}

static bool is_all(const char *s) { return !strcasecmp(s, "ALL"); }

static int check_caps(char *const *v, size_t n, const char *field, struct err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!is_all(v[i]) && cap_index(v[i]) < 0)
            return err_set(err, EINVAL, "capabilities.%s[%zu]: unknown capability `%.64s`", field,
                           i, v[i]);
    return 0;
}

static json_t *caps_array(const bool *set)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < NCAPS; i++)
        if (set[i])
            json_array_append_new(a, json_string(all_caps[i]));
    return a;
}

static json_t *build_caps(const Runtime__V1__LinuxContainerSecurityContext *sc, bool privileged,
                          uint64_t host_caps, bool *ret_set)
{
    bool set[NCAPS] = {0}, amb[NCAPS] = {0};
    const Runtime__V1__Capability *c = sc ? sc->capabilities : NULL;
    /* "all" is all that kinglet itself may hand on (containerd's choice):
     * a host that withholds some from the runtime withholds them from
     * privileged containers too */
    if (privileged) {
        for (size_t i = 0; i < NCAPS; i++)
            set[i] = host_caps & (1ull << i);
    } else {
        for (size_t i = 0; i < ARRAY_SIZE(default_caps); i++)
            set[cap_index(default_caps[i])] = true;
        /* containerd's order: ALL in add, ALL in drop, then the names */
        for (size_t i = 0; c && i < c->n_add_capabilities; i++)
            if (is_all(c->add_capabilities[i]))
                for (size_t k = 0; k < NCAPS; k++)
                    set[k] = host_caps & (1ull << k);
        for (size_t i = 0; c && i < c->n_drop_capabilities; i++)
            if (is_all(c->drop_capabilities[i]))
                memset(set, 0, sizeof(set));
        for (size_t i = 0; c && i < c->n_add_capabilities; i++)
            if (!is_all(c->add_capabilities[i]))
                set[cap_index(c->add_capabilities[i])] = true;
        for (size_t i = 0; c && i < c->n_drop_capabilities; i++)
            if (!is_all(c->drop_capabilities[i]))
                set[cap_index(c->drop_capabilities[i])] = false;
    }
    for (size_t i = 0; c && i < c->n_add_ambient_capabilities; i++) {
        int k = cap_index(c->add_ambient_capabilities[i]);
        if (k >= 0) {
            amb[k] = true;
            set[k] = true;
        }
    }
    memcpy(ret_set, set, sizeof(set));
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "bounding", caps_array(set), "effective",
                     caps_array(set), "permitted", caps_array(set), "inheritable", caps_array(amb),
                     "ambient", caps_array(amb));
}

/* ---- seccomp ---- */

/* kinglet's RuntimeDefault: what Docker's and containerd's default profiles
 * allow every container, the rest ERRNO(EPERM). Syscalls that need a
 * capability are allowed only with it (below); clone may not make
 * namespaces without CAP_SYS_ADMIN; clone3 answers ENOSYS so that libcs
 * fall back to the filtered clone. */
static const char *const seccomp_allow[] = {"accept",
                                            "accept4",
                                            "access",
                                            "adjtimex",
                                            "alarm",
                                            "bind",
                                            "brk",
                                            "cachestat",
                                            "capget",
                                            "capset",
                                            "chdir",
                                            "chmod",
                                            "chown",
                                            "chown32",
                                            "clock_adjtime",
                                            "clock_adjtime64",
                                            "clock_getres",
                                            "clock_getres_time64",
                                            "clock_gettime",
                                            "clock_gettime64",
                                            "clock_nanosleep",
                                            "clock_nanosleep_time64",
                                            "close",
                                            "close_range",
                                            "connect",
                                            "copy_file_range",
                                            "creat",
                                            "dup",
                                            "dup2",
                                            "dup3",
                                            "epoll_create",
                                            "epoll_create1",
                                            "epoll_ctl",
                                            "epoll_ctl_old",
                                            "epoll_pwait",
                                            "epoll_pwait2",
                                            "epoll_wait",
                                            "epoll_wait_old",
                                            "eventfd",
                                            "eventfd2",
                                            "execve",
                                            "execveat",
                                            "exit",
                                            "exit_group",
                                            "faccessat",
                                            "faccessat2",
                                            "fadvise64",
                                            "fadvise64_64",
                                            "fallocate",
                                            "fanotify_mark",
                                            "fchdir",
                                            "fchmod",
                                            "fchmodat",
                                            "fchmodat2",
                                            "fchown",
                                            "fchown32",
                                            "fchownat",
                                            "fcntl",
                                            "fcntl64",
                                            "fdatasync",
                                            "fgetxattr",
                                            "flistxattr",
                                            "flock",
                                            "fork",
                                            "fremovexattr",
                                            "fsetxattr",
                                            "fstat",
                                            "fstat64",
                                            "fstatat64",
                                            "fstatfs",
                                            "fstatfs64",
                                            "fsync",
                                            "ftruncate",
                                            "ftruncate64",
                                            "futex",
                                            "futex_requeue",
                                            "futex_time64",
                                            "futex_wait",
                                            "futex_waitv",
                                            "futex_wake",
                                            "futimesat",
                                            "getcpu",
                                            "getcwd",
                                            "getdents",
                                            "getdents64",
                                            "getegid",
                                            "getegid32",
                                            "geteuid",
                                            "geteuid32",
                                            "getgid",
                                            "getgid32",
                                            "getgroups",
                                            "getgroups32",
                                            "getitimer",
                                            "getpeername",
                                            "getpgid",
                                            "getpgrp",
                                            "getpid",
                                            "getppid",
                                            "getpriority",
                                            "getrandom",
                                            "getresgid",
                                            "getresgid32",
                                            "getresuid",
                                            "getresuid32",
                                            "getrlimit",
                                            "get_robust_list",
                                            "getrusage",
                                            "getsid",
                                            "getsockname",
                                            "getsockopt",
                                            "get_thread_area",
                                            "gettid",
                                            "gettimeofday",
                                            "getuid",
                                            "getuid32",
                                            "getxattr",
                                            "inotify_add_watch",
                                            "inotify_init",
                                            "inotify_init1",
                                            "inotify_rm_watch",
                                            "io_cancel",
                                            "ioctl",
                                            "io_destroy",
                                            "io_getevents",
                                            "io_pgetevents",
                                            "io_pgetevents_time64",
                                            "ioprio_get",
                                            "ioprio_set",
                                            "io_setup",
                                            "io_submit",
                                            "ipc",
                                            "kill",
                                            "landlock_add_rule",
                                            "landlock_create_ruleset",
                                            "landlock_restrict_self",
                                            "lchown",
                                            "lchown32",
                                            "lgetxattr",
                                            "link",
                                            "linkat",
                                            "listen",
                                            "listxattr",
                                            "llistxattr",
                                            "_llseek",
                                            "lremovexattr",
                                            "lseek",
                                            "lsetxattr",
                                            "lstat",
                                            "lstat64",
                                            "madvise",
                                            "map_shadow_stack",
                                            "membarrier",
                                            "memfd_create",
                                            "memfd_secret",
                                            "mincore",
                                            "mkdir",
                                            "mkdirat",
                                            "mknod",
                                            "mknodat",
                                            "mlock",
                                            "mlock2",
                                            "mlockall",
                                            "mmap",
                                            "mmap2",
                                            "mprotect",
                                            "mq_getsetattr",
                                            "mq_notify",
                                            "mq_open",
                                            "mq_timedreceive",
                                            "mq_timedreceive_time64",
                                            "mq_timedsend",
                                            "mq_timedsend_time64",
                                            "mq_unlink",
                                            "mremap",
                                            "msgctl",
                                            "msgget",
                                            "msgrcv",
                                            "msgsnd",
                                            "msync",
                                            "munlock",
                                            "munlockall",
                                            "munmap",
                                            "name_to_handle_at",
                                            "nanosleep",
                                            "newfstatat",
                                            "_newselect",
                                            "open",
                                            "openat",
                                            "openat2",
                                            "pause",
                                            "pidfd_open",
                                            "pidfd_send_signal",
                                            "pipe",
                                            "pipe2",
                                            "pkey_alloc",
                                            "pkey_free",
                                            "pkey_mprotect",
                                            "poll",
                                            "ppoll",
                                            "ppoll_time64",
                                            "prctl",
                                            "pread64",
                                            "preadv",
                                            "preadv2",
                                            "prlimit64",
                                            "process_mrelease",
                                            "pselect6",
                                            "pselect6_time64",
                                            "pwrite64",
                                            "pwritev",
                                            "pwritev2",
                                            "read",
                                            "readahead",
                                            "readlink",
                                            "readlinkat",
                                            "readv",
                                            "recv",
                                            "recvfrom",
                                            "recvmmsg",
                                            "recvmmsg_time64",
                                            "recvmsg",
                                            "remap_file_pages",
                                            "removexattr",
                                            "rename",
                                            "renameat",
                                            "renameat2",
                                            "restart_syscall",
                                            "rmdir",
                                            "rseq",
                                            "rt_sigaction",
                                            "rt_sigpending",
                                            "rt_sigprocmask",
                                            "rt_sigqueueinfo",
                                            "rt_sigreturn",
                                            "rt_sigsuspend",
                                            "rt_sigtimedwait",
                                            "rt_sigtimedwait_time64",
                                            "rt_tgsigqueueinfo",
                                            "sched_getaffinity",
                                            "sched_getattr",
                                            "sched_getparam",
                                            "sched_get_priority_max",
                                            "sched_get_priority_min",
                                            "sched_getscheduler",
                                            "sched_rr_get_interval",
                                            "sched_rr_get_interval_time64",
                                            "sched_setaffinity",
                                            "sched_setattr",
                                            "sched_setparam",
                                            "sched_setscheduler",
                                            "sched_yield",
                                            "seccomp",
                                            "select",
                                            "semctl",
                                            "semget",
                                            "semop",
                                            "semtimedop",
                                            "semtimedop_time64",
                                            "send",
                                            "sendfile",
                                            "sendfile64",
                                            "sendmmsg",
                                            "sendmsg",
                                            "sendto",
                                            "setfsgid",
                                            "setfsgid32",
                                            "setfsuid",
                                            "setfsuid32",
                                            "setgid",
                                            "setgid32",
                                            "setgroups",
                                            "setgroups32",
                                            "setitimer",
                                            "setpgid",
                                            "setpriority",
                                            "setregid",
                                            "setregid32",
                                            "setresgid",
                                            "setresgid32",
                                            "setresuid",
                                            "setresuid32",
                                            "setreuid",
                                            "setreuid32",
                                            "setrlimit",
                                            "set_robust_list",
                                            "setsid",
                                            "setsockopt",
                                            "set_thread_area",
                                            "set_tid_address",
                                            "setuid",
                                            "setuid32",
                                            "setxattr",
                                            "shmat",
                                            "shmctl",
                                            "shmdt",
                                            "shmget",
                                            "shutdown",
                                            "sigaltstack",
                                            "signalfd",
                                            "signalfd4",
                                            "sigprocmask",
                                            "sigreturn",
                                            "socketcall",
                                            "socketpair",
                                            "splice",
                                            "stat",
                                            "stat64",
                                            "statfs",
                                            "statfs64",
                                            "statx",
                                            "symlink",
                                            "symlinkat",
                                            "sync",
                                            "sync_file_range",
                                            "syncfs",
                                            "sysinfo",
                                            "tee",
                                            "tgkill",
                                            "time",
                                            "timer_create",
                                            "timer_delete",
                                            "timer_getoverrun",
                                            "timer_gettime",
                                            "timer_gettime64",
                                            "timer_settime",
                                            "timer_settime64",
                                            "timerfd_create",
                                            "timerfd_gettime",
                                            "timerfd_gettime64",
                                            "timerfd_settime",
                                            "timerfd_settime64",
                                            "times",
                                            "tkill",
                                            "truncate",
                                            "truncate64",
                                            "ugetrlimit",
                                            "umask",
                                            "uname",
                                            "unlink",
                                            "unlinkat",
                                            "utime",
                                            "utimensat",
                                            "utimensat_time64",
                                            "utimes",
                                            "vfork",
                                            "vmsplice",
                                            "wait4",
                                            "waitid",
                                            "waitpid",
                                            "write",
                                            "writev",
                                            "arch_prctl",
                                            "modify_ldt",
                                            "socket",
                                            "personality"};

/* Allowed only with a capability. */
static const struct {
    const char *cap;
    const char *const names[16];
} seccomp_by_cap[] = {
    {"CAP_SYS_ADMIN",
     {"bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
      "lookup_dcookie", "mount", "mount_setattr", "move_mount", "open_tree", "perf_event_open",
      "quotactl", "setdomainname"}},
    {"CAP_SYS_ADMIN",
     {"sethostname", "setns", "syslog", "umount", "umount2", "unshare", "quotactl_fd"}},
    {"CAP_SYS_BOOT", {"reboot"}},
    {"CAP_SYS_CHROOT", {"chroot"}},
    {"CAP_SYS_MODULE", {"delete_module", "init_module", "finit_module"}},
    {"CAP_SYS_PACCT", {"acct"}},
    {"CAP_SYS_PTRACE",
     {"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace"}},
    {"CAP_SYS_RAWIO", {"iopl", "ioperm"}},
    {"CAP_SYS_TIME", {"settimeofday", "stime", "clock_settime", "clock_settime64"}},
    {"CAP_SYS_TTY_CONFIG", {"vhangup"}},
    {"CAP_SYS_NICE", {"get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"}},
    {"CAP_SYSLOG", {"syslog"}},
    {"CAP_BPF", {"bpf"}},
    {"CAP_PERFMON", {"perf_event_open"}},
};

static json_t *seccomp_default(const bool *caps)
{
    json_t *allow = json_array();
    strv_append(allow, (char *const *)seccomp_allow, ARRAY_SIZE(seccomp_allow));
    bool sys_admin = caps[cap_index("CAP_SYS_ADMIN")];
    for (size_t i = 0; i < ARRAY_SIZE(seccomp_by_cap); i++)
        if (caps[cap_index(seccomp_by_cap[i].cap)])
            for (size_t k = 0; k < 16 && seccomp_by_cap[i].names[k]; k++)
                json_array_append_new(allow, json_string(seccomp_by_cap[i].names[k]));
    json_t *syscalls = json_pack("[{s:o, s:s}]", "names", allow, "action", "SCMP_ACT_ALLOW");
    if (!sys_admin) {
        /* clone without namespace flags (CLONE_NEWNS|NEWCGROUP|NEWUTS|
         * NEWIPC|NEWUSER|NEWPID|NEWNET = 0x7E020000) */
        json_array_append_new(syscalls,
                              json_pack("{s:[s], s:s, s:[{s:i, s:I, s:I, s:s}]}", "names", "clone",
                                        "action", "SCMP_ACT_ALLOW", "args", "index", 0, "value",
                                        (json_int_t)0x7E020000, "valueTwo", (json_int_t)0, "op",
                                        "SCMP_CMP_MASKED_EQ"));
        json_array_append_new(syscalls, json_pack("{s:[s], s:s, s:i}", "names", "clone3", "action",
                                                  "SCMP_ACT_ERRNO", "errnoRet", ENOSYS));
    }
    return json_pack("{s:s, s:i, s:[s,s,s], s:o}", "defaultAction", "SCMP_ACT_ERRNO",
                     "defaultErrnoRet", EPERM, "architectures", "SCMP_ARCH_X86_64", "SCMP_ARCH_X86",
                     "SCMP_ARCH_X32", "syscalls", syscalls);
}

/* A Localhost profile: the OCI seccomp object, or Docker's format (the
 * same fields, plus archMap and includes/excludes by capability, which are
 * applied here). */
static int seccomp_localhost(const char *text, const bool *caps, json_t **ret, struct err *err)
{
    json_error_t je;
    json_t *p = json_loads(text ? text : "", JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(p)) {
        json_decref(p);
        return err_set(err, EINVAL, "seccomp Localhost profile: %s (line %d)", je.text, je.line);
    }
    json_t *out = json_object();
    const char *keep[] = {"defaultAction", "defaultErrnoRet", "architectures",
                          "flags",         "listenerPath",    "listenerMetadata"};
    for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
        if (json_object_get(p, keep[i]))
            json_object_set(out, keep[i], json_object_get(p, keep[i]));
    json_t *map = json_object_get(p, "archMap");
    if (!json_object_get(out, "architectures") && json_is_array(map)) {
        json_t *archs = json_array();
        for (size_t i = 0; i < json_array_size(map); i++) {
            json_t *m = json_array_get(map, i);
            json_t *a = json_object_get(m, "architecture");
            if (json_is_string(a))
                json_array_append(archs, a);
            json_t *subs = json_object_get(m, "subArchitectures");
            if (json_is_array(subs))
                json_array_extend(archs, subs);
        }
        json_object_set_new(out, "architectures", archs);
    }
    json_t *syscalls = json_array();
    json_t *in = json_object_get(p, "syscalls");
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *s = json_array_get(in, i);
        json_t *inc = json_object_get(json_object_get(s, "includes"), "caps");
        json_t *exc = json_object_get(json_object_get(s, "excludes"), "caps");
        bool take = true;
        for (size_t k = 0; k < json_array_size(inc); k++) {
            const char *c = json_string_value(json_array_get(inc, k));
            int idx = c ? cap_index(c) : -1;
            take &= idx >= 0 && caps[idx];
        }
        for (size_t k = 0; k < json_array_size(exc); k++) {
            const char *c = json_string_value(json_array_get(exc, k));
            int idx = c ? cap_index(c) : -1;
            take &= !(idx >= 0 && caps[idx]);
        }
        if (!take)
            continue;
        json_t *copy = json_deep_copy(s);
        json_object_del(copy, "includes");
        json_object_del(copy, "excludes");
        json_object_del(copy, "comment");
        json_array_append_new(syscalls, copy);
    }
    json_object_set_new(out, "syscalls", syscalls);
    json_decref(p);
    if (!json_is_string(json_object_get(out, "defaultAction"))) {
        json_decref(out);
        return err_set(err, EINVAL, "seccomp Localhost profile: no defaultAction");
    }
    *ret = out;
    return 0;
}

/* ---- mounts ---- */

static const char *const masked_default[] = {
    "/proc/asound",     "/proc/acpi",        "/proc/interrupts",
    "/proc/kcore",      "/proc/keys",        "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",       "/sys/firmware",     "/sys/devices/virtual/powercap"};
static const char *const readonly_default[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                               "/proc/sysrq-trigger"};

static bool mount_taken(const Runtime__V1__ContainerConfig *cfg, const char *dst)
{
    for (size_t k = 0; k < cfg->n_mounts; k++)
        if (cfg->mounts[k]->container_path && !strcmp(cfg->mounts[k]->container_path, dst))
            return true;
    return false;
}

static json_t *mnt(const char *dst, const char *type, const char *src, json_t *opts)
{
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dst, "type", type, "source", src,
                     "options", opts);
}

/* One OCI ID mapping. */
static json_t *idmap_json(uint32_t container_id, uint32_t host_id, uint32_t length)
{
    return json_pack("{s:I, s:I, s:I}", "containerID", (json_int_t)container_id, "hostID",
                     (json_int_t)host_id, "size", (json_int_t)length);
}

static json_t *idmaps_json(Runtime__V1__IDMapping *const *maps, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a,
                              idmap_json(maps[i]->container_id, maps[i]->host_id, maps[i]->length));
    return a;
}

/* The pod's files and the request's mounts after the defaults, parents
 * first, stably, as containerd's WithMounts orders them: a volume at /etc
 * lies under the pod's /etc/hosts whatever else the container asks for
 * (a CDI device's mounts go in among them, moving none). */
static void sort_by_depth(json_t *m, size_t from)
{
    for (size_t i = from + 1; i < json_array_size(m); i++) {
        json_t *e = json_array_get(m, i);
        size_t d = path_depth(json_string_value(json_object_get(e, "destination"))), k = i;
        while (k > from && path_depth(json_string_value(
                               json_object_get(json_array_get(m, k - 1), "destination"))) > d)
            k--;
        if (k != i) {
            json_incref(e);
            json_array_remove(m, i);
            json_array_insert_new(m, k, e);
        }
    }
}

static int build_mounts(const struct ctr_spec_input *in, bool privileged, struct ctr_spec *out,
                        json_t **ret, const char **ret_rootfs_prop, struct err *err)
{
    const Runtime__V1__ContainerConfig *cfg = in->cfg;
    json_t *m = json_array();
    char path[4400];
    *ret_rootfs_prop = NULL;
    json_array_append_new(
        m, mnt("/proc", "proc", "proc", json_pack("[s,s,s]", "nosuid", "noexec", "nodev")));
    json_array_append_new(
        m, mnt("/dev", "tmpfs", "tmpfs",
               json_pack("[s,s,s,s]", "nosuid", "strictatime", "mode=755", "size=65536k")));
    json_array_append_new(m, mnt("/dev/pts", "devpts", "devpts",
                                 json_pack("[s,s,s,s,s,s]", "nosuid", "noexec", "newinstance",
                                           "ptmxmode=0666", "mode=0620", "gid=5")));
    json_array_append_new(m, mnt("/dev/mqueue", "mqueue", "mqueue",
                                 json_pack("[s,s,s]", "nosuid", "noexec", "nodev")));
    json_array_append_new(
        m, mnt("/sys", "sysfs", "sysfs",
               json_pack("[s,s,s,s]", "nosuid", "noexec", "nodev", privileged ? "rw" : "ro")));
    json_array_append_new(m, mnt("/sys/fs/cgroup", "cgroup", "cgroup",
                                 json_pack("[s,s,s,s,s]", "nosuid", "noexec", "nodev", "relatime",
                                           privileged ? "rw" : "ro")));
    size_t ours = json_array_size(m);
    static const char *const files[][2] = {{"shm", "/dev/shm"},
                                           {"hosts", "/etc/hosts"},
                                           {"hostname", "/etc/hostname"},
                                           {"resolv.conf", "/etc/resolv.conf"}};
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        if (mount_taken(cfg, files[i][1]))
            continue;
        /* a pod in the host's IPC namespace has no /dev/shm of its own: its
         * containers share the host's, as containerd binds it */
        if (i == 0 && in->pod_host_ipc)
            snprintf(path, sizeof(path), "/dev/shm");
        else
            snprintf(path, sizeof(path), "%s/%s", in->pod_dir, files[i][0]);
        bool ro = i > 0 && cfg->linux && cfg->linux->security_context &&
                  cfg->linux->security_context->readonly_rootfs;
        /* In a pod with a user namespace, these are its root's on the host
         * already (pod/sandbox.c), not idmapped: through an idmapping its
         * root would write them as the host's root. */
        json_array_append_new(m, mnt(files[i][1], "bind", path,
                                     json_pack("[s,s,s,s,s]", "rbind", "rprivate", "nosuid",
                                               "nodev", ro ? "ro" : "rw")));
    }
    for (size_t k = 0; k < cfg->n_mounts; k++) {
        const Runtime__V1__Mount *cm = cfg->mounts[k];
        if (cm->image && *cm->image->image) {
            /* an image volume: read-only whatever the request says */
            const char *src = in->mount_sources ? in->mount_sources[k] : NULL;
            if (!src) {
                json_decref(m);
                return err_set(err, EINVAL, "mounts[%zu]: the image volume is not mounted", k);
            }
            json_array_append_new(
                m, mnt(cm->container_path, "bind", src,
                       json_pack("[s,s,s,s,s]", "rbind", "rprivate", "nosuid", "nodev", "ro")));
            continue;
        }
        json_t *o = json_pack("[s]", "rbind");
        switch (cm->propagation) {
        case RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_HOST_TO_CONTAINER:
            json_array_append_new(o, json_string("rslave"));
            if (!*ret_rootfs_prop)
                *ret_rootfs_prop = "rslave";
            break;
        case RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_BIDIRECTIONAL:
            json_array_append_new(o, json_string("rshared"));
            *ret_rootfs_prop = "rshared";
            break;
        default:
            json_array_append_new(o, json_string("rprivate"));
        }
        json_array_append_new(o, json_string(cm->readonly ? "ro" : "rw"));
        if (cm->recursive_read_only) {
            if (!in->host.rro) {
                json_decref(o);
                json_decref(m);
                return err_set(err, ENOTSUP,
                               "mounts[%zu]: recursive_read_only needs mount_setattr, which "
                               "this kernel lacks",
                               k);
            }
            json_array_append_new(o, json_string("rro"));
        }
        if (cm->selinux_relabel)
            warn(out, "mount `%.200s`: selinux_relabel ignored (no SELinux on this host)",
                 cm->container_path);
        /* Mappings on the mount (KEP-127: kubelet sends the pod's for
         * every volume of a pod with hostUsers: false) make it an idmapped
         * mount: the host's IDs seen through them, so host ID 0's files
         * are the pod's root's and nothing is chowned. Without them, a
         * plain bind: the pod's writes are its mapped IDs' on the host. */
        json_t *mj = mnt(cm->container_path, "bind", cm->host_path, o);
        if (cm->n_uidmappings || cm->n_gidmappings) {
            json_array_append_new(o, json_string("idmap"));
            json_object_set_new(mj, "uidMappings", idmaps_json(cm->uidmappings, cm->n_uidmappings));
            json_object_set_new(mj, "gidMappings", idmaps_json(cm->gidmappings, cm->n_gidmappings));
        }
        json_array_append_new(m, mj);
    }
    sort_by_depth(m, ours);
    *ret = m;
    return 0;
}

/* ---- devices ---- */

static json_t *device_json(const struct ctr_device *d)
{
    return json_pack("{s:s, s:s%, s:I, s:I, s:i, s:i, s:i}", "path", d->path, "type", &d->type,
                     (size_t)1, "major", (json_int_t)d->major, "minor", (json_int_t)d->minor,
                     "fileMode", (int)(d->mode & 07777), "uid", 0, "gid", 0);
}

static json_t *device_rule(const struct ctr_device *d)
{
    return json_pack("{s:b, s:s%, s:I, s:I, s:s}", "allow", 1, "type", &d->type, (size_t)1, "major",
                     (json_int_t)d->major, "minor", (json_int_t)d->minor, "access",
                     d->perms && *d->perms ? d->perms : "rwm");
}

/* ---- namespaces ---- */

static json_t *ns_path(const char *type, const char *dir, const char *name)
{
    char p[4400];
    snprintf(p, sizeof(p), "%s/ns/%s", dir, name);
    return json_pack("{s:s, s:s}", "type", type, "path", p);
}

static json_t *build_namespaces(const struct ctr_spec_input *in)
{
    const Runtime__V1__LinuxContainerSecurityContext *sc =
        in->cfg->linux ? in->cfg->linux->security_context : NULL;
    const Runtime__V1__NamespaceOption *nso = sc ? sc->namespace_options : NULL;
    json_t *ns = json_array();
    json_array_append_new(ns, json_pack("{s:s}", "type", "mount"));
    if (in->uid_map)
        json_array_append_new(ns, ns_path("user", in->pod_dir, "user"));
    if (!in->pod_host_network)
        json_array_append_new(ns, ns_path("network", in->pod_dir, "net"));
    if (!in->pod_host_ipc)
        json_array_append_new(ns, ns_path("ipc", in->pod_dir, "ipc"));
    if (!in->pod_host_network)
        json_array_append_new(ns, ns_path("uts", in->pod_dir, "uts"));
    /* absent options mean POD, the enum's zero, as in containerd */
    int pid = nso ? nso->pid : RUNTIME__V1__NAMESPACE_MODE__POD;
    switch (pid) {
    case RUNTIME__V1__NAMESPACE_MODE__POD:
        if (in->pod_pid_ns)
            json_array_append_new(ns, ns_path("pid", in->pod_dir, "pid"));
        else
            json_array_append_new(ns, json_pack("{s:s}", "type", "pid"));
        break;
    case RUNTIME__V1__NAMESPACE_MODE__NODE:
        break;
    case RUNTIME__V1__NAMESPACE_MODE__TARGET:
        json_array_append_new(ns, json_pack("{s:s, s:s}", "type", "pid", "path",
                                            in->target_pid_ns ? in->target_pid_ns : ""));
        break;
    default:
        json_array_append_new(ns, json_pack("{s:s}", "type", "pid"));
    }
    json_array_append_new(ns, json_pack("{s:s}", "type", "cgroup"));
    return ns;
}

/* ---- the checks on the loop ---- */

/* Absolute, without a ".." component (what the executor takes). */
static bool clean_abs_path(const char *p) { return p && p[0] == '/' && oci_path_is_clean(p); }

#define CDI_ANNOTATION_PREFIX "cdi.k8s.io/"

/* Appends name unless it is there already. */
static int names_add(char ***v, size_t *n, const char *name, size_t len, const char *what,
                     struct err *err)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*v)[i]) == len && !memcmp((*v)[i], name, len))
            return 0;
    char *s = strndup(name, len);
    if (!s)
        return err_set(err, ENOMEM, "CDI devices");
    if (!cdi_name_valid(s)) {
        int r = err_set(err, EINVAL, "%s: CDI device name `%.200s` is not vendor.com/class=name",
                        what, s);
        free(s);
        return r;
    }
    if (*n >= CDI_NAMES_MAX) {
        free(s);
        return err_set(err, EINVAL, "more than %d CDI devices", CDI_NAMES_MAX);
    }
    char **nv = realloc(*v, (*n + 2) * sizeof(char *));
    if (!nv) {
        free(s);
        return err_set(err, ENOMEM, "CDI devices");
    }
    *v = nv;
    nv[(*n)++] = s;
    nv[*n] = NULL;
    return 0;
}

int ctr_cdi_names(const Runtime__V1__ContainerConfig *cfg, char ***ret, size_t *ret_n,
                  struct err *err)
{
    char **v = NULL;
    size_t n = 0;
    int r = 0;
    *ret = NULL;
    *ret_n = 0;
    for (size_t i = 0; i < cfg->n_cdi_devices && r >= 0; i++) {
        const char *name = cfg->cdi_devices[i]->name ? cfg->cdi_devices[i]->name : "";
        r = names_add(&v, &n, name, strlen(name), "cdi_devices", err);
    }
    for (size_t i = 0; i < cfg->n_annotations && r >= 0; i++) {
        const char *k = cfg->annotations[i]->key, *val = cfg->annotations[i]->value;
        if (!k || !str_has_prefix(k, CDI_ANNOTATION_PREFIX) || !val)
            continue;
        char what[128];
        snprintf(what, sizeof(what), "annotation `%.100s`", k);
        for (const char *p = val; r >= 0;) {
            size_t len = strcspn(p, ",");
            r = names_add(&v, &n, p, len, what, err);
            if (!p[len])
                break;
            p += len + 1;
        }
    }
    if (r < 0) {
        strv_free(v, n);
        return r;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

/* A mount's ID mappings (an idmapped mount): at most what the kernel
 * takes for one user namespace's map, each a range of IDs. */
#define MOUNT_IDMAPS_MAX 340
static int mount_idmaps_check(size_t i, const char *what, Runtime__V1__IDMapping *const *m,
                              size_t n, struct err *err)
{
    if (n > MOUNT_IDMAPS_MAX)
        return err_set(err, EINVAL, "mounts[%zu]: %zu %s, more than %d", i, n, what,
                       MOUNT_IDMAPS_MAX);
    for (size_t k = 0; k < n; k++)
        if (m[k]->length == 0 || (uint64_t)m[k]->host_id + m[k]->length > UINT32_MAX ||
            (uint64_t)m[k]->container_id + m[k]->length > UINT32_MAX)
            return err_set(err, EINVAL,
                           "mounts[%zu]: %s[%zu] (container ID %u, host ID %u, length %u) is "
                           "not a range",
                           i, what, k, m[k]->container_id, m[k]->host_id, m[k]->length);
    return 0;
}

int ctr_config_check(const Runtime__V1__ContainerConfig *cfg, struct err *err)
{
    const Runtime__V1__LinuxContainerConfig *lx = cfg->linux;
    const Runtime__V1__LinuxContainerSecurityContext *sc = lx ? lx->security_context : NULL;
    if (cfg->n_envs > 4096 || cfg->n_mounts > 1024 || cfg->n_devices > 1024 ||
        cfg->n_command + cfg->n_args > 65536)
        return err_set(err, EINVAL, "too many envs, mounts, devices or arguments");
    {
        char **names;
        size_t n;
        int r = ctr_cdi_names(cfg, &names, &n, err);
        if (r < 0)
            return r;
        strv_free(names, n);
    }
    for (size_t i = 0; i < cfg->n_envs; i++) {
        const char *k = cfg->envs[i]->key;
        if (!k || !*k || strchr(k, '='))
            return err_set(err, EINVAL, "envs[%zu]: `%.128s` is not a variable name", i,
                           k ? k : "");
        if (cfg->envs[i]->value.len && memchr(cfg->envs[i]->value.data, 0, cfg->envs[i]->value.len))
            return err_set(err, EINVAL,
                           "envs[%zu]: the value of `%.128s` holds a NUL byte, which no "
                           "environment can carry",
                           i, k);
    }
    for (size_t i = 0; i < cfg->n_mounts; i++) {
        const Runtime__V1__Mount *m = cfg->mounts[i];
        bool image = m->image && m->image->image && *m->image->image;
        if (!m->container_path || m->container_path[0] != '/')
            return err_set(err, EINVAL, "mounts[%zu]: container_path `%.200s` is not absolute", i,
                           m->container_path ? m->container_path : "");
        if (image) {
            /* kubelet's rule: a relative path without `..` (symlinks in
             * the image are checked once it is mounted). host_path is
             * ignored, as containerd does. */
            const char *sub = m->image_sub_path;
            if (sub && *sub && (sub[0] == '/' || !oci_path_is_clean(sub) || strlen(sub) > 4000))
                return err_set(err, EINVAL,
                               "mounts[%zu]: image_sub_path `%.200s` must be a relative path "
                               "without `..`",
                               i, sub);
            if (oci_mount_destination_check(m->container_path, "bind", true, err) < 0)
                return err_wrap(err, "mounts[%zu]", i);
            continue;
        }
        if (m->image_sub_path && *m->image_sub_path)
            return err_set(err, EINVAL, "mounts[%zu]: image_sub_path is set without an image", i);
        if (!m->host_path || m->host_path[0] != '/')
            return err_set(err, EINVAL, "mounts[%zu]: host_path `%.200s` is not absolute", i,
                           m->host_path ? m->host_path : "");
        if (oci_mount_destination_check(m->container_path, "bind", true, err) < 0)
            return err_wrap(err, "mounts[%zu]", i);
        if (m->propagation > RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_BIDIRECTIONAL ||
            m->propagation < 0)
            return err_set(err, EINVAL, "mounts[%zu]: unknown propagation %d", i, m->propagation);
        int r;
        if ((r = mount_idmaps_check(i, "uidMappings", m->uidmappings, m->n_uidmappings, err)) < 0 ||
            (r = mount_idmaps_check(i, "gidMappings", m->gidmappings, m->n_gidmappings, err)) < 0)
            return r;
        if (!m->n_uidmappings != !m->n_gidmappings)
            return err_set(err, EINVAL,
                           "mounts[%zu]: an idmapped mount needs both uidMappings and "
                           "gidMappings (got %zu and %zu)",
                           i, m->n_uidmappings, m->n_gidmappings);
        if (m->recursive_read_only &&
            (!m->readonly || m->propagation != RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_PRIVATE))
            return err_set(err, EINVAL,
                           "mounts[%zu]: recursive_read_only needs readonly and private "
                           "propagation",
                           i);
    }
    for (size_t i = 0; i < cfg->n_devices; i++) {
        const Runtime__V1__Device *d = cfg->devices[i];
        if (!d->host_path || d->host_path[0] != '/' || !clean_abs_path(d->container_path))
            return err_set(err, EINVAL, "devices[%zu]: paths must be absolute, without `..`", i);
        if (d->permissions && strspn(d->permissions, "rwm") != strlen(d->permissions))
            return err_set(err, EINVAL, "devices[%zu]: permissions `%.16s` are not of `rwm`", i,
                           d->permissions);
    }
    if (cfg->stop_signal < 0 || cfg->stop_signal > RUNTIME__V1__SIGNAL__SIGRTMAX)
        return err_set(err, EINVAL, "stop_signal %d is not a signal", cfg->stop_signal);
    if (!sc)
        return 0;
    for (size_t i = 0; i < sc->n_masked_paths; i++)
        if (!clean_abs_path(sc->masked_paths[i]))
            return err_set(err, EINVAL, "masked_paths[%zu]: `%.200s` is not an absolute path", i,
                           sc->masked_paths[i]);
    for (size_t i = 0; i < sc->n_readonly_paths; i++)
        if (!clean_abs_path(sc->readonly_paths[i]))
            return err_set(err, EINVAL, "readonly_paths[%zu]: `%.200s` is not an absolute path", i,
                           sc->readonly_paths[i]);
    if (sc->capabilities) {
        const Runtime__V1__Capability *c = sc->capabilities;
        int r;
        if ((r = check_caps(c->add_capabilities, c->n_add_capabilities, "add", err)) < 0 ||
            (r = check_caps(c->drop_capabilities, c->n_drop_capabilities, "drop", err)) < 0 ||
            (r = check_caps(c->add_ambient_capabilities, c->n_add_ambient_capabilities,
                            "add_ambient", err)) < 0)
            return r;
        for (size_t i = 0; i < c->n_add_ambient_capabilities; i++)
            if (is_all(c->add_ambient_capabilities[i]))
                return err_set(err, EINVAL, "capabilities.add_ambient: ALL is not allowed");
    }
    const Runtime__V1__NamespaceOption *ns = sc->namespace_options;
    if (ns && (ns->pid < RUNTIME__V1__NAMESPACE_MODE__POD ||
               ns->pid > RUNTIME__V1__NAMESPACE_MODE__TARGET))
        return err_set(err, EINVAL, "namespace_options.pid: unknown mode %d", ns->pid);
    if (ns && ns->pid == RUNTIME__V1__NAMESPACE_MODE__TARGET && (!ns->target_id || !*ns->target_id))
        return err_set(err, EINVAL, "namespace_options.pid TARGET needs target_id");
    if (sc->seccomp) {
        const Runtime__V1__SecurityProfile *p = sc->seccomp;
        if (p->profile_type > RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost ||
            p->profile_type < 0)
            return err_set(err, EINVAL, "seccomp: unknown profile type %d", p->profile_type);
        if (p->profile_type == RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost &&
            (!p->localhost_ref || p->localhost_ref[0] != '/'))
            return err_set(err, EINVAL,
                           "seccomp: a Localhost profile needs an absolute localhost_ref");
    }
    if (sc->supplemental_groups_policy < 0 ||
        sc->supplemental_groups_policy > RUNTIME__V1__SUPPLEMENTAL_GROUPS_POLICY__Strict)
        return err_set(err, EINVAL, "supplemental_groups_policy %d is unknown",
                       sc->supplemental_groups_policy);
    if (sc->run_as_username && *sc->run_as_username && strchr(sc->run_as_username, ':'))
        return err_set(err, EINVAL, "run_as_username `%.64s` is not a user name",
                       sc->run_as_username);
    return cri_run_as_group_check("", sc->run_as_user, sc->run_as_username, sc->run_as_group, err);
}

/* The Localhost profile path the caller must read, or NULL. */

/* ---- the whole spec ---- */

static const char *deprecated_apparmor(const Runtime__V1__LinuxContainerSecurityContext *sc)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return sc->apparmor_profile;
#pragma GCC diagnostic pop
}

int ctr_apparmor_profile(const Runtime__V1__LinuxContainerSecurityContext *sc, bool privileged,
                         bool host, const char **ret, struct err *err)
{
    *ret = NULL;
    int type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault;
    const char *name = NULL;
    if (sc && sc->apparmor) {
        type = sc->apparmor->profile_type;
        name = sc->apparmor->localhost_ref;
        if (type < RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault ||
            type > RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost)
            return err_set(err, EINVAL, "apparmor: unknown profile type %d", type);
        if (type != RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost && name && *name)
            return err_set(err, EINVAL, "apparmor: localhost_ref is for a Localhost profile only");
    } else if (sc && deprecated_apparmor(sc) && *deprecated_apparmor(sc)) {
        /* the deprecated string form, which older kubelets send alone */
        const char *s = deprecated_apparmor(sc);
        if (strcmp(s, "runtime/default") == 0)
            type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault;
        else if (strcmp(s, "unconfined") == 0)
            type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Unconfined;
        else if (str_has_prefix(s, "localhost/")) {
            type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost;
            name = s;
        } else
            return err_set(err, EINVAL, "apparmor_profile `%.200s` is unknown", s);
    }
    if (type == RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Unconfined)
        return 0;
    if (type == RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault) {
        /* none asked means the default too (kubernetes#51746); a
         * privileged container runs unconfined unless it names a profile */
        if (host && !privileged)
            *ret = OCI_APPARMOR_DEFAULT;
        return 0;
    }
    if (name && str_has_prefix(name, "localhost/"))
        name += strlen("localhost/");
    int r = oci_apparmor_name_valid(name);
    if (r < 0)
        return err_set(err, -r, "apparmor: a Localhost profile needs a profile name%s",
                       r == -ENAMETOOLONG ? " shorter than 1024 bytes" : "");
    if (!host)
        return err_set(err, EINVAL,
                       "apparmor: the Localhost profile `%.200s` cannot be applied: the host has "
                       "no AppArmor",
                       name);
    *ret = name;
    return 0;
}

int ctr_spec_build(const struct ctr_spec_input *in, struct ctr_spec *ret, struct err *err)
{
    const Runtime__V1__ContainerConfig *cfg = in->cfg;
    const Runtime__V1__LinuxContainerConfig *lx = cfg->linux;
    const Runtime__V1__LinuxContainerSecurityContext *sc = lx ? lx->security_context : NULL;
    bool privileged = sc && sc->privileged;
    json_t *spec = NULL, *args = NULL, *env = NULL, *mounts = NULL, *linux = NULL;
    int r;
    *ret = (struct ctr_spec){0};
    if ((r = ctr_config_check(cfg, err)) < 0)
        return r;
    if (!(args = ctr_spec_args(cfg, in->image_config)))
        return err_set(err, ENOMEM, "args");
    if (!json_array_size(args)) {
        json_decref(args);
        return err_set(err, EINVAL, "no command: neither the config nor the image gives one");
    }
    if ((r = build_env(in, &env, err)) < 0 || (r = ctr_spec_user(in, ret, err)) < 0)
        goto fail;
    const char *cwd = cfg->working_dir && *cfg->working_dir
                          ? cfg->working_dir
                          : json_string_value(json_object_get(in->image_config, "WorkingDir"));
    if (!cwd || !*cwd)
        cwd = "/";
    if (cwd[0] != '/') {
        r = err_set(err, EINVAL, "working_dir `%.200s` is not absolute", cwd);
        goto fail;
    }
    /* the stop signal: the config's, the image's, SIGTERM */
    ret->stop_signal = SIGTERM;
    const char *isig = json_string_value(json_object_get(in->image_config, "StopSignal"));
    int sig;
    if (cfg->stop_signal)
        ret->stop_signal = cri_signal_from_enum(cfg->stop_signal);
    else if (isig && oci_signal_parse(isig, &sig) == 0)
        ret->stop_signal = sig;
    else if (isig)
        warn(ret, "the image's StopSignal `%.32s` is unknown: SIGTERM is used", isig);

    bool caps[NCAPS];
    json_t *capobj = build_caps(sc, privileged, in->host.caps ? in->host.caps : ~0ull, caps);
    json_t *user =
        json_pack("{s:I, s:I}", "uid", (json_int_t)ret->uid, "gid", (json_int_t)ret->gid);
    json_t *gids = json_array();
    for (size_t i = 0; i < ret->n_groups; i++)
        json_array_append_new(gids, json_integer(ret->groups[i]));
    json_object_set_new(user, "additionalGids", gids);
    json_t *process = json_pack("{s:b, s:o, s:o, s:s, s:o, s:o, s:b}", "terminal", cfg->tty, "args",
                                args, "env", env, "cwd", cwd, "user", user, "capabilities", capobj,
                                "noNewPrivileges", sc && sc->no_new_privs && !privileged);
    args = env = NULL;
    if (!process) {
        r = err_set(err, ENOMEM, "spec");
        goto fail;
    }
    const Runtime__V1__LinuxContainerResources *res = lx ? lx->resources : NULL;
    if (res && res->oom_score_adj) {
        int64_t adj = res->oom_score_adj;
        if (adj < -1000 || adj > 1000) {
            json_decref(process);
            r = err_set(err, EINVAL, "oom_score_adj %" PRId64 " is outside [-1000, 1000]", adj);
            goto fail;
        }
        if (adj < in->host.oom_score_adj_min) {
            warn(ret, "oom_score_adj %" PRId64 " raised to %d: the host forbids lower values", adj,
                 in->host.oom_score_adj_min);
            adj = in->host.oom_score_adj_min;
        }
        json_object_set_new(process, "oomScoreAdj", json_integer(adj));
    }
    const char *aa;
    if ((r = ctr_apparmor_profile(sc, privileged, in->host.apparmor, &aa, err)) < 0) {
        json_decref(process);
        goto fail;
    }
    if (aa)
        json_object_set_new(process, "apparmorProfile", json_string(aa));
    /* SELinux options asked for on a host without it: ignored, as
     * containerd and CRI-O do (kubelet sends a pod's options to every
     * node, with SELinux or not). Where the host has SELinux kinglet
     * does not label containers yet: said too, never silent. */
    const Runtime__V1__SELinuxOption *se = sc ? sc->selinux_options : NULL;
    if (se && ((se->user && *se->user) || (se->role && *se->role) || (se->type && *se->type) ||
               (se->level && *se->level)))
        warn(ret, "SELinux options not applied: %s",
             in->host.selinux ? "kinglet does not label containers yet"
                              : "the host has no SELinux");

    const char *rootfs_prop;
    if ((r = build_mounts(in, privileged, ret, &mounts, &rootfs_prop, err)) < 0) {
        json_decref(process);
        goto fail;
    }
    linux = json_pack("{s:o}", "namespaces", build_namespaces(in));
    if (in->uid_map && in->gid_map) {
        /* the pod's, which the container joins (ns/user) */
        const struct pod_idmap *u = in->uid_map, *g = in->gid_map;
        json_object_set_new(linux, "uidMappings",
                            json_pack("[o]", idmap_json(u->container_id, u->host_id, u->length)));
        json_object_set_new(linux, "gidMappings",
                            json_pack("[o]", idmap_json(g->container_id, g->host_id, g->length)));
    }
    if (rootfs_prop)
        json_object_set_new(linux, "rootfsPropagation", json_string(rootfs_prop));
    if (!privileged) {
        json_t *mp = json_array(), *rp = json_array();
        /* kubelet sends the lists for procMount Default and empty ones for
         * Unmasked (KEP-4265), which it allows only with a user namespace
         * of the pod's own: there, empty lists mean nothing masked (as
         * containerd 2.x does); elsewhere, the defaults (clients that
         * send no lists at all). */
        bool unmasked = in->uid_map != NULL;
        if (sc && sc->n_masked_paths)
            strv_append(mp, sc->masked_paths, sc->n_masked_paths);
        else if (!unmasked)
            strv_append(mp, (char *const *)masked_default, ARRAY_SIZE(masked_default));
        if (sc && sc->n_readonly_paths)
            strv_append(rp, sc->readonly_paths, sc->n_readonly_paths);
        else if (!unmasked)
            strv_append(rp, (char *const *)readonly_default, ARRAY_SIZE(readonly_default));
        json_object_set_new(linux, "maskedPaths", mp);
        json_object_set_new(linux, "readonlyPaths", rp);
    }
    /* devices: the config's (privileged: every host device too), and the
     * rules that let the container use them */
    json_t *devs = json_array(), *rules = json_array();
    json_array_append_new(rules, json_pack("{s:b, s:s}", "allow", 0, "access", "rwm"));
    for (size_t i = 0; privileged && i < in->n_host_devices; i++)
        json_array_append_new(devs, device_json(&in->host_devices[i]));
    if (privileged)
        json_array_append_new(rules, json_pack("{s:b, s:s}", "allow", 1, "access", "rwm"));
    for (size_t i = 0; i < in->n_devices; i++) {
        json_array_append_new(devs, device_json(&in->devices[i]));
        if (!privileged)
            json_array_append_new(rules, device_rule(&in->devices[i]));
    }
    json_object_set_new(linux, "devices", devs);
    json_t *ocires = cri_resources_to_oci(res);
    if (!ocires)
        ocires = json_object();
    json_object_set_new(ocires, "devices", rules);
    json_object_set_new(linux, "resources", ocires);
    if (in->cgroup_parent) {
        if (asprintf(&ret->cgroup_path, "%s/%s",
                     strcmp(in->cgroup_parent, "/") ? in->cgroup_parent : "", in->id) < 0) {
            ret->cgroup_path = NULL;
            json_decref(process);
            r = err_set(err, ENOMEM, "cgroup path");
            goto fail;
        }
        json_object_set_new(linux, "cgroupsPath", json_string(ret->cgroup_path));
    }
    /* seccomp: absent = unconfined (kubelet sends RuntimeDefault when the
     * pod or --seccomp-default asks for it); privileged = unconfined */
    if (sc && sc->seccomp && !privileged) {
        json_t *filter = NULL;
        switch (sc->seccomp->profile_type) {
        case RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault:
            filter = seccomp_default(caps);
            break;
        case RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost:
            if ((r = seccomp_localhost(in->seccomp_profile, caps, &filter, err)) < 0) {
                err_wrap(err, "`%.200s`", sc->seccomp->localhost_ref);
                json_decref(process);
                goto fail;
            }
            break;
        default:
            break;
        }
        if (filter)
            json_object_set_new(linux, "seccomp", filter);
    }
    json_t *annotations = json_object();
    for (size_t i = 0; i < cfg->n_annotations; i++)
        json_object_set_new(annotations, cfg->annotations[i]->key,
                            json_string(cfg->annotations[i]->value));
    spec = json_pack("{s:s, s:o, s:{s:s, s:b}, s:o, s:o, s:o}", "ociVersion", "1.2.0", "process",
                     process, "root", "path", in->rootfs, "readonly", sc && sc->readonly_rootfs,
                     "mounts", mounts, "linux", linux, "annotations", annotations);
    mounts = linux = NULL;
    if (!spec) {
        r = err_set(err, ENOMEM, "spec");
        goto fail;
    }
    ret->spec = spec;
    if (in->cdi_edits) {
        if ((r = cdi_edits_apply(spec, in->cdi_edits, privileged, err)) < 0)
            goto fail;
        /* the groups the record keeps (exec, status) take the CDI ones
         * (process is the spec's new one now) */
        size_t i;
        json_t *g;
        json_array_foreach(
            json_object_get(json_object_get(json_object_get(spec, "process"), "user"),
                            "additionalGids"),
            i, g) groups_add(ret, (uint32_t)json_integer_value(g));
    }
    /* What the executor would refuse is refused now, by its own parser:
     * INVALID_ARGUMENT at create naming the field, not a failed start. */
    char *text = json_dumps(spec, JSON_COMPACT);
    if (!text) {
        r = err_set(err, ENOMEM, "spec");
        goto fail;
    }
    r = oci_spec_check(text, strlen(text), err);
    free(text);
    if (r < 0) {
        if (r != -ENOMEM)
            r = -EINVAL;
        err->code = -r;
        goto fail;
    }
    return 0;
fail:
    json_decref(args);
    json_decref(env);
    json_decref(mounts);
    json_decref(linux);
    ctr_spec_clear(ret);
    return r;
}

void ctr_spec_clear(struct ctr_spec *s)
{
    json_decref(s->spec);
    free(s->groups);
    free(s->cgroup_path);
    buf_free(&s->warnings);
    *s = (struct ctr_spec){0};
}
