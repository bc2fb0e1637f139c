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
 * airlock" added; no X-Forwarded-* added), streaming both ways with flow control (a
 * Content-Length body keeps its length), WebSocket and other upgrades relayed as bytes
 * after the server's 101, and the answers for what went wrong: 403 without a valid token
 * (E2B's proxy's status), 400 for a bad port, 502 "port N is not open in the sandbox" when
 * nothing listens, 504 when the server does not answer, and a cut-off response
 * (al_http_resp_abort) when it dies in the middle of one.
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

#include "common/log.h"

#define FWD_VIA         "1.1 airlock"
#define FWD_MAX_HEADERS 160

struct fwd {
    struct agent *a;
    struct al_http_req *req;   /* NULL once answered, upgraded or gone */
    struct al_http_creq *creq; /* NULL once done */
    int port;
    bool v6; /* trying [::1] */
    bool has_body;
    bool body_claimed; /* the client's body is ours (no retry from here) */
    bool body_streaming;
    bool resp_started;
};

static const char *const fwd__own_headers[] = {
    "Expect",         /* answered by our server already */
    "X-Access-Token", /* credentials for this hop */
    "E2B-Traffic-Access-Token",
    "E2b-Sandbox-Id", /* routing for this hop */
    "E2b-Sandbox-Port",
    NULL,
};

static bool fwd__drop_request_header(const char *name, const struct al_http_header *h, size_t n)
{
    for (const char *const *o = fwd__own_headers; *o; o++)
        if (strcasecmp(name, *o) == 0)
            return true;
    return al_http_forward_drops_header(h, n, name, 0);
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

static void fwd__reply(struct fwd *f, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fwd__reply(struct fwd *f, int status, const char *fmt, ...)
{
    struct al_http_req *req = f->req;
    if (!req)
        return;
    f->req = NULL;
    f->body_streaming = false; /* answering stops the body callbacks */
    req->user = NULL;
    if (f->resp_started) {
        al_http_resp_abort(req); /* too late for a status: the client must see a broken reply */
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "message", json_string(msg));
    json_object_set_new(o, "port", json_integer(f->port));
    if (f->a->sandbox_id)
        json_object_set_new(o, "sandboxId", json_string(f->a->sandbox_id));
    al_http_reply_json(req, status, o);
}

static void fwd__maybe_free(struct fwd *f)
{
    if (f->req || f->creq || f->body_streaming)
        return;
    free(f);
}

/* ---- the server's answer -------------------------------------------------------------------- */

static void fwd__client_drained(struct al_http_req *req)
{
    struct fwd *f = req->user;
    if (f && f->creq)
        al_http_creq_resume(f->creq);
}

/* Response headers the client gets: the server's end-to-end fields, plus our Via. */
static size_t fwd__response_headers(const struct al_http_header *h, size_t n, bool keep_upgrade,
                                    struct al_http_header *out, size_t cap, int64_t *cl)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            char *end;
            long long v = strtoll(h[i].value, &end, 10);
            if (cl && *h[i].value && !*end && v >= 0)
                *cl = v;
            continue;
        }
        if (al_http_forward_drops_header(h, n, h[i].name, keep_upgrade ? AL_HTTP_FWD_UPGRADE : 0))
            continue;
        out[k++] = h[i];
    }
    out[k++] = (struct al_http_header){"Via", FWD_VIA};
    return k;
}

static int fwd__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                            size_t n, void *arg)
{
    struct fwd *f = arg;
    (void)c;
    if (!f->req)
        return 1;
    struct al_http_header out[FWD_MAX_HEADERS];
    int64_t cl = -1;
    size_t k = fwd__response_headers(h, n, false, out, FWD_MAX_HEADERS, &cl);
    int rc = al_http_resp_start(f->req, status, out, k, cl);
    if (rc) {
        al_warn("port %d: cannot relay the server's response (status %d): %s", f->port, status,
                strerror(-rc));
        return 1; /* on_done follows with an error: 502 */
    }
    f->resp_started = true;
    return 0;
}

static int fwd__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct fwd *f = arg;
    (void)c;
    if (!f->req)
        return 0;
    if (al_http_resp_write(f->req, data, len) < 0)
        return 0; /* the client is gone: on_close cancels us */
    if (al_http_resp_queued(f->req) > f->a->lim.stream_high_water) {
        al_http_resp_on_drain(f->req, f->a->lim.stream_high_water / 4, fwd__client_drained);
        return 1;
    }
    return 0;
}

