/* common/http: the one HTTP/1.1 implementation of airlock (server and client), on libuv
 * and llhttp, used for the E2B API (airlockd), the agent's envd endpoints, and every
 * internal daemon API (HTTP+JSON over unix sockets, debuggable with curl --unix-socket).
 *
 * Owns: connections, parsing (llhttp, strict: no lenient flags), keep-alive, decoding of
 * chunked request bodies, streamed responses (chunked, flushed per write), limits (header
 * bytes -> 431, body bytes -> 413, header/idle/body deadlines -> 408 or close, connection
 * cap -> 503), peer identity (SO_PEERCRED on unix sockets, address on TCP).
 * Does not own: routing (handlers switch on method/path), authentication, JSON schemas.
 * Implementation: http_server.c, http_client.c (async client + pool), http_sync.c
 * (blocking client), http_util.c (decoding, validation, helpers), http_tunnel.c (raw
 * connections after a 101 Switching Protocols, and relaying two of them).
 *
 * Threading: a server, client request or pool belongs to one uv_loop_t and is used from
 * that loop's thread only. The blocking client (al_http_call*) runs a private loop per
 * call (CLIs and setup code). Creating a server, pool or request sets SIGPIPE to ignored
 * if it still has its default disposition (a vanished peer must be EPIPE, not death).
 *
 * What the server refuses before any handler runs (answered with the E2B error shape
 * {"code":N,"message":"..."} and "Connection: close"): malformed requests as llhttp sees
 * them (CL+TE, duplicate Content-Length, bad chunk sizes, invalid methods, NUL/CR/LF in
 * fields, bare LF or CR; common/http_parser.h) plus what llhttp lets through: obs-fold,
 * request-targets with controls, spaces or non-ASCII bytes, HTTP/1.1 without exactly one Host, Transfer-Encoding not ending in chunked or in
 * an HTTP/1.0 request -> 400; header block over max_header_bytes or more than max_headers
 * fields -> 431; HTTP versions other than 1.0/1.1 (and the HTTP/2 preface) -> 505;
 * CONNECT -> 405; an Expect other than 100-continue -> 417. Upgrade requests are served as
 * plain requests and the connection is closed after the answer, unless the handler takes
 * the connection over with al_http_req_upgrade (101 Switching Protocols).
 *
 * Lifetime of a request: the server allocates it and calls on_request once the headers are
 * complete. The handler then either answers at once (the body, if any, is discarded up to
 * max_body_bytes; beyond that the connection is closed after the answer), or claims the body
 * with al_http_req_read_body (buffered, capped) or al_http_req_stream_body (chunks, with
 * flow control), and answers later, from any callback on the same loop. The request stays
 * valid until the response has ended (al_http_resp_end, al_http_reply*) or until the
 * on_close callback the handler registered has returned (the peer went away); after
 * either, do not touch it. Precisely, when the connection goes away (or the server
 * closes) before the response has ended:
 *   - a claimed body that is still arriving reports it through its callback (done or
 *     on_end with err < 0), and the request is released when that callback returns;
 *   - otherwise on_close runs, and the request is released when it returns;
 *   - without an on_close callback, the request stays allocated, detached, until the
 *     handler ends it: every al_http_resp_* call on it fails with -EPIPE, and
 *     al_http_resp_end / al_http_reply* still release it (a pending on_drain callback is
 *     called at once so that a handler waiting to write notices). So a handler that always
 *     eventually ends its response never touches freed memory, with or without on_close.
 * A body callback with err < 0 is always final in the same way: the server has answered
 * for the request if no response had started (413, 408, 400) or closed the connection if
 * one had; response calls made inside that callback fail harmlessly.
 * The server never calls a handler's callback from inside an al_http_* call; work an API
 * call triggers (delivering buffered body, the next pipelined request) happens from the
 * loop. The exceptions are on_close/on_drain registered on a detached request (above).
 * Requests on one connection are served one at a time, in order (pipelining safe): the
 * next one is parsed only after the previous response has been written.
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
#include "http_head.h"

struct al_http_server;
struct al_http_req;

struct al_http_header {
    const char *name;
    const char *value;
};

struct al_http_limits {
    size_t max_header_bytes;    /* request line + headers; default 16 KiB; beyond: 431 */
    size_t max_body_bytes;      /* buffered or discarded bodies; default 1 MiB; beyond: 413 */
    uint32_t header_timeout_ms; /* to receive a complete header block, counted from the
                                    accept (first request) or from the request's first
                                    byte (later ones); default 10 s; 408 (a connection
                                    that sent nothing is just closed) */
    uint32_t idle_timeout_ms;   /* keep-alive idle before close; default 60 s */
    uint32_t body_timeout_ms;   /* longest gap between body bytes; default 30 s; 408 */
    uint32_t max_connections;   /* default 1024; beyond: 503 and close */
    /* Added after the first contract (zero = default, like the others): */
    size_t max_headers;        /* header fields per request; default 100; beyond: 431 */
    uint32_t write_timeout_ms; /* a peer that takes nothing of a pending response for
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
    /* Added: the connection came from a TLS front that terminated it in front of this server
     * (al_http_server_serve_fd_peer): tls is true, addr is the TLS client's, and the client
     * certificate it saw is described (verified against the front's roots and usage, its
     * common name, or why not). */
    bool tls;
    bool tls_verified;
    char tls_name[64];
    char tls_why[200];
};

