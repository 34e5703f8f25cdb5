/* Unit test harness on cmocka: every case runs in its own process with a
 * time limit, so a crash or a hang fails that case alone; the run ends with
 * a "N passed, N failed" line.
 *
 *   static const struct CMUnitTest tests[] = { cmocka_unit_test(t1), ... };
 *   UNIT_MAIN(tests)
 */
#pragma once

#include <setjmp.h>
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

static inline int unit_run(const char *name, const struct CMUnitTest *tests, size_t n)
{
    size_t passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(UNIT_TIMEOUT_S);
            _exit(_cmocka_run_group_tests(tests[i].name, &tests[i], 1, NULL, NULL) ? 1 : 0);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) < 0) {
            perror("fork/waitpid");
            return 1;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
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
    printf("%s: %zu passed, %zu failed\n", name, passed, failed);
    return failed ? 1 : 0;
}

#define UNIT_MAIN(tests)                                                                           \
    int main(void) { return unit_run(__FILE__, tests, sizeof(tests) / sizeof((tests)[0])); }
