/* Layer unpacking: raw bytes -> sha256 + size check -> decompression (gzip,
 * zstd or none, sniffed from the magic) -> sha256 of the tar (diff_id) ->
 * libarchive's tar reader -> files under the layer directory.
 *
 * The layer is hostile input. Every path is cleaned (leading '/' and '.'
 * dropped, '..' refused) and its parent directory is opened with openat2
 * RESOLVE_BENEATH relative to the layer directory: a symlink met on the way
 * that leads outside (absolute, or '..' above the layer) fails the layer
 * with EXDEV instead of being followed; the last component is created with
 * *at() calls that do not follow symlinks (O_NOFOLLOW,
 * AT_SYMLINK_NOFOLLOW, O_EXCL). Hardlink targets are resolved the same way.
 * trusted.overlay.* xattrs from the layer are dropped: only our whiteout
 * conversion sets them.
 *
 * Whiteouts become what overlayfs understands: `.wh.NAME` a 0/0 character
 * device NAME, `.wh..wh..opq` the trusted.overlay.opaque="y" xattr on the
 * directory. Blocking throughout: runs on worker threads only. */
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>
#include <zstd.h>

#include "image/internal.h"

#define OUT_CHUNK          (256u << 10)
#define MAX_DEPTH          256
#define MAX_ENTRIES        4000000u
#define MAX_XATTR_VALUE    (64u << 10)
#define FREE_CHECK_EVERY   (32u << 20)
#define INODE_CHECK_EVERY  4096u
#define ROOM_SHARE         8 /* layers unpacking at once that stay within the reserves */
#define INODE_MIN_FREE_PCT 5 /* kubelet's default imagefs.inodesFree eviction threshold */

enum comp { COMP_UNKNOWN, COMP_NONE, COMP_GZIP, COMP_ZSTD };

struct pipeline {
    struct layer_source *src;
    const struct layer_expect *expect;
    const atomic_bool *cancel;
    struct err *err;
    int error; /* negative errno once the stream failed */

    struct hasher *raw_h, *diff_h;
    uint64_t raw_len;
    uint64_t tar_len; /* uncompressed bytes produced so far */
    enum comp comp;
    uint8_t head[4];
    size_t head_len;
    bool head_fed;

    const uint8_t *in;
    size_t in_len;
    bool in_eof;
    bool stream_end; /* the compressed stream ended cleanly */

    z_stream z;
    bool z_init;
    ZSTD_DStream *zs;
    const uint8_t *zpend;
    size_t zpend_len;
    uint8_t *out;
};

_printf_(3, 4) static int pipe_fail(struct pipeline *p, int code, const char *fmt, ...)
{
    if (p->error)
        return p->error;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->error = err_set(p->err, code, "%s", msg);
    return p->error;
}

/* Gets the next raw chunk into p->in. */
static int fill_input(struct pipeline *p)
{
    if (p->in_len > 0 || p->in_eof)
        return 0;
    if (p->cancel && atomic_load(p->cancel))
        return pipe_fail(p, ECANCELED, "%s", "layer download cancelled");
    const void *buf;
    size_t len;
    int r = p->src->read(p->src->ctx, &buf, &len, p->err);
    if (r < 0) {
        p->error = r;
        return r;
    }
    if (len == 0) {
        p->in_eof = true;
        return 0;
    }
    hasher_update(p->raw_h, buf, len);
    p->raw_len += len;
    if (p->expect->size >= 0 && p->raw_len > (uint64_t)p->expect->size) {
        char n[32];
        snprintf(n, sizeof(n), "%lld", (long long)p->expect->size);
        return pipe_fail(p, EPROTO, "layer is larger than the %s bytes its descriptor says", n);
    }
    p->in = buf;
    p->in_len = len;
    return 0;
}

static int sniff(struct pipeline *p)
{
    while (p->head_len < 4) {
        int r = fill_input(p);
        if (r < 0)
            return r;
        if (p->in_eof)
            break;
        size_t n = 4 - p->head_len < p->in_len ? 4 - p->head_len : p->in_len;
        memcpy(p->head + p->head_len, p->in, n);
        p->head_len += n;
        p->in += n;
        p->in_len -= n;
    }
    static const uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (p->head_len >= 2 && p->head[0] == 0x1f && p->head[1] == 0x8b) {
        p->comp = COMP_GZIP;
        if (inflateInit2(&p->z, 15 + 16) != Z_OK)
            return pipe_fail(p, ENOMEM, "%s", "gzip init");
        p->z_init = true;
    } else if (p->head_len == 4 && memcmp(p->head, zstd_magic, 4) == 0) {
        p->comp = COMP_ZSTD;
        p->zs = ZSTD_createDStream();
        if (!p->zs || ZSTD_isError(ZSTD_initDStream(p->zs)))
            return pipe_fail(p, ENOMEM, "%s", "zstd init");
    } else {
        p->comp = COMP_NONE;
    }
    return 0;
}

