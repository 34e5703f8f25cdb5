/* base: errors, cleanup helpers, logging and small utilities shared by every
 * module. No libuv here: oci/, net/ and image/ code runs in child processes
 * and worker threads as well as on the loop. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- ownership ---------------------------------------------------------- */

#define _cleanup_(f)     __attribute__((cleanup(f)))
#define _cleanup_free_   _cleanup_(freep)
#define _cleanup_close_  _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _unused_         __attribute__((unused))
#define _printf_(a, b)   __attribute__((format(printf, a, b)))
#define _warn_unused_    __attribute__((warn_unused_result))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
static inline void fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

/* Hand over ownership: returns the value and resets the variable. */
#define TAKE_PTR(p)                                                                                \
    ({                                                                                             \
        __typeof__(p) _p = (p);                                                                    \
        (p) = NULL;                                                                                \
        _p;                                                                                        \
    })
#define TAKE_FD(fd)                                                                                \
    ({                                                                                             \
        int _fd = (fd);                                                                            \
        (fd) = -1;                                                                                 \
        _fd;                                                                                       \
    })

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ------------------------------------------------------------- */

/* An error object: an errno-style code plus a message that callers extend
 * with context on the way up ("create container `x`: mount `/proc`: ...").
 * The message never holds the system's text for the code (strerror): that
 * is added once, where the error is shown (err_str), so that a message
 * passed on (from a child process, say) does not carry it twice. As crun's
 * libcrun_error_t keeps status and msg apart.
 * Fixed size so that reporting an error never needs an allocation. */
#define ERR_MSG_MAX 512
struct err {
    int code;    /* positive errno value; 0 = no error */
    bool no_sys; /* the message says it all: show no system text */
    char msg[ERR_MSG_MAX];
};

/* Records `code` (an errno value, sign ignored) and the message; err_str
 * shows strerror(code) after it. Returns -code (or -EIO for 0, with no
 * system text) so that `return err_set(err, errno, "open `%s`", path);`
 * works. err may be NULL. */
int err_set(struct err *err, int code, const char *fmt, ...) _printf_(3, 4);
/* The same, for a message that says it all (a registry's error, say): the
 * code is kept for the caller's mapping (ENOENT -> NOT_FOUND), but err_str
 * shows no system text for it. */
int err_set_msg(struct err *err, int code, const char *fmt, ...) _printf_(3, 4);
/* Prefixes context to an error already set; returns -err->code. */
int err_wrap(struct err *err, const char *fmt, ...) _printf_(2, 3);
/* The error as shown to a person: the message, then ": " and the system's
 * text for the code unless err_set_msg recorded it. A buffer of the calling
 * thread's, valid until its next call: use it once per statement. */
const char *err_str(const struct err *err);
void err_clear(struct err *err);

/* An error as a record for another process: the code and the message
 * apart, never the system's text, so that the reader rebuilds the error
 * object, err_str adds that text once and a status map sees the real
 * errno (libuv's exec-error pipe carries the binary errno the same way).
 * Both ends are this binary on one host: native byte order. Layout:
 *   u32 magic and version ("KER1"), i32 code, u32 flags (1: no_sys),
 *   u32 message length, then the message (no NUL).
 * At most ERR_RECORD_MAX bytes: one write, atomic on a pipe (PIPE_BUF). */
#define ERR_RECORD_MAGIC 0x3152454bu /* "KER1" */
#define ERR_RECORD_HEAD  16
#define ERR_RECORD_MAX   (ERR_RECORD_HEAD + ERR_MSG_MAX - 1)
/* Encodes err into buf; the record's length. */
size_t err_record_encode(const struct err *err, uint8_t buf[static ERR_RECORD_MAX]);
/* Rebuilds an error from exactly one record of len bytes: 0; -EPROTO for a
 * record cut short, of another magic or version, whose length field
 * disagrees with len, or whose message holds a NUL; -EMSGSIZE for one
 * longer than ERR_RECORD_MAX. A code that is no errno becomes EIO. */
int err_record_decode(const void *buf, size_t len, struct err *ret);
/* One write of err's record: 0 or -errno (-EPIPE: nobody reads). */
int err_record_write(int fd, const struct err *err);
/* Reads what fd holds until EOF (or, on a non-blocking fd, until nothing
 * more is pending) and decodes it: 0; -ENODATA when nothing was written;
 * the errors of err_record_decode; -errno of read. Reads at most one byte
 * more than a record can be, whatever the writer sends. */
