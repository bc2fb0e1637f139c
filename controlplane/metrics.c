/* controlplane/metrics: see metrics.h. */
#include "metrics.h"
#include "warm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "series.h"

static const double metrics__buckets_ms[] = {5,   10,  20,   50,   100,  150,
                                             250, 500, 1000, 2500, 5000, 10000};
#define NB (sizeof metrics__buckets_ms / sizeof *metrics__buckets_ms)

struct hist {
    uint64_t counts[NB + 1];
    double sum_ms;
    uint64_t n;
};

struct cp_metrics {
    uint64_t created, create_failed, killed, crashes;
    uint64_t events_recorded, events_failed;
    uint64_t api_requests;
    uint64_t api_errors[6]; /* error answers by status class (index 4, 5) */
    uint64_t proxy[6];
    struct hist create_ms, kill_ms;
    struct hist stage_ms[CP_CREATE_STAGES];
    /* The overview's charts: creations' latency, and the egress decisions counted between
     * two of airlock-egress's answers to /v1/stats (the counters behind /metrics). */
    struct cp_series create_series;
    struct cp_series egress_series[CP_METRICS_DECISIONS];
    uint64_t egress_last[CP_METRICS_DECISIONS];
    bool egress_seen;
};

/* The counters of /v1/stats each series of decisions follows, as /metrics names them. */
static const struct {
    const char *group, *counter, *json;
} metrics__decisions[CP_METRICS_DECISIONS] = {
    {"connections", "allowed", "connectionAllow"},
    {"connections", "denied", "connectionDeny"},
    {"http", "denied", "httpDeny"},
    {"dns", "denied", "dnsDeny"},
};

static const char *const metrics__stage_names[CP_CREATE_STAGES] = {
    [CP_CREATE_ACCEPT] = "accept", [CP_CREATE_NETWORK] = "network", [CP_CREATE_EGRESS] = "egress",
    [CP_CREATE_QUEUE] = "queue",   [CP_CREATE_START] = "start",
};

int cp_metrics_new(struct cp_metrics **out)
{
    struct cp_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    cp_series_init(&m->create_series, CP_METRICS_BUCKET_NS);
    for (int i = 0; i < CP_METRICS_DECISIONS; i++)
        cp_series_init(&m->egress_series[i], CP_METRICS_BUCKET_NS);
    *out = m;
    return 0;
}

void cp_metrics_free(struct cp_metrics *m)
{
    free(m);
}

static void hist__add(struct hist *h, double ms)
{
    size_t i = 0;
    while (i < NB && ms > metrics__buckets_ms[i])
        i++;
    h->counts[i]++;
    h->sum_ms += ms;
    h->n++;
}

void cp_metrics_created(struct cp_metrics *m, double ms, const double *stage_ms)
{
    m->created++;
    hist__add(&m->create_ms, ms);
    cp_series_observe(&m->create_series, al_wall_ns(), ms);
    for (int i = 0; i < CP_CREATE_STAGES; i++)
        hist__add(&m->stage_ms[i], stage_ms[i]);
}

static uint64_t render__get(const json_t *o, const char *a, const char *k)
{
    return (uint64_t)json_integer_value(json_object_get(json_object_get(o, a), k));
}

void cp_metrics_egress(struct cp_metrics *m, const json_t *stats, uint64_t wall_ns)
{
    if (!m || !json_is_object(stats))
        return;
    for (int i = 0; i < CP_METRICS_DECISIONS; i++) {
        uint64_t v = render__get(stats, metrics__decisions[i].group, metrics__decisions[i].counter);
        /* The first answer is where counting starts (what came before it has no time); a
         * counter that went down belongs to a restarted airlock-egress, counting from 0. */
        if (m->egress_seen)
            cp_series_observe(&m->egress_series[i], wall_ns,
                              (double)(v >= m->egress_last[i] ? v - m->egress_last[i] : v));
        m->egress_last[i] = v;
    }
    m->egress_seen = true;
}

