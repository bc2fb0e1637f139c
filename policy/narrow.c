/* policy/narrow: a policy narrowed by a sandbox's E2B network fields (issue 6).
 *
 * E2B's create call may carry allow_internet_access=false and network.allowOut/denyOut.
 * airlock reads them as a filter in front of the policy: a destination passes the filter
 * when it is in allowOut (names, *.names meaning any depth as in E2B, IPs, CIDRs), or else
 * when it is not in denyOut (IPs, CIDRs, names; 0.0.0.0/0 or ::/0 = all traffic, and
 * allow_internet_access=false = denyOut [0.0.0.0/0]). Whatever passes the filter is then
 * decided by the base policy, so narrowing can only remove: nothing the base policy denies
 * is ever allowed. The narrowed view shares the base's compiled rules (it holds a reference)
 * and has its own hash over the base hash and the normalised fields. */
#include "policy/internal.h"

#include "common/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

int policy__canonicalize_narrowed(struct policy *p, const char *const *allow, size_t na,
                                  const char *const *deny, size_t nd, bool no_internet,
                                  json_t *transforms);

struct narrow__acc {
    struct policy_pattern *names;
    size_t n_names;
    struct policy__cidr *cidrs;
    size_t n_cidrs;
    const char **texts; /* canonical text of every entry, for the hash */
    size_t n_texts;
    bool all;
};

static int narrow__entry(struct policy *p, const char *s, bool allow, struct narrow__acc *acc,
                         struct al_error *err)
{
    const char *list = allow ? "allowOut" : "denyOut";
    if (!s || !*s)
        return al_error_set(err, -EINVAL, "network.%s has an empty entry", list);
    char text[POLICY_NAME_MAX + 16];
    if (strchr(s, '/') || (strchr(s, ':') && !strchr(s, '*'))) {
        struct policy__cidr c;
        if (policy__cidr_parse(s, &c, err))
            return al_error_prefix(err, "network.%s entry '%s'", list, s);
        if (c.bits == 0) {
            if (allow)
                return al_error_set(err, -EINVAL,
                                    "network.allowOut entry '%s' would allow all traffic; "
                                    "allowOut can only name destinations (the policy decides "
                                    "the rest)",
                                    s);
            acc->all = true;
        }
        acc->cidrs[acc->n_cidrs++] = c;
        policy__cidr_format(&c, text, sizeof text);
    } else if (strchr(s, '*')) {
        struct policy_pattern pat;
        if (policy_pattern_canon(s, strlen(s), &pat, err))
            return al_error_prefix(err, "network.%s entry '%s'", list, s);
        if (pat.kind == POLICY_PATTERN_ONE) {
            /* E2B: "*.example.com" means every subdomain, at any depth. */
            pat.kind = POLICY_PATTERN_ANY;
            size_t bl = strlen(pat.base);
            memmove(pat.text + 3, pat.base, bl + 1);
            memcpy(pat.text, "**.", 3);
            pat.base = pat.text + 3;
        }
        acc->names[acc->n_names] = pat;
        acc->names[acc->n_names].base = acc->names[acc->n_names].text + (pat.base - pat.text);
        acc->n_names++;
        snprintf(text, sizeof text, "%s", pat.text);
    } else {
        struct policy_host h;
        if (policy_host_canon(s, strlen(s), &h, err))
            return al_error_prefix(err, "network.%s entry '%s'", list, s);
        if (h.kind == POLICY_HOST_ADDR) {
            struct policy__cidr c = {.net = h.addr, .bits = h.addr.family == AF_INET ? 32 : 128};
            acc->cidrs[acc->n_cidrs++] = c;
            policy__cidr_format(&c, text, sizeof text);
        } else {
            struct policy_pattern *pat = &acc->names[acc->n_names++];
            memset(pat, 0, sizeof *pat);
            pat->kind = POLICY_PATTERN_EXACT;
            memcpy(pat->text, h.text, h.len + 1);
            pat->base = pat->text;
            snprintf(text, sizeof text, "%s", h.text);
        }
    }
    if (!(acc->texts[acc->n_texts++] = policy__strdup(&p->arena, text)))
        return -ENOMEM;
    return 0;
}

