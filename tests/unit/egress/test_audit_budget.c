/* tests/unit/egress/test_audit_budget: the per-sandbox audit budgets. Within its budget a
 * sandbox's records are written one by one; beyond, they are counted into aggregate records
 * that account for every one of them (counts, bytes, status classes, first and last request
 * ids); a sandbox's flood never changes how another sandbox's records are written; distinct
 * groups beyond the table are merged, so the aggregates of one interval are bounded. */
#include "al_test.h"
#include "common/auditlog.h"
#include "common/util.h"
#include "egress/audit_budget.h"
#include "egress/internal.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[128];
static struct egress g_e;
static struct egress_registry *g_reg;

static struct egress_sandbox *add_sandbox(const char *id, const char *addr)
{
    struct egress_ip ip = {.family = 4};
    inet_pton(AF_INET, addr, ip.addr);
    struct al_error err = {0};
    ck_assert_int_eq(
        egress_registry_add(g_reg,
                            &(struct egress_registry_entry){
                                .id = id, .template_name = "base", .addrs = &ip, .n_addrs = 1},
                            &err),
        0);
    return egress_registry_by_id(g_reg, id);
}

static void setup(void)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "budget");
    memset(&g_e, 0, sizeof g_e);
    egress_config_defaults(&g_e.cfg);
    /* A small budget that a test outruns at once: 1 per second, 5 at once. */
    g_e.cfg.audit_allow_rate = 1;
    g_e.cfg.audit_allow_burst = 5;
    g_e.cfg.audit_deny_rate = 2;
    g_e.cfg.audit_deny_burst = 10;
    struct egress_audit_opts ao = {.dir = g_dir};
    struct al_error err = {0};
    ck_assert_int_eq(egress_audit_open(&ao, &g_e.audit, &err), 0);
    ck_assert_int_eq(egress_registry_new(&g_reg), 0);
    g_e.reg = g_reg;
}

static void teardown(void)
{
    egress_registry_free(g_reg);
    al_test_rmtree(g_dir);
}

/* Closes the log and returns its records (not the log's own) as a JSON array. */
static json_t *records(void)
{
    egress_audit_close(g_e.audit);
    g_e.audit = NULL;
    struct al_auditlog_reader_opts o = {.dir = g_dir, .prefix = "egress"};
    struct al_auditlog_reader *r;
    struct al_error err = {0};
    ck_assert_int_eq(al_auditlog_reader_open(&o, &r, &err), 0);
    json_t *all = json_array();
    struct al_auditlog_record rec;
    while (al_auditlog_reader_next(r, &rec) == 1)
        if (!rec.internal)
            json_array_append(all, rec.json);
    al_auditlog_reader_close(r);
    struct al_auditlog_verify_opts vo = {.dir = g_dir, .prefix = "egress"};
    struct al_auditlog_verify_result vr;
    ck_assert_int_eq(al_auditlog_verify(&vo, &vr, &err), 0);
    ck_assert_int_eq(vr.verdict, AL_AUDIT_INTACT);
    return all;
}

static bool rec_is(json_t *j, const char *type, const char *sandbox)
{
    const char *t = json_string_value(json_object_get(j, "type"));
    const char *s = json_string_value(json_object_get(j, "sandbox"));
    return t && strcmp(t, type) == 0 && s && strcmp(s, sandbox) == 0;
}

static int64_t ival(json_t *j, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(j, k));
}

/* One event as the proxy reports it; the records written one by one are written here. */
static bool event(struct egress_sandbox *sb, const char *decision, const char *host, int i,
                  int status)
{
    char rid[32];
    snprintf(rid, sizeof rid, "test-%d", i);
    struct egress_audit_event ev = {.type = "http_request",
                                    .decision = decision,
                                    .rule = strcmp(decision, "deny") ? "web" : NULL,
                                    .reason = strcmp(decision, "deny") ? "rule_allows"
                                                                       : "no_rule_matched",
                                    .host = host,
                                    .request_id = rid,
                                    .bytes_up = 10,
                                    .bytes_down = 100,
                                    .status = status};
    bool one = egress_audit_budget(&g_e, sb, &ev);
    if (one) {
        json_t *r = egress_rec_new("http_request");
        egress_rec_str(r, "sandbox", sb->id);
        egress_rec_str(r, "request_id", rid);
        egress_rec_str(r, "decision", decision);
        egress_audit_append(g_e.audit, r);
    }
    return one;
}

