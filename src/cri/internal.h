/* Private to src/cri: the handler convention.
 *
 * A handler receives a decoded request in call->req and ends the call
 * exactly once with cri_reply() (OK + response message) or cri_fail*(),
 * at once or later from an after-work callback on the loop. Handlers run on
 * the loop thread: blocking work goes to the thread pool (uv_queue_work). */
#pragma once

#include <protobuf-c/protobuf-c.h>

#include "api.pb-c.h"
#include "cri/cri.h"
#include "image/image.h"

struct cri_call;
typedef void (*cri_handler_fn)(struct cri_call *call);

struct cri_route {
    char path[128];
    const char *name; /* "Version" */
    const ProtobufCMessageDescriptor *input;
    cri_handler_fn fn; /* NULL: not implemented yet */
    struct cri *cri;
    bool waits; /* for recovery at start */
};

struct cri_call {
    struct cri_call *next; /* waiting for recovery */
    struct cri *cri;
    struct grpc_call *gc;
    const struct cri_route *route;
    ProtobufCMessage *req;
    uint64_t start_ns;
    void *data; /* the handler's */
};

struct cri_events;
struct fs_walk;
struct stats_job;

struct cri {
    uv_loop_t *loop;
    char *socket_path;
    char *root_dir;
    char *state_dir;
    char *containers_dir; /* <root>/containers: containers' writable layers */
    char *cdi_spec_dirs;  /* comma-separated; "": none */
    struct cri_route *routes;
    size_t n_routes;
    char *pod_cidr; /* from UpdateRuntimeConfig, persisted */
    /* runtime_config.c: saves of the pod CIDR, one at a time in arrival
     * order, so that the file on disk ends as the CIDR in use */
    struct cfg_save *cfg_saves, *cfg_saves_tail;
    bool cfg_saving;
    char *cgroup2_mount;
    char *cgroup2_controllers; /* space-separated, as the kernel lists them */
    char *cgroup2_missing;     /* the ones container limits need that it lacks */
    char *limits_unenforced;   /* why limits are not enforced (logged, and in Status); NULL */
    bool host_rro;             /* mount_setattr: recursive read-only binds (at start) */
    bool host_userns;          /* pods with user namespaces can run here (at start) */
    struct cri_events *events;
    struct image_service *images;
    struct sandboxes *sandboxes;   /* sandbox.h */
    struct containers *containers; /* containers.h */
    int64_t pod_stop_grace_s;      /* StopPodSandbox: the containers' grace period */
    /* RuntimeService calls that arrive before recovery is over wait for it
     * (service.c) */
    bool recovered;
    struct cri_call *pending, *pending_tail;
    struct fs_walk *fs_walk; /* image_fs_info.c: the walk in progress */
    /* stats.c: one stats job in the thread pool at a time; later ones wait
     * here, in arrival order */
    bool stats_busy;
    struct stats_job *stats_waiting, *stats_waiting_tail;
    struct stream_server *streams; /* streaming.c: exec, attach, port-forward */
};

/* The pod's cgroup parent (kubelet's pod cgroup), below the cgroup2 mount
 * ("/kubepods/pod1"), from the absolute path of the sandbox's own cgroup
 * (a child of it), rewritten in place; false if the path is not below the
 * mount. */
bool cri_cgroup_parent_of(struct cri *cri, char *sandbox_cgroup);

/* Recovery at start is over: the RuntimeService calls that waited run. */
void cri_recovered(struct cri *cri);

void cri_reply(struct cri_call *call, const ProtobufCMessage *resp);
void cri_fail(struct cri_call *call, int status, const char *fmt, ...) _printf_(3, 4);
/* Maps err->code to a status (the one place that does). */
void cri_fail_err(struct cri_call *call, const struct err *err);
/* A lookup by id or prefix found nothing: NOT_FOUND ("container `ID` not
 * found", what = "container"), INVALID_ARGUMENT for an ambiguous prefix;
 * rpc ("PortForward") opens the message when not NULL. */
void cri_fail_lookup(struct cri_call *call, const char *rpc, const char *what, const char *id,
                     bool ambiguous);
int cri_status_from_errno(int code);
/* Streaming: one response message; -ECANCELED once the call is over. */
int cri_send(struct cri_call *call, const ProtobufCMessage *msg);
/* Streaming: ends the call with status. */
void cri_finish(struct cri_call *call, int status, const char *message);

/* ---- list streams (list_stream.c) ---- */

/* A position in a list of the loop (containers, sandboxes) that survives
 * removals: the list's unlink moves every cursor at the removed element to
 * the next one (cri_cursors_skip). */
