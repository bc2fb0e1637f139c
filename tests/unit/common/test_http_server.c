/* Unit tests: common/http server (over real sockets, one behaviour per test). */
#include "test_http_fixture.h"

#include <sys/stat.h>

static struct tsrv T;

static void setup_limits(const struct al_http_limits *lim)
{
    memset(&T, 0, sizeof T);
    T.opts.on_request = t_handler;
    T.opts.server_name = "airlock-test";
    if (lim)
        T.opts.limits = *lim;
    tsrv_start(&T);
}

static void setup(void)
{
    setup_limits(NULL);
}

static void teardown(void)
{
    tsrv_stop(&T);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
}

static bool has_header(const struct t_resp *r, const char *line)
{
    return strcasestr(r->headers, line) != NULL;
}

/* ---- basics ------------------------------------------------------------------------ */
START_TEST(hello_has_date_server_and_keepalive)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r), 200);
    ck_assert_str_eq(r.body, "hello");
    ck_assert(has_header(&r, "date:"));
    ck_assert(has_header(&r, "server:airlock-test"));
    ck_assert(has_header(&r, "connection:keep-alive"));
    ck_assert(has_header(&r, "content-length:5"));
    ck_assert(r.keep_alive);
    teardown();
}
END_TEST

START_TEST(keep_alive_serves_many_requests_on_one_connection)
{
    setup();
    int fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    for (int i = 0; i < 5; i++) {
        t_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        ck_assert(t_read_response(fd, &rd, &r, 5000));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "hello");
    }
    ck_assert_int_eq(atomic_load(&t_requests), 5);
    close(fd);
    teardown();
}
END_TEST

START_TEST(pipelined_requests_answer_in_order)
{
    setup();
    int fd = t_connect_tcp(T.port);
    /* The first is slow, the second instant: the answers must still come in order. */
    t_sends(fd, "GET /slow?ms=80 HTTP/1.1\r\nHost: x\r\n\r\n"
                "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                "GET /slow?ms=10 HTTP/1.1\r\nHost: x\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    const char *want[] = {"slow", "hello", "abc", "slow"};
    for (int i = 0; i < 4; i++) {
        ck_assert(t_read_response(fd, &rd, &r, 5000));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, want[i]);
    }
    close(fd);
    teardown();
}
END_TEST

START_TEST(chunked_request_body_is_decoded)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
    usleep(20000);
    t_sends(fd, "lo\r\n1;ext=1\r\n \r\n");
    usleep(20000);
    t_sends(fd, "5\r\nworld\r\n0\r\nX-Trailer: y\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "hello world");
    close(fd);
    teardown();
}
END_TEST

START_TEST(streamed_request_body_with_pause_and_resume)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "POST /stream?pause=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    char expect[4096] = "";
    for (int i = 0; i < 20; i++) {
        char piece[64], chunk[96];
        snprintf(piece, sizeof piece, "piece-%02d|", i);
        snprintf(chunk, sizeof chunk, "%zx\r\n%s\r\n", strlen(piece), piece);
        strcat(expect, piece);
        t_sends(fd, chunk);
        usleep(2000);
    }
    t_sends(fd, "0\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, expect);
    ck_assert_int_gt(atomic_load(&t_stream_paused), 0);
    ck_assert_int_eq(atomic_load(&t_body_ok), 1);
    close(fd);
    teardown();
}
END_TEST

START_TEST(streamed_response_first_chunk_arrives_before_second_is_written)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /gate HTTP/1.1\r\nHost: x\r\n\r\n");
    char buf[4096];
    size_t len = 0;
    uint64_t end = t_now_ms() + 5000;
    while (!strstr(buf, "\r\n5\r\nfirst\r\n") && t_now_ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 1) {
            ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
            ck_assert_int_gt(n, 0);
            len += (size_t)n;
        }
        buf[len] = '\0';
    }
    /* The first chunk is here and the handler has not written the second one. */
    ck_assert_ptr_nonnull(strcasestr(buf, "transfer-encoding: chunked\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n5\r\nfirst\r\n"));
    ck_assert_ptr_null(strstr(buf, "second"));
    atomic_store(&t_gate, true);
    bool closed;
    len += t_read_until_close(fd, buf + len, sizeof buf - len, 300, &closed);
    ck_assert_ptr_nonnull(strstr(buf, "6\r\nsecond\r\n0\r\n\r\n"));
    close(fd);
    teardown();
}
END_TEST

