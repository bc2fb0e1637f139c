/* tests/unit/egress/test_dns_wire: DNS message parsing and building. */
#include "al_test.h"
#include "egress/dns_wire.h"

#include <arpa/inet.h>
#include <string.h>

/* A tiny message writer for hand-made answers. */
struct mw {
    uint8_t b[4096];
    size_t n;
};
static void mw8(struct mw *m, uint8_t v)
{
    m->b[m->n++] = v;
}
static void mw16(struct mw *m, uint16_t v)
{
    mw8(m, (uint8_t)(v >> 8));
    mw8(m, (uint8_t)v);
}
static void mw32(struct mw *m, uint32_t v)
{
    mw16(m, (uint16_t)(v >> 16));
    mw16(m, (uint16_t)v);
}
static void mwname(struct mw *m, const char *name)
{
    uint8_t w[256];
    int n = dns_name_to_wire(name, w, sizeof w);
    ck_assert_int_gt(n, 0);
    memcpy(m->b + m->n, w, (size_t)n);
    m->n += (size_t)n;
}
static void mwhdr(struct mw *m, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns,
                  uint16_t ar)
{
    mw16(m, id);
    mw16(m, flags);
    mw16(m, qd);
    mw16(m, an);
    mw16(m, ns);
    mw16(m, ar);
}

static struct dns_query q_of(const char *name, uint16_t type)
{
    uint8_t w[256], msg[512];
    int wl = dns_name_to_wire(name, w, sizeof w);
    ck_assert_int_gt(wl, 0);
    int n = dns_build_query(&(struct dns_question){0x1234, w, (size_t)wl, type}, msg, sizeof msg);
    ck_assert_int_gt(n, 0);
    struct dns_query q;
    ck_assert_int_eq(dns_parse_query(msg, (size_t)n, &q), DNS_OK);
    return q;
}

START_TEST(query_roundtrip)
{
    struct dns_query q = q_of("api.github.com", DNS_T_AAAA);
    ck_assert_uint_eq(q.id, 0x1234);
    ck_assert_str_eq(q.qname, "api.github.com");
    ck_assert_uint_eq(q.qtype, DNS_T_AAAA);
    ck_assert(q.has_edns);
    ck_assert_uint_eq(q.edns_udp_size, DNS_MAX_UDP);
    ck_assert(q.qname_ldh);
    ck_assert_uint_eq(q.n_labels, 3);
    ck_assert_uint_eq(q.longest_label, 6);
}
END_TEST

START_TEST(query_case_and_odd_bytes)
{
    struct mw m = {.n = 0};
    mwhdr(&m, 7, 0x0100, 1, 0, 0, 0);
    mw8(&m, 3);
    mw8(&m, 'W');
    mw8(&m, 'w');
    mw8(&m, 'W');
    mw8(&m, 4);
    mw8(&m, 'a');
    mw8(&m, '.');
    mw8(&m, 0xff);
    mw8(&m, 'b');
    mw8(&m, 0);
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    struct dns_query q;
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_OK);
    ck_assert_str_eq(q.qname, "www.a??b");
    ck_assert(!q.qname_ldh);
    ck_assert(!q.has_edns);
    ck_assert_uint_eq(q.edns_udp_size, 512);
    ck_assert_uint_eq(q.qname_wire[1], 'W'); /* case kept for the echo */
}
END_TEST

START_TEST(query_rejects)
{
    struct dns_query q;
    struct mw m = {.n = 0};
    /* A response where a query is expected. */
    mwhdr(&m, 1, 0x8100, 1, 0, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_NOT_QUERY);
    /* Opcode NOTIFY. */
    m.n = 0;
    mwhdr(&m, 1, 4 << 11, 1, 0, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_NOTIMP);
    ck_assert_uint_eq(q.id, 1);
    /* Two questions. */
    m.n = 0;
    mwhdr(&m, 1, 0, 2, 0, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    mwname(&m, "b.com");
    mw16(&m, 1);
    mw16(&m, 1);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* A compression pointer in the question. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 0);
    mw16(&m, 0xc000);
    mw16(&m, 1);
    mw16(&m, 1);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* Label runs past the end. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 0);
    mw8(&m, 60);
    mw8(&m, 'a');
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* Trailing garbage. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    mw8(&m, 0);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* An additional record that is not OPT. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 1);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    mw8(&m, 0);
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 0);
    mw16(&m, 0);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* EDNS version 1. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 1);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    mw8(&m, 0);
    mw16(&m, DNS_T_OPT);
    mw16(&m, 4096);
    mw32(&m, 1 << 16);
    mw16(&m, 0);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* EDNS option overrunning rdata. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 1);
    mwname(&m, "a.com");
    mw16(&m, 1);
    mw16(&m, 1);
    mw8(&m, 0);
    mw16(&m, DNS_T_OPT);
    mw16(&m, 4096);
    mw32(&m, 0);
    mw16(&m, 4);
    mw16(&m, 10);
    mw16(&m, 8);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
    /* Too short for a header. */
    ck_assert_int_eq(dns_parse_query(m.b, 5, &q), DNS_E_SHORT);
    /* A 256-byte name. */
    m.n = 0;
    mwhdr(&m, 1, 0, 1, 0, 0, 0);
    for (int i = 0; i < 5; i++) {
        mw8(&m, 63);
        for (int k = 0; k < 63; k++)
            mw8(&m, 'a');
    }
    mw8(&m, 0);
    mw16(&m, 1);
    mw16(&m, 1);
    ck_assert_int_eq(dns_parse_query(m.b, m.n, &q), DNS_E_FORMAT);
}
END_TEST

