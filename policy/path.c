/* policy/path: request paths and path patterns, and HTTP method tokens.
 *
 * Paths are normalised before matching, the same way for requests and for patterns:
 * the query is cut off; percent-escapes of unreserved characters (A-Z a-z 0-9 - . _ ~) are
 * decoded, other escapes upper-cased. What could be read two ways is refused rather than
 * guessed: dot segments (also as %2e or with ;params), empty segments (//), backslashes,
 * %00, fragments, raw control or non-ASCII bytes, and "." or ".." hidden behind an encoded
 * slash (%2F, %5C) that some upstreams decode. Patterns: exact segments, '*' within a
 * segment, '**' as a whole segment for any number (zero or more) of segments. */
#include "policy/internal.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "common/percent.h"

/* Is this segment (or a piece of it between encoded slashes) a dot segment, also with
 * ;parameters ("..;jsessionid=x")? */
static bool path__dotseg(const char *s, size_t len)
{
    const char *semi = memchr(s, ';', len);
    if (semi)
        len = (size_t)(semi - s);
    return (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.');
}

/* Checks the segments of a normalised path or pattern. */
static int path__check_segments(const char *p, size_t len, bool pattern, struct al_error *err)
{
    size_t start = 1, nseg = 0, nglob = 0;
    for (size_t i = 1; i <= len; i++) {
        if (i < len && p[i] != '/')
            continue;
        const char *s = p + start;
        size_t sl = i - start;
        nseg++;
        if (sl == 0 && i < len)
            return al_error_set(err, -EINVAL, "empty path segment ('//') is ambiguous");
        if (path__dotseg(s, sl))
            return al_error_set(err, -EINVAL,
                                "dot segment ('.' or '..') in path is ambiguous; it is refused, "
                                "not resolved");
        /* Pieces between encoded slashes or backslashes. */
        size_t ps = 0;
        for (size_t j = 0; j <= sl; j++) {
            bool sep =
                j + 3 <= sl && s[j] == '%' &&
                ((s[j + 1] == '2' && s[j + 2] == 'F') || (s[j + 1] == '5' && s[j + 2] == 'C'));
            if (j == sl || sep) {
                if ((ps > 0 || j < sl) && path__dotseg(s + ps, j - ps))
                    return al_error_set(err, -EINVAL,
                                        "'.' or '..' next to an encoded slash (%%2F, %%5C) could "
                                        "be a traversal on the upstream");
                if (sep) {
                    j += 2;
                    ps = j + 1;
                }
            }
        }
        if (pattern) {
            const char *ds = memmem(s, sl, "**", 2);
            if (ds) {
                if (sl != 2)
                    return al_error_set(err, -EINVAL,
                                        "'**' must be a whole segment (/a/**/b), not part of one");
                nglob++;
            }
        }
        start = i + 1;
    }
    if (nseg > 128)
        return al_error_set(err, -EINVAL, "path has more than 128 segments");
    if (nglob > 4)
        return al_error_set(err, -EINVAL, "a path pattern may use '**' at most 4 times");
    return 0;
}

static int path__normalize(const char *in, size_t len, char *out, size_t outlen, bool pattern,
                           struct al_error *err)
{
    if (len == 0)
        return al_error_set(err, -EINVAL, "empty path");
    if (in[0] != '/')
        return al_error_set(err, -EINVAL, "a path must start with '/'");
    if (!pattern) {
        const char *q = memchr(in, '?', len);
        if (q)
            len = (size_t)(q - in);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c < 0x21 || c >= 0x7f)
            return al_error_set(err, -EINVAL,
                                "path contains a control, space or non-ASCII byte (0x%02x): "
                                "percent-encode it",
                                c);
        if (c == '#')
            return al_error_set(err, -EINVAL, "a fragment ('#') does not belong in a path");
        if (c == '\\')
            return al_error_set(err, -EINVAL,
                                "a backslash in a path is ambiguous (some servers "
                                "treat it as '/')");
        if (pattern && c == '?')
            return al_error_set(err, -EINVAL,
                                "path patterns match the path only: remove the query ('?...')");
    }
    ssize_t o = al_percent_decode(in, len, out, outlen, AL_PERCENT_UNRESERVED_ONLY);
    if (o == -E2BIG)
        return al_error_set(err, -EINVAL, "path is longer than %zu bytes", outlen ? outlen - 1 : 0);
    if (o == -EILSEQ)
        return al_error_set(err, -EINVAL, "%%00 (NUL) in path");
    if (o < 0)
        return al_error_set(err, -EINVAL, "malformed percent-escape in path");
    int rc = path__check_segments(out, (size_t)o, pattern, err);
    return rc ? rc : (int)o;
}

