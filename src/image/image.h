/* image: pulling, verifying, unpacking, storing and importing container
 * images.
 *
 * The module has two faces:
 *  - pure helpers (reference parsing, manifest parsing) usable anywhere;
 *  - an image service bound to one libuv loop. Every slow step of a pull
 *    (network, hashing, decompression, extraction, fsync) runs on threads the
 *    service owns; results are applied to the in-memory index on the loop
 *    thread, and queries on that index are cheap and synchronous.
 *
 * Store layout under <root>/image (see store.c for the crash-consistency
 * argument):
 *   lock                      flock(2): one service per store
 *   images.json               the image records, replaced atomically
 *   blobs/sha256/<hex>        manifests, indexes and configs
 *   snapshots/<chainid-hex>/  fs/ (the layer's diff, an overlayfs lowerdir)
 *                             and info.json; shared by every image
 *   tmp/                      work in progress, emptied at start
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "base/base.h"

/* ---- references (ref.c, pure) ------------------------------------------- */

#define IMAGE_REF_MAX 4096

/* A normalised reference: docker.io/library/busybox:latest. tag and digest
 * may each be NULL, not both (a bare name gets the tag "latest"). */
struct image_ref {
    char *domain; /* "docker.io", "registry.k8s.io", "127.0.0.1:5000" */
    char *path;   /* "library/busybox" */
    char *tag;    /* "latest" or NULL */
    char *digest; /* "sha256:<64 hex>" or NULL */
};

/* Parses and normalises s the way containerd and kubelet do. -EINVAL with the
 * reason in err for an invalid reference. */
int image_ref_parse(const char *s, struct image_ref *ret, struct err *err);
void image_ref_clear(struct image_ref *ref);
/* "domain/path" */
char *image_ref_name(const struct image_ref *ref);
/* "domain/path:tag", "domain/path@digest" or "domain/path:tag@digest". */
char *image_ref_string(const struct image_ref *ref);
/* True for "sha256:<64 lowercase hex>". */
bool image_digest_valid(const char *s);

/* ---- service ------------------------------------------------------------ */

/* Decompression bombs and full disks. A layer fails with EFBIG when its
 * tar stream grows past max_layer_ratio times the compressed bytes read so
 * far (never what the descriptor claims, which a hostile manifest sets at
 * will; never less than IMAGE_LAYER_RATIO_FLOOR; 0 = no limit), or when
 * its files hold more than max_layer_size bytes (0 = no limit): both are
 * checked as the stream inflates, so a small hostile layer stops long
 * before its digests could be checked at the end. A stream longer than its
 * descriptor says fails with EPROTO as soon as it passes that size. A
 * layer that would leave less than min_free bytes (or min_free percent of
 * the filesystem's size when min_free_pct) free fails with ENOSPC, as
 * does one that would leave less than min_free percent (5% when min_free
 * is a size) of the filesystem's inodes free. min_free 0 turns both
 * reserves off.
 *
 * The defaults keep kubelet out of DiskPressure: its default eviction
 * thresholds are imagefs.available 15% and nodefs.available 10% (the same
 * filesystem on most nodes), and its image garbage collection starts at
 * 85% use, so a pull never takes the image filesystem below 15% free. A
 * compressed layer rarely expands more than 10 times (text) and gzip at
 * most about 1032 times: 100 stops bombs at a tenth of their size. */
struct image_limits {
    uint64_t max_layer_size;
    uint64_t min_free;
    bool min_free_pct;
    unsigned max_layer_ratio;
    /* Registry transfers (image/http.c): every phase that waits for the
     * registry or a proxy (connect, TLS handshake, CONNECT, an answer's
     * head) ends within progress_timeout_ms, and a body must come at
     * min_rate bytes/s or faster over that long of waiting (0: any byte
     * is progress). */
    unsigned progress_timeout_ms;
    unsigned min_rate;
};
#define IMAGE_MIN_FREE_DEFAULT         15 /* percent */
#define IMAGE_MAX_LAYER_RATIO_DEFAULT  100
#define IMAGE_LAYER_RATIO_FLOOR        (64u << 20)
#define IMAGE_PROGRESS_TIMEOUT_DEFAULT 60000 /* ms: containerd's and kubelet's 1 min */
#define IMAGE_MIN_RATE_DEFAULT         1024  /* bytes/s */
#define IMAGE_LIMITS_DEFAULT                                                                       \
    ((struct image_limits){.min_free = IMAGE_MIN_FREE_DEFAULT,                                     \
                           .min_free_pct = true,                                                   \
                           .max_layer_ratio = IMAGE_MAX_LAYER_RATIO_DEFAULT,                       \
                           .progress_timeout_ms = IMAGE_PROGRESS_TIMEOUT_DEFAULT,                  \
                           .min_rate = IMAGE_MIN_RATE_DEFAULT})

