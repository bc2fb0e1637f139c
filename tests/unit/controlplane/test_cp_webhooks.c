/* Unit tests: the pure parts of webhooks (controlplane/webhooks.c): the URL a webhook may
 * have, the addresses a delivery may dial, the two signatures (E2B's and airlock's, checked
 * against values computed independently with Python's hashlib and hmac), and the backoff. */
#include "al_test.h"
#include "controlplane/webhooks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

START_TEST(urls_https_by_default_and_nothing_hidden)
{
    struct cp_wh_url u;
    struct al_error err = {0};
    ck_assert_int_eq(cp_wh_url_parse("https://Hooks.Example.COM/in?x=1", false, &u, &err), 0);
    ck_assert(u.tls);
    ck_assert_str_eq(u.host, "hooks.example.com");
    ck_assert(!u.host_is_addr);
    ck_assert_int_eq(u.port, 443);
    ck_assert_str_eq(u.target, "https://hooks.example.com:443");
    ck_assert_str_eq(u.path, "/in?x=1");
    ck_assert_int_eq(cp_wh_url_parse("https://h.example:8443", false, &u, &err), 0);
    ck_assert_int_eq(u.port, 8443);
    ck_assert_str_eq(u.path, "/");
    ck_assert_int_eq(cp_wh_url_parse("https://h.example?q", false, &u, &err), 0);
    ck_assert_str_eq(u.path, "/?q");
    /* Addresses in every spelling are recognised as addresses (then checked as such). */
    ck_assert_int_eq(cp_wh_url_parse("https://2130706433/", false, &u, &err), 0);
    ck_assert(u.host_is_addr);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(cp_wh_url_parse("https://[::FFFF:7f00:1]:9/", false, &u, &err), 0);
    ck_assert(u.host_is_addr);
    ck_assert_int_eq(cp_wh_url_parse("https://[2001:db8::1]:9/x", false, &u, &err), 0);
    ck_assert_str_eq(u.target, "https://[2001:db8::1]:9");
    /* http only when the operator allows it */
    ck_assert_int_eq(cp_wh_url_parse("http://h.example/", false, &u, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "webhooks.allow_http"));
    ck_assert_int_eq(cp_wh_url_parse("http://h.example/", true, &u, &err), 0);
    ck_assert(!u.tls);
    ck_assert_int_eq(u.port, 80);
    static const char *const bad[] = {
        "",
        "ftp://h.example/",
        "h.example/",
        "https://user:pw@h.example/",
        "https://h.example@evil.example/",
        "https://h.example/#frag",
        "https://h.example/a b",
        "https://h.example/\r\nX: y",
        "https:///path",
        "https://h.example:0/",
        "https://h.example:65536/",
        "https://h.example:12a/",
        "https://h.example:/",
        "https://[::1/",
        "https://[fe80::1%25eth0]/",
        "https://bad_name.example/",
        "https://-x.example/",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(cp_wh_url_parse(bad[i], true, &u, &err) == -EINVAL, "accepted: %s", bad[i]);
    /* Each refusal says what is wrong with the URL. */
    static const char *const said[][2] = {
        {"https://user:pw@h.example/", "user name or password"},
        {"https://h.example/#frag", "fragment"},
        {"ftp://h.example/", "must be an https:// URL"},
        {"/just/a/path", "must be an https:// URL"},
        {"https://h.example:0/", "1 to 65535"},
        {"https:///path", "no host"},
        {"https://[::1/", "IPv6 address in brackets"},
        {"https://bad_name.example/", "the host:"},
    };
    for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
        err = (struct al_error){0};
        ck_assert_int_eq(cp_wh_url_parse(said[i][0], true, &u, &err), -EINVAL);
        ck_assert_msg(strstr(err.msg, said[i][1]), "%s: '%s' does not say '%s'", said[i][0],
                      err.msg, said[i][1]);
    }
    char longest[2100];
    memset(longest, 'a', sizeof longest - 1);
    memcpy(longest, "https://h.example/", 18);
    longest[sizeof longest - 1] = '\0';
    ck_assert_int_eq(cp_wh_url_parse(longest, true, &u, &err), -EINVAL);
}
END_TEST

static int check4(const char *a, bool allow, char *why)
{
    struct sockaddr_in s = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, a, &s.sin_addr), 1);
    return cp_wh_addr_check((struct sockaddr *)&s, allow, why, 128);
}

static int check6(const char *a, bool allow, char *why)
{
    struct sockaddr_in6 s = {.sin6_family = AF_INET6};
    ck_assert_int_eq(inet_pton(AF_INET6, a, &s.sin6_addr), 1);
    return cp_wh_addr_check((struct sockaddr *)&s, allow, why, 128);
}

