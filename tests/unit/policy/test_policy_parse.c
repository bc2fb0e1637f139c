/* Unit tests: policy schema errors and warnings with their exact positions (the fixtures
 * folder: each NAME.yaml has NAME.expect with every diagnostic it must produce, in order),
 * defaults, what a loaded policy exposes, and hash stability. */
#include "al_test.h"
#include "policy/policy.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    fclose(m);
    return buf;
}

static struct policy *load(const char *text, struct al_diags *d)
{
    return policy_load_buffer(text, strlen(text), "p.yaml", d);
}

START_TEST(fixtures_produce_exactly_the_expected_diagnostics)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/unit/policy/fixtures", al_test_srcdir());
    DIR *dp = opendir(dir);
    ck_assert_ptr_nonnull(dp);
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml") != 0)
            continue;
        char path[4200], expect_path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expect_path, sizeof expect_path, "%s/%.*s.expect", dir, (int)(l - 5), e->d_name);
        char *expect = slurp(expect_path);
        ck_assert_msg(expect != NULL, "%s has no .expect file", e->d_name);
        struct al_diags d = AL_DIAGS_INIT;
        struct policy *p = policy_load_file(path, &d);
        al_diags_sort(&d);
        char *got = NULL;
        size_t gl = 0;
        FILE *m = open_memstream(&got, &gl);
        for (size_t i = 0; i < d.n; i++) {
            struct al_diag g = d.v[i];
            g.file = NULL; /* .expect files hold line:col: severity: message */
            char line[2048];
            al_diag_format(&g, line, sizeof line);
            fprintf(m, "%s\n", line);
        }
        fclose(m);
        ck_assert_msg(strcmp(got, expect) == 0, "%s:\n--- expected\n%s--- got\n%s", e->d_name,
                      expect, got);
        /* Valid exactly when no error is expected. */
        bool has_error = strstr(expect, ": error: ") != NULL;
        ck_assert_msg((p == NULL) == has_error, "%s: loaded=%d, errors expected=%d", e->d_name,
                      p != NULL, has_error);
        ck_assert_uint_eq(d.errors > 0, has_error);
        policy_unref(p);
        al_diags_free(&d);
        free(got);
        free(expect);
        checked++;
    }
    closedir(dp);
    ck_assert_int_ge(checked, 25);
}
END_TEST

static const char *github = "version: 1\n"
                            "name: github-agent\n"
                            "description: the example of issue 2\n"
                            "rules:\n"
                            "  - name: github-api\n"
                            "    hosts: [api.github.com]\n"
                            "    ports: [443]\n"
                            "    tls: inspect\n"
                            "    methods: [GET, POST]\n"
                            "    paths: [\"/repos/**\"]\n"
                            "    inject:\n"
                            "      - header: Authorization\n"
                            "        value: \"Bearer ${secret:github/token}\"\n"
                            "  - name: pypi\n"
                            "    hosts: [pypi.org, files.pythonhosted.org]\n"
                            "  - name: no-gists\n"
                            "    hosts: [gist.github.com]\n"
                            "    action: deny\n"
                            "  - name: build-cache\n"
                            "    cidrs: [10.20.0.5/32]\n"
                            "    ports: [8080]\n"
                            "    scheme: http\n"
                            "dns:\n"
                            "  resolve: allowed\n"
                            "limits:\n"
                            "  max_connections: 256\n"
                            "  max_request_body: 10MiB\n";

