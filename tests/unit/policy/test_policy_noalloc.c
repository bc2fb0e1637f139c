/* Unit test: the decision path never allocates (ASCII names, connection and request
 * level, DNS). Linked with --wrap=malloc/calloc/realloc so that every allocation made by
 * the policy library's own code is counted. */
#include "al_test.h"
#include "policy/policy.h"

#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static int allocations;

void *__wrap_malloc(size_t n)
{
    allocations++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
    allocations++;
    return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
    allocations++;
    return __real_realloc(p, n);
}

START_TEST(decide_does_not_allocate)
{
    const char *text =
        "version: 1\nname: n\nrules:\n"
        "  - name: api\n    hosts: [api.example.com]\n    methods: [GET]\n"
        "    paths: [\"/v1/**\"]\n"
        "    inject:\n      - header: X-Key\n        value: \"${secret:k}\"\n"
        "  - name: wild\n    hosts: [\"**.example.org\", \"*.example.net\", "
        "\"api-*.example.io\"]\n"
        "  - name: db\n    cidrs: [10.0.0.0/24]\n    scheme: tcp\n    ports: [5432]\n";
    allocations = 0;
    struct policy *p = policy_load_buffer(text, strlen(text), "n.yaml", NULL);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_gt(allocations, 10); /* the counter does see the library's allocations */
    allocations = 0;
    const char *hosts[] = {"API.EXAMPLE.COM.",
                           "a.b.example.org",
                           "x.example.net",
                           "api-1.example.io",
                           "evil.example",
                           "0x7f.1",
                           "10.0.0.9",
                           "[::ffff:10.0.0.1]",
                           "a..b",
                           NULL};
    for (size_t i = 0; hosts[i]; i++) {
        struct policy_decision d;
        struct policy_request r = {.host = hosts[i],
                                   .host_len = strlen(hosts[i]),
                                   .port = 443,
                                   .scheme = POLICY_SCHEME_HTTPS};
        policy_decide(p, &r, &d);
        r.method = "GET";
        r.method_len = 3;
        r.path = "/v1/x/%7Ey?q=1";
        r.path_len = strlen(r.path);
        policy_decide(p, &r, &d);
        r.scheme = POLICY_SCHEME_TCP;
        r.port = 5432;
        r.method = r.path = NULL;
        policy_decide(p, &r, &d);
        policy_dns_decide(p, hosts[i], strlen(hosts[i]), &d);
    }
    ck_assert_int_eq(allocations, 0);
    policy_unref(p);
}
END_TEST

static Suite *noalloc_suite(void)
{
    Suite *s = suite_create("policy_noalloc");
    TCase *tc = tcase_create("noalloc");
    tcase_add_test(tc, decide_does_not_allocate);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(noalloc_suite)
