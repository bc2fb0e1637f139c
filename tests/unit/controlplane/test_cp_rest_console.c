/* tests/unit/controlplane/test_cp_rest_console: the web console (controlplane/console.c,
 * console_api.c) over the REST fixture (cp_rest_fixture.h): its assets and their security
 * headers, sign-in and the session cookie's attributes, the cookie authenticating API calls as
 * the signed-in key, CSRF refusals, sign-out, expiry, revocation, what a sandbox may see of a
 * session (nothing) or plant (nothing), the admin endpoints over a real audit log and the
 * policies directory, and the
 * terminal's WebSocket (console_term.c, console_ws.c): its frames, and who may open one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/auditlog.h"
#include "controlplane/console.h"
#include "controlplane/console_ws.h"
#include "controlplane/embedded.h"
#include "cp_rest_fixture.h"

/* A request to the API with these headers only (no key unless given). */
static void call(struct resp *r, const char *method, const char *path,
                 const struct al_http_header *h, size_t n, const char *body)
{
    req_full(r, g_target, method, path, NULL, body, h, n);
}

static const char *hdr(const struct resp *r, const char *name)
{
    return resp_header(r, name, 0);
}

static size_t n_set_cookies(const struct resp *r)
{
    size_t n = 0;
    while (resp_header(r, "Set-Cookie", n))
        n++;
    return n;
}

static void assert_console_headers(const struct resp *r)
{
    const char *csp = hdr(r, "Content-Security-Policy");
    ck_assert_ptr_nonnull(csp);
    ck_assert_ptr_nonnull(strstr(csp, "default-src 'self'"));
    ck_assert_ptr_nonnull(strstr(csp, "script-src 'self';"));
    ck_assert_ptr_nonnull(strstr(csp, "frame-ancestors 'none'"));
    ck_assert_ptr_nonnull(strstr(csp, "require-trusted-types-for 'script'"));
    ck_assert_ptr_null(strstr(csp, "unsafe"));
    ck_assert_str_eq(hdr(r, "X-Content-Type-Options"), "nosniff");
    ck_assert_str_eq(hdr(r, "X-Frame-Options"), "DENY");
}

/* Signs in with key; cookie gets "name=value" (for a Cookie header), csrf the token. */
static void signin(const char *key, const struct al_http_header *extra, size_t n_extra,
                   char cookie[160], char csrf[80])
{
    char body[256];
    snprintf(body, sizeof body, "{\"apiKey\":\"%s\"}", key);
    struct al_http_header h[8] = {{"Content-Type", "application/json"}};
    size_t n = 1;
    for (size_t i = 0; i < n_extra; i++)
        h[n++] = extra[i];
    struct resp r;
    call(&r, "POST", "/console/api/session", h, n, body);
    ck_assert_msg(r.status == 200, "sign-in: %d %s", r.status, r.raw);
    const char *sc = hdr(&r, "Set-Cookie");
    ck_assert_ptr_nonnull(sc);
    const char *semi = strchr(sc, ';');
    ck_assert_ptr_nonnull(semi);
    snprintf(cookie, 160, "%.*s", (int)(semi - sc), sc);
    snprintf(csrf, 80, "%s", jstr(r.body, "csrfToken"));
    ck_assert_int_eq(strlen(csrf), 64);
    /* The body never carries the session id. */
    ck_assert_ptr_null(strstr(r.raw, strchr(cookie, '=') + 1));
    resp_free(&r);
}

START_TEST(console_assets)
{
    struct resp r;
    call(&r, "GET", "/console", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 308);
    ck_assert_str_eq(hdr(&r, "Location"), "/console/");
    resp_free(&r);
    call(&r, "GET", "/console/", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(hdr(&r, "Content-Type"), "text/html; charset=utf-8");
    assert_console_headers(&r);
    ck_assert_ptr_nonnull(strstr(r.raw, "<script type=\"module\" src=\"main.js\"></script>"));
    resp_free(&r);
    call(&r, "GET", "/console/main.js", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(hdr(&r, "Content-Type"), "text/javascript; charset=utf-8");
    assert_console_headers(&r);
    resp_free(&r);
    const char *missing[] = {"/console/nope.js", "/console/../rest.c", "/console/.hidden",
                             "/console/a/b.js"};
    for (size_t i = 0; i < 4; i++) {
        call(&r, "GET", missing[i], NULL, 0, NULL);
        ck_assert_msg(r.status == 404, "%s: %d", missing[i], r.status);
        resp_free(&r);
    }
    call(&r, "POST", "/console/", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);
    /* What is built in: no inline script or style in the page, no HTML sink in the scripts. */
    size_t n = 0;
    for (const struct cp_embedded *e = cp_embedded_console; e->name; e++, n++) {
        const char *s = (const char *)e->data;
        if (strstr(e->name, ".html")) {
            for (const char *p = strstr(s, "<script"); p; p = strstr(p + 1, "<script"))
                ck_assert_msg(strncmp(p, "<script type=\"module\" src=\"", 27) == 0,
                              "%s: a script without src", e->name);
            ck_assert_ptr_null(strstr(s, "<style"));
            ck_assert_ptr_null(strstr(s, "style="));
            ck_assert_ptr_null(strstr(s, " on"));
        }
        if (strstr(e->name, ".js")) {
            const char *sinks[] = {"innerHTML",      "outerHTML", "insertAdjacentHTML",
                                   "document.write", "eval(",     "new Function"};
            for (size_t i = 0; i < 6; i++)
                ck_assert_msg(!strstr(s, sinks[i]), "%s uses %s", e->name, sinks[i]);
            /* The SVG namespace's name (createElementNS) is the one http:// allowed: a name,
             * never fetched. */
            const char *svg_ns = "http://www.w3.org/2000/svg\"";
            for (const char *p = strstr(s, "http://"); p; p = strstr(p + 1, "http://"))
                ck_assert_msg(strncmp(p, svg_ns, strlen(svg_ns)) == 0, "%s names an outside URL",
                              e->name);
            ck_assert_msg(!strstr(s, "https://"), "%s names an outside URL", e->name);
        }
    }
    ck_assert_uint_ge(n, 5);
}
END_TEST

START_TEST(console_signin)
{
    struct resp r;
    struct al_http_header json[] = {{"Content-Type", "application/json"}};
    call(&r, "POST", "/console/api/session", json, 1,
         "{\"apiKey\":\"e2b_2222222222222222222222222222222222222222\"}");
    ck_assert_int_eq(r.status, 401);
    ck_assert_uint_eq(n_set_cookies(&r), 0);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "invalid API key"));
    resp_free(&r);
    /* A form post (no JSON), another site, unknown fields: refused. */
    struct al_http_header form[] = {{"Content-Type", "application/x-www-form-urlencoded"}};
    call(&r, "POST", "/console/api/session", form, 1, "apiKey=" KEY_ENV);
    ck_assert_int_eq(r.status, 415);
    resp_free(&r);
    struct al_http_header cross[] = {{"Content-Type", "application/json"},
                                     {"Origin", "http://evil.example"}};
    call(&r, "POST", "/console/api/session", cross, 2, "{\"apiKey\":\"" KEY_ENV "\"}");
    ck_assert_int_eq(r.status, 403);
    ck_assert_uint_eq(n_set_cookies(&r), 0);
    resp_free(&r);
    struct al_http_header site[] = {{"Content-Type", "application/json"},
                                    {"Sec-Fetch-Site", "cross-site"}};
    call(&r, "POST", "/console/api/session", site, 2, "{\"apiKey\":\"" KEY_ENV "\"}");
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    call(&r, "POST", "/console/api/session", json, 1, "{\"apiKey\":\"" KEY_ENV "\",\"x\":1}");
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    /* From the console's own page: the cookie, with its attributes. */
    char origin[96];
    snprintf(origin, sizeof origin, "http://%s", g_target);
    struct al_http_header ok[] = {{"Content-Type", "application/json"},
                                  {"Origin", origin},
                                  {"Sec-Fetch-Site", "same-origin"}};
    call(&r, "POST", "/console/api/session", ok, 3, "{\"apiKey\":\"" KEY_ENV "\"}");
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    assert_console_headers(&r);
    ck_assert_str_eq(hdr(&r, "Cache-Control"), "no-store");
    const char *sc = hdr(&r, "Set-Cookie");
    ck_assert_msg(strncmp(sc, "airlock_console=", 16) == 0 && strlen(sc) > 16 + 64, "%s", sc);
    ck_assert_ptr_nonnull(strstr(sc, "; Path=/;"));
    ck_assert_ptr_nonnull(strstr(sc, "; Max-Age=28800;"));
    ck_assert_ptr_nonnull(strstr(sc, "; HttpOnly"));
    ck_assert_ptr_nonnull(strstr(sc, "; SameSite=Strict"));
    ck_assert_ptr_null(strstr(sc, "Secure"));
    ck_assert_ptr_null(strstr(sc, "Domain"));
    ck_assert_str_eq(jstr(r.body, "keyId"), "env");
    ck_assert_ptr_nonnull(jstr(r.body, "expiresAt"));
    resp_free(&r);
    /* The cookie authenticates the API as the key. */
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    struct al_http_header c[] = {{"Cookie", cookie}};
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    call(&r, "GET", "/console/api/session", c, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.body, "csrfToken"), csrf);
    resp_free(&r);
    /* Another cookie value, a cookie twice: not a session. */
    struct al_http_header bad[] = {
        {"Cookie",
         "airlock_console=0000000000000000000000000000000000000000000000000000000000000000"}};
    call(&r, "GET", "/v2/sandboxes", bad, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "sign in again"));
    resp_free(&r);
    char two[400];
    snprintf(two, sizeof two, "%s; %s", cookie, cookie);
    struct al_http_header dup[] = {{"Cookie", two}};
    call(&r, "GET", "/v2/sandboxes", dup, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "more than once"));
    resp_free(&r);
    /* Behind TLS: Secure, with the __Host- prefix; that cookie, not the plain one, counts. */
    struct al_http_header tls[] = {{"X-Forwarded-Proto", "https"}};
    char scookie[160], scsrf[80];
    signin(KEY_ENV, tls, 1, scookie, scsrf);
    ck_assert_msg(strncmp(scookie, "__Host-airlock_console=", 23) == 0, "%s", scookie);
    struct al_http_header sc_ok[] = {{"Cookie", scookie}, {"X-Forwarded-Proto", "https"}};
    call(&r, "GET", "/v2/sandboxes", sc_ok, 2, NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    struct al_http_header plain_on_tls[] = {{"Cookie", cookie}, {"X-Forwarded-Proto", "https"}};
    call(&r, "GET", "/v2/sandboxes", plain_on_tls, 2, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
}
END_TEST

START_TEST(console_secure_cookie_attribute)
{
    struct resp r;
    struct al_http_header h[] = {{"Content-Type", "application/json"},
                                 {"X-Forwarded-Proto", "https"}};
    call(&r, "POST", "/console/api/session", h, 2, "{\"apiKey\":\"" KEY_ENV "\"}");
    ck_assert_int_eq(r.status, 200);
    const char *sc = hdr(&r, "Set-Cookie");
    ck_assert_ptr_nonnull(strstr(sc, "; Secure"));
    ck_assert_ptr_nonnull(strstr(sc, "; Path=/;"));
    ck_assert_ptr_null(strstr(sc, "Domain"));
    resp_free(&r);
}
END_TEST

START_TEST(console_csrf)
{
    char key[CP_APIKEY_LEN + 1];
    struct cp_apikey k = add_key("ops", CP_ROLE_ADMIN, NULL, key);
    char cookie[160], csrf[80];
    signin(key, NULL, 0, cookie, csrf);
    struct resp r;
    const char *body = "{\"templateID\":\"base\"}";
    struct al_http_header none[] = {{"Cookie", cookie}, {"Content-Type", "application/json"}};
    call(&r, "POST", "/v2/sandboxes", none, 2, body);
    ck_assert_msg(r.status == 403, "%d %s", r.status, r.raw);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "X-Airlock-CSRF"));
    resp_free(&r);
    char wrongtok[80];
    snprintf(wrongtok, sizeof wrongtok, "%s", csrf);
    wrongtok[0] = wrongtok[0] == 'a' ? 'b' : 'a';
    struct al_http_header wrong[] = {
        {"Cookie", cookie}, {"Content-Type", "application/json"}, {"X-Airlock-CSRF", wrongtok}};
    call(&r, "POST", "/v2/sandboxes", wrong, 3, body);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    struct al_http_header twice[] = {{"Cookie", cookie},
                                     {"Content-Type", "application/json"},
                                     {"X-Airlock-CSRF", csrf},
                                     {"X-Airlock-CSRF", wrongtok}};
    call(&r, "POST", "/v2/sandboxes", twice, 4, body);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    ck_assert_int_eq(g_n_started, 0);
    /* With the token: done, as the signed-in key. */
    struct al_http_header ok[] = {
        {"Cookie", cookie}, {"Content-Type", "application/json"}, {"X-Airlock-CSRF", csrf}};
    call(&r, "POST", "/v2/sandboxes", ok, 3, body);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(r.body, "sandboxID"));
    resp_free(&r);
    struct cp_sandbox *sb = cp_sandbox_get(&g_cp, id);
    ck_assert_ptr_nonnull(sb);
    ck_assert_str_eq(sb->rec.key_id, k.id);
    char path[128];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    call(&r, "DELETE", path, none, 1, NULL);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    struct al_http_header del[] = {{"Cookie", cookie}, {"X-Airlock-CSRF", csrf}};
    call(&r, "DELETE", path, del, 2, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    ck_assert_int_eq(g_stops, 1);
}
END_TEST

