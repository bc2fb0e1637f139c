/* Unit tests: vmm/guest/connect (Connect envelopes, codes, error bodies). */
#include "al_test.h"
#include "vmm/guest/connect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct got {
    int n;
    uint8_t flags[8];
    char msg[8][64];
};

static int on_msg(void *ctx, uint8_t flags, const uint8_t *data, size_t len)
{
    struct got *g = ctx;
    ck_assert_int_lt(g->n, 8);
    g->flags[g->n] = flags;
    ck_assert_uint_lt(len, sizeof g->msg[0]);
    memcpy(g->msg[g->n], data, len);
    g->msg[g->n][len] = '\0';
    g->n++;
    return 0;
}

START_TEST(frame_roundtrip_byte_by_byte)
{
    struct al_buf b;
    al_buf_init(&b, 0);
    ck_assert_int_eq(agent_connect_frame_append(&b, 0, "{\"a\":1}", 7), 0);
    ck_assert_int_eq(agent_connect_frame_append(&b, 0, "", 0), 0);
    ck_assert_int_eq(agent_connect_end_stream_append(&b, AGENT_CONNECT_OK, NULL), 0);
    ck_assert_uint_eq(b.len, 5 + 7 + 5 + 5 + 2);
    ck_assert_int_eq((unsigned char)b.data[0], 0);
    ck_assert_int_eq((unsigned char)b.data[4], 7);
    struct agent_connect_decoder d;
    agent_connect_decoder_init(&d, 1024);
    struct got g = {0};
    for (size_t i = 0; i < b.len; i++)
        ck_assert_int_eq(agent_connect_decoder_feed(&d, b.data + i, 1, on_msg, &g), 0);
    ck_assert(agent_connect_decoder_idle(&d));
    ck_assert_int_eq(g.n, 3);
    ck_assert_str_eq(g.msg[0], "{\"a\":1}");
    ck_assert_str_eq(g.msg[1], "");
    ck_assert_int_eq(g.flags[2], AGENT_CONNECT_FLAG_END_STREAM);
    ck_assert_str_eq(g.msg[2], "{}");
    agent_connect_decoder_free(&d);
    al_buf_free(&b);
}
END_TEST

START_TEST(decoder_rejects_compressed_unknown_and_oversized)
{
    struct agent_connect_decoder d;
    struct got g = {0};
    const uint8_t comp[] = {0x01, 0, 0, 0, 1, 'x'};
    agent_connect_decoder_init(&d, 16);
    ck_assert_int_eq(agent_connect_decoder_feed(&d, comp, sizeof comp, on_msg, &g), -EPROTO);
    ck_assert_ptr_nonnull(strstr(d.err, "compressed"));
    ck_assert_int_eq(agent_connect_decoder_feed(&d, "", 0, on_msg, &g), -EPROTO); /* sticky */
    agent_connect_decoder_free(&d);
    const uint8_t unk[] = {0x80, 0, 0, 0, 0};
    agent_connect_decoder_init(&d, 16);
    ck_assert_int_eq(agent_connect_decoder_feed(&d, unk, sizeof unk, on_msg, &g), -EPROTO);
    agent_connect_decoder_free(&d);
    const uint8_t big[] = {0, 0xff, 0xff, 0xff, 0xff};
    agent_connect_decoder_init(&d, 16);
    ck_assert_int_eq(agent_connect_decoder_feed(&d, big, sizeof big, on_msg, &g), -EMSGSIZE);
    agent_connect_decoder_free(&d);
    ck_assert_int_eq(g.n, 0);
}
END_TEST

START_TEST(decoder_partial_frame_is_not_idle)
{
    struct agent_connect_decoder d;
    struct got g = {0};
    agent_connect_decoder_init(&d, 16);
    const uint8_t part[] = {0, 0, 0, 0, 3, 'a'};
    ck_assert_int_eq(agent_connect_decoder_feed(&d, part, sizeof part, on_msg, &g), 0);
    ck_assert(!agent_connect_decoder_idle(&d));
    ck_assert_int_eq(agent_connect_decoder_feed(&d, "bc", 2, on_msg, &g), 0);
    ck_assert(agent_connect_decoder_idle(&d));
    ck_assert_str_eq(g.msg[0], "abc");
    agent_connect_decoder_free(&d);
}
END_TEST

