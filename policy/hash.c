/* policy/hash: the canonical form of a policy and its hash.
 *
 * The canonical form is compact JSON with sorted keys, built from the validated policy
 * after defaults are applied and names canonicalised, so it does not depend on YAML
 * formatting, comments, key order, spelling of names (API.GitHub.com. = api.github.com),
 * or the order of items in sets (hosts, cidrs, methods, paths, ports). Rule order is kept:
 * it is meaningful. The hash is BLAKE2b-256 (libsodium crypto_generichash) of
 * "airlock-policy-v1\n" + that JSON, as 64 lowercase hex digits. */
#include "policy/internal.h"

#include <jansson.h>
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int hash__strcmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static json_t *hash__sorted(const char *const *v, size_t n)
{
    json_t *a = json_array();
    const char **c = malloc((n ? n : 1) * sizeof *c);
    if (!a || !c) {
        json_decref(a);
        free(c);
        return NULL;
    }
    if (n)
        memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, hash__strcmp);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(c[i]));
    free(c);
    return a;
}

static const char *hash__scheme(enum policy_scheme s)
{
    return s == POLICY_SCHEME_HTTPS ? "https" : s == POLICY_SCHEME_HTTP ? "http" : "tcp";
}

static const char *hash__tls(enum policy_tls t)
{
    return t == POLICY_TLS_INSPECT ? "inspect" : t == POLICY_TLS_PASSTHROUGH ? "passthrough" : NULL;
}

static int hash__inject_cmp(const void *a, const void *b)
{
    const struct policy_inject *x = a, *y = b;
    return strcasecmp(x->header, y->header);
}

static json_t *hash__rule(const struct policy_rule *r)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "name", json_string(r->name));
    json_object_set_new(o, "description",
                        r->description ? json_string(r->description) : json_null());
    json_object_set_new(o, "action",
                        json_string(r->action == POLICY_ACTION_ALLOW ? "allow" : "deny"));
    json_object_set_new(o, "report", json_boolean(r->report));
    json_object_set_new(o, "scheme", json_string(hash__scheme(r->scheme)));
    json_object_set_new(o, "tls", hash__tls(r->tls) ? json_string(hash__tls(r->tls)) : json_null());
    json_object_set_new(o, "websocket", json_boolean(r->websocket));
    json_object_set_new(o, "allow_plaintext_inject", json_boolean(r->allow_plaintext_inject));
    json_object_set_new(o, "scrub",
                        json_string(r->scrub == POLICY_SCRUB_STRICT        ? "strict"
                                    : r->scrub == POLICY_SCRUB_BEST_EFFORT ? "best_effort"
                                                                           : "none"));
    json_object_set_new(o, "hosts", hash__sorted(r->hosts, r->n_hosts));
    json_object_set_new(o, "cidrs", hash__sorted(r->cidrs, r->n_cidrs));
    json_object_set_new(o, "methods", hash__sorted(r->methods, r->n_methods));
    json_object_set_new(o, "paths", hash__sorted(r->paths, r->n_paths));
    if (r->api_transforms) /* only when set: hashes of policies without it stay as they were */
        json_object_set_new(o, "api_transforms", json_string("allow"));
    if (r->n_body_methods) /* only when set: hashes of policies without it stay as they were */
        json_object_set_new(o, "body_methods", hash__sorted(r->body_methods, r->n_body_methods));
    json_t *ports = json_array();
    for (size_t i = 0; i < r->n_ports; i++)
        json_array_append_new(ports, json_pack("[ii]", r->ports[i].lo, r->ports[i].hi));
    json_object_set_new(o, "ports", ports);
    json_t *inj = json_array();
    struct policy_inject *sorted = malloc((r->n_inject ? r->n_inject : 1) * sizeof *sorted);
    if (sorted) {
        if (r->n_inject)
            memcpy(sorted, r->inject, r->n_inject * sizeof *sorted);
        qsort(sorted, r->n_inject, sizeof *sorted, hash__inject_cmp);
        for (size_t i = 0; i < r->n_inject; i++) {
            char lower[256];
            size_t hl = strlen(sorted[i].header);
            if (hl >= sizeof lower)
                hl = sizeof lower - 1;
            for (size_t k = 0; k < hl; k++)
                lower[k] = (char)((sorted[i].header[k] >= 'A' && sorted[i].header[k] <= 'Z')
                                      ? sorted[i].header[k] + 32
                                      : sorted[i].header[k]);
            lower[hl] = '\0';
            json_t *e = json_object();
            json_object_set_new(e, "header", json_string(lower));
            json_object_set_new(e, "value",
                                sorted[i].value ? json_string(sorted[i].value) : json_null());
            json_object_set_new(e, "placeholder",
                                sorted[i].placeholder_env ? json_string(sorted[i].placeholder_env)
                                                          : json_null());
            json_object_set_new(e, "secrets", hash__sorted(sorted[i].secrets, sorted[i].n_secrets));
            json_array_append_new(inj, e);
        }
        free(sorted);
    }
    json_object_set_new(o, "inject", inj);
    return o;
}

