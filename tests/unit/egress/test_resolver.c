/* tests/unit/egress/test_resolver: the proxy's resolver against a fake upstream on
 * 127.0.0.1 (UDP and TCP): answers, TTL clamps, the cache, merging of concurrent
 * questions, negative answers, timeouts with one retry, TCP after a truncated answer,
 * spoofed answers ignored, cancellation; and caches partitioned per sandbox (neither a hit
 * nor a merged question crosses from one cache to another). */
#include "al_test.h"
#include "egress/resolver.h"

#include <arpa/inet.h>
#include <string.h>

struct fake {
    uv_udp_t udp;
    uv_tcp_t tcp;
    uint16_t port;
    int queries[8];
    uint8_t tcpbuf[600];
    size_t tcplen;
    uv_tcp_t client;
    bool client_open;
};

enum { N_OK, N_LOW, N_NX, N_DROP, N_TC, N_SPOOF, N_FAIL, N_HIGH };
static const char *const names[] = {"ok.test", "low.test",   "nx.test",   "drop.test",
                                    "tc.test", "spoof.test", "fail.test", "high.test"};

static struct fake F;
static uv_loop_t L;

static int name_index(const char *n)
{
    for (int i = 0; i < 8; i++)
        if (strcmp(n, names[i]) == 0)
            return i;
    return -1;
}

/* Builds the fake's answer to q; returns its length (0 = no answer). */
static int fake_answer(const struct dns_query *q, bool tcp, uint8_t *out, size_t cap, int *extra)
{
    int i = name_index(q->qname);
    *extra = 0;
    if (i < 0)
        return dns_build_reply(q, &(struct dns_reply){DNS_R_NXDOMAIN, NULL, 0, 0}, 512, out, cap);
    F.queries[i]++;
    struct dns_addr a = {.family = 4, .addr = {203, 0, 113, (uint8_t)(10 + i)}};
    uint32_t ttl = i == N_LOW ? 0 : i == N_HIGH ? 86400 : 30;
    switch (i) {
    case N_DROP:
        return 0;
    case N_NX:
        return dns_build_reply(q, &(struct dns_reply){DNS_R_NXDOMAIN, NULL, 0, 0}, 512, out, cap);
    case N_FAIL:
        return dns_build_reply(q, &(struct dns_reply){DNS_R_SERVFAIL, NULL, 0, 0}, 512, out, cap);
    case N_TC:
        if (!tcp) {
            int n =
                dns_build_reply(q, &(struct dns_reply){DNS_R_NOERROR, NULL, 0, 0}, 512, out, cap);
            out[2] |= 0x02; /* TC */
            return n;
        }
        break;
    case N_SPOOF:
        *extra = 1; /* first a copy with a wrong id */
        break;
    }
    return dns_build_reply(q, &(struct dns_reply){DNS_R_NOERROR, &a, 1, ttl}, 512, out, cap);
}

static void fake_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    static char buf[2048];
    b->base = buf;
    b->len = sizeof buf;
}

static void fake_sent(uv_udp_send_t *r, int status)
{
    free(r->data);
    free(r);
}

static void fake_send(const struct sockaddr *to, const uint8_t *msg, size_t len)
{
    uv_udp_send_t *r = malloc(sizeof *r);
    r->data = malloc(len);
    memcpy(r->data, msg, len);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)len);
    uv_udp_send(r, &F.udp, &b, 1, to, fake_sent);
}

static void fake_udp_read(uv_udp_t *u, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                          unsigned flags)
{
    if (n <= 0 || !from)
        return;
    struct dns_query q;
    if (dns_parse_query((const uint8_t *)buf->base, (size_t)n, &q) != DNS_OK)
        return;
    uint8_t out[600];
    int extra;
    int len = fake_answer(&q, false, out, sizeof out, &extra);
    if (len <= 0)
        return;
    if (extra) {
        uint8_t bad[600];
        memcpy(bad, out, (size_t)len);
        bad[0] ^= 0x5a;
        fake_send(from, bad, (size_t)len);
    }
    fake_send(from, out, (size_t)len);
}

