/* policy/policy: the egress policy language of airlock, as a library.
 *
 * Owns: parsing and strict validation of policy YAML (docs/policy.md is the reference),
 * the one canonicaliser for host names and IP literals that every component uses (egress,
 * DNS, injector, audit, vault bound hosts), the address classifier (internal/special
 * ranges), the compiled matcher and its decision API, narrowing by E2B network fields, and
 * the policy hash written into audit records.
 *
 * A compiled `struct policy` is immutable and reference-counted: share it between threads,
 * take a reference per user, swap pointers on reload. policy_decide() never allocates for
 * ASCII names and never blocks; it is safe to call from any number of threads at once.
 */
#ifndef AIRLOCK_POLICY_POLICY_H
#define AIRLOCK_POLICY_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "common/yaml.h"

struct sockaddr;

#define POLICY_NAME_MAX     253 /* longest canonical host name (no trailing dot) */
#define POLICY_LABEL_MAX    63
#define POLICY_HASH_HEX_LEN 64   /* BLAKE2b-256 as lowercase hex */
#define POLICY_PATH_MAX     8192 /* longest request path the matcher accepts */
#define POLICY_VERSION      1    /* the language version this library reads */

/* ---- addresses ------------------------------------------------------------------------ */

struct policy_addr {
    uint8_t family;    /* AF_INET or AF_INET6 (0 = none) */
    uint8_t bytes[16]; /* network order; IPv4 uses bytes[0..4) */
};

/* What kind of destination an address is. "internal" classes are refused unless a CIDR
 * rule of the policy opens the address explicitly. */
enum policy_addr_class {
    POLICY_ADDR_PUBLIC = 0,
    POLICY_ADDR_DOCUMENTATION, /* 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32,
                                  3fff::/20: not internal (test worlds use them) */
    POLICY_ADDR_NAT64,         /* 64:ff9b::/96 with a public embedded IPv4: not internal */
    POLICY_ADDR_UNSPECIFIED,   /* 0.0.0.0/8, :: */
    POLICY_ADDR_LOOPBACK,      /* 127/8, ::1 */
    POLICY_ADDR_PRIVATE,       /* 10/8, 172.16/12, 192.168/16 */
    POLICY_ADDR_SHARED,        /* 100.64/10 (carrier-grade NAT) */
    POLICY_ADDR_LINK_LOCAL,    /* 169.254/16, fe80::/10 */
    POLICY_ADDR_METADATA,      /* 169.254.169.254, fd00:ec2::254 (cloud metadata) */
    POLICY_ADDR_ULA,           /* fc00::/7 */
    POLICY_ADDR_MULTICAST,     /* 224/4, ff00::/8 */
    POLICY_ADDR_BROADCAST,     /* 255.255.255.255 */
    POLICY_ADDR_BENCHMARK,     /* 198.18/15, 2001:2::/48 */
    POLICY_ADDR_RESERVED,      /* 240/4, 192.0.0/24, IPv6 outside 2000::/3, ... */
    POLICY_ADDR_TUNNEL,        /* 6to4 2002::/16, Teredo 2001::/32, 192.88.99/24 */
};

struct policy_addr_info {
    enum policy_addr_class cls;
    bool internal;               /* refused unless a CIDR rule opens it */
    const char *code;            /* stable: "public", "loopback", "metadata", ... */
    const char *reason;          /* human: "loopback (127.0.0.0/8)" (static string) */
    struct policy_addr embedded; /* the IPv4 inside NAT64/6to4/Teredo/v4-compatible forms */
};

void policy_addr_classify(const struct policy_addr *a, struct policy_addr_info *out);
bool policy_addr_is_internal(const struct policy_addr *a);
/* From a socket address (AF_INET/AF_INET6; IPv4-mapped IPv6 becomes IPv4). */
int policy_addr_from_sockaddr(const struct sockaddr *sa, struct policy_addr *out);
/* Canonical text: dotted quad, or RFC 5952 IPv6. buf >= 46 bytes. */
const char *policy_addr_format(const struct policy_addr *a, char *buf, size_t len);
bool policy_addr_equal(const struct policy_addr *a, const struct policy_addr *b);

