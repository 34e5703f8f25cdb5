noinst_LIBRARIES += libkbase.a
libkbase_a_SOURCES = src/base/base.h src/base/err.c src/base/log.c src/base/util.c \
	src/base/lazy.c src/base/fs.c src/base/spawn.c src/base/exe.c \
	src/base/sha256.c src/base/tls.h src/base/tls_lazy.c
