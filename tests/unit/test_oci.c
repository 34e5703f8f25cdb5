/* Unit tests for oci/spec and the small pure helpers of the executor:
 * config.json → struct oci_spec (every section), errors that name the
 * field, mount option parsing, signal names, container ids, the default
 * spec round trip, and a failing-allocation-free parse of hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>

#include "enter/proto.h"
#include "oci/checkpoint.h"
#include "oci/internal.h"

static int per_test_timeout(void **state)
{
    (void)state;
    alarm(20);
    return 0;
}

#define BASE                                                                                       \
    "\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"rootfs\"}, "                                \
    "\"process\": {\"args\": [\"sh\"], \"cwd\": \"/\"}"

static struct oci_spec *parse_ok(const char *body)
{
    char doc[8192];
    snprintf(doc, sizeof(doc), "{%s}", body);
    struct err e = {0};
    struct oci_spec *s = NULL;
    int r = oci_spec_parse(doc, strlen(doc), "/bundle", &s, &e);
    if (r < 0)
        fail_msg("parse failed: %s\n%s", e.msg, doc);
    return s;
}

/* Parsing fails and the message contains `want`. */
static void parse_err(const char *body, const char *want)
{
    char doc[8192];
    snprintf(doc, sizeof(doc), "{%s}", body);
    struct err e = {0};
    struct oci_spec *s = NULL;
    int r = oci_spec_parse(doc, strlen(doc), "/bundle", &s, &e);
    if (r >= 0) {
        oci_spec_free(s);
        fail_msg("parse succeeded, wanted an error with `%s`:\n%s", want, doc);
    }
    if (!strstr(e.msg, want))
        fail_msg("error `%s` does not name `%s`", e.msg, want);
    assert_null(s);
}

static void test_minimal(void **state)
{
    (void)state;
    struct oci_spec *s = parse_ok(BASE);
    assert_string_equal(s->root_path, "/bundle/rootfs");
    assert_false(s->root_readonly);
    assert_true(s->has_process);
    assert_string_equal(s->process.args[0], "sh");
    assert_null(s->process.args[1]);
    assert_string_equal(s->process.cwd, "/");
    assert_int_equal(s->n_mounts, 0);
    assert_false(s->process.has_caps);
    oci_spec_free(s);
}

static void test_process_fields(void **state)
{
    (void)state;
    struct oci_spec *s = parse_ok(
        "\"ociVersion\": \"1.2.0\", \"root\": {\"path\": \"/abs\", \"readonly\": true},"
        "\"hostname\": \"h\", \"domainname\": \"d\","
        "\"process\": {\"terminal\": true, \"consoleSize\": {\"height\": 24, \"width\": 80},"
        " \"args\": [\"a\", \"b\"], \"env\": [\"A=1\", \"B=\"], \"cwd\": \"/w\","
        " \"user\": {\"uid\": 5, \"gid\": 6, \"umask\": 18, \"additionalGids\": [7, 8]},"
        " \"rlimits\": [{\"type\": \"RLIMIT_NOFILE\", \"soft\": 10, \"hard\": 20}],"
        " \"capabilities\": {\"bounding\": [\"CAP_KILL\", \"CAP_CHOWN\"], \"ambient\": "
        "[\"CAP_KILL\"]},"
        " \"noNewPrivileges\": true, \"oomScoreAdj\": -17},"
        "\"linux\": {\"namespaces\": [{\"type\": \"uts\"}, {\"type\": \"network\", \"path\": "
        "\"/run/netns/x\"}], \"personality\": {\"domain\": \"LINUX32\"}}");
    assert_string_equal(s->root_path, "/abs");
    assert_true(s->root_readonly);
    assert_string_equal(s->hostname, "h");
    assert_string_equal(s->domainname, "d");
    struct oci_process *p = &s->process;
    assert_true(p->terminal);
    assert_int_equal(p->cons_height, 24);
    assert_int_equal(p->cons_width, 80);
    assert_string_equal(p->args[1], "b");
    assert_string_equal(p->env[1], "B=");
    assert_int_equal(p->uid, 5);
    assert_int_equal(p->gid, 6);
    assert_true(p->has_umask);
    assert_int_equal(p->umask, 18);
    assert_int_equal(p->n_gids, 2);
    assert_int_equal(p->gids[1], 8);
    assert_int_equal(p->n_rlimits, 1);
    assert_int_equal(p->rlimits[0].resource, RLIMIT_NOFILE);
    assert_int_equal(p->rlimits[0].soft, 10);
    assert_int_equal(p->rlimits[0].hard, 20);
    assert_true(p->has_caps);
    assert_int_equal(p->caps[OCI_CAP_BOUNDING], (1ull << 5) | (1ull << 0));
    assert_int_equal(p->caps[OCI_CAP_AMBIENT], 1ull << 5);
    assert_int_equal(p->caps[OCI_CAP_EFFECTIVE], 0);
    assert_true(p->no_new_privileges);
    assert_true(p->has_oom_score_adj);
    assert_int_equal(p->oom_score_adj, -17);
    assert_true(s->ns[OCI_NS_UTS].enabled);
    assert_null(s->ns[OCI_NS_UTS].path);
    assert_string_equal(s->ns[OCI_NS_NET].path, "/run/netns/x");
    assert_false(s->ns[OCI_NS_PID].enabled);
    assert_true(s->has_personality);
    assert_int_equal(s->personality, PER_LINUX32);
    oci_spec_free(s);
}