static int narrow__list(struct policy *p, const char *const *v, size_t n, bool allow,
                        struct narrow__acc *acc, struct al_error *err)
{
    if (n > 4096)
        return al_error_set(err, -E2BIG, "network.%s has more than 4096 entries",
                            allow ? "allowOut" : "denyOut");
    size_t cap = n ? n : 1;
    acc->names = policy__alloc(&p->arena, cap * sizeof *acc->names);
    acc->cidrs = policy__alloc(&p->arena, cap * sizeof *acc->cidrs);
    acc->texts = policy__alloc(&p->arena, cap * sizeof *acc->texts);
    if (!acc->names || !acc->cidrs || !acc->texts)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = narrow__entry(p, v[i], allow, acc, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* One transform's inject entry: header from "${secret:NAME}". */
static int narrow__tinject(struct policy *p, const struct policy_transform_header *h,
                           struct policy_inject *out)
{
    struct policy_tmpl_part *part = policy__alloc(&p->arena, sizeof *part);
    const char **secrets = policy__alloc(&p->arena, sizeof *secrets);
    size_t vl = strlen(h->secret) + 10;
    char *value = policy__alloc(&p->arena, vl + 1);
    if (!part || !secrets || !value)
        return -ENOMEM;
    snprintf(value, vl + 1, "${secret:%s}", h->secret);
    out->header = policy__strdup(&p->arena, h->name);
    secrets[0] = policy__strdup(&p->arena, h->secret);
    if (!out->header || !secrets[0])
        return -ENOMEM;
    part->secret = true;
    part->text = secrets[0];
    part->len = strlen(secrets[0]);
    out->value = value;
    out->parts = part;
    out->n_parts = 1;
    out->secrets = secrets;
    out->n_secrets = 1;
    return 0;
}

/* Checks the transforms against base, fills nw's tables and the hash's "transforms". */
static int narrow__transforms(struct policy *p, struct policy *base,
                              const struct policy_narrowing *n, struct policy__narrow *nw,
                              json_t *hashed, struct al_error *err)
{
    size_t nt = n->n_transforms;
    if (nt == 0)
        return 0;
    if (nt > POLICY_TRANSFORMS_MAX)
        return al_error_set(err, -E2BIG, "network.rules names %zu domains; at most %d", nt,
                            POLICY_TRANSFORMS_MAX);
    size_t nr = base->n_rules;
    nw->tdomains = policy__alloc(&p->arena, nt * sizeof *nw->tdomains);
    nw->tdomain_ptrs = policy__alloc(&p->arena, nt * sizeof *nw->tdomain_ptrs);
    nw->tinject = policy__alloc(&p->arena, nt * (nr ? nr : 1) * sizeof *nw->tinject);
    nw->tn_inject = policy__alloc(&p->arena, nt * (nr ? nr : 1) * sizeof *nw->tn_inject);
    if (!nw->tdomains || !nw->tdomain_ptrs || !nw->tinject || !nw->tn_inject)
        return -ENOMEM;
    for (size_t t = 0; t < nt; t++) {
        const struct policy_transform *tr = &n->transforms[t];
        struct policy_pattern *d = &nw->tdomains[t];
        int rc =
            policy_transform_domain_canon(tr->domain, tr->domain ? strlen(tr->domain) : 0, d, err);
        if (rc)
            return al_error_prefix(err, "network.rules");
        d->base = d->text + (d->kind == POLICY_PATTERN_EXACT ? 0 : 3);
        nw->tdomain_ptrs[t] = d;
        for (size_t u = 0; u < t; u++)
            if (strcmp(nw->tdomains[u].text, d->text) == 0)
                return al_error_set(err, -EINVAL,
                                    "network.rules names the domain '%s' twice (as '%s' and "
                                    "'%s'); merge their headers",
                                    d->text, n->transforms[u].domain, tr->domain);
        if (!policy_transform_rule(base, d))
            return al_error_set(err, -EINVAL,
                                "network.rules: the domain '%s' is not covered by a rule with "
                                "'api_transforms: allow' in policy '%s', so no header may be "
                                "sent to it from the API; remove it, or ask for a policy that "
                                "allows transforms toward it",
                                tr->domain, base->name ? base->name : "(unnamed)");
        if (tr->n_headers == 0 || tr->n_headers > POLICY_TRANSFORM_HEADERS_MAX)
            return al_error_set(err, -EINVAL,
                                "network.rules['%s']: a transform sets 1 to %d headers, not %zu",
                                tr->domain, POLICY_TRANSFORM_HEADERS_MAX, tr->n_headers);
        json_t *hs = json_array();
        json_t *o = json_pack("{s:s,s:o}", "domain", d->text, "headers", hs);
        if (!hs || !o || json_array_append_new(hashed, o))
            return -ENOMEM;
        for (size_t h = 0; h < tr->n_headers; h++) {
            const struct policy_transform_header *th = &tr->headers[h];
            if (!th->name || !policy_header_injectable(th->name, strlen(th->name)))
                return al_error_set(err, -EINVAL,
                                    "network.rules['%s']: the header '%s' cannot be set: it is "
                                    "not an HTTP token, or it frames or routes the request "
                                    "(Host, Content-Length, Connection, Proxy-*, ...)",
                                    tr->domain, th->name ? th->name : "");
            for (size_t k = 0; k < h; k++)
                if (strcasecmp(tr->headers[k].name, th->name) == 0)
                    return al_error_set(err, -EINVAL,
                                        "network.rules['%s']: the header '%s' is given twice",
                                        tr->domain, th->name);
            if (!th->secret || !policy_secret_name_valid(th->secret, strlen(th->secret)))
                return al_error_set(err, -EINVAL,
                                    "network.rules['%s']: header '%s' has no valid vault "
                                    "secret name",
                                    tr->domain, th->name);
            json_t *pair = json_pack("[ss]", th->name, th->secret);
            if (!pair || json_array_append_new(hs, pair))
                return -ENOMEM;
        }
        for (size_t r = 0; r < nr; r++) {
            const struct policy_rule *rule = &base->rules[r].pub;
            if (!rule->api_transforms || rule->action != POLICY_ACTION_ALLOW)
                continue;
            size_t cap = rule->n_inject + tr->n_headers, k = 0;
            struct policy_inject *v = policy__alloc(&p->arena, cap * sizeof *v);
            if (!v)
                return -ENOMEM;
            for (size_t i = 0; i < rule->n_inject; i++)
                v[k++] = rule->inject[i];
            for (size_t h = 0; h < tr->n_headers; h++) {
                bool policy_sets = false; /* the security team's entry wins */
                for (size_t i = 0; i < rule->n_inject; i++)
                    policy_sets |= strcasecmp(rule->inject[i].header, tr->headers[h].name) == 0;
                if (policy_sets)
                    continue;
                int rc2 = narrow__tinject(p, &tr->headers[h], &v[k]);
                if (rc2)
                    return rc2;
                k++;
            }
            nw->tinject[t * nr + r] = v;
            nw->tn_inject[t * nr + r] = k;
        }
    }
    nw->n_transforms = nt;
    return 0;
}

struct policy *policy_narrow(struct policy *base, const struct policy_narrowing *n,
                             struct al_error *err)
{
    if (!base || !n) {
        al_error_set(err, -EINVAL, "no policy to narrow");
        return NULL;
    }
    struct policy *p = calloc(1, sizeof *p);
    if (!p) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    /* Share everything compiled; the arena of the view holds only the narrowing. */
    struct policy__arena arena = {0};
    *p = (struct policy){0};
    p->arena = arena;
    p->name = base->name;
    p->description = base->description;
    p->file = base->file;
    p->mode = base->mode;
    p->rules = base->rules;
    p->n_rules = base->n_rules;
    p->limits = base->limits;
    p->dns = base->dns;
    p->placeholders = base->placeholders;
    p->n_placeholders = base->n_placeholders;
    p->intercepted = base->intercepted;
    p->n_intercepted = base->n_intercepted;
    p->m = base->m;
    atomic_init(&p->refs, 1);
    p->base = policy_ref(base);
    struct policy__narrow *nw = policy__alloc(&p->arena, sizeof *nw);
    struct narrow__acc allow = {0}, deny = {0};
    json_t *thash = n->n_transforms ? json_array() : NULL;
    int rc = nw && (thash || !n->n_transforms) ? 0 : -ENOMEM;
    if (!rc)
        rc = narrow__list(p, n->allow_out, n->n_allow_out, true, &allow, err);
    if (!rc)
        rc = narrow__list(p, n->deny_out, n->n_deny_out, false, &deny, err);
    if (!rc) {
        nw->deny_all = n->no_internet || deny.all;
        nw->allow_names = allow.names;
        nw->n_allow_names = allow.n_names;
        nw->allow_cidrs = allow.cidrs;
        nw->n_allow_cidrs = allow.n_cidrs;
        nw->deny_names = deny.names;
        nw->n_deny_names = deny.n_names;
        nw->deny_cidrs = deny.cidrs;
        nw->n_deny_cidrs = deny.n_cidrs;
        rc = narrow__transforms(p, base, n, nw, thash, err);
    }
    if (!rc) {
        p->narrow = nw;
        rc = policy__canonicalize_narrowed(p, allow.texts, allow.n_texts, deny.texts, deny.n_texts,
                                           n->no_internet, thash);
        thash = NULL;
    }
    json_decref(thash);
    if (rc) {
        if (rc == -ENOMEM)
            al_error_set(err, rc, "out of memory");
        policy_unref(p);
        return NULL;
    }
    return p;
}

struct policy *policy_unnarrowed(struct policy *p)
{
    while (p && p->narrow && p->base)
        p = p->base;
    return p ? policy_ref(p) : NULL;
}

/* ---- the JSON form ------------------------------------------------------------------- */

static int narrow__json_strings(const json_t *a, const char *key, struct al_error *err)
{
    if (!a)
        return 0;
    if (!json_is_array(a))
        return al_error_set(err, -EINVAL, "network.%s must be a list of strings", key);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v))
            return al_error_set(err, -EINVAL, "network.%s[%zu] must be a string", key, i);
    }
    return 0;
}

