/* Unit tests: common/http tunnels: the server's upgrade takeover (raw clients on a server
 * thread), the client's (a creq on_upgrade, on one loop with the server), and al_http_relay
 * joining the two the way airlockd and the agent relay a WebSocket. */
#include "test_http_fixture.h"

static atomic_int t_relay_err = 1;
static atomic_long t_relay_up, t_relay_down;

/* ---- server thread + raw clients ------------------------------------------------------ */
static struct tsrv T;

static void tsrv_setup(void)
{
    memset(&T, 0, sizeof T);
    T.opts.on_request = t_handler;
    tsrv_start(&T);
}

static void tsrv_teardown(void)
{
    tsrv_stop(&T);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
}

/* Reads until needle shows up in what arrived (or the peer closes / 5 s pass). */
static size_t read_until(int fd, char *out, size_t cap, const char *needle, bool *closed)
{
    size_t len = 0;
    *closed = false;
    out[0] = '\0';
    uint64_t end = t_now_ms() + 5000;
    while (t_now_ms() < end && !(needle && strstr(out, needle))) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
        if (n <= 0) {
            *closed = true;
            break;
        }
        len += (size_t)n;
        out[len] = '\0';
    }
    return len;
}

static void echo_session(int fd)
{
    /* Bytes sent right behind the request belong to the new protocol. */
    t_sends(fd, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n"
                "Upgrade: test-proto\r\n\r\nEARLY");
    char buf[4096];
    bool closed;
    read_until(fd, buf, sizeof buf, "EARLY", &closed);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\r\nUpgrade: test-proto\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nConnection: Upgrade\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nX-Test: yes\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nEARLY"));
    ck_assert(!closed);
    ck_assert_int_eq(atomic_load(&t_upgrade_rc), 0);
    /* Not HTTP any more: anything goes both ways. */
    t_sends(fd, "GET / HTTP/1.1\r\n\r\n\x01\x02");
    read_until(fd, buf, sizeof buf, "\x01\x02", &closed);
    ck_assert_str_eq(buf, "GET / HTTP/1.1\r\n\r\n\x01\x02");
    /* Our end of stream reaches the echo, which ends its own. */
    shutdown(fd, SHUT_WR);
    read_until(fd, buf, sizeof buf, NULL, &closed);
    ck_assert(closed);
    ck_assert_int_eq(t_wait_int(&t_tunnel_end_err, 0, 2000), 0);
}

START_TEST(upgrade_echo_over_tcp_and_unix)
{
    tsrv_setup();
    int fd = t_connect_tcp(T.port);
    echo_session(fd);
    close(fd);
    atomic_store(&t_tunnel_end_err, 1);
    fd = t_connect_unix(T.sock);
    echo_session(fd);
    close(fd);
    ck_assert_int_eq(atomic_load(&t_tunnel_ends), 2);
    tsrv_teardown();
}
END_TEST

