/* tests/unit/egress/intercept/test_inject: "HTTP inside" checks (request.c) and credential
 * injection with its gates and placeholders (inject.c), on decisions made by the real policy
 * library. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "al_test.h"
#include "egress/audit.h"
#include "egress/intercept/inject.h"

static const char POLICY[] = "version: 1\n"
                             "name: inject-test\n"
                             "rules:\n"
                             "  - name: gh\n"
                             "    hosts: [api.github.test]\n"
                             "    methods: [GET, POST]\n"
                             "    inject:\n"
                             "      - header: Authorization\n"
                             "        value: \"Bearer ${secret:github/token}\"\n"
                             "  - name: svc\n"
                             "    hosts: [svc.test]\n"
                             "    tls: inspect\n"
                             "    inject:\n"
                             "      - header: X-Api-Key\n"
                             "        placeholder: SERVICE_KEY\n"
                             "        secret: service/key\n"
                             "  - name: plain\n"
                             "    hosts: [plain.test]\n"
                             "    scheme: http\n"
                             "    allow_plaintext_inject: true\n"
                             "    inject:\n"
                             "      - header: X-Token\n"
                             "        value: \"${secret:github/token}\"\n"
                             "  - name: reported\n"
                             "    hosts: [rep.test]\n"
                             "    mode: report\n"
                             "    methods: [GET]\n"
                             "    inject:\n"
                             "      - header: Authorization\n"
                             "        value: \"Bearer ${secret:github/token}\"\n"
                             "  - name: echo\n"
                             "    hosts: [echo.test]\n"
                             "    tls: inspect\n";

static const char TOKEN[] = "ghp_RealTokenValue_0123456789abcdefXYZ";
static const char SVCKEY[] = "sk_live_ServiceKeyValue_987654321";

static struct policy *P;

static void setup(void)
{
    struct al_diags *d = NULL;
    (void)d;
    P = policy_load_buffer(POLICY, strlen(POLICY), "test.yaml", NULL);
    ck_assert_ptr_nonnull(P);
}

static void teardown(void)
{
    policy_unref(P);
}

static struct policy_decision decide(const char *host, const char *method, const char *path,
                                     bool tls)
{
    struct policy_decision d;
    struct policy_request r = {.host = host,
                               .host_len = strlen(host),
                               .port = (uint16_t)(tls ? 443 : 80),
                               .scheme = tls ? POLICY_SCHEME_HTTPS : POLICY_SCHEME_HTTP,
                               .method = method,
                               .method_len = strlen(method),
                               .path = path,
                               .path_len = strlen(path)};
    ck_assert_int_eq(policy_decide(P, &r, &d), 0);
    return d;
}

#define H(n, v)                            \
    {                                      \
        n, sizeof(n) - 1, v, sizeof(v) - 1 \
    }

/* intercept_request_check on a request egress_http_check_request accepted (egress/http.h:
 * its checks and their reasons are tests/unit/egress/test_http_head.c's). */
static int check(const char *sni, const char *host, struct intercept_req_info *info,
                 const char **reason)
{
    struct intercept_conn_view c = {.tls = sni != NULL, .sni = sni, .port = 443};
    struct egress_http_request r = {.target = "/a?b", .target_len = 4};
    snprintf(r.host_name, sizeof r.host_name, "%s", host);
    int status;
    return intercept_request_check(&c, &r, info, &status, reason);
}

START_TEST(host_must_be_sni)
{
    struct intercept_req_info info;
    const char *reason;
    ck_assert_int_eq(check("api.github.test", "api.github.test", &info, &reason), 0);
    ck_assert_str_eq(info.host.text, "api.github.test");
    ck_assert_int_eq((int)info.path_len, 4);
    ck_assert_int_eq(strncmp(info.path, "/a?b", 4), 0);
    /* Canonically the SNI. */
    ck_assert_int_eq(check("api.github.test", "API.GitHub.test.", &info, &reason), 0);
    ck_assert_int_eq(check("api.github.test", "evil.test", &info, &reason), -EPERM);
    ck_assert_str_eq(reason, "host_sni_mismatch");
    ck_assert_int_eq(check("api.github.test", "203.0.113.7", &info, &reason), -EPERM);
    ck_assert_str_eq(reason, "host_sni_mismatch");
    ck_assert_int_eq(check("api.github.test", "a..test", &info, &reason), -EPERM);
    ck_assert_str_eq(reason, "invalid_host");
    /* Plain HTTP: no SNI to compare. */
    ck_assert_int_eq(check(NULL, "plain.test", &info, &reason), 0);
    ck_assert_str_eq(info.host.text, "plain.test");
}
END_TEST

