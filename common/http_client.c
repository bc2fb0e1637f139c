/* common/http_client: the asynchronous HTTP/1.1 client of http.h (al_http_creq_*) and its
 * keep-alive connection pool (al_http_pool_*), on libuv and llhttp.
 *
 * Owns: connecting (unix sockets, TCP to address literals or resolved names), writing the
 * request (whole or streamed as chunks), parsing the response (bounded header block,
 * pre-scanned by common/http_head.h like the server's; de-chunked body handed out in pieces with pause/resume),
 * timeouts, cancellation, and reuse of idle connections per target; for https targets, a
 * provider's TLS session between the socket and the HTTP bytes (http.h, al_http_tls).
 *
 * Lifetimes. A creq owns two timers (timeout, deferred work) and borrows one connection.
 * A connection (cconn) lives from connect to its handle's close callback; it belongs to a
 * pool if there is one and goes back to it only when the exchange ended cleanly (whole
 * request written, whole response read, keep-alive, nothing extra received). User
 * callbacks run inside a "frame" (c->busy): a cancel or failure requested from inside one
 * is finished when the frame unwinds, so a creq is never freed under a callback. on_done
 * runs exactly once; the creq is freed when both its timers have closed afterwards.
 */
#include "http.h"
#include "cleanup.h"
#include "http_internal.h"
#include "log.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#define CREQ_DEFAULT_TIMEOUT_MS  30000
#define CREQ_DEFAULT_MAX_HEADERS (64 * 1024)
#define CREQ_MAX_HEADER_FIELDS   256

struct al_http_pool {
    uv_loop_t *loop;
    struct al_http_pool_opts o;
    uv_timer_t sweep;
    struct cconn *idle_head, *idle_tail; /* most recently used first */
    size_t n_idle;
    size_t refs; /* the owner (until close) + every connection alive */
    bool closing;
};

struct cconn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    uv_connect_t connect_req;
    struct al_http_pool *pool; /* NULL: not pooled */
    struct al_http_creq *creq; /* current user; NULL when idle or abandoned */
    struct cconn *prev, *next; /* pool idle list */
    char *key;
    uint64_t idle_since;
    size_t queued;
    unsigned n_writes;
    bool is_unix;
    bool connected; /* the HTTP bytes can flow (with TLS: the handshake is done) */
    bool closing;
    bool reused;
    bool reading;
    /* TLS (https targets): the provider's session and a buffer for its plaintext. */
    const struct al_http_tls_ops *tls_ops;
    void *tls;
    char *plain;
};

struct creq_gai {
    uv_getaddrinfo_t req;
    struct al_http_creq *c; /* NULL once the creq gave up on it */
};

enum creq_state { C_CONNECTING, C_SENT, C_BODY, C_DONE };

struct al_http_creq {
    uv_loop_t *loop;
    struct al_http_creq_opts o;
    struct http__target tgt;
    char *key;
    struct cconn *conn;
    struct creq_gai *gai;
    uv_timer_t timer; /* connect/headers timeout */
    uv_timer_t kick;  /* deferred work (resume with buffered input, early drain) */
    llhttp_t parser;
    struct al_http_head_scan scan;
    struct http__hdrs hdrs;
    struct al_buf out;     /* the request until it can be written (and for one retry) */
    struct http__input in; /* input left over while paused */
    char *cb_start, *cb_end;
    void (*drain_cb)(struct al_http_creq *c, void *arg);
    size_t drain_low;
    char err[256];
    int finish_err; /* for a finish deferred to the end of a frame */
    int parse_err;  /* set by parser callbacks before they fail */
    int status;
    uint32_t busy;
    uint8_t state;
    uint8_t closes;
    bool head_method;
    bool retryable;
    bool retried;
    bool got_bytes;
    bool ended; /* the whole request is queued (body given whole, or creq_end called) */
    bool headers_ready;
    bool informational;
    bool paused;
    bool in_on_data;   /* inside on_data */
    bool resume_asked; /* al_http_creq_resume called from inside it */
    bool msg_complete;
    bool finish_pending;
    bool finished;
    bool pool_ok;      /* the connection may go back to the pool */
    bool want_upgrade; /* the request asked to switch protocols */
    bool upgraded;     /* ... and the server answered 101 */
    int64_t body_left; /* Content-Length-framed streamed body: bytes still to write; -1 */
    bool pinned;       /* connect to pin, not to the host's resolved address */
    struct sockaddr_storage pin;
};

static void creq__finish(struct al_http_creq *c, int err);
static void creq__process(struct al_http_creq *c);
static void cconn__close(struct cconn *k);
static int cconn__tls_flush(struct cconn *k);
static void cconn__tls_pump(struct cconn *k);
static void cconn__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static int creq__connect(struct al_http_creq *c);

