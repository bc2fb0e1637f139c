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

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int policy__canonicalize_narrowed(struct policy *p, const char *const *allow, size_t na,
                                  const char *const *deny, size_t nd, bool no_internet);

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
    int rc = nw ? 0 : -ENOMEM;
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
        p->narrow = nw;
        rc = policy__canonicalize_narrowed(p, allow.texts, allow.n_texts, deny.texts, deny.n_texts,
                                           n->no_internet);
    }
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
