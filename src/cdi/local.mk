# CDI: spec parsing (JSON, YAML through libyaml), resolution, OCI edits.
noinst_LIBRARIES += libkcdi.a
libkcdi_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkcdi_a_SOURCES = src/cdi/cdi.h src/cdi/spec.c src/cdi/yaml.c src/cdi/edits.c \
	src/cdi/registry.c
