/* base/err: the error object (base.h). The message and the code stay apart
 * until the error is shown, as in crun's src/libcrun/error.c: a message
 * handed on (from a child over a socket, into another error) must not
 * carry the system's text, or it is shown twice. */
#include <string.h>

#include "base.h"

/* The largest errno (the kernel's MAX_ERRNO): a code from another process
 * (a container's may send any number) beyond it, or INT_MIN, is EIO. */
#define ERRNO_MAX 4095

_printf_(4, 0) static int set(struct err *err, int code, bool no_sys, const char *fmt, va_list ap)
{
    if (code < -ERRNO_MAX || code > ERRNO_MAX)
        code = EIO;
    if (code < 0)
        code = -code;
    if (!err)
        return code ? -code : -EIO;
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    if (n < 0)
        err->msg[0] = '\0';
    err->code = code ? code : EIO;
    err->no_sys = no_sys || !code;
    return -err->code;
}

int err_set(struct err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = set(err, code, false, fmt, ap);
    va_end(ap);
    return r;
}

int err_set_msg(struct err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = set(err, code, true, fmt, ap);
    va_end(ap);
    return r;
}

int err_wrap(struct err *err, const char *fmt, ...)
{
    if (!err)
        return -EIO;
    if (!err->code)
        err->code = EIO;
    char prefix[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -err->code;
    char old[ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof(old));
    /* Truncation is acceptable: the innermost detail is cut first. */
    size_t plen = strnlen(prefix, sizeof(prefix) - 1);
    if (plen > sizeof(err->msg) - 3)
        plen = sizeof(err->msg) - 3;
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, ": ", 2);
    size_t room = sizeof(err->msg) - plen - 3;
    size_t olen = strnlen(old, room);
    memcpy(err->msg + plen + 2, old, olen);
    err->msg[plen + 2 + olen] = '\0';
    return -err->code;
}

const char *err_str(const struct err *err)
{
    static __thread char buf[ERR_MSG_MAX + 64];
    if (!err)
        return "";
    size_t len = strnlen(err->msg, sizeof(err->msg));
    if (err->no_sys || !err->code) {
        memcpy(buf, err->msg, len);
        buf[len] = '\0';
    } else {
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)len, err->msg, len ? ": " : "",
                 strerror(err->code));
    }
    return buf;
}

void err_clear(struct err *err)
{
    if (err) {
        err->code = 0;
        err->no_sys = false;
        err->msg[0] = '\0';
    }
}
