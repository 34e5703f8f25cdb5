/* oci/internal.h: private to src/oci.
 *
 * The spec is parsed once (spec.c) into the structs below; the container
 * init (process.c) then runs through them in a fixed order. The JSON object
 * is kept for the parts handed whole to the cgroup and seccomp code. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "base/base.h"
#include "monitor/proto.h"
#include "oci/oci.h"

/* Limits on what a config.json may make us allocate or do. */
#define OCI_CONFIG_MAX (4u << 20)
#define OCI_LIST_MAX   4096
#define OCI_STR_MAX    65536

enum oci_ns_kind {
    OCI_NS_USER,
    OCI_NS_PID,
    OCI_NS_NET,
    OCI_NS_IPC,
    OCI_NS_UTS,
    OCI_NS_MOUNT,
    OCI_NS_CGROUP,
    OCI_NS_TIME,
    OCI_NS_COUNT
};

struct oci_ns {
    bool enabled;
    char *path; /* join this one instead of creating it */
};

struct oci_idmap {
    uint32_t container_id, host_id, size;
};

struct oci_mount {
    char *destination;
    char *source;
    char *type;
    unsigned long flags;       /* MS_* set */
    unsigned long clear;       /* MS_* explicitly cleared (rw, suid...) */
    unsigned long propagation; /* MS_PRIVATE... (with MS_REC for r-variants) */
    bool bind;
    bool idmap;
    bool rro;   /* "rro": read-only recursively (mount_setattr, Linux 5.12) */
    char *data; /* remaining filesystem options, comma-joined */
    /* The mount's own id mappings (OCI 1.1); without them an idmap mount
     * uses the container's user namespace. */
    struct oci_idmap *uid_maps, *gid_maps;
    size_t n_uid_maps, n_gid_maps;
};

struct oci_rlimit {
    int resource;
    rlim_t soft, hard;
};

struct oci_device {
    char *path;
    char type; /* c, b, u, p */
    int64_t major, minor;
    mode_t mode;
    bool has_mode;
    uid_t uid;
    gid_t gid;
    bool has_uid, has_gid;
};

enum oci_hook_kind {
    OCI_HOOK_PRESTART,
    OCI_HOOK_CREATE_RUNTIME,
    OCI_HOOK_CREATE_CONTAINER,
    OCI_HOOK_START_CONTAINER,
    OCI_HOOK_POSTSTART,
    OCI_HOOK_POSTSTOP,
    OCI_HOOK_COUNT
};

struct oci_hook {
    char *path;
    char **args; /* NULL-terminated; NULL means { path } */
    char **env;  /* NULL-terminated or NULL */
    int timeout; /* seconds; 0 = none */
};

struct oci_hooks {
    struct oci_hook *list[OCI_HOOK_COUNT];
    size_t n[OCI_HOOK_COUNT];
};

enum oci_cap_set {
    OCI_CAP_BOUNDING,
    OCI_CAP_EFFECTIVE,
    OCI_CAP_INHERITABLE,
    OCI_CAP_PERMITTED,
    OCI_CAP_AMBIENT,
    OCI_CAP_SETS
};

struct oci_process {
    bool terminal;
    unsigned cons_height, cons_width;
    char *cwd;
    char **args; /* NULL-terminated */
    char **env;  /* NULL-terminated */
    uid_t uid;
    gid_t gid;
    gid_t *gids;
    size_t n_gids;
    mode_t umask;
    bool has_umask;
    struct oci_rlimit *rlimits;
    size_t n_rlimits;
    bool has_caps;
    uint64_t caps[OCI_CAP_SETS];
    bool no_new_privileges;
    bool has_oom_score_adj;
    int oom_score_adj;
    char *apparmor, *selinux_label;
};

struct oci_sysctl {
    char *key, *value;
};

struct oci_spec {
    json_t *json;    /* the whole document (owned) */
    char *root_path; /* absolute */
    bool root_readonly;
    char *hostname, *domainname;
    struct oci_process process;
    bool has_process;
    struct oci_mount *mounts;
    size_t n_mounts;
    struct oci_ns ns[OCI_NS_COUNT];
    struct oci_idmap *uid_maps, *gid_maps;
    size_t n_uid_maps, n_gid_maps;
    struct oci_device *devices;
    size_t n_devices;
    struct oci_sysctl *sysctl;
    size_t n_sysctl;
    char **masked_paths;
    size_t n_masked;
    char **readonly_paths;
    size_t n_readonly;
    unsigned long rootfs_propagation; /* 0 = default (MS_REC|MS_SLAVE) */
    char *cgroups_path;
    json_t *resources; /* borrowed from json */
    json_t *seccomp;   /* borrowed from json */
    json_t *annotations;
    /* linux.timeOffsets for a new time namespace. */
    bool has_time_offsets;
    int64_t boottime_secs, monotonic_secs;
    uint32_t boottime_nsecs, monotonic_nsecs;
    bool has_personality;
    unsigned long personality;
    struct oci_hooks hooks;
};

