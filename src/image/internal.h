/* image module internals: shared between the files of src/image only. */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "image/image.h"

/* ---- limits on what registries and archives can make us allocate -------- */
#define IMAGE_MANIFEST_MAX   (4u << 20)
#define IMAGE_CONFIG_MAX     (8u << 20)
#define IMAGE_LAYERS_MAX     256
#define IMAGE_INDEX_MAX      1024
#define IMAGE_TOKEN_MAX      (64u << 10)
#define IMAGE_ERROR_BODY_MAX 4096

/* Layers of all the images of one archive, a layer that two images share
 * counted twice: what an import may ask the daemon's snapshot table for. */
#define IMAGE_IMPORT_LAYERS_MAX (16 * IMAGE_LAYERS_MAX)

/* ---- digests (digest.c, on base/sha256.c) -------------------------------- */
struct hasher;
struct hasher *hasher_new(void);
void hasher_free(struct hasher *h);
void hasher_update(struct hasher *h, const void *data, size_t len);
/* Writes "sha256:<hex>" (72 bytes with the NUL). */
void hasher_final(struct hasher *h, char out[72]);
void digest_of(const void *data, size_t len, char out[72]);
/* chain_id[i] = i == 0 ? diff_id[0] : sha256(chain_id[i-1] + " " + diff_id[i]) */
int image_chain_ids(char *const *diff_ids, size_t n, char ***ret);

/* ---- manifests (manifest.c, pure) --------------------------------------- */
#define MT_OCI_INDEX       "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST    "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_ACCEPT          MT_OCI_INDEX ", " MT_DOCKER_LIST ", " MT_OCI_MANIFEST ", " MT_DOCKER_MANIFEST

struct image_descriptor {
    char *media_type;
    char *digest;
    uint64_t size;
    char *os, *arch, *variant; /* index entries only */
};

enum image_manifest_kind { IMAGE_MANIFEST_INDEX, IMAGE_MANIFEST_IMAGE };

struct image_manifest {
    enum image_manifest_kind kind;
    struct image_descriptor config; /* IMAGE only */
    struct image_descriptor *descs; /* layers (IMAGE) or manifests (INDEX) */
    size_t n_descs;
};

/* content_type may be NULL (the document's mediaType decides). Schema 1 is
 * refused with -EINVAL and a clear message. */
int image_manifest_parse(const char *content_type, const void *data, size_t len,
                         struct image_manifest **ret, struct err *err);
void image_manifest_free(struct image_manifest *m);
/* Picks the entry for os/arch/variant (variant NULL = any, preferring none);
 * -ENOENT listing the platforms offered when none fits. */
int image_index_select(const struct image_manifest *idx, const char *os, const char *arch,
                       const char *variant, const struct image_descriptor **ret, struct err *err);

struct image_config_info {
    char *user;
    char *os, *arch;
    char **diff_ids;
    size_t n_diff_ids;
};
int image_config_parse(const void *data, size_t len, struct image_config_info *ret,
                       struct err *err);
void image_config_info_clear(struct image_config_info *c);

/* ---- certificate names (tlsname.c, no I/O) ------------------------------- */

struct mbedtls_x509_crt;
/* Does certificate name pat (plen bytes, not NUL-terminated) match DNS
 * name host, as curl and OpenSSL match: exactly, or as a wildcard that is
 * the whole left-most label followed by at least two labels? */
bool tls_name_matches(const char *pat, size_t plen, const char *host);
/* Does one of the leaf's names (DNS subjectAltNames, else its CN) match
 * host by tls_name_matches? */
bool tls_leaf_name_ok(const struct mbedtls_x509_crt *leaf, const char *host);
/* The nameConstraints of CA ca against the leaf's DNS and IP names and the
 * name the connection asked for (host, a DNS name, or ip/iplen, 4 or 16
 * bytes; either may be NULL): 0 within them (or none), -EPERM outside,
 * -EINVAL for an extension that cannot be read or a subtree with
 * minimum/maximum. */