/* Input for the decompressor: the sniffed head first, then the source. */
static int next_input(struct pipeline *p, const uint8_t **ret, size_t *ret_len)
{
    if (!p->head_fed) {
        p->head_fed = true;
        if (p->head_len) {
            *ret = p->head;
            *ret_len = p->head_len;
            return 0;
        }
    }
    int r = fill_input(p);
    if (r < 0)
        return r;
    *ret = p->in;
    *ret_len = p->in_len;
    p->in_len = 0;
    return 0;
}

/* Counts n more bytes of tar out of the decompressor against the layer's
 * expansion limit (see struct image_limits), before anything is written. */
static int count_tar(struct pipeline *p, size_t n)
{
    p->tar_len += n;
    const struct image_limits *l = p->expect->limits;
    if (!l || !l->max_layer_ratio || p->comp == COMP_NONE)
        return 0;
    /* the bytes read, never the size the descriptor claims: a claim of
     * 2^62 bytes would lift the bound for a layer of a few kB (the claim
     * itself is held in fill_input, as the bytes arrive) */
    uint64_t raw = p->raw_len;
    uint64_t bound = raw > UINT64_MAX / l->max_layer_ratio ? UINT64_MAX : raw * l->max_layer_ratio;
    if (bound < IMAGE_LAYER_RATIO_FLOOR)
        bound = IMAGE_LAYER_RATIO_FLOOR;
    if (p->tar_len <= bound)
        return 0;
    return pipe_fail(p, EFBIG,
                     "layer expands to more than %llu bytes, %u times its %llu compressed bytes "
                     "(the max-layer-ratio limit)",
                     (unsigned long long)bound, l->max_layer_ratio, (unsigned long long)raw);
}

/* Produces the next chunk of uncompressed tar; *ret_len == 0 at the end. */
static int produce(struct pipeline *p, const void **ret, size_t *ret_len)
{
    if (p->error)
        return p->error;
    if (p->comp == COMP_UNKNOWN) {
        int r = sniff(p);
        if (r < 0)
            return r;
    }
    for (;;) {
        if (p->comp == COMP_NONE) {
            const uint8_t *b;
            size_t n;
            int r = next_input(p, &b, &n);
            if (r < 0)
                return r;
            if (n == 0 && p->in_eof) {
                *ret_len = 0;
                return 0;
            }
            hasher_update(p->diff_h, b, n);
            *ret = b;
            *ret_len = n;
            return 0;
        }
        /* compressed: keep pending input in p->in/p->in_len (or the head) */
        if (p->comp == COMP_GZIP) {
            if (p->z.avail_in == 0) {
                const uint8_t *b;
                size_t n;
                int r = next_input(p, &b, &n);
                if (r < 0)
                    return r;
                if (n == 0 && p->in_eof) {
                    if (!p->stream_end)
                        return pipe_fail(p, EPROTO, "%s", "truncated gzip stream");
                    *ret_len = 0;
                    return 0;
                }
                if (p->stream_end) {
                    /* another gzip member follows */
                    inflateReset(&p->z);
                    p->stream_end = false;
                }
                p->z.next_in = (Bytef *)b;
                p->z.avail_in = (uInt)n;
            } else if (p->stream_end) {
                inflateReset(&p->z);
                p->stream_end = false;
            }
            p->z.next_out = p->out;
            p->z.avail_out = OUT_CHUNK;
            int zr = inflate(&p->z, Z_NO_FLUSH);
            if (zr == Z_STREAM_END)
                p->stream_end = true;
            else if (zr != Z_OK && zr != Z_BUF_ERROR)
                return pipe_fail(p, EPROTO, "corrupt gzip stream: %s", p->z.msg ? p->z.msg : "?");
            size_t n = OUT_CHUNK - p->z.avail_out;
            if (n) {
                int r = count_tar(p, n);
                if (r < 0)
                    return r;
                hasher_update(p->diff_h, p->out, n);
                *ret = p->out;
                *ret_len = n;
                return 0;
            }
            continue;
        }
        /* zstd: pending input is kept in zpend/zpend_len */
        if (p->zpend_len == 0) {
            int r = next_input(p, &p->zpend, &p->zpend_len);
            if (r < 0)
                return r;
            if (p->zpend_len == 0 && p->in_eof) {
                if (!p->stream_end)
                    return pipe_fail(p, EPROTO, "%s", "truncated zstd stream");
                *ret_len = 0;
                return 0;
            }
        }
        ZSTD_inBuffer in = {p->zpend, p->zpend_len, 0};
        ZSTD_outBuffer out = {p->out, OUT_CHUNK, 0};
        size_t zr = ZSTD_decompressStream(p->zs, &out, &in);
        if (ZSTD_isError(zr))
            return pipe_fail(p, EPROTO, "corrupt zstd stream: %s", ZSTD_getErrorName(zr));
        p->stream_end = zr == 0;
        p->zpend += in.pos;
        p->zpend_len -= in.pos;
        if (out.pos) {
            int r = count_tar(p, out.pos);
            if (r < 0)
                return r;
            hasher_update(p->diff_h, p->out, out.pos);
            *ret = p->out;
            *ret_len = out.pos;
            return 0;
        }
    }
}