START_TEST(upgrade_refusals_leave_an_ordinary_answer)
{
    tsrv_setup();
    struct t_resp r;
    /* Not an upgrade request (no "upgrade" in Connection): -EPROTO. */
    ck_assert_int_eq(
        t_roundtrip(T.port, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: test\r\n\r\n", &r), 400);
    ck_assert_str_eq(r.body, "upgrade refused: -71");
    /* HTTP/1.0 cannot switch protocols. */
    ck_assert_int_eq(
        t_roundtrip(T.port, "GET /ws HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: test\r\n\r\n", &r),
        400);
    ck_assert_str_eq(r.body, "upgrade refused: -71");
    /* A request with a body: -ENOTSUP. */
    ck_assert_int_eq(t_roundtrip(T.port,
                                 "POST /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: "
                                 "test\r\nContent-Length: 3\r\n\r\nabc",
                                 &r),
                     400);
    ck_assert_str_eq(r.body, "upgrade refused: -95");
    /* A 101 must name the protocol: -EINVAL. */
    ck_assert_int_eq(
        t_roundtrip(T.port,
                    "GET /ws?noupgrade=1 HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n"
                    "Upgrade: test\r\n\r\n",
                    &r),
        400);
    ck_assert_str_eq(r.body, "upgrade refused: -22");
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
    tsrv_teardown();
}
END_TEST

START_TEST(server_close_ends_open_tunnels)
{
    tsrv_setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: t\r\n\r\n");
    char buf[2048];
    bool closed;
    read_until(fd, buf, sizeof buf, "\r\n\r\n", &closed);
    ck_assert_ptr_nonnull(strstr(buf, " 101 "));
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 1);
    /* The HTTP connection handed its socket over and goes away (from the server's loop). */
    for (int i = 0; i < 2000 && atomic_load(&http__live_conns); i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    tsrv_stop(&T); /* returns once the server (tunnels included) has closed */
    read_until(fd, buf, sizeof buf, NULL, &closed);
    ck_assert(closed);
    ck_assert_int_eq(atomic_load(&t_tunnel_end_err), -ESHUTDOWN);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
    close(fd);
}
END_TEST

/* ---- one loop: server, clients and relays ------------------------------------------------- */
static uv_loop_t L;
static struct al_http_server *S;
static char S_target[64];
static bool S_closed;

static void relay_done(int err, uint64_t up, uint64_t down, void *arg)
{
    (void)arg;
    atomic_store(&t_relay_err, err);
    atomic_store(&t_relay_up, (long)up);
    atomic_store(&t_relay_down, (long)down);
}

/* /relay?idle=MS: upgrades the client, upgrades a connection to our own /ws, relays. */
struct rl {
    struct al_http_req *req;
    uint32_t idle;
};

static void rl_on_upgrade(struct al_http_creq *c, const struct al_http_header *h, size_t n,
                          struct al_http_tunnel *up, void *arg)
{
    (void)c;
    struct rl *x = arg;
    const char *proto = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "upgrade") == 0)
            proto = h[i].value;
    struct al_http_header hh[] = {{"Upgrade", proto ? proto : "?"}};
    struct al_http_tunnel *down = NULL;
    int rc = al_http_req_upgrade(x->req, hh, 1, &down);
    x->req = NULL;
    ck_assert_int_eq(rc, 0);
    struct al_http_relay_opts o = {.idle_timeout_ms = x->idle};
    ck_assert_int_eq(al_http_relay(down, up, &o, relay_done, NULL), 0);
}

static void rl_on_done(struct al_http_creq *c, int err, void *arg)
{
    struct rl *x = arg;
    if (x->req)
        al_http_reply_error(x->req, 502, "upstream: %d %s", err, al_http_creq_strerror(c));
    free(x);
}

static void loop_handler(struct al_http_req *req, void *ctx)
{
    if (strcmp(req->path, "/relay") != 0) {
        t_handler(req, ctx);
        return;
    }
    struct rl *x = calloc(1, sizeof *x);
    x->req = req;
    x->idle = (uint32_t)t_qint(req, "idle", 0);
    struct al_http_creq_opts o = {
        .target = S_target,
        .method = "GET",
        .path = "/ws",
        .upgrade = al_http_req_header(req, "upgrade"),
        .on_upgrade = rl_on_upgrade,
        .on_done = rl_on_done,
        .arg = x,
    };
    ck_assert_int_eq(al_http_creq_start(req->loop, &o, &(struct al_http_creq *){NULL}), 0);
}

static void loop_setup(void)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    struct al_http_server_opts o = {.on_request = loop_handler};
    ck_assert_int_eq(al_http_server_new(&L, &o, &S), 0);
    ck_assert_int_eq(al_http_server_listen_tcp(S, "127.0.0.1", 0, NULL), 0);
    snprintf(S_target, sizeof S_target, "127.0.0.1:%d", al_http_server_port(S));
    S_closed = false;
}

static void loop_closed(void *arg)
{
    (void)arg;
    S_closed = true;
}

static void loop_teardown(void)
{
    al_http_server_close(S, loop_closed, NULL);
    uv_run(&L, UV_RUN_DEFAULT);
    ck_assert(S_closed);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    ck_assert_int_eq(atomic_load(&http__live_creqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_cconns), 0);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
}

