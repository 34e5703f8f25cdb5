/* libFuzzer target: config.json (outside input) through oci_spec_parse and,
 * for what parses, the process object alone (exec --process) and the
 * device rules (`linux.resources.devices` with the rules for
 * `linux.devices`) through the eBPF device program builder, whose every
 * jump must stay inside the program. */
#include <stddef.h>
#include <stdint.h>

#include "oci/cgroup.h"
#include "oci/cgroup_internal.h"
#include "oci/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e = {0};
    struct oci_spec *s = NULL;
    if (oci_spec_parse((const char *)data, size, "/bundle", &s, &e) == 0) {
        json_t *p = json_object_get(s->json, "process");
        struct oci_process proc;
        if (p) {
            /* On failure it leaves what it allocated for the clear. */
            oci_process_parse(p, "process", &proc, &e);
            oci_process_clear(&proc);
        }
        json_t *linux = json_object_get(s->json, "linux");
        json_t *with = NULL;
        if (oci_cgroup_resources_with_devices(json_object_get(linux, "resources"),
                                              json_object_get(linux, "devices"), &with, &e) == 0) {
            struct oci_dev_rule *rules = NULL;
            size_t n = 0;
            if (oci_cgroup_devices_parse(json_object_get(with, "devices"), &rules, &n, &e) == 0) {
                struct bpf_insn *insns = NULL;
                size_t ni = 0;
                if (oci_bpf_devices_build(rules, n, &insns, &ni, &e) == 0) {
                    for (size_t i = 0; i < ni; i++)
                        if (BPF_CLASS(insns[i].code) == BPF_JMP &&
                            BPF_OP(insns[i].code) != BPF_EXIT &&
                            (insns[i].off < 0 || i + 1 + (size_t)insns[i].off >= ni))
                            __builtin_trap();
                    free(insns);
                }
                free(rules);
            }
            json_decref(with);
        }
        oci_spec_free(s);
    }
    return 0;
}
