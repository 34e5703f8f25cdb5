/* The work of a pull, on its own thread (service.c starts it and applies
 * the result on the loop):
 *   manifest (by tag or digest; an index is resolved to the platform's
 *   manifest) -> config -> chain IDs -> layers, up to `concurrency` at once,
 *   each streamed from the registry through verification into a snapshot ->
 *   manifest and config blobs -> a record for the loop to commit.
 * Nothing is visible before its digest is verified: layers are unpacked
 * under tmp/ and renamed into snapshots/ only after their digest, size and
 * diff_id match; the record is only committed when every layer is in. */
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "image/internal.h"

void job_thread_background(void)
{
    /* per-thread on Linux: only this thread's nice value changes (0: the
     * calling thread, all that the helper's seccomp filter allows) */
    setpriority(PRIO_PROCESS, 0, 10);
}

int job_cancel_init(struct job *job)
{
    job->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return job->cancel_fd < 0 ? -errno : 0;
}

void job_cancel_close(struct job *job)
{
    if (job->cancel_fd >= 0)
        close(job->cancel_fd);
    job->cancel_fd = -1;
}

void job_cancel(struct job *job)
{
    atomic_store(&job->cancel, true);
    if (job->cancel_fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(job->cancel_fd, &one, sizeof(one)); /* stays readable */
        (void)n;
    }
}

int image_backoff(int fd, const atomic_bool *cancel, unsigned ms)
{
    uint64_t end = now_mono_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        if (cancel && atomic_load(cancel))
            return -ECANCELED;
        uint64_t now = now_mono_ns();
        if (now >= end)
            return 0;
        int left = (int)((end - now + 999999) / 1000000);
        if (fd < 0) {
            struct timespec ts = {left / 1000, (long)(left % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, left) > 0)
            return -ECANCELED; /* never read: every wait of the job ends */
    }
}

int job_backoff(struct job *job, unsigned ms)
{
    return image_backoff(job->cancel_fd, &job->cancel, ms);
}

int job_hold(struct job *job, const char *chain_id)
{
    pthread_mutex_lock(&job->mu);
    char **v = realloc(job->held, (job->n_held + 1) * sizeof(char *));
    int r = -ENOMEM;
    if (v) {
        job->held = v;
        if ((v[job->n_held] = strdup(chain_id))) {
            job->n_held++;
            r = 0;
        }
    }
    pthread_mutex_unlock(&job->mu);
    return r;
}

