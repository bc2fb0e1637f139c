/* controlplane/webhooks: lifecycle events POSTed to URLs that API keys register (E2B's
 * /events/webhooks).
 *
 * Owns: the routes POST/GET /events/webhooks and GET/PATCH/DELETE /events/webhooks/{id},
 * GET /events/webhooks/{id}/deliveries and /stats; the registrations (store.c, table
 * webhooks) with their signing secrets sealed under <state>/webhooks.key (never returned
 * after the creation, never logged); and the deliveries: one queue per webhook, bounded by
 * webhooks.queue (the oldest event dropped and recorded as a "dropped" delivery), one attempt
 * at a time in event order, each bounded by webhooks.timeout, retried webhooks.attempts times
 * with exponential backoff and jitter, every attempt recorded (webhook_deliveries, the newest
 * webhooks.history per webhook).
 *
 * A webhook belongs to the API key that registered it: another key's is a 404. It gets the
 * events of every sandbox, as GET /events/sandboxes lists them, filtered by its "events".
 *
 * The URL is untrusted. https:// unless webhooks.allow_http; no user info, no fragment. Its
 * host is resolved once per attempt (and at registration) and every address it resolves to
 * must be outside the internal ranges (policy_addr_classify: loopback, private, link-local,
 * metadata, multicast, unspecified, v4-mapped forms of them...) unless
 * webhooks.allow_private; the attempt then dials exactly that address (the HTTP client's
 * connect_addr) while the certificate is verified for the host name. Redirects are not
 * followed (a 3xx is a failed attempt).
 *
 * A delivery is the event's JSON as GET /events/sandboxes shows it, with the headers:
 *   e2b-webhook-id, e2b-delivery-id (one per attempt), e2b-signature-version: v1,
 *   e2b-signature: E2B's, base64url without padding of SHA-256(secret || body);
 *   airlock-timestamp: Unix seconds of the attempt;
 *   airlock-signature: v1=<hex HMAC-SHA256(secret, timestamp "." body)>, which also covers
 *   the timestamp, so a receiver can refuse replays.
 * Deliveries waiting when airlockd stops are not kept (the events are: /events/sandboxes).
 */
#ifndef AIRLOCK_CP_WEBHOOKS_H
#define AIRLOCK_CP_WEBHOOKS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct cp;
struct cp_principal;
struct al_http_req;
struct sockaddr;

int cp_webhooks_open(struct cp *cp, struct al_error *err);
/* Ends every attempt and timer (airlockd stops); what is queued is dropped (logged). */
void cp_webhooks_stop(struct cp *cp);
void cp_webhooks_close(struct cp *cp);

/* An event was recorded (events.c): queued for each enabled webhook that wants type. */
void cp_webhooks_event(struct cp *cp, int type, const char *doc);

/* The routes (rest.c dispatches; body: the parsed JSON object of a POST or PATCH). rest is
 * the path after "/events/webhooks" ("" or "/{id}[/deliveries|/stats]"). */
void cp_webhooks_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *rest);
void cp_webhooks_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        json_t *body);
void cp_webhooks_update(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        const char *id, json_t *body);

/* ---- pure parts (unit-tested) ------------------------------------------------------------ */
struct cp_wh_url {
    bool tls;
    char host[256]; /* canonical name or address text */
    bool host_is_addr;
    int port;
    char target[300]; /* "https://host:port" for the HTTP client */
    char path[2048];  /* request-target: "/..." with the query */
};
/* A webhook URL: https:// (http:// only when allow_http), a host, an optional port, a path;
 * no user info, fragment, whitespace or control characters. -EINVAL with err saying what. */
int cp_wh_url_parse(const char *url, bool allow_http, struct cp_wh_url *out, struct al_error *err);
/* 0 if an attempt may dial sa; -EACCES with why ("loopback (127.0.0.0/8)") if it is an
 * internal address and allow_private is false. */
int cp_wh_addr_check(const struct sockaddr *sa, bool allow_private, char *why, size_t len);
/* E2B's signature: base64url, unpadded, of SHA-256(secret || body), into out (>= 44). */
void cp_wh_sign_e2b(const void *secret, size_t slen, const void *body, size_t blen, char *out);
/* airlock's: "v1=" and the hex HMAC-SHA256 keyed with secret of timestamp "." body, into out
 * (>= 68). */
void cp_wh_sign(const void *secret, size_t slen, uint64_t timestamp, const void *body, size_t blen,
                char *out);
/* The wait before attempt n + 1 (n >= 1 attempts made): base doubled n - 1 times, at most
 * max, then a uniformly random point of its upper half (jitter, from r). */
uint64_t cp_wh_backoff_ms(uint64_t base, uint64_t max, unsigned n, uint32_t r);

#endif
