/* monitor/answer: a control socket answer (proto.h) as an error object, for
 * the daemon's side of the socket (ReopenContainerLog, attach). */
#include <string.h>

#include "base/base.h"
#include "monitor/monitor.h"

int monitor_answer_err(const char *answer, struct err *err)
{
    if (strcmp(answer, "ok") == 0 || str_has_prefix(answer, "ok "))
        return 0;
    if (!str_has_prefix(answer, "error "))
        return err_set_msg(err, EPROTO, "the container's monitor answered `%.100s`", answer);
    const char *p = answer + strlen("error ");
    char *end = NULL;
    long code = str_has_prefix(p, "errno ") ? strtol(p + strlen("errno "), &end, 10) : 0;
    if (end && code > 0 && code <= 4095 && *end == ' ')
        return err_set(err, (int)code, "%s", end + 1);
    /* a reason that says it all (or an older monitor's system text) */
    return err_set_msg(err, EIO, "%s", p);
}
