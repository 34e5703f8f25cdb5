/* The cAdvisor metrics of ListMetricDescriptors and ListPodSandboxMetrics.
 *
 * kubelet (PodAndContainerStatsFromCRI) serves these at /metrics/cadvisor
 * in place of cAdvisor's own, so they carry cAdvisor's names, help texts,
 * types and label keys (metrics/prometheus.go), with the base labels id,
 * name and image that CRI-O uses. The CRI carries whole numbers only:
 * seconds are whole seconds, as CRI-O sends them.
 *
 * A metric comes only where the host gives its value: a hybrid host (no
 * cgroup v2 controllers) has CPU times and PSI in cgroup2 and memory from
 * the processes' own figures, but no page cache, limits or CFS figures;
 * those metrics are then absent, not zero. A pod's own metrics are its
 * network interfaces' counters (named "POD", as CRI-O does); everything
 * else is per container. */
#include <assert.h>
#include <string.h>

#include "cri/stats.h"

enum labels { L_BASE, L_CPU, L_FAILURE, L_DEVICE, L_IFACE, L_ULIMIT };

enum metric_id {
    M_LAST_SEEN,
    M_START_TIME,
    M_CREATION_TIME,
    M_CPU_USER,
    M_CPU_SYSTEM,
    M_CPU_USAGE,
    M_CFS_PERIODS,
    M_CFS_THROTTLED_PERIODS,
    M_CFS_THROTTLED_SECONDS,
    M_MEM_CACHE,
    M_MEM_RSS,
    M_MEM_KERNEL,
    M_MEM_MAPPED,
    M_MEM_SWAP,
    M_MEM_FAILCNT,
    M_MEM_USAGE,
    M_MEM_MAX_USAGE,
    M_MEM_WORKING_SET,
    M_MEM_FAILURES,
    M_OOM,
    M_FS_INODES_FREE,
    M_FS_INODES_TOTAL,
    M_FS_LIMIT,
    M_FS_USAGE,
    M_PROCESSES,
    M_FDS,
    M_SOCKETS,
    M_THREADS,
    M_THREADS_MAX,
    M_ULIMITS_SOFT,
    M_PSI_CPU_STALLED,
    M_PSI_CPU_WAITING,
    M_PSI_MEM_STALLED,
    M_PSI_MEM_WAITING,
    M_PSI_IO_STALLED,
    M_PSI_IO_WAITING,
    M_SPEC_MEM_LIMIT,
    M_SPEC_MEM_RESERVATION,
    M_SPEC_MEM_SWAP,
    M_SPEC_CPU_SHARES,
    M_SPEC_CPU_QUOTA,
    M_SPEC_CPU_PERIOD,
    M_NET_RX_BYTES,
    M_NET_RX_PACKETS,
    M_NET_RX_DROPPED,
    M_NET_RX_ERRORS,
    M_NET_TX_BYTES,
    M_NET_TX_PACKETS,
    M_NET_TX_DROPPED,
    M_NET_TX_ERRORS,
    M_COUNT
};

