/* Private to src/cri: the in-memory containers and what the container RPC
 * files share.
 *
 * Threads: a `struct container` belongs to the loop thread. Work queued to
 * the thread pool never sees it: it gets a `struct ctr_job` holding copies
 * of what it needs (ids, paths, a record to write) and fills the job's
 * result fields; the after-work callback, on the loop, applies the result
 * to the container (or, for a create, makes the container and links it).
 * So a list, a filter or a lookup on the loop can never meet a container
 * half-made by a worker.
 *
 * Operations on one container (start, stop, remove, update, reopen) run one
 * at a time through its queue; operations on different containers run
 * concurrently. Status and list calls answer from memory.
 *
 * On disk:
 *   <root>/containers/<id>.json   the record (store/container.c)
 *   <root>/containers/<id>/       upper/ and work/: the writable layer,
 *                                 kept across reboots until removal
 *   <state>/containers/<id>/      the OCI bundle: config.json, rootfs/
 *                                 (the overlay mount point) and
 *                                 imagevols/<k> (image volumes' mounts)
 *   <state>/oci/<id>/             the executor's state (src/oci)
 */
#pragma once

#include "cri/sandbox.h"
#include "store/store.h"

/* ---- a per-object operation queue ---- */

typedef void (*opq_fn)(void *data, void *obj);
struct opq_waiter {
    struct opq_waiter *next;
    void *data;
    opq_fn fn;
};
struct opq {
    bool busy;
    struct opq_waiter *head, *tail;
};
/* Runs fn(data, obj) now, or once the operations queued before it ended;
 * -ENOMEM (fn never runs). */
int opq_begin(struct opq *q, void *data, opq_fn fn, void *obj);
/* The same for an RPC: out of memory fails the call. */
void opq_begin_call(struct opq *q, struct cri_call *call, opq_fn fn, void *obj);
/* Ends the current operation and starts the next one. With gone, the object
 * is no more: every queued operation runs with obj NULL (and must act as for
 * a missing object); the caller frees the object afterwards. */
void opq_end(struct opq *q, void *obj, bool gone);

/* ---- containers ---- */

struct ctr_stop;
struct container;
typedef void (*ctr_saved_fn)(struct container *c, void *data);

struct container {
    struct container *prev, *next;
    struct cri *cri;
    struct store_container rec;
    Runtime__V1__ContainerConfig *config;            /* unpacked rec.config */
    Runtime__V1__LinuxContainerResources *resources; /* rec.resources, NULL: the config's */
    struct opq ops;
    /* While the container runs: a pidfd of its monitor, watched on the
     * loop; the monitor exits once the exit record is on disk. */
    int monitor_fd;
    uv_poll_t *watch;
    pid_t pid;         /* the container's init, 0 when not running */
    bool exit_reading; /* the exit record is being read */
    /* StartContainer is between its job and its STARTED event: an exit
     * read meanwhile is applied (and STOPPED published) only after it,
     * so every subscriber sees the states in the order they happened */
    bool starting, exit_deferred;
    bool saving, save_again; /* container_save */
    /* stats.c: the previous CPU sample and the cached writable layer
     * usage */
    uint64_t cpu_prev_ns, cpu_prev_ts;
    uint64_t du_bytes, du_inodes, du_ns;
    ctr_saved_fn on_saved; /* container_when_saved */
    void *on_saved_data;
    struct ctr_stop *stops; /* StopContainer calls waiting for the exit */
};

struct containers {
    struct container *head;
    size_t n;
    char *records_dir; /* <root>/containers (also the writable layers) */
    char *bundles_dir; /* <state>/containers */
    char *oci_root;    /* <state>/oci */
    /* Records found at start but not loaded (unreadable): whatever they
     * name (image holds, bundle, writable layer) stays, as theirs. */
    char **unloaded;
    size_t n_unloaded;
    /* CreateContainer calls in flight, by (pod, name, attempt): a second
     * one with the same metadata is refused before its work starts. */
    struct ctr_pending *pending;
    struct cri_cursor *cursors; /* of list streams, moved on by unlink */
};

int cri_containers_init(struct cri *cri, struct err *err);
/* Off the loop: removes what creations cut short left behind, re-watches
 * running containers and reads the exit of those that ended meanwhile. */
