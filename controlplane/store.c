/* controlplane/store: see store.h. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"

enum {
    ST_SB_SAVE,
    ST_SB_DELETE,
    ST_SB_LOAD,
    ST_SB_ALL,
    ST_SEQ_GET,
    ST_SEQ_SET,
    ST_KEY_INSERT,
    ST_KEY_FIND,
    ST_KEY_GET,
    ST_KEY_LIST,
    ST_KEY_REVOKE,
    ST_KEY_TOUCH,
    ST_KEY_COUNT,
    ST_META_GET,
    ST_META_SET,
    ST__COUNT
};

static const char *const store__sql[ST__COUNT] = {
    [ST_SB_SAVE] = "INSERT INTO sandboxes(id, seq, state, doc) VALUES(?1, ?2, ?3, ?4) "
                   "ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, state = excluded.state, "
                   "doc = excluded.doc",
    [ST_SB_DELETE] = "DELETE FROM sandboxes WHERE id = ?1",
    [ST_SB_LOAD] = "SELECT id, seq, state, doc FROM sandboxes WHERE id = ?1",
    [ST_SB_ALL] = "SELECT id, seq, state, doc FROM sandboxes ORDER BY seq",
    [ST_SEQ_GET] = "SELECT value FROM meta WHERE key = 'seq'",
    [ST_SEQ_SET] = "INSERT OR REPLACE INTO meta(key, value) VALUES('seq', ?1)",
    [ST_KEY_INSERT] = "INSERT INTO api_keys(id, name, digest, created_ns, last_used_ns, "
                      "revoked_ns, policies) VALUES(?1, ?2, ?3, ?4, 0, 0, ?5)",
    [ST_KEY_FIND] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies "
                    "FROM api_keys WHERE digest = ?1",
    [ST_KEY_GET] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies "
                   "FROM api_keys WHERE id = ?1 OR name = ?1 ORDER BY (id = ?1) DESC",
    [ST_KEY_LIST] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies "
                    "FROM api_keys ORDER BY created_ns, id",
    [ST_KEY_REVOKE] = "UPDATE api_keys SET revoked_ns = ?2 WHERE id = ?1 AND revoked_ns = 0",
    [ST_KEY_TOUCH] = "UPDATE api_keys SET last_used_ns = ?2 WHERE id = ?1",
    [ST_KEY_COUNT] = "SELECT COUNT(*) FROM api_keys WHERE revoked_ns = 0",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_META_SET] = "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
};

/* Checkpoints (the WAL's pages written back into the database file, both fsynced) run on a
 * thread of their own with a connection of their own. Run by the writing connection, as
 * SQLite does by default, they blocked airlockd's event loop: 14 waits for fdatasync and
 * writeback, 17 ms in all, during one burst of 150 creations on the development VM, and a
 * slow disk makes each one far longer. The main connection's WAL hook (which replaces
 * SQLite's automatic checkpoints) wakes the thread once the WAL holds STORE_CKPT_FRAMES
 * frames, SQLite's own threshold. The checkpoints are PASSIVE: they never wait for the
 * writer and the writer never waits for them; the next write after a complete one starts
 * the WAL over. If the thread cannot start, the main connection checkpoints by itself. */
#define STORE_CKPT_FRAMES 1000

struct cp_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST__COUNT];
    char path[4096];
    int64_t data_version;
    pthread_t ck_thread;
    bool ck_running;
    pthread_mutex_t ck_lock;
    pthread_cond_t ck_cond;
    bool ck_wanted, ck_stop;
    uint64_t ck_done;
};

