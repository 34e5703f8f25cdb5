/* store: container record files read back at daemon start. Oracle: what
 * parses writes back and parses again to the same record, field by field. */
#include <stdint.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same(const struct store_container *a, const struct store_container *b)
{
    return !strcmp(a->id, b->id) && !strcmp(a->pod_id, b->pod_id) && a->state == b->state &&
           a->created_ns == b->created_ns && a->started_ns == b->started_ns &&
           a->finished_ns == b->finished_ns && a->exit_code == b->exit_code &&
           same_str(a->reason, b->reason) && same_str(a->message, b->message) &&
           same_str(a->image, b->image) && same_str(a->image_id, b->image_id) &&
           same_str(a->image_ref, b->image_ref) && same_str(a->log_path, b->log_path) &&
           a->config_len == b->config_len && !memcmp(a->config, b->config, a->config_len) &&
           !a->resources == !b->resources && a->resources_len == b->resources_len &&
           (!a->resources_len || !memcmp(a->resources, b->resources, a->resources_len)) &&
           a->uid == b->uid && a->gid == b->gid && a->n_groups == b->n_groups &&
           (!a->n_groups || !memcmp(a->groups, b->groups, a->n_groups * sizeof(*a->groups))) &&
           a->stop_signal == b->stop_signal && same_str(a->cgroup_path, b->cgroup_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_container c;
    struct err err = {0};
    if (store_ctr_from_json((const char *)data, size, &c, &err) != 0)
        return 0;
    char *json = NULL;
    size_t len = 0;
    if (store_ctr_to_json(&c, &json, &len, &err) == 0) {
        struct store_container d;
        if (store_ctr_from_json(json, len, &d, &err) != 0 || !same(&c, &d))
            __builtin_trap();
        store_ctr_clear(&d);
        free(json);
    }
    store_ctr_clear(&c);
    return 0;
}
