/* egress/intercept/scrub: finding injected secrets (and placeholders) in bytes that are about
 * to reach a sandbox, and replacing them.
 *
 * Owns: the pattern set of a value (every spelling the proxy looks for), the matcher (an
 * Aho-Corasick automaton over those patterns), streaming replacement with bounded memory,
 * and the response-body pipeline (Content-Encoding: identity, gzip, x-gzip, deflate decoded
 * within a bound; anything else is "not inspectable").
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "policy/policy.h"

#define INTERCEPT_SCRUB_MIN_RAW      6
#define INTERCEPT_SCRUB_MIN_ENCODED  8
#define INTERCEPT_SCRUB_VALUE_MAX    (8 * 1024)
#define INTERCEPT_SCRUB_MAX_MATCHERS 8             /* matchers chained on one stream */
#define INTERCEPT_SCRUB_MAX_VALUES   32            /* values in one matcher */
#define INTERCEPT_SCRUB_DECODED_MAX  (64ull << 20) /* default bound of a decoded body */

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

/* ---- response bodies ----------------------------------------------------------------- */

enum intercept_body_mode {
    INTERCEPT_BODY_PASS = 0, /* nothing to scrub, or not inspectable under best_effort */
    INTERCEPT_BODY_SCRUB,    /* identity: scrubbed in place, same length */
    INTERCEPT_BODY_DECODE,   /* gzip/deflate: decoded, scrubbed, forwarded decoded (the head
                                 loses Content-Encoding and Content-Length) */
};

struct intercept_body {
    enum intercept_body_mode mode;
    bool not_inspected; /* best_effort let an uninspectable body through */
    struct intercept_scrub scrub;
    void *z; /* zlib stream (DECODE) */
    int zwbits;
    bool z_started, z_end;
    uint64_t decoded, max_decoded;
    struct al_buf zout;
};

/* Decides how a response body is handled, from its Content-Encoding header (NULL = none).
 * With no matchers the body passes. An encoding the proxy cannot decode (br, zstd,
 * compress, a chain of several) is refused under POLICY_SCRUB_STRICT (-EPROTO, *reason =
 * "unsupported_content_encoding") and passed uninspected under BEST_EFFORT. max_decoded
 * bounds DECODE (0 = INTERCEPT_SCRUB_DECODED_MAX). */
int intercept_body_start(struct intercept_body *b, struct intercept_matcher *const *m, size_t n,
                         const char *content_encoding, enum policy_scrub mode, uint64_t max_decoded,
                         const char **reason);
/* Body bytes as they came (after de-chunking) -> bytes for the sandbox, appended to out.
 * -EFBIG: the decoded body exceeds the bound (*reason "decoded_body_too_large"); -EBADMSG:
 * the encoded body is corrupt ("corrupt_encoding"). After an error, stop forwarding: the
 * response must be aborted. */
int intercept_body_feed(struct intercept_body *b, const void *in, size_t len, struct al_buf *out,
                        const char **reason);
/* End of the body: flushes held-back bytes. -EBADMSG when an encoded body ended early. */
int intercept_body_finish(struct intercept_body *b, struct al_buf *out, const char **reason);
void intercept_body_free(struct intercept_body *b);

#endif
