/* stream/spdy: SPDY/3.1 framing as kubelet's and Kubernetes' clients
 * speak it (github.com/moby/spdystream): an I/O-free state machine fed
 * with bytes, calling back per frame, and writers of the frames a server
 * sends. Header blocks are zlib streams primed with the SPDY dictionary,
 * one per direction for the whole connection.
 *
 * Not done, as spdystream does not: flow control (WINDOW_UPDATE is read
 * and ignored; the kernel's socket buffers and our per-stream output
 * limits do the job), server push, SETTINGS (read and ignored).
 *
 * Limits: a control frame's payload SPDY_CONTROL_MAX, a decompressed
 * header block SPDY_HEADERS_MAX and SPDY_HEADER_PAIRS pairs; data frames
 * are passed on as they arrive and never buffered whole. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "stream/internal.h"

enum {
    SYN_STREAM = 1,
    SYN_REPLY = 2,
    RST_STREAM = 3,
    SETTINGS = 4,
    PING = 6,
    GOAWAY = 7,
    HEADERS = 8,
    WINDOW_UPDATE = 9,
};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

int spdy_init(struct spdy *s, const struct spdy_callbacks *cb, void *ud)
{
    *s = (struct spdy){.cb = cb, .ud = ud};
    if (inflateInit(&s->in) != Z_OK)
        return -ENOMEM;
    s->in_init = true;
    if (deflateInit(&s->out, Z_DEFAULT_COMPRESSION) != Z_OK ||
        deflateSetDictionary(&s->out, spdy_dictionary, SPDY_DICT_LEN) != Z_OK) {
        spdy_free(s);
        return -ENOMEM;
    }
    s->out_init = true;
    return 0;
}

void spdy_free(struct spdy *s)
{
    if (s->in_init)
        inflateEnd(&s->in);
    if (s->out_init)
        deflateEnd(&s->out);
    buf_free(&s->body);
    free(s->hbuf);
    s->in_init = s->out_init = false;
    s->hbuf = NULL;
}

/* The buffer of a header block, once the block is handled: its 256 KiB,
 * all touched by one big block, are not kept for the connection's life
 * (a block comes with each of a session's few streams). */
static void hbuf_release(struct spdy *s)
{
    free(s->hbuf);
    s->hbuf = NULL;
}

/* Inflates a header block into s->hbuf; its length, or -EPROTO/-E2BIG. */
static ssize_t inflate_block(struct spdy *s, const uint8_t *in, size_t len)
{
    if (!s->hbuf) {
        s->hcap = SPDY_HEADERS_MAX;
        if (!(s->hbuf = malloc(s->hcap)))
            return -ENOMEM;
    }
    s->in.next_in = (uint8_t *)in;
    s->in.avail_in = (uInt)len;
    s->in.next_out = s->hbuf;
    s->in.avail_out = (uInt)s->hcap;
    while (s->in.avail_in > 0) {
        int z = inflate(&s->in, Z_SYNC_FLUSH);
        if (z == Z_NEED_DICT) {
            if (inflateSetDictionary(&s->in, spdy_dictionary, SPDY_DICT_LEN) != Z_OK)
                return -EPROTO;
            continue;
        }
        if (z == Z_BUF_ERROR && s->in.avail_out == 0)
            return -E2BIG;
        if (z != Z_OK && z != Z_BUF_ERROR)
            return -EPROTO;
        if (z == Z_BUF_ERROR)
            break;
        if (s->in.avail_out == 0 && s->in.avail_in > 0)
            return -E2BIG;
    }
    return (ssize_t)(s->hcap - s->in.avail_out);
}

/* Splits a decompressed header block into pairs, NUL-terminating names
 * and values in place (the block is moved to make room). */
static int parse_headers(uint8_t *p, size_t len, struct spdy_header *h, size_t *ret_n)
{
    if (len < 4)
        return -EPROTO;
    uint32_t n = rd32(p);
    if (n > SPDY_HEADER_PAIRS)
        return -E2BIG;
    /* Each string is length-prefixed; writing a NUL over the next length
     * field would lose it, so read it first. */
    size_t off = 4;
    for (uint32_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            if (len - off < 4)
                return -EPROTO;
            uint32_t l = rd32(p + off);
            off += 4;
            if (l > len - off)
                return -EPROTO;
            /* move the string 1 byte back over its length field's last
             * byte... simpler: the string starts at off; terminate it by
             * shifting it left onto its own length field */
            memmove(p + off - 4, p + off, l);
            p[off - 4 + l] = '\0';
            const char *str = (const char *)p + off - 4;
            if (strlen(str) != l && k == 0)
                return -EPROTO; /* a NUL in a name */
            if (k == 0)
                h[i].name = str;
            else
                h[i].value = str;
            off += l;
        }
        if (!*h[i].name)
            return -EPROTO;
    }
    *ret_n = n;
    return off == len ? 0 : -EPROTO;
}

