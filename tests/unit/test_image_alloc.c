/* Failing-allocation loops over the image module's parsers of outside input
 * (references, manifests, indexes, configs): for k = 0, 1, 2, ... the k-th
 * allocation fails; each run must fail cleanly with ENOMEM (or succeed once
 * k passes the number of allocations), never crash, and (under the leak
 * checker of the sanitizer build, run separately) never leak.
 *
 * malloc/calloc/realloc are interposed through glibc's __libc_* entry points;
 * sanitizer builds keep their own allocator and run the parsers once. */
#include <dlfcn.h>
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

static long fail_after = -1; /* -1: never; k: fail the k-th allocation from now, only it */
static bool failed_once;
/* The failed call came from inside glibc or OpenSSL, which recover from
 * some (recovering_lib): a success is allowed then, and only then. Any
 * allocation of ours must end in ENOMEM. */
static bool failed_in_libc;
/* jansson's lexer ignores some failed allocations (a string then comes out
 * cut short: "amd6", "application/vn.oci...") and reports others as syntax
 * errors, so a failure inside jansson can end in anything a changed input
 * could: it is not held to ENOMEM. Every other failed allocation is. */
static bool failed_in_jansson;
static char failed_where[256]; /* the library of the failed call, for messages */
static long live;              /* allocations not freed yet: equal before and after = no leak */

#if INTERPOSE
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);

static bool caller_in(const void *caller, const char *lib)
{
    Dl_info info;
    return dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, lib);
}

/* glibc recovers from some failed allocations of its own (vasprintf keeps
 * its larger block when a shrinking realloc fails): a success is allowed
 * then, with complete results. */
static bool recovering_lib(const void *caller) { return caller_in(caller, "/libc.so"); }

/* True for exactly one call: the k-th after arming. */
#define should_fail() should_fail_from(__builtin_return_address(0))
static bool should_fail_from(const void *caller)
{
    if (fail_after < 0)
        return false;
    if (fail_after-- == 0) {
        failed_once = true;
        Dl_info info;
        snprintf(failed_where, sizeof(failed_where), "%s",
                 dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "?");
        failed_in_libc = recovering_lib(caller);
        failed_in_jansson = caller_in(caller, "/libjansson.so");
        return true;
    }
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
            rc = err_set(err, ENOMEM, "reference string");
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
        if (rc < 0)
            err_set(err, -rc, "chain ids");
        /* Complete results: the same chain as a run without failures. */
        static char want[2][80];
        for (size_t i = 0; rc == 0 && i < c.n_diff_ids && i < 2; i++) {
            if (!want[i][0])
                snprintf(want[i], sizeof(want[i]), "%s", chain[i]);
            else if (strcmp(want[i], chain[i]) != 0)
                rc = err_set(err, EBADMSG, "chain id %zu is `%s`, not `%s`", i, chain[i], want[i]);
        }
        if (rc == 0 || rc == -EBADMSG)
            strv_free(chain, c.n_diff_ids);
        image_config_info_clear(&c);
    }
    return rc;
}

static void loop(parse_fn fn, const char *input)
{
    struct err err = {0};
    /* once without failures: one-time state (sha256's choice of code, the
     * allocator's own) is in place before the loop */
    assert_int_equal(fn(input, &err), 0);
    long enomem = 0;
    for (long k = 0; k < 100000; k++) {
        failed_once = failed_in_libc = failed_in_jansson = false;
        failed_where[0] = '\0';
        err_clear(&err);
        long before = live;
        fail_after = INTERPOSE ? k : -1;
        int rc = fn(input, &err);
        fail_after = -1;
        /* Nothing leaks, whatever failed. */
        if (live != before)
            fail_msg("allocation %ld failing leaks %ld allocations (rc %d)", k, live - before, rc);
        if (!failed_once) {
            /* no allocation failed: the parse must have succeeded, and
             * some failures were ours, not all jansson's or glibc's */
            assert_int_equal(rc, 0);
            if (INTERPOSE && enomem == 0)
                fail_msg("no failed allocation ended in ENOMEM");
            return;
        }
        /* A failed allocation is ENOMEM, said so; a success only when the
         * failure was inside glibc, which recovers (each fn checks its
         * outputs are complete); anything when jansson failed (see
         * failed_in_jansson). */
        if (failed_in_jansson)
            continue;
        if (rc == 0) {
            if (!failed_in_libc)
                fail_msg("allocation %ld (in %s) failed, yet the parse succeeded", k, failed_where);
            continue;
        }
        if (rc != -ENOMEM || err.code != ENOMEM)
            fail_msg("allocation %ld (in %s) failed: rc %d, error `%s` (want ENOMEM)", k,
                     failed_where, rc, err_str(&err));
        enomem++;
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
