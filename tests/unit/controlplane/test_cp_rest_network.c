/* tests/unit/controlplane/test_cp_rest_network: PUT /sandboxes/{id}/network
 * (cp_rest_fixture.h): replace semantics, checks against the sandbox's policy, If-Match on
 * network generations, what the store keeps, and refusals that change nothing. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cp_rest_fixture.h"

/* PUT /sandboxes/{id}/network (sbx.updateNetwork()): E2B's replace semantics, checked
 * against the sandbox's policy like a creation, refusals that say why, saved in the store,
 * shown by getInfo. */
START_TEST(network_update)
{
    char id[64], path[160], info[160];
    create("{\"templateID\":\"base\",\"timeout\":60,\"network\":{\"allowOut\":[\"pypi.org\"],"
           "\"denyOut\":[\"0.0.0.0/0\"],\"allowPublicTraffic\":false}}",
           id, NULL);
    snprintf(path, sizeof path, "/sandboxes/%s/network", id);
    snprintf(info, sizeof info, "/sandboxes/%s", id);
    struct resp r;
    struct cp_sb_record rec;
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    char hash0[65];
    snprintf(hash0, sizeof hash0, "%s", rec.policy_hash);
    cp_sb_record_free(&rec);
    /* Replace: allowOut and allow_internet_access given, denyOut omitted (cleared). */
    req(&r, "GET", info, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "networkGeneration")), 0);
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowOut\":[\"a.example\"],\"allow_internet_access\":false}");
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_str_eq(r.etag, "\"1\""); /* the update's generation */
    resp_free(&r);
    req(&r, "GET", info, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "networkGeneration")), 1);
    json_t *n = json_object_get(r.body, "network");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(n, "allowOut"), 0)),
                     "a.example");
    ck_assert_uint_eq(json_array_size(json_object_get(n, "allowOut")), 1);
    ck_assert_ptr_null(json_object_get(n, "denyOut"));
    /* Not an egress field: kept from the creation. */
    ck_assert(json_is_false(json_object_get(n, "allowPublicTraffic")));
    ck_assert(json_is_false(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    /* Saved: the store holds the new fields and the new narrowed hash. */
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    ck_assert_int_eq(rec.allow_internet, 0);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rec.network, "allowOut"), 0)),
                     "a.example");
    ck_assert_str_ne(rec.policy_hash, hash0);
    ck_assert_uint_eq(rec.net_generation, 1); /* kept with the fields (restarts read it) */
    cp_sb_record_free(&rec);
    /* If-Match: the generation a client read; another one is a 412 and changes nothing. */
    struct al_http_header stale[] = {{"If-Match", "\"0\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV, "{\"allowOut\":[\"c.example\"]}", stale, 1);
    assert_error(&r, 412, "is at generation 1");
    resp_free(&r);
    struct al_http_header bad[] = {{"If-Match", "W/\"1\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV, "{\"allowOut\":[\"c.example\"]}", bad, 1);
    assert_error(&r, 400, "If-Match must name network generations");
    resp_free(&r);
    struct al_http_header cur[] = {{"If-Match", "\"0\", \"1\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV,
             "{\"allowOut\":[\"a.example\"],\"allow_internet_access\":false}", cur, 1);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    ck_assert_str_eq(r.etag, "\"2\"");
    resp_free(&r);
    /* Refusals leave everything as it was. */
    req(&r, "PUT", path, "{\"allowOut\":[\"0.0.0.0/0\"]}");
    assert_error(&r, 400, "'0.0.0.0/0' would allow all traffic");
    resp_free(&r);
    req(&r, "PUT", path, "{\"denyOut\":[\"not a cidr!\"]}");
    assert_error(&r, 400, "network.denyOut");
    resp_free(&r);
    req(&r, "PUT", path,
        "{\"rules\":{\"x.example\":[{\"transform\":{\"headers\":{\"X-A\":\"v\"}}}]}}");
    assert_error(&r, 400, "the domain 'x.example' is not covered");
    resp_free(&r);
    req(&r, "PUT", path, "{\"egressProxy\":{\"address\":\"p.example:1080\"}}");
    assert_error(&r, 400, "egressProxy");
    resp_free(&r);
    req(&r, "PUT", path, "{\"allow_internet_access\":\"no\"}");
    assert_error(&r, 400, "allow_internet_access");
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowPublicTraffic\":true}");
    assert_error(&r, 400, "not a field of a network update");
    resp_free(&r);
    req(&r, "PUT", path, "[1]");
    assert_error(&r, 400, "JSON object");
    resp_free(&r);
    req(&r, "GET", info, NULL);
    n = json_object_get(r.body, "network");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(n, "allowOut"), 0)),
                     "a.example");
    ck_assert(json_is_false(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    /* Everything omitted: the egress fields are cleared; the policy's own hash again. */
    req(&r, "PUT", path, "{}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "GET", info, NULL);
    n = json_object_get(r.body, "network");
    ck_assert_ptr_null(json_object_get(n, "allowOut"));
    ck_assert(json_is_false(json_object_get(n, "allowPublicTraffic")));
    ck_assert(json_is_null(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    ck_assert_int_eq(rec.allow_internet, -1);
    ck_assert_str_ne(rec.policy_hash, hash0);
    ck_assert_uint_eq(rec.net_generation, 3); /* refusals took no generation */
    cp_sb_record_free(&rec);
    /* Unknown sandbox, other methods, a paused sandbox. */
    req(&r, "PUT", "/sandboxes/nope1234/network", "{}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    assert_error(&r, 405, "PUT");
    resp_free(&r);
    snprintf(info, sizeof info, "/sandboxes/%s/pause", id);
    req(&r, "POST", info, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowOut\":[\"b.example\"]}");
    assert_error(&r, 409, "paused");
    resp_free(&r);
}
END_TEST

/* If-Match of a network update: quoted or bare generations, lists, *, nothing else. */
START_TEST(network_if_match)
{
    ck_assert_int_eq(cp_network_if_match(NULL, 7), 1);
    ck_assert_int_eq(cp_network_if_match("\"7\"", 7), 1);
    ck_assert_int_eq(cp_network_if_match("7", 7), 1);
    ck_assert_int_eq(cp_network_if_match("*", 7), 1);
    ck_assert_int_eq(cp_network_if_match(" \"3\" , \"7\"", 7), 1);
    ck_assert_int_eq(cp_network_if_match("\"6\"", 7), 0);
    ck_assert_int_eq(cp_network_if_match("\"6\",8", 7), 0);
    ck_assert_int_eq(cp_network_if_match("18446744073709551615", 7), 0);
    const char *bad[] = {"",  "\"\"", "\"7", "W/\"7\"", "7,",
                         "x", "-1",   "7 8", "\"7\"x",  "99999999999999999999",
                         NULL};
    for (size_t i = 0; bad[i]; i++)
        ck_assert_msg(cp_network_if_match(bad[i], 7) == -EINVAL, "accepted '%s'", bad[i]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_network");
    TCase *t = cp_rest_tcase("network");
    tcase_add_test(t, network_update);
    tcase_add_test(t, network_if_match);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
