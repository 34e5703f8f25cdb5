/* oci/state: the container state directory <root>/<id>/ and small shared
 * plumbing (sync messages, raw syscalls).
 *
 * state.json is rewritten only by create/start (write + rename, no fsync:
 * the root is a tmpfs under /run and a container does not survive a reboot);
 * exit.json is written once by the monitor, durably. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "oci/internal.h"

int oci_pivot_root(const char *new_root, const char *put_old)
{
    return (int)syscall(SYS_pivot_root, new_root, put_old);
}

int oci_id_validate(const char *id, struct err *err)
{
    size_t n = strlen(id);
    if (n == 0 || n > 200)
        return err_set(err, EINVAL, "container id `%s`: must be 1 to 200 characters", id);
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.' || *p == '+'))
            return err_set(err, EINVAL, "container id `%s`: invalid character `%c`", id, *p);
    if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
        return err_set(err, EINVAL, "container id `%s`: invalid", id);
    return 0;
}

int oci_state_dir_open(const char *root, const char *id, int *ret_fd, struct err *err)
{
    int r = oci_id_validate(id, err);
    if (r < 0)
        return r;
    _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return err_set(err, errno == ENOENT ? ENOENT : errno, "container `%s` does not exist", id);
    int fd = openat(rfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return err_set(err, ENOENT, "container `%s` does not exist", id);
        return err_set(err, errno, "open `%s/%s`", root, id);
    }
    *ret_fd = fd;
    return 0;
}

int oci_record_format(const struct oci_record *rec, char **ret, struct err *err)
{
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "id", rec->id, "bundle", rec->bundle,
                  "cgroup", rec->cgroup, "pid", (json_int_t)rec->pid, "pidStart",
                  (json_int_t)rec->pid_start, "monitor", (json_int_t)rec->monitor, "monitorStart",
                  (json_int_t)rec->monitor_start, "created", (json_int_t)rec->created_ns);
    if (!j)
        return err_set(err, ENOMEM, "state.json");
    if (rec->creating)
        json_object_set_new(j, "creating", json_true());
    if (rec->annotations_json) {
        json_t *a = json_loads(rec->annotations_json, 0, NULL);
        if (a)
            json_object_set_new(j, "annotations", a);
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return err_set(err, ENOMEM, "state.json");
    *ret = s;
    return 0;
}

int oci_record_write(int dirfd, const struct oci_record *rec, struct err *err)
{
    _cleanup_free_ char *s = NULL;
    int r = oci_record_format(rec, &s, err);
    if (r < 0)
        return r;
    /* Not durable on purpose: see the top of the file. */
    size_t len = strlen(s);
    _cleanup_close_ int fd = openat(dirfd, "state.json.tmp",
                                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_set(err, errno, "write state.json");
    if (write(fd, s, len) != (ssize_t)len)
        return err_set(err, errno ? errno : EIO, "write state.json");
    if (renameat(dirfd, "state.json.tmp", dirfd, "state.json") < 0)
        return err_set(err, errno, "rename state.json");
    return 0;
}

void oci_record_clear(struct oci_record *rec)
{
    free(rec->annotations_json);
    memset(rec, 0, sizeof(*rec));
}

/* A path that state.json may name: empty (no cgroup), or absolute, without
 * a `..` component, shorter than its buffer. */
static bool record_path_ok(const char *p, size_t max, bool may_be_empty)
{
    size_t n = strlen(p);
    if (n == 0)
        return may_be_empty;
    if (n >= max || p[0] != '/')
        return false;
    for (const char *c = p; (c = strstr(c, "..")); c += 2)
        if (c[-1] == '/' && (c[2] == '/' || c[2] == '\0'))
            return false;
    return true;
}

/* Whether a pid read back can be a process of ours: 0 (none) up to the
 * kernel's PID_MAX_LIMIT. A wider value would wrap in pid_t, and -1 would
 * signal every process. */
static bool record_pid_ok(json_int_t pid) { return pid >= 0 && pid <= OCI_PID_MAX; }

