/* Unit tests: vmm/spec (the sandbox spec, template.json, the agent's init object). */
#include "al_test.h"
#include "common/paths.h"
#include "vmm/spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse(const char *json, struct vmm_spec *s, struct al_error *e)
{
    memset(e, 0, sizeof *e);
    return vmm_spec_parse(json, strlen(json), s, e);
}

/* Expects parse to fail with a message containing needle. */
static void expect_error(const char *json, const char *needle)
{
    struct vmm_spec s;
    struct al_error e;
    int rc = parse(json, &s, &e);
    ck_assert_msg(rc < 0, "accepted: %s", json);
    ck_assert_msg(strstr(e.msg, needle) != NULL, "error \"%s\" does not mention \"%s\"", e.msg,
                  needle);
}

START_TEST(minimal_spec_gets_defaults)
{
    struct vmm_spec s;
    struct al_error e;
    setenv("AIRLOCK_AGENT_DIR", "/opt/agent", 1);
    ck_assert_int_eq(parse("{\"id\":\"sbx-1\",\"template\":\"base\"}", &s, &e), 0);
    ck_assert_str_eq(s.id, "sbx-1");
    ck_assert_str_eq(s.backend, "jail");
    ck_assert_str_eq(s.template_ref, "base");
    ck_assert_str_eq(s.hostname, "sbx-1");
    ck_assert_int_eq(s.net_mode, VMM_NET_NONE);
    ck_assert_str_eq(s.agent_dir, "/opt/agent");
    ck_assert_str_eq(s.agent_path, "/.airlock/bin/airlock-agent");
    ck_assert_uint_eq(s.memory_bytes, 512ull << 20);
    ck_assert_uint_eq(s.disk_bytes, 512ull << 20);
    ck_assert_uint_eq(s.pids, 1024);
    ck_assert(s.cpus == 2.0);
    ck_assert_str_eq(s.cgroup_parent, "airlock");
    ck_assert_uint_eq(s.uid_base, 1073741824u);
    ck_assert_uint_eq(s.uid_slots, 16384);
    ck_assert(!s.jail_build); /* an ordinary sandbox unless airlockd says otherwise */
    ck_assert_uint_eq(s.n_binds, 0);
    ck_assert(!s.keep_logs);
    vmm_spec_free(&s);
}
END_TEST

START_TEST(full_spec)
{
    const char *json =
        "{\"id\":\"a1\",\"backend\":\"jail\",\"template\":\"/srv/t/base\",\"template_id\":\"base\","
        "\"resources\":{\"cpus\":0.5,\"memory_mib\":256,\"disk_mib\":100,\"pids\":64,\"nofile\":"
        "1024},\"network\":{\"mode\":\"netns\",\"netns\":\"/run/netns/al-a1\",\"dns\":["
        "\"10.0.0.1\",\"fd00::1\"]},\"hostname\":\"box.local\",\"agent\":{\"dir\":\"/a\","
        "\"path\":\"/.airlock/bin/x\",\"args\":[\"--v\"],\"env\":{\"A_B\":\"1\"},"
        "\"log_max_bytes\":65536,\"start_timeout_ms\":500},\"env\":{\"FOO\":\"bar\"},"
        "\"user\":\"root\",\"workdir\":\"/work\",\"access_token\":\"tok\",\"binds\":[{"
        "\"source\":\"/data\",\"target\":\"/mnt/data\"}],\"volumes\":[{\"source\":\"/v/vol_1\","
        "\"target\":\"/data\"}],\"keep_logs\":true,\"jail\":{"
        "\"cgroup_parent\":\"airlock/test\",\"uid_base\":200000,\"uid_slots\":10,\"build\":true}}";
    struct vmm_spec s;
    struct al_error e;
    ck_assert_msg(parse(json, &s, &e) == 0, "%s", e.msg);
    ck_assert(s.cpus == 0.5);
    ck_assert_uint_eq(s.memory_bytes, 256ull << 20);
    ck_assert_uint_eq(s.disk_bytes, 100ull << 20);
    ck_assert_uint_eq(s.pids, 64);
    ck_assert_uint_eq(s.nofile, 1024);
    ck_assert_int_eq(s.net_mode, VMM_NET_NETNS);
    ck_assert_str_eq(s.netns_path, "/run/netns/al-a1");
    ck_assert_uint_eq(s.n_dns, 2);
    ck_assert_str_eq(s.dns[1], "fd00::1");
    ck_assert_str_eq(s.hostname, "box.local");
    ck_assert_str_eq(s.agent_dir, "/a");
    ck_assert_str_eq(s.agent_path, "/.airlock/bin/x");
    ck_assert_uint_eq(s.log_max_bytes, 65536);
    ck_assert_uint_eq(s.start_timeout_ms, 500);
    ck_assert_str_eq(s.user, "root");
    ck_assert_str_eq(s.workdir, "/work");
    ck_assert_str_eq(s.access_token, "tok");
    ck_assert_uint_eq(s.n_binds, 2);
    ck_assert_str_eq(s.binds[0].target, "/mnt/data");
    ck_assert(!s.binds[0].volume);
    ck_assert_str_eq(s.binds[1].source, "/v/vol_1");
    ck_assert_str_eq(s.binds[1].target, "/data");
    ck_assert(s.binds[1].volume);
    ck_assert(s.keep_logs);
    ck_assert_str_eq(s.cgroup_parent, "airlock/test");
    ck_assert_uint_eq(s.uid_base, 200000);
    ck_assert_uint_eq(s.uid_slots, 10);
    ck_assert(s.jail_build);
    vmm_spec_free(&s);
}
END_TEST

