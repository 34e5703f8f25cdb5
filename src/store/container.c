/* store/container: container records as JSON files. The ContainerConfig
 * and the current resources are base64 blobs; everything read back is
 * checked against hard limits, since a record file is input that may have
 * been damaged. */
#include <jansson.h>
#include <signal.h>
#include <string.h>

#include "store/internal.h"

static const char *const state_names[] = {"created", "running", "exited"};

const char *store_ctr_state_name(enum store_ctr_state s)
{
    return (size_t)s < ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

void store_ctr_clear(struct store_container *c)
{
    free(c->reason);
    free(c->message);
    free(c->image);
    free(c->image_id);
    free(c->image_ref);
    free(c->log_path);
    free(c->config);
    free(c->resources);
    free(c->groups);
    free(c->cgroup_path);
    *c = (struct store_container){0};
}

void store_ctrs_free(struct store_container *c, size_t n)
{
    for (size_t i = 0; c && i < n; i++)
        store_ctr_clear(&c[i]);
    free(c);
}

int store_ctr_to_json(const struct store_container *c, char **ret, size_t *ret_len, struct err *err)
{
    _cleanup_free_ char *cfg = b64_encode(c->config, c->config_len);
    _cleanup_free_ char *res = c->resources ? b64_encode(c->resources, c->resources_len) : NULL;
    json_t *groups = json_array();
    for (size_t i = 0; groups && i < c->n_groups; i++)
        if (json_array_append_new(groups, json_integer(c->groups[i])) < 0) {
            json_decref(groups);
            groups = NULL;
        }
    json_t *o = NULL;
    if (cfg && groups && (res || !c->resources))
        o = json_pack("{s:i,s:s,s:s,s:s,s:I,s:I,s:I,s:i,s:s?,s:s?,s:s,s:s,s:s,s:s?,s:s,s:s?,"
                      "s:{s:I,s:I,s:O},s:i,s:s?}",
                      "version", 1, "id", c->id, "podId", c->pod_id, "state",
                      store_ctr_state_name(c->state), "created", (json_int_t)c->created_ns,
                      "started", (json_int_t)c->started_ns, "finished", (json_int_t)c->finished_ns,
                      "exitCode", c->exit_code, "reason", c->reason, "message", c->message, "image",
                      c->image ? c->image : "", "imageId", c->image_id ? c->image_id : "",
                      "imageRef", c->image_ref ? c->image_ref : "", "logPath", c->log_path,
                      "config", cfg, "resources", res, "user", "uid", (json_int_t)c->uid, "gid",
                      (json_int_t)c->gid, "groups", groups, "stopSignal", c->stop_signal, "cgroup",
                      c->cgroup_path);
    json_decref(groups);
    if (!o)
        return err_set(err, ENOMEM, "container record `%s`", c->id);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return err_set(err, ENOMEM, "container record `%s`", c->id);
    *ret_len = strlen(text);
    *ret = text;
    return 0;
}

static int field_err(struct err *err, const char *field)
{
    return err_set(err, EINVAL, "container record: field `%s` missing or invalid", field);
}

/* A string field: absent or null gives NULL when optional; longer than max
 * or holding a NUL is invalid. */
static int text_field(json_t *o, const char *key, bool optional, size_t max, char **ret,
                      struct err *err)
{
    json_t *v = json_object_get(o, key);
    *ret = NULL;
    if (!v || json_is_null(v))
        return optional ? 0 : field_err(err, key);
    const char *s = json_string_value(v);
    if (!s || json_string_length(v) > max || strlen(s) != json_string_length(v))
        return field_err(err, key);
    if (!(*ret = strdup(s)))
        return err_set(err, ENOMEM, "container record");
    return 0;
}

static int time_field(json_t *o, const char *key, uint64_t *ret, struct err *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return field_err(err, key);
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

static int blob_field(json_t *o, const char *key, bool optional, size_t max, uint8_t **ret,
                      size_t *ret_len, struct err *err)
{
    json_t *v = json_object_get(o, key);
    *ret = NULL;
    *ret_len = 0;
    if (!v || json_is_null(v))
        return optional ? 0 : field_err(err, key);
    const char *s = json_string_value(v);
    if (!s || strlen(s) > max / 3 * 4 + 4)
        return field_err(err, key);
    int r = b64_decode(s, ret, ret_len);
    if (r == -EINVAL)
        return field_err(err, key);
    return r < 0 ? err_set(err, -r, "container record") : 0;
}

static int id_field(json_t *o, const char *key, char *ret, struct err *err)
{
    const char *s = json_string_value(json_object_get(o, key));
    if (!s || !store_id_valid(s))
        return field_err(err, key);
    memcpy(ret, s, STORE_ID_LEN + 1);
    return 0;
}

static int user_field(json_t *o, struct store_container *c, struct err *err)
{
    json_t *u = json_object_get(o, "user");
    json_t *uid = json_object_get(u, "uid"), *gid = json_object_get(u, "gid");
    json_t *groups = json_object_get(u, "groups");
    if (!json_is_integer(uid) || json_integer_value(uid) < 0 ||
        json_integer_value(uid) > UINT32_MAX)
        return field_err(err, "user.uid");
    if (!json_is_integer(gid) || json_integer_value(gid) < 0 ||
        json_integer_value(gid) > UINT32_MAX)
        return field_err(err, "user.gid");
    if (!json_is_array(groups) || json_array_size(groups) > STORE_CTR_GROUPS_MAX)
        return field_err(err, "user.groups");
    c->uid = (uint32_t)json_integer_value(uid);
    c->gid = (uint32_t)json_integer_value(gid);
    size_t n = json_array_size(groups);
    if (n && !(c->groups = calloc(n, sizeof(*c->groups))))
        return err_set(err, ENOMEM, "container record");
    for (size_t i = 0; i < n; i++) {
        json_t *g = json_array_get(groups, i);
        if (!json_is_integer(g) || json_integer_value(g) < 0 || json_integer_value(g) > UINT32_MAX)
            return field_err(err, "user.groups");
        c->groups[c->n_groups++] = (uint32_t)json_integer_value(g);
    }
    return 0;
}

static int parse(json_t *o, struct store_container *c, struct err *err)
{
    int r;
    if (json_integer_value(json_object_get(o, "version")) != 1)
        return field_err(err, "version");
    if ((r = id_field(o, "id", c->id, err)) < 0 || (r = id_field(o, "podId", c->pod_id, err)) < 0)
        return r;
    const char *state = json_string_value(json_object_get(o, "state"));
    size_t k = 0;
    while (state && k < ARRAY_SIZE(state_names) && strcmp(state, state_names[k]))
        k++;
    if (!state || k == ARRAY_SIZE(state_names))
        return field_err(err, "state");
    c->state = (enum store_ctr_state)k;
    if ((r = time_field(o, "created", &c->created_ns, err)) < 0 ||
        (r = time_field(o, "started", &c->started_ns, err)) < 0 ||
        (r = time_field(o, "finished", &c->finished_ns, err)) < 0)
        return r;
    json_t *code = json_object_get(o, "exitCode");
    if (!json_is_integer(code) || json_integer_value(code) < -1 || json_integer_value(code) > 255)
        return field_err(err, "exitCode");
    c->exit_code = (int)json_integer_value(code);
    json_t *sig = json_object_get(o, "stopSignal");
    if (!json_is_integer(sig) || json_integer_value(sig) < 1 ||
        json_integer_value(sig) >= SIGRTMAX + 1)
        return field_err(err, "stopSignal");
    c->stop_signal = (int)json_integer_value(sig);
    if ((r = text_field(o, "reason", true, 256, &c->reason, err)) < 0 ||
        (r = text_field(o, "message", true, STORE_CTR_TEXT_MAX, &c->message, err)) < 0 ||
        (r = text_field(o, "image", false, STORE_CTR_TEXT_MAX, &c->image, err)) < 0 ||
        (r = text_field(o, "imageId", false, 256, &c->image_id, err)) < 0 ||
        (r = text_field(o, "imageRef", false, STORE_CTR_TEXT_MAX, &c->image_ref, err)) < 0 ||
        (r = text_field(o, "logPath", true, STORE_CTR_TEXT_MAX, &c->log_path, err)) < 0 ||
        (r = text_field(o, "cgroup", true, STORE_CTR_TEXT_MAX, &c->cgroup_path, err)) < 0)
        return r;
    if (c->log_path && c->log_path[0] != '/')
        return field_err(err, "logPath");
    if (c->cgroup_path && (c->cgroup_path[0] != '/' || strstr(c->cgroup_path, "..")))
        return field_err(err, "cgroup");
    if ((r = blob_field(o, "config", false, STORE_CONFIG_MAX, &c->config, &c->config_len, err)) <
            0 ||
        (r = blob_field(o, "resources", true, STORE_CONFIG_MAX, &c->resources, &c->resources_len,
                        err)) < 0)
        return r;
    return user_field(o, c, err);
}

int store_ctr_from_json(const char *text, size_t len, struct store_container *ret, struct err *err)
{
    if (len > STORE_RECORD_MAX)
        return err_set(err, EINVAL, "container record: larger than %d bytes", STORE_RECORD_MAX);
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return err_set(err, EINVAL, "container record: not a JSON object: %s", jerr.text);
    }
    struct store_container c = {0};
    int r = parse(o, &c, err);
    json_decref(o);
    if (r < 0) {
        store_ctr_clear(&c);
        return r;
    }
    *ret = c;
    return 0;
}

struct ctr_load {
    struct store_container *ctrs;
    size_t n, cap;
};

static int ctr_load_one(const char *id, const char *text, size_t len, void *data)
{
    struct ctr_load *l = data;
    struct store_container c;
    struct err e = {0};
    int r = store_ctr_from_json(text, len, &c, &e);
    if (r < 0)
        return r == -ENOMEM ? r : -EINVAL;
    if (strcmp(c.id, id) != 0) {
        store_ctr_clear(&c);
        return -EINVAL;
    }
    if (l->n == l->cap) { /* doubling: tens of thousands of records load in linear time */
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct store_container *nc = reallocarray(l->ctrs, cap, sizeof(*nc));
        if (!nc) {
            store_ctr_clear(&c);
            return -ENOMEM;
        }
        l->ctrs = nc;
        l->cap = cap;
    }
    l->ctrs[l->n++] = c;
    return 0;
}

int store_ctr_load_all(const char *dir, struct store_container **ret, size_t *ret_n,
                       char ***ret_bad_ids, size_t *ret_bad, struct err *err)
{
    struct ctr_load l = {0};
    int r = store_record_scan(dir, ctr_load_one, &l, ret_bad_ids, ret_bad, err);
    if (r < 0) {
        store_ctrs_free(l.ctrs, l.n);
        return r;
    }
    *ret = l.ctrs;
    *ret_n = l.n;
    return 0;
}
