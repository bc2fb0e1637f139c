/* egress/audit_rec: the record helpers of audit.h (pure: no I/O): json_t builders, and the
 * writer that serialises the same records without allocating (egress_recw). */
#include "audit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/util.h"

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if s does not start one; a NUL is
 * no character a record keeps. */
static size_t rec__utf8_len(const unsigned char *s, size_t n)
{
    return n && s[0] ? al_json_utf8_len(s, n) : 0;
}

/* Worst case of rec__sanitize: every byte becomes U+FFFD (3 bytes), plus "...". */
#define REC_SANE_MAX (EGRESS_REC_STR_MAX * 3 + 8)

/* What a string value of a record holds: valid UTF-8 without NUL, at most
 * EGRESS_REC_STR_MAX bytes of input (cut at a character boundary, then "..."). */
static size_t rec__sanitize(const char *s, size_t n, char out[REC_SANE_MAX])
{
    size_t o = 0, i = 0;
    const unsigned char *u = (const unsigned char *)s;
    while (i < n && i < EGRESS_REC_STR_MAX) {
        size_t l = rec__utf8_len(u + i, n - i);
        if (l == 0 || i + l > EGRESS_REC_STR_MAX) {
            if (l && i + l > EGRESS_REC_STR_MAX)
                break;
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, l);
        o += l;
        i += l;
    }
    if (i < n) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    return o;
}

json_t *egress_json_str(const char *s, size_t n)
{
    char out[REC_SANE_MAX];
    size_t o = rec__sanitize(s, n, out);
    return json_stringn(out, o);
}

json_t *egress_rec_new(const char *type)
{
    json_t *r = json_object();
    if (r)
        json_object_set_new(r, "type", json_string(type));
    return r;
}

void egress_rec_strn(json_t *r, const char *key, const char *s, size_t n)
{
    json_object_set_new(r, key, s ? egress_json_str(s, n) : json_null());
}

void egress_rec_str(json_t *r, const char *key, const char *s)
{
    egress_rec_strn(r, key, s, s ? strlen(s) : 0);
}

void egress_rec_int(json_t *r, const char *key, int64_t v)
{
    json_object_set_new(r, key, json_integer(v));
}

void egress_rec_bool(json_t *r, const char *key, bool v)
{
    json_object_set_new(r, key, json_boolean(v));
}

void egress_rec_us(json_t *r, const char *key, uint64_t ns)
{
    json_object_set_new(r, key, json_integer((json_int_t)(ns / 1000)));
}

/* ---- egress_recw ------------------------------------------------------------------------- */

static bool recw__room(struct egress_recw *w, size_t n)
{
    if (w->failed)
        return false;
    if (w->len + n <= w->cap)
        return true;
    size_t cap = w->cap * 2;
    while (cap < w->len + n)
        cap *= 2;
    char *b = w->heap ? realloc(w->buf, cap) : malloc(cap);
    if (!b) {
        w->failed = true;
        return false;
    }
    if (!w->heap)
        memcpy(b, w->buf, w->len);
    w->buf = b;
    w->cap = cap;
    w->heap = true;
    return true;
}

static void recw__put(struct egress_recw *w, const char *s, size_t n)
{
    if (recw__room(w, n)) {
        memcpy(w->buf + w->len, s, n);
        w->len += n;
    }
}

static void recw__ch(struct egress_recw *w, char c)
{
    if (recw__room(w, 1))
        w->buf[w->len++] = c;
}

/* A comma when this level already has a member, then "key": (key NULL: an array element). */
static void recw__key(struct egress_recw *w, const char *key)
{
    if (w->comma[w->depth])
        recw__ch(w, ',');
    w->comma[w->depth] = true;
    if (key) {
        size_t kl = strlen(key);
        if (recw__room(w, kl + 3)) {
            w->buf[w->len++] = '"';
            memcpy(w->buf + w->len, key, kl);
            w->len += kl;
            w->buf[w->len++] = '"';
            w->buf[w->len++] = ':';
        }
    }
}

/* The string as jansson dumps it (its input already valid UTF-8 without NUL). */
static void recw__quoted(struct egress_recw *w, const char *s, size_t n)
{
    size_t need = al_json_quoted_len(s, n);
    if (need && recw__room(w, need))
        w->len += al_json_quote(s, n, w->buf + w->len);
}

