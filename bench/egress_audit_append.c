/* bench/egress_audit_append: records/s through the egress proxy's audit path as the proxy
 * uses it: each record built with the record helpers (sanitised strings, the fields of an
 * http_request record) and appended through egress/audit.c to the hash-chained,
 * group-committed log; then synced. Reference in the same run: the same records, built
 * once, appended straight to common/auditlog (the cost of building records per decision).
 *
 * Then aggregation on and off: one sandbox's decisions through its audit budget
 * (egress_audit_budget) as the proxy takes them, each written as the proxy writes an
 * http_request record (egress_recw) when the budget lets it through and counted into an
 * aggregate when not (on: the default budget, 50 records/s, 200 at once; off: rate 0, every
 * decision a record). Rounds alternate off and on; each figure is the median of its rounds:
 * decisions per CPU-second of the deciding thread, records and log bytes per decision.
 *
 *   egress_audit_append [--records N] [--threads T] [--rounds R]
 *
 * Target (issue 5): >= 100,000 records/s. Prints JSON lines.
 */
#include <arpa/inet.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/auditlog.h"
#include "common/util.h"
#include "egress/audit.h"
#include "egress/audit_budget.h"
#include "egress/internal.h"

int main(int argc, char **argv);

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"egress_audit_append\",\"metric\":\"%s\",\"value\":%.1f,\"unit\":\"%s\"}\n",
           metric, value, unit);
    fflush(stdout);
}

static json_t *build(uint64_t i)
{
    json_t *r = egress_rec_new("http_request");
    egress_rec_str(r, "sandbox", "sbx-7f3a9c2e");
    egress_rec_str(r, "template", "code-interpreter-v1");
    json_t *p = json_object();
    egress_rec_str(p, "name", "github-agent");
    egress_rec_str(p, "hash", "5433de687dce0c2f9e1e2b94f3d3f4b7c8d2f5a1e0b9c8d7e6f5a4b3c2d1e0f9");
    json_object_set_new(r, "policy", p);
    char id[32];
    snprintf(id, sizeof id, "3c5b7868-%llx", (unsigned long long)i);
    egress_rec_str(r, "request_id", id);
    egress_rec_str(r, "connection_id", id);
    egress_rec_str(r, "proto", "http");
    egress_rec_str(r, "src", "10.200.0.2:51234");
    egress_rec_str(r, "dst", "203.0.113.10:80");
    egress_rec_str(r, "dialled", "203.0.113.10:80");
    egress_rec_str(r, "decision", "allow");
    egress_rec_str(r, "reason", "rule_allows");
    egress_rec_str(r, "rule", "github-api");
    egress_rec_str(r, "mode", "enforce");
    egress_rec_str(r, "method", "GET");
    egress_rec_str(r, "host", "api.github.com");
    egress_rec_str(r, "path", "/repos/airlock/airlock/pulls");
    egress_rec_int(r, "status", 200);
    egress_rec_int(r, "bytes_up", 0);
    egress_rec_int(r, "bytes_down", 5123);
    json_t *tm = json_object();
    egress_rec_us(tm, "decide", 4100);
    egress_rec_us(tm, "upstream", 812345);
    egress_rec_us(tm, "total", 901234);
    json_object_set_new(r, "timing_us", tm);
    return r;
}

struct job {
    struct egress_audit *a;
    struct al_auditlog *log;
    json_t *prebuilt;
    uint64_t n, failures;
};

static void *run_egress(void *arg)
{
    struct job *j = arg;
    for (uint64_t i = 0; i < j->n; i++)
        if (egress_audit_append(j->a, build(i)) < 0)
            j->failures++;
    return NULL;
}

