/* tests/unit/common/test_http_fixture: what the HTTP suites share.
 *
 *   - tsrv: an al_http_server on its own thread and loop (so a test can talk to it with
 *     blocking sockets), listening on 127.0.0.1:0 and on a unix socket in a per-test
 *     temporary directory; the test's handler runs on the server thread.
 *   - raw client helpers: connect, send, read with a deadline, parse one response.
 *   - a routing handler with the behaviours the suites need (echo, streamed echo, chunked
 *     responses paced by timers, slow answers, on_close counting, peer credentials).
 */
#ifndef AIRLOCK_TEST_HTTP_FIXTURE_H
#define AIRLOCK_TEST_HTTP_FIXTURE_H

#include "al_test.h"
#include "common/http.h"
#include "common/cleanup.h"
#include "common/http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

/* AL_TEST_ONLY=name runs one test of a suite (debugging). */
static inline bool t_selected(const char *name)
{
    const char *only = getenv("AL_TEST_ONLY");
    return !only || strcmp(only, name) == 0;
}
#define T_ADD(tc, fn)               \
    do {                            \
        if (t_selected(#fn))        \
            tcase_add_test(tc, fn); \
    } while (0)

/* ---- counters the handlers bump (read from the test thread) ------------------------ */
static atomic_int t_requests, t_on_close, t_body_err, t_body_ok, t_drains, t_last_body_err;
static atomic_int t_stream_paused;

/* Waits (up to ms) for a counter the server thread sets; returns its last value. */
static __attribute__((unused)) int t_wait_int(atomic_int *v, int want, int ms)
{
    for (int i = 0; i < ms && atomic_load(v) != want; i++)
        usleep(1000);
    return atomic_load(v);
}

/* ---- server on a thread ------------------------------------------------------------ */
struct tsrv {
    pthread_t th;
    uv_loop_t loop;
    uv_async_t stop;
    struct al_http_server *srv;
    struct al_http_server_opts opts;
    int port;
    char dir[64];
    char sock[128];
    atomic_int ready;
    atomic_bool closed;
    bool no_unix;
};

static __attribute__((unused)) void tsrv__closed(void *arg)
{
    struct tsrv *t = arg;
    atomic_store(&t->closed, true);
}

static __attribute__((unused)) void tsrv__on_stop(uv_async_t *a)
{
    struct tsrv *t = a->data;
    al_http_server_close(t->srv, tsrv__closed, t);
    uv_close((uv_handle_t *)&t->stop, NULL);
}

static void *tsrv__main(void *arg)
{
    struct tsrv *t = arg;
    struct al_error err = {0};
    ck_assert_int_eq(uv_loop_init(&t->loop), 0);
    ck_assert_int_eq(al_http_server_new(&t->loop, &t->opts, &t->srv), 0);
    int rc = al_http_server_listen_tcp(t->srv, "127.0.0.1", 0, &err);
    if (rc)
        fprintf(stderr, "listen: %s\n", al_error_str(&err));
    ck_assert_int_eq(rc, 0);
    if (!t->no_unix) {
        rc = al_http_server_listen_unix(t->srv, t->sock, 0660, &err);
        if (rc)
            fprintf(stderr, "listen unix: %s\n", al_error_str(&err));
        ck_assert_int_eq(rc, 0);
    }
    t->port = al_http_server_port(t->srv);
    uv_async_init(&t->loop, &t->stop, tsrv__on_stop);
    t->stop.data = t;
    atomic_store(&t->ready, 1);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    if (!atomic_load(&t->closed))
        fprintf(stderr, "tsrv: loop ended before the server closed\n");
    int lc = uv_loop_close(&t->loop);
    if (lc) {
        fprintf(stderr, "tsrv: uv_loop_close: %s\n", uv_strerror(lc));
        uv_print_all_handles(&t->loop, stderr);
    }
    ck_assert(atomic_load(&t->closed));
    ck_assert_int_eq(lc, 0);
    return NULL;
}

static __attribute__((unused)) void tsrv_start(struct tsrv *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/al-http-%d-XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(t->dir));
    snprintf(t->sock, sizeof t->sock, "%s/s.sock", t->dir);
    ck_assert_int_eq(pthread_create(&t->th, NULL, tsrv__main, t), 0);
    while (!atomic_load(&t->ready))
        usleep(1000);
}

static __attribute__((unused)) void tsrv_stop(struct tsrv *t)
{
    uv_async_send(&t->stop);
    pthread_join(t->th, NULL);
    unlink(t->sock);
    rmdir(t->dir);
}

/* ---- raw sockets ------------------------------------------------------------------- */
static __attribute__((unused)) uint64_t t_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static __attribute__((unused)) int t_connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static __attribute__((unused)) int t_connect_unix(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    return fd;
}

static __attribute__((unused)) void t_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_int_gt(n, 0);
        p += n;
        len -= (size_t)n;
    }
}