static la_ssize_t archive_read_cb(struct archive *a, void *data, const void **buf)
{
    struct pipeline *p = data;
    size_t n = 0;
    if (produce(p, buf, &n) < 0) {
        archive_set_error(a, EIO, "layer stream failed");
        return -1;
    }
    return (la_ssize_t)n;
}

/* ---- paths ---------------------------------------------------------------- */

/* Cleans a tar path into out: "" for the root. -EINVAL for "..". */
static int clean_path(const char *in, char *out, size_t outsz)
{
    size_t o = 0;
    int depth = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 1 && p[0] == '.') {
            p += len;
            continue;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return -EINVAL;
        if (len > NAME_MAX)
            return -ENAMETOOLONG;
        if (++depth > MAX_DEPTH)
            return -ENAMETOOLONG;
        if (o + len + 2 > outsz)
            return -ENAMETOOLONG;
        if (o)
            out[o++] = '/';
        memcpy(out + o, p, len);
        o += len;
        p += len;
    }
    out[o] = '\0';
    return 0;
}

static int open_in_root(int rootfd, const char *path, uint64_t flags)
{
    struct open_how how = {
        .flags = flags | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    int fd = openat2_retry(rootfd, *path ? path : ".", &how);
    return fd < 0 ? -errno : fd;
}

/* Opens directory `dir` (a cleaned path) inside the root, creating missing
 * components with mode 0755 like tar does. */
static int open_dir_create(int rootfd, const char *dir)
{
    int fd = open_in_root(rootfd, dir, O_PATH | O_DIRECTORY);
    if (fd != -ENOENT)
        return fd;
    char prefix[PATH_MAX];
    size_t len = strlen(dir);
    if (len >= sizeof(prefix))
        return -ENAMETOOLONG;
    memcpy(prefix, dir, len + 1);
    int cur = open_in_root(rootfd, "", O_PATH | O_DIRECTORY);
    if (cur < 0)
        return cur;
    for (char *s = prefix;;) {
        char *slash = strchr(s, '/');
        if (slash)
            *slash = '\0';
        int next = open_in_root(rootfd, prefix, O_PATH | O_DIRECTORY);
        if (next == -ENOENT) {
            if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST) {
                int e = -errno;
                close(cur);
                return e;
            }
            next = open_in_root(rootfd, prefix, O_PATH | O_DIRECTORY);
        }
        close(cur);
        if (next < 0)
            return next;
        cur = next;
        if (!slash)
            return cur;
        *slash = '/';
        s = slash + 1;
    }
}

/* ---- entries ------------------------------------------------------------ */

struct extract {
    int rootfd;
    struct archive *a;
    struct layer_stats *stats;
    struct err *err;
    const struct image_limits *limits; /* NULL = none */
    uint64_t written;                  /* file data written so far */
    uint64_t room_until;               /* `written` up to which free space was checked */
    uint64_t inodes_until;             /* entry number at which free inodes are checked again */
    /* parent directory cache */
    char cached_dir[PATH_MAX];
    int cached_fd;
    /* directory mtimes, applied at the end */
    struct buf dir_paths; /* NUL-separated */
    struct buf dir_times; /* struct timespec[2] each */
};

static void cache_drop(struct extract *x)
{
    if (x->cached_fd >= 0)
        close(x->cached_fd);
    x->cached_fd = -1;
    x->cached_dir[0] = '\0';
}

