/* common/config: see config.h. Defaults, file and environment all go through the same
 * typed setters, so a value means the same thing wherever it is written. */
#include "config.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *cfg__member(void *cfg, const struct al_cfg_field *f)
{
    return (char *)cfg + f->offset;
}

static const char *cfg__type_name(enum al_cfg_type t)
{
    switch (t) {
    case AL_CFG_STR:
        return "string";
    case AL_CFG_BOOL:
        return "true|false";
    case AL_CFG_INT:
        return "integer";
    case AL_CFG_SIZE:
        return "size";
    case AL_CFG_DURATION:
        return "duration";
    case AL_CFG_ENUM:
        return "choice";
    case AL_CFG_STRLIST:
        return "list of strings";
    }
    return "?";
}

static void cfg__free_field(void *cfg, const struct al_cfg_field *f)
{
    void *m = cfg__member(cfg, f);
    if (f->type == AL_CFG_STR) {
        free(*(char **)m);
        *(char **)m = NULL;
    } else if (f->type == AL_CFG_STRLIST) {
        struct al_cfg_strlist *l = m;
        for (size_t i = 0; i < l->n; i++)
            free(l->v[i]);
        free(l->v);
        l->v = NULL;
        l->n = 0;
    }
}

void al_config_free(const struct al_cfg_field *table, void *cfg)
{
    for (const struct al_cfg_field *f = table; f->key; f++)
        cfg__free_field(cfg, f);
}

/* Sets a field from a YAML node (file) — the single typed path; text values (defaults,
 * environment, overrides) are turned into a scalar or a list node first. */
static int cfg__set_node(const struct al_cfg_field *f, void *cfg, const struct al_yaml_node *n,
                         const char *what, struct al_diags *d)
{
    void *m = cfg__member(cfg, f);
    bool ranged = f->min != 0 || f->max != 0;
    switch (f->type) {
    case AL_CFG_STR: {
        const char *s;
        if (al_yaml_str(n, what, &s, d))
            return -EINVAL;
        char *c = strdup(s);
        if (!c)
            return -ENOMEM;
        free(*(char **)m);
        *(char **)m = c;
        return 0;
    }
    case AL_CFG_BOOL:
        return al_yaml_bool(n, what, (bool *)m, d);
    case AL_CFG_INT:
        return al_yaml_int(n, what, ranged ? f->min : INT64_MIN, ranged ? f->max : INT64_MAX,
                           (int64_t *)m, d);
    case AL_CFG_SIZE:
        return al_yaml_size(n, what, ranged ? (uint64_t)f->min : 0,
                            ranged ? (uint64_t)f->max : UINT64_MAX, (uint64_t *)m, d);
    case AL_CFG_DURATION:
        return al_yaml_duration_ms(n, what, ranged ? (uint64_t)f->min : 0,
                                   ranged ? (uint64_t)f->max : UINT64_MAX, (uint64_t *)m, d);
    case AL_CFG_ENUM:
        return al_yaml_enum(n, what, f->choices, (int *)m, d);
    case AL_CFG_STRLIST: {
        if (al_yaml_strlist(n, what, false, d))
            return -EINVAL;
        char **v = calloc(n->n ? n->n : 1, sizeof *v);
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < n->n; i++) {
            if (!(v[i] = strdup(n->items[i]->str))) {
                for (size_t j = 0; j < i; j++)
                    free(v[j]);
                free(v);
                return -ENOMEM;
            }
        }
        cfg__free_field(cfg, f);
        struct al_cfg_strlist *l = m;
        l->v = v;
        l->n = n->n;
        return 0;
    }
    }
    return -EINVAL;
}

/* Text (default, environment, flag) -> the same setter, via a synthetic node. Lists are
 * comma-separated; surrounding spaces are trimmed. */
static int cfg__set_text(const struct al_cfg_field *f, void *cfg, const char *text,
                         const char *what, struct al_diags *d)
{
    struct al_yaml_node scalar = {
        .kind = AL_YAML_SCALAR, .str = text, .len = strlen(text), .plain = true};
    if (f->type != AL_CFG_STRLIST)
        return cfg__set_node(f, cfg, &scalar, what, d);
    char *copy = strdup(text);
    if (!copy)
        return -ENOMEM;
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    struct al_yaml_node *items = calloc(cap, sizeof *items);
    struct al_yaml_node **ptrs = calloc(cap, sizeof *ptrs);
    if (!items || !ptrs) {
        free(copy);
        free(items);
        free(ptrs);
        return -ENOMEM;
    }
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        size_t l = strlen(tok);
        while (l && tok[l - 1] == ' ')
            tok[--l] = '\0';
        if (!l)
            continue;
        items[n] = scalar;
        items[n].str = tok;
        items[n].len = l;
        items[n].plain = false; /* a list item is a string, never null */
        ptrs[n] = &items[n];
        n++;
    }
    struct al_yaml_node seq = {.kind = AL_YAML_SEQ, .n = n, .items = ptrs};
    int rc = cfg__set_node(f, cfg, &seq, what, d);
    free(items);
    free(ptrs);
    free(copy);
    return rc;
}

