/* controlplane/cluster_db: see cluster_db.h. */
#include "cluster_db.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policysel.h"

struct cp_cluster_db {
    PGconn *conn;
};

/* Serialises migrations of every process on one database (pg_advisory_xact_lock's key:
 * "airlock" in ASCII, as a number). */
#define CLUSTER_DB__MIGRATE_LOCK "27419012907361131"
#define CLUSTER_DB__STR_(x)      #x
#define CLUSTER_DB__STR(x)       CLUSTER_DB__STR_(x)
/* Placements one gateway connection may lose in a row to others before it gives up. */
#define CLUSTER_DB__PLACE_TRIES 64

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
    /* 2: what nodes offer (templates, warm sandboxes) and what placements booked; the
     * sandboxes and their owner node. Only additions: a binary of version 1 keeps working. */
    {1, "ALTER TABLE nodes"
        " ADD COLUMN templates jsonb NOT NULL DEFAULT '{}'"
        "  CHECK (jsonb_typeof(templates) = 'object'),"
        " ADD COLUMN cpu_booked integer NOT NULL DEFAULT 0 CHECK (cpu_booked >= 0),"
        " ADD COLUMN memory_booked bigint NOT NULL DEFAULT 0 CHECK (memory_booked >= 0),"
        " ADD COLUMN sandboxes_booked integer NOT NULL DEFAULT 0 CHECK (sandboxes_booked >= 0);"
        "CREATE TABLE sandboxes ("
        " id text PRIMARY KEY,"
        " node_id text NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,"
        " template text NOT NULL,"
        " cpu integer NOT NULL CHECK (cpu >= 0),"
        " memory_bytes bigint NOT NULL CHECK (memory_bytes >= 0),"
        " placed_at timestamptz NOT NULL DEFAULT now());"
        "CREATE INDEX sandboxes_node ON sandboxes (node_id);"},
    /* 3: published policies and what each node applies. Only additions. */
    {1, "CREATE TABLE policies ("
        " name text NOT NULL CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9._-]{0,126}$'),"
        " version integer NOT NULL CHECK (version > 0),"
        " digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),"
        " signature text NOT NULL DEFAULT '' CHECK (signature ~ '^([0-9a-f]{64})?$'),"
        " document text NOT NULL,"
        " published_at timestamptz NOT NULL DEFAULT now(),"
        " published_by text NOT NULL,"
        " PRIMARY KEY (name, version));"
        "ALTER TABLE nodes ADD COLUMN policies jsonb NOT NULL DEFAULT '{}'"
        "  CHECK (jsonb_typeof(policies) = 'object');"},
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
    const char *const p[] = {n->id, n->address, n->instance, cpu,   mem,         max,
                             run,   n->version, sv,          lease, n->templates};
    /* One statement: a row that is new, this instance's own, or whose lease has expired
     * becomes this instance's; another instance's valid lease is left alone (no row back).
     * Two concurrent registrations of one id serialise on the row: the second sees the
     * first's fresh lease. */
    PGresult *r = cluster_db__params(
        db,
        "INSERT INTO nodes AS n (id, address, instance, cpu, memory_bytes, sandboxes_max,"
        " sandboxes_running, airlockd_version, schema_version, lease_expires_at, templates)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + $10::bigint * interval '1 ms',"
        " coalesce($11::jsonb, '{}'))"
        " ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address,"
        " templates = EXCLUDED.templates,"
        " cpu = EXCLUDED.cpu, memory_bytes = EXCLUDED.memory_bytes,"
        " sandboxes_max = EXCLUDED.sandboxes_max, sandboxes_running = EXCLUDED.sandboxes_running,"
        " airlockd_version = EXCLUDED.airlockd_version, schema_version = EXCLUDED.schema_version,"
        " registered_at = CASE WHEN n.instance = EXCLUDED.instance THEN n.registered_at"
        "  ELSE now() END,"
        " instance = EXCLUDED.instance, heartbeat_at = now(),"
        " lease_expires_at = EXCLUDED.lease_expires_at"
        " WHERE n.instance = EXCLUDED.instance OR n.lease_expires_at <= now()"
        " RETURNING id",
        11, p);
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

