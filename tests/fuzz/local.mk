# libFuzzer targets, built only with --enable-fuzzing (CC=clang).

if FUZZING
# oci: config.json parsing. Configure with CC=clang CFLAGS="-g -O1
# -fsanitize=fuzzer-no-link" --enable-fuzzing --enable-sanitizers so that the
# libraries carry coverage, then: tests/fuzz/fuzz_oci_spec CORPUS_COPY_DIR
# (seeds in tests/fuzz/oci_spec_corpus).
check_PROGRAMS += tests/fuzz/fuzz_oci_spec
tests_fuzz_fuzz_oci_spec_SOURCES = tests/fuzz/fuzz_oci_spec.c
tests_fuzz_fuzz_oci_spec_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_oci_spec_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_oci_spec_LDADD = libkoci.a libkbase.a $(DEP_LIBS)
endif
