/* tests/unit/common/test_auditlog_writer: common/auditlog's writer: the record format, refused
 * appends, raw appends, reopening continues the chain, one writer at a time, key problems
 * explained, checkpoints, group commit, rotation (by size and age, every file sealed),
 * retention (by count, size and age) that keeps a verifiable suffix, restored backups, the
 * pending limit, and a full disk (a small tmpfs in a private mount namespace) that fails
 * appends and recovers when space is back. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>
#include <sched.h>
#include <sodium.h>
#include <sys/mount.h>

#include "auditlog_fixture.h"
#include "common/util.h"

/* ---- writer ------------------------------------------------------------------------------ */

START_TEST(records_have_the_format)
{
    const char *d = tdir("format");
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    struct al_auditlog *l = open_log(d, NULL);
    append_n(l, 10, 0);
    json_t *empty = json_object();
    ck_assert_int_eq(al_auditlog_append(l, empty, NULL), 0);
    json_decref(empty);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    clock_gettime(CLOCK_REALTIME, &t1);

    char files[4][600];
    ck_assert_uint_eq(log_files(d, files, 4), 1);
    struct lines L;
    lines_load(files[0], &L);
    ck_assert_uint_eq(L.n, 13); /* start checkpoint + 11 + close checkpoint */
    ck_assert_str_eq(L.tail, "");
    char prev[65];
    memset(prev, '0', 64);
    prev[64] = 0;
    for (size_t i = 0; i < L.n; i++) {
        json_error_t je;
        json_t *j = json_loads(L.v[i], JSON_REJECT_DUPLICATES, &je);
        ck_assert_ptr_nonnull(j);
        ck_assert_int_eq(json_integer_value(json_object_get(j, "seq")), (json_int_t)i + 1);
        ck_assert_str_eq(json_string_value(json_object_get(j, "prev")), prev);
        const char *t = json_string_value(json_object_get(j, "time"));
        ck_assert_int_eq(strlen(t), 27); /* 2026-11-30T01:02:03.123456Z */
        ck_assert_int_eq(t[26], 'Z');
        /* the time of the append, to the microsecond (truncated) */
        uint64_t ns;
        ck_assert_int_eq(al_time_parse_rfc3339(t, &ns), 0);
        ck_assert_uint_ge(ns,
                          (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec / 1000 * 1000);
        ck_assert_uint_le(ns, (uint64_t)t1.tv_sec * 1000000000ull + (uint64_t)t1.tv_nsec);
        ck_assert_int_eq(strlen(json_string_value(json_object_get(j, "log_id"))), 32);
        /* the library's fields come first, the caller's after, in order */
        ck_assert(strncmp(L.v[i], "{\"seq\":", 7) == 0);
        unsigned char h[32];
        crypto_generichash(h, 32, (unsigned char *)L.v[i], strlen(L.v[i]), NULL, 0);
        sodium_bin2hex(prev, sizeof prev, h, 32);
        json_decref(j);
    }
    ck_assert(line_is_ckpt(L.v[0]));
    ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"start\""));
    ck_assert_ptr_nonnull(strstr(L.v[1], "\"event\":\"request\",\"n\":0,\"host\""));
    ck_assert_ptr_nonnull(strstr(L.v[12], "\"reason\":\"close\""));
    /* {} adds no members: ..."prev":"<hex>"} */
    ck_assert(strcmp(L.v[11] + strlen(L.v[11]) - 2, "\"}") == 0);
    lines_free(&L);

    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert(r.starts_at_genesis);
    ck_assert_int_eq(r.tail, AL_AUDIT_TAIL_CLOSED);
    ck_assert_uint_eq(r.records, 13);
    ck_assert_uint_eq(r.checkpoints, 2);
    ck_assert_uint_eq(r.unsigned_tail, 0);
}
END_TEST

