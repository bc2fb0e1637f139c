/* common/relay: the one bidirectional relay: bytes both ways between two endpoints once a
 * connection left its protocol (TLS passthrough, raw TCP, CONNECT tunnels, HTTP upgrades).
 *
 * Owns: moving bytes between two endpoints, each a plain socket or a transport given by a
 * small interface (read, write, want, shutdown); half-close (an end of stream is passed on
 * as a shutdown of the other side's write half); back-pressure with bounded buffers (a
 * direction holds at most one buffer or one pipe of bytes in flight and does not read its
 * source until its destination took them); the idle and total timeouts; the byte counts of
 * each direction (what the audit records); the splice(2) path when both ends are plain
 * sockets; and a filter on a direction's bytes (the scrubber of an intercepted tunnel), with
 * the flush of what it holds back after a short quiet and at the end of the stream.
 *
 * It has no event loop of its own: the owner watches the two fds for what al_relay_want
 * asks, calls al_relay_run with what it saw, and arms one timer at what al_relay_time
 * says. That is how egress's workers (one epoll set per worker) and libuv owners
 * (uv_poll_t: al_http_relay, the cluster's TLS connections) drive the same code.
 */
#ifndef AIRLOCK_COMMON_RELAY_H
#define AIRLOCK_COMMON_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"

enum { AL_RELAY_READ = 1, AL_RELAY_WRITE = 2 };

/* A transport (the plaintext side of a TLS session, for instance). read and write return
 * bytes moved, -EAGAIN when they cannot now, another -errno when the transport failed; read
 * returns 0 at the end of the stream. shutdown ends the write half (0, -EAGAIN to be called
 * again once writable, -errno). want (optional) is the readiness the transport needs of its
 * own fd besides what the relay asks (a TLS record to flush), AL_RELAY_READ|WRITE. */
struct al_relay_io {
    ssize_t (*read)(void *ctx, void *buf, size_t len);
    ssize_t (*write)(void *ctx, const void *buf, size_t len);
    int (*shutdown)(void *ctx);
    int (*want)(void *ctx);
};

struct al_relay_end {
    int fd;                       /* the socket the owner watches for this end */
    const struct al_relay_io *io; /* NULL: fd is a plain socket (recv, send, splice) */
    void *ctx;                    /* io's */
};

/* Where buffers and pipes come from (optional, each function too; ctx is opts.res_ctx):
 * take refuses memory beyond a budget, pipes come from a pool. Without them: malloc and
 * pipe2. pipe_put only gets empty pipes. */
struct al_relay_res {
    bool (*take)(void *ctx, size_t n);
    void (*give)(void *ctx, size_t n);
    int (*pipe_get)(void *ctx, int fd[2]);
    void (*pipe_put)(void *ctx, int fd[2]);
};

/* A filter on one direction's bytes. feed appends to out what goes on for the len bytes
 * read and may hold some back (bytes that could begin something it must see whole); held
 * says how many it holds; flush appends them. The relay flushes after flush_ms without a
 * read in that direction (an interactive protocol must not wait for its next message) and
 * at the end of the direction's stream. feed and flush return 0 or -errno (the relay then
 * fails with it, as a read of that direction). Bytes given to al_relay_prime are not
 * filtered: they are what the owner already filtered. */
struct al_relay_filter {
    int (*feed)(void *ctx, const void *in, size_t len, struct al_buf *out);
    int (*flush)(void *ctx, struct al_buf *out);
    size_t (*held)(void *ctx);
    void *ctx;
    uint32_t flush_ms; /* 0 = 20 */
};

