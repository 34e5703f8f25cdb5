/* libFuzzer: the layer unpacker on arbitrary (possibly compressed) tar
 * bytes, with digests, sizes and limits set as a pull sets them.
 *
 * Input: one flags byte, then the layer's raw bytes.
 *   bit 0: expect the raw bytes' digest (bit 1: a wrong one)
 *   bit 2: expect their size (bit 3: one byte less)
 *   bit 4: a tight max-layer-size (64 KiB) instead of 8 MiB
 * A layer that unpacks is unpacked again with the diff_id it produced
 * (it must succeed again, with the same digest and diff_id) and with a
 * wrong one (it must fail with EPROTO).
 *
 * The escape oracle: the layer directory sits four levels down a private
 * sandbox directory, and a Landlock ruleset (where the kernel has it)
 * denies this thread every write outside the sandbox and the fuzzer's own
 * directories. The target traps when
 *  - anything but the layer's parents is left in the sandbox (a `..` or a
 *    relative symlink that got out of the layer);
 *  - the unpacker failed with EACCES or EXDEV, which only Landlock answers
 *    here (an absolute symlink or a hardlink that reached the host);
 *  - a file of the layer has more links than the layer holds (a hardlink
 *    to a file outside, where Landlock is missing).
 * With the `..` refusal of clean_path and RESOLVE_BENEATH of open_in_root
 * taken out of unpack.c, the seeds alone trip it. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "fuzz_tmpdir.h"
#include "image/internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NEST "a/b/c/d"

struct src {
    const uint8_t *data;
    size_t size, off;
};

static int src_read(void *ctx, const void **buf, size_t *len, struct err *err)
{
    struct src *s = ctx;
    size_t n = s->size - s->off;
    if (n > 4096)
        n = 4096; /* small chunks exercise the stream boundaries */
    *buf = s->data + s->off;
    *len = n;
    s->off += n;
    return 0;
}

static int sandbox = -1;
static char sandbox_path[64];
static char **allowed; /* directories the fuzzer itself writes to */
static size_t n_allowed;

/* A finding: says which oracle, crashes (fuzz_tmpdir removes the sandbox). */
static void fail(const char *why, const struct err *err)
{
    fprintf(stderr, "fuzz_image_unpack: %s (%s)\n", why, err && err->code ? err->msg : "-");
    __builtin_trap();
}

static void allow(const char *path)
{
    char **v = realloc(allowed, (n_allowed + 1) * sizeof(*v));
    if (!v)
        abort();
    allowed = v;
    allowed[n_allowed++] = strdup(path);
}

/* The corpus directories and the artifact prefix's directory. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    allow(".");
    for (int i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        if (str_has_prefix(a, "-artifact_prefix=") || str_has_prefix(a, "-exact_artifact_path=")) {
            char d[4096];
            snprintf(d, sizeof(d), "%s", strchr(a, '=') + 1);
            char *slash = strrchr(d, '/');
            if (slash)
                *slash = '\0';
            allow(slash ? (d[0] ? d : "/") : ".");
        } else if (a[0] != '-') {
            allow(a);
        }
    }
    return 0;
}

/* Denies this thread writes outside the sandbox and the fuzzer's own
 * directories; nothing happens where the kernel lacks Landlock. */
static void landlock(void)
{
    struct landlock_ruleset_attr attr = {
        .handled_access_fs = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                             LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                             LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                             LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                             LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM |
                             LANDLOCK_ACCESS_FS_REFER,
    };
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
    if (fd < 0)
        return;
    struct landlock_path_beneath_attr pb = {.allowed_access = attr.handled_access_fs};
    for (size_t i = 0; i <= n_allowed; i++) {
        pb.parent_fd = open(i < n_allowed ? allowed[i] : sandbox_path, O_PATH | O_CLOEXEC);
        if (pb.parent_fd < 0)
            continue;
        syscall(SYS_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
        close(pb.parent_fd);
    }
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (syscall(SYS_landlock_restrict_self, fd, 0) < 0)
        abort();
    close(fd);
}

static void setup(void)
{
    snprintf(sandbox_path, sizeof(sandbox_path), "/tmp/kinglet-fuzz-unpack-XXXXXX");
    fuzz_tmpdir(sandbox_path);
    sandbox = open(sandbox_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sandbox < 0 || mkdirat(sandbox, "a", 0755) < 0 || mkdirat(sandbox, "a/b", 0755) < 0 ||
        mkdirat(sandbox, "a/b/c", 0755) < 0 || mkdirat(sandbox, NEST, 0755) < 0)
        abort();
    landlock();
}

/* Links of regular files inside dir (fd, consumed), by inode: any file
 * whose link count is above what the layer holds has a name outside. */
struct links {
    ino_t ino[4096];
    nlink_t seen[4096], nlink[4096];
    size_t n;
};

static void count_links(int fd, struct links *l, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < 64) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                count_links(sub, l, depth + 1);
        } else if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
            size_t i = 0;
            while (i < l->n && l->ino[i] != st.st_ino)
                i++;
            if (i == l->n && l->n < ARRAY_SIZE(l->ino)) {
                l->ino[l->n] = st.st_ino;
                l->nlink[l->n] = st.st_nlink;
                l->seen[l->n++] = 0;
            }
            if (i < l->n)
                l->seen[i]++;
        }
    }
    closedir(d);
}

