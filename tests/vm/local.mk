# Test driver for oci/cgroup and oci/seccomp used by tests/vm/test_cgroup_*.py
# (run directly where the host has cgroup v2 controllers, else in the VM by
# tests/vm/run-cgroup-tests).
check_PROGRAMS += tests/vm/kcgroup
tests_vm_kcgroup_SOURCES = tests/vm/kcgroup.c
tests_vm_kcgroup_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
tests_vm_kcgroup_LDADD = libkoci.a libkbase.a $(DEP_LIBS)
EXTRA_DIST += tests/vm/run-cgroup-tests tests/vm/run-in-vm tests/vm/README.md tests/vm/cghelpers.py \
	tests/vm/test_cgroup_core.py tests/vm/test_cgroup_hybrid.py tests/vm/test_cgroup_limits.py \
	tests/vm/test_oci_cgroup.py

# The integration tests need the driver too.
check-integration: tests/vm/kcgroup
