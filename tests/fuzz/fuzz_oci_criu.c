/* libFuzzer target: what criu writes, read back by oci/checkpoint: the
 * output of `criu --version` (its version number) and a dump log, whose
 * tail goes into the error a failed checkpoint returns. The version is
 * in range or refused; the tail is a terminated string within its
 * buffer, whatever the log holds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmpdir.h"
#include "oci/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/kinglet-fuzz-criu.XXXXXX";
static char log_path[sizeof(dir) + 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!log_path[0]) {
        fuzz_tmpdir(dir);
        snprintf(log_path, sizeof(log_path), "%s/dump.log", dir);
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int v = oci_criu_version_parse(text);
    if (v != -EINVAL && (v < 0 || v > 999999))
        __builtin_trap();
    free(text);

    FILE *f = fopen(log_path, "w");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    for (size_t n = 1; n <= 361; n += 120) {
        char buf[361];
        memset(buf, 'Z', sizeof(buf));
        oci_criu_log_tail(log_path, buf, n);
        if (memchr(buf, '\0', n) == NULL)
            __builtin_trap();
        for (size_t i = n; i < sizeof(buf); i++)
            if (buf[i] != 'Z')
                __builtin_trap();
    }
    return 0;
}
