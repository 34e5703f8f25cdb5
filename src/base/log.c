#include <string.h>
#include <time.h>

#include "base.h"

static enum log_level current_level = LOG_LEVEL_INFO;
static bool json_lines;
static FILE *log_file;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

void log_set_level(enum log_level level) { current_level = level; }
enum log_level log_get_level(void) { return current_level; }
void log_set_json(bool json) { json_lines = json; }
bool log_get_json(void) { return json_lines; }
void log_set_file(FILE *f) { log_file = f; }

int log_level_parse(const char *s, enum log_level *ret)
{
    static const struct {
        const char *name;
        enum log_level level;
    } names[] = {
        {"error", LOG_LEVEL_ERROR}, {"warn", LOG_LEVEL_WARN},   {"warning", LOG_LEVEL_WARN},
        {"info", LOG_LEVEL_INFO},   {"debug", LOG_LEVEL_DEBUG},
    };
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (strcmp(s, names[i].name) == 0) {
            *ret = names[i].level;
            return 0;
        }
    return -EINVAL;
}

/* Length of the well-formed UTF-8 sequence at p (1..4), 0 if it is not one:
 * overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_seq(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n;
    unsigned min, cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, min = 0x80, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, min = 0x800, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int log_escape(struct buf *b, const char *s, bool json)
{
    const unsigned char *p = (const unsigned char *)s;
    int r = 0;
    while (r == 0 && *p) {
        size_t n = utf8_seq(p);
        unsigned c = *p;
        /* C1 controls (U+0080..U+009F) are control characters too: some
         * terminals act on them. */
        bool c1 = n == 2 && c == 0xc2 && p[1] < 0xa0;
        if (n == 0 || c < 0x20 || c == 0x7f || c1) {
            unsigned v = c1 ? p[1] : c;
            if (c == '\n' || c == '\r' || c == '\t')
                r = buf_printf(b, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
            else if (n == 0)
                r = json ? buf_append(b, "\\ufffd", 6) : buf_printf(b, "\\x%02x", c);
            else
                r = buf_printf(b, json || c1 ? "\\u%04x" : "\\x%02x", v);
            p += n ? n : 1;
            continue;
        }
        if (json && (c == '"' || c == '\\'))
            r = buf_append(b, "\\", 1);
        if (r == 0)
            r = buf_append(b, p, n);
        p += n;
    }
    return r;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > current_level)
        return;
    int saved = errno;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char when[96];
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);

    FILE *out = log_file ? log_file : stderr;
    /* One write per line, so that concurrent writers do not interleave.
     * Messages carry strings that clients chose (pod names, image
     * references, paths): control characters and bytes that are not UTF-8
     * are escaped, so that no input can start a line of its own or steer a
     * terminal. */
    struct buf b = {0};
    int r;
    if (json_lines) {
        r = buf_printf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", when,
                       level_names[level]);
        if (r == 0)
            r = log_escape(&b, msg, true);
        if (r == 0)
            r = buf_append(&b, "\"}\n", 3);
    } else {
        r = buf_printf(&b, "%s %s ", when, level_names[level]);
        if (r == 0)
            r = log_escape(&b, msg, false);
        if (r == 0)
            r = buf_append(&b, "\n", 1);
    }
    if (r == 0)
        fwrite(b.data, 1, b.len, out);
    buf_free(&b);
    fflush(out);
    errno = saved;
}
