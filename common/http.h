/* common/http: the one HTTP/1.1 implementation of airlock (server and client), on libuv
 * and llhttp, used for the E2B API (airlockd), the agent's envd endpoints, and every
 * internal daemon API (HTTP+JSON over unix sockets, debuggable with curl --unix-socket).
 *
 * Owns: connections, parsing (llhttp, strict: no lenient flags), keep-alive, decoding of
 * chunked request bodies, streamed responses (chunked, flushed per write), limits (header
 * bytes -> 431, body bytes -> 413, header/idle/body deadlines -> 408 or close, connection
 * cap -> 503), peer identity (SO_PEERCRED on unix sockets, address on TCP).
 * Does not own: routing (handlers switch on method/path), authentication, JSON schemas.
 *
 * Threading: a server or client belongs to one uv_loop_t and is used from that loop's
 * thread only. The blocking client (al_http_call*) is for CLIs and setup code.
 *
 * Lifetime of a request: the server allocates it and calls on_request once the headers are
 * complete. The handler then either answers at once (the body, if any, is discarded up to
 * max_body_bytes; beyond that the connection is closed after the answer), or claims the body
 * with al_http_req_read_body (buffered, capped) or al_http_req_stream_body (chunks, with
 * flow control), and answers later, from any callback on the same loop. The request stays
 * valid until the response has ended (al_http_resp_end) or until the on_close callback the
 * handler registered has returned (the peer went away); after either, do not touch it.
 * Requests on one connection are served one at a time, in order (pipelining safe).
 */
#ifndef AIRLOCK_COMMON_HTTP_H
#define AIRLOCK_COMMON_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "buf.h"
#include "error.h"

struct al_http_server;
struct al_http_req;

struct al_http_header {
    const char *name;
    const char *value;
};

struct al_http_limits {
    size_t max_header_bytes;     /* request line + headers; default 16 KiB; beyond: 431 */
    size_t max_body_bytes;       /* buffered or discarded bodies; default 1 MiB; beyond: 413 */
    uint32_t header_timeout_ms;  /* to receive a complete header block; default 10 s; 408 */
    uint32_t idle_timeout_ms;    /* keep-alive idle before close; default 60 s */
    uint32_t body_timeout_ms;    /* longest gap between body bytes; default 30 s; 408 */
    uint32_t max_connections;    /* default 1024; beyond: 503 and close */
    /* Added after the first contract (zero = default, like the others): */
    size_t max_headers;          /* header fields per request; default 100; beyond: 431 */
    uint32_t write_timeout_ms;   /* a peer that takes nothing of a pending response for
                                    this long is disconnected; default 60 s */
};

/* Who is on the other end. For unix sockets uid/gid/pid come from SO_PEERCRED and are
 * trustworthy; for TCP, addr is the peer's address. */
struct al_http_peer {
    bool is_unix;
    uid_t uid;
    gid_t gid;
    pid_t pid;
    struct sockaddr_storage addr;
    socklen_t addrlen;
};

typedef void (*al_http_handler_fn)(struct al_http_req *req, void *ctx);

struct al_http_server_opts {
    struct al_http_limits limits;  /* zero fields take the defaults above */
    al_http_handler_fn on_request;
    void *ctx;
    const char *server_name;       /* "Server:" header; NULL for none */
};

/* The request as parsed. Strings are NUL-terminated and owned by the request. */
struct al_http_req {
    const char *method;      /* "GET", ... */
    const char *target;      /* raw request-target as sent ("/a/b?x=1" or an absolute URI) */
    const char *path;        /* target up to '?', not percent-decoded */
    const char *query;       /* after '?', raw; "" when absent */
    int http_minor;          /* 0 or 1 (HTTP/1.x) */
    const struct al_http_header *headers;
    size_t n_headers;
    int64_t content_length;  /* -1 when absent */
    bool chunked;            /* Transfer-Encoding: chunked */
    struct al_buf body;      /* filled by al_http_req_read_body */
    struct al_http_peer peer;
    uv_loop_t *loop;
    struct al_http_server *server;
    void *user;              /* free for the handler */
};

/* ---- server ---------------------------------------------------------------------- */
int al_http_server_new(uv_loop_t *loop, const struct al_http_server_opts *opts,
                       struct al_http_server **out);
/* host may be "127.0.0.1", "::1", "0.0.0.0"; port 0 picks one (see al_http_server_port). */
int al_http_server_listen_tcp(struct al_http_server *s, const char *host, int port,
                              struct al_error *err);
