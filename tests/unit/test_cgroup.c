/* Unit tests for oci/cgroup's pure parts: value conversion (runc semantics),
 * cgroupsPath resolution, mountinfo parsing and the eBPF device program,
 * which is run here by a small interpreter of the instructions it uses and
 * handed to the kernel's verifier where bpf() is permitted. */
#include "harness.h"
#include "failalloc.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include "oci/cgroup.h"
#include "oci/cgroup_internal.h"

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad test JSON: %s: %s", je.text, text);
    return j;
}

/* The write for `file`, or NULL. */
static const struct cg_write *find(const struct cg_writes *w, const char *file)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->v[i].file, file) == 0)
            return &w->v[i];
    return NULL;
}

static size_t index_of(const struct cg_writes *w, const char *file)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->v[i].file, file) == 0)
            return i;
    fail_msg("no write to %s", file);
    return 0;
}

static void expect_write(const struct cg_writes *w, const char *file, const char *value)
{
    const struct cg_write *x = find(w, file);
    if (!x)
        fail_msg("expected a write to %s = `%s`, none", file, value);
    assert_string_equal(x->value, value);
}

static void convert_ok(const char *json, struct cg_writes *w)
{
    struct err e = {0};
    json_t *j = J(json);
    int r = oci_cgroup_resources_convert(j, 0, w, &e);
    json_decref(j);
    if (r < 0)
        fail_msg("convert %s: %s", json, e.msg);
}

static void convert_fails(const char *json, const char *field)
{
    struct err e = {0};
    struct cg_writes w = {0};
    json_t *j = J(json);
    int r = oci_cgroup_resources_convert(j, 0, &w, &e);
    json_decref(j);
    oci_cgroup_writes_free(&w);
    if (r >= 0)
        fail_msg("convert %s: succeeded, expected an error naming %s", json, field);
    if (!strstr(e.msg, field))
        fail_msg("error `%s` does not name `%s`", e.msg, field);
}

/* ---- conversions ------------------------------------------------------------- */

static void test_shares_to_weight(void **state)
{
    (void)state;
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(0), 0);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(2), 1);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(1024), 100); /* the default weight */
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(512), 59);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(2048), 174);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(3), 2);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(262144), 10000);
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(1), 1);           /* clamped */
    assert_int_equal(oci_cgroup_cpu_shares_to_weight(1000000), 10000); /* clamped */
    /* every value in range as runc computes it, with libm */
    for (uint64_t s = 3; s < 262144; s++) {
        double l = log2((double)s);
        uint64_t want = (uint64_t)ceil(pow(10, (l * l + 125 * l) / 612.0 - 7.0 / 34.0));
        if (oci_cgroup_cpu_shares_to_weight(s) != want)
            fail_msg("shares %" PRIu64 ": weight %" PRIu64 ", runc's %" PRIu64, s,
                     oci_cgroup_cpu_shares_to_weight(s), want);
    }
}

static void test_blkio_weight(void **state)
{
    (void)state;
    assert_int_equal(oci_cgroup_blkio_weight_to_io_weight(10), 1);
    assert_int_equal(oci_cgroup_blkio_weight_to_io_weight(500), 4950);
    assert_int_equal(oci_cgroup_blkio_weight_to_io_weight(1000), 10000);
}

static void test_swap_conversion(void **state)
{
    (void)state;
    int64_t v = 7;
    assert_int_equal(oci_cgroup_memory_swap_to_v2(0, -1, &v), 0);
    assert_int_equal(v, -1); /* memory unlimited: swap unlimited too */
    assert_int_equal(oci_cgroup_memory_swap_to_v2(-1, 1000, &v), 0);
    assert_int_equal(v, -1);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(0, 1000, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(3000, 1000, &v), 0);
    assert_int_equal(v, 2000);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(1000, 1000, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(500, 1000, &v), -EINVAL);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(500, 0, &v), -EINVAL);
    assert_int_equal(oci_cgroup_memory_swap_to_v2(500, -1, &v), -EINVAL);
}

