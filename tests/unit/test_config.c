/* Daemon settings: the config file format and flag values. */
#include "harness.h"

#include "config.h"

static void defaults(void **state)
{
    struct config c;
    config_defaults(&c);
    assert_string_equal(c.socket_path, "/run/kinglet/kinglet.sock");
    assert_string_equal(c.root_dir, "/var/lib/kinglet");
    assert_string_equal(c.state_dir, "/run/kinglet");
    assert_null(c.listen_tcp);
    assert_int_equal(c.shutdown_timeout_s, 10);
    assert_true(c.max_layer_size == 0);
    /* kubelet's imagefs.available eviction threshold, and bombs stopped */
    assert_true(c.image_min_free == 15 && c.image_min_free_pct);
    assert_int_equal(c.image_pull_progress_timeout_ms, 60000);
    assert_int_equal(c.image_pull_min_rate, 1024);
    assert_int_equal(c.max_layer_ratio, 100);
    config_free(&c);
}

static void parse_file(void **state)
{
    struct config c;
    struct err err = {0};
    config_defaults(&c);
    const char *text = "# comment\n"
                       "\n"
                       "socket = \"/tmp/a b.sock\"   # trailing comment\n"
                       "root=/srv/kinglet\n"
                       "  state =   \"/run/k\\\"q\\\\\"\n"
                       "log-level = debug\n"
                       "listen-tcp = \"[::1]:9000\"\n"
                       "shutdown-timeout = 3\n"
                       "max-layer-size = 64G\n"
                       "image-min-free = 10%\n"
                       "max-layer-ratio = 0\n"
                       "image-pull-progress-timeout = 2.5\n"
                       "image-pull-min-rate = 4K\n";
    assert_int_equal(config_parse(&c, text, "f.conf", &err), 0);
    assert_string_equal(c.socket_path, "/tmp/a b.sock");
    assert_string_equal(c.root_dir, "/srv/kinglet");
    assert_string_equal(c.state_dir, "/run/k\"q\\");
    assert_string_equal(c.log_level, "debug");
    assert_string_equal(c.listen_tcp, "[::1]:9000");
    assert_int_equal(c.shutdown_timeout_s, 3);
    assert_true(c.max_layer_size == 64ULL << 30);
    assert_true(c.image_min_free == 10 && c.image_min_free_pct);
    assert_int_equal(c.max_layer_ratio, 0);
    assert_int_equal(c.image_pull_progress_timeout_ms, 2500);
    assert_int_equal(c.image_pull_min_rate, 4096);
    assert_int_equal(config_set(&c, "image-min-free", "256M", &err), 0);
    assert_true(c.image_min_free == 256u << 20 && !c.image_min_free_pct);
    config_free(&c);
}

