/* Unit tests: vmm/guest/forward.c, the sandbox's other ports. The agent's router
 * (agent_on_request) serves on 127.0.0.1 next to "upstream" servers standing in for what a
 * sandbox runs (also one on [::1] only), all on one loop thread; the test thread talks to
 * the agent with the blocking client or raw sockets, as airlockd would over its channel.
 *
 * Covered: what the server sees (method, target, Host, end-to-end fields; hop-by-hop fields,
 * airlock's routing headers and tokens removed; Via added; no X-Forwarded-*), body framing
 * kept, large bodies both ways, 502 for a closed port (JSON), the [::1] fallback, 504 for a
 * server that does not answer, a server dying mid-response (the client's reply breaks too),
 * the token rules (traffic token or envd token; the traffic token does not open envd), bad
 * ports, hop-by-hop response fields, WebSocket upgrades, a client leaving mid-response. */
#include "al_test.h"
#include "common/http.h"
#include "common/json.h"
#include "vmm/guest/agent.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static uv_loop_t L;
static pthread_t g_th;
static uv_async_t g_stop;
static struct agent A;
static struct al_http_server *g_agent, *g_up, *g_up6;
static char g_agent_target[64];
static int g_up_port, g_up6_port, g_agent_port;
static char g_token[] = "envd-token-0123456789abcdef";
static atomic_int g_up_closes, g_up_requests;

/* ---- the upstream: what a sandbox runs ----------------------------------------------------- */

static void up__seen_body(struct al_http_req *req, int err)
{
    if (err)
        return;
    json_t *h = json_object();
    for (size_t i = 0; i < req->n_headers; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s", req->headers[i].name);
        for (char *c = name; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
        json_object_set_new(h, name, json_string(req->headers[i].value));
    }
    unsigned long sum = 0;
    for (size_t i = 0; i < req->body.len; i++)
        sum = sum * 31 + (unsigned char)req->body.data[i];
    json_t *o =
        json_pack("{s:s,s:s,s:o,s:I,s:b,s:I,s:I}", "method", req->method, "target", req->target,
                  "headers", h, "cl", (json_int_t)req->content_length, "chunked", req->chunked,
                  "len", (json_int_t)req->body.len, "sum", (json_int_t)(sum & 0x7fffffff));
    al_http_reply_json(req, 200, o);
}

struct up_bulk {
    struct al_http_req *req;
    size_t left, sent;
};

static void up__bulk_pump(struct al_http_req *req)
{
    struct up_bulk *b = req->user;
    char piece[32768];
    while (b->left) {
        if (al_http_resp_queued(req) > 512 * 1024) {
            al_http_resp_on_drain(req, 128 * 1024, up__bulk_pump);
            return;
        }
        size_t n = b->left < sizeof piece ? b->left : sizeof piece;
        for (size_t i = 0; i < n; i++)
            piece[i] = (char)((b->sent + i) * 13 % 253);
        if (al_http_resp_write(req, piece, n) < 0)
            break;
        b->left -= n;
        b->sent += n;
    }
    req->user = NULL;
    al_http_resp_end(req);
    free(b);
}

static void up__bulk_closed(struct al_http_req *req)
{
    atomic_fetch_add(&g_up_closes, 1);
    free(req->user);
    req->user = NULL;
}

static void up__hold_closed(struct al_http_req *req)
{
    (void)req;
    atomic_fetch_add(&g_up_closes, 1);
}

static int up__ws_data(struct al_http_tunnel *t, const char *d, size_t n, void *arg)
{
    (void)arg;
    char buf[4096];
    size_t k = n < sizeof buf ? n : sizeof buf;
    for (size_t i = 0; i < k; i++)
        buf[i] = (char)(d[i] >= 'a' && d[i] <= 'z' ? d[i] - 32 : d[i]);
    al_http_tunnel_write(t, buf, k);
    return 0;
}

static void up__ws_shut(struct al_http_tunnel *t, int err, void *arg)
{
    (void)err;
    (void)arg;
    al_http_tunnel_close(t);
}

static void up__ws_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)arg;
    if (err || al_http_tunnel_shutdown(t, up__ws_shut) < 0)
        al_http_tunnel_close(t);
}

static int qint(const struct al_http_req *req, const char *name, int def)
{
    char v[32];
    return al_http_query_get(req->query, name, v, sizeof v) == 0 ? atoi(v) : def;
}

