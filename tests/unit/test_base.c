/* src/base: the error object, size parsing, du_path, rm_rf_at, sealed memfds
 * and SHA-256. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"

#include "base/base.h"

static void path_depths(void **state)
{
    (void)state;
    assert_int_equal(path_depth("/"), 0);
    assert_int_equal(path_depth(""), 0);
    assert_int_equal(path_depth("/etc"), 1);
    assert_int_equal(path_depth("/etc/"), 1);
    assert_int_equal(path_depth("//etc//hosts/"), 2);
    assert_int_equal(path_depth("/a/b/c"), 3);
}

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

/* The system's text is kept out of the message and added once, where the
 * error is shown, however many times the message is passed on. */
static void errors_show_the_system_text_once(void **state)
{
    (void)state;
    struct err e = {0};
    assert_int_equal(err_set(&e, -ENOENT, "open `%s`", "/x"), -ENOENT);
    assert_string_equal(e.msg, "open `/x`");
    assert_string_equal(err_str(&e), "open `/x`: No such file or directory");
    /* A child's message handed on, as the init's reaches the creator. */
    struct err parent = {0};
    err_set(&parent, e.code, "%s", e.msg);
    err_wrap(&parent, "create container `%s`", "c1");
    assert_string_equal(err_str(&parent),
                        "create container `c1`: open `/x`: No such file or directory");
    /* A message that says it all keeps its code but shows no errno text. */
    err_set_msg(&e, ENOENT, "manifest unknown (MANIFEST_UNKNOWN)");
    assert_int_equal(e.code, ENOENT);
    assert_string_equal(err_str(&e), "manifest unknown (MANIFEST_UNKNOWN)");
    err_wrap(&e, "pull `%s`", "busybox");
    assert_string_equal(err_str(&e), "pull `busybox`: manifest unknown (MANIFEST_UNKNOWN)");
    /* A code no errno can be (sent by another process): EIO. */
    assert_int_equal(err_set(&e, INT_MIN, "odd"), -EIO);
    assert_int_equal(err_set(&e, 70000, "odd"), -EIO);
    assert_int_equal(err_set(&e, -4095, "edge"), -4095);
    /* Code 0: EIO, with no system text. */
    assert_int_equal(err_set(&e, 0, "broken"), -EIO);
    assert_string_equal(err_str(&e), "broken");
    /* err_set resets what err_set_msg recorded. */
    err_set(&e, EACCES, "x");
    assert_string_equal(err_str(&e), "x: Permission denied");
    err_clear(&e);
    assert_int_equal(e.code, 0);
    assert_string_equal(err_str(&e), "");
    assert_int_equal(err_set(NULL, EPERM, "nothing"), -EPERM);
}

/* The record another process reads rebuilds the error as it was (code,
 * message, no_sys), and whatever else arrives is refused, not shown. */