static void *store__ckpt_main(void *arg)
{
    struct cp_store *s = arg;
    sqlite3 *db = NULL;
    pthread_mutex_lock(&s->ck_lock);
    for (;;) {
        while (!s->ck_wanted && !s->ck_stop)
            pthread_cond_wait(&s->ck_cond, &s->ck_lock);
        if (s->ck_stop)
            break;
        s->ck_wanted = false;
        pthread_mutex_unlock(&s->ck_lock);
        /* A new connection knows the database is in WAL mode once it has read it; until
         * then a checkpoint does nothing (and says OK). */
        if (!db && (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                                    NULL) != SQLITE_OK ||
                    sqlite3_exec(db, "PRAGMA synchronous=NORMAL; SELECT 1 FROM meta LIMIT 1", NULL,
                                 NULL, NULL) != SQLITE_OK)) {
            al_warn("state database %s: cannot open a connection for checkpoints: %s (trying "
                    "again at the next one)",
                    s->path, db ? sqlite3_errmsg(db) : "out of memory");
            sqlite3_close(db);
            db = NULL;
        }
        int nlog = -1;
        int rc = db ? sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &nlog, NULL)
                    : SQLITE_CANTOPEN;
        if (db && rc != SQLITE_OK && rc != SQLITE_BUSY)
            al_warn("state database %s: checkpoint failed: %s (trying again at the next one)",
                    s->path, sqlite3_errmsg(db));
        pthread_mutex_lock(&s->ck_lock);
        if (rc == SQLITE_OK && nlog >= 0)
            s->ck_done++;
    }
    pthread_mutex_unlock(&s->ck_lock);
    sqlite3_close(db);
    return NULL;
}

/* After each commit of the main connection, with the frames the WAL holds. */
static int store__wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct cp_store *s = arg;
    if (frames >= 16 * STORE_CKPT_FRAMES) {
        /* The thread has fallen behind, or cannot open the database: the WAL stays bounded,
         * the writer checkpoints as SQLite would. */
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    } else if (frames >= STORE_CKPT_FRAMES) {
        pthread_mutex_lock(&s->ck_lock);
        if (!s->ck_wanted) {
            s->ck_wanted = true;
            pthread_cond_signal(&s->ck_cond);
        }
        pthread_mutex_unlock(&s->ck_lock);
    }
    return SQLITE_OK;
}

static void store__ckpt_start(struct cp_store *s)
{
    int rc = pthread_create(&s->ck_thread, NULL, store__ckpt_main, s);
    if (rc) {
        al_warn("state database %s: no checkpoint thread (%s): the event loop checkpoints", s->path,
                strerror(rc));
        return; /* SQLite's automatic checkpoints stay on */
    }
    s->ck_running = true;
    sqlite3_wal_hook(s->db, store__wal_hook, s);
}

static void store__ckpt_stop(struct cp_store *s)
{
    if (!s->ck_running)
        return;
    sqlite3_wal_autocheckpoint(s->db, STORE_CKPT_FRAMES); /* replaces our hook */
    pthread_mutex_lock(&s->ck_lock);
    s->ck_stop = true;
    pthread_cond_signal(&s->ck_cond);
    pthread_mutex_unlock(&s->ck_lock);
    pthread_join(s->ck_thread, NULL);
    s->ck_running = false;
}

uint64_t cp_store_checkpoints(struct cp_store *s)
{
    pthread_mutex_lock(&s->ck_lock);
    uint64_t n = s->ck_done;
    pthread_mutex_unlock(&s->ck_lock);
    return n;
}

