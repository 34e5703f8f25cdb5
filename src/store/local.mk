# Persistent records of pods and containers (JSON files, atomic writes).
noinst_LIBRARIES += libkstore.a
libkstore_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkstore_a_SOURCES = src/store/store.h src/store/internal.h src/store/record.c \
	src/store/pod.c src/store/container.c
