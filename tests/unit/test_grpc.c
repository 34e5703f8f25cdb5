/* gRPC wire helpers: framing, grpc-timeout, grpc-message encoding. */
#include "harness.h"

#include "grpc/grpc.h"

static void frame_peek(void **state)
{
    uint32_t n = 0;
    uint8_t ok[] = {0, 0, 0, 0, 3, 'a', 'b', 'c'};
    assert_int_equal(grpc_frame_peek(ok, sizeof(ok), 100, &n), GRPC_FRAME_OK);
    assert_int_equal(n, 3);
    assert_int_equal(grpc_frame_peek(ok, 4, 100, &n), GRPC_FRAME_INCOMPLETE);
    assert_int_equal(grpc_frame_peek(ok, 7, 100, &n), GRPC_FRAME_INCOMPLETE);
    uint8_t empty[] = {0, 0, 0, 0, 0};
    assert_int_equal(grpc_frame_peek(empty, 5, 100, &n), GRPC_FRAME_OK);
    assert_int_equal(n, 0);
    uint8_t comp[] = {1, 0, 0, 0, 0};
    assert_int_equal(grpc_frame_peek(comp, 5, 100, &n), GRPC_FRAME_COMPRESSED);
    uint8_t badflag[] = {2, 0, 0, 0, 0};
    assert_int_equal(grpc_frame_peek(badflag, 5, 100, &n), GRPC_FRAME_BAD_FLAG);
    /* The size is judged from the prefix alone, before any payload. */
    uint8_t big[] = {0, 0x01, 0x10, 0x00, 0x00};
    assert_int_equal(grpc_frame_peek(big, 5, GRPC_MAX_RECV_MESSAGE, &n), GRPC_FRAME_TOO_LARGE);
    assert_int_equal(n, 17u << 20);
    uint8_t max[] = {0, 0x01, 0x00, 0x00, 0x00};
    assert_int_equal(grpc_frame_peek(max, 5, GRPC_MAX_RECV_MESSAGE, &n), GRPC_FRAME_INCOMPLETE);
}

static void frame_header_roundtrip(void **state)
{
    uint8_t h[5];
    uint32_t n = 0;
    grpc_frame_header(h, 0x01020304);
    assert_memory_equal(h, "\x00\x01\x02\x03\x04", 5);
    assert_int_equal(grpc_frame_peek(h, 5, UINT32_MAX, &n), GRPC_FRAME_INCOMPLETE);
    assert_int_equal(n, 0x01020304);
}

static void timeout_units(void **state)
{
    uint64_t ns = 0;
    struct {
        const char *s;
        uint64_t want;
    } ok[] = {
        {"1n", 1},
        {"5u", 5000},
        {"250m", 250000000ull},
        {"3S", 3000000000ull},
        {"2M", 120000000000ull},
        {"1H", 3600000000000ull},
        {"99999999n", 99999999ull},
        {"0m", 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(grpc_timeout_parse(ok[i].s, strlen(ok[i].s), &ns), 0);
        assert_int_equal(ns, ok[i].want);
    }
    /* 8 digits of hours do not fit in 64 bits of nanoseconds: saturate. */
    assert_int_equal(grpc_timeout_parse("99999999H", 9, &ns), 0);
    assert_true(ns == UINT64_MAX);
    const char *bad[] = {"", "m", "10", "123456789m", "1x", "-1m", "1.5S", " 1m", "1mm"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(grpc_timeout_parse(bad[i], strlen(bad[i]), &ns), -EINVAL);
}

static void message_encoding(void **state)
{
    struct buf b = {0};
    assert_int_equal(grpc_message_encode("plain text: ok", &b), 0);
    assert_string_equal((char *)b.data, "plain text: ok");
    b.len = 0;
    assert_int_equal(grpc_message_encode("100% \xc3\xa9\n", &b), 0);
    assert_string_equal((char *)b.data, "100%25 %C3%A9%0A");
    b.len = 0;
    assert_int_equal(grpc_message_encode("", &b), 0);
    assert_string_equal((char *)b.data, "");
    buf_free(&b);
}

static void status_names(void **state)
{
    assert_string_equal(grpc_status_name(GRPC_STATUS_OK), "OK");
    assert_string_equal(grpc_status_name(GRPC_STATUS_UNIMPLEMENTED), "UNIMPLEMENTED");
    assert_string_equal(grpc_status_name(GRPC_STATUS_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_string_equal(grpc_status_name(17), "UNKNOWN");
    assert_string_equal(grpc_status_name(-1), "UNKNOWN");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(frame_peek),    cmocka_unit_test(frame_header_roundtrip),
    cmocka_unit_test(timeout_units), cmocka_unit_test(message_encoding),
    cmocka_unit_test(status_names),
};
UNIT_MAIN(tests)
