/* libFuzzer target: pod CIDRs as kubelet sends them (UpdateRuntimeConfig)
 * or an operator configures them, through net_config_set_subnets; accepted
 * subnets must round-trip and keep the pool arithmetic in range. */
#include <string.h>

#include "net/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512];
    if (size >= sizeof(text))
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct net_config cfg;
    net_config_init(&cfg);
    struct err e = {0};
    if (net_config_set_subnets(&cfg, text, &e) < 0)
        return 0;
    for (size_t i = 0; i < cfg.nsubnets; i++) {
        const struct net_subnet *s = &cfg.subnets[i];
        char back[NET_SUBNET_STRLEN];
        struct net_subnet again;
        net_subnet_format(s, back, sizeof(back));
        if (net_subnet_parse(back, &again) < 0 || memcmp(&again, s, sizeof(again)) != 0)
            __builtin_trap();
        uint8_t a[16];
        uint64_t n = net_subnet_pool_size(s);
        net_subnet_pool_addr(s, n - 1, a);
        if (!net_subnet_contains(s, a) || net_subnet_pool_index(s, a) != (int64_t)(n - 1))
            if (n <= INT64_MAX)
                __builtin_trap();
    }
    return 0;
}
