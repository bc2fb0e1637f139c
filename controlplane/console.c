/* controlplane/console: the web console's assets and sessions (console.h).
 *
 * Sessions live in airlockd's memory only: a restart signs everyone out, and nothing a
 * session holds is ever on disk. The map is keyed by the BLAKE2b digest of the session id, so
 * what the cookie carries is not kept anywhere; the session keeps the digest of the key it was
 * signed in with and checks it again at every request (cp_auth_digest), so a revoked key's
 * sessions end at once. The CSRF token is per session, handed to the console's own script by
 * GET /console/api/session (readable only from this origin: airlockd answers no CORS request)
 * and compared in constant time.
 */
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "console.h"
#include "cp.h"
#include "embedded.h"

#define CONSOLE_ID_BYTES   32
#define CONSOLE_ID_HEX     (2 * CONSOLE_ID_BYTES)
#define CONSOLE_MAX_BODY   4096
#define CONSOLE_API_PREFIX "/console/api/"

/* No inline script or style anywhere; Trusted Types make any assignment of a string to an
 * HTML sink (innerHTML, outerHTML, insertAdjacentHTML, document.write) throw, so a string
 * from a sandbox can only ever become text. */
#define CONSOLE_CSP                                                                    \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "        \
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "        \
    "form-action 'self'; frame-ancestors 'none'; require-trusted-types-for 'script'; " \
    "trusted-types 'none'"

struct console_session {
    uint8_t id_digest[CP_DIGEST_LEN];  /* its key in the map: the cookie's value is not kept */
    uint8_t key_digest[CP_DIGEST_LEN]; /* the API key it stands for */
    char key_id[32];                   /* for the log */
    char csrf[2 * CONSOLE_ID_BYTES + 1];
    uint64_t created_ns, expires_ns; /* wall clock */
};

struct cp_console {
    struct cp_map sessions; /* digest of the session id -> struct console_session */
};

static struct cp_console *console__get(struct cp *cp)
{
    if (!cp->console) {
        cp->console = calloc(1, sizeof *cp->console);
        if (cp->console)
            cp_map_init(&cp->console->sessions);
    }
    return cp->console;
}

static int console__free_one(void *v, void *arg)
{
    (void)arg;
    sodium_memzero(v, sizeof(struct console_session));
    free(v);
    return 0;
}

void cp_console_free(struct cp *cp)
{
    if (!cp->console)
        return;
    cp_map_foreach(&cp->console->sessions, console__free_one, NULL);
    cp_map_free(&cp->console->sessions);
    free(cp->console);
    cp->console = NULL;
}

/* ---- cookies ------------------------------------------------------------------------------ */

int cp_console_cookie_find(const char *header, const char *name, char *out, size_t outlen,
                           bool *found)
{
    size_t nl = strlen(name);
    struct al_http_cookie_seg seg = {0};
    while (al_http_cookie_next(header, &seg)) {
        if (!seg.value || seg.name_len != nl || memcmp(seg.name, name, nl) != 0)
            continue;
        if (*found)
            return -EEXIST;
        *found = true;
        const char *v = seg.value;
        size_t vl = seg.value_len;
        if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') { /* RFC 6265 allows DQUOTEs */
            v++;
            vl -= 2;
        }
        if (vl >= outlen)
            return -E2BIG;
        memcpy(out, v, vl);
        out[vl] = '\0';
    }
    return *found ? 1 : 0;
}

/* Whether a cookie list's segment is one of the console's session cookies (either name, as
 * airlockd writes it: case counts). */
bool cp_console_cookie_is_ours(const struct al_http_cookie_seg *seg, bool any_case)
{
    const char *names[] = {CP_CONSOLE_COOKIE, CP_CONSOLE_COOKIE_SECURE};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (seg->name_len == strlen(names[i]) &&
            (any_case ? strncasecmp(seg->name, names[i], seg->name_len)
                      : memcmp(seg->name, names[i], seg->name_len)) == 0)
            return true;
    return false;
}

static bool console__strip_drop(const struct al_http_cookie_seg *seg, void *arg)
{
    (void)arg;
    return cp_console_cookie_is_ours(seg, false);
}

