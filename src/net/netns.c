/* net/netns: run a step inside another network namespace.
 *
 * setns(CLONE_NEWNET) changes only the calling thread, so worker threads can
 * do this concurrently. The thread's own namespace is opened first (through
 * /proc/thread-self) and re-entered afterwards. */
#include <fcntl.h>
#include <sched.h>
#include <string.h>

#include "net/internal.h"

int net_netns_run(int netns_fd, int (*fn)(void *data, struct err *err), void *data, struct err *err)
{
    _cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        return err_set(err, errno, "open own network namespace");
    if (setns(netns_fd, CLONE_NEWNET) < 0)
        return err_set(err, errno, "enter network namespace");
    int r = fn(data, err);
    if (setns(self, CLONE_NEWNET) < 0) {
        /* Continuing in the pod's namespace would configure the wrong
         * network from now on: this is not recoverable. */
        log_error("cannot return to own network namespace: %s", strerror(errno));
        abort();
    }
    return r;
}
