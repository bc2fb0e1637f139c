/* tests/unit/egress/test_sandbox: the sandbox registry, the memory of DNS answers, and a
 * sandbox's policy narrowed by its E2B network fields. */
#include "al_test.h"
#include "egress/sandbox.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct egress_ip ip4(const char *s)
{
    struct egress_ip ip = {.family = 4};
    inet_pton(AF_INET, s, ip.addr);
    return ip;
}

static struct egress_ip ip6(const char *s)
{
    struct egress_ip ip = {.family = 6};
    inet_pton(AF_INET6, s, ip.addr);
    return ip;
}

START_TEST(register_lookup_remove)
{
    struct egress_registry *r;
    ck_assert_int_eq(egress_registry_new(&r), 0);
    struct egress_ip a[2] = {ip4("10.200.0.2"), ip6("fd00::2")};
    struct al_error err = {0};
    ck_assert_int_eq(
        egress_registry_add(r,
                            &(struct egress_registry_entry){
                                .id = "sbx-1", .template_name = "base", .addrs = a, .n_addrs = 2},
                            &err),
        0);
    struct egress_sandbox *sb = egress_registry_by_addr(r, &a[1]);
    ck_assert_ptr_nonnull(sb);
    ck_assert_str_eq(sb->id, "sbx-1");
    ck_assert_str_eq(sb->template_name, "base");
    egress_sandbox_put(sb);
    struct egress_ip other = ip4("10.200.0.3");
    ck_assert_ptr_null(egress_registry_by_addr(r, &other));
    /* Taken id, taken address, listed twice, none. */
    ck_assert_int_eq(egress_registry_add(
                         r,
                         &(struct egress_registry_entry){
                             .id = "sbx-1", .template_name = NULL, .addrs = &other, .n_addrs = 1},
                         &err),
                     -EEXIST);
    ck_assert_int_eq(
        egress_registry_add(r,
                            &(struct egress_registry_entry){
                                .id = "sbx-2", .template_name = NULL, .addrs = a, .n_addrs = 1},
                            &err),
        -EEXIST);
    ck_assert_ptr_nonnull(strstr(err.msg, "already belongs to sandbox 'sbx-1'"));
    struct egress_ip twice[2] = {other, other};
    ck_assert_int_eq(
        egress_registry_add(r,
                            &(struct egress_registry_entry){
                                .id = "sbx-3", .template_name = NULL, .addrs = twice, .n_addrs = 2},
                            &err),
        -EINVAL);
    ck_assert_int_eq(
        egress_registry_add(r,
                            &(struct egress_registry_entry){
                                .id = "sbx-3", .template_name = NULL, .addrs = twice, .n_addrs = 0},
                            &err),
        -EINVAL);
    ck_assert_uint_eq(egress_registry_count(r), 1);
    /* A reference outlives removal; the sandbox says it was removed. */
    sb = egress_registry_by_id(r, "sbx-1");
    struct egress_sandbox *gone = egress_registry_remove(r, "sbx-1");
    ck_assert_ptr_eq(gone, sb);
    ck_assert(atomic_load(&sb->removed));
    egress_sandbox_put(gone);
    ck_assert_ptr_null(egress_registry_by_addr(r, &a[0]));
    ck_assert_ptr_null(egress_registry_remove(r, "sbx-1"));
    ck_assert_str_eq(sb->id, "sbx-1");
    egress_sandbox_put(sb);
    egress_registry_free(r);
}
END_TEST

/* Many sandboxes: growth and deletion keep every lookup right (open addressing with
 * backward-shift deletion). */
START_TEST(many_sandboxes)
{
    struct egress_registry *r;
    egress_registry_new(&r);
    char id[32], addr[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof id, "sbx-%d", i);
        snprintf(addr, sizeof addr, "10.%d.%d.2", i / 250, i % 250);
        struct egress_ip a = ip4(addr);
        ck_assert_int_eq(
            egress_registry_add(r,
                                &(struct egress_registry_entry){
                                    .id = id, .template_name = NULL, .addrs = &a, .n_addrs = 1},
                                NULL),
            0);
    }
    for (int i = 0; i < 2000; i += 2) {
        snprintf(id, sizeof id, "sbx-%d", i);
        egress_sandbox_put(egress_registry_remove(r, id));
    }
    for (int i = 0; i < 2000; i++) {
        snprintf(addr, sizeof addr, "10.%d.%d.2", i / 250, i % 250);
        struct egress_ip a = ip4(addr);
        struct egress_sandbox *sb = egress_registry_by_addr(r, &a);
        if (i % 2) {
            ck_assert_ptr_nonnull(sb);
            snprintf(id, sizeof id, "sbx-%d", i);
            ck_assert_str_eq(sb->id, id);
            egress_sandbox_put(sb);
        } else {
            ck_assert_ptr_null(sb);
        }
    }
    ck_assert_uint_eq(egress_registry_count(r), 1000);
    egress_registry_free(r);
}
END_TEST