START_TEST(internal_addresses_are_refused_unless_allowed)
{
    char why[128];
    static const char *const internal4[] = {
        "127.0.0.1",   "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "169.254.1.1", "0.0.0.0",  "224.0.0.1",  "100.64.0.1",  "255.255.255.255"};
    for (size_t i = 0; i < sizeof internal4 / sizeof internal4[0]; i++) {
        ck_assert_msg(check4(internal4[i], false, why) == -EACCES, "allowed: %s", internal4[i]);
        ck_assert_int_eq(check4(internal4[i], true, why), 0);
    }
    ck_assert_int_eq(check4("127.0.0.1", false, why), -EACCES);
    ck_assert_str_eq(why, "127.0.0.1 is loopback (127.0.0.0/8)");
    ck_assert_int_eq(check4("169.254.169.254", false, why), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "metadata"));
    static const char *const internal6[] = {"::1",
                                            "::",
                                            "fe80::1",
                                            "fc00::1",
                                            "fd12::1",
                                            "ff02::1",
                                            "::ffff:127.0.0.1",
                                            "::ffff:10.0.0.1",
                                            "::ffff:169.254.169.254",
                                            "64:ff9b::a00:1"};
    for (size_t i = 0; i < sizeof internal6 / sizeof internal6[0]; i++) {
        ck_assert_msg(check6(internal6[i], false, why) == -EACCES, "allowed: %s", internal6[i]);
        ck_assert_int_eq(check6(internal6[i], true, why), 0);
    }
    ck_assert_int_eq(check6("::ffff:127.0.0.1", false, why), -EACCES);
    ck_assert_str_eq(why, "127.0.0.1 is loopback (127.0.0.0/8)"); /* judged as the IPv4 */
    /* Public addresses, and the documentation ranges the test worlds use, may be dialled. */
    ck_assert_int_eq(check4("8.8.8.8", false, why), 0);
    ck_assert_int_eq(check4("203.0.113.10", false, why), 0);
    ck_assert_int_eq(check6("2606:4700::1111", false, why), 0);
    ck_assert_int_eq(check6("::ffff:8.8.8.8", false, why), 0);
    struct sockaddr un = {.sa_family = AF_UNIX};
    ck_assert_int_eq(cp_wh_addr_check(&un, true, why, sizeof why), -EACCES);
}
END_TEST

START_TEST(signatures_match_independent_values)
{
    static const char sec[] = "secret-for-event-signature-verification";
    static const char body[] = "{\"type\":\"sandbox.lifecycle.created\"}";
    char e2b[48], sig[72];
    cp_wh_sign_e2b(sec, strlen(sec), body, strlen(body), e2b);
    /* base64.urlsafe_b64encode(hashlib.sha256(sec + body).digest()).rstrip("=") */
    ck_assert_str_eq(e2b, "TWALWb3ijVXg2m3WV_NNGRJ-21DCnhLSmwlw8J578o8");
    cp_wh_sign(sec, strlen(sec), 1700000000, body, strlen(body), sig);
    /* hmac.new(sec, b"1700000000." + body, hashlib.sha256).hexdigest() */
    ck_assert_str_eq(sig, "v1=53be3470858a64938c53081d32341c69e32bc64700f16a9415315340f54de533");
    /* The timestamp, the body and the secret each change it. */
    char other[72];
    cp_wh_sign(sec, strlen(sec), 1700000001, body, strlen(body), other);
    ck_assert_str_ne(sig, other);
    cp_wh_sign(sec, strlen(sec) - 1, 1700000000, body, strlen(body), other);
    ck_assert_str_ne(sig, other);
    cp_wh_sign(sec, strlen(sec), 1700000000, body, strlen(body) - 1, other);
    ck_assert_str_ne(sig, other);
}
END_TEST

START_TEST(backoff_doubles_with_jitter_up_to_the_cap)
{
    /* attempt n waits in [d/2, d] with d = base * 2^(n-1), capped */
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 1, 0), 500);
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 1, 500), 1000);
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 1, 501), 500); /* r wraps */
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 3, 0), 2000);
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 3, 2000), 4000);
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 20, 0), 30000);
    ck_assert_uint_eq(cp_wh_backoff_ms(1000, 60000, 200, 30000), 60000);
    ck_assert_uint_eq(cp_wh_backoff_ms(1, 1, 5, 7), 1);
    for (uint32_t r = 0; r < 5000; r += 7) {
        uint64_t d = cp_wh_backoff_ms(300, 100000, 4, r * 2654435761u);
        ck_assert(d >= 1200 && d <= 2400);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_webhooks");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, urls_https_by_default_and_nothing_hidden);
    tcase_add_test(tc, internal_addresses_are_refused_unless_allowed);
    tcase_add_test(tc, signatures_match_independent_values);
    tcase_add_test(tc, backoff_doubles_with_jitter_up_to_the_cap);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
