/* monitor/logfmt: container output, as hostile as it likes, framed into CRI
 * log records. Oracle: per stream, the records' contents joined (a newline
 * after every full record) give back exactly the bytes fed; no record is
 * longer than max_line; a full record holds no newline; a partial one is
 * max_line long unless it is the last of its stream. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/logfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct {
    uint8_t in[2][1 << 17], out[2][(1 << 18)];
    size_t nin[2], nout[2];
    size_t max;
    int last_tag[2];
    size_t last_len[2];
} t;

static void emit(void *ctx, enum logfmt_stream s, char tag, const uint8_t *d, size_t len)
{
    (void)ctx;
    if (len > t.max || (tag != 'P' && tag != 'F'))
        __builtin_trap();
    if (tag == 'F' && memchr(d, '\n', len))
        __builtin_trap();
    /* a partial record shorter than max_line must be the stream's last */
    if (t.last_tag[s] == 'P' && t.last_len[s] < t.max)
        __builtin_trap();
    memcpy(t.out[s] + t.nout[s], d, len);
    t.nout[s] += len;
    if (tag == 'F')
        t.out[s][t.nout[s]++] = '\n';
    t.last_tag[s] = tag;
    t.last_len[s] = len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct logfmt f;
    if (size < 1)
        return 0;
    memset(&t, 0, sizeof(t));
    t.max = (size_t)(data[0] % 32) + 1;
    logfmt_init(&f, t.max);
    /* the rest in chunks: [len byte][stream bit + bytes] */
    for (size_t i = 1; i < size;) {
        size_t len = data[i] & 0x7f;
        enum logfmt_stream s = (data[i] & 0x80) ? LOGFMT_STDERR : LOGFMT_STDOUT;
        i++;
        if (len > size - i)
            len = size - i;
        memcpy(t.in[s] + t.nin[s], data + i, len);
        t.nin[s] += len;
        logfmt_feed(&f, s, data + i, len, emit, NULL);
        i += len;
    }
    for (int s = 0; s < 2; s++) {
        t.last_tag[s] = 0; /* the flush may leave a short partial */
        logfmt_flush(&f, (enum logfmt_stream)s, emit, NULL);
        if (t.nout[s] != t.nin[s] || memcmp(t.out[s], t.in[s], t.nin[s]) != 0)
            __builtin_trap();
    }
    return 0;
}
