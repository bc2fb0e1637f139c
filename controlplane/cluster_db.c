/* controlplane/cluster_db: see cluster_db.h. */
#include "cluster_db.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cp_cluster_db {
    PGconn *conn;
};

/* Serialises migrations of every process on one database (pg_advisory_xact_lock's key:
 * "airlock" in ASCII, as a number). */
#define CLUSTER_DB__MIGRATE_LOCK "27419012907361131"

/* The migrations, in order; migration i brings the schema to version i + 1. Each runs in the
 * one transaction of cp_cluster_db_migrate, with the version row it adds. Never edit a
 * released one: add the next. requires: the oldest schema version a binary must know to
 * work on the database once it is applied: a migration that only adds (a table, a column with
 * a default, an index) keeps the previous requires, so nodes not yet upgraded keep working
 * during a rolling upgrade; one that changes what older binaries rely on raises it. */
static const struct {
    int requires;
    const char *sql;
} cluster_db__migrations[CP_CLUSTER_SCHEMA_VERSION] = {
    /* 1: nodes and their leases */
    {1, "CREATE TABLE nodes ("
        " id text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9.-]{0,62}$'),"
        " address text NOT NULL,"
        " instance text NOT NULL,"
        " cpu integer NOT NULL CHECK (cpu > 0),"
        " memory_bytes bigint NOT NULL CHECK (memory_bytes > 0),"
        " sandboxes_max integer NOT NULL CHECK (sandboxes_max > 0),"
        " sandboxes_running integer NOT NULL DEFAULT 0 CHECK (sandboxes_running >= 0),"
        " cordoned boolean NOT NULL DEFAULT false,"
        " airlockd_version text NOT NULL,"
        " schema_version integer NOT NULL,"
        " registered_at timestamptz NOT NULL DEFAULT now(),"
        " heartbeat_at timestamptz NOT NULL DEFAULT now(),"
        " lease_expires_at timestamptz NOT NULL);"
        "CREATE INDEX nodes_lease ON nodes (lease_expires_at);"},
};

/* The error of a failed call, as libpq words it (one line, no secrets: libpq never puts a
 * password into its messages). */
static int cluster_db__fail(struct al_error *err, int code, const char *what, const char *msg)
{
    char m[400];
    snprintf(m, sizeof m, "%s", msg && msg[0] ? msg : "no answer");
    size_t l = strlen(m);
    while (l && (m[l - 1] == '\n' || m[l - 1] == ' '))
        m[--l] = '\0';
    /* libpq's lines ("...\n\tThis probably means...") as one: runs of white space become
     * one space. */
    char *w = m;
    for (const char *p = m; *p; p++) {
        bool sp = *p == '\n' || *p == '\t' || *p == ' ';
        if (sp && (w == m || w[-1] == ' '))
            continue;
        *w++ = sp ? ' ' : *p;
    }
    *w = '\0';
    return al_error_set(err, code, "cluster database: %s: %s", what, m);
}

static int cluster_db__res_fail(struct cp_cluster_db *db, PGresult *r, const char *what,
                                struct al_error *err)
{
    const char *m = r ? PQresultErrorMessage(r) : PQerrorMessage(db->conn);
    if (!m || !m[0])
        m = PQerrorMessage(db->conn);
    int code = PQstatus(db->conn) == CONNECTION_OK ? -EIO : -ENOTCONN;
    cluster_db__fail(err, code, what, m);
    PQclear(r);
    return code;
}

/* A statement without parameters whose result is not needed. */
static int cluster_db__exec(struct cp_cluster_db *db, const char *sql, const char *what,
                            struct al_error *err)
{
    PGresult *r = PQexec(db->conn, sql);
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, what, err);
    PQclear(r);
    return 0;
}

static PGresult *cluster_db__params(struct cp_cluster_db *db, const char *sql, int n,
                                    const char *const *v)
{
    return PQexecParams(db->conn, sql, n, NULL, v, NULL, NULL, 0);
}

bool cp_cluster_node_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= CP_CLUSTER_NODE_ID_MAX)
        return false;
    if (!islower((unsigned char)id[0]) && !isdigit((unsigned char)id[0]))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!islower(c) && !isdigit(c) && c != '-' && c != '.')
            return false;
    }
    return true;
}

