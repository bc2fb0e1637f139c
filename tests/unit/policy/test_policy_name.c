/* Unit tests: the canonicaliser (EGRESS.md bypass list items 5, 8 and 9 at the name level),
 * IP literals in every spelling, the address classifier, host patterns, secret names, and
 * request path normalisation and matching. */
#include "al_test.h"
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

static void canon_ok(const char *in, enum policy_host_kind kind, const char *want)
{
    struct policy_host h;
    struct al_error err = {0};
    int rc = policy_host_canon(in, strlen(in), &h, &err);
    ck_assert_msg(rc == 0, "'%s' should canonicalise, got: %s", in, err.msg);
    ck_assert_msg(h.kind == kind, "'%s': kind %d, want %d", in, h.kind, kind);
    ck_assert_msg(strcmp(h.text, want) == 0, "'%s' -> '%s', want '%s'", in, h.text, want);
    ck_assert_uint_eq(h.len, strlen(want));
}

static void canon_bad(const char *in, size_t len, const char *msg_part)
{
    struct policy_host h;
    struct al_error err = {0};
    int rc = policy_host_canon(in, len, &h, &err);
    ck_assert_msg(rc == -EINVAL, "'%s' should be refused", in);
    ck_assert_msg(strstr(err.msg, msg_part), "'%s': message '%s' lacks '%s'", in, err.msg,
                  msg_part);
}

START_TEST(canon_case_and_trailing_dots)
{
    canon_ok("API.GitHub.COM", POLICY_HOST_NAME, "api.github.com");
    canon_ok("api.github.com.", POLICY_HOST_NAME, "api.github.com");
    canon_ok("Api.GitHub.Com.", POLICY_HOST_NAME, "api.github.com");
    canon_bad("api.github.com..", 16, "empty label");
    canon_bad(".api.github.com", 15, "empty label");
    canon_bad("api..github.com", 15, "empty label");
    canon_bad(".", 1, "empty host name");
    canon_bad("", 0, "empty host");
    canon_ok("localhost", POLICY_HOST_NAME, "localhost");
    canon_ok("r3---sn-abc.googlevideo.com", POLICY_HOST_NAME, "r3---sn-abc.googlevideo.com");
}
END_TEST

START_TEST(canon_ldh_and_lengths)
{
    canon_bad("under_score.example.com", 23, "underscore");
    canon_bad("-lead.example.com", 17, "starts or ends with '-'");
    canon_bad("trail-.example.com", 18, "starts or ends with '-'");
    canon_bad("a b.com", 7, "control character, space");
    canon_bad("a\tb.com", 7, "control character, space");
    canon_bad("a\0b.com", 7, "NUL");
    canon_bad("evil.com\r\nx", 11, "control character");
    canon_bad("a/b.com", 7, "character '/'");
    canon_bad("user@evil.com", 13, "character '@'");
    canon_bad("a\\b.com", 7, "character '\\'");
    canon_bad("*.example.com", 13, "wildcard");
    canon_bad("example.com:443", 15, "not an IPv6 address");
    char label[80];
    memset(label, 'a', 63);
    strcpy(label + 63, ".com");
    canon_ok(label, POLICY_HOST_NAME, label);
    memset(label, 'a', 64);
    strcpy(label + 64, ".com");
    canon_bad(label, strlen(label), "label longer than 63");
    char name[300] = "";
    while (strlen(name) < 250)
        strcat(name, "abcdefghi.");
    strcat(name, "com"); /* 253 */
    name[253] = '\0';
    ck_assert_uint_eq(strlen(name), 253);
    name[252] = 'm';
    canon_ok(name, POLICY_HOST_NAME, name);
    char longer[300];
    snprintf(longer, sizeof longer, "x%s", name);
    canon_bad(longer, strlen(longer), "longer than 253");
    /* 253 characters plus the one trailing dot that is stripped. */
    char dotted[300];
    snprintf(dotted, sizeof dotted, "%s.", name);
    canon_ok(dotted, POLICY_HOST_NAME, name);
}
END_TEST

