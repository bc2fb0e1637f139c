/* Unit tests: common/relay over socketpairs: bytes and counts both ways, half-close each
 * way, back-pressure from a slow reader, a peer that went away, the timeouts, the splice
 * path, a transport end (and one that holds bytes of its own to send), the timeout from the
 * first half-close, a filter on one direction, a budget that refuses, and an owner
 * that has the sockets read only once they are reported readable.
 *
 * Each relay end is one side of a socketpair; the test holds the other sides ("peers").
 * Socketpair writes land in the peer's queue synchronously, so "nothing more can move" is
 * a poll with no wait: no test waits for time to pass. */
#include "al_test.h"
#include "common/relay.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pair {
    struct al_relay r;
    int end[2];  /* the relay's sockets */
    int peer[2]; /* the test's: peer[i] talks to end[i] */
};

static void nonblock(int fd)
{
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
}

static void pair_open(struct pair *p, const struct al_relay_opts *o, const struct al_relay_io *io,
                      void *ctx)
{
    for (int i = 0; i < 2; i++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        p->end[i] = sv[0];
        p->peer[i] = sv[1];
        nonblock(sv[0]);
        nonblock(sv[1]);
    }
    struct al_relay_end a = {.fd = p->end[0], .io = io, .ctx = ctx};
    struct al_relay_end b = {.fd = p->end[1]};
    al_relay_init(&p->r, &a, &b, o);
}

static void pair_close(struct pair *p)
{
    al_relay_free(&p->r);
    for (int i = 0; i < 2; i++) {
        if (p->end[i] >= 0)
            close(p->end[i]);
        if (p->peer[i] >= 0)
            close(p->peer[i]);
    }
}

/* Runs the relay on what its sockets are ready for until nothing is: the last result of
 * al_relay_run (1 while running). */
static int pump(struct pair *p)
{
    int rc = al_relay_run(&p->r, -1, 0);
    for (int guard = 0; rc == 1 && guard < 100000; guard++) {
        struct pollfd pf[2];
        for (int i = 0; i < 2; i++) {
            int w = al_relay_want(&p->r, i);
            pf[i].fd = p->end[i];
            pf[i].events =
                (short)((w & AL_RELAY_READ ? POLLIN : 0) | (w & AL_RELAY_WRITE ? POLLOUT : 0));
            pf[i].revents = 0;
        }
        if (poll(pf, 2, 0) <= 0)
            break;
        for (int i = 0; i < 2 && rc == 1; i++) {
            int ev = (pf[i].revents & (POLLIN | POLLHUP | POLLERR) ? AL_RELAY_READ : 0) |
                     (pf[i].revents & (POLLOUT | POLLHUP | POLLERR) ? AL_RELAY_WRITE : 0);
            if (ev)
                rc = al_relay_run(&p->r, i, ev);
        }
    }
    return rc;
}

static void send_all(int fd, const void *d, size_t n)
{
    ck_assert_int_eq(send(fd, d, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* What fd has now (not waiting): the bytes, and whether it saw the end of the stream. */
static size_t drain(int fd, char *out, size_t cap, bool *eof)
{
    size_t len = 0;
    *eof = false;
    while (len < cap) {
        ssize_t n = recv(fd, out + len, cap - len, 0);
        if (n == 0) {
            *eof = true;
            break;
        }
        if (n < 0) {
            ck_assert_int_eq(errno, EAGAIN);
            break;
        }
        len += (size_t)n;
    }
    return len;
}

START_TEST(bytes_both_ways_with_primed_bytes_first)
{
    struct pair p;
    pair_open(&p, NULL, NULL, NULL);
    ck_assert_int_eq(al_relay_prime(&p.r, 0, "HELLO ", 6), 0);
    ck_assert_int_eq(al_relay_prime(&p.r, 1, "101 ", 4), 0);
    send_all(p.peer[0], "up", 2);
    send_all(p.peer[1], "down", 4);
    ck_assert_int_eq(pump(&p), 1);
    char buf[64];
    bool eof;
    size_t n = drain(p.peer[1], buf, sizeof buf, &eof);
    ck_assert(!eof);
    ck_assert_uint_eq(n, 8);
    ck_assert(memcmp(buf, "HELLO up", 8) == 0);
    n = drain(p.peer[0], buf, sizeof buf, &eof);
    ck_assert_uint_eq(n, 8);
    ck_assert(memcmp(buf, "101 down", 8) == 0);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 0), 8);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 1), 8);
    /* Idle: nothing held, both read. */
    ck_assert_ptr_null(p.r.flow[0].buf);
    ck_assert_ptr_null(p.r.flow[1].buf);
    ck_assert_int_eq(al_relay_want(&p.r, 0), AL_RELAY_READ);
    ck_assert_int_eq(al_relay_want(&p.r, 1), AL_RELAY_READ);
    pair_close(&p);
}
END_TEST