static int store__err(struct cp_store *s, struct al_error *err, const char *what)
{
    int code = sqlite3_errcode(s->db);
    int e = code == SQLITE_BUSY || code == SQLITE_LOCKED ? -EBUSY
            : code == SQLITE_FULL                        ? -ENOSPC
            : code == SQLITE_CONSTRAINT                  ? -EEXIST
            : code == SQLITE_READONLY                    ? -EROFS
                                                         : -EIO;
    return al_error_set(err, e, "state database %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int store__exec(struct cp_store *s, const char *sql, struct al_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = al_error_set(err, -EIO, "state database %s: %s (while running: %.80s)", s->path,
                              msg ? msg : sqlite3_errmsg(s->db), sql);
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

static const char store__schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sandboxes("
    "  id TEXT PRIMARY KEY,"
    "  seq INTEGER NOT NULL UNIQUE,"
    "  state TEXT NOT NULL,"
    "  doc TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS api_keys("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  digest BLOB NOT NULL UNIQUE,"
    "  created_ns INTEGER NOT NULL,"
    "  last_used_ns INTEGER NOT NULL,"
    "  revoked_ns INTEGER NOT NULL,"
    "  policies TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS api_keys_name ON api_keys(name);";

static int store__user_version(struct cp_store *s, int *out, struct al_error *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return store__err(s, err, "reading the schema version");
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : store__err(s, err, "reading the schema version");
}

int cp_store_open(const char *path, struct cp_store **out, struct al_error *err)
{
    struct cp_store *s = calloc(1, sizeof *s);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    snprintf(s->path, sizeof s->path, "%s", path);
    pthread_mutex_init(&s->ck_lock, NULL);
    pthread_cond_init(&s->ck_cond, NULL);
    /* Create the file with mode 0600 before SQLite does (it would use 0644 & umask). */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        cp_store_close(s);
        return al_error_set(err, -e, "cannot open the state database %s: %s", path, strerror(e));
    }
    close(fd);
    int rc;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        rc = store__err(s, err, "open");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    sqlite3_extended_result_codes(s->db, 0);
    if ((rc = store__exec(s,
                          "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                          "PRAGMA foreign_keys=ON; PRAGMA trusted_schema=OFF;",
                          err)))
        goto fail;
    int ver = 0;
    if ((rc = store__user_version(s, &ver, err)))
        goto fail;
    if (ver > CP_STORE_SCHEMA_VERSION) {
        rc = al_error_set(err, -EPROTO,
                          "state database %s has schema version %d, newer than this "
                          "airlockd understands (%d): run the airlockd that wrote it, or move "
                          "the state directory aside",
                          path, ver, CP_STORE_SCHEMA_VERSION);
        goto fail;
    }
    if (ver < CP_STORE_SCHEMA_VERSION) {
        char sql[sizeof store__schema + 128];
        snprintf(sql, sizeof sql, "BEGIN IMMEDIATE; %s PRAGMA user_version=%d; COMMIT;",
                 store__schema, CP_STORE_SCHEMA_VERSION);
        if ((rc = store__exec(s, sql, err))) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            goto fail;
        }
    }
    for (int i = 0; i < ST__COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, store__sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
                               NULL) != SQLITE_OK) {
            rc = store__err(s, err, "preparing a statement");
            goto fail;
        }
    }
    /* The WAL and shm files inherit the database's mode (SQLite copies it). */
    s->data_version = -1;
    cp_store_changed(s);
    store__ckpt_start(s);
    *out = s;
    return 0;
fail:
    cp_store_close(s);
    return rc;
}

void cp_store_close(struct cp_store *s)
{
    if (!s)
        return;
    store__ckpt_stop(s);
    for (int i = 0; i < ST__COUNT; i++)
        sqlite3_finalize(s->st[i]);
    if (s->db)
        sqlite3_close(s->db);
    pthread_cond_destroy(&s->ck_cond);
    pthread_mutex_destroy(&s->ck_lock);
    free(s);
}

bool cp_store_changed(struct cp_store *s)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "PRAGMA data_version", -1, &st, NULL) != SQLITE_OK)
        return true;
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    bool changed = v != s->data_version;
    s->data_version = v;
    return changed;
}

static sqlite3_stmt *store__st(struct cp_store *s, int which)
{
    sqlite3_stmt *st = s->st[which];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

/* Runs a statement that returns no rows. */
static int store__done(struct cp_store *s, sqlite3_stmt *st, const char *what, struct al_error *err)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store__err(s, err, what);
    return 0;
}

/* ---- sandboxes ---------------------------------------------------------------------- */

int cp_store_sb_save(struct cp_store *s, const struct cp_sb_record *r, struct al_error *err)
{
    json_t *doc = cp_sb_record_doc(r);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text)
        return al_error_set(err, -ENOMEM, "out of memory");
    sqlite3_stmt *st = store__st(s, ST_SB_SAVE);
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)r->seq);
    sqlite3_bind_text(st, 3, cp_sb_state_name(r->state), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, text, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "saving a sandbox", err);
    sqlite3_clear_bindings(st);
    /* The document holds the access token: do not leave it in freed memory. */
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

