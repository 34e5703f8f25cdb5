/* LinuxContainerResources → the OCI `linux.resources` object that
 * oci_cgroup_create applies (pure). cpu_shares goes through as OCI shares;
 * oci converts shares to cgroup v2 weight as runc does. */
#include <jansson.h>
#include <string.h>

#include "cri/internal.h"

json_t *cri_resources_to_oci(const Runtime__V1__LinuxContainerResources *r)
{
    if (!r)
        return NULL;
    json_t *o = json_object();
    json_t *cpu = json_object(), *mem = json_object();
    if (!o || !cpu || !mem) {
        json_decref(o);
        json_decref(cpu);
        json_decref(mem);
        return NULL;
    }
    if (r->cpu_shares > 0)
        json_object_set_new(cpu, "shares", json_integer(r->cpu_shares));
    if (r->cpu_quota > 0)
        json_object_set_new(cpu, "quota", json_integer(r->cpu_quota));
    if (r->cpu_period > 0)
        json_object_set_new(cpu, "period", json_integer(r->cpu_period));
    if (r->cpuset_cpus && *r->cpuset_cpus)
        json_object_set_new(cpu, "cpus", json_string(r->cpuset_cpus));
    if (r->cpuset_mems && *r->cpuset_mems)
        json_object_set_new(cpu, "mems", json_string(r->cpuset_mems));
    if (r->memory_limit_in_bytes > 0)
        json_object_set_new(mem, "limit", json_integer(r->memory_limit_in_bytes));
    if (r->memory_swap_limit_in_bytes > 0)
        json_object_set_new(mem, "swap", json_integer(r->memory_swap_limit_in_bytes));
    if (json_object_size(cpu))
        json_object_set(o, "cpu", cpu);
    if (json_object_size(mem))
        json_object_set(o, "memory", mem);
    json_decref(cpu);
    json_decref(mem);
    if (r->n_hugepage_limits) {
        json_t *hp = json_array();
        for (size_t i = 0; hp && i < r->n_hugepage_limits; i++)
            json_array_append_new(hp, json_pack("{s:s,s:I}", "pageSize",
                                                r->hugepage_limits[i]->page_size, "limit",
                                                (json_int_t)r->hugepage_limits[i]->limit));
        json_object_set_new(o, "hugepageLimits", hp);
    }
    if (r->n_unified) {
        json_t *u = json_object();
        for (size_t i = 0; u && i < r->n_unified; i++)
            json_object_set_new(u, r->unified[i]->key, json_string(r->unified[i]->value));
        json_object_set_new(o, "unified", u);
    }
    if (!json_object_size(o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

bool cri_cgroup_parent_of(struct cri *cri, char *path)
{
    const char *m = cri->cgroup2_mount;
    if (!m)
        return false;
    size_t len = strcmp(m, "/") ? strlen(m) : 0;
    if (strncmp(path, m, len) != 0 || path[len] != '/')
        return false;
    memmove(path, path + len, strlen(path + len) + 1);
    char *slash = strrchr(path, '/');
    if (slash == path)
        path[1] = '\0';
    else
        *slash = '\0';
    return true;
}
