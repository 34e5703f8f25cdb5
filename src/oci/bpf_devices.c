/* oci/bpf_devices: `linux.resources.devices` as an eBPF cgroup device program.
 *
 * cgroup v2 has no devices controller: access to device nodes is decided by
 * BPF_PROG_TYPE_CGROUP_DEVICE programs attached to the cgroup. We emit the
 * instructions ourselves (no libbpf, no clang at run time), as runc and crun
 * do. The program reads the request from struct bpf_cgroup_dev_ctx
 * (type | access << 16, major, minor) into r2..r5, then tests the rules from
 * the last to the first (the last matching rule wins in OCI), each block
 * jumping to the next one on mismatch and returning its verdict on match. The
 * end of the program denies.
 *
 * An allow rule matches only when it grants every requested access bit, a
 * deny rule as soon as it refuses one of them: a request for "rw" against
 * "allow rwm; deny w" is refused, as on cgroup v1. */
#include <assert.h>
#include <linux/bpf.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "oci/cgroup_internal.h"

/* ---- rules ------------------------------------------------------------------ */

/* The devices every container may use, appended after the spec's rules
 * (so that they win), as runc's AllowedDevices and crun's defaults. */
static const struct oci_dev_rule default_rules[] = {
    {true, 'c', -1, -1, BPF_DEVCG_ACC_MKNOD},
    {true, 'b', -1, -1, BPF_DEVCG_ACC_MKNOD},
    {true, 'c', 1, 3, 7},    /* /dev/null */
    {true, 'c', 1, 8, 7},    /* /dev/random */
    {true, 'c', 1, 7, 7},    /* /dev/full */
    {true, 'c', 5, 0, 7},    /* /dev/tty */
    {true, 'c', 1, 5, 7},    /* /dev/zero */
    {true, 'c', 1, 9, 7},    /* /dev/urandom */
    {true, 'c', 5, 1, 7},    /* /dev/console */
    {true, 'c', 136, -1, 7}, /* /dev/pts/N */
    {true, 'c', 5, 2, 7},    /* /dev/ptmx */
    {true, 'c', 10, 200, 7}, /* /dev/net/tun */
};

static int parse_access(const char *s, uint32_t *ret)
{
    uint32_t a = 0;
    if (!s || !*s) {
        *ret = 7; /* empty means rwm */
        return 0;
    }
    for (; *s; s++) {
        switch (*s) {
        case 'r':
            a |= BPF_DEVCG_ACC_READ;
            break;
        case 'w':
            a |= BPF_DEVCG_ACC_WRITE;
            break;
        case 'm':
            a |= BPF_DEVCG_ACC_MKNOD;
            break;
        default:
            return -EINVAL;
        }
    }
    *ret = a;
    return 0;
}

static int get_devnum(json_t *d, const char *key, const char *where, int64_t max, int64_t *ret,
                      struct err *err)
{
    json_t *v = json_object_get(d, key);
    *ret = -1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return err_set(err, EINVAL, "%s.%s: must be an integer", where, key);
    int64_t n = (int64_t)json_integer_value(v);
    if (n < -1 || n > max)
        return err_set(err, EINVAL, "%s.%s: %lld outside [-1, %lld]", where, key, (long long)n,
                       (long long)max);
    *ret = n;
    return 0;
}

int oci_cgroup_devices_parse(json_t *devices, struct oci_dev_rule **ret, size_t *ret_n,
                             struct err *err)
{
    size_t n = 0;
    if (devices && !json_is_null(devices)) {
        if (!json_is_array(devices))
            return err_set(err, EINVAL, "linux.resources.devices: must be an array");
        n = json_array_size(devices);
        if (n > CG_MAX_DEVICE_RULES)
            return err_set(err, E2BIG, "linux.resources.devices: more than %d rules",
                           CG_MAX_DEVICE_RULES);
    }
    _cleanup_free_ struct oci_dev_rule *rules =
        calloc(n + ARRAY_SIZE(default_rules), sizeof(*rules));
    if (!rules)
        return err_set(err, ENOMEM, "linux.resources.devices");
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(devices, i);
        char where[64];
        snprintf(where, sizeof(where), "linux.resources.devices[%zu]", i);
        if (!json_is_object(d))
            return err_set(err, EINVAL, "%s: must be an object", where);
        json_t *allow = json_object_get(d, "allow");
        if (!json_is_boolean(allow))
            return err_set(err, EINVAL, "%s.allow: required boolean", where);
        rules[i].allow = json_is_true(allow);
        json_t *type = json_object_get(d, "type");
        if (!type || json_is_null(type)) {
            rules[i].type = 'a';
        } else {
            const char *t = json_string_value(type);
            if (!t || strlen(t) != 1 || !strchr("acbu", t[0]))
                return err_set(err, EINVAL, "%s.type: must be `a`, `c`, `u` or `b`", where);
            rules[i].type = t[0] == 'u' ? 'c' : t[0];
        }
        int r = get_devnum(d, "major", where, 0xfff, &rules[i].major, err);
        if (r < 0)
            return r;
        r = get_devnum(d, "minor", where, 0xfffff, &rules[i].minor, err);
        if (r < 0)
            return r;
        json_t *access = json_object_get(d, "access");
        if (access && !json_is_null(access) && !json_is_string(access))
            return err_set(err, EINVAL, "%s.access: must be a string of `r`, `w`, `m`", where);
        if (parse_access(json_string_value(access), &rules[i].access) < 0)
            return err_set(err, EINVAL, "%s.access: `%.16s`: only `r`, `w` and `m` are allowed",
                           where, json_string_value(access));
        if (rules[i].access == 0)
            rules[i].access = 7;
    }
    memcpy(rules + n, default_rules, sizeof(default_rules));
    *ret_n = n + ARRAY_SIZE(default_rules);
    *ret = TAKE_PTR(rules);
    return 0;
}

