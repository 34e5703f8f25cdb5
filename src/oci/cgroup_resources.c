/* oci/cgroup_resources: OCI `linux.resources` → cgroup v2 file writes.
 *
 * Pure: no file system access, so that every conversion is unit-tested. The
 * semantics follow runc's libcontainer/cgroups/fs2 (the reference that
 * kubelet and containerd are tested against): shares → cpu.weight, quota and
 * period → cpu.max, OCI memory+swap → memory.swap.max, blkio → io.*,
 * hugepage limits → hugetlb.<size>.max, unified written verbatim last. */
#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#include "oci/cgroup.h"
#include "oci/cgroup_internal.h"

/* log2 and exp without libm: linking libm maps 330 KB more into every
 * process of ours, the idle daemon included. Both are exact to the last bit
 * or so; tests/unit/test_cgroup.c checks every share value against libm. */
#define LN2  0.69314718055994530942
#define LN10 2.30258509299404568402

static double log2_u64(uint64_t s)
{
    int k = 63 - __builtin_clzll(s);
    double m = (double)s / (double)(1ull << k); /* [1, 2) */
    /* ln m = 2 atanh(z), z = (m - 1) / (m + 1) in [0, 1/3) */
    double z = (m - 1) / (m + 1), z2 = z * z, t = z, sum = 0;
    for (int i = 1; i < 60; i += 2) {
        sum += t / i;
        t *= z2;
    }
    return k + 2 * sum / LN2;
}

static double exp_pos(double x) /* 0 <= x < 40 */
{
    int n = (int)(x / LN2 + 0.5);
    double r = x - n * LN2, term = 1, sum = 1;
    for (int i = 1; i < 30; i++) {
        term *= r / i;
        sum += term;
    }
    return sum * (double)(1ull << n);
}

uint64_t oci_cgroup_cpu_shares_to_weight(uint64_t shares)
{
    /* cgroup v1 shares [2, 262144] onto v2 weight [1, 10000] along the
     * quadratic (in log2) curve that runc 1.3 and crun 1.23 adopted for
     * Kubernetes: unlike the old linear map it sends the default 1024
     * shares to the default weight 100, so a pod without requests and a
     * process outside Kubernetes weigh the same. */
    if (shares == 0)
        return 0;
    if (shares <= 2)
        return 1;
    if (shares >= 262144)
        return 10000;
    double l = log2_u64(shares);
    double exponent = (l * l + 125 * l) / 612.0 - 7.0 / 34.0; /* in [0, 4] */
    /* whole powers of ten exactly, as pow(10, 2.0) is: 1024 shares give 100 */
    int e10 = (int)exponent;
    double v = exp_pos((exponent - e10) * LN10);
    for (int i = 0; i < e10; i++)
        v *= 10;
    uint64_t w = (uint64_t)v;
    return w + (v > (double)w);
}

uint64_t oci_cgroup_blkio_weight_to_io_weight(uint64_t weight)
{
    /* blkio weight [10, 1000] onto io.weight [1, 10000]. */
    if (weight == 0)
        return 0;
    if (weight < 10)
        weight = 10;
    if (weight > 1000)
        weight = 1000;
    return 1 + (weight - 10) * 9999 / 990;
}

int oci_cgroup_memory_swap_to_v2(int64_t swap, int64_t memory, int64_t *ret)
{
    /* Memory unlimited and swap not set: both unlimited, as on v1. */
    if (memory == -1 && swap == 0) {
        *ret = -1;
        return 0;
    }
    if (swap == -1 || swap == 0) {
        *ret = swap;
        return 0;
    }
    if (swap < -1)
        return -EINVAL;
    if (memory == 0 || memory == -1)
        return -EINVAL; /* a swap limit needs a memory limit */
    if (memory < 0 || swap < memory)
        return -EINVAL;
    *ret = swap - memory;
    return 0;
}

