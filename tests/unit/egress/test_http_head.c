/* tests/unit/egress/test_http_head: request heads as the proxy sees them: collection,
 * checks (and their reasons), re-serialisation for the upstream, and the JSON answers. */
#include "al_test.h"
#include "egress/http.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct th {
    struct egress_http_head h;
    llhttp_t p;
    llhttp_settings_t s;
    bool complete;
};

static int th__url(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&((struct th *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int th__field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&((struct th *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int th__value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&((struct th *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int th__done(llhttp_t *p)
{
    struct th *t = p->data;
    if (egress_http_head_finish(&t->h) < 0)
        return HPE_USER;
    t->complete = true;
    return HPE_PAUSED;
}

/* Parses msg, a request or a response head (fed byte by byte when split) into t; returns
 * llhttp's last errno. */
static int th_parse_type(struct th *t, llhttp_type_t type, const char *msg, uint32_t max,
                         bool bytewise)
{
    memset(t, 0, sizeof *t);
    egress_http_head_init(&t->h, max);
    llhttp_settings_init(&t->s);
    t->s.on_url = th__url;
    t->s.on_status = th__url;
    t->s.on_header_field = th__field;
    t->s.on_header_value = th__value;
    t->s.on_headers_complete = th__done;
    llhttp_init(&t->p, type, &t->s);
    t->p.data = t;
    size_t len = strlen(msg);
    if (!bytewise)
        return llhttp_execute(&t->p, msg, len);
    int e = HPE_OK;
    for (size_t i = 0; i < len && e == HPE_OK && !t->complete; i++)
        e = llhttp_execute(&t->p, msg + i, 1);
    return e;
}

static int th_parse(struct th *t, const char *msg, uint32_t max, bool bytewise)
{
    return th_parse_type(t, HTTP_REQUEST, msg, max, bytewise);
}

/* Check a head that arrived on conn; returns the reason ("" when accepted). */
static const char *th_check_on(const char *msg, const struct egress_http_conn *conn,
                               struct egress_http_request *r, int *status)
{
    static struct th t;
    static char why[64];
    egress_http_head_free(&t.h);
    int e = th_parse(&t, msg, 16384, false);
    if (!t.complete) {
        snprintf(why, sizeof why, "parse:%d", e);
        return why;
    }
    const char *reason = NULL;
    if (egress_http_check_request(&t.h, &t.p, conn, r, status, &reason) < 0)
        return reason;
    return "";
}

/* ... on a plain connection to port. */
static const char *th_check(const char *msg, uint16_t port, struct egress_http_request *r,
                            int *status)
{
    return th_check_on(msg, &(struct egress_http_conn){.port = port}, r, status);
}

START_TEST(collects_head_across_pieces)
{
    struct th t;
    int e = th_parse(
        &t, "GET /a/b?x=1 HTTP/1.1\r\nHost: allowed.test\r\nX-Empty:\r\nX-Tail: v  \r\n\r\n", 4096,
        true);
    ck_assert_int_eq(e, HPE_PAUSED);
    ck_assert(t.complete);
    ck_assert_str_eq(t.h.buf + t.h.url, "/a/b?x=1");
    ck_assert_uint_eq(t.h.n_hdr, 3);
    size_t n;
    ck_assert_str_eq(egress_http_head_get(&t.h, "host", &n), "allowed.test");
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(egress_http_head_get(&t.h, "X-Empty", NULL), "");
    ck_assert_str_eq(egress_http_head_get(&t.h, "X-Tail", NULL), "v"); /* trailing OWS dropped */
    ck_assert_ptr_null(egress_http_head_get(&t.h, "Missing", &n));
    ck_assert_uint_eq(n, 0);
    egress_http_head_free(&t.h);
}
END_TEST

START_TEST(head_bounds)
{
    struct th t;
    char big[3000];
    snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: %01500d\r\n\r\n", 0);
    th_parse(&t, big, 1024, false);
    ck_assert(!t.complete);
    ck_assert(t.h.too_large);
    egress_http_head_free(&t.h);
    /* More headers than the collector keeps. */
    char many[8192];
    size_t o = (size_t)snprintf(many, sizeof many, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < EGRESS_HTTP_MAX_HEADERS + 1; i++)
        o += (size_t)snprintf(many + o, sizeof many - o, "H%d: v\r\n", i);
    snprintf(many + o, sizeof many - o, "\r\n");
    th_parse(&t, many, 65536, false);
    ck_assert(!t.complete);
    ck_assert(t.h.too_large);
    egress_http_head_free(&t.h);
}
END_TEST

START_TEST(accepts_and_describes)
{
    struct egress_http_request r;
    int st;
    ck_assert_str_eq(th_check("GET /p?q=1 HTTP/1.1\r\nHost: Allowed.Test\r\n\r\n", 80, &r, &st),
                     "");
    ck_assert_str_eq(r.method, "GET");
    ck_assert_str_eq(r.host_name, "Allowed.Test");
    ck_assert_uint_eq(r.port, 80);
    ck_assert_int_eq((int)r.path_len, 2);
    ck_assert(r.keep_alive);
    ck_assert_int_eq((int)r.content_length, -1);
    ck_assert_str_eq(
        th_check("GET http://allowed.test:8080/x HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n", 8080,
                 &r, &st),
        "");
    ck_assert(r.absolute_form);
    ck_assert_int_eq((int)r.target_len, 2);
    ck_assert_str_eq(th_check("GET / HTTP/1.1\r\nHost: [2001:db8::1]:8443\r\n\r\n", 8443, &r, &st),
                     "");
    ck_assert_str_eq(r.host_name, "[2001:db8::1]");
    ck_assert_str_eq(
        th_check("POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", 80, &r,
                 &st),
        "");
    ck_assert(r.chunked);
    ck_assert_str_eq(
        th_check("POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 7\r\n\r\n", 80, &r, &st), "");
    ck_assert_int_eq((int)r.content_length, 7);
    ck_assert_str_eq(th_check("GET / HTTP/1.0\r\nHost: a.test\r\n\r\n", 80, &r, &st), "");
    ck_assert(!r.keep_alive);
    ck_assert_str_eq(
        th_check(
            "GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: WebSocket\r\n\r\n",
            80, &r, &st),
        "");
    ck_assert(r.websocket);
}
END_TEST

START_TEST(refuses_with_reasons)
{
    static const struct {
        const char *msg;
        uint16_t port;
        const char *reason;
        int status;
        bool tls;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", 80, "duplicate_host", 400,
         false},
        {"GET / HTTP/1.1\r\n\r\n", 80, "missing_host", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n", 80, "port_mismatch", 403, false},
        {"GET / HTTP/1.1\r\nHost: a.test:0\r\n\r\n", 80, "invalid_port", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test:65536\r\n\r\n", 80, "invalid_port", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test:8o\r\n\r\n", 80, "invalid_port", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n", 80, "invalid_port", 400, false},
        {"GET / HTTP/1.1\r\nHost: a@b.test\r\n\r\n", 80, "userinfo_in_authority", 400, false},
        {"GET / HTTP/1.1\r\nHost: 2001:db8::1\r\n\r\n", 80, "invalid_host", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test%2fb\r\n\r\n", 80, "invalid_host", 400, false},
        {"GET / HTTP/1.1\r\nHost: a!b.test\r\n\r\n", 80, "invalid_host", 400, false},
        {"GET / HTTP/1.1\r\nHost: [zz]\r\n\r\n", 80, "invalid_host", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test:+80\r\n\r\n", 80, "invalid_port", 400, false},
        {"GET http://a.test?x HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "invalid_target", 400, false},
        {"GET ftp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "invalid_target", 400, false},
        {"GET http://[::1]:80/ HTTP/1.1\r\nHost: [::2]\r\n\r\n", 80, "authority_mismatch", 400,
         false},
        {"GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "authority_mismatch", 400,
         false},
        {"GET http://a.test:81/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 81, "authority_mismatch", 400,
         false},
        {"GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "scheme_mismatch", 403, false},
        {"GET /x#y HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "fragment_in_target", 400, false},
        {"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", 80, "asterisk_form_refused", 400, false},
        {"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", 443, "connect_refused", 403,
         false},
        {"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 80,
         "unsupported_transfer_encoding", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", 80,
         "h2c_upgrade_refused", 403, false},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nHTTP2-Settings: AA\r\n\r\n", 80, "h2c_upgrade_refused",
         403, false},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: connect-udp\r\nConnection: Upgrade\r\n\r\n",
         80, "upgrade_refused", 403, false},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", 80,
         "upgrade_without_connection_upgrade", 400, false},
        {"POST / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", 80,
         "websocket_needs_get", 400, false},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nExpect: magic\r\n\r\n", 80, "expectation_unsupported",
         417, false},
        /* Inside a TLS session the proxy terminated: https as the scheme, 443 as the default
         * port, Host required. */
        {"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "", 0, true},
        {"GET / HTTP/1.1\r\nHost: a.test:443\r\n\r\n", 443, "", 0, true},
        {"GET / HTTP/1.1\r\nHost: a.test:8443\r\n\r\n", 8443, "", 0, true},
        {"GET https://a.test/x?y HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "", 0, true},
        {"GET https://a.test:443/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "", 0, true},
        {"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 8443, "port_mismatch", 403, true},
        {"GET / HTTP/1.1\r\nHost: a.test:8443\r\n\r\n", 443, "port_mismatch", 403, true},
        {"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "scheme_mismatch", 403, true},
        {"GET https://a.test/ HTTP/1.0\r\n\r\n", 443, "missing_host", 400, true},
        {"GET https://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "authority_mismatch", 400,
         true},
        {"GET https://a.test:8443/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 443, "authority_mismatch",
         400, true},
        {"CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n", 443, "connect_in_tunnel", 403,
         true},
        {"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 443,
         "unsupported_transfer_encoding", 400, true},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: TLS/1.2\r\nConnection: Upgrade\r\n\r\n", 443,
         "upgrade_refused", 403, true},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket, h2c\r\nConnection: Upgrade\r\n\r\n",
         443, "h2c_upgrade_refused", 403, true},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", 443,
         "upgrade_without_connection_upgrade", 400, true},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nExpect: magic\r\n\r\n", 443, "expectation_unsupported",
         417, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct egress_http_request r;
        int st = 0;
        const struct egress_http_conn conn = {.port = cases[i].port, .tls = cases[i].tls};
        const char *why = th_check_on(cases[i].msg, &conn, &r, &st);
        ck_assert_msg(strcmp(why, cases[i].reason) == 0, "case %zu: reason '%s', want '%s'", i, why,
                      cases[i].reason);
        ck_assert_msg(st == cases[i].status, "case %zu: status %d, want %d", i, st,
                      cases[i].status);
    }
}
END_TEST

/* The Host field as it goes upstream, on either kind of connection. */
START_TEST(host_as_it_goes_upstream)
{
    /* Host as it goes upstream: as sent, or the absolute-form's authority without the
     * scheme's default port. */
    struct egress_http_request r;
    int st;
    const struct egress_http_conn c443 = {.port = 443, .tls = true}, c80 = {.port = 443};
    ck_assert_str_eq(th_check_on("GET / HTTP/1.1\r\nHost: A.test:443\r\n\r\n", &c443, &r, &st), "");
    struct al_buf out;
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_append_host(&r, &out), 0);
    ck_assert_str_eq(out.data, "Host: A.test:443\r\n");
    al_buf_free(&out);
    ck_assert_str_eq(th_check_on("GET http://a.test:443/ HTTP/1.0\r\n\r\n", &c80, &r, &st), "");
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_append_host(&r, &out), 0);
    ck_assert_str_eq(out.data, "Host: a.test:443\r\n");
    al_buf_free(&out);
}
END_TEST

/* Bodies re-framed for the next hop: as they are, or one chunk per piece, and the end. */
START_TEST(body_framing)
{
    struct al_buf out;
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_body_append(&out, true, "0123456789abcdefg", 17), 0);
    ck_assert_int_eq(egress_http_body_append(&out, true, "", 0), 0); /* not a last chunk */
    ck_assert_int_eq(egress_http_body_append(&out, true, "x", 1), 0);
    ck_assert_int_eq(egress_http_body_end(&out, true), 0);
    ck_assert_int_eq((int)out.len, 34);
    ck_assert_int_eq(memcmp(out.data, "11\r\n0123456789abcdefg\r\n1\r\nx\r\n0\r\n\r\n", 34), 0);
    al_buf_reset(&out);
    ck_assert_int_eq(egress_http_body_append(&out, false, "abc", 3), 0);
    ck_assert_int_eq(egress_http_body_end(&out, false), 0);
    ck_assert_int_eq((int)out.len, 3);
    ck_assert_int_eq(memcmp(out.data, "abc", 3), 0);
    al_buf_free(&out);
}
END_TEST

/* The strict parser refuses the classic smuggling shapes before any check. */
START_TEST(strict_parser_refuses_smuggling)
{
    static const char *const bad[] = {
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "GET / HTTP/1.1\nHost: a\n\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct th t;
        th_parse(&t, bad[i], 4096, false);
        ck_assert_msg(!t.complete, "case %zu was accepted", i);
        egress_http_head_free(&t.h);
    }
}
END_TEST

START_TEST(serializes_for_the_upstream)
{
    struct th t;
    th_parse(&t,
             "GET http://allowed.test/x?y=1 HTTP/1.1\r\nHost: allowed.test\r\nConnection: "
             "keep-alive, X-Hop\r\n"
             "X-Hop: secret-ish\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: "
             "x\r\nKeep-Alive: 5\r\n"
             "TE: trailers\r\nAuthorization: Bearer t\r\nAccept: */*\r\n\r\n",
             8192, false);
    ck_assert(t.complete);
    struct egress_http_request r;
    int st;
    const char *why = NULL;
    ck_assert_int_eq(egress_http_check_request(&t.h, &t.p, &(struct egress_http_conn){.port = 80},
                                               &r, &st, &why),
                     0);
    struct al_buf out;
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_request(&t.h, &r, false, &out), 0);
    ck_assert_str_eq(out.data, "GET /x?y=1 HTTP/1.1\r\nHost: allowed.test\r\n"
                               "Authorization: Bearer t\r\nAccept: */*\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    th_parse(&t,
             "POST /u HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nConnection: "
             "close\r\n\r\n",
             8192, false);
    ck_assert_int_eq(egress_http_check_request(&t.h, &t.p, &(struct egress_http_conn){.port = 80},
                                               &r, &st, &why),
                     0);
    al_buf_init(&out, 0);
    egress_http_serialize_request(&t.h, &r, false, &out);
    ck_assert_str_eq(out.data, "POST /u HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n"
                               "Connection: close\r\n\r\n");
    al_buf_free(&out);
    /* The proxy keeping its upstream: the client's close stays on the client's hop. */
    al_buf_init(&out, 0);
    egress_http_serialize_request(&t.h, &r, true, &out);
    ck_assert_str_eq(out.data,
                     "POST /u HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    /* An HTTP/1.0 client that will close: the upstream is asked to keep its connection. */
    th_parse(&t, "GET /o HTTP/1.0\r\nHost: a.test\r\n\r\n", 8192, false);
    ck_assert_int_eq(egress_http_check_request(&t.h, &t.p, &(struct egress_http_conn){.port = 80},
                                               &r, &st, &why),
                     0);
    ck_assert(!r.keep_alive);
    al_buf_init(&out, 0);
    egress_http_serialize_request(&t.h, &r, false, &out);
    ck_assert_str_eq(out.data, "GET /o HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    al_buf_free(&out);
    al_buf_init(&out, 0);
    egress_http_serialize_request(&t.h, &r, true, &out);
    ck_assert_str_eq(out.data, "GET /o HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    th_parse(&t,
             "GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
             "Sec-WebSocket-Key: k\r\n\r\n",
             8192, false);
    ck_assert_int_eq(egress_http_check_request(&t.h, &t.p, &(struct egress_http_conn){.port = 80},
                                               &r, &st, &why),
                     0);
    al_buf_init(&out, 0);
    egress_http_serialize_request(&t.h, &r, false, &out);
    ck_assert_str_eq(out.data, "GET /ws HTTP/1.1\r\nHost: a.test\r\nSec-WebSocket-Key: k\r\n"
                               "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);
}
END_TEST

/* RFC 9110 7.6.1: every Connection field's options go, not only the first field's; the
 * method-override fields never reach the upstream (it would run another method than the
 * one decided). */
START_TEST(serializes_without_connection_options_and_overrides)
{
    struct th t;
    th_parse(&t,
             "POST /x HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\nX-A: 1\r\n"
             "connection: X-Secret-Token , x-b\r\nX-Secret-Token: s3cr3t\r\nX-B: 2\r\n"
             "X-HTTP-Method-Override: DELETE\r\nx-http-method: PUT\r\nX-Method-Override: "
             "PATCH\r\nContent-Length: 0\r\nAccept: */*\r\n\r\n",
             8192, false);
    ck_assert(t.complete);
    struct egress_http_request r;
    int st;
    const char *why = NULL;
    ck_assert_int_eq(egress_http_check_request(&t.h, &t.p, &(struct egress_http_conn){.port = 80},
                                               &r, &st, &why),
                     0);
    struct al_buf out;
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_request(&t.h, &r, false, &out), 0);
    ck_assert_str_eq(out.data, "POST /x HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\nAccept: */*\r\n"
                               "Content-Length: 0\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);
}
END_TEST

/* A response head parsed as egress/http.c parses one. */
static void th_parse_response(struct th *t, const char *msg)
{
    th_parse_type(t, HTTP_RESPONSE, msg, 8192, false);
    ck_assert(t->complete);
}

/* The plain path's responses lose what a relay leaves behind too (RFC 9110 7.6.1), the
 * framing of the body forwarded as it came excepted. */
START_TEST(serializes_responses_without_hop_by_hop_fields)
{
    struct th t;
    th_parse_response(&t, "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: "
                          "timeout=5\r\nX-Hop: secret-ish\r\nProxy-Authenticate: Basic\r\n"
                          "Trailer: X-T\r\nTransfer-Encoding: chunked\r\nProxy-Connection: x\r\n"
                          "Content-Type: text/plain\r\nX-End: kept\r\n\r\n");
    struct al_buf out;
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_response(&t.h, &t.p, false, false, &out), 0);
    ck_assert_str_eq(out.data, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                               "Content-Type: text/plain\r\nX-End: kept\r\n\r\n");
    al_buf_reset(&out);
    ck_assert_int_eq(egress_http_serialize_response(&t.h, &t.p, true, false, &out), 0);
    ck_assert_ptr_nonnull(strstr(out.data, "X-End: kept\r\nConnection: close\r\n\r\n"));
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    th_parse_response(&t, "HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\nConnection: "
                          "keep-alive\r\n\r\n");
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_response(&t.h, &t.p, false, true, &out), 0);
    ck_assert_str_eq(out.data, "HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\n"
                               "Connection: keep-alive\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    /* A 101 keeps its Upgrade (Connection names it) and restates Connection. */
    th_parse_response(&t,
                      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade, X-Hop\r\nX-Hop: 1\r\nSec-WebSocket-Accept: a\r\n\r\n");
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_response(&t.h, &t.p, true, false, &out), 0);
    ck_assert_str_eq(out.data, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                               "Sec-WebSocket-Accept: a\r\nConnection: Upgrade\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);

    /* No reason phrase. */
    th_parse_response(&t, "HTTP/1.1 204\r\nX-A: 1\r\n\r\n");
    al_buf_init(&out, 0);
    ck_assert_int_eq(egress_http_serialize_response(&t.h, &t.p, false, false, &out), 0);
    ck_assert_str_eq(out.data, "HTTP/1.1 204\r\nX-A: 1\r\n\r\n");
    al_buf_free(&out);
    egress_http_head_free(&t.h);
}
END_TEST

/* egress_http_decide with a policy that answers what the test sets. */
struct td {
    struct egress_http_verdict v;
    struct egress_http_question q; /* what was asked */
};

static void td__decide(void *arg, const struct egress_http_question *q,
                       struct egress_http_verdict *v)
{
    struct td *t = arg;
    t->q = *q;
    *v = t->v;
}

static int td_run(struct td *t, const struct egress_http_request *r, bool tls, uint64_t max,
                  struct egress_http_decision *out)
{
    const struct egress_http_conn conn = {.port = tls ? 8443 : 8080, .tls = tls};
    const struct egress_http_decide_args a = {
        .r = r,
        .conn = &conn,
        .host = "api.test",
        .host_len = 8,
        .max_body = max,
        .decide = td__decide,
        .arg = t,
    };
    return egress_http_decide(&a, out);
}

START_TEST(one_decision_on_a_head)
{
    struct egress_http_request r = {
        .method = "POST", .target = "/v1/x?q=1", .target_len = 9, .content_length = 10};
    struct td t = {.v = {.allow = true, .rule = "api", .reason = "rule_allows"}};
    struct egress_http_decision d;
    /* The question is the head's, on the connection's port and scheme. */
    ck_assert_int_eq(td_run(&t, &r, true, 0, &d), 0);
    ck_assert_str_eq(t.q.method, "POST");
    ck_assert_uint_eq(t.q.port, 8443);
    ck_assert(t.q.tls && t.q.body);
    ck_assert_uint_eq(t.q.path_len, 9);
    ck_assert_uint_eq(d.max_body, 0);
    /* Denials: 403 with the policy's reason, 400 when malformed. */
    t.v = (struct egress_http_verdict){.reason = "no_rule_matched"};
    ck_assert_int_eq(td_run(&t, &r, false, 0, &d), -EPERM);
    ck_assert_int_eq(d.status, 403);
    ck_assert_str_eq(d.error, "blocked_by_policy");
    ck_assert_str_eq(d.reason, "no_rule_matched");
    t.v.malformed = true;
    ck_assert_int_eq(td_run(&t, &r, false, 0, &d), -EPERM);
    ck_assert_int_eq(d.status, 400);
    ck_assert_str_eq(d.error, "bad_request");
    /* Bodies: the smaller bound, the proxy's or the policy's. */
    t.v = (struct egress_http_verdict){.allow = true, .max_body = 20};
    ck_assert_int_eq(td_run(&t, &r, false, 5, &d), -EPERM);
    ck_assert_int_eq(d.status, 413);
    ck_assert_str_eq(d.reason, "request_body_too_large");
    t.v.max_body = 9;
    ck_assert_int_eq(td_run(&t, &r, false, 0, &d), -EPERM);
    t.v.max_body = 10;
    ck_assert_int_eq(td_run(&t, &r, false, 100, &d), 0);
    ck_assert_uint_eq(d.max_body, 10);
    /* WebSockets: where the rule allows them, and never where frames cannot be inspected;
     * report mode lets them by as it lets the rest. */
    r = (struct egress_http_request){
        .method = "GET", .target = "/", .target_len = 1, .content_length = -1, .websocket = true};
    t.v = (struct egress_http_verdict){.allow = true};
    ck_assert_int_eq(td_run(&t, &r, true, 0, &d), -EPERM);
    ck_assert_str_eq(d.reason, "websocket_not_allowed");
    ck_assert(!t.q.body);
    t.v.websocket = true;
    ck_assert_int_eq(td_run(&t, &r, true, 0, &d), 0);
    t.v.inspect_strict = true;
    ck_assert_int_eq(td_run(&t, &r, true, 0, &d), -EPERM);
    ck_assert_str_eq(d.reason, "websocket_not_inspectable");
    t.v = (struct egress_http_verdict){.allow = true, .would_deny = true};
    ck_assert_int_eq(td_run(&t, &r, true, 0, &d), 0);
}
END_TEST

START_TEST(json_answers)
{
    struct al_buf b;
    al_buf_init(&b, 0);
    ck_assert_int_eq(egress_http_error_response(&b, 403, "blocked_by_policy", "rule \"x\"",
                                                "no_rule_matched", "abcd-1", true),
                     0);
    ck_assert_ptr_nonnull(strstr(b.data, "HTTP/1.1 403 Forbidden\r\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "Connection: close\r\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "X-Airlock-Request-Id: abcd-1\r\n"));
    const char *body = strstr(b.data, "\r\n\r\n") + 4;
    ck_assert_str_eq(body, "{\"error\":\"blocked_by_policy\",\"rule\":\"rule \\\"x\\\"\","
                           "\"reason\":\"no_rule_matched\",\"request_id\":\"abcd-1\"}\n");
    char cl[32];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", strlen(body));
    ck_assert_ptr_nonnull(strstr(b.data, cl));
    al_buf_reset(&b);
    egress_http_error_response(&b, 429, "too_many_connections", NULL, "sandbox_connection_limit",
                               "r", true);
    ck_assert_ptr_nonnull(strstr(b.data, "Retry-After: 1\r\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "\"rule\":null"));
    al_buf_free(&b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_head");
    TCase *t = tcase_create("head");
    tcase_add_test(t, collects_head_across_pieces);
    tcase_add_test(t, head_bounds);
    tcase_add_test(t, accepts_and_describes);
    tcase_add_test(t, refuses_with_reasons);
    tcase_add_test(t, host_as_it_goes_upstream);
    tcase_add_test(t, body_framing);
    tcase_add_test(t, strict_parser_refuses_smuggling);
    tcase_add_test(t, serializes_for_the_upstream);
    tcase_add_test(t, serializes_without_connection_options_and_overrides);
    tcase_add_test(t, serializes_responses_without_hop_by_hop_fields);
    tcase_add_test(t, one_decision_on_a_head);
    tcase_add_test(t, json_answers);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
