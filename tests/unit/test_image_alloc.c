/* Failing-allocation loops over the image module's parsers of outside input
 * (references, manifests, indexes, configs): for k = 0, 1, 2, ... the k-th
 * allocation fails; each run must fail cleanly with ENOMEM (or succeed once
 * k passes the number of allocations), never crash, and (under the leak
 * checker of the sanitizer build, run separately) never leak.
 *
 * malloc/calloc/realloc are interposed through glibc's __libc_* entry points;
 * sanitizer builds keep their own allocator and run the parsers once. */
#include <string.h>

#include "harness.h"
#include "image/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define INTERPOSE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INTERPOSE 0
#endif
#endif
#ifndef INTERPOSE
#define INTERPOSE 1
#endif

static long fail_after = -1; /* -1: never; k: fail the k-th allocation from now */
static bool failed_once;
static long live; /* allocations not freed yet: equal before and after = no leak */

#if INTERPOSE
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);

static bool should_fail(void)
{
    if (fail_after < 0)
        return false;
    if (fail_after == 0) {
        failed_once = true;
        return true;
    }
    fail_after--;
    return false;
}

void __libc_free(void *p);

void *malloc(size_t n)
{
    void *p = should_fail() ? NULL : __libc_malloc(n);
    live += p != NULL;
    return p;
}

void *calloc(size_t n, size_t m)
{
    void *p = should_fail() ? NULL : __libc_calloc(n, m);
    live += p != NULL;
    return p;
}

void *realloc(void *p, size_t n)
{
    if (p && n == 0) {
        live--;
        return __libc_realloc(p, n);
    }
    void *q = should_fail() ? NULL : __libc_realloc(p, n);
    live += !p && q;
    return q;
}

void free(void *p)
{
    live -= p != NULL;
    __libc_free(p);
}
#endif

#define D64A "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define D64B "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

typedef int (*parse_fn)(const char *input, struct err *err);

static int parse_ref(const char *in, struct err *err)
{
    struct image_ref r;
    int rc = image_ref_parse(in, &r, err);
    if (rc == 0) {
        char *s = image_ref_string(&r);
        if (!s)
            rc = -ENOMEM;
        free(s);
        image_ref_clear(&r);
    }
    return rc;
}

static int parse_manifest(const char *in, struct err *err)
{
    struct image_manifest *m = NULL;
    int rc = image_manifest_parse(NULL, in, strlen(in), &m, err);
    if (rc == 0 && m->kind == IMAGE_MANIFEST_INDEX) {
        const struct image_descriptor *d;
        rc = image_index_select(m, "linux", "amd64", NULL, &d, err);
    }
    image_manifest_free(m);
    return rc;
}

static int parse_config(const char *in, struct err *err)
{
    struct image_config_info c;
    int rc = image_config_parse(in, strlen(in), &c, err);
    if (rc == 0) {
        char **chain;
        rc = image_chain_ids(c.diff_ids, c.n_diff_ids, &chain);
        if (rc == 0)
            strv_free(chain, c.n_diff_ids);
        image_config_info_clear(&c);
    }
    return rc;
}

static void loop(parse_fn fn, const char *input)
{
    struct err err;
    /* once without failures: libraries loaded on first use (libcrypto) and
     * their one-time tables are in place before the loop */
    assert_int_equal(fn(input, &err), 0);
    for (long k = 0; k < 100000; k++) {
        failed_once = false;
        long before = live;
        fail_after = INTERPOSE ? k : -1;
        int rc = fn(input, &err);
        fail_after = -1;
        /* nothing leaks, whatever failed */
        if (live != before)
            fail_msg("allocation %ld failing leaks %ld allocations (rc %d)", k, live - before, rc);
        if (!failed_once) {
            /* no allocation failed: the parse must have succeeded */
            assert_int_equal(rc, 0);
            return;
        }
        /* a failed allocation is an error or, when the library recovers
         * (vasprintf's shrinking realloc), a success with complete results
         * (each fn checks its outputs) */
        assert_true(rc <= 0);
    }
    fail_msg("parser did not finish within 100000 allocations");
}

static void alloc_ref(void **state)
{
    loop(parse_ref, "registry.example:5000/a/b:tag@" D64A);
    loop(parse_ref, "busybox");
}

static void alloc_manifest(void **state)
{
    loop(parse_manifest,
         "{\"schemaVersion\":2,\"mediaType\":\"" MT_OCI_MANIFEST "\",\"config\":{\"digest\":\"" D64A
         "\",\"size\":1},\"layers\":[{\"digest\":\"" D64B "\",\"size\":2},{\"digest\":\"" D64A
         "\",\"size\":3}]}");
}

static void alloc_index(void **state)
{
    loop(parse_manifest, "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"" D64A
                         "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":"
                         "\"arm64\"}},{\"digest\":\"" D64B
                         "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":"
                         "\"amd64\"}}]}");
}

static void alloc_config(void **state)
{
    loop(parse_config,
         "{\"config\":{\"User\":\"1000\"},\"rootfs\":{\"diff_ids\":[\"" D64A "\",\"" D64B "\"]}}");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(alloc_ref),
    cmocka_unit_test(alloc_manifest),
    cmocka_unit_test(alloc_index),
    cmocka_unit_test(alloc_config),
};
UNIT_MAIN(tests)
