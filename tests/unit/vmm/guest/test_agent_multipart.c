/* Unit tests: vmm/guest/multipart (streaming multipart/form-data). */
#include "al_test.h"
#include "vmm/guest/multipart.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rec {
    int parts;
    char names[8][64];
    char files[8][256];
    char data[8][256];
    int ended;
};

static int rec_begin(void *ctx, const struct agent_mp_part *p)
{
    struct rec *r = ctx;
    ck_assert_int_lt(r->parts, 8);
    snprintf(r->names[r->parts], 64, "%s", p->name);
    snprintf(r->files[r->parts], 256, "%s", p->has_filename ? p->filename : "(none)");
    r->data[r->parts][0] = '\0';
    r->parts++;
    return 0;
}

static int rec_data(void *ctx, const char *d, size_t n)
{
    struct rec *r = ctx;
    size_t have = strlen(r->data[r->parts - 1]);
    ck_assert_uint_lt(have + n, 256);
    memcpy(r->data[r->parts - 1] + have, d, n);
    r->data[r->parts - 1][have + n] = '\0';
    return 0;
}

static int rec_end(void *ctx)
{
    ((struct rec *)ctx)->ended++;
    return 0;
}

static const struct agent_mp_callbacks cb = {rec_begin, rec_data, rec_end};

static const char body2[] =
    "preamble to ignore\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a b.txt\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "line1\r\n--XyZnot-a-boundary\r\n"
    "\r\n--XyZ  \r\n"
    "content-disposition: form-data; name=file; filename*=UTF-8''%2Fhome%2F%C3%BC.txt\r\n"
    "\r\n"
    "second\r\n"
    "--XyZ--\r\n"
    "epilogue";

static void run_split(size_t step, struct rec *r)
{
    struct agent_mp mp;
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(agent_mp_init(&mp, "multipart/form-data; boundary=XyZ", &cb, r), 0);
    size_t len = sizeof body2 - 1;
    for (size_t i = 0; i < len; i += step) {
        size_t n = len - i < step ? len - i : step;
        ck_assert_int_eq(agent_mp_feed(&mp, body2 + i, n), 0);
    }
    ck_assert_int_eq(agent_mp_finish(&mp), 0);
    agent_mp_free(&mp);
}

START_TEST(parts_any_split)
{
    for (size_t step = 1; step <= sizeof body2; step++) {
        struct rec r;
        run_split(step, &r);
        ck_assert_int_eq(r.parts, 2);
        ck_assert_int_eq(r.ended, 2);
        ck_assert_str_eq(r.names[0], "file");
        ck_assert_str_eq(r.files[0], "/tmp/a b.txt");
        ck_assert_str_eq(r.data[0], "line1\r\n--XyZnot-a-boundary\r\n");
        ck_assert_str_eq(r.files[1], "/home/\xc3\xbc.txt");
        ck_assert_str_eq(r.data[1], "second");
    }
}
END_TEST

