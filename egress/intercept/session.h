/* egress/intercept/session: one intercepted sandbox connection, from the proxy's decision to
 * inspect it until it closes. The INSPECT branch of airlock-egress hands a connection over
 * to a session right after the ClientHello; tests and benchmarks drive sessions with their
 * own small loop (tests/unit/egress/intercept/icpt_proxy.c).
 *
 * Owns, per connection:
 *   - TLS toward the sandbox (tls.h) with the leaf of the decided name;
 *   - "HTTP inside": each request head collected within bounds, validated byte by byte (CRLF
 *     line ends only, no obs-fold, token header names, no controls), parsed (llhttp), checked
 *     (request.h), decided by the policy on method, path and whether it carries a body,
 *     then edited (inject.h) with secrets fetched from the vault (secrets.h) and
 *     re-serialised: origin-form target, what common/http.h says a forwarding proxy
 *     removes (hop-by-hop fields, those Connection names, method overrides) and Proxy-*
 *     headers removed, framing restated, and, while secrets are in
 *     play, Accept-Encoding: identity (so responses can be inspected) and no Range/If-Range
 *     (a secret echoed in pieces by range requests would escape scrubbing);
 *   - the upstream: a pooled TLS connection for (sandbox, host, port) or a new one to the
 *     destination the proxy checked, verified against the trusted roots, SNI = the name;
 *   - responses: head validated and checked (101 only for an allowed WebSocket, and then
 *     without extensions while secrets are in play), every header and the body scrubbed of
 *     the secrets injected on this connection (scrub.h: every content and transfer coding of
 *     the body undone first, or the response refused), re-framed toward the sandbox without
 *     trailers; 1xx other than 101 dropped; 3xx passed as they are (the proxy never follows);
 *   - answers of its own: HTTP JSON bodies {"error","rule","reason","request_id"} (403
 *     blocked_by_policy, 400, 408, 413, 431, 502, 503, 504) and then a close; before any
 *     HTTP exchange, a TLS alert;
 *   - one audit record per request (type "http_request", proto "https" with "inspected":
 *     true), said as an egress_http_rec with the interception's members (inject, scrub, tls)
 *     as its extra, which the proxy writes with its common fields (sandbox, policy,
 *     addresses) as it writes a plain request's; a security_event for reflected secrets and
 *     misused placeholders.
 *
 * The proxy owns the client socket, the event loop, the deadline timer and the audit log;
 * the session owns the TLS states and the upstream socket. All callbacks run on the
 * proxy's loop thread; the session never blocks.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_SESSION_H
#define AIRLOCK_EGRESS_INTERCEPT_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/http.h"
#include "egress/intercept/inject.h"
#include "egress/intercept/pool.h"
#include "egress/intercept/secrets.h"
#include "egress/intercept/tls.h"
#include "policy/policy.h"

enum { INTERCEPT_END_CLIENT = 0, INTERCEPT_END_UPSTREAM = 1 };

/* What the proxy provides. */
struct intercept_host_ops {
    /* Watch end's socket for INTERCEPT_TLS_WANT_READ/_WRITE (0: stop watching). For the
     * upstream end, fd says which socket (the session may change it; -1: none now). */
    void (*watch)(void *ctx, int end, int fd, int events);
    /* (Re)arms the session's one deadline, ms from now; 0 stops it. */
    void (*deadline)(void *ctx, uint32_t ms);
    /* Starts a non-blocking TCP connection to the destination the proxy checked for this
     * connection; returns the socket (its writability says the connect finished) or -errno. */
    int (*connect)(void *ctx);
    /* The policy to decide the next request with (the proxy keeps it alive). */
    const struct policy *(*policy)(void *ctx);
    /* Appends a record (stolen); false when the audit log is failing (the session then
     * refuses further requests: fail closed). */
    bool (*audit)(void *ctx, json_t *rec);
    /* The same for a request's http_request record: the proxy writes it as it writes those
     * of plain requests (egress_http_rec_write, egress/http.h), with r's extra members. */
    bool (*audit_request)(void *ctx, const struct egress_http_rec *r);
    /* A fresh request id into out. */
    void (*request_id)(void *ctx, char out[32]);
    /* The session ended: why (stable reason), detail (human, may be ""). The proxy frees
     * the session with intercept_session_free afterwards (not from inside this call). */
    void (*done)(void *ctx, const char *why, const char *detail);
};

struct intercept_session_limits {
    uint32_t max_header_bytes;     /* request head; 0 = 32 KiB (431 beyond) */
    uint64_t max_body_bytes;       /* request body; 0 = none here (the policy's applies) */
    uint32_t handshake_timeout_ms; /* 0 = 10 s */
    uint32_t header_timeout_ms;    /* 0 = 10 s */
    uint32_t keepalive_timeout_ms; /* 0 = 60 s */
    uint32_t response_timeout_ms;  /* 0 = 60 s */
    uint32_t idle_timeout_ms;      /* between body bytes / tunnel bytes; 0 = 300 s */
    uint64_t max_decoded_body;     /* gzip bound; 0 = INTERCEPT_SCRUB_DECODED_MAX */
};

struct intercept_session_opts {
    const struct intercept_host_ops *ops;
    void *ctx;
    struct intercept_tls_server *srv;  /* the sandbox's (CA, leaves, tickets) */
    struct intercept_tls_client *cli;  /* trusted roots */
    struct intercept_pool *pool;       /* this loop's; may be NULL */
    struct intercept_fetcher *fetcher; /* this loop's; NULL: no injection possible */
    struct intercept_placeholders *ph; /* the sandbox's, or NULL */
    const char *sandbox_id;
    const char *name;       /* the canonical SNI the proxy decided on (plaintext:
                                           the host the connection is bound to) */
    bool plaintext;         /* plain HTTP both ways (rules with
                                           allow_plaintext_inject): no TLS, scheme http */
    uint16_t port;          /* original destination port */
    struct policy_addr dst; /* original destination (for decisions) */
    int client_fd;
    const void *prefix; /* bytes already read (the ClientHello); copied */
    size_t prefix_len;
    struct intercept_session_limits limits;
};

struct intercept_session;

/* Creates the session and starts the handshake. On failure before any byte was written
 * (e.g. -EPERM: the name is outside the CA's constraints), a TLS alert (access_denied, or
 * internal_error) has been sent on client_fd, err says why, and the proxy closes. */
int intercept_session_start(const struct intercept_session_opts *o, struct intercept_session **out,
                            struct al_error *err);
/* Readiness of an end (INTERCEPT_TLS_WANT_* bits) as the proxy's loop saw it. */
void intercept_session_on_events(struct intercept_session *s, int end, int events);
void intercept_session_on_timeout(struct intercept_session *s);
/* Ends the session now (sandbox removed, proxy stopping): no further callbacks but done. */
void intercept_session_abort(struct intercept_session *s, const char *why);
/* After done: frees TLS states, returns a reusable upstream to the pool or closes it. */
void intercept_session_free(struct intercept_session *s);

struct intercept_session_stats {
    uint64_t requests, denied, injected, scrubbed_matches;
    uint64_t bytes_up, bytes_down; /* plaintext */
    bool upstream_pooled;          /* the first upstream came from the pool */
};
void intercept_session_get_stats(const struct intercept_session *s,
                                 struct intercept_session_stats *st);

/* A plaintext TLS alert (before any handshake) on a socket: 7 bytes, best effort. */
void intercept_tls_raw_alert(int fd, unsigned char description);

#endif
