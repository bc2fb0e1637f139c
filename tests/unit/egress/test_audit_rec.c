/* tests/unit/egress/test_audit_rec: the record writer of the per-request paths (egress_recw)
 * writes exactly the bytes that the json_t helpers and jansson's compact dump write for the
 * same record, whatever the strings hold (controls, quotes, invalid UTF-8, NULs, too long). */
#include "al_test.h"
#include "egress/audit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Strings that exercise every branch: mostly ASCII, some controls, quotes, backslashes,
 * valid multi-byte sequences, invalid bytes, NULs; lengths around the cut. */
static size_t random_string(char *out, size_t max)
{
    static const char *pieces[] = {"\"",
                                   "\\",
                                   "\b",
                                   "\f",
                                   "\n",
                                   "\r",
                                   "\t",
                                   "\x01",
                                   "\x1f",
                                   "\x7f",
                                   "\xc3\xa9",
                                   "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80",
                                   "\xff",
                                   "\xc3",
                                   "\xed\xa0\x80",
                                   "",
                                   "/",
                                   "a",
                                   "Z",
                                   " "};
    size_t n = 0;
    size_t want = next() % 4 == 0 ? next() % (EGRESS_REC_STR_MAX + 40) : next() % 40;
    while (n < want && n < max - 4) {
        if (next() % 3 == 0) {
            const char *p = pieces[next() % (sizeof pieces / sizeof pieces[0])];
            size_t l = p[0] ? strlen(p) : 1; /* "" stands for a NUL byte */
            memcpy(out + n, p, l);
            n += l;
        } else {
            out[n++] = (char)(' ' + next() % 95);
        }
    }
    return n;
}

static void same(json_t *j, struct egress_recw *w)
{
    char *want = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    const char *got;
    size_t len;
    ck_assert_int_eq(egress_recw_end(w, &got, &len), 0);
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_int_eq(memcmp(got, want, len), 0);
    free(want);
    egress_recw_free(w);
    json_decref(j);
}

START_TEST(strings_match_jansson)
{
    static char buf[4 * EGRESS_REC_STR_MAX];
    for (int i = 0; i < 3000; i++) {
        size_t n = random_string(buf, sizeof buf);
        json_t *j = egress_rec_new("t");
        egress_rec_strn(j, "v", buf, n);
        struct egress_recw w;
        egress_recw_begin(&w, "t");
        egress_recw_strn(&w, "v", buf, n);
        same(j, &w);
    }
}
END_TEST

START_TEST(records_match_jansson)
{
    static char a[4 * EGRESS_REC_STR_MAX], b[4 * EGRESS_REC_STR_MAX];
    for (int i = 0; i < 500; i++) {
        size_t na = random_string(a, sizeof a), nb = random_string(b, sizeof b);
        int64_t iv = (int64_t)((uint64_t)next() << 32 | next());
        json_t *j = egress_rec_new("http_request");
        struct egress_recw w;
        egress_recw_begin(&w, "http_request");

        egress_rec_str(j, "sandbox", "sb-1");
        egress_recw_str(&w, "sandbox", "sb-1");
        egress_rec_str(j, "template", NULL);
        egress_recw_str(&w, "template", NULL);
        json_t *po = json_object();
        egress_rec_strn(po, "name", a, na);
        egress_rec_str(po, "hash", "00ff");
        json_object_set_new(j, "policy", po);
        egress_recw_obj_begin(&w, "policy");
        egress_recw_strn(&w, "name", a, na);
        egress_recw_str(&w, "hash", "00ff");
        egress_recw_close(&w, '}');
        json_object_set_new(j, "nothing", json_null());
        egress_recw_null(&w, "nothing");
        egress_rec_int(j, "i", iv);
        egress_recw_int(&w, "i", iv);
        egress_rec_int(j, "min", INT64_MIN);
        egress_recw_int(&w, "min", INT64_MIN);
        egress_rec_int(j, "zero", 0);
        egress_recw_int(&w, "zero", 0);
        egress_rec_bool(j, "yes", true);
        egress_recw_bool(&w, "yes", true);
        egress_rec_bool(j, "no", false);
        egress_recw_bool(&w, "no", false);
        json_t *arr = json_array();
        json_array_append_new(arr, egress_json_str(b, nb));
        json_array_append_new(arr, egress_json_str("h2", 2));
        json_object_set_new(j, "alpn", arr);
        egress_recw_arr_begin(&w, "alpn");
        egress_recw_elem_strn(&w, b, nb);
        egress_recw_elem_strn(&w, "h2", 2);
        egress_recw_close(&w, ']');
        json_object_set_new(j, "empty", json_array());
        egress_recw_arr_begin(&w, "empty");
        egress_recw_close(&w, ']');
        json_t *tm = json_object();
        egress_rec_us(tm, "decide", 123456789);
        json_object_set_new(j, "timing_us", tm);
        egress_recw_obj_begin(&w, "timing_us");
        egress_recw_us(&w, "decide", 123456789);
        egress_recw_close(&w, '}');
        same(j, &w);
    }
}
END_TEST