int tls_name_constraints_check(const struct mbedtls_x509_crt *ca,
                               const struct mbedtls_x509_crt *leaf, const char *host,
                               const uint8_t *ip, size_t iplen);

/* ---- layer unpacking (unpack.c, blocking: worker threads only) ---------- */

/* A pull source of raw (possibly compressed) layer bytes. *ret_len == 0 at
 * the end. The buffer stays valid until the next call. */
struct layer_source {
    int (*read)(void *ctx, const void **ret_buf, size_t *ret_len, struct err *err);
    void *ctx;
};

struct layer_expect {
    const char *digest;                /* of the raw bytes, NULL = unchecked */
    int64_t size;                      /* of the raw bytes, -1 = unchecked */
    const char *diff_id;               /* of the uncompressed tar, NULL = unchecked */
    const struct image_limits *limits; /* the service's, set by layer_build; NULL = none */
};

struct layer_stats {
    uint64_t bytes;  /* bytes allocated to regular files, as du counts */
    uint64_t inodes; /* entries created */
    char diff_id[72];
    char digest[72]; /* of the raw bytes */
    uint64_t raw_size;
};

/* Extracts the tar stream from src into rootfd (an empty directory),
 * verifying digests at the end. On failure the directory holds garbage the
 * caller removes. */
int image_layer_unpack(int rootfd, struct layer_source *src, const struct layer_expect *expect,
                       const atomic_bool *cancel, struct layer_stats *ret, struct err *err);

/* ---- registry protocol parsing (regparse.c, pure) ------------------------ */

/* Sets an error whose message already says everything (a registry's or
 * the HTTP client's words, a refusal): no strerror text appended. Returns -code. */
int reg_err_plain(struct err *err, int code, const char *fmt, ...) _printf_(3, 4);

struct reg_challenge {
    bool bearer, basic;
    char realm[1024], service[1024], scope[1024]; /* cut to fit */
};
/* Parses a WWW-Authenticate value; unknown schemes leave both flags false. */
void reg_challenge_parse(const char *h, struct reg_challenge *ret);
/* The token of a token endpoint's JSON answer ("token", else
 * "access_token"), malloc'ed. -EACCES when there is none or it is not
 * printable ASCII, -EFBIG past IMAGE_TOKEN_MAX, -ENOMEM. */
int reg_token_parse(const void *data, size_t len, char **ret, struct err *err);
/* A one-line summary of an error body: "CODE: message[; CODE: message]"
 * from the distribution API's errors array (at most 4 errors, 64 bytes of
 * a code and 200 of a message), control and non-ASCII bytes escaped as
 * \xNN; empty for anything else, which is never echoed. Always
 * NUL-terminated. */
void reg_error_message(const void *body, size_t len, char *out, size_t outsz);

struct reg_url {
    bool https;
    char host[256]; /* lowercase; an IPv6 literal keeps its brackets */
    unsigned port;  /* the scheme's default when absent */
};
/* Splits an absolute http(s) URL. -EPROTONOSUPPORT for another scheme,
 * -EINVAL for a malformed authority. */
int reg_url_split(const char *url, struct reg_url *ret);
/* May a request to `from` follow a redirect to `to`? -EPROTO (reason in
 * err) for a scheme other than http(s), or https -> http unless allow_http
 * (the registry is configured insecure). *ret_same_origin: same scheme,
 * host and port, the only case in which credentials go along. */
int reg_redirect_check(const char *from, const char *to, bool allow_http, bool *ret_same_origin,
                       struct err *err);
/* May the registry at registry_url send its credentials to token realm
 * `realm`? Only over https (plain http when allow_http), only on the
 * registry's port or the realm scheme's default one, and only to the
 * registry's own host or, both over https, a host of the registry's parent
 * domain (registry-1.docker.io -> auth.docker.io); never to another IP
 * address. */
bool reg_realm_gets_credentials(const char *registry_url, const char *realm, bool allow_http);

/* ---- registry client (registry.c, blocking: worker threads only) -------- */