bool cp_console_cookie_strip(const char *header, char *out, size_t outlen)
{
    return al_http_cookie_filter(header, out, outlen, console__strip_drop, NULL) != 0;
}

int cp_console_cookie_get(const struct al_http_req *req, const char *name, char *out, size_t outlen)
{
    bool found = false;
    for (size_t i = 0; i < req->n_headers; i++) {
        if (strcasecmp(req->headers[i].name, "Cookie") != 0)
            continue;
        int rc = cp_console_cookie_find(req->headers[i].value, name, out, outlen, &found);
        if (rc < 0)
            return rc;
    }
    return found ? 1 : 0;
}

/* Whether the cookie must be Secure (and so can carry the __Host- prefix): the request came
 * over https, as the TLS front end in X-Forwarded-Proto says, or the configuration says so.
 * A client that claims https over plain http only gets a cookie its browser will not keep. */
static bool console__secure(const struct cp *cp, const struct al_http_req *req)
{
    if (cp->cfg.console_secure_cookie == CP_TRI_ON)
        return true;
    if (cp->cfg.console_secure_cookie == CP_TRI_OFF)
        return false;
    const char *xfp = al_http_req_header(req, "X-Forwarded-Proto");
    return xfp && al_http_req_header_count(req, "X-Forwarded-Proto") == 1 &&
           strcasecmp(xfp, "https") == 0;
}

static const char *console__cookie_name(const struct cp *cp, const struct al_http_req *req)
{
    return console__secure(cp, req) ? CP_CONSOLE_COOKIE_SECURE : CP_CONSOLE_COOKIE;
}

/* ---- answers ------------------------------------------------------------------------------ */

/* Every answer under /console/ carries these. */
static size_t console__headers(struct al_http_header *h, const char *ctype, bool no_store)
{
    size_t n = 0;
    h[n++] = (struct al_http_header){"Content-Type", ctype};
    h[n++] = (struct al_http_header){"Content-Security-Policy", CONSOLE_CSP};
    h[n++] = (struct al_http_header){"X-Content-Type-Options", "nosniff"};
    h[n++] = (struct al_http_header){"X-Frame-Options", "DENY"};
    h[n++] = (struct al_http_header){"Referrer-Policy", "no-referrer"};
    h[n++] = (struct al_http_header){"Cross-Origin-Opener-Policy", "same-origin"};
    h[n++] = (struct al_http_header){"Cross-Origin-Resource-Policy", "same-origin"};
    h[n++] = (struct al_http_header){"Cache-Control", no_store ? "no-store" : "no-cache"};
    return n;
}

static void console__send(struct al_http_req *req, int status, const char *ctype, const void *body,
                          size_t len, const char *set_cookie)
{
    struct al_http_header h[12];
    size_t n = console__headers(h, ctype, true);
    if (set_cookie)
        h[n++] = (struct al_http_header){"Set-Cookie", set_cookie};
    if (al_http_resp_start(req, status, h, n, (int64_t)len) == 0) {
        if (len)
            al_http_resp_write(req, body, len);
    }
    al_http_resp_end(req);
}

static void console__json(struct al_http_req *req, int status, json_t *body, const char *cookie)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"code\":500,\"message\":\"out of memory\"}";
        console__send(req, 500, "application/json", oom, sizeof oom - 1, NULL);
        return;
    }
    console__send(req, status, "application/json", s, strlen(s), cookie);
    free(s);
}

static void console__error(struct al_http_req *req, int status, const char *cookie, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));

static void console__error(struct al_http_req *req, int status, const char *cookie, const char *fmt,
                           ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    console__json(req, status, json_pack("{s:i,s:s}", "code", status, "message", msg), cookie);
}

/* ---- assets ------------------------------------------------------------------------------- */

