/* Unit tests: common/http utilities (decoding, scanning, parsing helpers; no sockets). */
#include "al_test.h"
#include "common/http.h"
#include "common/http_head.h"
#include "common/http_internal.h"
#include "common/percent.h"

#include <errno.h>
#include <string.h>

static int q(const char *query, const char *name, char *out, size_t outlen)
{
    memset(out, '#', outlen);
    return al_http_query_get(query, name, out, outlen);
}

START_TEST(query_finds_decodes_and_takes_the_first)
{
    char v[64];
    ck_assert_int_eq(q("a=1&b=2", "b", v, sizeof v), 0);
    ck_assert_str_eq(v, "2");
    ck_assert_int_eq(q("a=1&a=2", "a", v, sizeof v), 0);
    ck_assert_str_eq(v, "1");
    ck_assert_int_eq(q("?path=%2Ftmp%2Fx+y.txt&username=user", "path", v, sizeof v), 0);
    ck_assert_str_eq(v, "/tmp/x y.txt");
    ck_assert_int_eq(q("x=hello+world%21%c3%A9", "x", v, sizeof v), 0);
    ck_assert_str_eq(v, "hello world!\xc3\xa9");
    ck_assert_int_eq(q("%61=encoded-key", "a", v, sizeof v), 0);
    ck_assert_str_eq(v, "encoded-key");
    ck_assert_int_eq(q("my+key=1", "my key", v, sizeof v), 0);
    ck_assert_str_eq(v, "1");
}
END_TEST

START_TEST(query_empty_and_missing_values)
{
    char v[16];
    ck_assert_int_eq(q("flag&x=1", "flag", v, sizeof v), 0);
    ck_assert_str_eq(v, "");
    ck_assert_int_eq(q("a=&b=1", "a", v, sizeof v), 0);
    ck_assert_str_eq(v, "");
    ck_assert_int_eq(q("a=1", "b", v, sizeof v), -ENOENT);
    ck_assert_int_eq(q("", "a", v, sizeof v), -ENOENT);
    ck_assert_int_eq(q(NULL, "a", v, sizeof v), -ENOENT);
    ck_assert_int_eq(q("ab=1&ba=2", "a", v, sizeof v), -ENOENT); /* no prefix matches */
    ck_assert_int_eq(q("a=1&&&b=2", "b", v, sizeof v), 0);
    ck_assert_str_eq(v, "2");
    ck_assert_int_eq(q("a=1=2", "a", v, sizeof v), 0); /* '=' in a value is data */
    ck_assert_str_eq(v, "1=2");
}
END_TEST

START_TEST(query_bad_escapes_and_sizes)
{
    char v[16];
    ck_assert_int_eq(q("a=%zz", "a", v, sizeof v), -EINVAL);
    ck_assert_int_eq(q("a=%4", "a", v, sizeof v), -EINVAL);
    ck_assert_int_eq(q("a=%", "a", v, sizeof v), -EINVAL);
    ck_assert_int_eq(q("a=x%00y", "a", v, sizeof v), -EINVAL); /* encoded NUL */
    ck_assert_int_eq(q("a%=1&a=2", "a", v, sizeof v), 0);      /* a broken key never matches */
    ck_assert_str_eq(v, "2");
    ck_assert_int_eq(q("a=12345", "a", v, 5), -E2BIG);
    ck_assert_int_eq(q("a=12345", "a", v, 6), 0);
    ck_assert_str_eq(v, "12345");
    ck_assert_int_eq(q("a=%41%41", "a", v, 3), 0); /* decoded length counts */
    ck_assert_str_eq(v, "AA");
    ck_assert_int_eq(q("a=", "a", v, 0), -E2BIG);
}
END_TEST

