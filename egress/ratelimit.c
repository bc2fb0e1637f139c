/* egress/ratelimit: see ratelimit.h. */
#include "ratelimit.h"

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

/* One aggregated `limit` record. */
static void rl__record(struct egress *e, struct egress_sandbox *sb, const char *reason,
                       uint64_t suppressed, int64_t limit, const struct egress_deny_slot *d)
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
    if (d) {
        egress_rec_str(r, "denied_type", d->kind);
        egress_rec_str(r, "denied_reason", d->reason);
        if (d->target[0])
            egress_rec_str(r, "target", d->target);
        if (d->dst[0])
            egress_rec_str(r, "dst", d->dst);
    }
    egress_audit(e, r);
}

/* Writes the count of one counted limit when one is pending and the interval allows (or force). */
static void rl__count_flush(struct egress *e, struct egress_sandbox *sb,
                            atomic_uint_fast64_t *count, atomic_uint_fast64_t *last,
                            const char *reason, int64_t limit, bool force)
{
    if (atomic_load(count) == 0)
        return;
    if (!force && !egress_audit_throttle(last, EGRESS_LIMIT_INTERVAL_NS))
        return;
    uint64_t n = atomic_exchange(count, 0);
    if (n)
        rl__record(e, sb, reason, n, limit, NULL);
}

bool egress_dns_rate_ok(struct egress *e, struct egress_sandbox *sb)
{
    if (egress_rate_admit(&sb->dns_tat, e->cfg.dns_rate, e->cfg.dns_burst, al_now_ns()))
        return true;
    atomic_fetch_add(&sb->dns_rate_suppressed, 1);
    atomic_fetch_add(&e->stats.limit_dns_rate, 1);
    rl__count_flush(e, sb, &sb->dns_rate_suppressed, &sb->last_dns_rate_audit_ns, "dns_rate_limit",
                    e->cfg.dns_rate, false);
    return false;
}

void egress_dns_inflight_refused(struct egress *e, struct egress_sandbox *sb)
{
    atomic_fetch_add(&sb->dns_inflight_suppressed, 1);
    atomic_fetch_add(&e->stats.limit_dns_inflight, 1);
    rl__count_flush(e, sb, &sb->dns_inflight_suppressed, &sb->last_dns_inflight_audit_ns,
                    "dns_inflight_limit", e->cfg.dns_inflight, false);
}

static uint64_t rl__hash(uint64_t h, const char *s)
{
    for (; s && *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    h ^= 0xff; /* separator: ("ab","c") differs from ("a","bc") */
    return h * 0x100000001b3ull;
}

#define RL_DENY_ALL 5 /* all denial records of a sandbox: this many times --deny-audit-rate */

bool egress_deny_audit_ok(struct egress *e, struct egress_sandbox *sb, const char *kind,
                          const char *reason, const char *target, const char *dst)
{
    uint32_t rate = e->cfg.deny_audit_rate;
    if (!sb || rate == 0)
        return true;
    uint64_t key =
        rl__hash(rl__hash(rl__hash(rl__hash(0xcbf29ce484222325ull, kind), reason), target), dst);
    if (key == 0)
        key = 1;
    uint64_t now = al_now_ns();
    struct egress_deny_slot flush;
    bool do_flush = false, ok;
    pthread_mutex_lock(&sb->lock);
    struct egress_deny_slot *s = NULL, *victim = &sb->deny[0];
    for (size_t i = 0; i < EGRESS_DENY_SLOTS; i++) {
        struct egress_deny_slot *d = &sb->deny[i];
        if (d->key == key) {
            s = d;
            break;
        }
        if (d->key == 0 || (victim->key != 0 && d->window_ns < victim->window_ns))
            victim = d;
    }
    if (!s || now - s->window_ns >= EGRESS_LIMIT_INTERVAL_NS) {
        /* A new window (or a new kind of denial in the least recent slot): what the old one
         * counted is written first. */
        struct egress_deny_slot *d = s ? s : victim;
        if (d->key && d->suppressed) {
            flush = *d;
            do_flush = true;
        }
        if (!s) {
            memset(d, 0, sizeof *d);
            d->key = key;
            snprintf(d->kind, sizeof d->kind, "%s", kind ? kind : "");
            snprintf(d->reason, sizeof d->reason, "%s", reason ? reason : "");
            snprintf(d->target, sizeof d->target, "%s", target ? target : "");
            snprintf(d->dst, sizeof d->dst, "%s", dst ? dst : "");
            s = d;
        }
        s->window_ns = now;
        s->count = 0;
        s->suppressed = 0;
    }
    ok = ++s->count <= rate;
    if (!ok) {
        s->suppressed++;
        atomic_fetch_add(&e->stats.audit_aggregated, 1);
    }
    pthread_mutex_unlock(&sb->lock);
    if (do_flush)
        rl__record(e, sb, "repeated_denials", flush.suppressed, rate, &flush);
    /* Denials that all differ (a new name each time) are not identical, but the sandbox's
     * records of them are bounded too: RL_DENY_ALL times the rate per second. */
    if (ok && !egress_rate_admit(&sb->deny_tat, rate * RL_DENY_ALL, rate * RL_DENY_ALL * 2, now)) {
        ok = false;
        atomic_fetch_add(&sb->deny_rate_suppressed, 1);
        atomic_fetch_add(&e->stats.audit_aggregated, 1);
        rl__count_flush(e, sb, &sb->deny_rate_suppressed, &sb->last_deny_rate_audit_ns,
                        "denial_rate_limit", (int64_t)rate * RL_DENY_ALL, false);
    }
    return ok;
}

void egress_limits_flush_sandbox(struct egress *e, struct egress_sandbox *sb, bool force)
{
    rl__count_flush(e, sb, &sb->dns_rate_suppressed, &sb->last_dns_rate_audit_ns, "dns_rate_limit",
                    e->cfg.dns_rate, force);
    rl__count_flush(e, sb, &sb->dns_inflight_suppressed, &sb->last_dns_inflight_audit_ns,
                    "dns_inflight_limit", e->cfg.dns_inflight, force);
    rl__count_flush(e, sb, &sb->deny_rate_suppressed, &sb->last_deny_rate_audit_ns,
                    "denial_rate_limit", (int64_t)e->cfg.deny_audit_rate * RL_DENY_ALL, force);
    struct egress_deny_slot due[EGRESS_DENY_SLOTS];
    size_t n = 0;
    uint64_t now = al_now_ns();
    pthread_mutex_lock(&sb->lock);
    for (size_t i = 0; i < EGRESS_DENY_SLOTS; i++) {
        struct egress_deny_slot *d = &sb->deny[i];
        if (d->key && d->suppressed && (force || now - d->window_ns >= EGRESS_LIMIT_INTERVAL_NS)) {
            due[n++] = *d;
            d->suppressed = 0;
        }
    }
    pthread_mutex_unlock(&sb->lock);
    for (size_t i = 0; i < n; i++)
        rl__record(e, sb, "repeated_denials", due[i].suppressed, e->cfg.deny_audit_rate, &due[i]);
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