START_TEST(console_signout)
{
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    struct resp r;
    struct al_http_header c[] = {{"Cookie", cookie}};
    call(&r, "DELETE", "/console/api/session", c, 1, NULL);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    struct al_http_header out[] = {{"Cookie", cookie}, {"X-Airlock-CSRF", csrf}};
    call(&r, "DELETE", "/console/api/session", out, 2, NULL);
    ck_assert_int_eq(r.status, 204);
    const char *sc = hdr(&r, "Set-Cookie");
    ck_assert_ptr_nonnull(sc);
    ck_assert_ptr_nonnull(strstr(sc, "airlock_console=;"));
    ck_assert_ptr_nonnull(strstr(sc, "Max-Age=0"));
    resp_free(&r);
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "signed out"));
    resp_free(&r);
    call(&r, "GET", "/console/api/session", c, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
}
END_TEST

START_TEST(console_expiry)
{
    /* Set before anything reaches the loop: nothing else reads it meanwhile. */
    g_cp.cfg.console_session_ms = 1000;
    uint64_t t0 = al_now_ns();
    struct resp r;
    struct al_http_header json[] = {{"Content-Type", "application/json"}};
    call(&r, "POST", "/console/api/session", json, 1, "{\"apiKey\":\"" KEY_ENV "\"}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(hdr(&r, "Set-Cookie"), "; Max-Age=1;"));
    resp_free(&r);
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    struct al_http_header c[] = {{"Cookie", cookie}};
    /* Polled until refused (bounded): never before its second is over. */
    uint64_t deadline = al_now_ns() + 20ull * 1000000000ull;
    int status = 200;
    while (status == 200 && al_now_ns() < deadline) {
        call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
        status = r.status;
        if (status != 200) {
            ck_assert_int_eq(status, 401);
            ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "expired"));
        }
        resp_free(&r);
        if (status == 200)
            usleep(50000);
    }
    ck_assert_int_eq(status, 401);
    ck_assert_uint_ge(al_now_ns() - t0, 1000000000ull);
    /* And gone: the next request does not find it at all. */
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
}
END_TEST

START_TEST(console_revoked_key)
{
    char key[CP_APIKEY_LEN + 1];
    struct cp_apikey k = add_key("ops", CP_ROLE_ADMIN, NULL, key);
    char cookie[160], csrf[80];
    signin(key, NULL, 0, cookie, csrf);
    struct resp r;
    struct al_http_header c[] = {{"Cookie", cookie}};
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    ck_assert_int_eq(cp_store_key_revoke(s2, k.id, al_wall_ns(), NULL), 0);
    cp_store_close(s2);
    call(&r, "GET", "/v2/sandboxes", c, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "revoked"));
    resp_free(&r);
    call(&r, "GET", "/console/api/session", c, 1, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
}
END_TEST

