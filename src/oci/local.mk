noinst_LIBRARIES += libkoci.a
libkoci_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkoci_a_SOURCES = src/oci/oci.h src/oci/cli.c
