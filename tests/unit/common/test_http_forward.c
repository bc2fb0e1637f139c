/* Unit tests: common/http_forward: a forwarding server F (its handler calls al_http_forward)
 * in front of an upstream server U (the fixture's routes, plus /dump), each on its own
 * thread, driven by raw clients: what each head carries, the hooks and extra fields, bodies
 * both ways (Content-Length kept, chunked), 100-continue, a refused upstream (the fail
 * hook's answer, and the next target), an upstream dying in the middle of its response, a
 * client leaving in the middle of its body, too many fields, and an upgrade. */
#include "common/http_forward.h"
#include "test_http_fixture.h"

static struct tsrv U, F;
static atomic_int f_ends, f_last_status = -1, f_fail_err;
static int f_dead_port; /* a port nothing listens on */

/* ---- the upstream: the fixture's routes, plus /dump --------------------------------------- */

/* /dump: the request's head ("name: value" lines) and body, with fields to filter back. */
static void u__dump_done(struct al_http_req *req, int err)
{
    if (err)
        return;
    char out[8192];
    size_t n = (size_t)snprintf(out, sizeof out, "%s %s\n", req->method, req->target);
    for (size_t i = 0; i < req->n_headers && n < sizeof out; i++)
        n += (size_t)snprintf(out + n, sizeof out - n, "%s: %s\n", req->headers[i].name,
                              req->headers[i].value);
    if (n < sizeof out)
        n += (size_t)snprintf(out + n, sizeof out - n, "body=%.*s", (int)req->body.len,
                              req->body.data);
    const struct al_http_header h[] = {
        {"X-Resp-Drop", "1"}, {"X-Resp-Rewrite", "before"}, {"Proxy-Authenticate", "Basic"}};
    al_http_resp_start(req, 200, h, 3, (int64_t)AL_MIN(n, sizeof out - 1));
    al_http_resp_write(req, out, AL_MIN(n, sizeof out - 1));
    al_http_resp_end(req);
}

static void u_handler(struct al_http_req *req, void *ctx)
{
    if (strcmp(req->path, "/dump") == 0) {
        ck_assert_int_eq(al_http_req_read_body(req, 0, u__dump_done), 0);
        return;
    }
    t_handler(req, ctx);
}

/* ---- the forwarder -------------------------------------------------------------------- */

static int f__request_field(void *arg, const char *name, const char **value, char **owned)
{
    (void)arg;
    if (strcasecmp(name, "X-Drop") == 0)
        return 1;
    if (strcasecmp(name, "X-Rewrite") == 0) {
        *owned = strdup("after");
        *value = *owned;
    }
    if (strcasecmp(name, "X-Fail") == 0)
        return -EPERM;
    return 0;
}

static int f__response_field(void *arg, bool upgrade, const char *name, const char **value,
                             char **owned)
{
    (void)arg;
    (void)upgrade;
    if (strcasecmp(name, "X-Resp-Drop") == 0)
        return 1;
    if (strcasecmp(name, "X-Resp-Rewrite") == 0) {
        *owned = strdup("after");
        *value = *owned;
    }
    return 0;
}

static int f__fail(void *arg, const struct al_http_req *req, int err, const char *why, char *msg,
                   size_t len)
{
    (void)arg;
    (void)req;
    atomic_store(&f_fail_err, err);
    snprintf(msg, len, "test upstream failed: %s", why);
    return err == -ECONNREFUSED ? 503 : 502;
}

static void f__end(void *arg, int status)
{
    (void)arg;
    atomic_store(&f_last_status, status);
    atomic_fetch_add(&f_ends, 1);
}

/* Forwards to U; ?dead=1 dials a port nothing listens on, ?dead=2 that one and then U. */
static void f_handler(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    char up[32], dead[32];
    snprintf(up, sizeof up, "127.0.0.1:%d", U.port);
    snprintf(dead, sizeof dead, "127.0.0.1:%d", f_dead_port);
    int mode = t_qint(req, "dead", 0);
    const char *targets[] = {mode ? dead : up, up};
    static const struct al_http_header extra[] = {{"X-Extra", "1"}};
    static const struct al_http_header via[] = {{"Via", "1.1 test"}};
    struct al_http_forward_opts o = {
        .targets = targets,
        .n_targets = mode == 2 ? 2 : 1,
        .request_field = f__request_field,
        .request_extra = extra,
        .n_request_extra = 1,
        .response_field = f__response_field,
        .response_extra = via,
        .n_response_extra = 1,
        .upgrade_extra = via,
        .n_upgrade_extra = 1,
        .timeout_ms = 5000,
        .high_water = 64 << 10,
        .fail = f__fail,
        .on_end = f__end,
        .label = "test upstream",
    };
    int rc = al_http_forward(req->loop, req, &o);
    if (rc)
        al_http_reply_error(req, rc == -E2BIG ? 431 : 500, "not forwarded: %d", rc);
}

