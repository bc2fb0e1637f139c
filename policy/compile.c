/* policy/compile: the compiled matcher and the decision API.
 *
 * Exact host names live in one open-addressing hash table (name -> ascending rule list).
 * Wildcards live in a label trie built from the right (com -> example -> ...): each node
 * holds the rules of "*.<suffix>" (exactly one more label), "**.<suffix>" (one or more)
 * and label globs ("api-*.<suffix>"); edges are one hash table keyed by (parent, label).
 * A lookup walks the name's labels once, gathers at most a few ascending rule lists, and
 * merges them in rule order, so "first match wins" costs the same for 10 or 10,000 rules.
 * CIDR rules are a short ordered list. Nothing on the decision path allocates. */
#include "policy/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static uint64_t compile__hash(const char *s, size_t n, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static uint64_t compile__pow2(uint64_t n)
{
    uint64_t c = 16;
    while (c < n * 2)
        c <<= 1;
    return c;
}

/* ---- lookups -------------------------------------------------------------------------- */

static const struct policy__exact *m__exact(const struct policy__matcher *m, const char *name,
                                            size_t len)
{
    if (!m->exact)
        return NULL;
    uint64_t h = compile__hash(name, len, 0);
    for (uint64_t i = h & m->exact_mask;; i = (i + 1) & m->exact_mask) {
        const struct policy__exact *e = &m->exact[i];
        if (!e->name)
            return NULL;
        if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
            return e;
    }
}

static uint32_t m__child(const struct policy__matcher *m, uint32_t parent, const char *label,
                         size_t len)
{
    if (!m->edges)
        return 0;
    uint64_t h = compile__hash(label, len, parent + 1);
    for (uint64_t i = h & m->edge_mask;; i = (i + 1) & m->edge_mask) {
        const struct policy__edge *e = &m->edges[i];
        if (!e->child)
            return 0;
        if (e->hash == h && e->parent == parent && e->len == len &&
            memcmp(e->label, label, len) == 0)
            return e->child;
    }
}

/* Iterates, in ascending order and without repeats, the rules whose host patterns match a
 * canonical name. */
#define ITER_MAX_CAND (2 * 130 + 4)
struct name__cand {
    const uint32_t *idx;          /* plain list */
    const struct policy__glob *g; /* or glob list, filtered by label */
    uint32_t n, pos;
    const char *label;
    uint32_t llen;
};

struct name__iter {
    const struct policy__matcher *m;
    struct name__cand c[ITER_MAX_CAND];
    size_t n;
};

static void iter__add_list(struct name__iter *it, struct policy__list l)
{
    if (l.n && it->n < ITER_MAX_CAND)
        it->c[it->n++] = (struct name__cand){.idx = it->m->idx + l.off, .n = l.n};
}

static void iter__init(struct name__iter *it, const struct policy__matcher *m, const char *name,
                       size_t len)
{
    it->m = m;
    it->n = 0;
    const struct policy__exact *e = m__exact(m, name, len);
    if (e)
        iter__add_list(it, e->rules);
    if (!m->n_nodes)
        return;
    /* Walk labels from the right; at node "suffix", the labels left of it are name[0..start-1). */
    uint32_t node = 0;
    size_t end = len;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && name[start - 1] != '.')
            start--;
        uint32_t child = m__child(m, node, name + start, end - start);
        if (!child)
            break;
        node = child;
        if (start == 0)
            break; /* the apex itself: wildcards never match it */
        const struct policy__node *nd = &m->nodes[node];
        iter__add_list(it, nd->any);
        size_t pre = start - 1;
        if (!memchr(name, '.', pre)) {
            iter__add_list(it, nd->one);
            if (nd->n_glob && it->n < ITER_MAX_CAND)
                it->c[it->n++] = (struct name__cand){.g = m->globs + nd->glob_off,
                                                     .n = nd->n_glob,
                                                     .label = name,
                                                     .llen = (uint32_t)pre};
        }
        end = start - 1;
    }
}

static uint32_t iter__head(struct name__cand *c)
{
    if (c->g) {
        while (c->pos < c->n &&
               !policy__glob_label_match(c->g[c->pos].glob, c->g[c->pos].len, c->label, c->llen))
            c->pos++;
        return c->pos < c->n ? c->g[c->pos].rule : UINT32_MAX;
    }
    return c->pos < c->n ? c->idx[c->pos] : UINT32_MAX;
}

static uint32_t iter__next(struct name__iter *it)
{
    uint32_t best = UINT32_MAX;
    for (size_t i = 0; i < it->n; i++) {
        uint32_t h = iter__head(&it->c[i]);
        if (h < best)
            best = h;
    }
    if (best == UINT32_MAX)
        return best;
    for (size_t i = 0; i < it->n; i++)
        if (iter__head(&it->c[i]) == best)
            it->c[i].pos++;
    return best;
}