static void test_cpu(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"cpu\":{\"shares\":512,\"quota\":50000,\"period\":100000,\"idle\":1,"
               "\"burst\":1000,\"cpus\":\"0-1\",\"mems\":\"0\"}}",
               &w);
    expect_write(&w, "cpu.weight", "59");
    expect_write(&w, "cpu.max", "50000 100000");
    expect_write(&w, "cpu.idle", "1");
    expect_write(&w, "cpu.max.burst", "1000");
    expect_write(&w, "cpuset.cpus", "0-1");
    expect_write(&w, "cpuset.mems", "0");
    assert_string_equal(find(&w, "cpu.max")->controller, "cpu");
    assert_string_equal(find(&w, "cpuset.cpus")->controller, "cpuset");
    /* cpuset goes first, before anything that depends on it. */
    assert_int_equal(index_of(&w, "cpuset.cpus"), 0);
    assert_int_equal(index_of(&w, "cpuset.mems"), 1);
    oci_cgroup_writes_free(&w);

    convert_ok("{\"cpu\":{\"quota\":-1,\"period\":100000}}", &w);
    expect_write(&w, "cpu.max", "max 100000");
    oci_cgroup_writes_free(&w);
    convert_ok("{\"cpu\":{\"quota\":20000}}", &w);
    expect_write(&w, "cpu.max", "20000"); /* the kernel keeps its period */
    oci_cgroup_writes_free(&w);
    convert_ok("{\"cpu\":{\"shares\":0}}", &w);
    assert_int_equal(w.n, 0);
    oci_cgroup_writes_free(&w);

    convert_fails("{\"cpu\":{\"shares\":\"x\"}}", "linux.resources.cpu.shares");
    convert_fails("{\"cpu\":{\"period\":10}}", "linux.resources.cpu.period");
    convert_fails("{\"cpu\":{\"cpus\":\"0;rm\"}}", "linux.resources.cpu.cpus");
    convert_fails("{\"cpu\":{\"idle\":5}}", "linux.resources.cpu.idle");
    convert_fails("{\"cpu\":{\"realtimeRuntime\":1000}}", "linux.resources.cpu.realtimeRuntime");
    convert_fails("{\"cpu\":[]}", "linux.resources.cpu");
}

static void test_memory(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"memory\":{\"limit\":104857600,\"swap\":209715200,\"reservation\":1048576}}", &w);
    expect_write(&w, "memory.max", "104857600");
    expect_write(&w, "memory.swap.max", "104857600");
    expect_write(&w, "memory.low", "1048576");
    assert_true(find(&w, "memory.swap.max")->optional);
    /* runc writes swap before the limit. */
    assert_true(index_of(&w, "memory.swap.max") < index_of(&w, "memory.max"));
    oci_cgroup_writes_free(&w);

    convert_ok("{\"memory\":{\"limit\":104857600,\"swap\":104857600}}", &w);
    expect_write(&w, "memory.swap.max", "0"); /* no swap at all */
    oci_cgroup_writes_free(&w);

    convert_ok("{\"memory\":{\"limit\":104857600,\"swap\":-1}}", &w);
    expect_write(&w, "memory.swap.max", "max");
    oci_cgroup_writes_free(&w);

    convert_ok("{\"memory\":{\"limit\":-1}}", &w);
    expect_write(&w, "memory.max", "max");
    expect_write(&w, "memory.swap.max", "max");
    oci_cgroup_writes_free(&w);

    convert_ok("{\"memory\":{\"limit\":104857600}}", &w);
    assert_null(find(&w, "memory.swap.max")); /* swap left alone */
    oci_cgroup_writes_free(&w);

    convert_ok("{\"memory\":{\"limit\":1048576,\"disableOOMKiller\":true,\"swappiness\":0}}", &w);
    assert_int_equal(w.n_warnings, 2);
    assert_non_null(strstr(w.warnings[0], "disableOOMKiller"));
    assert_non_null(strstr(w.warnings[1], "swappiness"));
    oci_cgroup_writes_free(&w);

    /* An update that sets swap alone uses the current limit. */
    struct err e = {0};
    json_t *j = J("{\"memory\":{\"swap\":300}}");
    assert_int_equal(oci_cgroup_resources_convert(j, 100, &w, &e), 0);
    expect_write(&w, "memory.swap.max", "200");
    oci_cgroup_writes_free(&w);
    json_decref(j);

    convert_fails("{\"memory\":{\"limit\":1000,\"swap\":500}}", "linux.resources.memory.swap");
    convert_fails("{\"memory\":{\"swap\":500}}", "linux.resources.memory.swap");
    convert_fails("{\"memory\":{\"limit\":-5}}", "linux.resources.memory.limit");
    convert_fails("{\"memory\":{\"limit\":1.5}}", "linux.resources.memory.limit");
    convert_fails("{\"memory\":{\"disableOOMKiller\":1}}",
                  "linux.resources.memory.disableOOMKiller");
}

