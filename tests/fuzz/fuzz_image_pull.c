/* libFuzzer: the whole pull (src/image/pull.c): manifest (or index, then
 * the platform's manifest) -> config -> layers, with the digest, size and
 * diff_id checks and the limits, into a real store. The registry is this
 * file: the reg_* functions of registry.c are defined here and serve
 * documents from the input, so nothing touches the network.
 *
 * Input: two flag bytes, then sections separated by "\n@@\n". Section 0
 * answers the reference (a tag, or its digest); every section is also
 * served as the blob or manifest of its own digest. Before serving, the
 * placeholders @Dn@, @Sn@ and @Un@ in a section become the digest, size
 * and diff_id (sha256 of the gunzipped bytes) of section n, filled from
 * the last section to the first, so that seeds and their mutants carry
 * digests that match and the fuzzer reaches the layers.
 *   flags[0] bit 0: pull by the digest of section 0 (bit 1: a wrong one)
 *   bit 2: serve one blob corrupted (flags[1] picks which section)
 *   bits 3-5: the Content-Type of section 0 (none, each manifest type, ...)
 *   bit 6: tight limits (64 KiB a layer, 10 times its compressed size)
 *   bit 7: leave the placeholders as they are
 * Oracles: a pull that succeeds has verified everything it used (no
 * corrupted blob was served, the reference's digest held, the image id
 * is the config's digest, one layer per diff_id), and leaves nothing in
 * tmp/ either way (image_job.h). */
#include <zlib.h>

#include "image_job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SECTIONS 16

struct section {
    uint8_t *data;
    size_t len;
    char digest[72];
    bool corrupt;           /* served with one byte flipped */
    atomic_bool served_bad; /* ... and it was */
};

static struct section secs[MAX_SECTIONS];
static size_t n_secs;

static struct section *find(const char *digest)
{
    for (size_t i = 0; i < n_secs; i++)
        if (strcmp(secs[i].digest, digest) == 0)
            return &secs[i];
    return NULL;
}

/* The bytes served for s: a copy, corrupted if s is the chosen one. */
static uint8_t *serve(struct section *s)
{
    uint8_t *b = malloc(s->len ? s->len : 1);
    if (!b)
        return NULL;
    memcpy(b, s->data, s->len);
    if (s->corrupt && s->len) {
        b[s->len / 2] ^= 0x5a;
        atomic_store(&s->served_bad, true);
    }
    return b;
}

/* ---- registry.c, from memory ---------------------------------------------- */

struct reg_session {
    const char *content_type;
};

struct reg_stream {
    uint8_t *data;
    size_t len, off;
};

static const char *top_content_type;

int reg_endpoints_for(const char *host, const char *const *mirrors, size_t n_mirrors,
                      const char *const *insecure, size_t n_insecure, bool no_origin,
                      struct reg_endpoint **ret, size_t *ret_n, struct err *err)
{
    *ret = calloc(1, sizeof(**ret));
    if (!*ret)
        return err_set(err, ENOMEM, "endpoints");
    *ret_n = 1;
    return 0;
}

void reg_endpoints_free(struct reg_endpoint *eps, size_t n) { free(eps); }

int reg_session_new(const struct reg_endpoint *eps, size_t n_eps, const char *repo,
                    const struct image_auth *auth, const struct reg_options *opt,
                    struct reg_session **ret, struct err *err)
{
    *ret = calloc(1, sizeof(**ret));
    return *ret ? 0 : err_set(err, ENOMEM, "session");
}

void reg_session_free(struct reg_session *s) { free(s); }

int reg_get_manifest(struct reg_session *s, const char *reference, struct buf *ret_body,
                     char **ret_content_type, struct err *err)
{
    struct section *sec = image_digest_valid(reference) ? find(reference) : &secs[0];
    if (!sec || n_secs == 0)
        return err_set(err, ENOENT, "MANIFEST_UNKNOWN: manifest unknown (HTTP 404)");
    if (sec->len > IMAGE_MANIFEST_MAX)
        return err_set(err, EFBIG, "manifest too large");
    const char *ct = sec == &secs[0] ? top_content_type : NULL;
    if (ct && !(*ret_content_type = strdup(ct)))
        return err_set(err, ENOMEM, "manifest");
    uint8_t *b = serve(sec);
    ret_body->len = 0;
    int r = b ? buf_append(ret_body, b, sec->len) : -ENOMEM;
    free(b);
    return r < 0 ? err_set(err, ENOMEM, "manifest") : 0;
}