static const struct {
    const char *name, *help;
    enum labels labels;
    bool counter;
} defs[M_COUNT] = {
    [M_LAST_SEEN] = {"container_last_seen", "Last time a container was seen by the exporter",
                     L_BASE, false},
    [M_START_TIME] = {"container_start_time_seconds",
                      "Start time of the container since unix epoch in seconds.", L_BASE, false},
    [M_CREATION_TIME] = {"container_creation_time_seconds",
                         "Container creation time since unix epoch in seconds.", L_BASE, false},
    [M_CPU_USER] = {"container_cpu_user_seconds_total",
                    "Cumulative user cpu time consumed in seconds.", L_BASE, true},
    [M_CPU_SYSTEM] = {"container_cpu_system_seconds_total",
                      "Cumulative system cpu time consumed in seconds.", L_BASE, true},
    [M_CPU_USAGE] = {"container_cpu_usage_seconds_total",
                     "Cumulative cpu time consumed in seconds.", L_CPU, true},
    [M_CFS_PERIODS] = {"container_cpu_cfs_periods_total",
                       "Number of elapsed enforcement period intervals.", L_BASE, true},
    [M_CFS_THROTTLED_PERIODS] = {"container_cpu_cfs_throttled_periods_total",
                                 "Number of throttled period intervals.", L_BASE, true},
    [M_CFS_THROTTLED_SECONDS] = {"container_cpu_cfs_throttled_seconds_total",
                                 "Total time duration the container has been throttled.", L_BASE,
                                 true},
    [M_MEM_CACHE] = {"container_memory_cache", "Number of bytes of page cache memory.", L_BASE,
                     false},
    [M_MEM_RSS] = {"container_memory_rss", "Size of RSS in bytes.", L_BASE, false},
    [M_MEM_KERNEL] = {"container_memory_kernel_usage", "Size of kernel memory allocated in bytes.",
                      L_BASE, false},
    [M_MEM_MAPPED] = {"container_memory_mapped_file", "Size of memory mapped files in bytes.",
                      L_BASE, false},
    [M_MEM_SWAP] = {"container_memory_swap", "Container swap usage in bytes.", L_BASE, false},
    [M_MEM_FAILCNT] = {"container_memory_failcnt", "Number of memory usage hits limits", L_BASE,
                       true},
    [M_MEM_USAGE] = {"container_memory_usage_bytes",
                     "Current memory usage in bytes, including all memory regardless of when it "
                     "was accessed",
                     L_BASE, false},
    [M_MEM_MAX_USAGE] = {"container_memory_max_usage_bytes",
                         "Maximum memory usage recorded in bytes", L_BASE, false},
    [M_MEM_WORKING_SET] = {"container_memory_working_set_bytes", "Current working set in bytes.",
                           L_BASE, false},
    [M_MEM_FAILURES] = {"container_memory_failures_total",
                        "Cumulative count of memory allocation failures.", L_FAILURE, true},
    [M_OOM] = {"container_oom_events_total",
               "Count of out of memory events observed for the container", L_BASE, true},
    [M_FS_INODES_FREE] = {"container_fs_inodes_free", "Number of available Inodes", L_DEVICE,
                          false},
    [M_FS_INODES_TOTAL] = {"container_fs_inodes_total", "Number of Inodes", L_DEVICE, false},
    [M_FS_LIMIT] = {"container_fs_limit_bytes",
                    "Number of bytes that can be consumed by the container on this filesystem.",
                    L_DEVICE, false},
    [M_FS_USAGE] = {"container_fs_usage_bytes",
                    "Number of bytes that are consumed by the container on this filesystem.",
                    L_DEVICE, false},
    [M_PROCESSES] = {"container_processes", "Number of processes running inside the container.",
                     L_BASE, false},
    [M_FDS] = {"container_file_descriptors", "Number of open file descriptors for the container.",
               L_BASE, false},
    [M_SOCKETS] = {"container_sockets", "Number of open sockets for the container.", L_BASE, false},
    [M_THREADS] = {"container_threads", "Number of threads running inside the container", L_BASE,
                   false},
    [M_THREADS_MAX] = {"container_threads_max",
                       "Maximum number of threads allowed inside the container, infinity if value "
                       "is zero",
                       L_BASE, false},
    [M_ULIMITS_SOFT] = {"container_ulimits_soft",
                        "Soft ulimit values for the container root process. Unlimited if -1, "
                        "except priority and nice",
                        L_ULIMIT, false},
    [M_PSI_CPU_STALLED] = {"container_pressure_cpu_stalled_seconds_total",
                           "Total time duration no tasks in the container could make progress due "
                           "to CPU congestion.",
                           L_BASE, true},
    [M_PSI_CPU_WAITING] = {"container_pressure_cpu_waiting_seconds_total",
                           "Total time duration tasks in the container have waited due to CPU "
                           "congestion.",
                           L_BASE, true},
    [M_PSI_MEM_STALLED] = {"container_pressure_memory_stalled_seconds_total",
                           "Total time duration no tasks in the container could make progress due "
                           "to memory congestion.",
                           L_BASE, true},
    [M_PSI_MEM_WAITING] = {"container_pressure_memory_waiting_seconds_total",
                           "Total time duration tasks in the container have waited due to memory "
                           "congestion.",
                           L_BASE, true},
    [M_PSI_IO_STALLED] = {"container_pressure_io_stalled_seconds_total",
                          "Total time duration no tasks in the container could make progress due "
                          "to IO congestion.",
                          L_BASE, true},
    [M_PSI_IO_WAITING] = {"container_pressure_io_waiting_seconds_total",
                          "Total time duration tasks in the container have waited due to IO "
                          "congestion.",
                          L_BASE, true},
    [M_SPEC_MEM_LIMIT] = {"container_spec_memory_limit_bytes", "Memory limit for the container.",
                          L_BASE, false},
    [M_SPEC_MEM_RESERVATION] = {"container_spec_memory_reservation_limit_bytes",
                                "Memory reservation limit for the container.", L_BASE, false},
    [M_SPEC_MEM_SWAP] = {"container_spec_memory_swap_limit_bytes",
                         "Memory swap limit for the container.", L_BASE, false},
    [M_SPEC_CPU_SHARES] = {"container_spec_cpu_shares", "CPU share of the container.", L_BASE,
                           false},
    [M_SPEC_CPU_QUOTA] = {"container_spec_cpu_quota", "CPU quota of the container.", L_BASE, false},
    [M_SPEC_CPU_PERIOD] = {"container_spec_cpu_period", "CPU period of the container.", L_BASE,
                           false},
    [M_NET_RX_BYTES] = {"container_network_receive_bytes_total",
                        "Cumulative count of bytes received", L_IFACE, true},
    [M_NET_RX_PACKETS] = {"container_network_receive_packets_total",
                          "Cumulative count of packets received", L_IFACE, true},
    [M_NET_RX_DROPPED] = {"container_network_receive_packets_dropped_total",
                          "Cumulative count of packets dropped while receiving", L_IFACE, true},
    [M_NET_RX_ERRORS] = {"container_network_receive_errors_total",
                         "Cumulative count of errors encountered while receiving", L_IFACE, true},
    [M_NET_TX_BYTES] = {"container_network_transmit_bytes_total",
                        "Cumulative count of bytes transmitted", L_IFACE, true},
    [M_NET_TX_PACKETS] = {"container_network_transmit_packets_total",
                          "Cumulative count of packets transmitted", L_IFACE, true},
    [M_NET_TX_DROPPED] = {"container_network_transmit_packets_dropped_total",
                          "Cumulative count of packets dropped while transmitting", L_IFACE, true},
    [M_NET_TX_ERRORS] = {"container_network_transmit_errors_total",
                         "Cumulative count of errors encountered while transmitting", L_IFACE,
                         true},
};

