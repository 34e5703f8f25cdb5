/* cdi: spec parsing (JSON and YAML), names, resolution and OCI edits. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"
#include "harness.h"

static json_t *parse_ok(const char *text, bool yaml)
{
    struct err e = {0};
    json_t *j = NULL;
    int r = cdi_spec_parse(text, strlen(text), yaml, &j, &e);
    if (r < 0)
        fail_msg("parse: %s", err_str(&e));
    return j;
}

/* The error of a spec that must not parse, which must mention want. */
static void parse_fails(const char *text, bool yaml, const char *want)
{
    struct err e = {0};
    json_t *j = NULL;
    int r = cdi_spec_parse(text, strlen(text), yaml, &j, &e);
    if (r >= 0)
        fail_msg("parsed, expected an error with `%s`: %s", want, text);
    assert_int_equal(r, -EINVAL);
    assert_null(j);
    if (!strstr(err_str(&e), want))
        fail_msg("error `%s` does not mention `%s`", err_str(&e), want);
}

static void names(void **state)
{
    (void)state;
    assert_true(cdi_name_valid("nvidia.com/gpu=0"));
    assert_true(cdi_name_valid("vendor.com/class=all"));
    assert_true(cdi_name_valid("a.b-c_d/x_y.z=GPU-1234:abc.d"));
    assert_false(cdi_name_valid("nvidia.com/gpu"));
    assert_false(cdi_name_valid("gpu=0"));
    assert_false(cdi_name_valid("nvidia.com/gpu="));
    assert_false(cdi_name_valid("nvidia.com/gpu=-0"));
    assert_false(cdi_name_valid("nvidia.com/gpu=0/1"));
    assert_false(cdi_name_valid("1vendor.com/gpu=0"));
    assert_false(cdi_name_valid("vendor.com/1gpu=0"));
    assert_false(cdi_name_valid("vendor.com/a/b=0"));
}

static const char yaml_spec[] = "cdiVersion: 0.6.0\n"
                                "kind: vendor.com/gpu\n"
                                "annotations: {a: b}\n"
                                "devices:\n"
                                "- name: \"0\"\n"
                                "  containerEdits:\n"
                                "    deviceNodes:\n"
                                "    - path: /dev/gpu0\n"
                                "      fileMode: 0640\n"
                                "      major: 0x1f\n"
                                "      uid: 1000\n"
                                "- name: all\n"
                                "  containerEdits:\n"
                                "    env: ['X=1', \"Y=a: b\"]\n"
                                "containerEdits:\n"
                                "  additionalGids: [44]\n"
                                "  mounts:\n"
                                "  - {hostPath: /lib/x, containerPath: /lib/x, options: [ro, "
                                "rbind]}\n";

static void yaml_and_json(void **state)
{
    (void)state;
    json_t *y = parse_ok(yaml_spec, true);
    /* typed as YAML 1.1: 0640 octal, 0x1f hex; "0" stays a string */
    json_t *dn = json_array_get(
        json_object_get(
            json_object_get(json_array_get(json_object_get(y, "devices"), 0), "containerEdits"),
            "deviceNodes"),
        0);
    assert_int_equal(json_integer_value(json_object_get(dn, "fileMode")), 0640);
    assert_int_equal(json_integer_value(json_object_get(dn, "major")), 31);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(y, "devices"), 0), "name")),
                        "0");
    /* the same spec as JSON gives the same object */
    char *text = json_dumps(y, JSON_COMPACT);
    json_t *j = parse_ok(text, false);
    assert_true(json_equal(y, j));
    free(text);
    json_decref(y);
    json_decref(j);
}