static void err_records_round_trip_and_refuse_the_rest(void **state)
{
    (void)state;
    struct err e = {0}, got = {0};
    err_set(&e, ENOENT, "`mounts[3].source`: `/x`");
    uint8_t buf[ERR_RECORD_MAX + 8];
    size_t n = err_record_encode(&e, buf);
    assert_int_equal(n, ERR_RECORD_HEAD + strlen(e.msg));
    assert_int_equal(err_record_decode(buf, n, &got), 0);
    assert_int_equal(got.code, ENOENT);
    assert_string_equal(err_str(&got), "`mounts[3].source`: `/x`: No such file or directory");
    /* Every cut of it is refused, and leaves the object alone. */
    for (size_t k = 0; k < n; k++) {
        struct err none = {0};
        assert_int_equal(err_record_decode(buf, k, &none), -EPROTO);
        assert_int_equal(none.code, 0);
    }
    /* So is a record with a byte too many, a NUL in its message, another
     * magic, unknown flags, or one longer than any record can be. */
    buf[n] = 'x';
    assert_int_equal(err_record_decode(buf, n + 1, &got), -EPROTO);
    buf[ERR_RECORD_HEAD + 2] = '\0';
    assert_int_equal(err_record_decode(buf, n, &got), -EPROTO);
    n = err_record_encode(&e, buf);
    buf[0] ^= 1;
    assert_int_equal(err_record_decode(buf, n, &got), -EPROTO);
    n = err_record_encode(&e, buf);
    buf[9] = 1;
    assert_int_equal(err_record_decode(buf, n, &got), -EPROTO);
    assert_int_equal(err_record_decode(buf, ERR_RECORD_MAX + 1, &got), -EMSGSIZE);
    /* err_set_msg's errors stay without system text; a longest message
     * fits; a code that is no errno becomes EIO. */
    memset(e.msg, 'm', sizeof(e.msg));
    e.msg[sizeof(e.msg) - 1] = '\0';
    e.code = EACCES;
    e.no_sys = true;
    n = err_record_encode(&e, buf);
    assert_int_equal(n, ERR_RECORD_MAX);
    assert_int_equal(err_record_decode(buf, n, &got), 0);
    assert_int_equal(got.code, EACCES);
    assert_string_equal(err_str(&got), e.msg);
    int32_t odd = 70000;
    memcpy(buf + 4, &odd, 4);
    assert_int_equal(err_record_decode(buf, n, &got), 0);
    assert_int_equal(got.code, EIO);

    /* Through a pipe: nothing written, a record, a truncated record, and
     * a writer that sends far more than a record (read stops one byte
     * past the largest). */
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    close(p[1]);
    assert_int_equal(err_record_read(p[0], &got), -ENODATA);
    close(p[0]);
    assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    err_set(&e, ENOTDIR, "bundle");
    assert_int_equal(err_record_write(p[1], &e), 0);
    /* the writer still open (a child holds it): the read does not wait */
    assert_int_equal(err_record_read(p[0], &got), 0);
    assert_string_equal(err_str(&got), "bundle: Not a directory");
    n = err_record_encode(&e, buf);
    assert_int_equal(write(p[1], buf, n - 1), (ssize_t)n - 1);
    assert_int_equal(err_record_read(p[0], &got), -EPROTO);
    static uint8_t big[3 * ERR_RECORD_MAX];
    memset(big, 'x', sizeof(big));
    memcpy(big, buf, ERR_RECORD_HEAD);
    assert_int_equal(write(p[1], big, sizeof(big)), (ssize_t)sizeof(big));
    assert_int_equal(err_record_read(p[0], &got), -EMSGSIZE);
    close(p[0]);
    close(p[1]);
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

static char *escaped(const char *s, bool json)
{
    static char out[512];
    struct buf b = {0};
    assert_int_equal(log_escape(&b, s, json), 0);
    snprintf(out, sizeof(out), "%.*s", (int)b.len, b.data ? (char *)b.data : "");
    buf_free(&b);
    return out;
}

static void log_escapes_controls(void **state)
{
    /* a line break cannot start a forged line, in either format */
    assert_string_equal(escaped("x\n2026-01-01T00:00:00Z error FORGED", false),
                        "x\\n2026-01-01T00:00:00Z error FORGED");
    assert_string_equal(escaped("a\r\tb\x1b[31mc\x7f", false), "a\\r\\tb\\x1b[31mc\\x7f");
    assert_string_equal(escaped("a\r\tb\x1b[31mc\x7f", true), "a\\r\\tb\\u001b[31mc\\u007f");
    assert_string_equal(escaped("q\"\\z", true), "q\\\"\\\\z");
    assert_string_equal(escaped("q\"\\z", false), "q\"\\z");
    /* UTF-8 passes; C1 controls and malformed bytes do not */
    assert_string_equal(escaped("caf\xc3\xa9 \xe2\x82\xac", false), "caf\xc3\xa9 \xe2\x82\xac");
    assert_string_equal(escaped("\xc2\x9b"
                                "2J",
                                false),
                        "\\u009b2J");
    assert_string_equal(escaped("\xc2\x9b"
                                "2J",
                                true),
                        "\\u009b2J");
    assert_string_equal(escaped("\xff\xc3(\xe2\x82", false), "\\xff\\xc3(\\xe2\\x82");
    assert_string_equal(escaped("\xff", true), "\\ufffd");
    assert_string_equal(escaped("\xc0\xaf\xed\xa0\x80", false), "\\xc0\\xaf\\xed\\xa0\\x80");
    assert_string_equal(escaped("", false), "");
}

static void atomic_writes_are_private(void **state)
{
    char dir[] = "/tmp/kinglet-atomic-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], a[160], b[160];
    snprintf(path, sizeof(path), "%s/rec.json", dir);
    /* every call its own temporary name */
    assert_int_equal(atomic_tmp_name(path, a, sizeof(a)), 0);
    assert_int_equal(atomic_tmp_name(path, b, sizeof(b)), 0);
    assert_string_not_equal(a, b);
    mode_t old = umask(077);
    assert_int_equal(write_file_atomic(AT_FDCWD, path, "one", 3, 0640), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640); /* the mode asked, not the umask's */
    assert_int_equal(write_file_atomic(AT_FDCWD, path, "two!", 4, 0600), 0);
    char *text = NULL;
    assert_int_equal(read_file_at(AT_FDCWD, path, 64, &text, NULL), 0);
    assert_string_equal(text, "two!");
    free(text);
    /* stale temporaries: a dead writer's go, a live one's and strangers stay */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    assert_true(child > 0);
    waitpid(child, NULL, 0);
    char dead[160], live[160], old_style[160], stranger[160];
    snprintf(dead, sizeof(dead), "%s/rec.json.tmp.%d.7", dir, (int)child);
    snprintf(old_style, sizeof(old_style), "%s/rec.json.tmp.%d", dir, (int)child);
    snprintf(live, sizeof(live), "%s/rec.json.tmp.%d.1", dir, (int)getppid());
    snprintf(stranger, sizeof(stranger), "%s/notes.tmp.x", dir);
    const char *all[] = {dead, old_style, live, stranger};
    for (size_t i = 0; i < 4; i++) {
        int fd = open(all[i], O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    size_t removed = 0;
    assert_int_equal(remove_stale_tmp_files(dir, &removed), 0);
    assert_int_equal(removed, 2);
    assert_int_equal(access(dead, F_OK), -1);
    assert_int_equal(access(old_style, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_equal(access(stranger, F_OK), 0);
    assert_int_equal(access(path, F_OK), 0);
    assert_false(atomic_tmp_stale("rec.json.tmp.-1"));
    assert_false(atomic_tmp_stale("rec.json.tmp.12x"));
    assert_false(atomic_tmp_stale(".tmp.1"));
    int dfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_int_equal(rm_rf_at(dfd, dir + 5), 0);
    close(dfd);
}

/* ---- sha256 ---- */

static void hex32(const uint8_t md[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Both the portable code and (where the CPU has them) the SHA instructions. */
static void sha256_with(bool portable, const void *data, size_t len, size_t chunk, char out[65])
{
    struct sha256 s;
    if (portable)
        sha256_init_portable(&s);
    else
        sha256_init(&s);
    const uint8_t *p = data;
    for (size_t off = 0; off < len || off == 0; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        sha256_update(&s, p + off, n);
        if (len == 0)
            break;
    }
    uint8_t md[32];
    sha256_final(&s, md);
    hex32(md, out);
}

static void sha256_fips_vectors(void **state)
{
    static const struct {
        const char *msg;
        size_t repeat;
        const char *want;
    } v[] = {
        /* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf") */
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu",
         1, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
        {"\xbd", 1, "68325720aabd7c82f30f554b313d0570c95accbb7dc4b5aae11204c08ffe732b"},
        {"\xc9\x8c\x8e\x55", 1, "7abc22c0ae5af26ce93dbb94433a0e0b2e119d014f8e7f65bd56c61ccccd9504"},
    };
    bool accel = sha256_accelerated();
    printf("sha256: %s\n", accel ? "the CPU's SHA instructions and the portable code"
                                 : "the portable code only (no SHA instructions here)");
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t ml = strlen(v[i].msg), len = ml * v[i].repeat;
        uint8_t *data = malloc(len + 1);
        assert_non_null(data);
        for (size_t k = 0; k < v[i].repeat; k++)
            memcpy(data + k * ml, v[i].msg, ml);
        for (int portable = 0; portable < 2; portable++) {
            char got[65];
            sha256_with(portable, data, len, len ? len : 1, got);
            if (strcmp(got, v[i].want) != 0)
                fail_msg("vector %zu (%s): got %s, want %s", i, portable ? "portable" : "default",
                         got, v[i].want);
        }
        free(data);
    }
}

static void fill_random(uint8_t *p, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    for (size_t off = 0; off < n;) {
        ssize_t r = read(fd, p + off, n - off);
        assert_true(r > 0);
        off += (size_t)r;
    }
    close(fd);
}

/* Fed in any pieces, the digest is the one-shot digest; both codes agree. */
static void sha256_incremental_is_one_shot(void **state)
{
    enum { N = 4096 + 77 };
    static uint8_t data[N];
    fill_random(data, sizeof(data));
    for (size_t len = 0; len <= 300; len++) {
        char one[65], other[65];
        sha256_with(true, data, len, len ? len : 1, one);
        for (size_t chunk = 1; chunk <= 130; chunk++) {
            sha256_with(false, data, len, chunk, other);
            if (strcmp(one, other) != 0)
                fail_msg("len %zu in chunks of %zu: %s, one-shot portable %s", len, chunk, other,
                         one);
        }
    }
    /* random cuts through a longer message, empty updates included */
    char want[65];
    sha256_with(false, data, N, N, want);
    unsigned seed = (unsigned)getpid();
    for (int round = 0; round < 200; round++) {
        struct sha256 s;
        if (round % 2)
            sha256_init_portable(&s);
        else
            sha256_init(&s);
        for (size_t off = 0; off < N;) {
            size_t n = (size_t)rand_r(&seed) % 300;
            if (n > N - off)
                n = N - off;
            sha256_update(&s, data + off, n);
            off += n;
        }
        uint8_t md[32];
        char got[65];
        sha256_final(&s, md);
        hex32(md, got);
        if (strcmp(got, want) != 0)
            fail_msg("round %d: random pieces give %s, one-shot %s", round, got, want);
    }
}

/* sha256sum(1) agrees on random data of every length around the padding
 * boundaries and on a few large ones. The data is in memfds that
 * sha256sum opens through /proc/PID/fd: a crash leaves no file behind. */
static void sha256_agrees_with_sha256sum(void **state)
{
    static const size_t big[] = {1000003, 4u << 20, (4u << 20) + 63};
    enum { SMALL = 200, FILES = SMALL + 3 };
    size_t lens[FILES];
    int fds[FILES];
    char want[FILES][65];
    uint8_t *data = malloc(big[2]);
    assert_non_null(data);
    size_t cmd_len = 32 + FILES * 32;
    char *cmd = malloc(cmd_len);
    assert_non_null(cmd);
    int at = snprintf(cmd, cmd_len, "sha256sum");
    for (size_t i = 0; i < FILES; i++) {
        lens[i] = i < SMALL ? i : big[i - SMALL];
        fill_random(data, lens[i]);
        fds[i] = memfd_create("sha256-test", MFD_CLOEXEC);
        assert_true(fds[i] >= 0);
        assert_int_equal(write(fds[i], data, lens[i]), (ssize_t)lens[i]);
        sha256_with(i % 2, data, lens[i], 65536, want[i]);
        at += snprintf(cmd + at, cmd_len - (size_t)at, " /proc/%d/fd/%d", (int)getpid(), fds[i]);
    }
    /* all of sha256sum's answers first, then the checks */
    static char got[FILES][65];
    size_t seen = 0;
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        char hex[65];
        int fd;
        size_t i = FILES;
        if (sscanf(line, "%64s /proc/%*d/fd/%d", hex, &fd) == 2)
            for (i = 0; i < FILES && fds[i] != fd; i++)
                ;
        if (i < FILES && !got[i][0]) {
            memcpy(got[i], hex, sizeof(hex));
            seen++;
        }
    }
    assert_int_equal(pclose(f), 0);
    assert_int_equal(seen, FILES);
    for (size_t i = 0; i < FILES; i++) {
        if (strcmp(got[i], want[i]) != 0)
            fail_msg("%zu bytes: sha256sum %s, ours %s", lens[i], got[i], want[i]);
        close(fds[i]);
    }
    free(cmd);
    free(data);
}

/* A command name may hold spaces and parentheses: the fields are counted
 * after its last ')'. A zombie shows 'Z' and keeps its start time. */
static void proc_start_time_reads_past_the_name(void **state)
{
    uint64_t self, child, again;
    char st = 0;
    assert_int_equal(proc_start_time(getpid(), &self, &st), 0);
    assert_int_equal(st, 'R');
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_NAME, "a) 1 2 (b) c");
        uint64_t mine = 0;
        proc_start_time(getpid(), &mine, NULL);
        _exit(write(p[1], &mine, sizeof(mine)) == sizeof(mine) ? 0 : 1);
    }
    close(p[1]);
    uint64_t told = 0;
    assert_int_equal(read(p[0], &told, sizeof(told)), sizeof(told));
    close(p[0]);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, pid, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(proc_start_time(pid, &child, &st), 0);
    assert_int_equal(st, 'Z');
    if (child != told || child < self)
        fail_msg("child started at %llu, it read %llu (parent %llu)", (unsigned long long)child,
                 (unsigned long long)told, (unsigned long long)self);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    assert_true(proc_start_time(pid, &again, NULL) < 0);
}

/* A pidfd is handed out only for the process that started at the given
 * time: a pid taken by a later process is refused. */
static void pidfd_open_started_refuses_another_start(void **state)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with the case, even if it fails */
        pause();
        _exit(0);
    }
    uint64_t start;
    assert_int_equal(proc_start_time(pid, &start, NULL), 0);
    assert_int_equal(pidfd_open_started(pid, start + 1), -ESRCH);
    int fd = pidfd_open_started(pid, start);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int status = -1;
    assert_int_equal(pidfd_reap(fd, &status), 0);
    kill(pid, SIGKILL);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, -1), 1);
    assert_int_equal(pidfd_reap(fd, &status), 1);
    assert_int_equal(status, 128 + SIGKILL);
    close(fd);
    assert_int_equal(pidfd_open_started(pid, start), -ESRCH);
}

