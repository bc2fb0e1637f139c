/* Unit tests: E2B transform domains (network.rules keys), which rule with `api_transforms:
 * allow` covers them, and which transform applies to a host (exact before the longest
 * wildcard). */
#include "al_test.h"
#include "policy/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *policy_text = "version: 1\n"
                                 "name: transforms\n"
                                 "rules:\n"
                                 "  - name: no-flag\n"
                                 "    hosts: [plain.example.com]\n"
                                 "  - name: api\n"
                                 "    hosts: [api.example.com, \"*.one.example.com\"]\n"
                                 "    api_transforms: allow\n"
                                 "  - name: deep\n"
                                 "    hosts: [\"**.svc.example.net\"]\n"
                                 "    api_transforms: allow\n"
                                 "  - name: said-no\n"
                                 "    hosts: [\"**.no.example.org\"]\n"
                                 "    api_transforms: deny\n";

static struct policy *load(void)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer(policy_text, strlen(policy_text), "p.yaml", &d);
    if (!p)
        al_diags_print(&d, stderr, false);
    /* Lint: one warning per wildcard host of a rule taking API transforms (lines 7 and 10). */
    size_t warned = 0;
    for (size_t i = 0; i < d.n; i++)
        if (strcmp(d.v[i].code, "api_transforms_wildcard") == 0) {
            ck_assert(d.v[i].line == 7 || d.v[i].line == 10);
            warned++;
        }
    ck_assert_uint_eq(warned, 2);
    al_diags_free(&d);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* The message of a refusal (valid until the next call), or NULL. */
static const char *canon(const char *in, struct policy_pattern *out)
{
    static struct al_error err;
    memset(&err, 0, sizeof err);
    int rc = policy_transform_domain_canon(in, strlen(in), out, &err);
    return rc ? al_error_str(&err) : NULL;
}

START_TEST(domains_take_e2b_spelling)
{
    struct policy_pattern p;
    ck_assert_ptr_null(canon("API.Example.COM.", &p));
    ck_assert_int_eq(p.kind, POLICY_PATTERN_EXACT);
    ck_assert_str_eq(p.text, "api.example.com");
    ck_assert_ptr_null(canon("*.Example.com", &p));
    ck_assert_int_eq(p.kind, POLICY_PATTERN_ANY); /* any depth, as E2B documents */
    ck_assert_str_eq(p.text, "**.example.com");
    ck_assert_str_eq(p.base, "example.com");
    ck_assert(policy_pattern_match(&p, "a.b.example.com", 15));
    ck_assert(!policy_pattern_match(&p, "example.com", 11));
    const char *bad[] = {"",
                         "*",
                         "**.example.com",
                         "api-*.example.com",
                         "*.*.example.com",
                         "a.*.example.com",
                         "203.0.113.5",
                         "exa mple.com",
                         NULL};
    for (const char **b = bad; *b; b++) {
        const char *msg = canon(*b, &p);
        ck_assert_msg(msg != NULL, "'%s' was accepted", *b);
    }
    ck_assert_ptr_nonnull(strstr(canon("*", &p), "everywhere"));
    ck_assert_ptr_nonnull(strstr(canon("api-*.example.com", &p), "api-*.example.com"));
}
END_TEST

static const char *covering(const struct policy *p, const char *domain)
{
    struct policy_pattern d;
    ck_assert_ptr_null(canon(domain, &d));
    const struct policy_rule *r = policy_transform_rule(p, &d);
    return r ? r->name : NULL;
}

START_TEST(only_flagged_rules_cover_a_domain)
{
    struct policy *p = load();
    ck_assert_str_eq(covering(p, "api.example.com"), "api");
    ck_assert_str_eq(covering(p, "x.one.example.com"), "api");
    ck_assert_str_eq(covering(p, "a.svc.example.net"), "deep");
    ck_assert_str_eq(covering(p, "a.b.svc.example.net"), "deep");
    ck_assert_str_eq(covering(p, "*.svc.example.net"), "deep");
    ck_assert_str_eq(covering(p, "*.x.svc.example.net"), "deep");
    /* Not flagged, flagged "deny", or not covering every name the wildcard matches. */
    ck_assert_ptr_null(covering(p, "plain.example.com"));
    ck_assert_ptr_null(covering(p, "a.no.example.org"));
    ck_assert_ptr_null(covering(p, "svc.example.net"));
    ck_assert_ptr_null(covering(p, "*.one.example.com")); /* a.b.one.example.com is outside */
    ck_assert_ptr_null(covering(p, "*.example.net"));
    ck_assert_ptr_null(covering(p, "x.y.one.example.com"));
    ck_assert_ptr_null(covering(p, "evilapi.example.com"));
    const struct policy_rule *r = policy_rule_find(p, "api");
    ck_assert(r->api_transforms);
    ck_assert_int_eq(r->tls, POLICY_TLS_INSPECT); /* headers can only be added inside TLS */
    ck_assert_int_eq(r->scrub, POLICY_SCRUB_STRICT);
    ck_assert(!policy_rule_find(p, "said-no")->api_transforms);
    ck_assert_int_eq(policy_rule_find(p, "said-no")->tls, POLICY_TLS_PASSTHROUGH);
    policy_unref(p);
}
END_TEST

