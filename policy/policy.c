/* policy/policy: loading (parse -> compile -> lint -> hash), lifetime (reference counts,
 * one arena per policy) and the read-only accessors of policy.h. */
#include "policy/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------------------- */

struct policy__block {
    struct policy__block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *policy__alloc(struct policy__arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    struct policy__block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *policy__strndup(struct policy__arena *a, const char *s, size_t n)
{
    char *d = policy__alloc(a, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *policy__strdup(struct policy__arena *a, const char *s)
{
    return s ? policy__strndup(a, s, strlen(s)) : NULL;
}

void policy__arena_free(struct policy__arena *a)
{
    struct policy__block *b = a->head;
    while (b) {
        struct policy__block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

/* ---- lifetime ------------------------------------------------------------------------- */

struct policy *policy_ref(struct policy *p)
{
    if (p)
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

void policy_unref(struct policy *p)
{
    while (p) {
        if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
            return;
        struct policy *base = p->base;
        policy__arena_free(&p->arena);
        free(p);
        p = base;
    }
}

/* ---- loading -------------------------------------------------------------------------- */

int policy__parse(struct policy *p, const struct al_yaml_node *root, const char *file,
                  struct al_diags *d);

static int policy__strptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Host patterns of inspecting rules, sorted and deduplicated. */
static void policy__intercepted(struct policy *p)
{
    size_t n = 0;
    for (size_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].pub.tls == POLICY_TLS_INSPECT)
            n += p->rules[r].pub.n_hosts;
    p->intercepted = policy__alloc(&p->arena, (n ? n : 1) * sizeof *p->intercepted);
    if (!p->intercepted)
        return;
    size_t k = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        const struct policy_rule *ru = &p->rules[r].pub;
        if (ru->tls == POLICY_TLS_INSPECT)
            for (size_t i = 0; i < ru->n_hosts; i++)
                p->intercepted[k++] = ru->hosts[i];
    }
    qsort(p->intercepted, k, sizeof *p->intercepted, policy__strptr_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m == 0 || strcmp(p->intercepted[m - 1], p->intercepted[i]) != 0)
            p->intercepted[m++] = p->intercepted[i];
    p->n_intercepted = m;
}

static struct policy *policy__from_doc(const struct al_yaml_doc *doc, const char *file,
                                       struct al_diags *d)
{
    struct policy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    atomic_init(&p->refs, 1);
    if (file)
        p->file = policy__strdup(&p->arena, file);
    size_t errors0 = d->errors;
    int rc = policy__parse(p, al_yaml_root(doc), file, d);
    if (rc == -ENOMEM || (rc == 0 && d->errors == errors0 && policy__compile(p)))
        al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "no_memory", "out of memory");
    if (d->errors != errors0) {
        policy_unref(p);
        return NULL;
    }
    policy__intercepted(p);
    policy__lint(p, d);
    if (policy__canonicalize(p)) {
        al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "no_memory", "out of memory");
        policy_unref(p);
        return NULL;
    }
    return p;
}

struct policy *policy_load_buffer(const char *text, size_t len, const char *file,
                                  struct al_diags *d)
{
    struct al_diags local = AL_DIAGS_INIT;
    struct al_diags *dd = d ? d : &local;
    struct al_yaml_doc *doc = NULL;
    struct policy *p = NULL;
    if (al_yaml_parse(text, len, file, NULL, &doc, dd) == 0)
        p = policy__from_doc(doc, file, dd);
    al_yaml_free(doc);
    al_diags_free(&local);
    return p;
}

struct policy *policy_load_file(const char *path, struct al_diags *d)
{
    struct al_diags local = AL_DIAGS_INIT;
    struct al_diags *dd = d ? d : &local;
    struct al_yaml_doc *doc = NULL;
    struct policy *p = NULL;
    if (al_yaml_load_file(path, NULL, &doc, dd) == 0)
        p = policy__from_doc(doc, path, dd);
    al_yaml_free(doc);
    al_diags_free(&local);
    return p;
}

/* ---- accessors ------------------------------------------------------------------------ */

const char *policy_name(const struct policy *p)
{
    return p->name;
}

const char *policy_description(const struct policy *p)
{
    return p->description;
}

const char *policy_file(const struct policy *p)
{
    return p->file;
}

const char *policy_hash(const struct policy *p)
{
    return p->hash;
}

enum policy_mode policy_mode(const struct policy *p)
{
    return p->mode;
}

size_t policy_rule_count(const struct policy *p)
{
    return p->n_rules;
}

const struct policy_rule *policy_rule_at(const struct policy *p, size_t i)
{
    return i < p->n_rules ? &p->rules[i].pub : NULL;
}

const struct policy_rule *policy_rule_find(const struct policy *p, const char *name)
{
    for (size_t i = 0; i < p->n_rules; i++)
        if (strcmp(p->rules[i].pub.name, name) == 0)
            return &p->rules[i].pub;
    return NULL;
}

const struct policy_limits *policy_limits(const struct policy *p)
{
    return &p->limits;
}

const struct policy_dns *policy_dns(const struct policy *p)
{
    return &p->dns;
}

const struct policy_placeholder *policy_placeholders(const struct policy *p, size_t *n)
{
    *n = p->n_placeholders;
    return p->placeholders;
}

const char *const *policy_intercepted_names(const struct policy *p, size_t *n)
{
    *n = p->n_intercepted;
    return p->intercepted;
}

char *policy_canonical_json(const struct policy *p)
{
    return p->canonical ? strdup(p->canonical) : NULL;
}