START_TEST(beyond_the_budget_records_are_counted_exactly)
{
    struct egress_sandbox *a = add_sandbox("sbx-a", "10.200.0.2");
    int written = 0, first_agg = -1, last_agg = -1;
    for (int i = 0; i < 300; i++) {
        bool one = event(a, "allow", "api.example.com", i, i % 10 ? 200 : 404);
        written += one;
        if (!one) {
            if (first_agg < 0)
                first_agg = i;
            last_agg = i;
        }
    }
    ck_assert_int_ge(written, 5);   /* the burst */
    ck_assert_int_lt(written, 300); /* the rest beyond it */
    egress_audit_budget_flush(&g_e, a, true);
    json_t *all = records();
    size_t i;
    json_t *j;
    int64_t count = 0, n_agg = 0, ones = 0;
    json_array_foreach(all, i, j)
    {
        if (rec_is(j, "http_request", "sbx-a"))
            ones++;
        if (!rec_is(j, "aggregate", "sbx-a"))
            continue;
        n_agg++;
        count += ival(j, "count");
        ck_assert_str_eq(json_string_value(json_object_get(j, "of")), "http_request");
        ck_assert_str_eq(json_string_value(json_object_get(j, "decision")), "allow");
        ck_assert_str_eq(json_string_value(json_object_get(j, "rule")), "web");
        ck_assert_str_eq(json_string_value(json_object_get(j, "host")), "api.example.com");
        ck_assert_int_eq(ival(j, "bytes_up"), 10 * ival(j, "count"));
        ck_assert_int_eq(ival(j, "bytes_down"), 100 * ival(j, "count"));
        json_t *st = json_object_get(j, "status");
        ck_assert_int_eq(ival(st, "2xx") + ival(st, "4xx"), ival(j, "count"));
        ck_assert_int_eq(ival(j, "limit"), 1);
        ck_assert_int_eq(ival(j, "interval_ms"), 1000);
        ck_assert_ptr_null(json_object_get(j, "merged"));
    }
    /* Every event is either a record of its own or counted in an aggregate. */
    ck_assert_int_eq(ones, written);
    ck_assert_int_eq(ones + count, 300);
    ck_assert_int_ge(n_agg, 1);
    /* Within one interval (the test is far shorter than a second, or a few of them) the
     * first and last request ids are those of the first and last events counted. */
    if (n_agg == 1) {
        json_array_foreach(all, i, j) if (rec_is(j, "aggregate", "sbx-a"))
        {
            char want[32];
            snprintf(want, sizeof want, "test-%d", first_agg);
            ck_assert_str_eq(json_string_value(json_object_get(j, "first_request_id")), want);
            snprintf(want, sizeof want, "test-%d", last_agg);
            ck_assert_str_eq(json_string_value(json_object_get(j, "last_request_id")), want);
        }
    }
    json_decref(all);
    egress_sandbox_put(a);
}
END_TEST

START_TEST(one_sandbox_flood_leaves_another_alone)
{
    struct egress_sandbox *a = add_sandbox("sbx-a", "10.200.0.2");
    struct egress_sandbox *b = add_sandbox("sbx-b", "10.200.0.6");
    for (int i = 0; i < 500; i++) {
        event(a, "allow", "api.example.com", i, 200);
        event(a, "deny", "evil.example", 1000 + i, 403);
        /* b's five fit its own burst, whatever a does in between */
        if (i % 100 == 0)
            ck_assert(event(b, "allow", "api.example.com", 2000 + i, 200));
    }
    egress_audit_budget_flush(&g_e, a, true);
    egress_audit_budget_flush(&g_e, b, true);
    json_t *all = records();
    size_t i;
    json_t *j;
    int64_t b_ones = 0, b_aggs = 0, a_deny = 0, a_deny_ones = 0;
    json_array_foreach(all, i, j)
    {
        b_ones += rec_is(j, "http_request", "sbx-b");
        b_aggs += rec_is(j, "aggregate", "sbx-b");
        if (rec_is(j, "aggregate", "sbx-a") &&
            strcmp(json_string_value(json_object_get(j, "decision")), "deny") == 0) {
            a_deny += ival(j, "count");
            ck_assert_int_eq(ival(j, "limit"), 2);
        }
        if (rec_is(j, "http_request", "sbx-a") &&
            strcmp(json_string_value(json_object_get(j, "decision")), "deny") == 0)
            a_deny_ones++;
    }
    ck_assert_int_eq(b_ones, 5);
    ck_assert_int_eq(b_aggs, 0);
    /* The denials have their own, higher budget, and are accounted for as well. */
    ck_assert_int_ge(a_deny_ones, 10);
    ck_assert_int_eq(a_deny_ones + a_deny, 500);
    json_decref(all);
    egress_sandbox_put(a);
    egress_sandbox_put(b);
}
END_TEST

