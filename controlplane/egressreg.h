/* controlplane/egressreg: registration of sandboxes with airlock-egress.
 *
 * Owns: the admin-API client of <state>/run/egress.sock (POST/DELETE /v1/sandboxes), the
 * body of a registration (id, template, the sandbox's address, its policy file, its E2B
 * narrowing and the placeholders it already holds), what the answer hands out for the
 * sandbox (its interception CA and placeholders, kept in rec.intercept), bringing the
 * agent a new CA, and resynchronisation: after airlock-egress (re)starts or airlockd
 * re-adopts sandboxes, every live sandbox with a network is registered again (and its agent
 * given the new CA), registrations of sandboxes airlockd no longer knows are removed, and
 * a registration whose network fields are not the stored ones gets them again; the
 * replacement of a running sandbox's network fields (its update).
 * Until a sandbox is registered the proxy refuses its traffic (fail closed), so
 * registration precedes the sandbox's start.
 */
#ifndef AIRLOCK_CP_EGRESSREG_H
#define AIRLOCK_CP_EGRESSREG_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"

struct cp;
struct cp_sandbox;
struct cp_egress;

typedef void (*cp_egress_cb)(struct cp_sandbox *sb, int rc, const char *msg);

int cp_egress_new(struct cp *cp, const char *sock_path, struct cp_egress **out);
void cp_egress_free(struct cp_egress *e);
/* The JSON registration of a sandbox (new reference). */
json_t *cp_egress_body(struct cp *cp, const struct cp_sandbox *sb);
int cp_egress_register(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb);
int cp_egress_unregister(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb);
/* Sends the sandbox's network fields as its record now holds them (rec.network,
 * rec.allow_internet) to the proxy, which replaces the registration's fields and judges the
 * sandbox's connections again; cb gets 0, -EINVAL (refused: msg says why), -ENOENT (not
 * registered) or -EIO. update_id, key_id and the record's network generation go into the
 * proxy's audit records. */
int cp_egress_set_network(struct cp_egress *e, struct cp_sandbox *sb, const char *update_id,
                          const char *key_id, cp_egress_cb cb);
/* Re-registers every live sandbox that has a network and drops unknown registrations;
 * a registration whose network fields differ from the stored ones gets the stored ones. */
void cp_egress_resync(struct cp_egress *e);
/* Called on airlockd's tick: lists and registers again after a registration met a
 * conflict (409) during a resynchronisation. */
void cp_egress_tick(struct cp_egress *e);
/* Sends the sandbox's current CA of the egress proxy (rec.intercept) to its agent with
 * POST /init when the agent has another one (the proxy restarted and made new CAs); only
 * while the sandbox runs (a paused one gets it when resumed). */
void cp_egress_ca_sync(struct cp_sandbox *sb);
/* Whether the CA of a sandbox's rec.intercept can certify anything. A policy that intercepts
 * nothing gets no CA from the proxy; an older proxy gave one constrained to the reserved
 * "invalid" TLD (caNames ["invalid"]), which is not installed either (nothing would ever use
 * it; a reloaded policy cannot widen a CA). */
bool cp_egress_ca_useful(const json_t *intercept);
/* Where airlock-egress writes its audit log: <state>/audit, unless egress.args moves it
 * (--audit-dir). */
void cp_egress_audit_dir(const struct cp *cp, char *out, size_t len);
/* POST /v1/audit/sync: cb gets 0 once every record the proxy wrote so far is in the files
 * (or < 0 and why); sb (referenced meanwhile) is what cb is called with. */
int cp_egress_audit_sync(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb);
/* POST /v1/audit/records: rec (a control-plane record, {"type": "volume", "event", ...};
 * not stolen) goes into the proxy's audit log, in its chain; cb (may be NULL) gets 0 once
 * it is on disk, or < 0 and why. 0 when sent, or a negative errno (cb is not called). */
typedef void (*cp_egress_done_cb)(void *arg, int rc, const char *msg);
int cp_egress_audit_record(struct cp_egress *e, json_t *rec, cp_egress_done_cb cb, void *arg);
/* The one way airlockd records what it did in the audit log (docs/audit.md, "volume" and
 * "lifecycle"): rec ({"type", "event", ...}, stolen) through cp_egress_audit_record; what
 * names the operation in airlockd's log. then (may be NULL) runs once the record is on disk
 * (0) or once it failed (< 0, logged as an error). Without airlock-egress there is no log to
 * write to: logged ("not audited"), and then runs with 0. */
void cp_audit_record(struct cp *cp, json_t *rec, const char *what, cp_egress_done_cb then,
                     void *arg);
/* POST /v1/reload: airlock-egress re-reads the policy file of every sandbox registered with
 * one (a sandbox whose new policy is invalid keeps its old one); cb gets 0 and the proxy's
 * report ({"reloaded": [ids], "failed": [{"sandbox", "error"}]}, borrowed), or < 0 with NULL.
 * 0 when sent, or a negative errno (cb is not called). */
typedef void (*cp_egress_reload_cb)(void *arg, int rc, const json_t *report);
int cp_egress_reload(struct cp_egress *e, cp_egress_reload_cb cb, void *arg);
/* Counters for /metrics (egress decisions): the proxy's /v1/stats, cached (may be NULL),
 * refreshed in the background (the tick asks); each answer also feeds the overview's chart of
 * decisions (cp_metrics_egress). */
json_t *cp_egress_stats(struct cp_egress *e);

#endif