/* Splits a cleaned path into its parent (opened, borrowed fd) and base. */
static int open_parent(struct extract *x, const char *path, const char **ret_base)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (slash) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        *ret_base = slash + 1;
    } else {
        dir[0] = '\0';
        *ret_base = path;
    }
    if (x->cached_fd >= 0 && strcmp(x->cached_dir, dir) == 0)
        return x->cached_fd;
    cache_drop(x);
    int fd = open_dir_create(x->rootfd, dir);
    if (fd < 0)
        return fd;
    x->cached_fd = fd;
    snprintf(x->cached_dir, sizeof(x->cached_dir), "%s", dir);
    return fd;
}

/* Removes what is at parent/name unless it is a directory and keep_dir.
 * Returns 1 when a directory was kept. */
static int clear_existing(struct extract *x, int parent, const char *name, bool keep_dir)
{
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISDIR(st.st_mode)) {
        if (keep_dir)
            return 1;
        int r = rm_rf_at(parent, name);
        /* the cached directory may have been inside: forget it (callers
         * reopen their parent when the cache is gone) */
        cache_drop(x);
        return r;
    }
    if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

static bool xattr_allowed(const char *name)
{
    if (str_has_prefix(name, "trusted.overlay."))
        return false;
    return str_has_prefix(name, "user.") || str_has_prefix(name, "security.") ||
           str_has_prefix(name, "trusted.");
}

static int set_xattrs(int fd, struct archive_entry *e, struct err *err, const char *path)
{
    archive_entry_xattr_reset(e);
    const char *name;
    const void *value;
    size_t size;
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (!name || !xattr_allowed(name))
            continue;
        if (size > MAX_XATTR_VALUE)
            return err_set(err, E2BIG, "xattr `%.100s` of `%.200s` too large", name, path);
        if (fsetxattr(fd, name, value, size, 0) < 0 && errno != ENOTSUP)
            return err_set(err, errno, "set xattr `%.100s` on `%.200s`", name, path);
    }
    return 0;
}

static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
    ts[1].tv_sec = archive_entry_mtime_is_set(e) ? archive_entry_mtime(e) : 0;
    ts[1].tv_nsec = archive_entry_mtime_is_set(e) ? archive_entry_mtime_nsec(e) : 0;
    if (archive_entry_atime_is_set(e)) {
        ts[0].tv_sec = archive_entry_atime(e);
        ts[0].tv_nsec = archive_entry_atime_nsec(e);
    } else {
        ts[0] = ts[1];
    }
}

/* Owner, mode, xattrs (after chown: it clears file capabilities) and times
 * on an open fd. */
/* The process umask, read without changing it (umask(2) would race with
 * other threads); -1 if unknown. */
static int current_umask(void)
{
    static int cached = -2;
    if (cached != -2)
        return cached;
    int m = -1;
    FILE *f = fopen("/proc/self/status", "re");
    if (f) {
        char line[128];
        while (fgets(line, sizeof(line), f))
            if (strncmp(line, "Umask:", 6) == 0) {
                m = (int)strtol(line + 6, NULL, 8);
                break;
            }
        fclose(f);
    }
    cached = m;
    return m;
}

/* Owner, mode, xattrs and times on an open fd. fresh_mode is the mode the
 * object was just created with (0 = not fresh): a fresh object already has
 * our owner and, when the umask spared it, the right mode, which saves two
 * syscalls per file on layers of many small files. */
static int apply_meta_fd(struct extract *x, int fd, struct archive_entry *e, const char *path,
                         bool times, mode_t fresh_mode)
{
    uid_t uid = (uid_t)archive_entry_uid(e);
    gid_t gid = (gid_t)archive_entry_gid(e);
    mode_t perm = archive_entry_perm(e) & 07777;
    bool chowned = false;
    /* a new file's owner: the filesystem ids (the pull helper's are 0,
     * its uid and gid another; setfsuid(-1) only reads them) */
    if (!fresh_mode || uid != (uid_t)setfsuid((uid_t)-1) || gid != (gid_t)setfsgid((gid_t)-1)) {
        if (fchown(fd, uid, gid) < 0)
            return err_set(x->err, errno, "chown `%.200s`", path);
        chowned = true;
    }
    int um = current_umask();
    bool mode_ok = fresh_mode && !chowned && um >= 0 && (perm & 07000) == 0 &&
                   ((fresh_mode & ~(mode_t)um) & 0777) == perm;
    if (!mode_ok && fchmod(fd, perm) < 0)
        return err_set(x->err, errno, "chmod `%.200s`", path);
    int r = set_xattrs(fd, e, x->err, path);
    if (r < 0)
        return r;
    if (times) {
        struct timespec ts[2];
        entry_times(e, ts);
        if (futimens(fd, ts) < 0)
            return err_set(x->err, errno, "set times of `%.200s`", path);
    }
    return 0;
}

