/* stream/tls: what anyone who reaches a TLS streaming port sends, through
 * our glue (tls.c's callbacks and loops) into mbedTLS's record and
 * handshake parsers. The first byte sets the size of the pieces the input
 * is fed in, as the socket would cut it. Oracles: every feed returns (no
 * loop without progress), with 0 or one of its documented errors; after an
 * error the session stays failed; nothing leaks (ASan). */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmpdir.h"
#include "stream/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tls_ctx *ctx;

/* A P-256 key and a self-signed certificate, made by openssl(1) once. */
static void setup(void)
{
    static char dir[] = "/tmp/kinglet-fuzz-tls-XXXXXX";
    fuzz_tmpdir(dir);
    char cmd[512], cert[64], key[64];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
             "-subj /CN=localhost -keyout %s -out %s 2>/dev/null",
             key, cert);
    struct err err = {0};
    if (system(cmd) != 0 || tls_ctx_new(cert, key, &ctx, &err) < 0) {
        fprintf(stderr, "fuzz_stream_tls: no test certificate: %s\n", err_str(&err));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx)
        setup();
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] * 64 + 1;
    data++;
    size--;
    struct tls_conn *t = tls_conn_new(ctx);
    if (!t)
        return 0;
    struct buf plain = {0}, out = {0};
    bool failed = false;
    for (size_t off = 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        int r = tls_conn_feed(t, data + off, n, &plain, &out);
        if (r < 0 && r != -EPROTO && r != -ECONNRESET && r != -ENOMEM)
            __builtin_trap();
        if (failed && r != -EPROTO)
            __builtin_trap(); /* a failed session stays failed */
        if (r < 0)
            failed = true;
    }
    if (!failed)
        (void)tls_conn_write(t, "HTTP/1.1 400 Bad Request\r\n\r\n", 28, &out);
    buf_free(&plain);
    buf_free(&out);
    tls_conn_free(t);
    return 0;
}
