/* Unit tests: common/yaml (strict reader, positions, limits, getters) and common/config
 * (declarative tables, defaults, file, environment, overrides). */
#include "al_test.h"
#include "common/config.h"
#include "common/yaml.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct al_yaml_doc *parse_ok(const char *text)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct al_yaml_doc *doc = NULL;
    int rc = al_yaml_parse(text, strlen(text), "t.yaml", NULL, &doc, &d);
    if (rc)
        al_diags_print(&d, stderr, false);
    ck_assert_int_eq(rc, 0);
    al_diags_free(&d);
    return doc;
}

/* Parses text that must fail; returns the one formatted error. */
static void parse_fail(const char *text, const struct al_yaml_limits *lim, char *out, size_t len)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct al_yaml_doc *doc = NULL;
    int rc = al_yaml_parse(text, strlen(text), "t.yaml", lim, &doc, &d);
    ck_assert_int_ne(rc, 0);
    ck_assert_ptr_null(doc);
    ck_assert_uint_eq(d.errors, 1);
    al_diag_format(&d.v[0], out, len);
    al_diags_free(&d);
}

START_TEST(yaml_tree_and_positions)
{
    struct al_yaml_doc *doc = parse_ok("# comment\n"
                                       "a: 1\n"
                                       "list:\n"
                                       "  - x\n"
                                       "  - \"y z\"\n"
                                       "map: {k: v, n: ~}\n");
    const struct al_yaml_node *root = al_yaml_root(doc);
    ck_assert_int_eq(root->kind, AL_YAML_MAP);
    ck_assert_uint_eq(root->n, 3);
    ck_assert_str_eq(root->pairs[0].key->str, "a");
    ck_assert_uint_eq(root->pairs[0].key->line, 2);
    ck_assert_uint_eq(root->pairs[0].key->col, 1);
    ck_assert_uint_eq(root->pairs[0].value->col, 4);
    const struct al_yaml_node *list = al_yaml_get(root, "list");
    ck_assert_int_eq(list->kind, AL_YAML_SEQ);
    ck_assert_uint_eq(list->n, 2);
    ck_assert_uint_eq(list->items[1]->line, 5);
    ck_assert_uint_eq(list->items[1]->col, 5);
    ck_assert(!list->items[1]->plain);
    ck_assert_str_eq(list->items[1]->str, "y z");
    const struct al_yaml_node *map = al_yaml_get(root, "map");
    ck_assert(al_yaml_is_null(al_yaml_get(map, "n")));
    ck_assert(!al_yaml_is_null(al_yaml_get(map, "k")));
    ck_assert_ptr_null(al_yaml_get(map, "missing"));
    ck_assert_str_eq(al_yaml_file(doc), "t.yaml");
    al_yaml_free(doc);
    /* An empty document is not an error; its root is NULL. */
    doc = parse_ok("");
    ck_assert_ptr_null(al_yaml_root(doc));
    al_yaml_free(doc);
}
END_TEST

