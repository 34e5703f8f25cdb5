/* libFuzzer target: the OCI `linux.seccomp` object (outside input from
 * config.json) through oci_seccomp_build. Nothing is loaded. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "oci/seccomp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    if (!j)
        return 0;
    struct err e = {0};
    scmp_filter_ctx ctx = NULL;
    if (oci_seccomp_build(j, &ctx, &e) == 0)
        seccomp_release(ctx);
    json_decref(j);
    return 0;
}