START_TEST(upgrade_responses)
{
    const char *reason;
    ck_assert_int_eq(intercept_response_check(101, false, &reason), -EPROTO);
    ck_assert_str_eq(reason, "unrequested_upgrade");
    ck_assert_int_eq(intercept_response_check(101, true, &reason), 0);
    ck_assert_int_eq(intercept_response_check(302, false, &reason),
                     0); /* redirects pass as they are */
}
END_TEST

/* ---- injection ---- */

static struct intercept_secret *gh_secret(const char *bound)
{
    const char *b[1] = {bound};
    return intercept_secret_new(&(struct intercept_secret_def){
        "github/token", TOKEN, strlen(TOKEN), "b2k:00000000000000000000000000000001", 3, b,
        bound ? 1 : 0});
}

struct run {
    struct intercept_inject_edit e;
    const char *reason;
    int rc;
};

static void apply(struct run *r, const char *sni, const char *host, const struct al_http_field *h,
                  size_t n, const char *target, const struct policy_decision *d,
                  struct intercept_secret **sec, size_t ns, const struct intercept_placeholders *ph)
{
    struct intercept_conn_view c = {
        .tls = sni != NULL, .sni = sni, .port = (uint16_t)(sni ? 443 : 80)};
    struct intercept_inject_ctx ctx = {.conn = &c,
                                       .host = host,
                                       .hdrs = h,
                                       .n_hdrs = n,
                                       .target = target,
                                       .target_len = strlen(target),
                                       .d = d,
                                       .secrets = sec,
                                       .n_secrets = ns,
                                       .ph = ph};
    ck_assert_int_eq(intercept_inject_edit_init(&r->e, n), 0);
    r->rc = intercept_inject_apply(&ctx, &r->e, &r->reason);
}

static const char *added(struct run *r, const char *name)
{
    for (size_t i = 0; i < r->e.n_add; i++)
        if (strcasecmp(r->e.add[i].name, name) == 0)
            return r->e.add[i].value;
    return NULL;
}

START_TEST(replace_mode)
{
    struct policy_decision d = decide("api.github.test", "GET", "/user", true);
    ck_assert_int_eq(d.n_inject, 1);
    const char *names[4];
    ck_assert_uint_eq(intercept_inject_secrets(&d, names, 4), 1);
    ck_assert_str_eq(names[0], "github/token");
    struct intercept_secret *s = gh_secret("api.github.test");
    struct al_http_field h[] = {H("Host", "api.github.test"),
                                H("authorization", "Bearer sandbox-own-token"), H("Accept", "*/*"),
                                H("Proxy-Authorization", "Basic eDp5"),
                                H("Authorization", "second copy")};
    struct run r;
    apply(&r, "api.github.test", "api.github.test", h, 5, "/user", &d, &s, 1, NULL);
    ck_assert_int_eq(r.rc, 0);
    ck_assert(!r.e.drop[0] && r.e.drop[1] && !r.e.drop[2] && r.e.drop[3] && r.e.drop[4]);
    ck_assert_uint_eq(r.e.n_add, 1);
    char want[128];
    snprintf(want, sizeof want, "Bearer %s", TOKEN);
    ck_assert_str_eq(added(&r, "Authorization"), want);
    ck_assert_uint_eq(r.e.n_injected, 1);
    ck_assert_uint_eq(r.e.n_used, 1);
    ck_assert_ptr_eq(r.e.used[0], s);
    struct egress_recw w;
    egress_recw_begin(&w, "http_request");
    intercept_inject_notes_write(&r.e, &w);
    const char *out;
    size_t len;
    ck_assert_int_eq(egress_recw_end(&w, &out, &len), 0);
    json_t *rec = json_loadb(out, len, 0, NULL); /* the writer's output is JSON */
    egress_recw_free(&w);
    ck_assert_ptr_nonnull(rec);
    ck_assert(json_is_array(json_object_get(rec, "inject")));
    char *txt = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    ck_assert_ptr_nonnull(strstr(txt, "\"header\":\"Authorization\""));
    ck_assert_ptr_nonnull(strstr(txt, "\"secret_id\":\"b2k:00000000000000000000000000000001\""));
    ck_assert_ptr_nonnull(strstr(txt, "\"outcome\":\"injected\""));
    ck_assert_ptr_null(strstr(txt, TOKEN)); /* never the value */
    free(txt);
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(s);
}
END_TEST

