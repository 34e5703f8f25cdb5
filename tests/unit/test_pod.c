/* store (pod records) and pod (sysctl classes, /etc files): pure logic. */
#include "harness.h"

#include <sched.h>

#include "cri/internal.h"
#include "pod/pod.h"
#include "store/store.h"

static void record_roundtrip(void **state)
{
    (void)state;
    struct store_pod p = {0};
    assert_int_equal(store_id_new(p.id), 0);
    assert_true(store_id_valid(p.id));
    p.state = STORE_POD_NOTREADY;
    p.created_ns = 1700000000123456789ULL;
    p.runtime_handler = strdup("");
    uint8_t cfg[] = {0, 1, 2, 0xff, 0x80, 'x', 0};
    for (size_t len = 0; len <= sizeof(cfg); len++) { /* every base64 padding */
        free(p.config);
        p.config = malloc(len + 1);
        memcpy(p.config, cfg, len);
        p.config_len = len;
        p.nips = 2;
        strcpy(p.ips[0], "10.88.0.2");
        strcpy(p.ips[1], "fd00::2");
        p.init_pid = 4242;
        p.init_start = 987654;
        free(p.cgroup_path);
        p.cgroup_path = strdup("/kubepods/pod1/abc");
        char *json = NULL;
        size_t jlen = 0;
        struct err err = {0};
        assert_int_equal(store_pod_to_json(&p, &json, &jlen, &err), 0);
        struct store_pod q;
        if (store_pod_from_json(json, jlen, &q, &err) < 0)
            fail_msg("parse back `%s`: %s", json, err.msg);
        assert_string_equal(q.id, p.id);
        assert_int_equal(q.state, STORE_POD_NOTREADY);
        assert_true(q.created_ns == p.created_ns);
        assert_int_equal(q.config_len, len);
        assert_memory_equal(q.config, cfg, len);
        assert_int_equal(q.nips, 2);
        assert_string_equal(q.ips[1], "fd00::2");
        assert_int_equal(q.init_pid, 4242);
        assert_string_equal(q.cgroup_path, "/kubepods/pod1/abc");
        store_pod_clear(&q);
        free(json);
    }
    store_pod_clear(&p);
}

static void record_malformed(void **state)
{
    (void)state;
    const char *id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    char good[1024];
    snprintf(good, sizeof(good),
             "{\"version\":1,\"id\":\"%s\",\"state\":\"ready\",\"created\":1,"
             "\"runtimeHandler\":\"\",\"config\":\"AAE=\",\"ips\":[],\"initPid\":0,"
             "\"initStart\":0}",
             id);
    struct store_pod q;
    struct err err = {0};
    assert_int_equal(store_pod_from_json(good, strlen(good), &q, &err), 0);
    store_pod_clear(&q);
    const char *bad[] = {
        "",
        "[]",
        "{\"version\":2}",
        "{\"version\":1,\"id\":\"../../etc\"}",
        "{\"version\":1,\"id\":\"0123\",\"state\":\"ready\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(store_pod_from_json(bad[i], strlen(bad[i]), &q, &err), -EINVAL);
    /* one field at a time */
    const char *subs[][2] = {
        {"\"ready\"", "\"running\""},
        {"\"AAE=\"", "\"A=AE\""},
        {"\"AAE=\"", "\"AA*=\""},
        {"[]", "[\"not-an-ip\"]"},
        {"[]", "[\"1.1.1.1\",\"::1\",\"2.2.2.2\"]"},
        {"\"initPid\":0", "\"initPid\":-1"},
        {"\"created\":1", "\"created\":\"x\""},
        {"\"initStart\":0}", "\"initStart\":0,\"cgroup\":\"/a/../../b\"}"},
        {"\"initStart\":0}", "\"initStart\":0,\"cgroup\":\"rel\"}"},
    };
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char text[1100];
        const char *at = strstr(good, subs[i][0]);
        assert_non_null(at);
        snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good), good, subs[i][1],
                 at + strlen(subs[i][0]));
        if (store_pod_from_json(text, strlen(text), &q, &err) != -EINVAL)
            fail_msg("accepted `%s`", text);
    }
}

static void ids(void **state)
{
    (void)state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    assert_int_equal(store_id_new(a), 0);
    assert_int_equal(store_id_new(b), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strlen(a), 64);
    assert_false(store_id_valid("ABCDEF"));
    assert_false(store_id_valid(""));
    char upper[STORE_ID_LEN + 1];
    memset(upper, 'A', STORE_ID_LEN);
    upper[STORE_ID_LEN] = '\0';
    assert_false(store_id_valid(upper));
}

