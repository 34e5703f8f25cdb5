/* Pulls and imports in a short-lived helper process.
 *
 * Why: what a pull parses is hostile (registry answers, manifests, gzip and
 * zstd streams, tar headers), and what it loads is large: libcurl, OpenSSL,
 * GnuTLS, libarchive and their state took the daemon from 3.6 MB to 18.7 MB
 * of RSS for good after the first pull (OpenSSL and p11-kit are NODELETE,
 * so dlclose could not give that back; libcurl has since made way for our
 * own client on mbedTLS, http.c, but libarchive and mbedTLS still stay). So
 * the job thread re-executes our own binary as `kinglet image-pull`, which
 * does the whole pull (pull.c, import.c, registry.c, unpack.c) and exits: the
 * daemon never maps those libraries, and a parser bug is contained in a
 * process that holds nothing but the image store.
 *
 * The helper, in this order (each step before it gives up what it needs):
 *   1. dies with the job thread that started it (PR_SET_PDEATHSIG);
 *   2. reads its request (one JSON line) on fd 3;
 *   3. gets a mount namespace of its own in which every mount is read-only
 *      and nodev, but the image store is writable (mount_setattr,
 *      AT_RECURSIVE);
 *   4. keeps only the capabilities unpacking needs: CHOWN, DAC_OVERRIDE,
 *      FOWNER, FSETID (owners and modes of layer files), MKNOD (fifos and
 *      overlayfs whiteouts), SETFCAP (file capabilities), and SYS_ADMIN,
 *      which the kernel requires for the trusted.overlay.opaque xattr of
 *      opaque directories; the bounding set goes too; and takes a uid and
 *      gid of its own (filesystem ids 0: files are made as before);
 *   5. sets no_new_privs and a seccomp filter (the list below);
 *   6. runs the job, and reports over fd 3.
 *
 * The seccomp filter of step 5 refuses:
 *   - what SYS_ADMIN would otherwise allow: mount, namespaces, BPF,
 *     modules, kexec, ptrace, keyrings, ...;
 *   - sockets other than IPv4/IPv6 TCP and UDP and rtnetlink (registries,
 *     proxies, DNS, getaddrinfo): no unix socket, so no CRI socket;
 *   - signals to any process but itself;
 *   - changes to the limits, priority or scheduling of any process but
 *     itself (other helpers share its uid);
 *   - new processes (threads only);
 *   - device nodes but fifos and whiteouts (char 0/0).
 * Root as it is, it can neither reach the daemon nor touch another process
 * nor the host's devices. An unprivileged caller (`kinglet image` as a
 * user) skips 3 and 4: it has nothing to give up.
 *
 * The protocol is JSON lines over a socketpair. The helper asks for the
 * snapshots it needs ({"acquire": chain id}), because the table of
 * snapshots being built lives in the daemon: two pulls sharing a layer
 * (two helpers, or a helper and an import) build it once, as with threads.
 * The daemon answers {"acquire": id, "r": 1 present | 0 build it | -errno},
 * and the helper reports {"built": id, "ok": bool, "bytes", "inodes"} and
 * finally {"result": [records]} or {"error": {"code", "msg"}}. The job
 * thread never blocks on another job: an acquire of a layer that another
 * job is building waits in a list, retried when the table says a layer was
 * built or a job cancelled (store_snap_watch: an eventfd polled with the
 * socket, since the table's condition variable cannot be).
 *
 * What the helper says is checked like outside input: a "built" is taken
 * only for a layer the daemon told this helper to build and whose snapshot
 * is on disk; a result only names layers the job holds; a layer asked for
 * again is held once, and a helper that asks for more layers than a job of
 * its kind has (IMAGE_LAYERS_MAX for a pull, IMAGE_IMPORT_LAYERS_MAX for an
 * import) is stopped, so that it cannot grow the daemon. When the helper
 * dies, every layer it was building is marked failed, so waiters move on.
 * Cancellation (shutdown) and any protocol error SIGKILL it. */
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <linux/fs.h>
#include <linux/mount.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <grp.h>
#include <sys/capability.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/fanotify.h>
#include <sys/prctl.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image/internal.h"

#define HELPER_LINE_MAX  (16u << 20)
#define HELPER_FD        3
#define IMAGE_HELPER_UID 2147483646u /* 2^31 - 2: see sandbox_ids */

extern char **environ;

/* ---- JSON lines ------------------------------------------------------------ */

static int send_json(int fd, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    s[n] = '\n'; /* replaces the NUL: write n + 1 bytes */
    int r = write_all(fd, s, n + 1);
    explicit_bzero(s, n + 1); /* the request carries credentials */
    free(s);
    return r;
}

/* Takes the next complete line out of b (NUL-terminated in place), or
 * NULL. *used says how much to consume once the line is handled. */
static char *next_line(struct buf *b, size_t *used)
{
    char *nl = b->len ? memchr(b->data, '\n', b->len) : NULL;
    if (!nl)
        return NULL;
    *nl = '\0';
    *used = (size_t)(nl - (char *)b->data) + 1;
    return (char *)b->data;
}

/* Reads what is there into b; 0 at EOF, > 0 bytes read, < 0 error. */
static ssize_t fill(int fd, struct buf *b)
{
    if (b->len > HELPER_LINE_MAX)
        return -EMSGSIZE;
    if (buf_reserve(b, 65536) < 0)
        return -ENOMEM;
    ssize_t n;
    do
        n = read(fd, b->data + b->len, b->cap - b->len - 1);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    b->len += (size_t)n;
    return n;
}

static json_t *strv_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static int strv_from(json_t *a, char ***ret, size_t *ret_n)
{
    size_t n = json_array_size(a);
    char **v = calloc(n ? n : 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s || !(v[i] = strdup(s))) {
            strv_free(v, i);
            return -EINVAL;
        }
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

static json_t *opt_str(const char *s) { return s ? json_string(s) : json_null(); }

static char *dup_str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? strdup(s) : NULL;
}

/* ---- the daemon's side ------------------------------------------------------- */

/* The limits are passed as the bytes of the struct: the helper is this
 * very binary, and so every limit added to struct image_limits reaches it. */
static json_t *limits_json(const struct image_limits *l)
{
    char hex[2 * sizeof(*l) + 1];
    const unsigned char *p = (const unsigned char *)l;
    for (size_t i = 0; i < sizeof(*l); i++)
        snprintf(hex + 2 * i, 3, "%02x", p[i]);
    return json_string(hex);
}