/* ---- host names: the canonicaliser ---------------------------------------------------- */

enum policy_host_kind { POLICY_HOST_NAME = 1, POLICY_HOST_ADDR = 2 };

struct policy_host {
    enum policy_host_kind kind;
    size_t len;
    char text[POLICY_NAME_MAX + 1]; /* canonical name ("api.github.com", punycode for IDNs)
                                       or canonical address text ("127.0.0.1", "fe80::1") */
    struct policy_addr addr;        /* kind == ADDR */
    char zone[16];                  /* IPv6 zone id if one was given ("eth0"), else "" */
};

/* The one canonicaliser (docs/policy.md, "Canonical names"): lower case; IDNA 2008 with
 * UTS-46 non-transitional mapping to punycode (libidn2), mixed-script labels rejected;
 * full-width and ideographic dots rejected; exactly one trailing dot stripped; empty labels,
 * labels > 63 and names > 253 rejected; letters, digits and hyphens only (no underscore),
 * no hyphen at either end of a label; IP literals in every spelling (decimal, octal, hex,
 * short forms, brackets, IPv4-mapped, zone ids) recognised as addresses. in need not be
 * NUL-terminated. Returns 0, or -EINVAL with err saying what is wrong. Never allocates for
 * ASCII input without xn-- labels. */
int policy_host_canon(const char *in, size_t len, struct policy_host *out, struct al_error *err);

/* Host patterns as written in policies (and E2B allowOut, vault bound hosts). */
enum policy_pattern_kind {
    POLICY_PATTERN_EXACT = 1, /* api.github.com */
    POLICY_PATTERN_ONE,       /* *.example.com: exactly one more label */
    POLICY_PATTERN_ANY,       /* **.example.com: one or more labels, never the apex */
    POLICY_PATTERN_GLOB,      /* api-*.example.com: one label matching the glob */
};

struct policy_pattern {
    enum policy_pattern_kind kind;
    char text[POLICY_NAME_MAX + 8];  /* canonical pattern text */
    const char *base;                /* points into text: the name after the wildcard label */
    char glob[POLICY_LABEL_MAX + 1]; /* GLOB: the leftmost label ("api-*") */
};

int policy_pattern_canon(const char *in, size_t len, struct policy_pattern *out,
                         struct al_error *err);
/* Does canonical name (as from policy_host_canon) match the pattern? */
bool policy_pattern_match(const struct policy_pattern *p, const char *name, size_t len);

/* Bound hosts of a vault secret (docs/vault.md, "Bound hosts"): the hosts the egress proxy may
 * send the secret to, checked by the vault and by the proxy with this one matcher. An entry is
 * a host pattern as policies write it (api.github.com, *.example.com, **.example.com,
 * api-*.example.com; IDNs as punycode) or an IP literal in any spelling (canonical text:
 * "203.0.113.5", "2001:db8::1"). Refused, besides what policy_host_canon and
 * policy_pattern_canon refuse: a wildcard over a public suffix (ICANN or private section of the
 * PSL: *.co.uk, *.github.io; rule "wildcard_public_suffix") and a host that is an ICANN public
 * suffix itself (rule "public_suffix"); psl false skips these two (re-reading stored entries,
 * whose check must not change with the installed PSL). Writes the canonical text (at most
 * POLICY_BOUND_HOST_MAX bytes) into out. Messages quote the rejected text in '...'. */
#define POLICY_BOUND_HOST_MAX (POLICY_NAME_MAX + 8)
int policy_bound_host_canon(const char *in, size_t len, bool psl,
                            char out[POLICY_BOUND_HOST_MAX + 1], struct al_error *err);
