/* base/err: the error object (base.h). The message and the code stay apart
 * until the error is shown, as in crun's src/libcrun/error.c: a message
 * handed on (from a child over a socket, into another error) must not
 * carry the system's text, or it is shown twice. */
#include <string.h>
#include <unistd.h>

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

/* ---- the record another process reads ---------------------------------- */

#define ERR_RECORD_NO_SYS 1u

size_t err_record_encode(const struct err *err, uint8_t buf[static ERR_RECORD_MAX])
{
    uint32_t magic = ERR_RECORD_MAGIC, flags = err->no_sys ? ERR_RECORD_NO_SYS : 0;
    int32_t code = err->code ? err->code : EIO;
    uint32_t len = (uint32_t)strnlen(err->msg, ERR_MSG_MAX - 1);
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, &code, 4);
    memcpy(buf + 8, &flags, 4);
    memcpy(buf + 12, &len, 4);
    memcpy(buf + ERR_RECORD_HEAD, err->msg, len);
    return ERR_RECORD_HEAD + len;
}

int err_record_decode(const void *buf, size_t len, struct err *ret)
{
    const uint8_t *b = buf;
    if (len > ERR_RECORD_MAX)
        return -EMSGSIZE;
    if (len < ERR_RECORD_HEAD)
        return -EPROTO;
    uint32_t magic, flags, mlen;
    int32_t code;
    memcpy(&magic, b, 4);
    memcpy(&code, b + 4, 4);
    memcpy(&flags, b + 8, 4);
    memcpy(&mlen, b + 12, 4);
    if (magic != ERR_RECORD_MAGIC || (flags & ~ERR_RECORD_NO_SYS) ||
        mlen != len - ERR_RECORD_HEAD || memchr(b + ERR_RECORD_HEAD, '\0', mlen))
        return -EPROTO;
    if (flags & ERR_RECORD_NO_SYS)
        err_set_msg(ret, code, "%.*s", (int)mlen, (const char *)b + ERR_RECORD_HEAD);
    else
        err_set(ret, code, "%.*s", (int)mlen, (const char *)b + ERR_RECORD_HEAD);
    return 0;
}

int err_record_write(int fd, const struct err *err)
{
    uint8_t buf[ERR_RECORD_MAX];
    size_t n = err_record_encode(err, buf);
    ssize_t w;
    do
        w = write(fd, buf, n);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return -errno;
    return (size_t)w == n ? 0 : -EIO;
}

int err_record_read(int fd, struct err *ret)
{
    uint8_t buf[ERR_RECORD_MAX + 1];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (!got)
        return -ENODATA;
    return err_record_decode(buf, got, ret);
}
