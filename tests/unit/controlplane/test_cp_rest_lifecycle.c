/* tests/unit/controlplane/test_cp_rest_lifecycle: a sandbox's life over the REST API
 * (cp_rest_fixture.h): pause, connect, resume, timeouts, metrics and logs, kill (its process
 * reaped), unsupported endpoints, the Prometheus exposition; the start queue (one start at a
 * time, in request order); the timeout that kills and a crash detected on its own. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cp_rest_fixture.h"

START_TEST(lifecycle_ops)
{
    char id[64], path[160];
    create("{\"templateID\":\"base\",\"timeout\":60}", id, NULL);
    struct resp r;
    snprintf(path, sizeof path, "/sandboxes/%s/pause", id);
    req(&r, "POST", path, NULL);
    ck_assert_int_eq(r.status, 204);
    ck_assert_uint_eq(r.len, 0);
    resp_free(&r);
    req(&r, "POST", path, NULL);
    assert_error(&r, 409, "already paused");
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_str_eq(jstr(r.body, "state"), "paused");
    resp_free(&r);
    /* Connect resumes a paused sandbox: 201; a running one: 200. */
    snprintf(path, sizeof path, "/v2/sandboxes/%s/connect", id);
    req(&r, "POST", path, "{\"timeout\":30}");
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(jstr(r.body, "sandboxID"), id);
    ck_assert_uint_eq(strlen(jstr(r.body, "envdAccessToken")), CP_TOKEN_LEN);
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s/connect", id);
    req(&r, "POST", path, "{\"timeout\":30}");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s/resume", id);
    req(&r, "POST", path, "{}");
    assert_error(&r, 409, "already running");
    resp_free(&r);
    ck_assert_int_eq(g_pauses, 1);
    ck_assert_int_eq(g_resumes, 1);
    /* Timeouts: 204 with no body. */
    snprintf(path, sizeof path, "/sandboxes/%s/timeout", id);
    req(&r, "POST", path, "{\"timeout\":600}");
    ck_assert_int_eq(r.status, 204);
    ck_assert_uint_eq(r.len, 0);
    resp_free(&r);
    req(&r, "POST", path, "{}");
    assert_error(&r, 400, "timeout");
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s/refreshes", id);
    req(&r, "POST", path, "{\"duration\":5}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    /* Metrics and logs. */
    snprintf(path, sizeof path, "/sandboxes/%s/metrics", id);
    req(&r, "GET", path, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_ge(json_array_size(r.body), 1);
    json_t *m = json_array_get(r.body, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "memUsed")), 64 << 20);
    ck_assert_ptr_nonnull(json_object_get(m, "timestampUnix"));
    resp_free(&r);
    char logp[300];
    snprintf(logp, sizeof logp, "%s/agent.log", g_tmpdir);
    FILE *f = fopen(logp, "w");
    fprintf(f, "{\"time\":\"2026-01-01T00:00:00.000Z\",\"level\":\"warn\",\"msg\":\"hello\","
               "\"src\":\"a.c:1\"}\nplain line\n"
               "{\"level\":\"debug\",\"message\":\"envd's name\",\"logger\":\"svc\"}\n");
    fclose(f);
    snprintf(path, sizeof path, "/v2/sandboxes/%s/logs?level=warn", id);
    req(&r, "GET", path, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "logs")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "logs"), 0), "message"), "hello");
    resp_free(&r);
    /* v1: each line is a JSON object, as E2B's raw lines are (`e2b sandbox logs` parses it
     * and reads "level"); logEntries as in v2. */
    snprintf(path, sizeof path, "/sandboxes/%s/logs", id);
    req(&r, "GET", path, NULL);
    json_t *lines = json_object_get(r.body, "logs");
    ck_assert_uint_eq(json_array_size(lines), 3);
    ck_assert_str_eq(jstr(json_array_get(lines, 0), "timestamp"), "2026-01-01T00:00:00.000Z");
    json_t *l0 = json_loads(jstr(json_array_get(lines, 0), "line"), 0, NULL);
    json_t *l1 = json_loads(jstr(json_array_get(lines, 1), "line"), 0, NULL);
    ck_assert_ptr_nonnull(l0);
    ck_assert_ptr_nonnull(l1);
    ck_assert_str_eq(jstr(l0, "level"), "warn");
    ck_assert_str_eq(jstr(l0, "message"), "hello");
    ck_assert_str_eq(jstr(l0, "src"), "a.c:1");
    ck_assert_ptr_null(json_object_get(l0, "msg"));
    ck_assert_str_eq(jstr(l1, "level"), "info");
    ck_assert_str_eq(jstr(l1, "message"), "plain line");
    ck_assert_uint_eq(json_object_size(l1), 2);
    json_t *l2 = json_loads(jstr(json_array_get(lines, 2), "line"), 0, NULL);
    ck_assert_str_eq(jstr(l2, "level"), "debug");
    ck_assert_str_eq(jstr(l2, "message"), "envd's name");
    ck_assert_str_eq(jstr(l2, "logger"), "svc");
    ck_assert_uint_eq(json_object_size(l2), 3);
    json_decref(l0);
    json_decref(l1);
    json_decref(l2);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "logEntries")), 3);
    resp_free(&r);
    /* Unsupported endpoints say so (a fork, by this backend: test_cp_rest_snapshots). */
    req(&r, "POST", "/teams", "{}");
    assert_error(&r, 501, "not supported");
    resp_free(&r);
    req(&r, "GET", "/nope", NULL);
    assert_error(&r, 404, "no such endpoint");
    resp_free(&r);
    /* Kill: 204, then 404 (the SDK's false). */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    struct cp_sb_record rec;
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(s2, id, &rec, NULL), 0);
    pid_t spid = rec.pid;
    cp_sb_record_free(&rec);
    cp_store_close(s2);
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    ck_assert_uint_eq(r.len, 0);
    resp_free(&r);
    /* Its process is gone and reaped (a zombie would still answer kill(pid, 0)). */
    int tries = 0;
    while (kill(spid, 0) == 0 && tries++ < 100)
        usleep(10000);
    ck_assert_msg(kill(spid, 0) < 0 && errno == ESRCH, "process %d not reaped", (int)spid);
    req(&r, "DELETE", path, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/sandboxes/%s/connect", id);
    req(&r, "POST", path, "{}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    ck_assert_int_eq(g_stops, 1);
    /* Prometheus. */
    req_full(&r, g_target, "GET", "/metrics", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.ctype, "text/plain"));
    ck_assert_ptr_nonnull(strstr(r.raw, "airlock_sandbox_creates_total 1"));
    ck_assert_ptr_nonnull(strstr(r.raw, "airlock_sandbox_kills_total 1"));
    ck_assert_ptr_nonnull(strstr(r.raw, "airlock_sandboxes{state=\"running\"} 0"));
    /* The creation's stages, each timed once (no network in this world: 0 s, still counted). */
    const char *stages[] = {"accept", "network", "egress", "queue", "start"};
    for (size_t i = 0; i < 5; i++) {
        char line[160];
        snprintf(line, sizeof line,
                 "airlock_sandbox_create_stage_duration_seconds_count{stage=\"%s\"} 1\n",
                 stages[i]);
        ck_assert_msg(strstr(r.raw, line), "no %s", line);
        snprintf(line, sizeof line,
                 "airlock_sandbox_create_stage_duration_seconds_bucket{stage=\"%s\",le=\"+Inf\"} "
                 "1\n",
                 stages[i]);
        ck_assert_msg(strstr(r.raw, line), "no %s", line);
    }
    resp_free(&r);
}
END_TEST