/* Is host (any spelling: it is canonicalised first) matched by one of the n canonical bound
 * hosts? n == 0 matches nothing (callers decide what "not bound" means). A name never matches
 * an address entry nor the reverse. */
bool policy_bound_host_match(const char *const *bound, size_t n, const char *host, size_t len);

/* May an inject entry (or an API-given transform) set this header? HTTP tokens only; never
 * the headers that frame or route a request (Host, Content-Length, Transfer-Encoding,
 * Connection, Upgrade, TE, Trailer, Keep-Alive, Expect, HTTP2-Settings, Proxy-*). */
bool policy_header_injectable(const char *h, size_t len);

/* Vault secret names: segments of [A-Za-z0-9._-] joined by '/', not starting with '.',
 * no empty, "." or ".." segments, at most 128 bytes: "github/token". */
bool policy_secret_name_valid(const char *name, size_t len);

/* ---- loading -------------------------------------------------------------------------- */

enum policy_mode { POLICY_MODE_ENFORCE = 0, POLICY_MODE_REPORT = 1 };
enum policy_action { POLICY_ACTION_ALLOW = 0, POLICY_ACTION_DENY = 1 };
enum policy_scheme { POLICY_SCHEME_HTTPS = 0, POLICY_SCHEME_HTTP = 1, POLICY_SCHEME_TCP = 2 };
enum policy_tls { POLICY_TLS_NONE = 0, POLICY_TLS_PASSTHROUGH = 1, POLICY_TLS_INSPECT = 2 };
enum policy_scrub { POLICY_SCRUB_NONE = 0, POLICY_SCRUB_STRICT = 1, POLICY_SCRUB_BEST_EFFORT = 2 };
enum policy_dns_resolve { POLICY_DNS_ALLOWED = 0, POLICY_DNS_NONE = 1 };

struct policy;

/* Loads, validates and compiles. Returns NULL when the policy has errors (each in d, with
 * file:line:col); warnings are added to d also on success. d may be NULL. */
struct policy *policy_load_file(const char *path, struct al_diags *d);
struct policy *policy_load_buffer(const char *text, size_t len, const char *file,
                                  struct al_diags *d);
struct policy *policy_ref(struct policy *p);
void policy_unref(struct policy *p);

/* ---- what a loaded policy says -------------------------------------------------------- */

struct policy_port_range {
    uint16_t lo, hi; /* inclusive */
};

/* A value template split at ${secret:NAME} references. */
struct policy_tmpl_part {
    bool secret; /* true: text is a secret name; false: literal text */
    const char *text;
    size_t len;
};

struct policy_inject {
    const char *header;                   /* as written ("Authorization") */
    const char *value;                    /* template as written; NULL in placeholder mode */
    const struct policy_tmpl_part *parts; /* value split (placeholder mode: one secret part) */
    size_t n_parts;
    const char *const *secrets; /* distinct secret names referenced */
    size_t n_secrets;
    const char *placeholder_env; /* placeholder mode: the sandbox's env var, else NULL */
};

struct policy_rule {
    const char *name;
    const char *description; /* NULL if none */
    unsigned index;          /* 0-based position in the policy */
    unsigned line;           /* where the rule starts in its file */
    enum policy_action action;
    bool report; /* effective: rule or policy in report mode */
    enum policy_scheme scheme;
    enum policy_tls tls; /* NONE for http and tcp rules */
    bool websocket;      /* WebSocket upgrades allowed (inspected traffic) */
    bool allow_plaintext_inject;
    bool api_transforms;      /* `api_transforms: allow`: API-given headers may go to its hosts */
    enum policy_scrub scrub;  /* NONE unless the rule injects */
    const char *const *hosts; /* canonical patterns; n_hosts == 0 for CIDR rules */
    size_t n_hosts;
    const char *const *cidrs; /* canonical "10.20.0.5/32" */
    size_t n_cidrs;
    const struct policy_port_range *ports;
    size_t n_ports;
    const char *const *methods; /* n_methods == 0: any method */
    size_t n_methods;
    const char *const *paths; /* n_paths == 0: any path */
    size_t n_paths;
    /* Methods without body semantics (GET, HEAD, OPTIONS, DELETE, TRACE) whose requests may
     * carry a body on this rule; requests of the others with a body are refused. */
    const char *const *body_methods;
    size_t n_body_methods;
    const struct policy_inject *inject;
    size_t n_inject;
};

