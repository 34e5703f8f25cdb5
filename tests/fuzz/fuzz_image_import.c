/* libFuzzer: `kinglet image import` of an archive (src/image/import.c):
 * the archive spooled with its paths cleaned, manifest.json (docker save)
 * or index.json (OCI layout) read, each image verified like a pull and
 * its layers unpacked into a real store (image_job.h).
 *
 * Input: the archive itself (tar, optionally compressed). Oracles: an
 * import that succeeds yields images whose id is the digest of a config
 * in the archive, verified; nothing is left in tmp/ either way; nothing
 * appears beside the store (the archive's own paths stay in its spool). */
#include "image_job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The entries of the job root: "image" and the archive, nothing else. */
static void check_root(void)
{
    DIR *d = opendir(job_root);
    if (!d)
        abort();
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && strcmp(de->d_name, "image") != 0 &&
            strcmp(de->d_name, "archive") != 0)
            __builtin_trap(); /* written outside the store */
    closedir(d);
    static const char *const store[] = {"blobs", "lock", "snapshots", "tmp"};
    size_t n = 0;
    d = opendir(job_store.root);
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        bool ok = false;
        for (size_t i = 0; i < ARRAY_SIZE(store); i++)
            ok |= strcmp(de->d_name, store[i]) == 0;
        if (!ok)
            __builtin_trap(); /* written into the store's root */
        n++;
    }
    if (d)
        closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    job_setup("import", false);
    char path[96];
    snprintf(path, sizeof(path), "%s/archive", job_root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write_all(fd, data, size) < 0)
        abort();
    close(fd);
    struct job *job = job_new(JOB_IMPORT, path);
    job_import_run(job);
    if (getenv("KINGLET_FUZZ_DEBUG"))
        fprintf(stderr, "job: %d %s\n", job->r, job->r < 0 ? job->err.msg : "ok");
    for (size_t i = 0; i < job->n_results; i++) {
        const struct image_info *img = job->results[i];
        char *blob = NULL, *man = NULL;
        size_t len, mlen;
        /* the config and manifest were verified and stored under their
         * digests: what the store holds hashes to the name */
        if (store_blob_read(&job_store, img->id, IMAGE_CONFIG_MAX, &blob, &len) < 0 ||
            store_blob_read(&job_store, img->manifest, IMAGE_MANIFEST_MAX, &man, &mlen) < 0)
            __builtin_trap();
        char d[72];
        digest_of(blob, len, d);
        if (strcmp(d, img->id) != 0)
            __builtin_trap();
        free(blob);
        free(man);
    }
    check_root();
    job_finish(job);
    return 0;
}
