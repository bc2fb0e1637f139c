/* egress/relay: moves bytes both ways between a sandbox and its upstream once a connection
 * has been decided (TLS passthrough, raw TCP opened by a CIDR rule, an upgraded HTTP
 * connection).
 *
 * Two modes (egress_config.relay): splice(2) through a pipe (zero-copy: the bytes never
 * enter user space), or read/write through a 16 KiB buffer. In splice mode a direction still
 * starts with read/write and switches to splice once it has carried SPLICE_AFTER bytes:
 * most connections are small, and for them a pipe costs more syscalls than it saves.
 * Either way a direction holds a pipe or a buffer only while bytes are in flight: an idle
 * connection holds neither, which is what keeps idle connections cheap. Backpressure: a direction with bytes in flight
 * stops reading its source until the destination has taken them. Half-close is forwarded
 * (EOF on one side becomes shutdown(SHUT_WR) on the other); a reset or write error on
 * either side resets both.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

#define COPY_BUF     (16 * 1024)
#define SPLICE_LEN   (64 * 1024)
#define PIPE_COST    65536
#define PUMP_ROUNDS  8 /* fairness: at most this many reads per event */
#define SPLICE_AFTER (64 * 1024)

enum { PUMP_OK = 0, PUMP_RESET = -1 };

static bool flow__pending(const struct egress_flow *f)
{
    return f->in_pipe > 0 || f->off < f->len;
}

/* Writes what the flow holds to dst. Returns PUMP_RESET on a fatal error. */
static int flow__drain(struct egress_conn *c, struct egress_flow *f, struct egress_end *dst)
{
    while (f->off < f->len) {
        ssize_t n = send(dst->fd, f->buf + f->off, f->len - f->off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return PUMP_OK;
            return PUMP_RESET;
        }
        f->off += (size_t)n;
        f->bytes += (uint64_t)n;
        c->t_last_io = al_now_ns();
    }
    while (f->in_pipe > 0) {
        ssize_t n = splice(f->pipe->fd[0], NULL, dst->fd, NULL, f->in_pipe,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return PUMP_OK;
            return PUMP_RESET;
        }
        if (n == 0)
            return PUMP_RESET;
        f->in_pipe -= (size_t)n;
        f->bytes += (uint64_t)n;
        c->t_last_io = al_now_ns();
    }
    return PUMP_OK;
}

/* Gives back the pipe or buffer of a direction with nothing in flight: an idle direction
 * holds nothing. */
static void flow__release(struct egress_conn *c, struct egress_flow *f)
{
    if (f->pipe && f->in_pipe == 0) {
        egress_pipe_put(c->w, f->pipe);
        egress_mem_give(c->w->e, c->sb, PIPE_COST);
        f->pipe = NULL;
    }
    if (f->buf && f->off == f->len) {
        egress_mem_give(c->w->e, c->sb, f->cap);
        free(f->buf);
        f->buf = NULL;
        f->off = f->len = f->cap = 0;
    }
}