static json_t *request_json(const struct job *job)
{
    const struct image_service_shared *sh = job->sh;
    const struct image_auth *a = &job->auth;
    json_t *auth =
        json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "username", opt_str(a->username), "password",
                  opt_str(a->password), "auth", opt_str(a->auth), "server_address",
                  opt_str(a->server_address), "identity_token", opt_str(a->identity_token),
                  "registry_token", opt_str(a->registry_token));
    return json_pack(
        "{s:s,s:s,s:s,s:i,s:b,s:I,s:o,s:{s:i,s:o,s:o,s:o,s:b,s:o,s:s,s:s,s:o,s:o}}", "kind",
        job->kind == JOB_PULL ? "pull" : "import", "ref", job->ref_str, "store", sh->st->root,
        "log_level", (int)log_get_level(), "log_json", log_get_json(), "ppid", (json_int_t)getpid(),
        "auth", auth, "config", "concurrency", (int)sh->concurrency, "mirrors",
        strv_json(sh->mirrors, sh->n_mirrors), "insecure", strv_json(sh->insecure, sh->n_insecure),
        "certs_dir", opt_str(sh->certs_dir), "no_origin", sh->no_origin, "mirror_only",
        strv_json(sh->mirror_only, sh->n_mirror_only), "os", sh->os, "arch", sh->arch, "variant",
        opt_str(sh->variant), "limits", limits_json(&sh->limits));
}

struct parent {
    struct job *job;
    int fd;
    pid_t pid;
    char **building; /* layers this helper was told to build */
    size_t n_building;
    char **waiting; /* acquires of layers another job is building */
    size_t n_waiting;
    size_t acquires, acquires_max; /* asked so far, and what a job of its kind may ask */
    bool done;
};

static bool job_holds(struct job *job, const char *chain_id)
{
    for (size_t i = 0; i < job->n_held; i++)
        if (strcmp(job->held[i], chain_id) == 0)
            return true;
    return false;
}

/* 1 answered, 0 still busy elsewhere, < 0 the helper is unreachable. A
 * layer the job holds already (two images of an archive share it) is
 * answered as any other, but held once: its second reference goes back at
 * once, so no number of repeats grows job->held or the table's count. */
static int try_acquire(struct parent *p, const char *chain_id)
{
    struct store *st = p->job->sh->st;
    int a = store_snap_try_acquire(st, chain_id);
    if (a == -EAGAIN)
        return 0;
    if (a >= 0 && job_holds(p->job, chain_id)) {
        store_snap_release(st, chain_id);
    } else if (a >= 0 && job_hold(p->job, chain_id) < 0) {
        if (a == 0)
            store_snap_built(st, chain_id, false, 0, 0);
        store_snap_release(st, chain_id);
        a = -ENOMEM;
    }
    if (a == 0 && strv_push(&p->building, &p->n_building, chain_id) < 0) {
        store_snap_built(st, chain_id, false, 0, 0);
        a = -ENOMEM; /* the hold goes with the job */
    }
    int r = send_json(p->fd, json_pack("{s:s,s:i}", "acquire", chain_id, "r", a));
    return r < 0 ? r : 1;
}

static bool snapshot_on_disk(struct store *st, const char *chain_id)
{
    char path[128];
    snprintf(path, sizeof(path), "snapshots/%s/info.json", chain_id + 7);
    return faccessat(st->root_fd, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static int take_result(struct parent *p, json_t *a)
{
    struct job *job = p->job;
    if (!json_is_array(a) || json_array_size(a) > 1024)
        return -EBADMSG;
    for (size_t i = 0; i < json_array_size(a); i++) {
        struct image_info *img = store_record_from_json(json_array_get(a, i));
        if (!img)
            return -EBADMSG;
        bool ok = true;
        for (size_t l = 0; l < img->n_layers && ok; l++)
            ok = job_holds(job, img->chain_ids[l]) &&
                 store_snap_present(job->sh->st, img->chain_ids[l]);
        if (!ok || job_add_result(job, img) < 0) {
            image_info_free(img);
            return ok ? -ENOMEM : -EBADMSG;
        }
    }
    return 0;
}

/* A progress line: shown (by the command line, or to the daemon's
 * watching callers) only if well-formed, its phase one of image_progress's. */
static int take_progress(struct job *job, json_t *m, const char *digest)
{
    static const char *const phases[] = {"downloading", "verifying", "done", "exists", "failed"};
    const char *phase = json_string_value(json_object_get(m, "phase"));
    json_int_t bytes = json_integer_value(json_object_get(m, "bytes"));
    json_int_t total = json_integer_value(json_object_get(m, "total"));
    bool known = false;
    for (size_t i = 0; phase && i < ARRAY_SIZE(phases); i++)
        known |= strcmp(phase, phases[i]) == 0;
    if (!image_digest_valid(digest) || !known || bytes < 0 || total < 0)
        return -EBADMSG;
    job_progress_note(job, &(struct image_progress){.ref = job->ref_str,
                                                    .digest = digest,
                                                    .phase = phase,
                                                    .bytes = (uint64_t)bytes,
                                                    .total = (uint64_t)total});
    return 0;
}

/* One message of the helper; < 0 ends the conversation (and the helper). */
static int handle(struct parent *p, const char *line)
{
    struct job *job = p->job;
    json_t *m = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(m)) {
        json_decref(m);
        return -EBADMSG;
    }
    int r = 0;
    const char *acq = json_string_value(json_object_get(m, "acquire"));
    const char *built = json_string_value(json_object_get(m, "built"));
    json_t *res = json_object_get(m, "result"), *e = json_object_get(m, "error");
    const char *prog = json_string_value(json_object_get(m, "progress"));
    if (p->done) {
        r = -EBADMSG; /* nothing after the result */
    } else if (prog) {
        r = take_progress(job, m, prog);
    } else if (acq) {
        if (!image_digest_valid(acq)) {
            r = -EBADMSG;
        } else if (++p->acquires > p->acquires_max) {
            /* each asks for a layer: past what a job of its kind has, the
             * helper is not ours any more */
            r = job->r = err_set_msg(&job->err, EPROTO,
                                     "`%s`: the image helper asked for more than %zu layers, the "
                                     "limit of %s; it was stopped",
                                     job->ref_str, p->acquires_max,
                                     job->kind == JOB_PULL ? "a pull" : "an import");
        } else if ((r = try_acquire(p, acq)) == 0) {
            log_debug("`%s`: layer %s is being built by another job: waiting", job->ref_str, acq);
            r = strv_push(&p->waiting, &p->n_waiting, acq);
        } else if (r > 0)
            r = 0;
    } else if (built) {
        bool ok = json_is_true(json_object_get(m, "ok"));
        json_int_t bytes = json_integer_value(json_object_get(m, "bytes"));
        json_int_t inodes = json_integer_value(json_object_get(m, "inodes"));
        if (!strv_remove(p->building, &p->n_building, built)) {
            r = -EBADMSG;
        } else {
            ok = ok && bytes >= 0 && inodes >= 0 && snapshot_on_disk(job->sh->st, built);
            store_snap_built(job->sh->st, built, ok, ok ? (uint64_t)bytes : 0,
                             ok ? (uint64_t)inodes : 0);
            if (ok)
                log_debug("`%s`: layer %s unpacked (%lld bytes)", job->ref_str, built,
                          (long long)bytes);
        }
    } else if (res) {
        r = take_result(p, res);
        p->done = r == 0;
        job->r =
            r == 0 ? 0
                   : err_set(&job->err, -r, "`%s`: bad result from the image helper", job->ref_str);
    } else if (json_is_object(e)) {
        json_int_t code = json_integer_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "msg"));
        if (code <= 0 || code > 4095 || !msg) {
            r = -EBADMSG;
        } else {
            /* The message as the helper set it, without system text; whether
             * one is shown comes along (err_set_msg's errors have none). */
            job->err.code = (int)code;
            job->err.no_sys = json_is_true(json_object_get(e, "nosys"));
            snprintf(job->err.msg, sizeof(job->err.msg), "%s", msg);
            job->r = -(int)code;
            p->done = true;
        }
    } else {
        r = -EBADMSG;
    }
    json_decref(m);
    return r;
}