struct cri_cursor {
    struct cri_cursor *prev, *next;
    void *at; /* the next element to look at, NULL: the end */
};
void cri_cursor_open(struct cri_cursor **head, struct cri_cursor *cur, void *at);
void cri_cursor_close(struct cri_cursor **head, struct cri_cursor *cur);
void cri_cursors_skip(struct cri_cursor *head, const void *gone, void *next);

/* Bounds of one chunk of a list stream. */
#define LIST_CHUNK_ITEMS 256
#define LIST_CHUNK_BYTES (1u << 20)
#define LIST_ASYNC       1

/* One streaming list call. The family's handler allocates it (its own
 * state after it), sets fill and release, and calls list_stream_start(),
 * which owns it from then on. fill packs the next chunk into `chunk`
 * (list_stream_pack) and sets done with the last one (a chunk may be
 * empty); it returns 0, LIST_ASYNC when it went off the loop (it then calls
 * list_stream_resume() on the loop), or -errno to end the call with that
 * error. release frees the family's state (cursors closed, jobs are not in
 * flight then). */
struct list_stream {
    struct cri_call *call;
    int (*fill)(struct list_stream *ls);
    void (*release)(struct list_stream *ls);
    struct buf chunk; /* packed, not yet sent */
    bool done;        /* the last chunk is made */
    bool busy;        /* in the pump or off the loop: a cancel waits for it */
    bool cancelled;
    size_t sent; /* chunks */
};
void list_stream_start(struct cri_call *call, struct list_stream *ls);
void list_stream_resume(struct list_stream *ls, int r);
/* Packs msg as the next chunk: 0, -ENOMEM, -EFBIG. */
int list_stream_pack(struct list_stream *ls, const ProtobufCMessage *msg);
/* Counts item into a chunk of `items` items and *bytes bytes: true when the
 * chunk is full with it. */
bool list_chunk_full(size_t items, size_t *bytes, const ProtobufCMessage *item);
/* The same for an item of about size bytes (packed). */
bool list_chunk_full_size(size_t items, size_t *bytes, size_t size);
/* Whether every key=value of a List filter's label selector is among an
 * object's labels. Both arrays are of protobuf-c map entries, which share
 * one layout ({base, key, value}) whatever their message: CRI_LABELS_MATCH
 * passes those of a config and a filter. */
bool cri_labels_match(const void *labels, size_t n, const void *sel, size_t n_sel);
#define CRI_LABELS_MATCH(config, filter)                                                           \
    cri_labels_match((config)->labels, (config)->n_labels, (filter)->label_selector,               \
                     (filter)->n_label_selector)

/* Handlers, one file per RPC or family. */
void cri_version(struct cri_call *call);        /* version.c */
void cri_status(struct cri_call *call);         /* runtime_config.c */
void cri_runtime_config(struct cri_call *call); /* runtime_config.c */
void cri_update_runtime_config(struct cri_call *call);
void cri_get_container_events(struct cri_call *call); /* events.c */
void cri_pull_image(struct cri_call *call);           /* image_pull.c */
/* The request's credentials, borrowed (a NULL config: none). */
void cri_image_auth(const Runtime__V1__AuthConfig *a, struct image_auth *ret);
void cri_image_status(struct cri_call *call);  /* image_status.c */
void cri_list_images(struct cri_call *call);   /* image_status.c */
void cri_stream_images(struct cri_call *call); /* image_status.c */
void cri_remove_image(struct cri_call *call);  /* image_remove.c */
void cri_image_fs_info(struct cri_call *call); /* image_fs_info.c */
void cri_import_image(struct cri_call *call);  /* image_private.c */
void cri_hold_image(struct cri_call *call);    /* image_private.c */
void cri_release_image(struct cri_call *call); /* image_private.c */
void cri_pull_progress(struct cri_call *call); /* image_private.c */
/* image_remove.c: ends an image operation whose answer is empty */
void cri_image_op_done(void *data, int r, const struct err *err);

/* runtime-config.json as read back at start: 0 with *ret_cidr (malloc'd,
 * a valid pod CIDR, possibly empty), -EBADMSG for anything else, -ENOMEM. */
int cri_runtime_config_parse(const char *text, size_t len, char **ret_cidr);
/* Fails the UpdateRuntimeConfig calls still queued (shutdown). */
void cri_runtime_config_shutdown(struct cri *cri);
/* resources.c: LinuxContainerResources as an OCI linux.resources object
 * (NULL: nothing set, or out of memory). */
struct json_t;
struct json_t *cri_resources_to_oci(const Runtime__V1__LinuxContainerResources *r);
int cri_runtime_config_load(struct cri *cri, struct err *err);
int cri_events_new(struct cri_events **ret);
void cri_events_shutdown(struct cri_events *ev);
void cri_events_free(struct cri_events *ev);
/* Sends an event to every subscriber (for the container lifecycle code). */
void cri_events_publish(struct cri *cri, const Runtime__V1__ContainerEventResponse *ev);
