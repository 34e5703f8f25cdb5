/* stream/ws: WebSocket frames from anyone who reaches the streaming port.
 * Oracles: the messages and the close code are the same whether the input
 * comes whole or one byte at a time (the parser keeps no state in the
 * caller's buffer); no message is longer than max_msg; nothing follows a
 * close frame; control frames carry at most 125 bytes; and each message,
 * framed again by ws_frame and masked as a client would, parses back to
 * itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSG 4096

struct rec {
    struct buf log; /* opcode, length, bytes, ... */
    size_t n;
    bool closed;
};

static void on_msg(void *ud, int opcode, const uint8_t *d, size_t len)
{
    struct rec *r = ud;
    if (r->closed || len > MAX_MSG || (opcode >= WS_CLOSE && len > 125))
        __builtin_trap();
    if (opcode == WS_CLOSE)
        r->closed = true;
    uint8_t h[5] = {(uint8_t)opcode, (uint8_t)(len >> 24), (uint8_t)(len >> 16),
                    (uint8_t)(len >> 8), (uint8_t)len};
    if (buf_append(&r->log, h, sizeof(h)) < 0 || (len && buf_append(&r->log, d, len) < 0))
        abort();
    r->n++;
}

static void one(const uint8_t *msg, size_t len, int opcode)
{
    struct buf f = {0};
    if (ws_frame(&f, opcode, msg, len) < 0)
        abort();
    /* a client's frame: the mask bit and key after the length */
    size_t hl = (f.data[1] & 0x7f) == 126 ? 4 : (f.data[1] & 0x7f) == 127 ? 10 : 2;
    struct buf c = {0};
    static const uint8_t key[4] = {0x12, 0x34, 0x56, 0x78};
    if (buf_append(&c, f.data, hl) < 0 || buf_append(&c, key, 4) < 0)
        abort();
    c.data[1] |= 0x80;
    for (size_t i = hl; i < f.len; i++) {
        uint8_t b = f.data[i] ^ key[(i - hl) & 3];
        if (buf_append(&c, &b, 1) < 0)
            abort();
    }
    struct ws_parser p = {.max_msg = MAX_MSG};
    struct rec r = {0};
    if (ws_feed(&p, c.data, c.len, on_msg, &r) != 0 || r.n != 1 || r.log.len != 5 + len ||
        r.log.data[0] != opcode || (len && memcmp(r.log.data + 5, msg, len) != 0))
        __builtin_trap();
    ws_parser_free(&p);
    buf_free(&r.log);
    buf_free(&c);
    buf_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_parser a = {.max_msg = MAX_MSG}, b = {.max_msg = MAX_MSG};
    struct rec ra = {0}, rb = {0};
    int ca = ws_feed(&a, data, size, on_msg, &ra);
    int cb = 0;
    for (size_t i = 0; i < size && !cb; i++)
        cb = ws_feed(&b, data + i, 1, on_msg, &rb);
    if (ca != cb || ra.n != rb.n || ra.log.len != rb.log.len ||
        (ra.log.len && memcmp(ra.log.data, rb.log.data, ra.log.len) != 0))
        __builtin_trap();
    if (ca != 0 && ca != WS_CLOSE_PROTOCOL && ca != WS_CLOSE_TOO_BIG)
        __builtin_trap();
    for (size_t at = 0; at < ra.log.len;) {
        int op = ra.log.data[at];
        size_t len = (size_t)ra.log.data[at + 1] << 24 | (size_t)ra.log.data[at + 2] << 16 |
                     (size_t)ra.log.data[at + 3] << 8 | ra.log.data[at + 4];
        one(ra.log.data + at + 5, len, op);
        at += 5 + len;
    }
    ws_parser_free(&a);
    ws_parser_free(&b);
    buf_free(&ra.log);
    buf_free(&rb.log);
    return 0;
}
