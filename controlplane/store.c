/* controlplane/store: see store.h. */
#include "store.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
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
    ST_EV_ADD,
    ST_EV_ASC,
    ST_EV_DESC,
    ST_EV_PRUNE_AGE,
    ST_EV_PRUNE_COUNT,
    ST_TPL_SAVE,
    ST_TPL_LOAD,
    ST_TPL_ALL,
    ST_TPL_DELETE,
    ST_TPL_DELETE_BUILDS,
    ST_TPL_DELETE_LOGS,
    ST_BUILD_SAVE,
    ST_BUILD_LOAD,
    ST_BUILD_OF,
    ST_BLOG_ADD,
    ST_BLOG_QUERY,
    ST_SNAP_NEXT_VERSION,
    ST_SNAP_INSERT,
    ST_SNAP_LOAD,
    ST_SNAP_DELETE,
    ST_SNAP_LIST,
    ST_WH_SAVE,
    ST_WH_SET_DOC,
    ST_WH_DELETE,
    ST_WH_DELETE_DELIVERIES,
    ST_WH_ALL,
    ST_WHD_ADD,
    ST_WHD_PRUNE,
    ST_WHD_QUERY,
    ST_WHD_STATS,
    ST_VOL_INSERT,
    ST_VOL_LOAD,
    ST_VOL_BY_NAME,
    ST_VOL_LIST,
    ST_VOL_DELETE,
    ST__COUNT
};

#define STORE__VOL_COLS "id, name, key_id, token, size_bytes, created_ns"

