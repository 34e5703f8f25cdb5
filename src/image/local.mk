# Images: references, manifests, registry client, store, unpacking, import.
noinst_LIBRARIES += libkimage.a
libkimage_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(CRYPTO_CFLAGS) $(ZLIB_CFLAGS)
libkimage_a_SOURCES = src/image/image.h src/image/internal.h \
	src/image/ref.c src/image/manifest.c src/image/digest.c \
	src/image/unpack.c src/image/store.c src/image/registry.c \
	src/image/pull.c src/image/import.c src/image/service.c src/image/cli.c
# libcrypto (sha256) and zlib (gzip) are linked by every user of libkimage.
DEP_LIBS += $(CRYPTO_LIBS) $(ZLIB_LIBS)
