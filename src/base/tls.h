/* base/tls: the TLS policy kinglet's two mbedTLS users share (the streaming
 * server, src/stream/tls.c, and the registry client, src/image/http.c); the
 * library itself is reached through the lazy wrappers of tls_lazy.c. */
#pragma once

#include <mbedtls/ssl.h>

/* TLS 1.2 only (mbedTLS 2.28 has no more), ECDHE over X25519, P-256 or
 * P-384, SHA-2 signatures, no renegotiation, random bytes from the kernel;
 * ciphersuites: a 0-terminated list of forward-secret AEAD suites, in the
 * caller's order of preference. */
void tls_conf_policy(mbedtls_ssl_config *conf, const int *ciphersuites);