int cp_cluster_db_heartbeat(struct cp_cluster_db *db, const struct cp_cluster_node *n,
                            uint64_t lease_ms, struct al_error *err)
{
    const char *id = n->id;
    char run[24], lease[24];
    snprintf(run, sizeof run, "%" PRId64, n->sandboxes_running);
    snprintf(lease, sizeof lease, "%" PRIu64, lease_ms);
    const char *const p[] = {id, n->instance, lease, run, n->templates, n->live};
    /* gone: the node's records it no longer has (and stale reservations), deleted in the
     * statement that renews the lease, only while this instance holds it; the renewal
     * books their capacity back. Without a list ($6 NULL) nothing is reconciled. */
    PGresult *r = cluster_db__params(
        db,
        "WITH me AS (SELECT id FROM nodes WHERE id = $1 AND instance = $2"
        "  AND lease_expires_at > now()),"
        "gone AS (DELETE FROM sandboxes s USING me WHERE s.node_id = me.id AND $6::jsonb IS NOT "
        "NULL"
        "  AND ((s.id LIKE '" CP_CLUSTER_RESERVATION_PREFIX "%' AND s.placed_at < now() -"
        "   " CLUSTER_DB__STR(
            CP_CLUSTER_RESERVATION_MAX_S) " * interval '1 s')"
                                          "  OR (s.id NOT LIKE '" CP_CLUSTER_RESERVATION_PREFIX
                                          "%' AND s.placed_at < now() -"
                                          "   " CLUSTER_DB__STR(
                                              CP_CLUSTER_RECONCILE_GRACE_S) " * interval '1 s'"
                                                                            "   AND NOT $6::jsonb "
                                                                            "? s.id))"
                                                                            "  RETURNING s.cpu, "
                                                                            "s.memory_bytes),"
                                                                            "back AS (SELECT "
                                                                            "count(*) AS n, "
                                                                            "coalesce(sum(cpu), 0) "
                                                                            "AS cpu,"
                                                                            "  "
                                                                            "coalesce(sum(memory_"
                                                                            "bytes), 0) AS mem "
                                                                            "FROM gone)"
                                                                            "UPDATE nodes SET "
                                                                            "heartbeat_at = now(),"
                                                                            " lease_expires_at = "
                                                                            "now() + $3::bigint * "
                                                                            "interval '1 ms', "
                                                                            "sandboxes_running = "
                                                                            "$4,"
                                                                            " templates = "
                                                                            "coalesce($5::jsonb, "
                                                                            "'{}'),"
                                                                            " sandboxes_booked = "
                                                                            "greatest(0, "
                                                                            "sandboxes_booked - "
                                                                            "back.n),"
                                                                            " cpu_booked = "
                                                                            "greatest(0, "
                                                                            "cpu_booked - "
                                                                            "back.cpu),"
                                                                            " memory_booked = "
                                                                            "greatest(0, "
                                                                            "memory_booked - "
                                                                            "back.mem)"
                                                                            " FROM back WHERE id = "
                                                                            "$1 AND instance = $2 "
                                                                            "AND lease_expires_at "
                                                                            "> now() RETURNING id",
        6, p);
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
    char sql[2048];
    snprintf(
        sql, sizeof sql,
        "SELECT id, address, cpu, memory_bytes, sandboxes_max, sandboxes_running, cordoned,"
        " airlockd_version, schema_version, " CLUSTER_DB__TS("registered_at") ", " CLUSTER_DB__TS(
            "heartbeat_at") ", " CLUSTER_DB__TS("lease_expires_at") ","
                                                                    " lease_expires_at > now(),"
                                                                    " (extract(epoch FROM "
                                                                    "lease_expires_at - now()) * "
                                                                    "1000)::bigint"
                                                                    ", templates::text,"
                                                                    " cpu_booked, memory_booked,"
                                                                    " sandboxes_booked,"
                                                                    " policies::text"
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
        x->templates = strdup(PQgetvalue(r, i, 14));
        x->policies = strdup(PQgetvalue(r, i, 18));
        if (!x->templates || !x->policies) {
            PQclear(r);
            cp_cluster_nodes_free(v, (size_t)rows);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        x->cpu_booked = strtoll(PQgetvalue(r, i, 15), NULL, 10);
        x->memory_booked = strtoull(PQgetvalue(r, i, 16), NULL, 10);
        x->sandboxes_booked = strtoll(PQgetvalue(r, i, 17), NULL, 10);
    }
    PQclear(r);
    *out = v;
    *n = (size_t)rows;
    return 0;
}

void cp_cluster_nodes_free(struct cp_cluster_node *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].templates);
        free(v[i].policies);
    }
    free(v);
}

