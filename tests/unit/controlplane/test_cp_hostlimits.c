/* tests/unit/controlplane/test_cp_hostlimits: the limits of all sandboxes together (the
 * cgroup parent's), derived from the host or configured, refused when they leave the host too
 * little, and the summary of what is overcommitted (sandboxes.max times each sandbox's
 * limits against them). And whether the kernel's AES is accelerated (the cost of encryption
 * at rest), from /proc/crypto and modules.alias as this host and others have them. And how
 * many sandboxes airlockd's own open-files limit leaves room for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "al_test.h"
#include "controlplane/config.h"
#include "controlplane/hostcheck.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* The defaults of the configuration table, as airlockd starts without a file. */
static struct cp_config t_cfg;

static void t_setup(void)
{
    memset(&t_cfg, 0, sizeof t_cfg);
    ck_assert_int_eq(cp_config_load(&t_cfg, "/dev/null", "127.0.0.1:0", "/tmp", stderr), 0);
}

static void t_teardown(void)
{
    cp_config_free(&t_cfg);
}

/* This host's figures: 32768 processes, 24 GiB, a file table of 2.4 million. */
static const struct cp_host_res t_host = {
    .pid_max = 32768, .mem_total = 24 * GIB, .file_max = 2466116, .disk_free = 100 * GIB};

static char *t_print_on(const struct cp_host_res *h, const struct cp_host_limits *l, bool kvm,
                        int *over)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    *over = cp_host_limits_print(&t_cfg, h, l, kvm, f);
    fclose(f);
    return text;
}

static char *t_print(const struct cp_host_limits *l, bool kvm, int *over)
{
    return t_print_on(&t_host, l, kvm, over);
}

START_TEST(defaults_leave_the_host_a_quarter)
{
    struct cp_host_limits l;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, NULL), 0);
    ck_assert(l.pids_auto && l.memory_auto);
    ck_assert_uint_eq(l.pids, 24576); /* 32768 - 8192 */
    ck_assert_uint_eq(l.memory, 21 * GIB);
    /* A small host: the host keeps its minimum, but never more than half. */
    struct cp_host_res small = {.pid_max = 4096, .mem_total = 1536 * MIB};
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &small, &l, NULL), 0);
    ck_assert_uint_eq(l.pids, 2048);
    ck_assert_uint_eq(l.memory, 768 * MIB);
}
END_TEST

START_TEST(configured_values_are_used_and_checked)
{
    struct cp_host_limits l;
    struct al_error err = {0};
    t_cfg.total_pids = 500;
    t_cfg.total_memory_bytes = 8 * GIB;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, &err), 0);
    ck_assert(!l.pids_auto && !l.memory_auto);
    ck_assert_uint_eq(l.pids, 500);
    ck_assert_uint_eq(l.memory, 8 * GIB);
    /* Every process of the host to the sandboxes: refused, saying what to set. */
    t_cfg.total_pids = 32768;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "sandboxes.total_pids 32768 leaves the host none"));
    ck_assert_ptr_nonnull(strstr(err.msg, "31744 or less"));
    t_cfg.total_pids = 32000;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too few"));
    t_cfg.total_pids = 0;
    t_cfg.total_memory_bytes = 24 * GIB - 100 * MIB;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "sandboxes.total_memory"));
}
END_TEST

