/* tests/unit/controlplane/test_cp_rest_roles: what each role of an API key may call (auth.c's
 * table, docs/api.md "Roles") over the REST fixture (cp_rest_fixture.h): admin, operator and
 * auditor keys against a representative route of each class, the refusal's status, message and
 * that nothing happened, the access tokens withheld from a role without the data plane, the
 * environment key and the local socket as admins, and the table's path matching itself. */
#include <stdio.h>
#include <string.h>

#include "cp_rest_fixture.h"

struct keys {
    char admin[CP_APIKEY_LEN + 1], operator[CP_APIKEY_LEN + 1], auditor[CP_APIKEY_LEN + 1];
};

static void make_keys(struct keys *k)
{
    add_key("boss", CP_ROLE_ADMIN, NULL, k->admin);
    add_key("ops", CP_ROLE_OPERATOR, NULL, k->operator);
    add_key("audit", CP_ROLE_AUDITOR, NULL, k->auditor);
}

/* The status of method path (body, or none) with key. */
static int status_of(const char *key, const char *method, const char *path, const char *body)
{
    struct resp r;
    req_full(&r, g_target, method, path, key, body, NULL, 0);
    int st = r.status;
    if (st == 403)
        ck_assert_msg(strstr(jstr(r.body, "message"), "has the role"), "%s %s: %s", method, path,
                      r.raw);
    resp_free(&r);
    return st;
}

static void assert_refused(const char *key, const char *role, const char *method, const char *path,
                           const char *body, const char *need)
{
    struct resp r;
    req_full(&r, g_target, method, path, key, body, NULL, 0);
    assert_error(&r, 403, NULL);
    const char *msg = jstr(r.body, "message");
    char want[64];
    snprintf(want, sizeof want, "has the role %s;", role);
    ck_assert_msg(strstr(msg, want), "%s %s: %s", method, path, msg);
    snprintf(want, sizeof want, "needs the role %s", need);
    ck_assert_msg(strstr(msg, want), "%s %s: %s", method, path, msg);
    resp_free(&r);
}

