# libFuzzer targets, built only with --enable-fuzzing (CC=clang).

if FUZZING
# src/net: netlink replies and pod CIDRs. The library sources are compiled
# into each target so that the parsers carry the fuzzer's instrumentation.
NET_FUZZ_FLAGS = -fsanitize=fuzzer,address,undefined
check_PROGRAMS += tests/fuzz/fuzz_nl_reply tests/fuzz/fuzz_net_cidr
tests_fuzz_fuzz_nl_reply_SOURCES = tests/fuzz/fuzz_nl_reply.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_nl_reply_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_nl_reply_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_nl_reply_LDADD = libkbase.a $(DEP_LIBS) -lpthread
tests_fuzz_fuzz_net_cidr_SOURCES = tests/fuzz/fuzz_net_cidr.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_net_cidr_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_cidr_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_cidr_LDADD = libkbase.a $(DEP_LIBS) -lpthread
endif
