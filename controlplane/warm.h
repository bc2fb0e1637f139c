/* controlplane/warm: warm sandboxes, started ahead of creations and claimed by them.
 *
 * Owns: the pools of warm sandboxes, one per template (sandboxes.warm.*: a minimum and a
 * maximum per template, or the default pair for every template not listed, and a memory
 * budget for all of them together); their refill, one start at a time and only while no
 * creation is in flight (a burst's CPU goes to the burst); each pool's size, which follows
 * the demand seen (the largest burst of the template's creations within
 * sandboxes.warm.window, between its minimum and its maximum); the claim of a warm sandbox
 * by a creation (its identity, given through the agent's POST /init); and the pools'
 * metrics (claims served warm and cold, pool sizes, refill time).
 *
 * A warm sandbox is a whole sandbox of the jail backend: its network from the vswitch, its
 * airlock-vmm, cgroups, root file system and agent, healthy. It has an id (ids are not
 * secret) and nothing else of a user: no access token, no envVars but its template's, no CA,
 * no policy, and it is not registered with airlock-egress, which refuses everything a
 * sandbox it does not know sends (fail closed). It is in no registry (nothing routes to it)
 * and is saved in the store as "creating", so that an airlockd that died leaves it to the
 * next one to tear down like any creation nobody got a 201 for.
 *
 * The claim (lifecycle.c's create): cp_warm_peek finds a ready sandbox of the template's
 * version (its id becomes the creation's), cp_warm_take hands it over; the creation gives
 * it its record (token, policy, owner), registers it with airlock-egress, and
 * cp_warm_claim sends the agent its identity: envVars (the template's under the
 * creation's), the access token, the sandbox CA for its trust stores, the clock and an RNG
 * seed (what the KVM backend's restore sends; the jail shares the host's clock and
 * entropy, and its agent checks and ignores them). A claimed sandbox is an ordinary one from
 * then on and is torn down at its end: a warm sandbox never has a second user.
 */
#ifndef AIRLOCK_CP_WARM_H
#define AIRLOCK_CP_WARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "common/buf.h"
#include "common/error.h"

struct cp;
struct cp_sandbox;

/* One sandboxes.warm.templates entry: "NAME=MIN..MAX" or "NAME=N". -EINVAL with err saying
 * what is wrong. */
int cp_warm_parse_entry(const char *s, char *name, size_t nlen, int64_t *min, int64_t *max,
                        struct al_error *err);
/* A pool's demand: the creations of its template in the burst under way (a burst lasts until
 * no creation is in flight) and the sizes and ends of the last CP_WARM_BURSTS bursts. */
#define CP_WARM_BURSTS 16
struct cp_warm_demand {
    uint32_t current;
    uint32_t n[CP_WARM_BURSTS];
    uint64_t end_ns[CP_WARM_BURSTS];
    size_t head;
};
/* The burst under way is over at now (no creation in flight): it is remembered. */
void cp_warm_demand_burst_end(struct cp_warm_demand *d, uint64_t now);
/* How many warm sandboxes a pool keeps: the largest burst that ended within window_ns of
 * now (or the one under way), between min and max. */
size_t cp_warm_demand_target(const struct cp_warm_demand *d, uint64_t now, uint64_t window_ns,
                             int64_t min, int64_t max);
/* Sets up the pools from the configuration (nothing is started yet). */
int cp_warm_init(struct cp *cp, struct al_error *err);
/* Starts what the pools lack (one at a time; nothing while creations are in flight). */
void cp_warm_refill(struct cp *cp);
/* Whether a pool holds (ready or starting) less than half of what it keeps now. */
bool cp_warm_below_half(struct cp *cp);
/* The id of a ready warm sandbox of template_id whose files are template_dir (the version a
 * creation resolved), or NULL. Counts the creation in the template's demand. Stale warm
 * sandboxes (of another version) found on the way are torn down. */
const char *cp_warm_peek(struct cp *cp, const char *template_id, const char *template_dir);
/* How many warm sandboxes of template_id are ready to be claimed (what a cluster node
 * publishes). */
size_t cp_warm_ready(const struct cp *cp, const char *template_id);
/* Whether id is a warm sandbox's (a new creation's id must not be). */
bool cp_warm_has_id(struct cp *cp, const char *id);
/* Hands the warm sandbox id (just peeked) to a creation: the caller owns the reference. */
struct cp_sandbox *cp_warm_take(struct cp *cp, const char *id);
/* Gives a taken sandbox its identity (the record's token, a->env_vars over the template's,
 * a->ca_cert_pem) through its agent's POST /init; cb as the backend's start reports. */
int cp_warm_claim(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb);
/* A creation has succeeded: counted as served warm or cold. */
void cp_warm_created(struct cp_sandbox *sb);
/* The pools' lines for /metrics. */
void cp_warm_metrics(struct cp *cp, struct al_buf *b);
/* Tears every warm sandbox down (at airlockd's stop); done once all are gone. */
void cp_warm_stop(struct cp *cp, void (*done)(struct cp *cp));
void cp_warm_free(struct cp *cp);

#endif