/* spec.c */
/* Parses a config.json document. bundle makes root.path absolute. Errors
 * name the field: "`process.args`: expected a non-empty array". */
int oci_spec_parse(const char *data, size_t len, const char *bundle, struct oci_spec **ret,
                   struct err *err);
/* Whether the init must stop for the parent before pivot_root: prestart,
 * createRuntime (run by the parent), createContainer or startContainer
 * (which need the host pid). */
bool oci_spec_needs_hook_sync(const struct oci_spec *spec);
int oci_spec_load(const char *bundle, struct oci_spec **ret, char **ret_raw, size_t *ret_len,
                  struct err *err);
void oci_spec_free(struct oci_spec *spec);
void oci_spec_freep(struct oci_spec **spec);
/* A `process` object alone (exec --process); same field names. */
int oci_process_parse(json_t *obj, const char *field, struct oci_process *ret, struct err *err);
void oci_process_clear(struct oci_process *p);
/* The default config.json (`kinglet oci spec`). */
json_t *oci_spec_default(bool rootless);
int oci_cap_parse(const char *name, int *ret);
const char *oci_ns_name(enum oci_ns_kind k);
int oci_ns_clone_flag(enum oci_ns_kind k);
/* Parses a mount option list into m (flags, propagation, data). */
int oci_mount_options_parse(json_t *options, struct oci_mount *m, const char *field,
                            struct err *err);

/* state.c: the per-container state directory <root>/<id>/. */
struct oci_record {
    char id[256];
    char bundle[4096];
    char cgroup[4096];
    pid_t pid;
    uint64_t pid_start; /* /proc/PID/stat starttime, against pid reuse */
    pid_t monitor;
    uint64_t monitor_start;
    uint64_t created_ns;
    bool creating;          /* written before the init is ready */
    char *annotations_json; /* malloc'd or NULL */
};
int oci_id_validate(const char *id, struct err *err);
int oci_state_dir_open(const char *root, const char *id, int *ret_fd, struct err *err);
/* The kernel's PID_MAX_LIMIT: no pid is larger. */
#define OCI_PID_MAX 4194304
/* state.json as text (malloc'd) and back. The parse refuses what no
 * create writes, as a corrupt record (-EINVAL): a missing or mistyped field,
 * an invalid id, a relative path or one with `..`, a pid outside
 * [0, OCI_PID_MAX] (so a record can never make us signal pid -1 or a wrapped
 * pid), negative times, annotations that are not an object; -ENOMEM. */
int oci_record_format(const struct oci_record *rec, char **ret, struct err *err);
int oci_record_parse(const char *data, size_t len, struct oci_record *rec, struct err *err);
int oci_record_write(int dirfd, const struct oci_record *rec, struct err *err);
int oci_record_read(int dirfd, struct oci_record *rec, struct err *err);
void oci_record_clear(struct oci_record *rec);
/* Status from the record, the exit file, the process and the fifo. */
enum oci_status oci_status_get(int dirfd, const struct oci_record *rec);
const char *oci_status_name(enum oci_status s);

/* Exit record written by the monitor (exit.json). */
struct oci_exit {
    int exit_code; /* shell convention: 128+signal when signaled */
    int signal;
    uint64_t started_ns, finished_ns;
    bool oom_killed;
};
int oci_exit_read(int dirfd, struct oci_exit *ret);

/* ns.c */
int oci_ns_open_path(const char *path, enum oci_ns_kind k, struct err *err);
int oci_idmap_write(pid_t pid, const struct oci_spec *spec, struct err *err);
/* Clones the container's init (flags: clone3's) from inside the user
 * namespace at userns_path, as our child (see ns.c), into cgroup_fd's
 * cgroup if it can (*ret_in_cgroup says whether it did). 0 in the init,
 * its pid here, or -errno. */
pid_t oci_clone_in_userns(const char *userns_path, uint64_t flags, int cgroup_fd,
                          bool *ret_in_cgroup, struct err *err);
/* A user namespace with these mappings, held by an O_RDONLY fd (for
 * idmapped mounts); no process stays in it. */
int oci_userns_make(const struct oci_idmap *uid, size_t n_uid, const struct oci_idmap *gid,
                    size_t n_gid, const char *field, struct err *err);

