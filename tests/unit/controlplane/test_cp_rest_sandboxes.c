/* tests/unit/controlplane/test_cp_rest_sandboxes: creating and listing sandboxes over the
 * E2B REST API (cp_rest_fixture.h): the Sandbox and SandboxDetail shapes on the v1 and v2
 * paths, validation of create requests with errors that name the field, policies chosen by
 * metadata or by the template, pagination and filters of the list, the 429 beyond
 * sandboxes.max, and a failed start that leaves nothing behind. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cp_rest_fixture.h"

START_TEST(create_shapes_v1_v2)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"timeout\":120,"
        "\"metadata\":{\"k\":\"v\"},\"envVars\":{\"A\":\"1\"}}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(strlen(jstr(r.body, "sandboxID")), CP_ID_LEN);
    ck_assert_str_eq(jstr(r.body, "templateID"), "base");
    ck_assert_str_eq(jstr(r.body, "envdVersion"), "0.6.4");
    ck_assert_uint_eq(strlen(jstr(r.body, "envdAccessToken")), CP_TOKEN_LEN);
    ck_assert_str_eq(jstr(r.body, "domain"), "sbx.test"); /* api.domain */
    /* The traffic token (the sandbox's other ports) derives from the envd token. */
    char traffic[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    al_http_traffic_token(jstr(r.body, "envdAccessToken"), CP_TOKEN_LEN, traffic);
    ck_assert_str_eq(jstr(r.body, "trafficAccessToken"), traffic);
    ck_assert_ptr_nonnull(jstr(r.body, "clientID"));
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(r.body, "sandboxID"));
    resp_free(&r);
    /* The previous generation's path, with its extra fields. */
    req(&r, "POST", "/sandboxes",
        "{\"templateID\":\"base\",\"secure\":true,"
        "\"allow_internet_access\":true}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.body, "state"), "running");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "cpuCount")), 2);
    ck_assert_str_eq(jstr(r.body, "domain"), "sbx.test");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "memoryMB")), 512);
    ck_assert_str_eq(jstr(json_object_get(r.body, "metadata"), "k"), "v");
    ck_assert_ptr_null(json_object_get(r.body, "envVars")); /* never echoed */
    ck_assert_str_eq(jstr(json_object_get(r.body, "lifecycle"), "onTimeout"), "kill");
    uint64_t s, e;
    ck_assert_int_eq(al_time_parse_rfc3339(jstr(r.body, "startedAt"), &s), 0);
    ck_assert_int_eq(al_time_parse_rfc3339(jstr(r.body, "endAt"), &e), 0);
    ck_assert_uint_eq((e - s) / 1000000000ull, 120);
    resp_free(&r);
}
END_TEST

START_TEST(create_validation)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", "{}");
    assert_error(&r, 400, "templateID");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "not json");
    assert_error(&r, 400, "JSON");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "[1]");
    assert_error(&r, 400, "object");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"frob\":1}");
    assert_error(&r, 400, "frob");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":0}");
    assert_error(&r, 400, "timeout");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":7200}");
    assert_error(&r, 400, "longer");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":1.5}");
    assert_error(&r, 400, "whole");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"metadata\":{\"k\":1}}");
    assert_error(&r, 400, "string");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"envVars\":{\"A=B\":\"1\"}}");
    assert_error(&r, 400, "variable name");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/v\"}]}");
    assert_error(&r, 400, "volumeMounts");
    resp_free(&r);
    /* A header transform toward a domain no rule with api_transforms: allow covers. */
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"rules\":{\"x.com\":[{\"transform\":"
        "{\"headers\":{\"X-A\":\"v\"}}}]}}}");
    assert_error(&r, 400, "network.rules: the domain 'x.com' is not covered");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"rules\":{\"x.com\":{}}}}");
    assert_error(&r, 400, "network.rules['x.com'] must be a list");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"egressProxy\":"
        "{\"address\":\"p:1080\"}}}");
    assert_error(&r, 400, "egressProxy");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"mcp\":{\"x\":1}}");
    assert_error(&r, 400, "mcp");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"autoResume\":{\"enabled\":true}}");
    assert_error(&r, 400, "autoPause");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"Bad Name\"}");
    assert_error(&r, 400, "template");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"no-such-template\"}");
    assert_error(&r, 404, "template 'no-such-template' not found");
    resp_free(&r);
    /* Policies: a named one must exist and be allowed; network fields are validated. */
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"nope\"}}");
    assert_error(&r, 400, "no policy \"nope\"");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"../etc\"}}");
    assert_error(&r, 400, "airlock.policy");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"},"
        "\"network\":{\"allowOut\":[\"api.github.com\"],\"denyOut\":[\"0.0.0.0/0\"]}}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"not a cidr!\"]}}");
    assert_error(&r, 400, "network");
    resp_free(&r);
    /* The template's default policy (template.json "policy"), unless metadata names one. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(g_started_policy, "default");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned\"}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(g_started_policy, "other");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"pinned\",\"metadata\":{\"airlock.policy\":\"default\"}}");
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(g_started_policy, "default");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned-missing\"}");
    assert_error(&r, 500, "template.json names it");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned-bad\"}");
    assert_error(&r, 500, "\"policy\" must name a policy");
    resp_free(&r);
    /* A backend failure undoes everything and says why. */
    (void)0;
}
END_TEST