static void test_mounts(void **state)
{
    (void)state;
    struct oci_spec *s = parse_ok(
        BASE ", \"mounts\": ["
             "{\"destination\": \"/a\", \"type\": \"tmpfs\", \"source\": \"tmpfs\", \"options\": "
             "[\"nosuid\", \"ro\", \"rw\", \"noexec\", \"size=1m\", \"mode=755\", \"rslave\", "
             "\"strictatime\", \"tmpcopyup\", \"Z\"]},"
             "{\"destination\": \"/b\", \"source\": \"/src\", \"options\": [\"rbind\", \"ro\", "
             "\"private\"]},"
             "{\"destination\": \"/c\", \"type\": \"bind\", \"source\": \"/src\"},"
             "{\"destination\": \"/d\", \"type\": \"none\", \"source\": \"/src\", \"options\": "
             "[\"idmap\"]}]");
    assert_int_equal(s->n_mounts, 4);
    struct oci_mount *m = &s->mounts[0];
    assert_int_equal(m->flags, MS_NOSUID | MS_NOEXEC | MS_STRICTATIME);
    assert_true(m->clear & MS_RDONLY);
    assert_int_equal(m->propagation, MS_SLAVE | MS_REC);
    assert_string_equal(m->data, "size=1m,mode=755");
    assert_false(m->bind);
    m = &s->mounts[1];
    assert_true(m->bind);
    assert_int_equal(m->flags, MS_REC | MS_RDONLY);
    assert_int_equal(m->propagation, MS_PRIVATE);
    assert_null(m->data);
    assert_true(s->mounts[2].bind);
    assert_int_equal(s->mounts[2].flags, 0);
    assert_true(s->mounts[3].idmap);
    oci_spec_free(s);
}

