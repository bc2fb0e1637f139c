/* Unit tests: common/auditlog (writer, reader, verifier, redaction helpers).
 *
 * Every kind of tampering an auditor cares about is applied to a real log and the verifier
 * must name it; crashes (torn lines, SIGKILL) must verify as truncation, not corruption; a
 * full disk (a small tmpfs mounted in a private mount namespace) must fail appends and
 * recover when space is back. */
#include "al_test.h"
#include "common/auditlog.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char g_root[256];

static void root_setup(void)
{
    snprintf(g_root, sizeof g_root, "/tmp/al-auditlog-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(g_root))
        abort();
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(p);
    return 0;
}

static void root_teardown(void)
{
    nftw(g_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory for one test. */
static const char *tdir(const char *name)
{
    static char ring[4][512];
    static int k;
    char *d = ring[k++ % 4];
    snprintf(d, 512, "%s/%s", g_root, name);
    ck_assert_int_eq(al_mkdir_p(d, 0700), 0);
    return d;
}

static struct al_auditlog *open_log(const char *dir, struct al_auditlog_opts *extra)
{
    struct al_auditlog_opts o = {0};
    if (extra)
        o = *extra;
    o.dir = dir;
    o.prefix = "test";
    struct al_auditlog *l = NULL;
    struct al_error e = {0};
    int rc = al_auditlog_open(&o, &l, &e);
    ck_assert_msg(rc == 0, "open: %s", al_error_str(&e));
    return l;
}

static void append_n(struct al_auditlog *l, int n, int base)
{
    for (int i = 0; i < n; i++) {
        json_t *r = json_pack("{s:s,s:i,s:s}", "event", "request", "n", base + i, "host",
                              "api.example.com");
        uint64_t seq = 0;
        ck_assert_int_eq(al_auditlog_append(l, r, &seq), 0);
        ck_assert_uint_gt(seq, 0);
        json_decref(r);
    }
}

static void verify_dir(const char *dir, const char *ckpt, struct al_auditlog_verify_result *res)
{
    struct al_auditlog_verify_opts o = {.dir = dir, .prefix = "test", .checkpoint_file = ckpt};
    struct al_error e = {0};
    int rc = al_auditlog_verify(&o, res, &e);
    ck_assert_msg(rc == 0, "verify could not run: %s", al_error_str(&e));
}

static void expect_intact(const char *dir)
{
    struct al_auditlog_verify_result r;
    verify_dir(dir, NULL, &r);
    if (r.verdict != AL_AUDIT_INTACT)
        al_auditlog_verify_print(&r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r.verdict), "intact");
}

/* ---- file helpers for tampering ------------------------------------------------------- */

struct lines {
    char **v;
    size_t n;
    char *tail; /* bytes after the last '\n' */
};

static void lines_load(const char *path, struct lines *L)
{
    char *data;
    size_t len;
    ck_assert_int_eq(al_read_file(path, 64 << 20, &data, &len, NULL), 0);
    L->v = NULL;
    L->n = 0;
    size_t pos = 0;
    while (pos < len) {
        char *nl = memchr(data + pos, '\n', len - pos);
        if (!nl)
            break;
        L->v = realloc(L->v, (L->n + 1) * sizeof *L->v);
        L->v[L->n++] = strndup(data + pos, (size_t)(nl - (data + pos)));
        pos = (size_t)(nl - data) + 1;
    }
    L->tail = strndup(data + pos, len - pos);
    free(data);
}

static void lines_save(const char *path, struct lines *L)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < L->n; i++) {
        if (L->v[i])
            fprintf(f, "%s\n", L->v[i]);
    }
    fputs(L->tail, f);
    fclose(f);
}

static void lines_free(struct lines *L)
{
    for (size_t i = 0; i < L->n; i++)
        free(L->v[i]);
    free(L->v);
    free(L->tail);
}

/* The log's files, sorted. */
static size_t log_files(const char *dir, char files[][600], size_t max)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/test-*.jsonl 2>/dev/null | sort", dir);
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    while (n < max && fgets(files[n], 600, p)) {
        files[n][strcspn(files[n], "\n")] = '\0';
        n++;
    }
    pclose(p);
    return n;
}

