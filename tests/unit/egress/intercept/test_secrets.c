/* tests/unit/egress/intercept/test_secrets: the vault client and cache, against a fake
 * airlock-vault (fetch, changes long-poll, failures) on a unix socket in this process, and against
 * the real airlock-vault daemon when it is built. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "al_test.h"
#include "common/http.h"
#include "common/util.h"
#include "common/cleanup.h"
#include "egress/intercept/secrets.h"

/* ---- a fake vault ----------------------------------------------------------------------- */

struct fsecret {
    char name[64];
    char value[256];
    int version;
    const char *hosts[4];
    size_t n_hosts;
};

static struct {
    uv_loop_t *loop;
    struct al_http_server *srv;
    char sock[256];
    char dir[256];
    struct fsecret s[8];
    size_t n;
    uint64_t gen;
    int fetches;
    int changes_status; /* 0 = normal; else answer this status to /v1/changes */
    int fetch_delay_ms; /* answer fetches late */
    int max_age_ms;
    bool full_next;           /* next changes answer says full */
    uint64_t fetch_gen_minus; /* answer fetches with a generation this much older */
    struct al_http_req *parked[8];
    uint64_t parked_since[8];
    size_t n_parked;
    char last_sandbox[64], last_host[256], last_rule[64];
    uv_timer_t delay_timer;
    struct al_http_req *delayed;
} V;

static struct fsecret *fv_find(const char *name)
{
    for (size_t i = 0; i < V.n; i++)
        if (strcmp(V.s[i].name, name) == 0)
            return &V.s[i];
    return NULL;
}

static void fv_add(const char *name, const char *value, const char *host)
{
    struct fsecret *s = &V.s[V.n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->value, sizeof s->value, "%s", value);
    s->version = 1;
    if (host)
        s->hosts[s->n_hosts++] = host;
    V.gen++;
}

static bool fv_host_ok(struct fsecret *s, const char *host)
{
    if (!s->n_hosts)
        return true;
    for (size_t i = 0; i < s->n_hosts; i++)
        if (strcmp(s->hosts[i], host) == 0)
            return true;
    return false;
}

static void fv_answer_fetch(struct al_http_req *req)
{
    json_t *b = json_loadb(req->body.data, req->body.len, 0, NULL);
    const char *name = json_string_value(json_object_get(b, "name"));
    const char *host = json_string_value(json_object_get(b, "host"));
    snprintf(V.last_sandbox, sizeof V.last_sandbox, "%s",
             json_string_value(json_object_get(b, "sandbox")) ?: "");
    snprintf(V.last_rule, sizeof V.last_rule, "%s",
             json_string_value(json_object_get(b, "rule")) ?: "");
    snprintf(V.last_host, sizeof V.last_host, "%s", host ?: "");
    struct fsecret *s = name ? fv_find(name) : NULL;
    V.fetches++;
    if (!s) {
        json_decref(b);
        al_http_reply_error(req, 404, "no secret");
        return;
    }
    if (!host || !fv_host_ok(s, host)) {
        json_decref(b);
        al_http_reply_error(req, 403, "host not bound");
        return;
    }
    json_t *hosts = json_array();
    for (size_t i = 0; i < s->n_hosts; i++)
        json_array_append_new(hosts, json_string(s->hosts[i]));
    char b64[512], sid[40];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)s->value, strlen(s->value),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(sid, sizeof sid, "b2k:%032x", (unsigned)(s->version * 7919 + (int)strlen(s->value)));
    json_t *o = json_pack("{s:s,s:i,s:I,s:s,s:i,s:o,s:s}", "name", s->name, "version", s->version,
                          "generation", (json_int_t)(V.gen - V.fetch_gen_minus), "secret_id", sid,
                          "max_age_ms", V.max_age_ms ? V.max_age_ms : 60000, "bound_hosts", hosts,
                          "value_b64", b64);
    json_decref(b);
    al_http_reply_json(req, 200, o);
}

static void fv_delay_cb(uv_timer_t *t)
{
    (void)t;
    if (V.delayed)
        fv_answer_fetch(V.delayed);
    V.delayed = NULL;
}