static __attribute__((unused)) void t_sends(int fd, const char *s)
{
    t_send(fd, s, strlen(s));
}

/* Reads what arrives until the peer closes or timeout_ms passes; returns the length
 * (out is NUL-terminated) and sets *closed. */
static __attribute__((unused)) size_t t_read_until_close(int fd, char *out, size_t cap,
                                                         int timeout_ms, bool *closed)
{
    size_t len = 0;
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    *closed = false;
    for (;;) {
        uint64_t now = t_now_ms();
        if (now >= end)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(end - now));
        if (pr <= 0)
            break;
        ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            *closed = true;
            break;
        }
        if (n < 0)
            break;
        len += (size_t)n;
        if (len + 1 >= cap)
            break;
    }
    out[len] = '\0';
    return len;
}

/* One response, parsed with llhttp (the test's own parser instance). */
struct t_resp {
    int status;
    char headers[8192];
    size_t hlen;
    char body[256 * 1024];
    size_t blen;
    bool complete;
    bool keep_alive;
    char last_field[128];
    int chunks;   /* on_body calls (for chunk observations) */
    size_t total; /* body bytes, including those that did not fit in body[] */
    bool head;    /* response to HEAD: no body */
};

static __attribute__((unused)) int t__on_hf(llhttp_t *p, const char *at, size_t n)
{
    struct t_resp *r = p->data;
    if (r->hlen + n + 2 < sizeof r->headers) {
        memcpy(r->headers + r->hlen, at, n);
        r->hlen += n;
    }
    return 0;
}

static __attribute__((unused)) int t__on_hfc(llhttp_t *p)
{
    struct t_resp *r = p->data;
    if (r->hlen + 2 < sizeof r->headers)
        r->headers[r->hlen++] = ':';
    return 0;
}

static __attribute__((unused)) int t__on_hvc(llhttp_t *p)
{
    struct t_resp *r = p->data;
    if (r->hlen + 2 < sizeof r->headers)
        r->headers[r->hlen++] = '\n';
    r->headers[r->hlen] = '\0';
    return 0;
}

static __attribute__((unused)) int t__on_body(llhttp_t *p, const char *at, size_t n)
{
    struct t_resp *r = p->data;
    r->total += n;
    if (r->blen + n < sizeof r->body) {
        memcpy(r->body + r->blen, at, n);
        r->blen += n;
        r->body[r->blen] = '\0';
    }
    r->chunks++;
    return 0;
}

static __attribute__((unused)) int t__on_hc(llhttp_t *p)
{
    struct t_resp *r = p->data;
    r->status = p->status_code;
    return r->head ? 1 : 0;
}

static __attribute__((unused)) int t__on_mc(llhttp_t *p)
{
    struct t_resp *r = p->data;
    if (r->status >= 100 && r->status < 200) { /* 100 Continue: wait for the real one */
        r->hlen = 0;
        return 0;
    }
    r->complete = true;
    r->keep_alive = llhttp_should_keep_alive(p);
    return HPE_PAUSED;
}