/* What the reserve leaves of `avail`: 0 when avail is at or below keep. */
static uint64_t above(uint64_t avail, uint64_t keep) { return avail > keep ? avail - keep : 0; }

/* Called before n more bytes of file data are written: the layer's own
 * limit, then the filesystem's free space, so that neither a decompression
 * bomb nor an honest but too large image fills the node's disk. A check
 * allows the writes up to an eighth of what the reserve leaves (at most
 * FREE_CHECK_EVERY bytes) before the next: checks are rare on a roomy disk,
 * come closer together near the reserve, and up to 8 layers unpacking at
 * once (every pull's, each checking on its own) together stay above it. */
static int check_room(struct extract *x, size_t n, const char *path)
{
    const struct image_limits *l = x->limits;
    uint64_t before = x->written;
    x->written += n;
    if (!l)
        return 0;
    if (l->max_layer_size && x->written > l->max_layer_size)
        return err_set(x->err, EFBIG,
                       "layer unpacks to more than %llu bytes (the max-layer-size limit), at "
                       "`%.200s`",
                       (unsigned long long)l->max_layer_size, path);
    if (!l->min_free || x->written <= x->room_until)
        return 0;
    struct statvfs vfs;
    if (fstatvfs(x->rootfd, &vfs) < 0) {
        x->room_until = x->written + FREE_CHECK_EVERY;
        return 0; /* cannot tell: the write itself will fail if the disk is full */
    }
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    uint64_t keep =
        l->min_free_pct ? (uint64_t)vfs.f_blocks * vfs.f_frsize / 100 * l->min_free : l->min_free;
    uint64_t room = above(avail, keep);
    if (room < n)
        return err_set(x->err, ENOSPC,
                       "the image filesystem has %llu bytes free and kinglet keeps %llu free "
                       "(image-min-free): layer not unpacked, at `%.200s`",
                       (unsigned long long)avail, (unsigned long long)keep, path);
    uint64_t allow = room / ROOM_SHARE < FREE_CHECK_EVERY ? room / ROOM_SHARE : FREE_CHECK_EVERY;
    x->room_until = before + (allow > n ? allow : n);
    return 0;
}

/* Called before entry number `entry` is created: a layer of millions of
 * empty files writes no data but can use up the filesystem's inodes. Free
 * inodes are kept at min_free percent when the reserve is a percentage,
 * at INODE_MIN_FREE_PCT when it is a size, checked as check_room checks
 * bytes. Filesystems that report no inode count (btrfs) are not checked. */
static int check_inodes(struct extract *x, uint64_t entry, const char *path)
{
    const struct image_limits *l = x->limits;
    if (!l || !l->min_free || entry < x->inodes_until)
        return 0;
    struct statvfs vfs;
    if (fstatvfs(x->rootfd, &vfs) < 0 || vfs.f_files == 0) {
        x->inodes_until = entry + INODE_CHECK_EVERY;
        return 0;
    }
    uint64_t pct = l->min_free_pct ? l->min_free : INODE_MIN_FREE_PCT;
    uint64_t keep = (uint64_t)vfs.f_files / 100 * pct;
    uint64_t room = above(vfs.f_favail, keep);
    if (room == 0)
        return err_set(x->err, ENOSPC,
                       "the image filesystem has %llu inodes free and kinglet keeps %llu free "
                       "(image-min-free): layer not unpacked, at `%.200s`",
                       (unsigned long long)vfs.f_favail, (unsigned long long)keep, path);
    uint64_t allow = room / ROOM_SHARE < INODE_CHECK_EVERY ? room / ROOM_SHARE : INODE_CHECK_EVERY;
    x->inodes_until = entry + (allow > 1 ? allow : 1);
    return 0;
}

static int write_data(struct extract *x, int fd, const char *path, struct archive_entry *e)
{
    const void *buf;
    size_t size;
    la_int64_t off;
    int64_t end = 0;
    for (;;) {
        int r = archive_read_data_block(x->a, &buf, &size, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return -EIO;
        const uint8_t *b = buf;
        int rc = check_room(x, size, path);
        if (rc < 0)
            return rc;
        while (size > 0) {
            ssize_t n = pwrite(fd, b, size, off);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return err_set(x->err, errno, "write `%.200s`", path);
            }
            b += n;
            size -= (size_t)n;
            off += n;
        }
        if (off > end)
            end = off;
    }
    int64_t want = archive_entry_size(e);
    if (want > end && ftruncate(fd, want) < 0) /* trailing hole of a sparse file */
        return err_set(x->err, errno, "truncate `%.200s`", path);
    return 0;
}

