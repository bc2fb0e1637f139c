/* egress/http: the plain-HTTP engine of a connection.
 *
 * One request at a time (pipelined requests wait in the client buffer): the head is
 * parsed by llhttp (strict build, no lenient flag), checked (http_head.c), decided under
 * the sandbox's policy, and only then re-serialised to the upstream, which is bound to the
 * first request's host and dialled on the address the destination check approved. Request
 * bodies are re-framed (Content-Length kept, chunked re-chunked), so that what the
 * upstream parses is exactly what was decided. The response is parsed too (strictly) so
 * that its end is known; its head is validated before any byte reaches the sandbox, then
 * head and body are forwarded as they came. Deny and error answers are JSON.
 */
#include "internal.h"
#include "ratelimit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/http_head.h"
#include "common/log.h"
#include "common/util.h"
#include "http.h"

#define UP_READ       (16 * 1024)
#define CLIENT_READ   (16 * 1024)
#define QUEUE_HIGH    (64 * 1024) /* stop reading the other side above this */
#define RESP_HEAD_MAX (64 * 1024)
#define DRAIN_MS      2000
#define DRAIN_DISCARD (16 * 1024 * 1024) /* lingering close: bounded by DRAIN_MS too */

enum http_phase {
    H_IDLE = 0, /* between requests */
    H_HEAD,     /* receiving a request head */
    H_DECIDE,   /* destination check / connect in progress */
    H_BODY,     /* forwarding the request body */
    H_WAIT,     /* request sent, waiting for (the rest of) the response */
};

struct egress_http {
    struct egress_conn *c;
    llhttp_t req, resp;
    struct egress_http_head reqh, resph;
    struct egress_http_request r;
    enum http_phase phase;
    bool req_done;     /* the request message is complete (body forwarded) */
    bool resp_in_head; /* collecting a response head */
    bool resp_done;
    bool resp_started; /* a byte of the final response went to the client */
    bool upgrade;      /* 101 received: the connection becomes a tunnel */
    bool close_after;  /* close once the response is delivered */
    bool draining;
    /* The upstream connection outlives the client's in the worker's pool (keyed by the
     * sandbox, the bound host and the address dialled): up_pooled, it was taken from there;
     * up_reusable, its last exchange ended cleanly and nothing happened on it since;
     * up_redial, a request is being sent again on a new connection (http__resend), which
     * happens once per connection at most (up_resent). */
    bool up_pooled, up_reusable, up_redial, up_resent;
    size_t in_off; /* parsed bytes of c->in */
    struct al_buf to_up, to_client;
    char *upbuf;           /* upstream read buffer */
    size_t up_len, up_off; /* unparsed upstream bytes in upbuf */
    /* The connection's bound host, and how its first request spelled it. */
    bool bound;
    struct egress_host host;
    char host_raw[256];
    size_t host_raw_len; /* 0: not kept (longer than host_raw) */
    /* Current request (audit). */
    char rid[32];
    int n;
    int status;
    uint64_t max_body;
    uint64_t body_bytes, req_bytes, resp_bytes;
    uint64_t t_start, t_decided, t_sent, t_first_resp, t_body_io;
    const char *decision, *reason, *rule;
    bool would_deny;
    bool req_kick, resp_kick; /* a parser was resumed: run it once even without new bytes
                                 (llhttp finishes a message with no body on an empty call) */
    /* The head scanner (common/http_head.h) over the bytes llhttp accepted of each head:
     * what llhttp refuses keeps llhttp's reason, the scanner refuses what it lets through
     * (obs-fold, which it would unfold silently; controls in values). */
    struct al_http_head_scan req_scan, resp_scan;
    char path_log[512];
    size_t discarded;
    struct egress_http_rec_cache rec; /* the members its records repeat */
    /* The connection's last policy question and its answer (http__decide). */
    struct egress_policy *dc_policy; /* the policy answering, referenced; NULL: none kept */
    const char *dc_method;
    char dc_host[256];
    size_t dc_host_len;
    char dc_target[256];
    size_t dc_target_len;
    struct egress_ip dc_dst;
    uint16_t dc_port;
    bool dc_body;
    struct egress_verdict dc_verdict;
};

static const llhttp_settings_t *http__req_settings(void);
static const llhttp_settings_t *http__resp_settings(void);
static void http__process(struct egress_conn *c);
static void http__update_events(struct egress_conn *c);
static void http__audit_request(struct egress_conn *c, const char *decision, const char *rule,
                                const char *reason, const char *error);
static void http__audit_fail(struct egress_conn *c, const char *error);

static struct egress_http *http__of(llhttp_t *p)
{
    return p->data;
}

/* ---- request parser callbacks ------------------------------------------------------- */

static int req__on_begin(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    egress_http_head_reset(&h->reqh);
    h->phase = H_HEAD;
    h->t_start = al_now_ns();
    h->t_decided = h->t_sent = h->t_first_resp = 0; /* this request's timings, not the last one's */
    h->body_bytes = h->req_bytes = h->resp_bytes = 0;
    h->status = 0;
    h->req_done = false;
    h->resp_done = false;
    h->resp_started = false;
    h->would_deny = false;
    h->decision = h->reason = h->rule = NULL;
    h->path_log[0] = 0;
    h->n++;
    egress_new_request_id(h->c->w->e, h->rid);
    /* Slowloris: the whole head within header_timeout of its first byte. */
    egress_conn_deadline(h->c, h->c->w->e->cfg.header_timeout_ms);
    return 0;
}

static int req__on_url(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&http__of(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&http__of(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&http__of(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_headers_complete(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    if (egress_http_head_finish(&h->reqh) < 0)
        return HPE_USER;
    return HPE_PAUSED; /* decide before a byte of the body is looked at */
}

static int req__on_body(llhttp_t *p, const char *at, size_t n)
{
    struct egress_http *h = http__of(p);
    h->body_bytes += n;
    if (h->max_body && h->body_bytes > h->max_body) {
        llhttp_set_error_reason(p, "request_body_too_large");
        return HPE_USER;
    }
    int rc = egress_http_body_append(&h->to_up, h->r.chunked, at, n);
    h->req_bytes += n;
    return rc ? HPE_USER : 0;
}

static int req__on_complete(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    if (egress_http_body_end(&h->to_up, h->r.chunked) < 0)
        return HPE_USER;
    h->req_done = true;
    h->phase = H_WAIT;
    h->t_sent = al_now_ns();
    return HPE_PAUSED; /* the next (pipelined) request waits for this response */
}

static const llhttp_settings_t *http__req_settings(void)
{
    static llhttp_settings_t s;
    static bool init;
    if (!init) {
        llhttp_settings_init(&s);
        s.on_message_begin = req__on_begin;
        s.on_url = req__on_url;
        s.on_header_field = req__on_field;
        s.on_header_value = req__on_value;
        s.on_headers_complete = req__on_headers_complete;
        s.on_body = req__on_body;
        s.on_message_complete = req__on_complete;
        init = true;
    }
    return &s;
}

/* ---- response parser callbacks ------------------------------------------------------ */

static int resp__on_begin(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    egress_http_head_reset(&h->resph);
    al_http_head_scan_init(&h->resp_scan, false, 0); /* bounded by resph */
    h->resp_in_head = true;
    return 0;
}

static int resp__on_status(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&http__of(p)->resph, at, n) < 0 ? HPE_USER : 0;
}

static int resp__on_field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&http__of(p)->resph, at, n) < 0 ? HPE_USER : 0;
}

static int resp__on_value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&http__of(p)->resph, at, n) < 0 ? HPE_USER : 0;
}

