/* Unit tests: common/ basics (error, buf, json, util, percent, log) and confine's no-dumps hardening. */
#include "al_test.h"
#include "common/buf.h"
#include "common/confine.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/percent.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

START_TEST(error_set_and_prefix)
{
    struct al_error e = {0};
    ck_assert_int_eq(al_error_set(&e, -EINVAL, "port %d out of range", 70000), -EINVAL);
    ck_assert_str_eq(e.msg, "port 70000 out of range");
    al_error_prefix(&e, "policy %s", "x.yaml");
    ck_assert_str_eq(al_error_str(&e), "policy x.yaml: port 70000 out of range");
    ck_assert_int_eq(al_error_set(NULL, -ENOENT, "ignored"), -ENOENT);
    al_error_clear(&e);
    e.code = -ENOENT;
    ck_assert_str_eq(al_error_str(&e), strerror(ENOENT));
}
END_TEST

START_TEST(buf_cap_is_enforced)
{
    struct al_buf b;
    al_buf_init(&b, 8);
    ck_assert_int_eq(al_buf_appends(&b, "12345"), 0);
    ck_assert_int_eq(al_buf_appends(&b, "6789"), -E2BIG);
    ck_assert_uint_eq(b.len, 5); /* unchanged after a refused append */
    ck_assert_str_eq(b.data, "12345");
    ck_assert_int_eq(al_buf_printf(&b, "%d", 678), 0);
    ck_assert_str_eq(b.data, "12345678");
    al_buf_consume(&b, 3);
    ck_assert_str_eq(b.data, "45678");
    al_buf_free_wipe(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(json_escape_controls_and_bad_utf8)
{
    char out[64];
    al_json_escape("a\"b\\c\n\x01\xff\xc3\xa9", out, sizeof out);
    ck_assert_str_eq(out, "a\\\"b\\\\c\\n\\u0001\\ufffd\xc3\xa9");
    /* truncation never splits an escape */
    char small[5];
    al_json_escape("\"\"\"", small, sizeof small);
    ck_assert_str_eq(small, "\\\"\\\"");
}
END_TEST

/* Random values for the serialiser: every type, strings of every byte class (valid UTF-8,
 * since jansson refuses anything else), keys likewise, nesting. */
static uint64_t json_rng = 0x2545f4914f6cdd1dull;

static uint32_t json_next(void)
{
    json_rng ^= json_rng << 13;
    json_rng ^= json_rng >> 7;
    json_rng ^= json_rng << 17;
    return (uint32_t)json_rng;
}

static size_t json_random_text(char *out, size_t max)
{
    static const char *pieces[] = {
        "\"",   "\\",   "\b",   "\f", "\n",       "\r",           "\t",
        "\x01", "\x1f", "\x7f", "/",  "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "",     "a",    " "};
    size_t n = 0, want = json_next() % 40;
    while (n < want && n + 4 < max) {
        if (json_next() % 3 == 0) {
            const char *p = pieces[json_next() % (sizeof pieces / sizeof pieces[0])];
            size_t l = p[0] ? strlen(p) : 1; /* "" stands for a NUL byte */
            memcpy(out + n, p, l);
            n += l;
        } else {
            out[n++] = (char)(' ' + json_next() % 95);
        }
    }
    return n;
}

static json_t *json_random(int depth)
{
    char t[256];
    switch (json_next() % (depth > 3 ? 6 : 8)) {
    case 0:
        return json_stringn(t, json_random_text(t, sizeof t));
    case 1:
        /* every magnitude, both signs (gcc: the conversion wraps, >> is arithmetic) */
        return json_integer((json_int_t)((uint64_t)json_next() << 32 | json_next()) >>
                            (json_next() % 64));
    case 2:
        return json_real((double)(int32_t)json_next() / (double)(json_next() | 1));
    case 3:
        return json_boolean(json_next() & 1);
    case 4:
        return json_null();
    case 5:
        return json_integer(json_next() % 2 ? INT64_MIN : INT64_MAX);
    case 6: {
        json_t *a = json_array();
        for (uint32_t i = json_next() % 5; i > 0; i--)
            json_array_append_new(a, json_random(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (uint32_t i = json_next() % 6; i > 0; i--) {
            size_t kl = json_random_text(t, sizeof t);
            json_object_setn_new(o, t, kl, json_random(depth + 1));
        }
        return o;
    }
    }
}

/* Every string length up to 40 (the fast paths go by 1-3, 4-7, 8-15 and 16 bytes, in
 * words that overlap at the end), with one byte of each class at every position, in an
 * exact buffer and in one a byte short. */
START_TEST(json_dumpb_strings_of_every_length)
{
    static const char *pieces[] = {"a",    "\"",       "\\",           "\n", "\x01", "\x1f",
                                   "\x7f", "\xc3\xa9", "\xe2\x82\xac", "",   "\xff", "\xc3"};
    char text[48], a[256], b[256];
    for (size_t n = 0; n <= 40; n++) {
        for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
            for (size_t at = 0; at < (n ? n : 1); at++) {
                memset(text, 'x', sizeof text);
                size_t pl = pieces[k][0] ? strlen(pieces[k]) : 1; /* "" is a NUL byte */
                size_t len = n;
                if (n) {
                    memcpy(text + at, pieces[k], pl);
                    len = at + pl > n ? at + pl : n;
                }
                json_t *v = json_stringn_nocheck(text, len);
                size_t want = json_dumpb(v, b, sizeof b, JSON_COMPACT | JSON_ENCODE_ANY);
                size_t got = al_json_dumpb(v, a, sizeof a);
                ck_assert_uint_eq(got, want); /* 0 for both when not UTF-8 */
                ck_assert(memcmp(a, b, got) == 0);
                if (want) {
                    memset(a, '#', sizeof a);
                    ck_assert_uint_eq(al_json_dumpb(v, a, want), want);
                    ck_assert(memcmp(a, b, want) == 0);
                    ck_assert_int_eq(a[want], '#');
                    memset(a, '#', sizeof a);
                    ck_assert_uint_eq(al_json_dumpb(v, a, want - 1), want);
                    ck_assert_int_eq(a[want - 1], '#');
                }
                json_decref(v);
            }
        }
    }
}
END_TEST

START_TEST(json_dumpb_object_rejects_own_keys)
{
    static const char *const reject[] = {"seq", "time", "log_id", NULL};
    char a[256];
    json_t *o =
        json_pack("{s:i,s:{s:i},s:s,s:i}", "sex", 1, "nested", "seq", 2, "tim", "e", "times", 3);
    size_t n = al_json_dumpb_object(o, reject, a, sizeof a);
    ck_assert_uint_eq(n, strlen("{\"sex\":1,\"nested\":{\"seq\":2},\"tim\":\"e\",\"times\":3}"));
    ck_assert(memcmp(a, "{\"sex\":1,\"nested\":{\"seq\":2},\"tim\":\"e\",\"times\":3}", n) == 0);
    ck_assert_uint_eq(al_json_dumpb_object(o, NULL, a, sizeof a), n);
    for (size_t i = 0; reject[i]; i++) {
        json_object_set_new(o, reject[i], json_true());
        ck_assert_uint_eq(al_json_dumpb_object(o, reject, a, sizeof a), 0);
        ck_assert_uint_eq(al_json_dumpb_object(o, reject, a, 4), 0); /* also when it is short */
        json_object_del(o, reject[i]);
    }
    ck_assert_uint_eq(al_json_dumpb_object(o, reject, a, sizeof a), n);
    json_t *empty = json_object();
    ck_assert_uint_eq(al_json_dumpb_object(empty, reject, a, sizeof a), 2);
    ck_assert(memcmp(a, "{}", 2) == 0);
    json_t *arr = json_array();
    ck_assert_uint_eq(al_json_dumpb_object(arr, reject, a, sizeof a), 0);
    json_decref(arr);
    json_decref(empty);
    json_decref(o);
}
END_TEST

START_TEST(json_dumpb_is_jansson_compact)
{
    char a[16384], b[16384];
    for (int i = 0; i < 5000; i++) {
        json_t *v = json_random(0);
        size_t want = json_dumpb(v, b, sizeof b, JSON_COMPACT | JSON_ENCODE_ANY);
        size_t got = al_json_dumpb(v, a, sizeof a);
        ck_assert_uint_eq(got, want);
        ck_assert_msg(memcmp(a, b, got) == 0, "differs: %.*s / %.*s", (int)got, a, (int)want, b);
        /* too small a buffer: the whole length, and nothing written beyond the size */
        if (got > 4) {
            memset(a, 'x', sizeof a);
            ck_assert_uint_eq(al_json_dumpb(v, a, got / 2), got);
            ck_assert_int_eq(a[got / 2], 'x');
        }
        json_decref(v);
    }
    /* what jansson cannot dump either: a string that is not UTF-8 */
    json_t *o = json_object();
    json_object_set_new(o, "k", json_stringn_nocheck("\xff\xfe", 2));
    ck_assert_uint_eq(json_dumpb(o, b, sizeof b, JSON_COMPACT), 0);
    ck_assert_uint_eq(al_json_dumpb(o, a, sizeof a), 0);
    json_object_set_new(o, "k", json_stringn_nocheck("\xe2\x82", 2)); /* cut sequence */
    ck_assert_uint_eq(al_json_dumpb(o, a, sizeof a), 0);
    json_decref(o);
    /* nesting beyond the bound is refused rather than recursed into */
    json_t *deep = json_array();
    for (int i = 0; i < AL_JSON_DUMP_DEPTH + 2; i++) {
        json_t *up = json_array();
        json_array_append_new(up, deep);
        deep = up;
    }
    ck_assert_uint_eq(al_json_dumpb(deep, a, sizeof a), 0);
    json_decref(deep);
    /* al_json_quote alone */
    char q[64];
    size_t ql = al_json_quoted_len("a\"\n\x01\x7f\xc3\xa9", 7);
    ck_assert_uint_eq(ql, 2 + 1 + 2 + 2 + 6 + 1 + 2);
    ck_assert_uint_eq(al_json_quote("a\"\n\x01\x7f\xc3\xa9", 7, q), ql);
    ck_assert(memcmp(q, "\"a\\\"\\n\\u0001\x7f\xc3\xa9\"", ql) == 0);
}
END_TEST

START_TEST(json_strict_getters)
{
    struct al_error e = {0};
    const char *doc = "{\"a\":\"x\",\"n\":5,\"b\":true,\"z\":1}";
    json_t *o = al_json_parse(doc, strlen(doc), &e);
    ck_assert_ptr_nonnull(o);
    const char *s = NULL;
    int64_t n = 0;
    bool b = false;
    ck_assert_int_eq(al_json_get_str(o, "a", true, &s, "spec", &e), 0);
    ck_assert_str_eq(s, "x");
    ck_assert_int_eq(al_json_get_int(o, "n", true, 0, 10, &n, "spec", &e), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(al_json_get_int(o, "n", true, 6, 10, &n, "spec", &e), -ERANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "out of range 6..10"));
    ck_assert_int_eq(al_json_get_bool(o, "b", true, &b, "spec", &e), 0);
    ck_assert(b);
    ck_assert_int_eq(al_json_get_str(o, "n", true, &s, "spec", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "spec: \"n\" must be a string");
    ck_assert_int_eq(al_json_get_str(o, "missing", true, &s, "spec", &e), -EINVAL);
    ck_assert_int_eq(al_json_get_str(o, "missing", false, &s, "spec", &e), 0);
    static const char *const allowed[] = {"a", "n", "b", NULL};
    ck_assert_int_eq(al_json_check_keys(o, allowed, "spec", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "spec: unknown field \"z\"");
    json_decref(o);
    ck_assert_ptr_null(al_json_parse("{\"a\":1,\"a\":2}", 13, &e));
    ck_assert_ptr_null(al_json_parse("{bad", 4, &e));
    ck_assert_ptr_nonnull(strstr(e.msg, "line 1"));
}
END_TEST

START_TEST(util_sizes_and_durations)
{
    uint64_t v;
    ck_assert_int_eq(al_parse_size("10MiB", &v), 0);
    ck_assert_uint_eq(v, 10485760);
    ck_assert_int_eq(al_parse_size("512", &v), 0);
    ck_assert_uint_eq(v, 512);
    ck_assert_int_eq(al_parse_size("1G", &v), 0);
    ck_assert_uint_eq(v, 1000000000);
    ck_assert_int_eq(al_parse_size("10 MiB", &v), -EINVAL);
    ck_assert_int_eq(al_parse_size("-1", &v), -EINVAL);
    ck_assert_int_eq(al_parse_size("99999999999999999999", &v), -ERANGE);
    ck_assert_int_eq(al_parse_duration_ms("250ms", &v), 0);
    ck_assert_uint_eq(v, 250);
    ck_assert_int_eq(al_parse_duration_ms("5m", &v), 0);
    ck_assert_uint_eq(v, 300000);
    ck_assert_int_eq(al_parse_duration_ms("5y", &v), -EINVAL);
}
END_TEST

START_TEST(time_format_forms)
{
    char o[AL_TIME_FORMAT_MAX];
    int64_t t = 1796000523; /* 2026-11-30T01:02:03Z, a Monday */
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 456789012, AL_TIME_RFC3339_S), 20);
    ck_assert_str_eq(o, "2026-11-30T01:02:03Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 456789012, AL_TIME_RFC3339_MS), 24);
    ck_assert_str_eq(o, "2026-11-30T01:02:03.456Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 456789012, AL_TIME_RFC3339_US), 27);
    ck_assert_str_eq(o, "2026-11-30T01:02:03.456789Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 456789012, AL_TIME_RFC3339_NS), 30);
    ck_assert_str_eq(o, "2026-11-30T01:02:03.456789012Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 0, AL_TIME_BASIC), 16);
    ck_assert_str_eq(o, "20261130T010203Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 0, AL_TIME_ASN1), 14);
    ck_assert_str_eq(o, "20261130010203");
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 999999999, AL_TIME_HTTP), 29);
    ck_assert_str_eq(o, "Mon, 30 Nov 2026 01:02:03 GMT");
    /* Protobuf JSON's Timestamp: 0, 3, 6 or 9 digits, the fewest that keep the value. */
    const struct {
        long ns;
        const char *want;
    } exact[] = {{0, "2024-05-01T12:00:00Z"},
                 {120000000, "2024-05-01T12:00:00.120Z"},
                 {123456000, "2024-05-01T12:00:00.123456Z"},
                 {123456789, "2024-05-01T12:00:00.123456789Z"},
                 {1, "2024-05-01T12:00:00.000000001Z"}};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        al_time_format(o, sizeof o, 1714564800, exact[i].ns, AL_TIME_RFC3339_EXACT);
        ck_assert_str_eq(o, exact[i].want);
    }
    /* The ends of four-digit years, before 1970 too; nothing outside. */
    ck_assert_int_eq(al_time_format(o, sizeof o, -62167219200LL, 0, AL_TIME_RFC3339_S), 20);
    ck_assert_str_eq(o, "0000-01-01T00:00:00Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, 253402300799LL, 0, AL_TIME_HTTP), 29);
    ck_assert_str_eq(o, "Fri, 31 Dec 9999 23:59:59 GMT");
    ck_assert_int_eq(al_time_format(o, sizeof o, -1, 500000000, AL_TIME_RFC3339_MS), 24);
    ck_assert_str_eq(o, "1969-12-31T23:59:59.500Z");
    ck_assert_int_eq(al_time_format(o, sizeof o, -62167219201LL, 0, AL_TIME_RFC3339_S), -ERANGE);
    ck_assert_str_eq(o, "");
    ck_assert_int_eq(al_time_format(o, sizeof o, 253402300800LL, 0, AL_TIME_ASN1), -ERANGE);
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 1000000000, AL_TIME_RFC3339_NS), -EINVAL);
    ck_assert_int_eq(al_time_format(o, sizeof o, t, -1, AL_TIME_RFC3339_NS), -EINVAL);
    ck_assert_int_eq(al_time_format(o, sizeof o, t, 0, (enum al_time_form)99), -EINVAL);
    /* out holds the text and its NUL, or nothing. */
    ck_assert_int_eq(al_time_format(o, 21, t, 0, AL_TIME_RFC3339_S), 20);
    ck_assert_int_eq(al_time_format(o, 20, t, 0, AL_TIME_RFC3339_S), -E2BIG);
    ck_assert_str_eq(o, "");
    ck_assert_int_eq(al_time_format(o, 0, t, 0, AL_TIME_RFC3339_S), -E2BIG);
    al_time_rfc3339(o, sizeof o, (uint64_t)t * 1000000000u + 7000000u);
    ck_assert_str_eq(o, "2026-11-30T01:02:03.007Z");
}
END_TEST

/* The formatter computes dates itself: it must agree with libc's gmtime_r on every form, over
 * the whole range of four-digit years (a step of 7,777,777 s, about 90 days, lands on every
 * month, weekday and leap rule in turn: 1900 and 2100 are not leap years, 2000 is). */
START_TEST(time_format_matches_gmtime)
{
    const int64_t min_s = -62167219200LL, max_s = 253402300799LL;
    char got[AL_TIME_FORMAT_MAX], want[64], a[8], b[8];
    size_t n = 0;
    for (int64_t t = min_s; t <= max_s; t += 7777777) {
        time_t tt = (time_t)t;
        struct tm tm;
        ck_assert_ptr_nonnull(gmtime_r(&tt, &tm));
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (long)(n % 1000000000));
        al_time_format(got, sizeof got, t, (long)(n % 1000000000), AL_TIME_RFC3339_NS);
        ck_assert_msg(strcmp(got, want) == 0, "%lld: %s, libc %s", (long long)t, got, want);
        strftime(a, sizeof a, "%a", &tm);
        strftime(b, sizeof b, "%b", &tm);
        snprintf(want, sizeof want, "%s, %02d %s %04d %02d:%02d:%02d GMT", a, tm.tm_mday, b,
                 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        al_time_format(got, sizeof got, t, 0, AL_TIME_HTTP);
        ck_assert_msg(strcmp(got, want) == 0, "%lld: %s, libc %s", (long long)t, got, want);
        n += 123456791;
    }
    ck_assert_uint_gt(n / 123456791, 40000);
}
END_TEST

START_TEST(util_rfc3339_round_trip)
{
    uint64_t t;
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T01:02:03.456Z", &t), 0);
    char out[40];
    al_time_rfc3339(out, sizeof out, t);
    ck_assert_str_eq(out, "2026-11-30T01:02:03.456Z");
    uint64_t t2;
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T03:02:03.456+02:00", &t2), 0);
    ck_assert_uint_eq(t, t2);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-13-30T00:00:00Z", &t2), -EINVAL);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T00:00:00", &t2), -EINVAL);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30", &t2), 0);
}
END_TEST

/* Decodes s with flags into a buffer of outlen (checked for overruns) and returns the result;
 * *out gets the text. */
static ssize_t pct(const char *s, unsigned flags, size_t outlen, char out[64])
{
    char buf[80];
    memset(buf, '#', sizeof buf);
    ssize_t n = al_percent_decode(s, strlen(s), buf, outlen, flags);
    for (size_t i = outlen; i < sizeof buf; i++)
        ck_assert_msg(buf[i] == '#', "%s: wrote past outlen %zu", s, outlen);
    memcpy(out, buf, 64);
    out[63] = '\0';
    return n;
}

START_TEST(percent_decode_plain)
{
    char o[64];
    ck_assert_int_eq(pct("a%20b+c%7e%7E", 0, 64, o), 7);
    ck_assert_str_eq(o, "a b+c~~");
    ck_assert_int_eq(pct("%C3%a9", 0, 64, o), 2);
    ck_assert_str_eq(o, "\xc3\xa9");
    ck_assert_int_eq(pct("", 0, 64, o), 0);
    ck_assert_str_eq(o, "");
    ck_assert_int_eq(pct("%2F%25", 0, 64, o), 2);
    ck_assert_str_eq(o, "/%");
    /* "%2541" is "%41" once decoded, never "A": one pass only. */
    ck_assert_int_eq(pct("%2541", 0, 64, o), 3);
    ck_assert_str_eq(o, "%41");
    const char *bad[] = {"%", "%2", "%G0", "x%0", "a%2g", "%%41", "% 41", "%+1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(pct(bad[i], 0, 64, o) == -EINVAL, "%s", bad[i]);
        ck_assert_msg(o[0] == '\0', "%s: partial result '%s'", bad[i], o);
    }
    ck_assert_int_eq(pct("%00", 0, 64, o), -EILSEQ);
    ck_assert_int_eq(pct("ab%00cd", AL_PERCENT_PLUS_SPACE, 64, o), -EILSEQ);
    ck_assert_str_eq(o, "");
    char nul[] = {'a', '\0', 'b'};
    ck_assert_int_eq(al_percent_decode(nul, 3, o, 64, 0), -EILSEQ);
}
END_TEST

START_TEST(percent_decode_bounds_and_in_place)
{
    char o[64];
    /* outlen holds the result and its NUL, nothing beyond is written. */
    ck_assert_int_eq(pct("abc", 0, 4, o), 3);
    ck_assert_int_eq(pct("abcd", 0, 4, o), -E2BIG);
    ck_assert_str_eq(o, "");
    ck_assert_int_eq(pct("%41%41%41", 0, 4, o), 3); /* the decoded length counts */
    ck_assert_str_eq(o, "AAA");
    ck_assert_int_eq(pct("", 0, 0, o), -E2BIG);
    ck_assert_int_eq(pct("", 0, 1, o), 0);
    char s[32] = "x%2Fy+z%7e";
    ck_assert_int_eq(al_percent_decode(s, strlen(s), s, sizeof s, AL_PERCENT_PLUS_SPACE), 6);
    ck_assert_str_eq(s, "x/y z~");
    strcpy(s, "%2f%7e%2F");
    ck_assert_int_eq(al_percent_decode(s, strlen(s), s, sizeof s, AL_PERCENT_UNRESERVED_ONLY), 7);
    ck_assert_str_eq(s, "%2F~%2F");
    /* len bounds the input: an escape cut by it is malformed. */
    ck_assert_int_eq(al_percent_decode("a%41", 3, o, sizeof o, 0), -EINVAL);
    ck_assert_int_eq(al_percent_decode("a%41", 1, o, sizeof o, 0), 1);
    ck_assert_str_eq(o, "a");
}
END_TEST

START_TEST(percent_decode_plus_space)
{
    char o[64];
    ck_assert_int_eq(pct("a+b", 0, 64, o), 3);
    ck_assert_str_eq(o, "a+b");
    ck_assert_int_eq(pct("a+b", AL_PERCENT_PLUS_SPACE, 64, o), 3);
    ck_assert_str_eq(o, "a b");
    /* An encoded '+' stays a '+'. */
    ck_assert_int_eq(pct("%2B+", AL_PERCENT_PLUS_SPACE, 64, o), 2);
    ck_assert_str_eq(o, "+ ");
}
END_TEST

START_TEST(percent_decode_unreserved_only)
{
    char o[64];
    unsigned f = AL_PERCENT_UNRESERVED_ONLY;
    ck_assert_int_eq(pct("/%61%5a%39%2D%2e%5F%7E", f, 64, o), 8);
    ck_assert_str_eq(o, "/aZ9-._~");
    /* Reserved and other bytes stay escaped, upper-cased: one spelling per path. */
    ck_assert_int_eq(pct("/a%2fb%3f%c3%a9%25", f, 64, o), 18);
    ck_assert_str_eq(o, "/a%2Fb%3F%C3%A9%25");
    ck_assert_int_eq(pct("a+b", f, 64, o), 3);
    ck_assert_str_eq(o, "a+b");
    ck_assert_int_eq(pct("a+%2b", f | AL_PERCENT_PLUS_SPACE, 64, o), 5);
    ck_assert_str_eq(o, "a %2B");
    ck_assert_int_eq(pct("%zz", f, 64, o), -EINVAL);
    ck_assert_int_eq(pct("/%00", f, 64, o), -EILSEQ);
    /* A kept escape needs three bytes of room. */
    ck_assert_int_eq(pct("a%2F", f, 4, o), -E2BIG);
    ck_assert_int_eq(pct("a%2F", f, 5, o), 4);
    ck_assert_int_eq(pct("a%41", f, 3, o), 2);
}
END_TEST

START_TEST(percent_decode_byte_steps)
{
    const char *s = "a%41+%zz";
    size_t len = strlen(s), i = 0;
    ck_assert_int_eq(al_percent_decode_byte(s, len, &i, 0), 'a');
    ck_assert_uint_eq(i, 1);
    ck_assert_int_eq(al_percent_decode_byte(s, len, &i, 0), 'A');
    ck_assert_uint_eq(i, 4);
    size_t j = i;
    ck_assert_int_eq(al_percent_decode_byte(s, len, &j, 0), '+');
    ck_assert_int_eq(al_percent_decode_byte(s, len, &i, AL_PERCENT_PLUS_SPACE), ' ');
    ck_assert_uint_eq(i, 5);
    ck_assert_int_eq(al_percent_decode_byte(s, len, &i, 0), -EINVAL);
    ck_assert_uint_eq(i, 5); /* unchanged on an error */
    i = 0;
    ck_assert_int_eq(al_percent_decode_byte("%ff", 3, &i, 0), 0xff);
    i = 0;
    ck_assert_int_eq(al_percent_decode_byte("%00", 3, &i, 0), -EILSEQ);
    i = 0;
    ck_assert_int_eq(al_percent_decode_byte("%41", 3, &i, AL_PERCENT_UNRESERVED_ONLY), -EINVAL);
}
END_TEST

START_TEST(util_atomic_write_and_read)
{
    char dir[64];
    al_test_tmpdir(dir, sizeof dir, "atomic");
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/state.json", dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    ck_assert_int_eq(al_mkdir_p(sub, 0700), 0);
    struct al_error e = {0};
    ck_assert_int_eq(al_write_file_atomic(path, "hello", 5, 0600, &e), 0);
    ck_assert_int_eq(al_write_file_atomic(path, "world!", 6, 0600, &e), 0);
    char *data;
    size_t len;
    ck_assert_int_eq(al_read_file(path, 100, &data, &len, &e), 0);
    ck_assert_uint_eq(len, 6);
    ck_assert_str_eq(data, "world!");
    free(data);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(al_read_file(path, 3, &data, &len, &e), -EFBIG);
    ck_assert_int_eq(al_read_file(sub, 100, &data, &len, &e), -EISDIR);
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

static void rm__put(const char *dir, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "%s: %m", p);
    close(fd);
}

static bool rm__exists(const char *dir, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* al_rmtree removes a tree but nothing a link in it names, and never empties what is mounted
 * inside it (the mount point is refused with -EXDEV, the rest of the tree still goes); a tree
 * deeper than AL_RMTREE_MAX_DEPTH is -ELOOP. */
START_TEST(util_rmtree_stays_in_its_tree)
{
    char dir[64], p[512];
    al_test_tmpdir(dir, sizeof dir, "rmtree");
    const char *dirs[] = {"outside", "victim", "victim/a", "victim/a/b", "victim/mnt"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        ck_assert_int_eq(mkdir(p, 0700), 0);
    }
    rm__put(dir, "outside/keep");
    rm__put(dir, "victim/a/b/file");
    snprintf(p, sizeof p, "%s/victim/a/rel", dir);
    ck_assert_int_eq(symlink("../../outside", p), 0);
    char target[256];
    snprintf(target, sizeof target, "%s/outside", dir);
    snprintf(p, sizeof p, "%s/victim/abs", dir);
    ck_assert_int_eq(symlink(target, p), 0);

    /* In a mount namespace of its own: a tmpfs on victim/mnt, with a file in it. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        snprintf(p, sizeof p, "%s/victim/mnt", dir);
        if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
            mount("tmpfs", p, "tmpfs", 0, "size=1m"))
            _exit(10);
        snprintf(p, sizeof p, "%s/victim/mnt/inside", dir);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            _exit(11);
        close(fd);
        snprintf(p, sizeof p, "%s/victim", dir);
        if (al_rmtree(p) != -EXDEV)
            _exit(12);
        if (!rm__exists(dir, "victim/mnt/inside") || rm__exists(dir, "victim/a"))
            _exit(13);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);

    snprintf(p, sizeof p, "%s/victim", dir);
    ck_assert_int_eq(al_rmtree(p), 0); /* the mount went with the child's namespace */
    ck_assert(!rm__exists(dir, "victim"));
    ck_assert(rm__exists(dir, "outside/keep"));
    ck_assert_int_eq(al_rmtree(p), 0); /* nothing there is fine */

    /* One level deeper than it goes. */
    int at = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(at, 0);
    ck_assert_int_eq(mkdirat(at, "deep", 0700), 0);
    int cur = openat(at, "deep", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i <= AL_RMTREE_MAX_DEPTH; i++) {
        ck_assert_int_eq(mkdirat(cur, "d", 0700), 0);
        int n = openat(cur, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(n, 0);
        close(cur);
        cur = n;
    }
    close(cur);
    ck_assert_int_eq(al_rmtree_at(at, "deep"), -ELOOP);
    close(at);
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

/* FDSize of /proc/self/status: the size of the descriptor table. */
static long fd_table_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "FDSize: %ld", &v) == 1)
            break;
    fclose(f);
    return v;
}

static int open_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* A process holding secrets: no core file however permissive the limits it was given, and
 * not dumpable (in a child of its own, as the change is for good). */
START_TEST(confine_no_dumps)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        setrlimit(RLIMIT_CORE, &rl); /* as permissive as a careless admin */
        if (prctl(PR_GET_DUMPABLE) != 1)
            _exit(3);
        struct al_error e = {0};
        if (al_confine_no_dumps(&e) < 0)
            _exit(7);
        struct rlimit now;
        if (getrlimit(RLIMIT_CORE, &now) < 0 || now.rlim_cur != 0 || now.rlim_max != 0)
            _exit(4);
        if (prctl(PR_GET_DUMPABLE) != 0)
            _exit(5);
        rl = (struct rlimit){RLIM_INFINITY, RLIM_INFINITY};
        if (setrlimit(RLIMIT_CORE, &rl) == 0 && getuid() != 0)
            _exit(6); /* the hard limit cannot be raised again (root can) */
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit %d", WEXITSTATUS(st));
}
END_TEST

/* In a child of its own: the test changes its limits and its table for good. */
START_TEST(util_fd_table_reserve)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int code = 0;
        long before = fd_table_size();
        int open_before = open_fd_count();
        if (before <= 0 || before >= 3000)
            _exit(10); /* a fresh test process starts with a small table */
        if (al_fd_table_reserve(3000) != 3000)
            code = 11;
        else if (fd_table_size() < 3000)
            code = 12;
        else if (open_fd_count() != open_before)
            code = 13; /* nothing left open */
        /* A limit below the size asked for: the size is lowered to it (the table, larger
         * already, stays as it is: it never shrinks). */
        struct rlimit r = {200, 200};
        if (!code && setrlimit(RLIMIT_NOFILE, &r) == 0) {
            long grown = fd_table_size();
            if (al_fd_table_reserve(100000) != 200)
                code = 14;
            else if (fd_table_size() != grown)
                code = 15; /* already larger: unchanged */
        }
        /* A soft limit below the hard one is raised to it. */
        struct rlimit r2 = {64, 200}, now;
        if (!code && setrlimit(RLIMIT_NOFILE, &r2) == 0 &&
            (al_fd_table_reserve(150) != 150 || getrlimit(RLIMIT_NOFILE, &now) < 0 ||
             now.rlim_cur != 200))
            code = 16;
        _exit(code);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child step %d failed",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

START_TEST(log_json_lines)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    al_log_init("test", AL_LOG_JSON, AL_LOG_INFO);
    al_log_set_fd(p[1]);
    al_debug("hidden");
    al_warn("quote \" and newline \n here");
    close(p[1]);
    char buf[1024] = {0};
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_null(strstr(buf, "hidden"));
    struct al_error e;
    json_t *line = al_json_parse(buf, (size_t)n, &e);
    ck_assert_ptr_nonnull(line);
    ck_assert_str_eq(json_string_value(json_object_get(line, "level")), "warn");
    ck_assert_str_eq(json_string_value(json_object_get(line, "msg")),
                     "quote \" and newline \n here");
    ck_assert_str_eq(json_string_value(json_object_get(line, "component")), "test");
    json_decref(line);
}
END_TEST

START_TEST(util_hex_encode_and_value)
{
    /* Every length around the 16-byte vector step, both cases, against printf's %02x; the
     * byte past the NUL stays untouched. */
    unsigned char in[70];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (unsigned char)(i * 37 + 11);
    in[3] = 0x00, in[20] = 0xff, in[33] = 0x9a;
    for (int upper = 0; upper < 2; upper++) {
        for (size_t n = 0; n <= sizeof in; n++) {
            char want[2 * sizeof in + 1], got[2 * sizeof in + 2];
            for (size_t i = 0; i < n; i++)
                snprintf(want + 2 * i, 3, upper ? "%02X" : "%02x", in[i]);
            want[2 * n] = '\0';
            memset(got, '#', sizeof got);
            al_hex_encode(got, in, n, upper);
            ck_assert_str_eq(got, want);
            ck_assert_int_eq(got[2 * n + 1], '#');
            /* In upper case the first byte (0x0b) already has a letter. */
            ck_assert(al_hex_is_lower(got, 2 * n) == (!upper || n == 0));
        }
    }
    for (int c = 0; c < 256; c++) {
        const char *lo = strchr(al_hex_lower, c), *up = strchr(al_hex_upper, c);
        int want = c && lo ? (int)(lo - al_hex_lower) : c && up ? (int)(up - al_hex_upper) : -1;
        ck_assert_int_eq(al_hex_value(c), want);
    }
    ck_assert_int_eq(al_hex_value(-1), -1);
    ck_assert(al_hex_is_lower("", 0));
    ck_assert(al_hex_is_lower("0123456789abcdef", 16));
    ck_assert(!al_hex_is_lower("0123456789abcdeg", 16));
    ck_assert(!al_hex_is_lower("abc\0", 4));
    ck_assert(al_hex_is_lower("abcX", 3)); /* only the n bytes asked about */
}
END_TEST

static Suite *common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("basics");
    tcase_add_test(tc, error_set_and_prefix);
    tcase_add_test(tc, buf_cap_is_enforced);
    tcase_add_test(tc, json_escape_controls_and_bad_utf8);
    tcase_add_test(tc, json_strict_getters);
    tcase_add_test(tc, json_dumpb_is_jansson_compact);
    tcase_add_test(tc, json_dumpb_strings_of_every_length);
    tcase_add_test(tc, json_dumpb_object_rejects_own_keys);
    tcase_add_test(tc, util_sizes_and_durations);
    tcase_add_test(tc, util_hex_encode_and_value);
    tcase_add_test(tc, util_rfc3339_round_trip);
    tcase_add_test(tc, time_format_forms);
    tcase_add_test(tc, time_format_matches_gmtime);
    tcase_add_test(tc, percent_decode_plain);
    tcase_add_test(tc, percent_decode_bounds_and_in_place);
    tcase_add_test(tc, percent_decode_plus_space);
    tcase_add_test(tc, percent_decode_unreserved_only);
    tcase_add_test(tc, percent_decode_byte_steps);
    tcase_add_test(tc, util_atomic_write_and_read);
    tcase_add_test(tc, util_rmtree_stays_in_its_tree);
    tcase_add_test(tc, util_fd_table_reserve);
    tcase_add_test(tc, confine_no_dumps);
    tcase_add_test(tc, log_json_lines);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(common_suite)