START_TEST(console_sandbox_sees_no_session)
{
    char id[64], tok[80];
    create("{\"templateID\":\"base\"}", id, tok);
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    char cookies[300];
    snprintf(cookies, sizeof cookies, "x=1; %s; y=2", cookie);
    struct al_http_header h[] = {{"E2b-Sandbox-Id", id},
                                 {"E2b-Sandbox-Port", "49983"},
                                 {"X-Access-Token", tok},
                                 {"Cookie", cookies}};
    struct resp r;
    call(&r, "GET", "/seen", h, 4, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.body, "cookie"), "x=1; y=2");
    /* What a sandbox answers on airlockd's own origin runs in an opaque origin. */
    ck_assert_str_eq(hdr(&r, "Content-Security-Policy"), "sandbox");
    resp_free(&r);
    struct al_http_header only[] = {{"E2b-Sandbox-Id", id},
                                    {"E2b-Sandbox-Port", "49983"},
                                    {"X-Access-Token", tok},
                                    {"Cookie", cookie}};
    call(&r, "GET", "/seen", only, 4, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert(json_is_null(json_object_get(r.body, "cookie"))); /* the header is dropped */
    resp_free(&r);
    /* Nor can it plant one. */
    call(&r, "GET", "/console-cookie", h, 3, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(n_set_cookies(&r), 1);
    ck_assert_str_eq(hdr(&r, "Set-Cookie"), "airlock_consoleX=kept");
    resp_free(&r);
}
END_TEST

START_TEST(console_cookie_parsing)
{
    char v[80];
    bool found = false;
    ck_assert_int_eq(cp_console_cookie_find("a=1; airlock_console=abc; b=2", "airlock_console", v,
                                            sizeof v, &found),
                     1);
    ck_assert_str_eq(v, "abc");
    found = false;
    ck_assert_int_eq(cp_console_cookie_find("xairlock_console=1;airlock_console=\"q\"",
                                            "airlock_console", v, sizeof v, &found),
                     1);
    ck_assert_str_eq(v, "q");
    found = false;
    ck_assert_int_eq(
        cp_console_cookie_find("airlock_consolex=1", "airlock_console", v, sizeof v, &found), 0);
    found = false;
    ck_assert_int_eq(cp_console_cookie_find("airlock_console=1; airlock_console=2",
                                            "airlock_console", v, sizeof v, &found),
                     -EEXIST);
    found = false;
    ck_assert_int_eq(
        cp_console_cookie_find("airlock_console=0123456789", "airlock_console", v, 4, &found),
        -E2BIG);
    char out[128];
    ck_assert(cp_console_cookie_strip("a=1; airlock_console=s; __Host-airlock_console=t;b=2", out,
                                      sizeof out));
    ck_assert_str_eq(out, "a=1;b=2");
    ck_assert(!cp_console_cookie_strip("a=1; airlock_consoles=2", out, sizeof out));
    ck_assert_str_eq(out, "a=1; airlock_consoles=2");
    ck_assert(cp_console_cookie_strip("airlock_console=x", out, sizeof out));
    ck_assert_str_eq(out, "");
}
END_TEST

/* A real egress-shaped audit log: listed newest first, filtered, verified, then altered. */
/* The egress audit log of the fixture's state directory (dir gets its path), open to write. */
static struct al_auditlog *open_log(char dir[300])
{
    snprintf(dir, 300, "%s/audit", g_tmpdir);
    struct al_auditlog_opts o = {.dir = dir, .prefix = "egress"};
    struct al_auditlog *log;
    struct al_error err = {0};
    ck_assert_msg(al_auditlog_open(&o, &log, &err) == 0, "%s", err.msg);
    return log;
}

START_TEST(console_admin_audit)
{
    struct resp r;
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    call(&r, "GET", "/admin/audit", k, 1, NULL);
    ck_assert_msg(r.status == 404, "%d %s", r.status, r.raw);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), "/audit"));
    resp_free(&r);
    call(&r, "GET", "/admin/audit", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    char dir[300];
    struct al_auditlog *log = open_log(dir);
    for (int i = 0; i < 6; i++) {
        json_t *rec = json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "connection", "sandbox",
                                "sbx0000000000000000a", "decision", i % 2 ? "deny" : "allow",
                                "reason", i % 2 ? "no_rule" : "rule", "host",
                                i == 5 ? "<img src=x onerror=alert(1)>.example" : "pypi.org");
        ck_assert_int_eq(al_auditlog_append(log, rec, NULL), 0);
        json_decref(rec);
    }
    ck_assert_int_eq(al_auditlog_close(log), 0);
    call(&r, "GET", "/admin/audit?limit=4", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *recs = json_object_get(r.body, "records");
    ck_assert_uint_eq(json_array_size(recs), 4);
    ck_assert_str_eq(jstr(json_array_get(recs, 0), "host"), "<img src=x onerror=alert(1)>.example");
    uint64_t newest = json_integer_value(json_object_get(json_array_get(recs, 0), "seq"));
    ck_assert_uint_gt(newest, json_integer_value(json_object_get(json_array_get(recs, 1), "seq")));
    resp_free(&r);
    call(&r, "GET", "/admin/audit?decision=deny", k, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    recs = json_object_get(r.body, "records");
    ck_assert_uint_eq(json_array_size(recs), 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_str_eq(jstr(json_array_get(recs, i), "decision"), "deny");
    resp_free(&r);
    call(&r, "GET", "/admin/audit?decision=maybe", k, 1, NULL);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    call(&r, "GET", "/admin/audit?limit=0", k, 1, NULL);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    call(&r, "GET", "/admin/audit/verify", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_true(json_object_get(r.body, "intact")));
    ck_assert_ptr_null(json_object_get(r.body, "problem"));
    resp_free(&r);
    /* One byte of the third of our records changed: the verification names it. */
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "f=$(ls %s/egress-*.jsonl | head -1) && n=$(grep -n '\"decision\":\"allow\"' \"$f\" "
             "| sed -n 3p | cut -d: -f1) && sed -i \"${n}s/pypi.org/pypi.orh/\" \"$f\" && echo $n",
             dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[32] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    call(&r, "GET", "/admin/audit/verify", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_false(json_object_get(r.body, "intact")));
    ck_assert_str_eq(jstr(r.body, "verdict"), "edited");
    json_t *prob = json_object_get(r.body, "problem");
    ck_assert_ptr_nonnull(prob);
    ck_assert_int_eq(json_integer_value(json_object_get(prob, "line")), atoi(line));
    resp_free(&r);
}
END_TEST

START_TEST(console_admin_overview)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    struct al_http_header c[] = {{"Cookie", cookie}};
    struct resp r;
    call(&r, "GET", "/admin/overview", c, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *b = json_object_get(r.body, "backend");
    ck_assert_str_eq(jstr(b, "kind"), "test");
    ck_assert(json_is_null(json_object_get(b, "kvmProbe")));
    json_t *s = json_object_get(r.body, "sandboxes");
    ck_assert_int_eq(json_integer_value(json_object_get(s, "running")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(s, "max")), 6);
    ck_assert_ptr_nonnull(json_object_get(json_object_get(r.body, "pools"), "network"));
    resp_free(&r);
    call(&r, "POST", "/admin/overview", c, 1, NULL);
    ck_assert_int_eq(r.status, 403); /* (a session's POST needs its token before anything) */
    resp_free(&r);
    /* The charts: the creations are in the latency series (in this airlockd's buckets of the
     * last hour); without airlock-egress no decision is charted. */
    create("{\"templateID\":\"base\"}", id, NULL);
    call(&r, "GET", "/admin/overview/series", c, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "bucketSeconds")), 10);
    ck_assert(json_is_false(json_object_get(r.body, "egressProxy")));
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "egress")), 0);
    json_t *cr = json_object_get(r.body, "create");
    json_int_t n = 0, prev = 0;
    for (size_t i = 0; i < json_array_size(cr); i++) {
        json_t *bk = json_array_get(cr, i);
        json_int_t ts = json_integer_value(json_object_get(bk, "timestampUnix"));
        ck_assert_msg(ts % 10 == 0 && ts > prev, "bucket %lld after %lld", (long long)ts,
                      (long long)prev);
        prev = ts;
        n += json_integer_value(json_object_get(bk, "count"));
        ck_assert(json_real_value(json_object_get(bk, "maxMs")) >=
                  json_real_value(json_object_get(bk, "meanMs")));
        ck_assert(json_real_value(json_object_get(bk, "meanMs")) > 0);
    }
    ck_assert_int_eq(n, 2);
    resp_free(&r);
    call(&r, "GET", "/admin/overview/other", c, 1, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
}
END_TEST

/* Writes text to <policies>/<file>. */
static void put_policy(const char *file, const char *text)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", g_cp.cfg.policies_path, file);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static json_t *entry_named(json_t *list, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (strcmp(jstr(e, "name"), name) == 0) return e;
    return NULL;
}

/* The vault's routes (console_vault.c): bodies and names checked before the vault is asked;
 * a vault that does not answer is a 503 saying so; writes are admins' only. The fixture runs
 * no airlock-vault: cp_console (a real one) checks what it answers. */