#define STORE__SNAP_COLS                                                              \
    "seq, id, name, version, sandbox_id, parent, template_id, backend, vmm_version, " \
    "agent_version, size_bytes, created_ns, key_id"

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
                      "revoked_ns, policies, role) VALUES(?1, ?2, ?3, ?4, 0, 0, ?5, ?6)",
    [ST_KEY_FIND] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies, role "
                    "FROM api_keys WHERE digest = ?1",
    [ST_KEY_GET] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies, role "
                   "FROM api_keys WHERE id = ?1 OR name = ?1 ORDER BY (id = ?1) DESC",
    [ST_KEY_LIST] = "SELECT id, name, digest, created_ns, last_used_ns, revoked_ns, policies, role "
                    "FROM api_keys ORDER BY created_ns, id",
    [ST_KEY_REVOKE] = "UPDATE api_keys SET revoked_ns = ?2 WHERE id = ?1 AND revoked_ns = 0",
    [ST_KEY_TOUCH] = "UPDATE api_keys SET last_used_ns = ?2 WHERE id = ?1",
    [ST_KEY_COUNT] = "SELECT COUNT(*) FROM api_keys WHERE revoked_ns = 0",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_META_SET] = "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
    [ST_EV_ADD] = "INSERT INTO events(sandbox_id, type, time_ns, doc) VALUES(?1, ?2, ?3, ?4)",
    /* ?1 sandbox id or NULL for all, ?2 bit mask of types, ?3 only seq > this, ?4 limit,
     * ?5 offset */
    [ST_EV_ASC] = "SELECT seq, type, doc FROM events WHERE (?1 IS NULL OR sandbox_id = ?1) "
                  "AND ((?2 >> type) & 1) AND seq > ?3 ORDER BY seq ASC LIMIT ?4 OFFSET ?5",
    [ST_EV_DESC] = "SELECT seq, type, doc FROM events WHERE (?1 IS NULL OR sandbox_id = ?1) "
                   "AND ((?2 >> type) & 1) AND seq > ?3 ORDER BY seq DESC LIMIT ?4 OFFSET ?5",
    [ST_EV_PRUNE_AGE] = "DELETE FROM events WHERE time_ns < ?1",
    [ST_EV_PRUNE_COUNT] = "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?1",
    [ST_TPL_SAVE] = "INSERT INTO templates(id, created_ns, doc) VALUES(?1, ?2, ?3) "
                    "ON CONFLICT(id) DO UPDATE SET doc = excluded.doc",
    [ST_TPL_LOAD] = "SELECT id, created_ns, doc FROM templates WHERE id = ?1",
    [ST_TPL_ALL] = "SELECT id, created_ns, doc FROM templates ORDER BY id",
    [ST_TPL_DELETE] = "DELETE FROM templates WHERE id = ?1",
    [ST_TPL_DELETE_BUILDS] = "DELETE FROM template_builds WHERE template_id = ?1",
    [ST_TPL_DELETE_LOGS] = "DELETE FROM template_build_logs WHERE build_id IN "
                           "(SELECT id FROM template_builds WHERE template_id = ?1)",
    [ST_BUILD_SAVE] = "INSERT INTO template_builds(id, template_id, status, created_ns, doc) "
                      "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(id) DO UPDATE SET "
                      "status = excluded.status, doc = excluded.doc",
    [ST_BUILD_LOAD] = "SELECT id, template_id, status, created_ns, doc FROM template_builds "
                      "WHERE id = ?1",
    [ST_BUILD_OF] = "SELECT id, template_id, status, created_ns, doc FROM template_builds "
                    "WHERE template_id = ?1 ORDER BY seq DESC",
    /* A build's log entries are numbered from 0 in the order they were added: the
     * number is the SDK's logsOffset. */
    [ST_BLOG_ADD] = "INSERT INTO template_build_logs(build_id, n, time_ns, level, step, message) "
                    "SELECT ?1, COALESCE(MAX(n) + 1, 0), ?2, ?3, ?4, ?5 FROM template_build_logs "
                    "WHERE build_id = ?1",
    [ST_BLOG_QUERY] = "SELECT n, time_ns, level, step, message FROM template_build_logs "
                      "WHERE build_id = ?1 AND level >= ?2 ORDER BY n LIMIT ?3 OFFSET ?4",
    /* Versions only grow: one deleted is never handed out again. */
    [ST_SNAP_NEXT_VERSION] = "INSERT INTO snapshot_names(key_id, name, last) VALUES(?2, ?1, 1) "
                             "ON CONFLICT(key_id, name) DO UPDATE SET last = last + 1 "
                             "RETURNING last",
    [ST_SNAP_INSERT] = "INSERT INTO snapshots(id, name, version, sandbox_id, parent, template_id, "
                       "backend, vmm_version, agent_version, size_bytes, created_ns, key_id) "
                       "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [ST_SNAP_LOAD] = "SELECT " STORE__SNAP_COLS " FROM snapshots WHERE id = ?1",
    [ST_SNAP_DELETE] = "DELETE FROM snapshots WHERE id = ?1",
    /* ?1 sandbox, ?2 key, ?3 name (NULL: any), ?4 only seq > this, ?5 limit */
    [ST_SNAP_LIST] = "SELECT " STORE__SNAP_COLS " FROM snapshots WHERE (?1 IS NULL OR "
                     "sandbox_id = ?1) AND (?2 IS NULL OR key_id = ?2) AND (?3 IS NULL OR "
                     "name = ?3) AND seq > ?4 ORDER BY seq LIMIT ?5",
    [ST_WH_SAVE] = "INSERT INTO webhooks(id, key_id, created_ns, doc, secret) "
                   "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(id) DO UPDATE SET doc = excluded.doc, "
                   "secret = excluded.secret",
    /* An update that does not rotate the secret keeps it. */
    [ST_WH_SET_DOC] = "UPDATE webhooks SET doc = ?2 WHERE id = ?1",
    [ST_WH_DELETE] = "DELETE FROM webhooks WHERE id = ?1",
    [ST_WH_DELETE_DELIVERIES] = "DELETE FROM webhook_deliveries WHERE webhook_id = ?1",
    [ST_WH_ALL] =
        "SELECT id, key_id, created_ns, doc, secret FROM webhooks ORDER BY created_ns, id",
    [ST_WHD_ADD] = "INSERT INTO webhook_deliveries(webhook_id, time_ns, outcome, doc) "
                   "VALUES(?1, ?2, ?3, ?4)",
    [ST_WHD_PRUNE] = "DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND seq <= "
                     "(SELECT seq FROM webhook_deliveries WHERE webhook_id = ?1 "
                     "ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
    [ST_WHD_QUERY] = "SELECT doc FROM webhook_deliveries WHERE webhook_id = ?1 "
                     "ORDER BY seq DESC LIMIT ?2 OFFSET ?3",
    [ST_WHD_STATS] = "SELECT outcome, COUNT(*), MAX(time_ns) FROM webhook_deliveries "
                     "WHERE webhook_id = ?1 GROUP BY outcome",
    [ST_VOL_INSERT] = "INSERT INTO volumes(" STORE__VOL_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_VOL_LOAD] = "SELECT " STORE__VOL_COLS " FROM volumes WHERE id = ?1",
    [ST_VOL_BY_NAME] = "SELECT " STORE__VOL_COLS " FROM volumes WHERE key_id = ?1 AND name = ?2",
    /* ?1 key (NULL: every key's) */
    [ST_VOL_LIST] = "SELECT " STORE__VOL_COLS " FROM volumes WHERE (?1 IS NULL OR key_id = ?1) "
                    "ORDER BY seq",
    [ST_VOL_DELETE] = "DELETE FROM volumes WHERE id = ?1",
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
    "CREATE INDEX IF NOT EXISTS api_keys_name ON api_keys(name);"
    /* Schema 2: the sandboxes' lifecycle events (controlplane/events.c). AUTOINCREMENT: a
     * stream's Last-Event-ID stays meaningful after the newest events were pruned. */
    "CREATE TABLE IF NOT EXISTS events("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  sandbox_id TEXT NOT NULL,"
    "  type INTEGER NOT NULL,"
    "  time_ns INTEGER NOT NULL,"
    "  doc TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox_id, seq);"
    "CREATE INDEX IF NOT EXISTS events_time ON events(time_ns);"
    /* Schema 3: templates made through the API, their builds and the builds' logs
     * (controlplane/builds.c). A template's files stay in <state>/templates/<id>. */
    "CREATE TABLE IF NOT EXISTS templates("
    "  id TEXT PRIMARY KEY,"
    "  created_ns INTEGER NOT NULL,"
    "  doc TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS template_builds("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  template_id TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  created_ns INTEGER NOT NULL,"
    "  doc TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS template_builds_of ON template_builds(template_id, seq);"
    "CREATE TABLE IF NOT EXISTS template_build_logs("
    "  build_id TEXT NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  time_ns INTEGER NOT NULL,"
    "  level INTEGER NOT NULL,"
    "  step TEXT,"
    "  message TEXT NOT NULL,"
    "  PRIMARY KEY(build_id, n)) WITHOUT ROWID;"
    /* Schema 4: snapshots (controlplane/snapshots.c); their files are in
     * <state>/snapshots/<id>. A row is written once the files are complete. */
    "CREATE TABLE IF NOT EXISTS snapshots("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL,"
    "  version INTEGER NOT NULL,"
    "  sandbox_id TEXT NOT NULL,"
    "  parent TEXT NOT NULL,"
    "  template_id TEXT NOT NULL,"
    "  backend TEXT NOT NULL,"
    "  vmm_version TEXT NOT NULL,"
    "  agent_version TEXT NOT NULL,"
    "  size_bytes INTEGER NOT NULL,"
    "  created_ns INTEGER NOT NULL,"
    "  key_id TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS snapshots_sandbox ON snapshots(sandbox_id, seq);"
    "CREATE INDEX IF NOT EXISTS snapshots_name ON snapshots(key_id, name, version);"
    "CREATE TABLE IF NOT EXISTS snapshot_names("
    "  key_id TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  last INTEGER NOT NULL,"
    "  PRIMARY KEY(key_id, name)) WITHOUT ROWID;"
    /* Schema 5: webhooks (controlplane/webhooks.c): the registrations, their signing secrets
     * sealed (never in doc), and the history of their delivery attempts. */
    "CREATE TABLE IF NOT EXISTS webhooks("
    "  id TEXT PRIMARY KEY,"
    "  key_id TEXT NOT NULL,"
    "  created_ns INTEGER NOT NULL,"
    "  doc TEXT NOT NULL,"
    "  secret BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS webhook_deliveries("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  webhook_id TEXT NOT NULL,"
    "  time_ns INTEGER NOT NULL,"
    "  outcome TEXT NOT NULL,"
    "  doc TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_of ON webhook_deliveries(webhook_id, seq);"
    /* Schema 7: volumes (controlplane/volumes.c); each one's file system is the image
     * <state>/volumes/<id>.img. A row is written once its image is complete. */
    "CREATE TABLE IF NOT EXISTS volumes("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL,"
    "  key_id TEXT NOT NULL,"
    "  token TEXT NOT NULL,"
    "  size_bytes INTEGER NOT NULL,"
    "  created_ns INTEGER NOT NULL,"
    "  UNIQUE(key_id, name));";

