/* tests/unit/controlplane/templates/test_cachegc: the bound of the blob and step caches
 * (controlplane/templates/cachegc.c): least recently used first, a step's layer and record
 * together, what the caller keeps never, downloads under way and locks never, a use moves
 * an entry to the end of the order. Times are set explicitly: nothing depends on the clock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/templates/cachegc.h"

static char g_dir[256], g_blobs[300], g_steps[300];

#define H(c)                                                                                      \
    c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c \
        c c c c c c c c c c c c c c c c c

/* A file of size bytes used (mtime) at second t. */
static void file_at(const char *dir, const char *name, size_t size, time_t t)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    close(fd);
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static bool there(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void setup(void)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "cachegc");
    snprintf(g_blobs, sizeof g_blobs, "%s/oci/blobs/sha256", g_dir);
    snprintf(g_steps, sizeof g_steps, "%s/steps", g_dir);
    ck_assert_int_eq(al_mkdir_p(g_blobs, 0700), 0);
    ck_assert_int_eq(al_mkdir_p(g_steps, 0700), 0);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(least_recently_used_first_kept_never)
{
    file_at(g_blobs, H("1"), 100, 1000);
    file_at(g_blobs, H("2"), 100, 2000);
    file_at(g_blobs, H("3"), 100, 3000);
    file_at(g_blobs, H("4"), 100, 4000);
    /* a download under way and a lock: not the cache's entries */
    file_at(g_blobs, H("5") ".partial", 5000, 1);
    file_at(g_blobs, H("5") ".lock", 0, 1);
    /* step layers with their records: one entry each, used when the later of the two was */
    file_at(g_steps, H("a") ".tar", 100, 1500);
    file_at(g_steps, H("a") ".json", 10, 1600);
    file_at(g_steps, H("b") ".tar", 100, 5000);
    file_at(g_steps, H("b") ".json", 10, 4900);
    file_at(g_steps, H("c") ".tar.partial-build", 7000, 1); /* a layer being made */
    file_at(g_steps, "README", 10, 1);

    struct tpl_cache_keep keep = {0};
    ck_assert_int_eq(tpl_cache_keep_add(&keep, "sha256:" H("1")), 0);
    ck_assert_int_eq(tpl_cache_keep_add(&keep, "sha256:" H("1")), 0); /* once */
    ck_assert_uint_eq(keep.n, 1);
    struct tpl_cache_trim_stats st;
    struct al_error err = {0};
    char oci[300];
    snprintf(oci, sizeof oci, "%s/oci", g_dir);
    ck_assert_msg(tpl_cache_trim(oci, g_steps, 300, &keep, &st, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(st.bytes_before, 620);
    /* the order: 1 (kept), a, 2, 3, 4, b; 620 - 110 - 100 - 100 - 100 = 210 <= 300 */
    ck_assert_uint_eq(st.removed, 4);
    ck_assert_uint_eq(st.removed_bytes, 410);
    ck_assert_uint_eq(st.kept, 1);
    ck_assert_uint_eq(st.bytes_after, 210);
    ck_assert(there(g_blobs, H("1")));
    ck_assert(!there(g_blobs, H("2")));
    ck_assert(!there(g_blobs, H("3")));
    ck_assert(!there(g_blobs, H("4")));
    ck_assert(!there(g_steps, H("a") ".tar"));
    ck_assert(!there(g_steps, H("a") ".json"));
    ck_assert(there(g_steps, H("b") ".tar"));
    ck_assert(there(g_steps, H("b") ".json"));
    ck_assert(there(g_blobs, H("5") ".partial"));
    ck_assert(there(g_blobs, H("5") ".lock"));
    ck_assert(there(g_steps, H("c") ".tar.partial-build"));
    ck_assert(there(g_steps, "README"));

    /* Within the bound: nothing goes. Kept entries alone over it: they stay. */
    ck_assert_int_eq(tpl_cache_trim(oci, g_steps, 210, &keep, &st, &err), 0);
    ck_assert_uint_eq(st.removed, 0);
    ck_assert_uint_eq(st.bytes_after, 210);
    ck_assert_int_eq(tpl_cache_keep_add(&keep, H("b")), 0);
    ck_assert_int_eq(tpl_cache_trim(oci, g_steps, 0, &keep, &st, &err), 0);
    ck_assert_uint_eq(st.removed, 0);
    ck_assert_uint_eq(st.kept, 2);
    ck_assert_uint_eq(st.bytes_after, 210);
    ck_assert(there(g_steps, H("b") ".tar"));
    tpl_cache_keep_free(&keep);
    ck_assert_uint_eq(keep.n, 0);
}
END_TEST

START_TEST(a_use_moves_an_entry_last)
{
    file_at(g_blobs, H("1"), 100, 1000);
    file_at(g_blobs, H("2"), 100, 2000);
    file_at(g_blobs, H("3"), 100, 3000);
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_blobs, H("1"));
    tpl_cache_touch(p);                   /* now: later than 3000 */
    tpl_cache_touch("/nonexistent/blob"); /* (gone meanwhile: nothing to mark) */
    struct tpl_cache_trim_stats st;
    struct al_error err = {0};
    char oci[300];
    snprintf(oci, sizeof oci, "%s/oci", g_dir);
    ck_assert_int_eq(tpl_cache_trim(oci, NULL, 200, NULL, &st, &err), 0);
    ck_assert_uint_eq(st.removed, 1);
    ck_assert(there(g_blobs, H("1")));
    ck_assert(!there(g_blobs, H("2")));
    ck_assert(there(g_blobs, H("3")));
}
END_TEST

START_TEST(missing_caches_are_empty)
{
    struct tpl_cache_trim_stats st;
    struct al_error err = {0};
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/none", g_dir);
    snprintf(b, sizeof b, "%s/none-steps", g_dir);
    ck_assert_int_eq(tpl_cache_trim(a, b, 0, NULL, &st, &err), 0);
    ck_assert_uint_eq(st.bytes_before, 0);
    ck_assert_uint_eq(st.removed, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cachegc");
    TCase *t = tcase_create("cachegc");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, least_recently_used_first_kept_never);
    tcase_add_test(t, a_use_moves_an_entry_last);
    tcase_add_test(t, missing_caches_are_empty);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