static void fv_body_done(struct al_http_req *req, int err)
{
    if (err < 0)
        return;
    if (V.fetch_delay_ms) {
        V.delayed = req;
        uv_timer_start(&V.delay_timer, fv_delay_cb, (uint64_t)V.fetch_delay_ms, 0);
        return;
    }
    fv_answer_fetch(req);
}

static json_t *fv_changes_since(uint64_t since, bool *any)
{
    json_t *names = json_array();
    for (size_t i = 0; i < V.n; i++)
        if ((uint64_t)V.s[i].version > 0 && since < V.gen)
            json_array_append_new(names, json_string(V.s[i].name));
    *any = since < V.gen;
    bool full = V.full_next;
    V.full_next = false;
    if (full)
        json_array_clear(names);
    return json_pack("{s:I,s:I,s:b,s:o}", "since", (json_int_t)since, "generation",
                     (json_int_t)V.gen, "full", full, "changed", names);
}

static void fv_parked_closed(struct al_http_req *req)
{
    for (size_t i = 0; i < V.n_parked; i++)
        if (V.parked[i] == req) {
            V.parked[i] = V.parked[--V.n_parked];
            V.parked_since[i] = V.parked_since[V.n_parked];
            return;
        }
}

/* Something changed: answer the parked long-polls. */
static void fv_notify(void)
{
    while (V.n_parked) {
        struct al_http_req *r = V.parked[--V.n_parked];
        bool any;
        al_http_reply_json(r, 200, fv_changes_since(V.parked_since[V.n_parked], &any));
    }
}

static void fv_rotate(const char *name, const char *value)
{
    struct fsecret *s = fv_find(name);
    if (!s)
        ck_abort_msg("no fake secret %s", name);
    snprintf(s->value, sizeof s->value, "%s", value);
    s->version++;
    V.gen++;
    fv_notify();
}

static void fv_on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    if (strcmp(req->path, "/v1/fetch") == 0) {
        al_http_req_read_body(req, 0, fv_body_done);
        return;
    }
    if (strcmp(req->path, "/v1/changes") == 0) {
        if (V.changes_status) {
            al_http_reply_error(req, V.changes_status, "changes broken");
            return;
        }
        char since_s[32] = "0", wait_s[32] = "0";
        al_http_query_get(req->query, "since", since_s, sizeof since_s);
        al_http_query_get(req->query, "wait_ms", wait_s, sizeof wait_s);
        uint64_t since = strtoull(since_s, NULL, 10);
        bool any;
        json_t *a = fv_changes_since(since, &any);
        if (any || atoi(wait_s) == 0 || V.n_parked == 8 || a == NULL) {
            al_http_reply_json(req, 200, a);
            return;
        }
        json_decref(a);
        V.parked[V.n_parked] = req;
        V.parked_since[V.n_parked++] = since;
        al_http_req_on_close(req, fv_parked_closed);
        return;
    }
    al_http_reply_error(req, 404, "no such endpoint");
}

static void fv_start(void)
{
    memset(&V, 0, sizeof V);
    V.loop = calloc(1, sizeof *V.loop);
    uv_loop_init(V.loop);
    uv_timer_init(V.loop, &V.delay_timer);
    al_test_tmpdir(V.dir, sizeof V.dir, "icpt-sec");
    snprintf(V.sock, sizeof V.sock, "%s/vault.sock", V.dir);
    struct al_http_server_opts o = {.on_request = fv_on_request};
    ck_assert_int_eq(al_http_server_new(V.loop, &o, &V.srv), 0);
    ck_assert_int_eq(al_http_server_listen_unix(V.srv, V.sock, 0600, NULL), 0);
}

static void fv_stop_server(void)
{
    if (V.srv) {
        al_http_server_close(V.srv, NULL, NULL);
        V.srv = NULL;
    }
}

