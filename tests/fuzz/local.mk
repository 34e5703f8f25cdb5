# libFuzzer targets, built only with --enable-fuzzing (CC=clang); seed
# corpora live beside them in <target>_corpus/.
if FUZZING
FUZZ_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) -fsanitize=fuzzer
noinst_PROGRAMS = tests/fuzz/fuzz_grpc_conn
tests_fuzz_fuzz_grpc_conn_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_grpc_conn_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_grpc_conn_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)

# config.json parsers of oci/: the sources under test are compiled into
# the target so that libFuzzer sees their coverage.
noinst_PROGRAMS += tests/fuzz/fuzz_seccomp tests/fuzz/fuzz_cgroup_resources
tests_fuzz_fuzz_seccomp_SOURCES = tests/fuzz/fuzz_seccomp.c src/oci/seccomp.c
tests_fuzz_fuzz_seccomp_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_seccomp_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_seccomp_LDADD = libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_cgroup_resources_SOURCES = tests/fuzz/fuzz_cgroup_resources.c \
	src/oci/cgroup_resources.c src/oci/bpf_devices.c src/oci/cgroup.c
tests_fuzz_fuzz_cgroup_resources_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_cgroup_resources_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_cgroup_resources_LDADD = libkbase.a $(DEP_LIBS)

# oci/spec: config.json and exec's process object, and the spec's device
# rules through the device program builder; oci/state: state.json as read
# back by every command after create.
noinst_PROGRAMS += tests/fuzz/fuzz_oci_spec tests/fuzz/fuzz_oci_state
tests_fuzz_fuzz_oci_spec_SOURCES = tests/fuzz/fuzz_oci_spec.c src/oci/spec.c \
	src/oci/cgroup_resources.c src/oci/bpf_devices.c src/oci/cgroup.c
tests_fuzz_fuzz_oci_spec_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_oci_spec_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_oci_spec_LDADD = libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_oci_state_SOURCES = tests/fuzz/fuzz_oci_state.c src/oci/state.c
tests_fuzz_fuzz_oci_state_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_oci_state_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_oci_state_LDADD = libkoci.a libkbase.a $(DEP_LIBS)

# oci/checkpoint: criu's version output and the tail of its dump log.
noinst_PROGRAMS += tests/fuzz/fuzz_oci_criu
tests_fuzz_fuzz_oci_criu_SOURCES = tests/fuzz/fuzz_oci_criu.c tests/fuzz/fuzz_tmpdir.h \
	src/oci/checkpoint.c
tests_fuzz_fuzz_oci_criu_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_oci_criu_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_oci_criu_LDADD = libkoci.a libkenter.a libkmonitor.a libkproto.a libkbase.a \
	$(DEP_LIBS)

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

# image: reference parser, manifest/config parser, layer unpacker
noinst_PROGRAMS += tests/fuzz/fuzz_image_ref tests/fuzz/fuzz_image_manifest \
	tests/fuzz/fuzz_image_unpack
tests_fuzz_fuzz_image_ref_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_ref_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_ref_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_manifest_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_manifest_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_manifest_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_unpack_SOURCES = tests/fuzz/fuzz_image_unpack.c tests/fuzz/fuzz_tmpdir.h
tests_fuzz_fuzz_image_unpack_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_unpack_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_unpack_LDADD = libkimage.a libkbase.a $(DEP_LIBS)

# image: what registries send (challenges, tokens, status lines, headers,
# error bodies, redirect rules); the whole pull from memory (the target
# defines the reg_* functions, so registry.c is not linked); archives on
# import; images.json and snapshot info.json read back at start.
# image/http: raw HTTP answers through the registry client's parser (the
# source compiled in for coverage, ASan and UBSan for memory and leaks).
noinst_PROGRAMS += tests/fuzz/fuzz_image_http
tests_fuzz_fuzz_image_http_SOURCES = tests/fuzz/fuzz_image_http.c src/image/http.c \
	src/image/http_url.c
tests_fuzz_fuzz_image_http_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_image_http_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_image_http_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
noinst_PROGRAMS += tests/fuzz/fuzz_image_registry tests/fuzz/fuzz_image_pull \
	tests/fuzz/fuzz_image_import tests/fuzz/fuzz_image_store
tests_fuzz_fuzz_image_registry_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_registry_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_registry_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_pull_SOURCES = tests/fuzz/fuzz_image_pull.c tests/fuzz/image_job.h \
	tests/fuzz/fuzz_tmpdir.h
tests_fuzz_fuzz_image_pull_CFLAGS = $(FUZZ_CFLAGS) $(ZLIB_CFLAGS)
tests_fuzz_fuzz_image_pull_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_pull_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_import_SOURCES = tests/fuzz/fuzz_image_import.c tests/fuzz/image_job.h \
	tests/fuzz/fuzz_tmpdir.h
tests_fuzz_fuzz_image_import_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_import_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_import_LDADD = libkimage.a libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_image_store_SOURCES = tests/fuzz/fuzz_image_store.c tests/fuzz/fuzz_tmpdir.h
tests_fuzz_fuzz_image_store_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_image_store_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_image_store_LDADD = libkimage.a libkbase.a $(DEP_LIBS)

# store: pod records read back at start (the source compiled in for coverage).
noinst_PROGRAMS += tests/fuzz/fuzz_store_pod
tests_fuzz_fuzz_store_pod_SOURCES = tests/fuzz/fuzz_store_pod.c $(libkstore_a_SOURCES)
tests_fuzz_fuzz_store_pod_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_store_pod_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_store_pod_LDADD = libkbase.a $(DEP_LIBS)

