/* egress/ratelimit: see ratelimit.h. */
#include "ratelimit.h"

#include "audit_budget.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

#include "common/util.h"

bool egress_rate_admit(atomic_uint_fast64_t *tat, uint32_t rate, uint32_t burst, uint64_t now_ns)
{
    if (rate == 0)
        return true; /* unlimited */
    uint64_t t = 1000000000ull / rate;
    if (t == 0)
        t = 1;
    uint64_t span = t * (burst ? burst : 1);
    uint64_t cur = atomic_load(tat);
    for (;;) {
        uint64_t base = cur > now_ns ? cur : now_ns;
        uint64_t next = base + t;
        if (next - now_ns > span)
            return false;
        if (atomic_compare_exchange_weak(tat, &cur, next))
            return true;
    }
}

uint32_t egress_rate_tokens(const atomic_uint_fast64_t *tat, uint32_t rate, uint32_t burst,
                            uint64_t now_ns)
{
    uint32_t full = burst ? burst : 1;
    if (rate == 0)
        return full;
    uint64_t t = 1000000000ull / rate;
    if (t == 0)
        t = 1;
    uint64_t span = t * full;
    uint64_t cur = atomic_load((atomic_uint_fast64_t *)tat);
    uint64_t owed = cur > now_ns ? cur - now_ns : 0; /* time until the bucket is full */
    if (owed >= span)
        return 0;
    /* Admission takes one t of the span per token (egress_rate_admit's test). */
    return (uint32_t)((span - owed) / t);
}

/* One aggregated `limit` record. */
static void rl__record(struct egress *e, struct egress_sandbox *sb, const char *reason,
                       uint64_t suppressed, int64_t limit)
{
    json_t *r = egress_rec_new("security_event");
    if (!r)
        return;
    struct egress_policy *p = egress_sandbox_policy(sb);
    egress_rec_sandbox(r, sb, p);
    egress_policy_unref(p);
    egress_rec_str(r, "event", "limit");
    egress_rec_str(r, "decision", "deny");
    egress_rec_str(r, "reason", reason);
    egress_rec_int(r, "suppressed", (int64_t)suppressed);
    egress_rec_int(r, "interval_ms", (int64_t)(EGRESS_LIMIT_INTERVAL_NS / 1000000ull));
    egress_rec_int(r, "limit", limit);
    egress_audit(e, r);
}

/* The limits whose refusals are counted and written as one record per interval. */
enum rl__counted { RL__DNS_RATE, RL__DNS_INFLIGHT };

/* Writes the count of one counted limit when one is pending and the interval allows (or force). */
static void rl__count_flush(struct egress *e, struct egress_sandbox *sb, enum rl__counted which,
                            bool force)
{
    bool rate = which == RL__DNS_RATE;
    atomic_uint_fast64_t *count = rate ? &sb->dns_rate_suppressed : &sb->dns_inflight_suppressed;
    atomic_uint_fast64_t *last =
        rate ? &sb->last_dns_rate_audit_ns : &sb->last_dns_inflight_audit_ns;
    const char *reason = rate ? "dns_rate_limit" : "dns_inflight_limit";
    int64_t limit = rate ? (int64_t)e->cfg.dns_rate : (int64_t)e->cfg.dns_inflight;
    if (atomic_load(count) == 0)
        return;
    if (!force && !egress_audit_throttle(last, EGRESS_LIMIT_INTERVAL_NS))
        return;
    uint64_t n = atomic_exchange(count, 0);
    if (n)
        rl__record(e, sb, reason, n, limit);
}

bool egress_dns_rate_ok(struct egress *e, struct egress_sandbox *sb)
{
    if (egress_rate_admit(&sb->dns_tat, e->cfg.dns_rate, e->cfg.dns_burst, al_now_ns()))
        return true;
    atomic_fetch_add(&sb->dns_rate_suppressed, 1);
    atomic_fetch_add(&e->stats.limit_dns_rate, 1);
    rl__count_flush(e, sb, RL__DNS_RATE, false);
    return false;
}

void egress_dns_inflight_refused(struct egress *e, struct egress_sandbox *sb)
{
    atomic_fetch_add(&sb->dns_inflight_suppressed, 1);
    atomic_fetch_add(&e->stats.limit_dns_inflight, 1);
    rl__count_flush(e, sb, RL__DNS_INFLIGHT, false);
}

void egress_limits_flush_sandbox(struct egress *e, struct egress_sandbox *sb, bool force)
{
    rl__count_flush(e, sb, RL__DNS_RATE, force);
    rl__count_flush(e, sb, RL__DNS_INFLIGHT, force);
    egress_audit_budget_flush(e, sb, force);
}

struct rl__sweep {
    struct egress *e;
    bool force;
};

static void rl__sweep_one(struct egress_sandbox *sb, void *arg)
{
    struct rl__sweep *s = arg;
    egress_limits_flush_sandbox(s->e, sb, s->force);
}

void egress_limits_flush(struct egress *e, bool force)
{
    struct rl__sweep s = {.e = e, .force = force};
    egress_registry_each(e->reg, rl__sweep_one, &s);
}
