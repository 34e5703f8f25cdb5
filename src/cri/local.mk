noinst_LIBRARIES += libkcri.a
libkcri_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkcri_a_SOURCES = src/cri/cri.h
