/* tests/unit/controlplane/test_cp_config: airlockd's configuration keys that stand for options
 * of its helper daemons: the audit.* keys become airlock-egress options that airlock-egress's
 * own parser takes back to the same values (and egress.args, given after them, wins); the
 * disk reserve's keys; and the example configuration deploy/airlockd.yaml, which must name
 * every key of the table at its default so that it cannot drift from the code. */
#include "al_test.h"
#include "controlplane/config.h"
#include "controlplane/record.h"
#include "controlplane/warm.h"
#include "egress/egress.h"
#include "vswitch/vswitch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int load(struct cp_config *c, const char *yaml)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/al-cp-config-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(yaml, f);
    fclose(f);
    int rc = cp_config_load(c, path, "127.0.0.1:0", "/tmp", stderr);
    unlink(path);
    return rc;
}

/* The egress configuration airlockd's options would give (plus extra ones). */
static void egress_of(const struct cp_config *c, struct egress_config *e, const char *extra)
{
    char *argv[32] = {"airlock-egress"};
    char buf[1024];
    size_t n = 1 + cp_config_egress_audit_args(c, argv + 1, 30, buf, sizeof buf);
    if (extra)
        argv[n++] = (char *)extra;
    egress_config_defaults(e);
    struct al_error err = {0};
    ck_assert_msg(egress_config_parse_args(e, (int)n, argv, &err) == 0, "%s", err.msg);
}

START_TEST(audit_keys_reach_airlock_egress)
{
    struct cp_config c;
    struct egress_config e, d;
    /* The defaults are airlock-egress's own. */
    ck_assert_int_eq(load(&c, "log:\n  level: info\n"), 0);
    egress_of(&c, &e, NULL);
    egress_config_defaults(&d);
    ck_assert_uint_eq(e.audit_allow_rate, d.audit_allow_rate);
    ck_assert_uint_eq(e.audit_allow_burst, d.audit_allow_burst);
    ck_assert_uint_eq(e.audit_deny_rate, d.audit_deny_rate);
    ck_assert_uint_eq(e.audit_deny_burst, d.audit_deny_burst);
    ck_assert_uint_eq(e.audit_aggregate_ms, d.audit_aggregate_ms);
    ck_assert_uint_eq(e.audit_rotate_bytes, d.audit_rotate_bytes);
    ck_assert_uint_eq(e.audit_rotate_ms, d.audit_rotate_ms);
    ck_assert_uint_eq(e.audit_retain_bytes, d.audit_retain_bytes);
    ck_assert_uint_eq(e.audit_retain_ms, d.audit_retain_ms);
    ck_assert_uint_eq(e.audit_retain_files, d.audit_retain_files);
    cp_config_free(&c);

    ck_assert_int_eq(load(&c, "audit:\n  allow_rate: 7\n  deny_rate: 0\n  aggregate_interval: 10s\n"
                              "  rotate_size: 1MiB\n  rotate_age: 0\n  retain_size: 0\n"
                              "  retain_age: 30d\n  retain_files: 12\n"),
                     0);
    egress_of(&c, &e, NULL);
    ck_assert_uint_eq(e.audit_allow_rate, 7);
    ck_assert_uint_eq(e.audit_deny_rate, 0);
    ck_assert_uint_eq(e.audit_aggregate_ms, 10000);
    ck_assert_uint_eq(e.audit_rotate_bytes, 1 << 20);
    ck_assert_uint_eq(e.audit_rotate_ms, 0);
    ck_assert_uint_eq(e.audit_retain_bytes, 0);
    ck_assert_uint_eq(e.audit_retain_ms, 30ull * 86400000);
    ck_assert_uint_eq(e.audit_retain_files, 12);
    /* egress.args come after: the operator's options win */
    egress_of(&c, &e, "--audit-retain-files=40");
    ck_assert_uint_eq(e.audit_retain_files, 40);
    cp_config_free(&c);

    /* The disk reserve: 1 GiB unless configured, 0 turns it off. */
    ck_assert_int_eq(load(&c, "log:\n  level: info\n"), 0);
    ck_assert_uint_eq(c.disk_reserve_bytes, 1ull << 30);
    ck_assert_uint_eq(c.disk_check_ms, 1000);
    cp_config_free(&c);
    ck_assert_int_eq(load(&c, "disk:\n  reserve: 0\n  check_interval: 250ms\n"), 0);
    ck_assert_uint_eq(c.disk_reserve_bytes, 0);
    ck_assert_uint_eq(c.disk_check_ms, 250);
    cp_config_free(&c);
    ck_assert_int_lt(load(&c, "disk:\n  check_interval: 10ms\n"), 0);
    cp_config_free(&c);

    /* A retention bound that would delete each file as soon as the next begins is refused. */
    ck_assert_int_lt(load(&c, "audit:\n  rotate_size: 64MiB\n  retain_size: 100MiB\n"), 0);
    cp_config_free(&c);
}
END_TEST