/* Waits on the helper's socket and on the snapshot table at once: the
 * table writes wake (an eventfd) when a layer is built or a job cancelled,
 * so a waiting acquire is retried then, and only then. */
static void converse(struct parent *p)
{
    struct job *job = p->job;
    struct store *st = job->sh->st;
    struct buf in = {0};
    _cleanup_close_ int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0 || store_snap_watch(st, wake) < 0) {
        job->r =
            err_set(&job->err, wake < 0 ? errno : ENOMEM, "`%s`: image helper wait", job->ref_str);
        return;
    }
    for (;;) {
        /* registered before the first look: no wake-up falls between */
        if (atomic_load(&job->cancel)) {
            err_set(&job->err, ECANCELED, "`%s`: cancelled", job->ref_str);
            job->r = -ECANCELED;
            break;
        }
        for (size_t i = 0; i < p->n_waiting;) {
            int r = try_acquire(p, p->waiting[i]);
            if (r < 0)
                goto out;
            if (r > 0)
                strv_remove(p->waiting, &p->n_waiting, p->waiting[i]);
            else
                i++;
        }
        struct pollfd pfd[2] = {{.fd = p->fd, .events = POLLIN}, {.fd = wake, .events = POLLIN}};
        int n = poll(pfd, 2, -1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        uint64_t v;
        if (pfd[1].revents && read(wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
            break;
        if (!pfd[0].revents)
            continue;
        ssize_t got = fill(p->fd, &in);
        if (got <= 0)
            break; /* EOF: the helper has exited (or closed its end) */
        char *line;
        size_t used;
        while ((line = next_line(&in, &used))) {
            int r = handle(p, line);
            buf_consume(&in, used);
            if (r < 0) {
                if (!p->done && job->r == 0)
                    job->r = err_set(&job->err, -r, "`%s`: image helper", job->ref_str);
                goto out;
            }
        }
    }
out:
    store_snap_unwatch(st, wake);
    buf_free(&in);
}

void job_helper_run(struct job *job)
{
    struct parent p = {.job = job,
                       .fd = -1,
                       .pid = -1,
                       .acquires_max =
                           job->kind == JOB_PULL ? IMAGE_LAYERS_MAX : IMAGE_IMPORT_LAYERS_MAX};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        job->r = err_set(&job->err, errno, "`%s`: image helper socket", job->ref_str);
        return;
    }
    p.fd = sv[0];
    char *argv[] = {"kinglet", "image-pull", NULL};
    int r = spawn_start("/proc/self/exe", argv, environ, -1, -1, STDERR_FILENO, &sv[1], 1, &p.pid);
    close(sv[1]);
    if (r < 0) {
        close(p.fd);
        job->r = err_set(&job->err, -r, "`%s`: start the image helper", job->ref_str);
        return;
    }
    job->r = 0;
    r = send_json(p.fd, request_json(job));
    if (r < 0)
        job->r = err_set(&job->err, -r, "`%s`: image helper request", job->ref_str);
    else
        converse(&p);
    if (!p.done)
        kill(p.pid, SIGKILL);
    int status = 0;
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR)
        ;
    close(p.fd);
    /* what it was unpacking when it went is garbage, and not there */
    if (!p.done || !WIFEXITED(status))
        store_tmp_remove_pid(job->sh->st, p.pid);
    for (size_t i = 0; i < p.n_building; i++)
        store_snap_built(job->sh->st, p.building[i], false, 0, 0);
    strv_free(p.building, p.n_building);
    strv_free(p.waiting, p.n_waiting);
    if (!p.done && job->r == 0) {
        if (WIFSIGNALED(status))
            job->r = err_set(&job->err, EIO, "`%s`: the image helper was killed by signal %d",
                             job->ref_str, WTERMSIG(status));
        else
            job->r = err_set(&job->err, EIO, "`%s`: the image helper exited with status %d",
                             job->ref_str, WEXITSTATUS(status));
    }
    if (job->r < 0) {
        for (size_t i = 0; i < job->n_results; i++)
            image_info_free(job->results[i]);
        job->n_results = 0;
    }
}

/* ---- the helper's side ------------------------------------------------------- */

struct reply {
    char *chain_id;
    int r;
};

struct helper_chan {
    int fd;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool reading; /* one thread reads for all (leader/followers) */
    bool dead;
    struct buf in;
    struct reply *replies;
    size_t n_replies;
};

static int chan_send(struct helper_chan *c, json_t *j)
{
    pthread_mutex_lock(&c->mu);
    int r = c->dead ? -EPIPE : send_json(c->fd, j);
    if (c->dead)
        json_decref(j);
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* With c->mu held: the reply for chain_id, if it has come. */
static bool take_reply(struct helper_chan *c, const char *chain_id, int *ret)
{
    for (size_t i = 0; i < c->n_replies; i++)
        if (strcmp(c->replies[i].chain_id, chain_id) == 0) {
            *ret = c->replies[i].r;
            free(c->replies[i].chain_id);
            c->replies[i] = c->replies[--c->n_replies];
            return true;
        }
    return false;
}

/* Reads replies until one more has come; called with c->mu held, which it
 * drops while reading. */
static void read_replies(struct helper_chan *c)
{
    c->reading = true;
    pthread_mutex_unlock(&c->mu);
    ssize_t got = fill(c->fd, &c->in);
    pthread_mutex_lock(&c->mu);
    c->reading = false;
    if (got <= 0) {
        c->dead = true;
        return;
    }
    char *line;
    size_t used;
    while ((line = next_line(&c->in, &used))) {
        json_t *m = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(m, "acquire"));
        json_t *rv = json_object_get(m, "r");
        struct reply *v = id ? realloc(c->replies, (c->n_replies + 1) * sizeof(*v)) : NULL;
        if (v) {
            c->replies = v;
            v[c->n_replies].r = json_is_integer(rv) ? (int)json_integer_value(rv) : -EBADMSG;
            if ((v[c->n_replies].chain_id = strdup(id)))
                c->n_replies++;
        } else {
            c->dead = true;
        }
        json_decref(m);
        buf_consume(&c->in, used);
    }
}

