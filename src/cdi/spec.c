/* cdi/spec: a CDI spec's text -> a validated JSON object (pure). The checks
 * are the reference implementation's (names, kinds, versions, edits), and
 * unknown fields are refused: an edit kinglet does not know must not be
 * dropped without a word. */
#include <ctype.h>
#include <string.h>

#include "cdi/cdi.h"

static bool is_alnum(char c) { return isascii((unsigned char)c) && isalnum((unsigned char)c); }
static bool is_alpha(char c) { return isascii((unsigned char)c) && isalpha((unsigned char)c); }

/* vendor: a letter first, alphanumerics last, '-', '_', '.' between */
static bool vendor_valid(const char *s, size_t n)
{
    if (n == 0 || n > 253 || !is_alpha(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* class: a letter first, alphanumerics last, '-', '_' (and, since 0.6.0,
 * '.') between */
static bool class_valid(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !is_alpha(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* device: alphanumerics first and last, '-', '_', '.', ':' between */
static bool device_valid(const char *s, size_t n)
{
    if (n == 0 || n > 253 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.' && s[i] != ':')
            return false;
    return true;
}

static bool kind_valid(const char *kind)
{
    const char *slash = strchr(kind, '/');
    return slash && vendor_valid(kind, (size_t)(slash - kind)) &&
           class_valid(slash + 1, strlen(slash + 1));
}

bool cdi_name_valid(const char *name)
{
    const char *eq = strchr(name, '=');
    if (!eq)
        return false;
    char kind[320];
    size_t kn = (size_t)(eq - name);
    if (kn >= sizeof(kind))
        return false;
    memcpy(kind, name, kn);
    kind[kn] = '\0';
    return kind_valid(kind) && device_valid(eq + 1, strlen(eq + 1));
}

/* "0.3.0" .. "0.8.x", "1.0.x" (an optional leading 'v'); anything else is
 * a spec kinglet does not know. */
static bool version_known(const char *v)
{
    unsigned maj, min, patch;
    char tail;
    if (*v == 'v')
        v++;
    if (sscanf(v, "%u.%u.%u%c", &maj, &min, &patch, &tail) != 3)
        return false;
    return (maj == 0 && min >= 3 && min <= 8) || (maj == 1 && min == 0);
}

/* ---- field checks ---- */

/* Keys of obj that are not in allowed: -EINVAL naming the first. */
static int only_keys(const json_t *obj, const char *const *allowed, const char *where,
                     struct err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(k, allowed[i]);
        if (!ok)
            return err_set_msg(err, EINVAL, "%s: unknown field `%.64s`", where, k);
    }
    return 0;
}

static int want_type(const json_t *v, json_type t, const char *where, const char *what,
                     struct err *err)
{
    if (!v || json_typeof(v) != t)
        return err_set_msg(err, EINVAL, "%s: expected %s", where, what);
    return 0;
}

static bool is_abs(const char *s) { return s && s[0] == '/'; }

static int check_strings(const json_t *a, const char *where, bool env, struct err *err)
{
    if (!a || json_is_null(a))
        return 0;
    int r = want_type(a, JSON_ARRAY, where, "an array of strings", err);
    if (r < 0)
        return r;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        const char *s = json_string_value(v);
        if (!s)
            return err_set_msg(err, EINVAL, "%s[%zu]: expected a string", where, i);
        if (env && (!strchr(s, '=') || s[0] == '='))
            return err_set_msg(err, EINVAL, "%s[%zu]: `%.64s` is not NAME=VALUE", where, i, s);
    }
    return 0;
}

/* An optional integer in [lo, hi]. */
static int check_int(const json_t *o, const char *key, json_int_t lo, json_int_t hi,
                     const char *where, struct err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return err_set_msg(err, EINVAL, "%s.%s: expected an integer in [%lld, %lld]", where, key,
                           (long long)lo, (long long)hi);
    return 0;
}

static int check_str(const json_t *o, const char *key, bool required, const char *where,
                     struct err *err)
{
    json_t *v = json_object_get(o, key);
    if ((!v || json_is_null(v)) && !required)
        return 0;
    if (!json_is_string(v) || (required && !*json_string_value(v)))
        return err_set_msg(err, EINVAL, "%s.%s: %s", where, key,
                           required ? "a non-empty string is required" : "expected a string");
    return 0;
}

static int check_device_node(const json_t *d, const char *where, struct err *err)
{
    static const char *const keys[] = {"path",     "hostPath",    "type", "major", "minor",
                                       "fileMode", "permissions", "uid",  "gid",   NULL};
    int r;
    if ((r = want_type(d, JSON_OBJECT, where, "an object", err)) < 0 ||
        (r = only_keys(d, keys, where, err)) < 0 ||
        (r = check_str(d, "path", true, where, err)) < 0 ||
        (r = check_str(d, "hostPath", false, where, err)) < 0 ||
        (r = check_str(d, "type", false, where, err)) < 0 ||
        (r = check_str(d, "permissions", false, where, err)) < 0 ||
        (r = check_int(d, "major", 0, 0xffffffffLL, where, err)) < 0 ||
        (r = check_int(d, "minor", 0, 0xffffffffLL, where, err)) < 0 ||
        (r = check_int(d, "fileMode", 0, 07777, where, err)) < 0 ||
        (r = check_int(d, "uid", 0, 0xffffffffLL, where, err)) < 0 ||
        (r = check_int(d, "gid", 0, 0xffffffffLL, where, err)) < 0)
        return r;
    const char *path = json_string_value(json_object_get(d, "path"));
    const char *host = json_string_value(json_object_get(d, "hostPath"));
    if (!is_abs(path))
        return err_set_msg(err, EINVAL, "%s.path: `%.200s` is not absolute", where, path);
    if (host && *host && !is_abs(host))
        return err_set_msg(err, EINVAL, "%s.hostPath: `%.200s` is not absolute", where, host);
    const char *type = json_string_value(json_object_get(d, "type"));
    if (type && *type && strcmp(type, "b") && strcmp(type, "c") && strcmp(type, "u") &&
        strcmp(type, "p"))
        return err_set_msg(err, EINVAL, "%s.type: `%.16s` is not b, c, u or p", where, type);
    const char *perms = json_string_value(json_object_get(d, "permissions"));
    if (perms && perms[strspn(perms, "rwm")])
        return err_set_msg(err, EINVAL, "%s.permissions: `%.16s` is not a subset of rwm", where,
                           perms);
    return 0;
}

static int check_mount(const json_t *m, const char *where, struct err *err)
{
    static const char *const keys[] = {"hostPath", "containerPath", "type", "options", NULL};
    char f[160];
    int r;
    if ((r = want_type(m, JSON_OBJECT, where, "an object", err)) < 0 ||
        (r = only_keys(m, keys, where, err)) < 0 ||
        (r = check_str(m, "hostPath", true, where, err)) < 0 ||
        (r = check_str(m, "containerPath", true, where, err)) < 0 ||
        (r = check_str(m, "type", false, where, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.options", where);
    if ((r = check_strings(json_object_get(m, "options"), f, false, err)) < 0)
        return r;
    const char *dst = json_string_value(json_object_get(m, "containerPath"));
    if (!is_abs(dst))
        return err_set_msg(err, EINVAL, "%s.containerPath: `%.200s` is not absolute", where, dst);
    return 0;
}

static const char *const hook_names[] = {
    "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
    NULL};

static int check_hook(const json_t *h, const char *where, struct err *err)
{
    static const char *const keys[] = {"hookName", "path", "args", "env", "timeout", NULL};
    char f[160];
    int r;
    if ((r = want_type(h, JSON_OBJECT, where, "an object", err)) < 0 ||
        (r = only_keys(h, keys, where, err)) < 0 ||
        (r = check_str(h, "hookName", true, where, err)) < 0 ||
        (r = check_str(h, "path", true, where, err)) < 0 ||
        (r = check_int(h, "timeout", 1, 0x7fffffff, where, err)) < 0)
        return r;
    const char *name = json_string_value(json_object_get(h, "hookName"));
    bool known = false;
    for (size_t i = 0; hook_names[i] && !known; i++)
        known = !strcmp(name, hook_names[i]);
    if (!known)
        return err_set_msg(err, EINVAL, "%s.hookName: `%.64s` is not a hook kinglet runs", where,
                           name);
    const char *path = json_string_value(json_object_get(h, "path"));
    if (!is_abs(path))
        return err_set_msg(err, EINVAL, "%s.path: `%.200s` is not absolute", where, path);
    snprintf(f, sizeof(f), "%s.args", where);
    if ((r = check_strings(json_object_get(h, "args"), f, false, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.env", where);
    return check_strings(json_object_get(h, "env"), f, true, err);
}

static int check_list(const json_t *a, const char *where,
                      int (*one)(const json_t *, const char *, struct err *), struct err *err)
{
    if (!a || json_is_null(a))
        return 0;
    int r = want_type(a, JSON_ARRAY, where, "an array", err);
    if (r < 0)
        return r;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        char f[160];
        snprintf(f, sizeof(f), "%s[%zu]", where, i);
        if ((r = one(v, f, err)) < 0)
            return r;
    }
    return 0;
}

static int check_edits(const json_t *e, const char *where, struct err *err)
{
    static const char *const keys[] = {"env",      "deviceNodes",    "mounts",     "hooks",
                                       "intelRdt", "additionalGids", "netDevices", NULL};
    char f[160];
    int r;
    if (!e || json_is_null(e))
        return 0;
    if ((r = want_type(e, JSON_OBJECT, where, "an object", err)) < 0 ||
        (r = only_keys(e, keys, where, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.env", where);
    if ((r = check_strings(json_object_get(e, "env"), f, true, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.deviceNodes", where);
    if ((r = check_list(json_object_get(e, "deviceNodes"), f, check_device_node, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.mounts", where);
    if ((r = check_list(json_object_get(e, "mounts"), f, check_mount, err)) < 0)
        return r;
    snprintf(f, sizeof(f), "%s.hooks", where);
    if ((r = check_list(json_object_get(e, "hooks"), f, check_hook, err)) < 0)
        return r;
    json_t *g = json_object_get(e, "additionalGids");
    if (g && !json_is_null(g)) {
        snprintf(f, sizeof(f), "%s.additionalGids", where);
        if ((r = want_type(g, JSON_ARRAY, f, "an array of uint32", err)) < 0)
            return r;
        size_t i;
        json_t *v;
        json_array_foreach(g, i, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > 0xffffffffLL)
                return err_set_msg(err, EINVAL, "%s[%zu]: expected a uint32", f, i);
        }
    }
    json_t *rdt = json_object_get(e, "intelRdt");
    if (rdt && !json_is_null(rdt)) {
        snprintf(f, sizeof(f), "%s.intelRdt", where);
        if ((r = want_type(rdt, JSON_OBJECT, f, "an object", err)) < 0)
            return r;
    }
    json_t *nd = json_object_get(e, "netDevices");
    if (nd && !json_is_null(nd)) {
        snprintf(f, sizeof(f), "%s.netDevices", where);
        if ((r = want_type(nd, JSON_ARRAY, f, "an array", err)) < 0)
            return r;
    }
    return 0;
}

static bool edits_empty(const json_t *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)e, k, v)
    {
        if ((json_is_array(v) && json_array_size(v)) || (json_is_object(v) && json_object_size(v)))
            return false;
    }
    return true;
}

static int check_annotations(const json_t *a, const char *where, struct err *err)
{
    if (!a || json_is_null(a))
        return 0;
    int r = want_type(a, JSON_OBJECT, where, "an object of strings", err);
    if (r < 0)
        return r;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v)
    {
        if (!json_is_string(v))
            return err_set_msg(err, EINVAL, "%s.%.64s: expected a string", where, k);
    }
    return 0;
}

static int spec_check(const json_t *s, struct err *err)
{
    static const char *const keys[] = {"cdiVersion", "kind",           "annotations",
                                       "devices",    "containerEdits", NULL};
    static const char *const dev_keys[] = {"name", "annotations", "containerEdits", NULL};
    int r;
    if ((r = want_type(s, JSON_OBJECT, "the spec", "an object", err)) < 0 ||
        (r = only_keys(s, keys, "the spec", err)) < 0)
        return r;
    const char *version = json_string_value(json_object_get(s, "cdiVersion"));
    if (!version)
        return err_set_msg(err, EINVAL, "cdiVersion: a string is required");
    if (!version_known(version))
        return err_set_msg(err, EINVAL,
                           "cdiVersion `%.32s` is not one kinglet knows (0.3.0 to 1.0.x)", version);
    const char *kind = json_string_value(json_object_get(s, "kind"));
    if (!kind)
        return err_set_msg(err, EINVAL, "kind: a string is required");
    if (!kind_valid(kind))
        return err_set_msg(err, EINVAL, "kind `%.200s` is not vendor.com/class", kind);
    if ((r = check_annotations(json_object_get(s, "annotations"), "annotations", err)) < 0 ||
        (r = check_edits(json_object_get(s, "containerEdits"), "containerEdits", err)) < 0)
        return r;
    json_t *devs = json_object_get(s, "devices");
    if (!json_is_array(devs) || !json_array_size(devs))
        return err_set_msg(err, EINVAL, "devices: a non-empty array is required");
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d)
    {
        char f[128];
        snprintf(f, sizeof(f), "devices[%zu]", i);
        if ((r = want_type(d, JSON_OBJECT, f, "an object", err)) < 0 ||
            (r = only_keys(d, dev_keys, f, err)) < 0)
            return r;
        const char *name = json_string_value(json_object_get(d, "name"));
        if (!name || !device_valid(name, strlen(name)))
            return err_set_msg(err, EINVAL, "%s.name: `%.200s` is not a valid device name", f,
                               name ? name : "");
        for (size_t k = 0; k < i; k++)
            if (!strcmp(name, json_string_value(json_object_get(json_array_get(devs, k), "name"))))
                return err_set_msg(err, EINVAL, "%s.name: `%.200s` is defined twice", f, name);
        snprintf(f, sizeof(f), "devices[%zu] `%.64s`", i, name);
        char g[160];
        snprintf(g, sizeof(g), "%s.annotations", f);
        if ((r = check_annotations(json_object_get(d, "annotations"), g, err)) < 0)
            return r;
        snprintf(g, sizeof(g), "%s.containerEdits", f);
        json_t *e = json_object_get(d, "containerEdits");
        if ((r = check_edits(e, g, err)) < 0)
            return r;
        if (!json_is_object(e) || edits_empty(e))
            return err_set_msg(err, EINVAL, "%s: no container edits", f);
    }
    return 0;
}

int cdi_spec_parse(const char *text, size_t len, bool yaml, json_t **ret, struct err *err)
{
    json_t *j = NULL;
    *ret = NULL;
    if (len > CDI_SPEC_MAX_BYTES)
        return err_set_msg(err, EINVAL, "larger than %u bytes", CDI_SPEC_MAX_BYTES);
    if (yaml) {
        int r = cdi_yaml_to_json(text, len, &j, err);
        if (r < 0)
            return r;
    } else {
        json_error_t je;
        j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
            return err_set_msg(err, EINVAL, "not JSON: line %d: %.200s", je.line, je.text);
    }
    int r = spec_check(j, err);
    if (r < 0) {
        json_decref(j);
        return r;
    }
    *ret = j;
    return 0;
}
