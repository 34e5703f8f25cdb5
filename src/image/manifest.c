/* OCI image index/manifest and Docker schema 2 manifest list/manifest
 * parsing, platform selection, image config parsing. Pure: no I/O. The
 * documents come from registries and archives, so every size is bounded and
 * every field type checked. */
#include <string.h>

#include <jansson.h>

#include "image/internal.h"

static void descriptor_clear(struct image_descriptor *d)
{
    free(d->media_type);
    free(d->digest);
    free(d->os);
    free(d->arch);
    free(d->variant);
    *d = (struct image_descriptor){0};
}

void image_manifest_free(struct image_manifest *m)
{
    if (!m)
        return;
    descriptor_clear(&m->config);
    for (size_t i = 0; i < m->n_descs; i++)
        descriptor_clear(&m->descs[i]);
    free(m->descs);
    free(m);
}

/* The string member `key` of o copied into *ret (NULL when absent or not
 * a string); -ENOMEM, never a silent NULL, when the copy fails. */
static int dup_str(json_t *o, const char *key, char **ret)
{
    const char *s = json_string_value(json_object_get(o, key));
    *ret = s ? strdup(s) : NULL;
    return s && !*ret ? -ENOMEM : 0;
}

static int parse_descriptor(json_t *o, struct image_descriptor *d, bool platform, struct err *err)
{
    if (!json_is_object(o))
        return err_set(err, EINVAL, "descriptor is not an object");
    json_t *digest = json_object_get(o, "digest");
    if (!json_is_string(digest) || !image_digest_valid(json_string_value(digest)))
        return err_set(err, EINVAL, "descriptor has no valid sha256 digest");
    json_t *size = json_object_get(o, "size");
    if (!json_is_integer(size) || json_integer_value(size) < 0)
        return err_set(err, EINVAL, "descriptor has no valid size");
    d->digest = strdup(json_string_value(digest));
    d->size = (uint64_t)json_integer_value(size);
    if (!d->digest || dup_str(o, "mediaType", &d->media_type) < 0)
        return err_set(err, ENOMEM, "parse descriptor");
    if (platform) {
        json_t *p = json_object_get(o, "platform");
        if (json_is_object(p) &&
            (dup_str(p, "os", &d->os) < 0 || dup_str(p, "architecture", &d->arch) < 0 ||
             dup_str(p, "variant", &d->variant) < 0))
            return err_set(err, ENOMEM, "parse descriptor");
    }
    return 0;
}

static bool is_index_type(const char *t)
{
    return t && (strcmp(t, MT_OCI_INDEX) == 0 || strcmp(t, MT_DOCKER_LIST) == 0);
}

static bool is_manifest_type(const char *t)
{
    return t && (strcmp(t, MT_OCI_MANIFEST) == 0 || strcmp(t, MT_DOCKER_MANIFEST) == 0);
}

static bool is_layer_type(const char *t)
{
    static const char *const ok[] = {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.diff.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    };
    if (!t)
        return true; /* OCI allows it to be absent in practice; the bytes decide */
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
        if (strcmp(t, ok[i]) == 0)
            return true;
    return false;
}

/* The descriptors of an index's "manifests" or a manifest's "layers"
 * (at most `max`) into m->descs; `what` names one entry in errors. */
static int parse_descriptors(json_t *arr, size_t max, bool platform, const char *what,
                             struct image_manifest *m, struct err *err)
{
    size_t n = json_array_size(arr);
    if (n > max)
        return err_set(err, E2BIG, "%s count %zu is over the limit of %zu", what, n, max);
    m->descs = calloc(n ? n : 1, sizeof(*m->descs));
    if (!m->descs)
        return err_set(err, ENOMEM, "parse manifest");
    for (size_t i = 0; i < n; i++) {
        m->n_descs = i + 1;
        if (parse_descriptor(json_array_get(arr, i), &m->descs[i], platform, err) < 0)
            return err_wrap(err, "%s %zu", what, i);
    }
    return 0;
}

/* Whether json_loadb failed for memory, not for the input: jansson says
 * so, or gives no parse error at all (an allocation failed before parsing
 * began). */
static bool json_out_of_memory(const json_error_t *jerr)
{
    return json_error_code(jerr) == json_error_out_of_memory || jerr->text[0] == '\0';
}