int policy_narrowing_json_check(const json_t *n, struct al_error *err)
{
    if (!json_is_object(n))
        return al_error_set(err, -EINVAL,
                            "\"network\" must be an object: {\"allow_internet_access\": bool, "
                            "\"allow_out\": [...], \"deny_out\": [...], \"transforms\": [...]}");
    static const char *const keys[] = {"allow_internet_access", "allow_out", "deny_out",
                                       "transforms", NULL};
    if (al_json_check_keys(n, keys, "network", err) < 0)
        return -EINVAL;
    json_t *b = json_object_get(n, "allow_internet_access");
    if (b && !json_is_boolean(b))
        return al_error_set(err, -EINVAL, "network.allow_internet_access must be true or false");
    if (narrow__json_strings(json_object_get(n, "allow_out"), "allow_out", err) < 0 ||
        narrow__json_strings(json_object_get(n, "deny_out"), "deny_out", err) < 0)
        return -EINVAL;
    json_t *t = json_object_get(n, "transforms");
    if (!t)
        return 0;
    if (!json_is_array(t) || json_array_size(t) > POLICY_TRANSFORMS_MAX)
        return al_error_set(err, -EINVAL,
                            "network.transforms must be a list of at most %d "
                            "{\"domain\", \"headers\": [{\"name\", \"secret\"}]}",
                            POLICY_TRANSFORMS_MAX);
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v)
    {
        json_t *hs = json_object_get(v, "headers");
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "domain")) ||
            !json_is_array(hs) || json_object_size(v) != 2 ||
            json_array_size(hs) > POLICY_TRANSFORM_HEADERS_MAX)
            return al_error_set(err, -EINVAL,
                                "network.transforms[%zu] must be {\"domain\": string, "
                                "\"headers\": [at most %d {\"name\", \"secret\"}]}",
                                i, POLICY_TRANSFORM_HEADERS_MAX);
        size_t j;
        json_t *h;
        json_array_foreach(hs, j, h)
        {
            if (!json_is_object(h) || json_object_size(h) != 2 ||
                !json_is_string(json_object_get(h, "name")) ||
                !json_is_string(json_object_get(h, "secret")))
                return al_error_set(err, -EINVAL,
                                    "network.transforms[%zu].headers[%zu] must be "
                                    "{\"name\": string, \"secret\": string}",
                                    i, j);
        }
    }
    return 0;
}

