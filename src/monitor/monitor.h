/* monitor: the per-container supervisor, as kinglet starts it.
 *
 * The supervisor is a program of its own (main.c; built static against
 * musl and embedded in this binary): see main.c for what it does. The
 * process that cloned a container's init replaces itself with it, so that
 * the init stays its child, through monitor_exec: the embedded program is
 * copied into a sealed memfd and executed from there, so no file of the
 * host backs it and nothing can write to it through /proc/PID/exe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "monitor/proto.h"

struct monitor_args {
    pid_t init;
    int dir_fd;              /* the container's state directory (exit.json goes there) */
    int exec_fd;             /* EOF or one byte when the init execs */
    int report_fd;           /* MONITOR_MSG_EXIT goes there (`oci run`), or -1 */
    const char *cgroup_path; /* absolute path of the container's cgroup, or NULL */
    /* CRI logs: the log file and the read ends of the container's stdout
     * and stderr pipes, or its pty master (tty_fd, logged as stdout). */
    const char *log_path; /* NULL: no log, the container has the caller's stdio */
    int stdout_fd, stderr_fd, tty_fd;
    int stdin_fd;    /* the write end of the container's stdin, held open; -1 */
    bool stdin_once; /* the first attached client's detach closes stdin */
    int ctl_fd;      /* a listening SOCK_SEQPACKET socket (ctl.sock), or -1 */
};

/* Replaces the calling process with the monitor program. Every fd named in
 * a is inherited; every other fd must be close-on-exec. Returns only on
 * failure, with -errno. */
int monitor_exec(const struct monitor_args *a);

struct err;
/* A control socket answer (proto.h) as an error: 0 for "ok"; the errno of
 * "error errno N reason" with the reason; EIO for another "error reason"
 * (shown without system text: the reason says it all); EPROTO for anything
 * else. Returns -err->code. */
int monitor_answer_err(const char *answer, struct err *err);

/* The embedded program (blob.S). */
extern const unsigned char monitor_program[];
extern const unsigned char monitor_program_end[];