/* A port that refuses connections: bound and closed again. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void setup(void)
{
    memset(&U, 0, sizeof U);
    memset(&F, 0, sizeof F);
    U.opts.on_request = u_handler;
    U.no_unix = true;
    F.opts.on_request = f_handler;
    F.no_unix = true;
    tsrv_start(&U);
    tsrv_start(&F);
    f_dead_port = dead_port();
    atomic_store(&f_ends, 0);
    atomic_store(&f_last_status, -1);
    atomic_store(&f_fail_err, 0);
}

static void teardown(void)
{
    tsrv_stop(&F);
    tsrv_stop(&U);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
}

/* Waits (bounded) for the forwards started so far to be over. */
static void wait_ends(int n)
{
    ck_assert_int_eq(t_wait_int(&f_ends, n, 5000), n);
}

/* Reads until needle shows up (bounded: 5 s), one byte at a time when bytewise (so nothing
 * past it is taken); fails the test if the peer closes first. */
static size_t f_read_until(int fd, char *buf, size_t cap, const char *needle, bool bytewise)
{
    size_t len = 0;
    buf[0] = '\0';
    uint64_t end = t_now_ms() + 5000;
    while (t_now_ms() < end && !strstr(buf, needle)) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, buf + len, bytewise ? 1 : cap - 1 - len, 0);
        ck_assert_int_gt(n, 0);
        len += (size_t)n;
        buf[len] = '\0';
    }
    ck_assert_msg(strstr(buf, needle), "%s not in %s", needle, buf);
    return len;
}

START_TEST(heads_through_hooks_and_extras)
{
    setup();
    struct t_resp r;
    int st = t_roundtrip(F.port,
                         "POST /dump?q=1 HTTP/1.1\r\nHost: h.example\r\nX-Keep: k\r\nX-Drop: d\r\n"
                         "X-Rewrite: before\r\nConnection: keep-alive, X-Hop\r\nX-Hop: h\r\n"
                         "Keep-Alive: timeout=5\r\nContent-Length: 3\r\n\r\nabc",
                         &r);
    ck_assert_int_eq(st, 200);
    /* What U saw: the end-to-end fields, the hook's rewrite, the extra field, Host kept. */
    ck_assert_msg(strncmp(r.body, "POST /dump?q=1\n", 15) == 0, "%s", r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\nHost: h.example\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nX-Keep: k\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nX-Rewrite: after\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nX-Extra: 1\n"));
    ck_assert_ptr_null(strstr(r.body, "X-Drop"));
    ck_assert_ptr_null(strstr(r.body, "X-Hop"));
    ck_assert_ptr_null(strstr(r.body, "Keep-Alive"));
    /* A Content-Length body keeps its length. */
    ck_assert_ptr_nonnull(strstr(r.body, "\nContent-Length: 3\n"));
    ck_assert_ptr_null(strstr(r.body, "Transfer-Encoding"));
    ck_assert_ptr_nonnull(strstr(r.body, "body=abc"));
    /* What the client saw of U's head. */
    ck_assert_ptr_null(strstr(r.headers, "X-Resp-Drop"));
    ck_assert_ptr_null(strstr(r.headers, "Proxy-Authenticate"));
    ck_assert_ptr_nonnull(strstr(r.headers, "X-Resp-Rewrite:after"));
    ck_assert_ptr_nonnull(strstr(r.headers, "Via:1.1 test"));
    ck_assert_ptr_nonnull(strstr(r.headers, "Content-Length:"));
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 200);
    teardown();
}
END_TEST

START_TEST(chunked_both_ways)
{
    setup();
    int fd = t_connect_tcp(F.port);
    t_sends(fd, "POST /stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n");
    /* The first piece comes back before the body is over: streamed, not buffered. */
    char buf[4096];
    f_read_until(fd, buf, sizeof buf, "hello", false);
    ck_assert_ptr_nonnull(strstr(buf, "Transfer-Encoding: chunked"));
    ck_assert_ptr_nonnull(strstr(buf, "hello"));
    t_sends(fd, "6\r\n world\r\n0\r\n\r\n");
    f_read_until(fd, buf, sizeof buf, "0\r\n\r\n", false);
    ck_assert_ptr_nonnull(strstr(buf, " world"));
    ck_assert_ptr_nonnull(strstr(buf, "0\r\n\r\n"));
    close(fd);
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 200);
    /* A chunked request stays chunked upstream. */
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(F.port,
                                 "POST /framing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                 "chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                                 &r),
                     200);
    ck_assert_str_eq(r.body, "cl=-1 chunked=1 body=abc");
    teardown();
}
END_TEST

