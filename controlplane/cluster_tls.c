/* controlplane/cluster_tls: see cluster_tls.h. */
#include "cluster_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/http_tls.h"
#include "common/log.h"
#include "common/relay.h"
#include "common/util.h"
#include "cp.h"

#define CTLS_READ_BUF     (64 * 1024)
#define CTLS_RELAY_BUF    (64 * 1024) /* a direction's bytes in flight: four TLS records */
#define CTLS_HANDSHAKE_MS 10000
#define CTLS_LINGER_MS    5000 /* a gateway's refusal, for its HTTP client to read */
/* One direction ended and the other has not for this long: its peer is gone (a host that
 * died sends no FIN), the connection is closed. */
#define CTLS_HALF_CLOSED_MS 30000
/* Connections a node's front holds at once, handshakes included: as many as its API server
 * takes (daemon.c), so that clients that never finish a handshake cannot exhaust memory. */
#define CTLS_MAX_CONNS 4096

struct ctls_dial;

struct cp_cluster_tls {
    struct cp *cp;
    struct al_http_tls *server; /* a node's front */
    struct al_http_tls *client; /* a gateway's connectors */
    uv_tcp_t listener;
    bool listening;
    struct ctls_conn *conns;
    size_t n_conns;
    bool full_logged;
    struct ctls_dial *dials;
    unsigned n_dials;
    size_t handles; /* open handles of this struct's own (listeners); freed with the last */
    bool closing;
    char dir[4200]; /* a gateway's connectors' sockets */
    /* Ciphertext read, until the session took it (everything runs on the loop). */
    char rbuf[CTLS_READ_BUF];
};

/* A gateway's connector to one node: a unix socket its HTTP client dials. */
struct ctls_dial {
    struct cp_cluster_tls *ct;
    uv_pipe_t ls;
    char node_id[64];
    char address[256];
    char path[108];
    struct ctls_dial *next;
};

/* One connection: net is the TLS side (ciphertext), loc the plaintext side (the node's end
 * of a socketpair served by the API server, or the gateway's HTTP client on a connector).
 * Until the handshake is complete the streams carry it (and a gateway's refusal); then
 * common/relay moves the bytes both ways, with the session as the transport of the net end,
 * on duplicates of both sockets watched by poll handles (the streams are closed). */
enum { CTLS_NET = 0, CTLS_LOC = 1 };

struct ctls_conn {
    struct cp_cluster_tls *ct;
    uv_tcp_t net;
    uv_pipe_t loc; /* a gateway's (a node's plaintext side is a socketpair's fd) */
    uv_timer_t timer;
    uv_connect_t connect;
    uv_shutdown_t sh_loc;
    void *s; /* the TLS session */
    bool server;
    bool up; /* handshake complete: the relay's, once the handshake's bytes are written */
    bool refusing;
    bool net_reading, loc_reading;
    bool streams_closed;
    bool relaying;
    bool net_eof; /* the relay's: the node or gateway ended its TCP stream */
    bool in_more; /* ... the relay's last read filled its buffer: the session may hold more */
    int in_end;   /* ... the session ended (1) or failed (-errno); what it held was read */
    bool closing;
    int handles;
    struct al_relay relay;
    uv_poll_t poll[2]; /* CTLS_NET, CTLS_LOC */
    int n_polls;       /* ... set up */
    int fd[2];         /* what they watch: the relay's duplicates, or -1 */
    char node_id[64];
    char address[256];
    char label[160]; /* "node X (ADDR)" or the client's address */
    struct ctls_conn *next, **pprev;
};

struct ctls_wreq {
    uv_write_t w;
    struct ctls_conn *c;
    char data[];
};

static const struct al_http_tls_ops *ctls__ops(const struct ctls_conn *c)
{
    return c->server ? c->ct->server->ops : c->ct->client->ops;
}

static void ctls__free_ct(struct cp_cluster_tls *ct)
{
    if (ct->handles || ct->conns)
        return;
    al_http_tls_client_free(ct->server);
    al_http_tls_client_free(ct->client);
    free(ct);
}

/* ---- closing ------------------------------------------------------------------------ */

