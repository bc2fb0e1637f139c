/* controlplane/store: airlockd's state in SQLite (<state>/airlockd.db).
 *
 * Owns: the schema (sandboxes, api_keys, events, templates, template_builds,
 * template_build_logs, snapshots, webhooks, webhook_deliveries, volumes, meta) and its version, WAL
 * mode, and every query.
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

#define CP_STORE_SCHEMA_VERSION 7

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

/* ---- lifecycle events (events.c) ----------------------------------------------------- */
/* Appends one event (type: enum cp_event_type; doc: its JSON); *seq gets its number, which
 * only grows (never reused, also after pruning). */
int cp_store_event_add(struct cp_store *s, const char *sandbox_id, int type, uint64_t time_ns,
                       const char *doc, uint64_t *seq, struct al_error *err);
struct cp_store_event_query {
    const char *sandbox_id; /* NULL: every sandbox */
    uint64_t type_mask;     /* bit (1 << type) per type wanted */
    uint64_t after_seq;     /* only events with a larger number */
    uint64_t limit, offset;
    bool ascending; /* oldest first (else newest first) */
};
/* Calls fn for each matching event in order; a non-zero return from fn stops and is returned. */
int cp_store_event_query(struct cp_store *s, const struct cp_store_event_query *q,
                         int (*fn)(uint64_t seq, int type, const char *doc, void *arg), void *arg,
                         struct al_error *err);
/* Deletes events older than before_ns (0: none by age) and all but the newest keep (0: no
 * bound); *deleted (may be NULL) gets how many. */
int cp_store_event_prune(struct cp_store *s, uint64_t before_ns, uint64_t keep, uint64_t *deleted,
                         struct al_error *err);

/* ---- templates made through the API and their builds (builds.c) --------------------- */
/* Inserts a template or replaces its document (created_ns is kept from the first save). */
int cp_store_tpl_save(struct cp_store *s, const char *id, uint64_t created_ns, const json_t *doc,
                      struct al_error *err);
/* -ENOENT; *doc is the caller's (json_decref). */
int cp_store_tpl_load(struct cp_store *s, const char *id, uint64_t *created_ns, json_t **doc,
                      struct al_error *err);
/* Every template in id order until fn returns non-zero (that value is returned); doc is valid
 * during the call only. Malformed rows are logged and skipped. */
int cp_store_tpl_foreach(struct cp_store *s,
                         int (*fn)(const char *id, uint64_t created_ns, const json_t *doc,
                                   void *arg),
                         void *arg, struct al_error *err);
/* The template, its builds and their logs, in one transaction. */
int cp_store_tpl_delete(struct cp_store *s, const char *id, struct al_error *err);

struct cp_store_build {
    char id[40]; /* a UUID */
    char template_id[72];
    char status[12]; /* waiting, building, ready, error */
    uint64_t created_ns;
    json_t *doc; /* everything else (builds.c); owned */
};
void cp_store_build_free(struct cp_store_build *b);
/* Inserts or updates the build b->id (template_id and created_ns are kept from the first save). */
int cp_store_build_save(struct cp_store *s, const struct cp_store_build *b, struct al_error *err);
/* -ENOENT; free out with cp_store_build_free. */
int cp_store_build_load(struct cp_store *s, const char *id, struct cp_store_build *out,
                        struct al_error *err);
/* The builds of a template, newest first, until fn returns non-zero (returned); b is valid
 * during the call only. */
int cp_store_build_foreach(struct cp_store *s, const char *template_id,
                           int (*fn)(const struct cp_store_build *b, void *arg), void *arg,
                           struct al_error *err);
/* An entry of a build's log: its number (entries are numbered 0, 1, ... in the order they
 * were added; not read when adding), time, level, step (may be NULL) and message. */
struct cp_store_build_log_entry {
    uint64_t n;
    uint64_t time_ns;
    int level;
    const char *step;
    const char *message;
};
/* Appends e to a build's log. */
int cp_store_build_log_add(struct cp_store *s, const char *build_id,
                           const struct cp_store_build_log_entry *e, struct al_error *err);
/* Which entries a query gives: those with level >= min_level, in order, skipping the first
 * offset of them, at most limit. */
struct cp_store_build_log_page {
    int min_level;
    uint64_t offset, limit;
};
/* Calls fn for the entries of pg (e is valid during the call only); fn's non-zero return
 * stops and is returned. */
int cp_store_build_log_query(struct cp_store *s, const char *build_id,
                             const struct cp_store_build_log_page *pg,
                             int (*fn)(const struct cp_store_build_log_entry *e, void *arg),
                             void *arg, struct al_error *err);

