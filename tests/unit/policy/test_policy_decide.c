/* Unit tests: decisions. Methods, paths, ports, schemes, CIDRs, internal addresses, report
 * mode, first-match order, connection-level TLS choice, DNS, narrowing by E2B fields, and
 * the compiled matcher against a brute-force reference on a large generated policy. The
 * name-level items of EGRESS.md's bypass list (5, 7, 8, 9) are exercised end to end here. */
#include "al_test.h"
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static struct policy *P(const char *text)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer(text, strlen(text), "p.yaml", &d);
    if (!p)
        al_diags_print(&d, stderr, false);
    ck_assert_ptr_nonnull(p);
    al_diags_free(&d);
    return p;
}

struct q {
    const char *host;
    uint16_t port;
    enum policy_scheme scheme;
    const char *method;
    const char *path;
    const char *addr;
};

/* body: the request carries one. */
static struct policy_decision Db(const struct policy *p, struct q q, bool body)
{
    struct policy_request r = {.host = q.host,
                               .host_len = q.host ? strlen(q.host) : 0,
                               .port = q.port,
                               .scheme = q.scheme,
                               .method = q.method,
                               .method_len = q.method ? strlen(q.method) : 0,
                               .path = q.path,
                               .path_len = q.path ? strlen(q.path) : 0,
                               .body = body};
    struct policy_addr a;
    if (q.addr) {
        struct policy_host h;
        ck_assert_int_eq(policy_host_canon(q.addr, strlen(q.addr), &h, NULL), 0);
        a = h.addr;
        r.addr = &a;
    }
    struct policy_decision d;
    ck_assert_int_eq(policy_decide(p, &r, &d), 0);
    char why[1024];
    policy_explain(p, &r, &d, why, sizeof why);
    ck_assert_uint_gt(strlen(why), 10);
    return d;
}

static struct policy_decision D(const struct policy *p, struct q q) {
    return Db(p, q, false);
}

#define HTTPS(h, m, path) ((struct q){h, 443, POLICY_SCHEME_HTTPS, m, path, NULL})
#define CONN(h, port)     ((struct q){h, port, POLICY_SCHEME_HTTPS, NULL, NULL, NULL})

static void
expect(struct policy_decision d, enum policy_verdict v, enum policy_reason r, const char *rule)
{
    ck_assert_msg(d.verdict == v, "verdict %d, want %d (reason %s)", d.verdict, v,
                  policy_reason_code(d.reason));
    ck_assert_msg(d.reason == r, "reason %s, want %s", policy_reason_code(d.reason),
                  policy_reason_code(r));
    if (rule) {
        ck_assert_ptr_nonnull(d.rule);
        ck_assert_str_eq(d.rule->name, rule);
    } else {
        ck_assert_ptr_null(d.rule);
    }
}

static const char *github = "version: 1\n"
                            "name: github-agent\n"
                            "rules:\n"
                            "  - name: github-api\n"
                            "    hosts: [api.github.com]\n"
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
                            "    scheme: http\n";