START_TEST(yaml_duplicate_keys_name_both_positions)
{
    char msg[512];
    parse_fail("a: 1\nb: 2\nc:\n  x: 1\n  y: 2\n  x: 3\n", NULL, msg, sizeof msg);
    ck_assert_str_eq(msg, "t.yaml:6:3: error: duplicate key 'x' (first set at line 4, column 3): "
                          "each key may appear only once in a map; remove or merge one of them");
    /* The earliest duplicate is reported, also in big maps (sorted check). */
    char big[8192] = "";
    for (int i = 0; i < 300; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "k%d: %d\n", i, i);
    strcat(big, "k7: again\nk3: again\n");
    parse_fail(big, NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(
        strstr(msg, "t.yaml:301:1: error: duplicate key 'k7' (first set at line 8"));
}
END_TEST

START_TEST(yaml_rejects_aliases_anchors_merge_tags_multidoc)
{
    char msg[512];
    parse_fail("a: &x 1\nb: 2\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "t.yaml:1:4: error: anchors (&x) are not supported"));
    /* The billion-laughs shape dies at its first anchor, long before any expansion. */
    parse_fail("a: &a [\"lol\",\"lol\"]\nb: &b [*a,*a,*a,*a]\nc: [*b,*b,*b,*b]\n", NULL, msg,
               sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "anchors (&a) are not supported"));
    parse_fail("a: *x\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "t.yaml:1:4: error:"));
    parse_fail("a:\n  <<: {b: 1}\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "t.yaml:2:3: error: merge keys (<<) are not supported"));
    parse_fail("a: !!str 1\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "tags (tag:yaml.org,2002:str) are not supported"));
    parse_fail("a: !custom {}\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "tags (!custom) are not supported"));
    parse_fail("a: 1\n---\nb: 2\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "t.yaml:2:1: error: a second YAML document starts here"));
    parse_fail("? [a, b]\n: 1\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "a key must be a plain string, not a list"));
    parse_fail("a: [1, 2\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "YAML syntax:"));
    parse_fail("a: \"\x01\"\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "YAML syntax:"));
    parse_fail("a: \"\xff\xfe\"\n", NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "YAML syntax:"));
}
END_TEST

START_TEST(yaml_limits)
{
    char msg[512];
    struct al_yaml_limits lim = {.max_depth = 8};
    parse_fail("a: [[[[[[[[[[1]]]]]]]]]]\n", &lim, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "nesting deeper than 8 levels"));
    /* The default depth limit holds against a deep flow sequence. */
    char *deep = malloc(20010);
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    deep[20000] = '\0';
    parse_fail(deep, NULL, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "nesting deeper than 64 levels"));
    free(deep);
    struct al_yaml_limits small = {.max_bytes = 16};
    parse_fail("a: 0123456789abcdef\n", &small, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "more than the limit of 16 bytes"));
    struct al_yaml_limits nodes = {.max_nodes = 5};
    parse_fail("[1, 2, 3, 4, 5, 6]\n", &nodes, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "more than 5 nodes"));
    struct al_yaml_limits scal = {.max_scalar = 4};
    parse_fail("a: abcdefgh\n", &scal, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "longer than the limit of 4 bytes"));
}
END_TEST

START_TEST(yaml_typed_getters)
{
    struct al_yaml_doc *doc = parse_ok("t: true\n"
                                       "y: yes\n"
                                       "q: \"true\"\n"
                                       "n: 443\n"
                                       "z: 0123\n"
                                       "qn: \"443\"\n"
                                       "neg: -5\n"
                                       "s: 10MiB\n"
                                       "d: 30s\n"
                                       "d0: 30\n"
                                       "e: enforse\n"
                                       "l: [a, b]\n"
                                       "ls: a\n"
                                       "nul: \"a\\0b\"\n");
    const struct al_yaml_node *r = al_yaml_root(doc);
    struct al_diags d = AL_DIAGS_INIT;
    bool b;
    ck_assert_int_eq(al_yaml_bool(al_yaml_get(r, "t"), "t", &b, &d), 0);
    ck_assert(b);
    ck_assert_int_eq(al_yaml_bool(al_yaml_get(r, "y"), "y", &b, &d), -EINVAL);
    ck_assert_int_eq(al_yaml_bool(al_yaml_get(r, "q"), "q", &b, &d), -EINVAL);
    int64_t i;
    ck_assert_int_eq(al_yaml_int(al_yaml_get(r, "n"), "n", 1, 65535, &i, &d), 0);
    ck_assert_int_eq(i, 443);
    ck_assert_int_eq(al_yaml_int(al_yaml_get(r, "n"), "n", 1, 100, &i, &d), -EINVAL);
    ck_assert_int_eq(al_yaml_int(al_yaml_get(r, "z"), "z", 0, 9999, &i, &d), -EINVAL);
    ck_assert_int_eq(al_yaml_int(al_yaml_get(r, "qn"), "qn", 0, 9999, &i, &d), -EINVAL);
    ck_assert_int_eq(al_yaml_int(al_yaml_get(r, "neg"), "neg", -10, 0, &i, &d), 0);
    ck_assert_int_eq(i, -5);
    uint64_t u;
    ck_assert_int_eq(al_yaml_size(al_yaml_get(r, "s"), "s", 0, UINT64_MAX, &u, &d), 0);
    ck_assert_uint_eq(u, 10u << 20);
    ck_assert_int_eq(al_yaml_duration_ms(al_yaml_get(r, "d"), "d", 0, UINT64_MAX, &u, &d), 0);
    ck_assert_uint_eq(u, 30000);
    ck_assert_int_eq(al_yaml_duration_ms(al_yaml_get(r, "d0"), "d0", 0, UINT64_MAX, &u, &d),
                     -EINVAL);
    static const char *const modes[] = {"enforce", "report", NULL};
    int e;
    ck_assert_int_eq(al_yaml_enum(al_yaml_get(r, "e"), "mode", modes, &e, &d), -EINVAL);
    ck_assert_ptr_nonnull(strstr(d.v[d.n - 1].msg, "did you mean 'enforce'?"));
    ck_assert_int_eq(al_yaml_strlist(al_yaml_get(r, "l"), "l", true, &d), 0);
    ck_assert_int_eq(al_yaml_strlist(al_yaml_get(r, "ls"), "ls", true, &d), -EINVAL);
    ck_assert_ptr_nonnull(strstr(d.v[d.n - 1].msg, "write [a]"));
    const char *s;
    ck_assert_int_eq(al_yaml_str(al_yaml_get(r, "nul"), "nul", &s, &d), -EINVAL);
    ck_assert_ptr_nonnull(strstr(d.v[d.n - 1].msg, "NUL"));
    /* Every getter error is positioned at the value. */
    for (size_t k = 0; k < d.n; k++) {
        ck_assert_str_eq(d.v[k].file, "t.yaml");
        ck_assert_uint_gt(d.v[k].line, 0);
    }
    al_diags_free(&d);
    al_yaml_free(doc);
}
END_TEST

START_TEST(yaml_expect_map_hints)
{
    struct al_yaml_doc *doc = parse_ok("rules: []\nhots: [a]\nzzzzzz: 1\n");
    struct al_diags d = AL_DIAGS_INIT;
    static const char *const keys[] = {"rules", "hosts", "name", NULL};
    ck_assert_int_eq(al_yaml_expect_map(al_yaml_root(doc), "the thing", keys, &d), -EINVAL);
    ck_assert_uint_eq(d.errors, 2);
    char line[512];
    al_diag_format(&d.v[0], line, sizeof line);
    ck_assert_str_eq(line, "t.yaml:2:1: error: unknown key 'hots' in the thing; did you mean "
                           "'hosts'?");
    al_diag_format(&d.v[1], line, sizeof line);
    ck_assert_str_eq(line, "t.yaml:3:1: error: unknown key 'zzzzzz' in the thing (allowed keys: "
                           "rules, hosts, name)");
    ck_assert_str_eq(al_suggest("Hosts", keys), "hosts");
    ck_assert_ptr_null(al_suggest("completely-different", keys));
    al_diags_free(&d);
    al_yaml_free(doc);
}
END_TEST

START_TEST(diags_cap_and_sort)
{
    struct al_diags d = AL_DIAGS_INIT;
    d.max = 3;
    for (int i = 5; i > 0; i--)
        al_diags_add(&d, AL_DIAG_WARNING, "f", (unsigned)i, 1, "w", "warning %d", i);
    ck_assert_uint_eq(d.n, 3);
    ck_assert_uint_eq(d.dropped, 2);
    ck_assert_uint_eq(d.warnings, 5);
    al_diags_sort(&d);
    ck_assert_uint_eq(d.v[0].line, 3);
    ck_assert_int_eq(al_diags_add(&d, AL_DIAG_ERROR, NULL, 0, 0, "e", "x"), -EINVAL);
    ck_assert_int_eq(al_diags_add(NULL, AL_DIAG_ERROR, NULL, 0, 0, "e", "x"), -EINVAL);
    al_diags_free(&d);
}
END_TEST

/* ---- config --------------------------------------------------------------------------- */

struct test_cfg {
    char *listen;
    bool fail_closed;
    int64_t workers;
    uint64_t max_body;
    uint64_t idle_ms;
    int level;
    struct al_cfg_strlist upstreams;
    char *secret_dir;
};

static const char *const levels[] = {"debug", "info", "warn", NULL};

static const struct al_cfg_field test_fields[] = {
    {.key = "listen",
     .type = AL_CFG_STR,
     .offset = offsetof(struct test_cfg, listen),
     .def = "127.0.0.1:3128",
     .env = "T_LISTEN",
     .help = "listener"},
    {.key = "audit.fail_closed",
     .type = AL_CFG_BOOL,
     .offset = offsetof(struct test_cfg, fail_closed),
     .def = "true"},
    {.key = "workers",
     .type = AL_CFG_INT,
     .offset = offsetof(struct test_cfg, workers),
     .def = "2",
     .min = 1,
     .max = 64,
     .env = "T_WORKERS"},
    {.key = "limits.max_body",
     .type = AL_CFG_SIZE,
     .offset = offsetof(struct test_cfg, max_body),
     .def = "10MiB",
     .min = 1,
     .max = 1ll << 30},
    {.key = "limits.idle",
     .type = AL_CFG_DURATION,
     .offset = offsetof(struct test_cfg, idle_ms),
     .def = "60s",
     .min = 1000,
     .max = 3600000},
    {.key = "log_level",
     .type = AL_CFG_ENUM,
     .offset = offsetof(struct test_cfg, level),
     .def = "info",
     .choices = levels},
    {.key = "dns.upstreams",
     .type = AL_CFG_STRLIST,
     .offset = offsetof(struct test_cfg, upstreams),
     .def = "1.1.1.1, 9.9.9.9",
     .env = "T_UPSTREAMS"},
    {.key = "secret_dir",
     .type = AL_CFG_STR,
     .offset = offsetof(struct test_cfg, secret_dir),
     .flags = AL_CFG_REQUIRED,
     .env = "T_SECRET_DIR",
     .help = "where secrets live"},
    {.key = NULL},
};

START_TEST(config_defaults_file_env_override)
{
    unsetenv("T_LISTEN");
    unsetenv("T_WORKERS");
    unsetenv("T_UPSTREAMS");
    setenv("T_SECRET_DIR", "/srv/s", 1);
    const char *text = "listen: 0.0.0.0:8080\n"
                       "limits:\n"
                       "  idle: 5m\n"
                       "dns:\n"
                       "  upstreams: [203.0.113.53]\n";
    struct test_cfg c = {0};
    struct al_diags d = AL_DIAGS_INIT;
    ck_assert_int_eq(al_config_load_buffer(test_fields, &c, text, strlen(text), "c.yaml", &d), 0);
    ck_assert_uint_eq(d.errors, 0);
    ck_assert_str_eq(c.listen, "0.0.0.0:8080");
    ck_assert(c.fail_closed);
    ck_assert_int_eq(c.workers, 2);
    ck_assert_uint_eq(c.max_body, 10u << 20);
    ck_assert_uint_eq(c.idle_ms, 300000);
    ck_assert_int_eq(c.level, 1);
    ck_assert_uint_eq(c.upstreams.n, 1);
    ck_assert_str_eq(c.upstreams.v[0], "203.0.113.53");
    ck_assert_str_eq(c.secret_dir, "/srv/s");
    /* Environment beats the file; overrides beat both. */
    setenv("T_LISTEN", "127.0.0.2:1", 1);
    setenv("T_UPSTREAMS", "a, b ,c", 1);
    al_config_free(test_fields, &c);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(al_config_load_buffer(test_fields, &c, text, strlen(text), "c.yaml", &d), 0);
    ck_assert_str_eq(c.listen, "127.0.0.2:1");
    ck_assert_uint_eq(c.upstreams.n, 3);
    ck_assert_str_eq(c.upstreams.v[1], "b");
    ck_assert_int_eq(al_config_set(test_fields, &c, "listen", "[::1]:9", "--listen", &d), 0);
    ck_assert_str_eq(c.listen, "[::1]:9");
    ck_assert_int_eq(al_config_set(test_fields, &c, "workers", "100", "--workers", &d), -EINVAL);
    ck_assert_ptr_nonnull(strstr(d.v[d.n - 1].msg, "--workers (for 'workers') is 100, outside"));
    ck_assert_int_eq(al_config_set(test_fields, &c, "nope", "1", "--nope", &d), -EINVAL);
    al_config_free(test_fields, &c);
    ck_assert_ptr_null(c.listen);
    al_diags_free(&d);
    unsetenv("T_LISTEN");
    unsetenv("T_UPSTREAMS");
    unsetenv("T_SECRET_DIR");
}
END_TEST

START_TEST(config_errors_have_positions)
{
    unsetenv("T_SECRET_DIR");
    setenv("T_WORKERS", "many", 1);
    const char *text = "listen: 1\n"
                       "workers: 0\n"
                       "limits:\n"
                       "  max_bdy: 1MiB\n"
                       "  idle: 10ms\n"
                       "log_level: verbose\n"
                       "dns: 1.1.1.1\n"
                       "audit:\n"
                       "  fail_closed: on\n";
    struct test_cfg c = {0};
    struct al_diags d = AL_DIAGS_INIT;
    ck_assert_int_eq(al_config_load_buffer(test_fields, &c, text, strlen(text), "c.yaml", &d),
                     -EINVAL);
    char all[4096] = "";
    for (size_t i = 0; i < d.n; i++) {
        char line[512];
        al_diag_format(&d.v[i], line, sizeof line);
        strcat(all, line);
        strcat(all, "\n");
    }
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:2:10: error: 'workers' is 0, outside the allowed "
                                      "range 1..64"));
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:4:3: error: unknown key 'max_bdy' in section "
                                      "'limits'; did you mean 'max_body'?"));
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:5:9: error: 'limits.idle' '10ms' is outside"));
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:6:12: error: 'log_level' must be one of debug, "
                                      "info, warn, not 'verbose'"));
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:7:6: error: section 'dns' must be a map"));
    ck_assert_ptr_nonnull(strstr(all, "c.yaml:9:16: error: 'audit.fail_closed' must be true or "
                                      "false"));
    ck_assert_ptr_nonnull(strstr(all, "environment variable T_WORKERS (for 'workers') must be a "
                                      "decimal whole number"));
    ck_assert_ptr_nonnull(strstr(all, "'secret_dir' is required (where secrets live): set it in "
                                      "the configuration file or in the environment variable "
                                      "T_SECRET_DIR"));
    /* listen: 1 is a string "1" (a plain number is a fine string). */
    ck_assert_str_eq(c.listen, "1");
    al_config_free(test_fields, &c);
    al_diags_free(&d);
    unsetenv("T_WORKERS");
}
END_TEST