START_TEST(content_length_response_in_pieces)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port, "GET /length HTTP/1.1\r\nHost: x\r\n\r\n", &r), 200);
    ck_assert_str_eq(r.body, "0123456789");
    ck_assert(has_header(&r, "content-length:10"));
    teardown();
}
END_TEST

START_TEST(json_and_error_replies_have_e2b_shape)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n", &r), 201);
    ck_assert_str_eq(r.body, "{\"a\":\"b\",\"n\":1}");
    ck_assert(has_header(&r, "content-type:application/json"));
    ck_assert_int_eq(t_roundtrip(T.port, "GET /error HTTP/1.1\r\nHost: x\r\n\r\n", &r), 409);
    ck_assert_str_eq(r.body, "{\"code\":409,\"message\":\"conflict on \\\"x\\\"\"}");
    ck_assert_int_eq(t_roundtrip(T.port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", &r), 404);
    ck_assert_str_eq(r.body, "{\"code\":404,\"message\":\"no route for /nope\"}");
    teardown();
}
END_TEST

START_TEST(no_content_has_no_body_and_keeps_alive)
{
    setup();
    int fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    t_sends(fd, "GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 204);
    ck_assert(!has_header(&r, "content-length"));
    ck_assert(!has_header(&r, "transfer-encoding"));
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_str_eq(r.body, "hello");
    close(fd);
    teardown();
}
END_TEST

START_TEST(headers_are_case_insensitive_and_counted)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port,
                                 "GET /headers?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nX-Test: one\r\n"
                                 "x-test: two\r\n\r\n",
                                 &r),
                     200);
    ck_assert_str_eq(r.body, "x-test=one count=2 method=GET target=/headers?a=1&b=%20 "
                             "query=a=1&b=%20");
    teardown();
}
END_TEST

START_TEST(absolute_form_routes_on_its_path_and_query)
{
    setup();
    struct t_resp r;
    /* RFC 9112 3.2.2: a server accepts absolute-form; path and query are the URI's own. */
    ck_assert_int_eq(
        t_roundtrip(T.port, "GET http://x:8080/headers?a=1 HTTP/1.1\r\nHost: x:8080\r\n\r\n", &r),
        200);
    ck_assert_str_eq(r.body, "x-test=(none) count=0 method=GET target=http://x:8080/headers?a=1 "
                             "query=a=1");
    /* No path: "/" (the handler's 404 for it, not a 400 for the target). */
    ck_assert_int_eq(t_roundtrip(T.port, "GET HTTPS://x?a=1 HTTP/1.1\r\nHost: x\r\n\r\n", &r), 404);
    teardown();
}
END_TEST

START_TEST(head_response_has_headers_but_no_body)
{
    setup();
    int fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    t_sends(fd, "HEAD /length HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response_ex(fd, &rd, &r, 5000, true));
    ck_assert_int_eq(r.status, 200);
    ck_assert(has_header(&r, "content-length:10"));
    ck_assert_uint_eq(r.blen, 0);
    ck_assert_uint_eq(rd.len, 0); /* nothing after the head */
    /* The connection is still in sync. */
    t_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_str_eq(r.body, "hello");
    close(fd);
    teardown();
}
END_TEST

START_TEST(expect_100_continue_when_the_body_is_claimed)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd,
            "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    char buf[256];
    size_t len = 0;
    uint64_t end = t_now_ms() + 5000;
    while (!strstr(buf, "\r\n\r\n") && t_now_ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 1) {
            ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
            ck_assert_int_gt(n, 0);
            len += (size_t)n;
        }
        buf[len] = '\0';
    }
    ck_assert_str_eq(buf, "HTTP/1.1 100 Continue\r\n\r\n");
    t_sends(fd, "ping");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ping");
    close(fd);
    teardown();
}
END_TEST

START_TEST(expect_100_continue_unclaimed_gets_answer_and_close)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd,
            "POST /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    char buf[1024];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    ck_assert_ptr_null(strstr(buf, "100 Continue"));
    ck_assert_ptr_nonnull(strcasestr(buf, "connection: close"));
    close(fd);
    teardown();
}
END_TEST