void cri_containers_start(struct cri *cri);
/* Recovery is over (sandbox.c): the calls that waited for it run. */
void cri_containers_started(struct cri *cri);
void cri_containers_free(struct cri *cri);

struct container *container_find(struct cri *cri, const char *id_or_prefix, bool *ret_ambiguous);
struct container *container_find_exact(struct cri *cri, const char *id);
/* container_find for an RPC that needs the container: NULL once the call has
 * failed with NOT_FOUND (INVALID_ARGUMENT for an ambiguous prefix), the
 * message opened by rpc ("PortForward: ") when not NULL. */
struct container *container_find_or_fail(struct cri_call *call, const char *rpc, const char *id);
/* A deep copy of a record, for a worker; -ENOMEM. */
int container_rec_copy(const struct store_container *src, struct store_container *dst);
void container_link(struct cri *cri, struct container *c);
void container_unlink_free(struct cri *cri, struct container *c);
/* Removes what a container leaves on the node but its record and log: the
 * executor's state (killing what still runs), the rootfs mount, the bundle
 * and the writable layer. Idempotent. Blocking: workers only. */
int container_remains_remove(const char *oci_root, const char *bundles_dir, const char *records_dir,
                             const char *id, struct err *err);
/* The overlay mounts (container_mounts.c; blocking: workers only). */
#define CTR_LAYERS_MAX 256
/* A pod with a user namespace of its own: the image's layers through
 * idmapped mounts of userns (an fd of it), so no file of theirs is chowned
 * or copied; the writable layer as it is, its (empty) upper directory
 * owned by the pod's root (root_uid, root_gid on the host; unused without
 * a writable layer). */
struct ctr_overlay_idmap {
    int userns;
    uid_t root_uid;
    gid_t root_gid;
};
/* Mounts lowers (snapshot directories, bottom layer first) at target:
 * under the writable layer's upper/ and work/ when layer is set, else
 * read-only (a one-layer image: a read-only bind of its layer). idmap
 * NULL: the layers as they are. */
int ctr_overlay_mount(char *const *lowers, size_t n, const char *layer, const char *target,
                      const struct ctr_overlay_idmap *idmap, struct err *err);
/* Mounts the image volume of the config's mount k read-only below the
 * bundle and gives the host path to bind into the container (its
 * sub path, resolved inside the image); userns >= 0: the pod's user
 * namespace, through which its layers are idmapped. -ENOENT for a sub path that does
 * not exist, -EINVAL for one that leads out of the image. */
int ctr_imagevol_mount(const char *bundle, size_t k, char *const *lowers, size_t n, const char *sub,
                       int userns, char **ret_source, struct err *err);
/* Unmounts a bundle's image volumes; idempotent. */
int ctr_imagevols_unmount(const char *bundle, struct err *err);
/* Saves c's record (off the loop): one write at a time per container, the
 * latest state wins. */
void container_save(struct cri *cri, struct container *c);
/* Runs fn(c, data) once no save of c is in flight (at once when none is):
 * what the record says is then on disk. One waiter at a time: only the
 * holder of c's operation queue waits. */
void container_when_saved(struct container *c, ctr_saved_fn fn, void *data);
/* StartContainer's part of c's ordering (see `starting`): begin before
 * the start job; end once the start's event is published, which applies an
 * exit read meanwhile. */
void container_start_begin(struct container *c);
void container_start_end(struct cri *cri, struct container *c);
/* Starts watching the monitor (fd is taken). */
void container_watch(struct cri *cri, struct container *c, int monitor_fd, pid_t pid);
Runtime__V1__ContainerState container_state(const struct container *c);
/* The pod a container belongs to, or NULL once the pod is gone. */
struct sandbox *container_pod(struct cri *cri, const struct container *c);
void container_dirs(struct cri *cri, const char *id, char *bundle, size_t bsize, char *layer,
                    size_t lsize);
/* Publishes a container event with the pod's status and its containers'. */
void container_event(struct cri *cri, const struct container *c,
                     Runtime__V1__ContainerEventType type);

