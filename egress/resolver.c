/* egress/resolver: see resolver.h. */
#include "resolver.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "common/log.h"
#include "common/util.h"

/* Upstream queries in flight per worker; beyond, new questions fail at once (SERVFAIL to a
 * sandbox) instead of opening more sockets. */
#define RQ_MAX_INFLIGHT 512

/* ---- cache -------------------------------------------------------------------------- */

#define RC_SLOTS EGRESS_RCACHE_SLOTS
#define RC_PROBE 16

struct rc__entry {
    uint64_t expire_ns;
    uint16_t qtype;
    struct egress_resolution res;
    char name[];
};

struct egress_rcache {
    atomic_int refs;
    pthread_mutex_t lock;
    struct rc__entry **slots;
    uint32_t min_ttl, max_ttl, neg_ttl;
};

static size_t rc__home(const char *name, uint16_t qtype)
{
    uint64_t h = 0xcbf29ce484222325ull ^ qtype;
    for (const char *p = name; *p; p++) {
        h ^= (uint8_t)*p;
        h *= 0x100000001b3ull;
    }
    return (size_t)(h % RC_SLOTS);
}

int egress_rcache_new(const struct egress_config *cfg, struct egress_rcache **out)
{
    struct egress_rcache *c = calloc(1, sizeof *c);
    if (!c || !(c->slots = calloc(RC_SLOTS, sizeof *c->slots))) {
        free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    atomic_init(&c->refs, 1);
    c->min_ttl = cfg->dns_min_ttl;
    c->max_ttl = cfg->dns_max_ttl;
    c->neg_ttl = cfg->dns_neg_ttl;
    *out = c;
    return 0;
}

void egress_rcache_clear(struct egress_rcache *c)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < RC_SLOTS; i++) {
        free(c->slots[i]);
        c->slots[i] = NULL;
    }
    pthread_mutex_unlock(&c->lock);
}