/* Changes to tables that exist (the schema above only creates what is missing), run in the
 * same transaction as the schema by a database older than their version. A new database runs
 * them too, right after the schema made its tables. */
static const struct {
    int version;
    const char *sql;
} store__migrations[] = {
    /* Schema 6: each API key's role (docs/api.md, "Roles"). Keys made before roles existed
     * could do everything: they are admin keys. */
    {6, "ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';"},
};

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
        char sql[sizeof store__schema + 1024];
        size_t n = (size_t)snprintf(sql, sizeof sql, "BEGIN IMMEDIATE; %s", store__schema);
        for (size_t i = 0; i < sizeof store__migrations / sizeof store__migrations[0]; i++)
            if (store__migrations[i].version > ver && n < sizeof sql)
                n += (size_t)snprintf(sql + n, sizeof sql - n, " %s", store__migrations[i].sql);
        if (n < sizeof sql)
            n += (size_t)snprintf(sql + n, sizeof sql - n, " PRAGMA user_version=%d; COMMIT;",
                                  CP_STORE_SCHEMA_VERSION);
        assert(n < sizeof sql); /* the migrations fit the buffer */
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

/* ---- lifecycle events ---------------------------------------------------------------- */

int cp_store_event_add(struct cp_store *s, const char *sandbox_id, int type, uint64_t time_ns,
                       const char *doc, uint64_t *seq, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_EV_ADD);
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, type);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)time_ns);
    sqlite3_bind_text(st, 4, doc, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "recording a lifecycle event", err);
    sqlite3_clear_bindings(st);
    if (!rc && seq)
        *seq = (uint64_t)sqlite3_last_insert_rowid(s->db);
    return rc;
}