static uint64_t line_seq(const char *line)
{
    json_t *j = json_loads(line, 0, NULL);
    uint64_t s = (uint64_t)json_integer_value(json_object_get(j, "seq"));
    json_decref(j);
    return s;
}

static bool line_is_ckpt(const char *line)
{
    return strstr(line, "\"auditlog\":{") != NULL;
}

/* A log with several files, closed; returns the number of files. */
static size_t make_log(const char *dir, int records)
{
    struct al_auditlog_opts o = {.rotate_bytes = 8192, .checkpoint_records = 25};
    struct al_auditlog *l = open_log(dir, &o);
    append_n(l, records, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[64][600];
    return log_files(dir, files, 64);
}

/* ---- writer ------------------------------------------------------------------------------ */

START_TEST(records_have_the_format)
{
    const char *d = tdir("format");
    struct al_auditlog *l = open_log(d, NULL);
    append_n(l, 10, 0);
    json_t *empty = json_object();
    ck_assert_int_eq(al_auditlog_append(l, empty, NULL), 0);
    json_decref(empty);
    ck_assert_int_eq(al_auditlog_close(l), 0);

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

START_TEST(rotation_by_age)
{
    const char *d = tdir("rotage");
    struct al_auditlog_opts o = {.rotate_interval_ms = 300};
    struct al_auditlog *l = open_log(d, &o);
    append_n(l, 3, 0);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    usleep(450000);
    append_n(l, 3, 10); /* these go to a new file (the writer may have started it already) */
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[8][600];
    size_t n = log_files(d, files, 8);
    ck_assert_uint_ge(n, 2);
    struct lines L;
    lines_load(files[0], &L);
    ck_assert_uint_eq(L.n, 1 + 3 + 1); /* start checkpoint, the first three, the seal */
    ck_assert_ptr_nonnull(strstr(L.v[4], "\"reason\":\"seal\""));
    lines_free(&L);
    for (size_t i = 1; i < n; i++) {
        lines_load(files[i], &L);
        ck_assert_ptr_nonnull(strstr(L.v[0], "\"reason\":\"rotate\""));
        lines_free(&L);
    }
    expect_intact(d);
}
END_TEST

static size_t plain_index(struct lines *L);
static void expect_verdict(const char *d, const char *ckpt, enum al_auditlog_verdict v,
                           const char *path, uint64_t line, uint64_t seq);

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

/* Counts the lines of the log's files that contain needle. */
static size_t log_grep(const char *dir, const char *needle)
{
    char files[64][600];
    size_t n = log_files(dir, files, 64), hits = 0;
    for (size_t i = 0; i < n; i++) {
        struct lines L;
        lines_load(files[i], &L);
        for (size_t k = 0; k < L.n; k++)
            hits += strstr(L.v[k], needle) != NULL;
        lines_free(&L);
    }
    return hits;
}

/* The verification of a log that retention shortened: intact, starting where the retention
 * record says, with every deleted range named by its rule. */
static void expect_pruned(const char *d, const char *rule, struct al_auditlog_verify_result *r)
{
    verify_dir(d, NULL, r);
    al_auditlog_verify_print(r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r->verdict), "intact");
    ck_assert(!r->starts_at_genesis);
    ck_assert(r->start_anchored);
    ck_assert_uint_gt(r->retention_seq, 0);
    ck_assert_uint_eq(r->retained_from, r->first_seq);
    ck_assert_uint_ge(r->n_pruned, 1);
    ck_assert_uint_eq(r->pruned[0].first_seq, 1);
    ck_assert_uint_eq(r->pruned[r->n_pruned - 1].last_seq, r->first_seq - 1);
    bool named = false;
    for (size_t i = 0; i < r->n_pruned; i++)
        named = named || strcmp(r->pruned[i].rule, rule) == 0;
    ck_assert_msg(named, "no range deleted by %s", rule);
    /* The --json report says the same. */
    json_t *j = al_auditlog_verify_json(r);
    json_t *ret = json_object_get(j, "retention");
    ck_assert_int_eq(json_integer_value(json_object_get(ret, "retained_from")),
                     (json_int_t)r->first_seq);
    ck_assert_uint_eq(json_array_size(json_object_get(ret, "pruned")), r->n_pruned);
    json_decref(j);
}

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

/* A log that retention shortened, closed: returns its files. */
static size_t make_pruned_log(const char *d, char files[][600])
{
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_files = 5, .checkpoint_records = 25};
    struct al_auditlog *l = open_log(d, &o);
    for (int round = 0; round < 6; round++) {
        append_n(l, 100, round * 100);
        ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    }
    ck_assert_int_eq(al_auditlog_close(l), 0);
    size_t n = log_files(d, files, 64);
    ck_assert_uint_ge(n, 4);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_files", &r);
    return n;
}