static void test_linux_sections(void **state)
{
    (void)state;
    struct oci_spec *s = parse_ok(
        BASE
        ", \"linux\": {"
        "\"namespaces\": [{\"type\": \"user\"}, {\"type\": \"time\"}],"
        "\"uidMappings\": [{\"containerID\": 0, \"hostID\": 1000, \"size\": 10}],"
        "\"gidMappings\": [{\"containerID\": 0, \"hostID\": 2000, \"size\": 1}],"
        "\"devices\": [{\"path\": \"/dev/x\", \"type\": \"c\", \"major\": 1, \"minor\": 3, "
        "\"fileMode\": 432, \"uid\": 1, \"gid\": 2}, {\"path\": \"/dev/p\", \"type\": \"p\"}],"
        "\"sysctl\": {\"net.ipv4.ip_forward\": \"1\"},"
        "\"maskedPaths\": [\"/proc/kcore\"], \"readonlyPaths\": [\"/proc/sys\"],"
        "\"rootfsPropagation\": \"rshared\", \"cgroupsPath\": \"/a/b\","
        "\"resources\": {\"pids\": {\"limit\": 5}}, \"seccomp\": {\"defaultAction\": "
        "\"SCMP_ACT_ALLOW\"}}, \"hooks\": {\"prestart\": [{\"path\": \"/h\", \"args\": [\"h\", "
        "\"x\"], \"timeout\": 3}], \"poststop\": [{\"path\": \"/p\"}]},"
        "\"annotations\": {\"k\": \"v\"}");
    assert_true(s->ns[OCI_NS_USER].enabled);
    assert_true(s->ns[OCI_NS_TIME].enabled);
    assert_int_equal(s->n_uid_maps, 1);
    assert_int_equal(s->uid_maps[0].host_id, 1000);
    assert_int_equal(s->uid_maps[0].size, 10);
    assert_int_equal(s->gid_maps[0].host_id, 2000);
    assert_int_equal(s->n_devices, 2);
    assert_int_equal(s->devices[0].type, 'c');
    assert_int_equal(s->devices[0].mode, 0660);
    assert_true(s->devices[0].has_uid);
    assert_int_equal(s->devices[0].gid, 2);
    assert_int_equal(s->devices[1].type, 'p');
    assert_int_equal(s->n_sysctl, 1);
    assert_string_equal(s->sysctl[0].key, "net.ipv4.ip_forward");
    assert_string_equal(s->masked_paths[0], "/proc/kcore");
    assert_string_equal(s->readonly_paths[0], "/proc/sys");
    assert_int_equal(s->rootfs_propagation, MS_SHARED | MS_REC);
    assert_string_equal(s->cgroups_path, "/a/b");
    assert_non_null(json_object_get(s->resources, "pids"));
    assert_non_null(s->seccomp);
    assert_int_equal(s->hooks.n[OCI_HOOK_PRESTART], 1);
    assert_string_equal(s->hooks.list[OCI_HOOK_PRESTART][0].args[1], "x");
    assert_int_equal(s->hooks.list[OCI_HOOK_PRESTART][0].timeout, 3);
    assert_int_equal(s->hooks.n[OCI_HOOK_POSTSTOP], 1);
    assert_string_equal(json_string_value(json_object_get(s->annotations, "k")), "v");
    oci_spec_free(s);
}

static void test_errors_name_the_field(void **state)
{
    (void)state;
    parse_err("\"root\": {\"path\": \"r\"}", "`ociVersion`");
    parse_err("\"ociVersion\": \"2.0\", \"root\": {\"path\": \"r\"}", "`ociVersion`");
    parse_err("\"ociVersion\": \"1.0.2\"", "`root`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": 5}", "`root.path`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"cwd\": "
              "\"/\"}",
              "`process.args`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"args\": "
              "[], \"cwd\": \"/\"}",
              "`process.args`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"args\": "
              "[\"a\", 1], \"cwd\": \"/\"}",
              "`process.args[1]`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"args\": "
              "[\"a\"], \"cwd\": \"x\"}",
              "`process.cwd`");
    parse_err(BASE ", \"mounts\": [{\"destination\": \"rel\", \"type\": \"tmpfs\"}]",
              "`mounts[0].destination`");
    parse_err(BASE ", \"mounts\": [{\"destination\": \"/a\"}]", "`mounts[0].type`");
    parse_err(BASE ", \"mounts\": [{\"destination\": \"/a\", \"type\": \"bind\"}]",
              "`mounts[0].source`");
    parse_err(BASE ", \"mounts\": [{\"destination\": \"/a\", \"type\": \"t\", \"options\": [1]}]",
              "`mounts[0].options[0]`");
    parse_err(BASE ", \"linux\": {\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"pid\"}]}",
              "`linux.namespaces[1].type`");
    parse_err(BASE ", \"linux\": {\"namespaces\": [{\"type\": \"user\"}]}", "`linux.uidMappings`");
    parse_err(BASE ", \"linux\": {\"uidMappings\": [{\"containerID\": 0, \"hostID\": 1}]}",
              "`linux.uidMappings[0]`");
    parse_err(BASE ", \"linux\": {\"devices\": [{\"path\": \"/dev/../x\", \"type\": \"c\", "
                   "\"major\": 1, \"minor\": 1}]}",
              "`linux.devices[0].path`");
    parse_err(BASE ", \"linux\": {\"devices\": [{\"path\": \"/dev/x\", \"type\": \"c\"}]}",
              "`linux.devices[0]`");
    parse_err(BASE ", \"linux\": {\"sysctl\": {\"../x\": \"1\"}}", "`linux.sysctl`");
    parse_err(BASE ", \"linux\": {\"rootfsPropagation\": \"weird\"}", "`linux.rootfsPropagation`");
    parse_err(BASE ", \"linux\": {\"personality\": {\"domain\": \"BSD\"}}",
              "`linux.personality.domain`");
    parse_err(BASE ", \"hooks\": {\"prestart\": [{\"path\": \"rel\"}]}",
              "`hooks.prestart[0].path`");
    parse_err(BASE ", \"hooks\": {\"poststop\": [{\"path\": \"/x\", \"timeout\": 0}]}",
              "`hooks.poststop[0].timeout`");
    parse_err(BASE ", \"hostname\": \"h\"", "`hostname`");
    parse_err(BASE ", \"linux\": {\"timeOffsets\": {\"boottime\": {\"secs\": 1}}}",
              "`linux.timeOffsets`");
    parse_err(BASE ", \"linux\": {\"namespaces\": [{\"type\": \"time\"}], \"timeOffsets\": "
                   "{\"monotonic\": {\"nanosecs\": 1000000000}}}",
              "`linux.timeOffsets.monotonic`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"args\": "
              "[\"a\"], \"cwd\": \"/\", \"env\": [\"NOEQUALS\"]}",
              "`process.env[0]`");
    parse_err("\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": {\"args\": "
              "[\"a\"], \"cwd\": \"/\", \"user\": {\"uid\": -1}}",
              "`process.user.uid`");
}