static void up__on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up_requests, 1);
    const char *p = req->path;
    if (strcmp(p, "/seen") == 0) {
        al_http_req_read_body(req, 64u << 20, up__seen_body);
    } else if (strcmp(p, "/big") == 0) {
        struct up_bulk *b = calloc(1, sizeof *b);
        b->left = (size_t)qint(req, "kib", 1024) * 1024;
        req->user = b;
        al_http_req_on_close(req, up__bulk_closed);
        al_http_resp_start(req, 200, NULL, 0, qint(req, "cl", 0) ? (int64_t)b->left : -1);
        up__bulk_pump(req);
    } else if (strcmp(p, "/cut") == 0) {
        /* A server that dies in the middle of its answer. */
        static char piece[100 * 1024];
        memset(piece, 'c', sizeof piece);
        al_http_resp_start(req, 200, NULL, 0, qint(req, "cl", 0) ? 1 << 20 : -1);
        al_http_resp_write(req, piece, sizeof piece);
        al_http_resp_abort(req);
    } else if (strcmp(p, "/hold") == 0) {
        /* Answers "x" and then nothing, until the client leaves. */
        al_http_req_on_close(req, up__hold_closed);
        al_http_resp_start(req, 200, NULL, 0, -1);
        al_http_resp_write(req, "x", 1);
    } else if (strcmp(p, "/silent") == 0) {
        al_http_req_on_close(req, up__hold_closed); /* never answers */
    } else if (strcmp(p, "/ws") == 0) {
        struct al_http_header h[] = {{"Upgrade", "websocket"},
                                     {"Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}};
        struct al_http_tunnel *t;
        if (al_http_req_upgrade(req, h, 2, &t) == 0)
            al_http_tunnel_start(t, up__ws_data, up__ws_end, NULL);
        else
            al_http_reply(req, 400, "text/plain", "not an upgrade", 14);
    } else if (strcmp(p, "/v6") == 0) {
        al_http_reply(req, 200, "text/plain", "from ::1", 8);
    } else {
        al_http_reply_error(req, 404, "no %s", p);
    }
}

/* ---- the loop thread ---------------------------------------------------------------------- */

static void closed_cb(void *arg)
{
    (void)arg;
}

static void on_stop(uv_async_t *h)
{
    al_http_server_close(g_agent, closed_cb, NULL);
    al_http_server_close(g_up, closed_cb, NULL);
    if (g_up6)
        al_http_server_close(g_up6, closed_cb, NULL);
    agent_forward_free(&A);
    uv_close((uv_handle_t *)h, NULL);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&L, UV_RUN_DEFAULT);
    return NULL;
}

/* Deadlines are bounds for a machine loaded by other builds and tests, never expected
 * times: a forwarded request's answer must start within 60 s (a 24 MiB upload is answered
 * only once the server has read and summed it), and a blocking call gets 100 s (under the
 * test case's 120). Only the test of a server that never answers shortens the forwarding
 * deadline; nothing else depends on it. */
#define FWD_TIMEOUT_MS  60000u
#define CALL_TIMEOUT_MS 100000u

static void setup_with(bool token, uint32_t forward_timeout_ms)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    memset(&A, 0, sizeof A);
    A.loop = &L;
    agent_limits_default(&A.lim);
    A.lim.forward_timeout_ms = forward_timeout_ms;
    static char sid[] = "sbxtest";
    A.sandbox_id = sid;
    if (token) {
        A.token = g_token;
        A.token_len = strlen(g_token);
    }
    struct al_http_server_opts ao = {.on_request = agent_on_request, .ctx = &A};
    ck_assert_int_eq(al_http_server_new(&L, &ao, &g_agent), 0);
    ck_assert_int_eq(al_http_server_listen_tcp(g_agent, "127.0.0.1", 0, NULL), 0);
    g_agent_port = al_http_server_port(g_agent);
    snprintf(g_agent_target, sizeof g_agent_target, "127.0.0.1:%d", g_agent_port);
    struct al_http_server_opts uo = {.on_request = up__on_request};
    ck_assert_int_eq(al_http_server_new(&L, &uo, &g_up), 0);
    ck_assert_int_eq(al_http_server_listen_tcp(g_up, "127.0.0.1", 0, NULL), 0);
    g_up_port = al_http_server_port(g_up);
    g_up6 = NULL;
    g_up6_port = -1;
    if (al_http_server_new(&L, &uo, &g_up6) == 0 &&
        al_http_server_listen_tcp(g_up6, "::1", 0, NULL) == 0) {
        g_up6_port = al_http_server_port(g_up6);
    } else if (g_up6) {
        al_http_server_close(g_up6, closed_cb, NULL);
        g_up6 = NULL;
    }
    uv_async_init(&L, &g_stop, on_stop);
    atomic_store(&g_up_closes, 0);
    atomic_store(&g_up_requests, 0);
    ck_assert_int_eq(pthread_create(&g_th, NULL, loop_main, NULL), 0);
}