START_TEST(expect_100_continue_is_this_hops)
{
    setup();
    int fd = t_connect_tcp(F.port);
    t_sends(fd, "POST /dump HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
                "4\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    /* The 100 comes once the upstream's connection is up; only then is the body sent. */
    char buf[64];
    f_read_until(fd, buf, sizeof buf, "\r\n\r\n", true);
    ck_assert_str_eq(buf, "HTTP/1.1 100 Continue\r\n\r\n");
    t_sends(fd, "body");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    close(fd);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(strstr(r.body, "Expect"));
    ck_assert_ptr_nonnull(strstr(r.body, "body=body"));
    wait_ends(1);
    teardown();
}
END_TEST

START_TEST(upstream_refuses)
{
    setup();
    struct t_resp r;
    /* One target: the fail hook's answer. */
    ck_assert_int_eq(t_roundtrip(F.port, "GET /hello?dead=1 HTTP/1.1\r\nHost: x\r\n\r\n", &r), 503);
    ck_assert_ptr_nonnull(strstr(r.body, "test upstream failed: "));
    ck_assert_int_eq(atomic_load(&f_fail_err), -ECONNREFUSED);
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 503);
    /* Two: the second, with the body untouched by the first dial. */
    atomic_store(&f_fail_err, 0);
    ck_assert_int_eq(t_roundtrip(F.port,
                                 "POST /echo?dead=2 HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                 "5\r\n\r\nhello",
                                 &r),
                     200);
    ck_assert_str_eq(r.body, "hello");
    ck_assert_int_eq(atomic_load(&f_fail_err), 0);
    wait_ends(2);
    teardown();
}
END_TEST

START_TEST(upstream_dies_mid_body)
{
    setup();
    /* 7 of 100 bytes, then U's connection closes: the client's is cut short too. */
    int fd = t_connect_tcp(F.port);
    t_sends(fd, "GET /abort?mode=length HTTP/1.1\r\nHost: x\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(!t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(r.total, 7);
    close(fd);
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 502);
    /* Chunked: no terminating chunk. */
    fd = t_connect_tcp(F.port);
    t_sends(fd, "GET /abort?mode=chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    rd.len = 0;
    ck_assert(!t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    close(fd);
    wait_ends(2);
    ck_assert_int_eq(atomic_load(&f_last_status), 502);
    teardown();
}
END_TEST

START_TEST(client_leaves_mid_body)
{
    setup();
    atomic_store(&t_body_err, 0);
    int fd = t_connect_tcp(F.port);
    t_sends(fd, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nsome");
    /* Until U has the first piece (its echo comes back)... */
    char buf[1024];
    f_read_until(fd, buf, sizeof buf, "some", false);
    ck_assert_ptr_nonnull(strstr(buf, "some"));
    /* ...then the client goes: the upstream request is cancelled, so U's body breaks. */
    close(fd);
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 0);
    ck_assert_int_eq(t_wait_int(&t_body_err, 1, 5000), 1);
    teardown();
}
END_TEST

START_TEST(hook_errors_and_too_many_fields)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(F.port, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Fail: 1\r\n\r\n", &r),
                     500);
    ck_assert_str_eq(r.body, "{\"code\":500,\"message\":\"not forwarded: -1\"}");
    char req[16384];
    size_t n = (size_t)snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < AL_HTTP_FORWARD_MAX_HEADERS; i++)
        n += (size_t)snprintf(req + n, sizeof req - n, "X-F%d: v\r\n", i);
    snprintf(req + n, sizeof req - n, "\r\n");
    ck_assert_int_eq(t_roundtrip(F.port, req, &r), 431);
    ck_assert_int_eq(atomic_load(&f_ends), 0); /* not forwarded: no on_end */
    teardown();
}
END_TEST

START_TEST(upgrade_is_relayed)
{
    setup();
    int fd = t_connect_tcp(F.port);
    t_sends(fd,
            "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test-proto\r\n\r\n");
    char buf[4096];
    f_read_until(fd, buf, sizeof buf, "\r\n\r\n", false);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 101 ", 13) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\r\nUpgrade: test-proto\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nX-Test: yes\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nVia: 1.1 test\r\n"));
    wait_ends(1);
    ck_assert_int_eq(atomic_load(&f_last_status), 101);
    t_sends(fd, "raw\x01 bytes");
    f_read_until(fd, buf, sizeof buf, "bytes", false);
    ck_assert_str_eq(buf, "raw\x01 bytes");
    shutdown(fd, SHUT_WR);
    bool closed;
    ck_assert_int_eq(t_read_until_close(fd, buf, sizeof buf, 5000, &closed), 0);
    ck_assert(closed);
    close(fd);
    ck_assert_int_eq(t_wait_int(&t_tunnel_ends, 1, 5000), 1);
    /* The relay is over once both sides closed (the server-side tunnels are gone). */
    for (int i = 0; i < 5000 && atomic_load(&http__live_tunnels); i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
    teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_forward");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 60);
    T_ADD(tc, heads_through_hooks_and_extras);
    T_ADD(tc, chunked_both_ways);
    T_ADD(tc, expect_100_continue_is_this_hops);
    T_ADD(tc, upstream_refuses);
    T_ADD(tc, upstream_dies_mid_body);
    T_ADD(tc, client_leaves_mid_body);
    T_ADD(tc, hook_errors_and_too_many_fields);
    T_ADD(tc, upgrade_is_relayed);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