json_t *cp_metrics_series_json(const struct cp_metrics *m, uint64_t now_ns)
{
    json_t *create = json_array(), *egress = json_array();
    uint64_t first, last;
    cp_series_window(&m->create_series, now_ns, &first, &last);
    for (uint64_t k = first; k <= last; k++) {
        uint64_t ts = k * (CP_METRICS_BUCKET_NS / 1000000000ull);
        char t[40];
        al_time_rfc3339(t, sizeof t, ts * 1000000000ull);
        const struct cp_series_bucket *c = cp_series_bucket(&m->create_series, now_ns, k);
        if (c)
            json_array_append_new(create, json_pack("{s:s,s:I,s:I,s:f,s:f}", "timestamp", t,
                                                    "timestampUnix", (json_int_t)ts, "count",
                                                    (json_int_t)c->n, "meanMs", c->sum / c->n,
                                                    "maxMs", c->max));
        /* The decision series are observed together: a bucket is in one if in all. */
        const struct cp_series_bucket *e = cp_series_bucket(&m->egress_series[0], now_ns, k);
        if (!e)
            continue;
        json_t *o = json_pack("{s:s,s:I,s:I}", "timestamp", t, "timestampUnix", (json_int_t)ts,
                              "samples", (json_int_t)e->n);
        for (int i = 0; i < CP_METRICS_DECISIONS; i++) {
            const struct cp_series_bucket *d = cp_series_bucket(&m->egress_series[i], now_ns, k);
            json_object_set_new(o, metrics__decisions[i].json,
                                json_integer(d ? (json_int_t)d->sum : 0));
        }
        json_array_append_new(egress, o);
    }
    const uint64_t w = CP_METRICS_BUCKET_NS / 1000000000ull;
    return json_pack("{s:I,s:I,s:I,s:I,s:o,s:o}", "bucketSeconds", (json_int_t)w, "buckets",
                     (json_int_t)CP_SERIES_SLOTS, "fromUnix", (json_int_t)(first * w), "toUnix",
                     (json_int_t)((last + 1) * w), "create", create, "egress", egress);
}

void cp_metrics_create_failed(struct cp_metrics *m)
{
    m->create_failed++;
}

void cp_metrics_killed(struct cp_metrics *m, double ms)
{
    m->killed++;
    hist__add(&m->kill_ms, ms);
}

void cp_metrics_event(struct cp_metrics *m, bool recorded)
{
    if (recorded)
        m->events_recorded++;
    else
        m->events_failed++;
}

void cp_metrics_crash(struct cp_metrics *m)
{
    m->crashes++;
}

void cp_metrics_api(struct cp_metrics *m, int status)
{
    if (status == 0)
        m->api_requests++;
    else if (status >= 100 && status < 600)
        m->api_errors[status / 100]++;
}

void cp_metrics_proxy(struct cp_metrics *m, int status)
{
    if (status >= 100 && status < 600)
        m->proxy[status / 100]++;
}

/* One histogram's series; label: "" or `name="value",` (the trailing comma included). */
static void render__series(struct al_buf *b, const char *name, const char *label,
                           const struct hist *h)
{
    uint64_t cum = 0;
    for (size_t i = 0; i < NB; i++) {
        cum += h->counts[i];
        al_buf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, label,
                      metrics__buckets_ms[i] / 1000.0, (unsigned long long)cum);
    }
    cum += h->counts[NB];
    size_t ll = strlen(label);
    int braces = ll > 0; /* {label} without its trailing comma */
    al_buf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n%s_sum%s%.*s%s %.6f\n%s_count%s%.*s%s %llu\n",
                  name, label, (unsigned long long)cum, name, braces ? "{" : "",
                  (int)(ll ? ll - 1 : 0), label, braces ? "}" : "", h->sum_ms / 1000.0, name,
                  braces ? "{" : "", (int)(ll ? ll - 1 : 0), label, braces ? "}" : "",
                  (unsigned long long)h->n);
}

static void render__hist(struct al_buf *b, const char *name, const char *help, const struct hist *h)
{
    al_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    render__series(b, name, "", h);
}

struct render_counts {
    size_t by_state[4];
};

static int render__count(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    struct render_counts *c = arg;
    if ((unsigned)sb->rec.state < 4)
        c->by_state[sb->rec.state]++;
    return 0;
}

static void render__counter(struct al_buf *b, const char *name, const char *help, uint64_t v)
{
    al_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                  (unsigned long long)v);
}

