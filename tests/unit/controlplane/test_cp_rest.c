/* tests/unit/controlplane/test_cp_rest: the E2B REST layer, the lifecycle behind it, and
 * data-plane routing, in process: airlockd's router on a real HTTP server (its own loop
 * thread) with a fake backend (sandboxes are `sleep` processes watched through pidfds) and
 * a fake agent on a unix socket. Requests come from the test thread with the blocking
 * client, exactly as bytes on the wire.
 *
 * Covered: response shapes (Sandbox, SandboxDetail, ListedSandbox, errors with a JSON code),
 * 201/200/204/400/401/404/409/429/501/502 semantics, empty 2xx bodies, v1 and v2 paths,
 * validation of create requests, API keys (environment key, stored keys, revocation by
 * another connection takes effect at once, the local socket's peer rule), access-token
 * routing, timeouts, crash detection within a second, and the Prometheus exposition. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "al_test.h"
#include "common/http.h"
#include "common/json.h"
#include "common/util.h"
#include "controlplane/cp.h"
#include "controlplane/metrics.h"
#include "controlplane/store.h"

#define KEY_ENV "e2b_1111111111111111111111111111111111111111"

static char tmpdir[256];
static struct cp g_cp;
static pthread_t g_thread;
static uv_async_t g_stop;
static char g_target[64];
static struct al_http_server *g_agent;
static char g_agent_sock[300];
static int g_stops, g_pauses, g_resumes;

/* ---- the fake agent: echoes what it got ------------------------------------------------- */

static void agent__on_body(struct al_http_req *req, int err)
{
    if (err < 0)
        return;
    json_t *o =
        json_pack("{s:s,s:s,s:s?,s:s?,s:s?,s:I}", "method", req->method, "target", req->target,
                  "sandbox", al_http_req_header(req, "E2b-Sandbox-Id"), "port",
                  al_http_req_header(req, "E2b-Sandbox-Port"), "token",
                  al_http_req_header(req, "X-Access-Token"), "body_len", (json_int_t)req->body.len);
    al_http_reply_json(req, 200, o);
}

/* Upgrades: an echo of whatever the client sends, ended when the client ends. */
static void agent__ws_shut(struct al_http_tunnel *t, int err, void *arg)
{
    (void)err;
    (void)arg;
    al_http_tunnel_close(t);
}

static int agent__ws_data(struct al_http_tunnel *t, const char *d, size_t n, void *arg)
{
    (void)arg;
    al_http_tunnel_write(t, d, n);
    return 0;
}

static void agent__ws_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)arg;
    if (err || al_http_tunnel_shutdown(t, agent__ws_shut) < 0)
        al_http_tunnel_close(t);
}

static void agent__on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    if (strcmp(req->path, "/cut-chunked") == 0 || strcmp(req->path, "/cut-length") == 0) {
        /* An agent that dies in the middle of a download: 64 KiB, then the connection ends. */
        static char piece[65536];
        memset(piece, 'd', sizeof piece);
        al_http_resp_start(req, 200, NULL, 0, req->path[5] == 'c' ? -1 : 1 << 20);
        al_http_resp_write(req, piece, sizeof piece);
        al_http_resp_abort(req);
        return;
    }
    if (strcmp(req->path, "/ws") == 0) {
        struct al_http_header h[] = {{"Upgrade", "websocket"}, {"Sec-WebSocket-Accept", "abc"}};
        struct al_http_tunnel *t;
        if (al_http_req_upgrade(req, h, 2, &t) == 0)
            al_http_tunnel_start(t, agent__ws_data, agent__ws_end, NULL);
        else
            al_http_reply(req, 426, "text/plain", "no", 2);
        return;
    }
    if (strcmp(req->path, "/cookies") == 0) {
        /* A sandbox's server that scopes its cookies to the domain all sandboxes share. */
        struct al_http_header h[] = {
            {"Set-Cookie", "a=1; Domain=sbx.test; Path=/"},
            {"set-cookie", "b=2;domain=.SBX.test;HttpOnly"},
            {"Set-Cookie", "c=3; Secure; DOMAIN = .sbx.test ; SameSite=Lax"},
            {"Set-Cookie", "d=4; Path=/x"},
            {"Set-Cookie", "e=domain=x; Max-Age=60; Domain=8080-sb.sbx.test; Domain=test"}};
        al_http_resp_start(req, 200, h, 5, 2);
        al_http_resp_write(req, "ok", 2);
        al_http_resp_end(req);
        return;
    }
    if (strcmp(req->path, "/seen") == 0) {
        /* What reached the agent: Host, framing, a Connection-named field. */
        json_t *o =
            json_pack("{s:s?,s:s?,s:s?,s:s?,s:s?,s:s?}", "host", al_http_req_header(req, "Host"),
                      "cl", al_http_req_header(req, "Content-Length"), "te",
                      al_http_req_header(req, "Transfer-Encoding"), "drop",
                      al_http_req_header(req, "X-Drop"), "keep", al_http_req_header(req, "X-Keep"),
                      "connection", al_http_req_header(req, "Connection"));
        al_http_reply_json(req, 200, o);
        return;
    }
    if (strcmp(req->path, "/health") == 0) {
        al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    if (strcmp(req->path, "/stream") == 0) {
        /* Three chunks, flushed one by one. */
        al_http_resp_start(req, 200, NULL, 0, -1);
        for (int i = 0; i < 3; i++)
            al_http_resp_write(req, "chunk\n", 6);
        al_http_resp_end(req);
        return;
    }
    al_http_req_read_body(req, 64 << 20, agent__on_body);
}

/* ---- the fake backend ------------------------------------------------------------------- */

/* The order the sandboxes started in (ids), for starts_go_in_request_order. */
static char g_start_order[8][CP_ID_LEN + 1];
static int g_n_started;

struct fb_later {
    uv_timer_t t;
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    int rc;
    bool start;
    bool gated; /* ends only once the start queue holds g_start_gate sandboxes */
    int polls;
};

/* starts_go_in_request_order: the next start waits (polled on the loop thread, which owns the
 * queue) until this many creations wait in the start queue; 0: no gate. */
static atomic_int g_start_gate;

/* Starts in flight in the fake backend, and the most there were at once (loop thread). */
static int g_fb_starting, g_fb_starting_max;

static void fb__closed(uv_handle_t *h)
{
    free(h->data);
}

static size_t fb__queued(void)
{
    size_t n = 0;
    for (struct cp_sandbox *q = g_cp.start_queue; q; q = q->start_next)
        n++;
    return n;
}

static void fb__fire(uv_timer_t *t)
{
    struct fb_later *l = t->data;
    /* A bound (10 s) so that a queue that never fills fails the test instead of hanging it. */
    if (l->gated && fb__queued() < (size_t)atomic_load(&g_start_gate) && ++l->polls < 10000) {
        uv_timer_start(t, fb__fire, 1, 0);
        return;
    }
    if (l->start)
        g_fb_starting--;
    l->cb(l->sb, l->rc, l->rc ? "fake failure" : NULL);
    cp_sb_unref(l->sb);
    uv_close((uv_handle_t *)t, fb__closed);
}

static int fb__later_ms(struct cp_sandbox *sb, cp_backend_cb cb, int rc, uint64_t ms, bool start)
{
    struct fb_later *l = calloc(1, sizeof *l);
    l->sb = sb;
    l->cb = cb;
    l->rc = rc;
    l->start = start;
    l->gated = start && g_start_gate && g_n_started == 1; /* the first start of the test */
    if (start && ++g_fb_starting > g_fb_starting_max)
        g_fb_starting_max = g_fb_starting;
    cp_sb_ref(sb);
    uv_timer_init(sb->cp->loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, fb__fire, ms, 0);
    return 0;
}

static int fb__later(struct cp_sandbox *sb, cp_backend_cb cb, int rc)
{
    return fb__later_ms(sb, cb, rc, 1, false);
}

static char g_started_policy[CP_POLICY_NAME_MAX]; /* the policy of the last start */

static int fb_start(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb)
{
    (void)a;
    snprintf(g_started_policy, sizeof g_started_policy, "%s", sb->rec.policy_name);
    if (g_n_started < 8)
        snprintf(g_start_order[g_n_started++], CP_ID_LEN + 1, "%s", sb->rec.id);
    if (strcmp(sb->rec.template_id, "failing") == 0)
        return fb__later_ms(sb, cb, -EIO, 1, true);
    char *argv[] = {"/bin/sleep", "1000", NULL};
    struct al_spawn s = {
        .path = "/bin/sleep", .argv = argv, .fds = {-1, -1, -1}, .nfds = 3, .new_session = true};
    pid_t pid;
    if (al_spawn(&s, &pid, &sb->pidfd, NULL))
        return -EIO;
    sb->rec.pid = pid;
    sb->rec.pid_start = cp_proc_start_time(pid);
    if (strcmp(sb->rec.template_id, "noagent") == 0)
        snprintf(sb->agent_sock, sizeof sb->agent_sock, "%s/none.sock", tmpdir);
    else
        snprintf(sb->agent_sock, sizeof sb->agent_sock, "%s", g_agent_sock);
    /* "slow" takes 50 ms to start (starts taking turns). */
    return fb__later_ms(sb, cb, 0, strcmp(sb->rec.template_id, "slow") == 0 ? 50 : 1, true);
}