typedef void (*al_http_handler_fn)(struct al_http_req *req, void *ctx);

struct al_http_server_opts {
    struct al_http_limits limits; /* zero fields take the defaults above */
    al_http_handler_fn on_request;
    void *ctx;
    const char *server_name; /* "Server:" header; NULL for none */
};

/* The request as parsed. Strings are NUL-terminated and owned by the request. */
struct al_http_req {
    const char *method; /* "GET", ... */
    const char *target; /* raw request-target as sent ("/a/b?x=1" or an absolute URI) */
    const char *path;   /* target up to '?', not percent-decoded */
    const char *query;  /* after '?', raw; "" when absent */
    int http_minor;     /* 0 or 1 (HTTP/1.x) */
    const struct al_http_header *headers;
    size_t n_headers;
    int64_t content_length; /* -1 when absent */
    bool chunked;           /* Transfer-Encoding: chunked */
    struct al_buf body;     /* filled by al_http_req_read_body */
    struct al_http_peer peer;
    uv_loop_t *loop;
    struct al_http_server *server;
    void *user; /* free for the handler */
    /* Added: the request asks to switch protocols (HTTP/1.1 with an Upgrade header and
     * "upgrade" in Connection); see al_http_req_upgrade. */
    bool upgrade;
};

/* ---- server ---------------------------------------------------------------------- */
int al_http_server_new(uv_loop_t *loop, const struct al_http_server_opts *opts,
                       struct al_http_server **out);
/* host may be "127.0.0.1", "::1", "0.0.0.0"; port 0 picks one (see al_http_server_port). */
int al_http_server_listen_tcp(struct al_http_server *s, const char *host, int port,
                              struct al_error *err);
/* Removes a stale socket file first (only if it is a socket and nobody listens on it:
 * -EEXIST for another kind of file, -EADDRINUSE for a live socket), then binds and sets
 * mode before listening (no connection is possible under the umask's mode). */
int al_http_server_listen_unix(struct al_http_server *s, const char *path, mode_t mode,
                               struct al_error *err);
/* Serves an already-listening fd (socket activation, handed-down channels). */
int al_http_server_listen_fd(struct al_http_server *s, int fd, struct al_error *err);
/* Serves one already-connected stream socket (e.g. one end of a socketpair). */
int al_http_server_serve_fd(struct al_http_server *s, int fd, struct al_error *err);
/* Added: the same, for a stream socket whose other end is a TLS front in this process (one end
 * of a socketpair): the requests' peer is *peer (copied; its is_unix is false), not the
 * socket's own credentials, which would be this process's. */
int al_http_server_serve_fd_peer(struct al_http_server *s, int fd, const struct al_http_peer *peer,
                                 struct al_error *err);
