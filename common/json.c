/* common/json: see json.h. */
#include "json.h"

#include <errno.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t json__utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
        n = 2;
        cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3;
        cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

size_t al_json_escape(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (outlen == 0)
        return 0;
    const unsigned char *s = (const unsigned char *)(in ? in : "");
    while (*s) {
        char tmp[8];
        size_t tl;
        size_t adv = 1;
        unsigned char c = *s;
        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            tl = 2;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            tmp[0] = '\\';
            tmp[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            tl = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(tmp, "\\u00", 4);
            tmp[4] = hex[c >> 4];
            tmp[5] = hex[c & 15];
            tl = 6;
        } else if (c < 0x80) {
            tmp[0] = (char)c;
            tl = 1;
        } else {
            size_t n = json__utf8_len(s);
            if (n == 0) {
                memcpy(tmp, "\\ufffd", 6);
                tl = 6;
            } else {
                memcpy(tmp, s, n);
                tl = n;
                adv = n;
            }
        }
        if (o + tl >= outlen)
            break;
        memcpy(out + o, tmp, tl);
        o += tl;
        s += adv;
    }
    out[o] = '\0';
    return o;
}

json_t *al_json_parse(const char *data, size_t len, struct al_error *err)
{
    json_error_t je;
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!v)
        al_error_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s", je.line, je.column,
                     je.text);
    return v;
}

json_t *al_json_load_file(const char *path, struct al_error *err)
{
    json_error_t je;
    json_t *v = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        if (je.line < 0)
            al_error_set(err, -ENOENT, "%s: %s", path, je.text);
        else
            al_error_set(err, -EINVAL, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column,
                         je.text);
    }
    return v;
}

char *al_json_dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

static json_t *json__lookup(const json_t *obj, const char *key, bool required, const char *what,
                            struct al_error *err, int *rc)
{
    *rc = 0;
    if (!json_is_object(obj)) {
        *rc = al_error_set(err, -EINVAL, "%s must be a JSON object", what);
        return NULL;
    }
    json_t *v = json_object_get(obj, key);
    if ((!v || json_is_null(v)) && required)
        *rc = al_error_set(err, -EINVAL, "%s: \"%s\" is required", what, key);
    if (v && json_is_null(v))
        return NULL;
    return v;
}

int al_json_get_str(const json_t *obj, const char *key, bool required, const char **out,
                    const char *what, struct al_error *err)
{
    int rc;
    json_t *v = json__lookup(obj, key, required, what, err, &rc);
    if (rc || !v)
        return rc;
    if (!json_is_string(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must be a string", what, key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must not contain NUL bytes", what, key);
    *out = json_string_value(v);
    return 0;
}

int al_json_get_int(const json_t *obj, const char *key, bool required, int64_t min, int64_t max,
                    int64_t *out, const char *what, struct al_error *err)
{
    int rc;
    json_t *v = json__lookup(obj, key, required, what, err, &rc);
    if (rc || !v)
        return rc;
    if (!json_is_integer(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must be an integer", what, key);
    int64_t i = (int64_t)json_integer_value(v);
    if (i < min || i > max)
        return al_error_set(err, -ERANGE, "%s: \"%s\" = %lld is out of range %lld..%lld", what, key,
                            (long long)i, (long long)min, (long long)max);
    *out = i;
    return 0;
}

int al_json_get_bool(const json_t *obj, const char *key, bool required, bool *out, const char *what,
                     struct al_error *err)
{
    int rc;
    json_t *v = json__lookup(obj, key, required, what, err, &rc);
    if (rc || !v)
        return rc;
    if (!json_is_boolean(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must be true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

int al_json_get_obj(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct al_error *err)
{
    int rc;
    json_t *v = json__lookup(obj, key, required, what, err, &rc);
    if (rc || !v)
        return rc;
    if (!json_is_object(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must be an object", what, key);
    *out = v;
    return 0;
}

int al_json_get_arr(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct al_error *err)
{
    int rc;
    json_t *v = json__lookup(obj, key, required, what, err, &rc);
    if (rc || !v)
        return rc;
    if (!json_is_array(v))
        return al_error_set(err, -EINVAL, "%s: \"%s\" must be an array", what, key);
    *out = v;
    return 0;
}

int al_json_check_keys(const json_t *obj, const char *const *allowed, const char *what,
                       struct al_error *err)
{
    if (!json_is_object(obj))
        return al_error_set(err, -EINVAL, "%s must be a JSON object", what);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++) {
            if (strcmp(*a, key) == 0) {
                ok = true;
                break;
            }
        }
        if (!ok)
            return al_error_set(err, -EINVAL, "%s: unknown field \"%s\"", what, key);
    }
    return 0;
}