# store/container: container records read back at start; monitor/logfmt:
# container output framed into CRI log records.
noinst_PROGRAMS += tests/fuzz/fuzz_store_ctr tests/fuzz/fuzz_monitor_logfmt
tests_fuzz_fuzz_store_ctr_SOURCES = tests/fuzz/fuzz_store_ctr.c $(libkstore_a_SOURCES)
tests_fuzz_fuzz_store_ctr_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_store_ctr_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_store_ctr_LDADD = libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_monitor_logfmt_SOURCES = tests/fuzz/fuzz_monitor_logfmt.c src/monitor/logfmt.c
tests_fuzz_fuzz_monitor_logfmt_CFLAGS = $(AM_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_monitor_logfmt_LDFLAGS = $(NET_FUZZ_FLAGS)

# base/err: the error record `kinglet oci` and the monitor child write for
# the daemon and the creator (err_record_decode).
noinst_PROGRAMS += tests/fuzz/fuzz_err_record
tests_fuzz_fuzz_err_record_SOURCES = tests/fuzz/fuzz_err_record.c src/base/err.c
tests_fuzz_fuzz_err_record_CFLAGS = $(AM_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_err_record_LDFLAGS = $(NET_FUZZ_FLAGS)

# cdi: CDI spec files (JSON and YAML), resolved and applied.
noinst_PROGRAMS += tests/fuzz/fuzz_cdi_spec
tests_fuzz_fuzz_cdi_spec_SOURCES = tests/fuzz/fuzz_cdi_spec.c $(libkcdi_a_SOURCES)
tests_fuzz_fuzz_cdi_spec_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_cdi_spec_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_cdi_spec_LDADD = libkbase.a $(DEP_LIBS)

# cri: request messages fed straight into the handlers' checks.
noinst_PROGRAMS += tests/fuzz/fuzz_cri_requests
tests_fuzz_fuzz_cri_requests_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_cri_requests_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_cri_requests_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)

# stream: SPDY frames and HTTP request heads from the streaming port.
noinst_PROGRAMS += tests/fuzz/fuzz_stream_spdy tests/fuzz/fuzz_stream_http
tests_fuzz_fuzz_stream_spdy_SOURCES = tests/fuzz/fuzz_stream_spdy.c src/stream/spdy.c \
	src/stream/spdy_dict.c
tests_fuzz_fuzz_stream_spdy_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_spdy_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_spdy_LDADD = libkbase.a $(DEP_LIBS)
tests_fuzz_fuzz_stream_http_SOURCES = tests/fuzz/fuzz_stream_http.c src/stream/http.c
tests_fuzz_fuzz_stream_http_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_http_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_http_LDADD = libkbase.a $(DEP_LIBS)
# stream/ws: WebSocket frames from a client.
noinst_PROGRAMS += tests/fuzz/fuzz_stream_ws
tests_fuzz_fuzz_stream_ws_SOURCES = tests/fuzz/fuzz_stream_ws.c src/stream/ws.c
tests_fuzz_fuzz_stream_ws_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_ws_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_ws_LDADD = libkbase.a $(DEP_LIBS)
# stream/tls: TLS records and handshakes through our glue into mbedTLS.
noinst_PROGRAMS += tests/fuzz/fuzz_stream_tls
tests_fuzz_fuzz_stream_tls_SOURCES = tests/fuzz/fuzz_stream_tls.c tests/fuzz/fuzz_tmpdir.h \
	src/stream/tls.c
tests_fuzz_fuzz_stream_tls_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_tls_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_stream_tls_LDADD = libkbase.a $(DEP_LIBS)

# Files the daemon reads back at start: runtime-config.json (cri), IPAM
# lease files (net); and the kernel's listing of the hostports chain (net).
noinst_PROGRAMS += tests/fuzz/fuzz_runtime_config tests/fuzz/fuzz_net_lease \
	tests/fuzz/fuzz_net_nft_listing
tests_fuzz_fuzz_runtime_config_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_runtime_config_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_runtime_config_LDADD = $(KINGLET_LIBS) $(DEP_LIBS)
tests_fuzz_fuzz_net_lease_SOURCES = tests/fuzz/fuzz_net_lease.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_net_lease_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_lease_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_lease_LDADD = libkbase.a $(DEP_LIBS) -lpthread
tests_fuzz_fuzz_net_nft_listing_SOURCES = tests/fuzz/fuzz_net_nft_listing.c $(libknet_a_SOURCES)
tests_fuzz_fuzz_net_nft_listing_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS) $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_nft_listing_LDFLAGS = $(NET_FUZZ_FLAGS)
tests_fuzz_fuzz_net_nft_listing_LDADD = libkbase.a $(DEP_LIBS) -lpthread
endif
EXTRA_DIST += tests/fuzz/cri_requests_corpus tests/fuzz/cdi_spec_corpus tests/fuzz/stream_spdy_corpus tests/fuzz/stream_http_corpus \
	tests/fuzz/stream_ws_corpus \
	tests/fuzz/stream_tls_corpus \
	tests/fuzz/seccomp_corpus tests/fuzz/cgroup_resources_corpus \
	tests/fuzz/oci_spec_corpus tests/fuzz/oci_state_corpus tests/fuzz/oci_criu_corpus tests/fuzz/store_pod_corpus tests/fuzz/store_ctr_corpus \
	tests/fuzz/monitor_logfmt_corpus tests/fuzz/runtime_config_corpus tests/fuzz/err_record_corpus \
	tests/fuzz/net_lease_corpus tests/fuzz/net_nft_listing_corpus tests/fuzz/image_registry_corpus tests/fuzz/image_http_corpus \
	tests/fuzz/image_pull_corpus tests/fuzz/image_import_corpus tests/fuzz/image_store_corpus \
	tests/fuzz/image_unpack_corpus tests/fuzz/image_manifest_corpus
