/* bench/egress_audit_append: records/s through the egress proxy's audit path as the proxy
 * uses it: each record built with the record helpers (sanitised strings, the fields of an
 * http_request record) and appended through egress/audit.c to the hash-chained,
 * group-committed log; then synced. Reference in the same run: the same records, built
 * once, appended straight to common/auditlog (the cost of building records per decision).
 *
 *   egress_audit_append [--records N] [--threads T]
 *
 * Target (issue 5): >= 100,000 records/s. Prints JSON lines.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/auditlog.h"
#include "common/util.h"
#include "egress/audit.h"

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

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

int main(int argc, char **argv)
{
    uint64_t records = 300000;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--records"))
            records = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
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
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