struct egress_rcache *egress_rcache_ref(struct egress_rcache *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void egress_rcache_unref(struct egress_rcache *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    egress_rcache_clear(c);
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    free(c);
}

bool egress_rcache_get(struct egress_rcache *c, const char *name, uint16_t qtype,
                       struct egress_resolution *out)
{
    uint64_t now = al_now_ns();
    bool hit = false;
    size_t home = rc__home(name, qtype);
    pthread_mutex_lock(&c->lock);
    for (size_t k = 0; k < RC_PROBE; k++) {
        struct rc__entry *e = c->slots[(home + k) % RC_SLOTS];
        if (e && e->qtype == qtype && strcmp(e->name, name) == 0) {
            if (e->expire_ns > now) {
                *out = e->res;
                uint64_t left = (e->expire_ns - now) / 1000000000ull;
                out->ttl = left < c->min_ttl ? c->min_ttl : (uint32_t)left;
                out->from_cache = true;
                hit = true;
            }
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return hit;
}

void egress_rcache_put(struct egress_rcache *c, const char *name, uint16_t qtype,
                       const struct egress_resolution *r)
{
    if (r->status != 0 || r->ttl == 0)
        return;
    size_t nl = strlen(name);
    struct rc__entry *n = malloc(sizeof *n + nl + 1);
    if (!n)
        return;
    uint64_t now = al_now_ns();
    n->expire_ns = now + (uint64_t)r->ttl * 1000000000ull;
    n->qtype = qtype;
    n->res = *r;
    n->res.from_cache = false;
    memcpy(n->name, name, nl + 1);
    size_t home = rc__home(name, qtype);
    pthread_mutex_lock(&c->lock);
    struct rc__entry **victim = NULL;
    for (size_t k = 0; k < RC_PROBE; k++) {
        struct rc__entry **s = &c->slots[(home + k) % RC_SLOTS];
        if (*s && (*s)->qtype == qtype && strcmp((*s)->name, name) == 0) {
            victim = s;
            break;
        }
        if (!*s || (*s)->expire_ns <= now) {
            if (!victim || (*victim && (*victim)->expire_ns > now))
                victim = s;
        } else if (!victim || (*victim && (*s)->expire_ns < (*victim)->expire_ns)) {
            victim = s;
        }
    }
    free(*victim);
    *victim = n;
    pthread_mutex_unlock(&c->lock);
}

/* ---- upstream queries ----------------------------------------------------------------- */

struct egress__rquery {
    struct egress_resolver *r;
    struct egress_rcache *cache; /* referenced; NULL: none */
    struct egress__rquery *next;
    char name[DNS_MAX_TEXT + 1];
    uint16_t qtype;
    uint8_t qwire[DNS_MAX_NAME];
    size_t qwire_len;
    uint16_t id;
    int attempt;
    bool done;
    int open_handles;
    uv_udp_t udp;
    uint8_t msg[512];
    size_t msg_len;
    uv_timer_t timer;
    /* TCP fallback */
    uv_tcp_t tcp;
    bool tcp_used;
    uv_connect_t connect_req;
    uv_write_t write_req;
    uint8_t tcp_out[2 + 512];
    uint8_t *tcp_in;
    size_t tcp_in_len;
    uint8_t udp_in[DNS_MAX_UDP];
    struct egress_resolve_req *waiters;
};

struct egress_resolver {
    uv_loop_t *loop;
    const struct egress_config *cfg;
    struct egress__rquery *queries;
    bool closing;
    size_t live;
    struct egress_resolver_stats stats;
};

int egress_resolver_new(uv_loop_t *loop, const struct egress_config *cfg,
                        struct egress_resolver **out)
{
    struct egress_resolver *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->loop = loop;
    r->cfg = cfg;
    *out = r;
    return 0;
}

void egress_resolver_stats(const struct egress_resolver *r, struct egress_resolver_stats *out)
{
    *out = r->stats;
}

static void rq__maybe_free_resolver(struct egress_resolver *r)
{
    if (r->closing && r->live == 0)
        free(r);
}

static void rq__on_handle_closed(uv_handle_t *h)
{
    struct egress__rquery *q = h->data;
    if (--q->open_handles > 0)
        return;
    struct egress_resolver *r = q->r;
    egress_rcache_unref(q->cache);
    free(q->tcp_in);
    free(q);
    r->live--;
    rq__maybe_free_resolver(r);
}

static void rq__unlink(struct egress__rquery *q)
{
    struct egress__rquery **pp = &q->r->queries;
    while (*pp && *pp != q)
        pp = &(*pp)->next;
    if (*pp)
        *pp = q->next;
}

/* Delivers res to every waiter and tears the query down. */
static void rq__finish(struct egress__rquery *q, const struct egress_resolution *res)
{
    if (q->done)
        return;
    q->done = true;
    rq__unlink(q);
    if (res->status == 0 && q->cache)
        egress_rcache_put(q->cache, q->name, q->qtype, res);
    struct egress_resolve_req *w = q->waiters;
    q->waiters = NULL;
    while (w) {
        struct egress_resolve_req *next = w->next;
        w->q = NULL;
        w->next = NULL;
        w->cb(w, res);
        w = next;
    }
    uv_close((uv_handle_t *)&q->timer, rq__on_handle_closed);
    uv_close((uv_handle_t *)&q->udp, rq__on_handle_closed);
    if (q->tcp_used)
        uv_close((uv_handle_t *)&q->tcp, rq__on_handle_closed);
}

static void rq__fail(struct egress__rquery *q, int status)
{
    struct egress_resolution res = {.status = status};
    rq__finish(q, &res);
}

static void rq__answer(struct egress__rquery *q, const uint8_t *msg, size_t len, bool over_tcp);

static uint32_t rq__clamp(const struct egress_config *cfg, uint32_t ttl)
{
    if (ttl < cfg->dns_min_ttl)
        ttl = cfg->dns_min_ttl;
    if (ttl > cfg->dns_max_ttl)
        ttl = cfg->dns_max_ttl;
    return ttl ? ttl : 1;
}

/* TCP fallback. */
static void rq__tcp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct egress__rquery *q = h->data;
    if (!q->tcp_in)
        q->tcp_in = malloc(2 + DNS_MAX_TCP);
    if (!q->tcp_in) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = (char *)q->tcp_in + q->tcp_in_len;
    buf->len = 2 + DNS_MAX_TCP - q->tcp_in_len;
}

static void rq__tcp_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct egress__rquery *q = s->data;
    if (q->done)
        return;
    if (n < 0 || !q->tcp_in) {
        q->r->stats.bad_answers++;
        rq__fail(q, n == UV_EOF ? -EPROTO : -ECONNRESET);
        return;
    }
    q->tcp_in_len += (size_t)n;
    if (q->tcp_in_len < 2)
        return;
    size_t want = ((size_t)q->tcp_in[0] << 8) | q->tcp_in[1];
    if (q->tcp_in_len < 2 + want)
        return;
    uv_read_stop(s);
    rq__answer(q, q->tcp_in + 2, want, true);
}

static void rq__tcp_written(uv_write_t *w, int status)
{
    struct egress__rquery *q = w->data;
    if (status < 0 && !q->done)
        rq__fail(q, -ECONNRESET);
}

static void rq__tcp_connected(uv_connect_t *c, int status)
{
    struct egress__rquery *q = c->data;
    if (q->done)
        return;
    if (status < 0) {
        rq__fail(q, -ECONNREFUSED);
        return;
    }
    q->tcp_out[0] = (uint8_t)(q->msg_len >> 8);
    q->tcp_out[1] = (uint8_t)q->msg_len;
    memcpy(q->tcp_out + 2, q->msg, q->msg_len);
    uv_buf_t b = uv_buf_init((char *)q->tcp_out, (unsigned)(q->msg_len + 2));
    q->write_req.data = q;
    if (uv_write(&q->write_req, (uv_stream_t *)&q->tcp, &b, 1, rq__tcp_written) < 0 ||
        uv_read_start((uv_stream_t *)&q->tcp, rq__tcp_alloc, rq__tcp_read) < 0)
        rq__fail(q, -ECONNRESET);
}

static void rq__start_tcp(struct egress__rquery *q)
{
    q->r->stats.tcp_fallbacks++;
    uv_udp_recv_stop(&q->udp);
    if (uv_tcp_init(q->r->loop, &q->tcp) < 0) {
        rq__fail(q, -ENOMEM);
        return;
    }
    q->tcp.data = q;
    q->tcp_used = true;
    q->open_handles++;
    q->connect_req.data = q;
    if (uv_tcp_connect(&q->connect_req, &q->tcp, (const struct sockaddr *)&q->r->cfg->resolver,
                       rq__tcp_connected) < 0)
        rq__fail(q, -ECONNREFUSED);
    uv_timer_again(&q->timer);
}

static void rq__answer(struct egress__rquery *q, const uint8_t *msg, size_t len, bool over_tcp)
{
    struct dns_answer a;
    int rc = dns_parse_answer(msg, len,
                              &(struct dns_question){q->id, q->qwire, q->qwire_len, q->qtype}, &a);
    if (rc == DNS_E_MISMATCH && !over_tcp) {
        q->r->stats.bad_answers++;
        return; /* not ours (or spoofed): keep waiting */
    }
    if (rc < 0) {
        q->r->stats.bad_answers++;
        rq__fail(q, -EPROTO);
        return;
    }
    if (a.truncated) {
        if (over_tcp) {
            rq__fail(q, -EPROTO);
            return;
        }
        rq__start_tcp(q);
        return;
    }
    struct egress_resolution res = {.status = 0, .rcode = a.rcode};
    if (a.rcode == DNS_R_NOERROR || a.rcode == DNS_R_NXDOMAIN) {
        for (size_t i = 0; i < a.n_addrs; i++) {
            res.ips[res.n].family = a.addrs[i].family;
            memcpy(res.ips[res.n].addr, a.addrs[i].addr, 16);
            res.n++;
        }
        if (res.n) {
            res.ttl = rq__clamp(q->r->cfg, a.min_ttl);
        } else {
            uint32_t neg = a.neg_ttl ? a.neg_ttl : q->r->cfg->dns_neg_ttl;
            res.ttl = neg > q->r->cfg->dns_neg_ttl ? q->r->cfg->dns_neg_ttl : neg;
            if (res.ttl == 0)
                res.ttl = 1;
        }
    } else {
        res.ttl = 0; /* SERVFAIL, REFUSED...: not cached */
    }
    rq__finish(q, &res);
}

static void rq__udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct egress__rquery *q = h->data;
    buf->base = (char *)q->udp_in;
    buf->len = sizeof q->udp_in;
}