int al_http_server_port(const struct al_http_server *s); /* first TCP listener's port */
size_t al_http_server_connections(const struct al_http_server *s);
/* Stops listening (removing the unix socket files it created), closes every connection
 * (requests in flight are told as if the peer went away), then calls done(arg) once all
 * handles are closed; the server is freed after done returns. Safe from a handler. */
void al_http_server_close(struct al_http_server *s, void (*done)(void *arg), void *arg);

/* ---- request --------------------------------------------------------------------- */
/* Case-insensitive lookup of the first header with this name; NULL if absent. */
const char *al_http_req_header(const struct al_http_req *req, const char *name);
/* How many times a header occurs (duplicates matter for security checks). */
size_t al_http_req_header_count(const struct al_http_req *req, const char *name);
/* Percent-decoded value of a query parameter into out; -ENOENT if absent, -E2BIG if it
 * does not fit, -EINVAL for bad escapes or an encoded NUL (common/percent.h). '+' decodes
 * to a space. */
int al_http_query_get(const char *query, const char *name, char *out, size_t outlen);
/* Every occurrence of a query parameter, in order (`types=a&types=b`): each value is
 * decoded into out and passed to fn; fn returns 0 to go on, > 0 to stop (the result is
 * then 0), < 0 to stop with that error. fn NULL stops at the first. -ENOENT if there is
 * none; -E2BIG / -EINVAL as above. */
int al_http_query_each(const char *query, const char *name, char *out, size_t outlen,
                       int (*fn)(const char *value, void *arg), void *arg);

/* Buffers the whole body (capped by max, 0 = the server limit) into req->body and calls
 * done when it is complete (err = 0; body.data is "" rather than NULL when empty) or
 * failed (err < 0, final, see above: -E2BIG = over the cap, the server answered 413 (at
 * once if Content-Length says so); -ETIMEDOUT = body_timeout_ms without a byte, 408;
 * -EBADMSG = malformed chunked body, 400; other = the connection is gone). Sends "100
 * Continue" first when the client asked for it. done always runs from the loop. Returns
 * -EALREADY if the body was already claimed or the response already ended, -EPIPE if the
 * peer is gone. */
typedef void (*al_http_body_done_fn)(struct al_http_req *req, int err);
int al_http_req_read_body(struct al_http_req *req, size_t max, al_http_body_done_fn done);

/* Streams the body, not capped (the handler decides): on_data for each decoded piece (data
 * is valid during the call only), on_end once (err = 0 at the end of the body, < 0 as for
 * read_body, final). Returning non-zero from on_data stops reading the socket until
 * al_http_req_resume_body (at most one read's worth, 64 KiB, is buffered meanwhile); no
 * callback, on_end included, runs while paused. A resume called from inside on_data
 * cancels the pause that on_data then returns. Ending the response stops the callbacks:
 * the rest of the body is discarded (up to max_body_bytes, else the connection closes). */
typedef int (*al_http_body_data_fn)(struct al_http_req *req, const char *data, size_t len);
typedef void (*al_http_body_end_fn)(struct al_http_req *req, int err);
int al_http_req_stream_body(struct al_http_req *req, al_http_body_data_fn on_data,
                            al_http_body_end_fn on_end);
void al_http_req_resume_body(struct al_http_req *req);

/* Called if the connection closes before the response has ended. After it returns the
 * request is freed. On a request that is already detached, cb runs at once. */
void al_http_req_on_close(struct al_http_req *req, void (*cb)(struct al_http_req *req));

/* ---- response -------------------------------------------------------------------- */
/* content_length >= 0 sends Content-Length; -1 sends Transfer-Encoding: chunked (to an
 * HTTP/1.0 client: no framing, the connection closes after the body). Date, Server and
 * Connection are added by the server; Content-Length, Transfer-Encoding, Connection,
 * Keep-Alive and Date in hdrs are ignored (a Server in hdrs replaces ours). Header names
 * must be tokens and values free of controls (-EINVAL otherwise). status is 200..599;
 * HEAD, 204 and 304 responses carry no body (writes are accepted and dropped). The head
 * is written at once. */