START_TEST(tamper_after_pruning_edited)
{
    const char *d = tdir("t-pruned-edit");
    char files[64][600];
    size_t n = make_pruned_log(d, files);
    struct lines L;
    lines_load(files[n / 2], &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i]);
    strstr(L.v[i], "api.example.com")[0] = 'A';
    lines_save(files[n / 2], &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_EDITED, files[n / 2], i + 1, seq);
}
END_TEST

START_TEST(tamper_after_pruning_middle_file_deleted)
{
    const char *d = tdir("t-pruned-mid");
    char files[64][600];
    size_t n = make_pruned_log(d, files);
    ck_assert_int_eq(unlink(files[n / 2]), 0);
    expect_verdict(d, NULL, AL_AUDIT_MISSING_FILE, files[n / 2 + 1], 1, 0);
}
END_TEST

START_TEST(tamper_oldest_file_deleted_outside_retention)
{
    const char *d = tdir("t-pruned-old");
    char files[64][600];
    make_pruned_log(d, files);
    /* the oldest retained file deleted by hand: the start no longer matches retention's */
    ck_assert_int_eq(unlink(files[0]), 0);
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    al_auditlog_verify_print(&r, stderr);
    ck_assert_int_eq(r.verdict, AL_AUDIT_REMOVED);
    ck_assert_ptr_nonnull(strstr(r.reason, "deleted outside retention"));
    /* a writer that starts on it says so in its next retention record, and verification
     * keeps reporting it */
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_files = 5};
    struct al_auditlog *l = open_log(d, &o);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    ck_assert_uint_ge(log_grep(d, "\"rule\":\"unaccounted\""), 1);
    verify_dir(d, NULL, &r);
    al_auditlog_verify_print(&r, stderr);
    ck_assert_int_eq(r.verdict, AL_AUDIT_REMOVED);
    ck_assert_ptr_nonnull(strstr(r.reason, "not by retention"));
}
END_TEST

START_TEST(tamper_seal_cut)
{
    const char *d = tdir("t-seal");
    make_log(d, 300);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    struct lines L;
    lines_load(files[1], &L);
    free(L.v[L.n - 1]);
    L.v[L.n - 1] = NULL;
    lines_save(files[1], &L);
    lines_free(&L);
    ck_assert_uint_ge(n, 3);
    expect_verdict(d, NULL, AL_AUDIT_TRUNCATED, files[1], 0, 0);
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

/* ---- tampering ------------------------------------------------------------------------------ */

/* Loads the middle file of a multi-file log. */
static void middle(const char *d, char *path, struct lines *L)
{
    char files[64][600];
    size_t n = log_files(d, files, 64);
    ck_assert_uint_ge(n, 3);
    snprintf(path, 600, "%s", files[n / 2]);
    lines_load(path, L);
    ck_assert_uint_ge(L->n, 10);
}

static void expect_verdict(const char *d, const char *ckpt, enum al_auditlog_verdict v,
                           const char *path, uint64_t line, uint64_t seq)
{
    struct al_auditlog_verify_result r;
    verify_dir(d, ckpt, &r);
    al_auditlog_verify_print(&r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r.verdict), al_auditlog_verdict_name(v));
    if (path)
        ck_assert_str_eq(r.file, path);
    if (line)
        ck_assert_uint_eq(r.line, line);
    if (seq)
        ck_assert_uint_eq(r.seq, seq);
    ck_assert(strlen(r.reason) > 20);
}

