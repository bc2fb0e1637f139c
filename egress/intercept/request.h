/* egress/intercept/request: what an intercepted request passes on top of the proxy's request
 * checks (egress_http_check_request, egress/http.h: one Host, target form and scheme,
 * authority and port agreement, framing, upgrades, expectations; the same on both paths),
 * before the policy decides it on method and path (egress_http_decide: the same on both
 * paths too, WebSockets against the rule included) and on its response.
 *
 * Owns, for requests inside a TLS session the proxy terminated:
 *   - Host, canonical, must name the SNI the session was decided on (bypass list 1, 2, 10);
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
#include "egress/http.h"
#include "policy/policy.h"

/* The connection a request arrived on. */
struct intercept_conn_view {
    bool tls;        /* inside a TLS session the proxy terminated */
    const char *sni; /* tls: the canonical name decided on */
    uint16_t port;   /* original destination port */
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

/* Before the policy, for a request egress_http_check_request accepted: its canonical host
 * (policy_host_canon), inside TLS the SNI, and what the policy is asked about. 0, or -EPERM
 * with *reason ("invalid_host" for a host the canonicaliser refuses, 400;
 * "host_sni_mismatch", 403) and *status. */
int intercept_request_check(const struct intercept_conn_view *c,
                            const struct egress_http_request *r, struct intercept_req_info *out,
                            int *status, const char **reason);

/* The response head: 101 only after an allowed WebSocket request. 0 or -EPROTO
 * ("unrequested_upgrade"). */
int intercept_response_check(int status, bool websocket_allowed, const char **reason);

#endif