START_TEST(distinct_groups_beyond_the_table_are_merged)
{
    struct egress_sandbox *a = add_sandbox("sbx-a", "10.200.0.2");
    int written = 0;
    for (int i = 0; i < 200; i++) {
        char host[64];
        snprintf(host, sizeof host, "n%d.evil.example", i);
        written += event(a, "deny", host, i, 403);
    }
    egress_audit_budget_flush(&g_e, a, true);
    json_t *all = records();
    size_t i;
    json_t *j;
    int64_t count = 0, keyed = 0, merged = 0;
    json_array_foreach(all, i, j)
    {
        if (!rec_is(j, "aggregate", "sbx-a"))
            continue;
        count += ival(j, "count");
        if (json_is_true(json_object_get(j, "merged"))) {
            merged++;
            ck_assert(json_is_null(json_object_get(j, "host")));
            ck_assert(json_is_null(json_object_get(j, "rule")));
            ck_assert(json_is_null(json_object_get(j, "reason")));
        } else {
            keyed++;
            ck_assert_int_eq(ival(j, "count"), 1); /* one event per name */
        }
    }
    ck_assert_int_eq(written + count, 200);
    ck_assert_int_ge(merged, 1);
    /* At most 16 named groups and one merged group per interval it spanned. */
    ck_assert_int_le(keyed, 16 * merged);
    json_decref(all);
    egress_sandbox_put(a);
}
END_TEST

START_TEST(forced_and_removed)
{
    struct egress_sandbox *a = add_sandbox("sbx-a", "10.200.0.2");
    /* The end of a connection whose decision was aggregated is aggregated too. */
    struct egress_audit_event ev = {.type = "connection_end",
                                    .decision = "allow",
                                    .reason = "closed",
                                    .request_id = "test-1",
                                    .bytes_down = 7,
                                    .aggregate = true};
    ck_assert(!egress_audit_budget(&g_e, a, &ev));
    /* A removed sandbox has only its closing connections left: one by one. */
    struct egress_sandbox *gone = egress_registry_remove(g_reg, "sbx-a");
    ck_assert(egress_audit_budget(&g_e, a, &ev));
    egress_audit_budget_flush(&g_e, a, true);
    /* No sandbox (unknown sources have their own throttle): one by one. */
    ck_assert(egress_audit_budget(&g_e, NULL, &ev));
    json_t *all = records();
    size_t i;
    json_t *j;
    int n = 0;
    json_array_foreach(all, i, j) if (rec_is(j, "aggregate", "sbx-a"))
    {
        n++;
        ck_assert_str_eq(json_string_value(json_object_get(j, "of")), "connection_end");
        ck_assert_str_eq(json_string_value(json_object_get(j, "end")), "closed");
        ck_assert_ptr_null(json_object_get(j, "reason"));
        ck_assert_int_eq(ival(j, "count"), 1);
        ck_assert_int_eq(ival(j, "bytes_down"), 7);
    }
    ck_assert_int_eq(n, 1);
    json_decref(all);
    egress_sandbox_put(gone);
    egress_sandbox_put(a);
}
END_TEST

START_TEST(no_budget_writes_everything)
{
    g_e.cfg.audit_allow_rate = 0;
    struct egress_sandbox *a = add_sandbox("sbx-a", "10.200.0.2");
    for (int i = 0; i < 100; i++)
        ck_assert(event(a, "allow", "api.example.com", i, 200));
    json_decref(records());
    egress_sandbox_put(a);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("audit_budget");
    TCase *t = tcase_create("budget");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, beyond_the_budget_records_are_counted_exactly);
    tcase_add_test(t, one_sandbox_flood_leaves_another_alone);
    tcase_add_test(t, distinct_groups_beyond_the_table_are_merged);
    tcase_add_test(t, forced_and_removed);
    tcase_add_test(t, no_budget_writes_everything);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