int policy__for_each_name_match(const struct policy *p, const char *name, size_t len,
                                int (*fn)(void *ctx, uint32_t rule), void *ctx)
{
    struct name__iter *it = malloc(sizeof *it);
    if (!it)
        return -ENOMEM;
    iter__init(it, &p->m, name, len);
    int rc = 0;
    for (uint32_t r; (r = iter__next(it)) != UINT32_MAX;)
        if ((rc = fn(ctx, r)))
            break;
    free(it);
    return rc;
}

/* ---- building ------------------------------------------------------------------------- */

struct compile__wild {
    uint32_t node, rule;
    enum policy_pattern_kind kind;
    const char *glob;
};

static uint32_t compile__edge(struct policy *p, uint32_t parent, const char *label, size_t len,
                              uint32_t *n_nodes)
{
    struct policy__matcher *m = &p->m;
    uint64_t h = compile__hash(label, len, parent + 1);
    for (uint64_t i = h & m->edge_mask;; i = (i + 1) & m->edge_mask) {
        struct policy__edge *e = &m->edges[i];
        if (!e->child) {
            e->hash = h;
            e->parent = parent;
            e->label = label;
            e->len = (uint32_t)len;
            e->child = (*n_nodes)++;
            return e->child;
        }
        if (e->hash == h && e->parent == parent && e->len == len &&
            memcmp(e->label, label, len) == 0)
            return e->child;
    }
}

int policy__compile(struct policy *p)
{
    struct policy__matcher *m = &p->m;
    size_t n_exact = 0, n_wild = 0, n_labels = 0, n_cidr = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        const struct policy__rule *ru = &p->rules[r];
        for (size_t i = 0; i < ru->pub.n_hosts; i++) {
            if (ru->patterns[i].kind == POLICY_PATTERN_EXACT) {
                n_exact++;
            } else {
                n_wild++;
                n_labels += 1;
                for (const char *s = ru->patterns[i].base; *s; s++)
                    n_labels += *s == '.';
            }
        }
        n_cidr += ru->pub.n_cidrs ? 1 : 0;
    }
    int rc = -ENOMEM;
    uint32_t *slot_of = NULL; /* exact entry -> slot */
    struct compile__wild *wild = NULL;
    uint32_t *count = NULL;
    size_t total_idx = 0;

    /* Exact names: insert keys, count rules per key, then fill ascending lists. */
    if (n_exact) {
        uint64_t cap = compile__pow2(n_exact);
        m->exact = policy__alloc(&p->arena, cap * sizeof *m->exact);
        slot_of = malloc(n_exact * sizeof *slot_of);
        if (!m->exact || !slot_of)
            goto out;
        m->exact_mask = cap - 1;
        size_t k = 0;
        for (size_t r = 0; r < p->n_rules; r++) {
            const struct policy__rule *ru = &p->rules[r];
            for (size_t i = 0; i < ru->pub.n_hosts; i++) {
                if (ru->patterns[i].kind != POLICY_PATTERN_EXACT)
                    continue;
                const char *name = ru->patterns[i].text;
                size_t len = strlen(name);
                uint64_t h = compile__hash(name, len, 0);
                uint64_t s = h & m->exact_mask;
                for (;; s = (s + 1) & m->exact_mask) {
                    struct policy__exact *e = &m->exact[s];
                    if (!e->name) {
                        e->name = name;
                        e->len = (uint32_t)len;
                        e->hash = h;
                        break;
                    }
                    if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
                        break;
                }
                m->exact[s].rules.n++;
                slot_of[k++] = (uint32_t)s;
            }
        }
        for (uint64_t s = 0; s <= m->exact_mask; s++) {
            if (m->exact[s].name) {
                m->exact[s].rules.off = (uint32_t)total_idx;
                total_idx += m->exact[s].rules.n;
                m->exact[s].rules.n = 0;
            }
        }
    }

    /* Wildcards: build the trie over the bases, remember (node, kind, rule). */
    if (n_wild) {
        uint64_t cap = compile__pow2(n_labels);
        m->edges = policy__alloc(&p->arena, cap * sizeof *m->edges);
        wild = malloc(n_wild * sizeof *wild);
        if (!m->edges || !wild)
            goto out;
        m->edge_mask = cap - 1;
        uint32_t n_nodes = 1;
        size_t k = 0;
        for (size_t r = 0; r < p->n_rules; r++) {
            const struct policy__rule *ru = &p->rules[r];
            for (size_t i = 0; i < ru->pub.n_hosts; i++) {
                const struct policy_pattern *pat = &ru->patterns[i];
                if (pat->kind == POLICY_PATTERN_EXACT)
                    continue;
                const char *b = pat->base;
                size_t end = strlen(b);
                uint32_t node = 0;
                while (end > 0) {
                    size_t start = end;
                    while (start > 0 && b[start - 1] != '.')
                        start--;
                    node = compile__edge(p, node, b + start, end - start, &n_nodes);
                    if (start == 0)
                        break;
                    end = start - 1;
                }
                wild[k++] = (struct compile__wild){node, (uint32_t)r, pat->kind, pat->glob};
            }
        }
        m->n_nodes = n_nodes;
        m->nodes = policy__alloc(&p->arena, n_nodes * sizeof *m->nodes);
        if (!m->nodes)
            goto out;
        size_t n_globs = 0;
        for (size_t i = 0; i < n_wild; i++) {
            struct policy__node *nd = &m->nodes[wild[i].node];
            if (wild[i].kind == POLICY_PATTERN_ONE)
                nd->one.n++;
            else if (wild[i].kind == POLICY_PATTERN_ANY)
                nd->any.n++;
            else
                nd->n_glob++;
        }
        size_t goff = 0;
        for (uint32_t i = 0; i < n_nodes; i++) {
            struct policy__node *nd = &m->nodes[i];
            nd->one.off = (uint32_t)total_idx;
            total_idx += nd->one.n;
            nd->any.off = (uint32_t)total_idx;
            total_idx += nd->any.n;
            nd->glob_off = (uint32_t)goff;
            goff += nd->n_glob;
            nd->one.n = nd->any.n = nd->n_glob = 0;
        }
        n_globs = goff;
        m->globs = policy__alloc(&p->arena, (n_globs ? n_globs : 1) * sizeof *m->globs);
        if (!m->globs)
            goto out;
    }

    m->idx = policy__alloc(&p->arena, (total_idx ? total_idx : 1) * sizeof *m->idx);
    if (!m->idx)
        goto out;
    /* Second pass: fill lists in rule order, so each list is ascending. */
    if (n_exact) {
        size_t k = 0;
        for (size_t r = 0; r < p->n_rules; r++) {
            const struct policy__rule *ru = &p->rules[r];
            for (size_t i = 0; i < ru->pub.n_hosts; i++) {
                if (ru->patterns[i].kind != POLICY_PATTERN_EXACT)
                    continue;
                struct policy__exact *e = &m->exact[slot_of[k++]];
                m->idx[e->rules.off + e->rules.n++] = (uint32_t)r;
            }
        }
    }
    for (size_t i = 0; i < n_wild; i++) {
        struct policy__node *nd = &m->nodes[wild[i].node];
        if (wild[i].kind == POLICY_PATTERN_ONE) {
            m->idx[nd->one.off + nd->one.n++] = wild[i].rule;
        } else if (wild[i].kind == POLICY_PATTERN_ANY) {
            m->idx[nd->any.off + nd->any.n++] = wild[i].rule;
        } else {
            struct policy__glob *g = &m->globs[nd->glob_off + nd->n_glob++];
            g->rule = wild[i].rule;
            g->glob = wild[i].glob;
            g->len = (uint32_t)strlen(wild[i].glob);
        }
    }
    m->cidr_rules = policy__alloc(&p->arena, (n_cidr ? n_cidr : 1) * sizeof *m->cidr_rules);
    if (!m->cidr_rules)
        goto out;
    for (size_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].pub.n_cidrs)
            m->cidr_rules[m->n_cidr_rules++] = (uint32_t)r;
    rc = 0;
