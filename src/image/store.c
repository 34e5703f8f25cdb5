/* The on-disk store: content-addressed blobs, chain-ID keyed snapshots and
 * the image records.
 *
 * Crash consistency rests on three rules:
 *  1. everything is built under tmp/ and becomes visible by one rename:
 *     blobs after fsync, snapshots once fully unpacked and verified;
 *  2. images.json is replaced atomically (write, fsync, rename, fsync dir)
 *     and only names snapshots that exist and are durable: a job calls
 *     store_sync() (one syncfs for the whole pull, instead of one per layer
 *     or per file) after its last layer and before handing its record over;
 *  3. at start, tmp/ is emptied, records naming a missing snapshot are
 *     dropped, and snapshots and blobs no record names are removed.
 * So a kill at any moment leaves either the old or the new images.json, and
 * at worst unreferenced work that the next start removes.
 *
 * Snapshot reference counts live in memory under st->mu: the loop thread
 * counts the records that name a snapshot, pull threads hold the ones they
 * use or build, and garbage collection only removes a snapshot nobody
 * counts. No disk I/O happens under the mutex. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <jansson.h>

#include "image/internal.h"

#define RECORDS_MAX (64u << 20)

static atomic_uint tmp_counter;

static struct snap_ref *snap_find(struct store *st, const char *chain_id, bool add)
{
    for (size_t i = 0; i < st->n_snaps; i++)
        if (strcmp(st->snaps[i].chain_id, chain_id) == 0)
            return &st->snaps[i];
    if (!add)
        return NULL;
    if (st->n_snaps == st->cap_snaps) {
        size_t cap = st->cap_snaps ? st->cap_snaps * 2 : 64;
        struct snap_ref *n = realloc(st->snaps, cap * sizeof(*n));
        if (!n)
            return NULL;
        st->snaps = n;
        st->cap_snaps = cap;
    }
    char *id = strdup(chain_id);
    if (!id)
        return NULL;
    st->snaps[st->n_snaps] = (struct snap_ref){.chain_id = id};
    return &st->snaps[st->n_snaps++];
}

static void snap_forget(struct store *st, struct snap_ref *s)
{
    free(s->chain_id);
    *s = st->snaps[--st->n_snaps];
}

static const char *hex_of(const char *digest) { return digest + 7; }

/* Reads snapshots/<hex>/info.json; records it as present. */
static int snap_scan_one(struct store *st, const char *hex)
{
    char path[300];
    snprintf(path, sizeof(path), "snapshots/%s/info.json", hex);
    _cleanup_free_ char *data = NULL;
    size_t len;
    if (strlen(hex) != 64 || read_file_at(st->root_fd, path, 65536, &data, &len) < 0)
        return -EINVAL;
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!j)
        return -EINVAL;
    json_t *b = json_object_get(j, "bytes"), *n = json_object_get(j, "inodes");
    int r = -EINVAL;
    if (json_is_integer(b) && json_is_integer(n)) {
        char id[80];
        snprintf(id, sizeof(id), "sha256:%s", hex);
        struct snap_ref *s = snap_find(st, id, true);
        if (s) {
            s->present = true;
            s->bytes = (uint64_t)json_integer_value(b);
            s->inodes = (uint64_t)json_integer_value(n);
            r = 0;
        }
    }
    json_decref(j);
    return r;
}

