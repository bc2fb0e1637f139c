/* common/config: configuration files of the daemons, from a declarative table.
 *
 * Owns: filling a daemon's config struct from (in increasing precedence) the table's
 * defaults, a strict YAML file (common/yaml: unknown and duplicate keys are errors with
 * file:line:col and a "did you mean" hint), environment variables the table names, and
 * explicit overrides (command-line flags) through al_config_set. Each daemon declares its
 * own table; this module knows nothing about any daemon.
 *
 *   struct egress_cfg { char *listen; uint64_t idle_ms; bool audit_fail_closed; };
 *   static const struct al_cfg_field egress_fields[] = {
 *       {.key = "listen", .type = AL_CFG_STR, .offset = offsetof(struct egress_cfg, listen),
 *        .def = "127.0.0.1:3128", .env = "AIRLOCK_EGRESS_LISTEN", .help = "listener address"},
 *       {.key = "timeouts.idle", .type = AL_CFG_DURATION,
 *        .offset = offsetof(struct egress_cfg, idle_ms), .def = "60s", .min = 1000,
 *        .max = 3600000, .help = "idle connection timeout"},
 *       {.key = NULL}};
 *
 * (Use designated initializers: -Wextra rejects partial positional ones.)
 * Dotted keys ("timeouts.idle") are nested maps in the file. Types and struct members:
 * STR char * (malloc'd, NULL when no default), BOOL bool, INT int64_t, SIZE uint64_t bytes,
 * DURATION uint64_t milliseconds, ENUM int (index into choices), STRLIST struct
 * al_cfg_strlist. Defaults and environment values use the file's syntax; lists in them are
 * comma-separated. A range of min == max == 0 means "no range".
 */
#ifndef AIRLOCK_COMMON_CONFIG_H
#define AIRLOCK_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "yaml.h"

enum al_cfg_type {
    AL_CFG_STR = 1,
    AL_CFG_BOOL,
    AL_CFG_INT,
    AL_CFG_SIZE,
    AL_CFG_DURATION,
    AL_CFG_ENUM,
    AL_CFG_STRLIST,
};

enum {
    AL_CFG_REQUIRED = 1 << 0, /* must be set by the file or the environment (checked by
                                 al_config_load; al_config_set comes after that check) */
};

struct al_cfg_strlist {
    char **v;
    size_t n;
};

struct al_cfg_field {
    const char *key; /* "listen" or "dns.upstream" */
    enum al_cfg_type type;
    size_t offset;              /* offsetof(struct yours, member) */
    const char *def;            /* default, in file syntax; NULL = none */
    int64_t min, max;           /* INT, SIZE, DURATION (ms): inclusive range */
    const char *env;            /* environment variable that overrides the file, or NULL */
    const char *help;           /* one line for `--help-config` and docs */
    const char *const *choices; /* ENUM: NULL-terminated value names */
    unsigned flags;             /* AL_CFG_REQUIRED */
};

enum {
    AL_CFG_FILE_OPTIONAL = 1 << 0, /* a missing file is not an error (defaults apply) */
};

/* Fills cfg (zeroed by the caller or by a previous al_config_free) from defaults, the file
 * at path (NULL = no file) and the environment. Every problem is added to d with its
 * position; returns 0, or -EINVAL if any error was found (cfg then holds what could be
 * read; free it with al_config_free). */
int al_config_load(const struct al_cfg_field *table, void *cfg, const char *path, unsigned flags,
                   struct al_diags *d);
/* The same from text in memory; file names it in messages. */
int al_config_load_buffer(const struct al_cfg_field *table, void *cfg, const char *text, size_t len,
                          const char *file, struct al_diags *d);
/* Sets one key from text (e.g. a command-line flag), after loading. origin names the source
 * in messages ("--listen"). */
int al_config_set(const struct al_cfg_field *table, void *cfg, const char *key, const char *value,
                  const char *origin, struct al_diags *d);
/* Releases strings and lists and zeroes them. */
void al_config_free(const struct al_cfg_field *table, void *cfg);
/* Prints the table: key, type, default, environment variable, help. */
void al_config_help(const struct al_cfg_field *table, FILE *f);

#endif
