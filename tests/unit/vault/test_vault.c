/* Unit tests: the vault (vault/): names, crypto, the file format and its tampering detection,
 * the store (round trips, wrong keys, concurrent writers, SIGKILL during updates), the service
 * (roles, bound hosts, access log, changes feed), the CLI (write-only, never echoes a value),
 * and that no value ever reaches a log, an error or a core file. */
#include "al_test.h"
#include "common/auditlog.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "vault/vault.h"
#include "vault/vault_file.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char g_root[256];

static void root_setup(void)
{
    snprintf(g_root, sizeof g_root, "/tmp/al-vault-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(g_root))
        abort();
    chmod(g_root, 0755);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(p);
    return 0;
}

static void root_teardown(void)
{
    nftw(g_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A distinctive value, which must never show up anywhere but in fetch answers. */
#define SECRET_A "ghp_A1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvWxYz"
#define SECRET_B "sk-live-ZYXWVUTSRQPONMLKJIHGFEDCBA987654321"

static const char *tdir(const char *name)
{
    static char ring[4][512];
    static int k;
    char *d = ring[k++ % 4];
    snprintf(d, 512, "%s/%s", g_root, name);
    return d;
}

static const char *vdir(const char *name)
{
    const char *d = tdir(name);
    struct al_error e = {0};
    int rc = vault_store_init(d, NULL, &e);
    ck_assert_msg(rc == 0, "init: %s", al_error_str(&e));
    return d;
}

static struct vault_store *sopen(const char *d)
{
    struct vault_store *s = NULL;
    struct al_error e = {0};
    int rc = vault_store_open(d, NULL, &s, &e);
    ck_assert_msg(rc == 0, "open: %s", al_error_str(&e));
    return s;
}

static void put(struct vault_store *s, const char *name, const char *value, bool create,
                const char *const *hosts, size_t nh)
{
    struct vault_value v;
    ck_assert_int_eq(vault_value_set(&v, value, strlen(value)), 0);
    struct vault_put p = {.name = name,
                          .value = &v,
                          .hosts = hosts,
                          .n_hosts = nh,
                          .set_hosts = hosts != NULL,
                          .description = create ? "test" : NULL};
    struct al_error e = {0};
    int rc = create ? vault_store_create(s, &p, "uid 0 (test)", NULL, &e)
                    : vault_store_rotate(s, &p, "uid 0 (test)", NULL, &e);
    ck_assert_msg(rc == 0, "put %s: %s", name, al_error_str(&e));
    vault_value_free(&v);
}

static void expect_value(struct vault_store *s, const char *name, uint32_t version,
                         const char *want)
{
    const struct vault_secret *sec = vault_catalog_find(vault_store_catalog(s), name);
    ck_assert_ptr_nonnull(sec);
    struct vault_value v;
    struct al_error e = {0};
    int rc = vault_store_value(s, sec, version, &v, &e);
    ck_assert_msg(rc == 0, "value %s: %s", name, al_error_str(&e));
    ck_assert_uint_eq(v.len, strlen(want));
    ck_assert(memcmp(v.data, want, v.len) == 0);
    vault_value_free(&v);
}

static char *slurp(const char *path, size_t *len)
{
    char *d = NULL;
    size_t l = 0;
    if (al_read_file(path, 64 << 20, &d, &l, NULL) != 0)
        return NULL;
    if (len)
        *len = l;
    return d;
}

static void spit(const char *path, const char *d, size_t len)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(d, 1, len, f), len);
    fclose(f);
}

static char *vfile(const char *d)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/" VAULT_FILE, d);
    return p;
}

/* Tries to open and returns the error (0 if it opened). */
static int open_err(const char *d, struct al_error *e)
{
    struct vault_store *s = NULL;
    memset(e, 0, sizeof *e);
    int rc = vault_store_open(d, NULL, &s, e);
    vault_store_close(s);
    return rc;
}

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

/* ---- tampering ------------------------------------------------------------------------------ */

/* A vault with three secrets; returns its directory. */
static const char *three(const char *name)
{
    const char *d = vdir(name);
    struct vault_store *s = sopen(d);
    const char *hosts[] = {"api.github.com"};
    put(s, "a/one", SECRET_A, true, hosts, 1);
    put(s, "b/two", SECRET_B, true, NULL, 0);
    put(s, "c/three", "third-value", true, NULL, 0);
    ck_assert_int_eq(vault_store_delete(s, "c/three", "t", NULL), 0);
    put(s, "c/three", "third-again", true, NULL, 0);
    vault_store_close(s);
    return d;
}

/* Line i (0-based) of data: start and length. */
static size_t line_at(const char *data, size_t i, size_t *len)
{
    size_t pos = 0;
    for (size_t k = 0; k < i; k++)
        pos = (size_t)(strchr(data + pos, '\n') - data) + 1;
    *len = (size_t)(strchr(data + pos, '\n') - (data + pos));
    return pos;
}

/* Applies f to a copy of the file, checks the open fails with a message containing want, and
 * that a write attempt changes nothing. */
