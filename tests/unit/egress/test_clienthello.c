/* tests/unit/egress/test_clienthello: the TLS ClientHello parser. */
#include "al_test.h"
#include "ch_build.h"
#include "egress/clienthello.h"

#include <stdio.h>
#include <stdlib.h>

static size_t load(const char *name, uint8_t *buf, size_t cap)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/fuzz_clienthello/%s", al_test_srcdir(), name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

START_TEST(real_openssl_hello)
{
    uint8_t buf[20000];
    size_t n = load("openssl_sni_alpn", buf, sizeof buf);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(buf, n, &ch), EGRESS_CH_OK);
    ck_assert(ch.has_sni);
    ck_assert_str_eq(ch.sni, "api.github.com");
    ck_assert_uint_eq(ch.n_alpn, 2);
    ck_assert_str_eq(ch.alpn[0], "h2");
    ck_assert_str_eq(ch.alpn[1], "http/1.1");
    ck_assert(egress_clienthello_offers_alpn(&ch, "http/1.1"));
    ck_assert(!egress_clienthello_offers_alpn(&ch, "h3"));
    ck_assert(ch.offers_tls13);
    ck_assert(!ch.has_ech);
    ck_assert_uint_eq(ch.consumed, n);
}
END_TEST

START_TEST(real_hello_without_sni)
{
    uint8_t buf[20000];
    size_t n = load("openssl_nosni_tls12", buf, sizeof buf);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(buf, n, &ch), EGRESS_CH_OK);
    ck_assert(!ch.has_sni);
    ck_assert(!ch.offers_tls13);
}
END_TEST

START_TEST(real_curl_hello)
{
    uint8_t buf[20000];
    size_t n = load("curl_example", buf, sizeof buf);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(buf, n, &ch), EGRESS_CH_OK);
    ck_assert_str_eq(ch.sni, "example.com");
}
END_TEST

/* Every prefix of a valid hello asks for more; the whole one parses. */
START_TEST(every_tcp_split)
{
    uint8_t buf[20000];
    size_t n = load("openssl_sni_alpn", buf, sizeof buf);
    struct egress_clienthello ch;
    for (size_t i = 0; i < n; i++) {
        uint8_t *prefix = malloc(i ? i : 1);
        memcpy(prefix, buf, i);
        int rc = egress_clienthello_parse(prefix, i, &ch);
        free(prefix);
        ck_assert_msg(rc == EGRESS_CH_MORE, "prefix %zu: %d (%s)", i, rc, ch.error ? ch.error : "");
    }
    ck_assert_int_eq(egress_clienthello_parse(buf, n, &ch), EGRESS_CH_OK);
}
END_TEST

/* The handshake split over many records (legal, and an old evasion trick). */
START_TEST(fragmented_records)
{
    static const size_t sizes[] = {1, 2, 3, 7, 64, 100};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        struct ch_b b;
        chb_init(&b);
        chb_sni(&b, "Fragmented.Example.COM.");
        chb_tls13(&b);
        uint8_t hs[16384], out[40000];
        size_t hn = chb_handshake(&b, hs);
        if ((hn + sizes[k] - 1) / sizes[k] > EGRESS_CH_MAX_RECORDS)
            continue;
        size_t n = chb_records(hs, hn, sizes[k], out);
        struct egress_clienthello ch;
        ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
        ck_assert_str_eq(ch.sni, "Fragmented.Example.COM."); /* raw: canonicalised later */
        ck_assert_uint_eq(ch.consumed, n);
        ck_assert_int_eq(egress_clienthello_parse(out, n - 1, &ch), EGRESS_CH_MORE);
    }
}
END_TEST

START_TEST(too_many_records)
{
    struct ch_b b;
    chb_init(&b);
    chb_sni(&b, "example.com");
    uint8_t hs[16384], out[40000];
    size_t hn = chb_handshake(&b, hs);
    size_t n = chb_records(hs, hn, 1, out);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_TOO_LARGE);
}
END_TEST

