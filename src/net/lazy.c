/* libnftables through wrappers that load it on first use (see
 * src/base/lazy.c): only pod network setup and teardown need it. */
#include <nftables/libnftables.h>

#include "base/base.h"

static struct lazy_lib nft_lib = {"libnftables.so.1", "libnftables1", NULL};

LAZY_WRAP(nft_lib, int, nft_ctx_buffer_error, (struct nft_ctx * ctx), (ctx))
LAZY_WRAP(nft_lib, int, nft_ctx_buffer_output, (struct nft_ctx * ctx), (ctx))
LAZY_WRAP(nft_lib, void, nft_ctx_free, (struct nft_ctx * ctx), (ctx))
LAZY_WRAP(nft_lib, const char *, nft_ctx_get_error_buffer, (struct nft_ctx * ctx), (ctx))
LAZY_WRAP(nft_lib, const char *, nft_ctx_get_output_buffer, (struct nft_ctx * ctx), (ctx))
LAZY_WRAP(nft_lib, struct nft_ctx *, nft_ctx_new, (uint32_t flags), (flags))
LAZY_WRAP(nft_lib, void, nft_ctx_output_set_flags, (struct nft_ctx * ctx, unsigned int flags),
          (ctx, flags))
LAZY_WRAP(nft_lib, int, nft_run_cmd_from_buffer, (struct nft_ctx * nft, const char *buf),
          (nft, buf))