/* ---- program ----------------------------------------------------------------- */

#define INSN(c, d, s, o, i)                                                                        \
    ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})

/* Appends an instruction, or only counts it when out is NULL. */
#define EMIT(insn)                                                                                 \
    do {                                                                                           \
        if (out)                                                                                   \
            out[k] = (insn);                                                                       \
        k++;                                                                                       \
    } while (0)

/* The tests of one rule, excluding the final "mov r0; exit": at most
 * RULE_TESTS_MAX of them. With out NULL, only counts them, so that the
 * program is sized from what each rule really emits. */
#define RULE_TESTS_MAX 6
static size_t rule_tests(const struct oci_dev_rule *r, struct bpf_insn *out)
{
    size_t k = 0;
    /* Every test jumps to the next block: fix the offsets afterwards. */
    if (r->type != 'a')
        EMIT(INSN(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, 0,
                  r->type == 'c' ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK));
    if ((r->access & 7) != 7) {
        EMIT(INSN(BPF_ALU | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_3, 0, 0));
        EMIT(INSN(BPF_ALU | BPF_AND | BPF_K, BPF_REG_1, 0, 0, (int32_t)r->access));
        if (r->allow) /* some requested bit not granted: no match */
            EMIT(INSN(BPF_JMP | BPF_JNE | BPF_X, BPF_REG_1, BPF_REG_3, 0, 0));
        else /* no requested bit refused: no match */
            EMIT(INSN(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_1, 0, 0, 0));
    }
    if (r->major >= 0)
        EMIT(INSN(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 0, (int32_t)r->major));
    if (r->minor >= 0)
        EMIT(INSN(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_5, 0, 0, (int32_t)r->minor));
    assert(k <= RULE_TESTS_MAX);
    return k;
}
#undef EMIT

int oci_bpf_devices_build(const struct oci_dev_rule *rules, size_t n, struct bpf_insn **ret,
                          size_t *ret_n, struct err *err)
{
    if (n > CG_MAX_DEVICE_RULES + ARRAY_SIZE(default_rules))
        return err_set(err, E2BIG, "device rules: too many");
    /* 6 prologue, each rule's tests + 2 (its verdict), 2 epilogue:
     * counted from what each rule emits, never estimated. */
    size_t cap = 6 + 2;
    for (size_t i = 0; i < n; i++)
        cap += rule_tests(&rules[i], NULL) + 2;
    _cleanup_free_ struct bpf_insn *p = calloc(cap, sizeof(*p));
    if (!p)
        return err_set(err, ENOMEM, "device program");
    size_t k = 0;
    /* r2 = type, r3 = access, r4 = major, r5 = minor. */
    p[k++] = INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, 0, 0);
    p[k++] = INSN(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff);
    p[k++] = INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_3, BPF_REG_1, 0, 0);
    p[k++] = INSN(BPF_ALU | BPF_RSH | BPF_K, BPF_REG_3, 0, 0, 16);
    p[k++] = INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_4, BPF_REG_1, 4, 0);
    p[k++] = INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_5, BPF_REG_1, 8, 0);

    for (size_t i = n; i-- > 0;) {
        const struct oci_dev_rule *r = &rules[i];
        size_t start = k;
        size_t t = rule_tests(r, NULL);
        assert(k + t + 2 <= cap);
        k += rule_tests(r, p + k);
        p[k++] = INSN(BPF_ALU | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, r->allow ? 1 : 0);
        p[k++] = INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
        /* Point every conditional jump of the block at its end. */
        for (size_t j = start; j < start + t; j++)
            if (BPF_CLASS(p[j].code) == BPF_JMP)
                p[j].off = (int16_t)(k - j - 1);
        /* A rule that matches everything makes earlier rules and the
         * final deny unreachable, which the verifier refuses. */
        if (t == 0) {
            assert(k <= cap);
            *ret_n = k;
            *ret = TAKE_PTR(p);
            return 0;
        }
    }
    p[k++] = INSN(BPF_ALU | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0);
    p[k++] = INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    assert(k == cap);
    *ret_n = k;
    *ret = TAKE_PTR(p);
    return 0;
}

