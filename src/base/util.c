#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "base.h"

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t now_real_ns(void) { return clock_ns(CLOCK_REALTIME); }

/* What was read is wiped before it is freed on failure: it may be a
 * secret (a password on stdin). */
static void buf_wipe(struct buf *b)
{
    if (b->data)
        explicit_bzero(b->data, b->len);
    buf_free(b);
}

int read_fd_all(int fd, size_t max, char **ret, size_t *ret_len)
{
    struct buf b = {0};
    for (;;) {
        if (buf_reserve(&b, 4096) < 0) {
            buf_free(&b);
            return -ENOMEM;
        }
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len - 1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            buf_wipe(&b);
            return e;
        }
        if (n == 0)
            break;
        b.len += (size_t)n;
        if (b.len > max) {
            buf_wipe(&b);
            return -EFBIG;
        }
    }
    if (buf_reserve(&b, 1) < 0) {
        buf_free(&b);
        return -ENOMEM;
    }
    b.data[b.len] = '\0';
    if (ret_len)
        *ret_len = b.len;
    *ret = (char *)b.data;
    return 0;
}

int read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len)
{
    _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    return read_fd_all(fd, max, ret, ret_len);
}

int openat2_retry(int dirfd, const char *path, const struct open_how *how)
{
    for (int i = 1;; i++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
        if (fd >= 0 || errno != EAGAIN || i == OPENAT2_TRIES)
            return fd;
    }
}

int read_file_in_root(int rootfd, const char *path, size_t max, char **ret, size_t *ret_len)
{
    /* O_NONBLOCK: a FIFO planted at the path must not hang the reader */
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    _cleanup_close_ int fd = openat2_retry(rootfd, path, &how);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    return read_fd_all(fd, max, ret, ret_len);
}

int write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The directory part of path ("." for none), opened. */
static int open_parent(int dirfd, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char dir[PATH_MAX];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof(dir))
        return -1;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int atomic_tmp_name(const char *path, char *buf, size_t size)
{
    /* pid + a per-process sequence: two writers, in one process or in
     * two, never share a temporary (ATOMIC_TMP_INFIX is what start-up
     * cleanup looks for). */
    static atomic_uint seq;
    unsigned n = atomic_fetch_add(&seq, 1);
    int len = snprintf(buf, size, "%s" ATOMIC_TMP_INFIX "%d.%u", path, (int)getpid(), n);
    return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : 0;
}

int write_file_atomic(int dirfd, const char *path, const void *data, size_t len, int mode)
{
    char tmp[PATH_MAX];
    int r = atomic_tmp_name(path, tmp, sizeof(tmp));
    if (r < 0)
        return r;
    _cleanup_close_ int dfd = open_parent(dirfd, path);
    if (dfd < 0)
        return -errno;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *tmpbase = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
    /* An unnamed file first: a writer that dies while writing leaves
     * nothing behind. It gets its name only once complete, and the name
     * is unique, so that concurrent writers never share a file. */
    _cleanup_close_ int fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
    bool named = false;
    if (fd < 0) {
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return -errno;
        /* a filesystem without O_TMPFILE: a named temporary */
        fd = openat(dfd, tmpbase, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
            return -errno;
        named = true;
    }
    /* the mode as asked, whatever the umask */
    if (fchmod(fd, (mode_t)mode) < 0)
        r = -errno;
    if (r == 0)
        r = write_all(fd, data, len);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (r == 0 && !named) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        /* without /proc: AT_EMPTY_PATH (needs CAP_DAC_READ_SEARCH) */
        if (linkat(AT_FDCWD, proc, dfd, tmpbase, AT_SYMLINK_FOLLOW) < 0 &&
            (errno != ENOENT || linkat(fd, "", dfd, tmpbase, AT_EMPTY_PATH) < 0))
            r = -errno;
        else
            named = true;
    }
    if (r == 0 && renameat(dfd, tmpbase, dfd, base) < 0)
        r = -errno;
    if (r < 0) {
        if (named)
            unlinkat(dfd, tmpbase, 0);
        return r;
    }
    /* Make the rename itself durable. */
    fsync(dfd);
    return 0;
}

static bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

bool atomic_tmp_stale(const char *name)
{
    const char *p = strstr(name, ATOMIC_TMP_INFIX);
    if (!p || p == name)
        return false;
    p += strlen(ATOMIC_TMP_INFIX);
    /* PID, then (since the per-call suffix) .SEQ */
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || end == p || pid <= 0 || pid > INT_MAX || *p == '-' || *p == '+')
        return false;
    if (*end == '.') {
        const char *q = end + 1;
        if (!*q)
            return false;
        for (; *q; q++)
            if (*q < '0' || *q > '9')
                return false;
    } else if (*end) {
        return false;
    }
    return pid != getpid() && !pid_alive((pid_t)pid);
}

int remove_stale_tmp_files(const char *dir, size_t *ret_removed)
{
    if (ret_removed)
        *ret_removed = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = -errno;
        close(fd);
        return e;
    }
    int r = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
            continue;
        if (!atomic_tmp_stale(de->d_name))
            continue;
        struct stat st;
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(fd, de->d_name, 0) < 0) {
            if (errno != ENOENT && r == 0)
                r = -errno;
        } else if (ret_removed) {
            (*ret_removed)++;
        }
    }
    closedir(d);
    return r;
}

