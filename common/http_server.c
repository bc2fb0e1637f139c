/* common/http_server: the HTTP/1.1 server of http.h, on libuv and llhttp.
 *
 * Owns: listeners (TCP, unix, inherited fds), connections, request parsing, body
 * decoding/buffering/streaming/discarding, responses (Content-Length, chunked,
 * close-delimited for HTTP/1.0), limits and deadlines, and the request lifetime rules
 * written in http.h.
 *
 * How a connection runs. Every piece of work for a connection happens in conn__process,
 * a "frame" that steps a small state machine (headers -> handler -> body -> done ->
 * next request or linger) until it has to wait. User callbacks are only called from
 * inside a frame of their connection; API calls made from inside a callback just record
 * what they want and let the frame pick it up (c->again); API calls made from elsewhere
 * schedule a frame on the server's idle handle. So no user callback ever runs inside an
 * API call, and a request is never freed while a callback that got it is on the stack.
 *
 * Parsing is llhttp with no lenient flag, plus a pre-scan of each header block by the head
 * scanner (common/http_head.h: line ends, obs-fold, field bytes, size) and checks on what
 * llhttp lets through (version, the request-target by common/http_head.h's parser,
 * header-name tokens, Host). llhttp is paused after the headers (so the
 * handler decides about the body before any body byte is parsed) and after each message
 * (so pipelined requests wait their turn). Streamed body bytes are compacted in place in
 * the input buffer during llhttp_execute and handed to the handler after it returns.
 *
 * Memory: an idle connection is one small struct (handle, timer, parser); input is read
 * into a per-thread buffer and copied to the connection only when some is left over
 * (bounded by CONN_IN_MAX, after which reading stops).
 */
#include "http.h"
#include "cleanup.h"
#include "http_internal.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define CONN_IN_MAX   (64 * 1024) /* unparsed input kept while a request is served */
#define LINGER_MS     2000        /* after "close": drop input for this long at most */
#define REJECTING_MAX 64          /* connections being told 503 at the same time */
#define HEAD_MAX      (256 * 1024)

enum conn_phase {
    PH_HEADERS, /* waiting for / reading a request's header block */
    PH_HANDLER, /* on_request ran: waiting for the handler to claim the body or answer */
    PH_BODY,    /* reading the body (buffered, streamed or discarded) */
    PH_DONE,    /* request read: waiting for the response to end and be written */
    PH_LINGER,  /* write side shut: dropping input until EOF or LINGER_MS */
};

enum body_mode { BODY_NONE, BODY_BUFFER, BODY_STREAM, BODY_DISCARD };

struct http_conn;

struct http_req {
    struct al_http_req pub;
    struct http_conn *conn; /* NULL once detached (peer gone, no on_close) */
    struct http__hdrs hdrs;
    void (*close_cb)(struct al_http_req *);
    void (*drain_cb)(struct al_http_req *);
    size_t drain_low;
    al_http_body_done_fn done;
    al_http_body_data_fn on_data;
    al_http_body_end_fn on_end;
    int64_t resp_left; /* Content-Length bytes still to write; -1 when not length-framed */
    bool resp_cl;      /* Content-Length framing (a body is sent) */
    bool resp_chunked; /* chunked framing */
    bool resp_nobody;  /* HEAD, 204, 304: bytes written are dropped */
    bool dispatched;   /* on_request has seen it */
    bool released;     /* the handler is done with it; freed at the next safe point */
    bool final;        /* the server answered for it (body error): responses fail */
};

struct http_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    uv_timer_t timer;
    struct al_http_server *srv;
    struct http_conn *prev, *next;   /* server's list */
    struct http_conn *dprev, *dnext; /* deferred-work list (FIFO) */
    uint64_t dturn;                  /* the idle turn it was queued in */
    llhttp_t parser;
    struct al_http_head_scan scan;
    struct al_http_peer peer;
    struct http_req *req;

    struct http__input in;   /* unparsed input carried between reads */
    char *cb_start, *cb_end; /* streamed body bytes compacted during one execute */

    int64_t req_cl;      /* the request's Content-Length, -1 when absent */
    uint64_t body_bytes; /* buffered or discarded so far */
    uint64_t body_max;
    uint64_t hdr_deadline; /* 0 = idle (no byte of the next request yet) */
    uint64_t idle_since;
    uint64_t t_body, t_write, linger_until;
    uint64_t timer_due;
    size_t queued; /* bytes handed to uv_write and not yet written */
    unsigned n_writes;
    uint32_t busy;
    uint32_t trailer_bytes;
    int err_status; /* set by parser callbacks before they fail */
    const char *err_msg;
    char err_buf[128];
    int dead_err;
    uint8_t phase;
    uint8_t body_mode;
    uint8_t closes; /* handle closes still pending */
    bool is_unix;
    bool again;    /* a frame should run another step */
    bool deferred; /* on the server's deferred list */
    bool reading;
    bool dead;       /* the peer is gone or we gave up: notify, then close */
    bool closing;    /* handles are closing */
    bool rejecting;  /* over max_connections: answering 503 */
    bool keep_alive; /* the request allows reuse */
    bool close_after;
    bool has_body;
    bool head;
    bool http10;
    bool expect_continue;
    bool body_paused;
    bool in_on_data;   /* inside the handler's on_data */
    bool resume_asked; /* al_http_req_resume_body called from inside it */
    bool body_complete;
    bool body_cb_done; /* done/on_end delivered (claimed bodies) */
    bool body_too_big; /* Content-Length over the buffered cap */
    bool resp_started;
    bool resp_ended;
    bool reset_on_close; /* an aborted response the framing cannot show: close with RST */
    bool upgraded;       /* handed to a tunnel: this handle reads and writes no more */
};

struct srv_listener {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    struct al_http_server *srv;
    struct srv_listener *next;
    bool is_unix;
    int port;
    char *unix_path; /* unlinked on close if it is still our socket */
    dev_t dev;
    ino_t ino;
};

struct al_http_server {
    uv_loop_t *loop;
    struct al_http_limits lim;
    al_http_handler_fn on_request;
    void *ctx;
    char *server_name;
    struct srv_listener *listeners;
    size_t n_listeners_open;
    struct http_conn *conns;
    size_t n_conns, n_rejecting;
    uv_idle_t idle;
    struct http_conn *defer_head, *defer_tail;
    uint64_t turn;
    struct al_buf head;             /* scratch for response heads */
    struct al_http_tunnel *tunnels; /* taken over by al_http_req_upgrade, still open */
    size_t n_tunnels;
    bool closing;
    bool idle_closing;
    void (*done)(void *arg);
    void *done_arg;
};

static void conn__process(struct http_conn *c);
static void conn__undefer(struct http_conn *c);
static void conn__close(struct http_conn *c);
static int conn__write(struct http_conn *c, const uv_buf_t *bufs, unsigned n);
static const llhttp_settings_t *srv__settings(void);
static void srv__maybe_done(struct al_http_server *s);

static inline uint64_t conn__now(const struct http_conn *c)
{
    return uv_now(c->srv->loop);
}

/* ---- requests ---------------------------------------------------------------------- */
static struct http_req *req__new(struct http_conn *c)
{
    struct http_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    const struct al_http_limits *lim = &c->srv->lim;
    /* The strings are the raw header block minus its syntax, plus a copy of the path. */
    http__hdrs_init(&r->hdrs, 2 * lim->max_header_bytes + 64, lim->max_headers);
    al_buf_reserve(&r->hdrs.strs, 448); /* a typical header block, in one allocation */
    r->conn = c;
    r->pub.loop = c->srv->loop;
    r->pub.server = c->srv;
    r->pub.content_length = -1;
    r->resp_left = -1;
    al_buf_init(&r->pub.body, lim->max_body_bytes);
    atomic_fetch_add(&http__live_reqs, 1);
    return r;
}

static void req__free(struct http_req *r)
{
    http__hdrs_free(&r->hdrs);
    al_buf_free(&r->pub.body);
    free(r);
    atomic_fetch_sub(&http__live_reqs, 1);
}

/* Frees r now if nothing can still be using it. */
static void req__maybe_free(struct http_req *r)
{
    if (!r->released)
        return;
    struct http_conn *c = r->conn;
    if (c && c->busy)
        return; /* the frame frees it when it unwinds */
    if (c && c->req == r)
        c->req = NULL;
    req__free(r);
}

/* ---- scheduling -------------------------------------------------------------------- */
static void srv__on_idle(uv_idle_t *h)
{
    struct al_http_server *s = h->data;
    /* FIFO; connections queued during this turn (dturn == turn) wait for the next one. */
    s->turn++;
    while (s->defer_head && s->defer_head->dturn != s->turn) {
        struct http_conn *c = s->defer_head;
        conn__undefer(c);
        conn__process(c);
    }
    if (!s->defer_head)
        uv_idle_stop(&s->idle);
}

