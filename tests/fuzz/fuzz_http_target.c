/* tests/fuzz/fuzz_http_target: the request-target and authority parser (common/http_head.h)
 * under arbitrary bytes, with every flag combination.
 *
 * Checked after every input: no crash or sanitizer report (the input is an exact-size copy,
 * not NUL-terminated, so any read past n is an overread); on success every span lies inside
 * the input and says what the form promises (origin-form from a '/', the query after a '?',
 * the host inside the authority, a port only with has_port, an IPv6 literal that inet_pton
 * reads); on refusal a reason with a sentence; a flag only ever refuses more; the authority
 * of a parsed target parses the same on its own.
 */
#include "common/http_head.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_die(const char *what)
{
    fprintf(stderr, "fuzz_http_target: %s\n", what);
    abort();
}

static void fz_inside(const char *p, size_t n, const char *base, size_t len)
{
    if (n && (p < base || p + n > base + len))
        fz_die("a span outside the input");
}

static void fz_authority(const struct al_http_authority *a, const char *base, size_t len)
{
    fz_inside(a->text, a->len, base, len);
    fz_inside(a->host, a->host_len, a->text, a->len);
    if (a->host_len == 0 || a->host_len > 255)
        fz_die("an accepted host that is empty or longer than 255 bytes");
    if (a->has_port != (a->port != 0))
        fz_die("a port without has_port, or has_port without a port");
    if (memchr(a->host, '@', a->host_len) || memchr(a->host, '\\', a->host_len) ||
        memchr(a->host, '%', a->host_len))
        fz_die("a host with a byte the parser refuses");
    if (a->ip6) {
        char buf[INET6_ADDRSTRLEN];
        struct in6_addr ip;
        if (a->host_len >= sizeof buf)
            fz_die("an IPv6 literal too long to be one");
        memcpy(buf, a->host, a->host_len);
        buf[a->host_len] = 0;
        if (inet_pton(AF_INET6, buf, &ip) != 1)
            fz_die("an accepted IPv6 literal inet_pton refuses");
    } else if (memchr(a->host, ':', a->host_len)) {
        fz_die("a ':' in a host that is not an IPv6 literal");
    }
    /* The authority on its own parses to the same. */
    struct al_http_authority b;
    const char *why;
    if (al_http_authority_parse(a->text, a->len, &b, &why) != 0 || b.host != a->host ||
        b.host_len != a->host_len || b.port != a->port || b.ip6 != a->ip6)
        fz_die("an authority that parses differently on its own");
}

static int fz_target(const char *t, size_t n, unsigned flags, struct al_http_target *out)
{
    const char *why = NULL;
    int rc = al_http_target_parse(t, n, flags, out, &why);
    if (rc < 0) {
        if (rc != -EINVAL || !why || al_http_target_message(why) == why)
            fz_die("a refusal without a known reason");
        return rc;
    }
    if (rc != 0)
        fz_die("a result that is neither 0 nor -EINVAL");
    if (memchr(t, '#', n))
        fz_die("an accepted target with a fragment");
    if ((flags & AL_HTTP_TARGET_NO_BACKSLASH) && memchr(t, '\\', n))
        fz_die("an accepted backslash with AL_HTTP_TARGET_NO_BACKSLASH");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            fz_die("an accepted target with a byte that is not visible ASCII");
    switch (out->form) {
    case AL_HTTP_TARGET_ORIGIN:
        if (out->path != t || out->path_len == 0)
            fz_die("an origin-form path that is not the target's start");
        break;
    case AL_HTTP_TARGET_ABSOLUTE:
        fz_authority(&out->authority, t, n);
        if (out->path_len && out->path[0] != '/')
            fz_die("an absolute-form path that does not start with '/'");
        break;
    case AL_HTTP_TARGET_AUTHORITY:
        if (!(flags & AL_HTTP_TARGET_AUTHORITY_OK))
            fz_die("an authority-form without AL_HTTP_TARGET_AUTHORITY_OK");
        fz_authority(&out->authority, t, n);
        if (!out->authority.has_port || out->authority.len != n)
            fz_die("an authority-form that is not all of \"host:port\"");
        break;
    case AL_HTTP_TARGET_ASTERISK:
        if (n != 1 || t[0] != '*')
            fz_die("an asterisk-form that is not \"*\"");
        break;
    default:
        fz_die("no form");
    }
    fz_inside(out->path, out->path_len, t, n);
    if (out->has_query) {
        if (out->query[-1] != '?' || out->query != out->path + out->path_len + 1)
            fz_die("a query that does not follow the path's '?'");
        if (out->query + out->query_len != t + n)
            fz_die("a query that does not run to the target's end");
    } else if (out->query_len || (out->path_len && memchr(out->path, '?', out->path_len))) {
        fz_die("a '?' in the path, or a query without one");
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    const char *t = (const char *)data;
    struct al_http_target r[4];
    int rc[4];
    for (unsigned f = 0; f < 4; f++)
        rc[f] = fz_target(t, size, f, &r[f]);
    /* A flag only refuses more (NO_BACKSLASH) or admits one more form (AUTHORITY_OK). */
    if ((rc[AL_HTTP_TARGET_NO_BACKSLASH] == 0 && rc[0] != 0) ||
        (rc[0] == 0 && rc[AL_HTTP_TARGET_AUTHORITY_OK] != 0))
        fz_die("a flag that changed another form's result");
    if (rc[0] == 0 && rc[AL_HTTP_TARGET_AUTHORITY_OK] == 0 &&
        r[0].form != r[AL_HTTP_TARGET_AUTHORITY_OK].form)
        fz_die("AL_HTTP_TARGET_AUTHORITY_OK changed a form that parsed without it");
    /* As a Host value too. */
    struct al_http_authority a;
    const char *why = NULL;
    if (al_http_authority_parse(t, size, &a, &why) == 0)
        fz_authority(&a, t, size);
    else if (!why || al_http_target_message(why) == why)
        fz_die("an authority refusal without a known reason");
    return 0;
}