/* The SQLSTATE of a failed result ("" without one). */
static const char *cluster_db__state(const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

/* Why nothing was placed, for the caller and the user: the numbers behind the refusal. */
static int cluster_db__why_not(struct cp_cluster_db *db, const struct cp_cluster_place *p,
                               const char *exclude, struct al_error *err)
{
    const char *const q[] = {p->template_id, exclude};
    PGresult *r = cluster_db__params(
        db,
        "SELECT count(*) FILTER (WHERE lease_expires_at > now()),"
        " count(*) FILTER (WHERE lease_expires_at > now() AND templates ? $1::text),"
        " count(*) FILTER (WHERE lease_expires_at > now() AND templates ? $1::text AND cordoned),"
        " count(*) FILTER (WHERE lease_expires_at > now() AND templates ? $1::text"
        "  AND NOT cordoned AND id = ANY(string_to_array($2::text, ',')))"
        " FROM nodes",
        2, q);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        return cluster_db__res_fail(db, r, "placement", err);
    long live = atol(PQgetvalue(r, 0, 0)), with = atol(PQgetvalue(r, 0, 1));
    long cordoned = atol(PQgetvalue(r, 0, 2)), excluded = atol(PQgetvalue(r, 0, 3));
    PQclear(r);
    if (live == 0)
        return al_error_set(err, -EHOSTDOWN,
                            "cluster: no node has a valid lease (none is heartbeating): "
                            "nowhere to place sandbox %s",
                            p->sandbox_id);
    if (with == 0)
        return al_error_set(err, -ENOENT, "cluster: none of the %ld live nodes has template \"%s\"",
                            live, p->template_id);
    return al_error_set(err, -ENOSPC,
                        "cluster: no room for sandbox %s (template \"%s\", %lld vCPU, %llu MiB): "
                        "of the %ld live nodes with the template, %ld are cordoned, %ld were "
                        "tried already and the others are full",
                        p->sandbox_id, p->template_id, (long long)p->cpu,
                        (unsigned long long)(p->memory_bytes >> 20), with, cordoned, excluded);
}

int cp_cluster_db_place(struct cp_cluster_db *db, const struct cp_cluster_place *p,
                        struct cp_cluster_owner *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (!p->sandbox_id || !p->sandbox_id[0] || !p->template_id || !p->template_id[0] ||
        p->cpu < 0 || p->cpu > INT32_MAX || p->memory_bytes > INT64_MAX)
        return al_error_set(err, -EINVAL,
                            "cluster: a placement needs a sandbox id, a template and a CPU "
                            "count and memory size in range");
    /* The nodes not to pick, as "a,b,c" (a node id has no comma). */
    char exclude[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < p->n_exclude; i++) {
        if (!cp_cluster_node_id_valid(p->exclude[i]))
            return al_error_set(err, -EINVAL, "cluster: \"%s\" is not a node id", p->exclude[i]);
        int w =
            snprintf(exclude + used, sizeof exclude - used, "%s%s", used ? "," : "", p->exclude[i]);
        if (w < 0 || (size_t)w >= sizeof exclude - used)
            return al_error_set(err, -EINVAL, "cluster: too many nodes to exclude");
        used += (size_t)w;
    }
    char cpu[24], mem[24];
    snprintf(cpu, sizeof cpu, "%" PRId64, p->cpu);
    snprintf(mem, sizeof mem, "%" PRIu64, p->memory_bytes);
    const char *const v[] = {p->sandbox_id, p->template_id, cpu, mem, exclude};
    /* pick chooses a node from the statement's snapshot without locking it; upd books it
     * only if the room is still there on the row's newest version (a concurrent booking
     * makes PostgreSQL wait for it and re-check); ins records the sandbox as the node's.
     * One statement: all of it, or nothing (a duplicate id undoes the booking). Each
     * statement locks one nodes row at most: a pick that locked its candidates in sort
     * order (FOR UPDATE) kept the rows it had to skip locked, and two placements whose
     * orders differed (the load ratios they saw, random() among equals) deadlocked. A
     * lost race (upd found the room, or the warm sandbox it counted on, gone) tries again
     * on a new snapshot; each loss is another placement's success, so the tries are
     * bounded by the contention. */
    for (int attempt = 0;; attempt++) {
        PGresult *r = cluster_db__params(
            db,
            "WITH pick AS ("
            " SELECT id, CASE WHEN jsonb_typeof(templates -> $2::text) = 'number'"
            "  THEN (templates ->> $2::text)::numeric >= 1 ELSE false END AS warm"
            " FROM nodes"
            " WHERE lease_expires_at > now() AND NOT cordoned AND templates ? $2::text"
            "  AND sandboxes_booked < sandboxes_max AND cpu_booked + $3::integer <= cpu"
            "  AND memory_booked + $4::bigint <= memory_bytes"
            "  AND NOT (id = ANY(string_to_array($5::text, ',')))"
            " ORDER BY 2 DESC, greatest(sandboxes_booked::float8 / sandboxes_max,"
            "  cpu_booked::float8 / cpu, memory_booked::float8 / memory_bytes), random()"
            " LIMIT 1),"
            "upd AS ("
            " UPDATE nodes n SET sandboxes_booked = n.sandboxes_booked + 1,"
            "  cpu_booked = n.cpu_booked + $3::integer,"
            "  memory_booked = n.memory_booked + $4::bigint,"
            "  templates = CASE WHEN pick.warm THEN jsonb_set(n.templates, ARRAY[$2::text],"
            "   to_jsonb((n.templates ->> $2::text)::numeric - 1)) ELSE n.templates END"
            " FROM pick WHERE n.id = pick.id AND n.lease_expires_at > now()"
            "  AND NOT n.cordoned AND n.templates ? $2::text"
            "  AND n.sandboxes_booked < n.sandboxes_max"
            "  AND n.cpu_booked + $3::integer <= n.cpu"
            "  AND n.memory_booked + $4::bigint <= n.memory_bytes"
            "  AND (NOT pick.warm OR (jsonb_typeof(n.templates -> $2::text) = 'number'"
            "   AND (n.templates ->> $2::text)::numeric >= 1))"
            " RETURNING n.id, n.address, pick.warm),"
            "ins AS ("
            " INSERT INTO sandboxes (id, node_id, template, cpu, memory_bytes)"
            " SELECT $1::text, id, $2::text, $3::integer, $4::bigint FROM upd RETURNING node_id)"
            "SELECT pick.id, b.address, b.warm FROM pick LEFT JOIN"
            " (SELECT upd.id, upd.address, upd.warm FROM upd JOIN ins ON ins.node_id = upd.id) b"
            " ON b.id = pick.id",
            5, v);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            if (strcmp(cluster_db__state(r), "23505") == 0) { /* unique_violation */
                PQclear(r);
                return al_error_set(err, -EEXIST, "cluster: sandbox %s is placed already",
                                    p->sandbox_id);
            }
            return cluster_db__res_fail(db, r, "placement", err);
        }
        if (PQntuples(r) != 1) {
            PQclear(r);
            return cluster_db__why_not(db, p, exclude, err);
        }
        if (PQgetisnull(r, 0, 1)) { /* picked, but another placement took the room first */
            PQclear(r);
            if (attempt + 1 >= CLUSTER_DB__PLACE_TRIES)
                return al_error_set(err, -EAGAIN,
                                    "cluster: sandbox %s lost the race for a node's room %d "
                                    "times in a row (as many placements at once as that): "
                                    "try again",
                                    p->sandbox_id, CLUSTER_DB__PLACE_TRIES);
            continue;
        }
        snprintf(out->node_id, sizeof out->node_id, "%s", PQgetvalue(r, 0, 0));
        snprintf(out->address, sizeof out->address, "%s", PQgetvalue(r, 0, 1));
        out->warm = PQgetvalue(r, 0, 2)[0] == 't';
        out->lease_valid = true;
        PQclear(r);
        return 0;
    }
}