static void conn__undefer(struct http_conn *c)
{
    if (!c->deferred)
        return;
    struct al_http_server *s = c->srv;
    if (c->dprev)
        c->dprev->dnext = c->dnext;
    else
        s->defer_head = c->dnext;
    if (c->dnext)
        c->dnext->dprev = c->dprev;
    else
        s->defer_tail = c->dprev;
    c->dprev = c->dnext = NULL;
    c->deferred = false;
}

/* Something changed for c outside its frame logic: run a frame soon (never now: the
 * caller may be a user callback that is not ready for another one). */
static void conn__schedule(struct http_conn *c)
{
    if (c->closing)
        return;
    if (c->busy) {
        c->again = true;
        return;
    }
    if (c->deferred)
        return;
    struct al_http_server *s = c->srv;
    c->deferred = true;
    c->dturn = s->turn; /* the turn in progress, if any, will not pick it up */
    c->dnext = NULL;
    c->dprev = s->defer_tail;
    if (s->defer_tail)
        s->defer_tail->dnext = c;
    else
        s->defer_head = c;
    s->defer_tail = c;
    uv_idle_start(&s->idle, srv__on_idle);
}

static void conn__kill(struct http_conn *c, int err)
{
    if (c->dead || c->closing)
        return;
    c->dead = true;
    c->dead_err = err;
    conn__schedule(c);
}

/* ---- output ------------------------------------------------------------------------ */
static void conn__on_write(uv_write_t *wr, int status)
{
    struct http__wreq *w = (struct http__wreq *)wr;
    struct http_conn *c = w->owner;
    c->queued -= w->len;
    c->n_writes--;
    free(w);
    if (c->closing)
        return;
    c->t_write = conn__now(c);
    if (status < 0) {
        conn__kill(c, -ECONNRESET);
        return;
    }
    conn__process(c);
}

static int conn__write(struct http_conn *c, const uv_buf_t *bufs, unsigned n)
{
    if (c->dead || c->closing || c->phase == PH_LINGER)
        return -EPIPE;
    size_t q = 0;
    int rc = http__write(&(struct http__wdest){&c->h.stream, c->n_writes == 0, c, conn__on_write},
                         bufs, n, &q);
    if (rc < 0) {
        conn__kill(c, -ECONNRESET);
        return -EPIPE;
    }
    if (q) {
        if (c->queued == 0)
            c->t_write = conn__now(c);
        c->queued += q;
        c->n_writes++;
    }
    return 0;
}

static int conn__write1(struct http_conn *c, const void *data, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    return conn__write(c, &b, 1);
}

/* Head building is on every response: plain appends, no printf. */
static int head__line(struct al_buf *b, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    int rc = al_buf_reserve(b, nl + vl + 4);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    memcpy(p, name, nl);
    p[nl] = ':';
    p[nl + 1] = ' ';
    memcpy(p + nl + 2, value, vl);
    p[nl + 2 + vl] = '\r';
    p[nl + 3 + vl] = '\n';
    b->len += nl + vl + 4;
    b->data[b->len] = '\0';
    return 0;
}

static char *head__u64(char *end, uint64_t v)
{
    *end = '\0';
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static int head__status(struct al_buf *b, int status)
{
    char num[24];
    int rc = al_buf_appends(b, "HTTP/1.1 ");
    if (!rc)
        rc = al_buf_appends(b, head__u64(num + sizeof num - 1, (uint64_t)status));
    if (!rc)
        rc = al_buf_appends(b, " ");
    if (!rc)
        rc = al_buf_appends(b, al_http_status_text(status));
    return rc ? rc : al_buf_append(b, "\r\n", 2);
}

static int head__length(struct al_buf *b, uint64_t len)
{
    char num[24];
    return head__line(b, "Content-Length", head__u64(num + sizeof num - 1, len));
}

/* Appends "Date", "Server" (unless the handler set one) and "Connection". */
static int head__common(struct al_http_server *s, struct al_buf *b, bool user_server, bool keep)
{
    int rc = head__line(b, "Date", http__date());
    if (!rc && s->server_name && !user_server)
        rc = head__line(b, "Server", s->server_name);
    if (!rc)
        rc = al_buf_appends(b, keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    return rc;
}

/* An answer the server writes itself (errors, limits): JSON body, then close. */
static void conn__send_error(struct http_conn *c, int status, const char *msg)
{
    if (c->resp_started || c->dead)
        return;
    char body[1200];
    size_t blen = http__error_body(body, sizeof body, status, msg);
    struct al_buf *b = &c->srv->head;
    b->len = 0;
    int rc = head__status(b, status);
    if (!rc)
        rc = head__common(c->srv, b, false, false);
    if (!rc)
        rc = head__line(b, "Content-Type", "application/json");
    if (!rc)
        rc = head__length(b, blen);
    if (!rc)
        rc = al_buf_append(b, "\r\n", 2);
    c->resp_started = c->resp_ended = true;
    c->close_after = true;
    if (c->req)
        c->req->final = true;
    if (rc) {
        conn__kill(c, rc);
        return;
    }
    uv_buf_t bufs[2] = {uv_buf_init(b->data, (unsigned)b->len), uv_buf_init(body, (unsigned)blen)};
    conn__write(c, bufs, c->head ? 1 : 2);
}

/* ---- input ------------------------------------------------------------------------- */
static inline void conn__consume(struct http_conn *c, size_t n)
{
    if (n) { /* cur may be NULL when there was nothing to consume */
        c->in.cur += n;
        c->in.cur_len -= n;
    }
}

/* ---- timers ------------------------------------------------------------------------ */
static uint64_t conn__deadline(const struct http_conn *c)
{
    const struct al_http_limits *lim = &c->srv->lim;
    uint64_t due = 0;
#define DUE(t)                \
    do {                      \
        uint64_t t_ = (t);    \
        if (!due || t_ < due) \
            due = t_;         \
    } while (0)
    switch (c->phase) {
    case PH_HEADERS:
        DUE(c->hdr_deadline ? c->hdr_deadline : c->idle_since + lim->idle_timeout_ms);
        break;
    case PH_BODY:
        if (!c->body_paused)
            DUE(c->t_body + lim->body_timeout_ms);
        break;
    case PH_LINGER:
        DUE(c->linger_until);
        break;
    default:
        break;
    }
    if (c->queued)
        DUE(c->t_write + lim->write_timeout_ms);
#undef DUE
    return due;
}

static void conn__on_timer(uv_timer_t *t);

static void conn__arm(struct http_conn *c)
{
    uint64_t due = conn__deadline(c);
    if (!due) {
        if (c->timer_due) {
            uv_timer_stop(&c->timer);
            c->timer_due = 0;
        }
        return;
    }
    /* A later deadline is left to the timer, which re-arms when it fires early. */
    if (c->timer_due && c->timer_due <= due)
        return;
    uint64_t now = conn__now(c);
    c->timer_due = due;
    uv_timer_start(&c->timer, conn__on_timer, due > now ? due - now : 0, 0);
}

static void conn__reject(struct http_conn *c, int status, const char *msg);
static void conn__body_error(struct http_conn *c, int status, const char *msg, int err);

static void conn__on_timer(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    c->timer_due = 0;
    if (c->closing)
        return;
    uint64_t now = conn__now(c), due = conn__deadline(c);
    if (!due)
        return;
    if (due > now) {
        conn__arm(c);
        return;
    }
    const struct al_http_limits *lim = &c->srv->lim;
    char msg[128];
    c->busy++; /* the actions below may call the handler: do it inside a frame */
    if (c->queued && now >= c->t_write + lim->write_timeout_ms) {
        conn__kill(c, -ETIMEDOUT);
    } else if (c->phase == PH_HEADERS) {
        if (c->req && c->hdr_deadline) {
            snprintf(msg, sizeof msg, "request headers not complete within %u ms",
                     lim->header_timeout_ms);
            conn__reject(c, 408, msg);
        } else {
            conn__close(c); /* idle keep-alive, or a connection that never sent a byte */
        }
    } else if (c->phase == PH_BODY) {
        snprintf(msg, sizeof msg, "no request body bytes for %u ms", lim->body_timeout_ms);
        conn__body_error(c, 408, msg, -ETIMEDOUT);
    } else if (c->phase == PH_LINGER) {
        conn__close(c);
    }
    c->busy--;
    conn__process(c);
}

/* ---- parser callbacks -------------------------------------------------------------- */
static int conn__fail_cb(struct http_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int conn__fail_cb(struct http_conn *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err_buf, sizeof c->err_buf, fmt, ap);
    va_end(ap);
    c->err_status = status;
    c->err_msg = c->err_buf;
    return HPE_USER;
}

static int conn__hdr_rc(struct http_conn *c, int rc)
{
    if (rc == -E2BIG) {
        if (c->req->hdrs.n >= c->req->hdrs.max_n)
            return conn__fail_cb(c, 431, "more than %zu header fields", c->req->hdrs.max_n);
        return conn__fail_cb(c, 431, "header block larger than %zu bytes",
                             c->srv->lim.max_header_bytes);
    }
    if (rc == -EINVAL)
        return conn__fail_cb(c, 400, "malformed header field");
    if (rc)
        return conn__fail_cb(c, 500, "out of memory");
    return 0;
}

static int conn__trailer(struct http_conn *c, size_t len)
{
    c->trailer_bytes += (uint32_t)AL_MIN(len, UINT32_MAX / 2);
    if (c->trailer_bytes > c->srv->lim.max_header_bytes)
        return conn__fail_cb(c, 431, "trailer fields larger than %zu bytes",
                             c->srv->lim.max_header_bytes);
    return 0;
}

static int srv__on_url(llhttp_t *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    return conn__hdr_rc(c, al_buf_append(&c->req->hdrs.strs, at, len));
}

static int srv__on_url_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    return conn__hdr_rc(c, al_buf_append(&c->req->hdrs.strs, "", 1));
}

static int srv__on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (c->phase != PH_HEADERS)
        return conn__trailer(c, len);
    return conn__hdr_rc(c, http__hdrs_field(&c->req->hdrs, at, len));
}

