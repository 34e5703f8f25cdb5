# C unit tests for pure logic, one program per module, run by cmocka.
KUNIT_CFLAGS_ALL = $(AM_CFLAGS) $(DEP_CFLAGS) $(CMOCKA_CFLAGS)
KUNIT_LIBS_ALL = $(KINGLET_LIBS) $(DEP_LIBS) $(CMOCKA_LIBS)

# oci/cgroup and oci/seccomp: linked against their own libraries only, so
# that they build before the CRI layer does.
KUNIT_OCI_LIBS = libkoci.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_cgroup tests/unit/test_seccomp
TESTS += tests/unit/test_cgroup tests/unit/test_seccomp
tests_unit_test_cgroup_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_cgroup_LDADD = $(KUNIT_OCI_LIBS)
tests_unit_test_seccomp_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_seccomp_LDADD = $(KUNIT_OCI_LIBS)

# oci: the spec parser and the executor's pure helpers.
check_PROGRAMS += tests/unit/test_oci
TESTS += tests/unit/test_oci
tests_unit_test_oci_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_oci_LDADD = $(KUNIT_OCI_LIBS)