START_TEST(exact_before_the_longest_wildcard)
{
    struct policy_pattern v[4];
    ck_assert_ptr_null(canon("*.example.com", &v[0]));
    ck_assert_ptr_null(canon("*.api.example.com", &v[1]));
    ck_assert_ptr_null(canon("v1.api.example.com", &v[2]));
    ck_assert_ptr_null(canon("other.example.org", &v[3]));
    const struct policy_pattern *d[] = {&v[0], &v[1], &v[2], &v[3]};
#define PICK(h) policy_transform_pick(d, 4, h, strlen(h))
    ck_assert_int_eq(PICK("v1.api.example.com"), 2);
    ck_assert_int_eq(PICK("v2.api.example.com"), 1);
    ck_assert_int_eq(PICK("a.v2.api.example.com"), 1);
    ck_assert_int_eq(PICK("api.example.com"), 0);
    ck_assert_int_eq(PICK("www.example.com"), 0);
    ck_assert_int_eq(PICK("other.example.org"), 3);
    ck_assert_int_eq(PICK("example.com"), -1);
    ck_assert_int_eq(PICK("evilexample.com"), -1);
    ck_assert_int_eq(PICK("a.other.example.org"), -1);
    /* Order of the list does not matter. */
    const struct policy_pattern *r[] = {&v[2], &v[1], &v[0]};
    ck_assert_int_eq(policy_transform_pick(r, 3, "x.api.example.com", 17), 1);
    ck_assert_int_eq(policy_transform_pick(r, 3, "v1.api.example.com", 18), 0);
#undef PICK
}
END_TEST

START_TEST(flag_changes_the_hash_only_when_set)
{
    const char *a = "version: 1\nname: h\nrules:\n  - name: r\n    hosts: [api.example.com]\n";
    const char *b = "version: 1\nname: h\nrules:\n  - name: r\n    hosts: [api.example.com]\n"
                    "    api_transforms: deny\n";
    const char *c = "version: 1\nname: h\nrules:\n  - name: r\n    hosts: [api.example.com]\n"
                    "    api_transforms: allow\n";
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *pa = policy_load_buffer(a, strlen(a), "a.yaml", &d);
    struct policy *pb = policy_load_buffer(b, strlen(b), "b.yaml", &d);
    struct policy *pc = policy_load_buffer(c, strlen(c), "c.yaml", &d);
    ck_assert_ptr_nonnull(pa);
    ck_assert_ptr_nonnull(pb);
    ck_assert_ptr_nonnull(pc);
    ck_assert_str_eq(policy_hash(pa), policy_hash(pb));
    ck_assert_str_ne(policy_hash(pa), policy_hash(pc));
    policy_unref(pa);
    policy_unref(pb);
    policy_unref(pc);
    al_diags_free(&d);
}
END_TEST

static const char *inject_text = "version: 1\n"
                                 "name: injecting\n"
                                 "rules:\n"
                                 "  - name: own\n"
                                 "    hosts: [api.example.com]\n"
                                 "    api_transforms: allow\n"
                                 "    inject:\n"
                                 "      - header: Authorization\n"
                                 "        value: \"Bearer ${secret:team/token}\"\n"
                                 "  - name: any\n"
                                 "    hosts: [\"**.example.com\"]\n"
                                 "    api_transforms: allow\n"
                                 "  - name: closed\n"
                                 "    hosts: [closed.example.org]\n";

static const struct policy_decision *decide(const struct policy *p, const char *host,
                                            struct policy_decision *d)
{
    struct policy_request rq = {.host = host,
                                .host_len = strlen(host),
                                .port = 443,
                                .scheme = POLICY_SCHEME_HTTPS,
                                .method = "GET",
                                .method_len = 3,
                                .path = "/",
                                .path_len = 1};
    ck_assert_int_eq(policy_decide(p, &rq, d), 0);
    ck_assert_int_eq(d->verdict, POLICY_ALLOW);
    return d;
}

static const char *injects(const struct policy_decision *d, const char *header)
{
    for (size_t i = 0; i < d->n_inject; i++)
        if (strcasecmp(d->inject[i].header, header) == 0)
            return d->inject[i].n_secrets ? d->inject[i].secrets[0] : "";
    return NULL;
}

