/* tests/unit/egress/intercept/test_scrub: the spellings of a secret, the matcher, streaming
 * replacement across chunk boundaries, the codings of a response body (every Content-Encoding
 * field and element, transfer codings), and response bodies (identity, gzip, deflate, layers
 * of them, bounds on size and ratio, unsupported codings). */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "al_test.h"
#include "egress/intercept/scrub.h"

static const char SECRET[] = "ghp_Zk9+q/Wm3xT0aBcD1eFgH2iJ/kLmN=";

static struct intercept_matcher *matcher_for(const char *v)
{
    const void *vals[] = {v};
    size_t lens[] = {strlen(v)};
    struct intercept_matcher *m = NULL;
    ck_assert_int_eq(intercept_matcher_new(vals, lens, 1, &m), 0);
    return m;
}

static bool contains(const void *hay, size_t n, const void *needle, size_t k)
{
    return k <= n && memmem(hay, n, needle, k) != NULL;
}

/* Scrubs text (one shot), checks it no longer contains needle and kept its length. */
static void expect_scrubbed(struct intercept_matcher *m, const char *text, const char *needle,
                            enum intercept_enc enc)
{
    size_t n = strlen(text);
    char *b = strdup(text);
    struct intercept_scrub_report rep = {0};
    size_t found = intercept_scrub_buffer(m, 0, b, n, &rep);
    ck_assert_msg(found >= 1, "no match in '%s'", text);
    ck_assert_msg(!contains(b, n, needle, strlen(needle)), "'%s' still holds '%s'", b, needle);
    ck_assert_msg(rep.enc_mask & (1u << enc), "encoding %s not reported (mask %x) for '%s'",
                  intercept_enc_name(enc), rep.enc_mask, text);
    ck_assert_uint_eq(strlen(b), n);
    free(b);
}

START_TEST(raw_and_hex)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    char t[512];
    snprintf(t, sizeof t, "{\"echo\":\"Bearer %s\"}", SECRET);
    expect_scrubbed(m, t, SECRET, INTERCEPT_ENC_RAW);
    char hex[200], HEX[200];
    sodium_bin2hex(hex, sizeof hex, (const unsigned char *)SECRET, strlen(SECRET));
    for (size_t i = 0; hex[i]; i++)
        HEX[i] = (char)((hex[i] >= 'a' && hex[i] <= 'f') ? hex[i] - 32 : hex[i]);
    HEX[strlen(hex)] = 0;
    snprintf(t, sizeof t, "x=%s;", hex);
    expect_scrubbed(m, t, hex, INTERCEPT_ENC_HEX);
    snprintf(t, sizeof t, "X=%s;", HEX);
    expect_scrubbed(m, t, HEX, INTERCEPT_ENC_HEX);
    intercept_matcher_unref(m);
}
END_TEST

/* base64 and base64url in every alignment, with and without padding, as a whole or inside
 * a longer encoded text (Basic auth "user:token"). */
