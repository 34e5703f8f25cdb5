/* pod/init: `kinglet pod-init`, pid 1 of a pod's shared PID namespace. It
 * holds the namespace for the pod's containers and reaps the orphans they
 * leave; it runs nothing and ends when killed (SIGKILL from Stop, or SIGTERM
 * and SIGINT, which pid 1 would otherwise ignore). */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "pod/pod.h"

int pod_init_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    prctl(PR_SET_NAME, "pod-init");
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&all, &si);
        if (sig == SIGCHLD) {
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        } else if (sig == SIGTERM || sig == SIGINT) {
            return 0;
        }
    }
}