START_TEST(bad_specs_say_what_is_wrong)
{
    expect_error("[1]", "must be a JSON object");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"tempalte\":1}", "unknown field \"tempalte\"");
    expect_error("{\"template\":\"b\"}", "\"id\" is required");
    expect_error("{\"id\":\"../x\",\"template\":\"b\"}", "\"id\" must be");
    expect_error("{\"id\":\"-x\",\"template\":\"b\"}", "\"id\" must be");
    expect_error("{\"id\":\"x\",\"template\":\"a/b\"}", "\"template\" must be");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"backend\":\"vmware\"}", "\"backend\"");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"resources\":{\"memory_mib\":1}}",
                 "out of range");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"resources\":{\"cpus\":\"2\"}}",
                 "\"cpus\" must be a number");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"resources\":{\"cpus\":0}}", "out of range");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"resources\":{\"ram\":1}}",
                 "unknown field \"ram\"");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"network\":{\"mode\":\"host\"}}",
                 "\"mode\" must be");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"network\":{\"mode\":\"netns\"}}",
                 "\"netns\" is required");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"network\":{\"mode\":\"netns\",\"netns\":"
                 "\"rel\"}}",
                 "absolute path");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"network\":{\"dns\":[\"8.8.8.8.8\"]}}",
                 "address literal");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"hostname\":\"a b\"}", "host name");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"agent\":{\"path\":\"/bin/sh\"}}",
                 "under /.airlock/");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"agent\":{\"path\":\"/.airlock/../x\"}}",
                 "under /.airlock/");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"agent\":{\"dir\":\"rel\"}}", "absolute");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"env\":{\"1A\":\"x\"}}",
                 "not a valid environment variable name");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"env\":{\"A\":1}}", "must be a string");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"workdir\":\"home\"}", "workdir");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"binds\":[{\"source\":\"/a\",\"target\":"
                 "\"/proc/x\"}]}",
                 "inside /proc");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"binds\":[{\"source\":\"/a\",\"target\":"
                 "\"/a/../etc\"}]}",
                 "normalised");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"binds\":[{\"source\":\"/a\",\"target\":"
                 "\"/\"}]}",
                 "other than");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"binds\":[{\"source\":\"a\",\"target\":"
                 "\"/x\"}]}",
                 "absolute host path");
    /* Volumes: the same rules as binds, one list with them. */
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"volumes\":[{\"source\":\"/a\",\"target\":"
                 "\"/tmp/v\"}]}",
                 "inside /tmp");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"binds\":[{\"source\":\"/a\",\"target\":"
                 "\"/v\"}],\"volumes\":[{\"source\":\"/b\",\"target\":\"/v\"}]}",
                 "mounted twice");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"volumes\":[{\"source\":\"/a\",\"target\":"
                 "\"/v\",\"mode\":1}]}",
                 "spec.volumes[0]");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"jail\":{\"uid_base\":0}}", "out of range");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"jail\":{\"build\":\"yes\"}}", "spec.jail");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"id\":\"y\"}", "invalid JSON");
}
END_TEST