static int srv__on_header_field_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    if (c->phase != PH_HEADERS)
        return 0;
    return conn__hdr_rc(c, http__hdrs_field_done(&c->req->hdrs));
}

static int srv__on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (c->phase != PH_HEADERS)
        return conn__trailer(c, len);
    return conn__hdr_rc(c, http__hdrs_value(&c->req->hdrs, at, len));
}

static int srv__on_header_value_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    if (c->phase != PH_HEADERS)
        return 0;
    return conn__hdr_rc(c, http__hdrs_value_done(&c->req->hdrs));
}

static int srv__on_headers_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->req;
    struct al_http_req *q = &r->pub;

    if (p->http_major != 1 || p->http_minor > 1)
        return conn__fail_cb(c, 505, "HTTP/%u.%u is not supported (use HTTP/1.1)", p->http_major,
                             p->http_minor);
    if (p->method == HTTP_CONNECT)
        return conn__fail_cb(c, 405, "CONNECT is not supported by this server");
    if (r->hdrs.in_field || r->hdrs.in_value)
        return conn__fail_cb(c, 400, "malformed header field");
    const char *target = r->hdrs.strs.data ? r->hdrs.strs.data : "", *why = NULL;
    size_t tlen = strlen(target);
    struct al_http_target t;
    if (al_http_target_parse(target, tlen, 0, &t, &why) < 0)
        return conn__fail_cb(c, 400, "invalid request-target: %s", al_http_target_message(why));
    if (t.form == AL_HTTP_TARGET_ASTERISK && p->method != HTTP_OPTIONS)
        return conn__fail_cb(c, 400, "the request-target \"*\" is for OPTIONS only");
    /* The path as its own string (the query stays in the target, which it ends); an
     * absolute-form's is the path after its authority, "/" when it has none. Offsets, since
     * the buffer may move. */
    bool root = t.form != AL_HTTP_TARGET_ASTERISK && t.path_len == 0;
    size_t poff = t.form == AL_HTTP_TARGET_ASTERISK ? 0 : (size_t)(t.path - target);
    size_t plen = t.form == AL_HTTP_TARGET_ASTERISK ? tlen : root ? 1 : t.path_len;
    size_t qoff = t.has_query ? (size_t)(t.query - target) : tlen, path_off;
    /* The path is copied from the same buffer: make room first so it does not move. */
    int rc = al_buf_reserve(&r->hdrs.strs, plen + 1);
    if (rc)
        return conn__hdr_rc(c, rc);
    target = r->hdrs.strs.data;
    rc = http__hdrs_add_string(&r->hdrs, root ? "/" : target + poff, plen, &path_off);
    if (!rc)
        rc = http__hdrs_finish(&r->hdrs);
    if (rc)
        return conn__hdr_rc(c, rc);
    target = r->hdrs.strs.data; /* may have moved */
    q->method = llhttp_method_name((llhttp_method_t)p->method);
    q->target = target;
    q->path = r->hdrs.strs.data + path_off;
    q->query = target + qoff;
    q->http_minor = p->http_minor;
    q->headers = r->hdrs.v;
    q->n_headers = r->hdrs.n;

    size_t hosts = 0;
    for (size_t i = 0; i < r->hdrs.n; i++) {
        const char *name = r->hdrs.v[i].name;
        if (!http__is_token(name, strlen(name)))
            return conn__fail_cb(c, 400,
                                 "invalid header name (a token without spaces is "
                                 "required before ':')");
        if (strcasecmp(name, "host") == 0)
            hosts++;
    }
    if (hosts > 1 || (hosts == 0 && p->http_minor == 1))
        return conn__fail_cb(c, 400, "HTTP/1.1 requests need exactly one Host header (got %zu)",
                             hosts);
    c->http10 = p->http_minor == 0;
    q->chunked = (p->flags & F_CHUNKED) != 0;
    q->content_length = (p->flags & F_CONTENT_LENGTH) ? (int64_t)p->content_length : -1;
    if (c->http10 && (p->flags & F_TRANSFER_ENCODING))
        return conn__fail_cb(c, 400, "Transfer-Encoding is not allowed in HTTP/1.0 requests");
    if ((p->flags & F_TRANSFER_ENCODING) && !q->chunked)
        return conn__fail_cb(c, 400,
                             "Transfer-Encoding must end with \"chunked\" (RFC 9112 "
                             "6.3)");
    const char *expect = al_http_req_header(q, "expect");
    if (expect) {
        if (strcasecmp(expect, "100-continue") != 0 || al_http_req_header_count(q, "expect") > 1)
            return conn__fail_cb(c, 417, "unsupported expectation (only \"100-continue\")");
        c->expect_continue = !c->http10;
    }
    c->head = p->method == HTTP_HEAD;
    c->has_body = q->chunked || q->content_length > 0;
    c->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade;
    q->upgrade = p->upgrade && !c->http10;
    return HPE_PAUSED;
}

static int srv__on_body(llhttp_t *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    c->t_body = conn__now(c);
    switch (c->body_mode) {
    case BODY_BUFFER: {
        int rc = al_buf_append(&c->req->pub.body, at, len);
        if (rc == -E2BIG)
            return conn__fail_cb(c, 413, "request body larger than %" PRIu64 " bytes", c->body_max);
        if (rc)
            return conn__fail_cb(c, 500, "out of memory");
        break;
    }
    case BODY_STREAM:
        /* Move the decoded bytes down over the chunk framing already parsed. */
        if (!c->cb_start) {
            c->cb_start = c->cb_end = (char *)at;
        } else if (c->cb_end != at) {
            memmove(c->cb_end, at, len);
        }
        c->cb_end += len;
        break;
    default:
        c->body_bytes += len;
        if (c->body_bytes > c->body_max)
            return conn__fail_cb(c, -1, "unread request body larger than %" PRIu64 " bytes",
                                 c->body_max);
        break;
    }
    return 0;
}

static int srv__on_message_complete(llhttp_t *p)
{
    (void)p;
    return HPE_PAUSED;
}

/* llhttp_settings_init zeroes the struct: designated initializers do the same. */
static const llhttp_settings_t srv__llhttp_table = {
    .on_url = srv__on_url,
    .on_url_complete = srv__on_url_complete,
    .on_header_field = srv__on_header_field,
    .on_header_field_complete = srv__on_header_field_complete,
    .on_header_value = srv__on_header_value,
    .on_header_value_complete = srv__on_header_value_complete,
    .on_headers_complete = srv__on_headers_complete,
    .on_body = srv__on_body,
    .on_message_complete = srv__on_message_complete,
};

static const llhttp_settings_t *srv__settings(void)
{
    return &srv__llhttp_table;
}

/* ---- the state machine ------------------------------------------------------------- */
/* An error before the handler saw the request: answer it ourselves, then close. */
static void conn__reject(struct http_conn *c, int status, const char *msg)
{
    if (status > 0)
        conn__send_error(c, status, msg);
    c->close_after = true;
    c->resp_started = c->resp_ended = true;
    c->phase = PH_DONE;
    if (c->req && !c->req->released) {
        c->req->released = true; /* never shown to a handler */
        c->req->final = true;
    }
}

static int conn__status_err(int status)
{
    switch (status) {
    case 413:
        return -E2BIG;
    case 408:
        return -ETIMEDOUT;
    case 400:
        return -EBADMSG;
    default:
        return -ECONNRESET;
    }
}

/* A claimed or discarded body failed. Answer if no response has started, otherwise the
 * connection cannot be saved; tell the body callback, which is then final. */
static void conn__body_error(struct http_conn *c, int status, const char *msg, int err)
{
    struct http_req *r = c->req;
    if (status > 0 && !c->resp_started)
        conn__send_error(c, status, msg);
    else if (!c->resp_ended)
        conn__kill(c, err);
    c->close_after = true;
    c->phase = PH_DONE;
    if (r && !r->released && !c->body_cb_done &&
        (c->body_mode == BODY_BUFFER || c->body_mode == BODY_STREAM)) {
        c->body_cb_done = true;
        r->final = true;
        if (c->body_mode == BODY_BUFFER)
            r->done(&r->pub, err);
        else
            r->on_end(&r->pub, err);
        r->released = true;
    }
    c->body_mode = BODY_DISCARD;
}

