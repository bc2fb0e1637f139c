/* tests/unit/egress/test_audit_cli: `airlock audit` over aggregate records. An aggregate
 * stands for decisions taken over an interval (first_time..last_time) and is written when
 * the interval ends, so --since/--until select it by that interval, not by the time it was
 * appended; tail shows what it counts (count, bytes, interval, first and last request ids);
 * verify says how many decisions the aggregates stand for, of which types and when. */
#include "al_test.h"
#include "cli/cli.h"
#include "common/auditlog.h"
#include "common/util.h"
#include "egress/audit.h"
#include "egress/audit_budget.h"
#include "egress/internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[128];

static void setup(void)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "auditcli");
}

static void teardown(void)
{
    al_test_rmtree(g_dir);
}

/* Runs `airlock audit ARGS... --dir <g_dir>`; returns its exit status and its stdout
 * (malloc'd, in *out). */
static int cli(char **out, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"audit";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc++] = (char *)"--dir";
    argv[argc++] = g_dir;
    argv[argc] = NULL;
    char path[200];
    snprintf(path, sizeof path, "%s.out", g_dir);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDOUT_FILENO);
    int rc = audit_cli_main(argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    *out = calloc(1, (size_t)len + 1);
    ck_assert_int_eq(pread(fd, *out, (size_t)len, 0), len);
    close(fd);
    unlink(path);
    return rc;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* An aggregate as egress/audit_budget.c writes it, of decisions taken from t0 to t1. */
static json_t *aggregate(const char *sandbox, const char *of, const char *decision, const char *t0,
                         const char *t1, int count)
{
    json_t *r = egress_rec_new("aggregate");
    egress_rec_str(r, "sandbox", sandbox);
    egress_rec_str(r, "of", of);
    egress_rec_str(r, "decision", decision);
    egress_rec_str(r, "rule", "web");
    egress_rec_str(r, "reason", "rule_allows");
    egress_rec_str(r, "host", "pypi.test");
    egress_rec_int(r, "count", count);
    egress_rec_str(r, "first_request_id", "3c5b7868-1a2");
    egress_rec_str(r, "last_request_id", "3c5b7868-3f1");
    egress_rec_str(r, "first_time", t0);
    egress_rec_str(r, "last_time", t1);
    egress_rec_int(r, "interval_ms", 1000);
    egress_rec_int(r, "limit", 50);
    if (strcmp(of, "http_request") == 0) {
        egress_rec_int(r, "bytes_up", 7);
        egress_rec_int(r, "bytes_down", 5123841);
        json_t *st = json_object();
        json_object_set_new(st, "2xx", json_integer(count - 2));
        json_object_set_new(st, "4xx", json_integer(2));
        json_object_set_new(r, "status", st);
    }
    return r;
}

/* A log holding, in this order: an aggregate of 412 requests taken 2020-01-01 00:00:00.117
 * to .998 (appended now, as every record is, well after its interval), one http_request
 * record written one by one (now), and an aggregate of 30 denied DNS queries taken
 * 2020-01-01 00:00:05.000 to .500. */
static void write_log(void)
{
    struct egress_audit *a;
    struct egress_audit_opts ao = {.dir = g_dir};
    struct al_error err = {0};
    ck_assert_int_eq(egress_audit_open(&ao, &a, &err), 0);
    ck_assert_int_eq(egress_audit_append(a, aggregate("sbx-a", "http_request", "allow",
                                                      "2020-01-01T00:00:00.117Z",
                                                      "2020-01-01T00:00:00.998Z", 412)),
                     0);
    json_t *r = egress_rec_new("http_request");
    egress_rec_str(r, "sandbox", "sbx-a");
    egress_rec_str(r, "request_id", "3c5b7868-400");
    egress_rec_str(r, "decision", "allow");
    egress_rec_str(r, "method", "GET");
    egress_rec_str(r, "host", "pypi.test");
    egress_rec_str(r, "path", "/simple/");
    ck_assert_int_eq(egress_audit_append(a, r), 0);
    ck_assert_int_eq(
        egress_audit_append(a, aggregate("sbx-b", "dns_query", "deny", "2020-01-01T00:00:05.000Z",
                                         "2020-01-01T00:00:05.500Z", 30)),
        0);
    egress_audit_close(a);
}

START_TEST(since_until_select_aggregates_by_their_interval)
{
    write_log();
    char *out;
    /* Inside the first aggregate's interval (which ended six years before it was written). */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"query", "--json", "--since", "2020-01-01T00:00:00.5Z",
                                   "--until", "2020-01-01T00:00:00.6Z", NULL}),
        0);
    ck_assert_int_eq(lines(out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\"count\":412"));
    free(out);
    /* After both aggregates' intervals: only the record written one by one, although the
     * aggregates were appended after that moment too. */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"query", "--json", "--since", "2020-01-01T00:00:06Z", NULL}), 0);
    ck_assert_int_eq(lines(out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\"type\":\"http_request\""));
    free(out);
    /* A window that overlaps the end of the first interval and the start of the second. */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"query", "--json", "--since", "2020-01-01T00:00:00.998Z",
                                   "--until", "2020-01-01T00:00:05Z", NULL}),
        0);
    ck_assert_int_eq(lines(out), 2);
    free(out);
    /* Between the two intervals: nothing (the record written one by one is of today). */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"query", "--json", "--since", "2020-01-01T00:00:01Z", "--until",
                                   "2020-01-01T00:00:04.999Z", NULL}),
        0);
    ck_assert_str_eq(out, "");
    free(out);
    /* The last time is in milliseconds: a decision of .998 may have been at .9985. */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"query", "--json", "--since", "2020-01-01T00:00:00.9985Z",
                                   "--until", "2020-01-01T00:00:01Z", NULL}),
        0);
    ck_assert_int_eq(lines(out), 1);
    free(out);
    /* export takes the same filters: the second aggregate alone, with its span. */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"export", "--ocsf", "--since", "2020-01-01T00:00:05.2Z",
                                   "--until", "2020-01-01T00:00:05.3Z", NULL}),
        0);
    ck_assert_int_eq(lines(out), 1);
    json_t *ev = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "class_uid")), 4003);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "count")), 30);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "start_time")), 1577836805000);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "end_time")), 1577836805500);
    json_decref(ev);
    free(out);
    /* Records written one by one: by their own time, as before. */
    ck_assert_int_eq(cli(&out, (const char *[]){"query", "--json", "--type", "http_request",
                                                "--since", "1h", NULL}),
                     0);
    ck_assert_int_eq(lines(out), 1);
    ck_assert_ptr_nonnull(strstr(out, "3c5b7868-400"));
    free(out);
}
END_TEST

