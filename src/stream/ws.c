/* stream/ws: WebSocket (RFC 6455) for the streaming server.
 *
 * The opening handshake's Sec-WebSocket-Accept (section 4.2.2):
 * base64(SHA-1(key + GUID)). SHA-1 is written here (FIPS 180-4) rather than
 * pulling a crypto library into the daemon for one 20-byte digest.
 *
 * The framing (section 5), server side: ws_feed parses the client's frames
 * with no I/O (server.c writes what it answers), ws_frame makes ours. Of
 * our own rather than wslay's: it is a hundred lines, and wslay has no
 * static archive in Debian, which the static binary needs (docs/static.md).
 * Client frames must be masked; ours are not. A message may come in
 * fragments, put together up to max_msg bytes; control frames (close,
 * ping, pong) may come between fragments and are handed over at once. */
#include <errno.h>
#include <string.h>

#include "stream/internal.h"

static uint32_t rol(uint32_t x, int n) { return x << n | x >> (32 - n); }

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

static void sha1(const uint8_t *data, size_t len, uint8_t out[20])
{
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    size_t i = 0;
    for (; len - i >= 64; i += 64)
        sha1_block(h, data + i);
    uint8_t last[128] = {0};
    size_t rest = len - i;
    memcpy(last, data + i, rest);
    last[rest] = 0x80;
    size_t blocks = rest + 9 > 64 ? 2 : 1;
    uint64_t bits = (uint64_t)len * 8;
    for (int k = 0; k < 8; k++)
        last[blocks * 64 - 1 - k] = (uint8_t)(bits >> (8 * k));
    for (size_t b = 0; b < blocks; b++)
        sha1_block(h, last + 64 * b);
    for (int k = 0; k < 5; k++) {
        out[4 * k] = (uint8_t)(h[k] >> 24);
        out[4 * k + 1] = (uint8_t)(h[k] >> 16);
        out[4 * k + 2] = (uint8_t)(h[k] >> 8);
        out[4 * k + 3] = (uint8_t)h[k];
    }
}

void ws_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char in[128 + sizeof(guid)];
    size_t kl = strnlen(key, 128);
    memcpy(in, key, kl);
    memcpy(in + kl, guid, sizeof(guid) - 1);
    uint8_t d[20];
    sha1((const uint8_t *)in, kl + sizeof(guid) - 1, d);
    char *b = b64_encode(d, 20);
    snprintf(out, 29, "%s", b ? b : "");
    free(b);
}

void ws_parser_free(struct ws_parser *p)
{
    buf_free(&p->msg);
    buf_free(&p->ctl);
}

int ws_frame(struct buf *out, int opcode, const void *data, size_t len)
{
    uint8_t h[10];
    size_t n = 0;
    h[n++] = (uint8_t)(0x80 | (opcode & 0x0f));
    if (len < 126) {
        h[n++] = (uint8_t)len;
    } else if (len <= 0xffff) {
        h[n++] = 126;
        h[n++] = (uint8_t)(len >> 8);
        h[n++] = (uint8_t)len;
    } else {
        h[n++] = 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    if (buf_reserve(out, n + len) < 0 || buf_append(out, h, n) < 0 ||
        (len && buf_append(out, data, len) < 0))
        return -ENOMEM;
    return 0;
}

/* The header's length once its first two bytes are in: 2, plus the
 * extended length, plus the mask. */
static size_t header_len(const uint8_t *h)
{
    size_t n = 2;
    if ((h[1] & 0x7f) == 126)
        n += 2;
    else if ((h[1] & 0x7f) == 127)
        n += 8;
    return n + ((h[1] & 0x80) ? 4 : 0);
}

/* A complete header: checks it and starts the frame. */
static int frame_start(struct ws_parser *p)
{
    const uint8_t *h = p->hdr;
    if (h[0] & 0x70)
        return WS_CLOSE_PROTOCOL; /* reserved bits: no extension was agreed */
    if (!(h[1] & 0x80))
        return WS_CLOSE_PROTOCOL; /* a client's frames are masked */
    p->fin = h[0] & 0x80;
    p->opcode = h[0] & 0x0f;
    uint64_t len = h[1] & 0x7f;
    size_t at = 2;
    if (len == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        at = 4;
    } else if (len == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        at = 10;
        if (len >> 63)
            return WS_CLOSE_PROTOCOL;
    }
    memcpy(p->mask, h + at, 4);
    p->mask_at = 0;
    p->left = len;
    switch (p->opcode) {
    case WS_CLOSE:
    case WS_PING:
    case WS_PONG:
        if (!p->fin || len > 125)
            return WS_CLOSE_PROTOCOL;
        p->ctl.len = 0;
        break;
    case WS_TEXT:
    case WS_BINARY:
        if (p->msg_op)
            return WS_CLOSE_PROTOCOL; /* a new message inside a fragmented one */
        p->msg_op = p->opcode;
        p->msg.len = 0;
        /* fall through */
    case WS_CONT:
        if (!p->msg_op)
            return WS_CLOSE_PROTOCOL;
        if (len > p->max_msg - p->msg.len)
            return WS_CLOSE_TOO_BIG;
        break;
    default:
        return WS_CLOSE_PROTOCOL;
    }
    p->in_frame = true;
    return 0;
}

/* The current frame's payload is complete. */
static void frame_end(struct ws_parser *p, ws_on_msg on_msg, void *ud)
{
    p->in_frame = false;
    p->hdr_len = 0;
    if (p->opcode >= WS_CLOSE) {
        if (p->opcode == WS_CLOSE)
            p->closed = true;
        on_msg(ud, p->opcode, p->ctl.data, p->ctl.len);
        return;
    }
    if (p->fin) {
        int op = p->msg_op;
        p->msg_op = 0;
        on_msg(ud, op, p->msg.data, p->msg.len);
    }
}

int ws_feed(struct ws_parser *p, const uint8_t *data, size_t len, ws_on_msg on_msg, void *ud)
{
    size_t i = 0;
    while (!p->closed && (i < len || (p->in_frame && !p->left))) {
        if (!p->in_frame) {
            size_t want = p->hdr_len < 2 ? 2 : header_len(p->hdr);
            while (p->hdr_len < want && i < len) {
                p->hdr[p->hdr_len++] = data[i++];
                if (p->hdr_len == 2)
                    want = header_len(p->hdr);
            }
            if (p->hdr_len < want)
                return 0; /* the rest of the header comes later */
            int r = frame_start(p);
            if (r)
                return r;
            continue;
        }
        size_t n = len - i < p->left ? len - i : (size_t)p->left;
        struct buf *to = p->opcode >= WS_CLOSE ? &p->ctl : &p->msg;
        if (n) {
            size_t at = to->len;
            if (buf_append(to, data + i, n) < 0)
                return WS_CLOSE_TOO_BIG; /* no memory for it: too big for us */
            for (size_t k = 0; k < n; k++)
                to->data[at + k] ^= p->mask[p->mask_at++ & 3];
            i += n;
            p->left -= n;
        }
        if (!p->left)
            frame_end(p, on_msg, ud);
    }
    return 0;
}