static void conn__parse_error(struct http_conn *c, llhttp_errno_t e, bool in_body)
{
    int status = c->err_status;
    char msg[200];
    if (status) {
        snprintf(msg, sizeof msg, "%s", c->err_msg ? c->err_msg : "bad request");
    } else {
        status = 400;
        snprintf(msg, sizeof msg, "bad request: %s (%s)", llhttp_get_error_reason(&c->parser),
                 llhttp_errno_name(e));
    }
    if (e == HPE_PAUSED_H2_UPGRADE) {
        status = 505;
        snprintf(msg, sizeof msg, "HTTP/2 is not supported (use HTTP/1.1)");
    }
    if (in_body)
        conn__body_error(c, status, msg, conn__status_err(status));
    else
        conn__reject(c, status, msg);
}

static void conn__dispatch(struct http_conn *c)
{
    struct http_req *r = c->req;
    r->pub.peer = c->peer;
    r->dispatched = true;
    c->req_cl = r->pub.content_length;
    c->phase = PH_HANDLER;
    c->body_mode = BODY_NONE;
    c->body_bytes = 0;
    c->srv->on_request(&r->pub, c->srv->ctx);
}

static bool conn__read_headers(struct http_conn *c)
{
    if (c->in.cur_len == 0)
        return false;
    if (!c->req) {
        c->req = req__new(c);
        if (!c->req) {
            conn__kill(c, -ENOMEM);
            return false;
        }
        if (!c->hdr_deadline)
            c->hdr_deadline = conn__now(c) + c->srv->lim.header_timeout_ms;
    }
    size_t used = 0;
    int rc = al_http_head_scan(&c->scan, c->in.cur, c->in.cur_len, &used);
    if (rc < 0) {
        char msg[160];
        if (rc == -E2BIG)
            snprintf(msg, sizeof msg, "request line and headers larger than %zu bytes",
                     c->srv->lim.max_header_bytes);
        else
            snprintf(msg, sizeof msg, "bad request: %s", al_http_head_scan_message(&c->scan));
        conn__reject(c, rc == -E2BIG ? 431 : 400, msg);
        return true;
    }
    llhttp_errno_t e = llhttp_execute(&c->parser, c->in.cur, used);
    if (e == HPE_OK) {
        conn__consume(c, used);
        if (rc == 1) {
            if (c->parser.method == HTTP_PRI)
                conn__reject(c, 505, "HTTP/2 is not supported (use HTTP/1.1)");
            else
                conn__reject(c, 400, "bad request: malformed header block");
            return true;
        }
        return false;
    }
    if (e == HPE_PAUSED) {
        size_t u = (size_t)(llhttp_get_error_pos(&c->parser) - c->in.cur);
        conn__consume(c, u);
        if (rc != 1 || u != used) {
            conn__reject(c, 400, "bad request: malformed header block");
            return true;
        }
        conn__dispatch(c);
        return true;
    }
    conn__parse_error(c, e, false);
    return true;
}

static bool conn__wait_handler(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (c->body_mode == BODY_BUFFER || c->body_mode == BODY_STREAM) {
        if (c->body_mode == BODY_BUFFER && c->body_too_big) {
            char msg[128];
            snprintf(msg, sizeof msg, "request body of %" PRId64 " bytes is larger than %" PRIu64,
                     c->req_cl, c->body_max);
            conn__body_error(c, 413, msg, -E2BIG);
            return true;
        }
        if (c->expect_continue && c->has_body && !c->resp_started) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            conn__write1(c, cont, sizeof cont - 1);
        }
        llhttp_resume(&c->parser);
        c->phase = PH_BODY;
        c->t_body = conn__now(c);
        return true;
    }
    if (!c->resp_started && !(r && r->released))
        return false; /* the handler has not decided yet */
    /* Answered without claiming the body: drop it, or do not even read it. */
    c->body_mode = BODY_DISCARD;
    c->body_max = c->srv->lim.max_body_bytes;
    if (c->has_body && (c->expect_continue || c->req_cl > (int64_t)c->body_max)) {
        c->close_after = true;
        c->body_complete = true;
        c->phase = PH_DONE;
        return true;
    }
    llhttp_resume(&c->parser);
    c->phase = PH_BODY;
    c->t_body = conn__now(c);
    return true;
}

static bool conn__read_body(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (c->body_complete) {
        if (c->body_paused)
            return false;
        c->phase = PH_DONE;
        if (r && !r->released && !c->body_cb_done &&
            (c->body_mode == BODY_BUFFER || c->body_mode == BODY_STREAM)) {
            c->body_cb_done = true;
            if (c->body_mode == BODY_BUFFER) {
                if (!r->pub.body.data && al_buf_reserve(&r->pub.body, 0) == 0)
                    r->pub.body.data[0] = '\0'; /* "" rather than NULL for an empty body */
                r->done(&r->pub, 0);
            } else {
                r->on_end(&r->pub, 0);
            }
        }
        return true;
    }
    if (c->body_paused)
        return false;
    if (c->in.cur_len == 0 && c->has_body)
        return false;
    c->cb_start = c->cb_end = NULL;
    c->err_status = 0;
    static char empty[1];
    char *at = c->in.cur ? c->in.cur : empty;
    llhttp_errno_t e = llhttp_execute(&c->parser, at, c->in.cur_len);
    size_t used = e == HPE_OK ? c->in.cur_len : (size_t)(llhttp_get_error_pos(&c->parser) - at);
    char *data = c->cb_start;
    size_t dlen = data ? (size_t)(c->cb_end - data) : 0;
    conn__consume(c, used);
    if (e != HPE_OK && e != HPE_PAUSED && e != HPE_PAUSED_UPGRADE) {
        if (c->err_status == -1) { /* discarded body over the cap: just close */
            c->close_after = true;
            c->phase = PH_DONE;
            c->body_complete = true;
            return true;
        }
        /* Bytes decoded before the error still go to the handler, then the error. */
        if (dlen && c->body_mode == BODY_STREAM && r && !r->released)
            r->on_data(&r->pub, data, dlen);
        if (c->body_mode != BODY_DISCARD || !c->resp_ended)
            conn__parse_error(c, e, true);
        else {
            c->close_after = true;
            c->phase = PH_DONE;
        }
        return true;
    }
    if (e != HPE_OK)
        c->body_complete = true;
    if (dlen && c->body_mode == BODY_STREAM && r && !r->released) {
        c->in_on_data = true;
        c->resume_asked = false;
        int pause = r->on_data(&r->pub, data, dlen);
        c->in_on_data = false;
        if (pause && !c->resume_asked && c->body_mode == BODY_STREAM)
            c->body_paused = true;
    }
    return c->body_complete || c->in.cur_len > 0;
}

static void conn__on_shutdown(uv_shutdown_t *sh, int status)
{
    (void)status;
    free(sh);
}

/* The request is read; once the response has ended and been written, go on. */
static bool conn__finish_request(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (r && !r->released)
        return false;
    if (!c->resp_ended || c->queued)
        return false;
    if (r) {
        c->req = NULL;
        req__free(r);
    }
    if (c->close_after || !c->keep_alive || c->srv->closing) {
        if (c->reset_on_close) {
            conn__close(c);
            return false;
        }
        c->phase = PH_LINGER;
        c->linger_until = conn__now(c) + LINGER_MS;
        c->in.cur_len = 0; /* pipelined requests after "close" are not served */
        uv_shutdown_t *sh = malloc(sizeof *sh);
        if (!sh || uv_shutdown(sh, &c->h.stream, conn__on_shutdown) != 0) {
            free(sh);
            conn__close(c);
        }
        return false;
    }
    llhttp_resume(&c->parser);
    al_http_head_scan_init(&c->scan, true, c->srv->lim.max_header_bytes);
    c->phase = PH_HEADERS;
    c->hdr_deadline = 0;
    c->idle_since = conn__now(c);
    c->body_mode = BODY_NONE;
    c->body_paused = c->body_complete = c->body_cb_done = c->body_too_big = false;
    c->resp_started = c->resp_ended = false;
    c->expect_continue = c->has_body = c->head = false;
    c->trailer_bytes = 0;
    return c->in.cur_len > 0;
}

