/* store: persistent records of pod sandboxes and containers, one JSON file
 * per object (<root>/pods/<id>.json, <root>/containers/<id>.json), written atomically (temporary
 * file, fsync, rename, fsync of the directory). The record keeps what the CRI layer needs to answer
 * for a pod after a restart and to tear it down: its state, creation time, runtime handler, the
 * pod's configuration as an opaque blob (the CRI layer stores the serialized PodSandboxConfig), its
 * addresses, the pid of its init and its cgroup.
 *
 * JSON conversion is pure (unit-tested and fuzzed); the file functions block
 * (call them from a worker thread or before the loop runs).
 *
 * Errors: -EINVAL for a malformed record (the message names the field),
 * -ENOMEM, or the errno of the file operation. */
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

#define STORE_ID_LEN     64          /* 64 hex digits */
#define STORE_RECORD_MAX (1 << 20)   /* bytes of one record file */
#define STORE_CONFIG_MAX (512 << 10) /* bytes of the opaque config */

enum store_pod_state { STORE_POD_READY, STORE_POD_NOTREADY };

struct store_pod {
    char id[STORE_ID_LEN + 1];
    enum store_pod_state state;
    uint64_t created_ns;   /* wall clock */
    char *runtime_handler; /* "" = default */
    uint8_t *config;       /* opaque (serialized PodSandboxConfig) */
    size_t config_len;
    char ips[2][INET6_ADDRSTRLEN]; /* IPv4 first */
    size_t nips;
    pid_t init_pid;      /* 0: none */
    uint64_t init_start; /* starttime of init (clock ticks), against pid reuse */
    char *cgroup_path;   /* absolute cgroup2 path, NULL: none */
};

/* ---- what every record shares (record.c) ---- */

/* Valid ids: exactly 64 lowercase hex digits. */
bool store_id_valid(const char *id);
/* A fresh random id (getrandom). */
int store_id_new(char ret[STORE_ID_LEN + 1]);

/* <dir>/<id>.json, written atomically; the directory is created when
 * missing. -EINVAL for an invalid id, else the errno of the file step. */
int store_record_write(const char *dir, const char *id, const char *json, size_t len,
                       struct err *err);
/* Removes <dir>/<id>.json durably; a missing record is success. */
int store_record_delete(const char *dir, const char *id, struct err *err);
/* Calls fn for every <id>.json of dir (a missing dir has none) with the
 * file's text (at most STORE_RECORD_MAX bytes). fn returns 0 to take the
 * record, -ENOMEM to stop the scan (the scan then fails with -ENOMEM), or
 * another negative value for a malformed record, which is skipped and
 * counted in *ret_bad (and named, by the file's id, in *ret_bad_ids
 * unless that is NULL; free with strv_free), as are unreadable files. There is no cap on the
 * count: every record is one the daemon wrote and held in memory while it
 * ran, and one left unloaded would be a container (or pod) the node no
 * longer answers for, whose state recovery could take for a stranger's.
 * Temporaries that dead writers left in dir (a crash in the middle of
 * store_record_write) are removed first. */
typedef int (*store_record_fn)(const char *id, const char *text, size_t len, void *data);
int store_record_scan(const char *dir, store_record_fn fn, void *data, char ***ret_bad_ids,
                      size_t *ret_bad, struct err *err);

/* ---- pod sandboxes (pod.c) ---- */

/* The record as JSON text (malloc'd, NUL-terminated). */
int store_pod_to_json(const struct store_pod *p, char **ret, size_t *ret_len, struct err *err);
/* Parses a record; *ret is filled (store_pod_clear frees it). */
int store_pod_from_json(const char *text, size_t len, struct store_pod *ret, struct err *err);
void store_pod_clear(struct store_pod *p);

/* <dir>/<id>.json; the directory is created when missing. */
int store_pod_write(const char *dir, const char *id, const char *json, size_t len, struct err *err);
/* Removes <dir>/<id>.json durably; a missing record is success. */
int store_pod_delete(const char *dir, const char *id, struct err *err);
/* Loads every record of dir (a missing dir gives none). Unreadable or
 * malformed records are skipped and counted in *ret_bad (their names are not
 * trusted). *ret is malloc'd; free with store_pods_free. */
int store_pod_load_all(const char *dir, struct store_pod **ret, size_t *ret_n, size_t *ret_bad,
                       struct err *err);
void store_pods_free(struct store_pod *pods, size_t n);

/* ---- containers (container.c) ---- */

#define STORE_CTR_GROUPS_MAX 256  /* supplementary groups of the resolved user */
#define STORE_CTR_TEXT_MAX   4096 /* reason, message, image names, paths */

enum store_ctr_state { STORE_CTR_CREATED, STORE_CTR_RUNNING, STORE_CTR_EXITED };

/* A container as the CRI layer needs it after a restart: what it was made
 * from (the ContainerConfig, serialized, opaque here), what it resolved at
 * creation (image, user, stop signal, log path, cgroup) and where its life
 * stands. The process side (pids, exit record) lives in the executor's
 * state directory. */
struct store_container {
    char id[STORE_ID_LEN + 1];
    char pod_id[STORE_ID_LEN + 1];
    enum store_ctr_state state;
    uint64_t created_ns, started_ns, finished_ns; /* wall clock, 0: not yet */
    int exit_code;
    char *reason;    /* "Completed", "Error", "OOMKilled", ... or NULL */
    char *message;   /* NULL: none */
    char *image;     /* what ContainerStatus shows: the pod's reference, a tag or the id */
    char *image_id;  /* "sha256:<config digest>" */
    char *image_ref; /* "name@sha256:<manifest digest>" */
    char *log_path;  /* absolute, NULL: no log */
    uint8_t *config; /* opaque (serialized ContainerConfig) */
    size_t config_len;
    uint8_t *resources; /* opaque (serialized LinuxContainerResources), NULL: the config's */
    size_t resources_len;
    uint32_t uid, gid; /* the resolved user */
    uint32_t *groups;  /* supplementary groups */
    size_t n_groups;
    int stop_signal;   /* resolved: config, image, SIGTERM */
    char *cgroup_path; /* absolute file system path of its cgroup, NULL: none */
};

int store_ctr_to_json(const struct store_container *c, char **ret, size_t *ret_len,
                      struct err *err);
/* Parses a record; -EINVAL naming the field, -ENOMEM. */
int store_ctr_from_json(const char *text, size_t len, struct store_container *ret, struct err *err);
void store_ctr_clear(struct store_container *c);
/* Loads every record of dir, as store_pod_load_all; the ids of those
 * skipped are in *ret_bad_ids (free with strv_free). */
int store_ctr_load_all(const char *dir, struct store_container **ret, size_t *ret_n,
                       char ***ret_bad_ids, size_t *ret_bad, struct err *err);
void store_ctrs_free(struct store_container *c, size_t n);
const char *store_ctr_state_name(enum store_ctr_state s);
