/* cri: request messages as a client sends them, fed straight into the
 * handlers' checks and translations (no daemon, no I/O). The first byte
 * picks the request; the rest is its protobuf encoding.
 *
 * Oracles: a CreateContainer config that passes ctr_config_check and
 * builds into a spec gives a spec our own executor parses (a config
 * accepted at create must not fail later, at start, for what it says);
 * the checks of pod metadata, namespace modes and port mappings never
 * crash, and a port mapping always conflicts with itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cri/container_spec.h"
#include "cri/internal.h"
#include "cri/validate.h"
#include "net/net.h"
#include "oci/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void create_container(const uint8_t *data, size_t size)
{
    Runtime__V1__CreateContainerRequest *req =
        (Runtime__V1__CreateContainerRequest *)protobuf_c_message_unpack(
            &runtime__v1__create_container_request__descriptor, NULL, size, data);
    if (!req)
        return;
    struct err err = {0};
    const Runtime__V1__ContainerConfig *cfg = req->config;
    if (cfg && cfg->metadata)
        cri_container_metadata_check(cfg->metadata, &err);
    if (cfg && ctr_config_check(cfg, &err) == 0) {
        json_t *img = json_loads("{\"Cmd\":[\"/bin/sh\"],\"User\":\"app\"}", 0, NULL);
        struct ctr_spec_input in = {
            .id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            .cfg = cfg,
            .image_config = img,
            .passwd = "root:x:0:0::/:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
            .group = "root:x:0:\napp:x:1000:app\n",
            .rootfs = "/r",
            .pod_dir = "/p",
            .pod_pid_ns = true,
            .target_pid_ns = "/proc/1/ns/pid",
            .cgroup_parent = "/kubepods/pod",
            .seccomp_profile = "{\"defaultAction\":\"SCMP_ACT_ALLOW\"}",
            .host = {.apparmor = true, .rro = true, .oom_score_adj_min = -1000},
        };
        struct ctr_spec out;
        if (ctr_spec_build(&in, &out, &err) == 0) {
            char *text = json_dumps(out.spec, JSON_COMPACT);
            struct oci_spec *spec = NULL;
            struct err e2 = {0};
            if (text && oci_spec_parse(text, strlen(text), "/b", &spec, &e2) < 0 &&
                e2.code != ENOMEM) {
                fprintf(stderr, "built a spec our executor refuses: %s\n%s\n", e2.msg, text);
                __builtin_trap();
            }
            oci_spec_free(spec);
            free(text);
            ctr_spec_clear(&out);
        }
        json_decref(img);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void run_pod(const uint8_t *data, size_t size)
{
    Runtime__V1__RunPodSandboxRequest *req =
        (Runtime__V1__RunPodSandboxRequest *)protobuf_c_message_unpack(
            &runtime__v1__run_pod_sandbox_request__descriptor, NULL, size, data);
    if (!req)
        return;
    struct err err = {0};
    const Runtime__V1__PodSandboxConfig *c = req->config;
    if (c && c->metadata)
        cri_pod_metadata_check(c->metadata, &err);
    if (c && c->linux && c->linux->security_context &&
        c->linux->security_context->namespace_options)
        cri_pod_namespace_check(c->linux->security_context->namespace_options, &err);
    for (size_t i = 0; c && i < c->n_port_mappings && i < 64; i++) {
        if (c->port_mappings[i]->host_port > 0 &&
            !cri_port_mappings_conflict(c->port_mappings[i], c->port_mappings[i]))
            __builtin_trap();
        for (size_t k = i + 1; k < c->n_port_mappings && k < 64; k++)
            (void)cri_port_mappings_conflict(c->port_mappings[i], c->port_mappings[k]);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void update_runtime_config(const uint8_t *data, size_t size)
{
    Runtime__V1__UpdateRuntimeConfigRequest *req =
        (Runtime__V1__UpdateRuntimeConfigRequest *)protobuf_c_message_unpack(
            &runtime__v1__update_runtime_config_request__descriptor, NULL, size, data);
    if (!req)
        return;
    if (req->runtime_config && req->runtime_config->network_config &&
        req->runtime_config->network_config->pod_cidr) {
        struct err e = {0};
        (void)net_pod_cidrs_parse(req->runtime_config->network_config->pod_cidr, NULL, NULL, &e);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        create_container(data + 1, size - 1);
        break;
    case 1:
        run_pod(data + 1, size - 1);
        break;
    default:
        update_runtime_config(data + 1, size - 1);
    }
    return 0;
}
