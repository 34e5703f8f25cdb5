/* cri/container_spec: a CRI ContainerConfig, the image's config, the pod
 * and facts of the host and of the image's files → the OCI spec of the
 * container (pure: no I/O; the caller gathers the facts off the loop).
 *
 * What it decides, as containerd does:
 *   - process.args from command/args and the image's Entrypoint/Cmd
 *     (Kubernetes' four cases); env = image env, then config env, a later
 *     key replacing an earlier one; cwd = config's, else image's, else "/";
 *   - the user: image USER (name or uid[:group]), run_as_user,
 *     run_as_username, run_as_group; names resolved in the container's own
 *     /etc/passwd and /etc/group text; supplementary groups from that
 *     /etc/group (policy Merge) or only the requested ones (Strict);
 *   - capabilities (containerd's default set, add/drop with ALL, ambient),
 *     privileged, no_new_privs, read-only rootfs, masked/read-only paths;
 *   - seccomp: RuntimeDefault (kinglet's allow-list), Localhost (a profile
 *     the caller read), Unconfined; absent means unconfined, as kubelet
 *     without --seccomp-default asks;
 *   - mounts (the sandbox's /dev/shm and /etc files, the config's binds with
 *     propagation and recursive read-only), devices, namespaces, resources,
 *     oom_score_adj (clamped to what the host allows), annotations;
 *   - last, the edits of the CDI devices it asks for (cdi_edits_apply),
 *     their additional GIDs added to the groups.
 *
 * Errors: -EINVAL naming the field (a user or group the image lacks, an
 * unknown capability, a bad profile), -ENOSYS for what kinglet does not do
 * yet (image_sub_path), -ENOMEM. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "proto/api.pb-c.h"

struct pod_idmap; /* pod/pod.h */

/* A device node as stat found it. */
struct ctr_device {
    char *path; /* in the container */
    char type;  /* 'c' or 'b' */
    int64_t major, minor;
    uint32_t mode;     /* permission bits */
    const char *perms; /* "rwm" subset, NULL: "rwm" */
};

struct ctr_host_facts {
    bool apparmor, selinux; /* the host has them */
    bool rro;               /* mount_setattr(MOUNT_ATTR_RDONLY, AT_RECURSIVE) works */
    int oom_score_adj_min;  /* the lowest oom_score_adj we may set */
    uint64_t caps;          /* kinglet's bounding set (bit = capability), 0: all */
};

struct ctr_spec_input {
    const char *id;
    const Runtime__V1__ContainerConfig *cfg;
    json_t *image_config;       /* the image config's "config" object, NULL: none */
    const char *passwd, *group; /* the container's /etc/passwd, /etc/group; NULL: none */
    const char *rootfs;
    const char *pod_dir; /* the sandbox's directory: shm, hosts, ns/... */
    bool pod_host_network, pod_host_ipc;
    bool pod_pid_ns; /* the pod has a shared PID namespace (ns/pid) */
    /* the pod's user namespace (ns/user) and its mappings; NULL: none */
    const struct pod_idmap *uid_map, *gid_map;
    const char *target_pid_ns;        /* PID mode TARGET: the target's /proc/PID/ns/pid */
    const char *cgroup_parent;        /* the pod's cgroup parent, NULL: no cgroup */
    const char *seccomp_profile;      /* Localhost: the profile's JSON text */
    const struct ctr_device *devices; /* config devices, resolved */
    size_t n_devices;
    const struct ctr_device *host_devices; /* privileged: every host device */
    size_t n_host_devices;
    /* per config mount, for image volumes: the host path to bind (the
     * image's mount or its sub path); NULL: none */
    const char *const *mount_sources;
    const json_t *cdi_edits; /* cdi_resolve's, filled; NULL: none */
    struct ctr_host_facts host;
};

/* The AppArmor profile for process.apparmorProfile, as containerd 2 picks
 * it: the SecurityProfile, else the deprecated `apparmor_profile` string
 * ("runtime/default", "unconfined", "localhost/NAME"); neither means
 * RuntimeDefault. On a host with AppArmor (host), RuntimeDefault is
 * OCI_APPARMOR_DEFAULT but for a privileged container (unconfined, as
 * containerd); Localhost is its name, "localhost/" cut (points into sc).
 * *ret NULL: unconfined. Without AppArmor, RuntimeDefault and Unconfined
 * are nothing and Localhost is -EINVAL naming the profile; -EINVAL for an
 * unknown type or string, a localhost_ref on another type, a bad name.
 * Pure: whether the kernel has the profile is the caller's check. */
int ctr_apparmor_profile(const Runtime__V1__LinuxContainerSecurityContext *sc, bool privileged,
                         bool host, const char **ret, struct err *err);

struct ctr_spec {
    json_t *spec;
    uint32_t uid, gid;
    uint32_t *groups; /* supplementary, the primary group first */
    size_t n_groups;
    int stop_signal;
    char *cgroup_path;   /* NULL: none */
    struct buf warnings; /* "; "-separated, NUL-terminated when len > 0 */
};

/* The CDI devices a container asks for: the names of cdi_devices, then
 * those of its `cdi.k8s.io/` annotations (comma-separated), as containerd
 * reads them; duplicates once. A NULL-terminated array (NULL and 0 when
 * none). -EINVAL naming a name that is not vendor/class=device or one
 * too many (CDI_NAMES_MAX), -ENOMEM. */
int ctr_cdi_names(const Runtime__V1__ContainerConfig *cfg, char ***ret, size_t *ret_n,
                  struct err *err);

/* The checks that need nothing but the request (on the loop, before any
 * work): enums in range, names of capabilities, mounts, image_sub_path.
 * -EINVAL naming the field, -ENOSYS. */
int ctr_config_check(const Runtime__V1__ContainerConfig *cfg, struct err *err);
int ctr_spec_build(const struct ctr_spec_input *in, struct ctr_spec *ret, struct err *err);
void ctr_spec_clear(struct ctr_spec *s);

/* Pieces, for tests. */
/* Kubernetes' rule: command replaces Entrypoint (and drops Cmd), args
 * replace Cmd. Returns a new array, NULL on allocation failure. */
json_t *ctr_spec_args(const Runtime__V1__ContainerConfig *cfg, json_t *image_config);
/* The user: see the header comment. */
int ctr_spec_user(const struct ctr_spec_input *in, struct ctr_spec *ret, struct err *err);
