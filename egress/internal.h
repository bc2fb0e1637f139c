/* egress/internal: what the files of egress/ share and nobody else sees: the instance,
 * its workers (one libuv loop per core), and the per-connection pipeline state.
 *
 * The pipeline of one sandbox TCP connection (conn.c):
 *
 *   accept -> identify sandbox (source address) -> limits -> PEEK (first bytes, deadline)
 *     -> TLS ClientHello (clienthello.c)  -> decide on SNI -> destination check
 *            -> passthrough: connect, forward the hello, splice both ways (relay.c)
 *            -> inspect: the session of egress/intercept/ on both sockets (inspect.c)
 *     -> HTTP request (http.c, llhttp strict) -> decide per request -> destination check
 *            -> upstream bound to the first request's host; each later request decided
 *            -> a request whose rule injects: the connection goes to a plain session
 *               of egress/intercept/ (inspect.c), which injects and scrubs
 *     -> neither -> decide raw TCP (CIDR rules only) -> relay, or deny
 *   deny: HTTP 403 JSON body / reset for TLS and raw TCP; every outcome audited.
 */
#ifndef AIRLOCK_EGRESS_INTERNAL_H
#define AIRLOCK_EGRESS_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/http_parser.h"
#include "common/relay.h"

#include "audit.h"
#include "audit_budget.h"
#include "clienthello.h"
#include "decide.h"
#include "egress.h"
#include "inspect.h"
#include "resolver.h"
#include "sandbox.h"

struct egress_worker;
struct egress_conn;

/* ---- the instance ------------------------------------------------------------------- */

struct egress_stats {
    atomic_uint_fast64_t conns_accepted, conns_active, conns_allowed, conns_denied;
    atomic_uint_fast64_t http_requests, http_denied;
    atomic_uint_fast64_t dns_queries, dns_denied, dns_refused;
    atomic_uint_fast64_t bytes_up, bytes_down;
    atomic_uint_fast64_t unknown_source, limit_sandbox, limit_global, limit_memory;
    atomic_uint_fast64_t limit_dns_rate, limit_dns_inflight; /* ratelimit.c */
    atomic_uint_fast64_t audit_aggregated; /* records counted into aggregates (audit_budget.c) */
    atomic_uint_fast64_t timeouts, upstream_errors, audit_denied;
};

struct egress {
    struct egress_config cfg;
    struct egress_registry *reg;
    struct egress_audit *audit;
    struct egress_worker *workers;
    unsigned n_workers;
    struct egress_stats stats;
    atomic_size_t mem_used;
    atomic_bool stopping;
    /* The proxy's own addresses: never a destination. */
    pthread_mutex_t self_lock;
    struct egress_ip self[64];
    size_t n_self;
    char boot_id[9];
    atomic_uint_fast64_t req_seq;
    uint64_t started_ns;
    /* Control loop (admin API, signals): */
    uv_loop_t ctl_loop;
    bool ctl_loop_init;
    uv_async_t ctl_wake;
    uv_timer_t limits_timer; /* writes aggregated limit records (ratelimit.c) */
    bool limits_timer_init;
    struct egress_admin *admin;
    /* TLS interception and credential injection (inspect.c). */
    struct egress_inspect_state *inspect;
    /* Listening fds opened by egress_new, handed to workers (reuseport: one per worker;
     * shared: row 0 only, polled by every worker). */
    enum egress_listener_mode listener_mode; /* as chosen (never AUTO) */
    int (*tcp_fds)[EGRESS_MAX_LISTEN];
    int (*dns_udp_fds)[EGRESS_MAX_LISTEN];
    int (*dns_tcp_fds)[EGRESS_MAX_LISTEN];
    uint16_t tcp_ports[EGRESS_MAX_LISTEN];
    uint16_t dns_ports[EGRESS_MAX_LISTEN];
};

/* request ids: "<boot id>-<counter>", unique per process start. */
void egress_new_request_id(struct egress *e, char out[32]);
/* Whether ip is one of the proxy host's own addresses. */
bool egress_is_self(struct egress *e, const struct egress_ip *ip);
/* Re-reads the host's addresses (start, reload). */
void egress_refresh_self(struct egress *e);
/* Buffer memory accounting: both the global budget and the sandbox's share. */
bool egress_mem_take(struct egress *e, struct egress_sandbox *sb, size_t n);
void egress_mem_give(struct egress *e, struct egress_sandbox *sb, size_t n);

