/* common/http_tls: the TLS providers (http.h, al_http_tls) on mbedtls: the HTTP client's, for
 * https:// targets (trusted roots, TLS 1.2 and 1.3, certificate verification required, ALPN
 * http/1.1, optionally a client certificate), and a server's (its certificate, client
 * certificates of a private CA checked), both with sessions on memory buffers. A server
 * session is driven by whoever terminates the connection (the cluster's TLS front,
 * controlplane/cluster_tls.c) through the same operations.
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

#include <stdbool.h>

#include "error.h"
#include "http.h"

#define AL_HTTP_TLS_DEFAULT_CA "/etc/ssl/certs/ca-certificates.crt"

struct al_http_tls_client_opts {
    const char *ca_file; /* PEM bundle of trusted roots; NULL = AL_HTTP_TLS_DEFAULT_CA */
    const char *ca_pem;  /* or the roots in memory (tests) */
    /* A certificate (PEM, the leaf first) and its key presented to a server that asks for
     * one (mutual TLS); both or neither. */
    const char *cert_file;
    const char *key_file;
    /* The server's certificate must say what it is for: an extendedKeyUsage extension
     * holding serverAuth (a private CA's certificates; one without the extension is
     * refused, where public roots would take it). */
    bool require_usage;
};

/* A provider for al_http_creq_opts.tls. Errors say which roots could not be loaded. */
int al_http_tls_client_new(const struct al_http_tls_client_opts *o, struct al_http_tls **out,
                           struct al_error *err);
void al_http_tls_client_free(struct al_http_tls *t); /* NULL is fine; servers' too */

struct al_http_tls_server_opts {
    const char *cert_file; /* the server's certificate (PEM, the leaf first) */
    const char *key_file;  /* and its key */
    /* Clients are asked for a certificate issued by these roots, with an extendedKeyUsage
     * holding clientAuth. Not required by the handshake: al_http_tls_session_peer says what
     * a client presented, so that the server can answer "who are you" in HTTP. */
    const char *client_ca_file;
};
/* A server provider: its ops' session_new takes a label (the client's address) for
 * messages instead of a host name. Errors say which file could not be loaded and why. */
int al_http_tls_server_new(const struct al_http_tls_server_opts *o, struct al_http_tls **out,
                           struct al_error *err);

/* The certificate the peer of a session (of a provider made here) presented, once its
 * handshake is complete. */
struct al_http_tls_peer {
    bool presented; /* a certificate was sent */
    bool verified;  /* ... and it verifies against the roots, for the usage asked */
    char name[64];  /* its subject's common name (printable ASCII, else "") */
    char why[200];  /* when not verified: why, in words */
};
void al_http_tls_session_peer(void *session, struct al_http_tls_peer *out);

#endif