START_TEST(config_file_missing_or_optional)
{
    setenv("T_SECRET_DIR", "/x", 1);
    struct test_cfg c = {0};
    struct al_diags d = AL_DIAGS_INIT;
    ck_assert_int_ne(al_config_load(test_fields, &c, "/nonexistent/airlock.yaml", 0, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.v[0].msg, "cannot read the file"));
    al_config_free(test_fields, &c);
    al_diags_free(&d);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(
        al_config_load(test_fields, &c, "/nonexistent/airlock.yaml", AL_CFG_FILE_OPTIONAL, &d), 0);
    ck_assert_str_eq(c.listen, "127.0.0.1:3128");
    al_config_free(test_fields, &c);
    al_diags_free(&d);
    /* Help lists every key. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    al_config_help(test_fields, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "limits.idle"));
    ck_assert_ptr_nonnull(strstr(buf, "T_UPSTREAMS"));
    free(buf);
    unsetenv("T_SECRET_DIR");
}
END_TEST

static Suite *yaml_suite(void)
{
    Suite *s = suite_create("yaml_config");
    TCase *tc = tcase_create("yaml");
    tcase_add_test(tc, yaml_tree_and_positions);
    tcase_add_test(tc, yaml_duplicate_keys_name_both_positions);
    tcase_add_test(tc, yaml_rejects_aliases_anchors_merge_tags_multidoc);
    tcase_add_test(tc, yaml_limits);
    tcase_add_test(tc, yaml_typed_getters);
    tcase_add_test(tc, yaml_expect_map_hints);
    tcase_add_test(tc, diags_cap_and_sort);
    suite_add_tcase(s, tc);
    TCase *tc2 = tcase_create("config");
    tcase_add_test(tc2, config_defaults_file_env_override);
    tcase_add_test(tc2, config_errors_have_positions);
    tcase_add_test(tc2, config_file_missing_or_optional);
    suite_add_tcase(s, tc2);
    return s;
}

AL_SUITE_MAIN(yaml_suite)
