/* common/yaml: see yaml.h. A strict event-driven reader over libyaml that builds a small
 * position-annotated tree in an arena, plus the diagnostics list and typed getters. */
#include "yaml.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- diagnostics ---------------------------------------------------------------------- */

void al_diags_init(struct al_diags *d)
{
    memset(d, 0, sizeof *d);
}

void al_diags_free(struct al_diags *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].file);
        free(d->v[i].code);
        free(d->v[i].msg);
    }
    free(d->v);
    size_t max = d->max;
    memset(d, 0, sizeof *d);
    d->max = max;
}

int al_diags_vadd(struct al_diags *d, enum al_diag_severity sev, const char *file, unsigned line,
                  unsigned col, const char *code, const char *fmt, va_list ap)
{
    int ret = sev == AL_DIAG_ERROR ? -EINVAL : 0;
    if (!d)
        return ret;
    if (sev == AL_DIAG_ERROR)
        d->errors++;
    else
        d->warnings++;
    size_t max = d->max ? d->max : 200;
    if (d->n >= max) {
        d->dropped++;
        return ret;
    }
    if (d->n == d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 8;
        struct al_diag *nv = realloc(d->v, ncap * sizeof *nv);
        if (!nv) {
            d->dropped++;
            return ret;
        }
        d->v = nv;
        d->cap = ncap;
    }
    struct al_diag *g = &d->v[d->n];
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0) {
        d->dropped++;
        return ret;
    }
    g->severity = sev;
    g->file = file ? strdup(file) : NULL;
    g->line = line;
    g->col = col;
    g->code = strdup(code ? code : "error");
    g->msg = msg;
    if ((file && !g->file) || !g->code) {
        free(g->file);
        free(g->code);
        free(g->msg);
        d->dropped++;
        return ret;
    }
    d->n++;
    return ret;
}

int al_diags_add(struct al_diags *d, enum al_diag_severity sev, const char *file, unsigned line,
                 unsigned col, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = al_diags_vadd(d, sev, file, line, col, code, fmt, ap);
    va_end(ap);
    return rc;
}

static int diags__cmp(const void *a, const void *b)
{
    const struct al_diag *x = a, *y = b;
    int c = strcmp(x->file ? x->file : "", y->file ? y->file : "");
    if (c)
        return c;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return 0;
}

void al_diags_sort(struct al_diags *d)
{
    /* Insertion sort: stable, and diagnostic lists are short. */
    for (size_t i = 1; i < d->n; i++) {
        struct al_diag t = d->v[i];
        size_t j = i;
        while (j > 0 && diags__cmp(&d->v[j - 1], &t) > 0) {
            d->v[j] = d->v[j - 1];
            j--;
        }
        d->v[j] = t;
    }
}

size_t al_diag_format(const struct al_diag *g, char *buf, size_t len)
{
    const char *sev = g->severity == AL_DIAG_ERROR ? "error" : "warning";
    int n;
    if (g->file && g->line)
        n = snprintf(buf, len, "%s:%u:%u: %s: %s", g->file, g->line, g->col, sev, g->msg);
    else if (g->file)
        n = snprintf(buf, len, "%s: %s: %s", g->file, sev, g->msg);
    else if (g->line)
        n = snprintf(buf, len, "%u:%u: %s: %s", g->line, g->col, sev, g->msg);
    else
        n = snprintf(buf, len, "%s: %s", sev, g->msg);
    return n < 0 ? 0 : (size_t)n;
}

void al_diags_print(const struct al_diags *d, FILE *f, bool errors_only)
{
    for (size_t i = 0; i < d->n; i++) {
        const struct al_diag *g = &d->v[i];
        if (errors_only && g->severity != AL_DIAG_ERROR)
            continue;
        char line[1024];
        al_diag_format(g, line, sizeof line);
        fprintf(f, "%s\n", line);
    }
    if (d->dropped)
        fprintf(f, "(%zu more diagnostics not shown)\n", d->dropped);
}

/* ---- arena ---------------------------------------------------------------------------- */

