/* stream/ws: WebSocket frames from a client, as hostile as it likes, fed
 * in pieces whose sizes the input chooses. Oracles: messages handed to the
 * callback stay within WS_MSG_MAX and never exceed what was fed; text
 * messages are UTF-8 by a decoder written differently here; what the codec
 * answers is well-formed server frames (unmasked; pongs of at most 125
 * bytes; at most one close, last); once over, it stays over. And a round
 * trip: the input as a message, masked and fragmented the way a client
 * may, parses back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fed, delivered;
static const uint8_t *want;
static size_t want_len;
static bool seen;

/* UTF-8 by decoding each code point and checking its range. */
static bool utf8_ok(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint32_t c = s[i], min;
        size_t n;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, c &= 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, c &= 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, c &= 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len - i - 1 < n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            c = c << 6 | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

static int on_message(void *ud, uint8_t op, const uint8_t *d, size_t len)
{
    if (len > WS_MSG_MAX || (op != WS_TEXT && op != WS_BINARY))
        __builtin_trap();
    if (op == WS_TEXT && !utf8_ok(d, len))
        __builtin_trap();
    delivered += len;
    if (delivered > fed)
        __builtin_trap();
    if (ud) { /* the round trip */
        if (len != want_len || (len && memcmp(d, want, len)))
            __builtin_trap();
        seen = true;
    }
    return 0;
}

static const struct ws_callbacks cb = {.on_message = on_message};

/* What the server sent: frames of ours only. */
static void check_answer(const struct buf *out, bool over)
{
    size_t off = 0;
    bool closed = false;
    while (off < out->len) {
        if (closed || out->len - off < 2)
            __builtin_trap();
        uint8_t b0 = out->data[off], b1 = out->data[off + 1];
        uint8_t op = b0 & 0x0f;
        if (!(b0 & 0x80) || (b0 & 0x70) || (b1 & 0x80) || (b1 & 0x7f) > WS_CONTROL_MAX)
            __builtin_trap();
        if (op != WS_PONG && op != WS_CLOSE)
            __builtin_trap();
        if (op == WS_CLOSE) {
            closed = true;
            if ((b1 & 0x7f) != 0 && (b1 & 0x7f) != 2)
                __builtin_trap();
        }
        off += 2 + (b1 & 0x7f);
    }
    if (off != out->len || closed != over)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws w;
    struct buf out = {0};
    ws_init(&w, &cb, NULL);
    fed = delivered = 0;
    /* the first byte: the size of the pieces */
    size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
    int r = 0;
    for (size_t off = 1; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        fed += n;
        r = ws_feed(&w, data + off, n, &out);
        if (r != 0)
            break;
    }
    if (r != 0) {
        size_t before = out.len;
        if (ws_feed(&w, data, size, &out) != r || out.len != before)
            __builtin_trap();
    }
    check_answer(&out, r != 0);
    ws_free(&w);
    buf_free(&out);

    /* round trip: the input as one message in fragments whose sizes its
     * first bytes choose, with a ping after the first */
    const uint8_t mask[4] = {size ? data[0] : 1, 0x5a, 0xa5, 0x3c};
    bool text = utf8_ok(data, size);
    struct buf in = {0};
    size_t frag = size ? (size_t)data[size / 2] * 37 + 1 : 1;
    for (size_t off = 0;; off += frag) {
        size_t n = size - off < frag ? size - off : frag;
        bool fin = off + n == size;
        if (ws_frame(&in, off ? WS_CONT : text ? WS_TEXT : WS_BINARY, fin, data + off, n, mask) < 0)
            goto out;
        if (!off && ws_frame(&in, WS_PING, true, data, size < 125 ? size : 125, mask) < 0)
            goto out;
        if (fin)
            break;
    }
    ws_init(&w, &cb, (void *)1);
    want = data;
    want_len = size;
    fed = SIZE_MAX / 2;
    delivered = 0;
    seen = false;
    if (ws_feed(&w, in.data, in.len, &out) != 0 || !seen)
        __builtin_trap();
    ws_free(&w);
out:
    buf_free(&in);
    buf_free(&out);
    return 0;
}