static void sysctl_classes(void **state)
{
    (void)state;
    assert_int_equal(pod_sysctl_namespace("net.ipv4.ip_forward"), CLONE_NEWNET);
    assert_int_equal(pod_sysctl_namespace("net/ipv4/conf/eth0.1/rp_filter"), CLONE_NEWNET);
    assert_int_equal(pod_sysctl_namespace("kernel.shmmax"), CLONE_NEWIPC);
    assert_int_equal(pod_sysctl_namespace("kernel.msgmax"), CLONE_NEWIPC);
    assert_int_equal(pod_sysctl_namespace("kernel.sem"), CLONE_NEWIPC);
    assert_int_equal(pod_sysctl_namespace("fs.mqueue.msg_max"), CLONE_NEWIPC);
    const char *bad[] = {
        "kernel.panic", "vm.swappiness", "kernel.semx", "net", "net..ipv4", "net/../kernel/panic",
        "/net/ipv4",    "net.ipv4.",     "net.ipv4 x",  "",    "fs.mqueue"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (pod_sysctl_namespace(bad[i]) >= 0)
            fail_msg("`%s` accepted", bad[i]);
    char path[256];
    assert_int_equal(pod_sysctl_path("net.ipv4.ip_forward", path, sizeof(path)), 0);
    assert_string_equal(path, "net/ipv4/ip_forward");
    assert_int_equal(pod_sysctl_path("net/ipv4/conf/eth0.1/rp_filter", path, sizeof(path)), 0);
    assert_string_equal(path, "net/ipv4/conf/eth0.1/rp_filter");
}

static void resolv_conf(void **state)
{
    (void)state;
    const char *servers[] = {"10.96.0.10", "fd00::a"};
    const char *searches[] = {"ns.svc.cluster.local", "cluster.local"};
    const char *options[] = {"ndots:5"};
    struct pod_sandbox_spec s = {.dns_servers = servers,
                                 .n_dns_servers = 2,
                                 .dns_searches = searches,
                                 .n_dns_searches = 2,
                                 .dns_options = options,
                                 .n_dns_options = 1};
    struct buf b = {0};
    struct err err = {0};
    assert_int_equal(pod_resolv_conf_build(&s, &b, &err), 0);
    buf_append(&b, "", 1);
    assert_string_equal((char *)b.data, "nameserver 10.96.0.10\nnameserver fd00::a\n"
                                        "search ns.svc.cluster.local cluster.local\n"
                                        "options ndots:5\n");
    buf_free(&b);
    const char *inject[] = {"a\nnameserver 6.6.6.6"};
    s.dns_searches = inject;
    s.n_dns_searches = 1;
    assert_int_equal(pod_resolv_conf_build(&s, &b, &err), -EINVAL);
    buf_free(&b);
    const char *notip[] = {"dns.example"};
    s.dns_searches = searches;
    s.dns_servers = notip;
    s.n_dns_servers = 1;
    assert_int_equal(pod_resolv_conf_build(&s, &b, &err), -EINVAL);
    buf_free(&b);
}

static void spec_check(void **state)
{
    (void)state;
    struct pod_sysctl net[] = {{"net.core.somaxconn", "1024"}};
    struct pod_sysctl ipc[] = {{"kernel.shmmax", "1"}};
    struct pod_sysctl bad[] = {{"net.core.somaxconn", "1\n2"}};
    struct err err = {0};
    struct pod_sandbox_spec s = {.hostname = "web-0", .sysctls = net, .n_sysctls = 1};
    assert_int_equal(pod_sandbox_spec_check(&s, &err), 0);
    s.host_network = true;
    assert_int_equal(pod_sandbox_spec_check(&s, &err), -EINVAL);
    s.host_network = false;
    s.sysctls = ipc;
    s.host_ipc = true;
    assert_int_equal(pod_sandbox_spec_check(&s, &err), -EINVAL);
    s.host_ipc = false;
    s.sysctls = bad;
    assert_int_equal(pod_sandbox_spec_check(&s, &err), -EINVAL);
    s.n_sysctls = 0;
    s.hostname = "bad host";
    assert_int_equal(pod_sandbox_spec_check(&s, &err), -EINVAL);
    struct net_pod_result r = {.nips = 1};
    strcpy(r.ips[0].addr, "10.88.0.7");
    struct buf b = {0};
    assert_int_equal(pod_hosts_build("web-0", &r, &b), 0);
    buf_append(&b, "", 1);
    assert_non_null(strstr((char *)b.data, "127.0.0.1\tlocalhost\n"));
    assert_non_null(strstr((char *)b.data, "10.88.0.7\tweb-0\n"));
    buf_free(&b);
}

static void resources(void **state)
{
    (void)state;
    assert_null(cri_resources_to_oci(NULL));
    Runtime__V1__LinuxContainerResources r = RUNTIME__V1__LINUX_CONTAINER_RESOURCES__INIT;
    assert_null(cri_resources_to_oci(&r)); /* nothing set */
    r.cpu_shares = 512;
    r.cpu_quota = 50000;
    r.cpu_period = 100000;
    r.memory_limit_in_bytes = 64 << 20;
    r.cpuset_cpus = "0-1";
    Runtime__V1__LinuxContainerResources__UnifiedEntry u =
        RUNTIME__V1__LINUX_CONTAINER_RESOURCES__UNIFIED_ENTRY__INIT;
    u.key = "memory.high";
    u.value = "50000000";
    Runtime__V1__LinuxContainerResources__UnifiedEntry *up[] = {&u};
    r.n_unified = 1;
    r.unified = up;
    json_t *o = cri_resources_to_oci(&r);
    assert_non_null(o);
    char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"cpu\":{\"cpus\":\"0-1\",\"period\":100000,\"quota\":50000,"
                              "\"shares\":512},\"memory\":{\"limit\":67108864},"
                              "\"unified\":{\"memory.high\":\"50000000\"}}");
    free(text);
    json_decref(o);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(resources),        cmocka_unit_test(record_roundtrip),
    cmocka_unit_test(record_malformed), cmocka_unit_test(ids),
    cmocka_unit_test(sysctl_classes),   cmocka_unit_test(resolv_conf),
    cmocka_unit_test(spec_check),
};

UNIT_MAIN(tests)
