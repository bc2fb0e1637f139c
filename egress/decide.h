/* egress/decide: the narrow interface between the proxy and the policy library.
 *
 * Owns nothing but the shape of the questions the proxy asks. Everything behind it (parse,
 * validate, compile, canonicalise names and IP literals in every spelling, classify
 * special addresses, normalise paths, match rules, hash) is the policy library's job
 * (policy/); decide.c binds this interface to it, so that the proxy never grows a second
 * policy engine or a second canonicaliser.
 *
 * Thread safety: a compiled policy is immutable and reference-counted; any thread may
 * query it. Strings a verdict points to live as long as the policy they came from.
 */
#ifndef AIRLOCK_EGRESS_DECIDE_H
#define AIRLOCK_EGRESS_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct egress_policy;

/* Compiles a policy from YAML text (or a file when yaml is NULL: origin is then the path).
 * On failure err holds every error as "file:line:col: error: ..." lines. The last few
 * compiled policies are kept by origin and content and shared by reference (a registration
 * naming an unchanged file compiles nothing; an edited one is compiled afresh). */
int egress_policy_load(const char *yaml, size_t len, const char *origin, struct egress_policy **out,
                       struct al_error *err);
/* Drops the kept compiled policies (at exit). */
void egress_policy_cache_clear(void);
struct egress_policy *egress_policy_ref(struct egress_policy *p);
/* The policy library's own object (the interception library decides with it). */
struct policy;
const struct policy *egress_policy_raw(const struct egress_policy *p);
void egress_policy_unref(struct egress_policy *p); /* NULL is fine */
const char *egress_policy_name(const struct egress_policy *p);
const char *egress_policy_hash(const struct egress_policy *p); /* 64 hex */
bool egress_policy_report_mode(const struct egress_policy *p);
/* Limits the policy sets (0 = not set: the daemon's default applies). */
uint64_t egress_policy_max_connections(const struct egress_policy *p);
uint64_t egress_policy_max_request_body(const struct egress_policy *p);

/* ---- narrowing by E2B network fields (docs/policy.md) ------------------------------- */
struct json_t;
struct egress_host;
struct egress_ip;
/* Checks the shape of a registration's "network" object (policy_narrowing_json_check:
 * allow_internet_access, allow_out, deny_out, transforms; the entries themselves are checked
 * by egress_policy_narrow). */
int egress_network_check(const struct json_t *network, struct al_error *err);
/* The policy a sandbox gets: base narrowed by its E2B network fields (a filter in front of
 * base that can only remove access; denials carry "sandbox_network_denies"; its own hash).
 * network NULL: base itself. *out is a new reference either way; base keeps its own. */
int egress_policy_narrow(struct egress_policy *base, const struct json_t *network,
                         struct egress_policy **out, struct al_error *err);
/* The policy under p's narrowing (p itself when it is not narrowed), a new reference: an
 * update of a sandbox's network fields narrows this one afresh (replace, not accumulate). */
struct egress_policy *egress_policy_unnarrowed(struct egress_policy *p);
/* Whether p's narrowing still lets a decided destination through: host (the name or
 * address decided on, or NULL when none was) and dst (the address connected to). */
bool egress_policy_narrowing_passes(const struct egress_policy *p, const struct egress_host *host,
                                    const struct egress_ip *dst);

/* ---- names and addresses ----------------------------------------------------------- */
struct egress_ip {
    uint8_t family;   /* 4 or 6 */
    uint8_t addr[16]; /* IPv4 in the first 4 bytes, the rest zero */
};

enum egress_host_kind { EGRESS_HOST_NAME = 1, EGRESS_HOST_IP = 2 };

struct egress_host {
    enum egress_host_kind kind;
    size_t len;
    char text[254];      /* canonical: lowercase A-label name without trailing dot, or the
                           canonical text of the address */
    struct egress_ip ip; /* when kind == EGRESS_HOST_IP */
};

/* Canonicalises a host as a sandbox spelled it (SNI, Host header without its port, DNS
 * name): the policy library's one canonicaliser. On failure returns < 0 and err says why. */
int egress_canon_host(const char *in, size_t len, struct egress_host *out, struct al_error *err);

struct egress_ip_class {
    bool internal;    /* refused unless a CIDR rule of the policy opens it */
    const char *code; /* stable: "public", "loopback", "private", "metadata", ... */
};
void egress_ip_classify(const struct egress_ip *ip, struct egress_ip_class *out);
/* Whether an allow rule with a CIDR explicitly covers this address (DNS answers that point
 * at internal addresses are handed out only then). */
bool egress_ip_opened(const struct egress_policy *p, const struct egress_ip *ip);

/* Canonical text of an address ("203.0.113.5", "2001:db8::1") into out (>= 46 bytes). */
void egress_ip_text(const struct egress_ip *ip, char *out, size_t outlen);
bool egress_ip_equal(const struct egress_ip *a, const struct egress_ip *b);

/* Request paths as the matcher sees them (query cut off, unreserved escapes decoded; dot
 * segments, empty segments, backslashes, NUL, encoded slashes refused: < 0). out must hold
 * EGRESS_PATH_MAX + 1 bytes. */
#define EGRESS_PATH_MAX 8192
int egress_path_normalize(const char *in, size_t len, char *out, size_t outlen,
                          struct al_error *err);

/* ---- decisions --------------------------------------------------------------------- */
enum egress_scheme {
    EGRESS_SCHEME_TLS = 0,  /* TLS (HTTPS), decided on the SNI, or per request once
                                intercepted */
    EGRESS_SCHEME_HTTP = 1, /* plain HTTP */
    EGRESS_SCHEME_TCP = 2,  /* neither: only CIDR rules can allow it */
};

struct egress_query {
    const char *host; /* canonical or raw host; NULL when none (no SNI, raw) */
    size_t host_len;
    const struct egress_ip *dst; /* the original destination address */
    uint16_t port;
    enum egress_scheme scheme;
    const char *method; /* NULL for connection-level questions */
    const char *path;   /* request target path (query ignored); NULL likewise */
    size_t path_len;
    bool body; /* the request carries a body (Content-Length > 0 or Transfer-Encoding) */
};

enum egress_tls_mode { EGRESS_TLS_NONE = 0, EGRESS_TLS_PASSTHROUGH = 1, EGRESS_TLS_INSPECT = 2 };

struct egress_verdict {
    bool allow;               /* what to do (report mode: true, with would_deny) */
    bool would_deny;          /* report mode: enforcement would have denied */
    const char *rule;         /* the deciding rule's name, or NULL */
    const char *reason;       /* static, machine-readable ("no_rule_matched", ...) */
    enum egress_tls_mode tls; /* for allowed TLS: what the rule asks for */
    bool websocket;           /* WebSocket upgrades allowed for this request */
    size_t n_inject;          /* headers the rule would inject (part 2) */
    const char *addr_class;   /* class code of the destination ("public", ...) or NULL */
    bool by_address;          /* the deciding rule matched the destination address (cidrs),
                                  not a name: the address itself is what is allowed, so no
                                  name-to-address check applies */
    struct egress_host host;  /* the canonical host the decision was made on */
    bool malformed;           /* denied for what the request is, not where it goes (a body
                                  on GET...): answered 400 bad_request, not 403 */
};

/* Decides one question. Never fails: a malformed question is a deny with a reason. */
void egress_decide(const struct egress_policy *p, const struct egress_query *q,
                   struct egress_verdict *v);

/* DNS: may this sandbox resolve this name? v->allow says; reason and rule as above. */
void egress_decide_dns(const struct egress_policy *p, const char *name, size_t len,
                       struct egress_verdict *v);

#endif