START_TEST(base64_alignments)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    for (int variant = 0; variant < 2; variant++) {
        int v = variant ? sodium_base64_VARIANT_URLSAFE : sodium_base64_VARIANT_ORIGINAL;
        for (size_t k = 0; k < 6; k++) {
            for (size_t tail = 0; tail < 4; tail++) {
                char plain[256];
                size_t pl = 0;
                for (size_t i = 0; i < k; i++)
                    plain[pl++] = (char)('a' + i);
                memcpy(plain + pl, SECRET, strlen(SECRET));
                pl += strlen(SECRET);
                for (size_t i = 0; i < tail; i++)
                    plain[pl++] = ':';
                char enc[512];
                sodium_bin2base64(enc, sizeof enc, (const unsigned char *)plain, pl, v);
                char text[600];
                snprintf(text, sizeof text, "Authorization: Basic %s\r\n", enc);
                size_t n = strlen(text);
                struct intercept_scrub_report rep = {0};
                ck_assert_uint_ge(intercept_scrub_buffer(m, 0, text, n, &rep), 1);
                ck_assert(rep.enc_mask &
                              (1u << (variant ? INTERCEPT_ENC_BASE64URL : INTERCEPT_ENC_BASE64)) ||
                          rep.enc_mask & (1u << INTERCEPT_ENC_BASE64));
                /* Decoding what reaches the sandbox never yields the secret. */
                char *b64 = text + strlen("Authorization: Basic ");
                size_t bl = strlen(enc);
                unsigned char dec[512];
                size_t dl = 0;
                if (sodium_base642bin(dec, sizeof dec, b64, bl, NULL, &dl, NULL, v) == 0)
                    ck_assert_msg(!contains(dec, dl, SECRET, strlen(SECRET)), "k=%zu tail=%zu", k,
                                  tail);
            }
        }
    }
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(percent_and_json)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    /* encodeURIComponent style: '+', '/', '=' escaped, the rest kept. */
    char pct[256] = "", t[600];
    for (const char *s = SECRET; *s; s++) {
        char one[8];
        if (*s == '+' || *s == '/' || *s == '=')
            snprintf(one, sizeof one, "%%%02X", (unsigned char)*s);
        else
            snprintf(one, sizeof one, "%c", *s);
        strcat(pct, one);
    }
    snprintf(t, sizeof t, "https://x.test/cb?token=%s&x=1", pct);
    expect_scrubbed(m, t, pct, INTERCEPT_ENC_PERCENT);
    /* lower-case escapes */
    char low[256];
    strcpy(low, pct);
    for (char *p = low; *p; p++)
        if (*p == '%') {
            p[1] = (char)(p[1] >= 'A' && p[1] <= 'F' ? p[1] + 32 : p[1]);
            p[2] = (char)(p[2] >= 'A' && p[2] <= 'F' ? p[2] + 32 : p[2]);
        }
    snprintf(t, sizeof t, "q=%s", low);
    expect_scrubbed(m, t, low, INTERCEPT_ENC_PERCENT);
    /* every byte escaped */
    char all[400] = "";
    for (const char *s = SECRET; *s; s++) {
        char one[8];
        snprintf(one, sizeof one, "%%%02X", (unsigned char)*s);
        strcat(all, one);
    }
    snprintf(t, sizeof t, "q=%s", all);
    expect_scrubbed(m, t, all, INTERCEPT_ENC_PERCENT);
    /* JSON with escaped slashes (PHP) */
    char js[256];
    size_t jl = 0;
    for (const char *s = SECRET; *s; s++) {
        if (*s == '/')
            js[jl++] = '\\';
        js[jl++] = *s;
    }
    js[jl] = 0;
    snprintf(t, sizeof t, "{\"headers\":{\"authorization\":\"token %s\"}}", js);
    expect_scrubbed(m, t, js, INTERCEPT_ENC_JSON);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(no_false_positives)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    const char *texts[] = {
        "{\"login\":\"octocat\",\"id\":1}",
        "ghp_Zk9+q/Wm3xT0aBcD1eFgH2iJ/kLmN",  /* one byte short */
        "hp_Zk9+q/Wm3xT0aBcD1eFgH2iJ/kLmN=",  /* missing the first byte */
        "GHP_ZK9+Q/WM3XT0ABCD1EFGH2IJ/KLMN=", /* case changed */
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char *b = strdup(texts[i]);
        ck_assert_uint_eq(intercept_scrub_buffer(m, 0, b, strlen(b), NULL), 0);
        ck_assert_str_eq(b, texts[i]);
        ck_assert(!intercept_matcher_find(m, b, strlen(b)));
        free(b);
    }
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(short_values_are_not_patterns)
{
    struct intercept_matcher *m = matcher_for("abc12");
    ck_assert_uint_eq(intercept_matcher_patterns(m), 0);
    char b[] = "xxabc12xx";
    ck_assert_uint_eq(intercept_scrub_buffer(m, 0, b, strlen(b), NULL), 0);
    intercept_matcher_unref(m);
    const void *vals[1] = {"x"};
    size_t lens[1] = {1};
    ck_assert_int_eq(intercept_matcher_new(vals, lens, 0, &m), -EINVAL);
}
END_TEST

/* The same result whatever the chunking: split at every position, and random chunkings. */
static void stream_all(struct intercept_matcher *const *ms, size_t nm, const char *in, size_t n,
                       const size_t *cuts, size_t ncuts, struct al_buf *out)
{
    struct intercept_scrub s;
    ck_assert_int_eq(intercept_scrub_init(&s, ms, nm), 0);
    size_t pos = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        ck_assert_int_eq(intercept_scrub_feed(&s, in + pos, end - pos, out), 0);
        pos = end;
    }
    ck_assert_int_eq(intercept_scrub_finish(&s, out), 0);
    intercept_scrub_free(&s);
}

