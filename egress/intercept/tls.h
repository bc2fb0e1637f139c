/* egress/intercept/tls: TLS on the proxy's non-blocking sockets, toward the sandbox (the
 * proxy is the server, with a leaf of the sandbox's CA) and toward the upstream (the proxy
 * is the client, verifying the real certificate).
 *
 * Owns: the mbedtls configurations (per sandbox for the server side: its CA's leaves and its
 * own session-ticket keys; one per process for the client side: the trusted roots), and the
 * glue between mbedtls and a socket that an event loop (epoll or libuv) watches:
 *   - reads: bytes the proxy already took from the socket (the ClientHello it peeked at)
 *     are consumed first, then recv(2) directly; EAGAIN becomes "want read".
 *   - writes: records go out with send(2) at once; what the socket does not take waits in an
 *     output buffer (bounded: writes beyond it are refused with -EAGAIN until it drains), so
 *     mbedtls never has to repeat a write and callers never hold data for it.
 * After any call that returns -EAGAIN, intercept_tls_want() says which readiness to wait
 * for. Because mbedtls may hold decrypted bytes the socket no longer signals, a reader must
 * check intercept_tls_in_pending() before waiting for readability.
 *
 * Server side: TLS 1.2 and 1.3, ECDHE with X25519/P-256/P-384, AEAD suites only, ALPN
 * "http/1.1" only (a client offering only h2 gets no_application_protocol), session tickets
 * (1.2 and 1.3, AES-256-GCM keys per sandbox, rotated by mbedtls). The certificate is the
 * leaf of the decided name; the SNI mbedtls parses must be that name.
 * Client side: TLS 1.2 and 1.3, certificate verification required against the roots given
 * (default /etc/ssl/certs/ca-certificates.crt), SNI and verified name = the original name,
 * ALPN "http/1.1".
 *
 * Threading: configurations are shared read-only by every thread; one struct intercept_tls
 * belongs to one thread.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_TLS_H
#define AIRLOCK_EGRESS_INTERCEPT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "egress/intercept/ca.h"

#define INTERCEPT_TLS_WANT_READ  1
#define INTERCEPT_TLS_WANT_WRITE 2
#define INTERCEPT_TLS_OUT_HIGH   (64 * 1024) /* queued ciphertext that refuses more writes */
#define INTERCEPT_TLS_DEFAULT_CA "/etc/ssl/certs/ca-certificates.crt"

/* ---- configurations ------------------------------------------------------------------ */

struct intercept_tls_server;
struct intercept_tls_server_opts {
    struct intercept_ca *ca;    /* required (referenced) */
    uint32_t ticket_lifetime_s; /* 0 = 3600; rotation of the ticket key follows it */
    bool no_tls13;              /* tests: TLS 1.2 only */
    bool no_tickets;            /* no session resumption */
};
int intercept_tls_server_new(const struct intercept_tls_server_opts *o,
                             struct intercept_tls_server **out, struct al_error *err);
struct intercept_tls_server *intercept_tls_server_ref(struct intercept_tls_server *s);
void intercept_tls_server_unref(struct intercept_tls_server *s); /* NULL is fine */
struct intercept_ca *intercept_tls_server_ca(struct intercept_tls_server *s);

struct intercept_tls_client;
struct intercept_tls_client_opts {
    const char *ca_file; /* PEM bundle of trusted roots; NULL = the default */
    const char *ca_pem;  /* or the roots in memory (tests) */
    bool no_tls13;
};
int intercept_tls_client_new(const struct intercept_tls_client_opts *o,
                             struct intercept_tls_client **out, struct al_error *err);
struct intercept_tls_client *intercept_tls_client_ref(struct intercept_tls_client *c);
void intercept_tls_client_unref(struct intercept_tls_client *c);
size_t intercept_tls_client_roots(const struct intercept_tls_client *c);

/* ---- endpoints ----------------------------------------------------------------------- */

struct intercept_tls;

/* The proxy as the server toward a sandbox on fd, for the decided (canonical) name. prefix
 * holds bytes already read from fd (copied). Fails before any byte is written when no leaf
 * can be had for name (-EPERM outside the CA's constraints, see intercept_ca_leaf). */
