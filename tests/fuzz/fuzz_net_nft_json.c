/* net/nft: the JSON listing of kinglet's hostports chain (from nft), read
 * to delete one pod's DNAT rules. The input's first byte picks the pod, the
 * rest is the listing. Oracle: the transaction holds nothing but deletions
 * of hostports rules by handle, and exactly those of the rules that the
 * listing says are the pod's (kinglet's table, family inet, that chain,
 * comment "kinglet:<pod>", a positive integer handle), in listing order,
 * as read here independently with jansson. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is(json_t *o, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v && strcmp(v, want) == 0;
}

/* The handles the pod's rules have, by the listing; -1 for bad JSON. */
static long expected(const char *json, const char *pod, long long *out, size_t max)
{
    json_t *root = json_loads(json, 0, NULL);
    if (!root)
        return -1;
    json_t *items = json_object_get(root, "nftables");
    if (!json_is_array(items)) {
        json_decref(root);
        return -1;
    }
    char want[256];
    snprintf(want, sizeof(want), "kinglet:%s", pod);
    size_t n = 0, i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        json_t *r = json_object_get(it, "rule");
        json_t *h = r ? json_object_get(r, "handle") : NULL;
        if (json_is_object(r) && is(r, "comment", want) && is(r, "chain", "hostports") &&
            is(r, "table", NET_NFT_TABLE) && is(r, "family", "inet") && json_is_integer(h) &&
            json_integer_value(h) > 0 && n < max)
            out[n++] = json_integer_value(h);
    }
    json_decref(root);
    return (long)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const pods[] = {
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "p", "a.b-c_d"};
    if (size < 1 || size > 1 << 20)
        return 0;
    const char *pod = pods[data[0] % 3];
    char *json = malloc(size);
    if (!json)
        return 0;
    memcpy(json, data + 1, size - 1);
    json[size - 1] = '\0';
    struct buf out = {0};
    struct err err = {0};
    static long long want[1 << 16];
    long nwant = expected(json, pod, want, sizeof(want) / sizeof(want[0]));
    int r = net_nft_pod_delete_build(json, pod, &out, &err);
    if ((r == 0) != (nwant >= 0))
        __builtin_trap(); /* refused what parses, or took what does not */
    if (r == 0) {
        if (buf_append(&out, "", 1) < 0)
            __builtin_trap();
        long n = 0;
        for (char *line = (char *)out.data; *line; n++) {
            char *nl = strchr(line, '\n');
            if (!nl)
                __builtin_trap();
            *nl = '\0';
            long long h = 0;
            int used = 0;
            if (sscanf(line, "delete rule inet " NET_NFT_TABLE " hostports handle %lld%n", &h,
                       &used) != 1 ||
                line[used] || n >= nwant || h != want[n])
                __builtin_trap();
            line = nl + 1;
        }
        if (n != nwant)
            __builtin_trap();
    }
    buf_free(&out);
    free(json);
    return 0;
}