int oci_cgroup_unified_key_check(const char *key, char *ctrl, size_t ctrl_size)
{
    size_t len = strlen(key);
    if (len == 0 || len > 255 || key[0] == '.')
        return -EINVAL;
    const char *dot = strchr(key, '.');
    if (!dot || dot == key || dot[1] == '\0')
        return -EINVAL;
    for (const char *p = key; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '_' || *p == '-'))
            return -EINVAL;
    /* Membership and process control are not resources. cgroup.freeze
     * would freeze the init before it execs, and `create` and `run` would
     * wait on it for good (runc hangs so): pause and resume do that. */
    static const char *const refused[] = {"cgroup.procs",  "cgroup.threads",         "cgroup.kill",
                                          "cgroup.freeze", "cgroup.subtree_control", "cgroup.type"};
    for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
        if (strcmp(key, refused[i]) == 0)
            return -EPERM;
    size_t clen = (size_t)(dot - key);
    if (clen >= ctrl_size)
        return -EINVAL;
    if (clen == 6 && memcmp(key, "cgroup", 6) == 0) {
        ctrl[0] = '\0';
    } else {
        memcpy(ctrl, key, clen);
        ctrl[clen] = '\0';
    }
    return 0;
}

/* ---- the write list ------------------------------------------------------ */

static void cg_write_clear(struct cg_write *w)
{
    free(w->file);
    free(w->value);
    free(w->alt_file);
    free(w->alt_value);
}

void oci_cgroup_writes_free(struct cg_writes *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        cg_write_clear(&w->v[i]);
    free(w->v);
    for (size_t i = 0; i < w->n_warnings; i++)
        free(w->warnings[i]);
    free(w->warnings);
    *w = (struct cg_writes){0};
}

static int writes_add(struct cg_writes *w, const char *ctrl, const char *file, const char *value,
                      const char *alt_file, const char *alt_value, bool optional, struct err *err)
{
    if (w->n >= CG_MAX_WRITES)
        return err_set(err, E2BIG, "linux.resources: more than %d cgroup settings", CG_MAX_WRITES);
    struct cg_write *v = realloc(w->v, (w->n + 1) * sizeof(*v));
    if (!v)
        return err_set(err, ENOMEM, "linux.resources");
    w->v = v;
    struct cg_write *n = &w->v[w->n];
    *n = (struct cg_write){.optional = optional};
    snprintf(n->controller, sizeof(n->controller), "%s", ctrl);
    n->file = strdup(file);
    n->value = strdup(value);
    n->alt_file = alt_file ? strdup(alt_file) : NULL;
    n->alt_value = alt_value ? strdup(alt_value) : NULL;
    if (!n->file || !n->value || (alt_file && !n->alt_file) || (alt_value && !n->alt_value)) {
        cg_write_clear(n);
        return err_set(err, ENOMEM, "linux.resources");
    }
    w->n++;
    return 0;
}

static int warnings_add(struct cg_writes *w, const char *msg, struct err *err)
{
    char **v = realloc(w->warnings, (w->n_warnings + 1) * sizeof(*v));
    if (!v)
        return err_set(err, ENOMEM, "linux.resources");
    w->warnings = v;
    if (!(w->warnings[w->n_warnings] = strdup(msg)))
        return err_set(err, ENOMEM, "linux.resources");
    w->n_warnings++;
    return 0;
}

/* ---- typed field access ---------------------------------------------------- */

/* An integer member: 0 = absent (or null), 1 = present, <0 = wrong type. */
static int get_int(json_t *obj, const char *key, const char *where, int64_t *ret, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return err_set(err, EINVAL, "%s.%s: must be an integer", where, key);
    *ret = (int64_t)json_integer_value(v);
    return 1;
}

static int get_uint(json_t *obj, const char *key, const char *where, uint64_t *ret, struct err *err)
{
    int64_t v = 0;
    int r = get_int(obj, key, where, &v, err);
    if (r <= 0)
        return r;
    if (v < 0)
        return err_set(err, EINVAL, "%s.%s: must not be negative (%" PRId64 ")", where, key, v);
    *ret = (uint64_t)v;
    return 1;
}