static void test_pids(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"pids\":{\"limit\":10}}", &w);
    expect_write(&w, "pids.max", "10");
    assert_string_equal(w.v[0].controller, "pids");
    oci_cgroup_writes_free(&w);
    convert_ok("{\"pids\":{\"limit\":-1}}", &w);
    expect_write(&w, "pids.max", "max");
    oci_cgroup_writes_free(&w);
    convert_ok("{\"pids\":{\"limit\":0}}", &w);
    expect_write(&w, "pids.max", "max"); /* <= 0: no limit (runtime spec) */
    oci_cgroup_writes_free(&w);
    convert_ok("{\"pids\":{}}", &w);
    assert_int_equal(w.n, 0);
    oci_cgroup_writes_free(&w);
    convert_fails("{\"pids\":{\"limit\":\"10\"}}", "linux.resources.pids.limit");
}

static void test_io(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"blockIO\":{\"weight\":500,"
               "\"weightDevice\":[{\"major\":8,\"minor\":0,\"weight\":100}],"
               "\"throttleReadBpsDevice\":[{\"major\":8,\"minor\":0,\"rate\":1048576}],"
               "\"throttleWriteBpsDevice\":[{\"major\":8,\"minor\":16,\"rate\":0}],"
               "\"throttleReadIOPSDevice\":[{\"major\":253,\"minor\":1,\"rate\":100}],"
               "\"throttleWriteIOPSDevice\":[{\"major\":253,\"minor\":1,\"rate\":50}]}}",
               &w);
    assert_int_equal(w.n, 6);
    assert_string_equal(w.v[0].file, "io.bfq.weight");
    assert_string_equal(w.v[0].value, "500");
    assert_string_equal(w.v[0].alt_file, "io.weight");
    assert_string_equal(w.v[0].alt_value, "4950");
    assert_string_equal(w.v[1].value, "8:0 100");
    assert_string_equal(w.v[1].alt_value, "8:0 910");
    assert_string_equal(w.v[2].file, "io.max");
    assert_string_equal(w.v[2].value, "8:0 rbps=1048576");
    assert_string_equal(w.v[3].value, "8:16 wbps=max");
    assert_string_equal(w.v[4].value, "253:1 riops=100");
    assert_string_equal(w.v[5].value, "253:1 wiops=50");
    oci_cgroup_writes_free(&w);

    convert_fails("{\"blockIO\":{\"weight\":5000}}", "linux.resources.blockIO.weight");
    convert_fails("{\"blockIO\":{\"throttleReadBpsDevice\":[{\"major\":8,\"rate\":1}]}}",
                  "linux.resources.blockIO.throttleReadBpsDevice[0]");
    convert_fails("{\"blockIO\":{\"throttleReadBpsDevice\":[{\"major\":8,\"minor\":-2,"
                  "\"rate\":1}]}}",
                  "linux.resources.blockIO.throttleReadBpsDevice[0]");
}

static void test_hugetlb_rdma(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"hugepageLimits\":[{\"pageSize\":\"2MB\",\"limit\":20971520},"
               "{\"pageSize\":\"1GB\",\"limit\":0}],"
               "\"rdma\":{\"mlx5_1\":{\"hcaHandles\":3,\"hcaObjects\":10000}}}",
               &w);
    expect_write(&w, "hugetlb.2MB.max", "20971520");
    expect_write(&w, "hugetlb.2MB.rsvd.max", "20971520");
    expect_write(&w, "hugetlb.1GB.max", "0");
    assert_true(find(&w, "hugetlb.2MB.rsvd.max")->optional);
    assert_string_equal(find(&w, "hugetlb.2MB.max")->controller, "hugetlb");
    expect_write(&w, "rdma.max", "mlx5_1 hca_handle=3 hca_object=10000");
    oci_cgroup_writes_free(&w);

    convert_fails("{\"hugepageLimits\":[{\"pageSize\":\"2M/../x\",\"limit\":1}]}",
                  "linux.resources.hugepageLimits[0].pageSize");
    convert_fails("{\"hugepageLimits\":[{\"pageSize\":\"2MB\"}]}",
                  "linux.resources.hugepageLimits[0].limit");
    convert_fails("{\"rdma\":{\"a/b\":{\"hcaHandles\":1}}}", "linux.resources.rdma");
}

