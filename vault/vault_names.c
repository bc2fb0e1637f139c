/* vault/vault_names: syntax of secret names and of the hosts a secret is bound to.
 *
 * Error messages never repeat the rejected text (only where and why): a value pasted by
 * mistake where a name or host was expected must not end up in a terminal or a log. */
#include "vault/vault.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#define VAULT__NAME_HINT \
    "use lowercase path segments of a-z 0-9 . _ - separated by '/', e.g. github/token"

int vault_name_check(const char *name, struct al_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return al_error_set(err, -EINVAL, "the secret name is empty: " VAULT__NAME_HINT);
    if (n > VAULT_NAME_MAX)
        return al_error_set(
            err, -EINVAL, "the secret name is too long (%zu bytes, at most %d): " VAULT__NAME_HINT,
            n, VAULT_NAME_MAX);
    int segments = 1;
    bool seg_start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/') {
            if (seg_start)
                return al_error_set(err, -EINVAL,
                                    "invalid secret name: empty path segment at byte %zu "
                                    "(leading, trailing or double '/'): " VAULT__NAME_HINT,
                                    i + 1);
            if (++segments > 8)
                return al_error_set(
                    err, -EINVAL,
                    "invalid secret name: more than 8 path segments: " VAULT__NAME_HINT);
            seg_start = true;
            continue;
        }
        if (seg_start && c == '.')
            return al_error_set(
                err, -EINVAL,
                "invalid secret name: a segment starts with '.' at byte %zu: " VAULT__NAME_HINT,
                i + 1);
        if (isupper(c))
            return al_error_set(
                err, -EINVAL,
                "invalid secret name: uppercase letter at byte %zu: " VAULT__NAME_HINT, i + 1);
        if (!(islower(c) || isdigit(c) || c == '.' || c == '_' || c == '-'))
            return al_error_set(
                err, -EINVAL,
                "invalid secret name: character not allowed at byte %zu: " VAULT__NAME_HINT, i + 1);
        seg_start = false;
    }
    if (seg_start)
        return al_error_set(err, -EINVAL,
                            "invalid secret name: it ends with '/': " VAULT__NAME_HINT);
    return 0;
}

static bool vault__label_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(islower(c) || isdigit(c) || c == '-'))
            return false;
    }
    return true;
}

static bool vault__dns_ok(const char *s, int *labels)
{
    size_t n = strlen(s);
    *labels = 0;
    if (n == 0 || n > VAULT_HOST_MAX)
        return false;
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (!vault__label_ok(p, l))
            return false;
        (*labels)++;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

/* Why a host is not a DNS name, without repeating it. */
static int vault__host_error(const char *h, struct al_error *err)
{
    size_t n = strlen(h);
    if (n == 0)
        return al_error_set(err, -EINVAL, "invalid bound host: it is empty");
    if (n > VAULT_HOST_MAX)
        return al_error_set(err, -EINVAL, "invalid bound host: longer than %d bytes",
                            VAULT_HOST_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == ':')
            return al_error_set(err, -EINVAL,
                                "invalid bound host: ':' at byte %zu (give the host name only, "
                                "without a port or scheme)",
                                i + 1);
        if (!(islower(c) || isdigit(c) || c == '-' || c == '.' || (c == '*' && i == 0)))
            return al_error_set(err, -EINVAL,
                                "invalid bound host: character not allowed at byte %zu (a DNS "
                                "name has labels of a-z 0-9 -)",
                                i + 1);
    }
    return al_error_set(err, -EINVAL,
                        "invalid bound host: empty label, a label longer than 63 bytes, or a "
                        "label starting or ending with '-'; expected a name such as "
                        "api.github.com or *.example.com");
}

int vault_host_check(char *host, struct al_error *err)
{
    size_t n = strlen(host);
    for (size_t i = 0; i < n; i++)
        host[i] = (char)tolower((unsigned char)host[i]);
    if (n > 1 && host[n - 1] == '.')
        host[--n] = '\0';
    int labels = 0;
    if (strncmp(host, "*.", 2) == 0) {
        if (!vault__dns_ok(host + 2, &labels))
            return vault__host_error(host + 2, err);
        if (labels < 2)
            return al_error_set(err, -EINVAL,
                                "invalid bound host: a wildcard must be '*.' followed by a name "
                                "of at least two labels, e.g. *.example.com");
        return 0;
    }
    if (!vault__dns_ok(host, &labels))
        return vault__host_error(host, err);
    return 0;
}

bool vault_host_allowed(const char *const *patterns, size_t n, const char *host)
{
    char h[VAULT_HOST_MAX + 2];
    size_t hl = host ? strlen(host) : 0;
    if (hl == 0 || hl > VAULT_HOST_MAX + 1)
        return false;
    for (size_t i = 0; i < hl; i++)
        h[i] = (char)tolower((unsigned char)host[i]);
    h[hl] = '\0';
    if (h[hl - 1] == '.')
        h[--hl] = '\0';
    int labels;
    if (!vault__dns_ok(h, &labels))
        return false;
    for (size_t i = 0; i < n; i++) {
        const char *p = patterns[i];
        if (strncmp(p, "*.", 2) == 0) {
            size_t sl = strlen(p + 1); /* ".example.com" */
            if (hl > sl && strcmp(h + hl - sl, p + 1) == 0 && !memchr(h, '.', hl - sl))
                return true;
        } else if (strcmp(h, p) == 0) {
            return true;
        }
    }
    return false;
}
