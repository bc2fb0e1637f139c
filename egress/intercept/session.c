/* egress/intercept/session: the intercepted connection engine (see session.h).
 *
 * Shape: one state per connection, and one driver (sess__run) that, after every event,
 * moves bytes and makes whatever progress the state allows until nothing changes, then
 * tells the proxy what to watch. Plaintext queues toward each side are bounded (QUEUE_HIGH):
 * a side is not read while the queue toward the other is full. After a 101 the connection
 * is a tunnel: the plaintext of both TLS sessions goes through common/relay, whose events
 * and deadline the session passes on.
 */
#include "session.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/ssl.h>

#include "common/buf.h"
#include "common/http.h"
#include "common/http_head.h"
#include "common/http_parser.h"
#include "common/relay.h"
#include "common/util.h"
#include "egress/audit.h"
#include "egress/http.h"
#include "egress/intercept/request.h"

#define QUEUE_HIGH      (256 * 1024)
#define READ_CHUNK      (16 * 1024)
#define RESP_HEAD_MAX   (64 * 1024)
#define CLOSE_MS        2000
#define MAX_USED        8
#define TUNNEL_FLUSH_MS 20 /* a tunnel's held-back bytes go after this much quiet */

enum sess_state {
    S_HANDSHAKE = 1, /* TLS with the sandbox */
    S_IDLE,          /* between requests */
    S_HEAD,          /* a request head is arriving */
    S_FETCH,         /* waiting for the vault */
    S_CONNECT,       /* TCP to the upstream */
    S_UP_HS,         /* TLS with the upstream */
    S_FORWARD,       /* request sent (body streaming), response arriving */
    S_TUNNEL,        /* after 101: bytes both ways */
    S_CLOSING,       /* our last bytes are going out */
    S_DONE,
};

/* One end of the tunnel as common/relay sees it. */
struct sess_tun_end {
    struct intercept_tls *t;
    bool shut; /* its close_notify was sent */
};

struct sess_fetch {
    struct intercept_fetch req; /* first: the callback casts */
    struct intercept_session *s;
    size_t idx;
    bool pending;
};

struct intercept_session {
    const struct intercept_host_ops *ops;
    void *ctx;
    struct intercept_tls_server *srv;
    struct intercept_tls_client *cli;
    struct intercept_pool *pool;
    struct intercept_fetcher *fetcher;
    struct intercept_placeholders *ph;
    struct intercept_session_limits lim;
    char sandbox[128];
    char name[POLICY_NAME_MAX + 1];
    bool plain;
    uint16_t port;
    struct policy_addr dst;
    char pool_key[INTERCEPT_POOL_KEY_MAX];

    enum sess_state st;
    bool done_called;
    const char *end_why;
    char end_detail[320];
    char fail_detail[320]; /* the explanation of a failed request's error code (audit) */

    /* The sandbox side. */
    int cfd;
    struct intercept_tls *ctls;
    bool c_eof;
    struct al_buf cin; /* plaintext received, not yet consumed */
    size_t cin_off;
    struct al_buf cq; /* plaintext toward the sandbox */
    size_t cq_off;
    bool close_after; /* close once cq is flushed */

    /* The upstream side. */
    int ufd;
    struct intercept_tls *utls;
    bool u_eof;
    bool u_pooled;    /* this connection came from the pool */
    bool u_reusable;  /* idle and clean: may go back to the pool */
    bool u_tls12;     /* retried as TLS 1.2 already */
    struct al_buf uq; /* plaintext toward the upstream */
    size_t uq_off;
    struct al_buf rin; /* plaintext from the upstream, unparsed */
    size_t rin_off;

    /* The current request. */
    llhttp_t req;
    llhttp_t resp;
    struct al_http_head_scan hscan; /* the request head arriving (common/http_head.h) */
    size_t hscanned;                /* bytes of cin after cin_off it has seen */
    struct egress_http_head reqh;   /* the request head, collected (egress/http.h) */
    struct egress_http_request r;   /* ... as egress_http_check_request read it */
    struct al_http_field hdrs[EGRESS_HTTP_MAX_HEADERS]; /* reqh's fields (injection, serialiser) */
    size_t n_hdrs;
    const char *url_at; /* the request-target as sent (in reqh) */
    size_t url_len;
    char method[24];
    int http_minor;
    struct intercept_req_info info;
    struct policy_decision d;
    char rid[32];
    char path_log[512];
    bool req_chunked, req_done, req_close, expect_continue;
    uint64_t req_body, max_body;
    struct intercept_inject_edit edit;
    bool edit_live;
    struct sess_fetch fetch[INTERCEPT_INJECT_MAX];
    struct intercept_secret *fetched[INTERCEPT_INJECT_MAX];
    size_t n_fetch, fetch_left;
    const char *fetch_fail;
    struct intercept_scrub ph_scan; /* placeholders in the request body */
    bool ph_scan_live;
    struct al_buf saved_head; /* what was sent upstream (a retry on a dead pooled connection) */
    bool retried;

    /* The response. */
    struct al_http_head_scan rscan; /* the response head arriving */
    size_t rscanned;                /* bytes of rin after rin_off it has seen */
    struct egress_http_head resph;  /* the response head, collected (egress/http.h) */
    struct al_http_field rhdrs[EGRESS_HTTP_MAX_HEADERS]; /* resph's fields */
    size_t n_rhdrs;
    bool resp_in_head, resp_started, resp_done, resp_chunked_out, resp_close_delim, resp_skip;
    int status;
    bool ws_allowed, upgraded;
    struct intercept_body body;
    bool body_live;
    struct intercept_codings codings; /* of the current response's body */
    const char *scrub_refused;        /* why its body was refused (audit), or NULL */
    struct intercept_scrub tscrub;    /* upstream -> sandbox after a 101 */
    bool tscrub_live;

    uint64_t resp_bytes;

    /* Secrets injected on this connection: every response is scrubbed of them. */
    struct intercept_secret *used[MAX_USED];
    size_t n_used;
    enum policy_scrub scrub_mode;

    /* Timing (monotonic ns). */
    uint64_t t_start, t_decided, t_fetch0, t_fetched, t_connect0, t_connected, t_sent, t_first_resp;
    uint64_t t_up_tcp;       /* upstream TCP connected (its TLS handshake follows) */
    uint64_t t_chs0, t_chs1; /* the sandbox's TLS handshake (once per connection) */
    bool chs_recorded;       /* ... written in the first request's record */
    uint64_t bytes_up, bytes_down;
    struct intercept_session_stats stats;
    bool audit_failed;

    /* The tunnel after a 101 (last: the request path's fields stay together): end 0 the
     * sandbox, end 1 the upstream. */
    struct al_relay tun;
    bool tun_live;
    struct sess_tun_end tend[2];
    struct al_relay_filter tfilter; /* tscrub, on upstream -> sandbox */
    uint64_t tun_skip[2];           /* primed bytes counted before the tunnel */
};

static void sess__run(struct intercept_session *s);
static void sess__tunnel_run(struct intercept_session *s, int end, int events);
static void sess__tunnel_start(struct intercept_session *s);
static int req__on_headers_complete(llhttp_t *p);
static int req__on_body(llhttp_t *p, const char *at, size_t n);
static int req__on_complete(llhttp_t *p);
static int req__on_url(llhttp_t *p, const char *at, size_t n);
static int req__on_field(llhttp_t *p, const char *at, size_t n);
static int req__on_value(llhttp_t *p, const char *at, size_t n);
static int resp__on_field(llhttp_t *p, const char *at, size_t n);
static int resp__on_value(llhttp_t *p, const char *at, size_t n);
static int resp__on_status(llhttp_t *p, const char *at, size_t n);
static int resp__on_headers_complete(llhttp_t *p);
static int resp__on_body(llhttp_t *p, const char *at, size_t n);
static int resp__on_complete(llhttp_t *p);

static const llhttp_settings_t req_settings = {
    .on_url = req__on_url,
    .on_header_field = req__on_field,
    .on_header_value = req__on_value,
    .on_headers_complete = req__on_headers_complete,
    .on_body = req__on_body,
    .on_message_complete = req__on_complete,
};

static const llhttp_settings_t resp_settings = {
    .on_status = resp__on_status,
    .on_header_field = resp__on_field,
    .on_header_value = resp__on_value,
    .on_headers_complete = resp__on_headers_complete,
    .on_body = resp__on_body,
    .on_message_complete = resp__on_complete,
};

/* ---- small helpers ------------------------------------------------------------------------ */

static uint32_t lim_or(uint32_t v, uint32_t d)
{
    return v ? v : d;
}

static size_t q_len(const struct al_buf *b, size_t off)
{
    return b->len - off;
}

static void q_compact(struct al_buf *b, size_t *off)
{
    if (*off == b->len) {
        al_buf_reset(b);
        *off = 0;
    } else if (*off > 65536 && *off * 2 > b->len) {
        al_buf_consume(b, *off);
        *off = 0;
    }
}

static void sess__tunnel_stop(struct intercept_session *s);

static void sess__finish(struct intercept_session *s, const char *why, const char *detail)
{
    sess__tunnel_stop(s);
    if (s->done_called)
        return;
    s->done_called = true;
    s->st = S_DONE;
    if (!s->end_why)
        s->end_why = why;
    if (detail && !s->end_detail[0])
        snprintf(s->end_detail, sizeof s->end_detail, "%s", detail);
    s->ops->deadline(s->ctx, 0);
    s->ops->watch(s->ctx, INTERCEPT_END_CLIENT, s->cfd, 0);
    s->ops->watch(s->ctx, INTERCEPT_END_UPSTREAM, -1, 0);
    s->ops->done(s->ctx, s->end_why, s->end_detail);
}

static void sess__close_upstream(struct intercept_session *s)
{
    sess__tunnel_stop(s); /* it uses the upstream's TLS */
    if (s->ufd >= 0) {
        s->ops->watch(s->ctx, INTERCEPT_END_UPSTREAM, -1, 0);
        intercept_tls_free(s->utls);
        s->utls = NULL;
        close(s->ufd);
        s->ufd = -1;
    }
    s->u_eof = false;
    s->u_reusable = false;
    al_buf_reset(&s->uq);
    s->uq_off = 0;
    al_buf_reset(&s->rin);
    s->rin_off = 0;
}

static void sess__release_request(struct intercept_session *s)
{
    if (s->edit_live) {
        intercept_inject_edit_free(&s->edit);
        s->edit_live = false;
    }
    for (size_t i = 0; i < s->n_fetch; i++) {
        if (s->fetch[i].pending) {
            intercept_fetch_cancel(&s->fetch[i].req);
            s->fetch[i].pending = false;
        }
        intercept_secret_unref(s->fetched[i]);
        s->fetched[i] = NULL;
    }
    s->n_fetch = s->fetch_left = 0;
    if (s->ph_scan_live) {
        intercept_scrub_free(&s->ph_scan);
        s->ph_scan_live = false;
    }
    if (s->body_live) {
        intercept_body_free(&s->body);
        s->body_live = false;
    }
    al_buf_free_wipe(&s->saved_head);
    al_buf_init(&s->saved_head, 0);
}