START_TEST(kvm_spec)
{
    const char *json =
        "{\"id\":\"k1\",\"backend\":\"kvm\",\"template\":\"base\",\"resources\":{\"cpus\":1.5,"
        "\"memory_mib\":256},\"network\":{\"mode\":\"tap\",\"tap_fd\":7,\"mac\":"
        "\"02:00:0a:c8:00:02\",\"address\":\"10.200.0.2/30\",\"gateway\":\"10.200.0.1\","
        "\"dns\":[\"10.200.0.1\"]},\"kvm\":{\"kernel\":\"/k/bzImage\",\"vcpus\":2,\"snapshot\":"
        "false,\"cache_dir\":\"/var/cache/airlock/kvm\"}}";
    struct vmm_spec s;
    struct al_error e;
    ck_assert_msg(parse(json, &s, &e) == 0, "%s", e.msg);
    ck_assert_str_eq(s.backend, "kvm");
    ck_assert_int_eq(s.net_mode, VMM_NET_TAP);
    ck_assert_int_eq(s.tap_fd, 7);
    ck_assert(s.have_tap_mac);
    ck_assert_uint_eq(s.tap_mac[0], 0x02);
    ck_assert_uint_eq(s.tap_mac[5], 0x02);
    ck_assert_str_eq(s.net_address, "10.200.0.2/30");
    ck_assert_str_eq(s.net_gateway, "10.200.0.1");
    ck_assert_str_eq(s.kvm_kernel, "/k/bzImage");
    ck_assert_uint_eq(s.kvm_vcpus, 2);
    ck_assert(!s.kvm_snapshot);
    ck_assert_str_eq(s.kvm_cache_dir, "/var/cache/airlock/kvm");
    vmm_spec_free(&s);
    /* Defaults: snapshots on, no tap. */
    ck_assert_int_eq(parse("{\"id\":\"k2\",\"backend\":\"kvm\",\"template\":\"b\"}", &s, &e), 0);
    ck_assert(s.kvm_snapshot);
    ck_assert_int_eq(s.tap_fd, -1);
    ck_assert_int_eq(s.kvm_vcpus, 0);
    vmm_spec_free(&s);
}
END_TEST

START_TEST(kvm_specs_say_what_is_wrong)
{
    const char *tap = "\"network\":{\"mode\":\"tap\",\"tap_fd\":7,\"address\":\"10.0.0.2/30\"";
    char j[512];
    snprintf(j, sizeof j, "{\"id\":\"x\",\"template\":\"b\",%s}}", tap);
    expect_error(j, "\"tap\" is for \"backend\": \"kvm\"");
    expect_error("{\"id\":\"x\",\"template\":\"b\",\"kvm\":{}}", "only applies");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"netns\",\"netns\":\"/run/netns/x\"}}",
                 "network is a tap");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"binds\":[{\"source\":"
                 "\"/a\",\"target\":\"/x\"}]}",
                 "cannot bind");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"volumes\":[{\"source\":"
                 "\"/a\",\"target\":\"/x\"}]}",
                 "cannot bind");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"agent\":{\"args\":"
                 "[\"-v\"]}}",
                 "not supported by the kvm backend");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"address\":\"10.0.0.2/30\"}}",
                 "\"tap_fd\" is required");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"tap_fd\":1,\"address\":\"10.0.0.2/30\"}}",
                 "out of range");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"tap_fd\":7,\"address\":\"10.0.0.2\"}}",
                 "prefix length");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"tap_fd\":7,\"address\":\"10.0.0.2/33\"}}",
                 "prefix length");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"tap_fd\":7,\"address\":\"10.0.0.2/30\",\"mac\":\"01:00:00:00:00:01\"}}",
                 "unicast MAC");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"tap\",\"tap_fd\":7,\"address\":\"10.0.0.2/30\",\"gateway\":\"x\"}}",
                 "\"gateway\" must be");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"mode\":"
                 "\"none\",\"tap_fd\":7}}",
                 "only goes with");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"network\":{\"dns\":["
                 "\"fd00::1\"]}}",
                 "IPv4 resolvers");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"kvm\":{\"vcpus\":17}}",
                 "out of range");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"kvm\":{\"kernel\":"
                 "\"bzImage\"}}",
                 "normalised absolute path");
    expect_error("{\"id\":\"x\",\"backend\":\"kvm\",\"template\":\"b\",\"kvm\":{\"kernal\":"
                 "\"/k\"}}",
                 "unknown field \"kernal\"");
}
END_TEST

