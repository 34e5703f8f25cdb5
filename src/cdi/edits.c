/* cdi/edits: requested names -> the edits of their specs, and the edits ->
 * a container's OCI spec (pure; see cdi.h for the rules). */
#include <string.h>

#include "cdi/cdi.h"

/* ---- resolving ---- */

static void registry_errors(const struct cdi_registry *reg, struct buf *b)
{
    bool any = false;
    for (size_t i = 0; i < reg->n; i++) {
        if (reg->files[i].spec)
            continue;
        buf_printf(b, "%s`%s`: %s",
                   any ? "; " : " (spec files that do not parse: ", reg->files[i].path,
                   reg->files[i].error);
        any = true;
    }
    if (any)
        buf_printf(b, ")");
    buf_append(b, "", 1);
}

/* The device named dev in spec, or NULL. */
static json_t *spec_device(const json_t *spec, const char *dev)
{
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        if (!strcmp(json_string_value(json_object_get(d, "name")), dev))
            return d;
    }
    return NULL;
}

/* The file that defines name (kind, dev), in the last directory that has
 * it. */
static int find(const struct cdi_registry *reg, const char *name, const char *kind, const char *dev,
                size_t *ret_file, json_t **ret_dev, struct err *err)
{
    ssize_t best = -1;
    for (size_t i = 0; i < reg->n; i++) {
        const struct cdi_file *f = &reg->files[i];
        if (!f->spec) {
            if (f->kind && !strcmp(f->kind, kind))
                return err_set_msg(err, EINVAL, "CDI device `%s`: spec file `%s` of kind `%s`: %s",
                                   name, f->path, kind, f->error);
            continue;
        }
        if (strcmp(json_string_value(json_object_get(f->spec, "kind")), kind))
            continue;
        json_t *d = spec_device(f->spec, dev);
        if (!d)
            continue;
        if (best >= 0 && reg->files[best].dir == f->dir)
            return err_set_msg(err, EINVAL,
                               "CDI device `%s` is defined by both `%s` and `%s` (conflict)", name,
                               reg->files[best].path, f->path);
        if (best < 0 || f->dir > reg->files[best].dir) {
            best = (ssize_t)i;
            *ret_dev = d;
        }
    }
    if (best < 0) {
        struct buf b = {0};
        registry_errors(reg, &b);
        int r = err_set_msg(err, ENOENT, "unresolvable CDI device `%s`: no spec defines it%s", name,
                            b.data ? (char *)b.data : "");
        buf_free(&b);
        return r;
    }
    *ret_file = (size_t)best;
    return 0;
}

int cdi_resolve(const struct cdi_registry *reg, char *const *names, size_t n, json_t **ret,
                struct err *err)
{
    *ret = NULL;
    if (n > CDI_NAMES_MAX)
        return err_set_msg(err, EINVAL, "more than %d CDI devices", CDI_NAMES_MAX);
    json_t *out = json_array();
    bool *used = calloc(reg->n + 1, sizeof(bool));
    int r = 0;
    if (!out || !used) {
        r = err_set(err, ENOMEM, "CDI");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = names[i];
        bool dup = false;
        for (size_t k = 0; k < i && !dup; k++)
            dup = !strcmp(names[k], name);
        if (dup)
            continue;
        if (!cdi_name_valid(name)) {
            r = err_set_msg(
                err, EINVAL,
                "CDI device name `%.200s` is not fully qualified (vendor.com/class=name)", name);
            goto out;
        }
        char kind[320];
        const char *eq = strchr(name, '=');
        snprintf(kind, sizeof(kind), "%.*s", (int)(eq - name), name);
        size_t fi = 0;
        json_t *dev = NULL;
        if ((r = find(reg, name, kind, eq + 1, &fi, &dev, err)) < 0)
            goto out;
        json_t *se = json_object_get(reg->files[fi].spec, "containerEdits");
        if (!used[fi] && json_is_object(se) && json_array_append_new(out, json_deep_copy(se)) < 0) {
            r = err_set(err, ENOMEM, "CDI");
            goto out;
        }
        used[fi] = true;
        if (json_array_append_new(out, json_deep_copy(json_object_get(dev, "containerEdits"))) <
            0) {
            r = err_set(err, ENOMEM, "CDI");
            goto out;
        }
    }
    *ret = TAKE_PTR(out);
out:
    free(used);
    json_decref(out);
    return r;
}

/* ---- applying ---- */

