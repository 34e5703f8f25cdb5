/* libFuzzer: manifest / index / config parsing and platform selection.
 *
 * Input: one selector byte, then the document. The selector's low four
 * bits pick the Content-Type the registry claims (none, each manifest and
 * index type, schema 1, plain JSON, ...; 15 = a string taken from the
 * input up to its first newline), the high bits the platform asked of an
 * index. */
#include <string.h>

#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const types[] = {
    NULL,
    MT_OCI_MANIFEST,
    MT_OCI_INDEX,
    MT_DOCKER_MANIFEST,
    MT_DOCKER_LIST,
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/json",
    "application/vnd.oci.image.manifest.v1+json; charset=utf-8",
    "APPLICATION/VND.OCI.IMAGE.INDEX.V1+JSON",
    "text/plain",
    "",
    "application/vnd.oci.artifact.manifest.v1+json",
    "application/octet-stream",
    MT_OCI_MANIFEST ", " MT_OCI_INDEX,
};

static const char *const platforms[][3] = {
    {"linux", "amd64", NULL},
    {"linux", "arm64", "v8"},
    {"linux", "arm", "v7"},
    {"windows", "amd64", NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    data++;
    size--;
    char ct[256];
    const char *content_type;
    if ((sel & 15) < ARRAY_SIZE(types)) {
        content_type = types[sel & 15];
    } else {
        const uint8_t *nl = memchr(data, '\n', size < sizeof(ct) - 1 ? size : sizeof(ct) - 1);
        size_t n = nl ? (size_t)(nl - data) : 0;
        memcpy(ct, data, n);
        ct[n] = '\0';
        content_type = ct;
        data += nl ? n + 1 : 0;
        size -= nl ? n + 1 : 0;
    }
    const char *const *plat = platforms[(sel >> 4) % ARRAY_SIZE(platforms)];

    struct image_manifest *m = NULL;
    struct err err;
    if (image_manifest_parse(content_type, data, size, &m, &err) == 0) {
        const struct image_descriptor *d;
        if (m->kind == IMAGE_MANIFEST_INDEX) {
            if (image_index_select(m, plat[0], plat[1], plat[2], &d, &err) == 0 &&
                (d < m->descs || d >= m->descs + m->n_descs))
                __builtin_trap(); /* the choice must be one of the entries */
        } else if (!m->config.digest || !image_digest_valid(m->config.digest)) {
            __builtin_trap(); /* an image manifest always has a valid config */
        }
        for (size_t i = 0; i < m->n_descs; i++)
            if (!m->descs[i].digest || !image_digest_valid(m->descs[i].digest))
                __builtin_trap(); /* parsed descriptors are verified digests */
        image_manifest_free(m);
    }
    struct image_config_info c;
    if (image_config_parse(data, size, &c, &err) == 0) {
        char **chain;
        if (image_chain_ids(c.diff_ids, c.n_diff_ids, &chain) == 0)
            strv_free(chain, c.n_diff_ids);
        image_config_info_clear(&c);
    }
    return 0;
}
