/* cdi: the Container Device Interface (CDI spec 0.3.0 to 1.0.x), as
 * containerd and CRI-O apply it. A device plugin or a DRA driver writes
 * spec files (JSON or YAML) into /etc/cdi and /var/run/cdi; kubelet names
 * the devices of a container as "vendor.com/class=name" (CRI cdi_devices,
 * or the values of `cdi.k8s.io/...` annotations, comma-separated); the
 * runtime applies the edits of each named device and the spec-wide edits
 * of its spec to the container's OCI spec: env, device nodes with their
 * device cgroup rule, mounts, hooks, additional GIDs.
 *
 * Three steps, the I/O kept to the middle one:
 *   cdi_spec_parse   text -> a validated spec (pure; the fuzz target's);
 *   cdi_registry_load / cdi_resolve
 *                    the spec directories read (blocking: a worker's job),
 *                    the names resolved into one list of edits, the host
 *                    nodes stat'ed for what the spec leaves out;
 *   cdi_edits_apply  the edits -> the OCI spec (pure).
 * A failure in any step leaves the OCI spec untouched: cdi_edits_apply
 * works on a copy and swaps it in only when every edit went in.
 *
 * Which spec wins, as the reference Go implementation: a later directory
 * overrides an earlier one (/var/run/cdi over /etc/cdi); one device defined
 * twice in one directory is a conflict, refused when it is asked for.
 * Unlike it, a spec file that does not parse is not only skipped: a request
 * for a device of its kind, or one that nothing resolves, fails naming the
 * file and its error, so that a broken vendor spec is not half-applied.
 *
 * Errors (struct err, codes as listed): -EINVAL a malformed spec or name,
 * -ENOENT an unknown device, -EINVAL a conflict, -EOPNOTSUPP an edit
 * kinglet cannot apply (intelRdt, netDevices), -ENOMEM; the errno of a
 * host node that cannot be stat'ed. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#define CDI_SPEC_MAX_BYTES (4u << 20)  /* a file larger is refused */
#define CDI_FILES_MAX      1024        /* spec files per directory */
#define CDI_LOAD_MAX_BYTES (32u << 20) /* spec files read in all, by one load */
#define CDI_NAMES_MAX      256         /* devices one container may ask for */

/* Parses and validates a spec's text (YAML when yaml, else JSON): known
 * cdiVersion, kind "vendor/class", devices with valid unique names and
 * non-empty edits, every edit well-formed (absolute paths, "K=V" env,
 * "rwm" permissions, known hook names, ...). YAML: one document, no
 * aliases, nesting at most 64 deep; plain scalars typed as YAML 1.1 does
 * (0644 is octal). *ret is the spec as JSON, for cdi_resolve. -EINVAL
 * naming the field, -ENOMEM. */
int cdi_spec_parse(const char *text, size_t len, bool yaml, json_t **ret, struct err *err);
/* The YAML half alone, for tests: the document as JSON. */
int cdi_yaml_to_json(const char *text, size_t len, json_t **ret, struct err *err);

/* Whether name is a fully-qualified device name: vendor/class=device with
 * the spec's character rules. */
bool cdi_name_valid(const char *name);

/* The spec files of the directories, in their order (later wins). */
struct cdi_file {
    char *path;
    int dir;      /* index of its directory */
    json_t *spec; /* NULL: it did not parse */
    char *kind;   /* its kind if that much could be read, else NULL */
    char *error;  /* why it did not parse */
};
struct cdi_registry {
    struct cdi_file *files;
    size_t n;
};

/* Reads every *.json, *.yaml and *.yml regular file directly in each
 * directory (a missing directory is fine). Blocking. A file that does not
 * parse is recorded with its error; -ENOMEM and -E2BIG (too many files,
 * or more than CDI_LOAD_MAX_BYTES of them) fail the whole load. */
int cdi_registry_load(const char *const *dirs, size_t n_dirs, struct cdi_registry *ret,
                      struct err *err);
void cdi_registry_clear(struct cdi_registry *r);

/* Resolves the names (duplicates count once) into the edits to apply, in
 * order: for each spec used, its spec-wide containerEdits once, then the
 * containerEdits of each of its devices asked for. Pure. *ret is an array
 * of containerEdits objects (copies). -EINVAL a name that is not
 * qualified, -ENOENT a device nothing defines (with the files that did
 * not parse), -EINVAL a conflict or a spec of the kind that did not
 * parse. */
int cdi_resolve(const struct cdi_registry *reg, char *const *names, size_t n, json_t **ret,
                struct err *err);

/* Completes the device nodes of the edits from the host (blocking): hostPath
 * defaults to path; type, major, minor and fileMode come from the host node
 * where the spec leaves them out; a type the spec gives that the host node
 * contradicts is refused. The host node's errno when it cannot be stat'ed
 * (ENOENT: a device the spec names is missing). */
int cdi_edits_fill(json_t *edits, struct err *err);

/* Applies filled edits to an OCI spec (pure): env (a key replaces the
 * same key), device nodes (one at the same path replaced; uid/gid default
 * to the process's when it is not root; an allow rule "type major:minor
 * permissions" unless skip_rules, for a privileged container whose rules
 * allow all), mounts (one at the same destination replaced; each put
 * in after the last mount not deeper than it, the others left in their
 * order), hooks, additional GIDs (0 and duplicates skipped). On failure
 * the spec is unchanged. -EOPNOTSUPP for intelRdt and netDevices,
 * -ENOMEM. */
int cdi_edits_apply(json_t *oci_spec, const json_t *edits, bool skip_rules, struct err *err);