static int resp__on_headers_complete(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    if (egress_http_head_finish(&h->resph) < 0)
        return HPE_USER;
    int status = llhttp_get_status_code(p);
    if (status >= 200 || status == 101) {
        h->status = status;
        if (!h->t_first_resp)
            h->t_first_resp = al_now_ns();
    }
    if (status == 101 && !h->r.websocket) {
        llhttp_set_error_reason(p, "unrequested_upgrade");
        return HPE_USER;
    }
    /* A response to HEAD has no body whatever its headers say. */
    if (h->r.method && strcmp(h->r.method, "HEAD") == 0 && status >= 200)
        p->flags |= F_SKIPBODY;
    return HPE_PAUSED; /* the head is forwarded once it is known to be complete */
}

static int resp__on_complete(llhttp_t *p)
{
    struct egress_http *h = http__of(p);
    int status = llhttp_get_status_code(p);
    if (status < 200 && status != 101)
        return 0; /* 100 Continue and friends: the final response follows */
    if (status == 101)
        return 0; /* llhttp stops with HPE_PAUSED_UPGRADE */
    h->resp_done = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t *http__resp_settings(void)
{
    static llhttp_settings_t s;
    static bool init;
    if (!init) {
        llhttp_settings_init(&s);
        s.on_message_begin = resp__on_begin;
        s.on_status = resp__on_status;
        s.on_header_field = resp__on_field;
        s.on_header_value = resp__on_value;
        s.on_headers_complete = resp__on_headers_complete;
        s.on_message_complete = resp__on_complete;
        init = true;
    }
    return &s;
}

/* ---- lifetime ------------------------------------------------------------------------ */

int egress_http_start(struct egress_conn *c)
{
    struct egress_http *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->c = c;
    c->http = h;
    llhttp_init(&h->req, HTTP_REQUEST, http__req_settings());
    llhttp_init(&h->resp, HTTP_RESPONSE, http__resp_settings());
    h->req.data = h;
    h->resp.data = h;
    egress_http_head_init(&h->reqh, c->w->e->cfg.max_header_bytes);
    egress_http_head_init(&h->resph, RESP_HEAD_MAX);
    al_http_head_scan_init(&h->req_scan, true, 0); /* bounded by reqh */
    al_buf_init(&h->to_up, 0);
    al_buf_init(&h->to_client, 0);
    c->state = CONN_HTTP;
    http__process(c);
    return 0;
}

void egress_http_free(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (!h)
        return;
    egress_http_head_free(&h->reqh);
    egress_http_head_free(&h->resph);
    egress_http_rec_cache_free(&h->rec);
    egress_policy_unref(h->dc_policy);
    al_buf_free(&h->to_up);
    al_buf_free(&h->to_client);
    if (h->upbuf) {
        egress_mem_give(c->w->e, c->sb, UP_READ);
        free(h->upbuf);
    }
    free(h);
    c->http = NULL;
}

/* ---- answers and audit ------------------------------------------------------------- */

/* Writes members into cache[cap] (*len) as fn serialises them; *len = 0 when they do not
 * fit (the record then writes them itself). */
static void
http__rec_cache(struct egress_conn *c, const char *proto, char *cache, size_t cap, size_t *len,
                void (*fn)(struct egress_conn *c, const char *proto, struct egress_recw *w))
{
    struct egress_recw t;
    egress_recw_begin(&t, "");
    fn(c, proto, &t);
    size_t n;
    const char *m = egress_recw_members(&t, &n);
    *len = m && n <= cap ? n : 0;
    if (*len)
        memcpy(cache, m, n);
    egress_recw_free(&t);
}

static void http__rec_sandbox(struct egress_conn *c, const char *proto, struct egress_recw *w)
{
    (void)proto;
    egress_recw_sandbox(w, c->sb, c->policy);
}

static void http__rec_conn(struct egress_conn *c, const char *proto, struct egress_recw *w)
{
    egress_recw_str(w, "connection_id", c->request_id);
    egress_recw_str(w, "proto", proto);
    egress_recw_str(w, "src", c->src_text);
    egress_recw_str(w, "dst", c->dst_text);
    if (c->dialled.family)
        egress_recw_str(w, "dialled", c->dialled_text);
}

void egress_http_rec_cache_free(struct egress_http_rec_cache *k)
{
    egress_policy_unref(k->policy);
    memset(k, 0, sizeof *k);
}

void egress_http_audit(struct egress_conn *c, struct egress_http_rec_cache *k,
                       const struct egress_http_rec *r)
{
    struct egress_audit_event ev = {.type = "http_request",
                                    .decision = r->decision,
                                    .rule = r->rule,
                                    .reason = r->reason,
                                    .host = r->host && r->host[0] ? r->host : NULL,
                                    .request_id = r->request_id,
                                    .policy = c->policy,
                                    .bytes_up = r->bytes_up,
                                    .bytes_down = r->bytes_down,
                                    .status = r->status,
                                    .error = r->error != NULL};
    if (!egress_audit_budget(c->w->e, c->sb, &ev))
        return;
    struct egress_recw w;
    egress_recw_begin(&w, "http_request");
    /* sandbox, template, policy, request_id, connection_id, proto, src, dst, dialled: the
     * same bytes as writing them one by one, mostly from the connection's cache. */
    if (k->policy != c->policy || !k->sb_len) {
        egress_policy_unref(k->policy);
        k->policy = c->policy ? egress_policy_ref(c->policy) : NULL;
        http__rec_cache(c, r->proto, k->sb, sizeof k->sb, &k->sb_len, http__rec_sandbox);
    }
    if (k->sb_len)
        egress_recw_raw(&w, k->sb, k->sb_len);
    else
        http__rec_sandbox(c, r->proto, &w);
    egress_recw_str(&w, "request_id", r->request_id);
    const char *dialled = c->dialled.family ? c->dialled_text : "";
    if (!k->conn_len || strcmp(k->dialled, dialled) != 0) {
        http__rec_cache(c, r->proto, k->conn, sizeof k->conn, &k->conn_len, http__rec_conn);
        snprintf(k->dialled, sizeof k->dialled, "%s", dialled);
    }
    if (k->conn_len)
        egress_recw_raw(&w, k->conn, k->conn_len);
    else
        http__rec_conn(c, r->proto, &w);
    struct egress_http_rec rm = *r;
    rm.mode = c->policy && egress_policy_report_mode(c->policy) ? "report" : "enforce";
    egress_http_rec_write(&w, &rm, al_now_ns());
    egress_audit_w(c->w->e, &w);
}

static void http__audit_request(struct egress_conn *c, const char *decision, const char *rule,
                                const char *reason, const char *error)
{
    struct egress_http *h = c->http;
    /* The connection's totals (its connection_end record). */
    c->bytes_up += h->req_bytes;
    c->bytes_down += h->resp_bytes;
    h->decision = NULL; /* recorded */
    bool first = h->n == 1;
    struct egress_http_rec r = {
        .request_id = h->rid,
        .proto = "http",
        .decision = decision,
        .reason = reason,
        .rule = rule,
        .error = error,
        .method = h->r.method,
        .host = h->r.host_name[0] ? (c->have_host ? c->host.text : h->r.host_name) : NULL,
        .path = h->path_log,
        .status = h->status,
        .websocket = h->r.websocket,
        .upstream_reused = h->up_pooled,
        .bytes_up = h->req_bytes,
        .bytes_down = h->resp_bytes,
        .decide = {h->t_start, h->t_decided},
        .dns = {first ? c->t_dns0 : 0, first ? c->t_dns : 0},
        .connect = {first ? c->t_connect0 : 0, first ? c->t_connected : 0},
        .upstream = {h->t_sent, h->t_first_resp},
        .t_start = h->t_start,
    };
    egress_http_audit(c, &h->rec, &r);
}

/* An allowed request that failed after its decision (upstream errors, timeouts, a broken
 * body): the decision as it was, and what went wrong. */
static void http__audit_fail(struct egress_conn *c, const char *error)
{
    struct egress_http *h = c->http;
    const char *decision = h->decision ? h->decision : (h->would_deny ? "would_deny" : "allow");
    http__audit_request(c, decision, c->verdict.rule, c->verdict.reason, error);
}

static void http__flush_client(struct egress_conn *c);

void egress_http_answer(struct egress_conn *c, int status, const char *error, const char *rule,
                        const char *reason, bool close_after)
{
    struct egress_http *h = c->http;
    if (!h)
        return;
    h->status = status;
    al_buf_reset(&h->to_client);
    egress_http_error_response(&h->to_client, status, error, rule, reason, h->rid, true);
    (void)close_after; /* every error answer closes: the connection state is not trusted */
    h->draining = true;
    h->close_after = true;
    c->state = CONN_DRAIN;
    /* The upstream (if any) is of no further use. */
    if (c->upstream.fd >= 0)
        egress_conn_set_events(&c->upstream, 0);
    egress_conn_deadline(c, DRAIN_MS);
    http__flush_client(c);
    if (c->state == CONN_DRAIN)
        http__update_events(c);
}

/* A request refused before reaching any upstream. */
static void http__deny(struct egress_conn *c, int status, const char *error, const char *rule,
                       const char *reason)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    if (!h->t_decided)
        h->t_decided = al_now_ns();
    atomic_fetch_add(&e->stats.http_denied, 1);
    atomic_fetch_add(&e->stats.http_requests, 1);
    if (c->sb)
        atomic_fetch_add(&c->sb->n_denied, 1);
    h->status = status;
    http__audit_request(c, "deny", rule, reason, NULL);
    egress_http_answer(c, status, error, rule, reason, true);
}

