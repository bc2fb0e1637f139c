/* common/percent: percent-decoding (RFC 3986 section 2.1), the one decoder of the tree.
 *
 * Owns: what a '%' escape is ('%' and two hex digits, either case), the refusals every
 * caller shares (a malformed escape, an encoded NUL: a C string cannot carry it and every
 * later consumer would stop there) and, as flags, the choices callers differ in: whether
 * '+' is a space (form encoding) and whether only unreserved characters are decoded (a
 * path that is compared, not interpreted). Built into every component, the static musl
 * agent included: plain C, no allocation, no locale.
 */
#ifndef AIRLOCK_COMMON_PERCENT_H
#define AIRLOCK_COMMON_PERCENT_H

#include <stddef.h>
#include <sys/types.h>

enum al_percent_flags {
    /* '+' decodes to ' ' (application/x-www-form-urlencoded: query strings, forms). */
    AL_PERCENT_PLUS_SPACE = 1u << 0,
    /* Decode only escapes of unreserved characters (A-Z a-z 0-9 - . _ ~), which mean the
     * same encoded or not (RFC 3986 6.2.2.2); keep every other escape, its hex upper-cased
     * (6.2.2.1), so that equal paths compare equal and "%2F" never becomes a '/'. */
    AL_PERCENT_UNRESERVED_ONLY = 1u << 1,
};

/* Decodes in[0..len) into out (outlen bytes, NUL-terminated). out may be in: the output is
 * never longer than what it was decoded from. Returns the decoded length, or -EINVAL for a
 * '%' not followed by two hex digits, -EILSEQ for a NUL (encoded as "%00", or a raw byte
 * 0 inside len), -E2BIG when the
 * result and its NUL do not fit in outlen. On an error out holds no partial result ("" when
 * outlen > 0). */
ssize_t al_percent_decode(const char *in, size_t len, char *out, size_t outlen, unsigned flags);

/* One step of the same decoder, for callers that compare without copying: decodes the
 * character of s[0..len) at *i, advances *i past it and returns the byte (1..255), or
 * -EINVAL / -EILSEQ as above (*i unchanged). AL_PERCENT_UNRESERVED_ONLY does not apply to a
 * single byte and is refused (-EINVAL). */
int al_percent_decode_byte(const char *s, size_t len, size_t *i, unsigned flags);

#endif