static void test_unified(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    convert_ok("{\"unified\":{\"memory.high\":\"50000000\",\"cgroup.max.depth\":\"3\"},"
               "\"pids\":{\"limit\":4},\"memory\":{\"limit\":100000000}}",
               &w);
    expect_write(&w, "memory.high", "50000000");
    assert_string_equal(find(&w, "memory.high")->controller, "memory");
    assert_string_equal(find(&w, "cgroup.max.depth")->controller, "");
    /* unified is applied last, so that it overrides. */
    assert_true(index_of(&w, "memory.high") > index_of(&w, "pids.max"));
    assert_true(index_of(&w, "memory.high") > index_of(&w, "memory.max"));
    oci_cgroup_writes_free(&w);

    char ctrl[32];
    assert_int_equal(oci_cgroup_unified_key_check("io.max", ctrl, sizeof(ctrl)), 0);
    assert_string_equal(ctrl, "io");
    assert_int_equal(oci_cgroup_unified_key_check("../memory.max", ctrl, sizeof(ctrl)), -EINVAL);
    assert_int_equal(oci_cgroup_unified_key_check("a/memory.max", ctrl, sizeof(ctrl)), -EINVAL);
    assert_int_equal(oci_cgroup_unified_key_check(".memory", ctrl, sizeof(ctrl)), -EINVAL);
    assert_int_equal(oci_cgroup_unified_key_check("memory", ctrl, sizeof(ctrl)), -EINVAL);
    assert_int_equal(oci_cgroup_unified_key_check("", ctrl, sizeof(ctrl)), -EINVAL);
    assert_int_equal(oci_cgroup_unified_key_check("cgroup.procs", ctrl, sizeof(ctrl)), -EPERM);
    /* Would freeze the init before it runs: create would wait for good. */
    assert_int_equal(oci_cgroup_unified_key_check("cgroup.freeze", ctrl, sizeof(ctrl)), -EPERM);
    convert_fails("{\"unified\":{\"cgroup.freeze\":\"1\"}}", "pause and resume");

    convert_fails("{\"unified\":{\"../../etc/passwd\":\"x\"}}", "linux.resources.unified");
    convert_fails("{\"unified\":{\"memory.high\":5}}", "linux.resources.unified.memory.high");
    convert_fails("{\"unified\":{\"cgroup.procs\":\"1\"}}", "linux.resources.unified");
}

static void test_null_and_types(void **state)
{
    (void)state;
    struct cg_writes w = {0};
    struct err e = {0};
    assert_int_equal(oci_cgroup_resources_convert(NULL, 0, &w, &e), 0);
    assert_int_equal(w.n, 0);
    convert_ok("{}", &w);
    assert_int_equal(w.n, 0);
    oci_cgroup_writes_free(&w);
    convert_fails("[]", "linux.resources");
    convert_fails("{\"memory\":5}", "linux.resources.memory");
    convert_fails("{\"hugepageLimits\":{}}", "linux.resources.hugepageLimits");
}

/* ---- paths ------------------------------------------------------------------ */

static const char hybrid_mountinfo[] =
    "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static void test_mountinfo(void **state)
{
    (void)state;
    char *p = NULL;
    assert_int_equal(oci_cgroup_mountinfo_find(hybrid_mountinfo, &p), 0);
    assert_string_equal(p, "/sys/fs/cgroup/unified");
    free(p);
    assert_int_equal(oci_cgroup_mountinfo_find("28 22 0:25 / /sys/fs/cgroup rw,nosuid shared:4 - "
                                               "cgroup2 cgroup2 rw,nsdelegate\n",
                                               &p),
                     0);
    assert_string_equal(p, "/sys/fs/cgroup");
    free(p);
    /* Elsewhere, with an escaped space; the canonical mount still wins. */
    assert_int_equal(
        oci_cgroup_mountinfo_find("50 1 0:40 / /mnt/my\\040cg rw - cgroup2 none rw\n", &p), 0);
    assert_string_equal(p, "/mnt/my cg");
    free(p);
    assert_int_equal(oci_cgroup_mountinfo_find("50 1 0:40 / /mnt/cg rw - cgroup2 none rw\n"
                                               "51 1 0:40 / /sys/fs/cgroup rw - cgroup2 none rw\n",
                                               &p),
                     0);
    assert_string_equal(p, "/sys/fs/cgroup");
    free(p);
    assert_int_equal(oci_cgroup_mountinfo_find("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup "
                                               "cgroup rw,cpu\n",
                                               &p),
                     -ENOENT);
    assert_int_equal(oci_cgroup_mountinfo_find("", &p), -ENOENT);
}

static void resolve(const char *in, const char *id, const char *want)
{
    char *p = NULL;
    struct err e = {0};
    if (oci_cgroup_path_resolve(in, id, &p, &e) < 0)
        fail_msg("resolve `%s`: %s", in ? in : "(null)", e.msg);
    assert_string_equal(p, want);
    free(p);
}