struct reg_endpoint {
    char *base; /* "https://host:port[/prefix]" without trailing slash */
    char *host; /* host[:port] of base, for certs.d lookups */
    bool skip_verify;
    bool mirror;
    bool send_auth; /* credentials belong to the origin only */
};

struct reg_session;
struct reg_stream;

struct reg_options {
    const char *certs_dir;
    const atomic_bool *cancel;
    /* readable once cancel is set (job_cancel): a backoff between two
     * attempts waits on it, so a cancelled pull ends at once; -1: none */
    int cancel_fd;
    unsigned progress_timeout_ms, min_rate; /* struct image_limits' */
};

/* A session talks to one repository over a list of endpoints, caching the
 * bearer token per endpoint. */
int reg_session_new(const struct reg_endpoint *eps, size_t n_eps, const char *repo,
                    const struct image_auth *auth, const struct reg_options *opt,
                    struct reg_session **ret, struct err *err);
void reg_session_free(struct reg_session *s);
/* GET /v2/<repo>/manifests/<reference>, trying endpoints in order; the index
 * of the endpoint that answered becomes the preferred one for blobs. */
int reg_get_manifest(struct reg_session *s, const char *reference, struct buf *ret_body,
                     char **ret_content_type, struct err *err);
/* GET a small blob into memory (at most max bytes). */
int reg_get_blob(struct reg_session *s, const char *digest, size_t max, struct buf *ret,
                 struct err *err);
/* Opens a blob for streaming. */
int reg_blob_open(struct reg_session *s, const char *digest, struct reg_stream **ret,
                  struct err *err);
int reg_stream_read(void *stream, const void **ret_buf, size_t *ret_len, struct err *err);
void reg_stream_free(struct reg_stream *st);
/* True if the error is worth a retry (network, 5xx, 429). */
bool reg_err_transient(const struct err *err);

/* Builds the endpoint list for a registry host from the configuration:
 * mirrors first, then the origin (https, then http when insecure). */
int reg_endpoints_for(const char *host, const char *const *mirrors, size_t n_mirrors,
                      const char *const *insecure, size_t n_insecure, bool no_origin,
                      struct reg_endpoint **ret, size_t *ret_n, struct err *err);
void reg_endpoints_free(struct reg_endpoint *eps, size_t n);

/* ---- store (store.c) ---------------------------------------------------- */

struct snap_ref {
    char *chain_id;
    unsigned refs; /* records in the index + holds of work in progress */
    bool busy;     /* being unpacked right now */
    bool present;  /* snapshots/<hex> exists */
    uint64_t bytes, inodes;
};

/* State shared by the loop and worker threads, under mu. */
struct store {
    int root_fd; /* <root>/image */
    char *root;
    int lock_fd;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct snap_ref *snaps;
    size_t n_snaps, cap_snaps;
    int *watch_fds; /* eventfds of threads that poll for the table's changes */
    size_t n_watch;
};

int store_open(struct store *st, const char *root, struct err *err);
/* Opens the store at image_root (<root>/image) for the helper process: no
 * lock (the daemon holds it), no cleanup, no scan of the snapshots. */
int store_attach(struct store *st, const char *image_root, struct err *err);
/* Non-blocking store_snap_acquire: 1 present, 0 build it, -EAGAIN while
 * another job builds it (no reference taken then), -ENOMEM. */
int store_snap_try_acquire(struct store *st, const char *chain_id);
void store_close(struct store *st);
/* Unique temporary directory under tmp/; returns its name (relative to
 * root_fd) in ret. */
int store_tmpdir(struct store *st, char ret[64], struct err *err);
/* Removes what process pid left under tmp/ (a helper that died). */
void store_tmp_remove_pid(struct store *st, pid_t pid);
int store_blob_write(struct store *st, const char *digest, const void *data, size_t len,
                     struct err *err);
int store_blob_read(struct store *st, const char *digest, size_t max, char **ret, size_t *ret_len);

/* Layer coordination (any thread). store_snap_acquire takes a reference on
 * chain_id: returns 1 if the snapshot exists, 0 if the caller must build it
 * (it is then marked busy; finish with store_snap_built), and waits while
 * another thread builds it. */
