/* Unit tests for oci/seccomp: the OCI seccomp object → libseccomp filter,
 * checked through libseccomp's own PFC export, errors that name the field,
 * and filters loaded in forked children to prove they act (errno returned,
 * SIGSYS, Seccomp: 2 in /proc/self/status). */
#include "harness.h"
#include "failalloc.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "oci/seccomp.h"

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad test JSON: %s: %s", je.text, text);
    return j;
}

/* The filter's PFC text (libseccomp's human-readable dump). */
static char *pfc_of(const char *json)
{
    struct err e = {0};
    json_t *j = J(json);
    scmp_filter_ctx ctx = NULL;
    if (oci_seccomp_build(j, &ctx, &e) < 0)
        fail_msg("build %s: %s", json, e.msg);
    json_decref(j);
    int fd = memfd_create("pfc", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(seccomp_export_pfc(ctx, fd), 0);
    seccomp_release(ctx);
    off_t len = lseek(fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)len + 1);
    assert_non_null(s);
    assert_int_equal(pread(fd, s, (size_t)len, 0), len);
    close(fd);
    return s;
}

static void expect_in(const char *text, const char *part)
{
    if (!strstr(text, part))
        fail_msg("`%s` not in:\n%s", part, text);
}

static void build_fails(const char *json, int code, const char *field)
{
    struct err e = {0};
    json_t *j = J(json);
    scmp_filter_ctx ctx = NULL;
    int r = oci_seccomp_build(j, &ctx, &e);
    json_decref(j);
    if (r >= 0) {
        seccomp_release(ctx);
        fail_msg("build %s succeeded, expected an error naming %s", json, field);
    }
    assert_int_equal(r, -code);
    if (!strstr(e.msg, field))
        fail_msg("error `%s` does not name `%s`", e.msg, field);
}

/* ---- building ----------------------------------------------------------------- */

static void test_actions(void **state)
{
    (void)state;
    char *pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":["
                       "{\"names\":[\"mkdir\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":38},"
                       "{\"names\":[\"rmdir\"],\"action\":\"SCMP_ACT_ERRNO\"},"
                       "{\"names\":[\"reboot\"],\"action\":\"SCMP_ACT_KILL_PROCESS\"},"
                       "{\"names\":[\"kexec_load\"],\"action\":\"SCMP_ACT_KILL\"},"
                       "{\"names\":[\"acct\"],\"action\":\"SCMP_ACT_KILL_THREAD\"},"
                       "{\"names\":[\"swapon\"],\"action\":\"SCMP_ACT_TRAP\"},"
                       "{\"names\":[\"ptrace\"],\"action\":\"SCMP_ACT_TRACE\",\"errnoRet\":5},"
                       "{\"names\":[\"syslog\"],\"action\":\"SCMP_ACT_LOG\"},"
                       "{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ALLOW\"}]}");
    expect_in(pfc, "if ($syscall == 83)\n    action ERRNO(38);"); /* mkdir */
    expect_in(pfc, "if ($syscall == 84)\n    action ERRNO(1);");  /* rmdir: EPERM */
    expect_in(pfc, "if ($syscall == 169)\n    action KILL_PROCESS;");
    expect_in(pfc, "if ($syscall == 246)\n    action KILL;");
    expect_in(pfc, "if ($syscall == 163)\n    action KILL;");
    expect_in(pfc, "if ($syscall == 167)\n    action TRAP;");
    expect_in(pfc, "if ($syscall == 101)\n    action TRACE(5);");
    expect_in(pfc, "if ($syscall == 103)\n    action LOG;");
    /* A rule with the default action is dropped, not an error. */
    if (strstr(pfc, "$syscall == 39"))
        fail_msg("getpid rule with the default action was kept:\n%s", pfc);
    expect_in(pfc, "# default action\n  action ALLOW;");
    free(pfc);

    pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":38,"
                 "\"syscalls\":[{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}]}");
    expect_in(pfc, "# default action\n  action ERRNO(38);");
    free(pfc);
    pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ERRNO\"}");
    expect_in(pfc, "# default action\n  action ERRNO(1);");
    free(pfc);
}