START_TEST(loaded_policy_exposes_rules_and_defaults)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = load(github, &d);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(policy_name(p), "github-agent");
    ck_assert_str_eq(policy_description(p), "the example of issue 2");
    ck_assert_str_eq(policy_file(p), "p.yaml");
    ck_assert_int_eq(policy_mode(p), POLICY_MODE_ENFORCE);
    ck_assert_uint_eq(strlen(policy_hash(p)), POLICY_HASH_HEX_LEN);
    ck_assert_uint_eq(policy_rule_count(p), 4);
    const struct policy_rule *r = policy_rule_at(p, 0);
    ck_assert_str_eq(r->name, "github-api");
    ck_assert_uint_eq(r->line, 5);
    ck_assert_int_eq(r->tls, POLICY_TLS_INSPECT);
    ck_assert_int_eq(r->scrub, POLICY_SCRUB_STRICT);
    ck_assert_uint_eq(r->n_methods, 2);
    ck_assert_str_eq(r->methods[0], "GET");
    ck_assert_uint_eq(r->n_inject, 1);
    ck_assert_str_eq(r->inject[0].header, "Authorization");
    ck_assert_str_eq(r->inject[0].value, "Bearer ${secret:github/token}");
    ck_assert_uint_eq(r->inject[0].n_parts, 2);
    ck_assert(!r->inject[0].parts[0].secret);
    ck_assert_uint_eq(r->inject[0].parts[0].len, 7);
    ck_assert(r->inject[0].parts[1].secret);
    ck_assert_int_eq(strncmp(r->inject[0].parts[1].text, "github/token", r->inject[0].parts[1].len),
                     0);
    ck_assert_uint_eq(r->inject[0].n_secrets, 1);
    ck_assert_str_eq(r->inject[0].secrets[0], "github/token");
    ck_assert_ptr_null(r->inject[0].placeholder_env);
    /* Defaults: https, port 443, passthrough without L7 conditions, allow. */
    r = policy_rule_find(p, "pypi");
    ck_assert_int_eq(r->scheme, POLICY_SCHEME_HTTPS);
    ck_assert_int_eq(r->tls, POLICY_TLS_PASSTHROUGH);
    ck_assert_uint_eq(r->n_ports, 1);
    ck_assert_uint_eq(r->ports[0].lo, 443);
    ck_assert_int_eq(r->action, POLICY_ACTION_ALLOW);
    ck_assert_int_eq(r->scrub, POLICY_SCRUB_NONE);
    ck_assert_uint_eq(r->n_hosts, 2);
    r = policy_rule_find(p, "build-cache");
    ck_assert_int_eq(r->tls, POLICY_TLS_NONE);
    ck_assert_str_eq(r->cidrs[0], "10.20.0.5/32");
    ck_assert_ptr_null(policy_rule_find(p, "nope"));
    ck_assert_uint_eq(policy_limits(p)->max_connections, 256);
    ck_assert_uint_eq(policy_limits(p)->max_request_body, 10u << 20);
    ck_assert_uint_eq(policy_limits(p)->max_requests_per_second, 0);
    ck_assert_int_eq(policy_dns(p)->resolve, POLICY_DNS_ALLOWED);
    ck_assert_uint_eq(policy_dns(p)->min_ttl_ms, 5000);
    ck_assert_uint_eq(policy_dns(p)->max_ttl_ms, 300000);
    size_t n;
    const char *const *names = policy_intercepted_names(p, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(names[0], "api.github.com");
    policy_placeholders(p, &n);
    ck_assert_uint_eq(n, 0);
    /* The one warning: the build cache opens an internal address. */
    ck_assert_uint_eq(d.errors, 0);
    ck_assert_uint_eq(d.warnings, 1);
    ck_assert_str_eq(d.v[0].code, "internal_cidr");
    policy_unref(p);
    al_diags_free(&d);
}
END_TEST

