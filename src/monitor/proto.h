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
 * per connection; the answer is "ok", "error <reason>", or, when a system
 * call failed, "error errno <N> <reason>": the code apart from a reason
 * without the system's text, which the reader adds once (base.h). */
#define MONITOR_CTL_SOCK   "ctl.sock"
#define MONITOR_CTL_REOPEN "reopen" /* reopen the log file (ReopenContainerLog) */
/* "attach[ stdin][ stdout][ stderr]": after "ok", the connection carries
 * packets whose first byte says what they are. */
#define MONITOR_CTL_ATTACH "attach"
#define MONITOR_ATT_IN     0 /* → monitor: input for the container's stdin */
#define MONITOR_ATT_OUT    1 /* ← monitor: the container's stdout (a tty's output) */
#define MONITOR_ATT_ERR    2 /* ← monitor: the container's stderr */
/* → monitor: the client's input ended. With stdin_once and no terminal the
 * container's stdin closes; otherwise the monitor ends this client's
 * connection (EOF: the session is over) and the container's stdin stays
 * open for the next client, as Docker and containerd do. */
#define MONITOR_ATT_CLOSE  3
#define MONITOR_ATT_RESIZE 4 /* → monitor: "WIDTH HEIGHT" of the terminal */
