/* tests/unit/vault/test_vault_store: names, bound hosts (through the policy library's
 * canonicaliser) and keyed secret ids; the store: round trips, identifiers and metadata across
 * rotations, refused puts, passphrase vaults, and errors that say what is wrong. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vault_fixture.h"

/* ---- names, hosts, ids ---------------------------------------------------------------------- */

START_TEST(names_and_hosts)
{
    struct al_error e = {0};
    const char *good[] = {"github/token", "a", "x-1/y_2/z.3", "aws/prod/access-key"};
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(vault_name_check(good[i], &e) == 0, "%s: %s", good[i], e.msg);
    const char *bad[] = {"", "/a", "a/", "a//b", "A", "a b", ".hidden", "a/.b", "a/b/c/d/e/f/g/h/i",
                         "ü"};
    for (size_t i = 0; i < 10; i++) {
        ck_assert_int_eq(vault_name_check(bad[i], &e), -EINVAL);
        ck_assert_ptr_nonnull(strstr(e.msg, "github/token")); /* the hint */
    }
    /* a value pasted where a name goes is never echoed */
    ck_assert_int_eq(vault_name_check(SECRET_A, &e), -EINVAL);
    ck_assert_ptr_null(strstr(e.msg, "ghp_"));

    char h1[] = "API.GitHub.com.", h2[] = "*.example.com", h3[] = "host:443", h4[] = "*.com",
         h5[] = "-bad.com";
    ck_assert_int_eq(vault_host_check(h1, true, &e), 0);
    ck_assert_str_eq(h1, "api.github.com");
    ck_assert_int_eq(vault_host_check(h2, true, &e), 0);
    ck_assert_int_eq(vault_host_check(h3, true, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "port"));
    ck_assert_ptr_null(strstr(e.msg, "host:443"));
    ck_assert_int_eq(vault_host_check(h4, true, &e), -EINVAL);
    ck_assert_int_eq(vault_host_check(h5, true, &e), -EINVAL);

    const char *pats[] = {"api.github.com", "*.example.com"};
    ck_assert(vault_host_allowed(pats, 2, "api.github.com"));
    ck_assert(vault_host_allowed(pats, 2, "API.GITHUB.COM."));
    ck_assert(vault_host_allowed(pats, 2, "a.example.com"));
    ck_assert(!vault_host_allowed(pats, 2, "example.com"));
    ck_assert(!vault_host_allowed(pats, 2, "a.b.example.com"));
    ck_assert(!vault_host_allowed(pats, 2, "evilexample.com"));
    ck_assert(!vault_host_allowed(pats, 2, "api.github.com.evil.net"));
    ck_assert(!vault_host_allowed(pats, 2, "github.com"));
    ck_assert(!vault_host_allowed(pats, 2, ""));
}
END_TEST

/* Bound hosts go through the policy library's canonicaliser and matcher (issue 2): IDNs, IP
 * literals in any spelling, the policy's wildcard forms, and no wildcard over a public suffix. */