static void empty_dir(int rootfd, const char *dir)
{
    int fd = openat(rootfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            rm_rf_at(dirfd(d), de->d_name);
    closedir(d);
}

int store_open(struct store *st, const char *root, struct err *err)
{
    *st = (struct store){.root_fd = -1, .lock_fd = -1};
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cond, NULL);
    if (asprintf(&st->root, "%s/image", root) < 0)
        return err_set(err, ENOMEM, "open image store");
    int r = mkdir_p(st->root, 0700);
    if (r < 0)
        return err_set(err, -r, "create `%s`", st->root);
    st->root_fd = open(st->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (st->root_fd < 0)
        return err_set(err, errno, "open `%s`", st->root);
    st->lock_fd = openat(st->root_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (st->lock_fd < 0)
        return err_set(err, errno, "open `%s/lock`", st->root);
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return err_set(err, errno == EWOULDBLOCK ? EBUSY : errno,
                       "image store `%s` is in use by another kinglet process", st->root);
    static const char *const dirs[] = {"blobs", "blobs/sha256", "snapshots", "tmp"};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
        if (mkdirat(st->root_fd, dirs[i], 0700) < 0 && errno != EEXIST)
            return err_set(err, errno, "create `%s/%s`", st->root, dirs[i]);
    /* leftovers of interrupted pulls, imports and collections */
    empty_dir(st->root_fd, "tmp");

    int fd = openat(st->root_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return err_set(err, errno, "open `%s/snapshots`", st->root);
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (snap_scan_one(st, de->d_name) < 0)
            rm_rf_at(dirfd(d), de->d_name); /* not a snapshot we finished */
    }
    closedir(d);
    return 0;
}

int store_attach(struct store *st, const char *image_root, struct err *err)
{
    *st = (struct store){.root_fd = -1, .lock_fd = -1};
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cond, NULL);
    if (!(st->root = strdup(image_root)))
        return err_set(err, ENOMEM, "open image store");
    st->root_fd = open(st->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (st->root_fd < 0)
        return err_set(err, errno, "open `%s`", st->root);
    return 0;
}

void store_close(struct store *st)
{
    for (size_t i = 0; i < st->n_snaps; i++)
        free(st->snaps[i].chain_id);
    free(st->snaps);
    free(st->watch_fds);
    if (st->root_fd >= 0)
        close(st->root_fd);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    free(st->root);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cond);
    *st = (struct store){.root_fd = -1, .lock_fd = -1};
}

static void tmp_name(char ret[64], const char *kind)
{
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) < 0)
        rnd = (uint32_t)now_mono_ns();
    /* the pid first: the daemon removes what a helper that died left */
    snprintf(ret, 64, "tmp/%s%d.%u-%08x", kind, (int)getpid(), atomic_fetch_add(&tmp_counter, 1),
             rnd);
}

void store_tmp_remove_pid(struct store *st, pid_t pid)
{
    int fd = openat(st->root_fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "%d.", (int)pid);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *p = de->d_name;
        while (*p >= 'a' && *p <= 'z')
            p++;
        if (p != de->d_name && str_has_prefix(p, prefix))
            rm_rf_at(dirfd(d), de->d_name);
    }
    closedir(d);
}

int store_tmpdir(struct store *st, char ret[64], struct err *err)
{
    tmp_name(ret, "d");
    if (mkdirat(st->root_fd, ret, 0700) < 0)
        return err_set(err, errno, "create `%s/%s`", st->root, ret);
    return 0;
}

