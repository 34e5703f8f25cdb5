/* monitor/logfmt: the CRI log format, pure (no I/O), shared by the monitor
 * program and the unit tests.
 *
 * A record is `<RFC3339Nano UTC> <stdout|stderr> <P|F> <content>\n`. Output
 * is cut at newlines (the newline is not part of the content); a line
 * longer than max_line goes out as partial (P) records of max_line bytes
 * and a full (F) one with its end; what is left without a newline at the
 * end of a stream is a partial record, as containerd writes it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define LOGFMT_LINE_MAX 16384
#define LOGFMT_TS_LEN   30 /* 2006-01-02T15:04:05.000000000Z */

enum logfmt_stream { LOGFMT_STDOUT, LOGFMT_STDERR };

/* Called once per record with its content (without the newline). */
typedef void (*logfmt_emit_fn)(void *ctx, enum logfmt_stream s, char tag, const uint8_t *data,
                               size_t len);

struct logfmt_line {
    uint8_t buf[LOGFMT_LINE_MAX];
    size_t len;
};

struct logfmt {
    size_t max_line; /* 1..LOGFMT_LINE_MAX */
    struct logfmt_line line[2];
};

void logfmt_init(struct logfmt *f, size_t max_line);
/* Output read from stream s. */
void logfmt_feed(struct logfmt *f, enum logfmt_stream s, const uint8_t *data, size_t len,
                 logfmt_emit_fn emit, void *ctx);
/* The stream ended: what is left goes out as a partial record. */
void logfmt_flush(struct logfmt *f, enum logfmt_stream s, logfmt_emit_fn emit, void *ctx);
/* The record header for a time in ns since the epoch, into out (at least
 * LOGFMT_TS_LEN + 10 bytes): "<ts> stdout F ". Returns its length. */
size_t logfmt_header(uint64_t ns, enum logfmt_stream s, char tag, char *out);
