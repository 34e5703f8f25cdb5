/* oci/seccomp: the OCI `linux.seccomp` object as a libseccomp filter.
 *
 * Follows runc (libcontainer/seccomp/patchbpf aside) and crun: unknown
 * syscall names are skipped, since profiles list syscalls of many kernels
 * and architectures; a rule whose action equals the default action is
 * dropped (libseccomp refuses it); several conditions on the same argument
 * index become separate rules (libseccomp cannot AND two comparisons of one
 * argument), otherwise one rule carries all conditions. NOTIFY is refused:
 * kinglet has no seccomp listener. The filter does not set no_new_privs:
 * that is `process.noNewPrivileges`, applied by the caller. */
#include <linux/seccomp.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "oci/seccomp.h"

#define SECCOMP_MAX_SYSCALLS 4096
#define SECCOMP_MAX_NAMES    4096
#define SECCOMP_MAX_ARGS     6

static const struct {
    const char *name;
    uint32_t token;
} archs[] = {
    {"SCMP_ARCH_NATIVE", SCMP_ARCH_NATIVE},
    {"SCMP_ARCH_X86", SCMP_ARCH_X86},
    {"SCMP_ARCH_X86_64", SCMP_ARCH_X86_64},
    {"SCMP_ARCH_X32", SCMP_ARCH_X32},
    {"SCMP_ARCH_ARM", SCMP_ARCH_ARM},
    {"SCMP_ARCH_AARCH64", SCMP_ARCH_AARCH64},
    {"SCMP_ARCH_MIPS", SCMP_ARCH_MIPS},
    {"SCMP_ARCH_MIPS64", SCMP_ARCH_MIPS64},
    {"SCMP_ARCH_MIPS64N32", SCMP_ARCH_MIPS64N32},
    {"SCMP_ARCH_MIPSEL", SCMP_ARCH_MIPSEL},
    {"SCMP_ARCH_MIPSEL64", SCMP_ARCH_MIPSEL64},
    {"SCMP_ARCH_MIPSEL64N32", SCMP_ARCH_MIPSEL64N32},
    {"SCMP_ARCH_PPC", SCMP_ARCH_PPC},
    {"SCMP_ARCH_PPC64", SCMP_ARCH_PPC64},
    {"SCMP_ARCH_PPC64LE", SCMP_ARCH_PPC64LE},
    {"SCMP_ARCH_S390", SCMP_ARCH_S390},
    {"SCMP_ARCH_S390X", SCMP_ARCH_S390X},
    {"SCMP_ARCH_PARISC", SCMP_ARCH_PARISC},
    {"SCMP_ARCH_PARISC64", SCMP_ARCH_PARISC64},
    {"SCMP_ARCH_RISCV64", SCMP_ARCH_RISCV64},
};

static const struct {
    const char *name;
    enum scmp_compare op;
} ops[] = {
    {"SCMP_CMP_NE", SCMP_CMP_NE},
    {"SCMP_CMP_LT", SCMP_CMP_LT},
    {"SCMP_CMP_LE", SCMP_CMP_LE},
    {"SCMP_CMP_EQ", SCMP_CMP_EQ},
    {"SCMP_CMP_GE", SCMP_CMP_GE},
    {"SCMP_CMP_GT", SCMP_CMP_GT},
    {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ},
};

static void ctx_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx)
        seccomp_release(*ctx);
}

/* errnoRet: absent = *present false. */
static int get_errno(json_t *obj, const char *key, const char *where, uint32_t *ret, bool *present,
                     struct err *err)
{
    json_t *v = json_object_get(obj, key);
    *present = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0xffff)
        return err_set(err, EINVAL, "%s: must be an errno number in [0, 65535]", where);
    *ret = (uint32_t)json_integer_value(v);
    *present = true;
    return 0;
}