int oci_record_parse(const char *data, size_t len, struct oci_record *rec, struct err *err)
{
    memset(rec, 0, sizeof(*rec));
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
    if (!j)
        return err_set(err, EINVAL, "state.json: corrupt");
    const char *id = NULL, *bundle = NULL, *cg = NULL;
    json_int_t pid = 0, ps = 0, mon = 0, ms = 0, created = 0;
    json_t *ann = NULL;
    int creating = 0;
    const char *bad = NULL;
    if (json_unpack(j, "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s?o, s?b}", "id", &id, "bundle",
                    &bundle, "cgroup", &cg, "pid", &pid, "pidStart", &ps, "monitor", &mon,
                    "monitorStart", &ms, "created", &created, "annotations", &ann, "creating",
                    &creating) < 0)
        bad = "missing or mistyped field";
    else if (oci_id_validate(id, NULL) < 0)
        bad = "id";
    else if (!record_path_ok(bundle, sizeof(rec->bundle), false))
        bad = "bundle";
    else if (!record_path_ok(cg, sizeof(rec->cgroup), true))
        bad = "cgroup";
    else if (!record_pid_ok(pid) || !record_pid_ok(mon))
        bad = "pid";
    else if (ps < 0 || ms < 0 || created < 0)
        bad = "start time";
    else if (ann && !json_is_object(ann))
        bad = "annotations";
    if (bad) {
        json_decref(j);
        return err_set(err, EINVAL, "state.json: corrupt (%s)", bad);
    }
    snprintf(rec->id, sizeof(rec->id), "%s", id);
    snprintf(rec->bundle, sizeof(rec->bundle), "%s", bundle);
    snprintf(rec->cgroup, sizeof(rec->cgroup), "%s", cg);
    rec->pid = (pid_t)pid;
    rec->pid_start = (uint64_t)ps;
    rec->monitor = (pid_t)mon;
    rec->monitor_start = (uint64_t)ms;
    rec->created_ns = (uint64_t)created;
    rec->creating = creating != 0;
    if (ann && json_object_size(ann)) {
        rec->annotations_json = json_dumps(ann, JSON_COMPACT);
        if (!rec->annotations_json) {
            json_decref(j);
            return err_set(err, ENOMEM, "state.json");
        }
    }
    json_decref(j);
    return 0;
}

int oci_record_read(int dirfd, struct oci_record *rec, struct err *err)
{
    memset(rec, 0, sizeof(*rec));
    _cleanup_free_ char *data = NULL;
    size_t len;
    int r = read_file_at(dirfd, "state.json", 1 << 20, &data, &len);
    if (r < 0)
        return err_set(err, r, "read state.json");
    return oci_record_parse(data, len, rec, err);
}

int oci_exit_read(int dirfd, struct oci_exit *ret)
{
    _cleanup_free_ char *data = NULL;
    size_t len;
    int r = read_file_at(dirfd, "exit.json", 4096, &data, &len);
    if (r < 0)
        return r;
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!j)
        return -EINVAL;
    json_int_t code = 0, sig = 0, st = 0, fin = 0;
    int oom = 0;
    r = json_unpack(j, "{s:I, s:I, s:I, s:I, s:b}", "exitCode", &code, "signal", &sig, "started",
                    &st, "finished", &fin, "oomKilled", &oom);
    json_decref(j);
    if (r < 0)
        return -EINVAL;
    *ret = (struct oci_exit){(int)code, (int)sig, (uint64_t)st, (uint64_t)fin, oom != 0};
    return 0;
}

static bool cgroup_frozen(const char *cg)
{
    if (!cg[0])
        return false;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.freeze", cg);
    _cleanup_free_ char *data = NULL;
    if (read_file_at(AT_FDCWD, path, 64, &data, NULL) < 0)
        return false;
    return data[0] == '1';
}

enum oci_status oci_status_get(int dirfd, const struct oci_record *rec)
{
    if (faccessat(dirfd, "exit.json", F_OK, 0) == 0)
        return OCI_STATUS_STOPPED;
    uint64_t st;
    char state = 0;
    if (rec->pid <= 0 || proc_start_time(rec->pid, &st, &state) < 0 || st != rec->pid_start ||
        state == 'Z' || state == 'X')
        return OCI_STATUS_STOPPED;
    if (rec->creating)
        return OCI_STATUS_CREATING;
    if (faccessat(dirfd, "exec.fifo", F_OK, 0) == 0)
        return OCI_STATUS_CREATED;
    if (cgroup_frozen(rec->cgroup))
        return OCI_STATUS_PAUSED;
    return OCI_STATUS_RUNNING;
}

