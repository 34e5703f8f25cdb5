#include <string.h>

#include "base.h"

int err_set(struct err *err, int code, const char *fmt, ...)
{
    if (code < 0)
        code = -code;
    if (!err)
        return code ? -code : -EIO;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    size_t len = strnlen(err->msg, sizeof(err->msg));
    if (code && len < sizeof(err->msg) - 1)
        snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", strerror(code));
    err->code = code ? code : EIO;
    return -err->code;
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

void err_clear(struct err *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
