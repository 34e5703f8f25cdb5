/* store: persistent pod sandbox records, one JSON file per pod under
 * <root>/pods/<id>.json, written atomically (temporary file, fsync, rename,
 * fsync of the directory). The record keeps what the CRI layer needs to
 * answer for a pod after a restart and to tear it down: its state, creation
 * time, runtime handler, the pod's configuration as an opaque blob (the CRI
 * layer stores the serialized PodSandboxConfig), its addresses, the pid of
 * its init and its cgroup.
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
#define STORE_PODS_MAX   4096        /* records loaded at start */

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

/* Valid ids: exactly 64 lowercase hex digits. */
bool store_id_valid(const char *id);
/* A fresh random id (getrandom). */
int store_id_new(char ret[STORE_ID_LEN + 1]);

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