/* The action `name` with its errnoRet. */
static int action_resolve(const char *name, bool has_errno, uint32_t errno_ret, const char *where,
                          uint32_t *ret, struct err *err)
{
    if (!name)
        return err_set(err, EINVAL, "%s: required string", where);
    bool takes_errno = false;
    uint32_t act;
    if (strcmp(name, "SCMP_ACT_KILL") == 0 || strcmp(name, "SCMP_ACT_KILL_THREAD") == 0) {
        act = SCMP_ACT_KILL_THREAD;
    } else if (strcmp(name, "SCMP_ACT_KILL_PROCESS") == 0) {
        act = SCMP_ACT_KILL_PROCESS;
    } else if (strcmp(name, "SCMP_ACT_TRAP") == 0) {
        act = SCMP_ACT_TRAP;
    } else if (strcmp(name, "SCMP_ACT_ERRNO") == 0) {
        act = SCMP_ACT_ERRNO(has_errno ? errno_ret : EPERM);
        takes_errno = true;
    } else if (strcmp(name, "SCMP_ACT_TRACE") == 0) {
        act = SCMP_ACT_TRACE(has_errno ? errno_ret : EPERM);
        takes_errno = true;
    } else if (strcmp(name, "SCMP_ACT_ALLOW") == 0) {
        act = SCMP_ACT_ALLOW;
    } else if (strcmp(name, "SCMP_ACT_LOG") == 0) {
        act = SCMP_ACT_LOG;
    } else if (strcmp(name, "SCMP_ACT_NOTIFY") == 0) {
        return err_set(err, EOPNOTSUPP,
                       "%s: SCMP_ACT_NOTIFY is not supported (kinglet has no seccomp "
                       "listener)",
                       where);
    } else {
        return err_set(err, EINVAL, "%s: unknown action `%.64s`", where, name);
    }
    if (has_errno && !takes_errno)
        return err_set(err, EINVAL,
                       "%s: errnoRet is only valid with SCMP_ACT_ERRNO and "
                       "SCMP_ACT_TRACE",
                       where);
    *ret = act;
    return 0;
}

static int flags_apply(scmp_filter_ctx ctx, json_t *flags, struct err *err)
{
    if (!flags || json_is_null(flags))
        return 0;
    if (!json_is_array(flags) || json_array_size(flags) > 16)
        return err_set(err, EINVAL, "linux.seccomp.flags: must be an array of flag names");
    size_t i;
    json_t *f;
    json_array_foreach(flags, i, f)
    {
        const char *name = json_string_value(f);
        enum scmp_filter_attr attr;
        if (!name)
            return err_set(err, EINVAL, "linux.seccomp.flags[%zu]: must be a string", i);
        if (strcmp(name, "SECCOMP_FILTER_FLAG_TSYNC") == 0)
            attr = SCMP_FLTATR_CTL_TSYNC;
        else if (strcmp(name, "SECCOMP_FILTER_FLAG_LOG") == 0)
            attr = SCMP_FLTATR_CTL_LOG;
        else if (strcmp(name, "SECCOMP_FILTER_FLAG_SPEC_ALLOW") == 0)
            attr = SCMP_FLTATR_CTL_SSB;
        else if (strcmp(name, "SECCOMP_FILTER_FLAG_NEW_LISTENER") == 0)
            return err_set(err, EOPNOTSUPP,
                           "linux.seccomp.flags[%zu]: SECCOMP_FILTER_FLAG_NEW_LISTENER is not "
                           "supported (kinglet has no seccomp listener)",
                           i);
        else
            return err_set(err, EINVAL,
                           "linux.seccomp.flags[%zu]: unknown or unsupported flag "
                           "`%.64s`",
                           i, name);
        int r = seccomp_attr_set(ctx, attr, 1);
        if (r < 0)
            return err_set(err, r, "linux.seccomp.flags[%zu]: `%s`", i, name);
    }
    return 0;
}