START_TEST(bad_appends_are_refused)
{
    const char *d = tdir("refuse");
    struct al_auditlog *l = open_log(d, NULL);
    const char *reserved[] = {"seq", "time", "log_id", "prev", "auditlog"};
    for (size_t i = 0; i < 5; i++) {
        json_t *r = json_pack("{s:i}", reserved[i], 1);
        ck_assert_int_eq(al_auditlog_append(l, r, NULL), -EINVAL);
        json_decref(r);
    }
    json_t *arr = json_array();
    ck_assert_int_eq(al_auditlog_append(l, arr, NULL), -EINVAL);
    json_decref(arr);
    char *big = malloc(AL_AUDITLOG_MAX_RECORD + 10);
    memset(big, 'a', AL_AUDITLOG_MAX_RECORD + 9);
    big[AL_AUDITLOG_MAX_RECORD + 9] = 0;
    json_t *r = json_pack("{s:s}", "x", big);
    ck_assert_int_eq(al_auditlog_append(l, r, NULL), -E2BIG);
    json_decref(r);
    free(big);
    /* refused appends consume no seq */
    uint64_t seq;
    r = json_pack("{s:i}", "ok", 1);
    ck_assert_int_eq(al_auditlog_append(l, r, &seq), 0);
    ck_assert_uint_eq(seq, 2);
    json_decref(r);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    expect_intact(d);
}
END_TEST