int helper_snap_acquire(struct helper_chan *c, const char *chain_id)
{
    int r = chan_send(c, json_pack("{s:s}", "acquire", chain_id));
    if (r < 0)
        return r;
    pthread_mutex_lock(&c->mu);
    while (!take_reply(c, chain_id, &r)) {
        if (c->dead) {
            r = -EPIPE;
            break;
        }
        if (c->reading)
            pthread_cond_wait(&c->cond, &c->mu);
        else {
            read_replies(c);
            pthread_cond_broadcast(&c->cond);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

void helper_progress(struct helper_chan *c, const char *digest, const char *phase, uint64_t bytes,
                     uint64_t total)
{
    chan_send(c, json_pack("{s:s,s:s,s:I,s:I}", "progress", digest, "phase", phase, "bytes",
                           (json_int_t)bytes, "total", (json_int_t)total));
}

void helper_snap_built(struct helper_chan *c, const char *chain_id, bool ok, uint64_t bytes,
                       uint64_t inodes)
{
    chan_send(c, json_pack("{s:s,s:b,s:I,s:I}", "built", chain_id, "ok", ok, "bytes",
                           (json_int_t)bytes, "inodes", (json_int_t)inodes));
}

static int sandbox_mounts(const char *store, struct err *err)
{
    if (unshare(CLONE_NEWNS) < 0)
        return err_set(err, errno, "unshare the mount namespace");
    /* Private, not a slave: a mount made on the host later (a container's
     * rootfs, a pod's secret volume) would otherwise appear here with its
     * own flags, writable, where the read-only pass below never reached. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return err_set(err, errno, "make / private");
    if (mount(store, store, NULL, MS_BIND, NULL) < 0)
        return err_set(err, errno, "bind `%s`", store);
    /* nodev too: root with DAC_OVERRIDE could otherwise write the host's
     * disks through /dev (a read-only mount does not stop writes to a
     * device node), or a device node a layer made */
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV};
    if (syscall(SYS_mount_setattr, -1, "/", AT_RECURSIVE, &ro, sizeof(ro)) < 0)
        return err_set(err, errno, "make every mount read-only");
    struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, -1, store, 0, &rw, sizeof(rw)) < 0)
        return err_set(err, errno, "make `%s` writable", store);
    return 0;
}

static int set_caps(const cap_value_t *v, size_t n)
{
    cap_t caps = cap_init();
    if (!caps)
        return -ENOMEM;
    int r = cap_set_flag(caps, CAP_PERMITTED, (int)n, v, CAP_SET) < 0 ||
                    cap_set_flag(caps, CAP_EFFECTIVE, (int)n, v, CAP_SET) < 0 ||
                    cap_set_proc(caps) < 0
                ? -errno
                : 0;
    cap_free(caps);
    return r;
}

/* The helper's uid and gid: no account's, no container's. Signals,
 * ptrace checks and /proc/PID of other processes (another user's, not
 * dumpable, or root's) see an unprivileged stranger; files are still made
 * as root would make them (fsuid and fsgid 0), so unpacking is unchanged.
 * PR_SET_PDEATHSIG goes with the change of ids: set again after it. */
static int sandbox_ids(const cap_value_t *keep, size_t n_keep, pid_t ppid, struct err *err)
{
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
        return err_set(err, errno, "keep capabilities");
    if (setgroups(0, NULL) < 0 ||
        setresgid(IMAGE_HELPER_UID, IMAGE_HELPER_UID, IMAGE_HELPER_UID) < 0 ||
        setresuid(IMAGE_HELPER_UID, IMAGE_HELPER_UID, IMAGE_HELPER_UID) < 0)
        return err_set(err, errno, "become uid %u", IMAGE_HELPER_UID);
    cap_value_t more[16];
    memcpy(more, keep, n_keep * sizeof(*keep));
    more[n_keep] = CAP_SETUID;
    more[n_keep + 1] = CAP_SETGID;
    int r = set_caps(more, n_keep + 2);
    if (r < 0)
        return err_set(err, -r, "set capabilities");
    setfsuid(0);
    setfsgid(0);
    if (setfsuid((uid_t)-1) != 0 || setfsgid((gid_t)-1) != 0)
        return err_set(err, EPERM, "keep the filesystem ids 0");
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (ppid && getppid() != ppid)
        return err_set(err, ESRCH, "the daemon is gone");
    return 0;
}

static int sandbox_caps(pid_t ppid, struct err *err)
{
    static const cap_value_t keep[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER,   CAP_FSETID,
                                       CAP_MKNOD, CAP_SETFCAP,      CAP_SYS_ADMIN};
    int max = (int)cap_max_bits();
    for (int c = 0; c < max; c++) {
        bool kept = false;
        for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
            kept |= keep[i] == c;
        if (!kept && cap_drop_bound((cap_value_t)c) < 0 && errno != EINVAL)
            return err_set(err, errno, "drop capability %d from the bounding set", c);
    }
    int r = sandbox_ids(keep, ARRAY_SIZE(keep), ppid, err);
    if (r < 0)
        return r;
    if ((r = set_caps(keep, ARRAY_SIZE(keep))) < 0)
        return err_set(err, -r, "set capabilities");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        r = err_set(err, errno, "clear ambient capabilities");
    return r;
}

/* Signals to the helper itself only: the daemon, pid 1 and every other
 * process are out of reach, though the helper runs as root. The pid is
 * this process's, fixed when the filter is made; no child can inherit the
 * filter to outlive it (fork is refused). glibc's raise, abort and
 * pthread_kill use tgkill(getpid(), tid). F_SETOWN and friends would have
 * the kernel send SIGIO (or any F_SETSIG signal) to another process. */
/* An int or unsigned argument: the kernel reads its low 32 bits only, so
 * compared as 64 bits (SCMP_CMP_EQ) a value with any bit above them set
 * would pass a rule meant for it (socket(AF_UNIX | 1 << 32) is a unix
 * socket). */
#define INT_BITS 0xffffffffULL

static int sandbox_seccomp_signals(scmp_filter_ctx ctx)
{
    scmp_datum_t self = (scmp_datum_t)getpid();
    static const int pid_first[] = {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo),
                                    SCMP_SYS(rt_tgsigqueueinfo)};
    int r = 0;
    for (size_t i = 0; i < ARRAY_SIZE(pid_first) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), pid_first[i], 1,
                             SCMP_A0(SCMP_CMP_NE, self, 0));
    static const int deny[] = {SCMP_SYS(tkill), SCMP_SYS(pidfd_send_signal), SCMP_SYS(pidfd_open)};
    for (size_t i = 0; i < ARRAY_SIZE(deny) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), deny[i], 0);
    static const int fcntls[] = {F_SETOWN, F_SETOWN_EX, F_SETSIG};
    for (size_t i = 0; i < ARRAY_SIZE(fcntls) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, INT_BITS, (scmp_datum_t)fcntls[i]));
    static const unsigned long ioctls[] = {FIOSETOWN, SIOCSPGRP, TIOCSTI};
    for (size_t i = 0; i < ARRAY_SIZE(ioctls) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, INT_BITS, (scmp_datum_t)ioctls[i]));
    return r;
}