static void test_malformed_documents(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "",
        "[]",
        "{",
        "{\"ociVersion\": \"1.0.2\",}",
        "null",
        "\"str\"",
        "{\"ociVersion\": \"1.0.2\", \"ociVersion\": \"1.0.2\"}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
        struct err e = {0};
        struct oci_spec *s = NULL;
        assert_true(oci_spec_parse(docs[i], strlen(docs[i]), NULL, &s, &e) < 0);
        assert_null(s);
        assert_int_not_equal(e.code, 0);
        assert_non_null(strstr(e.msg, "config.json") ? e.msg : strstr(e.msg, "`"));
    }
}

static void test_signals(void **state)
{
    (void)state;
    int sig = 0;
    assert_int_equal(oci_signal_parse("KILL", &sig), 0);
    assert_int_equal(sig, SIGKILL);
    assert_int_equal(oci_signal_parse("SIGTERM", &sig), 0);
    assert_int_equal(sig, SIGTERM);
    assert_int_equal(oci_signal_parse("sigusr1", &sig), 0);
    assert_int_equal(sig, SIGUSR1);
    assert_int_equal(oci_signal_parse("9", &sig), 0);
    assert_int_equal(sig, 9);
    assert_int_equal(oci_signal_parse("RTMIN+2", &sig), 0);
    assert_int_equal(sig, SIGRTMIN + 2);
    assert_true(oci_signal_parse("0", &sig) < 0);
    assert_true(oci_signal_parse("999", &sig) < 0);
    assert_true(oci_signal_parse("NOPE", &sig) < 0);
    assert_true(oci_signal_parse("", &sig) < 0);
}

static void test_ids(void **state)
{
    (void)state;
    assert_int_equal(oci_id_validate("abc-1.2_3+x", NULL), 0);
    assert_true(oci_id_validate("", NULL) < 0);
    assert_true(oci_id_validate("..", NULL) < 0);
    assert_true(oci_id_validate("a/b", NULL) < 0);
    assert_true(oci_id_validate("a b", NULL) < 0);
    char longid[300];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_true(oci_id_validate(longid, NULL) < 0);
}

static void test_default_spec_round_trip(void **state)
{
    (void)state;
    for (int rootless = 0; rootless < 2; rootless++) {
        json_t *j = oci_spec_default(rootless);
        assert_non_null(j);
        char *text = json_dumps(j, 0);
        json_decref(j);
        struct err e = {0};
        struct oci_spec *s = NULL;
        if (oci_spec_parse(text, strlen(text), "/b", &s, &e) < 0)
            fail_msg("default spec does not parse: %s", e.msg);
        free(text);
        assert_string_equal(s->process.args[0], "sh");
        assert_true(s->root_readonly);
        assert_int_equal(s->n_mounts, 7);
        /* The container's own cgroup, read-only, as runc's and crun's. */
        assert_string_equal(s->mounts[6].destination, "/sys/fs/cgroup");
        assert_string_equal(s->mounts[6].type, "cgroup");
        assert_true(s->mounts[6].flags & MS_RDONLY);
        assert_true(s->ns[OCI_NS_PID].enabled);
        assert_int_equal(s->ns[OCI_NS_USER].enabled, rootless);
        assert_int_equal(s->n_masked, 10);
        oci_spec_free(s);
    }
}

