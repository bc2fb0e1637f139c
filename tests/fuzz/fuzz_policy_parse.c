/* tests/fuzz/fuzz_policy_parse: policy YAML text -> parse, validate, lint, compile, hash, decide,
 * DNS, narrow, explain. Every input must either load or be refused with diagnostics; nothing may
 * crash, leak, read out of bounds or loop. */
#include "policy/policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
    const char *host;
    uint16_t port;
    enum policy_scheme scheme;
    const char *method, *path;
} fuzz__reqs[] = {
    {"api.github.com", 443, POLICY_SCHEME_HTTPS, NULL, NULL},
    {"api.github.com", 443, POLICY_SCHEME_HTTPS, "GET", "/repos/a/b?x=1"},
    {"a.b.example.com", 8443, POLICY_SCHEME_HTTPS, "POST", "/a/%2e%2e/b"},
    {"10.20.0.5", 8080, POLICY_SCHEME_HTTP, "GET", "/"},
    {"0x7f.1", 80, POLICY_SCHEME_TCP, NULL, NULL},
    {"[::ffff:10.0.0.1]", 5432, POLICY_SCHEME_TCP, NULL, NULL},
    {"xn--bcher-kva.example", 443, POLICY_SCHEME_HTTPS, "PROPFIND", "/x/y/z"},
    {NULL, 443, POLICY_SCHEME_TCP, NULL, NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer((const char *)data, size, "fuzz.yaml", &d);
    char line[1024];
    for (size_t i = 0; i < d.n; i++)
        al_diag_format(&d.v[i], line, sizeof line);
    al_diags_free(&d);
    if (!p)
        return 0;
    struct policy_addr a = {.family = 2, .bytes = {10, 20, 0, 5}};
    for (size_t i = 0; i < sizeof fuzz__reqs / sizeof fuzz__reqs[0]; i++) {
        struct policy_request r = {
            .host = fuzz__reqs[i].host,
            .host_len = fuzz__reqs[i].host ? strlen(fuzz__reqs[i].host) : 0,
            .addr = fuzz__reqs[i].host ? NULL : &a,
            .port = fuzz__reqs[i].port,
            .scheme = fuzz__reqs[i].scheme,
            .method = fuzz__reqs[i].method,
            .method_len = fuzz__reqs[i].method ? strlen(fuzz__reqs[i].method) : 0,
            .path = fuzz__reqs[i].path,
            .path_len = fuzz__reqs[i].path ? strlen(fuzz__reqs[i].path) : 0,
        };
        struct policy_decision dec;
        policy_decide(p, &r, &dec);
        policy_explain(p, &r, &dec, line, sizeof line);
    }
    /* Every host the policy names is decided and resolved against itself. */
    for (size_t i = 0; i < policy_rule_count(p); i++) {
        const struct policy_rule *r = policy_rule_at(p, i);
        for (size_t k = 0; k < r->n_hosts; k++) {
            const char *h = r->hosts[k];
            if (h[0] == '*')
                h = strchr(h, '.') + 1;
            struct policy_decision dec;
            policy_dns_decide(p, h, strlen(h), &dec);
            struct policy_request q = {
                .host = h, .host_len = strlen(h), .port = r->ports[0].lo, .scheme = r->scheme};
            policy_decide(p, &q, &dec);
        }
    }
    free(policy_canonical_json(p));
    size_t n;
    policy_intercepted_names(p, &n);
    policy_placeholders(p, &n);
    const char *allow[] = {"*.github.com", "203.0.113.0/24"};
    const char *deny[] = {"0.0.0.0/0"};
    struct policy_narrowing nw = {
        .allow_out = allow, .n_allow_out = 2, .deny_out = deny, .n_deny_out = 1};
    struct policy *np = policy_narrow(p, &nw, NULL);
    if (np) {
        struct policy_decision dec;
        policy_dns_decide(np, "api.github.com", 14, &dec);
        policy_unref(np);
    }
    policy_unref(p);
    return 0;
}
