/* tests/unit/vault/test_vault_tamper: the vault file's tampering detection: flipped bytes,
 * swapped, removed, duplicated and truncated lines are refused on open and on write, leaving
 * the file as it was; values are bound to their name, version and vault. */
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
    ck_assert_int_eq(vault_file_body(data, len, off, k, &c, NULL), 0);
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

static Suite *suite(void)
{
    Suite *s = suite_create("vault_tamper");
    TCase *t = vault_tcase("tamper");
    tcase_add_test(t, tamper_flipped_bytes);
    tcase_add_test(t, tamper_swapped_removed_duplicated);
    tcase_add_test(t, tamper_truncated);
    tcase_add_test(t, tamper_detected_when_writing_and_nothing_changes);
    tcase_add_test(t, values_are_bound_to_name_version_and_vault);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