/* The connection is dead: tell whoever holds its request, then close. */
static void conn__die(struct http_conn *c)
{
    struct http_req *r = c->req;
    int err = c->dead_err ? c->dead_err : -ECONNRESET;
    if (r && !r->released && r->dispatched) {
        if (!c->body_cb_done && (c->body_mode == BODY_BUFFER || c->body_mode == BODY_STREAM) &&
            c->phase != PH_HEADERS) {
            c->body_cb_done = true;
            r->final = true;
            if (c->body_mode == BODY_BUFFER)
                r->done(&r->pub, err);
            else
                r->on_end(&r->pub, err);
            r->released = true;
        } else if (r->close_cb) {
            void (*cb)(struct al_http_req *) = r->close_cb;
            r->close_cb = NULL;
            cb(&r->pub);
            r->released = true;
        } else {
            if (r->drain_cb) { /* so that a handler waiting to write more notices */
                void (*cb)(struct al_http_req *) = r->drain_cb;
                r->drain_cb = NULL;
                cb(&r->pub);
            }
            if (!r->released) { /* detach: the handler still owns it until it ends it */
                r->conn = NULL;
                c->req = NULL;
            }
        }
    }
    if (c->req) {
        req__free(c->req);
        c->req = NULL;
    }
    conn__close(c);
}

static void conn__step(struct http_conn *c)
{
    for (;;) {
        if (c->closing)
            return;
        if (c->dead) {
            conn__die(c);
            return;
        }
        struct http_req *r = c->req;
        if (r && r->drain_cb && !r->released && c->queued <= r->drain_low) {
            void (*cb)(struct al_http_req *) = r->drain_cb;
            r->drain_cb = NULL;
            cb(&r->pub);
            continue;
        }
        bool more;
        switch (c->phase) {
        case PH_HEADERS:
            more = conn__read_headers(c);
            break;
        case PH_HANDLER:
            more = conn__wait_handler(c);
            break;
        case PH_BODY:
            more = conn__read_body(c);
            break;
        case PH_DONE:
            more = conn__finish_request(c);
            break;
        default:
            more = false;
            break;
        }
        if (!more)
            return;
    }
}

static void conn__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void conn__update_reading(struct http_conn *c)
{
    bool want = false;
    if (!c->dead && !c->closing && !c->upgraded) {
        switch (c->phase) {
        case PH_HEADERS:
        case PH_LINGER:
            want = true;
            break;
        case PH_BODY:
            want = !c->body_paused;
            break;
        default:
            want = c->in.len < CONN_IN_MAX;
            break;
        }
    }
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, http__alloc_cb, conn__on_read) == 0)
            c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
}

static void conn__process(struct http_conn *c)
{
    if (c->closing)
        return;
    if (c->busy) {
        c->again = true;
        return;
    }
    conn__undefer(c);
    c->busy++;
    if (!c->in.cur && c->in.len) {
        c->in.cur = c->in.buf;
        c->in.cur_len = c->in.len;
    }
    do {
        c->again = false;
        conn__step(c);
    } while (c->again && !c->closing);
    c->busy--;
    if (c->closing)
        return;
    if (c->req && c->req->released) {
        req__free(c->req);
        c->req = NULL;
    }
    if (c->phase == PH_LINGER)
        c->in.cur_len = 0;
    if (http__input_save(&c->in) < 0) {
        conn__kill(c, -ENOMEM);
        return;
    }
    if (c->phase == PH_HEADERS && !c->req)
        http__input_trim(&c->in);
    conn__update_reading(c);
    conn__arm(c);
}

/* ---- connection I/O ---------------------------------------------------------------- */
static void conn__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = st->data;
    if (nread > 0 && !c->closing && !c->dead) {
        if (c->phase == PH_LINGER) {
            /* dropped */
        } else if (http__input_feed(&c->in, buf->base, (size_t)nread) < 0) {
            http__release_buf(buf);
            conn__kill(c, -ENOMEM);
            return;
        } else {
            conn__process(c);
        }
        /* conn__process saved what it did not use; if it could not run (closing), drop. */
        c->in.cur = NULL;
        c->in.cur_len = 0;
    } else if (nread < 0 && !c->closing) {
        if (c->phase == PH_LINGER || (c->phase == PH_HEADERS && !c->req)) {
            http__release_buf(buf);
            conn__close(c);
            return;
        }
        if (c->phase == PH_DONE && c->resp_ended) {
            c->close_after = true; /* finish writing the answer, then close */
            uv_read_stop(&c->h.stream);
            c->reading = false;
        } else {
            c->dead = true;
            c->dead_err = nread == UV_EOF ? -ECONNRESET : (int)nread;
        }
        http__release_buf(buf);
        conn__process(c);
        return;
    }
    http__release_buf(buf);
}

static void conn__on_closed(uv_handle_t *h)
{
    struct http_conn *c = h->data;
    if (--c->closes)
        return;
    struct al_http_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    if (c->rejecting)
        s->n_rejecting--;
    free(c->in.buf);
    free(c);
    atomic_fetch_sub(&http__live_conns, 1);
    srv__maybe_done(s);
}

static void conn__close(struct http_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    conn__undefer(c);
    if (c->req) { /* normally released or never dispatched; otherwise detach it */
        if (c->req->released || !c->req->dispatched)
            req__free(c->req);
        else
            c->req->conn = NULL;
        c->req = NULL;
    }
    c->closes = 2;
    if (!c->reset_on_close || c->is_unix || uv_tcp_close_reset(&c->h.tcp, conn__on_closed) != 0)
        uv_close(&c->h.handle, conn__on_closed);
    uv_close((uv_handle_t *)&c->timer, conn__on_closed);
}

static struct http_conn *conn__new(struct al_http_server *s, bool is_unix)
{
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = s;
    c->is_unix = is_unix;
    int rc = is_unix ? uv_pipe_init(s->loop, &c->h.pipe, 0) : uv_tcp_init(s->loop, &c->h.tcp);
    if (rc) {
        free(c);
        return NULL;
    }
    uv_timer_init(s->loop, &c->timer);
    c->h.handle.data = c;
    c->timer.data = c;
    llhttp_init(&c->parser, HTTP_REQUEST, srv__settings());
    al_http_head_scan_init(&c->scan, true, s->lim.max_header_bytes);
    c->parser.data = c;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    atomic_fetch_add(&http__live_conns, 1);
    return c;
}

/* Who is on the other end, from the socket (unless a TLS front said so already). */
static void conn__peer(struct http_conn *c)
{
    uv_os_fd_t fd = -1;
    uv_fileno(&c->h.handle, &fd);
    c->peer.is_unix = c->is_unix;
    c->peer.uid = (uid_t)-1;
    c->peer.gid = (gid_t)-1;
    c->peer.pid = -1;
    int domain = AF_UNIX;
    socklen_t dlen = sizeof domain;
    if (c->is_unix && fd >= 0)
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen);
    if (c->is_unix && domain == AF_VSOCK) {
        c->peer.is_unix = false; /* no SO_PEERCRED on vsock: uid/pid stay -1 */
        socklen_t len = sizeof c->peer.addr;
        if (getpeername(fd, (struct sockaddr *)&c->peer.addr, &len) == 0)
            c->peer.addrlen = len;
    } else if (c->is_unix) {
        struct ucred cr;
        socklen_t len = sizeof cr;
        if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
            c->peer.uid = cr.uid;
            c->peer.gid = cr.gid;
            c->peer.pid = cr.pid;
        }
        c->peer.addr.ss_family = AF_UNIX;
        c->peer.addrlen = sizeof(sa_family_t);
    } else {
        int len = sizeof c->peer.addr;
        if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&c->peer.addr, &len) == 0)
            c->peer.addrlen = (socklen_t)len;
        uv_tcp_nodelay(&c->h.tcp, 1);
    }
}

static void conn__start(struct http_conn *c)
{
    struct al_http_server *s = c->srv;
    if (!c->peer.tls)
        conn__peer(c);
    c->phase = PH_HEADERS;
    c->idle_since = uv_now(s->loop);
    c->hdr_deadline = c->idle_since + s->lim.header_timeout_ms;
    if (!c->rejecting && s->n_conns + s->n_tunnels - s->n_rejecting > s->lim.max_connections) {
        c->rejecting = true;
        s->n_rejecting++;
        if (s->n_rejecting > REJECTING_MAX) {
            conn__close(c);
            return;
        }
        conn__reject(c, 503, "too many connections; retry later");
        c->keep_alive = false;
    }
    conn__process(c);
}

/* ---- listeners --------------------------------------------------------------------- */
static void srv__on_connection(uv_stream_t *ls, int status)
{
    struct srv_listener *l = ls->data;
    struct al_http_server *s = l->srv;
    if (status < 0) {
        al_warn("http: accept on a listener failed: %s", uv_strerror(status));
        return;
    }
    if (s->closing)
        return;
    struct http_conn *c = conn__new(s, l->is_unix);
    if (!c) {
        al_warn("http: out of memory accepting a connection");
        return;
    }
    if (uv_accept(ls, &c->h.stream) != 0) {
        conn__close(c);
        return;
    }
    conn__start(c);
}

static void srv__on_listener_closed(uv_handle_t *h)
{
    struct srv_listener *l = h->data;
    struct al_http_server *s = l->srv;
    free(l->unix_path);
    free(l);
    s->n_listeners_open--;
    srv__maybe_done(s);
}