/* Reads exactly one response from fd (the bytes after it stay in *carry). Returns false
 * on timeout/close before it was complete. */
struct t_reader {
    char buf[64 * 1024];
    size_t len;
};

static __attribute__((unused)) bool t_read_response_ex(int fd, struct t_reader *rd,
                                                       struct t_resp *r, int timeout_ms, bool head)
{
    memset(r, 0, sizeof *r);
    r->head = head;
    llhttp_settings_t st;
    llhttp_settings_init(&st);
    st.on_header_field = t__on_hf;
    st.on_header_value = t__on_hf;
    st.on_header_field_complete = t__on_hfc;
    st.on_header_value_complete = t__on_hvc;
    st.on_headers_complete = t__on_hc;
    st.on_body = t__on_body;
    st.on_message_complete = t__on_mc;
    llhttp_t p;
    llhttp_init(&p, HTTP_RESPONSE, &st);
    p.data = r;
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (rd->len) {
            llhttp_errno_t e = llhttp_execute(&p, rd->buf, rd->len);
            size_t used = e == HPE_OK ? rd->len : (size_t)(llhttp_get_error_pos(&p) - rd->buf);
            memmove(rd->buf, rd->buf + used, rd->len - used);
            rd->len -= used;
            if (r->complete)
                return true;
            if (e != HPE_OK && e != HPE_PAUSED) {
                fprintf(stderr, "t_read_response: %s (%s)\n", llhttp_errno_name(e),
                        llhttp_get_error_reason(&p));
                return false;
            }
        }
        uint64_t now = t_now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (now >= end || poll(&pfd, 1, (int)(end - now)) <= 0) {
            fprintf(stderr,
                    "t_read_response: timed out (status %d, %d body pieces, %zu buffered)\n",
                    r->status, r->chunks, rd->len);
            return false;
        }
        ssize_t n = recv(fd, rd->buf + rd->len, sizeof rd->buf - rd->len, 0);
        if (n <= 0) {
            if (llhttp_finish(&p) == HPE_OK && r->status) /* close-delimited body */
                r->complete = true;
            return r->complete;
        }
        rd->len += (size_t)n;
    }
}

static __attribute__((unused)) bool t_read_response(int fd, struct t_reader *rd, struct t_resp *r,
                                                    int timeout_ms)
{
    return t_read_response_ex(fd, rd, r, timeout_ms, false);
}

/* Sends a request on a new TCP connection and reads one response. */
static __attribute__((unused)) int t_roundtrip(int port, const char *req, struct t_resp *r)
{
    int fd = t_connect_tcp(port);
    t_sends(fd, req);
    struct t_reader rd = {.len = 0};
    bool ok = t_read_response(fd, &rd, r, 5000);
    close(fd);
    return ok ? r->status : -1;
}

/* ---- handlers ---------------------------------------------------------------------- */
static __attribute__((unused)) void t__body_done(struct al_http_req *req, int err)
{
    if (err) {
        atomic_fetch_add(&t_body_err, 1);
        atomic_store(&t_last_body_err, err);
        return;
    }
    atomic_fetch_add(&t_body_ok, 1);
    al_http_reply(req, 200, "application/octet-stream", req->body.data, req->body.len);
}

/* Streamed echo: each piece goes back as one chunk; pauses when asked (?pause=1) and
 * resumes from a timer. */
struct t_stream {
    uv_timer_t timer;
    struct al_http_req *req;
    bool pause;
    bool started;
};

static __attribute__((unused)) void t__stream_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static __attribute__((unused)) void t__stream_resume(uv_timer_t *t)
{
    struct t_stream *s = t->data;
    al_http_req_resume_body(s->req);
}

