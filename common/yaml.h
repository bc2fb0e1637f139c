/* common/yaml: the one strict YAML reader of airlock (policies, daemon configs, test cases).
 *
 * Owns: turning YAML text into a small tree of maps, lists and scalars in which every node
 * and every key carries its file:line:col, and the diagnostics list (struct al_diags) that
 * policy and config loaders fill with "file:line:col: error: ..." messages.
 *
 * Strict on purpose (security teams write these files and a typo must not drop a rule):
 *   - duplicate keys are errors naming both positions;
 *   - anchors, aliases and merge keys (<<) are errors (no billion-laughs, no hidden sharing);
 *   - tags (!!str, !foo) are errors; only one document per file;
 *   - keys must be scalars; input size, nesting depth, node count and scalar size are bounded.
 * Scalars are kept as text with their style (plain or quoted) and typed by the getters below:
 * booleans are only `true`/`false`, integers are decimal, sizes "10MiB", durations "30s".
 */
#ifndef AIRLOCK_COMMON_YAML_H
#define AIRLOCK_COMMON_YAML_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- diagnostics ---------------------------------------------------------------------- */

enum al_diag_severity { AL_DIAG_ERROR = 0, AL_DIAG_WARNING = 1 };

struct al_diag {
    enum al_diag_severity severity;
    char *file;    /* may be NULL (no file) */
    unsigned line; /* 1-based; 0 = no position */
    unsigned col;  /* 1-based; 0 = no position */
    char *code;    /* stable machine-readable code, e.g. "unknown_key"; never NULL */
    char *msg;     /* what is wrong and how to fix it; never contains secret values */
};

struct al_diags {
    struct al_diag *v;
    size_t n, cap;
    size_t errors, warnings;
    size_t max; /* keep at most this many (0 = 200); further ones are only counted */
    size_t dropped;
};

#define AL_DIAGS_INIT          \
    {                          \
        NULL, 0, 0, 0, 0, 0, 0 \
    }

void al_diags_init(struct al_diags *d);
void al_diags_free(struct al_diags *d);
/* Appends a diagnostic. Always returns -EINVAL for errors and 0 for warnings, so that
 *   return al_diag_error(d, node, "bad_port", "port %d ...", p);
 * reads naturally. d may be NULL (the message is then dropped, the return value kept). */
int al_diags_add(struct al_diags *d, enum al_diag_severity sev, const char *file, unsigned line,
                 unsigned col, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
int al_diags_vadd(struct al_diags *d, enum al_diag_severity sev, const char *file, unsigned line,
                  unsigned col, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 7, 0)));
/* Orders diagnostics by file, line, column (stable), for printing. */
void al_diags_sort(struct al_diags *d);
/* Prints "file:line:col: error: msg" lines (warnings too unless errors_only). */
void al_diags_print(const struct al_diags *d, FILE *f, bool errors_only);
/* Formats one diagnostic as above into buf (always NUL-terminated). */
size_t al_diag_format(const struct al_diag *g, char *buf, size_t len);

/* ---- the tree ------------------------------------------------------------------------- */

enum al_yaml_kind { AL_YAML_SCALAR = 1, AL_YAML_SEQ = 2, AL_YAML_MAP = 3 };

struct al_yaml_pair;

struct al_yaml_node {
    enum al_yaml_kind kind;
    unsigned line, col; /* 1-based position where the node starts */
    const char *file;   /* the document's file name (shared, may be NULL) */
    /* AL_YAML_SCALAR: */
    const char *str; /* NUL-terminated; may contain an embedded NUL (see len) */
    size_t len;
    bool plain; /* unquoted plain scalar (only plain scalars can be null/bool) */
    /* AL_YAML_SEQ: items[0..n); AL_YAML_MAP: pairs[0..n) in file order */
    size_t n;
    struct al_yaml_node **items;
    struct al_yaml_pair *pairs;
};

struct al_yaml_pair {
    struct al_yaml_node *key; /* always a scalar */
    struct al_yaml_node *value;
};

#define AL_YAML_MAX_BYTES_DEFAULT (8u << 20) /* a file's largest size unless limits say */