static int arg_parse(json_t *a, const char *where, struct scmp_arg_cmp *ret, struct err *err)
{
    if (!json_is_object(a))
        return err_set(err, EINVAL, "%s: must be an object", where);
    json_t *idx = json_object_get(a, "index");
    if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
        json_integer_value(idx) >= SECCOMP_MAX_ARGS)
        return err_set(err, EINVAL, "%s.index: must be an integer in [0, 5]", where);
    json_t *val = json_object_get(a, "value");
    if (!json_is_integer(val))
        return err_set(err, EINVAL, "%s.value: required integer", where);
    json_t *val2 = json_object_get(a, "valueTwo");
    if (val2 && !json_is_null(val2) && !json_is_integer(val2))
        return err_set(err, EINVAL, "%s.valueTwo: must be an integer", where);
    const char *opname = json_string_value(json_object_get(a, "op"));
    if (!opname)
        return err_set(err, EINVAL, "%s.op: required string", where);
    size_t k;
    for (k = 0; k < ARRAY_SIZE(ops); k++)
        if (strcmp(opname, ops[k].name) == 0)
            break;
    if (k == ARRAY_SIZE(ops))
        return err_set(err, EINVAL, "%s.op: unknown operator `%.64s`", where, opname);
    /* JSON cannot carry a uint64 above INT64_MAX through jansson: negative
     * numbers stand for their two's complement. */
    *ret = (struct scmp_arg_cmp){
        .arg = (unsigned int)json_integer_value(idx),
        .op = ops[k].op,
        .datum_a = (scmp_datum_t)json_integer_value(val),
        .datum_b = val2 ? (scmp_datum_t)json_integer_value(val2) : 0,
    };
    return 0;
}

static int syscall_add(scmp_filter_ctx ctx, json_t *sc, size_t si, uint32_t def_act,
                       struct err *err)
{
    char where[64];
    snprintf(where, sizeof(where), "linux.seccomp.syscalls[%zu]", si);
    if (!json_is_object(sc))
        return err_set(err, EINVAL, "%s: must be an object", where);

    char w[96];
    snprintf(w, sizeof(w), "%s.errnoRet", where);
    uint32_t eret = 0;
    bool has_eret;
    int r = get_errno(sc, "errnoRet", w, &eret, &has_eret, err);
    if (r < 0)
        return r;
    snprintf(w, sizeof(w), "%s.action", where);
    uint32_t act;
    if ((r = action_resolve(json_string_value(json_object_get(sc, "action")), has_eret, eret, w,
                            &act, err)) < 0)
        return r;

    json_t *names = json_object_get(sc, "names");
    if (!json_is_array(names))
        return err_set(err, EINVAL, "%s.names: required array of syscall names", where);
    if (json_array_size(names) > SECCOMP_MAX_NAMES)
        return err_set(err, E2BIG, "%s.names: more than %d names", where, SECCOMP_MAX_NAMES);

    struct scmp_arg_cmp conds[SECCOMP_MAX_ARGS];
    size_t n_conds = 0;
    bool same_index = false;
    json_t *args = json_object_get(sc, "args");
    if (args && !json_is_null(args)) {
        if (!json_is_array(args))
            return err_set(err, EINVAL, "%s.args: must be an array", where);
        if (json_array_size(args) > SECCOMP_MAX_ARGS)
            return err_set(err, E2BIG, "%s.args: more than %d conditions", where, SECCOMP_MAX_ARGS);
        for (size_t i = 0; i < json_array_size(args); i++) {
            snprintf(w, sizeof(w), "%s.args[%zu]", where, i);
            if ((r = arg_parse(json_array_get(args, i), w, &conds[n_conds], err)) < 0)
                return r;
            for (size_t j = 0; j < n_conds; j++)
                if (conds[j].arg == conds[n_conds].arg)
                    same_index = true;
            n_conds++;
        }
    }

    /* libseccomp refuses a rule with the default action; it would be a
     * no-op anyway. */
    if (act == def_act)
        return 0;

    for (size_t i = 0; i < json_array_size(names); i++) {
        const char *name = json_string_value(json_array_get(names, i));
        if (!name)
            return err_set(err, EINVAL, "%s.names[%zu]: must be a string", where, i);
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR) {
            log_debug("seccomp: unknown syscall `%s` skipped", name);
            continue;
        }
        if (same_index) {
            for (size_t c = 0; c < n_conds; c++)
                if ((r = seccomp_rule_add_array(ctx, act, nr, 1, &conds[c])) < 0)
                    return err_set(err, r, "%s: add rule for `%s` (args[%zu])", where, name, c);
        } else if ((r = seccomp_rule_add_array(ctx, act, nr, (unsigned)n_conds,
                                               n_conds ? conds : NULL)) < 0) {
            return err_set(err, r, "%s: add rule for `%s`", where, name);
        }
    }
    return 0;
}

