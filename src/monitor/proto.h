/* monitor/proto: what kinglet and the monitor program say to each other.
 * Included by both (the program is built against musl, kinglet against
 * glibc): plain C, no library types. */
#pragma once

/* The report socket of `kinglet oci run`: one message when the container
 * has exited. Its layout is the head of struct oci_sync_msg (type, value),
 * and MONITOR_MSG_EXIT is OCI_SYNC_EXIT (checked in src/oci). */
#define MONITOR_MSG_EXIT 7
struct monitor_exit_msg {
    int type;
    int value; /* exit code, 128+signal when killed */
};

/* The control socket: <state dir>/ctl.sock, SOCK_SEQPACKET. One request
 * per connection; the answer is "ok" or "error <reason>". */
#define MONITOR_CTL_SOCK   "ctl.sock"
#define MONITOR_CTL_REOPEN "reopen" /* reopen the log file (ReopenContainerLog) */
