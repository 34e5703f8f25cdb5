noinst_LIBRARIES += libkimage.a
libkimage_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkimage_a_SOURCES = src/image/image.h src/image/cli.c