static int fb_stop(struct cp_sandbox *sb, cp_backend_cb cb)
{
    g_stops++;
    if (sb->pidfd >= 0)
        cp_proc_signal(sb->pidfd, SIGKILL);
    return fb__later(sb, cb, 0);
}

static int fb_cleanup(struct cp_sandbox *sb, cp_backend_cb cb)
{
    return fb_stop(sb, cb);
}

static int fb_pause(struct cp_sandbox *sb, cp_backend_cb cb)
{
    g_pauses++;
    return fb__later(sb, cb, 0);
}

static int fb_resume(struct cp_sandbox *sb, cp_backend_cb cb)
{
    g_resumes++;
    return fb__later(sb, cb, 0);
}

static int fb_stats(struct cp_sandbox *sb, cp_backend_stats_cb cb, void *arg)
{
    json_t *st = json_pack("{s:I,s:i,s:I,s:I,s:I,s:I}", "cpu_usage_ns", (json_int_t)1000000, "cpus",
                           2, "memory_bytes", (json_int_t)(64 << 20), "memory_limit_bytes",
                           (json_int_t)(512 << 20), "disk_used_bytes", (json_int_t)(1 << 20),
                           "disk_total_bytes", (json_int_t)(1 << 30));
    cb(sb, 0, st, arg);
    json_decref(st);
    return 0;
}

static int fb_adopt(struct cp_sandbox *sb, cp_backend_cb cb)
{
    return fb__later(sb, cb, -ESRCH);
}

static int fb_sweep(struct cp *cp, struct al_error *err)
{
    (void)cp;
    (void)err;
    return 0;
}

static void fb_log_path(const struct cp_sandbox *sb, char *out, size_t len)
{
    (void)sb;
    snprintf(out, len, "%s/agent.log", tmpdir);
}

static const struct cp_backend_ops fake_backend = {
    .name = "fake",
    .start = fb_start,
    .stop = fb_stop,
    .pause = fb_pause,
    .resume = fb_resume,
    .stats = fb_stats,
    .adopt = fb_adopt,
    .cleanup = fb_cleanup,
    .sweep = fb_sweep,
    .log_path = fb_log_path,
};

/* ---- the control plane under test ------------------------------------------------------- */

static void stop_cb(uv_async_t *a)
{
    (void)a;
    uv_stop(g_cp.loop);
}

static void *loop_thread(void *arg)
{
    (void)arg;
    uv_run(g_cp.loop, UV_RUN_DEFAULT);
    return NULL;
}

static void setup(void)
{
    ck_assert_int_ge(sodium_init(), 0);
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/al-cp-rest-%d-XXXXXX", getpid());
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    memset(&g_cp, 0, sizeof g_cp);
    g_fb_starting = g_fb_starting_max = 0;
    g_n_started = 0;
    struct cp *cp = &g_cp;
    char cfgp[300];
    snprintf(cfgp, sizeof cfgp, "%s/cfg.yaml", tmpdir);
    FILE *f = fopen(cfgp, "w");
    fprintf(f,
            "state_dir: %s\nsandboxes:\n  max: 6\n  max_timeout: 1h\n  default_timeout: 300s\n"
            "  start_concurrency: 1\napi:\n  domain: sbx.test\n",
            tmpdir);
    fclose(f);
    ck_assert_int_eq(cp_config_load(&cp->cfg, cfgp, "127.0.0.1:0", NULL, stderr), 0);
    ck_assert_int_eq(al_mkdir_p(cp->cfg.policies_path, 0755), 0);
    char pol[400];
    snprintf(pol, sizeof pol, "%s/default.yaml", cp->cfg.policies_path);
    f = fopen(pol, "w");
    fprintf(f, "version: 1\nname: default\nrules:\n  - name: pypi\n    hosts: [pypi.org]\n");
    fclose(f);
    snprintf(pol, sizeof pol, "%s/other.yaml", cp->cfg.policies_path);
    f = fopen(pol, "w");
    fprintf(f, "version: 1\nname: other\nrules:\n  - name: gh\n    hosts: [api.github.com]\n");
    fclose(f);
    /* Templates as deploy/templates/build installs them (contents do not matter here). */
    const char *tpls[] = {"base",   "code-interpreter-v1", "failing",    "noagent",
                          "pinned", "pinned-missing",      "pinned-bad", "slow"};
    const char *tpl_extra[] = {
        "", "", "", "", ",\"policy\":\"other\"", ",\"policy\":\"gone\"", ",\"policy\":\"../other\"",
        ""};
    for (int i = 0; i < 8; i++) {
        char d[400];
        snprintf(d, sizeof d, "%s/templates/%s/rootfs", tmpdir, tpls[i]);
        ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
        snprintf(d, sizeof d, "%s/templates/%s/template.json", tmpdir, tpls[i]);
        f = fopen(d, "w");
        fprintf(f, "{\"name\":\"%s\"%s}\n", tpls[i], tpl_extra[i]);
        fclose(f);
    }
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
    ck_assert_int_eq(cp_store_open(db, &cp->store, NULL), 0);
    cp->loop = calloc(1, sizeof *cp->loop);
    uv_loop_init(cp->loop);
    cp->backend = &fake_backend;
    snprintf(cp->backend_kind, sizeof cp->backend_kind, "test");
    cp_map_init(&cp->sandboxes);
    cp_map_init(&cp->by_token);
    cp_map_init(&cp->key_cache);
    cp->started_ns = al_now_ns();
    cp_digest(KEY_ENV, strlen(KEY_ENV), cp->env_key_digest);
    cp->has_env_key = true;
    ck_assert_int_eq(cp_metrics_new(&cp->metrics), 0);
    ck_assert_int_eq(al_http_pool_new(cp->loop, NULL, &cp->pool), 0);
    struct al_http_server_opts o = {.on_request = cp_on_request, .ctx = cp};
    ck_assert_int_eq(al_http_server_new(cp->loop, &o, &cp->api), 0);
    ck_assert_int_eq(al_http_server_listen_tcp(cp->api, "127.0.0.1", 0, NULL), 0);
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", al_http_server_port(cp->api));
    ck_assert_int_eq(al_http_server_new(cp->loop, &o, &cp->local), 0);
    char sock[300];
    snprintf(sock, sizeof sock, "%s/cp.sock", tmpdir);
    ck_assert_int_eq(al_http_server_listen_unix(cp->local, sock, 0600, NULL), 0);
    struct al_http_server_opts ao = {.on_request = agent__on_request};
    ck_assert_int_eq(al_http_server_new(cp->loop, &ao, &g_agent), 0);
    snprintf(g_agent_sock, sizeof g_agent_sock, "%s/agent.sock", tmpdir);
    ck_assert_int_eq(al_http_server_listen_unix(g_agent, g_agent_sock, 0600, NULL), 0);
    uv_async_init(cp->loop, &g_stop, stop_cb);
    g_stops = g_pauses = g_resumes = 0;
    ck_assert_int_eq(pthread_create(&g_thread, NULL, loop_thread, NULL), 0);
}

static int kill_each(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    (void)arg;
    if (sb->rec.pid > 0)
        kill(sb->rec.pid, SIGKILL);
    return 0;
}