static const char **narrow__strv(const json_t *a, size_t *n)
{
    *n = json_array_size(a);
    const char **v = calloc(*n + 1, sizeof *v);
    for (size_t i = 0; v && i < *n; i++)
        v[i] = json_string_value(json_array_get(a, i));
    return v;
}

struct policy *policy_narrow_json(struct policy *base, const json_t *n, struct al_error *err)
{
    if (policy_narrowing_json_check(n, err) < 0)
        return NULL;
    struct policy_narrowing nw = {.no_internet =
                                      json_is_false(json_object_get(n, "allow_internet_access"))};
    const char **allow = narrow__strv(json_object_get(n, "allow_out"), &nw.n_allow_out);
    const char **deny = narrow__strv(json_object_get(n, "deny_out"), &nw.n_deny_out);
    nw.allow_out = allow;
    nw.deny_out = deny;
    const json_t *ts = json_object_get(n, "transforms");
    size_t nt = json_array_size(ts);
    struct policy_transform tv[POLICY_TRANSFORMS_MAX];
    struct policy_transform_header hv[POLICY_TRANSFORMS_MAX][POLICY_TRANSFORM_HEADERS_MAX];
    for (size_t i = 0; i < nt; i++) {
        const json_t *t = json_array_get(ts, i), *hs = json_object_get(t, "headers");
        tv[i].domain = json_string_value(json_object_get(t, "domain"));
        tv[i].n_headers = json_array_size(hs);
        tv[i].headers = hv[i];
        for (size_t j = 0; j < tv[i].n_headers; j++) {
            const json_t *h = json_array_get(hs, j);
            hv[i][j].name = json_string_value(json_object_get(h, "name"));
            hv[i][j].secret = json_string_value(json_object_get(h, "secret"));
        }
    }
    nw.transforms = tv;
    nw.n_transforms = nt;
    struct policy *p = NULL;
    if (!allow || !deny)
        al_error_set(err, -ENOMEM, "out of memory");
    else
        p = policy_narrow(base, &nw, err);
    free(allow);
    free(deny);
    return p;
}
