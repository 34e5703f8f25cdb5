/* cri/container_spec: ContainerConfig + image config + facts → OCI spec. */
#include "harness.h"

#include <signal.h>

#include "cri/container_spec.h"

static const char passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                             "# a comment\n"
                             "app:x:1000:1001:app:/home/app:/bin/sh\n"
                             "nobody:x:65534:65534::/:/bin/false\n";
static const char group[] = "root:x:0:\n"
                            "appgrp:x:1001:\n"
                            "audio:x:29:app,other\n"
                            "video:x:44:other\n"
                            "staff:x:50:app\n";

/* A config with a name and the given pieces filled in by the caller. */
struct t {
    Runtime__V1__ContainerConfig cfg;
    Runtime__V1__LinuxContainerConfig lx;
    Runtime__V1__LinuxContainerSecurityContext sc;
    Runtime__V1__Capability caps;
    Runtime__V1__SecurityProfile seccomp;
    Runtime__V1__NamespaceOption ns;
    Runtime__V1__LinuxContainerResources res;
    Runtime__V1__Int64Value user, grp;
    struct ctr_spec_input in;
    struct ctr_spec out;
    struct err err;
    json_t *image;
};

static void t_init(struct t *t, const char *image_json)
{
    memset(t, 0, sizeof(*t));
    runtime__v1__container_config__init(&t->cfg);
    runtime__v1__linux_container_config__init(&t->lx);
    runtime__v1__linux_container_security_context__init(&t->sc);
    runtime__v1__capability__init(&t->caps);
    runtime__v1__security_profile__init(&t->seccomp);
    runtime__v1__namespace_option__init(&t->ns);
    runtime__v1__linux_container_resources__init(&t->res);
    runtime__v1__int64_value__init(&t->user);
    runtime__v1__int64_value__init(&t->grp);
    t->cfg.linux = &t->lx;
    t->lx.security_context = &t->sc;
    t->image = json_loads(image_json ? image_json : "{\"Cmd\":[\"sh\"]}", 0, NULL);
    assert_non_null(t->image);
    t->in = (struct ctr_spec_input){.id = "c1",
                                    .cfg = &t->cfg,
                                    .image_config = t->image,
                                    .passwd = passwd,
                                    .group = group,
                                    .rootfs = "/r",
                                    .pod_dir = "/pod",
                                    .pod_pid_ns = true,
                                    .host = {.rro = true, .oom_score_adj_min = -1000}};
}

static void t_free(struct t *t)
{
    ctr_spec_clear(&t->out);
    json_decref(t->image);
}

static int build(struct t *t)
{
    ctr_spec_clear(&t->out);
    t->err = (struct err){0};
    return ctr_spec_build(&t->in, &t->out, &t->err);
}

static char *dump(json_t *j)
{
    return j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : strdup("(none)");
}

static void assert_json(json_t *j, const char *want)
{
    char *got = dump(j);
    if (strcmp(got, want))
        fail_msg("got  %s\nwant %s", got, want);
    free(got);
}

/* The mount at dst. */
static json_t *mount_at(json_t *mounts, const char *dst)
{
    for (size_t i = 0; i < json_array_size(mounts); i++) {
        json_t *x = json_array_get(mounts, i);
        if (!strcmp(json_string_value(json_object_get(x, "destination")), dst))
            return x;
    }
    fail_msg("no mount at %s", dst);
    return NULL;
}

static json_t *path(json_t *root, const char *a, const char *b)
{
    json_t *x = json_object_get(root, a);
    return b ? json_object_get(x, b) : x;
}

static bool has_string(json_t *arr, const char *s)
{
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (!strcmp(json_string_value(json_array_get(arr, i)), s))
            return true;
    return false;
}

/* Kubernetes' table: command replaces Entrypoint and drops Cmd; args
 * replace Cmd. */
