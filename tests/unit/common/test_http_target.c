/* Unit tests: common/http_head's request-target and authority parser (RFC 9112 3.2), every
 * form and every refusal. */
#include "al_test.h"
#include "common/http_head.h"

#include <errno.h>
#include <string.h>

static int tp(const char *t, unsigned flags, struct al_http_target *out, const char **why)
{
    *why = NULL;
    return al_http_target_parse(t, strlen(t), flags, out, why);
}

static void span_eq(const char *p, size_t n, const char *want)
{
    ck_assert_uint_eq(n, strlen(want));
    ck_assert_int_eq(memcmp(p, want, n), 0);
}

START_TEST(origin_form_splits_path_and_query)
{
    struct al_http_target t;
    const char *why;
    const char *s = "/a/b?x=1&y=%20";
    ck_assert_int_eq(tp(s, 0, &t, &why), 0);
    ck_assert_int_eq(t.form, AL_HTTP_TARGET_ORIGIN);
    ck_assert_ptr_eq(t.path, s);
    span_eq(t.path, t.path_len, "/a/b");
    ck_assert(t.has_query);
    span_eq(t.query, t.query_len, "x=1&y=%20");
    ck_assert_uint_eq(t.authority.len, 0);

    ck_assert_int_eq(tp("/", 0, &t, &why), 0);
    span_eq(t.path, t.path_len, "/");
    ck_assert(!t.has_query);
    ck_assert_uint_eq(t.query_len, 0);
    /* An empty query is still a query; only the first '?' splits. */
    ck_assert_int_eq(tp("/p?", 0, &t, &why), 0);
    ck_assert(t.has_query);
    ck_assert_uint_eq(t.query_len, 0);
    ck_assert_int_eq(tp("/p?a?b", 0, &t, &why), 0);
    span_eq(t.query, t.query_len, "a?b");
    /* Empty segments are a path like any other (the authority is the Host header's). */
    ck_assert_int_eq(tp("//evil.test/x", 0, &t, &why), 0);
    ck_assert_int_eq(t.form, AL_HTTP_TARGET_ORIGIN);
    span_eq(t.path, t.path_len, "//evil.test/x");
}
END_TEST

