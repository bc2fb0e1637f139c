/* common/http_head: the wire rules of an HTTP/1 message head, once for every component: the
 * server and client of common/http.h, egress's plain and intercepted proxy paths (requests
 * from sandboxes, responses from upstreams) and everything built on them.
 *
 * Owns: the head scanner (below), the request-target and authority parser (RFC 9112 3.2,
 * the one every component uses: servers, proxies, the agent's forwarder and the client's URL
 * targets), and what a relay forwards of a message's fields (the hop-by-hop rule with the
 * Connection option list, RFC 9110 7.6.1), used by every relay in the tree: airlockd's
 * sandbox proxy, the agent's port forwarder, egress's plain and intercepted paths, on
 * requests and responses alike; and the reading and filtering of cookie lists (RFC 6265:
 * the Cookie and Set-Cookie fields airlockd's sandbox proxy and console rewrite).
 *
 * The head scanner finds where a head ends and refuses, before anything acts
 * on the head, the shapes llhttp lets through or would repair silently: obs-fold (llhttp
 * unfolds it), bare LF or bare CR line ends, controls (NUL included) in header lines other
 * than HTAB in values, header names that are not tokens directly followed by ':', start
 * lines that are not "METHOD SP target SP HTTP/d.d" (a target of visible ASCII) or
 * "HTTP/d.d SP ddd[ SP reason]", and heads larger than a bound. The version's meaning
 * (1.0 and 1.1 only, the HTTP/2 preface) and every semantic check (one Host, framing,
 * target forms) are the caller's, on the parsed head.
 *
 * Incremental: bytes may come in any pieces (one at a time included); the state carries
 * what a split line needs. Pure: no I/O, no allocation, safe from any thread.
 */
#ifndef AIRLOCK_COMMON_HTTP_HEAD_H
#define AIRLOCK_COMMON_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct al_http_head_scan {
    uint32_t bytes;  /* bytes of this head so far (leading empty lines included) */
    uint32_t max;    /* bound on bytes; 0 = no bound */
    uint32_t lines;  /* complete non-empty lines */
    uint16_t pos;    /* position in the current start-line field (version, status) */
    uint8_t state;   /* where in a line the next byte falls */
    bool request;    /* a request head (else a response head) */
    const char *why; /* the refusal's reason code, once refused */
};

/* Starts a head. Requests may be preceded by empty lines (RFC 9112 2.2), responses not. */
void al_http_head_scan_init(struct al_http_head_scan *s, bool request, size_t max);

/* Scans n more bytes of the head. Returns 0 when all n belong to a head not complete yet,
 * 1 when the head ends inside them (*used: the bytes of p up to and including its blank
 * line), -E2BIG when it grew past max (reason "head_too_large"), -EBADMSG when it is
 * malformed (*used: the offset in p of the byte refused). After a refusal, every further
 * call repeats it. */
int al_http_head_scan(struct al_http_head_scan *s, const char *p, size_t n, size_t *used);

/* The refusal's reason code: "head_too_large", "invalid_line_ending", "obs_fold",
 * "invalid_header_name", "invalid_header_value", "invalid_request_line",
 * "invalid_status_line"; NULL while nothing was refused. */
const char *al_http_head_scan_reason(const struct al_http_head_scan *s);
/* The same, as a sentence for a person ("obsolete line folding (a header line starts with
 * whitespace)"). */
const char *al_http_head_scan_message(const struct al_http_head_scan *s);

/* ---- request-target and authority ---------------------------------------------------- */

/* The authority of an absolute- or authority-form target, or a Host value: pointers into
 * the parsed text, not NUL-terminated. */
struct al_http_authority {
    const char *text; /* the whole authority, "host", "host:port", "[v6]:port" */
    size_t len;
    const char *host; /* the host: a name or IPv4 address, or an IPv6 literal without its
                         brackets */
    size_t host_len;
    bool ip6;      /* host was a bracketed IPv6 literal */
    bool has_port; /* a port was given (port is 0 otherwise) */
    uint16_t port;
};

enum al_http_target_form {
    AL_HTTP_TARGET_ORIGIN = 1, /* "/path?query" */
    AL_HTTP_TARGET_ABSOLUTE,   /* "http://authority/path?query" (http or https) */
    AL_HTTP_TARGET_AUTHORITY,  /* "host:port" (CONNECT) */
    AL_HTTP_TARGET_ASTERISK,   /* "*" (OPTIONS) */
};

struct al_http_target {
    enum al_http_target_form form;
    bool https;                         /* absolute-form with the https scheme */
    struct al_http_authority authority; /* absolute- and authority-form */
    /* origin- and absolute-form: the path (empty for "http://h" and "http://h?q": the
     * origin-form of those is "/" and "/?q") and the query after '?', not percent-decoded */
    const char *path;
    size_t path_len;
    const char *query;
    size_t query_len;
    bool has_query; /* a '?' was there (query may still be empty) */
};

/* al_http_target_parse's flags. */
enum {
    /* Parse a target that is none of the other forms as authority-form (a CONNECT target,
     * a client's "host:port"); without it such a target is "invalid_target". */
    AL_HTTP_TARGET_AUTHORITY_OK = 1u << 0,
    /* Refuse a backslash anywhere ("backslash_in_target"): a proxy's rule, since URL
     * parsers that follow WHATWG read it as '/' where the upstream may not. A server keeps
     * them: browsers send them raw in queries. */
    AL_HTTP_TARGET_NO_BACKSLASH = 1u << 1,
};

