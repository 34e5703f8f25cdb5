# libFuzzer targets, built only with --enable-fuzzing (CC=clang).
#   CC=clang ../../configure --enable-fuzzing --enable-sanitizers \
#     CFLAGS='-g -O1 -fsanitize=fuzzer-no-link' && make tests/fuzz/fuzz_seccomp
#   ./tests/fuzz/fuzz_seccomp -max_total_time=60 ../../tests/fuzz/seccomp_corpus
if FUZZING
KFUZZ_LINK = -fsanitize=fuzzer

check_PROGRAMS += tests/fuzz/fuzz_seccomp tests/fuzz/fuzz_cgroup_resources
tests_fuzz_fuzz_seccomp_SOURCES = tests/fuzz/fuzz_seccomp.c
tests_fuzz_fuzz_seccomp_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
tests_fuzz_fuzz_seccomp_LDFLAGS = $(KFUZZ_LINK)
tests_fuzz_fuzz_seccomp_LDADD = libkoci.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_cgroup_resources_SOURCES = tests/fuzz/fuzz_cgroup_resources.c
tests_fuzz_fuzz_cgroup_resources_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
tests_fuzz_fuzz_cgroup_resources_LDFLAGS = $(KFUZZ_LINK)
tests_fuzz_fuzz_cgroup_resources_LDADD = libkoci.a libkbase.a $(DEP_LIBS)
endif
EXTRA_DIST += tests/fuzz/seccomp_corpus tests/fuzz/cgroup_resources_corpus
