/* tests/lib/al_test: helpers shared by the Check suites.
 *
 *   AL_SUITE_MAIN(suite_fn) defines main(): runs the suite in fork mode, prints Check's
 *   summary and exits non-zero on any failure.
 */
#ifndef AIRLOCK_TESTS_AL_TEST_H
#define AIRLOCK_TESTS_AL_TEST_H

#include <check.h>
#include <stdlib.h>

#define AL_SUITE_MAIN(suite_fn)                      \
    int main(void);                                  \
    int main(void)                                   \
    {                                                \
        SRunner *sr = srunner_create(suite_fn());    \
        srunner_run_all(sr, CK_NORMAL);              \
        int failed = srunner_ntests_failed(sr);      \
        srunner_free(sr);                            \
        return failed ? EXIT_FAILURE : EXIT_SUCCESS; \
    }

/* Directory of the source tree (set by ctest), for fixtures. */
static inline const char *al_test_srcdir(void)
{
    const char *s = getenv("AIRLOCK_SOURCE_DIR");
    return s ? s : ".";
}

#endif
