/* common/http_tunnel: raw connections after "101 Switching Protocols" (http.h, tunnels),
 * and the relay that joins two of them (WebSocket through airlockd and the agent).
 *
 * Owns: the tunnel object (a libuv stream of its own on a duplicate of the connection's
 * socket, so that the HTTP server or client can close its handle as usual while the socket
 * lives on here; the bytes already read past the HTTP exchange; reading with pause/resume;
 * a write queue with on_drain; half-close; failure reporting), the bookkeeping that lets a
 * server close the tunnels it made, and al_http_relay (two tunnels joined by common/relay).
 *
 * Every user callback runs from the loop: from a read, write or shutdown callback of the
 * tunnel's handle or from its "kick" timer (work asked for by an API call: first data,
 * resume, drain already reached, a failure to report). A tunnel is freed once its owner
 * called al_http_tunnel_close and both handles have closed, so no callback ever runs on
 * freed memory.
 */
#include "http.h"
#include "http_internal.h"
#include "log.h"
#include "relay.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct al_http_tunnel {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    uv_timer_t kick;
    uv_loop_t *loop;
    char *pre; /* bytes read before the takeover, delivered first */
    size_t pre_len, pre_off;
    al_http_tunnel_data_fn on_data;
    al_http_tunnel_end_fn on_end;
    void *arg;
    void (*drain_cb)(struct al_http_tunnel *t, void *arg);
    size_t drain_low;
    void (*shut_cb)(struct al_http_tunnel *t, int err, void *arg);
    size_t queued;
    unsigned n_writes;
    int err;        /* the failure, once dead */
    uint8_t closes; /* handle closes pending */
    bool is_unix;
    bool started;
    bool paused;
    bool reading;
    bool eof;      /* on_end(0) delivered */
    bool err_told; /* on_end(err) delivered */
    bool shut;     /* shutdown asked */
    bool dead;     /* failed: nothing passes any more */
    bool closing;  /* handles closing */
    bool closed;   /* handles closed */
    bool released; /* the owner called al_http_tunnel_close */
    bool in_data;  /* inside on_data */
    bool resume_asked;
    /* A server's tunnel: closed with it. */
    struct al_http_server *srv;
    struct al_http_tunnel **list;
    struct al_http_tunnel *prev, *next;
};

atomic_long http__live_tunnels;

static void tun__process(struct al_http_tunnel *t);

/* ---- lifetime ------------------------------------------------------------------------ */
static void tun__free(struct al_http_tunnel *t)
{
    free(t->pre);
    free(t);
    atomic_fetch_sub(&http__live_tunnels, 1);
}

static void tun__on_closed(uv_handle_t *h)
{
    struct al_http_tunnel *t = h->data;
    if (--t->closes)
        return;
    t->closed = true;
    if (t->list) {
        if (t->prev)
            t->prev->next = t->next;
        else
            *t->list = t->next;
        if (t->next)
            t->next->prev = t->prev;
        t->list = NULL;
    }
    if (t->srv) {
        struct al_http_server *s = t->srv;
        t->srv = NULL;
        http__server_tunnel_closed(s);
    }
    if (t->released)
        tun__free(t);
}

static void tun__close_handles(struct al_http_tunnel *t)
{
    if (t->closing)
        return;
    t->closing = true;
    if (t->reading) {
        uv_read_stop(&t->h.stream);
        t->reading = false;
    }
    t->closes = 2;
    uv_close(&t->h.handle, tun__on_closed);
    uv_close((uv_handle_t *)&t->kick, tun__on_closed);
}

static void tun__on_kick(uv_timer_t *k)
{
    tun__process(k->data);
}

static void tun__schedule(struct al_http_tunnel *t)
{
    if (!t->closing)
        uv_timer_start(&t->kick, tun__on_kick, 0, 0);
}

/* Nothing passes any more: tell the owner (from the loop), then close the handles. */
static void tun__fail(struct al_http_tunnel *t, int err)
{
    if (t->dead)
        return;
    t->dead = true;
    t->err = err < 0 ? err : -ECONNRESET;
    if (t->reading) {
        uv_read_stop(&t->h.stream);
        t->reading = false;
    }
    tun__schedule(t);
}