/* ---- audit ----------------------------------------------------------------------------------- */

static void sess__audit(struct intercept_session *s, json_t *rec)
{
    if (!rec)
        return;
    if (!s->ops->audit(s->ctx, rec))
        s->audit_failed = true;
}

/* The interception's own members of a request's record (egress_http_rec's extra). */
static void sess__rec_extra(struct egress_recw *w, const void *arg)
{
    const struct intercept_session *s = arg;
    egress_recw_bool(w, "inspected", true);
    if (!s->plain)
        egress_recw_str(w, "sni", s->name);
    if (s->edit_live && s->edit.n_notes)
        intercept_inject_notes_write(&s->edit, w);
    if (s->body_live || s->n_used || s->scrub_refused) {
        egress_recw_obj_begin(w, "scrub");
        egress_recw_int(w, "secrets", (int64_t)s->n_used);
        if (s->scrub_refused) {
            egress_recw_str(w, "mode", "refused");
            egress_recw_str(w, "reason", s->scrub_refused);
        } else if (s->body_live) {
            egress_recw_str(w, "mode",
                            s->body.mode == INTERCEPT_BODY_DECODE  ? "decoded"
                            : s->body.mode == INTERCEPT_BODY_SCRUB ? "scrubbed"
                                                                   : "passed");
            if (s->body.not_inspected)
                egress_recw_bool(w, "not_inspected", true);
        }
        if (s->body_live || s->scrub_refused)
            intercept_codings_write(&s->codings, "codings", w);
        egress_recw_close(w, '}');
    }
    egress_recw_obj_begin(w, "tls");
    if (s->ctls)
        egress_recw_str(w, "sandbox", intercept_tls_version(s->ctls));
    if (s->utls && intercept_tls_handshake_done(s->utls))
        egress_recw_str(w, "upstream", intercept_tls_version(s->utls));
    egress_recw_close(w, '}');
}

static void sess__audit_request(struct intercept_session *s, const char *decision,
                                const char *reason, const char *error)
{
    bool up_tls = s->utls && intercept_tls_handshake_done(s->utls);
    /* tls_sandbox: the handshake with the sandbox (first request of the connection);
     * tls_upstream: a fresh upstream handshake (none when the connection was pooled), and
     * then connect is the TCP connect alone. */
    bool chs = !s->chs_recorded && s->t_chs1;
    bool up_hs = s->t_up_tcp && !s->plain && !s->u_pooled;
    struct egress_http_rec r = {
        .request_id = s->rid,
        .proto = s->plain ? "http" : "https",
        .decision = decision,
        .reason = reason,
        .rule = s->d.rule ? s->d.rule->name : NULL,
        .error = error,
        .error_detail = s->fail_detail,
        .method = s->method[0] ? s->method : NULL,
        .host = s->info.host.len ? s->info.host.text : NULL,
        .path = s->path_log,
        .status = s->status,
        .websocket = s->info.websocket,
        .upstream_reused = up_tls && s->u_pooled,
        .bytes_up = s->req_body,
        .bytes_down = s->resp_bytes,
        .decide = {s->t_start, s->t_decided},
        .vault = {s->t_fetch0, s->t_fetched},
        .tls_sandbox = {chs ? s->t_chs0 : 0, chs ? s->t_chs1 : 0},
        .connect = {s->t_connect0, up_hs ? s->t_up_tcp : s->t_connected},
        .tls_upstream = {up_hs ? s->t_up_tcp : 0, up_hs ? s->t_connected : 0},
        .upstream = {s->t_sent, s->t_first_resp},
        .t_start = s->t_start,
        .extra = sess__rec_extra,
        .extra_arg = s,
    };
    if (chs)
        s->chs_recorded = true;
    if (!s->ops->audit_request(s->ctx, &r))
        s->audit_failed = true;
}

static void sess__security_event(struct intercept_session *s, const char *event, json_t *extra)
{
    json_t *r = json_object();
    json_object_set_new(r, "type", json_string("security_event"));
    json_object_set_new(r, "event", json_string(event));
    json_object_set_new(r, "request_id", json_string(s->rid));
    json_object_set_new(r, "sni", json_string(s->name));
    json_object_set_new(r, "rule", s->d.rule ? json_string(s->d.rule->name) : json_null());
    if (extra)
        json_object_update(r, extra);
    json_decref(extra);
    sess__audit(s, r);
}

/* ---- answers of our own ------------------------------------------------------------------------ */

/* An error/deny answer, then close. error: "blocked_by_policy", "bad_gateway", ... The plain
 * path's answer (egress_http_error_response): the same JSON body and fields. */
static void sess__answer(struct intercept_session *s, int status, const char *error,
                         const char *reason)
{
    s->status = status;
    size_t at = s->cq.len;
    if (egress_http_error_response(&s->cq, status, error, s->d.rule ? s->d.rule->name : NULL,
                                   reason, s->rid, true) < 0)
        s->cq.len = at; /* nothing half-written: the close alone answers */
    s->close_after = true;
    s->st = S_CLOSING;
    sess__close_upstream(s);
    s->ops->deadline(s->ctx, CLOSE_MS);
}

/* Denied before any upstream byte: audit, answer. */
static void sess__deny(struct intercept_session *s, int status, const char *error,
                       const char *reason)
{
    if (!s->t_decided)
        s->t_decided = al_now_ns();
    s->status = status;
    s->stats.denied++;
    sess__audit_request(s, "deny", reason, NULL);
    sess__answer(s, status, error, reason);
}

/* An allowed request that failed afterwards. */
static void sess__fail(struct intercept_session *s, int status, const char *error, const char *why,
                       const char *detail)
{
    s->status = status;
    /* error: the code (upstream_certificate_invalid, ...), error_detail: what exactly. */
    snprintf(s->fail_detail, sizeof s->fail_detail, "%s",
             detail && strcmp(detail, why) ? detail : "");
    sess__audit_request(s, s->d.would_deny ? "would_deny" : "allow",
                        s->d.reason < POLICY_R__COUNT ? policy_reason_code(s->d.reason) : "", why);
    s->fail_detail[0] = '\0';
    if (!s->resp_started) {
        sess__answer(s, status, error, why);
    } else {
        /* Part of the response went out: it cannot be completed. */
        snprintf(s->end_detail, sizeof s->end_detail, "%s", detail ? detail : "");
        sess__close_upstream(s);
        if (s->ctls)
            intercept_tls_send_alert(s->ctls, MBEDTLS_SSL_ALERT_MSG_INTERNAL_ERROR);
        sess__finish(s, why, detail);
    }
}

