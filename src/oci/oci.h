/* oci: the in-tree OCI runtime (runtime-spec 1.2, Linux).
 *
 * Usable as a library by the CRI layer and as `kinglet oci ...`. Every call
 * blocks (forks, mounts, waits): call it from a child process or a worker,
 * never from the event loop. Containers live in <root>/<id>/ (root defaults
 * to OCI_ROOT_DEFAULT): state.json, config.json (a copy of the bundle's),
 * exit.json (written by the monitor, durable), exec.fifo (until start).
 *
 * Process tree of one container: the creating process forks the monitor
 * (a subreaper, detached into its own session); the monitor clones the
 * container init into the new namespaces; the init sets the container up,
 * reports back over a socketpair and waits on exec.fifo until `start`. The
 * monitor outlives the caller, reaps the init, writes exit.json
 * (write + fsync + rename) and exits.
 *
 * Errors: negative errno with an err object whose message names the field
 * or path at fault. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

#define OCI_ROOT_DEFAULT "/run/kinglet/oci"
#define OCI_VERSION      "1.2.0"

enum oci_status {
    OCI_STATUS_CREATING,
    OCI_STATUS_CREATED,
    OCI_STATUS_RUNNING,
    OCI_STATUS_PAUSED,
    OCI_STATUS_STOPPED
};

struct oci_create_opts {
    const char *root; /* NULL: OCI_ROOT_DEFAULT */
    const char *id;
    const char *bundle;         /* NULL: current directory */
    const char *pid_file;       /* NULL: none */
    const char *console_socket; /* needed when process.terminal is true */
    int preserve_fds;           /* fds 3..3+n-1 go to the container */
    bool no_pivot;              /* MS_MOVE + chroot instead of pivot_root */
    bool no_new_keyring;        /* keep the caller's session keyring */
    /* A CRI container (cri_log or cri_stdin): its stdout and stderr (or
     * its pty, when process.terminal is set: no console socket then) go to
     * the monitor, which writes them to cri_log in the CRI format (if
     * given) and to attached clients. With cri_stdin the container's stdin
     * is a pipe the monitor holds (else /dev/null); with cri_stdin_once the
     * monitor closes it when the first client that attached stdin
     * detaches. Neither: the container gets the caller's stdio. */
    const char *cri_log;
    bool cri_stdin, cri_stdin_once;
};

struct oci_state {
    char id[256];
    enum oci_status status;
    pid_t pid; /* 0 once stopped */
    char bundle[4096];
    uint64_t created_ns;
    /* Set once stopped (from the monitor's exit record). */
    bool exited;
    int exit_code;
    int exit_signal;
    bool oom_killed;
    uint64_t started_ns, finished_ns;
    char *annotations_json; /* malloc'd JSON object or NULL */
};

/* Creates the container; it waits for oci_container_start(). */
int oci_container_create(const struct oci_create_opts *opts, struct err *err);
int oci_container_start(const char *root, const char *id, struct err *err);
/* create + start; without detach waits and sets *ret_status to the shell
 * exit status of the container (128+signal when killed), then deletes it. */
int oci_container_run(const struct oci_create_opts *opts, bool detach, int *ret_status,
                      struct err *err);
int oci_container_state(const char *root, const char *id, struct oci_state *ret, struct err *err);
void oci_state_clear(struct oci_state *s);
/* The OCI state JSON document (malloc'd, NUL-terminated). */
int oci_state_to_json(const struct oci_state *s, char **ret, struct err *err);
/* A pidfd (close-on-exec) of the container's monitor while it lives (the
 * monitor exits once the exit record is written), and the init's pid.
 * -ENOENT: no such container; -ESRCH: the monitor is gone. */
int oci_container_monitor(const char *root, const char *id, pid_t *ret_init, struct err *err);
/* Signal the init, or with all every process of the container. */
int oci_container_kill(const char *root, const char *id, int sig, bool all, struct err *err);
/* Removes a stopped (or created) container; force kills a running one.
 * Idempotent on a missing container only with force. */
int oci_container_delete(const char *root, const char *id, bool force, struct err *err);
/* ids in root, malloc'd array of malloc'd strings. */
int oci_container_list(const char *root, char ***ret, size_t *ret_n, struct err *err);
int oci_container_pause(const char *root, const char *id, bool pause, struct err *err);
/* linux.resources JSON text. */
int oci_container_update(const char *root, const char *id, const char *resources_json,
                         struct err *err);
int oci_container_pids(const char *root, const char *id, pid_t **ret, size_t *ret_n,
                       struct err *err);

