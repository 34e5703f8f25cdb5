# Images: references, manifests, registry client, store, unpacking, import.
noinst_LIBRARIES += libkimage.a
libkimage_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(CRYPTO_CFLAGS) $(ZLIB_CFLAGS)
libkimage_a_SOURCES = src/image/image.h src/image/internal.h \
	src/image/ref.c src/image/manifest.c src/image/digest.c \
	src/image/unpack.c src/image/store.c src/image/registry.c src/image/regparse.c \
	src/image/pull.c src/image/import.c src/image/service.c src/image/cli.c \
	src/image/lazy.c src/image/helper.c
# zlib (gzip) is linked by every user of libkimage; libcrypto (sha256) is
# loaded on first use (src/image/lazy.c).
DEP_LIBS += $(ZLIB_LIBS)
