# Pod sandboxes: namespaces held by bind mounts, /dev/shm, /etc files, init.
noinst_LIBRARIES += libkpod.a
libkpod_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkpod_a_SOURCES = src/pod/pod.h src/pod/init_proto.h src/pod/sandbox.c src/pod/files.c \
	src/pod/init.c src/pod/init_blob.S
libkpod_a_CCASFLAGS = -I$(builddir)
EXTRA_DIST += src/pod/README.md

# The pod init: a program of its own (init_main.c), built static against
# musl like the monitor (see src/monitor/local.mk), embedded by init_blob.S
# and started from a sealed memfd by init.c.
POD_INIT_PROG_DEPS = $(srcdir)/src/pod/init_main.c $(srcdir)/src/pod/init_proto.h
src/pod/kinglet-pod-init: $(POD_INIT_PROG_DEPS)
	@mkdir -p src/pod
	$(AM_V_GEN)$(MUSL_GCC) $(MONITOR_PROG_CFLAGS) -o $@ $(srcdir)/src/pod/init_main.c
CLEANFILES += src/pod/kinglet-pod-init
EXTRA_DIST += src/pod/init_main.c
src/pod/libkpod_a-init_blob.$(OBJEXT): src/pod/kinglet-pod-init