int oci_seccomp_build(json_t *seccomp, scmp_filter_ctx *ret, struct err *err)
{
    if (!json_is_object(seccomp))
        return err_set(err, EINVAL, "linux.seccomp: must be an object");

    if (json_object_get(seccomp, "listenerPath") &&
        !json_is_null(json_object_get(seccomp, "listenerPath")))
        return err_set(err, EOPNOTSUPP,
                       "linux.seccomp.listenerPath: not supported (kinglet has no seccomp "
                       "listener)");

    uint32_t def_eret = 0;
    bool has_def_eret;
    int r = get_errno(seccomp, "defaultErrnoRet", "linux.seccomp.defaultErrnoRet", &def_eret,
                      &has_def_eret, err);
    if (r < 0)
        return r;
    uint32_t def_act;
    if ((r = action_resolve(json_string_value(json_object_get(seccomp, "defaultAction")),
                            has_def_eret, def_eret, "linux.seccomp.defaultAction", &def_act, err)) <
        0)
        return r;

    _cleanup_(ctx_releasep) scmp_filter_ctx ctx = seccomp_init(def_act);
    if (!ctx)
        return err_set(err, ENOMEM, "linux.seccomp: initialise filter");
    /* no_new_privs follows process.noNewPrivileges, not the filter. */
    if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0)
        return err_set(err, r, "linux.seccomp: clear no_new_privs attribute");

    json_t *arr = json_object_get(seccomp, "architectures");
    if (arr && !json_is_null(arr)) {
        if (!json_is_array(arr) || json_array_size(arr) > ARRAY_SIZE(archs))
            return err_set(err, EINVAL,
                           "linux.seccomp.architectures: must be an array of "
                           "SCMP_ARCH_* names");
        size_t i;
        json_t *a;
        json_array_foreach(arr, i, a)
        {
            const char *name = json_string_value(a);
            size_t k;
            for (k = 0; name && k < ARRAY_SIZE(archs); k++)
                if (strcmp(name, archs[k].name) == 0)
                    break;
            if (!name || k == ARRAY_SIZE(archs))
                return err_set(err, EINVAL,
                               "linux.seccomp.architectures[%zu]: unknown "
                               "architecture `%.64s`",
                               i, name ? name : "(not a string)");
            r = seccomp_arch_add(ctx, archs[k].token);
            if (r < 0 && r != -EEXIST)
                return err_set(err, r, "linux.seccomp.architectures[%zu]: add `%s`", i, name);
        }
    }

    if ((r = flags_apply(ctx, json_object_get(seccomp, "flags"), err)) < 0)
        return r;

    json_t *scs = json_object_get(seccomp, "syscalls");
    if (scs && !json_is_null(scs)) {
        if (!json_is_array(scs))
            return err_set(err, EINVAL, "linux.seccomp.syscalls: must be an array");
        if (json_array_size(scs) > SECCOMP_MAX_SYSCALLS)
            return err_set(err, E2BIG, "linux.seccomp.syscalls: more than %d entries",
                           SECCOMP_MAX_SYSCALLS);
        for (size_t i = 0; i < json_array_size(scs); i++)
            if ((r = syscall_add(ctx, json_array_get(scs, i), i, def_act, err)) < 0)
                return r;
    }
    *ret = TAKE_PTR(ctx);
    return 0;
}

int oci_seccomp_load(json_t *seccomp, struct err *err)
{
    if (!seccomp || json_is_null(seccomp))
        return 0;
    _cleanup_(ctx_releasep) scmp_filter_ctx ctx = NULL;
    int r = oci_seccomp_build(seccomp, &ctx, err);
    if (r < 0)
        return r;
    if ((r = seccomp_load(ctx)) < 0) {
        if (r == -EACCES)
            return err_set(err, EACCES,
                           "load seccomp filter (needs no_new_privs or "
                           "CAP_SYS_ADMIN)");
        return err_set(err, r, "load seccomp filter");
    }
    return 0;
}

