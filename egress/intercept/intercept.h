/* egress/intercept/intercept: what every module of the interception library shares.
 *
 * The library (airlock_intercept) is the INSPECT branch of airlock-egress: it terminates a
 * sandbox's TLS with a leaf certificate minted by that sandbox's own CA, decides and edits
 * each request inside, injects credentials fetched from airlock-vault, talks TLS to the real
 * upstream with full verification, and scrubs any injected secret the upstream echoes back.
 *
 *   ca.h       per-sandbox CA (P-256, X.509 name constraints) and the leaf cache
 *   tls.h      TLS toward the sandbox (server) and the upstream (client) on non-blocking fds
 *   pool.h     idle upstream TLS connections, reused per (sandbox, host, port)
 *   secrets.h  the vault client: fetch, cache, invalidation by the changes feed
 *   request.h  "HTTP inside": per-request checks of intercepted traffic
 *   inject.h   credential injection, its gates, placeholders
 *   scrub.h    response scrubbing (multi-pattern matcher, encodings, gzip)
 *
 * Owns here: one-time initialisation of the crypto libraries (libsodium, PSA for mbedtls'
 * TLS 1.3), the random generator every mbedtls call gets, and mbedtls error text.
 * docs/egress-intercept.md describes the whole feature for users and auditors.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_H
#define AIRLOCK_EGRESS_INTERCEPT_H

#include <stddef.h>

#include "common/error.h"

/* Initialises libsodium and PSA crypto once per process (thread-safe, idempotent).
 * Returns 0 or -EIO with err saying which library failed. Every constructor of this
 * library calls it; callers may call it early to fail at start-up rather than later. */
int intercept_init(struct al_error *err);

/* mbedtls f_rng: libsodium's CSPRNG (thread-safe; ctx unused). */
int intercept_rng(void *ctx, unsigned char *out, size_t len);

/* "X509 - Certificate verification failed..." for an mbedtls error code (static buffer per
 * thread). */
const char *intercept_mbedtls_strerror(int ret);

#endif
