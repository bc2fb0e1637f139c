/* controlplane/series: a bounded time series in memory.
 *
 * Owns: fixed-width buckets over a sliding window (CP_SERIES_SLOTS of them: 360 x 10 s is the
 * last hour), each holding how many observations fell in it, their sum and their largest,
 * for the overview's charts (metrics.c feeds them: creation latency, egress decisions).
 * Buckets are aligned on the wall clock (a bucket of 10 s starts at a multiple of 10 s since
 * the epoch). An observation older than the window (the clock stepped back) counts in the
 * newest bucket; one far ahead empties the window. Nothing is allocated: a series is 8.6 KB
 * in its owner's struct.
 */
#ifndef AIRLOCK_CP_SERIES_H
#define AIRLOCK_CP_SERIES_H

#include <stdbool.h>
#include <stdint.h>

#define CP_SERIES_SLOTS 360

struct cp_series_bucket {
    uint64_t n;
    double sum, max;
};

struct cp_series {
    uint64_t width_ns;
    uint64_t newest; /* the absolute index (wall_ns / width_ns) of the newest bucket written */
    bool any;
    struct cp_series_bucket b[CP_SERIES_SLOTS];
};

void cp_series_init(struct cp_series *s, uint64_t width_ns);
/* One observation of v at wall_ns. */
void cp_series_observe(struct cp_series *s, uint64_t wall_ns, double v);
/* The bucket of absolute index k as seen at now_ns: NULL when k is outside the window that
 * ends with now's bucket, or nothing was observed in it. */
const struct cp_series_bucket *cp_series_bucket(const struct cp_series *s, uint64_t now_ns,
                                                uint64_t k);
/* The absolute indexes of the window at now_ns: [*first, *last]. */
void cp_series_window(const struct cp_series *s, uint64_t now_ns, uint64_t *first, uint64_t *last);

#endif