/* Runs the loop until cond() or ms elapse. */
static bool run_until(bool (*cond)(void), int ms)
{
    uint64_t end = al_now_ns() + (uint64_t)ms * 1000000ull;
    while (al_now_ns() < end) {
        if (cond && cond())
            return true;
        uv_run(V.loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    return cond ? cond() : true;
}

static struct intercept_secrets *S;
static struct intercept_fetcher *F;

static bool feed_ok(void)
{
    return intercept_secrets_feed_ok(S);
}

static void client_start(uint32_t fetch_timeout)
{
    struct intercept_secrets_opts o = {
        .socket = V.sock, .fetch_timeout_ms = fetch_timeout, .poll_wait_ms = 2000, .retry_ms = 50};
    struct al_error err = {0};
    ck_assert_msg(intercept_secrets_new(&o, &S, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(intercept_secrets_start(S, V.loop), 0);
    ck_assert_int_eq(intercept_fetcher_new(S, V.loop, &F), 0);
    ck_assert(run_until(feed_ok, 3000));
}

static void client_stop(void)
{
    intercept_fetcher_close(F);
    intercept_secrets_stop(S, NULL, NULL);
    run_until(NULL, 50);
    intercept_secrets_free(S);
    fv_stop_server();
    uv_close((uv_handle_t *)&V.delay_timer, NULL);
    run_until(NULL, 50);
    uv_run(V.loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(V.loop), 0);
    free(V.loop);
    ck_assert_int_eq(al_test_rmtree(V.dir), 0);
}

/* A fetch and its outcome. */
struct got {
    struct intercept_fetch req;
    bool done;
    int err;
    const char *reason;
    struct intercept_secret *sec;
};

static void got_cb(struct intercept_fetch *req, struct intercept_secret *sec, int err,
                   const char *reason)
{
    struct got *g = (struct got *)req;
    g->done = true;
    g->err = err;
    g->reason = reason;
    g->sec = sec;
}

static struct got *G_wait;
static bool got_done(void)
{
    return G_wait->done;
}

/* Starts a fetch; returns 1 (hit), 0 (pending) or < 0. */
static int fetch(struct got *g, const char *name, const char *sandbox, const char *host)
{
    memset(g, 0, sizeof *g);
    g->req.cb = got_cb;
    struct intercept_fetch_args a = {
        .name = name, .sandbox = sandbox, .rule = "r1", .host = host, .request_id = "req-1"};
    struct intercept_secret *out = NULL;
    const char *reason = NULL;
    int r = intercept_fetch_start(F, &a, &g->req, &out, &reason);
    if (r == 1) {
        g->done = true;
        g->sec = out;
    } else if (r < 0) {
        g->done = true;
        g->err = r;
        g->reason = reason;
    }
    return r;
}

static void wait_got(struct got *g)
{
    G_wait = g;
    ck_assert_msg(run_until(got_done, 5000), "fetch did not complete");
}

static const char TOKEN[] = "ghp_FakeTokenValue0123456789abcdefABCDEF";

START_TEST(fetch_then_hit)
{
    fv_start();
    fv_add("github/token", TOKEN, "api.github.test");
    client_start(0);
    struct got g;
    ck_assert_int_eq(fetch(&g, "github/token", "sb-1", "api.github.test"), 0);
    wait_got(&g);
    ck_assert_int_eq(g.err, 0);
    ck_assert_ptr_nonnull(g.sec);
    ck_assert_uint_eq(g.sec->len, strlen(TOKEN));
    ck_assert(memcmp(g.sec->value, TOKEN, g.sec->len) == 0);
    ck_assert_str_eq(g.sec->name, "github/token");
    ck_assert_uint_eq(g.sec->version, 1);
    ck_assert_int_eq(strncmp(g.sec->secret_id, "b2k:", 4), 0);
    ck_assert_uint_eq(g.sec->n_bound, 1);
    ck_assert(intercept_secret_bound_to(g.sec, "api.github.test"));
    ck_assert(!intercept_secret_bound_to(g.sec, "evil.test"));
    ck_assert_ptr_nonnull(g.sec->matcher);
    ck_assert_str_eq(V.last_sandbox, "sb-1");
    ck_assert_str_eq(V.last_host, "api.github.test");
    ck_assert_str_eq(V.last_rule, "r1");
    struct got h;
    ck_assert_int_eq(fetch(&h, "github/token", "sb-2", "api.github.test"), 1);
    ck_assert_ptr_eq(h.sec, g.sec);
    ck_assert_int_eq(V.fetches, 1);
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.cached, 1);
    intercept_secret_unref(g.sec);
    intercept_secret_unref(h.sec);
    client_stop();
}
END_TEST

START_TEST(coalescing_per_context)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    client_start(0);
    struct got a, b, c;
    ck_assert_int_eq(fetch(&a, "github/token", "sb-1", "api.github.test"), 0);
    ck_assert_int_eq(fetch(&b, "github/token", "sb-1", "api.github.test"), 0);
    ck_assert_int_eq(fetch(&c, "github/token", "sb-2", "api.github.test"), 0);
    wait_got(&a);
    wait_got(&b);
    wait_got(&c);
    ck_assert_int_eq(V.fetches, 2); /* a and b shared one; c's sandbox got its own */
    ck_assert_ptr_nonnull(a.sec);
    ck_assert_ptr_nonnull(b.sec);
    ck_assert_ptr_nonnull(c.sec);
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_eq(st.coalesced, 1);
    ck_assert(intercept_secret_bound_to(a.sec, "anything.test")); /* no bound hosts */
    intercept_secret_unref(a.sec);
    intercept_secret_unref(b.sec);
    intercept_secret_unref(c.sec);
    client_stop();
}
END_TEST

static bool cache_empty(void)
{
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    return st.cached == 0;
}

START_TEST(rotation_invalidates)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    client_start(0);
    struct got g;
    fetch(&g, "github/token", "sb", "h.test");
    wait_got(&g);
    ck_assert_int_eq(g.err, 0);
    run_until(NULL, 100); /* the long-poll is parked now */
    struct intercept_secrets_stats st0, st1;
    intercept_secrets_get_stats(S, &st0);
    fv_rotate("github/token", "ghp_RotatedValue9999999999999999999999999");
    ck_assert(run_until(cache_empty, 30000));
    /* Dropped by name through the change feed (the vault's answer to the parked long-poll),
     * not by a flush or an expiry: what says it was pushed, whatever the time it took. */
    intercept_secrets_get_stats(S, &st1);
    ck_assert_uint_eq(st1.invalidated, st0.invalidated + 1);
    ck_assert_uint_eq(st1.full_flushes, st0.full_flushes);
    ck_assert_uint_gt(st1.feed_answers, st0.feed_answers);
    /* An old reference stays valid for whoever holds it. */
    ck_assert(memcmp(g.sec->value, TOKEN, g.sec->len) == 0);
    struct got h;
    ck_assert_int_eq(fetch(&h, "github/token", "sb", "h.test"), 0);
    wait_got(&h);
    ck_assert_uint_eq(h.sec->version, 2);
    ck_assert(memcmp(h.sec->value, "ghp_Rotated", 11) == 0);
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_ge(st.invalidated, 1);
    intercept_secret_unref(g.sec);
    intercept_secret_unref(h.sec);
    client_stop();
}
END_TEST

START_TEST(full_answer_flushes)
{
    fv_start();
    fv_add("a/one", "value-one-0123456789", NULL);
    fv_add("b/two", "value-two-0123456789", NULL);
    client_start(0);
    struct got a, b;
    fetch(&a, "a/one", "sb", "h.test");
    fetch(&b, "b/two", "sb", "h.test");
    wait_got(&a);
    wait_got(&b);
    ck_assert(!cache_empty());
    run_until(NULL, 100);
    V.full_next = true;
    V.gen++;
    fv_notify();
    ck_assert(run_until(cache_empty, 2000));
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_eq(st.full_flushes, 1);
    intercept_secret_unref(a.sec);
    intercept_secret_unref(b.sec);
    client_stop();
}
END_TEST

static bool feed_down(void)
{
    return !intercept_secrets_feed_ok(S);
}

START_TEST(feed_down_fails_closed)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    fv_add("other/x", "other-value-0123456", NULL);
    V.max_age_ms = 400;
    client_start(0);
    struct got g;
    fetch(&g, "github/token", "sb", "h.test");
    wait_got(&g);
    ck_assert_int_eq(g.err, 0);
    /* The feed breaks (the parked poll is answered with an error). */
    V.changes_status = 500;
    V.gen++;
    fv_notify(); /* answers the parked poll normally once... */
    ck_assert(run_until(feed_down, 3000));
    /* Cached entries still serve until they expire; new fetches fail at once. */
    struct got h, k;
    ck_assert_int_eq(fetch(&h, "other/x", "sb", "h.test"), -ENOTCONN);
    ck_assert_str_eq(h.reason, "vault_feed_down");
    usleep(450000);
    ck_assert_int_eq(fetch(&k, "github/token", "sb", "h.test"), -ENOTCONN); /* expired */
    /* The feed comes back: fetches work again. */
    V.changes_status = 0;
    ck_assert(run_until(feed_ok, 8000));
    struct got m;
    ck_assert_int_eq(fetch(&m, "github/token", "sb", "h.test"), 0);
    wait_got(&m);
    ck_assert_int_eq(m.err, 0);
    intercept_secret_unref(g.sec);
    intercept_secret_unref(m.sec);
    client_stop();
}
END_TEST

