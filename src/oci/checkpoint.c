/* oci/checkpoint: CRIU dumps of a running container (`criu dump`).
 *
 * CRIU is an optional tool: kinglet runs it when the node has it (found
 * on PATH at each checkpoint, so installing it needs no restart) and
 * refuses checkpoints clearly when it does not.
 *
 * What CRIU dumps is the container's init and everything below it; the
 * init leads its own pid namespace (or, sharing the pod's, the tree below
 * it must be the whole of it: CRIU says so otherwise). What lies outside
 * and is named external, as runc and crun do:
 *  - the monitor, the init's parent: not in the tree; the init's stdio
 *    are pipes to it, which CRIU dumps as pipes whose other end is gone.
 *    Their names (pipe:[inode]) go to descriptors.json beside the images,
 *    so that a restore can hand its own pipes in with --inherit-fd;
 *  - every bind mount of the bundle's config.json (volumes, /etc/hosts,
 *    /dev/shm, the termination log): --external mnt[dest]:dest, keyed by
 *    its destination; masked files: mnt[dest]:/dev/null;
 *  - the init's stdin when it is the monitor's /dev/null: a file on a
 *    mount outside the container, --external file[mnt_id:inode];
 *  - the pod's network namespace, which the pod owns and the container
 *    only joined: --external net[inode]:extRootNetNS;
 *  - cgroups: kinglet's, left alone (--manage-cgroups=ignore).
 * The container keeps running (--leave-running). Blocking throughout:
 * workers only. */
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oci/checkpoint.h"
#include "oci/internal.h"

#define CRIU_ARGS_MAX 512

int oci_criu_find(char *buf, size_t size)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*path) {
        const char *end = strchrnul(path, ':');
        size_t n = (size_t)(end - path);
        if (n > 0 && path[0] == '/') {
            int len = snprintf(buf, size, "%.*s/criu", (int)n, path);
            if (len > 0 && (size_t)len < size && access(buf, X_OK) == 0)
                return 0;
        }
        path = *end ? end + 1 : end;
    }
    return -ENOENT;
}

/* "Version: 3.17.1" → 31701. */
int oci_criu_version_parse(const char *text)
{
    const char *p = strstr(text, "Version:");
    if (!p)
        return -EINVAL;
    unsigned major = 0, minor = 0, sub = 0;
    if (sscanf(p + 8, " %u.%u.%u", &major, &minor, &sub) < 2 || major > 99 || minor > 99 ||
        sub > 99)
        return -EINVAL;
    return (int)(major * 10000 + minor * 100 + sub);
}

/* Runs criu with argv, its output to out_fd, for at most timeout_s
 * seconds (0: no limit): 0 and its exit status, -ETIMEDOUT (it is
 * killed), -errno. Its environment is our PATH alone: criu runs
 * iptables-restore (or nft) to lock the network, which live in sbin,
 * off the C library's default path. */