int dir_set_mode(const char *path, int mode)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((st.st_mode & 07777) != (mode_t)mode && fchmod(fd, (mode_t)mode) < 0)
        return -errno;
    return 0;
}

int mkdir_p(const char *path, int mode)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
        return -ENAMETOOLONG;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (b->cap - b->len >= extra && b->data)
        return 0;
    size_t need = b->len + extra;
    if (need < b->len)
        return -ENOMEM;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    uint8_t *d = realloc(b->data, cap);
    if (!d)
        return -ENOMEM;
    b->data = d;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
    if (buf_reserve(b, len) < 0)
        return -ENOMEM;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if (buf_reserve(b, (size_t)n + 1) < 0)
        return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

bool str_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

void strv_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int strv_dup(const char *const *in, size_t n, char ***ret)
{
    char **v = calloc(n ? n : 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(v[i] = strdup(in[i]))) {
            strv_free(v, i);
            return -ENOMEM;
        }
    *ret = v;
    return 0;
}

bool strv_contains(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return true;
    return false;
}

int strv_push(char ***v, size_t *n, const char *s)
{
    char *copy = strdup(s);
    char **nv = copy ? realloc(*v, (*n + 1) * sizeof(char *)) : NULL;
    if (!nv) {
        free(copy);
        return -ENOMEM;
    }
    *v = nv;
    nv[(*n)++] = copy;
    return 0;
}

bool strv_remove(char **v, size_t *n, const char *s)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(v[i], s) == 0) {
            free(v[i]);
            memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(char *));
            (*n)--;
            return true;
        }
    return false;
}

size_t path_depth(const char *p)
{
    size_t n = 0;
    for (; p && *p; p++)
        n += *p != '/' && (p[1] == '/' || !p[1]);
    return n;
}

int buf_append_json_string(struct buf *b, const char *s)
{
    int r = buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; r == 0 && *p; p++) {
        switch (*p) {
        case '"':
            r = buf_append(b, "\\\"", 2);
            break;
        case '\\':
            r = buf_append(b, "\\\\", 2);
            break;
        case '\n':
            r = buf_append(b, "\\n", 2);
            break;
        case '\r':
            r = buf_append(b, "\\r", 2);
            break;
        case '\t':
            r = buf_append(b, "\\t", 2);
            break;
        default:
            if (*p < 0x20)
                r = buf_printf(b, "\\u%04x", *p);
            else
                r = buf_append(b, p, 1);
        }
    }
    return r ? r : buf_append(b, "\"", 1);
}

int parse_size(const char *s, uint64_t *ret)
{
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    static const char units[] = "KMGTPE";
    unsigned shift = 0;
    if (*end) {
        const char *u = strchr(units, *end >= 'a' ? *end - 32 : *end);
        if (!u)
            return -EINVAL;
        shift = 10u * (unsigned)(u - units + 1);
        end++;
        if (strcmp(end, "i") == 0 || strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
            end += strlen(end);
        if (*end)
            return -EINVAL;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -EINVAL;
    *ret = (uint64_t)v << shift;
    return 0;
}

int parse_size_or_percent(const char *s, uint64_t *ret, bool *ret_pct)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 2 || s[n - 1] != '%') {
        *ret_pct = false;
        return parse_size(s, ret);
    }
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] < '0' || s[i] > '9' || i >= 2)
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *ret = v;
    *ret_pct = true;
    return 0;
}

void fds_close_all_but(const int *keep, size_t n)
{
    /* keep is small: a selection sort of a copy, no allocation (callers
     * are forked children of a threaded process) */
    int k[16];
    size_t m = 0;
    for (size_t i = 0; i < n && m < ARRAY_SIZE(k); i++)
        if (keep[i] >= 3)
            k[m++] = keep[i];
    for (size_t i = 0; i < m; i++)
        for (size_t j = i + 1; j < m; j++)
            if (k[j] < k[i]) {
                int t = k[i];
                k[i] = k[j];
                k[j] = t;
            }
    unsigned next = 3;
    for (size_t i = 0; i < m; i++) {
        if ((unsigned)k[i] < next)
            continue;
        if ((unsigned)k[i] > next)
            syscall(SYS_close_range, next, (unsigned)k[i] - 1, 0U);
        next = (unsigned)k[i] + 1;
    }
    syscall(SYS_close_range, next, ~0U, 0U);
}

/* ---- base64 (RFC 4648, with padding) ---- */

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *b64_encode(const uint8_t *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64chars[(v >> 18) & 63];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64chars[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;
    return p ? (int)(p - b64chars) : -1;
}

int b64_decode(const char *in, uint8_t **ret, size_t *ret_len)
{
    size_t len = strlen(in);
    if (len % 4)
        return -EINVAL;
    _cleanup_free_ uint8_t *out = malloc(len / 4 * 3 + 1);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            /* padding only in the last two places */
            v[k] = in[i + k] == '=' && k >= 2 ? 0 : b64_value(in[i + k]);
            if (v[k] < 0)
                return -EINVAL;
        }
        bool pad2 = in[i + 2] == '=', pad3 = in[i + 3] == '=';
        if ((pad2 && !pad3) || ((pad2 || pad3) && i + 4 != len))
            return -EINVAL;
        uint32_t x =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(x >> 16);
        if (!pad2)
            out[o++] = (uint8_t)(x >> 8);
        if (!pad3)
            out[o++] = (uint8_t)x;
    }
    *ret = TAKE_PTR(out);
    *ret_len = o;
    return 0;
}
