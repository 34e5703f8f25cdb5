# C unit tests for pure logic, one program per module, on cmocka through
# tests/unit/harness.h (each case in its own process with a time limit).
KUNIT_CFLAGS_ALL = $(AM_CFLAGS) $(DEP_CFLAGS) $(CMOCKA_CFLAGS) -I$(srcdir)/tests/unit
KUNIT_LIBS_ALL = $(KINGLET_LIBS) $(DEP_LIBS) $(CMOCKA_LIBS)
EXTRA_DIST += tests/unit/harness.h

check_PROGRAMS += tests/unit/test_grpc tests/unit/test_config tests/unit/test_cri
TESTS += tests/unit/test_grpc tests/unit/test_config tests/unit/test_cri
tests_unit_test_grpc_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_grpc_LDADD = $(KUNIT_LIBS_ALL)
tests_unit_test_config_SOURCES = tests/unit/test_config.c src/config.c
tests_unit_test_config_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_config_LDADD = $(KUNIT_LIBS_ALL)
tests_unit_test_cri_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_cri_LDADD = $(KUNIT_LIBS_ALL)

# image: references, manifests, platform selection, configs, endpoints.
# Links only what it uses (libkproto is not needed).
check_PROGRAMS += tests/unit/test_image
TESTS += tests/unit/test_image
tests_unit_test_image_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_image_LDADD = libkimage.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)
