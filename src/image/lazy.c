/* libcurl and libarchive through wrappers that load them on
 * first use (see src/base/lazy.c for why): the idle daemon and container
 * monitors never map them. Each wrapper has the library's own name and
 * prototype, so the rest of the module calls the libraries as usual. */
#define CURL_DISABLE_TYPECHECK 1 /* the type-checking macros would rename the wrappers */
#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"

static struct lazy_lib curl_lib = {"libcurl.so.4", "libcurl4", NULL};
static struct lazy_lib archive_lib = {"libarchive.so.13", "libarchive13", NULL};

LAZY_WRAP(curl_lib, void, curl_easy_cleanup, (CURL * curl), (curl))
LAZY_WRAP(curl_lib, char *, curl_easy_escape, (CURL * handle, const char *string, int length),
          (handle, string, length))
LAZY_WRAP(curl_lib, CURL *, curl_easy_init, (void), ())
LAZY_WRAP(curl_lib, CURLcode, curl_easy_pause, (CURL * handle, int bitmask), (handle, bitmask))
LAZY_WRAP(curl_lib, CURLcode, curl_easy_perform, (CURL * curl), (curl))
LAZY_WRAP(curl_lib, const char *, curl_easy_strerror, (CURLcode a0), (a0))
LAZY_WRAP(curl_lib, void, curl_free, (void *p), (p))
LAZY_WRAP(curl_lib, CURLcode, curl_global_init, (long flags), (flags))
LAZY_WRAP(curl_lib, CURLMcode, curl_multi_add_handle, (CURLM * multi_handle, CURL *curl_handle),
          (multi_handle, curl_handle))
LAZY_WRAP(curl_lib, CURLMcode, curl_multi_cleanup, (CURLM * multi_handle), (multi_handle))
LAZY_WRAP(curl_lib, CURLMsg *, curl_multi_info_read, (CURLM * multi_handle, int *msgs_in_queue),
          (multi_handle, msgs_in_queue))
LAZY_WRAP(curl_lib, CURLM *, curl_multi_init, (void), ())
LAZY_WRAP(curl_lib, CURLMcode, curl_multi_perform, (CURLM * multi_handle, int *running_handles),
          (multi_handle, running_handles))
LAZY_WRAP(curl_lib, CURLMcode, curl_multi_poll,
          (CURLM * multi_handle, struct curl_waitfd extra_fds[], unsigned int extra_nfds,
           int timeout_ms, int *ret),
          (multi_handle, extra_fds, extra_nfds, timeout_ms, ret))
LAZY_WRAP(curl_lib, CURLMcode, curl_multi_remove_handle, (CURLM * multi_handle, CURL *curl_handle),
          (multi_handle, curl_handle))
LAZY_WRAP(curl_lib, struct curl_slist *, curl_slist_append,
          (struct curl_slist * list, const char *data), (list, data))
LAZY_WRAP(curl_lib, void, curl_slist_free_all, (struct curl_slist * list), (list))
LAZY_WRAP(curl_lib, CURLSH *, curl_share_init, (void), ())
LAZY_WRAP(curl_lib, CURLSHcode, curl_share_cleanup, (CURLSH * share), (share))
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

/* The variadic ones: curl reads exactly one argument after the option,
 * of the type the option's number range names; libarchive formats. The
 * static binary calls the libraries' own (see LAZY_WRAP). */
#if !LAZY_LINKED
CURLcode(curl_easy_setopt)(CURL *curl, CURLoption option, ...)
{
    static __typeof__(&curl_easy_setopt) f;
    if (!__atomic_load_n(&f, __ATOMIC_RELAXED))
        __atomic_store_n(&f,
                         (__typeof__(&curl_easy_setopt))lazy_lib_sym(&curl_lib, "curl_easy_setopt"),
                         __ATOMIC_RELAXED);
    va_list ap;
    va_start(ap, option);
    CURLcode r;
    if (option < CURLOPTTYPE_OBJECTPOINT) {
        long v = va_arg(ap, long);
        r = f(curl, option, v);
    } else if (option < CURLOPTTYPE_OFF_T) {
        void *v = va_arg(ap, void *);
        r = f(curl, option, v);
    } else if (option < CURLOPTTYPE_BLOB) {
        curl_off_t v = va_arg(ap, curl_off_t);
        r = f(curl, option, v);
    } else {
        void *v = va_arg(ap, void *);
        r = f(curl, option, v);
    }
    va_end(ap);
    return r;
}

CURLSHcode(curl_share_setopt)(CURLSH *share, CURLSHoption option, ...)
{
    static __typeof__(&curl_share_setopt) f;
    if (!__atomic_load_n(&f, __ATOMIC_RELAXED))
        __atomic_store_n(
            &f, (__typeof__(&curl_share_setopt))lazy_lib_sym(&curl_lib, "curl_share_setopt"),
            __ATOMIC_RELAXED);
    va_list ap;
    va_start(ap, option);
    CURLSHcode r;
    if (option == CURLSHOPT_SHARE || option == CURLSHOPT_UNSHARE) {
        long v = va_arg(ap, long); /* a curl_lock_data */
        r = f(share, option, v);
    } else {
        void *v = va_arg(ap, void *); /* lock functions and user data */
        r = f(share, option, v);
    }
    va_end(ap);
    return r;
}

CURLcode(curl_easy_getinfo)(CURL *curl, CURLINFO info, ...)
{
    static __typeof__(&curl_easy_getinfo) f;
    if (!__atomic_load_n(&f, __ATOMIC_RELAXED))
        __atomic_store_n(
            &f, (__typeof__(&curl_easy_getinfo))lazy_lib_sym(&curl_lib, "curl_easy_getinfo"),
            __ATOMIC_RELAXED);
    va_list ap;
    va_start(ap, info);
    void *out = va_arg(ap, void *); /* every CURLINFO takes a pointer */
    va_end(ap);
    return f(curl, info, out);
}

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
