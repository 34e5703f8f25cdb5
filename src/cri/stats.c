/* Stats and metrics: ContainerStats, ListContainerStats, PodSandboxStats,
 * ListPodSandboxStats, ListMetricDescriptors, ListPodSandboxMetrics.
 *
 * kubelet's summary API and its eviction manager read these, so they must
 * be right. Every figure comes from a worker that reads the cgroup files
 * (src/oci/cgroup.c) of the containers and pods asked for, the writable
 * layers' usage (du, cached for STATS_DU_TTL_NS per container, since a
 * layer may hold many files) and, for pods, the counters of the pod's
 * network interfaces, read in the pod's network namespace by a short-lived
 * thread (a thread's network namespace is its own; the thread ends rather
 * than switching back). The loop keeps the previous CPU sample of each
 * container and pod, to turn cumulative CPU time into usage_nano_cores.
 * For ListPodSandboxMetrics the worker also reads, per container, the
 * processes' threads, descriptors and sockets in /proc and the filesystem
 * of the writable layers; metrics.c makes the cAdvisor metrics of it.
 * A container decides how many processes and descriptors it has: a worker
 * reads at most STATS_PROCS_MAX and STATS_FDS_MAX of them per container,
 * and stats jobs run one at a time (run()), so scrapes never fill the
 * thread pool that creates and pulls need.
 *
 * Hosts without cgroup v2 controllers (hybrid): cpu.stat is there anyway;
 * memory comes from the processes themselves (the sum of their resident
 * sets and page faults), which is what the host can measure. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cri/stats.h"

#define STATS_DU_TTL_NS (10ull * 1000000000ull)
/* A container decides how many processes and descriptors it has: a worker
 * looks at no more than these per container (a process reads two /proc
 * files, a descriptor one readlink), so that one container cannot make a
 * scrape last as long as it likes. Past the cap the figures are lower
 * bounds: memory from the processes (hybrid hosts), threads, descriptors
 * and sockets count the first ones only. */
#define STATS_PROCS_MAX 4096
#define STATS_FDS_MAX   4096

static void sample_clear(struct sample *s)
{
    if (s->refs)
        cri_cursor_close(s->refs, &s->ref);
    free(s->cgroup);
    free(s->layer);
    free(s->netns);
}

/* ---- measuring (workers) ---- */

/* A number after `key` in a /proc text ("\nVmRSS:\t  123 kB"). */
static bool proc_value(const char *text, const char *key, uint64_t *ret)
{
    const char *p = strstr(text, key);
    if (!p)
        return false;
    p += strlen(key);
    while (*p == ' ' || *p == '\t')
        p++;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return false;
    *ret = v;
    return true;
}

/* Open descriptors of one process, and how many of them are sockets, added
 * to *fds and *sockets while *fds is under STATS_FDS_MAX. */
static void count_fds(pid_t pid, uint64_t *fds, uint64_t *sockets)
{
    if (*fds >= STATS_FDS_MAX)
        return;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while (*fds < STATS_FDS_MAX && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        (*fds)++;
        char link[32];
        ssize_t n = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            *sockets += str_has_prefix(link, "socket:");
        }
    }
    closedir(d);
}

/* What the processes of the cgroup (and below) tell in /proc: their memory
 * where the cgroup has no memory controller (resident sets and page
 * faults: what a hybrid host can measure) and, for metrics, threads, open
 * descriptors and sockets, and the soft RLIMIT_NOFILE of the init. */
