# Pod sandboxes: namespaces held by bind mounts, /dev/shm, /etc files, init.
noinst_LIBRARIES += libkpod.a
libkpod_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkpod_a_SOURCES = src/pod/pod.h src/pod/sandbox.c src/pod/files.c src/pod/init.c
EXTRA_DIST += src/pod/README.md