START_TEST(errors_are_reasons)
{
    fv_start();
    fv_add("github/token", TOKEN, "api.github.test");
    client_start(300);
    struct got g;
    fetch(&g, "missing/one", "sb", "api.github.test");
    wait_got(&g);
    ck_assert_int_eq(g.err, -ENOENT);
    ck_assert_str_eq(g.reason, "secret_not_found");
    fetch(&g, "github/token", "sb", "evil.test");
    wait_got(&g);
    ck_assert_str_eq(g.reason, "vault_refused");
    ck_assert_ptr_null(g.sec);
    V.fetch_delay_ms = 1000;
    fetch(&g, "github/token", "sb", "api.github.test");
    wait_got(&g);
    ck_assert_str_eq(g.reason, "vault_timeout");
    run_until(NULL, 800);
    V.fetch_delay_ms = 0;
    struct intercept_fetch_args bad = {.name = "x"};
    struct intercept_secret *o;
    const char *reason;
    ck_assert_int_eq(intercept_fetch_start(F, &bad, &g.req, &o, &reason), -EINVAL);
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_ge(st.fetch_failures, 3);
    ck_assert_uint_eq(st.cached, 0);
    client_stop();
}
END_TEST

START_TEST(unreachable_vault)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    client_start(0);
    fv_stop_server();
    run_until(NULL, 30);
    struct got g;
    int r = fetch(&g, "github/token", "sb", "h.test");
    if (r == 0)
        wait_got(&g);
    ck_assert(g.err < 0);
    ck_assert(strcmp(g.reason, "vault_unreachable") == 0 ||
              strcmp(g.reason, "vault_feed_down") == 0);
    ck_assert(run_until(feed_down, 3000));
    client_stop();
}
END_TEST

