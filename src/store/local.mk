# Persistent pod records (JSON files, atomic writes).
noinst_LIBRARIES += libkstore.a
libkstore_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkstore_a_SOURCES = src/store/store.h src/store/pod.c