static void rq__udp_read(uv_udp_t *u, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                         unsigned flags)
{
    struct egress__rquery *q = u->data;
    if (q->done || n <= 0 || (flags & UV_UDP_PARTIAL))
        return;
    rq__answer(q, (const uint8_t *)buf->base, (size_t)n, false);
}

static int rq__send(struct egress__rquery *q)
{
    randombytes_buf(&q->id, sizeof q->id);
    int n = dns_build_query(&(struct dns_question){q->id, q->qwire, q->qwire_len, q->qtype}, q->msg,
                            sizeof q->msg);
    if (n < 0)
        return -EINVAL;
    q->msg_len = (size_t)n;
    uv_buf_t b = uv_buf_init((char *)q->msg, (unsigned)n);
    q->r->stats.queries++;
    int rc = uv_udp_try_send(&q->udp, &b, 1, NULL);
    /* A failed send (EAGAIN, ECONNREFUSED from an earlier ICMP) shows up as a timeout. */
    return rc == UV_EINVAL || rc == UV_ENOTSOCK ? rc : 0;
}

static void rq__timeout(uv_timer_t *t)
{
    struct egress__rquery *q = t->data;
    if (q->done)
        return;
    if (++q->attempt >= 2 || q->tcp_used) {
        q->r->stats.timeouts++;
        rq__fail(q, -ETIMEDOUT);
        return;
    }
    if (rq__send(q) < 0)
        rq__fail(q, -EIO);
}