static const char *console__ctype(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof *types; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static void console__asset(struct al_http_req *req, const char *name)
{
    for (const struct cp_embedded *e = cp_embedded_console; e->name; e++) {
        if (strcmp(e->name, name) != 0)
            continue;
        struct al_http_header h[12];
        size_t n = console__headers(h, console__ctype(name), false);
        if (al_http_resp_start(req, 200, h, n, (int64_t)e->len) == 0)
            al_http_resp_write(req, e->data, e->len);
        al_http_resp_end(req);
        return;
    }
    static const char nf[] = "no such page of the console\n";
    console__send(req, 404, "text/plain; charset=utf-8", nf, sizeof nf - 1, NULL);
}

/* ---- sessions ----------------------------------------------------------------------------- */

struct console_sweep {
    uint64_t now;
    struct console_session **expired;
    size_t n;
};

static int console__sweep_one(void *v, void *arg)
{
    struct console_session *s = v;
    struct console_sweep *w = arg;
    if (s->expires_ns <= w->now)
        w->expired[w->n++] = s;
    return 0;
}

static void console__drop(struct cp_console *c, struct console_session *s)
{
    cp_map_del(&c->sessions, s->id_digest, sizeof s->id_digest);
    console__free_one(s, NULL);
}

/* Drops the expired sessions (at each sign-in: the map holds the live ones only). */
static void console__sweep(struct cp_console *c)
{
    size_t n = cp_map_count(&c->sessions);
    if (!n)
        return;
    struct console_sweep w = {.now = al_wall_ns(), .expired = calloc(n, sizeof *w.expired)};
    if (!w.expired)
        return;
    cp_map_foreach(&c->sessions, console__sweep_one, &w);
    for (size_t i = 0; i < w.n; i++)
        console__drop(c, w.expired[i]);
    free(w.expired);
}

/* The session the request's cookie names: NULL with *rc -ENOENT (no cookie) or -EACCES and
 * err set. */
static struct console_session *console__session(struct cp *cp, const struct al_http_req *req,
                                                int *rc, struct al_error *err)
{
    char id[CONSOLE_ID_HEX + 8];
    int got = cp_console_cookie_get(req, console__cookie_name(cp, req), id, sizeof id);
    if (got == 0) {
        *rc = -ENOENT;
        return NULL;
    }
    *rc = -EACCES;
    if (got == -EEXIST) {
        al_error_set(err, -EACCES,
                     "the console session cookie is there more than once; sign in again");
        return NULL;
    }
    struct cp_console *c = console__get(cp);
    if (got < 0 || strlen(id) != CONSOLE_ID_HEX || !c) {
        al_error_set(err, -EACCES, "not a console session; sign in again");
        return NULL;
    }
    uint8_t d[CP_DIGEST_LEN];
    cp_digest(id, strlen(id), d);
    sodium_memzero(id, sizeof id);
    struct console_session *s = cp_map_get(&c->sessions, d, sizeof d);
    if (!s) {
        al_error_set(err, -EACCES,
                     "the console session is unknown (signed out, or airlockd restarted); "
                     "sign in again");
        return NULL;
    }
    if (s->expires_ns <= al_wall_ns()) {
        al_info("console: the session of key %s expired", s->key_id);
        console__drop(c, s);
        al_error_set(err, -EACCES, "the console session expired; sign in again");
        return NULL;
    }
    *rc = 0;
    return s;
}

static bool console__safe_method(const char *m)
{
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

/* The session of the request's cookie, its key checked again, and when csrf_needed the
 * token presented (csrf) compared with the session's. */
static int console__auth(struct cp *cp, const struct al_http_req *req, bool csrf_needed,
                         const char *csrf, struct cp_principal *who, struct al_error *err)
{
    if (!cp->cfg.console_enabled)
        return -ENOENT;
    int rc;
    struct console_session *s = console__session(cp, req, &rc, err);
    if (!s)
        return rc;
    /* The key is checked again: revoked since the sign-in ends the session. */
    struct al_error e2 = {0};
    rc = cp_auth_digest(cp, s->key_digest, who, &e2);
    if (rc) {
        if (rc == -EACCES) {
            al_info("console: a session of key %s ended: %s", s->key_id, al_error_str(&e2));
            console__drop(cp->console, s);
        }
        return al_error_set(err, rc, "console session: %s", al_error_str(&e2));
    }
    if (csrf_needed && (!csrf || !cp_secret_equal(csrf, strlen(csrf), s->csrf, strlen(s->csrf))))
        return -EPERM;
    return 0;
}

int cp_console_auth(struct cp *cp, const struct al_http_req *req, struct cp_principal *who,
                    struct al_error *err)
{
    bool unsafe = !console__safe_method(req->method);
    const char *t = al_http_req_header(req, CP_CONSOLE_CSRF_HEADER);
    if (t && al_http_req_header_count(req, CP_CONSOLE_CSRF_HEADER) != 1)
        t = NULL;
    int rc = console__auth(cp, req, unsafe, t, who, err);
    if (rc == -EPERM)
        return al_error_set(err, -EPERM,
                            "a %s with the console's session cookie needs the session's "
                            "CSRF token in " CP_CONSOLE_CSRF_HEADER
                            " (GET /console/api/session gives it)",
                            req->method);
    return rc;
}

int cp_console_auth_csrf(struct cp *cp, const struct al_http_req *req, const char *csrf,
                         struct cp_principal *who, struct al_error *err)
{
    return console__auth(cp, req, true, csrf, who, err);
}

/* ---- the session endpoints ---------------------------------------------------------------- */

static void console__cookie(char *out, size_t len, const struct cp *cp,
                            const struct al_http_req *req, const char *value, uint64_t max_age_s)
{
    bool secure = console__secure(cp, req);
    snprintf(out, len, "%s=%s; Path=/; Max-Age=%llu; HttpOnly; SameSite=Strict%s",
             secure ? CP_CONSOLE_COOKIE_SECURE : CP_CONSOLE_COOKIE, value,
             (unsigned long long)max_age_s, secure ? "; Secure" : "");
}

/* The session, its key's role and, for each action the console offers, whether the role may
 * take it: asked of the API's own table of routes (auth.c), so that the page shows what the
 * API would allow and nothing is decided twice. */
static json_t *console__session_json(const struct console_session *s,
                                     const struct cp_principal *who)
{
    static const struct {
        const char *action, *method, *path;
    } actions[] = {
        {"createSandbox", "POST", "/sandboxes"},
        {"pauseSandbox", "POST", "/sandboxes/x/pause"},
        {"resumeSandbox", "POST", "/sandboxes/x/resume"},
        {"killSandbox", "DELETE", "/sandboxes/x"},
        {"sandboxLogs", "GET", "/sandboxes/x/logs"},
        {"readAudit", "GET", "/admin/audit"},
        {"verifyAudit", "GET", "/admin/audit/verify"},
        {"exportAudit", "GET", "/admin/audit/export"},
        {"readPolicies", "GET", "/admin/policies"},
        {"reloadPolicies", "POST", "/admin/policy-reloads"},
        {"manageKeys", "GET", "/admin/keys"},
        {"readVault", "GET", "/admin/vault"},
        {"writeVault", "PUT", "/admin/vault/x"},
        {"terminal", "GET", "/sandboxes/x/terminal"}, /* console_term.c asks the same */
    };
    char exp[40];
    al_time_rfc3339(exp, sizeof exp, s->expires_ns);
    json_t *may = json_object();
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++)
        json_object_set_new(
            may, actions[i].action,
            json_boolean(cp_auth_role_check(who, actions[i].method, actions[i].path, NULL) == 0));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "keyId", s->key_id, "role", cp_role_name(who->role),
                     "csrfToken", s->csrf, "expiresAt", exp, "may", may);
}