int cp_store_event_query(struct cp_store *s, const struct cp_store_event_query *q,
                         int (*fn)(uint64_t seq, int type, const char *doc, void *arg), void *arg,
                         struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, q->ascending ? ST_EV_ASC : ST_EV_DESC);
    if (q->sandbox_id)
        sqlite3_bind_text(st, 1, q->sandbox_id, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)q->type_mask);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)q->after_seq);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)q->limit);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)q->offset);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *doc = (const char *)sqlite3_column_text(st, 2);
        if (doc &&
            (ret = fn((uint64_t)sqlite3_column_int64(st, 0), sqlite3_column_int(st, 1), doc, arg)))
            break;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing lifecycle events");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}

int cp_store_event_prune(struct cp_store *s, uint64_t before_ns, uint64_t keep, uint64_t *deleted,
                         struct al_error *err)
{
    uint64_t n = 0;
    sqlite3_stmt *st;
    int rc = 0;
    if (before_ns) {
        st = store__st(s, ST_EV_PRUNE_AGE);
        sqlite3_bind_int64(st, 1, (sqlite3_int64)before_ns);
        if ((rc = store__done(s, st, "pruning lifecycle events by age", err)))
            return rc;
        n += (uint64_t)sqlite3_changes(s->db);
    }
    if (keep) {
        st = store__st(s, ST_EV_PRUNE_COUNT);
        sqlite3_bind_int64(st, 1, (sqlite3_int64)keep);
        if ((rc = store__done(s, st, "pruning lifecycle events by count", err)))
            return rc;
        n += (uint64_t)sqlite3_changes(s->db);
    }
    if (deleted)
        *deleted = n;
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
    /* A role this airlockd does not know is no role: such a key is refused (auth.c). */
    k->role = cp_role_parse((const char *)sqlite3_column_text(st, 7), NULL);
}

int cp_store_key_insert(struct cp_store *s, const struct cp_apikey *k, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_KEY_INSERT);
    sqlite3_bind_text(st, 1, k->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, k->name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, k->digest, CP_DIGEST_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)k->created_ns);
    if (strcmp(cp_role_name(k->role), "none") == 0)
        return al_error_set(err, -EINVAL, "an API key needs a role: admin, operator or auditor");
    sqlite3_bind_text(st, 5, k->policies, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, cp_role_name(k->role), -1, SQLITE_STATIC);
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

/* ---- templates and their builds -------------------------------------------------------- */

static char *store__dump(const json_t *doc, struct al_error *err)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        al_error_set(err, -ENOMEM, "out of memory");
    return text;
}

int cp_store_tpl_save(struct cp_store *s, const char *id, uint64_t created_ns, const json_t *doc,
                      struct al_error *err)
{
    char *text = store__dump(doc, err);
    if (!text)
        return -ENOMEM;
    sqlite3_stmt *st = store__st(s, ST_TPL_SAVE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)created_ns);
    sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "saving a template", err);
    sqlite3_clear_bindings(st);
    free(text);
    return rc;
}

/* The JSON document of column col, or NULL (err says why). */
static json_t *store__doc(sqlite3_stmt *st, int col, struct al_error *err)
{
    const char *doc = (const char *)sqlite3_column_text(st, col);
    if (!doc) {
        al_error_set(err, -EINVAL, "malformed row: no document");
        return NULL;
    }
    json_t *d = al_json_parse(doc, strlen(doc), err);
    if (d && !json_is_object(d)) {
        json_decref(d);
        al_error_set(err, -EINVAL, "malformed row: the document is not an object");
        return NULL;
    }
    return d;
}

int cp_store_tpl_load(struct cp_store *s, const char *id, uint64_t *created_ns, json_t **doc,
                      struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_TPL_LOAD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE
                 ? al_error_set(err, -ENOENT, "no template %s in the state database", id)
                 : store__err(s, err, "loading a template");
        sqlite3_reset(st);
        return rc;
    }
    *created_ns = (uint64_t)sqlite3_column_int64(st, 1);
    *doc = store__doc(st, 2, err);
    sqlite3_reset(st);
    return *doc ? 0 : -EINVAL;
}