/* mount.c */
/* Opens (creating what is missing, as a directory or as an empty file)
 * path inside the tree at rootfd without ever leaving it: every component
 * is resolved with openat2(RESOLVE_IN_ROOT). Returns an O_PATH fd. */
int oci_path_open_in_root(int rootfd, const char *path, bool create, bool as_dir, struct err *err);
/* idmap_fds[i]: a detached idmapped tree for mounts[i] (made by the
 * parent, see container.c), or -1. */
int oci_mounts_setup(const struct oci_spec *spec, int rootfd, const int *idmap_fds,
                     struct err *err);
int oci_mount_fd_remount(int fd, unsigned long flags, struct err *err);
/* Attaches the detached mount tree `tree` on dfd: per-mount flags (MS_RDONLY,
 * MS_NOSUID, ...; on every mount of the tree with rec) set before the
 * attach, propagation (MS_SHARED, ...) after, all through the tree's
 * descriptor and never a path resolved again. Without mount_setattr (Linux
 * < 5.12), a remount through /proc/self/fd/<tree>, not below the top. */
int oci_mount_tree_attach(int tree, int dfd, unsigned long flags, bool rec,
                          unsigned long propagation, struct err *err);
/* A new filesystem as a detached mount (fsopen/fsmount), to attach with
 * oci_mount_tree_attach: flags are MS_ flags, data the comma-separated
 * options. Returns the mount's fd. */
int oci_mount_fs_detached(const char *fstype, const char *source, unsigned long flags,
                          const char *data, struct err *err);
/* Opens rel (say "self/oom_score_adj") below the container's or the host's
 * /proc, checked to be the root of a procfs, without crossing a mount or
 * following a magic link: a write the runtime makes there cannot be sent
 * elsewhere by what the container mounted (CVE-2025-52881). */
int oci_proc_open(const char *rel, int flags, struct err *err);

/* apparmor.c: `exec PROFILE` to our attr/exec through oci_proc_open: the
 * next execve runs under the profile. -EINVAL without AppArmor. */
int oci_apparmor_exec(const char *profile, struct err *err);

/* devices.c */
int oci_dev_setup(const struct oci_spec *spec, int rootfd, bool in_userns, struct err *err);
int oci_dev_links(int rootfd, struct err *err);

/* rootfs.c */
/* root: the rootfs opened already (O_PATH, in our mount namespace), for a
 * process that could not look its path up; -1: by root.path. */
int oci_rootfs_prepare(const struct oci_spec *spec, int root, int *ret_rootfd, struct err *err);
int oci_rootfs_pivot(int rootfd, bool no_pivot, struct err *err);
int oci_rootfs_finalize(const struct oci_spec *spec, struct err *err);

/* caps.c */
int oci_caps_drop_bounding(const struct oci_process *p, struct err *err);
int oci_caps_apply(const struct oci_process *p, struct err *err);

/* process.c: the pieces of process setup shared by init and exec. */
int oci_process_rlimits(const struct oci_process *p, struct err *err);
int oci_process_oom_score_adj(const struct oci_process *p, struct err *err);
/* user, groups, caps, nnp, umask, cwd check, fds, seccomp, exec. Never
 * returns on success. */
int oci_process_exec(const struct oci_process *p, const char *path, json_t *seccomp,
                     int preserve_fds, int tty_slave, struct err *err);
/* Enters process.cwd (resolved in the current root) and checks that the
 * result is inside it. */
int oci_process_cwd(const struct oci_process *p, struct err *err);
/* Finds args[0] on the process's PATH; *ret is malloc'd. */
int oci_process_find(const struct oci_process *p, char **ret, struct err *err);
/* Clamps a negative oomScoreAdj the runtime may not set (no
 * CAP_SYS_RESOURCE) to the runtime's own value, with one warning. */
void oci_process_clamp_oom(struct oci_process *p);
/* Opens a pty in the container, sends the master over console_fd and
 * returns the slave. */
int oci_terminal_setup(const struct oci_process *p, int console_fd, int *ret_slave,
                       struct err *err);
/* One sendmsg of data with fd attached (SCM_RIGHTS); -errno. */
int oci_send_with_fd(int sock, const void *data, size_t len, int fd);
int oci_fd_send(int sock, int fd, struct err *err);
/* Receives one fd sent with oci_fd_send (close-on-exec); -EAGAIN with
 * nonblock when none is queued. */
int oci_fd_recv(int sock, bool nonblock, int *ret_fd);

/* exec.c: the recipe of p for kinglet-enter (enter/proto.h): the header
 * and the body (appended), with seccomp compiled to BPF. Errors: those of
 * oci_seccomp_export (wrapped with `linux.seccomp`), E2BIG for a process
 * over the recipe's limits, ENOMEM. */