START_TEST(console_admin_vault)
{
    char akey[CP_APIKEY_LEN + 1];
    add_key("watch", CP_ROLE_AUDITOR, NULL, akey);
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}, {"Content-Type", "application/json"}};
    struct al_http_header a[] = {{"X-API-KEY", akey}, {"Content-Type", "application/json"}};
    struct resp r;
    call(&r, "GET", "/admin/vault", k, 2, NULL);
    assert_error(&r, 503, "airlock-vault, which is not available");
    resp_free(&r);
    call(&r, "POST", "/admin/vault/Not%20A/name", k, 2, "{\"value\":\"v\"}");
    assert_error(&r, 400, "is not a secret name");
    resp_free(&r);
    call(&r, "POST", "/admin/vault/team/token", k, 2, "{\"value\":\"\"}");
    assert_error(&r, 400, "\"value\" (the secret's value");
    resp_free(&r);
    call(&r, "POST", "/admin/vault/team/token", k, 2, "{\"value\":\"v\",\"owner\":\"x\"}");
    assert_error(&r, 400, "owner");
    resp_free(&r);
    call(&r, "PUT", "/admin/vault/team/token", k, 2, "{\"value\":\"v\",\"boundHosts\":\"x\"}");
    assert_error(&r, 400, "\"boundHosts\" an array");
    resp_free(&r);
    call(&r, "POST", "/admin/vault/team/token", k, 2, "{\"value\":\"v\"}");
    assert_error(&r, 503, "airlock-vault, which is not available");
    resp_free(&r);
    call(&r, "PATCH", "/admin/vault/team/token", k, 2, NULL);
    assert_error(&r, 405, "PUT writes a new version");
    resp_free(&r);
    /* An auditor reads the names (here: the same 503), and may not write or delete. */
    call(&r, "GET", "/admin/vault", a, 2, NULL);
    assert_error(&r, 503, "airlock-vault");
    resp_free(&r);
    call(&r, "PUT", "/admin/vault/team/token", a, 2, "{\"value\":\"v\"}");
    assert_error(&r, 403, "has the role auditor");
    resp_free(&r);
    call(&r, "DELETE", "/admin/vault/team/token", a, 2, NULL);
    assert_error(&r, 403, "has the role auditor");
    resp_free(&r);
}
END_TEST

START_TEST(console_admin_policies)
{
    static const char bad[] =
        "version: 1\nname: bad\nrules:\n  - name: r\n    hostz: [x.example]\n";
    put_policy("bad.yaml", bad);
    put_policy("other.yml", "version: 1\nname: shadowed\nrules: []\n"); /* other.yaml wins */
    put_policy("-hidden.yaml", "version: 1\nname: hidden\nrules: []\n");
    put_policy("notes.txt", "not a policy");
    char id[64], id2[64];
    create("{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"}}", id, NULL);
    create("{\"templateID\":\"base\"}", id2, NULL);
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    struct resp r;
    call(&r, "GET", "/admin/policies", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "default"), "default");
    json_t *list = json_object_get(r.body, "policies");
    ck_assert_uint_eq(json_array_size(list), 3);
    ck_assert_str_eq(jstr(json_array_get(list, 0), "name"), "bad"); /* by name */
    json_t *e = entry_named(list, "bad");
    ck_assert(json_is_false(json_object_get(e, "valid")));
    ck_assert_int_eq(json_integer_value(json_object_get(e, "errors")), 2);
    ck_assert(json_is_null(json_object_get(e, "hash")));
    ck_assert_ptr_null(json_object_get(e, "yaml")); /* the list has no texts */
    e = entry_named(list, "other");
    ck_assert(json_is_true(json_object_get(e, "valid")));
    ck_assert_str_eq(jstr(e, "policyName"), "other");
    ck_assert_ptr_nonnull(strstr(jstr(e, "file"), "/other.yaml"));
    ck_assert_int_eq(json_integer_value(json_object_get(e, "ruleCount")), 1);
    ck_assert_uint_eq(json_array_size(json_object_get(e, "sandboxes")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(e, "sandboxes"), 0), "sandboxID"), id);
    /* Its rules, each with the hosts it names and the vault secrets it injects (none). */
    json_t *lr = json_array_get(json_object_get(e, "rules"), 0);
    ck_assert_str_eq(jstr(lr, "name"), "gh");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(lr, "hosts"), 0)),
                     "api.github.com");
    ck_assert_uint_eq(json_array_size(json_object_get(lr, "secrets")), 0);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(e, "sandboxes"), 0), "state"), "running");
    e = entry_named(list, "default");
    ck_assert(json_is_true(json_object_get(e, "default")));
    ck_assert_uint_eq(json_array_size(json_object_get(e, "sandboxes")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(e, "sandboxes"), 0), "sandboxID"), id2);
    ck_assert_uint_eq(strlen(jstr(e, "hash")), 64);
    resp_free(&r);

    /* One policy: its text as written, each finding at its line and column. */
    call(&r, "GET", "/admin/policies/bad", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "yaml"), bad);
    json_t *dgs = json_object_get(r.body, "diagnostics");
    ck_assert_uint_eq(json_array_size(dgs), 2);
    json_t *dg = json_array_get(dgs, 0); /* in the file's order */
    ck_assert_int_eq(json_integer_value(json_object_get(dg, "line")), 4);
    ck_assert_ptr_nonnull(strstr(jstr(dg, "message"), "needs hosts"));
    dg = json_array_get(dgs, 1);
    ck_assert_str_eq(jstr(dg, "severity"), "error");
    ck_assert_str_eq(jstr(dg, "code"), "unknown_key");
    ck_assert_int_eq(json_integer_value(json_object_get(dg, "line")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(dg, "col")), 5);
    ck_assert_ptr_nonnull(strstr(jstr(dg, "message"), "hostz"));
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "rules")), 0);
    resp_free(&r);
    call(&r, "GET", "/admin/policies/other", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *rule = json_array_get(json_object_get(r.body, "rules"), 0);
    ck_assert_str_eq(jstr(rule, "name"), "gh");
    ck_assert_int_eq(json_integer_value(json_object_get(rule, "line")), 4);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "diagnostics")), 0);
    resp_free(&r);
    call(&r, "GET", "/admin/policies/missing", k, 1, NULL);
    assert_error(&r, 404, "no policy \"missing\"");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/%2e%2e", k, 1, NULL);
    assert_error(&r, 400, "a policy name is");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/other/rules", k, 1, NULL);
    assert_error(&r, 404, "no such endpoint");
    resp_free(&r);

    /* Explain: the decision of the CLI's query, with the rule and why. */
    call(&r, "GET", "/admin/policies/other/explain?url=https%3A%2F%2FAPI.github.com.%2Frepos", k, 1,
         NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "decision"), "allow");
    ck_assert_str_eq(jstr(r.body, "rule"), "gh");
    ck_assert_str_eq(jstr(r.body, "host"), "api.github.com");
    ck_assert_str_eq(jstr(r.body, "path"), "/repos");
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "explanation"), "gh"));
    ck_assert_str_eq(jstr(json_object_get(r.body, "policy"), "name"), "other");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/other/explain?url=pypi.org:443&addr=10.0.0.1", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "decision"), "deny");
    ck_assert_str_eq(jstr(r.body, "query"), "connection");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain?url=https://pypi.org/&connection=true", k, 1,
         NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "decision"), "allow");
    ck_assert(json_is_null(json_object_get(r.body, "method")));
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain?url=dns:pypi.org", k, 1, NULL);
    ck_assert_str_eq(jstr(r.body, "query"), "dns");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain", k, 1, NULL);
    assert_error(&r, 400, "url is required");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain?url=ftp://x.example/", k, 1, NULL);
    assert_error(&r, 400, "unsupported URL scheme");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain?url=db.example:5432&method=GET", k, 1, NULL);
    assert_error(&r, 400, "a method needs");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/default/explain?url=https://pypi.org/&body=yes", k, 1, NULL);
    assert_error(&r, 400, "body must be true or false");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/bad/explain?url=https://x.example/", k, 1, NULL);
    assert_error(&r, 422, "explain needs a policy without errors");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/missing/explain?url=https://x.example/", k, 1, NULL);
    assert_error(&r, 404, "no policy \"missing\"");
    resp_free(&r);
    call(&r, "POST", "/admin/policies", k, 1, "{}");
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);

    /* A console session says whether its role may read them. */
    char cookie[160], csrf[80];
    signin(KEY_ENV, NULL, 0, cookie, csrf);
    struct al_http_header c[] = {{"Cookie", cookie}};
    call(&r, "GET", "/console/api/session", c, 1, NULL);
    ck_assert(json_is_true(json_object_get(json_object_get(r.body, "may"), "readPolicies")));
    resp_free(&r);
}
END_TEST

/* Reads from fd until buf holds needle (bounded by the socket's 5 s read timeout). */
static bool read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle)
{
    while (!strstr(buf, needle)) {
        if (*len + 1 >= cap)
            return false;
        ssize_t n = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (n <= 0)
            return false;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return true;
}

/* Opens an event stream of GET path (with its query), once it is ready. */
static int sse_open(const char *path, const char *extra, char *buf, size_t cap, size_t *len)
{
    int fd = raw_connect();
    char q[1024];
    snprintf(q, sizeof q,
             "GET %s HTTP/1.1\r\nHost: %s\r\nX-API-KEY: " KEY_ENV
             "\r\nAccept: text/event-stream\r\n%s\r\n",
             path, g_target, extra);
    ck_assert_int_eq(send(fd, q, strlen(q), MSG_NOSIGNAL), (ssize_t)strlen(q));
    *len = 0;
    buf[0] = '\0';
    ck_assert_msg(read_until(fd, buf, cap, len, ": ready"), "no stream: %s", buf);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strcasestr(buf, "\r\nContent-Type: text/event-stream\r\n"));
    return fd;
}

