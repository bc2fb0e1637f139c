/* Unit tests: E2B's Secret API as airlockd maps it onto airlock-vault (controlplane/
 * secrets.c): API names (lower-cased, the vault's syntax, "sec_" reserved, room for the key's
 * namespace) and the Secret shape built from the vault's metadata (only under the caller's
 * namespace; never anything but metadata). */
#include "al_test.h"
#include "controlplane/secrets.h"
#include "vault/vault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(names_map_into_the_keys_namespace)
{
    char prefix[64], name[VAULT_NAME_MAX + 1], vault[VAULT_NAME_MAX + 1];
    cp_secrets_prefix("key_0123abcd", prefix, sizeof prefix);
    ck_assert_str_eq(prefix, "keys/key_0123abcd/");
    struct al_error err = {0};
    ck_assert_int_eq(cp_secrets_name(prefix, "OpenAI-Key", name, vault, &err), 0);
    ck_assert_str_eq(name, "openai-key");
    ck_assert_str_eq(vault, "keys/key_0123abcd/openai-key");
    ck_assert_int_eq(cp_secrets_name(prefix, "team/GitHub_token.v2", name, vault, &err), 0);
    ck_assert_str_eq(vault, "keys/key_0123abcd/team/github_token.v2");
    /* exactly as long as the vault allows under this prefix */
    char longest[VAULT_NAME_MAX + 2];
    size_t room = VAULT_NAME_MAX - strlen(prefix);
    memset(longest, 'a', room);
    longest[room] = '\0';
    ck_assert_int_eq(cp_secrets_name(prefix, longest, name, vault, &err), 0);
    ck_assert_uint_eq(strlen(vault), VAULT_NAME_MAX);
    longest[room] = 'a';
    longest[room + 1] = '\0';
    ck_assert_int_eq(cp_secrets_name(prefix, longest, name, vault, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too long"));
    const char *bad[][2] = {{"", "empty"},
                            {"with space", "not valid"},
                            {"a//b", "not valid"},
                            {"/a", "not valid"},
                            {"a/", "not valid"},
                            {".hidden", "not valid"},
                            {"a/../b", "not valid"},
                            {"a{b}", "not valid"},
                            {"a/b/c/d/e/f/g", "not valid"}, /* 7 segments + the 2 of the prefix */
                            {"sec_0123", "reserved"},
                            {"SEC_x", "reserved"},
                            {NULL, NULL}};
    for (size_t i = 0; bad[i][0]; i++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(cp_secrets_name(prefix, bad[i][0], name, vault, &err) == -EINVAL,
                      "accepted '%s'", bad[i][0]);
        ck_assert_msg(strstr(err.msg, bad[i][1]), "'%s': %s", bad[i][0], err.msg);
    }
    ck_assert_int_eq(cp_secrets_name(prefix, "a/b/c/d/e/f", name, vault, &err), 0);
}
END_TEST

START_TEST(secret_shape_from_vault_metadata)
{
    json_t *vs = json_loads(
        "{\"name\":\"keys/key_1/team/k\",\"id\":\"sec_00112233445566778899aabbccddeeff\","
        "\"description\":\"E2B API secret of API key key_1\",\"metadata\":{\"team\":\"ml\"},"
        "\"bound_hosts\":[],\"created\":\"2026-01-02T03:04:05Z\",\"updated\":"
        "\"2026-01-02T03:05:06Z\",\"current_version\":4,\"keep\":3,\"versions\":[{\"version\":4,"
        "\"created\":\"2026-01-02T03:05:06Z\",\"by\":\"uid 0 (root)\",\"secret_id\":"
        "\"b2k:00000000000000000000000000000000\"}],\"generation\":9}",
        0, NULL);
    ck_assert_ptr_nonnull(vs);
    json_t *o = cp_secrets_json(vs, "keys/key_1/");
    ck_assert_ptr_nonnull(o);
    char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_str_eq(text, "{\"createdAt\":\"2026-01-02T03:04:05Z\",\"currentVersion\":4,"
                           "\"metadata\":{\"team\":\"ml\"},\"name\":\"team/k\",\"secretID\":"
                           "\"sec_00112233445566778899aabbccddeeff\",\"updatedAt\":"
                           "\"2026-01-02T03:05:06Z\"}");
    free(text);
    json_decref(o);
    /* another key's, a prefix that is only a prefix of the key id, the namespace itself */
    ck_assert_ptr_null(cp_secrets_json(vs, "keys/key_2/"));
    ck_assert_ptr_null(cp_secrets_json(vs, "keys/key_/"));
    json_object_set_new(vs, "name", json_string("keys/key_1/"));
    ck_assert_ptr_null(cp_secrets_json(vs, "keys/key_1/"));
    /* a secret stored before identifiers: known by its name; no metadata: {} */
    json_object_set_new(vs, "name", json_string("keys/key_1/old"));
    json_object_set_new(vs, "id", json_null());
    json_object_del(vs, "metadata");
    o = cp_secrets_json(vs, "keys/key_1/");
    ck_assert_str_eq(json_string_value(json_object_get(o, "secretID")), "old");
    ck_assert(json_is_object(json_object_get(o, "metadata")));
    ck_assert_uint_eq(json_object_size(json_object_get(o, "metadata")), 0);
    json_decref(o);
    json_decref(vs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_secrets");
    TCase *tc = tcase_create("basics");
    tcase_add_test(tc, names_map_into_the_keys_namespace);
    tcase_add_test(tc, secret_shape_from_vault_metadata);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