static void run_until(bool *flag, int ms)
{
    uint64_t end = t_now_ms() + (uint64_t)ms;
    while (!*flag && t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(50);
    ck_assert_msg(*flag, "timed out waiting");
}

/* A client of the tunnel: sends `total` bytes of a pattern with flow control, then ends
 * its stream; checks that the same bytes come back, then waits for the other end. */
struct cli {
    struct al_http_tunnel *t;
    size_t total, sent, got;
    bool upgraded, done, eof, bad, normal_response, shut_after_send;
    int status, err, end_err;
    char first[64];
};

static void cli_pump(struct al_http_tunnel *t, void *arg);

static int cli_data(struct al_http_tunnel *t, const char *d, size_t n, void *arg)
{
    (void)t;
    struct cli *c = arg;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)d[i] != (unsigned char)((c->got + i) * 7 % 251))
            c->bad = true;
    c->got += n;
    return 0;
}

static void cli_end(struct al_http_tunnel *t, int err, void *arg)
{
    struct cli *c = arg;
    c->end_err = err;
    c->eof = true;
    al_http_tunnel_close(t);
    c->t = NULL;
}

static void cli_pump(struct al_http_tunnel *t, void *arg)
{
    struct cli *c = arg;
    char piece[16384];
    while (c->sent < c->total) {
        if (al_http_tunnel_queued(t) > 512 * 1024) {
            al_http_tunnel_on_drain(t, 128 * 1024, cli_pump);
            return;
        }
        size_t n = AL_MIN(sizeof piece, c->total - c->sent);
        for (size_t i = 0; i < n; i++)
            piece[i] = (char)((c->sent + i) * 7 % 251);
        ck_assert_int_eq(al_http_tunnel_write(t, piece, n), 0);
        c->sent += n;
    }
    if (c->shut_after_send)
        ck_assert_int_eq(al_http_tunnel_shutdown(t, NULL), 0);
}

static void cli_on_upgrade(struct al_http_creq *cr, const struct al_http_header *h, size_t n,
                           struct al_http_tunnel *t, void *arg)
{
    (void)cr;
    (void)h;
    (void)n;
    struct cli *c = arg;
    c->upgraded = true;
    c->t = t;
    ck_assert_int_eq(al_http_tunnel_start(t, cli_data, cli_end, c), 0);
    cli_pump(t, c);
}

static int cli_on_response(struct al_http_creq *cr, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    (void)cr;
    (void)h;
    (void)n;
    struct cli *c = arg;
    c->status = status;
    c->normal_response = true;
    return 0;
}

static int cli_on_body(struct al_http_creq *cr, const char *d, size_t n, void *arg)
{
    (void)cr;
    struct cli *c = arg;
    snprintf(c->first + strlen(c->first), sizeof c->first - strlen(c->first), "%.*s", (int)n, d);
    return 0;
}

static void cli_on_done(struct al_http_creq *cr, int err, void *arg)
{
    (void)cr;
    struct cli *c = arg;
    c->err = err;
    c->done = true;
}

static void cli_start(struct cli *c, const char *path)
{
    struct al_http_creq_opts o = {
        .target = S_target,
        .method = "GET",
        .path = path,
        .upgrade = "test-proto",
        .on_upgrade = cli_on_upgrade,
        .on_response = cli_on_response,
        .on_data = cli_on_body,
        .on_done = cli_on_done,
        .arg = c,
    };
    struct al_http_creq *cr;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &cr), 0);
}

START_TEST(creq_upgrade_gets_the_tunnel)
{
    loop_setup();
    struct cli c = {.total = 1000, .shut_after_send = true};
    cli_start(&c, "/ws");
    run_until(&c.eof, 5000);
    ck_assert(c.upgraded);
    ck_assert(c.done);
    ck_assert_int_eq(c.err, 0);
    ck_assert(!c.normal_response);
    ck_assert_uint_eq(c.got, 1000);
    ck_assert(!c.bad);
    ck_assert_int_eq(c.end_err, 0);
    loop_teardown();
}
END_TEST