/* ---- snapshots (one row per complete snapshot; its files: <state>/snapshots/<id>) ---- */
struct cp_store_snap {
    uint64_t seq; /* the order they were made in (the list's cursor); set by insert */
    char id[64];
    char name[128];   /* "" when none was given */
    uint64_t version; /* 1, 2, ... per name and key, never reused (0: no name) */
    char sandbox_id[64];
    char parent[64]; /* the snapshot the sandbox was started from, or "" */
    char template_id[CP_TEMPLATE_MAX];
    char backend[16];                        /* "jail", "kvm" */
    char vmm_version[32], agent_version[32]; /* what a restore needs */
    uint64_t size_bytes;
    uint64_t created_ns;
    char key_id[32]; /* the API key that asked for it */
};
/* Inserts r (r->id new); a named one gets the next version of its name for its key
 * (r->version is set), in one transaction. -EEXIST for an id in use. */
int cp_store_snap_insert(struct cp_store *s, struct cp_store_snap *r, struct al_error *err);
/* -ENOENT */
int cp_store_snap_load(struct cp_store *s, const char *id, struct cp_store_snap *out,
                       struct al_error *err);
/* -ENOENT when there is no such row. */
int cp_store_snap_delete(struct cp_store *s, const char *id, struct al_error *err);
struct cp_store_snap_query {
    const char *sandbox_id, *key_id, *name; /* NULL: any */
    uint64_t after_seq;                     /* only snapshots made after this one */
    uint64_t limit;                         /* 0: no bound */
};
/* The matching snapshots, oldest first, until fn returns non-zero (returned); r is valid
 * during the call only. */
int cp_store_snap_list(struct cp_store *s, const struct cp_store_snap_query *q,
                       int (*fn)(const struct cp_store_snap *r, void *arg), void *arg,
                       struct al_error *err);

/* ---- volumes (one row per complete volume; its image: <state>/volumes/<id>.img) ---- */
struct cp_store_vol {
    char id[64];
    char name[128];
    char key_id[32]; /* the API key that owns it */
    char token[80];  /* what the content API wants as its Bearer token */
    uint64_t size_bytes;
    uint64_t created_ns;
};
/* -EEXIST when the key has a volume of that name (or the id is in use). */
int cp_store_vol_insert(struct cp_store *s, const struct cp_store_vol *r, struct al_error *err);
/* -ENOENT */
int cp_store_vol_load(struct cp_store *s, const char *id, struct cp_store_vol *out,
                      struct al_error *err);
/* The key's volume of that name; -ENOENT. */
int cp_store_vol_by_name(struct cp_store *s, const char *key_id, const char *name,
                         struct cp_store_vol *out, struct al_error *err);
/* -ENOENT when there is no such row. */
int cp_store_vol_delete(struct cp_store *s, const char *id, struct al_error *err);
/* The key's volumes (key_id NULL: everyone's), oldest first, until fn returns non-zero
 * (returned); r is valid during the call only. */
int cp_store_vol_list(struct cp_store *s, const char *key_id,
                      int (*fn)(const struct cp_store_vol *r, void *arg), void *arg,
                      struct al_error *err);

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

/* ---- webhooks (webhooks.c) ----------------------------------------------------------- */
/* Inserts webhook id or replaces its document and sealed signing secret; with secret NULL,
 * replaces only the document of an existing one (-ENOENT). */
int cp_store_wh_save(struct cp_store *s, const char *id, const char *key_id, uint64_t created_ns,
                     const json_t *doc, const void *secret, size_t secret_len,
                     struct al_error *err);
/* Deletes it and its delivery history; -ENOENT. */
int cp_store_wh_delete(struct cp_store *s, const char *id, struct al_error *err);
/* Every webhook, oldest first, until fn returns non-zero (returned); fn must not use the
 * store. Malformed rows are logged and skipped. */
int cp_store_wh_foreach(struct cp_store *s,
                        int (*fn)(const char *id, const char *key_id, uint64_t created_ns,
                                  const json_t *doc, const void *secret, size_t secret_len,
                                  void *arg),
                        void *arg, struct al_error *err);
/* Appends one delivery attempt (outcome: "delivered", "retrying", "failed", "dropped"...)
 * and keeps only the newest keep of this webhook (0: all). */
int cp_store_whd_add(struct cp_store *s, const char *webhook_id, uint64_t time_ns,
                     const char *outcome, const char *doc, uint64_t keep, struct al_error *err);
/* Its attempts, newest first. */
int cp_store_whd_query(struct cp_store *s, const char *webhook_id, uint64_t limit, uint64_t offset,
                       int (*fn)(const char *doc, void *arg), void *arg, struct al_error *err);
/* Per outcome: how many attempts are kept, and the newest one's time. */
int cp_store_whd_stats(struct cp_store *s, const char *webhook_id,
                       int (*fn)(const char *outcome, uint64_t count, uint64_t last_ns, void *arg),
                       void *arg, struct al_error *err);

/* ---- meta --------------------------------------------------------------------------- */
int cp_store_meta_get(struct cp_store *s, const char *key, char *out, size_t len);
int cp_store_meta_set(struct cp_store *s, const char *key, const char *value, struct al_error *err);

#endif
