# Images: references, manifests, registry client, store, unpacking, import.
noinst_LIBRARIES += libkimage.a
libkimage_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(ZLIB_CFLAGS)
libkimage_a_SOURCES = src/image/image.h src/image/internal.h \
	src/image/ref.c src/image/manifest.c src/image/digest.c \
	src/image/unpack.c src/image/store.c src/image/registry.c src/image/regparse.c \
	src/image/pull.c src/image/import.c src/image/service.c src/image/cli.c src/image/cli_store.c \
	src/image/cli_progress.c \
	src/image/lazy.c src/image/helper.c src/image/http.h src/image/http_internal.h src/image/http.c \
	src/image/http_url.c \
	src/image/tlsname.c
# zlib (gzip) is linked by every user of libkimage; sha256 is our own
# (src/base/sha256.c).
DEP_LIBS += $(ZLIB_LIBS)