START_TEST(paths_and_ids)
{
    ck_assert(vmm_path_normalised("/"));
    ck_assert(vmm_path_normalised("/a/b.c"));
    ck_assert(!vmm_path_normalised("a"));
    ck_assert(!vmm_path_normalised("/a/"));
    ck_assert(!vmm_path_normalised("/a//b"));
    ck_assert(!vmm_path_normalised("/a/./b"));
    ck_assert(!vmm_path_normalised("/a/.."));
    ck_assert(!vmm_path_normalised("/a\nb"));
    ck_assert(vmm_id_valid("a"));
    ck_assert(vmm_id_valid("i8x2_k-3"));
    ck_assert(!vmm_id_valid(""));
    ck_assert(!vmm_id_valid("_a"));
    ck_assert(!vmm_id_valid("a.b"));
    char big[80];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert(!vmm_id_valid(big));
}
END_TEST

static char tmpdir[256];

static void make_template(const char *json)
{
    al_test_tmpdir(tmpdir, sizeof tmpdir, "spec");
    char p[512];
    snprintf(p, sizeof p, "%s/rootfs", tmpdir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/template.json", tmpdir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(json, f);
    fclose(f);
}

static void remove_template(void)
{
    ck_assert_int_eq(al_test_rmtree(tmpdir), 0);
}

START_TEST(template_and_init_object)
{
    make_template("{\"name\":\"base\",\"user\":\"user\",\"workdir\":\"/home/user\","
                  "\"env\":{\"LANG\":\"C.UTF-8\",\"FOO\":\"template\"},\"agent\":{\"python\":"
                  "\"/usr/bin/python3\"},\"build\":{\"hash\":\"abc\"}}");
    char json[1024];
    snprintf(json, sizeof json,
             "{\"id\":\"s1\",\"template\":\"%s\",\"env\":{\"FOO\":\"spec\"},\"access_token\":"
             "\"t0k\",\"ca_cert_pem\":\"-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END "
             "CERTIFICATE-----\\n\"}",
             tmpdir);
    struct vmm_spec s;
    struct al_error e;
    ck_assert_msg(parse(json, &s, &e) == 0, "%s", e.msg);
    ck_assert_msg(vmm_spec_load_template(&s, &e) == 0, "%s", e.msg);
    json_t *o = vmm_spec_init_object(&s);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_string_value(json_object_get(o, "sandboxID")), "s1");
    ck_assert_str_eq(json_string_value(json_object_get(o, "templateID")), "base");
    ck_assert_str_eq(json_string_value(json_object_get(o, "hostname")), "s1");
    ck_assert_str_eq(json_string_value(json_object_get(o, "accessToken")), "t0k");
    /* The egress proxy's CA for the sandbox goes to the agent as caCertPem. */
    ck_assert_str_eq(json_string_value(json_object_get(o, "caCertPem")),
                     "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    ck_assert_str_eq(json_string_value(json_object_get(o, "defaultUser")), "user");
    ck_assert_str_eq(json_string_value(json_object_get(o, "defaultWorkdir")), "/home/user");
    json_t *env = json_object_get(o, "envVars");
    ck_assert_str_eq(json_string_value(json_object_get(env, "FOO")), "spec"); /* spec wins */
    ck_assert_str_eq(json_string_value(json_object_get(env, "LANG")), "C.UTF-8");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "agent"), "python")),
                     "/usr/bin/python3");
    json_decref(o);
    vmm_spec_free(&s);
    remove_template();
}
END_TEST

START_TEST(init_defaults_without_template_user)
{
    make_template("{\"name\":\"mini\"}");
    char json[512];
    snprintf(json, sizeof json, "{\"id\":\"s2\",\"template\":\"%s\",\"user\":\"root\"}", tmpdir);
    struct vmm_spec s;
    struct al_error e;
    ck_assert_int_eq(parse(json, &s, &e), 0);
    ck_assert_int_eq(vmm_spec_load_template(&s, &e), 0);
    json_t *o = vmm_spec_init_object(&s);
    ck_assert_str_eq(json_string_value(json_object_get(o, "defaultUser")), "root");
    ck_assert_str_eq(json_string_value(json_object_get(o, "defaultWorkdir")), "/root");
    ck_assert_ptr_null(json_object_get(o, "accessToken"));
    ck_assert_ptr_null(json_object_get(o, "caCertPem"));
    json_decref(o);
    vmm_spec_free(&s);
    /* An empty CA is a mistake, not "no CA". */
    snprintf(json, sizeof json, "{\"id\":\"s2\",\"template\":\"%s\",\"ca_cert_pem\":\"\"}", tmpdir);
    ck_assert_int_lt(parse(json, &s, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "ca_cert_pem"));
    vmm_spec_free(&s);
    remove_template();
}
END_TEST