START_TEST(narrowing_adds_the_picked_transform_to_flagged_rules)
{
    struct al_diags dg = AL_DIAGS_INIT;
    struct policy *base = policy_load_buffer(inject_text, strlen(inject_text), "i.yaml", &dg);
    ck_assert_ptr_nonnull(base);
    al_diags_free(&dg);
    json_error_t je;
    json_t *n = json_loads("{\"allow_out\": [\"api.example.com\"],"
                           " \"transforms\": ["
                           "  {\"domain\": \"*.example.com\", \"headers\": ["
                           "    {\"name\": \"X-Wild\", \"secret\": \"sandboxes/s1/t0\"}]},"
                           "  {\"domain\": \"API.example.com\", \"headers\": ["
                           "    {\"name\": \"authorization\", \"secret\": \"sandboxes/s1/t1\"},"
                           "    {\"name\": \"X-Key\", \"secret\": \"sandboxes/s1/t2\"}]}]}",
                           0, &je);
    ck_assert_ptr_nonnull(n);
    struct al_error err = {0};
    struct policy *p = policy_narrow_json(base, n, &err);
    ck_assert_msg(p != NULL, "%s", al_error_str(&err));
    ck_assert_str_ne(policy_hash(p), policy_hash(base));
    struct policy_decision d;
    /* Exact domain: its headers, after the rule's own entry, which the API cannot override. */
    decide(p, "api.example.com", &d);
    ck_assert_str_eq(d.rule->name, "own");
    ck_assert_uint_eq(d.n_inject, 2);
    ck_assert_str_eq(injects(&d, "Authorization"), "team/token");
    ck_assert_str_eq(injects(&d, "X-Key"), "sandboxes/s1/t2");
    ck_assert_ptr_null(injects(&d, "X-Wild")); /* rule sets are not merged */
    ck_assert_str_eq(d.inject[1].value, "${secret:sandboxes/s1/t2}");
    /* The narrowing's allowOut lets only api.example.com through; without it, the wildcard. */
    json_object_del(n, "allow_out");
    policy_unref(p);
    p = policy_narrow_json(base, n, &err);
    ck_assert_ptr_nonnull(p);
    decide(p, "a.b.example.com", &d);
    ck_assert_str_eq(d.rule->name, "any");
    ck_assert_uint_eq(d.n_inject, 1);
    ck_assert_str_eq(injects(&d, "X-Wild"), "sandboxes/s1/t0");
    /* A connection-level decision carries no headers; the base policy none at all. */
    struct policy_request conn = {
        .host = "a.example.com", .host_len = 13, .port = 443, .scheme = POLICY_SCHEME_HTTPS};
    ck_assert_int_eq(policy_decide(p, &conn, &d), 0);
    ck_assert_uint_eq(d.n_inject, 0);
    decide(base, "a.example.com", &d);
    ck_assert_uint_eq(d.n_inject, 0);
    policy_unref(p);
    /* A domain no flagged rule covers is refused, naming it. */
    json_t *bad = json_loads("{\"transforms\": [{\"domain\": \"closed.example.org\", "
                             "\"headers\": [{\"name\": \"X-A\", \"secret\": \"s/a\"}]}]}",
                             0, &je);
    ck_assert_ptr_null(policy_narrow_json(base, bad, &err));
    ck_assert_ptr_nonnull(strstr(al_error_str(&err), "'closed.example.org'"));
    ck_assert_ptr_nonnull(strstr(al_error_str(&err), "api_transforms: allow"));
    json_decref(bad);
    /* Headers that frame the request, duplicates, malformed shapes. */
    const char *refused[] = {
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"Host\", \"secret\": \"s/a\"}]}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"Proxy-Authorization\", \"secret\": \"s/a\"}]}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"X-A\", \"secret\": \"s/a\"}, {\"name\": \"x-a\", \"secret\": \"s/b\"}]}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"X-A\", \"secret\": \"s/a\"}]}, {\"domain\": \"A.example.com.\", \"headers\": "
        "[{\"name\": \"X-B\", \"secret\": \"s/b\"}]}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": []}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"X-A\", \"secret\": \"../a\"}]}]}",
        "{\"transforms\": [{\"domain\": \"a.example.com\", \"headers\": [{\"name\": "
        "\"X-A\", \"value\": \"v\"}]}]}",
        "{\"transforms\": {\"a.example.com\": []}}",
        NULL};
    for (const char **r = refused; *r; r++) {
        json_t *j = json_loads(*r, 0, &je);
        ck_assert_msg(j != NULL, "%s", *r);
        memset(&err, 0, sizeof err);
        struct policy *q = policy_narrow_json(base, j, &err);
        ck_assert_msg(q == NULL, "accepted %s", *r);
        ck_assert(err.code != 0);
        json_decref(j);
    }
    json_decref(n);
    policy_unref(base);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("policy_transform");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, domains_take_e2b_spelling);
    tcase_add_test(tc, only_flagged_rules_cover_a_domain);
    tcase_add_test(tc, exact_before_the_longest_wildcard);
    tcase_add_test(tc, flag_changes_the_hash_only_when_set);
    tcase_add_test(tc, narrowing_adds_the_picked_transform_to_flagged_rules);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