void cp_metrics_render(struct cp *cp, struct al_buf *b)
{
    struct cp_metrics *m = cp->metrics;
    struct render_counts c = {0};
    cp_map_foreach(&cp->sandboxes, render__count, &c);
    al_buf_printf(b, "# HELP airlock_sandboxes Sandboxes by state.\n"
                     "# TYPE airlock_sandboxes gauge\n");
    for (int s = 0; s < 4; s++)
        al_buf_printf(b, "airlock_sandboxes{state=\"%s\"} %zu\n",
                      cp_sb_state_name((enum cp_sb_state)s), c.by_state[s]);
    render__counter(b, "airlock_sandbox_creates_total", "Sandboxes created.", m->created);
    render__counter(b, "airlock_sandbox_create_failures_total", "Creations that failed.",
                    m->create_failed);
    render__counter(b, "airlock_sandbox_kills_total",
                    "Sandboxes stopped (kill, timeout, "
                    "crash).",
                    m->killed);
    render__counter(b, "airlock_sandbox_crashes_total",
                    "Sandbox processes that exited on "
                    "their own.",
                    m->crashes);
    render__counter(b, "airlock_lifecycle_events_total",
                    "Lifecycle events recorded (GET /events/sandboxes).", m->events_recorded);
    render__counter(b, "airlock_lifecycle_events_lost_total",
                    "Lifecycle events the state database refused (logged).", m->events_failed);
    render__hist(b, "airlock_sandbox_create_duration_seconds",
                 "Time from a create request to a healthy agent.", &m->create_ms);
    const char *sn = "airlock_sandbox_create_stage_duration_seconds";
    al_buf_printf(
        b,
        "# HELP %s Time of each stage of a creation: accept (checks and record), "
        "network, egress (registration), queue (its turn to start), start (until the agent "
        "is healthy).\n"
        "# TYPE %s histogram\n",
        sn, sn);
    for (int i = 0; i < CP_CREATE_STAGES; i++) {
        char label[48];
        snprintf(label, sizeof label, "stage=\"%s\",", metrics__stage_names[i]);
        render__series(b, sn, label, &m->stage_ms[i]);
    }
    render__hist(b, "airlock_sandbox_kill_duration_seconds",
                 "Time from a kill to the sandbox's processes being gone.", &m->kill_ms);
    render__counter(b, "airlock_api_requests_total", "Control-plane requests.", m->api_requests);
    al_buf_printf(b, "# HELP airlock_api_errors_total Control-plane error answers by status "
                     "class.\n# TYPE airlock_api_errors_total counter\n");
    for (int i = 4; i < 6; i++)
        al_buf_printf(b, "airlock_api_errors_total{code=\"%dxx\"} %llu\n", i,
                      (unsigned long long)m->api_errors[i]);
    al_buf_printf(b, "# HELP airlock_dataplane_responses_total Requests routed to sandboxes by "
                     "status class.\n# TYPE airlock_dataplane_responses_total counter\n");
    for (int i = 1; i < 6; i++)
        al_buf_printf(b, "airlock_dataplane_responses_total{code=\"%dxx\"} %llu\n", i,
                      (unsigned long long)m->proxy[i]);
    size_t warm_ready, warm_size;
    cp_vmm_pool_counts(cp, &warm_ready, &warm_size);
    size_t net_ready = 0, net_size = 0;
    if (cp->net && cp->net->pool_counts)
        cp->net->pool_counts(cp->net_priv, &net_ready, &net_size);
    al_buf_printf(b,
                  "# HELP airlock_pool_ready Resources made ahead of creations and ready: warm "
                  "airlock-vmm processes, sandbox networks.\n"
                  "# TYPE airlock_pool_ready gauge\n"
                  "airlock_pool_ready{pool=\"airlock-vmm\"} %zu\n"
                  "airlock_pool_ready{pool=\"network\"} %zu\n"
                  "# HELP airlock_pool_size How many of each the pools keep ready "
                  "(sandboxes.warm_pool, network.pool_size; 0: no pool).\n"
                  "# TYPE airlock_pool_size gauge\n"
                  "airlock_pool_size{pool=\"airlock-vmm\"} %zu\n"
                  "airlock_pool_size{pool=\"network\"} %zu\n",
                  warm_ready, net_ready, warm_size, net_size);
    cp_warm_metrics(cp, b);
    json_t *es = cp->egress ? cp_egress_stats(cp->egress) : NULL;
    al_buf_printf(b,
                  "# HELP airlock_egress_up Whether airlock-egress answered its last "
                  "scrape.\n# TYPE airlock_egress_up gauge\nairlock_egress_up %d\n",
                  es ? 1 : 0);
    if (es) {
        al_buf_printf(b,
                      "# HELP airlock_egress_decisions_total Egress decisions by kind and "
                      "outcome.\n# TYPE airlock_egress_decisions_total counter\n"
                      "airlock_egress_decisions_total{kind=\"connection\",decision=\"allow\"} "
                      "%llu\n"
                      "airlock_egress_decisions_total{kind=\"connection\",decision=\"deny\"} "
                      "%llu\n"
                      "airlock_egress_decisions_total{kind=\"http\",decision=\"deny\"} %llu\n"
                      "airlock_egress_decisions_total{kind=\"dns\",decision=\"deny\"} %llu\n",
                      (unsigned long long)render__get(es, "connections", "allowed"),
                      (unsigned long long)render__get(es, "connections", "denied"),
                      (unsigned long long)render__get(es, "http", "denied"),
                      (unsigned long long)render__get(es, "dns", "denied"));
        render__counter(b, "airlock_egress_http_requests_total",
                        "HTTP requests seen by the "
                        "egress proxy.",
                        render__get(es, "http", "requests"));
        render__counter(b, "airlock_egress_dns_queries_total", "DNS queries from sandboxes.",
                        render__get(es, "dns", "queries"));
    }
    cp_disk_metrics(cp, b);
    al_buf_printf(b,
                  "# HELP airlockd_uptime_seconds Seconds since airlockd started.\n"
                  "# TYPE airlockd_uptime_seconds gauge\nairlockd_uptime_seconds %.0f\n",
                  (double)(al_now_ns() - cp->started_ns) / 1e9);
}