static void test_args(void **state)
{
    (void)state;
    /* Different indexes: one rule with both conditions. */
    char *pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                       "\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                       "{\"index\":0,\"value\":16,\"op\":\"SCMP_CMP_EQ\"},"
                       "{\"index\":2,\"value\":9,\"op\":\"SCMP_CMP_NE\"}]}]}");
    expect_in(pfc, "if ($a0.hi32 == 0)\n      if ($a0.lo32 == 16)\n");
    expect_in(pfc, "if ($a2.lo32 == 9)\n");
    free(pfc);

    /* The same index twice: two rules, as runc (either one matches). The
     * personality() filter of Docker's profile. */
    pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{"
                 "\"names\":[\"personality\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":["
                 "{\"index\":0,\"value\":0,\"op\":\"SCMP_CMP_EQ\"},"
                 "{\"index\":0,\"value\":8,\"op\":\"SCMP_CMP_EQ\"}]}]}");
    expect_in(pfc, "if ($a0.lo32 == 0)\n");
    expect_in(pfc, "if ($a0.lo32 == 8)\n");
    free(pfc);

    /* MASKED_EQ takes the mask from value and the datum from valueTwo;
     * every operator is known. */
    pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":["
                 "{\"names\":[\"clone\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                 "{\"index\":0,\"value\":2114060288,\"valueTwo\":2114060288,"
                 "\"op\":\"SCMP_CMP_MASKED_EQ\"}]},"
                 "{\"names\":[\"kill\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                 "{\"index\":1,\"value\":9,\"op\":\"SCMP_CMP_GE\"}]},"
                 "{\"names\":[\"tkill\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                 "{\"index\":1,\"value\":9,\"op\":\"SCMP_CMP_GT\"}]},"
                 "{\"names\":[\"tgkill\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                 "{\"index\":2,\"value\":9,\"op\":\"SCMP_CMP_LT\"}]},"
                 "{\"names\":[\"getpriority\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":["
                 "{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_LE\"}]}]}");
    expect_in(pfc, "if ($a0.lo32 & 0x7e020000 == 2114060288)");
    expect_in(pfc, "if ($a1.lo32 >= 9)");
    expect_in(pfc, "if ($a1.lo32 > 9)");
    free(pfc);
}

static void test_arches_flags(void **state)
{
    (void)state;
    struct err e = {0};
    json_t *j = J("{\"defaultAction\":\"SCMP_ACT_ALLOW\","
                  "\"architectures\":[\"SCMP_ARCH_X86_64\",\"SCMP_ARCH_X86\",\"SCMP_ARCH_X32\"],"
                  "\"flags\":[\"SECCOMP_FILTER_FLAG_TSYNC\",\"SECCOMP_FILTER_FLAG_LOG\","
                  "\"SECCOMP_FILTER_FLAG_SPEC_ALLOW\"],"
                  "\"syscalls\":[{\"names\":[\"mkdir\"],\"action\":\"SCMP_ACT_ERRNO\"}]}");
    scmp_filter_ctx ctx = NULL;
    if (oci_seccomp_build(j, &ctx, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(seccomp_arch_exist(ctx, SCMP_ARCH_X86), 0);
    assert_int_equal(seccomp_arch_exist(ctx, SCMP_ARCH_X32), 0);
    assert_int_equal(seccomp_arch_exist(ctx, SCMP_ARCH_AARCH64), -EEXIST);
    uint32_t v = 9;
    assert_int_equal(seccomp_attr_get(ctx, SCMP_FLTATR_CTL_TSYNC, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(seccomp_attr_get(ctx, SCMP_FLTATR_CTL_LOG, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(seccomp_attr_get(ctx, SCMP_FLTATR_CTL_SSB, &v), 0);
    assert_int_equal(v, 1);
    /* no_new_privs is the spec's business, not the filter's. */
    assert_int_equal(seccomp_attr_get(ctx, SCMP_FLTATR_CTL_NNP, &v), 0);
    assert_int_equal(v, 0);
    seccomp_release(ctx);
    json_decref(j);

    char *pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\","
                       "\"architectures\":[\"SCMP_ARCH_X86\"],"
                       "\"syscalls\":[{\"names\":[\"mkdir\"],\"action\":\"SCMP_ACT_ERRNO\"}]}");
    expect_in(pfc, "if ($arch == 1073741827)"); /* AUDIT_ARCH_I386 */
    expect_in(pfc, "if ($syscall == 39)");      /* mkdir on i386 */
    free(pfc);
}

static void test_unknown_syscall_skipped(void **state)
{
    (void)state;
    char *pfc = pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                       "\"names\":[\"no_such_syscall_xyz\",\"mkdir\"],"
                       "\"action\":\"SCMP_ACT_ERRNO\"}]}");
    expect_in(pfc, "if ($syscall == 83)");
    free(pfc);
}

static void test_errors(void **state)
{
    (void)state;
    build_fails("[]", EINVAL, "linux.seccomp");
    build_fails("{}", EINVAL, "linux.seccomp.defaultAction");
    build_fails("{\"defaultAction\":\"SCMP_ACT_NOPE\"}", EINVAL, "linux.seccomp.defaultAction");
    build_fails("{\"defaultAction\":\"SCMP_ACT_NOTIFY\"}", EOPNOTSUPP,
                "linux.seccomp.defaultAction: SCMP_ACT_NOTIFY");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"defaultErrnoRet\":1}", EINVAL,
                "linux.seccomp.defaultAction");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":-1}", EINVAL,
                "linux.seccomp.defaultErrnoRet");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"architectures\":[\"SCMP_ARCH_Z80\"]}",
                EINVAL, "linux.seccomp.architectures[0]");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"flags\":[\"SECCOMP_FILTER_FLAG_X\"]}",
                EINVAL, "linux.seccomp.flags[0]");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\","
                "\"flags\":[\"SECCOMP_FILTER_FLAG_NEW_LISTENER\"]}",
                EOPNOTSUPP, "linux.seccomp.flags[0]");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"listenerPath\":\"/run/x.sock\"}",
                EOPNOTSUPP, "linux.seccomp.listenerPath");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":{}}", EINVAL,
                "linux.seccomp.syscalls");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_NOTIFY\"}]}",
                EOPNOTSUPP, "linux.seccomp.syscalls[0].action");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_ERRNO\"},{\"names\":[\"mkdir\"],\"action\":\"KILL\"}]}",
                EINVAL, "linux.seccomp.syscalls[1].action");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":\"mkdir\","
                "\"action\":\"SCMP_ACT_ERRNO\"}]}",
                EINVAL, "linux.seccomp.syscalls[0].names");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[7],"
                "\"action\":\"SCMP_ACT_ERRNO\"}]}",
                EINVAL, "linux.seccomp.syscalls[0].names[0]");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_KILL\",\"errnoRet\":3}]}",
                EINVAL, "linux.seccomp.syscalls[0].action");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":6,\"value\":1,"
                "\"op\":\"SCMP_CMP_EQ\"}]}]}",
                EINVAL, "linux.seccomp.syscalls[0].args[0].index");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"value\":1,"
                "\"op\":\"SCMP_CMP_EQ\"},{\"index\":1,\"value\":1,\"op\":\"SCMP_CMP_LIKE\"}]}]}",
                EINVAL, "linux.seccomp.syscalls[0].args[1].op");
    build_fails("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                "\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"op\":\"SCMP_CMP_EQ\"}]}]}",
                EINVAL, "linux.seccomp.syscalls[0].args[0].value");
}