START_TEST(streaming_equals_one_shot)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    char text[2048];
    char enc[200];
    sodium_bin2base64(enc, sizeof enc, (const unsigned char *)SECRET, strlen(SECRET),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(text, sizeof text, "start %s middle %s%s end %s", SECRET, SECRET, enc, SECRET);
    size_t n = strlen(text);
    char *ref = strdup(text);
    intercept_scrub_buffer(m, 0, ref, n, NULL);
    ck_assert(!contains(ref, n, SECRET, strlen(SECRET)));
    for (size_t cut = 0; cut <= n; cut++) {
        struct al_buf out = AL_BUF_INIT;
        size_t cuts[1] = {cut};
        stream_all(&m, 1, text, n, cuts, 1, &out);
        ck_assert_uint_eq(out.len, n);
        ck_assert_msg(memcmp(out.data, ref, n) == 0, "cut %zu: %s", cut, out.data);
        al_buf_free(&out);
    }
    /* one byte at a time */
    size_t cuts[2048] = {0};
    for (size_t i = 0; i < n; i++)
        cuts[i] = i;
    struct al_buf out = AL_BUF_INIT;
    stream_all(&m, 1, text, n, cuts + 1, n - 1, &out);
    ck_assert_uint_eq(out.len, n);
    ck_assert(memcmp(out.data, ref, n) == 0);
    al_buf_free(&out);
    free(ref);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(two_secrets_two_stages)
{
    const char *a = "sk-live-AAAAbbbbCCCCdddd", *b = "xoxb-1111-2222-zzzzyyyy";
    struct intercept_matcher *ms[2] = {matcher_for(a), matcher_for(b)};
    char text[256];
    snprintf(text, sizeof text, "[%s|%s|%s]", b, a, b);
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        struct al_buf out = AL_BUF_INIT;
        size_t cuts[1] = {cut};
        stream_all(ms, 2, text, n, cuts, 1, &out);
        ck_assert_uint_eq(out.len, n);
        ck_assert(!contains(out.data, n, a, strlen(a)));
        ck_assert(!contains(out.data, n, b, strlen(b)));
        ck_assert_int_eq(out.data[0], '[');
        ck_assert_int_eq(out.data[n - 1], ']');
        al_buf_free(&out);
    }
    intercept_matcher_unref(ms[0]);
    intercept_matcher_unref(ms[1]);
}
END_TEST

/* Memory stays bounded by the longest pattern whatever the body size. */
START_TEST(bounded_memory_large_body)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    struct intercept_scrub s;
    ck_assert_int_eq(intercept_scrub_init(&s, &m, 1), 0);
    char chunk[4096];
    uint64_t seed = 42;
    size_t total = 0, planted = 0;
    struct al_buf out = AL_BUF_INIT;
    size_t seen_secret = 0;
    for (int round = 0; round < 2500; round++) { /* 10 MiB */
        for (size_t i = 0; i < sizeof chunk; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            chunk[i] = (char)('a' + (seed >> 33) % 26);
        }
        if (round % 25 == 0) {
            size_t at = (size_t)(seed >> 40) % (sizeof chunk - 1);
            size_t k = strlen(SECRET);
            /* straddle the chunk end now and then */
            size_t room = sizeof chunk - at;
            memcpy(chunk + at, SECRET, k < room ? k : room);
            planted++;
            if (k > room) {
                ck_assert_int_eq(intercept_scrub_feed(&s, chunk, sizeof chunk, &out), 0);
                total += sizeof chunk;
                memcpy(chunk, SECRET + room, k - room);
                ck_assert_int_eq(intercept_scrub_feed(&s, chunk, k - room, &out), 0);
                total += k - room;
                goto drain;
            }
        }
        ck_assert_int_eq(intercept_scrub_feed(&s, chunk, sizeof chunk, &out), 0);
        total += sizeof chunk;
    drain:
        ck_assert_uint_lt(s.st[0].carry.len, intercept_matcher_max_len(m));
        ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
        if (out.len > 65536) {
            seen_secret += out.len;
            al_buf_reset(&out);
        }
    }
    ck_assert_int_eq(intercept_scrub_finish(&s, &out), 0);
    seen_secret += out.len;
    ck_assert_uint_eq(seen_secret, total);
    ck_assert_uint_eq(s.rep.matches, planted);
    al_buf_free(&out);
    intercept_scrub_free(&s);
    intercept_matcher_unref(m);
}
END_TEST

/* ---- bodies ---- */

static size_t compress_with(int wbits, const void *in, size_t n, unsigned char *out, size_t cap)
{
    z_stream z = {0};
    ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t r = cap - z.avail_out;
    deflateEnd(&z);
    return r;
}

/* The codings of a head given as "Name: value" lines ('\n'-separated); a spec without ':'
 * is one Content-Encoding value; NULL is none. */