static int creq__fail(struct al_http_creq *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records why, then finishes (or arranges to, when inside a callback). */
static int creq__fail(struct al_http_creq *c, int err, const char *fmt, ...)
{
    if (!c->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    creq__finish(c, err);
    return err;
}

/* ---- pool -------------------------------------------------------------------------- */
static void pool__unref(struct al_http_pool *p);

static void pool__sweep_closed(uv_handle_t *h)
{
    pool__unref(h->data);
}

static void pool__unref(struct al_http_pool *p)
{
    if (--p->refs == 0)
        free(p);
}

static void pool__idle_unlink(struct cconn *k)
{
    struct al_http_pool *p = k->pool;
    if (k->prev)
        k->prev->next = k->next;
    else
        p->idle_head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        p->idle_tail = k->prev;
    k->prev = k->next = NULL;
    p->n_idle--;
}

static void pool__on_sweep(uv_timer_t *t)
{
    struct al_http_pool *p = t->data;
    uint64_t now = uv_now(p->loop);
    /* The tail is the oldest. */
    while (p->idle_tail && now - p->idle_tail->idle_since >= p->o.idle_timeout_ms) {
        struct cconn *k = p->idle_tail;
        pool__idle_unlink(k);
        cconn__close(k);
    }
    if (!p->idle_head)
        uv_timer_stop(&p->sweep);
}

int al_http_pool_new(uv_loop_t *loop, const struct al_http_pool_opts *opts,
                     struct al_http_pool **out)
{
    if (!loop || !out)
        return -EINVAL;
    struct al_http_pool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    if (opts)
        p->o = *opts;
    if (!p->o.max_idle)
        p->o.max_idle = 32;
    if (!p->o.max_idle_per_target)
        p->o.max_idle_per_target = 8;
    if (!p->o.idle_timeout_ms)
        p->o.idle_timeout_ms = 15000;
    uv_timer_init(loop, &p->sweep);
    p->sweep.data = p;
    uv_unref((uv_handle_t *)&p->sweep);
    p->refs = 1;
    http__ignore_sigpipe();
    *out = p;
    return 0;
}

size_t al_http_pool_idle(const struct al_http_pool *p)
{
    return p ? p->n_idle : 0;
}

void al_http_pool_close(struct al_http_pool *p)
{
    if (!p || p->closing)
        return;
    p->closing = true;
    while (p->idle_head) {
        struct cconn *k = p->idle_head;
        pool__idle_unlink(k);
        cconn__close(k);
    }
    uv_close((uv_handle_t *)&p->sweep, pool__sweep_closed); /* drops the owner's ref */
}

static struct cconn *pool__take(struct al_http_pool *p, const char *key)
{
    for (struct cconn *k = p->idle_head; k; k = k->next) {
        if (strcmp(k->key, key) == 0) {
            pool__idle_unlink(k);
            uv_ref(&k->h.handle);
            k->reused = true;
            return k;
        }
    }
    return NULL;
}

/* Parks an idle connection; false if it cannot be kept. */
static bool pool__put(struct cconn *k)
{
    struct al_http_pool *p = k->pool;
    if (!p || p->closing || k->queued || k->closing)
        return false;
    size_t same = 0;
    for (struct cconn *i = p->idle_head; i; i = i->next)
        if (strcmp(i->key, k->key) == 0)
            same++;
    if (same >= p->o.max_idle_per_target)
        return false;
    if (p->n_idle >= p->o.max_idle) {
        struct cconn *old = p->idle_tail;
        pool__idle_unlink(old);
        cconn__close(old);
    }
    k->idle_since = uv_now(p->loop);
    k->next = p->idle_head;
    k->prev = NULL;
    if (p->idle_head)
        p->idle_head->prev = k;
    else
        p->idle_tail = k;
    p->idle_head = k;
    p->n_idle++;
    /* Keep reading: a close (or anything) from the server drops it at once. */
    if (!k->reading && uv_read_start(&k->h.stream, http__alloc_cb, cconn__on_read) == 0)
        k->reading = true;
    uv_unref(&k->h.handle);
    if (!uv_is_active((uv_handle_t *)&p->sweep)) {
        uint64_t every = p->o.idle_timeout_ms / 2 ? p->o.idle_timeout_ms / 2 : 1;
        uv_timer_start(&p->sweep, pool__on_sweep, every, every);
    }
    return true;
}

/* ---- connections ------------------------------------------------------------------- */
static void cconn__on_closed(uv_handle_t *h)
{
    struct cconn *k = h->data;
    struct al_http_pool *p = k->pool;
    if (k->tls)
        k->tls_ops->session_free(k->tls);
    free(k->plain);
    free(k->key);
    free(k);
    atomic_fetch_sub(&http__live_cconns, 1);
    if (p)
        pool__unref(p);
}

static void cconn__close(struct cconn *k)
{
    if (k->closing)
        return;
    k->closing = true;
    if (k->creq) {
        k->creq->conn = NULL;
        k->creq = NULL;
    }
    uv_close(&k->h.handle, cconn__on_closed);
}

static struct cconn *cconn__new(struct al_http_creq *c)
{
    struct cconn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->key = strdup(c->key);
    k->is_unix = c->tgt.is_unix;
    if (c->tgt.tls) {
        k->tls_ops = c->o.tls->ops;
        k->plain = malloc(HTTP__READ_BUF);
        if (k->plain)
            k->tls =
                k->tls_ops->session_new(c->o.tls->provider, c->tgt.host, c->err, sizeof c->err);
    }
    int rc = !k->key                   ? -ENOMEM
             : c->tgt.tls && !k->plain ? -ENOMEM
             : c->tgt.tls && !k->tls   ? -EPROTO
             : k->is_unix              ? uv_pipe_init(c->loop, &k->h.pipe, 0)
                                       : uv_tcp_init(c->loop, &k->h.tcp);
    if (rc) {
        if (k->tls)
            k->tls_ops->session_free(k->tls);
        free(k->plain);
        free(k->key);
        free(k);
        errno = -rc;
        return NULL;
    }
    k->h.handle.data = k;
    k->connect_req.data = k;
    k->pool = c->o.pool;
    if (k->pool)
        k->pool->refs++;
    atomic_fetch_add(&http__live_cconns, 1);
    return k;
}

/* ---- output ------------------------------------------------------------------------ */
static void creq__maybe_drain(struct al_http_creq *c);
static bool creq__can_retry(struct al_http_creq *c);
static void creq__retry(struct al_http_creq *c);
static void creq__connected(struct al_http_creq *c);

static void cconn__on_write(uv_write_t *wr, int status)
{
    struct http__wreq *w = (struct http__wreq *)wr;
    struct cconn *k = w->owner;
    k->queued -= w->len;
    k->n_writes--;
    free(w);
    struct al_http_creq *c = k->creq;
    if (!c || k->closing)
        return;
    if (status < 0) {
        /* On a reused connection, before any answer: the server closed it while idle. */
        if (creq__can_retry(c))
            creq__retry(c);
        else
            creq__fail(c, -EPIPE, "sending the request to %s: %s", c->o.target,
                       uv_strerror(status));
        return;
    }
    creq__maybe_drain(c);
}

/* Sends the ciphertext the TLS session produced. */
static int cconn__tls_flush(struct cconn *k)
{
    const char *d;
    size_t n = k->tls_ops->output(k->tls, &d);
    if (!n)
        return 0;
    uv_buf_t b = uv_buf_init((char *)d, (unsigned)n);
    size_t q = 0;
    int rc = http__write(&(struct http__wdest){&k->h.stream, k->n_writes == 0, k, cconn__on_write},
                         &b, 1, &q);
    if (rc < 0)
        return rc;
    k->tls_ops->consume(k->tls, n); /* http__write copied what the socket did not take */
    if (q) {
        k->queued += q;
        k->n_writes++;
    }
    return 0;
}

static int creq__send(struct al_http_creq *c, const uv_buf_t *bufs, unsigned n)
{
    struct cconn *k = c->conn;
    if (!k || !k->connected) {
        for (unsigned i = 0; i < n; i++) {
            int rc = al_buf_append(&c->out, bufs[i].base, bufs[i].len);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (k->tls) {
        for (unsigned i = 0; i < n; i++) {
            int rc = k->tls_ops->write(k->tls, bufs[i].base, bufs[i].len, c->err, sizeof c->err);
            if (rc < 0)
                return rc;
        }
        return cconn__tls_flush(k);
    }
    size_t q = 0;
    int rc = http__write(&(struct http__wdest){&k->h.stream, k->n_writes == 0, k, cconn__on_write},
                         bufs, n, &q);
    if (rc < 0)
        return rc;
    if (q) {
        k->queued += q;
        k->n_writes++;
    }
    return 0;
}

/* ---- timers ------------------------------------------------------------------------ */
static void creq__on_timeout(uv_timer_t *t)
{
    struct al_http_creq *c = t->data;
    if (c->finished || c->headers_ready)
        return;
    if (c->state == C_CONNECTING)
        creq__fail(c, -ETIMEDOUT, "connecting to %s timed out after %u ms", c->o.target,
                   c->o.timeout_ms);
    else
        creq__fail(c, -ETIMEDOUT, "no response headers from %s within %u ms", c->o.target,
                   c->o.timeout_ms);
}

static void creq__finish_now(struct al_http_creq *c, int err);

static void creq__on_kick(uv_timer_t *t)
{
    struct al_http_creq *c = t->data;
    if (c->finished)
        return;
    if (c->finish_pending && !c->busy) {
        creq__finish_now(c, c->finish_err);
        return;
    }
    creq__maybe_drain(c);
    if (!c->finished && !c->paused && (c->in.len || c->msg_complete))
        creq__process(c);
    /* Plaintext the TLS session decrypted before a pause is not signalled by the socket. */
    if (!c->finished && !c->paused && c->conn && c->conn->tls && c->conn->connected)
        cconn__tls_pump(c->conn);
}

static void creq__kick(struct al_http_creq *c)
{
    if (!c->finished)
        uv_timer_start(&c->kick, creq__on_kick, 0, 0);
}

/* ---- finishing --------------------------------------------------------------------- */
static void creq__free_out(struct al_http_creq *c)
{
    if (c->o.wipe)
        al_buf_free_wipe(&c->out);
    else
        al_buf_free(&c->out);
}

static void creq__on_timer_closed(uv_handle_t *h)
{
    struct al_http_creq *c = h->data;
    if (--c->closes)
        return;
    http__hdrs_free(&c->hdrs);
    creq__free_out(c);
    free(c->in.buf);
    free(c->key);
    free(c);
    atomic_fetch_sub(&http__live_creqs, 1);
}

static void creq__finish_now(struct al_http_creq *c, int err)
{
    c->finished = true;
    c->state = C_DONE;
    uv_timer_stop(&c->timer);
    uv_timer_stop(&c->kick);
    if (c->gai) {
        c->gai->c = NULL;
        uv_cancel((uv_req_t *)&c->gai->req);
        c->gai = NULL;
    }
    struct cconn *k = c->conn;
    if (k) {
        c->conn = NULL;
        k->creq = NULL;
        bool reuse = err == 0 && c->pool_ok && c->ended && c->in.cur_len == 0 && c->in.len == 0 &&
                     llhttp_should_keep_alive(&c->parser);
        if (!reuse || !pool__put(k))
            cconn__close(k);
    }
    if (err && !c->err[0])
        snprintf(c->err, sizeof c->err, "%s", strerror(-err));
    c->busy++;
    c->o.on_done(c, err, c->o.arg);
    c->busy--;
    c->closes = 2;
    uv_close((uv_handle_t *)&c->timer, creq__on_timer_closed);
    uv_close((uv_handle_t *)&c->kick, creq__on_timer_closed);
}

static void creq__finish(struct al_http_creq *c, int err)
{
    if (c->finished || c->finish_pending)
        return;
    if (c->busy) {
        c->finish_pending = true;
        c->finish_err = err;
        return;
    }
    creq__finish_now(c, err);
}

/* Ends a frame: a finish asked for inside it happens now. */
static void creq__unbusy(struct al_http_creq *c)
{
    if (--c->busy == 0 && c->finish_pending && !c->finished)
        creq__finish_now(c, c->finish_err);
}

static void creq__maybe_drain(struct al_http_creq *c)
{
    if (!c->drain_cb || c->finished || c->finish_pending)
        return;
    if (al_http_creq_queued(c) > c->drain_low)
        return;
    void (*cb)(struct al_http_creq *, void *) = c->drain_cb;
    c->drain_cb = NULL;
    c->busy++;
    cb(c, c->o.arg);
    creq__unbusy(c);
}

/* ---- parsing ----------------------------------------------------------------------- */
static int cli__hdr_rc(struct al_http_creq *c, int rc)
{
    if (!rc)
        return 0;
    if (rc == -E2BIG)
        snprintf(c->err, sizeof c->err,
                 "response headers from %s larger than %zu bytes or %d "
                 "fields",
                 c->o.target, c->o.max_header_bytes, CREQ_MAX_HEADER_FIELDS);
    else
        snprintf(c->err, sizeof c->err, "malformed response header from %s", c->o.target);
    c->parse_err = rc == -E2BIG ? -E2BIG : -EPROTO;
    return HPE_USER;
}

static int cli__on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct al_http_creq *c = p->data;
    if (c->headers_ready)
        return 0; /* trailers: ignored */
    return cli__hdr_rc(c, http__hdrs_field(&c->hdrs, at, len));
}

static int cli__on_header_field_complete(llhttp_t *p)
{
    struct al_http_creq *c = p->data;
    return c->headers_ready ? 0 : cli__hdr_rc(c, http__hdrs_field_done(&c->hdrs));
}

static int cli__on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct al_http_creq *c = p->data;
    return c->headers_ready ? 0 : cli__hdr_rc(c, http__hdrs_value(&c->hdrs, at, len));
}

static int cli__on_header_value_complete(llhttp_t *p)
{
    struct al_http_creq *c = p->data;
    return c->headers_ready ? 0 : cli__hdr_rc(c, http__hdrs_value_done(&c->hdrs));
}

static int cli__on_headers_complete(llhttp_t *p)
{
    struct al_http_creq *c = p->data;
    int status = p->status_code;
    if (status < 100 || status > 599) {
        snprintf(c->err, sizeof c->err, "%s answered with status %d (not 100..599)", c->o.target,
                 status);
        c->parse_err = -EPROTO;
        return -1;
    }
    if (status / 100 == 1) {
        if (status == 101 && c->want_upgrade && c->o.on_upgrade && p->http_major == 1 &&
            p->http_minor == 1) {
            int rc = http__hdrs_finish(&c->hdrs);
            if (rc)
                return cli__hdr_rc(c, rc);
            for (size_t i = 0; i < c->hdrs.n; i++) {
                const char *n = c->hdrs.v[i].name;
                if (!http__is_token(n, strlen(n))) {
                    snprintf(c->err, sizeof c->err, "invalid response header name from %s",
                             c->o.target);
                    c->parse_err = -EPROTO;
                    return -1;
                }
            }
            c->status = 101;
            c->headers_ready = true;
            c->upgraded = true;
            return HPE_PAUSED; /* what follows is the new protocol's */
        }
        if (status == 101) {
            snprintf(c->err, sizeof c->err, "%s switched protocols (101) %s", c->o.target,
                     c->want_upgrade ? "without an on_upgrade callback"
                                     : "although no upgrade was asked for");
            c->parse_err = -EPROTO;
            return -1;
        }
        c->informational = true; /* 100 Continue, 103 Early Hints: skip */
        return 1;
    }
    if (p->http_major != 1) {
        snprintf(c->err, sizeof c->err, "%s answered HTTP/%u.%u", c->o.target, p->http_major,
                 p->http_minor);
        c->parse_err = -EPROTO;
        return -1;
    }
    int rc = http__hdrs_finish(&c->hdrs);
    if (rc)
        return cli__hdr_rc(c, rc);
    for (size_t i = 0; i < c->hdrs.n; i++) {
        const char *n = c->hdrs.v[i].name;
        if (!http__is_token(n, strlen(n))) {
            snprintf(c->err, sizeof c->err, "invalid response header name from %s", c->o.target);
            c->parse_err = -EPROTO;
            return -1;
        }
    }
    c->status = status;
    c->headers_ready = true;
    return (c->head_method || status == 204 || status == 304) ? 1 : 0;
}

static int cli__on_body(llhttp_t *p, const char *at, size_t len)
{
    struct al_http_creq *c = p->data;
    if (!c->cb_start) {
        c->cb_start = c->cb_end = (char *)at;
    } else if (c->cb_end != at) {
        memmove(c->cb_end, at, len);
    }
    c->cb_end += len;
    return 0;
}

static int cli__on_message_complete(llhttp_t *p)
{
    struct al_http_creq *c = p->data;
    if (c->informational) {
        c->informational = false;
        http__hdrs_reset(&c->hdrs);
        al_http_head_scan_init(&c->scan, false, c->o.max_header_bytes);
        return 0;
    }
    c->msg_complete = true;
    return HPE_PAUSED;
}

/* llhttp_settings_init zeroes the struct: designated initializers do the same. */
static const llhttp_settings_t cli__llhttp_table = {
    .on_header_field = cli__on_header_field,
    .on_header_field_complete = cli__on_header_field_complete,
    .on_header_value = cli__on_header_value,
    .on_header_value_complete = cli__on_header_value_complete,
    .on_headers_complete = cli__on_headers_complete,
    .on_body = cli__on_body,
    .on_message_complete = cli__on_message_complete,
};

static const llhttp_settings_t *cli__settings(void)
{
    return &cli__llhttp_table;
}

static void creq__parse_error(struct al_http_creq *c, llhttp_errno_t e)
{
    int err = c->parse_err ? c->parse_err : -EPROTO;
    creq__fail(c, err, "bad response from %s: %s (%s)", c->o.target,
               llhttp_get_error_reason(&c->parser), llhttp_errno_name(e));
}

/* The server switched protocols: the connection becomes a tunnel for on_upgrade. */
static void creq__upgrade(struct al_http_creq *c)
{
    struct cconn *k = c->conn;
    if (!k || k->queued) {
        creq__fail(c, -EPROTO, "%s switched protocols before the request was sent", c->o.target);
        return;
    }
    if (k->reading) {
        uv_read_stop(&k->h.stream);
        k->reading = false;
    }
    struct al_http_tunnel *t = NULL;
    int rc = http__tunnel_new(c->loop, &k->h.stream, k->is_unix, c->in.cur, c->in.cur_len, &t);
    c->in.cur_len = 0;
    cconn__close(k); /* the socket lives on in the tunnel */
    if (rc) {
        creq__fail(c, rc, "taking over the connection to %s: %s", c->o.target, strerror(-rc));
        return;
    }
    c->o.on_upgrade(c, c->hdrs.v, c->hdrs.n, t, c->o.arg);
    creq__finish(c, 0);
}

/* Parses what is in c->in.cur: header block(s), then body pieces; calls the user. */
static void creq__process(struct al_http_creq *c)
{
    c->busy++;
    if (!c->in.cur && c->in.len) {
        c->in.cur = c->in.buf;
        c->in.cur_len = c->in.len;
    }
    while (!c->finish_pending && !c->finished && !c->paused) {
        if (c->msg_complete) {
            creq__finish(c, 0);
            break;
        }
        if (c->in.cur_len == 0)
            break;
        c->got_bytes = true;
        if (!c->headers_ready) {
            size_t used = 0;
            int rc = al_http_head_scan(&c->scan, c->in.cur, c->in.cur_len, &used);
            if (rc < 0) {
                creq__fail(c, rc == -E2BIG ? -E2BIG : -EPROTO, "bad response from %s: %s",
                           c->o.target, al_http_head_scan_message(&c->scan));
                break;
            }
            llhttp_errno_t e = llhttp_execute(&c->parser, c->in.cur, used);
            size_t u = e == HPE_OK ? used : (size_t)(llhttp_get_error_pos(&c->parser) - c->in.cur);
            c->in.cur += u;
            c->in.cur_len -= u;
            if (e != HPE_OK && e != HPE_PAUSED) {
                creq__parse_error(c, e);
                break;
            }
            if (!c->headers_ready)
                continue; /* more header bytes, or a 1xx was skipped */
            /* The answer has started: no retry from here on. */
            creq__free_out(c);
            uv_timer_stop(&c->timer);
            c->state = C_BODY;
            if (c->upgraded) {
                creq__upgrade(c);
                break;
            }
            if (c->o.on_response &&
                c->o.on_response(c, c->status, c->hdrs.v, c->hdrs.n, c->o.arg) != 0) {
                creq__fail(c, -ECANCELED, "aborted by the on_response callback");
                break;
            }
            continue;
        }
        c->cb_start = c->cb_end = NULL;
        llhttp_errno_t e = llhttp_execute(&c->parser, c->in.cur, c->in.cur_len);
        size_t u =
            e == HPE_OK ? c->in.cur_len : (size_t)(llhttp_get_error_pos(&c->parser) - c->in.cur);
        char *data = c->cb_start;
        size_t dlen = data ? (size_t)(c->cb_end - data) : 0;
        c->in.cur += u;
        c->in.cur_len -= u;
        if (dlen && c->o.on_data) {
            c->in_on_data = true;
            c->resume_asked = false;
            int pause = c->o.on_data(c, data, dlen, c->o.arg);
            c->in_on_data = false;
            if (pause && !c->resume_asked)
                c->paused = true;
        }
        if (e != HPE_OK && e != HPE_PAUSED) {
            creq__parse_error(c, e);
            break;
        }
    }
    /* A response that completes without a body still needs its headers delivered: the
     * loop above did that before noticing msg_complete. */
    creq__unbusy(c);
}

/* ---- reading ----------------------------------------------------------------------- */
static bool creq__can_retry(struct al_http_creq *c)
{
    struct cconn *k = c->conn;
    return k && k->reused && !c->got_bytes && c->retryable && !c->retried && c->out.len &&
           !c->finish_pending && !c->finished;
}

static void creq__retry(struct al_http_creq *c)
{
    c->retried = true;
    struct cconn *old = c->conn;
    cconn__close(old); /* detaches it from c */
    llhttp_init(&c->parser, HTTP_RESPONSE, cli__settings());
    c->parser.data = c;
    int rc = creq__connect(c);
    if (rc)
        creq__fail(c, rc, "reconnecting to %s: %s", c->o.target, strerror(-rc));
}

/* An idle connection in the pool heard from its server (a close, or garbage). */
static void cconn__idle_drop(struct cconn *k)
{
    if (k->closing)
        return;
    if (k->pool && !k->creq && (k->prev || k->next || k->pool->idle_head == k))
        pool__idle_unlink(k);
    cconn__close(k);
}

/* Response bytes (plaintext) for c: parsed, the rest kept for later. */
static void cconn__input(struct cconn *k, struct al_http_creq *c, char *data, size_t len)
{
    if (http__input_feed(&c->in, data, len) < 0) {
        creq__fail(c, -ENOMEM, "out of memory");
        return;
    }
    creq__process(c);
    if (!c->finished && http__input_save(&c->in) < 0)
        creq__fail(c, -ENOMEM, "out of memory");
    if (!c->finished && c->paused && k->reading) {
        uv_read_stop(&k->h.stream);
        k->reading = false;
    }
}

static void cconn__eof(struct cconn *k, struct al_http_creq *c, ssize_t nread);

/* Hands the TLS session's plaintext to the request until it pauses or none is left. */
static void cconn__tls_pump(struct cconn *k)
{
    while (!k->closing) {
        struct al_http_creq *c = k->creq;
        if (c && (c->paused || c->finished || c->finish_pending))
            return;
        char msg[256] = "";
        long n = k->tls_ops->read(k->tls, k->plain, HTTP__READ_BUF, msg, sizeof msg);
        if (n == -EAGAIN)
            return;
        if (!c) { /* idle: anything but a TLS-internal message ends it */
            cconn__idle_drop(k);
            return;
        }
        if (cconn__tls_flush(k) < 0) { /* what reading produced (alerts, key updates) */
            creq__fail(c, -EPIPE, "sending to %s failed", c->o.target);
            return;
        }
        if (n > 0) {
            cconn__input(k, c, k->plain, (size_t)n);
            continue;
        }
        if (n < 0 && !c->err[0])
            snprintf(c->err, sizeof c->err, "TLS with %s: %s", c->o.target, msg);
        cconn__eof(k, c, n == 0 ? UV_EOF : UV_EPROTO);
        return;
    }
}

/* Ciphertext from the socket: the handshake first, then plaintext for the request. */
static void cconn__tls_input(struct cconn *k, const char *data, size_t len)
{
    struct al_http_creq *c = k->creq;
    if (k->tls_ops->feed(k->tls, data, len) < 0) {
        if (c)
            creq__fail(c, -ENOMEM, "out of memory");
        else
            cconn__idle_drop(k);
        return;
    }
    if (!k->connected) {
        char msg[256] = "";
        int rc = k->tls_ops->handshake(k->tls, msg, sizeof msg);
        int frc = cconn__tls_flush(k);
        if (!c)
            return;
        if (rc == -EAGAIN && frc == 0)
            return;
        if (rc < 0 || frc < 0) {
            creq__fail(c, -EPROTO, "TLS handshake with %s failed: %s", c->o.target,
                       msg[0] ? msg : uv_strerror(frc));
            return;
        }
        creq__connected(c);
        if (c->finished || !c->conn)
            return;
    }
    cconn__tls_pump(k);
}

static void cconn__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct cconn *k = st->data;
    struct al_http_creq *c = k->creq;
    if (k->tls && nread > 0) {
        cconn__tls_input(k, buf->base, (size_t)nread);
        http__release_buf(buf);
        return;
    }
    if (!c) { /* idle in the pool: the server closed it or sent garbage */
        http__release_buf(buf);
        if (nread != 0)
            cconn__idle_drop(k);
        return;
    }
    if (nread > 0) {
        cconn__input(k, c, buf->base, (size_t)nread);
        http__release_buf(buf);
        return;
    }
    http__release_buf(buf);
    if (nread == 0)
        return;
    cconn__eof(k, c, nread);
}

/* The connection ended (EOF, an error, or the TLS session's end). */
static void cconn__eof(struct cconn *k, struct al_http_creq *c, ssize_t nread)
{
    (void)k;
    if (creq__can_retry(c)) {
        creq__retry(c);
        return;
    }
    if (nread == UV_EOF && c->headers_ready) {
        c->busy++;
        llhttp_errno_t e = llhttp_finish(&c->parser);
        if ((e == HPE_OK || e == HPE_PAUSED) && c->msg_complete) {
            c->pool_ok = false;
            creq__finish(c, 0);
        } else {
            creq__fail(c, -ECONNRESET, "%s closed the connection in the middle of the response",
                       c->o.target);
        }
        creq__unbusy(c);
        return;
    }
    if (nread == UV_EOF)
        creq__fail(c, -ECONNRESET, "%s closed the connection without answering", c->o.target);
    else
        creq__fail(c, (int)nread, "reading from %s: %s", c->o.target, uv_strerror((int)nread));
}

/* ---- connecting -------------------------------------------------------------------- */
static void creq__connected(struct al_http_creq *c)
{
    struct cconn *k = c->conn;
    k->connected = true;
    if (!k->reading && uv_read_start(&k->h.stream, http__alloc_cb, cconn__on_read) == 0)
        k->reading = true;
    c->state = C_SENT;
    if (c->o.stream_body && !c->ended)
        uv_timer_stop(&c->timer); /* the caller paces the body; restarted at creq_end */
    if (c->out.len) {
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
        struct al_buf keep = c->out;
        c->out = (struct al_buf)AL_BUF_INIT;
        int rc = creq__send(c, &b, 1);
        if (c->retryable && c->conn && c->conn->pool)
            c->out = keep; /* kept for one retry until the answer starts */
        else if (c->o.wipe)
            al_buf_free_wipe(&keep);
        else
            al_buf_free(&keep);
        if (rc) {
            creq__fail(c, rc, "sending the request to %s: %s", c->o.target, strerror(-rc));
            return;
        }
    }
    creq__maybe_drain(c);
}

static void cconn__on_connect(uv_connect_t *req, int status)
{
    struct cconn *k = req->data;
    struct al_http_creq *c = k->creq;
    if (!c || k->closing)
        return;
    if (status < 0) {
        creq__fail(c, status, "connect %s: %s", c->o.target, uv_strerror(status));
        return;
    }
    if (!k->is_unix)
        uv_tcp_nodelay(&k->h.tcp, 1);
    if (k->tls) { /* the ClientHello; the answer comes through cconn__tls_input */
        char msg[256] = "";
        int rc = k->tls_ops->handshake(k->tls, msg, sizeof msg);
        if (rc == 0 || rc == -EAGAIN)
            rc = cconn__tls_flush(k);
        if (rc == 0 && !k->reading &&
            uv_read_start(&k->h.stream, http__alloc_cb, cconn__on_read) == 0)
            k->reading = true;
        if (rc < 0)
            creq__fail(c, -EPROTO, "TLS handshake with %s failed: %s", c->o.target,
                       msg[0] ? msg : uv_strerror(rc));
        return;
    }
    creq__connected(c);
}

static int creq__tcp_connect(struct al_http_creq *c, const struct sockaddr *sa)
{
    struct cconn *k = c->conn;
    return uv_tcp_connect(&k->connect_req, &k->h.tcp, sa, cconn__on_connect);
}

static void creq__on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct creq_gai *g = (struct creq_gai *)req;
    struct al_http_creq *c = g->c;
    free(g);
    if (!c) {
        uv_freeaddrinfo(res);
        return;
    }
    c->gai = NULL;
    if (status < 0 || !res) {
        uv_freeaddrinfo(res);
        creq__fail(c, -EHOSTUNREACH, "cannot resolve '%s': %s", c->tgt.host, uv_strerror(status));
        return;
    }
    int rc = creq__tcp_connect(c, res->ai_addr);
    uv_freeaddrinfo(res);
    if (rc)
        creq__fail(c, rc, "connect %s: %s", c->o.target, uv_strerror(rc));
}

