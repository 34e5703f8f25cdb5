/* libFuzzer target: the OCI `linux.resources` object (outside input from
 * config.json and `kinglet oci update`) through the cgroup value conversion
 * and the device program builder, plus cgroupsPath resolution and the
 * mountinfo parser on the raw bytes. Pure: nothing touches the system.
 * Oracles: device program jumps stay inside the program; an accepted
 * cgroupsPath resolves to a path that stays below the cgroup root: no
 * `..` or `.` component, no empty one, nothing absolute left. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "oci/cgroup_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether a resolved cgroup path, joined to the root, names the root or
 * something below it: relative, its components neither empty, `.` nor
 * `..`, with no byte that mountinfo or a cgroup file would misread. */
static bool below_root(const char *p)
{
    if (!*p || *p == '/')
        return false;
    for (const char *c = p; *c;) {
        const char *e = strchr(c, '/');
        if (!e)
            e = c + strlen(c);
        size_t len = (size_t)(e - c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        for (const char *q = c; q < e; q++)
            if ((unsigned char)*q < 0x20)
                return false;
        c = *e ? e + 1 : e;
        if (*e && !*c)
            return false; /* a trailing slash: an empty last component */
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    struct err e = {0};
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *out = NULL;
    if (oci_cgroup_mountinfo_find(s, &out) == 0)
        free(out);
    out = NULL;
    if (oci_cgroup_path_resolve(s, "id", &out, &e) == 0) {
        if (!below_root(out))
            __builtin_trap();
        free(out);
    }
    /* relative and absolute forms of the same input: both below the root */
    char *abs = malloc(size + 2);
    if (abs) {
        abs[0] = '/';
        memcpy(abs + 1, s, size + 1);
        out = NULL;
        if (oci_cgroup_path_resolve(abs, "id", &out, &e) == 0) {
            if (!below_root(out))
                __builtin_trap();
            free(out);
        }
        free(abs);
    }
    free(s);

    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    if (!j)
        return 0;
    struct cg_writes w = {0};
    if (oci_cgroup_resources_convert(j, 1 << 20, &w, &e) == 0)
        oci_cgroup_writes_free(&w);
    struct oci_dev_rule *rules = NULL;
    size_t n = 0;
    if (oci_cgroup_devices_parse(json_object_get(j, "devices"), &rules, &n, &e) == 0) {
        struct bpf_insn *insns = NULL;
        size_t ni = 0;
        if (oci_bpf_devices_build(rules, n, &insns, &ni, &e) == 0) {
            /* Every jump stays inside the program. */
            for (size_t i = 0; i < ni; i++)
                if (BPF_CLASS(insns[i].code) == BPF_JMP && BPF_OP(insns[i].code) != BPF_EXIT &&
                    (insns[i].off < 0 || i + 1 + (size_t)insns[i].off >= ni))
                    __builtin_trap();
            free(insns);
        }
        free(rules);
    }
    json_decref(j);
    return 0;
}