int http__tunnel_new(uv_loop_t *loop, uv_stream_t *from, bool is_unix, const char *pre,
                     size_t pre_len, struct al_http_tunnel **out)
{
    uv_os_fd_t fd = -1;
    if (uv_fileno((uv_handle_t *)from, &fd) != 0 || fd < 0)
        return -EBADF;
    struct al_http_tunnel *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    if (pre_len) {
        t->pre = malloc(pre_len);
        if (!t->pre) {
            free(t);
            return -ENOMEM;
        }
        memcpy(t->pre, pre, pre_len);
        t->pre_len = pre_len;
    }
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dfd < 0) {
        int e = -errno;
        free(t->pre);
        free(t);
        return e;
    }
    int rc = is_unix ? uv_pipe_init(loop, &t->h.pipe, 0) : uv_tcp_init(loop, &t->h.tcp);
    if (rc) {
        close(dfd);
        free(t->pre);
        free(t);
        return rc;
    }
    rc = is_unix ? uv_pipe_open(&t->h.pipe, dfd) : uv_tcp_open(&t->h.tcp, dfd);
    uv_timer_init(loop, &t->kick);
    t->h.handle.data = t;
    t->kick.data = t;
    t->loop = loop;
    t->is_unix = is_unix;
    atomic_fetch_add(&http__live_tunnels, 1);
    if (rc) {
        close(dfd); /* the handle did not take it */
        t->released = true;
        tun__close_handles(t);
        return rc;
    }
    *out = t;
    return 0;
}

void http__tunnel_attach(struct al_http_tunnel *t, struct al_http_server *s,
                         struct al_http_tunnel **list)
{
    t->srv = s;
    t->list = list;
    t->prev = NULL;
    t->next = *list;
    if (*list)
        (*list)->prev = t;
    *list = t;
}

struct al_http_tunnel *http__tunnel_next(struct al_http_tunnel *t)
{
    return t->next;
}

void http__tunnel_kill(struct al_http_tunnel *t, int err)
{
    if (t->closing)
        return;
    tun__fail(t, err);
}

/* ---- reading ------------------------------------------------------------------------- */
static void tun__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct al_http_tunnel *t = st->data;
    if (t->closing || t->released || t->dead) {
        http__release_buf(buf);
        return;
    }
    if (nread > 0) {
        t->in_data = true;
        t->resume_asked = false;
        int pause = t->on_data(t, buf->base, (size_t)nread, t->arg);
        t->in_data = false;
        http__release_buf(buf);
        if (pause && !t->resume_asked && !t->closing && !t->released) {
            t->paused = true;
            if (t->reading) {
                uv_read_stop(&t->h.stream);
                t->reading = false;
            }
        }
        return;
    }
    http__release_buf(buf);
    if (nread == 0)
        return;
    uv_read_stop(&t->h.stream);
    t->reading = false;
    if (nread == UV_EOF) {
        t->eof = true;
        t->on_end(t, 0, t->arg);
        return;
    }
    tun__fail(t, (int)nread);
}

static void tun__process(struct al_http_tunnel *t)
{
    if (t->closing)
        return;
    if (t->dead) {
        if (t->started && !t->released && !t->err_told) {
            t->err_told = true;
            t->on_end(t, t->err, t->arg);
        }
        tun__close_handles(t);
        return;
    }
    if (t->released)
        return;
    if (t->drain_cb && t->queued <= t->drain_low) {
        void (*cb)(struct al_http_tunnel *, void *) = t->drain_cb;
        t->drain_cb = NULL;
        cb(t, t->arg);
        if (t->closing || t->released || t->dead) {
            if (t->dead && !t->closing)
                tun__schedule(t);
            return;
        }
    }
    if (!t->started || t->paused || t->eof)
        return;
    if (t->pre_off < t->pre_len) {
        t->in_data = true;
        t->resume_asked = false;
        size_t off = t->pre_off;
        t->pre_off = t->pre_len;
        int pause = t->on_data(t, t->pre + off, t->pre_len - off, t->arg);
        t->in_data = false;
        free(t->pre);
        t->pre = NULL;
        t->pre_len = t->pre_off = 0;
        if (t->closing || t->released || t->dead) {
            if (t->dead && !t->closing)
                tun__schedule(t);
            return;
        }
        if (pause && !t->resume_asked) {
            t->paused = true;
            return;
        }
    }
    if (!t->reading) {
        int rc = uv_read_start(&t->h.stream, http__alloc_cb, tun__on_read);
        if (rc)
            tun__fail(t, rc);
        else
            t->reading = true;
    }
}