int cp_store_tpl_foreach(struct cp_store *s,
                         int (*fn)(const char *id, uint64_t created_ns, const json_t *doc,
                                   void *arg),
                         void *arg, struct al_error *err)
{
    /* Collected first: fn may use the store (which would reset this statement). */
    sqlite3_stmt *st = store__st(s, ST_TPL_ALL);
    json_t *rows = json_array();
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        json_t *d = store__doc(st, 2, NULL);
        if (!id || !d) {
            al_warn("state database %s: template row %s is malformed: skipped", s->path,
                    id ? id : "?");
            json_decref(d);
            continue;
        }
        json_array_append_new(rows, json_pack("{s:s,s:I,s:o}", "id", id, "created_ns",
                                              (json_int_t)sqlite3_column_int64(st, 1), "doc", d));
    }
    if (rc != SQLITE_DONE)
        ret = store__err(s, err, "listing templates");
    sqlite3_reset(st);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        if (ret)
            break;
        ret = fn(json_string_value(json_object_get(row, "id")),
                 (uint64_t)json_integer_value(json_object_get(row, "created_ns")),
                 json_object_get(row, "doc"), arg);
    }
    json_decref(rows);
    return ret;
}

int cp_store_tpl_delete(struct cp_store *s, const char *id, struct al_error *err)
{
    int rc = store__exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    const int which[] = {ST_TPL_DELETE_LOGS, ST_TPL_DELETE_BUILDS, ST_TPL_DELETE};
    for (size_t i = 0; i < sizeof which / sizeof *which && !rc; i++) {
        sqlite3_stmt *st = store__st(s, which[i]);
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = store__done(s, st, "deleting a template", err);
    }
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    return store__exec(s, "COMMIT", err);
}

void cp_store_build_free(struct cp_store_build *b)
{
    json_decref(b->doc);
    b->doc = NULL;
}

int cp_store_build_save(struct cp_store *s, const struct cp_store_build *b, struct al_error *err)
{
    char *text = store__dump(b->doc, err);
    if (!text)
        return -ENOMEM;
    sqlite3_stmt *st = store__st(s, ST_BUILD_SAVE);
    sqlite3_bind_text(st, 1, b->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, b->template_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, b->status, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)b->created_ns);
    sqlite3_bind_text(st, 5, text, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "saving a template build", err);
    sqlite3_clear_bindings(st);
    free(text);
    return rc;
}

static int store__row_to_build(sqlite3_stmt *st, struct cp_store_build *b, struct al_error *err)
{
    memset(b, 0, sizeof *b);
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *tid = (const char *)sqlite3_column_text(st, 1);
    const char *status = (const char *)sqlite3_column_text(st, 2);
    if (!id || !tid || !status || strlen(id) >= sizeof b->id ||
        strlen(tid) >= sizeof b->template_id || strlen(status) >= sizeof b->status)
        return al_error_set(err, -EINVAL, "malformed template build row");
    snprintf(b->id, sizeof b->id, "%s", id);
    snprintf(b->template_id, sizeof b->template_id, "%s", tid);
    snprintf(b->status, sizeof b->status, "%s", status);
    b->created_ns = (uint64_t)sqlite3_column_int64(st, 3);
    b->doc = store__doc(st, 4, err);
    return b->doc ? 0 : -EINVAL;
}

int cp_store_build_load(struct cp_store *s, const char *id, struct cp_store_build *out,
                        struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_BUILD_LOAD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? al_error_set(err, -ENOENT, "no template build %s", id)
                               : store__err(s, err, "loading a template build");
        sqlite3_reset(st);
        return rc;
    }
    rc = store__row_to_build(st, out, err);
    sqlite3_reset(st);
    return rc;
}

int cp_store_build_foreach(struct cp_store *s, const char *template_id,
                           int (*fn)(const struct cp_store_build *b, void *arg), void *arg,
                           struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_BUILD_OF);
    sqlite3_bind_text(st, 1, template_id, -1, SQLITE_STATIC);
    struct cp_store_build *v = NULL;
    size_t n = 0, cap = 0;
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            struct cp_store_build *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                ret = al_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        struct al_error e = {0};
        if (store__row_to_build(st, &v[n], &e)) {
            al_warn("state database %s: a build of template %s: %s: skipped", s->path, template_id,
                    al_error_str(&e));
            cp_store_build_free(&v[n]);
            continue;
        }
        n++;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing template builds");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    for (size_t i = 0; i < n; i++) {
        if (!ret)
            ret = fn(&v[i], arg);
        cp_store_build_free(&v[i]);
    }
    free(v);
    return ret;
}

