/* vmm/guest/protojson: see protojson.h. */
#include "protojson.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

json_t *agent_pj_field(const json_t *obj, const char *json_name, const char *proto_name)
{
    if (!json_is_object(obj))
        return NULL;
    json_t *v = json_object_get(obj, json_name);
    if ((!v || json_is_null(v)) && proto_name)
        v = json_object_get(obj, proto_name);
    if (v && json_is_null(v))
        return NULL;
    return v;
}

int agent_pj_string(const json_t *obj, const char *json_name, const char *proto_name,
                    const char **out, struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (!json_is_string(v))
        return al_error_set(err, -EINVAL, "field '%s' must be a string", json_name);
    *out = json_string_value(v);
    return 0;
}

int agent_pj_bool(const json_t *obj, const char *json_name, const char *proto_name, bool *out,
                  struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (!json_is_boolean(v))
        return al_error_set(err, -EINVAL, "field '%s' must be true or false", json_name);
    *out = json_is_true(v);
    return 0;
}

/* Integers: a JSON number without fraction, or a decimal string (proto3 allows both). */
static int pj__integer(const json_t *v, int64_t min, int64_t max, int64_t *out)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < min || i > max)
            return -ERANGE;
        *out = i;
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != (double)(int64_t)d || d < (double)min || d > (double)max)
            return -ERANGE;
        *out = (int64_t)d;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!*s || strlen(s) > 21)
            return -EINVAL;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || *end || x < min || x > max)
            return -ERANGE;
        *out = x;
        return 0;
    }
    return -EINVAL;
}

int agent_pj_uint32(const json_t *obj, const char *json_name, const char *proto_name, uint32_t *out,
                    struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    int64_t x;
    if (pj__integer(v, 0, UINT32_MAX, &x) < 0)
        return al_error_set(err, -EINVAL, "field '%s' must be an integer from 0 to 4294967295",
                            json_name);
    *out = (uint32_t)x;
    return 0;
}

int agent_pj_object(const json_t *obj, const char *json_name, const char *proto_name, json_t **out,
                    struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (!json_is_object(v))
        return al_error_set(err, -EINVAL, "field '%s' must be an object", json_name);
    *out = v;
    return 0;
}

int agent_pj_bytes(const json_t *obj, const char *json_name, const char *proto_name,
                   struct al_buf *out, struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (!json_is_string(v))
        return al_error_set(err, -EINVAL, "field '%s' must be a base64 string", json_name);
    int r = agent_pj_base64_decode(json_string_value(v), json_string_length(v), out);
    if (r == -E2BIG)
        return al_error_set(err, -E2BIG, "field '%s' is larger than this server accepts",
                            json_name);
    if (r < 0)
        return al_error_set(err, -EINVAL, "field '%s' is not valid base64", json_name);
    return 0;
}

int agent_pj_enum(const json_t *obj, const char *json_name, const char *proto_name,
                  const struct agent_pj_enum *table, int *out, struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        for (const struct agent_pj_enum *e = table; e->name; e++) {
            if (strcmp(e->name, s) == 0) {
                *out = e->value;
                return 0;
            }
        }
        /* proto3 JSON also accepts a number written as a string for enums? No: names only. */
        return al_error_set(err, -EINVAL, "field '%s': unknown value '%.64s'", json_name, s);
    }
    int64_t x;
    if (pj__integer(v, INT32_MIN, INT32_MAX, &x) == 0 && !json_is_string(v)) {
        *out = (int)x;
        return 0;
    }
    return al_error_set(err, -EINVAL, "field '%s' must be an enum name or number", json_name);
}

int agent_pj_string_map(const json_t *obj, const char *json_name, const char *proto_name,
                        json_t **out, struct al_error *err)
{
    json_t *v = agent_pj_field(obj, json_name, proto_name);
    if (!v)
        return -ENOENT;
    if (!json_is_object(v))
        return al_error_set(err, -EINVAL, "field '%s' must be an object of strings", json_name);
    const char *k;
    json_t *val;
    json_object_foreach(v, k, val)
    {
        if (!json_is_string(val))
            return al_error_set(err, -EINVAL, "field '%s': the value of '%.64s' must be a string",
                                json_name, k);
    }
    *out = v;
    return 0;
}

int agent_pj_base64_decode(const char *in, size_t len, struct al_buf *out)
{
    /* Protobuf JSON takes either alphabet, padded or not: the text says which of libsodium's
     * four variants it is, and libsodium refuses everything else (a character of the other
     * alphabet, wrong padding, a length of 4k+1, trailing bits that are not zero). */
    bool url = memchr(in, '-', len) || memchr(in, '_', len);
    size_t pad = 0;
    while (pad < 2 && pad < len && in[len - 1 - pad] == '=')
        pad++;
    int variant =
        url ? (pad ? sodium_base64_VARIANT_URLSAFE : sodium_base64_VARIANT_URLSAFE_NO_PADDING)
            : (pad ? sodium_base64_VARIANT_ORIGINAL : sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
    size_t n = len - pad;
    if (n % 4 == 1)
        return -EINVAL;
    size_t want = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    int r = al_buf_reserve(out, want);
    if (r < 0)
        return r;
    size_t got = 0;
    if (sodium_base642bin((unsigned char *)out->data + out->len, want, in, len, NULL, &got, NULL,
                          variant) != 0 ||
        got != want) {
        out->data[out->len] = '\0';
        return -EINVAL;
    }
    out->len += got;
    out->data[out->len] = '\0';
    return 0;
}

/* Encoded by table, not by libsodium: process output is encoded here, every byte of it,
 * and sodium_bin2base64 (constant-time, meant for secrets) costs about 70 instructions a
 * byte against 11 for the table; with the JSON around it, 189 against 130 (callgrind, 64 KiB
 * chunks). Output is not secret; decoding is rare and strict, so libsodium does that. */
char *agent_pj_base64_encode(const void *data, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    size_t olen = (len + 2) / 3 * 4;
    char *out = malloc(olen + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = tbl[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

json_t *agent_pj_int64(int64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%" PRId64, v);
    return json_string(b);
}
