/* egress/sandbox: the registry of sandboxes the proxy serves, shared by every worker.
 *
 * Owns: the map from a sandbox's source address (guaranteed by the vswitch) to its
 * identity, template and current policy; atomic policy replacement (hot reload); the
 * per-sandbox counters that limits need (live connections, buffer memory); the memory of
 * DNS answers the proxy gave the sandbox (for the destination check); its own resolver
 * cache (resolver.h: nothing it holds comes from another sandbox); and its E2B network
 * fields, which narrow every policy it is given (registration, replacement, reload) and
 * which a network update replaces together with the policy (a new network generation).
 *
 * Concurrency: the registry is guarded by a rwlock (lookups take it shared); a sandbox is
 * reference-counted and may outlive its removal while connections still hold it (they see
 * `removed` and close). The policy pointer is swapped under the sandbox's lock; readers
 * take a reference, so a decision always uses one consistent policy.
 */
#ifndef AIRLOCK_EGRESS_SANDBOX_H
#define AIRLOCK_EGRESS_SANDBOX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "decide.h"
#include "dns_wire.h"

struct json_t;
struct egress_config;
struct egress_rcache;

#define EGRESS_SANDBOX_MAX_ADDRS 4
#define EGRESS_ANSWER_SLOTS      512 /* names remembered per sandbox */

/* One remembered name (allocated on first use; a sandbox that never asks costs nothing). */
struct egress_answer_entry {
    uint64_t expire_ns; /* monotonic */
    uint8_t n4, n6;
    uint8_t v4[DNS_MAX_ANSWERS][4];
    uint8_t v6[DNS_MAX_ANSWERS][16];
    char name[];
};

struct egress_audit_agg; /* audit_budget.c */

struct egress_sandbox {
    atomic_int refs;
    char id[128];
    char template_name[128];
    struct egress_ip addrs[EGRESS_SANDBOX_MAX_ADDRS];
    size_t n_addrs;
    char policy_file[512]; /* "" when the policy came inline */
    /* E2B network fields ({"allow_internet_access","allow_out","deny_out"}) or NULL: every
     * policy of this sandbox is narrowed by them (egress_policy_narrow). Set at
     * registration, replaced by a network update (egress_set_network); read and written on
     * the control loop only (workers see the narrowing through the policy). */
    struct json_t *network;
    /* Network updates: the generation (0 at registration, +1 per update, under lock with
     * the policy it came with) and the id of the latest update (for the records of the
     * connections it closes). Workers judge a connection again when its generation is
     * older than the sandbox's. */
    atomic_uint net_gen;
    char net_update[72]; /* under lock */
    atomic_bool removed;

    pthread_mutex_t lock;                   /* policy and answers */
    struct egress_policy *policy;           /* never NULL once registered */
    struct egress_answer_entry **answers;   /* EGRESS_ANSWER_SLOTS pointers, on first use */
    _Atomic(struct egress_rcache *) rcache; /* its resolver cache, on first use */
    size_t n_answers;

    /* Interception: its CA, TLS configuration, placeholders (inspect.c); set once at
     * registration, freed with the sandbox. */
    struct egress_inspect_sandbox *inspect;

    /* Live figures (limits and stats). */
    atomic_uint conns;
    /* The most connections it held at once: a bound shown as it was kept, which a sample
     * of `conns` could miss (those reset at once beyond the cap + slack are not held). */
    atomic_uint conns_peak;
    atomic_size_t mem;
    atomic_uint_fast64_t n_allowed, n_denied, n_dns, bytes_up, bytes_down;
    atomic_uint_fast64_t limit_events; /* for rate-limiting audit of repeated limit hits */
    atomic_uint_fast64_t last_limit_audit_ns;