START_TEST(ech_and_esni_flagged)
{
    struct ch_b b;
    chb_init(&b);
    chb_sni(&b, "public.example.com");
    chb_ext(&b, 0xfe0d, "\x00\x01\x02", 3);
    uint8_t out[20000];
    size_t n = chb_finish(&b, out, 0);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
    ck_assert(ch.has_ech);
    ck_assert(!ch.has_esni);

    chb_init(&b);
    chb_ext(&b, 0xffce, "\x00", 1);
    n = chb_finish(&b, out, 0);
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
    ck_assert(ch.has_esni);
    ck_assert(!ch.has_sni);
}
END_TEST

START_TEST(ip_literal_sni_reported_raw)
{
    struct ch_b b;
    chb_init(&b);
    chb_sni(&b, "203.0.113.5");
    uint8_t out[20000];
    size_t n = chb_finish(&b, out, 0);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
    ck_assert_str_eq(ch.sni, "203.0.113.5");
}
END_TEST

START_TEST(no_extensions_at_all)
{
    struct ch_b b;
    chb_init(&b);
    b.no_extensions = 1;
    uint8_t out[20000];
    size_t n = chb_finish(&b, out, 0);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
    ck_assert(!ch.has_sni);
    ck_assert(!ch.has_extensions);
}
END_TEST

START_TEST(not_tls)
{
    struct egress_clienthello ch;
    const char *get = "GET / HTTP/1.1\r\n";
    ck_assert_int_eq(egress_clienthello_parse((const uint8_t *)get, strlen(get), &ch),
                     EGRESS_CH_NOT_TLS);
    ck_assert_int_eq(egress_clienthello_parse((const uint8_t *)"\x16\x04", 2, &ch),
                     EGRESS_CH_NOT_TLS);
    ck_assert_int_eq(egress_clienthello_parse((const uint8_t *)"\x16", 1, &ch), EGRESS_CH_MORE);
    ck_assert_int_eq(egress_clienthello_parse((const uint8_t *)"", 0, &ch), EGRESS_CH_MORE);
    ck_assert(!egress_clienthello_looks_tls((const uint8_t *)"SSH-2.0", 7));
    ck_assert(egress_clienthello_looks_tls((const uint8_t *)"\x16\x03\x01", 3));
}
END_TEST

static int parse_with(void (*mutate)(struct ch_b *b))
{
    struct ch_b b;
    chb_init(&b);
    mutate(&b);
    uint8_t out[20000];
    size_t n = chb_finish(&b, out, 0);
    struct egress_clienthello ch;
    return egress_clienthello_parse(out, n, &ch);
}

static void m_dup_ext(struct ch_b *b)
{
    chb_sni(b, "a.example.com");
    chb_sni(b, "b.example.com");
}
static void m_two_hostnames(struct ch_b *b)
{
    uint8_t d[] = {0, 16, 0, 0, 5, 'a', '.', 'c', 'o', 'm', 0, 0, 5, 'b', '.', 'c', 'o', 'm'};
    chb_ext(b, 0, d, sizeof d);
}
static void m_sni_overrun(struct ch_b *b)
{
    uint8_t d[] = {0, 8, 0, 0, 50, 'a', '.', 'c', 'o', 'm'};
    chb_ext(b, 0, d, sizeof d);
}
static void m_sni_nul(struct ch_b *b)
{
    uint8_t d[] = {0, 8, 0, 0, 5, 'a', 0, 'c', 'o', 'm'};
    chb_ext(b, 0, d, sizeof d);
}
static void m_sni_empty(struct ch_b *b)
{
    uint8_t d[] = {0, 3, 0, 0, 0};
    chb_ext(b, 0, d, sizeof d);
}
static void m_alpn_empty_proto(struct ch_b *b)
{
    uint8_t d[] = {0, 4, 2, 'h', '2', 0};
    chb_ext(b, 16, d, sizeof d);
}
static void m_versions_odd(struct ch_b *b)
{
    uint8_t d[] = {3, 3, 4, 3};
    chb_ext(b, 43, d, sizeof d);
}

