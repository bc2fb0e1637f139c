/* common/percent: see percent.h. */
#include "percent.h"
#include "util.h"

#include <errno.h>
#include <stdbool.h>

/* RFC 3986 unreserved, without <ctype.h>: the answer must not depend on a locale. */
static int percent__unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

int al_percent_decode_byte(const char *s, size_t len, size_t *i, unsigned flags)
{
    if (flags & AL_PERCENT_UNRESERVED_ONLY)
        return -EINVAL;
    unsigned char c = (unsigned char)s[*i];
    if (c == '%') {
        if (len - *i < 3)
            return -EINVAL;
        int hi = al_hex_value((unsigned char)s[*i + 1]);
        int lo = al_hex_value((unsigned char)s[*i + 2]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        if ((hi | lo) == 0)
            return -EILSEQ;
        *i += 3;
        return hi << 4 | lo;
    }
    if (c == '\0')
        return -EILSEQ;
    *i += 1;
    return (c == '+' && (flags & AL_PERCENT_PLUS_SPACE)) ? ' ' : c;
}

ssize_t al_percent_decode(const char *in, size_t len, char *out, size_t outlen, unsigned flags)
{
    const char *upper = al_hex_upper;
    unsigned byte_flags = flags & ~(unsigned)AL_PERCENT_UNRESERVED_ONLY;
    size_t i = 0, o = 0;
    int rc = 0;
    while (i < len) {
        size_t at = i;
        int c = al_percent_decode_byte(in, len, &i, byte_flags);
        if (c < 0) {
            rc = c;
            break;
        }
        bool keep = (flags & AL_PERCENT_UNRESERVED_ONLY) && in[at] == '%' &&
                    !percent__unreserved((unsigned char)c);
        size_t need = keep ? 3 : 1;
        /* o <= at, so writing here never overtakes what in == out has yet to read. */
        if (outlen - o <= need) {
            rc = -E2BIG;
            break;
        }
        if (keep) {
            out[o++] = '%';
            out[o++] = upper[c >> 4];
            out[o++] = upper[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    if (rc < 0 || outlen == 0) {
        if (outlen)
            out[0] = '\0';
        return rc < 0 ? rc : -E2BIG;
    }
    out[o] = '\0';
    return (ssize_t)o;
}