START_TEST(bound_hosts_use_the_policy_canonicaliser)
{
    struct al_error e = {0};
    struct {
        const char *in, *want;
    } ok[] = {
        {"b\xc3\xbc"
         "cher.example",
         "xn--bcher-kva.example"},
        {"API.GitHub.com.", "api.github.com"},
        {"203.0.113.5", "203.0.113.5"},
        {"0xcb.0.113.5", "203.0.113.5"},
        {"[2001:DB8::1]", "2001:db8::1"},
        {"2001:db8:0:0::1", "2001:db8::1"},
        {"**.example.com", "**.example.com"},
        {"api-*.example.com", "api-*.example.com"},
        {"*.Example.co.uk", "*.example.co.uk"},
    };
    for (size_t i = 0; i < AL_ARRAY_SIZE(ok); i++) {
        char h[VAULT_HOST_MAX + 3];
        snprintf(h, sizeof h, "%s", ok[i].in);
        ck_assert_msg(vault_host_check(h, true, &e) == 0, "%s: %s", ok[i].in, e.msg);
        ck_assert_str_eq(h, ok[i].want);
    }
    /* public suffixes: the rule is named, and a stored entry still reads back (psl false) */
    struct {
        const char *in, *rule;
    } psl[] = {{"*.co.uk", "wildcard_public_suffix"},
               {"**.com", "wildcard_public_suffix"},
               {"api-*.co.uk", "wildcard_public_suffix"},
               {"*.github.io", "wildcard_public_suffix"}, /* PSL private section too */
               {"co.uk", "rule public_suffix"}};
    for (size_t i = 0; i < AL_ARRAY_SIZE(psl); i++) {
        char h[VAULT_HOST_MAX + 3];
        snprintf(h, sizeof h, "%s", psl[i].in);
        ck_assert_int_eq(vault_host_check(h, true, &e), -EINVAL);
        ck_assert_msg(strstr(e.msg, psl[i].rule), "%s: %s", psl[i].in, e.msg);
        snprintf(h, sizeof h, "%s", psl[i].in);
        ck_assert_int_eq(vault_host_check(h, false, &e), 0);
    }
    /* invalid: the message says why and never repeats the text */
    const char *bad[] = {"a*b.*.example.com", "*",          "ex_ample.com",
                         "fe80::1%eth0",      "1.2.3.4:80", "ghp_pasted:value"};
    for (size_t i = 0; i < AL_ARRAY_SIZE(bad); i++) {
        char h[VAULT_HOST_MAX + 3];
        snprintf(h, sizeof h, "%s", bad[i]);
        ck_assert_msg(vault_host_check(h, true, &e) == -EINVAL, "%s accepted", bad[i]);
        ck_assert_msg(strlen(bad[i]) < 2 || !strstr(e.msg, bad[i]), "%s echoed: %s", bad[i], e.msg);
    }
    ck_assert_ptr_null(strstr(e.msg, "ghp_"));

    /* matching: the same as the policy's (the proxy uses the same function) */
    const char *pats[] = {"xn--bcher-kva.example", "203.0.113.5", "2001:db8::1", "**.deep.example",
                          "api-*.example.com"};
    ck_assert(vault_host_allowed(pats, 5,
                                 "B\xc3\x9c"
                                 "CHER.example"));
    ck_assert(vault_host_allowed(pats, 5, "xn--bcher-kva.example."));
    ck_assert(vault_host_allowed(pats, 5, "203.0.113.5"));
    ck_assert(vault_host_allowed(pats, 5, "0313.0.113.5")); /* octal spelling */
    ck_assert(vault_host_allowed(pats, 5, "[2001:db8:0::1]"));
    ck_assert(!vault_host_allowed(pats, 5, "203.0.113.6"));
    ck_assert(vault_host_allowed(pats, 5, "a.b.deep.example"));
    ck_assert(!vault_host_allowed(pats, 5, "deep.example"));
    ck_assert(vault_host_allowed(pats, 5, "api-v2.example.com"));
    ck_assert(!vault_host_allowed(pats, 5, "web.example.com"));
    ck_assert(!vault_host_allowed(pats, 5, "x.api-v2.example.com"));
    ck_assert(!vault_host_allowed(pats, 5, "bucher.example"));
    ck_assert(!vault_host_allowed(pats, 5, "not a host"));
}
END_TEST

START_TEST(secret_ids_are_keyed)
{
    unsigned char k1[32], k2[32];
    memset(k1, 1, 32);
    memset(k2, 2, 32);
    char a[VAULT_SECRET_ID_LEN + 1], b[VAULT_SECRET_ID_LEN + 1], c[VAULT_SECRET_ID_LEN + 1];
    vault_secret_id(k1, SECRET_A, strlen(SECRET_A), a);
    vault_secret_id(k1, SECRET_A, strlen(SECRET_A), b);
    vault_secret_id(k2, SECRET_A, strlen(SECRET_A), c);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
    vault_secret_id(k1, SECRET_B, strlen(SECRET_B), c);
    ck_assert_str_ne(a, c);
    ck_assert(strncmp(a, "b2k:", 4) == 0);
    ck_assert(!al_audit_line_contains_secret(a, strlen(a), SECRET_A, strlen(SECRET_A)));
}
END_TEST

/* ---- store: round trips ----------------------------------------------------------------------- */