static __attribute__((unused)) int t__stream_data(struct al_http_req *req, const char *data,
                                                  size_t len)
{
    struct t_stream *s = req->user;
    if (!s->started) {
        s->started = true;
        al_http_resp_start(req, 200, NULL, 0, -1);
    }
    al_http_resp_write(req, data, len);
    if (s->pause) {
        atomic_fetch_add(&t_stream_paused, 1);
        uv_timer_start(&s->timer, t__stream_resume, 5, 0);
        return 1;
    }
    return 0;
}

static __attribute__((unused)) void t__stream_end(struct al_http_req *req, int err)
{
    struct t_stream *s = req->user;
    if (err) {
        atomic_fetch_add(&t_body_err, 1);
        atomic_store(&t_last_body_err, err);
    } else {
        atomic_fetch_add(&t_body_ok, 1);
        if (!s->started)
            al_http_resp_start(req, 200, NULL, 0, -1);
        al_http_resp_end(req);
    }
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, t__stream_timer_closed);
}

/* Paced chunked response: n chunks, one per timer tick. */
struct t_pace {
    uv_timer_t timer;
    struct al_http_req *req;
    int left, i, delay;
    bool gone;
};

static __attribute__((unused)) void t__pace_closed(uv_handle_t *h)
{
    free(h->data);
}

static __attribute__((unused)) void t__pace_tick(uv_timer_t *t)
{
    struct t_pace *p = t->data;
    char piece[64];
    int n = snprintf(piece, sizeof piece, "chunk-%d;", p->i++);
    al_http_resp_write(p->req, piece, (size_t)n);
    if (--p->left == 0) {
        al_http_resp_end(p->req);
        uv_timer_stop(t);
        uv_close((uv_handle_t *)t, t__pace_closed);
    }
}

static __attribute__((unused)) void t__pace_on_close(struct al_http_req *req)
{
    struct t_pace *p = req->user;
    atomic_fetch_add(&t_on_close, 1);
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, t__pace_closed);
}

/* Slow answer: replies after a delay; counts on_close. */
struct t_slow {
    uv_timer_t timer;
    struct al_http_req *req;
};

static __attribute__((unused)) void t__slow_closed(uv_handle_t *h)
{
    free(h->data);
}

static __attribute__((unused)) void t__slow_fire(uv_timer_t *t)
{
    struct t_slow *s = t->data;
    al_http_reply(s->req, 200, "text/plain", "slow", 4);
    uv_close((uv_handle_t *)t, t__slow_closed);
}

static __attribute__((unused)) void t__slow_on_close(struct al_http_req *req)
{
    struct t_slow *s = req->user;
    atomic_fetch_add(&t_on_close, 1);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, t__slow_closed);
}

/* Gated chunked response: the first chunk now, the second only once the test opens the
 * gate (so the test can see the first chunk before the second one exists). */
static atomic_bool t_gate;

struct t_gated {
    uv_timer_t timer;
    struct al_http_req *req;
};

static __attribute__((unused)) void t__gated_closed(uv_handle_t *h)
{
    free(h->data);
}

static __attribute__((unused)) void t__gated_poll(uv_timer_t *t)
{
    struct t_gated *g = t->data;
    if (!atomic_load(&t_gate))
        return;
    al_http_resp_write(g->req, "second", 6);
    al_http_resp_end(g->req);
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, t__gated_closed);
}

static __attribute__((unused)) void t__gated_on_close(struct al_http_req *req)
{
    struct t_gated *g = req->user;
    atomic_fetch_add(&t_on_close, 1);
    uv_timer_stop(&g->timer);
    uv_close((uv_handle_t *)&g->timer, t__gated_closed);
}

/* Bulk response with flow control: writes 16 KiB pieces until `kib` KiB, waiting for
 * on_drain whenever more than 256 KiB are queued. */
struct t_bulk {
    struct al_http_req *req;
    size_t left;
    char piece[16384];
};

