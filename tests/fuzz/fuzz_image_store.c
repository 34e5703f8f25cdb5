/* libFuzzer: what the image store reads back at start (src/image/store.c):
 * images.json (the image records and holds) and a snapshot's info.json.
 *
 * Input: one selector byte, then the file.
 *  even: images.json. What loads must dump and load again to the same
 *        records, every field compared (a field lost or changed on the way
 *        is a record silently rewritten at the next save).
 *  odd:  snapshots/<hex>/info.json, then store_open as at start: the
 *        snapshot is kept with the bytes and inodes the file says, or its
 *        directory is removed; never anything in between. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "fuzz_tmpdir.h"
#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char root[64];

static int write_file_at(int dirfd, const char *path, const void *data, size_t len, int mode)
{
    int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    int r = write_all(fd, data, len);
    close(fd);
    return r;
}

static bool strv_eq(char **a, size_t na, char **b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool info_eq(const struct image_info *a, const struct image_info *b)
{
    return strcmp(a->id, b->id) == 0 && strcmp(a->manifest, b->manifest) == 0 &&
           strcmp(a->user, b->user) == 0 && a->size == b->size && a->pinned == b->pinned &&
           a->created_ns == b->created_ns &&
           strv_eq(a->repo_tags, a->n_repo_tags, b->repo_tags, b->n_repo_tags) &&
           strv_eq(a->repo_digests, a->n_repo_digests, b->repo_digests, b->n_repo_digests) &&
           strv_eq(a->chain_ids, a->n_layers, b->chain_ids, b->n_layers);
}

static void free_all(struct image_info **v, size_t n, struct image_hold **h, size_t nh)
{
    for (size_t i = 0; i < n; i++)
        image_info_free(v[i]);
    free(v);
    for (size_t i = 0; i < nh; i++)
        image_hold_free(h[i]);
    free(h);
}

static void records(struct store *st, const uint8_t *data, size_t size)
{
    if (write_file_at(st->root_fd, "images.json", data, size, 0600) < 0)
        abort();
    struct image_info **v = NULL, **v2 = NULL;
    struct image_hold **h = NULL, **h2 = NULL;
    size_t n = 0, nh = 0, n2 = 0, nh2 = 0;
    struct err err = {0};
    if (store_records_load(st, &v, &n, &h, &nh, &err) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (!image_digest_valid(v[i]->id) || !image_digest_valid(v[i]->manifest))
            __builtin_trap(); /* a record the index cannot use was let in */
    char *json = store_records_dump(v, n, h, nh);
    if (!json || write_file_at(st->root_fd, "images.json", json, strlen(json), 0600) < 0)
        __builtin_trap(); /* what loaded cannot be saved */
    free(json);
    if (store_records_load(st, &v2, &n2, &h2, &nh2, &err) < 0 || n2 != n || nh2 != nh)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (!info_eq(v[i], v2[i]))
            __builtin_trap();
    for (size_t i = 0; i < nh; i++)
        if (strcmp(h[i]->holder, h2[i]->holder) != 0 ||
            !strv_eq(h[i]->chain_ids, h[i]->n_layers, h2[i]->chain_ids, h2[i]->n_layers))
            __builtin_trap();
    free_all(v, n, h, nh);
    free_all(v2, n2, h2, nh2);
}

static void snapshot_info(const uint8_t *data, size_t size)
{
    char dir[128], path[160];
    snprintf(dir, sizeof(dir), "%s/image/snapshots/" HEX, root);
    snprintf(path, sizeof(path), "%s/info.json", dir);
    if (mkdir_p(dir, 0700) < 0 || write_file_at(AT_FDCWD, path, data, size, 0600) < 0)
        abort();
    struct store st;
    struct err err = {0};
    if (store_open(&st, root, &err) < 0)
        abort();
    bool present = store_snap_present(&st, "sha256:" HEX);
    struct stat sb;
    bool exists = stat(dir, &sb) == 0;
    if (present != exists)
        __builtin_trap(); /* kept without being known, or known but gone */
    if (present) {
        uint64_t bytes, inodes;
        store_usage(&st, &bytes, &inodes);
        json_t *j = json_loadb((const char *)data, size, 0, NULL);
        if (!j || bytes != (uint64_t)json_integer_value(json_object_get(j, "bytes")) ||
            inodes != (uint64_t)json_integer_value(json_object_get(j, "inodes")))
            __builtin_trap();
        json_decref(j);
    }
    store_close(&st);
    rm_rf_at(AT_FDCWD, dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0]) {
        snprintf(root, sizeof(root), "/tmp/kinglet-fuzz-store-XXXXXX");
        fuzz_tmpdir(root);
    }
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        snapshot_info(data + 1, size - 1);
        return 0;
    }
    struct store st;
    struct err err = {0};
    if (store_open(&st, root, &err) < 0)
        abort();
    records(&st, data + 1, size - 1);
    unlinkat(st.root_fd, "images.json", 0);
    store_close(&st);
    return 0;
}