static int do_whiteout(struct extract *x, int parent, const char *base, const char *path)
{
    if (strcmp(base, ".wh..wh..opq") == 0) {
        int fd = openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return err_set(x->err, errno, "open directory of `%.200s`", path);
        int r = fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0);
        int e = errno;
        close(fd);
        if (r < 0)
            return err_set(x->err, e, "mark `%.200s` opaque", path);
        return 0;
    }
    if (str_has_prefix(base, ".wh..wh."))
        return 0; /* aufs bookkeeping (.wh..wh.plnk etc.): meaningless here */
    const char *name = base + 4;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return err_set(x->err, EINVAL, "invalid whiteout `%.200s`", path);
    int r = clear_existing(x, parent, name, false);
    if (r < 0)
        return err_set(x->err, -r, "replace `%.200s`", path);
    if (x->cached_fd < 0) {
        /* removing a directory dropped the parent cache (and its fd) */
        const char *b;
        parent = open_parent(x, path, &b);
        if (parent < 0)
            return err_set(x->err, -parent, "open parent of `%.200s`", path);
    }
    if (mknodat(parent, name, S_IFCHR | 0, makedev(0, 0)) < 0)
        return err_set(x->err, errno, "create whiteout for `%.200s`", path);
    x->stats->inodes++;
    return 0;
}