static int get_obj(json_t *obj, const char *key, const char *where, json_t **ret, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    *ret = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return err_set(err, EINVAL, "%s.%s: must be an object", where, key);
    *ret = v;
    return 1;
}

static int get_array(json_t *obj, const char *key, const char *where, json_t **ret, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    *ret = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return err_set(err, EINVAL, "%s.%s: must be an array", where, key);
    if (json_array_size(v) > CG_MAX_WRITES)
        return err_set(err, E2BIG, "%s.%s: more than %d entries", where, key, CG_MAX_WRITES);
    *ret = v;
    return 1;
}

/* runc's numToStr: 0 = unset, -1 = "max". */
static int limit_str(int64_t v, char *buf, size_t size)
{
    if (v == 0)
        return 0;
    if (v == -1)
        snprintf(buf, size, "max");
    else if (v < 0)
        return -EINVAL;
    else
        snprintf(buf, size, "%" PRId64, v);
    return 1;
}

/* cpuset lists: "0-3,7". */
static bool cpuset_list_valid(const char *s)
{
    if (strlen(s) > 1024)
        return false;
    for (const char *p = s; *p; p++)
        if (!(isdigit((unsigned char)*p) || *p == ',' || *p == '-'))
            return false;
    return true;
}

/* ---- controllers ------------------------------------------------------------ */

static int convert_cpuset(json_t *cpu, struct cg_writes *w, struct err *err)
{
    static const char *const where = "linux.resources.cpu";
    int r;
    json_t *s;
    if ((s = json_object_get(cpu, "cpus")) && !json_is_null(s)) {
        if (!json_is_string(s) || !cpuset_list_valid(json_string_value(s)))
            return err_set(err, EINVAL, "%s.cpus: must be a CPU list such as `0-3,7`", where);
        if (json_string_length(s) > 0 &&
            (r = writes_add(w, "cpuset", "cpuset.cpus", json_string_value(s), NULL, NULL, false,
                            err)) < 0)
            return r;
    }
    if ((s = json_object_get(cpu, "mems")) && !json_is_null(s)) {
        if (!json_is_string(s) || !cpuset_list_valid(json_string_value(s)))
            return err_set(err, EINVAL, "%s.mems: must be a node list such as `0-1`", where);
        if (json_string_length(s) > 0 &&
            (r = writes_add(w, "cpuset", "cpuset.mems", json_string_value(s), NULL, NULL, false,
                            err)) < 0)
            return r;
    }
    return 0;
}