/* ---- I/O helpers ------------------------------------------------------------------- */

static int http__send(int fd, struct al_buf *b, uint64_t *io_ts)
{
    while (b->len) {
        ssize_t n = send(fd, b->data, b->len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            return -errno;
        }
        al_buf_consume(b, (size_t)n);
        if (io_ts)
            *io_ts = al_now_ns();
    }
    if (b->cap > 64 * 1024) {
        al_buf_free(b); /* do not keep a large idle buffer */
        al_buf_init(b, 0);
    }
    return 0;
}

static void http__flush_client(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (http__send(c->client.fd, &h->to_client, &c->t_last_io) < 0) {
        egress_conn_close(c, true, "client_write_failed");
        return;
    }
    if (h->draining && h->to_client.len == 0 && !c->client.shut_wr) {
        shutdown(c->client.fd, SHUT_WR);
        c->client.shut_wr = true;
    }
}

static void http__update_events(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (c->state == CONN_CLOSING)
        return;
    int ce = 0, ue = 0;
    if (h->draining) {
        if (h->to_client.len)
            ce |= UV_WRITABLE;
        if (!c->client.eof)
            ce |= UV_READABLE; /* lingering close: read and discard */
        egress_conn_set_events(&c->client, ce);
        if (c->upstream.fd >= 0)
            egress_conn_set_events(&c->upstream, 0);
        return;
    }
    if (h->to_client.len)
        ce |= UV_WRITABLE;
    /* Read the client while a head is being received, or a body forwarded, and the
     * upstream queue has room; never while a decision is pending or a response awaited
     * (pipelined requests wait in the kernel). */
    bool unparsed = c->in_len > h->in_off;
    bool room = !c->in || c->in_len < c->in_cap || h->in_off > 0;
    bool parsing = h->phase == H_IDLE || h->phase == H_HEAD || (h->phase == H_BODY && !h->req_done);
    /* While a response is awaited the client stays readable (a pipelined request is
     * buffered, not parsed) until the buffer is full: no interest change per request. */
    bool want_client = !c->client.eof && h->to_up.len < QUEUE_HIGH &&
                       ((parsing && !unparsed) || (h->phase == H_WAIT && room));
    if (want_client)
        ce |= UV_READABLE;
    if (c->upstream.fd >= 0 && c->state == CONN_HTTP) {
        if (h->to_up.len)
            ue |= UV_WRITABLE;
        if (!c->upstream.eof && h->to_client.len < QUEUE_HIGH)
            ue |= UV_READABLE;
        egress_conn_set_events(&c->upstream, ue);
    }
    egress_conn_set_events(&c->client, ce);
}

/* ---- the request side ---------------------------------------------------------------- */

static void http__on_dst_checked(struct egress_conn *c, bool ok, const char *reason);
static void http__send_head(struct egress_conn *c);
static void http__to_inspect(struct egress_conn *c);

/* The plain engine's binding of egress_http_decide: q decided under c->policy into
 * c->verdict. A decision is a function of the policy (an immutable object: a reload makes a
 * new one) and the question alone, and a keep-alive connection mostly asks the same question
 * again: the last question is kept with its answer and a reference to the policy that gave
 * it, and the same question under the same policy gets the same answer without the rule
 * walk. Questions too long to keep are decided each time. */
static void http__decide(void *arg, const struct egress_http_question *hq,
                         struct egress_http_verdict *v)
{
    struct egress_conn *c = arg;
    struct egress_http *h = c->http;
    const struct egress_query qv = {
        .host = hq->host,
        .host_len = hq->host_len,
        .dst = &c->dst,
        .port = hq->port,
        .scheme = EGRESS_SCHEME_HTTP,
        .method = hq->method,
        .path = hq->path,
        .path_len = hq->path_len,
        .body = hq->body,
    };
    const struct egress_query *q = &qv;
    if (h->dc_policy && h->dc_policy == c->policy && q->method && h->dc_method &&
        strcmp(q->method, h->dc_method) == 0 && q->port == h->dc_port && q->body == h->dc_body &&
        memcmp(q->dst, &h->dc_dst, sizeof h->dc_dst) == 0 && q->host_len == h->dc_host_len &&
        memcmp(q->host, h->dc_host, q->host_len) == 0 && q->path_len == h->dc_target_len &&
        memcmp(q->path, h->dc_target, q->path_len) == 0) {
        c->verdict = h->dc_verdict;
    } else {
        egress_decide(c->policy, q, &c->verdict);
        egress_policy_unref(h->dc_policy);
        h->dc_policy = NULL;
        if (c->policy && q->method && q->host && q->host_len < sizeof h->dc_host &&
            q->path_len <= sizeof h->dc_target) {
            h->dc_policy = egress_policy_ref(c->policy);
            h->dc_method = q->method; /* static: llhttp's method names */
            memcpy(h->dc_host, q->host, q->host_len);
            h->dc_host_len = q->host_len;
            memcpy(h->dc_target, q->path, q->path_len);
            h->dc_target_len = q->path_len;
            h->dc_dst = *q->dst;
            h->dc_port = q->port;
            h->dc_body = q->body;
            h->dc_verdict = c->verdict;
        }
    }
    *v = (struct egress_http_verdict){
        .allow = c->verdict.allow,
        .would_deny = c->verdict.would_deny,
        .malformed = c->verdict.malformed,
        .websocket = c->verdict.websocket,
        .rule = c->verdict.rule,
        .reason = c->verdict.reason,
        .max_body = egress_policy_max_request_body(c->policy),
    };
}