static void fwd__relay_done(int err, uint64_t up, uint64_t down, void *arg)
{
    int port = (int)(intptr_t)arg;
    al_info("port %d: upgraded connection closed (%llu bytes to the server, %llu from it)%s%s",
            port, (unsigned long long)up, (unsigned long long)down, err ? ": " : "",
            err ? strerror(-err) : "");
}

static void fwd__on_upgrade(struct al_http_creq *c, const struct al_http_header *h, size_t n,
                            struct al_http_tunnel *t, void *arg)
{
    struct fwd *f = arg;
    (void)c;
    if (!f->req) {
        al_http_tunnel_close(t);
        return;
    }
    struct al_http_header out[FWD_MAX_HEADERS];
    size_t k = fwd__response_headers(h, n, true, out, FWD_MAX_HEADERS, NULL);
    struct al_http_tunnel *down = NULL;
    int rc = al_http_req_upgrade(f->req, out, k, &down);
    if (rc) {
        al_http_tunnel_close(t);
        if (rc == -EPIPE) { /* the client left; the request is released */
            f->req = NULL;
            return;
        }
        al_warn("port %d: cannot switch the client's connection over: %s", f->port, strerror(-rc));
        fwd__reply(f, 502,
                   "port %d switched protocols, but the client's connection could not "
                   "follow (%s)",
                   f->port, strerror(-rc));
        return;
    }
    f->req = NULL; /* released by the upgrade */
    al_debug("port %d: switched protocols; relaying", f->port);
    rc = al_http_relay(down, t, NULL, fwd__relay_done, (void *)(intptr_t)f->port);
    if (rc)
        al_warn("port %d: cannot relay the upgraded connection: %s", f->port, strerror(-rc));
}

static int fwd__start(struct fwd *f);

/* Connecting failed because nothing listens there (or, for [::1], the sandbox has no IPv6). */
static bool fwd__not_listening(int err)
{
    return err == -ECONNREFUSED || err == -EADDRNOTAVAIL || err == -ENETUNREACH ||
           err == -EAFNOSUPPORT || err == -EHOSTUNREACH;
}

static void fwd__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct fwd *f = arg;
    f->creq = NULL;
    if (f->req) {
        const char *why = al_http_creq_strerror(c);
        if (err == 0) {
            struct al_http_req *req = f->req;
            f->req = NULL;
            f->body_streaming = false;
            req->user = NULL;
            al_http_resp_end(req);
        } else if (err == -ECONNREFUSED && !f->v6 && !f->body_claimed && !f->resp_started) {
            /* Nothing on 127.0.0.1: perhaps a server on [::1] only ("localhost" resolving
             * to ::1 first, as Node's does). The client's body is untouched: try there. */
            f->v6 = true;
            int rc = fwd__start(f);
            if (rc < 0)
                fwd__reply(f, 502, "port %d is not open in the sandbox", f->port);
        } else if (fwd__not_listening(err) && !f->resp_started) {
            al_info("port %d: nothing listens on it (request %s %.120s)", f->port, f->req->method,
                    f->req->path);
            fwd__reply(f, 502,
                       "port %d is not open in the sandbox (nothing listens on 127.0.0.1:%d or "
                       "[::1]:%d)",
                       f->port, f->port, f->port);
        } else if (err == -ETIMEDOUT && !f->resp_started) {
            fwd__reply(f, 504, "the server on port %d did not answer within %u s", f->port,
                       f->a->lim.forward_timeout_ms / 1000);
        } else {
            al_info("port %d: request %s %.120s failed%s: %s", f->port, f->req->method,
                    f->req->path, f->resp_started ? " in the middle of the response" : "",
                    why && *why ? why : strerror(-err));
            fwd__reply(f, 502, "port %d: %s", f->port, why && *why ? why : strerror(-err));
        }
    }
    fwd__maybe_free(f);
}

/* ---- the client's side ---------------------------------------------------------------------- */

static void fwd__up_drained(struct al_http_creq *c, void *arg)
{
    struct fwd *f = arg;
    (void)c;
    if (f->req && f->body_streaming)
        al_http_req_resume_body(f->req);
}

static int fwd__body_data(struct al_http_req *req, const char *data, size_t len)
{
    struct fwd *f = req->user;
    if (!f || !f->creq)
        return 0;
    if (al_http_creq_write(f->creq, data, len) < 0)
        return 0; /* on_done reports it */
    if (al_http_creq_queued(f->creq) > f->a->lim.stream_high_water) {
        al_http_creq_on_drain(f->creq, f->a->lim.stream_high_water / 4, fwd__up_drained);
        return 1;
    }
    return 0;
}

static void fwd__cancel(struct fwd *f)
{
    if (f->creq) {
        al_http_creq_cancel(f->creq); /* on_done frees f, now or from the loop */
        return;
    }
    fwd__maybe_free(f);
}