START_TEST(query_metadata_encoded_three_times)
{
    /* E2B list filters: the metadata parameter arrives encoded three times. */
    char v[128];
    ck_assert_int_eq(q("metadata=owner%3Dagent%252520x%26k%3Dv", "metadata", v, sizeof v), 0);
    ck_assert_str_eq(v, "owner=agent%2520x&k=v");
    char part[64];
    ck_assert_int_eq(q(v, "owner", part, sizeof part), 0);
    ck_assert_str_eq(part, "agent%20x");
    ck_assert_int_eq(al_percent_decode(part, strlen(part), part, sizeof part, 0), 7);
    ck_assert_str_eq(part, "agent x");
    /* The query's contract: an encoded NUL is a bad escape (-EINVAL), in a value or a key. */
    ck_assert_int_eq(q("a=x%00y", "a", v, sizeof v), -EINVAL);
    ck_assert_int_eq(q("a%00=1&a=2", "a", v, sizeof v), 0);
    ck_assert_str_eq(v, "2");
}
END_TEST

START_TEST(status_texts)
{
    ck_assert_str_eq(al_http_status_text(200), "OK");
    ck_assert_str_eq(al_http_status_text(413), "Content Too Large");
    ck_assert_str_eq(al_http_status_text(431), "Request Header Fields Too Large");
    ck_assert_str_eq(al_http_status_text(599), "Server Error");
    ck_assert_str_eq(al_http_status_text(299), "Success");
}
END_TEST

static int scan_all(const char *s, bool request, size_t max, size_t *used)
{
    struct al_http_head_scan sc;
    al_http_head_scan_init(&sc, request, max);
    return al_http_head_scan(&sc, s, strlen(s), used);
}

/* The reason a whole head is refused for ("" when accepted). */
static const char *scan_reason(const char *s, bool request)
{
    struct al_http_head_scan sc;
    al_http_head_scan_init(&sc, request, 1 << 16);
    size_t used;
    int rc = al_http_head_scan(&sc, s, strlen(s), &used);
    if (rc == 1)
        return used == strlen(s) ? "" : "data_after_head";
    if (rc == 0)
        return "incomplete";
    ck_assert_str_eq(al_http_head_scan_message(&sc)[0] ? "x" : "", "x");
    return al_http_head_scan_reason(&sc);
}