int store_snap_acquire(struct store *st, const char *chain_id);
void store_snap_built(struct store *st, const char *chain_id, bool ok, uint64_t bytes,
                      uint64_t inodes);
void store_snap_release(struct store *st, const char *chain_id);
/* For a thread that waits on the table and on a socket at once (a pull
 * helper's job thread): the eventfd fd is written on every change that may
 * end a wait, a layer built (or failed) and store_snap_wake. Unwatch
 * before closing fd. -ENOMEM. */
int store_snap_watch(struct store *st, int fd);
void store_snap_unwatch(struct store *st, int fd);
/* Wakes every waiter (a job was cancelled: its thread looks at its flag). */
void store_snap_wake(struct store *st);
/* A reference without waiting (records in the index). */
void store_snap_ref(struct store *st, const char *chain_id);
bool store_snap_present(struct store *st, const char *chain_id);
/* Removes blobs whose digest is not in keep (blocking). */
void store_blob_gc(struct store *st, char *const *keep, size_t n_keep);
/* Moves an unpacked tmp dir to snapshots/<hex>. */
int store_snap_commit(struct store *st, const char *tmpname, const char *chain_id,
                      const struct layer_stats *stats, struct err *err);
/* Makes everything unpacked so far durable (syncfs): before a record that
 * names new snapshots is handed to the loop. */
int store_sync(struct store *st, struct err *err);
/* Removes snapshot directories nobody references (blocking). */
void store_snap_gc(struct store *st);
void store_usage(struct store *st, uint64_t *bytes, uint64_t *inodes);

/* Records (de)serialisation. */
/* Layers a container (the holder) keeps in use, whatever happens to images. */
struct image_hold {
    char *holder;
    char *image_id; /* an image volume's image, kept from removal; NULL: none */
    char **chain_ids;
    size_t n_layers;
};
void image_hold_free(struct image_hold *h);
int store_records_load(struct store *st, struct image_info ***ret, size_t *ret_n,
                       struct image_hold ***ret_holds, size_t *ret_n_holds, struct err *err);
/* One record as JSON, and back (validated: digests, layers). */
json_t *store_record_to_json(const struct image_info *img);
struct image_info *store_record_from_json(json_t *o);
char *store_records_dump(struct image_info *const *imgs, size_t n, struct image_hold *const *holds,
                         size_t n_holds);
int store_records_write(struct store *st, const char *json, struct err *err);
void image_info_free(struct image_info *img);

/* ---- service internals (service.c, pull.c, import.c) -------------------- */

struct layer_job_ctx;

struct helper_chan;

struct job {
    struct image_service *svc; /* NULL in the helper process */
    const struct image_service_shared *sh;
    struct helper_chan *remote; /* in the helper: the daemon's end of the snapshot table */
    enum { JOB_PULL, JOB_IMPORT } kind;
    char *ref_str; /* pull: the reference as given; import: the path */
    struct image_ref ref;
    struct image_auth auth; /* owned copies */
    /* who waits for the result (the loop's only): concurrent pulls of one
     * reference with the same credentials share one job; it is cancelled
     * when every waiter has given up (image_pull_abandon) */
    struct job_waiter {
        image_pull_cb cb;
        image_progress_fn progress; /* NULL: the result only */
        void *data;
        bool gone;
    } * waiters;
    size_t n_waiters, n_gone;
    uv_thread_t thread;
    atomic_bool cancel;
    int cancel_fd; /* an eventfd job_cancel writes, -1 until job_cancel_init */
    bool joined;
    /* results, read on the loop once the thread has finished */
    int r;
    struct err err;
    struct image_info **results;
    size_t n_results;
    char **held; /* chain ids this job holds a reference on, each once */
    size_t n_held;
    size_t n_layers;    /* import: layers of its images so far */
    pthread_mutex_t mu; /* held, first error of the layer workers, rows */
    /* The layers' latest progress while a waiter watches it (the job
     * thread writes, the loop takes what changed): one row per layer, at
     * most JOB_ROWS_MAX, so a step the loop has not taken yet is replaced
     * by the next, never queued. */
    struct job_row {
        char digest[72], phase[16];
        uint64_t bytes, total;
        bool dirty;
    } * rows;
    size_t n_rows;
    bool rows_dirty;
    atomic_bool watched;
    struct job *next;
};

