/* tests/unit/egress/test_config: the daemon's command line, the audit record helpers, and
 * the per-sandbox rate bucket (ratelimit.c). */
#include "al_test.h"
#include "egress/audit.h"
#include "egress/egress.h"
#include "egress/ratelimit.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <string.h>

static int parse(struct egress_config *c, struct al_error *err, int n, ...)
{
    char *argv[32] = {"airlock-egress"};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    egress_config_defaults(c);
    int rc = egress_config_parse_args(c, n + 1, argv, err);
    if (rc == 0)
        rc = egress_config_finish(c, err);
    return rc;
}

START_TEST(defaults_and_values)
{
    struct egress_config c;
    struct al_error err = {0};
    ck_assert_int_eq(parse(&c, &err, 2, "--state-dir", "/tmp/st"), 0);
    ck_assert_str_eq(c.admin_socket, "/tmp/st/run/egress.sock");
    ck_assert_str_eq(c.audit_dir, "/tmp/st/audit");
    ck_assert_str_eq(c.vault_socket, "/tmp/st/run/vault.sock");
    ck_assert_str_eq(c.upstream_ca, "/etc/ssl/certs/ca-certificates.crt");
    ck_assert(!c.no_vault);
    ck_assert_uint_eq(c.n_tcp_listen, 1);
    ck_assert_uint_eq(c.max_conns_per_sandbox, 256);
    ck_assert_uint_eq(c.sandbox_memory, c.memory_budget / 4);
    ck_assert(!c.audit_fail_open);
    ck_assert_int_eq(parse(&c, &err, 16, "--listen", "0.0.0.0:15001", "--listen=[::1]:15002",
                           "--dns", "127.0.0.1:53", "--resolver", "192.0.2.53", "--header-timeout",
                           "2s", "--max-body", "10MiB", "--relay", "copy", "--audit-fail-open",
                           "--dns-entropy-max", "3.5"),
                     0);
    ck_assert_uint_eq(c.n_tcp_listen, 2);
    ck_assert_int_eq(c.tcp_listen[1].ss_family, AF_INET6);
    ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&c.resolver)->sin_port), 53);
    ck_assert_uint_eq(c.header_timeout_ms, 2000);
    ck_assert_uint_eq(c.max_body_bytes, 10u << 20);
    ck_assert_int_eq(c.relay, EGRESS_RELAY_COPY);
    ck_assert(c.audit_fail_open);
    ck_assert(c.dns_entropy_max > 3.49 && c.dns_entropy_max < 3.51);
    /* Interception: the vault and the upstream roots. */
    ck_assert_int_eq(
        parse(&c, &err, 4, "--vault-socket", "none", "--upstream-ca", "/tmp/roots.pem"), 0);
    ck_assert(c.no_vault);
    ck_assert_str_eq(c.vault_socket, "");
    ck_assert_str_eq(c.upstream_ca, "/tmp/roots.pem");
    ck_assert_int_eq(parse(&c, &err, 1, "--vault-socket=/run/v.sock"), 0);
    ck_assert_str_eq(c.vault_socket, "/run/v.sock");
}
END_TEST