int cp_cluster_db_unplace(struct cp_cluster_db *db, const char *sandbox_id, struct al_error *err)
{
    const char *const v[] = {sandbox_id};
    PGresult *r = cluster_db__params(
        db,
        "WITH d AS (DELETE FROM sandboxes WHERE id = $1::text"
        " RETURNING node_id, cpu, memory_bytes)"
        "UPDATE nodes n SET sandboxes_booked = greatest(0, n.sandboxes_booked - 1),"
        " cpu_booked = greatest(0, n.cpu_booked - d.cpu),"
        " memory_booked = greatest(0, n.memory_booked - d.memory_bytes)"
        " FROM d WHERE n.id = d.node_id RETURNING n.id",
        1, v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "releasing a placement", err);
    int rows = PQntuples(r);
    PQclear(r);
    if (rows != 1)
        return al_error_set(err, -ENOENT, "cluster: sandbox %s is not placed", sandbox_id);
    return 0;
}

int cp_cluster_db_owner(struct cp_cluster_db *db, const char *sandbox_id,
                        struct cp_cluster_owner *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    const char *const v[] = {sandbox_id};
    PGresult *r = cluster_db__params(db,
                                     "SELECT n.id, n.address, n.lease_expires_at > now()"
                                     " FROM sandboxes s JOIN nodes n ON n.id = s.node_id"
                                     " WHERE s.id = $1::text",
                                     1, v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "looking up a sandbox's node", err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return al_error_set(err, -ENOENT, "cluster: sandbox %s is not placed", sandbox_id);
    }
    snprintf(out->node_id, sizeof out->node_id, "%s", PQgetvalue(r, 0, 0));
    snprintf(out->address, sizeof out->address, "%s", PQgetvalue(r, 0, 1));
    out->lease_valid = PQgetvalue(r, 0, 2)[0] == 't';
    PQclear(r);
    return 0;
}