int job_add_result(struct job *job, struct image_info *img)
{
    struct image_info **v = realloc(job->results, (job->n_results + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    job->results = v;
    v[job->n_results++] = img;
    return 0;
}

int job_snap_acquire(struct job *job, const char *chain_id)
{
    if (job->remote)
        return helper_snap_acquire(job->remote, chain_id);
    struct store *st = job->sh->st;
    int a = store_snap_acquire(st, chain_id);
    if (a < 0)
        return a;
    if (job_hold(job, chain_id) < 0) {
        if (a == 0)
            store_snap_built(st, chain_id, false, 0, 0);
        store_snap_release(st, chain_id);
        return -ENOMEM;
    }
    return a;
}

void job_progress(struct job *job, const char *digest, const char *phase, uint64_t bytes,
                  uint64_t total)
{
    if (!digest)
        return;
    if (job->remote)
        helper_progress(job->remote, digest, phase, bytes, total);
    else if (job->sh->progress)
        job->sh->progress(job->sh->progress_data, &(struct image_progress){.ref = job->ref_str,
                                                                           .digest = digest,
                                                                           .phase = phase,
                                                                           .bytes = bytes,
                                                                           .total = total});
}

void job_snap_built(struct job *job, const char *chain_id, bool ok, uint64_t bytes, uint64_t inodes)
{
    if (job->remote)
        helper_snap_built(job->remote, chain_id, ok, bytes, inodes);
    else
        store_snap_built(job->sh->st, chain_id, ok, bytes, inodes);
}

int layer_build(struct job *job, const char *chain_id, const struct layer_expect *expect_in,
                const struct layer_opener *op, unsigned attempts, struct layer_stats *ret_stats,
                struct err *err)
{
    const struct image_service_shared *sh = job->sh;
    struct store *st = sh->st;
    struct layer_expect lim = *expect_in;
    lim.limits = &sh->limits;
    const struct layer_expect *expect = &lim;
    int a = job_snap_acquire(job, chain_id);
    if (a < 0)
        return err_set(err, -a, "layer %s", chain_id);
    uint64_t size = expect->size > 0 ? (uint64_t)expect->size : 0;
    if (a == 1) {
        job_progress(job, expect->digest, "exists", size, size);
        return 0; /* already unpacked, by us earlier or by a concurrent pull */
    }
    int r = 0;
    for (unsigned attempt = 0; attempt < attempts; attempt++) {
        char tmp[64], fs[80];
        r = store_tmpdir(st, tmp, err);
        if (r < 0)
            break;
        snprintf(fs, sizeof(fs), "%s/fs", tmp);
        int fd = -1;
        if (mkdirat(st->root_fd, fs, 0755) < 0 ||
            (fd = openat(st->root_fd, fs, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
            r = err_set(err, errno, "create `%s/%s`", st->root, fs);
            rm_rf_at(st->root_fd, tmp);
            break;
        }
        struct layer_source src;
        struct layer_stats stats;
        r = op->open(op->ctx, &src, err);
        if (r == 0) {
            r = image_layer_unpack(fd, &src, expect, &job->cancel, &stats, err);
            op->close(op->ctx);
        }
        close(fd);
        if (r == 0)
            r = store_snap_commit(st, tmp, chain_id, &stats, err);
        if (r == 0) {
            job_progress(job, expect->digest, "done", size, size);
            job_snap_built(job, chain_id, true, stats.bytes, stats.inodes);
            if (ret_stats)
                *ret_stats = stats;
            return 0;
        }
        rm_rf_at(st->root_fd, tmp);
        if (!reg_err_transient(err) || atomic_load(&job->cancel))
            break;
        log_debug("layer %s: %s; retrying", chain_id, err_str(err));
        if (job_backoff(job, 200u << attempt) < 0) {
            r = err_set(err, ECANCELED, "pull cancelled");
            break;
        }
    }
    job_progress(job, expect->digest, "failed", 0, size);
    job_snap_built(job, chain_id, false, 0, 0);
    return r;
}

/* ---- registry layers ------------------------------------------------------ */

struct layer_work {
    struct job *job;
    struct reg_session *sess;
    const struct image_manifest *man;
    char **diff_ids;
    char **chain_ids;
    atomic_uint next;
    pthread_mutex_t mu;
    bool failed;
    struct err err;
};

struct reg_opener {
    struct job *job;
    struct reg_session *sess;
    const char *digest;
    uint64_t size; /* the manifest's */
    struct reg_stream *stream;
    uint64_t got, shown_ns;
};

#define PROGRESS_EVERY_NS (100 * 1000000ull) /* ten lines a second at most */

/* The blob's bytes, counted for the progress display. */
static int reg_read(void *ctx, const void **ret_buf, size_t *ret_len, struct err *err)
{
    struct reg_opener *o = ctx;
    int r = reg_stream_read(o->stream, ret_buf, ret_len, err);
    if (r < 0)
        return r;
    o->got += *ret_len;
    uint64_t now = now_mono_ns();
    bool all = *ret_len == 0 || o->got >= o->size;
    if (all || now - o->shown_ns >= PROGRESS_EVERY_NS) {
        o->shown_ns = now;
        job_progress(o->job, o->digest, all ? "verifying" : "downloading", o->got, o->size);
    }
    return r;
}

static int reg_open(void *ctx, struct layer_source *ret, struct err *err)
{
    struct reg_opener *o = ctx;
    int r = reg_blob_open(o->sess, o->digest, &o->stream, err);
    if (r < 0)
        return r;
    o->got = 0;
    *ret = (struct layer_source){.read = reg_read, .ctx = o};
    return 0;
}

static void reg_close(void *ctx)
{
    struct reg_opener *o = ctx;
    reg_stream_free(o->stream);
    o->stream = NULL;
}

static void *layer_worker(void *arg)
{
    struct layer_work *w = arg;
    job_thread_background();
    for (;;) {
        unsigned i = atomic_fetch_add(&w->next, 1);
        if (i >= w->man->n_descs || atomic_load(&w->job->cancel))
            break;
        const struct image_descriptor *d = &w->man->descs[i];
        struct layer_expect ex = {
            .digest = d->digest, .size = (int64_t)d->size, .diff_id = w->diff_ids[i]};
        struct reg_opener o = {
            .job = w->job, .sess = w->sess, .digest = d->digest, .size = d->size};
        struct layer_opener op = {.open = reg_open, .close = reg_close, .ctx = &o};
        struct err err = {0};
        int r = layer_build(w->job, w->chain_ids[i], &ex, &op, 3, NULL, &err);
        if (r < 0) {
            err_wrap(&err, "layer %s", d->digest);
            pthread_mutex_lock(&w->mu);
            /* the first real error wins over the cancellations it causes */
            if (!w->failed || (w->err.code == ECANCELED && err.code != ECANCELED)) {
                w->failed = true;
                w->err = err;
            }
            pthread_mutex_unlock(&w->mu);
            job_cancel(w->job); /* the other layers stop, their backoffs too */
            break;
        }
    }
    return NULL;
}

static int fetch_layers(struct job *job, struct reg_session *sess, const struct image_manifest *man,
                        char **diff_ids, char **chain_ids, struct err *err)
{
    const struct image_service_shared *sh = job->sh;
    struct layer_work w = {
        .job = job, .sess = sess, .man = man, .diff_ids = diff_ids, .chain_ids = chain_ids};
    pthread_mutex_init(&w.mu, NULL);
    unsigned n = sh->concurrency;
    if (n > man->n_descs)
        n = (unsigned)man->n_descs;
    pthread_t th[64];
    if (n > ARRAY_SIZE(th))
        n = ARRAY_SIZE(th);
    unsigned started = 0;
    /* worker 0 is this thread; the others are helpers. Sessions are not
     * thread-safe, but each worker only reads the session except when it
     * (re)authenticates, which is serialised by taking the job mutex. */
    for (unsigned i = 1; i < n; i++) {
        if (pthread_create(&th[i], NULL, layer_worker, &w) != 0)
            break;
        started = i;
    }
    layer_worker(&w);
    for (unsigned i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&w.mu);
    if (w.failed) {
        *err = w.err;
        return -w.err.code;
    }
    if (atomic_load(&job->cancel))
        return err_set(err, ECANCELED, "pull cancelled");
    return 0;
}

/* ---- the pull ------------------------------------------------------------- */

static int get_verified_manifest(struct reg_session *sess, const char *reference,
                                 const char *want_digest, struct buf *body, char **ct,
                                 char digest[72], struct err *err)
{
    int r = reg_get_manifest(sess, reference, body, ct, err);
    if (r < 0)
        return r;
    digest_of(body->data, body->len, digest);
    if (want_digest && strcmp(digest, want_digest) != 0)
        return err_set(err, EPROTO, "manifest digest mismatch: got %s, expected %s", digest,
                       want_digest);
    return 0;
}

void job_pull_run(struct job *job)
{
    const struct image_service_shared *sh = job->sh;
    struct err *err = &job->err;
    struct reg_endpoint *eps = NULL;
    size_t n_eps = 0;
    struct reg_session *sess = NULL;
    struct buf body = {0}, cfg = {0};
    char *ct = NULL;
    struct image_manifest *top = NULL, *man = NULL;
    struct image_config_info ci = {0};
    char **chain = NULL;
    struct image_info *img = NULL;
    char top_digest[72], man_digest[72], cfg_digest[72];
    char *name = NULL;
    int r;

    bool no_origin = sh->no_origin;
    for (size_t i = 0; i < sh->n_mirror_only; i++)
        no_origin |= strcmp(sh->mirror_only[i], job->ref.domain) == 0;
    r = reg_endpoints_for(job->ref.domain, (const char *const *)sh->mirrors, sh->n_mirrors,
                          (const char *const *)sh->insecure, sh->n_insecure, no_origin, &eps,
                          &n_eps, err);
    if (r < 0)
        goto out;
    struct reg_options opt = {.certs_dir = sh->certs_dir,
                              .cancel = &job->cancel,
                              .cancel_fd = job->cancel_fd,
                              .progress_timeout_ms = sh->limits.progress_timeout_ms,
                              .min_rate = sh->limits.min_rate};
    r = reg_session_new(eps, n_eps, job->ref.path, &job->auth, &opt, &sess, err);
    if (r < 0)
        goto out;

    const char *reference = job->ref.digest ? job->ref.digest : job->ref.tag;
    r = get_verified_manifest(sess, reference, job->ref.digest, &body, &ct, top_digest, err);
    if (r < 0)
        goto out;
    r = image_manifest_parse(ct, body.data, body.len, &top, err);
    if (r < 0)
        goto out;
    if (top->kind == IMAGE_MANIFEST_INDEX) {
        const struct image_descriptor *d;
        r = image_index_select(top, sh->os, sh->arch, sh->variant, &d, err);
        if (r < 0)
            goto out;
        if (d->size > IMAGE_MANIFEST_MAX) {
            r = err_set(err, EFBIG, "manifest %s too large", d->digest);
            goto out;
        }
        body.len = 0;
        free(ct);
        ct = NULL;
        r = get_verified_manifest(sess, d->digest, d->digest, &body, &ct, man_digest, err);
        if (r < 0)
            goto out;
        r = image_manifest_parse(ct, body.data, body.len, &man, err);
        if (r < 0)
            goto out;
        if (man->kind != IMAGE_MANIFEST_IMAGE) {
            r = err_set(err, EINVAL, "index entry %s is not an image manifest", d->digest);
            goto out;
        }
    } else {
        man = TAKE_PTR(top);
        memcpy(man_digest, top_digest, sizeof(man_digest));
    }
    r = store_blob_write(sh->st, man_digest, body.data, body.len, err);
    if (r < 0)
        goto out;

    if (man->config.size > IMAGE_CONFIG_MAX) {
        r = err_set(err, EFBIG, "image config larger than %u bytes", IMAGE_CONFIG_MAX);
        goto out;
    }
    r = reg_get_blob(sess, man->config.digest, IMAGE_CONFIG_MAX, &cfg, err);
    if (r < 0) {
        err_wrap(err, "image config");
        goto out;
    }
    digest_of(cfg.data, cfg.len, cfg_digest);
    if (strcmp(cfg_digest, man->config.digest) != 0 || cfg.len != man->config.size) {
        r = err_set(err, EPROTO, "image config digest mismatch: got %s, expected %s", cfg_digest,
                    man->config.digest);
        goto out;
    }
    r = image_config_parse(cfg.data, cfg.len, &ci, err);
    if (r < 0)
        goto out;
    if (ci.n_diff_ids != man->n_descs) {
        r = err_set(err, EINVAL, "manifest has %zu layers but the config lists %zu", man->n_descs,
                    ci.n_diff_ids);
        goto out;
    }
    if (image_chain_ids(ci.diff_ids, ci.n_diff_ids, &chain) < 0) {
        r = err_set(err, ENOMEM, "chain ids");
        goto out;
    }
    r = fetch_layers(job, sess, man, ci.diff_ids, chain, err);
    if (r < 0)
        goto out;
    r = store_blob_write(sh->st, cfg_digest, cfg.data, cfg.len, err);
    if (r == 0)
        r = store_sync(sh->st, err);
    if (r < 0)
        goto out;

    img = calloc(1, sizeof(*img));
    if (!img) {
        r = err_set(err, ENOMEM, "pull");
        goto out;
    }
    img->id = strdup(cfg_digest);
    img->manifest = strdup(man_digest);
    img->user = strdup(ci.user);
    img->size = cfg.len;
    for (size_t i = 0; i < man->n_descs; i++)
        img->size += man->descs[i].size;
    img->created_ns = now_real_ns();
    img->chain_ids = TAKE_PTR(chain);
    img->n_layers = ci.n_diff_ids;
    name = image_ref_name(&job->ref);
    if (job->ref.tag) {
        img->repo_tags = calloc(1, sizeof(char *));
        if (img->repo_tags && name &&
            asprintf(&img->repo_tags[0], "%s:%s", name, job->ref.tag) >= 0)
            img->n_repo_tags = 1;
    }
    img->repo_digests = calloc(1, sizeof(char *));
    if (img->repo_digests && name &&
        asprintf(&img->repo_digests[0], "%s@%s", name, top_digest) >= 0)
        img->n_repo_digests = 1;
    if (!img->id || !img->manifest || !img->user || !img->n_repo_digests ||
        (job->ref.tag && !img->n_repo_tags) || job_add_result(job, img) < 0) {
        r = err_set(err, ENOMEM, "pull");
        goto out;
    }
    img = NULL;
out:
    if (r < 0)
        err_wrap(err, "pull `%s`", job->ref_str);
    job->r = r;
    free(name);
    image_info_free(img);
    if (chain)
        strv_free(chain, ci.n_diff_ids);
    image_config_info_clear(&ci);
    image_manifest_free(top);
    image_manifest_free(man);
    free(ct);
    buf_free(&body);
    buf_free(&cfg);
    reg_session_free(sess);
    reg_endpoints_free(eps, n_eps);
}