int intercept_tls_accept(struct intercept_tls_server *srv, int fd, const char *name,
                         const void *prefix, size_t prefix_len, struct intercept_tls **out,
                         struct al_error *err);
/* The proxy as the client toward an upstream on fd (connected), for name (SNI and the name
 * verified in its certificate). A handshake that fails with reason "retry_tls12" (a TLS
 * 1.2-only server signing with RSA-PSS, which mbedtls 3.6 cannot verify in TLS 1.2) succeeds
 * on a new connection with INTERCEPT_TLS_CONNECT_TLS12. */
#define INTERCEPT_TLS_CONNECT_TLS12 1u
int intercept_tls_connect(struct intercept_tls_client *cli, int fd, const char *name,
                          unsigned flags, struct intercept_tls **out, struct al_error *err);
/* The same interface without TLS (plain HTTP through the same engine, rules with
 * allow_plaintext_inject): reads and writes go to the socket; prefix as for accept. */
int intercept_tls_plain(int fd, const void *prefix, size_t prefix_len, struct intercept_tls **out);
/* Frees the TLS state (not the socket). Wipes buffers. */
void intercept_tls_free(struct intercept_tls *t);
int intercept_tls_fd(const struct intercept_tls *t);

/* Drives the handshake: 0 when complete, -EAGAIN (see want), or a failure: -EPROTO (the
 * handshake failed; intercept_tls_reason/error say why), -ECONNRESET/-EPIPE (the peer went
 * away), -EIO (socket error). */
int intercept_tls_handshake(struct intercept_tls *t);
bool intercept_tls_handshake_done(const struct intercept_tls *t);
/* INTERCEPT_TLS_WANT_READ | _WRITE: what to wait for before calling again. WRITE is set
 * whenever ciphertext is queued. */
int intercept_tls_want(const struct intercept_tls *t);

/* Plaintext: > 0 bytes read; 0 = the peer closed properly (close_notify); -EAGAIN; -EPIPE =
 * the connection ended without close_notify (possible truncation); -EPROTO, -ECONNRESET. */
ssize_t intercept_tls_read(struct intercept_tls *t, void *buf, size_t len);
/* Bytes mbedtls holds (decrypted, or a record not yet decrypted): read again before
 * waiting for the socket. */
bool intercept_tls_in_pending(const struct intercept_tls *t);
/* Accepts up to len plaintext bytes (> 0), or -EAGAIN while INTERCEPT_TLS_OUT_HIGH bytes of
 * ciphertext wait for the socket, or an error. */
ssize_t intercept_tls_write(struct intercept_tls *t, const void *buf, size_t len);
/* Sends queued ciphertext: 0 = nothing left, -EAGAIN, or an error. */
int intercept_tls_flush(struct intercept_tls *t);
size_t intercept_tls_out_pending(const struct intercept_tls *t);
/* Ends the session politely (close_notify) / with a fatal alert (a deny or a failure after
 * interception began: e.g. MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED, _INTERNAL_ERROR). Both queue
 * the alert and try to flush it; the caller closes the socket once out_pending is 0 (or
 * after a short deadline). */
int intercept_tls_close_notify(struct intercept_tls *t);
int intercept_tls_send_alert(struct intercept_tls *t, unsigned char description);

/* After a failure: a stable machine reason ("certificate_verify_failed",
 * "handshake_failed", "peer_alert", "no_application_protocol", "peer_closed", ...) and a
 * human sentence (mbedtls' text, certificate problems spelled out). */
const char *intercept_tls_reason(const struct intercept_tls *t);
const char *intercept_tls_error(const struct intercept_tls *t);

/* What was negotiated (valid once the handshake is done). */
const char *intercept_tls_version(const struct intercept_tls *t); /* "TLSv1.3" */
const char *intercept_tls_ciphersuite(const struct intercept_tls *t);
const char *intercept_tls_alpn(const struct intercept_tls *t); /* NULL if none */
bool intercept_tls_resumed(const struct intercept_tls *t);
const char *intercept_tls_sni(const struct intercept_tls *t);   /* server: as received */
uint64_t intercept_tls_bytes_in(const struct intercept_tls *t); /* ciphertext */
uint64_t intercept_tls_bytes_out(const struct intercept_tls *t);

#endif