static struct srv_listener *srv__listener_new(struct al_http_server *s, bool is_unix)
{
    struct srv_listener *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->srv = s;
    l->is_unix = is_unix;
    int rc = is_unix ? uv_pipe_init(s->loop, &l->h.pipe, 0) : uv_tcp_init(s->loop, &l->h.tcp);
    if (rc) {
        free(l);
        return NULL;
    }
    l->h.handle.data = l;
    l->next = s->listeners;
    s->listeners = l;
    s->n_listeners_open++;
    return l;
}

static void srv__listener_drop(struct srv_listener *l)
{
    struct al_http_server *s = l->srv;
    for (struct srv_listener **pp = &s->listeners; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    free(l->unix_path);
    l->unix_path = NULL;
    uv_close(&l->h.handle, srv__on_listener_closed);
}

static void srv__listener_unlink(struct srv_listener *l)
{
    struct stat st;
    if (l->unix_path && lstat(l->unix_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->unix_path);
}

int al_http_server_listen_tcp(struct al_http_server *s, const char *host, int port,
                              struct al_error *err)
{
    struct sockaddr_storage ss;
    if (!host)
        host = "127.0.0.1";
    if (port < 0 || port > 65535)
        return al_error_set(err, -EINVAL, "port %d out of range 0..65535", port);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return al_error_set(err, -EINVAL, "'%s' is not an IPv4 or IPv6 address", host);
    struct srv_listener *l = srv__listener_new(s, false);
    if (!l)
        return al_error_set(err, -ENOMEM, "out of memory");
    int rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0);
    if (!rc)
        rc = uv_listen(&l->h.stream, 511, srv__on_connection);
    if (rc) {
        srv__listener_drop(l);
        return al_error_set(err, rc, "cannot listen on %s port %d: %s%s", host, port,
                            uv_strerror(rc),
                            rc == UV_EADDRINUSE ? " (another process uses it; pick another "
                                                  "port)"
                                                : "");
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    if (uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&bound, &blen) == 0)
        l->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    return 0;
}

int al_http_server_listen_unix(struct al_http_server *s, const char *path, mode_t mode,
                               struct al_error *err)
{
    struct sockaddr_un sun;
    if (!path || !*path || strlen(path) >= sizeof sun.sun_path)
        return al_error_set(err, -ENAMETOOLONG,
                            "unix socket path '%s' is empty or longer than %zu bytes: use a "
                            "shorter state directory",
                            path ? path : "", sizeof sun.sun_path - 1);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return al_error_set(err, -EEXIST,
                                "%s exists and is not a socket: remove it or choose another "
                                "path",
                                path);
        /* A socket file: stale unless someone still listens on it. */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0) {
            memset(&sun, 0, sizeof sun);
            sun.sun_family = AF_UNIX;
            memcpy(sun.sun_path, path, strlen(path) + 1);
            int c = connect(fd, (struct sockaddr *)&sun, sizeof sun);
            close(fd);
            if (c == 0)
                return al_error_set(err, -EADDRINUSE,
                                    "another process is listening on %s: stop it first", path);
        }
        if (unlink(path) < 0 && errno != ENOENT)
            return al_error_set(err, -errno, "cannot remove stale socket %s: %s", path,
                                strerror(errno));
    }
    struct srv_listener *l = srv__listener_new(s, true);
    if (!l)
        return al_error_set(err, -ENOMEM, "out of memory");
    int rc = uv_pipe_bind(&l->h.pipe, path);
    if (rc) {
        srv__listener_drop(l);
        return al_error_set(err, rc, "cannot bind unix socket %s: %s", path, uv_strerror(rc));
    }
    /* Before listen, so that no one connects while the mode is still the umask's. */
    if (chmod(path, mode) < 0) {
        rc = -errno;
        unlink(path);
        srv__listener_drop(l);
        return al_error_set(err, rc, "cannot chmod %s to %o: %s", path, (unsigned)mode,
                            strerror(-rc));
    }
    if (lstat(path, &st) == 0) {
        l->dev = st.st_dev;
        l->ino = st.st_ino;
    }
    l->unix_path = strdup(path);
    rc = uv_listen(&l->h.stream, 511, srv__on_connection);
    if (rc) {
        srv__listener_unlink(l);
        srv__listener_drop(l);
        return al_error_set(err, rc, "cannot listen on %s: %s", path, uv_strerror(rc));
    }
    return 0;
}

static int srv__fd_kind(int fd, bool want_listening, bool *is_unix, struct al_error *err)
{
    int type = 0, domain = 0, acc = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return al_error_set(err, -errno, "fd %d is not a socket: %s", fd, strerror(errno));
    len = sizeof domain;
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    len = sizeof acc;
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len);
    if (type != SOCK_STREAM)
        return al_error_set(err, -EINVAL, "fd %d is not a stream socket", fd);
    /* AF_VSOCK: the KVM backend's agent channel (the VMM bridges agent.sock to it). libuv
     * has no vsock handle, but its pipe handles serve any stream socket; the peer is then
     * reported with family AF_VSOCK and no credentials. */
    if (domain != AF_UNIX && domain != AF_INET && domain != AF_INET6 && domain != AF_VSOCK)
        return al_error_set(err, -EAFNOSUPPORT, "fd %d: socket family %d not supported", fd,
                            domain);
    if (want_listening != (acc != 0))
        return al_error_set(err, -EINVAL, "fd %d is %s a listening socket", fd, acc ? "" : "not");
    *is_unix = domain == AF_UNIX || domain == AF_VSOCK;
    return 0;
}

int al_http_server_listen_fd(struct al_http_server *s, int fd, struct al_error *err)
{
    bool is_unix;
    int rc = srv__fd_kind(fd, true, &is_unix, err);
    if (rc)
        return rc;
    struct srv_listener *l = srv__listener_new(s, is_unix);
    if (!l)
        return al_error_set(err, -ENOMEM, "out of memory");
    rc = is_unix ? uv_pipe_open(&l->h.pipe, fd) : uv_tcp_open(&l->h.tcp, fd);
    if (!rc)
        rc = uv_listen(&l->h.stream, 511, srv__on_connection);
    if (rc) {
        srv__listener_drop(l);
        return al_error_set(err, rc, "cannot serve listening fd %d: %s", fd, uv_strerror(rc));
    }
    if (!is_unix) {
        struct sockaddr_storage bound;
        int blen = sizeof bound;
        if (uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&bound, &blen) == 0)
            l->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                        : ((struct sockaddr_in *)&bound)->sin_port);
    }
    return 0;
}

static int srv__serve_fd(struct al_http_server *s, int fd, const struct al_http_peer *peer,
                         struct al_error *err)
{
    bool is_unix;
    int rc = srv__fd_kind(fd, false, &is_unix, err);
    if (rc)
        return rc;
    if (s->closing)
        return al_error_set(err, -ESHUTDOWN, "the server is closing");
    struct http_conn *c = conn__new(s, is_unix);
    if (!c)
        return al_error_set(err, -ENOMEM, "out of memory");
    rc = is_unix ? uv_pipe_open(&c->h.pipe, fd) : uv_tcp_open(&c->h.tcp, fd);
    if (rc) {
        /* The handle does not own fd yet: the caller keeps it. */
        conn__close(c);
        return al_error_set(err, rc, "cannot serve fd %d: %s", fd, uv_strerror(rc));
    }
    if (peer) {
        c->peer = *peer;
        c->peer.is_unix = false;
        c->peer.uid = (uid_t)-1;
        c->peer.gid = (gid_t)-1;
        c->peer.pid = -1;
        c->peer.tls = true;
    }
    conn__start(c);
    return 0;
}

int al_http_server_serve_fd(struct al_http_server *s, int fd, struct al_error *err)
{
    return srv__serve_fd(s, fd, NULL, err);
}

int al_http_server_serve_fd_peer(struct al_http_server *s, int fd, const struct al_http_peer *peer,
                                 struct al_error *err)
{
    if (!peer)
        return al_error_set(err, -EINVAL, "serve_fd_peer needs the peer");
    return srv__serve_fd(s, fd, peer, err);
}

int al_http_server_port(const struct al_http_server *s)
{
    int port = -1;
    /* listeners are prepended: the first TCP one added is the last in the list */
    for (const struct srv_listener *l = s->listeners; l; l = l->next)
        if (!l->is_unix)
            port = l->port;
    return port;
}

size_t al_http_server_connections(const struct al_http_server *s)
{
    return s->n_conns;
}