static int control_frame(struct spdy *s)
{
    const uint8_t *p = s->body.data;
    size_t len = s->body.len;
    uint16_t version = (uint16_t)((s->head[0] & 0x7f) << 8 | s->head[1]);
    if (version != 3)
        return -EPROTO;
    switch (s->type) {
    case SYN_STREAM: {
        if (len < 10)
            return -EPROTO;
        uint32_t id = rd32(p) & 0x7fffffff;
        if (id == 0)
            return -EPROTO;
        ssize_t n = inflate_block(s, p + 10, len - 10);
        if (n < 0)
            return (int)n;
        struct spdy_header h[SPDY_HEADER_PAIRS];
        size_t nh = 0;
        int r = parse_headers(s->hbuf, (size_t)n, h, &nh);
        if (r == 0 && s->cb->on_syn_stream)
            r = s->cb->on_syn_stream(s->ud, id, s->flags, h, nh);
        hbuf_release(s);
        return r;
    }
    case SYN_REPLY:
    case HEADERS: {
        /* a server receives neither in practice; keep the zlib stream in
         * step all the same */
        if (len < 4)
            return -EPROTO;
        ssize_t n = inflate_block(s, p + 4, len - 4);
        hbuf_release(s);
        return n < 0 ? (int)n : 0;
    }
    case RST_STREAM:
        if (len != 8)
            return -EPROTO;
        return s->cb->on_rst ? s->cb->on_rst(s->ud, rd32(p) & 0x7fffffff, rd32(p + 4)) : 0;
    case PING:
        if (len != 4)
            return -EPROTO;
        return s->cb->on_ping ? s->cb->on_ping(s->ud, rd32(p)) : 0;
    case GOAWAY:
        if (len < 4)
            return -EPROTO;
        return s->cb->on_goaway ? s->cb->on_goaway(s->ud) : 0;
    case SETTINGS:
    case WINDOW_UPDATE:
    default:
        return 0; /* ignored, as allowed for unknown types */
    }
}

int spdy_feed(struct spdy *s, const uint8_t *data, size_t len)
{
    if (s->dead)
        return -EPROTO;
    while (len > 0) {
        if (s->head_len < 8) {
            size_t take = 8 - s->head_len < len ? 8 - s->head_len : len;
            memcpy(s->head + s->head_len, data, take);
            s->head_len += take;
            data += take;
            len -= take;
            if (s->head_len < 8)
                return 0;
            s->control = s->head[0] & 0x80;
            s->flags = s->head[4];
            s->len = (uint32_t)s->head[5] << 16 | (uint32_t)s->head[6] << 8 | s->head[7];
            s->got = 0;
            if (s->control) {
                s->type = (uint16_t)(s->head[2] << 8 | s->head[3]);
                if (s->len > SPDY_CONTROL_MAX) {
                    s->dead = true;
                    return -E2BIG;
                }
                s->body.len = 0;
            } else {
                s->stream = rd32(s->head) & 0x7fffffff;
                if (s->stream == 0) {
                    s->dead = true;
                    return -EPROTO;
                }
            }
        }
        uint32_t want = s->len - s->got;
        size_t take = want < len ? want : len;
        int r = 0;
        if (s->control) {
            if (take && buf_append(&s->body, data, take) < 0)
                return -ENOMEM;
        } else if (take || s->len == 0) {
            bool last = s->got + take == s->len;
            if (s->cb->on_data)
                r = s->cb->on_data(s->ud, s->stream, data, take,
                                   last && (s->flags & SPDY_FLAG_FIN));
        }
        s->got += (uint32_t)take;
        data += take;
        len -= take;
        if (r < 0) {
            s->dead = true;
            return r;
        }
        if (s->got == s->len) {
            s->head_len = 0;
            if (s->control && (r = control_frame(s)) < 0) {
                s->dead = true;
                return r;
            }
        }
    }
    return 0;
}

/* ---- writers ---- */

