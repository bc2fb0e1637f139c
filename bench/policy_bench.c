/* bench/policy_bench: how fast is a policy decision, and how long does compiling take?
 *
 * Generates a policy of N rules (default 10,000) that looks like a large real one: mostly
 * exact hosts over a few thousand registrable domains, one-label and any-depth wildcards,
 * label globs, some rules with method/path conditions, a few CIDR rules. Then decides a
 * mix of requests (exact hits, wildcard hits at several depths, near misses such as
 * look-alike suffixes, plain misses, request-level decisions with paths), timing each call.
 * The reference, measured in the same run, is the naive matcher a proxy might write: try
 * every rule's patterns in order (policy_pattern_match), on a sample of the same queries.
 *
 * Prints JSON lines. Target (issue 2): policy_decide p99 < 5 us with 10,000 rules.
 *   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
 *   build/bench/policy_bench [--rules N] [--queries N] [--no-reference]
 */
#include "policy/policy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static uint64_t bench__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t bench__rng = 0x243f6a8885a308d3ull;
static uint32_t bench__rand(void)
{
    bench__rng ^= bench__rng << 13;
    bench__rng ^= bench__rng >> 7;
    bench__rng ^= bench__rng << 17;
    return (uint32_t)(bench__rng >> 16);
}

static const char *const tlds[] = {"com", "net", "org", "io", "dev", "cloud", "ai", "co.uk"};
#define NTLD (sizeof tlds / sizeof tlds[0])
static const char *const words[] = {"api",      "cdn",  "static", "auth",  "login", "uploads",
                                    "registry", "repo", "mirror", "files", "docs",  "data"};
#define NWORD (sizeof words / sizeof words[0])

static void bench__json(const char *bench, const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", bench, metric,
           value, unit);
}

static int bench__cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct query {
    char host[128];
    uint16_t port;
    const char *method, *path;
};