struct policy_limits {
    uint64_t max_connections;  /* 0 = not set: the proxy's default applies */
    uint64_t max_request_body; /* bytes */
    uint64_t max_requests_per_second;
};

struct policy_dns {
    enum policy_dns_resolve resolve;
    uint64_t min_ttl_ms, max_ttl_ms; /* clamps for cached answers */
};

struct policy_placeholder {
    const char *env;    /* environment variable the sandbox sees */
    const char *secret; /* vault secret it stands for */
};

const char *policy_name(const struct policy *p);
const char *policy_description(const struct policy *p); /* NULL if none */
const char *policy_file(const struct policy *p);        /* NULL for buffers without one */
const char *policy_hash(const struct policy *p);        /* 64 lowercase hex chars */
enum policy_mode policy_mode(const struct policy *p);
size_t policy_rule_count(const struct policy *p);
const struct policy_rule *policy_rule_at(const struct policy *p, size_t i);
const struct policy_rule *policy_rule_find(const struct policy *p, const char *name);
const struct policy_limits *policy_limits(const struct policy *p);
const struct policy_dns *policy_dns(const struct policy *p);
/* Placeholder-mode injections: one entry per env var (an env var maps to one secret). */
const struct policy_placeholder *policy_placeholders(const struct policy *p, size_t *n);
/* Host patterns of every rule that inspects TLS (allow or deny), deduplicated: the names a
 * per-sandbox CA must be able to sign for (X.509 name constraints, issue 8). */
const char *const *policy_intercepted_names(const struct policy *p, size_t *n);
/* Canonical JSON of the policy (what the hash covers); caller frees. */
char *policy_canonical_json(const struct policy *p);

/* ---- decisions ------------------------------------------------------------------------ */

enum policy_verdict { POLICY_DENY = 0, POLICY_ALLOW = 1 };

/* Stable reason codes (policy_reason_code() gives the string written to audit records). */
enum policy_reason {
    POLICY_R_RULE_ALLOWS = 0, /* "rule_allows" */
    POLICY_R_RULE_DENIES,     /* "rule_denies" */
    POLICY_R_NO_RULE,         /* "no_rule_matched" */
    POLICY_R_SCHEME,          /* "scheme_not_allowed": a rule names the host, other scheme */
    POLICY_R_PORT,            /* "port_not_allowed" */
    POLICY_R_METHOD,          /* "method_not_allowed" */
    POLICY_R_PATH,            /* "path_not_allowed" */
    POLICY_R_INTERNAL,        /* "internal_address": internal/special, no CIDR rule opens it */
    POLICY_R_INVALID_HOST,    /* "invalid_host": not a valid name or address */
    POLICY_R_INVALID_PATH,    /* "invalid_path": malformed or ambiguous (.., //, %2e, ...) */
    POLICY_R_INVALID_REQUEST, /* "invalid_request": bad method token, port 0, no target */
    POLICY_R_ADDR_MISMATCH,   /* "address_mismatch": IP-literal host != destination address */
    POLICY_R_NARROWED,        /* "sandbox_network_denies": E2B allowOut/denyOut/no internet */
    POLICY_R_DNS_DISABLED,    /* "dns_disabled": dns.resolve is none */
    POLICY_R_BODY,            /* "request_body_not_allowed": a body on GET, HEAD, OPTIONS,
                                 DELETE or TRACE the deciding rule's body_methods does not
                                 list (request smuggling through an upstream that ignores
                                 it); a malformed request (HTTP 400), enforced in report mode
                                 too */
    POLICY_R__COUNT
};