static int convert_cpu(json_t *cpu, struct cg_writes *w, struct err *err)
{
    static const char *const where = "linux.resources.cpu";
    char buf[64];
    int r;
    uint64_t shares = 0, period = 0;
    int64_t quota = 0, idle = 0, rt = 0;
    uint64_t burst = 0;

    if ((r = get_int(cpu, "realtimeRuntime", where, &rt, err)) < 0)
        return r;
    if (r > 0 && rt != 0)
        return err_set(err, EINVAL, "%s.realtimeRuntime: not supported on cgroup v2", where);
    if ((r = get_int(cpu, "realtimePeriod", where, &rt, err)) < 0)
        return r;
    if (r > 0 && rt != 0)
        return err_set(err, EINVAL, "%s.realtimePeriod: not supported on cgroup v2", where);

    if ((r = get_uint(cpu, "shares", where, &shares, err)) < 0)
        return r;
    if (shares) {
        snprintf(buf, sizeof(buf), "%" PRIu64, oci_cgroup_cpu_shares_to_weight(shares));
        if ((r = writes_add(w, "cpu", "cpu.weight", buf, NULL, NULL, false, err)) < 0)
            return r;
    }

    if ((r = get_int(cpu, "quota", where, &quota, err)) < 0)
        return r;
    if ((r = get_uint(cpu, "period", where, &period, err)) < 0)
        return r;
    if (period > 0 && (period < 1000 || period > 1000000))
        return err_set(err, EINVAL, "%s.period: %" PRIu64 " outside [1000, 1000000] µs", where,
                       period);
    if (quota > 0 && quota < 1000)
        return err_set(err, EINVAL, "%s.quota: %" PRId64 " below 1000 µs", where, quota);
    if (quota != 0 || period != 0) {
        /* A non-positive quota means no limit; no period keeps the
         * kernel's. */
        int n = quota > 0 ? snprintf(buf, sizeof(buf), "%" PRId64, quota)
                          : snprintf(buf, sizeof(buf), "max");
        if (period)
            snprintf(buf + n, sizeof(buf) - (size_t)n, " %" PRIu64, period);
        if ((r = writes_add(w, "cpu", "cpu.max", buf, NULL, NULL, false, err)) < 0)
            return r;
    }

    if ((r = get_uint(cpu, "burst", where, &burst, err)) < 0)
        return r;
    if (r > 0) {
        snprintf(buf, sizeof(buf), "%" PRIu64, burst);
        if ((r = writes_add(w, "cpu", "cpu.max.burst", buf, NULL, NULL, false, err)) < 0)
            return r;
    }

    if ((r = get_int(cpu, "idle", where, &idle, err)) < 0)
        return r;
    if (r > 0) {
        if (idle != 0 && idle != 1)
            return err_set(err, EINVAL, "%s.idle: must be 0 or 1", where);
        if ((r = writes_add(w, "cpu", "cpu.idle", idle ? "1" : "0", NULL, NULL, false, err)) < 0)
            return r;
    }
    return 0;
}

static int convert_memory(json_t *mem, int64_t cur_limit, struct cg_writes *w, struct err *err)
{
    static const char *const where = "linux.resources.memory";
    char buf[64];
    int r;
    int64_t limit = 0, swap = 0, reservation = 0, v = 0;
    bool has_limit, has_swap;

    if ((r = get_int(mem, "limit", where, &limit, err)) < 0)
        return r;
    has_limit = r > 0;
    if ((r = get_int(mem, "swap", where, &swap, err)) < 0)
        return r;
    has_swap = r > 0;
    if ((r = get_int(mem, "reservation", where, &reservation, err)) < 0)
        return r;
    if (has_limit && limit < -1)
        return err_set(err, EINVAL, "%s.limit: invalid value %" PRId64, where, limit);
    if (has_swap && swap < -1)
        return err_set(err, EINVAL, "%s.swap: invalid value %" PRId64, where, swap);

    /* Swap alone (an update): relative to the current memory limit. */
    int64_t mem_for_swap = has_limit ? limit : cur_limit;
    if (has_swap || has_limit) {
        int64_t sw;
        if (oci_cgroup_memory_swap_to_v2(swap, mem_for_swap, &sw) < 0)
            return err_set(err, EINVAL,
                           "%s.swap: %" PRId64 " must be -1 or at least %s.limit (%" PRId64
                           ") with a memory limit set (OCI swap is memory+swap)",
                           where, swap, where, mem_for_swap);
        r = limit_str(sw, buf, sizeof(buf));
        if (r == 0 && sw == 0 && swap > 0) {
            /* memory == memory+swap: no swap at all. */
            snprintf(buf, sizeof(buf), "0");
            r = 1;
        }
        /* Before memory.max, as runc does. */
        if (r > 0 &&
            (r = writes_add(w, "memory", "memory.swap.max", buf, NULL, NULL, true, err)) < 0)
            return r;
    }
    if (has_limit && limit_str(limit, buf, sizeof(buf)) > 0 &&
        (r = writes_add(w, "memory", "memory.max", buf, NULL, NULL, false, err)) < 0)
        return r;
    if (reservation < -1)
        return err_set(err, EINVAL, "%s.reservation: invalid value %" PRId64, where, reservation);
    if (limit_str(reservation, buf, sizeof(buf)) > 0 &&
        (r = writes_add(w, "memory", "memory.low", buf, NULL, NULL, false, err)) < 0)
        return r;

    json_t *b = json_object_get(mem, "disableOOMKiller");
    if (b && !json_is_null(b) && !json_is_boolean(b))
        return err_set(err, EINVAL, "%s.disableOOMKiller: must be a boolean", where);
    if (json_is_true(b) &&
        (r = warnings_add(w, "memory.disableOOMKiller is not supported on cgroup v2: ignored",
                          err)) < 0)
        return r;
    if ((r = get_int(mem, "swappiness", where, &v, err)) < 0)
        return r;
    /* -1 and the kernel default 60 are what tools send for "unset". */
    if (r > 0 && v != -1 &&
        (r = warnings_add(w, "memory.swappiness is not supported on cgroup v2: ignored", err)) < 0)
        return r;
    /* kernel and kernelTCP are deprecated in OCI and ignored, as in runc. */
    return 0;
}