int cp_store_sb_delete(struct cp_store *s, const char *id, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_SB_DELETE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    return store__done(s, st, "deleting a sandbox", err);
}

static int store__row_to_record(sqlite3_stmt *st, struct cp_sb_record *r, struct al_error *err)
{
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *state = (const char *)sqlite3_column_text(st, 2);
    const char *doc = (const char *)sqlite3_column_text(st, 3);
    if (!id || !state || !doc || strlen(id) >= sizeof r->id)
        return al_error_set(err, -EINVAL, "malformed row");
    snprintf(r->id, sizeof r->id, "%s", id);
    r->seq = (uint64_t)sqlite3_column_int64(st, 1);
    if (cp_sb_state_parse(state, &r->state))
        return al_error_set(err, -EINVAL, "unknown state \"%s\"", state);
    json_t *d = al_json_parse(doc, strlen(doc), err);
    if (!d)
        return -EINVAL;
    int rc = cp_sb_record_from_doc(r, d, err);
    json_decref(d);
    return rc;
}

int cp_store_sb_load(struct cp_store *s, const char *id, struct cp_sb_record *r,
                     struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_SB_LOAD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        return al_error_set(err, -ENOENT, "no sandbox %s in the state database", id);
    }
    if (rc != SQLITE_ROW) {
        rc = store__err(s, err, "loading a sandbox");
        sqlite3_reset(st);
        return rc;
    }
    rc = store__row_to_record(st, r, err);
    sqlite3_reset(st);
    return rc;
}

int cp_store_sb_foreach(struct cp_store *s, int (*fn)(const struct cp_sb_record *r, void *arg),
                        void (*bad)(const char *id, const char *why, void *arg), void *arg,
                        struct al_error *err)
{
    /* Collect first: fn may write to the database (which would reset this statement). */
    sqlite3_stmt *st = store__st(s, ST_SB_ALL);
    struct cp_sb_record *v = NULL;
    size_t n = 0, cap = 0;
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            struct cp_sb_record *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                ret = al_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        cp_sb_record_init(&v[n]);
        struct al_error e = {0};
        if (store__row_to_record(st, &v[n], &e)) {
            const char *id = (const char *)sqlite3_column_text(st, 0);
            if (bad)
                bad(id ? id : "?", al_error_str(&e), arg);
            cp_sb_record_free(&v[n]);
            continue;
        }
        n++;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing sandboxes");
    sqlite3_reset(st);
    for (size_t i = 0; i < n; i++) {
        if (!ret)
            ret = fn(&v[i], arg);
        explicit_bzero(v[i].token, sizeof v[i].token);
        cp_sb_record_free(&v[i]);
    }
    free(v);
    return ret;
}

int cp_store_next_seq(struct cp_store *s, uint64_t *out, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_SEQ_GET);
    uint64_t v = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        v = (uint64_t)strtoull((const char *)sqlite3_column_text(st, 0), NULL, 10);
    else if (rc != SQLITE_DONE) {
        rc = store__err(s, err, "reading the sequence");
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    v++;
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    st = store__st(s, ST_SEQ_SET);
    sqlite3_bind_text(st, 1, buf, -1, SQLITE_TRANSIENT);
    if ((rc = store__done(s, st, "advancing the sequence", err)))
        return rc;
    *out = v;
    return 0;
}

/* ---- API keys ----------------------------------------------------------------------- */