static void tamper(const char *d, void (*f)(char *data, size_t *len), const char *want)
{
    size_t len = 0;
    char *data = slurp(vfile(d), &len);
    data = realloc(data, len * 2 + 64);
    char *orig = malloc(len);
    memcpy(orig, data, len);
    f(data, &len);
    spit(vfile(d), data, len);
    struct al_error e = {0};
    int rc = open_err(d, &e);
    ck_assert_msg(rc != 0, "tampering went unnoticed (want '%s')", want);
    ck_assert_msg(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    ck_assert_ptr_nonnull(strstr(e.msg, "nothing was changed"));
    ck_assert(!al_audit_line_contains_secret(e.msg, strlen(e.msg), SECRET_A, strlen(SECRET_A)));
    free(orig);
    free(data);
}

static void flip_ct(char *data, size_t *len)
{
    (void)len;
    size_t l;
    size_t p = line_at(data, 2, &l); /* the first secret */
    char *ct = strstr(data + p, "\"ct\":\"") + 6;
    ct[3] = ct[3] == 'A' ? 'B' : 'A';
}

static void flip_meta(char *data, size_t *len)
{
    (void)len;
    char *h = strstr(data, "api.github.com");
    h[0] = 'b'; /* bound host changed: api -> bpi */
}

static void flip_header(char *data, size_t *len)
{
    (void)len;
    char *n = strstr(data, "\"nonce\":\"") + 9;
    n[0] = n[0] == '0' ? '1' : '0';
}

static void flip_trailer(char *data, size_t *len)
{
    char *t = strstr(data, "\nT ") + 1;
    char *g = strstr(t, "\"generation\":") + 13;
    (void)len;
    g[0] = g[0] == '9' ? '8' : '9';
}

static void swap_lines(char *data, size_t *len)
{
    size_t l2, l3;
    size_t p2 = line_at(data, 2, &l2), p3 = line_at(data, 3, &l3);
    char *tmp = malloc(*len);
    size_t o = 0;
    memcpy(tmp, data, p2);
    o = p2;
    memcpy(tmp + o, data + p3, l3 + 1);
    o += l3 + 1;
    memcpy(tmp + o, data + p2, l2 + 1);
    o += l2 + 1;
    memcpy(tmp + o, data + p3 + l3 + 1, *len - (p3 + l3 + 1));
    memcpy(data, tmp, *len);
    free(tmp);
}

static void drop_line(char *data, size_t *len)
{
    size_t l;
    size_t p = line_at(data, 3, &l);
    memmove(data + p, data + p + l + 1, *len - (p + l + 1));
    *len -= l + 1;
}

static void dup_line(char *data, size_t *len)
{
    size_t l;
    size_t p = line_at(data, 2, &l);
    memmove(data + p + l + 1, data + p, *len - p);
    *len += l + 1;
}

static void cut_mid_line(char *data, size_t *len)
{
    size_t l;
    size_t p = line_at(data, 3, &l);
    (void)data;
    *len = p + l / 2;
}

static void cut_at_line(char *data, size_t *len)
{
    size_t l;
    size_t p = line_at(data, 4, &l);
    (void)data;
    *len = p;
}

static void cut_trailer(char *data, size_t *len)
{
    *len = (size_t)(strstr(data, "\nT ") - data) + 1;
}

static void cut_all(char *data, size_t *len)
{
    (void)data;
    *len = 0;
}

static void append_junk(char *data, size_t *len)
{
    memcpy(data + *len, "S x\n", 4);
    *len += 4;
}

static void not_a_vault(char *data, size_t *len)
{
    memcpy(data, "hello", 5);
    (void)len;
}

START_TEST(tamper_flipped_bytes)
{
    tamper(three("t-ct"), flip_ct, "line 3 (secret \"a/one\") fails its integrity check");
    tamper(three("t-meta"), flip_meta, "line 3");
    tamper(three("t-hdr"), flip_header, "line 2 (the header) is corrupted");
    tamper(three("t-trl"), flip_trailer, "trailer");
    tamper(three("t-magic"), not_a_vault, "not a vault file");
}
END_TEST

START_TEST(tamper_swapped_removed_duplicated)
{
    tamper(three("t-swap"), swap_lines, "out of order");
    tamper(three("t-drop"), drop_line, "trailer");
    tamper(three("t-dup"), dup_line, "out of order or duplicated");
    tamper(three("t-junk"), append_junk, "after the trailer");
}
END_TEST

START_TEST(tamper_truncated)
{
    tamper(three("t-cut1"), cut_mid_line, "truncated");
    tamper(three("t-cut2"), cut_at_line, "truncated");
    tamper(three("t-cut3"), cut_trailer, "truncated");
    tamper(three("t-cut4"), cut_all, "empty");
}
END_TEST

START_TEST(tamper_detected_when_writing_and_nothing_changes)
{
    const char *d = three("t-write");
    struct vault_store *s = sopen(d);
    size_t len = 0;
    char *data = slurp(vfile(d), &len);
    flip_ct(data, &len);
    spit(vfile(d), data, len);
    /* the store re-reads under the lock before every change */
    struct vault_value v;
    ck_assert_int_eq(vault_value_set(&v, "new", 3), 0);
    struct vault_put p = {.name = "b/two", .value = &v};
    struct al_error e = {0};
    ck_assert_int_eq(vault_store_rotate(s, &p, "t", NULL, &e), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(e.msg, "nothing was changed"));
    vault_value_free(&v);
    size_t len2 = 0;
    char *after = slurp(vfile(d), &len2);
    ck_assert_uint_eq(len, len2);
    ck_assert(memcmp(data, after, len) == 0);
    free(after);
    free(data);
    vault_store_close(s);
}
END_TEST

/* An attacker who could recompute the MACs (i.e. held the data key) and moved a ciphertext
 * from one secret to another: the associated data (name, version, vault id) still refuses. */
START_TEST(values_are_bound_to_name_version_and_vault)
{
    const char *d = three("t-move");
    size_t len = 0, off = 0;
    char *data = slurp(vfile(d), &len);
    struct vault_header h;
    ck_assert_int_eq(vault_file_header(data, len, &h, &off, NULL), 0);
    unsigned char *mk = sodium_malloc(32);
    char mkp[600];
    snprintf(mkp, sizeof mkp, "%s/" VAULT_MASTER_KEY, d);
    ck_assert_int_eq(vault_key_file_load(mkp, mk, NULL), 0);
    struct vault_keys *k;
    ck_assert_int_eq(vault_keys_alloc(&k), 0);
    ck_assert_int_eq(vault_dk_unwrap(mk, &h, k), 0);
    struct vault_catalog c;
    ck_assert_int_eq(vault_file_body(data, len, off, &h, k, &c, NULL), 0);
    free(data);
    /* swap the current ciphertexts of a/one and b/two, re-sign the file */
    struct vault_version tmp = c.secrets[0].versions[0];
    unsigned char *ct = tmp.ct;
    size_t ctl = tmp.ct_len;
    memcpy(c.secrets[0].versions[0].nonce, c.secrets[1].versions[0].nonce, 24);
    c.secrets[0].versions[0].ct = c.secrets[1].versions[0].ct;
    c.secrets[0].versions[0].ct_len = c.secrets[1].versions[0].ct_len;
    memcpy(c.secrets[1].versions[0].nonce, tmp.nonce, 24);
    c.secrets[1].versions[0].ct = ct;
    c.secrets[1].versions[0].ct_len = ctl;
    char *out;
    size_t olen;
    ck_assert_int_eq(vault_file_write(&h, k, &c, "2026-01-01T00:00:00.000Z", &out, &olen), 0);
    spit(vfile(d), out, olen);
    free(out);
    vault_catalog_free(&c);
    struct vault_store *s = sopen(d); /* the MACs are valid now */
    const struct vault_secret *a = vault_catalog_find(vault_store_catalog(s), "a/one");
    struct vault_value v;
    struct al_error e = {0};
    ck_assert_int_eq(vault_store_value(s, a, 0, &v, &e), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(e.msg, "tampered"));
    ck_assert_int_eq(vault_store_check(s, NULL, &e), -EBADMSG);
    vault_store_close(s);

    /* and a version number cannot be changed either */
    struct vault_version ver = {.version = 1};
    struct vault_value val;
    ck_assert_int_eq(vault_value_set(&val, "x", 1), 0);
    ck_assert_int_eq(vault_value_seal(k, h.file_id, "a/one", &val, &ver), 0);
    vault_value_free(&val);
    ck_assert_int_eq(vault_value_open(k, h.file_id, "a/one", &ver, &val), 0);
    vault_value_free(&val);
    ver.version = 2;
    ck_assert_int_eq(vault_value_open(k, h.file_id, "a/one", &ver, &val), -EBADMSG);
    ver.version = 1;
    ck_assert_int_eq(vault_value_open(k, "00000000000000000000000000000000", "a/one", &ver, &val),
                     -EBADMSG);
    vault_version_clear(&ver);
    vault_keys_free(k);
    sodium_free(mk);
}
END_TEST

/* ---- concurrency and crashes ------------------------------------------------------------------ */

START_TEST(concurrent_writers)
{
    const char *d = vdir("concurrent");
    struct vault_store *s = sopen(d);
    put(s, "shared/x", "v0", true, NULL, 0);
    vault_store_close(s);
    enum { WRITERS = 4, EACH = 8 };
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        ck_assert_int_ge(pids[w], 0);
        if (pids[w] == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            for (int i = 0; i < EACH; i++) {
                char name[64], val[64];
                snprintf(name, sizeof name, "w%d/s%d", w, i);
                snprintf(val, sizeof val, "value-%d-%d", w, i);
                struct vault_value v;
                vault_value_set(&v, val, strlen(val));
                struct vault_put p = {.name = name, .value = &v};
                if (vault_store_create(cs, &p, "t", NULL, NULL))
                    _exit(11);
                p.name = "shared/x";
                if (vault_store_rotate(cs, &p, "t", NULL, NULL))
                    _exit(12);
                vault_value_free(&v);
            }
            vault_store_close(cs);
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int st;
        waitpid(pids[w], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d failed (%d)", w,
                      WEXITSTATUS(st));
    }
    s = sopen(d);
    const struct vault_catalog *c = vault_store_catalog(s);
    ck_assert_uint_eq(c->n, 1 + WRITERS * EACH); /* no update was lost */
    ck_assert_uint_eq(c->generation, 1 + 2 * WRITERS * EACH);
    const struct vault_secret *x = vault_catalog_find(c, "shared/x");
    ck_assert_uint_eq(x->current, 1 + WRITERS * EACH);
    for (int w = 0; w < WRITERS; w++) {
        char name[64], val[64];
        snprintf(name, sizeof name, "w%d/s%d", w, EACH - 1);
        snprintf(val, sizeof val, "value-%d-%d", w, EACH - 1);
        expect_value(s, name, 0, val);
    }
    ck_assert_int_eq(vault_store_check(s, NULL, NULL), 0);
    vault_store_close(s);
}
END_TEST

static const char *g_kill_stage;
static void kill_hook(const char *stage)
{
    if (g_kill_stage && strcmp(stage, g_kill_stage) == 0)
        raise(SIGKILL);
}

static void count_tmp(const char *d, int *n)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '\\.tmp-' ", d);
    FILE *p = popen(cmd, "r");
    *n = 0;
    if (fscanf(p, "%d", n) != 1)
        *n = 0;
    pclose(p);
}

START_TEST(sigkill_during_update_leaves_old_or_new)
{
    const char *d = vdir("kill");
    struct vault_store *s = sopen(d);
    put(s, "k", "old-value", true, NULL, 0);
    vault_store_close(s);
    /* at each step of the atomic update */
    const char *stages[] = {"tmp_written", "tmp_synced", "renamed"};
    const char *expect[] = {"old-value", "old-value", "new-value"};
    for (int i = 0; i < 3; i++) {
        if (i == 2) { /* reset to the old value for the last stage */
            s = sopen(d);
            put(s, "k", "old-value", false, NULL, 0);
            vault_store_close(s);
        }
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            g_kill_stage = stages[i];
            vault_store_test_hook = kill_hook;
            put(cs, "k", "new-value", false, NULL, 0);
            _exit(11); /* not reached */
        }
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        s = sopen(d);
        expect_value(s, "k", 0, expect[i]);
        int ntmp;
        count_tmp(d, &ntmp);
        ck_assert_int_eq(ntmp, i < 2 ? 1 : 0); /* the dead writer's temporary file */
        /* the next writer cleans up and works */
        put(s, "other", "x", i == 0, NULL, 0);
        count_tmp(d, &ntmp);
        ck_assert_int_eq(ntmp, 0);
        vault_store_close(s);
    }
    /* and at random moments */
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct vault_store *cs = NULL;
            if (vault_store_open(d, NULL, &cs, NULL))
                _exit(10);
            for (int i = 0;; i++) {
                char v[64];
                snprintf(v, sizeof v, "complete-value-%d-%d", round, i);
                put(cs, "k", v, false, NULL, 0);
            }
        }
        usleep(20000 + (useconds_t)(round * 7919) % 60000);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        s = sopen(d); /* always opens: old or new, never torn */
        const struct vault_secret *k = vault_catalog_find(vault_store_catalog(s), "k");
        struct vault_value v;
        ck_assert_int_eq(vault_store_value(s, k, 0, &v, NULL), 0);
        ck_assert(v.len >= 9);
        ck_assert(memcmp(v.data, "complete-", 9) == 0 || memcmp(v.data, "new-value", 9) == 0 ||
                  memcmp(v.data, "old-value", 9) == 0);
        vault_value_free(&v);
        ck_assert_int_eq(vault_store_check(s, NULL, NULL), 0);
        vault_store_close(s);
    }
}
END_TEST