struct oci_exec_opts {
    const char *root;
    const char *id;
    const char *process_json; /* a process object (text) or NULL */
    char *const *args;        /* used when process_json is NULL */
    bool tty;
    bool detach;
    const char *pid_file;
    int pid_fd;     /* the process's pid, as text, is written here and the fd closed; -1 */
    int console_fd; /* a connected socket to send the terminal's master over; -1 */
    const char *console_socket;
    const char *cwd;  /* overrides, may be NULL */
    char *const *env; /* extra KEY=VALUE, NULL-terminated, may be NULL */
    const char *user; /* "uid[:gid]" or NULL */
    int preserve_fds;
    /* From a threaded daemon rather than the CLI: the process is given
     * stdio (/dev/null for what is not), never the caller's own; it takes
     * console_fd, closed on every path; it implies detach. oci_exec
     * returns once kinglet-enter has named the command, before its execve
     * (which a process of the container allowed to trace it can put off
     * for good): *ret_pidfd is the command's pidfd, a child of the caller
     * to reap, and *ret_sync the socket the rest of its start comes over,
     * for oci_exec_result once the command has ended. Either way the
     * process is started by kinglet-enter (src/enter, see exec.c), cloned
     * from the calling thread into the container's cgroup with every
     * signal blocked: no copy of the caller enters the container, and the
     * command is the caller's own child. */
    bool in_process;
    int *ret_pidfd, *ret_sync; /* in_process; -1 when none */
    const int *stdio;          /* in_process: the process's stdin, stdout, stderr (-1: /dev/null) */
};
/* Runs a process in the container; without detach waits for it and sets
 * *ret_status. When the process cannot be started (its program is missing
 * or cannot be executed), fails with *ret_status set to 127 or 126 (in
 * process, *ret_pidfd is set still when the command is there to reap).
 * Never outside the container's cgroup: a process that cannot be cloned
 * into it fails the exec (EAGAIN at its pids.max, the error naming the
 * cgroup). */
int oci_exec(const struct oci_exec_opts *opts, int *ret_status, struct err *err);
/* Whether an in_process command (container id) ran, read from its
 * *ret_sync once it has ended (its pidfd readable): 0 when it reached its
 * execve, else 127 or 126 with err saying why it could not run, as
 * oci_exec. Never blocks. */
int oci_exec_result(int sync, const char *id, struct err *err);

/* `kinglet oci ...` command line (argv[0] is "oci"); returns the process
 * exit status. full_argv is the whole command line: create, run and exec
 * execute it again from a sealed view of the binary (exe_reexec_sealed). */
int oci_cli_main(int argc, char **argv, char **full_argv);

/* Whether a path has no ".." component (what the executor requires of
 * paths it resolves inside the container). */
bool oci_path_is_clean(const char *p);

/* Where a mount destination (an absolute path, taken lexically: "." and
 * ".." folded) lies with respect to /proc. As runc since CVE-2019-19921:
 * nothing may be mounted inside /proc but procfs itself on /proc and the
 * few files lxcfs emulates (and ns_last_pid, for CRIU). */
enum oci_proc_place {
    OCI_PROC_OUTSIDE,
    OCI_PROC_ROOT,    /* /proc itself: a procfs only */
    OCI_PROC_ALLOWED, /* /proc/cpuinfo, /proc/meminfo, ... */
    OCI_PROC_REFUSED, /* anything else inside /proc */
};
enum oci_proc_place oci_mount_proc_place(const char *dest);
/* -EINVAL, naming dest, for a mount the executor refuses there:
 * OCI_PROC_REFUSED, or something other than a procfs or a bind on /proc
 * (a bind's source is checked to be procfs when it is mounted). */
int oci_mount_destination_check(const char *dest, const char *type, bool bind, struct err *err);

/* Whether a config.json would be taken by the executor (pure: parses and
 * forgets); -EINVAL naming the field, -E2BIG, -ENOMEM. */
int oci_spec_check(const char *data, size_t len, struct err *err);

/* A signal by name (SIGTERM, TERM, RTMIN+3, any case) or number; -EINVAL. */
int oci_signal_parse(const char *s, int *ret);

/* ---- AppArmor (apparmor.c) ----------------------------------------------
 * process.apparmorProfile is switched to at the container's execve and at
 * every exec's. The default profile is the runtime default CRI asks for. */
#define OCI_APPARMOR_DEFAULT  "kinglet-default"
#define OCI_APPARMOR_NAME_MAX 1024
/* The kernel has AppArmor on (its module parameter says Y) and securityfs
 * shows its policy. Reads two files: off the loop. */
bool oci_apparmor_enabled(void);
/* (spec.c) 0 for a name we may write to attr/exec; -EINVAL (empty, a control
 * character), -ENAMETOOLONG. Pure. */
int oci_apparmor_name_valid(const char *name);
/* Whether profiles (the text of securityfs' `profiles`: "NAME (MODE)"
 * lines) lists name. Pure. */
bool oci_apparmor_profile_listed(const char *profiles, const char *name);
/* 1 when the kernel has the profile loaded, 0 when not; -errno reading the
 * list. Blocking. */
int oci_apparmor_loaded(const char *name, struct err *err);
/* The default profile's text, named name, letting daemon (kinglet's own
 * label; NULL or "unconfined": none) signal it; abi3: declare the 3.0
 * policy ABI. -ENOMEM. Pure. */
int oci_apparmor_default_text(const char *name, const char *daemon, bool abi3, struct buf *ret);
/* Loads OCI_APPARMOR_DEFAULT with apparmor_parser unless the kernel has it:
 * -ENOENT without apparmor_parser, -EIO when it refuses (its first line in
 * the message). Blocking (runs a program). */
int oci_apparmor_ensure_default(struct err *err);