struct tt_create {
    int status;
    char body[512];
};

static void *tt_create(void *arg)
{
    struct tt_create *a = arg;
    struct al_http_header h[] = {{"X-API-KEY", KEY_ENV}, {"Content-Type", "application/json"}};
    const char *body = "{\"templateID\":\"slow\"}";
    struct al_http_resp out = {0};
    struct al_error err = {0};
    struct al_http_call_opts o = {.target = g_target,
                                  .method = "POST",
                                  .path = "/v2/sandboxes",
                                  .headers = h,
                                  .n_headers = 2,
                                  .body = body,
                                  .body_len = strlen(body),
                                  .timeout_ms = 10000};
    if (al_http_call(&o, &out, &err) == 0) {
        a->status = out.status;
        snprintf(a->body, sizeof a->body, "%.*s", (int)out.body.len,
                 out.body.data ? out.body.data : "");
    }
    al_http_resp_free(&out);
    return NULL;
}

/* A network provider whose first network is ready only once g_fn_total networks were asked
 * for (the others at once): the creation that asked first reaches the start queue last. */
static atomic_int g_fn_calls;
static int g_fn_total;

static int fn_acquire(void *priv, uint64_t seq, const char *label, struct cp_net *out,
                      struct al_error *err)
{
    (void)priv;
    (void)label;
    (void)err;
    if (atomic_fetch_add(&g_fn_calls, 1) == 0)
        for (int i = 0; i < 10000 && atomic_load(&g_fn_calls) < g_fn_total; i++)
            usleep(1000); /* bounded (10 s): the test then fails on the order */
    memset(out, 0, sizeof *out);
    out->netns_fd = out->tap_fd = -1;
    out->prefix_len = 30;
    snprintf(out->addr, sizeof out->addr, "10.99.%u.2", (unsigned)(seq & 0xff));
    return 0;
}