static void fake_tcp_written(uv_write_t *w, int status)
{
    free(w->data);
    free(w);
}

static void fake_tcp_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    if (n <= 0) {
        uv_close((uv_handle_t *)s, NULL);
        F.client_open = false;
        return;
    }
    memcpy(F.tcpbuf + F.tcplen, buf->base, (size_t)n);
    F.tcplen += (size_t)n;
    if (F.tcplen < 2)
        return;
    size_t ml = ((size_t)F.tcpbuf[0] << 8) | F.tcpbuf[1];
    if (F.tcplen < 2 + ml)
        return;
    struct dns_query q;
    if (dns_parse_query(F.tcpbuf + 2, ml, &q) != DNS_OK)
        return;
    F.tcplen = 0;
    uint8_t *out = malloc(602);
    int extra;
    int len = fake_answer(&q, true, out + 2, 600, &extra);
    out[0] = (uint8_t)(len >> 8);
    out[1] = (uint8_t)len;
    uv_write_t *w = malloc(sizeof *w);
    w->data = out;
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)len + 2);
    uv_write(w, s, &b, 1, fake_tcp_written);
}

static void fake_tcp_conn(uv_stream_t *srv, int status)
{
    uv_tcp_init(&L, &F.client);
    uv_accept(srv, (uv_stream_t *)&F.client);
    F.client_open = true;
    uv_read_start((uv_stream_t *)&F.client, fake_alloc, fake_tcp_read);
}

static struct egress_config C;
static struct egress_rcache *Cache, *Other; /* two sandboxes' caches */
static struct egress_resolver *R;

static void setup(void)
{
    memset(&F, 0, sizeof F);
    uv_loop_init(&L);
    /* The fake resolver needs the same port on UDP and TCP. The kernel picks a free UDP
     * port; that TCP port may be in use by some other process (tests run in parallel),
     * so try again with a fresh UDP port until both are ours. */
    struct sockaddr_in a;
    int tries = 0;
    for (;;) {
        uv_ip4_addr("127.0.0.1", 0, &a);
        uv_udp_init(&L, &F.udp);
        ck_assert_int_eq(uv_udp_bind(&F.udp, (struct sockaddr *)&a, 0), 0);
        struct sockaddr_in got;
        int l = sizeof got;
        uv_udp_getsockname(&F.udp, (struct sockaddr *)&got, &l);
        F.port = ntohs(got.sin_port);
        uv_tcp_init(&L, &F.tcp);
        a.sin_port = got.sin_port;
        if (uv_tcp_bind(&F.tcp, (struct sockaddr *)&a, 0) == 0 &&
            uv_listen((uv_stream_t *)&F.tcp, 8, fake_tcp_conn) == 0)
            break;
        ck_assert_int_lt(++tries, 50);
        uv_close((uv_handle_t *)&F.udp, NULL);
        uv_close((uv_handle_t *)&F.tcp, NULL);
        uv_run(&L, UV_RUN_NOWAIT);
    }
    uv_udp_recv_start(&F.udp, fake_alloc, fake_udp_read);
    egress_config_defaults(&C);
    C.dns_timeout_ms = 150;
    struct sockaddr_in *r = (struct sockaddr_in *)&C.resolver;
    *r = a;
    C.have_resolver = true;
    ck_assert_int_eq(egress_rcache_new(&C, &Cache), 0);
    ck_assert_int_eq(egress_rcache_new(&C, &Other), 0);
    ck_assert_int_eq(egress_resolver_new(&L, &C, &R), 0);
}