static void resolve_fails(const char *in, const char *msg_part)
{
    char *p = NULL;
    struct err e = {0};
    if (oci_cgroup_path_resolve(in, "c1", &p, &e) >= 0)
        fail_msg("resolve `%s` gave `%s`, expected an error", in, p);
    assert_int_equal(e.code, EINVAL);
    if (!strstr(e.msg, msg_part))
        fail_msg("error `%s` lacks `%s`", e.msg, msg_part);
}

static void test_path_resolve(void **state)
{
    (void)state;
    resolve(NULL, "c1", "kinglet/c1");
    resolve("", "c1", "kinglet/c1");
    resolve("/kubepods/burstable/pod1234/c1", "c1", "kubepods/burstable/pod1234/c1");
    resolve("//a///b/", "x", "a/b");
    resolve("mygroup/c1", "c1", "kinglet/mygroup/c1");
    resolve_fails("system.slice:kinglet:c1", "systemd");
    resolve_fails("/a/../../etc", "cgroupsPath");
    resolve_fails("/a/./b", "cgroupsPath");
    resolve_fails("/", "cgroupsPath");
    resolve_fails("/a/b\nc", "cgroupsPath");
}

/* ---- device program ------------------------------------------------------------- */

/* Runs the program on one request, interpreting the instructions the
 * builder emits; any other instruction fails the test. */
static int bpf_run(const struct bpf_insn *p, size_t n, char type, uint32_t major, uint32_t minor,
                   const char *access)
{
    uint32_t acc = 0;
    for (const char *a = access; *a; a++)
        acc |= *a == 'r'   ? BPF_DEVCG_ACC_READ
               : *a == 'w' ? BPF_DEVCG_ACC_WRITE
                           : BPF_DEVCG_ACC_MKNOD;
    struct bpf_cgroup_dev_ctx ctx = {
        .access_type = (acc << 16) | (type == 'c' ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK),
        .major = major,
        .minor = minor,
    };
    uint64_t reg[11] = {0};
    for (size_t pc = 0, steps = 0; pc < n && steps < 100000; pc++, steps++) {
        const struct bpf_insn *i = &p[pc];
        uint64_t src = BPF_SRC(i->code) == BPF_X ? reg[i->src_reg] : (uint64_t)(int64_t)i->imm;
        switch (i->code) {
        case BPF_LDX | BPF_MEM | BPF_W: {
            assert_int_equal(i->src_reg, BPF_REG_1);
            uint32_t v;
            assert_true(i->off >= 0 && (size_t)i->off + 4 <= sizeof(ctx));
            memcpy(&v, (char *)&ctx + i->off, 4);
            reg[i->dst_reg] = v;
            break;
        }
        case BPF_ALU | BPF_AND | BPF_K:
        case BPF_ALU | BPF_AND | BPF_X:
            reg[i->dst_reg] = (uint32_t)(reg[i->dst_reg] & src);
            break;
        case BPF_ALU | BPF_RSH | BPF_K:
            reg[i->dst_reg] = (uint32_t)reg[i->dst_reg] >> i->imm;
            break;
        case BPF_ALU | BPF_MOV | BPF_K:
        case BPF_ALU | BPF_MOV | BPF_X:
            reg[i->dst_reg] = (uint32_t)src;
            break;
        case BPF_JMP | BPF_JNE | BPF_K:
        case BPF_JMP | BPF_JNE | BPF_X:
            if (reg[i->dst_reg] != src)
                pc += (size_t)i->off;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
        case BPF_JMP | BPF_JEQ | BPF_X:
            if (reg[i->dst_reg] == src)
                pc += (size_t)i->off;
            break;
        case BPF_JMP | BPF_EXIT:
            return (int)reg[0];
        default:
            fail_msg("unexpected instruction 0x%02x at %zu", i->code, pc);
        }
    }
    fail_msg("program ran off its end");
    return -1;
}

struct prog {
    struct bpf_insn *insns;
    size_t n;
};

static struct prog prog_from(const char *devices_json)
{
    struct err e = {0};
    json_t *j = devices_json ? J(devices_json) : NULL;
    struct oci_dev_rule *rules = NULL;
    size_t n = 0;
    struct prog p = {0};
    if (oci_cgroup_devices_parse(j, &rules, &n, &e) < 0)
        fail_msg("parse %s: %s", devices_json, e.msg);
    if (oci_bpf_devices_build(rules, n, &p.insns, &p.n, &e) < 0)
        fail_msg("build: %s", e.msg);
    free(rules);
    json_decref(j);
    return p;
}

