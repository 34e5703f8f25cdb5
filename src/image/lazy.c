/* libarchive through wrappers that load them on
 * first use (see src/base/lazy.c for why): the idle daemon and container
 * monitors never map it. Each wrapper has the library's own name and
 * prototype, so the rest of the module calls the library as usual. */
#include <archive.h>
#include <archive_entry.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "base/base.h"

static struct lazy_lib archive_lib = {"libarchive.so.13", "libarchive13", NULL};

LAZY_WRAP(archive_lib, time_t, archive_entry_atime, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_entry_atime_is_set, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, long, archive_entry_atime_nsec, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, mode_t, archive_entry_filetype, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, la_int64_t, archive_entry_gid, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, const char *, archive_entry_hardlink, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, time_t, archive_entry_mtime, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_entry_mtime_is_set, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, long, archive_entry_mtime_nsec, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, const char *, archive_entry_pathname, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, mode_t, archive_entry_perm, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, dev_t, archive_entry_rdev, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, la_int64_t, archive_entry_size, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, const char *, archive_entry_symlink, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, la_int64_t, archive_entry_uid, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_entry_xattr_next,
          (struct archive_entry * a0, const char **a1, const void **a2, size_t *a3),
          (a0, a1, a2, a3))
LAZY_WRAP(archive_lib, int, archive_entry_xattr_reset, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, const char *, archive_error_string, (struct archive * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_read_data_block,
          (struct archive * a, const void **buff, size_t *size, la_int64_t *offset),
          (a, buff, size, offset))
LAZY_WRAP(archive_lib, int, archive_read_free, (struct archive * a0), (a0))
LAZY_WRAP(archive_lib, struct archive *, archive_read_new, (void), ())
LAZY_WRAP(archive_lib, int, archive_read_next_header,
          (struct archive * a0, struct archive_entry **a1), (a0, a1))
LAZY_WRAP(archive_lib, int, archive_read_open,
          (struct archive * a0, void *_client_data, archive_open_callback *a2,
           archive_read_callback *a3, archive_close_callback *a4),
          (a0, _client_data, a2, a3, a4))
LAZY_WRAP(archive_lib, int, archive_read_open_filename,
          (struct archive * a0, const char *_filename, size_t _block_size),
          (a0, _filename, _block_size))
LAZY_WRAP(archive_lib, int, archive_read_set_format_option,
          (struct archive * _a, const char *m, const char *o, const char *v), (_a, m, o, v))
LAZY_WRAP(archive_lib, int, archive_read_support_filter_all, (struct archive * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_read_support_format_tar, (struct archive * a0), (a0))

/* Writing tars (the checkpoint archives of src/cri). */
LAZY_WRAP(archive_lib, struct archive_entry *, archive_entry_new, (void), ())
LAZY_WRAP(archive_lib, void, archive_entry_free, (struct archive_entry * a0), (a0))
LAZY_WRAP(archive_lib, void, archive_entry_copy_pathname,
          (struct archive_entry * a0, const char *a1), (a0, a1))
LAZY_WRAP(archive_lib, void, archive_entry_copy_symlink,
          (struct archive_entry * a0, const char *a1), (a0, a1))
LAZY_WRAP(archive_lib, void, archive_entry_copy_stat,
          (struct archive_entry * a0, const struct stat *a1), (a0, a1))
LAZY_WRAP(archive_lib, struct archive *, archive_write_new, (void), ())
LAZY_WRAP(archive_lib, int, archive_write_set_format_pax_restricted, (struct archive * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_write_open_fd, (struct archive * a0, int a1), (a0, a1))
LAZY_WRAP(archive_lib, int, archive_write_header, (struct archive * a0, struct archive_entry *a1),
          (a0, a1))
LAZY_WRAP(archive_lib, la_ssize_t, archive_write_data,
          (struct archive * a0, const void *a1, size_t a2), (a0, a1, a2))
LAZY_WRAP(archive_lib, int, archive_write_close, (struct archive * a0), (a0))
LAZY_WRAP(archive_lib, int, archive_write_free, (struct archive * a0), (a0))

/* The variadic one: libarchive formats. The static binary calls the
 * library's own (see LAZY_WRAP). */
#if !LAZY_LINKED
void(archive_set_error)(struct archive *a, int err, const char *fmt, ...)
{
    static __typeof__(&archive_set_error) f;
    if (!__atomic_load_n(&f, __ATOMIC_RELAXED))
        __atomic_store_n(
            &f, (__typeof__(&archive_set_error))lazy_lib_sym(&archive_lib, "archive_set_error"),
            __ATOMIC_RELAXED);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    f(a, err, "%s", msg);
}
#endif