void intercept_tls_raw_alert(int fd, unsigned char description)
{
    unsigned char rec[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description};
    ssize_t n = send(fd, rec, sizeof rec, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
}

/* ---- moving bytes ------------------------------------------------------------------------------- */

/* Writes queued plaintext through TLS; false on a fatal error (session finished). */
static bool sess__flush_tls(struct intercept_session *s, struct intercept_tls *t, struct al_buf *q,
                            size_t *off, bool client, bool *progress)
{
    if (!t)
        return true;
    while (q_len(q, *off)) {
        ssize_t n = intercept_tls_write(t, q->data + *off, q_len(q, *off));
        if (n == -EAGAIN)
            break;
        if (n < 0) {
            if (client) {
                sess__close_upstream(s);
                sess__finish(s, "sandbox_write_failed", intercept_tls_error(t));
            } else {
                sess__fail(s, 502, "bad_gateway", "upstream_write_failed", intercept_tls_error(t));
            }
            return false;
        }
        *off += (size_t)n;
        *progress = true;
    }
    if (intercept_tls_out_pending(t)) {
        int f = intercept_tls_flush(t);
        if (f < 0 && f != -EAGAIN) {
            if (client) {
                sess__close_upstream(s);
                sess__finish(s, "sandbox_write_failed", strerror(-f));
            } else {
                sess__fail(s, 502, "bad_gateway", "upstream_write_failed", strerror(-f));
            }
            return false;
        }
    }
    q_compact(q, off);
    return true;
}

/* Reads plaintext into b; returns bytes read, 0 nothing now, -1 EOF (clean or not), -2 error. */
static ssize_t sess__read_tls(struct intercept_tls *t, struct al_buf *b, size_t max)
{
    if (b->len >= max)
        return 0;
    size_t room = max - b->len < READ_CHUNK ? max - b->len : READ_CHUNK;
    if (al_buf_reserve(b, room + 1) < 0)
        return -2;
    ssize_t n = intercept_tls_read(t, b->data + b->len, room);
    if (n > 0) {
        b->len += (size_t)n;
        b->data[b->len] = 0;
        return n;
    }
    if (n == -EAGAIN)
        return 0;
    if (n == 0 || n == -EPIPE)
        return -1;
    return -2;
}

/* ---- the request side ----------------------------------------------------------------------------- */

static struct intercept_session *of_req(llhttp_t *p)
{
    return p->data;
}

static int req__on_url(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&of_req(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&of_req(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&of_req(p)->reqh, at, n) < 0 ? HPE_USER : 0;
}

static int req__on_headers_complete(llhttp_t *p)
{
    struct intercept_session *s = of_req(p);
    if (egress_http_head_finish(&s->reqh) < 0)
        return HPE_USER;
    /* The fields as injection and the serialiser read them. */
    s->n_hdrs = egress_http_head_fields(&s->reqh, s->hdrs);
    s->url_at = s->reqh.buf + s->reqh.url;
    s->url_len = s->reqh.url_len;
    return HPE_PAUSED;
}

static int req__on_body(llhttp_t *p, const char *at, size_t n)
{
    struct intercept_session *s = of_req(p);
    s->req_body += n;
    if (s->max_body && s->req_body > s->max_body) {
        llhttp_set_error_reason(p, "request_body_too_large");
        return HPE_USER;
    }
    const char *data = at;
    size_t len = n;
    struct al_buf scanned = AL_BUF_INIT;
    if (s->ph_scan_live) {
        /* Placeholders must not leave in a body: scan it (the scan's output is what goes). */
        uint64_t before = s->ph_scan.rep.matches;
        if (intercept_scrub_feed(&s->ph_scan, at, n, &scanned) < 0)
            return HPE_USER;
        if (s->ph_scan.rep.matches != before) {
            al_buf_free_wipe(&scanned);
            llhttp_set_error_reason(p, "placeholder_in_body");
            return HPE_USER;
        }
        data = scanned.data ? scanned.data : "";
        len = scanned.len;
    }
    int rc = egress_http_body_append(&s->uq, s->req_chunked, data, len);
    al_buf_free(&scanned);
    s->bytes_up += n;
    return rc ? HPE_USER : 0;
}

static int req__on_complete(llhttp_t *p)
{
    struct intercept_session *s = of_req(p);
    int rc = 0;
    if (s->ph_scan_live) {
        struct al_buf rest = AL_BUF_INIT;
        intercept_scrub_finish(&s->ph_scan, &rest);
        rc = egress_http_body_append(&s->uq, s->req_chunked, rest.data, rest.len);
        al_buf_free(&rest);
    }
    if (rc < 0 || egress_http_body_end(&s->uq, s->req_chunked) < 0)
        return HPE_USER; /* the body cannot be completed: the request fails */
    s->req_done = true;
    return HPE_PAUSED;
}

/* While secrets are in play: bodies the scrubber can read (identity), no ranges (a secret
 * echoed in pieces), no WebSocket extensions (permessage-deflate frames). */
static bool sess__scrubbing(const struct intercept_session *s)
{
    return s->n_used > 0 || (s->edit_live && s->edit.n_used > 0);
}

/* The session's fields of the head beside what the proxy's serialiser leaves behind: those
 * injection removes, Expect (100-continue is answered here), and while secrets are in play
 * what would hide them from the scrubber. */
static bool sess__drop_field(void *arg, const struct egress_http_head *h, uint32_t i)
{
    const struct intercept_session *s = arg;
    const struct al_http_field *f = &s->hdrs[i];
    (void)h; /* s->hdrs are h's fields, in order (egress_http_head_fields) */
    if ((s->edit_live && s->edit.drop[i]) || intercept_hdr_is(f, "Expect"))
        return true;
    return sess__scrubbing(s) &&
           (intercept_hdr_is(f, "Accept-Encoding") || intercept_hdr_is(f, "Range") ||
            intercept_hdr_is(f, "If-Range") || intercept_hdr_is(f, "Sec-WebSocket-Extensions"));
}

/* The injected fields, and Accept-Encoding: identity while secrets are in play. */
static int sess__add_fields(void *arg, struct al_buf *o)
{
    const struct intercept_session *s = arg;
    int rc = 0;
    for (size_t i = 0; s->edit_live && i < s->edit.n_add && rc == 0; i++) {
        if (!(rc = al_buf_appends(o, s->edit.add[i].name)) && !(rc = al_buf_append(o, ": ", 2)) &&
            !(rc = al_buf_append(o, s->edit.add[i].value, s->edit.add[i].len)))
            rc = al_buf_append(o, "\r\n", 2);
    }
    if (rc == 0 && sess__scrubbing(s))
        rc = al_buf_appends(o, "Accept-Encoding: identity\r\n");
    return rc;
}

/* Serialises the request head for the upstream into uq (and keeps a copy for a retry): the
 * proxy's serialiser (egress/http.h) with the session's edits, over a kept-alive HTTP/1.1
 * upstream connection. */
static int sess__serialize_request(struct intercept_session *s)
{
    struct al_buf *o = &s->uq;
    size_t start = o->len;
    const struct egress_http_serialize_opts so = {
        .keep_upstream = true,
        .http11 = true,
        .drop = sess__drop_field,
        .add = sess__add_fields,
        .arg = s,
    };
    int rc = egress_http_serialize_request_opts(&s->reqh, &s->r, &so, o);
    if (rc == 0) {
        al_buf_reset(&s->saved_head);
        rc = al_buf_append(&s->saved_head, o->data + start, o->len - start);
    }
    return rc;
}

static void sess__start_upstream(struct intercept_session *s);

/* The request is on its way: read the response, then the body (if any) follows. */
static void sess__begin_forward(struct intercept_session *s)
{
    s->t_sent = al_now_ns();
    s->st = S_FORWARD;
    s->resp_in_head = true;
    al_http_head_scan_init(&s->rscan, false, RESP_HEAD_MAX);
    s->rscanned = 0;
    s->resp_started = s->resp_done = false;
    llhttp_init(&s->resp, HTTP_RESPONSE, &resp_settings);
    s->resp.data = s;
    s->n_rhdrs = 0;
    egress_http_head_reset(&s->resph);
    s->ops->deadline(s->ctx, lim_or(s->lim.response_timeout_ms, 60000));
}

/* The request is decided, edited and ready: send its head, then the body follows. */
static void sess__send(struct intercept_session *s)
{
    if (sess__serialize_request(s) < 0) {
        sess__fail(s, 502, "bad_gateway", "proxy_error", "cannot serialise the request");
        return;
    }
    if (s->edit_live) {
        /* The added values are in uq and saved_head now: wipe the edit's copies early. */
        for (size_t i = 0; i < s->edit.n_add; i++)
            sodium_memzero(s->edit.add[i].value, s->edit.add[i].len);
    }
    if (s->expect_continue)
        al_buf_appends(&s->cq, "HTTP/1.1 100 Continue\r\n\r\n");
    sess__begin_forward(s);
    llhttp_resume(&s->req);
    /* A message without a body completes on an empty call. */
    llhttp_errno_t err = llhttp_execute(&s->req, "", 0);
    if (err != HPE_OK && err != HPE_PAUSED && err != HPE_PAUSED_UPGRADE)
        sess__fail(s, 400, "bad_request", "malformed_request", llhttp_errno_name(err));
}

/* Remembers a secret the upstream now knows (for scrubbing every later response). */
static void sess__use_secret(struct intercept_session *s, const struct intercept_secret *sec,
                             enum policy_scrub mode)
{
    if (mode == POLICY_SCRUB_NONE)
        return;
    if (mode == POLICY_SCRUB_STRICT || s->scrub_mode == POLICY_SCRUB_NONE)
        s->scrub_mode = mode;
    for (size_t i = 0; i < s->n_used; i++)
        if (s->used[i] == sec)
            return;
    if (s->n_used == MAX_USED) {
        /* The oldest goes; strict rules then fail closed on nothing: keep the bound tight. */
        intercept_secret_unref(s->used[0]);
        memmove(s->used, s->used + 1, (MAX_USED - 1) * sizeof *s->used);
        s->n_used--;
    }
    s->used[s->n_used++] = intercept_secret_ref((struct intercept_secret *)sec);
}

/* Secrets are there (or not needed): edit, then go upstream. */
static void sess__after_fetch(struct intercept_session *s)
{
    s->t_fetched = s->n_fetch ? al_now_ns() : 0;
    if (s->fetch_fail) {
        const char *r = s->fetch_fail;
        bool refused = strcmp(r, "vault_refused") == 0 || strcmp(r, "secret_not_found") == 0;
        sess__deny(s, refused ? 403 : 503,
                   refused ? "blocked_by_policy" : "credentials_unavailable", r);
        return;
    }
    struct intercept_inject_ctx ic = {
        .conn = &(struct intercept_conn_view){.tls = !s->plain,
                                              .sni = s->plain ? NULL : s->name,
                                              .port = s->port},
        .host = s->info.host.text,
        .hdrs = s->hdrs,
        .n_hdrs = s->n_hdrs,
        .target = s->url_at,
        .target_len = s->url_len,
        .d = &s->d,
        .secrets = s->fetched,
        .n_secrets = s->n_fetch,
        .ph = s->ph,
    };
    if (intercept_inject_edit_init(&s->edit, s->n_hdrs) < 0) {
        sess__deny(s, 503, "proxy_unavailable", "out_of_memory");
        return;
    }
    s->edit_live = true;
    const char *reason = NULL;
    if (intercept_inject_apply(&ic, &s->edit, &reason) < 0) {
        if (s->edit.placeholder_misuse) {
            json_t *x =
                json_pack("{s:s,s:s,s:s,s:s}", "decision", "deny", "reason", "placeholder_misuse",
                          "where", s->edit.misuse_where ? s->edit.misuse_where : "", "secret",
                          s->edit.misuse_secret ? s->edit.misuse_secret : "");
            sess__security_event(s, "placeholder_misuse", x);
        }
        sess__deny(s, 403, "blocked_by_policy", reason);
        return;
    }
    enum policy_scrub mode = s->d.rule ? s->d.rule->scrub : POLICY_SCRUB_NONE;
    for (size_t i = 0; i < s->edit.n_used; i++)
        sess__use_secret(s, s->edit.used[i],
                         mode == POLICY_SCRUB_NONE ? POLICY_SCRUB_STRICT : mode);
    if (s->edit.n_injected)
        s->stats.injected++;
    /* Placeholders in the body are refused as they stream. */
    const struct intercept_matcher *pm = intercept_placeholders_matcher(s->ph);
    if (pm && (s->req_chunked || s->r.content_length > 0)) {
        struct intercept_matcher *m = (struct intercept_matcher *)pm;
        if (intercept_scrub_init(&s->ph_scan, &m, 1) == 0)
            s->ph_scan_live = true;
    }
    if (s->ufd >= 0 && s->utls && !s->u_eof) {
        sess__send(s);
        return;
    }
    sess__start_upstream(s);
}

static void sess__fetch_cb(struct intercept_fetch *req, struct intercept_secret *sec, int err,
                           const char *reason)
{
    struct sess_fetch *f = (struct sess_fetch *)req;
    struct intercept_session *s = f->s;
    f->pending = false;
    if (err < 0 || !sec) {
        if (!s->fetch_fail)
            s->fetch_fail = reason ? reason : "vault_unavailable";
    } else {
        s->fetched[f->idx] = sec;
    }
    if (--s->fetch_left == 0 && s->st == S_FETCH) {
        sess__after_fetch(s);
        sess__run(s);
    }
}

/* The session's binding of egress_http_decide: the policy's decision into s->d (what to
 * inject comes with it). */
struct sess_decide {
    struct intercept_session *s;
    const struct policy *p;
};

static void sess__decide(void *arg, const struct egress_http_question *q,
                         struct egress_http_verdict *v)
{
    const struct sess_decide *sd = arg;
    struct intercept_session *s = sd->s;
    struct policy_request pr = {
        .host = q->host,
        .host_len = q->host_len,
        .addr = s->dst.family ? &s->dst : NULL,
        .port = q->port,
        .scheme = q->tls ? POLICY_SCHEME_HTTPS : POLICY_SCHEME_HTTP,
        .method = q->method,
        .method_len = strlen(q->method),
        .path = q->path,
        .path_len = q->path_len,
        .body = q->body,
    };
    policy_decide(sd->p, &pr, &s->d);
    const struct policy_limits *lim = policy_limits(sd->p);
    *v = (struct egress_http_verdict){
        .allow = s->d.verdict == POLICY_ALLOW,
        .would_deny = s->d.would_deny,
        .malformed = s->d.verdict != POLICY_ALLOW && policy_reason_is_malformed(s->d.reason),
        .websocket = s->d.websocket,
        .inspect_strict = s->d.n_inject && s->d.rule && s->d.rule->scrub == POLICY_SCRUB_STRICT,
        .rule = s->d.rule ? s->d.rule->name : NULL,
        .reason = policy_reason_code(s->d.reason),
        .max_body = lim ? lim->max_request_body : 0,
    };
}

/* A complete head is in s->reqh: check, decide, fetch. */
static void sess__on_request(struct intercept_session *s)
{
    s->stats.requests++;
    s->t_start = al_now_ns();
    s->t_decided = s->t_fetch0 = s->t_fetched = s->t_connect0 = s->t_connected = s->t_sent =
        s->t_first_resp = 0;
    s->t_up_tcp = 0;
    s->ops->request_id(s->ctx, s->rid);
    /* Path for the log: without the query. */
    size_t pl = 0;
    while (pl < s->url_len && s->url_at[pl] != '?' && s->url_at[pl] != '#' &&
           pl < sizeof s->path_log - 1)
        pl++;
    memcpy(s->path_log, s->url_at, pl);
    s->path_log[pl] = 0;
    const char *m = llhttp_method_name((llhttp_method_t)s->req.method);
    snprintf(s->method, sizeof s->method, "%s", m);
    s->http_minor = s->req.http_minor;
    if (s->audit_failed) {
        sess__deny(s, 503, "proxy_unavailable", "audit_unavailable");
        return;
    }
    /* The proxy's request checks, the plain path's (egress/http.h), then the identity. */
    const struct egress_http_conn hc = {.port = s->port, .tls = !s->plain};
    struct intercept_conn_view cv = {
        .tls = !s->plain, .sni = s->plain ? NULL : s->name, .port = s->port};
    int status = 0;
    const char *reason = NULL;
    if (egress_http_check_request(&s->reqh, &s->req, &hc, &s->r, &status, &reason) < 0 ||
        intercept_request_check(&cv, &s->r, &s->info, &status, &reason) < 0) {
        sess__deny(s, status, status == 403 ? "blocked_by_policy" : "bad_request", reason);
        return;
    }
    if (s->plain && (s->info.host.len != strlen(s->name) ||
                     memcmp(s->info.host.text, s->name, s->info.host.len) != 0)) {
        /* Plain HTTP: the connection is bound to the host it was handed over for. */
        sess__deny(s, 403, "blocked_by_policy", "host_changed_on_connection");
        return;
    }
    const struct policy *p = s->ops->policy(s->ctx);
    if (!p) {
        sess__deny(s, 403, "blocked_by_policy", "no_policy");
        return;
    }
    struct sess_decide sd = {.s = s, .p = p};
    struct egress_http_decision dn;
    const struct egress_http_decide_args da = {
        .r = &s->r,
        .conn = &hc,
        .host = s->info.host.text,
        .host_len = s->info.host.len,
        .max_body = s->lim.max_body_bytes,
        .decide = sess__decide,
        .arg = &sd,
    };
    int drc = egress_http_decide(&da, &dn);
    s->t_decided = al_now_ns();
    if (drc < 0) {
        sess__deny(s, dn.status, dn.error, dn.reason);
        return;
    }
    s->ws_allowed = s->info.websocket;
    s->req_chunked = s->r.chunked;
    s->req_close = !s->r.keep_alive;
    /* Only 100-continue passes the checks: answered here, not forwarded (sess__drop_field). */
    s->expect_continue = egress_http_head_get(&s->reqh, "Expect", NULL) != NULL;
    s->max_body = dn.max_body;
    /* Secrets for a genuine allow that injects. */
    s->fetch_fail = NULL;
    s->n_fetch = s->fetch_left = 0;
    if (s->d.inject && s->d.n_inject && !s->d.would_deny) {
        const char *names[INTERCEPT_INJECT_MAX];
        size_t n = intercept_inject_secrets(&s->d, names, INTERCEPT_INJECT_MAX);
        if (!s->fetcher) {
            s->fetch_fail = "vault_not_configured";
            sess__after_fetch(s);
            return;
        }
        s->t_fetch0 = al_now_ns();
        s->n_fetch = n;
        s->fetch_left = n;
        s->st = S_FETCH;
        for (size_t i = 0; i < n; i++) {
            struct sess_fetch *f = &s->fetch[i];
            memset(f, 0, sizeof *f);
            f->req.cb = sess__fetch_cb;
            f->s = s;
            f->idx = i;
            struct intercept_fetch_args a = {.name = names[i],
                                             .sandbox = s->sandbox,
                                             .rule = s->d.rule ? s->d.rule->name : "",
                                             .host = s->info.host.text,
                                             .request_id = s->rid};
            struct intercept_secret *got = NULL;
            const char *why = NULL;
            int r = intercept_fetch_start(s->fetcher, &a, &f->req, &got, &why);
            if (r == 1) {
                s->fetched[i] = got;
                s->fetch_left--;
            } else if (r == 0) {
                f->pending = true;
            } else {
                s->fetch_left--;
                if (!s->fetch_fail)
                    s->fetch_fail = why ? why : "vault_unavailable";
            }
        }
        if (s->fetch_left == 0)
            sess__after_fetch(s);
        else
            s->ops->deadline(s->ctx, lim_or(s->lim.response_timeout_ms, 60000));
        return;
    }
    sess__after_fetch(s);
}

/* The plain path's reasons (egress_http_request_error), and the placeholder scan's. */
static const char *req__parse_error(llhttp_t *p, int *status)
{
    const char *r = llhttp_get_error_reason(p);
    if (llhttp_get_errno(p) == HPE_USER && r && strcmp(r, "placeholder_in_body") == 0) {
        *status = 403;
        return "placeholder_misuse";
    }
    return egress_http_request_error(p, &of_req(p)->reqh, status);
}

/* Parses what the sandbox sent, as far as the state allows. */
static void sess__parse_client(struct intercept_session *s, bool *progress)
{
    uint32_t maxh = lim_or(s->lim.max_header_bytes, 32 * 1024);
    while (s->st == S_IDLE || s->st == S_HEAD || (s->st == S_FORWARD && !s->req_done)) {
        size_t avail = q_len(&s->cin, s->cin_off);
        if (s->st == S_FORWARD) {
            /* The body, while the upstream queue has room. */
            if (!avail || q_len(&s->uq, s->uq_off) >= QUEUE_HIGH)
                return;
            const char *data = s->cin.data + s->cin_off;
            llhttp_errno_t err = llhttp_execute(&s->req, data, avail);
            size_t used = avail;
            if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)
                used = (size_t)(llhttp_get_error_pos(&s->req) - data);
            s->cin_off += used;
            *progress = true;
            if (err == HPE_PAUSED_UPGRADE)
                return; /* what follows belongs to the upgraded protocol */
            if (err == HPE_OK || err == HPE_PAUSED) {
                q_compact(&s->cin, &s->cin_off);
                continue;
            }
            int st;
            const char *why = req__parse_error(&s->req, &st);
            if (strcmp(why, "placeholder_misuse") == 0) {
                json_t *x = json_pack("{s:s,s:s,s:s}", "decision", "deny", "reason",
                                      "placeholder_misuse", "where", "body");
                sess__security_event(s, "placeholder_misuse", x);
            }
            sess__fail(s, st,
                       st == 413   ? "payload_too_large"
                       : st == 403 ? "blocked_by_policy"
                                   : "bad_request",
                       why, why);
            return;
        }
        if (!avail)
            return;
        if (s->st == S_IDLE) {
            s->st = S_HEAD;
            s->ops->deadline(s->ctx, lim_or(s->lim.header_timeout_ms, 10000));
            al_http_head_scan_init(&s->hscan, true, maxh);
            s->hscanned = 0;
        }
        const char *data = s->cin.data + s->cin_off;
        /* The scanner finds where the head ends and refuses a malformed one at its first
         * bad byte, not after waiting for a blank line that may never come. */
        size_t used = 0;
        int sc = al_http_head_scan(&s->hscan, data + s->hscanned, avail - s->hscanned, &used);
        if (sc == 0) {
            s->hscanned = avail;
            return;
        }
        size_t hl = s->hscanned + used;
        /* A new request (or a refused one): reset, then copy the head and parse it. */
        sess__release_request(s);
        s->t_start = al_now_ns();
        s->t_decided = s->t_fetch0 = s->t_fetched = s->t_connect0 = s->t_connected = s->t_sent =
            s->t_first_resp = s->t_up_tcp = 0;
        s->scrub_refused = NULL;
        memset(&s->codings, 0, sizeof s->codings);
        memset(&s->d, 0, sizeof s->d);
        memset(&s->info, 0, sizeof s->info);
        s->status = 0;
        s->req_body = 0;
        s->resp_bytes = 0;
        s->req_done = false;
        s->method[0] = 0;
        s->path_log[0] = 0;
        if (sc == -E2BIG) {
            s->ops->request_id(s->ctx, s->rid);
            sess__deny(s, 431, "request_header_too_large", "request_head_too_large");
            return;
        }
        if (sc < 0) {
            /* What the strict parser refuses in these bytes gets its reason, the one the
             * plain path gives (egress/http.c); the scanner's otherwise. */
            llhttp_init(&s->req, HTTP_REQUEST, &req_settings);
            s->req.data = s;
            egress_http_head_reset(&s->reqh);
            llhttp_errno_t err = llhttp_execute(&s->req, data, avail);
            int st = 400;
            const char *r = err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE
                                ? al_http_head_scan_reason(&s->hscan)
                                : req__parse_error(&s->req, &st);
            s->ops->request_id(s->ctx, s->rid);
            sess__deny(s, st, st == 403 ? "blocked_by_policy" : "bad_request", r);
            return;
        }
        s->cin_off += hl;
        *progress = true;
        /* The strict parser on the head the scanner accepted, collected (egress/http.h). */
        llhttp_init(&s->req, HTTP_REQUEST, &req_settings);
        s->req.data = s;
        egress_http_head_reset(&s->reqh);
        s->n_hdrs = 0;
        s->url_at = NULL;
        s->url_len = 0;
        llhttp_errno_t err = llhttp_execute(&s->req, data, hl);
        if (err != HPE_PAUSED || llhttp_get_error_pos(&s->req) != data + hl) {
            int st;
            const char *r = req__parse_error(&s->req, &st);
            s->ops->request_id(s->ctx, s->rid);
            sess__deny(s, st, st == 403 ? "blocked_by_policy" : "bad_request", r);
            return;
        }
        if (!s->url_len) {
            s->ops->request_id(s->ctx, s->rid);
            sess__deny(s, 400, "bad_request", "invalid_target");
            return;
        }
        s->ops->deadline(s->ctx, 0);
        sess__on_request(s);
        return;
    }
}

/* ---- the upstream ---------------------------------------------------------------------------- */

static void sess__up_failed(struct intercept_session *s, const char *why, const char *detail)
{
    int st = strcmp(why, "upstream_connect_timeout") == 0 ? 504 : 502;
    sess__fail(s, st, st == 504 ? "gateway_timeout" : "bad_gateway", why, detail);
}

static void sess__connect_new(struct intercept_session *s)
{
    s->u_pooled = false;
    s->t_connect0 = al_now_ns();
    int fd = s->ops->connect(s->ctx);
    if (fd < 0) {
        sess__up_failed(s, "upstream_connect_failed", strerror(-fd));
        return;
    }
    s->ufd = fd;
    s->st = S_CONNECT;
    s->ops->deadline(s->ctx, lim_or(s->lim.response_timeout_ms, 60000));
}

static void sess__start_upstream(struct intercept_session *s)
{
    if (s->pool && intercept_pool_get(s->pool, s->pool_key, &s->ufd, &s->utls) == 0) {
        s->u_pooled = true;
        s->stats.upstream_pooled = true;
        s->u_eof = false;
        s->t_connect0 = s->t_connected = al_now_ns();
        sess__send(s);
        return;
    }
    sess__connect_new(s);
}

static void sess__on_connected(struct intercept_session *s, bool *progress)
{
    int err = 0;
    socklen_t l = sizeof err;
    if (getsockopt(s->ufd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
        err = errno;
    if (err) {
        sess__close_upstream(s);
        sess__up_failed(s,
                        err == ETIMEDOUT ? "upstream_connect_timeout" : "upstream_connect_failed",
                        strerror(err));
        return;
    }
    struct al_error e = {0};
    int r = s->plain
                ? intercept_tls_plain(s->ufd, NULL, 0, &s->utls)
                : intercept_tls_connect(s->cli, s->ufd, s->name,
                                        s->u_tls12 ? INTERCEPT_TLS_CONNECT_TLS12 : 0, &s->utls, &e);
    if (r < 0) {
        sess__close_upstream(s);
        sess__up_failed(s, "upstream_tls_failed", al_error_str(&e));
        return;
    }
    s->t_up_tcp = al_now_ns();
    s->st = S_UP_HS;
    *progress = true;
}

static void sess__up_handshake(struct intercept_session *s, bool *progress)
{
    int r = intercept_tls_handshake(s->utls);
    if (r == -EAGAIN)
        return;
    *progress = true;
    if (r == 0) {
        s->t_connected = al_now_ns();
        if (s->retried)
            sess__begin_forward(s); /* the head is queued already */
        else
            sess__send(s);
        return;
    }
    const char *reason = intercept_tls_reason(s->utls);
    char detail[320];
    snprintf(detail, sizeof detail, "%s", intercept_tls_error(s->utls));
    if (strcmp(reason, "retry_tls12") == 0 && !s->u_tls12) {
        s->u_tls12 = true;
        sess__close_upstream(s);
        sess__connect_new(s);
        return;
    }
    sess__close_upstream(s);
    sess__up_failed(s,
                    strcmp(reason, "certificate_verify_failed") == 0
                        ? "upstream_certificate_invalid"
                        : "upstream_tls_failed",
                    detail);
}

/* ---- the response side ------------------------------------------------------------------------- */

static int resp__on_status(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&((struct intercept_session *)p->data)->resph, at, n) < 0 ? HPE_USER
                                                                                          : 0;
}

static int resp__on_field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&((struct intercept_session *)p->data)->resph, at, n) < 0
               ? HPE_USER
               : 0;
}

