/* egress/audit_rec: the record helpers of audit.h (pure: no I/O). */
#include "audit.h"

#include <string.h>

#include "common/util.h"

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if s does not start one. */
static size_t rec__utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c >= 0x01 && c < 0x80)
        return 1;
    size_t len;
    unsigned min;
    unsigned cp;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        cp = c & 0x07;
        min = 0x10000;
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
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

json_t *egress_json_str(const char *s, size_t n)
{
    /* Worst case: every byte becomes U+FFFD (3 bytes), plus "...". */
    char out[EGRESS_REC_STR_MAX * 3 + 8];
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