START_TEST(overcommit_is_said_with_its_consequence)
{
    struct cp_host_limits l;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, NULL), 0);
    int over;
    /* The defaults: 1000 sandboxes of 1024 processes and 512 MiB. */
    char *text = t_print(&l, false, &over);
    ck_assert_int_eq(over, 3); /* processes, memory, open files */
    ck_assert_ptr_nonnull(strstr(text, "all sandboxes together (cgroup airlock): 24576 processes"));
    ck_assert_ptr_nonnull(strstr(text, "the host keeps 8192 processes and 3.0 GiB"));
    ck_assert_ptr_nonnull(strstr(text, "sandboxes.max 1000 x 1024 (sandboxes.pids) = 1024000 > "
                                       "24576"));
    ck_assert_ptr_nonnull(strstr(text, "new sandboxes are refused (503)"));
    ck_assert_ptr_nonnull(strstr(text, "memory: sandboxes.max 1000 x 512 MiB"));
    ck_assert_ptr_nonnull(strstr(text, "OOM-kills processes inside the sandboxes"));
    ck_assert_ptr_nonnull(strstr(text, "open files: 24576 processes x 4096"));
    ck_assert_ptr_nonnull(strstr(text, "tmpfs counted in its memory"));
    free(text);
    /* KVM: processes are the VMM's threads; the disks are files in the state directory. */
    text = t_print(&l, true, &over);
    ck_assert_ptr_null(strstr(text, "overcommit  processes")); /* 1000 x 18 <= 24576 */
    ck_assert_ptr_nonnull(strstr(text, "x 640 MiB (sandboxes.memory and the VMM's share)"));
    ck_assert_ptr_nonnull(strstr(text, "disk: sandboxes.max 1000 x sandboxes.disk 512 MiB"));
    free(text);
    /* Within the limits: nothing is overcommitted, nothing said but the limits. */
    t_cfg.max_sandboxes = 20;
    t_cfg.total_pids = 600;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, NULL), 0);
    text = t_print(&l, false, &over);
    ck_assert_int_eq(over, 1); /* 20 x 1024 processes > 600 */
    ck_assert_ptr_null(strstr(text, "overcommit  memory"));
    ck_assert_ptr_null(strstr(text, "overcommit  open files"));
    free(text);
    t_cfg.pids = 30;
    text = t_print(&l, false, &over);
    ck_assert_int_eq(over, 0);
    ck_assert_ptr_null(strstr(text, "overcommit"));
    free(text);
}
END_TEST

/* airlockd's own descriptors: 2 per sandbox after the reserve and the pools (128 networks
 * and 64 warm airlock-vmm of 4 by default); said at start when sandboxes.max is beyond. */
START_TEST(airlockds_open_files_bound_the_count)
{
    ck_assert_uint_eq(cp_nofile_sandboxes(&t_cfg, 0), UINT64_MAX); /* unlimited */
    ck_assert_uint_eq(cp_nofile_sandboxes(&t_cfg, 1048576), (1048576 - 2048 - 128 - 256) / 2);
    ck_assert_uint_eq(cp_nofile_sandboxes(&t_cfg, 2048 + 384 + 9), 4);
    ck_assert_uint_eq(cp_nofile_sandboxes(&t_cfg, 1024), 0);
    t_cfg.net_pool_size = 0;
    t_cfg.warm_pool = 0;
    ck_assert_uint_eq(cp_nofile_sandboxes(&t_cfg, 2058), 5);
    struct cp_host_limits l;
    ck_assert_int_eq(cp_host_limits_plan(&t_cfg, &t_host, &l, NULL), 0);
    struct cp_host_res h = t_host;
    h.nofile = 20000;
    t_cfg.max_sandboxes = 10000;
    int over;
    char *text = t_print_on(&h, &l, false, &over);
    ck_assert_ptr_nonnull(strstr(text, "overcommit  airlockd's open files: RLIMIT_NOFILE 20000 "
                                       "has room for 8976 sandboxes"));
    ck_assert_ptr_nonnull(strstr(text, "< sandboxes.max 10000. Creations beyond 8976 are "
                                       "refused (503): raise LimitNOFILE="));
    free(text);
    t_cfg.max_sandboxes = 8976; /* within: not said */
    text = t_print_on(&h, &l, false, &over);
    ck_assert_ptr_null(strstr(text, "airlockd's open files"));
    free(text);
}
END_TEST

