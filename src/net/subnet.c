/* net/subnet: the pure part of pod networking, a leaf of the module that
 * every other file may use: addresses and subnets (parsing, arithmetic of
 * the pool a subnet gives pods), and pod ids with the host interface names
 * derived from them. No I/O. */
#include <arpa/inet.h>
#include <string.h>

#include "net/internal.h"

typedef unsigned __int128 u128;

static u128 addr_to_u128(int family, const uint8_t a[16])
{
    u128 v = 0;
    size_t n = family == AF_INET ? 4 : 16;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | a[i];
    return v;
}

static void u128_to_addr(int family, u128 v, uint8_t a[16])
{
    size_t n = family == AF_INET ? 4 : 16;
    memset(a, 0, 16);
    for (size_t i = n; i-- > 0;) {
        a[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static unsigned bits(int family) { return family == AF_INET ? 32 : 128; }

int net_addr_parse(const char *s, int *ret_family, uint8_t ret[16])
{
    if (!s)
        return -EINVAL;
    memset(ret, 0, 16);
    if (inet_pton(AF_INET, s, ret) == 1) {
        *ret_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, ret) == 1) {
        *ret_family = AF_INET6;
        return 0;
    }
    return -EINVAL;
}

void net_addr_format(int family, const uint8_t addr[16], char *buf, size_t size)
{
    if (!inet_ntop(family, addr, buf, (socklen_t)size) && size)
        buf[0] = '\0';
}

int net_subnet_parse(const char *s, struct net_subnet *ret)
{
    char tmp[NET_SUBNET_STRLEN + 8];
    if (!s || strnlen(s, sizeof(tmp)) >= sizeof(tmp))
        return -EINVAL;
    memcpy(tmp, s, strlen(s) + 1);
    char *slash = strchr(tmp, '/');
    if (!slash || !slash[1] || strlen(slash + 1) > 3)
        return -EINVAL;
    *slash = '\0';
    unsigned prefix = 0;
    for (const char *c = slash + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return -EINVAL;
        prefix = prefix * 10 + (unsigned)(*c - '0');
    }
    struct net_subnet sn = {0};
    if (net_addr_parse(tmp, &sn.family, sn.addr) < 0)
        return -EINVAL;
    unsigned max = sn.family == AF_INET ? 30 : 126;
    if (prefix < 8 || prefix > max)
        return -EINVAL;
    sn.prefix = prefix;
    unsigned n = bits(sn.family);
    u128 v = addr_to_u128(sn.family, sn.addr);
    u128 hostmask = (((u128)1) << (n - prefix)) - 1;
    u128_to_addr(sn.family, v & ~hostmask, sn.addr);
    *ret = sn;
    return 0;
}

void net_subnet_format(const struct net_subnet *s, char *buf, size_t size)
{
    char a[INET6_ADDRSTRLEN];
    net_addr_format(s->family, s->addr, a, sizeof(a));
    snprintf(buf, size, "%s/%u", a, s->prefix);
}

void net_subnet_gateway(const struct net_subnet *s, uint8_t ret[16])
{
    u128_to_addr(s->family, addr_to_u128(s->family, s->addr) + 1, ret);
}

uint64_t net_subnet_pool_size(const struct net_subnet *s)
{
    unsigned hostbits = bits(s->family) - s->prefix;
    if (hostbits >= 64)
        return UINT64_MAX; /* more than anyone can allocate */
    return (((uint64_t)1) << hostbits) - 3;
}

void net_subnet_pool_addr(const struct net_subnet *s, uint64_t n, uint8_t ret[16])
{
    u128_to_addr(s->family, addr_to_u128(s->family, s->addr) + 2 + n, ret);
}

bool net_subnet_contains(const struct net_subnet *s, const uint8_t addr[16])
{
    unsigned hostbits = bits(s->family) - s->prefix;
    u128 mask = ~((((u128)1) << hostbits) - 1);
    return (addr_to_u128(s->family, addr) & mask) == addr_to_u128(s->family, s->addr);
}

int64_t net_subnet_pool_index(const struct net_subnet *s, const uint8_t addr[16])
{
    if (!net_subnet_contains(s, addr))
        return -1;
    u128 off = addr_to_u128(s->family, addr) - addr_to_u128(s->family, s->addr);
    if (off < 2)
        return -1;
    off -= 2;
    if (off >= net_subnet_pool_size(s) || off > INT64_MAX)
        return -1;
    return (int64_t)off;
}

/* ---- pod ids ----------------------------------------------------------- */

bool net_pod_id_valid(const char *id)
{
    if (!id || !id[0] || id[0] == '.')
        return false;
    size_t n = 0;
    for (const char *c = id; *c; c++, n++) {
        if (n >= NET_POD_ID_MAX)
            return false;
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.'))
            return false;
    }
    return true;
}

void net_pod_host_ifname(const char *pod_id, char ret[IFNAMSIZ])
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)pod_id; *c; c++) {
        h ^= *c;
        h *= 0x100000001b3ull;
    }
    snprintf(ret, IFNAMSIZ, "kl%012llx", (unsigned long long)(h & 0xffffffffffffull));
}