static void check_links(int layer)
{
    static struct links l;
    l.n = 0;
    count_links(openat(layer, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), &l, 0);
    for (size_t i = 0; i < l.n; i++)
        if (l.seen[i] < l.nlink[i])
            fail("a hardlink to a file outside the layer", NULL);
}

/* Anything in the sandbox but the layer's parents is an escape. */
static void check_sandbox(void)
{
    static const char *const dirs[] = {".", "a", "a/b", "a/b/c", NEST};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        int fd = openat(sandbox, dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            fail("a parent of the layer was replaced", NULL);
        DIR *d = fdopendir(fd);
        if (!d)
            abort();
        struct dirent *de;
        unsigned n = 0;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                n++;
        closedir(d);
        if (n != (i + 1 < ARRAY_SIZE(dirs) ? 1u : 0u))
            fail("something was written next to the layer", NULL);
    }
}

static int unpack(const uint8_t *data, size_t size, const struct layer_expect *ex,
                  struct layer_stats *st, struct err *err)
{
    if (mkdirat(sandbox, NEST "/layer", 0755) < 0)
        abort();
    int fd = openat(sandbox, NEST "/layer", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        abort();
    struct src s = {data, size, 0};
    struct layer_source src = {src_read, &s};
    *err = (struct err){0};
    int r = image_layer_unpack(fd, &src, ex, NULL, st, err);
    if (r < 0 && (err->code == EACCES || err->code == EXDEV))
        fail("Landlock refused a write outside the sandbox", err);
    check_links(fd);
    close(fd);
    rm_rf_at(sandbox, NEST "/layer");
    check_sandbox();
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (sandbox < 0)
        setup();
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    data++;
    size--;
    char digest[72], wrong[72];
    digest_of(data, size, digest);
    snprintf(wrong, sizeof(wrong), "sha256:%064d", 0);
    struct image_limits limits = {
        .max_layer_size = flags & 16 ? 64u << 10 : 8u << 20,
        .min_free = IMAGE_MIN_FREE_DEFAULT,
        .min_free_pct = true,
        .max_layer_ratio = IMAGE_MAX_LAYER_RATIO_DEFAULT,
    };
    struct layer_expect ex = {
        .digest = flags & 1   ? digest
                  : flags & 2 ? wrong
                              : NULL,
        .size = flags & 4   ? (int64_t)size
                : flags & 8 ? (int64_t)size - 1
                            : -1,
        .limits = &limits,
    };
    struct layer_stats st, st2;
    struct err err;
    int r = unpack(data, size, &ex, &st, &err);
    if (r == 0 && ((flags & 2 && !(flags & 1)) || (flags & 8 && !(flags & 4))))
        fail("a wrong digest or size was accepted", NULL);
    if (r < 0)
        return 0;
    if (strcmp(st.digest, digest) != 0 || st.raw_size != size)
        fail("the stats disagree with the input", NULL);
    /* the same layer with its own diff_id unpacks again, the same */
    char diff_id[72];
    memcpy(diff_id, st.diff_id, sizeof(diff_id));
    ex.diff_id = diff_id;
    if (unpack(data, size, &ex, &st2, &err) < 0 || strcmp(st2.diff_id, diff_id) != 0 ||
        st2.inodes != st.inodes)
        fail("the layer did not unpack again the same with its own diff_id", &err);
    /* and with a wrong one it fails, as a mismatch */
    ex.diff_id = wrong;
    if (strcmp(diff_id, wrong) != 0 && (unpack(data, size, &ex, &st2, &err) != -EPROTO))
        fail("a wrong diff_id was not a mismatch", &err);
    return 0;
}
