/* Routing, request decoding, replies and the errno → gRPC status map. */
#include <string.h>
#include <sys/stat.h>

#include "cri/containers.h"
#include "stream/stream.h"

static const struct {
    const char *name;
    cri_handler_fn fn;
} handlers[] = {
    {"Version", cri_version},
    {"Status", cri_status},
    {"RuntimeConfig", cri_runtime_config},
    {"UpdateRuntimeConfig", cri_update_runtime_config},
    {"GetContainerEvents", cri_get_container_events},
    {"PullImage", cri_pull_image},
    {"ImageStatus", cri_image_status},
    {"ListImages", cri_list_images},
    {"StreamImages", cri_stream_images},
    {"RemoveImage", cri_remove_image},
    {"ImageFsInfo", cri_image_fs_info},
    {"RunPodSandbox", cri_run_pod_sandbox},
    {"StopPodSandbox", cri_stop_pod_sandbox},
    {"RemovePodSandbox", cri_remove_pod_sandbox},
    {"PodSandboxStatus", cri_pod_sandbox_status},
    {"ListPodSandbox", cri_list_pod_sandbox},
    {"StreamPodSandboxes", cri_stream_pod_sandboxes},
    {"CreateContainer", cri_create_container},
    {"StartContainer", cri_start_container},
    {"StopContainer", cri_stop_container},
    {"RemoveContainer", cri_remove_container},
    {"ContainerStatus", cri_container_status},
    {"ListContainers", cri_list_containers},
    {"StreamContainers", cri_stream_containers},
    {"ReopenContainerLog", cri_reopen_container_log},
    {"ExecSync", cri_exec_sync},
    {"Exec", cri_exec},
    {"Attach", cri_attach},
    {"PortForward", cri_port_forward},
    {"UpdateContainerResources", cri_update_container_resources},
    {"CheckpointContainer", cri_checkpoint_container},
    {"UpdatePodSandboxResources", cri_update_pod_sandbox_resources},
    {"ContainerStats", cri_container_stats},
    {"ListContainerStats", cri_list_container_stats},
    {"StreamContainerStats", cri_stream_container_stats},
    {"PodSandboxStats", cri_pod_sandbox_stats},
    {"ListPodSandboxStats", cri_list_pod_sandbox_stats},
    {"StreamPodSandboxStats", cri_stream_pod_sandbox_stats},
    {"ListMetricDescriptors", cri_list_metric_descriptors},
    {"ListPodSandboxMetrics", cri_list_pod_sandbox_metrics},
    {"StreamPodSandboxMetrics", cri_stream_pod_sandbox_metrics},
};

static const ProtobufCServiceDescriptor *const services[] = {
    &runtime__v1__runtime_service__descriptor,
    &runtime__v1__image_service__descriptor,
};