static int criu_run(const char *criu, char *const *argv, int out_fd, int64_t timeout_s,
                    int *ret_status)
{
    const char *path = getenv("PATH");
    _cleanup_free_ char *env_path = NULL;
    if (asprintf(&env_path, "PATH=%s",
                 path && *path
                     ? path
                     : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") < 0)
        return -ENOMEM;
    char *envp[] = {env_path, NULL};
    pid_t pid;
    int r = spawn_start(criu, argv, envp, -1, out_fd, out_fd, NULL, 0, &pid);
    if (r < 0)
        return r;
    _cleanup_close_ int pfd = pidfd_open(pid, 0); /* our child, not reaped */
    uint64_t deadline = timeout_s > 0 ? now_mono_ns() + (uint64_t)timeout_s * 1000000000ull : 0;
    bool killed = false;
    while (pfd >= 0 && !killed) {
        int ms = -1;
        if (deadline) {
            uint64_t now = now_mono_ns();
            ms = now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
        }
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        int n = poll(&p, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0)
            break;
        if (n == 0) {
            /* CRIU resumes the frozen tasks when it dies (the freezer is
             * released with its ptrace attachments) */
            kill(pid, SIGKILL);
            killed = true;
        }
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (killed)
        return -ETIMEDOUT;
    *ret_status = st;
    return 0;
}

/* A log line without its "(00.009288) " time stamp. */
static void line_trim(const char **s, size_t *len)
{
    const char *p = *s;
    if (*len > 2 && p[0] == '(') {
        const char *q = memchr(p, ')', *len);
        if (q && (size_t)(q - p) < 16) {
            q++;
            while (q < p + *len && *q == ' ')
                q++;
            *len -= (size_t)(q - p);
            *s = q;
        }
    }
}

void oci_criu_log_tail(const char *log, char *buf, size_t size)
{
    buf[0] = '\0';
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (read_file_at(AT_FDCWD, log, 16u << 20, &text, &len) < 0 || len == 0)
        return;
    /* The last four Error lines (the cause comes a few lines before the
     * last one: "Dumping FAILED", "Could not initialize ..."); without
     * any, the last two lines. */
    enum { KEEP = 4 };
    const char *pick[KEEP] = {0}, *last[2] = {0};
    size_t plen[KEEP] = {0}, llen[2] = {0}, n_err = 0;
    for (const char *s = text, *end = text + len; s < end;) {
        const char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e)
            e = end;
        size_t l = (size_t)(e - s);
        if (l > 0) {
            last[0] = last[1], llen[0] = llen[1];
            last[1] = s, llen[1] = l;
            if (memmem(s, l, "Error", 5)) {
                memmove(pick, pick + 1, sizeof(pick) - sizeof(pick[0]));
                memmove(plen, plen + 1, sizeof(plen) - sizeof(plen[0]));
                pick[KEEP - 1] = s, plen[KEEP - 1] = l;
                n_err++;
            }
        }
        s = e + 1;
    }
    size_t n = KEEP;
    if (n_err == 0) {
        pick[0] = last[0], plen[0] = llen[0];
        pick[1] = last[1], plen[1] = llen[1];
        n = 2;
    }
    size_t off = 0;
    for (size_t i = 0; i < n && off + 1 < size; i++) {
        if (!pick[i])
            continue;
        const char *s = pick[i];
        size_t l = plen[i];
        line_trim(&s, &l);
        int w = snprintf(buf + off, size - off, "%s%.*s", off ? " | " : "",
                         (int)(l > 100 ? 100 : l), s);
        if (w < 0)
            break;
        off += (size_t)w >= size - off ? size - off - 1 : (size_t)w;
    }
}

static int args_add(char **argv, size_t *n, char *s)
{
    if (!s)
        return -ENOMEM;
    if (*n + 1 >= CRIU_ARGS_MAX) {
        free(s);
        return -E2BIG;
    }
    argv[(*n)++] = s;
    return 0;
}

static bool mount_is_bind(json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    if (type && strcmp(type, "bind") == 0)
        return true;
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(m, "options"), i, o)
    {
        const char *s = json_string_value(o);
        if (s && (strcmp(s, "bind") == 0 || strcmp(s, "rbind") == 0))
            return true;
    }
    return false;
}

/* --external for the bind mounts and masked files of config.json. */
static int add_external_mounts(const char *config, pid_t pid, char **argv, size_t *n,
                               struct err *err)
{
    json_error_t jerr;
    json_t *spec = json_load_file(config, 0, &jerr);
    if (!spec)
        return err_set_msg(err, EINVAL, "read `%s`: %s", config, jerr.text);
    int r = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(spec, "mounts"), i, m)
    {
        const char *dest = json_string_value(json_object_get(m, "destination"));
        if (!dest || !mount_is_bind(m))
            continue;
        char *s;
        if (asprintf(&s, "mnt[%s]:%s", dest, dest) < 0)
            s = NULL;
        if ((r = args_add(argv, n, strdup("--external"))) < 0 || (r = args_add(argv, n, s)) < 0)
            break;
    }
    /* A masked file is /dev/null bound over it, named /dev/null in the
     * image as runc names it (a restore maps that one name to its own
     * /dev/null); a masked directory is a read-only tmpfs, which CRIU
     * dumps as any tmpfs. */
    json_array_foreach(json_object_get(json_object_get(spec, "linux"), "maskedPaths"), i, m)
    {
        const char *dest = json_string_value(m);
        if (r < 0 || !dest)
            continue;
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, dest);
        if (stat(path, &st) < 0 || S_ISDIR(st.st_mode))
            continue;
        char *s;
        if (asprintf(&s, "mnt[%s]:/dev/null", dest) < 0)
            s = NULL;
        if ((r = args_add(argv, n, strdup("--external"))) < 0 || (r = args_add(argv, n, s)) < 0)
            break;
    }
    json_decref(spec);
    return r < 0 ? err_set(err, -r, "criu arguments") : 0;
}

