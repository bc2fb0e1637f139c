/* vmm/guest/rpc: Connect-RPC with the JSON codec over common/http, as envd's clients use it.
 *
 * Unary: POST application/json, the message as the body, 200 + message or a non-200 JSON
 * error {"code","message"} with the code's conventional status. Server streaming: POST
 * application/connect+json carrying one enveloped message; the answer is always 200 +
 * application/connect+json (chunked, one chunk per frame), messages, keepalives after
 * Keepalive-Ping-Interval seconds of silence, and always a final end-stream frame that
 * carries the error if there is one. Client streaming (StreamInput) is not implemented.
 * Deadlines are connect-go's: Connect-Timeout-Ms (at most 10 characters, a signed integer,
 * else invalid_argument) sets one for every call; a stream still open there ends with
 * deadline_exceeded "context deadline exceeded" (envd's handlers all return ctx.Err()
 * then); unary handlers here answer at once, as envd's ignore their deadline.
 */
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

struct rpc__method {
    const char *service;
    const char *name;
    bool streaming;
};

static const struct rpc__method rpc__methods[] = {
    {"process.Process", "List", false},
    {"process.Process", "Connect", true},
    {"process.Process", "Start", true},
    {"process.Process", "Update", false},
    {"process.Process", "SendInput", false},
    {"process.Process", "SendSignal", false},
    {"process.Process", "CloseStdin", false},
    {"filesystem.Filesystem", "Stat", false},
    {"filesystem.Filesystem", "MakeDir", false},
    {"filesystem.Filesystem", "Move", false},
    {"filesystem.Filesystem", "ListDir", false},
    {"filesystem.Filesystem", "Remove", false},
    {"filesystem.Filesystem", "WatchDir", true},
    {"filesystem.Filesystem", "CreateWatcher", false},
    {"filesystem.Filesystem", "GetWatcherEvents", false},
    {"filesystem.Filesystem", "RemoveWatcher", false},
};

struct rpc__pending {
    struct agent *a;
    const struct rpc__method *m;
    bool has_user;
    char user[256];
    bool has_deadline;
    uint64_t deadline;
};

static void rpc__unary_error(struct al_http_req *req, enum agent_connect_code code, const char *msg)
{
    static const struct al_http_header h[] = {{"Content-Type", "application/json"}};
    char *body = agent_connect_error_json(code, msg);
    size_t n = body ? strlen(body) : 0;
    al_http_resp_start(req, agent_connect_code_http_status(code), h, 1, (int64_t)n);
    al_http_resp_write(req, body, n);
    al_http_resp_end(req);
    free(body);
}

static void rpc__stream_error(struct al_http_req *req, enum agent_connect_code code,
                              const char *msg)
{
    static const struct al_http_header h[] = {{"Content-Type", "application/connect+json"}};
    struct al_buf b;
    al_buf_init(&b, 0);
    agent_connect_end_stream_append(&b, code, msg);
    al_http_resp_start(req, 200, h, 1, (int64_t)b.len);
    al_http_resp_write(req, b.data, b.len);
    al_http_resp_end(req);
    al_buf_free(&b);
}

void agent_call_free(struct agent_call *c)
{
    if (!c)
        return;
    json_decref(c->msg);
    free(c);
}

void agent_rpc_reply(struct agent_call *c, json_t *msg)
{
    static const struct al_http_header h[] = {{"Content-Type", "application/json"}};
    if (!msg)
        msg = json_object();
    char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) {
        rpc__unary_error(c->req, AGENT_CONNECT_INTERNAL, "cannot encode the response");
        c->req = NULL;
        return;
    }
    size_t n = strlen(s);
    al_http_resp_start(c->req, 200, h, 1, (int64_t)n);
    al_http_resp_write(c->req, s, n);
    al_http_resp_end(c->req);
    free(s);
    c->req = NULL;
}

void agent_rpc_error(struct agent_call *c, enum agent_connect_code code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_debug("%s: %s: %s", c->method, agent_connect_code_name(code), msg);
    rpc__unary_error(c->req, code, msg);
    c->req = NULL;
}

void agent_stream_fail(struct agent_call *c, enum agent_connect_code code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_debug("%s: %s: %s", c->method, agent_connect_code_name(code), msg);
    rpc__stream_error(c->req, code, msg);
    c->req = NULL;
}

/* ---- streams ------------------------------------------------------------------------- */

static void rpc__timer_closed(uv_handle_t *h)
{
    struct agent_stream *s = h->data;
    if (--s->handles == 0)
        free(s);
}

