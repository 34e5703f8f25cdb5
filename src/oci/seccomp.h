/* oci/seccomp: the OCI `linux.seccomp` object as a libseccomp filter
 * (internal to src/oci). */
#pragma once

#include <jansson.h>
#include <seccomp.h>

#include "base/base.h"

/* Builds the filter: default action, every action (KILL_PROCESS,
 * KILL_THREAD/KILL, TRAP, ERRNO with errnoRet, TRACE, ALLOW, LOG, NOTIFY is
 * refused), architectures, syscalls with argument conditions. Unknown
 * syscall names are skipped (as runc/crun do), unknown actions, operators or
 * architectures are errors naming the field. Pure: loads nothing. */
int oci_seccomp_build(json_t *seccomp, scmp_filter_ctx *ret, struct err *err);
/* Builds and loads the filter with the object's `flags`
 * (SECCOMP_FILTER_FLAG_LOG, _SPEC_ALLOW, _TSYNC...). Call as the very last
 * step before execve. NULL or JSON null loads nothing. */
int oci_seccomp_load(json_t *seccomp, struct err *err);
/* Builds the filter and appends its BPF program (struct sock_filter, as
 * seccomp(2) takes it) to ret; *ret_flags gets the SECCOMP_FILTER_FLAG_*
 * that loading it needs. For a process that loads it without libseccomp
 * (the exec helper, src/enter). Errors as oci_seccomp_build, E2BIG for a
 * program over 65536 instructions. */
int oci_seccomp_export(json_t *seccomp, struct buf *ret, uint32_t *ret_flags, struct err *err);
/* The `linux.seccomp` object of `kinglet oci features` (OCI features.md):
 * enabled, actions, operators, archs, knownFlags, supportedFlags. NULL on
 * allocation failure. */
json_t *oci_seccomp_features(void);