START_TEST(large_records_grow_and_stay_exact)
{
    /* Far beyond the stack buffer: the writer moves to the heap, the bytes stay the same. */
    static char s[EGRESS_REC_STR_MAX];
    for (size_t i = 0; i < sizeof s; i++)
        s[i] = (char)(i % 32); /* controls: six bytes each once escaped */
    json_t *j = egress_rec_new("big");
    struct egress_recw w;
    egress_recw_begin(&w, "big");
    char key[16];
    for (int k = 0; k < 8; k++) {
        snprintf(key, sizeof key, "k%d", k);
        egress_rec_strn(j, key, s, sizeof s);
        egress_recw_strn(&w, key, s, sizeof s);
    }
    ck_assert(w.heap);
    same(j, &w);
}
END_TEST

START_TEST(cached_members_are_the_same_bytes)
{
    /* What http.c does: members serialised once (egress_recw_members), written again into
     * later records (egress_recw_raw), give the bytes of writing them each time. */
    struct egress_recw t;
    egress_recw_begin(&t, "");
    egress_recw_str(&t, "sandbox", "sb-\x01\"x");
    egress_recw_null(&t, "template");
    egress_recw_obj_begin(&t, "policy");
    egress_recw_str(&t, "name", "p");
    egress_recw_close(&t, '}');
    size_t n;
    const char *m = egress_recw_members(&t, &n);
    ck_assert_ptr_nonnull(m);
    char cache[256];
    ck_assert_uint_lt(n, sizeof cache);
    memcpy(cache, m, n);
    egress_recw_free(&t);

    struct egress_recw a, b;
    egress_recw_begin(&a, "http_request");
    egress_recw_raw(&a, cache, n);
    egress_recw_str(&a, "request_id", "r-1");
    egress_recw_begin(&b, "http_request");
    egress_recw_str(&b, "sandbox", "sb-\x01\"x");
    egress_recw_null(&b, "template");
    egress_recw_obj_begin(&b, "policy");
    egress_recw_str(&b, "name", "p");
    egress_recw_close(&b, '}');
    egress_recw_str(&b, "request_id", "r-1");
    const char *oa, *ob;
    size_t la, lb;
    ck_assert_int_eq(egress_recw_end(&a, &oa, &la), 0);
    ck_assert_int_eq(egress_recw_end(&b, &ob, &lb), 0);
    ck_assert_uint_eq(la, lb);
    ck_assert_int_eq(memcmp(oa, ob, la), 0);
    egress_recw_free(&a);
    egress_recw_free(&b);
}
END_TEST

START_TEST(unbalanced_nesting_is_refused)
{
    struct egress_recw w;
    egress_recw_begin(&w, "x");
    egress_recw_obj_begin(&w, "open");
    const char *out;
    size_t len;
    ck_assert_int_lt(egress_recw_end(&w, &out, &len), 0);
    egress_recw_free(&w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("audit_rec");
    TCase *t = tcase_create("audit_rec");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, strings_match_jansson);
    tcase_add_test(t, records_match_jansson);
    tcase_add_test(t, large_records_grow_and_stay_exact);
    tcase_add_test(t, cached_members_are_the_same_bytes);
    tcase_add_test(t, unbalanced_nesting_is_refused);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
