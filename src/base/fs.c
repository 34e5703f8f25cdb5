/* Trees on disk: removal and usage. Blocking: worker threads and child
 * processes only, never the event loop.
 *
 * Both stay on the mount they start on (mount IDs, so bind mounts from
 * the same filesystem count as mounts too). Removal refuses to descend
 * into a mount (a bind mount left behind would otherwise lose the host's
 * files); usage skips mounts below (a running container's rootfs), and
 * counts like du(1): allocated blocks, every inode once. Entries that
 * vanish or cannot be read during a usage walk are skipped: the trees
 * measured change while we look. */
#include <dirent.h>
#include <fcntl.h>
#include <fts.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base.h"

/* Which mount a name is on: the mount ID where the kernel reports one
 * (a bind mount from the same filesystem has the same st_dev), the device
 * otherwise. */
static int mount_of(int dfd, const char *name, bool *ret_dir, uint64_t *ret_mnt)
{
    struct statx sx;
    if (statx(dfd, name, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_MNT_ID, &sx) < 0)
        return -errno;
    *ret_dir = S_ISDIR(sx.stx_mode);
    *ret_mnt = sx.stx_mask & STATX_MNT_ID
                   ? sx.stx_mnt_id
                   : ((uint64_t)sx.stx_dev_major << 32 | sx.stx_dev_minor) | (1ULL << 63);
    return 0;
}

static int rm_tree(int dfd, const char *name, uint64_t mnt)
{
    bool dir;
    uint64_t m;
    int r = mount_of(dfd, name, &dir, &m);
    if (r < 0)
        return r == -ENOENT ? 0 : r;
    if (!dir)
        return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
    if (m != mnt)
        return -EBUSY;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            int q = rm_tree(dirfd(d), de->d_name, mnt);
            if (q < 0 && r == 0)
                r = q;
        }
    closedir(d);
    if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        r = -errno;
    return r;
}

int rm_rf_at(int dirfd, const char *name)
{
    bool dir;
    uint64_t mnt;
    int r = mount_of(dirfd, name, &dir, &mnt);
    if (r < 0)
        return r == -ENOENT ? 0 : r;
    return rm_tree(dirfd, name, mnt);
}

/* inode numbers of multiply-linked files seen so far: open addressing in a
 * power-of-two table, 0 marking an empty slot (inode 0 does not exist) */
struct inoset {
    uint64_t *v;
    size_t cap, n;
};

/* where ino is in v, or the empty slot where it goes */
static size_t ino_slot(const uint64_t *v, size_t cap, uint64_t ino)
{
    size_t j = (size_t)(ino * 0x9e3779b97f4a7c15ULL) & (cap - 1);
    while (v[j] && v[j] != ino)
        j = (j + 1) & (cap - 1);
    return j;
}

/* 1 if ino was new, 0 if seen, -ENOMEM */
static int inoset_add(struct inoset *s, uint64_t ino)
{
    if (s->n * 2 >= s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        uint64_t *v = calloc(cap, sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i])
                v[ino_slot(v, cap, s->v[i])] = s->v[i];
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    size_t j = ino_slot(s->v, s->cap, ino);
    if (s->v[j])
        return 0;
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
    uint64_t mnt = 0;
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
        if (S_ISDIR(st->st_mode)) {
            /* FTS_XDEV only sees other devices: bind mounts need the ID */
            bool dir;
            uint64_t m;
            if (mount_of(AT_FDCWD, e->fts_accpath, &dir, &m) < 0)
                continue;
            if (e->fts_level == 0) {
                mnt = m;
            } else if (m != mnt) {
                fts_set(fts, e, FTS_SKIP);
                continue;
            }
        }
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
    if (errno) /* fts_read sets it to 0 at the end of the walk */
        r = -errno;
out:
    free(seen.v);
    fts_close(fts);
    return r;
}
