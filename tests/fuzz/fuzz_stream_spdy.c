/* stream/spdy: SPDY/3.1 frames from a client, as hostile as it likes, fed
 * in pieces whose sizes the input chooses. Oracles: headers handed to the
 * callback are NUL-terminated strings within the limits; data delivered
 * never exceeds what was fed; and a round trip holds: a SYN_STREAM we
 * write ourselves with the input's names and values parses back to the
 * same pairs through a fresh codec. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fed, delivered;
static struct spdy_header want[4];
static size_t n_want;
static bool seen;

static int on_syn(void *ud, uint32_t id, uint8_t flags, const struct spdy_header *h, size_t n)
{
    (void)flags;
    if (n > SPDY_HEADER_PAIRS || id == 0 || id > 0x7fffffff)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (strlen(h[i].name) > SPDY_HEADERS_MAX || !*h[i].name)
            __builtin_trap();
    if (ud) { /* the round trip */
        if (n != n_want)
            __builtin_trap();
        for (size_t i = 0; i < n; i++)
            if (strcmp(h[i].name, want[i].name) || strcmp(h[i].value, want[i].value))
                __builtin_trap();
        seen = true;
    }
    return 0;
}

static int on_data(void *ud, uint32_t id, const uint8_t *d, size_t len, bool fin)
{
    (void)ud;
    (void)id;
    (void)d;
    (void)fin;
    delivered += len;
    if (delivered > fed)
        __builtin_trap();
    return 0;
}

static const struct spdy_callbacks cb = {.on_syn_stream = on_syn, .on_data = on_data};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spdy s;
    if (spdy_init(&s, &cb, NULL) < 0)
        return 0;
    fed = delivered = 0;
    /* the first byte: the size of the pieces */
    size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
    for (size_t off = 1; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        fed += n;
        if (spdy_feed(&s, data + off, n) < 0)
            break;
    }
    spdy_free(&s);

    /* round trip: up to 4 NUL-free names and values cut from the input */
    char pool[4][2][64];
    n_want = 0;
    for (size_t off = 0, i = 0; i < 8 && off < size; i++) {
        size_t l = data[off] % 32;
        off++;
        size_t k = 0;
        for (; k < l && off < size; off++)
            if (data[off])
                pool[i / 2][i % 2][k++] = (char)data[off];
        pool[i / 2][i % 2][k] = '\0';
        if (i % 2 == 1) {
            if (!pool[i / 2][0][0])
                strcpy(pool[i / 2][0], "x");
            want[i / 2] = (struct spdy_header){pool[i / 2][0], pool[i / 2][1]};
            n_want = i / 2 + 1;
        }
    }
    struct spdy w, r;
    struct buf out = {0};
    if (spdy_init(&w, &cb, NULL) < 0)
        return 0;
    if (spdy_init(&r, &cb, (void *)1) < 0) {
        spdy_free(&w);
        return 0;
    }
    seen = false;
    if (spdy_syn_stream(&w, &out, 1, want, n_want, false) == 0) {
        if (spdy_feed(&r, out.data, out.len) < 0 || !seen)
            __builtin_trap();
    }
    buf_free(&out);
    spdy_free(&w);
    spdy_free(&r);
    return 0;
}