START_TEST(raw_appends)
{
    const char *d = tdir("raw");
    struct al_auditlog *l = open_log(d, NULL);
    const char *ok = "{\"event\":\"raw\",\"n\":1}";
    uint64_t seq = 0;
    ck_assert_int_eq(al_auditlog_append_raw(l, ok, strlen(ok), &seq), 0);
    ck_assert_uint_eq(seq, 2);
    ck_assert_int_eq(al_auditlog_append_raw(l, "{}", 2, &seq), 0);
    const char *bad[] = {"", "[]", "{\"a\":1", "{\"a\":\n1}", "x{}"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(al_auditlog_append_raw(l, bad[i], strlen(bad[i]), NULL), -EINVAL);
#ifndef NDEBUG
    const char *reserved = "{\"seq\":5}";
    ck_assert_int_eq(al_auditlog_append_raw(l, reserved, strlen(reserved), NULL), -EINVAL);
#endif
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[4][600];
    ck_assert_uint_eq(log_files(d, files, 4), 1);
    struct lines L;
    lines_load(files[0], &L);
    ck_assert_ptr_nonnull(strstr(L.v[1], "\"prev\":\""));
    ck_assert(strcmp(L.v[1] + strlen(L.v[1]) - strlen(",\"event\":\"raw\",\"n\":1}"),
                     ",\"event\":\"raw\",\"n\":1}") == 0);
    lines_free(&L);
    expect_intact(d);
}
END_TEST

START_TEST(reopen_continues_the_chain)
{
    const char *d = tdir("reopen");
    for (int round = 0; round < 3; round++) {
        struct al_auditlog *l = open_log(d, NULL);
        append_n(l, 5, round * 5);
        ck_assert_int_eq(al_auditlog_close(l), 0);
    }
    char files[4][600];
    ck_assert_uint_eq(log_files(d, files, 4), 1); /* clean ends: the same file continues */
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    /* start, 3x(5 + close), 2 opens */
    ck_assert_uint_eq(r.records, 1 + 3 * 6 + 2);
    ck_assert_uint_eq(r.last_seq, r.records);
}
END_TEST

START_TEST(one_writer_at_a_time)
{
    const char *d = tdir("lock");
    struct al_auditlog *l = open_log(d, NULL);
    struct al_auditlog_opts o = {.dir = d, .prefix = "test"};
    struct al_auditlog *l2 = NULL;
    struct al_error e = {0};
    ck_assert_int_eq(al_auditlog_open(&o, &l2, &e), -EBUSY);
    ck_assert_ptr_nonnull(strstr(e.msg, "another process"));
    ck_assert_int_eq(al_auditlog_close(l), 0);
    ck_assert_int_eq(al_auditlog_open(&o, &l2, &e), 0);
    ck_assert_int_eq(al_auditlog_close(l2), 0);
}
END_TEST

START_TEST(key_problems_are_explained)
{
    const char *d = tdir("keys");
    struct al_auditlog *l = open_log(d, NULL);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char key[700];
    snprintf(key, sizeof key, "%s/test.key", d);
    struct stat st;
    ck_assert_int_eq(stat(key, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);

    struct al_auditlog_opts o = {.dir = d, .prefix = "test"};
    struct al_error e = {0};
    ck_assert_int_eq(chmod(key, 0644), 0);
    ck_assert_int_eq(al_auditlog_open(&o, &l, &e), -EPERM);
    ck_assert_ptr_nonnull(strstr(e.msg, "chmod 600"));
    ck_assert_int_eq(chmod(key, 0600), 0);

    char moved[720];
    snprintf(moved, sizeof moved, "%s.away", key);
    ck_assert_int_eq(rename(key, moved), 0);
    ck_assert_int_eq(al_auditlog_open(&o, &l, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "restore the key"));
    ck_assert_int_eq(rename(moved, key), 0);

    /* export: the public half only */
    char pub[720];
    snprintf(pub, sizeof pub, "%s/exported.pub", d);
    ck_assert_int_eq(al_auditlog_export_pubkey(key, pub, &e), 0);
    char *data;
    ck_assert_int_eq(al_read_file(pub, 65536, &data, NULL, NULL), 0);
    ck_assert_ptr_null(strstr(data, "secret"));
    ck_assert_ptr_nonnull(strstr(data, "public_key"));
    free(data);
    struct al_auditlog_verify_result r;
    struct al_auditlog_verify_opts vo = {.dir = d, .prefix = "test", .pubkey_file = pub};
    ck_assert_int_eq(al_auditlog_verify(&vo, &r, &e), 0);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
}
END_TEST

START_TEST(checkpoints_by_count_and_time)
{
    const char *d = tdir("ckpt");
    struct al_auditlog_opts o = {.checkpoint_records = 10, .checkpoint_interval_ms = 300};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 35, 0);
    struct al_auditlog_stats st;
    al_auditlog_get_stats(l, &st);
    ck_assert_uint_eq(st.checkpoints, 1 + 3); /* start + one per 10 records */
    append_n(l, 1, 100);
    /* no more appends: the writer thread signs the pending record on its own */
    for (int i = 0; i < 40; i++) {
        usleep(50000);
        al_auditlog_get_stats(l, &st);
        if (st.checkpoints == 5)
            break;
    }
    ck_assert_uint_eq(st.checkpoints, 5);
    ck_assert_int_eq(al_auditlog_checkpoint(l), 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_eq(r.checkpoints, 7);
}
END_TEST

START_TEST(group_commit_makes_records_durable)
{
    const char *d = tdir("commit");
    struct al_auditlog *l = open_log(d, NULL);
    append_n(l, 100, 0);
    uint64_t target = 101;
    uint64_t t0 = al_now_ns();
    while (al_auditlog_durable_seq(l) < target && al_now_ns() - t0 < 2000000000ull)
        usleep(5000);
    /* without anyone asking, within the group-commit window (generous bound for CI) */
    ck_assert_uint_ge(al_auditlog_durable_seq(l), target);
    append_n(l, 10, 100);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    ck_assert_uint_eq(al_auditlog_durable_seq(l), 111);
    struct al_auditlog_stats st;
    al_auditlog_get_stats(l, &st);
    ck_assert_uint_ge(st.fsyncs, 2);
    ck_assert_int_eq(al_auditlog_close(l), 0);
}
END_TEST

START_TEST(rotation_keeps_the_chain)
{
    const char *d = tdir("rotate");
    size_t n = make_log(d, 300);
    ck_assert_uint_ge(n, 4);
    char files[64][600];
    n = log_files(d, files, 64);
    for (size_t i = 0; i < n; i++) {
        struct lines L;
        lines_load(files[i], &L);
        ck_assert(line_is_ckpt(L.v[0]));
        if (i > 0)
            ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"rotate\""));
        /* the name carries the first seq */
        const char *b = strrchr(files[i], '/') + 1;
        char want[32];
        snprintf(want, sizeof want, "test-%020" PRIu64 "-", line_seq(L.v[0]));
        ck_assert(strncmp(b, want, strlen(want)) == 0);
        lines_free(&L);
    }
    expect_intact(d);
}
END_TEST

