/* egress/http: HTTP/1.1 request and response heads as the proxy sees them, for both of its
 * engines: the plain one (http.c) and the intercepted one (intercept/session.c). Pure
 * functions (library airlock_egress_http), fuzzed by fuzz_proxy_http and fuzz_intercept_head.
 *
 * Owns: collecting a request or response head from llhttp callbacks (bounded), and the
 * checks a request must pass before any decision, the same on a plain connection and inside
 * a TLS session the proxy terminated: one Host, target form, scheme and authority agreement,
 * no userinfo/fragments/backslashes, ports, Transfer-Encoding, upgrades, expectations; then
 * re-serialising request heads for the upstream and response heads for the sandbox without
 * what common/http_head.h says a relay leaves behind (hop-by-hop fields, those any Connection
 * field names, framing, and on requests method overrides); the members of the audit record
 * of a request (egress_http_rec).
 */
#ifndef AIRLOCK_EGRESS_HTTP_H
#define AIRLOCK_EGRESS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/http_parser.h"

#include "decide.h"

#define EGRESS_HTTP_MAX_HEADERS 128

struct egress_http_hdr {
    uint32_t name, name_len, value, value_len; /* offsets into head.buf (NUL-terminated) */
};

struct egress_http_head {
    char *buf;
    uint32_t len, cap, max;      /* max: bytes of method + target + headers allowed */
    uint32_t url, url_len;       /* request target (requests) */
    uint32_t status, status_len; /* reason phrase (responses) */
    struct egress_http_hdr hdr[EGRESS_HTTP_MAX_HEADERS];
    uint32_t n_hdr;
    int last;       /* 0 none, 1 url/status, 2 field, 3 value */
    bool too_large; /* max or the header count was exceeded */
};

void egress_http_head_init(struct egress_http_head *h, uint32_t max);
void egress_http_head_reset(struct egress_http_head *h);
void egress_http_head_free(struct egress_http_head *h);
/* llhttp data callbacks append through these: 0, -E2BIG past max bytes or
 * EGRESS_HTTP_MAX_HEADERS fields (too_large is set), -ENOMEM. */
int egress_http_head_url(struct egress_http_head *h, const char *at, size_t n);
int egress_http_head_field(struct egress_http_head *h, const char *at, size_t n);
int egress_http_head_value(struct egress_http_head *h, const char *at, size_t n);
int egress_http_head_finish(struct egress_http_head *h);
const char *egress_http_head_get(const struct egress_http_head *h, const char *name, size_t *count);
/* The collected fields as struct al_http_field (common/http.h) pointing into h, into
 * out[EGRESS_HTTP_MAX_HEADERS]; returns how many. */
struct al_http_field;
size_t egress_http_head_fields(const struct egress_http_head *h, struct al_http_field *out);

/* The connection a request arrived on. */
struct egress_http_conn {
    uint16_t port; /* original destination port */
    bool tls;      /* inside a TLS session the proxy terminated: an absolute-form target must
                      say https, the default port is 443, and Host is required */
};

/* A request head after the checks. Strings point into the head or into this struct. */
struct egress_http_request {
    const char *method; /* static (llhttp's method name) */
    int http_minor;
    bool absolute_form;
    bool tls;             /* the connection's (egress_http_conn) */
    const char *host_raw; /* the Host field as sent (NULL: none, beside an absolute-form) */
    char host_name[256];  /* host part without port, as sent */
    uint16_t port;        /* from the authority, or 80 */
    const char *target;   /* origin-form target to send upstream (path?query) */
    size_t target_len;
    const char *path; /* path without the query (for audit, decisions) */
    size_t path_len;
    bool chunked;
    int64_t content_length; /* -1 when none */
    bool websocket;         /* Upgrade: websocket */
    bool keep_alive;        /* the client wants the connection kept */
};

/* Checks a complete request head (p: the parser that produced it) that arrived on conn. On
 * refusal returns < 0 with *status (400/403/417) and *reason (a static machine-readable
 * reason: unsupported_http_version, connect_refused (connect_in_tunnel inside TLS),
 * h2_prior_knowledge_refused, duplicate_host, missing_host, asterisk_form_refused,
 * scheme_mismatch, invalid_target, authority_mismatch, port_mismatch,
 * unsupported_transfer_encoding, content_length_with_chunked, h2c_upgrade_refused,
 * upgrade_refused, upgrade_without_connection_upgrade, websocket_needs_get,
 * expectation_unsupported, or one of al_http_target_parse's and al_http_authority_parse's:
 * common/http_head.h). */
