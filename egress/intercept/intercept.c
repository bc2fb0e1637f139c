/* egress/intercept/intercept: library initialisation, the random generator, error text,
 * and the fast primitives registered with mbedtls (X25519 by libsodium, P-256 ECDSA signing
 * by OpenSSL's libcrypto through its EVP API; see intercept.h) or called instead of it
 * (P-256 key generation by libcrypto). */
#include "intercept.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <psa/crypto.h>

#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#ifndef MBEDTLS_ECP_X25519_IMPL
#error \
    "mbedtls lacks airlock's deploy/mbedtls/01-x25519-impl.patch: run deploy/setup, which builds it into .deps/mbedtls"
#endif
#ifndef MBEDTLS_ECDSA_SIGN_IMPL
#error \
    "mbedtls lacks airlock's deploy/mbedtls/02-ecdsa-sign-impl.patch: run deploy/setup, which builds it into .deps/mbedtls"
#endif

#define P256_BYTES 32

/* n, the order of P-256's base point (SEC 2, 2.4.2), big-endian. */
static const unsigned char p256_order[P256_BYTES] = {
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
};

static pthread_once_t intercept__once = PTHREAD_ONCE_INIT;
/* P-256 domain parameters, read-only once made: every key generation starts from them, which
 * spares the curve's construction by name (about a third of a generation). */
static EVP_PKEY *intercept__p256;
static int intercept__init_rc;
static const char *intercept__init_what;

/* ---- signers: libcrypto's copy of each P-256 key mbedtls signs with ---------------------
 *
 * The ECDSA hook of mbedtls hands over the private scalar, not a key object, and mbedtls'
 * key has no room for one. So each signer is found by an id of its scalar: a BLAKE2b keyed
 * with a secret of this process, which says nothing about the key. The table holds one
 * reference to each EVP_PKEY; a signature takes its own for the time it signs, so that a
 * signer freed meanwhile (a leaf evicted) stays valid until then. */
struct intercept_signer {
    struct intercept_signer *next; /* in its bucket */
    unsigned char id[crypto_generichash_BYTES];
    EVP_PKEY *key;
};

static pthread_mutex_t signer__lock = PTHREAD_MUTEX_INITIALIZER;
static struct intercept_signer **signer__tab;
static size_t signer__cap, signer__n;
static unsigned char signer__idkey[crypto_generichash_KEYBYTES];

static void signer__id(const unsigned char d[P256_BYTES],
                       unsigned char id[crypto_generichash_BYTES])
{
    crypto_generichash(id, crypto_generichash_BYTES, d, P256_BYTES, signer__idkey,
                       sizeof signer__idkey);
}

static size_t signer__bucket(const unsigned char *id, size_t cap)
{
    size_t h;
    memcpy(&h, id, sizeof h);
    return h & (cap - 1);
}

/* Doubles the table when it is full; a table that cannot grow keeps working, with longer
 * chains. Called with the lock held. */
static void signer__grow(void)
{
    size_t cap = signer__cap ? signer__cap * 2 : 256;
    struct intercept_signer **tab = calloc(cap, sizeof *tab);
    if (!tab)
        return;
    for (size_t i = 0; i < signer__cap; i++)
        for (struct intercept_signer *s = signer__tab[i], *next; s; s = next) {
            next = s->next;
            size_t b = signer__bucket(s->id, cap);
            s->next = tab[b];
            tab[b] = s;
        }
    free(signer__tab);
    signer__tab = tab;
    signer__cap = cap;
}

/* Enters key (its reference passes to the signer) under the id of d. */
static int signer__add(const unsigned char d[P256_BYTES], EVP_PKEY *key,
                       struct intercept_signer **out)
{
    struct intercept_signer *s = calloc(1, sizeof *s);
    if (!s) {
        EVP_PKEY_free(key);
        return -ENOMEM;
    }
    signer__id(d, s->id);
    s->key = key;
    pthread_mutex_lock(&signer__lock);
    if (signer__n >= signer__cap)
        signer__grow();
    if (!signer__cap) {
        pthread_mutex_unlock(&signer__lock);
        EVP_PKEY_free(key);
        free(s);
        return -ENOMEM;
    }
    size_t b = signer__bucket(s->id, signer__cap);
    s->next = signer__tab[b];
    signer__tab[b] = s;
    signer__n++;
    pthread_mutex_unlock(&signer__lock);
    *out = s;
    return 0;
}