/* Common audit fields of a sandbox's record. */
void egress_rec_sandbox(json_t *r, const struct egress_sandbox *sb, const struct egress_policy *p);
/* Appends; when the log is unhealthy counts it. */
void egress_audit(struct egress *e, json_t *rec);
/* The same two for records written with egress_recw (the per-request paths). egress_audit_w
 * ends the record, appends it and frees the writer. */
void egress_recw_sandbox(struct egress_recw *w, const struct egress_sandbox *sb,
                         const struct egress_policy *p);
void egress_audit_w(struct egress *e, struct egress_recw *w);
/* Rate limit for repeated events of one kind per sandbox (limit hits, unknown sources):
 * true when this one should be audited. */
bool egress_audit_throttle(atomic_uint_fast64_t *last_ns, uint64_t interval_ns);

/* Sockets. */
void egress_ip_from_sockaddr(const struct sockaddr *sa, struct egress_ip *ip, uint16_t *port);
void egress_sockaddr_from_ip(const struct egress_ip *ip, uint16_t port, struct sockaddr_storage *ss,
                             socklen_t *len);
/* "ip:port" / "[ip]:port" */
void egress_endpoint_text(const struct egress_ip *ip, uint16_t port, char *out, size_t outlen);

/* ---- workers ------------------------------------------------------------------------ */

struct egress_listener {
    int fd;
    uv_poll_t poll;
    struct egress_worker *w;
    int kind; /* 0 = transparent TCP, 1 = DNS UDP, 2 = DNS TCP */
    uint16_t port;
    bool shared; /* polled by every worker (EGRESS_LISTENER_SHARED) */
};

#define EGRESS_PIPE_POOL 64 /* idle pipes kept per worker */

/* An epoll registration that outlives the socket's owner: a pooled upstream passes from a
 * connection to the pool and on to the next connection with no epoll_ctl, registered under
 * the slot's token rather than an end's address. */
struct egress_slot {
    struct egress_end *end; /* NULL: the pool holds the socket */
    uint32_t gen;           /* in the token: an event fetched for a freed slot is ignored */
    uint32_t next_free;     /* index + 1 */
    bool used;
};

struct egress_worker {
    struct egress *e;
    unsigned index;
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t wake;          /* stop, sandbox removed */
    atomic_bool kick_removed; /* close connections of removed sandboxes */
    atomic_bool kick_rejudge; /* a sandbox's network changed: judge its connections again */
    struct egress_listener listeners[3 * EGRESS_MAX_LISTEN];
    int ep;            /* epoll set of the connections' sockets */
    uv_poll_t ep_poll; /* ... watched by the loop */
    size_t n_listeners;
    struct egress_conn *conns; /* doubly linked */
    size_t n_conns;
    int pipes[EGRESS_PIPE_POOL][2]; /* idle pipes for splice */
    size_t n_pipes;
    struct egress_resolver *resolver;
    struct egress_dns_state *dns;          /* DNS queries in flight, TCP DNS connections */
    struct egress_inspect_worker *inspect; /* upstream pool, vault fetcher (inspect.c) */
    struct egress_slot *slots;
    uint32_t n_slots, free_slot; /* free_slot: index + 1 of the first free one, 0: none */
    bool started;
    bool stopping;
};

int egress_worker_start(struct egress_worker *w);
/* Listening sockets (setup code). */
int egress_listen_tcp(const struct sockaddr_storage *ss, bool transparent, bool reuseport,
                      int backlog, uint16_t *port, struct al_error *err);
int egress_listen_udp(const struct sockaddr_storage *ss, bool reuseport, uint16_t *port,
                      struct al_error *err);
/* Resolves cfg->listener_mode (AUTO: by the vswitch mode and the running kernel) and says
 * why in why. Never returns AUTO. */
enum egress_listener_mode egress_listener_mode_pick(const struct egress_config *cfg, char *why,
                                                    size_t whylen);

/* Slots (struct egress_slot): a token (odd, never an end's address) or 0 when out of
 * memory; set names the end its events go to (NULL: the pool's); free forgets it. */
uint64_t egress_slot_new(struct egress_worker *w);
void egress_slot_set(struct egress_worker *w, uint64_t token, struct egress_end *end);
void egress_slot_free(struct egress_worker *w, uint64_t token);

/* Pipes for splice, pooled per worker: 0 or -errno; only empty pipes are put back. */
int egress_pipe_get(struct egress_worker *w, int fd[2]);
void egress_pipe_put(struct egress_worker *w, int fd[2]);

