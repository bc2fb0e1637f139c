/* bench/audit_append: records/s through the audit log writer (hash chain, signed
 * checkpoints, group commit with fdatasync), against a reference measured in the same run:
 * the same bytes written with plain write(2) and an fdatasync every 100 ms (no JSON, no hash,
 * no signature). Two passes: records given as json_t (al_auditlog_append: the serialisation
 * of the caller's object is most of the cost) and records the caller formats itself
 * (al_auditlog_append_raw). Prints JSON lines.
 *
 *   build/bench/bench_audit_append [--records N] [--threads T] [--dir DIR]
 *
 * Defaults: 500000 records, 1 appending thread, a fresh directory under /tmp (removed at the
 * end). Target: >= 500,000 json_t records per second of one core, hash chain included
 * ("meets_target" on json_records_per_cpu_s, the appending thread's CPU time, which other
 * load on the machine does not move as it moves wall time; the durable rates beside it are
 * wall time). The exit status only says whether the run worked. Use a Release build.
 */
#include "common/auditlog.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

int main(int argc, char **argv);

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"audit_append\",\"metric\":\"%s\",\"value\":%.2f,\"unit\":\"%s\"}\n",
           metric, value, unit);
    fflush(stdout);
}

/* A record shaped like the egress proxy's http_request (its fields, integer timings in
 * microseconds, a 64-hex policy hash). */
static json_t *sample_record(void)
{
    return json_pack("{s:s,s:s,s:s,s:{s:s,s:s},s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,"
                     "s:{s:i,s:i,s:i,s:i,s:i},s:s,s:I}",
                     "type", "http_request", "sandbox", "sbx-7f3a9c2e", "template", "python-3.12",
                     "policy", "name", "default", "hash",
                     "5433de687dce0c2f9e1e2b94f3d3f4b7c8d2f5a1e0b9c8d7e6f5a4b3c2d1e0f9", "rule",
                     "github-api", "decision", "allow", "reason", "rule_allows", "mode", "enforce",
                     "sni", "api.github.com", "host", "api.github.com", "dst", "140.82.112.6:443",
                     "method", "GET", "path", "/repos/airlock/airlock/pulls", "status", 200,
                     "bytes_up", 812, "bytes_down", 48213, "timing_us", "dns", 120, "decide", 10,
                     "connect", 4200, "tls", 11800, "upstream", 63500, "request_id",
                     "3c5b7868-0000000000000000", "n", (json_int_t)0);
}

static double last_cpu_rate; /* records per CPU-second of the last pass's appending threads */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(p);
    return 0;
}

struct worker {
    struct al_auditlog *log;
    long n;
    int failed;
    uint64_t *lat;
    bool raw;
    uint64_t cpu_ns; /* CPU time of the appending thread (on a loaded machine, the figure
                        that wall time cannot give: records per second of one core) */
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same record formatted by the caller (al_auditlog_append_raw), as a high-rate writer
 * that does not build a json_t would. */
static int append_raw(struct al_auditlog *log, long i)
{
    char rec[1024];
    int n = snprintf(rec, sizeof rec,
                     "{\"type\":\"http_request\",\"sandbox\":\"sbx-7f3a9c2e\","
                     "\"template\":\"python-3.12\",\"policy\":{\"name\":\"default\",\"hash\":"
                     "\"5433de687dce0c2f9e1e2b94f3d3f4b7c8d2f5a1e0b9c8d7e6f5a4b3c2d1e0f9\"},"
                     "\"rule\":\"github-api\",\"decision\":\"allow\",\"reason\":\"rule_allows\","
                     "\"mode\":\"enforce\",\"sni\":\"api.github.com\",\"host\":\"api.github.com\","
                     "\"dst\":\"140.82.112.6:443\",\"method\":\"GET\","
                     "\"path\":\"/repos/airlock/airlock/pulls\",\"status\":200,\"bytes_up\":812,"
                     "\"bytes_down\":48213,\"timing_us\":{\"dns\":%d,\"decide\":10,"
                     "\"connect\":4200,\"tls\":11800,\"upstream\":63500},"
                     "\"request_id\":\"3c5b7868-%016lx\",\"n\":%ld}",
                     (int)(i % 300), (unsigned long)i, i);
    return al_auditlog_append_raw(log, rec, (size_t)n, NULL);
}

static void *append_worker(void *arg)
{
    struct worker *w = arg;
    json_t *r = sample_record();
    json_t *n = json_object_get(r, "n");
    uint64_t cpu0 = thread_cpu_ns();
    for (long i = 0; i < w->n; i++) {
        json_integer_set(n, i);
        uint64_t t0 = al_now_ns();
        int rc = w->raw ? append_raw(w->log, i) : al_auditlog_append(w->log, r, NULL);
        if (w->lat)
            w->lat[i] = al_now_ns() - t0;
        if (rc == -ENOBUFS) { /* the disk is slower than we append: back off, retry */
            usleep(1000);
            i--;
            continue;
        }
        if (rc) {
            w->failed = rc;
            break;
        }
    }
    w->cpu_ns = thread_cpu_ns() - cpu0;
    json_decref(r);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Appends records through threads (json_t or caller-formatted), waits until durable; returns
 * records/s, or -1 on a failure. */
static double run_pass(struct al_auditlog *log, long records, int threads, bool raw,
                       double ref_rate)
{
    struct worker w[64];
    pthread_t th[64];
    long per = records / threads;
    uint64_t *lat = calloc((size_t)per, sizeof *lat);
    uint64_t t0 = al_now_ns();
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){.log = log, .n = per, .lat = i == 0 ? lat : NULL, .raw = raw};
        pthread_create(&th[i], NULL, append_worker, &w[i]);
    }
    int failed = 0;
    uint64_t cpu_ns = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        if (w[i].failed)
            failed = w[i].failed;
        cpu_ns += w[i].cpu_ns;
    }
    uint64_t t_appended = al_now_ns();
    int rc = al_auditlog_sync(log, 0);
    uint64_t t_durable = al_now_ns();
    if (failed || rc) {
        fprintf(stderr, "bench_audit_append: append failed: %s\n",
                strerror(-(failed ? failed : rc)));
        free(lat);
        return -1;
    }
    const char *p = raw ? "raw" : "json";
    char m[64];
    double total = (double)per * threads;
    double durable_rate = total / ((double)(t_durable - t0) / 1e9);
    snprintf(m, sizeof m, "%s_records_per_s_durable", p);
    emit(m, durable_rate, "records/s");
    snprintf(m, sizeof m, "%s_records_per_s_appended", p);
    emit(m, total / ((double)(t_appended - t0) / 1e9), "records/s");
    snprintf(m, sizeof m, "%s_records_per_cpu_s", p);
    last_cpu_rate = total / ((double)cpu_ns / 1e9);
    emit(m, last_cpu_rate, "records/s");
    snprintf(m, sizeof m, "%s_ratio_vs_plain_write", p);
    emit(m, durable_rate / ref_rate, "x");
    qsort(lat, (size_t)per, sizeof *lat, cmp_u64);
    snprintf(m, sizeof m, "%s_append_p50_ns", p);
    emit(m, (double)lat[per / 2], "ns");
    snprintf(m, sizeof m, "%s_append_p99_ns", p);
    emit(m, (double)lat[(size_t)((double)per * 0.99)], "ns");
    free(lat);
    return durable_rate;
}

