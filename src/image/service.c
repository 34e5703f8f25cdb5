/* The image service: the in-memory index on the loop thread, pull and import
 * jobs on their own threads, persistence through the libuv thread pool.
 *
 * A job thread does all the slow work (network, hashing, extraction, fsync)
 * and hands back finished records through a mutex-protected queue and a
 * uv_async_t. The loop merges them into the index, serialises the index and
 * queues the atomic write of images.json on the thread pool; a job's callback
 * runs once the write that contains its record is durable. Saves are
 * serialised: a save requested while one is running coalesces into the
 * next. Removal is the same in reverse: the index changes, the save runs,
 * then garbage collection removes layers and blobs on the thread pool. */
#include <string.h>
#include <sys/utsname.h>

#include "image/internal.h"

struct waiter {
    void (*fn)(struct image_service *svc, void *ctx, int r, const struct err *err);
    void *ctx;
    struct waiter *next;
};

struct save_req {
    uv_work_t work;
    struct image_service *svc;
    char *json;
    bool gc;
    char **keep_blobs;
    size_t n_keep;
    int r;
    struct err err;
    struct waiter *waiters;
};

struct image_service {
    uv_loop_t *loop;
    struct store st;
    struct image_service_shared sh;
    struct image_info **imgs;
    size_t n_imgs;
    struct image_hold **holds;
    size_t n_holds;

    uv_async_t async;
    pthread_mutex_t mu; /* done queue and the active job list */
    struct job *active;
    struct job *done;

    unsigned n_jobs; /* the async handle keeps the loop alive while > 0 */
    bool saving;
    bool gc_pending;
    struct waiter *pending;
    bool closing;
};

const struct image_service_shared *image_service_shared(struct image_service *svc)
{
    return &svc->sh;
}

/* ---- helpers -------------------------------------------------------------- */

static int strv_add(char ***v, size_t *n, const char *s)
{
    return strv_contains(*v, *n, s) ? 0 : strv_push(v, n, s);
}

static const char *host_arch(const char **variant)
{
    struct utsname u;
    *variant = NULL;
    if (uname(&u) < 0)
        return "amd64";
    if (strcmp(u.machine, "x86_64") == 0)
        return "amd64";
    if (strcmp(u.machine, "aarch64") == 0)
        return "arm64";
    if (str_has_prefix(u.machine, "armv7")) {
        *variant = "v7";
        return "arm";
    }
    if (str_has_prefix(u.machine, "armv6")) {
        *variant = "v6";
        return "arm";
    }
    if (strcmp(u.machine, "i686") == 0 || strcmp(u.machine, "i386") == 0)
        return "386";
    static const char *const same[] = {"ppc64le", "s390x", "riscv64"};
    for (size_t i = 0; i < ARRAY_SIZE(same); i++)
        if (strcmp(u.machine, same[i]) == 0)
            return same[i];
    return "amd64";
}

/* ---- saving ---------------------------------------------------------------- */

static void start_save(struct image_service *svc);

static void save_work(uv_work_t *w)
{
    struct save_req *s = w->data;
    if (s->json)
        s->r = store_records_write(&s->svc->st, s->json, &s->err);
    else
        s->r = err_set(&s->err, ENOMEM, "serialise image records");
    if (s->r == 0 && s->gc) {
        store_snap_gc(&s->svc->st);
        store_blob_gc(&s->svc->st, s->keep_blobs, s->n_keep);
    }
}

static void finish_free(struct image_service *svc);

static void save_done(uv_work_t *w, int status)
{
    struct save_req *s = w->data;
    struct image_service *svc = s->svc;
    svc->saving = false;
    for (struct waiter *x = s->waiters, *next; x; x = next) {
        next = x->next;
        x->fn(svc, x->ctx, s->r, &s->err);
        free(x);
    }
    free(s->json);
    strv_free(s->keep_blobs, s->n_keep);
    free(s);
    if (svc->closing) {
        finish_free(svc);
        return;
    }
    if (svc->pending || svc->gc_pending)
        start_save(svc);
}

static void start_save(struct image_service *svc)
{
    if (svc->saving)
        return;
    struct save_req *s = calloc(1, sizeof(*s));
    if (!s)
        return; /* retried at the next request */
    s->svc = svc;
    s->json = store_records_dump(svc->imgs, svc->n_imgs, svc->holds, svc->n_holds);
    s->waiters = svc->pending;
    svc->pending = NULL;
    if (svc->gc_pending) {
        /* blobs to keep: everything a record names */
        s->gc = true;
        svc->gc_pending = false;
        s->keep_blobs = calloc(2 * svc->n_imgs + 1, sizeof(char *));
        for (size_t i = 0; s->keep_blobs && i < svc->n_imgs; i++) {
            s->keep_blobs[s->n_keep++] = strdup(svc->imgs[i]->id);
            s->keep_blobs[s->n_keep++] = strdup(svc->imgs[i]->manifest);
        }
        if (!s->keep_blobs)
            s->gc = false;
    }
    s->work.data = s;
    svc->saving = true;
    if (uv_queue_work(svc->loop, &s->work, save_work, save_done) < 0) {
        svc->saving = false;
        s->r = err_set(&s->err, EIO, "queue save");
        save_done(&s->work, 0);
    }
}

