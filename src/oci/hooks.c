/* oci/hooks: runs the spec's hooks, each with the container state JSON on
 * stdin, its own args and env, and its timeout (killed on expiry). A hook
 * that fails fails the operation that runs it, except poststart and
 * poststop, whose callers only warn (the spec says so). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>

#include "oci/internal.h"

static int run_one(const struct oci_hook *h, const char *state, int cancel_fd, struct err *err)
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

    /* Until the hook exits, its timeout passes (then it is killed), or the
     * caller is told to stop (cancel_fd, a signalfd; -1 for none). */
    _cleanup_close_ int pidfd = pidfd_open(pid, 0);
    uint64_t deadline = h->timeout > 0 ? now_mono_ns() + (uint64_t)h->timeout * 1000000000ull : 0;
    while (pidfd >= 0 && (h->timeout > 0 || cancel_fd >= 0)) {
        struct pollfd p[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = cancel_fd, .events = POLLIN}};
        int ms = -1;
        if (deadline) {
            uint64_t now = now_mono_ns();
            ms = now >= deadline ? 0 : (int)((deadline - now) / 1000000ull) + 1;
        }
        int r = poll(p, 2, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0 && p[0].revents)
            break; /* exited */
        if (r == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return err_set(err, ETIMEDOUT, "hook `%s`: timed out after %d s", h->path, h->timeout);
        }
        if (r > 0 && p[1].revents && (r = oci_cancel_read(cancel_fd, err)) < 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return err_wrap(err, "hook `%s`", h->path);
        }
        if (r < 0)
            break; /* poll failed: wait below */
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return err_set(err, errno, "wait for hook `%s`", h->path);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    /* The hook's own failure: no errno of ours says more than this (and
     * ECANCELED would read as the caller's cancelling). */
    if (WIFSIGNALED(status))
        return err_set_msg(err, EIO, "hook `%s`: killed by signal %d", h->path, WTERMSIG(status));
    return err_set_msg(err, EIO, "hook `%s`: exit status %d", h->path, WEXITSTATUS(status));
}

int oci_hooks_run(const struct oci_hook *hooks, size_t n, const char *state_json, const char *what,
                  struct err *err)
{
    return oci_hooks_run_cancel(hooks, n, state_json, what, -1, err);
}

int oci_hooks_run_cancel(const struct oci_hook *hooks, size_t n, const char *state_json,
                         const char *what, int cancel_fd, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        int r = run_one(&hooks[i], state_json, cancel_fd, err);
        if (r < 0)
            return err_wrap(err, "`hooks.%s[%zu]`", what, i);
    }
    return 0;
}
