/* controlplane/ids: the identifiers and credentials airlockd hands out.
 *
 * Owns: sandbox ids (E2B style: 20 characters of [a-z0-9]), envd access tokens (one per
 * sandbox, 256 random bits as hex), API keys ("e2b_" + 40 hex: the shape E2B SDKs up to
 * 2.45 insist on) and API key ids, their digests (BLAKE2b-256; only digests of keys are
 * stored), and constant-time comparison of presented credentials.
 */
#ifndef AIRLOCK_CP_IDS_H
#define AIRLOCK_CP_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CP_ID_LEN     20 /* sandbox id */
#define CP_TOKEN_LEN  64 /* envd access token (hex) */
#define CP_APIKEY_LEN 44 /* "e2b_" + 40 hex */
#define CP_KEYID_LEN  12 /* "key_" + 8 hex */
#define CP_DIGEST_LEN 32

void cp_sandbox_id_new(char out[CP_ID_LEN + 1]);
/* A syntactically valid sandbox id: 1..63 bytes of [a-z0-9_-] (ours are 20 of [a-z0-9]; the
 * wider set only bounds what a client may send before it is looked up). */
bool cp_sandbox_id_valid(const char *s);

void cp_token_new(char out[CP_TOKEN_LEN + 1]);
void cp_apikey_new(char out[CP_APIKEY_LEN + 1]);
void cp_keyid_new(char out[CP_KEYID_LEN + 1]);
/* "e2b_" followed by 8..128 lowercase hex digits (what E2B SDKs accept). */
bool cp_apikey_wellformed(const char *s);

/* BLAKE2b-256 of a credential's bytes. */
void cp_digest(const char *s, size_t len, uint8_t out[CP_DIGEST_LEN]);
void cp_digest_hex(const uint8_t d[CP_DIGEST_LEN], char out[2 * CP_DIGEST_LEN + 1]);
/* Constant-time equality of two digests. */
bool cp_digest_equal(const uint8_t a[CP_DIGEST_LEN], const uint8_t b[CP_DIGEST_LEN]);
/* Constant-time check of a presented credential against the expected one: both are
 * digested first, so neither the content nor the length leaks through timing. */
bool cp_secret_equal(const char *presented, size_t plen, const char *expected, size_t elen);

#endif
