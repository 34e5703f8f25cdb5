/* oci/cgroup: cgroup v2 for containers (internal to src/oci).
 *
 * Finds the cgroup2 mount wherever it is (/sys/fs/cgroup on unified hosts,
 * /sys/fs/cgroup/unified on hybrid ones), creates the container's cgroup from
 * the OCI `linux.cgroupsPath`, applies `linux.resources` (cpu, cpuset, memory,
 * pids, io, hugetlb, unified, and devices through an eBPF cgroup device
 * program) and offers freeze, kill and listing. Where a controller is not
 * available the container still runs: that limit is skipped and one warning
 * (through log_warn) says so. Blocking: call from the CLI or a child, never
 * from the event loop. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "base/base.h"

struct oci_cgroup;

/* Creates (or reuses, when it already exists and is empty) the cgroup for
 * `cgroups_path` (absolute below the cgroup2 root, or relative to kinglet's
 * default parent; NULL/"" gives "<default parent>/<id>") and applies
 * `resources` (the OCI linux.resources object; may be NULL). Controllers are
 * enabled in every parent's cgroup.subtree_control where they exist.
 *
 * A device program is always attached, as runc does: devices are denied by
 * default, the usual ones (null, zero, full, random, urandom, tty, console,
 * ptmx, pts, net/tun, mknod of any) allowed, and linux.resources.devices
 * decides the rest (the last matching rule wins); for the nodes of
 * `linux.devices` pass oci_cgroup_resources_with_devices()'s result.
 *
 * Errors: EINVAL (cgroupsPath or resources; the message names the field),
 * EBUSY (the cgroup already has processes), ENOENT (no cgroup2 mount), or
 * the kernel's errno for a value it refuses (the message names the file).
 * On failure a cgroup that this call created is removed again. */
int oci_cgroup_create(const char *cgroups_path, const char *id, json_t *resources,
                      struct oci_cgroup **ret, struct err *err);
/* Opens an existing container cgroup by the absolute path that
 * oci_cgroup_path() returned earlier (kept in the container's state). */
int oci_cgroup_open(const char *abs_path, struct oci_cgroup **ret, struct err *err);
/* Moves pid into the cgroup. */
int oci_cgroup_enter(struct oci_cgroup *cg, pid_t pid, struct err *err);
/* Re-applies resources (`kinglet oci update`); the device program is
 * replaced only when `devices` is given. memory.checkBeforeUpdate refuses
 * (EBUSY) a limit below the current usage. */
int oci_cgroup_update(struct oci_cgroup *cg, json_t *resources, struct err *err);
/* cgroup.freeze, waiting until the kernel reports the new state. */
int oci_cgroup_freeze(struct oci_cgroup *cg, bool frozen, struct err *err);
/* Sends sig to every process in the cgroup and in the cgroups below it
 * (cgroup.kill for SIGKILL; other signals while frozen, so that nothing
 * forks past the list). A paused cgroup stays paused. */
int oci_cgroup_kill(struct oci_cgroup *cg, int sig, struct err *err);
/* Lists the pids in the cgroup and below it; *ret is malloc'd. */
int oci_cgroup_pids(struct oci_cgroup *cg, pid_t **ret, size_t *ret_n, struct err *err);
/* Reads memory.events: oom_kill count (0 when the file is missing). */
int oci_cgroup_oom_kills(struct oci_cgroup *cg, uint64_t *ret, struct err *err);
/* Removes the cgroup and any cgroups below it, once their processes are
 * gone (waits up to 10 s for killed ones to leave, then EBUSY). Idempotent:
 * a missing cgroup is success. */
int oci_cgroup_destroy(struct oci_cgroup *cg, struct err *err);
/* A directory fd of the cgroup (O_RDONLY|O_DIRECTORY, close-on-exec; usable
 * for clone3 CLONE_INTO_CGROUP and openat). Owned by cg. */
int oci_cgroup_fd(struct oci_cgroup *cg);
const char *oci_cgroup_path(struct oci_cgroup *cg);
void oci_cgroup_free(struct oci_cgroup *cg);

/* Returns a copy of `resources` (may be NULL) whose `devices` rules end with
 * an allow rule ("rwm") for every entry of the spec's `linux.devices`, so
 * that the devices the runtime creates in the container's /dev can be used,
 * as runc does. Pass the result to oci_cgroup_create. Errors name the
 * field. */
int oci_cgroup_resources_with_devices(json_t *resources, json_t *linux_devices, json_t **ret,
                                      struct err *err);
/* The `linux.cgroup` object of `kinglet oci features` (OCI features.md):
 * v2, no v1, no systemd, rdma. */
json_t *oci_cgroup_features(void);

/* Usage figures for ContainerStats and `kinglet oci events --stats`. CPU
 * times come from cpu.stat, which cgroup2 keeps even without the cpu
 * controller (hybrid hosts); memory and pids only where their controller
 * is enabled (has_memory, has_pids); pressure (PSI) where the kernel
 * exposes it (has_psi). The working set is memory.current minus
 * inactive_file, as kubelet and cAdvisor count it; rss is memory.stat's
 * anon. processes counts cgroup.procs here and below, controllers or not. */
struct oci_psi {
    uint64_t some_total, full_total; /* microseconds */
    double some_avg[3], full_avg[3]; /* avg10, avg60, avg300 */
};
struct oci_cgroup_stats {
    uint64_t cpu_usage_usec, cpu_user_usec, cpu_system_usec;
    /* With the cpu controller: cpu.stat's CFS figures and the cpu.weight and
     * cpu.max settings (quota UINT64_MAX: "max"). */
    bool has_cpu;
    uint64_t cfs_periods, cfs_throttled, cfs_throttled_usec;
    uint64_t cpu_weight, cpu_quota, cpu_period;
    bool has_memory;
    uint64_t memory_current, memory_working_set, memory_max; /* max: UINT64_MAX */
    uint64_t memory_rss, pgfault, pgmajfault;
    /* memory.stat's file, file_mapped and kernel (has_kernel: the kernel
     * has that key, 5.18+), memory.min, memory.events' max (the times
     * usage hit memory.max, cgroup v1's failcnt) and memory.peak (5.19+,
     * has_peak). */
    uint64_t memory_file, memory_mapped, memory_kernel, memory_min, memory_events_max;
    bool has_kernel, has_peak;
    uint64_t memory_peak;
    bool has_swap;
    uint64_t swap_current, swap_max; /* max: UINT64_MAX */
    uint64_t oom_kills;
    bool has_pids;
    uint64_t pids_current, pids_max; /* max: UINT64_MAX */
    uint64_t processes;
    bool has_psi[3]; /* cpu, memory, io */
    struct oci_psi psi[3];
};
/* Parses a pressure file ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0"
 * and a "full" line); -EINVAL for anything else (pure). */
int oci_psi_parse(const char *text, struct oci_psi *ret);
int oci_cgroup_stats(struct oci_cgroup *cg, struct oci_cgroup_stats *ret, struct err *err);
