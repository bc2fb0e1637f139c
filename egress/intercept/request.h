/* egress/intercept/request: "HTTP inside" — the checks an intercepted request passes on top
 * of egress's own (one Host, framing, smuggling, target form: egress/http_head.c), before and
 * after the policy decides it on method and path.
 *
 * Owns, for requests inside a TLS session the proxy terminated:
 *   - Host must name the SNI the session was decided on (and the connection's port, if it
 *     says one); an absolute-form target must name it too (bypass list 1, 2, 10);
 *   - no CONNECT inside the tunnel (a relay, bypass list 19), no HTTP/2 (h2c upgrade,
 *     HTTP2-Settings, the PRI preface: bypass list 12);
 *   - Upgrade: only "websocket", and only where the deciding rule says websocket: true; never
 *     on a rule that injects with strict scrubbing (frames cannot be inspected reliably);
 *   - a response may switch protocols (101) only for a WebSocket request the proxy allowed;
 *   - the proxy never follows redirects: a 3xx goes to the sandbox as it came (its headers
 *     scrubbed), and the sandbox's next request is decided afresh (bypass list 13).
 * Plain-HTTP requests to inject rules go through the same checks with tls = false (then there
 * is no SNI to compare).
 *
 * Pure functions: no I/O, no allocation, safe from any thread.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_REQUEST_H
#define AIRLOCK_EGRESS_INTERCEPT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/http.h" /* struct al_http_field: a header as the engine parsed it */
#include "policy/policy.h"

/* The connection a request arrived on. */
struct intercept_conn_view {
    bool tls;        /* inside a TLS session the proxy terminated */
    const char *sni; /* tls: the canonical name decided on */
    uint16_t port;   /* original destination port */
};

struct intercept_req_view {
    const char *method;
    int http_major;     /* of the request line (the head scanner admits any digit) */
    const char *target; /* request-target as sent */
    size_t target_len;
    const struct al_http_field *hdrs;
    size_t n_hdrs;
};

struct intercept_req_info {
    struct policy_host host; /* canonical Host */
    bool websocket;          /* Upgrade: websocket */
    const char *path;        /* origin-form path?query for the policy (points into target) */
    size_t path_len;
};

bool intercept_hdr_is(const struct al_http_field *h, const char *name);
/* The value of the only header called name; NULL if none; *count says how many there are. */
const struct al_http_field *intercept_hdr_find(const struct al_http_field *h, size_t n,
                                               const char *name, size_t *count);

/* Before the policy: 0, or -EPERM with *reason ("unsupported_http_version",
 * "host_sni_mismatch", "host_port_mismatch", "authority_host_mismatch", "connect_in_tunnel",
 * "h2c_upgrade_refused", "h2_prior_knowledge_refused", "upgrade_not_allowed",
 * "duplicate_host", "asterisk_form_refused", "invalid_host" for a host the policy's
 * canonicaliser refuses, or one of al_http_target_parse's and al_http_authority_parse's
 * refusals: common/http_head.h) and *status (400 or 403). */
int intercept_request_check(const struct intercept_conn_view *c, const struct intercept_req_view *r,
                            struct intercept_req_info *out, int *status, const char **reason);

/* After an allow: the upgrade against the rule. 0 or -EPERM ("websocket_not_allowed",
 * "websocket_not_inspectable"). */
int intercept_request_check_decided(const struct intercept_req_info *info,
                                    const struct policy_decision *d, const char **reason);

/* The response head: 101 only after an allowed WebSocket request. 0 or -EPROTO
 * ("unrequested_upgrade"). */
int intercept_response_check(int status, bool websocket_allowed, const char **reason);

#endif