static __attribute__((unused)) void t__bulk_pump(struct al_http_req *req)
{
    struct t_bulk *b = req->user;
    while (b->left) {
        if (al_http_resp_queued(req) > 256 * 1024) {
            al_http_resp_on_drain(req, 64 * 1024, t__bulk_pump);
            atomic_fetch_add(&t_drains, 1);
            return;
        }
        size_t n = b->left < sizeof b->piece ? b->left : sizeof b->piece;
        if (al_http_resp_write(req, b->piece, n) != 0) {
            al_http_resp_end(req); /* the peer is gone: release */
            free(b);
            return;
        }
        b->left -= n;
    }
    al_http_resp_end(req);
    free(b);
}

static __attribute__((unused)) void t__bulk_on_close(struct al_http_req *req)
{
    atomic_fetch_add(&t_on_close, 1);
    free(req->user);
}

static __attribute__((unused)) int t_qint(const struct al_http_req *req, const char *name, int def);

static __attribute__((unused)) void t__bulk_start(struct al_http_req *req)
{
    struct t_bulk *b = calloc(1, sizeof *b);
    memset(b->piece, 'x', sizeof b->piece);
    b->req = req;
    b->left = (size_t)t_qint(req, "kib", 1024) * 1024;
    req->user = b;
    al_http_req_on_close(req, t__bulk_on_close);
    al_http_resp_start(req, 200, NULL, 0, (int64_t)b->left);
    t__bulk_pump(req);
}

/* Late answer without on_close: the request must survive (detached) until the handler
 * ends it, whatever happened to the connection. */
static atomic_int t_late_rc = 1;

struct t_late {
    uv_timer_t timer;
    struct al_http_req *req;
};

static void t__late_closed(uv_handle_t *h)
{
    free(h->data);
}

static void t__late_fire(uv_timer_t *t)
{
    struct t_late *l = t->data;
    /* Touch the request as a handler would, then answer. */
    const char *ua = al_http_req_header(l->req, "user-agent");
    al_http_resp_queued(l->req);
    int rc = al_http_reply(l->req, 200, "text/plain", ua ? ua : "late", ua ? strlen(ua) : 4);
    atomic_store(&t_late_rc, rc);
    uv_close((uv_handle_t *)t, t__late_closed);
}

static __attribute__((unused)) void t__framing_done(struct al_http_req *req, int err)
{
    if (err)
        return;
    char out[160];
    int n =
        snprintf(out, sizeof out, "cl=%lld chunked=%d body=%.*s", (long long)req->content_length,
                 (int)req->chunked, (int)AL_MIN(req->body.len, 64), req->body.data);
    al_http_reply(req, 200, "text/plain", out, (size_t)n);
}

/* ---- aborted responses ------------------------------------------------------------- */
static atomic_int t_abort_rc = 1;

/* /abort?mode=chunked|length|full|none: some bytes, then al_http_resp_abort. */
static __attribute__((unused)) void t__abort(struct al_http_req *req, const char *mode)
{
    int rc;
    if (strcmp(mode, "none") == 0) {
        rc = al_http_resp_abort(req);
    } else {
        int64_t cl = strcmp(mode, "length") == 0 ? 100 : strcmp(mode, "full") == 0 ? 7 : -1;
        al_http_resp_start(req, 200, NULL, 0, cl);
        al_http_resp_write(req, "partial", 7);
        rc = al_http_resp_abort(req);
    }
    atomic_store(&t_abort_rc, rc);
}

/* /abort-body: a streamed request body; the first piece gets a chunk back, then the
 * response is aborted while the body is still arriving. */
static __attribute__((unused)) int t__abort_body_data(struct al_http_req *req, const char *data,
                                                      size_t len)
{
    (void)data;
    (void)len;
    al_http_resp_start(req, 200, NULL, 0, -1);
    al_http_resp_write(req, "got", 3);
    atomic_store(&t_abort_rc, al_http_resp_abort(req));
    return 0;
}

static __attribute__((unused)) void t__abort_body_end(struct al_http_req *req, int err)
{
    (void)req;
    atomic_store(&t_last_body_err, err);
    atomic_fetch_add(&t_body_err, 1); /* never expected: abort ends the callbacks */
}

