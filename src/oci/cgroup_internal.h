/* oci/cgroup_internal.h: the pure parts of oci/cgroup (value conversion,
 * paths, the device program), private to src/oci and its unit tests.
 *
 * cgroup_resources.c turns the OCI `linux.resources` object into a list of
 * cgroup v2 file writes without touching the file system; cgroup.c applies
 * that list; bpf_devices.c turns `linux.resources.devices` into an eBPF
 * BPF_PROG_TYPE_CGROUP_DEVICE program and attaches it. */
#pragma once

#include <jansson.h>
#include <linux/bpf.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* Limits on what a spec can make us allocate. */
#define CG_MAX_WRITES       4096
#define CG_MAX_DEVICE_RULES 1024
#define CG_MAX_VALUE        4096
#define CG_MAX_PATH         4096
#define CG_DEFAULT_PARENT   "kinglet"

/* One write of `value` into the cgroup file `file`. `controller` names the
 * controller that must be enabled for the file to exist ("" for the core
 * cgroup.* files). When `file` does not exist and `alt_file` is set, the
 * alternative is written instead (io.bfq.weight, else io.weight). A missing
 * `optional` file is skipped with a warning (memory.swap.max without swap
 * accounting). */
struct cg_write {
    char controller[32];
    char *file;
    char *value;
    char *alt_file;
    char *alt_value;
    bool optional;
};

struct cg_writes {
    struct cg_write *v;
    size_t n;
    /* Settings that cgroup v2 cannot express, each a message for one
     * warning (disableOOMKiller, swappiness, network...). */
    char **warnings;
    size_t n_warnings;
};

/* Converts `resources` (may be NULL or JSON null) to writes, in the order
 * they must be applied (cpuset, io, hugetlb, memory, pids, cpu, rdma,
 * unified last so that it overrides). `cur_memory_limit` is the current
 * memory.max (-1 for max, 0 unknown) for an update that sets swap alone.
 * Devices are not converted here (see oci_cgroup_devices_parse). Errors name
 * the field, e.g. `linux.resources.memory.swap`. */
int oci_cgroup_resources_convert(json_t *resources, int64_t cur_memory_limit, struct cg_writes *ret,
                                 struct err *err);
void oci_cgroup_writes_free(struct cg_writes *w);

/* runc's conversions. */
uint64_t oci_cgroup_cpu_shares_to_weight(uint64_t shares);
uint64_t oci_cgroup_blkio_weight_to_io_weight(uint64_t weight);
/* OCI swap is memory+swap; v2 memory.swap.max is swap alone. *ret: -1 =
 * "max", 0 = leave unset (unless swap == memory: then 0 is written), else
 * bytes. -EINVAL for impossible combinations. */
int oci_cgroup_memory_swap_to_v2(int64_t swap, int64_t memory, int64_t *ret);

/* Validates a key of `linux.resources.unified` (a file name inside the
 * cgroup: no path separator, no leading dot, "<controller>.<name>") and
 * returns its controller in ctrl ("" for cgroup.*). */
int oci_cgroup_unified_key_check(const char *key, char *ctrl, size_t ctrl_size);

/* Finds the cgroup2 mount point in the text of /proc/self/mountinfo.
 * -ENOENT when there is none. */
int oci_cgroup_mountinfo_find(const char *mountinfo, char **ret);
/* The cgroup's path relative to the cgroup2 root ("kinglet/x", "a/b"),
 * from the OCI cgroupsPath (absolute: below the root; relative: below
 * kinglet's default parent; NULL/"": default parent/id). The systemd
 * "slice:prefix:name" form is refused (there is no systemd). */
int oci_cgroup_path_resolve(const char *cgroups_path, const char *id, char **ret, struct err *err);

/* ---- devices -------------------------------------------------------------- */

/* One `linux.resources.devices` rule. type 'a' (all), 'c' or 'b'; major and
 * minor -1 for any; access a mask of BPF_DEVCG_ACC_*. */
struct oci_dev_rule {
    bool allow;
    char type;
    int64_t major, minor;
    uint32_t access;
};

/* Parses the devices array and appends the devices every container may
 * use (null, zero, full, random, urandom, tty, console, ptmx, pts, tun,
 * mknod of any device), as runc and crun do. The rules are in spec order:
 * the last matching rule wins. */
int oci_cgroup_devices_parse(json_t *devices, struct oci_dev_rule **ret, size_t *ret_n,
                             struct err *err);

/* Builds the BPF_PROG_TYPE_CGROUP_DEVICE program: for a request, the last
 * rule that matches decides; an allow rule matches when it grants every
 * requested access, a deny rule when it refuses any of them; no match
 * denies. */
int oci_bpf_devices_build(const struct oci_dev_rule *rules, size_t n, struct bpf_insn **ret,
                          size_t *ret_n, struct err *err);
/* Loads the program and attaches it to the cgroup directory fd (opened
 * O_RDONLY): the new program is attached with BPF_F_ALLOW_MULTI and then
 * every program attached earlier is detached, so that there is never a
 * moment without a filter (runc's replace semantics). */
int oci_bpf_devices_apply(int cgroup_dirfd, const struct bpf_insn *insns, size_t n,
                          struct err *err);
