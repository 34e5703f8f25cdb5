/* Shared by the fuzz targets that run a whole pull or import job
 * (fuzz_image_pull, fuzz_image_import): a real store under a private
 * directory of /tmp and the service's shared settings, without the
 * service itself (its loop, index and records are not what is fuzzed),
 * run on the target's thread as the helper process runs them. */
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_tmpdir.h"
#include "image/internal.h"

static char job_root[64];
static struct store job_store;
static struct image_service_shared job_shared;

/* Opens the store once; the limits as a daemon has them by default, or
 * tight ones (64 KiB a layer, 10 times its compressed size). */
static void job_setup(const char *name, bool tight)
{
    if (!job_root[0]) {
        snprintf(job_root, sizeof(job_root), "/tmp/kinglet-fuzz-%s-XXXXXX", name);
        fuzz_tmpdir(job_root);
        struct err err = {0};
        if (store_open(&job_store, job_root, &err) < 0)
            abort();
        job_shared = (struct image_service_shared){
            .st = &job_store, .concurrency = 1, .os = "linux", .arch = "amd64"};
    }
    job_shared.limits = IMAGE_LIMITS_DEFAULT;
    if (tight) {
        job_shared.limits.max_layer_size = 64u << 10;
        job_shared.limits.max_layer_ratio = 10;
    }
}

static struct job *job_new(int kind, const char *ref_str)
{
    struct job *job = calloc(1, sizeof(*job));
    if (!job)
        abort();
    job->sh = &job_shared;
    job->kind = kind;
    job->cancel_fd = -1; /* no eventfd: a backoff is a plain wait */
    job->ref_str = strdup(ref_str);
    pthread_mutex_init(&job->mu, NULL);
    return job;
}

static size_t dir_entries(const char *dir)
{
    int fd = openat(job_store.root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d)
        abort();
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* After the job: nothing of it left in tmp/ (success or not), then its
 * holds released and the store emptied for the next input, as the
 * service's garbage collection would. */
static void job_finish(struct job *job)
{
    if (dir_entries("tmp") != 0)
        __builtin_trap(); /* work in progress left behind */
    if (job->r < 0 && job->n_results)
        __builtin_trap();
    for (size_t i = 0; i < job->n_held; i++)
        store_snap_release(&job_store, job->held[i]);
    strv_free(job->held, job->n_held);
    for (size_t i = 0; i < job->n_results; i++)
        image_info_free(job->results[i]);
    free(job->results);
    image_ref_clear(&job->ref);
    free(job->ref_str);
    pthread_mutex_destroy(&job->mu);
    free(job);
    store_snap_gc(&job_store);
    store_blob_gc(&job_store, NULL, 0);
    if (dir_entries("snapshots") != 0)
        __builtin_trap(); /* a snapshot nobody references survived collection */
}