int reg_get_blob(struct reg_session *s, const char *digest, size_t max, struct buf *ret,
                 struct err *err)
{
    struct section *sec = find(digest);
    if (!sec)
        return err_set(err, ENOENT, "BLOB_UNKNOWN: blob unknown to registry (HTTP 404)");
    if (sec->len > max)
        return err_set(err, EFBIG, "blob larger than %zu bytes", max);
    uint8_t *b = serve(sec);
    ret->len = 0;
    int r = b ? buf_append(ret, b, sec->len) : -ENOMEM;
    free(b);
    return r < 0 ? err_set(err, ENOMEM, "blob") : 0;
}

int reg_blob_open(struct reg_session *s, const char *digest, struct reg_stream **ret,
                  struct err *err)
{
    struct section *sec = find(digest);
    if (!sec)
        return err_set(err, ENOENT, "BLOB_UNKNOWN: blob unknown to registry (HTTP 404)");
    struct reg_stream *st = calloc(1, sizeof(*st));
    if (!st || !(st->data = serve(sec))) {
        free(st);
        return err_set(err, ENOMEM, "blob");
    }
    st->len = sec->len;
    *ret = st;
    return 0;
}

int reg_stream_read(void *stream, const void **ret_buf, size_t *ret_len, struct err *err)
{
    struct reg_stream *st = stream;
    size_t n = st->len - st->off < 4096 ? st->len - st->off : 4096;
    *ret_buf = st->data + st->off;
    *ret_len = n;
    st->off += n;
    return 0;
}

void reg_stream_free(struct reg_stream *st)
{
    if (st)
        free(st->data);
    free(st);
}

/* ---- input ---------------------------------------------------------------- */

/* sha256 of the gunzipped bytes (of the bytes themselves if not gzip). */
static void diff_id_of(const uint8_t *data, size_t len, char out[72])
{
    if (len < 2 || data[0] != 0x1f || data[1] != 0x8b) {
        digest_of(data, len, out);
        return;
    }
    struct hasher *h = hasher_new();
    z_stream z = {0};
    uint8_t buf[16384];
    if (!h || inflateInit2(&z, 15 + 16) != Z_OK) {
        hasher_free(h);
        snprintf(out, 72, "sha256:%064d", 0);
        return;
    }
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    size_t total = 0;
    for (int zr = Z_OK; zr == Z_OK && total < (64u << 20);) {
        z.next_out = buf;
        z.avail_out = sizeof(buf);
        zr = inflate(&z, Z_NO_FLUSH);
        hasher_update(h, buf, sizeof(buf) - z.avail_out);
        total += sizeof(buf) - z.avail_out;
        if (zr == Z_STREAM_END && z.avail_in > 0 && inflateReset(&z) == Z_OK)
            zr = Z_OK; /* another gzip member */
        if (zr == Z_BUF_ERROR || (zr == Z_OK && z.avail_out == sizeof(buf) && z.avail_in == 0))
            break;
    }
    inflateEnd(&z);
    hasher_final(h, out);
    hasher_free(h);
}