static int fn_release(void *priv, uint64_t seq, struct al_error *err)
{
    (void)priv;
    (void)seq;
    (void)err;
    return 0;
}

static int fn_find(void *priv, uint64_t seq, struct cp_net *out)
{
    (void)priv;
    (void)seq;
    (void)out;
    return -ENOENT;
}

static const struct cp_net_ops fake_net = {
    .name = "fake", .acquire = fn_acquire, .release = fn_release, .find = fn_find};

/* Waits (bounded, 10 s) until n networks were asked for. */
static void tt_wait_fn_calls(int n)
{
    for (int i = 0; i < 10000 && atomic_load(&g_fn_calls) < n; i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&g_fn_calls), n);
}

/* Sandboxes start in the order their creations were asked for, not the order they got
 * through their networks. Creation 0's network is ready only once the four after it have
 * theirs; each creation is sent once the one before it asked for its network (so the server
 * received them in this order); creation 1 starts at once (one start at a time), and its
 * start ends only once 0, 2, 3 and 4 all wait in the start queue. The queue then starts 0
 * first, although it reached the queue last. Nothing here depends on timing. */
/* E2B's "memory" of pause and connect: malformed bodies are refused, and the test backend
 * (no files without processes) refuses a pause without memory and a reboot, changing
 * nothing; autoResume cannot go with autoPauseMemory: false. */