/* ---- service: roles, bound hosts, access log, changes ------------------------------------------- */

struct svc_env {
    const char *dir;
    struct vault_store *store;
    struct al_auditlog *audit;
    struct vault_service *svc;
    char audit_dir[600];
};

#define EGRESS_UID 3101
#define READER_UID 3102
#define ADMIN_GID  3103
#define OTHER_UID  3104

static void env_open_exe(struct svc_env *e, const char *name, const char *egress_exe);
static void env_open(struct svc_env *e, const char *name)
{
    env_open_exe(e, name, NULL);
}

static void env_open_exe(struct svc_env *e, const char *name, const char *egress_exe)
{
    memset(e, 0, sizeof *e);
    e->dir = vdir(name);
    e->store = sopen(e->dir);
    snprintf(e->audit_dir, sizeof e->audit_dir, "%s/" VAULT_AUDIT_DIR, e->dir);
    struct al_auditlog_opts ao = {.dir = e->audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    ck_assert_int_eq(al_auditlog_open(&ao, &e->audit, NULL), 0);
    struct vault_service_opts so = {
        .store = e->store,
        .audit = e->audit,
        .roles = {.egress_set = true,
                  .egress_uid = EGRESS_UID,
                  .reader_set = true,
                  .reader_uid = READER_UID,
                  .admin_group_set = true,
                  .admin_gid = ADMIN_GID},
        .cache_max_age_ms = 30000,
    };
    if (egress_exe)
        ck_assert_int_eq(vault_roles_set_egress_exe(&so.roles, egress_exe, NULL), 0);
    ck_assert_int_eq(vault_service_new(&so, &e->svc), 0);
}

static void env_close(struct svc_env *e)
{
    vault_service_free(e->svc);
    ck_assert_int_eq(al_auditlog_close(e->audit), 0);
    vault_store_close(e->store);
}

static const struct vault_peer ROOT = {0, 0, 1};
static const struct vault_peer EGRESS = {EGRESS_UID, EGRESS_UID, 2};
static const struct vault_peer READER = {READER_UID, READER_UID, 3};
static const struct vault_peer GROUPADMIN = {OTHER_UID + 1, ADMIN_GID, 4};
static const struct vault_peer OTHER = {OTHER_UID, OTHER_UID, 5};

static int api(struct svc_env *e, const struct vault_peer *p, const char *method, const char *path,
               const char *query, const char *body, json_t **out, struct vault_fetched *f)
{
    json_t *b = body ? json_loads(body, 0, NULL) : NULL;
    struct vault_api_req rq = {
        .peer = p, .method = method, .path = path, .query = query, .body = b};
    int st = vault_api_handle(e->svc, &rq, out, f);
    json_decref(b);
    return st;
}

static int create_b64(struct svc_env *e, const struct vault_peer *p, const char *name,
                      const char *value, const char *extra)
{
    char b64[256];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)value, strlen(value),
                      sodium_base64_VARIANT_ORIGINAL);
    char body[1024], path[256];
    snprintf(body, sizeof body, "{\"value_b64\":\"%s\"%s}", b64, extra ? extra : "");
    snprintf(path, sizeof path, "/v1/secrets/%s", name);
    json_t *out = NULL;
    int st = api(e, p, "POST", path, "", body, &out, NULL);
    json_decref(out);
    return st;
}

static int fetch(struct svc_env *e, const struct vault_peer *p, const char *name, const char *host,
                 struct vault_fetched *f, json_t **out)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"sandbox\":\"sbx-1\",\"rule\":\"gh\",\"host\":\"%s\","
             "\"request_id\":\"req-1\"}",
             name, host);
    memset(f, 0, sizeof *f);
    return api(e, p, "POST", "/v1/fetch", "", body, out, f);
}

START_TEST(roles_decide_everything)
{
    struct svc_env e;
    env_open(&e, "roles");
    json_t *out = NULL;
    struct vault_fetched f;
    /* create: admins only */
    ck_assert_int_eq(create_b64(&e, &OTHER, "gh/token", SECRET_A, NULL), 403);
    ck_assert_int_eq(create_b64(&e, &EGRESS, "gh/token", SECRET_A, NULL), 403);
    ck_assert_int_eq(create_b64(&e, &READER, "gh/token", SECRET_A, NULL), 403);
    ck_assert_int_eq(
        create_b64(&e, &ROOT, "gh/token", SECRET_A, ",\"bound_hosts\":[\"api.github.com\"]"), 201);
    ck_assert_int_eq(create_b64(&e, &GROUPADMIN, "other/x", SECRET_B, NULL), 201);
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 409);
    /* the HTTP API refuses a wildcard over a public suffix too (400, nothing stored) */
    ck_assert_int_eq(create_b64(&e, &ROOT, "psl/x", SECRET_A, ",\"bound_hosts\":[\"*.co.uk\"]"),
                     400);
    ck_assert_int_eq(api(&e, &ROOT, "GET", "/v1/secrets/psl/x", "", NULL, &out, NULL), 404);
    json_decref(out);
    /* list: admins and airlockd */
    ck_assert_int_eq(api(&e, &READER, "GET", "/v1/secrets", "", NULL, &out, NULL), 200);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "secrets")), 2);
    json_decref(out);
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/secrets", "", NULL, &out, NULL), 403);
    json_decref(out);
    ck_assert_int_eq(api(&e, &OTHER, "GET", "/v1/secrets/gh/token", "", NULL, &out, NULL), 403);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(out, "message")), "uid 3104"));
    json_decref(out);
    /* fetch: the egress role only, even root cannot read a value back */
    ck_assert_int_eq(fetch(&e, &ROOT, "gh/token", "api.github.com", &f, &out), 403);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(out, "message")), "write-only"));
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &READER, "gh/token", "api.github.com", &f, &out), 403);
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "api.github.com", &f, &out), 200);
    ck_assert_uint_eq(f.value.len, strlen(SECRET_A));
    ck_assert(memcmp(f.value.data, SECRET_A, f.value.len) == 0);
    ck_assert_uint_eq(f.version, 1);
    ck_assert_uint_eq(f.max_age_ms, 30000);
    ck_assert_str_eq(json_string_value(json_object_get(out, "secret_id")), f.secret_id);
    /* the answer built for the socket */
    struct vault_value body;
    ck_assert_int_eq(vault_api_fetch_body(out, &f.value, &body), 0);
    json_t *parsed = json_loadb((const char *)body.data, body.len, 0, NULL);
    ck_assert_ptr_nonnull(parsed);
    ck_assert_int_eq(json_integer_value(json_object_get(parsed, "version")), 1);
    const char *b64 = json_string_value(json_object_get(parsed, "value_b64"));
    unsigned char dec[128];
    size_t dl = 0;
    ck_assert_int_eq(sodium_base642bin(dec, sizeof dec, b64, strlen(b64), NULL, &dl, NULL,
                                       sodium_base64_VARIANT_ORIGINAL),
                     0);
    ck_assert(dl == strlen(SECRET_A) && memcmp(dec, SECRET_A, dl) == 0);
    json_decref(parsed);
    vault_value_free(&body);
    vault_value_free(&f.value);
    json_decref(out);
    /* bound hosts: refused toward any other host, even for the egress role */
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "evil.example.com", &f, &out), 403);
    ck_assert_ptr_null(f.value.data);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(out, "message")), "bound"));
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &EGRESS, "other/x", "anything.example.org", &f, &out), 200);
    vault_value_free(&f.value);
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &EGRESS, "missing", "a.com", &f, &out), 404);
    json_decref(out);
    /* fetch needs its context */
    ck_assert_int_eq(api(&e, &EGRESS, "POST", "/v1/fetch", "", "{\"name\":\"gh/token\"}", &out, &f),
                     400);
    json_decref(out);
    ck_assert_int_eq(api(&e, &EGRESS, "POST", "/v1/fetch", "",
                         "{\"name\":\"gh/token\","
                         "\"sandbox\":\"s\",\"rule\":\"r\",\"host\":\"api.github.com\","
                         "\"extra\":1}",
                         &out, &f),
                     400);
    json_decref(out);
    /* rotate/delete: admins only */
    ck_assert_int_eq(api(&e, &EGRESS, "DELETE", "/v1/secrets/gh/token", "", NULL, &out, NULL), 403);
    json_decref(out);
    ck_assert_int_eq(
        api(&e, &ROOT, "PUT", "/v1/secrets/gh/token", "", "{\"value_b64\":\"eHg=\"}", &out, NULL),
        200);
    ck_assert_int_eq(json_integer_value(json_object_get(out, "current_version")), 2);
    json_decref(out);
    ck_assert_int_eq(
        api(&e, &ROOT, "PUT", "/v1/secrets/gh/token", "", "{\"value\":\"xx\"}", &out, NULL), 400);
    json_decref(out);
    ck_assert_int_eq(api(&e, &ROOT, "DELETE", "/v1/secrets/other/x", "", NULL, &out, NULL), 200);
    json_decref(out);
    /* whoami, health, unknown routes */
    ck_assert_int_eq(api(&e, &GROUPADMIN, "GET", "/v1/whoami", "", NULL, &out, NULL), 200);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(out, "roles"), 0)), "admin");
    json_decref(out);
    ck_assert_int_eq(api(&e, &OTHER, "GET", "/v1/health", "", NULL, &out, NULL), 200);
    json_decref(out);
    ck_assert_int_eq(api(&e, &ROOT, "GET", "/v1/nope", "", NULL, &out, NULL), 404);
    json_decref(out);
    ck_assert_int_eq(api(&e, &ROOT, "PATCH", "/v1/secrets/gh/token", "", NULL, &out, NULL), 405);
    json_decref(out);
    env_close(&e);
}
END_TEST

