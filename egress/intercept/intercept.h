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
 * TLS 1.3, libsodium's X25519 for mbedtls), P-256 key generation, the random generator
 * every mbedtls call gets, and mbedtls error text.
 * docs/egress-intercept.md describes the whole feature for users and auditors.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_H
#define AIRLOCK_EGRESS_INTERCEPT_H

#include <stddef.h>

#include <mbedtls/ecp.h>

#include "common/error.h"

/* Initialises libsodium and PSA crypto once per process (thread-safe, idempotent).
 * Returns 0 or -EIO with err saying which library failed. Every constructor of this
 * library calls it; callers may call it early to fail at start-up rather than later. */
int intercept_init(struct al_error *err);

/* X25519(k, u) (RFC 7748) by libsodium: what intercept_init registers with mbedtls
 * (mbedtls_ecp_set_x25519_impl, a patch of deploy/mbedtls/) for every Curve25519
 * multiplication. 0, or -1 when the result is all zero. */
int intercept_x25519(unsigned char out[32], const unsigned char k[32], const unsigned char u[32]);

/* ECDSA signer registered with mbedtls (mbedtls_ecdsa_set_sign_impl, a patch of
 * deploy/mbedtls/): P-256 by OpenSSL's libcrypto (constant time, fresh nonce); other curves
 * are declined (MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE: mbedtls signs itself). Writes r then s,
 * len bytes each, into rs; 0 or an MBEDTLS_ERR_ECP_* code. */
int intercept_ecdsa_sign(mbedtls_ecp_group_id grp_id, const unsigned char *d, size_t len,
                         const unsigned char *hash, size_t hlen, unsigned char *rs);

/* A new P-256 key pair into kp (initialised, empty) by OpenSSL's libcrypto: d random in
 * [1, n-1], Q = d*G by its constant-time P-256 code (about 0.02 ms; mbedtls' generic
 * mbedtls_ecp_gen_key took 0.2 ms, one per sandbox CA and one per minted leaf). Falls back
 * to mbedtls_ecp_gen_key if libcrypto has no P-256. 0 or an MBEDTLS_ERR_* code. */
int intercept_ec_gen_p256(mbedtls_ecp_keypair *kp);

/* mbedtls f_rng: libsodium's CSPRNG (thread-safe; ctx unused). */
int intercept_rng(void *ctx, unsigned char *out, size_t len);

/* "X509 - Certificate verification failed..." for an mbedtls error code (static buffer per
 * thread). */
const char *intercept_mbedtls_strerror(int ret);

#endif