static int resp__on_value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&((struct intercept_session *)p->data)->resph, at, n) < 0
               ? HPE_USER
               : 0;
}

static int resp__on_headers_complete(llhttp_t *p)
{
    struct intercept_session *s = p->data;
    if (egress_http_head_finish(&s->resph) < 0)
        return HPE_USER;
    /* The fields as the checks, the codings and the scrubber read them. */
    s->n_rhdrs = egress_http_head_fields(&s->resph, s->rhdrs);
    if (strcmp(s->method, "HEAD") == 0 && p->status_code >= 200)
        p->flags |= F_SKIPBODY;
    return HPE_PAUSED;
}

static int resp__on_body(llhttp_t *p, const char *at, size_t n)
{
    struct intercept_session *s = p->data;
    struct al_buf out = AL_BUF_INIT;
    const char *reason = NULL;
    int r = s->body_live ? intercept_body_feed(&s->body, at, n, &out, &reason)
                         : (al_buf_append(&out, at, n) < 0 ? -ENOMEM : 0);
    if (r < 0) {
        al_buf_free_wipe(&out);
        llhttp_set_error_reason(p, reason ? reason : "scrub_failed");
        return HPE_USER;
    }
    int rc = egress_http_body_append(&s->cq, s->resp_chunked_out, out.data, out.len);
    s->resp_bytes += out.len;
    s->bytes_down += out.len;
    al_buf_free(&out);
    return rc ? HPE_USER : 0;
}