START_TEST(unknown_expectation_gets_417)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port,
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n"
                                 "Content-Length: 1\r\n\r\nx",
                                 &r),
                     417);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

START_TEST(unclaimed_body_is_discarded_and_connection_reused)
{
    setup();
    int fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    t_sends(fd, "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
                "POST /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "3\r\nabc\r\n0\r\n\r\n"
                "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        ck_assert(t_read_response(fd, &rd, &r, 5000));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "hello");
        ck_assert(r.keep_alive);
    }
    ck_assert_int_eq(atomic_load(&t_requests), 3);
    close(fd);
    teardown();
}
END_TEST

START_TEST(unclaimed_body_over_the_limit_closes_after_answer)
{
    struct al_http_limits lim = {.max_body_bytes = 100};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
    char buf[1024];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    ck_assert_ptr_nonnull(strcasestr(buf, "connection: close"));
    close(fd);
    teardown();
}
END_TEST

START_TEST(http10_closes_and_gets_close_delimited_stream)
{
    setup();
    struct t_resp r;
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /chunks?n=3&delay=1 HTTP/1.0\r\n\r\n");
    char buf[2048];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    close(fd);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    ck_assert_ptr_null(strcasestr(buf, "transfer-encoding"));
    ck_assert_ptr_nonnull(strcasestr(buf, "connection: close"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nchunk-0;chunk-1;chunk-2;"));
    /* keep-alive on request */
    fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    t_sends(fd, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert(has_header(&r, "connection:keep-alive"));
    t_sends(fd, "GET /hello HTTP/1.0\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert(has_header(&r, "connection:close"));
    close(fd);
    teardown();
}
END_TEST

/* ---- limits ------------------------------------------------------------------------ */
START_TEST(body_over_read_cap_gets_413_json)
{
    setup();
    struct t_resp r;
    ck_assert_int_eq(
        t_roundtrip(T.port, "POST /echo?max=10 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
                    &r),
        413);
    ck_assert_ptr_nonnull(strstr(r.body, "{\"code\":413,\"message\":\""));
    ck_assert(has_header(&r, "connection:close"));
    ck_assert_int_eq(t_wait_int(&t_last_body_err, -E2BIG, 2000), -E2BIG);
    /* chunked: discovered while reading */
    ck_assert_int_eq(
        t_roundtrip(T.port,
                    "POST /echo?max=10 HTTP/1.1\r\nHost: x\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n8\r\n01234567\r\n",
                    &r),
        413);
    ck_assert_int_eq(t_wait_int(&t_body_err, 2, 2000), 2);
    teardown();
}
END_TEST

START_TEST(header_block_over_limit_gets_431)
{
    struct al_http_limits lim = {.max_header_bytes = 1024, .max_headers = 10};
    setup_limits(&lim);
    char req[4096];
    snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: %0*d\r\n\r\n", 1100, 0);
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port, req, &r), 431);
    ck_assert_ptr_nonnull(strstr(r.body, "\"code\":431"));
    /* too many fields */
    strcpy(req, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 12; i++)
        sprintf(req + strlen(req), "X-%d: y\r\n", i);
    strcat(req, "\r\n");
    ck_assert_int_eq(t_roundtrip(T.port, req, &r), 431);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

START_TEST(slowloris_headers_get_408)
{
    struct al_http_limits lim = {.header_timeout_ms = 200};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    const char *req =
        "GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    uint64_t start = t_now_ms();
    for (const char *p = req; *p; p++) {
        if (send(fd, p, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 20) == 1)
            break; /* the server answered */
    }
    char buf[1024];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 408 ", 13) == 0);
    ck_assert_uint_lt(t_now_ms() - start, 2000);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    close(fd);
    teardown();
}
END_TEST

START_TEST(silent_connection_is_closed_after_header_timeout)
{
    struct al_http_limits lim = {.header_timeout_ms = 150};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    char buf[256];
    bool closed;
    size_t n = t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert_uint_eq(n, 0);
    close(fd);
    teardown();
}
END_TEST

START_TEST(stalled_body_gets_408_and_body_error)
{
    struct al_http_limits lim = {.body_timeout_ms = 200};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    char buf[1024];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 408 ", 13) == 0);
    ck_assert_int_eq(t_wait_int(&t_last_body_err, -ETIMEDOUT, 2000), -ETIMEDOUT);
    close(fd);
    teardown();
}
END_TEST

START_TEST(idle_keepalive_connection_is_closed)
{
    struct al_http_limits lim = {.idle_timeout_ms = 150};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    t_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    uint64_t start = t_now_ms();
    char buf[256];
    bool closed;
    ck_assert_uint_eq(t_read_until_close(fd, buf, sizeof buf, 3000, &closed), 0);
    ck_assert(closed);
    ck_assert_uint_ge(t_now_ms() - start, 100);
    close(fd);
    teardown();
}
END_TEST

START_TEST(over_max_connections_gets_503)
{
    struct al_http_limits lim = {.max_connections = 2};
    setup_limits(&lim);
    int a = t_connect_tcp(T.port), b = t_connect_tcp(T.port);
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    t_sends(a, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"); /* both are really established */
    ck_assert(t_read_response(a, &rd, &r, 5000));
    t_sends(b, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response(b, &rd, &r, 5000));
    int c = t_connect_tcp(T.port);
    char buf[1024];
    bool closed;
    t_read_until_close(c, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    ck_assert(strncmp(buf, "HTTP/1.1 503 ", 13) == 0);
    ck_assert_ptr_nonnull(strstr(buf, "\"code\":503"));
    close(c);
    close(a);
    /* A slot is free again. */
    uint64_t end = t_now_ms() + 3000;
    int status = 0;
    while (t_now_ms() < end && status != 200) {
        status = t_roundtrip(T.port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r);
        if (status != 200)
            usleep(10000);
    }
    ck_assert_int_eq(status, 200);
    close(b);
    teardown();
}
END_TEST

/* ---- bad requests ------------------------------------------------------------------ */
static void expect_rejected(const char *req, size_t len, int status)
{
    int fd = t_connect_tcp(T.port);
    t_send(fd, req, len);
    char buf[2048];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    close(fd);
    char want[32];
    snprintf(want, sizeof want, "HTTP/1.1 %d ", status);
    if (strncmp(buf, want, strlen(want)) != 0)
        ck_abort_msg("request %.*s: expected %d, got %.60s", (int)AL_MIN(len, 60), req, status,
                     buf);
    ck_assert(closed);
    ck_assert_ptr_nonnull(strstr(buf, "application/json"));
    char code[32];
    snprintf(code, sizeof code, "{\"code\":%d,\"message\":\"", status);
    ck_assert_ptr_nonnull(strstr(buf, code));
}

#define REJECT(lit, status) expect_rejected(lit, sizeof(lit) - 1, status)

START_TEST(content_length_with_transfer_encoding_is_400)
{
    setup();
    REJECT(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\n",
        400);
    REJECT(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
        "0\r\n\r\n",
        400);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

START_TEST(bad_chunk_size_is_400)
{
    setup();
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
           400);
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           "ffffffffffffffffffff\r\nabc\r\n",
           400);
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
           400);
    ck_assert_int_eq(t_wait_int(&t_last_body_err, -EBADMSG, 2000), -EBADMSG);
    teardown();
}
END_TEST

START_TEST(obs_fold_is_400)
{
    setup();
    REJECT("GET /hello HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\n Host: x\r\n\r\n", 400);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

START_TEST(nul_cr_lf_in_headers_are_400)
{
    setup();
    REJECT("GET /hello HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\nHost: x\r\nX-\0A: ab\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\nHost: x\n\n", 400);
    REJECT("GET /hello HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", 400);
    REJECT("GET /he\x01llo HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET /h\xffllo HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

START_TEST(malformed_request_lines_and_headers_are_400)
{
    setup();
    REJECT("GEX /hello HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\nHost : x\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\n: x\r\nHost: x\r\n\r\n", 400);
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
           400);
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400);
    REJECT("GET /hello HTTP/1.1\r\n\r\n", 400);                       /* no Host */
    REJECT("GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400); /* two */
    REJECT("GET hello HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET /hello#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400); /* "*" is for OPTIONS only */
    REJECT("GET x:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET ftp://x/hello HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("GET http://a@x/hello HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    REJECT("POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400);
    REJECT("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400);
    REJECT("GET /hello HTTP/2.0\r\nHost: x\r\n\r\n", 505);
    REJECT("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505);
    REJECT("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405);
    ck_assert_int_eq(atomic_load(&t_requests), 0);
    teardown();
}
END_TEST

/* ---- peers, listeners -------------------------------------------------------------- */
START_TEST(unix_socket_peer_credentials)
{
    setup();
    struct stat st;
    ck_assert_int_eq(stat(T.sock, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0660);
    int fd = t_connect_unix(T.sock);
    t_sends(fd, "GET /peer HTTP/1.1\r\nHost: localhost\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    char want[128];
    snprintf(want, sizeof want, "1 %d %d %d", (int)getuid(), (int)getgid(), (int)getpid());
    ck_assert_str_eq(r.body, want);
    close(fd);
    /* TCP peers are not unix peers */
    ck_assert_int_eq(t_roundtrip(T.port, "GET /peer HTTP/1.1\r\nHost: x\r\n\r\n", &r), 200);
    ck_assert(strncmp(r.body, "0 ", 2) == 0);
    teardown();
}
END_TEST

static void t_noop_handler(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    al_http_reply(req, 200, NULL, "", 0);
}

static void t_done_flag(void *arg)
{
    *(bool *)arg = true;
}

START_TEST(listen_unix_replaces_stale_socket_and_refuses_files)
{
    char dir[64];
    al_test_tmpdir(dir, sizeof dir, "http");
    char path[128], file[128];
    snprintf(path, sizeof path, "%s/a.sock", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    /* A stale socket: bound, then its owner went away. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    close(fd);
    FILE *f = fopen(file, "w");
    fputs("precious", f);
    fclose(f);

    uv_loop_t loop;
    uv_loop_init(&loop);
    struct al_http_server *s;
    struct al_http_server_opts o = {.on_request = t_noop_handler};
    ck_assert_int_eq(al_http_server_new(&loop, &o, &s), 0);
    struct al_error err = {0};
    ck_assert_int_eq(al_http_server_listen_unix(s, path, 0600, &err), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(al_http_server_listen_unix(s, file, 0600, &err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a socket"));
    ck_assert_int_eq(stat(file, &st), 0); /* untouched */
    /* A live socket is not stolen. */
    ck_assert_int_eq(al_http_server_listen_unix(s, path, 0600, &err), -EADDRINUSE);
    ck_assert_int_eq(al_http_server_listen_tcp(s, "not-an-ip", 0, &err), -EINVAL);
    bool done = false;
    al_http_server_close(s, t_done_flag, &done);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert(done);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ck_assert_int_ne(stat(path, &st), 0); /* our socket file is removed on close */
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

START_TEST(listen_tcp_v6_and_listen_fd)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct al_http_server *s;
    struct al_http_server_opts o = {.on_request = t_noop_handler};
    ck_assert_int_eq(al_http_server_new(&loop, &o, &s), 0);
    struct al_error err = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    ck_assert_int_eq(al_http_server_listen_fd(s, fd, &err), 0);
    ck_assert_int_gt(al_http_server_port(s), 0);
    int v6 = al_http_server_listen_tcp(s, "::1", 0, &err);
    ck_assert(v6 == 0 || v6 == UV_EADDRNOTAVAIL || v6 == UV_EAFNOSUPPORT);
    int nolisten = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(al_http_server_listen_fd(s, nolisten, &err), -EINVAL);
    close(nolisten);
    bool done = false;
    al_http_server_close(s, t_done_flag, &done);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert(done);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(serve_fd_on_a_socketpair)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct al_http_server *s;
    struct al_http_server_opts o = {.on_request = t_handler};
    ck_assert_int_eq(al_http_server_new(&loop, &o, &s), 0);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct al_error err = {0};
    ck_assert_int_eq(al_http_server_serve_fd(s, sv[0], &err), 0);
    t_sends(sv[1], "GET /peer HTTP/1.1\r\nHost: x\r\n\r\n");
    char buf[1024] = "";
    size_t len = 0;
    for (int i = 0; i < 200 && !strstr(buf, "\r\n\r\n1 "); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(sv[1], buf + len, sizeof buf - 1 - len, MSG_DONTWAIT);
        if (n > 0)
            len += (size_t)n;
        buf[len] = '\0';
        usleep(1000);
    }
    ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 200 OK"));
    ck_assert_int_eq(al_http_server_connections(s), 1);
    close(sv[1]);
    bool done = false;
    al_http_server_close(s, t_done_flag, &done);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert(done);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* ---- lifetimes --------------------------------------------------------------------- */
START_TEST(on_close_runs_when_the_peer_leaves_mid_request)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /slow?ms=10000 HTTP/1.1\r\nHost: x\r\n\r\n");
    uint64_t end = t_now_ms() + 3000;
    while (atomic_load(&t_requests) == 0 && t_now_ms() < end)
        usleep(1000);
    close(fd);
    while (atomic_load(&t_on_close) == 0 && t_now_ms() < end)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&t_on_close), 1);
    teardown();
}
END_TEST

START_TEST(detached_request_lives_until_the_handler_ends_it)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /late?ms=300 HTTP/1.1\r\nHost: x\r\nUser-Agent: gone\r\n\r\n");
    ck_assert_int_eq(t_wait_int(&t_requests, 1, 3000), 1);
    close(fd); /* the peer leaves; the handler (no on_close) still holds the request */
    uint64_t end = t_now_ms() + 3000;
    while (atomic_load(&http__live_conns) && t_now_ms() < end)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 1); /* detached, not freed */
    ck_assert_int_eq(t_wait_int(&t_late_rc, -EPIPE, 3000), -EPIPE);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0); /* released by the late answer */
    teardown();
}
END_TEST

START_TEST(server_close_runs_on_close_for_requests_in_flight)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /chunks?n=1000&delay=50 HTTP/1.1\r\nHost: x\r\n\r\n");
    uint64_t end = t_now_ms() + 3000;
    while (atomic_load(&t_requests) == 0 && t_now_ms() < end)
        usleep(1000);
    tsrv_stop(&T); /* closes the server with the request in flight */
    ck_assert_int_eq(atomic_load(&t_on_close), 1);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    char buf[4096];
    bool closed;
    t_read_until_close(fd, buf, sizeof buf, 3000, &closed);
    ck_assert(closed);
    close(fd);
}
END_TEST

START_TEST(slow_reader_gets_everything_through_flow_control)
{
    setup();
    int fd = t_connect_tcp(T.port);
    /* Not below loopback's MSS (64 KiB), or TCP's silly-window avoidance paces it. */
    int rcvbuf = 256 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    t_sends(fd, "GET /bulk?kib=16384 HTTP/1.1\r\nHost: x\r\n\r\n");
    /* Not read yet: 16 MiB do not fit in the socket buffers, so the server has to queue and
     * wait for a drain. Waited for (10 s at least), not assumed after a fixed time. */
    for (int i = 0; i < 10000 && atomic_load(&t_drains) == 0; i++)
        usleep(1000);
    ck_assert_int_gt(atomic_load(&t_drains), 0);
    struct t_reader rd = {.len = 0};
    static struct t_resp r;
    ck_assert(t_read_response(fd, &rd, &r, 10000));
    ck_assert_int_eq(r.status, 200);
    ck_assert(has_header(&r, "content-length:16777216"));
    ck_assert_uint_eq(r.total, 16777216);
    close(fd);
    teardown();
}
END_TEST

START_TEST(peer_that_stops_reading_is_disconnected)
{
    struct al_http_limits lim = {.write_timeout_ms = 300};
    setup_limits(&lim);
    int fd = t_connect_tcp(T.port);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    t_sends(fd, "GET /bulk?kib=65536 HTTP/1.1\r\nHost: x\r\n\r\n");
    uint64_t end = t_now_ms() + 5000;
    while (atomic_load(&t_on_close) == 0 && t_now_ms() < end)
        usleep(5000);
    ck_assert_int_eq(atomic_load(&t_on_close), 1);
    close(fd);
    teardown();
}
END_TEST

/* Every prefix of each request, then a disconnect (FIN or RST): no leak, no crash, and
 * every request the handler saw is released (ASan checks the rest). */
static void disconnect_at_every_byte(const char *req, bool rst, bool read_some)
{
    size_t len = strlen(req);
    for (size_t k = 0; k <= len; k++) {
        int fd = t_connect_tcp(T.port);
        t_send(fd, req, k);
        if (read_some) {
            char buf[256];
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            if (poll(&pfd, 1, k == len ? 30 : 1) == 1)
                (void)recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        }
        if (rst) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(fd);
    }
}

START_TEST(client_disconnect_at_every_stage)
{
    setup();
    const char *reqs[] = {
        "POST /stream?pause=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n"
        "hello world",
        "GET /chunks?n=5&delay=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /slow?ms=5 HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /gate HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        disconnect_at_every_byte(reqs[i], false, false);
        disconnect_at_every_byte(reqs[i], true, false);
        disconnect_at_every_byte(reqs[i], false, true);
    }
    /* Let the server notice every disconnect. */
    uint64_t end = t_now_ms() + 5000;
    while ((atomic_load(&http__live_reqs) || atomic_load(&http__live_conns)) && t_now_ms() < end)
        usleep(5000);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
    ck_assert_int_gt(atomic_load(&t_on_close), 0);
    /* Still serving. */
    struct t_resp r;
    ck_assert_int_eq(t_roundtrip(T.port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r), 200);
    teardown();
}
END_TEST

/* ---- aborted responses -------------------------------------------------------------- */
/* Reads until the peer closes; *reset = the close was a reset (ECONNRESET). */
static size_t read_to_close(int fd, char *out, size_t cap, bool *reset)
{
    size_t len = 0;
    *reset = false;
    uint64_t end = t_now_ms() + 5000;
    while (t_now_ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
        if (n < 0 && errno == ECONNRESET) {
            *reset = true;
            break;
        }
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
    ck_assert_msg(t_now_ms() < end, "the connection was not closed");
    return len;
}

START_TEST(abort_chunked_response_has_no_last_chunk)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    /* A parser sees the body start and then the connection end: not a complete response. */
    ck_assert(!t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "partial");
    ck_assert_int_eq(atomic_load(&t_abort_rc), 0);
    close(fd);
    /* On the wire: the chunk, never the terminating "0" chunk. */
    fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    char raw[4096];
    bool reset;
    read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_ptr_nonnull(strstr(raw, "Transfer-Encoding: chunked"));
    ck_assert_ptr_nonnull(strstr(raw, "7\r\npartial\r\n"));
    ck_assert_ptr_null(strstr(raw, "\r\n0\r\n\r\n"));
    close(fd);
    teardown();
}
END_TEST

START_TEST(abort_length_response_closes_short)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=length HTTP/1.1\r\nHost: x\r\n\r\n");
    struct t_reader rd = {.len = 0};
    struct t_resp r;
    ck_assert(!t_read_response(fd, &rd, &r, 5000));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "partial"); /* 7 of the 100 bytes announced */
    ck_assert_int_eq(atomic_load(&t_abort_rc), 0);
    close(fd);
    /* A response already complete stays complete: -EALREADY, and the connection closes. */
    fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=full HTTP/1.1\r\nHost: x\r\n\r\n");
    ck_assert(t_read_response(fd, &rd, &r, 5000));
    ck_assert_str_eq(r.body, "partial");
    char raw[256];
    bool reset;
    read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_int_eq(atomic_load(&t_abort_rc), -EALREADY);
    close(fd);
    teardown();
}
END_TEST

START_TEST(abort_unframed_responses_reset_the_connection)
{
    setup();
    /* Before any response: no answer, a reset. */
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=none HTTP/1.1\r\nHost: x\r\n\r\n");
    char raw[4096];
    bool reset;
    size_t n = read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_uint_eq(n, 0);
    ck_assert(reset);
    close(fd);
    /* HTTP/1.0: the body is delimited by the close alone, so only a reset tells. */
    fd = t_connect_tcp(T.port);
    t_sends(fd, "GET /abort?mode=chunked HTTP/1.0\r\n\r\n");
    read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_msg(reset, "a close-delimited body was ended by a plain close: %s", raw);
    ck_assert_ptr_null(strstr(raw, "chunked"));
    close(fd);
    /* Over a unix socket the close is all there is (documented). */
    fd = t_connect_unix(T.sock);
    t_sends(fd, "GET /abort?mode=chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_ptr_nonnull(strstr(raw, "7\r\npartial\r\n"));
    ck_assert_ptr_null(strstr(raw, "\r\n0\r\n\r\n"));
    close(fd);
    teardown();
}
END_TEST

START_TEST(abort_while_the_request_body_arrives)
{
    setup();
    int fd = t_connect_tcp(T.port);
    t_sends(fd, "POST /abort-body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n");
    char raw[4096];
    bool reset;
    /* The server does not wait for the rest of the body: the connection closes. */
    read_to_close(fd, raw, sizeof raw, &reset);
    ck_assert_ptr_nonnull(strstr(raw, "3\r\ngot\r\n"));
    ck_assert_ptr_null(strstr(raw, "\r\n0\r\n\r\n"));
    ck_assert_int_eq(atomic_load(&t_abort_rc), 0);
    ck_assert_int_eq(atomic_load(&t_body_err), 0); /* no body callback after the abort */
    close(fd);
    teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_server");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 60);
    T_ADD(tc, hello_has_date_server_and_keepalive);
    T_ADD(tc, keep_alive_serves_many_requests_on_one_connection);
    T_ADD(tc, pipelined_requests_answer_in_order);
    T_ADD(tc, chunked_request_body_is_decoded);
    T_ADD(tc, streamed_request_body_with_pause_and_resume);
    T_ADD(tc, streamed_response_first_chunk_arrives_before_second_is_written);
    T_ADD(tc, content_length_response_in_pieces);
    T_ADD(tc, json_and_error_replies_have_e2b_shape);
    T_ADD(tc, no_content_has_no_body_and_keeps_alive);
    T_ADD(tc, headers_are_case_insensitive_and_counted);
    T_ADD(tc, absolute_form_routes_on_its_path_and_query);
    T_ADD(tc, head_response_has_headers_but_no_body);
    T_ADD(tc, expect_100_continue_when_the_body_is_claimed);
    T_ADD(tc, expect_100_continue_unclaimed_gets_answer_and_close);
    T_ADD(tc, unknown_expectation_gets_417);
    T_ADD(tc, unclaimed_body_is_discarded_and_connection_reused);
    T_ADD(tc, unclaimed_body_over_the_limit_closes_after_answer);
    T_ADD(tc, http10_closes_and_gets_close_delimited_stream);
    T_ADD(tc, body_over_read_cap_gets_413_json);
    T_ADD(tc, header_block_over_limit_gets_431);
    T_ADD(tc, slowloris_headers_get_408);
    T_ADD(tc, silent_connection_is_closed_after_header_timeout);
    T_ADD(tc, stalled_body_gets_408_and_body_error);
    T_ADD(tc, idle_keepalive_connection_is_closed);
    T_ADD(tc, over_max_connections_gets_503);
    T_ADD(tc, content_length_with_transfer_encoding_is_400);
    T_ADD(tc, bad_chunk_size_is_400);
    T_ADD(tc, obs_fold_is_400);
    T_ADD(tc, nul_cr_lf_in_headers_are_400);
    T_ADD(tc, malformed_request_lines_and_headers_are_400);
    T_ADD(tc, unix_socket_peer_credentials);
    T_ADD(tc, listen_unix_replaces_stale_socket_and_refuses_files);
    T_ADD(tc, listen_tcp_v6_and_listen_fd);
    T_ADD(tc, serve_fd_on_a_socketpair);
    T_ADD(tc, on_close_runs_when_the_peer_leaves_mid_request);
    T_ADD(tc, detached_request_lives_until_the_handler_ends_it);
    T_ADD(tc, server_close_runs_on_close_for_requests_in_flight);
    T_ADD(tc, slow_reader_gets_everything_through_flow_control);
    T_ADD(tc, peer_that_stops_reading_is_disconnected);
    T_ADD(tc, client_disconnect_at_every_stage);
    T_ADD(tc, abort_chunked_response_has_no_last_chunk);
    T_ADD(tc, abort_length_response_closes_short);
    T_ADD(tc, abort_unframed_responses_reset_the_connection);
    T_ADD(tc, abort_while_the_request_body_arrives);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