START_TEST(cancel_means_no_callback)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    client_start(0);
    struct got g;
    ck_assert_int_eq(fetch(&g, "github/token", "sb", "h.test"), 0);
    intercept_fetch_cancel(&g.req);
    run_until(NULL, 300);
    ck_assert(!g.done);
    /* The value was still fetched and cached. */
    struct got h;
    ck_assert_int_eq(fetch(&h, "github/token", "sb", "h.test"), 1);
    intercept_secret_unref(h.sec);
    /* Closing the fetcher with a fetch in flight: the callback says cancelled. */
    V.fetch_delay_ms = 200;
    intercept_secrets_flush(S);
    struct got k;
    ck_assert_int_eq(fetch(&k, "github/token", "sb", "h.test"), 0);
    intercept_fetcher_close(F);
    ck_assert(k.done);
    ck_assert_int_eq(k.err, -ECANCELED);
    ck_assert_int_eq(intercept_fetcher_new(S, V.loop, &F), 0);
    run_until(NULL, 300);
    client_stop();
}
END_TEST

/* A fetch answered at a generation older than a change the feed already reported is used
 * once and not cached. */
START_TEST(race_with_change_not_cached)
{
    fv_start();
    fv_add("github/token", TOKEN, NULL);
    client_start(0);
    run_until(NULL, 100);
    fv_rotate("github/token", "ghp_NewerValue000000000000000000000000000");
    run_until(NULL, 200);  /* the feed reported the change */
    V.fetch_gen_minus = 1; /* the fetch claims to predate it */
    struct got g;
    fetch(&g, "github/token", "sb", "h.test");
    wait_got(&g);
    ck_assert_int_eq(g.err, 0);
    struct intercept_secrets_stats st;
    intercept_secrets_get_stats(S, &st);
    ck_assert_uint_eq(st.not_cached_race, 1);
    ck_assert_uint_eq(st.cached, 0);
    intercept_secret_unref(g.sec);
    client_stop();
}
END_TEST

