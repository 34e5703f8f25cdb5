/* Pure gRPC wire helpers: message framing, grpc-timeout, grpc-message
 * encoding. No I/O, so tests and fuzzers feed them bytes directly. */
#include <string.h>

#include "grpc/grpc.h"

enum grpc_frame_result grpc_frame_peek(const uint8_t *buf, size_t len, size_t max,
                                       uint32_t *ret_len)
{
    if (len < 5)
        return GRPC_FRAME_INCOMPLETE;
    if (buf[0] > 1)
        return GRPC_FRAME_BAD_FLAG;
    if (buf[0] == 1)
        return GRPC_FRAME_COMPRESSED;
    uint32_t n = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4];
    *ret_len = n;
    if (n > max)
        return GRPC_FRAME_TOO_LARGE;
    if (len - 5 < n)
        return GRPC_FRAME_INCOMPLETE;
    return GRPC_FRAME_OK;
}

void grpc_frame_header(uint8_t out[5], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

int grpc_timeout_parse(const char *s, size_t len, uint64_t *ret_ns)
{
    /* TimeoutValue is at most 8 digits: the value cannot overflow below. */
    if (len < 2 || len > 9)
        return -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len - 1; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    uint64_t unit;
    switch (s[len - 1]) {
    case 'H':
        unit = 3600ull * 1000000000ull;
        break;
    case 'M':
        unit = 60ull * 1000000000ull;
        break;
    case 'S':
        unit = 1000000000ull;
        break;
    case 'm':
        unit = 1000000ull;
        break;
    case 'u':
        unit = 1000ull;
        break;
    case 'n':
        unit = 1;
        break;
    default:
        return -EINVAL;
    }
    /* 99999999H does not fit in 64 bits of nanoseconds: saturate. */
    *ret_ns = v > UINT64_MAX / unit ? UINT64_MAX : v * unit;
    return 0;
}

int grpc_message_encode(const char *msg, struct buf *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        int r;
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            r = buf_append(out, p, 1);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            r = buf_append(out, e, 3);
        }
        if (r < 0)
            return r;
    }
    if (buf_reserve(out, 1) < 0)
        return -ENOMEM;
    out->data[out->len] = '\0';
    return 0;
}

const char *grpc_status_name(int status)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (status < 0 || (size_t)status >= ARRAY_SIZE(names))
        return "UNKNOWN";
    return names[status];
}