START_TEST(scanner_finds_the_block_end_and_refuses_bad_lines)
{
    size_t used;
    const char *ok = "GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
    ck_assert_int_eq(scan_all(ok, true, 1000, &used), 1);
    ck_assert_uint_eq(used, strlen(ok) - 4);
    ck_assert_int_eq(scan_all("\r\n\r\nGET / HTTP/1.1\r\n\r\n", true, 1000, &used), 1);
    ck_assert_int_eq(scan_all("GET / HTTP/1.1\r\nHost: x\r\n", true, 1000, &used), 0);
    ck_assert_uint_eq(used, 25);
    ck_assert_int_eq(scan_all(ok, true, 20, &used), -E2BIG);
    /* the limit is exact */
    ck_assert_int_eq(scan_all(ok, true, strlen(ok) - 4, &used), 1);
    ck_assert_int_eq(scan_all(ok, true, strlen(ok) - 5, &used), -E2BIG);
    ck_assert_int_eq(scan_all("GET / HTTP/1.1\nHost: x\r\n\r\n", true, 1000, &used), -EBADMSG);
    ck_assert_uint_eq(used, 14); /* the byte refused */

    static const struct {
        const char *head;
        bool request;
        const char *reason;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\nX-Y: a b\t\xc3\xa9\r\nE:\r\n\r\n", true, ""},
        {"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false, ""},
        {"HTTP/1.1 204\r\n\r\n", false, ""},
        {"HTTP/1.0 404 Not \xc3\xa9 Found\r\n\r\n", false, ""},
        {"PRI * HTTP/2.0\r\n\r\n", true, ""}, /* the version's meaning is the caller's */
        {"GET / HTTP/1.1\nHost: x\n\n", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nHost: x\n\r\n", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nHost: x\r\n\n", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nHost: x\r\n\rX", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", true, "obs_fold"},
        {"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n\tb\r\n\r\n", true, "obs_fold"},
        {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", true, "obs_fold"},
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", true, "invalid_header_name"},
        {"GET / HTTP/1.1\r\nHo(st: x\r\n\r\n", true, "invalid_header_name"},
        {"GET / HTTP/1.1\r\n:x\r\n\r\n", true, "invalid_header_name"},
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", true, "invalid_header_name"},
        {"GET / HTTP/1.1\r\nHost: x\x01y\r\n\r\n", true, "invalid_header_value"},
        {"GET / HTTP/1.1\r\nHost: x\x7f\r\n\r\n", true, "invalid_header_value"},
        {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", true, "invalid_request_line"},
        {"GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n", true, "invalid_request_line"},
        {"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", true, "invalid_request_line"},
        {"GET / HTTP/11\r\nHost: x\r\n\r\n", true, "invalid_request_line"},
        {"GET /\r\n\r\n", true, "invalid_request_line"}, /* HTTP/0.9 */
        {"G(T / HTTP/1.1\r\n\r\n", true, "invalid_request_line"},
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n", true, "data_after_head"},
        {"HTTP/1.1200 OK\r\n\r\n", false, "invalid_status_line"},
        {"HTTP/1.1 20 OK\r\n\r\n", false, "invalid_status_line"},
        {"HTTP/1.1 200 O\x01K\r\n\r\n", false, "invalid_status_line"},
        {"\r\nHTTP/1.1 200 OK\r\n\r\n", false, "invalid_status_line"},
        {"HTTP/1.1 200 OK\r\nX: \x7f\r\n\r\n", false, "invalid_header_value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(strcmp(scan_reason(cases[i].head, cases[i].request), cases[i].reason) == 0,
                      "case %zu: %s, want %s", i, scan_reason(cases[i].head, cases[i].request),
                      cases[i].reason);
    /* NUL (which strlen cannot carry) */
    static const char nul[] = "GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n";
    struct al_http_head_scan sc;
    al_http_head_scan_init(&sc, true, 1000);
    ck_assert_int_eq(al_http_head_scan(&sc, nul, sizeof nul - 1, &used), -EBADMSG);
    ck_assert_str_eq(al_http_head_scan_reason(&sc), "invalid_header_value");
    ck_assert_int_eq(al_http_head_scan(&sc, "\r\n", 2, &used), -EBADMSG); /* stays refused */
}
END_TEST

START_TEST(scanner_state_survives_any_split)
{
    static const struct {
        const char *head;
        bool request;
        const char *reason; /* NULL: accepted */
    } cases[] = {
        {"POST /x HTTP/1.1\r\nHost: x\r\nA: 1\r\n\r\n", true, NULL},
        {"\r\nGET /a?b HTTP/1.0\r\nA:\r\n\r\n", true, NULL},
        {"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", false, NULL},
        {"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", true, "obs_fold"},
        {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", true, "invalid_line_ending"},
        {"GET / HTTP/1.1\r\nA b\r\n\r\n", true, "invalid_header_name"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *msg = cases[k].head;
        size_t len = strlen(msg);
        for (size_t cut = 0; cut <= len; cut++) {
            struct al_http_head_scan sc;
            al_http_head_scan_init(&sc, cases[k].request, 1000);
            size_t used = 0;
            int rc = al_http_head_scan(&sc, msg, cut, &used);
            if (rc == 0)
                rc = al_http_head_scan(&sc, msg + cut, len - cut, &used);
            if (cases[k].reason) {
                ck_assert_int_eq(rc, -EBADMSG);
                ck_assert_str_eq(al_http_head_scan_reason(&sc), cases[k].reason);
            } else {
                ck_assert_msg(rc == 1, "case %zu cut %zu: %d", k, cut, rc);
            }
        }
        /* one byte at a time */
        struct al_http_head_scan sc;
        al_http_head_scan_init(&sc, cases[k].request, 1000);
        int rc = 0;
        size_t used;
        for (size_t i = 0; msg[i] && rc == 0; i++)
            rc = al_http_head_scan(&sc, msg + i, 1, &used);
        ck_assert_int_eq(rc, cases[k].reason ? -EBADMSG : 1);
    }
    /* the bound counts across pieces, exactly */
    const char *ok = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for (size_t cut = 0; cut <= strlen(ok); cut++) {
        struct al_http_head_scan sc;
        al_http_head_scan_init(&sc, true, strlen(ok) - 1);
        size_t used;
        int rc = al_http_head_scan(&sc, ok, cut, &used);
        if (rc == 0)
            rc = al_http_head_scan(&sc, ok + cut, strlen(ok) - cut, &used);
        ck_assert_int_eq(rc, -E2BIG);
        ck_assert_str_eq(al_http_head_scan_reason(&sc), "head_too_large");
    }
}
END_TEST

START_TEST(header_store_keeps_empty_values_and_counts)
{
    struct http__hdrs h;
    http__hdrs_init(&h, 1000, 3);
    ck_assert_int_eq(http__hdrs_field(&h, "Ho", 2), 0);
    ck_assert_int_eq(http__hdrs_field(&h, "st", 2), 0);
    ck_assert_int_eq(http__hdrs_field_done(&h), 0);
    ck_assert_int_eq(http__hdrs_value(&h, "a", 1), 0);
    ck_assert_int_eq(http__hdrs_value_done(&h), 0);
    ck_assert_int_eq(http__hdrs_field(&h, "Empty", 5), 0);
    ck_assert_int_eq(http__hdrs_field_done(&h), 0);
    ck_assert_int_eq(http__hdrs_value_done(&h), 0); /* "Empty:" */
    ck_assert_int_eq(http__hdrs_field(&h, "X", 1), 0);
    ck_assert_int_eq(http__hdrs_field_done(&h), 0);
    ck_assert_int_eq(http__hdrs_value(&h, "y", 1), 0);
    ck_assert_int_eq(http__hdrs_value_done(&h), 0);
    ck_assert_int_eq(http__hdrs_field(&h, "Four", 4), -E2BIG);
    ck_assert_int_eq(http__hdrs_finish(&h), 0);
    ck_assert_uint_eq(h.n, 3);
    ck_assert_str_eq(h.v[0].name, "Host");
    ck_assert_str_eq(h.v[0].value, "a");
    ck_assert_str_eq(h.v[1].name, "Empty");
    ck_assert_str_eq(h.v[1].value, "");
    ck_assert_str_eq(h.v[2].value, "y");
    ck_assert_ptr_eq(http__find(h.v, h.n, "EMPTY"), &h.v[1]);
    http__hdrs_free(&h);
    /* the byte cap */
    http__hdrs_init(&h, 8, 10);
    ck_assert_int_eq(http__hdrs_field(&h, "abcdefgh", 8), 0);
    ck_assert_int_eq(http__hdrs_field_done(&h), -E2BIG);
    http__hdrs_free(&h);
}
END_TEST

START_TEST(tokens_and_values)
{
    ck_assert(http__is_token("Content-Type", 12));
    ck_assert(!http__is_token("Host ", 5));
    ck_assert(!http__is_token("", 0));
    ck_assert(!http__is_token("a:b", 3));
    ck_assert(http__is_field_value("text/plain; charset=utf-8\t"));
    ck_assert(!http__is_field_value("a\r\nb"));
    ck_assert(!http__is_field_value("a\x7f"));
}
END_TEST

START_TEST(targets_parse_with_clear_errors)
{
    struct http__target t;
    char msg[256];
    ck_assert_int_eq(http__parse_target("unix:/run/a.sock", &t, msg, sizeof msg), 0);
    ck_assert(t.is_unix);
    ck_assert_str_eq(t.path, "/run/a.sock");
    ck_assert_str_eq(t.hostport, "localhost");
    ck_assert_int_eq(http__parse_target("unix:///run/a.sock", &t, msg, sizeof msg), 0);
    ck_assert_str_eq(t.path, "/run/a.sock");
    ck_assert_int_eq(http__parse_target("127.0.0.1:3000", &t, msg, sizeof msg), 0);
    ck_assert_str_eq(t.host, "127.0.0.1");
    ck_assert_int_eq(t.port, 3000);
    ck_assert_int_eq(http__parse_target("[::1]:8080", &t, msg, sizeof msg), 0);
    ck_assert_str_eq(t.host, "::1");
    ck_assert_str_eq(t.hostport, "[::1]:8080");
    ck_assert_int_eq(http__parse_target("http://localhost:49983/prefix", &t, msg, sizeof msg), 0);
    ck_assert_str_eq(t.host, "localhost");
    ck_assert_int_eq(t.port, 49983);
    ck_assert_int_eq(http__parse_target("http://example.test", &t, msg, sizeof msg), 0);
    ck_assert_int_eq(t.port, 80);
    ck_assert_int_eq(http__parse_target("example.test", &t, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "missing port"));
    ck_assert_int_eq(http__parse_target("h:0", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("h:65536", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("h:12x", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("[::1:80", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("h:1/p", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("https://h:1", &t, msg, sizeof msg), 0);
    ck_assert(t.tls);
    ck_assert_int_eq(t.port, 1);
    ck_assert_int_eq(http__parse_target("https://reg.example/v2/", &t, msg, sizeof msg), 0);
    ck_assert(t.tls);
    ck_assert_int_eq(t.port, 443);
    ck_assert_str_eq(t.hostport, "reg.example:443");
    ck_assert_int_eq(http__parse_target("http://reg.example", &t, msg, sizeof msg), 0);
    ck_assert(!t.tls);
    ck_assert_int_eq(http__parse_target("unix:", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("", &t, msg, sizeof msg), -EINVAL);
    ck_assert_int_eq(http__parse_target("h o:1", &t, msg, sizeof msg), -EINVAL);
}
END_TEST

START_TEST(error_body_is_escaped_json)
{
    char out[256];
    size_t n = http__error_body(out, sizeof out, 400, "bad \"x\"\n");
    ck_assert_str_eq(out, "{\"code\":400,\"message\":\"bad \\\"x\\\"\\n\"}");
    ck_assert_uint_eq(n, strlen(out));
}
END_TEST

START_TEST(hop_by_hop_fields_and_connection_options)
{
    const struct al_http_header h[] = {{"Connection", "keep-alive, X-Secret ,\tX-Other, Upgrade"},
                                       {"connection", "x-third"},
                                       {"X-Secret", "1"},
                                       {"Host", "a"}};
    const char *hop[] = {
        "Connection",          "keep-alive", "Proxy-Connection", "TE",
        "transfer-encoding",   "Trailer",    "Upgrade",          "Proxy-Authenticate",
        "Proxy-Authorization", "X-Secret",   "x-other",          "X-THIRD",
        "content-length"};
    for (size_t i = 0; i < sizeof hop / sizeof *hop; i++)
        ck_assert_msg(al_http_forward_drops_header(h, 4, hop[i], 0), "%s should be hop-by-hop",
                      hop[i]);
    const char *e2e[] = {"Host",    "Content-Type", "Authorization",
                         "X-Secre", "X-Secret-2",   "Via",
                         "Cookie",  "keep",         "X-HTTP-Method-Override"};
    for (size_t i = 0; i < sizeof e2e / sizeof *e2e; i++)
        ck_assert_msg(!al_http_forward_drops_header(h, 4, e2e[i], 0), "%s should be end-to-end",
                      e2e[i]);
    /* Without a Connection header only the fixed list. */
    ck_assert(!al_http_forward_drops_header(h + 2, 2, "X-Secret", 0));
    ck_assert(al_http_forward_drops_header(NULL, 0, "TE", 0));
    /* Switching protocols: Upgrade stays, even though Connection names it. */
    ck_assert(!al_http_forward_drops_header(h, 4, "upgrade", AL_HTTP_FWD_UPGRADE));
    ck_assert(al_http_forward_drops_header(h, 4, "Connection", AL_HTTP_FWD_UPGRADE));
    ck_assert(al_http_forward_drops_header(h, 4, "X-Secret", AL_HTTP_FWD_UPGRADE));
    ck_assert(al_http_forward_drops_header(h, 4, "X-HTTP-Method", AL_HTTP_FWD_METHOD_DECIDED));
}
END_TEST

START_TEST(request_fields_a_proxy_removes)
{
    const char v1[] = "keep-alive, X-Secret ,\tX-Other";
    const char v2[] = "x-third";
    const struct al_http_field f[] = {{"Connection", 10, v1, sizeof v1 - 1},
                                      {"Host", 4, "a", 1},
                                      {"CONNECTION", 10, v2, sizeof v2 - 1}};
    const unsigned m = AL_HTTP_FWD_METHOD_DECIDED;
    const char *gone[] = {"Connection",
                          "keep-alive",
                          "Proxy-Connection",
                          "TE",
                          "transfer-encoding",
                          "Trailer",
                          "Upgrade",
                          "Proxy-Authenticate",
                          "Proxy-Authorization",
                          "X-Secret",
                          "x-other",
                          "X-THIRD",
                          "Content-Length",
                          "X-HTTP-Method-Override",
                          "x-http-method",
                          "X-Method-Override"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        ck_assert_msg(al_http_forward_drops(f, 3, gone[i], strlen(gone[i]), m),
                      "%s should be removed", gone[i]);
    const char *kept[] = {"Host",       "Content-Type", "Authorization", "X-Secre",
                          "X-Secret-2", "Cookie",       "keep",          "X-HTTP-Methods"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        ck_assert_msg(!al_http_forward_drops(f, 3, kept[i], strlen(kept[i]), m),
                      "%s should be forwarded", kept[i]);
    /* Method overrides only where the policy decided on the method. */
    ck_assert(!al_http_forward_drops(f, 3, "X-HTTP-Method-Override", 22, 0));
    /* Values are not NUL-terminated: a name is matched by its length only. */
    ck_assert(!al_http_forward_drops(f, 3, "X-Secret-2", 10, m));
    ck_assert(al_http_forward_drops(f, 3, "X-Secret-2", 8, m));
    ck_assert(!al_http_forward_drops(f + 1, 1, "X-Secret", 8, m));
    ck_assert(al_http_list_has(" a ,, b\t", 8, "b", 1));
    ck_assert(!al_http_list_has("ab", 2, "a", 1));
    ck_assert(!al_http_list_has("a", 1, "", 0));
}
END_TEST

/* Cookie lists: one segment reader and one filter for the Cookie and Set-Cookie fields. */
static bool drop_b(const struct al_http_cookie_seg *seg, void *arg)
{
    (void)arg;
    return seg->name_len == 1 && seg->name[0] == 'b';
}

START_TEST(cookie_list_segments_and_filter)
{
    const char *list = " a = 1 ;b;=x; c=\"q\"\t";
    struct al_http_cookie_seg seg = {0};
    ck_assert(al_http_cookie_next(list, &seg));
    ck_assert_uint_eq(seg.index, 0);
    ck_assert_uint_eq(seg.raw_len, 7);
    ck_assert_uint_eq(seg.name_len, 1);
    ck_assert_int_eq(seg.name[0], 'a');
    ck_assert_uint_eq(seg.value_len, 1);
    ck_assert_int_eq(seg.value[0], '1');
    ck_assert(al_http_cookie_next(list, &seg));
    ck_assert_uint_eq(seg.index, 1);
    ck_assert_uint_eq(seg.name_len, 1);
    ck_assert_ptr_null(seg.value);
    ck_assert(al_http_cookie_next(list, &seg));
    ck_assert_uint_eq(seg.name_len, 0);
    ck_assert_uint_eq(seg.value_len, 1);
    ck_assert(al_http_cookie_next(list, &seg));
    ck_assert_uint_eq(seg.index, 3);
    ck_assert_uint_eq(seg.value_len, 3);
    ck_assert(!al_http_cookie_next(list, &seg));
    seg = (struct al_http_cookie_seg){0};
    ck_assert(al_http_cookie_next("", &seg));
    ck_assert(!al_http_cookie_next("", &seg));

    char out[64];
    ck_assert_int_eq(al_http_cookie_filter("a=1; b=2;c=3", out, sizeof out, drop_b, NULL), 1);
    ck_assert_str_eq(out, "a=1;c=3");
    /* The first kept loses its leading blanks; blank segments after the first go. */
    ck_assert_int_eq(al_http_cookie_filter("b=2;  a=1 ; ;c=3;", out, sizeof out, drop_b, NULL), 1);
    ck_assert_str_eq(out, "a=1 ;c=3");
    /* A blank first segment keeps its place: an attribute never becomes the pair. */
    ck_assert_int_eq(al_http_cookie_filter("; b=1; Path=/", out, sizeof out, drop_b, NULL), 1);
    ck_assert_str_eq(out, "; Path=/");
    ck_assert_int_eq(al_http_cookie_filter("b", out, sizeof out, drop_b, NULL), 1);
    ck_assert_str_eq(out, "");
    /* Too small: nothing at all, never a part. */
    ck_assert_int_eq(al_http_cookie_filter("a=1;c=3", out, 7, drop_b, NULL), -ENOSPC);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(al_http_cookie_filter("a=1;c=3", out, 8, drop_b, NULL), 0);
    ck_assert_str_eq(out, "a=1;c=3");
    ck_assert_int_eq(al_http_cookie_filter("", out, 0, drop_b, NULL), -ENOSPC);
}
END_TEST

START_TEST(traffic_token_is_a_one_way_function_of_the_access_token)
{
    char a[AL_HTTP_TRAFFIC_TOKEN_LEN + 1], b[AL_HTTP_TRAFFIC_TOKEN_LEN + 1],
        c[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    al_http_traffic_token("token-one", 9, a);
    al_http_traffic_token("token-one", 9, b);
    al_http_traffic_token("token-two", 9, c);
    ck_assert_uint_eq(strlen(a), AL_HTTP_TRAFFIC_TOKEN_LEN);
    ck_assert_uint_eq(strspn(a, "0123456789abcdef"), AL_HTTP_TRAFFIC_TOKEN_LEN);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
    ck_assert_ptr_null(strstr(a, "token"));
}
END_TEST

/* The llhttp every component links is the strict build (cmake/llhttp.cmake): shapes the
 * lenient build accepts are errors, each with the one reason every refusal path gives. */
static llhttp_errno_t parse_request(const char *in)
{
    llhttp_settings_t st;
    llhttp_settings_init(&st);
    llhttp_t p;
    llhttp_init(&p, HTTP_REQUEST, &st);
    return llhttp_execute(&p, in, strlen(in));
}

START_TEST(linked_llhttp_is_strict_and_its_errors_mean_one_thing)
{
#define CHUNKED "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    ck_assert_int_eq(parse_request(CHUNKED "1\r\nx\r\n0\r\n\r\n"), HPE_OK);
    static const struct {
        const char *in, *reason;
    } bad[] = {
        /* chunk data longer than its size (the lenient build skips two bytes, any two) */
        {CHUNKED "1\r\nxy\r\n0\r\n\r\n", "invalid_line_ending"},
        {CHUNKED "1\r\nx\n0\r\n\r\n", "invalid_line_ending"},
        {CHUNKED "1\rx\r\n0\r\n\r\n", "invalid_line_ending"},
        {"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", "invalid_target"},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
         "data_after_close"},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", "invalid_header"},
        {"GET / HTTP/1.1\nHost: a\n\n", "invalid_header"},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
         "ambiguous_framing"},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
         "ambiguous_framing"},
    };
#undef CHUNKED
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llhttp_errno_t e = parse_request(bad[i].in);
        ck_assert_msg(e != HPE_OK && e != HPE_PAUSED, "case %zu accepted (lenient llhttp?)", i);
        int status = 0;
        ck_assert_str_eq(al_http_parse_error_reason(e, &status), bad[i].reason);
        ck_assert_int_eq(status, 400);
    }
    int status = 0;
    ck_assert_str_eq(al_http_parse_error_reason(HPE_PAUSED_H2_UPGRADE, &status),
                     "h2_prior_knowledge_refused");
    ck_assert_int_eq(status, 403);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_util");
    TCase *tc = tcase_create("util");
    tcase_add_test(tc, query_finds_decodes_and_takes_the_first);
    tcase_add_test(tc, query_empty_and_missing_values);
    tcase_add_test(tc, query_bad_escapes_and_sizes);
    tcase_add_test(tc, query_metadata_encoded_three_times);
    tcase_add_test(tc, status_texts);
    tcase_add_test(tc, scanner_finds_the_block_end_and_refuses_bad_lines);
    tcase_add_test(tc, scanner_state_survives_any_split);
    tcase_add_test(tc, header_store_keeps_empty_values_and_counts);
    tcase_add_test(tc, tokens_and_values);
    tcase_add_test(tc, targets_parse_with_clear_errors);
    tcase_add_test(tc, error_body_is_escaped_json);
    tcase_add_test(tc, hop_by_hop_fields_and_connection_options);
    tcase_add_test(tc, request_fields_a_proxy_removes);
    tcase_add_test(tc, cookie_list_segments_and_filter);
    tcase_add_test(tc, traffic_token_is_a_one_way_function_of_the_access_token);
    tcase_add_test(tc, linked_llhttp_is_strict_and_its_errors_mean_one_thing);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
