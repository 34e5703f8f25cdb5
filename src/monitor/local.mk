# The container monitor: a program of its own (main.c, logfmt.c), built
# static against musl whatever the rest of the build uses (no fuzzing
# instrumentation: it runs outside kinglet's address space), and embedded
# into libkmonitor.a with launch.c, which starts it. musl has no sanitizers:
# a sanitizer build (--enable-sanitizers) embeds a glibc build of the same
# source with ASan and UBSan instead, so that the sanitizer test run
# exercises the monitor too (launch.c hands it its sanitizer options).
MONITOR_PROG_DEPS = $(srcdir)/src/monitor/main.c $(srcdir)/src/monitor/logfmt.c \
	$(srcdir)/src/monitor/logfmt.h $(srcdir)/src/monitor/proto.h
MONITOR_PROG_CFLAGS = -std=gnu11 -Os -static -Wall -Wextra -Werror -Wno-unused-parameter \
	-ffunction-sections -fdata-sections -Wl,--gc-sections -s -I$(srcdir)/src \
	-idirafter /usr/include -idirafter $(MULTIARCH_INCLUDE)

if SANITIZERS
MONITOR_PROG_SAN_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	-DKINGLET_SANITIZERS=1 -I$(srcdir)/src
src/monitor/kinglet-monitor: $(MONITOR_PROG_DEPS)
	@mkdir -p src/monitor
	$(AM_V_GEN)$(CC) $(MONITOR_PROG_SAN_CFLAGS) -o $@ $(srcdir)/src/monitor/main.c \
		$(srcdir)/src/monitor/logfmt.c -lpthread
else
src/monitor/kinglet-monitor: $(MONITOR_PROG_DEPS)
	@mkdir -p src/monitor
	$(AM_V_GEN)$(MUSL_GCC) $(MONITOR_PROG_CFLAGS) -o $@ $(srcdir)/src/monitor/main.c \
		$(srcdir)/src/monitor/logfmt.c -lpthread
endif
CLEANFILES += src/monitor/kinglet-monitor
EXTRA_DIST += src/monitor/main.c src/monitor/logfmt.c src/monitor/logfmt.h

noinst_LIBRARIES += libkmonitor.a
libkmonitor_a_SOURCES = src/monitor/monitor.h src/monitor/proto.h src/monitor/launch.c \
	src/monitor/answer.c src/monitor/blob.S
libkmonitor_a_CCASFLAGS = -I$(builddir)
src/monitor/libkmonitor_a-blob.$(OBJEXT): src/monitor/kinglet-monitor