static void fwd__body_end(struct al_http_req *req, int err)
{
    struct fwd *f = req->user;
    if (!f)
        return;
    f->body_streaming = false;
    if (err == 0) {
        if (f->creq)
            al_http_creq_end(f->creq);
        return;
    }
    /* The client's body broke (or the client left): the request is released when we
     * return; the server's side is abandoned. */
    f->req = NULL;
    req->user = NULL;
    fwd__cancel(f);
}

static void fwd__on_close(struct al_http_req *req)
{
    struct fwd *f = req->user;
    if (!f)
        return;
    f->req = NULL;
    f->body_streaming = false;
    req->user = NULL;
    fwd__cancel(f);
}

/* The connection to the server is up and the request head written: the body may flow. */
static void fwd__up_ready(struct al_http_creq *c, void *arg)
{
    struct fwd *f = arg;
    (void)c;
    if (!f->req || f->body_claimed)
        return;
    f->body_claimed = true;
    f->body_streaming = true;
    int rc = al_http_req_stream_body(f->req, fwd__body_data, fwd__body_end);
    if (rc == -EALREADY && f->resp_started) {
        /* The server answered before taking the body: ours discards it, as a server does. */
        f->body_streaming = false;
        return;
    }
    if (rc) {
        f->body_streaming = false;
        if (!f->resp_started) /* the server has not answered: it will not get its body */
            fwd__reply(f, 400, "cannot read the request body: %s", strerror(-rc));
        if (f->creq)
            al_http_creq_cancel(f->creq);
    }
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

static int fwd__start(struct fwd *f)
{
    struct al_http_req *req = f->req;
    struct al_http_header hdrs[FWD_MAX_HEADERS];
    size_t n = 0;
    for (size_t i = 0; i < req->n_headers; i++) {
        if (fwd__drop_request_header(req->headers[i].name, req->headers, req->n_headers))
            continue;
        if (n + 1 >= FWD_MAX_HEADERS)
            return -E2BIG;
        hdrs[n++] = req->headers[i];
    }
    hdrs[n++] = (struct al_http_header){"Via", FWD_VIA};
    char target[64], path[8192];
    const char *origin = agent_forward_origin_form(req->target, path, sizeof path);
    if (!origin)
        return -ENAMETOOLONG;
    snprintf(target, sizeof target, f->v6 ? "[::1]:%d" : "127.0.0.1:%d", f->port);
    const char *upgrade = req->upgrade && !f->has_body ? al_http_req_header(req, "Upgrade") : NULL;
    struct al_http_creq_opts o = {
        .target = target,
        .method = req->method,
        .path = origin,
        .headers = hdrs,
        .n_headers = n,
        .stream_body = f->has_body,
        .stream_length = f->has_body && !req->chunked ? req->content_length : 0,
        .timeout_ms = f->a->lim.forward_timeout_ms,
        .on_response = fwd__on_response,
        .on_data = fwd__on_data,
        .on_done = fwd__on_done,
        .arg = f,
        .pool = upgrade ? NULL : f->a->fwd_pool,
        .upgrade = upgrade,
        .on_upgrade = upgrade ? fwd__on_upgrade : NULL,
    };
    int rc = al_http_creq_start(f->a->loop, &o, &f->creq);
    if (rc) {
        f->creq = NULL;
        return rc;
    }
    if (f->has_body) /* the body is read once the server is there (so a retry stays possible) */
        al_http_creq_on_drain(f->creq, 0, fwd__up_ready);
    return 0;
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
    struct fwd *f = calloc(1, sizeof *f);
    if (!f) {
        agent_reply_error(req, 503, "out of memory");
        return;
    }
    f->a = a;
    f->req = req;
    f->port = port;
    f->has_body = req->chunked || req->content_length > 0;
    req->user = f;
    int rc = fwd__start(f);
    if (rc < 0) {
        req->user = NULL;
        f->req = NULL;
        free(f);
        if (rc == -E2BIG)
            agent_reply_error(req, 431, "too many request headers to forward to port %d", port);
        else if (rc == -ENAMETOOLONG)
            agent_reply_error(req, 414, "the request-target is too long to forward to port %d",
                              port);
        else
            agent_reply_error(req, 502, "port %d: cannot forward the request: %s", port,
                              strerror(-rc));
        return;
    }
    al_http_req_on_close(req, fwd__on_close);
}

void agent_forward_free(struct agent *a)
{
    if (a->fwd_pool) {
        al_http_pool_close(a->fwd_pool);
        a->fwd_pool = NULL;
    }
}