/* Writes data to a fresh file under tmp/, fsyncs it and renames it to dst. */
static int write_durable(struct store *st, const char *dst, const void *data, size_t len,
                         struct err *err)
{
    char tmp[64];
    tmp_name(tmp, "f");
    int fd = openat(st->root_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_set(err, errno, "create `%s/%s`", st->root, tmp);
    int r = write_all(fd, data, len);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    close(fd);
    if (r == 0 && renameat(st->root_fd, tmp, st->root_fd, dst) < 0)
        r = -errno;
    if (r < 0) {
        unlinkat(st->root_fd, tmp, 0);
        return err_set(err, -r, "write `%s/%s`", st->root, dst);
    }
    const char *slash = strrchr(dst, '/');
    char dir[128] = ".";
    if (slash)
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - dst), dst);
    int dfd = openat(st->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int store_blob_write(struct store *st, const char *digest, const void *data, size_t len,
                     struct err *err)
{
    if (!image_digest_valid(digest))
        return err_set(err, EINVAL, "invalid digest");
    char path[96];
    snprintf(path, sizeof(path), "blobs/sha256/%s", hex_of(digest));
    if (faccessat(st->root_fd, path, F_OK, AT_SYMLINK_NOFOLLOW | AT_EACCESS) == 0)
        return 0;
    return write_durable(st, path, data, len, err);
}

int store_blob_read(struct store *st, const char *digest, size_t max, char **ret, size_t *ret_len)
{
    if (!image_digest_valid(digest))
        return -EINVAL;
    char path[96];
    snprintf(path, sizeof(path), "blobs/sha256/%s", hex_of(digest));
    return read_file_at(st->root_fd, path, max, ret, ret_len);
}

/* ---- snapshots ------------------------------------------------------------ */

int store_snap_acquire(struct store *st, const char *chain_id)
{
    pthread_mutex_lock(&st->mu);
    for (;;) {
        struct snap_ref *s = snap_find(st, chain_id, true);
        if (!s) {
            pthread_mutex_unlock(&st->mu);
            return -ENOMEM;
        }
        if (s->busy) {
            pthread_cond_wait(&st->cond, &st->mu);
            continue;
        }
        s->refs++;
        int r = s->present ? 1 : 0;
        if (!s->present)
            s->busy = true;
        pthread_mutex_unlock(&st->mu);
        return r;
    }
}

int store_snap_try_acquire(struct store *st, const char *chain_id)
{
    pthread_mutex_lock(&st->mu);
    struct snap_ref *s = snap_find(st, chain_id, true);
    int r = !s ? -ENOMEM : s->busy ? -EAGAIN : s->present ? 1 : 0;
    if (r >= 0)
        s->refs++;
    if (r == 0)
        s->busy = true;
    pthread_mutex_unlock(&st->mu);
    return r;
}

/* With st->mu held. */
static void wake_watchers(struct store *st)
{
    uint64_t one = 1;
    for (size_t i = 0; i < st->n_watch; i++)
        (void)!write(st->watch_fds[i], &one, sizeof(one)); /* EAGAIN: already due */
}

int store_snap_watch(struct store *st, int fd)
{
    pthread_mutex_lock(&st->mu);
    int *v = realloc(st->watch_fds, (st->n_watch + 1) * sizeof(int));
    if (v) {
        st->watch_fds = v;
        v[st->n_watch++] = fd;
    }
    pthread_mutex_unlock(&st->mu);
    return v ? 0 : -ENOMEM;
}

void store_snap_unwatch(struct store *st, int fd)
{
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->n_watch; i++)
        if (st->watch_fds[i] == fd) {
            st->watch_fds[i] = st->watch_fds[--st->n_watch];
            break;
        }
    pthread_mutex_unlock(&st->mu);
}

void store_snap_wake(struct store *st)
{
    pthread_mutex_lock(&st->mu);
    wake_watchers(st);
    pthread_mutex_unlock(&st->mu);
}

void store_snap_built(struct store *st, const char *chain_id, bool ok, uint64_t bytes,
                      uint64_t inodes)
{
    pthread_mutex_lock(&st->mu);
    struct snap_ref *s = snap_find(st, chain_id, false);
    if (s) {
        s->busy = false;
        if (ok) {
            s->present = true;
            s->bytes = bytes;
            s->inodes = inodes;
        }
    }
    pthread_cond_broadcast(&st->cond);
    wake_watchers(st);
    pthread_mutex_unlock(&st->mu);
}

void store_snap_ref(struct store *st, const char *chain_id)
{
    pthread_mutex_lock(&st->mu);
    struct snap_ref *s = snap_find(st, chain_id, true);
    if (s)
        s->refs++;
    pthread_mutex_unlock(&st->mu);
}

void store_snap_release(struct store *st, const char *chain_id)
{
    pthread_mutex_lock(&st->mu);
    struct snap_ref *s = snap_find(st, chain_id, false);
    if (s && s->refs > 0)
        s->refs--;
    if (s && s->refs == 0 && !s->busy && !s->present)
        snap_forget(st, s);
    pthread_mutex_unlock(&st->mu);
}

bool store_snap_present(struct store *st, const char *chain_id)
{
    pthread_mutex_lock(&st->mu);
    struct snap_ref *s = snap_find(st, chain_id, false);
    bool r = s && s->present;
    pthread_mutex_unlock(&st->mu);
    return r;
}