/* Is prefix (length pl) a section of some dotted key in the table? */
static bool cfg__is_section(const struct al_cfg_field *table, const char *prefix, size_t pl)
{
    for (const struct al_cfg_field *f = table; f->key; f++)
        if (strncmp(f->key, prefix, pl) == 0 && f->key[pl] == '.')
            return true;
    return false;
}

static const struct al_cfg_field *cfg__find(const struct al_cfg_field *table, const char *key)
{
    for (const struct al_cfg_field *f = table; f->key; f++)
        if (strcmp(f->key, key) == 0)
            return f;
    return NULL;
}

/* Walks one map level of the file: prefix is "" at the top, "dns." below. */
static int cfg__walk(const struct al_cfg_field *table, void *cfg, const struct al_yaml_node *map,
                     const char *prefix, bool *set, struct al_diags *d)
{
    size_t pl = strlen(prefix);
    /* The keys allowed at this level: last components of fields and section names. */
    size_t nf = 0;
    for (const struct al_cfg_field *f = table; f->key; f++)
        nf++;
    const char **allowed = calloc(nf + 1, sizeof *allowed);
    char **owned = calloc(nf + 1, sizeof *owned);
    if (!allowed || !owned) {
        free(allowed);
        free(owned);
        return -ENOMEM;
    }
    size_t na = 0;
    for (const struct al_cfg_field *f = table; f->key; f++) {
        if (strncmp(f->key, prefix, pl) != 0)
            continue;
        const char *rest = f->key + pl;
        const char *dot = strchr(rest, '.');
        char *word = dot ? strndup(rest, (size_t)(dot - rest)) : strdup(rest);
        if (!word)
            continue;
        bool dup = false;
        for (size_t i = 0; i < na; i++)
            dup |= strcmp(allowed[i], word) == 0;
        if (dup) {
            free(word);
            continue;
        }
        owned[na] = word;
        allowed[na++] = word;
    }
    char what[256];
    snprintf(what, sizeof what, pl ? "section '%.*s'" : "the configuration", (int)(pl ? pl - 1 : 0),
             prefix);
    int rc = al_yaml_expect_map(map, what, allowed, d);
    if (map && map->kind == AL_YAML_MAP) {
        for (size_t i = 0; i < map->n; i++) {
            const struct al_yaml_node *k = map->pairs[i].key, *v = map->pairs[i].value;
            char full[256];
            snprintf(full, sizeof full, "%s%s", prefix, k->str);
            const struct al_cfg_field *f = cfg__find(table, full);
            if (f) {
                char w[300];
                snprintf(w, sizeof w, "'%s'", full);
                if (cfg__set_node(f, cfg, v, w, d))
                    rc = -EINVAL;
                else
                    set[f - table] = true;
            } else if (cfg__is_section(table, full, strlen(full))) {
                char sub[260];
                snprintf(sub, sizeof sub, "%s.", full);
                if (cfg__walk(table, cfg, v, sub, set, d))
                    rc = -EINVAL;
            }
        }
    }
    for (size_t i = 0; i < na; i++)
        free(owned[i]);
    free(owned);
    free(allowed);
    return rc;
}

static int cfg__defaults(const struct al_cfg_field *table, void *cfg, struct al_diags *d)
{
    int rc = 0;
    for (const struct al_cfg_field *f = table; f->key; f++) {
        if (!f->def)
            continue;
        char what[300];
        snprintf(what, sizeof what, "the built-in default of '%s'", f->key);
        if (cfg__set_text(f, cfg, f->def, what, d))
            rc = -EINVAL;
    }
    return rc;
}

