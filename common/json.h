/* common/json: the JSON layer, over jansson (Debian's libjansson).
 *
 * Owns: strict typed access to request bodies and files (unknown keys are reported, not
 * ignored, where the caller asks), compact serialisation, and allocation-free escaping for
 * the logger and the audit writer. Callers use jansson's json_t directly for everything
 * else; this file only adds what every daemon would otherwise rewrite.
 */
#ifndef AIRLOCK_COMMON_JSON_H
#define AIRLOCK_COMMON_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Escapes in as a JSON string body (no quotes) into out (always NUL-terminated; truncated
 * at a character boundary if out is too small). Control characters become \u00XX; bytes
 * that are not valid UTF-8 become \ufffd. Returns the length written. */
size_t al_json_escape(const char *in, char *out, size_t outlen);

/* Parses a buffer; on failure err says where ("line 3, column 7: ..."). */
json_t *al_json_parse(const char *data, size_t len, struct al_error *err);
json_t *al_json_load_file(const char *path, struct al_error *err);
/* Compact one-line serialisation (keys in insertion order). Caller frees. */
char *al_json_dump(const json_t *v);

/* Typed getters. what names the object in messages ("sandbox spec"). A missing key is an
 * error only when required; *out is left untouched then. Wrong types are always errors. */
int al_json_get_str(const json_t *obj, const char *key, bool required, const char **out,
                    const char *what, struct al_error *err);
int al_json_get_int(const json_t *obj, const char *key, bool required, int64_t min, int64_t max,
                    int64_t *out, const char *what, struct al_error *err);
int al_json_get_bool(const json_t *obj, const char *key, bool required, bool *out, const char *what,
                     struct al_error *err);
int al_json_get_obj(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct al_error *err);
int al_json_get_arr(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct al_error *err);
/* Fails on the first key of obj not in the NULL-terminated list allowed. */
int al_json_check_keys(const json_t *obj, const char *const *allowed, const char *what,
                       struct al_error *err);

#endif