START_TEST(creq_upgrade_answered_normally_is_a_plain_response)
{
    loop_setup();
    struct cli c = {0};
    cli_start(&c, "/hello");
    run_until(&c.done, 5000);
    ck_assert_int_eq(c.err, 0);
    ck_assert(!c.upgraded);
    ck_assert_int_eq(c.status, 200);
    ck_assert_str_eq(c.first, "hello");
    /* ... and an upgrade request with a body cannot be made. */
    struct al_http_creq_opts o = {.target = S_target,
                                  .method = "POST",
                                  .path = "/ws",
                                  .body = "x",
                                  .body_len = 1,
                                  .upgrade = "t",
                                  .on_upgrade = cli_on_upgrade,
                                  .on_done = cli_on_done,
                                  .arg = &c};
    struct al_http_creq *cr;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &cr), -EINVAL);
    loop_teardown();
}
END_TEST

START_TEST(relay_moves_megabytes_both_ways_with_half_close)
{
    loop_setup();
    struct cli c = {.total = 24u << 20, .shut_after_send = true};
    atomic_store(&t_relay_err, 1);
    cli_start(&c, "/relay");
    run_until(&c.eof, 60000);
    ck_assert(c.upgraded);
    ck_assert_uint_eq(c.got, c.total);
    ck_assert(!c.bad);
    ck_assert_int_eq(c.end_err, 0);
    /* The relay ends once both directions have ended. */
    uint64_t end = t_now_ms() + 5000;
    while (atomic_load(&t_relay_err) == 1 && t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(100);
    ck_assert_int_eq(atomic_load(&t_relay_err), 0);
    ck_assert_int_eq(atomic_load(&t_relay_up), (long)c.total);
    ck_assert_int_eq(atomic_load(&t_relay_down), (long)c.total);
    loop_teardown();
}
END_TEST

START_TEST(relay_idle_timeout_closes_both_sides)
{
    loop_setup();
    struct cli c = {.total = 10};
    atomic_store(&t_relay_err, 1);
    int ends = atomic_load(&t_tunnel_ends);
    uint64_t t0 = t_now_ms();
    cli_start(&c, "/relay?idle=300");
    run_until(&c.eof, 5000);
    ck_assert_uint_eq(c.got, 10);
    ck_assert_uint_ge(t_now_ms() - t0, 250);
    uint64_t end = t_now_ms() + 2000;
    while ((atomic_load(&t_relay_err) == 1 || atomic_load(&t_tunnel_ends) == ends) &&
           t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(100);
    ck_assert_int_eq(atomic_load(&t_relay_err), -ETIMEDOUT);
    ck_assert_int_gt(atomic_load(&t_tunnel_ends), ends); /* the echo behind it saw the end */
    loop_teardown();
}
END_TEST

START_TEST(closing_the_server_ends_its_relays)
{
    loop_setup();
    struct cli c = {.total = 10};
    atomic_store(&t_relay_err, 1);
    cli_start(&c, "/relay");
    while (c.got < 10)
        uv_run(&L, UV_RUN_NOWAIT), usleep(50);
    al_http_server_close(S, loop_closed, NULL);
    run_until(&c.eof, 5000);
    run_until(&S_closed, 5000);
    ck_assert_int_eq(atomic_load(&t_relay_err), -ESHUTDOWN);
    uv_run(&L, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    ck_assert_int_eq(atomic_load(&http__live_tunnels), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_tunnel");
    TCase *tc = tcase_create("tunnel");
    tcase_set_timeout(tc, 120);
    T_ADD(tc, upgrade_echo_over_tcp_and_unix);
    T_ADD(tc, upgrade_refusals_leave_an_ordinary_answer);
    T_ADD(tc, server_close_ends_open_tunnels);
    T_ADD(tc, creq_upgrade_gets_the_tunnel);
    T_ADD(tc, creq_upgrade_answered_normally_is_a_plain_response);
    T_ADD(tc, relay_moves_megabytes_both_ways_with_half_close);
    T_ADD(tc, relay_idle_timeout_closes_both_sides);
    T_ADD(tc, closing_the_server_ends_its_relays);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