START_TEST(github_example)
{
    struct policy *p = P(github);
    struct policy_decision d = D(p, HTTPS("api.github.com", "GET", "/repos/o/r/issues?x=1"));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github-api");
    ck_assert_int_eq(d.tls, POLICY_TLS_INSPECT);
    ck_assert_uint_eq(d.n_inject, 1);
    ck_assert_str_eq(d.inject[0].header, "Authorization");
    ck_assert(!d.would_deny);
    expect(D(p, HTTPS("api.github.com", "POST", "/repos")), POLICY_ALLOW, POLICY_R_RULE_ALLOWS,
           "github-api");
    d = D(p, HTTPS("api.github.com", "DELETE", "/repos/o/r"));
    expect(d, POLICY_DENY, POLICY_R_METHOD, "github-api");
    ck_assert_uint_eq(d.n_inject, 0);
    expect(D(p, HTTPS("api.github.com", "get", "/repos/o/r")), POLICY_DENY, POLICY_R_METHOD,
           "github-api");
    expect(D(p, HTTPS("api.github.com", "GET", "/user")), POLICY_DENY, POLICY_R_PATH, "github-api");
    expect(D(p, HTTPS("api.github.com", "GET", "/repos/../user")), POLICY_DENY,
           POLICY_R_INVALID_PATH, NULL);
    expect(D(p, HTTPS("api.github.com", "GET", "/repos/%2e%2e/user")), POLICY_DENY,
           POLICY_R_INVALID_PATH, NULL);
    expect(D(p, ((struct q){"api.github.com", 8443, POLICY_SCHEME_HTTPS, "GET", "/repos", NULL})),
           POLICY_DENY, POLICY_R_PORT, "github-api");
    expect(D(p, ((struct q){"api.github.com", 443, POLICY_SCHEME_HTTP, "GET", "/repos", NULL})),
           POLICY_DENY, POLICY_R_SCHEME, "github-api");
    /* The connection to api.github.com is inspected (methods, paths and inject need it). */
    d = D(p, CONN("api.github.com", 443));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github-api");
    ck_assert_int_eq(d.tls, POLICY_TLS_INSPECT);
    ck_assert_uint_eq(d.n_inject, 0);
    d = D(p, CONN("files.pythonhosted.org", 443));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    ck_assert_int_eq(d.tls, POLICY_TLS_PASSTHROUGH);
    expect(D(p, CONN("gist.github.com", 443)), POLICY_DENY, POLICY_R_RULE_DENIES, "no-gists");
    expect(D(p, CONN("github.com", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("evil.example", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_unref(p);
}
END_TEST

START_TEST(bypass_normalisation)
{
    struct policy *p = P(github);
    /* Upper case and one trailing dot are the same name. */
    expect(D(p, CONN("PYPI.ORG", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    expect(D(p, CONN("pypi.org.", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    struct policy_decision d = D(p, CONN("PyPi.Org.", 443));
    ck_assert_str_eq(d.host.text, "pypi.org");
    /* Two trailing dots, full-width dots, spaces, NULs: invalid, never a near-match. */
    expect(D(p, CONN("pypi.org..", 443)), POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    expect(D(p, CONN("pypi\xef\xbc\x8eorg", 443)), POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    expect(D(p, CONN("pypi\xe3\x80\x82org", 443)), POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    struct policy_request r = {.host = "pypi.org\0.evil", .host_len = 14, .port = 443};
    policy_decide(p, &r, &d);
    expect(d, POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    /* Full-width letters map to the ASCII name (UTS-46), so they match what they mean. */
    expect(D(p, CONN("\xef\xbd\x90ypi.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    /* Homographs never match the Latin name. */
    expect(D(p, CONN("\xd1\x80ypi.org", 443)), POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    policy_unref(p);
    /* Unicode and punycode forms of an IDN in a policy match each other. */
    p = P("version: 1\nname: idn\nrules:\n  - name: b\n    hosts: [bücher.example]\n");
    expect(D(p, CONN("xn--bcher-kva.example", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "b");
    expect(D(p, CONN("BÜCHER.example", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "b");
    expect(D(p, CONN("bucher.example", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_unref(p);
}
END_TEST

START_TEST(bypass_wildcard_overmatch)
{
    struct policy *p = P("version: 1\nname: w\nrules:\n"
                         "  - name: one\n    hosts: [\"*.example.com\"]\n"
                         "  - name: any\n    hosts: [\"**.example.org\"]\n"
                         "  - name: glob\n    hosts: [\"api-*.example.net\"]\n"
                         "  - name: exact\n    hosts: [example.io]\n");
    expect(D(p, CONN("a.example.com", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "one");
    expect(D(p, CONN("example.com", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("a.b.example.com", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("evilexample.com", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("a.example.com.evil.net", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("example.com.evil.net", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("a.b.c.example.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "any");
    expect(D(p, CONN("x.example.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "any");
    expect(D(p, CONN("example.org", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("x.evilexample.org", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("api-eu.example.net", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "glob");
    expect(D(p, CONN("api.example.net", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("x.api-eu.example.net", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("www.example.io", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, CONN("example.io.evil.net", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_unref(p);
}
END_TEST

START_TEST(bypass_ip_literals_and_internal)
{
    struct policy *p = P(github);
    /* Every spelling of loopback, and the metadata service, as a host: internal. */
    const char *lits[] = {"127.0.0.1",
                          "2130706433",
                          "0177.0.0.1",
                          "0x7f.1",
                          "127.1",
                          "[::1]",
                          "[::ffff:127.0.0.1]",
                          "[64:ff9b::7f00:1]",
                          "169.254.169.254",
                          "0xa9fea9fe",
                          "[fe80::1%25eth0]",
                          "[2002:7f00:1::1]",
                          "0",
                          "10.20.0.6",
                          "[fd00:ec2::254]",
                          NULL};
    for (size_t i = 0; lits[i]; i++) {
        struct policy_decision d =
            D(p, ((struct q){lits[i], 8080, POLICY_SCHEME_HTTP, "GET", "/", NULL}));
        ck_assert_msg(d.verdict == POLICY_DENY && d.reason == POLICY_R_INTERNAL, "%s: %s", lits[i],
                      policy_reason_code(d.reason));
        ck_assert(d.addr_info.internal);
    }
    /* A public IP literal is simply not in the policy. */
    expect(D(p, ((struct q){"8.8.8.8", 443, POLICY_SCHEME_TCP, NULL, NULL, NULL})), POLICY_DENY,
           POLICY_R_NO_RULE, NULL);
    /* The CIDR rule opens exactly its address, in any spelling, on its port and scheme. */
    expect(D(p, ((struct q){"10.20.0.5", 8080, POLICY_SCHEME_HTTP, "GET", "/x", NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "build-cache");
    expect(D(p, ((struct q){"0xa.20.0.5", 8080, POLICY_SCHEME_HTTP, "GET", "/x", NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "build-cache");
    expect(D(p, ((struct q){"[::ffff:10.20.0.5]", 8080, POLICY_SCHEME_HTTP, "GET", "/", NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "build-cache");
    expect(D(p, ((struct q){NULL, 8080, POLICY_SCHEME_HTTP, "GET", "/x", "10.20.0.5"})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "build-cache");
    expect(D(p, ((struct q){"10.20.0.5", 8081, POLICY_SCHEME_HTTP, "GET", "/x", NULL})),
           POLICY_DENY, POLICY_R_INTERNAL, NULL);
    expect(D(p, ((struct q){"10.20.0.5", 8080, POLICY_SCHEME_HTTPS, NULL, NULL, NULL})),
           POLICY_DENY, POLICY_R_INTERNAL, NULL);
    /* An allowed name whose address is internal is refused (rebinding, /etc/hosts tricks),
     * unless a CIDR rule opens that address. */
    struct policy_decision d =
        D(p, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "127.0.0.1"}));
    expect(d, POLICY_DENY, POLICY_R_INTERNAL, "pypi");
    ck_assert_int_eq(d.addr_info.cls, POLICY_ADDR_LOOPBACK);
    expect(D(p, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "151.101.0.223"})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    expect(D(p, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "169.254.169.254"})),
           POLICY_DENY, POLICY_R_INTERNAL, "pypi");
    /* An IP-literal host must be the destination itself. */
    expect(D(p, ((struct q){"10.20.0.5", 8080, POLICY_SCHEME_HTTP, "GET", "/", "10.20.0.6"})),
           POLICY_DENY, POLICY_R_ADDR_MISMATCH, NULL);
    expect(D(p, ((struct q){"151.101.0.223", 80, POLICY_SCHEME_HTTP, "GET", "/", "151.101.0.224"})),
           POLICY_DENY, POLICY_R_ADDR_MISMATCH, NULL);
    /* ... and an internal one, in any spelling, is named as internal whatever the
     * destination (unless a CIDR rule opens it: above, only a mismatch). */
    static const char *const internal[] = {"0x7f.1",          "2130706433", "[::ffff:127.0.0.1]",
                                           "017700000001",    "127.1",      "[::1]",
                                           "0xa9.254.169.254"};
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++) {
        d = D(p, ((struct q){internal[i], 80, POLICY_SCHEME_HTTP, "GET", "/", "151.101.0.223"}));
        expect(d, POLICY_DENY, POLICY_R_INTERNAL, NULL);
    }
    policy_unref(p);
    /* A name rule plus a CIDR rule for its internal address: allowed. */
    p = P("version: 1\nname: i\nrules:\n"
          "  - name: svc\n    hosts: [svc.corp.example]\n    scheme: http\n    ports: [80]\n"
          "  - name: svc-net\n    cidrs: [10.9.0.0/16]\n    scheme: http\n    ports: [80]\n");
    expect(D(p, ((struct q){"svc.corp.example", 80, POLICY_SCHEME_HTTP, "GET", "/", "10.9.1.1"})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "svc");
    expect(D(p, ((struct q){"svc.corp.example", 80, POLICY_SCHEME_HTTP, "GET", "/", "10.8.1.1"})),
           POLICY_DENY, POLICY_R_INTERNAL, "svc");
    policy_unref(p);
}
END_TEST

START_TEST(bypass_ports_and_malformed_requests)
{
    struct policy *p = P("version: 1\nname: ports\nrules:\n"
                         "  - name: range\n    hosts: [a.example.com]\n    ports: [8000-8100]\n"
                         "  - name: web\n    hosts: [b.example.com]\n    scheme: http\n");
    expect(D(p, CONN("a.example.com", 8000)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "range");
    expect(D(p, CONN("a.example.com", 8100)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "range");
    expect(D(p, CONN("a.example.com", 8101)), POLICY_DENY, POLICY_R_PORT, "range");
    expect(D(p, CONN("a.example.com", 443)), POLICY_DENY, POLICY_R_PORT, "range");
    expect(D(p, ((struct q){"b.example.com", 80, POLICY_SCHEME_HTTP, "GET", "/", NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "web");
    expect(D(p, ((struct q){"b.example.com", 8080, POLICY_SCHEME_HTTP, "GET", "/", NULL})),
           POLICY_DENY, POLICY_R_PORT, "web");
    /* Malformed: port 0, method without path, a method that is not a token, a method on
     * raw TCP, no host and no address. */
    expect(D(p, CONN("a.example.com", 0)), POLICY_DENY, POLICY_R_INVALID_REQUEST, NULL);
    struct policy_request r = {.host = "b.example.com",
                               .host_len = 13,
                               .port = 80,
                               .scheme = POLICY_SCHEME_HTTP,
                               .method = "GET",
                               .method_len = 3};
    struct policy_decision d;
    policy_decide(p, &r, &d);
    expect(d, POLICY_DENY, POLICY_R_INVALID_REQUEST, NULL);
    expect(D(p, ((struct q){"b.example.com", 80, POLICY_SCHEME_HTTP, "GE T", "/", NULL})),
           POLICY_DENY, POLICY_R_INVALID_REQUEST, NULL);
    expect(D(p, ((struct q){"b.example.com", 80, POLICY_SCHEME_HTTP, "", "/", NULL})), POLICY_DENY,
           POLICY_R_INVALID_REQUEST, NULL);
    expect(D(p, ((struct q){"b.example.com", 80, POLICY_SCHEME_TCP, "GET", "/", NULL})),
           POLICY_DENY, POLICY_R_INVALID_REQUEST, NULL);
    expect(D(p, ((struct q){NULL, 80, POLICY_SCHEME_HTTP, NULL, NULL, NULL})), POLICY_DENY,
           POLICY_R_INVALID_REQUEST, NULL);
    ck_assert_int_eq(policy_decide(NULL, &r, &d), 0);
    ck_assert_int_eq(d.verdict, POLICY_DENY);
    policy_unref(p);
}
END_TEST

START_TEST(first_match_order)
{
    struct policy *p = P("version: 1\nname: order\nrules:\n"
                         "  - name: no-gists\n    hosts: [gist.github.com]\n    action: deny\n"
                         "  - name: github\n    hosts: [\"**.github.com\", github.com]\n");
    expect(D(p, CONN("gist.github.com", 443)), POLICY_DENY, POLICY_R_RULE_DENIES, "no-gists");
    expect(D(p, CONN("api.github.com", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github");
    expect(D(p, CONN("github.com", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github");
    policy_unref(p);
    p = P("version: 1\nname: order2\nrules:\n"
          "  - name: github\n    hosts: [\"**.github.com\"]\n"
          "  - name: no-gists\n    hosts: [gist.github.com]\n    action: deny\n");
    expect(D(p, CONN("gist.github.com", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github");
    policy_unref(p);
}
END_TEST

START_TEST(conditional_rules_and_connection_tls)
{
    /* A conditional rule first (methods/paths + inject), then a plain allow of the host. */
    struct policy *p = P("version: 1\nname: cond\nrules:\n"
                         "  - name: read\n    hosts: [api.example.com]\n"
                         "    methods: [GET]\n    paths: [\"/a/**\"]\n"
                         "    inject:\n      - header: X-Key\n        value: \"${secret:k}\"\n"
                         "  - name: rest\n    hosts: [api.example.com]\n");
    struct policy_decision d = D(p, CONN("api.example.com", 443));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "rest");
    ck_assert_int_eq(d.tls, POLICY_TLS_INSPECT); /* "read" needs to see requests */
    d = D(p, HTTPS("api.example.com", "GET", "/a/b"));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "read");
    ck_assert_uint_eq(d.n_inject, 1);
    d = D(p, HTTPS("api.example.com", "POST", "/a/b"));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "rest");
    ck_assert_uint_eq(d.n_inject, 0);
    policy_unref(p);
    /* A conditional deny before a passthrough allow forces inspection. */
    p = P("version: 1\nname: cond2\nrules:\n"
          "  - name: no-delete\n    hosts: [api.example.com]\n    methods: [DELETE]\n"
          "    action: deny\n"
          "  - name: api\n    hosts: [api.example.com]\n");
    d = D(p, CONN("api.example.com", 443));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "api");
    ck_assert_int_eq(d.tls, POLICY_TLS_INSPECT);
    expect(D(p, HTTPS("api.example.com", "DELETE", "/x")), POLICY_DENY, POLICY_R_RULE_DENIES,
           "no-delete");
    expect(D(p, HTTPS("api.example.com", "GET", "/x")), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "api");
    policy_unref(p);
    /* A conditional allow before an unconditional deny: the connection is inspected and
     * only matching requests pass. */
    p = P("version: 1\nname: cond3\nrules:\n"
          "  - name: get-only\n    hosts: [x.example.com]\n    methods: [GET]\n"
          "  - name: block\n    hosts: [x.example.com]\n    action: deny\n");
    d = D(p, CONN("x.example.com", 443));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "get-only");
    ck_assert_int_eq(d.tls, POLICY_TLS_INSPECT);
    expect(D(p, HTTPS("x.example.com", "PUT", "/")), POLICY_DENY, POLICY_R_RULE_DENIES, "block");
    policy_unref(p);
    /* Extension methods and websocket flags. */
    p = P("version: 1\nname: ext\nrules:\n"
          "  - name: dav\n    hosts: [dav.example.com]\n    methods: [PROPFIND, GET]\n"
          "    websocket: true\n");
    d = D(p, HTTPS("dav.example.com", "PROPFIND", "/"));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "dav");
    ck_assert(d.websocket);
    expect(D(p, HTTPS("dav.example.com", "PROPPATCH", "/")), POLICY_DENY, POLICY_R_METHOD, "dav");
    policy_unref(p);
}
END_TEST

START_TEST(cidr_rules_and_tcp)
{
    struct policy *p = P("version: 1\nname: c\nrules:\n"
                         "  - name: db\n    cidrs: [203.0.113.0/28, \"2001:db8::/64\"]\n"
                         "    scheme: tcp\n    ports: [5432]\n"
                         "  - name: no-db-host\n    cidrs: [203.0.113.9/32]\n    action: deny\n"
                         "    scheme: tcp\n    ports: [1-65535]\n");
    expect(D(p, ((struct q){NULL, 5432, POLICY_SCHEME_TCP, NULL, NULL, "203.0.113.5"})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "db");
    /* A tcp rule covers whatever runs on the port (TLS, HTTP, raw). */
    struct policy_decision d =
        D(p, ((struct q){"203.0.113.5", 5432, POLICY_SCHEME_HTTPS, NULL, NULL, NULL}));
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "db");
    ck_assert_int_eq(d.tls, POLICY_TLS_PASSTHROUGH);
    expect(D(p, ((struct q){"[2001:db8::7]", 5432, POLICY_SCHEME_TCP, NULL, NULL, NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "db");
    expect(D(p, ((struct q){"203.0.113.9", 5432, POLICY_SCHEME_TCP, NULL, NULL, NULL})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "db");
    expect(D(p, ((struct q){"203.0.113.9", 22, POLICY_SCHEME_TCP, NULL, NULL, NULL})), POLICY_DENY,
           POLICY_R_RULE_DENIES, "no-db-host");
    expect(D(p, ((struct q){"203.0.113.17", 5432, POLICY_SCHEME_TCP, NULL, NULL, NULL})),
           POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, ((struct q){"203.0.113.5", 5433, POLICY_SCHEME_TCP, NULL, NULL, NULL})),
           POLICY_DENY, POLICY_R_PORT, "db");
    policy_unref(p);
}
END_TEST

START_TEST(report_mode)
{
    struct policy *p = P("version: 1\nname: r\nmode: report\nrules:\n"
                         "  - name: api\n    hosts: [api.example.com]\n    methods: [GET]\n"
                         "    inject:\n      - header: X-Key\n        value: \"${secret:k}\"\n");
    struct policy_decision d = D(p, CONN("unknown.example", 443));
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert(d.would_deny);
    ck_assert_int_eq(d.reason, POLICY_R_NO_RULE);
    ck_assert_int_eq(d.tls, POLICY_TLS_PASSTHROUGH);
    d = D(p, HTTPS("api.example.com", "POST", "/"));
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert(d.would_deny);
    ck_assert_int_eq(d.reason, POLICY_R_METHOD);
    ck_assert_uint_eq(d.n_inject, 0); /* never inject on a request that is not really allowed */
    d = D(p, HTTPS("api.example.com", "GET", "/"));
    ck_assert(!d.would_deny);
    ck_assert_uint_eq(d.n_inject, 1);
    /* Internal addresses and invalid names are refused in report mode too. */
    d = D(p, ((struct q){"127.0.0.1", 80, POLICY_SCHEME_TCP, NULL, NULL, NULL}));
    expect(d, POLICY_DENY, POLICY_R_INTERNAL, NULL);
    ck_assert(!d.would_deny);
    expect(D(p, CONN("bad..name", 443)), POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    policy_unref(p);
    /* Per-rule report mode: only that rule's denials are reported instead of enforced. */
    p = P("version: 1\nname: r2\nrules:\n"
          "  - name: trial-block\n    hosts: [x.example.com]\n    action: deny\n"
          "    mode: report\n"
          "  - name: hard-block\n    hosts: [y.example.com]\n    action: deny\n");
    d = D(p, CONN("x.example.com", 443));
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert(d.would_deny);
    ck_assert_int_eq(d.reason, POLICY_R_RULE_DENIES);
    ck_assert_str_eq(d.rule->name, "trial-block");
    d = D(p, CONN("y.example.com", 443));
    expect(d, POLICY_DENY, POLICY_R_RULE_DENIES, "hard-block");
    expect(D(p, CONN("z.example.com", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_unref(p);
}
END_TEST

START_TEST(dns_queries)
{
    struct policy *p = P("version: 1\nname: dns\nrules:\n"
                         "  - name: no-gists\n    hosts: [gist.github.com]\n    action: deny\n"
                         "  - name: github\n    hosts: [\"**.github.com\"]\n"
                         "  - name: no-raw-443\n    hosts: [raw.example.com]\n    action: deny\n"
                         "  - name: raw\n    hosts: [raw.example.com]\n    ports: [443, 8443]\n"
                         "  - name: cond-deny\n    hosts: [c.example.com]\n    action: deny\n"
                         "    methods: [DELETE]\n"
                         "  - name: c\n    hosts: [c.example.com]\n");
    struct policy_decision d;
    policy_dns_decide(p, "api.github.com", 14, &d);
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "github");
    policy_dns_decide(p, "API.GITHUB.COM.", 15, &d);
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert_str_eq(d.host.text, "api.github.com");
    /* Denied on every port an allow rule names: not resolvable. */
    policy_dns_decide(p, "gist.github.com", 15, &d);
    expect(d, POLICY_DENY, POLICY_R_RULE_DENIES, "no-gists");
    /* Denied on 443 but allowed on 8443: resolvable. */
    policy_dns_decide(p, "raw.example.com", 15, &d);
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "raw");
    policy_dns_decide(p, "c.example.com", 13, &d);
    expect(d, POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "c");
    policy_dns_decide(p, "github.com", 10, &d);
    expect(d, POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_dns_decide(p, "exfil-aGVsbG8.attacker.example", 30, &d);
    expect(d, POLICY_DENY, POLICY_R_NO_RULE, NULL);
    policy_dns_decide(p, "127.0.0.1", 9, &d);
    expect(d, POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    policy_dns_decide(p, "a..b", 4, &d);
    expect(d, POLICY_DENY, POLICY_R_INVALID_HOST, NULL);
    policy_unref(p);
    p = P("version: 1\nname: nodns\nrules:\n  - name: a\n    hosts: [a.example.com]\n"
          "dns:\n  resolve: none\n");
    policy_dns_decide(p, "a.example.com", 13, &d);
    expect(d, POLICY_DENY, POLICY_R_DNS_DISABLED, NULL);
    policy_unref(p);
    p = P("version: 1\nname: rep\nmode: report\nrules: []\n");
    policy_dns_decide(p, "a.example.com", 13, &d);
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert(d.would_deny);
    policy_unref(p);
}
END_TEST

START_TEST(narrowing_only_removes)
{
    struct policy *base = P(github);
    struct policy_decision d;
    struct al_error err = {0};
    /* allow_internet_access = false: everything is denied. */
    struct policy_narrowing n = {.no_internet = true};
    struct policy *p = policy_narrow(base, &n, &err);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_ne(policy_hash(p), policy_hash(base));
    ck_assert_str_eq(policy_name(p), policy_name(base));
    expect(D(p, CONN("pypi.org", 443)), POLICY_DENY, POLICY_R_NARROWED, NULL);
    expect(D(p, ((struct q){"10.20.0.5", 8080, POLICY_SCHEME_HTTP, "GET", "/", NULL})), POLICY_DENY,
           POLICY_R_NARROWED, NULL);
    policy_dns_decide(p, "pypi.org", 8, &d);
    expect(d, POLICY_DENY, POLICY_R_NARROWED, NULL);
    policy_unref(p);
    /* denyOut all + allowOut: only the allowOut names the base also allows. */
    const char *allow[] = {"pypi.org", "*.github.com", "evil.example", "203.0.113.0/24"};
    const char *deny[] = {"0.0.0.0/0"};
    n = (struct policy_narrowing){
        .allow_out = allow, .n_allow_out = 4, .deny_out = deny, .n_deny_out = 1};
    p = policy_narrow(base, &n, &err);
    ck_assert_ptr_nonnull(p);
    expect(D(p, CONN("pypi.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    expect(D(p, CONN("files.pythonhosted.org", 443)), POLICY_DENY, POLICY_R_NARROWED, NULL);
    /* E2B's "*.github.com" is any depth; the base still decides. */
    expect(D(p, HTTPS("api.github.com", "GET", "/repos/x")), POLICY_ALLOW, POLICY_R_RULE_ALLOWS,
           "github-api");
    expect(D(p, CONN("gist.github.com", 443)), POLICY_DENY, POLICY_R_RULE_DENIES, "no-gists");
    /* allowOut never widens: evil.example is not in the base. */
    expect(D(p, CONN("evil.example", 443)), POLICY_DENY, POLICY_R_NO_RULE, NULL);
    expect(D(p, ((struct q){"203.0.113.9", 443, POLICY_SCHEME_TCP, NULL, NULL, NULL})), POLICY_DENY,
           POLICY_R_NO_RULE, NULL);
    policy_unref(p);
    /* denyOut of an address range: names are checked against their resolved address. */
    const char *deny2[] = {"151.101.0.0/16", "gist.github.com"};
    n = (struct policy_narrowing){.deny_out = deny2, .n_deny_out = 2};
    p = policy_narrow(base, &n, &err);
    ck_assert_ptr_nonnull(p);
    expect(D(p, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "151.101.0.223"})),
           POLICY_DENY, POLICY_R_NARROWED, NULL);
    expect(D(p, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "151.102.0.1"})),
           POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    expect(D(p, CONN("pypi.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    policy_dns_decide(p, "gist.github.com", 15, &d);
    expect(d, POLICY_DENY, POLICY_R_NARROWED, NULL);
    /* Narrowing a narrowed policy composes, and the base outlives its views. */
    const char *deny3[] = {"pypi.org"};
    struct policy_narrowing n3 = {.deny_out = deny3, .n_deny_out = 1};
    struct policy *p3 = policy_narrow(p, &n3, &err);
    ck_assert_ptr_nonnull(p3);
    policy_unref(p);
    expect(D(p3, CONN("pypi.org", 443)), POLICY_DENY, POLICY_R_NARROWED, NULL);
    expect(D(p3, ((struct q){"pypi.org", 443, POLICY_SCHEME_HTTPS, NULL, NULL, "151.101.0.1"})),
           POLICY_DENY, POLICY_R_NARROWED, NULL);
    expect(D(p3, CONN("files.pythonhosted.org", 443)), POLICY_ALLOW, POLICY_R_RULE_ALLOWS, "pypi");
    /* Same narrowing, same hash; entries are normalised before hashing. */
    const char *deny4[] = {"PyPI.org."};
    struct policy_narrowing n4 = {.deny_out = deny4, .n_deny_out = 1};
    const char *deny2b[] = {"gist.github.com", "151.101.0.0/16"};
    n = (struct policy_narrowing){.deny_out = deny2b, .n_deny_out = 2};
    struct policy *q2 = policy_narrow(base, &n, &err);
    struct policy *q4 = policy_narrow(q2, &n4, &err);
    ck_assert_str_eq(policy_hash(q4), policy_hash(p3));
    policy_unref(q4);
    policy_unref(q2);
    policy_unref(p3);
    /* Bad entries are refused with a reason. */
    const char *bad[] = {"10.0.0.1/33"};
    n = (struct policy_narrowing){.deny_out = bad, .n_deny_out = 1};
    ck_assert_ptr_null(policy_narrow(base, &n, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "network.denyOut entry '10.0.0.1/33'"));
    const char *bad2[] = {"0.0.0.0/0"};
    n = (struct policy_narrowing){.allow_out = bad2, .n_allow_out = 1};
    ck_assert_ptr_null(policy_narrow(base, &n, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "would allow all traffic"));
    const char *bad3[] = {"*"};
    n = (struct policy_narrowing){.allow_out = bad3, .n_allow_out = 1};
    ck_assert_ptr_null(policy_narrow(base, &n, &err));
    policy_unref(base);
}
END_TEST

/* A sandbox's network fields replaced: the policy under every narrowing is what the new
 * fields narrow, and the narrowing alone can be asked about a decided destination. */
START_TEST(narrowing_replaced_and_asked)
{
    struct policy *base = P(github);
    struct al_error err = {0};
    ck_assert_ptr_eq(policy_unnarrowed(base), base);
    policy_unref(base);
    const char *allow[] = {"pypi.org"};
    const char *deny[] = {"0.0.0.0/0"};
    struct policy_narrowing n1 = {
        .allow_out = allow, .n_allow_out = 1, .deny_out = deny, .n_deny_out = 1};
    struct policy *p1 = policy_narrow(base, &n1, &err);
    const char *deny2[] = {"151.101.0.0/16"};
    struct policy_narrowing n2 = {.deny_out = deny2, .n_deny_out = 1};
    struct policy *p2 = policy_narrow(p1, &n2, &err);
    ck_assert_ptr_nonnull(p2);
    /* Under both narrowings: the base itself (a new reference). */
    struct policy *u = policy_unnarrowed(p2);
    ck_assert_ptr_eq(u, base);
    ck_assert_str_eq(policy_hash(u), policy_hash(base));
    policy_unref(u);
    struct policy_host h;
    ck_assert_int_eq(policy_host_canon("151.101.0.223", 13, &h, NULL), 0);
    struct policy_addr in = h.addr;
    ck_assert_int_eq(policy_host_canon("140.82.112.3", 12, &h, NULL), 0);
    struct policy_addr out = h.addr;
    /* Not narrowed: everything passes the (absent) narrowing. */
    ck_assert(policy_narrowing_passes(base, "evil.example", 12, &in));
    /* p1: allowOut pypi.org wins over denyOut all, by name; an address alone is denied. */
    ck_assert(policy_narrowing_passes(p1, "pypi.org", 8, &out));
    ck_assert(!policy_narrowing_passes(p1, "api.github.com", 14, &out));
    ck_assert(!policy_narrowing_passes(p1, NULL, 0, &out));
    /* p2 adds a denied range: pypi.org on it is refused by the second narrowing. */
    ck_assert(!policy_narrowing_passes(p2, "pypi.org", 8, &in));
    ck_assert(policy_narrowing_passes(p2, "pypi.org", 8, &out));
    policy_unref(p2);
    policy_unref(p1);
    policy_unref(base);
}
END_TEST

/* ---- the matcher against a brute-force reference ---------------------------------------- */

static unsigned rng_state = 12345;
static unsigned rng(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return rng_state >> 8;
}

START_TEST(matcher_equals_brute_force_on_large_policy)
{
    enum { NRULES = 3000 };
    static const char *tlds[] = {"com", "net", "org", "io", "dev"};
    size_t cap = 1 << 20;
    char *text = malloc(cap);
    size_t o = (size_t)snprintf(text, cap, "version: 1\nname: big\nrules:\n");
    for (int i = 0; i < NRULES; i++) {
        unsigned k = rng() % 10, d = rng() % 200, t = rng() % 5;
        const char *action = rng() % 7 == 0 ? "deny" : "allow";
        char host[128];
        if (k < 5)
            snprintf(host, sizeof host, "h%u.d%u.%s", rng() % 50, d, tlds[t]);
        else if (k < 7)
            snprintf(host, sizeof host, "\"*.d%u.%s\"", d, tlds[t]);
        else if (k < 9)
            snprintf(host, sizeof host, "\"**.d%u.%s\"", d, tlds[t]);
        else
            snprintf(host, sizeof host, "\"h%u*.d%u.%s\"", rng() % 5, d, tlds[t]);
        o += (size_t)snprintf(text + o, cap - o,
                              "  - name: r%d\n    hosts: [%s]\n    action: %s\n    ports: [%u]\n",
                              i, host, action, rng() % 3 == 0 ? 8443 : 443);
    }
    struct al_diags diags = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer(text, o, "big.yaml", &diags);
    ck_assert_ptr_nonnull(p);
    al_diags_free(&diags);
    /* Reference: the same patterns, tried in order. */
    struct policy_pattern *pats = calloc(NRULES, sizeof *pats);
    for (int i = 0; i < NRULES; i++) {
        const struct policy_rule *r = policy_rule_at(p, (size_t)i);
        ck_assert_int_eq(policy_pattern_canon(r->hosts[0], strlen(r->hosts[0]), &pats[i], NULL), 0);
    }
    int matched = 0, wild_matched = 0;
    for (int qn = 0; qn < 20000; qn++) {
        char name[128];
        unsigned shape = rng() % 4, d = rng() % 220, t = rng() % 5;
        if (shape == 0)
            snprintf(name, sizeof name, "h%u.d%u.%s", rng() % 60, d, tlds[t]);
        else if (shape == 1)
            snprintf(name, sizeof name, "x.h%u.d%u.%s", rng() % 60, d, tlds[t]);
        else if (shape == 2)
            snprintf(name, sizeof name, "d%u.%s", d, tlds[t]);
        else
            snprintf(name, sizeof name, "h%u%u.d%u.%s", rng() % 5, rng() % 20, d, tlds[t]);
        uint16_t port = rng() % 2 ? 443 : 8443;
        int want = -1;
        for (int i = 0; i < NRULES && want < 0; i++) {
            const struct policy_rule *r = policy_rule_at(p, (size_t)i);
            if (r->ports[0].lo == port && policy_pattern_match(&pats[i], name, strlen(name)))
                want = i;
        }
        struct policy_request req = {
            .host = name, .host_len = strlen(name), .port = port, .scheme = POLICY_SCHEME_HTTPS};
        struct policy_decision dec;
        policy_decide(p, &req, &dec);
        if (want < 0) {
            ck_assert_msg(dec.verdict == POLICY_DENY &&
                              (dec.reason == POLICY_R_NO_RULE || dec.reason == POLICY_R_PORT),
                          "%s:%u: expected no match, got %s", name, port,
                          policy_reason_code(dec.reason));
        } else {
            const struct policy_rule *r = policy_rule_at(p, (size_t)want);
            matched++;
            wild_matched += strchr(r->hosts[0], '*') != NULL;
            ck_assert_msg(dec.rule == r && dec.reason == (r->action == POLICY_ACTION_ALLOW
                                                              ? POLICY_R_RULE_ALLOWS
                                                              : POLICY_R_RULE_DENIES),
                          "%s:%u: expected rule r%d, got %s (%s)", name, port, want,
                          dec.rule ? dec.rule->name : "none", policy_reason_code(dec.reason));
        }
    }
    /* The generated queries hit exact and wildcard rules often enough to mean something. */
    ck_assert_int_gt(matched, 4000);
    ck_assert_int_gt(wild_matched, 2000);
    free(pats);
    free(text);
    policy_unref(p);
}
END_TEST

struct thread_arg {
    struct policy *p;
    int ok;
};

static void *decide_thread(void *arg)
{
    struct thread_arg *a = arg;
    a->ok = 1;
    for (int i = 0; i < 20000; i++) {
        struct policy_request r = {.host = i % 2 ? "api.github.com" : "gist.github.com",
                                   .host_len = i % 2 ? 14 : 15,
                                   .port = 443,
                                   .scheme = POLICY_SCHEME_HTTPS,
                                   .method = "GET",
                                   .method_len = 3,
                                   .path = "/repos/x",
                                   .path_len = 8};
        struct policy_decision d;
        policy_decide(a->p, &r, &d);
        if ((i % 2) != (d.verdict == POLICY_ALLOW))
            a->ok = 0;
    }
    return NULL;
}

START_TEST(concurrent_decisions)
{
    struct policy *p = P(github);
    pthread_t t[4];
    struct thread_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i].p = policy_ref(p);
        pthread_create(&t[i], NULL, decide_thread, &a[i]);
    }
    policy_unref(p); /* the threads hold the remaining references */
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert(a[i].ok);
        policy_unref(a[i].p);
    }
}
END_TEST

/* CL.0 smuggling: a body on a method without body semantics is refused unless the rule that
 * genuinely allows the request lists the method in body_methods; report mode does not relax
 * it. */
START_TEST(request_bodies)
{
    struct policy *p = P("version: 1\nname: bodies\nrules:\n"
                         "  - name: pub\n    hosts: [example.com]\n    methods: [GET, POST]\n"
                         "    paths: [\"/public/**\"]\n"
                         "  - name: api\n    hosts: [api.example.com]\n"
                         "    methods: [GET, DELETE, POST]\n    body_methods: [DELETE]\n"
                         "  - name: plain\n    hosts: [plain.example.com]\n    scheme: http\n"
                         "  - name: rep\n    hosts: [r.example.com]\n    mode: report\n"
                         "    methods: [GET]\n");
#define PHTTP(h, m, path) ((struct q){h, 80, POLICY_SCHEME_HTTP, m, path, NULL})
    struct policy_decision d = Db(p, HTTPS("example.com", "GET", "/public/x"), true);
    expect(d, POLICY_DENY, POLICY_R_BODY, "pub");
    ck_assert(policy_reason_is_malformed(d.reason));
    ck_assert(!d.would_deny);
    ck_assert_int_eq(d.tls, POLICY_TLS_NONE);
    expect(D(p, HTTPS("example.com", "GET", "/public/x")), POLICY_ALLOW, POLICY_R_RULE_ALLOWS,
           "pub");
    expect(Db(p, HTTPS("example.com", "POST", "/public/x"), true), POLICY_ALLOW,
           POLICY_R_RULE_ALLOWS, "pub");
    /* a body never turns a denial into another denial */
    expect(Db(p, HTTPS("example.com", "GET", "/private/x"), true), POLICY_DENY, POLICY_R_PATH,
           "pub");
    const char *no_body[] = {"GET", "HEAD", "OPTIONS", "DELETE", "TRACE"};
    for (size_t i = 0; i < 5; i++)
        expect(Db(p, PHTTP("plain.example.com", no_body[i], "/x"), true), POLICY_DENY,
               POLICY_R_BODY, "plain");
    const char *with_body[] = {"POST", "PUT", "PATCH", "PROPFIND"};
    for (size_t i = 0; i < 4; i++)
        expect(Db(p, PHTTP("plain.example.com", with_body[i], "/x"), true), POLICY_ALLOW,
               POLICY_R_RULE_ALLOWS, "plain");
    expect(Db(p, HTTPS("api.example.com", "DELETE", "/x"), true), POLICY_ALLOW,
           POLICY_R_RULE_ALLOWS, "api");
    expect(Db(p, HTTPS("api.example.com", "GET", "/x"), true), POLICY_DENY, POLICY_R_BODY, "api");
    /* report mode: what would be denied is allowed, a body on GET is not */
    expect(Db(p, HTTPS("r.example.com", "GET", "/x"), true), POLICY_DENY, POLICY_R_BODY, "rep");
    d = Db(p, HTTPS("r.example.com", "POST", "/x"), true);
    expect(d, POLICY_ALLOW, POLICY_R_METHOD, "rep");
    ck_assert(d.would_deny);
    d = Db(p, HTTPS("r.example.com", "DELETE", "/x"), true);
    expect(d, POLICY_DENY, POLICY_R_BODY, "rep");
    ck_assert(!d.would_deny);
    /* connection-level questions have no body */
    ck_assert_int_eq(Db(p, CONN("example.com", 443), true).verdict, POLICY_ALLOW);
    /* what a rule exposes */
    const struct policy_rule *r = policy_rule_find(p, "api");
    ck_assert_uint_eq(r->n_body_methods, 1);
    ck_assert_str_eq(r->body_methods[0], "DELETE");
    ck_assert_uint_eq(policy_rule_find(p, "pub")->n_body_methods, 0);
#undef PHTTP
    policy_unref(p);
}
END_TEST

START_TEST(reason_codes_are_stable)
{
    ck_assert_str_eq(policy_reason_code(POLICY_R_RULE_ALLOWS), "rule_allows");
    ck_assert_str_eq(policy_reason_code(POLICY_R_RULE_DENIES), "rule_denies");
    ck_assert_str_eq(policy_reason_code(POLICY_R_NO_RULE), "no_rule_matched");
    ck_assert_str_eq(policy_reason_code(POLICY_R_SCHEME), "scheme_not_allowed");
    ck_assert_str_eq(policy_reason_code(POLICY_R_PORT), "port_not_allowed");
    ck_assert_str_eq(policy_reason_code(POLICY_R_METHOD), "method_not_allowed");
    ck_assert_str_eq(policy_reason_code(POLICY_R_PATH), "path_not_allowed");
    ck_assert_str_eq(policy_reason_code(POLICY_R_INTERNAL), "internal_address");
    ck_assert_str_eq(policy_reason_code(POLICY_R_INVALID_HOST), "invalid_host");
    ck_assert_str_eq(policy_reason_code(POLICY_R_INVALID_PATH), "invalid_path");
    ck_assert_str_eq(policy_reason_code(POLICY_R_INVALID_REQUEST), "invalid_request");
    ck_assert_str_eq(policy_reason_code(POLICY_R_ADDR_MISMATCH), "address_mismatch");
    ck_assert_str_eq(policy_reason_code(POLICY_R_NARROWED), "sandbox_network_denies");
    ck_assert_str_eq(policy_reason_code(POLICY_R_DNS_DISABLED), "dns_disabled");
    ck_assert_str_eq(policy_reason_code(POLICY_R_BODY), "request_body_not_allowed");
    for (int r = 0; r < POLICY_R__COUNT; r++)
        ck_assert(policy_reason_is_malformed((enum policy_reason)r) == (r == POLICY_R_BODY));
    ck_assert_str_eq(policy_reason_code(POLICY_R__COUNT), "unknown");
}
END_TEST

static Suite *decide_suite(void)
{
    Suite *s = suite_create("policy_decide");
    TCase *tc = tcase_create("decide");
    tcase_add_test(tc, github_example);
    tcase_add_test(tc, bypass_normalisation);
    tcase_add_test(tc, bypass_wildcard_overmatch);
    tcase_add_test(tc, bypass_ip_literals_and_internal);
    tcase_add_test(tc, bypass_ports_and_malformed_requests);
    tcase_add_test(tc, first_match_order);
    tcase_add_test(tc, conditional_rules_and_connection_tls);
    tcase_add_test(tc, cidr_rules_and_tcp);
    tcase_add_test(tc, report_mode);
    tcase_add_test(tc, dns_queries);
    tcase_add_test(tc, narrowing_only_removes);
    tcase_add_test(tc, narrowing_replaced_and_asked);
    tcase_add_test(tc, matcher_equals_brute_force_on_large_policy);
    tcase_add_test(tc, concurrent_decisions);
    tcase_add_test(tc, request_bodies);
    tcase_add_test(tc, reason_codes_are_stable);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(decide_suite)