static void ctls__conn_closed(uv_handle_t *h)
{
    struct ctls_conn *c = h->data;
    if (--c->handles > 0)
        return;
    struct cp_cluster_tls *ct = c->ct;
    al_relay_free(&c->relay);
    for (int i = 0; i < 2; i++)
        if (c->fd[i] >= 0)
            close(c->fd[i]);
    if (c->s)
        ctls__ops(c)->session_free(c->s);
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    ct->n_conns--;
    free(c);
    if (ct->closing)
        ctls__free_ct(ct);
}

static void ctls__close_streams(struct ctls_conn *c)
{
    if (c->streams_closed)
        return;
    c->streams_closed = true;
    uv_close((uv_handle_t *)&c->net, ctls__conn_closed);
    if (!c->server)
        uv_close((uv_handle_t *)&c->loc, ctls__conn_closed);
}

static void ctls__close(struct ctls_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    ctls__close_streams(c);
    for (int i = 0; i < c->n_polls; i++)
        uv_close((uv_handle_t *)&c->poll[i], ctls__conn_closed);
    uv_close((uv_handle_t *)&c->timer, ctls__conn_closed);
}

/* ---- the handshake's writing (streams) ------------------------------------------------ */

static void ctls__take_over(struct ctls_conn *c);

static void ctls__written(uv_write_t *w, int status)
{
    struct ctls_wreq *r = (struct ctls_wreq *)w;
    struct ctls_conn *c = r->c;
    bool to_net = w->handle == (uv_stream_t *)&c->net;
    free(r);
    if (c->closing || c->streams_closed)
        return;
    if (status < 0) {
        al_debug("cluster tls: %s: write failed: %s", c->label, uv_strerror(status));
        ctls__close(c);
        return;
    }
    if (to_net && c->up && c->net.write_queue_size == 0)
        ctls__take_over(c);
}

static int ctls__write(struct ctls_conn *c, bool to_net, const char *d, size_t n)
{
    struct ctls_wreq *r = malloc(sizeof *r + n);
    if (!r)
        return -ENOMEM;
    r->c = c;
    memcpy(r->data, d, n);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)n);
    int rc = uv_write(&r->w, to_net ? (uv_stream_t *)&c->net : (uv_stream_t *)&c->loc, &b, 1,
                      ctls__written);
    if (rc)
        free(r);
    return rc;
}

/* The session's ciphertext to the peer: through the stream during the handshake, then
 * straight to the relay's socket. 0 (all of it), -EAGAIN (the socket is full), or the
 * failure. */
static int ctls__flush(struct ctls_conn *c)
{
    const struct al_http_tls_ops *ops = ctls__ops(c);
    const char *d;
    size_t n;
    while ((n = ops->output(c->s, &d)) > 0) {
        ssize_t w = (ssize_t)n;
        int rc = c->fd[CTLS_NET] < 0 ? ctls__write(c, true, d, n) : 0;
        if (rc)
            return rc;
        if (c->fd[CTLS_NET] >= 0 && (w = send(c->fd[CTLS_NET], d, n, MSG_NOSIGNAL)) < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        }
        ops->consume(c->s, (size_t)w);
    }
    return 0;
}

/* ---- the relay's transport: the session over the net socket ------------------------------ */

/* Plaintext out of the session, as much as buf takes of what it holds and the socket has
 * (records are 16 KiB at most: one read of several saves writes to the plaintext side), the
 * socket's ciphertext fed to it as it needs more. The end of the peer's stream, with
 * close_notify or without, ends it once the session gave up what it holds. */
