# libFuzzer targets, built only with --enable-fuzzing (CC=clang); seed
# corpora live beside them in <target>_corpus/.
if FUZZING
FUZZ_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer
noinst_PROGRAMS = tests/fuzz/fuzz_grpc_conn
tests_fuzz_fuzz_grpc_conn_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_grpc_conn_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_grpc_conn_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)

# image: reference parser, manifest/config parser, layer unpacker
noinst_PROGRAMS += tests/fuzz/fuzz_image_ref tests/fuzz/fuzz_image_manifest \
	tests/fuzz/fuzz_image_unpack
tests_fuzz_fuzz_image_ref_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_ref_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_ref_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_manifest_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_manifest_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_manifest_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_unpack_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_unpack_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_unpack_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
endif