static int convert_pids(json_t *pids, struct cg_writes *w, struct err *err)
{
    int64_t limit = 0;
    int r = get_int(pids, "limit", "linux.resources.pids", &limit, err);
    if (r <= 0)
        return r;
    /* The runtime spec: a value <= 0 means no limit (runc 1.2 reads 0 the
     * same way; CRI-O sends 0 for "unlimited"). */
    char buf[32];
    if (limit <= 0)
        snprintf(buf, sizeof(buf), "max");
    else
        snprintf(buf, sizeof(buf), "%" PRId64, limit);
    return writes_add(w, "pids", "pids.max", buf, NULL, NULL, false, err);
}

static int device_numbers(json_t *d, const char *where, size_t i, int64_t *major, int64_t *minor,
                          struct err *err)
{
    char w[96];
    snprintf(w, sizeof(w), "%s[%zu]", where, i);
    if (!json_is_object(d))
        return err_set(err, EINVAL, "%s: must be an object", w);
    int r1 = get_int(d, "major", w, major, err);
    if (r1 < 0)
        return r1;
    int r2 = get_int(d, "minor", w, minor, err);
    if (r2 < 0)
        return r2;
    if (r1 == 0 || r2 == 0)
        return err_set(err, EINVAL, "%s: major and minor are required", w);
    if (*major < 0 || *major > 0xfff || *minor < 0 || *minor > 0xfffff)
        return err_set(err, EINVAL, "%s: invalid device number %" PRId64 ":%" PRId64, w, *major,
                       *minor);
    return 0;
}