static void rpc__stream_release(struct agent_stream *s)
{
    uv_timer_stop(&s->keepalive);
    uv_close((uv_handle_t *)&s->keepalive, rpc__timer_closed);
    if (s->has_deadline) {
        uv_timer_stop(&s->deadline);
        uv_close((uv_handle_t *)&s->deadline, rpc__timer_closed);
    }
}

static void rpc__on_peer_close(struct al_http_req *req)
{
    struct agent_stream *s = req->user;
    if (!s || s->ended)
        return;
    s->peer_gone = true;
    s->req = NULL;
    if (s->on_gone)
        s->on_gone(s);
    rpc__stream_release(s);
}

static int rpc__write_frame(struct agent_stream *s, uint8_t flags, const char *json, size_t n)
{
    struct al_buf b;
    al_buf_init(&b, 0);
    int r = agent_connect_frame_append(&b, flags, json, n);
    if (r == 0)
        r = al_http_resp_write(s->req, b.data, b.len);
    al_buf_free(&b);
    return r;
}

static void rpc__on_keepalive(uv_timer_t *t)
{
    struct agent_stream *s = t->data;
    if (s->ended || s->peer_gone)
        return;
    rpc__write_frame(s, 0, s->keepalive_json, strlen(s->keepalive_json));
}

void agent_stream_expire(struct agent_stream *s)
{
    if (s->ended || s->peer_gone)
        return;
    agent_stream_fn gone = s->on_gone;
    s->on_gone = NULL;
    s->on_drain = NULL;
    if (gone)
        gone(s);
    s->owner = NULL;
    /* connect-go's words for a handler context whose deadline passed. */
    agent_stream_end(s, AGENT_CONNECT_DEADLINE_EXCEEDED, "context deadline exceeded");
}

static void rpc__on_deadline(uv_timer_t *t)
{
    agent_stream_expire(t->data);
}

int64_t agent_call_time_left(const struct agent_call *c)
{
    if (!c->has_deadline)
        return -1;
    uint64_t now = uv_now(c->a->loop);
    return c->deadline > now ? (int64_t)(c->deadline - now) : 0;
}