static int hash__finish(struct policy *p, json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(doc);
    if (!text)
        return -ENOMEM;
    p->canonical = policy__strdup(&p->arena, text);
    free(text);
    if (!p->canonical)
        return -ENOMEM;
    static const char domain[] = "airlock-policy-v1\n";
    unsigned char h[32];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const unsigned char *)domain, sizeof domain - 1);
    crypto_generichash_update(&st, (const unsigned char *)p->canonical, strlen(p->canonical));
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(p->hash, sizeof p->hash, h, sizeof h);
    return 0;
}

int policy__canonicalize(struct policy *p)
{
    json_t *doc = json_object();
    if (!doc)
        return -ENOMEM;
    json_object_set_new(doc, "version", json_integer(POLICY_VERSION));
    json_object_set_new(doc, "name", json_string(p->name));
    json_object_set_new(doc, "description",
                        p->description ? json_string(p->description) : json_null());
    json_object_set_new(doc, "mode",
                        json_string(p->mode == POLICY_MODE_REPORT ? "report" : "enforce"));
    json_object_set_new(doc, "dns",
                        json_pack("{s:s, s:I, s:I}", "resolve",
                                  p->dns.resolve == POLICY_DNS_NONE ? "none" : "allowed",
                                  "min_ttl_ms", (json_int_t)p->dns.min_ttl_ms, "max_ttl_ms",
                                  (json_int_t)p->dns.max_ttl_ms));
    json_object_set_new(doc, "limits",
                        json_pack("{s:I, s:I, s:I}", "max_connections",
                                  (json_int_t)p->limits.max_connections, "max_request_body",
                                  (json_int_t)p->limits.max_request_body, "max_requests_per_second",
                                  (json_int_t)p->limits.max_requests_per_second));
    json_t *rules = json_array();
    for (size_t i = 0; i < p->n_rules; i++)
        json_array_append_new(rules, hash__rule(&p->rules[i].pub));
    json_object_set_new(doc, "rules", rules);
    return hash__finish(p, doc);
}

/* Canonical form of a narrowed view: the base's hash and the narrowing's entries. */
int policy__canonicalize_narrowed(struct policy *p, const char *const *allow, size_t na,
                                  const char *const *deny, size_t nd, bool no_internet,
                                  json_t *transforms);

/* transforms (stolen; NULL when none, so hashes without them stay as they were): the
 * domains, header names and secret names, never a value (the narrowing holds none). */
int policy__canonicalize_narrowed(struct policy *p, const char *const *allow, size_t na,
                                  const char *const *deny, size_t nd, bool no_internet,
                                  json_t *transforms)
{
    json_t *doc = json_object();
    if (!doc) {
        json_decref(transforms);
        return -ENOMEM;
    }
    if (transforms)
        json_object_set_new(doc, "transforms", transforms);
    json_object_set_new(doc, "base", json_string(p->base->hash));
    json_object_set_new(doc, "no_internet", json_boolean(no_internet));
    json_object_set_new(doc, "allow_out", hash__sorted(allow, na));
    json_object_set_new(doc, "deny_out", hash__sorted(deny, nd));
    json_t *outer = json_pack("{s:o}", "narrowed", doc);
    if (!outer)
        return -ENOMEM;
    return hash__finish(p, outer);
}
