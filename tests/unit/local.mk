# C unit tests for pure logic, one program per module, run by cmocka.
KUNIT_CFLAGS_ALL = $(AM_CFLAGS) $(DEP_CFLAGS) $(CMOCKA_CFLAGS)
KUNIT_LIBS_ALL = $(KINGLET_LIBS) $(DEP_LIBS) $(CMOCKA_LIBS)

# image: references, manifests, platform selection, configs, endpoints.
# Links only what it uses (libkproto is not needed).
check_PROGRAMS += tests/unit/test_image
TESTS += tests/unit/test_image
tests_unit_test_image_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_image_LDADD = libkimage.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)
