/* vmm/guest/forward: the sandbox's other ports. A request whose E2b-Sandbox-Port is not
 * envd's (49983) or the code interpreter's (49999), which is what getHost(port) users
 * reach, is forwarded to that port on the sandbox's own loopback: 127.0.0.1:<port>, then
 * [::1]:<port> if nothing listens there. The agent runs inside the sandbox's network
 * namespace (jail) or guest kernel (KVM), so this connection never leaves the sandbox: it
 * does not touch its interface, the vswitch or the egress proxy.
 *
 * Owns: who may use the forwarded ports (the sandbox's traffic access token in
 * E2B-Traffic-Access-Token, or its envd access token in X-Access-Token), the request as
 * the in-sandbox server sees it (method and target, Host as the client sent it, end-to-end
 * headers; hop-by-hop fields, airlock's routing headers and the tokens removed; "Via: 1.1
 * airlock" added; no X-Forwarded-* added), and the answers for what went wrong: 403 without
 * a valid token (E2B's proxy's status), 400 for a bad port, 502 "port N is not open in the
 * sandbox" when nothing listens, 504 when the server does not answer. The forwarding itself
 * (streaming both ways with flow control, a Content-Length body keeping its length, upgrades
 * relayed as bytes after the server's 101, a cut-off response when the server dies in the
 * middle of one) is common/http_forward's.
 */
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sodium.h>

#include "common/http_forward.h"
#include "common/log.h"

#define FWD_VIA "1.1 airlock"

/* One request forwarded to a port (common/http_forward.h does the forwarding). */
struct fwd {
    struct agent *a;
    int port;
};

static const char *const fwd__own_headers[] = {
    "X-Access-Token",                             /* credentials for this hop */
    "E2B-Traffic-Access-Token", "E2b-Sandbox-Id", /* routing for this hop */
    "E2b-Sandbox-Port",         NULL,
};

/* A field of the client's request head (http_forward.h's request_field). */
static int fwd__request_field(void *arg, const char *name, const char **value, char **owned)
{
    (void)arg, (void)value, (void)owned;
    for (const char *const *o = fwd__own_headers; *o; o++)
        if (strcasecmp(name, *o) == 0)
            return 1;
    return 0;
}

int agent_forward_port(const char *s)
{
    if (!s || !*s || s[0] == '0' || strlen(s) > 5)
        return -EINVAL;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535 ? v : -EINVAL;
}

bool agent_traffic_ok(const struct agent *a, const struct al_http_req *req)
{
    if (!a->token)
        return true;
    const char *tt = al_http_req_header(req, "E2B-Traffic-Access-Token");
    if (tt && al_http_req_header_count(req, "E2B-Traffic-Access-Token") == 1) {
        char want[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
        al_http_traffic_token(a->token, a->token_len, want);
        bool ok = strlen(tt) == AL_HTTP_TRAFFIC_TOKEN_LEN &&
                  sodium_memcmp(tt, want, AL_HTTP_TRAFFIC_TOKEN_LEN) == 0;
        sodium_memzero(want, sizeof want);
        if (ok)
            return true;
    }
    const char *xt = al_http_req_header(req, "X-Access-Token");
    return xt && al_http_req_header_count(req, "X-Access-Token") == 1 && agent_token_ok(a, xt);
}

/* ---- answers ---------------------------------------------------------------------------- */

static void fwd__reply(void *arg, struct al_http_req *req, int status, const char *msg)
{
    const struct fwd *f = arg;
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "message", json_string(msg));
    json_object_set_new(o, "port", json_integer(f->port));
    if (f->a->sandbox_id)
        json_object_set_new(o, "sandboxId", json_string(f->a->sandbox_id));
    al_http_reply_json(req, status, o);
}

/* Connecting failed because nothing listens there (or, for [::1], the sandbox has no IPv6). */
static bool fwd__not_listening(int err)
{
    return err == -ECONNREFUSED || err == -EADDRNOTAVAIL || err == -ENETUNREACH ||
           err == -EAFNOSUPPORT || err == -EHOSTUNREACH;
}