/* The index among files of the file holding request record number k, or n when none does. */
static size_t file_of_record(char files[][600], size_t n, int k)
{
    char needle[64];
    snprintf(needle, sizeof needle, "\"event\":\"request\",\"n\":%d,", k);
    for (size_t i = 0; i < n; i++) {
        struct lines L;
        lines_load(files[i], &L);
        bool found = false;
        for (size_t j = 0; j < L.n && !found; j++)
            found = strstr(L.v[j], needle) != NULL;
        lines_free(&L);
        if (found)
            return i;
    }
    return n;
}

START_TEST(rotation_by_age)
{
    const char *d = tdir("rotage");
    struct al_auditlog_opts o = {.rotate_interval_ms = 300};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 3, 0);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    usleep(450000);
    append_n(l, 3, 10);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[8][600];
    size_t n = log_files(d, files, 8);
    ck_assert_uint_ge(n, 2);
    /* What the clock guarantees: the file that took the first three was opened before them
     * and is at least 450 ms old when the next three come, so they go to a later one (the
     * appender or the writer's timer rotates it). Not that the first three are in the first
     * file: an append more than 300 ms after the open (a loaded machine) rotates first. */
    size_t f0 = file_of_record(files, n, 0), f2 = file_of_record(files, n, 2);
    size_t f10 = file_of_record(files, n, 10), f12 = file_of_record(files, n, 12);
    ck_assert_uint_lt(f2, n);
    ck_assert_uint_lt(f12, n);
    ck_assert_uint_le(f0, f2);
    ck_assert_uint_lt(f2, f10);
    ck_assert_uint_le(f10, f12);
    struct lines L;
    lines_load(files[0], &L);
    ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"start\""));
    lines_free(&L);
    for (size_t i = 0; i < n; i++) {
        lines_load(files[i], &L);
        if (i > 0)
            ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"rotate\""));
        ck_assert_ptr_nonnull(
            strstr(L.v[L.n - 1], i + 1 < n ? "\"reason\":\"seal\"" : "\"reason\":\"close\""));
        lines_free(&L);
    }
    expect_intact(d);
}
END_TEST

START_TEST(rotation_seals_every_file)
{
    const char *d = tdir("seal");
    size_t n = make_log(d, 300);
    ck_assert_uint_ge(n, 3);
    char files[64][600];
    n = log_files(d, files, 64);
    for (size_t i = 0; i + 1 < n; i++) {
        struct lines L;
        lines_load(files[i], &L);
        /* the last record of a closed file is its signed seal, and the next file's rotate
         * checkpoint follows it in the chain */
        ck_assert(line_is_ckpt(L.v[L.n - 1]));
        ck_assert_ptr_nonnull(strstr(L.v[L.n - 1], "\"reason\":\"seal\""));
        uint64_t seal = line_seq(L.v[L.n - 1]);
        lines_free(&L);
        lines_load(files[i + 1], &L);
        ck_assert_uint_eq(line_seq(L.v[0]), seal + 1);
        lines_free(&L);
    }
    expect_intact(d);
}
END_TEST

START_TEST(retention_keeps_a_verifiable_suffix)
{
    const char *d = tdir("retain");
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_files = 3};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 400, 0);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    append_n(l, 1, 1000); /* triggers the writer's retention pass after the sync */
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    ck_assert_uint_le(n, 3);
    /* every pass is announced in the chain before its files go */
    ck_assert_uint_ge(log_grep(d, "\"event\":\"retention\""), 1);
    ck_assert_uint_ge(log_grep(d, "\"reason\":\"retention\""), 1);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_files", &r);
    ck_assert_str_eq(r.first_file, files[0]);
    /* The retained start is a signed rotate checkpoint; removing it is detected. */
    struct lines L;
    lines_load(files[0], &L);
    free(L.v[0]);
    L.v[0] = NULL;
    lines_save(files[0], &L);
    lines_free(&L);
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_REMOVED);
}
END_TEST

