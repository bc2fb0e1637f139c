/* tests/unit/controlplane/test_cp_cluster_db: the cluster store (cluster_db.c) against a real
 * PostgreSQL 15, the private server tests/lib/pg.sh starts for this suite (AIRLOCK_TEST_PG_ADMIN:
 * its conninfo). Each test case makes a database of its own and drops it at the end. */
#include "al_test.h"
#include "controlplane/cluster_db.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

static char t__db[64];
static char t__conninfo[1024];

static const char *t__admin(void)
{
    const char *a = getenv("AIRLOCK_TEST_PG_ADMIN");
    ck_assert_msg(a && a[0], "AIRLOCK_TEST_PG_ADMIN is not set: run this suite through "
                             "tests/lib/pg.sh (ctest does)");
    return a;
}

static void t__admin_exec(const char *sql)
{
    PGconn *c = PQconnectdb(t__admin());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "admin connection: %s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* A fresh database for this test case; its conninfo in t__conninfo. */
static void t__setup(void)
{
    static int n;
    snprintf(t__db, sizeof t__db, "t_%d_%d", (int)getpid(), n++);
    char sql[128];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", t__db);
    t__admin_exec(sql);
    /* A repeated keyword: the last one wins. */
    snprintf(t__conninfo, sizeof t__conninfo, "%s dbname=%s", t__admin(), t__db);
}

static void t__teardown(void)
{
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", t__db);
    t__admin_exec(sql);
}

static struct cp_cluster_db *t__open(void)
{
    struct cp_cluster_db *db = NULL;
    struct al_error e = {0};
    int rc = cp_cluster_db_open(t__conninfo, &db, &e);
    ck_assert_msg(rc == 0, "open: %s", al_error_str(&e));
    return db;
}

/* One value of a query in the test's database, as text (static). */
static const char *t__value(const char *sql)
{
    static char v[256];
    PGconn *c = PQconnectdb(t__conninfo);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql,
                  PQerrorMessage(c));
    snprintf(v, sizeof v, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    return v;
}

static void t__node(struct cp_cluster_node *n, const char *id, const char *instance)
{
    memset(n, 0, sizeof *n);
    snprintf(n->id, sizeof n->id, "%s", id);
    snprintf(n->address, sizeof n->address, "192.0.2.10:3000");
    snprintf(n->instance, sizeof n->instance, "%s", instance);
    snprintf(n->version, sizeof n->version, "test");
    n->cpu = 8;
    n->memory_bytes = 16ull << 30;
    n->sandboxes_max = 100;
}

static size_t t__live(struct cp_cluster_db *db, const char *id)
{
    struct cp_cluster_node *v;
    size_t n, hits = 0;
    struct al_error e = {0};
    ck_assert_msg(cp_cluster_db_nodes(db, true, &v, &n, &e) == 0, "%s", al_error_str(&e));
    for (size_t i = 0; i < n; i++) {
        ck_assert(v[i].lease_valid);
        if (strcmp(v[i].id, id) == 0)
            hits++;
    }
    cp_cluster_nodes_free(v, n);
    return hits;
}

/* Migrating twice is migrating once: the same version, one row per version, the tables kept
 * (with their rows). */
START_TEST(migrations_are_idempotent)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    int v = -1;
    ck_assert_msg(cp_cluster_db_migrate(db, &v, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_eq(v, CP_CLUSTER_SCHEMA_VERSION);
    struct cp_cluster_node n;
    t__node(&n, "node-a", "i1");
    ck_assert_msg(cp_cluster_db_register(db, &n, 60000, &e) == 0, "%s", al_error_str(&e));
    v = -1;
    ck_assert_msg(cp_cluster_db_migrate(db, &v, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_eq(v, CP_CLUSTER_SCHEMA_VERSION);
    char want[16];
    snprintf(want, sizeof want, "%d", CP_CLUSTER_SCHEMA_VERSION);
    ck_assert_str_eq(t__value("SELECT count(*) FROM schema_version"), want);
    ck_assert_str_eq(t__value("SELECT max(version) FROM schema_version"), want);
    ck_assert_str_eq(t__value("SELECT count(*) FROM nodes"), "1");
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

struct t_mig {
    pthread_barrier_t *go;
    int rc;
    char msg[AL_ERROR_MSG_MAX];
};

static void *t__migrate_thread(void *arg)
{
    struct t_mig *m = arg;
    struct cp_cluster_db *db = NULL;
    struct al_error e = {0};
    m->rc = cp_cluster_db_open(t__conninfo, &db, &e);
    pthread_barrier_wait(m->go); /* all connected (or failed): now at once */
    if (!m->rc)
        m->rc = cp_cluster_db_migrate(db, NULL, &e);
    snprintf(m->msg, sizeof m->msg, "%s", al_error_str(&e));
    cp_cluster_db_close(db);
    return NULL;
}

/* Processes starting at once on an empty database: the advisory lock lets one migrate, the
 * others find the schema done (no "relation already exists"). */
START_TEST(concurrent_migrations_serialise)
{
    t__setup();
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    struct t_mig m[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        m[i] = (struct t_mig){.go = &go};
        ck_assert_int_eq(pthread_create(&th[i], NULL, t__migrate_thread, &m[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(m[i].rc == 0, "migration %d: %s", i, m[i].msg);
    }
    pthread_barrier_destroy(&go);
    char want[16];
    snprintf(want, sizeof want, "%d", CP_CLUSTER_SCHEMA_VERSION);
    ck_assert_str_eq(t__value("SELECT count(*) FROM schema_version"), want);
    t__teardown();
}
END_TEST

/* A schema a newer airlockd made: refused, saying which versions, and left as it is, when it
 * needs that newer binary; used as it is when its newer migrations only added (a node not yet
 * upgraded in a rolling upgrade). */
START_TEST(a_newer_schema_is_refused_unless_compatible)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    PGconn *c = PQconnectdb(t__conninfo);
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT INTO schema_version (version, requires, airlockd_version)"
             " VALUES (%d, 1, 'x')",
             CP_CLUSTER_SCHEMA_VERSION + 1);
    PQclear(PQexec(c, sql));
    int v = -1;
    ck_assert_msg(cp_cluster_db_migrate(db, &v, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_eq(v, CP_CLUSTER_SCHEMA_VERSION + 1);
    PQclear(PQexec(c, "INSERT INTO schema_version (version, requires, airlockd_version)"
                      " VALUES (70, 70, 'x')"));
    PQfinish(c);
    v = -1;
    ck_assert_int_eq(cp_cluster_db_migrate(db, &v, &e), -EPROTO);
    ck_assert_int_eq(v, -1);
    char knows[32];
    snprintf(knows, sizeof knows, "knows %d", CP_CLUSTER_SCHEMA_VERSION);
    ck_assert_msg(strstr(e.msg, "version 70") && strstr(e.msg, knows), "%s", e.msg);
    ck_assert_str_eq(t__value("SELECT max(version) FROM schema_version"), "70");
    snprintf(knows, sizeof knows, "%d", CP_CLUSTER_SCHEMA_VERSION + 2);
    ck_assert_str_eq(t__value("SELECT count(*) FROM schema_version"), knows);
    /* The connection is usable after the refusal (its transaction was rolled back). */
    ck_assert(cp_cluster_db_ok(db));
    struct cp_cluster_node *nv;
    size_t nn;
    ck_assert_msg(cp_cluster_db_nodes(db, false, &nv, &nn, &e) == 0, "%s", al_error_str(&e));
    ck_assert_uint_eq(nn, 0);
    cp_cluster_nodes_free(nv, nn);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

/* A registration and its heartbeats keep a lease the database's clock judges; once no
 * heartbeat comes, it expires, the node is no longer live, its next heartbeat says the lease
 * is lost, and registering again makes it live. */
START_TEST(heartbeats_keep_the_lease_and_it_expires_without)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    struct cp_cluster_node n;
    t__node(&n, "node-a", "inst-1");
    n.sandboxes_running = 3;
    ck_assert_msg(cp_cluster_db_register(db, &n, 60000, &e) == 0, "%s", al_error_str(&e));
    ck_assert_uint_eq(t__live(db, "node-a"), 1);
    n.sandboxes_running = 5;
    ck_assert_msg(cp_cluster_db_heartbeat(db, &n, 60000, &e) == 0, "%s", al_error_str(&e));
    struct cp_cluster_node *v;
    size_t nn;
    ck_assert_int_eq(cp_cluster_db_nodes(db, false, &v, &nn, &e), 0);
    ck_assert_uint_eq(nn, 1);
    ck_assert_str_eq(v[0].id, "node-a");
    ck_assert_str_eq(v[0].address, "192.0.2.10:3000");
    ck_assert_int_eq(v[0].cpu, 8);
    ck_assert_uint_eq(v[0].memory_bytes, 16ull << 30);
    ck_assert_int_eq(v[0].sandboxes_max, 100);
    ck_assert_int_eq(v[0].sandboxes_running, 5);
    ck_assert_int_eq(v[0].schema_version, CP_CLUSTER_SCHEMA_VERSION);
    ck_assert(v[0].lease_valid);
    ck_assert(!v[0].cordoned);
    ck_assert_msg(v[0].lease_left_ms > 50000 && v[0].lease_left_ms <= 60000, "%lld",
                  (long long)v[0].lease_left_ms);
    ck_assert_msg(strlen(v[0].lease_expires_at) == 24 && v[0].lease_expires_at[23] == 'Z', "%s",
                  v[0].lease_expires_at);
    cp_cluster_nodes_free(v, nn);
    /* Another instance's heartbeat on the id renews nothing. */
    struct cp_cluster_node other;
    t__node(&other, "node-a", "inst-2");
    ck_assert_int_eq(cp_cluster_db_heartbeat(db, &other, 60000, &e), -ESTALE);

    /* A short lease, then no heartbeat: expired by the database's clock (waited for, with
     * a bound, rather than slept). */
    ck_assert_int_eq(cp_cluster_db_register(db, &n, 300, &e), 0);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (t__live(db, "node-a")) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ck_assert_msg(t1.tv_sec - t0.tv_sec < 60, "the lease of 300 ms never expired");
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
    ck_assert_int_eq(cp_cluster_db_nodes(db, false, &v, &nn, &e), 0);
    ck_assert_uint_eq(nn, 1); /* still listed, as expired */
    ck_assert(!v[0].lease_valid);
    ck_assert_int_le(v[0].lease_left_ms, 0);
    cp_cluster_nodes_free(v, nn);
    ck_assert_int_eq(cp_cluster_db_heartbeat(db, &n, 60000, &e), -ESTALE);
    ck_assert_msg(strstr(e.msg, "lost its lease"), "%s", e.msg);
    /* An expired lease is anybody's: another instance takes the id... */
    struct cp_cluster_node m;
    t__node(&m, "node-a", "inst-2");
    ck_assert_msg(cp_cluster_db_register(db, &m, 60000, &e) == 0, "%s", al_error_str(&e));
    ck_assert_uint_eq(t__live(db, "node-a"), 1);
    /* ... and a clean stop releases it at once. */
    ck_assert_int_eq(cp_cluster_db_release(db, "node-a", "inst-2", &e), 0);
    ck_assert_uint_eq(t__live(db, "node-a"), 0);
    ck_assert_int_eq(cp_cluster_db_register(db, &n, 60000, &e), 0);
    ck_assert_uint_eq(t__live(db, "node-a"), 1);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

struct t_reg {
    pthread_barrier_t *go;
    char id[32], instance[32];
    int rc;
    char msg[AL_ERROR_MSG_MAX];
};

static void *t__register_thread(void *arg)
{
    struct t_reg *r = arg;
    struct cp_cluster_db *db = NULL;
    struct al_error e = {0};
    r->rc = cp_cluster_db_open(t__conninfo, &db, &e);
    pthread_barrier_wait(r->go);
    if (!r->rc) {
        struct cp_cluster_node n;
        t__node(&n, r->id, r->instance);
        r->rc = cp_cluster_db_register(db, &n, 60000, &e);
    }
    snprintf(r->msg, sizeof r->msg, "%s", al_error_str(&e));
    cp_cluster_db_close(db);
    return NULL;
}

#define T_RACERS 8

/* Registrations at once, each on its own connection: of those naming one id, exactly one
 * wins and the others are told who holds it; different ids all succeed. */
START_TEST(concurrent_registrations)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, T_RACERS);
    struct t_reg r[T_RACERS];
    pthread_t th[T_RACERS];
    for (int i = 0; i < T_RACERS; i++) {
        r[i] = (struct t_reg){.go = &go};
        /* half on one id, the other half on ids of their own */
        if (i % 2)
            snprintf(r[i].id, sizeof r[i].id, "shared");
        else
            snprintf(r[i].id, sizeof r[i].id, "own-%d", i);
        snprintf(r[i].instance, sizeof r[i].instance, "inst-%d", i);
        ck_assert_int_eq(pthread_create(&th[i], NULL, t__register_thread, &r[i]), 0);
    }
    int won = 0;
    for (int i = 0; i < T_RACERS; i++) {
        pthread_join(th[i], NULL);
        if (i % 2 == 0) {
            ck_assert_msg(r[i].rc == 0, "%s: %s", r[i].id, r[i].msg);
        } else if (r[i].rc == 0) {
            won++;
        } else {
            ck_assert_msg(r[i].rc == -EBUSY, "%d: %s", r[i].rc, r[i].msg);
            ck_assert_msg(strstr(r[i].msg, "held by another airlockd"), "%s", r[i].msg);
        }
    }
    pthread_barrier_destroy(&go);
    ck_assert_int_eq(won, 1);
    ck_assert_str_eq(t__value("SELECT count(*) FROM nodes"), "5");
    ck_assert_uint_eq(t__live(db, "shared"), 1);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

/* A cordon survives the node's re-registration (a restart); an unknown node has none. */
START_TEST(cordon_survives_reregistration)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    struct cp_cluster_node n;
    t__node(&n, "node-a", "i1");
    ck_assert_int_eq(cp_cluster_db_register(db, &n, 60000, &e), 0);
    ck_assert_int_eq(cp_cluster_db_cordon(db, "node-a", true, &e), 0);
    ck_assert_int_eq(cp_cluster_db_release(db, "node-a", "i1", &e), 0);
    t__node(&n, "node-a", "i2");
    ck_assert_int_eq(cp_cluster_db_register(db, &n, 60000, &e), 0);
    ck_assert_str_eq(t__value("SELECT cordoned FROM nodes WHERE id = 'node-a'"), "t");
    ck_assert_int_eq(cp_cluster_db_cordon(db, "nope", true, &e), -ENOENT);
    /* Ids the schema would refuse are refused before it, with a message. */
    t__node(&n, "Bad_Id", "i3");
    ck_assert_int_eq(cp_cluster_db_register(db, &n, 60000, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "Bad_Id"), "%s", e.msg);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

/* Bad and unreachable databases: clear errors that never repeat the password. */
START_TEST(errors_never_show_the_password)
{
    struct cp_cluster_db *db = NULL;
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_open("host=/nonexistent/dir password=s3kr1t-value user=x "
                                        "dbname=airlock",
                                        &db, &e),
                     -ENOTCONN);
    ck_assert_ptr_null(db);
    ck_assert_msg(strstr(e.msg, "cannot connect (host=/nonexistent/dir dbname=airlock user=x)"),
                  "%s", e.msg);
    ck_assert_msg(!strstr(e.msg, "s3kr1t"), "%s", e.msg);
    ck_assert_int_eq(cp_cluster_db_open("host=x this is not conninfo", &db, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "not a libpq connection string"), "%s", e.msg);
    char d[256];
    cp_cluster_db_describe("postgresql://u:pw-secret@db.example:5433/cl", d, sizeof d);
    ck_assert_str_eq(d, "host=db.example port=5433 dbname=cl user=u");
    cp_cluster_db_describe("", d, sizeof d);
    ck_assert_str_eq(d, "(libpq defaults)");
    ck_assert(cp_cluster_node_id_valid("node-1.example"));
    ck_assert(!cp_cluster_node_id_valid(""));
    ck_assert(!cp_cluster_node_id_valid("-a"));
    ck_assert(!cp_cluster_node_id_valid("a_b"));
    ck_assert(!cp_cluster_node_id_valid("A"));
}
END_TEST

/* A node for placements: capacity and templates as given, registered with a long lease. */
static void t__offer(struct cp_cluster_db *db, const char *id, int64_t slots, const char *tpl)
{
    struct cp_cluster_node n;
    t__node(&n, id, "inst");
    n.sandboxes_max = slots;
    n.templates = (char *)tpl;
    struct al_error e = {0};
    ck_assert_msg(cp_cluster_db_register(db, &n, 60000, &e) == 0, "%s", al_error_str(&e));
}

static int t__place(struct cp_cluster_db *db, const char *id, const char *tpl, int64_t cpu,
                    struct cp_cluster_owner *o, struct al_error *e)
{
    struct cp_cluster_place p = {
        .sandbox_id = id, .template_id = tpl, .cpu = cpu, .memory_bytes = 1ull << 30};
    return cp_cluster_db_place(db, &p, o, e);
}

static const char *t__node_value(const char *col, const char *id)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s FROM nodes WHERE id = '%s'", col, id);
    return t__value(sql);
}

/* Placement: a warm sandbox of the template first, then the least loaded node; never a node
 * without the template, cordoned, excluded, expired or full; what it books is booked back
 * when the sandbox ends; every refusal says why. */
START_TEST(placement_books_capacity_and_spreads)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    struct cp_cluster_owner o;
    ck_assert_int_eq(t__place(db, "sb-0", "base", 1, &o, &e), -EHOSTDOWN);
    ck_assert_msg(strstr(e.msg, "no node has a valid lease"), "%s", e.msg);
    t__offer(db, "node-a", 100, "{\"base\": 0}");
    t__offer(db, "node-b", 100, "{\"base\": 2, \"py\": 0}");
    t__offer(db, "node-c", 100, NULL);

    /* node-b's two warm sandboxes go first (taken off its count), then node-a: idle. */
    ck_assert_msg(t__place(db, "sb-1", "base", 2, &o, &e) == 0, "%s", al_error_str(&e));
    ck_assert_str_eq(o.node_id, "node-b");
    ck_assert_str_eq(o.address, "192.0.2.10:3000");
    ck_assert(o.warm);
    ck_assert_int_eq(t__place(db, "sb-2", "base", 2, &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-b");
    ck_assert(o.warm);
    ck_assert_str_eq(t__node_value("templates->>'base'", "node-b"), "0");
    ck_assert_int_eq(t__place(db, "sb-3", "base", 2, &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-a");
    ck_assert(!o.warm);
    ck_assert_str_eq(t__node_value("cpu_booked", "node-b"), "4");
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-b"), "2");
    ck_assert_str_eq(t__node_value("memory_booked", "node-b"), "2147483648");
    /* the least loaded: a (2 of 8 CPUs) over b (4 of 8) */
    ck_assert_int_eq(t__place(db, "sb-4", "base", 2, &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-a");
    /* a heartbeat says what is warm again */
    struct cp_cluster_node hb;
    t__node(&hb, "node-b", "inst");
    hb.templates = "{\"base\": 1}";
    ck_assert_int_eq(cp_cluster_db_heartbeat(db, &hb, 60000, &e), 0);
    ck_assert_int_eq(t__place(db, "sb-5", "base", 1, &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-b");
    ck_assert(o.warm);

    /* a template only node-b had before its heartbeat: nowhere now */
    ck_assert_int_eq(t__place(db, "sb-x", "py", 1, &o, &e), -ENOENT);
    ck_assert_msg(strstr(e.msg, "none of the 3 live nodes has template \"py\""), "%s", e.msg);
    /* more CPUs than any node has free */
    ck_assert_int_eq(t__place(db, "sb-x", "base", 7, &o, &e), -ENOSPC);
    ck_assert_msg(strstr(e.msg, "of the 2 live nodes with the template, 0 are cordoned"), "%s",
                  e.msg);
    /* cordoned and excluded nodes get nothing */
    ck_assert_int_eq(cp_cluster_db_cordon(db, "node-a", true, &e), 0);
    const char *ex[] = {"node-b"};
    struct cp_cluster_place p = {.sandbox_id = "sb-x",
                                 .template_id = "base",
                                 .cpu = 1,
                                 .memory_bytes = 1,
                                 .exclude = ex,
                                 .n_exclude = 1};
    ck_assert_int_eq(cp_cluster_db_place(db, &p, &o, &e), -ENOSPC);
    ck_assert_msg(strstr(e.msg, "1 are cordoned, 1 were tried already"), "%s", e.msg);
    ex[0] = "Not_A_Node";
    ck_assert_int_eq(cp_cluster_db_place(db, &p, &o, &e), -EINVAL);
    ck_assert_int_eq(cp_cluster_db_cordon(db, "node-a", false, &e), 0);
    p = (struct cp_cluster_place){.sandbox_id = "", .template_id = "base"};
    ck_assert_int_eq(cp_cluster_db_place(db, &p, &o, &e), -EINVAL);

    /* an id placed already: refused, nothing booked twice */
    ck_assert_int_eq(t__place(db, "sb-1", "base", 1, &o, &e), -EEXIST);
    ck_assert_str_eq(t__value("SELECT sum(sandboxes_booked) FROM nodes"), "5");
    ck_assert_str_eq(t__value("SELECT count(*) FROM sandboxes"), "5");

    /* the owner, and the end of a sandbox books its capacity back */
    ck_assert_int_eq(cp_cluster_db_owner(db, "sb-1", &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-b");
    ck_assert(o.lease_valid);
    ck_assert_int_eq(cp_cluster_db_unplace(db, "sb-1", &e), 0);
    ck_assert_str_eq(t__node_value("cpu_booked", "node-b"), "3");
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-b"), "2");
    ck_assert_int_eq(cp_cluster_db_owner(db, "sb-1", &o, &e), -ENOENT);
    ck_assert_int_eq(cp_cluster_db_unplace(db, "sb-1", &e), -ENOENT);

    /* a node whose lease ended gets nothing more; its sandboxes' owner says so */
    ck_assert_int_eq(cp_cluster_db_release(db, "node-a", "inst", &e), 0);
    ck_assert_int_eq(cp_cluster_db_owner(db, "sb-3", &o, &e), 0);
    ck_assert_str_eq(o.node_id, "node-a");
    ck_assert(!o.lease_valid);
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "sb-b%d", i);
        ck_assert_int_eq(t__place(db, id, "base", 1, &o, &e), 0);
        ck_assert_str_eq(o.node_id, "node-b");
    }

    /* the listing shows what is booked and what the node offers */
    struct cp_cluster_node *v;
    size_t nn;
    ck_assert_int_eq(cp_cluster_db_nodes(db, false, &v, &nn, &e), 0);
    ck_assert_uint_eq(nn, 3);
    ck_assert_str_eq(v[1].id, "node-b");
    ck_assert_int_eq(v[1].sandboxes_booked, 5);
    ck_assert_int_eq(v[1].cpu_booked, 6);
    ck_assert_uint_eq(v[1].memory_booked, 5ull << 30);
    ck_assert_str_eq(v[1].templates, "{\"base\": 0}");
    ck_assert_str_eq(v[2].templates, "{}");
    cp_cluster_nodes_free(v, nn);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

#define T_GATEWAYS 2 /* processes */
#define T_THREADS  4 /* connections in each */
#define T_ROUNDS   25

struct t_gw {
    int proc, thread;
    int placed, kept, full, other;
    char msg[AL_ERROR_MSG_MAX];
};

/* One connection of a gateway: places T_ROUNDS sandboxes, ends every other one it got at
 * once (capacity booked back while others place). */
static void *t__gw_thread(void *arg)
{
    struct t_gw *g = arg;
    struct cp_cluster_db *db = NULL;
    struct al_error e = {0};
    if (cp_cluster_db_open(t__conninfo, &db, &e)) {
        g->other++;
        snprintf(g->msg, sizeof g->msg, "%s", al_error_str(&e));
        return NULL;
    }
    for (int i = 0; i < T_ROUNDS; i++) {
        char id[48];
        snprintf(id, sizeof id, "sb-%d-%d-%d", g->proc, g->thread, i);
        struct cp_cluster_owner o;
        int rc = t__place(db, id, "base", 1, &o, &e);
        if (rc == -ENOSPC) {
            g->full++;
            continue;
        }
        if (rc) {
            g->other++;
            snprintf(g->msg, sizeof g->msg, "%s: %d %s", id, rc, al_error_str(&e));
            continue;
        }
        if (g->placed++ % 2 == 0) {
            rc = cp_cluster_db_unplace(db, id, &e);
            if (rc) {
                g->other++;
                snprintf(g->msg, sizeof g->msg, "unplace %s: %s", id, al_error_str(&e));
            }
        } else {
            g->kept++;
        }
    }
    cp_cluster_db_close(db);
    return NULL;
}

/* A gateway process: T_THREADS connections at once, once the parent says go; its counts go
 * back through out. */
static void t__gw_process(int proc, int go, int out)
{
    char c;
    if (read(go, &c, 1) < 0)
        _exit(2);
    struct t_gw g[T_THREADS];
    pthread_t th[T_THREADS];
    for (int i = 0; i < T_THREADS; i++) {
        g[i] = (struct t_gw){.proc = proc, .thread = i};
        if (pthread_create(&th[i], NULL, t__gw_thread, &g[i]))
            _exit(2);
    }
    for (int i = 0; i < T_THREADS; i++)
        pthread_join(th[i], NULL);
    ssize_t w = write(out, g, sizeof g);
    _exit(w == (ssize_t)sizeof g ? 0 : 2);
}

/* Two gateway processes placing at once against a small capacity (3 nodes, 12 slots, 200
 * placements, half of the successful ones ended at once): no node is ever booked beyond its
 * capacity (a constraint of this test's database makes any overbooking an error), the
 * bookings equal the sandboxes recorded, and every slot is accounted for: once they are done
 * the free slots fill exactly. */
START_TEST(concurrent_placements_never_overbook)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    t__offer(db, "node-a", 3, "{\"base\": 0}");
    t__offer(db, "node-b", 4, "{\"base\": 2}");
    t__offer(db, "node-c", 5, "{\"base\": 0}");
    PGconn *c = PQconnectdb(t__conninfo);
    PGresult *r = PQexec(c, "ALTER TABLE nodes ADD CONSTRAINT t_never_overbooked CHECK"
                            " (sandboxes_booked <= sandboxes_max AND cpu_booked <= cpu)");
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);

    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    int out[T_GATEWAYS][2];
    pid_t pid[T_GATEWAYS];
    for (int i = 0; i < T_GATEWAYS; i++) {
        ck_assert_int_eq(pipe(out[i]), 0);
        pid[i] = fork();
        ck_assert_int_ge(pid[i], 0);
        if (pid[i] == 0) {
            close(go[1]);
            close(out[i][0]);
            t__gw_process(i, go[0], out[i][1]);
        }
        close(out[i][1]);
    }
    close(go[0]);
    close(go[1]); /* go: every process reads end of file at once */
    int placed = 0, kept = 0, full = 0;
    for (int i = 0; i < T_GATEWAYS; i++) {
        struct t_gw g[T_THREADS];
        ssize_t n = read(out[i][0], g, sizeof g);
        close(out[i][0]);
        int st = 0;
        ck_assert_int_eq(waitpid(pid[i], &st, 0), pid[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gateway %d: status %d", i, st);
        ck_assert_int_eq(n, (ssize_t)sizeof g);
        for (int k = 0; k < T_THREADS; k++) {
            ck_assert_msg(g[k].other == 0, "gateway %d connection %d: %s", i, k, g[k].msg);
            placed += g[k].placed;
            kept += g[k].kept;
            full += g[k].full;
        }
    }
    ck_assert_int_eq(placed + full, T_GATEWAYS * T_THREADS * T_ROUNDS);
    ck_assert_msg(full > 0, "capacity never ran out: the test proves nothing");
    ck_assert_int_le(kept, 12);
    char want[16];
    snprintf(want, sizeof want, "%d", kept);
    ck_assert_str_eq(t__value("SELECT count(*) FROM sandboxes"), want);
    ck_assert_str_eq(t__value("SELECT count(*) FROM nodes n WHERE sandboxes_booked <>"
                              " (SELECT count(*) FROM sandboxes s WHERE s.node_id = n.id)"
                              " OR cpu_booked <> (SELECT coalesce(sum(cpu), 0) FROM sandboxes s"
                              " WHERE s.node_id = n.id)"),
                     "0");
    /* the slots left fill exactly: none lost, none extra */
    int more = 0;
    for (;;) {
        char id[32];
        snprintf(id, sizeof id, "sb-fill-%d", more);
        struct cp_cluster_owner o;
        int rc = t__place(db, id, "base", 1, &o, &e);
        if (rc == -ENOSPC)
            break;
        ck_assert_msg(rc == 0, "%s", al_error_str(&e));
        ck_assert_int_le(++more, 12);
    }
    ck_assert_int_eq(kept + more, 12);
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-a"), "3");
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-b"), "4");
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-c"), "5");
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

/* A reservation takes the id the node gave the sandbox; a node's list of its sandboxes; a
 * heartbeat with the node's sandboxes forgets (and books back) the placements it no longer
 * has once past the grace, and stale reservations; without a list it forgets nothing. */
START_TEST(rename_list_and_reconcile)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    t__offer(db, "node-a", 10, "{\"base\": 0}");
    struct cp_cluster_owner o;
    ck_assert_int_eq(t__place(db, CP_CLUSTER_RESERVATION_PREFIX "1", "base", 1, &o, &e), 0);
    ck_assert_int_eq(t__place(db, CP_CLUSTER_RESERVATION_PREFIX "2", "base", 1, &o, &e), 0);
    ck_assert_int_eq(t__place(db, "sb-kept", "base", 1, &o, &e), 0);
    ck_assert_int_eq(t__place(db, "sb-young", "base", 1, &o, &e), 0);
    ck_assert_msg(cp_cluster_db_rename(db, CP_CLUSTER_RESERVATION_PREFIX "1", "sb-gone", &e) == 0,
                  "%s", al_error_str(&e));
    ck_assert_int_eq(cp_cluster_db_rename(db, CP_CLUSTER_RESERVATION_PREFIX "1", "sb-x", &e),
                     -ENOENT);
    ck_assert_int_eq(cp_cluster_db_rename(db, CP_CLUSTER_RESERVATION_PREFIX "2", "sb-kept", &e),
                     -EEXIST);
    struct cp_cluster_placed_list pl;
    ck_assert_int_eq(cp_cluster_db_node_sandboxes(db, "node-a", 2, &pl, &e), 0);
    ck_assert_uint_eq(pl.n, 2);
    ck_assert_uint_eq(pl.total, 4);
    for (size_t i = 0; i < pl.n; i++)
        ck_assert_str_eq(pl.v[i].template_id, "base");
    cp_cluster_placed_free(&pl);
    /* Old enough to be judged: all but sb-young; the reservation older than its limit. */
    PGconn *c = PQconnectdb(t__conninfo);
    PGresult *r = PQexec(c, "UPDATE sandboxes SET placed_at = now() - interval '1 hour'"
                            " WHERE id <> 'sb-young'");
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    struct cp_cluster_node n;
    t__node(&n, "node-a", "inst");
    n.templates = (char *)"{\"base\": 0}";
    ck_assert_int_eq(cp_cluster_db_heartbeat(db, &n, 60000, &e), 0);
    ck_assert_str_eq(t__value("SELECT count(*) FROM sandboxes"), "4"); /* no list: kept */
    n.live = (char *)"[\"sb-kept\"]";
    ck_assert_msg(cp_cluster_db_heartbeat(db, &n, 60000, &e) == 0, "%s", al_error_str(&e));
    ck_assert_str_eq(t__value("SELECT string_agg(id, ',' ORDER BY id) FROM sandboxes"),
                     "sb-kept,sb-young");
    ck_assert_str_eq(t__node_value("sandboxes_booked", "node-a"), "2");
    ck_assert_str_eq(t__node_value("cpu_booked", "node-a"), "2");
    /* Another instance's heartbeat reconciles nothing (and fails). */
    t__node(&n, "node-a", "other");
    n.live = (char *)"[]";
    ck_assert_int_eq(cp_cluster_db_heartbeat(db, &n, 60000, &e), -ESTALE);
    ck_assert_str_eq(t__value("SELECT count(*) FROM sandboxes"), "2");
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

/* Publications number each policy's versions, keep who published what, and sign with the
 * cluster token: a row written some other way (no signature, another token) does not verify;
 * a bad name or an empty document is refused; what a node reports is listed with it. */
START_TEST(policies_are_versioned_and_signed)
{
    t__setup();
    struct cp_cluster_db *db = t__open();
    struct al_error e = {0};
    ck_assert_int_eq(cp_cluster_db_migrate(db, NULL, &e), 0);
    const char *tok = "0123456789abcdef0123456789abcdef";
    struct cp_cluster_policy in = {.name = "team", .published_by = "key_1"}, out;
    in.document = "version: 1\nname: team\n";
    ck_assert_msg(cp_cluster_db_policy_publish(db, &in, tok, &out, &e) == 0, "%s",
                  al_error_str(&e));
    ck_assert_int_eq(out.version, 1);
    char dg[65];
    cp_cluster_policy_digest(in.document, strlen(in.document), dg);
    ck_assert_str_eq(out.digest, dg);
    ck_assert_str_eq(out.published_by, "key_1");
    ck_assert(cp_cluster_policy_signed(tok, &out));
    ck_assert(!cp_cluster_policy_signed("another token of at least 32 chars..", &out));
    in.document = "version: 1\nname: team\ndescription: two\n";
    ck_assert_int_eq(cp_cluster_db_policy_publish(db, &in, tok, &out, &e), 0);
    ck_assert_int_eq(out.version, 2);
    struct cp_cluster_policy other = {.name = "other.v2", .published_by = "key_2"};
    other.document = "version: 1\nname: other\n";
    ck_assert_int_eq(cp_cluster_db_policy_publish(db, &other, NULL, &out, &e), 0);
    ck_assert_int_eq(out.version, 1);
    ck_assert_str_eq(out.signature, "");
    ck_assert(!cp_cluster_policy_signed(tok, &out));
    /* The newest of each, by name; every version of one, newest first. */
    struct cp_cluster_policy *v = NULL;
    size_t n = 0;
    ck_assert_int_eq(cp_cluster_db_policies(db, NULL, &v, &n, &e), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(v[0].name, "other.v2");
    ck_assert_str_eq(v[1].name, "team");
    ck_assert_int_eq(v[1].version, 2);
    free(v);
    ck_assert_int_eq(cp_cluster_db_policies(db, "team", &v, &n, &e), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(v[0].version, 2);
    ck_assert_int_eq(v[1].version, 1);
    free(v);
    /* One version with its document; the newest with 0. */
    struct cp_cluster_policy d;
    ck_assert_int_eq(cp_cluster_db_policy(db, "team", 1, &d, &e), 0);
    ck_assert_str_eq(d.document, "version: 1\nname: team\n");
    ck_assert(cp_cluster_policy_signed(tok, &d));
    free(d.document);
    ck_assert_int_eq(cp_cluster_db_policy(db, "team", 0, &d, &e), 0);
    ck_assert_int_eq(d.version, 2);
    free(d.document);
    ck_assert_int_eq(cp_cluster_db_policy(db, "team", 9, &d, &e), -ENOENT);
    ck_assert_int_eq(cp_cluster_db_policy(db, "nosuch", 0, &d, &e), -ENOENT);
    /* A row written into the database by hand, with a signature of version 1: it names
     * version 3 and does not verify. */
    char sql[512];
    cp_cluster_db_policy(db, "team", 1, &d, &e);
    snprintf(sql, sizeof sql,
             "INSERT INTO policies (name, version, digest, signature, document, published_by)"
             " SELECT name, 3, digest, signature, document, 'intruder' FROM policies"
             " WHERE name = 'team' AND version = 1");
    free(d.document);
    PGconn *c = PQconnectdb(t__conninfo);
    PQclear(PQexec(c, sql));
    PQfinish(c);
    ck_assert_int_eq(cp_cluster_db_policy(db, "team", 0, &d, &e), 0);
    ck_assert_int_eq(d.version, 3);
    ck_assert(!cp_cluster_policy_signed(tok, &d));
    free(d.document);
    /* Bad requests. */
    struct cp_cluster_policy bad = {.name = "../x", .document = "version: 1\n"};
    ck_assert_int_eq(cp_cluster_db_policy_publish(db, &bad, tok, &out, &e), -EINVAL);
    struct cp_cluster_policy empty = {.name = "x", .document = ""};
    ck_assert_int_eq(cp_cluster_db_policy_publish(db, &empty, tok, &out, &e), -EINVAL);
    /* A node's report, listed with the node. */
    struct cp_cluster_node me;
    t__node(&me, "node-p", "inst-p");
    ck_assert_int_eq(cp_cluster_db_register(db, &me, 10000, &e), 0);
    ck_assert_int_eq(
        cp_cluster_db_policies_report(db, "node-p", "inst-p", "{\"team\":{\"version\":2}}", &e), 0);
    ck_assert_int_eq(cp_cluster_db_policies_report(db, "node-p", "other", "{}", &e), 0);
    struct cp_cluster_node *nodes;
    ck_assert_int_eq(cp_cluster_db_nodes(db, false, &nodes, &n, &e), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(nodes[0].policies, "{\"team\": {\"version\": 2}}");
    cp_cluster_nodes_free(nodes, n);
    cp_cluster_db_close(db);
    t__teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_cluster_db");
    TCase *t = tcase_create("cluster_db");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, migrations_are_idempotent);
    tcase_add_test(t, concurrent_migrations_serialise);
    tcase_add_test(t, a_newer_schema_is_refused_unless_compatible);
    tcase_add_test(t, heartbeats_keep_the_lease_and_it_expires_without);
    tcase_add_test(t, concurrent_registrations);
    tcase_add_test(t, cordon_survives_reregistration);
    tcase_add_test(t, errors_never_show_the_password);
    tcase_add_test(t, placement_books_capacity_and_spreads);
    tcase_add_test(t, concurrent_placements_never_overbook);
    tcase_add_test(t, rename_list_and_reconcile);
    tcase_add_test(t, policies_are_versioned_and_signed);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
