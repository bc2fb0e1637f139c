/* vault/vault_names: syntax of secret names, of the hosts a secret is bound to and of its
 * metadata.
 *
 * Bound hosts use the policy library's one canonicaliser and matcher (policy_bound_host_*).
 *
 * Error messages never repeat the rejected text (only where and why): a value pasted by
 * mistake where a name or host was expected must not end up in a terminal or a log. */
#include "vault/vault.h"

#include "policy/policy.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "common/util.h"

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

/* The policy library's messages quote the text they reject ('...'): blank those spans, since
 * the vault never repeats what it was given (see the header comment). */
static void vault__redact(struct al_error *err)
{
    if (!err)
        return;
    char out[sizeof err->msg];
    size_t o = 0;
    bool in = false;
    for (const char *p = err->msg; *p && o + 4 < sizeof out; p++) {
        if (*p == '\'') {
            if (!in) {
                memcpy(out + o, "'...", 4);
                o += 4;
            } else {
                out[o++] = '\'';
            }
            in = !in;
            continue;
        }
        if (!in)
            out[o++] = *p;
    }
    if (in && o < sizeof out - 1)
        out[o++] = '\'';
    out[o] = '\0';
    memcpy(err->msg, out, o + 1);
}

int vault_host_check(char *host, bool psl, struct al_error *err)
{
    char canon[POLICY_BOUND_HOST_MAX + 1];
    struct al_error e = {0};
    size_t n = strlen(host);
    if (n == 0)
        return al_error_set(err, -EINVAL, "invalid bound host: it is empty");
    if (n > VAULT_HOST_MAX + 1)
        return al_error_set(err, -EINVAL, "invalid bound host: longer than %d bytes",
                            VAULT_HOST_MAX);
    if (policy_bound_host_canon(host, n, psl, canon, &e) != 0) {
        vault__redact(&e);
        return al_error_set(err, -EINVAL,
                            "invalid bound host: %s (expected a host such as api.github.com, "
                            "a wildcard such as *.example.com, or an IP address)",
                            e.msg);
    }
    memcpy(host, canon, strlen(canon) + 1);
    return 0;
}

bool vault_host_allowed(const char *const *patterns, size_t n, const char *host)
{
    return host && policy_bound_host_match(patterns, n, host, strlen(host));
}

static bool vault__has_ctl(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return true;
    return false;
}

int vault_metadata_check(const json_t *m, struct al_error *err)
{
    if (!json_is_object(m))
        return al_error_set(err, -EINVAL,
                            "the metadata must be an object of strings: {\"team\": \"ml\"}");
    if (json_object_size(m) > VAULT_META_MAX_ENTRIES)
        return al_error_set(err, -EINVAL, "the metadata has %zu entries, at most %d",
                            json_object_size(m), (int)VAULT_META_MAX_ENTRIES);
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v)
    {
        size_t kl = strlen(k);
        if (kl == 0 || kl > VAULT_META_KEY_MAX || vault__has_ctl(k, kl))
            return al_error_set(err, -EINVAL,
                                "a metadata key must have 1 to %d bytes and no control "
                                "characters",
                                (int)VAULT_META_KEY_MAX);
        if (!json_is_string(v))
            return al_error_set(err, -EINVAL, "metadata \"%s\": the value must be a string", k);
        size_t vl = json_string_length(v);
        if (vl > VAULT_META_VALUE_MAX || vault__has_ctl(json_string_value(v), vl))
            return al_error_set(err, -EINVAL,
                                "metadata \"%s\": the value must have at most %d bytes and no "
                                "control characters",
                                k, (int)VAULT_META_VALUE_MAX);
        total += kl + vl;
    }
    if (total > VAULT_META_TOTAL_MAX)
        return al_error_set(err, -EINVAL,
                            "the metadata has %zu bytes of keys and values, at most %d", total,
                            (int)VAULT_META_TOTAL_MAX);
    return 0;
}

bool vault_uid_valid(const char *s)
{
    return s && strlen(s) == VAULT_UID_LEN && strncmp(s, "sec_", 4) == 0 &&
           al_hex_is_lower(s + 4, VAULT_UID_LEN - 4);
}

void vault_uid_new(char out[VAULT_UID_LEN + 1])
{
    unsigned char b[(VAULT_UID_LEN - 4) / 2];
    randombytes_buf(b, sizeof b);
    memcpy(out, "sec_", 4);
    sodium_bin2hex(out + 4, VAULT_UID_LEN - 4 + 1, b, sizeof b);
}
