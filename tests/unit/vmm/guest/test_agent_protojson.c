/* Unit tests: vmm/guest/protojson (proto3 JSON as envd's clients speak it). */
#include "al_test.h"
#include "vmm/guest/protojson.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static json_t *J(const char *s)
{
    json_t *v = json_loads(s, 0, NULL);
    ck_assert_ptr_nonnull(v);
    return v;
}

START_TEST(fields_under_both_names_null_is_absent)
{
    json_t *o = J("{\"includeEntry\":true,\"symlink_target\":\"/x\",\"cwd\":null}");
    bool b = false;
    ck_assert_int_eq(agent_pj_bool(o, "includeEntry", "include_entry", &b, NULL), 0);
    ck_assert(b);
    const char *s;
    ck_assert_int_eq(agent_pj_string(o, "symlinkTarget", "symlink_target", &s, NULL), 0);
    ck_assert_str_eq(s, "/x");
    ck_assert_int_eq(agent_pj_string(o, "cwd", NULL, &s, NULL), -ENOENT);
    struct al_error e = {0};
    ck_assert_int_eq(agent_pj_string(o, "includeEntry", NULL, &s, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "includeEntry"));
    json_decref(o);
}
END_TEST

START_TEST(integers_as_numbers_or_strings)
{
    json_t *o =
        J("{\"a\":7,\"b\":\"42\",\"c\":-1,\"d\":4294967296,\"e\":\"x\",\"f\":3.0,\"g\":1.5}");
    uint32_t v;
    ck_assert_int_eq(agent_pj_uint32(o, "a", NULL, &v, NULL), 0);
    ck_assert_uint_eq(v, 7);
    ck_assert_int_eq(agent_pj_uint32(o, "b", NULL, &v, NULL), 0);
    ck_assert_uint_eq(v, 42);
    ck_assert_int_eq(agent_pj_uint32(o, "f", NULL, &v, NULL), 0);
    ck_assert_uint_eq(v, 3);
    ck_assert_int_eq(agent_pj_uint32(o, "c", NULL, &v, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_uint32(o, "d", NULL, &v, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_uint32(o, "e", NULL, &v, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_uint32(o, "g", NULL, &v, NULL), -EINVAL);
    json_decref(o);
    json_t *i = agent_pj_int64(-9007199254740993LL);
    ck_assert_str_eq(json_string_value(i), "-9007199254740993");
    json_decref(i);
}
END_TEST

START_TEST(enums_by_name_or_number)
{
    static const struct agent_pj_enum t[] = {
        {"SIGNAL_SIGTERM", 15}, {"SIGNAL_SIGKILL", 9}, {NULL, 0}};
    json_t *o = J("{\"a\":\"SIGNAL_SIGKILL\",\"b\":15,\"c\":\"SIGKILL\",\"d\":true}");
    int v;
    ck_assert_int_eq(agent_pj_enum(o, "a", NULL, t, &v, NULL), 0);
    ck_assert_int_eq(v, 9);
    ck_assert_int_eq(agent_pj_enum(o, "b", NULL, t, &v, NULL), 0);
    ck_assert_int_eq(v, 15);
    ck_assert_int_eq(agent_pj_enum(o, "c", NULL, t, &v, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_enum(o, "d", NULL, t, &v, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_enum(o, "zz", NULL, t, &v, NULL), -ENOENT);
    json_decref(o);
}
END_TEST

START_TEST(base64_both_alphabets_padding_optional)
{
    static const char *const ok[][2] = {
        {"aGkK", "hi\n"},     {"aGk=", "hi"},      {"aGk", "hi"}, {"", ""},
        {"-_8=", "\xfb\xff"}, {"+/8", "\xfb\xff"}, {"YQ==", "a"}, {"YQ", "a"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct al_buf b;
        al_buf_init(&b, 0);
        ck_assert_int_eq(agent_pj_base64_decode(ok[i][0], strlen(ok[i][0]), &b), 0);
        ck_assert_uint_eq(b.len, strlen(ok[i][1]));
        ck_assert(b.len == 0 || memcmp(b.data, ok[i][1], b.len) == 0);
        al_buf_free(&b);
    }
    /* Strict: one alphabet per string, and the bits past the last byte must be zero ("YR=="
     * and "aGl" would also decode to "a" and "hi"). */
    static const char *const bad[] = {
        "a",    "aGk*", "a===", "aG=k", "Y===", "YQ=", "!!!!",     "==",
        "YR==", "YR",   "aGl",  "aGl=", "+_8=", "-/8", "YQ==YQ==",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct al_buf b;
        al_buf_init(&b, 0);
        ck_assert_msg(agent_pj_base64_decode(bad[i], strlen(bad[i]), &b) == -EINVAL, "%s", bad[i]);
        al_buf_free(&b);
    }
    struct al_buf capped;
    al_buf_init(&capped, 2);
    ck_assert_int_eq(agent_pj_base64_decode("aGVsbG8=", 8, &capped), -E2BIG);
    al_buf_free(&capped);
    /* The encoder is a table (it runs on every byte of process output, where libsodium's
     * constant-time one is several times slower): it must write exactly libsodium's text. */
    for (size_t n = 0; n < 300; n++) {
        unsigned char in[300];
        uint32_t x = (uint32_t)n * 2654435761u + 1; /* every byte value, reproducibly */
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            in[i] = (unsigned char)(x >> 23);
        }
        char *enc = agent_pj_base64_encode(in, n);
        char want[sodium_base64_ENCODED_LEN(300, sodium_base64_VARIANT_ORIGINAL)];
        sodium_bin2base64(want, sizeof want, in, n, sodium_base64_VARIANT_ORIGINAL);
        ck_assert_str_eq(enc, want);
        struct al_buf b;
        al_buf_init(&b, 0);
        ck_assert_int_eq(agent_pj_base64_decode(enc, strlen(enc), &b), 0);
        ck_assert_uint_eq(b.len, n);
        ck_assert(n == 0 || memcmp(b.data, in, n) == 0);
        al_buf_free(&b);
        free(enc);
    }
}
END_TEST

START_TEST(bytes_field_and_string_map)
{
    json_t *o =
        J("{\"input\":{\"stdin\":\"aGk=\"},\"envs\":{\"A\":\"1\"},\"bad\":{\"A\":1},\"n\":5}");
    struct al_buf b;
    al_buf_init(&b, 0);
    ck_assert_int_eq(agent_pj_bytes(json_object_get(o, "input"), "stdin", NULL, &b, NULL), 0);
    ck_assert_str_eq(b.data, "hi");
    al_buf_free(&b);
    json_t *m;
    ck_assert_int_eq(agent_pj_string_map(o, "envs", NULL, &m, NULL), 0);
    ck_assert_int_eq(agent_pj_string_map(o, "bad", NULL, &m, NULL), -EINVAL);
    ck_assert_int_eq(agent_pj_string_map(o, "n", NULL, &m, NULL), -EINVAL);
    json_decref(o);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_protojson");
    TCase *t = tcase_create("protojson");
    tcase_add_test(t, fields_under_both_names_null_is_absent);
    tcase_add_test(t, integers_as_numbers_or_strings);
    tcase_add_test(t, enums_by_name_or_number);
    tcase_add_test(t, base64_both_alphabets_padding_optional);
    tcase_add_test(t, bytes_field_and_string_map);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
