/* egress/intercept/scrub: finding injected secrets (and placeholders) in bytes that are about
 * to reach a sandbox, and replacing them.
 *
 * Owns: the pattern set of a value (every spelling the proxy looks for), the matcher (an
 * Aho-Corasick automaton over those patterns), streaming replacement with bounded memory,
 * the list of codings applied to a response body (every Content-Encoding field and element,
 * then the transfer codings other than the final chunked), and the response-body pipeline:
 * every layer of that list undone in turn (gzip, x-gzip, deflate; identity is no layer)
 * within bounds on layers, decoded size and expansion ratio, then scrubbed; anything else is
 * "not inspectable".
 *
 * Spellings of a value V (each a pattern, duplicates dropped): V itself; base64 and
 * base64url in each of the three alignments V can have inside a longer encoded text (the
 * characters that depend on V's bytes only); hex in lower and upper case; percent-encoding
 * of every byte (upper and lower case hex) and of reserved bytes only (RFC 3986 unreserved
 * kept); JSON string escapes that differ from V ("/" as "\/", "<>&" as \u003c...). Encoded
 * spellings shorter than INTERCEPT_SCRUB_MIN_ENCODED bytes are not looked for (too likely to
 * occur by chance), nor values shorter than INTERCEPT_SCRUB_MIN_RAW. A value longer than
 * INTERCEPT_SCRUB_VALUE_MAX is looked for by its first INTERCEPT_SCRUB_VALUE_MAX bytes (and
 * their spellings): an echo of it is then cut through its start, which breaks it.
 *
 * Replacement keeps lengths: every matched byte becomes a byte of "REDACTED" repeated, so
 * framing (Content-Length) survives and the text stays valid in JSON, URLs, headers and
 * base64. Overlapping matches are all replaced.
 *
 * Streaming: the matcher keeps back, at the end of each chunk, only the bytes that could
 * still begin a match (at most the longest pattern minus one): memory per stream is bounded
 * by that, whatever the body size. Matchers are immutable and reference-counted, shared by
 * any number of threads; a stream (struct intercept_scrub) belongs to one thread.
 *
 * The matcher's tables encode the secret: they are wiped when freed.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_SCRUB_H
#define AIRLOCK_EGRESS_INTERCEPT_SCRUB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "egress/intercept/request.h"
#include "policy/policy.h"

#define INTERCEPT_SCRUB_MIN_RAW      6
#define INTERCEPT_SCRUB_MIN_ENCODED  8
#define INTERCEPT_SCRUB_VALUE_MAX    (8 * 1024)
#define INTERCEPT_SCRUB_MAX_MATCHERS 8             /* matchers chained on one stream */
#define INTERCEPT_SCRUB_MAX_VALUES   32            /* values in one matcher */
#define INTERCEPT_SCRUB_DECODED_MAX  (64ull << 20) /* default bound of a decoded body */
#define INTERCEPT_CODINGS_MAX        3             /* layers the proxy undoes on one body */
#define INTERCEPT_CODINGS_LIST       8             /* codings kept by intercept_codings_of */
/* Decoded bytes per received byte beyond which a body is a decompression bomb: above what
 * one deflate layer can reach (about 1032), so only nested layers trip it; checked once the
 * decoded body passes INTERCEPT_DECODE_RATIO_FLOOR bytes. */
#define INTERCEPT_DECODE_RATIO_MAX   1100
#define INTERCEPT_DECODE_RATIO_FLOOR (1u << 20)

/* How a match was spelled (bit positions in the masks reported). */
enum intercept_enc {
    INTERCEPT_ENC_RAW = 0,
    INTERCEPT_ENC_BASE64,
    INTERCEPT_ENC_BASE64URL,
    INTERCEPT_ENC_HEX,
    INTERCEPT_ENC_PERCENT,
    INTERCEPT_ENC_JSON,
    INTERCEPT_ENC__COUNT
};
const char *intercept_enc_name(enum intercept_enc e); /* "raw", "base64", ... */

struct intercept_matcher;