static void setup(void)
{
    setup_with(false, FWD_TIMEOUT_MS);
}

static void teardown(void)
{
    uv_async_send(&g_stop);
    pthread_join(g_th, NULL);
    ck_assert_int_eq(uv_loop_close(&L), 0);
}

/* ---- helpers ------------------------------------------------------------------------------- */

struct resp {
    int status;
    int rc;
    char err[256];
    json_t *body;
    struct al_http_resp raw;
};

/* req (method, path, headers, body) to the agent, for the sandbox's port (none if 0). */
static void call(struct resp *r, int port, const struct al_http_call_opts *req)
{
    struct al_http_header h[16];
    size_t n = 0;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (port > 0)
        h[n++] = (struct al_http_header){"E2b-Sandbox-Port", ps};
    for (size_t i = 0; i < req->n_headers; i++)
        h[n++] = req->headers[i];
    struct al_error e = {0};
    memset(r, 0, sizeof *r);
    struct al_http_call_opts o = *req;
    o.target = g_agent_target;
    o.headers = h;
    o.n_headers = n;
    o.timeout_ms = CALL_TIMEOUT_MS;
    o.max_body = 80u << 20;
    r->rc = al_http_call(&o, &r->raw, &e);
    snprintf(r->err, sizeof r->err, "%s", e.msg);
    r->status = r->raw.status;
    if (r->rc == 0 && r->raw.body.len && r->raw.body.data[0] == '{')
        r->body = json_loads(r->raw.body.data, 0, NULL);
}

static void resp_free(struct resp *r)
{
    json_decref(r->body);
    al_http_resp_free(&r->raw);
}

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static const char *seen_header(const struct resp *r, const char *name)
{
    return jstr(json_object_get(r->body, "headers"), name);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    return fd;
}

static void raw_send(int fd, const char *s)
{
    ck_assert_int_eq(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Reads until needle (NULL: until the peer closes); *closed says whether it did. Gives up
 * after CALL_TIMEOUT_MS without a byte (the caller's assertions then say what is missing). */
static size_t raw_read(int fd, char *buf, size_t cap, const char *needle, bool *closed)
{
    size_t len = 0;
    buf[0] = '\0';
    *closed = false;
    while (!(needle && strstr(buf, needle))) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)CALL_TIMEOUT_MS) <= 0)
            break;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) {
            *closed = true;
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
        if (len + 1 >= cap)
            break;
    }
    return len;
}

/* A port nothing listens on (on either loopback). */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    socklen_t l = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &l);
    close(fd);
    return ntohs(sin.sin_port);
}

/* ---- tests ----------------------------------------------------------------------------------- */