START_TEST(boundary_parameter)
{
    struct agent_mp mp;
    struct rec r;
    ck_assert_int_eq(agent_mp_init(&mp, "multipart/form-data; boundary=\"quoted b\"", &cb, &r), 0);
    ck_assert_int_eq(memcmp(mp.delim, "\r\n--quoted b", 12), 0);
    agent_mp_free(&mp);
    ck_assert_int_eq(agent_mp_init(&mp, "application/json", &cb, &r), -EINVAL);
    ck_assert_int_eq(agent_mp_init(&mp, "multipart/form-data", &cb, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(mp.err, "boundary"));
    char longb[200] = "multipart/form-data; boundary=";
    memset(longb + strlen(longb), 'a', 80);
    ck_assert_int_eq(agent_mp_init(&mp, longb, &cb, &r), -EINVAL);
}
END_TEST

START_TEST(header_param_parsing)
{
    char out[64];
    ck_assert_int_eq(
        agent_mp_header_param("form-data; name=\"a\\\"b\"; x=1", "name", out, sizeof out), 0);
    ck_assert_str_eq(out, "a\"b");
    ck_assert_int_eq(agent_mp_header_param("form-data; NAME=tok", "name", out, sizeof out), 0);
    ck_assert_str_eq(out, "tok");
    ck_assert_int_eq(agent_mp_header_param("form-data; name=\"x\"", "filename", out, sizeof out),
                     -ENOENT);
    ck_assert_int_eq(
        agent_mp_header_param("form-data; name=\"unterminated", "name", out, sizeof out), -EINVAL);
    ck_assert_int_eq(agent_mp_header_param("form-data; name=\"0123456789\"", "name", out, 4),
                     -E2BIG);
}
END_TEST

static int feed_all(const char *ct, const char *body, struct agent_mp *mp, struct rec *r)
{
    memset(r, 0, sizeof *r);
    int rc = agent_mp_init(mp, ct, &cb, r);
    if (rc)
        return rc;
    rc = agent_mp_feed(mp, body, strlen(body));
    if (rc == 0)
        rc = agent_mp_finish(mp);
    return rc;
}

START_TEST(malformed_bodies_are_errors)
{
    struct agent_mp mp;
    struct rec r;
    const char *ct = "multipart/form-data; boundary=B";
    /* no closing delimiter */
    ck_assert_int_eq(
        feed_all(ct, "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc", &mp, &r),
        -EPROTO);
    ck_assert_ptr_nonnull(strstr(mp.err, "closing boundary"));
    agent_mp_free(&mp);
    /* garbage after a boundary */
    ck_assert_int_eq(feed_all(ct, "--Bxx\r\n", &mp, &r), -EPROTO);
    agent_mp_free(&mp);
    /* a part without Content-Disposition */
    ck_assert_int_eq(feed_all(ct, "--B\r\nContent-Type: text/plain\r\n\r\nx\r\n--B--", &mp, &r),
                     -EPROTO);
    agent_mp_free(&mp);
    /* headers over the limit */
    char *big = malloc(AGENT_MP_MAX_HEADER + 100);
    strcpy(big, "--B\r\nX-Big: ");
    memset(big + strlen(big), 'a', AGENT_MP_MAX_HEADER);
    big[12 + AGENT_MP_MAX_HEADER] = '\0';
    ck_assert_int_eq(feed_all(ct, big, &mp, &r), -EPROTO);
    ck_assert_ptr_nonnull(strstr(mp.err, "exceed"));
    agent_mp_free(&mp);
    free(big);
    /* an empty multipart body (only the close delimiter) is fine: zero parts */
    ck_assert_int_eq(feed_all(ct, "--B--\r\n", &mp, &r), 0);
    ck_assert_int_eq(r.parts, 0);
    agent_mp_free(&mp);
}
END_TEST

START_TEST(large_part_streams_without_buffering_it)
{
    struct agent_mp mp;
    struct rec r;
    memset(&r, 0, sizeof r);
    size_t total = 0;
    struct agent_mp_callbacks c = {rec_begin, NULL, NULL};
    (void)c;
    ck_assert_int_eq(agent_mp_init(&mp, "multipart/form-data; boundary=B", &cb, &r), 0);
    const char *hdr = "--B\r\nContent-Disposition: form-data; name=\"skip\"\r\n\r\n";
    ck_assert_int_eq(agent_mp_feed(&mp, hdr, strlen(hdr)), 0);
    /* 4 MiB of data in 1000-byte chunks: delivered through on_part_data as it comes. */
    char chunk[1000];
    memset(chunk, 'z', sizeof chunk);
    struct agent_mp_callbacks counting = {rec_begin, NULL, rec_end};
    mp.cb = &counting;
    for (int i = 0; i < 4096; i++) {
        ck_assert_int_eq(agent_mp_feed(&mp, chunk, sizeof chunk), 0);
        total += sizeof chunk;
        ck_assert_uint_le(mp.win_len, AGENT_MP_WINDOW + mp.delim_len);
    }
    ck_assert_int_eq(agent_mp_feed(&mp, "\r\n--B--", 7), 0);
    ck_assert_int_eq(agent_mp_finish(&mp), 0);
    ck_assert_int_eq(r.ended, 1);
    ck_assert_uint_eq(total, 4096000);
    agent_mp_free(&mp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_multipart");
    TCase *t = tcase_create("multipart");
    tcase_add_test(t, parts_any_split);
    tcase_add_test(t, boundary_parameter);
    tcase_add_test(t, header_param_parsing);
    tcase_add_test(t, malformed_bodies_are_errors);
    tcase_add_test(t, large_part_streams_without_buffering_it);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