START_TEST(malformed_extensions)
{
    ck_assert_int_eq(parse_with(m_dup_ext), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_two_hostnames), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_sni_overrun), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_sni_nul), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_sni_empty), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_alpn_empty_proto), EGRESS_CH_MALFORMED);
    ck_assert_int_eq(parse_with(m_versions_odd), EGRESS_CH_MALFORMED);
}
END_TEST

START_TEST(malformed_records)
{
    struct ch_b b;
    chb_init(&b);
    chb_sni(&b, "example.com");
    uint8_t hs[16384], out[40000];
    size_t hn = chb_handshake(&b, hs);
    size_t n = chb_records(hs, hn, 0, out);
    struct egress_clienthello ch;

    /* Extra handshake bytes after the hello in the same record. */
    uint8_t extra[40000];
    memcpy(hs + hn, "\x0b\x00\x00\x00", 4);
    size_t n2 = chb_records(hs, hn + 4, 0, extra);
    ck_assert_int_eq(egress_clienthello_parse(extra, n2, &ch), EGRESS_CH_MALFORMED);

    /* A second record that is not a handshake before the hello is complete. */
    n = chb_records(hs, hn, 50, out);
    out[55] = 23;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_MALFORMED);

    /* Zero-length record. */
    uint8_t z[] = {22, 3, 1, 0, 0};
    ck_assert_int_eq(egress_clienthello_parse(z, sizeof z, &ch), EGRESS_CH_MALFORMED);

    /* A handshake message that is not a ClientHello (ServerHello). */
    uint8_t sh[] = {22, 3, 3, 0, 4, 2, 0, 0, 0};
    ck_assert_int_eq(egress_clienthello_parse(sh, sizeof sh, &ch), EGRESS_CH_MALFORMED);

    /* Declared handshake length above the bound. */
    uint8_t big[] = {22, 3, 1, 0, 4, 1, 0x01, 0x00, 0x00};
    ck_assert_int_eq(egress_clienthello_parse(big, sizeof big, &ch), EGRESS_CH_TOO_LARGE);

    /* Record length above 2^14. */
    uint8_t rl[] = {22, 3, 1, 0x40, 0x01, 1};
    ck_assert_int_eq(egress_clienthello_parse(rl, sizeof rl, &ch), EGRESS_CH_MALFORMED);

    /* Extensions length that does not match the message. */
    hn = chb_handshake(&b, hs);
    hs[4 + 2 + 32 + 1 + 2 + 4 + 2] ^= 0x01; /* low byte of the extensions length */
    n = chb_records(hs, hn, 0, out);
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_MALFORMED);
    ck_assert_ptr_nonnull(ch.error);
}
END_TEST

START_TEST(long_alpn_truncated_and_counted)
{
    struct ch_b b;
    chb_init(&b);
    const char *p[10] = {
        "a", "b", "c", "d", "e", "f", "g", "a-very-long-protocol-name-beyond-thirty-one", "i", "j"};
    chb_alpn(&b, p, 10);
    uint8_t out[20000];
    size_t n = chb_finish(&b, out, 0);
    struct egress_clienthello ch;
    ck_assert_int_eq(egress_clienthello_parse(out, n, &ch), EGRESS_CH_OK);
    ck_assert_uint_eq(ch.n_alpn, EGRESS_CH_MAX_ALPN);
    ck_assert_uint_eq(ch.n_alpn_total, 10);
    ck_assert_uint_eq(strlen(ch.alpn[7]), 31);
    ck_assert_int_eq(ch.alpn[7][30], '~');
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("clienthello");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, real_openssl_hello);
    tcase_add_test(t, real_hello_without_sni);
    tcase_add_test(t, real_curl_hello);
    tcase_add_test(t, every_tcp_split);
    tcase_add_test(t, fragmented_records);
    tcase_add_test(t, too_many_records);
    tcase_add_test(t, ech_and_esni_flagged);
    tcase_add_test(t, ip_literal_sni_reported_raw);
    tcase_add_test(t, no_extensions_at_all);
    tcase_add_test(t, not_tls);
    tcase_add_test(t, malformed_extensions);
    tcase_add_test(t, malformed_records);
    tcase_add_test(t, long_alpn_truncated_and_counted);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