static void teardown(void)
{
    uv_async_send(&g_stop);
    pthread_join(g_thread, NULL);
    /* Sandboxes a test left running: their `sleep` processes must not outlive it. */
    cp_map_foreach(&g_cp.sandboxes, kill_each, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- helpers ------------------------------------------------------------------------------ */

struct resp {
    int status;
    json_t *body;
    char raw[65536]; /* /metrics is longer than 8 KiB */
    size_t len;
    char next[256];
    char ctype[128];
    char etag[64];
};

static void req_full(struct resp *r, const char *target, const char *method, const char *path,
                     const char *key, const char *body, const struct al_http_header *extra,
                     size_t n_extra)
{
    struct al_http_header h[16] = {{NULL, NULL}};
    size_t n = 0;
    if (key)
        h[n++] = (struct al_http_header){"X-API-KEY", key};
    if (body)
        h[n++] = (struct al_http_header){"Content-Type", "application/json"};
    for (size_t i = 0; i < n_extra; i++)
        h[n++] = extra[i];
    struct al_http_resp out = {0};
    struct al_error err = {0};
    memset(r, 0, sizeof *r);
    struct al_http_call_opts o = {.target = target,
                                  .method = method,
                                  .path = path,
                                  .headers = h,
                                  .n_headers = n,
                                  .body = body,
                                  .body_len = body ? strlen(body) : 0,
                                  .timeout_ms = 10000};
    int rc = al_http_call(&o, &out, &err);
    ck_assert_msg(rc == 0, "%s %s: %s", method, path, err.msg);
    r->status = out.status;
    r->len = out.body.len < sizeof r->raw - 1 ? out.body.len : sizeof r->raw - 1;
    memcpy(r->raw, out.body.data ? out.body.data : "", r->len);
    r->raw[r->len] = '\0';
    r->body = r->len ? json_loads(r->raw, 0, NULL) : NULL;
    const char *nt = al_http_resp_header(&out, "x-next-token");
    snprintf(r->next, sizeof r->next, "%s", nt ? nt : "");
    const char *ct = al_http_resp_header(&out, "Content-Type");
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    const char *et = al_http_resp_header(&out, "ETag");
    snprintf(r->etag, sizeof r->etag, "%s", et ? et : "");
    al_http_resp_free(&out);
}

static void req(struct resp *r, const char *method, const char *path, const char *body)
{
    req_full(r, g_target, method, path, KEY_ENV, body, NULL, 0);
}

static void resp_free(struct resp *r)
{
    json_decref(r->body);
    r->body = NULL;
}

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* Creates a sandbox and returns its id (and token). */
static void create(const char *body, char id[64], char token[80])
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", body);
    ck_assert_msg(r.status == 201, "create: %d %s", r.status, r.raw);
    snprintf(id, 64, "%s", jstr(r.body, "sandboxID"));
    if (token)
        snprintf(token, 80, "%s", jstr(r.body, "envdAccessToken"));
    resp_free(&r);
}

static void assert_error(struct resp *r, int status, const char *needle)
{
    ck_assert_msg(r->status == status, "want %d, got %d: %s", status, r->status, r->raw);
    ck_assert_ptr_nonnull(r->body);
    ck_assert_int_eq(json_integer_value(json_object_get(r->body, "code")), status);
    ck_assert_msg(!needle || strstr(jstr(r->body, "message"), needle), "message %s lacks %s",
                  jstr(r->body, "message"), needle);
}

/* ---- tests -------------------------------------------------------------------------------- */

START_TEST(create_shapes_v1_v2)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"timeout\":120,"
        "\"metadata\":{\"k\":\"v\"},\"envVars\":{\"A\":\"1\"}}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(strlen(jstr(r.body, "sandboxID")), CP_ID_LEN);
    ck_assert_str_eq(jstr(r.body, "templateID"), "base");
    ck_assert_str_eq(jstr(r.body, "envdVersion"), "0.6.4");
    ck_assert_uint_eq(strlen(jstr(r.body, "envdAccessToken")), CP_TOKEN_LEN);
    ck_assert_str_eq(jstr(r.body, "domain"), "sbx.test"); /* api.domain */
    /* The traffic token (the sandbox's other ports) derives from the envd token. */
    char traffic[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    al_http_traffic_token(jstr(r.body, "envdAccessToken"), CP_TOKEN_LEN, traffic);
    ck_assert_str_eq(jstr(r.body, "trafficAccessToken"), traffic);
    ck_assert_ptr_nonnull(jstr(r.body, "clientID"));
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(r.body, "sandboxID"));
    resp_free(&r);
    /* The previous generation's path, with its extra fields. */
    req(&r, "POST", "/sandboxes",
        "{\"templateID\":\"base\",\"secure\":true,"
        "\"allow_internet_access\":true}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.body, "state"), "running");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "cpuCount")), 2);
    ck_assert_str_eq(jstr(r.body, "domain"), "sbx.test");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "memoryMB")), 512);
    ck_assert_str_eq(jstr(json_object_get(r.body, "metadata"), "k"), "v");
    ck_assert_ptr_null(json_object_get(r.body, "envVars")); /* never echoed */
    ck_assert_str_eq(jstr(json_object_get(r.body, "lifecycle"), "onTimeout"), "kill");
    uint64_t s, e;
    ck_assert_int_eq(al_time_parse_rfc3339(jstr(r.body, "startedAt"), &s), 0);
    ck_assert_int_eq(al_time_parse_rfc3339(jstr(r.body, "endAt"), &e), 0);
    ck_assert_uint_eq((e - s) / 1000000000ull, 120);
    resp_free(&r);
}
END_TEST

START_TEST(create_validation)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", "{}");
    assert_error(&r, 400, "templateID");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "not json");
    assert_error(&r, 400, "JSON");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "[1]");
    assert_error(&r, 400, "object");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"frob\":1}");
    assert_error(&r, 400, "frob");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":0}");
    assert_error(&r, 400, "timeout");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":7200}");
    assert_error(&r, 400, "longer");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":1.5}");
    assert_error(&r, 400, "whole");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"metadata\":{\"k\":1}}");
    assert_error(&r, 400, "string");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"envVars\":{\"A=B\":\"1\"}}");
    assert_error(&r, 400, "variable name");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/v\"}]}");
    assert_error(&r, 400, "volumeMounts");
    resp_free(&r);
    /* A header transform toward a domain no rule with api_transforms: allow covers. */
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"rules\":{\"x.com\":[{\"transform\":"
        "{\"headers\":{\"X-A\":\"v\"}}}]}}}");
    assert_error(&r, 400, "network.rules: the domain 'x.com' is not covered");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"rules\":{\"x.com\":{}}}}");
    assert_error(&r, 400, "network.rules['x.com'] must be a list");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"egressProxy\":"
        "{\"address\":\"p:1080\"}}}");
    assert_error(&r, 400, "egressProxy");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"mcp\":{\"x\":1}}");
    assert_error(&r, 400, "mcp");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"autoResume\":{\"enabled\":true}}");
    assert_error(&r, 400, "autoPause");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"Bad Name\"}");
    assert_error(&r, 400, "template");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"no-such-template\"}");
    assert_error(&r, 404, "template 'no-such-template' not found");
    resp_free(&r);
    /* Policies: a named one must exist and be allowed; network fields are validated. */
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"nope\"}}");
    assert_error(&r, 400, "no policy \"nope\"");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"../etc\"}}");
    assert_error(&r, 400, "airlock.policy");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"},"
        "\"network\":{\"allowOut\":[\"api.github.com\"],\"denyOut\":[\"0.0.0.0/0\"]}}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"not a cidr!\"]}}");
    assert_error(&r, 400, "network");
    resp_free(&r);
    /* The template's default policy (template.json "policy"), unless metadata names one. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(g_started_policy, "default");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned\"}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(g_started_policy, "other");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"pinned\",\"metadata\":{\"airlock.policy\":\"default\"}}");
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(g_started_policy, "default");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned-missing\"}");
    assert_error(&r, 500, "template.json names it");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"pinned-bad\"}");
    assert_error(&r, 500, "\"policy\" must name a policy");
    resp_free(&r);
    /* A backend failure undoes everything and says why. */
    (void)0;
}
END_TEST

