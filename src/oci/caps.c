/* oci/caps: process.capabilities with libcap, all five sets.
 *
 * The bounding set is reduced while we still hold CAP_SETPCAP (before the
 * uid change); the other sets are installed after it (PR_SET_KEEPCAPS keeps
 * the permitted set across setuid), ambient last. Capabilities the running
 * kernel does not know were skipped by the parser. */
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include "oci/internal.h"

int oci_caps_drop_bounding(const struct oci_process *p, struct err *err)
{
    if (!p->has_caps)
        return 0;
    int max = (int)cap_max_bits();
    for (int c = 0; c < max; c++) {
        if (p->caps[OCI_CAP_BOUNDING] & (1ull << c))
            continue;
        if (cap_drop_bound((cap_value_t)c) < 0 && errno != EINVAL)
            return err_set(err, errno, "`process.capabilities.bounding`: drop %s",
                           cap_to_name((cap_value_t)c));
    }
    return 0;
}

int oci_caps_apply(const struct oci_process *p, struct err *err)
{
    if (!p->has_caps)
        return 0;
    cap_t c = cap_init();
    if (!c)
        return err_set(err, errno, "cap_init");
    int max = (int)cap_max_bits();
    static const struct {
        int set;
        cap_flag_t flag;
    } map[] = {
        {OCI_CAP_EFFECTIVE, CAP_EFFECTIVE},
        {OCI_CAP_PERMITTED, CAP_PERMITTED},
        {OCI_CAP_INHERITABLE, CAP_INHERITABLE},
    };
    for (size_t i = 0; i < ARRAY_SIZE(map); i++)
        for (int v = 0; v < max; v++) {
            if (!(p->caps[map[i].set] & (1ull << v)))
                continue;
            cap_value_t cv = (cap_value_t)v;
            if (cap_set_flag(c, map[i].flag, 1, &cv, CAP_SET) < 0) {
                cap_free(c);
                return err_set(err, errno, "capability %d", v);
            }
        }
    int r = cap_set_proc(c);
    int e = errno;
    cap_free(c);
    if (r < 0)
        return err_set(err, e, "`process.capabilities`: set the process capabilities");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return err_set(err, errno, "clear the ambient capabilities");
    for (int v = 0; v < max; v++) {
        if (!(p->caps[OCI_CAP_AMBIENT] & (1ull << v)))
            continue;
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, (unsigned long)v, 0, 0) < 0)
            return err_set(err, errno, "`process.capabilities.ambient`: raise %s",
                           cap_to_name((cap_value_t)v));
    }
    return 0;
}