START_TEST(tail_shows_what_an_aggregate_counts)
{
    write_log();
    char *out;
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "10", NULL}), 0);
    /* count, type, name, first and last request ids, the interval and its length, bytes,
     * status classes */
    ck_assert_msg(strstr(out, " 412 x http_request pypi.test 3c5b7868-1a2..3c5b7868-3f1 "
                              "2020-01-01T00:00:00.117Z..00:00:00.998Z (881 ms) up 7 B "
                              "down 5123841 B 2xx 410 4xx 2\n"),
                  "tail: %s", out);
    ck_assert_msg(strstr(out, " 30 x dns_query pypi.test 3c5b7868-1a2..3c5b7868-3f1 "
                              "2020-01-01T00:00:05.000Z..00:00:05.500Z (500 ms)\n"),
                  "tail: %s", out);
    ck_assert_msg(strstr(out, "aggregate      deny       rule_allows                sbx-b"),
                  "tail: %s", out);
    free(out);
    /* --json: the records as written, aggregates included with every field. */
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "10", "--json", NULL}), 0);
    ck_assert_int_eq(lines(out), 3);
    ck_assert_ptr_nonnull(strstr(out, "\"type\":\"aggregate\""));
    ck_assert_ptr_nonnull(strstr(out, "\"first_time\":\"2020-01-01T00:00:00.117Z\""));
    ck_assert_ptr_nonnull(strstr(out, "\"bytes_down\":5123841"));
    free(out);
}
END_TEST

