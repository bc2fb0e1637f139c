/* Unit tests: policy/query, a request as text (the URL forms of `airlock policy explain` and
 * the console's explain) decided and put in JSON: each form reads into the request the proxies
 * would decide, the options that do not fit a form are refused with what to write instead,
 * and the JSON names the rule and the injected headers but never a secret. */
#include "al_test.h"
#include "policy/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *policy_text = "version: 1\n"
                                 "name: query\n"
                                 "rules:\n"
                                 "  - name: api\n"
                                 "    hosts: [api.example.com]\n"
                                 "    methods: [GET]\n"
                                 "    tls: inspect\n"
                                 "    inject:\n"
                                 "      - header: Authorization\n"
                                 "        value: \"Bearer ${secret:api/token}\"\n"
                                 "  - name: db\n"
                                 "    cidrs: [203.0.113.7/32]\n"
                                 "    scheme: tcp\n"
                                 "    ports: [5432]\n";

static struct policy *load(void)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer(policy_text, strlen(policy_text), "q.yaml", &d);
    if (!p)
        al_diags_print(&d, stderr, false);
    al_diags_free(&d);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* The refusal's message for url with o (valid until the next call), or NULL when it reads. */
static const char *refusal(const char *url, const struct policy_query_opts *o)
{
    static struct al_error err;
    static struct policy_query q;
    memset(&err, 0, sizeof err);
    return policy_query_parse(url, o, &q, &err) ? al_error_str(&err) : NULL;
}

START_TEST(url_forms_read_as_the_proxies_see_them)
{
    struct policy_query q;
    struct al_error err = {0};
    ck_assert_int_eq(policy_query_parse("https://API.Example.com./v1/x?y=1", NULL, &q, &err), 0);
    ck_assert(!q.dns);
    ck_assert_int_eq(q.req.scheme, POLICY_SCHEME_HTTPS);
    ck_assert_uint_eq(q.req.port, 443);
    ck_assert_str_eq(q.req.method, "GET");
    ck_assert_str_eq(q.req.path, "/v1/x?y=1");
    ck_assert_int_eq(policy_query_parse("http://h.example:8080", NULL, &q, &err), 0);
    ck_assert_int_eq(q.req.scheme, POLICY_SCHEME_HTTP);
    ck_assert_uint_eq(q.req.port, 8080);
    ck_assert_str_eq(q.req.path, "/");
    ck_assert_int_eq(policy_query_parse("db.example.com:5432", NULL, &q, &err), 0);
    ck_assert_int_eq(q.req.scheme, POLICY_SCHEME_TCP);
    ck_assert_ptr_null(q.req.method);
    ck_assert_int_eq(policy_query_parse("tcp://[2001:db8::1]:5432", NULL, &q, &err), 0);
    ck_assert_int_eq(q.req.scheme, POLICY_SCHEME_TCP);
    ck_assert_int_eq(policy_query_parse("dns:files.example.org", NULL, &q, &err), 0);
    ck_assert(q.dns);
    ck_assert_str_eq(q.host, "files.example.org");
    struct policy_query_opts o = {.method = "POST", .body = true, .addr = "0x7f.1"};
    ck_assert_int_eq(policy_query_parse("https://api.example.com/up", &o, &q, &err), 0);
    ck_assert_str_eq(q.req.method, "POST");
    ck_assert(q.req.body);
    ck_assert_ptr_nonnull(q.req.addr);
    char a[64];
    ck_assert_str_eq(policy_addr_format(q.req.addr, a, sizeof a), "127.0.0.1");
    struct policy_query_opts c = {.connection = true};
    ck_assert_int_eq(policy_query_parse("https://api.example.com/", &c, &q, &err), 0);
    ck_assert_ptr_null(q.req.method);
}
END_TEST