    /* Rate limits and aggregated audit records (ratelimit.c). */
    atomic_uint_fast64_t dns_tat; /* the DNS query bucket (GCRA) */
    atomic_uint dns_inflight;     /* its queries waiting for the upstream resolver */
    atomic_uint_fast64_t dns_rate_suppressed, dns_inflight_suppressed;
    atomic_uint_fast64_t last_dns_rate_audit_ns, last_dns_inflight_audit_ns;

    /* Audit budgets (audit_budget.c): its allowed and its denied records written one by one
     * (GCRA), and the aggregates of those beyond (allocated at the first). */
    atomic_uint_fast64_t audit_allow_tat, audit_deny_tat;
    pthread_mutex_t agg_lock;
    struct egress_audit_agg *audit_agg; /* under agg_lock */
};

struct egress_registry;

int egress_registry_new(struct egress_registry **out);
void egress_registry_free(struct egress_registry *r);

/* A sandbox to register: its id, template (may be NULL), 1..EGRESS_SANDBOX_MAX_ADDRS source
 * addresses, the file its policy was read from (NULL: given as text), that policy (already
 * narrowed by network) and its E2B network fields (may be NULL). */
struct egress_registry_entry {
    const char *id;
    const char *template_name;
    const struct egress_ip *addrs;
    size_t n_addrs;
    const char *policy_file;
    struct egress_policy *policy;
    struct json_t *network;
};
/* Registers a sandbox (takes ownership of s->policy's reference and of s->network on
 * success). -EEXIST when the id or an address is taken (err says which). */
int egress_registry_add(struct egress_registry *r, const struct egress_registry_entry *s,
                        struct al_error *err);
/* Removes it; the sandbox is marked removed and dropped from the maps. Returns the
 * sandbox (a reference the caller must put) or NULL when unknown. */
struct egress_sandbox *egress_registry_remove(struct egress_registry *r, const char *id);
/* Lookups return a reference (egress_sandbox_put when done) or NULL. */
struct egress_sandbox *egress_registry_by_addr(struct egress_registry *r,
                                               const struct egress_ip *ip);
struct egress_sandbox *egress_registry_by_id(struct egress_registry *r, const char *id);
/* Calls fn on each sandbox (under the shared lock: fn must not call into the registry). */
void egress_registry_each(struct egress_registry *r,
                          void (*fn)(struct egress_sandbox *sb, void *arg), void *arg);
size_t egress_registry_count(struct egress_registry *r);

struct egress_sandbox *egress_sandbox_get(struct egress_sandbox *sb);
void egress_sandbox_put(struct egress_sandbox *sb);
/* The current policy, with a reference (egress_policy_unref when done). */
struct egress_policy *egress_sandbox_policy(struct egress_sandbox *sb);
/* Replaces the policy (takes the new reference; drops the old one). */
void egress_sandbox_set_policy(struct egress_sandbox *sb, struct egress_policy *p,
                               const char *policy_file);
/* The current policy (a reference) and the network generation it belongs to, read
 * together. */
struct egress_policy *egress_sandbox_policy_gen(struct egress_sandbox *sb, unsigned *gen);
/* Replaces the policy and the network fields together (takes both references; drops the
 * old ones), a new network generation named by update_id. */
void egress_sandbox_set_network(struct egress_sandbox *sb, struct egress_policy *p,
                                struct json_t *network, const char *update_id);
/* The id of the latest network update into out (size 72; "" when none). */
void egress_sandbox_net_update(struct egress_sandbox *sb, char out[72]);

/* The sandbox's resolver cache, made on first use (cfg gives its TTL clamps); NULL when
 * memory is short (the caller then resolves without a cache). Valid while the caller holds
 * the sandbox. */
struct egress_rcache *egress_sandbox_rcache(struct egress_sandbox *sb,
                                            const struct egress_config *cfg);
/* Answers given to the sandbox for a name (canonical), remembered until
 * max(ttl, remember_s). */
void egress_sandbox_remember(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ips, size_t n, uint32_t keep_s);
/* Whether ip was among the answers remembered for name (and not expired). */
bool egress_sandbox_answered(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ip);

#endif
