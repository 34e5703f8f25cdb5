# libFuzzer targets, built only with --enable-fuzzing (CC=clang); seed
# corpora live beside them in <target>_corpus/.
if FUZZING
FUZZ_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer
noinst_PROGRAMS = tests/fuzz/fuzz_grpc_conn
tests_fuzz_fuzz_grpc_conn_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_grpc_conn_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_grpc_conn_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)

# src/net: netlink replies and pod CIDRs. The library sources are compiled
# into each target so that the parsers carry the fuzzer's instrumentation.
NET_FUZZ_FLAGS = -fsanitize=fuzzer,address,undefined
noinst_PROGRAMS += tests/fuzz/fuzz_nl_reply tests/fuzz/fuzz_net_cidr
tests_fuzz_fuzz_nl_reply_SOURCES = tests/fuzz/fuzz_nl_reply.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_nl_reply_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_nl_reply_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_nl_reply_LDADD = libkbase.a $(DEP_LIBS) -lpthread
tests_fuzz_fuzz_net_cidr_SOURCES = tests/fuzz/fuzz_net_cidr.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_net_cidr_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_cidr_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_cidr_LDADD = libkbase.a $(DEP_LIBS) -lpthread
endif