START_TEST(retention_by_size_bounds_the_disk)
{
    const char *d = tdir("retsize");
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_bytes = 16384};
    struct al_auditlog *l = open_log(d, &o);
    for (int round = 0; round < 10; round++) {
        append_n(l, 100, round * 100);
        ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    }
    struct al_auditlog_stats st;
    al_auditlog_get_stats(l, &st);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    ck_assert_uint_gt(st.pruned_files, 0);
    ck_assert_uint_gt(st.pruned_bytes, 0);
    /* what is left: at most the bound plus the file being written (and its last record) */
    char files[64][600];
    size_t n = log_files(d, files, 64);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        ck_assert_int_eq(stat(files[i], &sb), 0);
        total += (uint64_t)sb.st_size;
    }
    ck_assert_uint_le(total, 16384 + 4096 + 2048);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_bytes", &r);
    ck_assert_uint_eq(r.pruned[0].limit, 16384);
    /* the writer's own record of it */
    char hist[700];
    snprintf(hist, sizeof hist, "%s/test.retention", d);
    ck_assert_int_eq(access(hist, R_OK), 0);
}
END_TEST

START_TEST(retention_by_age)
{
    const char *d = tdir("age");
    struct al_auditlog_opts o = {.rotate_bytes = 4096};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 200, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    ck_assert_uint_ge(n, 3);
    /* age the two oldest files by 10 days */
    for (int i = 0; i < 2; i++) {
        struct timespec ts[2] = {{time(NULL) - 10 * 86400, 0}, {time(NULL) - 10 * 86400, 0}};
        ck_assert_int_eq(utimensat(AT_FDCWD, files[i], ts, 0), 0);
    }
    o.retain_age_ms = 7 * 86400000ull;
    l = open_log(d, &o);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char after[64][600];
    size_t m = log_files(d, after, 64);
    ck_assert_uint_eq(m, n - 2);
    ck_assert_str_eq(after[0], files[2]);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_age", &r);
    ck_assert_uint_eq(r.n_pruned, 1);
    ck_assert_uint_eq(r.pruned[0].files, 2);
    ck_assert_uint_eq(r.pruned[0].limit, 7 * 86400000ull);
}
END_TEST

