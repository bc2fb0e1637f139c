/* tests/unit/controlplane/test_cp_series: the overview's time series (series.c): buckets of
 * the wall clock over a window of CP_SERIES_SLOTS, and the charts metrics.c makes of them
 * (creation latency; egress decisions as the differences of airlock-egress's counters). */
#include "al_test.h"
#include "common/util.h"
#include "controlplane/cp.h"
#include "controlplane/metrics.h"
#include "controlplane/series.h"

#include <jansson.h>
#include <string.h>

#define S 1000000000ull /* ns per second */
#define W (10 * S)      /* the buckets' width */

static struct cp_series series;

/* Observations in one bucket add up (count, sum, largest); the next bucket starts empty;
 * buckets are aligned on multiples of the width. */
START_TEST(observations_fall_in_their_bucket)
{
    cp_series_init(&series, W);
    const uint64_t t0 = 1764880000 * S; /* a multiple of 10 s */
    ck_assert_ptr_null(cp_series_bucket(&series, t0, t0 / W));
    cp_series_observe(&series, t0 + 1 * S, 100);
    cp_series_observe(&series, t0 + 9 * S, 300);
    cp_series_observe(&series, t0 + 5 * S, 200);
    cp_series_observe(&series, t0 + 10 * S, 7);
    const struct cp_series_bucket *b = cp_series_bucket(&series, t0 + 12 * S, t0 / W);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->n, 3);
    ck_assert_double_eq(b->sum, 600);
    ck_assert_double_eq(b->max, 300);
    b = cp_series_bucket(&series, t0 + 12 * S, t0 / W + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_double_eq(b->max, 7);
    /* Nothing in the bucket before, nor in one that is not there yet. */
    ck_assert_ptr_null(cp_series_bucket(&series, t0 + 12 * S, t0 / W - 1));
    ck_assert_ptr_null(cp_series_bucket(&series, t0 + 12 * S, t0 / W + 2));
    /* The largest of a bucket of negative values is one of them, not 0. */
    cp_series_observe(&series, t0 + 20 * S, -5);
    cp_series_observe(&series, t0 + 21 * S, -3);
    ck_assert_double_eq(cp_series_bucket(&series, t0 + 22 * S, t0 / W + 2)->max, -3);
}
END_TEST

/* The window is the last CP_SERIES_SLOTS buckets up to now: older buckets leave it, also when
 * nothing new is observed, and a slot reused by a later bucket starts empty. */
START_TEST(the_window_slides)
{
    cp_series_init(&series, W);
    const uint64_t t0 = 1764880000 * S, k0 = t0 / W;
    cp_series_observe(&series, t0, 1);
    uint64_t first, last;
    const uint64_t end = t0 + (CP_SERIES_SLOTS - 1) * W; /* k0 is the oldest bucket */
    cp_series_window(&series, end, &first, &last);
    ck_assert_uint_eq(first, k0);
    ck_assert_uint_eq(last, k0 + CP_SERIES_SLOTS - 1);
    ck_assert_ptr_nonnull(cp_series_bucket(&series, end, k0));
    /* One bucket later it has left the window, though nothing was observed since. */
    ck_assert_ptr_null(cp_series_bucket(&series, end + W, k0));
    /* An observation in the slot k0 used: its bucket has only it. */
    cp_series_observe(&series, t0 + CP_SERIES_SLOTS * W, 5);
    const struct cp_series_bucket *b =
        cp_series_bucket(&series, t0 + CP_SERIES_SLOTS * W, k0 + CP_SERIES_SLOTS);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_double_eq(b->sum, 5);
    ck_assert_ptr_null(cp_series_bucket(&series, t0 + CP_SERIES_SLOTS * W, k0));
    /* Observations every other bucket for two windows: each bucket in the window holds its
     * own, the ones between none. */
    cp_series_init(&series, W);
    for (uint64_t i = 0; i < 2 * CP_SERIES_SLOTS; i += 2)
        cp_series_observe(&series, t0 + i * W, (double)i);
    const uint64_t now = t0 + (2 * CP_SERIES_SLOTS - 1) * W;
    cp_series_window(&series, now, &first, &last);
    size_t seen = 0;
    for (uint64_t k = first; k <= last; k++) {
        b = cp_series_bucket(&series, now, k);
        if ((k - k0) % 2) {
            ck_assert_ptr_null(b);
            continue;
        }
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(b->n, 1);
        ck_assert_double_eq(b->sum, (double)(k - k0));
        seen++;
    }
    ck_assert_uint_eq(seen, CP_SERIES_SLOTS / 2);
    /* A jump far ahead (the clock stepped forward) empties the window. */
    cp_series_observe(&series, now + 10 * CP_SERIES_SLOTS * W, 1);
    cp_series_window(&series, now + 10 * CP_SERIES_SLOTS * W, &first, &last);
    seen = 0;
    for (uint64_t k = first; k <= last; k++)
        seen += cp_series_bucket(&series, now + 10 * CP_SERIES_SLOTS * W, k) != NULL;
    ck_assert_uint_eq(seen, 1);
}
END_TEST