START_TEST(canon_idn_punycode_and_dots)
{
    /* Unicode and its punycode are the same name. */
    canon_ok("bücher.example", POLICY_HOST_NAME, "xn--bcher-kva.example");
    canon_ok("BÜCHER.example", POLICY_HOST_NAME, "xn--bcher-kva.example");
    canon_ok("xn--bcher-kva.example", POLICY_HOST_NAME, "xn--bcher-kva.example");
    canon_ok("XN--BCHER-KVA.EXAMPLE", POLICY_HOST_NAME, "xn--bcher-kva.example");
    /* Non-transitional: ß stays ß. */
    canon_ok("faß.de", POLICY_HOST_NAME, "xn--fa-hia.de");
    /* Full-width letters map to ASCII (UTS-46). */
    canon_ok("\xef\xbd\x85xample.com", POLICY_HOST_NAME, "example.com");
    /* Full-width, ideographic and half-width ideographic full stops are refused. */
    canon_bad("api\xef\xbc\x8egithub\xef\xbc\x8e"
              "com",
              18, "full-width or ideographic dot");
    canon_bad("api\xe3\x80\x82github.com", 16, "full-width or ideographic dot");
    canon_bad("api\xef\xbd\xa1github.com", 16, "full-width or ideographic dot");
    /* Invalid or non-canonical punycode. */
    canon_bad("xn--a.com", 9, "not a valid IDNA A-label");
    canon_bad("xn--zz.com", 10, "not valid punycode");
    canon_bad("\xe2\x98\x83.com", 7, "not a valid internationalised name");     /* snowman */
    canon_bad("\xf0\x9f\x98\x80.com", 8, "not a valid internationalised name"); /* emoji */
    canon_bad("\xff\xfe.com", 6, "not a valid internationalised name");
}
END_TEST

START_TEST(canon_homographs)
{
    /* Latin "apple" with a Cyrillic a, in Unicode and as punycode. */
    canon_bad("\xd0\xb0pple.com", 10, "mixes scripts");
    canon_bad("xn--pple-43d.com", 16, "mixes scripts");
    /* Greek alpha in "paypal". */
    canon_bad("p\xce\xb1ypal.com", 11, "mixes scripts");
    /* Single-script names are fine, and so are the CJK combinations with Latin. */
    canon_ok("\xd1\x8f\xd0\xbd\xd0\xb4\xd0\xb5\xd0\xba\xd1\x81.\xd1\x80\xd1\x84", POLICY_HOST_NAME,
             "xn--d1acpjx3f.xn--p1ai");
    struct policy_host h;
    ck_assert_int_eq(
        policy_host_canon("日本語とカタカナ.jp", strlen("日本語とカタカナ.jp"), &h, NULL), 0);
    ck_assert_int_eq(policy_host_canon("abc日本.jp", strlen("abc日本.jp"), &h, NULL), 0);
    ck_assert_int_eq(policy_host_canon("\xd0\xb0\xce\xb1.com", 8, &h, NULL), -EINVAL);
}
END_TEST