static int creq__connect(struct al_http_creq *c)
{
    struct cconn *k = NULL;
    if (c->o.pool && !c->retried)
        k = pool__take(c->o.pool, c->key);
    if (k) {
        k->creq = c;
        c->conn = k;
        creq__connected(c);
        return 0;
    }
    k = cconn__new(c);
    if (!k)
        return -errno;
    k->creq = c;
    c->conn = k;
    c->state = C_CONNECTING;
    if (c->tgt.is_unix) {
        uv_pipe_connect(&k->connect_req, &k->h.pipe, c->tgt.path, cconn__on_connect);
        return 0;
    }
    struct sockaddr_storage ss;
    if (c->pinned) {
        ss = c->pin;
        if (ss.ss_family == AF_INET)
            ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)c->tgt.port);
        else
            ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)c->tgt.port);
        return creq__tcp_connect(c, (struct sockaddr *)&ss);
    }
    const char *host = strcmp(c->tgt.host, "localhost") == 0 ? "127.0.0.1" : c->tgt.host;
    if (uv_ip4_addr(host, c->tgt.port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(host, c->tgt.port, (struct sockaddr_in6 *)&ss) == 0)
        return creq__tcp_connect(c, (struct sockaddr *)&ss);
    struct creq_gai *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->c = c;
    char port[8];
    snprintf(port, sizeof port, "%d", c->tgt.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = uv_getaddrinfo(c->loop, &g->req, creq__on_resolved, c->tgt.host, port, &hints);
    if (rc) {
        free(g);
        return rc;
    }
    c->gai = g;
    return 0;
}

/* ---- request building -------------------------------------------------------------- */
static bool creq__skip_header(const char *name, bool upgrade)
{
    return strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
           strcasecmp(name, "connection") == 0 || strcasecmp(name, "keep-alive") == 0 ||
           (upgrade && strcasecmp(name, "upgrade") == 0);
}

static int creq__build(struct al_http_creq *c, const struct al_http_creq_opts *o, char *msg,
                       size_t msglen)
{
    if (!http__is_token(o->method, strlen(o->method))) {
        snprintf(msg, msglen, "invalid method '%s'", o->method);
        return -EINVAL;
    }
    struct al_http_target pt;
    const char *why;
    if (al_http_target_parse(o->path, strlen(o->path), 0, &pt, &why) < 0 ||
        (pt.form != AL_HTTP_TARGET_ORIGIN && pt.form != AL_HTTP_TARGET_ASTERISK)) {
        snprintf(msg, msglen,
                 "invalid request path '%s' (it must start with '/' and contain "
                 "no spaces, control characters or '#'; percent-encode them)",
                 o->path);
        return -EINVAL;
    }
    if (o->upgrade &&
        (!o->upgrade[0] || !http__is_field_value(o->upgrade) || o->stream_body || o->body)) {
        snprintf(msg, msglen,
                 "invalid upgrade request (an Upgrade value without controls, "
                 "and no request body)");
        return -EINVAL;
    }
    if (o->stream_body && o->stream_length < 0) {
        snprintf(msg, msglen, "stream_length must be >= 0");
        return -EINVAL;
    }
    bool user_host = false;
    for (size_t i = 0; i < o->n_headers; i++) {
        const struct al_http_header *h = &o->headers[i];
        if (!h->name || !h->value || !http__is_token(h->name, strlen(h->name)) ||
            !http__is_field_value(h->value)) {
            snprintf(msg, msglen,
                     "invalid request header '%s' (names are tokens; values "
                     "have no CR, LF or NUL)",
                     h->name ? h->name : "(null)");
            return -EINVAL;
        }
        if (strcasecmp(h->name, "host") == 0)
            user_host = true;
    }
    struct al_buf *b = &c->out;
    int rc = al_buf_printf(b, "%s %s HTTP/1.1\r\n", o->method, o->path);
    if (!rc && !user_host)
        rc = al_buf_printf(b, "Host: %s\r\n", c->tgt.hostport);
    for (size_t i = 0; !rc && i < o->n_headers; i++)
        if (!creq__skip_header(o->headers[i].name, o->upgrade != NULL))
            rc = al_buf_printf(b, "%s: %s\r\n", o->headers[i].name, o->headers[i].value);
    if (!rc) {
        if (o->stream_body && o->stream_length > 0)
            rc = al_buf_printf(b, "Content-Length: %lld\r\n", (long long)o->stream_length);
        else if (o->stream_body)
            rc = al_buf_appends(b, "Transfer-Encoding: chunked\r\n");
        else if (o->body || strcmp(o->method, "POST") == 0 || strcmp(o->method, "PUT") == 0 ||
                 strcmp(o->method, "PATCH") == 0)
            rc = al_buf_printf(b, "Content-Length: %zu\r\n", o->body ? o->body_len : 0);
    }
    if (!rc && o->upgrade)
        rc = al_buf_printf(b, "Upgrade: %s\r\nConnection: Upgrade\r\n\r\n", o->upgrade);
    else if (!rc)
        rc = al_buf_appends(b, o->pool ? "Connection: keep-alive\r\n\r\n"
                                       : "Connection: close\r\n\r\n");
    if (!rc && !o->stream_body && o->body && o->body_len)
        rc = al_buf_append(b, o->body, o->body_len);
    if (rc)
        snprintf(msg, msglen, "cannot build the request: %s", strerror(-rc));
    return rc;
}

/* The address a pinned request dials; -EINVAL for a unix target or another family. */
static int creq__pin(struct al_http_creq *c, const struct sockaddr *sa, char *msg, size_t msglen)
{
    size_t len = sa->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
                 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : 0;
    if (c->tgt.is_unix || !len) {
        snprintf(msg, msglen, "connect_addr: %s",
                 c->tgt.is_unix ? "not for a unix socket target" : "not an IPv4 or IPv6 address");
        return -EINVAL;
    }
    memcpy(&c->pin, sa, len);
    c->pinned = true;
    return 0;
}

/* A pool's key: the target, and the pinned address (one name can be pinned to different
 * addresses by different callers; a connection is reused only toward the same one). */
static char *creq__pool_key(const struct al_http_creq *c, const char *target)
{
    if (!c->pinned)
        return strdup(target);
    char a[INET6_ADDRSTRLEN] = "";
    const void *src = c->pin.ss_family == AF_INET
                          ? (const void *)&((const struct sockaddr_in *)&c->pin)->sin_addr
                          : (const void *)&((const struct sockaddr_in6 *)&c->pin)->sin6_addr;
    inet_ntop(c->pin.ss_family, src, a, sizeof a);
    size_t n = strlen(target) + strlen(a) + 2;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%s@%s", target, a);
    return k;
}

/* ---- public API -------------------------------------------------------------------- */
int al_http_creq_start(uv_loop_t *loop, const struct al_http_creq_opts *opts,
                       struct al_http_creq **out)
{
    if (!loop || !opts || !opts->target || !opts->method || !opts->path || !opts->on_done)
        return -EINVAL;
    if (opts->pool && (opts->pool->closing || opts->pool->loop != loop))
        return -ESHUTDOWN;
    struct al_http_creq *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    http__ignore_sigpipe();
    c->loop = loop;
    c->o = *opts;
    if (!c->o.timeout_ms)
        c->o.timeout_ms = CREQ_DEFAULT_TIMEOUT_MS;
    if (!c->o.max_header_bytes)
        c->o.max_header_bytes = CREQ_DEFAULT_MAX_HEADERS;
    /* Pointers into the caller's memory are not kept past this call. */
    c->o.headers = NULL;
    c->o.n_headers = 0;
    c->o.body = NULL;
    c->o.target = NULL;
    c->o.method = NULL;
    c->o.path = NULL;
    c->o.upgrade = NULL;
    c->o.connect_addr = NULL;
    c->want_upgrade = opts->upgrade != NULL;
    c->body_left = opts->stream_body && opts->stream_length > 0 ? opts->stream_length : -1;
    char msg[256] = "";
    int rc = http__parse_target(opts->target, &c->tgt, msg, sizeof msg);
    if (!rc)
        rc = creq__build(c, opts, msg, sizeof msg);
    if (!rc && opts->connect_addr)
        rc = creq__pin(c, opts->connect_addr, msg, sizeof msg);
    if (!rc && !(c->key = creq__pool_key(c, opts->target)))
        rc = -ENOMEM;
    if (!rc && c->tgt.tls && !opts->tls) {
        snprintf(msg, sizeof msg, "%s: https needs a TLS provider", opts->target);
        rc = -EPROTONOSUPPORT;
    }
    if (!rc && c->tgt.tls && opts->upgrade) {
        snprintf(msg, sizeof msg, "%s: no protocol upgrades over TLS", opts->target);
        rc = -EINVAL;
    }
    if (rc) {
        if (msg[0])
            al_debug("http client: %s", msg);
        creq__free_out(c);
        free(c->key);
        free(c);
        return rc;
    }
    c->o.target = c->key;
    c->head_method = strcmp(opts->method, "HEAD") == 0;
    c->retryable =
        opts->pool && !opts->stream_body && !c->want_upgrade &&
        (strcmp(opts->method, "GET") == 0 || c->head_method || strcmp(opts->method, "PUT") == 0 ||
         strcmp(opts->method, "DELETE") == 0 || strcmp(opts->method, "OPTIONS") == 0);
    c->ended = !opts->stream_body;
    c->pool_ok = opts->pool != NULL && !c->want_upgrade;
    al_http_head_scan_init(&c->scan, false, c->o.max_header_bytes);
    http__hdrs_init(&c->hdrs, 2 * c->o.max_header_bytes + 64, CREQ_MAX_HEADER_FIELDS);
    llhttp_init(&c->parser, HTTP_RESPONSE, cli__settings());
    c->parser.data = c;
    uv_timer_init(loop, &c->timer);
    uv_timer_init(loop, &c->kick);
    c->timer.data = c;
    c->kick.data = c;
    atomic_fetch_add(&http__live_creqs, 1);
    uv_timer_start(&c->timer, creq__on_timeout, c->o.timeout_ms, 0);
    *out = c;
    c->busy++; /* no on_done from inside this call: a failure is reported from the loop */
    rc = creq__connect(c);
    if (rc)
        creq__fail(c, rc, "connect %s: %s", c->o.target, strerror(-rc));
    c->busy--;
    if (c->finish_pending)
        creq__kick(c);
    return 0;
}

int al_http_creq_write(struct al_http_creq *c, const void *data, size_t len)
{
    if (c->finished || c->finish_pending)
        return -EPIPE;
    if (!c->o.stream_body || c->ended)
        return -EINVAL;
    if (len == 0)
        return 0;
    if (c->body_left >= 0) {
        if ((uint64_t)len > (uint64_t)c->body_left)
            return -EINVAL;
        c->body_left -= (int64_t)len;
        uv_buf_t raw = uv_buf_init((char *)data, (unsigned)len);
        int rc = creq__send(c, &raw, 1);
        if (rc)
            creq__fail(c, rc, "sending the request body to %s: %s", c->o.target, strerror(-rc));
        return rc;
    }
    char hex[24];
    int hl = snprintf(hex, sizeof hex, "%zx\r\n", len);
    uv_buf_t bufs[3] = {uv_buf_init(hex, (unsigned)hl), uv_buf_init((char *)data, (unsigned)len),
                        uv_buf_init("\r\n", 2)};
    int rc = creq__send(c, bufs, 3);
    if (rc)
        creq__fail(c, rc, "sending the request body to %s: %s", c->o.target, strerror(-rc));
    return rc;
}

int al_http_creq_end(struct al_http_creq *c)
{
    if (c->finished || c->finish_pending)
        return -EPIPE;
    if (!c->o.stream_body || c->ended)
        return -EINVAL;
    if (c->body_left > 0)
        return creq__fail(c, -EPROTO,
                          "the request body to %s ended %lld bytes short of its "
                          "Content-Length",
                          c->o.target, (long long)c->body_left);
    uv_buf_t b = uv_buf_init("0\r\n\r\n", 5);
    int rc = c->body_left == 0 ? 0 : creq__send(c, &b, 1);
    if (rc)
        return creq__fail(c, rc, "sending the request body to %s: %s", c->o.target, strerror(-rc));
    c->ended = true;
    if (!c->headers_ready && c->state != C_CONNECTING)
        uv_timer_start(&c->timer, creq__on_timeout, c->o.timeout_ms, 0);
    return 0;
}

size_t al_http_creq_queued(const struct al_http_creq *c)
{
    const struct cconn *k = c->conn;
    if (k && k->connected)
        return k->queued;
    return c->out.len;
}

void al_http_creq_resume(struct al_http_creq *c)
{
    if (c->in_on_data) { /* cancels the pause on_data is about to ask for */
        c->resume_asked = true;
        return;
    }
    if (c->finished || !c->paused)
        return;
    c->paused = false;
    struct cconn *k = c->conn;
    if (k && !k->reading && uv_read_start(&k->h.stream, http__alloc_cb, cconn__on_read) == 0)
        k->reading = true;
    if (c->in.len || c->msg_complete || (k && k->tls))
        creq__kick(c);
}

void al_http_creq_cancel(struct al_http_creq *c)
{
    if (c->finished)
        return;
    creq__fail(c, -ECANCELED, "canceled");
}

void al_http_creq_on_drain(struct al_http_creq *c, size_t low_water,
                           void (*cb)(struct al_http_creq *c, void *arg))
{
    if (c->finished)
        return;
    c->drain_cb = cb;
    c->drain_low = low_water;
    if (cb && al_http_creq_queued(c) <= low_water)
        creq__kick(c);
}

const char *al_http_creq_strerror(const struct al_http_creq *c)
{
    return c->err;
}