START_TEST(auth_keys)
{
    struct resp r;
    req_full(&r, g_target, "GET", "/v2/sandboxes", NULL, NULL, NULL, 0);
    assert_error(&r, 401, "X-API-KEY");
    resp_free(&r);
    req_full(&r, g_target, "GET", "/v2/sandboxes", "e2b_2222222222222222222222222222222222222222",
             NULL, NULL, 0);
    assert_error(&r, 401, "invalid API key");
    resp_free(&r);
    /* A stored key (as `airlock apikey create` makes them), restricted to one policy. */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    struct cp_apikey k = {0};
    cp_keyid_new(k.id);
    snprintf(k.name, sizeof k.name, "team");
    snprintf(k.policies, sizeof k.policies, "default");
    char key[CP_APIKEY_LEN + 1];
    cp_apikey_new(key);
    cp_digest(key, strlen(key), k.digest);
    ck_assert_int_eq(cp_store_key_insert(s2, &k, NULL), 0);
    req_full(&r, g_target, "POST", "/v2/sandboxes", key, "{\"templateID\":\"base\"}", NULL, 0);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    req_full(&r, g_target, "POST", "/v2/sandboxes", key,
             "{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"}}", NULL, 0);
    assert_error(&r, 403, "may not use policy \"other\"");
    resp_free(&r);
    /* Revoked by another connection: refused at once. */
    ck_assert_int_eq(cp_store_key_revoke(s2, k.id, al_wall_ns(), NULL), 0);
    cp_store_close(s2);
    req_full(&r, g_target, "GET", "/v2/sandboxes", key, NULL, NULL, 0);
    assert_error(&r, 401, "revoked");
    resp_free(&r);
    /* Two keys in one request are refused. */
    struct al_http_header two[] = {{"X-API-KEY", KEY_ENV}};
    req_full(&r, g_target, "GET", "/v2/sandboxes", KEY_ENV, NULL, two, 1);
    assert_error(&r, 401, "more than one");
    resp_free(&r);
    /* The local socket: root (us) needs no key. */
    char t[320];
    snprintf(t, sizeof t, "unix:%s/cp.sock", tmpdir);
    req_full(&r, t, "GET", "/v2/sandboxes", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* Liveness and metrics are open. */
    req_full(&r, g_target, "GET", "/health", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
}
END_TEST

START_TEST(list_pagination_and_filters)
{
    char ids[5][64];
    for (int i = 0; i < 5; i++) {
        char body[200];
        snprintf(body, sizeof body, "{\"templateID\":\"%s\",\"metadata\":{\"team\":\"%s\"}}",
                 i == 4 ? "code-interpreter-v1" : "base", i % 2 ? "odd one" : "even");
        create(body, ids[i], NULL);
        usleep(2000);
    }
    struct resp r;
    char path[512] = "/v2/sandboxes?limit=2";
    int total = 0, pages = 0;
    for (;;) {
        req(&r, "GET", path, NULL);
        ck_assert_int_eq(r.status, 200);
        ck_assert_uint_le(json_array_size(r.body), 2);
        total += (int)json_array_size(r.body);
        pages++;
        json_t *first = json_array_get(r.body, 0);
        ck_assert_ptr_nonnull(jstr(first, "startedAt"));
        ck_assert_ptr_null(json_object_get(first, "envdAccessToken"));
        if (!r.next[0]) {
            resp_free(&r);
            break;
        }
        snprintf(path, sizeof path, "/v2/sandboxes?limit=2&nextToken=%s", r.next);
        resp_free(&r);
    }
    ck_assert_int_eq(total, 5);
    ck_assert_int_eq(pages, 3);
    /* Newest first; asc on request. */
    req(&r, "GET", "/v2/sandboxes?limit=1", NULL);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "sandboxID"), ids[4]);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?limit=1&order=asc", NULL);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "sandboxID"), ids[0]);
    resp_free(&r);
    /* The SDK's triple-encoded metadata ("odd one"). */
    req(&r, "GET", "/v2/sandboxes?metadata=team%3Dodd%252520one", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 2);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?template=code-interpreter-v1", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
    /* v1: running only, all of them, no pagination. */
    char p2[128];
    snprintf(p2, sizeof p2, "/sandboxes/%s/pause", ids[0]);
    req(&r, "POST", p2, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "GET", "/sandboxes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 4);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?state=paused", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?state=zombie", NULL);
    assert_error(&r, 400, "running, paused");
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes?nextToken=xyz!", NULL);
    assert_error(&r, 400, "nextToken");
    resp_free(&r);
    /* Beyond sandboxes.max (6): 429, the SDK's RateLimitError. */
    char extra[64];
    create("{\"templateID\":\"base\"}", extra, NULL);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    assert_error(&r, 429, "maximum");
    resp_free(&r);
}
END_TEST

/* GET /templates and GET /templates/aliases/{alias} (the SDK's Template.exists). */
START_TEST(templates_list_and_alias)
{
    /* One from a registry (its digest is the build id), one half-made (a pull's temporary
     * name) and one directory that is no template. */
    char d[400];
    snprintf(d, sizeof d, "%s/templates/t-img/rootfs", tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/t-img/template.json", tmpdir);
    FILE *f = fopen(d, "w");
    fprintf(f, "{\"name\":\"t-img\",\"image\":{\"digest\":\"sha256:%064d\"}}\n", 7);
    fclose(f);
    snprintf(d, sizeof d, "%s/templates/.t-half.tmp/rootfs", tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/.t-half.tmp/template.json", tmpdir);
    fclose(fopen(d, "w"));
    snprintf(d, sizeof d, "%s/templates/no-json/rootfs", tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);

    struct resp r;
    req(&r, "GET", "/templates", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_array(r.body));
    const char *want[] = {"base",       "code-interpreter-v1", "failing", "noagent", "pinned",
                          "pinned-bad", "pinned-missing",      "slow",    "t-img"};
    ck_assert_uint_eq(json_array_size(r.body), 9);
    for (size_t i = 0; i < 9; i++) {
        json_t *t = json_array_get(r.body, i);
        ck_assert_str_eq(jstr(t, "templateID"), want[i]);
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "aliases"), 0)),
                         want[i]);
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "names"), 0)),
                         want[i]);
        ck_assert_str_eq(jstr(t, "buildStatus"), "ready");
        ck_assert(json_is_false(json_object_get(t, "public")));
        ck_assert_int_gt(json_integer_value(json_object_get(t, "memoryMB")), 0);
        ck_assert_int_gt(json_integer_value(json_object_get(t, "cpuCount")), 0);
        ck_assert_ptr_nonnull(strstr(jstr(t, "createdAt"), "T"));
        ck_assert_str_eq(
            jstr(t, "buildID"),
            i == 8 ? "sha256:0000000000000000000000000000000000000000000000000000000000000007"
                   : "");
    }
    resp_free(&r);

    req(&r, "GET", "/templates/aliases/code-interpreter-v1", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "code-interpreter-v1");
    ck_assert(json_is_false(json_object_get(r.body, "public")));
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/no-json", NULL);
    assert_error(&r, 404, "template 'no-json' not found (templates available: base, ");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/.t-half.tmp", NULL);
    assert_error(&r, 400, "not a template alias");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/Big%20Name", NULL);
    assert_error(&r, 400, "1..64 of a-z");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/base/x", NULL);
    assert_error(&r, 400, "not a template alias");
    resp_free(&r);
    req_full(&r, g_target, "GET", "/templates/aliases/base", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    /* What is not implemented says so. */
    req(&r, "GET", "/templates/base/tags", NULL);
    assert_error(&r, 501, "not supported");
    resp_free(&r);
}
END_TEST

/* The template build API as the SDK's Template.build speaks it (builds.c): a build requested
 * with POST /v3/templates waits for its definition; the definition is checked field by
 * field; the status answer pages the build's log by logsOffset and names the failing step;
 * GET /templates/{id} lists the builds; DELETE is refused while a sandbox uses the template. */
static int count_entries(const char *path)
{
    struct resp r;
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%s: %d %s", path, r.status, r.raw);
    int n = (int)json_array_size(json_object_get(r.body, "logEntries"));
    resp_free(&r);
    return n;
}