/* Upstream answer: CNAME chain with compression, records out of order, an unrelated A. */
START_TEST(answer_cname_chain)
{
    uint8_t qw[256];
    int ql = dns_name_to_wire("www.example.com", qw, sizeof qw);
    struct mw m = {.n = 0};
    mwhdr(&m, 42, 0x8180, 1, 4, 0, 0);
    mwname(&m, "www.example.com");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    /* edge.cdn.net A 203.0.113.7 (listed before the CNAMEs) */
    size_t edge_at = m.n;
    mwname(&m, "edge.cdn.net");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 30);
    mw16(&m, 4);
    mw8(&m, 203);
    mw8(&m, 0);
    mw8(&m, 113);
    mw8(&m, 7);
    /* www.example.com CNAME edge.cdn.net (pointer to the owner above) */
    mw16(&m, 0xc00c);
    mw16(&m, DNS_T_CNAME);
    mw16(&m, 1);
    mw32(&m, 300);
    mw16(&m, 2);
    mw16(&m, (uint16_t)(0xc000 | edge_at));
    /* unrelated.example A 198.51.100.1: ignored */
    mwname(&m, "unrelated.example");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 5);
    mw16(&m, 4);
    mw32(&m, 0xc6336401);
    /* edge.cdn.net A 203.0.113.8 */
    mw16(&m, (uint16_t)(0xc000 | edge_at));
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 60);
    mw16(&m, 4);
    mw8(&m, 203);
    mw8(&m, 0);
    mw8(&m, 113);
    mw8(&m, 8);
    struct dns_answer a;
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){42, qw, (size_t)ql, DNS_T_A}, &a),
        DNS_OK);
    ck_assert_uint_eq(a.rcode, DNS_R_NOERROR);
    ck_assert_uint_eq(a.n_addrs, 2);
    ck_assert_uint_eq(a.n_cnames, 1);
    ck_assert_uint_eq(a.min_ttl, 30);
    ck_assert_uint_eq(a.addrs[0].addr[3], 7);
    ck_assert_uint_eq(a.addrs[1].addr[3], 8);
    ck_assert_uint_eq(a.n_ignored, 1);
    /* Wrong id, wrong question type: mismatch. */
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){43, qw, (size_t)ql, DNS_T_A}, &a),
        DNS_E_MISMATCH);
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){42, qw, (size_t)ql, DNS_T_AAAA}, &a),
        DNS_E_MISMATCH);
}
END_TEST

START_TEST(answer_pointer_loop_and_forward_pointer)
{
    uint8_t qw[256];
    int ql = dns_name_to_wire("a.com", qw, sizeof qw);
    struct mw m = {.n = 0};
    mwhdr(&m, 1, 0x8180, 1, 1, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    size_t at = m.n;
    mw16(&m, (uint16_t)(0xc000 | at)); /* points at itself */
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 1);
    mw16(&m, 4);
    mw32(&m, 1);
    struct dns_answer a;
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){1, qw, (size_t)ql, DNS_T_A}, &a),
        DNS_E_FORMAT);
    m.b[at + 1] = (uint8_t)(at + 4); /* forward pointer */
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){1, qw, (size_t)ql, DNS_T_A}, &a),
        DNS_E_FORMAT);
}
END_TEST

START_TEST(answer_bad_rdlen_and_negative)
{
    uint8_t qw[256];
    int ql = dns_name_to_wire("a.com", qw, sizeof qw);
    struct mw m = {.n = 0};
    mwhdr(&m, 1, 0x8180, 1, 1, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw16(&m, 0xc00c);
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mw32(&m, 1);
    mw16(&m, 5);
    mw32(&m, 1);
    mw8(&m, 1);
    struct dns_answer a;
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){1, qw, (size_t)ql, DNS_T_A}, &a),
        DNS_E_FORMAT);

    /* NXDOMAIN with an SOA: negative TTL = min(SOA ttl, minimum). */
    m.n = 0;
    mwhdr(&m, 2, 0x8183, 1, 0, 1, 0);
    mwname(&m, "a.com");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    mwname(&m, "com");
    mw16(&m, DNS_T_SOA);
    mw16(&m, 1);
    mw32(&m, 900);
    size_t rdl = m.n;
    mw16(&m, 0);
    size_t rd0 = m.n;
    mwname(&m, "ns.com");
    mwname(&m, "host.com");
    mw32(&m, 1);
    mw32(&m, 2);
    mw32(&m, 3);
    mw32(&m, 4);
    mw32(&m, 60);
    m.b[rdl] = 0;
    m.b[rdl + 1] = (uint8_t)(m.n - rd0);
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){2, qw, (size_t)ql, DNS_T_A}, &a), DNS_OK);
    ck_assert_uint_eq(a.rcode, DNS_R_NXDOMAIN);
    ck_assert_uint_eq(a.neg_ttl, 60);
    ck_assert_uint_eq(a.n_addrs, 0);

    /* Truncated flag. */
    m.n = 0;
    mwhdr(&m, 3, 0x8380, 1, 0, 0, 0);
    mwname(&m, "a.com");
    mw16(&m, DNS_T_A);
    mw16(&m, 1);
    ck_assert_int_eq(
        dns_parse_answer(m.b, m.n, &(struct dns_question){3, qw, (size_t)ql, DNS_T_A}, &a), DNS_OK);
    ck_assert(a.truncated);
}
END_TEST