/* The kernel's verifier accepts the program (where bpf() is allowed). */
static void verify_in_kernel(const struct prog *p)
{
    char log[16384] = "";
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = (uint64_t)(uintptr_t)p->insns;
    attr.insn_cnt = (uint32_t)p->n;
    attr.license = (uint64_t)(uintptr_t) "GPL";
    long fd = syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
    if (fd < 0 && (errno == EPERM || errno == ENOSYS))
        return; /* no bpf() for us here: the interpreter checks remain */
    if (fd < 0) {
        /* Again with the verifier's log (which a large program fills:
         * ENOSPC), to say why. */
        attr.log_buf = (uint64_t)(uintptr_t)log;
        attr.log_size = sizeof(log);
        attr.log_level = 1;
        fd = syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
    }
    if (fd < 0)
        fail_msg("verifier refused the program: %s\n%s", strerror(errno), log);
    close((int)fd);
}

static void test_devices_default(void **state)
{
    (void)state;
    /* `runc spec`'s deny-all, plus the devices every container gets. */
    struct prog p = prog_from("[{\"allow\":false,\"access\":\"rwm\"}]");
    verify_in_kernel(&p);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 3, "rw"), 1);    /* null */
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 5, "r"), 1);     /* zero */
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 136, 7, "rw"), 1);  /* pts */
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 10, 200, "rw"), 1); /* tun */
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "r"), 0);    /* kmsg */
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 1, "r"), 0);     /* mem */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 0, "r"), 0);     /* sda */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 0, "m"), 1);     /* mknod only */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 0, "rm"), 0);
    free(p.insns);

    /* No rules at all: deny by default too. */
    p = prog_from(NULL);
    verify_in_kernel(&p);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "r"), 0);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 9, "r"), 1);
    free(p.insns);
}

static void test_devices_rules(void **state)
{
    (void)state;
    struct prog p = prog_from("[{\"allow\":false,\"access\":\"rwm\"},"
                              "{\"allow\":true,\"type\":\"c\",\"major\":1,\"minor\":11,"
                              "\"access\":\"r\"},"
                              "{\"allow\":true,\"type\":\"b\",\"major\":8,\"access\":\"rw\"},"
                              "{\"allow\":false,\"type\":\"b\",\"major\":8,\"minor\":1,"
                              "\"access\":\"w\"}]");
    verify_in_kernel(&p);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "r"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "w"), 0);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "rw"), 0); /* w not granted */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 1, 11, "r"), 0);  /* type matters */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 0, "rw"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 1, "r"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 1, "w"), 0);  /* later deny wins */
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 1, "rw"), 0); /* deny on any bit */
    free(p.insns);

    /* Privileged: allow everything; the default rules come after and
     * everything earlier is unreachable, which the verifier refuses unless
     * the builder stops there. */
    p = prog_from("[{\"allow\":true,\"access\":\"rwm\"}]");
    verify_in_kernel(&p);
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 0, "rwm"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 1, "rw"), 1);
    free(p.insns);

    /* A later deny-all beats earlier allows, but the defaults still win. */
    p = prog_from("[{\"allow\":true,\"type\":\"c\",\"major\":1,\"minor\":11},"
                  "{\"allow\":false}]");
    verify_in_kernel(&p);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 11, "r"), 0);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 3, "rw"), 1);
    free(p.insns);
}

static void devices_fail(const char *json, const char *field);

/* A devices array of n copies of one rule, as a bundle may give it. */
static char *rules_json(size_t n, const char *rule)
{
    size_t len = strlen(rule) + 1;
    char *s = malloc(n * len + 3);
    assert_non_null(s);
    char *p = s;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, rule, len - 1);
        p += len - 1;
    }
    *p++ = ']';
    *p = '\0';
    return s;
}

/* Rules that emit the most instructions (type, access, major and minor
 * tests: 8 with the verdict) filled a buffer sized for 7 per rule: 24 of
 * them wrote past it, 1,024 (the most accepted) about 8 KB past it. Run
 * under ASan, this overflows on the old sizing; everywhere, the program
 * has exactly the length its rules need and still decides right. */
