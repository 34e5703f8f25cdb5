/* src/base: size parsing, du_path, rm_rf_at and sealed memfds. */
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "harness.h"

#include "base/base.h"

static void sizes(void **state)
{
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {
        {"0", 0},
        {"1048576", 1048576},
        {"512K", 512u << 10},
        {"64M", 64u << 20},
        {"64m", 64u << 20},
        {"64MiB", 64u << 20},
        {"64Mi", 64u << 20},
        {"64MB", 64u << 20},
        {"10G", 10ULL << 30},
        {"2T", 2ULL << 40},
        {"15E", 15ULL << 60},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 1;
        if (parse_size(good[i].s, &v) != 0 || v != good[i].v)
            fail_msg("`%s`: got %llu, want %llu", good[i].s, (unsigned long long)v,
                     (unsigned long long)good[i].v);
    }
    const char *bad[] = {"",     "M",    "-1",    " 1",  "1 ",
                         "1X",   "1Mx",  "1MiBs", "16E", "99999999999999999999",
                         "1.5G", "0x10", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        if (parse_size(bad[i], &v) != -EINVAL || v != 7)
            fail_msg("`%s` accepted as %llu", bad[i] ? bad[i] : "(null)", (unsigned long long)v);
    }
}

static void sizes_or_percent(void **state)
{
    uint64_t v;
    bool pct;
    assert_int_equal(parse_size_or_percent("5%", &v, &pct), 0);
    assert_true(pct);
    assert_int_equal(v, 5);
    assert_int_equal(parse_size_or_percent("99%", &v, &pct), 0);
    assert_int_equal(v, 99);
    assert_int_equal(parse_size_or_percent("128M", &v, &pct), 0);
    assert_false(pct);
    assert_int_equal(v, 128u << 20);
    const char *bad[] = {"%", "100%", "5 %", "-5%", "5%%", "x%", "5.5%"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse_size_or_percent(bad[i], &v, &pct) != -EINVAL)
            fail_msg("`%s` accepted", bad[i]);
}

static void write_file(const char *path, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    char *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(i * 7 + 1);
    assert_int_equal(write_all(fd, b, n), 0);
    free(b);
    close(fd);
}

static char *mktree(void)
{
    char tmpl[] = "/tmp/kinglet-du-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static void du_counts_like_du(void **state)
{
    char *d = mktree();
    char p[512], q[512];
    uint64_t b0, n0, b, n;
    assert_int_equal(du_path(d, &b0, &n0), 0);
    assert_int_equal(n0, 1); /* the directory itself */
    snprintf(p, sizeof(p), "%s/sub", d);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/sub/f", d);
    write_file(p, 1 << 20);
    snprintf(q, sizeof(q), "%s/sub/hardlink", d);
    assert_int_equal(link(p, q), 0);
    snprintf(q, sizeof(q), "%s/symlink", d);
    assert_int_equal(symlink("/nonexistent", q), 0);
    /* a sparse file: 1 GiB long, one block allocated */
    snprintf(p, sizeof(p), "%s/sparse", d);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "x", 1, 1 << 30), 1);
    close(fd);
    assert_int_equal(du_path(d, &b, &n), 0);
    assert_int_equal(n, n0 + 4); /* sub, f (once), symlink, sparse */
    if (b - b0 < (1u << 20) || b - b0 > (1u << 20) + (256u << 10))
        fail_msg("bytes grew by %llu, want about 1 MiB", (unsigned long long)(b - b0));
    assert_int_equal(du_path("/nonexistent/kinglet", &b, &n), -ENOENT);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
    free(d);
}

