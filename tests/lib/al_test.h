/* tests/lib/al_test: helpers shared by the Check suites.
 *
 *   AL_SUITE_MAIN(suite_fn) defines main(): runs the suite in fork mode, prints Check's
 *   summary and exits non-zero on any failure.
 *   al_test_tmpdir / al_test_rmtree: a test's scratch directory, made and removed.
 */
#ifndef AIRLOCK_TESTS_AL_TEST_H
#define AIRLOCK_TESTS_AL_TEST_H

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

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

/* A fresh directory /tmp/al-<tag>-<pid>-XXXXXX (mode 0700) in buf. It aborts when none can be
 * made: it also serves unchecked fixtures, which run outside any test. */
static inline void al_test_tmpdir(char *buf, size_t n, const char *tag)
{
    if (snprintf(buf, n, "/tmp/al-%s-%d-XXXXXX", tag, (int)getpid()) >= (int)n || !mkdtemp(buf)) {
        perror("al_test_tmpdir");
        abort();
    }
}

static inline int *al_test__rm_failed(void)
{
    static int failed;
    return &failed;
}

static inline int al_test__rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    if (remove(p) < 0 && errno != ENOENT) { /* gone already: what rm -rf accepts too */
        fprintf(stderr, "al_test_rmtree: cannot remove %s: %m\n", p);
        *al_test__rm_failed() = 1;
    }
    return 0; /* on with the rest, as rm -rf does */
}

/* Removes dir and everything below it, never following a link; 0, or -1 when something could
 * not be removed (said on stderr; what could, was). */
static inline int al_test_rmtree(const char *dir)
{
    *al_test__rm_failed() = 0;
    int rc = nftw(dir, al_test__rm, 16, FTW_DEPTH | FTW_PHYS);
    if (rc < 0 && errno != ENOENT) {
        fprintf(stderr, "al_test_rmtree: %s: %m\n", dir);
        return -1;
    }
    return *al_test__rm_failed() ? -1 : 0;
}

#endif