/* ---- tunnels: an echo behind al_http_req_upgrade ------------------------------------ */
static atomic_int t_upgrade_rc = 1, t_tunnel_ends, t_tunnel_end_err = 1;

static __attribute__((unused)) void t__echo_drained(struct al_http_tunnel *t, void *arg)
{
    (void)arg;
    al_http_tunnel_resume(t);
}

static __attribute__((unused)) int t__echo_data(struct al_http_tunnel *t, const char *d, size_t n,
                                                void *arg)
{
    (void)arg;
    if (al_http_tunnel_write(t, d, n) < 0)
        return 0;
    if (al_http_tunnel_queued(t) > 256 * 1024) {
        al_http_tunnel_on_drain(t, 64 * 1024, t__echo_drained);
        return 1;
    }
    return 0;
}

static __attribute__((unused)) void t__echo_shut(struct al_http_tunnel *t, int err, void *arg)
{
    (void)err;
    (void)arg;
    al_http_tunnel_close(t);
}

static __attribute__((unused)) void t__echo_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)arg;
    atomic_store(&t_tunnel_end_err, err);
    atomic_fetch_add(&t_tunnel_ends, 1);
    if (err == 0 && al_http_tunnel_shutdown(t, t__echo_shut) == 0)
        return; /* the peer ended: end ours once the echo is out */
    al_http_tunnel_close(t);
}

/* /ws: switches to an echo of whatever the client sends (?noupgrade=1 omits the Upgrade
 * header from the 101, which must be refused). A refusal answers 400 "upgrade refused: rc". */
static __attribute__((unused)) void t__ws(struct al_http_req *req, bool no_upgrade_header)
{
    const char *up = al_http_req_header(req, "upgrade");
    struct al_http_header h[] = {{"X-Test", "yes"}, {"Upgrade", up ? up : "x"}};
    struct al_http_tunnel *t = NULL;
    int rc = al_http_req_upgrade(req, h, no_upgrade_header ? 1 : 2, &t);
    atomic_store(&t_upgrade_rc, rc);
    if (rc) {
        if (rc != -EPIPE) {
            char m[64];
            int n = snprintf(m, sizeof m, "upgrade refused: %d", rc);
            al_http_reply(req, 400, "text/plain", m, (size_t)n);
        }
        return;
    }
    ck_assert_int_eq(al_http_tunnel_start(t, t__echo_data, t__echo_end, NULL), 0);
}

static __attribute__((unused)) int t_qint(const struct al_http_req *req, const char *name, int def)
{
    char v[32];
    if (al_http_query_get(req->query, name, v, sizeof v) != 0)
        return def;
    return atoi(v);
}

