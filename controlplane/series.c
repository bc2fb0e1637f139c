/* controlplane/series: see series.h. */
#include "series.h"

#include <string.h>

void cp_series_init(struct cp_series *s, uint64_t width_ns)
{
    memset(s, 0, sizeof *s);
    s->width_ns = width_ns ? width_ns : 1;
}

void cp_series_observe(struct cp_series *s, uint64_t wall_ns, double v)
{
    uint64_t k = wall_ns / s->width_ns;
    if (!s->any || k >= s->newest + CP_SERIES_SLOTS) {
        memset(s->b, 0, sizeof s->b);
        s->newest = k;
        s->any = true;
    } else if (k > s->newest) {
        /* The slots between hold buckets that left the window: they start again empty. */
        for (uint64_t i = s->newest + 1; i <= k; i++)
            memset(&s->b[i % CP_SERIES_SLOTS], 0, sizeof s->b[0]);
        s->newest = k;
    } else if (k + CP_SERIES_SLOTS <= s->newest) {
        k = s->newest;
    }
    struct cp_series_bucket *b = &s->b[k % CP_SERIES_SLOTS];
    if (b->n == 0 || v > b->max)
        b->max = v;
    b->n++;
    b->sum += v;
}

void cp_series_window(const struct cp_series *s, uint64_t now_ns, uint64_t *first, uint64_t *last)
{
    *last = now_ns / s->width_ns;
    *first = *last >= CP_SERIES_SLOTS - 1 ? *last - (CP_SERIES_SLOTS - 1) : 0;
}

const struct cp_series_bucket *cp_series_bucket(const struct cp_series *s, uint64_t now_ns,
                                                uint64_t k)
{
    uint64_t first, last;
    cp_series_window(s, now_ns, &first, &last);
    /* Only the slots of (newest - SLOTS, newest] hold their own index's bucket. */
    if (!s->any || k < first || k > last || k > s->newest || k + CP_SERIES_SLOTS <= s->newest)
        return NULL;
    const struct cp_series_bucket *b = &s->b[k % CP_SERIES_SLOTS];
    return b->n ? b : NULL;
}