static void codings_from(const char *spec, struct intercept_codings *c)
{
    struct al_http_field h[32];
    size_t n = 0;
    static char buf[4096];
    if (spec && !strchr(spec, ':')) {
        snprintf(buf, sizeof buf, "Content-Encoding:%s", spec);
        spec = buf;
    } else if (spec) {
        snprintf(buf, sizeof buf, "%s", spec);
        spec = buf;
    }
    for (char *line = (char *)spec; line && *line && n < 32;) {
        char *nl = strchr(line, '\n');
        char *colon = strchr(line, ':');
        ck_assert_ptr_nonnull(colon);
        h[n].name = line;
        h[n].name_len = (size_t)(colon - line);
        h[n].value = colon + 1;
        h[n].value_len = nl ? (size_t)(nl - colon - 1) : strlen(colon + 1);
        n++;
        line = nl ? nl + 1 : NULL;
    }
    intercept_codings_of(h, n, c);
}

static int body_run_n(struct intercept_matcher *m, size_t nm, const char *ce,
                      enum policy_scrub mode, uint64_t bound, const void *in, size_t n,
                      size_t chunk, struct al_buf *out, const char **reason,
                      struct intercept_body *keep)
{
    struct intercept_body b;
    struct intercept_codings c;
    codings_from(ce, &c);
    int r = intercept_body_start(&b, &m, nm, &c, mode, bound, reason);
    if (r < 0)
        return r;
    for (size_t pos = 0; pos < n; pos += chunk) {
        size_t k = n - pos < chunk ? n - pos : chunk;
        if ((r = intercept_body_feed(&b, (const char *)in + pos, k, out, reason)) < 0)
            goto done;
    }
    r = intercept_body_finish(&b, out, reason);
done:
    if (keep)
        *keep = b;
    else
        intercept_body_free(&b);
    return r;
}

static int body_run(struct intercept_matcher *m, const char *ce, enum policy_scrub mode,
                    uint64_t bound, const void *in, size_t n, size_t chunk, struct al_buf *out,
                    const char **reason, struct intercept_body *keep)
{
    return body_run_n(m, 1, ce, mode, bound, in, n, chunk, out, reason, keep);
}