/* Builds the matcher for n values (their spellings). -EINVAL for n == 0 or > MAX_VALUES,
 * -ENOMEM. Values shorter than INTERCEPT_SCRUB_MIN_RAW contribute nothing; a matcher may
 * therefore be empty (it never matches). */
int intercept_matcher_new(const void *const *values, const size_t *lens, size_t n,
                          struct intercept_matcher **out);
struct intercept_matcher *intercept_matcher_ref(struct intercept_matcher *m);
void intercept_matcher_unref(struct intercept_matcher *m); /* NULL is fine; wipes */
size_t intercept_matcher_patterns(const struct intercept_matcher *m);
size_t intercept_matcher_max_len(const struct intercept_matcher *m);

/* What a scan found. */
struct intercept_scrub_report {
    uint64_t matches;  /* occurrences replaced */
    uint32_t enc_mask; /* 1 << enum intercept_enc, for each spelling seen */
    uint32_t value_mask[INTERCEPT_SCRUB_MAX_MATCHERS]; /* per matcher: 1 << value index */
};

/* Replaces every occurrence in buf (in place; headers, URLs). Returns the number replaced
 * and adds to rep (may be NULL). */
size_t intercept_scrub_buffer(const struct intercept_matcher *m, size_t mi, void *buf, size_t len,
                              struct intercept_scrub_report *rep);
/* Whether buf contains an occurrence (nothing is changed). */
bool intercept_matcher_find(const struct intercept_matcher *m, const void *buf, size_t len);
/* Which values occur in buf (bit i = value i), in any spelling; nothing is changed. */
uint32_t intercept_matcher_find_mask(const struct intercept_matcher *m, const void *buf,
                                     size_t len);

/* ---- streams ------------------------------------------------------------------------ */

struct intercept_scrub_stage {
    const struct intercept_matcher *m;
    uint32_t state;
    struct al_buf carry; /* bytes held back (could begin a match) */
};

/* A stream through up to INTERCEPT_SCRUB_MAX_MATCHERS matchers (one per secret value set),
 * applied one after the other. */
struct intercept_scrub {
    struct intercept_scrub_stage st[INTERCEPT_SCRUB_MAX_MATCHERS];
    size_t n;
    struct al_buf tmp;
    struct intercept_scrub_report rep;
};

/* The matchers are referenced (kept alive) until intercept_scrub_free. */
int intercept_scrub_init(struct intercept_scrub *s, struct intercept_matcher *const *m, size_t n);
/* Appends the scrubbed output for in to out (possibly less than len: the rest is held back
 * until the next feed or finish). */
int intercept_scrub_feed(struct intercept_scrub *s, const void *in, size_t len, struct al_buf *out);
/* Flushes what was held back (the end of the stream). */
int intercept_scrub_finish(struct intercept_scrub *s, struct al_buf *out);
void intercept_scrub_free(struct intercept_scrub *s); /* wipes what it held */

/* ---- the codings of a response body ---------------------------------------------------- */

enum intercept_coding {
    INTERCEPT_CODING_GZIP = 1, /* gzip, x-gzip */
    INTERCEPT_CODING_DEFLATE,  /* deflate (zlib-wrapped, or raw as some servers send it) */
    INTERCEPT_CODING_UNKNOWN,  /* anything else (br, zstd, compress, parameters, a chunked
                                  that is not the final transfer coding, ...) */
};

struct intercept_coding_el {
    uint8_t kind;  /* enum intercept_coding */
    bool transfer; /* a transfer coding (else a content coding) */
    char name[24]; /* as written, lower case, cut at 23 bytes (for audit records) */
};

/* The codings applied to a body, in the order they were applied: v[0] first, so the proxy
 * undoes v[n-1] first. Content codings always come before transfer codings. */
struct intercept_codings {
    struct intercept_coding_el v[INTERCEPT_CODINGS_LIST];
    size_t n;          /* kept in v */
    size_t total;      /* named in all (n < total: more than v holds) */
    size_t n_transfer; /* of total: transfer codings */
    bool chunked;      /* Transfer-Encoding ends with chunked (the framing: not a layer) */
};