START_TEST(canon_ip_literals_every_spelling)
{
    /* All of these are 127.0.0.1. */
    const char *v4[] = {"127.0.0.1",
                        "2130706433",
                        "0177.0.0.1",
                        "0x7f.1",
                        "0x7F000001",
                        "127.1",
                        "127.0.1",
                        "0177.0.0.01",
                        "0x7f.0.0.1",
                        "127.0.0.1.",
                        "\xef\xbc\x91\xef\xbc\x92\xef\xbc\x97.0.0.1", /* full-width 127 */
                        "017700000001",
                        NULL};
    for (size_t i = 0; v4[i]; i++)
        canon_ok(v4[i], POLICY_HOST_ADDR, "127.0.0.1");
    canon_ok("0", POLICY_HOST_ADDR, "0.0.0.0");
    canon_ok("0x", POLICY_HOST_ADDR, "0.0.0.0");
    canon_ok("4294967295", POLICY_HOST_ADDR, "255.255.255.255");
    canon_ok("169.254.169.254", POLICY_HOST_ADDR, "169.254.169.254");
    canon_ok("0xa9fea9fe", POLICY_HOST_ADDR, "169.254.169.254");
    canon_ok("[::1]", POLICY_HOST_ADDR, "::1");
    canon_ok("::1", POLICY_HOST_ADDR, "::1");
    canon_ok("[0:0:0:0:0:0:0:1]", POLICY_HOST_ADDR, "::1");
    /* IPv4-mapped IPv6 is the IPv4 address. */
    canon_ok("[::ffff:127.0.0.1]", POLICY_HOST_ADDR, "127.0.0.1");
    canon_ok("::ffff:7f00:1", POLICY_HOST_ADDR, "127.0.0.1");
    canon_ok("[64:ff9b::7f00:1]", POLICY_HOST_ADDR, "64:ff9b::7f00:1");
    canon_ok("[2002:7f00:1::]", POLICY_HOST_ADDR, "2002:7f00:1::");
    struct policy_host h;
    ck_assert_int_eq(policy_host_canon("fe80::1%eth0", 12, &h, NULL), 0);
    ck_assert_str_eq(h.text, "fe80::1");
    ck_assert_str_eq(h.zone, "eth0");
    ck_assert_int_eq(policy_host_canon("[fe80::1%25eth0]", 16, &h, NULL), 0);
    ck_assert_str_eq(h.zone, "eth0");
    canon_bad("fe80::1%", 8, "zone id");
    canon_bad("fe80::1%e/th", 12, "zone id");
    /* Looks like a number but is not an address: refused, never a name. */
    canon_bad("1.2.3.4.5", 9, "not a valid IPv4");
    canon_bad("256.1.1.1", 9, "not a valid IPv4");
    canon_bad("1.1.1.256", 9, "not a valid IPv4");
    canon_bad("08.1.1.1", 8, "not a valid IPv4");
    canon_bad("example.123", 11, "not a valid IPv4");
    canon_bad("4294967296", 10, "not a valid IPv4");
    canon_bad("[1.2.3.4]", 9, "not a valid IPv6");
    canon_bad("[::1", 4, "without a matching");
    canon_bad("1::2::3", 7, "not a valid IPv6 address");
    canon_bad("example.com:8080", 16, "not an IPv6 address (give the port");
    /* A numeric label elsewhere is fine. */
    canon_ok("123.example.com", POLICY_HOST_NAME, "123.example.com");
}
END_TEST

static void classify(const char *lit, enum policy_addr_class cls, bool internal)
{
    struct policy_host h;
    ck_assert_msg(policy_host_canon(lit, strlen(lit), &h, NULL) == 0, "%s", lit);
    ck_assert_int_eq(h.kind, POLICY_HOST_ADDR);
    struct policy_addr_info info;
    policy_addr_classify(&h.addr, &info);
    ck_assert_msg(info.cls == cls, "%s: class %d (%s), want %d", lit, info.cls, info.reason, cls);
    ck_assert_msg(info.internal == internal, "%s: internal %d", lit, info.internal);
    ck_assert_int_eq(policy_addr_is_internal(&h.addr), internal);
    ck_assert_ptr_nonnull(info.reason);
    ck_assert_ptr_nonnull(info.code);
}