START_TEST(unwrap_request_exactly_one_message)
{
    const uint8_t ok[] = {0, 0, 0, 0, 2, '{', '}'};
    const uint8_t *m;
    size_t ml;
    struct al_error e = {0};
    ck_assert_int_eq(agent_connect_unwrap_request(ok, sizeof ok, 64, &m, &ml, &e), 0);
    ck_assert_uint_eq(ml, 2);
    ck_assert_int_eq(memcmp(m, "{}", 2), 0);
    const uint8_t trailing[] = {0, 0, 0, 0, 1, '{', '}'};
    ck_assert_int_eq(agent_connect_unwrap_request(trailing, sizeof trailing, 64, &m, &ml, &e),
                     -EPROTO);
    ck_assert_ptr_nonnull(strstr(e.msg, "exactly one message"));
    ck_assert_int_eq(agent_connect_unwrap_request(ok, 3, 64, &m, &ml, &e), -EPROTO);
    const uint8_t end[] = {2, 0, 0, 0, 0};
    ck_assert_int_eq(agent_connect_unwrap_request(end, sizeof end, 64, &m, &ml, &e), -EPROTO);
    const uint8_t comp[] = {1, 0, 0, 0, 0};
    ck_assert_int_eq(agent_connect_unwrap_request(comp, sizeof comp, 64, &m, &ml, &e), -EPROTO);
    ck_assert_int_eq(agent_connect_unwrap_request(ok, sizeof ok, 1, &m, &ml, &e), -EMSGSIZE);
}
END_TEST

START_TEST(codes_names_and_statuses)
{
    ck_assert_str_eq(agent_connect_code_name(AGENT_CONNECT_NOT_FOUND), "not_found");
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_NOT_FOUND), 404);
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_UNAUTHENTICATED), 401);
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_RESOURCE_EXHAUSTED), 429);
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_INVALID_ARGUMENT), 400);
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_UNIMPLEMENTED), 501);
    ck_assert_int_eq(agent_connect_code_http_status(AGENT_CONNECT_UNAVAILABLE), 503);
    ck_assert_str_eq(agent_connect_code_name((enum agent_connect_code)99), "unknown");
    enum agent_connect_code c;
    ck_assert_int_eq(agent_connect_code_parse("already_exists", &c), 0);
    ck_assert_int_eq(c, AGENT_CONNECT_ALREADY_EXISTS);
    ck_assert_int_eq(agent_connect_code_parse("ok", &c), -EINVAL);
}
END_TEST

START_TEST(error_bodies)
{
    char *s = agent_connect_error_json(AGENT_CONNECT_NOT_FOUND, "process with pid 9 not found");
    ck_assert_str_eq(s, "{\"code\":\"not_found\",\"message\":\"process with pid 9 not found\"}");
    free(s);
    struct al_buf b;
    al_buf_init(&b, 0);
    agent_connect_end_stream_append(&b, AGENT_CONNECT_INVALID_ARGUMENT, "bad \"x\"");
    ck_assert_int_eq((unsigned char)b.data[0], 2);
    ck_assert_str_eq(b.data + 5,
                     "{\"error\":{\"code\":\"invalid_argument\",\"message\":\"bad \\\"x\\\"\"}}");
    al_buf_free(&b);
    /* invalid UTF-8 in a message still yields valid JSON */
    s = agent_connect_error_json(AGENT_CONNECT_INTERNAL, "bad \xff byte");
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"internal\""));
    free(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_connect");
    TCase *t = tcase_create("connect");
    tcase_add_test(t, frame_roundtrip_byte_by_byte);
    tcase_add_test(t, decoder_rejects_compressed_unknown_and_oversized);
    tcase_add_test(t, decoder_partial_frame_is_not_idle);
    tcase_add_test(t, unwrap_request_exactly_one_message);
    tcase_add_test(t, codes_names_and_statuses);
    tcase_add_test(t, error_bodies);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
