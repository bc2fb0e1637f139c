/* common/relay: the one bidirectional relay (see relay.h).
 *
 * Owns: the pump of each direction (drain what is in flight, then read more, at most
 * PUMP_ROUNDS reads per event for fairness between connections), the choice between copy
 * and splice, the lazy buffers, a filter's place in the pump (each read goes through it
 * into the direction's output buffer; its held bytes go after a quiet and at the end), the
 * half-close and the timeouts (idle, total, and from the first half-close).
 *
 * A direction holds a pipe or a buffer only while bytes are in flight: an idle connection
 * holds neither, which is what keeps idle connections cheap. In splice mode a direction
 * still starts by copying and switches to splice once it carried splice_after bytes: most
 * connections are small, and for them a pipe costs more syscalls than it saves.
 */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define COPY_BUF     (16 * 1024)
#define SPLICE_LEN   (64 * 1024)
#define PIPE_COST    65536 /* what a pipe counts against the budget */
#define PUMP_ROUNDS  8
#define SPLICE_AFTER (64 * 1024)
#define FLUSH_MS     20

/* ---- resources ------------------------------------------------------------------------- */
static bool relay__take(struct al_relay *r, size_t n)
{
    const struct al_relay_res *res = r->o.res;
    return !res || !res->take || res->take(r->o.res_ctx, n);
}

static void relay__give(struct al_relay *r, size_t n)
{
    const struct al_relay_res *res = r->o.res;
    if (res && res->give)
        res->give(r->o.res_ctx, n);
}

static int relay__pipe_get(struct al_relay *r, struct al_relay_flow *f)
{
    if (!relay__take(r, PIPE_COST))
        return -ENOBUFS;
    const struct al_relay_res *res = r->o.res;
    int rc = 0;
    if (res && res->pipe_get)
        rc = res->pipe_get(r->o.res_ctx, f->pipe);
    else if (pipe2(f->pipe, O_NONBLOCK | O_CLOEXEC) < 0)
        rc = -errno;
    if (rc < 0)
        relay__give(r, PIPE_COST);
    else
        f->has_pipe = true;
    return rc;
}

/* An empty pipe goes back to the pool; one with bytes in it (a failed connection) is
 * closed, its bytes dropped. */
static void relay__pipe_put(struct al_relay *r, struct al_relay_flow *f)
{
    if (!f->has_pipe)
        return;
    const struct al_relay_res *res = r->o.res;
    if (f->in_pipe == 0 && res && res->pipe_put) {
        res->pipe_put(r->o.res_ctx, f->pipe);
    } else {
        close(f->pipe[0]);
        close(f->pipe[1]);
    }
    relay__give(r, PIPE_COST);
    f->has_pipe = false;
    f->in_pipe = 0;
}

static void relay__buf_put(struct al_relay *r, struct al_relay_flow *f)
{
    if (!f->buf)
        return;
    relay__give(r, f->cap);
    free(f->buf);
    f->buf = NULL;
    f->off = f->len = f->cap = 0;
}

static void relay__out_put(struct al_relay *r, struct al_relay_flow *f)
{
    if (f->out_taken)
        relay__give(r, f->out_taken);
    f->out_taken = 0;
    al_buf_free(&f->out);
    f->out_off = 0;
}

static bool flow__pending(const struct al_relay_flow *f)
{
    return f->in_pipe > 0 || f->off < f->len || f->out_off < f->out.len;
}

/* An idle direction holds nothing. */
static void flow__release(struct al_relay *r, struct al_relay_flow *f)
{
    if (f->has_pipe && f->in_pipe == 0)
        relay__pipe_put(r, f);
    if (f->buf && f->off == f->len)
        relay__buf_put(r, f);
    if (f->out.data && f->out_off == f->out.len)
        relay__out_put(r, f);
}

void al_relay_init(struct al_relay *r, const struct al_relay_end *a, const struct al_relay_end *b,
                   const struct al_relay_opts *o)
{
    memset(r, 0, sizeof *r);
    r->end[0] = *a;
    r->end[1] = *b;
    if (o)
        r->o = *o;
    if (!r->o.buf_size)
        r->o.buf_size = COPY_BUF;
    if (!r->o.splice_after)
        r->o.splice_after = SPLICE_AFTER;
    /* Splice needs a socket on both sides. */
    if (a->io || b->io)
        r->o.splice = false;
    r->t_start = r->t_last = al_now_ns();
    r->flow[0].t_in = r->flow[1].t_in = r->t_start;
    r->flow[0].wait_ready = r->o.read_when_ready && !a->io;
    r->flow[1].wait_ready = r->o.read_when_ready && !b->io;
    r->fail_end = -1;
}

