/* pod/init: starts the pod init program (init_main.c; see there for what it
 * is and does) from a sealed memfd, so that no file of the host backs it
 * and nothing can write to it through /proc/PID/exe. The copy costs about
 * 20 kB per pod with a shared PID namespace. */
#include <fcntl.h>
#include <sys/syscall.h>

#include "pod/init_proto.h"
#include "pod/pod.h"

/* The embedded program (init_blob.S). */
extern const unsigned char pod_init_program[];
extern const unsigned char pod_init_program_end[];

int pod_init_exec(void)
{
    int fd = memfd_sealed("kinglet-pod-init", pod_init_program,
                          (size_t)(pod_init_program_end - pod_init_program));
    if (fd < 0)
        return fd;
    char *argv[] = {"pod-init", NULL};
    char *envp[] = {NULL};
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
    int e = errno;
    close(fd);
    return -e;
}