/* The mount id of pid's fd, from its fdinfo; -1 when unknown. */
static long fd_mnt_id(pid_t pid, int fd)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (read_file_at(AT_FDCWD, path, 4096, &text, &len) < 0)
        return -1;
    const char *m = strstr(text, "mnt_id:");
    return m ? strtol(m + 7, NULL, 10) : -1;
}

/* descriptors.json: what the init's fds 0-2 are, as runc records them.
 * A pipe (to the monitor) is named pipe:[inode], for a restore to hand
 * its own in. A file or device (stdin's /dev/null) was opened by the
 * monitor on a mount that is not the container's, which CRIU cannot
 * find: it is dumped as external, file[mnt_id:inode] in CRIU's hex, the
 * name descriptors.json records for a restore's --inherit-fd. */
static int write_descriptors(pid_t pid, const char *images_dir, char **argv, size_t *n,
                             struct err *err)
{
    json_t *a = json_array();
    int r = 0;
    for (int fd = 0; a && fd < 3 && r >= 0; fd++) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, fd);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len < 0)
            len = 0;
        target[len] = '\0';
        struct stat st;
        long mnt_id;
        if (target[0] == '/' && stat(link, &st) == 0 && !S_ISFIFO(st.st_mode) &&
            !S_ISSOCK(st.st_mode) && (mnt_id = fd_mnt_id(pid, fd)) >= 0) {
            snprintf(target, sizeof(target), "file[%lx:%llx]", (unsigned long)mnt_id,
                     (unsigned long long)st.st_ino);
            if ((r = args_add(argv, n, strdup("--external"))) >= 0)
                r = args_add(argv, n, strdup(target));
        }
        json_array_append_new(a, json_string(target));
    }
    char *text = a && r >= 0 ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    if (!text)
        return err_set(err, r < 0 ? -r : ENOMEM, "descriptors.json");
    _cleanup_close_ int dfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = dfd < 0 ? -errno : write_file_atomic(dfd, "descriptors.json", text, strlen(text), 0600);
    free(text);
    return r < 0 ? err_set(err, -r, "write `%s/descriptors.json`", images_dir) : 0;
}