static void procs_measure(struct oci_cgroup *cg, struct sample *s)
{
    struct oci_cgroup_stats *st = &s->cg;
    bool memory = !st->has_memory;
    if (!memory && !s->metrics)
        return;
    _cleanup_free_ pid_t *pids = NULL;
    size_t n = 0;
    struct err e = {0};
    if (oci_cgroup_pids(cg, &pids, &n, &e) < 0)
        return;
    s->pr.ok = s->metrics;
    for (size_t i = 0; i < n && i < STATS_PROCS_MAX; i++) {
        char f[64];
        _cleanup_free_ char *status = NULL, *stat = NULL;
        snprintf(f, sizeof(f), "/proc/%d/status", (int)pids[i]);
        if (read_file_at(AT_FDCWD, f, 1 << 16, &status, NULL) == 0) {
            uint64_t v;
            if (memory && proc_value(status, "\nVmRSS:", &v))
                st->memory_working_set += v * 1024;
            if (memory && proc_value(status, "\nRssAnon:", &v))
                st->memory_rss += v * 1024;
            if (s->metrics && proc_value(status, "\nThreads:", &v))
                s->pr.threads += v;
        }
        if (s->metrics)
            count_fds(pids[i], &s->pr.fds, &s->pr.sockets);
        snprintf(f, sizeof(f), "/proc/%d/stat", (int)pids[i]);
        if (memory && read_file_at(AT_FDCWD, f, 4096, &stat, NULL) == 0) {
            /* fields 10 (minflt) and 12 (majflt), after the command */
            char *q = strrchr(stat, ')');
            unsigned long long v[12] = {0};
            if (q && sscanf(q + 2, "%*c %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                            &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9) {
                st->pgfault += v[6];
                st->pgmajfault += v[8];
            }
        }
    }
    if (s->metrics && s->init_pid > 0) {
        char f[64];
        _cleanup_free_ char *limits = NULL;
        snprintf(f, sizeof(f), "/proc/%d/limits", (int)s->init_pid);
        if (read_file_at(AT_FDCWD, f, 1 << 16, &limits, NULL) == 0)
            s->pr.has_nofile = proc_value(limits, "\nMax open files", &s->pr.nofile_soft);
    }
}

/* The filesystem of dir: size, inodes, and the source of its mount. Once
 * per job: every container's writable layer is on it, and mountinfo may be
 * megabytes long. */
static void fs_measure(const char *dir, struct fs_sample *fs)
{
    struct statvfs vfs;
    struct stat sb;
    if (statvfs(dir, &vfs) < 0 || stat(dir, &sb) < 0)
        return;
    fs->limit_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
    fs->inodes_total = vfs.f_files;
    fs->inodes_free = vfs.f_ffree;
    /* mountinfo: "id parent major:minor root point options... - type source ..." */
    char dev[32];
    snprintf(dev, sizeof(dev), " %u:%u ", major(sb.st_dev), minor(sb.st_dev));
    _cleanup_free_ char *mi = NULL;
    if (read_file_at(AT_FDCWD, "/proc/self/mountinfo", 1 << 22, &mi, NULL) < 0)
        return;
    for (char *line = mi, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = '\0';
        char *sp = strchr(line, ' ');
        sp = sp ? strchr(sp + 1, ' ') : NULL; /* before major:minor */
        char *sep = strstr(line, " - ");
        if (!sp || !sep || strncmp(sp, dev, strlen(dev)) != 0)
            continue;
        char *src = strchr(sep + 3, ' '); /* after the type */
        if (!src)
            continue;
        src++;
        size_t len = strcspn(src, " ");
        if (len >= sizeof(fs->device))
            continue;
        memcpy(fs->device, src, len);
        fs->device[len] = '\0';
        fs->ok = true;
        return;
    }
}

static void *read_ifaces(void *arg)
{
    struct sample *s = arg;
    _cleanup_close_ int fd = open(s->netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
        return NULL;
    _cleanup_free_ char *text = NULL;
    if (read_file_at(AT_FDCWD, "/proc/thread-self/net/dev", 1 << 20, &text, NULL) < 0)
        return NULL;
    /* Two header lines, then "name: rx_bytes packets errs ... tx_bytes
     * packets errs ...". */
    char *line = strchr(text, '\n');
    line = line ? strchr(line + 1, '\n') : NULL;
    while (line && *++line && s->n_ifaces < STATS_IFACES) {
        char *colon = strchr(line, ':');
        char *nl = strchr(line, '\n');
        if (!colon || (nl && colon > nl))
            break;
        *colon = '\0';
        while (*line == ' ')
            line++;
        unsigned long long v[16] = {0};
        if (sscanf(colon + 1,
                   "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
                   "%llu",
                   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                   &v[11], &v[12], &v[13], &v[14], &v[15]) == 16 &&
            strcmp(line, "lo") != 0) {
            struct iface *i = &s->ifaces[s->n_ifaces++];
            snprintf(i->name, sizeof(i->name), "%s", line);
            i->rx_bytes = v[0];
            i->rx_packets = v[1];
            i->rx_errors = v[2];
            i->rx_dropped = v[3];
            i->tx_bytes = v[8];
            i->tx_packets = v[9];
            i->tx_errors = v[10];
            i->tx_dropped = v[11];
        }
        line = nl;
    }
    return NULL;
}

static void measure(struct sample *s)
{
    s->ts = now_real_ns();
    struct oci_cgroup *cg = NULL;
    struct err e = {0};
    if (s->cgroup && oci_cgroup_open(s->cgroup, &cg, &e) == 0) {
        s->ok = oci_cgroup_stats(cg, &s->cg, &e) == 0;
        if (s->ok)
            procs_measure(cg, s);
        oci_cgroup_free(cg);
    }
    if (s->layer)
        s->du_ok = du_path(s->layer, &s->du_bytes, &s->du_inodes) == 0;
    if (s->netns) {
        pthread_t t;
        if (pthread_create(&t, NULL, read_ifaces, s) == 0)
            pthread_join(t, NULL);
    }
}

/* ---- the loop ---- */

enum stats_kind { STATS_CONTAINER, STATS_CONTAINERS, STATS_POD, STATS_PODS, STATS_METRICS };

struct stats_job {
    uv_work_t req;
    struct stats_job *next; /* cri->stats_waiting */
    struct cri_call *call;  /* loop side only: a unary call */
    struct list_stream *ls; /* or a stream's chunk */
    enum stats_kind kind;
    struct sample *ctrs, *pods;
    size_t n_ctrs, n_pods;
    char *fsdir; /* metrics: the writable layers' directory */
    struct fs_sample fs;
};

static void stats_work(uv_work_t *req)
{
    struct stats_job *j = req->data;
    if (j->fsdir)
        fs_measure(j->fsdir, &j->fs);
    for (size_t i = 0; i < j->n_ctrs; i++) {
        j->ctrs[i].fs = &j->fs;
        measure(&j->ctrs[i]);
    }
    for (size_t i = 0; i < j->n_pods; i++)
        measure(&j->pods[i]);
}

static void stats_job_free(struct stats_job *j)
{
    for (size_t i = 0; i < j->n_ctrs; i++)
        sample_clear(&j->ctrs[i]);
    for (size_t i = 0; i < j->n_pods; i++)
        sample_clear(&j->pods[i]);
    free(j->ctrs);
    free(j->pods);
    free(j->fsdir);
    free(j);
}

/* metrics: measure what only ListPodSandboxMetrics reports, too. */
static void sample_ref(struct cri_cursor **refs, void *obj, struct sample *s)
{
    s->refs = refs;
    s->obj = obj;
    cri_cursor_open(refs, &s->ref, obj);
}

/* The container or sandbox measured, NULL if it is gone. */
static struct container *sample_ctr(const struct sample *s)
{
    struct container *c = s->ref.at;
    return c && c == s->obj && !strcmp(c->rec.id, s->id) ? c : NULL;
}

static struct sandbox *sample_pod(const struct sample *s)
{
    struct sandbox *sb = s->ref.at;
    return sb && sb == s->obj && !strcmp(sb->rec.id, s->id) ? sb : NULL;
}

static int ctr_sample(struct cri *cri, struct container *c, struct sample *s, bool metrics)
{
    memcpy(s->id, c->rec.id, sizeof(s->id));
    sample_ref(&cri->containers->cursors, c, s);
    if (c->rec.cgroup_path && !(s->cgroup = strdup(c->rec.cgroup_path)))
        return -ENOMEM;
    if (metrics) {
        s->metrics = true;
        s->init_pid = c->pid;
    }
    if (now_real_ns() - c->du_ns >= STATS_DU_TTL_NS) {
        char layer[4200];
        container_dirs(cri, c->rec.id, NULL, 0, layer, sizeof(layer));
        if (asprintf(&s->layer, "%s/upper", layer) < 0)
            s->layer = NULL;
    }
    return 0;
}

static int pod_sample(struct cri *cri, struct sandbox *sb, struct sample *s)
{
    memcpy(s->id, sb->rec.id, sizeof(s->id));
    sample_ref(&cri->sandboxes->cursors, sb, s);
    /* A pod with a cgroup parent (kubelet's pod cgroup) is measured there:
     * its containers' cgroups are siblings of the sandbox's own. */
    if (sb->rec.cgroup_path && !(s->cgroup = strdup(sb->rec.cgroup_path)))
        return -ENOMEM;
    const Runtime__V1__LinuxPodSandboxConfig *lx = sb->config ? sb->config->linux : NULL;
    if (s->cgroup && lx && lx->cgroup_parent && *lx->cgroup_parent) {
        char *slash = strrchr(s->cgroup, '/');
        if (slash && slash != s->cgroup)
            *slash = '\0';
    }
    if (!sb->host_network && sandbox_state(sb) == RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY) {
        char dir[4200];
        sandbox_dir(cri, sb->rec.id, dir, sizeof(dir));
        if (asprintf(&s->netns, "%s/ns/net", dir) < 0)
            s->netns = NULL;
    }
    return 0;
}

/* ---- filters ---- */

/* A filter's ids (which may be prefixes) resolved once per call, not once
 * per item: id and pod are full ids, "" for any; none: an id of the filter
 * names nothing, so nothing matches. */
struct ids_match {
    bool none;
    char id[STORE_ID_LEN + 1], pod[STORE_ID_LEN + 1];
};

/* The full id of the container (or, with pod, the sandbox) that idf names
 * into out; *none if it names none. */
static void ids_resolve(struct cri *cri, bool pod, const char *idf, char *out, bool *none)
{
    if (!idf || !*idf)
        return;
    bool amb;
    struct sandbox *sb = pod ? sandbox_find(cri, idf, &amb) : NULL;
    struct container *c = pod ? NULL : container_find(cri, idf, &amb);
    const char *id = sb ? sb->rec.id : c ? c->rec.id : NULL;
    if (id)
        memcpy(out, id, STORE_ID_LEN + 1);
    else
        *none = true;
}

static void ids_match_ctrs(struct cri *cri, const Runtime__V1__ContainerStatsFilter *f,
                           struct ids_match *m)
{
    *m = (struct ids_match){0};
    if (f) {
        ids_resolve(cri, false, f->id, m->id, &m->none);
        ids_resolve(cri, true, f->pod_sandbox_id, m->pod, &m->none);
    }
}

static void ids_match_pods(struct cri *cri, const Runtime__V1__PodSandboxStatsFilter *f,
                           struct ids_match *m)
{
    *m = (struct ids_match){0};
    if (f)
        ids_resolve(cri, true, f->id, m->id, &m->none);
}

static bool ctr_wanted(struct container *c, const Runtime__V1__ContainerStatsFilter *f,
                       const struct ids_match *m)
{
    if (c->rec.state != STORE_CTR_RUNNING && c->rec.state != STORE_CTR_CREATED)
        return false; /* as containerd: stats of what runs */
    if (!f)
        return true;
    if (m->none || (*m->id && strcmp(c->rec.id, m->id) != 0) ||
        (*m->pod && strcmp(c->rec.pod_id, m->pod) != 0))
        return false;
    return CRI_LABELS_MATCH(c->config, f);
}

static bool pod_wanted(struct sandbox *sb, const Runtime__V1__PodSandboxStatsFilter *f,
                       const struct ids_match *m)
{
    if (sandbox_state(sb) != RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY)
        return false;
    if (!f)
        return true;
    if (m->none || (*m->id && strcmp(sb->rec.id, m->id) != 0))
        return false;
    return CRI_LABELS_MATCH(sb->config, f);
}

/* ---- messages ---- */

struct u64 {
    Runtime__V1__UInt64Value v;
};

static Runtime__V1__UInt64Value *u64(Runtime__V1__UInt64Value *v, uint64_t x)
{
    runtime__v1__uint64_value__init(v);
    v->value = x;
    return v;
}

struct psi_msg {
    Runtime__V1__PsiStats st;
    Runtime__V1__PsiData some, full;
};

static Runtime__V1__PsiStats *psi_fill(struct psi_msg *m, const struct oci_psi *p)
{
    runtime__v1__psi_stats__init(&m->st);
    runtime__v1__psi_data__init(&m->some);
    runtime__v1__psi_data__init(&m->full);
    m->some.total = p->some_total;
    m->some.avg10 = p->some_avg[0];
    m->some.avg60 = p->some_avg[1];
    m->some.avg300 = p->some_avg[2];
    m->full.total = p->full_total;
    m->full.avg10 = p->full_avg[0];
    m->full.avg60 = p->full_avg[1];
    m->full.avg300 = p->full_avg[2];
    m->st.some = &m->some;
    m->st.full = &m->full;
    return &m->st;
}

/* The CPU and memory part shared by containers and pods. */
struct usage_msg {
    Runtime__V1__CpuUsage cpu;
    Runtime__V1__UInt64Value cpu_total, cpu_nano;
    Runtime__V1__MemoryUsage mem;
    Runtime__V1__UInt64Value ws, avail, usage, rss, pf, mpf;
    Runtime__V1__IoUsage io;
    struct psi_msg psi[3];
};

/* prev_*: the loop's previous CPU sample, updated here. */
static void usage_fill(struct usage_msg *m, const struct sample *s, uint64_t *prev_cpu_ns,
                       uint64_t *prev_ts)
{
    const struct oci_cgroup_stats *st = &s->cg;
    runtime__v1__cpu_usage__init(&m->cpu);
    m->cpu.timestamp = (int64_t)s->ts;
    uint64_t cpu_ns = st->cpu_usage_usec * 1000;
    m->cpu.usage_core_nano_seconds = u64(&m->cpu_total, cpu_ns);
    if (*prev_ts && s->ts > *prev_ts && cpu_ns >= *prev_cpu_ns)
        m->cpu.usage_nano_cores = u64(&m->cpu_nano, (uint64_t)((double)(cpu_ns - *prev_cpu_ns) *
                                                               1e9 / (double)(s->ts - *prev_ts)));
    *prev_cpu_ns = cpu_ns;
    *prev_ts = s->ts;
    if (st->has_psi[0])
        m->cpu.psi = psi_fill(&m->psi[0], &st->psi[0]);
    runtime__v1__memory_usage__init(&m->mem);
    m->mem.timestamp = (int64_t)s->ts;
    m->mem.working_set_bytes = u64(&m->ws, st->memory_working_set);
    m->mem.usage_bytes =
        u64(&m->usage, st->has_memory ? st->memory_current : st->memory_working_set);
    m->mem.rss_bytes = u64(&m->rss, st->memory_rss);
    m->mem.page_faults = u64(&m->pf, st->pgfault);
    m->mem.major_page_faults = u64(&m->mpf, st->pgmajfault);
    if (st->has_memory && st->memory_max != UINT64_MAX)
        m->mem.available_bytes = u64(&m->avail, st->memory_max > st->memory_working_set
                                                    ? st->memory_max - st->memory_working_set
                                                    : 0);
    if (st->has_psi[1])
        m->mem.psi = psi_fill(&m->psi[1], &st->psi[1]);
    runtime__v1__io_usage__init(&m->io);
    m->io.timestamp = (int64_t)s->ts;
    if (st->has_psi[2])
        m->io.psi = psi_fill(&m->psi[2], &st->psi[2]);
}

struct ctr_msg {
    Runtime__V1__ContainerStats st;
    Runtime__V1__ContainerAttributes attr;
    struct usage_msg u;
    Runtime__V1__FilesystemUsage fs;
    Runtime__V1__FilesystemIdentifier fsid;
    Runtime__V1__UInt64Value used, inodes;
    Runtime__V1__SwapUsage swap;
    Runtime__V1__UInt64Value savail, susage;
};

static void ctr_attr_fill(const struct container *c, Runtime__V1__ContainerAttributes *a)
{
    runtime__v1__container_attributes__init(a);
    a->id = (char *)c->rec.id;
    a->metadata = c->config->metadata;
    a->n_labels = c->config->n_labels;
    a->labels = (Runtime__V1__ContainerAttributes__LabelsEntry **)c->config->labels;
    a->n_annotations = c->config->n_annotations;
    a->annotations = (Runtime__V1__ContainerAttributes__AnnotationsEntry **)c->config->annotations;
}

static void pod_attr_fill(const struct sandbox *sb, Runtime__V1__PodSandboxAttributes *a)
{
    runtime__v1__pod_sandbox_attributes__init(a);
    a->id = (char *)sb->rec.id;
    a->metadata = sb->config->metadata;
    a->n_labels = sb->config->n_labels;
    a->labels = (Runtime__V1__PodSandboxAttributes__LabelsEntry **)sb->config->labels;
    a->n_annotations = sb->config->n_annotations;
    a->annotations =
        (Runtime__V1__PodSandboxAttributes__AnnotationsEntry **)sb->config->annotations;
}

/* About how many bytes a container or pod adds to a stream's chunk, known
 * before it is measured, so that chunks are bounded by their size as well
 * as their count: a ContainerStats or PodSandboxStats is mostly its
 * attributes (labels and annotations: up to 512 KiB of them), plus figures
 * under STATS_FIGURES_BYTES; a metric is its name, its label values (id,
 * name, image and one more) and its value. */
#define STATS_FIGURES_BYTES 1024
#define STATS_METRIC_BYTES  192

static size_t ctr_chunk_bytes(const struct container *c, enum stats_kind kind)
{
    if (kind == STATS_METRICS) {
        const char *image = c->rec.image_ref ? c->rec.image_ref : "";
        return cri_metrics_ctr_max() * (STATS_METRIC_BYTES + sizeof(c->rec.id) +
                                        strlen(c->config->metadata->name) + strlen(image));
    }
    Runtime__V1__ContainerAttributes a;
    ctr_attr_fill(c, &a);
    return protobuf_c_message_get_packed_size(&a.base) + STATS_FIGURES_BYTES;
}

static size_t pod_chunk_bytes(const struct sandbox *sb, enum stats_kind kind)
{
    if (kind == STATS_METRICS)
        return cri_metrics_pod_max() * (STATS_METRIC_BYTES + sizeof(sb->rec.id));
    Runtime__V1__PodSandboxAttributes a;
    pod_attr_fill(sb, &a);
    return protobuf_c_message_get_packed_size(&a.base) + STATS_FIGURES_BYTES;
}

/* The writable layer's usage a worker measured is the container's, cached. */
static void du_keep(struct container *c, const struct sample *s)
{
    if (s->du_ok) {
        c->du_bytes = s->du_bytes;
        c->du_inodes = s->du_inodes;
        c->du_ns = s->ts;
    }
}

static void ctr_fill(struct cri *cri, struct container *c, const struct sample *s,
                     struct ctr_msg *m)
{
    du_keep(c, s);
    runtime__v1__container_stats__init(&m->st);
    ctr_attr_fill(c, &m->attr);
    m->st.attributes = &m->attr;
    if (s->ok) {
        usage_fill(&m->u, s, &c->cpu_prev_ns, &c->cpu_prev_ts);
        m->st.cpu = &m->u.cpu;
        m->st.memory = &m->u.mem;
        m->st.io = &m->u.io;
        if (s->cg.has_swap) {
            runtime__v1__swap_usage__init(&m->swap);
            m->swap.timestamp = (int64_t)s->ts;
            m->swap.swap_usage_bytes = u64(&m->susage, s->cg.swap_current);
            if (s->cg.swap_max != UINT64_MAX)
                m->swap.swap_available_bytes = u64(
                    &m->savail,
                    s->cg.swap_max > s->cg.swap_current ? s->cg.swap_max - s->cg.swap_current : 0);
            m->st.swap = &m->swap;
        }
    }
    runtime__v1__filesystem_usage__init(&m->fs);
    runtime__v1__filesystem_identifier__init(&m->fsid);
    m->fsid.mountpoint = cri->containers_dir;
    m->fs.fs_id = &m->fsid;
    m->fs.timestamp = (int64_t)(c->du_ns ? c->du_ns : s->ts);
    m->fs.used_bytes = u64(&m->used, c->du_bytes);
    m->fs.inodes_used = u64(&m->inodes, c->du_inodes);
    m->st.writable_layer = &m->fs;
}

struct pod_msg {
    Runtime__V1__PodSandboxStats st;
    Runtime__V1__PodSandboxAttributes attr;
    Runtime__V1__LinuxPodSandboxStats lx;
    struct usage_msg u;
    Runtime__V1__NetworkUsage net;
    Runtime__V1__NetworkInterfaceUsage ifs[STATS_IFACES], *ifp[STATS_IFACES];
    Runtime__V1__UInt64Value ifv[STATS_IFACES][4];
    Runtime__V1__ProcessUsage proc;
    Runtime__V1__UInt64Value nproc;
    Runtime__V1__ContainerStats **ctrs;
    size_t n_ctrs;
};

static void pod_fill(struct sandbox *sb, const struct sample *s, struct pod_msg *m)
{
    runtime__v1__pod_sandbox_stats__init(&m->st);
    pod_attr_fill(sb, &m->attr);
    m->st.attributes = &m->attr;
    runtime__v1__linux_pod_sandbox_stats__init(&m->lx);
    m->st.linux = &m->lx;
    if (s->ok) {
        usage_fill(&m->u, s, &sb->cpu_prev_ns, &sb->cpu_prev_ts);
        m->lx.cpu = &m->u.cpu;
        m->lx.memory = &m->u.mem;
        m->lx.io = &m->u.io;
        runtime__v1__process_usage__init(&m->proc);
        m->proc.timestamp = (int64_t)s->ts;
        m->proc.process_count = u64(&m->nproc, s->cg.processes);
        m->lx.process = &m->proc;
    }
    runtime__v1__network_usage__init(&m->net);
    m->net.timestamp = (int64_t)s->ts;
    for (size_t i = 0; i < s->n_ifaces; i++) {
        Runtime__V1__NetworkInterfaceUsage *n = &m->ifs[i];
        runtime__v1__network_interface_usage__init(n);
        n->name = (char *)s->ifaces[i].name;
        n->rx_bytes = u64(&m->ifv[i][0], s->ifaces[i].rx_bytes);
        n->rx_errors = u64(&m->ifv[i][1], s->ifaces[i].rx_errors);
        n->tx_bytes = u64(&m->ifv[i][2], s->ifaces[i].tx_bytes);
        n->tx_errors = u64(&m->ifv[i][3], s->ifaces[i].tx_errors);
        m->ifp[i] = n;
    }
    if (s->n_ifaces) {
        m->net.default_interface = m->ifp[0];
        for (size_t i = 0; i < s->n_ifaces; i++)
            if (!strcmp(s->ifaces[i].name, "eth0"))
                m->net.default_interface = m->ifp[i];
        m->net.interfaces = m->ifp;
        m->net.n_interfaces = s->n_ifaces;
    }
    m->lx.network = &m->net;
}

/* ---- answers ---- */

/* The messages of a job's answer, pointing into the samples, the registry
 * and themselves: the unary and the streaming answers send the same. */
struct stats_msgs {
    size_t n; /* top-level items: container stats, pod stats or pod metrics */
    struct ctr_msg *cm;
    Runtime__V1__ContainerStats **cp;
    struct pod_msg *pm;
    Runtime__V1__PodSandboxStats **pp;
    struct metric_msg *mm;
    Runtime__V1__Metric **mp;
    Runtime__V1__PodSandboxMetrics *xm, **xp;
    Runtime__V1__ContainerMetrics *ym, **yp;
};

static void stats_msgs_clear(struct stats_msgs *m)
{
    free(m->cm);
    free(m->cp);
    free(m->pm);
    free(m->pp);
    free(m->mm);
    free(m->mp);
    free(m->xm);
    free(m->xp);
    free(m->ym);
    free(m->yp);
}

static void build_containers(struct cri *cri, struct stats_job *j, struct stats_msgs *m)
{
    for (size_t i = 0; i < j->n_ctrs; i++) {
        struct container *c = sample_ctr(&j->ctrs[i]);
        if (!c)
            continue; /* removed meanwhile */
        ctr_fill(cri, c, &j->ctrs[i], &m->cm[m->n]);
        m->cp[m->n] = &m->cm[m->n].st;
        m->n++;
    }
}

/* Pod stats or pod metrics: each pod with its containers, whose samples
 * follow one another in the job (add_ctrs_of_pods). */
static void build_pods(struct cri *cri, struct stats_job *j, struct stats_msgs *m)
{
    bool metrics = j->kind == STATS_METRICS;
    size_t used = 0, k = 0; /* metrics and containers so far */
    for (size_t i = 0; i < j->n_pods; i++) {
        const struct sample *ps = &j->pods[i];
        struct sandbox *sb = sample_pod(ps);
        if (!sb)
            continue;
        Runtime__V1__PodSandboxMetrics *p = &m->xm[m->n];
        if (metrics) {
            runtime__v1__pod_sandbox_metrics__init(p);
            p->pod_sandbox_id = sb->rec.id;
            p->metrics = m->mp + used;
            p->n_metrics = cri_metrics_pod(sb, ps, m->mm + used, m->mp + used);
            used += p->n_metrics;
        } else {
            pod_fill(sb, ps, &m->pm[m->n]);
        }
        size_t first = k;
        for (size_t x = ps->ctr0; x < ps->ctr0 + ps->n_ctrs; x++) {
            const struct sample *cs = &j->ctrs[x];
            struct container *c = sample_ctr(cs);
            if (!c)
                continue;
            if (metrics) {
                du_keep(c, cs);
                runtime__v1__container_metrics__init(&m->ym[k]);
                m->ym[k].container_id = c->rec.id;
                m->ym[k].metrics = m->mp + used;
                m->ym[k].n_metrics = cri_metrics_ctr(c, cs, m->mm + used, m->mp + used);
                used += m->ym[k].n_metrics;
                m->yp[k] = &m->ym[k];
            } else {
                ctr_fill(cri, c, cs, &m->cm[k]);
                m->cp[k] = &m->cm[k].st;
            }
            k++;
        }
        if (metrics) {
            p->container_metrics = m->yp + first;
            p->n_container_metrics = k - first;
            m->xp[m->n] = p;
        } else {
            m->pm[m->n].lx.containers = m->cp + first;
            m->pm[m->n].lx.n_containers = k - first;
            m->pp[m->n] = &m->pm[m->n].st;
        }
        m->n++;
    }
}

/* The messages for what job j measured: 0, -ENOMEM. */
static int stats_build(struct cri *cri, struct stats_job *j, struct stats_msgs *m)
{
    *m = (struct stats_msgs){0};
    size_t nc = j->n_ctrs + 1, np = j->n_pods + 1;
    bool ok = (m->cm = calloc(nc, sizeof(*m->cm))) && (m->cp = calloc(nc, sizeof(*m->cp)));
    if (ok && (j->kind == STATS_POD || j->kind == STATS_PODS))
        ok = (m->pm = calloc(np, sizeof(*m->pm))) && (m->pp = calloc(np, sizeof(*m->pp)));
    if (ok && j->kind == STATS_METRICS) {
        size_t nm = j->n_ctrs * cri_metrics_ctr_max() + j->n_pods * cri_metrics_pod_max() + 1;
        ok = (m->mm = calloc(nm, sizeof(*m->mm))) && (m->mp = calloc(nm, sizeof(*m->mp))) &&
             (m->xm = calloc(np, sizeof(*m->xm))) && (m->xp = calloc(np, sizeof(*m->xp))) &&
             (m->ym = calloc(nc, sizeof(*m->ym))) && (m->yp = calloc(nc, sizeof(*m->yp)));
    }
    if (!ok) {
        stats_msgs_clear(m);
        return -ENOMEM;
    }
    if (j->kind == STATS_CONTAINER || j->kind == STATS_CONTAINERS)
        build_containers(cri, j, m);
    else
        build_pods(cri, j, m);
    return 0;
}

static void reply(struct stats_job *j)
{
    struct cri_call *call = j->call;
    struct stats_msgs m;
    if (stats_build(call->cri, j, &m) < 0) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    switch (j->kind) {
    case STATS_CONTAINER: {
        Runtime__V1__ContainerStatsResponse resp = RUNTIME__V1__CONTAINER_STATS_RESPONSE__INIT;
        resp.stats = m.cp[0];
        if (!m.n)
            cri_fail(call, GRPC_STATUS_NOT_FOUND, "the container is gone");
        else
            cri_reply(call, &resp.base);
        break;
    }
    case STATS_CONTAINERS: {
        Runtime__V1__ListContainerStatsResponse resp =
            RUNTIME__V1__LIST_CONTAINER_STATS_RESPONSE__INIT;
        resp.stats = m.cp;
        resp.n_stats = m.n;
        cri_reply(call, &resp.base);
        break;
    }
    case STATS_POD: {
        Runtime__V1__PodSandboxStatsResponse resp = RUNTIME__V1__POD_SANDBOX_STATS_RESPONSE__INIT;
        resp.stats = m.pp[0];
        if (!m.n)
            cri_fail(call, GRPC_STATUS_NOT_FOUND, "the pod sandbox is gone");
        else
            cri_reply(call, &resp.base);
        break;
    }
    case STATS_PODS: {
        Runtime__V1__ListPodSandboxStatsResponse resp =
            RUNTIME__V1__LIST_POD_SANDBOX_STATS_RESPONSE__INIT;
        resp.stats = m.pp;
        resp.n_stats = m.n;
        cri_reply(call, &resp.base);
        break;
    }
    case STATS_METRICS: {
        Runtime__V1__ListPodSandboxMetricsResponse resp =
            RUNTIME__V1__LIST_POD_SANDBOX_METRICS_RESPONSE__INIT;
        resp.pod_metrics = m.xp;
        resp.n_pod_metrics = m.n;
        cri_reply(call, &resp.base);
        break;
    }
    }
    stats_msgs_clear(&m);
}

/* A chunk of a stream: the kind's Stream*Response. */
static int pack_chunk(struct list_stream *ls, struct stats_job *j)
{
    struct stats_msgs m;
    int r = stats_build(ls->call->cri, j, &m);
    if (r < 0)
        return r;
    if (j->kind == STATS_CONTAINERS) {
        Runtime__V1__StreamContainerStatsResponse resp =
            RUNTIME__V1__STREAM_CONTAINER_STATS_RESPONSE__INIT;
        resp.container_stats = m.cp;
        resp.n_container_stats = m.n;
        r = list_stream_pack(ls, &resp.base);
    } else if (j->kind == STATS_PODS) {
        Runtime__V1__StreamPodSandboxStatsResponse resp =
            RUNTIME__V1__STREAM_POD_SANDBOX_STATS_RESPONSE__INIT;
        resp.pod_sandbox_stats = m.pp;
        resp.n_pod_sandbox_stats = m.n;
        r = list_stream_pack(ls, &resp.base);
    } else {
        Runtime__V1__StreamPodSandboxMetricsResponse resp =
            RUNTIME__V1__STREAM_POD_SANDBOX_METRICS_RESPONSE__INIT;
        resp.pod_sandbox_metrics = m.xp;
        resp.n_pod_sandbox_metrics = m.n;
        r = list_stream_pack(ls, &resp.base);
    }
    stats_msgs_clear(&m);
    return r;
}

/* One job in the thread pool at a time: a scrape reads /proc and the cgroups
 * of every container and may walk writable layers, and the pool's four
 * threads are also the ones CreateContainer, pulls and removals need. So
 * clients scraping at once take turns (in arrival order) rather than
 * filling the pool, and no two workers ever walk the same layer. */
static void stats_done(uv_work_t *req, int status);

static void run(struct cri *cri, struct stats_job *j)
{
    /* a layer measured by the jobs this one waited for is not walked again */
    for (size_t i = 0; i < j->n_ctrs; i++) {
        struct sample *s = &j->ctrs[i];
        struct container *c = s->layer ? sample_ctr(s) : NULL;
        if (c && now_real_ns() - c->du_ns < STATS_DU_TTL_NS) {
            free(s->layer);
            s->layer = NULL;
        }
    }
    cri->stats_busy = true;
    uv_queue_work(cri->loop, &j->req, stats_work, stats_done);
}

static void queue(struct cri *cri, struct stats_job *j)
{
    if (!cri->stats_busy) {
        run(cri, j);
        return;
    }
    j->next = NULL;
    if (cri->stats_waiting_tail)
        cri->stats_waiting_tail->next = j;
    else
        cri->stats_waiting = j;
    cri->stats_waiting_tail = j;
}

/* The job in the pool has returned: the next one goes. */
static void run_next(struct cri *cri)
{
    struct stats_job *j = cri->stats_waiting;
    cri->stats_busy = false;
    if (!j)
        return;
    cri->stats_waiting = j->next;
    if (!cri->stats_waiting)
        cri->stats_waiting_tail = NULL;
    run(cri, j);
}

static void stats_done(uv_work_t *req, int status)
{
    struct stats_job *j = req->data;
    struct list_stream *ls = j->ls;
    struct cri *cri = ls ? ls->call->cri : j->call->cri;
    if (ls) {
        int r = status < 0 ? -ECANCELED : ls->cancelled ? 0 : pack_chunk(ls, j);
        stats_job_free(j);
        list_stream_resume(ls, r); /* its next chunk waits behind the others */
    } else {
        if (status < 0)
            cri_fail(j->call, GRPC_STATUS_CANCELLED, "cancelled");
        else
            reply(j);
        stats_job_free(j);
    }
    /* only now: the layers this job measured are the containers' (du_keep),
     * so the next job does not walk them again */
    run_next(cri);
}

/* ---- handlers ---- */

static struct stats_job *job_new(enum stats_kind kind, size_t ctrs, size_t pods)
{
    struct stats_job *j = calloc(1, sizeof(*j));
    if (j && (!(j->ctrs = calloc(ctrs + 1, sizeof(*j->ctrs))) ||
              !(j->pods = calloc(pods + 1, sizeof(*j->pods))))) {
        stats_job_free(j);
        j = NULL;
    }
    if (!j)
        return NULL;
    j->kind = kind;
    j->req.data = j;
    return j;
}

static struct stats_job *call_job_new(struct cri_call *call, enum stats_kind kind, size_t ctrs,
                                      size_t pods)
{
    struct stats_job *j = job_new(kind, ctrs, pods);
    if (!j) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    j->call = call;
    return j;
}

static int by_id(const void *a, const void *b)
{
    return strcmp((*(const struct sample *const *)a)->id, (*(const struct sample *const *)b)->id);
}

/* The containers (that run) of the job's pods join it, grouped by pod: pod
 * i's are ctrs[pods[i].ctr0] on, pods[i].n_ctrs of them; -ENOMEM. */
static int add_ctrs_of_pods(struct cri *cri, struct stats_job *j)
{
    _cleanup_free_ struct sample **sorted = calloc(j->n_pods + 1, sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    for (size_t i = 0; i < j->n_pods; i++)
        sorted[i] = &j->pods[i];
    qsort(sorted, j->n_pods, sizeof(*sorted), by_id);
    struct sample key, *kp = &key, **hit;
    size_t n = 0;
    for (struct container *c = cri->containers->head; c; c = c->next) {
        memcpy(key.id, c->rec.pod_id, sizeof(key.id));
        if (ctr_wanted(c, NULL, NULL) &&
            (hit = bsearch(&kp, sorted, j->n_pods, sizeof(*sorted), by_id))) {
            (*hit)->n_ctrs++;
            n++;
        }
    }
    if (j->kind == STATS_METRICS && n && !j->fsdir &&
        !(j->fsdir = strdup(cri->containers->records_dir)))
        return -ENOMEM;
    struct sample *v = calloc(n + 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0, at = 0; i < j->n_pods; i++) {
        j->pods[i].ctr0 = at;
        at += j->pods[i].n_ctrs;
        j->pods[i].n_ctrs = 0; /* counted again as they are taken */
    }
    free(j->ctrs);
    j->ctrs = v;
    j->n_ctrs = n;
    for (struct container *c = cri->containers->head; c; c = c->next) {
        memcpy(key.id, c->rec.pod_id, sizeof(key.id));
        if (ctr_wanted(c, NULL, NULL) &&
            (hit = bsearch(&kp, sorted, j->n_pods, sizeof(*sorted), by_id))) {
            struct sample *p = *hit;
            ctr_sample(cri, c, &j->ctrs[p->ctr0 + p->n_ctrs++], j->kind == STATS_METRICS);
        }
    }
    return 0;
}

void cri_container_stats(struct cri_call *call)
{
    Runtime__V1__ContainerStatsRequest *req = (Runtime__V1__ContainerStatsRequest *)call->req;
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
    struct stats_job *j = call_job_new(call, STATS_CONTAINER, 1, 0);
    if (!j)
        return;
    ctr_sample(call->cri, c, &j->ctrs[j->n_ctrs++], false);
    queue(call->cri, j);
}

/* The containers a ListContainerStats filter wants from *at on, at most max
 * of them, into j; *at ends at the first container not looked at. */
static void ctrs_take(struct cri *cri, const Runtime__V1__ContainerStatsFilter *f,
                      const struct ids_match *m, struct container **at, struct stats_job *j,
                      size_t max, bool chunked)
{
    struct container *c = *at;
    size_t bytes = 0;
    for (; c && j->n_ctrs < max; c = c->next) {
        if (!ctr_wanted(c, f, m))
            continue;
        ctr_sample(cri, c, &j->ctrs[j->n_ctrs++], false);
        if (chunked && list_chunk_full_size(j->n_ctrs, &bytes, ctr_chunk_bytes(c, j->kind))) {
            c = c->next;
            break;
        }
    }
    *at = c;
}

void cri_list_container_stats(struct cri_call *call)
{
    Runtime__V1__ListContainerStatsRequest *req =
        (Runtime__V1__ListContainerStatsRequest *)call->req;
    struct cri *cri = call->cri;
    struct stats_job *j = call_job_new(call, STATS_CONTAINERS, cri->containers->n, 0);
    if (!j)
        return;
    struct ids_match m;
    ids_match_ctrs(cri, req->filter, &m);
    struct container *at = cri->containers->head;
    ctrs_take(cri, req->filter, &m, &at, j, cri->containers->n, false);
    queue(cri, j);
}

void cri_pod_sandbox_stats(struct cri_call *call)
{
    Runtime__V1__PodSandboxStatsRequest *req = (Runtime__V1__PodSandboxStatsRequest *)call->req;
    struct cri *cri = call->cri;
    struct sandbox *sb = sandbox_find_or_fail(call, NULL, req->pod_sandbox_id);
    if (!sb)
        return;
    struct stats_job *j = call_job_new(call, STATS_POD, 0, 1);
    if (!j)
        return;
    pod_sample(cri, sb, &j->pods[j->n_pods++]);
    if (add_ctrs_of_pods(cri, j) < 0) {
        stats_job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    queue(cri, j);
}

/* A stream's chunk ends with the pod that fills it (LIST_CHUNK_BYTES with
 * its containers): the pods after it leave the job, and *at goes back to
 * the first of them. A pod is never split: its containers are in it. */
static void pods_trim(struct stats_job *j, struct sandbox **at)
{
    size_t bytes = 0, keep = 0;
    while (keep < j->n_pods) {
        const struct sample *ps = &j->pods[keep++];
        size_t more = pod_chunk_bytes(sample_pod(ps), j->kind);
        for (size_t x = ps->ctr0; x < ps->ctr0 + ps->n_ctrs; x++)
            more += ctr_chunk_bytes(sample_ctr(&j->ctrs[x]), j->kind);
        if (list_chunk_full_size(keep, &bytes, more))
            break;
    }
    if (keep == j->n_pods)
        return;
    *at = sample_pod(&j->pods[keep]);
    size_t ctrs = j->pods[keep].ctr0;
    for (size_t i = keep; i < j->n_pods; i++)
        sample_clear(&j->pods[i]);
    for (size_t x = ctrs; x < j->n_ctrs; x++)
        sample_clear(&j->ctrs[x]);
    j->n_pods = keep;
    j->n_ctrs = ctrs;
}

/* The pods a ListPodSandboxStats filter wants from *at on, at most max of
 * them, with their containers, into j; for a stream's chunk (chunked), no
 * more than fill LIST_CHUNK_BYTES; -ENOMEM. */
static int pods_take(struct cri *cri, const Runtime__V1__PodSandboxStatsFilter *f,
                     const struct ids_match *m, struct sandbox **at, struct stats_job *j,
                     size_t max, bool chunked)
{
    struct sandbox *sb = *at;
    for (; sb && j->n_pods < max; sb = sb->next)
        if (!sb->creating && pod_wanted(sb, f, m))
            pod_sample(cri, sb, &j->pods[j->n_pods++]);
    *at = sb;
    int r = add_ctrs_of_pods(cri, j);
    if (r == 0 && chunked)
        pods_trim(j, at);
    return r;
}

static void pods_job(struct cri_call *call, enum stats_kind kind,
                     const Runtime__V1__PodSandboxStatsFilter *f)
{
    struct cri *cri = call->cri;
    struct stats_job *j = call_job_new(call, kind, 0, cri->sandboxes->n);
    if (!j)
        return;
    struct ids_match m;
    ids_match_pods(cri, f, &m);
    struct sandbox *at = cri->sandboxes->head;
    if (pods_take(cri, f, &m, &at, j, cri->sandboxes->n, false) < 0) {
        stats_job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    queue(cri, j);
}

void cri_list_pod_sandbox_stats(struct cri_call *call)
{
    Runtime__V1__ListPodSandboxStatsRequest *req =
        (Runtime__V1__ListPodSandboxStatsRequest *)call->req;
    pods_job(call, STATS_PODS, req->filter);
}

void cri_list_pod_sandbox_metrics(struct cri_call *call) { pods_job(call, STATS_METRICS, NULL); }

/* ---- streams ---- */

/* A stream measures a chunk of containers or pods at a time: the next
 * chunk's samples are taken (on the loop) once the last chunk is sent. A
 * chunk holds at most these many, and about LIST_CHUNK_BYTES (by
 * ctr_chunk_bytes and pod_chunk_bytes). */
#define STATS_CHUNK_CTRS 128
#define STATS_CHUNK_PODS 32

struct stats_stream {
    struct list_stream ls;
    enum stats_kind kind;
    const Runtime__V1__ContainerStatsFilter *ctr_filter; /* in the request */
    const Runtime__V1__PodSandboxStatsFilter *pod_filter;
    struct ids_match match; /* of the filter */
    struct cri_cursor cur;
    bool pods; /* cur walks the sandboxes */
};

static int stats_stream_fill(struct list_stream *ls)
{
    struct stats_stream *s = (struct stats_stream *)ls;
    struct cri *cri = ls->call->cri;
    struct stats_job *j =
        job_new(s->kind, s->pods ? 0 : STATS_CHUNK_CTRS, s->pods ? STATS_CHUNK_PODS : 0);
    if (!j)
        return -ENOMEM;
    j->ls = ls;
    int r = 0;
    if (s->pods) {
        struct sandbox *at = s->cur.at;
        r = pods_take(cri, s->pod_filter, &s->match, &at, j, STATS_CHUNK_PODS, true);
        s->cur.at = at;
        ls->done = !at;
    } else {
        struct container *at = s->cur.at;
        ctrs_take(cri, s->ctr_filter, &s->match, &at, j, STATS_CHUNK_CTRS, true);
        s->cur.at = at;
        ls->done = !at;
    }
    if (r < 0 || (!j->n_ctrs && !j->n_pods)) {
        stats_job_free(j);
        return r;
    }
    queue(cri, j);
    return LIST_ASYNC;
}

static void stats_stream_release(struct list_stream *ls)
{
    struct stats_stream *s = (struct stats_stream *)ls;
    struct cri *cri = ls->call->cri;
    cri_cursor_close(s->pods ? &cri->sandboxes->cursors : &cri->containers->cursors, &s->cur);
}

static void stats_stream(struct cri_call *call, enum stats_kind kind,
                         const Runtime__V1__ContainerStatsFilter *cf,
                         const Runtime__V1__PodSandboxStatsFilter *pf)
{
    struct cri *cri = call->cri;
    struct stats_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->kind = kind;
    s->ctr_filter = cf;
    s->pod_filter = pf;
    s->pods = kind != STATS_CONTAINERS;
    if (s->pods)
        ids_match_pods(cri, pf, &s->match);
    else
        ids_match_ctrs(cri, cf, &s->match);
    s->ls.fill = stats_stream_fill;
    s->ls.release = stats_stream_release;
    if (s->pods)
        cri_cursor_open(&cri->sandboxes->cursors, &s->cur, cri->sandboxes->head);
    else
        cri_cursor_open(&cri->containers->cursors, &s->cur, cri->containers->head);
    list_stream_start(call, &s->ls);
}

void cri_stream_container_stats(struct cri_call *call)
{
    Runtime__V1__StreamContainerStatsRequest *req =
        (Runtime__V1__StreamContainerStatsRequest *)call->req;
    stats_stream(call, STATS_CONTAINERS, req->filter, NULL);
}

void cri_stream_pod_sandbox_stats(struct cri_call *call)
{
    Runtime__V1__StreamPodSandboxStatsRequest *req =
        (Runtime__V1__StreamPodSandboxStatsRequest *)call->req;
    stats_stream(call, STATS_PODS, NULL, req->filter);
}

void cri_stream_pod_sandbox_metrics(struct cri_call *call)
{
    stats_stream(call, STATS_METRICS, NULL, NULL);
}
