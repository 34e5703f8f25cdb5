/* cri: <root>/runtime-config.json, read back at daemon start. Oracle: what
 * parses is a pod CIDR the daemon accepts, and the file the daemon would
 * write for it parses back to the same CIDR. */
#include <stdint.h>
#include <string.h>

#include "cri/internal.h"
#include "net/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *cidr = NULL;
    int r = cri_runtime_config_parse((const char *)data, size, &cidr);
    if (r == -EBADMSG || r == -ENOMEM)
        return 0;
    struct err e = {0};
    if (r != 0 || !cidr || (*cidr && net_pod_cidrs_parse(cidr, NULL, NULL, &e) != 0))
        __builtin_trap();
    struct buf b = {0};
    if (buf_printf(&b, "{\"podCIDR\":") == 0 && buf_append_json_string(&b, cidr) == 0 &&
        buf_append(&b, "}\n", 2) == 0) {
        char *again = NULL;
        if (cri_runtime_config_parse((const char *)b.data, b.len, &again) != 0 ||
            strcmp(again, cidr) != 0)
            __builtin_trap();
        free(again);
    }
    buf_free(&b);
    free(cidr);
    return 0;
}