/* The node at a dotted key ("sandboxes.max" = map sandboxes, key max), or NULL. */
static const struct al_yaml_node *yaml_at(const struct al_yaml_node *n, const char *key)
{
    char part[64];
    for (const char *p = key; n && *p;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        ck_assert_uint_lt(l, sizeof part);
        memcpy(part, p, l);
        part[l] = '\0';
        n = al_yaml_get(n, part);
        p += l + (dot ? 1 : 0);
    }
    return n;
}

/* Whether field f holds the same value in a and b (a NULL string equals "": every reader of
 * a string key treats both as "not set"). */
static bool field_eq(const struct al_cfg_field *f, const void *a, const void *b)
{
    const char *pa = (const char *)a + f->offset, *pb = (const char *)b + f->offset;
    switch (f->type) {
    case AL_CFG_STR: {
        const char *x = *(char *const *)pa, *y = *(char *const *)pb;
        return strcmp(x ? x : "", y ? y : "") == 0;
    }
    case AL_CFG_BOOL:
        return *(const bool *)pa == *(const bool *)pb;
    case AL_CFG_INT:
        return *(const int64_t *)pa == *(const int64_t *)pb;
    case AL_CFG_SIZE:
    case AL_CFG_DURATION:
        return *(const uint64_t *)pa == *(const uint64_t *)pb;
    case AL_CFG_ENUM:
        return *(const int *)pa == *(const int *)pb;
    case AL_CFG_STRLIST: {
        const struct al_cfg_strlist *x = (const void *)pa, *y = (const void *)pb;
        if (x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++)
            if (strcmp(x->v[i], y->v[i]) != 0)
                return false;
        return true;
    }
    }
    return false;
}

/* sandboxes.warm: the per-template entries are parsed strictly, and a bad one (or a minimum
 * above the maximum) refuses the configuration with a message naming it. */
START_TEST(warm_templates_are_checked)
{
    char name[CP_TEMPLATE_MAX];
    int64_t lo = -1, hi = -1;
    struct al_error err = {0};
    ck_assert_int_eq(cp_warm_parse_entry("base=2..8", name, sizeof name, &lo, &hi, &err), 0);
    ck_assert_str_eq(name, "base");
    ck_assert_int_eq(lo, 2);
    ck_assert_int_eq(hi, 8);
    ck_assert_int_eq(cp_warm_parse_entry("app:v1=3", name, sizeof name, &lo, &hi, &err), 0);
    ck_assert_str_eq(name, "app:v1");
    ck_assert_int_eq(lo, 3);
    ck_assert_int_eq(hi, 3);
    static const char *const bad[] = {"base",      "=2",         "base=",    "base=x",
                                      "base=8..2", "base=-1",    "base=1..", "Bad Name=1",
                                      "base=4097", "base=1..2x", NULL};
    for (const char *const *b = bad; *b; b++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(cp_warm_parse_entry(*b, name, sizeof name, &lo, &hi, &err) == -EINVAL,
                      "%s was accepted", *b);
        ck_assert_msg(strstr(err.msg, "sandboxes.warm.templates"), "%s: %s", *b, err.msg);
    }
    struct cp_config c;
    ck_assert_int_eq(load(&c, "sandboxes:\n  warm:\n    templates: [\"base=1..4\"]\n"
                              "    min: 1\n    max: 2\n    memory: 64MiB\n"),
                     0);
    ck_assert_uint_eq(c.warm_templates.n, 1);
    ck_assert_int_eq(c.warm_min, 1);
    ck_assert_int_eq(c.warm_max, 2);
    ck_assert_uint_eq(c.warm_memory_bytes, 64u << 20);
    cp_config_free(&c);
    ck_assert_int_ne(load(&c, "sandboxes:\n  warm:\n    templates: [\"base=4..1\"]\n"), 0);
    cp_config_free(&c);
    ck_assert_int_ne(load(&c, "sandboxes:\n  warm:\n    min: 3\n    max: 1\n"), 0);
    cp_config_free(&c);
}
END_TEST

/* volumes.size and volumes.max_size are whole MiB (a volume's sizeMB), the default within
 * the largest size. */