struct yaml__block {
    struct yaml__block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct al_yaml_doc {
    struct yaml__block *blocks;
    char *file;
    struct al_yaml_node *root;
};

static void *yaml__alloc(struct al_yaml_doc *doc, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    struct yaml__block *b = doc->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 60000 ? size : 60000;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = doc->blocks;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

void al_yaml_free(struct al_yaml_doc *doc)
{
    if (!doc)
        return;
    struct yaml__block *b = doc->blocks;
    while (b) {
        struct yaml__block *n = b->next;
        free(b);
        b = n;
    }
    free(doc->file);
    free(doc);
}

const struct al_yaml_node *al_yaml_root(const struct al_yaml_doc *doc)
{
    return doc ? doc->root : NULL;
}

const char *al_yaml_file(const struct al_yaml_doc *doc)
{
    return doc ? doc->file : NULL;
}

/* ---- parser --------------------------------------------------------------------------- */

struct yaml__frame {
    struct al_yaml_node *node;
    void *vec; /* struct al_yaml_node ** (seq) or struct al_yaml_pair * (map) */
    size_t n, cap;
    struct al_yaml_node *key; /* map: key waiting for its value */
};

struct yaml__ctx {
    struct al_yaml_doc *doc;
    const struct al_yaml_limits *lim;
    struct al_diags *d;
    struct yaml__frame *stack;
    unsigned depth;
    size_t nodes;
};

static int yaml__err(struct yaml__ctx *c, const yaml_mark_t *m, const char *code, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

static int yaml__err(struct yaml__ctx *c, const yaml_mark_t *m, const char *code, const char *fmt,
                     ...)
{
    va_list ap;
    va_start(ap, fmt);
    al_diags_vadd(c->d, AL_DIAG_ERROR, c->doc->file, m ? (unsigned)m->line + 1 : 0,
                  m ? (unsigned)m->column + 1 : 0, code, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static struct al_yaml_node *yaml__node(struct yaml__ctx *c, enum al_yaml_kind kind,
                                       const yaml_mark_t *m)
{
    if (++c->nodes > c->lim->max_nodes) {
        yaml__err(c, m, "too_many_nodes",
                  "the document has more than %zu nodes; split it or simplify it",
                  c->lim->max_nodes);
        return NULL;
    }
    struct al_yaml_node *n = yaml__alloc(c->doc, sizeof *n);
    if (!n)
        return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = (unsigned)m->line + 1;
    n->col = (unsigned)m->column + 1;
    n->file = c->doc->file;
    return n;
}

static int yaml__check_props(struct yaml__ctx *c, const yaml_event_t *ev, const yaml_char_t *anchor,
                             const yaml_char_t *tag)
{
    if (anchor)
        return yaml__err(c, &ev->start_mark, "yaml_anchor",
                         "anchors (&%s) are not supported: write the value out in full",
                         (const char *)anchor);
    if (tag)
        return yaml__err(c, &ev->start_mark, "yaml_tag",
                         "tags (%s) are not supported: remove the tag, values are typed by "
                         "their key",
                         (const char *)tag);
    return 0;
}

static int yaml__vec_push(struct yaml__frame *f, size_t elem)
{
    if (f->n == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 8;
        void *nv = realloc(f->vec, ncap * elem);
        if (!nv)
            return -ENOMEM;
        f->vec = nv;
        f->cap = ncap;
    }
    return 0;
}

/* Attaches a finished node to the open container (or makes it the root). */
static int yaml__attach(struct yaml__ctx *c, struct al_yaml_node *n, const yaml_mark_t *m)
{
    if (c->depth == 0) {
        c->doc->root = n;
        return 0;
    }
    struct yaml__frame *f = &c->stack[c->depth - 1];
    if (f->node->kind == AL_YAML_SEQ) {
        if (yaml__vec_push(f, sizeof(struct al_yaml_node *)))
            return -ENOMEM;
        ((struct al_yaml_node **)f->vec)[f->n++] = n;
        return 0;
    }
    if (!f->key) {
        if (n->kind != AL_YAML_SCALAR)
            return yaml__err(c, m, "yaml_complex_key", "a key must be a plain string, not %s",
                             al_yaml_describe(n));
        if (n->plain && strcmp(n->str, "<<") == 0)
            return yaml__err(c, m, "yaml_merge_key",
                             "merge keys (<<) are not supported: write the keys out in full");
        f->key = n;
        return 0;
    }
    if (yaml__vec_push(f, sizeof(struct al_yaml_pair)))
        return -ENOMEM;
    struct al_yaml_pair *p = &((struct al_yaml_pair *)f->vec)[f->n++];
    p->key = f->key;
    p->value = n;
    f->key = NULL;
    return 0;
}

struct yaml__keyref {
    const struct al_yaml_node *key;
    size_t idx;
};

static int yaml__keyref_cmp(const void *a, const void *b)
{
    const struct yaml__keyref *x = a, *y = b;
    size_t l = x->key->len < y->key->len ? x->key->len : y->key->len;
    int c = memcmp(x->key->str, y->key->str, l);
    if (c)
        return c;
    if (x->key->len != y->key->len)
        return x->key->len < y->key->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Rejects duplicate keys, naming the earliest duplicate and where the key was first set. */
static int yaml__check_dups(struct yaml__ctx *c, const struct al_yaml_node *map)
{
    if (map->n < 2)
        return 0;
    struct yaml__keyref *r = malloc(map->n * sizeof *r);
    if (!r)
        return -ENOMEM;
    for (size_t i = 0; i < map->n; i++) {
        r[i].key = map->pairs[i].key;
        r[i].idx = i;
    }
    qsort(r, map->n, sizeof *r, yaml__keyref_cmp);
    /* In each run of equal keys (sorted by index), the first entry is where the key was set
     * and the second is its earliest duplicate; report the earliest duplicate overall. */
    size_t best_dup = SIZE_MAX, best_first = 0;
    for (size_t i = 1; i < map->n; i++) {
        bool same = r[i].key->len == r[i - 1].key->len &&
                    memcmp(r[i].key->str, r[i - 1].key->str, r[i].key->len) == 0;
        bool run_start =
            i == 1 || !(r[i - 1].key->len == r[i - 2].key->len &&
                        memcmp(r[i - 1].key->str, r[i - 2].key->str, r[i - 1].key->len) == 0);
        if (same && run_start && r[i].idx < best_dup) {
            best_dup = r[i].idx;
            best_first = r[i - 1].idx;
        }
    }
    free(r);
    if (best_dup == SIZE_MAX)
        return 0;
    const struct al_yaml_node *k = map->pairs[best_dup].key, *f = map->pairs[best_first].key;
    al_diags_add(c->d, AL_DIAG_ERROR, c->doc->file, k->line, k->col, "duplicate_key",
                 "duplicate key '%s' (first set at line %u, column %u): each key may appear "
                 "only once in a map; remove or merge one of them",
                 k->str, f->line, f->col);
    return -EINVAL;
}

static int yaml__close(struct yaml__ctx *c, const yaml_mark_t *m)
{
    struct yaml__frame *f = &c->stack[c->depth - 1];
    struct al_yaml_node *n = f->node;
    if (n->kind == AL_YAML_SEQ) {
        if (f->n) {
            n->items = yaml__alloc(c->doc, f->n * sizeof *n->items);
            if (!n->items)
                return -ENOMEM;
            memcpy(n->items, f->vec, f->n * sizeof *n->items);
        }
    } else {
        if (f->n) {
            n->pairs = yaml__alloc(c->doc, f->n * sizeof *n->pairs);
            if (!n->pairs)
                return -ENOMEM;
            memcpy(n->pairs, f->vec, f->n * sizeof *n->pairs);
        }
    }
    n->n = f->n;
    free(f->vec);
    f->vec = NULL;
    c->depth--;
    if (n->kind == AL_YAML_MAP) {
        int rc = yaml__check_dups(c, n);
        if (rc)
            return rc;
    }
    return yaml__attach(c, n, m);
}

static int yaml__open(struct yaml__ctx *c, enum al_yaml_kind kind, const yaml_event_t *ev)
{
    if (c->depth >= c->lim->max_depth)
        return yaml__err(c, &ev->start_mark, "too_deep",
                         "nesting deeper than %u levels; simplify the document", c->lim->max_depth);
    if (c->depth > 0) {
        struct yaml__frame *p = &c->stack[c->depth - 1];
        if (p->node->kind == AL_YAML_MAP && !p->key)
            return yaml__err(c, &ev->start_mark, "yaml_complex_key",
                             "a key must be a plain string, not %s",
                             kind == AL_YAML_MAP ? "a map" : "a list");
    }
    struct al_yaml_node *n = yaml__node(c, kind, &ev->start_mark);
    if (!n)
        return c->nodes > c->lim->max_nodes ? -E2BIG : -ENOMEM;
    struct yaml__frame *f = &c->stack[c->depth++];
    memset(f, 0, sizeof *f);
    f->node = n;
    return 0;
}

static int yaml__scalar(struct yaml__ctx *c, const yaml_event_t *ev)
{
    size_t len = ev->data.scalar.length;
    if (len > c->lim->max_scalar)
        return yaml__err(c, &ev->start_mark, "scalar_too_long",
                         "a value of %zu bytes is longer than the limit of %zu bytes", len,
                         c->lim->max_scalar);
    struct al_yaml_node *n = yaml__node(c, AL_YAML_SCALAR, &ev->start_mark);
    if (!n)
        return c->nodes > c->lim->max_nodes ? -E2BIG : -ENOMEM;
    char *s = yaml__alloc(c->doc, len + 1);
    if (!s)
        return -ENOMEM;
    memcpy(s, ev->data.scalar.value, len);
    s[len] = '\0';
    n->str = s;
    n->len = len;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    return yaml__attach(c, n, &ev->start_mark);
}

int al_yaml_parse(const char *text, size_t len, const char *file,
                  const struct al_yaml_limits *limits, struct al_yaml_doc **out, struct al_diags *d)
{
    struct al_yaml_limits lim = {8u << 20, 64, 2000000, 64u << 10};
    if (limits) {
        if (limits->max_bytes)
            lim.max_bytes = limits->max_bytes;
        if (limits->max_depth)
            lim.max_depth = limits->max_depth;
        if (limits->max_nodes)
            lim.max_nodes = limits->max_nodes;
        if (limits->max_scalar)
            lim.max_scalar = limits->max_scalar;
    }
    *out = NULL;
    if (len > lim.max_bytes)
        return al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "too_large",
                            "the document is %zu bytes, more than the limit of %zu bytes", len,
                            lim.max_bytes),
               -E2BIG;
    struct al_yaml_doc *doc = calloc(1, sizeof *doc);
    if (!doc)
        return -ENOMEM;
    if (file && !(doc->file = strdup(file))) {
        free(doc);
        return -ENOMEM;
    }
    struct yaml__ctx c = {.doc = doc, .lim = &lim, .d = d};
    c.stack = calloc(lim.max_depth + 1, sizeof *c.stack);
    yaml_parser_t parser;
    if (!c.stack || !yaml_parser_initialize(&parser)) {
        free(c.stack);
        al_yaml_free(doc);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    int rc = 0, docs = 0;
    bool done = false;
    while (!done && rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            const char *problem = parser.problem ? parser.problem : "malformed YAML";
            if (parser.context)
                rc = yaml__err(&c, &parser.problem_mark, "yaml_syntax", "YAML syntax: %s %s",
                               problem, parser.context);
            else
                rc = yaml__err(&c, &parser.problem_mark, "yaml_syntax", "YAML syntax: %s", problem);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
        case YAML_NO_EVENT:
            break;
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                rc = yaml__err(&c, &ev.start_mark, "yaml_multi_document",
                               "a second YAML document starts here: only one document per "
                               "file is allowed (remove this '---' or split the file)");
            break;
        case YAML_ALIAS_EVENT:
            rc = yaml__err(&c, &ev.start_mark, "yaml_alias",
                           "aliases (*%s) are not supported: write the value out in full",
                           (const char *)ev.data.alias.anchor);
            break;
        case YAML_SCALAR_EVENT:
            rc = yaml__check_props(&c, &ev, ev.data.scalar.anchor, ev.data.scalar.tag);
            if (!rc)
                rc = yaml__scalar(&c, &ev);
            break;
        case YAML_SEQUENCE_START_EVENT:
            rc = yaml__check_props(&c, &ev, ev.data.sequence_start.anchor,
                                   ev.data.sequence_start.tag);
            if (!rc)
                rc = yaml__open(&c, AL_YAML_SEQ, &ev);
            break;
        case YAML_MAPPING_START_EVENT:
            rc =
                yaml__check_props(&c, &ev, ev.data.mapping_start.anchor, ev.data.mapping_start.tag);
            if (!rc)
                rc = yaml__open(&c, AL_YAML_MAP, &ev);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            rc = c.depth ? yaml__close(&c, &ev.start_mark) : -EINVAL;
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    for (unsigned i = 0; i < c.depth; i++)
        free(c.stack[i].vec);
    free(c.stack);
    if (rc) {
        if (rc == -ENOMEM)
            al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "no_memory",
                         "out of memory while reading the document");
        al_yaml_free(doc);
        return rc;
    }
    *out = doc;
    return 0;
}

int al_yaml_load_file(const char *path, const struct al_yaml_limits *limits,
                      struct al_yaml_doc **out, struct al_diags *d)
{
    size_t max = limits && limits->max_bytes ? limits->max_bytes : AL_YAML_MAX_BYTES_DEFAULT;
    char *text = NULL;
    size_t len = 0;
    struct al_error err = {0};
    int rc = al_read_file(path, max, &text, &len, &err);
    if (rc) {
        if (rc == -EFBIG)
            al_diags_add(d, AL_DIAG_ERROR, path, 0, 0, "too_large",
                         "the file is larger than the limit of %zu bytes", max);
        else
            al_diags_add(d, AL_DIAG_ERROR, path, 0, 0, "io", "cannot read the file: %s",
                         err.msg[0] ? err.msg : strerror(-rc));
        *out = NULL;
        return rc;
    }
    rc = al_yaml_parse(text, len, path, limits, out, d);
    free(text);
    return rc;
}

/* ---- schema helpers ------------------------------------------------------------------- */

bool al_yaml_is_null(const struct al_yaml_node *n)
{
    if (!n)
        return true;
    if (n->kind != AL_YAML_SCALAR || !n->plain)
        return false;
    return n->len == 0 || strcmp(n->str, "~") == 0 || strcmp(n->str, "null") == 0 ||
           strcmp(n->str, "Null") == 0 || strcmp(n->str, "NULL") == 0;
}

const char *al_yaml_describe(const struct al_yaml_node *n)
{
    if (!n || al_yaml_is_null(n))
        return "nothing (null)";
    if (n->kind == AL_YAML_MAP)
        return "a map";
    if (n->kind == AL_YAML_SEQ)
        return "a list";
    if (!n->plain)
        return "a quoted string";
    if (strcmp(n->str, "true") == 0 || strcmp(n->str, "false") == 0)
        return "a boolean";
    const char *s = n->str;
    if (*s == '-' || *s == '+')
        s++;
    if (*s && strspn(s, "0123456789") == strlen(s))
        return "a number";
    return "a string";
}

static int yaml__vdiag(struct al_diags *d, enum al_diag_severity sev, const struct al_yaml_node *n,
                       const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

static int yaml__vdiag(struct al_diags *d, enum al_diag_severity sev, const struct al_yaml_node *n,
                       const char *code, const char *fmt, va_list ap)
{
    return al_diags_vadd(d, sev, n ? n->file : NULL, n ? n->line : 0, n ? n->col : 0, code, fmt,
                         ap);
}

int al_yaml_error(struct al_diags *d, const struct al_yaml_node *n, const char *code,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = yaml__vdiag(d, AL_DIAG_ERROR, n, code, fmt, ap);
    va_end(ap);
    return rc;
}

int al_yaml_warning(struct al_diags *d, const struct al_yaml_node *n, const char *code,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = yaml__vdiag(d, AL_DIAG_WARNING, n, code, fmt, ap);
    va_end(ap);
    return rc;
}

/* Optimal string alignment distance, case-insensitive, capped at 255. */
static unsigned yaml__distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 255;
    unsigned dp[65][65];
    for (size_t i = 0; i <= la; i++)
        dp[i][0] = (unsigned)i;
    for (size_t j = 0; j <= lb; j++)
        dp[0][j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            unsigned cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            unsigned v = dp[i - 1][j] + 1;
            if (dp[i][j - 1] + 1 < v)
                v = dp[i][j - 1] + 1;
            if (dp[i - 1][j - 1] + cost < v)
                v = dp[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 &&
                tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) &&
                dp[i - 2][j - 2] + 1 < v)
                v = dp[i - 2][j - 2] + 1;
            dp[i][j] = v;
        }
    }
    return dp[la][lb];
}

const char *al_suggest(const char *word, const char *const *candidates)
{
    if (!word || !candidates)
        return NULL;
    size_t len = strlen(word);
    unsigned limit = len / 3 > 1 ? (unsigned)(len / 3) : 1;
    const char *best = NULL;
    unsigned bestd = limit + 1;
    for (size_t i = 0; candidates[i]; i++) {
        unsigned dist = yaml__distance(word, candidates[i]);
        if (dist < bestd) {
            bestd = dist;
            best = candidates[i];
        }
    }
    return best;
}

static void yaml__join(const char *const *words, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; words[i] && o + 1 < len; i++) {
        int n = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", words[i]);
        if (n < 0)
            break;
        o += (size_t)n;
    }
}

int al_yaml_expect_map(const struct al_yaml_node *n, const char *what, const char *const *allowed,
                       struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_MAP)
        return al_yaml_error(d, n, "wrong_type", "%s must be a map (key: value lines), not %s",
                             what, al_yaml_describe(n));
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *k = n->pairs[i].key;
        bool ok = false;
        for (size_t j = 0; allowed && allowed[j]; j++) {
            if (strlen(allowed[j]) == k->len && memcmp(allowed[j], k->str, k->len) == 0) {
                ok = true;
                break;
            }
        }
        if (ok)
            continue;
        const char *hint = al_suggest(k->str, allowed);
        if (hint) {
            rc = al_yaml_error(d, k, "unknown_key", "unknown key '%s' in %s; did you mean '%s'?",
                               k->str, what, hint);
        } else {
            char list[512];
            yaml__join(allowed, list, sizeof list);
            rc = al_yaml_error(d, k, "unknown_key", "unknown key '%s' in %s (allowed keys: %s)",
                               k->str, what, list);
        }
    }
    return rc;
}

const struct al_yaml_pair *al_yaml_get_pair(const struct al_yaml_node *n, const char *key)
{
    if (!n || n->kind != AL_YAML_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < n->n; i++) {
        const struct al_yaml_node *k = n->pairs[i].key;
        if (k->len == kl && memcmp(k->str, key, kl) == 0)
            return &n->pairs[i];
    }
    return NULL;
}

const struct al_yaml_node *al_yaml_get(const struct al_yaml_node *n, const char *key)
{
    const struct al_yaml_pair *p = al_yaml_get_pair(n, key);
    return p ? p->value : NULL;
}

int al_yaml_str(const struct al_yaml_node *n, const char *what, const char **out,
                struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_SCALAR || al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type", "%s must be a string, not %s", what,
                             al_yaml_describe(n));
    if (strlen(n->str) != n->len)
        return al_yaml_error(d, n, "bad_string", "%s contains a NUL character", what);
    *out = n->str;
    return 0;
}

