/* kcgroup: a test driver for oci/cgroup and oci/seccomp.
 *
 * The cgroup tests (tests/vm/test_cgroup_*.py) call the real library through
 * this small program, one operation per invocation, and check the effects
 * with real processes:
 *
 *   kcgroup create PATH ID RESOURCES.json|-|''   prints the absolute path
 *   kcgroup update ABS RESOURCES.json
 *   kcgroup exec ABS -- CMD [ARGS...]             enter the cgroup, exec CMD
 *   kcgroup spawn ABS -- CMD [ARGS...]            clone3 CLONE_INTO_CGROUP with
 *                                                 oci_cgroup_fd(), wait, exit as CMD
 *   kcgroup freeze ABS | thaw ABS
 *   kcgroup kill ABS SIGNAL
 *   kcgroup pids ABS | oom ABS | stats ABS | destroy ABS
 *   kcgroup seccomp PROFILE.json -- CMD [ARGS...] load the filter, exec CMD
 *
 * Exit status 0 on success; 1 with the error on stderr otherwise. Warnings
 * of the library go to stderr as log lines. */
#include <jansson.h>
#include <linux/sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "base/base.h"
#include "oci/cgroup.h"
#include "oci/seccomp.h"

static int fail(struct err *e)
{
    fprintf(stderr, "kcgroup: %s\n", e->msg);
    return 1;
}

static json_t *load_json(const char *path, struct err *err)
{
    if (!path || !*path)
        return NULL;
    json_error_t je;
    json_t *j = strcmp(path, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);
    if (!j)
        err_set(err, EINVAL, "%s:%d: %s", path, je.line, je.text);
    return j;
}

static void cg_freep(struct oci_cgroup **cg) { oci_cgroup_free(*cg); }

static int sig_parse(const char *s)
{
    static const struct {
        const char *n;
        int s;
    } t[] = {{"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT},
             {"HUP", SIGHUP},   {"USR1", SIGUSR1}, {"STOP", SIGSTOP}};
    if (str_has_prefix(s, "SIG"))
        s += 3;
    for (size_t i = 0; i < ARRAY_SIZE(t); i++)
        if (strcmp(s, t[i].n) == 0)
            return t[i].s;
    return atoi(s);
}

int main(int argc, char **argv)
{
    struct err e = {0};
    const char *lvl = getenv("KCGROUP_LOG");
    enum log_level level = LOG_LEVEL_WARN;
    if (lvl)
        log_level_parse(lvl, &level);
    log_set_level(level);
    if (argc < 3) {
        fprintf(stderr, "usage: kcgroup create|update|exec|freeze|thaw|kill|pids|oom|destroy|"
                        "seccomp ...\n");
        return 2;
    }
    const char *cmd = argv[1];

    if (strcmp(cmd, "seccomp") == 0) {
        if (argc < 5 || strcmp(argv[3], "--") != 0)
            return 2;
        _cleanup_(json_decrefp) json_t *j = load_json(argv[2], &e);
        if (!j)
            return fail(&e);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            return 1;
        if (oci_seccomp_load(j, &e) < 0)
            return fail(&e);
        execvp(argv[4], argv + 4);
        fprintf(stderr, "kcgroup: exec %s: %s\n", argv[4], strerror(errno));
        return 127;
    }

    _cleanup_(cg_freep) struct oci_cgroup *cg = NULL;
    if (strcmp(cmd, "create") == 0) {
        if (argc < 5)
            return 2;
        _cleanup_(json_decrefp) json_t *res = load_json(argv[4], &e);
        if (argv[4][0] && !res)
            return fail(&e);
        if (oci_cgroup_create(argv[2], argv[3], res, &cg, &e) < 0)
            return fail(&e);
        printf("%s\n", oci_cgroup_path(cg));
        return 0;
    }

    if (oci_cgroup_open(argv[2], &cg, &e) < 0)
        return fail(&e);
    if (strcmp(cmd, "update") == 0 && argc >= 4) {
        _cleanup_(json_decrefp) json_t *res = load_json(argv[3], &e);
        if (!res)
            return fail(&e);
        return oci_cgroup_update(cg, res, &e) < 0 ? fail(&e) : 0;
    }
    if (strcmp(cmd, "exec") == 0 && argc >= 5 && strcmp(argv[3], "--") == 0) {
        if (oci_cgroup_enter(cg, getpid(), &e) < 0)
            return fail(&e);
        execvp(argv[4], argv + 4);
        fprintf(stderr, "kcgroup: exec %s: %s\n", argv[4], strerror(errno));
        return 127;
    }
    if (strcmp(cmd, "spawn") == 0 && argc >= 5 && strcmp(argv[3], "--") == 0) {
        /* The executor's way in: the child starts inside the cgroup. */
        struct clone_args ca = {
            .flags = CLONE_INTO_CGROUP,
            .exit_signal = SIGCHLD,
            .cgroup = (uint64_t)oci_cgroup_fd(cg),
        };
        long pid = syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid < 0) {
            fprintf(stderr, "kcgroup: clone3: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            execvp(argv[4], argv + 4);
            _exit(127);
        }
        int st;
        if (waitpid((pid_t)pid, &st, 0) < 0)
            return 1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (strcmp(cmd, "freeze") == 0 || strcmp(cmd, "thaw") == 0)
        return oci_cgroup_freeze(cg, cmd[0] == 'f', &e) < 0 ? fail(&e) : 0;
    if (strcmp(cmd, "kill") == 0 && argc >= 4)
        return oci_cgroup_kill(cg, sig_parse(argv[3]), &e) < 0 ? fail(&e) : 0;
    if (strcmp(cmd, "pids") == 0) {
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = 0;
        if (oci_cgroup_pids(cg, &pids, &n, &e) < 0)
            return fail(&e);
        for (size_t i = 0; i < n; i++)
            printf("%d\n", (int)pids[i]);
        return 0;
    }
    if (strcmp(cmd, "oom") == 0) {
        uint64_t n = 0;
        if (oci_cgroup_oom_kills(cg, &n, &e) < 0)
            return fail(&e);
        printf("%llu\n", (unsigned long long)n);
        return 0;
    }
    if (strcmp(cmd, "stats") == 0) {
        struct oci_cgroup_stats st;
        if (oci_cgroup_stats(cg, &st, &e) < 0)
            return fail(&e);
        printf("cpu_usage_usec %llu\ncpu_user_usec %llu\ncpu_system_usec %llu\n",
               (unsigned long long)st.cpu_usage_usec, (unsigned long long)st.cpu_user_usec,
               (unsigned long long)st.cpu_system_usec);
        if (st.has_memory)
            printf("memory_current %llu\nmemory_working_set %llu\nmemory_max %llu\n"
                   "oom_kills %llu\n",
                   (unsigned long long)st.memory_current, (unsigned long long)st.memory_working_set,
                   (unsigned long long)st.memory_max, (unsigned long long)st.oom_kills);
        if (st.has_pids)
            printf("pids_current %llu\n", (unsigned long long)st.pids_current);
        return 0;
    }
    if (strcmp(cmd, "destroy") == 0)
        return oci_cgroup_destroy(cg, &e) < 0 ? fail(&e) : 0;
    fprintf(stderr, "kcgroup: unknown command `%s`\n", cmd);
    return 2;
}