struct policy_request {
    const char *host; /* SNI / Host / CONNECT authority (raw), or NULL */
    size_t host_len;
    const struct policy_addr *addr; /* destination address (original or resolved), or NULL */
    uint16_t port;
    enum policy_scheme scheme; /* what the proxy observed: TLS, plain HTTP, or neither (TCP) */
    const char *method;        /* NULL: connection-level decision (method/path not known) */
    size_t method_len;
    /* Origin-form request target ("/a?q"; the query is ignored); an absolute-form target
     * must be split by the caller first. Given together with method, or not at all. */
    const char *path;
    size_t path_len;
    /* The request carries a body (Content-Length > 0, or any Transfer-Encoding). */
    bool body;
};

struct policy_decision {
    enum policy_verdict verdict;        /* what to do */
    bool would_deny;                    /* report mode: allowed, but enforcement would deny */
    enum policy_reason reason;          /* why (for would_deny: why it would be denied) */
    const struct policy_rule *rule;     /* deciding rule; for port/method/path misses the
                                         * rule that named the host; NULL when none */
    enum policy_tls tls;                /* connection level: what to do with the TLS stream
                                         * (HTTPS allow: PASSTHROUGH or INSPECT); request
                                         * level: the matched rule's setting; else NONE */
    bool websocket;                     /* upgrades to WebSocket allowed for this request */
    const struct policy_inject *inject; /* request-level allow only: headers to inject */
    size_t n_inject;
    struct policy_host host;           /* canonical host (or address) decided on */
    struct policy_addr_info addr_info; /* class of the destination address, if known */
};

/* Decides one connection (method == NULL) or one request. Rules are tried in order, first
 * full match wins, no match denies. Internal addresses are denied unless a CIDR rule opens
 * them, whatever the mode. Returns 0 (the decision is in out) — errors in the request are
 * decisions too (invalid_*), never failures. */
int policy_decide(const struct policy *p, const struct policy_request *req,
                  struct policy_decision *out);
/* DNS: may the sandbox resolve this name? Allowed when some allow rule could match the name
 * on some port/scheme and dns.resolve is "allowed". */
int policy_dns_decide(const struct policy *p, const char *name, size_t len,
                      struct policy_decision *out);
const char *policy_reason_code(enum policy_reason r);
/* Whether a denial with this reason refuses the request itself rather than where it goes
 * (request_body_not_allowed): proxies answer 400 bad_request instead of 403. */
bool policy_reason_is_malformed(enum policy_reason r);
/* One human sentence about a decision, e.g. "rule 'github-api' allows GET on
 * api.github.com:443". Returns the length written (always NUL-terminated). */
size_t policy_explain(const struct policy *p, const struct policy_request *req,
                      const struct policy_decision *d, char *buf, size_t len);

/* ---- queries: a request as a person writes it (policy/query.c) ------------------------ */

/* What `airlock policy explain|test` and the console's explain decide: a URL form of
 * docs/policy.md (https://host[:port]/path, http://host[:port]/path, host:port or
 * tcp://host:port for raw TCP, dns:NAME for a DNS question) read into a policy_request. */
struct policy_query {
    struct policy_request req;
    bool dns; /* dns:NAME: host is the name asked */
    char host[1100];
    char path[POLICY_PATH_MAX + 1];
    char method[40];
    struct policy_addr addr;
};

struct policy_query_opts {
    const char *method; /* NULL: GET for http:// and https:// URLs */
    bool connection;    /* the connection-level decision (no method or path) */
    const char *addr;   /* the destination address (what the name resolved to), or NULL */
    bool body;          /* the request carries a body */
};