/* Parses the request-target t (n bytes) into out (pointers into t). Returns 0, or -EINVAL
 * with *reason one of "invalid_target" (empty, a byte that is not visible ASCII, none of
 * the forms, a scheme other than http or https), "fragment_in_target" (a '#': no form has
 * one), "backslash_in_target" (with AL_HTTP_TARGET_NO_BACKSLASH), "missing_port" (an
 * authority-form without its port) or one of al_http_authority_parse's. Which form a
 * method may use, and which scheme a port, are the caller's to check. Pure, as above. */
int al_http_target_parse(const char *t, size_t n, unsigned flags, struct al_http_target *out,
                         const char **reason);

/* Parses an authority or a Host value (OWS around it is not part of it) into out:
 * "host", "host:port", "[v6]", "[v6]:port". The host is a name or an IPv4 address (letters,
 * digits, '-', '.', '_', '~'; at most 255 bytes) or a bracketed IPv6 address (no zone id);
 * the port 1 to 65535 in at most five digits. Returns 0, or -EINVAL with *reason one of
 * "missing_host", "userinfo_in_authority" (a '@'), "backslash_in_authority",
 * "invalid_host", "invalid_port". */
int al_http_authority_parse(const char *a, size_t n, struct al_http_authority *out,
                            const char **reason);
/* The host of a as written, an IPv6 literal with its brackets ("[2001:db8::1]"): what the
 * policy's canonicaliser (policy_host_canon) and audit records take. *len gets its length. */
const char *al_http_authority_host(const struct al_http_authority *a, size_t *len);
/* What an origin- or absolute-form target t asks its origin for, its path with the query:
 * "/" for the empty path of "http://h", "/?q" for "http://h?q". Into out (len bytes,
 * NUL-terminated); 0, or -ENAMETOOLONG when it does not fit. */
int al_http_target_origin(const struct al_http_target *t, char *out, size_t len);
/* The refusal reason of either parser as a sentence for a person ("the port is not a number
 * from 1 to 65535"); the reason itself if it is not theirs. */
const char *al_http_target_message(const char *reason);

/* ---- forwarding ---------------------------------------------------------------------- */

/* A header field as a parser saw it: pointers into the message, not NUL-terminated. */
struct al_http_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
struct al_http_header; /* common/http.h: a field as NUL-terminated strings */

/* Whether the comma-separated list value (len bytes) holds token as one of its elements
 * (OWS around elements, case-insensitive). */
bool al_http_list_has(const char *value, size_t len, const char *token, size_t token_len);

/* ---- cookie lists (RFC 6265) ------------------------------------------------------------ */

/* A Cookie field's "name=value" pairs and a Set-Cookie field's pair and attributes are one
 * shape: segments separated by ';' (never inside one, RFC 6265 4.1.1). A segment as
 * al_http_cookie_next sees it, pointers into the list: */
struct al_http_cookie_seg {
    const char *raw;   /* the segment as written, from the byte after the ';' before it */
    size_t raw_len;    /* up to the next ';' or the end */
    const char *name;  /* after the leading blanks: up to the first '=' (the whole segment */
    size_t name_len;   /* without one), its trailing blanks left out (RFC 6265 5.2) */
    const char *value; /* after the '=', blanks at both ends left out; NULL without '=' */
    size_t value_len;
    size_t index; /* its place in the list, from 0 */
};

/* The next segment of list into *seg, which starts zeroed and carries the place: false once
 * none is left. The list "" is one empty segment, "a;" two. */
bool al_http_cookie_next(const char *list, struct al_http_cookie_seg *seg);

/* Whether al_http_cookie_filter leaves seg out. */
typedef bool al_http_cookie_drop_fn(const struct al_http_cookie_seg *seg, void *arg);

/* The cookie list in without the segments drop(seg, arg) names, into out: the others in
 * their order, each as written after a ';', the first one written without its leading
 * blanks. Blank segments go too, all but the first, which drop() sees as every other: in a
 * Set-Cookie field it is the cookie's pair, whose place an attribute must never take. The
 * result is never longer than in, so outlen >= strlen(in) + 1 always holds it. Returns how
 * many segments drop() left out, or -ENOSPC with out "" when outlen is smaller than that:
 * nothing that was not filtered ever comes out. */
int al_http_cookie_filter(const char *in, char *out, size_t outlen, al_http_cookie_drop_fn *drop,
                          void *arg);

/* al_http_forward_drops's flags. */
enum {
    /* A relay whose policy decided on the request line's method: the method-override fields
     * (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) go too, since an upstream
     * that honours one runs another method than the one decided. */
    AL_HTTP_FWD_METHOD_DECIDED = 1u << 0,
    /* The message switches protocols (a 101, or an upgrade request passed on as one):
     * Upgrade stays (the relay restates "Connection: Upgrade"). */
    AL_HTTP_FWD_UPGRADE = 1u << 1,
};

/* Whether a relay leaves the field name (len bytes) of a message behind: the hop-by-hop
 * fields (Connection, Keep-Alive, Proxy-Connection, TE, Transfer-Encoding, Trailer, Upgrade,
 * Proxy-Authenticate, Proxy-Authorization), every field a Connection field of the message
 * names (RFC 9110 7.6.1; f[0, n) are the message's fields, or only its Connection fields),
 * and Content-Length: a relay restates the framing of what it sends. Requests and responses
 * alike; flags as above. Host, Expect and protocol refusals are the caller's business. */
bool al_http_forward_drops(const struct al_http_field *f, size_t n, const char *name, size_t len,
                           unsigned flags);
/* The same for a message whose fields are NUL-terminated strings (common/http.h's server
 * and clients). */
bool al_http_forward_drops_header(const struct al_http_header *h, size_t n, const char *name,
                                  unsigned flags);

#endif