int image_manifest_parse(const char *content_type, const void *data, size_t len,
                         struct image_manifest **ret, struct err *err)
{
    if (len > IMAGE_MANIFEST_MAX)
        return err_set(err, EFBIG, "manifest larger than %u bytes", IMAGE_MANIFEST_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_out_of_memory(&jerr))
        return err_set(err, ENOMEM, "manifest");
    if (!root)
        return err_set(err, EINVAL, "manifest is not valid JSON: %s (line %d)", jerr.text,
                       jerr.line);
    int r = 0;
    struct image_manifest *m = NULL;
    if (!json_is_object(root)) {
        r = err_set(err, EINVAL, "manifest is not a JSON object");
        goto out;
    }
    json_t *sv = json_object_get(root, "schemaVersion");
    if (json_is_integer(sv) && json_integer_value(sv) == 1) {
        r = err_set(err, EINVAL,
                    "Docker image manifest schema 1 is not supported (deprecated "
                    "format): push the image again with a current client");
        goto out;
    }
    if (content_type && strstr(content_type, "distribution.manifest.v1+")) {
        r = err_set(err, EINVAL, "Docker image manifest schema 1 (`%s`) is not supported",
                    content_type);
        goto out;
    }
    if (!json_is_integer(sv) || json_integer_value(sv) != 2) {
        r = err_set(err, EINVAL, "manifest has no schemaVersion 2");
        goto out;
    }
    const char *mt = json_string_value(json_object_get(root, "mediaType"));
    if (!mt && content_type && (is_index_type(content_type) || is_manifest_type(content_type)))
        mt = content_type;
    json_t *manifests = json_object_get(root, "manifests");
    json_t *layers = json_object_get(root, "layers");
    if (!mt)
        mt = manifests ? MT_OCI_INDEX : MT_OCI_MANIFEST;
    m = calloc(1, sizeof(*m));
    if (!m) {
        r = err_set(err, ENOMEM, "parse manifest");
        goto out;
    }
    if (is_index_type(mt)) {
        m->kind = IMAGE_MANIFEST_INDEX;
        if (!json_is_array(manifests)) {
            r = err_set(err, EINVAL, "image index has no manifests array");
            goto out;
        }
        r = parse_descriptors(manifests, IMAGE_INDEX_MAX, true, "image index entry", m, err);
        if (r < 0)
            goto out;
    } else if (is_manifest_type(mt)) {
        m->kind = IMAGE_MANIFEST_IMAGE;
        r = parse_descriptor(json_object_get(root, "config"), &m->config, false, err);
        if (r < 0) {
            err_wrap(err, "manifest config");
            goto out;
        }
        const char *ct = m->config.media_type;
        if (ct && strcmp(ct, "application/vnd.oci.image.config.v1+json") != 0 &&
            strcmp(ct, "application/vnd.docker.container.image.v1+json") != 0) {
            r = err_set(err, EINVAL, "not a container image: config media type `%.100s`", ct);
            goto out;
        }
        if (!json_is_array(layers)) {
            r = err_set(err, EINVAL, "manifest has no layers array");
            goto out;
        }
        r = parse_descriptors(layers, IMAGE_LAYERS_MAX, false, "layer", m, err);
        if (r < 0)
            goto out;
        for (size_t i = 0; i < m->n_descs; i++) {
            if (!is_layer_type(m->descs[i].media_type)) {
                r = err_set(err, EINVAL, "layer %zu has unsupported media type `%.100s`", i,
                            m->descs[i].media_type);
                goto out;
            }
        }
    } else {
        r = err_set(err, EINVAL, "unsupported manifest media type `%.100s`", mt);
        goto out;
    }
    *ret = TAKE_PTR(m);
out:
    image_manifest_free(m);
    json_decref(root);
    return r;
}

static bool str_eq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

/* arm64 without a variant means v8, arm without one means v7. */
static const char *norm_variant(const char *arch, const char *variant)
{
    if (variant && *variant)
        return variant;
    if (arch && strcmp(arch, "arm64") == 0)
        return "v8";
    if (arch && strcmp(arch, "arm") == 0)
        return "v7";
    return NULL;
}