/* Reads url with o (NULL: none) into q. Returns 0, or -EINVAL with err saying what is wrong
 * with the text and how to write it (the proxies' request-target parser's reasons). */
int policy_query_parse(const char *url, const struct policy_query_opts *o, struct policy_query *q,
                       struct al_error *err);
void policy_query_decide(const struct policy *p, const struct policy_query *q,
                         struct policy_decision *d);
/* policy_explain() of the query's decision. */
size_t policy_query_explain(const struct policy *p, const struct policy_query *q,
                            const struct policy_decision *d, char *buf, size_t len);
/* The decision as `airlock policy explain --json` prints it (docs/policy.md); NULL without
 * memory. Names injected headers, never their values or secrets. */
json_t *policy_query_json(const struct policy *p, const struct policy_query *q,
                          const struct policy_decision *d);
const char *policy_tls_name(enum policy_tls t); /* "none", "passthrough", "inspect" */

/* ---- test cases (policy/cases.c) --------------------------------------------------------- */

/* One case of a CASES document (docs/policy.md, "The CASES format") decided: what it expects
 * and what the policy answers. The strings live for the callback only. */
struct policy_case_result {
    const char *name; /* its name:, or "case N" */
    const char *file; /* where it is written (may be NULL) */
    unsigned line;    /* its line there */
    const char *url;  /* what it asks (url:), and with which method ("" for none: a
                             * connection or a DNS question) */
    const char *method;
    bool pass;               /* every key it gives matched */
    const char *expect;      /* "allow" | "deny" */
    bool has_expect_rule;    /* it names the rule (rule:) */
    const char *expect_rule; /* that rule; NULL for rule: null */
    const char *decision;    /* "allow" | "deny" */
    bool would_deny;
    const char *reason;   /* policy_reason_code() */
    const char *rule;     /* the deciding rule, NULL for none */
    unsigned rule_line;   /* its line in the policy */
    const char *why;      /* policy_query_explain() */
    const char *failures; /* "expected deny, got allow; expected rule ..." ("" on a pass) */
};
typedef void (*policy_case_cb)(const struct policy_case_result *r, void *arg);
struct policy_cases_summary {
    size_t total, passed, failed, malformed; /* malformed: reported in the diagnostics */
};

/* Runs every case of a CASES document's root against p, calling cb (may be NULL) for each
 * case that could be run, in order. A malformed case is a diagnostic in d and counted, the
 * others still run. Returns 0 when the document has a list of cases (sum says how they went),
 * -EINVAL with a diagnostic when it has none. */
int policy_cases_run(struct policy *p, const struct al_yaml_node *root, policy_case_cb cb,
                     void *arg, struct policy_cases_summary *sum, struct al_diags *d);
/* The same over the file at path: a file that cannot be read or parsed is an error in d and
 * al_yaml_load_file()'s return (-ENOENT for none). */
int policy_cases_run_file(struct policy *p, const char *path, policy_case_cb cb, void *arg,
                          struct policy_cases_summary *sum, struct al_diags *d);

/* Request paths as the matcher sees them: query cut off, unreserved percent-escapes
 * decoded, other escapes upper-cased; dot segments, empty segments, backslashes, NUL,
 * non-ASCII and traversal hidden behind %2F/%5C refused (-EINVAL). out >= POLICY_PATH_MAX+1. */
int policy_path_normalize(const char *in, size_t len, char *out, size_t outlen,
                          struct al_error *err);
/* Validates a path pattern (exact, '*' within a segment, '**' as a whole segment). */
int policy_path_pattern_check(const char *pattern, struct al_error *err);
bool policy_path_match(const char *pattern, const char *normalized_path);

/* ---- narrowing by E2B network fields (issue 6) ---------------------------------------- */

/* One API-given header transform (E2B network.rules): headers set on requests toward the
 * domain, from vault secrets (the values never pass through here). */