START_TEST(template_builds_api)
{
    struct resp r;
    char d0[400];
    struct stat st0;
    req(&r, "POST", "/v3/templates", "{\"name\":\"my-tpl\"}");
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "my-tpl");
    char bid[40], path[300];
    snprintf(bid, sizeof bid, "%s", jstr(r.body, "buildID"));
    ck_assert_uint_eq(strlen(bid), 36);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r.body, "names"), 0)),
                     "my-tpl");
    ck_assert(json_is_false(json_object_get(r.body, "public")));
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "tags")), 0);
    resp_free(&r);

    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "status"), "waiting");
    ck_assert_str_eq(jstr(r.body, "buildID"), bid);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "logEntries")), 0);
    ck_assert_ptr_null(json_object_get(r.body, "reason"));
    resp_free(&r);

    /* Listed (no files yet: the newest build's status), in name order with the others. */
    req(&r, "GET", "/templates", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *t = NULL;
    for (size_t i = 0; i < json_array_size(r.body); i++)
        if (strcmp(jstr(json_array_get(r.body, i), "templateID"), "my-tpl") == 0)
            t = json_array_get(r.body, i);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(jstr(t, "buildStatus"), "waiting");
    ck_assert_str_eq(jstr(t, "buildID"), "");
    ck_assert_str_eq(jstr(json_array_get(r.body, 2), "templateID"), "failing");
    ck_assert_str_eq(jstr(json_array_get(r.body, 3), "templateID"), "my-tpl");
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "builds")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "buildID"), bid);
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/my-tpl", NULL); /* Template.exists: requested, not built */
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "my-tpl");
    resp_free(&r);
    /* A template without builds recorded (a default one): one ready build. */
    req(&r, "GET", "/templates/base", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "status"), "ready");
    resp_free(&r);

    /* Requests that cannot be honoured say why. */
    const char *bad[][3] = {
        {"{\"name\":\"base\"}", "409", "default template"},
        {"{\"name\":\"my-tpl:v2\"}", "400", "tags are not supported"},
        {"{\"name\":\"x\",\"tags\":[\"v1\"]}", "400", "tags are not supported"},
        {"{\"name\":\"Big Name\"}", "400", "not a template name"},
        {"{\"name\":\"x\",\"cpuCount\":97}", "400", "leave cpuCount and memoryMB out"},
        {"{\"name\":\"x\",\"minFreeDiskMb\":99999999}", "400", "minFreeDiskMb"},
        {"{\"name\":\"x\",\"teamID\":\"t\"}", "400", "no teams"},
        {"{\"name\":\"x\",\"colour\":1}", "400", "unknown field \"colour\""},
        {"{\"cpuCount\":2}", "400", "\"name\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        req(&r, "POST", "/v3/templates", bad[i][0]);
        assert_error(&r, atoi(bad[i][1]), bad[i][2]);
        resp_free(&r);
    }

    /* Definitions are checked before anything is recorded. */
    snprintf(path, sizeof path, "/v2/templates/my-tpl/builds/%s", bid);
    const char *bad_def[][3] = {
        {"{\"steps\":[]}", "400", "exactly one of fromImage"},
        {"{\"fromImage\":\"a\",\"fromTemplate\":\"base\"}", "400", "exactly one of fromImage"},
        {"{\"fromTemplate\":\"nope\"}", "404", "template 'nope' not found"},
        {"{\"fromTemplate\":\"my-tpl\"}", "400", "cannot be built from itself"},
        {"{\"fromImage\":\"Not A Ref\"}", "400", NULL},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"FROB\",\"args\":[\"x\"]}]}", "400",
         "step 1: unknown step type \"FROB\""},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"1\"]},"
         "{\"type\":\"COPY\",\"args\":[\"a\",\"/b\"]}]}",
         "400", "step 2 (COPY a): \"filesHash\""},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\"]}]}", "400",
         "step 1 (ENV): 1 arguments"},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[1]}]}", "400",
         "argument 1 must be a string"},
        {"{\"fromTemplate\":\"base\",\"colour\":1}", "400", "unknown field \"colour\""},
        {"{\"fromImage\":\"busybox\",\"fromImageRegistry\":{\"type\":\"aws\","
         "\"awsAccessKeyId\":\"a\",\"awsSecretAccessKey\":\"b\",\"awsRegion\":\"c\"}}",
         "400", "fromImageRegistry"},
    };
    for (size_t i = 0; i < sizeof bad_def / sizeof *bad_def; i++) {
        req(&r, "POST", path, bad_def[i][0]);
        assert_error(&r, atoi(bad_def[i][1]), bad_def[i][2]);
        resp_free(&r);
    }
    req(&r, "POST", "/v2/templates/base/builds/00000000-0000-4000-8000-000000000000", "{}");
    assert_error(&r, 404, "has no build");
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/t-img/builds/%s", bid);
    req(&r, "POST", path, "{\"fromTemplate\":\"base\"}");
    assert_error(&r, 404, "has no build"); /* the build is my-tpl's */
    resp_free(&r);

    /* A valid definition is recorded; a step the runner cannot run ends the build before
     * anything is made, naming it. */
    snprintf(path, sizeof path, "/v2/templates/my-tpl/builds/%s", bid);
    req(&r, "POST", path,
        "{\"fromTemplate\":\"base\",\"startCmd\":\"sleep 1\",\"readyCmd\":null,\"force\":false,"
        "\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"1\"],\"force\":false},"
        "{\"type\":\"RUN\",\"args\":[\"true\",\"root\"]}]}");
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "POST", path, "{\"fromTemplate\":\"base\"}");
    assert_error(&r, 409, "already been started (it is error)");
    resp_free(&r);
    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "status"), "error");
    json_t *reason = json_object_get(r.body, "reason");
    ck_assert_str_eq(jstr(reason, "step"), "2");
    ck_assert_ptr_nonnull(
        strstr(jstr(reason, "message"), "step 2 (RUN true): RUN steps are not supported"));
    ck_assert_uint_eq(json_array_size(json_object_get(reason, "logEntries")), 1);
    json_t *logs = json_object_get(r.body, "logEntries");
    ck_assert_uint_eq(json_array_size(logs), 2);
    ck_assert_str_eq(jstr(json_array_get(logs, 0), "level"), "info");
    ck_assert_ptr_nonnull(strstr(jstr(json_array_get(logs, 0), "message"), "2 steps"));
    ck_assert_str_eq(jstr(json_array_get(logs, 1), "level"), "error");
    ck_assert_str_eq(jstr(json_array_get(logs, 1), "step"), "2");
    ck_assert_ptr_nonnull(strstr(jstr(json_array_get(logs, 1), "timestamp"), "T"));
    snprintf(d0, sizeof d0, "%s/templates/my-tpl", tmpdir);
    ck_assert_int_lt(stat(d0, &st0), 0);
    resp_free(&r);

    /* Paging: logsOffset skips what the client has, limit bounds an answer (100 unless
     * asked), level filters. Entries added by another connection to the database. */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    for (int i = 0; i < 150; i++)
        ck_assert_int_eq(cp_store_build_log_add(s2, bid, al_wall_ns(), i % 2, "1", "line", NULL),
                         0);
    cp_store_close(s2);
    char q[400];
    ck_assert_int_eq(count_entries(path), 100);
    snprintf(q, sizeof q, "%s?logsOffset=100", path);
    ck_assert_int_eq(count_entries(q), 52);
    snprintf(q, sizeof q, "%s?logsOffset=1&limit=1", path);
    req(&r, "GET", q, NULL);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "logEntries"), 0), "level"),
                     "error");
    resp_free(&r);
    snprintf(q, sizeof q, "%s?level=error", path);
    ck_assert_int_eq(count_entries(q), 1);
    snprintf(q, sizeof q, "%s?level=info&limit=1000", path);
    ck_assert_int_eq(count_entries(q), 77);
    snprintf(q, sizeof q, "%s?level=loud", path);
    req(&r, "GET", q, NULL);
    assert_error(&r, 400, "level must be");
    resp_free(&r);
    snprintf(q, sizeof q, "%s?logsOffset=-1", path);
    req(&r, "GET", q, NULL);
    assert_error(&r, 400, "logsOffset");
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl/builds/nope/status", NULL);
    assert_error(&r, 404, "has no build 'nope'");
    resp_free(&r);

    /* Deletion: not a default template, not while a sandbox uses it. */
    char d[400];
    snprintf(d, sizeof d, "%s/templates/t-del/rootfs", tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/t-del/template.json", tmpdir);
    FILE *f = fopen(d, "w");
    fprintf(f, "{\"name\":\"t-del\"}\n");
    fclose(f);
    req(&r, "DELETE", "/templates/base", NULL);
    assert_error(&r, 409, "default template");
    resp_free(&r);
    char id[64];
    create("{\"templateID\":\"t-del\"}", id, NULL);
    req(&r, "DELETE", "/templates/t-del", NULL);
    assert_error(&r, 409, "is used by 1 sandbox");
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), id));
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "DELETE", "/templates/t-del", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(d, sizeof d, "%s/templates/t-del", tmpdir);
    struct stat st;
    ck_assert_int_lt(stat(d, &st), 0);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"t-del\"}");
    assert_error(&r, 404, "template 't-del' not found");
    resp_free(&r);
    req(&r, "DELETE", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl", NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    resp_free(&r);
    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    assert_error(&r, 404, "has no build");
    resp_free(&r);
    req(&r, "DELETE", "/templates/nope", NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "DELETE", "/templates/..", NULL);
    assert_error(&r, 400, "not a template name");
    resp_free(&r);
}
END_TEST

/* Requests a build of name with definition def; returns its id. */
static void build_start(const char *name, const char *def, char bid[40])
{
    struct resp r;
    char body[200], path[300];
    snprintf(body, sizeof body, "{\"name\":\"%s\"}", name);
    req(&r, "POST", "/v3/templates", body);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    snprintf(bid, 40, "%s", jstr(r.body, "buildID"));
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/%s/builds/%s", name, bid);
    req(&r, "POST", path, def);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
}

/* Waits for the build to end (it runs on a worker thread); returns its status answer. */
static void build_wait(const char *name, const char *bid, struct resp *r)
{
    char path[300];
    snprintf(path, sizeof path, "/templates/%s/builds/%s/status", name, bid);
    for (int i = 0; i < 1000; i++) {
        req(r, "GET", path, NULL);
        ck_assert_msg(r->status == 200, "%d %s", r->status, r->raw);
        const char *st = jstr(r->body, "status");
        if (strcmp(st, "ready") == 0 || strcmp(st, "error") == 0)
            return;
        resp_free(r);
        usleep(10000);
    }
    ck_abort_msg("build %s did not end in 10 s", bid);
}

static json_t *tpl_json(const char *name)
{
    char p[400];
    snprintf(p, sizeof p, "%s/templates/%s/template.json", tmpdir, name);
    json_t *t = json_load_file(p, 0, NULL);
    ck_assert_msg(t != NULL, "no %s", p);
    return t;
}

/* The runner: fromTemplate with ENV, WORKDIR, USER, startCmd and readyCmd makes a template
 * (the base's files linked, not copied), which sandboxes start from; a rebuild replaces it
 * while a sandbox of the old version keeps its files; a failing build leaves the previous
 * version in use. */
