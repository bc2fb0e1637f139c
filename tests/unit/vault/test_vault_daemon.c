/* tests/unit/vault/test_vault_daemon: the airlock-vault daemon over its socket, deciding by
 * SO_PEERCRED: throwaway uids play another user, egress and the reader; root may create but
 * not fetch; a rotation reaches a parked long-poll at once; the CLI goes through the running
 * daemon; every refusal is in the access log with the caller's real uid, and no value is in
 * any file of the state directory. */
#include "common/http.h"
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>

#include "vault_fixture.h"

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

static Suite *suite(void)
{
    Suite *s = suite_create("vault_daemon");
    TCase *t = vault_tcase("daemon");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, daemon_decides_by_peer_credentials);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