int egress_http_check_request(struct egress_http_head *h, const llhttp_t *p,
                              const struct egress_http_conn *conn, struct egress_http_request *r,
                              int *status, const char **reason);

/* ---- the decision on a checked request head ------------------------------------------ */

/* What a request asks the policy: its canonical host, and from the head the port, the
 * scheme (https inside a TLS session the proxy terminated), the method, the origin-form
 * target (the policy cuts the query) and whether a body follows. */
struct egress_http_question {
    const char *host; /* canonical */
    size_t host_len;
    uint16_t port;
    bool tls;
    const char *method;
    const char *path;
    size_t path_len;
    bool body;
};

/* The answer, in the proxy's terms, whichever binding of the policy library gave it. */
struct egress_http_verdict {
    bool allow;          /* what to do (report mode: true, with would_deny) */
    bool would_deny;     /* report mode: enforcement would have denied */
    bool malformed;      /* denied for what the request is (400), not where it goes */
    bool websocket;      /* the deciding rule allows WebSocket upgrades */
    bool inspect_strict; /* the rule injects with strict scrubbing: frames cannot be inspected */
    const char *rule;    /* the deciding rule's name, or NULL */
    const char *reason;  /* static, machine-readable */
    uint64_t max_body;   /* the policy's bound on request bodies; 0: none */
};

/* Asks the policy q into *v (the engine's binding: plain, the proxy's cached decision;
 * intercepted, the session's policy, whose answer also says what to inject). */
typedef void (*egress_http_decide_fn)(void *arg, const struct egress_http_question *q,
                                      struct egress_http_verdict *v);

/* A request head egress_http_check_request accepted, and how to decide it. */
struct egress_http_decide_args {
    const struct egress_http_request *r;
    const struct egress_http_conn *conn; /* the port and the scheme asked about */
    const char *host;                    /* canonical */
    size_t host_len;
    uint64_t max_body; /* the proxy's bound on request bodies; 0: none */
    egress_http_decide_fn decide;
    void *arg;
};

struct egress_http_decision {
    struct egress_http_verdict v; /* the policy's answer */
    uint64_t max_body;            /* allowed: the bound on this request's body; 0 none */
    int status;                   /* refused: the answer's status, error code and reason */
    const char *error, *reason;
};

/* The one decision on a request head, for both engines: a->decide answers the question the
 * head puts, then what the answer does not let through is refused: a denial (403
 * blocked_by_policy with the policy's reason, 400 bad_request when malformed); unless in
 * report mode, a WebSocket upgrade the rule does not allow (403 websocket_not_allowed) or
 * cannot inspect (403 websocket_not_inspectable); a declared body over the smaller of the
 * proxy's and the policy's bounds (413 payload_too_large, request_body_too_large). Returns 0
 * or -EPERM (out->status, error, reason). */
int egress_http_decide(const struct egress_http_decide_args *a, struct egress_http_decision *out);

/* The request's Host field as it goes upstream: "Host: " the field as sent, or the
 * absolute-form's authority when it had none, and CRLF. */
int egress_http_append_host(const struct egress_http_request *r, struct al_buf *out);

/* Why p, a request parser whose callbacks collect into h, stopped with an error: a
 * machine-readable reason and *status: "request_body_too_large" 413 (a body callback refused
 * with that reason: llhttp_set_error_reason), "request_head_too_large" 431 (h went over its
 * bounds), or common/http_parser.h's reason for llhttp's error (400 mostly). */
const char *egress_http_request_error(const llhttp_t *p, const struct egress_http_head *h,
                                      int *status);

/* Writes the head to send upstream: origin-form, the client's HTTP version, Host as sent,
 * what al_http_forward_drops leaves behind (common/http_head.h) and HTTP2-Settings removed,
 * framing restated. The upstream connection's persistence is the proxy's own hop
 * (Connection is hop-by-hop, RFC 9110 7.6.1): keep_upstream asks the server to keep it
 * whatever the client asked of its own connection; otherwise the client's wish is passed on. */
