/* ReopenContainerLog: kubelet rotates a container's log by renaming the file
 * and then asking for a reopen (and renames it back if the call fails, so
 * rotation works only with this RPC). The container's monitor owns the log
 * file: the request goes to its control socket, in a worker (a connect and
 * a short exchange, bounded by a timeout), and the monitor's answer comes
 * back as the RPC's. */
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "cri/containers.h"
#include "monitor/monitor.h"

struct reopen_job {
    uv_work_t req;
    struct cri_call *call; /* loop side only */
    char id[STORE_ID_LEN + 1];
    char path[4300]; /* the monitor's state directory */
    struct err err;
    int r;
};

/* One request to the control socket in a monitor's state directory dir;
 * the answer's text into buf. The socket is reached through an fd of the
 * directory, since its path may not fit a socket address. */
static int ctl_ask(const char *dir, const char *req, char *buf, size_t size, struct err *err)
{
    _cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return err_set(err, errno == ENOENT ? ESRCH : errno, "the container's state `%s`", dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, MONITOR_CTL_SOCK);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, errno, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return err_set(err, errno == ENOENT || errno == ECONNREFUSED ? ESRCH : errno,
                       "the container's monitor does not answer");
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0)
        return err_set(err, errno, "ask the container's monitor");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, 10000);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return err_set(err, ETIMEDOUT, "the container's monitor did not answer in 10 s");
    ssize_t n = recv(fd, buf, size - 1, 0);
    if (n <= 0)
        return err_set(err, n < 0 ? errno : EPIPE, "the container's monitor did not answer");
    buf[n] = '\0';
    return 0;
}

static void reopen_work(uv_work_t *req)
{
    struct reopen_job *j = req->data;
    char answer[512];
    j->r = ctl_ask(j->path, MONITOR_CTL_REOPEN, answer, sizeof(answer), &j->err);
    if (j->r == 0)
        j->r = monitor_answer_err(answer, &j->err);
}

static void reopen_done(uv_work_t *req, int status)
{
    struct reopen_job *j = req->data;
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    if (j->r < 0) {
        err_wrap(&j->err, "reopen the log of container `%s`", j->id);
        cri_fail_err(j->call, &j->err);
    } else {
        Runtime__V1__ReopenContainerLogResponse resp =
            RUNTIME__V1__REOPEN_CONTAINER_LOG_RESPONSE__INIT;
        cri_reply(j->call, &resp.base);
    }
    free(j);
}

void cri_reopen_container_log(struct cri_call *call)
{
    Runtime__V1__ReopenContainerLogRequest *req =
        (Runtime__V1__ReopenContainerLogRequest *)call->req;
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
    if (c->rec.state != STORE_CTR_RUNNING) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "ReopenContainerLog: container `%s` is not running", c->rec.id);
        return;
    }
    struct reopen_job *j = calloc(1, sizeof(*j));
    if (!j) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    j->call = call;
    memcpy(j->id, c->rec.id, sizeof(j->id));
    snprintf(j->path, sizeof(j->path), "%s/%s", call->cri->containers->oci_root, c->rec.id);
    j->req.data = j;
    uv_queue_work(call->cri->loop, &j->req, reopen_work, reopen_done);
}