static int resp__on_complete(llhttp_t *p)
{
    struct intercept_session *s = p->data;
    if (p->status_code < 200 && p->status_code != 101)
        return 0; /* an interim response: the final one follows */
    s->resp_done = true;
    return HPE_PAUSED;
}

/* Response fields not forwarded as they came: what a relay leaves behind (common/http_head.h);
 * the framing is restated; Upgrade stays on a 101 that switches protocols. */
static bool resp_hop_by_hop(const struct al_http_field *h, const struct al_http_field *all,
                            size_t n, bool upgrade)
{
    return al_http_forward_drops(all, n, h->name, h->name_len, upgrade ? AL_HTTP_FWD_UPGRADE : 0);
}

/* The response head is parsed: check, scrub, re-frame, queue it for the sandbox. */
static void sess__on_response_head(struct intercept_session *s)
{
    int status = s->resp.status_code;
    s->status = status;
    if (!s->t_first_resp)
        s->t_first_resp = al_now_ns();
    const char *reason;
    if (intercept_response_check(status, s->ws_allowed, &reason) < 0) {
        sess__fail(s, 502, "bad_gateway", reason, reason);
        return;
    }
    if (status == 101 && s->n_used &&
        intercept_hdr_find(s->rhdrs, s->n_rhdrs, "Sec-WebSocket-Extensions", NULL)) {
        /* An extension the proxy did not offer (compressed frames cannot be scrubbed). */
        sess__fail(s, 502, "response_not_inspectable", "websocket_extension_not_inspectable",
                   "the upstream accepted a WebSocket extension the proxy removed");
        return;
    }
    /* How the body goes: every coding applied to it (content and transfer) is undone that
     * the proxy must undo (scrub.h), or the response is refused. */
    struct intercept_matcher *ms[MAX_USED];
    for (size_t i = 0; i < s->n_used; i++)
        ms[i] = s->used[i]->matcher;
    intercept_codings_of(s->rhdrs, s->n_rhdrs, &s->codings);
    if (s->codings.chunked != ((s->resp.flags & F_CHUNKED) != 0)) {
        sess__fail(s, 502, "bad_gateway", "malformed_response", "ambiguous transfer coding");
        return;
    }
    bool no_body = status == 204 || status == 304 || (status >= 100 && status < 200) ||
                   strcmp(s->method, "HEAD") == 0;
    if (!no_body && (s->n_used || s->codings.n_transfer)) {
        if (intercept_body_start(&s->body, ms, s->n_used, &s->codings, s->scrub_mode,
                                 s->lim.max_decoded_body, &reason) < 0) {
            s->scrub_refused = reason ? reason : "scrub_failed";
            if (s->n_used) {
                json_t *x = json_pack("{s:s,s:s}", "decision", "deny", "reason", s->scrub_refused);
                json_t *cj = intercept_codings_json(&s->codings);
                if (x && cj)
                    json_object_set_new(x, "codings", cj);
                else
                    json_decref(cj);
                sess__security_event(s, "response_not_inspectable", x);
            }
            sess__fail(s, 502, s->n_used ? "response_not_inspectable" : "bad_gateway",
                       s->scrub_refused, s->scrub_refused);
            return;
        }
        s->body_live = true;
    }
    /* Decoded: the length changes; without the content codings too when they were undone. */
    bool decode = s->body_live && s->body.mode == INTERCEPT_BODY_DECODE;
    bool drop_ce = decode && s->body.content_decoded;
    bool has_cl = (s->resp.flags & F_CONTENT_LENGTH) != 0;
    bool upgrade = status == 101;
    bool client10 = s->http_minor == 0;
    s->resp_skip = no_body;
    s->resp_chunked_out = !no_body && !upgrade && (decode || !has_cl) && !client10;
    s->resp_close_delim = !no_body && !upgrade && (decode || !has_cl) && client10;
    bool close = s->req_close || s->resp_close_delim || !llhttp_should_keep_alive(&s->resp) ||
                 s->close_after;
    if (close)
        s->close_after = true;
    /* The head toward the sandbox. */
    struct intercept_scrub_report rep = {0};
    /* The status line: the upstream's code and reason phrase, in our HTTP version. */
    size_t at0 = s->cq.len;
    int rc = al_buf_printf(&s->cq, "HTTP/1.%d %03d %.*s\r\n", client10 ? 0 : 1, status,
                           (int)s->resph.status_len, s->resph.buf + s->resph.status);
    for (size_t k = 0; rc == 0 && k < s->n_used; k++)
        s->stats.scrubbed_matches +=
            intercept_scrub_buffer(s->used[k]->matcher, k, s->cq.data + at0, s->cq.len - at0, &rep);
    for (size_t i = 0; i < s->n_rhdrs && rc == 0; i++) {
        const struct al_http_field *h = &s->rhdrs[i];
        if (resp_hop_by_hop(h, s->rhdrs, s->n_rhdrs, upgrade))
            continue;
        if (drop_ce && intercept_hdr_is(h, "Content-Encoding"))
            continue;
        size_t at = s->cq.len;
        rc = al_buf_printf(&s->cq, "%.*s: %.*s\r\n", (int)h->name_len, h->name, (int)h->value_len,
                           h->value);
        for (size_t k = 0; rc == 0 && k < s->n_used; k++)
            s->stats.scrubbed_matches += intercept_scrub_buffer(
                s->used[k]->matcher, k, s->cq.data + at, s->cq.len - at, &rep);
    }
    if (rc == 0) {
        if (upgrade)
            rc = al_buf_appends(&s->cq, "Connection: Upgrade\r\n");
        else if (has_cl && !decode && status != 204 && status != 304)
            rc = al_buf_printf(&s->cq, "Content-Length: %llu\r\n",
                               (unsigned long long)s->resp.content_length);
        if (rc == 0 && s->resp_chunked_out)
            rc = al_buf_appends(&s->cq, "Transfer-Encoding: chunked\r\n");
        if (rc == 0 && close && !upgrade)
            rc = al_buf_appends(&s->cq, "Connection: close\r\n");
        if (rc == 0)
            rc = al_buf_append(&s->cq, "\r\n", 2);
    }
    if (rep.matches) {
        json_t *enc = json_array();
        for (int e = 0; e < INTERCEPT_ENC__COUNT; e++)
            if (rep.enc_mask & (1u << e))
                json_array_append_new(enc, json_string(intercept_enc_name((enum intercept_enc)e)));
        json_t *x =
            json_pack("{s:s,s:s,s:I,s:o}", "decision", "scrubbed", "where", "response_headers",
                      "matches", (json_int_t)rep.matches, "encodings", enc);
        json_t *ids = json_array();
        for (size_t k = 0; k < s->n_used; k++)
            if (rep.value_mask[k])
                json_array_append_new(ids, json_string(s->used[k]->secret_id));
        json_object_set_new(x, "secret_ids", ids);
        sess__security_event(s, "secret_reflected", x);
    }
    if (rc < 0) {
        sess__fail(s, 502, "bad_gateway", "proxy_error", "cannot build the response head");
        return;
    }
    s->resp_started = true;
    s->resp_in_head = false;
    if (upgrade)
        s->upgraded = true;
}

