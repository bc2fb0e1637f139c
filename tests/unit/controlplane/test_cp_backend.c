/* tests/unit/controlplane/test_cp_backend: which backend airlockd chooses (backendsel.c)
 * with a fake `airlock-vmm --probe-kvm` (usable, unusable, missing, stuck, garbage), the
 * forced modes, and the spec the vmm backend writes (cp_vmm_spec) for kvm (a vswitch tap,
 * the kvm section) and for the jail (unchanged), each checked by airlock-vmm's own parser.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/backendsel.h"
#include "controlplane/config.h"
#include "controlplane/cp.h"
#include "vmm/spec.h"

static char t_dir[64];
static char t_bin[128];   /* the fake airlock-vmm */
static char t_args[128];  /* what it was called with */
static char t_dev[128];   /* a stand-in /dev/kvm that exists */
static char t_nodev[128]; /* one that does not */

static void t_setup(void)
{
    al_test_tmpdir(t_dir, sizeof t_dir, "cpbackend");
    snprintf(t_bin, sizeof t_bin, "%s/airlock-vmm", t_dir);
    snprintf(t_args, sizeof t_args, "%s/args", t_dir);
    snprintf(t_dev, sizeof t_dev, "%s/kvm", t_dir);
    snprintf(t_nodev, sizeof t_nodev, "%s/no-kvm", t_dir);
    int fd = open(t_dev, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void t_teardown(void)
{
    ck_assert_int_eq(al_test_rmtree(t_dir), 0);
}

/* The fake probe: records its arguments, then runs body. */
static void t_fake(const char *body)
{
    FILE *f = fopen(t_bin, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\necho \"$@\" > '%s'\n%s\n", t_args, body);
    fclose(f);
    ck_assert_int_eq(chmod(t_bin, 0755), 0);
}

static bool t_probe_ran(void)
{
    return access(t_args, F_OK) == 0;
}

static void t_args_read(char *out, size_t len)
{
    FILE *f = fopen(t_args, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(out, (int)len, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static int t_select(int choice, const char *dev, uint64_t kill_after_ms, struct cp_backend_sel *sel,
                    struct al_error *err)
{
    struct cp_backend_sel_opts o = {.choice = choice,
                                    .vmm_bin = t_bin,
                                    .kvm_dev = dev,
                                    .kernel = "/k/bzImage",
                                    .timeout_ms = 1234,
                                    .kill_after_ms = kill_after_ms};
    return cp_backend_select(&o, sel, err);
}

#define USABLE_JSON   "{\"usable\":true,\"reason\":\"the guest kernel /k/bzImage boots\"}"
#define UNUSABLE_JSON "{\"usable\":false,\"reason\":\"fake: a PVM KVM\",\"checks\":{}}"

START_TEST(auto_usable_picks_kvm)
{
    t_fake("echo '" USABLE_JSON "'; exit 0");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "kvm");
    ck_assert(sel.probe.ran && sel.probe.usable);
    ck_assert_str_eq(sel.probe.reason, "the guest kernel /k/bzImage boots");
    ck_assert_ptr_nonnull(strstr(sel.why, "auto"));
    ck_assert_ptr_nonnull(strstr(sel.why, "boots"));
    char args[256];
    t_args_read(args, sizeof args);
    ck_assert_str_eq(args, "--probe-kvm --kernel /k/bzImage --timeout-ms 1234");
}
END_TEST

START_TEST(auto_unusable_picks_jail_with_reason)
{
    t_fake("echo '" UNUSABLE_JSON "'; exit 1");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert(sel.probe.ran && !sel.probe.usable);
    ck_assert_str_eq(sel.probe.reason, "fake: a PVM KVM");
    ck_assert_ptr_nonnull(strstr(sel.why, "NOT usable: fake: a PVM KVM"));
}
END_TEST

START_TEST(auto_no_device_does_not_probe)
{
    t_fake("echo '" USABLE_JSON "'; exit 0");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_nodev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert(!sel.probe.ran);
    ck_assert(!t_probe_ran());
    ck_assert_ptr_nonnull(strstr(sel.why, "no "));
    ck_assert_ptr_nonnull(strstr(sel.why, t_nodev));
}
END_TEST

START_TEST(auto_missing_binary_picks_jail)
{
    /* No fake written: t_bin does not exist. */
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert(!sel.probe.ran && !sel.probe.usable);
    ck_assert_ptr_nonnull(strstr(sel.probe.reason, t_bin));
    ck_assert_ptr_nonnull(strstr(sel.why, t_bin));
}
END_TEST

START_TEST(auto_probe_timeout_is_killed)
{
    t_fake("exec sleep 30");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    uint64_t t0 = al_now_ns();
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 300, &sel, &err), 0);
    uint64_t ms = (al_now_ns() - t0) / 1000000;
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert(sel.probe.ran && !sel.probe.usable);
    ck_assert_ptr_nonnull(strstr(sel.probe.reason, "did not finish within 300 ms"));
    ck_assert_uint_lt(ms, 10000); /* killed, not waited for (30 s) */
}
END_TEST

START_TEST(auto_garbage_answer_is_not_trusted)
{
    t_fake("echo 'usable: yes'; exit 0");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert_ptr_nonnull(strstr(sel.probe.reason, "without its JSON answer"));
}
END_TEST

START_TEST(auto_answer_and_exit_status_disagree)
{
    t_fake("echo '" USABLE_JSON "'; exit 1");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_AUTO, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert_ptr_nonnull(strstr(sel.probe.reason, "not trusted"));
}
END_TEST

START_TEST(forced_kvm_usable)
{
    t_fake("echo '" USABLE_JSON "'; exit 0");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    /* Forced: probed even where the device check of auto would say no. */
    ck_assert_int_eq(t_select(CP_BACKEND_KVM, t_nodev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "kvm");
    ck_assert(t_probe_ran());
}
END_TEST

START_TEST(forced_kvm_unusable_fails_with_reason)
{
    t_fake("echo '" UNUSABLE_JSON "'; exit 1");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_KVM, t_dev, 0, &sel, &err), -ENODEV);
    const char *m = al_error_str(&err);
    ck_assert_ptr_nonnull(strstr(m, "sandboxes.backend is kvm"));
    ck_assert_ptr_nonnull(strstr(m, "fake: a PVM KVM"));
    ck_assert_ptr_nonnull(strstr(m, "jail or auto"));
}
END_TEST

START_TEST(forced_kvm_missing_binary_fails)
{
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_KVM, t_dev, 0, &sel, &err), -ENODEV);
    ck_assert_ptr_nonnull(strstr(al_error_str(&err), t_bin));
}
END_TEST