static int tail_open(const char *query, const char *extra, char *buf, size_t cap, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "/admin/audit%s", query);
    return sse_open(path, extra, buf, cap, len);
}

static uint64_t append(struct al_auditlog *log, const char *decision, const char *host)
{
    json_t *rec =
        json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "connection", "sandbox", "sbx0000000000000000a",
                  "decision", decision, "reason", "no_rule", "host", host);
    uint64_t seq = 0;
    ck_assert_int_eq(al_auditlog_append(log, rec, &seq), 0);
    json_decref(rec);
    ck_assert_int_eq(al_auditlog_sync(log, 5000), 0);
    return seq;
}

START_TEST(console_admin_audit_live)
{
    struct resp r;
    struct al_http_header sse[] = {{"X-API-KEY", KEY_ENV}, {"Accept", "text/event-stream"}};
    call(&r, "GET", "/admin/audit", sse, 2, NULL);
    ck_assert_msg(r.status == 404, "%d %s", r.status, r.raw); /* no log yet to follow */
    resp_free(&r);
    char dir[300];
    struct al_auditlog *log = open_log(dir);
    append(log, "allow", "before-1.example");
    uint64_t second = append(log, "deny", "before-2.example");
    /* The listing says where it stopped: a tail from there misses nothing. */
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    call(&r, "GET", "/admin/audit?decision=allow", k, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_integer_value(json_object_get(r.body, "lastSeq")), second);
    resp_free(&r);
    /* Live, with the decision filter: only what is written from now on, only denials. */
    char buf[16384];
    size_t len;
    int fd = tail_open("?decision=deny", "", buf, sizeof buf, &len);
    ck_assert_ptr_null(strstr(buf, "before-"));
    uint64_t third = append(log, "allow", "live-allow.example");
    uint64_t fourth = append(log, "deny", "<script>x</script>live-deny.example");
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "live-deny.example"), "%s", buf);
    char want[64];
    snprintf(want, sizeof want, "id: %llu\nevent: record\ndata: {", (unsigned long long)fourth);
    ck_assert_msg(strstr(buf, want), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "live-allow"));
    close(fd);
    /* From a record on (a reconnect's Last-Event-ID, the page's after=): both, in order. */
    char last[64];
    snprintf(last, sizeof last, "Last-Event-ID: %llu\r\n", (unsigned long long)second);
    fd = tail_open("", last, buf, sizeof buf, &len);
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "live-deny.example"), "%s", buf);
    char *a = strstr(buf, "live-allow.example"), *d = strstr(buf, "live-deny.example");
    ck_assert(a && d && a < d);
    ck_assert_ptr_null(strstr(buf, "before-"));
    close(fd);
    char q[64];
    snprintf(q, sizeof q, "?after=%llu", (unsigned long long)third);
    fd = tail_open(q, "", buf, sizeof buf, &len);
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "live-deny.example"), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "live-allow"));
    close(fd);
    ck_assert_int_eq(al_auditlog_close(log), 0);
    call(&r, "GET", "/admin/audit?after=x1", sse, 2, NULL);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    call(&r, "GET", "/admin/audit?decision=maybe", sse, 2, NULL);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
}
END_TEST

/* ---- a sandbox's logs, live --------------------------------------------------------------- */

static void log_append(const char *file, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, file);
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* GET /v2/sandboxes/{id}/logs as Server-Sent Events: the latest entries, then each line as
 * it is written (a partial one once complete), with the level and search filters, across
 * airlock-vmm's rotation of the file; the stream ends when the sandbox stops. */
