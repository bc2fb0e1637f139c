/* controlplane/ids: see ids.h. */
#include "ids.h"

#include <sodium.h>
#include <string.h>

#include "common/util.h"

static const char ids__alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";

static void ids__hex(char *out, size_t nbytes)
{
    uint8_t b[64];
    randombytes_buf(b, nbytes);
    sodium_bin2hex(out, 2 * nbytes + 1, b, nbytes);
    sodium_memzero(b, sizeof b);
}

void cp_sandbox_id_new(char out[CP_ID_LEN + 1])
{
    /* The first character is a letter so that ids never look like numbers. */
    out[0] = ids__alnum[randombytes_uniform(26)];
    for (size_t i = 1; i < CP_ID_LEN; i++)
        out[i] = ids__alnum[randombytes_uniform(sizeof ids__alnum - 1)];
    out[CP_ID_LEN] = '\0';
}

bool cp_sandbox_id_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
        if (n >= 63)
            return false;
    }
    return n > 0;
}

void cp_token_new(char out[CP_TOKEN_LEN + 1])
{
    ids__hex(out, CP_TOKEN_LEN / 2);
}

void cp_apikey_new(char out[CP_APIKEY_LEN + 1])
{
    memcpy(out, "e2b_", 4);
    ids__hex(out + 4, (CP_APIKEY_LEN - 4) / 2);
}

void cp_keyid_new(char out[CP_KEYID_LEN + 1])
{
    memcpy(out, "key_", 4);
    ids__hex(out + 4, (CP_KEYID_LEN - 4) / 2);
}

bool cp_apikey_wellformed(const char *s)
{
    if (strncmp(s, "e2b_", 4) != 0)
        return false;
    size_t n = strnlen(s + 4, 129);
    return n >= 8 && n <= 128 && al_hex_is_lower(s + 4, n);
}

void cp_digest(const char *s, size_t len, uint8_t out[CP_DIGEST_LEN])
{
    crypto_generichash(out, CP_DIGEST_LEN, (const unsigned char *)s, len, NULL, 0);
}

void cp_digest_hex(const uint8_t d[CP_DIGEST_LEN], char out[2 * CP_DIGEST_LEN + 1])
{
    sodium_bin2hex(out, 2 * CP_DIGEST_LEN + 1, d, CP_DIGEST_LEN);
}

bool cp_digest_equal(const uint8_t a[CP_DIGEST_LEN], const uint8_t b[CP_DIGEST_LEN])
{
    return sodium_memcmp(a, b, CP_DIGEST_LEN) == 0;
}

bool cp_secret_equal(const char *presented, size_t plen, const char *expected, size_t elen)
{
    uint8_t a[CP_DIGEST_LEN], b[CP_DIGEST_LEN];
    cp_digest(presented, plen, a);
    cp_digest(expected, elen, b);
    bool eq = cp_digest_equal(a, b);
    sodium_memzero(a, sizeof a);
    sodium_memzero(b, sizeof b);
    return eq;
}