/* Other processes of its uid: concurrent helpers share it (sandbox_ids),
 * and the kernel lets a process change the resource limits (prlimit64),
 * nice value (setpriority), scheduling (sched_set*), CPU affinity and I/O
 * priority of another with the same uid, no capability needed. So these
 * act on the calling thread only, named as 0 (glibc's setrlimit is
 * prlimit64(0, ...)); setpriority only as PRIO_PROCESS (PRIO_USER would
 * reach every helper at once). ioprio_set is refused (with SYS_ADMIN,
 * kept for unpacking, it would even give the helper real-time I/O), as
 * are page migrations of another process; unpacking uses none of them.
 * What else acts on another process is refused elsewhere: signals above,
 * ptrace, process_vm_*, kcmp, pidfd_* and fork in the list, /proc
 * writes by the read-only mounts. */
static int sandbox_seccomp_others(scmp_filter_ctx ctx)
{
    static const int self_only[] = {SCMP_SYS(prlimit64),          SCMP_SYS(sched_setaffinity),
                                    SCMP_SYS(sched_setscheduler), SCMP_SYS(sched_setparam),
                                    SCMP_SYS(sched_setattr),      SCMP_SYS(migrate_pages),
                                    SCMP_SYS(move_pages)};
    int r = 0;
    for (size_t i = 0; i < ARRAY_SIZE(self_only) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), self_only[i], 1,
                             SCMP_A0(SCMP_CMP_NE, 0, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1,
                             SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1,
                             SCMP_A1(SCMP_CMP_NE, 0, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioprio_set), 0);
    return r;
}

/* New sockets: TCP to registries and proxies, UDP and TCP for DNS (IPv4,
 * IPv6), and rtnetlink, which glibc's getaddrinfo reads addresses with.
 * No unix socket: the daemon's CRI socket, nscd and the like are out of
 * reach (glibc resolves without nscd when it cannot connect), and no
 * socketpair. The only unix socket is fd 3, already connected to the job
 * thread, which reads JSON lines from it and no descriptors. datum_b
 * spelled out: clang's -Wmissing-field-initializers, in the fuzz build. */
static int sandbox_seccomp_sockets(scmp_filter_ctx ctx)
{
    int r = 0;
    for (int f = 0; f < AF_MAX && r == 0; f++)
        if (f != AF_INET && f != AF_INET6 && f != AF_NETLINK)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, INT_BITS, (scmp_datum_t)f));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, INT_BITS, AF_NETLINK),
                             SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE, 0));
    /* stream and datagram only (the type's low bits; flags above) */
    static const int inet[] = {AF_INET, AF_INET6};
    for (size_t i = 0; i < ARRAY_SIZE(inet) && r == 0; i++)
        for (int t = 0; t < 16 && r == 0; t++)
            if (t != SOCK_STREAM && t != SOCK_DGRAM)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, INT_BITS, (scmp_datum_t)inet[i]),
                                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)t));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 0);
    return r;
}

static int sandbox_seccomp(struct err *err)
{
    static const int deny[] = {
        SCMP_SYS(mount),
        SCMP_SYS(umount2),
        SCMP_SYS(pivot_root),
        SCMP_SYS(chroot),
        SCMP_SYS(setns),
        SCMP_SYS(unshare),
        SCMP_SYS(ptrace),
        SCMP_SYS(process_vm_readv),
        SCMP_SYS(process_vm_writev),
        SCMP_SYS(kexec_load),
        SCMP_SYS(kexec_file_load),
        SCMP_SYS(init_module),
        SCMP_SYS(finit_module),
        SCMP_SYS(delete_module),
        SCMP_SYS(bpf),
        SCMP_SYS(perf_event_open),
        SCMP_SYS(keyctl),
        SCMP_SYS(add_key),
        SCMP_SYS(request_key),
        SCMP_SYS(reboot),
        SCMP_SYS(swapon),
        SCMP_SYS(swapoff),
        SCMP_SYS(acct),
        SCMP_SYS(quotactl),
        SCMP_SYS(settimeofday),
        SCMP_SYS(clock_settime),
        SCMP_SYS(clock_adjtime),
        SCMP_SYS(adjtimex),
        SCMP_SYS(open_by_handle_at),
        SCMP_SYS(name_to_handle_at),
        SCMP_SYS(userfaultfd),
        SCMP_SYS(fanotify_init), /* CAP_SYS_ADMIN: writable fds of what others open */
        SCMP_SYS(fanotify_mark),
        SCMP_SYS(quotactl_fd),
        SCMP_SYS(fsopen),
        SCMP_SYS(fsmount),
        SCMP_SYS(fsconfig),
        SCMP_SYS(fspick),
        SCMP_SYS(move_mount),
        SCMP_SYS(open_tree),
        SCMP_SYS(mount_setattr),
        SCMP_SYS(sethostname),
        SCMP_SYS(setdomainname),
        SCMP_SYS(iopl),
        SCMP_SYS(ioperm),
        SCMP_SYS(syslog),
        SCMP_SYS(vhangup),
        SCMP_SYS(pidfd_getfd),
        SCMP_SYS(kcmp),
        SCMP_SYS(io_uring_setup),
        SCMP_SYS(lookup_dcookie),
        SCMP_SYS(execve),
        SCMP_SYS(execveat),
        SCMP_SYS(personality),
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return err_set(err, ENOMEM, "seccomp filter");
    int r = 0;
    for (size_t i = 0; i < ARRAY_SIZE(deny) && r == 0; i++)
        if (deny[i] >= 0)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), deny[i], 0);
    /* new namespaces through clone; clone3 cannot be inspected, so it is
     * refused with ENOSYS and glibc falls back to clone for threads */
    static const unsigned long ns_flags[] = {CLONE_NEWNS,    CLONE_NEWUSER, CLONE_NEWNET,
                                             CLONE_NEWPID,   CLONE_NEWIPC,  CLONE_NEWUTS,
                                             CLONE_NEWCGROUP};
    for (size_t i = 0; i < ARRAY_SIZE(ns_flags) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    /* Syscalls newer than this libseccomp are not in the list above, and
     * some clear what it holds (open_tree_attr, 467, clones a mount with
     * its read-only flag cleared): ENOSYS for every number it does not
     * know, as for a kernel without them (glibc falls back). */
    for (int nr = 0; nr < 1024 && r == 0; nr++) {
        char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
        if (!name)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
        free(name);
    }
    /* no new process: threads only (fork, vfork and clone without
     * CLONE_THREAD refused). A child would outlive the helper (no
     * PDEATHSIG) and could signal whatever reuses the helper's pid. */
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fork), 0);
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(vfork), 0);
    if (r == 0)
        r = sandbox_seccomp_signals(ctx);
    if (r == 0)
        r = sandbox_seccomp_others(ctx);
    if (r == 0)
        r = sandbox_seccomp_sockets(ctx);
    /* Filesystem ioctls: with CAP_SYS_ADMIN (kept for unpacking) FIFREEZE
     * on any file freezes the whole filesystem for every process (and
     * stays frozen after the helper ends), EXT4_IOC_SHUTDOWN and
     * XFS_IOC_GOINGDOWN kill it, FS_IOC_SETFSLABEL renames it: the 'X',
     * 'f' and 0x94 families are refused; unpacking uses none. */
    static const unsigned fs_ioctl_types[] = {'X', 'f', 0x94};
    for (size_t i = 0; i < ARRAY_SIZE(fs_ioctl_types) && r == 0; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00, fs_ioctl_types[i] << 8));
    /* device nodes: fifos and overlayfs whiteouts (char 0/0) only. The
     * mode and dev arguments: mknodat's follow its dirfd, mknod's do not */
    static const struct {
        int nr;
        unsigned mode_arg;
    } mknods[] = {{SCMP_SYS(mknod), 1}, {SCMP_SYS(mknodat), 2}};
    for (size_t i = 0; i < ARRAY_SIZE(mknods) && r == 0; i++) {
        unsigned a = mknods[i].mode_arg;
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), mknods[i].nr, 1,
                             SCMP_CMP(a, SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK));
        if (r == 0)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), mknods[i].nr, 2,
                                 SCMP_CMP(a, SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR),
                                 SCMP_CMP(a + 1, SCMP_CMP_NE, 0, 0));
    }
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    return r < 0 ? err_set(err, -r, "seccomp filter") : 0;
}

