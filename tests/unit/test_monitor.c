/* monitor/logfmt (the CRI log format) and store/container (records): pure
 * logic. The monitor program itself runs under the integration tests. */
#include "harness.h"

#include "monitor/logfmt.h"
#include "monitor/monitor.h"
#include "store/store.h"

struct rec {
    int stream;
    char tag;
    size_t len;
    char data[LOGFMT_LINE_MAX + 1];
};

struct sink {
    struct rec r[64];
    size_t n;
};

static void emit(void *ctx, enum logfmt_stream s, char tag, const uint8_t *data, size_t len)
{
    struct sink *k = ctx;
    assert_true(k->n < 64);
    struct rec *r = &k->r[k->n++];
    r->stream = s;
    r->tag = tag;
    r->len = len;
    memcpy(r->data, data, len);
    r->data[len] = '\0';
}

static void lines_and_partials(void **state)
{
    (void)state;
    static struct logfmt f;
    struct sink k = {0};
    logfmt_init(&f, 8);
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"ab\ncd", 5, emit, &k);
    assert_int_equal(k.n, 1);
    assert_string_equal(k.r[0].data, "ab");
    assert_int_equal(k.r[0].tag, 'F');
    /* a line split across reads, and one on the other stream between */
    logfmt_feed(&f, LOGFMT_STDERR, (const uint8_t *)"x\n", 2, emit, &k);
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"ef\n", 3, emit, &k);
    assert_int_equal(k.n, 3);
    assert_int_equal(k.r[1].stream, LOGFMT_STDERR);
    assert_string_equal(k.r[2].data, "cdef");
    /* exactly max_line with its newline: one full record */
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"12345678\n", 9, emit, &k);
    assert_int_equal(k.n, 4);
    assert_int_equal(k.r[3].tag, 'F');
    assert_int_equal(k.r[3].len, 8);
    /* longer: partial records of max_line, then the full rest */
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"abcdefghijklmnopqr\n", 19, emit, &k);
    assert_int_equal(k.n, 7);
    assert_int_equal(k.r[4].tag, 'P');
    assert_string_equal(k.r[4].data, "abcdefgh");
    assert_string_equal(k.r[5].data, "ijklmnop");
    assert_int_equal(k.r[6].tag, 'F');
    assert_string_equal(k.r[6].data, "qr");
    /* a full buffer waits for the next byte to know whether it ends there */
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"ABCDEFGH", 8, emit, &k);
    assert_int_equal(k.n, 7);
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"\n", 1, emit, &k);
    assert_int_equal(k.n, 8);
    assert_int_equal(k.r[7].tag, 'F');
    /* empty lines are records too; what is left at the end is partial */
    logfmt_feed(&f, LOGFMT_STDOUT, (const uint8_t *)"\n\ntail", 6, emit, &k);
    logfmt_flush(&f, LOGFMT_STDOUT, emit, &k);
    logfmt_flush(&f, LOGFMT_STDERR, emit, &k);
    assert_int_equal(k.n, 11);
    assert_int_equal(k.r[8].len, 0);
    assert_int_equal(k.r[10].tag, 'P');
    assert_string_equal(k.r[10].data, "tail");
}

static void header_format(void **state)
{
    (void)state;
    char out[64];
    size_t n = logfmt_header(1475712429669794202ull, LOGFMT_STDOUT, 'F', out);
    out[n] = '\0';
    assert_string_equal(out, "2016-10-06T00:07:09.669794202Z stdout F ");
    n = logfmt_header(0, LOGFMT_STDERR, 'P', out);
    out[n] = '\0';
    assert_string_equal(out, "1970-01-01T00:00:00.000000000Z stderr P ");
    /* a leap day, and the end of a year */
    n = logfmt_header(1709208000ull * 1000000000ull + 5, LOGFMT_STDOUT, 'F', out);
    out[n] = '\0';
    assert_string_equal(out, "2024-02-29T12:00:00.000000005Z stdout F ");
    n = logfmt_header(1735689599ull * 1000000000ull, LOGFMT_STDOUT, 'F', out);
    out[n] = '\0';
    assert_string_equal(out, "2024-12-31T23:59:59.000000000Z stdout F ");
}