START_TEST(extensions_of_issues_5_6_8)
{
    const char *text = "version: 1\n"
                       "name: ext\n"
                       "rules:\n"
                       "  - name: gh\n"
                       "    description: placeholder mode\n"
                       "    hosts: [api.github.com]\n"
                       "    mode: report\n"
                       "    websocket: true\n"
                       "    scrub: best_effort\n"
                       "    inject:\n"
                       "      - header: Authorization\n"
                       "        placeholder: GITHUB_TOKEN\n"
                       "        secret: github/token\n"
                       "  - name: legacy\n"
                       "    hosts: [legacy.example.com]\n"
                       "    scheme: http\n"
                       "    ports: [8000-8100, 80]\n"
                       "    allow_plaintext_inject: true\n"
                       "    inject:\n"
                       "      - header: X-Token\n"
                       "        value: \"${secret:legacy/a}:${secret:legacy/b}\"\n"
                       "  - name: db\n"
                       "    cidrs: [\"2001:db8::/64\", 203.0.113.7]\n"
                       "    scheme: tcp\n"
                       "    ports: [5432]\n"
                       "dns:\n"
                       "  resolve: none\n"
                       "  min_ttl: 1s\n"
                       "  max_ttl: 1h\n"
                       "limits:\n"
                       "  max_requests_per_second: 50\n";
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = load(text, &d);
    if (!p)
        al_diags_print(&d, stderr, false);
    ck_assert_ptr_nonnull(p);
    const struct policy_rule *r = policy_rule_at(p, 0);
    ck_assert(r->report);
    ck_assert(r->websocket);
    ck_assert_int_eq(r->scrub, POLICY_SCRUB_BEST_EFFORT);
    ck_assert_str_eq(r->description, "placeholder mode");
    ck_assert_str_eq(r->inject[0].placeholder_env, "GITHUB_TOKEN");
    ck_assert_ptr_null(r->inject[0].value);
    ck_assert_str_eq(r->inject[0].secrets[0], "github/token");
    size_t n;
    const struct policy_placeholder *ph = policy_placeholders(p, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(ph[0].env, "GITHUB_TOKEN");
    ck_assert_str_eq(ph[0].secret, "github/token");
    r = policy_rule_at(p, 1);
    ck_assert(!r->report);
    ck_assert(r->allow_plaintext_inject);
    ck_assert_uint_eq(r->n_ports, 2);
    ck_assert_uint_eq(r->ports[0].lo, 80);
    ck_assert_uint_eq(r->ports[1].lo, 8000);
    ck_assert_uint_eq(r->ports[1].hi, 8100);
    ck_assert_uint_eq(r->inject[0].n_parts, 3);
    ck_assert_uint_eq(r->inject[0].n_secrets, 2);
    r = policy_rule_at(p, 2);
    ck_assert_uint_eq(r->n_cidrs, 2);
    ck_assert_str_eq(r->cidrs[0], "2001:db8::/64");
    ck_assert_str_eq(r->cidrs[1], "203.0.113.7/32");
    ck_assert_int_eq(policy_dns(p)->resolve, POLICY_DNS_NONE);
    ck_assert_uint_eq(policy_dns(p)->min_ttl_ms, 1000);
    ck_assert_uint_eq(policy_dns(p)->max_ttl_ms, 3600000);
    ck_assert_uint_eq(policy_limits(p)->max_requests_per_second, 50);
    policy_unref(p);
    al_diags_free(&d);
}
END_TEST

START_TEST(empty_and_deny_all)
{
    struct al_diags d = AL_DIAGS_INIT;
    ck_assert_ptr_null(load("", &d));
    ck_assert_str_eq(d.v[0].code, "empty");
    al_diags_free(&d);
    ck_assert_ptr_null(load("[1, 2]", &d));
    ck_assert_ptr_nonnull(strstr(d.v[0].msg, "the policy must be a map"));
    al_diags_free(&d);
    struct policy *p = load("version: 1\nname: deny-all\nrules: []\n", &d);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(policy_rule_count(p), 0);
    ck_assert_uint_eq(d.n, 0);
    policy_unref(p);
    /* NULL diagnostics are allowed. */
    ck_assert_ptr_null(policy_load_buffer("version: 2", 10, NULL, NULL));
    ck_assert_ptr_null(policy_load_file("/nonexistent/policy.yaml", NULL));
    al_diags_free(&d);
}
END_TEST

static const char *hash_of(const char *text)
{
    static char out[8][POLICY_HASH_HEX_LEN + 1];
    static int slot;
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = load(text, &d);
    if (!p)
        al_diags_print(&d, stderr, false);
    ck_assert_ptr_nonnull(p);
    char *o = out[slot++ % 8];
    strcpy(o, policy_hash(p));
    policy_unref(p);
    al_diags_free(&d);
    return o;
}

START_TEST(hash_is_stable_across_formatting)
{
    const char *a = "version: 1\n"
                    "name: h\n"
                    "rules:\n"
                    "  - name: one\n"
                    "    hosts: [api.github.com, pypi.org]\n"
                    "    methods: [GET, POST]\n"
                    "  - name: two\n"
                    "    cidrs: [203.0.113.0/24]\n"
                    "    scheme: tcp\n"
                    "    ports: [22, 8000-8100]\n";
    /* Comments, flow vs block, key order, quoting, name spelling, set order, defaults
     * written out. */
    const char *b = "# the same policy\n"
                    "rules:\n"
                    "- {name: one, hosts: [PyPI.org., API.GitHub.com], methods: [POST, GET], "
                    "ports: [443], scheme: https, tls: inspect}\n"
                    "- ports: [\"8000-8100\", 22]\n"
                    "  scheme: tcp\n"
                    "  cidrs:\n"
                    "    - \"203.0.113.0/24\"\n"
                    "  name: \"two\"\n"
                    "  action: allow\n"
                    "name: h   # name\n"
                    "mode: enforce\n"
                    "version: 1\n"
                    "dns: {resolve: allowed, min_ttl: 5s, max_ttl: 5m}\n";
    ck_assert_str_eq(hash_of(a), hash_of(b));
    /* A changed rule changes the hash; so does the order of rules. */
    const char *c = "version: 1\n"
                    "name: h\n"
                    "rules:\n"
                    "  - name: one\n"
                    "    hosts: [api.github.com, pypi.org]\n"
                    "    methods: [GET, POST]\n"
                    "  - name: two\n"
                    "    cidrs: [203.0.113.0/24]\n"
                    "    scheme: tcp\n"
                    "    ports: [22, 8000-8101]\n";
    ck_assert_str_ne(hash_of(a), hash_of(c));
    const char *e = "version: 1\n"
                    "name: h\n"
                    "rules:\n"
                    "  - name: two\n"
                    "    cidrs: [203.0.113.0/24]\n"
                    "    scheme: tcp\n"
                    "    ports: [22, 8000-8100]\n"
                    "  - name: one\n"
                    "    hosts: [api.github.com, pypi.org]\n"
                    "    methods: [GET, POST]\n";
    ck_assert_str_ne(hash_of(a), hash_of(e));
    const char *f = "version: 1\nname: h\nmode: report\nrules:\n"
                    "  - name: one\n"
                    "    hosts: [api.github.com, pypi.org]\n"
                    "    methods: [GET, POST]\n"
                    "  - name: two\n"
                    "    cidrs: [203.0.113.0/24]\n"
                    "    scheme: tcp\n"
                    "    ports: [22, 8000-8100]\n";
    ck_assert_str_ne(hash_of(a), hash_of(f));
    /* The canonical form is what the hash covers. */
    struct policy *p = load(a, NULL);
    char *json = policy_canonical_json(p);
    ck_assert_ptr_nonnull(strstr(json, "\"hosts\":[\"api.github.com\",\"pypi.org\"]"));
    ck_assert_ptr_nonnull(strstr(json, "\"ports\":[[22,22],[8000,8100]]"));
    free(json);
    policy_unref(p);
}
END_TEST

START_TEST(ref_counting)
{
    struct policy *p = load(github, NULL);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_eq(policy_ref(p), p);
    policy_unref(p);
    ck_assert_str_eq(policy_name(p), "github-agent"); /* still alive: one reference left */
    policy_unref(p);
    policy_unref(NULL);
}
END_TEST

static Suite *parse_suite(void)
{
    Suite *s = suite_create("policy_parse");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, fixtures_produce_exactly_the_expected_diagnostics);
    tcase_add_test(tc, loaded_policy_exposes_rules_and_defaults);
    tcase_add_test(tc, extensions_of_issues_5_6_8);
    tcase_add_test(tc, empty_and_deny_all);
    tcase_add_test(tc, hash_is_stable_across_formatting);
    tcase_add_test(tc, ref_counting);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(parse_suite)
