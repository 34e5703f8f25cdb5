/* sha256 digests (src/base/sha256.c: the CPU's SHA instructions where it
 * has them), chain IDs and small string-vector helpers. */
#include <string.h>

#include "image/internal.h"

struct hasher {
    struct sha256 s;
};

struct hasher *hasher_new(void)
{
    struct hasher *h = malloc(sizeof(*h));
    if (h)
        sha256_init(&h->s);
    return h;
}

void hasher_free(struct hasher *h) { free(h); }

void hasher_update(struct hasher *h, const void *data, size_t len)
{
    sha256_update(&h->s, data, len);
}

void hasher_final(struct hasher *h, char out[72])
{
    uint8_t md[32];
    sha256_final(&h->s, md);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sha256:", 7);
    for (unsigned i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[md[i] >> 4];
        out[8 + 2 * i] = hex[md[i] & 15];
    }
    out[71] = '\0';
}

void digest_of(const void *data, size_t len, char out[72])
{
    struct hasher h;
    sha256_init(&h.s);
    sha256_update(&h.s, data, len);
    hasher_final(&h, out);
}

int image_chain_ids(char *const *diff_ids, size_t n, char ***ret)
{
    char **v = calloc(n ? n : 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (i == 0) {
            v[i] = strdup(diff_ids[0]);
        } else {
            char buf[160], out[72];
            int len = snprintf(buf, sizeof(buf), "%s %s", v[i - 1], diff_ids[i]);
            digest_of(buf, (size_t)len, out);
            v[i] = strdup(out);
        }
        if (!v[i]) {
            strv_free(v, i);
            return -ENOMEM;
        }
    }
    *ret = v;
    return 0;
}