/* ---- samples -------------------------------------------------------------------------- */

void cp_metrics_add_sample(struct cp_sandbox *sb, const json_t *st)
{
    if (!sb->samples) {
        sb->samples = calloc(CP_SAMPLES_MAX, sizeof *sb->samples);
        if (!sb->samples)
            return;
    }
    uint64_t now = al_wall_ns();
    struct cp_sample s = {.wall_ns = now};
    uint64_t cpu_ns = (uint64_t)json_integer_value(json_object_get(st, "cpu_usage_ns"));
    double cpus = json_number_value(json_object_get(st, "cpus"));
    s.cpu_count = cpus > 0 ? (int)(cpus + 0.999) : sb->rec.cpu_count;
    if (s.cpu_count <= 0)
        s.cpu_count = 1;
    if (sb->last_cpu_wall_ns && now > sb->last_cpu_wall_ns && cpu_ns >= sb->last_cpu_ns) {
        double pct = (double)(cpu_ns - sb->last_cpu_ns) / (double)(now - sb->last_cpu_wall_ns) /
                     s.cpu_count * 100.0;
        s.cpu_pct = (float)(pct > 100.0 ? 100.0 : pct);
    }
    sb->last_cpu_ns = cpu_ns;
    sb->last_cpu_wall_ns = now;
    s.mem_used = (uint64_t)json_integer_value(json_object_get(st, "memory_bytes"));
    s.mem_total = (uint64_t)json_integer_value(json_object_get(st, "memory_limit_bytes"));
    if (!s.mem_total)
        s.mem_total = (uint64_t)sb->rec.memory_mb << 20;
    s.mem_cache = (uint64_t)json_integer_value(json_object_get(st, "memory_cache_bytes"));
    s.disk_used = (uint64_t)json_integer_value(json_object_get(st, "disk_used_bytes"));
    s.disk_total = (uint64_t)json_integer_value(json_object_get(st, "disk_total_bytes"));
    if (!s.disk_total)
        s.disk_total = (uint64_t)sb->rec.disk_mb << 20;
    sb->samples[sb->sample_head] = s;
    sb->sample_head = (sb->sample_head + 1) % CP_SAMPLES_MAX;
    if (sb->n_samples < CP_SAMPLES_MAX)
        sb->n_samples++;
}

static void metrics__sampled(struct cp_sandbox *sb, int rc, json_t *stats, void *arg)
{
    (void)arg;
    sb->sampling = false;
    if (rc == 0 && stats && sb->rec.state == CP_SB_RUNNING)
        cp_metrics_add_sample(sb, stats);
    cp_sb_unref(sb);
}

static int metrics__sample_one(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    struct cp *cp = arg;
    if (sb->rec.state != CP_SB_RUNNING || sb->busy || sb->sampling || !sb->started)
        return 0;
    sb->sampling = true;
    cp_sb_ref(sb);
    if (cp->backend->stats(sb, metrics__sampled, NULL)) {
        sb->sampling = false;
        cp_sb_unref(sb);
    }
    return 0;
}

void cp_metrics_sample_all(struct cp *cp)
{
    cp_map_foreach(&cp->sandboxes, metrics__sample_one, cp);
}

json_t *cp_metrics_sandbox_json(const struct cp_sandbox *sb, uint64_t start_s, uint64_t end_s)
{
    json_t *arr = json_array();
    size_t first = (sb->sample_head + CP_SAMPLES_MAX - sb->n_samples) % CP_SAMPLES_MAX;
    for (size_t i = 0; i < sb->n_samples; i++) {
        const struct cp_sample *s = &sb->samples[(first + i) % CP_SAMPLES_MAX];
        uint64_t ts = s->wall_ns / 1000000000ull;
        if ((start_s && ts < start_s) || (end_s && ts > end_s))
            continue;
        char t[40];
        al_time_rfc3339(t, sizeof t, s->wall_ns);
        json_array_append_new(
            arr,
            json_pack("{s:s,s:I,s:i,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp", t, "timestampUnix",
                      (json_int_t)ts, "cpuCount", s->cpu_count, "cpuUsedPct", (double)s->cpu_pct,
                      "memUsed", (json_int_t)s->mem_used, "memTotal", (json_int_t)s->mem_total,
                      "memCache", (json_int_t)s->mem_cache, "diskUsed", (json_int_t)s->disk_used,
                      "diskTotal", (json_int_t)s->disk_total));
    }
    return arr;
}