/* ppid: the daemon, checked once the ids are changed (0: not checked) */
static int sandbox(const char *store, pid_t ppid, struct err *err)
{
    if (geteuid() == 0) {
        int r = sandbox_mounts(store, err);
        if (r == 0)
            r = sandbox_caps(ppid, err);
        if (r < 0)
            return r;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return err_set(err, errno, "no_new_privs");
    return sandbox_seccomp(err);
}

static int auth_from(json_t *a, struct image_auth *ret)
{
    char **f[] = {(char **)&ret->username,       (char **)&ret->password,
                  (char **)&ret->auth,           (char **)&ret->server_address,
                  (char **)&ret->identity_token, (char **)&ret->registry_token};
    static const char *const keys[] = {"username",       "password",       "auth",
                                       "server_address", "identity_token", "registry_token"};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        const char *s = json_string_value(json_object_get(a, keys[i]));
        if (s && !(*f[i] = strdup(s)))
            return -ENOMEM;
    }
    return 0;
}

static int limits_from(json_t *j, struct image_limits *ret)
{
    const char *hex = json_string_value(j);
    if (!hex || strlen(hex) != 2 * sizeof(*ret))
        return -EINVAL;
    unsigned char *p = (unsigned char *)ret;
    for (size_t i = 0; i < sizeof(*ret); i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -EINVAL;
        p[i] = (unsigned char)v;
    }
    return 0;
}

static int config_from(json_t *c, struct image_service_shared *sh)
{
    int r = 0;
    sh->concurrency = (unsigned)json_integer_value(json_object_get(c, "concurrency"));
    if (sh->concurrency == 0 || sh->concurrency > 32)
        sh->concurrency = 3;
    r |= strv_from(json_object_get(c, "mirrors"), &sh->mirrors, &sh->n_mirrors);
    r |= strv_from(json_object_get(c, "insecure"), &sh->insecure, &sh->n_insecure);
    r |= strv_from(json_object_get(c, "mirror_only"), &sh->mirror_only, &sh->n_mirror_only);
    sh->certs_dir = dup_str(c, "certs_dir");
    sh->no_origin = json_is_true(json_object_get(c, "no_origin"));
    sh->os = dup_str(c, "os");
    sh->arch = dup_str(c, "arch");
    sh->variant = dup_str(c, "variant");
    r |= limits_from(json_object_get(c, "limits"), &sh->limits);
    return r || !sh->os || !sh->arch ? -EINVAL : 0;
}

static int report_error(int fd, const struct err *err)
{
    return send_json(fd,
                     json_pack("{s:{s:i,s:s,s:b}}", "error", "code", err->code ? err->code : EIO,
                               "msg", err->msg, "nosys", err->no_sys || !err->code));
}

/* ---- the sandbox under attack (tests only) ------------------------------------ */

/* `kinglet image-pull --test-attack=STEP[,STEP...] STORE`: sets the sandbox
 * up for STORE exactly as a helper does, then runs each step as attacker
 * code taken over through a parser bug would, printing "STEP ok" or
 * "STEP ERRNONAME". The daemon never passes arguments to its helper, and
 * whoever runs this runs it with their own privileges, less the sandbox:
 * it proves what the sandbox holds, and gives nobody anything. Steps that
 * attack the daemon through the helper's channel run in a helper the
 * daemon started, with the steps in KINGLET_TEST_HELPER_ATTACK. */