/* One step of a layer of a pull: its blob digest, the bytes read so far of
 * total (the manifest's size) and the phase: "waiting" (with no digest:
 * the caller joined another caller's pull of the image), "downloading" (download, hashing and
 * unpacking stream together), "verifying" (all bytes read: digests checked, snapshot made durable),
 * "done", "exists" (already in the store), "failed". */
struct image_progress {
    const char *ref, *digest, *phase;
    uint64_t bytes, total;
};
typedef void (*image_progress_fn)(void *data, const struct image_progress *p);

struct image_config {
    const char *root;          /* daemon root; the store lives in <root>/image */
    unsigned pull_concurrency; /* layers downloaded at once per pull; 0 = 3 */
    struct image_limits limits;
    /* "HOST=URL" entries, tried in order before HOST itself. */
    const char *const *mirrors;
    size_t n_mirrors;
    /* "HOST[:PORT]" entries allowed plain HTTP and unverified TLS. */
    const char *const *insecure;
    size_t n_insecure;
    /* Directory of per-registry TLS material, <dir>/<host[:port]>/ca.crt,
     * client.cert, client.key (docker's certs.d layout). NULL = the
     * default /etc/kinglet/certs.d. */
    const char *certs_dir;
    bool no_origin_fallback; /* mirrors only, for every host that has mirrors */
    /* "HOST" entries pulled from their mirrors only (never the origin) */
    const char *const *mirror_only;
    size_t n_mirror_only;
    /* Platform to select from an index; NULL = linux / host arch. */
    const char *os, *arch, *variant;
    /* Per-layer progress of pulls (the command line's display; the daemon
     * sets none). Called from the pull's job thread, any thread. */
    image_progress_fn progress;
    void *progress_data;
};

/* The fields of CRI's AuthConfig. All borrowed, all optional. */
struct image_auth {
    const char *username, *password;
    const char *auth; /* base64("user:password") */
    const char *server_address;
    const char *identity_token; /* OAuth2 refresh token */
    const char *registry_token; /* bearer token sent to the registry as is */
};
/* -EINVAL (the field named in err, never its value) for a control byte in
 * any field, or a space or non-ASCII byte in auth or a token: what would
 * let a caller write headers or requests of its own. NULL is fine. */
int image_auth_check(const struct image_auth *a, struct err *err);

/* `kinglet image pull [--creds U[:P]] [--password-stdin] [--creds-file F]
 * [--auth B64] [--identity-token T] [--registry-token T] [--quiet] REF...`:
 * the options, shared by the path through the daemon and the one on the
 * store. --password-stdin reads stdin, --creds-file F; a password on the
 * command line (visible in ps) gets a warning on stderr. */
struct image_pull_opts {
    struct image_auth auth;
    bool have_auth;
    bool quiet;
    char *creds;  /* owns the username/password strings */
    char *secret; /* owns a password read from stdin */
};
/* Returns the index of the first reference, or -EINVAL on bad usage (a
 * file or stdin that cannot be read said on stderr). */
int image_pull_opts_parse(int argc, char **argv, struct image_pull_opts *ret);
void image_pull_opts_clear(struct image_pull_opts *o);

struct image_info {
    char *id;       /* "sha256:<config digest>" */
    char *manifest; /* digest of the platform manifest */
    char **repo_tags;
    size_t n_repo_tags;
    char **repo_digests;
    size_t n_repo_digests;
    uint64_t size; /* config + compressed layers, as registries report */
    char *user;    /* the config's User, may be "" */
    bool pinned;
    uint64_t created_ns; /* when it entered the store */
    char **chain_ids;    /* bottom layer first */
    size_t n_layers;
};

struct image_fs_usage {
    char *mountpoint;
    uint64_t used_bytes;
    uint64_t inodes_used;
    uint64_t timestamp_ns;
};

struct image_service;

/* Opens (creating if needed) the store and takes its lock, removes leftovers
 * of interrupted work and garbage. Runs before the loop serves requests:
 * it blocks for the time the cleanup takes. -EBUSY when another process
 * holds the store. */
int image_service_new(uv_loop_t *loop, const struct image_config *cfg, struct image_service **ret,
                      struct err *err);