/* ---- loading in a real process ----------------------------------------------- */

/* Forks; the child loads `json` with no_new_privs and runs fn, whose
 * return value is the exit status. Returns the wait status. */
static int in_child(const char *json, int (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct err e = {0};
        json_t *j = json_loads(json, 0, NULL);
        if (!j || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            _exit(100);
        if (oci_seccomp_load(j, &e) < 0) {
            fprintf(stderr, "load: %s\n", e.msg);
            _exit(101);
        }
        _exit(fn());
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static int seccomp_mode(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    int mode = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Seccomp: %d", &mode) == 1)
            break;
    if (f)
        fclose(f);
    return mode;
}

static int child_mkdir(void)
{
    if (seccomp_mode() != 2)
        return 2;
    char dir[] = "/tmp/kinglet-seccomp-XXXXXX";
    /* mkdtemp uses mkdir: it must fail with the configured errno. */
    if (mkdtemp(dir) != NULL)
        return 3;
    if (errno != EXDEV)
        return 4;
    if (syscall(SYS_mkdirat, AT_FDCWD, "/tmp/kinglet-seccomp-never", 0700) != -1 || errno != EXDEV)
        return 5;
    return 0;
}

static void test_load_errno(void **state)
{
    (void)state;
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                      "\"names\":[\"mkdir\",\"mkdirat\"],\"action\":\"SCMP_ACT_ERRNO\","
                      "\"errnoRet\":18}]}",
                      child_mkdir);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static int child_getppid(void)
{
    syscall(SYS_getppid);
    return 0; /* not reached: killed */
}

static void test_load_kill_process(void **state)
{
    (void)state;
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                      "\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_KILL_PROCESS\"}]}",
                      child_getppid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSYS);
}

static int child_default_errno(void)
{
    /* Everything but the syscalls allowed below fails with errno 99. */
    if (syscall(SYS_getuid) != -1 || errno != 99)
        return 2;
    return 0;
}

static void test_load_default_errno(void **state)
{
    (void)state;
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":99,"
                      /* what libc and the sanitizers' runtimes need to finish */
                      "\"syscalls\":[{\"names\":[\"exit_group\",\"exit\",\"write\",\"read\","
                      "\"mmap\",\"munmap\",\"mprotect\",\"madvise\",\"brk\",\"sigaltstack\","
                      "\"rt_sigaction\",\"rt_sigprocmask\",\"futex\",\"getpid\",\"gettid\","
                      "\"tgkill\",\"prctl\",\"sched_yield\",\"openat\",\"close\",\"fstat\","
                      "\"newfstatat\",\"readlink\",\"ioctl\"],"
                      "\"action\":\"SCMP_ACT_ALLOW\"}]}",
                      child_default_errno);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static int child_socket_args(void)
{
    /* socket(AF_NETLINK, SOCK_RAW, 9) refused; AF_UNIX allowed. */
    if (syscall(SYS_socket, 16, 3, 9) != -1 || errno != EACCES)
        return 2;
    long fd = syscall(SYS_socket, 1, 1 | 02000000, 0);
    if (fd < 0)
        return 3;
    close((int)fd);
    return 0;
}

static void test_load_args(void **state)
{
    (void)state;
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                      "\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":13,"
                      "\"args\":[{\"index\":0,\"value\":16,\"op\":\"SCMP_CMP_EQ\"},"
                      "{\"index\":2,\"value\":9,\"op\":\"SCMP_CMP_EQ\"}]}]}",
                      child_socket_args);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_load_null(void **state)
{
    (void)state;
    struct err e = {0};
    assert_int_equal(oci_seccomp_load(NULL, &e), 0);
    json_t *n = json_null();
    assert_int_equal(oci_seccomp_load(n, &e), 0);
    json_decref(n);
}

static volatile sig_atomic_t trapped_nr = -1;

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    trapped_nr = si->si_syscall;
}

static int child_trap_trace_log(void)
{
    /* TRAP: SIGSYS with the syscall number; the call itself returns. */
    struct sigaction sa = {.sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO};
    if (sigaction(SIGSYS, &sa, NULL) < 0)
        return 10;
    syscall(SYS_getppid);
    if (trapped_nr != SYS_getppid)
        return 2;
    /* TRACE with no tracer attached: the kernel fails the call with
     * ENOSYS. */
    if (syscall(SYS_getpgrp) != -1 || errno != ENOSYS)
        return 3;
    /* LOG: allowed (and logged). */
    if (syscall(SYS_getsid, 0) < 0)
        return 4;
    return 0;
}

static void test_load_trap_trace_log_flags(void **state)
{
    /* With every supported flag, so that the kernel takes them too. */
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ALLOW\","
                      "\"flags\":[\"SECCOMP_FILTER_FLAG_TSYNC\",\"SECCOMP_FILTER_FLAG_LOG\","
                      "\"SECCOMP_FILTER_FLAG_SPEC_ALLOW\"],\"syscalls\":["
                      "{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_TRAP\"},"
                      "{\"names\":[\"getpgrp\"],\"action\":\"SCMP_ACT_TRACE\"},"
                      "{\"names\":[\"getsid\"],\"action\":\"SCMP_ACT_LOG\"}]}",
                      child_trap_trace_log);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_load_kill_thread(void **state)
{
    int st = in_child("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                      "\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_KILL\"}]}",
                      child_getppid);
    /* The only thread dies: the process ends by SIGSYS. */
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSYS);
}