START_TEST(gates_refuse)
{
    struct policy_decision d = decide("api.github.test", "GET", "/user", true);
    struct al_http_field h[] = {H("Host", "api.github.test"), H("Authorization", "Bearer mine")};
    struct run r;
    /* bound hosts */
    struct intercept_secret *other = gh_secret("other.test");
    apply(&r, "api.github.test", "api.github.test", h, 2, "/", &d, &other, 1, NULL);
    ck_assert_int_eq(r.rc, -EPERM);
    ck_assert_str_eq(r.reason, "secret_not_bound_to_host");
    ck_assert(r.e.drop[1]); /* the sandbox's copy is gone anyway */
    ck_assert_uint_eq(r.e.n_add, 0);
    ck_assert_str_eq(r.e.notes[0].outcome, "refused");
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(other);
    /* Host != SNI */
    struct intercept_secret *s = gh_secret("api.github.test");
    apply(&r, "evil.test", "api.github.test", h, 2, "/", &d, &s, 1, NULL);
    ck_assert_int_eq(r.rc, -EPERM);
    ck_assert_str_eq(r.reason, "inject_host_sni_mismatch");
    intercept_inject_edit_free(&r.e);
    /* plaintext without the rule's permission (an https rule's inject over plain HTTP) */
    apply(&r, NULL, "api.github.test", h, 2, "/", &d, &s, 1, NULL);
    ck_assert_int_eq(r.rc, -EPERM);
    ck_assert_str_eq(r.reason, "plaintext_inject");
    ck_assert(r.e.drop[1]);
    intercept_inject_edit_free(&r.e);
    /* the value was not fetched */
    apply(&r, "api.github.test", "api.github.test", h, 2, "/", &d, NULL, 0, NULL);
    ck_assert_str_eq(r.reason, "secret_unavailable");
    intercept_inject_edit_free(&r.e);
    /* a value that would split the header */
    const char *b[1] = {"api.github.test"};
    struct intercept_secret *crlf = intercept_secret_new(
        &(struct intercept_secret_def){"github/token", "tok\r\nX-Evil: 1", 15, "b2k:x", 1, b, 1});
    apply(&r, "api.github.test", "api.github.test", h, 2, "/", &d, &crlf, 1, NULL);
    ck_assert_str_eq(r.reason, "secret_not_header_safe");
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(crlf);
    /* plain HTTP where the rule allows it */
    struct policy_decision dp = decide("plain.test", "GET", "/", false);
    ck_assert_int_eq(dp.n_inject, 1);
    struct intercept_secret *any = gh_secret(NULL);
    struct al_http_field hp[] = {H("Host", "plain.test"), H("x-token", "mine")};
    apply(&r, NULL, "plain.test", hp, 2, "/", &dp, &any, 1, NULL);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(added(&r, "X-Token"), TOKEN);
    ck_assert(r.e.drop[1]);
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(any);
    intercept_secret_unref(s);
}
END_TEST

START_TEST(report_mode_never_injects)
{
    struct policy_decision d = decide("rep.test", "POST", "/x", true); /* methods: [GET] */
    ck_assert_int_eq(d.verdict, POLICY_ALLOW);
    ck_assert(d.would_deny);
    struct intercept_secret *s = gh_secret(NULL);
    struct al_http_field h[] = {H("Host", "rep.test"), H("Authorization", "Bearer mine")};
    struct run r;
    apply(&r, "rep.test", "rep.test", h, 2, "/x", &d, &s, 1, NULL);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.e.n_add, 0);
    ck_assert(r.e.drop[1]);
    ck_assert_str_eq(r.e.notes[0].outcome, "skipped");
    ck_assert_str_eq(r.e.notes[0].reason, "report_mode");
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(s);
}
END_TEST

static struct intercept_placeholders *make_ph(const struct intercept_placeholders *prev)
{
    struct intercept_placeholders *ph = NULL;
    struct al_error err = {0};
    ck_assert_int_eq(intercept_placeholders_new(P, prev, &ph, &err), 0);
    ck_assert_ptr_nonnull(ph);
    return ph;
}