START_TEST(what_does_not_fit_is_refused_with_the_form_to_write)
{
    ck_assert_ptr_nonnull(strstr(refusal("ftp://x.example/", NULL), "unsupported URL scheme"));
    ck_assert_ptr_nonnull(strstr(refusal("https://u@x.example/", NULL), "userinfo"));
    ck_assert_ptr_nonnull(strstr(refusal("x.example", NULL), "raw TCP needs host:port"));
    ck_assert_ptr_nonnull(strstr(refusal("/just/a/path", NULL), "has no host"));
    ck_assert_ptr_nonnull(strstr(refusal("", NULL), "is not a URL"));
    struct policy_query_opts m = {.method = "GET"};
    ck_assert_ptr_nonnull(strstr(refusal("db.example.com:5432", &m), "a method needs"));
    ck_assert_ptr_nonnull(strstr(refusal("dns:x.example", &m), "a method needs"));
    struct policy_query_opts e = {.method = ""};
    ck_assert_ptr_nonnull(strstr(refusal("https://x.example/", &e), "the method must be"));
    struct policy_query_opts b = {.body = true};
    ck_assert_ptr_nonnull(strstr(refusal("db.example.com:5432", &b), "a body needs"));
    struct policy_query_opts bc = {.body = true, .connection = true};
    ck_assert_ptr_nonnull(strstr(refusal("https://x.example/", &bc), "a body needs"));
    struct policy_query_opts a = {.addr = "db.example.com"};
    ck_assert_ptr_nonnull(strstr(refusal("https://x.example/", &a), "is not an IP address"));
    struct policy_query_opts ad = {.addr = "203.0.113.5"};
    ck_assert_ptr_nonnull(strstr(refusal("dns:x.example", &ad), "not a dns: question"));
}
END_TEST

START_TEST(decided_and_explained_as_json)
{
    struct policy *p = load();
    struct policy_query q;
    struct policy_decision d;
    struct al_error err = {0};
    ck_assert_int_eq(policy_query_parse("https://api.example.com/v1", NULL, &q, &err), 0);
    policy_query_decide(p, &q, &d);
    json_t *o = policy_query_json(p, &q, &d);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_string_value(json_object_get(o, "decision")), "allow");
    ck_assert_str_eq(json_string_value(json_object_get(o, "rule")), "api");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "rule_line")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(o, "tls")), "inspect");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(o, "inject"), 0)),
                     "Authorization");
    ck_assert_str_eq(json_string_value(json_object_get(o, "query")), "request");
    char *s = json_dumps(o, JSON_COMPACT);
    ck_assert_ptr_null(strstr(s, "secret"));
    ck_assert_ptr_null(strstr(s, "Bearer"));
    free(s);
    json_decref(o);

    struct policy_query_opts m = {.method = "DELETE"};
    ck_assert_int_eq(policy_query_parse("https://api.example.com/v1", &m, &q, &err), 0);
    policy_query_decide(p, &q, &d);
    o = policy_query_json(p, &q, &d);
    ck_assert_str_eq(json_string_value(json_object_get(o, "decision")), "deny");
    ck_assert_str_eq(json_string_value(json_object_get(o, "reason")), "method_not_allowed");
    ck_assert_str_eq(json_string_value(json_object_get(o, "rule")), "api");
    char why[1024];
    policy_query_explain(p, &q, &d, why, sizeof why);
    ck_assert_str_eq(json_string_value(json_object_get(o, "explanation")), why);
    json_decref(o);

    ck_assert_int_eq(policy_query_parse("dns:api.example.com", NULL, &q, &err), 0);
    policy_query_decide(p, &q, &d);
    o = policy_query_json(p, &q, &d);
    ck_assert_str_eq(json_string_value(json_object_get(o, "query")), "dns");
    ck_assert_str_eq(json_string_value(json_object_get(o, "decision")), "allow");
    ck_assert_ptr_null(json_object_get(o, "port"));
    json_decref(o);

    ck_assert_int_eq(policy_query_parse("203.0.113.7:5433", NULL, &q, &err), 0);
    policy_query_decide(p, &q, &d);
    o = policy_query_json(p, &q, &d);
    ck_assert_str_eq(json_string_value(json_object_get(o, "query")), "connection");
    ck_assert_str_eq(json_string_value(json_object_get(o, "reason")), "port_not_allowed");
    ck_assert_str_eq(json_string_value(json_object_get(o, "rule")), "db");
    ck_assert(json_is_null(json_object_get(o, "method")));
    json_decref(o);
    policy_unref(p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("policy_query");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, url_forms_read_as_the_proxies_see_them);
    tcase_add_test(tc, what_does_not_fit_is_refused_with_the_form_to_write);
    tcase_add_test(tc, decided_and_explained_as_json);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