/* A sign-in must come from the console's own page: a JSON body (a cross-site form cannot send
 * one without a CORS preflight, which airlockd never grants) and, when the browser names the
 * origin, this host's. */
static bool console__same_origin(const struct al_http_req *req)
{
    const char *site = al_http_req_header(req, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0)
        return false;
    return !al_http_req_header(req, "Origin") || cp_console_origin_ours(req);
}

bool cp_console_origin_ours(const struct al_http_req *req)
{
    const char *origin = al_http_req_header(req, "Origin");
    const char *host = al_http_req_header(req, "Host");
    const char *sep = origin ? strstr(origin, "://") : NULL;
    return host && sep && al_http_req_header_count(req, "Origin") == 1 &&
           al_http_req_header_count(req, "Host") == 1 && strcasecmp(sep + 3, host) == 0;
}

static void console__signin_body(struct al_http_req *req, int err)
{
    struct cp *cp = req->user;
    req->user = NULL;
    if (err < 0)
        return;
    struct al_error e = {0};
    json_t *b = al_json_parse(req->body.data, req->body.len, &e);
    const char *key = NULL;
    const char *k;
    json_t *v;
    if (!json_is_object(b)) {
        console__error(req, 400, NULL, "the body must be {\"apiKey\": \"e2b_...\"}");
        goto out;
    }
    json_object_foreach(b, k, v)
    {
        if (strcmp(k, "apiKey") != 0) {
            console__error(req, 400, NULL, "\"%.64s\" is not a field of a sign-in (apiKey)", k);
            goto out;
        }
    }
    key = json_string_value(json_object_get(b, "apiKey"));
    if (!key || !*key || strlen(key) > 512) {
        console__error(req, 400, NULL, "\"apiKey\" must be an API key (e2b_...)");
        goto out;
    }
    struct cp_principal who;
    uint8_t kd[CP_DIGEST_LEN];
    cp_digest(key, strlen(key), kd);
    int rc = cp_auth_digest(cp, kd, &who, &e);
    if (rc) {
        al_info("console: a sign-in was refused: %s", al_error_str(&e));
        console__error(req, rc == -EACCES ? 401 : 500, NULL, "%s", al_error_str(&e));
        goto out;
    }
    struct cp_console *c = console__get(cp);
    if (c)
        console__sweep(c);
    if (c && cp_map_count(&c->sessions) >= CP_CONSOLE_MAX_SESSIONS) {
        console__error(req, 503, NULL,
                       "too many console sessions (%d); sign out elsewhere or wait for some to "
                       "expire",
                       CP_CONSOLE_MAX_SESSIONS);
        goto out;
    }
    struct console_session *s = c ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        console__error(req, 500, NULL, "out of memory");
        goto out;
    }
    uint8_t raw[CONSOLE_ID_BYTES];
    char id[CONSOLE_ID_HEX + 1];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(id, sizeof id, raw, sizeof raw);
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(s->csrf, sizeof s->csrf, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    cp_digest(id, strlen(id), s->id_digest);
    memcpy(s->key_digest, kd, sizeof kd);
    snprintf(s->key_id, sizeof s->key_id, "%s", who.key_id);
    s->created_ns = al_wall_ns();
    s->expires_ns = s->created_ns + cp->cfg.console_session_ms * 1000000ull;
    if (cp_map_put(&c->sessions, s->id_digest, sizeof s->id_digest, s)) {
        free(s);
        sodium_memzero(id, sizeof id);
        console__error(req, 500, NULL, "out of memory");
        goto out;
    }
    char cookie[256];
    console__cookie(cookie, sizeof cookie, cp, req, id, cp->cfg.console_session_ms / 1000);
    sodium_memzero(id, sizeof id);
    al_info("console: key %s signed in (%zu sessions)", who.key_id, cp_map_count(&c->sessions));
    console__json(req, 200, console__session_json(s, &who), cookie);
    sodium_memzero(cookie, sizeof cookie);
out:
    cp_rest_wipe_body(req, b, "apiKey");
    json_decref(b);
}

