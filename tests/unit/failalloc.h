/* Failing-allocation loops for unit tests: this header replaces malloc,
 * calloc and realloc (glibc supports replacing them; strdup, asprintf and
 * the libraries then allocate through us; free is replaced to count) so that a test can make
 * exactly the k-th allocation fail, for k = 0, 1, 2... until the operation under test completes
 * without one. Include it in one test program only, never in a sanitizer build (the sanitizers own
 * malloc): FAILALLOC_ENABLED is 0 there and tests skip.
 *
 *   FAILALLOC_LOOP(k) { failalloc_arm(k); r = op(); failalloc_disarm(); ...
 *                       if (!failalloc_hit()) break; }
 */
#pragma once

#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FAILALLOC_ENABLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define FAILALLOC_ENABLED 0
#endif
#endif
#ifndef FAILALLOC_ENABLED
#define FAILALLOC_ENABLED 1
#endif

static long failalloc_left = -1; /* allocations before the failing one */
static bool failalloc_fired;

static inline void failalloc_arm(long k)
{
    failalloc_fired = false;
    failalloc_left = k;
}
static inline void failalloc_disarm(void) { failalloc_left = -1; }
static inline bool failalloc_hit(void) { return failalloc_fired; }
/* Bytes allocated minus bytes freed through malloc, calloc, realloc and
 * free: equal before and after an operation that cleaned up after itself.
 * (mallinfo cannot tell: glibc counts its per-thread cache as in use.) */
static long failalloc_live;
static inline long failalloc_in_use(void) { return failalloc_live; }

#if FAILALLOC_ENABLED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static inline bool failalloc_now(void)
{
    if (failalloc_left < 0)
        return false;
    if (failalloc_left-- == 0) {
        failalloc_fired = true;
        return true;
    }
    return false;
}

void *malloc(size_t n);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t n);
void free(void *p);

static inline void *failalloc_count(void *p)
{
    if (p)
        failalloc_live += (long)malloc_usable_size(p);
    return p;
}
void *malloc(size_t n) { return failalloc_now() ? NULL : failalloc_count(__libc_malloc(n)); }
void *calloc(size_t n, size_t size)
{
    return failalloc_now() ? NULL : failalloc_count(__libc_calloc(n, size));
}
void *realloc(void *p, size_t n)
{
    if (failalloc_now())
        return NULL;
    long old = p ? (long)malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q || n == 0)
        failalloc_live -= old;
    return q ? failalloc_count(q) : NULL;
}
void free(void *p)
{
    if (p)
        failalloc_live -= (long)malloc_usable_size(p);
    __libc_free(p);
}
#endif
