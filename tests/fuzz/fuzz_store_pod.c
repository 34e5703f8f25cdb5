/* store: pod record files read back at daemon start. */
#include <stdint.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_pod p;
    struct err err = {0};
    if (store_pod_from_json((const char *)data, size, &p, &err) == 0) {
        char *json = NULL;
        size_t len = 0;
        if (store_pod_to_json(&p, &json, &len, &err) == 0) {
            struct store_pod q;
            if (store_pod_from_json(json, len, &q, &err) != 0 || q.config_len != p.config_len ||
                memcmp(q.config, p.config, p.config_len) != 0)
                __builtin_trap();
            store_pod_clear(&q);
            free(json);
        }
        store_pod_clear(&p);
    }
    return 0;
}
