/* tests/unit/controlplane/test_cp_rest_proxy: data-plane routing through airlockd
 * (cp_rest_fixture.h): by E2b-Sandbox-Id, by access token, by Host as getHost(port) builds
 * it; unknown, duplicated and paused sandboxes; autoResume only with the sandbox's own
 * credentials; and what the proxy does to the bytes: cut-off downloads fail in the client,
 * Host and framing kept, Connection-named fields dropped, cookies made host-only, WebSocket
 * upgrades relayed end to end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cp_rest_fixture.h"

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
    Suite *s = suite_create("cp_rest_proxy");
    TCase *t = cp_rest_tcase("proxy");
    tcase_add_test(t, dataplane_routing);
    tcase_add_test(t, proxy_cut_off_downloads_fail_in_the_client);
    tcase_add_test(t, proxy_keeps_host_and_length_and_drops_connection_fields);
    tcase_add_test(t, proxy_relays_websocket_upgrades);
    tcase_add_test(t, proxy_makes_sandbox_cookies_host_only);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