int al_http_tunnel_start(struct al_http_tunnel *t, al_http_tunnel_data_fn on_data,
                         al_http_tunnel_end_fn on_end, void *arg)
{
    if (!on_data || !on_end)
        return -EINVAL;
    if (t->started)
        return -EALREADY;
    if (t->released || t->closing)
        return t->err ? t->err : -EPIPE;
    t->on_data = on_data;
    t->on_end = on_end;
    t->arg = arg;
    t->started = true;
    tun__schedule(t);
    return 0;
}

void al_http_tunnel_resume(struct al_http_tunnel *t)
{
    if (t->in_data) {
        t->resume_asked = true;
        return;
    }
    if (!t->paused)
        return;
    t->paused = false;
    tun__schedule(t);
}

/* ---- writing ------------------------------------------------------------------------- */
static void tun__on_write(uv_write_t *wr, int status)
{
    struct http__wreq *w = (struct http__wreq *)wr;
    struct al_http_tunnel *t = w->owner;
    t->queued -= w->len;
    t->n_writes--;
    free(w);
    if (t->closing)
        return;
    if (status < 0) {
        tun__fail(t, status);
        return;
    }
    if (t->drain_cb && t->queued <= t->drain_low)
        tun__process(t);
}

int al_http_tunnel_write(struct al_http_tunnel *t, const void *data, size_t len)
{
    if (t->dead || t->shut || t->closing || t->released)
        return -EPIPE;
    if (len == 0)
        return 0;
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    size_t q = 0;
    int rc = http__write(&(struct http__wdest){&t->h.stream, t->n_writes == 0, t, tun__on_write},
                         &b, 1, &q);
    if (rc < 0) {
        tun__fail(t, rc);
        return -EPIPE;
    }
    if (q) {
        t->queued += q;
        t->n_writes++;
    }
    return 0;
}

size_t al_http_tunnel_queued(const struct al_http_tunnel *t)
{
    return t->queued;
}

void al_http_tunnel_on_drain(struct al_http_tunnel *t, size_t low_water,
                             void (*cb)(struct al_http_tunnel *t, void *arg))
{
    t->drain_cb = cb;
    t->drain_low = low_water;
    if (cb && t->queued <= low_water)
        tun__schedule(t);
}

struct tun_shut {
    uv_shutdown_t req;
    struct al_http_tunnel *t;
};

static void tun__on_shutdown(uv_shutdown_t *req, int status)
{
    struct tun_shut *s = (struct tun_shut *)req;
    struct al_http_tunnel *t = s->t;
    free(s);
    void (*cb)(struct al_http_tunnel *, int, void *) = t->shut_cb;
    t->shut_cb = NULL;
    if (t->released)
        return;
    if (status < 0 && !t->dead && !t->closing)
        tun__fail(t, status);
    if (cb)
        cb(t, status == UV_ECANCELED && t->dead ? t->err : status, t->arg);
}

int al_http_tunnel_shutdown(struct al_http_tunnel *t,
                            void (*done)(struct al_http_tunnel *t, int err, void *arg))
{
    if (t->dead || t->closing || t->released)
        return -EPIPE;
    if (t->shut)
        return -EALREADY;
    struct tun_shut *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->t = t;
    int rc = uv_shutdown(&s->req, &t->h.stream, tun__on_shutdown);
    if (rc) {
        free(s);
        tun__fail(t, rc);
        return rc;
    }
    t->shut = true;
    t->shut_cb = done;
    return 0;
}