static void malformed(void **state)
{
    (void)state;
    parse_fails("{\"kind\": ", false, "not JSON");
    parse_fails("kind: [", true, "not YAML");
    parse_fails("cdiVersion: 0.2.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {env: "
                "[A=1]}}]\n",
                true, "cdiVersion");
    parse_fails("cdiVersion: 2.0.0\nkind: a.com/b\n", true, "cdiVersion");
    parse_fails("cdiVersion: 0.6.0\nkind: b\ndevices: []\n", true, "kind");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: []\n", true, "devices");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: -x, containerEdits: {env: "
                "[A=1]}}]\n",
                true, "-x");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x}]\n", true,
                "no container edits");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {env: "
                "[NOEQUALS]}}]\n",
                true, "NOEQUALS");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: "
                "{deviceNodes: [{path: /dev/x, permissions: rwx}]}}]\n",
                true, "permissions");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: "
                "{hooks: [{hookName: onBoot, path: /bin/true}]}}]\n",
                true, "onBoot");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: "
                "{mounts: [{hostPath: /a, containerPath: rel}]}}]\n",
                true, "rel");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: "
                "{env: [A=1], sysctl: {}}}]\n",
                true, "sysctl");
    parse_fails("cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {env: "
                "[A=1]}}, {name: x, containerEdits: {env: [B=1]}}]\n",
                true, "twice");
    /* YAML: aliases, duplicate keys, several documents, deep nesting */
    parse_fails("a: &x [1]\nb: *x\n", true, "aliases");
    parse_fails("a: 1\na: 2\n", true, "twice");
    parse_fails("a: 1\n---\nb: 2\n", true, "document");
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = '\0';
    parse_fails(deep, true, "deeper");
}

static json_t *oci(void)
{
    return json_loads(
        "{\"process\":{\"env\":[\"PATH=/bin\",\"X=0\"],\"user\":{\"uid\":1000,"
        "\"gid\":1000,\"additionalGids\":[1000]}},"
        "\"mounts\":[{\"destination\":\"/proc\"},{\"destination\":\"/lib/x/y\"},"
        "{\"destination\":\"/lib/x\",\"source\":\"/old\"}],"
        "\"linux\":{\"resources\":{\"devices\":[{\"allow\":false,\"access\":\"rwm\"}]},"
        "\"devices\":[{\"path\":\"/dev/gpu0\",\"type\":\"c\",\"major\":9,\"minor\":9}]}}",
        0, NULL);
}