START_TEST(bound_host_patterns)
{
    struct intercept_secret s = {0};
    s.bound_hosts[0] = "api.github.test";
    s.bound_hosts[1] = "*.uploads.test";
    s.n_bound = 2;
    ck_assert(intercept_secret_bound_to(&s, "api.github.test"));
    ck_assert(intercept_secret_bound_to(&s, "API.github.test"));
    ck_assert(intercept_secret_bound_to(&s, "a.uploads.test"));
    ck_assert(!intercept_secret_bound_to(&s, "uploads.test"));
    ck_assert(!intercept_secret_bound_to(&s, "a.b.uploads.test"));
    ck_assert(!intercept_secret_bound_to(&s, "xuploads.test"));
    ck_assert(!intercept_secret_bound_to(&s, "github.test"));
    ck_assert(!intercept_secret_bound_to(&s, "api.github.test.evil.test"));
}
END_TEST

/* The proxy's check is the policy library's matcher, the same one the vault uses: IDNs, IP
 * literals in any spelling, and every wildcard form of the policy language. */
START_TEST(bound_hosts_match_like_the_policy)
{
    const char *b[] = {"B\xc3\x9c"
                       "CHER.example.",
                       "0xcb.0.113.5", "[2001:DB8::1]", "**.deep.test", "api-*.example.test"};
    struct intercept_secret *s = intercept_secret_new(
        &(struct intercept_secret_def){"svc/key", "value-1", 7, "b2k:x", 1, b, AL_ARRAY_SIZE(b)});
    ck_assert_ptr_nonnull(s);
    /* stored canonical, as the vault stores them */
    ck_assert_str_eq(s->bound_hosts[0], "xn--bcher-kva.example");
    ck_assert_str_eq(s->bound_hosts[1], "203.0.113.5");
    ck_assert_str_eq(s->bound_hosts[2], "2001:db8::1");
    ck_assert(intercept_secret_bound_to(s, "xn--bcher-kva.example"));
    ck_assert(intercept_secret_bound_to(s, "b\xc3\xbc"
                                           "cher.example"));
    ck_assert(!intercept_secret_bound_to(s, "bucher.example"));
    ck_assert(intercept_secret_bound_to(s, "203.0.113.5"));
    ck_assert(intercept_secret_bound_to(s, "3405803781")); /* 203.0.113.5 as one number */
    ck_assert(!intercept_secret_bound_to(s, "203.0.113.50"));
    ck_assert(intercept_secret_bound_to(s, "2001:db8:0:0:0:0:0:1"));
    ck_assert(!intercept_secret_bound_to(s, "2001:db8::2"));
    ck_assert(intercept_secret_bound_to(s, "a.b.deep.test"));
    ck_assert(!intercept_secret_bound_to(s, "deep.test"));
    ck_assert(intercept_secret_bound_to(s, "api-v2.example.test"));
    ck_assert(!intercept_secret_bound_to(s, "www.example.test"));
    ck_assert(!intercept_secret_bound_to(s, "a.api-v2.example.test"));
    ck_assert(!intercept_secret_bound_to(s, ""));
    ck_assert(!intercept_secret_bound_to(s, "bad host"));
    intercept_secret_unref(s);
    /* an entry the policy language cannot read is refused, not matched loosely */
    const char *bad[] = {"a*b.*.example.test"};
    ck_assert_ptr_null(intercept_secret_new(
        &(struct intercept_secret_def){"svc/key", "value-1", 7, "b2k:x", 1, bad, 1}));
}
END_TEST

/* ---- against the real daemon ------------------------------------------------------------ */

static void bin_path(char *out, size_t len, const char *name)
{
    const char *bd = getenv("AIRLOCK_BINARY_DIR");
    snprintf(out, len, "%s/bin/%s", bd ? bd : ".", name);
}