START_TEST(placeholders_generated)
{
    struct intercept_placeholders *ph = make_ph(NULL);
    ck_assert_uint_eq(intercept_placeholders_count(ph), 1);
    ck_assert_str_eq(intercept_placeholder_env(ph, 0), "SERVICE_KEY");
    ck_assert_str_eq(intercept_placeholder_secret(ph, 0), "service/key");
    const char *v = intercept_placeholder_value(ph, 0);
    ck_assert_int_eq(strncmp(v, "alph_", 5), 0);
    ck_assert_uint_eq(strlen(v), 45);
    json_t *env = intercept_placeholders_env_json(ph);
    ck_assert_str_eq(json_string_value(json_object_get(env, "SERVICE_KEY")), v);
    json_decref(env);
    struct intercept_placeholders *again = make_ph(ph); /* a reload keeps it */
    ck_assert_str_eq(intercept_placeholder_value(again, 0), v);
    /* Restored from what the control plane kept (an earlier registration). */
    json_t *keep = json_pack("{s:s,s:s}", "SERVICE_KEY", v, "OTHER",
                             "alph_0000000000000000000000000000000000000000");
    struct intercept_placeholders *restored = NULL;
    ck_assert_int_eq(intercept_placeholders_restore(P, keep, &restored, NULL), 0);
    ck_assert_str_eq(intercept_placeholder_value(restored, 0), v);
    intercept_placeholders_unref(restored);
    json_object_set_new(keep, "SERVICE_KEY", json_string("not-a-placeholder"));
    ck_assert_int_eq(intercept_placeholders_restore(P, keep, &restored, NULL), 0);
    ck_assert_str_ne(intercept_placeholder_value(restored, 0), v);
    ck_assert_int_eq(strncmp(intercept_placeholder_value(restored, 0), "alph_", 5), 0);
    intercept_placeholders_unref(restored);
    json_decref(keep);
    struct intercept_placeholders *other = make_ph(NULL); /* another sandbox: another value */
    ck_assert_str_ne(intercept_placeholder_value(other, 0), v);
    intercept_placeholders_unref(ph);
    intercept_placeholders_unref(again);
    intercept_placeholders_unref(other);
}
END_TEST

START_TEST(placeholder_swap)
{
    struct intercept_placeholders *ph = make_ph(NULL);
    const char *pv = intercept_placeholder_value(ph, 0);
    const char *b[1] = {"svc.test"};
    struct intercept_secret *s = intercept_secret_new(
        &(struct intercept_secret_def){"service/key", SVCKEY, strlen(SVCKEY), "b2k:svc", 1, b, 1});
    struct policy_decision d = decide("svc.test", "GET", "/v1/items", true);
    char hv[128];
    snprintf(hv, sizeof hv, "Bearer %s", pv);
    struct al_http_field h[] = {{"Host", 4, "svc.test", 8}, {"X-Api-Key", 9, hv, strlen(hv)}};
    struct run r;
    apply(&r, "svc.test", "svc.test", h, 2, "/v1/items", &d, &s, 1, ph);
    ck_assert_int_eq(r.rc, 0);
    char want[128];
    snprintf(want, sizeof want, "Bearer %s", SVCKEY);
    ck_assert_str_eq(added(&r, "X-Api-Key"), want);
    ck_assert(r.e.drop[1]);
    ck_assert(r.e.notes[0].placeholder);
    intercept_inject_edit_free(&r.e);

    /* Basic auth carrying the placeholder as the password. */
    char up[128], b64[256], basic[300];
    snprintf(up, sizeof up, "x-access-token:%s", pv);
    sodium_bin2base64(b64, sizeof b64, (unsigned char *)up, strlen(up),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(basic, sizeof basic, "Basic %s", b64);
    struct al_http_field hb[] = {{"Host", 4, "svc.test", 8},
                                 {"x-api-key", 9, basic, strlen(basic)}};
    apply(&r, "svc.test", "svc.test", hb, 2, "/", &d, &s, 1, ph);
    ck_assert_int_eq(r.rc, 0);
    const char *got = added(&r, "X-Api-Key");
    ck_assert_int_eq(strncmp(got, "Basic ", 6), 0);
    unsigned char dec[256];
    size_t dl = 0;
    ck_assert_int_eq(sodium_base642bin(dec, sizeof dec, got + 6, strlen(got + 6), NULL, &dl, NULL,
                                       sodium_base64_VARIANT_ORIGINAL),
                     0);
    char want2[128];
    snprintf(want2, sizeof want2, "x-access-token:%s", SVCKEY);
    ck_assert_uint_eq(dl, strlen(want2));
    ck_assert(memcmp(dec, want2, dl) == 0);
    intercept_inject_edit_free(&r.e);

    /* The header without the placeholder: removed, nothing injected. */
    struct al_http_field hn[] = {H("Host", "svc.test"), H("X-Api-Key", "sandbox-own-key")};
    apply(&r, "svc.test", "svc.test", hn, 2, "/", &d, &s, 1, ph);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.e.n_add, 0);
    ck_assert(r.e.drop[1]);
    ck_assert_str_eq(r.e.notes[0].outcome, "removed");
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(s);
    intercept_placeholders_unref(ph);
}
END_TEST