START_TEST(the_server_sees_the_request_as_sent)
{
    setup();
    struct al_http_header h[] = {{"Host", "8000-sbxtest.sbx.test"},
                                 {"X-Custom", "yes"},
                                 {"Authorization", "Bearer app-own"},
                                 {"Cookie", "a=b"},
                                 {"E2b-Sandbox-Id", "sbxtest"},
                                 {"X-Access-Token", "whatever"},
                                 {"E2B-Traffic-Access-Token", "whatever"},
                                 {"Proxy-Authorization", "Basic eA=="},
                                 {"TE", "trailers"},
                                 {"X-Forwarded-For", "198.51.100.7"}};
    struct resp r;
    call(&r, g_up_port,
         &(struct al_http_call_opts){.method = "PUT",
                                     .path = "/seen?q=1&b=%20x",
                                     .headers = h,
                                     .n_headers = 10,
                                     .body = "twelve bytes",
                                     .body_len = 12});
    ck_assert_msg(r.rc == 0 && r.status == 200, "%d %d %s", r.rc, r.status, r.err);
    ck_assert_str_eq(jstr(r.body, "method"), "PUT");
    ck_assert_str_eq(jstr(r.body, "target"), "/seen?q=1&b=%20x");
    ck_assert_str_eq(seen_header(&r, "host"), "8000-sbxtest.sbx.test"); /* Host preserved */
    ck_assert_str_eq(seen_header(&r, "x-custom"), "yes");
    ck_assert_str_eq(seen_header(&r, "authorization"), "Bearer app-own"); /* the app's own */
    ck_assert_str_eq(seen_header(&r, "cookie"), "a=b");
    ck_assert_str_eq(seen_header(&r, "via"), "1.1 airlock");
    /* The client's own X-Forwarded-For passes unchanged; we add none. */
    ck_assert_str_eq(seen_header(&r, "x-forwarded-for"), "198.51.100.7");
    ck_assert_ptr_null(seen_header(&r, "x-forwarded-host"));
    ck_assert_ptr_null(seen_header(&r, "x-forwarded-proto"));
    /* This hop's routing, credentials and hop-by-hop fields stay here. */
    const char *gone[] = {"e2b-sandbox-id",           "e2b-sandbox-port",    "x-access-token",
                          "e2b-traffic-access-token", "proxy-authorization", "te"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        ck_assert_msg(!seen_header(&r, gone[i]), "%s was forwarded", gone[i]);
    /* A Content-Length body keeps it. */
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "cl")), 12);
    ck_assert(!json_is_true(json_object_get(r.body, "chunked")));
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "len")), 12);
    resp_free(&r);
    teardown();
}
END_TEST

START_TEST(chunked_bodies_and_connection_options)
{
    setup();
    int fd = raw_connect(g_agent_port);
    char req[512];
    snprintf(req, sizeof req,
             "POST /seen HTTP/1.1\r\nHost: app.test\r\nE2b-Sandbox-Port: %d\r\n"
             "Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=9\r\n"
             "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
             g_up_port);
    raw_send(fd, req);
    char buf[8192];
    bool closed;
    raw_read(fd, buf, sizeof buf, "\"sum\"", &closed);
    close(fd);
    char *body = strstr(buf, "\r\n\r\n");
    ck_assert_msg(body && strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "%s", buf);
    /* the JSON may be chunked on the way back: find its start */
    json_t *o = json_loads(strchr(body, '{'), JSON_DISABLE_EOF_CHECK, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_is_true(json_object_get(o, "chunked"))); /* a chunked body stays chunked */
    ck_assert_int_eq(json_integer_value(json_object_get(o, "len")), 11);
    json_t *h = json_object_get(o, "headers");
    ck_assert_ptr_null(json_object_get(h, "x-hop")); /* named by Connection */
    ck_assert_ptr_null(json_object_get(h, "keep-alive"));
    ck_assert_str_eq(jstr(h, "host"), "app.test");
    json_decref(o);
    teardown();
}
END_TEST

START_TEST(large_bodies_stream_both_ways)
{
    setup();
    /* 48 MiB down, chunked and with a Content-Length, byte for byte. */
    for (int cl = 0; cl < 2; cl++) {
        char path[64];
        snprintf(path, sizeof path, "/big?kib=%d&cl=%d", 48 * 1024, cl);
        struct resp r;
        call(&r, g_up_port, &(struct al_http_call_opts){.method = "GET", .path = path});
        ck_assert_msg(r.rc == 0 && r.status == 200, "%d %s", r.rc, r.err);
        ck_assert_uint_eq(r.raw.body.len, 48u << 20);
        for (size_t i = 0; i < r.raw.body.len; i += 4093)
            ck_assert_int_eq((unsigned char)r.raw.body.data[i], (unsigned char)(i * 13 % 253));
        const char *cls = al_http_resp_header(&r.raw, "Content-Length");
        ck_assert(cl ? cls && atoi(cls) == 48 << 20 : cls == NULL);
        resp_free(&r);
    }
    /* 24 MiB up. */
    size_t n = 24u << 20;
    char *big = malloc(n);
    unsigned long sum = 0;
    for (size_t i = 0; i < n; i++) {
        big[i] = (char)(i * 7 % 251);
        sum = sum * 31 + (unsigned char)big[i];
    }
    struct resp r;
    call(
        &r, g_up_port,
        &(struct al_http_call_opts){.method = "POST", .path = "/seen", .body = big, .body_len = n});
    ck_assert_msg(r.rc == 0 && r.status == 200, "%d %s", r.rc, r.err);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "len")), (json_int_t)n);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "sum")),
                     (json_int_t)(sum & 0x7fffffff));
    resp_free(&r);
    free(big);
    teardown();
}
END_TEST