START_TEST(reply_building_and_fit)
{
    struct dns_query q = q_of("x.example.com", DNS_T_A);
    struct dns_addr addrs[DNS_MAX_ANSWERS];
    for (int i = 0; i < DNS_MAX_ANSWERS; i++) {
        addrs[i].family = 4;
        memset(addrs[i].addr, 0, 16);
        addrs[i].addr[0] = 203;
        addrs[i].addr[2] = 113;
        addrs[i].addr[3] = (uint8_t)i;
        addrs[i].ttl = 5;
    }
    addrs[3].family = 6; /* wrong family for an A question: skipped */
    uint8_t out[2048];
    int n = dns_build_reply(&q, &(struct dns_reply){DNS_R_NOERROR, addrs, DNS_MAX_ANSWERS, 17}, 512,
                            out, sizeof out);
    ck_assert_int_gt(n, 0);
    ck_assert_int_le(n, 512);
    /* Parse our own reply as a client would. */
    struct dns_answer a;
    ck_assert_int_eq(
        dns_parse_answer(out, (size_t)n,
                         &(struct dns_question){q.id, q.qname_wire, q.qname_wire_len, DNS_T_A}, &a),
        DNS_OK);
    ck_assert_uint_eq(a.n_addrs, DNS_MAX_ANSWERS - 1);
    ck_assert_uint_eq(a.min_ttl, 17);
    /* A tiny UDP size keeps only what fits. */
    struct dns_query q2 = q;
    q2.has_edns = false;
    n = dns_build_reply(&q2, &(struct dns_reply){DNS_R_NOERROR, addrs, DNS_MAX_ANSWERS, 17},
                        12 + q.qname_wire_len + 4 + 2 * 16, out, sizeof out);
    ck_assert_int_eq(
        dns_parse_answer(out, (size_t)n,
                         &(struct dns_question){q.id, q.qname_wire, q.qname_wire_len, DNS_T_A}, &a),
        DNS_OK);
    ck_assert_uint_eq(a.n_addrs, 2);
    /* NXDOMAIN echoes the question and RD, sets RA. */
    n = dns_build_reply(&q, &(struct dns_reply){DNS_R_NXDOMAIN, NULL, 0, 0}, 512, out, sizeof out);
    ck_assert_int_eq(
        dns_parse_answer(out, (size_t)n,
                         &(struct dns_question){q.id, q.qname_wire, q.qname_wire_len, DNS_T_A}, &a),
        DNS_OK);
    ck_assert_uint_eq(a.rcode, DNS_R_NXDOMAIN);
    ck_assert_uint_eq(out[2] & 0x01, 1);
    ck_assert_uint_eq(out[3] & 0x80, 0x80);
}
END_TEST

START_TEST(names_and_entropy)
{
    uint8_t w[300];
    ck_assert_int_eq(dns_name_to_wire("", w, sizeof w), 1);
    ck_assert_int_eq(dns_name_to_wire("a..b", w, sizeof w), -1);
    char big[80];
    memset(big, 'a', 64);
    big[64] = 0;
    ck_assert_int_eq(dns_name_to_wire(big, w, sizeof w), -1);
    ck_assert_str_eq(dns_type_name(DNS_T_TXT), "TXT");
    ck_assert_str_eq(dns_type_name(4242), "TYPE4242");
    ck_assert(dns_label_entropy("aaaaaaaa", 8) < 0.01);
    const char *hexy = "4f2a9c1be07d3856";
    ck_assert(dns_label_entropy(hexy, strlen(hexy)) > 3.5);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dns_wire");
    TCase *t = tcase_create("wire");
    tcase_add_test(t, query_roundtrip);
    tcase_add_test(t, query_case_and_odd_bytes);
    tcase_add_test(t, query_rejects);
    tcase_add_test(t, answer_cname_chain);
    tcase_add_test(t, answer_pointer_loop_and_forward_pointer);
    tcase_add_test(t, answer_bad_rdlen_and_negative);
    tcase_add_test(t, reply_building_and_fit);
    tcase_add_test(t, names_and_entropy);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