START_TEST(answers_memory)
{
    struct egress_registry *r;
    egress_registry_new(&r);
    struct egress_ip a = ip4("10.200.0.2");
    egress_registry_add(r,
                        &(struct egress_registry_entry){
                            .id = "sbx", .template_name = NULL, .addrs = &a, .n_addrs = 1},
                        NULL);
    struct egress_sandbox *sb = egress_registry_by_id(r, "sbx");
    struct egress_ip ans[2] = {ip4("203.0.113.10"), ip6("2001:db8::10")};
    struct egress_ip other = ip4("203.0.113.11");
    ck_assert(!egress_sandbox_answered(sb, "allowed.test", &ans[0]));
    egress_sandbox_remember(sb, "allowed.test", ans, 2, 60);
    ck_assert(egress_sandbox_answered(sb, "allowed.test", &ans[0]));
    ck_assert(egress_sandbox_answered(sb, "allowed.test", &ans[1]));
    ck_assert(!egress_sandbox_answered(sb, "allowed.test", &other));
    ck_assert(!egress_sandbox_answered(sb, "other.test", &ans[0]));
    /* A new answer adds to what was given (connections may be on their way to it). */
    egress_sandbox_remember(sb, "allowed.test", &other, 1, 60);
    ck_assert(egress_sandbox_answered(sb, "allowed.test", &ans[0]));
    ck_assert(egress_sandbox_answered(sb, "allowed.test", &other));
    /* An answer kept 0 s is already expired. */
    egress_sandbox_remember(sb, "short.test", ans, 1, 0);
    ck_assert(!egress_sandbox_answered(sb, "short.test", &ans[0]));
    /* Thousands of names: bounded, and the most recent are kept. */
    char name[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "n%d.test", i);
        egress_sandbox_remember(sb, name, ans, 1, 60 + (uint32_t)i);
    }
    int kept = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "n%d.test", i);
        kept += egress_sandbox_answered(sb, name, &ans[0]);
    }
    ck_assert_int_le(kept, EGRESS_ANSWER_SLOTS);
    ck_assert_int_gt(kept, EGRESS_ANSWER_SLOTS / 2);
    snprintf(name, sizeof name, "n%d.test", 4999);
    ck_assert(egress_sandbox_answered(sb, name, &ans[0]));
    /* More than DNS_MAX_ANSWERS addresses for one name: the oldest fall out. */
    for (int i = 0; i < DNS_MAX_ANSWERS + 4; i++) {
        char t[32];
        snprintf(t, sizeof t, "198.51.100.%d", i);
        struct egress_ip x = ip4(t);
        egress_sandbox_remember(sb, "many.test", &x, 1, 60);
    }
    struct egress_ip first = ip4("198.51.100.0"), last = ip4("198.51.100.19");
    ck_assert(!egress_sandbox_answered(sb, "many.test", &first));
    ck_assert(egress_sandbox_answered(sb, "many.test", &last));
    egress_sandbox_put(sb);
    egress_registry_free(r);
}
END_TEST

static void decide(const struct egress_policy *p, const char *host, const char *dst,
                   struct egress_verdict *v)
{
    struct egress_ip ip = ip4(dst);
    struct egress_query q = {.host = host,
                             .host_len = strlen(host),
                             .dst = &ip,
                             .port = 443,
                             .scheme = EGRESS_SCHEME_TLS};
    egress_decide(p, &q, v);
}