static void request_save(struct image_service *svc, bool gc,
                         void (*fn)(struct image_service *, void *, int, const struct err *),
                         void *ctx)
{
    if (fn) {
        struct waiter *w = calloc(1, sizeof(*w));
        if (w) {
            *w = (struct waiter){.fn = fn, .ctx = ctx};
            struct waiter **tail = &svc->pending;
            while (*tail)
                tail = &(*tail)->next;
            *tail = w;
        } else {
            struct err e;
            err_set(&e, ENOMEM, "save");
            fn(svc, ctx, -ENOMEM, &e);
        }
    }
    if (gc)
        svc->gc_pending = true;
    start_save(svc);
}

/* ---- index ------------------------------------------------------------------ */

static struct image_info *find_by_id(struct image_service *svc, const char *id)
{
    for (size_t i = 0; i < svc->n_imgs; i++)
        if (strcmp(svc->imgs[i]->id, id) == 0)
            return svc->imgs[i];
    return NULL;
}

static void drop_image(struct image_service *svc, size_t i)
{
    struct image_info *img = svc->imgs[i];
    for (size_t k = 0; k < img->n_layers; k++)
        store_snap_release(&svc->st, img->chain_ids[k]);
    image_info_free(img);
    memmove(&svc->imgs[i], &svc->imgs[i + 1], (svc->n_imgs - i - 1) * sizeof(*svc->imgs));
    svc->n_imgs--;
}