static void errors_name_the_line(void **state)
{
    struct {
        const char *text, *want;
    } bad[] = {
        {"socket = /a\nnonsense\n", "f.conf:2: expected `key = value`"},
        {"\n\nbogus = 1\n", "f.conf:3: unknown setting `bogus`"},
        {"root = relative\n", "f.conf:1: root: `relative` is not an absolute path"},
        {"log-level = loud\n", "f.conf:1: log-level"},
        {"shutdown-timeout = -1\n", "f.conf:1: shutdown-timeout"},
        {"shutdown-timeout = 99999\n", "f.conf:1: shutdown-timeout"},
        {"listen-tcp = nocolon\n", "f.conf:1: listen-tcp"},
        {"socket = \"/unterminated\n", "f.conf:1: expected"},
        {"socket = \"/a\" junk\n", "f.conf:1: expected"},
        {"socket = \"/a\\n\"\n", "f.conf:1: expected"},
        {" = /a\n", "f.conf:1: expected"},
        {"max-layer-size = lots\n", "f.conf:1: max-layer-size: `lots` is not a size"},
        {"image-min-free = 100%\n", "f.conf:1: image-min-free"},
        {"max-layer-ratio = -1\n", "f.conf:1: max-layer-ratio: `-1` is not 0..1000000"},
        {"image-pull-progress-timeout = 0\n", "f.conf:1: image-pull-progress-timeout: `0` is not"},
        {"image-pull-progress-timeout = 1h\n", "f.conf:1: image-pull-progress-timeout"},
        {"image-pull-min-rate = 2G\n", "f.conf:1: image-pull-min-rate: `2G` is not"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct config c;
        struct err err = {0};
        config_defaults(&c);
        assert_int_equal(config_parse(&c, bad[i].text, "f.conf", &err), -EINVAL);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: `%s` does not contain `%s`", i, err.msg, bad[i].want);
        config_free(&c);
    }
}

static void hostport(void **state)
{
    char host[64];
    int port = 0;
    assert_int_equal(config_split_hostport("127.0.0.1:8080", host, sizeof(host), &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(config_split_hostport("[fe80::1]:0", host, sizeof(host), &port), 0);
    assert_string_equal(host, "fe80::1");
    assert_int_equal(port, 0);
    const char *bad[] = {":80", "host:", "host:65536", "host:8x", "[::1]80", "noport"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(config_split_hostport(bad[i], host, sizeof(host), &port), -EINVAL);
}

static void grpc_limits(void **state)
{
    struct config c;
    struct err err = {0};
    config_defaults(&c);
    /* zero: the server's defaults */
    assert_true(c.grpc.idle_timeout_ms == 0 && c.grpc.max_response_memory == 0);
    const char *text = "grpc-max-connections = 64\n"
                       "grpc-idle-timeout = 0\n"
                       "grpc-keepalive-time = 1.5\n"
                       "grpc-request-timeout = 30\n"
                       "grpc-request-memory = 64M\n"
                       "grpc-connection-response-memory = 1M\n";
    assert_int_equal(config_parse(&c, text, "f.conf", &err), 0);
    assert_int_equal(c.grpc.max_connections, 64);
    assert_true(c.grpc.idle_timeout_ms == GRPC_NEVER);
    assert_true(c.grpc.keepalive_time_ms == 1500);
    assert_true(c.grpc.request_timeout_ms == 30000);
    assert_true(c.grpc.max_request_memory == 64u << 20);
    assert_true(c.grpc.max_connection_response_memory == 1u << 20);
    static const char *bad[][2] = {
        {"grpc-max-connections", "0"},  {"grpc-max-connections", "70000"},
        {"grpc-idle-timeout", "-1"},    {"grpc-stall-timeout", "1d"},
        {"grpc-keepalive-time", "nan"}, {"grpc-request-timeout", "86401"},
        {"grpc-request-memory", "1K"},  {"grpc-response-memory", "lots"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(config_set(&c, bad[i][0], bad[i][1], &err), -EINVAL);
        assert_non_null(strstr(err.msg, bad[i][0]));
    }
    config_free(&c);
}

static void cdi_spec_dirs(void **state)
{
    (void)state;
    struct config c;
    struct err err = {0};
    config_defaults(&c);
    assert_null(c.cdi_spec_dirs); /* CONFIG_CDI_SPEC_DIRS */
    assert_int_equal(config_set(&c, "cdi-spec-dirs", "/a/cdi,/b", &err), 0);
    assert_string_equal(c.cdi_spec_dirs, "/a/cdi,/b");
    assert_int_equal(config_set(&c, "cdi-spec-dirs", "", &err), 0);
    const char *bad[] = {"relative", "/a,rel", "/a,,/b", "/a,"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (config_set(&c, "cdi-spec-dirs", bad[i], &err) != -EINVAL)
            fail_msg("`%s` accepted", bad[i]);
        assert_non_null(strstr(err.msg, "cdi-spec-dirs"));
    }
    config_free(&c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(cdi_spec_dirs), cmocka_unit_test(defaults),
    cmocka_unit_test(parse_file),    cmocka_unit_test(errors_name_the_line),
    cmocka_unit_test(hostport),      cmocka_unit_test(grpc_limits),
};
UNIT_MAIN(tests)
