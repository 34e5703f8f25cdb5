/* sha256 digests with OpenSSL's EVP (hardware-accelerated where the CPU
 * allows), chain IDs and small string-vector helpers. */
#include <string.h>

#include <openssl/evp.h>

#include "image/internal.h"

struct hasher {
    EVP_MD_CTX *ctx;
};

struct hasher *hasher_new(void)
{
    struct hasher *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        hasher_free(h);
        return NULL;
    }
    return h;
}

void hasher_free(struct hasher *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void hasher_update(struct hasher *h, const void *data, size_t len)
{
    if (len)
        EVP_DigestUpdate(h->ctx, data, len);
}

void hasher_final(struct hasher *h, char out[72])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(h->ctx, md, &n);
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
    struct hasher *h = hasher_new();
    if (!h) {
        out[0] = '\0';
        return;
    }
    hasher_update(h, data, len);
    hasher_final(h, out);
    hasher_free(h);
}

void strv_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
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
            v[i] = out[0] ? strdup(out) : NULL; /* "" when hashing ran out of memory */
        }
        if (!v[i]) {
            strv_free(v, i);
            return -ENOMEM;
        }
    }
    *ret = v;
    return 0;
}
