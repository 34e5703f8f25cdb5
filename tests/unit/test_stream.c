/* src/stream/ws.c: RFC 6455 framing, the server's side. The examples of
 * the RFC (section 5.7), fragments with control frames between them, the
 * three length forms and their limits, every protocol error with the close
 * code it must get, and the writer (parsed back by a reader of server
 * frames written here). */
#include <stdlib.h>

#include "harness.h"

#include "stream/internal.h"

struct rec {
    int n;
    uint8_t op;
    struct buf last;
};

static int on_message(void *ud, uint8_t op, const uint8_t *data, size_t len)
{
    struct rec *r = ud;
    r->n++;
    r->op = op;
    r->last.len = 0;
    assert_int_equal(buf_append(&r->last, data, len), 0);
    return 0;
}

static const struct ws_callbacks cb = {.on_message = on_message};

static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A client's frame, masked with key. */
static void client_frame(struct buf *b, uint8_t op, bool fin, const void *data, size_t len)
{
    assert_int_equal(ws_frame(b, op, fin, data, len, key), 0);
}

/* Feeds b whole, then again byte by byte through a fresh codec: both must
 * give the same result, messages and answer. */
static int feed_both(const struct buf *b, struct rec *rec, struct buf *out)
{
    struct ws w;
    ws_init(&w, &cb, rec);
    int r = ws_feed(&w, b->data, b->len, out);
    ws_free(&w);
    struct rec rec2 = {0};
    struct buf out2 = {0};
    ws_init(&w, &cb, &rec2);
    int r2 = 0;
    for (size_t i = 0; i < b->len && r2 == 0; i++)
        r2 = ws_feed(&w, b->data + i, 1, &out2);
    ws_free(&w);
    assert_int_equal(r2, r);
    assert_int_equal(rec2.n, rec->n);
    assert_int_equal(rec2.last.len, rec->last.len);
    if (rec->last.len)
        assert_memory_equal(rec2.last.data, rec->last.data, rec->last.len);
    assert_int_equal(out2.len, out->len);
    if (out->len)
        assert_memory_equal(out2.data, out->data, out->len);
    buf_free(&rec2.last);
    buf_free(&out2);
    return r;
}

/* b must fail with err, and the answer be a close frame with code. */
static void expect_close(const struct buf *b, int err, uint16_t code)
{
    struct rec rec = {0};
    struct buf out = {0};
    assert_int_equal(feed_both(b, &rec, &out), err);
    assert_int_equal(rec.n, 0);
    uint8_t want[4] = {0x88, 0x02, (uint8_t)(code >> 8), (uint8_t)code};
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, want, 4);
    buf_free(&out);
    buf_free(&rec.last);
}

