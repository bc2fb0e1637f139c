/* controlplane/store: airlockd's state in SQLite (<state>/airlockd.db).
 *
 * Owns: the schema (sandboxes, api_keys, meta) and its version, WAL mode, and every query.
 * Crash safety: WAL with synchronous=NORMAL, one transaction per change, so a killed
 * airlockd (kill -9) loses nothing it answered; a power cut can only lose the last changes,
 * never leave a torn database. Checkpoints (the only fsyncs) run on a thread of the
 * store's own, never on the caller's. Used by airlockd (one connection, on its event loop) and
 * by the CLI (`airlock apikey`), concurrently: busy_timeout serialises writers, and
 * cp_store_changed() tells airlockd that another connection wrote (PRAGMA data_version).
 * The database file is created with mode 0600.
 */
#ifndef AIRLOCK_CP_STORE_H
#define AIRLOCK_CP_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "record.h"

#define CP_STORE_SCHEMA_VERSION 1

struct cp_store;

int cp_store_open(const char *path, struct cp_store **out, struct al_error *err);
void cp_store_close(struct cp_store *s);
/* True if another connection changed the database since the last call. */
bool cp_store_changed(struct cp_store *s);
/* Checkpoints completed by the store's checkpoint thread (see store.c). */
uint64_t cp_store_checkpoints(struct cp_store *s);

/* ---- sandboxes ---------------------------------------------------------------------- */
/* Inserts or replaces the row of r->id. */
int cp_store_sb_save(struct cp_store *s, const struct cp_sb_record *r, struct al_error *err);
int cp_store_sb_delete(struct cp_store *s, const char *id, struct al_error *err);
/* Loads one row into r (initialised by the caller with cp_sb_record_init); -ENOENT. */
int cp_store_sb_load(struct cp_store *s, const char *id, struct cp_sb_record *r,
                     struct al_error *err);
/* Calls fn for every stored sandbox, ordered by seq; r is valid during the call only.
 * A row that cannot be read is reported through bad (may be NULL) and skipped. */
int cp_store_sb_foreach(struct cp_store *s, int (*fn)(const struct cp_sb_record *r, void *arg),
                        void (*bad)(const char *id, const char *why, void *arg), void *arg,
                        struct al_error *err);
/* The next sequence number (persisted, never reused within one database). */
int cp_store_next_seq(struct cp_store *s, uint64_t *out, struct al_error *err);

/* ---- API keys ----------------------------------------------------------------------- */
int cp_store_key_insert(struct cp_store *s, const struct cp_apikey *k, struct al_error *err);
/* By digest; -ENOENT. Revoked keys are returned too (check revoked_ns). */
int cp_store_key_find(struct cp_store *s, const uint8_t digest[CP_DIGEST_LEN],
                      struct cp_apikey *out, struct al_error *err);
/* By id or name; -ENOENT, -EEXIST when a name is ambiguous. */
int cp_store_key_get(struct cp_store *s, const char *id_or_name, struct cp_apikey *out,
                     struct al_error *err);
int cp_store_key_list(struct cp_store *s, struct cp_apikey **out, size_t *n, struct al_error *err);
int cp_store_key_revoke(struct cp_store *s, const char *id, uint64_t when_ns, struct al_error *err);
int cp_store_key_touch(struct cp_store *s, const char *id, uint64_t when_ns);
/* How many keys are not revoked. */
int cp_store_key_count_valid(struct cp_store *s, size_t *out, struct al_error *err);

/* ---- meta --------------------------------------------------------------------------- */
int cp_store_meta_get(struct cp_store *s, const char *key, char *out, size_t len);
int cp_store_meta_set(struct cp_store *s, const char *key, const char *value, struct al_error *err);

#endif