int cp_store_build_log_add(struct cp_store *s, const char *build_id,
                           const struct cp_store_build_log_entry *e, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_BLOG_ADD);
    sqlite3_bind_text(st, 1, build_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->time_ns);
    sqlite3_bind_int(st, 3, e->level);
    if (e->step)
        sqlite3_bind_text(st, 4, e->step, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_text(st, 5, e->message, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "recording a build log entry", err);
    sqlite3_clear_bindings(st);
    return rc;
}

int cp_store_build_log_query(struct cp_store *s, const char *build_id,
                             const struct cp_store_build_log_page *pg,
                             int (*fn)(const struct cp_store_build_log_entry *e, void *arg),
                             void *arg, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_BLOG_QUERY);
    sqlite3_bind_text(st, 1, build_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, pg->min_level);
    sqlite3_bind_int64(st, 3, pg->limit > INT64_MAX ? INT64_MAX : (sqlite3_int64)pg->limit);
    sqlite3_bind_int64(st, 4, pg->offset > INT64_MAX ? INT64_MAX : (sqlite3_int64)pg->offset);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 4);
        struct cp_store_build_log_entry e = {
            .n = (uint64_t)sqlite3_column_int64(st, 0),
            .time_ns = (uint64_t)sqlite3_column_int64(st, 1),
            .level = sqlite3_column_int(st, 2),
            .step = (const char *)sqlite3_column_text(st, 3),
            .message = msg ? msg : "",
        };
        if ((ret = fn(&e, arg)))
            break;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "reading a build's log");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}

/* ---- snapshots ------------------------------------------------------------------------ */

static void store__col_str(sqlite3_stmt *st, int col, char *out, size_t len)
{
    const char *v = (const char *)sqlite3_column_text(st, col);
    snprintf(out, len, "%s", v ? v : "");
}

static void store__row_to_snap(sqlite3_stmt *st, struct cp_store_snap *r)
{
    memset(r, 0, sizeof *r);
    r->seq = (uint64_t)sqlite3_column_int64(st, 0);
    store__col_str(st, 1, r->id, sizeof r->id);
    store__col_str(st, 2, r->name, sizeof r->name);
    r->version = (uint64_t)sqlite3_column_int64(st, 3);
    store__col_str(st, 4, r->sandbox_id, sizeof r->sandbox_id);
    store__col_str(st, 5, r->parent, sizeof r->parent);
    store__col_str(st, 6, r->template_id, sizeof r->template_id);
    store__col_str(st, 7, r->backend, sizeof r->backend);
    store__col_str(st, 8, r->vmm_version, sizeof r->vmm_version);
    store__col_str(st, 9, r->agent_version, sizeof r->agent_version);
    r->size_bytes = (uint64_t)sqlite3_column_int64(st, 10);
    r->created_ns = (uint64_t)sqlite3_column_int64(st, 11);
    store__col_str(st, 12, r->key_id, sizeof r->key_id);
}

int cp_store_snap_insert(struct cp_store *s, struct cp_store_snap *r, struct al_error *err)
{
    int rc = store__exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    r->version = 0;
    if (r->name[0]) {
        sqlite3_stmt *st = store__st(s, ST_SNAP_NEXT_VERSION);
        sqlite3_bind_text(st, 1, r->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->key_id, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            r->version = (uint64_t)sqlite3_column_int64(st, 0);
        else
            rc = store__err(s, err, "numbering a snapshot");
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    if (!rc) {
        sqlite3_stmt *st = store__st(s, ST_SNAP_INSERT);
        sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)r->version);
        sqlite3_bind_text(st, 4, r->sandbox_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, r->parent, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, r->template_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, r->backend, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 8, r->vmm_version, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 9, r->agent_version, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 10, (sqlite3_int64)r->size_bytes);
        sqlite3_bind_int64(st, 11, (sqlite3_int64)r->created_ns);
        sqlite3_bind_text(st, 12, r->key_id, -1, SQLITE_STATIC);
        rc = store__done(s, st, "recording a snapshot", err);
        sqlite3_clear_bindings(st);
        if (!rc)
            r->seq = (uint64_t)sqlite3_last_insert_rowid(s->db);
    }
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    return store__exec(s, "COMMIT", err);
}

int cp_store_snap_load(struct cp_store *s, const char *id, struct cp_store_snap *out,
                       struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_SNAP_LOAD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        store__row_to_snap(st, out);
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? al_error_set(err, -ENOENT, "no snapshot %s", id)
                               : store__err(s, err, "loading a snapshot");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

int cp_store_snap_delete(struct cp_store *s, const char *id, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_SNAP_DELETE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "deleting a snapshot", err);
    sqlite3_clear_bindings(st);
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = al_error_set(err, -ENOENT, "no snapshot %s", id);
    return rc;
}