START_TEST(round_trip)
{
    const char *d = vdir("roundtrip");
    struct stat st;
    ck_assert_int_eq(stat(d, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    ck_assert_int_eq(stat(vfile(d), &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);

    struct vault_store *s = sopen(d);
    const char *hosts[] = {"api.github.com"};
    put(s, "github/token", SECRET_A, true, hosts, 1);
    put(s, "aws/key", SECRET_B, true, NULL, 0);
    expect_value(s, "github/token", 0, SECRET_A);
    /* rotate keeps the last N versions */
    for (int i = 0; i < 4; i++) {
        char v[64];
        snprintf(v, sizeof v, "rotated-value-%d", i);
        put(s, "github/token", v, false, NULL, 0);
    }
    const struct vault_secret *sec = vault_catalog_find(vault_store_catalog(s), "github/token");
    ck_assert_uint_eq(sec->current, 5);
    ck_assert_uint_eq(sec->n_versions, VAULT_KEEP_DEFAULT);
    ck_assert_uint_eq(sec->versions[0].version, 5);
    ck_assert_uint_eq(sec->n_hosts, 1); /* unchanged by rotate */
    ck_assert_str_eq(sec->hosts[0], "api.github.com");
    ck_assert_uint_eq(sec->n_history, 5);
    ck_assert_str_eq(sec->history[0].event, "create");
    expect_value(s, "github/token", 0, "rotated-value-3");
    expect_value(s, "github/token", 4, "rotated-value-2");
    struct vault_value v;
    struct al_error e = {0};
    ck_assert_int_eq(vault_store_value(s, sec, 1, &v, &e), -ENOENT); /* rotated out */
    uint64_t gen = vault_store_catalog(s)->generation;
    ck_assert_uint_eq(gen, 6);

    /* create twice, rotate/delete a missing one */
    ck_assert_int_eq(vault_value_set(&v, "x", 1), 0);
    struct vault_put p = {.name = "aws/key", .value = &v};
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EEXIST);
    ck_assert_ptr_nonnull(strstr(e.msg, "airlock vault rotate aws/key"));
    p.name = "nope";
    ck_assert_int_eq(vault_store_rotate(s, &p, "t", NULL, &e), -ENOENT);
    vault_value_free(&v);
    ck_assert_int_eq(vault_store_delete(s, "nope", "t", &e), -ENOENT);
    ck_assert_int_eq(vault_store_delete(s, "aws/key", "t", &e), 0);
    vault_store_close(s);

    /* another process's view */
    s = sopen(d);
    ck_assert_uint_eq(vault_store_catalog(s)->n, 1);
    ck_assert_uint_eq(vault_store_catalog(s)->generation, gen + 1);
    ck_assert_uint_eq(vault_store_catalog(s)->n_tombs, 1);
    expect_value(s, "github/token", 0, "rotated-value-3");
    size_t n = 0;
    ck_assert_int_eq(vault_store_check(s, &n, &e), 0);
    ck_assert_uint_eq(n, 3);
    vault_store_close(s);

    /* the file never holds a value */
    size_t len = 0;
    char *data = slurp(vfile(d), &len);
    ck_assert(!al_audit_line_contains_secret(data, len, SECRET_A, strlen(SECRET_A)));
    ck_assert(!al_audit_line_contains_secret(data, len, "rotated-value-3", 15));
    free(data);
}
END_TEST

/* Identifiers (E2B's secretID) and metadata: given at creation, kept across rotations and
 * processes, metadata replaced only by a rotation that gives it, E2B's limits enforced. */
START_TEST(ids_and_metadata)
{
    const char *d = vdir("idsmeta");
    struct vault_store *s = sopen(d);
    struct vault_value v;
    ck_assert_int_eq(vault_value_set(&v, SECRET_A, strlen(SECRET_A)), 0);
    json_t *meta = json_pack("{s:s,s:s}", "team", "ml", "a b", "\u00fcn\u00ef");
    struct vault_put p = {.name = "keys/key_1/openai", .value = &v, .metadata = meta};
    struct al_error e = {0};
    ck_assert_msg(vault_store_create(s, &p, "t", NULL, &e) == 0, "%s", al_error_str(&e));
    p.name = "keys/key_2/openai";
    p.metadata = NULL;
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), 0);
    const struct vault_secret *a = vault_catalog_find(vault_store_catalog(s), "keys/key_1/openai");
    const struct vault_secret *b = vault_catalog_find(vault_store_catalog(s), "keys/key_2/openai");
    ck_assert(vault_uid_valid(a->uid));
    ck_assert(vault_uid_valid(b->uid));
    ck_assert_str_ne(a->uid, b->uid);
    ck_assert(json_equal(a->metadata, meta));
    ck_assert_ptr_null(b->metadata);
    char uid[VAULT_UID_LEN + 1];
    snprintf(uid, sizeof uid, "%s", a->uid);
    json_t *j = vault_secret_json(b, false);
    ck_assert_uint_eq(json_object_size(json_object_get(j, "metadata")), 0); /* always an object */
    json_decref(j);

    /* A rotation without metadata keeps it; one with metadata replaces it. */
    p.name = "keys/key_1/openai";
    ck_assert_int_eq(vault_store_rotate(s, &p, "t", NULL, &e), 0);
    a = vault_catalog_find(vault_store_catalog(s), p.name);
    ck_assert_str_eq(a->uid, uid);
    ck_assert(json_equal(a->metadata, meta));
    json_t *meta2 = json_pack("{s:s}", "team", "infra");
    p.metadata = meta2;
    ck_assert_int_eq(vault_store_rotate(s, &p, "t", NULL, &e), 0);
    vault_store_close(s);

    s = sopen(d); /* another process's view */
    a = vault_catalog_find(vault_store_catalog(s), "keys/key_1/openai");
    ck_assert_str_eq(a->uid, uid);
    ck_assert_uint_eq(a->current, 3);
    ck_assert(json_equal(a->metadata, meta2));
    j = vault_secret_json(a, false);
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")), uid);
    ck_assert(json_equal(json_object_get(j, "metadata"), meta2));
    json_decref(j);

    /* E2B's limits: 32 entries, keys 1..128 bytes, values <= 1024, 8192 in all, strings. */
    uint64_t gen = vault_store_catalog(s)->generation;
    json_t *bad[6];
    bad[0] = json_object();
    for (int i = 0; i < 33; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        json_object_set_new(bad[0], k, json_string("v"));
    }
    bad[1] = json_pack("{s:i}", "n", 5);
    char big[1100];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    bad[2] = json_pack("{s:s}", "k", big);
    big[129] = '\0';
    bad[3] = json_pack("{s:s}", big, "v");
    bad[4] = json_object();
    big[1000] = '\0';
    memset(big, 'y', 1000);
    for (int i = 0; i < 9; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        json_object_set_new(bad[4], k, json_string(big));
    }
    bad[5] = json_pack("{s:s}", "k", "line\nbreak");
    const char *why[] = {"33 entries", "must be a string", "at most 1024",
                         "1 to 128",   "at most 8192",     "control"};
    for (int i = 0; i < 6; i++) {
        p.metadata = bad[i];
        memset(&e, 0, sizeof e);
        ck_assert_int_eq(vault_store_rotate(s, &p, "t", NULL, &e), -EINVAL);
        ck_assert_msg(strstr(e.msg, why[i]), "%d: %s", i, e.msg);
        ck_assert_ptr_null(strstr(e.msg, "yyyy"));
        json_decref(bad[i]);
    }
    ck_assert_uint_eq(vault_store_catalog(s)->generation, gen); /* nothing was written */
    vault_store_close(s);
    vault_value_free(&v);
    json_decref(meta);
    json_decref(meta2);
}
END_TEST