START_TEST(placeholder_misuse_refused)
{
    struct intercept_placeholders *ph = make_ph(NULL);
    const char *pv = intercept_placeholder_value(ph, 0);
    const char *b[1] = {"svc.test"};
    struct intercept_secret *s = intercept_secret_new(
        &(struct intercept_secret_def){"service/key", SVCKEY, strlen(SVCKEY), "b2k:svc", 1, b, 1});
    struct intercept_secret *g = gh_secret("api.github.test");
    struct run r;
    char target[200];
    /* in the target (query string) */
    snprintf(target, sizeof target, "/v1/items?key=%s", pv);
    struct policy_decision d = decide("svc.test", "GET", "/v1/items", true);
    struct al_http_field h[] = {H("Host", "svc.test")};
    apply(&r, "svc.test", "svc.test", h, 1, target, &d, &s, 1, ph);
    ck_assert_int_eq(r.rc, -EPERM);
    ck_assert_str_eq(r.reason, "placeholder_misuse");
    ck_assert(r.e.placeholder_misuse);
    ck_assert_str_eq(r.e.misuse_where, "target");
    ck_assert_str_eq(r.e.misuse_secret, "service/key");
    intercept_inject_edit_free(&r.e);
    /* in another header */
    struct al_http_field h2[] = {{"Host", 4, "svc.test", 8}, {"X-Other", 7, pv, strlen(pv)}};
    apply(&r, "svc.test", "svc.test", h2, 2, "/", &d, &s, 1, ph);
    ck_assert_str_eq(r.reason, "placeholder_misuse");
    ck_assert_str_eq(r.e.misuse_where, "X-Other");
    intercept_inject_edit_free(&r.e);
    /* base64-encoded, toward a host whose rule injects nothing */
    char b64[128];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)pv, strlen(pv),
                      sodium_base64_VARIANT_URLSAFE);
    struct policy_decision de = decide("echo.test", "POST", "/post", true);
    struct al_http_field h3[] = {{"Host", 4, "echo.test", 9}, {"Cookie", 6, b64, strlen(b64)}};
    apply(&r, "echo.test", "echo.test", h3, 2, "/post", &de, NULL, 0, ph);
    ck_assert_str_eq(r.reason, "placeholder_misuse");
    intercept_inject_edit_free(&r.e);
    /* in the header of another rule's replace-mode entry */
    struct policy_decision dg = decide("api.github.test", "GET", "/", true);
    struct al_http_field h4[] = {{"Host", 4, "api.github.test", 15},
                                 {"Authorization", 13, pv, strlen(pv)}};
    apply(&r, "api.github.test", "api.github.test", h4, 2, "/", &dg, &g, 1, ph);
    ck_assert_str_eq(r.reason, "placeholder_misuse");
    intercept_inject_edit_free(&r.e);
    /* the right header, but the secret is not bound to this host */
    const char *b2[1] = {"elsewhere.test"};
    struct intercept_secret *unb = intercept_secret_new(
        &(struct intercept_secret_def){"service/key", SVCKEY, strlen(SVCKEY), "b2k:svc", 1, b2, 1});
    struct al_http_field h5[] = {{"Host", 4, "svc.test", 8}, {"X-Api-Key", 9, pv, strlen(pv)}};
    apply(&r, "svc.test", "svc.test", h5, 2, "/", &d, &unb, 1, ph);
    ck_assert_int_eq(r.rc, -EPERM);
    ck_assert_str_eq(r.reason, "secret_not_bound_to_host");
    intercept_inject_edit_free(&r.e);
    /* in a header that is never forwarded (Proxy-*): harmless */
    struct al_http_field h6[] = {{"Host", 4, "echo.test", 9},
                                 {"Proxy-Authorization", 19, pv, strlen(pv)}};
    apply(&r, "echo.test", "echo.test", h6, 2, "/", &de, NULL, 0, ph);
    ck_assert_int_eq(r.rc, 0);
    ck_assert(r.e.drop[1]);
    intercept_inject_edit_free(&r.e);
    intercept_secret_unref(unb);
    intercept_secret_unref(s);
    intercept_secret_unref(g);
    intercept_placeholders_unref(ph);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_inject");
    TCase *tc = tcase_create("inject");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, host_must_be_sni);
    tcase_add_test(tc, upgrade_responses);
    tcase_add_test(tc, replace_mode);
    tcase_add_test(tc, gates_refuse);
    tcase_add_test(tc, report_mode_never_injects);
    tcase_add_test(tc, placeholders_generated);
    tcase_add_test(tc, placeholder_swap);
    tcase_add_test(tc, placeholder_misuse_refused);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
