/* tests/unit/controlplane/test_cp_rest_snapshots: the snapshot API (cp_rest_fixture.h) where
 * no jail is needed: POST /sandboxes/{id}/snapshots refused by the test backend and its body
 * checked, GET /snapshots (the caller's, paged, filtered), DELETE /templates/{snapshot id},
 * Sandbox.create(snapshotID) refusing another key's and another backend's snapshot, the sweep
 * of <state>/snapshots at start, what keeps a template version alive, and the retention rules
 * (count per sandbox and per key, age; never a snapshot being read). The snapshots are
 * rows written through a second connection to the state database (a jail takes real ones:
 * tests/e2b/normal/snapshots.test.mjs). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controlplane/snapshots.h"
#include "cp_rest_fixture.h"

static struct cp_store *g_db;

static void db_open(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/airlockd.db", g_tmpdir);
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(p, &g_db, &err) == 0, "%s", al_error_str(&err));
}

static void put_at(const char *id, const char *name, const char *sb, const char *key,
                   const char *tpl, uint64_t created_ns)
{
    struct cp_store_snap r = {.size_bytes = 4096, .created_ns = created_ns};
    snprintf(r.id, sizeof r.id, "%s", id);
    snprintf(r.name, sizeof r.name, "%s", name);
    snprintf(r.sandbox_id, sizeof r.sandbox_id, "%s", sb);
    snprintf(r.key_id, sizeof r.key_id, "%s", key);
    snprintf(r.template_id, sizeof r.template_id, "%s", tpl);
    snprintf(r.backend, sizeof r.backend, "jail");
    snprintf(r.vmm_version, sizeof r.vmm_version, "airlock-jail-fs-1");
    snprintf(r.agent_version, sizeof r.agent_version, "0.0.0");
    struct al_error err = {0};
    ck_assert_msg(cp_store_snap_insert(g_db, &r, &err) == 0, "%s", al_error_str(&err));
}

static void put(const char *id, const char *name, const char *sb, const char *key, const char *tpl)
{
    put_at(id, name, sb, key, tpl, 1000);
}

static bool exists(const char *rel)
{
    char p[400];
    struct stat st;
    snprintf(p, sizeof p, "%s/snapshots/%s", g_tmpdir, rel);
    return lstat(p, &st) == 0;
}

static void mkfile(const char *rel)
{
    char p[400];
    snprintf(p, sizeof p, "%s/snapshots/%s", g_tmpdir, rel);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    ck_assert_int_eq(al_mkdir_p(p, 0700), 0);
    *slash = '/';
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("x", f);
    fclose(f);
}

/* The snapshotIDs of a page, space separated. */
static void ids(const struct resp *r, char *out, size_t len)
{
    out[0] = '\0';
    size_t i;
    json_t *v;
    json_array_foreach(r->body, i, v)
    {
        size_t l = strlen(out);
        snprintf(out + l, len - l, "%s%s", l ? " " : "", jstr(v, "snapshotID"));
    }
}

#define S1 "snap_aaaaaaaaaaaaaaaaaaa1"
#define S2 "snap_aaaaaaaaaaaaaaaaaaa2"
#define S3 "snap_aaaaaaaaaaaaaaaaaaa3"
#define SO "snap_aaaaaaaaaaaaaaaaaaa9" /* another key's */