out:
    free(slot_of);
    free(wild);
    free(count);
    return rc;
}

/* ---- decisions ------------------------------------------------------------------------ */

static const char *const compile__reasons[POLICY_R__COUNT] = {
    "rule_allows",
    "rule_denies",
    "no_rule_matched",
    "scheme_not_allowed",
    "port_not_allowed",
    "method_not_allowed",
    "path_not_allowed",
    "internal_address",
    "invalid_host",
    "invalid_path",
    "invalid_request",
    "address_mismatch",
    "sandbox_network_denies",
    "dns_disabled",
    "request_body_not_allowed",
};

const char *policy_reason_code(enum policy_reason r)
{
    return (unsigned)r < POLICY_R__COUNT ? compile__reasons[r] : "unknown";
}

bool policy_reason_is_malformed(enum policy_reason r)
{
    return r == POLICY_R_BODY;
}

enum { ST_NONE = 0, ST_SCHEME, ST_PORT, ST_METHOD, ST_PATH, ST_FULL };

struct decide__q {
    enum policy_scheme scheme;
    uint16_t port;
    const char *method;
    size_t method_len;
    uint32_t method_bit;
    const char *path; /* normalised, or NULL (connection level) */
};

static bool decide__port_ok(const struct policy_rule *r, uint16_t port)
{
    for (size_t i = 0; i < r->n_ports; i++)
        if (port >= r->ports[i].lo && port <= r->ports[i].hi)
            return true;
    return false;
}

static int decide__eval(const struct policy__rule *r, const struct decide__q *q)
{
    if (r->pub.scheme != POLICY_SCHEME_TCP && r->pub.scheme != q->scheme)
        return ST_SCHEME;
    if (!decide__port_ok(&r->pub, q->port))
        return ST_PORT;
    if (!q->method)
        return ST_FULL;
    if (r->pub.n_methods) {
        bool ok = false;
        if (q->method_bit) {
            ok = (r->method_bits & q->method_bit) != 0;
        } else {
            for (size_t i = 0; i < r->n_ext_methods && !ok; i++)
                ok = strlen(r->ext_methods[i]) == q->method_len &&
                     memcmp(r->ext_methods[i], q->method, q->method_len) == 0;
        }
        if (!ok)
            return ST_METHOD;
    }
    if (r->pub.n_paths) {
        bool ok = false;
        for (size_t i = 0; i < r->pub.n_paths && !ok; i++)
            ok = policy_path_match(r->pub.paths[i], q->path);
        if (!ok)
            return ST_PATH;
    }
    return ST_FULL;
}

