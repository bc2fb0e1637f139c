/* egress/audit_budget: see audit_budget.h. */
#include "audit_budget.h"

#include "internal.h"
#include "ratelimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define BUDGET_SLOTS  16 /* distinct groups of one sandbox per interval */
#define BUDGET_MERGED 12 /* groups beyond those: one per record type and decision */

struct budget__slot {
    uint64_t key;      /* 0 = free */
    uint64_t start_ns; /* monotonic: when its interval began */
    uint64_t first_wall, last_wall;
    uint64_t count, bytes_up, bytes_down, errors;
    uint64_t status[5]; /* 1xx .. 5xx */
    bool merged;        /* rule, reason and host varied: not kept */
    char type[16], decision[12];
    char rule[72], reason[64], host[256];
    char policy_name[72], policy_hash[72];
    char first_rid[32], last_rid[32];
};

struct egress_audit_agg {
    struct budget__slot slot[BUDGET_SLOTS + BUDGET_MERGED];
};

static uint64_t budget__hash(uint64_t h, const char *s)
{
    for (; s && *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    h ^= 0xff; /* separator: ("ab","c") differs from ("a","bc") */
    return h * 0x100000001b3ull;
}

/* s into dst[cap], cut to fit as snprintf would cut it (once per request: no printf). */
static void budget__copy(char *dst, size_t cap, const char *s)
{
    size_t n = s ? strnlen(s, cap - 1) : 0;
    memcpy(dst, s ? s : "", n);
    dst[n] = 0;
}

static bool budget__due(const struct egress *e, const struct budget__slot *s, uint64_t now)
{
    return now - s->start_ns >= (uint64_t)e->cfg.audit_aggregate_ms * 1000000ull;
}

static void budget__open(struct budget__slot *s, uint64_t key, bool merged,
                         const struct egress_audit_event *ev, uint64_t now)
{
    memset(s, 0, sizeof *s);
    s->key = key;
    s->start_ns = now;
    s->merged = merged;
    budget__copy(s->type, sizeof s->type, ev->type);
    budget__copy(s->decision, sizeof s->decision, ev->decision);
    if (!merged) {
        budget__copy(s->rule, sizeof s->rule, ev->rule);
        budget__copy(s->reason, sizeof s->reason, ev->reason);
        budget__copy(s->host, sizeof s->host, ev->host);
    }
    if (ev->policy) {
        budget__copy(s->policy_name, sizeof s->policy_name, egress_policy_name(ev->policy));
        budget__copy(s->policy_hash, sizeof s->policy_hash, egress_policy_hash(ev->policy));
    }
}

static void budget__add(struct budget__slot *s, const struct egress_audit_event *ev)
{
    uint64_t wall = al_wall_ns();
    if (!s->count) {
        s->first_wall = wall;
        budget__copy(s->first_rid, sizeof s->first_rid, ev->request_id);
    }
    s->last_wall = wall;
    budget__copy(s->last_rid, sizeof s->last_rid, ev->request_id);
    s->count++;
    s->bytes_up += ev->bytes_up;
    s->bytes_down += ev->bytes_down;
    s->errors += ev->error;
    if (ev->status >= 100 && ev->status < 600)
        s->status[ev->status / 100 - 1]++;
}

static void budget__str_or_null(struct egress_recw *w, const char *key, const char *s)
{
    egress_recw_str(w, key, s[0] ? s : NULL);
}

static void budget__write(struct egress *e, const struct egress_sandbox *sb,
                          const struct budget__slot *s)
{
    bool deny = strcmp(s->decision, "deny") == 0;
    struct egress_recw w;
    egress_recw_begin(&w, "aggregate");
    egress_recw_str(&w, "sandbox", sb->id);
    egress_recw_str(&w, "template", sb->template_name[0] ? sb->template_name : NULL);
    if (s->policy_hash[0]) {
        egress_recw_obj_begin(&w, "policy");
        egress_recw_str(&w, "name", s->policy_name);
        egress_recw_str(&w, "hash", s->policy_hash);
        egress_recw_close(&w, '}');
    } else {
        egress_recw_null(&w, "policy");
    }
    egress_recw_str(&w, "of", s->type);
    egress_recw_str(&w, "decision", s->decision);
    budget__str_or_null(&w, "rule", s->rule);
    budget__str_or_null(&w, strcmp(s->type, "connection_end") == 0 ? "end" : "reason", s->reason);
    budget__str_or_null(&w, "host", s->host);
    if (s->merged)
        egress_recw_bool(&w, "merged", true);
    egress_recw_int(&w, "count", (int64_t)s->count);
    egress_recw_str(&w, "first_request_id", s->first_rid);
    egress_recw_str(&w, "last_request_id", s->last_rid);
    char t[40];
    al_time_rfc3339(t, sizeof t, s->first_wall);
    egress_recw_str(&w, "first_time", t);
    al_time_rfc3339(t, sizeof t, s->last_wall);
    egress_recw_str(&w, "last_time", t);
    egress_recw_int(&w, "interval_ms", e->cfg.audit_aggregate_ms);
    egress_recw_int(&w, "limit", deny ? e->cfg.audit_deny_rate : e->cfg.audit_allow_rate);
    if (strcmp(s->type, "connection_end") == 0 || strcmp(s->type, "http_request") == 0) {
        egress_recw_int(&w, "bytes_up", (int64_t)s->bytes_up);
        egress_recw_int(&w, "bytes_down", (int64_t)s->bytes_down);
    }
    if (s->errors)
        egress_recw_int(&w, "errors", (int64_t)s->errors);
    bool any = false;
    for (int i = 0; i < 5; i++)
        any = any || s->status[i];
    if (any) {
        egress_recw_obj_begin(&w, "status");
        for (int i = 0; i < 5; i++) {
            if (s->status[i]) {
                char k[4] = {(char)('1' + i), 'x', 'x', 0};
                egress_recw_int(&w, k, (int64_t)s->status[i]);
            }
        }
        egress_recw_close(&w, '}');
    }
    egress_audit_w(e, &w);
}

/* The slot for key among v[0..n): its own (a new interval when the old one ended: *flush
 * then holds what to write), else a free or ended one, else NULL. A slot in use has a key
 * (never 0), so flush->key says whether there is something to write. */
static struct budget__slot *budget__find(struct egress *e, struct budget__slot *v, size_t n,
                                         uint64_t key, uint64_t now, struct budget__slot *flush)
{
    struct budget__slot *spare = NULL;
    for (size_t i = 0; i < n; i++) {
        if (v[i].key == key) {
            if (budget__due(e, &v[i], now)) {
                *flush = v[i];
                v[i].key = 0;
                return &v[i];
            }
            return &v[i];
        }
        if (!spare && (v[i].key == 0 || budget__due(e, &v[i], now)))
            spare = &v[i];
    }
    if (spare && spare->key) {
        *flush = *spare;
        spare->key = 0;
    }
    return spare;
}

bool egress_audit_budget(struct egress *e, struct egress_sandbox *sb,
                         const struct egress_audit_event *ev)
{
    if (!sb || atomic_load(&sb->removed))
        return true;
    bool deny = ev->decision && strcmp(ev->decision, "deny") == 0;
    uint32_t rate = deny ? e->cfg.audit_deny_rate : e->cfg.audit_allow_rate;
    uint32_t burst = deny ? e->cfg.audit_deny_burst : e->cfg.audit_allow_burst;
    if (rate == 0)
        return true; /* no budget: every record one by one */
    uint64_t now = al_now_ns();
    if (!ev->aggregate &&
        egress_rate_admit(deny ? &sb->audit_deny_tat : &sb->audit_allow_tat, rate, burst, now))
        return true;

    const char *phash = ev->policy ? egress_policy_hash(ev->policy) : NULL;
    uint64_t base = budget__hash(
        budget__hash(budget__hash(0xcbf29ce484222325ull, ev->type), ev->decision), phash);
    uint64_t key = budget__hash(budget__hash(budget__hash(base, ev->rule), ev->reason), ev->host);
    uint64_t mkey = budget__hash(base, "merged");
    key = key ? key : 1;
    mkey = mkey ? mkey : 1;

    struct budget__slot flush = {.key = 0};
    pthread_mutex_lock(&sb->agg_lock);
    if (!sb->audit_agg)
        sb->audit_agg = calloc(1, sizeof *sb->audit_agg);
    if (!sb->audit_agg) {
        pthread_mutex_unlock(&sb->agg_lock);
        return true; /* no memory to count it: write it rather than lose it */
    }
    struct budget__slot *v = sb->audit_agg->slot;
    struct budget__slot *s = budget__find(e, v, BUDGET_SLOTS, key, now, &flush);
    bool merged = false;
    if (!s) {
        /* More distinct groups this interval than the table holds: merge the rest. */
        merged = true;
        key = mkey;
        s = budget__find(e, v + BUDGET_SLOTS, BUDGET_MERGED, key, now, &flush);
        if (!s) {
            /* Not reachable with the record types of today (four types, three decisions);
             * should one be added, the oldest merged group is written early. */
            s = &v[BUDGET_SLOTS];
            for (size_t i = BUDGET_SLOTS + 1; i < BUDGET_SLOTS + BUDGET_MERGED; i++)
                if (v[i].start_ns < s->start_ns)
                    s = &v[i];
            flush = *s; /* (all in use: its key is not 0) */
            s->key = 0;
        }
    }
    if (s->key == 0)
        budget__open(s, key, merged, ev, now);
    budget__add(s, ev);
    pthread_mutex_unlock(&sb->agg_lock);
    atomic_fetch_add(&e->stats.audit_aggregated, 1);
    if (flush.key)
        budget__write(e, sb, &flush);
    return false;
}

void egress_audit_budget_flush(struct egress *e, struct egress_sandbox *sb, bool force)
{
    struct budget__slot due[BUDGET_SLOTS + BUDGET_MERGED];
    size_t n = 0;
    uint64_t now = al_now_ns();
    pthread_mutex_lock(&sb->agg_lock);
    if (sb->audit_agg) {
        struct budget__slot *v = sb->audit_agg->slot;
        for (size_t i = 0; i < BUDGET_SLOTS + BUDGET_MERGED; i++) {
            if (v[i].key && (force || budget__due(e, &v[i], now))) {
                due[n++] = v[i];
                v[i].key = 0;
            }
        }
    }
    pthread_mutex_unlock(&sb->agg_lock);
    /* In the order the groups opened, so that the log reads in time order. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && due[j].start_ns < due[j - 1].start_ns; j--) {
            struct budget__slot t = due[j];
            due[j] = due[j - 1];
            due[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++)
        budget__write(e, sb, &due[i]);
}

void egress_audit_budget_free(struct egress_sandbox *sb)
{
    free(sb->audit_agg);
    sb->audit_agg = NULL;
}
