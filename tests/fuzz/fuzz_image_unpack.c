/* libFuzzer: the layer unpacker on arbitrary (possibly compressed) tar
 * bytes. Extracts into a fresh directory under $TMPDIR and checks that
 * nothing appeared next to it (escapes land in the sandbox's parent). */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct src {
    const uint8_t *data;
    size_t size, off;
};

static int src_read(void *ctx, const void **buf, size_t *len, struct err *err)
{
    struct src *s = ctx;
    size_t n = s->size - s->off;
    if (n > 4096)
        n = 4096; /* small chunks exercise the stream boundaries */
    *buf = s->data + s->off;
    *len = n;
    s->off += n;
    return 0;
}

static int sandbox = -1;
static char sandbox_path[64];

static void sandbox_remove(void) { rm_rf_at(AT_FDCWD, sandbox_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (sandbox < 0) {
        snprintf(sandbox_path, sizeof(sandbox_path), "/tmp/kinglet-fuzz-unpack-XXXXXX");
        if (!mkdtemp(sandbox_path))
            return 0;
        sandbox = open(sandbox_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        atexit(sandbox_remove);
    }
    mkdirat(sandbox, "layer", 0755);
    int fd = openat(sandbox, "layer", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct src s = {data, size, 0};
    struct layer_source src = {src_read, &s};
    struct layer_expect ex = {.size = -1};
    struct layer_stats st;
    struct err err;
    image_layer_unpack(fd, &src, &ex, NULL, &st, &err);
    close(fd);
    rm_rf_at(sandbox, "layer");
    /* anything but "layer" in the sandbox is an escape */
    struct stat sb;
    if (fstatat(sandbox, "layer", &sb, AT_SYMLINK_NOFOLLOW) == 0)
        __builtin_trap();
    return 0;
}