static ssize_t ctls__tio_read(void *ctx, void *buf, size_t len)
{
    struct ctls_conn *c = ctx;
    const struct al_http_tls_ops *ops = ctls__ops(c);
    char msg[AL_ERROR_MSG_MAX] = "";
    size_t got = 0;
    while (got < len && !c->in_end) {
        long n = ops->read(c->s, (char *)buf + got, len - got, msg, sizeof msg);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0 || n == -EPIPE) {
            c->in_end = 1; /* close_notify, or the end without it */
            break;
        }
        if (n != -EAGAIN) {
            al_debug("cluster tls: %s: %s", c->label, msg);
            c->in_end = (int)n;
            break;
        }
        if (c->net_eof) {
            c->in_end = 1;
            break;
        }
        ssize_t r = recv(c->fd[CTLS_NET], c->ct->rbuf, sizeof c->ct->rbuf, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->in_more = false;
            return got ? (ssize_t)got : -EAGAIN;
        }
        if (r < 0)
            c->in_end = -errno;
        else if (r == 0)
            c->net_eof = true;
        else if (ops->feed(c->s, c->ct->rbuf, (size_t)r))
            c->in_end = -ENOMEM;
    }
    c->in_more = got == len;
    if (got)
        return (ssize_t)got; /* the end or the failure comes with the next read */
    return c->in_end < 0 ? c->in_end : 0;
}

/* Encrypts what the relay gives once the session sent what it had (a direction holds one
 * buffer of ciphertext at most), and sends what it can. */
static ssize_t ctls__tio_write(void *ctx, const void *buf, size_t len)
{
    struct ctls_conn *c = ctx;
    int rc = ctls__flush(c);
    if (rc < 0)
        return rc;
    char msg[AL_ERROR_MSG_MAX] = "";
    if ((rc = ctls__ops(c)->write(c->s, buf, len, msg, sizeof msg)) < 0) {
        al_debug("cluster tls: %s: %s", c->label, msg);
        return rc;
    }
    rc = ctls__flush(c);
    return rc < 0 && rc != -EAGAIN ? rc : (ssize_t)len;
}

/* The end of the plaintext side's stream: a TCP half-close once the ciphertext is out. */
static int ctls__tio_shutdown(void *ctx)
{
    struct ctls_conn *c = ctx;
    int rc = ctls__flush(c);
    if (rc < 0)
        return rc;
    if (shutdown(c->fd[CTLS_NET], SHUT_WR) < 0 && errno != ENOTCONN)
        return -errno;
    return 0;
}

static int ctls__tio_want(void *ctx)
{
    struct ctls_conn *c = ctx;
    const char *d;
    return ctls__ops(c)->output(c->s, &d) ? AL_RELAY_WRITE : 0;
}

static const struct al_relay_io ctls_tio = {.read = ctls__tio_read,
                                            .write = ctls__tio_write,
                                            .shutdown = ctls__tio_shutdown,
                                            .want = ctls__tio_want};

/* ---- the relay -------------------------------------------------------------------------- */

static void ctls__on_poll(uv_poll_t *h, int status, int events);
static void ctls__timeout(uv_timer_t *t);

/* After a run: the watches and the timer as the relay wants them, or the end. */
static void ctls__relay_after(struct ctls_conn *c, int rc)
{
    if (rc < 0) {
        al_debug("cluster tls: %s: %s %s failed: %s", c->label,
                 c->relay.fail_op == AL_RELAY_WRITE ? "writing to" : "reading from",
                 c->relay.fail_end == CTLS_NET ? "the TLS side" : "the plaintext side",
                 strerror(-rc));
        ctls__close(c);
        return;
    }
    if (rc == 0) {
        ctls__close(c);
        return;
    }
    for (int i = 0; i < 2; i++) {
        int w = al_relay_want(&c->relay, i);
        int ev = (w & AL_RELAY_READ ? UV_READABLE : 0) | (w & AL_RELAY_WRITE ? UV_WRITABLE : 0);
        if ((ev ? uv_poll_start(&c->poll[i], ev, ctls__on_poll) : uv_poll_stop(&c->poll[i])) < 0) {
            ctls__close(c);
            return;
        }
    }
    /* A run reads a few buffers at most (the relay's rounds): what the session still holds
     * the socket no longer signals, so the relay runs again on the loop's next turn. */
    uint64_t next = 0;
    if (al_relay_time(&c->relay, al_now_ns(), &next) < 0)
        next = 1; /* the timer ends it */
    if (c->in_more && (al_relay_want(&c->relay, CTLS_NET) & AL_RELAY_READ))
        uv_timer_start(&c->timer, ctls__timeout, 0, 0);
    else if (next)
        uv_timer_start(&c->timer, ctls__timeout, next, 0);
    else
        uv_timer_stop(&c->timer);
}