static void test_unknown_syscall_logged(void **state)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    log_set_file(f);
    log_set_level(LOG_LEVEL_DEBUG);
    free(pfc_of("{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{"
                "\"names\":[\"no_such_syscall_xyz\"],\"action\":\"SCMP_ACT_ERRNO\"}]}"));
    log_set_file(NULL);
    fclose(f);
    expect_in(text, "unknown syscall `no_such_syscall_xyz` skipped");
    free(text);
}

static int child_exec_true(void)
{
    /* A whole program runs under the filter; denied calls still fail. */
    pid_t pid = fork();
    if (pid < 0)
        return 10;
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 2;
    if (syscall(SYS_acct, NULL) != -1 || errno != EPERM)
        return 3;
    return 0;
}

/* A profile the size of Docker's: every syscall libseccomp knows on x86_64
 * allowed by name (but acct), on three architectures, default ERRNO. */
static void test_load_docker_sized_profile(void **state)
{
    struct buf b = {0};
    buf_printf(&b, "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"architectures\":"
                   "[\"SCMP_ARCH_X86_64\",\"SCMP_ARCH_X86\",\"SCMP_ARCH_X32\"],"
                   "\"syscalls\":[{\"action\":\"SCMP_ACT_ALLOW\",\"names\":["
                   "\"not_a_syscall\",\"landlock_create_ruleset_v99\"");
    int n = 0;
    for (int nr = 0; nr < 1024; nr++) {
        char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
        if (!name)
            continue;
        if (strcmp(name, "acct") != 0) {
            buf_printf(&b, ",\"%s\"", name);
            n++;
        }
        free(name);
    }
    buf_printf(&b, "]}]}");
    buf_append(&b, "", 1);
    assert_true(n > 300);
    int st = in_child((const char *)b.data, child_exec_true);
    buf_free(&b);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static bool has_string(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (json_is_string(v) &&
                                      strcmp(json_string_value(v), s) == 0) return true;
    return false;
}

static void test_features(void **state)
{
    json_t *f = oci_seccomp_features();
    assert_non_null(f);
    assert_true(json_is_true(json_object_get(f, "enabled")));
    json_t *actions = json_object_get(f, "actions");
    assert_true(has_string(actions, "SCMP_ACT_KILL_PROCESS"));
    assert_true(has_string(actions, "SCMP_ACT_ERRNO"));
    assert_false(has_string(actions, "SCMP_ACT_NOTIFY"));
    assert_int_equal(json_array_size(json_object_get(f, "operators")), 7);
    assert_true(has_string(json_object_get(f, "archs"), "SCMP_ARCH_X86_64"));
    assert_false(has_string(json_object_get(f, "archs"), "SCMP_ARCH_NATIVE"));
    assert_true(has_string(json_object_get(f, "supportedFlags"), "SECCOMP_FILTER_FLAG_TSYNC"));
    /* Every advertised action and flag is accepted by the builder. */
    size_t i;
    json_t *v;
    json_array_foreach(actions, i, v)
    {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"mkdir\"],"
                 "\"action\":\"%s\"}]}",
                 json_string_value(v));
        free(pfc_of(json));
    }
    json_decref(f);
}

