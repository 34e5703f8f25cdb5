/* net-driver: exercises src/net for the integration tests in tests/net.
 *
 * It changes real network configuration, so it refuses to run in the
 * machine's initial network namespace (the one of PID 1) unless given
 * --allow-init-netns: the tests run it inside namespaces they created.
 *
 *   net-driver [options] setup --pod ID --netns PATH [--port tcp:8080:80[:hostip]]...
 *   net-driver [options] teardown --pod ID [--async]
 *   net-driver [options] ips --pod ID
 *   net-driver [options] alloc --pod ID          (IPAM only)
 *   net-driver [options] alloc-threads --count N (N threads allocate at once)
 *   net-driver [options] release --pod ID        (IPAM only)
 *   net-driver [options] leases
 *   net-driver [options] pods                    (ids holding leases)
 *   net-driver [options] node-setup | node-teardown | status
 *   net-driver [options] sysctl --netns PATH KEY VALUE
 *   net-driver [options] setup-threads --count N  (N pods set up and torn down
 *                                                 by N threads at once)
 *   net-driver [options] bench --count N [--port ...] [--async]
 * options: --subnet CIDRS --bridge NAME --mtu N --ipam DIR */
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>

#include "net/internal.h"
#include "net/net.h"

#define MAX_PORTS 16

static struct net_config cfg;
static const char *pod;
static const char *netns_path;
static struct net_port_mapping ports[MAX_PORTS];
static char port_ips[MAX_PORTS][64];
static size_t nports;
static int count = 1;
static bool async_teardown; /* net_pod_teardown_async, waited for before exit */

static int fail(const struct err *e, const char *what)
{
    fprintf(stderr, "net-driver: %s: %s (errno %d)\n", what, e->msg, e->code);
    return e->code == ENOSPC ? 3 : e->code == EEXIST ? 4 : 1;
}

/* Kernels since 6.x give the initial namespaces fixed inode numbers
 * (PROC_NET_INIT_INO); where PID 1's namespace cannot be inspected (ptrace
 * restrictions), that number still identifies the initial one. */
#define PROC_NET_INIT_INO 0xEFFFFFF9U

static bool in_initial_netns(void)
{
    struct stat a, b;
    if (stat("/proc/self/ns/net", &a) < 0)
        return true; /* cannot tell: assume the worst */
    if (stat("/proc/1/ns/net", &b) == 0)
        return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    /* Fixed numbers are below PROC_DYNAMIC_FIRST (0xF0000000); namespaces
     * created later are numbered from there on. A kernel older than the fixed
     * net number with a hidden PID 1 is not detected: run it only in
     * namespaces made for testing, as the tests do. */
    return a.st_ino == PROC_NET_INIT_INO || a.st_ino < 0xF0000000U;
}

static int parse_port(const char *s)
{
    if (nports == MAX_PORTS)
        return -1;
    char proto[8];
    unsigned hp, cp;
    char ip[64] = "";
    if (sscanf(s, "%7[a-z]:%u:%u:%63s", proto, &hp, &cp, ip) < 3 || hp > 65535 || cp > 65535)
        return -1;
    struct net_port_mapping *m = &ports[nports];
    if (!strcmp(proto, "tcp"))
        m->protocol = NET_PROTO_TCP;
    else if (!strcmp(proto, "udp"))
        m->protocol = NET_PROTO_UDP;
    else if (!strcmp(proto, "sctp"))
        m->protocol = NET_PROTO_SCTP;
    else
        return -1;
    m->host_port = (uint16_t)hp;
    m->container_port = (uint16_t)cp;
    /* "[v6]" for IPv6 host addresses (they contain colons). */
    if (ip[0] == '[') {
        memmove(ip, ip + 1, strlen(ip));
        ip[strcspn(ip, "]")] = '\0';
    }
    snprintf(port_ips[nports], sizeof(port_ips[nports]), "%s", ip);
    m->host_ip = port_ips[nports];
    nports++;
    return 0;
}