static int cli(const char *state, const char *input, const char *args)
{
    char bin[512], cmd[2048];
    bin_path(bin, sizeof bin, "airlock");
    if (input)
        snprintf(cmd, sizeof cmd, "printf %%s '%s' | %s vault %s --state-dir %s >/dev/null 2>&1",
                 input, bin, args, state);
    else
        snprintf(cmd, sizeof cmd, "%s vault %s --state-dir %s >/dev/null 2>&1", bin, args, state);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(real_vault_daemon)
{
    char vault[512], airlock[512];
    bin_path(vault, sizeof vault, "airlock-vault");
    bin_path(airlock, sizeof airlock, "airlock");
    if (access(vault, X_OK) != 0 || access(airlock, X_OK) != 0 || geteuid() != 0) {
        fprintf(stderr, "real_vault_daemon: skipped (needs airlock-vault, airlock and root)\n");
        return;
    }
    fv_start(); /* for the loop and the temporary directory */
    fv_stop_server();
    char state[400];
    snprintf(state, sizeof state, "%s/state", V.dir);
    ck_assert_int_eq(cli(state, NULL, "init"), 0);
    ck_assert_int_eq(cli(state, TOKEN, "put github/token --bound-host api.github.test"), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char logf[500];
        snprintf(logf, sizeof logf, "%s/daemon.log", V.dir);
        int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        execl(vault, "airlock-vault", "--state-dir", state, "--egress-user", "0", (char *)NULL);
        _exit(127);
    }
    snprintf(V.sock, sizeof V.sock, "%s/run/vault.sock", state);
    for (int i = 0; i < 200 && access(V.sock, F_OK) != 0; i++)
        usleep(25000);
    client_start(0);
    struct got g;
    fetch(&g, "github/token", "sb-real", "api.github.test");
    wait_got(&g);
    ck_assert_msg(g.err == 0, "%s", g.reason);
    ck_assert(memcmp(g.sec->value, TOKEN, g.sec->len) == 0);
    ck_assert_uint_eq(g.sec->n_bound, 1);
    ck_assert_str_eq(g.sec->bound_hosts[0], "api.github.test");
    struct got h;
    fetch(&h, "github/token", "sb-real", "evil.test");
    if (h.done && h.sec) {
        /* served from the cache: the injector checks bound hosts itself */
        ck_assert(!intercept_secret_bound_to(h.sec, "evil.test"));
        intercept_secret_unref(h.sec);
    }
    intercept_secrets_flush(S);
    fetch(&h, "github/token", "sb-real", "evil.test");
    wait_got(&h);
    ck_assert_str_eq(h.reason, "vault_refused");
    /* Rotate through the CLI (it talks to the daemon): the feed drops the entry. */
    struct got k;
    fetch(&k, "github/token", "sb-real", "api.github.test");
    wait_got(&k);
    run_until(NULL, 200);
    ck_assert_int_eq(cli(state, "ghp_rotated_by_the_cli_0000000000000000", "rotate github/token"),
                     0);
    ck_assert(run_until(cache_empty, 3000));
    struct got m;
    fetch(&m, "github/token", "sb-real", "api.github.test");
    wait_got(&m);
    ck_assert_int_eq(m.err, 0);
    ck_assert_uint_eq(m.sec->version, 2);
    ck_assert(memcmp(m.sec->value, "ghp_rotated_by_the_cli", 22) == 0);
    intercept_secret_unref(g.sec);
    intercept_secret_unref(k.sec);
    intercept_secret_unref(m.sec);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    client_stop();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_secrets");
    TCase *tc = tcase_create("secrets");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fetch_then_hit);
    tcase_add_test(tc, coalescing_per_context);
    tcase_add_test(tc, rotation_invalidates);
    tcase_add_test(tc, full_answer_flushes);
    tcase_add_test(tc, feed_down_fails_closed);
    tcase_add_test(tc, errors_are_reasons);
    tcase_add_test(tc, unreachable_vault);
    tcase_add_test(tc, cancel_means_no_callback);
    tcase_add_test(tc, race_with_change_not_cached);
    tcase_add_test(tc, bound_host_patterns);
    tcase_add_test(tc, bound_hosts_match_like_the_policy);
    tcase_add_test(tc, real_vault_daemon);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
