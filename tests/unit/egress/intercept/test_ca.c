/* tests/unit/egress/intercept/test_ca: the per-sandbox CA (name constraints, checked with openssl)
 * and the leaf cache. */
#include <errno.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/pem.h>

#include "al_test.h"
#include "egress/intercept/ca.h"

static char tmpdir[256];

static void setup(void)
{
    al_test_tmpdir(tmpdir, sizeof tmpdir, "icpt-ca");
}

static void teardown(void)
{
    al_test_rmtree(tmpdir);
}

static void write_file(const char *name, const char *text)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void write_leaf(const char *name, struct intercept_leaf *l)
{
    mbedtls_x509_crt *c = intercept_leaf_crt(l);
    unsigned char pem[4096];
    size_t olen = 0;
    ck_assert_int_eq(mbedtls_pem_write_buffer("-----BEGIN CERTIFICATE-----\n",
                                              "-----END CERTIFICATE-----\n", c->raw.p, c->raw.len,
                                              pem, sizeof pem, &olen),
                     0);
    write_file(name, (const char *)pem);
}

/* Runs a command, returns its exit status; its output (stdout+stderr) in out. */
static int run(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t outlen, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strcat(cmd, " 2>&1");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static struct intercept_ca *make_ca(const char *const *names, size_t n, size_t max_leaves)
{
    struct intercept_ca_opts o = {
        .sandbox_id = "sb-test-1", .names = names, .n_names = n, .max_leaves = max_leaves};
    struct intercept_ca *ca = NULL;
    struct al_error err = {0};
    int r = intercept_ca_new(&o, &ca, &err);
    ck_assert_msg(r == 0, "intercept_ca_new: %s", al_error_str(&err));
    return ca;
}

START_TEST(subtrees_from_patterns)
{
    const char *pats[] = {"api.github.test",  "*.example.test",    "**.deep.example.test",
                          "api-*.other.test", "x.api.github.test", "example.test"};
    char **b;
    size_t n;
    struct al_error err = {0};
    ck_assert_int_eq(intercept_ca_subtrees_for(pats, 6, &b, &n, &err), 0);
    /* example.test covers *.example.test and **.deep.example.test; api.github.test covers
     * x.api.github.test. */
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(b[0], "other.test");
    ck_assert_str_eq(b[1], "example.test");
    ck_assert_str_eq(b[2], "api.github.test");
    intercept_strv_free(b, n);

    const char *bad[] = {"api.github.test", "not a name"};
    ck_assert_int_eq(intercept_ca_subtrees_for(bad, 2, &b, &n, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a name"));
}
END_TEST

START_TEST(subtree_matching)
{
    ck_assert(intercept_name_in_subtree("example.test", "example.test"));
    ck_assert(intercept_name_in_subtree("a.example.test", "example.test"));
    ck_assert(intercept_name_in_subtree("a.b.example.test", "example.test"));
    ck_assert(!intercept_name_in_subtree("evilexample.test", "example.test"));
    ck_assert(!intercept_name_in_subtree("example.test.evil.net", "example.test"));
    ck_assert(!intercept_name_in_subtree("xample.test", "example.test"));
    ck_assert(!intercept_name_in_subtree(".example.test", "example.test"));
}
END_TEST

START_TEST(ca_certificate_fields)
{
    const char *names[] = {"api.github.test", "*.example.test"};
    struct intercept_ca *ca = make_ca(names, 2, 0);
    const char *pem = intercept_ca_pem(ca);
    ck_assert_ptr_nonnull(strstr(pem, "-----BEGIN CERTIFICATE-----"));
    ck_assert_int_eq(strncmp(intercept_ca_fingerprint(ca), "sha256:", 7), 0);
    ck_assert_uint_eq(strlen(intercept_ca_fingerprint(ca)), 7 + 64);
    write_file("ca.pem", pem);
    char out[16384];
    ck_assert_int_eq(run(out, sizeof out, "openssl x509 -in %s/ca.pem -noout -text", tmpdir), 0);
    ck_assert_msg(strstr(out, "X509v3 Name Constraints: critical"), "%s", out);
    ck_assert_msg(strstr(out, "DNS:api.github.test"), "%s", out);
    ck_assert_msg(strstr(out, "DNS:example.test"), "%s", out);
    ck_assert_msg(strstr(out, "IP:0.0.0.0/0.0.0.0"), "%s", out);
    ck_assert_msg(strstr(out, "IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"), "%s", out);
    ck_assert_msg(strstr(out, "CA:TRUE, pathlen:0"), "%s", out);
    ck_assert_msg(strstr(out, "Certificate Sign"), "%s", out);
    ck_assert_msg(strstr(out, "TLS Web Server Authentication"), "%s", out);
    ck_assert_msg(strstr(out, "ASN1 OID: prime256v1"), "%s", out);
    ck_assert_msg(strstr(out, "airlock sandbox CA sb-test-1"), "%s", out);
    /* No private key material anywhere in what is handed out. */
    ck_assert_ptr_null(strstr(pem, "PRIVATE"));
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(openssl_accepts_inside_rejects_outside)
{
    const char *names[] = {"api.github.test", "*.example.test"};
    struct intercept_ca *ca = make_ca(names, 2, 0);
    write_file("ca.pem", intercept_ca_pem(ca));
    struct al_error err = {0};
    struct intercept_leaf *in1, *in2, *out1, *out2;
    ck_assert_int_eq(intercept_ca_leaf(ca, "api.github.test", &in1, &err), 0);
    ck_assert_int_eq(intercept_ca_leaf(ca, "a.example.test", &in2, &err), 0);
    ck_assert_int_eq(intercept_ca__mint_unchecked(ca, "evil.test", &out1), 0);
    ck_assert_int_eq(intercept_ca__mint_unchecked(ca, "api.github.test.evil.test", &out2), 0);
    write_leaf("in1.pem", in1);
    write_leaf("in2.pem", in2);
    write_leaf("out1.pem", out1);
    write_leaf("out2.pem", out2);
    char out[8192];
    int st = run(out, sizeof out,
                 "openssl verify -CAfile %s/ca.pem -purpose sslserver -verify_hostname "
                 "api.github.test %s/in1.pem",
                 tmpdir, tmpdir);
    ck_assert_msg(st == 0, "inside leaf refused: %s", out);
    st = run(out, sizeof out,
             "openssl verify -CAfile %s/ca.pem -purpose sslserver -verify_hostname a.example.test "
             "%s/in2.pem",
             tmpdir, tmpdir);
    ck_assert_msg(st == 0, "inside leaf refused: %s", out);
    /* The hostname check itself works (a valid leaf, the wrong name). */
    st = run(out, sizeof out,
             "openssl verify -CAfile %s/ca.pem -purpose sslserver -verify_hostname other.test "
             "%s/in1.pem",
             tmpdir, tmpdir);
    ck_assert_msg(st != 0, "wrong hostname accepted: %s", out);
    /* Leaves the CA's key could sign but the constraints forbid. */
    st = run(out, sizeof out,
             "openssl verify -CAfile %s/ca.pem -purpose sslserver -verify_hostname evil.test "
             "%s/out1.pem",
             tmpdir, tmpdir);
    ck_assert_msg(st != 0 && strstr(out, "permitted subtree violation"),
                  "outside leaf accepted: %s", out);
    st = run(out, sizeof out, "openssl verify -CAfile %s/ca.pem -purpose sslserver %s/out2.pem",
             tmpdir, tmpdir);
    ck_assert_msg(st != 0 && strstr(out, "permitted subtree violation"),
                  "outside leaf accepted: %s", out);
    intercept_leaf_unref(in1);
    intercept_leaf_unref(in2);
    intercept_leaf_unref(out1);
    intercept_leaf_unref(out2);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(leaf_fields)
{
    const char *names[] = {"api.github.test"};
    struct intercept_ca *ca = make_ca(names, 1, 0);
    struct al_error err = {0};
    struct intercept_leaf *l;
    ck_assert_int_eq(intercept_ca_leaf(ca, "api.github.test", &l, &err), 0);
    ck_assert_str_eq(intercept_leaf_name(l), "api.github.test");
    write_leaf("leaf.pem", l);
    char out[16384];
    ck_assert_int_eq(run(out, sizeof out, "openssl x509 -in %s/leaf.pem -noout -text", tmpdir), 0);
    ck_assert_msg(strstr(out, "DNS:api.github.test"), "%s", out);
    ck_assert_msg(strstr(out, "CA:FALSE"), "%s", out);
    ck_assert_msg(strstr(out, "Digital Signature"), "%s", out);
    ck_assert_msg(strstr(out, "TLS Web Server Authentication"), "%s", out);
    ck_assert_msg(strstr(out, "prime256v1"), "%s", out);
    /* Validity: at most 7 days + 1 h of skew, and inside the CA's. */
    mbedtls_x509_crt *c = intercept_leaf_crt(l);
    ck_assert_int_eq(mbedtls_x509_time_is_past(&c->valid_to), 0);
    ck_assert_int_eq(mbedtls_x509_time_is_future(&c->valid_from), 0);
    ck_assert_int_eq(mbedtls_pk_get_type(intercept_leaf_key(l)), MBEDTLS_PK_ECKEY);
    intercept_leaf_unref(l);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(leaf_validity_clamped_to_ca)
{
    const char *names[] = {"api.github.test"};
    struct intercept_ca_opts o = {.sandbox_id = "sb",
                                  .names = names,
                                  .n_names = 1,
                                  .ca_validity_s = 7200,
                                  .leaf_validity_s = 86400 * 30};
    struct intercept_ca *ca;
    ck_assert_int_eq(intercept_ca_new(&o, &ca, NULL), 0);
    struct intercept_leaf *l;
    ck_assert_int_eq(intercept_ca_leaf(ca, "api.github.test", &l, NULL), 0);
    write_leaf("leaf.pem", l);
    write_file("ca.pem", intercept_ca_pem(ca));
    char a[256], b[256];
    ck_assert_int_eq(run(a, sizeof a, "openssl x509 -in %s/leaf.pem -noout -enddate", tmpdir), 0);
    ck_assert_int_eq(run(b, sizeof b, "openssl x509 -in %s/ca.pem -noout -enddate", tmpdir), 0);
    ck_assert_str_eq(a, b);
    intercept_leaf_unref(l);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(leaf_refusals)
{
    const char *names[] = {"api.github.test"};
    struct intercept_ca *ca = make_ca(names, 1, 0);
    struct al_error err = {0};
    struct intercept_leaf *l = (void *)1;
    ck_assert_int_eq(intercept_ca_leaf(ca, "evil.test", &l, &err), -EPERM);
    ck_assert_ptr_null(l);
    ck_assert_ptr_nonnull(strstr(err.msg, "outside the name constraints"));
    ck_assert_int_eq(intercept_ca_leaf(ca, "API.github.test", &l, &err), -EINVAL);
    ck_assert_int_eq(intercept_ca_leaf(ca, "api.github.test.", &l, &err), -EINVAL);
    ck_assert_int_eq(intercept_ca_leaf(ca, "127.0.0.1", &l, &err), -EINVAL);
    ck_assert_int_eq(intercept_ca_leaf(ca, "", &l, &err), -EINVAL);
    struct intercept_ca_stats st;
    intercept_ca_get_stats(ca, &st);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.minted, 0);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(empty_policy_permits_nothing)
{
    struct intercept_ca *ca = make_ca(NULL, 0, 0);
    const char *const *sub;
    ck_assert_uint_eq(intercept_ca_subtrees(ca, &sub), 1);
    ck_assert_str_eq(sub[0], "invalid");
    ck_assert(!intercept_ca_permits(ca, "api.github.test"));
    write_file("ca.pem", intercept_ca_pem(ca));
    char out[16384];
    ck_assert_int_eq(run(out, sizeof out, "openssl x509 -in %s/ca.pem -noout -text", tmpdir), 0);
    ck_assert_msg(strstr(out, "DNS:invalid"), "%s", out);
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(cache_hits_and_eviction)
{
    const char *names[] = {"**.example.test"};
    struct intercept_ca *ca = make_ca(names, 1, 2);
    struct intercept_leaf *a1, *a2, *b, *c, *a3;
    ck_assert_int_eq(intercept_ca_leaf(ca, "a.example.test", &a1, NULL), 0);
    ck_assert_int_eq(intercept_ca_leaf(ca, "a.example.test", &a2, NULL), 0);
    ck_assert_ptr_eq(a1, a2);
    ck_assert_int_eq(intercept_ca_leaf(ca, "b.example.test", &b, NULL), 0);
    /* touch a so that b is the least recently used */
    intercept_leaf_unref(a2);
    ck_assert_int_eq(intercept_ca_leaf(ca, "a.example.test", &a2, NULL), 0);
    ck_assert_int_eq(intercept_ca_leaf(ca, "c.example.test", &c, NULL), 0);
    struct intercept_ca_stats st;
    intercept_ca_get_stats(ca, &st);
    ck_assert_uint_eq(st.minted, 3);
    ck_assert_uint_eq(st.hits, 2);
    ck_assert_uint_eq(st.evicted, 1);
    ck_assert_uint_eq(st.cached, 2);
    ck_assert_int_eq(intercept_ca_leaf(ca, "a.example.test", &a3, NULL), 0);
    ck_assert_ptr_eq(a3, a1); /* a survived, b was evicted */
    /* An evicted leaf stays valid for whoever still holds it. */
    ck_assert_str_eq(intercept_leaf_name(b), "b.example.test");
    intercept_leaf_unref(a1);
    intercept_leaf_unref(a2);
    intercept_leaf_unref(a3);
    intercept_leaf_unref(b);
    intercept_leaf_unref(c);
    intercept_ca_unref(ca);
}
END_TEST

/* The CA may go (sandbox removed) while a connection still holds a leaf. */
START_TEST(leaf_outlives_ca)
{
    const char *names[] = {"api.github.test"};
    struct intercept_ca *ca = make_ca(names, 1, 0);
    struct intercept_leaf *l;
    ck_assert_int_eq(intercept_ca_leaf(ca, "api.github.test", &l, NULL), 0);
    intercept_ca_unref(ca);
    ck_assert_str_eq(intercept_leaf_name(l), "api.github.test");
    ck_assert_int_eq(mbedtls_pk_get_type(intercept_leaf_key(l)), MBEDTLS_PK_ECKEY);
    intercept_leaf_unref(l);
}
END_TEST

struct thr {
    struct intercept_ca *ca;
    struct intercept_leaf *got[20];
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    for (int i = 0; i < 20; i++) {
        char n[64];
        snprintf(n, sizeof n, "h%d.example.test", i % 5);
        if (intercept_ca_leaf(t->ca, n, &t->got[i], NULL) != 0)
            t->got[i] = NULL;
    }
    return NULL;
}

START_TEST(concurrent_use)
{
    const char *names[] = {"*.example.test"};
    struct intercept_ca *ca = make_ca(names, 1, 0);
    struct thr t[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        t[i].ca = ca;
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    struct intercept_ca_stats st;
    intercept_ca_get_stats(ca, &st);
    ck_assert_uint_eq(st.cached, 5);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 20; k++) {
            ck_assert_ptr_nonnull(t[i].got[k]);
            intercept_leaf_unref(t[i].got[k]);
        }
    intercept_ca_unref(ca);
}
END_TEST

START_TEST(name_constraints_der_bounds)
{
    const char *bases[] = {"example.test"};
    unsigned char small[16], big[256], *start;
    size_t len;
    ck_assert_int_eq(intercept_name_constraints_der(bases, 1, small, sizeof small, &start, &len),
                     -ENOSPC);
    ck_assert_int_eq(intercept_name_constraints_der(bases, 1, big, sizeof big, &start, &len), 0);
    ck_assert_uint_eq(start[0], 0x30); /* SEQUENCE */
    ck_assert_uint_eq(start[2], 0xa0); /* permittedSubtrees [0] */
    ck_assert(start + len == big + sizeof big);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_ca");
    TCase *tc = tcase_create("ca");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, subtrees_from_patterns);
    tcase_add_test(tc, subtree_matching);
    tcase_add_test(tc, ca_certificate_fields);
    tcase_add_test(tc, openssl_accepts_inside_rejects_outside);
    tcase_add_test(tc, leaf_fields);
    tcase_add_test(tc, leaf_validity_clamped_to_ca);
    tcase_add_test(tc, leaf_refusals);
    tcase_add_test(tc, empty_policy_permits_nothing);
    tcase_add_test(tc, cache_hits_and_eviction);
    tcase_add_test(tc, leaf_outlives_ca);
    tcase_add_test(tc, concurrent_use);
    tcase_add_test(tc, name_constraints_der_bounds);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
