/* Exec, Attach, PortForward: each checks its request and answers with a
 * URL of the streaming server (src/stream), which does the streaming when
 * kubelet's proxy connects to it. What to run or reach is decided here and
 * handed to the server as plain data: the executor's argv (`kinglet oci
 * exec`, as ExecSync), the monitor's state directory, the pod's network
 * namespace file. */
#include <string.h>

#include "cri/containers.h"
#include "oci/oci.h"
#include "stream/stream.h"

static struct container *running(struct cri_call *call, const char *rpc, const char *id)
{
    struct container *c = container_find_or_fail(call, rpc, id);
    if (!c)
        return NULL;
    if (c->rec.state != STORE_CTR_RUNNING) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "%s: container `%s` is not running (%s)",
                 rpc, c->rec.id, store_ctr_state_name(c->rec.state));
        return NULL;
    }
    return c;
}

/* Hands req to the server and answers with its URL; frees req. */
static void answer(struct cri_call *call, struct stream_request *req,
                   void (*reply)(struct cri_call *, const char *))
{
    struct err err = {0};
    char *url = NULL;
    if (stream_server_url(call->cri->streams, req, &url, &err) < 0) {
        cri_fail_err(call, &err);
        return;
    }
    reply(call, url);
    free(url);
}

static void exec_reply(struct cri_call *call, const char *url)
{
    Runtime__V1__ExecResponse resp = RUNTIME__V1__EXEC_RESPONSE__INIT;
    resp.url = (char *)url;
    cri_reply(call, &resp.base);
}

static void attach_reply(struct cri_call *call, const char *url)
{
    Runtime__V1__AttachResponse resp = RUNTIME__V1__ATTACH_RESPONSE__INIT;
    resp.url = (char *)url;
    cri_reply(call, &resp.base);
}

static void pf_reply(struct cri_call *call, const char *url)
{
    Runtime__V1__PortForwardResponse resp = RUNTIME__V1__PORT_FORWARD_RESPONSE__INIT;
    resp.url = (char *)url;
    cri_reply(call, &resp.base);
}

/* kubelet's own checks of a streaming request */
static bool streams_ok(struct cri_call *call, const char *rpc, bool in, bool out, bool err,
                       bool tty)
{
    if (!in && !out && !err) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "%s: one of stdin, stdout, or stderr must be set", rpc);
        return false;
    }
    if (tty && err) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "%s: tty and stderr cannot both be true (a terminal has one output)", rpc);
        return false;
    }
    return true;
}

/* Exec's command, started as ExecSync's is (oci_exec in_process: no
 * executor process; the command is the daemon's own child). */
struct exec_target {
    char *root, *id;
};

static void exec_target_free(void *data)
{
    struct exec_target *t = data;
    if (t) {
        free(t->root);
        free(t->id);
        free(t);
    }
}

static int exec_start(const struct stream_request *req, const int stdio[3], int console,
                      int *ret_pidfd, int *ret_start, struct err *err)
{
    const struct exec_target *t = req->data;
    struct oci_exec_opts o = {.root = t->root,
                              .id = t->id,
                              .args = req->argv,
                              .tty = req->tty,
                              .pid_fd = -1,
                              .console_fd = console, /* taken */
                              .detach = true,
                              .in_process = true,
                              .ret_pidfd = ret_pidfd,
                              .ret_sync = ret_start,
                              .stdio = stdio};
    int status = 0;
    int r = oci_exec(&o, &status, err);
    /* The command cannot run: a shell's code (127, 126), which the client
     * gets as from any command, and the reason on stderr. */
    return r < 0 && status ? status : r;
}

static int exec_result(const struct stream_request *req, int start, struct err *err)
{
    const struct exec_target *t = req->data;
    return oci_exec_result(start, t->id, err);
}