static void console__signin(struct cp *cp, struct al_http_req *req)
{
    const char *ct = al_http_req_header(req, "Content-Type");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
        console__error(req, 415, NULL, "a sign-in is a JSON body (Content-Type: application/json)");
        return;
    }
    if (!console__same_origin(req)) {
        console__error(req, 403, NULL, "a sign-in must come from the console's own page");
        return;
    }
    req->user = cp;
    int rc = al_http_req_read_body(req, CONSOLE_MAX_BODY, console__signin_body);
    if (rc < 0) {
        req->user = NULL;
        console__error(req, 400, NULL, "cannot read the request body: %s", strerror(-rc));
    }
}

static void console__session_api(struct cp *cp, struct al_http_req *req)
{
    const char *m = req->method;
    if (strcmp(m, "POST") == 0) {
        console__signin(cp, req);
        return;
    }
    if (strcmp(m, "GET") != 0 && strcmp(m, "DELETE") != 0) {
        console__error(req, 405, NULL,
                       "%s is not allowed on /console/api/session (GET, POST signs in, DELETE "
                       "signs out)",
                       m);
        return;
    }
    struct al_error err = {0};
    int rc;
    struct console_session *s = console__session(cp, req, &rc, &err);
    if (!s) {
        console__error(req, 401, NULL, "%s", rc == -ENOENT ? "not signed in" : al_error_str(&err));
        return;
    }
    if (strcmp(m, "GET") == 0) {
        struct cp_principal who;
        if ((rc = cp_auth_digest(cp, s->key_digest, &who, &err))) {
            if (rc == -EACCES)
                console__drop(cp->console, s);
            console__error(req, rc == -EACCES ? 401 : 500, NULL, "console session: %s",
                           al_error_str(&err));
            return;
        }
        console__json(req, 200, console__session_json(s, &who), NULL);
        return;
    }
    /* Signing out changes state: it needs the CSRF token too (a cross-site page must not be
     * able to sign the operator out). Not the key: a revoked key's session can still end. */
    const char *t = al_http_req_header(req, CP_CONSOLE_CSRF_HEADER);
    if (!t || !cp_secret_equal(t, strlen(t), s->csrf, strlen(s->csrf))) {
        console__error(req, 403, NULL,
                       "signing out needs the session's CSRF token in " CP_CONSOLE_CSRF_HEADER);
        return;
    }
    al_info("console: key %s signed out", s->key_id);
    console__drop(cp->console, s);
    char cookie[256];
    console__cookie(cookie, sizeof cookie, cp, req, "", 0);
    console__send(req, 204, "application/json", NULL, 0, cookie);
}