static void test_limits(void **state)
{
    (void)state;
    /* More env entries than OCI_LIST_MAX. */
    struct buf b = {0};
    buf_printf(&b, "{\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"process\": "
                   "{\"args\": [\"a\"], \"cwd\": \"/\", \"env\": [");
    for (int i = 0; i < OCI_LIST_MAX + 1; i++)
        buf_printf(&b, "%s\"A=%d\"", i ? "," : "", i);
    buf_printf(&b, "]}}");
    struct err e = {0};
    struct oci_spec *s = NULL;
    assert_true(oci_spec_parse((char *)b.data, b.len, NULL, &s, &e) < 0);
    assert_non_null(strstr(e.msg, "`process.env`"));
    buf_free(&b);
    assert_true(oci_spec_parse("{}", OCI_CONFIG_MAX + 1, NULL, &s, &e) < 0);
}

static void test_proc_places(void **state)
{
    (void)state;
    static const struct {
        const char *dest;
        enum oci_proc_place place;
    } cases[] = {
        {"/proc", OCI_PROC_ROOT},
        {"//proc/", OCI_PROC_ROOT},
        {"/x/../proc/.", OCI_PROC_ROOT},
        {"/proc/cpuinfo", OCI_PROC_ALLOWED},
        {"/proc/sys/kernel/ns_last_pid", OCI_PROC_ALLOWED},
        {"/proc//net/./dev", OCI_PROC_ALLOWED},
        {"/proc/sys/kernel", OCI_PROC_REFUSED},
        {"/proc/1/oom_score_adj", OCI_PROC_REFUSED},
        {"/proc/sys/../sysrq-trigger", OCI_PROC_REFUSED},
        {"/../../proc/self/attr", OCI_PROC_REFUSED},
        {"/proc/cpuinfo/x", OCI_PROC_REFUSED},
        {"/procfs", OCI_PROC_OUTSIDE},
        {"/proc/..", OCI_PROC_OUTSIDE},
        {"/data/proc/sys", OCI_PROC_OUTSIDE},
        {"/", OCI_PROC_OUTSIDE},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        enum oci_proc_place got = oci_mount_proc_place(cases[i].dest);
        if (got != cases[i].place)
            fail_msg("`%s`: place %d, expected %d", cases[i].dest, got, cases[i].place);
    }
    struct err e = {0};
    assert_int_equal(oci_mount_destination_check("/proc", "tmpfs", false, &e), -EINVAL);
    assert_int_equal(oci_mount_destination_check("/proc", "proc", false, &e), 0);
    assert_int_equal(oci_mount_destination_check("/proc/sys", "bind", true, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "`/proc/sys` is inside /proc"));
    /* and the executor refuses it in a spec, naming the mount */
    const char *spec = "{\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"r\"}, \"mounts\": "
                       "[{\"destination\": \"/tmp\", \"type\": \"tmpfs\"}, {\"destination\": "
                       "\"/proc/kcore\", \"type\": \"bind\", \"source\": \"/x\"}]}";
    struct oci_spec *s = NULL;
    assert_int_equal(oci_spec_parse(spec, strlen(spec), NULL, &s, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "`mounts[1].destination`"));
}

/* ---- the exec recipe: built here, read back by kinglet-enter ---- */

static void recipe_of(const char *process_extra, const char *seccomp, struct enter_recipe *h,
                      struct buf *body)
{
    char doc[4096];
    snprintf(doc, sizeof(doc),
             "{\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"rootfs\"}, "
             "\"process\": {\"args\": [\"sh\", \"-c\", \"true\"], \"cwd\": \"/work\", "
             "\"env\": [\"PATH=/bin\", \"A=b\"]%s}%s}",
             process_extra, seccomp);
    struct err e = {0};
    struct oci_spec *s = NULL;
    if (oci_spec_parse(doc, strlen(doc), "/bundle", &s, &e) < 0)
        fail_msg("parse failed: %s\n%s", e.msg, doc);
    if (oci_exec_recipe_build(&s->process, s->seccomp, 0x20000, 2, h, body, &e) < 0)
        fail_msg("recipe failed: %s", e.msg);
    oci_spec_free(s);
}