static void http__on_head(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    int status = 0;
    const char *reason = NULL;
    const struct egress_http_conn conn = {.port = c->dst_port};
    egress_conn_no_deadline(c);
    h->phase = H_DECIDE;
    /* Nothing more is read from the client until this request is decided: decisions taken
     * at once leave the client's interest as it is (an epoll_ctl less per keep-alive
     * request); those that wait (destination check, connect) clear it first. */

    /* Decisions taken before the bytes arrived (limits, no policy, audit down). */
    if (c->verdict.reason && !c->verdict.allow && !c->have_host && !h->bound) {
        const char *r = c->verdict.reason;
        int st = strcmp(r, "sandbox_connection_limit") == 0 ? 429 : 503;
        const char *err = st == 429                     ? "too_many_connections"
                          : strcmp(r, "no_policy") == 0 ? "blocked_by_policy"
                                                        : "proxy_unavailable";
        if (strcmp(r, "no_policy") == 0)
            st = 403;
        egress_http_check_request(&h->reqh, &h->req, &conn, &h->r, &status, &reason);
        http__deny(c, st, err, NULL, r);
        return;
    }
    if (egress_http_check_request(&h->reqh, &h->req, &conn, &h->r, &status, &reason) < 0) {
        http__deny(c, status, status == 403 ? "blocked_by_policy" : "bad_request", NULL, reason);
        return;
    }
    /* Log the path without its query string unless configured otherwise. */
    {
        size_t pl = e->cfg.audit_query_strings ? h->r.target_len : h->r.path_len;
        if (pl >= sizeof h->path_log)
            pl = sizeof h->path_log - 1;
        memcpy(h->path_log, h->r.target, pl);
        h->path_log[pl] = 0;
    }
    if (!egress_audit_ok(e->audit)) {
        atomic_fetch_add(&e->stats.audit_denied, 1);
        http__deny(c, 503, "proxy_unavailable", NULL, "audit_unavailable");
        return;
    }
    /* The policy may have been replaced since the last request: decide on the current one. */
    struct egress_policy *p = egress_sandbox_policy(c->sb);
    if (!p) {
        http__deny(c, 403, "blocked_by_policy", NULL, "no_policy");
        return;
    }
    egress_policy_unref(c->policy);
    c->policy = p;

    struct egress_host host;
    struct al_error err = {0};
    size_t hl = strlen(h->r.host_name);
    if (h->bound && hl && hl == h->host_raw_len && memcmp(h->r.host_name, h->host_raw, hl) == 0) {
        host = h->host; /* keep-alive: spelled as before, so canonically the bound host */
    } else if (egress_canon_host(h->r.host_name, hl, &host, &err) < 0) {
        http__deny(c, 400, "bad_request", NULL, "invalid_host");
        return;
    }
    if (h->bound && (host.kind != h->host.kind || strcmp(host.text, h->host.text) != 0)) {
        c->host = host; /* the record names the host asked for (the connection ends here) */
        http__deny(c, 403, "blocked_by_policy", NULL, "host_changed_on_connection");
        return;
    }
    struct egress_http_decision dn;
    const struct egress_http_decide_args da = {
        .r = &h->r,
        .conn = &conn,
        .host = host.text,
        .host_len = host.len,
        .max_body = e->cfg.max_body_bytes,
        .decide = http__decide,
        .arg = c,
    };
    int drc = egress_http_decide(&da, &dn);
    h->t_decided = al_now_ns();
    h->rule = c->verdict.rule;
    h->reason = c->verdict.reason;
    if (drc < 0) {
        http__deny(c, dn.status, dn.error, c->verdict.rule, dn.reason);
        return;
    }
    h->would_deny = c->verdict.would_deny;
    h->max_body = dn.max_body;
    if (egress_is_self(e, &c->dst)) {
        http__deny(c, 403, "blocked_by_policy", c->verdict.rule, "proxy_address");
        return;
    }
    if (egress_inspect_rule_injects(c->policy, c->verdict.rule)) {
        /* Credentials (inspect.c): the connection goes to a plain interception session,
         * which removes the sandbox's copy, injects (allow_plaintext_inject), scrubs. */
        if (!egress_inspect_available(e)) {
            http__deny(c, 503, "credentials_unavailable", c->verdict.rule, "vault_not_configured");
            return;
        }
        c->host = host;
        c->have_host = true;
        http__to_inspect(c);
        return;
    }
    c->host = host;
    c->have_host = true;
    if (!h->bound) {
        h->bound = true;
        h->host = host;
        if (hl < sizeof h->host_raw) {
            memcpy(h->host_raw, h->r.host_name, hl);
            h->host_raw_len = hl;
        }
    }
    h->decision = h->would_deny ? "would_deny" : "allow";
    if (c->upstream.fd >= 0) {
        /* Keep-alive: the same host on the upstream dialled for it. (An upstream that
         * closed has closed this connection too, so it is never re-dialled here.) */
        http__send_head(c);
        return;
    }
    egress_conn_set_events(&c->client, 0);
    if (c->verdict.by_address) {
        /* An address rule allowed it: the destination is what the rule names. */
        http__on_dst_checked(c, true, NULL);
        return;
    }
    egress_check_destination(c, &c->host, http__on_dst_checked);
}

/* The session starts with this request as the strict parser accepted it (re-serialised from
 * the parsed head), then the bytes not parsed yet (its body, pipelined requests). */
static void http__inspect_dst_checked(struct egress_conn *c, bool ok, const char *reason)
{
    struct egress_http *h = c->http;
    c->state = CONN_HTTP;
    if (!ok) {
        http__deny(c, 403, "blocked_by_policy", c->verdict.rule, reason);
        return;
    }
    egress_conn_set_dialled(c, &c->dst);
    struct al_buf b;
    al_buf_init(&b, 0);
    /* The head's pieces have their lengths and no NUL (the scanner refuses control bytes). */
    int rc = al_buf_appends(&b, h->r.method);
    if (rc == 0)
        rc = al_buf_append(&b, " ", 1);
    if (rc == 0)
        rc = al_buf_append(&b, h->reqh.buf + h->reqh.url, h->reqh.url_len);
    if (rc == 0) {
        /* " HTTP/1.%d\r\n": llhttp's version digits are single. */
        char ver[] = " HTTP/1.0\r\n";
        ver[8] = (char)('0' + h->r.http_minor % 10);
        rc = al_buf_append(&b, ver, sizeof ver - 1);
    }
    for (uint32_t i = 0; i < h->reqh.n_hdr && rc == 0; i++) {
        const struct egress_http_hdr *x = &h->reqh.hdr[i];
        if ((rc = al_buf_append(&b, h->reqh.buf + x->name, x->name_len)) ||
            (rc = al_buf_append(&b, ": ", 2)) ||
            (rc = al_buf_append(&b, h->reqh.buf + x->value, x->value_len)))
            break;
        rc = al_buf_append(&b, "\r\n", 2);
    }
    if (rc == 0)
        rc = al_buf_append(&b, "\r\n", 2);
    if (rc == 0 && c->in_len > h->in_off)
        rc = al_buf_append(&b, c->in + h->in_off, c->in_len - h->in_off);
    const char *why = "out_of_memory";
    if (rc == 0 && c->upstream.fd >= 0) {
        /* An upstream of earlier requests: the session dials its own. */
        egress_conn_drop_upstream(c);
    }
    if (rc == 0 && egress_inspect_conn_start_plain(c, c->host.text, b.data, b.len, &why) == 0) {
        al_buf_free_wipe(&b);
        c->allowed = true;
        egress_http_free(c); /* the session owns the exchange now */
        return;
    }
    al_buf_free_wipe(&b);
    http__deny(c, 503, "proxy_unavailable", c->verdict.rule, why);
}

