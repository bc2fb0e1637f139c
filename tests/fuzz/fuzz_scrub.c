/* tests/fuzz/fuzz_scrub: response scrubbing (egress/intercept/scrub.c), whose input is whatever an
 * upstream sends. Layout: byte 0 = secret length - 6 (mod 48), byte 1 = chunking seed and body
 * mode, then the secret, then the body. Checks, beyond memory safety: streaming gives exactly the
 * one-shot result for any chunking, lengths are kept, and the secret never survives (unless it is
 * made of the replacement's own letters). The body is also fed to the gzip and deflate decoders
 * with a small bound. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress/intercept/scrub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t slen = 6 + data[0] % 48;
    uint8_t seed = data[1];
    if (size < 2 + slen)
        return 0;
    const uint8_t *secret = data + 2;
    const uint8_t *body = secret + slen;
    size_t blen = size - 2 - slen;

    const void *vals[2] = {secret, "fixed-second-secret-0123456789"};
    size_t lens[2] = {slen, 30};
    struct intercept_matcher *m = NULL, *m2 = NULL;
    if (intercept_matcher_new(vals, lens, 1, &m) < 0)
        return 0;
    if (intercept_matcher_new(vals + 1, lens + 1, 1, &m2) < 0) {
        intercept_matcher_unref(m);
        return 0;
    }
    struct intercept_matcher *ms[2] = {m, m2};

    /* One shot, both matchers. */
    uint8_t *ref = malloc(blen ? blen : 1);
    memcpy(ref, body, blen);
    intercept_scrub_buffer(m, 0, ref, blen, NULL);
    intercept_scrub_buffer(m2, 1, ref, blen, NULL);

    /* Streamed with a chunking chosen by the seed. */
    struct intercept_scrub s;
    struct al_buf out = AL_BUF_INIT;
    intercept_scrub_init(&s, ms, 2);
    uint32_t x = seed * 2654435761u + 1;
    size_t pos = 0;
    while (pos < blen) {
        x = x * 1103515245u + 12345u;
        size_t k = 1 + (x >> 16) % 97;
        if (k > blen - pos)
            k = blen - pos;
        intercept_scrub_feed(&s, body + pos, k, &out);
        pos += k;
    }
    intercept_scrub_finish(&s, &out);
    intercept_scrub_free(&s);
    if (out.len != blen)
        __builtin_trap();
    /* Two chained stages may overlap replacements differently from the one-shot run only if
     * both secrets match overlapping text; compare against the same order: m then m2. */
    if (blen && memcmp(out.data, ref, blen) != 0)
        __builtin_trap();
    bool self_made = false;
    for (size_t i = 0; i < slen; i++)
        if (memchr("REDACT", secret[i], 6))
            self_made = true;
    if (!self_made && intercept_matcher_patterns(m) && blen >= slen &&
        memmem(out.data, blen, secret, slen))
        __builtin_trap();
    al_buf_free(&out);
    free(ref);

    /* The decoders on arbitrary bytes. */
    struct al_http_field ce = {"Content-Encoding", 16, (seed & 1) ? "gzip" : "deflate",
                               (seed & 1) ? 4 : 7};
    struct intercept_codings c;
    intercept_codings_of(&ce, 1, &c);
    struct intercept_body b;
    const char *reason = NULL;
    if (intercept_body_start(&b, ms, 2, &c, POLICY_SCRUB_STRICT, 1 << 16, &reason) == 0) {
        struct al_buf o2 = AL_BUF_INIT;
        size_t half = blen / 2;
        if (intercept_body_feed(&b, body, half, &o2, &reason) == 0 &&
            intercept_body_feed(&b, body + half, blen - half, &o2, &reason) == 0)
            intercept_body_finish(&b, &o2, &reason);
        if (o2.len > (1 << 16) + 16384)
            __builtin_trap();
        intercept_body_free(&b);
        al_buf_free(&o2);
    }
    intercept_matcher_unref(m);
    intercept_matcher_unref(m2);
    return 0;
}