static void test_exec_recipe_round_trip(void **state)
{
    (void)state;
    struct enter_recipe h;
    struct buf body = {0};
    recipe_of(", \"user\": {\"uid\": 7, \"gid\": 8, \"additionalGids\": [9, 10]}, "
              "\"noNewPrivileges\": true, \"oomScoreAdj\": 5, \"apparmorProfile\": \"prof\", "
              "\"rlimits\": [{\"type\": \"RLIMIT_NOFILE\", \"soft\": 10, \"hard\": 20}], "
              "\"capabilities\": {\"bounding\": [\"CAP_KILL\"], \"ambient\": [\"CAP_KILL\"]}",
              ", \"linux\": {\"seccomp\": {\"defaultAction\": \"SCMP_ACT_ALLOW\", "
              "\"syscalls\": [{\"names\": [\"mount\"], \"action\": \"SCMP_ACT_ERRNO\"}]}}",
              &h, &body);
    assert_int_equal(h.magic, ENTER_MAGIC);
    assert_int_equal(h.size, body.len);
    assert_int_equal(h.nsflags, 0x20000);
    assert_int_equal(h.preserve_fds, 2);
    assert_int_equal(h.uid, 7);
    assert_int_equal(h.gid, 8);
    assert_true(h.flags & ENTER_NNP);
    assert_true(h.flags & ENTER_HAS_OOM);
    assert_true(h.flags & ENTER_HAS_CAPS);
    assert_true(h.flags & ENTER_SECCOMP);
    assert_false(h.flags & ENTER_TERMINAL);
    assert_true(h.flags & ENTER_APPARMOR);
    assert_int_equal(h.oom_score_adj, 5);
    assert_true(h.n_filter > 4);
    assert_int_equal(h.caps[ENTER_CAP_BOUNDING], 1ull << 5); /* CAP_KILL */
    assert_int_equal(h.caps[ENTER_CAP_AMBIENT], 1ull << 5);
    struct enter_parsed r;
    assert_int_equal(enter_recipe_parse(&h, (char *)body.data, &r), 0);
    assert_string_equal(r.cwd, "/work");
    assert_string_equal(r.apparmor, "prof");
    assert_string_equal(r.args[0], "sh");
    assert_string_equal(r.args[2], "true");
    assert_null(r.args[3]);
    assert_string_equal(r.env[1], "A=b");
    assert_null(r.env[2]);
    assert_int_equal(h.n_gids, 2);
    assert_int_equal(r.gids[0], 9);
    assert_int_equal(r.gids[1], 10);
    assert_int_equal(h.n_rlimits, 1);
    assert_int_equal(r.rlimits[0].resource, RLIMIT_NOFILE);
    assert_int_equal(r.rlimits[0].soft, 10);
    assert_int_equal(r.rlimits[0].hard, 20);
    enter_parsed_clear(&r);
    buf_free(&body);
}

/* Every recipe that is not one kinglet sends is refused, never read past
 * its end. */