static void container_record_roundtrip(void **state)
{
    (void)state;
    struct store_container c = {0};
    assert_int_equal(store_id_new(c.id), 0);
    assert_int_equal(store_id_new(c.pod_id), 0);
    c.state = STORE_CTR_EXITED;
    c.created_ns = 1;
    c.started_ns = 2;
    c.finished_ns = 3;
    c.exit_code = 137;
    c.reason = strdup("OOMKilled");
    c.message = strdup("line one\nline two");
    c.image = strdup("registry.local/busybox:latest");
    c.image_id = strdup("sha256:0123");
    c.image_ref = strdup("registry.local/busybox@sha256:abcd");
    c.log_path = strdup("/var/log/pods/x/c/0.log");
    uint8_t cfg[] = {1, 2, 0, 255};
    c.config = malloc(sizeof(cfg));
    memcpy(c.config, cfg, sizeof(cfg));
    c.config_len = sizeof(cfg);
    c.resources = malloc(1);
    c.resources_len = 0;
    c.uid = 1000;
    c.gid = 2000;
    c.groups = calloc(2, sizeof(*c.groups));
    c.groups[0] = 10;
    c.groups[1] = 4000000000u;
    c.n_groups = 2;
    c.stop_signal = 15;
    c.cgroup_path = strdup("/kubepods/pod/ctr");
    char *json = NULL;
    size_t len = 0;
    struct err err = {0};
    assert_int_equal(store_ctr_to_json(&c, &json, &len, &err), 0);
    struct store_container d;
    if (store_ctr_from_json(json, len, &d, &err) < 0)
        fail_msg("parse back `%s`: %s", json, err.msg);
    assert_string_equal(d.id, c.id);
    assert_string_equal(d.pod_id, c.pod_id);
    assert_int_equal(d.state, STORE_CTR_EXITED);
    assert_true(d.created_ns == 1 && d.started_ns == 2 && d.finished_ns == 3);
    assert_int_equal(d.exit_code, 137);
    assert_string_equal(d.reason, "OOMKilled");
    assert_string_equal(d.message, c.message);
    assert_string_equal(d.image_ref, c.image_ref);
    assert_string_equal(d.log_path, c.log_path);
    assert_int_equal(d.config_len, 4);
    assert_memory_equal(d.config, cfg, 4);
    assert_non_null(d.resources);
    assert_int_equal(d.resources_len, 0);
    assert_int_equal(d.uid, 1000);
    assert_int_equal(d.n_groups, 2);
    assert_true(d.groups[1] == 4000000000u);
    assert_int_equal(d.stop_signal, 15);
    assert_string_equal(d.cgroup_path, c.cgroup_path);
    store_ctr_clear(&d);
    free(json);
    store_ctr_clear(&c);
}

static void container_record_refused(void **state)
{
    (void)state;
    const char *id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const char *bad[] = {
        "{}",
        "[]",
        /* a relative log path, a cgroup with .., an unknown state, an exit
         * code out of range, a stop signal of 0 */
        "logPath\":\"rel/x.log",
        "cgroup\":\"/a/../b",
        "state\":\"paused",
        "exitCode\":300,\"x\":\"",
        "stopSignal\":0,\"x\":\"",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        char text[2048];
        if (i < 2)
            snprintf(text, sizeof(text), "%s", bad[i]);
        else
            snprintf(text, sizeof(text),
                     "{\"version\":1,\"id\":\"%s\",\"podId\":\"%s\",\"state\":\"created\","
                     "\"created\":1,\"started\":0,\"finished\":0,\"exitCode\":0,\"image\":\"i\","
                     "\"imageId\":\"d\",\"imageRef\":\"r\",\"config\":\"\",\"user\":{\"uid\":0,"
                     "\"gid\":0,\"groups\":[]},\"stopSignal\":15,\"%s\"}",
                     id, id, bad[i]);
        struct store_container c;
        struct err err = {0};
        if (store_ctr_from_json(text, strlen(text), &c, &err) == 0)
            fail_msg("accepted: %s", text);
        assert_int_equal(err.code, EINVAL);
    }
}

/* The control socket's answers (proto.h): an errno crosses as a code, so
 * the daemon shows its text once and maps it; a bare reason says it all. */
static void control_answers_become_errors(void **state)
{
    (void)state;
    struct err e = {0};
    assert_int_equal(monitor_answer_err("ok", &e), 0);
    assert_int_equal(e.code, 0);
    assert_int_equal(monitor_answer_err("error errno 2 open `/var/log/x`", &e), -ENOENT);
    assert_string_equal(err_str(&e), "open `/var/log/x`: No such file or directory");
    assert_int_equal(monitor_answer_err("error too many clients attached", &e), -EIO);
    assert_string_equal(err_str(&e), "too many clients attached");
    /* an older monitor's text, and codes no errno can be: as they came */
    assert_int_equal(monitor_answer_err("error No such file or directory", &e), -EIO);
    assert_string_equal(err_str(&e), "No such file or directory");
    assert_int_equal(monitor_answer_err("error errno 99999 x", &e), -EIO);
    assert_string_equal(err_str(&e), "errno 99999 x");
    assert_int_equal(monitor_answer_err("error errno 2", &e), -EIO);
    assert_int_equal(monitor_answer_err("okay", &e), -EPROTO);
    assert_int_equal(monitor_answer_err("", &e), -EPROTO);
}
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(lines_and_partials),
    cmocka_unit_test(control_answers_become_errors),
    cmocka_unit_test(header_format),
    cmocka_unit_test(container_record_roundtrip),
    cmocka_unit_test(container_record_refused),
};

UNIT_MAIN(tests)
