# kinglet-enter: the program that puts an exec'd command into a container
# (main.c), built static against musl like the monitor (see
# src/monitor/local.mk) and embedded into libkenter.a by blob.S; src/oci/exec.c
# starts it from a sealed memfd.
ENTER_PROG_DEPS = $(srcdir)/src/enter/main.c $(srcdir)/src/enter/recipe.c \
	$(srcdir)/src/enter/proto.h
src/enter/kinglet-enter: $(ENTER_PROG_DEPS)
	@mkdir -p src/enter
	$(AM_V_GEN)$(MUSL_GCC) $(MONITOR_PROG_CFLAGS) -o $@ $(srcdir)/src/enter/main.c \
		$(srcdir)/src/enter/recipe.c
CLEANFILES += src/enter/kinglet-enter
EXTRA_DIST += src/enter/main.c

noinst_LIBRARIES += libkenter.a
# recipe.c also here, for the unit test of the recipe (tests/unit/test_oci.c).
libkenter_a_SOURCES = src/enter/enter.h src/enter/proto.h src/enter/recipe.c src/enter/blob.S
libkenter_a_CCASFLAGS = -I$(builddir)
src/enter/libkenter_a-blob.$(OBJEXT): src/enter/kinglet-enter
