/* libFuzzer target: an OCI container's state.json as read back by every
 * command after create (state, start, kill, delete, exec), which a crash or
 * another process may have left in any shape. For what parses, the record
 * must be one that create could have written (a pid we may signal, absolute
 * paths without `..`, a valid id), and must survive a write and a read back
 * unchanged, field by field. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_record(const struct oci_record *a, const struct oci_record *b)
{
    if (strcmp(a->id, b->id) || strcmp(a->bundle, b->bundle) || strcmp(a->cgroup, b->cgroup) ||
        a->pid != b->pid || a->pid_start != b->pid_start || a->monitor != b->monitor ||
        a->monitor_start != b->monitor_start || a->created_ns != b->created_ns ||
        a->creating != b->creating || !a->annotations_json != !b->annotations_json ||
        (a->annotations_json && strcmp(a->annotations_json, b->annotations_json)))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20) /* what oci_record_read reads at most */
        return 0;
    struct err e = {0};
    struct oci_record rec;
    if (oci_record_parse((const char *)data, size, &rec, &e) < 0) {
        if (e.code != EINVAL && e.code != ENOMEM)
            __builtin_trap();
        return 0;
    }
    /* Nothing that makes kill(2) reach beyond one process of ours. */
    if (rec.pid < 0 || rec.pid > OCI_PID_MAX || rec.monitor < 0 || rec.monitor > OCI_PID_MAX)
        __builtin_trap();
    if (oci_id_validate(rec.id, NULL) < 0 || rec.bundle[0] != '/' ||
        (rec.cgroup[0] && rec.cgroup[0] != '/') || strstr(rec.bundle, "/../") ||
        strstr(rec.cgroup, "/../"))
        __builtin_trap();

    char *text = NULL;
    if (oci_record_format(&rec, &text, &e) == 0) {
        struct oci_record back;
        if (oci_record_parse(text, strlen(text), &back, &e) < 0)
            __builtin_trap(); /* we cannot read what we wrote */
        same_record(&rec, &back);
        char *again = NULL;
        if (oci_record_format(&back, &again, &e) == 0) {
            if (strcmp(text, again))
                __builtin_trap();
            free(again);
        }
        oci_record_clear(&back);
        free(text);
    }
    oci_record_clear(&rec);
    return 0;
}
