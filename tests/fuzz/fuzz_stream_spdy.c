/* stream/spdy: SPDY/3.1 frames from a client, as hostile as it likes, fed
 * in pieces whose sizes the input chooses. Oracles, every bound the parser
 * promises (spdy.c's top comment): a control frame whose length passes
 * SPDY_CONTROL_MAX is refused as soon as its head is read, and no control
 * payload is buffered past it; at most SPDY_HEADER_PAIRS pairs, non-empty
 * NUL-free names, and every name and value inside the decompressed block,
 * which stays within SPDY_HEADERS_MAX; data delivered never exceeds its
 * frame's length nor what was fed; RST_STREAM and PING have their fixed
 * lengths; and a round trip holds: a SYN_STREAM we write ourselves with
 * the input's names and values parses back to the same pairs through a
 * fresh codec. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fed, delivered;
static struct spdy_header want[4];
static size_t n_want;
static bool seen;
static const struct spdy *cur; /* the codec being fed */

/* The pairs as the block held them: 4 bytes of count, then each name and
 * value with its 4-byte length (values may hold NULs: at least strlen). */
static size_t block_size(const struct spdy_header *h, size_t n)
{
    size_t total = 4;
    for (size_t i = 0; i < n; i++)
        total += 8 + strlen(h[i].name) + strlen(h[i].value);
    return total;
}

static bool in_block(const struct spdy *s, const char *str)
{
    const char *lo = (const char *)s->hbuf, *hi = lo + s->hcap;
    return str >= lo && str < hi && str + strlen(str) < hi;
}

static int on_syn(void *ud, uint32_t id, uint8_t flags, const struct spdy_header *h, size_t n)
{
    (void)flags;
    if (n > SPDY_HEADER_PAIRS || id == 0 || id > 0x7fffffff)
        __builtin_trap();
    if (!cur->control || cur->len > SPDY_CONTROL_MAX || cur->hcap > SPDY_HEADERS_MAX ||
        block_size(h, n) > SPDY_HEADERS_MAX)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (!*h[i].name || !in_block(cur, h[i].name) || !in_block(cur, h[i].value))
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
    if (delivered > fed || cur->control || cur->got + len > cur->len)
        __builtin_trap();
    return 0;
}

static int on_rst(void *ud, uint32_t id, uint32_t status)
{
    (void)ud;
    (void)id;
    (void)status;
    if (!cur->control || cur->len != 8)
        __builtin_trap();
    return 0;
}

static int on_ping(void *ud, uint32_t id)
{
    (void)ud;
    (void)id;
    if (!cur->control || cur->len != 4)
        __builtin_trap();
    return 0;
}

static const struct spdy_callbacks cb = {
    .on_syn_stream = on_syn, .on_data = on_data, .on_rst = on_rst, .on_ping = on_ping};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spdy s;
    if (spdy_init(&s, &cb, NULL) < 0)
        return 0;
    fed = delivered = 0;
    cur = &s;
    /* the first byte: the size of the pieces */
    size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
    for (size_t off = 1; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        fed += n;
        if (spdy_feed(&s, data + off, n) < 0)
            break;
        /* a control frame too long is refused once its head is read, and
         * nothing of a payload is kept past the bound */
        if ((s.head_len == 8 && s.control && s.len > SPDY_CONTROL_MAX) ||
            s.body.len > SPDY_CONTROL_MAX || s.hcap > SPDY_HEADERS_MAX)
            __builtin_trap();
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
    cur = &r;
    if (spdy_syn_stream(&w, &out, 1, want, n_want, false) == 0) {
        if (spdy_feed(&r, out.data, out.len) < 0 || !seen)
            __builtin_trap();
    }
    buf_free(&out);
    spdy_free(&w);
    spdy_free(&r);
    return 0;
}