int cp_cluster_db_rename(struct cp_cluster_db *db, const char *from, const char *to,
                         struct al_error *err)
{
    const char *const v[] = {from, to};
    PGresult *r = cluster_db__params(
        db,
        "UPDATE sandboxes SET id = $2::text, placed_at = now() WHERE id = $1::text RETURNING id", 2,
        v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        if (strcmp(cluster_db__state(r), "23505") == 0) {
            PQclear(r);
            return al_error_set(err, -EEXIST, "cluster: sandbox %s is placed already", to);
        }
        return cluster_db__res_fail(db, r, "naming a placement", err);
    }
    int rows = PQntuples(r);
    PQclear(r);
    if (rows != 1)
        return al_error_set(err, -ENOENT, "cluster: no placement %s", from);
    return 0;
}

int cp_cluster_db_node_sandboxes(struct cp_cluster_db *db, const char *node_id, size_t max,
                                 struct cp_cluster_placed_list *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", max);
    const char *const v[] = {node_id, lim};
    PGresult *r = cluster_db__params(db,
                                     "SELECT id, template, count(*) OVER () FROM sandboxes"
                                     " WHERE node_id = $1::text ORDER BY placed_at, id"
                                     " LIMIT $2::bigint",
                                     2, v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "listing a node's sandboxes", err);
    int rows = PQntuples(r);
    out->v = rows ? calloc((size_t)rows, sizeof *out->v) : NULL;
    if (rows && !out->v) {
        PQclear(r);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++) {
        snprintf(out->v[i].id, sizeof out->v[i].id, "%s", PQgetvalue(r, i, 0));
        snprintf(out->v[i].template_id, sizeof out->v[i].template_id, "%s", PQgetvalue(r, i, 1));
    }
    out->n = (size_t)rows;
    /* Past the limit the window's count still says how many there are. */
    if (rows)
        out->total = strtoull(PQgetvalue(r, 0, 2), NULL, 10);
    PQclear(r);
    return 0;
}