/* Reads the access log back. */
static json_t *access_log(const char *audit_dir)
{
    json_t *all = json_array();
    struct al_auditlog_reader_opts o = {.dir = audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    struct al_auditlog_reader *r;
    ck_assert_int_eq(al_auditlog_reader_open(&o, &r, NULL), 0);
    struct al_auditlog_record rec;
    while (al_auditlog_reader_next(r, &rec) == 1) {
        if (!rec.internal && rec.json)
            json_array_append(all, rec.json);
    }
    al_auditlog_reader_close(r);
    return all;
}

/* --egress-exe: the egress uid alone is not enough; the caller must run the configured
 * airlock-egress binary (here: this test program plays it, /bin/sh plays a root shell). */
/* A secret under sandboxes/<id>/ (a sandbox's API-given header transform) is released only
 * on behalf of that sandbox (fetch() asks for sandbox "sbx-1"). */
START_TEST(sandbox_secrets_go_only_to_their_sandbox)
{
    struct svc_env e;
    env_open(&e, "sbxscope");
    json_t *out = NULL;
    struct vault_fetched f;
    ck_assert_int_eq(create_b64(&e, &ROOT, "sandboxes/sbx-1/c-0", SECRET_A,
                                ",\"bound_hosts\":[\"echo.example.com\"]"),
                     201);
    ck_assert_int_eq(create_b64(&e, &ROOT, "sandboxes/sbx-2/c-0", SECRET_B,
                                ",\"bound_hosts\":[\"echo.example.com\"]"),
                     201);
    ck_assert_int_eq(create_b64(&e, &ROOT, "sandboxes/sbx-10/c-0", SECRET_B, NULL), 201);
    ck_assert_int_eq(fetch(&e, &EGRESS, "sandboxes/sbx-1/c-0", "echo.example.com", &f, &out), 200);
    ck_assert(f.value.len == strlen(SECRET_A) && memcmp(f.value.data, SECRET_A, f.value.len) == 0);
    vault_value_free(&f.value);
    json_decref(out);
    /* Another sandbox's, also one whose id starts with this one's. */
    ck_assert_int_eq(fetch(&e, &EGRESS, "sandboxes/sbx-2/c-0", "echo.example.com", &f, &out), 403);
    ck_assert_ptr_null(f.value.data);
    ck_assert_ptr_nonnull(
        strstr(json_string_value(json_object_get(out, "message")), "scoped to another sandbox"));
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &EGRESS, "sandboxes/sbx-10/c-0", "a.example.com", &f, &out), 403);
    ck_assert_ptr_null(f.value.data);
    json_decref(out);
    /* Its bound host still applies. */
    ck_assert_int_eq(fetch(&e, &EGRESS, "sandboxes/sbx-1/c-0", "evil.example.com", &f, &out), 403);
    ck_assert_ptr_null(f.value.data);
    json_decref(out);
    env_close(&e);
}
END_TEST

START_TEST(egress_role_needs_the_egress_program)
{
    struct vault_roles r = {0};
    struct al_error err = {0};
    ck_assert_int_eq(vault_roles_set_egress_exe(&r, "/nonexistent/airlock-egress", &err), -ENOENT);
    ck_assert_int_eq(vault_roles_set_egress_exe(&r, "/etc/passwd", &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not an executable"));
    ck_assert_int_eq(vault_roles_set_egress_exe(&r, "/proc/self/exe", &err), 0);
    ck_assert(r.egress_exe[0] == '/' && !strstr(r.egress_exe, "/proc/"));
    char seen[256];
    ck_assert(vault_roles_exe_ok(&r, getpid(), seen, sizeof seen));
    ck_assert(!vault_roles_exe_ok(&r, 0, seen, sizeof seen));
    pid_t child = fork();
    if (child == 0) {
        execl("/bin/sleep", "sleep", "5", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* until the child has exec'd */
        char ln[PATH_MAX + 1], proc[64];
        snprintf(proc, sizeof proc, "/proc/%d/exe", (int)child);
        ssize_t l = readlink(proc, ln, PATH_MAX);
        if (l > 0 && (ln[l] = 0, strstr(ln, "sleep")))
            break;
        usleep(5000);
    }
    ck_assert(!vault_roles_exe_ok(&r, child, seen, sizeof seen));
    ck_assert_ptr_nonnull(strstr(seen, "sleep"));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* a vanished pid is nobody */
    ck_assert(!vault_roles_exe_ok(&r, child, seen, sizeof seen));

    struct vault_peer me = {EGRESS_UID, EGRESS_UID, getpid()};
    struct svc_env e;
    json_t *out = NULL;
    struct vault_fetched f;
    /* the configured binary is this program: values are released to it */
    env_open_exe(&e, "exe_ok", "/proc/self/exe");
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 201);
    ck_assert_int_eq(fetch(&e, &me, "gh/token", "api.github.com", &f, &out), 200);
    vault_value_free(&f.value);
    json_decref(out);
    r.egress_set = true;
    r.egress_uid = EGRESS_UID;
    ck_assert_int_eq(vault_roles_of(&r, &me), VAULT_ROLE_EGRESS);
    me.uid = OTHER_UID; /* the program alone is not enough either */
    ck_assert_int_eq(vault_roles_of(&r, &me), 0);
    me.uid = EGRESS_UID;
    env_close(&e);
    /* the configured binary is another program: same uid, refused and logged */
    env_open_exe(&e, "exe_other", "/bin/sh");
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 201);
    ck_assert_int_eq(fetch(&e, &me, "gh/token", "api.github.com", &f, &out), 403);
    ck_assert_ptr_null(f.value.data);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(out, "message")), "write-only"));
    json_decref(out);
    ck_assert_int_eq(api(&e, &me, "GET", "/v1/whoami", "", NULL, &out, NULL), 200);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "roles")), 0);
    json_decref(out);
    env_close(&e);
    json_t *log = access_log(e.audit_dir);
    bool found = false;
    size_t i;
    json_t *rec;
    json_array_foreach(log, i, rec)
    {
        const char *op = json_string_value(json_object_get(rec, "op"));
        const char *reason = json_string_value(json_object_get(rec, "reason"));
        if (op && strcmp(op, "fetch") == 0 && reason &&
            strstr(reason, "not the configured airlock-egress"))
            found = true;
        char *txt = json_dumps(rec, 0);
        ck_assert_ptr_null(strstr(txt, "ghp_"));
        free(txt);
    }
    json_decref(log);
    ck_assert_msg(found, "the refused fetch is not in the access log with its reason");
}
END_TEST

START_TEST(refusals_cannot_flood_the_log)
{
    struct svc_env e;
    env_open(&e, "flood");
    json_t *out;
    for (int i = 0; i < 500; i++) {
        ck_assert_int_eq(api(&e, &OTHER, "GET", "/v1/secrets", "", NULL, &out, NULL), 403);
        json_decref(out);
    }
    usleep(1100000);
    ck_assert_int_eq(api(&e, &OTHER, "GET", "/v1/secrets", "", NULL, &out, NULL), 403);
    json_decref(out);
    env_close(&e);
    json_t *log = access_log(e.audit_dir);
    size_t n = json_array_size(log);
    /* at most 20 a second are logged one by one: the loop takes well under 25 s */
    ck_assert_uint_ge(n, 21);
    ck_assert_uint_lt(n, 500);
    /* and the next logged refusal says how many were only counted */
    const char *reason = json_string_value(json_object_get(json_array_get(log, n - 1), "reason"));
    ck_assert_ptr_nonnull(strstr(reason, "were not logged one by one"));
    json_decref(log);
}
END_TEST