int err_record_read(int fd, struct err *ret);

/* ---- logging ------------------------------------------------------------ */

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn"/"warning", "info", "debug"; -EINVAL otherwise. */
int log_level_parse(const char *s, enum log_level *ret);
/* "text" (default) or "json" lines; an optional FILE replaces stderr. */
void log_set_json(bool json);
bool log_get_json(void);
void log_set_file(FILE *f);
void log_msg(enum log_level level, const char *fmt, ...) _printf_(2, 3);
/* Appends s to b as log_msg prints it: control characters (C0, DEL, C1)
 * and bytes that are not well-formed UTF-8 escaped (text: \n \r \t \xNN
 * \u00NN; json: the body of a JSON string, with \ufffd for a bad byte).
 * 0 or -ENOMEM. */
struct buf;
int log_escape(struct buf *b, const char *s, bool json);

#define log_enabled(l) ((l) <= log_get_level())
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_enabled(LOG_LEVEL_DEBUG))                                                          \
            log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__);                                                 \
    } while (0)

/* ---- small utilities ---------------------------------------------------- */

/* Monotonic and wall clocks in nanoseconds. */
uint64_t now_mono_ns(void);
uint64_t now_real_ns(void);

/* Whole-file helpers (blocking: never call them on the event loop).
 * read_file_at reads at most max bytes (-EFBIG beyond); the result is
 * NUL-terminated; read_fd_all reads fd to its end the same way, and wipes
 * what it read when it fails (it may be a secret). write_file_atomic writes a temporary, fsyncs it,
 * renames it over path and fsyncs the directory. */
int read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len);
int read_fd_all(int fd, size_t max, char **ret, size_t *ret_len);
/* As read_file_at, path resolved inside the tree at rootfd as if it were
 * "/" (symlinks and ".." never leave it, no mount crossed); -EINVAL for
 * what is not a regular file. For files of a container's image. */
int read_file_in_root(int rootfd, const char *path, size_t max, char **ret, size_t *ret_len);
/* openat2(2): an fd, or -1 with errno. Retried while the kernel says
 * EAGAIN, which it does for RESOLVE_IN_ROOT and RESOLVE_BENEATH when a
 * rename or a mount anywhere on the system raced a ".." of the lookup (the
 * man page's advice); at most OPENAT2_TRIES times. */
#define OPENAT2_TRIES 64
struct open_how;
int openat2_retry(int dirfd, const char *path, const struct open_how *how);
int write_file_atomic(int dirfd, const char *path, const void *data, size_t len, int mode);
/* The temporary is written unnamed (O_TMPFILE) and named
 * PATH.tmp.PID.SEQ only once complete, just before the rename (a named
 * temporary from the start on filesystems without O_TMPFILE): each call has
 * its own, so concurrent writers never truncate each other's; the last
 * rename wins, so callers serialize writes of one record themselves. The
 * file gets exactly mode (umask ignored). */
#define ATOMIC_TMP_INFIX ".tmp."
int atomic_tmp_name(const char *path, char *buf, size_t size);
/* Whether a directory entry is a temporary of write_file_atomic (NAME.tmp.PID
 * or NAME.tmp.PID.SEQ) whose writer is dead. */
bool atomic_tmp_stale(const char *name);
/* Removes the stale temporaries of dead writers in dir (not recursive; a
 * missing dir is fine). Blocking. 0 or the first -errno. */
int remove_stale_tmp_files(const char *dir, size_t *ret_removed);

/* Base64 with padding: a malloc'd string (NULL: no memory); decoding
 * refuses anything but canonical input (-EINVAL), -ENOMEM. */
char *b64_encode(const uint8_t *in, size_t len);
int b64_decode(const char *in, uint8_t **ret, size_t *ret_len);

/* write(2) until everything is written (EINTR retried); -errno. */
int write_all(int fd, const void *data, size_t len);

/* mkdir -p with mode for each created component. */
int mkdir_p(const char *path, int mode);
/* Gives the directory at path exactly mode (a symlink is not followed:
 * -ELOOP/-ENOTDIR), for directories of the daemon's own that an earlier
 * version may have made with another. */
int dir_set_mode(const char *path, int mode);

/* rm -rf of name under dirfd (fs.c) that never follows symlinks and never
 * crosses into another filesystem: a mount left inside the tree fails the
 * removal with -EBUSY instead of losing what is mounted there. Absent: 0. */