int al_http_resp_start(struct al_http_req *req, int status, const struct al_http_header *hdrs,
                       size_t n_hdrs, int64_t content_length);
/* Queues data (copied; one chunk when chunked) and starts writing at once (TCP_NODELAY:
 * the peer sees it without delay). More than the declared Content-Length is -EINVAL and
 * nothing is sent; -EPIPE once the peer is gone. */
int al_http_resp_write(struct al_http_req *req, const void *data, size_t len);
/* Bytes queued but not yet written: the flow-control signal for streaming. */
size_t al_http_resp_queued(const struct al_http_req *req);
/* Called once the queue drains to low_water bytes or less (each registration fires once,
 * from the loop). A peer that takes nothing for write_timeout_ms is disconnected. */
void al_http_resp_on_drain(struct al_http_req *req, size_t low_water,
                           void (*cb)(struct al_http_req *req));
/* Ends the response (terminating chunk when chunked) and releases the request (the
 * connection goes on once the last byte is written). Returns -EPROTO if fewer bytes than
 * the declared Content-Length were written (the connection is then closed), -EINVAL if no
 * response was started (the server answers 500), -EPIPE if the peer is gone; the request
 * is released in every case. */
int al_http_resp_end(struct al_http_req *req);

/* Added: ends a response so that the client sees it broken, never complete (an upstream
 * died in the middle of a relayed reply: a cut-off download must fail, not pass as a
 * shorter file). What was already written is still sent, then the connection is closed:
 * without the terminating chunk (chunked), short of the Content-Length, or, where nothing
 * but the close delimits the body (HTTP/1.0 client) or no response had started, with a TCP
 * reset (over a unix socket only the close is possible: a close-delimited body there cannot
 * be told from a complete one). The rest of a request body is not read. Releases the
 * request in every case, like al_http_resp_end. Returns 0; -EALREADY if the response was
 * already complete (every byte of its Content-Length, or a bodiless status or HEAD: the
 * connection is still closed); -EPIPE if the peer was already gone. */
int al_http_resp_abort(struct al_http_req *req);

/* One-shot answers (start + write + end, in one write). They release the request in
 * every case, like al_http_resp_end; -EALREADY if a response was already started. */
int al_http_reply(struct al_http_req *req, int status, const char *content_type, const void *body,
                  size_t len);
