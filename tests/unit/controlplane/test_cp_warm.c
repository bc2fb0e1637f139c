/* tests/unit/controlplane/test_cp_warm: how many warm sandboxes a pool keeps (warm.c): the
 * largest burst of its template's creations within the window, between its minimum and
 * maximum. */
#include "al_test.h"
#include "controlplane/warm.h"

#include <string.h>

#define S 1000000000ull /* ns per second */

/* Without demand a pool keeps its minimum; a burst raises it up to the maximum, for as long
 * as the window remembers the burst. */
START_TEST(target_follows_the_bursts_within_the_window)
{
    struct cp_warm_demand d;
    memset(&d, 0, sizeof d);
    const uint64_t win = 600 * S, t0 = 1000 * S;
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0, win, 2, 16), 2);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0, win, 0, 0), 0);
    /* A burst of 9 under way counts already, and once it is over. */
    d.current = 9;
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0, win, 2, 16), 9);
    cp_warm_demand_burst_end(&d, t0);
    ck_assert_uint_eq(d.current, 0);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 10 * S, win, 2, 16), 9);
    /* Never above the maximum, never below the minimum. */
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 10 * S, win, 2, 4), 4);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 10 * S, win, 12, 16), 12);
    /* A smaller burst later does not lower it while the large one is remembered... */
    d.current = 3;
    cp_warm_demand_burst_end(&d, t0 + 300 * S);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 400 * S, win, 2, 16), 9);
    /* ... and is what remains once the large one has left the window. */
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 700 * S, win, 2, 16), 3);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 1000 * S, win, 2, 16), 2);
    /* A burst end without creations remembers nothing. */
    cp_warm_demand_burst_end(&d, t0 + 1000 * S);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 1000 * S, win, 2, 16), 2);
}
END_TEST

/* Only the last CP_WARM_BURSTS bursts are remembered: older ones are overwritten. */
START_TEST(only_the_last_bursts_are_remembered)
{
    struct cp_warm_demand d;
    memset(&d, 0, sizeof d);
    const uint64_t win = 3600 * S, t0 = 1000 * S;
    d.current = 50;
    cp_warm_demand_burst_end(&d, t0);
    for (int i = 1; i < CP_WARM_BURSTS; i++) {
        d.current = 1;
        cp_warm_demand_burst_end(&d, t0 + (uint64_t)i * S);
    }
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 100 * S, win, 0, 64), 50);
    d.current = 2;
    cp_warm_demand_burst_end(&d, t0 + 100 * S);
    ck_assert_uint_eq(cp_warm_demand_target(&d, t0 + 101 * S, win, 0, 64), 2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_warm");
    TCase *t = tcase_create("demand");
    tcase_add_test(t, target_follows_the_bursts_within_the_window);
    tcase_add_test(t, only_the_last_bursts_are_remembered);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
