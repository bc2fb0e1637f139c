/* vault/vault_file: the vault file format and the keys that protect it (internal to vault/,
 * and to its tests and fuzz target).
 *
 * The file is text, one record per line, so that an error can name a line and a secret:
 *
 *   airlock-vault 1
 *   H <blake2b(header json), 64 hex> <header json>
 *   S <mac, 64 hex> <secret json>          one per secret, sorted by name
 *   D <mac, 64 hex> <tombstone json>       deletions remembered for "changes since"
 *   T <mac, 64 hex> <trailer json>         generation and counts; its MAC covers every byte
 *                                          of the file before it, so nothing can be added,
 *                                          removed, reordered or cut without detection
 *
 * Header: {"file_id","created","kdf":{"type":"keyfile"} | {"type":"argon2id","salt",
 * "opslimit","memlimit"},"key":{"nonce","wrapped"}}: the 32-byte data key (DK) wrapped with
 * XChaCha20-Poly1305 under the master key (MK), associated data "airlock-vault-dk-v1" +
 * file_id. The header carries a plain checksum so that a damaged header ("corrupted") is told
 * apart from a wrong key ("wrong master key").
 * From DK: enc = KDF(DK, 1, "vaultenc"), mac = KDF(DK, 2, "vaultmac") (crypto_kdf).
 * Entry MAC = BLAKE2b-256 keyed with mac over "<letter> <json>". Values: XChaCha20-Poly1305
 * under enc, random 24-byte nonce, associated data "airlock-vault-value-v1\0<file_id>\0<name>
 * \0<version>", so a value cannot be moved to another name, version or vault.
 */
#ifndef AIRLOCK_VAULT_FILE_H
#define AIRLOCK_VAULT_FILE_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#include "vault/vault.h"

#define VAULT_FILE_MAGIC  "airlock-vault 1"
#define VAULT_FILE_MAX    (64u * 1024 * 1024)
#define VAULT_LINE_MAX    (2u * 1024 * 1024)
#define VAULT_KDF_OPS_MAX 20
#define VAULT_KDF_MEM_MIN (8ull * 1024 * 1024)
#define VAULT_KDF_MEM_MAX (1024ull * 1024 * 1024)

enum vault_kdf_type { VAULT_KDF_KEYFILE = 0, VAULT_KDF_ARGON2ID = 1 };

struct vault_header {
    char file_id[33];
    char created[40];
    enum vault_kdf_type kdf;
    unsigned char salt[crypto_pwhash_argon2id_SALTBYTES];
    uint64_t opslimit, memlimit;
    unsigned char wrap_nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
    unsigned char wrapped[32 + crypto_aead_xchacha20poly1305_ietf_ABYTES];
};

/* Key material, in one sodium_malloc'd block. */
struct vault_keys {
    unsigned char dk[32];
    unsigned char enc[32];
    unsigned char mac[32];
};

int vault_keys_alloc(struct vault_keys **k);
void vault_keys_free(struct vault_keys *k);
void vault_keys_derive(struct vault_keys *k); /* enc and mac from dk */

/* MK from a passphrase with the header's Argon2id parameters (mk: 32 bytes, locked memory). */
int vault_master_from_passphrase(const char *pass, size_t len, const struct vault_header *h,
                                 unsigned char *mk, struct al_error *err);
/* Wraps k->dk under mk into h (fresh nonce). */
void vault_dk_wrap(const unsigned char *mk, struct vault_header *h, const struct vault_keys *k);
/* Unwraps into k (and derives enc/mac); -EKEYREJECTED when mk is not the right key. */
int vault_dk_unwrap(const unsigned char *mk, const struct vault_header *h, struct vault_keys *k);

int vault_value_seal(const struct vault_keys *k, const char *file_id, const char *name,
                     const struct vault_value *v, struct vault_version *ver);
/* -EBADMSG when the ciphertext does not authenticate (tampered, or moved from elsewhere). */
int vault_value_open(const struct vault_keys *k, const char *file_id, const char *name,
                     const struct vault_version *ver, struct vault_value *out);

/* Parses the magic and the header; *body_off is where the entries start. */
int vault_file_header(const char *data, size_t len, struct vault_header *h, size_t *body_off,
                      struct al_error *err);
/* Parses and verifies the entries and the trailer with the keys (those of the header
 * vault_file_header read). On failure err names the line (and the secret when it can) and
 * *out is untouched. */
int vault_file_body(const char *data, size_t len, size_t body_off, const struct vault_keys *k,
                    struct vault_catalog *out, struct al_error *err);
/* Serialises; *out is malloc'd. */
int vault_file_write(const struct vault_header *h, const struct vault_keys *k,
                     const struct vault_catalog *c, const char *written, char **out, size_t *len);

/* Catalog editing helpers (the store uses them). */
void vault_secret_clear(struct vault_secret *s);
void vault_version_clear(struct vault_version *v);

#endif