/* Merges a finished record; ownership of img passes to the index. */
static int commit_record(struct image_service *svc, struct image_info *img)
{
    /* tags and digests move to the new image */
    for (size_t i = 0; i < svc->n_imgs; i++) {
        struct image_info *o = svc->imgs[i];
        if (strcmp(o->id, img->id) == 0)
            continue;
        for (size_t t = 0; t < img->n_repo_tags; t++)
            strv_remove(o->repo_tags, &o->n_repo_tags, img->repo_tags[t]);
        for (size_t t = 0; t < img->n_repo_digests; t++)
            strv_remove(o->repo_digests, &o->n_repo_digests, img->repo_digests[t]);
    }
    struct image_info *e = find_by_id(svc, img->id);
    if (e) {
        int r = 0;
        for (size_t t = 0; t < img->n_repo_tags && r == 0; t++)
            r = strv_add(&e->repo_tags, &e->n_repo_tags, img->repo_tags[t]);
        for (size_t t = 0; t < img->n_repo_digests && r == 0; t++)
            r = strv_add(&e->repo_digests, &e->n_repo_digests, img->repo_digests[t]);
        image_info_free(img);
        return r;
    }
    struct image_info **v = realloc(svc->imgs, (svc->n_imgs + 1) * sizeof(*v));
    if (!v) {
        image_info_free(img);
        return -ENOMEM;
    }
    svc->imgs = v;
    v[svc->n_imgs++] = img;
    for (size_t k = 0; k < img->n_layers; k++)
        store_snap_ref(&svc->st, img->chain_ids[k]);
    return 0;
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Index of the image ref names, or -1. *by_tag tells how it matched. */
static ssize_t lookup_index(struct image_service *svc, const char *ref, const char **ret_tag)
{
    if (ret_tag)
        *ret_tag = NULL;
    if (!ref || !*ref)
        return -1;
    const char *hex = str_has_prefix(ref, "sha256:") ? ref + 7 : ref;
    size_t hl = strlen(hex);
    if (hl >= 12 && hl <= 64 && is_hex(hex, hl)) {
        ssize_t found = -1;
        for (size_t i = 0; i < svc->n_imgs; i++)
            if (strncmp(svc->imgs[i]->id + 7, hex, hl) == 0) {
                if (found >= 0)
                    return -1; /* ambiguous */
                found = (ssize_t)i;
            }
        if (found >= 0 || hl == 64)
            return found;
    }
    struct image_ref r;
    if (image_ref_parse(ref, &r, NULL) < 0)
        return -1;
    _cleanup_free_ char *name = image_ref_name(&r);
    _cleanup_free_ char *want = NULL;
    ssize_t found = -1;
    if (name && r.digest && asprintf(&want, "%s@%s", name, r.digest) >= 0) {
        for (size_t i = 0; i < svc->n_imgs && found < 0; i++)
            if (strv_contains(svc->imgs[i]->repo_digests, svc->imgs[i]->n_repo_digests, want) ||
                strcmp(svc->imgs[i]->manifest, r.digest) == 0)
                found = (ssize_t)i;
    } else if (name && r.tag && asprintf(&want, "%s:%s", name, r.tag) >= 0) {
        for (size_t i = 0; i < svc->n_imgs && found < 0; i++)
            if (strv_contains(svc->imgs[i]->repo_tags, svc->imgs[i]->n_repo_tags, want)) {
                found = (ssize_t)i;
                if (ret_tag) {
                    /* points into the record, stable until the loop runs */
                    for (size_t t = 0; t < svc->imgs[i]->n_repo_tags; t++)
                        if (strcmp(svc->imgs[i]->repo_tags[t], want) == 0)
                            *ret_tag = svc->imgs[i]->repo_tags[t];
                }
            }
    }
    image_ref_clear(&r);
    return found;
}

const struct image_info *image_lookup(struct image_service *svc, const char *ref)
{
    ssize_t i = lookup_index(svc, ref, NULL);
    return i < 0 ? NULL : svc->imgs[i];
}

int image_list(struct image_service *svc, const char *filter, const struct image_info ***ret)
{
    const struct image_info **v = calloc(svc->n_imgs ? svc->n_imgs : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    int n = 0;
    if (filter && *filter) {
        ssize_t i = lookup_index(svc, filter, NULL);
        if (i >= 0)
            v[n++] = svc->imgs[i];
    } else {
        for (size_t i = 0; i < svc->n_imgs; i++)
            v[n++] = svc->imgs[i];
    }
    *ret = v;
    return n;
}

/* ---- jobs ------------------------------------------------------------------- */

static void job_free(struct job *job)
{
    if (!job)
        return;
    free(job->ref_str);
    image_ref_clear(&job->ref);
    char **a = (char **)&job->auth;
    for (size_t i = 0; i < sizeof(job->auth) / sizeof(char *); i++)
        if (a[i]) {
            explicit_bzero(a[i], strlen(a[i]));
            free(a[i]);
        }
    for (size_t i = 0; i < job->n_results; i++)
        image_info_free(job->results[i]);
    free(job->results);
    strv_free(job->held, job->n_held);
    free(job->waiters);
    free(job->rows);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

static int job_wait(struct job *job, image_pull_cb cb, image_progress_fn progress, void *data)
{
    struct job_waiter *w = realloc(job->waiters, (job->n_waiters + 1) * sizeof(*w));
    if (!w)
        return -ENOMEM;
    job->waiters = w;
    w[job->n_waiters++] = (struct job_waiter){.cb = cb, .progress = progress, .data = data};
    if (progress)
        atomic_store(&job->watched, true);
    return 0;
}

/* ---- progress for the loop's watchers ------------------------------------- */

void job_progress_note(struct job *job, const struct image_progress *p)
{
    const struct image_service_shared *sh = job->sh;
    if (sh->progress)
        sh->progress(sh->progress_data, p);
    if (!job->svc || !atomic_load(&job->watched))
        return;
    pthread_mutex_lock(&job->mu);
    struct job_row *row = NULL;
    for (size_t i = 0; i < job->n_rows && !row; i++)
        if (strcmp(job->rows[i].digest, p->digest) == 0)
            row = &job->rows[i];
    if (!row && job->n_rows < JOB_ROWS_MAX) {
        struct job_row *v = realloc(job->rows, (job->n_rows + 1) * sizeof(*v));
        if (v) {
            job->rows = v;
            row = &v[job->n_rows++];
            *row = (struct job_row){0};
            snprintf(row->digest, sizeof(row->digest), "%s", p->digest);
        }
    }
    bool wake = false;
    if (row) {
        snprintf(row->phase, sizeof(row->phase), "%s", p->phase);
        row->bytes = p->bytes;
        row->total = p->total;
        row->dirty = true;
        wake = !job->rows_dirty;
        job->rows_dirty = true;
    }
    pthread_mutex_unlock(&job->mu);
    if (wake)
        uv_async_send(&job->svc->async);
}

/* Copies job's rows (only the changed ones unless all) and marks them
 * taken; NULL when there are none or no memory. */
static struct job_row *rows_take(struct job *job, bool all, size_t *ret_n)
{
    pthread_mutex_lock(&job->mu);
    struct job_row *v = job->n_rows ? malloc(job->n_rows * sizeof(*v)) : NULL;
    size_t n = 0;
    for (size_t i = 0; v && i < job->n_rows; i++) {
        if (job->rows[i].dirty || all)
            v[n++] = job->rows[i];
        if (!all)
            job->rows[i].dirty = false;
    }
    if (!all)
        job->rows_dirty = false;
    pthread_mutex_unlock(&job->mu);
    *ret_n = n;
    return v;
}

static void rows_show(struct job *job, const struct job_row *rows, size_t n,
                      const struct job_waiter *only)
{
    for (size_t k = 0; k < n; k++) {
        struct image_progress p = {.ref = job->ref_str,
                                   .digest = rows[k].digest,
                                   .phase = rows[k].phase,
                                   .bytes = rows[k].bytes,
                                   .total = rows[k].total};
        if (only) {
            only->progress(only->data, &p);
            continue;
        }
        /* by index: a callback may add a waiter (and move the array) */
        for (size_t i = 0; i < job->n_waiters; i++)
            if (job->waiters[i].progress && !job->waiters[i].gone)
                job->waiters[i].progress(job->waiters[i].data, &p);
    }
}

/* On the loop: what changed in the watched jobs' rows goes to their
 * watchers. Jobs are freed on the loop only, so the list copied under the
 * lock stays valid while the callbacks (which may abandon a pull, and so
 * take the lock) run without it. */
static void progress_flush(struct image_service *svc)
{
    size_t n = 0;
    pthread_mutex_lock(&svc->mu);
    struct job **jobs = malloc((svc->n_jobs + 1) * sizeof(*jobs));
    for (int l = 0; l < 2 && jobs; l++)
        for (struct job *j = l ? svc->done : svc->active; j && n <= svc->n_jobs; j = j->next)
            if (atomic_load(&j->watched))
                jobs[n++] = j;
    pthread_mutex_unlock(&svc->mu);
    for (size_t i = 0; i < n; i++) {
        size_t nr;
        struct job_row *rows = rows_take(jobs[i], false, &nr);
        rows_show(jobs[i], rows, nr, NULL);
        free(rows);
    }
    free(jobs);
}

/* Every waiter gets the result, those that gave up too (they free what
 * they hold in their callback). */
static void job_notify(struct job *job, int r, const struct err *err, const char *id)
{
    for (size_t i = 0; i < job->n_waiters; i++)
        if (job->waiters[i].cb)
            job->waiters[i].cb(job->waiters[i].data, r, err, id);
}

static void job_release_holds(struct image_service *svc, struct job *job)
{
    for (size_t i = 0; i < job->n_held; i++)
        store_snap_release(&svc->st, job->held[i]);
    strv_free(job->held, job->n_held);
    job->held = NULL;
    job->n_held = 0;
}

static void job_thread(void *arg)
{
    struct job *job = arg;
    job_thread_background();
    job_helper_run(job);
    struct image_service *svc = job->svc;
    pthread_mutex_lock(&svc->mu);
    /* move from active to done */
    for (struct job **p = &svc->active; *p; p = &(*p)->next)
        if (*p == job) {
            *p = job->next;
            break;
        }
    job->next = svc->done;
    svc->done = job;
    pthread_mutex_unlock(&svc->mu);
    uv_async_send(&svc->async);
}

static void job_saved(struct image_service *svc, void *ctx, int r, const struct err *err)
{
    struct job *job = ctx;
    /* the records are in the index (and counted) now: holds can go */
    job_release_holds(svc, job);
    char *id = job->n_results ? job->results[job->n_results - 1]->id : NULL;
    job_notify(job, r, err, r < 0 ? NULL : id);
    job_free(job);
}

static void on_async(uv_async_t *a)
{
    struct image_service *svc = a->data;
    progress_flush(svc); /* a job's last steps before its result */
    pthread_mutex_lock(&svc->mu);
    struct job *list = svc->done;
    svc->done = NULL;
    pthread_mutex_unlock(&svc->mu);
    /* oldest first */
    struct job *rev = NULL;
    while (list) {
        struct job *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        struct job *job = rev;
        rev = rev->next;
        uv_thread_join(&job->thread);
        if (--svc->n_jobs == 0)
            uv_unref((uv_handle_t *)&svc->async);
        if (job->r < 0) {
            job_release_holds(svc, job);
            job_notify(job, job->r, &job->err, NULL);
            job_free(job);
            continue;
        }
        int r = 0;
        for (size_t i = 0; i < job->n_results && r == 0; i++) {
            /* commit_record takes ownership; keep the last id for the callback */
            struct image_info *img = job->results[i];
            job->results[i] = calloc(1, sizeof(struct image_info));
            if (job->results[i])
                job->results[i]->id = strdup(img->id);
            r = commit_record(svc, img);
        }
        if (r < 0) {
            struct err e;
            err_set(&e, -r, "commit image record");
            job_release_holds(svc, job);
            job_notify(job, r, &e, NULL);
            job_free(job);
            continue;
        }
        request_save(svc, false, job_saved, job);
    }
}

static int job_start(struct image_service *svc, struct job *job, struct err *err)
{
    job->svc = svc;
    job->sh = &svc->sh;
    pthread_mutex_lock(&svc->mu);
    job->next = svc->active;
    svc->active = job;
    pthread_mutex_unlock(&svc->mu);
    uv_thread_options_t opt = {.flags = UV_THREAD_HAS_STACK_SIZE, .stack_size = 1u << 20};
    int r = uv_thread_create_ex(&job->thread, &opt, job_thread, job);
    if (r < 0) {
        pthread_mutex_lock(&svc->mu);
        for (struct job **p = &svc->active; *p; p = &(*p)->next)
            if (*p == job) {
                *p = job->next;
                break;
            }
        pthread_mutex_unlock(&svc->mu);
        return err_set(err, -r, "start thread");
    }
    if (svc->n_jobs++ == 0)
        uv_ref((uv_handle_t *)&svc->async);
    return 0;
}

static struct job *job_new(int kind)
{
    struct job *job = calloc(1, sizeof(*job));
    if (!job)
        return NULL;
    job->kind = kind;
    job->cancel_fd = -1; /* the helper's waits need one, the job thread's not */
    pthread_mutex_init(&job->mu, NULL);
    return job;
}

static char *dup_opt(const char *s) { return s && *s ? strdup(s) : NULL; }

/* A caller's credentials end up in request headers (auth and the tokens
 * as they are, user and password base64-encoded) and form bodies: a CR or
 * LF there would start a header or a request of the caller's making.
 * Tokens and auth are token68 (printable ASCII without spaces); names and
 * passwords may be any UTF-8 but no control byte. */
static int auth_field_check(const char *what, const char *v, bool token, struct err *err)
{
    for (const unsigned char *p = (const unsigned char *)v; p && *p; p++) {
        bool ctl = *p < 0x20 || *p == 0x7f;
        if (ctl || (token && (*p == ' ' || *p > 0x7f)))
            return err_set(err, EINVAL, "the credentials' %s holds a %s (byte %zu)", what,
                           ctl ? "control character" : "character not allowed",
                           (size_t)(p - (const unsigned char *)v));
    }
    return 0;
}

int image_auth_check(const struct image_auth *a, struct err *err)
{
    if (!a)
        return 0;
    const struct {
        const char *what, *v;
        bool token;
    } fields[] = {
        {"username", a->username, false},
        {"password", a->password, false},
        {"auth", a->auth, true},
        {"server_address", a->server_address, false},
        {"identity_token", a->identity_token, true},
        {"registry_token", a->registry_token, true},
    };
    for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
        int r = auth_field_check(fields[i].what, fields[i].v, fields[i].token, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static bool opt_eq(const char *a, const char *b)
{
    return strcmp(a && *a ? a : "", b && *b ? b : "") == 0;
}

/* A pull of ref with the same credentials under way and not given up, or
 * NULL. */
static struct job *pull_under_way(struct image_service *svc, const char *ref,
                                  const struct image_auth *auth)
{
    static const struct image_auth none = {0};
    const struct image_auth *a = auth ? auth : &none;
    struct job *found = NULL;
    pthread_mutex_lock(&svc->mu);
    for (struct job *j = svc->active; j && !found; j = j->next) {
        const struct image_auth *b = &j->auth;
        if (j->kind == JOB_PULL && !atomic_load(&j->cancel) && strcmp(j->ref_str, ref) == 0 &&
            opt_eq(a->username, b->username) && opt_eq(a->password, b->password) &&
            opt_eq(a->auth, b->auth) && opt_eq(a->server_address, b->server_address) &&
            opt_eq(a->identity_token, b->identity_token) &&
            opt_eq(a->registry_token, b->registry_token))
            found = j;
    }
    pthread_mutex_unlock(&svc->mu);
    return found;
}

void image_pull_abandon(struct image_service *svc, image_pull_cb cb, void *data)
{
    pthread_mutex_lock(&svc->mu);
    for (int l = 0; l < 2; l++)
        for (struct job *j = l ? svc->done : svc->active; j; j = j->next)
            for (size_t i = 0; i < j->n_waiters; i++) {
                struct job_waiter *w = &j->waiters[i];
                if (w->cb != cb || w->data != data || w->gone)
                    continue;
                w->gone = true;
                if (++j->n_gone == j->n_waiters) {
                    job_cancel(j); /* the helper is killed */
                    store_snap_wake(j->sh->st);
                    log_debug("`%s`: no caller waits any more: pull cancelled", j->ref_str);
                }
                pthread_mutex_unlock(&svc->mu);
                return;
            }
    pthread_mutex_unlock(&svc->mu);
}

/* A watcher joins a pull under way: it is told so, then where each layer
 * is. */
static void join_shown(struct job *job, image_progress_fn progress, void *data)
{
    progress(data, &(struct image_progress){.ref = job->ref_str, .phase = "waiting"});
    size_t n;
    struct job_row *rows = rows_take(job, true, &n);
    rows_show(job, rows, n, &(struct job_waiter){.progress = progress, .data = data});
    free(rows);
}

int image_pull(struct image_service *svc, const char *ref, const struct image_auth *auth,
               image_pull_cb cb, void *data, struct err *err)
{
    return image_pull_progress(svc, ref, auth, cb, NULL, data, err);
}

int image_pull_progress(struct image_service *svc, const char *ref, const struct image_auth *auth,
                        image_pull_cb cb, image_progress_fn progress, void *data, struct err *err)
{
    int r = image_auth_check(auth, err);
    if (r < 0)
        return r;
    /* the job's thread never touches the waiters: the loop may add one */
    struct job *shared = pull_under_way(svc, ref, auth);
    if (shared) {
        if (job_wait(shared, cb, progress, data) < 0)
            return err_set(err, ENOMEM, "pull");
        if (progress)
            join_shown(shared, progress, data);
        return 0;
    }
    struct job *job = job_new(JOB_PULL);
    if (!job)
        return err_set(err, ENOMEM, "pull");
    r = image_ref_parse(ref, &job->ref, err);
    if (r < 0) {
        job_free(job);
        return r;
    }
    job->ref_str = strdup(ref);
    if (auth) {
        job->auth.username = dup_opt(auth->username);
        job->auth.password = dup_opt(auth->password);
        job->auth.auth = dup_opt(auth->auth);
        job->auth.server_address = dup_opt(auth->server_address);
        job->auth.identity_token = dup_opt(auth->identity_token);
        job->auth.registry_token = dup_opt(auth->registry_token);
    }
    if (!job->ref_str || job_wait(job, cb, progress, data) < 0) {
        job_free(job);
        return err_set(err, ENOMEM, "pull");
    }
    r = job_start(svc, job, err);
    if (r < 0)
        job_free(job);
    return r;
}

int image_import(struct image_service *svc, const char *path, image_pull_cb cb, void *data,
                 struct err *err)
{
    struct job *job = job_new(JOB_IMPORT);
    if (!job || !(job->ref_str = strdup(path)) || job_wait(job, cb, NULL, data) < 0) {
        job_free(job);
        return err_set(err, ENOMEM, "import");
    }
    int r = job_start(svc, job, err);
    if (r < 0)
        job_free(job);
    return r;
}

/* ---- removal ------------------------------------------------------------------ */

struct remove_ctx {
    image_done_cb cb;
    void *data;
};

static void remove_saved(struct image_service *svc, void *ctx, int r, const struct err *err)
{
    struct remove_ctx *c = ctx;
    if (c->cb)
        c->cb(c->data, r, err);
    free(c);
}

int image_remove(struct image_service *svc, const char *ref, image_done_cb cb, void *data,
                 struct err *err)
{
    struct remove_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(err, ENOMEM, "remove image");
    *c = (struct remove_ctx){.cb = cb, .data = data};
    const char *tag = NULL;
    ssize_t i = lookup_index(svc, ref, &tag);
    bool gc = false;
    if (i >= 0) {
        struct image_info *img = svc->imgs[i];
        if (tag && img->n_repo_tags > 1) {
            /* one of several names: untag only */
            _cleanup_free_ char *t = strdup(tag);
            if (!t) {
                free(c);
                return err_set(err, ENOMEM, "remove image");
            }
            strv_remove(img->repo_tags, &img->n_repo_tags, t);
        } else {
            /* an image volume's image stays while it is mounted, as in
             * CRI-O (a container's own image may go: its hold keeps the
             * layers, and kubelet never removes an image in use) */
            for (size_t k = 0; k < svc->n_holds; k++)
                if (svc->holds[k]->image_id && !strcmp(svc->holds[k]->image_id, img->id)) {
                    const char *h = svc->holds[k]->holder;
                    free(c);
                    return err_set_msg(
                        err, EBUSY, "image `%s` is in use by container `%.*s` as an image volume",
                        ref, (int)strcspn(h, "/"), h);
                }
            drop_image(svc, (size_t)i);
            gc = true;
        }
    }
    /* absent: nothing to do, but answer after any save in flight so that a
     * remove that follows a pull observes it (RemoveImage is idempotent) */
    request_save(svc, gc, remove_saved, c);
    return 0;
}

/* ---- holds (containers) ----------------------------------------------------------- */

static ssize_t hold_index(struct image_service *svc, const char *holder)
{
    for (size_t i = 0; i < svc->n_holds; i++)
        if (strcmp(svc->holds[i]->holder, holder) == 0)
            return (ssize_t)i;
    return -1;
}

static void hold_drop(struct image_service *svc, size_t i)
{
    struct image_hold *h = svc->holds[i];
    for (size_t l = 0; l < h->n_layers; l++)
        store_snap_release(&svc->st, h->chain_ids[l]);
    image_hold_free(h);
    memmove(&svc->holds[i], &svc->holds[i + 1], (svc->n_holds - i - 1) * sizeof(*svc->holds));
    svc->n_holds--;
}

/* The hold of holder's sub-holder "holder/..." (an image volume of it). */
static bool is_sub_holder(const char *h, const char *holder)
{
    size_t n = strlen(holder);
    return strncmp(h, holder, n) == 0 && h[n] == '/';
}

static int hold_add(struct image_service *svc, const char *holder, const char *ref, bool pin,
                    image_done_cb cb, void *data, struct err *err)
{
    if (!holder || !*holder || strlen(holder) > 256)
        return err_set(err, EINVAL, "invalid holder");
    const struct image_info *img = image_lookup(svc, ref);
    if (!img)
        return err_set(err, ENOENT, "image `%s` not found", ref);
    struct image_hold *h = calloc(1, sizeof(*h));
    struct image_hold **v = realloc(svc->holds, (svc->n_holds + 1) * sizeof(*v));
    if (v)
        svc->holds = v;
    char **chain = NULL;
    if (!h || !v || !(h->holder = strdup(holder)) || (pin && !(h->image_id = strdup(img->id))) ||
        strv_dup((const char *const *)img->chain_ids, img->n_layers, &chain) < 0) {
        image_hold_free(h);
        return err_set(err, ENOMEM, "hold image");
    }
    h->chain_ids = chain;
    h->n_layers = img->n_layers;
    for (size_t l = 0; l < h->n_layers; l++)
        store_snap_ref(&svc->st, h->chain_ids[l]);
    /* a holder holds one image: the new hold replaces an old one */
    ssize_t old = hold_index(svc, holder);
    svc->holds[svc->n_holds++] = h;
    if (old >= 0)
        hold_drop(svc, (size_t)old);
    struct remove_ctx *c = calloc(1, sizeof(*c));
    if (c)
        *c = (struct remove_ctx){.cb = cb, .data = data};
    request_save(svc, old >= 0, c ? remove_saved : NULL, c);
    return 0;
}

int image_hold(struct image_service *svc, const char *holder, const char *ref, image_done_cb cb,
               void *data, struct err *err)
{
    return hold_add(svc, holder, ref, false, cb, data, err);
}

int image_hold_volume(struct image_service *svc, const char *holder, const char *ref,
                      image_done_cb cb, void *data, struct err *err)
{
    return hold_add(svc, holder, ref, true, cb, data, err);
}

int image_release(struct image_service *svc, const char *holder, image_done_cb cb, void *data,
                  struct err *err)
{
    struct remove_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(err, ENOMEM, "release image");
    *c = (struct remove_ctx){.cb = cb, .data = data};
    bool dropped = false;
    for (size_t i = svc->n_holds; holder && i-- > 0;)
        if (!strcmp(svc->holds[i]->holder, holder) ||
            is_sub_holder(svc->holds[i]->holder, holder)) {
            hold_drop(svc, i);
            dropped = true;
        }
    /* absent holder: nothing to do (idempotent) */
    request_save(svc, dropped, remove_saved, c);
    return 0;
}

size_t image_holds_prune(struct image_service *svc, bool (*keep)(void *data, const char *holder),
                         void *data)
{
    size_t dropped = 0;
    for (size_t i = svc->n_holds; i-- > 0;)
        if (!keep(data, svc->holds[i]->holder)) {
            log_debug("hold of `%s` dropped: its holder is no more", svc->holds[i]->holder);
            hold_drop(svc, i);
            dropped++;
        }
    if (dropped)
        request_save(svc, true, NULL, NULL);
    return dropped;
}

/* ---- fs info / paths ---------------------------------------------------------- */

int image_fs_info(struct image_service *svc, struct image_fs_usage *ret, struct err *err)
{
    *ret = (struct image_fs_usage){0};
    if (asprintf(&ret->mountpoint, "%s/snapshots", svc->st.root) < 0)
        return err_set(err, ENOMEM, "image fs info");
    store_usage(&svc->st, &ret->used_bytes, &ret->inodes_used);
    ret->timestamp_ns = now_real_ns();
    return 0;
}

void image_fs_usage_clear(struct image_fs_usage *u)
{
    free(u->mountpoint);
    u->mountpoint = NULL;
}

char *image_snapshot_path(struct image_service *svc, const char *chain_id)
{
    char *p;
    if (!image_digest_valid(chain_id) ||
        asprintf(&p, "%s/snapshots/%s/fs", svc->st.root, chain_id + 7) < 0)
        return NULL;
    return p;
}

char *image_blob_path(struct image_service *svc, const char *digest)
{
    char *p;
    if (!image_digest_valid(digest) ||
        asprintf(&p, "%s/blobs/sha256/%s", svc->st.root, digest + 7) < 0)
        return NULL;
    return p;
}

/* ---- life cycle ------------------------------------------------------------------ */

int image_service_new(uv_loop_t *loop, const struct image_config *cfg, struct image_service **ret,
                      struct err *err)
{
    /* nothing of the registry client (mbedTLS) or libarchive loads here:
     * pulls run in the helper process (helper.c) */
    struct image_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return err_set(err, ENOMEM, "image service");
    svc->loop = loop;
    pthread_mutex_init(&svc->mu, NULL);
    int r = store_open(&svc->st, cfg->root, err);
    if (r < 0) {
        store_close(&svc->st);
        pthread_mutex_destroy(&svc->mu);
        free(svc);
        return r;
    }
    struct image_service_shared *sh = &svc->sh;
    sh->st = &svc->st;
    sh->concurrency = cfg->pull_concurrency ? cfg->pull_concurrency : 3;
    if (sh->concurrency > 32)
        sh->concurrency = 32;
    const char *variant;
    const char *arch = host_arch(&variant);
    sh->os = strdup(cfg->os ? cfg->os : "linux");
    sh->arch = strdup(cfg->arch ? cfg->arch : arch);
    sh->variant = cfg->variant ? strdup(cfg->variant) : variant ? strdup(variant) : NULL;
    sh->certs_dir = cfg->certs_dir ? strdup(cfg->certs_dir) : NULL;
    sh->no_origin = cfg->no_origin_fallback;
    sh->limits = cfg->limits;
    sh->progress = cfg->progress;
    sh->progress_data = cfg->progress_data;
    bool oom = !sh->os || !sh->arch;
    oom |= strv_dup(cfg->mirror_only, cfg->n_mirror_only, &sh->mirror_only) < 0;
    sh->n_mirror_only = oom ? 0 : cfg->n_mirror_only;
    oom |= strv_dup(cfg->mirrors, cfg->n_mirrors, &sh->mirrors) < 0;
    sh->n_mirrors = oom ? 0 : cfg->n_mirrors;
    oom |= strv_dup(cfg->insecure, cfg->n_insecure, &sh->insecure) < 0;
    sh->n_insecure = oom ? 0 : cfg->n_insecure;
    for (size_t i = 0; i < cfg->n_mirrors && !oom; i++)
        if (!strchr(cfg->mirrors[i], '=')) {
            r = err_set(err, EINVAL, "registry mirror `%s` is not HOST=URL", cfg->mirrors[i]);
            goto fail;
        }
    if (oom) {
        r = err_set(err, ENOMEM, "image service");
        goto fail;
    }

    /* records: drop those whose layers are gone, then collect garbage */
    struct image_info **imgs;
    size_t n;
    struct image_hold **holds;
    size_t n_holds;
    r = store_records_load(&svc->st, &imgs, &n, &holds, &n_holds, err);
    if (r < 0)
        goto fail;
    svc->holds = holds;
    for (size_t i = 0; i < n_holds; i++) {
        bool ok = true;
        for (size_t l = 0; l < holds[i]->n_layers && ok; l++)
            ok = store_snap_present(&svc->st, holds[i]->chain_ids[l]);
        if (!ok) {
            log_warn("layers held by `%s` are gone; dropping the hold", holds[i]->holder);
            image_hold_free(holds[i]);
            continue;
        }
        for (size_t l = 0; l < holds[i]->n_layers; l++)
            store_snap_ref(&svc->st, holds[i]->chain_ids[l]);
        svc->holds[svc->n_holds++] = holds[i];
    }
    size_t k = 0;
    bool dropped = false;
    for (size_t i = 0; i < n; i++) {
        bool ok = true;
        for (size_t l = 0; l < imgs[i]->n_layers && ok; l++)
            ok = store_snap_present(&svc->st, imgs[i]->chain_ids[l]);
        if (!ok) {
            log_warn("image %s lost a layer; dropping its record", imgs[i]->id);
            image_info_free(imgs[i]);
            dropped = true;
            continue;
        }
        for (size_t l = 0; l < imgs[i]->n_layers; l++)
            store_snap_ref(&svc->st, imgs[i]->chain_ids[l]);
        imgs[k++] = imgs[i];
    }
    svc->imgs = imgs;
    svc->n_imgs = k;
    if (dropped) {
        _cleanup_free_ char *json =
            store_records_dump(svc->imgs, svc->n_imgs, svc->holds, svc->n_holds);
        if (json)
            store_records_write(&svc->st, json, NULL);
    }
    store_snap_gc(&svc->st);
    char **keep = calloc(2 * k + 1, sizeof(char *));
    for (size_t i = 0; keep && i < k; i++) {
        keep[2 * i] = svc->imgs[i]->id;
        keep[2 * i + 1] = svc->imgs[i]->manifest;
    }
    if (keep)
        store_blob_gc(&svc->st, keep, 2 * k);
    free(keep);

    r = uv_async_init(loop, &svc->async, on_async);
    if (r < 0) {
        r = err_set(err, -r, "image service async");
        goto fail;
    }
    svc->async.data = svc;
    uv_unref((uv_handle_t *)&svc->async);
    *ret = svc;
    return 0;
fail:
    svc->closing = true;
    finish_free(svc);
    return r;
}

static void on_close(uv_handle_t *h)
{
    struct image_service *svc = h->data;
    for (size_t i = 0; i < svc->n_imgs; i++)
        image_info_free(svc->imgs[i]);
    free(svc->imgs);
    for (size_t i = 0; i < svc->n_holds; i++)
        image_hold_free(svc->holds[i]);
    free(svc->holds);
    store_close(&svc->st);
    struct image_service_shared *sh = &svc->sh;
    strv_free(sh->mirrors, sh->n_mirrors);
    strv_free(sh->insecure, sh->n_insecure);
    strv_free(sh->mirror_only, sh->n_mirror_only);
    free(sh->certs_dir);
    free(sh->os);
    free(sh->arch);
    free(sh->variant);
    pthread_mutex_destroy(&svc->mu);
    free(svc);
}

static void finish_free(struct image_service *svc)
{
    if (svc->saving)
        return; /* save_done comes back here */
    for (struct waiter *w = svc->pending, *n; w; w = n) {
        n = w->next;
        struct err e;
        err_set(&e, ECANCELED, "image service closing");
        w->fn(svc, w->ctx, -ECANCELED, &e);
        free(w);
    }
    svc->pending = NULL;
    if (svc->async.data && !uv_is_closing((uv_handle_t *)&svc->async)) {
        uv_close((uv_handle_t *)&svc->async, on_close);
    } else {
        svc->async.data = svc;
        on_close((uv_handle_t *)&svc->async);
    }
}

void image_service_free(struct image_service *svc)
{
    if (!svc)
        return;
    svc->closing = true;
    /* cancel and wait for the job threads; their results are dropped */
    pthread_mutex_lock(&svc->mu);
    for (struct job *j = svc->active; j; j = j->next)
        job_cancel(j);
    pthread_mutex_unlock(&svc->mu);
    store_snap_wake(&svc->st);
    for (;;) {
        pthread_mutex_lock(&svc->mu);
        struct job *j = svc->active;
        pthread_mutex_unlock(&svc->mu);
        if (!j)
            break;
        uv_thread_join(&j->thread); /* it has moved itself to the done list */
        j->joined = true;
    }
    pthread_mutex_lock(&svc->mu);
    struct job *list = svc->done;
    svc->done = NULL;
    pthread_mutex_unlock(&svc->mu);
    while (list) {
        struct job *j = list;
        list = j->next;
        if (!j->joined)
            uv_thread_join(&j->thread);
        if (--svc->n_jobs == 0)
            uv_unref((uv_handle_t *)&svc->async);
        job_release_holds(svc, j);
        struct err e;
        err_set(&e, ECANCELED, "`%s`: the image service is shutting down", j->ref_str);
        job_notify(j, -ECANCELED, &e, NULL);
        job_free(j);
    }
    finish_free(svc);
}
