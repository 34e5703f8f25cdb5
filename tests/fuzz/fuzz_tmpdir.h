/* A private directory under /tmp for a fuzz target, removed when the
 * target exits, however it exits (a finding, a sanitizer report, SIGKILL,
 * -max_total_time): a child forked at creation waits for the target's end
 * of a pipe to close and then removes it. The child is forked before any
 * sandboxing of the target (fuzz_image_unpack's Landlock ruleset forbids
 * it to remove anything in /tmp), and holds no other resource. */
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"

static void fuzz_tmpdir(char *tmpl)
{
    if (!mkdtemp(tmpl))
        abort();
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        abort();
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        close(p[1]);
        char c;
        while (read(p[0], &c, 1) < 0 && errno == EINTR)
            ;
        rm_rf_at(AT_FDCWD, tmpl);
        _exit(0);
    }
    close(p[0]); /* p[1] stays open for the target's lifetime */
}