START_TEST(classify_internal_ranges)
{
    classify("8.8.8.8", POLICY_ADDR_PUBLIC, false);
    classify("140.82.112.6", POLICY_ADDR_PUBLIC, false);
    classify("127.0.0.1", POLICY_ADDR_LOOPBACK, true);
    classify("127.255.0.9", POLICY_ADDR_LOOPBACK, true);
    classify("10.1.2.3", POLICY_ADDR_PRIVATE, true);
    classify("172.16.0.1", POLICY_ADDR_PRIVATE, true);
    classify("172.31.255.255", POLICY_ADDR_PRIVATE, true);
    classify("172.32.0.1", POLICY_ADDR_PUBLIC, false);
    classify("192.168.1.1", POLICY_ADDR_PRIVATE, true);
    classify("169.254.169.254", POLICY_ADDR_METADATA, true);
    classify("169.254.1.1", POLICY_ADDR_LINK_LOCAL, true);
    classify("100.64.0.1", POLICY_ADDR_SHARED, true);
    classify("100.127.255.255", POLICY_ADDR_SHARED, true);
    classify("100.128.0.1", POLICY_ADDR_PUBLIC, false);
    classify("0.0.0.0", POLICY_ADDR_UNSPECIFIED, true);
    classify("0.1.2.3", POLICY_ADDR_UNSPECIFIED, true);
    classify("224.0.0.1", POLICY_ADDR_MULTICAST, true);
    classify("239.255.255.250", POLICY_ADDR_MULTICAST, true);
    classify("255.255.255.255", POLICY_ADDR_BROADCAST, true);
    classify("240.0.0.1", POLICY_ADDR_RESERVED, true);
    classify("192.0.0.8", POLICY_ADDR_RESERVED, true);
    classify("198.18.0.1", POLICY_ADDR_BENCHMARK, true);
    classify("198.19.255.1", POLICY_ADDR_BENCHMARK, true);
    classify("192.88.99.1", POLICY_ADDR_TUNNEL, true);
    /* Documentation ranges are where test worlds live: not internal. */
    classify("203.0.113.5", POLICY_ADDR_DOCUMENTATION, false);
    classify("198.51.100.1", POLICY_ADDR_DOCUMENTATION, false);
    classify("192.0.2.1", POLICY_ADDR_DOCUMENTATION, false);
    classify("2001:db8::1", POLICY_ADDR_DOCUMENTATION, false);
    classify("3fff::1", POLICY_ADDR_DOCUMENTATION, false);
    classify("::", POLICY_ADDR_UNSPECIFIED, true);
    classify("::1", POLICY_ADDR_LOOPBACK, true);
    classify("fc00::1", POLICY_ADDR_ULA, true);
    classify("fdff::1", POLICY_ADDR_ULA, true);
    classify("fd00:ec2::254", POLICY_ADDR_METADATA, true);
    classify("fe80::1", POLICY_ADDR_LINK_LOCAL, true);
    classify("febf::1", POLICY_ADDR_LINK_LOCAL, true);
    classify("fec0::1", POLICY_ADDR_RESERVED, true);
    classify("ff02::1", POLICY_ADDR_MULTICAST, true);
    classify("2606:4700::1111", POLICY_ADDR_PUBLIC, false);
    classify("4000::1", POLICY_ADDR_RESERVED, true);
    classify("100::1", POLICY_ADDR_RESERVED, true);
    classify("2001:2::1", POLICY_ADDR_BENCHMARK, true);
    classify("2001:10::1", POLICY_ADDR_RESERVED, true);
    classify("5f00::1", POLICY_ADDR_RESERVED, true);
    classify("64:ff9b:1::1", POLICY_ADDR_RESERVED, true);
}
END_TEST

START_TEST(classify_embedded_ipv4)
{
    /* IPv4-mapped: canonicalised to IPv4 already. */
    classify("::ffff:169.254.169.254", POLICY_ADDR_METADATA, true);
    classify("::ffff:8.8.8.8", POLICY_ADDR_PUBLIC, false);
    /* NAT64: judged by the embedded address. */
    classify("64:ff9b::7f00:1", POLICY_ADDR_LOOPBACK, true);
    classify("64:ff9b::a9fe:a9fe", POLICY_ADDR_METADATA, true);
    classify("64:ff9b::a00:1", POLICY_ADDR_PRIVATE, true);
    classify("64:ff9b::808:808", POLICY_ADDR_NAT64, false);
    /* 6to4 and Teredo are always refused (tunnels), also with a public embedded address. */
    classify("2002:7f00:1::1", POLICY_ADDR_TUNNEL, true);
    classify("2002:808:808::1", POLICY_ADDR_TUNNEL, true);
    classify("2001:0:4136:e378:8000:63bf:80ff:fffe", POLICY_ADDR_TUNNEL, true);
    /* IPv4-compatible (deprecated). */
    classify("::10.0.0.1", POLICY_ADDR_RESERVED, true);
    struct policy_host h;
    ck_assert_int_eq(policy_host_canon("2001:0:4136:e378:8000:63bf:3fff:fdd2", 36, &h, NULL), 0);
    struct policy_addr_info info;
    policy_addr_classify(&h.addr, &info);
    char buf[64];
    ck_assert_str_eq(policy_addr_format(&info.embedded, buf, sizeof buf), "192.0.2.45");
    ck_assert_int_eq(policy_host_canon("2002:c000:022d::1", 17, &h, NULL), 0);
    policy_addr_classify(&h.addr, &info);
    ck_assert_str_eq(policy_addr_format(&info.embedded, buf, sizeof buf), "192.0.2.45");
}
END_TEST