static void ctls__on_poll(uv_poll_t *h, int status, int events)
{
    struct ctls_conn *c = h->data;
    if (c->closing)
        return;
    if (status < 0) {
        al_debug("cluster tls: %s: %s", c->label, uv_strerror(status));
        ctls__close(c);
        return;
    }
    int end = h == &c->poll[CTLS_NET] ? CTLS_NET : CTLS_LOC;
    int ev = (events & (UV_READABLE | UV_DISCONNECT) ? AL_RELAY_READ : 0) |
             (events & UV_WRITABLE ? AL_RELAY_WRITE : 0);
    if (end == CTLS_NET && (ev & AL_RELAY_WRITE)) {
        int rc = ctls__flush(c); /* ciphertext earlier writes left: the relay sees plaintext */
        if (rc < 0 && rc != -EAGAIN) {
            al_debug("cluster tls: %s: %s", c->label, strerror(-rc));
            ctls__close(c);
            return;
        }
    }
    ctls__relay_after(c, al_relay_run(&c->relay, end, ev));
}

/* The handshake's bytes are written: the relay takes both sockets over. What the session
 * read past the handshake is its first plaintext. */
static void ctls__take_over(struct ctls_conn *c)
{
    uv_os_fd_t fd = -1;
    if (uv_fileno((uv_handle_t *)&c->net, &fd) != 0 ||
        (c->fd[CTLS_NET] = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0 ||
        (!c->server && (uv_fileno((uv_handle_t *)&c->loc, &fd) != 0 ||
                        (c->fd[CTLS_LOC] = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0))) {
        al_warn("cluster tls: %s: cannot take the connection over: %s", c->label, strerror(errno));
        ctls__close(c);
        return;
    }
    ctls__close_streams(c);
    struct al_relay_end net = {.fd = c->fd[CTLS_NET], .io = &ctls_tio, .ctx = c};
    struct al_relay_end loc = {.fd = c->fd[CTLS_LOC]};
    struct al_relay_opts o = {.buf_size = CTLS_RELAY_BUF,
                              .half_close_timeout_ms = CTLS_HALF_CLOSED_MS};
    al_relay_init(&c->relay, &net, &loc, &o);
    c->relaying = true;
    for (int i = 0; i < 2; i++) {
        int rc = uv_poll_init(c->ct->cp->loop, &c->poll[i], c->fd[i]);
        if (rc < 0) {
            al_warn("cluster tls: %s: %s", c->label, uv_strerror(rc));
            ctls__close(c);
            return;
        }
        c->poll[i].data = c;
        c->handles++;
        c->n_polls++;
    }
    ctls__relay_after(c, al_relay_run(&c->relay, -1, 0));
}

/* ---- the handshake's reading (streams) ------------------------------------------------ */

static void ctls__alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct ctls_conn *c = h->data;
    *buf = uv_buf_init(c->ct->rbuf, sizeof c->ct->rbuf);
}

static void ctls__up(struct ctls_conn *c);
static void ctls__refuse(struct ctls_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void ctls__net_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct ctls_conn *c = st->data;
    if (nread == 0 || c->closing || c->refusing)
        return;
    if (nread < 0) {
        if (c->server) {
            al_debug("cluster tls: %s left during the handshake", c->label);
            ctls__close(c);
        } else {
            ctls__refuse(c,
                         "%s closed the connection during the TLS handshake (is the node "
                         "configured with cluster.tls?)",
                         c->label);
        }
        return;
    }
    const struct al_http_tls_ops *ops = ctls__ops(c);
    if (ops->feed(c->s, buf->base, (size_t)nread)) {
        ctls__close(c);
        return;
    }
    char msg[AL_ERROR_MSG_MAX] = "";
    int rc = ops->handshake(c->s, msg, sizeof msg);
    if (ctls__flush(c)) {
        ctls__close(c);
        return;
    }
    if (rc == -EAGAIN)
        return;
    if (rc < 0) {
        if (c->server) {
            al_warn("cluster tls: the TLS handshake of %s failed: %s", c->label, msg);
            ctls__close(c);
        } else {
            ctls__refuse(c, "the TLS handshake with %s failed: %s", c->label, msg);
        }
        return;
    }
    uv_read_stop(st); /* the rest is the relay's: the session keeps what came with this */
    c->net_reading = false;
    ctls__up(c);
}

/* A refusal's: the HTTP client's request, unread by anyone, is dropped until it leaves. */
static void ctls__loc_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct ctls_conn *c = st->data;
    if (nread < 0 && !c->closing)
        ctls__close(c);
}