static int n_listed(const char *key)
{
    struct resp r;
    req_full(&r, g_target, "GET", "/v2/sandboxes", key, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    int n = (int)json_array_size(r.body);
    resp_free(&r);
    return n;
}

/* Sandboxes: everyone lists and reads them; only admin and operator create, change, connect
 * to, read the logs of or kill them; the auditor's refusals change nothing. */
START_TEST(roles_sandboxes)
{
    struct keys k;
    make_keys(&k);
    char id[64], token[80];
    create("{\"templateID\":\"base\"}", id, token);
    char p[160], logs[160], pause[160], connect[160], timeout[160];
    snprintf(p, sizeof p, "/sandboxes/%s", id);
    snprintf(logs, sizeof logs, "/sandboxes/%s/logs", id);
    snprintf(pause, sizeof pause, "/sandboxes/%s/pause", id);
    snprintf(connect, sizeof connect, "/sandboxes/%s/connect", id);
    snprintf(timeout, sizeof timeout, "/sandboxes/%s/timeout", id);
    const char *all[] = {k.admin, k.operator, k.auditor };
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(n_listed(all[i]), 1);
        ck_assert_int_eq(status_of(all[i], "GET", "/sandboxes", NULL), 200);
        ck_assert_int_eq(status_of(all[i], "GET", "/sandboxes/metrics?sandbox_ids=x", NULL), 200);
        /* 503 in the fixture (no events): past the role check all the same. */
        ck_assert_int_ne(status_of(all[i], "GET", "/events/sandboxes", NULL), 403);
        /* The details: the access tokens only for roles with the data plane. */
        struct resp r;
        req_full(&r, g_target, "GET", p, all[i], NULL, NULL, 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(jstr(r.body, "sandboxID"), id);
        bool has = json_object_get(r.body, "envdAccessToken") != NULL;
        ck_assert_msg(has == (i < 2), "key %d: envdAccessToken %s", i, has ? "shown" : "withheld");
        ck_assert(!json_object_get(r.body, "trafficAccessToken") == (i == 2));
        if (i == 2)
            ck_assert_ptr_null(strstr(r.raw, token));
        resp_free(&r);
    }
    const char *need = "admin or operator";
    assert_refused(k.auditor, "auditor", "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}",
                   need);
    assert_refused(k.auditor, "auditor", "POST", "/sandboxes", "{\"templateID\":\"base\"}", need);
    assert_refused(k.auditor, "auditor", "DELETE", p, NULL, need);
    assert_refused(k.auditor, "auditor", "POST", pause, NULL, need);
    assert_refused(k.auditor, "auditor", "POST", connect, "{\"timeout\":30}", need);
    assert_refused(k.auditor, "auditor", "POST", timeout, "{\"timeout\":30}", need);
    assert_refused(k.auditor, "auditor", "GET", logs, NULL, need);
    /* Nothing happened: one sandbox, running, never paused or stopped. */
    ck_assert_int_eq(n_listed(KEY_ENV), 1);
    ck_assert_int_eq(g_stops, 0);
    ck_assert_int_eq(g_pauses, 0);
    /* The operator may do all of it. */
    ck_assert_int_eq(status_of(k.operator, "GET", logs, NULL), 200);
    ck_assert_int_eq(status_of(k.operator, "POST", timeout, "{\"timeout\":300}"), 204);
    ck_assert_int_eq(status_of(k.admin, "GET", logs, NULL), 200);
    struct resp r;
    req_full(&r, g_target, "POST", "/v2/sandboxes", k.operator, "{\"templateID\":\"base\"}", NULL,
             0);
    ck_assert_int_eq(r.status, 201);
    char id2[64];
    snprintf(id2, sizeof id2, "%s", jstr(r.body, "sandboxID"));
    resp_free(&r);
    ck_assert_int_eq(n_listed(KEY_ENV), 2);
    ck_assert_int_eq(status_of(k.operator, "DELETE", p, NULL), 204);
    snprintf(p, sizeof p, "/sandboxes/%s", id2);
    ck_assert_int_eq(status_of(k.admin, "DELETE", p, NULL), 204);
    ck_assert_int_eq(n_listed(KEY_ENV), 0);
}
END_TEST

/* The audit log and the policies are admin's and the auditor's; secrets are written by admins only and read
 * (names, never values) by everyone; templates are built by admin and operator; webhooks are
 * set up by admin and operator; a route the table does not list is admin's only. */
START_TEST(roles_other_classes)
{
    struct keys k;
    make_keys(&k);
    /* No audit log in the fixture: 404 for the roles that may read it. */
    ck_assert_int_eq(status_of(k.admin, "GET", "/admin/audit", NULL), 404);
    ck_assert_int_eq(status_of(k.auditor, "GET", "/admin/audit", NULL), 404);
    ck_assert_int_eq(status_of(k.auditor, "GET", "/admin/audit/verify", NULL), 404);
    assert_refused(k.operator, "operator", "GET", "/admin/audit", NULL, "admin or auditor");
    assert_refused(k.operator, "operator", "GET", "/admin/audit/verify", NULL, "admin or auditor");
    assert_refused(k.operator, "operator", "GET", "/admin/audit?limit=5", NULL, "admin or auditor");
    /* The policies: admin's and the auditor's too. */
    ck_assert_int_eq(status_of(k.admin, "GET", "/admin/policies", NULL), 200);
    ck_assert_int_eq(status_of(k.auditor, "GET", "/admin/policies", NULL), 200);
    ck_assert_int_eq(status_of(k.auditor, "GET", "/admin/policies/default", NULL), 200);
    ck_assert_int_eq(
        status_of(k.auditor, "GET", "/admin/policies/default/explain?url=pypi.org:443", NULL), 200);
    assert_refused(k.operator, "operator", "GET", "/admin/policies", NULL, "admin or auditor");
    assert_refused(k.operator, "operator", "GET", "/admin/policies/default/explain?url=x:1", NULL,
                   "admin or auditor");
    for (const char *const *key = (const char *const[]){k.admin, k.operator, k.auditor, NULL}; *key;
         key++) {
        ck_assert_int_eq(status_of(*key, "GET", "/admin/overview", NULL), 200);
        ck_assert_int_eq(status_of(*key, "GET", "/admin/overview/series", NULL), 200);
        ck_assert_int_eq(status_of(*key, "GET", "/templates", NULL), 200);
        ck_assert_int_ne(status_of(*key, "GET", "/secrets", NULL), 403);
        ck_assert_int_ne(status_of(*key, "GET", "/secrets/openai-key", NULL), 403);
    }
    const char *secret = "{\"name\":\"openai-key\",\"value\":\"sk-1\"}";
    assert_refused(k.operator, "operator", "POST", "/secrets", secret, "admin");
    assert_refused(k.auditor, "auditor", "POST", "/secrets", secret, "admin");
    assert_refused(k.operator, "operator", "DELETE", "/secrets/openai-key", NULL, "admin");
    ck_assert_int_ne(status_of(k.admin, "POST", "/secrets", secret), 403);
    const char *tpl = "{\"name\":\"mine\"}";
    assert_refused(k.auditor, "auditor", "POST", "/v3/templates", tpl, "admin or operator");
    assert_refused(k.auditor, "auditor", "DELETE", "/templates/base", NULL, "admin or operator");
    ck_assert_int_ne(status_of(k.operator, "POST", "/v3/templates", tpl), 403);
    assert_refused(k.auditor, "auditor", "GET", "/events/webhooks", NULL, "admin or operator");
    ck_assert_int_ne(status_of(k.operator, "GET", "/events/webhooks", NULL), 403);
    /* Not in the table: admin's only (the router's 404 for an admin). */
    ck_assert_int_eq(status_of(k.admin, "GET", "/nothing-here", NULL), 404);
    assert_refused(k.operator, "operator", "GET", "/nothing-here", NULL, "admin");
    /* The environment key and the local socket are admins. */
    ck_assert_int_eq(status_of(KEY_ENV, "GET", "/admin/audit", NULL), 404);
    char t[320];
    snprintf(t, sizeof t, "unix:%s/cp.sock", g_tmpdir);
    struct resp r;
    req_full(&r, t, "GET", "/admin/audit", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
}
END_TEST

/* The table itself: segments are matched exactly and undecoded, "*" is one non-empty
 * segment, a final "**" none or more; first match wins; anything else is admin's only. */
START_TEST(roles_table_matching)
{
    struct cp_principal op = {.key_id = "k_op", .role = CP_ROLE_OPERATOR};
    struct cp_principal au = {.key_id = "k_au", .role = CP_ROLE_AUDITOR};
    struct cp_principal none = {.key_id = "k_none"};
    struct cp_principal ad = {.key_id = "k_ad", .role = CP_ROLE_ADMIN};
    struct {
        const struct cp_principal *who;
        const char *method, *path;
        bool ok;
    } cases[] = {
        {&au, "GET", "/sandboxes", true},
        {&au, "GET", "/sandboxes/abc", true},
        {&au, "GET", "/sandboxes/abc/metrics", true},
        {&au, "GET", "/sandboxes/abc/logs", false},
        {&au, "GET", "/sandboxes/", false}, /* an empty segment is not "*" */
        {&au, "GET", "/sandboxes//", false},
        {&au, "GET", "/sandboxesx", false}, /* not a prefix match */
        {&au, "GET", "/sandboxes/abc/", false},
        {&au, "HEAD", "/sandboxes", false}, /* methods exactly */
        {&au, "DELETE", "/sandboxes/abc", false},
        {&au, "GET", "/v2/sandboxes/abc/logs", false},
        {&au, "GET", "/admin/audit", true},
        {&au, "GET", "/admin/audit/verify", true},
        {&au, "GET", "/admin/%61udit", false}, /* undecoded: not the audit route */
        {&au, "POST", "/admin/audit", false},
        {&au, "GET", "/admin/policies", true},
        {&au, "GET", "/admin/policies/default/explain", true},
        {&au, "POST", "/admin/policies", false},
        {&op, "GET", "/admin/policies/default", false},
        {&au, "GET", "/events/sandboxes/abc", true},
        {&au, "GET", "/templates/base/builds/b1/status", true},
        {&au, "GET", "/templates/base/files/abc", false}, /* an upload link: building */
        {&op, "GET", "/templates/base/files/abc", true},
        {&op, "GET", "/admin/audit", false},
        {&op, "GET", "/admin/auditx", false},
        {&op, "POST", "/sandboxes/abc/snapshots", true},
        {&op, "POST", "/v2/templates/t/builds/b", true},
        {&op, "POST", "/secrets", false},
        {&op, "GET", "/secrets", true},
        {&op, "DELETE", "/events/webhooks/w1", true},
        {&op, "GET", "/", false},
        {&none, "GET", "/sandboxes", false}, /* no role: nothing */
        {&none, "GET", "/nothing", false},
        {&ad, "GET", "/nothing", true},
        {&ad, "POST", "/secrets", true},
        {&ad, "GET", "/admin/audit", true},
        {&ad, "DELETE", "/admin/keys/k1", true},
        {&op, "GET", "/admin/keys", false},
        {&au, "GET", "/admin/keys", false},
        {&au, "GET", "/admin/cluster/nodes", false},
        {&op, "GET", "/admin/cluster/nodes", false},
        {&ad, "GET", "/admin/cluster/nodes", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct al_error err = {0};
        int rc = cp_auth_role_check(cases[i].who, cases[i].method, cases[i].path, &err);
        ck_assert_msg((rc == 0) == cases[i].ok, "%s %s %s: %d %s", cp_role_name(cases[i].who->role),
                      cases[i].method, cases[i].path, rc, al_error_str(&err));
        if (rc)
            ck_assert_int_eq(rc, -EPERM);
    }
    ck_assert(cp_auth_data_plane(&op) && cp_auth_data_plane(&ad));
    ck_assert(!cp_auth_data_plane(&au) && !cp_auth_data_plane(&none));
}
END_TEST

/* The keys' endpoints (what the console's keys page uses): admins only; a key created is shown
 * once and works at once with its role; one revoked stops at once; bad input says why. */
START_TEST(roles_keys_endpoints)
{
    struct keys k;
    make_keys(&k);
    struct resp r;
    req_full(&r, g_target, "GET", "/admin/keys", k.admin, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *list = json_object_get(r.body, "keys");
    ck_assert_uint_eq(json_array_size(list), 3);
    ck_assert_str_eq(jstr(json_array_get(list, 2), "role"), "auditor");
    ck_assert_ptr_null(strstr(r.raw, k.admin + 4)); /* never a key */
    resp_free(&r);
    assert_refused(k.operator, "operator", "GET", "/admin/keys", NULL, "admin");
    assert_refused(k.auditor, "auditor", "POST", "/admin/keys", "{\"name\":\"x\"}", "admin");
    req_full(&r, g_target, "POST", "/admin/keys", k.admin,
             "{\"name\":\"ci\",\"role\":\"operator\",\"policies\":\"default\"}", NULL, 0);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    char made[CP_APIKEY_LEN + 1], made_id[64];
    snprintf(made, sizeof made, "%s", jstr(r.body, "key"));
    snprintf(made_id, sizeof made_id, "%s", jstr(r.body, "id"));
    ck_assert(cp_apikey_wellformed(made));
    ck_assert_str_eq(jstr(r.body, "role"), "operator");
    ck_assert_str_eq(jstr(r.body, "policies"), "default");
    resp_free(&r);
    /* It works at once, as an operator. */
    ck_assert_int_eq(status_of(made, "GET", "/v2/sandboxes", NULL), 200);
    assert_refused(made, "operator", "GET", "/admin/audit", NULL, "admin or auditor");
    /* Listed without the key. */
    req_full(&r, g_target, "GET", "/admin/keys", KEY_ENV, NULL, NULL, 0);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "keys")), 4);
    ck_assert_ptr_null(strstr(r.raw, made + 4));
    resp_free(&r);
    /* Revoked: refused at the next request. */
    char path[128];
    snprintf(path, sizeof path, "/admin/keys/%s", made_id);
    ck_assert_int_eq(status_of(k.admin, "DELETE", path, NULL), 204);
    req_full(&r, g_target, "GET", "/v2/sandboxes", made, NULL, NULL, 0);
    assert_error(&r, 401, "revoked");
    resp_free(&r);
    req_full(&r, g_target, "DELETE", path, k.admin, NULL, NULL, 0);
    assert_error(&r, 409, "already revoked");
    resp_free(&r);
    req_full(&r, g_target, "DELETE", "/admin/keys/key_00000000", k.admin, NULL, NULL, 0);
    assert_error(&r, 404, NULL);
    resp_free(&r);
    /* A name is not an id here: a page revokes the row it shows. */
    req_full(&r, g_target, "DELETE", "/admin/keys/ops", k.admin, NULL, NULL, 0);
    assert_error(&r, 404, NULL);
    resp_free(&r);
    ck_assert_int_eq(status_of(k.operator, "GET", "/v2/sandboxes", NULL), 200);
    /* Bad input. */
    req_full(&r, g_target, "POST", "/admin/keys", k.admin, "{\"role\":\"root\"}", NULL, 0);
    assert_error(&r, 400, "admin, operator or auditor");
    resp_free(&r);
    req_full(&r, g_target, "POST", "/admin/keys", k.admin, "{\"policies\":\"a b\"}", NULL, 0);
    assert_error(&r, 400, "is not a policy name");
    resp_free(&r);
    req_full(&r, g_target, "POST", "/admin/keys", k.admin, "{\"secret\":\"x\"}", NULL, 0);
    assert_error(&r, 400, "not a field of a key");
    resp_free(&r);
    req_full(&r, g_target, "POST", "/admin/keys", k.admin, "{\"name\":7}", NULL, 0);
    assert_error(&r, 400, "must be a string");
    resp_free(&r);
    req_full(&r, g_target, "PUT", "/admin/keys", k.admin, NULL, NULL, 0);
    assert_error(&r, 405, NULL);
    resp_free(&r);
    /* Without a role given: an admin key, as the CLI makes it. */
    req_full(&r, g_target, "POST", "/admin/keys", k.admin, "{}", NULL, 0);
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(jstr(r.body, "role"), "admin");
    ck_assert_str_eq(jstr(r.body, "name"), jstr(r.body, "id"));
    resp_free(&r);
}
END_TEST

/* A stored key whose role this airlockd does not know authenticates nothing. */
START_TEST(roles_unknown_role_refused)
{
    char key[CP_APIKEY_LEN + 1];
    struct cp_apikey k = add_key("future", CP_ROLE_OPERATOR, NULL, key);
    char cmd[700];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s/airlockd.db'); "
             "c.execute(\\\"UPDATE api_keys SET role = 'superuser' WHERE id = '%s'\\\"); "
             "c.commit()\"",
             g_tmpdir, k.id);
    ck_assert_int_eq(system(cmd), 0);
    struct resp r;
    req_full(&r, g_target, "GET", "/v2/sandboxes", key, NULL, NULL, 0);
    assert_error(&r, 401, "a role this airlockd does not know");
    resp_free(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_roles");
    TCase *t = cp_rest_tcase("roles");
    tcase_add_test(t, roles_sandboxes);
    tcase_add_test(t, roles_other_classes);
    tcase_add_test(t, roles_table_matching);
    tcase_add_test(t, roles_unknown_role_refused);
    tcase_add_test(t, roles_keys_endpoints);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
