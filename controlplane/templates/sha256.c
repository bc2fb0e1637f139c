/* controlplane/templates/sha256: sha256 streams and "sha256:<hex>" digests (internal.h), on
 * OpenSSL's libcrypto, which uses the CPU's SHA extensions where it has them.
 */
#include "internal.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

bool tpl_digest_valid(const char *s)
{
    return strncmp(s, "sha256:", 7) == 0 && strlen(s) == TPL_DIGEST_LEN &&
           al_hex_is_lower(s + 7, TPL_DIGEST_LEN - 7);
}

/* ---- sha256 ----------------------------------------------------------------------------- */

struct tpl_sha256 {
    EVP_MD_CTX *ctx;
};

struct tpl_sha256 *tpl_sha256_new(void)
{
    struct tpl_sha256 *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void tpl_sha256_update(struct tpl_sha256 *h, const void *data, size_t len)
{
    EVP_DigestUpdate(h->ctx, data, len);
}

void tpl_sha256_reset(struct tpl_sha256 *h)
{
    EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
}

void tpl_sha256_final(struct tpl_sha256 *h, char *out)
{
    unsigned char d[32];
    unsigned int n = 0;
    EVP_DigestFinal_ex(h->ctx, d, &n);
    memcpy(out, "sha256:", 7);
    al_hex_encode(out + 7, d, sizeof d, false);
    tpl_sha256_reset(h);
}

void tpl_sha256_free(struct tpl_sha256 *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void tpl_sha256_digest(const void *data, size_t len, char *out)
{
    unsigned char d[32];
    EVP_Digest(data, len, d, NULL, EVP_sha256(), NULL);
    memcpy(out, "sha256:", 7);
    al_hex_encode(out + 7, d, sizeof d, false);
}
