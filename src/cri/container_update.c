/* UpdateContainerResources and UpdatePodSandboxResources: new limits for a
 * running container's cgroup, or for the pod's, applied in a worker through
 * the executor's cgroup code (on a host without cgroup v2 controllers the
 * limits are recorded and a warning says they are not enforced). A
 * container's new resources are kept in its record, so that its status
 * reports them, after a restart too. */
#include <jansson.h>
#include <string.h>

#include "cri/containers.h"
#include "oci/cgroup.h"
#include "oci/oci.h"

struct update_job {
    uv_work_t req;
    struct cri_call *call; /* loop side only */
    char id[STORE_ID_LEN + 1];
    bool pod;
    char *oci_root;
    char *cgroup;    /* the pod's cgroup */
    char *resources; /* OCI linux.resources JSON */
    uint8_t *packed; /* the new LinuxContainerResources, serialized */
    size_t packed_len;
    struct err err;
    int r;
};

static void update_job_free(struct update_job *j)
{
    free(j->oci_root);
    free(j->cgroup);
    free(j->resources);
    free(j->packed);
    free(j);
}

static void update_work(uv_work_t *req)
{
    struct update_job *j = req->data;
    if (!j->pod) {
        j->r = oci_container_update(j->oci_root, j->id, j->resources, &j->err);
        return;
    }
    json_t *res = json_loads(j->resources, 0, NULL);
    struct oci_cgroup *cg = NULL;
    if (!res) {
        j->r = err_set(&j->err, ENOMEM, "resources");
    } else if ((j->r = oci_cgroup_open(j->cgroup, &cg, &j->err)) == 0) {
        j->r = oci_cgroup_update(cg, res, &j->err);
        oci_cgroup_free(cg);
    }
    json_decref(res);
}

static void update_saved(struct container *c, void *data)
{
    struct cri_call *call = data;
    Runtime__V1__UpdateContainerResourcesResponse resp =
        RUNTIME__V1__UPDATE_CONTAINER_RESOURCES_RESPONSE__INIT;
    cri_reply(call, &resp.base);
    if (c)
        opq_end(&c->ops, c, false);
}

static void update_done(uv_work_t *req, int status)
{
    struct update_job *j = req->data;
    struct cri_call *call = j->call;
    struct cri *cri = call->cri;
    if (status < 0 && j->r == 0)
        j->r = err_set(&j->err, -status, "cancelled");
    struct container *c = j->pod ? NULL : container_find_exact(cri, j->id);
    if (j->r < 0) {
        err_wrap(&j->err, "update the resources of %s `%s`", j->pod ? "pod" : "container", j->id);
        cri_fail_err(call, &j->err);
    } else if (j->pod) {
        Runtime__V1__UpdatePodSandboxResourcesResponse resp =
            RUNTIME__V1__UPDATE_POD_SANDBOX_RESOURCES_RESPONSE__INIT;
        cri_reply(call, &resp.base);
    } else {
        if (c) {
            Runtime__V1__LinuxContainerResources *res =
                (Runtime__V1__LinuxContainerResources *)protobuf_c_message_unpack(
                    &runtime__v1__linux_container_resources__descriptor, NULL, j->packed_len,
                    j->packed);
            if (res) {
                if (c->resources)
                    protobuf_c_message_free_unpacked(&c->resources->base, NULL);
                c->resources = res;
                free(c->rec.resources);
                c->rec.resources = TAKE_PTR(j->packed);
                c->rec.resources_len = j->packed_len;
                container_save(cri, c);
            }
            /* The answer once the new resources are on disk. */
            update_job_free(j);
            container_when_saved(c, update_saved, call);
            return;
        }
        update_saved(NULL, call);
        update_job_free(j);
        return;
    }
    if (c)
        opq_end(&c->ops, c, false);
    update_job_free(j);
}

/* A job for resources r; NULL with the call failed. */
static struct update_job *job_for(struct cri_call *call,
                                  const Runtime__V1__LinuxContainerResources *r)
{
    struct update_job *j = calloc(1, sizeof(*j));
    json_t *res = r ? cri_resources_to_oci(r) : NULL;
    if (!res)
        res = json_object();
    if (!j || !res || !(j->resources = json_dumps(res, JSON_COMPACT)) ||
        !(j->oci_root = strdup(call->cri->containers->oci_root))) {
        json_decref(res);
        if (j)
            update_job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    json_decref(res);
    j->call = call;
    j->req.data = j;
    return j;
}

static void update_op(void *data, void *obj)
{
    struct cri_call *call = data;
    struct container *c = obj;
    Runtime__V1__UpdateContainerResourcesRequest *req =
        (Runtime__V1__UpdateContainerResourcesRequest *)call->req;
    if (!c) {
        cri_fail(call, GRPC_STATUS_NOT_FOUND, "container `%.64s` not found", req->container_id);
        return;
    }
    if (c->rec.state != STORE_CTR_RUNNING && c->rec.state != STORE_CTR_CREATED) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "UpdateContainerResources: container `%s` is %s", c->rec.id,
                 store_ctr_state_name(c->rec.state));
        opq_end(&c->ops, c, false);
        return;
    }
    struct update_job *j = job_for(call, req->linux);
    if (!j) {
        opq_end(&c->ops, c, false);
        return;
    }
    memcpy(j->id, c->rec.id, sizeof(j->id));
    size_t len = req->linux ? protobuf_c_message_get_packed_size(&req->linux->base) : 0;
    if (!(j->packed = malloc(len ? len : 1))) {
        update_job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        opq_end(&c->ops, c, false);
        return;
    }
    j->packed_len = req->linux ? protobuf_c_message_pack(&req->linux->base, j->packed) : 0;
    uv_queue_work(call->cri->loop, &j->req, update_work, update_done);
}

void cri_update_container_resources(struct cri_call *call)
{
    Runtime__V1__UpdateContainerResourcesRequest *req =
        (Runtime__V1__UpdateContainerResourcesRequest *)call->req;
    struct container *c = container_find_or_fail(call, NULL, req->container_id);
    if (!c)
        return;
    if (!req->linux) {
        cri_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                 "UpdateContainerResources: no linux resources given");
        return;
    }
    opq_begin_call(&c->ops, call, update_op, c);
}

void cri_update_pod_sandbox_resources(struct cri_call *call)
{
    Runtime__V1__UpdatePodSandboxResourcesRequest *req =
        (Runtime__V1__UpdatePodSandboxResourcesRequest *)call->req;
    struct sandbox *sb = sandbox_find_or_fail(call, NULL, req->pod_sandbox_id);
    if (!sb)
        return;
    if (!sb->rec.cgroup_path || !call->cri->cgroup2_mount) {
        cri_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                 "UpdatePodSandboxResources: pod `%s` has no cgroup", sb->rec.id);
        return;
    }
    /* The sandbox's own cgroup: kubelet sets the limits of the pod's cgroup
     * (the parent) itself; this one holds what the sandbox runs. */
    struct update_job *j = job_for(call, req->resources);
    if (!j)
        return;
    j->pod = true;
    memcpy(j->id, sb->rec.id, sizeof(j->id));
    if (!(j->cgroup = strdup(sb->rec.cgroup_path))) {
        update_job_free(j);
        cri_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    uv_queue_work(call->cri->loop, &j->req, update_work, update_done);
}