static void args_four_cases(void **state)
{
    (void)state;
    char *cmd[] = {"/c"}, *args[] = {"a1", "a2"};
    json_t *img = json_loads("{\"Entrypoint\":[\"/ep\",\"x\"],\"Cmd\":[\"c1\"]}", 0, NULL);
    Runtime__V1__ContainerConfig c = RUNTIME__V1__CONTAINER_CONFIG__INIT;
    json_t *a = ctr_spec_args(&c, img);
    assert_json(a, "[\"/ep\",\"x\",\"c1\"]");
    json_decref(a);
    c.n_args = 2;
    c.args = args;
    a = ctr_spec_args(&c, img);
    assert_json(a, "[\"/ep\",\"x\",\"a1\",\"a2\"]");
    json_decref(a);
    c.n_command = 1;
    c.command = cmd;
    a = ctr_spec_args(&c, img);
    assert_json(a, "[\"/c\",\"a1\",\"a2\"]");
    json_decref(a);
    c.n_args = 0;
    a = ctr_spec_args(&c, img);
    assert_json(a, "[\"/c\"]");
    json_decref(a);
    json_decref(img);
}

static void no_command_refused(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, "{}");
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "no command"));
    t_free(&t);
}

static void env_later_wins(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, "{\"Cmd\":[\"sh\"],\"Env\":[\"PATH=/img\",\"A=1\",\"B=2\"]}");
    Runtime__V1__KeyValue kv1 = RUNTIME__V1__KEY_VALUE__INIT, kv2 = RUNTIME__V1__KEY_VALUE__INIT;
    kv1.key = "A";
    kv1.value = (ProtobufCBinaryData){3, (uint8_t *)"cfg"};
    kv2.key = "C";
    kv2.value = (ProtobufCBinaryData){3, (uint8_t *)"x=y"};
    Runtime__V1__KeyValue *envs[] = {&kv1, &kv2};
    t.cfg.envs = envs;
    t.cfg.n_envs = 2;
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "process", "env"), "[\"PATH=/img\",\"A=cfg\",\"B=2\",\"C=x=y\"]");
    /* not UTF-8: each bad byte becomes U+FFFD; a NUL is refused */
    kv2.value = (ProtobufCBinaryData){5, (uint8_t *)"a\xff\xc3\xa9\xe0"};
    assert_int_equal(build(&t), 0);
    assert_json(json_array_get(path(t.out.spec, "process", "env"), 3),
                "\"C=a\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\"");
    kv2.value = (ProtobufCBinaryData){3, (uint8_t *)"a\0b"};
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "NUL"));
    kv2.value = (ProtobufCBinaryData){0, NULL};
    kv1.key = "BAD=KEY";
    assert_int_equal(build(&t), -EINVAL);
    t_free(&t);
}

static void env_default_path(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    assert_int_equal(build(&t), 0);
    assert_true(has_string(path(t.out.spec, "process", "env"),
                           "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    assert_json(path(t.out.spec, "process", "cwd"), "\"/\"");
    t_free(&t);
}

static void user_from_image(void **state)
{
    (void)state;
    struct t t;
    /* a name: its uid and primary group, and every group listing it */
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"app\"}");
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 1000);
    assert_int_equal(t.out.gid, 1001);
    assert_json(path(path(t.out.spec, "process", "user"), "additionalGids", NULL), "[1001,29,50]");
    t_free(&t);
    /* uid:group name */
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"1000:video\"}");
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 1000);
    assert_int_equal(t.out.gid, 44);
    t_free(&t);
    /* a uid the image does not list: gid 0 */
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"4242\"}");
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 4242);
    assert_int_equal(t.out.gid, 0);
    assert_int_equal(t.out.n_groups, 1);
    t_free(&t);
    /* a name the image lacks */
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"ghost\"}");
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "`ghost`"));
    t_free(&t);
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"app:ghosts\"}");
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "`ghosts`"));
    t_free(&t);
    /* no /etc/passwd at all: root */
    t_init(&t, NULL);
    t.in.passwd = t.in.group = NULL;
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 0);
    assert_int_equal(t.out.gid, 0);
    t_free(&t);
}