static void test_exec_recipe_refused(void **state)
{
    (void)state;
    struct enter_recipe h, bad;
    struct buf body = {0};
    recipe_of("", "", &h, &body);
    struct enter_parsed r;
    assert_int_equal(enter_recipe_parse(&h, (char *)body.data, &r), 0);
    enter_parsed_clear(&r);
    /* every shorter body: a string runs past its end */
    for (uint32_t n = 0; n < h.size; n++) {
        bad = h;
        bad.size = n;
        char *copy = malloc(n + 1);
        memcpy(copy, body.data, n);
        assert_int_equal(enter_recipe_parse(&bad, copy, &r), -EPROTO);
        free(copy);
    }
    /* counts that do not match the body, or over the limits */
    const struct {
        size_t off;
        uint32_t value;
    } edits[] = {
        {offsetof(struct enter_recipe, magic), 0},
        {offsetof(struct enter_recipe, n_args), 0},
        {offsetof(struct enter_recipe, n_args), 5},
        {offsetof(struct enter_recipe, n_env), 3},
        {offsetof(struct enter_recipe, n_env), 1},
        {offsetof(struct enter_recipe, n_gids), 1000},
        {offsetof(struct enter_recipe, n_rlimits), 1},
        {offsetof(struct enter_recipe, n_filter), 1},
        {offsetof(struct enter_recipe, n_filter), ENTER_FILTER_MAX + 1},
        {offsetof(struct enter_recipe, n_args), ENTER_LIST_MAX + 1},
        {offsetof(struct enter_recipe, cap_last), 64},
        {offsetof(struct enter_recipe, size), ENTER_BODY_MAX + 1},
    };
    for (size_t i = 0; i < ARRAY_SIZE(edits); i++) {
        bad = h;
        memcpy((char *)&bad + edits[i].off, &edits[i].value, sizeof(uint32_t));
        int rc = enter_recipe_parse(&bad, (char *)body.data, &r);
        if (rc != -EPROTO)
            fail_msg("edit %zu: %d", i, rc);
    }
    /* an empty program or cwd */
    char *copy = malloc(h.size);
    memcpy(copy, body.data, h.size);
    copy[0] = '\0'; /* the cwd "/" becomes "" */
    assert_int_equal(enter_recipe_parse(&h, copy, &r), -EPROTO);
    free(copy);
    /* the profile flag without its string: the args run out; an empty one */
    bad = h;
    bad.flags |= ENTER_APPARMOR;
    assert_int_equal(enter_recipe_parse(&bad, (char *)body.data, &r), -EPROTO);
    buf_free(&body);
    recipe_of(", \"apparmorProfile\": \"p\"", "", &h, &body);
    copy = malloc(h.size);
    memcpy(copy, body.data, h.size);
    copy[6] = '\0'; /* after the cwd "/work\0": "p" becomes "" */
    assert_int_equal(enter_recipe_parse(&h, copy, &r), -EPROTO);
    free(copy);
    buf_free(&body);
}

/* The loaded-profile list read as the kernel writes it, and the default
 * profile's text. */