static int attack_step(const char *step)
{
    char verb[32];
    const char *arg = strchr(step, ':');
    snprintf(verb, sizeof(verb), "%.*s", (int)(arg ? arg - step : (ptrdiff_t)strlen(step)), step);
    arg = arg ? arg + 1 : "";
    long n = strtol(arg, NULL, 10);
    int fd = -1, r = 0;
    if (strcmp(verb, "connect-unix") == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", arg);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        r = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    } else if (strcmp(verb, "connect-unix-hi") == 0) {
        /* the family with bits above the int the kernel reads */
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", arg);
        fd = (int)syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        r = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    } else if (strcmp(verb, "fanotify") == 0) {
        /* a mark on the filesystem of the file ARG: an O_RDWR descriptor
         * of ARG when someone else opens it, written (only ARG's) */
        struct stat want, got;
        fd = (int)syscall(SYS_fanotify_init, FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDWR);
        r = fd < 0 || stat(arg, &want) < 0
                ? -1
                : (int)syscall(SYS_fanotify_mark, fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
                               (uint64_t)FAN_OPEN, AT_FDCWD, arg);
        for (int done = r; done == 0;) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            struct fanotify_event_metadata ev;
            r = -1;
            errno = ETIMEDOUT;
            if (poll(&pfd, 1, 30000) != 1 || read(fd, &ev, sizeof(ev)) < (ssize_t)sizeof(ev))
                break;
            if (ev.fd >= 0 && fstat(ev.fd, &got) == 0 && got.st_dev == want.st_dev &&
                got.st_ino == want.st_ino) {
                r = pwrite(ev.fd, "PWNED", 5, 0) == 5 ? 0 : -1;
                done = 1;
            }
            if (ev.fd >= 0)
                close(ev.fd);
        }
    } else if (strcmp(verb, "open-tree-attr") == 0) {
        /* a detached copy of ARG's directory, read-only cleared (syscall
         * 467, newer than libseccomp), and ARG written through it */
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", arg);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
        int t =
            (int)syscall(467, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC, &rw, sizeof(rw));
        fd = t < 0 ? -1 : openat(t, slash ? slash + 1 : arg, O_WRONLY | O_CLOEXEC);
        r = fd < 0 ? -1 : pwrite(fd, "PWNED", 5, 0) == 5 ? 0 : -1;
        if (t >= 0)
            close(t);
    } else if (strcmp(verb, "await") == 0) {
        /* the test's go-ahead: it opens the fifo ARG (made by a "fifo"
         * step) for writing; until then the open blocks */
        fd = open(arg, O_RDONLY | O_CLOEXEC);
        r = fd < 0 ? -1 : 0;
    } else if (strcmp(verb, "write") == 0) {
        fd = open(arg, O_WRONLY | O_CLOEXEC);
        r = fd < 0 ? -1 : pwrite(fd, "PWNED", 5, 0) == 5 ? 0 : -1;
    } else if (strcmp(verb, "fsfreeze") == 0) {
        /* the filesystem of ARG frozen (CAP_SYS_ADMIN) and thawed at once */
        fd = open(arg, O_RDONLY | O_CLOEXEC);
        r = fd < 0 ? -1 : ioctl(fd, FIFREEZE, 0);
        if (r == 0)
            ioctl(fd, FITHAW, 0);
    } else if (strcmp(verb, "socketpair") == 0) {
        int sv[2];
        if ((r = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) == 0) {
            close(sv[0]);
            close(sv[1]);
        }
    } else if (strcmp(verb, "tcp") == 0 || strcmp(verb, "udp") == 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)n)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = socket(AF_INET, (verb[0] == 't' ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
        r = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    } else if (strcmp(verb, "raw") == 0) {
        fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
        r = fd < 0 ? -1 : 0;
    } else if (strcmp(verb, "resolve") == 0) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(arg, "80", &hints, &res);
        if (g == 0)
            freeaddrinfo(res);
        else
            errno = g == EAI_SYSTEM ? errno : ENOENT;
        r = g == 0 ? 0 : -1;
    } else if (strcmp(verb, "kill") == 0) {
        const char *sig = strchr(arg, ':');
        r = kill((pid_t)n, sig ? atoi(sig + 1) : SIGKILL);
    } else if (strcmp(verb, "tkill") == 0) {
        r = (int)syscall(SYS_tkill, (pid_t)n, SIGKILL);
    } else if (strcmp(verb, "tgkill") == 0) {
        r = (int)syscall(SYS_tgkill, (pid_t)n, (pid_t)n, SIGKILL);
    } else if (strcmp(verb, "pidfd-kill") == 0) {
        fd = pidfd_open((pid_t)n, 0);
        r = fd < 0 ? -1 : pidfd_send_signal(fd, SIGKILL, NULL, 0);
    } else if (strcmp(verb, "acquire-flood") == 0) {
        /* over a helper's channel to its job thread (fd 3; see
         * KINGLET_TEST_HELPER_ATTACK): ARG acquires of one layer, each
         * answered; one it is told to build is reported failed at once,
         * so that it can be asked for again */
        static const char id[] =
            "sha256:f100df100df100df100df100df100df100df100df100df100df100df100df1f1";
        struct buf in = {0};
        for (long i = 0; i < n && r == 0; i++) {
            r = send_json(HELPER_FD, json_pack("{s:s}", "acquire", id));
            char *line = NULL;
            size_t used = 0;
            ssize_t got = 1;
            while (r == 0 && !(line = next_line(&in, &used)) && (got = fill(HELPER_FD, &in)) > 0)
                ;
            if (r == 0 && !line)
                r = got < 0 ? (int)got : -EPIPE;
            if (r < 0)
                break;
            json_t *m = json_loads(line, 0, NULL);
            json_int_t a = json_integer_value(json_object_get(m, "r"));
            json_decref(m);
            buf_consume(&in, used);
            if (a == 0)
                r = send_json(HELPER_FD, json_pack("{s:s,s:b,s:i,s:i}", "built", id, "ok", 0,
                                                   "bytes", 0, "inodes", 0));
        }
        buf_free(&in);
        if (r < 0) {
            errno = -r;
            r = -1;
        }
    } else if (strcmp(verb, "prlimit") == 0) {
        /* another process's (same uid) open files down to 1 */
        struct rlimit rl = {1, 1};
        r = prlimit((pid_t)n, RLIMIT_NOFILE, &rl, NULL);
    } else if (strcmp(verb, "setpriority") == 0) {
        r = setpriority(PRIO_PROCESS, (id_t)n, 19);
    } else if (strcmp(verb, "setpriority-user") == 0) {
        r = setpriority(PRIO_USER, (id_t)n, 19);
    } else if (strcmp(verb, "sched-setaffinity") == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        r = sched_setaffinity((pid_t)n, sizeof(set), &set);
    } else if (strcmp(verb, "sched-setscheduler") == 0) {
        struct sched_param sp = {.sched_priority = 0};
        r = sched_setscheduler((pid_t)n, SCHED_IDLE, &sp);
    } else if (strcmp(verb, "sched-setparam") == 0) {
        struct sched_param sp = {.sched_priority = 0};
        r = sched_setparam((pid_t)n, &sp);
    } else if (strcmp(verb, "sched-setattr") == 0) {
        /* struct sched_attr of the kernel, version 0 (48 bytes) */
        uint32_t attr[12] = {48, SCHED_IDLE};
        r = (int)syscall(SYS_sched_setattr, (pid_t)n, attr, 0);
    } else if (strcmp(verb, "ioprio") == 0) {
        /* IOPRIO_WHO_PROCESS, IOPRIO_CLASS_IDLE */
        r = (int)syscall(SYS_ioprio_set, 1, (pid_t)n, 3 << 13);
    } else if (strcmp(verb, "migrate-pages") == 0) {
        unsigned long nodes = 1;
        r = (int)syscall(SYS_migrate_pages, (pid_t)n, 8 * sizeof(nodes), &nodes, &nodes);
    } else if (strcmp(verb, "setown") == 0) {
        r = fcntl(HELPER_FD, F_SETOWN, (pid_t)n);
    } else if (strcmp(verb, "fork") == 0) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        r = pid < 0 ? -1 : waitpid(pid, NULL, 0) < 0 ? -1 : 0;
    } else if (strcmp(verb, "mknod-b") == 0 || strcmp(verb, "mknod-c") == 0) {
        r = mknod(arg, (verb[6] == 'b' ? S_IFBLK : S_IFCHR) | 0600, makedev(8, 0));
    } else if (strcmp(verb, "mknodat-b") == 0 || strcmp(verb, "mknodat-c") == 0) {
        r = mknodat(AT_FDCWD, arg, (verb[8] == 'b' ? S_IFBLK : S_IFCHR) | 0600, makedev(8, 0));
    } else if (strcmp(verb, "whiteout") == 0) {
        r = mknodat(AT_FDCWD, arg, S_IFCHR, makedev(0, 0));
    } else if (strcmp(verb, "fifo") == 0) {
        r = mknodat(AT_FDCWD, arg, S_IFIFO | 0600, 0);
    } else if (strcmp(verb, "open-dev") == 0) {
        fd = open(arg, O_RDWR | O_CLOEXEC);
        r = fd < 0 ? -1 : 0;
    } else {
        errno = EINVAL;
        r = -1;
    }
    int e = errno;
    if (fd >= 0)
        close(fd);
    printf("%s %s\n", verb, r < 0 ? strerrorname_np(e) : "ok");
    return 0;
}