START_TEST(tail_counts_the_records_it_shows)
{
    write_log();
    char *out;
    /* The last two records, although the last line is the writer's closing checkpoint. */
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "2", "--json", NULL}), 0);
    ck_assert_int_eq(lines(out), 2);
    ck_assert_ptr_nonnull(strstr(out, "3c5b7868-400"));
    ck_assert_ptr_nonnull(strstr(out, "\"count\":30"));
    free(out);
    /* With a filter: the last matching ones, not the matches among the last lines. */
    ck_assert_int_eq(
        cli(&out, (const char *[]){"tail", "-n", "1", "--type", "aggregate", "--json", NULL}), 0);
    ck_assert_int_eq(lines(out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\"count\":30"));
    free(out);
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "5", "--type", "aggregate", NULL}),
                     0);
    ck_assert_int_eq(lines(out), 2);
    free(out);
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "0", NULL}), 0);
    ck_assert_str_eq(out, "");
    free(out);
    /* One aggregate followed by 600 records: found however far back it is. */
    struct egress_audit *a;
    struct egress_audit_opts ao = {.dir = g_dir};
    struct al_error err = {0};
    ck_assert_int_eq(egress_audit_open(&ao, &a, &err), 0);
    for (int i = 0; i < 600; i++) {
        json_t *r = egress_rec_new("dns_query");
        egress_rec_str(r, "sandbox", "sbx-c");
        egress_rec_int(r, "i", i);
        ck_assert_int_eq(egress_audit_append(a, r), 0);
    }
    egress_audit_close(a);
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "-n", "3", "--type", "aggregate", NULL}),
                     0);
    ck_assert_int_eq(lines(out), 2);
    ck_assert_ptr_nonnull(strstr(out, " 412 x http_request"));
    free(out);
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "--json", "--sandbox", "sbx-c", NULL}), 0);
    ck_assert_int_eq(lines(out), 20);
    ck_assert_ptr_nonnull(strstr(out, "\"i\":599}"));
    ck_assert_ptr_nonnull(strstr(out, "\"i\":580}"));
    ck_assert_ptr_null(strstr(out, "\"i\":579}"));
    free(out);
}
END_TEST

START_TEST(tail_of_the_proxys_own_aggregates)
{
    /* Aggregates made by the budget itself (not by hand), flushed, then shown by tail. */
    struct egress e = {0};
    egress_config_defaults(&e.cfg);
    e.cfg.audit_allow_rate = 1;
    e.cfg.audit_allow_burst = 1;
    struct egress_audit_opts ao = {.dir = g_dir};
    struct al_error err = {0};
    ck_assert_int_eq(egress_audit_open(&ao, &e.audit, &err), 0);
    ck_assert_int_eq(egress_registry_new(&e.reg), 0);
    struct egress_ip ip = {.family = 4};
    inet_pton(AF_INET, "10.200.0.2", ip.addr);
    ck_assert_int_eq(
        egress_registry_add(e.reg,
                            &(struct egress_registry_entry){
                                .id = "sbx-p", .template_name = "base", .addrs = &ip, .n_addrs = 1},
                            &err),
        0);
    struct egress_sandbox *sb = egress_registry_by_id(e.reg, "sbx-p");
    int counted = 0;
    for (int i = 0; i < 20; i++) {
        char rid[32];
        snprintf(rid, sizeof rid, "b00t-%x", i + 1);
        struct egress_audit_event ev = {.type = "http_request",
                                        .decision = "allow",
                                        .rule = "web",
                                        .reason = "rule_allows",
                                        .host = "api.test",
                                        .request_id = rid,
                                        .bytes_up = 3,
                                        .bytes_down = 100,
                                        .status = 200};
        counted += !egress_audit_budget(&e, sb, &ev);
    }
    ck_assert_int_ge(counted, 18);
    egress_audit_budget_flush(&e, sb, true);
    egress_sandbox_put(sb);
    egress_audit_close(e.audit);
    egress_registry_free(e.reg);
    char *out;
    ck_assert_int_eq(cli(&out, (const char *[]){"tail", "--type", "aggregate", NULL}), 0);
    ck_assert_int_eq(lines(out), 1);
    char want[128];
    snprintf(want, sizeof want, " %d x http_request api.test b00t-%x..b00t-14 ", counted,
             21 - counted);
    ck_assert_msg(strstr(out, want), "want '%s' in: %s", want, out);
    snprintf(want, sizeof want, " up %d B down %d B 2xx %d\n", 3 * counted, 100 * counted, counted);
    ck_assert_msg(strstr(out, want), "want '%s' in: %s", want, out);
    ck_assert_msg(strstr(out, " ms)"), "no interval length: %s", out);
    free(out);
    /* verify counts them too */
    ck_assert_int_eq(cli(&out, (const char *[]){"verify", "--json", NULL}), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *agg = json_object_get(j, "aggregates");
    ck_assert_int_eq(json_integer_value(json_object_get(agg, "records")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(agg, "decisions")), counted);
    json_decref(j);
    free(out);
}
END_TEST

START_TEST(verify_says_what_the_aggregates_stand_for)
{
    write_log();
    char *out;
    ck_assert_int_eq(cli(&out, (const char *[]){"verify", NULL}), 0);
    ck_assert_msg(strstr(out, "aggregates: 2 record(s) stand for 442 decision(s) that the "
                              "sandboxes' audit budgets counted instead of writing them one by "
                              "one, of 2 sandbox(es), taken from 2020-01-01T00:00:00.117Z to "
                              "2020-01-01T00:00:05.500Z:\n"
                              "  http_request allow: 412 decision(s) in 1 record(s)\n"
                              "  dns_query deny: 30 decision(s) in 1 record(s)\n"),
                  "verify: %s", out);
    ck_assert_msg(strstr(out, "\nINTACT\n"), "verify: %s", out);
    /* the paragraph comes before the end and the verdict */
    ck_assert(strstr(out, "aggregates:") < strstr(out, "end:"));
    free(out);
    ck_assert_int_eq(cli(&out, (const char *[]){"verify", "--json", NULL}), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *agg = json_object_get(j, "aggregates");
    ck_assert_int_eq(json_integer_value(json_object_get(agg, "records")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(agg, "decisions")), 442);
    ck_assert_int_eq(json_integer_value(json_object_get(agg, "sandboxes")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(agg, "first_time")),
                     "2020-01-01T00:00:00.117Z");
    ck_assert_str_eq(json_string_value(json_object_get(agg, "last_time")),
                     "2020-01-01T00:00:05.500Z");
    json_t *by = json_object_get(agg, "by");
    ck_assert_int_eq(json_array_size(by), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(by, 1), "of")), "dns_query");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(by, 1), "decisions")), 30);
    ck_assert_ptr_null(json_object_get(agg, "malformed"));
    json_decref(j);
    free(out);
}
END_TEST