/* The clock stepped back: an observation older than the window counts in the newest bucket
 * (it is not lost, nor put in a slot another bucket holds); one inside the window in its own. */
START_TEST(an_observation_from_the_past)
{
    cp_series_init(&series, W);
    const uint64_t t0 = 1764880000 * S, k0 = t0 / W;
    cp_series_observe(&series, t0, 1);
    cp_series_observe(&series, t0 - 3 * W, 2);
    cp_series_observe(&series, t0 - 2 * CP_SERIES_SLOTS * W, 4);
    const struct cp_series_bucket *b = cp_series_bucket(&series, t0, k0);
    ck_assert_uint_eq(b->n, 2);
    ck_assert_double_eq(b->sum, 5);
    b = cp_series_bucket(&series, t0, k0 - 3);
    ck_assert_ptr_nonnull(b);
    ck_assert_double_eq(b->sum, 2);
}
END_TEST

static json_t *stats(long long conn_allow, long long conn_deny, long long http_deny,
                     long long dns_deny)
{
    return json_pack("{s:{s:I,s:I,s:I},s:{s:I,s:I},s:{s:I,s:I}}", "connections", "allowed",
                     conn_allow, "denied", conn_deny, "active", 3LL, "http", "requests", 1000LL,
                     "denied", http_deny, "dns", "queries", 1000LL, "denied", dns_deny);
}

static void feed(struct cp_metrics *m, uint64_t t, long long a, long long b, long long c,
                 long long d)
{
    json_t *st = stats(a, b, c, d);
    cp_metrics_egress(m, st, t);
    json_decref(st);
}

static long long geti(const json_t *o, const char *k)
{
    ck_assert_msg(json_is_integer(json_object_get(o, k)), "%s is not an integer", k);
    return (long long)json_integer_value(json_object_get(o, k));
}

/* The decisions of a bucket are the counters' growth between airlock-egress's answers; the
 * first answer only sets where counting starts, a counter that went down is a restarted proxy
 * counting from 0. Buckets without an answer are not in the chart (no data is not zero). */