void al_http_tunnel_close(struct al_http_tunnel *t)
{
    if (!t || t->released)
        return;
    t->released = true;
    t->drain_cb = NULL;
    t->shut_cb = NULL;
    if (t->closed) {
        tun__free(t);
        return;
    }
    tun__close_handles(t);
}

/* ---- relay --------------------------------------------------------------------------- */
/* al_http_relay joins two tunnels through common/relay.h: once the bytes each tunnel had
 * queued (the 101) are written, the relay takes a duplicate of each socket and moves the
 * bytes itself (uv_poll_t on each, copy or splice), the tunnels' bytes read past the HTTP
 * exchange first. The tunnels stay open, not reading, so that a server closing its
 * tunnels ends the relay too (their on_end). */
#define RELAY_IDLE_MS (3600u * 1000u)

struct relay {
    struct al_http_tunnel *t[2];
    uv_poll_t poll[2];
    uv_timer_t timer;
    struct al_relay r;
    int fd[2];
    uint32_t idle_ms;
    size_t buf_size;
    al_http_relay_done_fn done;
    void *arg;
    uint8_t closes;  /* handle closes pending */
    uint8_t waiting; /* tunnels whose queue is still being written */
    uint8_t n_polls; /* poll handles set up */
    int err;
    bool finished;
};

static void relay__closed(uv_handle_t *h)
{
    struct relay *r = h->data;
    if (--r->closes)
        return;
    if (r->done)
        r->done(r->err, al_relay_bytes(&r->r, 0), al_relay_bytes(&r->r, 1), r->arg);
    al_relay_free(&r->r);
    free(r);
}

static void relay__finish(struct relay *r, int err)
{
    if (r->finished)
        return;
    r->finished = true;
    r->err = err;
    al_http_tunnel_close(r->t[0]);
    al_http_tunnel_close(r->t[1]);
    r->closes = 1;
    uv_timer_stop(&r->timer);
    uv_close((uv_handle_t *)&r->timer, relay__closed);
    for (int i = 0; i < r->n_polls; i++) {
        r->closes++;
        uv_poll_stop(&r->poll[i]);
        uv_close((uv_handle_t *)&r->poll[i], relay__closed);
    }
    for (int i = 0; i < 2; i++)
        if (r->fd[i] >= 0)
            close(r->fd[i]);
    r->fd[0] = r->fd[1] = -1;
}

static void relay__on_poll(uv_poll_t *h, int status, int events);

static void relay__watch(struct relay *r)
{
    for (int i = 0; i < 2; i++) {
        int w = al_relay_want(&r->r, i);
        int ev = (w & AL_RELAY_READ ? UV_READABLE : 0) | (w & AL_RELAY_WRITE ? UV_WRITABLE : 0);
        int rc = ev ? uv_poll_start(&r->poll[i], ev, relay__on_poll) : uv_poll_stop(&r->poll[i]);
        if (rc < 0) {
            relay__finish(r, rc);
            return;
        }
    }
}

static void relay__after(struct relay *r, int rc)
{
    if (rc == 1)
        relay__watch(r);
    else
        relay__finish(r, rc);
}

static void relay__on_poll(uv_poll_t *h, int status, int events)
{
    struct relay *r = h->data;
    if (r->finished)
        return;
    int i = h == &r->poll[0] ? 0 : 1;
    if (status < 0) {
        relay__finish(r, status);
        return;
    }
    int ev = (events & (UV_READABLE | UV_DISCONNECT) ? AL_RELAY_READ : 0) |
             (events & UV_WRITABLE ? AL_RELAY_WRITE : 0);
    relay__after(r, al_relay_run(&r->r, i, ev));
}

