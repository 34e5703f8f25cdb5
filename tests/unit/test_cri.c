/* CRI layer logic: the errno → status map and pod CIDR validation. */
#include "harness.h"

#include "cri/internal.h"
#include "cri/validate.h"

static void status_map(void **state)
{
    assert_int_equal(cri_status_from_errno(0), GRPC_STATUS_OK);
    assert_int_equal(cri_status_from_errno(ENOENT), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(cri_status_from_errno(-ENOENT), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(cri_status_from_errno(EINVAL), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cri_status_from_errno(EEXIST), GRPC_STATUS_ALREADY_EXISTS);
    assert_int_equal(cri_status_from_errno(EFBIG), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(cri_status_from_errno(EPERM), GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(cri_status_from_errno(ENOSPC), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(cri_status_from_errno(ETIMEDOUT), GRPC_STATUS_DEADLINE_EXCEEDED);
    assert_int_equal(cri_status_from_errno(ENOSYS), GRPC_STATUS_UNIMPLEMENTED);
    assert_int_equal(cri_status_from_errno(EIO), GRPC_STATUS_INTERNAL);
    assert_int_equal(cri_status_from_errno(EADDRINUSE), GRPC_STATUS_FAILED_PRECONDITION);
}

static void names(void **state)
{
    /* what kubelet and critest send */
    const char *sub_ok[] = {"web",
                            "coredns-5d78c9869d-x2x7l",
                            "kube-proxy.node-1",
                            "PodSandbox-for-create-test-1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                            "a",
                            "0",
                            "a-b.c-d"};
    for (size_t i = 0; i < ARRAY_SIZE(sub_ok); i++)
        if (!cri_dns_subdomain_valid(sub_ok[i], CRI_DNS_SUBDOMAIN_MAX))
            fail_msg("`%s` should be a subdomain", sub_ok[i]);
    const char *sub_bad[] = {"",
                             "-a",
                             "a-",
                             ".a",
                             "a.",
                             "a..b",
                             "a_b",
                             "a b",
                             "a/b",
                             "x\n2026-01-01T00:00:00Z error FORGED",
                             "caf\xc3\xa9",
                             "a.-b"};
    for (size_t i = 0; i < ARRAY_SIZE(sub_bad); i++)
        if (cri_dns_subdomain_valid(sub_bad[i], CRI_DNS_SUBDOMAIN_MAX))
            fail_msg("`%s` should not be a subdomain", sub_bad[i]);
    assert_false(cri_dns_label_valid("a.b", CRI_DNS_LABEL_MAX));
    assert_true(cri_dns_label_valid("kube-system", CRI_DNS_LABEL_MAX));
    char s[300];
    memset(s, 'a', sizeof(s));
    s[63] = '\0';
    assert_true(cri_dns_label_valid(s, CRI_DNS_LABEL_MAX));
    s[63] = 'a';
    s[64] = '\0';
    assert_false(cri_dns_label_valid(s, CRI_DNS_LABEL_MAX));
    s[64] = 'a';
    s[253] = '\0';
    assert_true(cri_dns_subdomain_valid(s, CRI_DNS_SUBDOMAIN_MAX));
    s[253] = 'a';
    s[254] = '\0';
    assert_false(cri_dns_subdomain_valid(s, CRI_DNS_SUBDOMAIN_MAX));

    Runtime__V1__PodSandboxMetadata md = RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
    md.name = "web";
    md.namespace_ = "default";
    md.uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    struct err err = {0};
    assert_int_equal(cri_pod_metadata_check(&md, &err), 0);
    md.uid = "cri-test-uid1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    assert_int_equal(cri_pod_metadata_check(&md, &err), 0);
    md.uid = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"; /* a static pod's hash */
    assert_int_equal(cri_pod_metadata_check(&md, &err), 0);
    md.uid = "../x";
    assert_int_equal(cri_pod_metadata_check(&md, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "uid"));
    md.uid = "u";
    md.namespace_ = "kube.system";
    assert_int_equal(cri_pod_metadata_check(&md, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "namespace"));
    md.namespace_ = "default";
    md.name = "x\ny";
    assert_int_equal(cri_pod_metadata_check(&md, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "name"));
    md.name = "";
    assert_int_equal(cri_pod_metadata_check(&md, &err), -EINVAL);
    assert_int_equal(cri_pod_metadata_check(NULL, &err), -EINVAL);

    Runtime__V1__ContainerMetadata cm = RUNTIME__V1__CONTAINER_METADATA__INIT;
    cm.name = "container-with-symlink-host-path-test-1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    assert_int_equal(cri_container_metadata_check(&cm, &err), 0);
    cm.name = "a.b";
    assert_int_equal(cri_container_metadata_check(&cm, &err), -EINVAL);
    cm.name = "a\tb";
    assert_int_equal(cri_container_metadata_check(&cm, &err), -EINVAL);
    cm.name = "";
    assert_int_equal(cri_container_metadata_check(&cm, &err), -EINVAL);
}

static void namespace_modes(void **state)
{
    Runtime__V1__NamespaceOption ns = RUNTIME__V1__NAMESPACE_OPTION__INIT;
    struct err err = {0};
    assert_int_equal(cri_pod_namespace_check(NULL, &err), 0);
    assert_int_equal(cri_pod_namespace_check(&ns, &err), 0);
    const int pid_ok[] = {RUNTIME__V1__NAMESPACE_MODE__POD, RUNTIME__V1__NAMESPACE_MODE__CONTAINER,
                          RUNTIME__V1__NAMESPACE_MODE__NODE};
    for (size_t i = 0; i < ARRAY_SIZE(pid_ok); i++) {
        ns.pid = pid_ok[i];
        assert_int_equal(cri_pod_namespace_check(&ns, &err), 0);
    }
    ns.pid = RUNTIME__V1__NAMESPACE_MODE__TARGET;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "needs target_id"));
    ns.target_id = "abc";
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "`abc`"));
    ns.target_id = "";
    ns.pid = 9;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "undefined namespace mode 9"));
    ns.pid = -1;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
    ns.pid = RUNTIME__V1__NAMESPACE_MODE__POD;
    const int bad_net[] = {RUNTIME__V1__NAMESPACE_MODE__CONTAINER,
                           RUNTIME__V1__NAMESPACE_MODE__TARGET, 7};
    for (size_t i = 0; i < ARRAY_SIZE(bad_net); i++) {
        ns.network = bad_net[i];
        assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "network"));
        ns.network = RUNTIME__V1__NAMESPACE_MODE__POD;
        ns.ipc = bad_net[i];
        assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "ipc"));
        ns.ipc = RUNTIME__V1__NAMESPACE_MODE__NODE;
    }
    Runtime__V1__UserNamespace u = RUNTIME__V1__USER_NAMESPACE__INIT;
    ns.userns_options = &u;
    u.mode = RUNTIME__V1__NAMESPACE_MODE__NODE;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), 0);
    u.mode = RUNTIME__V1__NAMESPACE_MODE__TARGET;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
    u.mode = 12;
    assert_int_equal(cri_pod_namespace_check(&ns, &err), -EINVAL);
}

