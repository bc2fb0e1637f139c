/* common/json: see json.h. */
#include "json.h"
#include "util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && defined(__x86_64__)
#define JSON__SSE2 1
#include <emmintrin.h>
#endif

size_t al_json_utf8_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

size_t al_json_escape(const char *in, char *out, size_t outlen)
{
    const char *hex = al_hex_lower;
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
            /* s ends in a NUL, which is no continuation byte: the check stops there. */
            size_t n = al_json_utf8_len(s, 4);
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

/* Byte classes of a string value: 0 copied, 1 escaped by a backslash and a letter or itself,
 * 2 below 0x20 without a short escape (\u00XX), 3 the start of a multi-byte sequence. */
static const unsigned char json__cls[256] = {
    [0 ... 7] = 2, ['\b'] = 1,          ['\t'] = 1, ['\n'] = 1, [0x0b] = 2,          ['\f'] = 1,
    ['\r'] = 1,    [0x0e ... 0x1f] = 2, ['"'] = 1,  ['\\'] = 1, [0x80 ... 0xff] = 3,
};

/* Whether any of the 8 bytes of x needs a look: below 0x20, '"', '\\', or 0x80 and above. */
static inline bool json__word_special(uint64_t x)
{
#ifdef JSON__SSE2
    /* one signed compare finds both the bytes below 0x20 and those of 0x80 and above */
    __m128i v = _mm_cvtsi64_si128((long long)x);
    __m128i m = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (_mm_movemask_epi8(m) & 0xff) != 0;
#else
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    uint64_t lt = (x - ones * 0x20) & ~x;                /* high bit set where a byte < 0x20 */
    uint64_t zq = (q - ones) & ~q, zb = (b - ones) & ~b; /* where a byte is '"' or '\\' */
    return ((lt | zq | zb) & highs) || (x & highs);
#endif
}

size_t al_json_quoted_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = n + 2;
    for (size_t i = 0; i < n; i++) {
        /* Eight plain bytes at a time, the last ones padded with plain bytes: most of the
         * audit log's strings never take the byte-by-byte path below. */
        for (;;) {
            uint64_t x;
            size_t k = 8;
            if (n - i >= 8) {
                memcpy(&x, u + i, 8);
            } else {
                /* byte by byte into "aaaaaaaa" (a loop the compiler does not turn into a
                 * memcpy call) */
                x = 0x6161616161616161ull;
                k = n - i;
                for (size_t j = 0; j < k; j++)
                    x = (x & ~(0xffull << (8 * j))) | ((uint64_t)u[i + j] << (8 * j));
            }
            if (json__word_special(x))
                break;
            i += k;
            if (i >= n)
                return len;
        }
        switch (json__cls[u[i]]) {
        case 0:
            break;
        case 1:
            len += 1;
            break;
        case 2:
            len += 5;
            break;
        default: {
            size_t l = al_json_utf8_len(u + i, n - i);
            if (!l)
                return 0;
            i += l - 1;
        }
        }
    }
    return len;
}

size_t al_json_quote(const char *s, size_t n, char *out)
{
    const char *hex = al_hex_upper;
    const unsigned char *u = (const unsigned char *)s;
    char *o = out;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        unsigned k = json__cls[c];
        if (k == 0 || k == 3) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
        case '\\':
            *o++ = (char)c;
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    return (size_t)(o - out);
}

size_t al_json_int(int64_t v, char out[AL_JSON_INT_MAX])
{
    char t[AL_JSON_INT_MAX];
    char *e = t + sizeof t, *p = e;
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                                   "25262728293031323334353637383940414243444546474849"
                                   "50515253545556575859606162636465666768697071727374"
                                   "75767778798081828384858687888990919293949596979899";
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    /* two digits per division */
    while (m >= 100) {
        p -= 2;
        memcpy(p, pairs + 2 * (m % 100), 2);
        m /= 100;
    }
    if (m >= 10) {
        p -= 2;
        memcpy(p, pairs + 2 * m, 2);
    } else {
        *--p = (char)('0' + m);
    }
    if (v < 0)
        *--p = '-';
    memcpy(out, p, (size_t)(e - p));
    return (size_t)(e - p);
}

