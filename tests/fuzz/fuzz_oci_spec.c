/* libFuzzer target: config.json (outside input) through oci_spec_parse and,
 * for what parses, the process object alone (exec --process). */
#include <stddef.h>
#include <stdint.h>

#include "oci/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e = {0};
    struct oci_spec *s = NULL;
    if (oci_spec_parse((const char *)data, size, "/bundle", &s, &e) == 0) {
        json_t *p = json_object_get(s->json, "process");
        struct oci_process proc;
        if (p) {
            /* On failure it leaves what it allocated for the clear. */
            oci_process_parse(p, "process", &proc, &e);
            oci_process_clear(&proc);
        }
        oci_spec_free(s);
    }
    return 0;
}