/* KEP-127: POD with one uid and one gid mapping of container ID 0, or
 * NODE without mappings; the rest refused, naming the field. */
static void userns_options(void **state)
{
    (void)state;
    struct err err = {0};
    Runtime__V1__IDMapping m = RUNTIME__V1__IDMAPPING__INIT, m2 = RUNTIME__V1__IDMAPPING__INIT;
    m.host_id = 65536;
    m.length = 65536;
    m2 = m;
    Runtime__V1__IDMapping *one[] = {&m}, *two[] = {&m, &m2};
    Runtime__V1__UserNamespace u = RUNTIME__V1__USER_NAMESPACE__INIT;
    assert_int_equal(cri_userns_check(NULL, &err), 0);
    u.mode = RUNTIME__V1__NAMESPACE_MODE__NODE;
    assert_int_equal(cri_userns_check(&u, &err), 0);
    u.n_uids = u.n_gids = 1;
    u.uids = u.gids = one;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "NODE takes no mappings"));
    u.mode = RUNTIME__V1__NAMESPACE_MODE__POD;
    assert_int_equal(cri_userns_check(&u, &err), 0);
    u.n_uids = 2;
    u.uids = two;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "uids: exactly one mapping"));
    u.n_uids = 1;
    u.uids = one;
    u.n_gids = 0;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "gids: exactly one mapping"));
    u.n_gids = 1;
    m.container_id = 1;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "container ID 0 must be mapped"));
    m.container_id = 0;
    m.length = 0;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    m.length = 65536;
    m.host_id = UINT32_MAX - 10;
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    m.host_id = 65536;
    m.length = 65535; /* the pod's init, 65535, would be unmapped */
    assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "uids: length 65535 is below 65536"));
    m.length = 2 * 65536;
    assert_int_equal(cri_userns_check(&u, &err), 0);
    m.length = 65536;
    const int bad[] = {RUNTIME__V1__NAMESPACE_MODE__CONTAINER, RUNTIME__V1__NAMESPACE_MODE__TARGET};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        u.mode = bad[i];
        assert_int_equal(cri_userns_check(&u, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "userns_options.mode"));
    }
}