static int convert_io(json_t *bio, struct cg_writes *w, struct err *err)
{
    static const char *const where = "linux.resources.blockIO";
    char buf[96], alt[96];
    uint64_t weight = 0;
    int r;

    if ((r = get_uint(bio, "weight", where, &weight, err)) < 0)
        return r;
    if (weight) {
        if (weight < 10 || weight > 1000)
            return err_set(err, EINVAL, "%s.weight: %" PRIu64 " outside [10, 1000]", where, weight);
        snprintf(buf, sizeof(buf), "%" PRIu64, weight);
        snprintf(alt, sizeof(alt), "%" PRIu64, oci_cgroup_blkio_weight_to_io_weight(weight));
        if ((r = writes_add(w, "io", "io.bfq.weight", buf, "io.weight", alt, false, err)) < 0)
            return r;
    }

    json_t *arr;
    if ((r = get_array(bio, "weightDevice", where, &arr, err)) < 0)
        return r;
    for (size_t i = 0; arr && i < json_array_size(arr); i++) {
        json_t *d = json_array_get(arr, i);
        int64_t major, minor;
        uint64_t dw = 0;
        if ((r = device_numbers(d, "linux.resources.blockIO.weightDevice", i, &major, &minor,
                                err)) < 0)
            return r;
        char w2[96];
        snprintf(w2, sizeof(w2), "%s.weightDevice[%zu]", where, i);
        if ((r = get_uint(d, "weight", w2, &dw, err)) < 0)
            return r;
        if (r == 0 || dw == 0)
            continue; /* leafWeight alone: nothing on v2 */
        if (dw < 10 || dw > 1000)
            return err_set(err, EINVAL, "%s.weight: %" PRIu64 " outside [10, 1000]", w2, dw);
        snprintf(buf, sizeof(buf), "%" PRId64 ":%" PRId64 " %" PRIu64, major, minor, dw);
        snprintf(alt, sizeof(alt), "%" PRId64 ":%" PRId64 " %" PRIu64, major, minor,
                 oci_cgroup_blkio_weight_to_io_weight(dw));
        if ((r = writes_add(w, "io", "io.bfq.weight", buf, "io.weight", alt, false, err)) < 0)
            return r;
    }

    static const struct {
        const char *field, *key;
    } throttles[] = {
        {"throttleReadBpsDevice", "rbps"},
        {"throttleWriteBpsDevice", "wbps"},
        {"throttleReadIOPSDevice", "riops"},
        {"throttleWriteIOPSDevice", "wiops"},
    };
    for (size_t t = 0; t < ARRAY_SIZE(throttles); t++) {
        char tw[96];
        snprintf(tw, sizeof(tw), "%s.%s", where, throttles[t].field);
        if ((r = get_array(bio, throttles[t].field, where, &arr, err)) < 0)
            return r;
        for (size_t i = 0; arr && i < json_array_size(arr); i++) {
            json_t *d = json_array_get(arr, i);
            int64_t major, minor;
            uint64_t rate = 0;
            if ((r = device_numbers(d, tw, i, &major, &minor, err)) < 0)
                return r;
            char w2[128];
            snprintf(w2, sizeof(w2), "%s[%zu]", tw, i);
            if ((r = get_uint(d, "rate", w2, &rate, err)) < 0)
                return r;
            if (rate)
                snprintf(buf, sizeof(buf), "%" PRId64 ":%" PRId64 " %s=%" PRIu64, major, minor,
                         throttles[t].key, rate);
            else
                snprintf(buf, sizeof(buf), "%" PRId64 ":%" PRId64 " %s=max", major, minor,
                         throttles[t].key);
            if ((r = writes_add(w, "io", "io.max", buf, NULL, NULL, false, err)) < 0)
                return r;
        }
    }
    return 0;
}

/* "2MB", "1GB", "64KB": the kernel's hugetlb file names. */
static bool hugepage_size_valid(const char *s)
{
    size_t n = strlen(s), d = 0;
    while (d < n && isdigit((unsigned char)s[d]))
        d++;
    if (d == 0 || d > 6 || n != d + 2)
        return false;
    return strcmp(s + d, "KB") == 0 || strcmp(s + d, "MB") == 0 || strcmp(s + d, "GB") == 0;
}

static int convert_hugetlb(json_t *arr, struct cg_writes *w, struct err *err)
{
    static const char *const where = "linux.resources.hugepageLimits";
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *h = json_array_get(arr, i);
        char hw[96], file[64], buf[32];
        snprintf(hw, sizeof(hw), "%s[%zu]", where, i);
        if (!json_is_object(h))
            return err_set(err, EINVAL, "%s: must be an object", hw);
        json_t *ps = json_object_get(h, "pageSize");
        if (!json_is_string(ps) || !hugepage_size_valid(json_string_value(ps)))
            return err_set(err, EINVAL, "%s.pageSize: must be a size such as `2MB` or `1GB`", hw);
        uint64_t limit = 0;
        int r = get_uint(h, "limit", hw, &limit, err);
        if (r < 0)
            return r;
        if (r == 0)
            return err_set(err, EINVAL, "%s.limit: required", hw);
        snprintf(file, sizeof(file), "hugetlb.%s.max", json_string_value(ps));
        snprintf(buf, sizeof(buf), "%" PRIu64, limit);
        if ((r = writes_add(w, "hugetlb", file, buf, NULL, NULL, false, err)) < 0)
            return r;
        /* Reservations too where the kernel has them (5.7+), as runc. */
        snprintf(file, sizeof(file), "hugetlb.%s.rsvd.max", json_string_value(ps));
        if ((r = writes_add(w, "hugetlb", file, buf, NULL, NULL, true, err)) < 0)
            return r;
    }
    return 0;
}

