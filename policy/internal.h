/* policy/internal: what the files of policy/ share and nobody else sees — the compiled
 * policy, the matcher's tables, the arena every policy allocates from, and the checks
 * that lint and parse have in common. */
#ifndef AIRLOCK_POLICY_INTERNAL_H
#define AIRLOCK_POLICY_INTERNAL_H

#include "policy/policy.h"

#include <stdatomic.h>

/* ---- arena: one per policy, freed at once ---------------------------------------------- */

struct policy__block;
struct policy__arena {
    struct policy__block *head;
};
void *policy__alloc(struct policy__arena *a, size_t size); /* zeroed; NULL on ENOMEM */
char *policy__strndup(struct policy__arena *a, const char *s, size_t n);
char *policy__strdup(struct policy__arena *a, const char *s);
void policy__arena_free(struct policy__arena *a);

/* ---- compiled rules -------------------------------------------------------------------- */

enum {
    POLICY__M_GET = 1u << 0,
    POLICY__M_HEAD = 1u << 1,
    POLICY__M_POST = 1u << 2,
    POLICY__M_PUT = 1u << 3,
    POLICY__M_DELETE = 1u << 4,
    POLICY__M_OPTIONS = 1u << 5,
    POLICY__M_PATCH = 1u << 6,
    POLICY__M_TRACE = 1u << 7,
    /* Methods whose requests have no body semantics (RFC 9110 9.3): a body needs a rule's
     * body_methods. */
    POLICY__M_NO_BODY =
        POLICY__M_GET | POLICY__M_HEAD | POLICY__M_OPTIONS | POLICY__M_DELETE | POLICY__M_TRACE,
};

struct policy__cidr {
    struct policy_addr net;
    uint8_t bits;
};

struct policy__rule {
    struct policy_rule pub; /* what callers see (points into the arena) */
    unsigned col;
    bool conditional;               /* has methods or paths: decided per request */
    uint32_t method_bits;           /* standard methods */
    uint32_t body_bits;             /* body_methods (POLICY__M_NO_BODY bits) */
    const char *const *ext_methods; /* other method tokens */
    size_t n_ext_methods;
    struct policy_pattern *patterns; /* pub.n_hosts of them */
    struct policy__cidr *cidrs;      /* pub.n_cidrs of them */
    const unsigned *host_lines;      /* positions of hosts/cidrs items, for lint */
    const unsigned *host_cols;
};

/* A list of rule indices (ascending) in matcher.idx. */
struct policy__list {
    uint32_t off, n;
};

struct policy__glob {
    uint32_t rule;
    const char *glob; /* the leftmost-label glob ("api-*") */
    uint32_t len;
};

struct policy__node {
    struct policy__list one;   /* *.<suffix> */
    struct policy__list any;   /* **.<suffix> */
    uint32_t glob_off, n_glob; /* matcher.globs, ascending rule order */
};

struct policy__exact {
    uint64_t hash;
    const char *name; /* NULL = empty slot */
    uint32_t len;
    struct policy__list rules;
};

struct policy__edge {
    uint64_t hash;
    uint32_t parent, child; /* child == 0: empty slot (node 0 is the root, never a child) */
    const char *label;
    uint32_t len;
};

struct policy__matcher {
    struct policy__exact *exact;
    uint64_t exact_mask;
    struct policy__edge *edges;
    uint64_t edge_mask;
    struct policy__node *nodes;
    uint32_t n_nodes;
    uint32_t *idx;
    struct policy__glob *globs;
    uint32_t *cidr_rules; /* indices of rules with cidrs, ascending */
    uint32_t n_cidr_rules;
};

struct policy__narrow {
    bool deny_all; /* denyOut has 0.0.0.0/0 or ::/0, or no internet */
    struct policy_pattern *allow_names;
    size_t n_allow_names;
    struct policy_pattern *deny_names;
    size_t n_deny_names;
    struct policy__cidr *allow_cidrs;
    size_t n_allow_cidrs;
    struct policy__cidr *deny_cidrs;
    size_t n_deny_cidrs;
    /* API-given header transforms: their canonical domains, and for transform t and rule r
     * the inject entries of a request r allows toward t's domain (tinject[t * n_rules + r],
     * NULL where r does not take API transforms). */
    size_t n_transforms;
    struct policy_pattern *tdomains;
    const struct policy_pattern **tdomain_ptrs;
    const struct policy_inject **tinject;
    size_t *tn_inject;
};

struct policy {
    atomic_int refs;
    struct policy__arena arena;
    struct policy *base;           /* narrowed view: holds a reference to base */
    struct policy__narrow *narrow; /* non-NULL for narrowed views */
    char *name, *description, *file;
    enum policy_mode mode;
    struct policy__rule *rules;
    size_t n_rules;
    struct policy_limits limits;
    struct policy_dns dns;
    struct policy_placeholder *placeholders;
    size_t n_placeholders;
    const char **intercepted;
    size_t n_intercepted;
    char *canonical; /* canonical JSON (arena) */
    char hash[POLICY_HASH_HEX_LEN + 1];
    struct policy__matcher m;
};

/* ---- shared helpers ------------------------------------------------------------------- */

bool policy__glob_label_match(const char *glob, size_t gl, const char *label, size_t ll);
bool policy__cidr_contains(const struct policy__cidr *c, const struct policy_addr *a);
/* Parses "10.0.0.0/8", "2001:db8::/32" or a bare address (host route). Host bits set,
 * odd IPv4 spellings and bad prefixes are errors. */
int policy__cidr_parse(const char *s, struct policy__cidr *out, struct al_error *err);
const char *policy__cidr_format(const struct policy__cidr *c, char *buf, size_t len);
const char *policy__cidr_internal_overlap(const struct policy__cidr *c, bool *metadata);
/* Canonical form of a validated path pattern (unreserved escapes decoded, others upper). */
int policy__path_pattern_canon(const char *in, char *out, size_t outlen, struct al_error *err);
/* Method token -> POLICY__M_* bit, or 0 for other tokens. */
uint32_t policy__method_bit(const char *m, size_t len);
bool policy__method_token_valid(const char *m, size_t len);

/* compile.c */
int policy__compile(struct policy *p);
/* Calls fn for every (rule, pattern) whose host pattern matches the canonical name, in
 * ascending rule order. Stops when fn returns non-zero and returns that value. */
int policy__for_each_name_match(const struct policy *p, const char *name, size_t len,
                                int (*fn)(void *ctx, uint32_t rule), void *ctx);
/* Calls fn for every rule with a wildcard pattern that matches every name the wildcard
 * pattern pat matches (**.t for t a suffix of pat's base; *.base for * and globs; the same
 * glob), in no particular order. */
void policy__for_each_wild_cover(const struct policy *p, const struct policy_pattern *pat,
                                 void (*fn)(void *ctx, uint32_t rule), void *ctx);

/* lint.c */
void policy__lint(const struct policy *p, struct al_diags *d);
void policy__lint_host(const struct policy_pattern *pat, const struct al_yaml_node *node,
                       const char *rule, struct al_diags *d);
void policy__lint_cidr(const struct policy__cidr *c, const struct al_yaml_node *node,
                       const char *rule, struct al_diags *d);
/* PSL: is name (canonical) a public suffix? icann_only: only the ICANN section (and the
 * implicit "*" rule: every unknown TLD is a suffix). */
bool policy__is_public_suffix(const char *name, bool icann_only);

/* hash.c */
int policy__canonicalize(struct policy *p);

#endif