/* Moves bytes src -> dst until src has nothing or dst is full. */
static int flow__pump(struct egress_conn *c, struct egress_end *src, struct egress_end *dst,
                      struct egress_flow *f)
{
    struct egress *e = c->w->e;
    for (int round = 0; round < PUMP_ROUNDS; round++) {
        if (flow__drain(c, f, dst) < 0)
            return PUMP_RESET;
        if (flow__pending(f))
            return PUMP_OK; /* dst is full: wait for WRITABLE */
        if (src->eof) {
            /* The other direction already ended: the connection closes right after this,
             * and close() sends the FIN itself (both receive queues are empty by then). */
            const struct egress_flow *other = f == &c->up ? &c->down : &c->up;
            if (!dst->shut_wr && !other->done) {
                shutdown(dst->fd, SHUT_WR);
                dst->shut_wr = true;
            }
            f->done = true;
            flow__release(c, f);
            return PUMP_OK;
        }
        ssize_t n;
        bool use_splice = e->cfg.relay == EGRESS_RELAY_SPLICE && f->bytes >= SPLICE_AFTER &&
                          !(f->buf && f->off < f->len);
        if (use_splice && f->buf) {
            /* Switching to splice: the buffer is empty, let it go. */
            egress_mem_give(e, c->sb, f->cap);
            free(f->buf);
            f->buf = NULL;
            f->off = f->len = f->cap = 0;
        }
        if (use_splice) {
            if (!f->pipe) {
                if (!egress_mem_take(e, c->sb, PIPE_COST))
                    return PUMP_RESET;
                if (!(f->pipe = egress_pipe_get(c->w))) {
                    egress_mem_give(e, c->sb, PIPE_COST);
                    return PUMP_RESET;
                }
            }
            n = splice(src->fd, NULL, f->pipe->fd[1], NULL, SPLICE_LEN,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n > 0)
                f->in_pipe += (size_t)n;
        } else {
            if (!f->buf) {
                if (!egress_mem_take(e, c->sb, COPY_BUF))
                    return PUMP_RESET;
                if (!(f->buf = malloc(COPY_BUF))) {
                    egress_mem_give(e, c->sb, COPY_BUF);
                    return PUMP_RESET;
                }
                f->cap = COPY_BUF;
            }
            n = recv(src->fd, f->buf, f->cap, 0);
            if (n > 0) {
                f->off = 0;
                f->len = (size_t)n;
                if ((size_t)n < f->cap) {
                    /* A short read emptied the socket: deliver it, and let epoll (level-
                     * triggered) say when there is more, rather than a read for EAGAIN. */
                    c->t_last_io = al_now_ns();
                    if (flow__drain(c, f, dst) < 0)
                        return PUMP_RESET;
                    flow__release(c, f);
                    return PUMP_OK;
                }
            }
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                flow__release(c, f);
                return PUMP_OK;
            }
            return PUMP_RESET;
        }
        if (n == 0)
            src->eof = true;
        else
            c->t_last_io = al_now_ns();
    }
    return PUMP_OK;
}

static void relay__update(struct egress_conn *c)
{
    struct egress_end *cl = &c->client, *up = &c->upstream;
    int ce = 0, ue = 0;
    if (!c->up.done && !cl->eof && !flow__pending(&c->up))
        ce |= UV_READABLE;
    if (flow__pending(&c->up))
        ue |= UV_WRITABLE;
    if (!c->down.done && !up->eof && !flow__pending(&c->down))
        ue |= UV_READABLE;
    if (flow__pending(&c->down))
        ce |= UV_WRITABLE;
    egress_conn_set_events(cl, ce);
    egress_conn_set_events(up, ue);
}

static void relay__step(struct egress_conn *c, bool up, bool down)
{
    if (up && !c->up.done && flow__pump(c, &c->client, &c->upstream, &c->up) < 0) {
        egress_conn_close(c, true, c->client.eof ? "upstream_write_failed" : "reset");
        return;
    }
    if (down && !c->down.done && flow__pump(c, &c->upstream, &c->client, &c->down) < 0) {
        egress_conn_close(c, true, "reset");
        return;
    }
    if (c->up.done && c->down.done) {
        egress_conn_close(c, false, "closed");
        return;
    }
    relay__update(c);
}

void egress_relay_start(struct egress_conn *c)
{
    c->t_last_io = al_now_ns();
    egress_conn_deadline(c, c->w->e->cfg.idle_timeout_ms);
    relay__step(c, true, true);
}

void egress_relay_on_event(struct egress_conn *c, struct egress_end *end, int events)
{
    bool from_client = end == &c->client;
    /* Readable on X: pump X -> other. Writable on X: drain other -> X. */
    bool up = (from_client && (events & UV_READABLE)) || (!from_client && (events & UV_WRITABLE));
    bool down = (!from_client && (events & UV_READABLE)) || (from_client && (events & UV_WRITABLE));
    relay__step(c, up, down);
}