/* First-match evaluation over an ordered stream of candidate rules. */
struct decide__walk {
    const struct policy__rule *matched; /* request level: full match */
    const struct policy__rule *near;    /* best near miss among allow rules */
    int near_stage;
    /* connection level */
    const struct policy__rule *decided; /* first unconditional match */
    const struct policy__rule *maybe;   /* first conditional allow before it */
    bool conditional_seen;
};

/* Returns true when the walk is finished. */
static bool decide__step(struct decide__walk *w, const struct policy__rule *r,
                         const struct decide__q *q)
{
    int st = decide__eval(r, q);
    if (st != ST_FULL) {
        if (r->pub.action == POLICY_ACTION_ALLOW && st > w->near_stage) {
            w->near_stage = st;
            w->near = r;
        }
        return false;
    }
    if (q->method) {
        w->matched = r;
        return true;
    }
    if (r->conditional) {
        w->conditional_seen = true;
        if (r->pub.action == POLICY_ACTION_ALLOW && !w->maybe)
            w->maybe = r;
        return false;
    }
    w->decided = r;
    return true;
}

static enum policy_reason decide__near_reason(int stage)
{
    switch (stage) {
    case ST_SCHEME:
        return POLICY_R_SCHEME;
    case ST_PORT:
        return POLICY_R_PORT;
    case ST_METHOD:
        return POLICY_R_METHOD;
    case ST_PATH:
        return POLICY_R_PATH;
    default:
        return POLICY_R_NO_RULE;
    }
}

/* Turns a finished walk into a verdict. */
static void decide__finish(const struct decide__walk *w, const struct decide__q *q,
                           struct policy_decision *out)
{
    out->verdict = POLICY_DENY;
    out->tls = POLICY_TLS_NONE;
    if (q->method) {
        if (w->matched) {
            const struct policy__rule *r = w->matched;
            out->rule = &r->pub;
            if (r->pub.action == POLICY_ACTION_ALLOW) {
                out->verdict = POLICY_ALLOW;
                out->reason = POLICY_R_RULE_ALLOWS;
                out->tls = r->pub.tls;
                out->websocket = r->pub.websocket;
                out->inject = r->pub.inject;
                out->n_inject = r->pub.n_inject;
            } else {
                out->reason = POLICY_R_RULE_DENIES;
            }
            return;
        }
    } else {
        const struct policy__rule *allow = NULL;
        bool inspect = w->conditional_seen;
        if (w->decided && w->decided->pub.action == POLICY_ACTION_ALLOW)
            allow = w->decided;
        else if (w->maybe)
            allow = w->maybe, inspect = true;
        if (allow) {
            out->verdict = POLICY_ALLOW;
            out->reason = POLICY_R_RULE_ALLOWS;
            out->rule = &allow->pub;
            if (q->scheme == POLICY_SCHEME_HTTPS && allow->pub.scheme != POLICY_SCHEME_TCP)
                out->tls = inspect ? POLICY_TLS_INSPECT : allow->pub.tls;
            else if (q->scheme == POLICY_SCHEME_HTTPS)
                out->tls = POLICY_TLS_PASSTHROUGH;
            return;
        }
        if (w->decided) {
            out->rule = &w->decided->pub;
            out->reason = POLICY_R_RULE_DENIES;
            return;
        }
    }
    out->rule = w->near ? &w->near->pub : NULL;
    out->reason = decide__near_reason(w->near ? w->near_stage : ST_NONE);
}

static void decide__names(const struct policy *p, const char *name, size_t len,
                          const struct decide__q *q, struct policy_decision *out)
{
    struct name__iter it;
    iter__init(&it, &p->m, name, len);
    struct decide__walk w = {0};
    for (uint32_t r; (r = iter__next(&it)) != UINT32_MAX;)
        if (decide__step(&w, &p->rules[r], q))
            break;
    decide__finish(&w, q, out);
}

static bool decide__cidr_match(const struct policy__rule *r, const struct policy_addr *a)
{
    for (size_t i = 0; i < r->pub.n_cidrs; i++)
        if (policy__cidr_contains(&r->cidrs[i], a))
            return true;
    return false;
}

static void decide__addrs(const struct policy *p, const struct policy_addr *a,
                          const struct decide__q *q, struct policy_decision *out)
{
    struct decide__walk w = {0};
    for (uint32_t i = 0; i < p->m.n_cidr_rules; i++) {
        const struct policy__rule *r = &p->rules[p->m.cidr_rules[i]];
        if (decide__cidr_match(r, a) && decide__step(&w, r, q))
            break;
    }
    decide__finish(&w, q, out);
}

