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
 * TLS 1.3, libsodium's X25519 and libcrypto's P-256 signatures for mbedtls), P-256 key
 * generation, the random generator every mbedtls call gets, and mbedtls error text.
 * docs/egress-intercept.md describes the whole feature for users and auditors.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_H
#define AIRLOCK_EGRESS_INTERCEPT_H

#include <stddef.h>

#include <mbedtls/ecp.h>
#include <mbedtls/pk.h>

#include "common/error.h"

/* Initialises libsodium and PSA crypto once per process (thread-safe, idempotent).
 * Returns 0 or -EIO with err saying which library failed. Every constructor of this
 * library calls it; callers may call it early to fail at start-up rather than later. */
int intercept_init(struct al_error *err);

/* X25519(k, u) (RFC 7748) by libsodium: what intercept_init registers with mbedtls
 * (mbedtls_ecp_set_x25519_impl, a patch of deploy/mbedtls/) for every Curve25519
 * multiplication. 0, or -1 when the result is all zero. */
int intercept_x25519(unsigned char out[32], const unsigned char k[32], const unsigned char u[32]);

/* libcrypto's copy of one P-256 private key that mbedtls holds: while it exists, mbedtls'
 * signatures by that key (mbedtls_pk_sign: TLS CertificateVerify, X.509) are made by
 * OpenSSL's constant-time P-256 through its EVP API, about six times faster than mbedtls'
 * own. The EVP key is built once per key, not per signature, and its private scalar is
 * cleared when the signer is freed. Thread-safe. */
struct intercept_signer;

/* ECDSA signer registered with mbedtls (mbedtls_ecdsa_set_sign_impl, a patch of
 * deploy/mbedtls/): the signature by the intercept_signer of d (P-256, fresh nonce). Declines
 * (MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE: mbedtls signs itself) other curves and keys no
 * signer exists for. Writes r then s, len bytes each, into rs; 0 or an MBEDTLS_ERR_ECP_*
 * code. */
int intercept_ecdsa_sign(mbedtls_ecp_group_id grp_id, const unsigned char *d, size_t len,
                         const unsigned char *hash, size_t hlen, unsigned char *rs);

/* A new P-256 key pair by OpenSSL's libcrypto (d random in [1, n-1], Q = d*G by its
 * constant-time code, about 0.03 ms; mbedtls_ecp_gen_key takes 0.2 ms): mbedtls' copy into
 * pk (initialised, empty; set up here as an EC key), libcrypto's as *signer, which the
 * caller frees with (or before) pk. Needs intercept_init. 0 or an MBEDTLS_ERR_* code. */
int intercept_key_gen_p256(mbedtls_pk_context *pk, struct intercept_signer **signer);

/* The signer of a P-256 key pair mbedtls already holds (parsed from DER, say). -EINVAL with
 * err saying what is wrong when pk is not a P-256 key pair, its public point is not on the
 * curve or its private key is out of range; -ENOMEM; -EIO when intercept_init fails. It
 * does not check that Q = d*G (that costs more than minting a leaf): a key whose halves do
 * not match signs what its verifiers reject. */
int intercept_signer_new(const mbedtls_pk_context *pk, struct intercept_signer **out,
                         struct al_error *err);

/* Unregisters and frees s, clearing libcrypto's copy of the key (NULL is fine). A
 * signature under way keeps the key until it is made. */
void intercept_signer_free(struct intercept_signer *s);

/* mbedtls f_rng: libsodium's CSPRNG (thread-safe; ctx unused). */
int intercept_rng(void *ctx, unsigned char *out, size_t len);

/* "X509 - Certificate verification failed..." for an mbedtls error code (static buffer per
 * thread). */
const char *intercept_mbedtls_strerror(int ret);

#endif
