/* vmm/guest/protojson: proto3 JSON as envd's clients speak it, over jansson.
 *
 * Owns: reading request fields under either spelling (lowerCamelCase or the proto name),
 * the scalar mappings (bytes = base64, standard or URL-safe, padding optional; enums by name
 * or number; 32/64-bit integers as numbers or decimal strings; null = absent), map<string,
 * string>, and writing: base64, int64 as a string, google.protobuf.Timestamp (RFC 3339 with
 * 0/3/6/9 fractional digits). Wrong types are errors with a message naming the field.
 */
#ifndef AIRLOCK_GUEST_PROTOJSON_H
#define AIRLOCK_GUEST_PROTOJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/buf.h"
#include "common/error.h"

/* The value of a field under its JSON name or its proto name; NULL when absent or null.
 * proto may be NULL when both spellings are the same. */
json_t *agent_pj_field(const json_t *obj, const char *json_name, const char *proto_name);

/* Each getter: 0 and *out set when present; -ENOENT (out untouched) when absent;
 * -EINVAL with a message in err for a wrong type or value. */
int agent_pj_string(const json_t *obj, const char *json_name, const char *proto_name,
                    const char **out, struct al_error *err);
int agent_pj_bool(const json_t *obj, const char *json_name, const char *proto_name, bool *out,
                  struct al_error *err);
int agent_pj_uint32(const json_t *obj, const char *json_name, const char *proto_name, uint32_t *out,
                    struct al_error *err);
int agent_pj_object(const json_t *obj, const char *json_name, const char *proto_name, json_t **out,
                    struct al_error *err);
/* bytes: decoded into out (cap-checked by the buffer's max). */
int agent_pj_bytes(const json_t *obj, const char *json_name, const char *proto_name,
                   struct al_buf *out, struct al_error *err);

struct agent_pj_enum {
    const char *name;
    int value;
};
/* An enum by name (from table, NULL-name terminated) or by number (any int32). */
int agent_pj_enum(const json_t *obj, const char *json_name, const char *proto_name,
                  const struct agent_pj_enum *table, int *out, struct al_error *err);
/* map<string,string>: an object whose values are all strings (the object is returned). */
int agent_pj_string_map(const json_t *obj, const char *json_name, const char *proto_name,
                        json_t **out, struct al_error *err);

/* Base64 decode (libsodium) accepting the standard or the URL-safe alphabet, padded or not
 * (as protobuf JSON parsers do), strictly: one alphabet per string, canonical trailing bits.
 * Appends to out. -EINVAL on a bad character, padding or length; -E2BIG beyond out's cap. */
int agent_pj_base64_decode(const char *in, size_t len, struct al_buf *out);
/* Standard base64 with padding; malloc'd, NUL-terminated. */
char *agent_pj_base64_encode(const void *data, size_t len);

/* int64 as a JSON string, the proto3 mapping. */
json_t *agent_pj_int64(int64_t v);

#endif