static void teardown(void)
{
    egress_resolver_close(R);
    uv_close((uv_handle_t *)&F.udp, NULL);
    uv_close((uv_handle_t *)&F.tcp, NULL);
    if (F.client_open)
        uv_close((uv_handle_t *)&F.client, NULL);
    uv_run(&L, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    egress_rcache_unref(Cache);
    egress_rcache_unref(Other);
}

struct waiter {
    struct egress_resolve_req req;
    struct egress_resolution res;
    int calls;
};

static int pending;

static void on_res(struct egress_resolve_req *req, const struct egress_resolution *res)
{
    struct waiter *w = (struct waiter *)req;
    w->res = *res;
    w->calls++;
    pending--;
}

/* Resolves and runs the loop until the answer (or 5 s). Returns 1 if it was immediate. */
static int resolve_in(struct egress_rcache *cache, struct waiter *w, const char *name,
                      uint16_t type)
{
    memset(w, 0, sizeof *w);
    w->req.cb = on_res;
    int rc = egress_resolve(R, cache, name, type, &w->req, &w->res);
    if (rc == 1)
        return 1;
    pending++;
    for (int i = 0; i < 500 && pending; i++)
        uv_run(&L, UV_RUN_ONCE);
    ck_assert_int_eq(pending, 0);
    return 0;
}

static int resolve(struct waiter *w, const char *name, uint16_t type)
{
    return resolve_in(Cache, w, name, type);
}

/* Two questions for name (type A) at once, a through cache ca and b through cb, neither
 * answered at once; runs the loop until both are answered. */
static void resolve_pair(struct egress_rcache *ca, struct waiter *a, struct egress_rcache *cb,
                         struct waiter *b, const char *name)
{
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    a->req.cb = b->req.cb = on_res;
    ck_assert_int_eq(egress_resolve(R, ca, name, DNS_T_A, &a->req, &a->res), 0);
    ck_assert_int_eq(egress_resolve(R, cb, name, DNS_T_A, &b->req, &b->res), 0);
    pending = 2;
    for (int i = 0; i < 500 && pending; i++)
        uv_run(&L, UV_RUN_ONCE);
    ck_assert_int_eq(pending, 0);
}

START_TEST(answers_and_cache)
{
    struct waiter w;
    ck_assert_int_eq(resolve(&w, "ok.test", DNS_T_A), 0);
    ck_assert_int_eq(w.res.status, 0);
    ck_assert_uint_eq(w.res.rcode, DNS_R_NOERROR);
    ck_assert_uint_eq(w.res.n, 1);
    ck_assert_uint_eq(w.res.ips[0].addr[3], 10);
    ck_assert_uint_eq(w.res.ttl, 30);
    ck_assert(!w.res.from_cache);
    /* Second time: from the cache, no upstream query. */
    ck_assert_int_eq(resolve(&w, "ok.test", DNS_T_A), 1);
    ck_assert(w.res.from_cache);
    ck_assert_int_eq(F.queries[N_OK], 1);
    /* Clamps. */
    resolve(&w, "low.test", DNS_T_A);
    ck_assert_uint_eq(w.res.ttl, C.dns_min_ttl);
    resolve(&w, "high.test", DNS_T_A);
    ck_assert_uint_eq(w.res.ttl, C.dns_max_ttl);
}
END_TEST

START_TEST(concurrent_questions_merge)
{
    struct waiter a, b;
    resolve_pair(Cache, &a, Cache, &b, "ok.test");
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(b.calls, 1);
    ck_assert_int_eq(F.queries[N_OK], 1);
}
END_TEST

/* What one sandbox asked changes nothing in what another gets: its first answer is the
 * upstream's, fresh (the same TTL, not the other's remaining one), and questions in flight
 * at once are asked once per cache. */
START_TEST(caches_are_partitioned)
{
    struct waiter a, b;
    ck_assert_int_eq(resolve_in(Cache, &a, "ok.test", DNS_T_A), 0);
    /* a hit tells its age: the remaining TTL, whole seconds rounded down */
    ck_assert_int_eq(resolve_in(Cache, &b, "ok.test", DNS_T_A), 1);
    ck_assert(b.res.from_cache);
    ck_assert_uint_lt(b.res.ttl, a.res.ttl);
    /* the other sandbox: asked upstream itself, answered exactly as the first was at first */
    ck_assert_int_eq(resolve_in(Other, &b, "ok.test", DNS_T_A), 0);
    ck_assert(!b.res.from_cache);
    ck_assert_uint_eq(b.res.ttl, a.res.ttl);
    ck_assert_uint_eq(b.res.n, a.res.n);
    ck_assert(memcmp(b.res.ips, a.res.ips, sizeof a.res.ips) == 0);
    ck_assert_int_eq(F.queries[N_OK], 2);
    /* in flight at once: one question per cache, never merged across */
    resolve_pair(Cache, &a, Other, &b, "high.test");
    ck_assert_int_eq(F.queries[N_HIGH], 2);
    ck_assert(!a.res.from_cache && !b.res.from_cache);
    /* without a cache: never cached, never merged */
    resolve_pair(NULL, &a, NULL, &b, "low.test");
    ck_assert_int_eq(F.queries[N_LOW], 2);
    ck_assert_int_eq(resolve_in(NULL, &a, "low.test", DNS_T_A), 0);
    ck_assert_int_eq(F.queries[N_LOW], 3);
}
END_TEST

START_TEST(negative_and_failures)
{
    struct waiter w;
    resolve(&w, "nx.test", DNS_T_A);
    ck_assert_int_eq(w.res.status, 0);
    ck_assert_uint_eq(w.res.rcode, DNS_R_NXDOMAIN);
    ck_assert_uint_eq(w.res.n, 0);
    ck_assert_int_eq(resolve(&w, "nx.test", DNS_T_A), 1); /* negative caching */
    resolve(&w, "fail.test", DNS_T_A);
    ck_assert_uint_eq(w.res.rcode, DNS_R_SERVFAIL);
    resolve(&w, "fail.test", DNS_T_A); /* SERVFAIL is not cached */
    ck_assert_int_eq(F.queries[N_FAIL], 2);
    uint64_t t0 = uv_now(&L);
    resolve(&w, "drop.test", DNS_T_A);
    ck_assert_int_eq(w.res.status, -ETIMEDOUT);
    ck_assert_int_eq(F.queries[N_DROP], 2); /* one retry */
    ck_assert_uint_ge(uv_now(&L) - t0, 2 * C.dns_timeout_ms - 20);
}
END_TEST

START_TEST(truncated_goes_tcp_and_spoof_is_ignored)
{
    struct waiter w;
    resolve(&w, "tc.test", DNS_T_A);
    ck_assert_int_eq(w.res.status, 0);
    ck_assert_uint_eq(w.res.n, 1);
    ck_assert_int_eq(F.queries[N_TC], 2); /* UDP, then TCP */
    struct egress_resolver_stats st;
    egress_resolver_stats(R, &st);
    ck_assert_uint_eq(st.tcp_fallbacks, 1);
    resolve(&w, "spoof.test", DNS_T_A);
    ck_assert_int_eq(w.res.status, 0);
    ck_assert_uint_eq(w.res.n, 1);
    egress_resolver_stats(R, &st);
    ck_assert_uint_ge(st.bad_answers, 1);
}
END_TEST

START_TEST(cancel)
{
    struct waiter w;
    memset(&w, 0, sizeof w);
    w.req.cb = on_res;
    ck_assert_int_eq(egress_resolve(R, Cache, "ok.test", DNS_T_A, &w.req, &w.res), 0);
    egress_resolve_cancel(&w.req);
    for (int i = 0; i < 20; i++)
        uv_run(&L, UV_RUN_NOWAIT);
    uv_sleep(50);
    for (int i = 0; i < 20; i++)
        uv_run(&L, UV_RUN_NOWAIT);
    ck_assert_int_eq(w.calls, 0);
    egress_resolve_cancel(&w.req); /* twice is fine */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("resolver");
    TCase *t = tcase_create("resolver");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, answers_and_cache);
    tcase_add_test(t, concurrent_questions_merge);
    tcase_add_test(t, caches_are_partitioned);
    tcase_add_test(t, negative_and_failures);
    tcase_add_test(t, truncated_goes_tcp_and_spoof_is_ignored);
    tcase_add_test(t, cancel);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
