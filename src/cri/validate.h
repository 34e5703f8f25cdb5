/* Private to src/cri: pure checks of what a CRI request names (no I/O, no
 * state), unit-tested in tests/unit/test_cri.c and shared by the handlers.
 * Each returns 0, or -EINVAL (or -ENOTSUP where the request is well formed
 * but asks for what kinglet cannot do) with err saying which field and
 * why. */
#pragma once

#include "cri/internal.h"

/* Names as Kubernetes makes them (k8s.io/apimachinery validation):
 *   DNS-1123 label      [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63
 *   DNS-1123 subdomain  labels joined by '.', at most 253
 * Upper-case letters are accepted as well: DNS names are case-insensitive,
 * and cri-tools' validation suite (critest) names its pods and containers
 * "PodSandbox-for-create-test-<uuid>" and "container-for-execSync-test-..."
 * (mixed case, and container names longer than 63). */
#define CRI_DNS_LABEL_MAX     63
#define CRI_DNS_SUBDOMAIN_MAX 253
#define CRI_UID_MAX           128
bool cri_dns_label_valid(const char *s, size_t max);
bool cri_dns_subdomain_valid(const char *s, size_t max);

/* PodSandboxMetadata: name a DNS-1123 subdomain (what kubelet sends for
 * pod names), namespace a DNS-1123 label, uid 1..128 of [A-Za-z0-9._-]
 * starting with a letter or digit (API server UUIDs, kubelet's hex hashes
 * of static pods). */
int cri_pod_metadata_check(const Runtime__V1__PodSandboxMetadata *md, struct err *err);
/* ContainerMetadata: name with the characters of a DNS-1123 label (what
 * Kubernetes allows for container names) and at most 253 long (critest's
 * names pass 63). */
int cri_container_metadata_check(const Runtime__V1__ContainerMetadata *md, struct err *err);

/* A pod's NamespaceOption (NULL: all POD): network and ipc POD or NODE;
 * pid POD, CONTAINER or NODE; TARGET is for containers (it names one in
 * target_id), never for a pod, and refused with a message that says so;
 * userns mode POD or NODE. Undefined values are refused. */
int cri_pod_namespace_check(const Runtime__V1__NamespaceOption *ns, struct err *err);

/* userns_options: NODE without mappings, or POD with exactly one uid and
 * one gid mapping, each mapping container ID 0 (as containerd checks);
 * anything else -EINVAL naming the field. NULL is NODE. */
int cri_userns_check(const Runtime__V1__UserNamespace *u, struct err *err);

/* A security context's user (pod or container): run_as_group alone says
 * nothing of whose group it is, so it needs run_as_user or run_as_username
 * (username NULL or "": none), as containerd and cri-tools demand.
 * where names the context in the message ("" for the container's). */
int cri_run_as_group_check(const char *where, const Runtime__V1__Int64Value *user,
                           const char *username, const Runtime__V1__Int64Value *group,
                           struct err *err);

/* Whether two port mappings claim the same host port: same protocol and
 * port, and host IPs that overlap ("", 0.0.0.0 and :: mean every address
 * and overlap any; otherwise the same address). A host port of 0 claims
 * nothing. */
bool cri_port_mappings_conflict(const Runtime__V1__PortMapping *a,
                                const Runtime__V1__PortMapping *b);
/* "tcp/8080 on 0.0.0.0" into buf. */
void cri_port_mapping_format(const Runtime__V1__PortMapping *m, char *buf, size_t size);