static void user_from_config(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, "{\"Cmd\":[\"sh\"],\"User\":\"nobody\"}");
    t.user.value = 1000;
    t.sc.run_as_user = &t.user;
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 1000);
    assert_int_equal(t.out.gid, 1001); /* from the image's passwd entry */
    t.grp.value = 7;
    t.sc.run_as_group = &t.grp;
    int64_t extra[] = {3000};
    t.sc.supplemental_groups = extra;
    t.sc.n_supplemental_groups = 1;
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.gid, 7);
    assert_json(path(path(t.out.spec, "process", "user"), "additionalGids", NULL),
                "[7,29,50,3000]");
    /* Strict: none of the image's groups */
    t.sc.supplemental_groups_policy = RUNTIME__V1__SUPPLEMENTAL_GROUPS_POLICY__Strict;
    assert_int_equal(build(&t), 0);
    assert_json(path(path(t.out.spec, "process", "user"), "additionalGids", NULL), "[7,3000]");
    t_free(&t);
    /* run_as_username */
    t_init(&t, NULL);
    t.sc.run_as_username = "app";
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.uid, 1000);
    t.sc.run_as_username = "ghost";
    assert_int_equal(build(&t), -EINVAL);
    t_free(&t);
}

static void capabilities(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    t.sc.capabilities = &t.caps;
    assert_int_equal(build(&t), 0);
    json_t *b = path(path(t.out.spec, "process", "capabilities"), "bounding", NULL);
    assert_int_equal(json_array_size(b), 14);
    assert_true(has_string(b, "CAP_CHOWN"));
    assert_false(has_string(b, "CAP_SYS_ADMIN"));
    char *add[] = {"NET_ADMIN", "cap_sys_time"}, *drop[] = {"CHOWN"}, *all[] = {"ALL"};
    t.caps.add_capabilities = add;
    t.caps.n_add_capabilities = 2;
    t.caps.drop_capabilities = drop;
    t.caps.n_drop_capabilities = 1;
    assert_int_equal(build(&t), 0);
    b = path(path(t.out.spec, "process", "capabilities"), "effective", NULL);
    assert_true(has_string(b, "CAP_NET_ADMIN"));
    assert_true(has_string(b, "CAP_SYS_TIME"));
    assert_false(has_string(b, "CAP_CHOWN"));
    /* drop ALL, add one */
    t.caps.drop_capabilities = all;
    t.caps.add_capabilities = add;
    t.caps.n_add_capabilities = 1;
    assert_int_equal(build(&t), 0);
    assert_json(path(path(t.out.spec, "process", "capabilities"), "permitted", NULL),
                "[\"CAP_NET_ADMIN\"]");
    /* add ALL */
    t.caps.n_drop_capabilities = 0;
    t.caps.add_capabilities = all;
    assert_int_equal(build(&t), 0);
    assert_int_equal(
        json_array_size(path(path(t.out.spec, "process", "capabilities"), "bounding", NULL)), 41);
    /* ambient: in the inheritable and ambient sets */
    t.caps.n_add_capabilities = 0;
    char *amb[] = {"NET_BIND_SERVICE"};
    t.caps.add_ambient_capabilities = amb;
    t.caps.n_add_ambient_capabilities = 1;
    assert_int_equal(build(&t), 0);
    assert_json(path(path(t.out.spec, "process", "capabilities"), "ambient", NULL),
                "[\"CAP_NET_BIND_SERVICE\"]");
    assert_json(path(path(t.out.spec, "process", "capabilities"), "inheritable", NULL),
                "[\"CAP_NET_BIND_SERVICE\"]");
    /* unknown */
    char *bad[] = {"CAP_FLY"};
    t.caps.add_capabilities = bad;
    t.caps.n_add_capabilities = 1;
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "CAP_FLY"));
    t_free(&t);
}