static void print_result(const struct net_pod_result *r)
{
    printf("{\"host_ifname\": \"%s\", \"ips\": [", r->host_ifname);
    for (size_t i = 0; i < r->nips; i++)
        printf("%s{\"family\": %d, \"addr\": \"%s\", \"prefix\": %u, \"gateway\": \"%s\"}",
               i ? ", " : "", r->ips[i].family == AF_INET ? 4 : 6, r->ips[i].addr, r->ips[i].prefix,
               r->ips[i].gateway);
    printf("]}\n");
}

struct alloc_thread {
    pthread_t t;
    char pod[32];
    uint8_t addr[16];
    struct err err;
    int r;
};

static pthread_barrier_t barrier;

static void *alloc_main(void *data)
{
    struct alloc_thread *a = data;
    pthread_barrier_wait(&barrier);
    a->r = net_ipam_alloc(cfg.ipam_dir, &cfg.subnets[0], a->pod, NULL, a->addr, &a->err);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(v[0]), cmp_u64);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    int p99 = (n * 99 + 99) / 100 - 1;
    printf("%s: n=%d median=%.3fms p99=%.3fms mean=%.3fms\n", what, n, v[n / 2] / 1e6,
           v[p99 < n ? p99 : n - 1] / 1e6, (double)sum / n / 1e6);
}