static __attribute__((unused)) void t_handler(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&t_requests, 1);
    const char *p = req->path;
    if (strcmp(p, "/hello") == 0) {
        al_http_reply(req, 200, "text/plain", "hello", 5);
    } else if (strcmp(p, "/echo") == 0) {
        int rc = al_http_req_read_body(req, (size_t)t_qint(req, "max", 0), t__body_done);
        ck_assert_int_eq(rc, 0);
    } else if (strcmp(p, "/stream") == 0) {
        struct t_stream *s = calloc(1, sizeof *s);
        s->req = req;
        s->pause = t_qint(req, "pause", 0) != 0;
        uv_timer_init(req->loop, &s->timer);
        s->timer.data = s;
        req->user = s;
        ck_assert_int_eq(al_http_req_stream_body(req, t__stream_data, t__stream_end), 0);
    } else if (strcmp(p, "/chunks") == 0) {
        struct t_pace *pc = calloc(1, sizeof *pc);
        pc->req = req;
        pc->left = t_qint(req, "n", 3);
        pc->delay = t_qint(req, "delay", 20);
        uv_timer_init(req->loop, &pc->timer);
        pc->timer.data = pc;
        req->user = pc;
        al_http_req_on_close(req, t__pace_on_close);
        al_http_resp_start(req, 200, (struct al_http_header[]){{"Content-Type", "text/plain"}}, 1,
                           -1);
        uv_timer_start(&pc->timer, t__pace_tick, (uint64_t)pc->delay, (uint64_t)pc->delay);
    } else if (strcmp(p, "/slow") == 0) {
        struct t_slow *s = calloc(1, sizeof *s);
        s->req = req;
        uv_timer_init(req->loop, &s->timer);
        s->timer.data = s;
        req->user = s;
        al_http_req_on_close(req, t__slow_on_close);
        uv_timer_start(&s->timer, t__slow_fire, (uint64_t)t_qint(req, "ms", 50), 0);
    } else if (strcmp(p, "/gate") == 0) {
        struct t_gated *g = calloc(1, sizeof *g);
        g->req = req;
        uv_timer_init(req->loop, &g->timer);
        g->timer.data = g;
        req->user = g;
        al_http_req_on_close(req, t__gated_on_close);
        al_http_resp_start(req, 200, NULL, 0, -1);
        al_http_resp_write(req, "first", 5);
        uv_timer_start(&g->timer, t__gated_poll, 2, 2);
    } else if (strcmp(p, "/bulk") == 0) {
        t__bulk_start(req);
    } else if (strcmp(p, "/late") == 0) {
        struct t_late *l = calloc(1, sizeof *l);
        l->req = req;
        uv_timer_init(req->loop, &l->timer);
        l->timer.data = l;
        uv_timer_start(&l->timer, t__late_fire, (uint64_t)t_qint(req, "ms", 200), 0);
    } else if (strcmp(p, "/peer") == 0) {
        char out[128];
        int n = snprintf(out, sizeof out, "%d %d %d %d", req->peer.is_unix, (int)req->peer.uid,
                         (int)req->peer.gid, (int)req->peer.pid);
        al_http_reply(req, 200, "text/plain", out, (size_t)n);
    } else if (strcmp(p, "/length") == 0) {
        al_http_resp_start(req, 200, NULL, 0, 10);
        al_http_resp_write(req, "01234", 5);
        al_http_resp_write(req, "56789", 5);
        al_http_resp_end(req);
    } else if (strcmp(p, "/framing") == 0) {
        /* How the body came: its Content-Length or chunked (then echoed by t__framing_done). */
        ck_assert_int_eq(al_http_req_read_body(req, 0, t__framing_done), 0);
    } else if (strcmp(p, "/abort") == 0) {
        char mode[16] = "chunked";
        al_http_query_get(req->query, "mode", mode, sizeof mode);
        t__abort(req, mode);
    } else if (strcmp(p, "/abort-body") == 0) {
        ck_assert_int_eq(al_http_req_stream_body(req, t__abort_body_data, t__abort_body_end), 0);
    } else if (strcmp(p, "/ws") == 0) {
        t__ws(req, t_qint(req, "noupgrade", 0) != 0);
    } else if (strcmp(p, "/nocontent") == 0) {
        al_http_reply(req, 204, NULL, NULL, 0);
    } else if (strcmp(p, "/error") == 0) {
        al_http_reply_error(req, 409, "conflict on \"%s\"", "x");
    } else if (strcmp(p, "/json") == 0) {
        al_http_reply_json(req, 201, json_pack("{s:s,s:i}", "a", "b", "n", 1));
    } else if (strcmp(p, "/headers") == 0) {
        char out[512];
        const char *x = al_http_req_header(req, "x-test");
        int n = snprintf(out, sizeof out, "x-test=%s count=%zu method=%s target=%s query=%s",
                         x ? x : "(none)", al_http_req_header_count(req, "X-TEST"), req->method,
                         req->target, req->query);
        al_http_reply(req, 200, "text/plain", out, (size_t)n);
    } else {
        al_http_reply_error(req, 404, "no route for %s", p);
    }
}

#endif