static void test_devices_many_rules(void **state)
{
    (void)state;
    static const size_t counts[] = {1, 23, 24, 25, 1024};
    static const struct {
        const char *rule;
        size_t insns; /* tests + verdict */
    } shapes[] = {
        {"{\"allow\":true,\"type\":\"c\",\"major\":1,\"minor\":1,\"access\":\"r\"}", 8},
        {"{\"allow\":false,\"type\":\"b\",\"major\":8,\"minor\":2,\"access\":\"w\"}", 8},
        {"{\"allow\":true,\"type\":\"c\",\"major\":1,\"access\":\"rwm\"}", 4},
        {"{\"allow\":false,\"access\":\"m\"}", 5},
    };
    /* The rules appended to every spec, the default deny and the 6
     * instructions that load the request. */
    struct prog base = prog_from("[]");
    for (size_t s = 0; s < ARRAY_SIZE(shapes); s++) {
        for (size_t c = 0; c < ARRAY_SIZE(counts); c++) {
            char *json = rules_json(counts[c], shapes[s].rule);
            struct prog p = prog_from(json);
            free(json);
            assert_int_equal(p.n, base.n + counts[c] * shapes[s].insns);
            verify_in_kernel(&p);
            /* The defaults, appended last, still decide for /dev/null. */
            assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 3, "rw"), 1);
            if (s == 0) /* allow c 1:1 r */
                assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 1, "r"), 1);
            if (s == 1) /* deny b 8:2 w: nothing allowed it anyway */
                assert_int_equal(bpf_run(p.insns, p.n, 'b', 8, 2, "w"), 0);
            if (s != 2) /* allow c 1:* rwm grants it */
                assert_int_equal(bpf_run(p.insns, p.n, 'c', 1, 1, "w"), 0);
            free(p.insns);
        }
    }
    free(base.insns);

    /* More than the limit is refused before any program is built. */
    char *json = rules_json(CG_MAX_DEVICE_RULES + 1, shapes[0].rule);
    devices_fail(json, "more than 1024 rules");
    free(json);
}

static void devices_fail(const char *json, const char *field)
{
    struct err e = {0};
    json_t *j = J(json);
    struct oci_dev_rule *rules = NULL;
    size_t n = 0;
    int r = oci_cgroup_devices_parse(j, &rules, &n, &e);
    json_decref(j);
    free(rules);
    if (r >= 0)
        fail_msg("devices %s accepted", json);
    if (!strstr(e.msg, field))
        fail_msg("error `%s` does not name `%s`", e.msg, field);
}

static void test_devices_errors(void **state)
{
    (void)state;
    devices_fail("{}", "linux.resources.devices");
    devices_fail("[{\"access\":\"r\"}]", "linux.resources.devices[0].allow");
    devices_fail("[{\"allow\":true,\"type\":\"x\"}]", "linux.resources.devices[0].type");
    devices_fail("[{\"allow\":true},{\"allow\":true,\"access\":\"rx\"}]",
                 "linux.resources.devices[1].access");
    devices_fail("[{\"allow\":true,\"major\":-7}]", "linux.resources.devices[0].major");
    devices_fail("[{\"allow\":true,\"minor\":\"1\"}]", "linux.resources.devices[0].minor");
}