int cri_status_from_errno(int code)
{
    switch (code < 0 ? -code : code) {
    case 0:
        return GRPC_STATUS_OK;
    case ENOENT:
    case ESRCH:
        return GRPC_STATUS_NOT_FOUND;
    case EINVAL:
    case ENAMETOOLONG:
    case E2BIG:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case EEXIST:
        return GRPC_STATUS_ALREADY_EXISTS;
    case EPERM:
    case EACCES:
        return GRPC_STATUS_PERMISSION_DENIED;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
    case EFBIG:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case ETIMEDOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case ENOSYS:
    case ENOTSUP:
        return GRPC_STATUS_UNIMPLEMENTED;
    case EBUSY:
    case EAGAIN:
        return GRPC_STATUS_UNAVAILABLE;
    case ECANCELED:
        return GRPC_STATUS_CANCELLED;
    case EBADMSG:
    case EILSEQ:
        return GRPC_STATUS_DATA_LOSS;
    case ENOTEMPTY:
    case EALREADY:
    case EADDRINUSE: /* a host port another pod holds */
    case ENOPKG:     /* a tool the node lacks (criu) */
        return GRPC_STATUS_FAILED_PRECONDITION;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

static void call_free(struct cri_call *call)
{
    if (call->req)
        protobuf_c_message_free_unpacked(call->req, NULL);
    free(call);
}

static void log_rpc(struct cri_call *call, int status, const char *message)
{
    double ms = (double)(now_mono_ns() - call->start_ns) / 1e6;
    if (status == GRPC_STATUS_OK) {
        log_debug("rpc %s OK %.3fms", call->route->path, ms);
        return;
    }
    /* A failed RPC is logged once, here. Client mistakes and absent
     * objects are routine for kubelet; server-side failures are errors. */
    enum log_level level;
    switch (status) {
    case GRPC_STATUS_INTERNAL:
    case GRPC_STATUS_UNKNOWN:
    case GRPC_STATUS_DATA_LOSS:
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        level = LOG_LEVEL_ERROR;
        break;
    case GRPC_STATUS_NOT_FOUND:
    case GRPC_STATUS_UNIMPLEMENTED:
    case GRPC_STATUS_CANCELLED:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        level = LOG_LEVEL_DEBUG;
        break;
    default:
        level = LOG_LEVEL_INFO;
    }
    if (log_enabled(level))
        log_msg(level, "rpc %s %s %.3fms: %s", call->route->path, grpc_status_name(status), ms,
                message ? message : "");
}

void cri_finish(struct cri_call *call, int status, const char *message)
{
    log_rpc(call, status, message);
    grpc_call_finish(call->gc, status, message);
    call_free(call);
}

int cri_send(struct cri_call *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    _cleanup_free_ uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return -ENOMEM;
    protobuf_c_message_pack(msg, data);
    return grpc_call_send(call->gc, data, len);
}

void cri_reply(struct cri_call *call, const ProtobufCMessage *resp)
{
    int r = cri_send(call, resp);
    if (r < 0 && r != -ECANCELED) {
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "cannot send the response: %s",
                 strerror(-r));
        return;
    }
    cri_finish(call, GRPC_STATUS_OK, NULL);
}

void cri_fail(struct cri_call *call, int status, const char *fmt, ...)
{
    char msg[ERR_MSG_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cri_finish(call, status, msg);
}

void cri_fail_lookup(struct cri_call *call, const char *rpc, const char *what, const char *id,
                     bool ambiguous)
{
    cri_fail(call, ambiguous ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_NOT_FOUND,
             "%s%s%s `%.64s` %s", rpc ? rpc : "", rpc ? ": " : "", what, id,
             ambiguous ? "is an ambiguous prefix" : "not found");
}

void cri_fail_err(struct cri_call *call, const struct err *err)
{
    cri_finish(call, cri_status_from_errno(err->code), err_str(err));
}

static void dispatch(struct grpc_call *gc, const uint8_t *msg, size_t len, void *data)
{
    const struct cri_route *route = data;
    struct cri_call *call = calloc(1, sizeof(*call));
    if (!call) {
        grpc_call_finish(gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    call->cri = route->cri;
    call->gc = gc;
    call->route = route;
    call->start_ns = now_mono_ns();
    if (!route->fn) {
        cri_fail(call, GRPC_STATUS_UNIMPLEMENTED, "%s is not implemented by kinglet yet",
                 route->name);
        return;
    }
    call->req = protobuf_c_message_unpack(route->input, NULL, len, msg);
    if (!call->req) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s: cannot decode the message",
                 route->input->short_name);
        return;
    }
    struct cri *cri = call->cri;
    if (!cri->recovered && route->waits) {
        if (cri->pending_tail)
            cri->pending_tail->next = call;
        else
            cri->pending = call;
        cri->pending_tail = call;
        return;
    }
    route->fn(call);
}

void cri_recovered(struct cri *cri)
{
    cri->recovered = true;
    struct cri_call *call = cri->pending;
    cri->pending = cri->pending_tail = NULL;
    while (call) {
        struct cri_call *next = call->next;
        call->route->fn(call);
        call = next;
    }
}

/* RuntimeService calls about pods and containers wait for recovery at
 * start (it takes milliseconds): until then the records may not match what
 * runs. These answer at once. */
static bool route_waits(const ProtobufCServiceDescriptor *svc, const char *name)
{
    static const char *const at_once[] = {"Version", "Status", "RuntimeConfig",
                                          "UpdateRuntimeConfig", "GetContainerEvents"};
    if (svc != &runtime__v1__runtime_service__descriptor)
        return false;
    for (size_t i = 0; i < ARRAY_SIZE(at_once); i++)
        if (strcmp(name, at_once[i]) == 0)
            return false;
    return true;
}

/* kinglet's own image routes, /kinglet.v1.Images/NAME (image_private.c:
 * CRI has no import nor pull progress, and holds are the runtime's own
 * notion). */
static const struct {
    const char *name;
    void (*fn)(struct cri_call *);
    const ProtobufCMessageDescriptor *input;
} own_routes[] = {
    {"Import", cri_import_image, &runtime__v1__image_spec__descriptor},
    {"Hold", cri_hold_image, &runtime__v1__image_spec__descriptor},
    {"Release", cri_release_image, &runtime__v1__image_spec__descriptor},
    {"PullProgress", cri_pull_progress, &runtime__v1__pull_image_request__descriptor},
};

int cri_register(struct cri *cri, struct grpc_server *srv, struct err *err)
{
    size_t n = 0;
    for (size_t s = 0; s < ARRAY_SIZE(services); s++)
        n += services[s]->n_methods;
    cri->routes = calloc(n + ARRAY_SIZE(own_routes), sizeof(*cri->routes));
    if (!cri->routes)
        return err_set(err, ENOMEM, "routes");
    for (size_t s = 0; s < ARRAY_SIZE(services); s++) {
        const ProtobufCServiceDescriptor *svc = services[s];
        for (unsigned i = 0; i < svc->n_methods; i++) {
            struct cri_route *r = &cri->routes[cri->n_routes++];
            const ProtobufCMethodDescriptor *m = &svc->methods[i];
            snprintf(r->path, sizeof(r->path), "/%s/%s", svc->name, m->name);
            r->name = m->name;
            r->input = m->input;
            r->cri = cri;
            r->waits = route_waits(svc, m->name);
            for (size_t h = 0; h < ARRAY_SIZE(handlers); h++)
                if (strcmp(handlers[h].name, m->name) == 0)
                    r->fn = handlers[h].fn;
            int rc = grpc_server_add_method(srv, r->path, dispatch, r);
            if (rc < 0)
                return err_set(err, -rc, "register `%s`", r->path);
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(own_routes); i++) {
        struct cri_route *r = &cri->routes[cri->n_routes++];
        snprintf(r->path, sizeof(r->path), "/kinglet.v1.Images/%s", own_routes[i].name);
        r->name = own_routes[i].name;
        r->input = own_routes[i].input;
        r->fn = own_routes[i].fn;
        r->cri = cri;
        int rc = grpc_server_add_method(srv, r->path, dispatch, r);
        if (rc < 0)
            return err_set(err, -rc, "register `%s`", r->path);
    }
    return 0;
}

int cri_new(uv_loop_t *loop, const struct cri_config *cfg, struct cri **ret, struct err *err)
{
    struct cri *cri = calloc(1, sizeof(*cri));
    if (!cri)
        return err_set(err, ENOMEM, "cri");
    cri->loop = loop;
    cri->pod_stop_grace_s = cfg->pod_stop_grace_s ? cfg->pod_stop_grace_s : 10;
    cri->socket_path = strdup(cfg->socket_path);
    cri->root_dir = strdup(cfg->root_dir);
    cri->state_dir = strdup(cfg->state_dir);
    cri->cdi_spec_dirs = strdup(cfg->cdi_spec_dirs ? cfg->cdi_spec_dirs : "");
    int r = cri_events_new(&cri->events);
    if (r < 0 || !cri->socket_path || !cri->root_dir || !cri->state_dir || !cri->cdi_spec_dirs) {
        cri_free(cri);
        return err_set(err, ENOMEM, "cri");
    }
    r = cri_runtime_config_load(cri, err);
    if (r < 0) {
        cri_free(cri);
        return r;
    }
    /* ImageFsInfo reports it as the container filesystem, and kubelet's
     * cadvisor looks the mountpoint up: it must exist */
    if (asprintf(&cri->containers_dir, "%s/containers", cri->root_dir) < 0) {
        cri->containers_dir = NULL;
        cri_free(cri);
        return err_set(err, ENOMEM, "cri");
    }
    if (mkdir(cri->containers_dir, 0711) < 0 && errno != EEXIST) {
        r = err_set(err, errno, "create `%s`", cri->containers_dir);
        cri_free(cri);
        return r;
    }
    r = cri_sandboxes_init(cri, cfg, err);
    if (r < 0) {
        err_wrap(err, "pod sandboxes");
        cri_free(cri);
        return r;
    }
    r = cri_containers_init(cri, err);
    if (r < 0) {
        err_wrap(err, "containers");
        cri_free(cri);
        return r;
    }
    struct image_config icfg = cfg->image ? *cfg->image : (struct image_config){0};
    icfg.root = cfg->root_dir;
    r = image_service_new(loop, &icfg, &cri->images, err);
    if (r < 0) {
        err_wrap(err, "image service");
        cri_free(cri);
        return r;
    }
    r = stream_server_start(loop, cfg->stream_address ? cfg->stream_address : "127.0.0.1:0",
                            cfg->stream_tls_cert, cfg->stream_tls_key, &cri->streams, err);
    if (r < 0) {
        cri_free(cri);
        return r;
    }
    cri_sandboxes_start(cri);
    *ret = cri;
    return 0;
}

void cri_shutdown(struct cri *cri)
{
    /* Calls still waiting for recovery end now. */
    struct cri_call *call = cri->pending;
    cri->pending = cri->pending_tail = NULL;
    while (call) {
        struct cri_call *next = call->next;
        cri_fail(call, GRPC_STATUS_UNAVAILABLE, "kinglet is shutting down");
        call = next;
    }
    cri_runtime_config_shutdown(cri);
    cri_events_shutdown(cri->events);
    /* streaming sessions end (their exec commands are killed) */
    stream_server_close(cri->streams);
    cri->streams = NULL;
    /* pulls in flight end now (their calls fail CANCELLED) */
    image_service_free(cri->images);
    cri->images = NULL;
}

void cri_free(struct cri *cri)
{
    if (!cri)
        return;
    cri_events_free(cri->events);
    stream_server_close(cri->streams);
    image_service_free(cri->images);
    cri_containers_free(cri);
    cri_sandboxes_free(cri);
    net_pod_teardown_wait(); /* background teardowns of stopped pods */
    free(cri->routes);
    free(cri->socket_path);
    free(cri->root_dir);
    free(cri->state_dir);
    free(cri->cdi_spec_dirs);
    free(cri->containers_dir);
    free(cri->pod_cidr);
    free(cri->cgroup2_mount);
    free(cri->cgroup2_controllers);
    free(cri->cgroup2_missing);
    free(cri->limits_unenforced);
    free(cri);
}