START_TEST(template_build_runs)
{
    /* The base: files the new template must share (same inodes), a directory with its mode,
     * a link that points out of the root (kept as a link, never followed). */
    char p[400];
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc", tmpdir);
    ck_assert_int_eq(al_mkdir_p(p, 0750), 0);
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc/hostname", tmpdir);
    FILE *f = fopen(p, "w");
    fprintf(f, "base\n");
    fclose(f);
    struct stat sb, sn;
    ck_assert_int_eq(stat(p, &sb), 0);
    snprintf(p, sizeof p, "%s/templates/base/rootfs/out", tmpdir);
    ck_assert_int_eq(symlink("/etc/shadow", p), 0);

    char bid[40], bid2[40], bid3[40];
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"startCmd\":\"python3 -m http.server\","
                "\"readyCmd\":\"sleep 0\",\"steps\":["
                "{\"type\":\"ENV\",\"args\":[\"A\",\"1\",\"B\",\"two\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"/app/src\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"sub\"]},"
                "{\"type\":\"USER\",\"args\":[\"user\"]}]}",
                bid);
    struct resp r;
    build_wait("my-tpl", bid, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    json_t *logs = json_object_get(r.body, "logEntries");
    ck_assert_ptr_nonnull(strstr(r.raw, "the files of template base"));
    ck_assert_ptr_nonnull(strstr(r.raw, "WORKDIR /app/src/sub"));
    ck_assert_ptr_nonnull(strstr(r.raw, "template my-tpl is ready"));
    ck_assert_str_eq(jstr(json_array_get(logs, json_array_size(logs) - 1), "step"), "finalize");
    resp_free(&r);

    json_t *t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(t, "name"), "my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "A"), "1");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "B"), "two");
    ck_assert_str_eq(jstr(t, "workdir"), "/app/src/sub");
    ck_assert_str_eq(jstr(t, "user"), "user");
    ck_assert_str_eq(jstr(t, "start_cmd"), "python3 -m http.server");
    ck_assert_str_eq(jstr(t, "ready_cmd"), "sleep 0");
    ck_assert_str_eq(jstr(json_object_get(t, "build"), "id"), bid);
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/etc/hostname", tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert_uint_eq(sn.st_ino, sb.st_ino); /* linked */
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/etc", tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert_int_eq(sn.st_mode & 07777, 0750);
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/app/src/sub", tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert(S_ISDIR(sn.st_mode));
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/out", tmpdir);
    char lt[64] = "";
    ck_assert_int_eq(readlink(p, lt, sizeof lt - 1), 11);
    ck_assert_str_eq(lt, "/etc/shadow");

    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "status"), "ready");
    ck_assert_ptr_nonnull(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "finishedAt"));
    resp_free(&r);
    req(&r, "GET", "/templates", NULL);
    for (size_t i = 0; i < json_array_size(r.body); i++) {
        json_t *e = json_array_get(r.body, i);
        if (strcmp(jstr(e, "templateID"), "my-tpl") == 0) {
            ck_assert_str_eq(jstr(e, "buildID"), bid);
            ck_assert_str_eq(jstr(e, "buildStatus"), "ready");
        }
    }
    resp_free(&r);

    /* A sandbox of it; a rebuild replaces the template, the old version's files stay while
     * the sandbox exists. */
    char id[64];
    create("{\"templateID\":\"my-tpl\"}", id, NULL);
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"2\"]}]}",
                bid2);
    build_wait("my-tpl", bid2, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    resp_free(&r);
    t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "A"), "2");
    ck_assert_ptr_null(json_object_get(t, "start_cmd"));
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.prev-%s/template.json", tmpdir, bid2);
    ck_assert_int_eq(stat(p, &sn), 0);

    /* A build that fails leaves the current version in use and nothing of its own. */
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"3\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"../../x\"]}]}",
                bid3);
    build_wait("my-tpl", bid3, &r);
    ck_assert_str_eq(jstr(r.body, "status"), "error");
    ck_assert_str_eq(jstr(json_object_get(r.body, "reason"), "step"), "2");
    ck_assert_ptr_nonnull(strstr(jstr(json_object_get(r.body, "reason"), "message"),
                                 "step 2 (WORKDIR ../../x): not a path without '..'"));
    resp_free(&r);
    t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "build"), "id"), bid2);
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.build-%s", tmpdir, bid3);
    ck_assert_int_lt(stat(p, &sn), 0);
    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "builds")), 3);
    resp_free(&r);
    req(&r, "GET", "/templates", NULL);
    for (size_t i = 0; i < json_array_size(r.body); i++) {
        json_t *e = json_array_get(r.body, i);
        if (strcmp(jstr(e, "templateID"), "my-tpl") == 0) {
            ck_assert_str_eq(jstr(e, "buildID"), bid2); /* the newest ready one */
            ck_assert_str_eq(jstr(e, "buildStatus"), "error");
        }
    }
    resp_free(&r);

    /* Once the sandbox is gone, deleting the template takes the old version too. */
    char path[200];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "DELETE", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.prev-%s", tmpdir, bid2);
    for (int i = 0; i < 1000 && stat(p, &sn) == 0; i++)
        usleep(10000);
    ck_assert_int_lt(stat(p, &sn), 0);
    /* The base is untouched. */
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc/hostname", tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
}
END_TEST

/* PUT /sandboxes/{id}/network (sbx.updateNetwork()): E2B's replace semantics, checked
 * against the sandbox's policy like a creation, refusals that say why, saved in the store,
 * shown by getInfo. */