static bool narrow__names(const struct policy_pattern *v, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (policy_pattern_match(&v[i], name, len))
            return true;
    return false;
}

static bool narrow__cidrs(const struct policy__cidr *v, size_t n, const struct policy_addr *a)
{
    for (size_t i = 0; i < n; i++)
        if (policy__cidr_contains(&v[i], a))
            return true;
    return false;
}

/* E2B semantics: allowOut wins over denyOut; 0.0.0.0/0 in denyOut means all traffic. */
static bool narrow__pass(const struct policy__narrow *n, const char *name, size_t len,
                         const struct policy_addr *a)
{
    if (name && narrow__names(n->allow_names, n->n_allow_names, name, len))
        return true;
    if (a && narrow__cidrs(n->allow_cidrs, n->n_allow_cidrs, a))
        return true;
    if (n->deny_all)
        return false;
    if (name && narrow__names(n->deny_names, n->n_deny_names, name, len))
        return false;
    if (a && narrow__cidrs(n->deny_cidrs, n->n_deny_cidrs, a))
        return false;
    return true;
}

static bool decide__narrowed(const struct policy *p, const char *name, size_t len,
                             const struct policy_addr *a)
{
    for (const struct policy *q = p; q && q->narrow; q = q->base)
        if (!narrow__pass(q->narrow, name, len, a))
            return true;
    return false;
}

bool policy_narrowing_passes(const struct policy *p, const char *name, size_t len,
                             const struct policy_addr *a)
{
    return !decide__narrowed(p, name, len, a);
}

static bool decide__reportable(enum policy_reason r)
{
    return r == POLICY_R_RULE_DENIES || r == POLICY_R_NO_RULE || r == POLICY_R_SCHEME ||
           r == POLICY_R_PORT || r == POLICY_R_METHOD || r == POLICY_R_PATH;
}

static void decide__report(const struct policy *p, const struct decide__q *q,
                           struct policy_decision *out)
{
    if (out->verdict == POLICY_ALLOW || !decide__reportable(out->reason))
        return;
    bool report = p->mode == POLICY_MODE_REPORT || (out->rule && out->rule->report);
    if (!report)
        return;
    out->verdict = POLICY_ALLOW;
    out->would_deny = true;
    out->inject = NULL;
    out->n_inject = 0;
    out->websocket = false;
    if (q->scheme == POLICY_SCHEME_HTTPS)
        out->tls = out->rule && out->rule->scheme == POLICY_SCHEME_HTTPS ? out->rule->tls
                                                                         : POLICY_TLS_PASSTHROUGH;
    else
        out->tls = POLICY_TLS_NONE;
}

/* An allow taken back by a check after the rules (never relaxed by report mode). */
static void decide__revoke(struct policy_decision *out, enum policy_reason reason)
{
    out->verdict = POLICY_DENY;
    out->would_deny = false;
    out->reason = reason;
    out->inject = NULL;
    out->n_inject = 0;
    out->tls = POLICY_TLS_NONE;
    out->websocket = false;
}

/* A body on a method without body semantics reaches an upstream that may ignore its framing
 * and run the body as a request nobody decided (CL.0 smuggling): allowed only where the
 * rule that genuinely allows the request lists the method in body_methods. Not a policy
 * choice that report mode relaxes: a would_deny request never has the opt-in. */
static void decide__body(const struct policy_request *req, const struct decide__q *q,
                         struct policy_decision *out)
{
    if (!req->body || !q->method || out->verdict != POLICY_ALLOW ||
        !(q->method_bit & POLICY__M_NO_BODY))
        return;
    if (out->rule && !out->would_deny) {
        const struct policy__rule *r = (const struct policy__rule *)out->rule;
        if (r->body_bits & q->method_bit)
            return;
    }
    decide__revoke(out, POLICY_R_BODY);
}

static int decide__core(const struct policy *p, const struct policy_request *req,
                        struct policy_decision *out);

/* A request a rule with `api_transforms: allow` allows toward a name gets the headers of the
 * sandbox's transform for it (the innermost narrowing's: an update replaces them). */
static void decide__transforms(const struct policy *p, const struct policy_request *req,
                               struct policy_decision *out)
{
    const struct policy__narrow *nw = p->narrow;
    if (!nw || nw->n_transforms == 0 || !req->method || out->verdict != POLICY_ALLOW ||
        !out->rule || !out->rule->api_transforms || out->host.kind != POLICY_HOST_NAME)
        return;
    long t =
        policy_transform_pick(nw->tdomain_ptrs, nw->n_transforms, out->host.text, out->host.len);
    if (t < 0)
        return;
    size_t i = (size_t)t * p->n_rules + out->rule->index;
    if (nw->tinject[i]) {
        out->inject = nw->tinject[i];
        out->n_inject = nw->tn_inject[i];
    }
}

int policy_decide(const struct policy *p, const struct policy_request *req,
                  struct policy_decision *out)
{
    int rc = decide__core(p, req, out);
    if (rc == 0 && p && req)
        decide__transforms(p, req, out);
    return rc;
}