struct policy_transform_header {
    const char *name;   /* an injectable header name (policy_header_injectable) */
    const char *secret; /* vault secret holding the value */
};
struct policy_transform {
    const char *domain; /* E2B spelling (policy_transform_domain_canon) */
    const struct policy_transform_header *headers;
    size_t n_headers;
};

struct policy_narrowing {
    bool no_internet;             /* allow_internet_access == false */
    const char *const *allow_out; /* IPs, CIDRs, names, *.names (any depth) */
    size_t n_allow_out;
    const char *const *deny_out; /* IPs, CIDRs (0.0.0.0/0 = all traffic), names */
    size_t n_deny_out;
    /* Header transforms: each domain must be covered by a rule with `api_transforms: allow`
     * (policy_transform_rule), else policy_narrow() refuses naming it. A request such a rule
     * allows toward a name gets the headers of the transform policy_transform_pick() picks,
     * after the rule's own inject entries (a header the rule injects is not overridden), as
     * inject entries of the decision ("${secret:NAME}"): the injector's gates, the sandbox's
     * copy removed, scrubbing and audit apply as to any inject entry. */
    const struct policy_transform *transforms;
    size_t n_transforms;
};
#define POLICY_TRANSFORMS_MAX        16 /* domains of one sandbox */
#define POLICY_TRANSFORM_HEADERS_MAX 8  /* headers of one domain */

/* The narrowing as JSON, the form airlockd and airlock-egress exchange:
 *   {"allow_internet_access"?: bool, "allow_out"?: [..], "deny_out"?: [..],
 *    "transforms"?: [{"domain": "api.example.com", "headers": [{"name", "secret"}]}]}
 * Checks the shape (-EINVAL with err), then narrows base (policy_narrow). */
int policy_narrowing_json_check(const json_t *n, struct al_error *err);
struct policy *policy_narrow_json(struct policy *base, const json_t *n, struct al_error *err);

/* A new policy that allows only what base allows AND what the E2B fields let through
 * (allowOut wins over denyOut, as in E2B; no_internet = denyOut 0.0.0.0/0). It can only
 * remove; it never opens anything base does not. Its hash covers base and the narrowing.
 * Returns NULL with err explaining a malformed entry. */
struct policy *policy_narrow(struct policy *base, const struct policy_narrowing *n,
                             struct al_error *err);
/* The policy under every narrowing of p (p itself when it is not narrowed), with a new
 * reference: what a sandbox's narrowing is replaced on (an update of its E2B fields
 * narrows this policy afresh, it does not narrow the previous narrowing). */
struct policy *policy_unnarrowed(struct policy *p);
/* Whether every narrowing of p lets a destination through: name (canonical, or NULL) and
 * address (or NULL), as policy_decide() asks the narrowings before its rules. True for a
 * policy that is not narrowed. Used to judge established connections again after their
 * sandbox's narrowing was replaced (the rules below it are the same). */
bool policy_narrowing_passes(const struct policy *p, const char *name, size_t len,
                             const struct policy_addr *a);

/* ---- API-given header transforms (E2B network.rules; policy/transform.c) --------------- */

/* A transform's domain in E2B's spelling: "api.example.com", or "*.example.com" for every
 * subdomain at any depth (canonical "**.example.com"); "*", globs, deeper wildcards and
 * addresses are refused (-EINVAL, err naming the domain). */
int policy_transform_domain_canon(const char *in, size_t len, struct policy_pattern *out,
                                  struct al_error *err);
/* The first allow rule of p with `api_transforms: allow` one of whose host patterns matches
 * every name domain matches, or NULL: API-given headers for that domain are refused. */
const struct policy_rule *policy_transform_rule(const struct policy *p,
                                                const struct policy_pattern *domain);
/* Which of n transform domains applies to canonical host: the exact one, else the longest
 * wildcard that matches; -1 for none. */
long policy_transform_pick(const struct policy_pattern *const *domains, size_t n, const char *host,
                           size_t len);

#endif