START_TEST(bad_templates)
{
    make_template("{\"name\":\"x\",\"usr\":\"user\"}");
    char json[512];
    snprintf(json, sizeof json, "{\"id\":\"s3\",\"template\":\"%s\"}", tmpdir);
    struct vmm_spec s;
    struct al_error e;
    ck_assert_int_eq(parse(json, &s, &e), 0);
    ck_assert_int_lt(vmm_spec_load_template(&s, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown field \"usr\""));
    vmm_spec_free(&s);
    remove_template();

    /* A name that resolves under <state>/templates and does not exist. */
    al_set_state_dir("/nonexistent-state");
    ck_assert_int_eq(parse("{\"id\":\"s4\",\"template\":\"nope\"}", &s, &e), 0);
    ck_assert_int_eq(vmm_spec_load_template(&s, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent-state/templates/nope/rootfs"));
    ck_assert_ptr_nonnull(strstr(e.msg, "deploy/templates/build"));
    vmm_spec_free(&s);
}
END_TEST

/* The template.json of a template pulled from a registry or built through airlockd's API:
 * what the image said (cmd, entrypoint, image), the default policy, the build, its start and
 * ready commands, and a name with a '.' (airlockd's template names) are all accepted. */
START_TEST(image_and_build_templates)
{
    make_template("{\"name\":\"py3.12-app\",\"description\":\"registry.test:5000/app:1\","
                  "\"env\":{\"PATH\":\"/bin\"},\"workdir\":\"/srv/app\",\"user\":\"user\","
                  "\"cmd\":[\"/bin/sh\"],\"entrypoint\":[\"/init\"],\"agent\":{},"
                  "\"image\":{\"reference\":\"registry.test:5000/app:1\",\"digest\":\"sha256:0\"},"
                  "\"policy\":\"default\",\"build\":{\"id\":\"b1\"},\"start_cmd\":\"sleep 1\","
                  "\"ready_cmd\":\"true\"}");
    char json[512];
    snprintf(json, sizeof json, "{\"id\":\"s5\",\"template\":\"%s\"}", tmpdir);
    struct vmm_spec s;
    struct al_error e;
    ck_assert_int_eq(parse(json, &s, &e), 0);
    ck_assert_msg(vmm_spec_load_template(&s, &e) == 0, "%s", e.msg);
    json_t *o = vmm_spec_init_object(&s);
    ck_assert_str_eq(json_string_value(json_object_get(o, "templateID")), "py3.12-app");
    ck_assert_str_eq(json_string_value(json_object_get(o, "defaultWorkdir")), "/srv/app");
    /* The agent runs the start and ready commands. */
    ck_assert_str_eq(json_string_value(json_object_get(o, "startCmd")), "sleep 1");
    ck_assert_str_eq(json_string_value(json_object_get(o, "readyCmd")), "true");
    json_decref(o);
    vmm_spec_free(&s);
    remove_template();
    const char *bad[] = {"{\"name\":\".hidden\"}", "{\"name\":\"a..b\"}", "{\"name\":\"a/b\"}",
                         "{\"name\":\"x\",\"start_cmd\":[\"sleep\"]}",
                         "{\"name\":\"x\",\"ready_cmd\":1}"};
    const char *why[] = {"\"name\" must be", "\"name\" must be", "\"name\" must be", "start_cmd",
                         "ready_cmd"};
    for (size_t i = 0; i < 5; i++) {
        make_template(bad[i]);
        snprintf(json, sizeof json, "{\"id\":\"s6\",\"template\":\"%s\"}", tmpdir);
        ck_assert_int_eq(parse(json, &s, &e), 0);
        ck_assert_int_lt(vmm_spec_load_template(&s, &e), 0);
        ck_assert_msg(strstr(e.msg, why[i]), "%s lacks %s", e.msg, why[i]);
        vmm_spec_free(&s);
        remove_template();
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vmm_spec");
    TCase *t = tcase_create("spec");
    tcase_add_test(t, minimal_spec_gets_defaults);
    tcase_add_test(t, full_spec);
    tcase_add_test(t, bad_specs_say_what_is_wrong);
    tcase_add_test(t, kvm_spec);
    tcase_add_test(t, kvm_specs_say_what_is_wrong);
    tcase_add_test(t, paths_and_ids);
    tcase_add_test(t, template_and_init_object);
    tcase_add_test(t, init_defaults_without_template_user);
    tcase_add_test(t, bad_templates);
    tcase_add_test(t, image_and_build_templates);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
