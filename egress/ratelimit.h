/* egress/ratelimit: how fast one sandbox may make the proxy work and write its audit log.
 *
 * Owns: the per-sandbox DNS query rate (GCRA, the token bucket as one atomic "theoretical
 * arrival time": no lock on the query path), the per-sandbox share of upstream resolutions
 * in flight (counted by dns_server.c against cfg.dns_inflight), and the records of their
 * refusals: beyond the limits queries are refused, each is counted instead of written, and
 * one `security_event` `limit` record per sandbox, reason and second carries the count
 * (`suppressed`). A sweep on the control loop (egress_limits_flush, every second and at
 * shutdown) writes the counts that no later event carried, so no suppressed event goes
 * unaccounted; the same sweep writes the aggregates of the audit budgets (audit_budget.h).
 */
#ifndef AIRLOCK_EGRESS_RATELIMIT_H
#define AIRLOCK_EGRESS_RATELIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct egress;
struct egress_sandbox;

#define EGRESS_LIMIT_INTERVAL_NS 1000000000ull /* one aggregated record per this, at most */

/* GCRA: admits an event at now_ns when the bucket (rate per second, burst) has a token.
 * tat is the bucket's whole state (0 = full). */
bool egress_rate_admit(atomic_uint_fast64_t *tat, uint32_t rate, uint32_t burst, uint64_t now_ns);
/* The tokens the bucket holds at now_ns (burst when full, and when rate is 0: unlimited):
 * what egress_rate_admit would admit at once. The admin API shows it so that a test or an
 * operator can wait for a bucket to be full instead of guessing its refill time. */
uint32_t egress_rate_tokens(const atomic_uint_fast64_t *tat, uint32_t rate, uint32_t burst,
                            uint64_t now_ns);

/* A DNS query of sb: true when within the sandbox's rate. When not, it is counted (reason
 * dns_rate_limit) and the caller answers REFUSED without a record of its own. */
bool egress_dns_rate_ok(struct egress *e, struct egress_sandbox *sb);
/* A DNS query refused because the sandbox has cfg.dns_inflight resolutions in flight. */
void egress_dns_inflight_refused(struct egress *e, struct egress_sandbox *sb);

/* Writes the aggregated records that are due (all of them when force): the limits' counts
 * and the audit budgets' aggregates. */
void egress_limits_flush(struct egress *e, bool force);
/* The same for one sandbox (its removal). */
void egress_limits_flush_sandbox(struct egress *e, struct egress_sandbox *sb, bool force);

#endif
