/* tests/unit/vault/test_vault_crash: concurrent writers, and SIGKILL at every stage of an
 * update, which leaves the old vault or the new one, never a mix or a lost secret. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vault_fixture.h"

/* ---- concurrency and crashes ------------------------------------------------------------------ */

START_TEST(concurrent_writers)
{
    const char *d = vdir("concurrent");
    struct vault_store *s = sopen(d);
    put(s, "shared/x", "v0", true, NULL, 0);
    vault_store_close(s);
    enum { WRITERS = 4, EACH = 8 };
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        ck_assert_int_ge(pids[w], 0);
        if (pids[w] == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            for (int i = 0; i < EACH; i++) {
                char name[64], val[64];
                snprintf(name, sizeof name, "w%d/s%d", w, i);
                snprintf(val, sizeof val, "value-%d-%d", w, i);
                struct vault_value v;
                vault_value_set(&v, val, strlen(val));
                struct vault_put p = {.name = name, .value = &v};
                if (vault_store_create(cs, &p, "t", NULL, NULL))
                    _exit(11);
                p.name = "shared/x";
                if (vault_store_rotate(cs, &p, "t", NULL, NULL))
                    _exit(12);
                vault_value_free(&v);
            }
            vault_store_close(cs);
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int st;
        waitpid(pids[w], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d failed (%d)", w,
                      WEXITSTATUS(st));
    }
    s = sopen(d);
    const struct vault_catalog *c = vault_store_catalog(s);
    ck_assert_uint_eq(c->n, 1 + WRITERS * EACH); /* no update was lost */
    ck_assert_uint_eq(c->generation, 1 + 2 * WRITERS * EACH);
    const struct vault_secret *x = vault_catalog_find(c, "shared/x");
    ck_assert_uint_eq(x->current, 1 + WRITERS * EACH);
    for (int w = 0; w < WRITERS; w++) {
        char name[64], val[64];
        snprintf(name, sizeof name, "w%d/s%d", w, EACH - 1);
        snprintf(val, sizeof val, "value-%d-%d", w, EACH - 1);
        expect_value(s, name, 0, val);
    }
    ck_assert_int_eq(vault_store_check(s, NULL, NULL), 0);
    vault_store_close(s);
}
END_TEST

static const char *g_kill_stage;
static void kill_hook(const char *stage)
{
    if (g_kill_stage && strcmp(stage, g_kill_stage) == 0)
        raise(SIGKILL);
}

static void count_tmp(const char *d, int *n)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '\\.tmp-' ", d);
    FILE *p = popen(cmd, "r");
    *n = 0;
    if (fscanf(p, "%d", n) != 1)
        *n = 0;
    pclose(p);
}

START_TEST(sigkill_during_update_leaves_old_or_new)
{
    const char *d = vdir("kill");
    struct vault_store *s = sopen(d);
    put(s, "k", "old-value", true, NULL, 0);
    vault_store_close(s);
    /* at each step of the atomic update */
    const char *stages[] = {"tmp_written", "tmp_synced", "renamed"};
    const char *expect[] = {"old-value", "old-value", "new-value"};
    for (int i = 0; i < 3; i++) {
        if (i == 2) { /* reset to the old value for the last stage */
            s = sopen(d);
            put(s, "k", "old-value", false, NULL, 0);
            vault_store_close(s);
        }
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            g_kill_stage = stages[i];
            vault_store_test_hook = kill_hook;
            put(cs, "k", "new-value", false, NULL, 0);
            _exit(11); /* not reached */
        }
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        s = sopen(d);
        expect_value(s, "k", 0, expect[i]);
        int ntmp;
        count_tmp(d, &ntmp);
        ck_assert_int_eq(ntmp, i < 2 ? 1 : 0); /* the dead writer's temporary file */
        /* the next writer cleans up and works */
        put(s, "other", "x", i == 0, NULL, 0);
        count_tmp(d, &ntmp);
        ck_assert_int_eq(ntmp, 0);
        vault_store_close(s);
    }
    /* and at random moments */
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            for (int i = 0;; i++) {
                char v[64];
                snprintf(v, sizeof v, "complete-value-%d-%d", round, i);
                put(cs, "k", v, false, NULL, 0);
            }
        }
        usleep(20000 + (useconds_t)(round * 7919) % 60000);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        s = sopen(d); /* always opens: old or new, never torn */
        const struct vault_secret *k = vault_catalog_find(vault_store_catalog(s), "k");
        struct vault_value v;
        ck_assert_int_eq(vault_store_value(s, k, 0, &v, NULL), 0);
        ck_assert(v.len >= 9);
        ck_assert(memcmp(v.data, "complete-", 9) == 0 || memcmp(v.data, "new-value", 9) == 0 ||
                  memcmp(v.data, "old-value", 9) == 0);
        vault_value_free(&v);
        ck_assert_int_eq(vault_store_check(s, NULL, NULL), 0);
        vault_store_close(s);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vault_crash");
    TCase *t = vault_tcase("crash");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, concurrent_writers);
    tcase_add_test(t, sigkill_during_update_leaves_old_or_new);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