START_TEST(pause_memory_refusals)
{
    char id[64], path[160], info[160];
    struct resp r;
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"autoPause\":true,\"autoPauseMemory\":false,"
        "\"autoResume\":{\"enabled\":true}}");
    assert_error(&r, 400, "autoPauseMemory: false");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"autoPauseMemory\":0}");
    assert_error(&r, 400, "\"autoPauseMemory\" must be a boolean");
    resp_free(&r);
    create("{\"templateID\":\"base\",\"timeout\":60}", id, NULL);
    snprintf(path, sizeof path, "/sandboxes/%s/pause", id);
    snprintf(info, sizeof info, "/sandboxes/%s", id);
    req(&r, "POST", path, "{\"memory\":\"no\"}");
    assert_error(&r, 400, "\"memory\" must be true or false");
    resp_free(&r);
    req(&r, "POST", path, "{\"memory\":false,\"keep\":1}");
    assert_error(&r, 400, "\"keep\" is not a field of a pause request");
    resp_free(&r);
    req(&r, "POST", path, "[]");
    assert_error(&r, 400, "JSON object");
    resp_free(&r);
    int pauses = g_pauses;
    req(&r, "POST", path, "{\"memory\":false}");
    assert_error(&r, 501, "the test backend keeps no files");
    resp_free(&r);
    req(&r, "GET", info, NULL);
    ck_assert_str_eq(jstr(r.body, "state"), "running");
    resp_free(&r);
    ck_assert_int_eq(g_pauses, pauses);
    /* With memory (true, or null as absent): the freezer, as without a body. */
    req(&r, "POST", path, "{\"memory\":null}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    ck_assert_int_eq(g_pauses, pauses + 1);
    /* A reboot (connect with memory false) needs the files too: refused, it stays paused. */
    snprintf(path, sizeof path, "/v2/sandboxes/%s/connect", id);
    req(&r, "POST", path, "{\"memory\":1}");
    assert_error(&r, 400, "\"memory\" must be true or false");
    resp_free(&r);
    int resumes = g_resumes;
    req(&r, "POST", path, "{\"memory\":false}");
    assert_error(&r, 501, "rebooting sandbox");
    resp_free(&r);
    req(&r, "GET", info, NULL);
    ck_assert_str_eq(jstr(r.body, "state"), "paused");
    resp_free(&r);
    ck_assert_int_eq(g_resumes, resumes);
    req(&r, "POST", path, "{\"memory\":true}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    ck_assert_int_eq(g_resumes, resumes + 1);
    snprintf(path, sizeof path, "/sandboxes/%s/pause", id);
    req(&r, "POST", path, "{\"memory\":true}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "DELETE", info, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
}
END_TEST

START_TEST(starts_go_in_request_order)
{
    enum { N = 5 };
    atomic_store(&g_fn_calls, 0);
    g_fn_total = N;
    g_start_gate = N - 1;
    g_cp.net = &fake_net;
    pthread_t t[N];
    struct tt_create a[N];
    memset(a, 0, sizeof a);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(pthread_create(&t[i], NULL, tt_create, &a[i]), 0);
        tt_wait_fn_calls(i + 1);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    g_start_gate = 0;
    char ids[N][CP_ID_LEN + 1];
    for (int i = 0; i < N; i++) {
        ck_assert_msg(a[i].status == 201, "create %d: %d %s", i, a[i].status, a[i].body);
        json_t *o = json_loads(a[i].body, 0, NULL);
        ck_assert_ptr_nonnull(o);
        snprintf(ids[i], sizeof ids[i], "%s", jstr(o, "sandboxID"));
        json_decref(o);
    }
    ck_assert_int_eq(g_n_started, N);
    static const int expect[N] = {1, 0, 2, 3, 4};
    for (int k = 0; k < N; k++)
        ck_assert_msg(strcmp(g_start_order[k], ids[expect[k]]) == 0,
                      "start number %d was not creation %d's", k + 1, expect[k]);
}
END_TEST

/* sandboxes.start_concurrency (1 in these tests): four creations at once all succeed, their
 * sandboxes start one after the other (each takes 50 ms in the fake backend), and the time
 * the others waited is the "queue" stage's. The first start is held until the other three
 * wait in the queue: however the machine schedules the four clients, they do overlap. */
START_TEST(starts_take_turns)
{
    enum { N = 4 };
    g_start_gate = N - 1;
    pthread_t t[N];
    struct tt_create a[N];
    memset(a, 0, sizeof a);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, tt_create, &a[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    g_start_gate = 0;
    for (int i = 0; i < N; i++)
        ck_assert_msg(a[i].status == 201, "create %d: %d %s", i, a[i].status, a[i].body);
    ck_assert_int_eq(g_fb_starting_max, 1);
    struct resp r;
    req_full(&r, g_target, "GET", "/metrics", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    const char *q =
        strstr(r.raw, "airlock_sandbox_create_stage_duration_seconds_sum{stage=\"queue\"} ");
    ck_assert_ptr_nonnull(q);
    double waited = strtod(strchr(q, '}') + 2, NULL);
    /* Three waited for at least one start (50 ms) each: 0.15 s at least in all. */
    ck_assert_msg(waited >= 0.14, "queue stage: %.3f s in all", waited);
    resp_free(&r);
}
END_TEST

START_TEST(timeout_kills_and_crash_is_detected)
{
    char id[64], id2[64], path[160];
    create("{\"templateID\":\"base\",\"timeout\":1}", id, NULL);
    create("{\"templateID\":\"base\",\"timeout\":60}", id2, NULL);
    struct resp r;
    /* The crash: the sandbox's process dies on its own. */
    struct cp_sb_record rec;
    cp_sb_record_init(&rec);
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    ck_assert_int_eq(cp_store_sb_load(s2, id2, &rec, NULL), 0);
    ck_assert_int_gt(rec.pid, 0);
    /* (Bounds: generous, below the case's 60 s; how fast is the benchmarks' business.) */
    uint64_t t0 = al_now_ns();
    kill(rec.pid, SIGKILL);
    snprintf(path, sizeof path, "/sandboxes/%s", id2);
    for (;;) {
        req(&r, "GET", path, NULL);
        int st = r.status;
        resp_free(&r);
        if (st == 404)
            break;
        ck_assert_msg(al_now_ns() - t0 < 20000000000ull, "the crash is never detected");
        usleep(10000);
    }
    /* Gone from the store too (written by the store's own thread). */
    struct cp_sb_record gone;
    cp_sb_record_init(&gone);
    int lrc;
    while ((lrc = cp_store_sb_load(s2, id2, &gone, NULL)) == 0) {
        cp_sb_record_free(&gone);
        cp_sb_record_init(&gone);
        ck_assert_msg(al_now_ns() - t0 < 20000000000ull, "the crashed sandbox stays in the store");
        usleep(10000);
    }
    ck_assert_int_eq(lrc, -ENOENT);
    cp_sb_record_free(&gone);
    cp_sb_record_free(&rec);
    cp_store_close(s2);
    /* The timeout. */
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    t0 = al_now_ns();
    for (;;) {
        req(&r, "GET", path, NULL);
        int st = r.status;
        resp_free(&r);
        if (st == 404)
            break;
        ck_assert_msg(al_now_ns() - t0 < 30000000000ull, "never killed at its timeout");
        usleep(50000);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_lifecycle");
    TCase *t = cp_rest_tcase("lifecycle");
    tcase_add_test(t, lifecycle_ops);
    tcase_add_test(t, pause_memory_refusals);
    tcase_add_test(t, starts_take_turns);
    tcase_add_test(t, starts_go_in_request_order);
    tcase_add_test(t, timeout_kills_and_crash_is_detected);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