int rm_rf_at(int dirfd, const char *name);

/* du(1) of a tree (fs.c): allocated bytes and inodes, hard links once, not
 * descending into mounts (bind mounts included); entries that vanish
 * meanwhile are skipped. Blocking: never on the event loop. */
int du_path(const char *path, uint64_t *ret_bytes, uint64_t *ret_inodes);

/* "1048576", "512K", "64M", "10G", "2T" (powers of 1024; "Ki"/"KiB"/"KB"
 * spellings too) into bytes; -EINVAL for anything else or an overflow. */
int parse_size(const char *s, uint64_t *ret);
/* A size as above, or "N%" with N in 0..99 (*ret_pct set, *ret = N). */
int parse_size_or_percent(const char *s, uint64_t *ret, bool *ret_pct);

/* Growable byte buffer. */
struct buf {
    uint8_t *data;
    size_t len, cap;
};
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_printf(struct buf *b, const char *fmt, ...) _printf_(2, 3);
void buf_free(struct buf *b);
/* Drop the first n bytes. */
void buf_consume(struct buf *b, size_t n);

/* String helpers. */
bool str_has_prefix(const char *s, const char *prefix);
/* The number of components of a path ("/" 0, "/etc" 1, "/etc//hosts/" 2):
 * the depth by which mounts are ordered, parents first. */
size_t path_depth(const char *p);

/* String vectors: n malloc'd strings in a malloc'd array (NULL or any
 * array when n is 0). strv_free accepts NULL. strv_dup copies n strings
 * (an array of one at least, so never NULL on success); strv_push appends
 * a copy of s; both -ENOMEM, leaving *v as it was. strv_remove frees the
 * first string equal to s and closes the gap (order kept): whether there
 * was one. */
void strv_free(char **v, size_t n);
int strv_dup(const char *const *in, size_t n, char ***ret);
bool strv_contains(char *const *v, size_t n, const char *s);
int strv_push(char ***v, size_t *n, const char *s);
bool strv_remove(char **v, size_t *n, const char *s);
/* JSON string escaping into a buffer (for logs and verbose info). */
int buf_append_json_string(struct buf *b, const char *s);

/* Closes every fd from 3 up but those in keep (at most 16; negative ones
 * are skipped). Allocates nothing: for forked children of a threaded
 * process, which must not hold the daemon's sockets, connections or
 * epoll instance. */
void fds_close_all_but(const int *keep, size_t n);

/* Runs path with argv (envp NULL: an empty environment) and waits for it
 * (spawn.c). Its stdin, stdout and stderr are the given fds, -1 for
 * /dev/null; every other fd of ours stays out of it only if it is
 * close-on-exec, as every fd of ours is. Blocking: workers and command-line
 * tools only. 0 with *ret_status a wait(2) status, or -errno when it could
 * not be started. */
int spawn_wait(const char *path, char *const argv[], char *const envp[], int in, int out, int errfd,
               int *ret_status);
/* The same without the wait: the child's pid, for the caller to reap.
 * extra[i] becomes the child's fd 3 + i (each must be above 2 + n_extra,
 * or already at its place). */
int spawn_start(const char *path, char *const argv[], char *const envp[], int in, int out,
                int errfd, const int *extra, size_t n_extra, pid_t *ret_pid);

/* ---- SHA-256 (sha256.c) ------------------------------------------------- */

/* Streaming SHA-256, with the CPU's SHA instructions where it has them.
 * Cannot fail; a context is plain memory (no free). */
typedef void sha256_blocks_fn(uint32_t h[8], const uint8_t *p, size_t n);
struct sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes so far */
    uint8_t buf[64];
    size_t used; /* bytes in buf */
    sha256_blocks_fn *blocks;
};
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Writes the digest; the context must be initialized again before reuse. */
void sha256_final(struct sha256 *s, uint8_t out[32]);
/* For tests: the portable code whatever the CPU, and whether sha256_init
 * picks the SHA instructions. */
void sha256_init_portable(struct sha256 *s);
bool sha256_accelerated(void);

/* ---- programs nothing can write through /proc/PID/exe (exe.c) ----------- */

/* A sealed memfd (no write, growth or shrinking, ever) holding len bytes
 * of data, for execveat(fd, "", ..., AT_EMPTY_PATH); name is what
 * /proc/PID/exe shows ("/memfd:NAME (deleted)"). Close-on-exec. The fd or
 * -errno (memfd_create, write). */