int oci_container_checkpoint(const struct oci_checkpoint_opts *o, struct err *err)
{
    char criu[PATH_MAX];
    if (oci_criu_find(criu, sizeof(criu)) < 0)
        return err_set_msg(err, ENOPKG,
                           "CRIU binary not found on PATH: checkpoints need criu %d.%d or newer "
                           "installed on the node",
                           OCI_CRIU_MIN_VERSION / 10000, OCI_CRIU_MIN_VERSION / 100 % 100);
    /* its version, as containerd and CRI-O check it */
    char vlog[PATH_MAX];
    snprintf(vlog, sizeof(vlog), "%s/criu-version.out", o->work_dir);
    _cleanup_close_ int vfd = open(vlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (vfd < 0)
        return err_set(err, errno, "create `%s`", vlog);
    char *vargv[] = {"criu", "--version", NULL};
    int st = 0;
    int r = criu_run(criu, vargv, vfd, 30, &st);
    _cleanup_free_ char *vtext = NULL;
    size_t vlen;
    int version = r == 0 && read_file_at(AT_FDCWD, vlog, 4096, &vtext, &vlen) == 0
                      ? oci_criu_version_parse(vtext)
                      : -EINVAL;
    unlink(vlog);
    if (version < OCI_CRIU_MIN_VERSION)
        return err_set_msg(err, ENOPKG,
                           "CRIU binary `%s` too old or not working (need %d.%d or newer)", criu,
                           OCI_CRIU_MIN_VERSION / 10000, OCI_CRIU_MIN_VERSION / 100 % 100);

    struct oci_state s = {0};
    r = oci_container_state(o->root, o->id, &s, err);
    if (r < 0)
        return r;
    pid_t pid = s.pid;
    enum oci_status status = s.status;
    char bundle[sizeof(s.bundle)];
    memcpy(bundle, s.bundle, sizeof(bundle));
    oci_state_clear(&s);
    if (status != OCI_STATUS_RUNNING || pid <= 0)
        return err_set_msg(err, EALREADY, "container `%s` is not running", o->id);

    char *argv[CRIU_ARGS_MAX] = {0};
    size_t n = 0;
    char ns_self[64], ns_ctr[64];
    struct stat self_st, ctr_st;
    snprintf(ns_self, sizeof(ns_self), "/proc/self/ns/net");
    snprintf(ns_ctr, sizeof(ns_ctr), "/proc/%d/ns/net", (int)pid);
    bool own_net = stat(ns_self, &self_st) == 0 && stat(ns_ctr, &ctr_st) == 0 &&
                   self_st.st_ino != ctr_st.st_ino;
    const char *fixed[] = {"criu",
                           "dump",
                           "--leave-running",
                           "--manage-cgroups=ignore",
                           "--tcp-established",
                           "--ext-unix-sk",
                           "--file-locks",
                           "--skip-in-flight",
                           "-v4",
                           "--log-file",
                           "dump.log",
                           "--images-dir",
                           o->images_dir,
                           "--work-dir",
                           o->work_dir};
    for (size_t i = 0; i < ARRAY_SIZE(fixed) && r >= 0; i++)
        r = args_add(argv, &n, strdup(fixed[i]));
    char *t = NULL;
    if (r >= 0 && asprintf(&t, "%d", (int)pid) >= 0) {
        if ((r = args_add(argv, &n, strdup("--tree"))) >= 0)
            r = args_add(argv, &n, t);
        else
            free(t);
    } else if (r >= 0) {
        r = -ENOMEM;
    }
    if (r >= 0 && own_net) {
        if (asprintf(&t, "net[%lu]:extRootNetNS", (unsigned long)ctr_st.st_ino) < 0)
            t = NULL;
        if ((r = args_add(argv, &n, strdup("--external"))) >= 0)
            r = args_add(argv, &n, t);
        else
            free(t);
    }
    if (r < 0) {
        r = err_set(err, -r, "criu arguments");
        goto out;
    }
    char config[PATH_MAX];
    snprintf(config, sizeof(config), "%s/%s/config.json", o->root ? o->root : OCI_ROOT_DEFAULT,
             o->id);
    if ((r = add_external_mounts(config, pid, argv, &n, err)) < 0 ||
        (r = write_descriptors(pid, o->images_dir, argv, &n, err)) < 0)
        goto out;
    argv[n] = NULL;

    log_debug("checkpoint `%s`: %s dump --tree %d (%zu arguments)", o->id, criu, (int)pid, n);
    r = criu_run(criu, argv, -1, o->timeout_s, &st);
    char logp[PATH_MAX], tail[360];
    snprintf(logp, sizeof(logp), "%s/dump.log", o->work_dir);
    if (r == -ETIMEDOUT) {
        r = err_set_msg(err, ETIMEDOUT, "criu dump of `%s` took longer than %llds", o->id,
                        (long long)o->timeout_s);
    } else if (r < 0) {
        r = err_set(err, -r, "run `%s`", criu);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        oci_criu_log_tail(logp, tail, sizeof(tail));
        r = err_set_msg(err, EIO, "criu dump failed (%s %d): %s", WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
                        tail[0] ? tail : "dump.log is empty");
    }
out:
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    return r;
}