int al_relay_prime(struct al_relay *r, int dir, const void *data, size_t len)
{
    struct al_relay_flow *f = &r->flow[dir & 1];
    if (!len)
        return 0;
    size_t have = f->len - f->off;
    size_t cap = have + len;
    if (!relay__take(r, cap))
        return -ENOBUFS;
    char *b = malloc(cap);
    if (!b) {
        relay__give(r, cap);
        return -ENOMEM;
    }
    if (have)
        memcpy(b, f->buf + f->off, have);
    memcpy(b + have, data, len);
    relay__buf_put(r, f);
    f->buf = b;
    f->cap = cap;
    f->off = 0;
    f->len = cap;
    return 0;
}

/* ---- one end's operations -------------------------------------------------------------- */
static ssize_t end__read(const struct al_relay_end *e, void *buf, size_t len)
{
    if (e->io)
        return e->io->read(e->ctx, buf, len);
    for (;;) {
        ssize_t n = recv(e->fd, buf, len, 0);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

static ssize_t end__write(const struct al_relay_end *e, const void *buf, size_t len)
{
    if (e->io)
        return e->io->write(e->ctx, buf, len);
    for (;;) {
        ssize_t n = send(e->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

static int end__shutdown(const struct al_relay_end *e)
{
    if (e->io)
        return e->io->shutdown ? e->io->shutdown(e->ctx) : 0;
    if (shutdown(e->fd, SHUT_WR) < 0 && errno != ENOTCONN)
        return -errno;
    return 0;
}

static ssize_t relay__splice(int from, int to, size_t len)
{
    for (;;) {
        ssize_t n = splice(from, NULL, to, NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

static int relay__fail(struct al_relay *r, int end, int op, int err)
{
    r->fail_end = end;
    r->fail_op = op;
    return err < 0 ? err : -ECONNRESET;
}

/* ---- a direction's filter -------------------------------------------------------------- */
static uint64_t filter__flush_ns(const struct al_relay_filter *filt)
{
    return (uint64_t)(filt->flush_ms ? filt->flush_ms : FLUSH_MS) * 1000000ull;
}

/* What the filter wrote is counted against the budget as its buffer grows. */
static int filter__account(struct al_relay *r, int i, int rc)
{
    struct al_relay_flow *f = &r->flow[i];
    if (rc == 0 && f->out.cap > f->out_taken) {
        if (!relay__take(r, f->out.cap - f->out_taken))
            rc = -ENOBUFS;
        else
            f->out_taken = f->out.cap;
    }
    return rc < 0 ? relay__fail(r, i, AL_RELAY_READ, rc) : 0;
}

/* The bytes just read (buf) go through flow i's filter into its output. */
static int filter__feed(struct al_relay *r, int i)
{
    struct al_relay_flow *f = &r->flow[i];
    const struct al_relay_filter *filt = r->o.filter[i];
    int rc = filt->feed(filt->ctx, f->buf + f->off, f->len - f->off, &f->out);
    f->off = f->len;
    return filter__account(r, i, rc);
}

/* Whether flow i's filter has bytes to let go now: at the end of the stream (once), or
 * after a quiet since the last read. */
static bool filter__due(const struct al_relay *r, int i)
{
    const struct al_relay_filter *filt = r->o.filter[i];
    const struct al_relay_flow *f = &r->flow[i];
    if (!filt || f->flushed)
        return false;
    if (f->eof)
        return true;
    return filt->held(filt->ctx) && al_now_ns() - f->t_in >= filter__flush_ns(filt);
}

/* ---- the pump -------------------------------------------------------------------------- */
/* Writes data[*off, len) to flow i's destination: 0 (all of it), -EAGAIN (the destination
 * is full) or the failure. */
static int flow__write(struct al_relay *r, int i, const char *data, size_t len, size_t *off)
{
    while (*off < len) {
        ssize_t n = end__write(&r->end[1 - i], data + *off, len - *off);
        if (n == -EAGAIN)
            return -EAGAIN;
        if (n <= 0)
            return relay__fail(r, 1 - i, AL_RELAY_WRITE, (int)n);
        *off += (size_t)n;
        r->flow[i].bytes += (uint64_t)n;
        r->t_last = al_now_ns();
    }
    return 0;
}

/* Writes what flow i holds to its destination: 0 (all of it, or the destination is full)
 * or the failure. */
static int flow__drain(struct al_relay *r, int i)
{
    struct al_relay_flow *f = &r->flow[i];
    const struct al_relay_end *dst = &r->end[1 - i];
    int rc = flow__write(r, i, f->buf, f->len, &f->off);
    if (rc == 0)
        rc = flow__write(r, i, f->out.data, f->out.len, &f->out_off);
    if (rc < 0)
        return rc == -EAGAIN ? 0 : rc;
    if (f->out.len) {
        al_buf_reset(&f->out); /* the next feed reuses it */
        f->out_off = 0;
    }
    while (f->in_pipe > 0) {
        ssize_t n = relay__splice(f->pipe[0], dst->fd, f->in_pipe);
        if (n == -EAGAIN)
            return 0;
        if (n <= 0)
            return relay__fail(r, 1 - i, AL_RELAY_WRITE, (int)n);
        f->in_pipe -= (size_t)n;
        f->bytes += (uint64_t)n;
        r->t_last = al_now_ns();
    }
    return 0;
}

/* Moves bytes of flow i until its source has none or its destination is full. */
static int flow__pump(struct al_relay *r, int i)
{
    struct al_relay_flow *f = &r->flow[i];
    const struct al_relay_end *src = &r->end[i], *dst = &r->end[1 - i];
    for (int round = 0; round < PUMP_ROUNDS; round++) {
        int rc = flow__drain(r, i);
        if (rc < 0)
            return rc;
        if (flow__pending(f))
            return 0; /* the destination is full: wait until it is writable */
        if (filter__due(r, i)) {
            const struct al_relay_filter *filt = r->o.filter[i];
            f->flushed = f->eof;
            if ((rc = filter__account(r, i, filt->flush(filt->ctx, &f->out))) < 0)
                return rc;
            continue; /* delivered by the next round's drain */
        }
        if (f->eof) {
            /* When the other direction ended already the owner closes both ends right
             * after this, and close() sends the FIN itself (both receive queues are empty
             * by then). */
            if (!r->flow[1 - i].done) {
                rc = end__shutdown(dst);
                if (rc == -EAGAIN)
                    return 0;
                if (rc < 0)
                    return relay__fail(r, 1 - i, AL_RELAY_WRITE, rc);
            }
            f->done = true;
            if (!r->t_half)
                r->t_half = al_now_ns();
            flow__release(r, f);
            return 0;
        }
        if (f->wait_ready) {
            flow__release(r, f); /* the owner's watch says when there is something to read */
            return 0;
        }
        ssize_t n;
        bool use_splice = r->o.splice && !r->o.filter[i] && f->bytes >= r->o.splice_after &&
                          !(f->buf && f->off < f->len);
        if (use_splice) {
            relay__buf_put(r, f); /* empty: splice takes over */
            if (!f->has_pipe && (rc = relay__pipe_get(r, f)) < 0)
                return relay__fail(r, i, AL_RELAY_READ, rc);
            n = relay__splice(src->fd, f->pipe[1], SPLICE_LEN);
            if (n > 0)
                f->in_pipe += (size_t)n;
        } else {
            if (f->buf && f->cap != r->o.buf_size)
                relay__buf_put(r, f); /* primed bytes went out: reads get a buffer of their own */
            if (!f->buf) {
                if (!relay__take(r, r->o.buf_size))
                    return relay__fail(r, i, AL_RELAY_READ, -ENOBUFS);
                if (!(f->buf = malloc(r->o.buf_size))) {
                    relay__give(r, r->o.buf_size);
                    return relay__fail(r, i, AL_RELAY_READ, -ENOMEM);
                }
                f->cap = r->o.buf_size;
            }
            n = end__read(src, f->buf, f->cap);
            if (n > 0) {
                f->off = 0;
                f->len = (size_t)n;
                if (r->o.filter[i]) {
                    f->t_in = al_now_ns();
                    if ((rc = filter__feed(r, i)) < 0)
                        return rc;
                }
                if (!src->io && (size_t)n < f->cap) {
                    /* A short read emptied the socket: deliver it, and let the owner's
                     * (level-triggered) watch say when there is more, rather than a read
                     * for EAGAIN. A transport may hold more than its socket shows. */
                    r->t_last = al_now_ns();
                    if ((rc = flow__drain(r, i)) < 0)
                        return rc;
                    flow__release(r, f);
                    return 0;
                }
            }
        }
        if (n == -EAGAIN) {
            flow__release(r, f);
            return 0;
        }
        if (n < 0)
            return relay__fail(r, i, AL_RELAY_READ, (int)n);
        if (n == 0)
            f->eof = true;
        else
            r->t_last = al_now_ns();
    }
    return 0;
}

int al_relay_run(struct al_relay *r, int end, int events)
{
    /* Readable on X: pump X -> other. Writable on X: drain other -> X. A transport may need
     * either readiness for either direction, so its events pump both. */
    bool pump[2] = {end < 0, end < 0};
    if (end >= 0) {
        end &= 1;
        if (r->end[end].io) {
            pump[0] = pump[1] = true;
        } else {
            pump[end] = events & AL_RELAY_READ;
            pump[1 - end] = events & AL_RELAY_WRITE;
        }
        if (events & AL_RELAY_READ)
            r->flow[end].wait_ready = false;
    }
    for (int i = 0; i < 2; i++) {
        if (pump[i] && !r->flow[i].done) {
            int rc = flow__pump(r, i);
            if (rc < 0)
                return rc;
        }
    }
    if (!r->flow[0].done || !r->flow[1].done)
        return 1;
    /* What a transport took is delivered once it sent it. */
    for (int i = 0; i < 2; i++) {
        const struct al_relay_end *e = &r->end[i];
        if (e->io && e->io->want && (e->io->want(e->ctx) & AL_RELAY_WRITE))
            return 1;
    }
    return 0;
}

int al_relay_want(const struct al_relay *r, int end)
{
    end &= 1;
    const struct al_relay_flow *out = &r->flow[end], *in = &r->flow[1 - end];
    int w = 0;
    if (!out->done && !out->eof && !flow__pending(out))
        w |= AL_RELAY_READ;
    /* Bytes toward it, or its shutdown still to pass on. */
    if (flow__pending(in) || (in->eof && !in->done))
        w |= AL_RELAY_WRITE;
    const struct al_relay_end *e = &r->end[end];
    if (e->io && e->io->want)
        w |= e->io->want(e->ctx);
    return w;
}

int al_relay_time(const struct al_relay *r, uint64_t now_ns, uint64_t *next_ms)
{
    uint64_t left = UINT64_MAX;
    if (r->o.idle_timeout_ms) {
        uint64_t due = r->t_last + (uint64_t)r->o.idle_timeout_ms * 1000000ull;
        if (now_ns >= due)
            return -ETIMEDOUT;
        left = due - now_ns;
    }
    if (r->o.total_timeout_ms) {
        uint64_t due = r->t_start + (uint64_t)r->o.total_timeout_ms * 1000000ull;
        if (now_ns >= due)
            return -ETIMEDOUT;
        if (due - now_ns < left)
            left = due - now_ns;
    }
    if (r->o.half_close_timeout_ms && r->t_half) {
        uint64_t due = r->t_half + (uint64_t)r->o.half_close_timeout_ms * 1000000ull;
        if (now_ns >= due)
            return -ETIMEDOUT;
        if (due - now_ns < left)
            left = due - now_ns;
    }
    for (int i = 0; i < 2; i++) {
        const struct al_relay_filter *filt = r->o.filter[i];
        const struct al_relay_flow *f = &r->flow[i];
        if (!filt || f->eof || !filt->held(filt->ctx))
            continue;
        uint64_t due = f->t_in + filter__flush_ns(filt);
        uint64_t l = due > now_ns ? due - now_ns : 1; /* due: the owner runs the relay now */
        if (l < left)
            left = l;
    }
    /* Rounded up: a timer that fires early only re-arms. */
    *next_ms = left == UINT64_MAX ? 0 : (left + 999999ull) / 1000000ull;
    return 0;
}

uint64_t al_relay_bytes(const struct al_relay *r, int dir)
{
    return r->flow[dir & 1].bytes;
}

void al_relay_free(struct al_relay *r)
{
    for (int i = 0; i < 2; i++) {
        relay__pipe_put(r, &r->flow[i]);
        relay__buf_put(r, &r->flow[i]);
        relay__out_put(r, &r->flow[i]);
    }
}
