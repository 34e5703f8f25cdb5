/* stream/ws: WebSocket for the streaming server, both halves of what
 * RFC 6455 asks of a server. The opening handshake's Sec-WebSocket-Accept
 * (section 4.2.2): base64(SHA-1(key + GUID)); SHA-1 is written here (FIPS
 * 180-4) rather than pulling a crypto library into the daemon for one
 * 20-byte digest. And the framing (section 5): an I/O-free state machine
 * fed with the client's bytes, calling back per whole message, with the
 * frames it must answer (pong, close) appended to a buffer; and writers of
 * a server's frames. Written here, not taken from libwslay, because Debian
 * ships no archive of it for the static build, and the job is small.
 *
 * Checked on every frame: RSV bits (we negotiate no extension), known
 * opcodes, the client's mask, minimal lengths and the 2^63 bound, control
 * frames at most 125 bytes and never fragmented, continuations only inside
 * a fragmented message, close codes (section 7.4), text as UTF-8 (over the
 * whole message, as a fragment may end inside a character).
 *
 * Limits: a reassembled message WS_MSG_MAX (1 MiB, libwslay's limit as we
 * configured it before): a frame that would pass it fails at its header,
 * before any of its payload is buffered; the buffer grows only with the
 * bytes that came and is dropped past WS_MSG_KEEP once delivered. Control
 * payloads live in a fixed 125-byte array. */
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

/* ---- framing ---- */

void ws_init(struct ws *w, const struct ws_callbacks *cb, void *ud)
{
    *w = (struct ws){.cb = cb, .ud = ud};
}

void ws_free(struct ws *w)
{
    buf_free(&w->msg);
    w->msg = (struct buf){0};
}

bool ws_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint8_t lo = 0x80, hi = 0xbf; /* the second byte's range */
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            if (c == 0xe0)
                lo = 0xa0; /* overlong */
            else if (c == 0xed)
                hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            if (c == 0xf0)
                lo = 0x90; /* overlong */
            else if (c == 0xf4)
                hi = 0x8f; /* past U+10FFFF */
        } else {
            return false;
        }
        if (len - i - 1 < n)
            return false;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
        i += n + 1;
    }
    return true;
}

/* A frame's header for a payload of len bytes. */
static int put_header(struct buf *out, uint8_t op, bool fin, size_t len, const uint8_t *mask)
{
    uint8_t h[14];
    size_t n = 2;
    h[0] = (uint8_t)((fin ? 0x80 : 0) | (op & 0x0f));
    uint8_t m = mask ? 0x80 : 0;
    if (len < 126) {
        h[1] = (uint8_t)(m | len);
    } else if (len <= 0xffff) {
        h[1] = m | 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        n = 4;
    } else {
        h[1] = m | 127;
        for (int k = 0; k < 8; k++)
            h[2 + k] = (uint8_t)((uint64_t)len >> (56 - 8 * k));
        n = 10;
    }
    if (mask) {
        memcpy(h + n, mask, 4);
        n += 4;
    }
    if (buf_reserve(out, n + len) < 0)
        return -ENOMEM;
    return buf_append(out, h, n);
}

int ws_frame(struct buf *out, uint8_t op, bool fin, const void *data, size_t len,
             const uint8_t *mask)
{
    if (put_header(out, op, fin, len, mask) < 0)
        return -ENOMEM;
    size_t at = out->len;
    if (len)
        buf_append(out, data, len); /* reserved */
    for (size_t i = 0; mask && i < len; i++)
        out->data[at + i] ^= mask[i & 3];
    return 0;
}