START_TEST(asterisk_form_is_only_a_lone_star)
{
    struct al_http_target t;
    const char *why;
    ck_assert_int_eq(tp("*", 0, &t, &why), 0);
    ck_assert_int_eq(t.form, AL_HTTP_TARGET_ASTERISK);
    ck_assert_uint_eq(t.path_len, 0);
    ck_assert_int_eq(tp("**", 0, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_target");
    ck_assert_int_eq(tp("*/x", 0, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_target");
}
END_TEST

START_TEST(absolute_form_http_and_https)
{
    struct al_http_target t;
    const char *why;
    ck_assert_int_eq(tp("http://example.test/p/q?x=1", 0, &t, &why), 0);
    ck_assert_int_eq(t.form, AL_HTTP_TARGET_ABSOLUTE);
    ck_assert(!t.https);
    span_eq(t.authority.text, t.authority.len, "example.test");
    span_eq(t.authority.host, t.authority.host_len, "example.test");
    ck_assert(!t.authority.has_port);
    ck_assert_uint_eq(t.authority.port, 0);
    span_eq(t.path, t.path_len, "/p/q");
    span_eq(t.query, t.query_len, "x=1");

    /* The scheme is case-insensitive (RFC 3986 3.1). */
    ck_assert_int_eq(tp("HTTPS://Example.Test:8443", 0, &t, &why), 0);
    ck_assert(t.https);
    span_eq(t.authority.host, t.authority.host_len, "Example.Test");
    ck_assert(t.authority.has_port);
    ck_assert_uint_eq(t.authority.port, 8443);
    ck_assert_uint_eq(t.path_len, 0);
    ck_assert(!t.has_query);

    /* No path but a query: the caller decides whether "/?q" may stand for it. */
    ck_assert_int_eq(tp("http://h?q=1", 0, &t, &why), 0);
    ck_assert_uint_eq(t.path_len, 0);
    ck_assert(t.has_query);
    span_eq(t.query, t.query_len, "q=1");

    ck_assert_int_eq(tp("http://[2001:db8::1]:8080/x", 0, &t, &why), 0);
    ck_assert(t.authority.ip6);
    span_eq(t.authority.host, t.authority.host_len, "2001:db8::1");
    span_eq(t.authority.text, t.authority.len, "[2001:db8::1]:8080");
    ck_assert_uint_eq(t.authority.port, 8080);
    span_eq(t.path, t.path_len, "/x");

    ck_assert_int_eq(tp("http://203.0.113.5:80/", 0, &t, &why), 0);
    ck_assert(!t.authority.ip6);
    span_eq(t.authority.host, t.authority.host_len, "203.0.113.5");
}
END_TEST

START_TEST(authority_form_only_when_asked)
{
    struct al_http_target t;
    const char *why;
    ck_assert_int_eq(tp("example.test:443", AL_HTTP_TARGET_AUTHORITY_OK, &t, &why), 0);
    ck_assert_int_eq(t.form, AL_HTTP_TARGET_AUTHORITY);
    span_eq(t.authority.host, t.authority.host_len, "example.test");
    ck_assert_uint_eq(t.authority.port, 443);
    ck_assert_int_eq(tp("[::1]:8080", AL_HTTP_TARGET_AUTHORITY_OK, &t, &why), 0);
    ck_assert(t.authority.ip6);
    span_eq(t.authority.host, t.authority.host_len, "::1");

    ck_assert_int_eq(tp("example.test:443", 0, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_target");
    ck_assert_int_eq(tp("example.test", AL_HTTP_TARGET_AUTHORITY_OK, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "missing_port");
    ck_assert_int_eq(tp("h:1/p", AL_HTTP_TARGET_AUTHORITY_OK, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_host");
    /* Another scheme is not misread as "host:port". */
    ck_assert_int_eq(tp("ftp://example.test/", AL_HTTP_TARGET_AUTHORITY_OK, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_target");
}
END_TEST

struct refusal {
    const char *target;
    unsigned flags;
    const char *reason;
};

START_TEST(every_target_refusal)
{
    static const struct refusal cases[] = {
        {"", 0, "invalid_target"},
        {"/a b", 0, "invalid_target"},
        {"/a\x7f", 0, "invalid_target"},
        {"/\xc3\xa9", 0, "invalid_target"},
        {"/a\tb", 0, "invalid_target"},
        {"a/b", 0, "invalid_target"},
        {"ftp://h/", 0, "invalid_target"},
        {"file:///etc/passwd", 0, "invalid_target"},
        {"http:/h/", 0, "invalid_target"},
        {"/x#@evil.test", 0, "fragment_in_target"},
        {"http://h/#x", 0, "fragment_in_target"},
        {"/\\evil.test", AL_HTTP_TARGET_NO_BACKSLASH, "backslash_in_target"},
        {"http://h\\@evil.test/", AL_HTTP_TARGET_NO_BACKSLASH, "backslash_in_target"},
        {"http://h\\evil.test/", 0, "backslash_in_authority"},
        {"http://", 0, "missing_host"},
        {"http:///p", 0, "missing_host"},
        {"http://:80/", 0, "missing_host"},
        {"http://a@evil.test/", 0, "userinfo_in_authority"},
        {"http://a:b@evil.test/", 0, "userinfo_in_authority"},
        {"http://a%2eb/", 0, "invalid_host"},
        {"http://a,b/", 0, "invalid_host"},
        {"http://a;b/", 0, "invalid_host"},
        {"http://a!b/", 0, "invalid_host"},
        {"http://2001:db8::1/", 0, "invalid_host"},
        {"http://[2001:db8::1/", 0, "invalid_host"},
        {"http://[2001:db8::1]x/", 0, "invalid_host"},
        {"http://[zz]/", 0, "invalid_host"},
        {"http://[]/", 0, "invalid_host"},
        {"http://[fe80::1%25eth0]/", 0, "invalid_host"},
        {"http://[v1.x]/", 0, "invalid_host"},
        {"http://a[b]/", 0, "invalid_host"},
        {"http://h:/", 0, "invalid_port"},
        {"http://h:0/", 0, "invalid_port"},
        {"http://h:65536/", 0, "invalid_port"},
        {"http://h:123456/", 0, "invalid_port"},
        {"http://h:+80/", 0, "invalid_port"},
        {"http://h:8o/", 0, "invalid_port"},
        {"http://[::1]:/", 0, "invalid_port"},
        {"h", AL_HTTP_TARGET_AUTHORITY_OK, "missing_port"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct al_http_target t;
        const char *why = NULL;
        int rc = tp(cases[i].target, cases[i].flags, &t, &why);
        if (rc != -EINVAL || !why || strcmp(why, cases[i].reason) != 0)
            ck_abort_msg("\"%s\": rc %d reason %s, want %s", cases[i].target, rc,
                         why ? why : "(none)", cases[i].reason);
        /* Every refusal has a sentence for a person. */
        ck_assert_str_ne(al_http_target_message(why), why);
    }
}
END_TEST

START_TEST(backslash_is_kept_without_the_flag)
{
    struct al_http_target t;
    const char *why;
    ck_assert_int_eq(tp("/search?q=a\\b", 0, &t, &why), 0);
    span_eq(t.query, t.query_len, "q=a\\b");
    ck_assert_int_eq(tp("/search?q=a\\b", AL_HTTP_TARGET_NO_BACKSLASH, &t, &why), -EINVAL);
    ck_assert_str_eq(why, "backslash_in_target");
}
END_TEST

static int ap(const char *a, struct al_http_authority *out, const char **why)
{
    *why = NULL;
    return al_http_authority_parse(a, strlen(a), out, why);
}

START_TEST(host_values_parse_with_ows_and_ports)
{
    struct al_http_authority a;
    const char *why;
    ck_assert_int_eq(ap(" api.example.test:8443\t", &a, &why), 0);
    span_eq(a.text, a.len, "api.example.test:8443");
    span_eq(a.host, a.host_len, "api.example.test");
    ck_assert(a.has_port);
    ck_assert_uint_eq(a.port, 8443);
    ck_assert_int_eq(ap("[::ffff:203.0.113.10]", &a, &why), 0);
    ck_assert(a.ip6);
    ck_assert(!a.has_port);
    span_eq(a.host, a.host_len, "::ffff:203.0.113.10");
    ck_assert_int_eq(ap("my_host-1.internal.", &a, &why), 0);
    ck_assert_int_eq(ap("0xcb.0x0.0x71.0xa", &a, &why), 0);
    ck_assert_int_eq(ap("h:00080", &a, &why), 0);
    ck_assert_uint_eq(a.port, 80);
    ck_assert_int_eq(ap("h:65535", &a, &why), 0);
    ck_assert_uint_eq(a.port, 65535);

    char name[300];
    memset(name, 'a', 255);
    name[255] = 0;
    ck_assert_int_eq(ap(name, &a, &why), 0);
    name[255] = 'a';
    name[256] = 0;
    ck_assert_int_eq(ap(name, &a, &why), -EINVAL);
    ck_assert_str_eq(why, "invalid_host");
}
END_TEST

START_TEST(every_authority_refusal)
{
    static const struct refusal cases[] = {
        {"", 0, "missing_host"},
        {" \t", 0, "missing_host"},
        {":80", 0, "missing_host"},
        {"user@h", 0, "userinfo_in_authority"},
        {"h\\x", 0, "backslash_in_authority"},
        {"h/x", 0, "invalid_host"},
        {"h?x", 0, "invalid_host"},
        {"h#x", 0, "invalid_host"},
        {"h x", 0, "invalid_host"},
        {"allowed\xef\xbc\x8etest", 0, "invalid_host"},
        {"h,x", 0, "invalid_host"},
        {"::1", 0, "invalid_host"},
        {"[::1", 0, "invalid_host"},
        {"[::1]]", 0, "invalid_host"},
        {"[::1]:80:80", 0, "invalid_port"},
        {"h:80:80", 0, "invalid_host"},
        {"h:", 0, "invalid_port"},
        {"h:-1", 0, "invalid_port"},
        {"h:99999", 0, "invalid_port"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct al_http_authority a;
        const char *why = NULL;
        int rc = ap(cases[i].target, &a, &why);
        if (rc != -EINVAL || !why || strcmp(why, cases[i].reason) != 0)
            ck_abort_msg("\"%s\": rc %d reason %s, want %s", cases[i].target, rc,
                         why ? why : "(none)", cases[i].reason);
    }
    /* The first offending byte names the refusal. */
    struct al_http_authority a;
    const char *why;
    ck_assert_int_eq(ap("a@b\\c", &a, &why), -EINVAL);
    ck_assert_str_eq(why, "userinfo_in_authority");
    ck_assert_int_eq(ap("a\\b@c", &a, &why), -EINVAL);
    ck_assert_str_eq(why, "backslash_in_authority");
}
END_TEST

/* What a client sends for a URL, and a host as the canonicaliser takes it. */
START_TEST(origin_of_a_target_and_host_as_written)
{
    static const char *const cases[][2] = {
        {"http://h", "/"},
        {"http://h?q=1", "/?q=1"},
        {"http://h?", "/?"},
        {"https://h:8443/a/b?x=1&y", "/a/b?x=1&y"},
        {"http://h/", "/"},
        {"/p?a?b", "/p?a?b"},
        {"//evil.test/x", "//evil.test/x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct al_http_target t;
        const char *why;
        char out[64];
        ck_assert_int_eq(tp(cases[i][0], 0, &t, &why), 0);
        ck_assert_int_eq(al_http_target_origin(&t, out, sizeof out), 0);
        ck_assert_str_eq(out, cases[i][1]);
    }
    struct al_http_target t;
    const char *why;
    char small[6];
    ck_assert_int_eq(tp("http://h/abcde", 0, &t, &why), 0);
    ck_assert_int_eq(al_http_target_origin(&t, small, sizeof small), -ENAMETOOLONG);
    ck_assert_int_eq(tp("http://h/abcd", 0, &t, &why), 0);
    ck_assert_int_eq(al_http_target_origin(&t, small, sizeof small), 0);
    ck_assert_str_eq(small, "/abcd");
    ck_assert_int_eq(tp("http://h?abc", 0, &t, &why), 0);
    ck_assert_int_eq(al_http_target_origin(&t, small, 5), -ENAMETOOLONG);

    size_t n;
    const char *h;
    ck_assert_int_eq(tp("http://[2001:db8::1]:80/x", 0, &t, &why), 0);
    h = al_http_authority_host(&t.authority, &n);
    span_eq(h, n, "[2001:db8::1]");
    ck_assert_int_eq(tp("http://Example.TEST:80/x", 0, &t, &why), 0);
    h = al_http_authority_host(&t.authority, &n);
    span_eq(h, n, "Example.TEST");
    struct al_http_authority a;
    ck_assert_int_eq(al_http_authority_parse(" [::1] ", 7, &a, &why), 0);
    h = al_http_authority_host(&a, &n);
    span_eq(h, n, "[::1]");
}
END_TEST

START_TEST(parses_only_its_n_bytes)
{
    struct al_http_target t;
    const char *why;
    /* Not NUL-terminated: what follows n is not read as part of the target. */
    const char buf[] = "/p?q=1 HTTP/1.1";
    ck_assert_int_eq(al_http_target_parse(buf, 6, 0, &t, &why), 0);
    span_eq(t.query, t.query_len, "q=1");
    struct al_http_authority a;
    ck_assert_int_eq(al_http_authority_parse("h:80x", 4, &a, &why), 0);
    ck_assert_uint_eq(a.port, 80);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_target");
    TCase *tc = tcase_create("target");
    tcase_add_test(tc, origin_form_splits_path_and_query);
    tcase_add_test(tc, asterisk_form_is_only_a_lone_star);
    tcase_add_test(tc, absolute_form_http_and_https);
    tcase_add_test(tc, authority_form_only_when_asked);
    tcase_add_test(tc, every_target_refusal);
    tcase_add_test(tc, backslash_is_kept_without_the_flag);
    tcase_add_test(tc, host_values_parse_with_ows_and_ports);
    tcase_add_test(tc, every_authority_refusal);
    tcase_add_test(tc, origin_of_a_target_and_host_as_written);
    tcase_add_test(tc, parses_only_its_n_bytes);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