bool cp_console_route(struct cp *cp, struct al_http_req *req)
{
    const char *p = req->path;
    if (strncmp(p, "/console", 8) != 0 || (p[8] != '\0' && p[8] != '/'))
        return false;
    if (!cp->cfg.console_enabled) {
        static const char off[] = "the web console is turned off (console.enabled)\n";
        console__send(req, 404, "text/plain; charset=utf-8", off, sizeof off - 1, NULL);
        return true;
    }
    if (strcmp(p, CONSOLE_API_PREFIX "session") == 0) {
        console__session_api(cp, req);
        return true;
    }
    if (strncmp(p, CONSOLE_API_PREFIX "sandboxes/", strlen(CONSOLE_API_PREFIX "sandboxes/")) == 0) {
        char id[64];
        const char *rest = p + strlen(CONSOLE_API_PREFIX "sandboxes/");
        if (cp_rest_path_part(&rest, id, sizeof id) && strcmp(rest, "/terminal") == 0) {
            cp_console_term(cp, req, id);
            return true;
        }
    }
    if (strncmp(p, CONSOLE_API_PREFIX, strlen(CONSOLE_API_PREFIX)) == 0) {
        console__error(req, 404, NULL, "no such endpoint: %s %s", req->method, p);
        return true;
    }
    if (!console__safe_method(req->method)) {
        console__error(req, 405, NULL, "%s is not allowed on the console's pages (GET)",
                       req->method);
        return true;
    }
    if (p[8] == '\0') { /* "/console": the pages' relative URLs need the slash */
        struct al_http_header h[12];
        size_t n = console__headers(h, "text/plain; charset=utf-8", false);
        h[n++] = (struct al_http_header){"Location", "/console/"};
        al_http_resp_start(req, 308, h, n, 0);
        al_http_resp_end(req);
        return true;
    }
    const char *name = p + 9;
    if (!*name)
        name = "index.html";
    if (strchr(name, '/') || name[0] == '.') {
        static const char nf[] = "no such page of the console\n";
        console__send(req, 404, "text/plain; charset=utf-8", nf, sizeof nf - 1, NULL);
        return true;
    }
    console__asset(req, name);
    return true;
}
