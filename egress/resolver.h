/* egress/resolver: the proxy's own name resolution, through one configured upstream
 * resolver, with a cache per sandbox.
 *
 * Owns: upstream queries (UDP from a fresh random port and random id per query, answers
 * checked against the question; TCP when the answer is truncated; one retry), merging of
 * concurrent questions for the same name and the same cache on a worker, and the caches
 * (TTL clamped to [dns_min_ttl, dns_max_ttl], negative answers kept at most dns_neg_ttl).
 * It returns every address the upstream gave; whether one may be used is the caller's
 * decision (special ranges, policy).
 *
 * A cache belongs to one sandbox (egress_sandbox_rcache) and holds only what that sandbox's
 * own questions brought in, within its own bound: nothing another sandbox asks (a hit, a
 * merged question, an eviction) can change an answer a sandbox gets or how soon it gets
 * it (docs/egress.md, "DNS"). Caches are shared by all workers and reference-counted (a
 * query in flight keeps its cache).
 */
#ifndef AIRLOCK_EGRESS_RESOLVER_H
#define AIRLOCK_EGRESS_RESOLVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "decide.h"
#include "dns_wire.h"
#include "egress.h"

struct egress_resolution {
    int status;    /* 0 = the upstream answered; < 0 = no usable answer
                                (-ETIMEDOUT, -EPROTO for a malformed answer, -ECONNREFUSED) */
    uint8_t rcode; /* when status == 0 */
    size_t n;
    struct egress_ip ips[DNS_MAX_ANSWERS];
    uint32_t ttl; /* seconds, already clamped */
    bool from_cache;
};

struct egress_rcache;

#define EGRESS_RCACHE_SLOTS 256 /* names (and types) one cache holds at most */

int egress_rcache_new(const struct egress_config *cfg, struct egress_rcache **out);
struct egress_rcache *egress_rcache_ref(struct egress_rcache *c);
void egress_rcache_unref(struct egress_rcache *c); /* NULL is fine */
/* A fresh cached answer for (name, qtype)? */
bool egress_rcache_get(struct egress_rcache *c, const char *name, uint16_t qtype,
                       struct egress_resolution *out);
void egress_rcache_put(struct egress_rcache *c, const char *name, uint16_t qtype,
                       const struct egress_resolution *r);
void egress_rcache_clear(struct egress_rcache *c);

struct egress_resolver;
struct egress_resolve_req;
typedef void (*egress_resolve_cb)(struct egress_resolve_req *req,
                                  const struct egress_resolution *res);

/* Embedded in the caller's object; valid until the callback has run or the request was
 * cancelled. */
struct egress_resolve_req {
    egress_resolve_cb cb;
    void *data;
    struct egress_resolve_req *next; /* private */
    struct egress__rquery *q;        /* private */
};

int egress_resolver_new(uv_loop_t *loop, const struct egress_config *cfg,
                        struct egress_resolver **out);
/* Closes sockets and fails every pending request with -ECANCELED; frees itself once the
 * loop has closed its handles. */
void egress_resolver_close(struct egress_resolver *r);

/* Resolves name (canonical, no trailing dot) for qtype (A or AAAA) through cache (the
 * asking sandbox's; NULL: no cache, and the question merges with no other). Returns 1 with
 * *out filled when the cache answers at once; otherwise 0, and req->cb is called later
 * from the loop (never from inside this call). */
int egress_resolve(struct egress_resolver *r, struct egress_rcache *cache, const char *name,
                   uint16_t qtype, struct egress_resolve_req *req, struct egress_resolution *out);
/* The callback will not be called. Safe to call once the callback has run (no-op). */
void egress_resolve_cancel(struct egress_resolve_req *req);

/* Counters for stats. */
struct egress_resolver_stats {
    uint64_t queries, cache_hits, timeouts, tcp_fallbacks, bad_answers;
};
void egress_resolver_stats(const struct egress_resolver *r, struct egress_resolver_stats *out);

#endif
