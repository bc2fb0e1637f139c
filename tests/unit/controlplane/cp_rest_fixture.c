/* tests/unit/controlplane/cp_rest_fixture: the world the test_cp_rest_* suites share.
 * airlockd's router on a real HTTP server (its own loop thread) with a fake backend
 * (sandboxes are `sleep` processes watched through pidfds) and a fake agent on a unix socket;
 * requests come from the test thread with the blocking client, exactly as bytes on the wire.
 * See cp_rest_fixture.h for what a suite gets. */
#include "cp_rest_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "controlplane/metrics.h"

char g_tmpdir[256];
struct cp g_cp;
static pthread_t g_thread;
static uv_async_t g_stop;
char g_target[64];
static struct al_http_server *g_agent;
static char g_agent_sock[300];
int g_stops, g_pauses, g_resumes;

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

pthread_mutex_t g_ready_mu = PTHREAD_MUTEX_INITIALIZER;
char g_ready_reply[1024];
int g_ready_after, g_ready_polls;
char g_ready_token[128];
char g_started_cmds[512];
atomic_int g_started_pid;

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
    if (strcmp(req->path, "/console-cookie") == 0) {
        /* A sandbox answering on airlockd's own host that tries to plant a console session. */
        struct al_http_header h[] = {{"Set-Cookie", "airlock_console=planted; Path=/"},
                                     {"Set-Cookie", " __Host-airlock_console=planted; Secure"},
                                     {"Set-Cookie", "airlock_consoleX=kept"}};
        al_http_resp_start(req, 200, h, 3, 2);
        al_http_resp_write(req, "ok", 2);
        al_http_resp_end(req);
        return;
    }
    if (strcmp(req->path, "/seen") == 0) {
        /* What reached the agent: Host, framing, a Connection-named field. */
        json_t *o = json_pack(
            "{s:s?,s:s?,s:s?,s:s?,s:s?,s:s?,s:s?}", "host", al_http_req_header(req, "Host"), "cl",
            al_http_req_header(req, "Content-Length"), "te",
            al_http_req_header(req, "Transfer-Encoding"), "drop", al_http_req_header(req, "X-Drop"),
            "keep", al_http_req_header(req, "X-Keep"), "connection",
            al_http_req_header(req, "Connection"), "cookie", al_http_req_header(req, "Cookie"));
        al_http_reply_json(req, 200, o);
        return;
    }
    if (strcmp(req->path, "/health") == 0) {
        al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    if (strcmp(req->path, "/ready") == 0) {
        /* The agent's startCmd/readyCmd state: g_ready_reply for the first g_ready_after
         * polls (all of them when negative), then ready. */
        pthread_mutex_lock(&g_ready_mu);
        int n = ++g_ready_polls;
        const char *tok = al_http_req_header(req, "X-Access-Token");
        snprintf(g_ready_token, sizeof g_ready_token, "%s", tok ? tok : "");
        const char *body =
            g_ready_after < 0 || n <= g_ready_after ? g_ready_reply : "{\"state\":\"ready\"}";
        al_http_reply(req, 200, "application/json", body, strlen(body));
        pthread_mutex_unlock(&g_ready_mu);
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
char g_start_order[8][CP_ID_LEN + 1];
int g_n_started;

struct fb_later {
    uv_timer_t t;
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    int rc;
    bool start;
    bool gated; /* ends only once the start queue holds g_start_gate sandboxes */
    int polls;
};

/* starts_go_in_request_order, starts_take_turns: the next start waits (polled on the loop
 * thread, which owns the queue) until this many creations wait in the start queue; 0: no
 * gate. */
atomic_int g_start_gate;

/* Starts in flight in the fake backend, and the most there were at once (loop thread). */
static int g_fb_starting;
int g_fb_starting_max;

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

char g_started_policy[CP_POLICY_NAME_MAX]; /* the policy of the last start */

static int fb_start(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb)
{
    snprintf(g_started_policy, sizeof g_started_policy, "%s", sb->rec.policy_name);
    pthread_mutex_lock(&g_ready_mu);
    snprintf(g_started_cmds, sizeof g_started_cmds, "%s|%s", a->start_cmd ? a->start_cmd : "-",
             a->ready_cmd ? a->ready_cmd : "-");
    pthread_mutex_unlock(&g_ready_mu);
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
    atomic_store(&g_started_pid, (int)pid);
    if (strcmp(sb->rec.template_id, "noagent") == 0)
        snprintf(sb->agent_sock, sizeof sb->agent_sock, "%s/none.sock", g_tmpdir);
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
    snprintf(out, len, "%s/agent.log", g_tmpdir);
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

void cp_rest_setup(void)
{
    ck_assert_int_ge(sodium_init(), 0);
    signal(SIGPIPE, SIG_IGN);
    al_test_tmpdir(g_tmpdir, sizeof g_tmpdir, "cp-rest");
    memset(&g_cp, 0, sizeof g_cp);
    g_fb_starting = g_fb_starting_max = 0;
    g_n_started = 0;
    g_ready_polls = g_ready_after = 0;
    snprintf(g_ready_reply, sizeof g_ready_reply, "{\"state\":\"ready\"}");
    struct cp *cp = &g_cp;
    char cfgp[300];
    snprintf(cfgp, sizeof cfgp, "%s/cfg.yaml", g_tmpdir);
    FILE *f = fopen(cfgp, "w");
    fprintf(f,
            "state_dir: %s\nsandboxes:\n  max: 6\n  max_timeout: 1h\n  default_timeout: 300s\n"
            "  start_concurrency: 1\n  ready_timeout: 1s\napi:\n  domain: sbx.test\n",
            g_tmpdir);
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
        snprintf(d, sizeof d, "%s/templates/%s/rootfs", g_tmpdir, tpls[i]);
        ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
        snprintf(d, sizeof d, "%s/templates/%s/template.json", g_tmpdir, tpls[i]);
        f = fopen(d, "w");
        fprintf(f, "{\"name\":\"%s\"%s}\n", tpls[i], tpl_extra[i]);
        fclose(f);
    }
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
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
    snprintf(sock, sizeof sock, "%s/cp.sock", g_tmpdir);
    ck_assert_int_eq(al_http_server_listen_unix(cp->local, sock, 0600, NULL), 0);
    struct al_http_server_opts ao = {.on_request = agent__on_request};
    ck_assert_int_eq(al_http_server_new(cp->loop, &ao, &g_agent), 0);
    snprintf(g_agent_sock, sizeof g_agent_sock, "%s/agent.sock", g_tmpdir);
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

void cp_rest_teardown(void)
{
    uv_async_send(&g_stop);
    pthread_join(g_thread, NULL);
    /* Sandboxes a test left running: their `sleep` processes must not outlive it. */
    cp_map_foreach(&g_cp.sandboxes, kill_each, NULL);
    /* Volumes a test made stay mounted (as they do across airlockd's restarts). */
    char vols[300];
    snprintf(vols, sizeof vols, "%s/volumes", g_tmpdir);
    DIR *d = opendir(vols);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char m[600];
        snprintf(m, sizeof m, "%s/%s", vols, de->d_name);
        if (de->d_name[0] != '.')
            umount2(m, MNT_DETACH);
    }
    if (d)
        closedir(d);
    ck_assert_int_eq(al_test_rmtree(g_tmpdir), 0);
}

/* ---- helpers ------------------------------------------------------------------------------ */

void req_full(struct resp *r, const char *target, const char *method, const char *path,
              const char *key, const char *body, const struct al_http_header *extra, size_t n_extra)
{
    struct al_http_header h[16] = {{NULL, NULL}};
    size_t n = 0;
    if (key)
        h[n++] = (struct al_http_header){"X-API-KEY", key};
    bool typed = false;
    for (size_t i = 0; i < n_extra; i++)
        typed |= strcasecmp(extra[i].name, "Content-Type") == 0;
    if (body && !typed)
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
    size_t used = 0;
    for (size_t i = 0; i < out.n_headers && r->n_headers < 48; i++) {
        size_t nl = strlen(out.headers[i].name) + 1, vl = strlen(out.headers[i].value) + 1;
        ck_assert_msg(used + nl + vl <= sizeof r->hbuf, "the answer's headers are too long");
        char *name = memcpy(r->hbuf + used, out.headers[i].name, nl);
        char *value = memcpy(r->hbuf + used + nl, out.headers[i].value, vl);
        used += nl + vl;
        r->headers[r->n_headers++] = (struct al_http_header){name, value};
    }
    al_http_resp_free(&out);
}

const char *resp_header(const struct resp *r, const char *name, size_t nth)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (strcasecmp(r->headers[i].name, name) == 0 && nth-- == 0)
            return r->headers[i].value;
    return NULL;
}

void req(struct resp *r, const char *method, const char *path, const char *body)
{
    req_full(r, g_target, method, path, KEY_ENV, body, NULL, 0);
}

void resp_free(struct resp *r)
{
    json_decref(r->body);
    r->body = NULL;
}

const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* Creates a sandbox and returns its id (and token). */
void create(const char *body, char id[64], char token[80])
{
    struct resp r;
    req(&r, "POST", "/v2/sandboxes", body);
    ck_assert_msg(r.status == 201, "create: %d %s", r.status, r.raw);
    snprintf(id, 64, "%s", jstr(r.body, "sandboxID"));
    if (token)
        snprintf(token, 80, "%s", jstr(r.body, "envdAccessToken"));
    resp_free(&r);
}

struct cp_apikey add_key(const char *name, unsigned role, const char *policies,
                         char key[CP_APIKEY_LEN + 1])
{
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    struct cp_apikey k = {0};
    cp_keyid_new(k.id);
    snprintf(k.name, sizeof k.name, "%s", name);
    snprintf(k.policies, sizeof k.policies, "%s", policies ? policies : "*");
    k.role = role;
    k.created_ns = al_wall_ns();
    cp_apikey_new(key);
    cp_digest(key, strlen(key), k.digest);
    struct al_error err = {0};
    ck_assert_msg(cp_store_key_insert(s2, &k, &err) == 0, "%s", al_error_str(&err));
    cp_store_close(s2);
    return k;
}

void assert_error(struct resp *r, int status, const char *needle)
{
    ck_assert_msg(r->status == status, "want %d, got %d: %s", status, r->status, r->raw);
    ck_assert_ptr_nonnull(r->body);
    ck_assert_int_eq(json_integer_value(json_object_get(r->body, "code")), status);
    ck_assert_msg(!needle || strstr(jstr(r->body, "message"), needle), "message %s lacks %s",
                  jstr(r->body, "message"), needle);
}

TCase *cp_rest_tcase(const char *name)
{
    TCase *t = tcase_create(name);
    tcase_add_checked_fixture(t, cp_rest_setup, cp_rest_teardown);
    tcase_set_timeout(t, 60);
    return t;
}

/* ---- template builds (test_cp_rest_templates, test_cp_rest_snapshots) ---- */

void build_wait(const char *name, const char *bid, struct resp *r)
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

/* A build requested with body (a name with a tag, tags) of template tid; its id into bid. */
void build_tagged(const char *body, const char *tid, const char *def, char bid[40],
                  const char *want_tags)
{
    struct resp r;
    char path[300];
    req(&r, "POST", "/v3/templates", body);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    snprintf(bid, 40, "%s", jstr(r.body, "buildID"));
    char *tags = json_dumps(json_object_get(r.body, "tags"), JSON_COMPACT);
    ck_assert_str_eq(tags, want_tags);
    free(tags);
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/%s/builds/%s", tid, bid);
    req(&r, "POST", path, def);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
    build_wait(tid, bid, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    resp_free(&r);
}

bool exists_within(const char *p, bool want)
{
    struct stat st;
    for (int i = 0; i < 1000 && (stat(p, &st) == 0) != want; i++)
        usleep(10000);
    return (stat(p, &st) == 0) == want;
}

int raw_connect(void)
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