START_TEST(addr_from_sockaddr)
{
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::ffff:10.0.0.7", &s6.sin6_addr);
    struct policy_addr a;
    ck_assert_int_eq(policy_addr_from_sockaddr((struct sockaddr *)&s6, &a), 0);
    ck_assert_int_eq(a.family, AF_INET);
    char buf[64];
    ck_assert_str_eq(policy_addr_format(&a, buf, sizeof buf), "10.0.0.7");
    struct sockaddr_in s4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.0.0.7", &s4.sin_addr);
    struct policy_addr b;
    ck_assert_int_eq(policy_addr_from_sockaddr((struct sockaddr *)&s4, &b), 0);
    ck_assert(policy_addr_equal(&a, &b));
    struct sockaddr su = {.sa_family = AF_UNIX};
    ck_assert_int_eq(policy_addr_from_sockaddr(&su, &b), -EAFNOSUPPORT);
}
END_TEST

static bool pmatch(const char *pattern, const char *name)
{
    struct policy_pattern p;
    struct al_error err = {0};
    ck_assert_msg(policy_pattern_canon(pattern, strlen(pattern), &p, &err) == 0, "%s: %s", pattern,
                  err.msg);
    return policy_pattern_match(&p, name, strlen(name));
}

START_TEST(patterns_match_and_never_overmatch)
{
    ck_assert(pmatch("example.com", "example.com"));
    ck_assert(!pmatch("example.com", "www.example.com"));
    ck_assert(!pmatch("example.com", "evilexample.com"));
    /* "*" = exactly one label, never the apex. */
    ck_assert(pmatch("*.example.com", "a.example.com"));
    ck_assert(!pmatch("*.example.com", "example.com"));
    ck_assert(!pmatch("*.example.com", "a.b.example.com"));
    ck_assert(!pmatch("*.example.com", "evilexample.com"));
    ck_assert(!pmatch("*.example.com", "aexample.com"));
    ck_assert(!pmatch("*.example.com", "a.example.com.evil.net"));
    ck_assert(!pmatch("*.example.com", "example.com.evil.net"));
    /* "**" = one or more labels, never the apex. */
    ck_assert(pmatch("**.example.com", "a.example.com"));
    ck_assert(pmatch("**.example.com", "a.b.c.example.com"));
    ck_assert(!pmatch("**.example.com", "example.com"));
    ck_assert(!pmatch("**.example.com", "evilexample.com"));
    ck_assert(!pmatch("**.example.com", "x.evilexample.com"));
    ck_assert(!pmatch("**.example.com", "a.example.com.evil.net"));
    /* Label globs. */
    ck_assert(pmatch("api-*.example.com", "api-eu.example.com"));
    ck_assert(pmatch("api*.example.com", "api.example.com"));
    ck_assert(!pmatch("api-*.example.com", "api.example.com"));
    ck_assert(!pmatch("api-*.example.com", "x.api-eu.example.com"));
    ck_assert(pmatch("*-docker.pkg.dev", "europe-docker.pkg.dev"));
    ck_assert(pmatch("a*b*c.example.com", "aXXbYYc.example.com"));
    ck_assert(!pmatch("a*b*c.example.com", "aXXbYY.example.com"));
    /* Patterns are canonicalised like names. */
    struct policy_pattern p;
    ck_assert_int_eq(policy_pattern_canon("*.BÜCHER.Example.", 18, &p, NULL), 0);
    ck_assert_str_eq(p.text, "*.xn--bcher-kva.example");
    ck_assert_str_eq(p.base, "xn--bcher-kva.example");
    ck_assert_int_eq(policy_pattern_canon("API-*.Example.COM", 17, &p, NULL), 0);
    ck_assert_str_eq(p.text, "api-*.example.com");
    ck_assert_str_eq(p.glob, "api-*");
    ck_assert_int_eq(p.kind, POLICY_PATTERN_GLOB);
}
END_TEST