START_TEST(errors_say_what)
{
    struct egress_config c;
    struct al_error err = {0};
    ck_assert_int_lt(parse(&c, &err, 1, "--bogus"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown option '--bogus'"));
    ck_assert_int_lt(parse(&c, &err, 2, "--header-timeout", "soon"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "a duration"));
    ck_assert_int_lt(parse(&c, &err, 2, "--listen", "localhost"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "ADDR:PORT"));
    ck_assert_int_lt(parse(&c, &err, 2, "--relay", "zero-copy"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--workers", "0"), 0);
    ck_assert_int_lt(parse(&c, &err, 1, "--workers"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs a value"));
    ck_assert_int_lt(parse(&c, &err, 4, "--memory-budget", "1MiB", "--sandbox-memory", "2MiB"), 0);
    ck_assert_int_lt(parse(&c, &err, 4, "--dns-min-ttl", "10m", "--dns-max-ttl", "1m"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--max-header-bytes", "10"), 0);
}
END_TEST

START_TEST(dns_and_deny_limits)
{
    struct egress_config c;
    struct al_error err = {0};
    ck_assert_int_eq(parse(&c, &err, 0), 0);
    ck_assert_uint_eq(c.dns_rate, 200);
    ck_assert_uint_eq(c.dns_burst, 400);
    ck_assert_uint_eq(c.dns_inflight, 64);
    ck_assert_uint_eq(c.audit_allow_rate, 50);
    ck_assert_uint_eq(c.audit_allow_burst, 200);
    ck_assert_uint_eq(c.audit_deny_rate, 100);
    ck_assert_uint_eq(c.audit_deny_burst, 400);
    ck_assert_uint_eq(c.audit_aggregate_ms, 1000);
    /* The burst follows the rate unless given, in either order. */
    ck_assert_int_eq(parse(&c, &err, 2, "--dns-rate", "50"), 0);
    ck_assert_uint_eq(c.dns_burst, 100);
    ck_assert_int_eq(parse(&c, &err, 4, "--dns-burst", "7", "--dns-rate", "50"), 0);
    ck_assert_uint_eq(c.dns_rate, 50);
    ck_assert_uint_eq(c.dns_burst, 7);
    ck_assert_int_eq(parse(&c, &err, 4, "--dns-inflight", "8", "--audit-deny-rate", "0"), 0);
    ck_assert_uint_eq(c.dns_inflight, 8);
    ck_assert_uint_eq(c.audit_deny_rate, 0);
    /* Audit budgets: the burst follows the rate (four times) unless given. */
    ck_assert_int_eq(parse(&c, &err, 4, "--audit-allow-rate", "10", "--audit-deny-rate", "30"), 0);
    ck_assert_uint_eq(c.audit_allow_burst, 40);
    ck_assert_uint_eq(c.audit_deny_burst, 120);
    ck_assert_int_eq(parse(&c, &err, 4, "--audit-allow-burst", "3", "--audit-allow-rate", "10"), 0);
    ck_assert_uint_eq(c.audit_allow_burst, 3);
    ck_assert_int_eq(parse(&c, &err, 2, "--audit-aggregate-interval", "10s"), 0);
    ck_assert_uint_eq(c.audit_aggregate_ms, 10000);
    ck_assert_int_lt(parse(&c, &err, 2, "--audit-aggregate-interval", "100ms"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "between 1s and 1h"));
    ck_assert_int_lt(parse(&c, &err, 2, "--deny-audit-rate", "5"), 0);
    /* Rotation and retention: defaults bound the disk; 0 turns a retention rule off. */
    ck_assert_int_eq(parse(&c, &err, 0), 0);
    ck_assert_uint_eq(c.audit_rotate_bytes, 64ull << 20);
    ck_assert_uint_eq(c.audit_rotate_ms, 86400000ull);
    ck_assert_uint_eq(c.audit_retain_bytes, 4ull << 30);
    ck_assert_uint_eq(c.audit_retain_ms, 90ull * 86400000ull);
    ck_assert_uint_eq(c.audit_retain_files, 0);
    ck_assert_int_eq(parse(&c, &err, 8, "--audit-rotate-size", "1MiB", "--audit-retain-size", "0",
                           "--audit-retain-age", "30d", "--audit-retain-files", "10"),
                     0);
    ck_assert_uint_eq(c.audit_rotate_bytes, 1ull << 20);
    ck_assert_uint_eq(c.audit_retain_bytes, 0);
    ck_assert_uint_eq(c.audit_retain_ms, 30ull * 86400000ull);
    ck_assert_uint_eq(c.audit_retain_files, 10);
    ck_assert_int_lt(parse(&c, &err, 2, "--audit-retain-files", "1"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--audit-rotate-size", "100"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--audit-retain-age", "soon"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--audit-retain-size", "100MiB"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "less than twice --audit-rotate-size"));
    ck_assert_int_lt(parse(&c, &err, 2, "--dns-inflight", "0"), 0);
    ck_assert_int_lt(parse(&c, &err, 2, "--dns-rate", "many"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "--dns-rate"));
}
END_TEST

START_TEST(rate_bucket)
{
    atomic_uint_fast64_t tat = 0;
    uint64_t t0 = 1000000000000ull;
    /* 10/s, burst 5: five at once, then one per 100 ms. */
    int n = 0;
    for (int i = 0; i < 20; i++)
        n += egress_rate_admit(&tat, 10, 5, t0);
    ck_assert_int_eq(n, 5);
    ck_assert(!egress_rate_admit(&tat, 10, 5, t0 + 50000000ull));
    ck_assert(egress_rate_admit(&tat, 10, 5, t0 + 100000000ull));
    ck_assert(!egress_rate_admit(&tat, 10, 5, t0 + 100000000ull));
    /* A second idle refills the whole burst, not more. */
    n = 0;
    for (int i = 0; i < 20; i++)
        n += egress_rate_admit(&tat, 10, 5, t0 + 2000000000ull);
    ck_assert_int_eq(n, 5);
    /* Rate 0: no limit. */
    for (int i = 0; i < 100; i++)
        ck_assert(egress_rate_admit(&tat, 0, 0, t0));
}
END_TEST

/* The tokens shown are exactly what the bucket admits at that instant. */
START_TEST(rate_tokens_are_what_is_admitted)
{
    atomic_uint_fast64_t tat = 0;
    uint64_t t0 = 1000000000000ull;
    ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, t0), 5);
    for (int i = 0; i < 5; i++)
        ck_assert(egress_rate_admit(&tat, 10, 5, t0));
    ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, t0), 0);
    ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, t0 + 99999999ull), 0);
    ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, t0 + 250000000ull), 2);
    ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, t0 + 5000000000ull), 5);
    /* At each instant: tokens() admissions succeed, the next one fails. */
    uint64_t at[] = {t0 + 100000000ull, t0 + 350000000ull, t0 + 360000000ull, t0 + 3000000000ull};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        uint32_t n = egress_rate_tokens(&tat, 10, 5, at[k]);
        for (uint32_t i = 0; i < n; i++)
            ck_assert(egress_rate_admit(&tat, 10, 5, at[k]));
        ck_assert(!egress_rate_admit(&tat, 10, 5, at[k]));
        ck_assert_uint_eq(egress_rate_tokens(&tat, 10, 5, at[k]), 0);
    }
    ck_assert_uint_eq(egress_rate_tokens(&tat, 0, 0, t0), 1);
}
END_TEST