/* Index of an ordinary (non-checkpoint) record with ordinary neighbours. */
static size_t plain_index(struct lines *L)
{
    for (size_t i = 3; i + 2 < L->n; i++) {
        if (!line_is_ckpt(L->v[i - 1]) && !line_is_ckpt(L->v[i]) && !line_is_ckpt(L->v[i + 1]) &&
            !line_is_ckpt(L->v[i + 2]))
            return i;
    }
    ck_abort_msg("no plain record");
    return 0;
}

START_TEST(tamper_edited)
{
    const char *d = tdir("t-edit");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i]);
    char *h = strstr(L.v[i], "api.example.com");
    h[0] = 'A'; /* one byte */
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_EDITED, p, i + 1, seq);
}
END_TEST

START_TEST(tamper_edited_prev_field)
{
    const char *d = tdir("t-editprev");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i]);
    char *h = strstr(L.v[i], "\"prev\":\"") + 8;
    h[5] = h[5] == 'a' ? 'b' : 'a';
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_EDITED, p, i + 1, seq);
}
END_TEST

START_TEST(tamper_removed)
{
    const char *d = tdir("t-remove");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i]);
    free(L.v[i]);
    L.v[i] = NULL;
    lines_save(p, &L);
    lines_free(&L);
    /* named: the record after the hole, and the missing seq */
    expect_verdict(d, NULL, AL_AUDIT_REMOVED, p, i + 1, seq);
}
END_TEST

START_TEST(tamper_reordered)
{
    const char *d = tdir("t-reorder");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i + 1]);
    char *t = L.v[i];
    L.v[i] = L.v[i + 1];
    L.v[i + 1] = t;
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_REORDERED, p, i + 1, seq);
}
END_TEST

START_TEST(tamper_inserted_copy)
{
    const char *d = tdir("t-dup");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    uint64_t seq = line_seq(L.v[i - 2]);
    /* replay an earlier record after record i */
    size_t len = strlen(L.v[i]) + strlen(L.v[i - 2]) + 2;
    char *both = malloc(len);
    snprintf(both, len, "%s\n%s", L.v[i], L.v[i - 2]);
    free(L.v[i]);
    L.v[i] = both;
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_INSERTED, p, i + 2, seq);
}
END_TEST

START_TEST(tamper_inserted_forged)
{
    const char *d = tdir("t-forge");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    /* a fabricated record that takes the next seq and even chains correctly to record i */
    json_t *prev = json_loads(L.v[i], 0, NULL);
    unsigned char h[32];
    char hex[65];
    crypto_generichash(h, 32, (unsigned char *)L.v[i], strlen(L.v[i]), NULL, 0);
    sodium_bin2hex(hex, sizeof hex, h, 32);
    json_t *fake = json_pack(
        "{s:I,s:s,s:s,s:s,s:s}", "seq", json_integer_value(json_object_get(prev, "seq")) + 1,
        "time", "2026-01-01T00:00:00.000000Z", "log_id",
        json_string_value(json_object_get(prev, "log_id")), "prev", hex, "event", "nothing to see");
    char *fs = json_dumps(fake, JSON_COMPACT | JSON_PRESERVE_ORDER);
    uint64_t seq = line_seq(fs);
    size_t len = strlen(L.v[i]) + strlen(fs) + 2;
    char *both = malloc(len);
    snprintf(both, len, "%s\n%s", L.v[i], fs);
    free(L.v[i]);
    L.v[i] = both;
    lines_save(p, &L);
    lines_free(&L);
    free(fs);
    json_decref(fake);
    json_decref(prev);
    expect_verdict(d, NULL, AL_AUDIT_INSERTED, p, i + 2, seq);
}
END_TEST

START_TEST(tamper_foreign_record)
{
    const char *d = tdir("t-foreign");
    make_log(d, 300);
    const char *d2 = tdir("t-foreign-other");
    make_log(d2, 20);
    char files2[8][600];
    log_files(d2, files2, 8);
    struct lines O;
    lines_load(files2[0], &O);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    free(L.v[i]);
    L.v[i] = strdup(O.v[3]);
    lines_save(p, &L);
    lines_free(&L);
    lines_free(&O);
    expect_verdict(d, NULL, AL_AUDIT_INSERTED, p, i + 1, 0);
}
END_TEST

