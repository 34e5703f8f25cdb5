# C unit tests for pure logic, one program per module, on cmocka through
# tests/unit/harness.h (each case in its own process with a time limit).
KUNIT_CFLAGS_ALL = $(AM_CFLAGS) $(DEP_CFLAGS) $(CMOCKA_CFLAGS) -I$(srcdir)/tests/unit
KUNIT_LIBS_ALL = $(KINGLET_LIBS) $(DEP_LIBS) $(CMOCKA_LIBS)
EXTRA_DIST += tests/unit/harness.h tests/unit/failalloc.h

check_PROGRAMS += tests/unit/test_grpc tests/unit/test_config tests/unit/test_cri \
	tests/unit/test_base
TESTS += tests/unit/test_grpc tests/unit/test_config tests/unit/test_cri tests/unit/test_base
tests_unit_test_base_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_base_LDADD = $(KUNIT_LIBS_ALL)
tests_unit_test_grpc_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_grpc_LDADD = $(KUNIT_LIBS_ALL)
tests_unit_test_config_SOURCES = tests/unit/test_config.c src/config.c
tests_unit_test_config_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_config_LDADD = $(KUNIT_LIBS_ALL)
tests_unit_test_cri_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_cri_LDADD = $(KUNIT_LIBS_ALL)

# oci/cgroup and oci/seccomp.
check_PROGRAMS += tests/unit/test_cgroup tests/unit/test_seccomp
TESTS += tests/unit/test_cgroup tests/unit/test_seccomp
tests_unit_test_cgroup_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_cgroup_LDADD = $(KUNIT_LIBS_ALL) -lm
tests_unit_test_seccomp_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_seccomp_LDADD = $(KUNIT_LIBS_ALL)

# oci: the spec parser and the executor's pure helpers.
check_PROGRAMS += tests/unit/test_oci
TESTS += tests/unit/test_oci
tests_unit_test_oci_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_oci_LDADD = $(KUNIT_LIBS_ALL)

# net: IPAM, netlink messages, nftables messages and listings.
check_PROGRAMS += tests/unit/test_net
TESTS += tests/unit/test_net
tests_unit_test_net_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_net_LDADD = libknet.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS) -lpthread

# image: references, manifests, platform selection, configs, endpoints.
# Links only what it uses (libkproto is not needed).
check_PROGRAMS += tests/unit/test_image
TESTS += tests/unit/test_image
tests_unit_test_image_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_image_LDADD = libkimage.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)

# image: failing-allocation loops over the parsers (interposes malloc).
check_PROGRAMS += tests/unit/test_image_alloc
TESTS += tests/unit/test_image_alloc
tests_unit_test_image_alloc_CFLAGS = $(KUNIT_CFLAGS_ALL)
# jansson shared here, whatever the daemon does: the test tells failures
# inside jansson (which may cut a string short) by the library's file name
tests_unit_test_image_alloc_LDADD = libkimage.a libkbase.a $(JANSSON_LIBS) $(DEP_LIBS) \
	$(CMOCKA_LIBS)

# store (pod records) and pod (sysctl classes, /etc files).
check_PROGRAMS += tests/unit/test_pod
TESTS += tests/unit/test_pod
tests_unit_test_pod_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_pod_LDADD = $(KUNIT_LIBS_ALL)

# monitor/logfmt (compiled here with glibc; the program is built with musl)
# and store/container.
check_PROGRAMS += tests/unit/test_monitor
TESTS += tests/unit/test_monitor
tests_unit_test_monitor_SOURCES = tests/unit/test_monitor.c src/monitor/logfmt.c
tests_unit_test_monitor_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_monitor_LDADD = $(KUNIT_LIBS_ALL)

# cri/container_spec: ContainerConfig → OCI spec.
check_PROGRAMS += tests/unit/test_container_spec
TESTS += tests/unit/test_container_spec
tests_unit_test_container_spec_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_container_spec_LDADD = $(KUNIT_LIBS_ALL)

# stream: WebSocket framing (the codec alone, no loop).
check_PROGRAMS += tests/unit/test_stream
TESTS += tests/unit/test_stream
tests_unit_test_stream_SOURCES = tests/unit/test_stream.c src/stream/ws.c
tests_unit_test_stream_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_stream_LDADD = libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)

# cdi: CDI specs (JSON, YAML), names, resolution, OCI edits.
check_PROGRAMS += tests/unit/test_cdi
TESTS += tests/unit/test_cdi
tests_unit_test_cdi_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_cdi_LDADD = libkcdi.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)