START_TEST(a_closed_port_is_502_with_a_json_body)
{
    setup();
    int port = closed_port();
    struct resp r;
    call(&r, port, &(struct al_http_call_opts){.method = "GET", .path = "/"});
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.status, 502);
    ck_assert_ptr_nonnull(r.body);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "code")), 502);
    char want[64];
    snprintf(want, sizeof want, "port %d is not open in the sandbox", port);
    ck_assert_msg(strstr(jstr(r.body, "message"), want), "%s", jstr(r.body, "message"));
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "port")), port);
    ck_assert_str_eq(jstr(r.body, "sandboxId"), "sbxtest");
    resp_free(&r);
    /* ... also for a request with a body (which was never read). */
    call(&r, port,
         &(struct al_http_call_opts){.method = "POST", .path = "/", .body = "data", .body_len = 4});
    ck_assert_int_eq(r.status, 502);
    resp_free(&r);
    teardown();
}
END_TEST

START_TEST(a_server_on_ipv6_loopback_only_is_reached)
{
    setup();
    if (g_up6_port < 0) {
        fprintf(stderr, "no IPv6 loopback here: skipped\n");
        teardown();
        return;
    }
    /* Nothing on 127.0.0.1 at that port (bind it to be sure nobody takes it). */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_up6_port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool held = bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0;
    struct resp r;
    call(&r, g_up6_port,
         &(struct al_http_call_opts){
             .method = "POST", .path = "/v6", .body = "body", .body_len = 4});
    ck_assert_msg(r.rc == 0 && r.status == 200, "%d %d %s", r.rc, r.status, r.err);
    ck_assert_str_eq(r.raw.body.data, "from ::1");
    resp_free(&r);
    close(fd);
    (void)held;
    teardown();
}
END_TEST

/* ups_closed N: waits (bounded) until the upstream saw N requests closed. */
static int ups_closed(int n)
{
    for (int i = 0; i < 6000 && atomic_load(&g_up_closes) < n; i++) /* 60 s at most */
        usleep(10000);
    return atomic_load(&g_up_closes);
}

START_TEST(a_server_that_does_not_answer_is_504)
{
    setup_with(false, 600); /* (the server never answers: any deadline gives the 504) */
    struct resp r;
    call(&r, g_up_port, &(struct al_http_call_opts){.method = "GET", .path = "/silent"});
    ck_assert_int_eq(r.status, 504);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "did not answer"));
    resp_free(&r);
    ck_assert_int_eq(ups_closed(1), 1); /* and the server's request is dropped */
    teardown();
}
END_TEST

START_TEST(a_server_dying_mid_response_breaks_the_reply)
{
    setup();
    for (int cl = 0; cl < 2; cl++) {
        struct resp r;
        char path[32];
        snprintf(path, sizeof path, "/cut?cl=%d", cl);
        call(&r, g_up_port, &(struct al_http_call_opts){.method = "GET", .path = path});
        ck_assert_msg(r.rc < 0, "cl=%d: a cut-off response looked complete (%zu bytes)", cl,
                      r.raw.body.len);
        ck_assert_msg(strstr(r.err, "in the middle of the response"), "%s", r.err);
        resp_free(&r);
    }
    teardown();
}
END_TEST

