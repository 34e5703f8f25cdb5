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
    /* One write per line, so that concurrent writers do not interleave. */
    if (json_lines) {
        struct buf b = {0};
        buf_printf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", when, level_names[level]);
        buf_append_json_string(&b, msg);
        buf_append(&b, "}\n", 2);
        if (b.data)
            fwrite(b.data, 1, b.len, out);
        buf_free(&b);
    } else {
        fprintf(out, "%s %s %s\n", when, level_names[level], msg);
    }
    fflush(out);
    errno = saved;
}