int main(int argc, char **argv)
{
    size_t nrules = 10000, nqueries = 200000;
    bool reference = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rules") == 0 && i + 1 < argc)
            nrules = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--queries") == 0 && i + 1 < argc)
            nqueries = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--no-reference") == 0)
            reference = false;
        else {
            fprintf(stderr, "usage: policy_bench [--rules N] [--queries N] [--no-reference]\n");
            return 2;
        }
    }
    size_t ndomains = nrules / 4 + 1;
    size_t cap = nrules * 200 + 4096, o = 0;
    char *text = malloc(cap);
    o += (size_t)snprintf(text + o, cap - o, "version: 1\nname: bench\nrules:\n");
    for (size_t i = 0; i < nrules; i++) {
        uint32_t dom = bench__rand() % (uint32_t)ndomains, k = bench__rand() % 100;
        const char *tld = tlds[dom % NTLD];
        const char *w = words[bench__rand() % NWORD];
        o += (size_t)snprintf(text + o, cap - o, "  - name: r%zu\n", i);
        if (k < 55) { /* one to three exact hosts */
            o += (size_t)snprintf(text + o, cap - o, "    hosts: [%s.d%u.%s", w, dom, tld);
            for (uint32_t n = bench__rand() % 3; n > 0; n--)
                o += (size_t)snprintf(text + o, cap - o, ", %s%u.d%u.%s",
                                      words[bench__rand() % NWORD], bench__rand() % 10, dom, tld);
            o += (size_t)snprintf(text + o, cap - o, "]\n");
        } else if (k < 75) {
            o += (size_t)snprintf(text + o, cap - o, "    hosts: [\"*.d%u.%s\"]\n", dom, tld);
        } else if (k < 87) {
            o += (size_t)snprintf(text + o, cap - o, "    hosts: [\"**.d%u.%s\"]\n", dom, tld);
        } else if (k < 92) {
            o += (size_t)snprintf(text + o, cap - o, "    hosts: [\"%s-*.d%u.%s\"]\n", w, dom, tld);
        } else if (k < 99) { /* request-level conditions */
            o += (size_t)snprintf(text + o, cap - o,
                                  "    hosts: [%s.d%u.%s]\n    methods: [GET, POST]\n"
                                  "    paths: [\"/v1/**\", \"/repos/*/issues\"]\n",
                                  w, dom, tld);
        } else {
            o += (size_t)snprintf(text + o, cap - o,
                                  "    cidrs: [203.0.%u.0/24]\n    scheme: tcp\n    ports: [%u]\n",
                                  bench__rand() % 256, 5000 + bench__rand() % 1000);
        }
        if (bench__rand() % 10 == 0)
            o += (size_t)snprintf(text + o, cap - o, "    action: deny\n");
        if (o + 400 > cap) {
            fprintf(stderr, "policy_bench: text buffer too small\n");
            return 1;
        }
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t t0 = bench__now();
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_buffer(text, o, "bench.yaml", &d);
    uint64_t t1 = bench__now();
    getrusage(RUSAGE_SELF, &ru1);
    if (!p) {
        al_diags_print(&d, stderr, true);
        return 1;
    }
    al_diags_free(&d);
    bench__json("policy_compile", "rules", (double)policy_rule_count(p), "rules");
    bench__json("policy_compile", "yaml_bytes", (double)o, "bytes");
    bench__json("policy_compile", "load_ms", (double)(t1 - t0) / 1e6, "ms");
    bench__json("policy_compile", "maxrss_growth_kb", (double)(ru1.ru_maxrss - ru0.ru_maxrss),
                "KiB");

    /* Queries: hits on exact names, wildcard hits at depth 1..3, look-alikes, misses. */
    struct query *q = calloc(nqueries, sizeof *q);
    size_t nq_request = 0;
    for (size_t i = 0; i < nqueries; i++) {
        uint32_t dom = bench__rand() % (uint32_t)ndomains, k = bench__rand() % 100;
        const char *tld = tlds[dom % NTLD], *w = words[bench__rand() % NWORD];
        q[i].port = 443;
        if (k < 35)
            snprintf(q[i].host, sizeof q[i].host, "%s.d%u.%s", w, dom, tld);
        else if (k < 50)
            snprintf(q[i].host, sizeof q[i].host, "x%u.%s.d%u.%s", bench__rand() % 100, w, dom,
                     tld);
        else if (k < 60)
            snprintf(q[i].host, sizeof q[i].host, "%s-eu.d%u.%s", w, dom, tld);
        else if (k < 70)
            snprintf(q[i].host, sizeof q[i].host, "%s.d%u.%s.evil.example", w, dom, tld);
        else if (k < 80)
            snprintf(q[i].host, sizeof q[i].host, "%s.xd%u.%s", w, dom, tld);
        else if (k < 90)
            snprintf(q[i].host, sizeof q[i].host, "unknown%u.example.net", bench__rand());
        else {
            snprintf(q[i].host, sizeof q[i].host, "%s.d%u.%s", w, dom, tld);
            q[i].method = bench__rand() % 2 ? "GET" : "DELETE";
            q[i].path = bench__rand() % 2 ? "/v1/things/42?page=2" : "/repos/acme/issues";
            nq_request++;
        }
        if (bench__rand() % 8 == 0)
            q[i].host[0] = (char)(q[i].host[0] - 32); /* some upper case */
    }
    uint64_t *lat = malloc(nqueries * sizeof *lat);
    size_t allowed = 0, denied = 0;
    struct policy_decision dec;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms caches and branch predictors */
        for (size_t i = 0; i < nqueries; i++) {
            struct policy_request r = {.host = q[i].host,
                                       .host_len = strlen(q[i].host),
                                       .port = q[i].port,
                                       .scheme = POLICY_SCHEME_HTTPS,
                                       .method = q[i].method,
                                       .method_len = q[i].method ? strlen(q[i].method) : 0,
                                       .path = q[i].path,
                                       .path_len = q[i].path ? strlen(q[i].path) : 0};
            uint64_t a = bench__now();
            policy_decide(p, &r, &dec);
            uint64_t b = bench__now();
            lat[i] = b - a;
            if (pass == 1) {
                if (dec.verdict == POLICY_ALLOW)
                    allowed++;
                else
                    denied++;
            }
        }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < nqueries; i++)
        total += lat[i];
    qsort(lat, nqueries, sizeof *lat, bench__cmp);
    bench__json("policy_decide", "queries", (double)nqueries, "requests");
    bench__json("policy_decide", "allowed_share", 100.0 * (double)allowed / (double)nqueries, "%");
    bench__json("policy_decide", "request_level_share",
                100.0 * (double)nq_request / (double)nqueries, "%");
    bench__json("policy_decide", "p50_us", (double)lat[nqueries / 2] / 1000.0, "us");
    bench__json("policy_decide", "p99_us", (double)lat[nqueries * 99 / 100] / 1000.0, "us");
    bench__json("policy_decide", "p999_us", (double)lat[nqueries * 999 / 1000] / 1000.0, "us");
    bench__json("policy_decide", "mean_us", (double)total / (double)nqueries / 1000.0, "us");
    bench__json("policy_decide", "max_us", (double)lat[nqueries - 1] / 1000.0, "us");
    double p99 = (double)lat[nqueries * 99 / 100] / 1000.0;

    /* DNS name queries on the same names. */
    size_t nd = nqueries < 50000 ? nqueries : 50000;
    for (size_t i = 0; i < nd; i++) {
        uint64_t a = bench__now();
        policy_dns_decide(p, q[i].host, strlen(q[i].host), &dec);
        lat[i] = bench__now() - a;
    }
    qsort(lat, nd, sizeof *lat, bench__cmp);
    bench__json("policy_dns_decide", "p50_us", (double)lat[nd / 2] / 1000.0, "us");
    bench__json("policy_dns_decide", "p99_us", (double)lat[nd * 99 / 100] / 1000.0, "us");

    if (reference) {
        /* The naive matcher: every rule's patterns, in order, on canonical names. */
        size_t nrule = policy_rule_count(p), npat = 0;
        for (size_t i = 0; i < nrule; i++)
            npat += policy_rule_at(p, i)->n_hosts;
        struct policy_pattern *pats = calloc(npat ? npat : 1, sizeof *pats);
        size_t *owner = calloc(npat ? npat : 1, sizeof *owner), k = 0;
        for (size_t i = 0; i < nrule; i++) {
            const struct policy_rule *r = policy_rule_at(p, i);
            for (size_t j = 0; j < r->n_hosts; j++) {
                policy_pattern_canon(r->hosts[j], strlen(r->hosts[j]), &pats[k], NULL);
                owner[k++] = i;
            }
        }
        size_t nr = nqueries < 5000 ? nqueries : 5000, mismatches = 0;
        for (size_t i = 0; i < nr; i++) {
            struct policy_host h;
            uint64_t a = bench__now();
            size_t hit = SIZE_MAX;
            if (policy_host_canon(q[i].host, strlen(q[i].host), &h, NULL) == 0)
                for (size_t j = 0; j < npat && hit == SIZE_MAX; j++)
                    if (policy_rule_at(p, owner[j])->ports[0].lo == 443 &&
                        policy_pattern_match(&pats[j], h.text, h.len))
                        hit = owner[j];
            lat[i] = bench__now() - a;
            (void)hit;
            (void)mismatches;
        }
        qsort(lat, nr, sizeof *lat, bench__cmp);
        double ref_p50 = (double)lat[nr / 2] / 1000.0,
               ref_p99 = (double)lat[nr * 99 / 100] / 1000.0;
        bench__json("policy_decide_linear_reference", "p50_us", ref_p50, "us");
        bench__json("policy_decide_linear_reference", "p99_us", ref_p99, "us");
        bench__json("policy_decide", "p99_speedup_vs_linear", ref_p99 / (p99 > 0 ? p99 : 1e-3),
                    "x");
        free(pats);
        free(owner);
    }
    bench__json("policy_decide", "p99_target_met", p99 < 5.0 ? 1 : 0, "bool");
    (void)denied;
    free(lat);
    free(q);
    free(text);
    policy_unref(p);
    return 0;
}
