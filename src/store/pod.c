/* store/pod: pod records as JSON files. The opaque config is base64 in the
 * record; everything read back is checked against hard limits, since a
 * record file is input that may have been damaged. */
#include <arpa/inet.h>
#include <jansson.h>
#include <string.h>

#include "store/internal.h"

int store_pod_to_json(const struct store_pod *p, char **ret, size_t *ret_len, struct err *err)
{
    _cleanup_free_ char *cfg = b64_encode(p->config, p->config_len);
    json_t *ips = json_array();
    for (size_t i = 0; ips && i < p->nips; i++)
        json_array_append_new(ips, json_string(p->ips[i]));
    json_t *o = json_pack("{s:i,s:s,s:s,s:I,s:s,s:s,s:o,s:i,s:I,s:s?}", "version", 1, "id", p->id,
                          "state", p->state == STORE_POD_READY ? "ready" : "notready", "created",
                          (json_int_t)p->created_ns, "runtimeHandler",
                          p->runtime_handler ? p->runtime_handler : "", "config", cfg ? cfg : "",
                          "ips", ips, "initPid", (int)p->init_pid, "initStart",
                          (json_int_t)p->init_start, "cgroup", p->cgroup_path);
    if (!o || !cfg)
        return json_decref(o), err_set(err, ENOMEM, "pod record `%s`", p->id);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return err_set(err, ENOMEM, "pod record `%s`", p->id);
    *ret_len = strlen(text);
    *ret = text;
    return 0;
}

void store_pod_clear(struct store_pod *p)
{
    free(p->runtime_handler);
    free(p->config);
    free(p->cgroup_path);
    *p = (struct store_pod){0};
}

static int field_err(struct err *err, const char *field)
{
    return err_set(err, EINVAL, "pod record: field `%s` missing or invalid", field);
}

int store_pod_from_json(const char *text, size_t len, struct store_pod *ret, struct err *err)
{
    if (len > STORE_RECORD_MAX)
        return err_set(err, EINVAL, "pod record: larger than %d bytes", STORE_RECORD_MAX);
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return err_set(err, EINVAL, "pod record: not a JSON object: %s", jerr.text);
    }
    struct store_pod p = {0};
    int r = 0;
    const char *id = json_string_value(json_object_get(o, "id"));
    const char *state = json_string_value(json_object_get(o, "state"));
    const char *handler = json_string_value(json_object_get(o, "runtimeHandler"));
    const char *cfg = json_string_value(json_object_get(o, "config"));
    json_t *ips = json_object_get(o, "ips");
    json_t *created = json_object_get(o, "created");
    json_t *pid = json_object_get(o, "initPid");
    json_t *start = json_object_get(o, "initStart");
    json_t *cg = json_object_get(o, "cgroup");
    if (json_integer_value(json_object_get(o, "version")) != 1) {
        r = field_err(err, "version");
    } else if (!id || !store_id_valid(id)) {
        r = field_err(err, "id");
    } else if (!state || (strcmp(state, "ready") && strcmp(state, "notready"))) {
        r = field_err(err, "state");
    } else if (!handler || strlen(handler) > 256) {
        r = field_err(err, "runtimeHandler");
    } else if (!cfg || strlen(cfg) > STORE_CONFIG_MAX / 3 * 4 + 4) {
        r = field_err(err, "config");
    } else if (!json_is_array(ips) || json_array_size(ips) > 2) {
        r = field_err(err, "ips");
    } else if (!json_is_integer(created) || json_integer_value(created) < 0) {
        r = field_err(err, "created");
    } else if (!json_is_integer(pid) || json_integer_value(pid) < 0 ||
               json_integer_value(pid) > (1 << 22)) {
        r = field_err(err, "initPid");
    } else if (!json_is_integer(start) || json_integer_value(start) < 0) {
        r = field_err(err, "initStart");
    } else if (cg && !json_is_null(cg) &&
               (!json_is_string(cg) || json_string_value(cg)[0] != '/' ||
                strlen(json_string_value(cg)) > 4096 || strstr(json_string_value(cg), ".."))) {
        r = field_err(err, "cgroup");
    }
    if (r < 0) {
        json_decref(o);
        return r;
    }
    snprintf(p.id, sizeof(p.id), "%s", id);
    p.state = strcmp(state, "ready") == 0 ? STORE_POD_READY : STORE_POD_NOTREADY;
    p.created_ns = (uint64_t)json_integer_value(created);
    p.init_pid = (pid_t)json_integer_value(pid);
    p.init_start = (uint64_t)json_integer_value(start);
    for (size_t i = 0; i < json_array_size(ips); i++) {
        const char *ip = json_string_value(json_array_get(ips, i));
        uint8_t buf[16];
        if (!ip || (inet_pton(AF_INET, ip, buf) != 1 && inet_pton(AF_INET6, ip, buf) != 1)) {
            r = field_err(err, "ips");
            break;
        }
        snprintf(p.ips[p.nips++], INET6_ADDRSTRLEN, "%s", ip);
    }
    if (r == 0) {
        p.runtime_handler = strdup(handler);
        p.cgroup_path = json_is_string(cg) ? strdup(json_string_value(cg)) : NULL;
        int b = b64_decode(cfg, &p.config, &p.config_len);
        if (b == -EINVAL)
            r = field_err(err, "config");
        else if (b < 0 || !p.runtime_handler || (json_is_string(cg) && !p.cgroup_path))
            r = err_set(err, ENOMEM, "pod record");
    }
    json_decref(o);
    if (r < 0) {
        store_pod_clear(&p);
        return r;
    }
    *ret = p;
    return 0;
}

void store_pods_free(struct store_pod *pods, size_t n)
{
    for (size_t i = 0; pods && i < n; i++)
        store_pod_clear(&pods[i]);
    free(pods);
}

int store_pod_write(const char *dir, const char *id, const char *json, size_t len, struct err *err)
{
    return store_record_write(dir, id, json, len, err);
}

int store_pod_delete(const char *dir, const char *id, struct err *err)
{
    return store_record_delete(dir, id, err);
}

struct pod_load {
    struct store_pod *pods;
    size_t n, cap;
};

static int pod_load_one(const char *id, const char *text, size_t len, void *data)
{
    struct pod_load *l = data;
    struct store_pod p;
    struct err e = {0};
    int r = store_pod_from_json(text, len, &p, &e);
    if (r < 0)
        return r == -ENOMEM ? r : -EINVAL;
    if (strcmp(p.id, id) != 0) {
        store_pod_clear(&p);
        return -EINVAL;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct store_pod *np = reallocarray(l->pods, cap, sizeof(*np));
        if (!np) {
            store_pod_clear(&p);
            return -ENOMEM;
        }
        l->pods = np;
        l->cap = cap;
    }
    l->pods[l->n++] = p;
    return 0;
}

int store_pod_load_all(const char *dir, struct store_pod **ret, size_t *ret_n, size_t *ret_bad,
                       struct err *err)
{
    struct pod_load l = {0};
    int r = store_record_scan(dir, pod_load_one, &l, NULL, ret_bad, err);
    if (r < 0) {
        store_pods_free(l.pods, l.n);
        return r;
    }
    *ret = l.pods;
    *ret_n = l.n;
    return 0;
}
