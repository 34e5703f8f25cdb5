noinst_LIBRARIES += libkstream.a
libkstream_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkstream_a_SOURCES = src/stream/stream.h src/stream/internal.h src/stream/server.c \
	src/stream/session.c src/stream/spdy.c src/stream/spdy_dict.c src/stream/http.c \
	src/stream/ws.c src/stream/tls.c