/* Removes a stale socket file first (only if it is a socket), then binds with mode. */
int al_http_server_listen_unix(struct al_http_server *s, const char *path, mode_t mode,
                               struct al_error *err);
/* Serves an already-listening fd (socket activation, handed-down channels). */
int al_http_server_listen_fd(struct al_http_server *s, int fd, struct al_error *err);
/* Serves one already-connected stream socket (e.g. one end of a socketpair). */
int al_http_server_serve_fd(struct al_http_server *s, int fd, struct al_error *err);
int al_http_server_port(const struct al_http_server *s);  /* first TCP listener's port */
size_t al_http_server_connections(const struct al_http_server *s);
/* Stops listening, closes every connection (requests in flight get on_close), then calls
 * done(arg) once all handles are closed; the server is freed after done returns. */
void al_http_server_close(struct al_http_server *s, void (*done)(void *arg), void *arg);

/* ---- request --------------------------------------------------------------------- */
/* Case-insensitive lookup of the first header with this name; NULL if absent. */
const char *al_http_req_header(const struct al_http_req *req, const char *name);
/* How many times a header occurs (duplicates matter for security checks). */
size_t al_http_req_header_count(const struct al_http_req *req, const char *name);
/* Percent-decoded value of a query parameter into out; -ENOENT if absent, -E2BIG if it
 * does not fit, -EINVAL for bad escapes. '+' decodes to a space. */
int al_http_query_get(const char *query, const char *name, char *out, size_t outlen);
/* Percent-decodes in place; -EINVAL on bad escapes or an encoded NUL. */
int al_http_percent_decode(char *s, bool plus_is_space);

/* Buffers the whole body (capped by max, 0 = the server limit) and calls done when it is
 * complete (err = 0) or failed (err < 0; -E2BIG means the cap: the server has already
 * answered 413). */
typedef void (*al_http_body_done_fn)(struct al_http_req *req, int err);
int al_http_req_read_body(struct al_http_req *req, size_t max, al_http_body_done_fn done);

/* Streams the body: on_data for each decoded chunk, on_end once (err = 0 at the end of the
 * body, < 0 on a broken body or connection). Returning non-zero from on_data pauses
 * reading until al_http_req_resume_body. */
typedef int (*al_http_body_data_fn)(struct al_http_req *req, const char *data, size_t len);
typedef void (*al_http_body_end_fn)(struct al_http_req *req, int err);
int al_http_req_stream_body(struct al_http_req *req, al_http_body_data_fn on_data,
                            al_http_body_end_fn on_end);
void al_http_req_resume_body(struct al_http_req *req);

/* Called if the connection closes before the response has ended. After it returns the
 * request is freed. */
void al_http_req_on_close(struct al_http_req *req, void (*cb)(struct al_http_req *req));

/* ---- response -------------------------------------------------------------------- */
/* content_length >= 0 sends Content-Length; -1 sends Transfer-Encoding: chunked. Date,
 * Server and Connection are added by the server. */
int al_http_resp_start(struct al_http_req *req, int status, const struct al_http_header *hdrs,
                       size_t n_hdrs, int64_t content_length);
/* Queues data (copied; one chunk when chunked) and starts writing at once. */
int al_http_resp_write(struct al_http_req *req, const void *data, size_t len);
/* Bytes queued but not yet written: the flow-control signal for streaming. */
size_t al_http_resp_queued(const struct al_http_req *req);
/* Called once the queue drains below low_water bytes (each registration fires once). */
void al_http_resp_on_drain(struct al_http_req *req, size_t low_water,
                           void (*cb)(struct al_http_req *req));
/* Ends the response (terminating chunk when chunked). The request is released when the
 * last byte has been written. */
int al_http_resp_end(struct al_http_req *req);

/* One-shot answers (start + write + end). */
int al_http_reply(struct al_http_req *req, int status, const char *content_type,
                  const void *body, size_t len);