/* /proc/crypto of this development VM: a kernel without CONFIG_CRYPTO_AES_NI_INTEL. */
static const char t_crypto_generic[] = "name         : xts(aes)\n"
                                       "driver       : xts(ecb(aes-fixed-time))\n"
                                       "module       : kernel\n"
                                       "priority     : 101\n"
                                       "type         : skcipher\n"
                                       "\n"
                                       "name         : aes\n"
                                       "driver       : aes-fixed-time\n"
                                       "module       : kernel\n"
                                       "priority     : 101\n"
                                       "type         : cipher\n"
                                       "\n"
                                       "name         : aes\n"
                                       "driver       : aes-generic\n"
                                       "module       : kernel\n"
                                       "priority     : 100\n"
                                       "type         : cipher\n";

START_TEST(aes_accelerated_or_not)
{
    char drv[64];
    ck_assert_int_eq(cp_host_aes_parse(t_crypto_generic, NULL, drv, sizeof drv), CP_AES_GENERIC);
    ck_assert_str_eq(drv, "aes-fixed-time"); /* the highest priority of the "aes" ciphers */
    /* AES-NI registered (Debian's kernel with aesni_intel loaded), listed before or after. */
    char buf[4096];
    snprintf(buf, sizeof buf,
             "%s\nname         : aes\ndriver       : aes-aesni\nmodule       : aesni_intel\n"
             "priority     : 300\ntype         : cipher\n",
             t_crypto_generic);
    ck_assert_int_eq(cp_host_aes_parse(buf, NULL, drv, sizeof drv), CP_AES_FAST);
    ck_assert_str_eq(drv, "aes-aesni");
    snprintf(buf, sizeof buf, "name : aes\ndriver : aes-aesni\npriority : 300\ntype : cipher\n\n%s",
             t_crypto_generic);
    ck_assert_int_eq(cp_host_aes_parse(buf, NULL, drv, sizeof drv), CP_AES_FAST);
    ck_assert_str_eq(drv, "aes-aesni");
    /* A driver of another type named aes (an skcipher, an AEAD) does not count. */
    snprintf(buf, sizeof buf,
             "%s\nname : aes\ndriver : aes-fast-skcipher\npriority : 400\ntype : skcipher\n",
             t_crypto_generic);
    ck_assert_int_eq(cp_host_aes_parse(buf, NULL, drv, sizeof drv), CP_AES_GENERIC);
    /* Not loaded yet, but a module the kernel would load for it. */
    const char *aliases = "alias crypto-sha256 sha256_generic\n"
                          "alias crypto-aes aes_generic\n"
                          "alias crypto-aes aesni_intel\n";
    ck_assert_int_eq(cp_host_aes_parse(t_crypto_generic, aliases, drv, sizeof drv), CP_AES_MODULE);
    ck_assert_str_eq(drv, "aesni_intel");
    ck_assert_int_eq(
        cp_host_aes_parse(t_crypto_generic, "alias crypto-aes aes_generic\n", drv, sizeof drv),
        CP_AES_GENERIC);
    /* Nothing readable. */
    ck_assert_int_eq(cp_host_aes_parse(NULL, NULL, drv, sizeof drv), CP_AES_UNKNOWN);
    ck_assert_int_eq(cp_host_aes_parse("name : sha256\ndriver : sha256-generic\ntype : shash\n",
                                       NULL, drv, sizeof drv),
                     CP_AES_UNKNOWN);
}
END_TEST

static Suite *cp_hostlimits_suite(void)
{
    Suite *s = suite_create("cp_hostlimits");
    TCase *t = tcase_create("limits");
    tcase_add_checked_fixture(t, t_setup, t_teardown);
    tcase_add_test(t, defaults_leave_the_host_a_quarter);
    tcase_add_test(t, configured_values_are_used_and_checked);
    tcase_add_test(t, overcommit_is_said_with_its_consequence);
    tcase_add_test(t, aes_accelerated_or_not);
    tcase_add_test(t, airlockds_open_files_bound_the_count);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(cp_hostlimits_suite)