/* Replaces the placeholders of section i with what sections > i are. */
static int fix(size_t i)
{
    struct buf out = {0};
    const uint8_t *p = secs[i].data, *end = p + secs[i].len;
    while (p < end) {
        size_t left = (size_t)(end - p);
        if (left >= 4 && p[0] == '@' && p[3] == '@' && p[2] >= '0' && p[2] <= '9' &&
            (size_t)(p[2] - '0') > i && (size_t)(p[2] - '0') < n_secs &&
            (p[1] == 'D' || p[1] == 'S' || p[1] == 'U')) {
            const struct section *t = &secs[p[2] - '0'];
            char v[72];
            if (p[1] == 'D')
                memcpy(v, t->digest, sizeof(v));
            else if (p[1] == 'S')
                snprintf(v, sizeof(v), "%zu", t->len);
            else
                diff_id_of(t->data, t->len, v);
            if (buf_append(&out, v, strlen(v)) < 0)
                return -ENOMEM;
            p += 4;
            continue;
        }
        if (buf_append(&out, p, 1) < 0)
            return -ENOMEM;
        p++;
    }
    free(secs[i].data);
    secs[i].data = out.data ? out.data : malloc(1);
    secs[i].len = out.len;
    return secs[i].data ? 0 : -ENOMEM;
}

static const char *const content_types[8] = {
    NULL,
    MT_OCI_MANIFEST,
    MT_OCI_INDEX,
    MT_DOCKER_MANIFEST,
    MT_DOCKER_LIST,
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
    "application/json",
    "text/html",
};

static void split(const uint8_t *data, size_t size, bool placeholders)
{
    static const char sep[] = "\n@@\n";
    n_secs = 0;
    const uint8_t *p = data, *end = data + size;
    while (n_secs < MAX_SECTIONS) {
        const uint8_t *s = memmem(p, (size_t)(end - p), sep, 4);
        size_t len = s ? (size_t)(s - p) : (size_t)(end - p);
        secs[n_secs] = (struct section){.data = malloc(len ? len : 1), .len = len};
        if (!secs[n_secs].data)
            abort();
        memcpy(secs[n_secs].data, p, len);
        n_secs++;
        if (!s)
            break;
        p = s + 4;
    }
    for (size_t i = n_secs; i-- > 0;) {
        if (placeholders && fix(i) < 0)
            abort();
        digest_of(secs[i].data, secs[i].len, secs[i].digest);
    }
}

static void check_result(const struct job *job, bool wrong_ref)
{
    for (size_t i = 0; i < n_secs; i++)
        if (atomic_load(&secs[i].served_bad))
            __builtin_trap(); /* a corrupted blob went into a successful pull */
    if (wrong_ref || job->n_results != 1)
        __builtin_trap(); /* a pull by a digest that nothing has succeeded */
    const struct image_info *img = job->results[0];
    struct section *cfg = find(img->id), *man = find(img->manifest);
    if (!cfg || !man)
        __builtin_trap(); /* an image made of documents never served */
    struct image_config_info ci;
    struct err err;
    if (image_config_parse(cfg->data, cfg->len, &ci, &err) < 0)
        __builtin_trap();
    if (ci.n_diff_ids != img->n_layers)
        __builtin_trap();
    image_config_info_clear(&ci);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t f = data[0], which = data[1];
    job_setup("pull", f & 64);
    split(data + 2, size - 2, !(f & 128));
    if (f & 4)
        secs[which % n_secs].corrupt = true;
    top_content_type = content_types[(f >> 3) & 7];

    char ref[200];
    bool wrong = false;
    if (f & 3) {
        char d[72];
        memcpy(d, secs[0].digest, sizeof(d));
        if (f & 2 && !(f & 1)) {
            d[7] = d[7] == 'a' ? 'b' : 'a';
            wrong = true;
        }
        snprintf(ref, sizeof(ref), "fuzz.example/x/y@%s", d);
    } else {
        snprintf(ref, sizeof(ref), "fuzz.example/x/y:latest");
    }
    struct job *job = job_new(JOB_PULL, ref);
    struct err err = {0};
    if (image_ref_parse(ref, &job->ref, &err) < 0)
        abort();
    job_pull_run(job);
    if (getenv("KINGLET_FUZZ_DEBUG"))
        fprintf(stderr, "job: %d %s\n", job->r, job->r < 0 ? job->err.msg : "ok");
    if (job->r == 0)
        check_result(job, wrong);
    job_finish(job);
    for (size_t i = 0; i < n_secs; i++)
        free(secs[i].data);
    n_secs = 0;
    return 0;
}
