/* common/http_internal: what the HTTP server, the clients and the utilities share, and
 * nothing else sees (not installed, not included outside common/http*.c and the HTTP
 * tests).
 *
 * Owns: the header store (names and values copied out of the input, bounded), the write
 * helper (try the socket first, copy only what is left), the per-thread read buffer,
 * token/field validation, and the counters the tests use to prove that nothing leaks.
 */
#ifndef AIRLOCK_COMMON_HTTP_INTERNAL_H
#define AIRLOCK_COMMON_HTTP_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "http.h"
#include "http_head.h"
#include "http_parser.h"

/* Size of one read from a socket (the per-thread buffer). */
#define HTTP__READ_BUF (64 * 1024)

/* ---- header store ---------------------------------------------------------------- */
/* Names and values are appended to one buffer as NUL-terminated strings; offsets are kept
 * while parsing (the buffer may move) and turned into pointers by http__hdrs_finish. The
 * parser callbacks map one to one: on_header_field -> field, on_header_field_complete ->
 * field_done, on_header_value -> value, on_header_value_complete -> value_done. */
struct http__hdrs {
    struct al_buf strs;
    struct al_http_header *v;
    size_t n, cap, max_n;
    bool in_field; /* a name is being received */
    bool in_value; /* a value is being received */
};

void http__hdrs_init(struct http__hdrs *h, size_t max_bytes, size_t max_n);
void http__hdrs_reset(struct http__hdrs *h);
void http__hdrs_free(struct http__hdrs *h);
/* -E2BIG over the caps (bytes or count), -ENOMEM. */
int http__hdrs_field(struct http__hdrs *h, const char *at, size_t len);
int http__hdrs_field_done(struct http__hdrs *h);
int http__hdrs_value(struct http__hdrs *h, const char *at, size_t len);
int http__hdrs_value_done(struct http__hdrs *h);
/* Appends a string that is not a header (method, target) and returns its offset. */
int http__hdrs_add_string(struct http__hdrs *h, const char *s, size_t len, size_t *off);
/* Offsets become pointers (call once, after the last append). */
int http__hdrs_finish(struct http__hdrs *h);

const struct al_http_header *http__find(const struct al_http_header *h, size_t n, const char *name);

/* ---- validation ------------------------------------------------------------------ */
bool http__is_token(const char *s, size_t len);
/* A header value we are willing to emit: no CR, LF or NUL (and no other controls but HT). */
bool http__is_field_value(const char *s);
/* Request-target characters: visible ASCII only. */

/* ---- target parsing (clients) ---------------------------------------------------- */
struct http__target {
    bool is_unix;
    bool tls;       /* "https://": needs a TLS provider (al_http_creq_opts.tls) */
    char path[108]; /* unix socket path */
    char host[256]; /* host name or address literal (no brackets) */
    int port;
    char hostport[300]; /* for the Host header ("host:port", "[v6]:port", "localhost") */
};
/* Parses "unix:/path", "host:port", "[v6]:port", "http://host[:port][/...]",
 * "https://host[:port][/...]" (port 443 by default). */
int http__parse_target(const char *target, struct http__target *t, char *msg, size_t msglen);

/* ---- writes ---------------------------------------------------------------------- */
struct http__wreq {
    uv_write_t req;
    void *owner;
    size_t len;
    char data[];
};
/* Where http__write writes: the stream, whether its write queue is empty (only then is
 * the socket tried first), and the queued write's callback with the owner it gets. */
struct http__wdest {
    uv_stream_t *s;
    bool queue_empty;
    void *owner;
    uv_write_cb cb;
};
/* Writes bufs to d->s: tries the socket first and copies only what it did not take into one
 * queued write (d->cb gets a struct http__wreq; it must free it). *queued = bytes queued. */
int http__write(const struct http__wdest *d, const uv_buf_t *bufs, unsigned n, size_t *queued);

/* ---- the per-thread read buffer -------------------------------------------------- */
/* One HTTP__READ_BUF buffer per thread, lent to one read at a time (a nested loop on the
 * same thread gets a heap buffer instead). */
void http__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
/* Gives the buffer back (call at the end of every read callback). */
void http__release_buf(const uv_buf_t *buf);

/* ---- input carried between reads -------------------------------------------------- */
/* What a connection has received and not parsed yet. During one frame `cur` points at the
 * bytes being parsed: straight into the per-thread read buffer when nothing was carried
 * over, or into `buf`. After the frame, http__input_save moves the rest into `buf`, since
 * the read buffer is reused by the next read of any connection. */
struct http__input {
    char *buf; /* carried bytes (owned) */
    size_t len, cap;
    char *cur; /* bytes of this frame (in buf or in the read buffer) */
    size_t cur_len;
};

/* Makes data (len > 0) this frame's input: as it is when nothing is carried, else appended
 * to what is. -ENOMEM leaves the carried bytes as they were. */
int http__input_feed(struct http__input *in, char *data, size_t len);
/* Keeps what is left of this frame in buf and ends the frame (cur = NULL). -ENOMEM when
 * it cannot, with nothing carried. */
int http__input_save(struct http__input *in);
/* Frees buf when nothing is carried (an idle connection keeps no buffer). */
void http__input_trim(struct http__input *in);

/* ---- misc ------------------------------------------------------------------------ */
/* "Mon, 30 Nov 2026 01:02:03 GMT" for now (cached per second, per thread). */
const char *http__date(void);
/* Formats {"code":status,"message":"..."} into out; returns its length. */
size_t http__error_body(char *out, size_t outlen, int status, const char *msg);

/* Sets SIGPIPE to ignored unless the application installed its own disposition. */
void http__ignore_sigpipe(void);

/* ---- tunnels (http_tunnel.c) ----------------------------------------------------- */
/* A tunnel on a duplicate of from's socket (the caller closes its own handle afterwards;
 * the socket lives on in the tunnel), with pre as its first data. */
int http__tunnel_new(uv_loop_t *loop, uv_stream_t *from, bool is_unix, const char *pre,
                     size_t pre_len, struct al_http_tunnel **out);
/* Puts t on a server's list; http__server_tunnel_closed(s) runs once its handles closed. */
void http__tunnel_attach(struct al_http_tunnel *t, struct al_http_server *s,
                         struct al_http_tunnel **list);
struct al_http_tunnel *http__tunnel_next(struct al_http_tunnel *t);
/* Fails the tunnel (its owner hears err from the loop) and closes its handles. */
void http__tunnel_kill(struct al_http_tunnel *t, int err);
void http__server_tunnel_closed(struct al_http_server *s);

/* Live objects, for tests (leak checks that also work without ASan). */
extern atomic_long http__live_reqs;
extern atomic_long http__live_conns;
extern atomic_long http__live_creqs;
extern atomic_long http__live_cconns;
extern atomic_long http__live_tunnels;

#endif