struct json__out {
    char *buf;
    size_t size, len;
    /* Keys the top-level object must not have (al_json_dumpb_object), and a bit for each of
     * them (json__reject_bit) that passes most other keys by one test. */
    const char *const *reject;
    uint64_t reject_mask;
    char num[AL_JSON_INT_MAX]; /* here rather than on the stack: no canary per value */
};

static inline void json__put(struct json__out *w, const char *s, size_t n)
{
    if (w->len + n <= w->size)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static inline void json__putc(struct json__out *w, char c)
{
    if (w->len < w->size)
        w->buf[w->len] = c;
    w->len++;
}

/* Copies s[0..n) to o when no byte of it needs escaping and says whether it did (o then
 * may hold part of it: the caller starts again). Each byte is tested once, in words that
 * overlap at the end rather than a byte loop for the tail: the audit log's keys and values
 * are short, and a tail loop was most of their cost. */
static inline bool json__plain_copy(const unsigned char *u, size_t n, char *o)
{
    uint64_t x;
#ifdef JSON__SSE2
    if (n >= 16) {
        const __m128i q = _mm_set1_epi8('"'), b = _mm_set1_epi8('\\'), c = _mm_set1_epi8(0x20);
        for (size_t i = 0;; i += 16) {
            if (i + 16 > n)
                i = n - 16; /* the last 16 bytes, overlapping what was copied */
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(u + i));
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, b)),
                                     _mm_cmplt_epi8(v, c));
            if (_mm_movemask_epi8(m))
                return false;
            _mm_storeu_si128((__m128i *)(void *)(o + i), v);
            if (i + 16 == n)
                return true;
        }
    }
#endif
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 < n; i += 8) {
            memcpy(&x, u + i, 8);
            if (json__word_special(x))
                return false;
            memcpy(o + i, &x, 8);
        }
        memcpy(&x, u + n - 8, 8);
        if (json__word_special(x))
            return false;
        memcpy(o + n - 8, &x, 8);
        return true;
    }
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, u, 4);
        memcpy(&b, u + n - 4, 4);
        if (json__word_special(a | (uint64_t)b << 32))
            return false;
        memcpy(o, &a, 4);
        memcpy(o + n - 4, &b, 4);
        return true;
    }
    if (n == 0)
        return true;
    /* 1..3 bytes: the first, the middle and the last cover them all; 'a' pads the word */
    x = 0x6161616161000000ull | u[0] | (uint64_t)u[n >> 1] << 8 | (uint64_t)u[n - 1] << 16;
    if (json__word_special(x))
        return false;
    o[0] = (char)u[0];
    o[n >> 1] = (char)u[n >> 1];
    o[n - 1] = (char)u[n - 1];
    return true;
}

/* A string that needs escaping, is not valid UTF-8, or does not fit. */
static __attribute__((noinline)) bool json__str_slow(struct json__out *w, const char *s, size_t n)
{
    size_t q = al_json_quoted_len(s, n);
    if (!q)
        return false;
    if (w->len + q <= w->size) {
        if (q == n + 2) {
            w->buf[w->len] = '"';
            memcpy(w->buf + w->len + 1, s, n);
            w->buf[w->len + n + 1] = '"';
        } else {
            al_json_quote(s, n, w->buf + w->len);
        }
    }
    w->len += q;
    return true;
}

static inline bool json__str(struct json__out *w, const char *s, size_t n)
{
    if (w->len + n + 2 <= w->size &&
        json__plain_copy((const unsigned char *)s, n, w->buf + w->len + 1)) {
        w->buf[w->len] = '"';
        w->buf[w->len + n + 1] = '"';
        w->len += n + 2;
        return true;
    }
    return json__str_slow(w, s, n);
}

static __attribute__((noinline)) bool json__real(struct json__out *w, const json_t *v)
{
    /* jansson's own formatting (precision, exponent, ".0"), byte for byte. */
    char t[64];
    size_t n = json_dumpb(v, t, sizeof t, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!n || n > sizeof t)
        return false;
    json__put(w, t, n);
    return true;
}