START_TEST(tamper_bad_signature)
{
    const char *d = tdir("t-sig");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = 1;
    while (i < L.n && !line_is_ckpt(L.v[i]))
        i++;
    ck_assert_uint_lt(i, L.n);
    uint64_t seq = line_seq(L.v[i]);
    char *s = strstr(L.v[i], "\"sig\":\"") + 7;
    s[10] = s[10] == '0' ? '1' : '0';
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_BAD_SIGNATURE, p, i + 1, seq);
}
END_TEST

START_TEST(tamper_rechained_is_caught_by_the_signature)
{
    const char *d = tdir("t-rechain");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    /* edit a record and recompute every later prev in the file, as an attacker without
     * the signing key would: the next checkpoint's signature no longer verifies */
    size_t i = plain_index(&L);
    char *h = strstr(L.v[i], "api.example.com");
    h[0] = 'X';
    size_t ck = 0;
    for (size_t k = i + 1; k < L.n; k++) {
        unsigned char hb[32];
        char hex[65];
        crypto_generichash(hb, 32, (unsigned char *)L.v[k - 1], strlen(L.v[k - 1]), NULL, 0);
        sodium_bin2hex(hex, sizeof hex, hb, 32);
        memcpy(strstr(L.v[k], "\"prev\":\"") + 8, hex, 64);
        if (!ck && line_is_ckpt(L.v[k]))
            ck = k;
    }
    ck_assert_uint_gt(ck, 0);
    uint64_t seq = line_seq(L.v[ck]);
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_BAD_SIGNATURE, p, ck + 1, seq);
}
END_TEST

START_TEST(tamper_missing_file)
{
    const char *d = tdir("t-missing");
    make_log(d, 300);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    ck_assert_int_eq(unlink(files[n / 2]), 0);
    expect_verdict(d, NULL, AL_AUDIT_MISSING_FILE, files[n / 2 + 1], 1, 0);
}
END_TEST

START_TEST(tamper_malformed_line)
{
    const char *d = tdir("t-garbage");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    size_t i = plain_index(&L);
    free(L.v[i]);
    L.v[i] = strdup("this is not json");
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_MALFORMED, p, i + 1, 0);
}
END_TEST

