/* tests/unit/common/test_auditlog_tamper: every kind of tampering an auditor cares about,
 * applied to a real log, and the verifier must name it: edited, removed, reordered, inserted,
 * foreign or re-signed records, missing and cut files, malformed lines, history rewritten
 * behind a checkpoint file, the wrong public key, tampering after retention pruned the log. */
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
#include <sodium.h>

#include "auditlog_fixture.h"
#include "common/auditlog_int.h"
#include "common/util.h"

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

/* A line jansson refuses only for what is deep inside it: a duplicate key in a nested object,
 * a NUL or a lone surrogate escaped, a number out of range. The verifier must call it
 * malformed (what it is), at its line, not read it quickly as an edited record. */
START_TEST(tamper_malformed_deep_inside)
{
    static const char *const bad[] = {
        "\"x\":{\"y\":1,\"y\":2},",
        "\"x\":\"\\u0000\",",
        "\"x\":\"\\ud800\",",
        "\"x\":1e999,",
        "\"x\":[1,],",
        "\"x\":01,",
        "\"x\":\"\x01\",",
        "\"x\":tru,",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "t-deep%zu", k);
        const char *d = tdir(name);
        make_log(d, 300);
        char p[600];
        struct lines L;
        middle(d, p, &L);
        size_t i = plain_index(&L);
        size_t n = strlen(L.v[i]) + strlen(bad[k]) + 1;
        char *e = malloc(n);
        ck_assert_ptr_nonnull(e);
        snprintf(e, n, "{%s%s", bad[k], L.v[i] + 1);
        free(L.v[i]);
        L.v[i] = e;
        lines_save(p, &L);
        lines_free(&L);
        expect_verdict(d, NULL, AL_AUDIT_MALFORMED, p, i + 1, 0);
    }
}
END_TEST

/* The quick read of records accepts only what jansson accepts, and reads the same fields:
 * a real record, then thousands of deterministic edits of it (bytes changed, inserted,
 * removed; members that test each rule of the subset). */
static void quick_vs_jansson(const char *line, size_t len, size_t *quick_ok)
{
    struct auditlog__quick q;
    if (auditlog__quick_fields(line, len, &q) != 0)
        return;
    (*quick_ok)++;
    json_t *j = json_loadb(line, len, AUDITLOG__JSON_FLAGS, NULL);
    ck_assert_msg(j != NULL, "quick read accepted what jansson refuses: %.*s", (int)len, line);
    struct auditlog__fields f;
    const char *why;
    ck_assert_int_eq(auditlog__fields(j, &f, &why), 0);
    ck_assert_ptr_null(f.internal);
    ck_assert_uint_eq(f.seq, q.seq);
    ck_assert_str_eq(f.time, q.time);
    ck_assert_str_eq(f.log_id, q.log_id);
    ck_assert_str_eq(f.prev, q.prev);
    const char *type = json_string_value(json_object_get(j, "type"));
    ck_assert_int_eq(q.has_type, type != NULL && strlen(type) < sizeof q.type);
    if (q.has_type)
        ck_assert_str_eq(q.type, type);
    json_decref(j);
}

START_TEST(quick_read_agrees_with_jansson)
{
    const char *d = tdir("t-quick");
    make_log(d, 300);
    char p[600];
    struct lines L;
    middle(d, p, &L);
    const char *rec = L.v[plain_index(&L)];
    size_t rl = strlen(rec), quick_ok = 0;
    struct auditlog__quick q;
    ck_assert_int_eq(auditlog__quick_fields(rec, rl, &q), 0); /* the writer's records: quick */
    ck_assert_int_eq(auditlog__quick_fields(L.v[0], strlen(L.v[0]), &q), -1); /* checkpoint */
    static const char *const ins[] = {
        " ",
        "\t",
        "\r",
        "\n",
        "\x7f",
        "\xc3\xa9",
        "\\u0000",
        "\\ud800",
        "\\u00e9",
        "\\\"",
        "\\/",
        "\\x",
        ",",
        "}",
        "]",
        "{",
        "[",
        "\"",
        ":",
        "0",
        "01",
        "-",
        "1.5",
        "1e5",
        "123456789012345678",
        "1234567890123456789",
        "true",
        "nul",
        "\"seq\":3,",
        "\"type\":\"aggregate\",",
        "\"a\":1,\"a\":2,",
        "\"t\\u0079pe\":\"x\",",
        "\"auditlog\":{},",
        "\"x\":[1,{\"y\":1,\"y\":2}],",
        "\"x\":[[[[]]]],",
    };
    char *buf = malloc(rl + 64);
    ck_assert_ptr_nonnull(buf);
    uint32_t r = 12345;
    for (int it = 0; it < 20000; it++) {
        r = r * 1103515245u + 12345u;
        size_t at = (r >> 8) % (rl + 1), n = rl;
        memcpy(buf, rec, rl);
        switch (it % 4) {
        case 0: { /* a piece inserted anywhere, or as the first member */
            const char *x = ins[(r >> 4) % (sizeof ins / sizeof ins[0])];
            size_t xl = strlen(x);
            if (it % 8 == 4)
                at = 1;
            memmove(buf + at + xl, buf + at, rl - at);
            memcpy(buf + at, x, xl);
            n = rl + xl;
            break;
        }
        case 1: /* a byte changed */
            if (at < rl)
                buf[at] = (char)(r >> 20);
            break;
        case 2: { /* a few bytes removed */
            size_t k = 1 + (r >> 3) % 6;
            if (at + k > rl)
                k = rl - at;
            memmove(buf + at, buf + at + k, rl - at - k);
            n = rl - k;
            break;
        }
        default: /* cut short, or something after it */
            if (it % 8 == 3)
                n = at;
            else
                buf[n++] = " x}"[(r >> 5) % 3];
        }
        quick_vs_jansson(buf, n, &quick_ok);
    }
    /* The edits that keep it a record (inside strings, members added) are read quickly. */
    ck_assert_uint_gt(quick_ok, 1000);
    free(buf);
    lines_free(&L);
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
    make_log(d, 300);
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

static Suite *suite(void)
{
    Suite *s = suite_create("auditlog_tamper");
    TCase *t = auditlog_tcase("tamper");
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
    tcase_add_test(t, tamper_malformed_deep_inside);
    tcase_add_test(t, quick_read_agrees_with_jansson);
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
    return s;
}

AL_SUITE_MAIN(suite)
