/* tests/unit/controlplane/test_cp_sweep: the start-time walk of a store directory (sweep.c):
 * what the owner does not call recorded goes (released first), never through a link, what it
 * keeps stays; the directory is made only when asked. Removal after start (cp_take_away):
 * the name is gone at once, the files go on a worker thread, never through a link. The owners' own sweeps (snapshots,
 * volumes) are tested with their stores in test_cp_rest_snapshots and test_cp_rest_volumes. */
#include "al_test.h"
#include "controlplane/sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static void setup(void)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "cp-sweep");
}

static void teardown(void)
{
    al_test_rmtree(g_dir);
}

static void mk(const char *rel, bool dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    if (dir) {
        ck_assert_int_eq(mkdir(p, 0700), 0);
        return;
    }
    int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static bool there(const char *rel)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    return lstat(p, &st) == 0;
}

/* Recorded: names starting with "keep". */
static bool keep_recorded(const char *name, void *arg)
{
    (void)arg;
    return strncmp(name, "keep", 4) == 0;
}

struct released {
    char paths[8][512];
    int n;
};

static void note_release(const char *path, void *arg)
{
    struct released *r = arg;
    ck_assert_int_lt(r->n, 8);
    snprintf(r->paths[r->n++], sizeof r->paths[0], "%s", path);
}

START_TEST(sweep_removes_what_is_not_recorded)
{
    mk("store", true);
    mk("store/keep-1", true);
    mk("store/keep-1/f", false);
    mk("store/keep-2.img", false);
    mk("store/.tmp-x", true);
    mk("store/.tmp-x/deep", true);
    mk("store/.tmp-x/deep/f", false);
    mk("store/gone.img", false);
    mk("outside", true);
    mk("outside/precious", false);
    char store[512], link[512], target[512];
    snprintf(store, sizeof store, "%s/store", g_dir);
    /* An entry that is a link to a directory outside: the link goes, not what it names. */
    snprintf(target, sizeof target, "%s/outside", g_dir);
    snprintf(link, sizeof link, "%s/store/link", g_dir);
    ck_assert_int_eq(symlink(target, link), 0);
    struct released rel = {0};
    struct cp_sweep s = {
        .what = "thing", .recorded = keep_recorded, .release = note_release, .arg = &rel};
    ck_assert_uint_eq(cp_sweep_dir(store, &s), 3);
    ck_assert(there("store/keep-1/f"));
    ck_assert(there("store/keep-2.img"));
    ck_assert(!there("store/.tmp-x"));
    ck_assert(!there("store/gone.img"));
    ck_assert(!there("store/link"));
    ck_assert(there("outside/precious"));
    /* Each removed entry was released first, by its path; no kept one was. */
    ck_assert_int_eq(rel.n, 3);
    for (int i = 0; i < rel.n; i++) {
        ck_assert_msg(strncmp(rel.paths[i], store, strlen(store)) == 0, "%s", rel.paths[i]);
        ck_assert_msg(!strstr(rel.paths[i], "/keep"), "%s", rel.paths[i]);
    }
    /* Again: nothing more to do. */
    rel.n = 0;
    ck_assert_uint_eq(cp_sweep_dir(store, &s), 0);
    ck_assert_int_eq(rel.n, 0);
}
END_TEST

START_TEST(sweep_makes_the_directory_only_when_asked)
{
    char p[512];
    snprintf(p, sizeof p, "%s/absent", g_dir);
    struct cp_sweep s = {.what = "thing", .recorded = keep_recorded};
    ck_assert_uint_eq(cp_sweep_dir(p, &s), 0);
    ck_assert(!there("absent"));
    s.create = true;
    ck_assert_uint_eq(cp_sweep_dir(p, &s), 0);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    /* A path that is no directory is said in the log and left alone. */
    mk("file", false);
    snprintf(p, sizeof p, "%s/file", g_dir);
    ck_assert_uint_eq(cp_sweep_dir(p, &s), 0);
    ck_assert(there("file"));
}
END_TEST

/* The names in store beside the ones a test made: the hidden ones cp_take_away renames to. */
static int hidden_in(const char *rel, char *first, size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    DIR *d = opendir(p);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, ".x.deleted-", 11) == 0 && n++ == 0)
            snprintf(first, len, "%s", de->d_name);
    closedir(d);
    return n;
}

/* Holds the thread pool's only thread until the test lets it go. */
static uv_sem_t g_hold;
static void hold_work(uv_work_t *w)
{
    (void)w;
    uv_sem_wait(&g_hold);
}
static void hold_done(uv_work_t *w, int status)
{
    (void)w;
    (void)status;
}

START_TEST(take_away_renames_now_and_removes_on_a_worker)
{
    /* One worker thread, held: what cp_take_away does before the worker runs is seen. (Check
     * runs each test in its own process; the pool starts at the first queued work.) */
    ck_assert_int_eq(setenv("UV_THREADPOOL_SIZE", "1", 1), 0);
    ck_assert_int_eq(uv_sem_init(&g_hold, 0), 0);
    mk("store", true);
    mk("store/x", true);
    mk("store/x/deep", true);
    mk("store/x/deep/f", false);
    mk("store/y", false);
    mk("outside", true);
    mk("outside/precious", false);
    char p[512], target[512], hidden[256] = "";
    snprintf(target, sizeof target, "%s/outside", g_dir);
    snprintf(p, sizeof p, "%s/store/x/deep/link", g_dir);
    ck_assert_int_eq(symlink(target, p), 0);
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    uv_work_t hold;
    ck_assert_int_eq(uv_queue_work(&loop, &hold, hold_work, hold_done), 0);
    snprintf(p, sizeof p, "%s/store/x", g_dir);
    cp_take_away(&loop, p, "thing");
    /* Before the loop ran: the name is free (a new one may be made there), the tree is
     * under its hidden name, whole. */
    ck_assert(!there("store/x"));
    ck_assert_int_eq(hidden_in("store", hidden, sizeof hidden), 1);
    char rel[512];
    snprintf(rel, sizeof rel, "store/%s/deep/f", hidden);
    ck_assert(there(rel));
    mk("store/x", true);
    uv_sem_post(&g_hold);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    uv_sem_destroy(&g_hold);
    ck_assert_int_eq(hidden_in("store", hidden, sizeof hidden), 0);
    ck_assert(there("store/x")); /* the new one */
    ck_assert(there("store/y"));
    ck_assert(there("outside/precious"));
    /* Nothing there: nothing to do, nothing queued. */
    snprintf(p, sizeof p, "%s/store/absent", g_dir);
    cp_take_away(&loop, p, "thing");
    ck_assert_int_eq(uv_run(&loop, UV_RUN_NOWAIT), 0);
    /* A link is taken away itself, not what it names. */
    snprintf(p, sizeof p, "%s/store/y", g_dir);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(symlink(target, p), 0);
    cp_take_away(&loop, p, "thing");
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert(!there("store/y"));
    ck_assert(there("outside/precious"));
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_sweep");
    TCase *t = tcase_create("sweep");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, sweep_removes_what_is_not_recorded);
    tcase_add_test(t, sweep_makes_the_directory_only_when_asked);
    tcase_add_test(t, take_away_renames_now_and_removes_on_a_worker);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