static const struct {
    const char *keys[5];
    size_t n;
} label_sets[] = {
    [L_BASE] = {{"id", "name", "image"}, 3},
    [L_CPU] = {{"id", "name", "image", "cpu"}, 4},
    [L_FAILURE] = {{"id", "name", "image", "failure_type", "scope"}, 5},
    [L_DEVICE] = {{"id", "name", "image", "device"}, 4},
    [L_IFACE] = {{"id", "name", "image", "interface"}, 4},
    [L_ULIMIT] = {{"id", "name", "image", "ulimit"}, 4},
};

/* The four values of container_memory_failures_total. */
#define FAILURE_VALUES 4

size_t cri_metrics_ctr_max(void) { return M_COUNT + FAILURE_VALUES; }

size_t cri_metrics_pod_max(void) { return (M_NET_TX_ERRORS - M_NET_RX_BYTES + 1) * STATS_IFACES; }

void cri_list_metric_descriptors(struct cri_call *call)
{
    Runtime__V1__MetricDescriptor d[M_COUNT], *dp[M_COUNT];
    for (size_t i = 0; i < M_COUNT; i++) {
        runtime__v1__metric_descriptor__init(&d[i]);
        d[i].name = (char *)defs[i].name;
        d[i].help = (char *)defs[i].help;
        d[i].label_keys = (char **)label_sets[defs[i].labels].keys;
        d[i].n_label_keys = label_sets[defs[i].labels].n;
        dp[i] = &d[i];
    }
    Runtime__V1__ListMetricDescriptorsResponse resp =
        RUNTIME__V1__LIST_METRIC_DESCRIPTORS_RESPONSE__INIT;
    resp.descriptors = dp;
    resp.n_descriptors = M_COUNT;
    cri_reply(call, &resp.base);
}

