noinst_LIBRARIES += libkgrpc.a
libkgrpc_a_CFLAGS = $(AM_CFLAGS) $(UV_CFLAGS) $(NGHTTP2_CFLAGS)
libkgrpc_a_SOURCES = src/grpc/grpc.h src/grpc/internal.h src/grpc/frame.c src/grpc/call.c \
	src/grpc/conn.c src/grpc/server.c src/grpc/client.c