/* read_when_ready: the start delivers the primed bytes and reads neither socket, though
 * both have bytes waiting; each is read once the owner reports it readable. */
START_TEST(read_when_ready_reads_a_socket_only_once_reported_readable)
{
    struct pair p;
    struct al_relay_opts o = {.read_when_ready = true};
    pair_open(&p, &o, NULL, NULL);
    ck_assert_int_eq(al_relay_prime(&p.r, 0, "HELLO ", 6), 0);
    send_all(p.peer[0], "up", 2);
    send_all(p.peer[1], "down", 4);
    ck_assert_int_eq(al_relay_run(&p.r, -1, 0), 1);
    char buf[64];
    bool eof;
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 6);
    ck_assert(memcmp(buf, "HELLO ", 6) == 0);
    ck_assert_uint_eq(drain(p.peer[0], buf, sizeof buf, &eof), 0);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 0), 6);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 1), 0);
    /* Nothing held while it waits, and both are watched for reading. */
    ck_assert_ptr_null(p.r.flow[0].buf);
    ck_assert_int_eq(al_relay_want(&p.r, 0), AL_RELAY_READ);
    ck_assert_int_eq(al_relay_want(&p.r, 1), AL_RELAY_READ);
    /* Writable is no reason to read the other end. */
    ck_assert_int_eq(al_relay_run(&p.r, 1, AL_RELAY_WRITE), 1);
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 0);
    ck_assert_int_eq(al_relay_run(&p.r, 1, AL_RELAY_READ), 1);
    ck_assert_uint_eq(drain(p.peer[0], buf, sizeof buf, &eof), 4);
    ck_assert(memcmp(buf, "down", 4) == 0);
    ck_assert_int_eq(al_relay_run(&p.r, 0, AL_RELAY_READ), 1);
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 2);
    ck_assert(memcmp(buf, "up", 2) == 0);
    /* From then on it reads as usual. */
    send_all(p.peer[0], "more", 4);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 4);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 0), 12);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 1), 4);
    pair_close(&p);
}
END_TEST