START_TEST(body_identity_and_gzip)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    char text[8192];
    int tl = snprintf(text, sizeof text, "{\"you_sent\":\"%s\",\"pad\":\"", SECRET);
    memset(text + tl, 'p', 6000);
    tl += 6000;
    tl += snprintf(text + tl, sizeof text - (size_t)tl, "\",\"again\":\"%s\"}", SECRET);
    const char *reason = NULL;
    for (size_t chunk = 1; chunk <= 4096; chunk *= 4) {
        struct al_buf out = AL_BUF_INIT;
        struct intercept_body b;
        ck_assert_int_eq(
            body_run(m, NULL, POLICY_SCRUB_STRICT, 0, text, (size_t)tl, chunk, &out, &reason, &b),
            0);
        ck_assert_int_eq(b.mode, INTERCEPT_BODY_SCRUB);
        ck_assert_uint_eq(b.scrub.rep.matches, 2);
        intercept_body_free(&b);
        ck_assert_uint_eq(out.len, (size_t)tl);
        ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
        al_buf_free(&out);
    }
    unsigned char gz[16384];
    for (int kind = 0; kind < 3; kind++) {
        int wbits = kind == 0 ? 16 + MAX_WBITS : kind == 1 ? MAX_WBITS : -MAX_WBITS;
        const char *ce = kind == 0 ? "gzip" : "deflate";
        size_t gl = compress_with(wbits, text, (size_t)tl, gz, sizeof gz);
        for (size_t chunk = 1; chunk <= 4096; chunk *= 8) {
            struct al_buf out = AL_BUF_INIT;
            struct intercept_body b;
            int r = body_run(m, ce, POLICY_SCRUB_STRICT, 0, gz, gl, chunk, &out, &reason, &b);
            ck_assert_msg(r == 0, "kind %d chunk %zu: %d %s", kind, chunk, r, reason ? reason : "");
            ck_assert_int_eq(b.mode, INTERCEPT_BODY_DECODE);
            ck_assert_uint_eq(b.scrub.rep.matches, 2);
            intercept_body_free(&b);
            ck_assert_uint_eq(out.len, (size_t)tl); /* forwarded decoded */
            ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
            ck_assert(memcmp(out.data, "{\"you_sent\":\"", 13) == 0);
            al_buf_free(&out);
        }
    }
    /* x-gzip and case */
    size_t gl = compress_with(16 + MAX_WBITS, text, (size_t)tl, gz, sizeof gz);
    struct al_buf out = AL_BUF_INIT;
    ck_assert_int_eq(
        body_run(m, " X-GZIP ", POLICY_SCRUB_STRICT, 0, gz, gl, 100, &out, &reason, NULL), 0);
    ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
    al_buf_free(&out);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(body_refusals)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    const char *reason = NULL;
    struct al_buf out = AL_BUF_INIT;
    struct intercept_body b;
    /* Encodings the proxy cannot read: strict refuses before any byte, best_effort passes. */
    const char *bad[] = {"br",       "zstd",     "compress",
                         "gzip, br", "gzip;q=1", "Content-Encoding: gzip\nContent-Encoding: br"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct intercept_codings c;
        codings_from(bad[i], &c);
        ck_assert_int_eq(intercept_body_start(&b, &m, 1, &c, POLICY_SCRUB_STRICT, 0, &reason),
                         -EPROTO);
        ck_assert_str_eq(reason, "unsupported_content_encoding");
        ck_assert_int_eq(intercept_body_start(&b, &m, 1, &c, POLICY_SCRUB_BEST_EFFORT, 0, &reason),
                         0);
        ck_assert_int_eq(b.mode, INTERCEPT_BODY_PASS);
        ck_assert(b.not_inspected);
        intercept_body_free(&b);
    }
    /* No matchers, or scrub none: pass. */
    struct intercept_codings br;
    codings_from("br", &br);
    ck_assert_int_eq(intercept_body_start(&b, NULL, 0, &br, POLICY_SCRUB_STRICT, 0, &reason), 0);
    ck_assert_int_eq(b.mode, INTERCEPT_BODY_PASS);
    ck_assert(!b.not_inspected);
    intercept_body_free(&b);
    ck_assert_int_eq(intercept_body_start(&b, &m, 1, &br, POLICY_SCRUB_NONE, 0, &reason), 0);
    ck_assert_int_eq(b.mode, INTERCEPT_BODY_PASS);
    intercept_body_free(&b);
    /* A decompression bomb beyond the bound. */
    static char zeros[1 << 20];
    static unsigned char gz[1 << 16];
    size_t gl = compress_with(16 + MAX_WBITS, zeros, sizeof zeros, gz, sizeof gz);
    ck_assert_uint_lt(gl, 4096);
    ck_assert_int_eq(
        body_run(m, "gzip", POLICY_SCRUB_STRICT, 100000, gz, gl, 512, &out, &reason, NULL), -EFBIG);
    ck_assert_str_eq(reason, "decoded_body_too_large");
    ck_assert_uint_le(out.len, 100000 + 16384);
    al_buf_reset(&out);
    /* Corrupt and truncated gzip. */
    char text[200];
    snprintf(text, sizeof text, "secret=%s", SECRET);
    unsigned char g2[512];
    size_t g2l = compress_with(16 + MAX_WBITS, text, strlen(text), g2, sizeof g2);
    ck_assert_int_eq(
        body_run(m, "gzip", POLICY_SCRUB_STRICT, 0, g2, g2l - 6, 7, &out, &reason, NULL), -EBADMSG);
    ck_assert_str_eq(reason, "corrupt_encoding");
    ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
    al_buf_reset(&out);
    unsigned char bogus[] = "this is not gzip at all, just text pretending";
    ck_assert_int_eq(
        body_run(m, "gzip", POLICY_SCRUB_STRICT, 0, bogus, sizeof bogus, 8, &out, &reason, NULL),
        -EBADMSG);
    al_buf_reset(&out);
    /* Bytes after the end of the gzip stream. */
    memcpy(g2 + g2l, "trailing", 8);
    ck_assert_int_eq(
        body_run(m, "gzip", POLICY_SCRUB_STRICT, 0, g2, g2l + 8, 1000, &out, &reason, NULL),
        -EBADMSG);
    al_buf_reset(&out);
    /* An empty body with Content-Encoding: gzip (HEAD, 204) is fine. */
    ck_assert_int_eq(body_run(m, "gzip", POLICY_SCRUB_STRICT, 0, "", 0, 1, &out, &reason, NULL), 0);
    ck_assert_uint_eq(out.len, 0);
    al_buf_free(&out);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(codings_list)
{
    struct intercept_codings c;
    codings_from("Content-Encoding: gzip\nContent-Encoding: gzip", &c);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_uint_eq(c.total, 2);
    ck_assert_uint_eq(c.n_transfer, 0);
    ck_assert_uint_eq(c.v[0].kind, INTERCEPT_CODING_GZIP);
    ck_assert_uint_eq(c.v[1].kind, INTERCEPT_CODING_GZIP);
    codings_from("Content-Encoding: identity\nContent-Encoding: gzip", &c);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_str_eq(c.v[0].name, "gzip");
    codings_from("Content-Encoding: , GZIP ,,\tx-gzip ", &c);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_str_eq(c.v[0].name, "gzip");
    ck_assert_str_eq(c.v[1].name, "x-gzip");
    ck_assert_uint_eq(c.v[1].kind, INTERCEPT_CODING_GZIP);
    codings_from("Content-Encoding: identity, ", &c);
    ck_assert_uint_eq(c.total, 0);
    ck_assert_ptr_null(intercept_codings_json(&c));
    codings_from("Transfer-Encoding: gzip, chunked", &c);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_uint_eq(c.n_transfer, 1);
    ck_assert(c.v[0].transfer);
    ck_assert(c.chunked);
    codings_from("Transfer-Encoding: chunked", &c);
    ck_assert_uint_eq(c.total, 0);
    ck_assert(c.chunked);
    /* chunked followed by something (in a later field too) is a layer, and not the framing */
    codings_from("Transfer-Encoding: chunked\nTransfer-Encoding: gzip", &c);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_str_eq(c.v[0].name, "chunked");
    ck_assert_uint_eq(c.v[0].kind, INTERCEPT_CODING_UNKNOWN);
    ck_assert(!c.chunked);
    codings_from("Transfer-Encoding: gzip\nTransfer-Encoding: chunked", &c);
    ck_assert_uint_eq(c.n, 1);
    ck_assert(c.chunked);
    /* content codings come first, whatever the order of the fields */
    codings_from("Transfer-Encoding: gzip, chunked\ncontent-encoding: deflate", &c);
    ck_assert_uint_eq(c.n, 2);
    ck_assert(!c.v[0].transfer);
    ck_assert_uint_eq(c.v[0].kind, INTERCEPT_CODING_DEFLATE);
    ck_assert(c.v[1].transfer);
    codings_from("Content-Encoding: gzip;q=1", &c);
    ck_assert_uint_eq(c.v[0].kind, INTERCEPT_CODING_UNKNOWN);
    codings_from("Content-Encoding: br\nTransfer-Encoding: deflate, chunked", &c);
    ck_assert_uint_eq(c.v[0].kind, INTERCEPT_CODING_UNKNOWN);
    ck_assert_uint_eq(c.v[1].kind, INTERCEPT_CODING_DEFLATE);
    /* more than the list holds: counted */
    codings_from("Content-Encoding: gzip,gzip,gzip,gzip,gzip,gzip,gzip,gzip,gzip,gzip", &c);
    ck_assert_uint_eq(c.n, INTERCEPT_CODINGS_LIST);
    ck_assert_uint_eq(c.total, 10);
    json_t *j = intercept_codings_json(&c);
    ck_assert_uint_eq(json_array_size(j), INTERCEPT_CODINGS_LIST + 1);
    json_decref(j);
    /* other fields are not codings */
    codings_from("Content-Type: gzip\nAccept-Encoding: gzip", &c);
    ck_assert_uint_eq(c.total, 0);
}
END_TEST