/* The response is complete (and the request too): audit, then keep-alive or close. */
static void sess__response_complete(struct intercept_session *s)
{
    if (s->body_live) {
        struct al_buf out = AL_BUF_INIT;
        const char *reason = NULL;
        if (intercept_body_finish(&s->body, &out, &reason) < 0) {
            al_buf_free_wipe(&out);
            sess__fail(s, 502, "bad_gateway", reason ? reason : "scrub_failed", reason);
            return;
        }
        int rc = egress_http_body_append(&s->cq, s->resp_chunked_out, out.data, out.len);
        s->resp_bytes += out.len;
        al_buf_free(&out);
        if (rc < 0) {
            sess__fail(s, 502, "bad_gateway", "proxy_error", "out of memory");
            return;
        }
    }
    if (egress_http_body_end(&s->cq, s->resp_chunked_out) < 0) {
        sess__fail(s, 502, "bad_gateway", "proxy_error", "out of memory");
        return;
    }
    /* Reflection in the body. */
    if (s->body_live && s->body.scrubbing && s->body.scrub.rep.matches) {
        const struct intercept_scrub_report *rep = &s->body.scrub.rep;
        s->stats.scrubbed_matches += rep->matches;
        json_t *enc = json_array();
        for (int e = 0; e < INTERCEPT_ENC__COUNT; e++)
            if (rep->enc_mask & (1u << e))
                json_array_append_new(enc, json_string(intercept_enc_name((enum intercept_enc)e)));
        json_t *ids = json_array();
        for (size_t k = 0; k < s->n_used; k++)
            if (rep->value_mask[k])
                json_array_append_new(ids, json_string(s->used[k]->secret_id));
        json_t *x =
            json_pack("{s:s,s:s,s:I,s:o,s:o,s:b}", "decision", "scrubbed", "where", "response_body",
                      "matches", (json_int_t)rep->matches, "encodings", enc, "secret_ids", ids,
                      "decoded", s->body.mode == INTERCEPT_BODY_DECODE);
        json_t *cj =
            s->body.mode == INTERCEPT_BODY_DECODE ? intercept_codings_json(&s->codings) : NULL;
        if (x && cj)
            json_object_set_new(x, "codings", cj);
        else
            json_decref(cj);
        sess__security_event(s, "secret_reflected", x);
    }
    sess__audit_request(s, s->d.would_deny ? "would_deny" : "allow",
                        policy_reason_code(s->d.reason), NULL);
    bool up_ok = llhttp_should_keep_alive(&s->resp) && !s->u_eof && q_len(&s->rin, s->rin_off) == 0;
    if (!up_ok)
        sess__close_upstream(s);
    else
        s->u_reusable = true;
    sess__release_request(s);
    s->resp_done = false;
    if (s->close_after) {
        s->st = S_CLOSING;
        s->ops->deadline(s->ctx, CLOSE_MS);
        return;
    }
    s->st = S_IDLE;
    s->ops->deadline(s->ctx, lim_or(s->lim.keepalive_timeout_ms, 60000));
}

/* Parses upstream bytes; false when the session ended. */
static bool sess__parse_upstream(struct intercept_session *s, bool *progress)
{
    while (s->st == S_FORWARD && !s->resp_done && q_len(&s->rin, s->rin_off) &&
           q_len(&s->cq, s->cq_off) < QUEUE_HIGH) {
        const char *data = s->rin.data + s->rin_off;
        size_t avail = q_len(&s->rin, s->rin_off);
        if (s->resp_in_head) {
            /* The head must be whole (and pass the scanner) before any of it is parsed or
             * forwarded. */
            size_t used = 0;
            int sc = al_http_head_scan(&s->rscan, data + s->rscanned, avail - s->rscanned, &used);
            if (sc == 0) {
                s->rscanned = avail;
                return true;
            }
            if (sc == -E2BIG) {
                sess__fail(s, 502, "bad_gateway", "response_head_too_large",
                           "response head too large");
                return false;
            }
            if (sc < 0) {
                sess__fail(s, 502, "bad_gateway", "malformed_response",
                           al_http_head_scan_reason(&s->rscan));
                return false;
            }
            size_t hl = s->rscanned + used;
            al_http_head_scan_init(&s->rscan, false, RESP_HEAD_MAX); /* a 1xx: another follows */
            s->rscanned = 0;
            s->rin_off += hl;
            *progress = true;
            s->n_rhdrs = 0;
            egress_http_head_reset(&s->resph);
            llhttp_errno_t err = llhttp_execute(&s->resp, data, hl);
            if (err != HPE_PAUSED || llhttp_get_error_pos(&s->resp) != data + hl) {
                sess__fail(s, 502, "bad_gateway", "malformed_response", llhttp_errno_name(err));
                return false;
            }
            if (s->resp.status_code >= 100 && s->resp.status_code < 200 &&
                s->resp.status_code != 101) {
                /* An interim response: dropped (we answered Expect ourselves); the final
                 * one follows on the same parser. */
                llhttp_resume(&s->resp);
                llhttp_execute(&s->resp, "", 0);
                continue;
            }
            sess__on_response_head(s);
            if (s->st != S_FORWARD)
                return false;
            if (s->upgraded) {
                /* WebSocket accepted: from here on a tunnel. */
                return true;
            }
            llhttp_resume(&s->resp);
            /* A message without a body completes on an empty call. */
            err = llhttp_execute(&s->resp, "", 0);
            if (err != HPE_OK && err != HPE_PAUSED) {
                sess__fail(s, 502, "bad_gateway", "malformed_response", llhttp_errno_name(err));
                return false;
            }
            continue;
        }
        llhttp_errno_t err = llhttp_execute(&s->resp, data, avail);
        size_t used = avail;
        if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)
            used = (size_t)(llhttp_get_error_pos(&s->resp) - data);
        s->rin_off += used;
        *progress = true;
        if (err == HPE_OK || err == HPE_PAUSED)
            continue;
        const char *r = llhttp_get_error_reason(&s->resp);
        if (err == HPE_USER && r &&
            (strcmp(r, "decoded_body_too_large") == 0 || strcmp(r, "corrupt_encoding") == 0 ||
             strcmp(r, "decompression_ratio_exceeded") == 0)) {
            json_t *x = json_pack("{s:s,s:s}", "decision", "abort", "reason", r);
            sess__security_event(s, "response_not_inspectable", x);
            sess__fail(s, 502, "response_not_inspectable", r, r);
        } else {
            sess__fail(s, 502, "bad_gateway", "malformed_response", llhttp_errno_name(err));
        }
        return false;
    }
    q_compact(&s->rin, &s->rin_off);
    return true;
}

/* ---- the driver ------------------------------------------------------------------------------ */

static void sess__update_watch(struct intercept_session *s)
{
    if (s->st == S_DONE)
        return;
    int ce = 0, ue = 0;
    if (s->ctls) {
        ce = intercept_tls_want(s->ctls) & INTERCEPT_TLS_WANT_WRITE;
        if (q_len(&s->cq, s->cq_off))
            ce |= INTERCEPT_TLS_WANT_WRITE;
        bool want_read = false;
        switch (s->st) {
        case S_HANDSHAKE:
            want_read = intercept_tls_want(s->ctls) & INTERCEPT_TLS_WANT_READ;
            break;
        case S_IDLE:
        case S_HEAD:
            want_read = true;
            break;
        case S_FORWARD:
            want_read = !s->req_done && q_len(&s->uq, s->uq_off) < QUEUE_HIGH;
            break;
        case S_CLOSING:
            want_read = true;
            break; /* read and discard until the close */
        default:
            break;
        }
        if (want_read && !s->c_eof)
            ce |= INTERCEPT_TLS_WANT_READ;
    }
    if (s->ufd >= 0) {
        if (s->st == S_CONNECT) {
            ue = INTERCEPT_TLS_WANT_WRITE;
        } else if (s->utls) {
            ue = intercept_tls_want(s->utls);
            if (q_len(&s->uq, s->uq_off))
                ue |= INTERCEPT_TLS_WANT_WRITE;
            if (s->st == S_FORWARD && !s->u_eof && q_len(&s->cq, s->cq_off) < QUEUE_HIGH)
                ue |= INTERCEPT_TLS_WANT_READ;
            if (s->st == S_IDLE)
                ue &= ~INTERCEPT_TLS_WANT_READ; /* idle: a close is noticed at the next request */
        }
    }
    s->ops->watch(s->ctx, INTERCEPT_END_CLIENT, s->cfd, ce);
    s->ops->watch(s->ctx, INTERCEPT_END_UPSTREAM, s->ufd, ue);
}

