/* Disk usage of a directory tree, the way du(1) counts it: allocated blocks,
 * every inode once (hard links counted once), one filesystem only (mounts
 * below, such as a running container's rootfs, are skipped). Entries that
 * vanish or cannot be read during the walk are skipped: the trees measured
 * here change while we look. Blocking: worker threads only. */
#include <fts.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base.h"

/* inode numbers of multiply-linked files seen so far: open addressing */
struct inoset {
    uint64_t *v; /* 0 = empty slot (inode 0 does not exist) */
    size_t cap, n;
};

/* 1 if ino was new, 0 if seen, -ENOMEM */
static int inoset_add(struct inoset *s, uint64_t ino)
{
    if (s->n * 2 >= s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        uint64_t *v = calloc(cap, sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->v[i])
                continue;
            size_t j = (s->v[i] * 0x9e3779b97f4a7c15ULL) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = s->v[i];
        }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    size_t j = (ino * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);
    while (s->v[j]) {
        if (s->v[j] == ino)
            return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->v[j] = ino;
    s->n++;
    return 1;
}

int du_path(const char *path, uint64_t *ret_bytes, uint64_t *ret_inodes)
{
    *ret_bytes = *ret_inodes = 0;
    char *argv[] = {(char *)path, NULL};
    FTS *fts = fts_open(argv, FTS_PHYSICAL | FTS_XDEV | FTS_NOCHDIR, NULL);
    if (!fts)
        return -errno;
    struct inoset seen = {0};
    int r = 0;
    dev_t dev = 0;
    FTSENT *e;
    while ((e = fts_read(fts))) {
        switch (e->fts_info) {
        case FTS_D:
        case FTS_F:
        case FTS_SL:
        case FTS_SLNONE:
        case FTS_DEFAULT:
            break;
        case FTS_DNR:
        case FTS_NS:
        case FTS_ERR:
            if (e->fts_level == 0) {
                r = -(e->fts_errno ? e->fts_errno : EIO);
                goto out;
            }
            continue;
        default: /* FTS_DP (directory, second visit), FTS_DC */
            continue;
        }
        const struct stat *st = e->fts_statp;
        if (e->fts_level == 0)
            dev = st->st_dev;
        else if (st->st_dev != dev)
            continue; /* a mountpoint: FTS_XDEV keeps us out, skip its root too */
        if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
            int n = inoset_add(&seen, (uint64_t)st->st_ino);
            if (n < 0) {
                r = n;
                goto out;
            }
            if (n == 0)
                continue;
        }
        *ret_bytes += (uint64_t)st->st_blocks * 512u;
        (*ret_inodes)++;
    }
    if (errno)
        r = -errno;
out:
    free(seen.v);
    fts_close(fts);
    return r;
}