struct emitter {
    const struct sample *s;
    const char *base[3];
    struct metric_msg *out;
    Runtime__V1__Metric **ptrs;
    size_t n;
};

static void emit(struct emitter *e, enum metric_id id, uint64_t value, const char *x1,
                 const char *x2)
{
    struct metric_msg *m = &e->out[e->n];
    runtime__v1__metric__init(&m->m);
    runtime__v1__uint64_value__init(&m->v);
    m->m.name = (char *)defs[id].name;
    m->m.timestamp = (int64_t)e->s->ts;
    m->m.metric_type =
        defs[id].counter ? RUNTIME__V1__METRIC_TYPE__COUNTER : RUNTIME__V1__METRIC_TYPE__GAUGE;
    size_t n = 0;
    for (; n < 3; n++)
        m->labels[n] = (char *)e->base[n];
    if (x1)
        m->labels[n++] = (char *)x1;
    if (x2)
        m->labels[n++] = (char *)x2;
    assert(n == label_sets[defs[id].labels].n);
    m->m.label_values = m->labels;
    m->m.n_label_values = n;
    m->v.value = value;
    m->m.value = &m->v;
    e->ptrs[e->n++] = &m->m;
}

static void emit_if(struct emitter *e, bool have, enum metric_id id, uint64_t value)
{
    if (have)
        emit(e, id, value, NULL, NULL);
}

#define USEC 1000000ull
#define NSEC 1000000000ull

/* cAdvisor's cpu.weight to shares (runc's linear mapping, inverted). */
static uint64_t weight_to_shares(uint64_t w)
{
    return w >= 1 && w <= 10000 ? 2 + ((w - 1) * 262142) / 9999 : 0;
}

/* A limit as cAdvisor shows it: 0 for none. */
static uint64_t limit(uint64_t v) { return v == UINT64_MAX ? 0 : v; }