/* A fresh network namespace, without changing the thread's own. */
static int new_netns(void)
{
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        return -1;
    int fd = -1;
    if (unshare(CLONE_NEWNET) == 0) {
        fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (setns(self, CLONE_NEWNET) < 0)
            abort();
    }
    close(self);
    return fd;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

struct pod_thread {
    pthread_t t;
    char id[48];
    int ns;
    struct net_pod_result res;
    struct err err;
    int r;
    bool teardown;
};

static void *pod_thread_main(void *data)
{
    struct pod_thread *p = data;
    pthread_barrier_wait(&barrier);
    if (p->teardown)
        p->r = (p->ns & 1) ? net_pod_teardown_async(&cfg, p->id, &p->err)
                           : net_pod_teardown(&cfg, p->id, &p->err);
    else
        p->r = net_pod_setup(&cfg, p->id, p->ns, ports, nports, &p->res, &p->err);
    return NULL;
}

static int run_pod_threads(struct pod_thread *p, bool teardown)
{
    if (pthread_barrier_init(&barrier, NULL, (unsigned)count) != 0)
        return -1;
    for (int i = 0; i < count; i++) {
        p[i].teardown = teardown;
        if (pthread_create(&p[i].t, NULL, pod_thread_main, &p[i]) != 0)
            return -1;
    }
    int rc = 0;
    for (int i = 0; i < count; i++) {
        pthread_join(p[i].t, NULL);
        if (p[i].r < 0)
            rc = fail(&p[i].err, teardown ? "teardown" : "setup");
    }
    pthread_barrier_destroy(&barrier);
    return rc;
}

static int setup_threads(void)
{
    struct pod_thread *p = calloc((size_t)count, sizeof(*p));
    if (!p || count < 1)
        return 1;
    for (int i = 0; i < count; i++) {
        snprintf(p[i].id, sizeof(p[i].id), "thr-%d-%d", (int)getpid(), i);
        p[i].ns = new_netns();
        if (p[i].ns < 0)
            return 1;
    }
    int rc = run_pod_threads(p, false);
    for (int i = 0; i < count && rc == 0; i++)
        printf("%s %s\n", p[i].id, p[i].res.ips[0].addr);
    fflush(stdout);
    if (rc == 0)
        rc = run_pod_threads(p, true);
    net_pod_teardown_wait();
    for (int i = 0; i < count; i++)
        close(p[i].ns);
    free(p);
    return rc;
}

static int bench(void)
{
    uint64_t *su = calloc((size_t)count, sizeof(uint64_t));
    uint64_t *td = calloc((size_t)count, sizeof(uint64_t));
    uint64_t *both = calloc((size_t)count, sizeof(uint64_t));
    if (!su || !td || !both)
        return 1;
    struct err e = {0};
    /* Node setup outside the loop, as the daemon does at start. */
    if (net_node_setup(&cfg, &e) < 0)
        return fail(&e, "node setup");
    int fds = count_fds();
    for (int i = 0; i < count; i++) {
        int ns = new_netns();
        if (ns < 0) {
            perror("net-driver: new netns");
            return 1;
        }
        char id[64];
        snprintf(id, sizeof(id), "bench-%d-%d", (int)getpid(), i);
        struct net_pod_result res;
        uint64_t t0 = now_mono_ns();
        if (net_pod_setup(&cfg, id, ns, ports, nports, &res, &e) < 0)
            return fail(&e, "setup");
        uint64_t t1 = now_mono_ns();
        int r =
            async_teardown ? net_pod_teardown_async(&cfg, id, &e) : net_pod_teardown(&cfg, id, &e);
        if (r < 0)
            return fail(&e, "teardown");
        uint64_t t2 = now_mono_ns();
        close(ns);
        su[i] = t1 - t0;
        td[i] = t2 - t1;
        both[i] = t2 - t0;
    }
    net_pod_teardown_wait();
    /* Every pod's sockets and namespace fds are closed again. */
    if (count_fds() != fds) {
        fprintf(stderr, "net-driver: %d file descriptors leaked\n", count_fds() - fds);
        return 1;
    }
    report("setup", su, count);
    report("teardown", td, count);
    report("setup+teardown", both, count);
    free(su);
    free(td);
    free(both);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"subnet", required_argument, NULL, 's'},
        {"bridge", required_argument, NULL, 'b'},
        {"mtu", required_argument, NULL, 'm'},
        {"ipam", required_argument, NULL, 'i'},
        {"pod", required_argument, NULL, 'p'},
        {"netns", required_argument, NULL, 'n'},
        {"port", required_argument, NULL, 'P'},
        {"count", required_argument, NULL, 'c'},
        {"allow-init-netns", no_argument, NULL, 'A'},
        {"async", no_argument, NULL, 'a'},
        {},
    };
    struct err e = {0};
    bool allow_init = false;
    net_config_init(&cfg);
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (net_config_set_subnets(&cfg, optarg, &e) < 0)
                return fail(&e, "--subnet");
            break;
        case 'b':
            if (net_config_set_bridge(&cfg, optarg, &e) < 0)
                return fail(&e, "--bridge");
            break;
        case 'm':
            cfg.mtu = (unsigned)atoi(optarg);
            break;
        case 'i':
            snprintf(cfg.ipam_dir, sizeof(cfg.ipam_dir), "%s", optarg);
            break;
        case 'p':
            pod = optarg;
            break;
        case 'n':
            netns_path = optarg;
            break;
        case 'P':
            if (parse_port(optarg) < 0) {
                fprintf(stderr, "net-driver: bad --port `%s`\n", optarg);
                return 2;
            }
            break;
        case 'c':
            count = atoi(optarg);
            break;
        case 'A':
            allow_init = true;
            break;
        case 'a':
            async_teardown = true;
            break;
        default:
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "net-driver: no command\n");
        return 2;
    }
    if (!allow_init && in_initial_netns()) {
        fprintf(stderr, "net-driver: refusing to run in the initial network namespace "
                        "(use a namespace made for testing, or --allow-init-netns)\n");
        return 2;
    }
    const char *cmd = argv[optind];
    if (!strcmp(cmd, "setup")) {
        if (!pod || !netns_path)
            return 2;
        int fd = open(netns_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(netns_path);
            return 1;
        }
        struct net_pod_result res;
        int r = net_pod_setup(&cfg, pod, fd, ports, nports, &res, &e);
        close(fd);
        if (r < 0)
            return fail(&e, "setup");
        print_result(&res);
    } else if (!strcmp(cmd, "teardown")) {
        if (!pod)
            return 2;
        int r = async_teardown ? net_pod_teardown_async(&cfg, pod, &e)
                               : net_pod_teardown(&cfg, pod, &e);
        net_pod_teardown_wait();
        if (r < 0)
            return fail(&e, "teardown");
    } else if (!strcmp(cmd, "ips")) {
        struct net_pod_result res;
        if (!pod || net_pod_ips(&cfg, pod, &res, &e) < 0)
            return pod ? fail(&e, "ips") : 2;
        print_result(&res);
    } else if (!strcmp(cmd, "alloc")) {
        if (!pod)
            return 2;
        for (size_t i = 0; i < cfg.nsubnets; i++) {
            uint8_t a[16];
            char text[INET6_ADDRSTRLEN];
            if (net_ipam_alloc(cfg.ipam_dir, &cfg.subnets[i], pod, NULL, a, &e) < 0)
                return fail(&e, "alloc");
            net_addr_format(cfg.subnets[i].family, a, text, sizeof(text));
            printf("%s\n", text);
        }
    } else if (!strcmp(cmd, "alloc-threads")) {
        struct alloc_thread *t = calloc((size_t)count, sizeof(*t));
        if (!t || count < 1 || pthread_barrier_init(&barrier, NULL, (unsigned)count) != 0)
            return 1;
        for (int i = 0; i < count; i++) {
            snprintf(t[i].pod, sizeof(t[i].pod), "thread-%d-%d", (int)getpid(), i);
            if (pthread_create(&t[i].t, NULL, alloc_main, &t[i]) != 0)
                return 1;
        }
        int rc = 0;
        for (int i = 0; i < count; i++) {
            pthread_join(t[i].t, NULL);
            if (t[i].r < 0) {
                rc = fail(&t[i].err, "alloc");
                continue;
            }
            char text[INET6_ADDRSTRLEN];
            net_addr_format(cfg.subnets[0].family, t[i].addr, text, sizeof(text));
            printf("%s %s\n", t[i].pod, text);
        }
        free(t);
        return rc;
    } else if (!strcmp(cmd, "release")) {
        if (!pod || net_ipam_release(cfg.ipam_dir, pod, &e) < 0)
            return pod ? fail(&e, "release") : 2;
    } else if (!strcmp(cmd, "leases")) {
        struct net_ipam_lease *l = NULL;
        size_t n = 0;
        if (net_ipam_list(cfg.ipam_dir, &l, &n, &e) < 0)
            return fail(&e, "leases");
        for (size_t i = 0; i < n; i++) {
            char text[INET6_ADDRSTRLEN];
            net_addr_format(l[i].family, l[i].addr, text, sizeof(text));
            printf("%s %s%s\n", text, l[i].pod_id, l[i].hostports ? " hostports" : "");
        }
        free(l);
    } else if (!strcmp(cmd, "pods")) {
        char **ids = NULL;
        size_t n = 0;
        if (net_pod_ids(&cfg, &ids, &n, &e) < 0)
            return fail(&e, "pods");
        for (size_t i = 0; i < n; i++)
            printf("%s\n", ids[i]);
        net_pod_ids_free(ids, n);
    } else if (!strcmp(cmd, "node-setup")) {
        if (net_node_setup(&cfg, &e) < 0)
            return fail(&e, "node-setup");
    } else if (!strcmp(cmd, "node-teardown")) {
        if (net_node_teardown(&cfg, &e) < 0)
            return fail(&e, "node-teardown");
    } else if (!strcmp(cmd, "status")) {
        bool ready;
        char reason[512];
        if (net_status(&cfg, &ready, reason, sizeof(reason)) < 0)
            return 1;
        printf("%s%s%s\n", ready ? "ready" : "not-ready", ready ? "" : ": ", reason);
    } else if (!strcmp(cmd, "sysctl")) {
        if (!netns_path || optind + 2 >= argc)
            return 2;
        int fd = open(netns_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(netns_path);
            return 1;
        }
        int r = net_sysctl_set_in(fd, argv[optind + 1], argv[optind + 2], &e);
        close(fd);
        if (r < 0)
            return fail(&e, "sysctl");
    } else if (!strcmp(cmd, "setup-threads")) {
        return setup_threads();
    } else if (!strcmp(cmd, "bench")) {
        return bench();
    } else {
        fprintf(stderr, "net-driver: unknown command `%s`\n", cmd);
        return 2;
    }
    return 0;
}