/* ---- server ------------------------------------------------------------------------ */
int al_http_server_new(uv_loop_t *loop, const struct al_http_server_opts *opts,
                       struct al_http_server **out)
{
    if (!loop || !opts || !opts->on_request || !out)
        return -EINVAL;
    struct al_http_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    http__ignore_sigpipe();
    s->loop = loop;
    s->lim = opts->limits;
    if (!s->lim.max_header_bytes)
        s->lim.max_header_bytes = 16 * 1024;
    if (!s->lim.max_body_bytes)
        s->lim.max_body_bytes = 1024 * 1024;
    if (!s->lim.header_timeout_ms)
        s->lim.header_timeout_ms = 10 * 1000;
    if (!s->lim.idle_timeout_ms)
        s->lim.idle_timeout_ms = 60 * 1000;
    if (!s->lim.body_timeout_ms)
        s->lim.body_timeout_ms = 30 * 1000;
    if (!s->lim.max_connections)
        s->lim.max_connections = 1024;
    if (!s->lim.max_headers)
        s->lim.max_headers = 100;
    if (!s->lim.write_timeout_ms)
        s->lim.write_timeout_ms = 60 * 1000;
    s->on_request = opts->on_request;
    s->ctx = opts->ctx;
    if (opts->server_name) {
        if (!http__is_field_value(opts->server_name) ||
            !(s->server_name = strdup(opts->server_name))) {
            free(s);
            return -EINVAL;
        }
    }
    al_buf_init(&s->head, HEAD_MAX);
    uv_idle_init(loop, &s->idle);
    s->idle.data = s;
    *out = s;
    return 0;
}

static void srv__on_idle_closed(uv_handle_t *h)
{
    struct al_http_server *s = h->data;
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    if (done)
        done(arg);
    al_buf_free(&s->head);
    free(s->server_name);
    free(s);
}

static void srv__maybe_done(struct al_http_server *s)
{
    if (!s->closing || s->idle_closing || s->n_conns || s->n_listeners_open || s->n_tunnels)
        return;
    s->idle_closing = true;
    uv_idle_stop(&s->idle);
    uv_close((uv_handle_t *)&s->idle, srv__on_idle_closed);
}

void al_http_server_close(struct al_http_server *s, void (*done)(void *arg), void *arg)
{
    if (!s || s->closing)
        return;
    s->closing = true;
    s->done = done;
    s->done_arg = arg;
    while (s->listeners) {
        struct srv_listener *l = s->listeners;
        s->listeners = l->next;
        srv__listener_unlink(l);
        uv_close(&l->h.handle, srv__on_listener_closed);
    }
    for (struct http_conn *c = s->conns; c; c = c->next)
        conn__kill(c, -ESHUTDOWN);
    for (struct al_http_tunnel *t = s->tunnels; t; t = http__tunnel_next(t))
        http__tunnel_kill(t, -ESHUTDOWN);
    srv__maybe_done(s);
}

void http__server_tunnel_closed(struct al_http_server *s)
{
    s->n_tunnels--;
    srv__maybe_done(s);
}

/* ---- request API ------------------------------------------------------------------- */
static struct http_req *req__of(struct al_http_req *req)
{
    return (struct http_req *)req;
}

static int req__claim(struct http_req *r)
{
    struct http_conn *c = r->conn;
    if (!c || c->dead || r->final)
        return -EPIPE;
    if (r->released || c->body_mode != BODY_NONE || c->phase != PH_HANDLER)
        return -EALREADY;
    return 0;
}

int al_http_req_read_body(struct al_http_req *req, size_t max, al_http_body_done_fn done)
{
    struct http_req *r = req__of(req);
    if (!done)
        return -EINVAL;
    int rc = req__claim(r);
    if (rc)
        return rc;
    struct http_conn *c = r->conn;
    c->body_max = max ? max : c->srv->lim.max_body_bytes;
    r->pub.body.max = c->body_max;
    r->done = done;
    c->body_mode = BODY_BUFFER;
    c->body_too_big = r->pub.content_length > (int64_t)c->body_max;
    conn__schedule(c);
    return 0;
}

int al_http_req_stream_body(struct al_http_req *req, al_http_body_data_fn on_data,
                            al_http_body_end_fn on_end)
{
    struct http_req *r = req__of(req);
    if (!on_data || !on_end)
        return -EINVAL;
    int rc = req__claim(r);
    if (rc)
        return rc;
    struct http_conn *c = r->conn;
    r->on_data = on_data;
    r->on_end = on_end;
    c->body_mode = BODY_STREAM;
    c->body_max = UINT64_MAX;
    conn__schedule(c);
    return 0;
}

void al_http_req_resume_body(struct al_http_req *req)
{
    struct http_req *r = req__of(req);
    struct http_conn *c = r->conn;
    if (c && c->in_on_data) { /* cancels the pause on_data is about to ask for */
        c->resume_asked = true;
        return;
    }
    if (!c || !c->body_paused)
        return;
    c->body_paused = false;
    conn__schedule(c);
}

void al_http_req_on_close(struct al_http_req *req, void (*cb)(struct al_http_req *req))
{
    struct http_req *r = req__of(req);
    if (!r->conn) { /* already gone: say so now */
        if (cb)
            cb(req);
        r->released = true;
        req__maybe_free(r);
        return;
    }
    r->close_cb = cb;
}

/* ---- response API ------------------------------------------------------------------ */
static bool resp__skip_header(const char *name)
{
    return strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
           strcasecmp(name, "connection") == 0 || strcasecmp(name, "keep-alive") == 0 ||
           strcasecmp(name, "date") == 0;
}

/* Builds the response head into the server's scratch buffer. */
static int resp__head(struct http_req *r, int status, const struct al_http_header *hdrs, size_t n,
                      int64_t cl, const char *ctype)
{
    struct http_conn *c = r->conn;
    struct al_http_server *s = c->srv;
    if (status < 200 || status > 599)
        return -EINVAL;
    bool user_server = false;
    for (size_t i = 0; i < n; i++) {
        if (!hdrs[i].name || !hdrs[i].value ||
            !http__is_token(hdrs[i].name, strlen(hdrs[i].name)) ||
            !http__is_field_value(hdrs[i].value))
            return -EINVAL;
        if (strcasecmp(hdrs[i].name, "server") == 0)
            user_server = true;
    }
    if (ctype && !http__is_field_value(ctype))
        return -EINVAL;
    bool nobody_status = status == 204 || status == 304;
    r->resp_nobody = nobody_status || c->head;
    r->resp_chunked = false;
    r->resp_cl = false;
    r->resp_left = -1;
    bool keep = c->keep_alive && !c->close_after && !s->closing;
    if (c->has_body && !c->body_complete && c->body_mode == BODY_NONE &&
        (c->expect_continue || c->req_cl > (int64_t)s->lim.max_body_bytes))
        keep = false; /* the unread body will not be read */
    struct al_buf *b = &s->head;
    b->len = 0;
    int rc = head__status(b, status);
    if (!rc && ctype)
        rc = head__line(b, "Content-Type", ctype);
    for (size_t i = 0; !rc && i < n; i++)
        if (!resp__skip_header(hdrs[i].name))
            rc = head__line(b, hdrs[i].name, hdrs[i].value);
    if (!rc && !nobody_status) {
        if (cl >= 0) {
            rc = head__length(b, (uint64_t)cl);
            if (!c->head) {
                r->resp_left = cl;
                r->resp_cl = true;
            }
        } else if (c->http10) {
            keep = false; /* close-delimited */
        } else {
            rc = al_buf_appends(b, "Transfer-Encoding: chunked\r\n");
            r->resp_chunked = !c->head;
        }
    }
    if (!rc)
        rc = head__common(s, b, user_server, keep);
    if (!rc)
        rc = al_buf_appends(b, "\r\n");
    if (rc)
        return rc;
    if (!keep)
        c->close_after = true;
    return 0;
}

static int resp__check(struct http_req *r)
{
    struct http_conn *c = r->conn;
    if (!c || c->dead || r->final)
        return -EPIPE;
    if (r->released)
        return -EALREADY;
    return 0;
}

int al_http_resp_start(struct al_http_req *req, int status, const struct al_http_header *hdrs,
                       size_t n_hdrs, int64_t content_length)
{
    struct http_req *r = req__of(req);
    int rc = resp__check(r);
    if (rc)
        return rc;
    struct http_conn *c = r->conn;
    if (c->resp_started)
        return -EALREADY;
    rc = resp__head(r, status, hdrs, n_hdrs, content_length, NULL);
    if (rc)
        return rc;
    c->resp_started = true;
    rc = conn__write1(c, c->srv->head.data, c->srv->head.len);
    conn__schedule(c); /* an unclaimed body is now discarded */
    return rc;
}

int al_http_resp_write(struct al_http_req *req, const void *data, size_t len)
{
    struct http_req *r = req__of(req);
    int rc = resp__check(r);
    if (rc)
        return rc;
    struct http_conn *c = r->conn;
    if (!c->resp_started || c->resp_ended)
        return -EINVAL;
    if (len == 0 || r->resp_nobody)
        return 0;
    if (r->resp_left >= 0) {
        if ((uint64_t)len > (uint64_t)r->resp_left)
            return -EINVAL;
        r->resp_left -= (int64_t)len;
        return conn__write1(c, data, len);
    }
    if (r->resp_chunked) {
        char hex[24];
        int hl = snprintf(hex, sizeof hex, "%zx\r\n", len);
        uv_buf_t bufs[3] = {uv_buf_init(hex, (unsigned)hl),
                            uv_buf_init((char *)data, (unsigned)len), uv_buf_init("\r\n", 2)};
        return conn__write(c, bufs, 3);
    }
    return conn__write1(c, data, len);
}

