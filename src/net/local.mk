# Built-in pod networking: netlink (libmnl), IPAM, nftables (libnftnl).
noinst_LIBRARIES += libknet.a
libknet_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
EXTRA_DIST += src/net/README.md
libknet_a_SOURCES = src/net/net.h src/net/internal.h src/net/nl.c src/net/link.c \
	src/net/addr.c src/net/route.c src/net/subnet.c src/net/ipam.c src/net/nft.c src/net/sysctl.c \
	src/net/netns.c src/net/conntrack.c src/net/pod.c src/net/lazy.c

# Test driver for tests/net (pytest): a small program linked with libknet.a
# that the tests run inside network namespaces they create.
check_PROGRAMS += tests/net/net-driver
tests_net_net_driver_SOURCES = tests/net/net-driver.c
tests_net_net_driver_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
tests_net_net_driver_LDADD = libknet.a libkbase.a $(DEP_LIBS) -lpthread