static void sess__run(struct intercept_session *s)
{
    if (s->st == S_TUNNEL) {
        sess__tunnel_run(s, -1, 0);
        return;
    }
    for (int guard = 0; guard < 256 && s->st != S_DONE; guard++) {
        bool progress = false;
        switch (s->st) {
        case S_HANDSHAKE: {
            int r = intercept_tls_handshake(s->ctls);
            if (r == 0) {
                s->t_chs1 = al_now_ns();
                s->st = S_IDLE;
                s->ops->deadline(s->ctx, lim_or(s->lim.keepalive_timeout_ms, 60000));
                progress = true;
            } else if (r != -EAGAIN) {
                char detail[400];
                snprintf(detail, sizeof detail, "%s: %s", intercept_tls_reason(s->ctls),
                         intercept_tls_error(s->ctls));
                sess__finish(s, "sandbox_tls_failed", detail);
                return;
            }
            break;
        }
        case S_CONNECT:
            break; /* on writability */
        case S_UP_HS:
            sess__up_handshake(s, &progress);
            break;
        default:
            break;
        }
        if (s->st == S_DONE)
            return;
        /* Reads. */
        if (s->ctls && intercept_tls_handshake_done(s->ctls) && !s->c_eof &&
            (s->st == S_IDLE || s->st == S_HEAD || s->st == S_CLOSING ||
             (s->st == S_FORWARD && !s->req_done)) &&
            q_len(&s->cin, s->cin_off) <
                (size_t)lim_or(s->lim.max_header_bytes, 32 * 1024) + READ_CHUNK) {
            ssize_t n = sess__read_tls(s->ctls, &s->cin, s->cin.len + READ_CHUNK);
            if (n > 0) {
                progress = true;
                if (s->st == S_CLOSING) {
                    al_buf_reset(&s->cin);
                    s->cin_off = 0;
                }
            } else if (n < 0) {
                s->c_eof = true;
                progress = true;
                if (s->st == S_IDLE || s->st == S_CLOSING ||
                    (s->st == S_HEAD && q_len(&s->cin, s->cin_off) == 0)) {
                    sess__finish(s, "sandbox_closed", "");
                    return;
                }
                if (s->st == S_HEAD || (s->st == S_FORWARD && !s->req_done)) {
                    sess__audit_request(s, s->method[0] ? "allow" : "deny", "sandbox_closed",
                                        "sandbox_closed");
                    sess__close_upstream(s);
                    sess__finish(s, "sandbox_closed", "");
                    return;
                }
            }
        }
        if (s->st == S_FORWARD && s->utls && !s->u_eof && q_len(&s->cq, s->cq_off) < QUEUE_HIGH) {
            ssize_t n = sess__read_tls(s->utls, &s->rin, s->rin.len + READ_CHUNK);
            if (n > 0) {
                progress = true;
            } else if (n < 0) {
                s->u_eof = true;
                progress = true;
                if (s->resp_in_head && !s->resp_started && s->u_pooled && !s->retried &&
                    s->req_done && q_len(&s->rin, s->rin_off) == 0) {
                    /* A pooled connection the server had closed: one retry on a new one. */
                    s->retried = true;
                    struct al_buf again = s->saved_head;
                    al_buf_init(&s->saved_head, 0);
                    sess__close_upstream(s);
                    al_buf_append(&s->uq, again.data, again.len);
                    al_buf_free_wipe(&again);
                    s->u_eof = false;
                    sess__connect_new(s);
                } else if (!s->resp_in_head && llhttp_message_needs_eof(&s->resp)) {
                    if (llhttp_finish(&s->resp) != HPE_OK && !s->resp_done) {
                        sess__fail(s, 502, "bad_gateway", "upstream_closed_mid_response", "");
                        return;
                    }
                } else if (!s->resp_done) {
                    sess__fail(s, 502, "bad_gateway",
                               s->resp_started ? "upstream_closed_mid_response"
                                               : "upstream_closed_before_response",
                               s->utls ? intercept_tls_error(s->utls) : "");
                    return;
                }
            }
        }
        /* Parsing. */
        if (s->st == S_IDLE || s->st == S_HEAD || s->st == S_FORWARD)
            sess__parse_client(s, &progress);
        if (s->st == S_DONE)
            return;
        if (s->st == S_FORWARD)
            sess__parse_upstream(s, &progress);
        if (s->st == S_DONE)
            return;
        if (s->st == S_FORWARD && s->upgraded) {
            sess__tunnel_start(s);
            return;
        }
        /* Writes. */
        if (!sess__flush_tls(s, s->utls, &s->uq, &s->uq_off, false, &progress))
            return;
        if (s->st == S_DONE)
            return;
        if (!sess__flush_tls(s, s->ctls, &s->cq, &s->cq_off, true, &progress))
            return;
        if (s->st == S_FORWARD && s->resp_done && s->req_done &&
            q_len(&s->cq, s->cq_off) < QUEUE_HIGH) {
            sess__response_complete(s);
            progress = true;
        }
        if (s->st == S_FORWARD && s->resp_done && !s->req_done) {
            /* Answered before the request body ended: the rest cannot be trusted. */
            s->close_after = true;
            s->req_done = true;
            sess__close_upstream(s);
            s->u_eof = true;
        }
        if (s->st == S_CLOSING && q_len(&s->cq, s->cq_off) == 0 &&
            intercept_tls_out_pending(s->ctls) == 0) {
            if (!s->tend[0].shut) /* a tunnel's relay may have sent it */
                intercept_tls_close_notify(s->ctls);
            sess__finish(s, s->end_why ? s->end_why : "closed", NULL);
            return;
        }
        if (s->st == S_FORWARD && progress)
            s->ops->deadline(s->ctx, s->resp_started ? lim_or(s->lim.idle_timeout_ms, 300000)
                                                     : lim_or(s->lim.response_timeout_ms, 60000));
        if (!progress) {
            /* Decrypted bytes the sockets no longer signal? */
            bool more =
                s->ctls && intercept_tls_handshake_done(s->ctls) &&
                intercept_tls_in_pending(s->ctls) &&
                (s->st == S_IDLE || s->st == S_HEAD || (s->st == S_FORWARD && !s->req_done));
            if (!more)
                break;
        }
    }
    sess__update_watch(s);
}

/* ---- the tunnel ------------------------------------------------------------------------------ */
/* After a 101 both sessions' plaintext goes through common/relay: sandbox -> upstream as it
 * comes, upstream -> sandbox through the scrubber of the secrets injected on this connection
 * (best_effort rules only: strict ones refuse WebSocket), whose held-back bytes (they could
 * begin a secret) go after TUNNEL_FLUSH_MS of quiet: an interactive protocol must not wait
 * for its next message. The tunnel ends when either side ends: the sandbox's end once what
 * it sent reached the upstream, the upstream's once what it sent (and the scrubber held)
 * reached the sandbox, which then gets its close_notify (S_CLOSING). */

_Static_assert(INTERCEPT_TLS_WANT_READ == AL_RELAY_READ &&
                   INTERCEPT_TLS_WANT_WRITE == AL_RELAY_WRITE,
               "the relay's interests pass to the proxy's watch as they are");

static ssize_t tun__read(void *ctx, void *buf, size_t len)
{
    struct sess_tun_end *e = ctx;
    ssize_t n = intercept_tls_read(e->t, buf, len);
    /* A peer that closed without close_notify or failed ends its stream like one that closed
     * properly: what it sent so far is delivered, then the tunnel ends. */
    return n >= 0 || n == -EAGAIN ? n : 0;
}

static ssize_t tun__write(void *ctx, const void *buf, size_t len)
{
    struct sess_tun_end *e = ctx;
    return intercept_tls_write(e->t, buf, len);
}

static int tun__shutdown(void *ctx)
{
    struct sess_tun_end *e = ctx;
    e->shut = true;
    int r = intercept_tls_close_notify(e->t);
    return r == -EAGAIN ? 0 : r; /* queued: it goes with the ciphertext flushed on writability */
}

static int tun__want(void *ctx)
{
    /* Writability only: reads are the relay's to ask for (readability it would not act on
     * spins a level-triggered loop). */
    struct sess_tun_end *e = ctx;
    return intercept_tls_want(e->t) & INTERCEPT_TLS_WANT_WRITE;
}

static const struct al_relay_io tun_io = {
    .read = tun__read, .write = tun__write, .shutdown = tun__shutdown, .want = tun__want};

static int tun__scrub_feed(void *ctx, const void *in, size_t len, struct al_buf *out)
{
    return intercept_scrub_feed(ctx, in, len, out);
}

static int tun__scrub_flush(void *ctx, struct al_buf *out)
{
    return intercept_scrub_finish(ctx, out);
}

static size_t tun__scrub_held(void *ctx)
{
    const struct intercept_scrub *sc = ctx;
    size_t n = 0;
    for (size_t i = 0; i < sc->n; i++)
        n += sc->st[i].carry.len;
    return n;
}

static void sess__tunnel_stop(struct intercept_session *s)
{
    if (!s->tun_live)
        return;
    s->tun_live = false;
    uint64_t up = al_relay_bytes(&s->tun, 0), down = al_relay_bytes(&s->tun, 1);
    s->bytes_up += up > s->tun_skip[0] ? up - s->tun_skip[0] : 0;
    s->bytes_down += down > s->tun_skip[1] ? down - s->tun_skip[1] : 0;
    al_relay_free(&s->tun);
    if (s->tscrub_live) {
        s->stats.scrubbed_matches += s->tscrub.rep.matches;
        s->tscrub.rep.matches = 0;
    }
}

/* The relay failed: end's write (or its own buffer or the scrubber, as a read of end). */
static void sess__tunnel_failed(struct intercept_session *s, int end, int op, int rc)
{
    struct intercept_tls *t = s->tend[end & 1].t;
    char detail[320]; /* copied: closing the upstream frees its TLS state */
    snprintf(detail, sizeof detail, "%s",
             op == AL_RELAY_WRITE && t && intercept_tls_error(t)[0] ? intercept_tls_error(t)
                                                                    : strerror(-rc));
    sess__close_upstream(s);
    if (op == AL_RELAY_WRITE && end == INTERCEPT_END_CLIENT) {
        sess__finish(s, "sandbox_write_failed", detail);
        return;
    }
    intercept_tls_send_alert(s->ctls, MBEDTLS_SSL_ALERT_MSG_INTERNAL_ERROR);
    sess__finish(s, op == AL_RELAY_WRITE ? "upstream_write_failed" : "tunnel_failed", detail);
}

/* Runs the relay after events on end (-1: none, as at the start and at its deadline). */
static void sess__tunnel_run(struct intercept_session *s, int end, int events)
{
    /* Ciphertext earlier writes queued goes once a socket takes it: the relay only sees
     * plaintext. */
    for (int i = 0; i < 2; i++) {
        struct intercept_tls *t = s->tend[i].t;
        int f = intercept_tls_out_pending(t) ? intercept_tls_flush(t) : 0;
        if (f < 0 && f != -EAGAIN) {
            sess__tunnel_failed(s, i, AL_RELAY_WRITE, f);
            return;
        }
    }
    int rc = al_relay_run(&s->tun, end, events);
    /* Decrypted bytes the sockets no longer signal (a record read in part). */
    for (int guard = 0; rc == 1 && guard < 8; guard++) {
        bool more = false;
        for (int i = 0; i < 2; i++)
            more |= (al_relay_want(&s->tun, i) & AL_RELAY_READ) &&
                    intercept_tls_in_pending(s->tend[i].t);
        if (!more)
            break;
        rc = al_relay_run(&s->tun, -1, 0);
    }
    if (rc < 0) {
        sess__tunnel_failed(s, s->tun.fail_end, s->tun.fail_op, rc);
        return;
    }
    /* Both may have ended in one run (the upstream answering the close_notify the sandbox's
     * end caused): the sandbox's end is the reason then. */
    if (s->tun.flow[0].done) {
        sess__close_upstream(s);
        sess__finish(s, "sandbox_closed", "");
        return;
    }
    if (s->tun.flow[1].done) {
        if (s->tun.flow[0].eof)
            s->c_eof = true;
        sess__close_upstream(s);
        s->close_after = true;
        s->st = S_CLOSING;
        s->ops->deadline(s->ctx, CLOSE_MS);
        sess__run(s);
        return;
    }
    s->ops->watch(s->ctx, INTERCEPT_END_CLIENT, s->cfd, al_relay_want(&s->tun, 0));
    s->ops->watch(s->ctx, INTERCEPT_END_UPSTREAM, s->ufd, al_relay_want(&s->tun, 1));
    uint64_t next = 1;
    if (al_relay_time(&s->tun, al_now_ns(), &next) < 0 || next == 0)
        next = 1; /* due now: the timeout handler ends it */
    s->ops->deadline(s->ctx, next > UINT32_MAX ? UINT32_MAX : (uint32_t)next);
}