static void test_with_linux_devices(void **state)
{
    struct err e = {0};
    json_t *res = J("{\"devices\":[{\"allow\":false,\"access\":\"rwm\"}],\"pids\":{\"limit\":3}}");
    json_t *devs = J("[{\"path\":\"/dev/fuse\",\"type\":\"c\",\"major\":10,\"minor\":229},"
                     "{\"path\":\"/dev/fifo\",\"type\":\"p\"},"
                     "{\"path\":\"/dev/loop9\",\"type\":\"b\",\"major\":7,\"minor\":9}]");
    json_t *out = NULL;
    if (oci_cgroup_resources_with_devices(res, devs, &out, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(json_array_size(json_object_get(res, "devices")), 1); /* input untouched */
    json_t *rules = json_object_get(out, "devices");
    assert_int_equal(json_array_size(rules), 3);
    assert_non_null(json_object_get(out, "pids"));

    struct oci_dev_rule *r = NULL;
    size_t n = 0;
    struct prog p = {0};
    assert_int_equal(oci_cgroup_devices_parse(rules, &r, &n, &e), 0);
    assert_int_equal(oci_bpf_devices_build(r, n, &p.insns, &p.n, &e), 0);
    assert_int_equal(bpf_run(p.insns, p.n, 'c', 10, 229, "rw"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 7, 9, "rw"), 1);
    assert_int_equal(bpf_run(p.insns, p.n, 'b', 7, 8, "r"), 0);
    free(p.insns);
    free(r);
    json_decref(out);

    /* No resources at all: a devices list of the created devices. */
    assert_int_equal(oci_cgroup_resources_with_devices(NULL, devs, &out, &e), 0);
    assert_int_equal(json_array_size(json_object_get(out, "devices")), 2);
    json_decref(out);

    json_t *bad = J("[{\"path\":\"/dev/x\",\"type\":\"x\",\"major\":1,\"minor\":1}]");
    assert_true(oci_cgroup_resources_with_devices(res, bad, &out, &e) < 0);
    assert_non_null(strstr(e.msg, "linux.devices[0].type"));
    json_decref(bad);
    json_decref(res);
    json_decref(devs);
}

static void test_features(void **state)
{
    json_t *f = oci_cgroup_features();
    assert_true(json_is_true(json_object_get(f, "v2")));
    assert_true(json_is_false(json_object_get(f, "v1")));
    assert_true(json_is_false(json_object_get(f, "systemd")));
    json_decref(f);
}

static void test_alloc_failures(void **state)
{
    if (!FAILALLOC_ENABLED)
        skip();
    json_t *res = J("{\"cpu\":{\"shares\":1024,\"quota\":50000,\"period\":100000,\"cpus\":\"0\"},"
                    "\"memory\":{\"limit\":1048576,\"swap\":2097152,\"disableOOMKiller\":true},"
                    "\"pids\":{\"limit\":3},\"blockIO\":{\"weight\":100,"
                    "\"throttleReadBpsDevice\":[{\"major\":8,\"minor\":0,\"rate\":1}]},"
                    "\"hugepageLimits\":[{\"pageSize\":\"2MB\",\"limit\":0}],"
                    "\"rdma\":{\"mlx5\":{\"hcaHandles\":1}},\"unified\":{\"memory.high\":\"1\"},"
                    "\"devices\":[{\"allow\":false},{\"allow\":true,\"type\":\"c\",\"major\":1}]}");
    json_t *devs = J("[{\"type\":\"c\",\"major\":10,\"minor\":229}]");
    size_t k, failures = 0;
    for (k = 0; k < 100000; k++) {
        long before = failalloc_in_use();
        struct err e = {0};
        struct cg_writes w = {0};
        struct oci_dev_rule *rules = NULL;
        struct bpf_insn *insns = NULL;
        size_t n = 0, ni = 0;
        char *path = NULL;
        json_t *with = NULL;
        failalloc_arm((long)k);
        int r = oci_cgroup_resources_convert(res, 0, &w, &e);
        if (r == 0)
            r = oci_cgroup_devices_parse(json_object_get(res, "devices"), &rules, &n, &e);
        if (r == 0)
            r = oci_bpf_devices_build(rules, n, &insns, &ni, &e);
        if (r == 0)
            r = oci_cgroup_path_resolve("/kubepods/pod1/c1", "c1", &path, &e);
        if (r == 0)
            r = oci_cgroup_resources_with_devices(res, devs, &with, &e);
        failalloc_disarm();
        bool hit = failalloc_hit();
        if (r < 0) {
            if (!hit)
                fail_msg("k=%zu: failed without an allocation failure: %s", k, e.msg);
            if (e.code != ENOMEM)
                fail_msg("k=%zu: allocation failure reported as `%s`", k, e.msg);
            failures++;
        }
        oci_cgroup_writes_free(&w);
        free(rules);
        free(insns);
        free(path);
        json_decref(with);
        if (failalloc_in_use() != before)
            fail_msg("k=%zu: %ld bytes leaked", k, failalloc_in_use() - before);
        if (r == 0 && !hit)
            break;
    }
    assert_true(failures > 10);
    json_decref(res);
    json_decref(devs);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_shares_to_weight),
    cmocka_unit_test(test_blkio_weight),
    cmocka_unit_test(test_swap_conversion),
    cmocka_unit_test(test_cpu),
    cmocka_unit_test(test_memory),
    cmocka_unit_test(test_pids),
    cmocka_unit_test(test_io),
    cmocka_unit_test(test_hugetlb_rdma),
    cmocka_unit_test(test_unified),
    cmocka_unit_test(test_null_and_types),
    cmocka_unit_test(test_mountinfo),
    cmocka_unit_test(test_path_resolve),
    cmocka_unit_test(test_devices_default),
    cmocka_unit_test(test_devices_rules),
    cmocka_unit_test(test_devices_errors),
    cmocka_unit_test(test_devices_many_rules),
    cmocka_unit_test(test_with_linux_devices),
    cmocka_unit_test(test_features),
    cmocka_unit_test(test_alloc_failures),
};
UNIT_MAIN(tests)
