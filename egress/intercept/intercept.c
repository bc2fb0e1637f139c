/* egress/intercept/intercept: library initialisation, the random generator, error text,
 * and the fast primitives registered with mbedtls (X25519 by libsodium, P-256 ECDSA signing
 * by OpenSSL's libcrypto; see intercept.h) or called instead of it (P-256 key generation
 * by libcrypto). */
#include "intercept.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>

#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <psa/crypto.h>

/* OpenSSL 3's EC_KEY/ECDSA_do_sign are marked deprecated in favour of EVP_PKEY, whose
 * provider dispatch costs more than the signature itself; they remain supported in 3.x. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/obj_mac.h>

#ifndef MBEDTLS_ECP_X25519_IMPL
#error \
    "mbedtls lacks airlock's deploy/mbedtls/01-x25519-impl.patch: run deploy/setup, which builds it into .deps/mbedtls"
#endif
#ifndef MBEDTLS_ECDSA_SIGN_IMPL
#error \
    "mbedtls lacks airlock's deploy/mbedtls/02-ecdsa-sign-impl.patch: run deploy/setup, which builds it into .deps/mbedtls"
#endif

static pthread_once_t intercept__once = PTHREAD_ONCE_INIT;
/* P-256 for intercept_ecdsa_sign: read-only once made, each signature copies it. */
static EC_GROUP *intercept__p256;
static int intercept__init_rc;
static const char *intercept__init_what;

static void intercept__do_init(void)
{
    if (sodium_init() < 0) {
        intercept__init_rc = -EIO;
        intercept__init_what = "libsodium failed to initialise (sodium_init)";
        return;
    }
    /* X25519 (every TLS 1.3 key share, both ways) by libsodium rather than mbedtls'
     * generic ladder: about 0.03 ms instead of 0.36 ms per multiplication. */
    mbedtls_ecp_set_x25519_impl(intercept_x25519);
    /* P-256 signatures (CertificateVerify of every handshake toward a sandbox, minted
     * leaves) by OpenSSL: about 0.017 ms instead of mbedtls' 0.2 ms. */
    intercept__p256 = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    if (!intercept__p256) {
        intercept__init_rc = -EIO;
        intercept__init_what = "OpenSSL (libcrypto) has no P-256 group";
        return;
    }
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
    if (grp_id != MBEDTLS_ECP_DP_SECP256R1 || len != 32 || !intercept__p256)
        return MBEDTLS_ERR_ECP_FEATURE_UNAVAILABLE;
    if (hlen > INT_MAX)
        return MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
    int ret = MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
    EC_KEY *key = EC_KEY_new();
    BIGNUM *priv = BN_secure_new();
    ECDSA_SIG *sig = NULL;
    if (!key || !priv) {
        ret = MBEDTLS_ERR_ECP_ALLOC_FAILED;
        goto out;
    }
    if (!BN_bin2bn(d, (int)len, priv) || EC_KEY_set_group(key, intercept__p256) != 1 ||
        EC_KEY_set_private_key(key, priv) != 1)
        goto out;
    sig = ECDSA_do_sign(hash, (int)hlen, key);
    if (!sig) {
        ret = MBEDTLS_ERR_ECP_RANDOM_FAILED;
        goto out;
    }
    const BIGNUM *r, *s;
    ECDSA_SIG_get0(sig, &r, &s);
    if (BN_bn2binpad(r, rs, (int)len) != (int)len ||
        BN_bn2binpad(s, rs + len, (int)len) != (int)len)
        goto out;
    ret = 0;
out:
    ECDSA_SIG_free(sig);
    BN_clear_free(priv);
    EC_KEY_free(key); /* clears its copy of the private key */
    return ret;
}

int intercept_ec_gen_p256(mbedtls_ecp_keypair *kp)
{
    if (!intercept__p256)
        return mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, kp, intercept_rng, NULL);
    int ret = MBEDTLS_ERR_ECP_ALLOC_FAILED;
    unsigned char d[32], q[65];
    mbedtls_ecp_group grp;
    mbedtls_ecp_point pt;
    mbedtls_ecp_group_init(&grp);
    mbedtls_ecp_point_init(&pt);
    EC_KEY *key = EC_KEY_new();
    if (!key || EC_KEY_set_group(key, intercept__p256) != 1)
        goto out;
    if (EC_KEY_generate_key(key) != 1) {
        ret = MBEDTLS_ERR_ECP_RANDOM_FAILED;
        goto out;
    }
    ret = MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
    if (BN_bn2binpad(EC_KEY_get0_private_key(key), d, (int)sizeof d) != (int)sizeof d ||
        EC_POINT_point2oct(intercept__p256, EC_KEY_get0_public_key(key),
                           POINT_CONVERSION_UNCOMPRESSED, q, sizeof q, NULL) != sizeof q)
        goto out;
    /* mbedtls checks that d is in range and that Q is on the curve (not Q = d*G: that is
     * the multiplication this function exists to avoid; OpenSSL computed Q from d). */
    if ((ret = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_SECP256R1)) == 0 &&
        (ret = mbedtls_ecp_read_key(MBEDTLS_ECP_DP_SECP256R1, kp, d, sizeof d)) == 0 &&
        (ret = mbedtls_ecp_point_read_binary(&grp, &pt, q, sizeof q)) == 0 &&
        (ret = mbedtls_ecp_check_pubkey(&grp, &pt)) == 0)
        ret = mbedtls_ecp_set_public_key(MBEDTLS_ECP_DP_SECP256R1, kp, &pt);
out:
    sodium_memzero(d, sizeof d);
    mbedtls_ecp_point_free(&pt);
    mbedtls_ecp_group_free(&grp);
    EC_KEY_free(key); /* clears its copy of the private key */
    return ret;
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
