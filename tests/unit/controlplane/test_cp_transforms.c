/* Unit tests: E2B network.rules as airlockd takes them (controlplane/transforms.c): the shape
 * check and its messages (never a value), and what the record keeps (domains, header names,
 * secret names: no value), what is left for the vault, and "${e2b.secrets.NAME}". */
#include "al_test.h"
#include "controlplane/transforms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALUE "Bearer tf-unit-Zq7RkT0pW3xYvN5"

static json_t *parse(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", s, je.text);
    return j;
}

START_TEST(prepare_keeps_no_value)
{
    json_t *n = parse(
        "{\"allowOut\": [\"api.example.com\"], \"rules\": {"
        " \"API.Example.com\": [{\"transform\": {\"headers\": {\"Authorization\": \"" VALUE "\"}}},"
        "                       {\"transform\": {\"headers\": {\"X-Vaulted\": "
        "\"${e2b.secrets.team/key}\"}}}],"
        " \"*.svc.example.net\": [{}],"
        " \"other.example.org\": [{\"transform\": {\"headers\": {\"X-B\": \"b-value\"}}}]}}");
    json_t *pending = NULL;
    struct al_error err = {0};
    ck_assert_int_eq(cp_transforms_prepare("sbx1", "c", n, &pending, &err), 0);
    char *text = json_dumps(n, JSON_SORT_KEYS);
    ck_assert_ptr_null(strstr(text, VALUE));
    ck_assert_ptr_null(strstr(text, "b-value"));
    ck_assert_ptr_nonnull(strstr(text, "\"api.example.com\": [{\"transform\": {\"headers\": "
                                       "{\"Authorization\": \"[sealed]\"}}}"));
    ck_assert_ptr_nonnull(
        strstr(text, "\"**.svc.example.net\": [{\"transform\": {\"headers\": {}}}]"));
    free(text);
    json_t *t = json_object_get(n, "transforms");
    ck_assert_uint_eq(json_array_size(t), 2); /* the domain without headers has no transform */
    text = json_dumps(t, JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_str_eq(text,
                     "[{\"domain\":\"api.example.com\",\"headers\":[{\"name\":\"Authorization\","
                     "\"secret\":\"sandboxes/sbx1/c-0\"},{\"name\":\"X-Vaulted\",\"secret\":"
                     "\"team/key\"}]},{\"domain\":\"other.example.org\",\"headers\":[{\"name\":"
                     "\"X-B\",\"secret\":\"sandboxes/sbx1/c-1\"}]}]");
    free(text);
    /* What the vault gets: the two values (not the vault reference), each with its domain. */
    ck_assert_uint_eq(json_array_size(pending), 2);
    json_t *p0 = json_array_get(pending, 0);
    ck_assert_str_eq(json_string_value(json_object_get(p0, "secret")), "sandboxes/sbx1/c-0");
    ck_assert_str_eq(json_string_value(json_object_get(p0, "domain")), "api.example.com");
    ck_assert_str_eq(json_string_value(json_object_get(p0, "value")), VALUE);
    json_decref(pending);
    /* An update's network without rules (E2B: an omitted field is cleared) keeps no
     * transforms of the previous one. */
    json_object_del(n, "rules");
    ck_assert_int_eq(cp_transforms_prepare("sbx1", "nu_1", n, &pending, &err), 0);
    ck_assert_ptr_null(pending);
    ck_assert_ptr_null(json_object_get(n, "transforms"));
    json_decref(n);
}
END_TEST

START_TEST(refusals_name_what_and_never_a_value)
{
    const char *bad[][2] = {
        {"[]", "must be an object"},
        {"{\"*\": []}", "everywhere"},
        {"{\"api-*.example.com\": []}", "whole leftmost label"},
        {"{\"a.example.com\": {}}", "must be a list"},
        {"{\"a.example.com\": [7]}", "must be a JSON object"},
        {"{\"a.example.com\": [{\"match\": {}}]}", "unknown field \"match\""},
        {"{\"a.example.com\": [{\"transform\": {\"body\": \"x\"}}]}", "supports headers only"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"Host\": \"" VALUE "\"}}}]}",
         "header 'Host' cannot be set"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"Proxy-Authorization\": \"" VALUE
         "\"}}}]}",
         "cannot be set"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": \"" VALUE
         "\\r\\nX: y\"}}}]}",
         "control character"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": 5}}}]}", "string value"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": \"\"}}}]}", "1 to 8192"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": \"Bearer "
         "${e2b.identity.tokens.aws}\"}}}]}",
         "placeholder airlock cannot resolve"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": \"x ${e2b.secrets.k}\"}}}]}",
         "placeholder airlock cannot resolve"},
        {"{\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": "
         "\"${e2b.secrets.sandboxes/other/c-0}\"}}}]}",
         "placeholder airlock cannot resolve"},
        {NULL, NULL}};
    for (size_t i = 0; bad[i][0]; i++) {
        json_t *r = parse(bad[i][0]);
        struct al_error err = {0};
        ck_assert_msg(cp_transforms_check(r, &err) != 0, "accepted %s", bad[i][0]);
        ck_assert_msg(strstr(al_error_str(&err), bad[i][1]) != NULL, "%s: %s", bad[i][0],
                      al_error_str(&err));
        ck_assert_msg(strstr(al_error_str(&err), VALUE) == NULL, "%s quotes the value",
                      al_error_str(&err));
        json_decref(r);
    }
    /* Duplicates show only once the domains are canonical, and headers across rules. */
    const char *dup[] = {
        "{\"rules\": {\"a.example.com\": [], \"A.example.com.\": []}}",
        "{\"rules\": {\"a.example.com\": [{\"transform\": {\"headers\": {\"X-A\": \"1\"}}},"
        " {\"transform\": {\"headers\": {\"x-a\": \"2\"}}}]}}",
        NULL};
    for (size_t i = 0; dup[i]; i++) {
        json_t *n = parse(dup[i]), *pending = NULL;
        struct al_error err = {0};
        ck_assert_msg(cp_transforms_prepare("s", "c", n, &pending, &err) != 0, "accepted %s",
                      dup[i]);
        ck_assert_ptr_nonnull(strstr(al_error_str(&err), "twice"));
        ck_assert_ptr_null(pending);
        json_decref(n);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_transforms");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, prepare_keeps_no_value);
    tcase_add_test(tc, refusals_name_what_and_never_a_value);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