START_TEST(console_sandbox_logs_live)
{
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    log_append("agent.log",
               "{\"level\":\"info\",\"msg\":\"old-1\",\"time\":\"2026-01-01T00:00:01Z\"}\n"
               "{\"level\":\"info\",\"msg\":\"old-2\",\"time\":\"2026-01-01T00:00:02Z\"}\n"
               "{\"level\":\"debug\",\"msg\":\"old-debug\"}\n"
               "{\"level\":\"warn\",\"msg\":\"old-3\",\"time\":\"2026-01-01T00:00:03Z\"}\n");
    char path[256], buf[32768];
    size_t len;
    snprintf(path, sizeof path, "/v2/sandboxes/%s/logs?limit=2&level=info", id);
    int fd = sse_open(path, "", buf, sizeof buf, &len);
    /* The backlog: the two latest at or above info, oldest first. */
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "old-3"), "%s", buf);
    char *o2 = strstr(buf, "old-2"), *o3 = strstr(buf, "old-3");
    ck_assert_msg(o2 && o2 < o3 && !strstr(buf, "old-1") && !strstr(buf, "old-debug"), "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "event: log\ndata: {"));
    /* Live: a line written in two parts is one entry; a debug one is filtered out; a line
     * that is not JSON is an info entry; a hostile one is data, in one data line. */
    log_append("agent.log", "{\"level\":\"info\",\"msg\":\"live-");
    log_append("agent.log",
               "1\"}\n{\"level\":\"debug\",\"msg\":\"live-debug\"}\nplain <script>x</script>\n");
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "plain <script>"), "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\"message\":\"live-1\""));
    ck_assert_ptr_null(strstr(buf, "live-debug"));
    /* Rotated: the rest of the old file, then the new one from its start. */
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/agent.log", g_tmpdir);
    snprintf(b, sizeof b, "%s/agent.log.1", g_tmpdir);
    log_append("agent.log", "{\"level\":\"error\",\"msg\":\"before-rotation\"}\n");
    ck_assert_int_eq(rename(a, b), 0);
    log_append("agent.log", "{\"level\":\"error\",\"msg\":\"after-rotation\"}\n");
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "after-rotation"), "%s", buf);
    char *br = strstr(buf, "before-rotation"), *ar = strstr(buf, "after-rotation");
    ck_assert(br && br < ar);
    /* The search filter, and the end when the sandbox is killed. */
    close(fd);
    snprintf(path, sizeof path, "/v2/sandboxes/%s/logs?limit=0&search=needle", id);
    fd = sse_open(path, "", buf, sizeof buf, &len);
    log_append("agent.log", "hay\nneedle here\n");
    ck_assert_msg(read_until(fd, buf, sizeof buf, &len, "needle here"), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "hay"));
    ck_assert_ptr_null(strstr(buf, "after-rotation")); /* limit=0: no backlog */
    struct resp r;
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    char kill[128];
    snprintf(kill, sizeof kill, "/sandboxes/%s", id);
    call(&r, "DELETE", kill, k, 1, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    ck_assert_msg(
        read_until(fd, buf, sizeof buf, &len, "event: end\ndata: the sandbox was stopped"), "%s",
        buf);
    close(fd);
    /* The listing is as it was, and an unknown sandbox has no stream. */
    struct al_http_header sse[] = {{"X-API-KEY", KEY_ENV}, {"Accept", "text/event-stream"}};
    call(&r, "GET", "/v2/sandboxes/sbx_nope000000000000/logs", sse, 2, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
}
END_TEST

/* ---- the terminal ------------------------------------------------------------------------- */

START_TEST(console_ws_frames)
{
    struct al_error err = {0};
    char acc[CP_WS_ACCEPT_LEN + 1];
    ck_assert_int_eq(cp_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", acc, &err), 0); /* RFC 6455 1.3 */
    ck_assert_str_eq(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    ck_assert_int_eq(cp_ws_accept("c2hvcnQ=", acc, &err), -EINVAL);
    ck_assert_int_eq(cp_ws_accept(NULL, acc, &err), -EINVAL);
    /* RFC 6455 5.7: a masked "Hello". */
    uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
    struct cp_ws_frame f;
    size_t used = 0;
    for (size_t cut = 0; cut < sizeof hello; cut++)
        ck_assert_int_eq(cp_ws_parse(hello, cut, &f, &used, &err), 0); /* more needed */
    ck_assert_int_eq(cp_ws_parse(hello, sizeof hello, &f, &used, &err), 1);
    ck_assert_uint_eq(used, sizeof hello);
    ck_assert(f.fin && f.opcode == CP_WS_TEXT && f.len == 5);
    ck_assert_int_eq(memcmp(f.payload, "Hello", 5), 0);
    /* What no client may send. */
    uint8_t unmasked[] = {0x82, 0x01, 'x'};
    ck_assert_int_eq(cp_ws_parse(unmasked, sizeof unmasked, &f, &used, &err), -EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "unmasked"));
    uint8_t rsv[] = {0xC2, 0x80, 0, 0, 0, 0};
    ck_assert_int_eq(cp_ws_parse(rsv, sizeof rsv, &f, &used, &err), -EPROTO);
    uint8_t op[] = {0x83, 0x80, 0, 0, 0, 0};
    ck_assert_int_eq(cp_ws_parse(op, sizeof op, &f, &used, &err), -EPROTO);
    uint8_t ping_frag[] = {0x09, 0x80, 0, 0, 0, 0};
    ck_assert_int_eq(cp_ws_parse(ping_frag, sizeof ping_frag, &f, &used, &err), -EPROTO);
    uint8_t ping_long[] = {0x89, 0xFE, 0x00, 0x7E};
    ck_assert_int_eq(cp_ws_parse(ping_long, sizeof ping_long, &f, &used, &err), -EPROTO);
    uint8_t huge[] = {0x82, 0xFF, 0, 0, 0, 0, 0, 0x01, 0x00, 0x01};
    ck_assert_int_eq(cp_ws_parse(huge, sizeof huge, &f, &used, &err), -EMSGSIZE);
    /* Server frames: the three length forms, and a close whose reason is cut to fit. */
    size_t sizes[] = {0, 125, 126, 65535, 65536};
    for (size_t i = 0; i < 5; i++) {
        struct al_buf b;
        al_buf_init(&b, 0);
        char *pl = calloc(1, sizes[i] + 1);
        ck_assert_int_eq(cp_ws_frame_append(&b, CP_WS_BINARY, pl, sizes[i]), 0);
        size_t hl = sizes[i] < 126 ? 2 : sizes[i] <= 65535 ? 4 : 10;
        ck_assert_uint_eq(b.len, hl + sizes[i]);
        ck_assert_uint_eq((uint8_t)b.data[0], 0x82);
        ck_assert_uint_eq((uint8_t)b.data[1] & 0x80, 0); /* a server does not mask */
        free(pl);
        al_buf_free(&b);
    }
    struct al_buf b;
    al_buf_init(&b, 0);
    char reason[300];
    memset(reason, 'r', sizeof reason - 3);
    memcpy(reason + sizeof reason - 3, "\xc3\xa9", 2); /* an é across the cut */
    reason[sizeof reason - 1] = '\0';
    ck_assert_int_eq(cp_ws_close_append(&b, 1011, reason), 0);
    ck_assert_uint_le(b.len, 127);
    ck_assert_uint_eq((uint8_t)b.data[0], 0x88);
    ck_assert_uint_eq(((uint8_t)b.data[2] << 8) | (uint8_t)b.data[3], 1011);
    al_buf_free(&b);
}
END_TEST

/* Sends an upgrade to the terminal of id with extra header lines; the answer's head (and
 * what followed it) into buf; the status returned. The connection stays open in *fdp. */
static int term_upgrade(const char *id, const char *extra, char *buf, size_t cap, int *fdp)
{
    int fd = raw_connect();
    char q[2048];
    snprintf(q, sizeof q,
             "GET /console/api/sandboxes/%s/terminal?cols=100&rows=30 HTTP/1.1\r\nHost: %s\r\n"
             "Connection: Upgrade\r\nUpgrade: websocket\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
             id, g_target, extra);
    ck_assert_int_eq(send(fd, q, strlen(q), MSG_NOSIGNAL), (ssize_t)strlen(q));
    size_t len = 0;
    buf[0] = '\0';
    while (len + 1 < cap && !strstr(buf, "\r\n\r\n")) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
    }
    ck_assert_msg(strncmp(buf, "HTTP/1.1 ", 9) == 0, "no answer: %s", buf);
    if (fdp)
        *fdp = fd;
    else
        close(fd);
    return atoi(buf + 9);
}

START_TEST(console_terminal_upgrade)
{
    char key[CP_APIKEY_LEN + 1], akey[CP_APIKEY_LEN + 1];
    add_key("ops", CP_ROLE_OPERATOR, NULL, key);
    add_key("watch", CP_ROLE_AUDITOR, NULL, akey);
    char id[64];
    create("{\"templateID\":\"base\"}", id, NULL);
    char cookie[160], csrf[80], acookie[160], acsrf[80];
    signin(key, NULL, 0, cookie, csrf);
    signin(akey, NULL, 0, acookie, acsrf);
    char origin[128], h[1024], buf[8192];
    snprintf(origin, sizeof origin, "Origin: http://%s\r\n", g_target);
    /* No session: 401. */
    snprintf(h, sizeof h, "%sSec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n", origin, csrf);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 401);
    /* Another site's page: 403, even with the cookie and the token. */
    snprintf(h, sizeof h,
             "Origin: http://evil.test\r\nCookie: %s\r\n"
             "Sec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n",
             cookie, csrf);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 403);
    ck_assert_ptr_nonnull(strstr(buf, "Origin"));
    snprintf(h, sizeof h, "Cookie: %s\r\nSec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n",
             cookie, csrf);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 403); /* no Origin at all */
    /* Without the CSRF token, or with another: 403. */
    snprintf(h, sizeof h, "%sCookie: %s\r\nSec-WebSocket-Protocol: airlock.terminal\r\n", origin,
             cookie);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 403);
    ck_assert_ptr_nonnull(strstr(buf, "csrf."));
    snprintf(h, sizeof h, "%sCookie: %s\r\nSec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n",
             origin, cookie, acsrf);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 403);
    /* An auditor: 403, naming its role. */
    snprintf(h, sizeof h, "%sCookie: %s\r\nSec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n",
             origin, acookie, acsrf);
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, NULL), 403);
    ck_assert_ptr_nonnull(strstr(buf, "has the role auditor"));
    /* A size out of bounds, an unknown sandbox: 400, 404. */
    snprintf(h, sizeof h, "%sCookie: %s\r\nSec-WebSocket-Protocol: airlock.terminal, csrf.%s\r\n",
             origin, cookie, csrf);
    ck_assert_int_eq(term_upgrade("i0000000000000000000", h, buf, sizeof buf, NULL), 404);
    /* The operator: 101, the accept key of RFC 6455 and the subprotocol chosen; the fixture's
     * agent answers no shell, and the WebSocket closes saying so. */
    int fd = -1;
    ck_assert_int_eq(term_upgrade(id, h, buf, sizeof buf, &fd), 101);
    ck_assert_ptr_nonnull(
        strcasestr(buf, "\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    ck_assert_ptr_nonnull(strcasestr(buf, "\r\nSec-WebSocket-Protocol: airlock.terminal\r\n"));
    char *rest = strstr(buf, "\r\n\r\n") + 4;
    size_t have = strlen(rest);
    uint8_t fr[512];
    memcpy(fr, rest, have);
    while (have < 4 || have < 2u + (fr[1] & 0x7F)) {
        ssize_t n = recv(fd, fr + have, sizeof fr - have, 0);
        ck_assert_msg(n > 0, "no close frame");
        have += (size_t)n;
    }
    ck_assert_uint_eq(fr[0], 0x88);
    ck_assert_uint_eq((fr[2] << 8) | fr[3], 1011);
    ck_assert_msg(memmem(fr + 4, (fr[1] & 0x7F) - 2, "agent", 5), "%.*s", (fr[1] & 0x7F) - 2,
                  (char *)fr + 4);
    close(fd);
    /* Not a WebSocket: 426. */
    struct resp r;
    struct al_http_header c[] = {{"Cookie", cookie}};
    char path[128];
    snprintf(path, sizeof path, "/console/api/sandboxes/%s/terminal", id);
    call(&r, "GET", path, c, 1, NULL);
    ck_assert_int_eq(r.status, 426);
    resp_free(&r);
    /* The session says who may. */
    call(&r, "GET", "/console/api/session", c, 1, NULL);
    ck_assert(json_is_true(json_object_get(json_object_get(r.body, "may"), "terminal")));
    resp_free(&r);
    struct al_http_header ac[] = {{"Cookie", acookie}};
    call(&r, "GET", "/console/api/session", ac, 1, NULL);
    ck_assert(json_is_false(json_object_get(json_object_get(r.body, "may"), "terminal")));
    resp_free(&r);
}
END_TEST

/* A policy's test cases (<policies>/tests/<name>.yaml), run as `airlock policy test` runs them
 * (policy/cases.c): each case's expectation, the decision and its rule, and why a case fails;
 * a malformed case is a finding at its line; no file, or a policy with errors, says so. */
START_TEST(console_admin_policy_tests)
{
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    struct resp r;
    call(&r, "GET", "/admin/policies/other/tests", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_false(json_object_get(r.body, "found")));
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "casesFile"), "/tests/other.yaml"));
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "cases")), 0);
    resp_free(&r);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/tests", g_cp.cfg.policies_path);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    put_policy("tests/other.yaml", "cases:\n"
                                   "  - name: read a repository\n"
                                   "    url: https://api.github.com/repos/acme/app\n"
                                   "    expect: allow\n"
                                   "    rule: gh\n"
                                   "  - name: <b>elsewhere</b>\n"
                                   "    url: https://pypi.org/simple/\n"
                                   "    expect: allow\n"
                                   "  - url: https://api.github.com/\n"
                                   "    expect: allow\n"
                                   "    rule: null\n"
                                   "  - name: malformed\n"
                                   "    url: https://x.example/\n"
                                   "    expect: maybe\n");
    call(&r, "GET", "/admin/policies/other/tests", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_true(json_object_get(r.body, "found")));
    ck_assert(json_is_true(json_object_get(r.body, "ran")));
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "total")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "passed")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "failed")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "malformed")), 1);
    ck_assert_uint_eq(strlen(jstr(r.body, "hash")), 64);
    json_t *cases = json_object_get(r.body, "cases");
    ck_assert_uint_eq(json_array_size(cases), 3);
    json_t *c = json_array_get(cases, 0);
    ck_assert_str_eq(jstr(c, "name"), "read a repository");
    ck_assert(json_is_true(json_object_get(c, "pass")));
    ck_assert_str_eq(jstr(c, "expect"), "allow");
    ck_assert_str_eq(jstr(c, "expectRule"), "gh");
    ck_assert_str_eq(jstr(c, "decision"), "allow");
    ck_assert_str_eq(jstr(c, "rule"), "gh");
    ck_assert_int_eq(json_integer_value(json_object_get(c, "ruleLine")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(c, "line")), 2);
    ck_assert_str_eq(jstr(c, "failures"), "");
    c = json_array_get(cases, 1);
    ck_assert_str_eq(jstr(c, "name"), "<b>elsewhere</b>");
    ck_assert(json_is_false(json_object_get(c, "pass")));
    ck_assert_str_eq(jstr(c, "decision"), "deny");
    ck_assert(json_is_null(json_object_get(c, "rule")));
    ck_assert_ptr_null(json_object_get(c, "expectRule")); /* it names none */
    ck_assert_str_eq(jstr(c, "failures"), "expected allow, got deny");
    ck_assert_str_eq(jstr(c, "reason"), "no_rule_matched");
    c = json_array_get(cases, 2);
    ck_assert_str_eq(jstr(c, "name"), "case 3");
    ck_assert(json_is_null(json_object_get(c, "expectRule")));
    ck_assert_str_eq(jstr(c, "failures"), "expected rule null, got gh");
    json_t *dg = json_array_get(json_object_get(r.body, "diagnostics"), 0);
    ck_assert_ptr_nonnull(dg);
    ck_assert_int_eq(json_integer_value(json_object_get(dg, "line")), 14);
    ck_assert_ptr_nonnull(strstr(jstr(dg, "message"), "expect"));
    resp_free(&r);
    /* A cases file that is not a list of cases: its finding, nothing run. */
    put_policy("tests/default.yaml", "cases: {}\n");
    call(&r, "GET", "/admin/policies/default/tests", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_false(json_object_get(r.body, "ran")));
    ck_assert_ptr_nonnull(
        strstr(jstr(json_array_get(json_object_get(r.body, "diagnostics"), 0), "message"),
               "cases must be a list"));
    resp_free(&r);
    put_policy("bad.yaml", "version: 1\nname: bad\nrules:\n  - name: r\n");
    call(&r, "GET", "/admin/policies/bad/tests", k, 1, NULL);
    assert_error(&r, 422, "its cases run once they are fixed");
    resp_free(&r);
    call(&r, "GET", "/admin/policies/missing/tests", k, 1, NULL);
    assert_error(&r, 404, "no policy \"missing\"");
    resp_free(&r);
}
END_TEST