static void ctls__timeout(uv_timer_t *t)
{
    struct ctls_conn *c = t->data;
    if (c->closing)
        return;
    if (c->relaying) {
        if (al_relay_time(&c->relay, al_now_ns(), &(uint64_t){0}) < 0) {
            al_debug("cluster tls: %s: half closed for %d s: closed", c->label,
                     CTLS_HALF_CLOSED_MS / 1000);
            ctls__close(c);
            return;
        }
        ctls__relay_after(c, al_relay_run(&c->relay, -1, 0));
        return;
    }
    if (c->refusing || c->up) { /* the refusal was read, or the handshake's bytes never went */
        ctls__close(c);
        return;
    }
    if (c->server) {
        al_warn("cluster tls: %s did not complete its TLS handshake within %d s", c->label,
                CTLS_HANDSHAKE_MS / 1000);
        ctls__close(c);
        return;
    }
    ctls__refuse(c, "%s did not complete the TLS handshake within %d s", c->label,
                 CTLS_HANDSHAKE_MS / 1000);
}

/* ---- a new connection --------------------------------------------------------------- */

static struct ctls_conn *ctls__conn_new(struct cp_cluster_tls *ct, bool server)
{
    struct ctls_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ct = ct;
    c->server = server;
    c->fd[0] = c->fd[1] = -1;
    uv_tcp_init(ct->cp->loop, &c->net);
    uv_timer_init(ct->cp->loop, &c->timer);
    c->net.data = c->timer.data = c;
    c->handles = 2;
    if (!server) {
        uv_pipe_init(ct->cp->loop, &c->loc, 0);
        c->loc.data = c;
        c->handles++;
    }
    c->next = ct->conns;
    if (ct->conns)
        ct->conns->pprev = &c->next;
    c->pprev = &ct->conns;
    ct->conns = c;
    ct->n_conns++;
    return c;
}

/* The handshake is complete. A node hands the plaintext to its API server with what the
 * client's certificate proved; a gateway (mbedtls verified the node already: the cluster
 * CA, serverAuth, the node id) lets its HTTP client's bytes through. Either way the relay
 * takes over once the handshake's last bytes are written. */
static void ctls__up(struct ctls_conn *c)
{
    uv_timer_stop(&c->timer);
    c->up = true;
    if (c->server) {
        struct al_http_tls_peer tp;
        al_http_tls_session_peer(c->s, &tp);
        struct al_http_peer peer = {.tls = true, .tls_verified = tp.verified};
        int len = sizeof peer.addr;
        if (uv_tcp_getpeername(&c->net, (struct sockaddr *)&peer.addr, &len) == 0)
            peer.addrlen = (socklen_t)len;
        snprintf(peer.tls_name, sizeof peer.tls_name, "%s", tp.name);
        snprintf(peer.tls_why, sizeof peer.tls_why, "%s", tp.why);
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
            al_warn("cluster tls: %s: socketpair: %s", c->label, strerror(errno));
            ctls__close(c);
            return;
        }
        c->fd[CTLS_LOC] = sv[0];
        struct al_error err = {0};
        if (!c->ct->cp->api ||
            al_http_server_serve_fd_peer(c->ct->cp->api, sv[1], &peer, &err) != 0) {
            al_warn("cluster tls: %s: %s", c->label, err.msg[0] ? err.msg : "the API is closing");
            close(sv[1]);
            ctls__close(c);
            return;
        }
    }
    if (c->net.write_queue_size == 0)
        ctls__take_over(c);
    else /* ctls__written takes over; the timer bounds the wait */
        uv_timer_start(&c->timer, ctls__timeout, CTLS_HANDSHAKE_MS, 0);
}

