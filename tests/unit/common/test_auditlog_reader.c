/* tests/unit/common/test_auditlog_reader: the reader (in order across files, following appends
 * and rotation) and the redaction helpers. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>

#include "auditlog_fixture.h"
#include "common/util.h"

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

static Suite *suite(void)
{
    Suite *s = suite_create("auditlog_reader");
    TCase *t = auditlog_tcase("reader");
    tcase_add_test(t, reader_reads_in_order_across_files);
    tcase_add_test(t, reader_follows_appends_and_rotation);
    tcase_add_test(t, redaction_helpers);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
