/* tests/unit/controlplane/test_cp_snapstore: the snapshots table of airlockd's state store:
 * the migration that adds it to an older database, round trips, versions per name and key,
 * the filters and the cursor of the list, deletion. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/store.h"

static char tmpdir[256];
static char dbpath[300];

static void setup(void)
{
    al_test_tmpdir(tmpdir, sizeof tmpdir, "cp-snapstore");
    snprintf(dbpath, sizeof dbpath, "%s/airlockd.db", tmpdir);
}

static void teardown(void)
{
    ck_assert_int_eq(al_test_rmtree(tmpdir), 0);
}

static struct cp_store_snap snap(const char *id, const char *name, const char *sb, const char *key)
{
    struct cp_store_snap r = {.size_bytes = 4096, .created_ns = 1000};
    snprintf(r.id, sizeof r.id, "%s", id);
    snprintf(r.name, sizeof r.name, "%s", name);
    snprintf(r.sandbox_id, sizeof r.sandbox_id, "%s", sb);
    snprintf(r.key_id, sizeof r.key_id, "%s", key);
    snprintf(r.template_id, sizeof r.template_id, "base");
    snprintf(r.backend, sizeof r.backend, "jail");
    snprintf(r.vmm_version, sizeof r.vmm_version, "airlock-jail-fs-1");
    snprintf(r.agent_version, sizeof r.agent_version, "0.6.4");
    return r;
}

static int collect(const struct cp_store_snap *r, void *arg)
{
    char *out = arg;
    size_t l = strlen(out);
    snprintf(out + l, 256 - l, "%s%s", l ? " " : "", r->id);
    return 0;
}

START_TEST(migration_from_schema_3_keeps_the_rest)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute('CREATE TABLE "
             "meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)'); c.execute(\\\"INSERT INTO meta "
             "VALUES('keep', 'me')\\\"); c.execute('PRAGMA user_version=3'); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    char v[16];
    ck_assert_int_eq(cp_store_meta_get(s, "keep", v, sizeof v), 0);
    ck_assert_str_eq(v, "me");
    struct cp_store_snap r = snap("s1", "", "sbx", "key_a");
    ck_assert_msg(cp_store_snap_insert(s, &r, &err) == 0, "%s", err.msg);
    cp_store_close(s);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); "
             "assert c.execute('PRAGMA user_version').fetchone()[0] == %d\"",
             dbpath, CP_STORE_SCHEMA_VERSION);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(round_trip_versions_list_delete)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct cp_store_snap a = snap("a", "good", "sb1", "key_a");
    snprintf(a.parent, sizeof a.parent, "p0");
    ck_assert_int_eq(cp_store_snap_insert(s, &a, &err), 0);
    ck_assert_uint_eq(a.version, 1);
    struct cp_store_snap b = snap("b", "good", "sb2", "key_a");
    ck_assert_int_eq(cp_store_snap_insert(s, &b, &err), 0);
    ck_assert_uint_eq(b.version, 2); /* a name that exists gets a new version */
    struct cp_store_snap c = snap("c", "good", "sb1", "key_b");
    ck_assert_int_eq(cp_store_snap_insert(s, &c, &err), 0);
    ck_assert_uint_eq(c.version, 1); /* another key's names are its own */
    struct cp_store_snap d = snap("d", "", "sb1", "key_a");
    ck_assert_int_eq(cp_store_snap_insert(s, &d, &err), 0);
    ck_assert_uint_eq(d.version, 0);
    struct cp_store_snap dup = snap("a", "", "sb9", "key_a");
    ck_assert_int_eq(cp_store_snap_insert(s, &dup, &err), -EEXIST);
    ck_assert_uint_lt(a.seq, b.seq);

    struct cp_store_snap r;
    ck_assert_int_eq(cp_store_snap_load(s, "a", &r, &err), 0);
    ck_assert_str_eq(r.name, "good");
    ck_assert_str_eq(r.parent, "p0");
    ck_assert_str_eq(r.sandbox_id, "sb1");
    ck_assert_str_eq(r.backend, "jail");
    ck_assert_str_eq(r.agent_version, "0.6.4");
    ck_assert_uint_eq(r.size_bytes, 4096);
    ck_assert_uint_eq(r.version, 1);
    ck_assert_int_eq(cp_store_snap_load(s, "zz", &r, NULL), -ENOENT);

    char out[256] = "";
    struct cp_store_snap_query q = {0};
    ck_assert_int_eq(cp_store_snap_list(s, &q, collect, out, &err), 0);
    ck_assert_str_eq(out, "a b c d");
    out[0] = '\0';
    q = (struct cp_store_snap_query){.sandbox_id = "sb1", .key_id = "key_a"};
    ck_assert_int_eq(cp_store_snap_list(s, &q, collect, out, &err), 0);
    ck_assert_str_eq(out, "a d");
    out[0] = '\0';
    q = (struct cp_store_snap_query){.name = "good", .limit = 2};
    ck_assert_int_eq(cp_store_snap_list(s, &q, collect, out, &err), 0);
    ck_assert_str_eq(out, "a b");
    out[0] = '\0';
    q.after_seq = b.seq; /* the next page */
    ck_assert_int_eq(cp_store_snap_list(s, &q, collect, out, &err), 0);
    ck_assert_str_eq(out, "c");

    ck_assert_int_eq(cp_store_snap_delete(s, "b", &err), 0);
    ck_assert_int_eq(cp_store_snap_delete(s, "b", NULL), -ENOENT);
    /* Versions only grow: a deleted version is not handed out again. */
    struct cp_store_snap e = snap("e", "good", "sb1", "key_a");
    ck_assert_int_eq(cp_store_snap_insert(s, &e, &err), 0);
    ck_assert_uint_eq(e.version, 3);
    cp_store_close(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_snapstore");
    TCase *t = tcase_create("snapstore");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, migration_from_schema_3_keeps_the_rest);
    tcase_add_test(t, round_trip_versions_list_delete);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