int store_snap_commit(struct store *st, const char *tmpname, const char *chain_id,
                      const struct layer_stats *stats, struct err *err)
{
    char path[128], dst[96];
    snprintf(path, sizeof(path), "%s/info.json", tmpname);
    char info[512];
    int n = snprintf(info, sizeof(info), "{\"diff_id\":\"%s\",\"bytes\":%llu,\"inodes\":%llu}\n",
                     stats->diff_id, (unsigned long long)stats->bytes,
                     (unsigned long long)stats->inodes);
    int fd = openat(st->root_fd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_set(err, errno, "create `%s/%s`", st->root, path);
    int r = write_all(fd, info, (size_t)n);
    close(fd);
    if (r < 0)
        return err_set(err, -r, "write `%s/%s`", st->root, path);
    snprintf(dst, sizeof(dst), "snapshots/%s", hex_of(chain_id));
    if (renameat(st->root_fd, tmpname, st->root_fd, dst) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY)
            return err_set(err, errno, "rename `%s` to `%s`", tmpname, dst);
        rm_rf_at(st->root_fd, tmpname);
    }
    int dfd = openat(st->root_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int store_sync(struct store *st, struct err *err)
{
    if (syncfs(st->root_fd) < 0)
        return err_set(err, errno, "sync `%s`", st->root);
    return 0;
}

void store_snap_gc(struct store *st)
{
    int fd = openat(st->root_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) != 64)
            continue;
        char id[80], src[96], tmp[64];
        snprintf(id, sizeof(id), "sha256:%.64s", de->d_name);
        snprintf(src, sizeof(src), "snapshots/%.64s", de->d_name);
        bool remove = false;
        pthread_mutex_lock(&st->mu);
        struct snap_ref *s = snap_find(st, id, false);
        if (!s || (s->refs == 0 && !s->busy)) {
            remove = true;
            if (s)
                snap_forget(st, s);
            /* moved away under the mutex: nobody can acquire it after this */
            tmp_name(tmp, "gc");
            if (renameat(st->root_fd, src, st->root_fd, tmp) < 0)
                remove = false;
        }
        pthread_mutex_unlock(&st->mu);
        if (remove)
            rm_rf_at(st->root_fd, tmp);
    }
    closedir(d);
}

void store_usage(struct store *st, uint64_t *bytes, uint64_t *inodes)
{
    uint64_t b = 0, n = 0;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->n_snaps; i++)
        if (st->snaps[i].present) {
            b += st->snaps[i].bytes;
            n += st->snaps[i].inodes;
        }
    pthread_mutex_unlock(&st->mu);
    *bytes = b;
    *inodes = n;
}