START_TEST(network_update)
{
    char id[64], path[160], info[160];
    create("{\"templateID\":\"base\",\"timeout\":60,\"network\":{\"allowOut\":[\"pypi.org\"],"
           "\"denyOut\":[\"0.0.0.0/0\"],\"allowPublicTraffic\":false}}",
           id, NULL);
    snprintf(path, sizeof path, "/sandboxes/%s/network", id);
    snprintf(info, sizeof info, "/sandboxes/%s", id);
    struct resp r;
    struct cp_sb_record rec;
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    char hash0[65];
    snprintf(hash0, sizeof hash0, "%s", rec.policy_hash);
    cp_sb_record_free(&rec);
    /* Replace: allowOut and allow_internet_access given, denyOut omitted (cleared). */
    req(&r, "GET", info, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "networkGeneration")), 0);
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowOut\":[\"a.example\"],\"allow_internet_access\":false}");
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_str_eq(r.etag, "\"1\""); /* the update's generation */
    resp_free(&r);
    req(&r, "GET", info, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "networkGeneration")), 1);
    json_t *n = json_object_get(r.body, "network");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(n, "allowOut"), 0)),
                     "a.example");
    ck_assert_uint_eq(json_array_size(json_object_get(n, "allowOut")), 1);
    ck_assert_ptr_null(json_object_get(n, "denyOut"));
    /* Not an egress field: kept from the creation. */
    ck_assert(json_is_false(json_object_get(n, "allowPublicTraffic")));
    ck_assert(json_is_false(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    /* Saved: the store holds the new fields and the new narrowed hash. */
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    ck_assert_int_eq(rec.allow_internet, 0);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rec.network, "allowOut"), 0)),
                     "a.example");
    ck_assert_str_ne(rec.policy_hash, hash0);
    ck_assert_uint_eq(rec.net_generation, 1); /* kept with the fields (restarts read it) */
    cp_sb_record_free(&rec);
    /* If-Match: the generation a client read; another one is a 412 and changes nothing. */
    struct al_http_header stale[] = {{"If-Match", "\"0\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV, "{\"allowOut\":[\"c.example\"]}", stale, 1);
    assert_error(&r, 412, "is at generation 1");
    resp_free(&r);
    struct al_http_header bad[] = {{"If-Match", "W/\"1\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV, "{\"allowOut\":[\"c.example\"]}", bad, 1);
    assert_error(&r, 400, "If-Match must name network generations");
    resp_free(&r);
    struct al_http_header cur[] = {{"If-Match", "\"0\", \"1\""}};
    req_full(&r, g_target, "PUT", path, KEY_ENV,
             "{\"allowOut\":[\"a.example\"],\"allow_internet_access\":false}", cur, 1);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    ck_assert_str_eq(r.etag, "\"2\"");
    resp_free(&r);
    /* Refusals leave everything as it was. */
    req(&r, "PUT", path, "{\"allowOut\":[\"0.0.0.0/0\"]}");
    assert_error(&r, 400, "'0.0.0.0/0' would allow all traffic");
    resp_free(&r);
    req(&r, "PUT", path, "{\"denyOut\":[\"not a cidr!\"]}");
    assert_error(&r, 400, "network.denyOut");
    resp_free(&r);
    req(&r, "PUT", path,
        "{\"rules\":{\"x.example\":[{\"transform\":{\"headers\":{\"X-A\":\"v\"}}}]}}");
    assert_error(&r, 400, "the domain 'x.example' is not covered");
    resp_free(&r);
    req(&r, "PUT", path, "{\"egressProxy\":{\"address\":\"p.example:1080\"}}");
    assert_error(&r, 400, "egressProxy");
    resp_free(&r);
    req(&r, "PUT", path, "{\"allow_internet_access\":\"no\"}");
    assert_error(&r, 400, "allow_internet_access");
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowPublicTraffic\":true}");
    assert_error(&r, 400, "not a field of a network update");
    resp_free(&r);
    req(&r, "PUT", path, "[1]");
    assert_error(&r, 400, "JSON object");
    resp_free(&r);
    req(&r, "GET", info, NULL);
    n = json_object_get(r.body, "network");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(n, "allowOut"), 0)),
                     "a.example");
    ck_assert(json_is_false(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    /* Everything omitted: the egress fields are cleared; the policy's own hash again. */
    req(&r, "PUT", path, "{}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "GET", info, NULL);
    n = json_object_get(r.body, "network");
    ck_assert_ptr_null(json_object_get(n, "allowOut"));
    ck_assert(json_is_false(json_object_get(n, "allowPublicTraffic")));
    ck_assert(json_is_null(json_object_get(r.body, "allowInternetAccess")));
    resp_free(&r);
    cp_sb_record_init(&rec);
    ck_assert_int_eq(cp_store_sb_load(g_cp.store, id, &rec, NULL), 0);
    ck_assert_int_eq(rec.allow_internet, -1);
    ck_assert_str_ne(rec.policy_hash, hash0);
    ck_assert_uint_eq(rec.net_generation, 3); /* refusals took no generation */
    cp_sb_record_free(&rec);
    /* Unknown sandbox, other methods, a paused sandbox. */
    req(&r, "PUT", "/sandboxes/nope1234/network", "{}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    assert_error(&r, 405, "PUT");
    resp_free(&r);
    snprintf(info, sizeof info, "/sandboxes/%s/pause", id);
    req(&r, "POST", info, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "PUT", path, "{\"allowOut\":[\"b.example\"]}");
    assert_error(&r, 409, "paused");
    resp_free(&r);
}
END_TEST

/* If-Match of a network update: quoted or bare generations, lists, *, nothing else. */
START_TEST(network_if_match)
{
    ck_assert_int_eq(cp_network_if_match(NULL, 7), 1);
    ck_assert_int_eq(cp_network_if_match("\"7\"", 7), 1);
    ck_assert_int_eq(cp_network_if_match("7", 7), 1);
    ck_assert_int_eq(cp_network_if_match("*", 7), 1);
    ck_assert_int_eq(cp_network_if_match(" \"3\" , \"7\"", 7), 1);
    ck_assert_int_eq(cp_network_if_match("\"6\"", 7), 0);
    ck_assert_int_eq(cp_network_if_match("\"6\",8", 7), 0);
    ck_assert_int_eq(cp_network_if_match("18446744073709551615", 7), 0);
    const char *bad[] = {"",  "\"\"", "\"7", "W/\"7\"", "7,",
                         "x", "-1",   "7 8", "\"7\"x",  "99999999999999999999",
                         NULL};
    for (size_t i = 0; bad[i]; i++)
        ck_assert_msg(cp_network_if_match(bad[i], 7) == -EINVAL, "accepted '%s'", bad[i]);
}
END_TEST

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
    snprintf(logp, sizeof logp, "%s/agent.log", tmpdir);
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
    /* Unsupported endpoints say so. */
    snprintf(path, sizeof path, "/sandboxes/%s/fork", id);
    req(&r, "POST", path, "{}");
    assert_error(&r, 501, "not supported");
    resp_free(&r);
    req(&r, "POST", "/volumes", "{}");
    assert_error(&r, 501, "not supported");
    resp_free(&r);
    req(&r, "GET", "/nope", NULL);
    assert_error(&r, 404, "no such endpoint");
    resp_free(&r);
    /* Kill: 204, then 404 (the SDK's false). */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
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
 * the others waited is the "queue" stage's. */
START_TEST(starts_take_turns)
{
    enum { N = 4 };
    pthread_t t[N];
    struct tt_create a[N];
    memset(a, 0, sizeof a);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, tt_create, &a[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
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
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
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

START_TEST(dataplane_routing)
{
    char id[64], tok[80], path[160];
    create("{\"templateID\":\"base\"}", id, tok);
    struct resp r;
    /* By E2b-Sandbox-Id: everything reaches the agent unchanged. */
    struct al_http_header h[] = {
        {"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Port", "49999"}, {"X-Access-Token", tok}};
    req_full(&r, g_target, "POST", "/execute?x=1", NULL, "{\"code\":\"1\"}", h, 3);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "target"), "/execute?x=1");
    ck_assert_str_eq(jstr(r.body, "port"), "49999");
    ck_assert_str_eq(jstr(r.body, "token"), tok);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "body_len")), 12);
    resp_free(&r);
    req_full(&r, g_target, "GET", "/stream", NULL, NULL, h, 1);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.raw, "chunk\nchunk\nchunk\n");
    resp_free(&r);
    /* By X-Access-Token alone (SDKs before 2.14.1 on /files and /health). */
    struct al_http_header t[] = {{"X-Access-Token", tok}};
    req_full(&r, g_target, "GET", "/files?path=/x", NULL, NULL, t, 1);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(jstr(r.body, "sandbox"));
    ck_assert_str_eq(jstr(r.body, "target"), "/files?path=/x");
    resp_free(&r);
    /* ... but never for control-plane paths. */
    req_full(&r, g_target, "GET", "/v2/sandboxes", NULL, NULL, t, 1);
    assert_error(&r, 401, "X-API-KEY");
    resp_free(&r);
    struct al_http_header badtok[] = {{"X-Access-Token", "0123"}};
    req_full(&r, g_target, "GET", "/files?path=/x", NULL, NULL, badtok, 1);
    assert_error(&r, 502, "access token");
    resp_free(&r);
    /* By Host, as getHost(port) builds it (api.domain set): the sandbox headers are made
     * from the Host, whatever the client sent. */
    char host[128];
    snprintf(host, sizeof host, "8080-%s.sbx.test:3000", id);
    struct al_http_header hh[] = {{"Host", host}, {"E2b-Sandbox-Port", "49983"}};
    req_full(&r, g_target, "POST", "/app?x=2", NULL, "{}", hh, 2);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "sandbox"), id);
    ck_assert_str_eq(jstr(r.body, "port"), "8080");
    resp_free(&r);
    /* Unknown (by Host or by header): E2B's proxy's answer, naming the id. */
    struct al_http_header hx[] = {{"Host", "8080-nosuch.sbx.test"}};
    req_full(&r, g_target, "GET", "/", NULL, NULL, hx, 1);
    assert_error(&r, 502, NULL);
    ck_assert_str_eq(jstr(r.body, "message"), "The sandbox was not found");
    ck_assert_str_eq(jstr(r.body, "sandboxId"), "nosuch");
    ck_assert_uint_eq(json_object_size(r.body), 3);
    resp_free(&r);
    /* Duplicated, paused. */
    struct al_http_header unk[] = {{"E2b-Sandbox-Id", "nosuchsandbox"}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, unk, 1);
    assert_error(&r, 502, NULL);
    ck_assert_str_eq(jstr(r.body, "message"), "The sandbox was not found");
    ck_assert_str_eq(jstr(r.body, "sandboxId"), "nosuchsandbox");
    ck_assert_uint_eq(json_object_size(r.body), 3);
    resp_free(&r);
    struct al_http_header dup[] = {{"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Id", id}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, dup, 2);
    assert_error(&r, 400, "more than one");
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s/pause", id);
    req(&r, "POST", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req_full(&r, g_target, "GET", "/health", NULL, NULL, h, 1);
    assert_error(&r, 502, "paused");
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s/connect", id);
    req(&r, "POST", path, "{}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    /* autoResume: traffic wakes a paused sandbox, but only traffic holding one of its
     * credentials; knowing the id (or a getHost name) is not enough. */
    char ar[64], artok[80], artt[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    create("{\"templateID\":\"base\",\"autoPause\":true,\"autoResume\":{\"enabled\":true}}", ar,
           artok);
    al_http_traffic_token(artok, strlen(artok), artt);
    snprintf(path, sizeof path, "/sandboxes/%s/pause", ar);
    req(&r, "POST", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    int resumes = g_resumes;
    struct al_http_header a0[] = {{"E2b-Sandbox-Id", ar}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, a0, 1);
    assert_error(&r, 403, "access token");
    resp_free(&r);
    struct al_http_header a1[] = {{"E2b-Sandbox-Id", ar}, {"X-Access-Token", tok}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, a1, 2); /* another sandbox's token */
    assert_error(&r, 403, "access token");
    resp_free(&r);
    struct al_http_header a2[] = {
        {"E2b-Sandbox-Id", ar}, {"X-Access-Token", artok}, {"X-Access-Token", artok}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, a2, 3);
    assert_error(&r, 403, "access token");
    resp_free(&r);
    ck_assert_int_eq(g_resumes, resumes);
    snprintf(path, sizeof path, "/sandboxes/%s", ar);
    req(&r, "GET", path, NULL);
    ck_assert_str_eq(jstr(r.body, "state"), "paused");
    resp_free(&r);
    struct al_http_header a3[] = {{"E2b-Sandbox-Id", ar}, {"E2B-Traffic-Access-Token", artt}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, a3, 2);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw); /* the agent's /health */
    resp_free(&r);
    ck_assert_int_eq(g_resumes, resumes + 1);
    snprintf(path, sizeof path, "/sandboxes/%s/pause", ar);
    req(&r, "POST", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    struct al_http_header a4[] = {{"E2b-Sandbox-Id", ar}, {"X-Access-Token", artok}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, a4, 2);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw); /* the agent's /health */
    resp_free(&r);
    ck_assert_int_eq(g_resumes, resumes + 2);
    /* A sandbox whose agent does not answer: 502 (the SDK's "sandbox not running"). */
    char id2[64];
    create("{\"templateID\":\"noagent\"}", id2, NULL);
    struct al_http_header h2[] = {{"E2b-Sandbox-Id", id2}};
    req_full(&r, g_target, "GET", "/health", NULL, NULL, h2, 1);
    assert_error(&r, 502, "not reachable");
    resp_free(&r);
}
END_TEST

static int count_rows(const struct cp_sb_record *r, void *arg)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

START_TEST(failed_create_leaves_nothing)
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"base\"}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    /* The backend fails: every step is undone and the error says why. */
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"failing\"}");
    assert_error(&r, 500, "fake failure");
    resp_free(&r);
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    int rows = 0;
    ck_assert_int_eq(cp_store_sb_foreach(s2, count_rows, NULL, &rows, NULL), 0);
    ck_assert_int_eq(rows, 1);
    cp_store_close(s2);
    req(&r, "GET", "/v2/sandboxes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    resp_free(&r);
}
END_TEST

/* A raw TCP connection to airlockd (for what the blocking client cannot do). */
static int raw_connect(void)
{
    int port = atoi(strchr(g_target, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static size_t raw_read_until(int fd, char *buf, size_t cap, const char *needle)
{
    size_t len = 0;
    buf[0] = '\0';
    while (len + 1 < cap && !strstr(buf, needle)) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
    }
    return len;
}

START_TEST(proxy_cut_off_downloads_fail_in_the_client)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    struct al_http_header h[] = {{"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Port", "49983"}};
    const char *paths[] = {"/cut-chunked", "/cut-length"};
    for (int i = 0; i < 2; i++) {
        struct al_http_resp out = {0};
        struct al_error err = {0};
        struct al_http_call_opts o = {.target = g_target,
                                      .method = "GET",
                                      .path = paths[i],
                                      .headers = h,
                                      .n_headers = 2,
                                      .timeout_ms = 10000};
        int rc = al_http_call(&o, &out, &err);
        /* The agent's reply broke after 64 KiB: the relayed one must break too, never pass
         * for a complete (shorter) download. */
        ck_assert_msg(rc < 0, "%s: a cut-off download looked complete (%zu bytes)", paths[i],
                      out.body.len);
        ck_assert_msg(strstr(err.msg, "in the middle of the response"), "%s: %s", paths[i],
                      err.msg);
        al_http_resp_free(&out);
    }
    /* The proxy still serves. */
    struct resp r;
    req_full(&r, g_target, "GET", "/health", NULL, NULL, h, 1);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
}
END_TEST

START_TEST(proxy_keeps_host_and_length_and_drops_connection_fields)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    /* Raw, as the blocking client would not send a Connection header of ours. */
    int fd = raw_connect();
    char req_s[512];
    snprintf(req_s, sizeof req_s,
             "POST /seen HTTP/1.1\r\nHost: 8080-%s.sbx.test\r\nConnection: keep-alive, X-Drop\r\n"
             "X-Drop: 1\r\nX-Keep: 2\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
             id);
    ck_assert_int_eq(send(fd, req_s, strlen(req_s), MSG_NOSIGNAL), (ssize_t)strlen(req_s));
    char buf[4096];
    raw_read_until(fd, buf, sizeof buf, "}");
    close(fd);
    char *body = strstr(buf, "\r\n\r\n");
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && body, "%s", buf);
    json_t *o = json_loads(body + 4, 0, NULL);
    ck_assert_ptr_nonnull(o);
    char host[128];
    snprintf(host, sizeof host, "8080-%s.sbx.test", id);
    ck_assert_str_eq(jstr(o, "host"), host); /* what the in-sandbox server is told */
    ck_assert_str_eq(jstr(o, "cl"), "7");    /* a Content-Length body stays one */
    ck_assert_ptr_null(jstr(o, "te"));
    ck_assert_ptr_null(jstr(o, "drop")); /* named by Connection: this hop's only */
    ck_assert_str_eq(jstr(o, "keep"), "2");
    json_decref(o);
}
END_TEST