static int cfg__env(const struct al_cfg_field *table, void *cfg, bool *set, struct al_diags *d)
{
    int rc = 0;
    for (const struct al_cfg_field *f = table; f->key; f++) {
        const char *v = f->env ? getenv(f->env) : NULL;
        if (!v)
            continue;
        char what[300];
        snprintf(what, sizeof what, "environment variable %s (for '%s')", f->env, f->key);
        if (cfg__set_text(f, cfg, v, what, d))
            rc = -EINVAL;
        else
            set[f - table] = true;
    }
    return rc;
}

static int cfg__required(const struct al_cfg_field *table, const bool *set, const char *file,
                         struct al_diags *d)
{
    int rc = 0;
    for (const struct al_cfg_field *f = table; f->key; f++) {
        if ((f->flags & AL_CFG_REQUIRED) && !f->def && !set[f - table])
            rc = al_diags_add(d, AL_DIAG_ERROR, file, 0, 0, "missing_key",
                              "'%s' is required (%s): set it in the configuration file%s%s", f->key,
                              f->help ? f->help : cfg__type_name(f->type),
                              f->env ? " or in the environment variable " : "",
                              f->env ? f->env : "");
    }
    return rc;
}

static int cfg__load(const struct al_cfg_field *table, void *cfg, const struct al_yaml_doc *doc,
                     const char *file, struct al_diags *d)
{
    size_t nf = 0;
    for (const struct al_cfg_field *f = table; f->key; f++)
        nf++;
    bool *set = calloc(nf + 1, sizeof *set);
    if (!set)
        return -ENOMEM;
    int rc = cfg__defaults(table, cfg, d);
    const struct al_yaml_node *root = doc ? al_yaml_root(doc) : NULL;
    if (root && !al_yaml_is_null(root) && cfg__walk(table, cfg, root, "", set, d))
        rc = -EINVAL;
    if (cfg__env(table, cfg, set, d))
        rc = -EINVAL;
    if (cfg__required(table, set, file, d))
        rc = -EINVAL;
    free(set);
    return rc;
}

int al_config_load_buffer(const struct al_cfg_field *table, void *cfg, const char *text, size_t len,
                          const char *file, struct al_diags *d)
{
    struct al_yaml_doc *doc = NULL;
    int rc = al_yaml_parse(text, len, file, NULL, &doc, d);
    if (rc)
        return rc;
    rc = cfg__load(table, cfg, doc, file, d);
    al_yaml_free(doc);
    return rc;
}

int al_config_load(const struct al_cfg_field *table, void *cfg, const char *path, unsigned flags,
                   struct al_diags *d)
{
    if (!path)
        return cfg__load(table, cfg, NULL, NULL, d);
    if ((flags & AL_CFG_FILE_OPTIONAL) && access(path, F_OK) != 0 && errno == ENOENT)
        return cfg__load(table, cfg, NULL, path, d);
    struct al_yaml_doc *doc = NULL;
    int rc = al_yaml_load_file(path, NULL, &doc, d);
    if (rc)
        return rc;
    rc = cfg__load(table, cfg, doc, path, d);
    al_yaml_free(doc);
    return rc;
}

int al_config_set(const struct al_cfg_field *table, void *cfg, const char *key, const char *value,
                  const char *origin, struct al_diags *d)
{
    const struct al_cfg_field *f = cfg__find(table, key);
    if (!f)
        return al_diags_add(d, AL_DIAG_ERROR, NULL, 0, 0, "unknown_key",
                            "%s: no configuration key '%s'", origin ? origin : "override", key);
    char what[300];
    snprintf(what, sizeof what, "%s (for '%s')", origin ? origin : "override", key);
    return cfg__set_text(f, cfg, value, what, d);
}

void al_config_help(const struct al_cfg_field *table, FILE *out)
{
    for (const struct al_cfg_field *f = table; f->key; f++) {
        fprintf(out, "  %-28s %-16s default %-14s%s%s\n", f->key, cfg__type_name(f->type),
                f->def ? f->def : "(none)", f->env ? " env " : "", f->env ? f->env : "");
        if (f->type == AL_CFG_ENUM && f->choices) {
            fprintf(out, "  %-28s one of:", "");
            for (size_t i = 0; f->choices[i]; i++)
                fprintf(out, " %s", f->choices[i]);
            fprintf(out, "\n");
        }
        if (f->min || f->max)
            fprintf(out, "  %-28s range %" PRId64 "..%" PRId64 "%s\n", "", f->min, f->max,
                    f->type == AL_CFG_DURATION ? " ms"
                    : f->type == AL_CFG_SIZE   ? " bytes"
                                               : "");
        if (f->help)
            fprintf(out, "  %-28s %s\n", "", f->help);
    }
}
