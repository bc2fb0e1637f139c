/* controlplane/metrics: what airlockd measures.
 *
 * Owns: the per-sandbox resource samples behind GET /sandboxes/{id}/metrics (a bounded ring
 * per sandbox, filled every sandboxes.metrics_interval from the backend's stats: cgroup
 * CPU, memory and disk), and the Prometheus text exposition at GET /metrics: sandboxes by
 * state, creations and their latency histograms (in all, and by stage), crashes, API requests by status class,
 * data-plane requests, and the egress proxy's decision counters; and the last hour of
 * creation latency and egress decisions in buckets of 10 s (series.c), the overview's charts.
 */
#ifndef AIRLOCK_CP_METRICS_H
#define AIRLOCK_CP_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

struct cp;
struct cp_sandbox;
struct cp_metrics;

#define CP_SAMPLES_MAX       360 /* 30 minutes at the default 5 s */
#define CP_METRICS_BUCKET_NS (10ull * 1000000000ull)
/* The egress decisions charted: connections allowed and denied, HTTP requests and DNS
 * queries denied. */
#define CP_METRICS_DECISIONS 4

int cp_metrics_new(struct cp_metrics **out);
void cp_metrics_free(struct cp_metrics *m);
/* A creation that ended well: its total time and that of each of its CP_CREATE_STAGES. */
void cp_metrics_created(struct cp_metrics *m, double ms, const double *stage_ms);
void cp_metrics_create_failed(struct cp_metrics *m);
void cp_metrics_killed(struct cp_metrics *m, double ms);
void cp_metrics_crash(struct cp_metrics *m);
/* A lifecycle event recorded, or lost (the state database refused it). */
void cp_metrics_event(struct cp_metrics *m, bool recorded);
/* status 0: a control-plane request arrived; >= 400: an error answer. */
void cp_metrics_api(struct cp_metrics *m, int status);
void cp_metrics_proxy(struct cp_metrics *m, int status);
/* airlock-egress's counters (its /v1/stats answer) as of wall_ns: the decisions since the
 * previous answer go into the charts' series. */
void cp_metrics_egress(struct cp_metrics *m, const json_t *stats, uint64_t wall_ns);
/* The charts' series at now_ns (wall clock): {"bucketSeconds", "buckets", "fromUnix",
 * "toUnix" (the window: the oldest bucket's start, the newest's end), "create": [{
 * "timestamp", "timestampUnix", "count", "meanMs", "maxMs"}], "egress": [{"timestamp",
 * "timestampUnix", "samples", "connectionAllow", "connectionDeny", "httpDeny", "dnsDeny"}]},
 * oldest first, only the buckets that hold something. */
json_t *cp_metrics_series_json(const struct cp_metrics *m, uint64_t now_ns);
/* The Prometheus exposition (text format 0.0.4) into b. */
void cp_metrics_render(struct cp *cp, struct al_buf *b);

/* Samples every running sandbox (called by the tick). */
void cp_metrics_sample_all(struct cp *cp);
/* Adds a sample from backend stats. */
void cp_metrics_add_sample(struct cp_sandbox *sb, const json_t *stats);
/* SandboxMetric[] between start and end (unix seconds; 0 = open). */
json_t *cp_metrics_sandbox_json(const struct cp_sandbox *sb, uint64_t start_s, uint64_t end_s);

#endif