int main(int argc, char **argv)
{
    long records = 500000;
    int threads = 1;
    char dir[512] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--records") == 0 && i + 1 < argc)
            records = atol(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            snprintf(dir, sizeof dir, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--records N] [--threads T] [--dir DIR]\n", argv[0]);
            return 2;
        }
    }
    if (records <= 0 || threads <= 0 || threads > 64) {
        fprintf(stderr, "bench_audit_append: --records and --threads must be positive\n");
        return 2;
    }
    bool own_dir = !dir[0];
    if (own_dir) {
        snprintf(dir, sizeof dir, "/tmp/al-bench-audit-%d-XXXXXX", (int)getpid());
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
    }

    /* Reference: the same line bytes, plain write + fdatasync every 100 ms. */
    json_t *r = sample_record();
    char *body = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(r);
    char line[4096];
    int ll = snprintf(line, sizeof line,
                      "{\"seq\":12345678,\"time\":\"2026-01-01T00:00:00.000000Z\",\"log_id\":"
                      "\"0123456789abcdef0123456789abcdef\",\"prev\":\"%064d\",%s\n",
                      0, body + 1);
    free(body);
    char ref[600];
    snprintf(ref, sizeof ref, "%s/reference.jsonl", dir);
    int fd = open(ref, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(ref);
        return 1;
    }
    char *batch = malloc(1 << 20);
    size_t blen = 0;
    uint64_t t0 = al_now_ns(), last_sync = t0;
    for (long i = 0; i < records; i++) {
        memcpy(batch + blen, line, (size_t)ll);
        blen += (size_t)ll;
        if (blen + (size_t)ll > (1 << 20)) {
            if (al_write_all(fd, batch, blen))
                return 1;
            blen = 0;
        }
        if ((i & 255) == 0 && al_now_ns() - last_sync >= 100000000ull) {
            if (blen && al_write_all(fd, batch, blen))
                return 1;
            blen = 0;
            fdatasync(fd);
            last_sync = al_now_ns();
        }
    }
    if (blen && al_write_all(fd, batch, blen))
        return 1;
    fdatasync(fd);
    double ref_s = (double)(al_now_ns() - t0) / 1e9;
    close(fd);
    unlink(ref);
    free(batch);
    double ref_rate = (double)records / ref_s;
    emit("reference_plain_write_records_per_s", ref_rate, "records/s");

    /* The audit log. */
    struct al_auditlog_opts o = {.dir = dir, .prefix = "bench"};
    struct al_auditlog *log;
    struct al_error err = {0};
    if (al_auditlog_open(&o, &log, &err)) {
        fprintf(stderr, "bench_audit_append: %s\n", al_error_str(&err));
        return 1;
    }
    double json_rate = run_pass(log, records, threads, false, ref_rate);
    double json_cpu_rate = last_cpu_rate;
    double raw_rate = run_pass(log, records, threads, true, ref_rate);
    if (json_rate < 0 || raw_rate < 0)
        return 1;
    struct al_auditlog_stats st;
    al_auditlog_get_stats(log, &st);
    emit("fsyncs", (double)st.fsyncs, "count");
    emit("checkpoints", (double)st.checkpoints, "count");
    emit("bytes_per_record", (double)st.bytes_written / (double)st.records, "bytes");
    emit("threads", threads, "count");
    al_auditlog_close(log);

    /* The verifier's speed, on what was just written. */
    struct al_auditlog_verify_opts vo = {.dir = dir, .prefix = "bench"};
    struct al_auditlog_verify_result vr;
    t0 = al_now_ns();
    if (al_auditlog_verify(&vo, &vr, &err) == 0 && vr.verdict == AL_AUDIT_INTACT)
        emit("verify_records_per_s", (double)vr.records / ((double)(al_now_ns() - t0) / 1e9),
             "records/s");
    else
        fprintf(stderr, "bench_audit_append: verify: %s %s\n", al_error_str(&err), vr.reason);
    if (own_dir)
        nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    emit("target_records_per_s", 500000, "records/s");
    emit("meets_target", json_cpu_rate >= 500000, "bool");
    return 0;
}
