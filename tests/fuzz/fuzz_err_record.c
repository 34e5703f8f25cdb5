/* base/err: the error record another process (`kinglet oci`, the monitor
 * child) writes for the daemon and the creator to read. Oracle: what
 * decodes encodes to a record that decodes to the same error, within
 * ERR_RECORD_MAX, with a message of no more than the record carried. */
#include <stdint.h>
#include <string.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e = {0};
    int r = err_record_decode(data, size, &e);
    if (r == -EPROTO || r == -EMSGSIZE) {
        if (e.code)
            __builtin_trap(); /* a refused record leaves the object alone */
        return 0;
    }
    if (r != 0 || e.code <= 0 || e.code > 4095 || strlen(e.msg) + ERR_RECORD_HEAD != size)
        __builtin_trap();
    uint8_t buf[ERR_RECORD_MAX];
    size_t n = err_record_encode(&e, buf);
    struct err again = {0};
    if (n > ERR_RECORD_MAX || err_record_decode(buf, n, &again) != 0 || again.code != e.code ||
        again.no_sys != e.no_sys || strcmp(again.msg, e.msg) != 0)
        __builtin_trap();
    return 0;
}
