/* Unit test harness on cmocka: every case runs in its own process with a
 * time limit, so a crash or a hang fails that case alone; the run ends with
 * a "N passed, N failed, N skipped" line. A case that calls cmocka's skip()
 * counts as skipped, not passed: the harness reads cmocka's report of the
 * case (passed through to stdout) to tell.
 *
 *   static const struct CMUnitTest tests[] = { cmocka_unit_test(t1), ... };
 *   UNIT_MAIN(tests)
 */
#pragma once

#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef UNIT_TIMEOUT_S
#define UNIT_TIMEOUT_S 20
#endif

/* Copies the case's stdout through and says whether cmocka reported it
 * skipped ("[  SKIPPED ] name" at the start of a line). */
static inline bool unit_relay(int fd, const char *test_name)
{
    char buf[4096], line[512];
    size_t ll = 0;
    bool skipped = false;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        fwrite(buf, 1, (size_t)n, stdout);
        for (ssize_t k = 0; k < n; k++) {
            if (buf[k] != '\n') {
                if (ll < sizeof(line) - 1)
                    line[ll++] = buf[k];
                continue;
            }
            line[ll] = '\0';
            ll = 0;
            if (strncmp(line, "[  SKIPPED ] ", 13) == 0 && strcmp(line + 13, test_name) == 0)
                skipped = true;
        }
    }
    fflush(stdout);
    return skipped;
}

static inline int unit_run(const char *name, const struct CMUnitTest *tests, size_t n)
{
    size_t passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        fflush(stdout);
        int out[2];
        if (pipe(out) < 0) {
            perror("pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(out[0]);
            dup2(out[1], STDOUT_FILENO);
            close(out[1]);
            alarm(UNIT_TIMEOUT_S);
            int r = _cmocka_run_group_tests(tests[i].name, &tests[i], 1, NULL, NULL);
            fflush(stdout);
            _exit(r ? 1 : 0);
        }
        close(out[1]);
        bool was_skipped = pid > 0 && unit_relay(out[0], tests[i].name);
        close(out[0]);
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) < 0) {
            perror("fork/waitpid");
            return 1;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && was_skipped) {
            skipped++;
            printf("SKIPPED %s\n", tests[i].name);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
        } else {
            failed++;
            if (WIFSIGNALED(st))
                printf("FAILED %s: killed by signal %d%s\n", tests[i].name, WTERMSIG(st),
                       WTERMSIG(st) == SIGALRM ? " (timed out)" : "");
            else
                printf("FAILED %s\n", tests[i].name);
        }
    }
    printf("%s: %zu passed, %zu failed, %zu skipped\n", name, passed, failed, skipped);
    return failed ? 1 : 0;
}

#define UNIT_MAIN(tests)                                                                           \
    int main(void) { return unit_run(__FILE__, tests, sizeof(tests) / sizeof((tests)[0])); }