static void privileged(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    struct ctr_device host[] = {
        {.path = "/dev/sda", .type = 'b', .major = 8, .minor = 0, .mode = 0660}};
    t.in.host_devices = host;
    t.in.n_host_devices = 1;
    t.sc.seccomp = &t.seccomp; /* RuntimeDefault: privileged wins */
    t.sc.no_new_privs = true;
    assert_int_equal(build(&t), 0);
    assert_non_null(path(t.out.spec, "linux", "maskedPaths"));
    assert_int_equal(json_array_size(path(t.out.spec, "linux", "devices")), 0);
    assert_non_null(path(t.out.spec, "linux", "seccomp"));
    t.sc.privileged = true;
    assert_int_equal(build(&t), 0);
    assert_null(path(t.out.spec, "linux", "maskedPaths"));
    assert_null(path(t.out.spec, "linux", "readonlyPaths"));
    assert_null(path(t.out.spec, "linux", "seccomp"));
    assert_json(path(t.out.spec, "process", "noNewPrivileges"), "false");
    assert_int_equal(
        json_array_size(path(path(t.out.spec, "process", "capabilities"), "bounding", NULL)), 41);
    assert_json(json_object_get(json_array_get(path(t.out.spec, "linux", "devices"), 0), "path"),
                "\"/dev/sda\"");
    /* sysfs writable */
    json_t *m = json_object_get(t.out.spec, "mounts");
    for (size_t i = 0; i < json_array_size(m); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(m, i), "destination")),
                    "/sys"))
            assert_true(has_string(json_object_get(json_array_get(m, i), "options"), "rw"));
    t_free(&t);
}

static void masked_paths(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    assert_int_equal(build(&t), 0);
    assert_true(has_string(path(t.out.spec, "linux", "maskedPaths"), "/proc/kcore"));
    assert_true(has_string(path(t.out.spec, "linux", "readonlyPaths"), "/proc/sys"));
    char *mp[] = {"/proc/x"}, *rp[] = {"/proc/y"};
    t.sc.masked_paths = mp;
    t.sc.n_masked_paths = 1;
    t.sc.readonly_paths = rp;
    t.sc.n_readonly_paths = 1;
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "linux", "maskedPaths"), "[\"/proc/x\"]");
    assert_json(path(t.out.spec, "linux", "readonlyPaths"), "[\"/proc/y\"]");
    t_free(&t);
}

/* The clone rule of RuntimeDefault: namespaces only with CAP_SYS_ADMIN. */
static void seccomp_default_profile(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    assert_int_equal(build(&t), 0);
    assert_null(path(t.out.spec, "linux", "seccomp")); /* absent: unconfined */
    t.sc.seccomp = &t.seccomp;
    t.seccomp.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault;
    assert_int_equal(build(&t), 0);
    json_t *s = path(t.out.spec, "linux", "seccomp");
    assert_json(json_object_get(s, "defaultAction"), "\"SCMP_ACT_ERRNO\"");
    json_t *sys = json_object_get(s, "syscalls");
    json_t *allow = json_object_get(json_array_get(sys, 0), "names");
    assert_true(has_string(allow, "read"));
    assert_false(has_string(allow, "mount"));
    assert_false(has_string(allow, "unshare"));
    assert_false(has_string(allow, "clone"));
    assert_int_equal(json_array_size(sys), 3); /* allow, clone with a mask, clone3 ENOSYS */
    char *add[] = {"SYS_ADMIN"};
    t.sc.capabilities = &t.caps;
    t.caps.add_capabilities = add;
    t.caps.n_add_capabilities = 1;
    assert_int_equal(build(&t), 0);
    s = path(t.out.spec, "linux", "seccomp");
    allow = json_object_get(json_array_get(json_object_get(s, "syscalls"), 0), "names");
    assert_true(has_string(allow, "mount"));
    assert_true(has_string(allow, "clone"));
    assert_int_equal(json_array_size(json_object_get(s, "syscalls")), 1);
    /* Unconfined */
    t.seccomp.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Unconfined;
    assert_int_equal(build(&t), 0);
    assert_null(path(t.out.spec, "linux", "seccomp"));
    t_free(&t);
}