START_TEST(volume_sizes_are_checked)
{
    struct cp_config c;
    ck_assert_int_eq(load(&c, "volumes:\n  size: 48MiB\n  max_size: 2GiB\n"), 0);
    ck_assert_uint_eq(c.volume_bytes, 48u << 20);
    ck_assert_uint_eq(c.volume_max_bytes, 2u << 30);
    cp_config_free(&c);
    static const char *const bad[] = {
        "volumes:\n  size: 20000000\n", "volumes:\n  max_size: 1000000000\n",
        "volumes:\n  size: 4GiB\n  max_size: 1GiB\n", "volumes:\n  max_size: 8MiB\n", NULL};
    for (const char *const *b = bad; *b; b++) {
        ck_assert_msg(load(&c, *b) != 0, "accepted: %s", *b);
        cp_config_free(&c);
    }
}
END_TEST

/* network.max_interfaces is the switch's table size: its default is the switch's own, and
 * what the switch cannot make is refused when the file is read. */
START_TEST(interface_table_size_is_bounded)
{
    struct cp_config c;
    ck_assert_int_eq(load(&c, "log:\n  level: info\n"), 0);
    ck_assert_int_eq(c.net_max_ifaces, VSWITCH_DEFAULT_MAX_IFACES);
    cp_config_free(&c);
    ck_assert_int_eq(load(&c, "network:\n  max_interfaces: 20000\n"), 0);
    ck_assert_int_eq(c.net_max_ifaces, 20000);
    cp_config_free(&c);
    static const char *const bad[] = {"network:\n  max_interfaces: 0\n",
                                      "network:\n  max_interfaces: 1048577\n", NULL};
    for (const char *const *b = bad; *b; b++) {
        ck_assert_msg(load(&c, *b) != 0, "accepted: %s", *b);
        cp_config_free(&c);
    }
}
END_TEST

START_TEST(example_config_names_every_key_at_its_default)
{
    const char *src = getenv("AIRLOCK_SOURCE_DIR");
    ck_assert_msg(src && *src, "AIRLOCK_SOURCE_DIR is not set (run this test through ctest)");
    char path[4096];
    snprintf(path, sizeof path, "%s/deploy/airlockd.yaml", src);

    /* (a) airlockd accepts it: the strict loader (an unknown or duplicated key is an error,
     * so every key in the file is one the table knows) and the checks across keys. */
    struct cp_config c;
    ck_assert_int_eq(cp_config_load(&c, path, NULL, NULL, stderr), 0);
    cp_config_free(&c);

    /* (b) every key of the table appears in the file. */
    struct al_diags d = AL_DIAGS_INIT;
    struct al_yaml_doc *doc = NULL;
    ck_assert_int_eq(al_yaml_load_file(path, NULL, &doc, &d), 0);
    const struct al_yaml_node *root = al_yaml_root(doc);
    size_t keys = 0;
    for (const struct al_cfg_field *f = cp_config_fields; f->key; f++, keys++)
        ck_assert_msg(yaml_at(root, f->key) != NULL,
                      "%s: key '%s' is missing (add it with its default and a comment)", path,
                      f->key);
    ck_assert_uint_gt(keys, 60);
    ck_assert_ptr_null(yaml_at(root, "sandboxes.no_such_key"));
    al_yaml_free(doc);

    /* (c) each value is the built-in default (the table's, as loading no file gives). */
    struct cp_config def = {0}, ex = {0};
    ck_assert_int_eq(al_config_load(cp_config_fields, &def, NULL, 0, &d), 0);
    ck_assert_int_eq(al_config_load(cp_config_fields, &ex, path, 0, &d), 0);
    for (const struct al_cfg_field *f = cp_config_fields; f->key; f++)
        ck_assert_msg(field_eq(f, &def, &ex), "%s: '%s' is not its default %s", path, f->key,
                      f->def ? f->def : "(none: \"\" or [])");
    /* The comparison sees a changed value. */
    ck_assert_int_eq(al_config_set(cp_config_fields, &ex, "sandboxes.max", "999", "test", &d), 0);
    for (const struct al_cfg_field *f = cp_config_fields; f->key; f++)
        if (strcmp(f->key, "sandboxes.max") == 0)
            ck_assert(!field_eq(f, &def, &ex));
    al_config_free(cp_config_fields, &def);
    al_config_free(cp_config_fields, &ex);
    al_diags_free(&d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_config");
    TCase *t = tcase_create("config");
    tcase_add_test(t, audit_keys_reach_airlock_egress);
    tcase_add_test(t, example_config_names_every_key_at_its_default);
    tcase_add_test(t, warm_templates_are_checked);
    tcase_add_test(t, volume_sizes_are_checked);
    tcase_add_test(t, interface_table_size_is_bounded);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