static int fwd__fail(void *arg, const struct al_http_req *req, int err, const char *why, char *msg,
                     size_t len)
{
    const struct fwd *f = arg;
    if (fwd__not_listening(err)) {
        al_info("port %d: nothing listens on it (request %s %.120s)", f->port, req->method,
                req->path);
        snprintf(msg, len,
                 "port %d is not open in the sandbox (nothing listens on 127.0.0.1:%d or "
                 "[::1]:%d)",
                 f->port, f->port, f->port);
        return 502;
    }
    if (err == -ETIMEDOUT) {
        snprintf(msg, len, "the server on port %d did not answer within %u s", f->port,
                 f->a->lim.forward_timeout_ms / 1000);
        return 504;
    }
    al_info("port %d: request %s %.120s failed: %s", f->port, req->method, req->path, why);
    snprintf(msg, len, "port %d: %s", f->port, why);
    return 502;
}

static void fwd__end(void *arg, int status)
{
    (void)status;
    free(arg);
}

const char *agent_forward_origin_form(const char *target, char *buf, size_t len)
{
    if (target[0] == '/' || strcmp(target, "*") == 0)
        return target;
    struct al_http_target t;
    const char *why;
    if (al_http_target_parse(target, strlen(target), 0, &t, &why) < 0 ||
        t.form != AL_HTTP_TARGET_ABSOLUTE)
        return "/"; /* the server admits no other form: nothing to keep */
    if (t.path_len)
        return t.path; /* the path and the query after it, to the target's end */
    if (!t.has_query)
        return "/";
    int n = snprintf(buf, len, "/?%.*s", (int)t.query_len, t.query);
    return n >= 0 && (size_t)n < len ? buf : NULL;
}

void agent_forward_request(struct agent *a, struct al_http_req *req, const char *port_str)
{
    int port = agent_forward_port(port_str);
    if (port < 0) {
        agent_reply_error(req, 400,
                          "E2b-Sandbox-Port '%.16s' is not a port number (1..65535, decimal)",
                          port_str);
        return;
    }
    if (!agent_traffic_ok(a, req)) {
        al_warn("port %d: %s %.120s refused: no valid traffic access token", port, req->method,
                req->path);
        agent_reply_error(req, 403,
                          "port %d of this sandbox needs its traffic access token: send "
                          "E2B-Traffic-Access-Token: <the sandbox's trafficAccessToken> (or "
                          "X-Access-Token with its envd access token)",
                          port);
        return;
    }
    /* Idle connections are dropped before the servers' own keep-alive timeouts (Node's is
     * 5 s), so a reused one is rarely one the server is closing. */
    static const struct al_http_pool_opts po = {.idle_timeout_ms = 4000};
    if (!a->fwd_pool && al_http_pool_new(a->loop, &po, &a->fwd_pool) < 0)
        a->fwd_pool = NULL; /* one connection per request then */
    char path[8192];
    const char *origin = agent_forward_origin_form(req->target, path, sizeof path);
    if (!origin) {
        agent_reply_error(req, 414, "the request-target is too long to forward to port %d", port);
        return;
    }
    struct fwd *f = calloc(1, sizeof *f);
    if (!f) {
        agent_reply_error(req, 503, "out of memory");
        return;
    }
    f->a = a;
    f->port = port;
    /* Nothing on 127.0.0.1: perhaps a server on [::1] only ("localhost" resolving to ::1
     * first, as Node's does). */
    char v4[32], v6[32], label[16];
    snprintf(v4, sizeof v4, "127.0.0.1:%d", port);
    snprintf(v6, sizeof v6, "[::1]:%d", port);
    snprintf(label, sizeof label, "port %d", port);
    const char *targets[] = {v4, v6};
    static const struct al_http_header via = {"Via", FWD_VIA};
    struct al_http_forward_opts o = {
        .targets = targets,
        .n_targets = 2,
        .path = origin,
        .request_field = fwd__request_field,
        .request_extra = &via,
        .n_request_extra = 1,
        .response_extra = &via,
        .n_response_extra = 1,
        .upgrade_extra = &via,
        .n_upgrade_extra = 1,
        .timeout_ms = a->lim.forward_timeout_ms,
        .high_water = a->lim.stream_high_water,
        .pool = a->fwd_pool,
        .fail = fwd__fail,
        .reply = fwd__reply,
        .on_end = fwd__end,
        .arg = f,
        .label = label,
    };
    int rc = al_http_forward(a->loop, req, &o);
    if (rc < 0) {
        free(f);
        if (rc == -E2BIG)
            agent_reply_error(req, 431, "too many request headers to forward to port %d", port);
        else
            agent_reply_error(req, 502, "port %d: cannot forward the request: %s", port,
                              strerror(-rc));
    }
}

void agent_forward_free(struct agent *a)
{
    if (a->fwd_pool) {
        al_http_pool_close(a->fwd_pool);
        a->fwd_pool = NULL;
    }
}