START_TEST(tokens_open_the_ports_and_only_them)
{
    setup_with(true, FWD_TIMEOUT_MS);
    char traffic[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    al_http_traffic_token(g_token, strlen(g_token), traffic);
    struct resp r;
    /* None, a wrong one, a traffic token given as the envd token: 403, as E2B's
     * proxy answers. */
    call(&r, g_up_port, &(struct al_http_call_opts){.method = "GET", .path = "/seen"});
    ck_assert_int_eq(r.status, 403);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "E2B-Traffic-Access-Token"));
    resp_free(&r);
    struct al_http_header bad[] = {{"E2B-Traffic-Access-Token", "00"}};
    call(&r, g_up_port,
         &(struct al_http_call_opts){
             .method = "GET", .path = "/seen", .headers = bad, .n_headers = 1});
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    struct al_http_header swapped[] = {{"X-Access-Token", traffic}};
    call(&r, g_up_port,
         &(struct al_http_call_opts){
             .method = "GET", .path = "/seen", .headers = swapped, .n_headers = 1});
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    ck_assert_int_eq(atomic_load(&g_up_requests), 0); /* nothing reached the server */
    /* The traffic token, or the envd token: through. */
    struct al_http_header tt[] = {{"E2B-Traffic-Access-Token", traffic}};
    call(&r, g_up_port,
         &(struct al_http_call_opts){
             .method = "GET", .path = "/seen", .headers = tt, .n_headers = 1});
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(seen_header(&r, "e2b-traffic-access-token"));
    resp_free(&r);
    struct al_http_header xt[] = {{"X-Access-Token", g_token}};
    call(&r, g_up_port,
         &(struct al_http_call_opts){
             .method = "GET", .path = "/seen", .headers = xt, .n_headers = 1});
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(seen_header(&r, "x-access-token"));
    resp_free(&r);
    /* The traffic token does not open envd (envd's own 401). */
    call(&r, 49983,
         &(struct al_http_call_opts){.method = "POST",
                                     .path = "/process.Process/List",
                                     .headers = tt,
                                     .n_headers = 1,
                                     .body = "{}",
                                     .body_len = 2});
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    teardown();
}
END_TEST

START_TEST(bad_ports_are_400)
{
    setup();
    const char *bad[] = {"0", "65536", "080", "8o", "-1", "123456", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct al_http_header h[] = {{"E2b-Sandbox-Port", bad[i]}};
        struct resp r;
        call(&r, 0,
             &(struct al_http_call_opts){
                 .method = "GET", .path = "/", .headers = h, .n_headers = 1});
        ck_assert_msg(r.status == 400, "'%s': %d", bad[i], r.status);
        ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "not a port number"));
        resp_free(&r);
    }
    ck_assert_int_eq(agent_forward_port("65535"), 65535);
    ck_assert_int_eq(agent_forward_port("1"), 1);
    teardown();
}
END_TEST

START_TEST(absolute_targets_are_forwarded_in_origin_form)
{
    char buf[16];
    const char *t = "/p?q=1";
    ck_assert_ptr_eq(agent_forward_origin_form(t, buf, sizeof buf), t);
    ck_assert_str_eq(agent_forward_origin_form("*", buf, sizeof buf), "*");
    ck_assert_str_eq(agent_forward_origin_form("http://h:3000/p?q=1", buf, sizeof buf), "/p?q=1");
    ck_assert_str_eq(agent_forward_origin_form("HTTPS://h", buf, sizeof buf), "/");
    ck_assert_str_eq(agent_forward_origin_form("http://h?q=1", buf, sizeof buf), "/?q=1");
    /* A rewrite that does not fit is refused, not cut (the caller answers 414). */
    ck_assert_ptr_null(agent_forward_origin_form("http://h?0123456789abcdef", buf, sizeof buf));
}
END_TEST

/* A scripted server (ours would not send a Connection option of the handler's): answers
 * one request with `response` and closes. */
struct raw_up {
    int lfd, port;
    const char *response;
    pthread_t th;
};

static void *raw_up_main(void *arg)
{
    struct raw_up *u = arg;
    int fd = accept(u->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[8192];
    size_t len = 0;
    buf[0] = '\0';
    while (len + 1 < sizeof buf && !strstr(buf, "\r\n\r\n")) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
    }
    send(fd, u->response, strlen(u->response), MSG_NOSIGNAL);
    close(fd);
    return NULL;
}

static void raw_up_start(struct raw_up *u, const char *response)
{
    u->response = response;
    u->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(u->lfd, (struct sockaddr *)&sin, sizeof sin), 0);
    ck_assert_int_eq(listen(u->lfd, 4), 0);
    socklen_t l = sizeof sin;
    getsockname(u->lfd, (struct sockaddr *)&sin, &l);
    u->port = ntohs(sin.sin_port);
    ck_assert_int_eq(pthread_create(&u->th, NULL, raw_up_main, u), 0);
}

