/* common/json: the JSON layer, over jansson (Debian's libjansson).
 *
 * Owns: strict typed access to request bodies and files (unknown keys are reported, not
 * ignored, where the caller asks), compact serialisation (the audit log's, byte for byte
 * jansson's, without its per-character callbacks), and allocation-free escaping for the
 * logger and the audit writer. Callers use jansson's json_t directly for everything
 * else; this file only adds what every daemon would otherwise rewrite.
 */
#ifndef AIRLOCK_COMMON_JSON_H
#define AIRLOCK_COMMON_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* al_autojson json_t *v = json_object();   json_decref'd when v goes out of scope (see
 * common/cleanup.h). */
static inline void al__cleanup_json(json_t **v)
{
    json_decref(*v);
}
#define al_autojson __attribute__((cleanup(al__cleanup_json)))

/* Escapes in as a JSON string body (no quotes) into out (always NUL-terminated; truncated
 * at a character boundary if out is too small). Control characters become \u00XX; bytes
 * that are not valid UTF-8 become \ufffd. Returns the length written. */
size_t al_json_escape(const char *in, char *out, size_t outlen);

/* Length of the valid UTF-8 sequence at s[0..n) (1..4: shortest form, no surrogate, at most
 * U+10FFFF; a NUL is 1), or 0 when s does not start one. */
size_t al_json_utf8_len(const unsigned char *s, size_t n);
/* The JSON string literal of s[0..n) exactly as jansson's compact dump writes it: quotes,
 * \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00XX (uppercase hex), every other byte
 * as it is. s must be valid UTF-8 (NULs allowed: \u0000). al_json_quoted_len says how long
 * the literal is (0 when s is not valid UTF-8); al_json_quote writes it into out, which must
 * hold that many bytes, and returns the same length. */
size_t al_json_quoted_len(const char *s, size_t n);
size_t al_json_quote(const char *s, size_t n, char *out);
/* The decimal text of v, as jansson writes an integer ("%" JSON_INTEGER_FORMAT), without
 * printf: writes at most AL_JSON_INT_MAX bytes (no NUL) and returns the length. */
#define AL_JSON_INT_MAX 20
size_t al_json_int(int64_t v, char out[AL_JSON_INT_MAX]);
/* The compact serialisation of v, the same bytes as json_dumpb(v, JSON_COMPACT) (keys in
 * insertion order), several times faster: writes at most size bytes into buf and returns
 * the length of the whole text (larger than size: call again with room); 0 when v cannot be
 * serialised (a string that is not valid UTF-8, nesting deeper than AL_JSON_DUMP_DEPTH). */
#define AL_JSON_DUMP_DEPTH 64
size_t al_json_dumpb(const json_t *v, char *buf, size_t size);
/* al_json_dumpb of an object, 0 as well when obj is no object or one of its own keys (not
 * those of nested objects) is in reject (NULL-terminated; NULL for none): the check costs
 * next to nothing during the serialisation, where looking each key up first does not. */
size_t al_json_dumpb_object(const json_t *obj, const char *const *reject, char *buf, size_t size);

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
