/* store/record: what every kind of record shares — ids, base64 for opaque
 * blobs, and the record files themselves (<dir>/<id>.json, written
 * atomically, removed durably, loaded with hard limits). */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "store/internal.h"

bool store_id_valid(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return false;
    return n == STORE_ID_LEN;
}

int store_id_new(char ret[STORE_ID_LEN + 1])
{
    uint8_t raw[STORE_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(ret + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int record_path(const char *dir, const char *id, char *buf, size_t size, struct err *err)
{
    if (!store_id_valid(id))
        return err_set(err, EINVAL, "record id `%.80s`", id);
    if ((size_t)snprintf(buf, size, "%s/%s.json", dir, id) >= size)
        return err_set(err, ENAMETOOLONG, "record directory `%.200s`", dir);
    return 0;
}

int store_record_write(const char *dir, const char *id, const char *json, size_t len,
                       struct err *err)
{
    char path[4200];
    int r = record_path(dir, id, path, sizeof(path), err);
    if (r < 0)
        return r;
    if ((r = mkdir_p(dir, 0700)) < 0)
        return err_set(err, -r, "create `%s`", dir);
    if ((r = write_file_atomic(AT_FDCWD, path, json, len, 0600)) < 0)
        return err_set(err, -r, "write `%s`", path);
    return 0;
}

int store_record_delete(const char *dir, const char *id, struct err *err)
{
    char path[4200];
    int r = record_path(dir, id, path, sizeof(path), err);
    if (r < 0)
        return r;
    if (unlink(path) < 0)
        return errno == ENOENT ? 0 : err_set(err, errno, "remove `%s`", path);
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        fsync(dfd);
    return 0;
}

/* One more record that was not loaded: counted, and named when asked. */
static int bad_add(const char *id, char ***ret_bad_ids, size_t *ret_bad)
{
    if (ret_bad_ids)
        return strv_push(ret_bad_ids, ret_bad, id);
    (*ret_bad)++;
    return 0;
}

int store_record_scan(const char *dir, store_record_fn fn, void *data, char ***ret_bad_ids,
                      size_t *ret_bad, struct err *err)
{
    *ret_bad = 0;
    if (ret_bad_ids)
        *ret_bad_ids = NULL;
    /* Scans run at start: temporaries of writes that a crash cut short
     * (their writer is dead) go first. */
    size_t stale = 0;
    if (remove_stale_tmp_files(dir, &stale) == 0 && stale)
        log_debug("removed %zu unfinished record write(s) in `%s`", stale, dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : err_set(err, errno, "open `%s`", dir);
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return err_set(err, errno, "open `%s`", dir);
    }
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len != STORE_ID_LEN + 5 || strcmp(de->d_name + STORE_ID_LEN, ".json") != 0)
            continue; /* temporaries of interrupted writes, strangers */
        char id[STORE_ID_LEN + 1];
        memcpy(id, de->d_name, STORE_ID_LEN);
        id[STORE_ID_LEN] = '\0';
        if (!store_id_valid(id))
            continue;
        _cleanup_free_ char *text = NULL;
        size_t tlen = 0;
        r = read_file_at(dirfd(d), de->d_name, STORE_RECORD_MAX, &text, &tlen);
        if (r == 0)
            r = fn(id, text, tlen, data);
        if (r < 0 && r != -ENOMEM)
            r = bad_add(id, ret_bad_ids, ret_bad);
        if (r == -ENOMEM) {
            r = err_set(err, ENOMEM, "load the records of `%s`", dir);
            break;
        }
        r = 0;
    }
    closedir(d);
    if (r < 0 && ret_bad_ids) {
        strv_free(*ret_bad_ids, *ret_bad);
        *ret_bad_ids = NULL;
    }
    return r;
}