int egress_http_serialize_request(const struct egress_http_head *h,
                                  const struct egress_http_request *r, bool keep_upstream,
                                  struct al_buf *out);

/* The same head with an engine's edits: the intercepted one drops fields (drop: the i-th
 * field of h goes too) and adds its own after the sandbox's (add), and speaks HTTP/1.1
 * upstream whatever the client spoke (http11: it answers for the hop itself). */
struct egress_http_serialize_opts {
    bool keep_upstream;
    bool http11;
    bool (*drop)(void *arg, const struct egress_http_head *h, uint32_t i);
    int (*add)(void *arg, struct al_buf *out);
    void *arg;
};
int egress_http_serialize_request_opts(const struct egress_http_head *h,
                                       const struct egress_http_request *r,
                                       const struct egress_http_serialize_opts *o,
                                       struct al_buf *out);

/* Writes the response head (collected into h, parsed by p) to send to the sandbox: the
 * upstream's status line, its fields without what al_http_forward_drops leaves behind
 * (common/http_head.h), except the framing fields (Transfer-Encoding, Content-Length), which
 * stay as they came because the body is forwarded as it came; then "Connection: Upgrade" on
 * a 101, "Connection: close" when the connection ends after this response (close), or
 * "Connection: keep-alive" to an HTTP/1.0 client (client10) whose connection is kept. */
int egress_http_serialize_response(const struct egress_http_head *h, const llhttp_t *p, bool close,
                                   bool client10, struct al_buf *out);

/* Body bytes on their way to the next hop, re-framed: as they are, or as one chunk when the
 * body goes chunked (n == 0 appends nothing: a zero-size chunk would end the body). 0 or
 * -ENOMEM. */
int egress_http_body_append(struct al_buf *out, bool chunked, const void *at, size_t n);
/* The end of a body that went chunked ("0" CRLF CRLF, no trailers); nothing otherwise. */
int egress_http_body_end(struct al_buf *out, bool chunked);

/* ---- the http_request audit record ---------------------------------------------------- */

struct egress_recw;

/* A phase of a request, monotonic ns: written as microseconds (to - from, 0 when to is
 * earlier) when both ends are set. */
struct egress_http_span {
    uint64_t from, to;
};

/* What an http_request record says of its request (docs/audit.md), one writer for both
 * engines. The proxy writes the connection's members first (sandbox, template, policy,
 * request_id, connection_id, proto, src, dst, dialled) and sets mode; a TLS session the
 * proxy terminated adds its own members (inspected, sni, inject, scrub, tls) through extra. */
struct egress_http_rec {
    const char *request_id;
    const char *proto;        /* "http", or "https" inside a TLS session the proxy terminated */
    const char *decision;     /* "allow", "would_deny", "deny" */
    const char *reason;       /* NULL: null */
    const char *rule;         /* NULL: null (no rule decided) */
    const char *mode;         /* "enforce" or "report"; NULL: not written */
    const char *error;        /* an allowed exchange that failed: what went wrong */
    const char *error_detail; /* with error: the specifics (NULL or "": none) */
    const char *method;       /* NULL: not known yet */
    const char *host;         /* the name decided on; NULL or "": not known */
    const char *path;         /* NULL or "": not known */
    int status;               /* what the sandbox received; 0: nothing */
    bool websocket;
    bool upstream_reused; /* the upstream connection came from the pool */
    uint64_t bytes_up, bytes_down;
    struct egress_http_span decide, dns, vault, tls_sandbox, connect, tls_upstream, upstream;
    uint64_t t_start; /* total: from this to the record; 0: not written */
    void (*extra)(struct egress_recw *w, const void *arg);
    const void *extra_arg;
};

/* Writes r's members, from decision to timing_us, into w (a record begun as "http_request"
 * whose connection members are written); now: the record's time (monotonic ns). */
void egress_http_rec_write(struct egress_recw *w, const struct egress_http_rec *r, uint64_t now);

/* Builds a complete error/deny answer (JSON body) into out. */
int egress_http_error_response(struct al_buf *out, int status, const char *error, const char *rule,
                               const char *reason, const char *request_id, bool close);

#endif