static int convert_rdma(json_t *rdma, struct cg_writes *w, struct err *err)
{
    const char *dev;
    json_t *v;
    json_object_foreach(rdma, dev, v)
    {
        char rw[128], buf[128];
        snprintf(rw, sizeof(rw), "linux.resources.rdma.%.64s", dev);
        if (!dev[0] || strlen(dev) > 64 || strpbrk(dev, " \n/="))
            return err_set(err, EINVAL, "linux.resources.rdma: invalid device name `%.64s`", dev);
        if (!json_is_object(v))
            return err_set(err, EINVAL, "%s: must be an object", rw);
        uint64_t handles = 0, objects = 0;
        int rh = get_uint(v, "hcaHandles", rw, &handles, err);
        if (rh < 0)
            return rh;
        int ro = get_uint(v, "hcaObjects", rw, &objects, err);
        if (ro < 0)
            return ro;
        if (!rh && !ro)
            continue;
        int n = snprintf(buf, sizeof(buf), "%s", dev);
        if (rh)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, " hca_handle=%" PRIu64, handles);
        if (ro)
            snprintf(buf + n, sizeof(buf) - (size_t)n, " hca_object=%" PRIu64, objects);
        int r = writes_add(w, "rdma", "rdma.max", buf, NULL, NULL, false, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static int convert_unified(json_t *unified, struct cg_writes *w, struct err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(unified, key, v)
    {
        char ctrl[32];
        int r = oci_cgroup_unified_key_check(key, ctrl, sizeof(ctrl));
        if (r == -EPERM && strcmp(key, "cgroup.freeze") == 0)
            return err_set(err, EPERM,
                           "linux.resources.unified: `cgroup.freeze` is not a resource: pause "
                           "and resume the container instead");
        if (r == -EPERM)
            return err_set(err, EPERM, "linux.resources.unified: `%.64s` is not a resource", key);
        if (r < 0)
            return err_set(err, EINVAL,
                           "linux.resources.unified: invalid key `%.64s` (a cgroup file name "
                           "such as `memory.high`)",
                           key);
        if (!json_is_string(v))
            return err_set(err, EINVAL, "linux.resources.unified.%.64s: must be a string", key);
        if (json_string_length(v) > CG_MAX_VALUE ||
            strlen(json_string_value(v)) != json_string_length(v))
            return err_set(err, EINVAL, "linux.resources.unified.%.64s: invalid value", key);
        if ((r = writes_add(w, ctrl, key, json_string_value(v), NULL, NULL, false, err)) < 0)
            return r;
    }
    return 0;
}

int oci_cgroup_resources_convert(json_t *res, int64_t cur_memory_limit, struct cg_writes *ret,
                                 struct err *err)
{
    _cleanup_(oci_cgroup_writes_free) struct cg_writes w = {0};
    static const char *const where = "linux.resources";
    json_t *o;
    int r;

    if (!res || json_is_null(res)) {
        *ret = (struct cg_writes){0};
        return 0;
    }
    if (!json_is_object(res))
        return err_set(err, EINVAL, "%s: must be an object", where);

    /* cpuset first: memory and cpu settings may depend on it. */
    json_t *cpu;
    if ((r = get_obj(res, "cpu", where, &cpu, err)) < 0)
        return r;
    if (cpu && (r = convert_cpuset(cpu, &w, err)) < 0)
        return r;
    if ((r = get_obj(res, "blockIO", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_io(o, &w, err)) < 0)
        return r;
    if ((r = get_array(res, "hugepageLimits", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_hugetlb(o, &w, err)) < 0)
        return r;
    if ((r = get_obj(res, "memory", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_memory(o, cur_memory_limit, &w, err)) < 0)
        return r;
    if ((r = get_obj(res, "pids", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_pids(o, &w, err)) < 0)
        return r;
    if (cpu && (r = convert_cpu(cpu, &w, err)) < 0)
        return r;
    if ((r = get_obj(res, "rdma", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_rdma(o, &w, err)) < 0)
        return r;
    if ((r = get_obj(res, "network", where, &o, err)) < 0)
        return r;
    if (o && json_object_size(o) > 0 &&
        (r = warnings_add(&w, "network (classID, priorities) is cgroup v1 only: ignored", err)) < 0)
        return r;
    if ((r = get_obj(res, "unified", where, &o, err)) < 0)
        return r;
    if (o && (r = convert_unified(o, &w, err)) < 0)
        return r;

    *ret = w;
    w = (struct cg_writes){0};
    return 0;
}

/* ---- helpers for the executor ----------------------------------------------- */

int oci_cgroup_resources_with_devices(json_t *resources, json_t *linux_devices, json_t **ret,
                                      struct err *err)
{
    if (resources && !json_is_null(resources) && !json_is_object(resources))
        return err_set(err, EINVAL, "linux.resources: must be an object");
    if (linux_devices && !json_is_null(linux_devices) && !json_is_array(linux_devices))
        return err_set(err, EINVAL, "linux.devices: must be an array");
    json_t *copy = json_is_object(resources) ? json_deep_copy(resources) : json_object();
    if (!copy)
        return err_set(err, ENOMEM, "linux.resources");
    json_t *rules = json_object_get(copy, "devices");
    if (rules && !json_is_null(rules) && !json_is_array(rules)) {
        json_decref(copy);
        return err_set(err, EINVAL, "linux.resources.devices: must be an array");
    }
    if (!json_is_array(rules)) {
        rules = json_array();
        if (!rules || json_object_set_new(copy, "devices", rules) < 0) {
            json_decref(copy);
            return err_set(err, ENOMEM, "linux.resources");
        }
    }
    size_t n = json_is_array(linux_devices) ? json_array_size(linux_devices) : 0;
    if (n > CG_MAX_WRITES) {
        json_decref(copy);
        return err_set(err, E2BIG, "linux.devices: more than %d entries", CG_MAX_WRITES);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(linux_devices, i);
        const char *type = json_string_value(json_object_get(d, "type"));
        json_t *major = json_object_get(d, "major"), *minor = json_object_get(d, "minor");
        if (!type || !(strcmp(type, "c") == 0 || strcmp(type, "b") == 0 || strcmp(type, "u") == 0 ||
                       strcmp(type, "p") == 0)) {
            json_decref(copy);
            return err_set(err, EINVAL, "linux.devices[%zu].type: must be `c`, `b`, `u` or `p`", i);
        }
        if (strcmp(type, "p") == 0)
            continue; /* a FIFO is no device */
        if (!json_is_integer(major) || !json_is_integer(minor)) {
            json_decref(copy);
            return err_set(err, EINVAL, "linux.devices[%zu]: major and minor are required", i);
        }
        json_t *rule =
            json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type",
                      strcmp(type, "b") == 0 ? "b" : "c", "major", json_integer_value(major),
                      "minor", json_integer_value(minor), "access", "rwm");
        if (!rule || json_array_append_new(rules, rule) < 0) {
            json_decref(copy);
            return err_set(err, ENOMEM, "linux.resources");
        }
    }
    *ret = copy;
    return 0;
}

json_t *oci_cgroup_features(void)
{
    return json_pack("{s:b, s:b, s:b, s:b, s:b}", "v1", 0, "v2", 1, "systemd", 0, "systemdUser", 0,
                     "rdma", 1);
}