static void http__to_inspect(struct egress_conn *c)
{
    egress_conn_set_events(&c->client, 0);
    if (c->verdict.by_address) {
        http__inspect_dst_checked(c, true, NULL);
        return;
    }
    egress_check_destination(c, &c->host, http__inspect_dst_checked);
}

/* Methods a client may repeat without changing what its request does (RFC 9110 9.2.2). */
static bool http__idempotent(const char *m)
{
    static const char *const ok[] = {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", NULL};
    for (const char *const *x = ok; m && *x; x++)
        if (strcmp(m, *x) == 0)
            return true;
    return false;
}

/* The request may go again on another connection if its first one turns out dead: no body,
 * a method that may be repeated. */
static bool http__resendable(const struct egress_http *h)
{
    return !h->r.chunked && h->r.content_length <= 0 && http__idempotent(h->r.method);
}

/* The name c's upstream is pooled under, beside the sandbox (never shared between
 * sandboxes) and the port: the bound host and the address dialled. Not the policy: every
 * request on the connection is decided under the sandbox's current policy, and its
 * destination checked, before the pool is asked; the socket carries no decision. */
static void http__pool_name(struct egress_conn *c, char *out, size_t outlen)
{
    snprintf(out, outlen, "http:%s@%s", c->http->host.text, c->dialled_text);
}

/* An idle upstream of the same sandbox to the same host and address, if the pool has a live
 * one: then c's upstream, connected. */
static bool http__take_pooled(struct egress_conn *c)
{
    if (!c->sb)
        return false;
    char name[sizeof c->http->host.text + sizeof c->dialled_text + 8];
    http__pool_name(c, name, sizeof name);
    /* A pooled socket that is still watched needs no look at it (a close would have been
     * reported) unless the server closed it since the loop last asked and the request
     * could not be sent again on another connection. */
    uint64_t slot;
    int fd = egress_inspect_pool_take(c->w, c->sb->id, name, c->dst_port,
                                      !http__resendable(c->http), &slot);
    if (fd < 0)
        return false;
    egress_conn_adopt_upstream(c, fd, slot);
    c->http->up_pooled = true;
    return true;
}

void egress_http_pool_upstream(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (!h || !h->up_reusable || c->upstream.fd < 0 || c->upstream.eof || h->to_up.len || !c->sb ||
        atomic_load(&c->sb->removed))
        return;
    /* Idle in the pool, still watched for reading: a close or stray bytes drop it then. */
    char name[sizeof h->host.text + sizeof c->dialled_text + 8];
    http__pool_name(c, name, sizeof name);
    int fd = c->upstream.fd;
    uint64_t slot = egress_conn_release_upstream(c);
    egress_inspect_pool_give(c->w, c->sb->id, name, c->dst_port, fd, slot);
}

/* A request sent on a pooled upstream that the server had closed meanwhile (its end, a
 * reset or a failed write before any byte of an answer) never reached the server: a request
 * without a body, of a method that may be repeated, is sent once more on a new connection
 * to the same checked address, as a client would. True when that is under way (or the
 * exchange was answered). */
static bool http__resend(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (!h->up_pooled || h->up_resent || !h->req_done || h->resp_in_head || h->resp_started ||
        h->up_len || !http__resendable(h))
        return false;
    h->up_resent = true;
    h->up_pooled = false;
    h->up_reusable = false;
    egress_conn_drop_upstream(c);
    al_buf_reset(&h->to_up);
    llhttp_init(&h->resp, HTTP_RESPONSE, http__resp_settings());
    h->resp.data = h;
    if (egress_http_serialize_request(&h->reqh, &h->r, true, &h->to_up) < 0) {
        h->status = 500;
        http__audit_fail(c, "serialize_failed");
        egress_http_answer(c, 500, "proxy_error", NULL, "serialize_failed", true);
        return true;
    }
    h->up_redial = true;
    int rc = egress_conn_connect(c);
    if (rc < 0)
        egress_http_on_connected(c, rc);
    return true;
}

static void http__on_dst_checked(struct egress_conn *c, bool ok, const char *reason)
{
    struct egress_http *h = c->http;
    c->state = CONN_HTTP;
    if (!ok) {
        http__deny(c, 403, "blocked_by_policy", c->verdict.rule, reason);
        return;
    }
    h->decision = h->would_deny ? "would_deny" : "allow";
    egress_conn_set_dialled(c, &c->dst);
    if (http__take_pooled(c)) {
        egress_http_on_connected(c, 0);
        return;
    }
    int rc = egress_conn_connect(c);
    if (rc < 0)
        egress_http_on_connected(c, rc);
}

void egress_http_on_connected(struct egress_conn *c, int status)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    c->state = CONN_HTTP;
    if (status < 0) {
        atomic_fetch_add(&e->stats.upstream_errors, 1);
        const char *why =
            status == -ETIMEDOUT ? "upstream_connect_timeout" : "upstream_connect_failed";
        h->status = status == -ETIMEDOUT ? 504 : 502;
        atomic_fetch_add(&e->stats.http_requests, 1);
        http__audit_fail(c, why);
        egress_http_answer(c, h->status, status == -ETIMEDOUT ? "gateway_timeout" : "bad_gateway",
                           c->verdict.rule, why, true);
        return;
    }
    if (!c->allowed) {
        c->allowed = true;
        atomic_fetch_add(&e->stats.conns_allowed, 1);
    }
    if (h->up_redial) {
        /* http__resend: the request (already through the parser) waits in to_up. */
        h->up_redial = false;
        h->t_sent = al_now_ns();
        egress_conn_deadline(c, e->cfg.body_timeout_ms);
        http__process(c);
        return;
    }
    http__send_head(c);
}

static void http__send_head(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (c->sb)
        atomic_fetch_add(&c->sb->n_allowed, 1);
    atomic_fetch_add(&c->w->e->stats.http_requests, 1);
    h->up_reusable = false;
    if (egress_http_serialize_request(&h->reqh, &h->r, true, &h->to_up) < 0) {
        egress_http_answer(c, 500, "proxy_error", NULL, "serialize_failed", true);
        return;
    }
    /* Fresh response parser for this exchange. */
    llhttp_init(&h->resp, HTTP_RESPONSE, http__resp_settings());
    h->resp.data = h;
    h->t_first_resp = 0;
    h->phase = H_BODY;
    llhttp_resume(&h->req); /* continue with the body (if any) */
    h->req_kick = true;
    egress_conn_deadline(c, c->w->e->cfg.body_timeout_ms);
    h->t_body_io = al_now_ns();
    http__process(c);
}