static void seccomp_localhost_profile(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    t.sc.seccomp = &t.seccomp;
    t.seccomp.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost;
    t.seccomp.localhost_ref = "/p.json";
    /* Docker's format: archMap and capability conditions */
    t.in.seccomp_profile =
        "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"archMap\":[{\"architecture\":"
        "\"SCMP_ARCH_X86_64\",\"subArchitectures\":[\"SCMP_ARCH_X86\"]}],\"syscalls\":["
        "{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"},"
        "{\"names\":[\"mount\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"caps\":"
        "[\"CAP_SYS_ADMIN\"]}},"
        "{\"names\":[\"chown\"],\"action\":\"SCMP_ACT_ALLOW\",\"excludes\":{\"caps\":"
        "[\"CAP_SYS_ADMIN\"]},\"comment\":\"x\"}]}";
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "linux", "seccomp"),
                "{\"architectures\":[\"SCMP_ARCH_X86_64\",\"SCMP_ARCH_X86\"],\"defaultAction\":"
                "\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"action\":\"SCMP_ACT_ALLOW\",\"names\":["
                "\"read\"]},{\"action\":\"SCMP_ACT_ALLOW\",\"names\":[\"chown\"]}]}");
    t.in.seccomp_profile = "{\"syscalls\":[]}";
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "defaultAction"));
    t.in.seccomp_profile = "not json";
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "/p.json"));
    t_free(&t);
}

static void mounts_and_propagation(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    Runtime__V1__Mount m1 = RUNTIME__V1__MOUNT__INIT, m2 = RUNTIME__V1__MOUNT__INIT,
                       m3 = RUNTIME__V1__MOUNT__INIT;
    m1.container_path = "/data";
    m1.host_path = "/srv/data";
    m1.readonly = true;
    m1.recursive_read_only = true;
    m2.container_path = "/etc/hosts";
    m2.host_path = "/x/hosts";
    m2.propagation = RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_HOST_TO_CONTAINER;
    m3.container_path = "/b";
    m3.host_path = "/srv/b";
    m3.propagation = RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_BIDIRECTIONAL;
    m3.selinux_relabel = true;
    Runtime__V1__Mount *ms[] = {&m1, &m2, &m3};
    t.cfg.mounts = ms;
    t.cfg.n_mounts = 3;
    assert_int_equal(build(&t), 0);
    json_t *m = json_object_get(t.out.spec, "mounts");
    size_t n = json_array_size(m);
    /* the config's /etc/hosts replaces the sandbox's */
    int hosts = 0;
    for (size_t i = 0; i < n; i++)
        hosts += !strcmp(json_string_value(json_object_get(json_array_get(m, i), "destination")),
                         "/etc/hosts");
    assert_int_equal(hosts, 1);
    assert_json(mount_at(m, "/data"),
                "{\"destination\":\"/data\",\"options\":[\"rbind\",\"rprivate\",\"ro\",\"rro\"],"
                "\"source\":\"/srv/data\",\"type\":\"bind\"}");
    assert_json(json_object_get(mount_at(m, "/etc/hosts"), "options"),
                "[\"rbind\",\"rslave\",\"rw\"]");
    assert_json(json_object_get(mount_at(m, "/b"), "options"), "[\"rbind\",\"rshared\",\"rw\"]");
    /* after the defaults, parents first, stably (as containerd's
     * WithMounts): the depth-1 ones in their order, then the rest */
    static const char *const order[] = {"/proc",
                                        "/dev",
                                        "/dev/pts",
                                        "/dev/mqueue",
                                        "/sys",
                                        "/sys/fs/cgroup",
                                        "/data",
                                        "/b",
                                        "/dev/shm",
                                        "/etc/hostname",
                                        "/etc/resolv.conf",
                                        "/etc/hosts"};
    assert_int_equal(n, ARRAY_SIZE(order));
    for (size_t i = 0; i < n; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(m, i), "destination")),
                            order[i]);
    assert_json(path(t.out.spec, "linux", "rootfsPropagation"), "\"rshared\"");
    assert_non_null(strstr((char *)t.out.warnings.data, "selinux_relabel"));
    /* rro without the kernel's support, or without readonly */
    t.in.host.rro = false;
    assert_int_equal(build(&t), -ENOTSUP);
    t.in.host.rro = true;
    m1.readonly = false;
    assert_int_equal(build(&t), -EINVAL);
    m1.readonly = true;
    m1.image_sub_path = "sub"; /* without an image */
    assert_int_equal(build(&t), -EINVAL);
    m1.image_sub_path = NULL;
    m1.host_path = "relative";
    assert_int_equal(build(&t), -EINVAL);
    t_free(&t);
}