/* The 101 is queued toward the sandbox: from here on a tunnel. */
static void sess__tunnel_start(struct intercept_session *s)
{
    s->st = S_TUNNEL;
    if (s->n_used) {
        struct intercept_matcher *ms[MAX_USED];
        for (size_t k = 0; k < s->n_used; k++)
            ms[k] = s->used[k]->matcher;
        s->tscrub_live = intercept_scrub_init(&s->tscrub, ms, s->n_used) == 0;
    }
    sess__audit_request(s, "allow", "rule_allows", NULL);
    struct al_relay_opts o = {.idle_timeout_ms = lim_or(s->lim.idle_timeout_ms, 300000)};
    if (s->tscrub_live) {
        s->tfilter = (struct al_relay_filter){.feed = tun__scrub_feed,
                                              .flush = tun__scrub_flush,
                                              .held = tun__scrub_held,
                                              .ctx = &s->tscrub,
                                              .flush_ms = TUNNEL_FLUSH_MS};
        o.filter[1] = &s->tfilter;
    }
    s->tend[0] = (struct sess_tun_end){.t = s->ctls};
    s->tend[1] = (struct sess_tun_end){.t = s->utls};
    struct al_relay_end c = {.fd = s->cfd, .io = &tun_io, .ctx = &s->tend[0]};
    struct al_relay_end u = {.fd = s->ufd, .io = &tun_io, .ctx = &s->tend[1]};
    al_relay_init(&s->tun, &c, &u, &o);
    s->tun_live = true;
    /* What is here already goes first: toward the upstream the rest of the request and what
     * the sandbox sent behind it, toward the sandbox the rest of the 101 head and what the
     * upstream sent behind it (scrubbed like the rest). Only the latter parts count as the
     * tunnel's bytes. */
    s->tun_skip[0] = q_len(&s->uq, s->uq_off);
    s->tun_skip[1] = q_len(&s->cq, s->cq_off);
    int rc = 0;
    if (q_len(&s->cin, s->cin_off))
        rc = al_buf_append(&s->uq, s->cin.data + s->cin_off, q_len(&s->cin, s->cin_off));
    if (rc == 0 && q_len(&s->rin, s->rin_off))
        rc = s->tscrub_live
                 ? intercept_scrub_feed(&s->tscrub, s->rin.data + s->rin_off,
                                        q_len(&s->rin, s->rin_off), &s->cq)
                 : al_buf_append(&s->cq, s->rin.data + s->rin_off, q_len(&s->rin, s->rin_off));
    if (rc == 0 && q_len(&s->uq, s->uq_off))
        rc = al_relay_prime(&s->tun, 0, s->uq.data + s->uq_off, q_len(&s->uq, s->uq_off));
    if (rc == 0 && q_len(&s->cq, s->cq_off))
        rc = al_relay_prime(&s->tun, 1, s->cq.data + s->cq_off, q_len(&s->cq, s->cq_off));
    al_buf_free_wipe(&s->cin);
    al_buf_free_wipe(&s->rin);
    al_buf_free_wipe(&s->uq);
    al_buf_free_wipe(&s->cq);
    s->cin_off = s->rin_off = s->uq_off = s->cq_off = 0;
    if (rc < 0) {
        sess__tunnel_failed(s, INTERCEPT_END_CLIENT, AL_RELAY_READ, rc);
        return;
    }
    sess__tunnel_run(s, -1, 0);
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

int intercept_session_start(const struct intercept_session_opts *o, struct intercept_session **out,
                            struct al_error *err)
{
    *out = NULL;
    struct intercept_session *s = calloc(1, sizeof *s);
    if (!s) {
        intercept_tls_raw_alert(o->client_fd, MBEDTLS_SSL_ALERT_MSG_INTERNAL_ERROR);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    s->ops = o->ops;
    s->ctx = o->ctx;
    s->srv = intercept_tls_server_ref(o->srv);
    s->cli = intercept_tls_client_ref(o->cli);
    s->pool = o->pool;
    s->fetcher = o->fetcher;
    s->ph = intercept_placeholders_ref(o->ph);
    s->lim = o->limits;
    snprintf(s->sandbox, sizeof s->sandbox, "%s", o->sandbox_id ? o->sandbox_id : "");
    snprintf(s->name, sizeof s->name, "%s", o->name);
    s->port = o->port;
    s->dst = o->dst;
    s->cfd = o->client_fd;
    s->ufd = -1;
    s->plain = o->plaintext;
    char pool_host[POLICY_NAME_MAX + 8];
    snprintf(pool_host, sizeof pool_host, "%s%s", s->plain ? "http:" : "", s->name);
    intercept_pool_key(s->pool_key, s->sandbox, pool_host, s->port);
    al_buf_init(&s->cin, 0);
    al_buf_init(&s->cq, 0);
    al_buf_init(&s->uq, 0);
    al_buf_init(&s->rin, 0);
    egress_http_head_init(&s->reqh, lim_or(s->lim.max_header_bytes, 32 * 1024));
    egress_http_head_init(&s->resph, RESP_HEAD_MAX);
    al_buf_init(&s->saved_head, 0);
    int r = s->plain ? intercept_tls_plain(s->cfd, o->prefix, o->prefix_len, &s->ctls)
                     : intercept_tls_accept(s->srv, s->cfd, s->name, o->prefix, o->prefix_len,
                                            &s->ctls, err);
    if (r < 0 && s->plain) {
        al_error_set(err, r, "out of memory");
        s->done_called = true;
        intercept_session_free(s);
        return r;
    }
    if (r < 0) {
        intercept_tls_raw_alert(o->client_fd, r == -EPERM ? MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED
                                                          : MBEDTLS_SSL_ALERT_MSG_INTERNAL_ERROR);
        s->done_called = true;
        intercept_session_free(s);
        return r;
    }
    s->st = S_HANDSHAKE;
    s->t_chs0 = al_now_ns();
    s->ops->deadline(s->ctx, lim_or(s->lim.handshake_timeout_ms, 10000));
    *out = s;
    sess__run(s);
    return 0;
}

void intercept_session_on_events(struct intercept_session *s, int end, int events)
{
    if (s->st == S_DONE)
        return;
    if (s->st == S_TUNNEL) {
        sess__tunnel_run(s, end, events);
        return;
    }
    if (end == INTERCEPT_END_UPSTREAM && s->st == S_CONNECT &&
        (events & INTERCEPT_TLS_WANT_WRITE)) {
        bool progress = false;
        sess__on_connected(s, &progress);
        if (s->st == S_DONE)
            return;
    }
    sess__run(s);
}

void intercept_session_on_timeout(struct intercept_session *s)
{
    switch (s->st) {
    case S_HANDSHAKE:
        sess__finish(s, "handshake_timeout",
                     "the sandbox did not complete the TLS handshake in time");
        return;
    case S_IDLE:
        intercept_tls_close_notify(s->ctls);
        sess__finish(s, "keepalive_timeout", "");
        return;
    case S_HEAD:
        if (!s->rid[0])
            s->ops->request_id(s->ctx, s->rid);
        sess__deny(s, 408, "request_timeout", "request_head_timeout");
        break;
    case S_FETCH:
        sess__deny(s, 503, "credentials_unavailable", "vault_timeout");
        break;
    case S_CONNECT:
    case S_UP_HS:
        sess__close_upstream(s);
        sess__fail(s, 504, "gateway_timeout", "upstream_connect_timeout", "");
        break;
    case S_FORWARD:
        if (s->resp_started)
            sess__fail(s, 504, "gateway_timeout", "upstream_idle_timeout", "");
        else if (!s->req_done)
            sess__fail(s, 408, "request_timeout", "request_body_timeout", "");
        else
            sess__fail(s, 504, "gateway_timeout", "upstream_response_timeout", "");
        break;
    case S_TUNNEL: {
        uint64_t next;
        if (al_relay_time(&s->tun, al_now_ns(), &next) < 0) {
            sess__close_upstream(s);
            sess__finish(s, "idle_timeout", "");
            return;
        }
        sess__tunnel_run(s, -1, 0); /* lets go what the scrubber held, if that is due */
        return;
    }
    case S_CLOSING:
        sess__finish(s, s->end_why ? s->end_why : "closed", "");
        return;
    default:
        return;
    }
    if (s->st != S_DONE)
        sess__run(s);
}

void intercept_session_abort(struct intercept_session *s, const char *why)
{
    if (s->st == S_DONE)
        return;
    sess__close_upstream(s);
    if (s->ctls && intercept_tls_handshake_done(s->ctls))
        intercept_tls_send_alert(s->ctls, MBEDTLS_SSL_ALERT_MSG_INTERNAL_ERROR);
    sess__finish(s, why, "");
}

void intercept_session_free(struct intercept_session *s)
{
    if (!s)
        return;
    sess__tunnel_stop(s);
    sess__release_request(s);
    if (s->ufd >= 0) {
        if (s->u_reusable && s->pool && s->utls && !s->u_eof && q_len(&s->uq, s->uq_off) == 0 &&
            intercept_tls_out_pending(s->utls) == 0) {
            s->ops->watch(s->ctx, INTERCEPT_END_UPSTREAM, -1, 0);
            intercept_pool_put(s->pool, s->pool_key, s->ufd, s->utls);
            s->ufd = -1;
            s->utls = NULL;
        } else {
            sess__close_upstream(s);
        }
    }
    if (s->tscrub_live)
        intercept_scrub_free(&s->tscrub);
    for (size_t i = 0; i < s->n_used; i++)
        intercept_secret_unref(s->used[i]);
    intercept_tls_free(s->ctls);
    al_buf_free_wipe(&s->cin);
    al_buf_free_wipe(&s->cq);
    al_buf_free_wipe(&s->uq);
    al_buf_free_wipe(&s->rin);
    if (s->reqh.buf)
        sodium_memzero(s->reqh.buf, s->reqh.cap);
    egress_http_head_free(&s->reqh);
    if (s->resph.buf)
        sodium_memzero(s->resph.buf, s->resph.cap); /* may hold a reflected secret */
    egress_http_head_free(&s->resph);
    al_buf_free_wipe(&s->saved_head);
    intercept_placeholders_unref(s->ph);
    intercept_tls_server_unref(s->srv);
    intercept_tls_client_unref(s->cli);
    free(s);
}

void intercept_session_get_stats(const struct intercept_session *s,
                                 struct intercept_session_stats *st)
{
    *st = s->stats;
    st->bytes_up = s->bytes_up;
    st->bytes_down = s->bytes_down;
}