/* The bit of a key of n bytes starting with c0 and c1 (0 when n is 1) in reject_mask: the
 * first two bytes and the length tell apart the log's own keys ("seq", "time", "prev", ...)
 * from nearly all of the proxy's ("sni", "type", "path", ...). */
static inline uint64_t json__reject_bit(size_t n, unsigned char c0, unsigned char c1)
{
    return 1ull << ((c0 ^ (unsigned)c1 << 1 ^ (unsigned)n << 3) & 63);
}

/* Whether key k (n bytes) is one of w->reject. */
static bool json__rejected(const struct json__out *w, const char *k, size_t n)
{
    if (n == 0 || !(w->reject_mask &
                    json__reject_bit(n, (unsigned char)k[0], n > 1 ? (unsigned char)k[1] : 0)))
        return false;
    for (const char *const *r = w->reject; *r; r++) {
        if ((*r)[0] == k[0] && strlen(*r) == n && memcmp(*r, k, n) == 0)
            return true;
    }
    return false;
}

static bool json__value(struct json__out *w, const json_t *v, int depth);

/* A scalar in line (strings and integers are most of what is serialised), anything else
 * through json__value. */
static inline __attribute__((always_inline)) bool json__member(struct json__out *w, const json_t *v,
                                                               int depth)
{
    if (depth > AL_JSON_DUMP_DEPTH)
        return false;
    switch (json_typeof(v)) {
    case JSON_STRING:
        return json__str(w, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        if (w->len + AL_JSON_INT_MAX <= w->size)
            w->len += al_json_int(json_integer_value(v), w->buf + w->len);
        else
            json__put(w, w->num, al_json_int(json_integer_value(v), w->num));
        return true;
    default:
        return json__value(w, v, depth);
    }
}

static bool json__value(struct json__out *w, const json_t *v, int depth)
{
    if (depth > AL_JSON_DUMP_DEPTH)
        return false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        bool top = depth == 0 && w->reject, any = false;
        json__putc(w, '{');
        for (void *it = json_object_iter((json_t *)v); it;
             it = json_object_iter_next((json_t *)v, it)) {
            const char *k = json_object_iter_key(it);
            size_t kl = json_object_iter_key_len(it);
            if (top && json__rejected(w, k, kl))
                return false;
            if (!json__str(w, k, kl))
                return false;
            json__putc(w, ':');
            if (!json__member(w, json_object_iter_value(it), depth + 1))
                return false;
            json__putc(w, ',');
            any = true;
        }
        /* the last ',' becomes the '}' */
        if (any)
            w->len--;
        json__putc(w, '}');
        return true;
    }
    case JSON_ARRAY: {
        json__putc(w, '[');
        for (size_t i = 0, n = json_array_size(v); i < n; i++) {
            if (i)
                json__putc(w, ',');
            if (!json__member(w, json_array_get(v, i), depth + 1))
                return false;
        }
        json__putc(w, ']');
        return true;
    }
    case JSON_STRING:
    case JSON_INTEGER:
        return json__member(w, v, depth);
    case JSON_REAL:
        return json__real(w, v);
    case JSON_TRUE:
        json__put(w, "true", 4);
        return true;
    case JSON_FALSE:
        json__put(w, "false", 5);
        return true;
    case JSON_NULL:
        json__put(w, "null", 4);
        return true;
    }
    return false;
}

size_t al_json_dumpb(const json_t *v, char *buf, size_t size)
{
    struct json__out w = {.buf = buf, .size = size};
    if (!v || !json__value(&w, v, 0))
        return 0;
    return w.len;
}

size_t al_json_dumpb_object(const json_t *obj, const char *const *reject, char *buf, size_t size)
{
    struct json__out w = {.buf = buf, .size = size, .reject = reject};
    if (!json_is_object(obj))
        return 0;
    for (const char *const *r = reject; r && *r; r++) {
        size_t n = strlen(*r);
        if (n)
            w.reject_mask |= json__reject_bit(n, (unsigned char)(*r)[0], (unsigned char)(*r)[1]);
    }
    if (!json__value(&w, obj, 0))
        return 0;
    return w.len;
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