START_TEST(forced_kvm_timeout_fails)
{
    t_fake("exec sleep 30");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_KVM, t_dev, 200, &sel, &err), -ENODEV);
    ck_assert_ptr_nonnull(strstr(al_error_str(&err), "did not finish within 200 ms"));
}
END_TEST

START_TEST(forced_jail_and_test_do_not_probe)
{
    t_fake("echo '" USABLE_JSON "'; exit 0");
    struct cp_backend_sel sel;
    struct al_error err = {0};
    ck_assert_int_eq(t_select(CP_BACKEND_JAIL, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "jail");
    ck_assert_ptr_nonnull(strstr(sel.why, "sandboxes.backend: jail"));
    ck_assert_int_eq(t_select(CP_BACKEND_TEST, t_dev, 0, &sel, &err), 0);
    ck_assert_str_eq(sel.kind, "test");
    ck_assert(!t_probe_ran());
}
END_TEST

/* ---- the spec --------------------------------------------------------------------------- */

static struct cp t_cp;
static struct cp_sandbox t_sb;

static void t_spec_setup(const char *kind, const char *kernel)
{
    memset(&t_cp, 0, sizeof t_cp);
    memset(&t_sb, 0, sizeof t_sb);
    snprintf(t_cp.backend_kind, sizeof t_cp.backend_kind, "%s", kind);
    t_cp.cfg.cgroup_parent = "al-unit";
    t_cp.cfg.kvm_kernel = (char *)kernel;
    t_cp.cfg.pids = 100;
    t_cp.cfg.log_max_bytes = 65536;
    t_cp.cfg.start_timeout_ms = 30000;
    t_sb.cp = &t_cp;
    snprintf(t_sb.rec.id, sizeof t_sb.rec.id, "sbxunit1");
    snprintf(t_sb.rec.token, sizeof t_sb.rec.token, "tok-0123456789abcdef");
    t_sb.rec.cpu_count = 1;
    t_sb.rec.memory_mb = 256;
    t_sb.rec.disk_mb = 64;
}

/* cp_vmm_spec's text, parsed by airlock-vmm's parser (must succeed). */
static json_t *t_spec(const struct cp_start_args *a, int netns_fd, struct vmm_spec *vs)
{
    json_t *s = cp_vmm_spec(&t_sb, a, netns_fd);
    ck_assert_ptr_nonnull(s);
    char *text = json_dumps(s, JSON_COMPACT);
    ck_assert_ptr_nonnull(text);
    struct al_error err = {0};
    int rc = vmm_spec_parse(text, strlen(text), vs, &err);
    if (rc)
        ck_abort_msg("airlock-vmm refuses airlockd's spec: %s\n%s", al_error_str(&err), text);
    free(text);
    return s;
}

START_TEST(spec_kvm_tap)
{
    t_spec_setup("kvm", "/srv/kvm/bzImage");
    struct cp_start_args a = {.template_dir = "/tmp/tpl",
                              .template_name = "base",
                              .netns_fd = -1,
                              .tap_fd = 17,
                              .tap_mac = "02:a1:00:00:00:02",
                              .addr = "10.200.0.6",
                              .prefix_len = 30,
                              .dns = "10.200.0.5"};
    struct vmm_spec vs;
    json_t *s = t_spec(&a, -1, &vs);
    ck_assert_str_eq(vs.backend, "kvm");
    ck_assert_int_eq(vs.net_mode, VMM_NET_TAP);
    ck_assert_int_eq(vs.tap_fd, CP_VMM_TAP_FD); /* not airlockd's own descriptor number */
    ck_assert(vs.have_tap_mac);
    const uint8_t mac[6] = {0x02, 0xa1, 0, 0, 0, 0x02};
    ck_assert_mem_eq(vs.tap_mac, mac, 6);
    ck_assert_str_eq(vs.net_address, "10.200.0.6/30");
    ck_assert_str_eq(vs.net_gateway, "10.200.0.5");
    ck_assert_uint_eq(vs.n_dns, 1);
    ck_assert_str_eq(vs.dns[0], "10.200.0.5");
    ck_assert_str_eq(vs.kvm_kernel, "/srv/kvm/bzImage");
    ck_assert_str_eq(vs.cgroup_parent, "al-unit"); /* confines the VMM process too */
    ck_assert_uint_eq(vs.memory_bytes, 256ull << 20);
    ck_assert_ptr_null(json_object_get(json_object_get(s, "network"), "netns"));
    vmm_spec_free(&vs);
    json_decref(s);
}
END_TEST

START_TEST(spec_kvm_default_kernel_no_network)
{
    t_spec_setup("kvm", NULL);
    struct cp_start_args a = {
        .template_dir = "/tmp/tpl", .template_name = "base", .netns_fd = -1, .tap_fd = -1};
    struct vmm_spec vs;
    json_t *s = t_spec(&a, -1, &vs);
    ck_assert_str_eq(vs.backend, "kvm");
    ck_assert_int_eq(vs.net_mode, VMM_NET_NONE);
    ck_assert_ptr_null(vs.kvm_kernel); /* airlock-vmm's default, the one the probe booted */
    ck_assert(json_is_object(json_object_get(s, "kvm")));
    vmm_spec_free(&vs);
    json_decref(s);
}
END_TEST

START_TEST(spec_jail_netns_unchanged)
{
    t_spec_setup("jail", "/srv/kvm/bzImage");
    struct cp_start_args a = {.template_dir = "/tmp/tpl",
                              .template_name = "base",
                              .netns_fd = 9,
                              .tap_fd = -1,
                              .dns = "10.200.0.1"};
    struct vmm_spec vs;
    json_t *s = t_spec(&a, 9, &vs);
    ck_assert_str_eq(vs.backend, "jail");
    ck_assert_int_eq(vs.net_mode, VMM_NET_NETNS);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/9", (int)getpid());
    ck_assert_str_eq(vs.netns_path, path);
    ck_assert_str_eq(vs.dns[0], "10.200.0.1");
    ck_assert_ptr_null(json_object_get(s, "kvm"));
    ck_assert_str_eq(vs.cgroup_parent, "al-unit");
    vmm_spec_free(&vs);
    json_decref(s);
}
END_TEST

/* A warm sandbox's spec (warm.c): no access token (its claim brings one), and the agent told
 * to start the code interpreter's kernels at that claim; a creation's has its token and no
 * such word. */
START_TEST(spec_jail_warm_has_no_token)
{
    t_spec_setup("jail", NULL);
    t_sb.rec.token[0] = 0;
    struct cp_start_args a = {.template_dir = "/tmp/tpl",
                              .template_name = "base",
                              .netns_fd = 9,
                              .tap_fd = -1,
                              .warm = true};
    struct vmm_spec vs;
    json_t *s = t_spec(&a, 9, &vs);
    ck_assert_ptr_null(vs.access_token);
    ck_assert_ptr_nonnull(vs.agent_env);
    ck_assert_str_eq(json_string_value(json_object_get(vs.agent_env, "AIRLOCK_AGENT_WARM")), "1");
    vmm_spec_free(&vs);
    json_decref(s);
    t_spec_setup("jail", NULL);
    a.warm = false;
    s = t_spec(&a, 9, &vs);
    ck_assert_str_eq(vs.access_token, "tok-0123456789abcdef");
    ck_assert_ptr_null(json_object_get(vs.agent_env, "AIRLOCK_AGENT_WARM"));
    vmm_spec_free(&vs);
    json_decref(s);
}
END_TEST

/* A build sandbox's spec (buildsb.c) says so to the jail (spec.jail.build: its root keeps
 * what a package manager needs); any other sandbox's says nothing, nor does a kvm one's. */
START_TEST(spec_jail_build_only_for_builds)
{
    t_spec_setup("jail", NULL);
    struct cp_start_args a = {.template_dir = "/tmp/tpl",
                              .template_name = "base",
                              .netns_fd = 9,
                              .tap_fd = -1,
                              .build = true};
    struct vmm_spec vs;
    json_t *s = t_spec(&a, 9, &vs);
    ck_assert(vs.jail_build);
    ck_assert(json_is_true(json_object_get(json_object_get(s, "jail"), "build")));
    vmm_spec_free(&vs);
    json_decref(s);
    t_spec_setup("jail", NULL);
    a.build = false;
    s = t_spec(&a, 9, &vs);
    ck_assert(!vs.jail_build);
    ck_assert_ptr_null(json_object_get(json_object_get(s, "jail"), "build"));
    vmm_spec_free(&vs);
    json_decref(s);
    t_spec_setup("kvm", NULL);
    struct cp_start_args k = {.template_dir = "/tmp/tpl",
                              .template_name = "base",
                              .netns_fd = -1,
                              .tap_fd = -1,
                              .build = true};
    s = t_spec(&k, -1, &vs);
    ck_assert(!vs.jail_build);
    vmm_spec_free(&vs);
    json_decref(s);
}
END_TEST

static Suite *cp_backend_suite(void)
{
    Suite *s = suite_create("cp_backend");
    TCase *t = tcase_create("select");
    tcase_add_checked_fixture(t, t_setup, t_teardown);
    tcase_set_timeout(t, 30);
    tcase_add_test(t, auto_usable_picks_kvm);
    tcase_add_test(t, auto_unusable_picks_jail_with_reason);
    tcase_add_test(t, auto_no_device_does_not_probe);
    tcase_add_test(t, auto_missing_binary_picks_jail);
    tcase_add_test(t, auto_probe_timeout_is_killed);
    tcase_add_test(t, auto_garbage_answer_is_not_trusted);
    tcase_add_test(t, auto_answer_and_exit_status_disagree);
    tcase_add_test(t, forced_kvm_usable);
    tcase_add_test(t, forced_kvm_unusable_fails_with_reason);
    tcase_add_test(t, forced_kvm_missing_binary_fails);
    tcase_add_test(t, forced_kvm_timeout_fails);
    tcase_add_test(t, forced_jail_and_test_do_not_probe);
    suite_add_tcase(s, t);
    TCase *sp = tcase_create("spec");
    tcase_add_test(sp, spec_kvm_tap);
    tcase_add_test(sp, spec_kvm_default_kernel_no_network);
    tcase_add_test(sp, spec_jail_netns_unchanged);
    tcase_add_test(sp, spec_jail_warm_has_no_token);
    tcase_add_test(sp, spec_jail_build_only_for_builds);
    suite_add_tcase(s, sp);
    return s;
}

AL_SUITE_MAIN(cp_backend_suite)