START_TEST(bad_puts_are_refused)
{
    const char *d = vdir("badput");
    struct vault_store *s = sopen(d);
    struct al_error e = {0};
    struct vault_value v = {0};
    struct vault_put p = {.name = "ok", .value = &v};
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL); /* empty */
    ck_assert_int_eq(vault_value_alloc(&v, VAULT_VALUE_MAX + 1), 0);
    memset(v.data, 'x', v.len);
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -E2BIG);
    vault_value_free(&v);
    ck_assert_int_eq(vault_value_set(&v, "val", 3), 0);
    p.name = "Bad Name";
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL);
    p.name = "ok";
    const char *hosts[] = {"api.github.com", "http://x"};
    p.hosts = hosts;
    p.n_hosts = 2;
    p.set_hosts = true;
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL);
    const char *dup[] = {"a.com", "A.com"};
    p.hosts = dup;
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "twice"));
    p.set_hosts = false;
    p.n_hosts = 0;
    p.description = "line\nbreak";
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL);
    p.description = NULL;
    p.keep = VAULT_KEEP_MAX + 1;
    ck_assert_int_eq(vault_store_create(s, &p, "t", NULL, &e), -EINVAL);
    vault_value_free(&v);
    ck_assert_uint_eq(vault_store_catalog(s)->generation, 0); /* nothing was written */
    vault_store_close(s);
}
END_TEST