/* --listener-mode, and the environment's AIRLOCK_EGRESS_LISTENER_MODE under it. */
START_TEST(listener_mode)
{
    struct egress_config c;
    struct al_error err = {0};
    unsetenv("AIRLOCK_EGRESS_LISTENER_MODE");
    ck_assert_int_eq(parse(&c, &err, 2, "--resolver", "192.0.2.53"), 0);
    ck_assert_int_eq(c.listener_mode, EGRESS_LISTENER_AUTO);
    ck_assert_int_eq(parse(&c, &err, 4, "--resolver", "192.0.2.53", "--listener-mode", "shared"),
                     0);
    ck_assert_int_eq(c.listener_mode, EGRESS_LISTENER_SHARED);
    ck_assert_int_eq(parse(&c, &err, 3, "--resolver", "192.0.2.53", "--listener-mode=reuseport"),
                     0);
    ck_assert_int_eq(c.listener_mode, EGRESS_LISTENER_REUSEPORT);
    ck_assert_int_lt(parse(&c, &err, 2, "--listener-mode", "single"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "auto, reuseport or shared"));
    setenv("AIRLOCK_EGRESS_LISTENER_MODE", "shared", 1);
    ck_assert_int_eq(parse(&c, &err, 2, "--resolver", "192.0.2.53"), 0);
    ck_assert_int_eq(c.listener_mode, EGRESS_LISTENER_SHARED);
    ck_assert(!c.listener_mode_set);
    /* The command line wins. */
    ck_assert_int_eq(parse(&c, &err, 4, "--resolver", "192.0.2.53", "--listener-mode", "auto"), 0);
    ck_assert_int_eq(c.listener_mode, EGRESS_LISTENER_AUTO);
    setenv("AIRLOCK_EGRESS_LISTENER_MODE", "bogus", 1);
    ck_assert_int_lt(parse(&c, &err, 2, "--resolver", "192.0.2.53"), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "AIRLOCK_EGRESS_LISTENER_MODE='bogus'"));
    unsetenv("AIRLOCK_EGRESS_LISTENER_MODE");
    ck_assert_str_eq(egress_listener_mode_name(EGRESS_LISTENER_SHARED), "shared");
}
END_TEST

START_TEST(record_strings_are_sanitised)
{
    json_t *s = egress_json_str("ok\xff\x00x", 5);
    ck_assert_str_eq(json_string_value(s), "ok\xef\xbf\xbd\xef\xbf\xbdx");
    json_decref(s);
    s = egress_json_str("\xe2\x82\xac", 3); /* a valid euro sign */
    ck_assert_str_eq(json_string_value(s), "\xe2\x82\xac");
    json_decref(s);
    s = egress_json_str("\xed\xa0\x80", 3); /* a UTF-16 surrogate is not UTF-8 */
    ck_assert_str_eq(json_string_value(s), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(s);
    char big[3000];
    memset(big, 'a', sizeof big);
    s = egress_json_str(big, sizeof big);
    ck_assert_uint_eq(json_string_length(s), EGRESS_REC_STR_MAX + 3);
    ck_assert_str_eq(json_string_value(s) + EGRESS_REC_STR_MAX, "...");
    json_decref(s);
    json_t *r = egress_rec_new("http_request");
    egress_rec_str(r, "host", NULL);
    egress_rec_us(r, "t", 1234567);
    char *d = json_dumps(r, JSON_COMPACT);
    ck_assert_str_eq(d, "{\"type\":\"http_request\",\"host\":null,\"t\":1234}");
    free(d);
    json_decref(r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("config");
    tcase_add_test(t, defaults_and_values);
    tcase_add_test(t, errors_say_what);
    tcase_add_test(t, listener_mode);
    tcase_add_test(t, record_strings_are_sanitised);
    tcase_add_test(t, dns_and_deny_limits);
    tcase_add_test(t, rate_bucket);
    tcase_add_test(t, rate_tokens_are_what_is_admitted);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