struct enter_recipe;
int oci_exec_recipe_build(const struct oci_process *p, json_t *seccomp, int nsflags, int preserve,
                          struct enter_recipe *h, struct buf *body, struct err *err);

/* hooks.c */
int oci_hooks_run(const struct oci_hook *hooks, size_t n, const char *state_json, const char *what,
                  struct err *err);
/* The same, ended early (-EINTR, the hook killed) when cancel_fd, a
 * signalfd, delivers a stop signal (oci_cancel_read); -1 for none. */
int oci_hooks_run_cancel(const struct oci_hook *hooks, size_t n, const char *state_json,
                         const char *what, int cancel_fd, struct err *err);
/* Reads one signal from the signalfd cancel_fd: -EINTR with the signal
 * named in err for SIGTERM, SIGINT, SIGHUP or SIGQUIT (stop waiting), 0
 * for any other (dropped) or when nothing could be read. */
int oci_cancel_read(int cancel_fd, struct err *err);

/* init.c: the container's init, in the cloned child. */
struct oci_init_args {
    const struct oci_spec *spec;
    const char *id;
    const char *bundle;
    int sync_fd;    /* socketpair end to the creating process */
    int fifo_fd;    /* exec.fifo (O_RDWR) or -1 for run */
    int console_fd; /* connected console socket or -1 */
    int exec_fd;    /* the monitor's pipe: one byte right before execve */
    int preserve_fds;
    bool joined_userns; /* userns joined by path: unshare the rest here */
    bool in_userns;     /* ... cloned in it already (oci_clone_in_userns) */
    bool no_pivot;      /* MS_MOVE + chroot instead of pivot_root */
    bool new_keyring;   /* a session keyring of its own, named after the id */
};
_Noreturn void oci_init_main(const struct oci_init_args *a);

/* sync messages between init and the creating process. */
enum oci_sync_type {
    OCI_SYNC_USERMAP = 1, /* init → parent: write my id maps */
    OCI_SYNC_HOOKS,       /* init → parent: run prestart/createRuntime */
    OCI_SYNC_READY,       /* init → parent: waiting for start */
    OCI_SYNC_ERROR,       /* init → parent: text follows */
    OCI_SYNC_ACK,         /* parent → init */
    OCI_SYNC_PID,         /* monitor → parent: init pid */
    OCI_SYNC_EXIT,        /* monitor → parent: exit status */
    OCI_SYNC_IDMAP,       /* parent → init: idmapped tree for mounts[value] */
};
struct oci_sync_msg {
    int type;
    int value;
    char text[ERR_MSG_MAX];
};
/* The monitor program (src/monitor) reports the exit with the head of this
 * message. */
_Static_assert(OCI_SYNC_EXIT == MONITOR_MSG_EXIT, "the monitor's exit message");
int oci_sync_send(int fd, int type, int value, const char *text);
/* The same with one file descriptor attached (SCM_RIGHTS). */
int oci_sync_send_fd(int sock, int type, int value, int fd);
/* Receives a message and the fd attached to it, if any (*ret_fd = -1). */
int oci_sync_recv_fd(int sock, struct oci_sync_msg *m, int *ret_fd);
/* A message, with the first fd it carries in *ret_fd (others closed; -1
 * when none, or ret_fd NULL: all closed) and the sending process in
 * *ret_from (0 when the kernel gave none: the socket needs SO_PASSCRED).
 * The exec's command holds its socket until its execve, and a container
 * granted CAP_SYS_PTRACE can make it send anything: the sender tells
 * kinglet-enter's messages. -errno, -EPIPE at EOF, -EPROTO when short. */
int oci_sync_recv_from(int sock, struct oci_sync_msg *m, int *ret_fd, pid_t *ret_from);
int oci_sync_recv(int fd, struct oci_sync_msg *m, int timeout_ms);
/* An error crosses a sync socket as OCI_SYNC_ERROR: its code in value
 * (with OCI_SYNC_NO_SYS when the message says it all), its message as
 * text, never the system's text: the receiver rebuilds the error object
 * (oci_sync_err) and shows that text once. */
#define OCI_SYNC_NO_SYS 0x10000
int oci_sync_send_err(int fd, const struct err *err);
/* The error of an OCI_SYNC_ERROR message, into err; returns -err->code. */
int oci_sync_err(const struct oci_sync_msg *m, struct err *err);

/* Raw syscalls glibc 2.36 lacks wrappers for. */
int oci_pivot_root(const char *new_root, const char *put_old);