START_TEST(patterns_invalid)
{
    struct policy_pattern p;
    struct al_error err = {0};
    ck_assert_int_eq(policy_pattern_canon("*", 1, &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "would match every name"));
    ck_assert_int_eq(policy_pattern_canon("**", 2, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("*.", 2, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("a.*.example.com", 15, &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "leftmost label"));
    ck_assert_int_eq(policy_pattern_canon("***.example.com", 15, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("**a.example.com", 15, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("*.10.0.0.1", 10, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("*_x.example.com", 15, &p, &err), -EINVAL);
    ck_assert_int_eq(policy_pattern_canon("10.0.0.1", 8, &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "cidrs: [10.0.0.1/32]"));
    ck_assert_int_eq(policy_pattern_canon("0x0a000001", 10, &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "'10.0.0.1' is an IP address"));
}
END_TEST

/* Vault bound hosts (policy_bound_host_*): the one canonicaliser for the vault and the proxy. */
START_TEST(bound_hosts)
{
    struct al_error e = {0};
    char out[POLICY_BOUND_HOST_MAX + 1];
    ck_assert_int_eq(policy_bound_host_canon("API.Example.COM.", 16, true, out, &e), 0);
    ck_assert_str_eq(out, "api.example.com");
    ck_assert_int_eq(policy_bound_host_canon("0x7f.1", 6, true, out, &e), 0);
    ck_assert_str_eq(out, "127.0.0.1");
    ck_assert_int_eq(policy_bound_host_canon("[::FFFF:1.2.3.4]", 16, true, out, &e), 0);
    ck_assert_int_eq(policy_bound_host_canon("fe80::1%eth0", 12, true, out, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "zone"));
    ck_assert_int_eq(policy_bound_host_canon("*.co.uk", 7, true, out, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "wildcard_public_suffix"));
    ck_assert_int_eq(policy_bound_host_canon("*.co.uk", 7, false, out, &e), 0);
    ck_assert_int_eq(policy_bound_host_canon("**.blogspot.com", 15, true, out, &e), -EINVAL);
    ck_assert_int_eq(policy_bound_host_canon("uk", 2, true, out, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "public_suffix"));
    ck_assert_int_eq(policy_bound_host_canon("*.example.co.uk", 15, true, out, &e), 0);
    ck_assert_int_eq(policy_bound_host_canon("", 0, true, out, &e), -EINVAL);

    const char *b[] = {"127.0.0.1", "*.example.co.uk", "api.example.com"};
    ck_assert(policy_bound_host_match(b, 3, "2130706433", 10)); /* 127.0.0.1 */
    ck_assert(policy_bound_host_match(b, 3, "a.example.co.uk", 15));
    ck_assert(!policy_bound_host_match(b, 3, "example.co.uk", 13));
    ck_assert(policy_bound_host_match(b, 3, "API.example.com.", 16));
    ck_assert(!policy_bound_host_match(b, 3, "127.0.0.2", 9));
    ck_assert(!policy_bound_host_match(b, 0, "api.example.com", 15)); /* none: no match */
    const char *a[] = {"127.0.0.1"};
    ck_assert(!policy_bound_host_match(a, 1, "localhost", 9)); /* names never match addresses */
}
END_TEST

START_TEST(secret_names)
{
    const char *good[] = {"github/token", "a", "A.b-c_d/e", "team/ci/npm-token", "x.y", NULL};
    for (size_t i = 0; good[i]; i++)
        ck_assert_msg(policy_secret_name_valid(good[i], strlen(good[i])), "%s", good[i]);
    const char *bad[] = {"",        "/a",  "a/",  "a//b", "../x", "a/../b", "a/./b",
                         ".hidden", "a b", "a\n", "a:b",  "a}b",  "a$b",    NULL};
    for (size_t i = 0; bad[i]; i++)
        ck_assert_msg(!policy_secret_name_valid(bad[i], strlen(bad[i])), "%s", bad[i]);
    char longname[200];
    memset(longname, 'a', 129);
    ck_assert(!policy_secret_name_valid(longname, 129));
    ck_assert(policy_secret_name_valid(longname, 128));
}
END_TEST

static void path_ok(const char *in, const char *want)
{
    char out[POLICY_PATH_MAX + 1];
    struct al_error err = {0};
    ck_assert_msg(policy_path_normalize(in, strlen(in), out, sizeof out, &err) == 0, "%s: %s", in,
                  err.msg);
    ck_assert_msg(strcmp(out, want) == 0, "'%s' -> '%s', want '%s'", in, out, want);
}

static void path_bad(const char *in, size_t len, const char *part)
{
    char out[POLICY_PATH_MAX + 1];
    struct al_error err = {0};
    ck_assert_msg(policy_path_normalize(in, len, out, sizeof out, &err) == -EINVAL,
                  "'%s' should be refused", in);
    ck_assert_msg(strstr(err.msg, part), "'%s': '%s' lacks '%s'", in, err.msg, part);
}

START_TEST(paths_normalise_or_refuse)
{
    path_ok("/", "/");
    path_ok("/a/b", "/a/b");
    path_ok("/a/b/", "/a/b/");
    path_ok("/a/%7Eb", "/a/~b");
    path_ok("/%61%62c", "/abc");
    path_ok("/a/%2f", "/a/%2F");
    path_ok("/a/%c3%a9", "/a/%C3%A9");
    path_ok("/a?x=../../etc", "/a");
    path_ok("/api/v4/projects/group%2Fproject", "/api/v4/projects/group%2Fproject");
    path_ok("/a/..b/c", "/a/..b/c");
    path_bad("/a/../b", 7, "dot segment");
    path_bad("/a/./b", 6, "dot segment");
    path_bad("/a/..", 5, "dot segment");
    path_bad("/a/%2e%2e/b", 11, "dot segment");
    path_bad("/a/%2E/b", 8, "dot segment");
    path_bad("/a/.%2e/b", 9, "dot segment");
    path_bad("/a/..;jsessionid=1/b", 20, "dot segment");
    path_bad("/a/..%2Fadmin", 13, "encoded slash");
    path_bad("/a/%2e%2e%2fadmin", 17, "encoded slash");
    path_bad("/a/x%5C..%5Cadmin", 17, "encoded slash");
    path_bad("//a", 3, "empty path segment");
    path_bad("/a//b", 5, "empty path segment");
    path_bad("/a\\b", 4, "backslash");
    path_bad("/a%00b", 6, "NUL");
    path_bad("/a%zz", 5, "malformed percent-escape");
    path_bad("/a%2", 4, "malformed percent-escape");
    path_bad("/a#frag", 7, "fragment");
    path_bad("a/b", 3, "must start with '/'");
    path_bad("*", 1, "must start with '/'");
    path_bad("http://x/a", 10, "must start with '/'");
    path_bad("/a b", 4, "control, space or non-ASCII");
    path_bad("/a\xc3\xa9", 4, "control, space or non-ASCII");
    path_bad("", 0, "empty path");
    char *huge = malloc(POLICY_PATH_MAX + 10);
    huge[0] = '/';
    memset(huge + 1, 'a', POLICY_PATH_MAX + 5);
    path_bad(huge, POLICY_PATH_MAX + 6, "longer than");
    path_bad(huge, POLICY_PATH_MAX + 1, "longer than 8192 bytes");
    /* POLICY_PATH_MAX bytes is the longest path accepted, also when it ends in an escape. */
    char out[POLICY_PATH_MAX + 1];
    struct al_error err = {0};
    ck_assert_int_eq(policy_path_normalize(huge, POLICY_PATH_MAX, out, sizeof out, &err), 0);
    ck_assert_uint_eq(strlen(out), POLICY_PATH_MAX);
    memcpy(huge + POLICY_PATH_MAX - 3, "%2f", 3);
    ck_assert_int_eq(policy_path_normalize(huge, POLICY_PATH_MAX, out, sizeof out, &err), 0);
    ck_assert_str_eq(out + POLICY_PATH_MAX - 4, "a%2F");
    free(huge);
}
END_TEST

START_TEST(paths_match_patterns)
{
    ck_assert(policy_path_match("/repos/**", "/repos"));
    ck_assert(policy_path_match("/repos/**", "/repos/"));
    ck_assert(policy_path_match("/repos/**", "/repos/a/b/c"));
    ck_assert(!policy_path_match("/repos/**", "/reposx"));
    ck_assert(!policy_path_match("/repos/**", "/user"));
    ck_assert(policy_path_match("/repos/*/issues", "/repos/x/issues"));
    ck_assert(!policy_path_match("/repos/*/issues", "/repos/x/y/issues"));
    ck_assert(!policy_path_match("/repos/*/issues", "/repos/x/issues/1"));
    ck_assert(policy_path_match("/a/**/z", "/a/z"));
    ck_assert(policy_path_match("/a/**/z", "/a/b/c/z"));
    ck_assert(!policy_path_match("/a/**/z", "/a/b"));
    ck_assert(policy_path_match("/**/z/**", "/x/y/z/w"));
    ck_assert(policy_path_match("/*.json", "/x.json"));
    ck_assert(!policy_path_match("/*.json", "/a/x.json"));
    ck_assert(policy_path_match("/", "/"));
    ck_assert(!policy_path_match("/", "/a"));
    ck_assert(policy_path_match("/simple/*/", "/simple/requests/"));
    ck_assert(!policy_path_match("/simple/*/", "/simple/requests"));
    struct al_error err = {0};
    ck_assert_int_eq(policy_path_pattern_check("/a/**/b/**", &err), 0);
    ck_assert_int_eq(policy_path_pattern_check("/a/**b", &err), -EINVAL);
    ck_assert_int_eq(policy_path_pattern_check("/a?x", &err), -EINVAL);
    ck_assert_int_eq(policy_path_pattern_check("a", &err), -EINVAL);
    ck_assert_int_eq(policy_path_pattern_check("/a//b", &err), -EINVAL);
    ck_assert_int_eq(policy_path_pattern_check("/a/../b", &err), -EINVAL);
    ck_assert_int_eq(policy_path_pattern_check("/**/**/**/**/**", &err), -EINVAL);
}
END_TEST

static Suite *name_suite(void)
{
    Suite *s = suite_create("policy_name");
    TCase *tc = tcase_create("canon");
    tcase_add_test(tc, canon_case_and_trailing_dots);
    tcase_add_test(tc, canon_ldh_and_lengths);
    tcase_add_test(tc, canon_idn_punycode_and_dots);
    tcase_add_test(tc, canon_homographs);
    tcase_add_test(tc, canon_ip_literals_every_spelling);
    suite_add_tcase(s, tc);
    TCase *ta = tcase_create("addresses");
    tcase_add_test(ta, classify_internal_ranges);
    tcase_add_test(ta, classify_embedded_ipv4);
    tcase_add_test(ta, addr_from_sockaddr);
    suite_add_tcase(s, ta);
    TCase *tp = tcase_create("patterns");
    tcase_add_test(tp, patterns_match_and_never_overmatch);
    tcase_add_test(tp, patterns_invalid);
    tcase_add_test(tp, secret_names);
    tcase_add_test(tp, bound_hosts);
    tcase_add_test(tp, paths_normalise_or_refuse);
    tcase_add_test(tp, paths_match_patterns);
    suite_add_tcase(s, tp);
    return s;
}

AL_SUITE_MAIN(name_suite)