/* A gateway's connector could not reach or prove the node: its HTTP client gets a 502 that
 * names the node and why (a creation then goes to another node), and the log says it too. */
static void ctls__refuse(struct ctls_conn *c, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    al_warn("cluster tls: %s", why);
    c->refusing = true;
    if (c->net_reading) { /* the node's side stays as it is until the close */
        uv_read_stop((uv_stream_t *)&c->net);
        c->net_reading = false;
    }
    json_t *j = json_pack("{s:i, s:s}", "code", 502, "message", why);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      body ? strlen(body) : 0);
    int rc = ctls__write(c, false, head, (size_t)hl);
    if (!rc && body)
        rc = ctls__write(c, false, body, strlen(body));
    free(body);
    if (!rc && !c->loc_reading)
        c->loc_reading = uv_read_start((uv_stream_t *)&c->loc, ctls__alloc, ctls__loc_read) == 0;
    c->sh_loc.data = c;
    if (rc || uv_shutdown(&c->sh_loc, (uv_stream_t *)&c->loc, NULL)) {
        ctls__close(c);
        return;
    }
    uv_timer_start(&c->timer, ctls__timeout, CTLS_LINGER_MS, 0);
}

/* ---- a node's front ----------------------------------------------------------------- */

static void ctls__on_net_conn(uv_stream_t *ls, int status)
{
    struct cp_cluster_tls *ct = ls->data;
    if (status < 0 || ct->closing)
        return;
    struct ctls_conn *c = ctls__conn_new(ct, true);
    if (!c)
        return;
    if (uv_accept(ls, (uv_stream_t *)&c->net) != 0) {
        ctls__close(c);
        return;
    }
    if (ct->n_conns > CTLS_MAX_CONNS) {
        if (!ct->full_logged)
            al_warn("cluster tls: %d connections are open: closing new ones until fewer are",
                    CTLS_MAX_CONNS);
        ct->full_logged = true;
        ctls__close(c);
        return;
    }
    ct->full_logged = false;
    uv_tcp_nodelay(&c->net, 1);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char a[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&c->net, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, a, sizeof a);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, a, sizeof a);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    snprintf(c->label, sizeof c->label, strchr(a, ':') ? "[%s]:%d" : "%s:%d", a, port);
    char msg[AL_ERROR_MSG_MAX] = "";
    c->s = ct->server->ops->session_new(ct->server->provider, c->label, msg, sizeof msg);
    if (!c->s) {
        al_warn("cluster tls: %s: %s", c->label, msg);
        ctls__close(c);
        return;
    }
    uv_timer_start(&c->timer, ctls__timeout, CTLS_HANDSHAKE_MS, 0);
    c->net_reading = uv_read_start((uv_stream_t *)&c->net, ctls__alloc, ctls__net_read) == 0;
    if (!c->net_reading)
        ctls__close(c);
}

static void ctls__ct_handle_closed(uv_handle_t *h)
{
    struct cp_cluster_tls *ct = h->data;
    ct->handles--;
    ctls__free_ct(ct);
}

