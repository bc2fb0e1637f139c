/* tests/unit/controlplane/test_cp_config: airlockd's configuration keys that stand for options
 * of its helper daemons: the audit.* keys become airlock-egress options that airlock-egress's
 * own parser takes back to the same values (and egress.args, given after them, wins); the
 * disk reserve's keys. */
#include "al_test.h"
#include "controlplane/config.h"
#include "egress/egress.h"

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

static Suite *suite(void)
{
    Suite *s = suite_create("cp_config");
    TCase *t = tcase_create("config");
    tcase_add_test(t, audit_keys_reach_airlock_egress);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