/* The one place that computes the codings of a response from its header fields: every
 * Content-Encoding field in order and every element of each (identity and empty elements
 * are no layer), then every Transfer-Encoding element except a chunked that ends the last
 * field. Names compare case-insensitively; an element with parameters is UNKNOWN. */
void intercept_codings_of(const struct al_http_field *h, size_t n, struct intercept_codings *out);
/* The names of c, in order, as a JSON array (new reference); NULL when c lists none. */
json_t *intercept_codings_json(const struct intercept_codings *c);
/* The same array as the member key of a record of egress/audit.h's writer; nothing when c
 * lists none. */
struct egress_recw;
void intercept_codings_write(const struct intercept_codings *c, const char *key,
                             struct egress_recw *w);

/* ---- response bodies ----------------------------------------------------------------- */

enum intercept_body_mode {
    INTERCEPT_BODY_PASS = 0, /* nothing to scrub, or not inspectable under best_effort */
    INTERCEPT_BODY_SCRUB,    /* no coding: scrubbed in place, same length */
    INTERCEPT_BODY_DECODE,   /* layers undone (then scrubbed when there is a secret): the body
                                goes decoded, without Content-Length, and without
                                Content-Encoding when content_decoded */
};

struct intercept_body_layer {
    void *z;   /* zlib stream */
    int wbits; /* 0: deflate, zlib or raw not decided yet (pre holds the first byte) */
    bool started, end;
    uint64_t out; /* bytes it produced */
    struct al_buf pre;
};

struct intercept_body {
    enum intercept_body_mode mode;
    bool not_inspected;   /* best_effort let a body through it could not read */
    bool content_decoded; /* DECODE undid the content codings (else only transfer ones) */
    bool scrubbing;       /* the decoded bytes go through scrub */
    struct intercept_scrub scrub;
    struct intercept_body_layer layer[INTERCEPT_CODINGS_MAX]; /* [0] is undone first */
    size_t n_layers;
    unsigned char *chunk; /* INTERCEPT_CODINGS_MAX inflate buffers */
    uint64_t received, decoded, max_decoded;
};

/* Decides how a response body with codings c (NULL: none) is handled, and starts it.
 * Transfer codings are always undone (the proxy re-frames the body and cannot pass them on):
 * one it cannot undo, or more than INTERCEPT_CODINGS_MAX of them, is refused in any mode
 * (-EPROTO, *reason "unsupported_transfer_coding" or "too_many_codings"). With matchers
 * (n > 0) and a mode other than NONE every content coding is undone as well, and the result
 * scrubbed; a content coding the proxy cannot undo, or more than INTERCEPT_CODINGS_MAX
 * layers in all, is refused under POLICY_SCRUB_STRICT (-EPROTO, "unsupported_content_encoding"
 * or "too_many_codings") and passed uninspected under BEST_EFFORT (the transfer codings still
 * undone, not_inspected set). Without matchers only transfer codings are undone. max_decoded
 * bounds what every layer produces (0 = INTERCEPT_SCRUB_DECODED_MAX). */
int intercept_body_start(struct intercept_body *b, struct intercept_matcher *const *m, size_t n,
                         const struct intercept_codings *c, enum policy_scrub mode,
                         uint64_t max_decoded, const char **reason);
/* Body bytes as they came (after de-chunking) -> bytes for the sandbox, appended to out.
 * -EFBIG: a layer's output exceeds the bound (*reason "decoded_body_too_large"), or the
 * decoded body grew more than INTERCEPT_DECODE_RATIO_MAX times what was received
 * ("decompression_ratio_exceeded"); -EBADMSG: a layer is corrupt ("corrupt_encoding").
 * After an error, stop forwarding: the response must be aborted. */
int intercept_body_feed(struct intercept_body *b, const void *in, size_t len, struct al_buf *out,
                        const char **reason);
/* End of the body: flushes held-back bytes. -EBADMSG when a layer ended early. */
int intercept_body_finish(struct intercept_body *b, struct al_buf *out, const char **reason);
void intercept_body_free(struct intercept_body *b);

#endif