size_t cri_metrics_ctr(const struct container *c, const struct sample *s, struct metric_msg *out,
                       Runtime__V1__Metric **ptrs)
{
    struct emitter e = {.s = s, .out = out, .ptrs = ptrs};
    e.base[0] = c->rec.id;
    e.base[1] = c->config->metadata->name;
    e.base[2] = c->rec.image_ref ? c->rec.image_ref : "";
    const struct oci_cgroup_stats *st = &s->cg;
    bool ok = s->ok, mem = ok && st->has_memory, cpu = ok && st->has_cpu;
    bool quota = cpu && st->cpu_quota != UINT64_MAX;

    emit(&e, M_LAST_SEEN, s->ts / NSEC, NULL, NULL);
    emit_if(&e, c->rec.started_ns, M_START_TIME, c->rec.started_ns / NSEC);
    emit_if(&e, c->rec.created_ns, M_CREATION_TIME, c->rec.created_ns / NSEC);

    emit_if(&e, ok, M_CPU_USER, st->cpu_user_usec / USEC);
    emit_if(&e, ok, M_CPU_SYSTEM, st->cpu_system_usec / USEC);
    if (ok)
        emit(&e, M_CPU_USAGE, st->cpu_usage_usec / USEC, "total", NULL);
    /* as cAdvisor: the CFS figures of a container with a quota */
    emit_if(&e, quota, M_CFS_PERIODS, st->cfs_periods);
    emit_if(&e, quota, M_CFS_THROTTLED_PERIODS, st->cfs_throttled);
    emit_if(&e, quota, M_CFS_THROTTLED_SECONDS, st->cfs_throttled_usec / USEC);

    emit_if(&e, mem, M_MEM_CACHE, st->memory_file);
    emit_if(&e, ok, M_MEM_RSS, st->memory_rss);
    emit_if(&e, mem && st->has_kernel, M_MEM_KERNEL, st->memory_kernel);
    emit_if(&e, mem, M_MEM_MAPPED, st->memory_mapped);
    emit_if(&e, ok && st->has_swap, M_MEM_SWAP, st->swap_current);
    emit_if(&e, mem, M_MEM_FAILCNT, st->memory_events_max);
    emit_if(&e, ok, M_MEM_USAGE, mem ? st->memory_current : st->memory_working_set);
    emit_if(&e, mem && st->has_peak, M_MEM_MAX_USAGE, st->memory_peak);
    emit_if(&e, ok, M_MEM_WORKING_SET, st->memory_working_set);
    if (ok) {
        /* cgroup v2 counts faults for the whole subtree: both scopes */
        emit(&e, M_MEM_FAILURES, st->pgfault, "pgfault", "container");
        emit(&e, M_MEM_FAILURES, st->pgmajfault, "pgmajfault", "container");
        emit(&e, M_MEM_FAILURES, st->pgfault, "pgfault", "hierarchy");
        emit(&e, M_MEM_FAILURES, st->pgmajfault, "pgmajfault", "hierarchy");
    }
    emit_if(&e, mem, M_OOM, st->oom_kills);

    const struct fs_sample *fs = s->fs;
    if (fs && fs->ok) {
        const char *dev = fs->device;
        emit(&e, M_FS_INODES_FREE, fs->inodes_free, dev, NULL);
        emit(&e, M_FS_INODES_TOTAL, fs->inodes_total, dev, NULL);
        emit(&e, M_FS_LIMIT, fs->limit_bytes, dev, NULL);
        if (c->du_ns)
            emit(&e, M_FS_USAGE, c->du_bytes, dev, NULL);
    }

    emit_if(&e, ok, M_PROCESSES, st->processes);
    emit_if(&e, s->pr.ok, M_FDS, s->pr.fds);
    emit_if(&e, s->pr.ok, M_SOCKETS, s->pr.sockets);
    /* pids.current counts tasks, threads included; without the pids
     * controller the processes' own thread counts */
    if (ok && st->has_pids)
        emit(&e, M_THREADS, st->pids_current, NULL, NULL);
    else
        emit_if(&e, s->pr.ok, M_THREADS, s->pr.threads);
    emit_if(&e, ok && st->has_pids, M_THREADS_MAX, limit(st->pids_max));
    if (s->pr.has_nofile)
        emit(&e, M_ULIMITS_SOFT, s->pr.nofile_soft, "max_open_files", NULL);

    static const enum metric_id psi[3][2] = {{M_PSI_CPU_STALLED, M_PSI_CPU_WAITING},
                                             {M_PSI_MEM_STALLED, M_PSI_MEM_WAITING},
                                             {M_PSI_IO_STALLED, M_PSI_IO_WAITING}};
    for (size_t i = 0; i < 3; i++) {
        emit_if(&e, ok && st->has_psi[i], psi[i][0], st->psi[i].full_total / USEC);
        emit_if(&e, ok && st->has_psi[i], psi[i][1], st->psi[i].some_total / USEC);
    }

    emit_if(&e, mem, M_SPEC_MEM_LIMIT, limit(st->memory_max));
    emit_if(&e, mem, M_SPEC_MEM_RESERVATION, st->memory_min);
    emit_if(&e, mem && st->has_swap, M_SPEC_MEM_SWAP, limit(st->swap_max));
    emit_if(&e, cpu, M_SPEC_CPU_SHARES, weight_to_shares(st->cpu_weight));
    emit_if(&e, quota, M_SPEC_CPU_QUOTA, st->cpu_quota);
    emit_if(&e, cpu, M_SPEC_CPU_PERIOD, st->cpu_period);
    assert(e.n <= cri_metrics_ctr_max());
    return e.n;
}

size_t cri_metrics_pod(const struct sandbox *sb, const struct sample *s, struct metric_msg *out,
                       Runtime__V1__Metric **ptrs)
{
    struct emitter e = {.s = s, .out = out, .ptrs = ptrs};
    e.base[0] = sb->rec.id;
    e.base[1] = "POD";
    e.base[2] = "";
    for (size_t f = 0; f < s->n_ifaces; f++) {
        const struct iface *i = &s->ifaces[f];
        const uint64_t v[] = {i->rx_bytes, i->rx_packets, i->rx_dropped, i->rx_errors,
                              i->tx_bytes, i->tx_packets, i->tx_dropped, i->tx_errors};
        for (size_t k = 0; k < ARRAY_SIZE(v); k++)
            emit(&e, (enum metric_id)(M_NET_RX_BYTES + k), v[k], i->name, NULL);
    }
    return e.n;
}