/* ---- connections --------------------------------------------------------------------- */

enum egress_conn_state {
    CONN_PEEK = 1, /* waiting for the first bytes */
    CONN_RESOLVE,  /* destination check waits for our own resolution */
    CONN_CONNECT,  /* connecting upstream */
    CONN_RELAY,    /* bytes flow both ways (passthrough, raw TCP, upgraded HTTP) */
    CONN_HTTP,     /* plain HTTP, request by request */
    CONN_DRAIN,    /* answer written, closing once it is flushed */
    CONN_INSPECT,  /* an interception session owns the exchange (inspect.c) */
    CONN_CLOSING,
};

enum egress_proto { PROTO_UNKNOWN = 0, PROTO_TLS, PROTO_HTTP, PROTO_TCP };

/* One socket of a connection. Sockets of the data path are watched through the worker's
 * own epoll set (see worker.c), not one uv_poll_t each: a change of interest is one
 * epoll_ctl, and an idle connection costs no libuv handle. */
struct egress_end {
    int fd;
    bool registered; /* in the worker's epoll set */
    int events;      /* UV_READABLE | UV_WRITABLE currently asked for */
    bool eof;        /* read side saw EOF */
    bool shut_wr;    /* we shut down its write side */
    uint64_t slot;   /* registered under this slot's token (0: under the end's address) */
    struct egress_conn *c;
};

struct egress_http;

struct egress_conn {
    struct egress_worker *w;
    struct egress_conn *prev, *next;
    struct egress_sandbox *sb;
    struct egress_policy *policy; /* snapshot for the current decision */
    unsigned net_gen;             /* the sandbox's network generation of that snapshot */
    char net_update[72];          /* the network update that closed it, or "" */
    enum egress_conn_state state;
    enum egress_proto proto;
    struct egress_end client, upstream;
    uv_timer_t timer;
    uint64_t due_ms, armed_ms; /* deadline and what the timer is armed for (loop ms) */
    int handles_open;
    bool counted;    /* holds a slot in the sandbox's connection count */
    bool classified; /* the first bytes were enough to classify (TLS, HTTP, or other) */

    struct egress_ip src, dst, dialled;
    uint16_t src_port, dst_port;
    char src_text[56], dst_text[56], dialled_text[56]; /* for audit records, made once */
    char request_id[32];
    uint64_t t_accept, t_first, t_decided, t_dns0, t_dns, t_connect0, t_connected, t_last_io;

    /* First bytes from the client (ClientHello or HTTP head), forwarded after the
     * decision. Accounted in the memory budget. */
    uint8_t *in;
    size_t in_len, in_cap;

    struct egress_clienthello *ch; /* TLS: what the hello said (freed after the decision) */
    struct egress_host host;       /* canonical host decided on */
    bool have_host;
    struct egress_verdict verdict;
    struct egress_resolve_req rreq;
    bool resolving;
    uint16_t resolve_qtype;

    /* Relay (relay.c): end 0 is the client, flow 0 goes upstream. */
    struct al_relay relay;
    bool relaying;
    uint64_t bytes_up, bytes_down; /* what ended phases carried (relay's are added at its stop) */

    /* Plain HTTP. */
    struct egress_http *http;

    /* Interception (inspect.c). */
    struct egress_inspect_conn *inspect;

    /* Why the connection ended, for the end record. */
    const char *end_reason;
    const char *end_detail; /* a human explanation (interception), or NULL */
    bool audited_end;
    bool decision_audited;
    bool decision_aggregated; /* its decision record went into an aggregate (audit_budget.h) */
    bool allowed;
    int mem_held; /* bytes accounted to the budget by this conn */
};

void egress_conn_accept(struct egress_worker *w, int fd, const struct sockaddr_storage *peer);
/* The address to dial (a checked one); keeps its text for audit records. */
void egress_conn_set_dialled(struct egress_conn *c, const struct egress_ip *ip);
/* Closes (RST when reset), auditing the end if needed. Idempotent. */
void egress_conn_close(struct egress_conn *c, bool reset, const char *why);
void egress_conn_set_events(struct egress_end *end, int events);
/* The worker's epoll set reported events (worker.c calls this for each). */
void egress_conn_on_events(struct egress_end *end, uint32_t epoll_events);
/* The connection's one deadline, ms from now (replacing the previous one), or none. */
void egress_conn_deadline(struct egress_conn *c, uint32_t ms);
void egress_conn_no_deadline(struct egress_conn *c);
/* Connects to c->dialled:c->dst_port; calls egress_conn_on_connected when done. */
/* A non-blocking TCP connection to ip:port begun (TCP_NODELAY, the upstream mark): fd, or
 * -errno. The one way the proxy dials an upstream. */
