/* Unit tests of the image module's pure logic: references, manifests,
 * platform selection, configs, chain IDs. */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>

#include "harness.h"
#include "image/internal.h"

#define D64A "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define D64B "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define D64C "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static void check_ref(const char *in, const char *want)
{
    struct image_ref r;
    struct err err = {0};
    int rc = image_ref_parse(in, &r, &err);
    if (rc < 0)
        fail_msg("parse `%s`: %s", in, err.msg);
    char *s = image_ref_string(&r);
    assert_string_equal(s, want);
    free(s);
    image_ref_clear(&r);
}

static void check_bad_ref(const char *in, const char *why)
{
    struct image_ref r;
    struct err err = {0};
    int rc = image_ref_parse(in, &r, &err);
    if (rc >= 0) {
        image_ref_clear(&r);
        fail_msg("`%s` parsed but should not", in);
    }
    assert_int_equal(rc, -EINVAL);
    if (!strstr(err.msg, why))
        fail_msg("`%s`: message `%s` lacks `%s`", in, err.msg, why);
}

static void test_ref_normalise(void **state)
{
    check_ref("busybox", "docker.io/library/busybox:latest");
    check_ref("busybox:1.36", "docker.io/library/busybox:1.36");
    check_ref("library/busybox", "docker.io/library/busybox:latest");
    check_ref("user/app", "docker.io/user/app:latest");
    check_ref("index.docker.io/user/app:v1", "docker.io/user/app:v1");
    check_ref("docker.io/busybox", "docker.io/library/busybox:latest");
    check_ref("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9");
    check_ref("localhost/app", "localhost/app:latest");
    check_ref("localhost:5000/a/b/c:t", "localhost:5000/a/b/c:t");
    check_ref("127.0.0.1:5000/app", "127.0.0.1:5000/app:latest");
    check_ref("Example.com/app", "Example.com/app:latest");
    check_ref("[::1]:5000/app:x", "[::1]:5000/app:x");
    check_ref("busybox@" D64A, "docker.io/library/busybox@" D64A);
    check_ref("busybox:1@" D64A, "docker.io/library/busybox:1@" D64A);
    check_ref("a.b/c__d.e-f--g:_T.a-g", "a.b/c__d.e-f--g:_T.a-g");
}

static void test_ref_invalid(void **state)
{
    check_bad_ref("", "empty");
    check_bad_ref("Busybox", "lowercase");
    check_bad_ref("busybox:", "tag");
    check_bad_ref("busybox:-x", "tag");
    check_bad_ref("busybox@sha256:abc", "64");
    check_bad_ref("busybox@md5:0123456789abcdef0123456789abcdef", "sha256");
    check_bad_ref("a//b", "repository");
    check_bad_ref("-a/b", "repository");
    check_bad_ref("a_/b", "repository");
    check_bad_ref("host:port/app", "registry host");
    check_bad_ref("a...b/c", "registry host");
    check_bad_ref(":tag", "missing");
    check_bad_ref("@" D64A, "missing");
    char longtag[200];
    memset(longtag, 'a', sizeof(longtag));
    memcpy(longtag, "x:", 2);
    longtag[sizeof(longtag) - 1] = '\0';
    check_bad_ref(longtag, "tag");
    char *huge = malloc(IMAGE_REF_MAX + 10);
    memset(huge, 'a', IMAGE_REF_MAX + 9);
    huge[IMAGE_REF_MAX + 9] = '\0';
    check_bad_ref(huge, "longer");
    free(huge);
    char name[300];
    memset(name, 'a', sizeof(name));
    name[sizeof(name) - 1] = '\0';
    check_bad_ref(name, "255");
    /* the limit is on the normalised name: docker.io/ counts */
    memset(name, 'a', sizeof(name));
    memcpy(name, "u/", 2);
    name[250] = '\0';
    check_bad_ref(name, "255");
}