void cp_cluster_db_describe(const char *conninfo, char *out, size_t len)
{
    static const char *const keys[] = {"host", "hostaddr", "port", "dbname", "user", NULL};
    char *perr = NULL;
    PQconninfoOption *o = PQconninfoParse(conninfo ? conninfo : "", &perr);
    if (!o) {
        snprintf(out, len, "(not a valid conninfo)");
        PQfreemem(perr);
        return;
    }
    size_t used = 0;
    out[0] = '\0';
    for (const char *const *k = keys; *k; k++)
        for (PQconninfoOption *p = o; p->keyword; p++)
            if (strcmp(p->keyword, *k) == 0 && p->val && p->val[0] && used < len) {
                int w = snprintf(out + used, len - used, "%s%s=%s", used ? " " : "", *k, p->val);
                if (w > 0)
                    used += (size_t)w;
            }
    if (!out[0])
        snprintf(out, len, "(libpq defaults)");
    PQconninfoFree(o);
}

int cp_cluster_db_open(const char *conninfo, struct cp_cluster_db **out, struct al_error *err)
{
    *out = NULL;
    char *perr = NULL;
    PQconninfoOption *o = PQconninfoParse(conninfo ? conninfo : "", &perr);
    if (!o) {
        int rc = cluster_db__fail(err, -EINVAL, "cluster.database is not a libpq connection string",
                                  perr);
        PQfreemem(perr);
        return rc;
    }
    PQconninfoFree(o);
    struct cp_cluster_db *db = calloc(1, sizeof *db);
    if (!db)
        return al_error_set(err, -ENOMEM, "out of memory");
    /* Bounds, unless the conninfo sets its own (the expanded dbname comes after these and
     * wins): a database that does not answer costs the caller seconds, not forever. */
    const char *const kw[] = {"connect_timeout", "application_name", "options", "dbname", NULL};
    const char *const val[] = {"5", "airlockd", "-c statement_timeout=10000", conninfo, NULL};
    db->conn = PQconnectdbParams(kw, val, 1);
    if (!db->conn) {
        free(db);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    if (PQstatus(db->conn) != CONNECTION_OK) {
        char where[300];
        cp_cluster_db_describe(conninfo, where, sizeof where);
        char what[400];
        snprintf(what, sizeof what, "cannot connect (%s)", where);
        int rc = cluster_db__fail(err, -ENOTCONN, what, PQerrorMessage(db->conn));
        cp_cluster_db_close(db);
        return rc;
    }
    *out = db;
    return 0;
}

void cp_cluster_db_close(struct cp_cluster_db *db)
{
    if (!db)
        return;
    if (db->conn)
        PQfinish(db->conn);
    free(db);
}

bool cp_cluster_db_ok(const struct cp_cluster_db *db)
{
    return db && db->conn && PQstatus(db->conn) == CONNECTION_OK;
}

static int cluster_db__rollback(struct cp_cluster_db *db, int rc)
{
    PQclear(PQexec(db->conn, "ROLLBACK"));
    return rc;
}

int cp_cluster_db_migrate(struct cp_cluster_db *db, int *version, struct al_error *err)
{
    int rc;
    if ((rc = cluster_db__exec(db, "BEGIN", "migrations", err)))
        return rc;
    if ((rc = cluster_db__exec(db,
                               "SELECT pg_advisory_xact_lock(" CLUSTER_DB__MIGRATE_LOCK ");"
                               "CREATE TABLE IF NOT EXISTS schema_version ("
                               " version integer PRIMARY KEY,"
                               " requires integer NOT NULL,"
                               " applied_at timestamptz NOT NULL DEFAULT now(),"
                               " airlockd_version text NOT NULL)",
                               "migrations", err)))
        return cluster_db__rollback(db, rc);
    PGresult *r = PQexec(db->conn, "SELECT coalesce(max(version), 0), coalesce(max(requires), 0)"
                                   " FROM schema_version");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        return cluster_db__rollback(db, cluster_db__res_fail(db, r, "migrations", err));
    int cur = atoi(PQgetvalue(r, 0, 0)), requires = atoi(PQgetvalue(r, 0, 1));
    PQclear(r);
    if (requires > CP_CLUSTER_SCHEMA_VERSION) {
        cluster_db__rollback(db, 0);
        return al_error_set(err, -EPROTO,
                            "cluster database: its schema is version %d and needs an airlockd "
                            "that knows version %d at least; this one (%s) knows %d: upgrade "
                            "this airlockd (a newer one migrated the database)",
                            cur, requires, AIRLOCK_VERSION, CP_CLUSTER_SCHEMA_VERSION);
    }
    for (int v = cur + 1; v <= CP_CLUSTER_SCHEMA_VERSION; v++) {
        char what[64];
        snprintf(what, sizeof what, "migration to schema version %d", v);
        if ((rc = cluster_db__exec(db, cluster_db__migrations[v - 1].sql, what, err)))
            return cluster_db__rollback(db, rc);
        char vs[16], rs[16];
        snprintf(vs, sizeof vs, "%d", v);
        snprintf(rs, sizeof rs, "%d", cluster_db__migrations[v - 1].requires);
        const char *const p[] = {vs, rs, AIRLOCK_VERSION};
        r = cluster_db__params(db,
                               "INSERT INTO schema_version (version, requires, airlockd_version)"
                               " VALUES ($1, $2, $3)",
                               3, p);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            return cluster_db__rollback(db, cluster_db__res_fail(db, r, what, err));
        PQclear(r);
    }
    if ((rc = cluster_db__exec(db, "COMMIT", "migrations", err)))
        return rc;
    if (version)
        *version = cur > CP_CLUSTER_SCHEMA_VERSION ? cur : CP_CLUSTER_SCHEMA_VERSION;
    return 0;
}

int cp_cluster_db_register(struct cp_cluster_db *db, const struct cp_cluster_node *n,
                           uint64_t lease_ms, struct al_error *err)
{
    if (!cp_cluster_node_id_valid(n->id))
        return al_error_set(err, -EINVAL,
                            "cluster: node id \"%s\" is not valid (1..63 of a-z 0-9 . -, "
                            "starting with a letter or digit)",
                            n->id);
    char cpu[24], mem[24], max[24], run[24], lease[24], sv[16];
    snprintf(cpu, sizeof cpu, "%" PRId64, n->cpu);
    snprintf(mem, sizeof mem, "%" PRIu64, n->memory_bytes);
    snprintf(max, sizeof max, "%" PRId64, n->sandboxes_max);
    snprintf(run, sizeof run, "%" PRId64, n->sandboxes_running);
    snprintf(lease, sizeof lease, "%" PRIu64, lease_ms);
    snprintf(sv, sizeof sv, "%d", CP_CLUSTER_SCHEMA_VERSION);
    const char *const p[] = {n->id, n->address, n->instance, cpu, mem,
                             max,   run,        n->version,  sv,  lease};
    /* One statement: a row that is new, this instance's own, or whose lease has expired
     * becomes this instance's; another instance's valid lease is left alone (no row back).
     * Two concurrent registrations of one id serialise on the row: the second sees the
     * first's fresh lease. */
    PGresult *r = cluster_db__params(
        db,
        "INSERT INTO nodes AS n (id, address, instance, cpu, memory_bytes, sandboxes_max,"
        " sandboxes_running, airlockd_version, schema_version, lease_expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + $10::bigint * interval '1 ms')"
        " ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address,"
        " cpu = EXCLUDED.cpu, memory_bytes = EXCLUDED.memory_bytes,"
        " sandboxes_max = EXCLUDED.sandboxes_max, sandboxes_running = EXCLUDED.sandboxes_running,"
        " airlockd_version = EXCLUDED.airlockd_version, schema_version = EXCLUDED.schema_version,"
        " registered_at = CASE WHEN n.instance = EXCLUDED.instance THEN n.registered_at"
        "  ELSE now() END,"
        " instance = EXCLUDED.instance, heartbeat_at = now(),"
        " lease_expires_at = EXCLUDED.lease_expires_at"
        " WHERE n.instance = EXCLUDED.instance OR n.lease_expires_at <= now()"
        " RETURNING id",
        10, p);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "registering the node", err);
    int rows = PQntuples(r);
    PQclear(r);
    if (rows == 1)
        return 0;
    /* Who holds it, for the message (only informative: the decision was the statement's). */
    const char *const q[] = {n->id};
    r = cluster_db__params(db,
                           "SELECT address, greatest(0, (extract(epoch FROM lease_expires_at -"
                           " now()) * 1000)::bigint) FROM nodes WHERE id = $1",
                           1, q);
    char holder[CP_CLUSTER_ADDRESS_MAX] = "?", left[24] = "?";
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        snprintf(holder, sizeof holder, "%s", PQgetvalue(r, 0, 0));
        snprintf(left, sizeof left, "%s", PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    return al_error_set(err, -EBUSY,
                        "cluster: node id \"%s\" is held by another airlockd (at %s) whose lease "
                        "is valid for %s ms more: give this node its own cluster.node_id, or "
                        "stop the other one",
                        n->id, holder, left);
}

int cp_cluster_db_heartbeat(struct cp_cluster_db *db, const char *id, const char *instance,
                            int64_t sandboxes_running, uint64_t lease_ms, struct al_error *err)
{
    char run[24], lease[24];
    snprintf(run, sizeof run, "%" PRId64, sandboxes_running);
    snprintf(lease, sizeof lease, "%" PRIu64, lease_ms);
    const char *const p[] = {id, instance, lease, run};
    PGresult *r = cluster_db__params(
        db,
        "UPDATE nodes SET heartbeat_at = now(),"
        " lease_expires_at = now() + $3::bigint * interval '1 ms', sandboxes_running = $4"
        " WHERE id = $1 AND instance = $2 AND lease_expires_at > now() RETURNING id",
        4, p);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "heartbeat", err);
    int rows = PQntuples(r);
    PQclear(r);
    if (rows != 1)
        return al_error_set(err, -ESTALE,
                            "cluster: node \"%s\" lost its lease (it expired, or another "
                            "airlockd registered the id)",
                            id);
    return 0;
}