int al_yaml_bool(const struct al_yaml_node *n, const char *what, bool *out, struct al_diags *d)
{
    if (n && n->kind == AL_YAML_SCALAR && n->plain) {
        if (strcmp(n->str, "true") == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(n->str, "false") == 0) {
            *out = false;
            return 0;
        }
    }
    if (n && n->kind == AL_YAML_SCALAR && !al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type",
                             "%s must be true or false (unquoted, lower case), not '%s'", what,
                             n->str);
    return al_yaml_error(d, n, "wrong_type", "%s must be true or false, not %s", what,
                         al_yaml_describe(n));
}

int al_yaml_int(const struct al_yaml_node *n, const char *what, int64_t min, int64_t max,
                int64_t *out, struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_SCALAR || al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type", "%s must be a number, not %s", what,
                             al_yaml_describe(n));
    if (!n->plain)
        return al_yaml_error(d, n, "wrong_type",
                             "%s must be a number, not a quoted string: remove the quotes", what);
    const char *s = n->str;
    bool neg = *s == '-';
    if (neg || *s == '+')
        s++;
    size_t digits = strspn(s, "0123456789");
    if (digits == 0 || s[digits] != '\0' || (digits > 1 && s[0] == '0'))
        return al_yaml_error(d, n, "wrong_type",
                             "%s must be a decimal whole number (like 443), not '%s'", what,
                             n->str);
    errno = 0;
    char *end;
    long long v = strtoll(n->str, &end, 10);
    if (errno || v < min || v > max)
        return al_yaml_error(d, n, "out_of_range",
                             "%s is %s, outside the allowed range %" PRId64 "..%" PRId64, what,
                             n->str, min, max);
    *out = v;
    return 0;
}