START_TEST(every_access_is_logged)
{
    struct svc_env e;
    env_open(&e, "logged");
    json_t *out;
    struct vault_fetched f;
    ck_assert_int_eq(
        create_b64(&e, &ROOT, "gh/token", SECRET_A, ",\"bound_hosts\":[\"api.github.com\"]"), 201);
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "api.github.com", &f, &out), 200);
    char sid[VAULT_SECRET_ID_LEN + 1];
    snprintf(sid, sizeof sid, "%s", f.secret_id);
    vault_value_free(&f.value);
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &OTHER, "gh/token", "api.github.com", &f, &out), 403);
    json_decref(out);
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "evil.com", &f, &out), 403);
    json_decref(out);
    env_close(&e);

    json_t *log = access_log(e.audit_dir);
    ck_assert_uint_eq(json_array_size(log), 4);
    json_t *r = json_array_get(log, 0);
    ck_assert_str_eq(json_string_value(json_object_get(r, "op")), "create");
    ck_assert_str_eq(json_string_value(json_object_get(r, "secret_id")), sid);
    r = json_array_get(log, 1);
    ck_assert_str_eq(json_string_value(json_object_get(r, "op")), "fetch");
    ck_assert_str_eq(json_string_value(json_object_get(r, "result")), "ok");
    ck_assert_int_eq(json_integer_value(json_object_get(r, "version")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(r, "secret_id")), sid);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(r, "peer"), "uid")),
                     EGRESS_UID);
    json_t *ob = json_object_get(r, "on_behalf");
    ck_assert_str_eq(json_string_value(json_object_get(ob, "sandbox")), "sbx-1");
    ck_assert_str_eq(json_string_value(json_object_get(ob, "rule")), "gh");
    ck_assert_str_eq(json_string_value(json_object_get(ob, "host")), "api.github.com");
    ck_assert_str_eq(json_string_value(json_object_get(ob, "request_id")), "req-1");
    r = json_array_get(log, 2);
    ck_assert_str_eq(json_string_value(json_object_get(r, "result")), "denied");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(r, "peer"), "uid")),
                     OTHER_UID);
    r = json_array_get(log, 3);
    ck_assert_str_eq(json_string_value(json_object_get(r, "result")), "denied");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(r, "reason")), "evil.com"));
    json_decref(log);

    struct al_auditlog_verify_opts vo = {.dir = e.audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    struct al_auditlog_verify_result vr;
    ck_assert_int_eq(al_auditlog_verify(&vo, &vr, NULL), 0);
    ck_assert_int_eq(vr.verdict, AL_AUDIT_INTACT);
}
END_TEST

START_TEST(changes_feed_for_the_egress_cache)
{
    struct svc_env e;
    env_open(&e, "changes");
    json_t *out;
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=0", NULL, &out, NULL), 200);
    ck_assert_int_eq(json_integer_value(json_object_get(out, "generation")), 0);
    ck_assert(!json_is_true(json_object_get(out, "full")));
    json_decref(out);
    ck_assert_int_eq(create_b64(&e, &ROOT, "a", "1", NULL), 201);
    ck_assert_int_eq(create_b64(&e, &ROOT, "b", "2", NULL), 201);
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=1", NULL, &out, NULL), 200);
    ck_assert_int_eq(json_integer_value(json_object_get(out, "generation")), 2);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "changed")), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(out, "changed"), 0)), "b");
    json_decref(out);
    /* a rotation and a deletion both show */
    ck_assert_int_eq(
        api(&e, &ROOT, "PUT", "/v1/secrets/a", "", "{\"value_b64\":\"eA==\"}", &out, NULL), 200);
    json_decref(out);
    ck_assert_int_eq(api(&e, &ROOT, "DELETE", "/v1/secrets/b", "", NULL, &out, NULL), 200);
    json_decref(out);
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=2&wait_ms=10", NULL, &out, NULL),
                     200);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "changed")), 2);
    json_decref(out);
    /* a generation this vault never had: start over */
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=99", NULL, &out, NULL), 200);
    ck_assert(json_is_true(json_object_get(out, "full")));
    json_decref(out);
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "", NULL, &out, NULL), 400);
    json_decref(out);
    /* each parameter once, decoded as every query is: a second since (or wait_ms) is refused
     * rather than one of the two silently taken */
    const char *bad[] = {"since=0&since=3",    "since=1&wait_ms=10&wait_ms=20", "since=x", "since=",
                         "since=1&wait_ms=-1", "since=12345678901234567890"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(api(&e, &EGRESS, "GET", "/v1/changes", bad[i], NULL, &out, NULL) == 400,
                      "%s was accepted", bad[i]);
        json_decref(out);
    }
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=0&since=3", NULL, &out, NULL),
                     400);
    ck_assert_ptr_nonnull(
        strstr(json_string_value(json_object_get(out, "message")), "at most once"));
    json_decref(out);
    uint64_t since = 0;
    uint32_t wait = 0;
    ck_assert_int_eq(vault_api_changes_query("wait_ms=70000&since=%37", &since, &wait), 0);
    ck_assert_uint_eq(since, 7);
    ck_assert_uint_eq(wait, 60000);
    ck_assert_int_eq(vault_api_changes_query("since=1&since=1", &since, &wait), -ENOTUNIQ);
    ck_assert_int_eq(vault_api_changes_query(NULL, &since, &wait), -EINVAL);
    ck_assert_int_eq(api(&e, &OTHER, "GET", "/v1/changes", "since=0", NULL, &out, NULL), 403);
    json_decref(out);
    /* changes made by another process (the offline CLI) are seen */
    struct vault_store *s2 = sopen(e.dir);
    put(s2, "c", "3", true, NULL, 0);
    vault_store_close(s2);
    ck_assert_int_eq(api(&e, &EGRESS, "GET", "/v1/changes", "since=4", NULL, &out, NULL), 200);
    ck_assert_int_eq(json_integer_value(json_object_get(out, "generation")), 5);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(out, "changed"), 0)), "c");
    json_decref(out);
    env_close(&e);
}
END_TEST

START_TEST(fails_closed_without_the_access_log)
{
    /* The access log on a small tmpfs in a private mount namespace (this test is its own
     * process; the mount goes away with it). */
    const char *d = vdir("closed");
    char audit[600];
    snprintf(audit, sizeof audit, "%s/" VAULT_AUDIT_DIR, d);
    ck_assert_int_eq(al_mkdir_p(audit, 0750), 0);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        fprintf(stderr, "fails_closed test skipped: no mount namespace (%s)\n", strerror(errno));
        return;
    }
    ck_assert_int_eq(mount("tmpfs", audit, "tmpfs", MS_NOSUID | MS_NODEV, "size=128k,mode=0750"),
                     0);
    struct svc_env e;
    memset(&e, 0, sizeof e);
    e.dir = d;
    e.store = sopen(d);
    snprintf(e.audit_dir, sizeof e.audit_dir, "%s", audit);
    struct al_auditlog_opts ao = {.dir = audit, .prefix = VAULT_AUDIT_PREFIX};
    ck_assert_int_eq(al_auditlog_open(&ao, &e.audit, NULL), 0);
    struct vault_service_opts so = {.store = e.store,
                                    .audit = e.audit,
                                    .roles = {.egress_set = true, .egress_uid = EGRESS_UID}};
    ck_assert_int_eq(vault_service_new(&so, &e.svc), 0);
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 201);
    json_t *out;
    struct vault_fetched f;
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "a.com", &f, &out), 200);
    vault_value_free(&f.value);
    json_decref(out);
    ck_assert_int_eq(al_auditlog_sync(e.audit, 0), 0);
    /* fill the disk */
    char filler[700];
    snprintf(filler, sizeof filler, "%s/filler", audit);
    int fd = open(filler, O_WRONLY | O_CREAT, 0600);
    char blk[4096] = {0};
    while (write(fd, blk, sizeof blk) > 0) {
    }
    close(fd);
    /* the next access cannot be recorded: the writer reports it, and from then on nothing
     * is answered, least of all a value */
    int st = 200, rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++) { /* until the last page of the file is full */
        st = fetch(&e, &EGRESS, "gh/token", "a.com", &f, &out);
        vault_value_free(&f.value);
        json_decref(out);
        rc = al_auditlog_sync(e.audit, 0);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "a.com", &f, &out), 503);
    ck_assert_ptr_null(f.value.data);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(out, "message")), "access log"));
    json_decref(out);
    ck_assert_int_eq(api(&e, &ROOT, "GET", "/v1/secrets", "", NULL, &out, NULL), 503);
    json_decref(out);
    ck_assert_int_eq(create_b64(&e, &ROOT, "more", "x", NULL), 503);
    ck_assert_int_eq(st, 200);
    /* space again: the log catches up and the vault answers again */
    unlink(filler);
    for (int i = 0; i < 100 && al_auditlog_status(e.audit) != 0; i++)
        usleep(20000);
    ck_assert_int_eq(fetch(&e, &EGRESS, "gh/token", "a.com", &f, &out), 200);
    vault_value_free(&f.value);
    json_decref(out);
    env_close(&e);
    struct al_auditlog_verify_opts vo = {.dir = audit, .prefix = VAULT_AUDIT_PREFIX};
    struct al_auditlog_verify_result vr;
    ck_assert_int_eq(al_auditlog_verify(&vo, &vr, NULL), 0);
    ck_assert_int_eq(vr.verdict, AL_AUDIT_INTACT);
    umount2(audit, MNT_DETACH);
}
END_TEST