/* a ends its stream: b's peer sees the end, yet still talks back; then b ends too. */
static void half_close(int first)
{
    struct pair p;
    pair_open(&p, NULL, NULL, NULL);
    int second = 1 - first;
    send_all(p.peer[first], "last words", 10);
    ck_assert_int_eq(shutdown(p.peer[first], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 1);
    char buf[64];
    bool eof;
    ck_assert_uint_eq(drain(p.peer[second], buf, sizeof buf, &eof), 10);
    ck_assert(eof);
    ck_assert(p.r.flow[first].done);
    /* The other way still flows. */
    send_all(p.peer[second], "reply", 5);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert_uint_eq(drain(p.peer[first], buf, sizeof buf, &eof), 5);
    ck_assert(!eof);
    ck_assert(memcmp(buf, "reply", 5) == 0);
    ck_assert_int_eq(shutdown(p.peer[second], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 0);
    ck_assert_uint_eq(al_relay_bytes(&p.r, first), 10);
    ck_assert_uint_eq(al_relay_bytes(&p.r, second), 5);
    pair_close(&p);
}

START_TEST(half_close_from_a)
{
    half_close(0);
}
END_TEST

START_TEST(half_close_from_b)
{
    half_close(1);
}
END_TEST

/* Fills the socket of peer[0] -> end[0] with a pattern as far as it takes; returns how much. */
static size_t fill(int fd, size_t max, size_t start)
{
    char chunk[4096];
    size_t sent = 0;
    while (sent < max) {
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = (char)((start + sent + i) % 251);
        size_t want = max - sent < sizeof chunk ? max - sent : sizeof chunk;
        ssize_t n = send(fd, chunk, want, MSG_NOSIGNAL);
        if (n < 0) {
            ck_assert_int_eq(errno, EAGAIN);
            break;
        }
        sent += (size_t)n;
    }
    return sent;
}

static void slow_reader(bool splice)
{
    struct pair p;
    struct al_relay_opts o = {.buf_size = 4096, .splice = splice, .splice_after = 1};
    pair_open(&p, &o, NULL, NULL);
    int small = 4096;
    for (int i = 0; i < 2; i++) {
        setsockopt(p.end[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        setsockopt(p.peer[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    const size_t total = 1u << 20;
    size_t sent = 0, got = 0;
    bool stalled = false;
    char buf[8192];
    /* The reader of b takes nothing until the relay is stuck: then the relay must not be
     * reading a any more and hold at most one buffer (or pipe) of bytes. */
    while (got < total) {
        if (sent < total)
            sent += fill(p.peer[0], total - sent, sent);
        ck_assert_int_eq(pump(&p), 1);
        if (!stalled && sent < total) {
            stalled = true;
            ck_assert_int_eq(al_relay_want(&p.r, 0) & AL_RELAY_READ, 0);
            ck_assert_int_ne(al_relay_want(&p.r, 1) & AL_RELAY_WRITE, 0);
            const struct al_relay_flow *f = &p.r.flow[0];
            ck_assert_uint_le(f->len - f->off, 4096);
            ck_assert_uint_le(f->in_pipe, 1u << 20);
            ck_assert_uint_lt(al_relay_bytes(&p.r, 0), sent);
        }
        bool eof;
        size_t n = drain(p.peer[1], buf, sizeof buf, &eof);
        ck_assert(!eof);
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if ((unsigned char)buf[i] != (unsigned char)((got + i) % 251))
                bad = i;
        ck_assert_msg(bad == n, "byte %zu differs", got + bad);
        got += n;
    }
    ck_assert(stalled);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 0), total);
    if (splice)
        ck_assert(p.r.flow[0].bytes > p.r.o.splice_after);
    pair_close(&p);
}

START_TEST(slow_reader_holds_the_writer_back)
{
    slow_reader(false);
}
END_TEST

START_TEST(slow_reader_holds_the_writer_back_spliced)
{
    slow_reader(true);
}
END_TEST

START_TEST(a_peer_gone_fails_the_relay_at_that_end)
{
    struct pair p;
    pair_open(&p, NULL, NULL, NULL);
    close(p.peer[1]);
    p.peer[1] = -1;
    send_all(p.peer[0], "to nobody", 9);
    int rc = pump(&p);
    ck_assert_int_eq(rc, -EPIPE);
    ck_assert_int_eq(p.r.fail_end, 1);
    ck_assert_int_eq(p.r.fail_op, AL_RELAY_WRITE);
    pair_close(&p);
}
END_TEST

START_TEST(a_reset_read_fails_the_relay)
{
    struct pair p;
    pair_open(&p, NULL, NULL, NULL);
    /* A unix socket closed with unread bytes resets its peer. */
    send_all(p.end[1], "unread", 6);
    close(p.peer[1]);
    p.peer[1] = -1;
    ck_assert_int_eq(pump(&p), -ECONNRESET);
    ck_assert_int_eq(p.r.fail_end, 1);
    ck_assert_int_eq(p.r.fail_op, AL_RELAY_READ);
    pair_close(&p);
}
END_TEST

START_TEST(idle_and_total_timeouts)
{
    struct pair p;
    struct al_relay_opts o = {.idle_timeout_ms = 1000, .total_timeout_ms = 5000};
    pair_open(&p, &o, NULL, NULL);
    uint64_t next = 0, t0 = p.r.t_start;
    ck_assert_int_eq(al_relay_time(&p.r, t0, &next), 0);
    ck_assert_uint_eq(next, 1000);
    ck_assert_int_eq(al_relay_time(&p.r, t0 + 999000000ull, &next), 0);
    ck_assert_uint_eq(next, 1);
    ck_assert_int_eq(al_relay_time(&p.r, t0 + 1000000000ull, &next), -ETIMEDOUT);
    /* A byte moved: the idle clock starts again from then, the total one does not. */
    send_all(p.peer[0], "x", 1);
    ck_assert_int_eq(pump(&p), 1);
    uint64_t moved = p.r.t_last;
    ck_assert_uint_ge(moved, t0);
    ck_assert_int_eq(al_relay_time(&p.r, moved + 500000000ull, &next), 0);
    ck_assert_int_eq(al_relay_time(&p.r, t0 + 5000000000ull, &next), -ETIMEDOUT);
    pair_close(&p);
    /* No timeouts: never, and no timer to arm. */
    pair_open(&p, NULL, NULL, NULL);
    ck_assert_int_eq(al_relay_time(&p.r, p.r.t_start + 86400000000000ull, &next), 0);
    ck_assert_uint_eq(next, 0);
    pair_close(&p);
}
END_TEST

/* A transport over end a's socket that counts what passes and how it ends. */
struct tio {
    int fd;
    int reads, writes, shutdowns;
    bool holding;
};

static ssize_t tio_read(void *ctx, void *buf, size_t len)
{
    struct tio *t = ctx;
    t->reads++;
    ssize_t n = recv(t->fd, buf, len < 3 ? len : 3, 0); /* small reads: a record at a time */
    return n < 0 ? -errno : n;
}

static ssize_t tio_write(void *ctx, const void *buf, size_t len)
{
    struct tio *t = ctx;
    t->writes++;
    ssize_t n = send(t->fd, buf, len, MSG_NOSIGNAL);
    return n < 0 ? -errno : n;
}

static int tio_shutdown(void *ctx)
{
    struct tio *t = ctx;
    t->shutdowns++;
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

static const struct al_relay_io tio_ops = {
    .read = tio_read, .write = tio_write, .shutdown = tio_shutdown};

START_TEST(a_transport_end_reads_until_it_has_nothing)
{
    struct pair p;
    struct tio t = {0};
    struct al_relay_opts o = {.splice = true}; /* no splice with a transport */
    pair_open(&p, &o, &tio_ops, &t);
    t.fd = p.end[0];
    ck_assert(!p.r.o.splice);
    send_all(p.peer[0], "abcdefgh", 8);
    send_all(p.peer[1], "back", 4);
    /* One event is enough although each read returns 3 bytes: the transport is read until
     * it says EAGAIN, not until a read comes back short. */
    ck_assert_int_eq(al_relay_run(&p.r, 0, AL_RELAY_READ), 1);
    char buf[16];
    bool eof;
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 8);
    ck_assert(memcmp(buf, "abcdefgh", 8) == 0);
    ck_assert_int_ge(t.reads, 4);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert_uint_eq(drain(p.peer[0], buf, sizeof buf, &eof), 4);
    ck_assert_int_ge(t.writes, 1);
    /* b ends: the transport's shutdown passes it on. */
    ck_assert_int_eq(shutdown(p.peer[1], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert_int_eq(t.shutdowns, 1);
    drain(p.peer[0], buf, sizeof buf, &eof);
    ck_assert(eof);
    ck_assert_int_eq(shutdown(p.peer[0], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 0);
    pair_close(&p);
}
END_TEST

/* A transport that holds bytes of its own to send (a TLS session's ciphertext) while
 * t->holding: its want asks for writability. */
static int tio_want(void *ctx)
{
    struct tio *t = ctx;
    return t->holding ? AL_RELAY_WRITE : 0;
}

static const struct al_relay_io tio_want_ops = {
    .read = tio_read, .write = tio_write, .shutdown = tio_shutdown, .want = tio_want};

START_TEST(the_relay_ends_once_a_transport_sent_what_it_holds)
{
    struct pair p;
    struct tio t = {.holding = true};
    pair_open(&p, NULL, &tio_want_ops, &t);
    t.fd = p.end[0];
    ck_assert_int_eq(shutdown(p.peer[0], SHUT_WR), 0);
    ck_assert_int_eq(shutdown(p.peer[1], SHUT_WR), 0);
    ck_assert_int_eq(al_relay_run(&p.r, -1, 0), 1);
    ck_assert(p.r.flow[0].done && p.r.flow[1].done);
    /* Both directions ended, but the transport still has bytes to send: it is not over. */
    ck_assert_int_eq(al_relay_want(&p.r, 0), AL_RELAY_WRITE);
    ck_assert_int_eq(al_relay_run(&p.r, 0, AL_RELAY_WRITE), 1);
    t.holding = false;
    ck_assert_int_eq(al_relay_run(&p.r, 0, AL_RELAY_WRITE), 0);
    pair_close(&p);
}
END_TEST

START_TEST(the_half_close_timeout_counts_from_the_first_end)
{
    struct pair p;
    struct al_relay_opts o = {.half_close_timeout_ms = 2000};
    pair_open(&p, &o, NULL, NULL);
    uint64_t next = 0;
    /* Both directions open: no timeout however long. */
    ck_assert_int_eq(al_relay_time(&p.r, p.r.t_start + 86400000000000ull, &next), 0);
    ck_assert_uint_eq(next, 0);
    ck_assert_int_eq(shutdown(p.peer[0], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert(p.r.flow[0].done && !p.r.flow[1].done);
    uint64_t t = p.r.t_half;
    ck_assert_uint_ge(t, p.r.t_start);
    ck_assert_int_eq(al_relay_time(&p.r, t + 500000000ull, &next), 0);
    ck_assert_uint_eq(next, 1500);
    /* Bytes still moving the other way do not make it longer. */
    send_all(p.peer[1], "late", 4);
    ck_assert_int_eq(pump(&p), 1);
    ck_assert_uint_eq(p.r.t_half, t);
    ck_assert_int_eq(al_relay_time(&p.r, t + 2000000000ull, &next), -ETIMEDOUT);
    pair_close(&p);
}
END_TEST

struct budget {
    size_t left, held;
};

static bool b_take(void *ctx, size_t n)
{
    struct budget *b = ctx;
    if (n > b->left)
        return false;
    b->left -= n;
    b->held += n;
    return true;
}

static void b_give(void *ctx, size_t n)
{
    struct budget *b = ctx;
    ck_assert_uint_ge(b->held, n);
    b->left += n;
    b->held -= n;
}

START_TEST(a_budget_that_refuses_fails_the_relay_and_all_is_given_back)
{
    struct budget b = {.left = 1024};
    struct al_relay_res res = {.take = b_take, .give = b_give};
    struct al_relay_opts o = {.buf_size = 4096, .res = &res, .res_ctx = &b};
    struct pair p;
    pair_open(&p, &o, NULL, NULL);
    ck_assert_int_eq(al_relay_prime(&p.r, 0, "hi", 2), 0);
    ck_assert_uint_eq(b.held, 2);
    ck_assert_int_eq(al_relay_prime(&p.r, 1, "x", 2000), -ENOBUFS);
    send_all(p.peer[0], "more", 4);
    ck_assert_int_eq(pump(&p), -ENOBUFS); /* the primed bytes went, the next buffer is refused */
    char buf[8];
    bool eof;
    ck_assert_uint_eq(drain(p.peer[1], buf, sizeof buf, &eof), 2);
    al_relay_free(&p.r);
    ck_assert_uint_eq(b.held, 0);
    pair_close(&p);
}
END_TEST

/* A filter that masks SECRET and holds back a tail that could begin one. */
struct tfilt {
    char held[8];
    size_t n;
    int feeds, flushes, fail;
};

static int tf_feed(void *ctx, const void *in, size_t len, struct al_buf *out)
{
    struct tfilt *t = ctx;
    if (t->fail)
        return t->fail;
    t->feeds++;
    char tmp[256];
    ck_assert_uint_le(t->n + len, sizeof tmp);
    memcpy(tmp, t->held, t->n);
    memcpy(tmp + t->n, in, len);
    size_t m = t->n + len, i = 0;
    t->n = 0;
    while (i < m) {
        if (m - i >= 6 && memcmp(tmp + i, "SECRET", 6) == 0) {
            ck_assert_int_eq(al_buf_append(out, "******", 6), 0);
            i += 6;
        } else if (m - i < 6 && memcmp(tmp + i, "SECRET", m - i) == 0) {
            memcpy(t->held, tmp + i, m - i);
            t->n = m - i;
            break;
        } else {
            ck_assert_int_eq(al_buf_append(out, tmp + i++, 1), 0);
        }
    }
    return 0;
}

static int tf_flush(void *ctx, struct al_buf *out)
{
    struct tfilt *t = ctx;
    t->flushes++;
    int rc = al_buf_append(out, t->held, t->n) < 0 ? -ENOMEM : 0;
    t->n = 0;
    return rc;
}

static size_t tf_held(void *ctx)
{
    return ((struct tfilt *)ctx)->n;
}

static void expect(int fd, const char *want, bool want_eof)
{
    char buf[256];
    bool eof;
    size_t n = drain(fd, buf, sizeof buf - 1, &eof);
    buf[n] = 0;
    ck_assert_str_eq(buf, want);
    ck_assert(eof == want_eof);
}

START_TEST(a_filter_sees_every_read_and_lets_held_bytes_go_after_a_quiet_and_at_the_end)
{
    struct tfilt t = {0};
    struct al_relay_filter f = {.feed = tf_feed, .flush = tf_flush, .held = tf_held, .ctx = &t};
    struct al_relay_opts o = {.splice = true, .splice_after = 1, .idle_timeout_ms = 60000};
    o.filter[1] = &f;
    struct pair p;
    pair_open(&p, &o, NULL, NULL);
    /* Primed bytes are the owner's, already filtered. */
    ck_assert_int_eq(al_relay_prime(&p.r, 1, "SECRET ", 7), 0);
    send_all(p.peer[1], "x SECRET y SEC", 14);
    ck_assert_int_eq(pump(&p), 1);
    expect(p.peer[0], "SECRET x ****** y ", false);
    /* What it holds goes after a quiet: al_relay_time says when, and once that passed (the
     * last read is moved back instead of waiting) a run with no events lets it go. */
    uint64_t next = 0;
    ck_assert_int_eq(al_relay_time(&p.r, p.r.flow[1].t_in, &next), 0);
    ck_assert_uint_eq(next, 20);
    ck_assert_int_eq(al_relay_run(&p.r, -1, 0), 1);
    expect(p.peer[0], "", false); /* not yet */
    p.r.flow[1].t_in -= 1000000000ull;
    ck_assert_int_eq(al_relay_time(&p.r, al_now_ns(), &next), 0);
    ck_assert_uint_eq(next, 1);
    ck_assert_int_eq(al_relay_run(&p.r, -1, 0), 1);
    expect(p.peer[0], "SEC", false);
    ck_assert_int_eq(t.flushes, 1);
    ck_assert_int_eq(al_relay_time(&p.r, al_now_ns(), &next), 0);
    ck_assert_uint_gt(next, 20); /* nothing held: only the idle timeout */
    /* The other direction is not filtered, and splices past splice_after. */
    char big[4096];
    memset(big, 'S', sizeof big);
    memcpy(big, "SECRET", 6);
    send_all(p.peer[0], big, sizeof big);
    send_all(p.peer[0], "SECRET", 6);
    ck_assert_int_eq(pump(&p), 1);
    char got[8192];
    bool eof;
    ck_assert_uint_eq(drain(p.peer[1], got, sizeof got, &eof), sizeof big + 6);
    ck_assert(memcmp(got, "SECRET", 6) == 0 && memcmp(got + sizeof big, "SECRET", 6) == 0);
    ck_assert(p.r.flow[0].has_pipe || p.r.flow[0].bytes > sizeof big);
    ck_assert(!p.r.flow[1].has_pipe);
    /* At the end of the stream the held bytes go first, then the end. */
    send_all(p.peer[1], "a SECR", 6);
    ck_assert_int_eq(shutdown(p.peer[1], SHUT_WR), 0);
    ck_assert_int_eq(pump(&p), 1);
    expect(p.peer[0], "a SECR", true);
    ck_assert_int_eq(t.flushes, 2);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 1), 18 + 3 + 6);
    ck_assert_uint_eq(al_relay_bytes(&p.r, 0), sizeof big + 6);
    pair_close(&p);

    /* A filter that fails fails the relay as a read of its direction. */
    t = (struct tfilt){.fail = -EIO};
    pair_open(&p, &o, NULL, NULL);
    send_all(p.peer[1], "x", 1);
    ck_assert_int_eq(pump(&p), -EIO);
    ck_assert_int_eq(p.r.fail_end, 1);
    ck_assert_int_eq(p.r.fail_op, AL_RELAY_READ);
    pair_close(&p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("relay");
    TCase *t = tcase_create("relay");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, bytes_both_ways_with_primed_bytes_first);
    tcase_add_test(t, read_when_ready_reads_a_socket_only_once_reported_readable);
    tcase_add_test(t, half_close_from_a);
    tcase_add_test(t, half_close_from_b);
    tcase_add_test(t, slow_reader_holds_the_writer_back);
    tcase_add_test(t, slow_reader_holds_the_writer_back_spliced);
    tcase_add_test(t, a_peer_gone_fails_the_relay_at_that_end);
    tcase_add_test(t, a_reset_read_fails_the_relay);
    tcase_add_test(t, idle_and_total_timeouts);
    tcase_add_test(t, a_transport_end_reads_until_it_has_nothing);
    tcase_add_test(t, the_relay_ends_once_a_transport_sent_what_it_holds);
    tcase_add_test(t, the_half_close_timeout_counts_from_the_first_end);
    tcase_add_test(t, a_budget_that_refuses_fails_the_relay_and_all_is_given_back);
    tcase_add_test(t, a_filter_sees_every_read_and_lets_held_bytes_go_after_a_quiet_and_at_the_end);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