static void test_apparmor_profiles(void **state)
{
    (void)state;
    const char *list = "kinglet-default (enforce)\n"
                       "my app (complain)\n"
                       "/usr/bin/man (enforce)\n"
                       "ns-prefix-only (enforce)";
    assert_true(oci_apparmor_profile_listed(list, "kinglet-default"));
    assert_true(oci_apparmor_profile_listed(list, "my app"));
    assert_true(oci_apparmor_profile_listed(list, "/usr/bin/man"));
    assert_true(oci_apparmor_profile_listed(list, "ns-prefix-only"));
    assert_false(oci_apparmor_profile_listed(list, "kinglet"));
    assert_false(oci_apparmor_profile_listed(list, "my"));
    assert_false(oci_apparmor_profile_listed(list, "enforce"));
    assert_false(oci_apparmor_profile_listed("", "x"));
    assert_int_equal(oci_apparmor_name_valid("ok/name with space"), 0);
    assert_int_equal(oci_apparmor_name_valid(""), -EINVAL);
    assert_int_equal(oci_apparmor_name_valid("a\nb"), -EINVAL);
    char big[OCI_APPARMOR_NAME_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(oci_apparmor_name_valid(big), -ENAMETOOLONG);
    struct buf b = {0};
    assert_int_equal(oci_apparmor_default_text("kd", "kinglet-self", true, &b), 0);
    assert_int_equal(buf_append(&b, "", 1), 0);
    const char *t = (const char *)b.data;
    assert_true(str_has_prefix(t, "abi <abi/3.0>,\n"));
    assert_non_null(strstr(t, "profile kd flags=(attach_disconnected,mediate_deleted) {\n"));
    assert_non_null(strstr(t, "  signal (receive) peer=unconfined,\n"));
    assert_non_null(strstr(t, "  signal (receive) peer=kinglet-self,\n"));
    assert_non_null(strstr(t, "  deny mount,\n"));
    assert_non_null(strstr(t, "  deny /sys/kernel/security/** rwklx,\n"));
    assert_non_null(strstr(t, "  ptrace (trace,tracedby,read,readby) peer=kd,\n}\n"));
    buf_free(&b);
    /* unconfined: no rule of its own (it is there already) */
    assert_int_equal(oci_apparmor_default_text("kd", "unconfined", false, &b), 0);
    assert_int_equal(buf_append(&b, "", 1), 0);
    t = (const char *)b.data;
    assert_false(str_has_prefix(t, "abi"));
    assert_null(strstr(strstr(t, "peer=unconfined") + 1, "peer=unconfined"));
    buf_free(&b);
}

static void test_criu_version(void **state)
{
    (void)state;
    assert_int_equal(oci_criu_version_parse("Version: 3.17.1\n"), 31701);
    assert_int_equal(oci_criu_version_parse("Version: 4.1\nGitID: v4.1\n"), 40100);
    assert_int_equal(oci_criu_version_parse("criu\nVersion:   3.19.0-rc1\n"), 31900);
    assert_int_equal(oci_criu_version_parse(""), -EINVAL);
    assert_int_equal(oci_criu_version_parse("Version: x.y"), -EINVAL);
    assert_int_equal(oci_criu_version_parse("Version: 3"), -EINVAL);
    assert_int_equal(oci_criu_version_parse("Version: 100.1.1"), -EINVAL);
    assert_int_equal(oci_criu_version_parse("Version: 3.100"), -EINVAL);
}

/* The tail of a criu log written to a temporary file. */
static void log_tail(const char *text, char *buf, size_t size)
{
    char path[] = "/tmp/kinglet-unit-criu-log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    oci_criu_log_tail(path, buf, size);
    unlink(path);
}

static void test_criu_log_tail(void **state)
{
    (void)state;
    char buf[360];
    /* the last four Error lines, without their time stamps */
    log_tail("(00.000001) start\n"
             "(00.000002) Error (a.c:1): one\n"
             "(00.000003) Error (b.c:2): two\n"
             "(00.000004) noise\n"
             "(00.000005) Error (c.c:3): three\n"
             "Error (d.c:4): four\n"
             "(00.000006) Error (e.c:5): Dumping FAILED.\n"
             "(00.000007) Unfreezing\n",
             buf, sizeof(buf));
    assert_string_equal(buf, "Error (b.c:2): two | Error (c.c:3): three | Error (d.c:4): four | "
                             "Error (e.c:5): Dumping FAILED.");
    /* without any, the last two lines */
    log_tail("(00.000001) a\n(00.000002) b\n\n(00.000003) c", buf, sizeof(buf));
    assert_string_equal(buf, "b | c");
    /* a long line is cut at 100 characters; a small buffer stays terminated */
    char line[300];
    memset(line, 'x', sizeof(line));
    memcpy(line, "Error ", 6);
    line[sizeof(line) - 1] = '\0';
    char text[320];
    snprintf(text, sizeof(text), "%s\n", line);
    log_tail(text, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 100);
    char small[16];
    log_tail(text, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    /* an empty or missing log: nothing */
    log_tail("", buf, sizeof(buf));
    assert_string_equal(buf, "");
    oci_criu_log_tail("/nonexistent/dump.log", buf, sizeof(buf));
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_minimal, per_test_timeout),
        cmocka_unit_test_setup(test_apparmor_profiles, per_test_timeout),
        cmocka_unit_test_setup(test_process_fields, per_test_timeout),
        cmocka_unit_test_setup(test_mounts, per_test_timeout),
        cmocka_unit_test_setup(test_linux_sections, per_test_timeout),
        cmocka_unit_test_setup(test_errors_name_the_field, per_test_timeout),
        cmocka_unit_test_setup(test_malformed_documents, per_test_timeout),
        cmocka_unit_test_setup(test_signals, per_test_timeout),
        cmocka_unit_test_setup(test_ids, per_test_timeout),
        cmocka_unit_test_setup(test_default_spec_round_trip, per_test_timeout),
        cmocka_unit_test_setup(test_limits, per_test_timeout),
        cmocka_unit_test_setup(test_proc_places, per_test_timeout),
        cmocka_unit_test_setup(test_exec_recipe_round_trip, per_test_timeout),
        cmocka_unit_test_setup(test_exec_recipe_refused, per_test_timeout),
        cmocka_unit_test_setup(test_criu_version, per_test_timeout),
        cmocka_unit_test_setup(test_criu_log_tail, per_test_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