int ws_message(struct buf *out, uint8_t op, const void *head, size_t head_len, const void *data,
               size_t len)
{
    /* frames over the concatenation of head and data */
    size_t total = head_len + len, done = 0;
    do {
        size_t n = total - done < WS_FRAME_OUT_MAX ? total - done : WS_FRAME_OUT_MAX;
        if (put_header(out, done ? WS_CONT : op, done + n == total, n, NULL) < 0)
            return -ENOMEM;
        size_t end = done + n;
        if (done < head_len) {
            size_t k = (end < head_len ? end : head_len) - done;
            buf_append(out, (const uint8_t *)head + done, k); /* reserved */
            done += k;
        }
        if (done < end) {
            buf_append(out, (const uint8_t *)data + (done - head_len), end - done);
            done = end;
        }
    } while (done < total);
    return 0;
}

static int flush_pong(struct ws *w, struct buf *out)
{
    if (!w->pong_due || w->close_sent)
        return 0;
    w->pong_due = false;
    return ws_frame(out, WS_PONG, true, w->pong, w->pong_len, NULL);
}

int ws_close(struct ws *w, struct buf *out, uint16_t code)
{
    if (w->close_sent)
        return 0;
    if (flush_pong(w, out) < 0)
        return -ENOMEM;
    uint8_t p[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    int r = ws_frame(out, WS_CLOSE, true, p, code ? 2 : 0, NULL);
    if (r == 0)
        w->close_sent = true;
    return r;
}

/* The connection is over: say why in a close frame, once. */
static int fail(struct ws *w, struct buf *out, int err, uint16_t code)
{
    ws_close(w, out, code);
    w->result = err;
    return err;
}

static bool close_code_ok(unsigned c)
{
    /* 1004-1006 and 1015 are reserved, never sent; 1016-2999 unassigned;
     * 3000-4999 for libraries and applications */
    return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

/* The first two bytes are in: what the header still needs, or a failure. */
static int check_start(struct ws *w, size_t *ret_need)
{
    uint8_t b0 = w->head[0], b1 = w->head[1];
    w->fin = b0 & 0x80;
    w->op = b0 & 0x0f;
    if (b0 & 0x70)
        return -EPROTO; /* RSV bits without an extension */
    if (!(b1 & 0x80))
        return -EPROTO; /* a client's frames are masked */
    bool control = w->op & 0x08;
    if (control) {
        if (w->op != WS_CLOSE && w->op != WS_PING && w->op != WS_PONG)
            return -EPROTO;
        if (!w->fin || (b1 & 0x7f) > WS_CONTROL_MAX)
            return -EPROTO;
    } else if (w->op == WS_CONT) {
        if (!w->msg_op)
            return -EPROTO; /* nothing to continue */
    } else if (w->op == WS_TEXT || w->op == WS_BINARY) {
        if (w->msg_op)
            return -EPROTO; /* a new message inside a fragmented one */
    } else {
        return -EPROTO;
    }
    uint8_t l = b1 & 0x7f;
    *ret_need = 2 + (l == 126 ? 2 : l == 127 ? 8 : 0) + 4;
    return 0;
}

/* The whole header is in: the length and the mask. */
static int check_length(struct ws *w)
{
    uint8_t l = w->head[1] & 0x7f;
    const uint8_t *p = w->head + 2;
    uint64_t len = l;
    if (l == 126) {
        len = (uint64_t)p[0] << 8 | p[1];
        if (len < 126)
            return -EPROTO; /* not minimal */
        p += 2;
    } else if (l == 127) {
        len = 0;
        for (int k = 0; k < 8; k++)
            len = len << 8 | p[k];
        if (len >> 63)
            return -EPROTO; /* the most significant bit must be 0 */
        if (len <= 0xffff)
            return -EPROTO; /* not minimal */
        p += 8;
    }
    memcpy(w->mask, p, 4);
    w->len = len;
    w->got = 0;
    if (!(w->op & 0x08) && len > WS_MSG_MAX - w->msg.len)
        return -EMSGSIZE;
    return 0;
}

/* A whole frame is in. */
static int frame_done(struct ws *w, struct buf *out)
{
    if (w->op == WS_PING) {
        /* answered once the bytes at hand are consumed, and only the last
         * of the pings among them (RFC 6455 5.5.3 allows it): a flood of
         * pings costs one pong per read, not one per ping */
        memcpy(w->pong, w->ctl, (size_t)w->len);
        w->pong_len = (uint8_t)w->len;
        w->pong_due = !w->close_sent; /* nothing goes after our close */
        return 0;
    }
    if (w->op == WS_PONG)
        return 0;
    if (w->op == WS_CLOSE) {
        uint16_t code = 0;
        if (w->len == 1)
            return -EPROTO;
        if (w->len >= 2) {
            code = (uint16_t)(w->ctl[0] << 8 | w->ctl[1]);
            if (!close_code_ok(code))
                return -EPROTO;
            if (!ws_utf8_valid(w->ctl + 2, (size_t)w->len - 2))
                return -EILSEQ;
        }
        if (ws_close(w, out, code) < 0)
            return -ENOMEM;
        return WS_CLOSED;
    }
    if (w->op != WS_CONT)
        w->msg_op = w->op;
    if (!w->fin)
        return 0;
    uint8_t op = w->msg_op;
    w->msg_op = 0;
    if (op == WS_TEXT && !ws_utf8_valid(w->msg.data, w->msg.len))
        return -EILSEQ;
    int r = w->cb->on_message(w->ud, op, w->msg.data, w->msg.len);
    if (w->msg.cap > WS_MSG_KEEP)
        ws_free(w);
    w->msg.len = 0;
    return r < 0 ? r : 0;
}

static uint16_t close_code_of(int err)
{
    switch (err) {
    case -EPROTO:
        return WS_CLOSE_PROTOCOL;
    case -EMSGSIZE:
        return WS_CLOSE_TOO_BIG;
    case -EILSEQ:
        return WS_CLOSE_INVALID;
    default:
        return WS_CLOSE_INTERNAL;
    }
}

int ws_feed(struct ws *w, const uint8_t *data, size_t len, struct buf *out)
{
    size_t off = 0;
    while (w->result == 0 && off < len) {
        int r = 0;
        if (!w->in_payload) {
            size_t need = 2;
            if (w->head_len >= 2 && (r = check_start(w, &need)) < 0)
                return fail(w, out, r, close_code_of(r));
            size_t n = need - w->head_len < len - off ? need - w->head_len : len - off;
            memcpy(w->head + w->head_len, data + off, n);
            w->head_len += n;
            off += n;
            if (w->head_len == 2 && (r = check_start(w, &need)) < 0)
                return fail(w, out, r, close_code_of(r));
            if (w->head_len < need)
                continue;
            if ((r = check_length(w)) < 0)
                return fail(w, out, r, close_code_of(r));
            w->head_len = 0;
            w->in_payload = true;
        } else {
            uint64_t left = w->len - w->got;
            size_t n = left < len - off ? (size_t)left : len - off;
            uint8_t *dst;
            if (w->op & 0x08) {
                dst = w->ctl + w->got;
            } else {
                if (buf_reserve(&w->msg, n) < 0)
                    return fail(w, out, -ENOMEM, WS_CLOSE_INTERNAL);
                dst = w->msg.data + w->msg.len;
                w->msg.len += n;
            }
            for (size_t i = 0; i < n; i++)
                dst[i] = data[off + i] ^ w->mask[(w->got + i) & 3];
            w->got += n;
            off += n;
        }
        if (w->in_payload && w->got == w->len) {
            w->in_payload = false;
            r = frame_done(w, out);
            if (r == WS_CLOSED) {
                w->result = WS_CLOSED;
                return WS_CLOSED;
            }
            if (r < 0)
                return fail(w, out, r, close_code_of(r));
        }
    }
    if (w->result == 0 && flush_pong(w, out) < 0)
        return fail(w, out, -ENOMEM, WS_CLOSE_INTERNAL);
    return w->result;
}