static struct egress__rquery *rq__start(struct egress_resolver *r, struct egress_rcache *cache,
                                        const char *name, uint16_t qtype)
{
    struct egress__rquery *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->r = r;
    q->cache = egress_rcache_ref(cache);
    snprintf(q->name, sizeof q->name, "%s", name);
    q->qtype = qtype;
    int wl = dns_name_to_wire(name, q->qwire, sizeof q->qwire);
    if (wl < 0) {
        egress_rcache_unref(q->cache);
        free(q);
        return NULL;
    }
    q->qwire_len = (size_t)wl;
    uv_timer_init(r->loop, &q->timer);
    q->timer.data = q;
    uv_udp_init(r->loop, &q->udp);
    q->udp.data = q;
    q->open_handles = 2;
    r->live++;
    q->next = r->queries;
    r->queries = q;
    int rc = uv_udp_connect(&q->udp, (const struct sockaddr *)&r->cfg->resolver);
    if (rc == 0)
        rc = uv_udp_recv_start(&q->udp, rq__udp_alloc, rq__udp_read);
    if (rc == 0)
        rc = rq__send(q);
    if (rc == 0)
        rc = uv_timer_start(&q->timer, rq__timeout, r->cfg->dns_timeout_ms, r->cfg->dns_timeout_ms);
    if (rc < 0) {
        al_warn("resolver: cannot query %s: %s", name, uv_strerror(rc));
        q->done = true;
        rq__unlink(q);
        uv_close((uv_handle_t *)&q->timer, rq__on_handle_closed);
        uv_close((uv_handle_t *)&q->udp, rq__on_handle_closed);
        return NULL;
    }
    return q;
}

int egress_resolve(struct egress_resolver *r, struct egress_rcache *cache, const char *name,
                   uint16_t qtype, struct egress_resolve_req *req, struct egress_resolution *out)
{
    req->next = NULL;
    req->q = NULL;
    if (cache && egress_rcache_get(cache, name, qtype, out)) {
        r->stats.cache_hits++;
        return 1;
    }
    /* Only the same cache's question: another sandbox's in flight would answer this one
     * sooner than its own would, which tells it what the other asked. */
    struct egress__rquery *q = NULL;
    for (struct egress__rquery *o = cache ? r->queries : NULL; o && !q; o = o->next)
        if (!o->done && o->cache == cache && o->qtype == qtype && strcmp(o->name, name) == 0)
            q = o;
    if (!q && !r->closing && r->live < RQ_MAX_INFLIGHT)
        q = rq__start(r, cache, name, qtype);
    if (!q) {
        memset(out, 0, sizeof *out);
        out->status = r->closing ? -ECANCELED : r->live >= RQ_MAX_INFLIGHT ? -EBUSY : -EIO;
        return 1;
    }
    req->q = q;
    req->next = q->waiters;
    q->waiters = req;
    return 0;
}

void egress_resolve_cancel(struct egress_resolve_req *req)
{
    struct egress__rquery *q = req->q;
    if (!q)
        return;
    struct egress_resolve_req **pp = &q->waiters;
    while (*pp && *pp != req)
        pp = &(*pp)->next;
    if (*pp)
        *pp = req->next;
    req->q = NULL;
    req->next = NULL;
}

void egress_resolver_close(struct egress_resolver *r)
{
    r->closing = true;
    while (r->queries)
        rq__fail(r->queries, -ECANCELED);
    rq__maybe_free_resolver(r);
}