/* Cancels pulls and imports in progress (their callbacks run with
 * -ECANCELED before this returns), waits for their threads, and frees
 * everything once the pending save is done and the loop has closed the
 * service's handle: keep running the loop afterwards. */
void image_service_free(struct image_service *svc);

/* Completion of a pull, on the loop thread. r < 0: err says why (err->code is
 * an errno: EINVAL bad reference or manifest, ENOENT not found, EACCES
 * authentication, EPROTO digest mismatch, ...). On success image_id is the
 * new image's id. */
typedef void (*image_pull_cb)(void *data, int r, const struct err *err, const char *image_id);
/* Starts pulling ref. Returns < 0 (and never calls cb) when ref is invalid or
 * the service cannot start the pull. */
int image_pull(struct image_service *svc, const char *ref, const struct image_auth *auth,
               image_pull_cb cb, void *data, struct err *err);
/* As image_pull, and progress(data, p) on the loop thread with the pull's
 * layers as they go (image_progress's phases), before cb. Only the latest
 * step of each layer is kept for the loop: steps it had no time to take
 * are skipped, the last of each layer never. A caller that joins a pull
 * under way first gets {phase "waiting", digest NULL}, then the layers'
 * state so far. progress NULL: image_pull. */
int image_pull_progress(struct image_service *svc, const char *ref, const struct image_auth *auth,
                        image_pull_cb cb, image_progress_fn progress, void *data, struct err *err);
/* Pulls of one reference with the same credentials started while one is
 * under way share it. The caller cb/data no longer waits for the result:
 * when no caller of a pull waits any more, the pull is cancelled (its
 * helper killed, the layer it was unpacking removed; what it finished,
 * layers and manifest and config blobs, stays unreferenced until the next
 * garbage collection, as after any failed pull, and a pull again reuses
 * it). cb still runs, with the result or -ECANCELED. Loop only. */
void image_pull_abandon(struct image_service *svc, image_pull_cb cb, void *data);

/* Finds an image by id ("sha256:<hex>", "<hex>" or an unambiguous prefix of
 * at least 12 hex digits), by tag or by repo digest. NULL when absent. The
 * result stays valid until the loop runs again. */
const struct image_info *image_lookup(struct image_service *svc, const char *ref);
/* Images matching filter (NULL = all) in *ret (an array the caller frees,
 * pointing into the index); returns the count or < 0. */
int image_list(struct image_service *svc, const char *filter, const struct image_info ***ret);

/* Removes an image by id, tag or digest. A tag of an image that has other
 * tags is only untagged; otherwise the image goes, and with it every layer
 * no other image uses. Absent images are not an error (CRI RemoveImage is
 * idempotent). -EBUSY (cb never runs) for an image an image volume holds
 * (image_hold_volume). cb runs on the loop once the store is updated on
 * disk. */
typedef void (*image_done_cb)(void *data, int r, const struct err *err);
int image_remove(struct image_service *svc, const char *ref, image_done_cb cb, void *data,
                 struct err *err);

/* Containers: keeps the layers of image `ref` while `holder` (a container
 * id) uses them, even if the image itself is removed; a holder holds one
 * image at a time. Persisted with the records, so garbage collection at the
 * next start respects it too. -ENOENT when the image is absent. */
int image_hold(struct image_service *svc, const char *holder, const char *ref, image_done_cb cb,
               void *data, struct err *err);
/* Image volumes: as image_hold, and the image itself is kept too:
 * image_remove of it fails with -EBUSY while the hold lasts. holder is a
 * sub-holder of the container, "<container id>/<name>", so that releasing
 * the container releases it. -ENOENT when the image is absent. */
int image_hold_volume(struct image_service *svc, const char *holder, const char *ref,
                      image_done_cb cb, void *data, struct err *err);
/* Drops holder's hold and its sub-holders' ("holder/..."); absent: not an
 * error. Unused layers are collected. */
int image_release(struct image_service *svc, const char *holder, image_done_cb cb, void *data,
                  struct err *err);

/* Drops every hold whose holder keep(data, holder) refuses (a container
 * that is gone: a create cut short by a crash left its holds saved), and
 * collects the layers no one uses any more. Returns how many went. */
size_t image_holds_prune(struct image_service *svc, bool (*keep)(void *data, const char *holder),
                         void *data);

/* Adds images from a `docker save` or OCI-layout archive at path ("-" is not
 * accepted here: the CLI spools stdin into a file first). cb's image_id is
 * the last image of the archive. */
int image_import(struct image_service *svc, const char *path, image_pull_cb cb, void *data,
                 struct err *err);

