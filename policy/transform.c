/* policy/transform: the domains of E2B's API-given header transforms (network.rules).
 *
 * Owns: their canonical form (E2B's: an exact name, or "*.name" meaning every subdomain at
 * any depth, never the apex; a bare "*", globs and addresses refused), the question a
 * creation or an update asks of the sandbox's policy (does a rule with `api_transforms:
 * allow` cover every name the domain can match?), and which of a sandbox's transforms
 * applies to a request's host (the exact domain first, else the longest matching wildcard;
 * never more than one, as E2B documents: rule sets are not merged). */
#include "policy/policy.h"

#include <errno.h>
#include <string.h>

int policy_transform_domain_canon(const char *in, size_t len, struct policy_pattern *out,
                                  struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (!in || len == 0)
        return al_error_set(err, -EINVAL,
                            "a transform domain is empty: name a host "
                            "(api.example.com) or its subdomains (*.example.com)");
    if (len == 1 && in[0] == '*')
        return al_error_set(err, -EINVAL,
                            "transform domain '*' would send the headers everywhere: name a "
                            "host (api.example.com) or its subdomains (*.example.com)");
    const char *star = memchr(in, '*', len);
    if (star && !(len > 2 && in[0] == '*' && in[1] == '.' && !memchr(in + 1, '*', len - 1)))
        return al_error_set(err, -EINVAL,
                            "transform domain '%.*s': a wildcard may only be a whole leftmost "
                            "label, as in *.example.com (every subdomain)",
                            (int)len, in);
    int rc = policy_pattern_canon(in, len, out, err);
    if (rc)
        return al_error_prefix(err, "transform domain '%.*s'", (int)len, in);
    if (out->kind == POLICY_PATTERN_ONE) {
        /* E2B: "*.example.com" is every subdomain, at any depth (as in allowOut). */
        out->kind = POLICY_PATTERN_ANY;
        size_t bl = strlen(out->base);
        memmove(out->text + 3, out->base, bl + 1);
        memcpy(out->text, "**.", 3);
        out->base = out->text + 3;
    }
    return 0;
}

/* Does rule pattern r match every name domain d matches? */
static bool transform__covers(const struct policy_pattern *r, const struct policy_pattern *d)
{
    if (d->kind == POLICY_PATTERN_EXACT)
        return policy_pattern_match(r, d->base, strlen(d->base));
    /* d is **.base: only a rule matching any depth below base (or below one of its
     * ancestors) covers all of it. */
    if (r->kind != POLICY_PATTERN_ANY)
        return false;
    size_t bl = strlen(d->base), rl = strlen(r->base);
    if (bl == rl)
        return memcmp(d->base, r->base, bl) == 0;
    return bl > rl && d->base[bl - rl - 1] == '.' && memcmp(d->base + bl - rl, r->base, rl) == 0;
}

const struct policy_rule *policy_transform_rule(const struct policy *p,
                                                const struct policy_pattern *domain)
{
    size_t n = policy_rule_count(p);
    for (size_t i = 0; i < n; i++) {
        const struct policy_rule *r = policy_rule_at(p, i);
        if (!r->api_transforms || r->action != POLICY_ACTION_ALLOW)
            continue;
        for (size_t h = 0; h < r->n_hosts; h++) {
            struct policy_pattern rp;
            struct al_error e = {0};
            if (policy_pattern_canon(r->hosts[h], strlen(r->hosts[h]), &rp, &e) == 0 &&
                transform__covers(&rp, domain))
                return r;
        }
    }
    return NULL;
}

long policy_transform_pick(const struct policy_pattern *const *domains, size_t n, const char *host,
                           size_t len)
{
    long best = -1;
    size_t best_len = 0;
    for (size_t i = 0; i < n; i++) {
        const struct policy_pattern *d = domains[i];
        if (!policy_pattern_match(d, host, len))
            continue;
        if (d->kind == POLICY_PATTERN_EXACT)
            return (long)i;
        size_t bl = strlen(d->base);
        if (best < 0 || bl > best_len) {
            best = (long)i;
            best_len = bl;
        }
    }
    return best;
}
