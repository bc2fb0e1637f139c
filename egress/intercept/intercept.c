/* egress/intercept/intercept: library initialisation, the random generator, error text
 * (see intercept.h). */
#include "intercept.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>

#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <psa/crypto.h>

#ifndef MBEDTLS_ECP_X25519_IMPL
#error \
    "mbedtls lacks airlock's deploy/mbedtls/01-x25519-impl.patch: run deploy/setup, which builds it into .deps/mbedtls"
#endif

static pthread_once_t intercept__once = PTHREAD_ONCE_INIT;
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