/* Stops c: its stop signal, then SIGKILL after timeout_s (0: SIGKILL at
 * once); done(data, c, ...) runs once it has exited (r 0), or with an
 * error. Stopping a container that does not run is done at once. Used by
 * StopContainer, RemoveContainer and StopPodSandbox; it does not touch the
 * container's operation queue. */
typedef void (*ctr_stopped_fn)(void *data, struct container *c, int r, const struct err *err);
void container_stop(struct cri *cri, struct container *c, int64_t timeout_s, ctr_stopped_fn done,
                    void *data);
/* Removes c, killing it first if it runs: everything but its log file,
 * the record last, then its hold on the image. Call it holding c's
 * operation queue: it ends that operation itself and, once c is removed,
 * frees c. done(data, r, err) runs at the end. */
typedef void (*ctr_done_fn)(void *data, int r, const struct err *err);
void container_remove(struct cri *cri, struct container *c, ctr_done_fn done, void *data);
/* Stops (each with its stop signal, SIGKILL after grace_s) or removes every
 * container of a pod; done runs once all are done, with the first error. */
void container_sweep_pod(struct cri *cri, const char *pod_id, bool remove, int64_t grace_s,
                         ctr_done_fn done, void *data);
/* The container has exited (r 0) or cannot be stopped (r < 0): every stop
 * waiting on it ends (container_stop.c). */
void container_stops_done(struct container *c, int r, const struct err *err);

/* A ContainerStatus message pointing into c (valid while c is unchanged). */
struct ctr_status_scratch {
    Runtime__V1__ContainerStatus st;
    Runtime__V1__ImageSpec image;
    Runtime__V1__ContainerResources res;
    Runtime__V1__ContainerUser user;
    Runtime__V1__LinuxContainerUser luser;
    int64_t groups[STORE_CTR_GROUPS_MAX];
    size_t n_groups;
};
void container_status_fill(struct cri *cri, const struct container *c,
                           struct ctr_status_scratch *s);
/* The statuses of a pod's containers (for PodSandboxStatus and events). */
struct ctr_statuses {
    struct ctr_status_scratch *s;
    Runtime__V1__ContainerStatus **ptrs;
    size_t n;
};
int container_statuses_of_pod(struct cri *cri, const char *pod_id, struct ctr_statuses *ret);
void container_statuses_clear(struct ctr_statuses *cs);
/* The CRI Signal enum and Linux signal numbers (container_status.c):
 * from_enum gives 0 for RUNTIME_DEFAULT and -EINVAL for an unknown value;
 * to_enum gives 0 for a signal the enum lacks. */
int cri_signal_from_enum(int e);
int cri_signal_to_enum(int sig);

/* Handlers. */
void cri_create_container(struct cri_call *call);             /* container_create.c */
void cri_start_container(struct cri_call *call);              /* container_start.c */
void cri_stop_container(struct cri_call *call);               /* container_stop.c */
void cri_remove_container(struct cri_call *call);             /* container_stop.c */
void cri_container_status(struct cri_call *call);             /* container_status.c */
void cri_list_containers(struct cri_call *call);              /* container_status.c */
void cri_stream_containers(struct cri_call *call);            /* container_status.c */
void cri_update_container_resources(struct cri_call *call);   /* container_update.c */
void cri_reopen_container_log(struct cri_call *call);         /* container_log.c */
void cri_exec_sync(struct cri_call *call);                    /* container_exec.c */
void cri_exec(struct cri_call *call);                         /* streaming.c */
void cri_attach(struct cri_call *call);                       /* streaming.c */
void cri_port_forward(struct cri_call *call);                 /* streaming.c */
void cri_update_pod_sandbox_resources(struct cri_call *call); /* container_update.c */
void cri_checkpoint_container(struct cri_call *call);         /* container_checkpoint.c */
void cri_container_stats(struct cri_call *call);              /* stats.c */
void cri_list_container_stats(struct cri_call *call);
void cri_stream_container_stats(struct cri_call *call);
void cri_pod_sandbox_stats(struct cri_call *call);
void cri_list_pod_sandbox_stats(struct cri_call *call);
void cri_stream_pod_sandbox_stats(struct cri_call *call);
void cri_list_metric_descriptors(struct cri_call *call);
void cri_list_pod_sandbox_metrics(struct cri_call *call);
void cri_stream_pod_sandbox_metrics(struct cri_call *call);