const char *oci_status_name(enum oci_status s)
{
    static const char *const names[] = {"creating", "created", "running", "paused", "stopped"};
    return names[s];
}

int oci_cancel_read(int cancel_fd, struct err *err)
{
    struct signalfd_siginfo si = {0};
    if (read(cancel_fd, &si, sizeof(si)) != sizeof(si))
        return 0;
    int sig = (int)si.ssi_signo;
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT)
        return err_set(err, EINTR, "interrupted by %s", strsignal(sig));
    return 0;
}

/* ---- sync messages ------------------------------------------------------ */

int oci_sync_send(int fd, int type, int value, const char *text)
{
    struct oci_sync_msg m = {.type = type, .value = value};
    if (text)
        snprintf(m.text, sizeof(m.text), "%s", text);
    size_t len = offsetof(struct oci_sync_msg, text) + (text ? strlen(m.text) + 1 : 0);
    for (;;) {
        ssize_t n = send(fd, &m, len, MSG_NOSIGNAL);
        if (n >= 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int oci_sync_send_err(int fd, const struct err *err)
{
    return oci_sync_send(fd, OCI_SYNC_ERROR, err->code | (err->no_sys ? OCI_SYNC_NO_SYS : 0),
                         err->msg);
}

int oci_sync_err(const struct oci_sync_msg *m, struct err *err)
{
    int code = m->value & ~OCI_SYNC_NO_SYS;
    if (m->value & OCI_SYNC_NO_SYS)
        return err_set_msg(err, code ? code : EIO, "%s", m->text);
    return err_set(err, code ? code : EIO, "%s", m->text);
}

int oci_sync_send_fd(int sock, int type, int value, int fd)
{
    struct oci_sync_msg m = {.type = type, .value = value};
    return oci_send_with_fd(sock, &m, offsetof(struct oci_sync_msg, text), fd);
}

int oci_sync_recv_from(int sock, struct oci_sync_msg *m, int *ret_fd, pid_t *ret_from)
{
    memset(m, 0, sizeof(*m));
    if (ret_fd)
        *ret_fd = -1;
    if (ret_from)
        *ret_from = 0;
    struct iovec iov = {.iov_base = m, .iov_len = sizeof(*m)};
    union {
        char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET)
            continue;
        if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
            struct ucred cr;
            memcpy(&cr, CMSG_DATA(c), sizeof(cr));
            if (ret_from)
                *ret_from = cr.pid;
        } else if (c->cmsg_type == SCM_RIGHTS) {
            /* the first fd to *ret_fd when one is expected, the rest closed */
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int x;
                memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (ret_fd && *ret_fd < 0)
                    *ret_fd = x;
                else
                    close(x);
            }
        }
    }
    if (n == 0 || (size_t)n < offsetof(struct oci_sync_msg, text)) {
        if (ret_fd && *ret_fd >= 0) {
            close(*ret_fd);
            *ret_fd = -1;
        }
        return n == 0 ? -EPIPE : -EPROTO;
    }
    m->text[sizeof(m->text) - 1] = '\0';
    return 0;
}

int oci_sync_recv_fd(int sock, struct oci_sync_msg *m, int *ret_fd)
{
    return oci_sync_recv_from(sock, m, ret_fd, NULL);
}

int oci_sync_recv(int fd, struct oci_sync_msg *m, int timeout_ms)
{
    memset(m, 0, sizeof(*m));
    if (timeout_ms >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        do
            r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
    }
    for (;;) {
        ssize_t n = recv(fd, m, sizeof(*m), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EPIPE;
        if ((size_t)n < offsetof(struct oci_sync_msg, text))
            return -EPROTO;
        m->text[sizeof(m->text) - 1] = '\0';
        return 0;
    }
}