/* ---- kernel ------------------------------------------------------------------ */

static int sys_bpf(int cmd, union bpf_attr *attr)
{
    long r = syscall(__NR_bpf, cmd, attr, sizeof(*attr));
    return r < 0 ? -errno : (int)r;
}

static int prog_load(const struct bpf_insn *insns, size_t n, char *log, size_t log_size)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = (uint64_t)(uintptr_t)insns;
    attr.insn_cnt = (uint32_t)n;
    attr.license = (uint64_t)(uintptr_t) "GPL";
    if (log && log_size) {
        log[0] = '\0';
        attr.log_buf = (uint64_t)(uintptr_t)log;
        attr.log_size = (uint32_t)log_size;
        attr.log_level = 1;
    }
    /* bpf() returns close-on-exec fds. */
    return sys_bpf(BPF_PROG_LOAD, &attr);
}

/* Ids of the device programs attached to the cgroup itself. */
static int prog_query(int cgfd, uint32_t *ids, uint32_t *n)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.query.target_fd = (uint32_t)cgfd;
    attr.query.attach_type = BPF_CGROUP_DEVICE;
    attr.query.prog_ids = (uint64_t)(uintptr_t)ids;
    attr.query.prog_cnt = *n;
    int r = sys_bpf(BPF_PROG_QUERY, &attr);
    if (r < 0)
        return r;
    *n = attr.query.prog_cnt;
    return 0;
}

int oci_bpf_devices_apply(int cgfd, const struct bpf_insn *insns, size_t n, struct err *err)
{
    uint32_t old[64];
    uint32_t n_old = ARRAY_SIZE(old);
    int r = prog_query(cgfd, old, &n_old);
    if (r == -ENOSPC)
        return err_set(err, ENOSPC, "query device programs: more than %zu attached",
                       ARRAY_SIZE(old));
    if (r < 0)
        n_old = 0; /* older kernels: nothing to replace */

    /* Load without a verifier log: producing it costs the kernel a large
     * share of a container's creation. Ask for it only to explain a
     * refusal. */
    _cleanup_free_ char *log = NULL;
    _cleanup_close_ int prog = prog_load(insns, n, NULL, 0);
    if (prog < 0 && (log = calloc(1, 65536))) {
        _cleanup_close_ int again = prog_load(insns, n, log, 65536);
        if (again >= 0)
            prog = TAKE_FD(again);
    }
    if (prog < 0) {
        /* A verifier log means the kernel knows the program type and
         * refused our program: a bug here, not a missing feature. */
        if (log && log[0]) {
            log_debug("device program verifier log: %s", log);
            return err_set(err, ENOEXEC, "load device program: refused by the verifier (%s)",
                           strerror(-prog));
        }
        return err_set(err, -prog, "load device program");
    }
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.target_fd = (uint32_t)cgfd;
    attr.attach_bpf_fd = (uint32_t)prog;
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = BPF_F_ALLOW_MULTI;
    if ((r = sys_bpf(BPF_PROG_ATTACH, &attr)) < 0)
        return err_set(err, r, "attach device program");

    for (uint32_t i = 0; i < n_old; i++) {
        memset(&attr, 0, sizeof(attr));
        attr.prog_id = old[i];
        _cleanup_close_ int ofd = sys_bpf(BPF_PROG_GET_FD_BY_ID, &attr);
        if (ofd < 0) {
            if (ofd == -ENOENT)
                continue;
            return err_set(err, ofd, "open device program %u", old[i]);
        }
        memset(&attr, 0, sizeof(attr));
        attr.target_fd = (uint32_t)cgfd;
        attr.attach_bpf_fd = (uint32_t)ofd;
        attr.attach_type = BPF_CGROUP_DEVICE;
        r = sys_bpf(BPF_PROG_DETACH, &attr);
        if (r < 0 && r != -ENOENT)
            return err_set(err, r, "detach device program %u", old[i]);
    }
    return 0;
}
