noinst_LIBRARIES += libkcri.a
libkcri_a_CFLAGS = $(AM_CFLAGS) $(DEP_CFLAGS)
libkcri_a_SOURCES = src/cri/cri.h src/cri/internal.h src/cri/service.c src/cri/version.c \
	src/cri/runtime_config.c src/cri/events.c \
	src/cri/image_pull.c src/cri/image_status.c src/cri/image_remove.c src/cri/image_fs_info.c \
	src/cri/image_cli.c src/cri/image_private.c \
	src/cri/validate.h src/cri/validate.c \
	src/cri/sandbox.h src/cri/sandbox.c src/cri/sandbox_run.c src/cri/sandbox_stop.c \
	src/cri/sandbox_status.c src/cri/resources.c \
	src/cri/containers.h src/cri/container.c src/cri/container_create.c src/cri/container_mounts.c \
	src/cri/container_spec.h src/cri/container_spec.c \
	src/cri/container_start.c src/cri/container_stop.c src/cri/container_status.c \
	src/cri/container_log.c src/cri/container_exec.c \
	src/cri/container_update.c src/cri/stats.h src/cri/stats.c src/cri/metrics.c src/cri/streaming.c \
	src/cri/list_stream.c src/cri/container_checkpoint.c