static void test_digest_valid(void **state)
{
    assert_true(image_digest_valid(D64A));
    assert_false(image_digest_valid(
        "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    assert_false(image_digest_valid(D64A "a"));
    assert_false(image_digest_valid("sha256:"));
    assert_false(image_digest_valid(NULL));
}

static struct image_manifest *parse_ok(const char *ct, const char *json)
{
    struct image_manifest *m = NULL;
    struct err err = {0};
    if (image_manifest_parse(ct, json, strlen(json), &m, &err) < 0)
        fail_msg("parse: %s", err.msg);
    return m;
}

static void parse_bad(const char *ct, const char *json, const char *why)
{
    struct image_manifest *m = NULL;
    struct err err = {0};
    int r = image_manifest_parse(ct, json, strlen(json), &m, &err);
    if (r >= 0) {
        image_manifest_free(m);
        fail_msg("parsed but should not: %s", json);
    }
    if (!strstr(err.msg, why))
        fail_msg("message `%s` lacks `%s`", err.msg, why);
}

static const char manifest_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"" MT_DOCKER_MANIFEST "\","
    "\"config\":{\"mediaType\":\"application/vnd.docker.container.image.v1+json\","
    "\"digest\":\"" D64A "\",\"size\":10},"
    "\"layers\":[{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\","
    "\"digest\":\"" D64B "\",\"size\":20},"
    "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\",\"digest\":\"" D64C
    "\",\"size\":30}]}";

static void test_manifest_image(void **state)
{
    struct image_manifest *m = parse_ok(NULL, manifest_json);
    assert_int_equal(m->kind, IMAGE_MANIFEST_IMAGE);
    assert_string_equal(m->config.digest, D64A);
    assert_int_equal(m->config.size, 10);
    assert_int_equal(m->n_descs, 2);
    assert_string_equal(m->descs[1].digest, D64C);
    assert_int_equal(m->descs[1].size, 30);
    image_manifest_free(m);
    /* media type from the header when the document has none */
    m = parse_ok(MT_OCI_MANIFEST, "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D64A
                                  "\",\"size\":1},\"layers\":[]}");
    assert_int_equal(m->kind, IMAGE_MANIFEST_IMAGE);
    assert_int_equal(m->n_descs, 0);
    image_manifest_free(m);
}

static const char index_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"" MT_OCI_INDEX "\",\"manifests\":["
    "{\"mediaType\":\"" MT_OCI_MANIFEST "\",\"digest\":\"" D64A "\",\"size\":1,"
    "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
    "{\"mediaType\":\"" MT_OCI_MANIFEST "\",\"digest\":\"" D64B "\",\"size\":2,"
    "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
    "{\"mediaType\":\"" MT_OCI_MANIFEST "\",\"digest\":\"" D64C "\",\"size\":3,"
    "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v7\"}},"
    "{\"mediaType\":\"" MT_OCI_MANIFEST "\",\"digest\":\"" D64C "\",\"size\":3,"
    "\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}}]}";

static void test_index_select(void **state)
{
    struct image_manifest *m = parse_ok(NULL, index_json);
    const struct image_descriptor *d;
    struct err err = {0};
    assert_int_equal(m->kind, IMAGE_MANIFEST_INDEX);
    assert_int_equal(image_index_select(m, "linux", "amd64", NULL, &d, &err), 0);
    assert_string_equal(d->digest, D64B);
    assert_int_equal(image_index_select(m, "linux", "arm64", NULL, &d, &err), 0);
    assert_string_equal(d->digest, D64A);
    /* arm64 without a variant means v8 */
    assert_int_equal(image_index_select(m, "linux", "arm64", "v8", &d, &err), 0);
    assert_string_equal(d->digest, D64A);
    assert_int_equal(image_index_select(m, "linux", "arm", "v7", &d, &err), 0);
    assert_string_equal(d->digest, D64C);
    assert_int_equal(image_index_select(m, "linux", "arm", "v6", &d, &err), -ENOENT);
    assert_int_equal(image_index_select(m, "linux", "s390x", NULL, &d, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "linux/s390x"));
    assert_non_null(strstr(err.msg, "offered: linux/arm64/v8, linux/amd64, linux/arm/v7"));
    assert_null(strstr(err.msg, "unknown"));
    image_manifest_free(m);
}

static void test_manifest_refused(void **state)
{
    parse_bad(NULL, "{\"schemaVersion\":1,\"name\":\"x\",\"fsLayers\":[]}", "schema 1");
    parse_bad("application/vnd.docker.distribution.manifest.v1+prettyjws", "{\"schemaVersion\":2}",
              "schema 1");
    parse_bad(NULL, "[]", "not a JSON object");
    parse_bad(NULL, "{", "not valid JSON");
    parse_bad(NULL, "{\"schemaVersion\":3}", "schemaVersion 2");
    parse_bad(NULL, "{\"schemaVersion\":2,\"mediaType\":\"text/plain\"}", "unsupported");
    parse_bad(NULL,
              "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:x\",\"size\":1},\"layers\":[]}",
              "digest");
    parse_bad(NULL,
              "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D64A
              "\",\"size\":-1},\"layers\":[]}",
              "size");
    parse_bad(NULL, "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D64A "\",\"size\":1}}",
              "layers");
    parse_bad(NULL,
              "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/"
              "vnd.cncf.helm.config.v1+json\","
              "\"digest\":\"" D64A "\",\"size\":1},\"layers\":[]}",
              "not a container image");
    parse_bad(NULL,
              "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D64A "\",\"size\":1},\"layers\":[{"
              "\"mediaType\":\"application/x-evil\",\"digest\":\"" D64A "\",\"size\":1}]}",
              "unsupported media type");
    parse_bad(NULL, "{\"schemaVersion\":2,\"schemaVersion\":2}", "not valid JSON");
    /* too many layers */
    struct buf b = {0};
    buf_printf(&b,
               "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D64A "\",\"size\":1},\"layers\":[");
    for (int i = 0; i <= IMAGE_LAYERS_MAX; i++)
        buf_printf(&b, "%s{\"digest\":\"" D64A "\",\"size\":1}", i ? "," : "");
    buf_printf(&b, "]}");
    buf_append(&b, "", 1);
    parse_bad(NULL, (char *)b.data, "layer count 257 is over the limit of 256");
    buf_free(&b);
    /* an index with too many entries, and one with a bad entry */
    b = (struct buf){0};
    buf_printf(&b, "{\"schemaVersion\":2,\"manifests\":[");
    for (int i = 0; i <= IMAGE_INDEX_MAX; i++)
        buf_printf(&b, "%s{\"digest\":\"" D64A "\",\"size\":1}", i ? "," : "");
    buf_printf(&b, "]}");
    buf_append(&b, "", 1);
    parse_bad(NULL, (char *)b.data, "image index entry count 1025 is over the limit of 1024");
    buf_free(&b);
    parse_bad(NULL,
              "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"" D64A
              "\",\"size\":1},{\"digest\":\"sha256:x\",\"size\":1}]}",
              "image index entry 1");
    /* too large */
    struct image_manifest *m = NULL;
    struct err err = {0};
    assert_int_equal(image_manifest_parse(NULL, "x", IMAGE_MANIFEST_MAX + 1, &m, &err), -EFBIG);
}

static void test_config(void **state)
{
    const char *j =
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"User\":\"1000:1000\"},"
        "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D64A "\",\"" D64B "\"]}}";
    struct image_config_info c;
    struct err err = {0};
    assert_int_equal(image_config_parse(j, strlen(j), &c, &err), 0);
    assert_string_equal(c.user, "1000:1000");
    assert_string_equal(c.arch, "amd64");
    assert_int_equal(c.n_diff_ids, 2);
    assert_string_equal(c.diff_ids[1], D64B);
    char **chain;
    assert_int_equal(image_chain_ids(c.diff_ids, c.n_diff_ids, &chain), 0);
    assert_string_equal(chain[0], D64A);
    /* sha256("sha256:aaa… sha256:bbb…"), computed independently */
    assert_string_equal(chain[1],
                        "sha256:ccd722928bd92476ba1745586fed6e45a102504185ad88cd89e01ff116fd146c");
    strv_free(chain, 2);
    image_config_info_clear(&c);

    const char *nouser = "{\"rootfs\":{\"diff_ids\":[]}}";
    assert_int_equal(image_config_parse(nouser, strlen(nouser), &c, &err), 0);
    assert_string_equal(c.user, "");
    image_config_info_clear(&c);
    const char *bad = "{\"rootfs\":{\"diff_ids\":[\"sha256:xyz\"]}}";
    assert_int_equal(image_config_parse(bad, strlen(bad), &c, &err), -EINVAL);
    const char *none = "{\"config\":{}}";
    assert_int_equal(image_config_parse(none, strlen(none), &c, &err), -EINVAL);
}

static void test_endpoints(void **state)
{
    const char *mirrors[] = {"docker.io=http://127.0.0.1:5000/", "other=https://m",
                             "docker.io=mirror.example:443/v2"};
    const char *insecure[] = {"127.0.0.1:5000", "insecure.example"};
    struct reg_endpoint *eps;
    size_t n;
    struct err err = {0};
    assert_int_equal(reg_endpoints_for("docker.io", mirrors, 3, insecure, 2, false, &eps, &n, &err),
                     0);
    assert_int_equal(n, 3);
    assert_string_equal(eps[0].base, "http://127.0.0.1:5000");
    assert_true(eps[0].mirror && !eps[0].send_auth && eps[0].skip_verify);
    assert_string_equal(eps[1].base, "https://mirror.example:443");
    assert_string_equal(eps[1].host, "mirror.example:443");
    assert_false(eps[1].skip_verify);
    assert_string_equal(eps[2].base, "https://registry-1.docker.io");
    assert_true(eps[2].send_auth && !eps[2].mirror);
    reg_endpoints_free(eps, n);
    assert_int_equal(reg_endpoints_for("docker.io", mirrors, 3, insecure, 2, true, &eps, &n, &err),
                     0);
    assert_int_equal(n, 2);
    reg_endpoints_free(eps, n);
    assert_int_equal(
        reg_endpoints_for("insecure.example", mirrors, 3, insecure, 2, true, &eps, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(eps[0].base, "https://insecure.example");
    assert_true(eps[0].skip_verify);
    assert_string_equal(eps[1].base, "http://insecure.example");
    reg_endpoints_free(eps, n);
}

/* Where credentials may go: redirects keep them within one origin and
 * never turn https into http unless the registry is insecure. */
static void test_redirect_rules(void **state)
{
    struct err err = {0};
    bool same = true;
    assert_int_equal(
        reg_redirect_check("https://r.example/v2/x", "https://r.example:443/b", false, &same, &err),
        0);
    assert_true(same);
    assert_int_equal(
        reg_redirect_check("https://r.example/v2/", "https://cdn.example/b", false, &same, &err),
        0);
    assert_false(same);
    assert_int_equal(reg_redirect_check("https://r.example:5000/v2/", "https://r.example:5001/b",
                                        false, &same, &err),
                     0);
    assert_false(same);
    /* userinfo is not the host */
    assert_int_equal(reg_redirect_check("https://r.example/v2/", "https://r.example@evil.example/",
                                        false, &same, &err),
                     0);
    assert_false(same);
    assert_int_equal(
        reg_redirect_check("https://r.example/v2/", "http://r.example/b", false, &same, &err),
        -EPROTO);
    assert_non_null(strstr(err.msg, "redirect from https to plain http (r.example) refused"));
    assert_null(strstr(err.msg, "Protocol error"));
    assert_int_equal(
        reg_redirect_check("https://r.example/v2/", "http://r.example/b", true, &same, &err), 0);
    assert_false(same);
    assert_int_equal(
        reg_redirect_check("http://r.example/v2/", "file:///etc/passwd", true, &same, &err),
        -EPROTO);
    assert_int_equal(
        reg_redirect_check("http://[::1]:5000/v2/", "http://[::1]:5000/x", true, &same, &err), 0);
    assert_true(same);
}

static void test_realm_rules(void **state)
{
    assert_true(reg_realm_gets_credentials("https://registry-1.docker.io",
                                           "https://auth.docker.io/token", false));
    assert_true(reg_realm_gets_credentials("https://registry.gitlab.com",
                                           "https://gitlab.com/jwt/auth", false));
    assert_true(
        reg_realm_gets_credentials("https://r.example:5000", "https://r.example/token", false));
    assert_false(reg_realm_gets_credentials("https://r.example", "https://evil.example/t", false));
    assert_false(reg_realm_gets_credentials("https://foo.com", "https://bar.com/t", false));
    assert_false(
        reg_realm_gets_credentials("https://127.0.0.1:5000", "https://127.0.0.2/token", false));
    assert_false(
        reg_realm_gets_credentials("https://127.0.0.1:5000", "https://localhost/token", false));
    /* never in clear from a verified registry */
    assert_false(reg_realm_gets_credentials("https://r.example", "http://r.example/t", false));
    assert_true(reg_realm_gets_credentials("http://r.example", "http://r.example/t", true));
    /* another port is another service: only the registry's or the default */
    assert_false(
        reg_realm_gets_credentials("http://127.0.0.1:18704", "http://127.0.0.1:18705/token", true));
    assert_true(
        reg_realm_gets_credentials("http://127.0.0.1:18704", "http://127.0.0.1:18704/token", true));
    assert_true(
        reg_realm_gets_credentials("https://r.example:5050", "https://r.example:443/t", false));
    assert_false(
        reg_realm_gets_credentials("https://r.example:5050", "https://r.example:8443/t", false));
    assert_false(reg_realm_gets_credentials("https://registry-1.docker.io",
                                            "https://auth.docker.io:8443/token", false));
    /* the parent-domain rule holds over https only */
    assert_false(
        reg_realm_gets_credentials("http://registry.gitlab.com", "http://gitlab.com/jwt", true));
}

static void test_tls_wildcards(void **state)
{
#define M(pat, host) tls_name_matches(pat, strlen(pat), host)
    assert_true(M("a.good.test", "A.Good.Test"));
    assert_true(M("a.good.test.", "a.good.test"));
    assert_true(M("*.good.test", "a.good.test"));
    assert_true(M("*.good.test", "a.good.test."));
    assert_true(M("*.Good.Test", "x-y.good.test"));
    /* a wildcard over a whole top-level domain */
    assert_false(M("*.test", "evil.test"));
    assert_false(M("*.test.", "evil.test"));
    assert_false(M("*", "test"));
    /* one label exactly, never the bare domain or two labels */
    assert_false(M("*.good.test", "good.test"));
    assert_false(M("*.good.test", ".good.test"));
    assert_false(M("*.good.test", "a.b.good.test"));
    /* the whole left-most label only */
    assert_false(M("f*.good.test", "foo.good.test"));
    assert_false(M("*o.good.test", "foo.good.test"));
    assert_false(M("a.*.test", "a.b.test"));
    assert_false(M("*.*.test", "a.b.test"));
    assert_false(M("*..test", "a..test"));
    assert_false(M("xn--*.good.test", "xn--bcher-kva.good.test"));
    assert_false(M("", "a"));
    assert_false(tls_name_matches("a.test\0.evil", 11, "a.test"));
#undef M
}

static void test_registry_answers(void **state)
{
    char out[300];
    static const char body[] = "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\","
                               "\"message\":\"manifest unknown\",\"detail\":{}}]}";
    reg_error_message(body, strlen(body), out, sizeof(out));
    assert_string_equal(out, "MANIFEST_UNKNOWN: manifest unknown");
    static const char two[] = "{\"errors\":[{\"code\":\"A\",\"message\":\"x\\ny\"},"
                              "{\"code\":\"DENIED\"}]}";
    reg_error_message(two, strlen(two), out, sizeof(out));
    assert_string_equal(out, "A: x\\x0ay; DENIED");
    /* anything but an errors document is never echoed */
    reg_error_message("<html>\r\n502</html>", 18, out, sizeof(out));
    assert_string_equal(out, "");
    static const char secret[] = "{\"token\":\"abc\",\"errors\":\"no\"}";
    reg_error_message(secret, strlen(secret), out, sizeof(out));
    assert_string_equal(out, "");
    /* escapes, never cut in half, and the bound */
    static const char esc[] =
        "{\"errors\":[{\"code\":\"E\",\"message\":\"\\u001b[2J\\\\\\u00e9\"}]}";
    reg_error_message(esc, strlen(esc), out, sizeof(out));
    assert_string_equal(out, "E: \\x1b[2J\\x5c\\xc3\\xa9");
    char small[7]; /* room for "E: " and half an escape */
    reg_error_message(esc, strlen(esc), small, sizeof(small));
    assert_string_equal(small, "E: ");
    char big[2000];
    memset(big, 0, sizeof(big));
    strcpy(big, "{\"errors\":[{\"code\":\"C\",\"message\":\"");
    memset(big + strlen(big), 'm', 1000);
    strcat(big, "\"}]}");
    reg_error_message(big, strlen(big), out, sizeof(out));
    assert_int_equal(strlen(out), 3 + 200);
    reg_error_message(NULL, 0, out, sizeof(out));
    assert_string_equal(out, "");

    struct reg_challenge c;
    reg_challenge_parse("Bearer realm=\"https://a/t\",service=\"reg\",scope=\"repository:x:pull\"",
                        &c);
    assert_true(c.bearer);
    assert_string_equal(c.realm, "https://a/t");
    assert_string_equal(c.service, "reg");
    assert_string_equal(c.scope, "repository:x:pull");
    reg_challenge_parse("Bearerish realm=x", &c);
    assert_false(c.bearer || c.basic);

    char *tok = NULL;
    struct err err = {0};
    assert_int_equal(reg_token_parse("{\"access_token\":\"abc\"}", 22, &tok, &err), 0);
    assert_string_equal(tok, "abc");
    free(tok);
    assert_int_equal(reg_token_parse("{\"token\":\"a\\r\\nX-Evil: 1\"}", 28, &tok, &err), -EACCES);
}

struct canceller {
    struct job *job;
    pid_t tid; /* the thread that backs off */
};

/* Cancels the job once the backing-off thread sleeps (in its wait). */
static void *cancel_when_waiting(void *arg)
{
    struct canceller *c = arg;
    char path[64], st[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)c->tid);
    for (;;) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(st, 1, sizeof(st) - 1, f) : 0;
        if (f)
            fclose(f);
        st[n] = '\0';
        const char *paren = strrchr(st, ')');
        if (paren && paren[1] == ' ' && paren[2] == 'S')
            break;
        sched_yield();
    }
    job_cancel(c->job);
    return NULL;
}

/* A backoff after a transient registry error is a wait the job's cancel
 * ends at once: an hour's backoff returns -ECANCELED as soon as another
 * thread cancels (a blind sleep would run into the case's time limit). */
static void test_backoff_ends_on_cancel(void **state)
{
    struct job job = {.cancel_fd = -1};
    assert_int_equal(job_cancel_init(&job), 0);
    assert_int_equal(job_backoff(&job, 1), 0); /* not cancelled: the time passes */
    struct canceller c = {.job = &job, .tid = (pid_t)syscall(SYS_gettid)};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_when_waiting, &c), 0);
    assert_int_equal(job_backoff(&job, 3600u * 1000), -ECANCELED);
    pthread_join(th, NULL);
    assert_int_equal(job_backoff(&job, 3600u * 1000), -ECANCELED); /* and stays so */
    job_cancel_close(&job);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_backoff_ends_on_cancel),
    cmocka_unit_test(test_ref_normalise),
    cmocka_unit_test(test_ref_invalid),
    cmocka_unit_test(test_digest_valid),
    cmocka_unit_test(test_manifest_image),
    cmocka_unit_test(test_index_select),
    cmocka_unit_test(test_manifest_refused),
    cmocka_unit_test(test_config),
    cmocka_unit_test(test_endpoints),
    cmocka_unit_test(test_redirect_rules),
    cmocka_unit_test(test_realm_rules),
    cmocka_unit_test(test_tls_wildcards),
    cmocka_unit_test(test_registry_answers),
};
UNIT_MAIN(tests)
