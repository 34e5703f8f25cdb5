/* libnftnl through wrappers that load it on first use (see src/base/lazy.c):
 * only pod network setup and teardown build nf_tables messages, and a daemon
 * without host ports never maps it. */
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>

#include "base/base.h"

static struct lazy_lib nftnl_lib = {"libnftnl.so.11", "libnftnl11", NULL};

LAZY_WRAP(nftnl_lib, struct nlmsghdr *, nftnl_nlmsg_build_hdr,
          (char *buf, uint16_t type, uint16_t family, uint16_t flags, uint32_t seq),
          (buf, type, family, flags, seq))
LAZY_WRAP(nftnl_lib, struct nlmsghdr *, nftnl_batch_begin, (char *buf, uint32_t seq), (buf, seq))
LAZY_WRAP(nftnl_lib, struct nlmsghdr *, nftnl_batch_end, (char *buf, uint32_t seq), (buf, seq))

LAZY_WRAP(nftnl_lib, struct nftnl_table *, nftnl_table_alloc, (void), ())
LAZY_WRAP(nftnl_lib, void, nftnl_table_free, (const struct nftnl_table *t), (t))
LAZY_WRAP(nftnl_lib, int, nftnl_table_set_str,
          (struct nftnl_table * t, uint16_t attr, const char *s), (t, attr, s))
LAZY_WRAP(nftnl_lib, void, nftnl_table_set_u32, (struct nftnl_table * t, uint16_t attr, uint32_t v),
          (t, attr, v))
LAZY_WRAP(nftnl_lib, void, nftnl_table_nlmsg_build_payload,
          (struct nlmsghdr * nlh, const struct nftnl_table *t), (nlh, t))

LAZY_WRAP(nftnl_lib, struct nftnl_chain *, nftnl_chain_alloc, (void), ())
LAZY_WRAP(nftnl_lib, void, nftnl_chain_free, (const struct nftnl_chain *c), (c))
LAZY_WRAP(nftnl_lib, int, nftnl_chain_set_str,
          (struct nftnl_chain * c, uint16_t attr, const char *s), (c, attr, s))
LAZY_WRAP(nftnl_lib, void, nftnl_chain_set_u32, (struct nftnl_chain * c, uint16_t attr, uint32_t v),
          (c, attr, v))
LAZY_WRAP(nftnl_lib, void, nftnl_chain_set_s32, (struct nftnl_chain * c, uint16_t attr, int32_t v),
          (c, attr, v))
LAZY_WRAP(nftnl_lib, void, nftnl_chain_nlmsg_build_payload,
          (struct nlmsghdr * nlh, const struct nftnl_chain *c), (nlh, c))

LAZY_WRAP(nftnl_lib, struct nftnl_rule *, nftnl_rule_alloc, (void), ())
LAZY_WRAP(nftnl_lib, void, nftnl_rule_free, (const struct nftnl_rule *r), (r))
LAZY_WRAP(nftnl_lib, int, nftnl_rule_set_str, (struct nftnl_rule * r, uint16_t attr, const char *s),
          (r, attr, s))
LAZY_WRAP(nftnl_lib, void, nftnl_rule_set_u64, (struct nftnl_rule * r, uint16_t attr, uint64_t v),
          (r, attr, v))
LAZY_WRAP(nftnl_lib, int, nftnl_rule_set_data,
          (struct nftnl_rule * r, uint16_t attr, const void *data, uint32_t len),
          (r, attr, data, len))
LAZY_WRAP(nftnl_lib, void, nftnl_rule_add_expr, (struct nftnl_rule * r, struct nftnl_expr *e),
          (r, e))
LAZY_WRAP(nftnl_lib, void, nftnl_rule_nlmsg_build_payload,
          (struct nlmsghdr * nlh, struct nftnl_rule *r), (nlh, r))

LAZY_WRAP(nftnl_lib, struct nftnl_expr *, nftnl_expr_alloc, (const char *name), (name))
LAZY_WRAP(nftnl_lib, void, nftnl_expr_free, (const struct nftnl_expr *e), (e))
LAZY_WRAP(nftnl_lib, int, nftnl_expr_set,
          (struct nftnl_expr * e, uint16_t type, const void *data, uint32_t len),
          (e, type, data, len))
LAZY_WRAP(nftnl_lib, void, nftnl_expr_set_u32, (struct nftnl_expr * e, uint16_t type, uint32_t v),
          (e, type, v))
LAZY_WRAP(nftnl_lib, int, nftnl_expr_set_str, (struct nftnl_expr * e, uint16_t type, const char *s),
          (e, type, s))

/* Reading messages back: the unit tests and the fuzz target's oracle. */
LAZY_WRAP(nftnl_lib, int, nftnl_rule_nlmsg_parse,
          (const struct nlmsghdr *nlh, struct nftnl_rule *r), (nlh, r))
LAZY_WRAP(nftnl_lib, int, nftnl_rule_snprintf,
          (char *buf, size_t size, const struct nftnl_rule *r, uint32_t type, uint32_t flags),
          (buf, size, r, type, flags))
LAZY_WRAP(nftnl_lib, bool, nftnl_rule_is_set, (const struct nftnl_rule *r, uint16_t attr),
          (r, attr))
LAZY_WRAP(nftnl_lib, const char *, nftnl_rule_get_str, (const struct nftnl_rule *r, uint16_t attr),
          (r, attr))
LAZY_WRAP(nftnl_lib, uint32_t, nftnl_rule_get_u32, (const struct nftnl_rule *r, uint16_t attr),
          (r, attr))
LAZY_WRAP(nftnl_lib, uint64_t, nftnl_rule_get_u64, (const struct nftnl_rule *r, uint16_t attr),
          (r, attr))
LAZY_WRAP(nftnl_lib, const void *, nftnl_rule_get_data,
          (const struct nftnl_rule *r, uint16_t attr, uint32_t *len), (r, attr, len))
LAZY_WRAP(nftnl_lib, int, nftnl_udata_parse,
          (const void *data, uint32_t len, nftnl_udata_cb_t cb, void *cb_data),
          (data, len, cb, cb_data))
LAZY_WRAP(nftnl_lib, uint8_t, nftnl_udata_type, (const struct nftnl_udata *attr), (attr))
LAZY_WRAP(nftnl_lib, uint8_t, nftnl_udata_len, (const struct nftnl_udata *attr), (attr))
LAZY_WRAP(nftnl_lib, void *, nftnl_udata_get, (const struct nftnl_udata *attr), (attr))