/* A reference to the key whose scalar is d, or NULL when no signer was made for it. */
static EVP_PKEY *signer__find(const unsigned char d[P256_BYTES])
{
    unsigned char id[crypto_generichash_BYTES];
    signer__id(d, id);
    EVP_PKEY *key = NULL;
    pthread_mutex_lock(&signer__lock);
    if (signer__cap)
        for (struct intercept_signer *s = signer__tab[signer__bucket(id, signer__cap)]; s;
             s = s->next)
            if (memcmp(s->id, id, sizeof id) == 0) {
                if (EVP_PKEY_up_ref(s->key) == 1)
                    key = s->key;
                break;
            }
    pthread_mutex_unlock(&signer__lock);
    return key;
}

void intercept_signer_free(struct intercept_signer *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&signer__lock);
    struct intercept_signer **pp = &signer__tab[signer__bucket(s->id, signer__cap)];
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = s->next;
        signer__n--;
    }
    pthread_mutex_unlock(&signer__lock);
    EVP_PKEY_free(s->key); /* the last reference clears the private key */
    free(s);
}

static void intercept__do_init(void)
{
    if (sodium_init() < 0) {
        intercept__init_rc = -EIO;
        intercept__init_what = "libsodium failed to initialise (sodium_init)";
        return;
    }
    randombytes_buf(signer__idkey, sizeof signer__idkey);
    /* X25519 (every TLS 1.3 key share, both ways) by libsodium rather than mbedtls'
     * generic ladder: about 0.03 ms instead of 0.36 ms per multiplication. */
    mbedtls_ecp_set_x25519_impl(intercept_x25519);
    /* P-256 keys and signatures (CertificateVerify of every handshake toward a sandbox,
     * minted leaves) by OpenSSL: about 0.035 ms a signature instead of mbedtls' 0.2 ms. */
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!c || EVP_PKEY_paramgen_init(c) != 1 || EVP_PKEY_CTX_set_group_name(c, "P-256") != 1 ||
        EVP_PKEY_paramgen(c, &intercept__p256) != 1) {
        EVP_PKEY_CTX_free(c);
        intercept__init_rc = -EIO;
        intercept__init_what = "OpenSSL (libcrypto) has no P-256 group";
        return;
    }
    EVP_PKEY_CTX_free(c);
    mbedtls_ecdsa_set_sign_impl(intercept_ecdsa_sign);
    psa_status_t st = psa_crypto_init();
    if (st != PSA_SUCCESS) {
        intercept__init_rc = -EIO;
        intercept__init_what = "PSA crypto (mbedtls) failed to initialise: no entropy source?";
    }
}

int intercept_x25519(unsigned char out[32], const unsigned char k[32], const unsigned char u[32])
{
    /* libsodium clamps k (mbedtls hands over clamped scalars only: no change) and fails on
     * an all-zero result, i.e. a point of small order, as mbedtls' ladder does. */
    return crypto_scalarmult_curve25519(out, k, u) == 0 ? 0 : -1;
}