/* ---- the response side -------------------------------------------------------------- */

/* Whether the client has sent nothing after its request, by now: nothing waiting in its
 * socket, or its end of stream. Bytes found are discarded as a lingering close would. */
static bool http__client_sent_nothing_more(struct egress_conn *c)
{
    char junk[512];
    ssize_t n;
    do
        n = recv(c->client.fd, junk, sizeof junk, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        c->http->discarded += (size_t)n;
        return false;
    }
    if (n == 0)
        c->client.eof = true;
    return true; /* EAGAIN, its end, or a reset (closing is all that is left) */
}

static void http__response_complete(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    http__audit_request(c, h->would_deny ? "would_deny" : "allow", c->verdict.rule,
                        c->verdict.reason, NULL);
    /* The upstream connection serves the client's as long as that lasts, then goes to the
     * pool (egress_http_pool_upstream): when either side will not keep its connection (or the
     * upstream sent bytes after its response, a protocol error), the client connection
     * closes after this response. */
    bool up_keep = llhttp_should_keep_alive(&h->resp) && !c->upstream.eof && h->up_len == h->up_off;
    bool keep = h->r.keep_alive && !c->client.eof && up_keep;
    if (!keep)
        h->close_after = true;
    h->up_reusable = up_keep;
    h->phase = H_IDLE;
    h->req_done = false;
    egress_http_head_reset(&h->reqh);
    al_http_head_scan_init(&h->req_scan, true, 0);
    if (h->close_after) {
        if (!h->r.keep_alive && c->in_len == h->in_off && http__client_sent_nothing_more(c)) {
            /* The client said this was its last request and nothing followed it: no byte a
             * reset could lose, so the connection closes now, as a server's does, rather than
             * lingering for the client's end (an epoll_ctl on each side and a wake-up). */
            egress_conn_close(c, false, "answered");
            return;
        }
        h->draining = true;
        c->state = CONN_DRAIN;
        egress_conn_deadline(c, DRAIN_MS);
        return;
    }
    llhttp_resume(&h->req); /* the next request may already be buffered */
    h->req_kick = true;
    egress_conn_deadline(c, c->w->e->cfg.keepalive_timeout_ms);
}

/* Feeds unparsed upstream bytes to the response parser, forwarding them. */
static int http__parse_response(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    while ((h->up_off < h->up_len || h->resp_kick) && !h->resp_done && !h->upgrade) {
        h->resp_kick = false;
        const char *data = h->upbuf + h->up_off;
        size_t len = h->up_len - h->up_off;
        llhttp_errno_t err = llhttp_execute(&h->resp, data, len);
        size_t used = len;
        if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)
            used = (size_t)(llhttp_get_error_pos(&h->resp) - data);
        else if (err != HPE_OK)
            return -1;
        /* Forward (or hold, while in a head) the bytes consumed. */
        int scan = 0;
        if (h->resp_in_head) {
            size_t sused;
            if ((scan = al_http_head_scan(&h->resp_scan, data, used, &sused)) < 0)
                return -1;
            if (scan == 1 && sused != used)
                return -1;
        } else if (used) {
            if (al_buf_append(&h->to_client, data, used) < 0)
                return -1;
            h->resp_bytes += used;
        }
        h->up_off += used;
        if (err == HPE_PAUSED && h->resp_in_head) {
            /* Head complete, and the scanner agrees: release it to the client. */
            if (scan != 1)
                return -1;
            h->resp_in_head = false;
            /* Re-serialised without what a relay leaves behind (common/http_head.h). */
            int st = llhttp_get_status_code(&h->resp);
            bool close =
                st >= 200 && st != 101 &&
                (h->close_after || !h->r.keep_alive || !llhttp_should_keep_alive(&h->resp));
            size_t before = h->to_client.len;
            if (egress_http_serialize_response(&h->resph, &h->resp, close, h->r.http_minor == 0,
                                               &h->to_client) < 0)
                return -1;
            h->resp_bytes += h->to_client.len - before;
            h->resp_started = true;
            llhttp_resume(&h->resp);
            h->resp_kick = true; /* a message without body completes on an empty call */
            continue;
        }
        if (err == HPE_PAUSED_UPGRADE) {
            h->upgrade = true;
            break;
        }
        if (err == HPE_PAUSED)
            break; /* resp_done */
    }
    h->resp_kick = false;
    if (h->up_off == h->up_len)
        h->up_off = h->up_len = 0;
    return 0;
}

static void http__to_tunnel(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    /* WebSocket accepted: audit the request, then relay raw bytes both ways. Bytes the
     * client sent after its request and bytes the upstream sent after its 101 are the
     * first of each direction. */
    http__audit_request(c, h->would_deny ? "would_deny" : "allow", c->verdict.rule,
                        c->verdict.reason, NULL);
    size_t cl = c->in_len - h->in_off, ul = h->up_len - h->up_off;
    egress_relay_init(c);
    /* to_client holds the 101 head (and maybe frames): it goes first. */
    if (al_relay_prime(&c->relay, 0, c->in + h->in_off, cl) < 0 ||
        al_relay_prime(&c->relay, 1, h->to_client.data, h->to_client.len) < 0 ||
        al_relay_prime(&c->relay, 1, h->upbuf + h->up_off, ul) < 0) {
        egress_conn_close(c, true, "out_of_memory");
        return;
    }
    egress_http_free(c);
    c->allowed = true;
    c->end_reason = NULL;
    c->state = CONN_RELAY;
    egress_relay_start(c);
}

static void http__read_upstream(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    if (!h->upbuf) {
        if (!egress_mem_take(e, c->sb, UP_READ) || !(h->upbuf = malloc(UP_READ))) {
            if (!h->upbuf)
                egress_mem_give(e, c->sb, UP_READ);
            atomic_fetch_add(&e->stats.limit_memory, 1);
            h->status = 503;
            http__audit_fail(c, "memory_budget");
            egress_http_answer(c, 503, "proxy_overloaded", NULL, "memory_budget", true);
            return;
        }
        h->up_len = h->up_off = 0;
    }
    if (h->phase == H_IDLE)
        h->up_reusable = false; /* its end, or bytes nobody asked for */
    while (h->to_client.len < QUEUE_HIGH && !h->resp_done && !h->upgrade) {
        if (h->up_len == UP_READ)
            break;
        ssize_t n = recv(c->upstream.fd, h->upbuf + h->up_len, UP_READ - h->up_len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            c->upstream.eof = true;
            egress_conn_set_events(&c->upstream, 0);
            if (h->phase == H_IDLE) {
                /* The server closed an idle keep-alive connection: so do we (the client
                 * opens a new connection, which is decided and dialled afresh). */
                egress_conn_close(c, false, "upstream_closed_idle");
                return;
            }
            if (http__resend(c))
                return;
            /* A body delimited by the end of the connection ends here; before any final
             * response head, the end is no answer at all (a fresh parser would call it a
             * complete empty one). */
            if (n == 0 && h->status && !h->resp_in_head && llhttp_message_needs_eof(&h->resp)) {
                if (llhttp_finish(&h->resp) == HPE_OK || h->resp_done) {
                    h->resp_done = true;
                    h->close_after = true;
                    return;
                }
            }
            if (!h->resp_started) {
                h->status = 502;
                http__audit_fail(c, "upstream_closed_before_response");
                egress_http_answer(c, 502, "bad_gateway", c->verdict.rule,
                                   "upstream_closed_before_response", true);
            } else {
                http__audit_fail(c, "upstream_closed_mid_response");
                egress_conn_close(c, true, "upstream_closed_mid_response");
            }
            return;
        }
        c->t_last_io = al_now_ns();
        h->up_len += (size_t)n;
        if (http__parse_response(c) < 0) {
            atomic_fetch_add(&e->stats.upstream_errors, 1);
            const char *why = llhttp_get_error_reason(&h->resp);
            if (!h->resp_started) {
                h->status = 502;
                http__audit_fail(c, "malformed_response");
                egress_http_answer(c, 502, "bad_gateway", c->verdict.rule, "malformed_response",
                                   true);
            } else {
                http__audit_fail(c, "malformed_response");
                egress_conn_close(c, true, "malformed_response");
            }
            (void)why;
            return;
        }
        if (h->up_len == UP_READ && h->up_off == 0 && h->resp_in_head)
            break; /* waiting for the client to take bytes is not possible in a head */
    }
}

