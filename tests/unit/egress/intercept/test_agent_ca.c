/* tests/unit/egress/intercept/test_agent_ca: the agent's installation of the sandbox CA (init
 * "caCertPem", vmm/guest/trust.c): files, bundle merging, refusals, the environment of
 * processes, and a leaf of the CA verifying against the installed bundle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mbedtls/pem.h>

#include "al_test.h"
#include "common/buf.h"
#include "egress/intercept/ca.h"
#include "vmm/guest/agent.h"

static char root[256];

static void setup(void)
{
    al_test_tmpdir(root, sizeof root, "icpt-agentca");
}

static void teardown(void)
{
    ck_assert_int_eq(al_test_rmtree(root), 0);
}

static struct intercept_ca *new_ca(void)
{
    const char *names[] = {"api.github.test"};
    struct intercept_ca_opts o = {.sandbox_id = "sb-agent", .names = names, .n_names = 1};
    struct intercept_ca *ca;
    ck_assert_int_eq(intercept_ca_new(&o, &ca, NULL), 0);
    return ca;
}

static char *slurp(const char *rel)
{
    char p[600];
    snprintf(p, sizeof p, "%s%s", root, rel);
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    static char buf[4 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strdup(buf);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

START_TEST(pem_checks)
{
    struct intercept_ca *ca = new_ca();
    const char *pem = intercept_ca_pem(ca);
    struct al_error err = {0};
    ck_assert_int_eq(agent_ca_check(pem, strlen(pem), &err), 0);
    ck_assert_int_eq(agent_ca_check("hello", 5, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a PEM certificate"));
    char two[8192];
    snprintf(two, sizeof two, "%s%s", pem, pem);
    ck_assert_int_eq(agent_ca_check(two, strlen(two), &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than one"));
    char bad[8192];
    snprintf(bad, sizeof bad, "%s", pem);
    bad[40] = '\x01';
    ck_assert_int_eq(agent_ca_check(bad, strlen(bad), &err), -EINVAL);
    ck_assert_int_eq(agent_ca_check("", 0, &err), -EINVAL);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(bundle_merge)
{
    struct al_buf out = AL_BUF_INIT;
    const char *pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    ck_assert_int_eq(agent_ca_bundle_merge(NULL, 0, pem, strlen(pem), &out), 0);
    ck_assert_int_eq(count(out.data, "-- begin"), 1);
    ck_assert_int_eq(count(out.data, "AAAA"), 1);
    const char *old =
        "-----BEGIN CERTIFICATE-----\nROOT1\n-----END CERTIFICATE-----"; /* no final newline */
    ck_assert_int_eq(agent_ca_bundle_merge(old, strlen(old), pem, strlen(pem), &out), 0);
    ck_assert_int_eq(strncmp(out.data, old, strlen(old)), 0);
    ck_assert_int_eq(out.data[strlen(old)], '\n');
    char *first = strdup(out.data);
    const char *pem2 = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n";
    ck_assert_int_eq(agent_ca_bundle_merge(first, strlen(first), pem2, strlen(pem2), &out), 0);
    ck_assert_int_eq(count(out.data, "-- begin"), 1); /* replaced, not added */
    ck_assert_int_eq(count(out.data, "AAAA"), 0);
    ck_assert_int_eq(count(out.data, "BBBB"), 1);
    ck_assert_int_eq(count(out.data, "ROOT1"), 1);
    free(first);
    al_buf_free(&out);
}
END_TEST