int cp_store_snap_list(struct cp_store *s, const struct cp_store_snap_query *q,
                       int (*fn)(const struct cp_store_snap *r, void *arg), void *arg,
                       struct al_error *err)
{
    /* Collected first: fn may use the store (which would reset this statement). */
    sqlite3_stmt *st = store__st(s, ST_SNAP_LIST);
    if (q->sandbox_id)
        sqlite3_bind_text(st, 1, q->sandbox_id, -1, SQLITE_STATIC);
    if (q->key_id)
        sqlite3_bind_text(st, 2, q->key_id, -1, SQLITE_STATIC);
    if (q->name)
        sqlite3_bind_text(st, 3, q->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, q->after_seq > INT64_MAX ? INT64_MAX : (sqlite3_int64)q->after_seq);
    sqlite3_bind_int64(st, 5, !q->limit || q->limit > INT64_MAX ? -1 : (sqlite3_int64)q->limit);
    struct cp_store_snap *rows = NULL;
    size_t n = 0, cap = 0;
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            struct cp_store_snap *v = realloc(rows, c * sizeof *v);
            if (!v) {
                ret = al_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            rows = v;
            cap = c;
        }
        store__row_to_snap(st, &rows[n++]);
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing snapshots");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    for (size_t i = 0; !ret && i < n; i++)
        ret = fn(&rows[i], arg);
    free(rows);
    return ret;
}

/* ---- volumes (volumes.c) ------------------------------------------------------------- */

static void store__row_to_vol(sqlite3_stmt *st, struct cp_store_vol *r)
{
    memset(r, 0, sizeof *r);
    store__col_str(st, 0, r->id, sizeof r->id);
    store__col_str(st, 1, r->name, sizeof r->name);
    store__col_str(st, 2, r->key_id, sizeof r->key_id);
    store__col_str(st, 3, r->token, sizeof r->token);
    r->size_bytes = (uint64_t)sqlite3_column_int64(st, 4);
    r->created_ns = (uint64_t)sqlite3_column_int64(st, 5);
}

int cp_store_vol_insert(struct cp_store *s, const struct cp_store_vol *r, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_VOL_INSERT);
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->key_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)r->size_bytes);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)r->created_ns);
    int rc = sqlite3_step(st);
    int ret = 0;
    if (rc == SQLITE_CONSTRAINT)
        ret = al_error_set(err, -EEXIST, "a volume named \"%s\" exists", r->name);
    else if (rc != SQLITE_DONE)
        ret = store__err(s, err, "recording a volume");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}

static int store__vol_one(struct cp_store *s, sqlite3_stmt *st, struct cp_store_vol *out,
                          const char *what, struct al_error *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        store__row_to_vol(st, out);
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? al_error_set(err, -ENOENT, "no volume %s", what)
                               : store__err(s, err, "loading a volume");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

int cp_store_vol_load(struct cp_store *s, const char *id, struct cp_store_vol *out,
                      struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_VOL_LOAD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    return store__vol_one(s, st, out, id, err);
}

int cp_store_vol_by_name(struct cp_store *s, const char *key_id, const char *name,
                         struct cp_store_vol *out, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_VOL_BY_NAME);
    sqlite3_bind_text(st, 1, key_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    return store__vol_one(s, st, out, name, err);
}

int cp_store_vol_delete(struct cp_store *s, const char *id, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_VOL_DELETE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "deleting a volume", err);
    sqlite3_clear_bindings(st);
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = al_error_set(err, -ENOENT, "no volume %s", id);
    return rc;
}

int cp_store_vol_list(struct cp_store *s, const char *key_id,
                      int (*fn)(const struct cp_store_vol *r, void *arg), void *arg,
                      struct al_error *err)
{
    /* Collected first: fn may use the store (which would reset this statement). */
    sqlite3_stmt *st = store__st(s, ST_VOL_LIST);
    if (key_id)
        sqlite3_bind_text(st, 1, key_id, -1, SQLITE_STATIC);
    struct cp_store_vol *rows = NULL;
    size_t n = 0, cap = 0;
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            struct cp_store_vol *v = realloc(rows, c * sizeof *v);
            if (!v) {
                ret = al_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            rows = v;
            cap = c;
        }
        store__row_to_vol(st, &rows[n++]);
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing volumes");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    for (size_t i = 0; !ret && i < n; i++)
        ret = fn(&rows[i], arg);
    if (rows)
        sodium_memzero(rows, n * sizeof *rows);
    free(rows);
    return ret;
}