START_TEST(pruned_files_restored_from_a_backup)
{
    const char *d = tdir("restored");
    char files[64][600];
    make_pruned_log(d, files);
    /* keep copies of what retention is about to delete next, then put them back: a log that
     * holds more than retention announced is intact (the range is reported as still there) */
    char keep[700], cmd[1600];
    snprintf(keep, sizeof keep, "%s.keep", d);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -a %s %s", keep, d, keep);
    ck_assert_int_eq(system(cmd), 0);
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_files = 2};
    struct al_auditlog *l = open_log(d, &o);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_files", &r);
    snprintf(cmd, sizeof cmd, "cp -n %s/test-*.jsonl %s/", keep, d);
    ck_assert_int_eq(system(cmd), 0);
    verify_dir(d, NULL, &r);
    al_auditlog_verify_print(&r, stderr);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_lt(r.first_seq, r.retained_from);
    /* and the next writer takes them back into its history, then deletes them again */
    l = open_log(d, &o);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    expect_pruned(d, "max_files", &r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", keep);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(pending_limit_fails_closed)
{
    const char *d = tdir("pending");
    struct al_auditlog_opts o = {.max_pending_bytes = 2000};
    struct al_auditlog *l = open_log(d, &o);
    int rc = 0;
    for (int i = 0; i < 100000 && rc == 0; i++) {
        json_t *r = json_pack("{s:i}", "n", i);
        rc = al_auditlog_append(l, r, NULL);
        json_decref(r);
    }
    ck_assert_int_eq(rc, -ENOBUFS);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    append_n(l, 1, 0); /* room again once written */
    ck_assert_int_eq(al_auditlog_close(l), 0);
    expect_intact(d);
}
END_TEST

/* ---- full disk ------------------------------------------------------------------------------ */

static int g_state_calls, g_last_state = 1;
static void on_state(struct al_auditlog *l, int err, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_add_fetch(&g_state_calls, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_last_state, err, __ATOMIC_SEQ_CST);
}

START_TEST(full_disk_fails_closed_and_recovers)
{
    const char *d = tdir("fulldisk");
    /* A private mount namespace (this test runs in its own process): the tmpfs vanishes
     * with it, whatever happens. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        fprintf(stderr, "full_disk test skipped: cannot create a mount namespace (%s)\n",
                strerror(errno));
        return;
    }
    ck_assert_int_eq(mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=192k,mode=0700"), 0);
    /* a filler to free later */
    char filler[700];
    snprintf(filler, sizeof filler, "%s/filler", d);
    int fd = open(filler, O_WRONLY | O_CREAT, 0600);
    char blk[4096] = {0};
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(write(fd, blk, sizeof blk), (ssize_t)sizeof blk);
    close(fd);

    struct al_auditlog_opts o = {.on_state = on_state, .checkpoint_records = 200};
    struct al_auditlog *l = open_log(d, &o);
    int rc = 0;
    uint64_t accepted = 0;
    for (int i = 0; i < 200000 && rc == 0; i++) {
        json_t *r =
            json_pack("{s:i,s:s}", "n", i, "pad", "0123456789012345678901234567890123456789");
        rc = al_auditlog_append(l, r, NULL);
        json_decref(r);
        if (rc == 0)
            accepted++;
        if (i % 200 == 0 && rc == 0)
            rc = al_auditlog_sync(l, 0);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_int_eq(al_auditlog_status(l), -ENOSPC);
    /* the callback runs on the writer thread, just after the status changes */
    for (int i = 0; i < 100 && __atomic_load_n(&g_state_calls, __ATOMIC_SEQ_CST) == 0; i++)
        usleep(10000);
    ck_assert_int_ge(__atomic_load_n(&g_state_calls, __ATOMIC_SEQ_CST), 1);
    ck_assert_int_eq(__atomic_load_n(&g_last_state, __ATOMIC_SEQ_CST), -ENOSPC);
    json_t *r = json_pack("{s:i}", "n", -1);
    ck_assert_int_eq(al_auditlog_append(l, r, NULL), -ENOSPC); /* fail closed */
    json_decref(r);
    ck_assert_uint_gt(accepted, 100);

    /* space comes back: the writer retries, writes what it held, and reports recovery */
    ck_assert_int_eq(unlink(filler), 0);
    for (int i = 0; i < 100 && al_auditlog_status(l) != 0; i++)
        usleep(20000);
    ck_assert_int_eq(al_auditlog_status(l), 0);
    for (int i = 0; i < 100 && __atomic_load_n(&g_last_state, __ATOMIC_SEQ_CST) != 0; i++)
        usleep(10000);
    ck_assert_int_eq(__atomic_load_n(&g_last_state, __ATOMIC_SEQ_CST), 0);
    append_n(l, 5, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    expect_intact(d);
    umount2(d, MNT_DETACH);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("auditlog_writer");
    TCase *t = auditlog_tcase("writer");
    tcase_add_test(t, records_have_the_format);
    tcase_add_test(t, bad_appends_are_refused);
    tcase_add_test(t, raw_appends);
    tcase_add_test(t, reopen_continues_the_chain);
    tcase_add_test(t, one_writer_at_a_time);
    tcase_add_test(t, key_problems_are_explained);
    tcase_add_test(t, checkpoints_by_count_and_time);
    tcase_add_test(t, group_commit_makes_records_durable);
    tcase_add_test(t, rotation_keeps_the_chain);
    tcase_add_test(t, rotation_by_age);
    tcase_add_test(t, rotation_seals_every_file);
    tcase_add_test(t, retention_keeps_a_verifiable_suffix);
    tcase_add_test(t, retention_by_size_bounds_the_disk);
    tcase_add_test(t, retention_by_age);
    tcase_add_test(t, pruned_files_restored_from_a_backup);
    tcase_add_test(t, pending_limit_fails_closed);
    tcase_add_test(t, full_disk_fails_closed_and_recovers);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