static void port_conflicts(void **state)
{
    Runtime__V1__PortMapping a = RUNTIME__V1__PORT_MAPPING__INIT,
                             b = RUNTIME__V1__PORT_MAPPING__INIT;
    a.host_port = b.host_port = 8080;
    a.container_port = 80;
    b.container_port = 81;
    a.host_ip = b.host_ip = "";
    assert_true(cri_port_mappings_conflict(&a, &b));
    b.protocol = RUNTIME__V1__PROTOCOL__UDP;
    assert_false(cri_port_mappings_conflict(&a, &b));
    b.protocol = RUNTIME__V1__PROTOCOL__TCP;
    b.host_port = 8081;
    assert_false(cri_port_mappings_conflict(&a, &b));
    b.host_port = 8080;
    const char *overlap[][2] = {{"0.0.0.0", "10.0.0.1"},  {"", "fd00::1"},
                                {"::", "10.0.0.1"},       {"10.0.0.1", "10.0.0.1"},
                                {"fd00::1", "fd00:0::1"}, {"0.0.0.0", "::"}};
    for (size_t i = 0; i < ARRAY_SIZE(overlap); i++) {
        a.host_ip = (char *)overlap[i][0];
        b.host_ip = (char *)overlap[i][1];
        if (!cri_port_mappings_conflict(&a, &b) || !cri_port_mappings_conflict(&b, &a))
            fail_msg("`%s` and `%s` should overlap", overlap[i][0], overlap[i][1]);
    }
    const char *apart[][2] = {{"10.0.0.1", "10.0.0.2"}, {"10.0.0.1", "fd00::1"}};
    for (size_t i = 0; i < ARRAY_SIZE(apart); i++) {
        a.host_ip = (char *)apart[i][0];
        b.host_ip = (char *)apart[i][1];
        if (cri_port_mappings_conflict(&a, &b))
            fail_msg("`%s` and `%s` should not overlap", apart[i][0], apart[i][1]);
    }
    a.host_ip = b.host_ip = "";
    a.host_port = b.host_port = 0; /* no host port: claims nothing */
    assert_false(cri_port_mappings_conflict(&a, &b));
    char buf[128];
    a.host_port = 443;
    a.protocol = RUNTIME__V1__PROTOCOL__SCTP;
    a.host_ip = "10.1.2.3";
    cri_port_mapping_format(&a, buf, sizeof(buf));
    assert_string_equal(buf, "sctp/443 on 10.1.2.3");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(names),          cmocka_unit_test(namespace_modes),
    cmocka_unit_test(userns_options), cmocka_unit_test(port_conflicts),
    cmocka_unit_test(status_map),
};
UNIT_MAIN(tests)