START_TEST(snapshots_create_refused)
{
    char id[64], path[200];
    create("{\"templateID\":\"base\"}", id, NULL);
    struct resp r;
    snprintf(path, sizeof path, "/sandboxes/%s/snapshots", id);
    req(&r, "POST", path, "{}");
    assert_error(&r, 501, "test backend has no snapshots");
    resp_free(&r);
    req(&r, "POST", path, "{\"name\":\"ok-name\"}");
    assert_error(&r, 501, "test backend has no snapshots");
    resp_free(&r);
    req(&r, "POST", path, "{\"name\":\"../x\"}");
    assert_error(&r, 400, "name: must be 1 to 64");
    resp_free(&r);
    req(&r, "POST", path, "{\"name\":5}");
    assert_error(&r, 400, "name: must be");
    resp_free(&r);
    req(&r, "POST", path, "{\"memory\":true}");
    assert_error(&r, 400, "memory: not a field");
    resp_free(&r);
    req(&r, "POST", path, "[1]");
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    req(&r, "GET", path, NULL);
    assert_error(&r, 405, "POST takes a snapshot");
    resp_free(&r);
    req(&r, "POST", "/sandboxes/nosuchsandbox/snapshots", "{}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "PUT", "/snapshots", "{}");
    assert_error(&r, 405, "GET lists");
    resp_free(&r);
}
END_TEST

START_TEST(snapshots_list_delete_restore)
{
    db_open();
    struct resp r;
    char got[400], path[200];
    req(&r, "GET", "/snapshots", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(r.body), 0);
    ck_assert_str_eq(r.next, "");
    resp_free(&r);
    put(S1, "n", "sbx1", "env", "base");
    put(SO, "n", "sbx1", "other", "base");
    put(S2, "n", "sbx1", "env", "base");
    put(S3, "", "sbx2", "env", "base");

    /* The caller's only, oldest first, in pages. */
    req(&r, "GET", "/snapshots?limit=2", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ids(&r, got, sizeof got);
    ck_assert_str_eq(got, S1 " " S2);
    ck_assert_str_ne(r.next, "");
    const json_t *a = json_array_get(r.body, 0);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(a, "names"), 0)), "n:v1");
    ck_assert_str_eq(jstr(a, "sandboxID"), "sbx1");
    ck_assert_str_eq(jstr(a, "templateID"), "base");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "sizeBytes")), 4096);
    ck_assert_str_eq(
        json_string_value(json_array_get(json_object_get(json_array_get(r.body, 1), "names"), 0)),
        "n:v2");
    snprintf(path, sizeof path, "/snapshots?limit=2&nextToken=%s", r.next);
    resp_free(&r);
    req(&r, "GET", path, NULL);
    ids(&r, got, sizeof got);
    ck_assert_str_eq(got, S3);
    ck_assert_str_eq(r.next, "");
    ck_assert_uint_eq(json_array_size(json_object_get(json_array_get(r.body, 0), "names")), 0);
    resp_free(&r);
    const char *filters[][2] = {{"/snapshots?sandboxID=sbx1", S1 " " S2},
                                {"/snapshots?sandboxID=sbx2", S3},
                                {"/snapshots?name=n", S1 " " S2},
                                {"/snapshots?name=n&sandboxID=sbx2", ""},
                                {"/snapshots?sandboxID=nope", ""}};
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++) {
        req(&r, "GET", filters[i][0], NULL);
        ck_assert_msg(r.status == 200, "%s: %d %s", filters[i][0], r.status, r.raw);
        ids(&r, got, sizeof got);
        ck_assert_msg(strcmp(got, filters[i][1]) == 0, "%s: %s", filters[i][0], got);
        resp_free(&r);
    }
    const char *bad[][2] = {{"/snapshots?limit=0", "limit"},
                            {"/snapshots?limit=101", "limit"},
                            {"/snapshots?limit=x", "limit"},
                            {"/snapshots?nextToken=zz", "nextToken"},
                            {"/snapshots?nextToken=-1", "nextToken"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        req(&r, "GET", bad[i][0], NULL);
        assert_error(&r, 400, bad[i][1]);
        resp_free(&r);
    }

    /* Sandbox.create(snapshotID): another key's is not found, a jail's needs a jail. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"" SO "\"}");
    assert_error(&r, 404, "snapshot \"" SO "\" not found");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"" S1 "\"}");
    assert_error(&r, 409, "is of a jail sandbox: this server runs test sandboxes");
    resp_free(&r);
    /* By its name "NAME:vN": the key's own versions only. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"n:v2\"}");
    assert_error(&r, 409, "snapshot " S2 " is of a jail sandbox");
    resp_free(&r);
    put("snap_aaaaaaaaaaaaaaaaaaa8", "solo", "sbx1", "other", "base");
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"solo:v1\"}");
    assert_error(&r, 404, "template 'solo' not found");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"n:v3\"}");
    assert_error(&r, 404, "template 'n' ");
    resp_free(&r);

    /* Delete: the caller's only; the row, then the files. */
    mkfile(S1 "/upper/home/f");
    req(&r, "DELETE", "/templates/" SO, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    struct cp_store_snap row;
    ck_assert_int_eq(cp_store_snap_load(g_db, SO, &row, NULL), 0);
    req(&r, "DELETE", "/templates/" S1, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    ck_assert(!exists(S1));
    ck_assert_int_eq(cp_store_snap_load(g_db, S1, &row, NULL), -ENOENT);
    req(&r, "DELETE", "/templates/" S1, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", "/snapshots", NULL);
    ids(&r, got, sizeof got);
    ck_assert_str_eq(got, S2 " " S3);
    resp_free(&r);
    cp_store_close(g_db);
}
END_TEST

/* The retention rules, on a cp of its own over the second connection (as the sweep): the
 * oldest beyond each count go, row and files; another sandbox's or key's stay; what is older
 * than max_age goes at the tick; a snapshot a sandbox is starting from stays until it runs. */
START_TEST(snapshots_retention)
{
    db_open();
    uint64_t now = al_wall_ns();
    /* (in the order of their times, as airlockd records them: the age rule stops at the
     * first young one) */
    put_at(SO, "", "sbx3", "other", "base", now - 50000000000ull);
    put_at(S1, "", "sbx1", "env", "base", now - 40000000000ull);
    put_at(S2, "", "sbx1", "env", "base", now - 30000000000ull);
    put_at(S3, "", "sbx1", "env", "base", now - 20000000000ull);
    put_at("snap_aaaaaaaaaaaaaaaaaaa4", "", "sbx2", "env", "base", now - 10000000000ull);
    const char *all[] = {S1, S2, S3, "snap_aaaaaaaaaaaaaaaaaaa4", SO};
    for (size_t i = 0; i < 5; i++) {
        char rel[80];
        snprintf(rel, sizeof rel, "%s/upper/f", all[i]);
        mkfile(rel);
    }
    struct cp c = {0};
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    c.loop = &loop;
    c.cfg.state_dir = g_tmpdir;
    snprintf(c.cfg.templates_path, sizeof c.cfg.templates_path, "%s", g_cp.cfg.templates_path);
    c.store = g_db;
    cp_map_init(&c.sandboxes);
    struct cp_store_snap row;

    /* No bound: nothing goes. */
    cp_snapshots_retain(&c, "sbx1", "env");
    cp_snapshots_tick(&c);
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(cp_store_snap_load(g_db, all[i], &row, NULL), 0);

    /* Two per sandbox: sbx1's oldest goes. */
    c.cfg.snap_keep_per_sandbox = 2;
    cp_snapshots_retain(&c, "sbx1", "env");
    ck_assert_int_eq(cp_store_snap_load(g_db, S1, &row, NULL), -ENOENT);
    ck_assert(!exists(S1));
    ck_assert_int_eq(cp_store_snap_load(g_db, S2, &row, NULL), 0);
    ck_assert(exists(S2 "/upper/f"));

    /* One per key, while a sandbox starts from S2: S2 stays (busy), then goes once it runs;
     * the other key's stays. */
    c.cfg.snap_keep_per_sandbox = 0;
    c.cfg.snap_keep_per_key = 1;
    struct cp_sandbox *sb = calloc(1, sizeof *sb);
    ck_assert_ptr_nonnull(sb);
    snprintf(sb->rec.id, sizeof sb->rec.id, "sbx9");
    snprintf(sb->rec.snapshot_id, sizeof sb->rec.snapshot_id, "%s", S2);
    sb->rec.state = CP_SB_CREATING;
    ck_assert_int_eq(cp_map_put(&c.sandboxes, "sbx9", 4, sb), 0);
    cp_snapshots_retain(&c, "sbx1", "env");
    ck_assert_int_eq(cp_store_snap_load(g_db, S2, &row, NULL), 0);
    ck_assert(exists(S2 "/upper/f"));
    ck_assert_int_eq(cp_store_snap_load(g_db, S3, &row, NULL), -ENOENT);
    ck_assert_int_eq(cp_store_snap_load(g_db, "snap_aaaaaaaaaaaaaaaaaaa4", &row, NULL), 0);
    sb->rec.state = CP_SB_RUNNING;
    cp_snapshots_retain(&c, "sbx1", "env");
    ck_assert_int_eq(cp_store_snap_load(g_db, S2, &row, NULL), -ENOENT);
    ck_assert(!exists(S2));
    ck_assert_int_eq(cp_store_snap_load(g_db, "snap_aaaaaaaaaaaaaaaaaaa4", &row, NULL), 0);
    ck_assert_int_eq(cp_store_snap_load(g_db, SO, &row, NULL), 0);

    /* The age rule: 25 s; the other key's (50 s old) goes, the 10 s old one stays. */
    c.cfg.snap_keep_per_key = 0;
    c.cfg.snap_max_age_ms = 25000;
    cp_snapshots_tick(&c);
    ck_assert_int_eq(cp_store_snap_load(g_db, SO, &row, NULL), -ENOENT);
    ck_assert(!exists(SO));
    ck_assert_int_eq(cp_store_snap_load(g_db, "snap_aaaaaaaaaaaaaaaaaaa4", &row, NULL), 0);
    ck_assert(exists("snap_aaaaaaaaaaaaaaaaaaa4/upper/f"));

    ck_assert_ptr_eq(cp_map_del(&c.sandboxes, "sbx9", 4), sb);
    free(sb);
    cp_map_free(&c.sandboxes);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    cp_store_close(g_db);
}
END_TEST

/* At start, what no row names goes; a snapshot's template version is kept. Run on a cp of
 * its own over the second connection (g_cp belongs to the loop thread). */
START_TEST(snapshots_sweep_and_versions)
{
    db_open();
    put(S1, "", "sbx1", "env", "tg:b-1");
    put(S2, "", "sbx1", "env", "base");
    mkfile(S1 "/upper/a");
    mkfile(S2 "/snapshot.json");
    mkfile(".tmp-" S3 ".123/upper/half");
    mkfile(S3 "/upper/unrecorded");
    mkfile("junk");
    struct cp c = {0};
    c.cfg.state_dir = g_tmpdir;
    c.store = g_db;
    cp_snapshots_sweep(&c);
    ck_assert(exists(S1 "/upper/a"));
    ck_assert(exists(S2 "/snapshot.json"));
    ck_assert(!exists(".tmp-" S3 ".123"));
    ck_assert(!exists(S3));
    ck_assert(!exists("junk"));
    cp_snapshots_sweep(&c); /* idempotent */
    ck_assert(exists(S1 "/upper/a"));

    ck_assert(cp_snapshots_use_version(&c, "tg", "b-1"));
    ck_assert(!cp_snapshots_use_version(&c, "tg", "b-2"));
    ck_assert(!cp_snapshots_use_version(&c, "t", "b-1"));
    ck_assert(!cp_snapshots_use_version(&c, "tg", "b"));
    ck_assert_int_eq(cp_store_snap_delete(g_db, S1, NULL), 0);
    ck_assert(!cp_snapshots_use_version(&c, "tg", "b-1"));
    cp_store_close(g_db);
}
END_TEST

/* A template version no tag names and no sandbox uses stays while a snapshot needs it, and
 * goes with the snapshot's deletion. */
START_TEST(snapshots_keep_template_version)
{
    char a[40], b[40], p[400], ref[120];
    const char *env1 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"1\"]}]}";
    const char *env2 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"2\"]}]}";
    build_tagged("{\"name\":\"sg\"}", "sg", env1, a, "[\"default\"]");
    db_open();
    snprintf(ref, sizeof ref, "sg:%s", a);
    put(S1, "", "sbx1", "env", ref);
    /* A rebuild moves the default tag: version a is kept for the snapshot. */
    build_tagged("{\"name\":\"sg\"}", "sg", env2, b, "[\"default\"]");
    snprintf(p, sizeof p, "%s/templates/.sg.v-%s", g_tmpdir, b);
    ck_assert(exists_within(p, true));
    snprintf(p, sizeof p, "%s/templates/.sg.v-%s", g_tmpdir, a);
    /* (the build's installation ran the collection before its status became ready) */
    struct stat st;
    ck_assert_msg(stat(p, &st) == 0, "%s went, a snapshot needs it", p);
    struct resp r;
    req(&r, "DELETE", "/templates/" S1, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    ck_assert_msg(exists_within(p, false), "%s stays", p);
    cp_store_close(g_db);
}
END_TEST

/* POST /sandboxes/{id}/rollback where no jail is needed: its body, whose snapshots it takes
 * (404 another key's or none, 400 another sandbox's), 409 paused, 501 on the test backend;
 * a refusal leaves the sandbox running (a jail rolls back: tests/integration/snap_api.sh). */
START_TEST(snapshots_rollback_refused)
{
    db_open();
    char id[64], other[64], path[200], body[200];
    create("{\"templateID\":\"base\"}", id, NULL);
    create("{\"templateID\":\"base\"}", other, NULL);
    put(S1, "n", id, "env", "base");
    put(S2, "", other, "env", "base");
    put(SO, "", id, "other", "base");
    struct resp r;
    snprintf(path, sizeof path, "/sandboxes/%s/rollback", id);
    req(&r, "POST", path, NULL);
    assert_error(&r, 400, "a JSON object body is required");
    resp_free(&r);
    req(&r, "POST", path, "{}");
    assert_error(&r, 400, "snapshotID is required");
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"../x\"}");
    assert_error(&r, 400, "snapshotID: must be a snapshot id");
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"" S1 "\",\"memory\":true}");
    assert_error(&r, 400, "memory: not a field of a rollback request");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    assert_error(&r, 405, "POST rolls the sandbox back");
    resp_free(&r);
    req(&r, "POST", "/sandboxes/nosuchsandbox/rollback", "{\"snapshotID\":\"" S1 "\"}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"snap_aaaaaaaaaaaaaaaaaaa7\"}");
    assert_error(&r, 404, "snapshot \"snap_aaaaaaaaaaaaaaaaaaa7\" not found");
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"" SO "\"}");
    assert_error(&r, 404, "snapshot \"" SO "\" not found");
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"" S2 "\"}");
    snprintf(body, sizeof body, "is of sandbox %s, not of %s", other, id);
    assert_error(&r, 400, body);
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"" S1 "\"}");
    assert_error(&r, 501, "the test backend has no rollback");
    resp_free(&r);
    snprintf(body, sizeof body, "/sandboxes/%s/pause", id);
    req(&r, "POST", body, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "POST", path, "{\"snapshotID\":\"" S1 "\"}");
    assert_error(&r, 409, "is paused: resume it");
    resp_free(&r);
    snprintf(body, sizeof body, "/sandboxes/%s", id);
    req(&r, "GET", body, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "state"), "paused");
    resp_free(&r);
}
END_TEST