int intercept_ecdsa_sign(mbedtls_ecp_group_id grp_id, const unsigned char *d, size_t len,
                         const unsigned char *hash, size_t hlen, unsigned char *rs)
{
    if (grp_id != MBEDTLS_ECP_DP_SECP256R1 || len != P256_BYTES)
        return MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE;
    EVP_PKEY *key = signer__find(d);
    if (!key)
        return MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE; /* no signer for this key: mbedtls signs */
    int ret = MBEDTLS_ERR_ECP_ALLOC_FAILED;
    unsigned char der[MBEDTLS_ECDSA_MAX_SIG_LEN(256)];
    size_t der_len = sizeof der;
    ECDSA_SIG *sig = NULL;
    /* A context per signature: a context is not shared between threads, and one held per
     * key and thread would save about 5 us of the 37 (docs/development.md). */
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    if (!c)
        goto out;
    /* The hash as it is: OpenSSL truncates it to the bit length of the order, as SEC1 says
     * and mbedtls does. The nonce is OpenSSL's, fresh for each signature. */
    if (EVP_PKEY_sign_init(c) != 1 || EVP_PKEY_sign(c, der, &der_len, hash, hlen) != 1) {
        ret = MBEDTLS_ERR_ECP_RANDOM_FAILED;
        goto out;
    }
    ret = MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
    const unsigned char *p = der;
    if (!(sig = d2i_ECDSA_SIG(NULL, &p, (long)der_len)))
        goto out;
    const BIGNUM *r, *s;
    ECDSA_SIG_get0(sig, &r, &s);
    if (BN_bn2binpad(r, rs, P256_BYTES) != P256_BYTES ||
        BN_bn2binpad(s, rs + P256_BYTES, P256_BYTES) != P256_BYTES)
        goto out;
    ret = 0;
out:
    ECDSA_SIG_free(sig);
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(key);
    return ret;
}

/* The key pair of key into kp, which checks that d is in range and that Q is on the curve
 * (not Q = d*G: that is the multiplication libcrypto is here for; it computed Q from d). */
static int keygen__to_mbedtls(EVP_PKEY *key, mbedtls_ecp_keypair *kp, unsigned char d[P256_BYTES])
{
    int ret = MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
    unsigned char q[1 + 2 * P256_BYTES];
    size_t q_len = 0;
    BIGNUM *bn = NULL;
    mbedtls_ecp_group grp;
    mbedtls_ecp_point pt;
    mbedtls_ecp_group_init(&grp);
    mbedtls_ecp_point_init(&pt);
    if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_PRIV_KEY, &bn) != 1 ||
        BN_bn2binpad(bn, d, P256_BYTES) != P256_BYTES ||
        EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, q, sizeof q, &q_len) != 1 ||
        q_len != sizeof q)
        goto out;
    if ((ret = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_SECP256R1)) == 0 &&
        (ret = mbedtls_ecp_read_key(MBEDTLS_ECP_DP_SECP256R1, kp, d, P256_BYTES)) == 0 &&
        (ret = mbedtls_ecp_point_read_binary(&grp, &pt, q, q_len)) == 0 &&
        (ret = mbedtls_ecp_check_pubkey(&grp, &pt)) == 0)
        ret = mbedtls_ecp_set_public_key(MBEDTLS_ECP_DP_SECP256R1, kp, &pt);
out:
    BN_clear_free(bn);
    mbedtls_ecp_point_free(&pt);
    mbedtls_ecp_group_free(&grp);
    return ret;
}

int intercept_key_gen_p256(mbedtls_pk_context *pk, struct intercept_signer **signer)
{
    *signer = NULL;
    if (!intercept__p256)
        return MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE; /* intercept_init failed or was not called */
    int ret = mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
    if (ret != 0)
        return ret;
    unsigned char d[P256_BYTES];
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, intercept__p256, NULL);
    ret = MBEDTLS_ERR_ECP_ALLOC_FAILED;
    if (!c || EVP_PKEY_keygen_init(c) != 1)
        goto out;
    ret = MBEDTLS_ERR_ECP_RANDOM_FAILED;
    if (EVP_PKEY_generate(c, &key) != 1)
        goto out;
    if ((ret = keygen__to_mbedtls(key, mbedtls_pk_ec(*pk), d)) != 0)
        goto out;
    ret = signer__add(d, key, signer) == 0 ? 0 : MBEDTLS_ERR_ECP_ALLOC_FAILED;
    key = NULL; /* the signer's now, or freed */
out:
    sodium_memzero(d, sizeof d);
    EVP_PKEY_free(key); /* clears its private key */
    EVP_PKEY_CTX_free(c);
    return ret;
}