START_TEST(list_pagination_and_filters)
{
    char ids[5][64];
    for (int i = 0; i < 5; i++) {
        char body[200];
        snprintf(body, sizeof body, "{\"templateID\":\"%s\",\"metadata\":{\"team\":\"%s\"}}",
                 i == 4 ? "code-interpreter-v1" : "base", i % 2 ? "odd one" : "even");
        create(body, ids[i], NULL);
        usleep(2000);
    }
    struct resp r;
    char path[512] = "/v2/sandboxes?limit=2";
    int total = 0, pages = 0;
    for (;;) {
        req(&r, "GET", path, NULL);
        ck_assert_int_eq(r.status, 200);
        ck_assert_uint_le(json_array_size(r.body), 2);
        total += (int)json_array_size(r.body);
        pages++;
        json_t *first = json_array_get(r.body, 0);
        ck_assert_ptr_nonnull(jstr(first, "startedAt"));
        ck_assert_ptr_null(json_object_get(first, "envdAccessToken"));
        if (!r.next[0]) {
            resp_free(&r);
            break;
        }
        snprintf(path, sizeof path, "/v2/sandboxes?limit=2&nextToken=%s", r.next);
        resp_free(&r);
    }
    ck_assert_int_eq(total, 5);
    ck_assert_int_eq(pages, 3);
    /* Newest first; asc on request. */
    req(&r, "GET", "/v2/sandboxes?limit=1", NULL);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "sandboxID"), ids[4]);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?limit=1&order=asc", NULL);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "sandboxID"), ids[0]);
    resp_free(&r);
    /* The SDK's triple-encoded metadata ("odd one"). */
    req(&r, "GET", "/v2/sandboxes?metadata=team%3Dodd%252520one", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 2);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?template=code-interpreter-v1", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
    /* v1: running only, all of them, no pagination. */
    char p2[128];
    snprintf(p2, sizeof p2, "/sandboxes/%s/pause", ids[0]);
    req(&r, "POST", p2, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "GET", "/sandboxes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 4);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?state=paused", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?state=zombie", NULL);
    assert_error(&r, 400, "running, paused");
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?nextToken=xyz!", NULL);
    assert_error(&r, 400, "nextToken");
    resp_free(&r);
    /* Beyond sandboxes.max (6): 429, the SDK's RateLimitError. */
    char extra[64];
    create("{\"templateID\":\"base\"}", extra, NULL);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    assert_error(&r, 429, "maximum");
    resp_free(&r);
}
END_TEST

static int count_rows(const struct cp_sb_record *r, void *arg)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

START_TEST(failed_create_leaves_nothing)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    /* The backend fails: every step is undone and the error says why. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"failing\"}");
    assert_error(&r, 500, "fake failure");
    resp_free(&r);
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    int rows = 0;
    ck_assert_int_eq(cp_store_sb_foreach(s2, count_rows, NULL, &rows, NULL), 0);
    ck_assert_int_eq(rows, 1);
    cp_store_close(s2);
    req(&r, "GET", "/v2/sandboxes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_sandboxes");
    TCase *t = cp_rest_tcase("sandboxes");
    tcase_add_test(t, create_shapes_v1_v2);
    tcase_add_test(t, create_validation);
    tcase_add_test(t, list_pagination_and_filters);
    tcase_add_test(t, failed_create_leaves_nothing);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
