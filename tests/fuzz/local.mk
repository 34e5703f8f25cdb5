# libFuzzer targets, built only with --enable-fuzzing (CC=clang); seed
# corpora live beside them in <target>_corpus/.
if FUZZING
FUZZ_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer
noinst_PROGRAMS = tests/fuzz/fuzz_grpc_conn
tests_fuzz_fuzz_grpc_conn_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_grpc_conn_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_grpc_conn_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)
endif
