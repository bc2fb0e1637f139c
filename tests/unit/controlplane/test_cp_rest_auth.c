/* tests/unit/controlplane/test_cp_rest_auth: who may call the REST API (cp_rest_fixture.h):
 * the environment key, stored keys restricted to policies, revocation by another connection
 * taking effect at once, two keys in one request, the local socket's peer rule, and the
 * endpoints that need no key. */
#include <stdio.h>
#include <string.h>

#include "cp_rest_fixture.h"

START_TEST(auth_keys)
{
    struct resp r;
    req_full(&r, g_target, "GET", "/v2/sandboxes", NULL, NULL, NULL, 0);
    assert_error(&r, 401, "X-API-KEY");
    resp_free(&r);
    req_full(&r, g_target, "GET", "/v2/sandboxes", "e2b_2222222222222222222222222222222222222222",
             NULL, NULL, 0);
    assert_error(&r, 401, "invalid API key");
    resp_free(&r);
    /* A stored key (as `airlock apikey create` makes them), restricted to one policy. */
    char key[CP_APIKEY_LEN + 1];
    struct cp_apikey k = add_key("team", CP_ROLE_OPERATOR, "default", key);
    req_full(&r, g_target, "POST", "/v2/sandboxes", key, "{\"templateID\":\"base\"}", NULL, 0);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    req_full(&r, g_target, "POST", "/v2/sandboxes", key,
             "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"}}", NULL, 0);
    assert_error(&r, 403, "may not use policy \"other\"");
    resp_free(&r);
    /* Revoked by another connection: refused at once. */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    ck_assert_int_eq(cp_store_key_revoke(s2, k.id, al_wall_ns(), NULL), 0);
    cp_store_close(s2);
    req_full(&r, g_target, "GET", "/v2/sandboxes", key, NULL, NULL, 0);
    assert_error(&r, 401, "revoked");
    resp_free(&r);
    /* Two keys in one request are refused. */
    struct al_http_header two[] = {{"X-API-KEY", KEY_ENV}};
    req_full(&r, g_target, "GET", "/v2/sandboxes", KEY_ENV, NULL, two, 1);
    assert_error(&r, 401, "more than one");
    resp_free(&r);
    /* The local socket: root (us) needs no key. */
    char t[320];
    snprintf(t, sizeof t, "unix:%s/cp.sock", g_tmpdir);
    req_full(&r, t, "GET", "/v2/sandboxes", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* Liveness and metrics are open. */
    req_full(&r, g_target, "GET", "/health", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_auth");
    TCase *t = cp_rest_tcase("auth");
    tcase_add_test(t, auth_keys);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
