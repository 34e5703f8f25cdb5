/* oci/hooks: runs the spec's hooks, each with the container state JSON on
 * stdin, its own args and env, and its timeout (killed on expiry). A hook
 * that fails fails the operation that runs it, except poststart and
 * poststop, whose callers only warn (the spec says so). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "oci/internal.h"

static int run_one(const struct oci_hook *h, const char *state, struct err *err)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return err_set(err, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err_set(err, e, "fork");
    }
    if (pid == 0) {
        dup2(pipefd[0], 0);
        /* The hook's stdout would otherwise be the caller's: hooks write
         * to stderr by convention; keep stdout for both. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *const fallback[] = {h->path, NULL};
        static char *const noenv[] = {NULL};
        execve(h->path, h->args ? h->args : fallback, h->env ? h->env : noenv);
        dprintf(2, "hook `%s`: %s\n", h->path, strerror(errno));
        _exit(127);
    }
    close(pipefd[0]);
    size_t len = strlen(state);
    /* A hook that does not read stdin gets EPIPE here: ignore it. */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    ssize_t w = write(pipefd[1], state, len);
    (void)w;
    close(pipefd[1]);
    signal(SIGPIPE, old);

    _cleanup_close_ int pidfd = oci_pidfd_open(pid);
    if (h->timeout > 0 && pidfd >= 0) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        int r;
        do
            r = poll(&p, 1, h->timeout * 1000);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return err_set(err, ETIMEDOUT, "hook `%s`: timed out after %d s", h->path, h->timeout);
        }
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return err_set(err, errno, "wait for hook `%s`", h->path);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        return err_set(err, ECANCELED, "hook `%s`: killed by signal %d", h->path, WTERMSIG(status));
    return err_set(err, ECANCELED, "hook `%s`: exit status %d", h->path, WEXITSTATUS(status));
}

int oci_hooks_run(const struct oci_hook *hooks, size_t n, const char *state_json, const char *what,
                  struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        int r = run_one(&hooks[i], state_json, err);
        if (r < 0)
            return err_wrap(err, "`hooks.%s[%zu]`", what, i);
    }
    return 0;
}
