/* libFuzzer: image reference parsing and normalisation. */
#include <string.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = strndup((const char *)data, size);
    if (!s)
        return 0;
    struct image_ref r;
    struct err err;
    if (image_ref_parse(s, &r, &err) == 0) {
        /* a normalised reference parses to itself */
        char *n = image_ref_string(&r);
        struct image_ref r2;
        if (n && image_ref_parse(n, &r2, &err) == 0) {
            char *n2 = image_ref_string(&r2);
            if (n2 && strcmp(n, n2) != 0)
                __builtin_trap();
            free(n2);
            image_ref_clear(&r2);
        } else if (n) {
            __builtin_trap();
        }
        free(n);
        image_ref_clear(&r);
    }
    free(s);
    return 0;
}