START_TEST(tamper_truncated)
{
    const char *d = tdir("t-trunc");
    make_log(d, 300);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s/test.checkpoints", d);
    /* cut the last file cleanly at a line boundary before its last checkpoints */
    struct lines L;
    lines_load(files[n - 1], &L);
    size_t keep = 2;
    for (size_t k = keep; k < L.n; k++) {
        free(L.v[k]);
        L.v[k] = NULL;
    }
    lines_save(files[n - 1], &L);
    lines_free(&L);
    /* without the shipped checkpoints a clean cut is indistinguishable from the end ... */
    struct al_auditlog_verify_result r;
    verify_dir(d, NULL, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_gt(r.unsigned_tail, 0); /* ... but the tail is no longer signed */
    /* ... with them it is truncation */
    expect_verdict(d, ckpt, AL_AUDIT_TRUNCATED, NULL, 0, 0);

    /* the writer refuses to write a second history over the gap */
    struct al_auditlog_opts o = {.dir = d, .prefix = "test"};
    struct al_auditlog *l;
    struct al_error e = {0};
    ck_assert_int_eq(al_auditlog_open(&o, &l, &e), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(e.msg, "restore them"));
}
END_TEST

START_TEST(tamper_cut_inside_a_middle_file)
{
    const char *d = tdir("t-cutmid");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    /* drop the newline and half of the last record of a middle file */
    size_t last = L.n - 1;
    L.tail = realloc(L.tail, strlen(L.v[last]) + 1);
    L.v[last][strlen(L.v[last]) / 2] = '\0';
    strcpy(L.tail, L.v[last]);
    free(L.v[last]);
    L.v[last] = NULL;
    lines_save(p, &L);
    lines_free(&L);
    expect_verdict(d, NULL, AL_AUDIT_TRUNCATED, p, 0, 0);
}
END_TEST

START_TEST(tamper_rewritten_history_vs_checkpoint_file)
{
    const char *d = tdir("t-rewrite");
    make_log(d, 300);
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s/test.checkpoints", d);
    struct al_auditlog_verify_result r;
    verify_dir(d, ckpt, &r);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    ck_assert_uint_gt(r.external_checkpoints, 5);
    /* a tampered copy of a checkpoint in the shipped file is itself detected */
    struct lines L;
    lines_load(ckpt, &L);
    char *s = strstr(L.v[2], "\"sig\":\"") + 7;
    s[3] = s[3] == 'a' ? 'b' : 'a';
    lines_save(ckpt, &L);
    lines_free(&L);
    expect_verdict(d, ckpt, AL_AUDIT_BAD_SIGNATURE, ckpt, 3, 0);
}
END_TEST

START_TEST(wrong_public_key)
{
    const char *d = tdir("t-key");
    make_log(d, 30);
    const char *d2 = tdir("t-key-other");
    make_log(d2, 3);
    char pub[600];
    snprintf(pub, sizeof pub, "%s/test.pub", d2);
    struct al_auditlog_verify_opts o = {.dir = d, .prefix = "test", .pubkey_file = pub};
    struct al_auditlog_verify_result r;
    ck_assert_int_eq(al_auditlog_verify(&o, &r, NULL), 0);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INSERTED);
    ck_assert_ptr_nonnull(strstr(r.reason, "wrong public key"));
    json_t *j = al_auditlog_verify_json(&r);
    ck_assert(!json_is_true(json_object_get(j, "intact")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "verdict")), "inserted");
    json_decref(j);
    o.pubkey_file = "/nonexistent/x.pub";
    struct al_error e = {0};
    ck_assert_int_lt(al_auditlog_verify(&o, &r, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "public key"));
}
END_TEST

START_TEST(verify_explicit_files)
{
    const char *d = tdir("explicit");
    make_log(d, 200);
    char files[64][600];
    size_t n = log_files(d, files, 64);
    const char *list[64];
    for (size_t i = 0; i < n; i++)
        list[n - 1 - i] = files[i]; /* any order: sorted by the seq in the names */
    char pub[600];
    snprintf(pub, sizeof pub, "%s/test.pub", d);
    struct al_auditlog_verify_opts o = {.files = list, .n_files = n, .pubkey_file = pub};
    struct al_auditlog_verify_result r;
    ck_assert_int_eq(al_auditlog_verify(&o, &r, NULL), 0);
    ck_assert_int_eq(r.verdict, AL_AUDIT_INTACT);
    /* leaving a file out of the list is a missing file */
    const char *some[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i != 1)
            some[k++] = files[i];
    }
    o.files = some;
    o.n_files = k;
    ck_assert_int_eq(al_auditlog_verify(&o, &r, NULL), 0);
    ck_assert_int_eq(r.verdict, AL_AUDIT_MISSING_FILE);
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

/* ---- reader -------------------------------------------------------------------------------- */

