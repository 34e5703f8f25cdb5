/* oci/checkpoint: checkpoints of running containers with CRIU (KEP-2008).
 * Blocking (it runs criu and waits for it): workers only. See
 * checkpoint.c for what is dumped and what is named external. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* CRIU 3.16, as containerd and CRI-O require for containers of pods. */
#define OCI_CRIU_MIN_VERSION 31600

struct oci_checkpoint_opts {
    const char *root; /* the executor's state root; NULL: OCI_ROOT_DEFAULT */
    const char *id;
    const char *images_dir; /* an empty directory for CRIU's images */
    const char *work_dir;   /* dump.log and stats-dump go here */
    int64_t timeout_s;      /* 0: no limit */
};

/* Dumps the running container id into images_dir, leaving it running.
 * Errors: -ENOPKG when criu is not on PATH or is older than
 * OCI_CRIU_MIN_VERSION (or does not run); -EALREADY when the container
 * does not run; -ENOENT for no such container; -ETIMEDOUT when criu takes
 * longer than timeout_s (it is killed, the container goes on); -EIO when
 * criu fails, the message ending with the Error lines of its log. */
int oci_container_checkpoint(const struct oci_checkpoint_opts *o, struct err *err);

/* criu on PATH into buf: 0 or -ENOENT. */
int oci_criu_find(char *buf, size_t size);
/* The version `criu --version` prints, as major*10000+minor*100+sub;
 * -EINVAL. Pure. */
int oci_criu_version_parse(const char *text);
/* The last four lines of the log at path that say Error (else its last
 * two lines), without time stamps, each cut at 100 bytes, joined by " | ",
 * into buf (empty when there is no log). */
void oci_criu_log_tail(const char *path, char *buf, size_t size);