static int decide__core(const struct policy *p, const struct policy_request *req,
                        struct policy_decision *out)
{
    memset(out, 0, offsetof(struct policy_decision, host));
    out->host.kind = 0;
    out->host.len = 0;
    out->host.text[0] = '\0';
    out->host.zone[0] = '\0';
    memset(&out->addr_info, 0, sizeof out->addr_info);
    out->verdict = POLICY_DENY;
    out->reason = POLICY_R_INVALID_REQUEST;
    if (!p || !req || req->port == 0 || (req->method && !req->path) ||
        (!req->method && req->path) || (unsigned)req->scheme > POLICY_SCHEME_TCP)
        return 0;
    struct decide__q q = {.scheme = req->scheme, .port = req->port};
    char path[POLICY_PATH_MAX + 1];
    if (req->method) {
        if (req->scheme == POLICY_SCHEME_TCP ||
            !policy__method_token_valid(req->method, req->method_len))
            return 0;
        q.method = req->method;
        q.method_len = req->method_len;
        q.method_bit = policy__method_bit(req->method, req->method_len);
        if (policy_path_normalize(req->path, req->path_len, path, sizeof path, NULL)) {
            out->reason = POLICY_R_INVALID_PATH;
            return 0;
        }
        q.path = path;
    }
    const struct policy_addr *addr = req->addr;
    const char *name = NULL;
    size_t name_len = 0;
    if (req->host) {
        if (policy_host_canon(req->host, req->host_len, &out->host, NULL)) {
            out->reason = POLICY_R_INVALID_HOST;
            return 0;
        }
        if (out->host.kind == POLICY_HOST_ADDR) {
            if (addr && !policy_addr_equal(addr, &out->host.addr)) {
                /* An internal address in any spelling (0x7f.1, 2130706433,
                 * [::ffff:127.0.0.1]) is named as such, whatever address the connection
                 * went to, unless a CIDR rule opens it (then it is only a mismatch). */
                out->reason = POLICY_R_ADDR_MISMATCH;
                policy_addr_classify(&out->host.addr, &out->addr_info);
                if (out->addr_info.internal) {
                    struct policy_decision c;
                    memset(&c, 0, offsetof(struct policy_decision, host));
                    decide__addrs(p, &out->host.addr, &q, &c);
                    if (c.verdict != POLICY_ALLOW)
                        out->reason = POLICY_R_INTERNAL;
                }
                return 0;
            }
            addr = &out->host.addr;
        } else {
            name = out->host.text;
            name_len = out->host.len;
        }
    } else if (addr) {
        out->host.kind = POLICY_HOST_ADDR;
        out->host.addr = *addr;
        policy_addr_format(addr, out->host.text, sizeof out->host.text);
        out->host.len = strlen(out->host.text);
    } else {
        return 0;
    }
    if (addr)
        policy_addr_classify(addr, &out->addr_info);
    if (decide__narrowed(p, name, name_len, addr)) {
        out->reason = POLICY_R_NARROWED;
        return 0;
    }
    if (name) {
        decide__names(p, name, name_len, &q, out);
        if (out->verdict == POLICY_ALLOW && addr && out->addr_info.internal) {
            /* A name that leads to an internal address needs a CIDR rule that opens it. */
            struct policy_decision c;
            memset(&c, 0, offsetof(struct policy_decision, host));
            decide__addrs(p, addr, &q, &c);
            if (c.verdict != POLICY_ALLOW) {
                decide__revoke(out, POLICY_R_INTERNAL);
                return 0;
            }
        }
    } else {
        decide__addrs(p, addr, &q, out);
        if (out->verdict != POLICY_ALLOW && out->addr_info.internal) {
            out->reason = POLICY_R_INTERNAL;
            out->rule = NULL;
            return 0;
        }
    }
    decide__report(p, &q, out);
    decide__body(req, &q, out);
    return 0;
}

/* ---- DNS ------------------------------------------------------------------------------ */

struct dns__cover {
    enum policy_scheme scheme;
    uint16_t lo, hi;
};

/* Are all (scheme, port) pairs of r covered by earlier unconditional deny rules? */
static bool dns__covered(const struct policy__rule *r, const struct dns__cover *c, size_t n)
{
    for (size_t i = 0; i < r->pub.n_ports; i++) {
        uint32_t p = r->pub.ports[i].lo;
        while (p <= r->pub.ports[i].hi) {
            bool moved = false;
            for (size_t k = 0; k < n; k++) {
                if ((c[k].scheme == r->pub.scheme || c[k].scheme == POLICY_SCHEME_TCP) &&
                    p >= c[k].lo && p <= c[k].hi) {
                    p = (uint32_t)c[k].hi + 1;
                    moved = true;
                }
            }
            if (!moved)
                return false;
        }
    }
    return true;
}