static void attack_steps(const char *steps)
{
    char *copy = strdup(steps), *save = NULL;
    for (char *s = copy ? strtok_r(copy, ",", &save) : NULL; s; s = strtok_r(NULL, ",", &save))
        attack_step(s);
    free(copy);
    fflush(stdout);
}

static int test_attack(const char *steps, const char *store)
{
    struct err err = {0};
    if (sandbox(store, 0, &err) < 0) {
        fprintf(stderr, "kinglet image-pull: sandbox: %s\n", err.msg);
        return 1;
    }
    attack_steps(steps);
    _exit(0); /* as the helper ends: no exit handlers (a leak check forks) */
}

#ifdef KINGLET_SANITIZERS
void __sanitizer_set_report_fd(void *fd);

/* A sanitizer build (tests): the sandbox leaves no file the sanitizer's
 * log_path could be opened in, and a sanitizer that cannot open its log at
 * its first report (or any line it prints) dies. The log is opened here,
 * before the sandbox, where the sanitizer would open it: log_path.PID. */
static void sanitizer_log_before_sandbox(void)
{
    const char *opts[] = {getenv("TSAN_OPTIONS"), getenv("ASAN_OPTIONS")};
    for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
        const char *at = opts[i] ? strstr(opts[i], "log_path=") : NULL;
        if (!at)
            continue;
        at += strlen("log_path=");
        size_t n = strcspn(at, ": ");
        char path[PATH_MAX];
        if (n == 0 || (n == 6 && (!strncmp(at, "stderr", 6) || !strncmp(at, "stdout", 6))) ||
            snprintf(path, sizeof(path), "%.*s.%d", (int)n, at, (int)getpid()) >= (int)sizeof(path))
            continue;
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            __sanitizer_set_report_fd((void *)(intptr_t)fd);
        return;
    }
}
#endif

int image_helper_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* killed with the job thread that started it, hence with the daemon */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strncmp(argv[1], "--test-attack=", 14) == 0)
        return test_attack(argv[1] + 14, argv[2]);
    struct buf in = {0};
    char *line = NULL;
    size_t used;
    ssize_t got = 1;
    while (!(line = next_line(&in, &used)) && (got = fill(HELPER_FD, &in)) > 0)
        ;
    if (!line) {
        fprintf(stderr,
                "kinglet image-pull: an internal helper of the daemon: no request on fd 3\n");
        return 2;
    }
    json_t *req = json_loads(line, 0, NULL);
    buf_free(&in);
    struct store st;
    struct image_service_shared sh = {0};
    struct job job = {.r = 0, .cancel_fd = -1};
    struct helper_chan chan = {.fd = HELPER_FD};
    pthread_mutex_init(&chan.mu, NULL);
    pthread_cond_init(&chan.cond, NULL);
    pthread_mutex_init(&job.mu, NULL);
    struct err *err = &job.err;
    const char *kind = json_string_value(json_object_get(req, "kind"));
    const char *ref = json_string_value(json_object_get(req, "ref"));
    const char *store = json_string_value(json_object_get(req, "store"));
    json_int_t ppid = json_integer_value(json_object_get(req, "ppid"));
    int r = 0;
    if (!kind || !ref || !store || config_from(json_object_get(req, "config"), &sh) < 0) {
        r = err_set(err, EINVAL, "image helper: bad request");
        goto out;
    }
    if (getppid() != (pid_t)ppid) {
        r = err_set(err, ESRCH, "image helper: the daemon is gone");
        goto out;
    }
    log_set_level((enum log_level)json_integer_value(json_object_get(req, "log_level")));
    log_set_json(json_is_true(json_object_get(req, "log_json")));
    job.kind = strcmp(kind, "pull") == 0 ? JOB_PULL : JOB_IMPORT;
    job.ref_str = strdup(ref);
    job.sh = &sh;
    job.remote = &chan;
    sh.st = &st;
    if (!job.ref_str || auth_from(json_object_get(req, "auth"), &job.auth) < 0) {
        r = err_set(err, ENOMEM, "image helper");
        goto out;
    }
    if ((r = job_cancel_init(&job)) < 0) {
        r = err_set(err, -r, "image helper: cancel eventfd");
        goto out;
    }
    if ((r = store_attach(&st, store, err)) < 0)
        goto out;
#ifdef KINGLET_SANITIZERS
    sanitizer_log_before_sandbox();
#endif
    if ((r = sandbox(store, (pid_t)ppid, err)) < 0) {
        err_wrap(err, "image helper sandbox");
        goto out;
    }
    /* Tests only: the steps of --test-attack, run by a helper the daemon
     * started, as attacker code that took it over would, on its channel
     * (acquire-flood). Whoever sets the daemon's environment is root
     * already; the steps get nothing the sandbox does not allow. */
    const char *attack = getenv("KINGLET_TEST_HELPER_ATTACK");
    if (attack) {
        attack_steps(attack);
        _exit(1);
    }
    if (job.kind == JOB_PULL) {
        if ((r = image_ref_parse(ref, &job.ref, err)) < 0)
            goto out;
        job_pull_run(&job);
    } else {
        job_import_run(&job);
    }
    r = job.r;
    if (r == 0) {
        json_t *a = json_array();
        for (size_t i = 0; i < job.n_results; i++)
            json_array_append_new(a, store_record_to_json(job.results[i]));
        r = send_json(HELPER_FD, json_pack("{s:o}", "result", a));
        fflush(stderr);
        _exit(r < 0 ? 1 : 0);
    }
out:
    report_error(HELPER_FD, err);
    /* The process ends here and the kernel frees the rest: no exit
     * handlers (a sanitizer's leak check would need ptrace, which the
     * filter refuses). */
    fflush(stderr);
    _exit(1);
}
