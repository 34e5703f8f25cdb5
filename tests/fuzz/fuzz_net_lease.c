/* net/ipam: lease files (<ipam>/<subnet>/<address>, "<pod id>\n" and flag
 * lines), read back at daemon start to find the pods holding addresses.
 * Input: the first byte picks the family and splits the rest into the
 * file's name and its content. Oracle: a lease that parses has a valid pod
 * id and an address of that family, and the file net_ipam_alloc would write
 * for it (under the canonical name) parses to the same lease. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "net/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int family = data[0] & 1 ? AF_INET6 : AF_INET;
    size_t name_len = (size_t)(data[0] >> 1);
    data++;
    size--;
    if (name_len > size)
        name_len = size;
    char name[128];
    if (name_len >= sizeof(name))
        name_len = sizeof(name) - 1;
    memcpy(name, data, name_len);
    name[name_len] = '\0';
    const char *content = (const char *)data + name_len;
    size_t len = size - name_len;
    struct net_ipam_lease l;
    if (net_ipam_lease_parse(name, content, len, family, &l) != 0)
        return 0;
    if (l.family != family || !net_pod_id_valid(l.pod_id))
        __builtin_trap();
    char canon[INET6_ADDRSTRLEN], text[512];
    net_addr_format(family, l.addr, canon, sizeof(canon));
    int n = snprintf(text, sizeof(text), "%s\n%s", l.pod_id,
                     l.hostports ? NET_IPAM_HOSTPORTS_FLAG "\n" : "");
    struct net_ipam_lease m;
    if (n < 0 || (size_t)n >= sizeof(text) ||
        net_ipam_lease_parse(canon, text, (size_t)n, family, &m) != 0 ||
        memcmp(m.addr, l.addr, 16) != 0 || strcmp(m.pod_id, l.pod_id) != 0 ||
        m.hostports != l.hostports || m.family != l.family)
        __builtin_trap();
    return 0;
}