/* ---- no value anywhere --------------------------------------------------------------------------- */

static bool file_has_secret(const char *path, const char *secret)
{
    size_t len = 0;
    char *d = slurp(path, &len);
    if (!d)
        return false;
    bool hit = al_audit_line_contains_secret(d, len, secret, strlen(secret));
    free(d);
    return hit;
}

static const char *g_grep_secret;
static int g_grep_hits;
static int grep_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag == FTW_F && S_ISREG(st->st_mode) && file_has_secret(p, g_grep_secret)) {
        fprintf(stderr, "secret found in %s\n", p);
        g_grep_hits++;
    }
    return 0;
}

/* A binary of this build: $AIRLOCK_BINARY_DIR/bin (ctest), else next to this test. */
static void bin_path(char *out, size_t n, const char *name)
{
    const char *bd = getenv("AIRLOCK_BINARY_DIR");
    if (bd) {
        snprintf(out, n, "%s/bin/%s", bd, name);
        return;
    }
    char self[512];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    self[l > 0 ? l : 0] = '\0';
    char *sl = strrchr(self, '/');
    if (sl)
        *sl = '\0';
    snprintf(out, n, "%s/%s", self, name);
}

static const char *g_cli_path; /* PATH for the CLI; NULL: inherited */

/* Runs `bin --state-dir state group a1...` with stdin; returns the exit status, output in out
 * (stdout+stderr). */