int al_yaml_size(const struct al_yaml_node *n, const char *what, uint64_t min, uint64_t max,
                 uint64_t *out, struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_SCALAR || al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type", "%s must be a size such as 10MiB or 4096, not %s",
                             what, al_yaml_describe(n));
    uint64_t v;
    int rc = al_parse_size(n->str, &v);
    if (rc == -ERANGE)
        return al_yaml_error(d, n, "out_of_range", "%s '%s' is too large", what, n->str);
    if (rc)
        return al_yaml_error(d, n, "bad_size",
                             "%s '%s' is not a size: write a number with an optional unit "
                             "(B, k, KiB, M, MiB, G, GiB), e.g. 10MiB",
                             what, n->str);
    if (v < min || v > max)
        return al_yaml_error(d, n, "out_of_range",
                             "%s '%s' (%" PRIu64 " bytes) is outside the allowed range %" PRIu64
                             "..%" PRIu64 " bytes",
                             what, n->str, v, min, max);
    *out = v;
    return 0;
}

int al_yaml_duration_ms(const struct al_yaml_node *n, const char *what, uint64_t min, uint64_t max,
                        uint64_t *out, struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_SCALAR || al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type",
                             "%s must be a duration such as 30s or 250ms, not %s", what,
                             al_yaml_describe(n));
    const char *s = n->str;
    size_t digits = strspn(s, "0123456789");
    uint64_t v;
    if (digits && s[digits] == '\0' && strcmp(s, "0") != 0)
        return al_yaml_error(d, n, "bad_duration", "%s '%s' has no unit: write e.g. %ss or %sms",
                             what, s, s, s);
    int rc = al_parse_duration_ms(s, &v);
    if (rc == -ERANGE)
        return al_yaml_error(d, n, "out_of_range", "%s '%s' is too large", what, s);
    if (rc)
        return al_yaml_error(d, n, "bad_duration",
                             "%s '%s' is not a duration: write a number and a unit (ms, s, m, "
                             "h, d), e.g. 30s",
                             what, s);
    if (v < min || v > max)
        return al_yaml_error(d, n, "out_of_range",
                             "%s '%s' is outside the allowed range %" PRIu64 "ms..%" PRIu64 "ms",
                             what, s, min, max);
    *out = v;
    return 0;
}

