/* libFuzzer target: a CDI spec file (outside input: any driver may write
 * one into /etc/cdi) through cdi_spec_parse, as YAML when the first byte
 * is odd, else as JSON; for what parses, every device resolved and its
 * edits applied to a small OCI spec, which must stay all-or-nothing. The
 * host's part (cdi_edits_fill) is stood in for: a node without a type
 * gets "c". */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cdi/cdi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fill(json_t *edits)
{
    size_t i, k;
    json_t *e, *dn;
    json_array_foreach(edits, i, e)
    {
        json_array_foreach(json_object_get(e, "deviceNodes"), k, dn)
        {
            if (!json_string_length(json_object_get(dn, "type")))
                json_object_set_new(dn, "type", json_string("c"));
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool yaml = data[0] & 1;
    struct err e = {0};
    json_t *spec = NULL;
    if (cdi_spec_parse((const char *)data + 1, size - 1, yaml, &spec, &e) < 0)
        return 0;
    const char *kind = json_string_value(json_object_get(spec, "kind"));
    struct cdi_file file = {.path = "/etc/cdi/fuzz", .spec = spec};
    struct cdi_registry reg = {.files = &file, .n = 1};
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        char name[1024];
        snprintf(name, sizeof(name), "%s=%s", kind, json_string_value(json_object_get(d, "name")));
        char *names[] = {name};
        json_t *edits = NULL;
        if (cdi_resolve(&reg, names, 1, &edits, &e) < 0) {
            if (strlen(name) < sizeof(name) - 1 && cdi_name_valid(name))
                __builtin_trap(); /* a device of a valid spec resolves */
            continue;
        }
        fill(edits);
        json_t *oci = json_loads("{\"process\":{\"env\":[\"A=1\"],\"user\":{\"uid\":5}},"
                                 "\"mounts\":[{\"destination\":\"/proc\"}],\"linux\":{}}",
                                 0, NULL);
        json_t *before = json_deep_copy(oci);
        if (oci && before && cdi_edits_apply(oci, edits, i & 1, &e) < 0 && e.code != ENOMEM &&
            !json_equal(oci, before))
            __builtin_trap(); /* a failed apply left edits behind */
        json_decref(before);
        json_decref(oci);
        json_decref(edits);
    }
    json_decref(spec);
    return 0;
}