int cp_cluster_tls_listen(struct cp *cp, const char *host, int port, int *bound,
                          struct al_error *err)
{
    struct cp_cluster_tls *ct = cp->cluster_tls;
    if (!ct || !ct->server)
        return al_error_set(err, -EINVAL, "cluster.tls is not loaded");
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return al_error_set(err, -EINVAL, "cannot listen on %s: not an IP address", host);
    uv_tcp_init(cp->loop, &ct->listener);
    ct->listener.data = ct;
    ct->handles++;
    ct->listening = true;
    int rc = uv_tcp_bind(&ct->listener, (struct sockaddr *)&ss, 0);
    if (!rc)
        rc = uv_listen((uv_stream_t *)&ct->listener, 511, ctls__on_net_conn);
    if (rc)
        return al_error_set(err, rc, "cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
    int len = sizeof ss;
    uv_tcp_getsockname(&ct->listener, (struct sockaddr *)&ss, &len);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* ---- a gateway's connectors --------------------------------------------------------- */

static void ctls__net_connected(uv_connect_t *req, int status)
{
    struct ctls_conn *c = req->data;
    if (c->closing || c->refusing)
        return;
    if (status < 0) {
        ctls__refuse(c, "cannot reach %s: %s", c->label, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&c->net, 1);
    struct cp_cluster_tls *ct = c->ct;
    char msg[AL_ERROR_MSG_MAX] = "";
    /* The node id is the name its certificate must carry (and the server name sent). */
    c->s = ct->client->ops->session_new(ct->client->provider, c->node_id, msg, sizeof msg);
    if (!c->s) {
        ctls__refuse(c, "%s: %s", c->label, msg);
        return;
    }
    int rc = ct->client->ops->handshake(c->s, msg, sizeof msg); /* the ClientHello */
    if ((rc && rc != -EAGAIN) || ctls__flush(c)) {
        ctls__refuse(c, "the TLS handshake with %s failed: %s", c->label, msg);
        return;
    }
    c->net_reading = uv_read_start((uv_stream_t *)&c->net, ctls__alloc, ctls__net_read) == 0;
    if (!c->net_reading)
        ctls__refuse(c, "cannot read from %s", c->label);
}

/* Where the node's address points (an address literal: cluster.advertise is HOST:PORT). */
static int ctls__resolve(const char *address, struct sockaddr_storage *ss)
{
    char host[256];
    int port;
    if (cp_parse_listen(address, host, sizeof host, &port) < 0 || port == 0)
        return -EINVAL;
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return -EINVAL;
}

static void ctls__on_loc_conn(uv_stream_t *ls, int status)
{
    struct ctls_dial *d = ls->data;
    struct cp_cluster_tls *ct = d->ct;
    if (status < 0 || ct->closing)
        return;
    struct ctls_conn *c = ctls__conn_new(ct, false);
    if (!c)
        return;
    if (uv_accept(ls, (uv_stream_t *)&c->loc) != 0) {
        ctls__close(c);
        return;
    }
    snprintf(c->node_id, sizeof c->node_id, "%s", d->node_id);
    snprintf(c->address, sizeof c->address, "%s", d->address);
    snprintf(c->label, sizeof c->label, "node %s (%s)", d->node_id, d->address);
    struct sockaddr_storage ss;
    if (ctls__resolve(c->address, &ss)) {
        ctls__refuse(c,
                     "%s: cluster TLS dials an IP address and port: set the node's "
                     "cluster.advertise to IP:PORT",
                     c->label);
        return;
    }
    uv_timer_start(&c->timer, ctls__timeout, CTLS_HANDSHAKE_MS, 0);
    c->connect.data = c;
    int rc = uv_tcp_connect(&c->connect, &c->net, (struct sockaddr *)&ss, ctls__net_connected);
    if (rc)
        ctls__refuse(c, "cannot reach %s: %s", c->label, uv_strerror(rc));
}

static void ctls__dial_freed(uv_handle_t *h)
{
    free(h->data);
}

static void ctls__dial_closed(uv_handle_t *h)
{
    struct ctls_dial *d = h->data;
    struct cp_cluster_tls *ct = d->ct;
    free(d);
    ct->handles--;
    ctls__free_ct(ct);
}

int cp_cluster_tls_target(struct cp *cp, const char *node_id, const char *address, char *out,
                          size_t len)
{
    struct cp_cluster_tls *ct = cp->cluster_tls;
    if (!ct || !ct->client) {
        snprintf(out, len, "%s", address);
        return 0;
    }
    struct ctls_dial *d = ct->dials;
    while (d && strcmp(d->node_id, node_id) != 0)
        d = d->next;
    if (d) {
        if (strcmp(d->address, address) != 0) /* the node registered again elsewhere */
            snprintf(d->address, sizeof d->address, "%s", address);
        snprintf(out, len, "unix:%s", d->path);
        return 0;
    }
    if (ct->closing)
        return -ESHUTDOWN;
    d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ct = ct;
    snprintf(d->node_id, sizeof d->node_id, "%s", node_id);
    snprintf(d->address, sizeof d->address, "%s", address);
    int n = snprintf(d->path, sizeof d->path, "%s/%u.sock", ct->dir, ct->n_dials);
    if (n < 0 || (size_t)n >= sizeof d->path) {
        free(d);
        al_error("cluster tls: %s is too long a directory for unix sockets", ct->dir);
        return -ENAMETOOLONG;
    }
    unlink(d->path);
    uv_pipe_init(cp->loop, &d->ls, 0);
    d->ls.data = d;
    mode_t old = umask(077); /* no connection is possible under a wider mode */
    int rc = uv_pipe_bind(&d->ls, d->path);
    umask(old);
    if (!rc)
        rc = uv_listen((uv_stream_t *)&d->ls, 128, ctls__on_loc_conn);
    if (rc) {
        al_error("cluster tls: cannot listen on %s: %s", d->path, uv_strerror(rc));
        uv_close((uv_handle_t *)&d->ls, ctls__dial_freed);
        return rc;
    }
    ct->n_dials++;
    d->next = ct->dials;
    ct->dials = d;
    ct->handles++;
    snprintf(out, len, "unix:%s", d->path);
    return 0;
}

/* ---- configuration ------------------------------------------------------------------ */

bool cp_cluster_tls_on(const struct cp *cp)
{
    return cp->cluster_tls != NULL;
}

int cp_cluster_tls_open(struct cp *cp, struct al_error *err)
{
    const struct cp_config *cfg = &cp->cfg;
    if (!cfg->cluster_tls_ca || !cfg->cluster_tls_ca[0] || cp->cluster_tls)
        return 0;
    struct stat st;
    if (stat(cfg->cluster_tls_key, &st) == 0 && (st.st_mode & 077))
        return al_error_set(err, -EPERM,
                            "%s (cluster.tls.key_file) is readable by group or others: chmod "
                            "0600 it",
                            cfg->cluster_tls_key);
    struct cp_cluster_tls *ct = calloc(1, sizeof *ct);
    if (!ct)
        return al_error_set(err, -ENOMEM, "out of memory");
    ct->cp = cp;
    int rc;
    if (cfg->cluster_role == CP_CLUSTER_NODE) {
        struct al_http_tls_server_opts o = {.cert_file = cfg->cluster_tls_cert,
                                            .key_file = cfg->cluster_tls_key,
                                            .client_ca_file = cfg->cluster_tls_ca};
        rc = al_http_tls_server_new(&o, &ct->server, err);
    } else {
        struct al_http_tls_client_opts o = {.ca_file = cfg->cluster_tls_ca,
                                            .cert_file = cfg->cluster_tls_cert,
                                            .key_file = cfg->cluster_tls_key,
                                            .require_usage = true};
        rc = al_http_tls_client_new(&o, &ct->client, err);
        snprintf(ct->dir, sizeof ct->dir, "%s/run/cluster-tls", cfg->state_dir);
        if (!rc && al_mkdir_p(ct->dir, 0700) < 0)
            rc = al_error_set(err, -errno, "cannot make %s: %s", ct->dir, strerror(errno));
    }
    if (rc) {
        al_http_tls_client_free(ct->server);
        al_http_tls_client_free(ct->client);
        free(ct);
        return rc;
    }
    cp->cluster_tls = ct;
    return 0;
}

void cp_cluster_tls_close(struct cp *cp)
{
    struct cp_cluster_tls *ct = cp->cluster_tls;
    if (!ct)
        return;
    cp->cluster_tls = NULL;
    ct->closing = true;
    if (ct->listening)
        uv_close((uv_handle_t *)&ct->listener, ctls__ct_handle_closed);
    for (struct ctls_dial *d = ct->dials, *next; d; d = next) {
        next = d->next;
        unlink(d->path);
        uv_close((uv_handle_t *)&d->ls, ctls__dial_closed);
    }
    for (struct ctls_conn *c = ct->conns; c; c = c->next)
        ctls__close(c);
    ctls__free_ct(ct);
}
