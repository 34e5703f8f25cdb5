/* stream: the streaming server of kubectl exec, attach and port-forward.
 *
 * The CRI Exec, Attach and PortForward calls do not stream themselves:
 * they answer with a URL of this server, and kubelet proxies the client's
 * upgraded connection there. The server is HTTP/1.1 on the daemon's loop;
 * it serves only the URLs it handed out (a single-use token of 256 bits
 * from getrandom, expiring STREAM_TOKEN_TTL_MS after it was made), and
 * speaks SPDY/3.1 (X-Stream-Protocol-Version channel.k8s.io v1 to v5,
 * portforward.k8s.io) and WebSocket (v4/v5/base64.channel.k8s.io,
 * portforward.k8s.io) after the upgrade.
 *
 * It knows nothing of CRI: a request says what to run (a command and a
 * function that starts it), what to attach to (a monitor's control socket) or
 * where to connect (a network namespace file), and the server does the
 * rest on the loop (process spawns and namespace switches in the thread
 * pool). Backpressure: a client that does not read stops the reading of
 * its source (the exec's pipes, the monitor's socket, the pod's TCP
 * connection) and of the client itself, whatever it queued (data or
 * answers to its pings); a client that goes away ends the exec's command. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/base.h"

#define STREAM_TOKEN_TTL_MS   60000
#define STREAM_SESSIONS_MAX   256 /* upgraded connections at once */
#define STREAM_PF_STREAMS_MAX 128 /* port-forward connections per session */

enum stream_kind { STREAM_EXEC, STREAM_ATTACH, STREAM_PORTFORWARD };

struct stream_request;
/* EXEC: starts the command, in the thread pool, with stdio as its stdin,
 * stdout and stderr (-1: /dev/null) and, with tty, the terminal's master
 * sent over console, which it takes. Returns as soon as the command has a
 * pid, never waiting for it further (a process of the container may stop
 * it there for good): 0 with *ret_pidfd, the pidfd of the command (a child
 * of ours), and *ret_start, what exec_result reads once it has ended; or a
 * shell's status (127, 126) with err saying why the command cannot run
 * (*ret_pidfd, unless -1, still to be reaped); -errno (and err) when
 * nothing could be started. */
typedef int (*stream_exec_fn)(const struct stream_request *req, const int stdio[3], int console,
                              int *ret_pidfd, int *ret_start, struct err *err);
/* EXEC, on the loop, once the command has ended: 0 when it ran, or a
 * shell's status with err saying why it could not. Never blocks. */
typedef int (*stream_exec_result_fn)(const struct stream_request *req, int start, struct err *err);

struct stream_request {
    enum stream_kind kind;
    bool tty, in, out, err;
    /* EXEC: the command, what starts it, and data of the starter's own
     * (freed with free_data) */
    char **argv;
    stream_exec_fn exec;
    stream_exec_result_fn exec_result;
    void *data;
    void (*free_data)(void *data);
    /* ATTACH: the monitor's state directory, holding its control socket */
    char *socket_dir;
    /* PORTFORWARD: the pod's network namespace file, and the ports the
     * request named (a WebSocket client may name them in the URL instead) */
    char *netns;
    int32_t *ports;
    size_t n_ports;
};

struct stream_server;

/* Listens on address ("host:port"; port 0: any free port), with TLS when a
 * certificate chain and key (PEM files, read now) are given. -EINVAL for a
 * bad address or unusable TLS files, or the bind's error. */
int stream_server_start(uv_loop_t *loop, const char *address, const char *tls_cert,
                        const char *tls_key, struct stream_server **ret, struct err *err);
/* A URL for req, which the server now owns (freed when used, expired or at
 * close). -ENOMEM, -EAGAIN when too many tokens wait. */
int stream_server_url(struct stream_server *s, struct stream_request *req, char **ret_url,
                      struct err *err);
/* Ends every session and closes the listener; the server is freed once its
 * handles are closed. */
void stream_server_close(struct stream_server *s);
void stream_request_free(struct stream_request *r);
