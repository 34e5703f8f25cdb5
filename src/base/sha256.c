/* SHA-256 (FIPS 180-4), streaming, for image digests.
 *
 * Why our own: pulls hash every byte of every layer, and the digest is on
 * the pull's critical path. OpenSSL, which kinglet used before, runs at about
 * 1.5 GB/s here with the CPU's SHA extensions but costs 4.9 MB linked
 * statically; mbedTLS 2.28 (which the streaming TLS uses) has only portable
 * C, 5 to 10 times slower. This file is the portable compression function
 * (as FIPS 180-4 writes it, 60 lines) plus one for the x86 SHA extensions,
 * written after Intel's published sequence ("Intel SHA Extensions", Gulley
 * et al., 2013), picked at run time with cpuid: no library, a few kilobytes,
 * the speed of OpenSSL in both the dynamic and the static build.
 * tests/unit/test_base.c checks both paths against the FIPS 180-4 vectors,
 * each other, and sha256sum(1) on random data split at random places. */
#include <string.h>

#include "base.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* FIPS 180-4 section 6.2.2, word for word. */
static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n)
{
    for (; n > 0; n--, p += 64) {
        uint32_t w[64];
        for (int t = 0; t < 16; t++)
            w[t] = be32(p + 4 * t);
        for (int t = 16; t < 64; t++) {
            uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int t = 0; t < 64; t++) {
            uint32_t t1 =
                hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
            uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        h[5] += f;
        h[6] += g;
        h[7] += hh;
    }
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* The SHA extensions keep the state as two vectors, ABEF and CDGH; each
 * sha256rnds2 does two rounds, sha256msg1/msg2 extend the message schedule
 * four words at a time. Groups of four rounds g = 0..15 use the schedule
 * words m[g % 4] = W[4g..4g+3]. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_shani(uint32_t h[8],
                                                                     const uint8_t *p, size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xb1); /* CDAB */
    __m128i st1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1b); /* EFGH */
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                                     /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xf0);                                          /* CDGH */

    for (; n > 0; n--, p += 64) {
        __m128i abef = st0, cdgh = st1, m[4];
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            if (g < 4)
                m[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            __m128i msg = _mm_add_epi32(m[g % 4], _mm_loadu_si128((const __m128i *)&K[4 * g]));
            st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
            if (g >= 3 && g <= 14) { /* W[4g+4..4g+7] */
                __m128i x = _mm_alignr_epi8(m[g % 4], m[(g + 3) % 4], 4);
                m[(g + 1) % 4] = _mm_add_epi32(m[(g + 1) % 4], x);
                m[(g + 1) % 4] = _mm_sha256msg2_epu32(m[(g + 1) % 4], m[g % 4]);
            }
            st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(msg, 0x0e));
            if (g >= 1 && g <= 12) /* the first half of W[4g+12..4g+15] */
                m[(g + 3) % 4] = _mm_sha256msg1_epu32(m[(g + 3) % 4], m[g % 4]);
        }
        st0 = _mm_add_epi32(st0, abef);
        st1 = _mm_add_epi32(st1, cdgh);
    }

    tmp = _mm_shuffle_epi32(st0, 0x1b);                                  /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xb1);                                  /* DCHG */
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(tmp, st1, 0xf0)); /* DCBA */
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(st1, tmp, 8));    /* HGFE */
}

static sha256_blocks_fn *blocks_best(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) ||
        !(c & bit_SSE4_1))
        return blocks_portable;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & bit_SHA) ? blocks_shani : blocks_portable;
}
#else
static sha256_blocks_fn *blocks_best(void) { return blocks_portable; }
#endif

static void init_with(struct sha256 *s, sha256_blocks_fn *blocks)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof(iv));
    s->len = 0;
    s->used = 0;
    s->blocks = blocks;
}

void sha256_init(struct sha256 *s)
{
    static sha256_blocks_fn *best;
    sha256_blocks_fn *f = __atomic_load_n(&best, __ATOMIC_RELAXED);
    if (!f) {
        f = blocks_best();
        __atomic_store_n(&best, f, __ATOMIC_RELAXED);
    }
    init_with(s, f);
}

void sha256_init_portable(struct sha256 *s) { init_with(s, blocks_portable); }

bool sha256_accelerated(void)
{
    struct sha256 s;
    sha256_init(&s);
    return s.blocks != blocks_portable;
}

void sha256_update(struct sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->len += len;
    if (s->used) {
        size_t take = 64 - s->used < len ? 64 - s->used : len;
        memcpy(s->buf + s->used, p, take);
        s->used += take;
        p += take;
        len -= take;
        if (s->used < 64)
            return;
        s->blocks(s->h, s->buf, 1);
        s->used = 0;
    }
    if (len >= 64) {
        s->blocks(s->h, p, len / 64);
        p += len & ~(size_t)63;
        len &= 63;
    }
    if (len) {
        memcpy(s->buf, p, len);
        s->used = len;
    }
}

void sha256_final(struct sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->len * 8;
    s->buf[s->used++] = 0x80;
    if (s->used > 56) {
        memset(s->buf + s->used, 0, 64 - s->used);
        s->blocks(s->h, s->buf, 1);
        s->used = 0;
    }
    memset(s->buf + s->used, 0, 56 - s->used);
    for (int i = 0; i < 8; i++)
        s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    s->blocks(s->h, s->buf, 1);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}