int policy_dns_decide(const struct policy *p, const char *name, size_t len,
                      struct policy_decision *out)
{
    memset(out, 0, offsetof(struct policy_decision, host));
    out->host.text[0] = '\0';
    out->host.len = 0;
    out->host.kind = 0;
    memset(&out->addr_info, 0, sizeof out->addr_info);
    out->verdict = POLICY_DENY;
    if (!p || policy_host_canon(name, len, &out->host, NULL) ||
        out->host.kind != POLICY_HOST_NAME) {
        out->reason = POLICY_R_INVALID_HOST;
        return 0;
    }
    if (p->dns.resolve == POLICY_DNS_NONE) {
        out->reason = POLICY_R_DNS_DISABLED;
        return 0;
    }
    if (decide__narrowed(p, out->host.text, out->host.len, NULL)) {
        out->reason = POLICY_R_NARROWED;
        return 0;
    }
    struct name__iter it;
    iter__init(&it, &p->m, out->host.text, out->host.len);
    struct dns__cover cover[32];
    size_t nc = 0;
    out->reason = POLICY_R_NO_RULE;
    for (uint32_t ri; (ri = iter__next(&it)) != UINT32_MAX;) {
        const struct policy__rule *r = &p->rules[ri];
        if (r->pub.action == POLICY_ACTION_ALLOW) {
            if (!dns__covered(r, cover, nc)) {
                out->verdict = POLICY_ALLOW;
                out->reason = POLICY_R_RULE_ALLOWS;
                out->rule = &r->pub;
                return 0;
            }
            continue;
        }
        if (!out->rule) {
            out->rule = &r->pub;
            out->reason = POLICY_R_RULE_DENIES;
        }
        if (r->conditional)
            continue;
        for (size_t i = 0; i < r->pub.n_ports && nc < 32; i++)
            cover[nc++] =
                (struct dns__cover){r->pub.scheme, r->pub.ports[i].lo, r->pub.ports[i].hi};
    }
    if (p->mode == POLICY_MODE_REPORT || (out->rule && out->rule->report)) {
        out->verdict = POLICY_ALLOW;
        out->would_deny = true;
    }
    return 0;
}

/* ---- explanations --------------------------------------------------------------------- */

static const char *explain__scheme(enum policy_scheme s)
{
    return s == POLICY_SCHEME_HTTPS ? "https" : s == POLICY_SCHEME_HTTP ? "http" : "tcp";
}

static size_t explain__ports(const struct policy_rule *r, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_ports && o + 16 < len; i++) {
        int n = r->ports[i].lo == r->ports[i].hi
                    ? snprintf(buf + o, len - o, "%s%u", i ? ", " : "", r->ports[i].lo)
                    : snprintf(buf + o, len - o, "%s%u-%u", i ? ", " : "", r->ports[i].lo,
                               r->ports[i].hi);
        o += (size_t)(n > 0 ? n : 0);
    }
    return o;
}

static void explain__list(const char *const *v, size_t n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 4 < len; i++) {
        int k = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", v[i]);
        if (k < 0 || (size_t)k >= len - o)
            break;
        o += (size_t)k;
    }
}