static int control_head(struct buf *out, uint16_t type, uint8_t flags, uint32_t len)
{
    uint8_t h[8] = {0x80,
                    3,
                    (uint8_t)(type >> 8),
                    (uint8_t)type,
                    flags,
                    (uint8_t)(len >> 16),
                    (uint8_t)(len >> 8),
                    (uint8_t)len};
    return buf_append(out, h, 8);
}

/* Serializes and compresses a header block into z. */
static int deflate_block(struct spdy *s, const struct spdy_header *h, size_t n, struct buf *z)
{
    struct buf raw = {0};
    uint8_t w[4];
    wr32(w, (uint32_t)n);
    int r = buf_append(&raw, w, 4);
    for (size_t i = 0; r == 0 && i < n; i++) {
        const char *v[2] = {h[i].name, h[i].value};
        for (int k = 0; k < 2 && r == 0; k++) {
            wr32(w, (uint32_t)strlen(v[k]));
            r = buf_append(&raw, w, 4);
            if (r == 0)
                r = buf_append(&raw, v[k], strlen(v[k]));
        }
    }
    if (r == 0)
        r = buf_reserve(z, raw.len + 64 + raw.len / 100);
    if (r < 0) {
        buf_free(&raw);
        return -ENOMEM;
    }
    s->out.next_in = raw.data;
    s->out.avail_in = (uInt)raw.len;
    s->out.next_out = z->data + z->len;
    s->out.avail_out = (uInt)(z->cap - z->len);
    int zr = deflate(&s->out, Z_SYNC_FLUSH);
    z->len = z->cap - s->out.avail_out;
    buf_free(&raw);
    return zr == Z_OK && s->out.avail_in == 0 ? 0 : -EIO;
}

static int syn(struct spdy *s, struct buf *out, uint16_t type, uint32_t id,
               const struct spdy_header *h, size_t n, bool fin)
{
    struct buf z = {0};
    int r = deflate_block(s, h, n, &z);
    size_t fixed = type == SYN_STREAM ? 10 : 4;
    uint8_t f[10] = {0};
    wr32(f, id & 0x7fffffff);
    if (r == 0)
        r = control_head(out, type, fin ? SPDY_FLAG_FIN : 0, (uint32_t)(fixed + z.len));
    if (r == 0)
        r = buf_append(out, f, fixed);
    if (r == 0)
        r = buf_append(out, z.data, z.len);
    buf_free(&z);
    return r;
}

int spdy_syn_reply(struct spdy *s, struct buf *out, uint32_t id, const struct spdy_header *h,
                   size_t n, bool fin)
{
    return syn(s, out, SYN_REPLY, id, h, n, fin);
}

int spdy_syn_stream(struct spdy *s, struct buf *out, uint32_t id, const struct spdy_header *h,
                    size_t n, bool fin)
{
    return syn(s, out, SYN_STREAM, id, h, n, fin);
}

int spdy_data(struct buf *out, uint32_t id, const void *data, size_t len, bool fin)
{
    if (len > 0xffffff)
        return -E2BIG;
    uint8_t h[8];
    wr32(h, id & 0x7fffffff);
    h[4] = fin ? SPDY_FLAG_FIN : 0;
    h[5] = (uint8_t)(len >> 16);
    h[6] = (uint8_t)(len >> 8);
    h[7] = (uint8_t)len;
    if (buf_append(out, h, 8) < 0 || (len && buf_append(out, data, len) < 0))
        return -ENOMEM;
    return 0;
}

int spdy_rst(struct buf *out, uint32_t id, uint32_t status)
{
    uint8_t p[8];
    wr32(p, id & 0x7fffffff);
    wr32(p + 4, status);
    return control_head(out, RST_STREAM, 0, 8) < 0 || buf_append(out, p, 8) < 0 ? -ENOMEM : 0;
}

int spdy_ping(struct buf *out, uint32_t id)
{
    uint8_t p[4];
    wr32(p, id);
    return control_head(out, PING, 0, 4) < 0 || buf_append(out, p, 4) < 0 ? -ENOMEM : 0;
}

int spdy_goaway(struct buf *out, uint32_t last, uint32_t status)
{
    uint8_t p[8];
    wr32(p, last & 0x7fffffff);
    wr32(p + 4, status);
    return control_head(out, GOAWAY, 0, 8) < 0 || buf_append(out, p, 8) < 0 ? -ENOMEM : 0;
}
