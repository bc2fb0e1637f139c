/* egress/sandbox: the registry of sandboxes the proxy serves, shared by every worker.
 *
 * Owns: the map from a sandbox's source address (guaranteed by the vswitch) to its
 * identity, template and current policy; atomic policy replacement (hot reload); the
 * per-sandbox counters that limits need (live connections, buffer memory); the memory of
 * DNS answers the proxy gave the sandbox (for the destination check); and its E2B network
 * fields, which narrow every policy it is given (registration, replacement, reload).
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

/* Identical denials of one sandbox in the current second (ratelimit.c). */
#define EGRESS_DENY_SLOTS 8
struct egress_deny_slot {
    uint64_t key;        /* hash of kind, reason, target, dst; 0 = free */
    uint64_t window_ns;  /* start of its one-second window */
    uint32_t count;      /* denials in the window */
    uint32_t suppressed; /* of which counted, not written */
    char kind[16], reason[48], target[128], dst[56];
};

struct egress_sandbox {
    atomic_int refs;
    char id[128];
    char template_name[128];
    struct egress_ip addrs[EGRESS_SANDBOX_MAX_ADDRS];
    size_t n_addrs;
    char policy_file[512]; /* "" when the policy came inline */
    /* E2B network fields ({"allow_internet_access","allow_out","deny_out"}) or NULL: every
     * policy of this sandbox is narrowed by them (egress_policy_narrow). Set at
     * registration, never changed, freed with the sandbox. */
    struct json_t *network;
    atomic_bool removed;

    pthread_mutex_t lock;                 /* policy and answers */
    struct egress_policy *policy;         /* never NULL once registered */
    struct egress_answer_entry **answers; /* EGRESS_ANSWER_SLOTS pointers, on first use */
    size_t n_answers;

    /* Interception: its CA, TLS configuration, placeholders (inspect.c); set once at
     * registration, freed with the sandbox. */
    struct egress_inspect_sandbox *inspect;

    /* Live figures (limits and stats). */
    atomic_uint conns;
    atomic_size_t mem;
    atomic_uint_fast64_t n_allowed, n_denied, n_dns, bytes_up, bytes_down;
    atomic_uint_fast64_t limit_events; /* for rate-limiting audit of repeated limit hits */
    atomic_uint_fast64_t last_limit_audit_ns;

    /* Rate limits and aggregated audit records (ratelimit.c). */
    atomic_uint_fast64_t dns_tat; /* the DNS query bucket (GCRA) */
    atomic_uint dns_inflight;     /* its queries waiting for the upstream resolver */
    atomic_uint_fast64_t dns_rate_suppressed, dns_inflight_suppressed;
    atomic_uint_fast64_t last_dns_rate_audit_ns, last_dns_inflight_audit_ns;
    struct egress_deny_slot deny[EGRESS_DENY_SLOTS]; /* under lock */
    atomic_uint_fast64_t deny_tat;                   /* all its denial records (GCRA) */
    atomic_uint_fast64_t deny_rate_suppressed, last_deny_rate_audit_ns;
};

struct egress_registry;

int egress_registry_new(struct egress_registry **out);
void egress_registry_free(struct egress_registry *r);

/* Registers a sandbox (takes ownership of policy's reference and of network, which may be
 * NULL, on success; policy is already narrowed by network). -EEXIST when the id or an
 * address is taken (err says which). */
int egress_registry_add(struct egress_registry *r, const char *id, const char *template_name,
                        const struct egress_ip *addrs, size_t n_addrs, const char *policy_file,
                        struct egress_policy *policy, struct json_t *network, struct al_error *err);
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

/* Answers given to the sandbox for a name (canonical), remembered until
 * max(ttl, remember_s). */
void egress_sandbox_remember(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ips, size_t n, uint32_t keep_s);
/* Whether ip was among the answers remembered for name (and not expired). */
bool egress_sandbox_answered(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ip);

#endif