int egress_dial(struct egress *e, const struct egress_ip *ip, uint16_t port);
int egress_conn_connect(struct egress_conn *c);
/* Takes fd, an upstream connection already made to c->dialled:c->dst_port (one from the
 * worker's pool), as c's upstream, as a connect that finished would; slot: the one it is
 * registered under, watched for reading (0: not in the epoll set). */
void egress_conn_adopt_upstream(struct egress_conn *c, int fd, uint64_t slot);
/* c's upstream socket, about to leave c for the pool, stays in the epoll set watched for
 * reading under a slot of its own: that slot, or 0 when it had to leave the set. c's
 * upstream end is empty after it. */
uint64_t egress_conn_release_upstream(struct egress_conn *c);
/* Closes c's upstream socket (the connection goes on without it). */
void egress_conn_drop_upstream(struct egress_conn *c);
/* Closes every connection of removed sandboxes on this worker. */
void egress_worker_reap_removed(struct egress_worker *w);
/* Judges again every connection on this worker whose sandbox's network changed since the
 * connection took its policy (egress_set_network): one not yet decided takes the new
 * policy; a decided one whose destination the new narrowing refuses is reset. */
void egress_worker_rejudge(struct egress_worker *w);

/* relay.c: moves bytes both ways until both sides are done. egress_relay_init sets the
 * relay up on both sockets; bytes to deliver first go in with al_relay_prime(&c->relay, ...)
 * (0: to the upstream, 1: to the client); egress_relay_start runs it. on_timeout: whether
 * the idle timeout passed (else the deadline is re-armed). stop folds its byte counts into
 * the connection's and frees it (egress_conn_close calls it). */
void egress_relay_init(struct egress_conn *c);
void egress_relay_start(struct egress_conn *c);
void egress_relay_on_event(struct egress_conn *c, struct egress_end *end, int events);
bool egress_relay_on_timeout(struct egress_conn *c);
void egress_relay_stop(struct egress_conn *c);

/* http.c: the plain-HTTP side. */
int egress_http_start(struct egress_conn *c); /* after PEEK recognised HTTP */
void egress_http_on_event(struct egress_conn *c, struct egress_end *end, int events);
void egress_http_on_connected(struct egress_conn *c, int status);
void egress_http_on_timeout(struct egress_conn *c);
void egress_http_free(struct egress_conn *c);
/* From egress_conn_close (not a reset), before the sockets close: the upstream goes to the
 * worker's pool when its last exchange ended cleanly. */
void egress_http_pool_upstream(struct egress_conn *c);
/* Sends an HTTP error/deny answer and drains: status, error code, rule, reason. */
void egress_http_answer(struct egress_conn *c, int status, const char *error, const char *rule,
                        const char *reason, bool close_after);
/* The members every http_request record of a connection repeats, serialised once: the
 * sandbox's (for the policy referenced here) and the connection's (for the address dialled
 * then). Zeroed: empty. */
struct egress_http_rec_cache {
    struct egress_policy *policy;
    char sb[768];
    size_t sb_len;
    char conn[384];
    size_t conn_len;
    char dialled[56]; /* c->dialled_text the connection's members were made with ("" none) */
};
struct egress_http_rec;
/* The one writer of a request's http_request record, plain or intercepted (budget
 * permitting: audit_budget.c): c's members (from k), its policy's mode, then r's
 * (egress_http_rec_write, egress/http.h). */
void egress_http_audit(struct egress_conn *c, struct egress_http_rec_cache *k,
                       const struct egress_http_rec *r);
void egress_http_rec_cache_free(struct egress_http_rec_cache *k);

/* Destination check (conn.c), shared by TLS and HTTP: is c->dst an address the proxy's own
 * resolution of host returned (or remembered for the sandbox)? Calls done(c, ok, reason)
 * synchronously or after resolving. */
typedef void (*egress_dst_check_cb)(struct egress_conn *c, bool ok, const char *reason);
void egress_check_destination(struct egress_conn *c, const struct egress_host *host,
                              egress_dst_check_cb done);

/* dns_server.c */
void egress_dns_udp_readable(struct egress_worker *w, struct egress_listener *l);
void egress_dns_tcp_accept(struct egress_worker *w, int fd);
void egress_dns_close_all(struct egress_worker *w);

#endif
