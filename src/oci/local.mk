noinst_LIBRARIES += libkoci.a
libkoci_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkoci_a_SOURCES = src/oci/oci.h src/oci/internal.h src/oci/cli.c \
	src/oci/spec.c src/oci/state.c src/oci/container.c src/oci/init.c \
	src/oci/ns.c src/oci/mount.c src/oci/devices.c \
	src/oci/rootfs.c src/oci/caps.c src/oci/process.c src/oci/hooks.c \
	src/oci/exec.c src/oci/apparmor.c src/oci/checkpoint.h src/oci/checkpoint.c \
	src/oci/cgroup.h src/oci/cgroup_internal.h src/oci/cgroup.c src/oci/cgroup_resources.c \
	src/oci/bpf_devices.c \
	src/oci/seccomp.h src/oci/seccomp.c