struct agent_stream *agent_stream_start(struct agent_call *c, const char *keepalive_json)
{
    static const struct al_http_header h[] = {{"Content-Type", "application/connect+json"}};
    struct agent_stream *s = calloc(1, sizeof *s);
    if (!s) {
        agent_stream_fail(c, AGENT_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    s->a = c->a;
    s->req = c->req;
    s->keepalive_json = keepalive_json;
    s->keepalive_ms = 90000;
    const char *ki = al_http_req_header(c->req, "Keepalive-Ping-Interval");
    if (ki) {
        char *end;
        long v = strtol(ki, &end, 10);
        if (*ki && !*end && v > 0)
            s->keepalive_ms = (uint64_t)(v > 3600 ? 3600 : v) * 1000;
    }
    uv_timer_init(c->a->loop, &s->keepalive);
    s->keepalive.data = s;
    s->handles = 1;
    uv_timer_start(&s->keepalive, rpc__on_keepalive, s->keepalive_ms, s->keepalive_ms);
    int64_t left = agent_call_time_left(c);
    if (left >= 0) {
        uv_timer_init(c->a->loop, &s->deadline);
        s->deadline.data = s;
        s->has_deadline = true;
        s->handles++;
        /* Even a deadline that has passed lets the stream begin, as a handler whose context
         * is done still sends what it sends first (the start event), then ends. */
        uv_timer_start(&s->deadline, rpc__on_deadline, (uint64_t)left, 0);
    }
    c->req->user = s;
    al_http_req_on_close(c->req, rpc__on_peer_close);
    al_http_resp_start(c->req, 200, h, 1, -1);
    c->req = NULL; /* the stream owns it now */
    return s;
}

int agent_stream_send(struct agent_stream *s, json_t *msg)
{
    if (s->ended || s->peer_gone) {
        json_decref(msg);
        return -EPIPE;
    }
    char *j = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!j)
        return -ENOMEM;
    int r = rpc__write_frame(s, 0, j, strlen(j));
    free(j);
    /* Any message counts as a sign of life: restart the keepalive period. */
    uv_timer_again(&s->keepalive);
    return r;
}

size_t agent_stream_queued(const struct agent_stream *s)
{
    if (s->ended || s->peer_gone || !s->req)
        return 0;
    return al_http_resp_queued(s->req);
}

static void rpc__on_drain(struct al_http_req *req)
{
    struct agent_stream *s = req->user;
    if (!s || s->ended || s->peer_gone)
        return;
    s->drain_armed = false;
    if (s->on_drain)
        s->on_drain(s);
}

void agent_stream_want_drain(struct agent_stream *s)
{
    if (s->ended || s->peer_gone || s->drain_armed)
        return;
    s->drain_armed = true;
    al_http_resp_on_drain(s->req, s->a->lim.stream_high_water / 4, rpc__on_drain);
}

void agent_stream_end(struct agent_stream *s, enum agent_connect_code code, const char *fmt, ...)
{
    if (s->ended)
        return;
    char msg[1024] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    s->ended = true;
    if (!s->peer_gone && s->req) {
        struct al_buf b;
        al_buf_init(&b, 0);
        agent_connect_end_stream_append(&b, code, msg);
        al_http_resp_write(s->req, b.data, b.len);
        al_buf_free(&b);
        s->req->user = NULL;
        al_http_resp_end(s->req);
        s->req = NULL;
        rpc__stream_release(s);
    }
    /* peer_gone: rpc__on_peer_close releases the stream after on_gone returns */
}

/* ---- dispatch ------------------------------------------------------------------------ */

static bool rpc__ctype_is(const char *ct, const char *want)
{
    if (!ct)
        return false;
    size_t n = strlen(want);
    return strncasecmp(ct, want, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static void rpc__on_body(struct al_http_req *req, int err)
{
    struct rpc__pending *p = req->user;
    req->user = NULL;
    const struct rpc__method *m = p->m;
    struct agent *a = p->a;
    if (err < 0) {
        if (err != -E2BIG) {
            if (m->streaming)
                rpc__stream_error(req, AGENT_CONNECT_INVALID_ARGUMENT,
                                  "cannot read the request body");
            else
                rpc__unary_error(req, AGENT_CONNECT_INVALID_ARGUMENT,
                                 "cannot read the request body");
        }
        free(p);
        return;
    }
    struct al_error e = {0};
    json_t *msg = NULL;
    const char *data = req->body.data ? req->body.data : "";
    size_t len = req->body.len;
    if (m->streaming) {
        const uint8_t *mp;
        size_t ml;
        if (agent_connect_unwrap_request((const uint8_t *)data, len, a->lim.rpc_max_body, &mp, &ml,
                                         &e) < 0) {
            rpc__stream_error(req, AGENT_CONNECT_INVALID_ARGUMENT, al_error_str(&e));
            free(p);
            return;
        }
        data = (const char *)mp;
        len = ml;
    }
    if (len == 0) {
        msg = json_object();
    } else {
        msg = al_json_parse(data, len, &e);
        if (msg && !json_is_object(msg)) {
            json_decref(msg);
            msg = NULL;
            al_error_set(&e, -EINVAL, "the request message must be a JSON object");
        }
    }
    al_buf_free(&req->body);
    if (!msg) {
        char text[600];
        snprintf(text, sizeof text, "invalid JSON request for %s/%s: %s", m->service, m->name,
                 al_error_str(&e));
        if (m->streaming)
            rpc__stream_error(req, AGENT_CONNECT_INVALID_ARGUMENT, text);
        else
            rpc__unary_error(req, AGENT_CONNECT_INVALID_ARGUMENT, text);
        free(p);
        return;
    }
    struct agent_call *c = calloc(1, sizeof *c);
    if (!c) {
        json_decref(msg);
        free(p);
        rpc__unary_error(req, AGENT_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    c->a = a;
    c->req = req;
    c->method = m->name;
    c->msg = msg;
    c->has_user = p->has_user;
    memcpy(c->user, p->user, sizeof c->user);
    c->has_deadline = p->has_deadline;
    c->deadline = p->deadline;
    free(p);
    if (strcmp(m->service, "process.Process") == 0)
        agent_process_call(c);
    else if (strcmp(m->name, "WatchDir") == 0 || strstr(m->name, "Watcher"))
        agent_watch_call(c);
    else
        agent_fs_call(c);
    if (c->req) {
        /* A handler that neither answered nor started a stream is a bug: never hang. */
        al_error("%s/%s left its request unanswered", m->service, m->name);
        if (m->streaming)
            rpc__stream_error(c->req, AGENT_CONNECT_INTERNAL, "the agent did not answer");
        else
            rpc__unary_error(c->req, AGENT_CONNECT_INTERNAL, "the agent did not answer");
    }
    agent_call_free(c);
}

/* Connect-Timeout-Ms as connect-go reads it: at most 10 characters, a signed decimal
 * integer (ParseInt); zero or negative means the deadline has already passed. */
static int rpc__timeout(const struct al_http_req *req, bool *has, int64_t *ms, char *msg,
                        size_t msglen)
{
    const char *v = al_http_req_header(req, "Connect-Timeout-Ms");
    *has = false;
    if (!v || !*v) /* Go reads an empty field as an absent one */
        return 0;
    if (strlen(v) > 10) {
        snprintf(msg, msglen,
                 "parse timeout: \"%.32s\" has >10 digits (Connect-Timeout-Ms is a number of "
                 "milliseconds)",
                 v);
        return -EINVAL;
    }
    const char *p = v;
    if (*p == '+' || *p == '-')
        p++;
    bool ok = *p != '\0';
    for (const char *q = p; *q; q++)
        ok = ok && *q >= '0' && *q <= '9';
    if (!ok) {
        snprintf(msg, msglen,
                 "parse timeout: Connect-Timeout-Ms \"%s\" is not an integer number of "
                 "milliseconds",
                 v);
        return -EINVAL;
    }
    *ms = strtoll(v, NULL, 10);
    *has = true;
    return 0;
}

void agent_rpc_dispatch(struct agent *a, struct al_http_req *req, const char *service,
                        const char *method)
{
    const struct rpc__method *m = NULL;
    for (size_t i = 0; i < sizeof rpc__methods / sizeof rpc__methods[0]; i++) {
        if (strcmp(rpc__methods[i].service, service) == 0 &&
            strcmp(rpc__methods[i].name, method) == 0)
            m = &rpc__methods[i];
    }
    if (!m) {
        rpc__unary_error(req, AGENT_CONNECT_UNIMPLEMENTED,
                         strcmp(method, "StreamInput") == 0
                             ? "process.Process/StreamInput (client streaming) is not implemented; "
                               "use SendInput"
                             : "no such procedure");
        return;
    }
    const char *ct = al_http_req_header(req, "Content-Type");
    const char *want = m->streaming ? "application/connect+json" : "application/json";
    if (!rpc__ctype_is(ct, want)) {
        static const struct al_http_header h[] = {{"Content-Type", "text/plain"}};
        char msg[256];
        int n =
            snprintf(msg, sizeof msg,
                     "%s/%s accepts Content-Type %s (the Connect protocol with the JSON codec); "
                     "got '%.64s'\n",
                     service, method, want, ct ? ct : "");
        al_http_resp_start(req, 415, h, 1, n);
        al_http_resp_write(req, msg, (size_t)n);
        al_http_resp_end(req);
        return;
    }
    bool has_deadline;
    int64_t timeout_ms = 0;
    char tmsg[160];
    if (rpc__timeout(req, &has_deadline, &timeout_ms, tmsg, sizeof tmsg) < 0) {
        if (m->streaming)
            rpc__stream_error(req, AGENT_CONNECT_INVALID_ARGUMENT, tmsg);
        else
            rpc__unary_error(req, AGENT_CONNECT_INVALID_ARGUMENT, tmsg);
        return;
    }
    struct rpc__pending *p = calloc(1, sizeof *p);
    if (!p) {
        rpc__unary_error(req, AGENT_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->a = a;
    p->m = m;
    p->has_deadline = has_deadline;
    /* The deadline counts from the request's headers, as connect-go's does. */
    if (has_deadline)
        p->deadline = uv_now(a->loop) + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int r = agent_basic_auth_user(req, p->user, sizeof p->user);
    if (r == -EINVAL) {
        free(p);
        if (m->streaming)
            rpc__stream_error(req, AGENT_CONNECT_UNAUTHENTICATED,
                              "malformed Authorization header: expected Basic base64(user:)");
        else
            rpc__unary_error(req, AGENT_CONNECT_UNAUTHENTICATED,
                             "malformed Authorization header: expected Basic base64(user:)");
        return;
    }
    p->has_user = r == 0;
    req->user = p;
    r = al_http_req_read_body(req, a->lim.rpc_max_body + AGENT_CONNECT_HDR_LEN, rpc__on_body);
    if (r < 0) {
        req->user = NULL;
        free(p);
        rpc__unary_error(req, AGENT_CONNECT_INTERNAL, "cannot read the request body");
    }
}