json_t *oci_seccomp_features(void)
{
    static const char *const actions[] = {
        "SCMP_ACT_ALLOW",       "SCMP_ACT_ERRNO", "SCMP_ACT_KILL",  "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG",   "SCMP_ACT_TRACE", "SCMP_ACT_TRAP",
    };
    static const char *const known_flags[] = {
        "SECCOMP_FILTER_FLAG_TSYNC",
        "SECCOMP_FILTER_FLAG_LOG",
        "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    };
    json_t *o = json_object();
    json_t *a = json_array(), *ops_ = json_array(), *ar = json_array(), *kf = json_array(),
           *sf = json_array();
    if (!o || !a || !ops_ || !ar || !kf || !sf)
        goto fail;
    for (size_t i = 0; i < ARRAY_SIZE(actions); i++)
        json_array_append_new(a, json_string(actions[i]));
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
        json_array_append_new(ops_, json_string(ops[i].name));
    for (size_t i = 1; i < ARRAY_SIZE(archs); i++) /* not NATIVE */
        json_array_append_new(ar, json_string(archs[i].name));
    /* libseccomp API level: 2 TSYNC, 3 LOG, 4 SPEC_ALLOW (SSB). */
    unsigned int api = seccomp_api_get();
    for (size_t i = 0; i < ARRAY_SIZE(known_flags); i++) {
        json_array_append_new(kf, json_string(known_flags[i]));
        if (api >= 2 + i)
            json_array_append_new(sf, json_string(known_flags[i]));
    }
    json_object_set_new(o, "enabled", json_true());
    json_object_set_new(o, "actions", a);
    json_object_set_new(o, "operators", ops_);
    json_object_set_new(o, "archs", ar);
    json_object_set_new(o, "knownFlags", kf);
    json_object_set_new(o, "supportedFlags", sf);
    return o;
fail:
    json_decref(o);
    json_decref(a);
    json_decref(ops_);
    json_decref(ar);
    json_decref(kf);
    json_decref(sf);
    return NULL;
}

int oci_seccomp_export(json_t *seccomp, struct buf *ret, uint32_t *ret_flags, struct err *err)
{
    _cleanup_(ctx_releasep) scmp_filter_ctx ctx = NULL;
    int r = oci_seccomp_build(seccomp, &ctx, err);
    if (r < 0)
        return r;
    /* libseccomp 2.5 exports to an fd only. */
    _cleanup_close_ int fd = memfd_create("seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno, "linux.seccomp: memfd");
    if ((r = seccomp_export_bpf(ctx, fd)) < 0)
        return err_set(err, r, "linux.seccomp: export the filter");
    off_t len = lseek(fd, 0, SEEK_END);
    if (len < 0 || len % 8 || len > 65536 * 8)
        return err_set(err, len < 0 ? errno : E2BIG, "linux.seccomp: the exported filter");
    if ((r = buf_reserve(ret, (size_t)len)) < 0)
        return err_set(err, -r, "linux.seccomp: the exported filter");
    if (pread(fd, ret->data + ret->len, (size_t)len, 0) != len)
        return err_set(err, EIO, "linux.seccomp: read the exported filter");
    ret->len += (size_t)len;
    /* The flags seccomp_load would pass (SECCOMP_FILTER_FLAG_*). */
    static const struct {
        enum scmp_filter_attr attr;
        uint32_t flag;
    } fl[] = {
        {SCMP_FLTATR_CTL_TSYNC, SECCOMP_FILTER_FLAG_TSYNC},
        {SCMP_FLTATR_CTL_LOG, SECCOMP_FILTER_FLAG_LOG},
        {SCMP_FLTATR_CTL_SSB, SECCOMP_FILTER_FLAG_SPEC_ALLOW},
    };
    *ret_flags = 0;
    for (size_t i = 0; i < ARRAY_SIZE(fl); i++) {
        uint32_t v = 0;
        if (seccomp_attr_get(ctx, fl[i].attr, &v) == 0 && v)
            *ret_flags |= fl[i].flag;
    }
    return 0;
}