/* Steals a reference to body. */
int al_http_reply_json(struct al_http_req *req, int status, json_t *body);
/* {"code": status, "message": "..."}: the E2B error shape, also used by internal APIs. */
int al_http_reply_error(struct al_http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *al_http_status_text(int status);

/* ---- asynchronous client --------------------------------------------------------- */
/* target: "unix:/path/to.sock", "host:port", "[v6]:port" or "http://host:port". */
struct al_http_creq;
struct al_http_pool;
struct al_http_creq_opts {
    const char *target;
    const char *method;
    const char *path;                   /* request-target, e.g. "/v1/sandboxes?x=1" */
    const struct al_http_header *headers;
    size_t n_headers;
    const void *body;                   /* whole body, or NULL */
    size_t body_len;
    bool stream_body;                   /* body via al_http_creq_write/end instead */
    uint32_t timeout_ms;                /* connect + response headers; 0 = 30 s */
    size_t max_header_bytes;            /* response headers; 0 = 64 KiB */
    /* status + headers arrived; return non-zero to abort. */
    int (*on_response)(struct al_http_creq *c, int status, const struct al_http_header *h,
                       size_t n, void *arg);
    /* a piece of the (de-chunked) response body; return non-zero to pause. */
    int (*on_data)(struct al_http_creq *c, const char *data, size_t len, void *arg);
    /* exactly once: err = 0 when the response is complete, < 0 otherwise. After it
     * returns the creq is freed. */
    void (*on_done)(struct al_http_creq *c, int err, void *arg);
    void *arg;
    /* Added: keep-alive connections are reused through this pool (NULL: one connection
     * per request, sent with "Connection: close"). */
    struct al_http_pool *pool;
};
int al_http_creq_start(uv_loop_t *loop, const struct al_http_creq_opts *opts,
                       struct al_http_creq **out);
int al_http_creq_write(struct al_http_creq *c, const void *data, size_t len);
int al_http_creq_end(struct al_http_creq *c);
size_t al_http_creq_queued(const struct al_http_creq *c);
void al_http_creq_resume(struct al_http_creq *c);
/* Aborts; on_done is called with -ECANCELED. */
void al_http_creq_cancel(struct al_http_creq *c);
/* Added: calls cb once the queued request body drops to low_water bytes or less (each
 * registration fires once, from the loop, never from inside this call). */
void al_http_creq_on_drain(struct al_http_creq *c, size_t low_water,
                           void (*cb)(struct al_http_creq *c, void *arg));
/* Added: what went wrong, for logs and error replies ("connect unix:/x.sock: No such file
 * or directory", "no response headers within 30000 ms", ...); "" when nothing did. Valid
 * inside on_done. */
const char *al_http_creq_strerror(const struct al_http_creq *c);

/* Added: a per-loop pool of idle keep-alive connections, keyed by target. Bounded (total
 * and per target), idle connections expire, a connection the server closed is dropped at
 * once, and a request that fails on a reused connection before any response byte is
 * retried once on a new one if it is idempotent (GET, HEAD, PUT, DELETE, OPTIONS) and its
 * body was given whole. Idle connections do not keep uv_run alive. Close the pool before
 * uv_loop_close (then run the loop once more so the handles finish closing). */
struct al_http_pool_opts {
    size_t max_idle;            /* idle connections in all; default 32 */
    size_t max_idle_per_target; /* default 8 */
    uint32_t idle_timeout_ms;   /* default 15 s (keep it below the servers' idle timeout) */
};
int al_http_pool_new(uv_loop_t *loop, const struct al_http_pool_opts *opts,
                     struct al_http_pool **out);
size_t al_http_pool_idle(const struct al_http_pool *p);
/* Closes the idle connections; requests in flight finish normally and their connections
 * are closed instead of pooled; the pool is freed once the last of them is done. */
void al_http_pool_close(struct al_http_pool *p);

/* ---- blocking client (CLIs, setup code, tests) -------------------------------------- */
struct al_http_resp {
    int status;
    struct al_buf body;
    struct al_http_header *headers;  /* owned; freed by al_http_resp_free */
    size_t n_headers;
};
int al_http_call(const char *target, const char *method, const char *path,
                 const struct al_http_header *hdrs, size_t n_hdrs, const void *body,
                 size_t body_len, uint32_t timeout_ms, size_t max_body,
                 struct al_http_resp *out, struct al_error *err);
/* JSON in, JSON out; body may be NULL. *out is NULL for an empty response body. */
int al_http_call_json(const char *target, const char *method, const char *path, json_t *body,
                      uint32_t timeout_ms, int *status, json_t **out, struct al_error *err);
const char *al_http_resp_header(const struct al_http_resp *r, const char *name);
void al_http_resp_free(struct al_http_resp *r);

#endif