START_TEST(reader_reads_in_order_across_files)
{
    const char *d = tdir("reader");
    make_log(d, 200);
    struct al_auditlog_reader_opts o = {.dir = d, .prefix = "test"};
    struct al_auditlog_reader *rd;
    ck_assert_int_eq(al_auditlog_reader_open(&o, &rd, NULL), 0);
    struct al_auditlog_record rec;
    uint64_t expect = 1, internal = 0;
    int rc;
    while ((rc = al_auditlog_reader_next(rd, &rec)) == 1) {
        ck_assert_uint_eq(rec.seq, expect++);
        ck_assert_ptr_nonnull(rec.json);
        internal += rec.internal;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_gt(internal, 5);

    ck_assert_int_eq(al_auditlog_reader_seek_seq(rd, 150), 0);
    ck_assert_int_eq(al_auditlog_reader_next(rd, &rec), 1);
    ck_assert_uint_eq(rec.seq, 150);
    ck_assert_int_eq(al_auditlog_reader_next(rd, &rec), 1);
    ck_assert_uint_eq(rec.seq, 151);

    ck_assert_int_eq(al_auditlog_reader_seek_tail(rd, 5), 0);
    int cnt = 0;
    while (al_auditlog_reader_next(rd, &rec) == 1) {
        ck_assert_uint_eq(rec.seq, expect - 5 + (uint64_t)cnt);
        cnt++;
    }
    ck_assert_int_eq(cnt, 5);
    /* more than there is: everything */
    ck_assert_int_eq(al_auditlog_reader_seek_tail(rd, 100000), 0);
    ck_assert_int_eq(al_auditlog_reader_next(rd, &rec), 1);
    ck_assert_uint_eq(rec.seq, 1);
    al_auditlog_reader_close(rd);
}
END_TEST

START_TEST(reader_follows_appends_and_rotation)
{
    const char *d = tdir("follow");
    struct al_auditlog_opts wo = {.rotate_bytes = 4096};
    struct al_auditlog *l = open_log(d, &wo);
    append_n(l, 3, 0);
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    struct al_auditlog_reader_opts o = {.dir = d, .prefix = "test", .follow = true};
    struct al_auditlog_reader *rd;
    ck_assert_int_eq(al_auditlog_reader_open(&o, &rd, NULL), 0);
    ck_assert_int_ge(al_auditlog_reader_fd(rd), 0);
    struct al_auditlog_record rec;
    uint64_t seen = 0;
    while (al_auditlog_reader_next(rd, &rec) == 1)
        seen = rec.seq;
    ck_assert_uint_eq(seen, 4);
    append_n(l, 200, 10); /* several rotations */
    ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    struct al_auditlog_stats st;
    al_auditlog_get_stats(l, &st);
    ck_assert_uint_gt(st.rotations, 2);
    uint64_t last = st.next_seq - 1;
    for (int i = 0; i < 50 && seen < last; i++) {
        al_auditlog_reader_wait(rd, 100);
        while (al_auditlog_reader_next(rd, &rec) == 1) {
            ck_assert_uint_eq(rec.seq, seen + 1);
            seen = rec.seq;
        }
    }
    ck_assert_uint_eq(seen, last);
    al_auditlog_reader_close(rd);
    ck_assert_int_eq(al_auditlog_close(l), 0);
}
END_TEST

/* ---- redaction helpers ---------------------------------------------------------------------- */

START_TEST(redaction_helpers)
{
    char out[256];
    al_audit_redact_path("/v1/items?token=abc#frag", out, sizeof out);
    ck_assert_str_eq(out, "/v1/items");
    al_audit_redact_path("http://user:pw@example.com/a/b?x=1", out, sizeof out);
    ck_assert_str_eq(out, "/a/b");
    al_audit_redact_path("https://example.com", out, sizeof out);
    ck_assert_str_eq(out, "/");
    al_audit_redact_path("?only", out, sizeof out);
    ck_assert_str_eq(out, "/");

    unsigned char k1[32] = {1}, k2[32] = {2};
    char a[AL_AUDIT_KEYED_ID_LEN + 1], b[AL_AUDIT_KEYED_ID_LEN + 1], c[AL_AUDIT_KEYED_ID_LEN + 1];
    al_audit_keyed_id(k1, "ghp_secret", 10, a);
    al_audit_keyed_id(k1, "ghp_secret", 10, b);
    al_audit_keyed_id(k2, "ghp_secret", 10, c);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
    ck_assert_int_eq(strlen(a), AL_AUDIT_KEYED_ID_LEN);
    ck_assert(strncmp(a, "b2k:", 4) == 0);

    const char *secret = "ghp_0123456789abcdefXYZ";
    size_t sl = strlen(secret);
    char line[512];
    snprintf(line, sizeof line, "{\"h\":\"Bearer %s\"}", secret);
    ck_assert(al_audit_line_contains_secret(line, strlen(line), secret, sl));
    char hex[128];
    sodium_bin2hex(hex, sizeof hex, (const unsigned char *)secret, sl);
    snprintf(line, sizeof line, "{\"h\":\"%s\"}", hex);
    ck_assert(al_audit_line_contains_secret(line, strlen(line), secret, sl));
    for (int shift = 0; shift < 3; shift++) {
        char pre[64];
        snprintf(pre, sizeof pre, "%.*s%s", shift, "ab", secret);
        char b64[128];
        sodium_bin2base64(b64, sizeof b64, (const unsigned char *)pre, strlen(pre),
                          sodium_base64_VARIANT_ORIGINAL);
        snprintf(line, sizeof line, "{\"auth\":\"Basic %s\"}", b64);
        ck_assert_msg(al_audit_line_contains_secret(line, strlen(line), secret, sl),
                      "base64 at shift %d", shift);
    }
    snprintf(line, sizeof line, "{\"secret_id\":\"%s\"}", a);
    ck_assert(!al_audit_line_contains_secret(line, strlen(line), secret, sl));
}
END_TEST

static Suite *auditlog_suite(void)
{
    Suite *s = suite_create("auditlog");
    TCase *w = tcase_create("writer");
    tcase_add_unchecked_fixture(w, root_setup, root_teardown);
    tcase_set_timeout(w, 60);
    tcase_add_test(w, records_have_the_format);
    tcase_add_test(w, bad_appends_are_refused);
    tcase_add_test(w, raw_appends);
    tcase_add_test(w, reopen_continues_the_chain);
    tcase_add_test(w, one_writer_at_a_time);
    tcase_add_test(w, key_problems_are_explained);
    tcase_add_test(w, checkpoints_by_count_and_time);
    tcase_add_test(w, group_commit_makes_records_durable);
    tcase_add_test(w, rotation_keeps_the_chain);
    tcase_add_test(w, rotation_by_age);
    tcase_add_test(w, rotation_seals_every_file);
    tcase_add_test(w, retention_keeps_a_verifiable_suffix);
    tcase_add_test(w, retention_by_size_bounds_the_disk);
    tcase_add_test(w, retention_by_age);
    tcase_add_test(w, pruned_files_restored_from_a_backup);
    tcase_add_test(w, pending_limit_fails_closed);
    tcase_add_test(w, full_disk_fails_closed_and_recovers);
    suite_add_tcase(s, w);

    TCase *c = tcase_create("crash");
    tcase_add_unchecked_fixture(c, root_setup, root_teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, torn_tail_is_truncation_not_corruption);
    tcase_add_test(c, file_holding_only_a_torn_line);
    tcase_add_test(c, sigkill_while_appending);
    suite_add_tcase(s, c);

    TCase *t = tcase_create("tamper");
    tcase_add_unchecked_fixture(t, root_setup, root_teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, tamper_edited);
    tcase_add_test(t, tamper_edited_prev_field);
    tcase_add_test(t, tamper_removed);
    tcase_add_test(t, tamper_reordered);
    tcase_add_test(t, tamper_inserted_copy);
    tcase_add_test(t, tamper_inserted_forged);
    tcase_add_test(t, tamper_foreign_record);
    tcase_add_test(t, tamper_bad_signature);
    tcase_add_test(t, tamper_rechained_is_caught_by_the_signature);
    tcase_add_test(t, tamper_missing_file);
    tcase_add_test(t, tamper_malformed_line);
    tcase_add_test(t, tamper_truncated);
    tcase_add_test(t, tamper_cut_inside_a_middle_file);
    tcase_add_test(t, tamper_seal_cut);
    tcase_add_test(t, tamper_after_pruning_edited);
    tcase_add_test(t, tamper_after_pruning_middle_file_deleted);
    tcase_add_test(t, tamper_oldest_file_deleted_outside_retention);
    tcase_add_test(t, tamper_rewritten_history_vs_checkpoint_file);
    tcase_add_test(t, wrong_public_key);
    tcase_add_test(t, verify_explicit_files);
    suite_add_tcase(s, t);

    TCase *r = tcase_create("reader");
    tcase_add_unchecked_fixture(r, root_setup, root_teardown);
    tcase_add_test(r, reader_reads_in_order_across_files);
    tcase_add_test(r, reader_follows_appends_and_rotation);
    tcase_add_test(r, redaction_helpers);
    suite_add_tcase(s, r);
    return s;
}

AL_SUITE_MAIN(auditlog_suite)