static void relay__on_timer(uv_timer_t *h)
{
    struct relay *r = h->data;
    uint64_t next = 0;
    if (al_relay_time(&r->r, al_now_ns(), &next) < 0) {
        relay__finish(r, -ETIMEDOUT);
        return;
    }
    uv_timer_start(h, relay__on_timer, next, 0);
}

/* A tunnel failed or its server closes it (nothing reads it meanwhile). */
static void relay__on_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)t;
    struct relay *r = arg;
    relay__finish(r, err < 0 ? err : -ECONNRESET);
}

static int relay__no_data(struct al_http_tunnel *t, const char *data, size_t len, void *arg)
{
    (void)t, (void)data, (void)len, (void)arg;
    return 1; /* never called: the tunnels are not read */
}

/* Both tunnels' queues are written: the relay takes the sockets over. */
static int relay__take_over(struct relay *r)
{
    struct al_relay_end e[2];
    for (int i = 0; i < 2; i++) {
        struct al_http_tunnel *t = r->t[i];
        uv_os_fd_t fd = -1;
        if (t->dead || uv_fileno(&t->h.handle, &fd) != 0 || fd < 0)
            return t->err ? t->err : -EPIPE;
        if ((r->fd[i] = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
            return -errno;
        e[i] = (struct al_relay_end){.fd = r->fd[i]};
    }
    struct al_relay_opts o = {
        .buf_size = r->buf_size, .splice = true, .idle_timeout_ms = r->idle_ms};
    al_relay_init(&r->r, &e[0], &e[1], &o);
    for (int i = 0; i < 2; i++) {
        struct al_http_tunnel *t = r->t[i];
        int rc = al_relay_prime(&r->r, i, t->pre + t->pre_off, t->pre_len - t->pre_off);
        if (rc < 0)
            return rc;
        free(t->pre);
        t->pre = NULL;
        t->pre_len = t->pre_off = 0;
    }
    for (int i = 0; i < 2; i++) {
        int rc = uv_poll_init(r->t[0]->loop, &r->poll[i], r->fd[i]);
        if (rc < 0)
            return rc;
        r->poll[i].data = r;
        r->n_polls++;
    }
    uv_timer_start(&r->timer, relay__on_timer, r->idle_ms, 0);
    relay__after(r, al_relay_run(&r->r, -1, 0));
    return 0;
}

static void relay__drained(struct al_http_tunnel *t, void *arg)
{
    (void)t;
    struct relay *r = arg;
    if (r->finished || --r->waiting)
        return;
    int rc = relay__take_over(r);
    if (rc < 0)
        relay__finish(r, rc);
}

int al_http_relay(struct al_http_tunnel *a, struct al_http_tunnel *b,
                  const struct al_http_relay_opts *opts, al_http_relay_done_fn done, void *arg)
{
    struct relay *r = a && b && a != b ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        al_http_tunnel_close(a);
        al_http_tunnel_close(b);
        return a && b && a != b ? -ENOMEM : -EINVAL;
    }
    r->idle_ms = opts && opts->idle_timeout_ms ? opts->idle_timeout_ms : RELAY_IDLE_MS;
    r->buf_size = opts ? opts->high_water : 0;
    r->t[0] = a;
    r->t[1] = b;
    r->fd[0] = r->fd[1] = -1;
    r->done = done;
    r->arg = arg;
    uv_timer_init(a->loop, &r->timer);
    r->timer.data = r;
    /* Started but paused, the tunnels read nothing and report only a failure or their
     * server's close. */
    int rc = al_http_tunnel_start(a, relay__no_data, relay__on_end, r);
    if (!rc)
        rc = al_http_tunnel_start(b, relay__no_data, relay__on_end, r);
    if (rc) {
        r->done = NULL; /* a failed call does not call done */
        relay__finish(r, rc);
        return rc;
    }
    a->paused = b->paused = true;
    /* The drain callbacks come from the loop, also for an empty queue. */
    r->waiting = 2;
    al_http_tunnel_on_drain(a, 0, relay__drained);
    al_http_tunnel_on_drain(b, 0, relay__drained);
    return 0;
}