START_TEST(install_and_environment)
{
    struct intercept_ca *ca = new_ca();
    const char *pem = intercept_ca_pem(ca);
    struct agent a;
    memset(&a, 0, sizeof a);
    a.env = json_object();
    a.path_env = strdup("/usr/bin:/bin");
    struct al_error err = {0};
    /* Not init and no --ca-root: refused, nothing written. */
    json_t *init = json_pack("{s:s}", "caCertPem", pem);
    ck_assert_int_eq(agent_apply_init(&a, init, &err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err.msg, "--ca-root"));
    ck_assert(!a.ca_installed);
    /* With a root that has a system bundle already. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/etc/ssl/certs && cp /etc/ssl/certs/ca-certificates.crt %s/etc/ssl/certs/ "
             "2>/dev/null || "
             "printf '' > %s/etc/ssl/certs/ca-certificates.crt",
             root, root, root);
    ck_assert_int_eq(system(cmd), 0);
    char *before = slurp(AGENT_CA_BUNDLE);
    a.ca_root = strdup(root);
    ck_assert_msg(agent_apply_init(&a, init, &err) == 0, "%s", err.msg);
    ck_assert(a.ca_installed);
    char *file = slurp(AGENT_CA_FILE), *bundle = slurp(AGENT_CA_BUNDLE);
    ck_assert_ptr_nonnull(file);
    ck_assert_str_eq(file, pem);
    ck_assert_int_eq(strncmp(bundle, before, strlen(before)), 0); /* the other roots stay */
    ck_assert_ptr_nonnull(strstr(bundle, pem));
    struct stat st;
    char p[600];
    snprintf(p, sizeof p, "%s%s", root, AGENT_CA_BUNDLE);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0644);
    /* A new CA (egress restarted): still one airlock block. */
    struct intercept_ca *ca2 = new_ca();
    json_t *init2 = json_pack("{s:s,s:{s:s}}", "ca_cert_pem", intercept_ca_pem(ca2), "envVars",
                              "SSL_CERT_FILE", "/custom/bundle.pem");
    ck_assert_int_eq(agent_apply_init(&a, init2, &err), 0);
    free(bundle);
    bundle = slurp(AGENT_CA_BUNDLE);
    ck_assert_int_eq(count(bundle, "airlock sandbox CA (egress interception) -- begin"), 1);
    ck_assert_ptr_null(strstr(bundle, pem));
    ck_assert_ptr_nonnull(strstr(bundle, intercept_ca_pem(ca2)));
    /* Processes get the variables; the template's/caller's values win. */
    struct agent_user u = {.uid = getuid(), .gid = getgid()};
    snprintf(u.name, sizeof u.name, "tester");
    snprintf(u.home, sizeof u.home, "/tmp");
    char **env = agent_child_env(&a, &u, NULL, NULL);
    char want[700];
    bool ssl = false, req = false, curl = false, node = false;
    for (char **e = env; *e; e++) {
        snprintf(want, sizeof want, "REQUESTS_CA_BUNDLE=%s%s", root, AGENT_CA_BUNDLE);
        req |= strcmp(*e, want) == 0;
        snprintf(want, sizeof want, "CURL_CA_BUNDLE=%s%s", root, AGENT_CA_BUNDLE);
        curl |= strcmp(*e, want) == 0;
        snprintf(want, sizeof want, "NODE_EXTRA_CA_CERTS=%s%s", root, AGENT_CA_FILE);
        node |= strcmp(*e, want) == 0;
        ssl |= strcmp(*e, "SSL_CERT_FILE=/custom/bundle.pem") == 0;
    }
    ck_assert(ssl && req && curl && node);
    agent_free_strv(env);
    /* A leaf of the installed CA verifies against the installed bundle (what OpenSSL in the
     * sandbox does). */
    struct intercept_leaf *l;
    ck_assert_int_eq(intercept_ca_leaf(ca2, "api.github.test", &l, NULL), 0);
    unsigned char lp[4096];
    size_t ol = 0;
    ck_assert_int_eq(mbedtls_pem_write_buffer("-----BEGIN CERTIFICATE-----\n",
                                              "-----END CERTIFICATE-----\n",
                                              intercept_leaf_crt(l)->raw.p,
                                              intercept_leaf_crt(l)->raw.len, lp, sizeof lp, &ol),
                     0);
    snprintf(p, sizeof p, "%s/leaf.pem", root);
    FILE *f = fopen(p, "w");
    fputs((char *)lp, f);
    fclose(f);
    snprintf(
        cmd, sizeof cmd,
        "openssl verify -CAfile %s%s -verify_hostname api.github.test %s/leaf.pem >/dev/null 2>&1",
        root, AGENT_CA_BUNDLE, root);
    ck_assert_int_eq(system(cmd), 0);
    intercept_leaf_unref(l);
    json_decref(init);
    json_decref(init2);
    free(before);
    free(file);
    free(bundle);
    json_decref(a.env);
    free(a.ca_root);
    free(a.path_env);
    intercept_ca_unref(ca);
    intercept_ca_unref(ca2);
}
END_TEST

START_TEST(bad_pem_changes_nothing)
{
    struct agent a;
    memset(&a, 0, sizeof a);
    a.env = json_object();
    a.ca_root = strdup(root);
    struct al_error err = {0};
    json_t *init =
        json_pack("{s:s,s:s}", "caCertPem", "not a certificate", "defaultUser", "someone");
    ck_assert_int_eq(agent_apply_init(&a, init, &err), -EINVAL);
    ck_assert_ptr_null(a.default_user); /* validated before anything changed */
    ck_assert_ptr_null(slurp(AGENT_CA_BUNDLE));
    json_decref(init);
    json_decref(a.env);
    free(a.ca_root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_agent_ca");
    TCase *tc = tcase_create("agent_ca");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pem_checks);
    tcase_add_test(tc, bundle_merge);
    tcase_add_test(tc, install_and_environment);
    tcase_add_test(tc, bad_pem_changes_nothing);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