/* An image volume: a read-only bind of the source CreateContainer mounted,
 * whatever the request says of readonly and propagation. */
static void image_volumes(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    Runtime__V1__ImageSpec is = RUNTIME__V1__IMAGE_SPEC__INIT;
    is.image = "sha256:0123";
    Runtime__V1__Mount m1 = RUNTIME__V1__MOUNT__INIT;
    m1.container_path = "/vol";
    m1.host_path = "";
    m1.image = &is;
    m1.image_sub_path = "a/b";
    m1.propagation = RUNTIME__V1__MOUNT_PROPAGATION__PROPAGATION_BIDIRECTIONAL;
    Runtime__V1__Mount *ms[] = {&m1};
    t.cfg.mounts = ms;
    t.cfg.n_mounts = 1;
    /* not mounted: a programming error, refused */
    assert_int_equal(build(&t), -EINVAL);
    const char *sources[] = {"/b/imagevols/0/a/b"};
    t.in.mount_sources = sources;
    assert_int_equal(build(&t), 0);
    json_t *m = json_object_get(t.out.spec, "mounts");
    assert_json(mount_at(m, "/vol"),
                "{\"destination\":\"/vol\",\"options\":[\"rbind\",\"rprivate\",\"nosuid\","
                "\"nodev\",\"ro\"],\"source\":\"/b/imagevols/0/a/b\",\"type\":\"bind\"}");
    assert_null(path(t.out.spec, "linux", "rootfsPropagation"));
    static const char *const bad[] = {"/a", "..", "a/../..", "a/..", "../a"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        m1.image_sub_path = (char *)bad[i];
        assert_int_equal(build(&t), -EINVAL);
        assert_non_null(strstr(t.err.msg, "relative path without"));
    }
    m1.image_sub_path = "a..b/..c"; /* names, not `..` */
    assert_int_equal(build(&t), 0);
    m1.host_path = "/srv"; /* ignored, as containerd does */
    assert_int_equal(build(&t), 0);
    m = json_object_get(t.out.spec, "mounts");
    assert_string_equal(json_string_value(json_object_get(mount_at(m, "/vol"), "source")),
                        "/b/imagevols/0/a/b");
    t_free(&t);
}

static void namespaces_and_cgroup(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    t.sc.namespace_options = &t.ns;
    t.ns.pid = RUNTIME__V1__NAMESPACE_MODE__POD;
    t.in.cgroup_parent = "/kubepods/pod1";
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "linux", "namespaces"),
                "[{\"type\":\"mount\"},{\"path\":\"/pod/ns/net\",\"type\":\"network\"},"
                "{\"path\":\"/pod/ns/ipc\",\"type\":\"ipc\"},{\"path\":\"/pod/ns/uts\",\"type\":"
                "\"uts\"},{\"path\":\"/pod/ns/pid\",\"type\":\"pid\"},{\"type\":\"cgroup\"}]");
    assert_string_equal(t.out.cgroup_path, "/kubepods/pod1/c1");
    t.ns.pid = RUNTIME__V1__NAMESPACE_MODE__NODE;
    t.in.pod_host_network = t.in.pod_host_ipc = true;
    t.in.cgroup_parent = "/";
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "linux", "namespaces"),
                "[{\"type\":\"mount\"},{\"type\":\"cgroup\"}]");
    assert_string_equal(t.out.cgroup_path, "/c1");
    t.ns.pid = RUNTIME__V1__NAMESPACE_MODE__TARGET;
    t.ns.target_id = "abc";
    t.in.target_pid_ns = "/proc/42/ns/pid";
    assert_int_equal(build(&t), 0);
    assert_json(json_array_get(path(t.out.spec, "linux", "namespaces"), 1),
                "{\"path\":\"/proc/42/ns/pid\",\"type\":\"pid\"}");
    t.ns.target_id = "";
    assert_int_equal(build(&t), -EINVAL);
    t.ns.pid = 9;
    assert_int_equal(build(&t), -EINVAL);
    t_free(&t);
}

