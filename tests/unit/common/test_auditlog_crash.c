/* tests/unit/common/test_auditlog_crash: crashes verify as truncation, not corruption: a torn
 * tail, a file holding only a torn line, SIGKILL while appending. */
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

#include "auditlog_fixture.h"
#include "common/util.h"

/* ---- crashes ------------------------------------------------------------------------------ */

START_TEST(torn_tail_is_truncation_not_corruption)
{
    const char *d = tdir("torn");
    struct al_auditlog *l = open_log(d, NULL);
    append_n(l, 20, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[4][600];
    ck_assert_uint_eq(log_files(d, files, 4), 1);
    /* a crash in the middle of a write: half a record, no newline */
    const char *torn = "{\"seq\":23,\"time\":\"2026-01-01T00:00:00.000000Z\",\"log_id\":\"ab";
    FILE *f = fopen(files[0], "a");
    fputs(torn, f);
    fclose(f);
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_int_eq(r.tail, AL_AUDIT_TAIL_TORN);
    ck_assert_uint_eq(r.torn_bytes, strlen(torn));

    /* the next writer leaves the torn bytes, declares them, continues in a new file */
    l = open_log(d, NULL);
    append_n(l, 5, 100);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    ck_assert_uint_eq(log_files(d, files, 4), 2);
    struct lines L;
    lines_load(files[1], &L);
    ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"open\""));
    ck_assert_ptr_nonnull(strstr(L.v[0], "\"recovered\":{\"file\":\""));
    char want[32];
    snprintf(want, sizeof want, "\"bytes\":%zu}", strlen(torn));
    ck_assert_ptr_nonnull(strstr(L.v[0], want));
    lines_free(&L);
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_eq(r.crash_recoveries, 1);
    ck_assert_int_eq(r.tail, AL_AUDIT_TAIL_CLOSED);

    /* but changing those declared bytes afterwards is noticed */
    f = fopen(files[0], "a");
    fputs("x", f);
    fclose(f);
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_EDITED);
}
END_TEST

START_TEST(file_holding_only_a_torn_line)
{
    const char *d = tdir("tornfile");
    struct al_auditlog_opts o = {.rotate_bytes = 2048};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 40, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[16][600];
    size_t n = log_files(d, files, 16);
    /* a crash right after creating a new file: an empty file, and one with a torn line */
    char p[700];
    snprintf(p, sizeof p, "%s/test-09999999999999999998-20260101T000000Z.jsonl", d);
    FILE *f = fopen(p, "w");
    fputs("{\"seq\":", f);
    fclose(f);
    l = open_log(d, &o);
    append_n(l, 3, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    snprintf(p, sizeof p, "%s/test-09999999999999999998-20260101T000000Z.jsonl.torn", d);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0); /* kept for inspection, out of the chain */
    ck_assert_uint_eq(log_files(d, files, 16), n + 1);
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_eq(r.crash_recoveries, 1);

    snprintf(p, sizeof p, "%s/test-09999999999999999999-20260101T000000Z.jsonl", d);
    f = fopen(p, "w");
    fclose(f);
    l = open_log(d, &o); /* the empty file is removed */
    ck_assert_int_eq(al_auditlog_close(l), 0);
    ck_assert_int_eq(stat(p, &st), -1);
    expect_intact(d);
}
END_TEST

START_TEST(sigkill_while_appending)
{
    const char *d = tdir("kill");
    for (int round = 0; round < 3; round++) {
        int ready[2];
        ck_assert_int_eq(pipe(ready), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            close(ready[0]);
            struct al_auditlog_opts o = {
                .dir = d, .prefix = "test", .rotate_bytes = 65536, .checkpoint_records = 500};
            struct al_auditlog *l;
            if (al_auditlog_open(&o, &l, NULL))
                _exit(3);
            bool told = false;
            for (int i = 0;; i++) {
                if (i == 50 && !told) { /* some records are on disk: the parent may kill now */
                    al_auditlog_sync(l, 0);
                    if (write(ready[1], "r", 1) != 1)
                        _exit(4);
                    told = true;
                }
                json_t *r = json_pack("{s:i,s:s}", "n", i, "pad", "xxxxxxxxxxxxxxxxxxxxxxxxx");
                al_auditlog_append(l, r, NULL);
                json_decref(r);
                if (i % 64 == 0)
                    usleep(100);
            }
        }
        close(ready[1]);
        char c;
        ck_assert_int_eq(read(ready[0], &c, 1), 1);
        close(ready[0]);
        usleep(50000 + (useconds_t)round * 70000);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        ck_assert(WIFSIGNALED(status));
        struct al_auditlog_verify_result r;
        verify_dir(d, NULL, &r);
        if (r.verdict != AL_AUDIT_INTACT)
            al_auditlog_verify_print(&r, stderr);
        ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
        ck_assert_uint_gt(r.records, 10);
    }
    struct al_auditlog *l = open_log(d, NULL);
    append_n(l, 3, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    expect_intact(d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("auditlog_crash");
    TCase *t = auditlog_tcase("crash");
    tcase_add_test(t, torn_tail_is_truncation_not_corruption);
    tcase_add_test(t, file_holding_only_a_torn_line);
    tcase_add_test(t, sigkill_while_appending);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
