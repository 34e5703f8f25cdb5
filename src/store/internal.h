/* Private to src/store: what the record kinds share. */
#pragma once

#include "store/store.h"

/* Base64 (RFC 4648, with padding) of opaque blobs; decode: -EINVAL for
 * malformed input, -ENOMEM. */
char *store_b64_encode(const uint8_t *in, size_t len);
int store_b64_decode(const char *in, uint8_t **ret, size_t *ret_len);