size_t policy_explain(const struct policy *p, const struct policy_request *req,
                      const struct policy_decision *d, char *buf, size_t len)
{
    char what[600], list[400], extra[AL_ERROR_MSG_MAX + 64];
    const char *host = d->host.len ? d->host.text : "(no host)";
    unsigned port = req ? req->port : 0;
    const char *scheme = explain__scheme(req ? req->scheme : POLICY_SCHEME_HTTPS);
    if (req && req->method)
        snprintf(what, sizeof what, "%.*s %s://%s:%u%.*s", (int)req->method_len, req->method,
                 scheme, host, port, (int)(req->path_len > 200 ? 200 : req->path_len), req->path);
    else if (req)
        snprintf(what, sizeof what, "%s connection to %s:%u", scheme, host, port);
    else
        snprintf(what, sizeof what, "name %s", host);
    const struct policy_rule *r = d->rule;
    const char *rn = r ? r->name : "";
    unsigned rl = r ? r->line : 0;
    int n = 0;
    const char *prefix = d->would_deny ? "report mode, would deny: " : "";
    switch (d->reason) {
    case POLICY_R_RULE_ALLOWS:
        if (d->tls == POLICY_TLS_INSPECT)
            snprintf(extra, sizeof extra, " (TLS inspected%s)",
                     d->n_inject ? ", credentials injected" : "");
        else if (d->tls == POLICY_TLS_PASSTHROUGH)
            snprintf(extra, sizeof extra, " (TLS passthrough)");
        else
            extra[0] = '\0';
        n = snprintf(buf, len, "rule '%s' (line %u) allows %s%s", rn, rl, what, extra);
        break;
    case POLICY_R_RULE_DENIES:
        n = snprintf(buf, len, "%srule '%s' (line %u) denies %s", prefix, rn, rl, what);
        break;
    case POLICY_R_NO_RULE:
        n = snprintf(buf, len, "%sno rule matches %s; everything a rule does not allow is denied",
                     prefix, what);
        break;
    case POLICY_R_SCHEME:
        n = snprintf(buf, len, "%srule '%s' (line %u) names %s but for scheme %s, not %s", prefix,
                     rn, rl, host, explain__scheme(r->scheme), scheme);
        break;
    case POLICY_R_PORT:
        explain__ports(r, list, sizeof list);
        n = snprintf(buf, len, "%srule '%s' (line %u) allows %s only on port(s) %s, not %u", prefix,
                     rn, rl, host, list, port);
        break;
    case POLICY_R_METHOD:
        explain__list(r->methods, r->n_methods, list, sizeof list);
        n = snprintf(buf, len, "%srule '%s' (line %u) allows %s but not method %.*s (allowed: %s)",
                     prefix, rn, rl, host, req ? (int)req->method_len : 0,
                     req && req->method ? req->method : "", list);
        break;
    case POLICY_R_PATH:
        explain__list(r->paths, r->n_paths, list, sizeof list);
        n = snprintf(buf, len, "%srule '%s' (line %u) allows %s but not path %.*s (allowed: %s)",
                     prefix, rn, rl, host,
                     req ? (int)(req->path_len > 200 ? 200 : req->path_len) : 0,
                     req && req->path ? req->path : "", list);
        break;
    case POLICY_R_INTERNAL:
        n = snprintf(buf, len,
                     "%s is %s: internal and special addresses are refused unless a cidrs rule "
                     "opens them",
                     d->host.kind == POLICY_HOST_ADDR ? host : "the destination address",
                     d->addr_info.reason ? d->addr_info.reason : "internal");
        break;
    case POLICY_R_INVALID_HOST: {
        struct al_error err = {0};
        struct policy_host h;
        if (req && req->host)
            policy_host_canon(req->host, req->host_len, &h, &err);
        else
            snprintf(err.msg, sizeof err.msg, "no valid name");
        n = snprintf(buf, len, "the host is refused: %s", err.msg);
        break;
    }
    case POLICY_R_INVALID_PATH: {
        struct al_error err = {0};
        char tmp[POLICY_PATH_MAX + 1];
        if (req && req->path)
            policy_path_normalize(req->path, req->path_len, tmp, sizeof tmp, &err);
        n = snprintf(buf, len, "the path is refused: %s", err.msg);
        break;
    }
    case POLICY_R_BODY:
        explain__list(r ? r->body_methods : NULL, r ? r->n_body_methods : 0, list, sizeof list);
        n = snprintf(buf, len,
                     "%s carries a request body, which %.*s requests have no use for: an upstream "
                     "that ignores it would run the body as a request the policy never decided "
                     "(request smuggling); refused unless the allowing rule lists the method in "
                     "body_methods (rule '%s': %s)",
                     what, req ? (int)req->method_len : 0, req && req->method ? req->method : "",
                     r ? rn : "none", r && r->n_body_methods ? list : "none");
        break;
    case POLICY_R_INVALID_REQUEST:
        n = snprintf(buf, len,
                     "the request is malformed (port 0, a method that is not an HTTP token, a "
                     "method on raw TCP, or no host and no address)");
        break;
    case POLICY_R_ADDR_MISMATCH:
        n = snprintf(buf, len, "the host %s is an address other than the connection's destination",
                     host);
        break;
    case POLICY_R_NARROWED:
        n = snprintf(buf, len,
                     "the sandbox's network settings (E2B allow_internet_access / "
                     "network.allowOut / network.denyOut) deny %s",
                     what);
        break;
    case POLICY_R_DNS_DISABLED:
        n = snprintf(buf, len, "the policy's dns.resolve is none: sandboxes resolve no names");
        break;
    default:
        n = snprintf(buf, len, "%s", policy_reason_code(d->reason));
        break;
    }
    (void)p;
    return n < 0 ? 0 : ((size_t)n >= len ? len - 1 : (size_t)n);
}

void policy__for_each_wild_cover(const struct policy *p, const struct policy_pattern *pat,
                                 void (*fn)(void *ctx, uint32_t rule), void *ctx)
{
    const struct policy__matcher *m = &p->m;
    if (!m->n_nodes || pat->kind == POLICY_PATTERN_EXACT)
        return;
    const char *b = pat->base;
    size_t end = strlen(b);
    uint32_t node = 0;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && b[start - 1] != '.')
            start--;
        node = m__child(m, node, b + start, end - start);
        if (!node)
            return;
        const struct policy__node *nd = &m->nodes[node];
        for (uint32_t i = 0; i < nd->any.n; i++)
            fn(ctx, m->idx[nd->any.off + i]);
        if (start == 0) {
            if (pat->kind != POLICY_PATTERN_ANY)
                for (uint32_t i = 0; i < nd->one.n; i++)
                    fn(ctx, m->idx[nd->one.off + i]);
            if (pat->kind == POLICY_PATTERN_GLOB)
                for (uint32_t i = 0; i < nd->n_glob; i++)
                    if (strcmp(m->globs[nd->glob_off + i].glob, pat->glob) == 0)
                        fn(ctx, m->globs[nd->glob_off + i].rule);
            return;
        }
        end = start - 1;
    }
}