START_TEST(verify_reports_aggregates_it_cannot_count)
{
    struct egress_audit *a;
    struct egress_audit_opts ao = {.dir = g_dir};
    struct al_error err = {0};
    ck_assert_int_eq(egress_audit_open(&ao, &a, &err), 0);
    /* No count; an interval that ends before it begins. */
    json_t *r = aggregate("sbx-a", "connection", "allow", "2020-01-01T00:00:00.117Z",
                          "2020-01-01T00:00:00.998Z", 5);
    json_object_del(r, "count");
    ck_assert_int_eq(egress_audit_append(a, r), 0);
    ck_assert_int_eq(
        egress_audit_append(a, aggregate("sbx-a", "connection", "allow", "2020-01-01T00:00:02Z",
                                         "2020-01-01T00:00:01Z", 5)),
        0);
    ck_assert_int_eq(
        egress_audit_append(a, aggregate("sbx-a", "connection", "allow", "2020-01-01T00:00:03Z",
                                         "2020-01-01T00:00:04Z", 5)),
        0);
    egress_audit_close(a);
    char *out;
    ck_assert_int_eq(cli(&out, (const char *[]){"verify", NULL}), 0);
    ck_assert_msg(strstr(out, "aggregates: 1 record(s) stand for 5 decision(s)"), "verify: %s",
                  out);
    ck_assert_msg(strstr(out, "warning: 2 aggregate record(s), the first seq 2, have no valid "
                              "count, type, decision or interval"),
                  "verify: %s", out);
    free(out);
    /* A log without aggregates says so. */
    teardown();
    setup();
    ck_assert_int_eq(egress_audit_open(&ao, &a, &err), 0);
    ck_assert_int_eq(egress_audit_append(a, egress_rec_new("dns_query")), 0);
    egress_audit_close(a);
    ck_assert_int_eq(cli(&out, (const char *[]){"verify", NULL}), 0);
    ck_assert_msg(strstr(out, "aggregates: none: every decision is a record of its own\n"),
                  "verify: %s", out);
    free(out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("audit_cli");
    TCase *t = tcase_create("aggregates");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, since_until_select_aggregates_by_their_interval);
    tcase_add_test(t, tail_shows_what_an_aggregate_counts);
    tcase_add_test(t, tail_counts_the_records_it_shows);
    tcase_add_test(t, tail_of_the_proxys_own_aggregates);
    tcase_add_test(t, verify_says_what_the_aggregates_stand_for);
    tcase_add_test(t, verify_reports_aggregates_it_cannot_count);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