START_TEST(passphrase_vault)
{
    const char *d = tdir("pass");
    struct vault_init_opts o = {.passphrase = "correct horse battery",
                                .passphrase_len = 21,
                                .kdf_opslimit = 1,
                                .kdf_memlimit = 8 << 20};
    struct al_error e = {0};
    ck_assert_int_eq(vault_store_init(d, &o, &e), 0);
    struct stat st;
    char mk[600];
    snprintf(mk, sizeof mk, "%s/" VAULT_MASTER_KEY, d);
    ck_assert_int_eq(stat(mk, &st), -1); /* no key file */
    bool needs = false;
    ck_assert_int_eq(vault_store_probe(d, &needs, &e), 0);
    ck_assert(needs);

    struct vault_store *s = NULL;
    ck_assert_int_eq(vault_store_open(d, NULL, &s, &e), -ENOKEY);
    ck_assert_ptr_nonnull(strstr(e.msg, "--passphrase-file"));
    struct vault_unlock bad = {.passphrase = "wrong horse battery", .passphrase_len = 19};
    ck_assert_int_eq(vault_store_open(d, &bad, &s, &e), -EKEYREJECTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "wrong passphrase"));
    struct vault_unlock u = {.passphrase = o.passphrase, .passphrase_len = o.passphrase_len};
    ck_assert_int_eq(vault_store_open(d, &u, &s, &e), 0);
    put(s, "db/password", SECRET_B, true, NULL, 0);
    vault_store_close(s);
    ck_assert_int_eq(vault_store_open(d, &u, &s, &e), 0);
    expect_value(s, "db/password", 0, SECRET_B);
    vault_store_close(s);

    struct vault_init_opts weak = {.passphrase = "short", .passphrase_len = 5};
    ck_assert_int_eq(vault_store_init(tdir("pass2"), &weak, &e), -EINVAL);
    ck_assert_int_eq(vault_store_init(d, &o, &e), -EEXIST); /* never over an existing vault */
}
END_TEST

START_TEST(clear_errors)
{
    const char *d = tdir("none");
    struct al_error e = {0};
    ck_assert_int_eq(open_err(d, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "airlock vault init"));

    d = vdir("wrongkey");
    char mk[600];
    snprintf(mk, sizeof mk, "%s/" VAULT_MASTER_KEY, d);
    char *orig = slurp(mk, NULL);
    /* another key */
    FILE *f = fopen(mk, "w");
    fprintf(f, "# another key\n%064d\n", 7);
    fclose(f);
    ck_assert_int_eq(open_err(d, &e), -EKEYREJECTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "wrong master key"));
    /* a key readable by others */
    spit(mk, orig, strlen(orig));
    ck_assert_int_eq(chmod(mk, 0644), 0);
    ck_assert_int_eq(open_err(d, &e), -EPERM);
    ck_assert_ptr_nonnull(strstr(e.msg, "chmod 600"));
    ck_assert_int_eq(chmod(mk, 0600), 0);
    /* a damaged key file */
    spit(mk, "garbage\n", 8);
    ck_assert_int_eq(open_err(d, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "corrupted"));
    /* no key file */
    unlink(mk);
    ck_assert_int_eq(open_err(d, &e), -ENOKEY);
    ck_assert_ptr_nonnull(strstr(e.msg, "restore it"));
    spit(mk, orig, strlen(orig));
    ck_assert_int_eq(chmod(mk, 0600), 0);
    ck_assert_int_eq(open_err(d, &e), 0);
    free(orig);

    /* a newer format */
    size_t len = 0;
    char *data = slurp(vfile(d), &len);
    data[14] = '9';
    spit(vfile(d), data, len);
    ck_assert_int_eq(open_err(d, &e), -EPROTONOSUPPORT);
    ck_assert_ptr_nonnull(strstr(e.msg, "upgrade"));
    free(data);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vault_store");
    TCase *t = vault_tcase("store");
    tcase_add_test(t, names_and_hosts);
    tcase_add_test(t, bound_hosts_use_the_policy_canonicaliser);
    tcase_add_test(t, secret_ids_are_keyed);
    tcase_add_test(t, round_trip);
    tcase_add_test(t, ids_and_metadata);
    tcase_add_test(t, bad_puts_are_refused);
    tcase_add_test(t, passphrase_vault);
    tcase_add_test(t, clear_errors);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
