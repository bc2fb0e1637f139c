/* vmm/guest/protojson: see protojson.h. */
#include "protojson.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int pj__b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

int agent_pj_base64_decode(const char *in, size_t len, struct al_buf *out)
{
    /* Strip up to two '=' of padding; the rest must be alphabet characters. */
    size_t n = len;
    size_t pad = 0;
    while (n > 0 && in[n - 1] == '=' && pad < 2) {
        n--;
        pad++;
    }
    if (pad && (n + pad) % 4 != 0)
        return -EINVAL;
    if (n % 4 == 1)
        return -EINVAL;
    size_t outlen = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    int r = al_buf_reserve(out, outlen);
    if (r < 0)
        return r;
    size_t before = out->len;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = pj__b64val((unsigned char)in[i]);
        if (v < 0) {
            out->len = before;
            return -EINVAL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out->data[out->len++] = (char)(acc >> bits);
        }
    }
    /* Leftover bits must be zero (canonical encoding is not required by parsers; accept). */
    out->data[out->len] = '\0';
    return 0;
}

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

void agent_pj_timestamp(char *out, size_t outlen, const struct timespec *ts)
{
    struct tm tm;
    time_t s = ts->tv_sec;
    gmtime_r(&s, &tm);
    char frac[16] = "";
    long ns = ts->tv_nsec;
    if (ns > 0 && ns < 1000000000L) {
        if (ns % 1000000 == 0)
            snprintf(frac, sizeof frac, ".%03ld", ns / 1000000);
        else if (ns % 1000 == 0)
            snprintf(frac, sizeof frac, ".%06ld", ns / 1000);
        else
            snprintf(frac, sizeof frac, ".%09ld", ns);
    }
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

json_t *agent_pj_int64(int64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%" PRId64, v);
    return json_string(b);
}