int al_yaml_enum(const struct al_yaml_node *n, const char *what, const char *const *choices,
                 int *out, struct al_diags *d)
{
    char list[256];
    yaml__join(choices, list, sizeof list);
    if (!n || n->kind != AL_YAML_SCALAR || al_yaml_is_null(n))
        return al_yaml_error(d, n, "wrong_type", "%s must be one of %s, not %s", what, list,
                             al_yaml_describe(n));
    for (int i = 0; choices[i]; i++) {
        if (strcmp(n->str, choices[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    const char *hint = al_suggest(n->str, choices);
    if (hint)
        return al_yaml_error(d, n, "bad_value",
                             "%s must be one of %s, not '%s'; did you mean '%s'?", what, list,
                             n->str, hint);
    return al_yaml_error(d, n, "bad_value", "%s must be one of %s, not '%s'", what, list, n->str);
}

int al_yaml_strlist(const struct al_yaml_node *n, const char *what, bool nonempty,
                    struct al_diags *d)
{
    if (!n || n->kind != AL_YAML_SEQ) {
        if (n && n->kind == AL_YAML_SCALAR && !al_yaml_is_null(n))
            return al_yaml_error(d, n, "wrong_type",
                                 "%s must be a list, not a single value: write [%s]", what, n->str);
        return al_yaml_error(d, n, "wrong_type", "%s must be a list, not %s", what,
                             al_yaml_describe(n));
    }
    if (nonempty && n->n == 0)
        return al_yaml_error(d, n, "empty_list", "%s must not be empty", what);
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const char *s;
        if (al_yaml_str(n->items[i], what, &s, d))
            rc = -EINVAL;
    }
    return rc;
}