static void *run_raw(void *arg)
{
    struct job *j = arg;
    for (uint64_t i = 0; i < j->n; i++) {
        uint64_t seq;
        if (al_auditlog_append(j->log, j->prebuilt, &seq) < 0)
            j->failures++;
    }
    return NULL;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One decision as the proxy audits a plain-HTTP request (http.c, http__audit_request). */
static void decide(struct egress *e, struct egress_sandbox *sb, uint64_t i)
{
    char rid[32];
    snprintf(rid, sizeof rid, "3c5b7868-%llx", (unsigned long long)i);
    struct egress_audit_event ev = {.type = "http_request",
                                    .decision = "allow",
                                    .rule = "github-api",
                                    .reason = "rule_allows",
                                    .host = "api.github.com",
                                    .request_id = rid,
                                    .bytes_down = 5123,
                                    .status = 200};
    if (!egress_audit_budget(e, sb, &ev))
        return;
    struct egress_recw w;
    egress_recw_begin(&w, "http_request");
    egress_recw_sandbox(&w, sb, NULL);
    egress_recw_str(&w, "request_id", rid);
    egress_recw_str(&w, "connection_id", rid);
    egress_recw_str(&w, "proto", "http");
    egress_recw_str(&w, "src", "10.200.0.2:51234");
    egress_recw_str(&w, "dst", "203.0.113.10:80");
    egress_recw_str(&w, "dialled", "203.0.113.10:80");
    egress_recw_str(&w, "decision", "allow");
    egress_recw_str(&w, "reason", "rule_allows");
    egress_recw_str(&w, "rule", "github-api");
    egress_recw_str(&w, "mode", "enforce");
    egress_recw_str(&w, "method", "GET");
    egress_recw_str(&w, "host", "api.github.com");
    egress_recw_str(&w, "path", "/repos/airlock/airlock/pulls");
    egress_recw_int(&w, "status", 200);
    egress_recw_int(&w, "bytes_up", 0);
    egress_recw_int(&w, "bytes_down", 5123);
    egress_recw_obj_begin(&w, "timing_us");
    egress_recw_us(&w, "decide", 4100);
    egress_recw_us(&w, "upstream", 812345);
    egress_recw_us(&w, "total", 901234);
    egress_recw_close(&w, '}');
    egress_audit_w(e, &w);
}

struct agg_round {
    double decisions_per_cpu_s, records_per_decision, bytes_per_decision;
};

/* n decisions of one sandbox with aggregation on or off, into a fresh log in dir. */
static int agg_round(const char *dir, bool on, uint64_t n, struct agg_round *out)
{
    struct egress e;
    memset(&e, 0, sizeof e);
    egress_config_defaults(&e.cfg);
    if (!on)
        e.cfg.audit_allow_rate = 0;
    struct al_error err = {0};
    struct egress_audit_opts ao = {.dir = dir};
    if (egress_audit_open(&ao, &e.audit, &err) < 0 || egress_registry_new(&e.reg) < 0) {
        fprintf(stderr, "egress_audit_append: %s\n", al_error_str(&err));
        return -1;
    }
    struct egress_ip ip = {.family = 4};
    inet_pton(AF_INET, "10.200.0.2", ip.addr);
    if (egress_registry_add(e.reg,
                            &(struct egress_registry_entry){.id = "sbx-7f3a9c2e",
                                                            .template_name = "code-interpreter-v1",
                                                            .addrs = &ip,
                                                            .n_addrs = 1},
                            &err) < 0) {
        fprintf(stderr, "egress_audit_append: %s\n", al_error_str(&err));
        return -1;
    }
    struct egress_sandbox *sb = egress_registry_by_id(e.reg, "sbx-7f3a9c2e");
    struct al_auditlog_stats st0, st1;
    egress_audit_stats(e.audit, &st0);
    uint64_t c0 = thread_cpu_ns();
    for (uint64_t i = 0; i < n; i++)
        decide(&e, sb, i);
    egress_audit_budget_flush(&e, sb, true); /* the aggregates still open */
    uint64_t c1 = thread_cpu_ns();
    egress_audit_sync(e.audit, 0);
    egress_audit_stats(e.audit, &st1);
    egress_sandbox_put(sb);
    egress_audit_close(e.audit);
    egress_registry_free(e.reg);
    out->decisions_per_cpu_s = (double)n / ((double)(c1 - c0) / 1e9);
    out->records_per_decision = (double)(st1.records - st0.records) / (double)n;
    out->bytes_per_decision = (double)(st1.bytes_written - st0.bytes_written) / (double)n;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

int main(int argc, char **argv)
{
    uint64_t records = 300000;
    int threads = 2, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--records"))
            records = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 15)
        rounds = 3;
    if (records < 1000)
        records = 1000;
    if (threads < 1 || threads > 16)
        threads = 1;
    char dir[] = "/tmp/egress-audit-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s/egress", dir);
    snprintf(d2, sizeof d2, "%s/raw", dir);
    struct al_error err = {0};

    /* The egress path. */
    struct egress_audit *a;
    struct egress_audit_opts ao = {.dir = d1};
    if (egress_audit_open(&ao, &a, &err) < 0) {
        fprintf(stderr, "egress_audit_append: %s\n", al_error_str(&err));
        return 1;
    }
    pthread_t th[16];
    struct job jobs[16];
    uint64_t t0 = al_now_ns();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){.a = a, .n = records / (uint64_t)threads};
        pthread_create(&th[i], NULL, run_egress, &jobs[i]);
    }
    uint64_t fail = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        fail += jobs[i].failures;
    }
    uint64_t t1 = al_now_ns();
    egress_audit_sync(a, 0);
    uint64_t t2 = al_now_ns();
    egress_audit_close(a);
    emit("records_per_s", (double)records / ((double)(t1 - t0) / 1e9), "records/s");
    emit("records_per_s_durable", (double)records / ((double)(t2 - t0) / 1e9), "records/s");
    emit("failures", (double)fail, "count");
    emit("threads", threads, "count");

    /* Reference: prebuilt records straight into the log. */
    struct al_auditlog *log;
    struct al_auditlog_opts lo = {.dir = d2, .prefix = "egress"};
    if (al_auditlog_open(&lo, &log, &err) < 0) {
        fprintf(stderr, "egress_audit_append: %s\n", al_error_str(&err));
        return 1;
    }
    json_t *pre = build(0);
    t0 = al_now_ns();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){.log = log, .prebuilt = pre, .n = records / (uint64_t)threads};
        pthread_create(&th[i], NULL, run_raw, &jobs[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    t1 = al_now_ns();
    al_auditlog_sync(log, 0);
    al_auditlog_close(log);
    json_decref(pre);
    emit("reference_prebuilt_records_per_s", (double)records / ((double)(t1 - t0) / 1e9),
         "records/s");

    /* Aggregation off and on, in alternating rounds. */
    double v[2][3][15];
    for (int r = 0; r < rounds; r++) {
        for (int on = 0; on < 2; on++) {
            char d[512];
            snprintf(d, sizeof d, "%s/agg-%d-%d", dir, on, r);
            struct agg_round ar;
            if (agg_round(d, on, records, &ar) < 0)
                return 1;
            v[on][0][r] = ar.decisions_per_cpu_s;
            v[on][1][r] = ar.records_per_decision;
            v[on][2][r] = ar.bytes_per_decision;
        }
    }
    static const char *const names[2] = {"aggregation_off", "aggregation_on"};
    for (int on = 0; on < 2; on++) {
        char m[96];
        snprintf(m, sizeof m, "%s_decisions_per_cpu_s", names[on]);
        emit(m, median(v[on][0], rounds), "decisions/s");
        snprintf(m, sizeof m, "%s_records_per_1000_decisions", names[on]);
        emit(m, median(v[on][1], rounds) * 1000, "records");
        snprintf(m, sizeof m, "%s_log_bytes_per_decision", names[on]);
        emit(m, median(v[on][2], rounds), "bytes");
    }
    emit("aggregation_rounds", rounds, "count");
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