/* What the pull and import threads need from the service (read-only after
 * creation, safe from any thread). */
struct image_service_shared {
    struct store *st;
    unsigned concurrency;
    char **mirrors, **insecure;
    size_t n_mirrors, n_insecure;
    char *certs_dir;
    bool no_origin;
    char **mirror_only;
    size_t n_mirror_only;
    char *os, *arch, *variant;
    struct image_limits limits;
    image_progress_fn progress;
    void *progress_data;
};
const struct image_service_shared *image_service_shared(struct image_service *svc);

/* Pull and unpack threads run at a lower CPU priority than the loop thread,
 * so that on a busy node the loop keeps answering while layers inflate. */
void job_thread_background(void);
/* The job's cancel flag and the eventfd that wakes its waits: -errno. */
int job_cancel_init(struct job *job);
void job_cancel_close(struct job *job);
/* Sets the cancel flag and wakes job_backoff (any thread). */
void job_cancel(struct job *job);
/* Waits ms, or less if the job is cancelled meanwhile: -ECANCELED then,
 * else 0. */
int job_backoff(struct job *job, unsigned ms);
/* Waits ms on fd (an eventfd of job_cancel) or until it is readable:
 * -ECANCELED if it is (or cancel is set), 0 once ms passed. fd -1: a plain
 * sleep. */
int image_backoff(int fd, const atomic_bool *cancel, unsigned ms);
void job_pull_run(struct job *job);
void job_import_run(struct job *job);
int job_hold(struct job *job, const char *chain_id);
/* The snapshot table (store_snap_acquire, store_snap_built) of the daemon,
 * directly or, in the helper process, over its channel. */
int job_snap_acquire(struct job *job, const char *chain_id);
void job_snap_built(struct job *job, const char *chain_id, bool ok, uint64_t bytes,
                    uint64_t inodes);
/* Runs a pull or an import in a short-lived helper process (helper.c) and
 * fills job->r, job->err, job->results and job->held as job_pull_run or
 * job_import_run would. Blocking: the job's thread. */
void job_helper_run(struct job *job);
/* The helper's side of the snapshot table: the same answers as
 * store_snap_acquire (-EPIPE when the daemon is gone). Thread-safe. */
int helper_snap_acquire(struct helper_chan *c, const char *chain_id);
/* Progress of a layer (image_progress's phases), to the daemon's job. */
void helper_progress(struct helper_chan *c, const char *digest, const char *phase, uint64_t bytes,
                     uint64_t total);
/* Progress of a layer of job: to the daemon from a helper, else to the
 * service's progress function, if any. */
void job_progress(struct job *job, const char *digest, const char *phase, uint64_t bytes,
                  uint64_t total);
void helper_snap_built(struct helper_chan *c, const char *chain_id, bool ok, uint64_t bytes,
                       uint64_t inodes);
int job_add_result(struct job *job, struct image_info *img);
#define JOB_ROWS_MAX IMAGE_LAYERS_MAX
/* A layer's progress seen by the daemon's job thread: to the service's
 * progress function (the command line on the store) and, when a waiter
 * watches, into the job's rows for the loop (service.c). */
void job_progress_note(struct job *job, const struct image_progress *p);

/* Builds (or reuses) the snapshot of chain_id from the source that open()
 * gives; retried by the caller as it likes. Thread-safe, dedups concurrent
 * builds of the same chain id. */
struct layer_opener {
    int (*open)(void *ctx, struct layer_source *ret, struct err *err);
    void (*close)(void *ctx);
    void *ctx;
};
int layer_build(struct job *job, const char *chain_id, const struct layer_expect *expect,
                const struct layer_opener *op, unsigned attempts, struct layer_stats *ret_stats,
                struct err *err);