static void resolve_and_apply(void **state)
{
    (void)state;
    struct cdi_file files[3] = {
        {.path = "/etc/cdi/gpu.yaml", .dir = 0, .spec = parse_ok(yaml_spec, true)},
        {.path = "/etc/cdi/broken.json", .dir = 0, .error = "not JSON"},
        {.path = "/var/run/cdi/gpu.json",
         .dir = 1,
         .spec = parse_ok("{\"cdiVersion\":\"1.0.0\",\"kind\":\"vendor.com/gpu\",\"devices\":["
                          "{\"name\":\"all\",\"containerEdits\":{\"env\":[\"X=override\"],"
                          "\"hooks\":[{\"hookName\":\"createContainer\",\"path\":\"/bin/hook\","
                          "\"args\":[\"hook\"],\"timeout\":5}]}}]}",
                          false)},
    };
    struct cdi_registry reg = {.files = files, .n = 3};
    struct err e = {0};
    json_t *edits = NULL;
    char *want[] = {"vendor.com/gpu=0", "vendor.com/gpu=all", "vendor.com/gpu=0"};
    assert_int_equal(cdi_resolve(&reg, want, 3, &edits, &e), 0);
    /* spec-wide edits once, then each device once; `all` from the later
     * directory */
    assert_int_equal(json_array_size(edits), 3);
    assert_non_null(json_object_get(json_array_get(edits, 0), "additionalGids"));
    assert_non_null(json_object_get(json_array_get(edits, 2), "hooks"));
    /* fill by hand what cdi_edits_fill takes from the host */
    json_t *dn = json_array_get(json_object_get(json_array_get(edits, 1), "deviceNodes"), 0);
    json_object_set_new(dn, "type", json_string("c"));
    json_object_set_new(dn, "minor", json_integer(2));
    json_t *spec = oci();
    assert_int_equal(cdi_edits_apply(spec, edits, false, &e), 0);
    char *text = json_dumps(spec, JSON_COMPACT);
    /* env replaced by key; the device node replaced at its path with the
     * process's uid/gid; its rule; the mount replaced and sorted above
     * its child; the hook; the GID */
    assert_string_equal(
        text,
        "{\"process\":{\"env\":[\"PATH=/bin\",\"X=override\"],\"user\":{\"uid\":1000,\"gid\":1000,"
        "\"additionalGids\":[1000,44]}},\"mounts\":[{\"destination\":\"/proc\"},"
        "{\"destination\":\"/lib/x\",\"source\":\"/lib/x\",\"options\":[\"ro\",\"rbind\"]},"
        "{\"destination\":\"/lib/x/y\"}],\"linux\":{\"resources\":{\"devices\":[{\"allow\":false,"
        "\"access\":\"rwm\"},{\"allow\":true,\"type\":\"c\",\"major\":31,\"minor\":2,\"access\":"
        "\"rwm\"}]},\"devices\":[{\"path\":\"/dev/gpu0\",\"type\":\"c\",\"major\":31,\"minor\":2,"
        "\"fileMode\":416,\"uid\":1000,\"gid\":1000}]},\"hooks\":{\"createContainer\":[{\"path\":"
        "\"/bin/hook\",\"args\":[\"hook\"],\"timeout\":5}]}}");
    free(text);
    json_decref(spec);
    json_decref(edits);

    /* unknown: the name and the files that did not parse */
    char *unknown[] = {"vendor.com/gpu=7"};
    assert_int_equal(cdi_resolve(&reg, unknown, 1, &edits, &e), -ENOENT);
    assert_null(edits);
    assert_non_null(strstr(err_str(&e), "vendor.com/gpu=7"));
    assert_non_null(strstr(err_str(&e), "/etc/cdi/broken.json"));
    char *bad[] = {"gpu7"};
    assert_int_equal(cdi_resolve(&reg, bad, 1, &edits, &e), -EINVAL);
    /* one device twice in one directory: a conflict */
    files[1] = (struct cdi_file){.path = "/etc/cdi/gpu2.yaml", .dir = 0, .spec = files[0].spec};
    assert_int_equal(cdi_resolve(&reg, want, 1, &edits, &e), -EINVAL);
    assert_non_null(strstr(err_str(&e), "conflict"));
    /* a broken file of the kind asked for fails the request */
    files[1] = (struct cdi_file){
        .path = "/etc/cdi/gpu2.yaml", .dir = 0, .kind = "vendor.com/gpu", .error = "bad"};
    assert_int_equal(cdi_resolve(&reg, want + 1, 1, &edits, &e), -EINVAL);
    assert_non_null(strstr(err_str(&e), "/etc/cdi/gpu2.yaml"));
    json_decref(files[0].spec);
    json_decref(files[2].spec);
}

static void apply_is_all_or_nothing(void **state)
{
    (void)state;
    json_t *edits = json_loads("[{\"env\":[\"A=1\"]},{\"env\":[\"B=1\"],\"intelRdt\":"
                               "{\"closID\":\"x\"}}]",
                               0, NULL);
    json_t *spec = oci(), *before = json_deep_copy(spec);
    struct err e = {0};
    assert_int_equal(cdi_edits_apply(spec, edits, false, &e), -EOPNOTSUPP);
    assert_true(json_equal(spec, before));
    json_decref(edits);
    json_decref(spec);
    json_decref(before);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(names),
    cmocka_unit_test(yaml_and_json),
    cmocka_unit_test(malformed),
    cmocka_unit_test(resolve_and_apply),
    cmocka_unit_test(apply_is_all_or_nothing),
};

UNIT_MAIN(tests)
