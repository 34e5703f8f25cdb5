/* monitor/logfmt: see logfmt.h. */
#include "monitor/logfmt.h"

#include <string.h>

void logfmt_init(struct logfmt *f, size_t max_line)
{
    memset(f, 0, sizeof(*f));
    f->max_line = max_line && max_line <= LOGFMT_LINE_MAX ? max_line : LOGFMT_LINE_MAX;
}

void logfmt_feed(struct logfmt *f, enum logfmt_stream s, const uint8_t *data, size_t len,
                 logfmt_emit_fn emit, void *ctx)
{
    struct logfmt_line *l = &f->line[s];
    while (len) {
        const uint8_t *nl = memchr(data, '\n', len);
        size_t seg = nl ? (size_t)(nl - data) : len;
        size_t room = f->max_line - l->len;
        if (seg > room) {
            /* Longer than a record holds: a partial record of max_line. */
            if (l->len == 0) {
                emit(ctx, s, 'P', data, room);
            } else {
                memcpy(l->buf + l->len, data, room);
                emit(ctx, s, 'P', l->buf, f->max_line);
                l->len = 0;
            }
            data += room;
            len -= room;
            continue;
        }
        if (!nl) {
            memcpy(l->buf + l->len, data, seg);
            l->len += seg;
            return;
        }
        if (l->len == 0) {
            emit(ctx, s, 'F', data, seg);
        } else {
            memcpy(l->buf + l->len, data, seg);
            emit(ctx, s, 'F', l->buf, l->len + seg);
            l->len = 0;
        }
        data += seg + 1;
        len -= seg + 1;
    }
}

void logfmt_flush(struct logfmt *f, enum logfmt_stream s, logfmt_emit_fn emit, void *ctx)
{
    struct logfmt_line *l = &f->line[s];
    if (l->len)
        emit(ctx, s, 'P', l->buf, l->len);
    l->len = 0;
}

static char *put_num(char *p, unsigned v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

/* Days since 1970-01-01 → civil date (Howard Hinnant's algorithm). */
static void civil(int64_t days, unsigned *y, unsigned *m, unsigned *d)
{
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (unsigned)(yoe + era * 400) + (*m <= 2);
}

size_t logfmt_header(uint64_t ns, enum logfmt_stream s, char tag, char *out)
{
    uint64_t secs = ns / 1000000000u;
    unsigned y, mo, d;
    civil((int64_t)(secs / 86400), &y, &mo, &d);
    unsigned sod = (unsigned)(secs % 86400);
    char *p = out;
    p = put_num(p, y, 4);
    *p++ = '-';
    p = put_num(p, mo, 2);
    *p++ = '-';
    p = put_num(p, d, 2);
    *p++ = 'T';
    p = put_num(p, sod / 3600, 2);
    *p++ = ':';
    p = put_num(p, sod / 60 % 60, 2);
    *p++ = ':';
    p = put_num(p, sod % 60, 2);
    *p++ = '.';
    p = put_num(p, (unsigned)(ns % 1000000000u), 9);
    *p++ = 'Z';
    *p++ = ' ';
    const char *name = s == LOGFMT_STDOUT ? "stdout" : "stderr";
    memcpy(p, name, 6);
    p += 6;
    *p++ = ' ';
    *p++ = tag;
    *p++ = ' ';
    return (size_t)(p - out);
}