static void raw_up_stop(struct raw_up *u)
{
    pthread_join(u->th, NULL);
    close(u->lfd);
}

START_TEST(hop_by_hop_response_fields_stay_behind)
{
    setup();
    struct raw_up u;
    raw_up_start(&u, "HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n"
                     "Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Fine: 1\r\n"
                     "Server: sandbox-app\r\nContent-Length: 2\r\n\r\nok");
    struct resp r;
    call(&r, u.port, &(struct al_http_call_opts){.method = "GET", .path = "/hop"});
    raw_up_stop(&u);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.raw.body.data, "ok");
    ck_assert_ptr_null(al_http_resp_header(&r.raw, "X-Secret"));
    ck_assert_ptr_null(al_http_resp_header(&r.raw, "Keep-Alive"));
    ck_assert_ptr_null(al_http_resp_header(&r.raw, "Proxy-Authenticate"));
    ck_assert_str_eq(al_http_resp_header(&r.raw, "X-Fine"), "1");
    ck_assert_str_eq(al_http_resp_header(&r.raw, "Server"), "sandbox-app");
    ck_assert_str_eq(al_http_resp_header(&r.raw, "Via"), "1.1 airlock");
    resp_free(&r);
    teardown();
}
END_TEST

START_TEST(websocket_upgrades_are_relayed)
{
    setup();
    int fd = raw_connect(g_agent_port);
    char req[512];
    snprintf(req, sizeof req,
             "GET /ws HTTP/1.1\r\nHost: 5173-sbxtest.sbx.test\r\nE2b-Sandbox-Port: %d\r\n"
             "Connection: Upgrade\r\nUpgrade: websocket\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
             "early bytes",
             g_up_port);
    raw_send(fd, req);
    char buf[4096];
    bool closed;
    raw_read(fd, buf, sizeof buf, "EARLY BYTES", &closed);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\r\nUpgrade: websocket\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nConnection: Upgrade\r\n"));
    ck_assert_ptr_nonnull(
        strstr(buf, "\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nVia: 1.1 airlock\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nEARLY BYTES"));
    raw_send(fd, "live reload");
    raw_read(fd, buf, sizeof buf, "LIVE RELOAD", &closed);
    ck_assert_str_eq(buf, "LIVE RELOAD");
    shutdown(fd, SHUT_WR);
    raw_read(fd, buf, sizeof buf, NULL, &closed);
    ck_assert(closed);
    close(fd);
    teardown();
}
END_TEST

START_TEST(a_client_leaving_drops_the_servers_request)
{
    setup();
    int fd = raw_connect(g_agent_port);
    char req[256];
    snprintf(req, sizeof req, "GET /hold HTTP/1.1\r\nHost: a\r\nE2b-Sandbox-Port: %d\r\n\r\n",
             g_up_port);
    raw_send(fd, req);
    char buf[1024];
    bool closed;
    raw_read(fd, buf, sizeof buf, "\r\n1\r\nx\r\n", &closed);
    ck_assert_ptr_nonnull(strstr(buf, "\r\n1\r\nx\r\n"));
    close(fd);
    ck_assert_int_eq(ups_closed(1), 1);
    teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_forward");
    TCase *t = tcase_create("forward");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, the_server_sees_the_request_as_sent);
    tcase_add_test(t, chunked_bodies_and_connection_options);
    tcase_add_test(t, large_bodies_stream_both_ways);
    tcase_add_test(t, a_closed_port_is_502_with_a_json_body);
    tcase_add_test(t, a_server_on_ipv6_loopback_only_is_reached);
    tcase_add_test(t, a_server_that_does_not_answer_is_504);
    tcase_add_test(t, a_server_dying_mid_response_breaks_the_reply);
    tcase_add_test(t, tokens_open_the_ports_and_only_them);
    tcase_add_test(t, bad_ports_are_400);
    tcase_add_test(t, absolute_targets_are_forwarded_in_origin_form);
    tcase_add_test(t, hop_by_hop_response_fields_stay_behind);
    tcase_add_test(t, websocket_upgrades_are_relayed);
    tcase_add_test(t, a_client_leaving_drops_the_servers_request);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
