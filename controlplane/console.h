/* controlplane/console: the web console airlockd serves at /console/ (docs/console.md).
 *
 * Owns: the console's assets (built into airlockd: controlplane/console/, embedded by
 * embed.cmake), their security headers (a strict Content Security Policy, nosniff, no
 * framing), sign-in with an API key turned into a session (a random id in an HttpOnly,
 * SameSite=Strict cookie; server side only its digest, the key's digest, a CSRF token and
 * the expiry), sign-out, and the check of a session on API requests: a request with the
 * session cookie and no X-API-KEY acts as the key it was signed in with, and one that may
 * change state (any method but GET and HEAD) must carry the session's CSRF token in
 * X-Airlock-CSRF. The console is a client of the API: it has no other power.
 * console_api.c: the admin endpoints the console reads (/admin/overview, /admin/audit).
 * console_term.c: the terminal, a pty in a sandbox over a WebSocket (console_ws.c).
 */
#ifndef AIRLOCK_CP_CONSOLE_H
#define AIRLOCK_CP_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "common/http.h"
#include "common/http_head.h"

struct cp;
struct cp_principal;
struct policy;

#define CP_CONSOLE_COOKIE        "airlock_console"
#define CP_CONSOLE_COOKIE_SECURE "__Host-airlock_console"
#define CP_CONSOLE_CSRF_HEADER   "X-Airlock-CSRF"
#define CP_CONSOLE_MAX_SESSIONS  4096

/* Serves /console and everything under /console/ (assets, the session endpoints). false: the
 * request is not the console's. */
bool cp_console_route(struct cp *cp, struct al_http_req *req);

/* The request's console session, for cp_auth: -ENOENT when it carries no session cookie
 * (then it needs a key), 0 with *who the session's key, -EACCES (unknown, expired, signed out,
 * its key revoked) or -EPERM (a state-changing request without the session's CSRF token) with
 * err saying why. */
int cp_console_auth(struct cp *cp, const struct al_http_req *req, struct cp_principal *who,
                    struct al_error *err);

/* The same for a request that cannot carry X-Airlock-CSRF (a WebSocket upgrade): the session
 * of its cookie and csrf, the token it presented otherwise: 0, -ENOENT, -EACCES, or -EPERM
 * when csrf is not the session's (err is not set then). */
int cp_console_auth_csrf(struct cp *cp, const struct al_http_req *req, const char *csrf,
                         struct cp_principal *who, struct al_error *err);
/* Whether the request's Origin is this host (one Origin, one Host, the same authority). */
bool cp_console_origin_ours(const struct al_http_req *req);

void cp_console_free(struct cp *cp);

/* GET /console/api/sandboxes/{id}/terminal (console_term.c): a WebSocket to a pty in the
 * sandbox, for a console session of a role with the data plane. */
void cp_console_term(struct cp *cp, struct al_http_req *req, const char *id);
/* Ends every terminal (airlockd stops). */
void cp_console_term_stop(struct cp *cp);
/* Ends every live tail of the audit log (console_api.c; airlockd stops). */
void cp_console_api_stop(struct cp *cp);

/* The value of cookie name in the Cookie header fields (RFC 6265 5.4: "a=b; c=d"), into out.
 * 1 found, 0 absent, -EEXIST when it occurs more than once, -E2BIG when it does not fit. */
int cp_console_cookie_get(const struct al_http_req *req, const char *name, char *out,
                          size_t outlen);
/* The same over one header value (the fuzzer's and the tests' entry point). */
int cp_console_cookie_find(const char *header, const char *name, char *out, size_t outlen,
                           bool *found);

/* A Cookie header value without the console's session cookies, into out (outlen at least
 * strlen(header) + 1; a smaller one gets ""): what a sandbox may see of a request relayed to
 * it (proxy.c), so that it never learns a session. true when one was removed (or out was too
 * small). */
bool cp_console_cookie_strip(const char *header, char *out, size_t outlen);

/* Whether a cookie list's segment (common/http_head.h) names one of the console's session
 * cookies: as airlockd writes them, or in any case (what a sandbox may not set). */
bool cp_console_cookie_is_ours(const struct al_http_cookie_seg *seg, bool any_case);

/* The admin endpoints of console_api.c (after authentication): false if not one of them. */
bool cp_console_api_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* GET /admin/policies[/{name}[/explain|/tests]] (console_policies.c): false if not one of them. */
bool cp_console_policies_route(struct cp *cp, struct al_http_req *req);
/* GET /admin/policy-reloads (the history) and POST /admin/policy-reloads (read the policies
 * again now, by who) (console_policies.c): false if not one of them. */
bool cp_console_reloads_route(struct cp *cp, struct al_http_req *req,
                              const struct cp_principal *who);
/* Reads every policy of the policies directory again (on the thread pool) and records each one
 * whose hash, validity or findings changed since airlockd last read it, with trigger ("start",
 * "sighup"); then creations read the files again and airlock-egress reloads the running
 * sandboxes' policies (but at "start"). One at a time: asked meanwhile, it runs again after. */
void cp_policy_reload(struct cp *cp, const char *trigger);
/* A policy file of the policies directory read by a creation or explain (policysel.c) after it
 * changed: p (NULL when invalid, with its counts and first error), recorded as a reload with
 * trigger when it differs from what airlockd last read of it. On the loop. */
void cp_policy_reload_seen(const char *file, const struct policy *p, size_t errors, size_t warnings,
                           const char *first_error, const char *trigger);
/* GET /admin/vault and DELETE /admin/vault/{name} (console_vault.c): false if not one of
 * them (POST and PUT come with their body to cp_console_vault_write). */
bool cp_console_vault_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* POST (create) or PUT (rotate) /admin/vault/{name} with its parsed body (borrowed; its value
 * is wiped); raw is the path after /admin/vault/. */
void cp_console_vault_write(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                            const char *raw, json_t *body);
/* POST /admin/keys with its body b: makes a key (name, role, policies), 201 with the key
 * itself, shown this once. */
void cp_console_keys_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                            const json_t *b);

#endif