static json_t *reload_of(json_t *list, const char *policy)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (strcmp(jstr(e, "policy"), policy) == 0) return e;
    return NULL;
}

/* The reloads' history: each reading that changed a policy (new, edited, broken, removed),
 * with when, what triggered it (the key of an API reload; a creation that found the file
 * changed), the hash before and after and the lint result; admins reload, auditors read. */
START_TEST(console_admin_policy_reloads)
{
    char akey[CP_APIKEY_LEN + 1];
    add_key("watch", CP_ROLE_AUDITOR, NULL, akey);
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    struct al_http_header a[] = {{"X-API-KEY", akey}};
    struct resp r;
    call(&r, "POST", "/admin/policy-reloads", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "trigger"), "api");
    json_t *ch = json_object_get(r.body, "changed");
    ck_assert_uint_eq(json_array_size(ch), 2); /* first readings: default, other */
    json_t *e = reload_of(ch, "other");
    ck_assert(json_is_null(json_object_get(e, "before")));
    ck_assert_uint_eq(strlen(jstr(json_object_get(e, "after"), "hash")), 64);
    ck_assert(json_is_null(json_object_get(r.body, "egress"))); /* none in this world */
    char old_hash[65];
    snprintf(old_hash, sizeof old_hash, "%s", jstr(json_object_get(e, "after"), "hash"));
    resp_free(&r);
    /* Again with nothing changed: nothing recorded. */
    call(&r, "POST", "/admin/policy-reloads", k, 1, NULL);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "changed")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "unchanged")), 2);
    resp_free(&r);
    /* Edited, then broken: each reading recorded with its hashes and lint result. */
    put_policy("other.yaml", "version: 1\nname: other\nrules:\n  - name: gh2\n    hosts: "
                             "[api.github.com]\n");
    call(&r, "POST", "/admin/policy-reloads", k, 1, NULL);
    ch = json_object_get(r.body, "changed");
    ck_assert_uint_eq(json_array_size(ch), 1);
    e = json_array_get(ch, 0);
    ck_assert_str_eq(jstr(e, "policy"), "other");
    ck_assert_str_eq(jstr(e, "keyId"), "env");
    ck_assert_str_eq(jstr(json_object_get(e, "before"), "hash"), old_hash);
    ck_assert_str_ne(jstr(json_object_get(e, "after"), "hash"), old_hash);
    ck_assert(json_is_true(json_object_get(json_object_get(e, "after"), "valid")));
    resp_free(&r);
    /* A creation that reads the file after it changed records it too (a cached policy). */
    char id[64];
    create("{\"templateID\":\"base\",\"metadata\":{\"airlock.policy\":\"other\"}}", id, NULL);
    put_policy("other.yaml", "version: 1\nname: other\nrules:\n  - name: gh3\n    hostz: [x]\n");
    call(&r, "GET", "/admin/policies/other/explain?url=https://api.github.com/", k, 1, NULL);
    assert_error(&r, 422, "invalid");
    resp_free(&r);
    call(&r, "GET", "/admin/policy-reloads?policy=other", a, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *hist = json_object_get(r.body, "reloads");
    ck_assert_uint_eq(json_array_size(hist), 3); /* newest first */
    e = json_array_get(hist, 0);
    ck_assert_str_eq(jstr(e, "trigger"), "file_changed");
    ck_assert(json_is_null(json_object_get(e, "keyId")));
    json_t *after = json_object_get(e, "after");
    ck_assert(json_is_false(json_object_get(after, "valid")));
    ck_assert(json_is_null(json_object_get(after, "hash")));
    ck_assert_int_eq(json_integer_value(json_object_get(after, "errors")), 2);
    ck_assert_msg(strstr(jstr(after, "firstError"), "other.yaml:4:") != NULL, "%s",
                  jstr(after, "firstError"));
    ck_assert_uint_gt(json_integer_value(json_object_get(e, "seq")),
                      json_integer_value(json_object_get(json_array_get(hist, 1), "seq")));
    ck_assert_ptr_nonnull(jstr(e, "time"));
    resp_free(&r);
    /* Removed. */
    char path[4400];
    snprintf(path, sizeof path, "%s/other.yaml", g_cp.cfg.policies_path);
    ck_assert_int_eq(unlink(path), 0);
    call(&r, "POST", "/admin/policy-reloads", k, 1, NULL);
    e = reload_of(json_object_get(r.body, "changed"), "other");
    ck_assert_ptr_nonnull(e);
    ck_assert(json_is_null(json_object_get(e, "after")));
    ck_assert(json_is_false(json_object_get(json_object_get(e, "before"), "valid")));
    resp_free(&r);
    call(&r, "GET", "/admin/policy-reloads", k, 1, NULL);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "reloads")), 5);
    resp_free(&r);
    /* Auditors read the history but do not reload; bad filters and methods are refused. */
    call(&r, "POST", "/admin/policy-reloads", a, 1, NULL);
    assert_error(&r, 403, "has the role auditor");
    resp_free(&r);
    call(&r, "GET", "/admin/policy-reloads?policy=..%2f", k, 1, NULL);
    assert_error(&r, 400, "policy must be");
    resp_free(&r);
    call(&r, "DELETE", "/admin/policy-reloads", k, 1, NULL);
    assert_error(&r, 405, "POST reads the policies");
    resp_free(&r);
}
END_TEST

/* The audit export (GET /admin/audit/export): JSONL is the log's lines as written (the whole
 * log verifies as the log does, with the verifier of `airlock audit verify`; a filtered one
 * has only the matching records), OCSF the CLI's mapping; a download, auditors' too. */