void cp_cluster_placed_free(struct cp_cluster_placed_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- published policies ------------------------------------------------------------------ */

void cp_cluster_policy_digest(const char *doc, size_t len, char out[65])
{
    uint8_t h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const uint8_t *)doc, len);
    sodium_bin2hex(out, 65, h, sizeof h);
}

void cp_cluster_policy_sign(const char *token, const struct cp_cluster_policy *p, char out[65])
{
    out[0] = '\0';
    if (!token || !token[0])
        return;
    /* What is signed names its purpose: a token's HMAC of anything else never passes. */
    char msg[CP_POLICY_NAME_MAX + 160];
    int n = snprintf(msg, sizeof msg, "airlock cluster policy v1\n%s\n%" PRId64 "\n%s", p->name,
                     p->version, p->digest);
    crypto_auth_hmacsha256_state st;
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_init(&st, (const uint8_t *)token, strlen(token));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)msg, (size_t)n);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof st);
    sodium_bin2hex(out, 65, mac, sizeof mac);
}

bool cp_cluster_policy_signed(const char *token, const struct cp_cluster_policy *p)
{
    char want[65];
    cp_cluster_policy_sign(token, p, want);
    return strlen(p->signature) == 64 && want[0] && sodium_memcmp(want, p->signature, 64) == 0;
}

#define CLUSTER_DB__POLICY_COLS \
    "name, version, digest, signature, " CLUSTER_DB__TS("published_at") ", published_by"

static void cluster_db__policy_row(PGresult *r, int i, struct cp_cluster_policy *x)
{
    snprintf(x->name, sizeof x->name, "%s", PQgetvalue(r, i, 0));
    x->version = strtoll(PQgetvalue(r, i, 1), NULL, 10);
    snprintf(x->digest, sizeof x->digest, "%s", PQgetvalue(r, i, 2));
    snprintf(x->signature, sizeof x->signature, "%s", PQgetvalue(r, i, 3));
    snprintf(x->published_at, sizeof x->published_at, "%s", PQgetvalue(r, i, 4));
    snprintf(x->published_by, sizeof x->published_by, "%s", PQgetvalue(r, i, 5));
    x->document = NULL;
}

