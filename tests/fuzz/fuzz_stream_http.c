/* stream/http: request heads from anyone who reaches the streaming port.
 * Oracles: a parsed request's path starts with '/', its strings are
 * NUL-terminated within the buffer, every header has a name, and
 * http_header finds each header by its own name; the head consumed is
 * within the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct http_request r;
    size_t used = 0;
    if (http_request_parse((const char *)data, size, &r, &used) < 0)
        return 0;
    if (used > size || used > HTTP_HEAD_MAX || r.path[0] != '/' ||
        strnlen(r.path, sizeof(r.path)) == sizeof(r.path) ||
        strnlen(r.query, sizeof(r.query)) == sizeof(r.query) || r.n > HTTP_HEADERS_MAX)
        __builtin_trap();
    for (size_t i = 0; i < r.n; i++) {
        if (!r.h[i].name || !r.h[i].value || r.h[i].name < r.buf ||
            r.h[i].name >= r.buf + sizeof(r.buf) || !*r.h[i].name)
            __builtin_trap();
        if (!http_header(&r, r.h[i].name))
            __builtin_trap();
        (void)http_header_has(&r, r.h[i].name, "upgrade");
    }
    return 0;
}