static void recw__string(struct egress_recw *w, const char *s, size_t n)
{
    /* The common case, printable ASCII without quote or backslash within the length
     * bound, is copied as it is. */
    /* Byte classes: 0 copied, 1 escaped ('"', '\\'), 2 sanitised (controls, non-ASCII). */
    static const unsigned char cls[256] = {
        [0 ... 0x1f] = 2,
        ['"'] = 1,
        ['\\'] = 1,
        [0x80 ... 0xff] = 2,
    };
    unsigned acc = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++)
        acc |= cls[u[i]];
    bool plain = n <= EGRESS_REC_STR_MAX && !(acc & 2);
    if (plain && !acc) {
        if (recw__room(w, n + 2)) {
            w->buf[w->len++] = '"';
            memcpy(w->buf + w->len, s, n);
            w->len += n;
            w->buf[w->len++] = '"';
        }
        return;
    }
    if (plain) {
        recw__quoted(w, s, n);
        return;
    }
    char out[REC_SANE_MAX];
    recw__quoted(w, out, rec__sanitize(s, n, out));
}

void egress_recw_begin(struct egress_recw *w, const char *type)
{
    w->buf = w->stack;
    w->cap = sizeof w->stack;
    w->len = 0;
    w->heap = w->failed = false;
    w->depth = 0;
    memset(w->comma, 0, sizeof w->comma);
    recw__ch(w, '{');
    egress_recw_str(w, "type", type);
    w->mark = w->len;
}

void egress_recw_strn(struct egress_recw *w, const char *key, const char *s, size_t n)
{
    recw__key(w, key);
    if (s)
        recw__string(w, s, n);
    else
        recw__put(w, "null", 4);
}

void egress_recw_str(struct egress_recw *w, const char *key, const char *s)
{
    egress_recw_strn(w, key, s, s ? strlen(s) : 0);
}

void egress_recw_int(struct egress_recw *w, const char *key, int64_t v)
{
    char t[AL_JSON_INT_MAX];
    size_t n = al_json_int(v, t);
    recw__key(w, key);
    recw__put(w, t, n);
}

void egress_recw_bool(struct egress_recw *w, const char *key, bool v)
{
    recw__key(w, key);
    recw__put(w, v ? "true" : "false", v ? 4 : 5);
}

void egress_recw_null(struct egress_recw *w, const char *key)
{
    recw__key(w, key);
    recw__put(w, "null", 4);
}

void egress_recw_us(struct egress_recw *w, const char *key, uint64_t ns)
{
    egress_recw_int(w, key, (int64_t)(ns / 1000));
}

static void recw__open(struct egress_recw *w, const char *key, char bracket)
{
    recw__key(w, key);
    recw__ch(w, bracket);
    if (w->depth + 1 < EGRESS_RECW_DEPTH)
        w->depth++;
    else
        w->failed = true; /* a programming error: deeper than any record goes */
    w->comma[w->depth] = false;
}

void egress_recw_obj_begin(struct egress_recw *w, const char *key)
{
    recw__open(w, key, '{');
}

void egress_recw_arr_begin(struct egress_recw *w, const char *key)
{
    recw__open(w, key, '[');
}

void egress_recw_elem_strn(struct egress_recw *w, const char *s, size_t n)
{
    recw__key(w, NULL);
    recw__string(w, s, n);
}

void egress_recw_close(struct egress_recw *w, char bracket)
{
    recw__ch(w, bracket);
    if (w->depth > 0)
        w->depth--;
}

void egress_recw_raw(struct egress_recw *w, const char *members, size_t len)
{
    if (!len)
        return;
    if (w->comma[w->depth])
        recw__ch(w, ',');
    w->comma[w->depth] = true;
    recw__put(w, members, len);
}

const char *egress_recw_members(const struct egress_recw *w, size_t *len)
{
    if (w->failed || w->depth != 0) {
        *len = 0;
        return NULL;
    }
    size_t start = w->mark;
    if (start < w->len && w->buf[start] == ',')
        start++;
    *len = w->len - start;
    return w->buf + start;
}

int egress_recw_end(struct egress_recw *w, const char **out, size_t *len)
{
    if (w->depth != 0)
        w->failed = true;
    recw__ch(w, '}');
    if (w->failed)
        return -ENOMEM;
    *out = w->buf;
    *len = w->len;
    return 0;
}

void egress_recw_free(struct egress_recw *w)
{
    if (w->heap)
        free(w->buf);
    w->heap = false;
    w->buf = w->stack;
}