static void strv_keeps_order_and_copies(void **state)
{
    char **v = NULL;
    size_t n = 0;
    char name[] = "b";
    assert_int_equal(strv_push(&v, &n, "a"), 0);
    assert_int_equal(strv_push(&v, &n, name), 0);
    assert_int_equal(strv_push(&v, &n, "c"), 0);
    name[0] = 'x'; /* a copy was pushed */
    assert_int_equal(n, 3);
    assert_true(strv_contains(v, n, "b"));
    assert_false(strv_contains(v, n, "x"));
    char **d = NULL;
    assert_int_equal(strv_dup((const char *const *)v, n, &d), 0);
    assert_true(d != v && d[1] != v[1]);
    assert_string_equal(d[1], "b");
    assert_true(strv_remove(v, &n, "a"));
    assert_false(strv_remove(v, &n, "a"));
    assert_int_equal(n, 2);
    assert_string_equal(v[0], "b");
    assert_string_equal(v[1], "c");
    strv_free(v, n);
    strv_free(d, 3);
    strv_free(NULL, 0);
    assert_int_equal(strv_dup(NULL, 0, &d), 0);
    assert_non_null(d);
    strv_free(d, 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(errors_show_the_system_text_once),
    cmocka_unit_test(err_records_round_trip_and_refuse_the_rest),
    cmocka_unit_test(log_escapes_controls),
    cmocka_unit_test(atomic_writes_are_private),
    cmocka_unit_test(path_depths),
    cmocka_unit_test(sizes),
    cmocka_unit_test(sizes_or_percent),
    cmocka_unit_test(du_counts_like_du),
    cmocka_unit_test(du_stays_on_one_filesystem),
    cmocka_unit_test(rm_rf_stays_in_the_tree),
    cmocka_unit_test(memfd_sealed_cannot_change),
    cmocka_unit_test(sha256_fips_vectors),
    cmocka_unit_test(sha256_incremental_is_one_shot),
    cmocka_unit_test(sha256_agrees_with_sha256sum),
    cmocka_unit_test(proc_start_time_reads_past_the_name),
    cmocka_unit_test(pidfd_open_started_refuses_another_start),
    cmocka_unit_test(strv_keeps_order_and_copies),
};
UNIT_MAIN(tests)