START_TEST(console_admin_audit_export)
{
    struct al_http_header k[] = {{"X-API-KEY", KEY_ENV}};
    struct resp r;
    call(&r, "GET", "/admin/audit/export?format=jsonl", k, 1, NULL);
    ck_assert_int_eq(r.status, 404); /* no log yet */
    resp_free(&r);
    char dir[300];
    struct al_auditlog *log = open_log(dir);
    for (int i = 0; i < 6; i++) {
        json_t *rec = json_pack(
            "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:{s:s,s:s}}", "type",
            i == 4 ? "dns_query" : "http_request", "sandbox", "sbx0000000000000000a", "decision",
            i % 2 ? "deny" : "allow", "reason", i % 2 ? "no_rule_matched" : "rule_allows", "host",
            i == 3 ? "api.github.com" : "pypi.org", "method", "GET", "path", "/simple/", "rule",
            i % 2 ? "" : "pypi", "src", "10.11.0.2:40000", "status", (json_int_t)200, "policy",
            "name", "default", "hash", "abc");
        if (i == 4)
            json_object_set_new(rec, "qname", json_string("pypi.org"));
        ck_assert_int_eq(al_auditlog_append(log, rec, NULL), 0);
        json_decref(rec);
    }
    ck_assert_int_eq(al_auditlog_checkpoint(log), 0);
    ck_assert_int_eq(al_auditlog_close(log), 0);

    call(&r, "GET", "/admin/audit/export?format=jsonl", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_ptr_nonnull(strstr(r.ctype, "application/x-ndjson"));
    ck_assert_ptr_nonnull(
        strstr(hdr(&r, "Content-Disposition"), "attachment; filename=\"airlock-audit-"));
    /* The log's files, concatenated, are the export. */
    char cmd[700], whole[65536];
    snprintf(cmd, sizeof cmd, "cat $(ls %s/egress-*.jsonl | sort)", dir);
    FILE *p = popen(cmd, "r");
    size_t wl = fread(whole, 1, sizeof whole - 1, p);
    pclose(p);
    ck_assert_uint_eq(r.len, wl);
    ck_assert(memcmp(r.raw, whole, wl) == 0);
    char file[400], pub[400];
    snprintf(file, sizeof file, "%s/export.jsonl", g_tmpdir);
    snprintf(pub, sizeof pub, "%s/egress.pub", dir);
    FILE *f = fopen(file, "w");
    fwrite(r.raw, 1, r.len, f);
    fclose(f);
    resp_free(&r);
    const char *files[] = {file};
    struct al_auditlog_verify_opts vo = {.files = files, .n_files = 1, .pubkey_file = pub};
    struct al_auditlog_verify_result vr;
    struct al_error err = {0};
    ck_assert_msg(al_auditlog_verify(&vo, &vr, &err) == 0, "%s", err.msg);
    ck_assert_msg(vr.verdict == AL_AUDIT_INTACT, "%s", vr.reason);
    ck_assert_uint_ge(vr.records, 7); /* six and the log's own checkpoints */

    /* Filtered: the matching records only, each line as in the log. */
    call(&r, "GET", "/admin/audit/export?format=jsonl&decision=deny&host=.github.com", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(r.len > 0 && r.raw[r.len - 1] == '\n', 1);
    r.raw[r.len - 1] = '\0';
    ck_assert_ptr_null(strchr(r.raw, '\n')); /* one line */
    ck_assert_ptr_nonnull(strstr(whole, r.raw));
    ck_assert_ptr_nonnull(strstr(r.raw, "\"host\":\"api.github.com\""));
    resp_free(&r);

    /* OCSF: the events of the CLI's mapping, one per line. */
    call(&r, "GET", "/admin/audit/export?format=ocsf&since=1h", k, 1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_ptr_nonnull(strstr(hdr(&r, "Content-Disposition"), ".ocsf.jsonl\""));
    json_t *evs[8];
    size_t n = 0;
    for (char *line = strtok(r.raw, "\n"); line && n < 8; line = strtok(NULL, "\n")) {
        json_error_t je;
        evs[n] = json_loads(line, 0, &je);
        ck_assert_msg(evs[n] != NULL, "%s: %s", line, je.text);
        n++;
    }
    ck_assert_uint_eq(n, 6); /* the checkpoint is not traffic */
    json_t *ev = evs[0];
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "class_uid")), 4002);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "category_uid")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "activity_id")), 3); /* GET */
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "type_uid")), 400203);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "action_id")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "status_id")), 1);
    ck_assert_str_eq(jstr(ev, "status_detail"), "rule_allows");
    json_t *md = json_object_get(ev, "metadata");
    ck_assert_str_eq(jstr(md, "version"), "1.1.0");
    ck_assert_str_eq(jstr(json_object_get(md, "product"), "name"), "airlock");
    ck_assert_int_eq(json_integer_value(json_object_get(md, "sequence")),
                     json_integer_value(json_object_get(json_object_get(ev, "unmapped"), "seq")));
    ck_assert_int_gt(json_integer_value(json_object_get(md, "sequence")), 0);
    ck_assert_str_eq(jstr(json_object_get(ev, "firewall_rule"), "name"), "pypi");
    ck_assert_str_eq(jstr(json_object_get(ev, "firewall_rule"), "desc"), "default");
    ck_assert_str_eq(jstr(json_object_get(ev, "src_endpoint"), "ip"), "10.11.0.2");
    ck_assert_str_eq(jstr(json_object_get(ev, "src_endpoint"), "uid"), "sbx0000000000000000a");
    ck_assert_str_eq(jstr(json_object_get(json_object_get(ev, "http_request"), "url"), "path"),
                     "/simple/");
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(ev, "http_response"), "code")), 200);
    ck_assert_str_eq(jstr(json_object_get(ev, "unmapped"), "sandbox"), "sbx0000000000000000a");
    ev = evs[1]; /* a denial */
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "action_id")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "disposition_id")), 2);
    ev = evs[4]; /* DNS */
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "class_uid")), 4003);
    ck_assert_str_eq(jstr(json_object_get(ev, "query"), "hostname"), "pypi.org");
    for (size_t i = 0; i < n; i++)
        json_decref(evs[i]);
    resp_free(&r);
    call(&r, "GET", "/admin/audit/export?format=ocsf&until=2000-01-01T00:00:00Z", k, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0); /* nothing before then */
    resp_free(&r);

    /* Bad formats and filters are refused with what to write; an auditor exports, an
     * operator may not read the log. */
    call(&r, "GET", "/admin/audit/export?format=csv", k, 1, NULL);
    assert_error(&r, 400, "format must be jsonl");
    resp_free(&r);
    call(&r, "GET", "/admin/audit/export?since=yesterday", k, 1, NULL);
    assert_error(&r, 400, "since must be an RFC 3339 time");
    resp_free(&r);
    call(&r, "GET", "/admin/audit/export?decision=maybe", k, 1, NULL);
    assert_error(&r, 400, "decision must be");
    resp_free(&r);
    char akey[CP_APIKEY_LEN + 1], okey[CP_APIKEY_LEN + 1];
    add_key("watch", CP_ROLE_AUDITOR, NULL, akey);
    add_key("ops", CP_ROLE_OPERATOR, NULL, okey);
    struct al_http_header a[] = {{"X-API-KEY", akey}}, o[] = {{"X-API-KEY", okey}};
    call(&r, "GET", "/admin/audit/export?format=ocsf", a, 1, NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    call(&r, "GET", "/admin/audit/export", o, 1, NULL);
    assert_error(&r, 403, "has the role operator");
    resp_free(&r);
    /* The listing takes the same filters. */
    call(&r, "GET", "/admin/audit?host=api.github.com&type=http_request&reason=no_rule_matched", k,
         1, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "records")), 1);
    resp_free(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_console");
    TCase *t = cp_rest_tcase("console");
    tcase_add_test(t, console_assets);
    tcase_add_test(t, console_signin);
    tcase_add_test(t, console_secure_cookie_attribute);
    tcase_add_test(t, console_csrf);
    tcase_add_test(t, console_signout);
    tcase_add_test(t, console_expiry);
    tcase_add_test(t, console_revoked_key);
    tcase_add_test(t, console_sandbox_sees_no_session);
    tcase_add_test(t, console_cookie_parsing);
    tcase_add_test(t, console_admin_audit);
    tcase_add_test(t, console_admin_overview);
    tcase_add_test(t, console_sandbox_logs_live);
    tcase_add_test(t, console_admin_policies);
    tcase_add_test(t, console_admin_vault);
    tcase_add_test(t, console_admin_audit_live);
    tcase_add_test(t, console_admin_policy_tests);
    tcase_add_test(t, console_admin_policy_reloads);
    tcase_add_test(t, console_admin_audit_export);
    tcase_add_test(t, console_ws_frames);
    tcase_add_test(t, console_terminal_upgrade);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
