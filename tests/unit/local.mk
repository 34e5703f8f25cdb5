# C unit tests for pure logic, one program per module, run by cmocka.
KUNIT_CFLAGS_ALL = $(AM_CFLAGS) $(DEP_CFLAGS) $(CMOCKA_CFLAGS)
KUNIT_LIBS_ALL = $(KINGLET_LIBS) $(DEP_LIBS) $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_net
TESTS += tests/unit/test_net
tests_unit_test_net_CFLAGS = $(KUNIT_CFLAGS_ALL)
tests_unit_test_net_LDADD = libknet.a libkbase.a $(DEP_LIBS) $(CMOCKA_LIBS) -lpthread