static int run_cli_exe(const char *bin, const char *state, const char *group, const char *in,
                       char *out, size_t outlen, const char *a1, const char *a2, const char *a3,
                       const char *a4)
{
    int pin[2], pout[2];
    ck_assert_int_eq(pipe(pin), 0);
    ck_assert_int_eq(pipe(pout), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(pout[1], 2);
        close(pin[1]);
        close(pout[0]);
        if (g_cli_path)
            setenv("PATH", g_cli_path, 1);
        execl(bin, "airlock", "--state-dir", state, group, a1, a2, a3, a4, (char *)NULL);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    if (in && write(pin[1], in, strlen(in)) < 0)
        ck_abort_msg("write to the CLI failed");
    close(pin[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(pout[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(pout[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* `airlock vault a1...` of this build. */
static int run_cli(const char *state, const char *in, char *out, size_t outlen, const char *a1,
                   const char *a2, const char *a3, const char *a4)
{
    char bin[600];
    bin_path(bin, sizeof bin, "airlock");
    return run_cli_exe(bin, state, "vault", in, out, outlen, a1, a2, a3, a4);
}

/* The vault's commands are airlock-vault's: an airlock that finds none, beside it or on PATH,
 * says what to install (and does not pretend to have a vault). */
START_TEST(cli_without_airlock_vault_says_so)
{
    char bin[600], lone[600], cmd[1400], out[4096];
    bin_path(bin, sizeof bin, "airlock");
    snprintf(lone, sizeof lone, "%s", tdir("lone"));
    ck_assert_int_eq(mkdir(lone, 0755), 0);
    snprintf(lone + strlen(lone), sizeof lone - strlen(lone), "/airlock");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", bin, lone);
    ck_assert_int_eq(system(cmd), 0);
    g_cli_path = "/nonexistent";
    const char *state = tdir("lone-state");
    ck_assert_int_eq(
        run_cli_exe(lone, state, "vault", NULL, out, sizeof out, "ls", NULL, NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "install airlock-vault"));
    ck_assert_int_eq(
        run_cli_exe(lone, state, "audit", "v\n", out, sizeof out, "hash-secret", NULL, NULL, NULL),
        1);
    ck_assert_ptr_nonnull(strstr(out, "install airlock-vault"));
    g_cli_path = NULL;
}
END_TEST

START_TEST(cli_is_write_only_and_never_echoes)
{
    const char *state = tdir("cli");
    char out[16384];
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "init", NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "master key"));
    ck_assert_int_eq(run_cli(state, SECRET_A "\n", out, sizeof out, "put", "github/token",
                             "--bound-host", "api.github.com"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "version 1 stored"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(
        run_cli(state, SECRET_B, out, sizeof out, "rotate", "github/token", NULL, NULL), 0);
    /* a wildcard over a public suffix: refused before the value is read, the rule named */
    ck_assert_int_eq(
        run_cli(state, SECRET_A, out, sizeof out, "put", "x/psl", "--bound-host", "*.co.uk"), 2);
    ck_assert_ptr_nonnull(strstr(out, "wildcard_public_suffix"));
    ck_assert_ptr_nonnull(strstr(out, "co.uk"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    /* reading back is not a thing */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "get", "github/token", NULL, NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "write-only"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "put", "x", "--value", SECRET_A), 2);
    ck_assert_ptr_nonnull(strstr(out, "never taken from the command line"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    /* a value pasted as the name is not echoed */
    ck_assert_int_eq(run_cli(state, "v", out, sizeof out, "put", SECRET_A, NULL, NULL), 2);
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(run_cli(state, "v", out, sizeof out, "put", "a", SECRET_A, NULL), 2);
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(run_cli(state, "", out, sizeof out, "put", "empty/one", NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "empty"));
    /* metadata only */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "show", "github/token", "--json", NULL),
                     0);
    json_t *j = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, NULL);
    ck_assert_ptr_nonnull(j);
    const char *sid = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "versions"), 0), "secret_id"));
    char want_sid[64];
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    json_decref(j);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "ls", NULL, NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "history", "github/token", NULL, NULL),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "rotate"));
    /* the auditor's tool gives the same id for the same value */
    ck_assert_int_eq(
        run_cli(state, SECRET_B "\n", out, sizeof out, "hash-secret", NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, want_sid));
    /* and so does the audit group's, which is the vault's command run for it */
    char bin[600];
    bin_path(bin, sizeof bin, "airlock");
    ck_assert_int_eq(run_cli_exe(bin, state, "audit", SECRET_B "\n", out, sizeof out, "hash-secret",
                                 NULL, NULL, NULL),
                     0);
    ck_assert_ptr_nonnull(strstr(out, want_sid));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "check", NULL, NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "log", "verify", NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "INTACT"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "log", "tail", "-n", "50"), 0);
    ck_assert_ptr_nonnull(strstr(out, "rotate"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "rm", "github/token", NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "show", "github/token", NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "no secret named"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "frobnicate", NULL, NULL, NULL), 2);
    /* an option that means nothing to a command is an error, not silently ignored */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "ls", "--bound-host", "a.com", NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "does not apply"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "put", "x", "--keep", NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "needs a value"));

    /* nothing under the state directory holds either value in any encoding */
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(state, grep_cb, 16, FTW_PHYS);
    g_grep_secret = SECRET_B;
    nftw(state, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

START_TEST(no_value_in_logs_or_errors)
{
    /* everything the process logs goes to a file we grep afterwards */
    char logp[600];
    snprintf(logp, sizeof logp, "%s/process.log", tdir("nolog"));
    al_mkdir_p(tdir("nolog"), 0700);
    int lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(lfd, 0);
    al_log_init("test", AL_LOG_JSON, AL_LOG_DEBUG);
    al_log_set_fd(lfd);
    struct svc_env e;
    env_open(&e, "nolog-vault");
    json_t *out;
    struct vault_fetched f;
    json_t *answers = json_array();
    ck_assert_int_eq(
        create_b64(&e, &ROOT, "gh/token", SECRET_A, ",\"bound_hosts\":[\"api.github.com\"]"), 201);
    ck_assert_int_eq(create_b64(&e, &OTHER, "x", SECRET_A, NULL), 403);
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 409);
    int sts[] = {fetch(&e, &EGRESS, "gh/token", "evil.com", &f, &out), 0};
    json_array_append_new(answers, out);
    sts[1] = fetch(&e, &EGRESS, "gh/token", "api.github.com", &f, &out);
    ck_assert_int_eq(sts[0], 403);
    ck_assert_int_eq(sts[1], 200);
    json_array_append_new(answers, out); /* the metadata part of the answer */
    vault_value_free(&f.value);
    ck_assert_int_eq(
        api(&e, &ROOT, "PUT", "/v1/secrets/gh/token", "", "{\"value_b64\":\"!!\"}", &out, NULL),
        400);
    json_array_append_new(answers, out);
    ck_assert_int_eq(api(&e, &ROOT, "GET", "/v1/history/gh/token", "", NULL, &out, NULL), 200);
    json_array_append_new(answers, out);
    env_close(&e);
    close(lfd);
    al_log_set_fd(2);

    char *a = json_dumps(answers, 0);
    ck_assert(!al_audit_line_contains_secret(a, strlen(a), SECRET_A, strlen(SECRET_A)));
    free(a);
    json_decref(answers);
    ck_assert(!file_has_secret(logp, SECRET_A));
    size_t ll;
    char *logs = slurp(logp, &ll);
    ck_assert_ptr_nonnull(strstr(logs, "refused")); /* something was logged */
    free(logs);
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(e.dir, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

START_TEST(no_core_dumps)
{
    const char *d = tdir("core");
    al_mkdir_p(d, 0700);
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(d) != 0)
            _exit(3);
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        setrlimit(RLIMIT_CORE, &rl); /* as permissive as a careless admin */
        vault_harden_process();
        struct rlimit now;
        getrlimit(RLIMIT_CORE, &now);
        if (now.rlim_cur != 0 || now.rlim_max != 0)
            _exit(4);
        if (prctl(PR_GET_DUMPABLE) != 0)
            _exit(5);
        struct vault_value v;
        vault_value_set(&v, SECRET_A, strlen(SECRET_A));
        signal(SIGABRT, SIG_DFL);
        abort(); /* would dump core with the value in it */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child exit %d", WEXITSTATUS(st));
    ck_assert(!WCOREDUMP(st));
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(d, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

/* A process with another uid cannot get at the vault's files (the daemon's socket test, with
 * SO_PEERCRED, is in the http suite below). */
START_TEST(other_uid_cannot_open_the_files)
{
    const char *d = vdir("otheruid");
    chmod(g_root, 0755);
    pid_t pid = fork();
    if (pid == 0) {
        uid_t uid = 2000000000u + (uid_t)(getpid() % 100000);
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(3);
        struct vault_store *s = NULL;
        struct al_error e = {0};
        int rc = vault_store_open(d, NULL, &s, &e);
        if (rc != -EACCES)
            _exit(4);
        if (!strstr(e.msg, "permission denied"))
            _exit(5);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit %d", WEXITSTATUS(st));
}
END_TEST

/* ---- the daemon over its socket (SO_PEERCRED) -------------------------------------------------- */
#include "common/http.h"

static uid_t g_uid_egress, g_uid_other, g_uid_reader;
static char g_sock_target[700];

static void throwaway_uids(void)
{
    uid_t base = 2000000000u + (uid_t)(getpid() % 100000) * 4;
    g_uid_egress = base;
    g_uid_other = base + 1;
    g_uid_reader = base + 2;
}

static pid_t start_daemon(const char *state)
{
    char bin[700], eg[32], rd[32], logf[700];
    bin_path(bin, sizeof bin, "airlock-vault");
    snprintf(eg, sizeof eg, "%u", (unsigned)g_uid_egress);
    snprintf(rd, sizeof rd, "%u", (unsigned)g_uid_reader);
    snprintf(logf, sizeof logf, "%s/daemon.log", state);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        /* roles from both sources: the config file and a flag */
        char cfgp[800];
        snprintf(cfgp, sizeof cfgp, "%s/vault/vault.yaml", state);
        FILE *cf = fopen(cfgp, "w");
        if (!cf)
            _exit(126);
        fprintf(cf, "roles:\n  airlockd_user: \"%s\"\ncache_max_age: 45s\n", rd);
        fclose(cf);
        execl(bin, "airlock-vault", "--state-dir", state, "--egress-user", eg, "--log-level",
              "debug", (char *)NULL);
        _exit(127);
    }
    snprintf(g_sock_target, sizeof g_sock_target, "unix:%s/run/vault.sock", state);
    for (int i = 0; i < 200; i++) {
        int st = 0;
        json_t *out = NULL;
        struct al_http_call_opts o = {
            .target = g_sock_target, .method = "GET", .path = "/v1/health", .timeout_ms = 1000};
        if (al_http_call_json(&o, NULL, &st, &out, NULL) == 0 && st == 200) {
            json_decref(out);
            return pid;
        }
        usleep(25000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("airlock-vault did not start (see %s)", logf);
    return -1;
}

static int stop_daemon(pid_t pid)
{
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs fn in a child that has become uid (a uid no user has: nothing on the system changes). */
static int as_uid(uid_t uid, int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(90);
        _exit(fn(arg));
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int http_status(const char *method, const char *path, const char *body, json_t **out)
{
    json_t *b = body ? json_loads(body, 0, NULL) : NULL;
    int st = 0;
    json_t *o = NULL;
    struct al_http_call_opts co = {
        .target = g_sock_target, .method = method, .path = path, .timeout_ms = 5000};
    int rc = al_http_call_json(&co, b, &st, &o, NULL);
    json_decref(b);
    if (out)
        *out = o;
    else
        json_decref(o);
    return rc ? -1 : st;
}

static const char *FETCH_GH = "{\"name\":\"gh/token\",\"sandbox\":\"sbx-7\",\"rule\":\"github\","
                              "\"host\":\"api.github.com\",\"request_id\":\"r-42\"}";

static int other_uid_probe(void *arg)
{
    (void)arg;
    json_t *out;
    if (http_status("GET", "/v1/secrets", NULL, NULL) != 403)
        return 10;
    if (http_status("POST", "/v1/fetch", FETCH_GH, &out) != 403)
        return 11;
    const char *m = json_string_value(json_object_get(out, "message"));
    if (!m || !strstr(m, "write-only"))
        return 12;
    json_decref(out);
    if (http_status("DELETE", "/v1/secrets/gh/token", NULL, NULL) != 403)
        return 13;
    if (http_status("GET", "/v1/whoami", NULL, &out) != 200 ||
        json_array_size(json_object_get(out, "roles")) != 0)
        return 14;
    json_decref(out);
    return 0;
}

static int egress_probe(void *arg)
{
    const char *want = arg;
    json_t *out = NULL;
    json_t *b = json_loads(FETCH_GH, 0, NULL);
    struct al_http_resp r;
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    struct al_http_header h = {"Content-Type", "application/json"};
    char target[700];
    snprintf(target, sizeof target, "%s", g_sock_target);
    struct al_http_call_opts o = {.target = target,
                                  .method = "POST",
                                  .path = "/v1/fetch",
                                  .headers = &h,
                                  .n_headers = 1,
                                  .body = body,
                                  .body_len = strlen(body),
                                  .timeout_ms = 5000,
                                  .max_body = 65536};
    if (al_http_call(&o, &r, NULL) != 0)
        return 20;
    free(body);
    if (r.status != 200)
        return 21;
    const char *cc = al_http_resp_header(&r, "Cache-Control");
    if (!cc || strcmp(cc, "no-store") != 0)
        return 22;
    out = json_loadb(r.body.data, r.body.len, 0, NULL);
    al_buf_free_wipe(&r.body);
    al_http_resp_free(&r);
    const char *b64 = json_string_value(json_object_get(out, "value_b64"));
    unsigned char dec[256];
    size_t dl = 0;
    if (!b64 || sodium_base642bin(dec, sizeof dec, b64, strlen(b64), NULL, &dl, NULL,
                                  sodium_base64_VARIANT_ORIGINAL) != 0)
        return 23;
    if (dl != strlen(want) || memcmp(dec, want, dl) != 0)
        return 24;
    if (!json_is_integer(json_object_get(out, "generation")) ||
        json_integer_value(json_object_get(out, "max_age_ms")) != 45000)
        return 25;
    json_decref(out);
    /* bound hosts hold even for the egress proxy */
    if (http_status("POST", "/v1/fetch",
                    "{\"name\":\"gh/token\",\"sandbox\":\"sbx-7\",\"rule\":\"github\","
                    "\"host\":\"evil.example\"}",
                    NULL) != 403)
        return 26;
    /* but it may not list or change anything */
    if (http_status("GET", "/v1/secrets", NULL, NULL) != 403)
        return 27;
    if (http_status("PUT", "/v1/secrets/gh/token", "{\"value_b64\":\"eA==\"}", NULL) != 403)
        return 28;
    return 0;
}

static int reader_probe(void *arg)
{
    (void)arg;
    json_t *out;
    if (http_status("GET", "/v1/secrets", NULL, &out) != 200 ||
        json_array_size(json_object_get(out, "secrets")) != 1)
        return 30;
    char *s = json_dumps(out, 0);
    bool leak = strstr(s, "value") && strstr(s, "value_b64");
    free(s);
    json_decref(out);
    if (leak)
        return 31;
    if (http_status("POST", "/v1/fetch", FETCH_GH, NULL) != 403)
        return 32;
    return 0;
}

/* Long-poll: returns the number of ms until the change was announced. */
static int longpoll_probe(void *arg)
{
    uint64_t since = *(uint64_t *)arg;
    char path[128];
    snprintf(path, sizeof path, "/v1/changes?since=%llu&wait_ms=10000", (unsigned long long)since);
    uint64_t t0 = al_now_ns();
    json_t *out;
    if (http_status("GET", path, NULL, &out) != 200)
        return 40;
    uint64_t ms = (al_now_ns() - t0) / 1000000;
    const char *name = json_string_value(json_array_get(json_object_get(out, "changed"), 0));
    if (!name || strcmp(name, "gh/token") != 0)
        return 41;
    json_decref(out);
    return ms > 3000 ? 42 : 0;
}

START_TEST(daemon_decides_by_peer_credentials)
{
    throwaway_uids();
    const char *state = tdir("daemon");
    char vd[700];
    snprintf(vd, sizeof vd, "%s/vault", state);
    struct al_error e = {0};
    ck_assert_int_eq(vault_store_init(vd, NULL, &e), 0);
    ck_assert_int_eq(chmod(state, 0755), 0); /* the socket must be reachable for other uids */
    pid_t d = start_daemon(state);
    /* root creates (through the socket) */
    char body[256], b64[128];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)SECRET_A, strlen(SECRET_A),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(body, sizeof body, "{\"value_b64\":\"%s\",\"bound_hosts\":[\"api.github.com\"]}", b64);
    ck_assert_int_eq(http_status("POST", "/v1/secrets/gh/token", body, NULL), 201);
    ck_assert_int_eq(http_status("POST", "/v1/fetch", FETCH_GH, NULL), 403); /* root: no */
    ck_assert_int_eq(as_uid(g_uid_other, other_uid_probe, NULL), 0);
    ck_assert_int_eq(as_uid(g_uid_egress, egress_probe, (void *)SECRET_A), 0);
    ck_assert_int_eq(as_uid(g_uid_reader, reader_probe, NULL), 0);

    /* a rotation reaches a parked long-poll at once */
    json_t *out;
    ck_assert_int_eq(http_status("GET", "/v1/whoami", NULL, &out), 200);
    uint64_t gen = (uint64_t)json_integer_value(json_object_get(out, "generation"));
    json_decref(out);
    pid_t poller = fork();
    if (poller == 0) {
        if (setgroups(0, NULL) || setresgid(g_uid_egress, g_uid_egress, g_uid_egress) ||
            setresuid(g_uid_egress, g_uid_egress, g_uid_egress))
            _exit(90);
        _exit(longpoll_probe(&gen));
    }
    usleep(300000);
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)SECRET_B, strlen(SECRET_B),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(body, sizeof body, "{\"value_b64\":\"%s\"}", b64);
    ck_assert_int_eq(http_status("PUT", "/v1/secrets/gh/token", body, NULL), 200);
    int st;
    waitpid(poller, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "long-poll: %d", WEXITSTATUS(st));
    ck_assert_int_eq(as_uid(g_uid_egress, egress_probe, (void *)SECRET_B), 0);

    /* the CLI goes through the daemon when it runs */
    char outbuf[8192];
    ck_assert_int_eq(run_cli(state, NULL, outbuf, sizeof outbuf, "ls", NULL, NULL, NULL), 0);
    ck_assert_ptr_null(strstr(outbuf, "not running"));
    ck_assert_ptr_nonnull(strstr(outbuf, "gh/token"));

    ck_assert_int_eq(stop_daemon(d), 0);
    char sock[700];
    snprintf(sock, sizeof sock, "%s/run/vault.sock", state);
    struct stat sst;
    ck_assert_int_eq(stat(sock, &sst), -1);

    /* every refusal is in the access log with the caller's real uid */
    char adir[800];
    snprintf(adir, sizeof adir, "%s/" VAULT_AUDIT_DIR, vd);
    json_t *log = access_log(adir);
    int denied_other = 0, fetched = 0, denied_host = 0;
    size_t i;
    json_t *r;
    json_array_foreach(log, i, r)
    {
        json_int_t uid = json_integer_value(json_object_get(json_object_get(r, "peer"), "uid"));
        const char *op = json_string_value(json_object_get(r, "op"));
        const char *res = json_string_value(json_object_get(r, "result"));
        if (uid == (json_int_t)g_uid_other && res && strcmp(res, "denied") == 0)
            denied_other++;
        if (uid == (json_int_t)g_uid_egress && op && strcmp(op, "fetch") == 0 && res &&
            strcmp(res, "ok") == 0) {
            fetched++;
            ck_assert_str_eq(
                json_string_value(json_object_get(json_object_get(r, "on_behalf"), "sandbox")),
                "sbx-7");
        }
        if (res && strcmp(res, "denied") == 0 && json_object_get(r, "reason") &&
            strstr(json_string_value(json_object_get(r, "reason")), "evil.example"))
            denied_host++;
    }
    json_decref(log);
    ck_assert_int_eq(denied_other, 3);
    ck_assert_int_eq(fetched, 2);
    ck_assert_int_eq(denied_host, 2);
    struct al_auditlog_verify_opts vo = {.dir = adir, .prefix = VAULT_AUDIT_PREFIX};
    struct al_auditlog_verify_result vr;
    ck_assert_int_eq(al_auditlog_verify(&vo, &vr, NULL), 0);
    ck_assert_int_eq(vr.verdict, AL_AUDIT_INTACT);
    ck_assert_int_eq(vr.tail, AL_AUDIT_TAIL_CLOSED);
    /* and no value in the daemon's own log, the access log or anything else there */
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(state, grep_cb, 16, FTW_PHYS);
    g_grep_secret = SECRET_B;
    nftw(state, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

static Suite *vault_suite(void)
{
    Suite *s = suite_create("vault");
    TCase *b = tcase_create("basics");
    tcase_add_unchecked_fixture(b, root_setup, root_teardown);
    tcase_add_test(b, names_and_hosts);
    tcase_add_test(b, bound_hosts_use_the_policy_canonicaliser);
    tcase_add_test(b, secret_ids_are_keyed);
    tcase_add_test(b, round_trip);
    tcase_add_test(b, ids_and_metadata);
    tcase_add_test(b, bad_puts_are_refused);
    tcase_add_test(b, passphrase_vault);
    tcase_add_test(b, clear_errors);
    suite_add_tcase(s, b);

    TCase *t = tcase_create("tamper");
    tcase_add_unchecked_fixture(t, root_setup, root_teardown);
    tcase_add_test(t, tamper_flipped_bytes);
    tcase_add_test(t, tamper_swapped_removed_duplicated);
    tcase_add_test(t, tamper_truncated);
    tcase_add_test(t, tamper_detected_when_writing_and_nothing_changes);
    tcase_add_test(t, values_are_bound_to_name_version_and_vault);
    suite_add_tcase(s, t);

    TCase *c = tcase_create("crash");
    tcase_add_unchecked_fixture(c, root_setup, root_teardown);
    tcase_set_timeout(c, 120);
    tcase_add_test(c, concurrent_writers);
    tcase_add_test(c, sigkill_during_update_leaves_old_or_new);
    suite_add_tcase(s, c);

    TCase *v = tcase_create("service");
    tcase_add_unchecked_fixture(v, root_setup, root_teardown);
    tcase_add_test(v, roles_decide_everything);
    tcase_add_test(v, sandbox_secrets_go_only_to_their_sandbox);
    tcase_add_test(v, egress_role_needs_the_egress_program);
    tcase_add_test(v, every_access_is_logged);
    tcase_add_test(v, refusals_cannot_flood_the_log);
    tcase_add_test(v, changes_feed_for_the_egress_cache);
    tcase_add_test(v, fails_closed_without_the_access_log);
    suite_add_tcase(s, v);

    TCase *h = tcase_create("hygiene");
    tcase_add_unchecked_fixture(h, root_setup, root_teardown);
    tcase_set_timeout(h, 120);
    tcase_add_test(h, cli_is_write_only_and_never_echoes);
    tcase_add_test(h, cli_without_airlock_vault_says_so);
    tcase_add_test(h, no_value_in_logs_or_errors);
    tcase_add_test(h, no_core_dumps);
    tcase_add_test(h, other_uid_cannot_open_the_files);
    suite_add_tcase(s, h);

    TCase *dm = tcase_create("daemon");
    tcase_add_unchecked_fixture(dm, root_setup, root_teardown);
    tcase_set_timeout(dm, 120);
    tcase_add_test(dm, daemon_decides_by_peer_credentials);
    suite_add_tcase(s, dm);
    return s;
}

AL_SUITE_MAIN(vault_suite)
