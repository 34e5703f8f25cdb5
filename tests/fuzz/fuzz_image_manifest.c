/* libFuzzer: manifest / index / config parsing and platform selection. */
#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct image_manifest *m = NULL;
    struct err err;
    if (image_manifest_parse(NULL, data, size, &m, &err) == 0) {
        const struct image_descriptor *d;
        if (m->kind == IMAGE_MANIFEST_INDEX)
            image_index_select(m, "linux", "amd64", NULL, &d, &err);
        image_manifest_free(m);
    }
    struct image_config_info c;
    if (image_config_parse(data, size, &c, &err) == 0) {
        char **chain;
        if (image_chain_ids(c.diff_ids, c.n_diff_ids, &chain) == 0)
            strv_free(chain, c.n_diff_ids);
        image_config_info_clear(&c);
    }
    return 0;
}
