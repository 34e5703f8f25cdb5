/* libFuzzer target: arbitrary bytes into one server connection — the HTTP/2
 * session, gRPC framing and header handling, routing, and the protobuf
 * decoding and handlers of the CRI services — exactly as they would arrive
 * on the socket. Output is drained and discarded. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/base.h"
#include "cri/cri.h"
#include "grpc/grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t *loop;
static struct grpc_server *srv;

static char root[] = "/tmp/kinglet-fuzz-XXXXXX";

static void root_remove(void) { rm_rf_at(AT_FDCWD, root); }

static void setup(void)
{
    if (!mkdtemp(root))
        abort();
    atexit(root_remove);
    log_set_level(LOG_LEVEL_ERROR);
    loop = uv_default_loop();
    struct err err = {0};
    struct cri *cri;
    struct cri_config cfg = {.socket_path = "/nonexistent", .root_dir = root, .state_dir = root};
    if (cri_new(loop, &cfg, &cri, &err) < 0 || grpc_server_new(loop, NULL, &srv) < 0 ||
        cri_register(cri, srv, &err) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loop)
        setup();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        abort();
    if (grpc_server_adopt(srv, sv[0]) < 0)
        abort();
    size_t off = 0;
    bool shut = false;
    uint8_t sink[65536];
    /* Feed, drain and run the loop until the server has closed its end. */
    for (int i = 0; i < 100000; i++) {
        if (off < size) {
            ssize_t n = write(sv[1], data + off, size - off);
            if (n > 0)
                off += (size_t)n;
        } else if (!shut) {
            shutdown(sv[1], SHUT_WR);
            shut = true;
        }
        while (read(sv[1], sink, sizeof(sink)) > 0)
            ;
        uv_run(loop, UV_RUN_NOWAIT);
        if (shut && grpc_server_connections(srv) == 0)
            break;
    }
    close(sv[1]);
    uv_run(loop, UV_RUN_NOWAIT);
    return 0;
}