int memfd_sealed(const char *name, const void *data, size_t len);

/* Whether the running binary is one that nothing can write: a sealed memfd,
 * or the read-only overlay view exe_reexec_sealed makes. */
bool exe_is_sealed(void);

/* Makes sure the running binary cannot be written through /proc/PID/exe by
 * anything this process or its children let into a container: if it is
 * not sealed already, executes itself again with argv (and the same
 * environment) from a private read-only overlayfs view of its file, or
 * failing that from a sealed memfd copy. 0 when already sealed; never
 * returns otherwise but with -errno: -ELOOP when even the memfd copy it
 * was executed from does not look sealed, else the errno of what could
 * not be made or executed. */
int exe_reexec_sealed(char **argv);

/* For a process that starts many copies of itself (the daemon spawning
 * `kinglet oci`): makes the read-only overlay view of its binary once, so
 * that the copies start from it, already sealed, instead of each executing
 * itself a second time. -errno when the view cannot be made (the copies
 * then seal themselves). A process that is sealed itself (the daemon,
 * after exe_reexec_sealed) needs no view: its copies start from its own
 * binary. */
int exe_seal_for_children(void);
/* What to spawn for a copy of ourselves, and its environment (NULL: an
 * empty one): the view and its mark, or /proc/self/exe. */
const char *exe_children_path(void);
char *const *exe_children_env(void);

/* Reaps the child behind pidfd if it has exited: 1 and its status in the
 * shell's convention (128+signal when killed), 0 while it runs, -errno. */
int pidfd_reap(int pidfd, int *ret_status);
/* The start time of pid (/proc/PID/stat field 22, clock ticks after boot),
 * which tells it from a later process given the same pid, and its state
 * letter (field 3: 'R', 'S', 'Z', ...) when ret_state is not NULL. -errno
 * from open (-ENOENT: no such process), -ESRCH when it ended meanwhile,
 * -EINVAL for a line it cannot read. Blocking (a /proc read). */
int proc_start_time(pid_t pid, uint64_t *ret, char *ret_state);
/* A pidfd (close-on-exec) of pid while it is still the process that started
 * at start (proc_start_time), checked after the pidfd is held so that a
 * recycled pid is never signalled; readable (poll) once it has exited.
 * -errno of pidfd_open(2) (-ESRCH: no such process), -ESRCH when the pid
 * now belongs to another process or its start time cannot be read. */
int pidfd_open_started(pid_t pid, uint64_t start);

/* ---- libraries loaded on first use (lazy.c) ------------------------------ */

struct lazy_lib {
    const char *soname;  /* "libcurl.so.4" */
    const char *package; /* the Debian package, for the error */
    void *handle;
};

#if KINGLET_STATIC_BINARY
/* The static binary (configure --enable-static-binary) links the libraries
 * themselves: a wrapper would collide with the real function of the same
 * name, so LAZY_WRAP defines none and the call resolves at link time. The
 * unused inline function only keeps the module's struct lazy_lib used. */
#define LAZY_LINKED 1
#define LAZY_WRAP(lib, ret, name, params, args)                                                    \
    static inline __attribute__((unused)) struct lazy_lib *lazy_linked_##name(void)                \
    {                                                                                              \
        return &(lib);                                                                             \
    }
#else
#define LAZY_LINKED 0

/* Resolves a symbol, loading the library on first use. A missing library
 * or symbol is a broken installation: it is logged and aborts, as the
 * dynamic loader would have refused to start. */
void *lazy_lib_sym(struct lazy_lib *lib, const char *name);

/* Defines a wrapper with the library's own name and prototype (from its
 * header) that forwards to the real function. */
#define LAZY_WRAP(lib, ret, name, params, args)                                                    \
    ret(name) params                                                                               \
    {                                                                                              \
        static __typeof__(&(name)) fp;                                                             \
        __typeof__(&(name)) lazy_fn_ = __atomic_load_n(&fp, __ATOMIC_RELAXED);                     \
        if (!lazy_fn_) {                                                                           \
            lazy_fn_ = (__typeof__(&(name)))lazy_lib_sym(&(lib), #name);                           \
            __atomic_store_n(&fp, lazy_fn_, __ATOMIC_RELAXED);                                     \
        }                                                                                          \
        return lazy_fn_ args;                                                                      \
    }
#endif