int policy_path_normalize(const char *in, size_t len, char *out, size_t outlen,
                          struct al_error *err)
{
    if (!in)
        return al_error_set(err, -EINVAL, "no path");
    int rc = path__normalize(in, len, out, outlen, false, err);
    return rc < 0 ? rc : 0;
}

int policy__path_pattern_canon(const char *in, char *out, size_t outlen, struct al_error *err)
{
    size_t len = strlen(in);
    if (len > 1024)
        return al_error_set(err, -EINVAL, "path pattern longer than 1024 characters");
    int rc = path__normalize(in, len, out, outlen, true, err);
    return rc < 0 ? rc : 0;
}

int policy_path_pattern_check(const char *pattern, struct al_error *err)
{
    char buf[1100];
    return policy__path_pattern_canon(pattern, buf, sizeof buf, err);
}

struct path__seg {
    const char *s;
    size_t len;
};

static size_t path__split(const char *p, struct path__seg *v, size_t max)
{
    size_t n = 0, start = 1, len = strlen(p);
    for (size_t i = 1; i <= len && n < max; i++) {
        if (i == len || p[i] == '/') {
            v[n].s = p + start;
            v[n].len = i - start;
            n++;
            start = i + 1;
        }
    }
    return n;
}

bool policy_path_match(const char *pattern, const char *path)
{
    struct path__seg pv[130], sv[130];
    size_t pn = path__split(pattern, pv, 130), sn = path__split(path, sv, 130);
    if (pn >= 130 || sn >= 130)
        return false;
    /* Glob over segments: '**' is the star; each other pattern segment matches exactly one
     * path segment (with '*' globbing inside it). Greedy with one backtrack point. */
    size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0;
    while (si < sn) {
        if (pi < pn && pv[pi].len == 2 && pv[pi].s[0] == '*' && pv[pi].s[1] == '*') {
            star = pi++;
            mark = si;
        } else if (pi < pn &&
                   policy__glob_label_match(pv[pi].s, pv[pi].len, sv[si].s, sv[si].len)) {
            pi++;
            si++;
        } else if (star != SIZE_MAX) {
            pi = star + 1;
            si = ++mark;
        } else {
            return false;
        }
    }
    while (pi < pn && pv[pi].len == 2 && pv[pi].s[0] == '*' && pv[pi].s[1] == '*')
        pi++;
    return pi == pn;
}

/* ---- methods -------------------------------------------------------------------------- */

bool policy__method_token_valid(const char *m, size_t len)
{
    if (len == 0 || len > 32)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)m[i];
        if (isalnum(c))
            continue;
        if (!strchr("!#$%&'*+-.^_`|~", c) || c == 0)
            return false;
    }
    return true;
}

uint32_t policy__method_bit(const char *m, size_t len)
{
    switch (len) {
    case 3:
        if (memcmp(m, "GET", 3) == 0)
            return POLICY__M_GET;
        if (memcmp(m, "PUT", 3) == 0)
            return POLICY__M_PUT;
        break;
    case 4:
        if (memcmp(m, "HEAD", 4) == 0)
            return POLICY__M_HEAD;
        if (memcmp(m, "POST", 4) == 0)
            return POLICY__M_POST;
        break;
    case 5:
        if (memcmp(m, "PATCH", 5) == 0)
            return POLICY__M_PATCH;
        if (memcmp(m, "TRACE", 5) == 0)
            return POLICY__M_TRACE;
        break;
    case 6:
        if (memcmp(m, "DELETE", 6) == 0)
            return POLICY__M_DELETE;
        break;
    case 7:
        if (memcmp(m, "OPTIONS", 7) == 0)
            return POLICY__M_OPTIONS;
        break;
    }
    return 0;
}