static void test_alloc_failures(void **state)
{
    if (!FAILALLOC_ENABLED)
        skip();
    json_t *j = J("{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"architectures\":[\"SCMP_ARCH_X86_64\","
                  "\"SCMP_ARCH_X86\"],\"flags\":[\"SECCOMP_FILTER_FLAG_LOG\"],\"syscalls\":["
                  "{\"names\":[\"read\",\"write\",\"nope_nope\"],\"action\":\"SCMP_ACT_ALLOW\"},"
                  "{\"names\":[\"personality\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":["
                  "{\"index\":0,\"value\":0,\"op\":\"SCMP_CMP_EQ\"},"
                  "{\"index\":0,\"value\":8,\"op\":\"SCMP_CMP_EQ\"}]},"
                  "{\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":["
                  "{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_EQ\"},"
                  "{\"index\":1,\"value\":1,\"op\":\"SCMP_CMP_MASKED_EQ\",\"valueTwo\":1}]}]}");
    size_t k, failures = 0;
    for (k = 0; k < 100000; k++) {
        long before = failalloc_in_use();
        struct err e = {0};
        scmp_filter_ctx ctx = NULL;
        failalloc_arm((long)k);
        int r = oci_seccomp_build(j, &ctx, &e);
        failalloc_disarm();
        bool hit = failalloc_hit();
        if (r < 0) {
            if (!hit)
                fail_msg("k=%zu: failed without an allocation failure: %s", k, e.msg);
            failures++;
        } else {
            seccomp_release(ctx);
        }
        if (failalloc_in_use() != before)
            fail_msg("k=%zu: %ld bytes leaked (%s)", k, failalloc_in_use() - before,
                     r < 0 ? e.msg : "built");
        if (r == 0 && !hit)
            break;
    }
    assert_true(failures > 5);
    json_decref(j);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_actions),
    cmocka_unit_test(test_args),
    cmocka_unit_test(test_arches_flags),
    cmocka_unit_test(test_unknown_syscall_skipped),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_load_errno),
    cmocka_unit_test(test_load_kill_process),
    cmocka_unit_test(test_load_default_errno),
    cmocka_unit_test(test_load_args),
    cmocka_unit_test(test_load_null),
    cmocka_unit_test(test_features),
    cmocka_unit_test(test_load_docker_sized_profile),
    cmocka_unit_test(test_alloc_failures),
    cmocka_unit_test(test_load_trap_trace_log_flags),
    cmocka_unit_test(test_load_kill_thread),
    cmocka_unit_test(test_unknown_syscall_logged),
};
UNIT_MAIN(tests)