/* Steals a reference to body. */
int al_http_reply_json(struct al_http_req *req, int status, json_t *body);
/* {"code": status, "message": "..."}: the E2B error shape, also used by internal APIs. */
int al_http_reply_error(struct al_http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *al_http_status_text(int status);

/* ---- tunnels: raw connections after 101 Switching Protocols ----------------------- */
/* A tunnel is the byte stream of a connection that left HTTP (WebSocket and other
 * upgrades): the server side comes from al_http_req_upgrade, the client side from a creq's
 * on_upgrade. Its owner reads (on_data, with pause/resume), writes (copied, with a queue
 * and on_drain for flow control), half-closes (shutdown) and closes it; al_http_relay joins
 * two of them. Callbacks run from the loop only, never inside an al_http_tunnel_* call.
 * A tunnel made by a server is closed by al_http_server_close like its other connections
 * (on_end reports -ESHUTDOWN); the owner still calls al_http_tunnel_close, which is what
 * frees it. */
struct al_http_tunnel;
/* data is valid during the call; return non-zero to stop reading until
 * al_http_tunnel_resume (at most one read's worth is held meanwhile). */
typedef int (*al_http_tunnel_data_fn)(struct al_http_tunnel *t, const char *data, size_t len,
                                      void *arg);
/* Reading ended: err = 0 at the peer's end of stream (it may still read what we write),
 * < 0 when the connection failed (nothing more passes either way). A failure after a clean
 * end of stream is reported once more, with its error; nothing follows an error. */
typedef void (*al_http_tunnel_end_fn)(struct al_http_tunnel *t, int err, void *arg);

/* Takes the connection over after answering "101 Switching Protocols" with hdrs (which
 * must hold the Upgrade header naming the protocol; "Connection: Upgrade" is added; the
 * framing headers in hdrs are ignored). On success the request is released (do not touch
 * it again) and *out is the connection as a tunnel, the 101 already queued on it and any
 * bytes the client sent after its request as its first data. Errors leave the request as
 * it was, for an ordinary answer: -EPROTO (the request does not ask for an upgrade, see
 * req->upgrade), -ENOTSUP (it has a body), -EINVAL (no Upgrade in hdrs, or an invalid
 * header), -EALREADY (a response started or the body was claimed), -EPIPE (the peer is
 * gone; the request is released then), -EMFILE/-ENOMEM. */
int al_http_req_upgrade(struct al_http_req *req, const struct al_http_header *hdrs, size_t n,
                        struct al_http_tunnel **out);

/* Starts reading (the first callback comes from the loop). -EALREADY if started. */
int al_http_tunnel_start(struct al_http_tunnel *t, al_http_tunnel_data_fn on_data,
                         al_http_tunnel_end_fn on_end, void *arg);
void al_http_tunnel_resume(struct al_http_tunnel *t);
/* Queues data (copied); -EPIPE once the connection failed or after shutdown/close. */
int al_http_tunnel_write(struct al_http_tunnel *t, const void *data, size_t len);
size_t al_http_tunnel_queued(const struct al_http_tunnel *t);
/* cb once the write queue is at low_water bytes or less (once per registration). */
void al_http_tunnel_on_drain(struct al_http_tunnel *t, size_t low_water,
                             void (*cb)(struct al_http_tunnel *t, void *arg));
/* Half-close: end of stream to the peer once the queue is written; done (may be NULL)
 * gets 0 or the error. Reading goes on. */
int al_http_tunnel_shutdown(struct al_http_tunnel *t,
                            void (*done)(struct al_http_tunnel *t, int err, void *arg));
/* Closes (pending writes are dropped) and releases the tunnel: no callback of it runs
 * afterwards. Safe from inside its own callbacks. */
void al_http_tunnel_close(struct al_http_tunnel *t);

/* Relays two tunnels (common/relay.h, on their sockets once what each had queued is
 * written) until both directions ended (each end of stream is passed on as a half-close),
 * one failed, or nothing passed either way for idle_timeout_ms; then closes both and calls
 * done (from the loop) with 0, the error, or -ETIMEDOUT, and the bytes that went each way.
 * Flow control: a direction holds at most high_water bytes read and not yet written (or
 * a pipe's worth once it splices) and does not read its side meanwhile. The relay owns
 * both tunnels from the call on, also when it fails (returns < 0 without calling done, both
 * closed). */
struct al_http_relay_opts {
    uint32_t idle_timeout_ms; /* default 1 h */
    size_t high_water;        /* default 16 KiB */
};
typedef void (*al_http_relay_done_fn)(int err, uint64_t a_to_b, uint64_t b_to_a, void *arg);
int al_http_relay(struct al_http_tunnel *a, struct al_http_tunnel *b,
                  const struct al_http_relay_opts *opts, al_http_relay_done_fn done, void *arg);

/* ---- proxy helpers ------------------------------------------------------------------ */
/* What a relay forwards of a message, and the comma-separated lists it reads: http_head.h. */

/* Added: the traffic access token of a sandbox (E2B's trafficAccessToken, sent as
 * E2B-Traffic-Access-Token): 64 hex digits derived one way from its envd access token, so
 * the agent and airlockd both compute it and knowing it grants traffic to the sandbox's
 * ports but not the envd API. out must hold AL_HTTP_TRAFFIC_TOKEN_LEN + 1 bytes. */
#define AL_HTTP_TRAFFIC_TOKEN_LEN 64
void al_http_traffic_token(const char *access_token, size_t len,
                           char out[AL_HTTP_TRAFFIC_TOKEN_LEN + 1]);

/* ---- asynchronous client --------------------------------------------------------- */
/* target: "unix:/path/to.sock", "host:port", "[v6]:port" or "http://host:port" (a path
 * after it is ignored; host names other than localhost are resolved with getaddrinfo on
 * libuv's thread pool; https is refused). The request carries Host (the target's, unless
 * headers has one), Content-Length (whole body) or Transfer-Encoding: chunked
 * (stream_body), and "Connection: keep-alive" with a pool or "close" without; these
 * framing headers in opts->headers are ignored. Everything in opts is copied.
 * al_http_creq_start returns < 0 (and never calls on_done) for invalid options; any later
 * failure, a failed connect included, comes through on_done from the loop, with
 * al_http_creq_strerror saying what happened. Callbacks never run inside an
 * al_http_creq_* call, except on_done inside al_http_creq_cancel when cancel is called
 * from outside this request's own callbacks. Response bodies of 1xx are skipped; HEAD,
 * 204 and 304 responses have no body; a close-delimited body ends at EOF. */
struct al_http_creq;
struct al_http_pool;
struct al_http_creq_opts {
    const char *target;
    const char *method;
    const char *path; /* request-target, e.g. "/v1/sandboxes?x=1" */
    const struct al_http_header *headers;
    size_t n_headers;
    const void *body; /* whole body, or NULL */
    size_t body_len;
    bool stream_body;        /* body via al_http_creq_write/end instead */
    uint32_t timeout_ms;     /* connect + response headers; 0 = 30 s. With
                                           stream_body it covers the connect, then runs
                                           again from al_http_creq_end */
    size_t max_header_bytes; /* response headers; 0 = 64 KiB */
    /* status + headers arrived; return non-zero to abort. */
    int (*on_response)(struct al_http_creq *c, int status, const struct al_http_header *h, size_t n,
                       void *arg);
    /* a piece of the (de-chunked) response body, valid during the call; return non-zero
     * to pause (stop reading) until al_http_creq_resume (a resume called from inside
     * on_data cancels that pause). */
    int (*on_data)(struct al_http_creq *c, const char *data, size_t len, void *arg);
    /* exactly once: err = 0 when the response is complete, < 0 otherwise. After it
     * returns the creq is freed. */
    void (*on_done)(struct al_http_creq *c, int err, void *arg);
    void *arg;
    /* Added: keep-alive connections are reused through this pool (NULL: one connection
     * per request, sent with "Connection: close"). */
    struct al_http_pool *pool;
    /* Added: with stream_body, a body of exactly this many bytes, sent with Content-Length
     * instead of chunked (for servers that do not take chunked bodies): al_http_creq_write
     * past it is -EINVAL, al_http_creq_end short of it fails the request (-EPROTO).
     * 0 = chunked. */
    int64_t stream_length;
    /* Added: asks the server to switch protocols: the request carries "Upgrade: <upgrade>"
     * and "Connection: Upgrade" (an Upgrade or Connection in headers is ignored) and its
     * connection never goes back to a pool. If the server answers 101, on_upgrade gets its
     * headers and the raw connection as a tunnel (the callee owns it from then on; any
     * bytes that followed the 101 are its first data), then on_done runs with err = 0;
     * on_response and on_data are not called for a 101. Any other status is an ordinary
     * response. A 101 when no upgrade was asked for, or without on_upgrade, is an error
     * (-EPROTO). A request with an upgrade cannot have a body. */
    const char *upgrade;
    void (*on_upgrade)(struct al_http_creq *c, const struct al_http_header *h, size_t n,
                       struct al_http_tunnel *t, void *arg);
    /* Added: the TLS provider for "https://host[:port]" targets (see al_http_tls below);
     * it must outlive the request (and the pool's idle connections made with it). NULL:
     * https targets are refused (-EPROTONOSUPPORT). Upgrades over TLS are refused. */
    const struct al_http_tls *tls;
    /* Added: the request carries a secret (an Authorization header): the request's own
     * copy of what it sends is wiped when freed. */
    bool wipe;
    /* Added: connect to exactly this address (AF_INET or AF_INET6; its port is ignored,
     * the target's is used) instead of resolving the target's host. The host still gives
     * the Host header and, for https, the server name sent (SNI) and verified in the
     * certificate: for callers that resolved and checked the address themselves, so that
     * what they checked is what is dialled (DNS pinning). Pooled connections are keyed by
     * target and address. Copied. A unix target with it is -EINVAL. */
    const struct sockaddr *connect_addr;
};
int al_http_creq_start(uv_loop_t *loop, const struct al_http_creq_opts *opts,
                       struct al_http_creq **out);
/* stream_body only: one chunk per call (buffered until connected); -EPIPE once finished. */
int al_http_creq_write(struct al_http_creq *c, const void *data, size_t len);
int al_http_creq_end(struct al_http_creq *c);
size_t al_http_creq_queued(const struct al_http_creq *c);
void al_http_creq_resume(struct al_http_creq *c);
/* Aborts; on_done is called with -ECANCELED (before this returns, unless called from
 * inside one of this request's callbacks: then right after that callback returns). */
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

/* ---- TLS for the client (https:// targets) ------------------------------------------ */
/* common/ links no TLS library: a provider supplies a session per connection, which works
 * on memory only (the client feeds it the bytes the socket read and sends the bytes it
 * produced), so the socket stays libuv's. common/http_tls.h is the provider on mbedtls.
 * Messages (msg) never contain secrets; they say what failed (a certificate that does not
 * verify, the peer's alert, ...). */
struct al_http_tls_ops {
    /* A client session for host: SNI and the name its certificate must carry. NULL (msg
     * set) on failure. */
    void *(*session_new)(void *provider, const char *host, char *msg, size_t msglen);
    void (*session_free)(void *s);
    /* Ciphertext the socket read (copied). -ENOMEM. */
    int (*feed)(void *s, const void *data, size_t len);
    /* 0 when the handshake is complete, -EAGAIN for more input, < 0 on failure (msg). */
    int (*handshake)(void *s, char *msg, size_t msglen);
    /* Plaintext: > 0 bytes, 0 at the peer's close_notify, -EAGAIN for more input, < 0 on
     * failure (msg). */
    long (*read)(void *s, void *buf, size_t len, char *msg, size_t msglen);
    /* Encrypts all of data into the output: 0 or < 0 (msg). */
    int (*write)(void *s, const void *data, size_t len, char *msg, size_t msglen);
    /* Ciphertext waiting to be sent: its length, *data pointing at it (valid until the
     * next call on the session); consume(n) once n bytes of it are taken. */
    size_t (*output)(void *s, const char **data);
    void (*consume)(void *s, size_t n);
};
struct al_http_tls {
    const struct al_http_tls_ops *ops;
    void *provider;
};

/* ---- blocking client (CLIs, setup code, tests) -------------------------------------- */
struct al_http_resp {
    int status;
    struct al_buf body;
    struct al_http_header *headers; /* owned; freed by al_http_resp_free */
    size_t n_headers;
};
/* One blocking exchange. target, method and path as in al_http_creq_opts. */
struct al_http_call_opts {
    const char *target;
    const char *method;
    const char *path;
    const struct al_http_header *headers;
    size_t n_headers;
    const void *body; /* whole body, or NULL */
    size_t body_len;
    uint32_t timeout_ms; /* connect to the last body byte; 0 = 30 s */
    size_t max_body;     /* response body cap; 0 = 16 MiB; beyond it: -EFBIG */
    /* The request carries a secret (a token header, a secret value in the body): every copy
     * the call makes of what it sends is wiped when freed. */
    bool wipe;
};
/* An HTTP error status is a successful call (look at out->status). err says what failed
 * and where. out->body.data is "" for an empty body; free out with al_http_resp_free (also
 * safe after a failed call). */
int al_http_call(const struct al_http_call_opts *o, struct al_http_resp *out, struct al_error *err);
/* JSON in, JSON out: the body is body encoded, or o->body as it is (JSON text the caller
 * encoded, e.g. in locked memory; not both: -EINVAL), or none; it is sent with "Accept" and
 * "Content-Type: application/json" after o->headers. *out is NULL for an empty response
 * body; a body that is not JSON is -EBADMSG (err quotes its start). */
int al_http_call_json(const struct al_http_call_opts *o, json_t *body, int *status, json_t **out,
                      struct al_error *err);
const char *al_http_resp_header(const struct al_http_resp *r, const char *name);
void al_http_resp_free(struct al_http_resp *r);

#endif