int cp_cluster_db_release(struct cp_cluster_db *db, const char *id, const char *instance,
                          struct al_error *err)
{
    const char *const p[] = {id, instance};
    PGresult *r =
        cluster_db__params(db,
                           "UPDATE nodes SET lease_expires_at = least(lease_expires_at, now())"
                           " WHERE id = $1 AND instance = $2",
                           2, p);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return cluster_db__res_fail(db, r, "releasing the lease", err);
    PQclear(r);
    return 0;
}

int cp_cluster_db_cordon(struct cp_cluster_db *db, const char *id, bool cordoned,
                         struct al_error *err)
{
    const char *const p[] = {id, cordoned ? "true" : "false"};
    PGresult *r =
        cluster_db__params(db, "UPDATE nodes SET cordoned = $2 WHERE id = $1 RETURNING id", 2, p);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "cordon", err);
    int rows = PQntuples(r);
    PQclear(r);
    if (rows != 1)
        return al_error_set(err, -ENOENT, "cluster: no node \"%s\"", id);
    return 0;
}

#define CLUSTER_DB__TS(col) \
    "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

int cp_cluster_db_nodes(struct cp_cluster_db *db, bool live_only, struct cp_cluster_node **out,
                        size_t *n, struct al_error *err)
{
    *out = NULL;
    *n = 0;
    char sql[1024];
    snprintf(
        sql, sizeof sql,
        "SELECT id, address, cpu, memory_bytes, sandboxes_max, sandboxes_running, cordoned,"
        " airlockd_version, schema_version, " CLUSTER_DB__TS("registered_at") ", " CLUSTER_DB__TS(
            "heartbeat_at") ", " CLUSTER_DB__TS("lease_expires_at") ","
                                                                    " lease_expires_at > now(),"
                                                                    " (extract(epoch FROM "
                                                                    "lease_expires_at - now()) * "
                                                                    "1000)::bigint"
                                                                    " FROM nodes %s ORDER BY id",
        live_only ? "WHERE lease_expires_at > now()" : "");
    PGresult *r = PQexec(db->conn, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "listing nodes", err);
    int rows = PQntuples(r);
    struct cp_cluster_node *v = rows ? calloc((size_t)rows, sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++) {
        struct cp_cluster_node *x = &v[i];
        snprintf(x->id, sizeof x->id, "%s", PQgetvalue(r, i, 0));
        snprintf(x->address, sizeof x->address, "%s", PQgetvalue(r, i, 1));
        x->cpu = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        x->memory_bytes = strtoull(PQgetvalue(r, i, 3), NULL, 10);
        x->sandboxes_max = strtoll(PQgetvalue(r, i, 4), NULL, 10);
        x->sandboxes_running = strtoll(PQgetvalue(r, i, 5), NULL, 10);
        x->cordoned = PQgetvalue(r, i, 6)[0] == 't';
        snprintf(x->version, sizeof x->version, "%s", PQgetvalue(r, i, 7));
        x->schema_version = atoi(PQgetvalue(r, i, 8));
        snprintf(x->registered_at, sizeof x->registered_at, "%s", PQgetvalue(r, i, 9));
        snprintf(x->heartbeat_at, sizeof x->heartbeat_at, "%s", PQgetvalue(r, i, 10));
        snprintf(x->lease_expires_at, sizeof x->lease_expires_at, "%s", PQgetvalue(r, i, 11));
        x->lease_valid = PQgetvalue(r, i, 12)[0] == 't';
        x->lease_left_ms = strtoll(PQgetvalue(r, i, 13), NULL, 10);
    }
    PQclear(r);
    *out = v;
    *n = (size_t)rows;
    return 0;
}