/* A mount below the tree (a running container's rootfs) is not counted. */
static void du_stays_on_one_filesystem(void **state)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        skip(); /* needs root for a private mount namespace */
    char *d = mktree();
    char p[512];
    snprintf(p, sizeof(p), "%s/mnt", d);
    assert_int_equal(mkdir(p, 0755), 0);
    uint64_t b0, n0, b, n;
    assert_int_equal(du_path(d, &b0, &n0), 0);
    assert_int_equal(mount("tmpfs", p, "tmpfs", 0, "size=16m"), 0);
    char f[600];
    snprintf(f, sizeof(f), "%s/big", p);
    write_file(f, 4 << 20);
    assert_int_equal(du_path(d, &b, &n), 0);
    if (b > b0 || n > n0) /* the mountpoint itself is left out too */
        fail_msg("counted the mount: %llu bytes and %llu inodes, before %llu and %llu",
                 (unsigned long long)b, (unsigned long long)n, (unsigned long long)b0,
                 (unsigned long long)n0);
    umount2(p, MNT_DETACH);
    /* nor a bind mount from the same filesystem (same st_dev) */
    char *src = mktree();
    snprintf(f, sizeof(f), "%s/big", src);
    write_file(f, 4 << 20);
    assert_int_equal(mount(src, p, NULL, MS_BIND, NULL), 0);
    assert_int_equal(du_path(d, &b, &n), 0);
    if (b > b0 || n > n0)
        fail_msg("counted the bind mount: %llu bytes and %llu inodes, before %llu and %llu",
                 (unsigned long long)b, (unsigned long long)n, (unsigned long long)b0,
                 (unsigned long long)n0);
    umount2(p, MNT_DETACH);
    assert_int_equal(rm_rf_at(AT_FDCWD, src), 0);
    free(src);
    rmdir(p);
    rmdir(d);
    free(d);
}

/* rm_rf_at removes a tree, leaves what its symlinks point to alone, and
 * refuses to empty a mount inside the tree. */
static void rm_rf_stays_in_the_tree(void **state)
{
    char *d = mktree(), *out = mktree();
    char p[512], q[512];
    snprintf(p, sizeof(p), "%s/a/b", d);
    assert_int_equal(mkdir_p(p, 0755), 0);
    snprintf(q, sizeof(q), "%s/keep", out);
    write_file(q, 10);
    snprintf(p, sizeof(p), "%s/a/b/link", d);
    assert_int_equal(symlink(out, p), 0);
    snprintf(p, sizeof(p), "%s/a/b/f", d);
    write_file(p, 100);
    int dfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(dfd >= 0);
    assert_int_equal(rm_rf_at(dfd, d + 5), 0);
    assert_int_equal(access(d, F_OK), -1);
    assert_int_equal(access(q, F_OK), 0);      /* the symlink's target survives */
    assert_int_equal(rm_rf_at(dfd, d + 5), 0); /* absent: fine */

    if (geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
        snprintf(p, sizeof(p), "%s/m", d);
        assert_int_equal(mkdir_p(p, 0755), 0);
        assert_int_equal(mount(out, p, NULL, MS_BIND, NULL), 0);
        /* an fd opened before unshare() looks paths up in the old mounts */
        close(dfd);
        dfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dfd >= 0);
        assert_int_equal(rm_rf_at(dfd, d + 5), -EBUSY);
        assert_int_equal(access(q, F_OK), 0); /* nothing removed through the mount */
        umount2(p, MNT_DETACH);
        assert_int_equal(rm_rf_at(dfd, d + 5), 0);
    }
    assert_int_equal(rm_rf_at(dfd, out + 5), 0);
    close(dfd);
    free(d);
    free(out);
}

/* What memfd_sealed hands out holds the data and refuses every change. */
static void memfd_sealed_cannot_change(void **state)
{
    (void)state;
    static const char data[] = "#!/bin/false\nsome program";
    int fd = memfd_sealed("kinglet-test", data, sizeof(data));
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int want = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
    assert_int_equal(fcntl(fd, F_GET_SEALS) & want, want);
    char buf[sizeof(data)];
    assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(data));
    assert_memory_equal(buf, data, sizeof(data));
    assert_int_equal(pwrite(fd, "x", 1, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(fd, 1), -1);
    assert_int_equal(ftruncate(fd, 4096), -1);
    /* Reopened for writing through /proc, as an attacker would. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int w = open(path, O_WRONLY | O_CLOEXEC);
    if (w >= 0) {
        assert_int_equal(write(w, "x", 1), -1);
        assert_int_equal(errno, EPERM);
        close(w);
    }
    assert_int_equal(fcntl(fd, F_ADD_SEALS, 0), -1); /* F_SEAL_SEAL */
    close(fd);
    /* The test program runs from a file of the build: not sealed. */
    assert_false(exe_is_sealed());
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(sizes),
    cmocka_unit_test(sizes_or_percent),
    cmocka_unit_test(du_counts_like_du),
    cmocka_unit_test(du_stays_on_one_filesystem),
    cmocka_unit_test(rm_rf_stays_in_the_tree),
    cmocka_unit_test(memfd_sealed_cannot_change),
};
UNIT_MAIN(tests)