static void store__row_to_key(sqlite3_stmt *st, struct cp_apikey *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->id, sizeof k->id, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(k->name, sizeof k->name, "%s", (const char *)sqlite3_column_text(st, 1));
    if (sqlite3_column_bytes(st, 2) == CP_DIGEST_LEN)
        memcpy(k->digest, sqlite3_column_blob(st, 2), CP_DIGEST_LEN);
    k->created_ns = (uint64_t)sqlite3_column_int64(st, 3);
    k->last_used_ns = (uint64_t)sqlite3_column_int64(st, 4);
    k->revoked_ns = (uint64_t)sqlite3_column_int64(st, 5);
    snprintf(k->policies, sizeof k->policies, "%s", (const char *)sqlite3_column_text(st, 6));
}

int cp_store_key_insert(struct cp_store *s, const struct cp_apikey *k, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_INSERT);
    sqlite3_bind_text(st, 1, k->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, k->name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, k->digest, CP_DIGEST_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)k->created_ns);
    sqlite3_bind_text(st, 5, k->policies, -1, SQLITE_STATIC);
    return store__done(s, st, "adding an API key", err);
}

int cp_store_key_find(struct cp_store *s, const uint8_t digest[CP_DIGEST_LEN],
                      struct cp_apikey *out, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_FIND);
    sqlite3_bind_blob(st, 1, digest, CP_DIGEST_LEN, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        store__row_to_key(st, out);
        sqlite3_reset(st);
        return 0;
    }
    rc = rc == SQLITE_DONE ? al_error_set(err, -ENOENT, "no such API key")
                           : store__err(s, err, "looking up an API key");
    sqlite3_reset(st);
    return rc;
}

int cp_store_key_get(struct cp_store *s, const char *id_or_name, struct cp_apikey *out,
                     struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_GET);
    sqlite3_bind_text(st, 1, id_or_name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? al_error_set(err, -ENOENT,
                                              "no API key with the id or name \"%s\" "
                                              "(`airlock apikey ls` lists them)",
                                              id_or_name)
                               : store__err(s, err, "looking up an API key");
        sqlite3_reset(st);
        return rc;
    }
    store__row_to_key(st, out);
    bool exact_id = strcmp(out->id, id_or_name) == 0;
    if (!exact_id && sqlite3_step(st) == SQLITE_ROW) {
        sqlite3_reset(st);
        return al_error_set(err, -EEXIST,
                            "several API keys are named \"%s\": give the key id "
                            "(`airlock apikey ls` shows them)",
                            id_or_name);
    }
    sqlite3_reset(st);
    return 0;
}

int cp_store_key_list(struct cp_store *s, struct cp_apikey **out, size_t *n, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_LIST);
    struct cp_apikey *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            struct cp_apikey *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                sqlite3_reset(st);
                return al_error_set(err, -ENOMEM, "out of memory");
            }
            v = nv;
        }
        store__row_to_key(st, &v[cnt++]);
    }
    if (rc != SQLITE_DONE) {
        free(v);
        rc = store__err(s, err, "listing API keys");
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    *out = v;
    *n = cnt;
    return 0;
}

int cp_store_key_revoke(struct cp_store *s, const char *id, uint64_t when_ns, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_REVOKE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)when_ns);
    int rc = store__done(s, st, "revoking an API key", err);
    if (rc)
        return rc;
    if (sqlite3_changes(s->db) == 0)
        return al_error_set(err, -EALREADY, "API key %s is already revoked", id);
    return 0;
}

int cp_store_key_touch(struct cp_store *s, const char *id, uint64_t when_ns)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_TOUCH);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)when_ns);
    return store__done(s, st, "recording an API key's use", NULL);
}

int cp_store_key_count_valid(struct cp_store *s, size_t *out, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_COUNT);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = store__err(s, err, "counting API keys");
        sqlite3_reset(st);
        return rc;
    }
    *out = (size_t)sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
}

/* ---- meta --------------------------------------------------------------------------- */

int cp_store_meta_get(struct cp_store *s, const char *key, char *out, size_t len)
{
    sqlite3_stmt *st = store__st(s, ST_META_GET);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? -ENOENT : -EIO;
    }
    snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_reset(st);
    return 0;
}

int cp_store_meta_set(struct cp_store *s, const char *key, const char *value, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_META_SET);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return store__done(s, st, "writing a setting", err);
}