/* Usage of the image filesystem from the in-memory counters (no disk walk). */
int image_fs_info(struct image_service *svc, struct image_fs_usage *ret, struct err *err);
void image_fs_usage_clear(struct image_fs_usage *u);

/* Directory of a layer's unpacked files (an overlayfs lowerdir), for the
 * runtime. Returns a malloc'ed path. */
char *image_snapshot_path(struct image_service *svc, const char *chain_id);
/* Path of a blob of the store (a config: "sha256:<hex>"); malloc'ed, NULL
 * for an invalid digest. Read it off the loop. */
char *image_blob_path(struct image_service *svc, const char *digest);

/* `kinglet image-pull`: the helper process a pull or an import runs in
 * (helper.c); internal, started by the image service only. */
int image_helper_main(int argc, char **argv);

/* An image as `kinglet image ls --json` and `inspect` show it: id,
 * repo_tags, repo_digests, size (bytes), user, pinned. */
json_t *image_cli_image_json(const char *id, char *const *tags, size_t n_tags, char *const *digests,
                             size_t n_digests, uint64_t size, const char *user, bool pinned);
/* The verbose information of an image (ImageStatus's "info", inspect's
 * "info"): id, manifest, user, createdAt, layers [{chainID, path}]. */
json_t *image_info_verbose_json(struct image_service *svc, const struct image_info *img);

/* `kinglet image ...`: one command line over two back ends, the image
 * service on a loop of its own, directly on the store (cli_store.c), or a
 * running daemon over its socket (src/cri/image_cli.c: the gRPC client and
 * the CRI messages are the daemon's, above this module). Each call blocks
 * and reports a failure in err. */
typedef void (*image_cli_pulled_fn)(void *data, const char *ref, int r, const struct err *err,
                                    const char *image_id);
struct image_cli_ops {
    /* Pulls refs (at once where the back end can), calling done once for
     * each, in any order. progress: stdout is a terminal and the command
     * was not asked to be quiet; a back end that can shows per-layer
     * progress there (bytes, rate, phase). */
    void (*pull)(void *ctx, char *const *refs, size_t n, const struct image_auth *auth,
                 bool progress, image_cli_pulled_fn done, void *data);
    /* A JSON array of image_cli_image_json() objects. */
    int (*list)(void *ctx, const char *filter, json_t **ret, struct err *err);
    /* The image_cli_image_json() object with "info"; ENOENT when absent. */
    int (*inspect)(void *ctx, const char *ref, json_t **ret, struct err *err);
    int (*remove)(void *ctx, const char *ref, struct err *err);
    /* path: an archive, or "-" for stdin (spooled by the back end). */
    int (*import)(void *ctx, const char *path, char **ret_id, struct err *err);
    /* {mountpoint, used_bytes, inodes_used} */
    int (*fsinfo)(void *ctx, json_t **ret, struct err *err);
    int (*hold)(void *ctx, const char *holder, const char *ref, struct err *err);
    int (*release)(void *ctx, const char *holder, struct err *err);
    void (*close)(void *ctx);
};
/* How the command line reaches a daemon: given --root and --socket (NULL
 * when not given), returns 1 with a remote back end in ret_ops and ret_ctx,
 * 0 to work on the store directly, < 0 (said on stderr) to fail. */
typedef int (*image_cli_connect_fn)(const char *root, const char *socket,
                                    const struct image_cli_ops **ret_ops, void **ret_ctx);
/* The command line; returns the process exit status. connect may be NULL
 * (always the store). */
int image_cli_main(int argc, char **argv, image_cli_connect_fn connect);
/* The direct back end on the store at cfg->root (cli_store.c). */
int image_cli_store_open(const struct image_config *cfg, const struct image_cli_ops **ret_ops,
                         void **ret_ctx, struct err *err);
/* The pull progress display on a terminal (cli_progress.c), for either
 * back end: image_cli_display_step is an image_progress_fn (data: the
 * display; any thread), drawing only while on; image_cli_display_pulled
 * ends ref's lines and calls done (which prints the result) below them. */
struct image_cli_display;
struct image_cli_display *image_cli_display_new(void);
void image_cli_display_free(struct image_cli_display *s);
void image_cli_display_on(struct image_cli_display *s, bool on);
void image_cli_display_step(void *data, const struct image_progress *p);
void image_cli_display_pulled(struct image_cli_display *s, const char *ref,
                              image_cli_pulled_fn done, void *data, int r, const struct err *err,
                              const char *image_id);
/* "97.4 MiB": bytes for people (IEC units, one decimal past KiB). */
void image_size_human(uint64_t bytes, char buf[16]);