void cri_exec(struct cri_call *call)
{
    Runtime__V1__ExecRequest *req = (Runtime__V1__ExecRequest *)call->req;
    struct container *c = running(call, "Exec", req->container_id);
    if (!c || !streams_ok(call, "Exec", req->stdin, req->stdout, req->stderr, req->tty))
        return;
    if (!req->n_cmd || req->n_cmd > 4096) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "Exec: cmd must have 1 to 4096 words");
        return;
    }
    struct stream_request *r = calloc(1, sizeof(*r));
    struct exec_target *t = calloc(1, sizeof(*t));
    char **argv = calloc(req->n_cmd + 1, sizeof(char *));
    bool oom = !r || !t || !argv || !(t->root = strdup(call->cri->containers->oci_root)) ||
               !(t->id = strdup(c->rec.id));
    for (size_t i = 0; !oom && i < req->n_cmd; i++)
        oom = !(argv[i] = strdup(req->cmd[i]));
    if (r) {
        r->kind = STREAM_EXEC;
        r->argv = argv;
        r->exec = exec_start;
        r->exec_result = exec_result;
        r->data = t;
        r->free_data = exec_target_free;
        r->tty = req->tty;
        r->in = req->stdin;
        r->out = req->stdout;
        r->err = req->stderr;
    }
    if (oom) {
        if (r)
            stream_request_free(r);
        else {
            exec_target_free(t);
            free(argv);
        }
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    answer(call, r, exec_reply);
}

void cri_attach(struct cri_call *call)
{
    Runtime__V1__AttachRequest *req = (Runtime__V1__AttachRequest *)call->req;
    struct container *c = running(call, "Attach", req->container_id);
    if (!c || !streams_ok(call, "Attach", req->stdin, req->stdout, req->stderr, req->tty))
        return;
    if (req->stdin && !c->config->stdin) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "Attach: container `%s` was not created with stdin", c->rec.id);
        return;
    }
    struct stream_request *r = calloc(1, sizeof(*r));
    if (!r || asprintf(&r->socket_dir, "%s/%s", call->cri->containers->oci_root, c->rec.id) < 0) {
        free(r);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->kind = STREAM_ATTACH;
    /* the container's own terminal decides: one output stream */
    r->tty = c->config->tty;
    r->in = req->stdin;
    r->out = req->stdout;
    r->err = req->stderr && !c->config->tty;
    answer(call, r, attach_reply);
}

void cri_port_forward(struct cri_call *call)
{
    Runtime__V1__PortForwardRequest *req = (Runtime__V1__PortForwardRequest *)call->req;
    struct sandbox *sb = sandbox_find_or_fail(call, "PortForward", req->pod_sandbox_id);
    if (!sb)
        return;
    if (sandbox_state(sb) != RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "PortForward: pod sandbox `%s` is not ready", sb->rec.id);
        return;
    }
    if (req->n_port > STREAM_PF_STREAMS_MAX) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "PortForward: more than %d ports",
                 STREAM_PF_STREAMS_MAX);
        return;
    }
    for (size_t i = 0; i < req->n_port; i++)
        if (req->port[i] < 1 || req->port[i] > 65535) {
            cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "PortForward: port %d is not 1..65535",
                     req->port[i]);
            return;
        }
    struct stream_request *r = calloc(1, sizeof(*r));
    char dir[4200];
    sandbox_dir(call->cri, sb->rec.id, dir, sizeof(dir));
    bool oom = !r;
    if (r) {
        r->kind = STREAM_PORTFORWARD;
        if (sb->host_network)
            oom = !(r->netns = strdup("/proc/self/ns/net"));
        else
            oom = asprintf(&r->netns, "%s/ns/net", dir) < 0 ? (r->netns = NULL, true) : false;
        if (!oom && req->n_port) {
            oom = !(r->ports = calloc(req->n_port, sizeof(int32_t)));
            for (size_t i = 0; !oom && i < req->n_port; i++)
                r->ports[r->n_ports++] = req->port[i];
        }
    }
    if (oom) {
        stream_request_free(r);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    answer(call, r, pf_reply);
}