size_t al_http_resp_queued(const struct al_http_req *req)
{
    const struct http_req *r = (const struct http_req *)req;
    return r->conn ? r->conn->queued : 0;
}

void al_http_resp_on_drain(struct al_http_req *req, size_t low_water,
                           void (*cb)(struct al_http_req *req))
{
    struct http_req *r = req__of(req);
    struct http_conn *c = r->conn;
    if (!c) { /* gone: let the handler find out by writing */
        if (cb)
            cb(req);
        return;
    }
    r->drain_cb = cb;
    r->drain_low = low_water;
    if (cb && (c->queued <= low_water || c->dead))
        conn__schedule(c);
}

/* Marks the response ended and the request released. */
static void resp__finish(struct http_req *r)
{
    struct http_conn *c = r->conn;
    r->released = true;
    r->drain_cb = NULL;
    r->close_cb = NULL;
    if (!c) {
        req__free(r);
        return;
    }
    c->resp_ended = true;
    c->resp_started = true;
    /* The rest of a claimed body is no longer anyone's: drop it (bounded). */
    if ((c->body_mode == BODY_BUFFER || c->body_mode == BODY_STREAM) && !c->body_complete) {
        c->body_mode = BODY_DISCARD;
        c->body_bytes = 0;
        c->body_max = c->srv->lim.max_body_bytes;
        c->body_paused = false;
    }
    c->body_cb_done = true;
    req__maybe_free(r);
    conn__schedule(c);
}

int al_http_resp_end(struct al_http_req *req)
{
    struct http_req *r = req__of(req);
    struct http_conn *c = r->conn;
    if (c && r->released)
        return -EALREADY;
    int rc = resp__check(r);
    if (!rc) {
        if (!c->resp_started) {
            al_warn("http: %s %s: response ended before it started; answering 500", r->pub.method,
                    r->pub.path);
            conn__send_error(c, 500, "the handler ended the response without a status");
            rc = -EINVAL;
        } else if (r->resp_chunked) {
            static const char last[] = "0\r\n\r\n";
            rc = conn__write1(c, last, sizeof last - 1);
        } else if (r->resp_left > 0) {
            al_warn("http: %s %s: response ended %" PRId64 " bytes short of its Content-Length; "
                    "closing the connection",
                    r->pub.method, r->pub.path, r->resp_left);
            c->close_after = true;
            rc = -EPROTO;
        } else if (r->resp_left < 0 && !r->resp_nobody) {
            c->close_after = true; /* close-delimited */
        }
    }
    resp__finish(r);
    return rc;
}

int al_http_resp_abort(struct al_http_req *req)
{
    struct http_req *r = req__of(req);
    struct http_conn *c = r->conn;
    if (c && r->released)
        return -EALREADY;
    int rc = resp__check(r);
    if (!rc) {
        bool complete = c->resp_started && (r->resp_nobody || (r->resp_cl && r->resp_left == 0));
        bool framed = c->resp_started && (r->resp_chunked || r->resp_cl);
        if (complete)
            rc = -EALREADY;
        else if (!framed)
            c->reset_on_close = true; /* only a reset tells the client */
        else
            al_debug("http: %s %s: response aborted", r->pub.method, r->pub.path);
        c->close_after = true;
        c->resp_started = true; /* no answer of the server's own */
        if (c->phase == PH_HANDLER || c->phase == PH_BODY) {
            /* Do not wait for (or read) the rest of the request body. */
            c->phase = PH_DONE;
            c->body_complete = true;
            c->body_paused = false;
        }
    }
    resp__finish(r);
    return rc;
}

int al_http_req_upgrade(struct al_http_req *req, const struct al_http_header *hdrs, size_t n,
                        struct al_http_tunnel **out)
{
    struct http_req *r = req__of(req);
    struct http_conn *c = r->conn;
    if (!out)
        return -EINVAL;
    if (c && r->released)
        return -EALREADY;
    int rc = resp__check(r);
    if (rc == -EPIPE) {
        resp__finish(r);
        return rc;
    }
    if (rc)
        return rc;
    if (!req->upgrade)
        return -EPROTO;
    if (c->has_body)
        return -ENOTSUP;
    if (c->resp_started || c->body_mode != BODY_NONE || c->phase != PH_HANDLER)
        return -EALREADY;
    bool has_upgrade = false;
    for (size_t i = 0; i < n; i++) {
        if (!hdrs[i].name || !hdrs[i].value ||
            !http__is_token(hdrs[i].name, strlen(hdrs[i].name)) ||
            !http__is_field_value(hdrs[i].value))
            return -EINVAL;
        if (strcasecmp(hdrs[i].name, "upgrade") == 0 && hdrs[i].value[0])
            has_upgrade = true;
    }
    if (!has_upgrade)
        return -EINVAL;
    struct al_buf *b = &c->srv->head;
    b->len = 0;
    rc = al_buf_appends(b, "HTTP/1.1 101 Switching Protocols\r\n");
    for (size_t i = 0; !rc && i < n; i++)
        if (!resp__skip_header(hdrs[i].name))
            rc = head__line(b, hdrs[i].name, hdrs[i].value);
    if (!rc)
        rc = al_buf_appends(b, "Connection: Upgrade\r\n\r\n");
    if (rc)
        return rc;
    /* What the client sent after its request belongs to the new protocol. Inside a frame
     * the unparsed input is c->in.cur; outside one it was saved to c->in. */
    const char *pre = c->busy ? c->in.cur : c->in.buf;
    size_t pre_len = c->busy ? c->in.cur_len : c->in.len;
    if (c->reading) { /* from here on, only the tunnel reads the socket */
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
    c->upgraded = true;
    struct al_http_tunnel *t = NULL;
    rc = http__tunnel_new(c->srv->loop, &c->h.stream, c->is_unix, pre, pre_len, &t);
    if (!rc) {
        rc = al_http_tunnel_write(t, b->data, b->len);
        if (rc) {
            al_http_tunnel_close(t);
            t = NULL;
        }
    }
    if (rc) {
        c->upgraded = false;
        conn__schedule(c); /* reading resumes */
        return rc;
    }
    if (c->busy)
        c->in.cur_len = 0;
    else
        c->in.len = 0;
    struct al_http_server *s = c->srv;
    http__tunnel_attach(t, s, &s->tunnels);
    s->n_tunnels++;
    /* The request is done and this handle goes away; the socket lives on in the tunnel. */
    c->resp_started = c->resp_ended = true;
    c->body_cb_done = true;
    c->close_after = true;
    r->released = true;
    r->close_cb = NULL;
    r->drain_cb = NULL;
    conn__kill(c, -ESHUTDOWN);
    req__maybe_free(r);
    *out = t;
    return 0;
}

static int resp__reply(struct http_req *r, int status, const char *ctype, const void *body,
                       size_t len)
{
    struct http_conn *c = r->conn;
    if (c && r->released)
        return -EALREADY;
    int rc = resp__check(r);
    if (!rc && c->resp_started)
        return -EALREADY; /* started with al_http_resp_start: end it with al_http_resp_end */
    if (!rc) {
        rc = resp__head(r, status, NULL, 0, (int64_t)len, ctype);
        if (!rc) {
            c->resp_started = true;
            struct al_buf *b = &c->srv->head;
            bool with_body = !r->resp_nobody && len;
            /* A small body joins the head: one contiguous write. */
            if (with_body && len <= 16384 && al_buf_append(b, body, len) == 0)
                with_body = false;
            uv_buf_t bufs[2] = {uv_buf_init(b->data, (unsigned)b->len),
                                uv_buf_init((char *)body, (unsigned)len)};
            rc = conn__write(c, bufs, with_body ? 2 : 1);
            r->resp_left = 0;
        } else {
            conn__send_error(c, 500, "the handler produced an invalid response");
        }
    }
    resp__finish(r);
    return rc;
}

int al_http_reply(struct al_http_req *req, int status, const char *content_type, const void *body,
                  size_t len)
{
    return resp__reply(req__of(req), status, content_type, body, len);
}

int al_http_reply_json(struct al_http_req *req, int status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(body);
    if (body && !s) {
        struct http_req *r = req__of(req);
        int rc = resp__reply(r, 500, "application/json",
                             "{\"code\":500,\"message\":\"cannot encode the response\"}", 52);
        return rc ? rc : -ENOMEM;
    }
    int rc = resp__reply(req__of(req), status, "application/json", s ? s : "", s ? strlen(s) : 0);
    free(s);
    return rc;
}

int al_http_reply_error(struct al_http_req *req, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char body[1200];
    size_t n = http__error_body(body, sizeof body, status, msg);
    return resp__reply(req__of(req), status, "application/json", body, n);
}