static void rfc_masked_hello(void **state)
{
    (void)state;
    /* RFC 6455 5.7: a single-frame masked text message */
    static const uint8_t f[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
    struct buf b = {0}, out = {0};
    struct rec rec = {0};
    buf_append(&b, f, sizeof(f));
    assert_int_equal(feed_both(&b, &rec, &out), 0);
    assert_int_equal(rec.n, 1);
    assert_int_equal(rec.op, WS_TEXT);
    assert_int_equal(rec.last.len, 5);
    assert_memory_equal(rec.last.data, "Hello", 5);
    assert_int_equal(out.len, 0);
    /* our writer makes the same bytes */
    struct buf mine = {0};
    client_frame(&mine, WS_TEXT, true, "Hello", 5);
    assert_int_equal(mine.len, sizeof(f));
    assert_memory_equal(mine.data, f, sizeof(f));
    buf_free(&b);
    buf_free(&out);
    buf_free(&mine);
    buf_free(&rec.last);
}

static void rfc_unmasked_hello_fails(void **state)
{
    (void)state;
    /* the RFC's unmasked "Hello", as a server would send it: from a client,
     * a protocol error */
    static const uint8_t f[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    struct buf b = {0};
    buf_append(&b, f, sizeof(f));
    expect_close(&b, -EPROTO, WS_CLOSE_PROTOCOL);
    /* and the server's writer makes exactly those bytes */
    struct buf mine = {0};
    assert_int_equal(ws_message(&mine, WS_TEXT, "H", 1, "ello", 4), 0);
    assert_int_equal(mine.len, sizeof(f));
    assert_memory_equal(mine.data, f, sizeof(f));
    buf_free(&b);
    buf_free(&mine);
}

static void fragmented_text_with_ping(void **state)
{
    (void)state;
    /* RFC 5.7: "Hel" then "lo", here with a ping and a pong between */
    struct buf b = {0}, out = {0};
    struct rec rec = {0};
    client_frame(&b, WS_TEXT, false, "Hel", 3);
    client_frame(&b, WS_PING, true, "Hello", 5);
    client_frame(&b, WS_PONG, true, "x", 1);
    client_frame(&b, WS_CONT, false, "", 0);
    client_frame(&b, WS_CONT, true, "lo", 2);
    assert_int_equal(feed_both(&b, &rec, &out), 0);
    assert_int_equal(rec.n, 1);
    assert_int_equal(rec.op, WS_TEXT);
    assert_int_equal(rec.last.len, 5);
    assert_memory_equal(rec.last.data, "Hello", 5);
    /* the ping answered with its payload, unmasked (RFC 5.7's pong) */
    static const uint8_t pong[] = {0x8a, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    assert_int_equal(out.len, sizeof(pong));
    assert_memory_equal(out.data, pong, sizeof(pong));
    buf_free(&b);
    buf_free(&out);
    buf_free(&rec.last);
}

/* A feed answers only the last of its pings (RFC 6455 5.5.3): a flood of
 * pings costs one pong per read; and a pong due goes before our close. */
static void pings_answered_once_per_feed(void **state)
{
    (void)state;
    struct buf b = {0}, out = {0};
    struct rec rec = {0};
    for (int i = 0; i < 1000; i++)
        client_frame(&b, WS_PING, true, i == 999 ? "last" : "ping", 4);
    struct ws w;
    ws_init(&w, &cb, &rec);
    assert_int_equal(ws_feed(&w, b.data, b.len, &out), 0);
    static const uint8_t pong[] = {0x8a, 0x04, 'l', 'a', 's', 't'};
    assert_int_equal(out.len, sizeof(pong));
    assert_memory_equal(out.data, pong, sizeof(pong));
    /* a ping then a close in one feed: the pong, then the echoed close */
    b.len = out.len = 0;
    client_frame(&b, WS_PING, true, "p", 1);
    client_frame(&b, WS_CLOSE, true, "\x03\xe8", 2);
    assert_int_equal(ws_feed(&w, b.data, b.len, &out), WS_CLOSED);
    static const uint8_t want[] = {0x8a, 0x01, 'p', 0x88, 0x02, 0x03, 0xe8};
    assert_int_equal(out.len, sizeof(want));
    assert_memory_equal(out.data, want, sizeof(want));
    ws_free(&w);
    buf_free(&b);
    buf_free(&out);
}

static void lengths_16_and_64_bits(void **state)
{
    (void)state;
    size_t sizes[] = {125, 126, 256, 65535, 65536, WS_MSG_MAX};
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        size_t n = sizes[i];
        uint8_t *p = malloc(n);
        assert_non_null(p);
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)(k * 7);
        struct buf b = {0}, out = {0};
        struct rec rec = {0};
        client_frame(&b, WS_BINARY, true, p, n);
        /* RFC 5.7: 256 bytes is 0x82 0x7E 0x0100, 64 KiB 0x82 0x7F 0x0000000000010000 */
        if (n == 256)
            assert_memory_equal(b.data, ((uint8_t[]){0x82, 0xfe, 0x01, 0x00}), 4);
        if (n == 65536)
            assert_memory_equal(b.data, ((uint8_t[]){0x82, 0xff, 0, 0, 0, 0, 0, 1, 0, 0}), 10);
        struct ws w;
        ws_init(&w, &cb, &rec);
        assert_int_equal(ws_feed(&w, b.data, b.len, &out), 0);
        ws_free(&w);
        assert_int_equal(rec.n, 1);
        assert_int_equal(rec.op, WS_BINARY);
        assert_int_equal(rec.last.len, n);
        assert_memory_equal(rec.last.data, p, n);
        free(p);
        buf_free(&b);
        buf_free(&out);
        buf_free(&rec.last);
    }
}

static void bad_lengths(void **state)
{
    (void)state;
    /* 16 bits for 125: not minimal */
    uint8_t f1[] = {0x82, 0xfe, 0x00, 0x7d, 1, 2, 3, 4};
    /* 64 bits for 65535: not minimal */
    uint8_t f2[] = {0x82, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4};
    /* 2^63: the most significant bit is set */
    uint8_t f3[] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    /* 2^63 - 1 and one byte over the limit: too big, refused at the header */
    uint8_t f4[] = {0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
    uint8_t f5[] = {0x82, 0xff, 0, 0, 0, 0, 0, 0x10, 0, 1, 1, 2, 3, 4};
    struct {
        const uint8_t *f;
        size_t n;
        int err;
        uint16_t code;
    } cases[] = {
        {f1, sizeof(f1), -EPROTO, WS_CLOSE_PROTOCOL},
        {f2, sizeof(f2), -EPROTO, WS_CLOSE_PROTOCOL},
        {f3, sizeof(f3), -EPROTO, WS_CLOSE_PROTOCOL},
        {f4, sizeof(f4), -EMSGSIZE, WS_CLOSE_TOO_BIG},
        {f5, sizeof(f5), -EMSGSIZE, WS_CLOSE_TOO_BIG},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct buf b = {0};
        buf_append(&b, cases[i].f, cases[i].n);
        expect_close(&b, cases[i].err, cases[i].code);
        buf_free(&b);
    }
}

static void endless_fragments_hit_the_limit(void **state)
{
    (void)state;
    static uint8_t chunk[64 << 10];
    struct ws w;
    struct rec rec = {0};
    struct buf out = {0};
    ws_init(&w, &cb, &rec);
    int r = 0;
    size_t sent = 0;
    for (int i = 0; r == 0 && i < 100; i++) {
        struct buf b = {0};
        client_frame(&b, i ? WS_CONT : WS_BINARY, false, chunk, sizeof(chunk));
        r = ws_feed(&w, b.data, b.len, &out);
        if (r == 0)
            sent += sizeof(chunk);
        buf_free(&b);
    }
    assert_int_equal(r, -EMSGSIZE);
    assert_int_equal(sent, WS_MSG_MAX);
    assert_true(w.msg.len <= WS_MSG_MAX);
    assert_int_equal(rec.n, 0);
    assert_memory_equal(out.data, ((uint8_t[]){0x88, 0x02, 0x03, 0xf1}), 4);
    /* over: nothing more is read, the same answer */
    assert_int_equal(ws_feed(&w, chunk, 10, &out), -EMSGSIZE);
    assert_int_equal(out.len, 4);
    ws_free(&w);
    buf_free(&out);
}

static void protocol_errors(void **state)
{
    (void)state;
    static const uint8_t big[126] = {0};
    struct {
        const char *what;
        uint8_t op;
        bool fin;
        size_t len;
        uint8_t b0; /* nonzero: the first byte, overridden */
    } cases[] = {
        {"RSV1", WS_TEXT, true, 1, 0xc1},
        {"RSV3", WS_BINARY, true, 1, 0x92},
        {"opcode 3", 3, true, 1, 0},
        {"opcode 0xB", 0xb, true, 1, 0},
        {"continuation first", WS_CONT, true, 1, 0},
        {"ping of 126", WS_PING, true, 126, 0},
        {"close of 126", WS_CLOSE, true, 126, 0},
        {"fragmented ping", WS_PING, false, 1, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        print_message("%s\n", cases[i].what);
        struct buf b = {0};
        client_frame(&b, cases[i].op, cases[i].fin, big, cases[i].len);
        if (cases[i].b0)
            b.data[0] = cases[i].b0;
        expect_close(&b, -EPROTO, WS_CLOSE_PROTOCOL);
        buf_free(&b);
    }
    /* a new message inside a fragmented one */
    struct buf b = {0};
    client_frame(&b, WS_BINARY, false, "a", 1);
    client_frame(&b, WS_TEXT, true, "b", 1);
    expect_close(&b, -EPROTO, WS_CLOSE_PROTOCOL);
    buf_free(&b);
}

static void text_must_be_utf8(void **state)
{
    (void)state;
    struct buf b = {0}, out = {0};
    struct rec rec = {0};
    /* "κόσμε" split inside a character over two fragments: fine */
    static const char kosme[] = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5";
    client_frame(&b, WS_TEXT, false, kosme, 4);
    client_frame(&b, WS_CONT, true, kosme + 4, sizeof(kosme) - 5);
    assert_int_equal(feed_both(&b, &rec, &out), 0);
    assert_int_equal(rec.n, 1);
    assert_int_equal(rec.last.len, sizeof(kosme) - 1);
    b.len = 0;
    /* invalid text: 1007; the same bytes as binary are fine */
    client_frame(&b, WS_TEXT, true, "1\xff", 2);
    expect_close(&b, -EILSEQ, WS_CLOSE_INVALID);
    b.len = 0;
    rec.n = 0;
    client_frame(&b, WS_BINARY, true, "1\xff", 2);
    assert_int_equal(feed_both(&b, &rec, &out), 0);
    assert_int_equal(rec.n, 1);
    buf_free(&b);
    buf_free(&out);
    buf_free(&rec.last);

    static const struct {
        const char *s;
        bool ok;
    } u[] = {
        {"plain", true},
        {"\xc2\x80", true},
        {"\xdf\xbf", true},
        {"\xe0\xa0\x80", true},
        {"\xed\x9f\xbf", true},
        {"\xef\xbf\xbf", true},
        {"\xf0\x90\x80\x80", true},
        {"\xf4\x8f\xbf\xbf", true},
        {"\xc0\x80", false},         /* overlong NUL */
        {"\xc1\xbf", false},         /* overlong */
        {"\xe0\x9f\xbf", false},     /* overlong */
        {"\xed\xa0\x80", false},     /* surrogate */
        {"\xf0\x8f\xbf\xbf", false}, /* overlong */
        {"\xf4\x90\x80\x80", false}, /* past U+10FFFF */
        {"\xf5\x80\x80\x80", false},
        {"\x80", false},
        {"\xce", false}, /* cut short */
        {"\xe1\xbd", false},
        {"\xe1\x3d\xb9", false},
    };
    for (size_t i = 0; i < ARRAY_SIZE(u); i++) {
        print_message("%zu\n", i);
        assert_int_equal(ws_utf8_valid((const uint8_t *)u[i].s, strlen(u[i].s)), u[i].ok);
    }
}

static void close_handshake(void **state)
{
    (void)state;
    struct {
        const uint8_t *p;
        size_t len;
        int r;
        const uint8_t *answer;
        size_t alen;
    } cases[] = {
        {(const uint8_t *)"\x03\xe8", 2, WS_CLOSED, (const uint8_t *)"\x88\x02\x03\xe8", 4},
        {(const uint8_t *)"\x03\xe9"
                          "bye",
         5, WS_CLOSED, (const uint8_t *)"\x88\x02\x03\xe9", 4},
        {(const uint8_t *)"\x0f\xa0", 2, WS_CLOSED, (const uint8_t *)"\x88\x02\x0f\xa0", 4},
        {(const uint8_t *)"", 0, WS_CLOSED, (const uint8_t *)"\x88\x00", 2},
        {(const uint8_t *)"\x03", 1, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea", 4},
        {(const uint8_t *)"\x03\xed", 2, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea",
         4}, /* 1005 */
        {(const uint8_t *)"\x03\xee", 2, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea",
         4}, /* 1006 */
        {(const uint8_t *)"\x03\xe7", 2, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea", 4}, /* 999 */
        {(const uint8_t *)"\x07\xd0", 2, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea",
         4}, /* 2000 */
        {(const uint8_t *)"\x13\x88", 2, -EPROTO, (const uint8_t *)"\x88\x02\x03\xea",
         4}, /* 5000 */
        {(const uint8_t *)"\x03\xe8\xff", 3, -EILSEQ, (const uint8_t *)"\x88\x02\x03\xef", 4},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        print_message("%zu\n", i);
        struct buf b = {0}, out = {0};
        struct rec rec = {0};
        client_frame(&b, WS_CLOSE, true, cases[i].p, cases[i].len);
        client_frame(&b, WS_TEXT, true, "after", 5); /* ignored */
        assert_int_equal(feed_both(&b, &rec, &out), cases[i].r);
        assert_int_equal(rec.n, 0);
        assert_int_equal(out.len, cases[i].alen);
        assert_memory_equal(out.data, cases[i].answer, cases[i].alen);
        buf_free(&b);
        buf_free(&out);
    }
    /* our own close goes out once */
    struct ws w;
    struct buf out = {0};
    ws_init(&w, &cb, NULL);
    assert_int_equal(ws_close(&w, &out, WS_CLOSE_NORMAL), 0);
    assert_int_equal(ws_close(&w, &out, WS_CLOSE_NORMAL), 0);
    assert_int_equal(out.len, 4);
    /* and nothing after it: a ping gets no pong, the client's close ends it */
    struct buf b = {0};
    client_frame(&b, WS_PING, true, "p", 1);
    client_frame(&b, WS_CLOSE, true, "\x03\xe8", 2);
    assert_int_equal(ws_feed(&w, b.data, b.len, &out), WS_CLOSED);
    assert_int_equal(out.len, 4);
    buf_free(&b);
    buf_free(&out);
}

/* Reads server frames (unmasked) back into one message. */
static void read_server_message(const struct buf *b, uint8_t op, struct buf *msg, size_t *ret_n)
{
    size_t off = 0, n = 0;
    for (;;) {
        assert_true(b->len - off >= 2);
        uint8_t b0 = b->data[off], b1 = b->data[off + 1];
        assert_int_equal(b0 & 0x70, 0);
        assert_int_equal(b1 & 0x80, 0);
        assert_int_equal(b0 & 0x0f, n ? WS_CONT : op);
        uint64_t len = b1 & 0x7f;
        off += 2;
        if (len == 126) {
            len = (uint64_t)b->data[off] << 8 | b->data[off + 1];
            assert_true(len >= 126);
            off += 2;
        } else if (len == 127) {
            len = 0;
            for (int k = 0; k < 8; k++)
                len = len << 8 | b->data[off + k];
            assert_true(len > 0xffff);
            off += 8;
        }
        assert_true(len <= WS_FRAME_OUT_MAX);
        assert_true(b->len - off >= len);
        buf_append(msg, b->data + off, (size_t)len);
        off += (size_t)len;
        n++;
        if (b0 & 0x80)
            break;
    }
    assert_int_equal(off, b->len);
    *ret_n = n;
}

static void writer_fragments_large_messages(void **state)
{
    (void)state;
    size_t sizes[] = {
        0, 1, 124, 125, 65535, WS_FRAME_OUT_MAX - 1, WS_FRAME_OUT_MAX, 3 * WS_FRAME_OUT_MAX + 5};
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        size_t n = sizes[i];
        uint8_t *p = malloc(n + 1);
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)(k * 13 + 1);
        struct buf out = {0}, msg = {0};
        uint8_t ch = 2;
        assert_int_equal(ws_message(&out, WS_BINARY, &ch, 1, p, n), 0);
        size_t frames;
        read_server_message(&out, WS_BINARY, &msg, &frames);
        assert_int_equal(frames, (n + 1 + WS_FRAME_OUT_MAX - 1) / WS_FRAME_OUT_MAX);
        assert_int_equal(msg.len, n + 1);
        assert_int_equal(msg.data[0], 2);
        if (n)
            assert_memory_equal(msg.data + 1, p, n);
        free(p);
        buf_free(&out);
        buf_free(&msg);
    }
}

static void round_trip_through_the_parser(void **state)
{
    (void)state;
    /* a client's masked message in fragments, as our writer makes them */
    size_t n = 2 * WS_FRAME_OUT_MAX + 77;
    uint8_t *p = malloc(n);
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)('a' + k % 26);
    struct buf b = {0}, out = {0};
    for (size_t off = 0; off < n; off += WS_FRAME_OUT_MAX) {
        size_t l = n - off < WS_FRAME_OUT_MAX ? n - off : WS_FRAME_OUT_MAX;
        client_frame(&b, off ? WS_CONT : WS_TEXT, off + l == n, p + off, l);
    }
    struct rec rec = {0};
    assert_int_equal(feed_both(&b, &rec, &out), 0);
    assert_int_equal(rec.n, 1);
    assert_int_equal(rec.last.len, n);
    assert_memory_equal(rec.last.data, p, n);
    free(p);
    buf_free(&b);
    buf_free(&out);
    buf_free(&rec.last);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(rfc_masked_hello),
    cmocka_unit_test(rfc_unmasked_hello_fails),
    cmocka_unit_test(fragmented_text_with_ping),
    cmocka_unit_test(pings_answered_once_per_feed),
    cmocka_unit_test(lengths_16_and_64_bits),
    cmocka_unit_test(bad_lengths),
    cmocka_unit_test(endless_fragments_hit_the_limit),
    cmocka_unit_test(protocol_errors),
    cmocka_unit_test(text_must_be_utf8),
    cmocka_unit_test(close_handshake),
    cmocka_unit_test(writer_fragments_large_messages),
    cmocka_unit_test(round_trip_through_the_parser),
};

UNIT_MAIN(tests)
