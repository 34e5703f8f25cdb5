# libFuzzer targets, built only with --enable-fuzzing (CC=clang).
if FUZZING
FUZZ_IMAGE_CC = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer,address,undefined
FUZZ_IMAGE_LD = -fsanitize=fuzzer,address,undefined
FUZZ_IMAGE_LIBS = libkimage.a libkbase.a $(DEP_LIBS)
check_PROGRAMS += tests/fuzz/fuzz_image_ref tests/fuzz/fuzz_image_manifest \
	tests/fuzz/fuzz_image_unpack
tests_fuzz_fuzz_image_ref_SOURCES = tests/fuzz/fuzz_image_ref.c
tests_fuzz_fuzz_image_ref_CFLAGS = $(FUZZ_IMAGE_CC)
tests_fuzz_fuzz_image_ref_LDFLAGS = $(FUZZ_IMAGE_LD)
tests_fuzz_fuzz_image_ref_LDADD = $(FUZZ_IMAGE_LIBS)
tests_fuzz_fuzz_image_manifest_SOURCES = tests/fuzz/fuzz_image_manifest.c
tests_fuzz_fuzz_image_manifest_CFLAGS = $(FUZZ_IMAGE_CC)
tests_fuzz_fuzz_image_manifest_LDFLAGS = $(FUZZ_IMAGE_LD)
tests_fuzz_fuzz_image_manifest_LDADD = $(FUZZ_IMAGE_LIBS)
tests_fuzz_fuzz_image_unpack_SOURCES = tests/fuzz/fuzz_image_unpack.c
tests_fuzz_fuzz_image_unpack_CFLAGS = $(FUZZ_IMAGE_CC)
tests_fuzz_fuzz_image_unpack_LDFLAGS = $(FUZZ_IMAGE_LD)
tests_fuzz_fuzz_image_unpack_LDADD = $(FUZZ_IMAGE_LIBS)
endif