START_TEST(network_narrowing)
{
    static const char yaml[] = "version: 1\nname: n\nrules:\n"
                               "  - name: gh\n    hosts: [api.github.com, \"**.example.com\"]\n";
    struct egress_policy *base, *p;
    struct al_error err = {0};
    ck_assert_msg(egress_policy_load(yaml, strlen(yaml), "n.yaml", &base, &err) == 0, "%s",
                  err.msg);

    /* Shapes: an object with three known members of the right types. */
    const char *bad[] = {"[]", "{\"allowOut\":[]}", "{\"allow_out\":\"a.com\"}",
                         "{\"deny_out\":[1]}", "{\"allow_internet_access\":\"false\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *n = json_loads(bad[i], 0, NULL);
        ck_assert_msg(egress_network_check(n, &err) < 0, "accepted %s", bad[i]);
        ck_assert_int_lt(egress_policy_narrow(base, n, &p, &err), 0);
        json_decref(n);
    }
    /* Entries the narrowing cannot take: refused with the entry named. */
    json_t *n = json_pack("{s:[s]}", "allow_out", "0.0.0.0/0");
    ck_assert_int_lt(egress_policy_narrow(base, n, &p, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "0.0.0.0/0"));
    json_decref(n);

    /* None: the base policy itself. */
    ck_assert_int_eq(egress_policy_narrow(base, NULL, &p, &err), 0);
    ck_assert_str_eq(egress_policy_hash(p), egress_policy_hash(base));
    egress_policy_unref(p);

    /* No internet but *.example.com (any depth, as in E2B). */
    n = json_pack("{s:b,s:[s]}", "allow_internet_access", 0, "allow_out", "*.example.com");
    ck_assert_msg(egress_policy_narrow(base, n, &p, &err) == 0, "%s", err.msg);
    ck_assert_str_ne(egress_policy_hash(p), egress_policy_hash(base));
    ck_assert_str_eq(egress_policy_name(p), "n");
    struct egress_verdict v;
    decide(p, "a.b.example.com", "203.0.113.5", &v);
    ck_assert(v.allow);
    decide(p, "api.github.com", "203.0.113.5", &v);
    ck_assert(!v.allow);
    ck_assert_str_eq(v.reason, "sandbox_network_denies");
    egress_decide_dns(p, "api.github.com", 14, &v);
    ck_assert(!v.allow);
    /* ... never more than the policy: allowed by the fields, not by the policy. */
    decide(p, "example.com", "203.0.113.5", &v);
    ck_assert(!v.allow);
    ck_assert_str_ne(v.reason, "rule_allows");
    egress_policy_unref(p);
    json_decref(n);

    /* denyOut of an address: the name passes, that address does not. */
    n = json_pack("{s:[s]}", "deny_out", "203.0.113.9/32");
    ck_assert_int_eq(egress_policy_narrow(base, n, &p, &err), 0);
    decide(p, "api.github.com", "203.0.113.5", &v);
    ck_assert(v.allow);
    decide(p, "api.github.com", "203.0.113.9", &v);
    ck_assert(!v.allow);
    ck_assert_str_eq(v.reason, "sandbox_network_denies");
    egress_policy_unref(p);
    json_decref(n);
    egress_policy_unref(base);
}
END_TEST

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* Compiled policies are kept by origin and content: the same file loads the same object (no
 * second compilation), an edit compiles afresh, the same text under another origin is its own
 * object, a bad edit fails with its diagnostics and the good text is still found. */
START_TEST(policy_cache)
{
    char dir[64], a[96], b[96];
    al_test_tmpdir(dir, sizeof dir, "egress-polcache");
    snprintf(a, sizeof a, "%s/a.yaml", dir);
    snprintf(b, sizeof b, "%s/b.yaml", dir);
    static const char v1[] = "version: 1\nname: c\nrules:\n  - name: r\n    hosts: [a.example]\n";
    static const char v2[] = "version: 1\nname: c\nrules:\n  - name: r\n    hosts: [b.example]\n";
    write_text(a, v1);
    write_text(b, v1);
    struct al_error err = {0};
    struct egress_policy *p1, *p2, *p3, *p4, *p5;
    ck_assert_msg(egress_policy_load(NULL, 0, a, &p1, &err) == 0, "%s", err.msg);
    ck_assert_msg(egress_policy_load(NULL, 0, a, &p2, &err) == 0, "%s", err.msg);
    ck_assert_ptr_eq(egress_policy_raw(p1), egress_policy_raw(p2));
    ck_assert_msg(egress_policy_load(NULL, 0, b, &p3, &err) == 0, "%s", err.msg);
    ck_assert_ptr_ne(egress_policy_raw(p3), egress_policy_raw(p1));
    ck_assert_str_eq(egress_policy_hash(p3), egress_policy_hash(p1));
    write_text(a, v2);
    ck_assert_msg(egress_policy_load(NULL, 0, a, &p4, &err) == 0, "%s", err.msg);
    ck_assert_ptr_ne(egress_policy_raw(p4), egress_policy_raw(p1));
    ck_assert_str_ne(egress_policy_hash(p4), egress_policy_hash(p1));
    struct egress_verdict v;
    decide(p4, "b.example", "203.0.113.5", &v);
    ck_assert(v.allow);
    decide(p1, "b.example", "203.0.113.5", &v); /* the object loaded before is unchanged */
    ck_assert(!v.allow);
    write_text(a, "version: 1\nname: c\nrules: [\n");
    ck_assert_int_lt(egress_policy_load(NULL, 0, a, &p5, &err), 0);
    ck_assert_msg(strstr(err.msg, a), "the error names the file: %s", err.msg);
    unlink(a);
    ck_assert_int_lt(egress_policy_load(NULL, 0, a, &p5, &err), 0);
    ck_assert_msg(strstr(err.msg, "cannot read"), "%s", err.msg);
    /* The same text as a buffer with the file's name as its origin: the kept object. */
    ck_assert_int_eq(egress_policy_load(v1, strlen(v1), b, &p5, &err), 0);
    ck_assert_ptr_eq(egress_policy_raw(p5), egress_policy_raw(p3));
    egress_policy_unref(p1);
    egress_policy_unref(p2);
    egress_policy_unref(p3);
    egress_policy_unref(p4);
    egress_policy_unref(p5);
    egress_policy_cache_clear();
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sandbox");
    TCase *t = tcase_create("registry");
    tcase_add_test(t, register_lookup_remove);
    tcase_add_test(t, many_sandboxes);
    tcase_add_test(t, answers_memory);
    suite_add_tcase(s, t);
    t = tcase_create("policy");
    tcase_add_test(t, network_narrowing);
    tcase_add_test(t, policy_cache);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