START_TEST(egress_decisions_are_the_counters_growth)
{
    struct cp_metrics *m = NULL;
    ck_assert_int_eq(cp_metrics_new(&m), 0);
    const uint64_t t0 = 1764880000 * S;
    feed(m, t0 + 1 * S, 500, 40, 30, 20); /* airlock-egress ran before airlockd started */
    feed(m, t0 + 4 * S, 510, 41, 30, 22);
    feed(m, t0 + 8 * S, 515, 43, 33, 22);
    feed(m, t0 + 12 * S, 515, 43, 33, 22);
    feed(m, t0 + 34 * S, 2, 1, 0, 5); /* restarted in between */
    json_t *o = cp_metrics_series_json(m, t0 + 35 * S);
    ck_assert_int_eq(geti(o, "bucketSeconds"), 10);
    ck_assert_int_eq(geti(o, "buckets"), CP_SERIES_SLOTS);
    ck_assert_int_eq(geti(o, "toUnix"), 1764880040); /* the end of now's bucket */
    ck_assert_int_eq(geti(o, "fromUnix"), 1764880040 - 10 * CP_SERIES_SLOTS);
    json_t *eg = json_object_get(o, "egress");
    ck_assert_uint_eq(json_array_size(eg), 3);
    json_t *b0 = json_array_get(eg, 0), *b1 = json_array_get(eg, 1), *b3 = json_array_get(eg, 2);
    ck_assert_int_eq(geti(b0, "timestampUnix"), 1764880000);
    ck_assert_str_eq(json_string_value(json_object_get(b0, "timestamp")),
                     "2025-12-04T20:26:40.000Z");
    ck_assert_int_eq(geti(b0, "samples"), 2); /* the first answer only began the count */
    ck_assert_int_eq(geti(b0, "connectionAllow"), 15);
    ck_assert_int_eq(geti(b0, "connectionDeny"), 3);
    ck_assert_int_eq(geti(b0, "httpDeny"), 3);
    ck_assert_int_eq(geti(b0, "dnsDeny"), 2);
    ck_assert_int_eq(geti(b1, "timestampUnix"), 1764880010);
    ck_assert_int_eq(geti(b1, "samples"), 1);
    ck_assert_int_eq(geti(b1, "connectionAllow"), 0);
    ck_assert_int_eq(geti(b3, "timestampUnix"), 1764880030);
    ck_assert_int_eq(geti(b3, "connectionAllow"), 2);
    ck_assert_int_eq(geti(b3, "connectionDeny"), 1);
    ck_assert_int_eq(geti(b3, "dnsDeny"), 5);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "create")), 0);
    json_decref(o);
    /* An hour later none of it is in the window. */
    o = cp_metrics_series_json(m, t0 + 35 * S + CP_SERIES_SLOTS * W);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "egress")), 0);
    json_decref(o);
    /* What is not an answer of /v1/stats changes nothing. */
    cp_metrics_egress(m, NULL, t0 + 36 * S);
    json_t *junk = json_string("x");
    cp_metrics_egress(m, junk, t0 + 36 * S);
    json_decref(junk);
    o = cp_metrics_series_json(m, t0 + 36 * S);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "egress")), 3);
    json_decref(o);
    cp_metrics_free(m);
}
END_TEST

/* Each creation that ended well is in the chart of its bucket: how many, mean and largest. */
START_TEST(creations_are_charted)
{
    struct cp_metrics *m = NULL;
    ck_assert_int_eq(cp_metrics_new(&m), 0);
    double stages[CP_CREATE_STAGES] = {0};
    cp_metrics_created(m, 120, stages);
    cp_metrics_created(m, 80, stages);
    json_t *o = cp_metrics_series_json(m, al_wall_ns());
    json_t *c = json_object_get(o, "create");
    /* Both in one bucket, or (at a bucket's end) one in each. */
    long long n = 0;
    double max = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        n += geti(json_array_get(c, i), "count");
        double mx = json_real_value(json_object_get(json_array_get(c, i), "maxMs"));
        max = mx > max ? mx : max;
    }
    ck_assert_int_eq(n, 2);
    ck_assert_double_eq(max, 120);
    if (json_array_size(c) == 1)
        ck_assert_double_eq(json_real_value(json_object_get(json_array_get(c, 0), "meanMs")), 100);
    json_decref(o);
    cp_metrics_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_series");
    TCase *t = tcase_create("series");
    tcase_add_test(t, observations_fall_in_their_bucket);
    tcase_add_test(t, the_window_slides);
    tcase_add_test(t, an_observation_from_the_past);
    tcase_add_test(t, egress_decisions_are_the_counters_growth);
    tcase_add_test(t, creations_are_charted);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