struct al_relay_opts {
    size_t buf_size;           /* a copying direction's buffer: default 16 KiB */
    bool splice;               /* splice(2) between plain sockets */
    size_t splice_after;       /* ... once a direction carried this much: default 64 KiB */
    uint32_t idle_timeout_ms;  /* nothing moved either way for this long: 0 = none */
    uint32_t total_timeout_ms; /* from al_relay_init: 0 = none */
    /* From the end of the first direction (its end passed on) until the relay is over: a
     * peer that died sends no end of its own. 0 = none */
    uint32_t half_close_timeout_ms;
    const struct al_relay_res *res;
    void *res_ctx;
    const struct al_relay_filter *filter[2]; /* per direction (flow[i]); NULL: none. A
                                                 filtered direction copies, never splices */
    /* A socket end is first read when the owner reports it readable, not at the start: for
     * an owner that read each side's first bytes itself (primed), a read at the start of a
     * new connection finds nothing (EAGAIN). Primed bytes still go out at once. */
    bool read_when_ready;
};

/* One direction: flow[i] carries end[i] -> end[1 - i]. */
struct al_relay_flow {
    int pipe[2]; /* splice: bytes in flight live here (while has_pipe) */
    size_t in_pipe;
    bool has_pipe;
    char *buf; /* copy (and primed bytes): read, not yet written */
    size_t off, len, cap;
    struct al_buf out; /* a filter's output, not yet written (from out_off) */
    size_t out_off;
    size_t out_taken; /* ... what of it is counted against res->take */
    uint64_t t_in;    /* al_now_ns of the last read: a filter's quiet starts there */
    bool flushed;     /* the filter's end was flushed */
    uint64_t bytes;   /* delivered to the destination */
    bool eof;         /* the source ended its stream */
    bool wait_ready;  /* read_when_ready: the owner has not reported the source readable yet */
    bool done;        /* ... and everything was delivered and the end passed on */
};

struct al_relay {
    struct al_relay_end end[2];
    struct al_relay_flow flow[2];
    struct al_relay_opts o;
    uint64_t t_start, t_last; /* al_now_ns: init, last byte moved */
    uint64_t t_half;          /* ... the first direction done (0: none yet) */
    int fail_end;             /* after a failure: the end whose read or write failed */
    int fail_op;              /* ... AL_RELAY_READ or AL_RELAY_WRITE */
};

/* Sets r up (nothing is read or written yet). Owns neither fd. */
void al_relay_init(struct al_relay *r, const struct al_relay_end *a, const struct al_relay_end *b,
                   const struct al_relay_opts *o);
/* Bytes to deliver first in direction dir (0: a -> b), copied, before any read of that
 * direction (a ClientHello, a 101 head, bytes that came behind a request): 0, -ENOMEM, or
 * -ENOBUFS when res->take refused. */
int al_relay_prime(struct al_relay *r, int dir, const void *data, size_t len);
/* Moves what it can after the owner saw events (AL_RELAY_READ|WRITE) on end's fd (end -1:
 * try both ends, as at the start). Returns 1 while bytes may still flow, 0 once both
 * directions ended cleanly and no transport still wants to write bytes of its own (its
 * want: ciphertext it took but could not send yet) (the owner closes both ends now: the
 * relay skipped the last shutdown, which the close sends), or the -errno of a failure
 * (fail_end, fail_op say where; the owner resets both). */
int al_relay_run(struct al_relay *r, int end, int events);
/* What to watch on end's fd now. */
int al_relay_want(const struct al_relay *r, int end);
/* -ETIMEDOUT when a timeout passed at now_ns; else 0 and *next_ms the ms until the next one
 * could (0 when there is no timeout). A filter's flush counts too (at least 1 ms once due):
 * when that timer fires the owner calls al_relay_run(r, -1, 0), which flushes. */
int al_relay_time(const struct al_relay *r, uint64_t now_ns, uint64_t *next_ms);
/* Bytes delivered in direction dir so far. */
uint64_t al_relay_bytes(const struct al_relay *r, int dir);
/* Releases buffers and pipes (not the ends). Idempotent; safe on a zeroed struct. */
void al_relay_free(struct al_relay *r);

#endif