int cp_cluster_db_policy_publish(struct cp_cluster_db *db, const struct cp_cluster_policy *p,
                                 const char *token, struct cp_cluster_policy *out,
                                 struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (!cp_policy_name_valid(p->name))
        return al_error_set(err, -EINVAL,
                            "cluster: \"%s\" is not a policy name (1..127 of letters, digits, "
                            "'.', '_', '-', not starting with '.' or '-')",
                            p->name);
    size_t len = p->document ? strlen(p->document) : 0;
    if (!len || len > CP_CLUSTER_POLICY_MAX)
        return al_error_set(err, -EINVAL, "cluster: a policy document is 1 byte to %u MiB",
                            CP_CLUSTER_POLICY_MAX >> 20);
    struct cp_cluster_policy x = *p;
    x.document = NULL;
    cp_cluster_policy_digest(p->document, len, x.digest);
    /* The next number, then the row with it: a publication of the same name that took the
     * number meanwhile makes the insert fail on the key, and this one takes the next. */
    for (int attempt = 0; attempt < CLUSTER_DB__PLACE_TRIES; attempt++) {
        const char *const q[] = {x.name};
        PGresult *r = cluster_db__params(
            db, "SELECT coalesce(max(version), 0) + 1 FROM policies WHERE name = $1::text", 1, q);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            return cluster_db__res_fail(db, r, "publishing a policy", err);
        x.version = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        cp_cluster_policy_sign(token, &x, x.signature);
        char ver[24];
        snprintf(ver, sizeof ver, "%" PRId64, x.version);
        const char *const v[] = {x.name, ver, x.digest, x.signature, p->document, x.published_by};
        r = cluster_db__params(db,
                               "INSERT INTO policies (name, version, digest, signature, document,"
                               " published_by) VALUES ($1, $2, $3, $4, $5, $6)"
                               " RETURNING " CLUSTER_DB__POLICY_COLS,
                               6, v);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            cluster_db__policy_row(r, 0, out);
            PQclear(r);
            return 0;
        }
        if (strcmp(cluster_db__state(r), "23505") != 0) /* not a lost race */
            return cluster_db__res_fail(db, r, "publishing a policy", err);
        PQclear(r);
    }
    return al_error_set(err, -EAGAIN,
                        "cluster: policy %s: %d publications at once took every version "
                        "number first: try again",
                        x.name, CLUSTER_DB__PLACE_TRIES);
}

int cp_cluster_db_policies(struct cp_cluster_db *db, const char *name,
                           struct cp_cluster_policy **out, size_t *n, struct al_error *err)
{
    *out = NULL;
    *n = 0;
    const char *const v[] = {name};
    PGresult *r = name ? cluster_db__params(db,
                                            "SELECT " CLUSTER_DB__POLICY_COLS " FROM policies"
                                            " WHERE name = $1::text ORDER BY version DESC",
                                            1, v)
                       : PQexec(db->conn, "SELECT DISTINCT ON (name) " CLUSTER_DB__POLICY_COLS
                                          " FROM policies ORDER BY name, version DESC");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "listing policies", err);
    int rows = PQntuples(r);
    struct cp_cluster_policy *a = rows ? calloc((size_t)rows, sizeof *a) : NULL;
    if (rows && !a) {
        PQclear(r);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++)
        cluster_db__policy_row(r, i, &a[i]);
    PQclear(r);
    *out = a;
    *n = (size_t)rows;
    return 0;
}

int cp_cluster_db_policy(struct cp_cluster_db *db, const char *name, int64_t version,
                         struct cp_cluster_policy *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    char ver[24];
    snprintf(ver, sizeof ver, "%" PRId64, version);
    const char *const v[] = {name, ver};
    PGresult *r = cluster_db__params(db,
                                     "SELECT " CLUSTER_DB__POLICY_COLS ", document FROM policies"
                                     " WHERE name = $1::text AND ($2::integer = 0 OR version ="
                                     " $2::integer) ORDER BY version DESC LIMIT 1",
                                     2, v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return cluster_db__res_fail(db, r, "reading a policy", err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        if (version)
            return al_error_set(err, -ENOENT, "cluster: policy %s has no version %" PRId64, name,
                                version);
        return al_error_set(err, -ENOENT, "cluster: no policy %s is published", name);
    }
    cluster_db__policy_row(r, 0, out);
    out->document = strdup(PQgetvalue(r, 0, 6));
    PQclear(r);
    return out->document ? 0 : al_error_set(err, -ENOMEM, "out of memory");
}

int cp_cluster_db_policies_report(struct cp_cluster_db *db, const char *id, const char *instance,
                                  const char *applied, struct al_error *err)
{
    const char *const p[] = {id, instance, applied};
    PGresult *r = cluster_db__params(db,
                                     "UPDATE nodes SET policies = $3::jsonb"
                                     " WHERE id = $1 AND instance = $2",
                                     3, p);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return cluster_db__res_fail(db, r, "reporting the applied policies", err);
    PQclear(r);
    return 0;
}