static void resources_oom_and_signal(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, "{\"Cmd\":[\"sh\"],\"StopSignal\":\"SIGQUIT\"}");
    t.lx.resources = &t.res;
    t.res.memory_limit_in_bytes = 1 << 20;
    t.res.cpu_shares = 512;
    t.res.oom_score_adj = -998;
    t.in.host.oom_score_adj_min = 0;
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.stop_signal, SIGQUIT);
    assert_json(path(t.out.spec, "process", "oomScoreAdj"), "0");
    assert_non_null(strstr((char *)t.out.warnings.data, "oom_score_adj -998 raised to 0"));
    assert_json(path(path(t.out.spec, "linux", "resources"), "memory", NULL),
                "{\"limit\":1048576}");
    assert_json(path(path(t.out.spec, "linux", "resources"), "devices", NULL),
                "[{\"access\":\"rwm\",\"allow\":false}]");
    t.cfg.stop_signal = RUNTIME__V1__SIGNAL__SIGUSR1;
    t.res.oom_score_adj = 1001;
    assert_int_equal(build(&t), -EINVAL);
    t.res.oom_score_adj = 500;
    assert_int_equal(build(&t), 0);
    assert_int_equal(t.out.stop_signal, SIGUSR1);
    assert_null(t.out.warnings.data);
    t_free(&t);
}

static void devices(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    struct ctr_device d[] = {
        {.path = "/dev/fuse", .type = 'c', .major = 10, .minor = 229, .mode = 0666, .perms = "rw"}};
    t.in.devices = d;
    t.in.n_devices = 1;
    assert_int_equal(build(&t), 0);
    assert_json(path(t.out.spec, "linux", "devices"),
                "[{\"fileMode\":438,\"gid\":0,\"major\":10,\"minor\":229,\"path\":\"/dev/fuse\","
                "\"type\":\"c\",\"uid\":0}]");
    assert_json(json_array_get(path(path(t.out.spec, "linux", "resources"), "devices", NULL), 1),
                "{\"access\":\"rw\",\"allow\":true,\"major\":10,\"minor\":229,\"type\":\"c\"}");
    t_free(&t);
}

/* AppArmor as containerd 2 picks it; SELinux options are a warning, not a
 * refusal (kubelet sends a pod's options to every node), on every host
 * until kinglet labels containers. */
static const char *aa_of(struct t *t)
{
    return json_string_value(path(t->out.spec, "process", "apparmorProfile"));
}