/* POST /sandboxes/{id}/fork where no jail is needed: its body (E2B's SandboxForkRequest, count
 * bounded by sandboxes.max_fork), 404 and 405, 501 on the test backend; a refusal leaves the
 * sandbox running and starts nothing (a jail forks: tests/integration/snap_api.sh). */
START_TEST(snapshots_fork_refused)
{
    char id[64], path[200];
    create("{\"templateID\":\"base\"}", id, NULL);
    struct resp r;
    snprintf(path, sizeof path, "/sandboxes/%s/fork", id);
    static const struct {
        const char *body, *msg;
    } bad[] = {
        {"{\"count\":0}", "\"count\" must be a whole number from 1"},
        {"{\"count\":-3}", "\"count\" must be a whole number from 1"},
        {"{\"count\":2.5}", "\"count\" must be a whole number from 1"},
        {"{\"count\":\"2\"}", "\"count\" must be a whole number from 1"},
        {"{\"count\":101}", "\"count\" 101 is more copies than one fork may ask for on this "
                            "server (100, sandboxes.max_fork)"},
        {"{\"count\":2,\"memory\":true}", "memory: not a field of a fork request (count, "
                                          "timeout)"},
        {"{\"timeout\":0}", "\"timeout\" must be at least 1 second"},
        {"{\"timeout\":\"x\"}", "\"timeout\" must be a number of seconds"},
        {"{\"timeout\":31536000}", "is longer than this server allows"},
        {"[1]", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        req(&r, "POST", path, bad[i].body);
        if (bad[i].msg)
            assert_error(&r, 400, bad[i].msg);
        else
            ck_assert_msg(r.status == 400, "%s: %d %s", bad[i].body, r.status, r.raw);
        resp_free(&r);
    }
    req(&r, "GET", path, NULL);
    assert_error(&r, 405, "POST forks the sandbox");
    resp_free(&r);
    req(&r, "POST", "/sandboxes/nosuchsandbox/fork", "{\"count\":1}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    /* Valid bodies, the largest count included, reach the backend: it has no snapshots. */
    const char *ok[] = {NULL, "{}", "{\"count\":100,\"timeout\":60}", "{\"count\":null}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        req(&r, "POST", path, ok[i]);
        assert_error(&r, 501, "cannot fork sandbox");
        ck_assert_msg(strstr(r.raw, "the test backend has no snapshots"), "%s", r.raw);
        resp_free(&r);
    }
    req(&r, "GET", "/v2/sandboxes", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq((int)json_array_size(r.body), 1);
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "state"), "running");
    resp_free(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_snapshots");
    TCase *t = cp_rest_tcase("snapshots");
    tcase_add_test(t, snapshots_create_refused);
    tcase_add_test(t, snapshots_list_delete_restore);
    tcase_add_test(t, snapshots_sweep_and_versions);
    tcase_add_test(t, snapshots_retention);
    tcase_add_test(t, snapshots_keep_template_version);
    tcase_add_test(t, snapshots_rollback_refused);
    tcase_add_test(t, snapshots_fork_refused);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