/* obj[key] as an array, made when absent. NULL: no memory or not an
 * array. */
static json_t *array_at(json_t *obj, const char *key)
{
    json_t *a = json_object_get(obj, key);
    if (json_is_array(a))
        return a;
    if (a && !json_is_null(a))
        return NULL;
    a = json_array();
    return json_object_set_new(obj, key, a) < 0 ? NULL : a;
}

static json_t *object_at(json_t *obj, const char *key)
{
    json_t *o = json_object_get(obj, key);
    if (json_is_object(o))
        return o;
    if (o && !json_is_null(o))
        return NULL;
    o = json_object();
    return json_object_set_new(obj, key, o) < 0 ? NULL : o;
}

/* Removes the entries of a whose key field equals value. */
static void remove_by(json_t *a, const char *key, const char *value)
{
    for (size_t i = json_array_size(a); i-- > 0;) {
        const char *v = json_string_value(json_object_get(json_array_get(a, i), key));
        if (v && !strcmp(v, value))
            json_array_remove(a, i);
    }
}

static int apply_env(json_t *spec, const json_t *env)
{
    json_t *penv = array_at(object_at(spec, "process"), "env");
    if (!penv)
        return -ENOMEM;
    size_t i, k;
    json_t *v, *w;
    json_array_foreach(env, i, v)
    {
        const char *kv = json_string_value(v);
        size_t klen = (size_t)(strchr(kv, '=') - kv) + 1;
        bool replaced = false;
        json_array_foreach(penv, k, w)
        {
            const char *e = json_string_value(w);
            if (e && !strncmp(e, kv, klen)) {
                if (json_array_set_new(penv, k, json_string(kv)) < 0)
                    return -ENOMEM;
                replaced = true;
                break;
            }
        }
        if (!replaced && json_array_append_new(penv, json_string(kv)) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int apply_device(json_t *spec, const json_t *dn, bool skip_rules)
{
    json_t *linux = object_at(spec, "linux");
    json_t *devs = array_at(linux, "devices");
    json_t *user = object_at(object_at(spec, "process"), "user");
    if (!devs || !user)
        return -ENOMEM;
    const char *path = json_string_value(json_object_get(dn, "path"));
    const char *type = json_string_value(json_object_get(dn, "type"));
    if (!type || !*type)
        return -EINVAL; /* cdi_edits_fill sets it */
    json_t *d = json_pack("{s:s, s:s}", "path", path, "type", type);
    if (!d)
        return -ENOMEM;
    static const char *const ints[] = {"major", "minor", "fileMode", "uid", "gid"};
    for (size_t i = 0; i < ARRAY_SIZE(ints); i++) {
        json_t *v = json_object_get(dn, ints[i]);
        if (json_is_integer(v))
            json_object_set(d, ints[i], v);
    }
    /* a device a non-root process can use, as the reference does */
    static const char *const ids[] = {"uid", "gid"};
    for (size_t i = 0; i < 2; i++) {
        json_int_t id = json_integer_value(json_object_get(user, ids[i]));
        if (!json_object_get(d, ids[i]) && id > 0)
            json_object_set_new(d, ids[i], json_integer(id));
    }
    remove_by(devs, "path", path);
    if (json_array_append_new(devs, d) < 0)
        return -ENOMEM;
    if (skip_rules || !strcmp(type, "p"))
        return 0;
    const char *perms = json_string_value(json_object_get(dn, "permissions"));
    json_t *rules = array_at(object_at(linux, "resources"), "devices");
    json_t *rule =
        json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type", strcmp(type, "b") ? "c" : "b",
                  "major", json_integer_value(json_object_get(dn, "major")), "minor",
                  json_integer_value(json_object_get(dn, "minor")), "access",
                  perms && *perms ? perms : "rwm");
    if (!rules || !rule || json_array_append_new(rules, rule) < 0)
        return -ENOMEM;
    return 0;
}

static size_t depth(const json_t *m)
{
    return path_depth(json_string_value(json_object_get(m, "destination")));
}

/* The spec's mounts come ordered parents first (ctr_spec_build): a mount
 * of ours goes in after the last that is not deeper, stably, as the
 * reference's sort would place it, and moves no other mount: an edit
 * without mounts leaves the order alone. */
static int insert_by_depth(json_t *mounts, json_t *m)
{
    size_t k = json_array_size(mounts), d = depth(m);
    while (k > 0 && depth(json_array_get(mounts, k - 1)) > d)
        k--;
    return json_array_insert_new(mounts, k, m);
}

static int apply_mount(json_t *spec, const json_t *m)
{
    json_t *mounts = array_at(spec, "mounts");
    if (!mounts)
        return -ENOMEM;
    const char *dst = json_string_value(json_object_get(m, "containerPath"));
    json_t *o = json_pack("{s:s, s:s}", "destination", dst, "source",
                          json_string_value(json_object_get(m, "hostPath")));
    if (!o)
        return -ENOMEM;
    json_t *t = json_object_get(m, "type"), *opts = json_object_get(m, "options");
    if (json_is_string(t) && json_string_length(t))
        json_object_set(o, "type", t);
    if (json_is_array(opts))
        json_object_set_new(o, "options", json_deep_copy(opts));
    remove_by(mounts, "destination", dst);
    return insert_by_depth(mounts, o) < 0 ? -ENOMEM : 0;
}

static int apply_hook(json_t *spec, const json_t *h)
{
    json_t *hooks = object_at(spec, "hooks");
    json_t *list =
        hooks ? array_at(hooks, json_string_value(json_object_get(h, "hookName"))) : NULL;
    json_t *o = json_pack("{s:O}", "path", json_object_get(h, "path"));
    if (!list || !o) {
        json_decref(o);
        return -ENOMEM;
    }
    static const char *const keys[] = {"args", "env", "timeout"};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(h, keys[i]);
        if (v && !json_is_null(v))
            json_object_set_new(o, keys[i], json_deep_copy(v));
    }
    return json_array_append_new(list, o) < 0 ? -ENOMEM : 0;
}

static int apply_gids(json_t *spec, const json_t *gids)
{
    json_t *a = array_at(object_at(object_at(spec, "process"), "user"), "additionalGids");
    if (!a)
        return -ENOMEM;
    size_t i, k;
    json_t *v, *w;
    json_array_foreach(gids, i, v)
    {
        json_int_t g = json_integer_value(v);
        bool have = g == 0;
        json_array_foreach(a, k, w) have = have || json_integer_value(w) == g;
        if (!have && json_array_append_new(a, json_integer(g)) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int apply_one(json_t *spec, const json_t *e, bool skip_rules, struct err *err)
{
    if (!json_is_object(e))
        return 0;
    json_t *rdt = json_object_get(e, "intelRdt"), *nd = json_object_get(e, "netDevices");
    if (json_object_size(rdt))
        return err_set_msg(err, EOPNOTSUPP, "CDI intelRdt edits are not supported");
    if (json_array_size(nd))
        return err_set_msg(err, EOPNOTSUPP, "CDI netDevices edits are not supported");
    int r = 0;
    size_t i;
    json_t *v;
    if (json_is_array(json_object_get(e, "env")))
        r = apply_env(spec, json_object_get(e, "env"));
    json_array_foreach(json_object_get(e, "deviceNodes"), i, v)
    {
        if (r < 0)
            break;
        if ((r = apply_device(spec, v, skip_rules)) == -EINVAL)
            return err_set_msg(err, EINVAL, "CDI device node `%s`: no type",
                               json_string_value(json_object_get(v, "path")));
    }
    json_array_foreach(json_object_get(e, "mounts"), i, v)
    {
        if (r < 0)
            break;
        r = apply_mount(spec, v);
    }
    json_array_foreach(json_object_get(e, "hooks"), i, v)
    {
        if (r < 0)
            break;
        r = apply_hook(spec, v);
    }
    if (r >= 0 && json_is_array(json_object_get(e, "additionalGids")))
        r = apply_gids(spec, json_object_get(e, "additionalGids"));
    return r < 0 ? err_set(err, -r, "apply CDI edits") : 0;
}

int cdi_edits_apply(json_t *oci_spec, const json_t *edits, bool skip_rules, struct err *err)
{
    if (!json_array_size(edits))
        return 0;
    json_t *copy = json_deep_copy(oci_spec);
    if (!copy)
        return err_set(err, ENOMEM, "CDI");
    size_t i;
    json_t *e;
    json_array_foreach(edits, i, e)
    {
        int r = apply_one(copy, e, skip_rules, err);
        if (r < 0) {
            json_decref(copy);
            return r;
        }
    }
    /* all of it went in: the spec becomes the copy */
    if (json_object_update(oci_spec, copy) < 0) {
        json_decref(copy);
        return err_set(err, ENOMEM, "CDI");
    }
    json_decref(copy);
    return 0;
}