static void apparmor_profiles(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    Runtime__V1__SecurityProfile aa = RUNTIME__V1__SECURITY_PROFILE__INIT;
    t.in.host.apparmor = true;
    /* nothing asked, RuntimeDefault, the old string: kinglet's profile */
    assert_int_equal(build(&t), 0);
    assert_string_equal(aa_of(&t), "kinglet-default");
    t.sc.apparmor = &aa;
    assert_int_equal(build(&t), 0);
    assert_string_equal(aa_of(&t), "kinglet-default");
    /* privileged: unconfined unless a profile is named */
    t.sc.privileged = true;
    assert_int_equal(build(&t), 0);
    assert_null(aa_of(&t));
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost;
    aa.localhost_ref = "localhost/mine";
    assert_int_equal(build(&t), 0);
    assert_string_equal(aa_of(&t), "mine");
    t.sc.privileged = false;
    aa.localhost_ref = "mine";
    assert_int_equal(build(&t), 0);
    assert_string_equal(aa_of(&t), "mine");
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Unconfined;
    aa.localhost_ref = "";
    assert_int_equal(build(&t), 0);
    assert_null(aa_of(&t));
    /* the deprecated string, read only without the SecurityProfile */
    t.sc.apparmor = NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    static const struct {
        const char *in, *want;
        int r;
    } strs[] = {{"runtime/default", "kinglet-default", 0},
                {"unconfined", NULL, 0},
                {"localhost/p1", "p1", 0},
                {"", "kinglet-default", 0},
                {"docker-default", NULL, -EINVAL},
                {"localhost/", NULL, -EINVAL}};
    for (size_t i = 0; i < ARRAY_SIZE(strs); i++) {
        t.sc.apparmor_profile = (char *)strs[i].in;
        int r = build(&t);
        if (r != strs[i].r)
            fail_msg("`%s`: %d (%s)", strs[i].in, r, t.err.msg);
        if (r == 0 && (strs[i].want ? !aa_of(&t) || strcmp(aa_of(&t), strs[i].want) : !!aa_of(&t)))
            fail_msg("`%s`: `%s`", strs[i].in, aa_of(&t) ? aa_of(&t) : "(none)");
    }
    t.sc.apparmor_profile = NULL;
#pragma GCC diagnostic pop
    /* refused: a ref on another type, a bad name, an unknown type */
    t.sc.apparmor = &aa;
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault;
    aa.localhost_ref = "x";
    assert_int_equal(build(&t), -EINVAL);
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost;
    aa.localhost_ref = "a\nchangeprofile b";
    assert_int_equal(build(&t), -EINVAL);
    aa.profile_type = 9;
    assert_int_equal(build(&t), -EINVAL);
    /* without AppArmor: Localhost refused by name, the rest nothing */
    t.in.host.apparmor = false;
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__Localhost;
    aa.localhost_ref = "mine";
    assert_int_equal(build(&t), -EINVAL);
    assert_non_null(strstr(t.err.msg, "`mine`"));
    aa.localhost_ref = "";
    aa.profile_type = RUNTIME__V1__SECURITY_PROFILE__PROFILE_TYPE__RuntimeDefault;
    assert_int_equal(build(&t), 0);
    assert_null(aa_of(&t));
    assert_null(t.out.warnings.data);
    t_free(&t);
}

static void selinux_warn(void **state)
{
    (void)state;
    struct t t;
    t_init(&t, NULL);
    Runtime__V1__SELinuxOption se = RUNTIME__V1__SELINUX_OPTION__INIT;
    se.type = "spc_t";
    t.sc.selinux_options = &se;
    assert_int_equal(build(&t), 0);
    assert_non_null(strstr((char *)t.out.warnings.data, "SELinux"));
    assert_non_null(strstr((char *)t.out.warnings.data, "the host has no SELinux"));
    t.in.host.selinux = true;
    assert_int_equal(build(&t), 0);
    assert_non_null(strstr((char *)t.out.warnings.data, "does not label containers yet"));
    /* user or role alone count too; nothing set is nothing said */
    se.type = "";
    se.role = "system_r";
    assert_int_equal(build(&t), 0);
    assert_non_null(t.out.warnings.data);
    se.role = "";
    assert_int_equal(build(&t), 0);
    assert_null(t.out.warnings.data);
    t_free(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(args_four_cases),
    cmocka_unit_test(no_command_refused),
    cmocka_unit_test(env_later_wins),
    cmocka_unit_test(env_default_path),
    cmocka_unit_test(user_from_image),
    cmocka_unit_test(user_from_config),
    cmocka_unit_test(capabilities),
    cmocka_unit_test(privileged),
    cmocka_unit_test(masked_paths),
    cmocka_unit_test(seccomp_default_profile),
    cmocka_unit_test(seccomp_localhost_profile),
    cmocka_unit_test(mounts_and_propagation),
    cmocka_unit_test(image_volumes),
    cmocka_unit_test(namespaces_and_cgroup),
    cmocka_unit_test(resources_oom_and_signal),
    cmocka_unit_test(devices),
    cmocka_unit_test(apparmor_profiles),
    cmocka_unit_test(selinux_warn),
};

UNIT_MAIN(tests)