/* gzip applied k times (kinds: 'g' gzip, 'z' zlib deflate, 'r' raw deflate), innermost first. */
static size_t layered(const char *kinds, const void *in, size_t n, unsigned char *out, size_t cap)
{
    size_t room = n > cap ? n : cap;
    unsigned char *cur = malloc(room), *nxt = malloc(room);
    memcpy(cur, in, n);
    size_t len = n;
    for (const char *k = kinds; *k; k++) {
        int wbits = *k == 'g' ? 16 + MAX_WBITS : *k == 'z' ? MAX_WBITS : -MAX_WBITS;
        len = compress_with(wbits, cur, len, nxt, room);
        unsigned char *t = cur;
        cur = nxt;
        nxt = t;
    }
    ck_assert_uint_le(len, cap);
    memcpy(out, cur, len);
    free(cur);
    free(nxt);
    return len;
}

START_TEST(body_layers)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    char text[8192];
    int tl = snprintf(text, sizeof text, "{\"you_sent\":\"%s\",\"pad\":\"", SECRET);
    for (int i = 0; i < 3000; i++)
        text[tl++] = (char)('a' + (i * 7) % 26);
    tl += snprintf(text + tl, sizeof text - (size_t)tl, "\",\"again\":\"%s\"}", SECRET);
    static unsigned char coded[1 << 16];
    const char *reason = NULL;
    const struct {
        const char *kinds, *fields;
    } cases[] = {
        {"gg", "Content-Encoding: gzip\nContent-Encoding: gzip"},
        {"gg", "Content-Encoding: gzip, x-gzip"},
        {"g", "Content-Encoding: identity\nContent-Encoding: gzip"},
        {"g", "Transfer-Encoding: gzip, chunked"},
        {"zg", "Content-Encoding: deflate\nTransfer-Encoding: gzip, chunked"},
        {"rgz", "Content-Encoding: deflate, gzip\nTransfer-Encoding: deflate, chunked"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        size_t cl = layered(cases[ci].kinds, text, (size_t)tl, coded, sizeof coded);
        for (size_t chunk = 1; chunk <= 4096; chunk *= 4) {
            struct al_buf out = AL_BUF_INIT;
            struct intercept_body b;
            int r = body_run(m, cases[ci].fields, POLICY_SCRUB_STRICT, 0, coded, cl, chunk, &out,
                             &reason, &b);
            ck_assert_msg(r == 0, "case %zu chunk %zu: %d %s", ci, chunk, r, reason ? reason : "");
            ck_assert_int_eq(b.mode, INTERCEPT_BODY_DECODE);
            ck_assert(b.content_decoded == (strstr(cases[ci].fields, "Content-") != NULL));
            ck_assert_uint_eq(b.scrub.rep.matches, 2);
            intercept_body_free(&b);
            ck_assert_uint_eq(out.len, (size_t)tl);
            ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
            ck_assert(memcmp(out.data, "{\"you_sent\":\"", 13) == 0);
            al_buf_free(&out);
        }
    }
    /* Without a secret only the transfer codings are undone: the body keeps its content
     * coding (and its Content-Encoding field). */
    size_t cl = layered("zg", text, (size_t)tl, coded, sizeof coded);
    struct al_buf out = AL_BUF_INIT;
    struct intercept_body b;
    ck_assert_int_eq(body_run_n(m, 0, "Content-Encoding: deflate\nTransfer-Encoding: gzip, chunked",
                                POLICY_SCRUB_STRICT, 0, coded, cl, 100, &out, &reason, &b),
                     0);
    ck_assert_int_eq(b.mode, INTERCEPT_BODY_DECODE);
    ck_assert(!b.content_decoded);
    intercept_body_free(&b);
    unsigned char once[1 << 14];
    size_t ol = layered("z", text, (size_t)tl, once, sizeof once);
    ck_assert_uint_eq(out.len, ol);
    ck_assert(memcmp(out.data, once, ol) == 0);
    al_buf_reset(&out);
    /* best_effort with more layers than it undoes: the transfer one still goes, the content
     * ones pass as they came, not inspected. */
    cl = layered("gggg", text, (size_t)tl, coded, sizeof coded);
    ck_assert_int_eq(
        body_run(m, "Content-Encoding: gzip, gzip, gzip\nTransfer-Encoding: gzip, chunked",
                 POLICY_SCRUB_BEST_EFFORT, 0, coded, cl, 100, &out, &reason, &b),
        0);
    ck_assert(b.not_inspected);
    ck_assert(!b.content_decoded);
    ck_assert_uint_eq(b.n_layers, 1);
    intercept_body_free(&b);
    ck_assert_uint_eq(out.len, layered("ggg", text, (size_t)tl, once, sizeof once));
    al_buf_free(&out);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(body_layer_refusals)
{
    struct intercept_matcher *m = matcher_for(SECRET);
    const char *reason = NULL;
    struct intercept_body b;
    struct intercept_codings c;
    /* Transfer codings the proxy cannot undo: refused in every mode, with or without secrets
     * (the proxy re-frames the body and could only pass it on corrupt). */
    const char *te_bad[] = {"Transfer-Encoding: br, chunked", "Transfer-Encoding: chunked, gzip",
                            "Transfer-Encoding: identity, chunked"};
    for (size_t i = 0; i < sizeof te_bad / sizeof *te_bad; i++) {
        codings_from(te_bad[i], &c);
        for (int mode = 0; mode < 3; mode++) {
            ck_assert_int_eq(
                intercept_body_start(&b, &m, 1, &c, (enum policy_scrub)mode, 0, &reason), -EPROTO);
            ck_assert_str_eq(reason, "unsupported_transfer_coding");
        }
        ck_assert_int_eq(intercept_body_start(&b, NULL, 0, &c, POLICY_SCRUB_NONE, 0, &reason),
                         -EPROTO);
    }
    codings_from("Transfer-Encoding: gzip, gzip, gzip, gzip, chunked", &c);
    ck_assert_int_eq(intercept_body_start(&b, NULL, 0, &c, POLICY_SCRUB_NONE, 0, &reason), -EPROTO);
    ck_assert_str_eq(reason, "too_many_codings");
    /* Too many layers in all: strict refuses, best_effort passes. */
    codings_from("Content-Encoding: gzip\nContent-Encoding: gzip, gzip, gzip", &c);
    ck_assert_int_eq(intercept_body_start(&b, &m, 1, &c, POLICY_SCRUB_STRICT, 0, &reason), -EPROTO);
    ck_assert_str_eq(reason, "too_many_codings");
    ck_assert_int_eq(intercept_body_start(&b, &m, 1, &c, POLICY_SCRUB_BEST_EFFORT, 0, &reason), 0);
    ck_assert_int_eq(b.mode, INTERCEPT_BODY_PASS);
    ck_assert(b.not_inspected);
    intercept_body_free(&b);
    /* A nested bomb: the ratio trips long before the size bound; one layer of the same data
     * never does (deflate cannot expand more than about 1032 times). */
    size_t zn = 8u << 20;
    char *zeros = calloc(1, zn);
    static unsigned char bomb[1 << 16];
    size_t one = layered("g", zeros, zn, bomb, sizeof bomb);
    struct al_buf out = AL_BUF_INIT;
    ck_assert_int_eq(
        body_run(m, "gzip", POLICY_SCRUB_STRICT, 0, bomb, one, 4096, &out, &reason, NULL), 0);
    ck_assert_uint_eq(out.len, zn);
    al_buf_reset(&out);
    size_t two = layered("gg", zeros, zn, bomb, sizeof bomb);
    ck_assert_uint_lt(two * INTERCEPT_DECODE_RATIO_MAX, zn);
    ck_assert_int_eq(
        body_run(m, "gzip, gzip", POLICY_SCRUB_STRICT, 0, bomb, two, 64, &out, &reason, NULL),
        -EFBIG);
    ck_assert_str_eq(reason, "decompression_ratio_exceeded");
    ck_assert_uint_le(out.len, (size_t)two * INTERCEPT_DECODE_RATIO_MAX +
                                   INTERCEPT_DECODE_RATIO_FLOOR + 16384);
    al_buf_reset(&out);
    /* Every layer's output is bounded, not only the last one's. */
    ck_assert_int_eq(
        body_run(m, "gzip, gzip", POLICY_SCRUB_STRICT, 4096, bomb, two, 64, &out, &reason, NULL),
        -EFBIG);
    ck_assert_str_eq(reason, "decoded_body_too_large");
    al_buf_reset(&out);
    /* A truncated inner layer, and bytes after the inner layer's end. */
    char text[200];
    int tl = snprintf(text, sizeof text, "secret=%s", SECRET);
    unsigned char inner[512], outer[1024];
    size_t il = layered("g", text, (size_t)tl, inner, sizeof inner);
    size_t ol = layered("g", inner, il - 5, outer, sizeof outer);
    ck_assert_int_eq(
        body_run(m, "gzip, gzip", POLICY_SCRUB_STRICT, 0, outer, ol, 7, &out, &reason, NULL),
        -EBADMSG);
    ck_assert_str_eq(reason, "corrupt_encoding");
    ck_assert(!contains(out.data, out.len, SECRET, strlen(SECRET)));
    al_buf_reset(&out);
    memcpy(inner + il, "junk", 4);
    ol = layered("g", inner, il + 4, outer, sizeof outer);
    ck_assert_int_eq(
        body_run(m, "gzip, gzip", POLICY_SCRUB_STRICT, 0, outer, ol, 7, &out, &reason, NULL),
        -EBADMSG);
    al_buf_free(&out);
    free(zeros);
    intercept_matcher_unref(m);
}
END_TEST

START_TEST(enc_names)
{
    ck_assert_str_eq(intercept_enc_name(INTERCEPT_ENC_RAW), "raw");
    ck_assert_str_eq(intercept_enc_name(INTERCEPT_ENC_BASE64URL), "base64url");
    ck_assert_str_eq(intercept_enc_name(INTERCEPT_ENC__COUNT), "unknown");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_scrub");
    TCase *tc = tcase_create("scrub");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, raw_and_hex);
    tcase_add_test(tc, base64_alignments);
    tcase_add_test(tc, percent_and_json);
    tcase_add_test(tc, no_false_positives);
    tcase_add_test(tc, short_values_are_not_patterns);
    tcase_add_test(tc, streaming_equals_one_shot);
    tcase_add_test(tc, two_secrets_two_stages);
    tcase_add_test(tc, bounded_memory_large_body);
    tcase_add_test(tc, body_identity_and_gzip);
    tcase_add_test(tc, body_refusals);
    tcase_add_test(tc, codings_list);
    tcase_add_test(tc, body_layers);
    tcase_add_test(tc, body_layer_refusals);
    tcase_add_test(tc, enc_names);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