/* ---- the driver --------------------------------------------------------------------- */

/* Parses what the client sent, as far as the current phase allows. */
static void http__parse_client(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    while ((h->in_off < c->in_len || h->req_kick) && c->state == CONN_HTTP &&
           (h->phase == H_IDLE || h->phase == H_HEAD || (h->phase == H_BODY && !h->req_done)) &&
           h->to_up.len < QUEUE_HIGH) {
        h->req_kick = false;
        const char *data = c->in ? (const char *)c->in + h->in_off : "";
        size_t len = c->in_len - h->in_off;
        if (h->phase == H_BODY && len > CLIENT_READ)
            len = CLIENT_READ;
        bool in_head = h->phase == H_IDLE || h->phase == H_HEAD;
        llhttp_errno_t err = llhttp_execute(&h->req, data, len);
        size_t used = len;
        if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)
            used = (size_t)(llhttp_get_error_pos(&h->req) - data);
        int scan = 0;
        if (in_head && (err == HPE_OK || err == HPE_PAUSED)) {
            /* What llhttp accepted of the head goes through the scanner too. */
            size_t sused;
            scan = al_http_head_scan(&h->req_scan, data, used, &sused);
            if (scan == 1 && (err != HPE_PAUSED || h->phase != H_HEAD || sused != used))
                scan = -EBADMSG; /* the two disagree on where the head ends */
            if (scan < 0) {
                h->in_off += used;
                const char *why = al_http_head_scan_reason(&h->req_scan);
                http__deny(c, 400, "bad_request", NULL, why ? why : "malformed_request");
                return;
            }
        }
        h->in_off += used;
        if (err == HPE_OK)
            continue;
        if (err == HPE_PAUSED && h->phase == H_HEAD) {
            if (scan != 1) {
                http__deny(c, 400, "bad_request", NULL, "malformed_request");
                return;
            }
            http__on_head(c);
            return;
        }
        if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
            /* Message complete (H_WAIT): the rest waits for the response. */
            return;
        }
        /* A malformed request: 400 (or 413/431), audited, connection closed. */
        int status;
        const char *reason = egress_http_request_error(&h->req, &h->reqh, &status);
        if (h->phase == H_BODY || h->phase == H_WAIT) {
            /* Part of this request already went upstream: the exchange is broken. */
            h->status = status;
            http__audit_fail(c, reason);
            egress_http_answer(c, status, status == 413 ? "payload_too_large" : "bad_request",
                               c->verdict.rule, reason, true);
            return;
        }
        if (!h->rid[0])
            egress_new_request_id(c->w->e, h->rid);
        http__deny(c, status,
                   status == 413   ? "payload_too_large"
                   : status == 431 ? "request_header_too_large"
                   : status == 403 ? "blocked_by_policy"
                                   : "bad_request",
                   NULL, reason);
        return;
    }
    h->req_kick = false;
    if (h->in_off == c->in_len)
        h->in_off = c->in_len = 0; /* all parsed: reuse the buffer from the start */
}

