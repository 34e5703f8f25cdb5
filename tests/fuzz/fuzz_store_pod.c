/* store: pod record files read back at daemon start. Oracle: what parses
 * writes back and parses again to the same record, field by field, and the
 * second write is byte for byte the first. */
#include <stdint.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same(const struct store_pod *a, const struct store_pod *b)
{
    if (strcmp(a->id, b->id) || a->state != b->state || a->created_ns != b->created_ns ||
        !same_str(a->runtime_handler, b->runtime_handler) || a->config_len != b->config_len ||
        (a->config_len && memcmp(a->config, b->config, a->config_len)) || a->nips != b->nips ||
        a->nips > 2 || a->init_pid != b->init_pid || a->init_start != b->init_start ||
        !same_str(a->cgroup_path, b->cgroup_path))
        return false;
    for (size_t i = 0; i < a->nips; i++)
        if (strcmp(a->ips[i], b->ips[i]))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_pod p;
    struct err err = {0};
    if (store_pod_from_json((const char *)data, size, &p, &err) != 0)
        return 0;
    char *json = NULL;
    size_t len = 0;
    if (store_pod_to_json(&p, &json, &len, &err) == 0) {
        struct store_pod q;
        if (store_pod_from_json(json, len, &q, &err) != 0 || !same(&p, &q))
            __builtin_trap();
        char *json2 = NULL;
        size_t len2 = 0;
        if (store_pod_to_json(&q, &json2, &len2, &err) != 0 || len2 != len ||
            memcmp(json, json2, len))
            __builtin_trap();
        free(json2);
        store_pod_clear(&q);
        free(json);
    }
    store_pod_clear(&p);
    return 0;
}
