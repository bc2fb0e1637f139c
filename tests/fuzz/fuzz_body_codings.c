/* tests/fuzz/fuzz_body_codings: the codings of a response body and the layered decoder
 * (egress/intercept/scrub.c: intercept_codings_of, intercept_body_*), whose input is whatever an
 * upstream sends. Layout: header lines "Name: value\n" up to an empty line, one byte (bits 0-1:
 * scrub mode, the rest: chunking seed), then the body. Checks, beyond memory safety: the coding
 * list keeps its invariants (content codings before transfer codings, counts, bounded names);
 * decoding gives the same result and the same outcome for any chunking; what a scrubbing decode let
 * through never holds the secret; output stays within the decoded bound. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress/intercept/scrub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SECRET[] = "fuzz_Secret-0123456789xyz";
#define BOUND (1u << 18)

struct outcome {
    enum intercept_body_mode mode;
    size_t n_layers;
    bool scrubbing, content_decoded;
};

/* Runs the whole body through a decoder in chunks drawn from seed (0: one piece). */
static int run(const struct intercept_codings *c, struct intercept_matcher *m,
               enum policy_scrub mode, const uint8_t *body, size_t blen, uint32_t seed,
               struct al_buf *out, struct outcome *info)
{
    struct intercept_body b;
    const char *reason = NULL;
    int r = intercept_body_start(&b, &m, 1, c, mode, BOUND, &reason);
    if (r < 0)
        return r;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t pos = 0; pos < blen && r == 0;) {
        x = x * 1103515245u + 12345u;
        size_t k = seed ? 1 + (x >> 16) % 301 : blen;
        if (k > blen - pos)
            k = blen - pos;
        r = intercept_body_feed(&b, body + pos, k, out, &reason);
        pos += k;
    }
    if (r == 0)
        r = intercept_body_finish(&b, out, &reason);
    if (r < 0 && !reason)
        __builtin_trap(); /* every failure says why */
    *info = (struct outcome){b.mode, b.n_layers, b.scrubbing, b.content_decoded};
    intercept_body_free(&b);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct al_http_field h[32];
    size_t nh = 0, pos = 0;
    while (pos < size && nh < 32) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t ll = nl ? (size_t)(nl - (data + pos)) : size - pos;
        if (ll == 0) {
            pos++;
            break;
        }
        const uint8_t *colon = memchr(data + pos, ':', ll);
        if (colon) {
            h[nh].name = (const char *)data + pos;
            h[nh].name_len = (size_t)(colon - (data + pos));
            h[nh].value = (const char *)colon + 1;
            h[nh].value_len = ll - h[nh].name_len - 1;
            nh++;
        }
        pos += ll + (nl ? 1 : 0);
    }
    struct intercept_codings c;
    intercept_codings_of(h, nh, &c);
    if (c.n > INTERCEPT_CODINGS_LIST || c.n > c.total || c.n_transfer > c.total ||
        (c.n < c.total && c.n != INTERCEPT_CODINGS_LIST))
        __builtin_trap();
    size_t seen_transfer = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.v[i].kind < INTERCEPT_CODING_GZIP || c.v[i].kind > INTERCEPT_CODING_UNKNOWN ||
            memchr(c.v[i].name, 0, sizeof c.v[i].name) == NULL)
            __builtin_trap();
        if (c.v[i].transfer)
            seen_transfer++;
        else if (seen_transfer)
            __builtin_trap(); /* a content coding after a transfer coding */
    }
    json_decref(intercept_codings_json(&c));
    if (pos >= size)
        return 0;
    uint8_t ctl = data[pos++];
    enum policy_scrub mode = (enum policy_scrub)(ctl % 3);
    const uint8_t *body = data + pos;
    size_t blen = size - pos;

    const void *vals[1] = {SECRET};
    size_t lens[1] = {sizeof SECRET - 1};
    struct intercept_matcher *m = NULL;
    if (intercept_matcher_new(vals, lens, 1, &m) < 0)
        return 0;
    struct al_buf one = AL_BUF_INIT, many = AL_BUF_INIT;
    struct outcome b1 = {0}, b2 = {0};
    int r1 = run(&c, m, mode, body, blen, 0, &one, &b1);
    int r2 = run(&c, m, mode, body, blen, (ctl >> 2) | 1u, &many, &b2);
    if (r1 != r2 || b1.mode != b2.mode)
        __builtin_trap();
    if (r1 == 0) {
        if (one.len != many.len || (one.len && memcmp(one.data, many.data, one.len) != 0))
            __builtin_trap();
        if (b1.n_layers > INTERCEPT_CODINGS_MAX || (!b1.scrubbing && b1.content_decoded))
            __builtin_trap();
        if (b1.mode == INTERCEPT_BODY_DECODE && one.len > BOUND)
            __builtin_trap();
        if (b1.scrubbing && one.len >= lens[0] && memmem(one.data, one.len, SECRET, lens[0]))
            __builtin_trap();
    }
    al_buf_free(&one);
    al_buf_free(&many);
    intercept_matcher_unref(m);
    return 0;
}