/* Every sandbox's origins are "<port>-<id>.<api.domain>": a cookie a sandbox scopes to
 * the domain (any spelling) would reach the others'. Each Set-Cookie field loses its Domain
 * attributes and stays host-only; the rest of it is relayed unchanged. */
START_TEST(proxy_makes_sandbox_cookies_host_only)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    int fd = raw_connect();
    char req_s[512];
    snprintf(req_s, sizeof req_s, "GET /cookies HTTP/1.1\r\nHost: 8080-%s.sbx.test\r\n\r\n", id);
    ck_assert_int_eq(send(fd, req_s, strlen(req_s), MSG_NOSIGNAL), (ssize_t)strlen(req_s));
    char buf[4096];
    raw_read_until(fd, buf, sizeof buf, "\r\n\r\nok");
    close(fd);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "%s", buf);
    ck_assert_msg(strcasestr(buf, "domain=") == strcasestr(buf, "e=domain=x") + 2, "%s", buf);
    ck_assert_ptr_null(strcasestr(buf, "DOMAIN ="));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nSet-Cookie: a=1; Path=/\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, ": b=2;HttpOnly\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, ": c=3; Secure; SameSite=Lax\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, ": d=4; Path=/x\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, ": e=domain=x; Max-Age=60\r\n"));

    /* The function itself: bare attribute, empty value, nothing to drop. */
    char out[128];
    ck_assert(cp_proxy_cookie_host_only("x=1; Domain; Path=/", out, sizeof out));
    ck_assert_str_eq(out, "x=1; Path=/");
    ck_assert(cp_proxy_cookie_host_only("x=1;Domain=", out, sizeof out));
    ck_assert_str_eq(out, "x=1");
    ck_assert(!cp_proxy_cookie_host_only("Domain=sbx.test; Path=/", out, sizeof out));
    ck_assert_str_eq(out, "Domain=sbx.test; Path=/");     /* a cookie named Domain keeps its name */
    ck_assert(!cp_proxy_cookie_host_only("x=1", out, 4)); /* exactly the room it needs */
    ck_assert_str_eq(out, "x=1");
    ck_assert(!cp_proxy_cookie_host_only("x=1; Domains=a; Path=/", out, sizeof out));
    ck_assert_str_eq(out, "x=1; Domains=a; Path=/");
}
END_TEST

START_TEST(proxy_relays_websocket_upgrades)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    int fd = raw_connect();
    char req_s[512];
    snprintf(req_s, sizeof req_s,
             "GET /ws HTTP/1.1\r\nHost: 3000-%s.sbx.test\r\nConnection: Upgrade\r\n"
             "Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             "Sec-WebSocket-Version: 13\r\n\r\nhello",
             id);
    ck_assert_int_eq(send(fd, req_s, strlen(req_s), MSG_NOSIGNAL), (ssize_t)strlen(req_s));
    char buf[4096];
    raw_read_until(fd, buf, sizeof buf, "hello");
    ck_assert_msg(strncmp(buf, "HTTP/1.1 101 ", 13) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strcasestr(buf, "\r\nUpgrade: websocket\r\n"));
    ck_assert_ptr_nonnull(strcasestr(buf, "\r\nSec-WebSocket-Accept: abc\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nhello"));
    ck_assert_int_eq(send(fd, "more", 4, MSG_NOSIGNAL), 4);
    raw_read_until(fd, buf, sizeof buf, "more");
    ck_assert_str_eq(buf, "more");
    shutdown(fd, SHUT_WR);
    ck_assert_int_eq(recv(fd, buf, sizeof buf, 0), 0); /* the end passed through both hops */
    close(fd);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest");
    TCase *t = tcase_create("rest");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, create_shapes_v1_v2);
    tcase_add_test(t, create_validation);
    tcase_add_test(t, network_update);
    tcase_add_test(t, network_if_match);
    tcase_add_test(t, auth_keys);
    tcase_add_test(t, templates_list_and_alias);
    tcase_add_test(t, template_builds_api);
    tcase_add_test(t, template_build_runs);
    tcase_add_test(t, list_pagination_and_filters);
    tcase_add_test(t, lifecycle_ops);
    tcase_add_test(t, starts_take_turns);
    tcase_add_test(t, starts_go_in_request_order);
    tcase_add_test(t, timeout_kills_and_crash_is_detected);
    tcase_add_test(t, dataplane_routing);
    tcase_add_test(t, failed_create_leaves_nothing);
    tcase_add_test(t, proxy_cut_off_downloads_fail_in_the_client);
    tcase_add_test(t, proxy_keeps_host_and_length_and_drops_connection_fields);
    tcase_add_test(t, proxy_relays_websocket_upgrades);
    tcase_add_test(t, proxy_makes_sandbox_cookies_host_only);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