/* ---- webhooks (webhooks.c) ----------------------------------------------------------- */

int cp_store_wh_save(struct cp_store *s, const char *id, const char *key_id, uint64_t created_ns,
                     const json_t *doc, const void *secret, size_t secret_len, struct al_error *err)
{
    char *text = store__dump(doc, err);
    if (!text)
        return -ENOMEM;
    sqlite3_stmt *st;
    if (secret) {
        st = store__st(s, ST_WH_SAVE);
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, key_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)created_ns);
        sqlite3_bind_text(st, 4, text, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 5, secret, (int)secret_len, SQLITE_STATIC);
    } else {
        st = store__st(s, ST_WH_SET_DOC);
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    }
    int rc = store__done(s, st, "saving a webhook", err);
    if (!rc && !secret && sqlite3_changes(s->db) == 0)
        rc = al_error_set(err, -ENOENT, "no webhook %s", id);
    sqlite3_clear_bindings(st);
    free(text);
    return rc;
}

int cp_store_wh_delete(struct cp_store *s, const char *id, struct al_error *err)
{
    int rc = store__exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    sqlite3_stmt *st = store__st(s, ST_WH_DELETE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = store__done(s, st, "deleting a webhook", err);
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = al_error_set(err, -ENOENT, "no webhook %s", id);
    if (!rc) {
        st = store__st(s, ST_WH_DELETE_DELIVERIES);
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = store__done(s, st, "deleting a webhook's deliveries", err);
    }
    if (!rc)
        return store__exec(s, "COMMIT", err);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int cp_store_wh_foreach(struct cp_store *s,
                        int (*fn)(const char *id, const char *key_id, uint64_t created_ns,
                                  const json_t *doc, const void *secret, size_t secret_len,
                                  void *arg),
                        void *arg, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_WH_ALL);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *key = (const char *)sqlite3_column_text(st, 1);
        json_t *d = store__doc(st, 3, NULL);
        const void *sec = sqlite3_column_blob(st, 4);
        int sl = sqlite3_column_bytes(st, 4);
        if (!id || !key || !d || !sec) {
            al_warn("state database %s: webhook row %s is malformed: skipped", s->path,
                    id ? id : "?");
            json_decref(d);
            continue;
        }
        /* fn does not use the store (webhooks.c loads them once, at start). */
        ret = fn(id, key, (uint64_t)sqlite3_column_int64(st, 2), d, sec, (size_t)sl, arg);
        json_decref(d);
        if (ret)
            break;
    }
    if (!ret && rc != SQLITE_DONE && rc != SQLITE_ROW)
        ret = store__err(s, err, "listing webhooks");
    sqlite3_reset(st);
    return ret;
}

int cp_store_whd_add(struct cp_store *s, const char *webhook_id, uint64_t time_ns,
                     const char *outcome, const char *doc, uint64_t keep, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_WHD_ADD);
    sqlite3_bind_text(st, 1, webhook_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)time_ns);
    sqlite3_bind_text(st, 3, outcome, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, doc, -1, SQLITE_STATIC);
    int rc = store__done(s, st, "recording a webhook delivery", err);
    sqlite3_clear_bindings(st);
    if (rc || !keep)
        return rc;
    st = store__st(s, ST_WHD_PRUNE);
    sqlite3_bind_text(st, 1, webhook_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)keep);
    rc = store__done(s, st, "pruning a webhook's deliveries", err);
    sqlite3_clear_bindings(st);
    return rc;
}

int cp_store_whd_query(struct cp_store *s, const char *webhook_id, uint64_t limit, uint64_t offset,
                       int (*fn)(const char *doc, void *arg), void *arg, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_WHD_QUERY);
    sqlite3_bind_text(st, 1, webhook_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)limit);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)offset);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *doc = (const char *)sqlite3_column_text(st, 0);
        if (doc && (ret = fn(doc, arg)))
            break;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "listing a webhook's deliveries");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}

int cp_store_whd_stats(struct cp_store *s, const char *webhook_id,
                       int (*fn)(const char *outcome, uint64_t count, uint64_t last_ns, void *arg),
                       void *arg, struct al_error *err)
{
    sqlite3_stmt *st = store__st(s, ST_WHD_STATS);
    sqlite3_bind_text(st, 1, webhook_id, -1, SQLITE_STATIC);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *o = (const char *)sqlite3_column_text(st, 0);
        if (o && (ret = fn(o, (uint64_t)sqlite3_column_int64(st, 1),
                           (uint64_t)sqlite3_column_int64(st, 2), arg)))
            break;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = store__err(s, err, "counting a webhook's deliveries");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}