void store_blob_gc(struct store *st, char *const *keep, size_t n_keep)
{
    int fd = openat(st->root_fd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        bool used = false;
        for (size_t i = 0; i < n_keep && !used; i++)
            used = keep[i] && strlen(keep[i]) == 71 && strcmp(hex_of(keep[i]), de->d_name) == 0;
        if (!used)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* ---- records -------------------------------------------------------------- */

void image_info_free(struct image_info *img)
{
    if (!img)
        return;
    free(img->id);
    free(img->manifest);
    strv_free(img->repo_tags, img->n_repo_tags);
    strv_free(img->repo_digests, img->n_repo_digests);
    free(img->user);
    strv_free(img->chain_ids, img->n_layers);
    free(img);
}

static int strv_from_json(json_t *a, char ***ret, size_t *ret_n, bool digests)
{
    if (!json_is_array(a))
        return -EINVAL;
    size_t n = json_array_size(a);
    char **v = calloc(n ? n : 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s || (digests && !image_digest_valid(s)) || !(v[i] = strdup(s))) {
            strv_free(v, i);
            return -EINVAL;
        }
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

struct image_info *store_record_from_json(json_t *o)
{
    struct image_info *img = calloc(1, sizeof(*img));
    if (!img)
        return NULL;
    const char *id = json_string_value(json_object_get(o, "id"));
    const char *man = json_string_value(json_object_get(o, "manifest"));
    const char *user = json_string_value(json_object_get(o, "user"));
    if (!image_digest_valid(id) || !image_digest_valid(man))
        goto fail;
    img->id = strdup(id);
    img->manifest = strdup(man);
    img->user = strdup(user ? user : "");
    img->size = (uint64_t)json_integer_value(json_object_get(o, "size"));
    img->created_ns = (uint64_t)json_integer_value(json_object_get(o, "created_ns"));
    img->pinned = json_is_true(json_object_get(o, "pinned"));
    if (!img->id || !img->manifest || !img->user)
        goto fail;
    if (strv_from_json(json_object_get(o, "repo_tags"), &img->repo_tags, &img->n_repo_tags, false) <
            0 ||
        strv_from_json(json_object_get(o, "repo_digests"), &img->repo_digests, &img->n_repo_digests,
                       false) < 0 ||
        strv_from_json(json_object_get(o, "layers"), &img->chain_ids, &img->n_layers, true) < 0)
        goto fail;
    return img;
fail:
    image_info_free(img);
    return NULL;
}

void image_hold_free(struct image_hold *h)
{
    if (!h)
        return;
    free(h->holder);
    free(h->image_id);
    strv_free(h->chain_ids, h->n_layers);
    free(h);
}

static int holds_from_json(json_t *a, struct image_hold ***ret, size_t *ret_n)
{
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    struct image_hold **v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(a, i);
        const char *holder = json_string_value(json_object_get(o, "holder"));
        const char *image = json_string_value(json_object_get(o, "image"));
        struct image_hold *h = calloc(1, sizeof(*h));
        if (!h || !holder || !(h->holder = strdup(holder)) ||
            (image && (!image_digest_valid(image) || !(h->image_id = strdup(image)))) ||
            strv_from_json(json_object_get(o, "layers"), &h->chain_ids, &h->n_layers, true) < 0) {
            image_hold_free(h);
            continue;
        }
        v[k++] = h;
    }
    *ret = v;
    *ret_n = k;
    return 0;
}

int store_records_load(struct store *st, struct image_info ***ret, size_t *ret_n,
                       struct image_hold ***ret_holds, size_t *ret_n_holds, struct err *err)
{
    _cleanup_free_ char *data = NULL;
    size_t len;
    *ret = NULL;
    *ret_n = 0;
    *ret_holds = NULL;
    *ret_n_holds = 0;
    int r = read_file_at(st->root_fd, "images.json", RECORDS_MAX, &data, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return err_set(err, -r, "read `%s/images.json`", st->root);
    json_error_t jerr;
    json_t *j = json_loadb(data, len, 0, &jerr);
    json_t *a = j ? json_object_get(j, "images") : NULL;
    if (!json_is_array(a)) {
        json_decref(j);
        return err_set(err, EINVAL, "`%s/images.json` is corrupt", st->root);
    }
    size_t n = json_array_size(a);
    struct image_info **v = calloc(n ? n : 1, sizeof(*v));
    if (!v) {
        json_decref(j);
        return err_set(err, ENOMEM, "load image records");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct image_info *img = store_record_from_json(json_array_get(a, i));
        if (img)
            v[k++] = img;
    }
    if (holds_from_json(json_object_get(j, "holds"), ret_holds, ret_n_holds) < 0) {
        for (size_t i = 0; i < k; i++)
            image_info_free(v[i]);
        free(v);
        json_decref(j);
        return err_set(err, ENOMEM, "load image records");
    }
    json_decref(j);
    *ret = v;
    *ret_n = k;
    return 0;
}

static json_t *strv_to_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

json_t *store_record_to_json(const struct image_info *img)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(img->id));
    json_object_set_new(o, "manifest", json_string(img->manifest));
    json_object_set_new(o, "repo_tags", strv_to_json(img->repo_tags, img->n_repo_tags));
    json_object_set_new(o, "repo_digests", strv_to_json(img->repo_digests, img->n_repo_digests));
    json_object_set_new(o, "size", json_integer((json_int_t)img->size));
    json_object_set_new(o, "user", json_string(img->user));
    json_object_set_new(o, "pinned", json_boolean(img->pinned));
    json_object_set_new(o, "created_ns", json_integer((json_int_t)img->created_ns));
    json_object_set_new(o, "layers", strv_to_json(img->chain_ids, img->n_layers));
    return o;
}

char *store_records_dump(struct image_info *const *imgs, size_t n, struct image_hold *const *holds,
                         size_t n_holds)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, store_record_to_json(imgs[i]));
    json_t *h = json_array();
    for (size_t i = 0; i < n_holds; i++) {
        json_t *o = json_pack("{s:s,s:o}", "holder", holds[i]->holder, "layers",
                              strv_to_json(holds[i]->chain_ids, holds[i]->n_layers));
        if (holds[i]->image_id)
            json_object_set_new(o, "image", json_string(holds[i]->image_id));
        json_array_append_new(h, o);
    }
    json_t *root = json_pack("{s:i,s:o,s:o}", "version", 1, "images", a, "holds", h);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

int store_records_write(struct store *st, const char *json, struct err *err)
{
    return write_durable(st, "images.json", json, strlen(json), err);
}