int intercept_signer_new(const mbedtls_pk_context *pk, struct intercept_signer **out,
                         struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    if (!mbedtls_pk_can_do(pk, MBEDTLS_PK_ECDSA))
        return al_error_set(err, -EINVAL,
                            "the key is not an EC key: only P-256 keys are signed "
                            "by libcrypto");
    const mbedtls_ecp_keypair *kp = mbedtls_pk_ec(*pk);
    if (mbedtls_ecp_keypair_get_group_id(kp) != MBEDTLS_ECP_DP_SECP256R1)
        return al_error_set(err, -EINVAL,
                            "the key is not on P-256: only P-256 keys are signed "
                            "by libcrypto");
    unsigned char d[P256_BYTES], q[1 + 2 * P256_BYTES];
    size_t d_len = 0, q_len = 0;
    if (mbedtls_ecp_write_key_ext(kp, &d_len, d, sizeof d) != 0 || d_len != sizeof d) {
        sodium_memzero(d, sizeof d);
        return al_error_set(err, -EINVAL, "the P-256 key has no private part");
    }
    if (mbedtls_ecp_write_public_key(kp, MBEDTLS_ECP_PF_UNCOMPRESSED, &q_len, q, sizeof q) != 0 ||
        q_len != sizeof q) {
        sodium_memzero(d, sizeof d);
        return al_error_set(err, -EINVAL, "the P-256 key has no public part");
    }
    /* d in [1, n-1], compared in constant time (libsodium compares little-endian numbers),
     * and that copy is also what OSSL_PARAM_BN takes on a little-endian machine. That Q = d*G
     * is not checked: libcrypto's pairwise check costs 0.16 ms, more than a whole leaf. */
    unsigned char le[P256_BYTES], n_le[P256_BYTES];
    for (size_t i = 0; i < P256_BYTES; i++) {
        le[i] = d[P256_BYTES - 1 - i];
        n_le[i] = p256_order[P256_BYTES - 1 - i];
    }
    r = -EINVAL;
    const char *what = "the P-256 private key is out of range (zero, or not below the group order)";
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *c = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)"prime256v1", 0),
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_PRIV_KEY, le, sizeof le),
#else
        OSSL_PARAM_BN(OSSL_PKEY_PARAM_PRIV_KEY, d, sizeof d),
#endif
        OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, q, q_len),
        OSSL_PARAM_END,
    };
    if (sodium_is_zero(le, sizeof le) || sodium_compare(le, n_le, sizeof le) >= 0)
        goto out;
    /* From the domain parameters' context: spares fetching the key manager by name. */
    r = -ENOMEM;
    what = "out of memory";
    if (!(c = EVP_PKEY_CTX_new_from_pkey(NULL, intercept__p256, NULL)) ||
        EVP_PKEY_fromdata_init(c) != 1)
        goto out;
    r = -EINVAL;
    what = "libcrypto refuses the P-256 key (its public point is not on the curve)";
    if (EVP_PKEY_fromdata(c, &key, EVP_PKEY_KEYPAIR, params) != 1)
        goto out;
    r = signer__add(d, key, out);
    key = NULL;
out:
    sodium_memzero(d, sizeof d);
    sodium_memzero(le, sizeof le);
    EVP_PKEY_free(key);
    EVP_PKEY_CTX_free(c);
    if (r < 0)
        return al_error_set(err, r, "%s", r == -ENOMEM ? "out of memory" : what);
    return 0;
}

int intercept_init(struct al_error *err)
{
    pthread_once(&intercept__once, intercept__do_init);
    if (intercept__init_rc < 0)
        return al_error_set(err, intercept__init_rc, "%s", intercept__init_what);
    return 0;
}

int intercept_rng(void *ctx, unsigned char *out, size_t len)
{
    (void)ctx;
    randombytes_buf(out, len);
    return 0;
}

const char *intercept_mbedtls_strerror(int ret)
{
    static __thread char buf[160];
    mbedtls_strerror(ret, buf, sizeof buf);
    return buf;
}
