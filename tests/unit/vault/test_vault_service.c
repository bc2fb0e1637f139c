/* tests/unit/vault/test_vault_service: the vault service in process: roles decide every
 * request, a sandbox's secrets go only to that sandbox, the egress role needs the egress
 * program, every access is logged (refusals without flooding the log), the changes feed of
 * egress's cache, and a service that fails closed without its access log. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "vault_fixture.h"

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

/* --egress-exe: the egress uid alone is not enough; the caller must run the configured
 * airlock-egress binary (here: this test program plays it, /bin/sh plays a root shell). */
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

static Suite *suite(void)
{
    Suite *s = suite_create("vault_service");
    TCase *t = vault_tcase("service");
    tcase_add_test(t, roles_decide_everything);
    tcase_add_test(t, sandbox_secrets_go_only_to_their_sandbox);
    tcase_add_test(t, egress_role_needs_the_egress_program);
    tcase_add_test(t, every_access_is_logged);
    tcase_add_test(t, refusals_cannot_flood_the_log);
    tcase_add_test(t, changes_feed_for_the_egress_cache);
    tcase_add_test(t, fails_closed_without_the_access_log);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