static int http__read_client(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    if (h->in_off < c->in_len) {
        if (h->phase != H_WAIT)
            return 0; /* unparsed bytes first */
        /* Waiting for a response: buffer what comes (a pipelined request) behind what is
         * already there; it is parsed once this exchange is over. */
        if (h->in_off) {
            memmove(c->in, c->in + h->in_off, c->in_len - h->in_off);
            c->in_len -= h->in_off;
            h->in_off = 0;
        }
        if (c->in_len == c->in_cap)
            return 0;
        ssize_t n;
        do
            n = recv(c->client.fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return n == 0 ? -EPIPE : -ECONNRESET;
        c->in_len += (size_t)n;
        c->t_last_io = al_now_ns();
        return 1;
    }
    h->in_off = c->in_len = 0;
    if (c->in_cap < CLIENT_READ) {
        size_t want = CLIENT_READ;
        if (!egress_mem_take(e, c->sb, want - c->in_cap))
            return -ENOBUFS;
        uint8_t *n = realloc(c->in, want);
        if (!n) {
            egress_mem_give(e, c->sb, want - c->in_cap);
            return -ENOMEM;
        }
        c->in = n;
        c->in_cap = want;
    }
    ssize_t n;
    do
        n = recv(c->client.fd, c->in, c->in_cap, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return 0;
    if (n <= 0)
        return n == 0 ? -EPIPE : -ECONNRESET;
    c->in_len = (size_t)n;
    c->t_last_io = al_now_ns();
    if (h->phase == H_BODY)
        h->t_body_io = c->t_last_io;
    return 1;
}

/* Releases the client buffer while idle between requests (memory per idle connection). */
static void http__maybe_release(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (h->phase == H_IDLE && c->in_len == 0 && c->in) {
        egress_mem_give(c->w->e, c->sb, c->in_cap);
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    if (h->upbuf && h->up_len == 0 && h->phase == H_IDLE) {
        egress_mem_give(c->w->e, c->sb, UP_READ);
        free(h->upbuf);
        h->upbuf = NULL;
    }
    if (h->phase == H_IDLE && h->reqh.buf) {
        egress_http_head_free(&h->reqh);
        egress_http_head_free(&h->resph);
    }
}

static void http__process(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    if (c->state != CONN_HTTP)
        return;
    http__parse_client(c);
    if (c->state != CONN_HTTP)
        return;
    if (c->upstream.fd >= 0 && h->to_up.len &&
        http__send(c->upstream.fd, &h->to_up, &c->t_last_io) < 0) {
        if (http__resend(c))
            return;
        http__audit_fail(c, "upstream_write_failed");
        egress_http_answer(c, 502, "bad_gateway", c->verdict.rule, "upstream_write_failed", true);
        return;
    }
    if (h->to_client.len)
        http__flush_client(c);
    if (c->state != CONN_HTTP)
        return;
    if (h->resp_done && h->req_done && h->to_client.len == 0) {
        h->resp_done = false;
        http__response_complete(c);
        if (c->state == CONN_HTTP) {
            http__process(c); /* a pipelined request may be waiting */
            return;
        }
    } else if (h->resp_done && !h->req_done && h->to_client.len == 0) {
        /* The upstream answered before the request body was complete (e.g. 413): stop
         * here; the rest of the body cannot be trusted to resynchronise. */
        h->resp_done = false;
        h->close_after = true;
        http__audit_fail(c, "early_response");
        h->draining = true;
        c->state = CONN_DRAIN;
        egress_conn_deadline(c, DRAIN_MS);
    } else if (h->upgrade && h->to_client.len == 0) {
        http__to_tunnel(c);
        return;
    }
    if (c->state == CONN_HTTP)
        http__maybe_release(c);
    http__update_events(c);
}

void egress_http_on_event(struct egress_conn *c, struct egress_end *end, int events)
{
    struct egress_http *h = c->http;
    if (!h)
        return;
    if (c->state == CONN_DRAIN) {
        if (end == &c->client) {
            if (events & UV_WRITABLE)
                http__flush_client(c);
            if (c->state != CONN_DRAIN)
                return;
            if (events & UV_READABLE) {
                char junk[4096];
                ssize_t n = recv(c->client.fd, junk, sizeof junk, 0);
                if (n > 0)
                    h->discarded += (size_t)n;
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) ||
                    h->discarded > DRAIN_DISCARD) {
                    c->client.eof = true;
                    if (h->to_client.len == 0) {
                        egress_conn_close(c, n != 0, "answered");
                        return;
                    }
                }
            }
            if (c->client.shut_wr && c->client.eof) {
                egress_conn_close(c, false, "answered");
                return;
            }
        }
        if (c->state == CONN_DRAIN && h->to_client.len == 0 && !c->client.shut_wr)
            http__flush_client(c);
        if (c->state == CONN_DRAIN)
            http__update_events(c);
        return;
    }
    if (end == &c->client) {
        if (events & UV_WRITABLE)
            http__flush_client(c);
        if (c->state != CONN_HTTP)
            return;
        if (events & UV_READABLE) {
            int rc = http__read_client(c);
            if (rc == -ENOBUFS || rc == -ENOMEM) {
                atomic_fetch_add(&c->w->e->stats.limit_memory, 1);
                if (!h->rid[0])
                    egress_new_request_id(c->w->e, h->rid);
                if (h->decision)
                    http__audit_fail(c, "memory_budget");
                else
                    http__audit_request(c, "deny", NULL, "memory_budget", NULL);
                egress_http_answer(c, 503, "proxy_overloaded", NULL, "memory_budget", true);
                return;
            }
            if (rc < 0) {
                c->client.eof = true;
                if (h->phase == H_IDLE || (h->phase == H_HEAD && h->reqh.len == 0)) {
                    egress_conn_close(c, false, "client_closed");
                    return;
                }
                if (h->phase == H_WAIT && rc == -EPIPE) {
                    /* Half-close after a complete request: let the response come. */
                    egress_conn_set_events(&c->client, c->client.events & ~UV_READABLE);
                } else {
                    if (h->decision)
                        http__audit_fail(c, "client_closed");
                    egress_conn_close(c, true, "client_closed");
                    return;
                }
            }
        }
    } else {
        if (events & UV_WRITABLE && h->to_up.len &&
            http__send(c->upstream.fd, &h->to_up, &c->t_last_io) < 0) {
            if (http__resend(c))
                return;
            http__audit_fail(c, "upstream_write_failed");
            egress_http_answer(c, 502, "bad_gateway", c->verdict.rule, "upstream_write_failed",
                               true);
            return;
        }
        if (events & UV_READABLE)
            http__read_upstream(c);
        if (c->state != CONN_HTTP)
            return;
    }
    http__process(c);
}

void egress_http_on_timeout(struct egress_conn *c)
{
    struct egress_http *h = c->http;
    struct egress *e = c->w->e;
    if (!h) {
        /* Timed out while still peeking at what looked like HTTP. */
        if (egress_http_start(c) < 0 || !c->http) {
            egress_conn_close(c, true, "request_timeout");
            return;
        }
        h = c->http;
        if (c->state != CONN_HTTP)
            return;
    }
    if (c->state == CONN_DRAIN) {
        egress_conn_close(c, true, "drain_timeout");
        return;
    }
    atomic_fetch_add(&e->stats.timeouts, 1);
    uint64_t now = al_now_ns();
    switch (h->phase) {
    case H_IDLE:
        egress_conn_close(c, false, "keepalive_timeout");
        break;
    case H_HEAD:
        if (!h->rid[0])
            egress_new_request_id(e, h->rid);
        http__deny(c, 408, "request_timeout", NULL, "request_head_timeout");
        break;
    case H_BODY: {
        /* Who is slow? With body bytes queued for the upstream, the proxy waits for the
         * upstream (response deadline, 504); otherwise for the client (body gap, 408). */
        bool upstream_slow = h->to_up.len > 0;
        uint64_t gap =
            (uint64_t)(upstream_slow ? e->cfg.response_timeout_ms : e->cfg.body_timeout_ms) *
            1000000ull;
        uint64_t last = upstream_slow ? c->t_last_io
                                      : (h->t_body_io > c->t_last_io ? h->t_body_io : c->t_last_io);
        if (now - last < gap && !h->req_done) {
            egress_conn_deadline(c, (uint32_t)((gap - (now - last)) / 1000000ull) + 1);
            return;
        }
        /* The loop runs due timers before it polls: after a stall of the proxy itself (a
         * busy machine), body bytes can be waiting unread in the socket or in our buffer.
         * A client whose bytes are here is not slow: count them as its activity. */
        char peek;
        if (!h->req_done && !upstream_slow &&
            (h->in_off < c->in_len || recv(c->client.fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) > 0)) {
            h->t_body_io = now;
            egress_conn_deadline(c, e->cfg.body_timeout_ms);
            http__process(c); /* parses what is buffered, re-arms the interest */
            return;
        }
        if (!h->req_done && upstream_slow) {
            h->status = 504;
            http__audit_fail(c, "upstream_stalled");
            egress_http_answer(c, 504, "gateway_timeout", c->verdict.rule, "upstream_stalled",
                               true);
            return;
        }
        if (!h->req_done) {
            h->status = 408;
            http__audit_fail(c, "request_body_timeout");
            egress_http_answer(c, 408, "request_timeout", c->verdict.rule, "request_body_timeout",
                               true);
            return;
        }
        /* fallthrough: the body is complete, waiting for the response */
    }
    /* fallthrough */
    case H_WAIT: {
        uint64_t limit =
            (uint64_t)(h->resp_started ? e->cfg.idle_timeout_ms : e->cfg.response_timeout_ms) *
            1000000ull;
        uint64_t since = h->resp_started ? (c->t_last_io ? c->t_last_io : h->t_sent) : h->t_sent;
        if (since && now - since < limit) {
            egress_conn_deadline(c, (uint32_t)((limit - (now - since)) / 1000000ull) + 1);
            return;
        }
        if (!h->resp_started) {
            h->status = 504;
            http__audit_fail(c, "upstream_response_timeout");
            egress_http_answer(c, 504, "gateway_timeout", c->verdict.rule,
                               "upstream_response_timeout", true);
        } else {
            http__audit_fail(c, "upstream_idle_timeout");
            egress_conn_close(c, true, "upstream_idle_timeout");
        }
        break;
    }
    case H_DECIDE:
        egress_conn_close(c, true, "decide_timeout");
        break;
    }
}
