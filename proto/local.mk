# Code generated from proto/api.proto (CRI) and proto/kinglet.proto
# (kinglet's own routes) by protoc-c at build time.
noinst_LIBRARIES += libkproto.a
nodist_libkproto_a_SOURCES = proto/api.pb-c.c proto/api.pb-c.h proto/kinglet.pb-c.c \
	proto/kinglet.pb-c.h
libkproto_a_CFLAGS = -std=gnu11 -Ulinux $(SAN_CFLAGS) $(STATIC_CFLAGS) $(PROTOBUFC_CFLAGS)
BUILT_SOURCES += proto/api.pb-c.c proto/api.pb-c.h proto/kinglet.pb-c.c proto/kinglet.pb-c.h
CLEANFILES += proto/api.pb-c.c proto/api.pb-c.h proto/kinglet.pb-c.c proto/kinglet.pb-c.h

proto/api.pb-c.c proto/api.pb-c.h: $(srcdir)/proto/api.proto
	$(AM_V_GEN)$(MKDIR_P) proto && $(PROTOC_C) --c_out=proto -I$(srcdir)/proto $(srcdir)/proto/api.proto

proto/kinglet.pb-c.c proto/kinglet.pb-c.h: $(srcdir)/proto/kinglet.proto
	$(AM_V_GEN)$(MKDIR_P) proto && $(PROTOC_C) --c_out=proto -I$(srcdir)/proto $(srcdir)/proto/kinglet.proto
