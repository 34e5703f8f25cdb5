/* Shared libraries loaded on first use.
 *
 * libcurl, libarchive, mbedTLS and libnftables (with everything they pull
 * in: GnuTLS, Kerberos, LDAP, libxml2, ICU, libstdc++...) are needed only
 * while pulling or unpacking images or changing nftables rules. Linked
 * normally, the dynamic loader maps and relocates all of them at start, which
 * costs the idle daemon and every container monitor several megabytes of
 * RSS. Instead, the modules that use them call through wrappers (see
 * src/image/lazy.c, src/net/lazy.c) that resolve each function here on its
 * first call, as systemd does for its optional libraries.
 *
 * The static binary links those libraries instead (LAZY_LINKED, see
 * LAZY_WRAP in base.h): nothing here is built into it. */
#include "base.h"

#if !LAZY_LINKED
#include <dlfcn.h>
#include <pthread.h>

void *lazy_lib_sym(struct lazy_lib *lib, const char *name)
{
    void *handle = __atomic_load_n(&lib->handle, __ATOMIC_ACQUIRE);
    if (!handle) {
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&lock);
        handle = lib->handle;
        if (!handle) {
            handle = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                /* What the dynamic loader would have said at start. */
                log_error("cannot load %s (Debian package %s): %s", lib->soname, lib->package,
                          dlerror());
                abort();
            }
            log_debug("loaded %s", lib->soname);
            __atomic_store_n(&lib->handle, handle, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&lock);
    }
    void *sym = dlsym(handle, name);
    if (!sym) {
        log_error("%s has no symbol %s", lib->soname, name);
        abort();
    }
    return sym;
}
#endif