int image_index_select(const struct image_manifest *idx, const char *os, const char *arch,
                       const char *variant, const struct image_descriptor **ret, struct err *err)
{
    const struct image_descriptor *best = NULL;
    int best_score = -1;
    const char *want_v = variant ? norm_variant(arch, variant) : NULL;
    for (size_t i = 0; i < idx->n_descs; i++) {
        const struct image_descriptor *d = &idx->descs[i];
        if (!str_eq(d->os, os) || !str_eq(d->arch, arch))
            continue;
        if (d->media_type && !is_manifest_type(d->media_type))
            continue;
        const char *v = norm_variant(d->arch, d->variant);
        int score;
        if (want_v)
            score = str_eq(v, want_v) ? 2 : -1;
        else
            score = (!d->variant || !*d->variant || str_eq(v, norm_variant(arch, NULL))) ? 2 : 1;
        if (score > best_score) {
            best = d;
            best_score = score;
        }
    }
    if (best) {
        *ret = best;
        return 0;
    }
    struct buf b = {0};
    for (size_t i = 0; i < idx->n_descs && b.len < 300; i++) {
        const struct image_descriptor *d = &idx->descs[i];
        if (!d->os || strcmp(d->os, "unknown") == 0)
            continue;
        buf_printf(&b, "%s%s/%s%s%s", b.len ? ", " : "", d->os, d->arch ? d->arch : "?",
                   d->variant ? "/" : "", d->variant ? d->variant : "");
    }
    int r =
        err_set(err, ENOENT, "no image for platform %s/%s%s%s in the index; offered: %s", os, arch,
                variant ? "/" : "", variant ? variant : "", b.len ? (char *)b.data : "none");
    buf_free(&b);
    return r;
}

void image_config_info_clear(struct image_config_info *c)
{
    free(c->user);
    free(c->os);
    free(c->arch);
    strv_free(c->diff_ids, c->n_diff_ids);
    *c = (struct image_config_info){0};
}

int image_config_parse(const void *data, size_t len, struct image_config_info *ret, struct err *err)
{
    if (len > IMAGE_CONFIG_MAX)
        return err_set(err, EFBIG, "image config larger than %u bytes", IMAGE_CONFIG_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!root && json_out_of_memory(&jerr))
        return err_set(err, ENOMEM, "image config");
    if (!root)
        return err_set(err, EINVAL, "image config is not valid JSON: %s", jerr.text);
    struct image_config_info c = {0};
    int r = 0;
    if (!json_is_object(root)) {
        r = err_set(err, EINVAL, "image config is not a JSON object");
        goto out;
    }
    json_t *cfg = json_object_get(root, "config");
    const char *user = json_is_object(cfg) ? json_string_value(json_object_get(cfg, "User")) : NULL;
    c.user = strdup(user ? user : "");
    if (dup_str(root, "os", &c.os) < 0 || dup_str(root, "architecture", &c.arch) < 0) {
        r = err_set(err, ENOMEM, "parse image config");
        goto out;
    }
    json_t *rootfs = json_object_get(root, "rootfs");
    json_t *diff_ids = json_is_object(rootfs) ? json_object_get(rootfs, "diff_ids") : NULL;
    if (!json_is_array(diff_ids)) {
        r = err_set(err, EINVAL, "image config has no rootfs.diff_ids");
        goto out;
    }
    size_t n = json_array_size(diff_ids);
    if (n > IMAGE_LAYERS_MAX) {
        r = err_set(err, E2BIG, "image config lists %zu layers (limit %d)", n, IMAGE_LAYERS_MAX);
        goto out;
    }
    c.diff_ids = calloc(n ? n : 1, sizeof(char *));
    if (!c.user || !c.diff_ids) {
        r = err_set(err, ENOMEM, "parse image config");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(diff_ids, i));
        if (!image_digest_valid(s)) {
            r = err_set(err, EINVAL, "image config diff_id %zu is not a sha256 digest", i);
            goto out;
        }
        c.diff_ids[i] = strdup(s);
        c.n_diff_ids = i + 1;
        if (!c.diff_ids[i]) {
            r = err_set(err, ENOMEM, "parse image config");
            goto out;
        }
    }
    *ret = c;
    c = (struct image_config_info){0};
out:
    image_config_info_clear(&c);
    json_decref(root);
    return r;
}