static int extract_entry(struct extract *x, struct archive_entry *e)
{
    const char *raw = archive_entry_pathname(e);
    if (!raw)
        return err_set(x->err, EINVAL, "tar entry without a name");
    char path[PATH_MAX];
    int r = clean_path(raw, path, sizeof(path));
    if (r == -EINVAL)
        return err_set(x->err, EPERM, "tar entry `%.200s` escapes the layer (path traversal)", raw);
    if (r < 0)
        return err_set(x->err, -r, "tar entry `%.200s`", raw);

    mode_t type = archive_entry_filetype(e);
    const char *hardlink = archive_entry_hardlink(e);

    if (!*path) {
        /* the layer root itself: metadata only */
        if (type != AE_IFDIR)
            return 0;
        int fd = openat(x->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return err_set(x->err, errno, "open layer root");
        r = apply_meta_fd(x, fd, e, "/", false, 0);
        close(fd);
        if (r < 0)
            return r;
        struct timespec ts[2];
        entry_times(e, ts);
        if (buf_append(&x->dir_paths, "", 1) < 0 || buf_append(&x->dir_times, ts, sizeof(ts)) < 0)
            return err_set(x->err, ENOMEM, "extract");
        return 0;
    }

    const char *base;
    int parent = open_parent(x, path, &base);
    if (parent == -EXDEV || parent == -ELOOP)
        return err_set(x->err, EPERM,
                       "tar entry `%.200s` goes through a symlink that leads "
                       "outside the layer",
                       path);
    if (parent < 0)
        return err_set(x->err, -parent, "open parent directory of `%.200s`", path);

    if (str_has_prefix(base, ".wh."))
        return do_whiteout(x, parent, base, path);

    if (hardlink) {
        char target[PATH_MAX];
        r = clean_path(hardlink, target, sizeof(target));
        if (r == -EINVAL || (r == 0 && !*target))
            return err_set(x->err, EPERM, "hardlink `%.200s` -> `%.200s` escapes the layer", path,
                           hardlink);
        if (r < 0)
            return err_set(x->err, -r, "hardlink `%.200s`", path);
        if (strcmp(target, path) == 0)
            return 0;
        /* the parent cache may be invalidated below: open the target's own */
        const char *tslash = strrchr(target, '/');
        char tdir[PATH_MAX];
        const char *tbase = target;
        tdir[0] = '\0';
        if (tslash) {
            memcpy(tdir, target, (size_t)(tslash - target));
            tdir[tslash - target] = '\0';
            tbase = tslash + 1;
        }
        int tfd = open_in_root(x->rootfd, tdir, O_PATH | O_DIRECTORY);
        if (tfd == -EXDEV || tfd == -ELOOP)
            return err_set(x->err, EPERM,
                           "hardlink `%.200s` -> `%.200s` goes through a symlink that leads "
                           "outside the layer",
                           path, hardlink);
        if (tfd < 0)
            return err_set(x->err, -tfd, "hardlink `%.200s`: target `%.200s` not in the layer",
                           path, hardlink);
        struct stat st;
        if (fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode)) {
            int en = S_ISDIR(st.st_mode) ? EPERM : errno;
            close(tfd);
            return err_set(x->err, en, "hardlink `%.200s`: target `%.200s` not in the layer", path,
                           hardlink);
        }
        r = clear_existing(x, parent, base, false);
        if (r >= 0 && x->cached_fd < 0) {
            parent = open_parent(x, path, &base);
            r = parent < 0 ? parent : 0;
        }
        if (r < 0) {
            close(tfd);
            return err_set(x->err, -r, "replace `%.200s`", path);
        }
        r = linkat(tfd, tbase, parent, base, 0);
        int en = errno;
        close(tfd);
        if (r < 0)
            return err_set(x->err, en, "hardlink `%.200s` -> `%.200s`", path, hardlink);
        return 0;
    }

    /* regular files try O_EXCL first and clear only on EEXIST */
    r = type == AE_IFREG ? 0 : clear_existing(x, parent, base, type == AE_IFDIR);
    if (r < 0)
        return err_set(x->err, -r, "replace `%.200s`", path);
    bool kept_dir = r == 1;
    if (x->cached_fd < 0) {
        parent = open_parent(x, path, &base);
        if (parent < 0)
            return err_set(x->err, -parent, "open parent directory of `%.200s`", path);
    }
    uid_t uid = (uid_t)archive_entry_uid(e);
    gid_t gid = (gid_t)archive_entry_gid(e);
    struct timespec ts[2];
    entry_times(e, ts);

    switch (type) {
    case AE_IFREG: {
        mode_t cmode = archive_entry_perm(e) & 0777;
        int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
        int fd = openat(parent, base, flags, cmode);
        if (fd < 0 && errno == EEXIST) {
            r = clear_existing(x, parent, base, false);
            if (r < 0)
                return err_set(x->err, -r, "replace `%.200s`", path);
            if (x->cached_fd < 0) {
                parent = open_parent(x, path, &base);
                if (parent < 0)
                    return err_set(x->err, -parent, "open parent of `%.200s`", path);
            }
            fd = openat(parent, base, flags, cmode);
        }
        if (fd < 0)
            return err_set(x->err, errno, "create `%.200s`", path);
        r = write_data(x, fd, path, e);
        if (r == 0)
            r = apply_meta_fd(x, fd, e, path, true, cmode | S_IFREG);
        /* allocated, not apparent, size: a sparse entry claiming a
         * terabyte must not make the image filesystem look full */
        struct stat st;
        if (r == 0 && fstat(fd, &st) == 0)
            x->stats->bytes += (uint64_t)st.st_blocks * 512u;
        close(fd);
        if (r < 0)
            return r;
        break;
    }
    case AE_IFDIR: {
        mode_t dmode = archive_entry_perm(e) & 0777;
        if (!kept_dir && mkdirat(parent, base, dmode) < 0)
            return err_set(x->err, errno, "mkdir `%.200s`", path);
        int fd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return err_set(x->err, errno, "open `%.200s`", path);
        r = apply_meta_fd(x, fd, e, path, false, kept_dir ? 0 : (dmode | S_IFDIR));
        close(fd);
        if (r < 0)
            return r;
        if (buf_append(&x->dir_paths, path, strlen(path) + 1) < 0 ||
            buf_append(&x->dir_times, ts, sizeof(ts)) < 0)
            return err_set(x->err, ENOMEM, "extract");
        break;
    }
    case AE_IFLNK: {
        const char *target = archive_entry_symlink(e);
        if (!target)
            return err_set(x->err, EINVAL, "symlink `%.200s` without a target", path);
        if (symlinkat(target, parent, base) < 0)
            return err_set(x->err, errno, "symlink `%.200s`", path);
        if (fchownat(parent, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(x->err, errno, "chown `%.200s`", path);
        if (utimensat(parent, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(x->err, errno, "set times of `%.200s`", path);
        break;
    }
    case AE_IFCHR:
    case AE_IFBLK:
    case AE_IFIFO: {
        mode_t m = (type == AE_IFCHR ? S_IFCHR : type == AE_IFBLK ? S_IFBLK : S_IFIFO) | 0600;
        dev_t dev = type == AE_IFIFO ? 0 : archive_entry_rdev(e);
        if (mknodat(parent, base, m, dev) < 0) {
            /* the pull helper may make no device node (its seccomp filter):
             * skipped, as containerd does where it cannot make them */
            if (errno == EPERM && type != AE_IFIFO) {
                log_debug("layer: device node `%.200s` skipped", path);
                return 0;
            }
            return err_set(x->err, errno, "mknod `%.200s`", path);
        }
        if (fchownat(parent, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(x->err, errno, "chown `%.200s`", path);
        if (fchmodat(parent, base, archive_entry_perm(e) & 07777, 0) < 0)
            return err_set(x->err, errno, "chmod `%.200s`", path);
        if (utimensat(parent, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
            return err_set(x->err, errno, "set times of `%.200s`", path);
        break;
    }
    default:
        return 0; /* sockets and the like: not part of an image */
    }
    x->stats->inodes++;
    return 0;
}

static void fix_dir_times(struct extract *x)
{
    size_t off = 0, i = 0;
    const struct timespec *times = (const struct timespec *)x->dir_times.data;
    cache_drop(x);
    while (off < x->dir_paths.len) {
        const char *p = (const char *)x->dir_paths.data + off;
        int fd = open_in_root(x->rootfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (fd >= 0) {
            futimens(fd, &times[2 * i]);
            close(fd);
        }
        off += strlen(p) + 1;
        i++;
    }
}

int image_layer_unpack(int rootfd, struct layer_source *src, const struct layer_expect *expect,
                       const atomic_bool *cancel, struct layer_stats *ret, struct err *err)
{
    struct pipeline p = {.src = src, .expect = expect, .cancel = cancel, .err = err};
    struct extract x = {
        .rootfd = rootfd, .stats = ret, .err = err, .limits = expect->limits, .cached_fd = -1};
    *ret = (struct layer_stats){0};
    int r = 0;
    p.raw_h = hasher_new();
    p.diff_h = hasher_new();
    p.out = malloc(OUT_CHUNK);
    x.a = archive_read_new();
    if (!p.raw_h || !p.diff_h || !p.out || !x.a) {
        r = err_set(err, ENOMEM, "unpack layer");
        goto out;
    }
    archive_read_support_format_tar(x.a);
    archive_read_set_format_option(x.a, "tar", "hdrcharset", "BINARY");
    if (archive_read_open(x.a, &p, NULL, archive_read_cb, NULL) != ARCHIVE_OK) {
        r = p.error
                ? p.error
                : err_set(err, EINVAL, "layer is not a tar archive: %s", archive_error_string(x.a));
        goto out;
    }
    for (unsigned n = 0;; n++) {
        struct archive_entry *e;
        int ar = archive_read_next_header(x.a, &e);
        if (ar == ARCHIVE_EOF)
            break;
        if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN) {
            r = p.error ? p.error
                        : err_set(err, EINVAL, "corrupt layer tar: %s", archive_error_string(x.a));
            goto out;
        }
        if (n >= MAX_ENTRIES) {
            r = err_set(err, E2BIG, "layer has more than %u entries", MAX_ENTRIES);
            goto out;
        }
        const char *name = archive_entry_pathname(e);
        if ((r = check_inodes(&x, n, name ? name : "")) < 0)
            goto out;
        r = extract_entry(&x, e);
        if (r < 0) {
            if (p.error)
                r = p.error;
            else if (r == -EIO && !err->code)
                r = err_set(err, EIO, "read layer: %s", archive_error_string(x.a));
            goto out;
        }
    }
    /* Drain what follows the tar's end blocks so the whole blob is hashed. */
    for (;;) {
        const void *b;
        size_t n = 0;
        r = produce(&p, &b, &n);
        if (r < 0)
            goto out;
        if (n == 0)
            break;
    }
    fix_dir_times(&x);
    char *raw = ret->digest;
    hasher_final(p.raw_h, raw);
    ret->raw_size = p.raw_len;
    hasher_final(p.diff_h, ret->diff_id);
    if (expect->size >= 0 && p.raw_len != (uint64_t)expect->size) {
        r = err_set(err, EPROTO, "layer size mismatch: got %llu bytes, descriptor says %lld",
                    (unsigned long long)p.raw_len, (long long)expect->size);
        goto out;
    }
    if (expect->digest && strcmp(raw, expect->digest) != 0) {
        r = err_set(err, EPROTO, "layer digest mismatch: got %s, expected %s", raw, expect->digest);
        goto out;
    }
    if (expect->diff_id && strcmp(ret->diff_id, expect->diff_id) != 0) {
        r = err_set(err, EPROTO, "layer diff_id mismatch: got %s, config says %s", ret->diff_id,
                    expect->diff_id);
        goto out;
    }
out:
    cache_drop(&x);
    if (x.a)
        archive_read_free(x.a);
    if (p.z_init)
        inflateEnd(&p.z);
    ZSTD_freeDStream(p.zs);
    hasher_free(p.raw_h);
    hasher_free(p.diff_h);
    free(p.out);
    buf_free(&x.dir_paths);
    buf_free(&x.dir_times);
    return r;
}
