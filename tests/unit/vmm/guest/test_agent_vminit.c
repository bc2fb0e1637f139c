/* Unit tests: the init fields only a KVM guest's PID 1 applies (vmm/guest/vmguest.c):
 * timestamp, seed, network and hostname are validated before anything changes, and outside
 * a KVM guest applying them changes nothing (the host's clock stays the host's); the
 * template's agent settings ("agent") in the init object (agent.c). */
#include "al_test.h"
#include "vmm/guest/agent.h"

#include <string.h>
#include <time.h>

static int parse(const char *json, struct agent_vm_init *v, struct al_error *e)
{
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    ck_assert_msg(o, "bad test JSON %s", json);
    int r = agent_vm_parse(o, v, e);
    json_decref(o);
    return r;
}

START_TEST(valid_fields_parse)
{
    struct agent_vm_init v;
    struct al_error e = {0};
    /* 32 bytes of seed, base64 */
    ck_assert_int_eq(parse("{\"timestamp\":\"2026-11-30T10:00:01.5Z\","
                           "\"seed\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\","
                           "\"network\":{\"address\":\"10.200.0.2/30\",\"gateway\":\"10.200.0.1\","
                           "\"dns\":[\"10.200.0.1\",\"192.0.2.53\"],\"mac\":\"02:00:0a:c8:00:02\"},"
                           "\"hostname\":\"sbx-1\"}",
                           &v, &e),
                     0);
    ck_assert(v.have_ts);
    ck_assert_uint_eq(v.ts_ns, 1796032801ull * 1000000000ull + 500000000ull);
    ck_assert_uint_eq(v.seed_len, 32);
    ck_assert_uint_eq(v.seed[31], 31);
    ck_assert(v.have_net);
    ck_assert_str_eq(v.address, "10.200.0.2/30");
    ck_assert_str_eq(v.gateway, "10.200.0.1");
    ck_assert_str_eq(v.dns, "10.200.0.1,192.0.2.53");
    ck_assert_str_eq(v.mac, "02:00:0a:c8:00:02");
    ck_assert_str_eq(v.hostname, "sbx-1");
    /* Nothing asked: nothing set. An empty hostname keeps the current one (envd). */
    ck_assert_int_eq(parse("{\"envVars\":{},\"hostname\":\"\"}", &v, &e), 0);
    ck_assert(!v.have_ts && !v.seed_len && !v.have_net && !v.hostname[0]);
}
END_TEST

START_TEST(bad_fields_are_refused_with_a_reason)
{
    struct agent_vm_init v;
    static const struct {
        const char *json, *why;
    } bad[] = {
        {"{\"timestamp\":\"yesterday\"}", "RFC 3339"},
        {"{\"timestamp\":12345}", "timestamp"},
        {"{\"seed\":\"AAEC\"}", "16..512"},
        {"{\"seed\":\"!!!!\"}", "base64"},
        {"{\"network\":\"10.0.0.2\"}", "object"},
        {"{\"network\":{\"gateway\":\"10.0.0.1\"}}", "address is required"},
        {"{\"network\":{\"address\":\"10.0.0.2/24 gw=1.2.3.4\"}}", "character"},
        {"{\"network\":{\"address\":\"10.0.0.2/24\",\"routes\":[]}}", "not a known key"},
        {"{\"network\":{\"address\":\"10.0.0.2/24\",\"dns\":[\"a\",\"b\",\"c\",\"d\"]}}",
         "at most 3"},
        {"{\"network\":{\"address\":\"10.0.0.2/24\",\"dns\":[\"x;y\"]}}", "character"},
        {"{\"hostname\":\"-bad\"}", "host name"},
        {"{\"hostname\":\"a b\"}", "host name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct al_error e = {0};
        ck_assert_msg(parse(bad[i].json, &v, &e) == -EINVAL, "%s accepted", bad[i].json);
        ck_assert_msg(strstr(e.msg, bad[i].why), "%s: message '%s' lacks '%s'", bad[i].json, e.msg,
                      bad[i].why);
    }
}
END_TEST

START_TEST(outside_a_vm_nothing_is_applied)
{
    struct agent a;
    memset(&a, 0, sizeof a);
    a.vm_guest = false;
    struct agent_vm_init v;
    struct al_error e = {0};
    ck_assert_int_eq(parse("{\"timestamp\":\"2001-01-01T00:00:00Z\","
                           "\"seed\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\","
                           "\"network\":{\"address\":\"10.200.0.2/30\"}}",
                           &v, &e),
                     0);
    ck_assert_int_eq(agent_vm_apply(&a, &v, &e), 0);
    /* The clock was not stepped back to 2001 (the test may run as root). */
    ck_assert(time(NULL) > 1700000000);
    ck_assert(!agent_vm_guest_detect()); /* a test is not PID 1 of a KVM guest */
}
END_TEST

static int apply(struct agent *a, const char *json, struct al_error *e)
{
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    ck_assert_msg(o, "bad test JSON %s", json);
    int r = agent_apply_init(a, o, e);
    json_decref(o);
    return r;
}

START_TEST(template_agent_settings)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct agent a;
    memset(&a, 0, sizeof a);
    agent_limits_default(&a.lim);
    struct al_error e = {0};
    ck_assert_int_eq(agent_init(&a, &loop, &e), 0);
    ck_assert(!a.code_interpreter);
    ck_assert_int_eq(apply(&a, "{\"agent\":{\"code_interpreter\":true}}", &e), 0);
    ck_assert(a.code_interpreter);
    /* Absent, empty or null: unchanged. */
    ck_assert_int_eq(apply(&a, "{\"envVars\":{}}", &e), 0);
    ck_assert_int_eq(apply(&a, "{\"agent\":{}}", &e), 0);
    ck_assert_int_eq(apply(&a, "{\"agent\":null}", &e), 0);
    ck_assert(a.code_interpreter);
    static const char *const bad[] = {"{\"agent\":5}", "{\"agent\":{\"code_interpreter\":1}}",
                                      "{\"agent\":{\"code_interpreter\":\"yes\"}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct al_error be = {0};
        ck_assert_msg(apply(&a, bad[i], &be) == -EINVAL, "%s accepted", bad[i]);
        ck_assert_msg(strstr(be.msg, "code_interpreter"), "%s: %s", bad[i], be.msg);
    }
    ck_assert(a.code_interpreter); /* a refused init changed nothing */
    ck_assert_int_eq(apply(&a, "{\"agent\":{\"code_interpreter\":false}}", &e), 0);
    ck_assert(!a.code_interpreter);
    agent_free(&a);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_vminit");
    TCase *t = tcase_create("vminit");
    tcase_add_test(t, valid_fields_parse);
    tcase_add_test(t, bad_fields_are_refused_with_a_reason);
    tcase_add_test(t, outside_a_vm_nothing_is_applied);
    tcase_add_test(t, template_agent_settings);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
