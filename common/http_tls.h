/* common/http_tls: the TLS provider of the HTTP client (http.h, al_http_tls) on mbedtls, for
 * https:// targets: a client configuration (trusted roots, TLS 1.2 and 1.3, certificate
 * verification required, ALPN http/1.1) and sessions on memory buffers.
 *
 * Owns: the configuration and its roots, and each session's buffers (ciphertext in and
 * out), which are wiped when freed (mbedtls wipes its own record buffers). Separate from
 * airlock_common (library airlock_http_tls) so that what does not speak TLS does not link
 * mbedtls.
 *
 * Threading: a provider is read-only once made and may be shared by every loop and thread;
 * a session belongs to its connection's loop.
 */
#ifndef AIRLOCK_COMMON_HTTP_TLS_H
#define AIRLOCK_COMMON_HTTP_TLS_H

#include "error.h"
#include "http.h"

#define AL_HTTP_TLS_DEFAULT_CA "/etc/ssl/certs/ca-certificates.crt"

struct al_http_tls_client_opts {
    const char *ca_file; /* PEM bundle of trusted roots; NULL = AL_HTTP_TLS_DEFAULT_CA */
    const char *ca_pem;  /* or the roots in memory (tests) */
};

/* A provider for al_http_creq_opts.tls. Errors say which roots could not be loaded. */
int al_http_tls_client_new(const struct al_http_tls_client_opts *o, struct al_http_tls **out,
                           struct al_error *err);
void al_http_tls_client_free(struct al_http_tls *t); /* NULL is fine */

#endif