struct al_yaml_limits {
    size_t max_bytes;   /* default AL_YAML_MAX_BYTES_DEFAULT (8 MiB) */
    unsigned max_depth; /* default 64 */
    size_t max_nodes;   /* default 2,000,000 */
    size_t max_scalar;  /* default 64 KiB */
};

struct al_yaml_doc;

/* Parses text (len bytes; need not be NUL-terminated). file names the source in messages
 * (may be NULL). On success *out is the document (root may be NULL for an empty file) and
 * 0 is returned; on failure one error is added to d and -EINVAL (or -E2BIG/-ENOMEM) is
 * returned. limits may be NULL for the defaults. */
int al_yaml_parse(const char *text, size_t len, const char *file,
                  const struct al_yaml_limits *limits, struct al_yaml_doc **out,
                  struct al_diags *d);
/* Reads and parses a file (bounded by limits->max_bytes). */
int al_yaml_load_file(const char *path, const struct al_yaml_limits *limits,
                      struct al_yaml_doc **out, struct al_diags *d);
void al_yaml_free(struct al_yaml_doc *doc);
const struct al_yaml_node *al_yaml_root(const struct al_yaml_doc *doc);
const char *al_yaml_file(const struct al_yaml_doc *doc);

/* ---- schema helpers ------------------------------------------------------------------- */

/* "a map", "a list", "a string", "null", "true/false", "a number" for messages. */
const char *al_yaml_describe(const struct al_yaml_node *n);
bool al_yaml_is_null(const struct al_yaml_node *n);

/* Adds an error/warning positioned at node n (n may be NULL: no position). */
int al_yaml_error(struct al_diags *d, const struct al_yaml_node *n, const char *code,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int al_yaml_warning(struct al_diags *d, const struct al_yaml_node *n, const char *code,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Checks that n is a map whose keys are all in allowed (NULL-terminated). Each unknown key
 * is an error at the key's position with the nearest allowed key as a hint:
 *   unknown key 'hots' in rule 'x'; did you mean 'hosts'? (allowed: name, hosts, ...)
 * what names the map in messages ("the policy", "rule 'x'"). Returns 0 or -EINVAL. */
int al_yaml_expect_map(const struct al_yaml_node *n, const char *what, const char *const *allowed,
                       struct al_diags *d);
/* Value of key in map n, or NULL (also NULL when n is not a map). If pair is non-NULL it
 * receives the pair (for the key's position). */
const struct al_yaml_node *al_yaml_get(const struct al_yaml_node *n, const char *key);
const struct al_yaml_pair *al_yaml_get_pair(const struct al_yaml_node *n, const char *key);

/* Typed getters on a value node. Each checks the type and adds a positioned error that
 * says what was expected, what was found and how to write it. Return 0 or -EINVAL. */
int al_yaml_str(const struct al_yaml_node *n, const char *what, const char **out,
                struct al_diags *d);
int al_yaml_bool(const struct al_yaml_node *n, const char *what, bool *out, struct al_diags *d);
int al_yaml_int(const struct al_yaml_node *n, const char *what, int64_t min, int64_t max,
                int64_t *out, struct al_diags *d);
int al_yaml_size(const struct al_yaml_node *n, const char *what, uint64_t min, uint64_t max,
                 uint64_t *out, struct al_diags *d);
int al_yaml_duration_ms(const struct al_yaml_node *n, const char *what, uint64_t min, uint64_t max,
                        uint64_t *out, struct al_diags *d);
/* One of choices (NULL-terminated); *out = index. Near misses get a hint. */
int al_yaml_enum(const struct al_yaml_node *n, const char *what, const char *const *choices,
                 int *out, struct al_diags *d);
/* A list whose items are all strings (an empty list is allowed unless nonempty). */
int al_yaml_strlist(const struct al_yaml_node *n, const char *what, bool nonempty,
                    struct al_diags *d);

/* The allowed word nearest to word (edit distance <= max(1, len/3)), or NULL. */
const char *al_suggest(const char *word, const char *const *candidates);

#endif
