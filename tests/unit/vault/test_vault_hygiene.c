/* tests/unit/vault/test_vault_hygiene: no value anywhere but in fetch answers: the CLI is
 * write-only and never echoes, an airlock without airlock-vault says so, no value in logs or
 * errors, no core dumps, and another uid cannot open the vault's files. */
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
#include <sys/prctl.h>
#include <sys/resource.h>

#include "vault_fixture.h"

/* The vault's commands are airlock-vault's: an airlock that finds none, beside it or on PATH,
 * says what to install (and does not pretend to have a vault). */
START_TEST(cli_without_airlock_vault_says_so)
{
    char bin[600], lone[600], cmd[1400], out[4096];
    bin_path(bin, sizeof bin, "airlock");
    snprintf(lone, sizeof lone, "%s", tdir("lone"));
    ck_assert_int_eq(mkdir(lone, 0755), 0);
    snprintf(lone + strlen(lone), sizeof lone - strlen(lone), "/airlock");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", bin, lone);
    ck_assert_int_eq(system(cmd), 0);
    g_cli_path = "/nonexistent";
    const char *state = tdir("lone-state");
    ck_assert_int_eq(
        run_cli_exe(lone, state, "vault", NULL, out, sizeof out, "ls", NULL, NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "install airlock-vault"));
    ck_assert_int_eq(
        run_cli_exe(lone, state, "audit", "v\n", out, sizeof out, "hash-secret", NULL, NULL, NULL),
        1);
    ck_assert_ptr_nonnull(strstr(out, "install airlock-vault"));
    g_cli_path = NULL;
}
END_TEST

START_TEST(cli_is_write_only_and_never_echoes)
{
    const char *state = tdir("cli");
    char out[16384];
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "init", NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "master key"));
    ck_assert_int_eq(run_cli(state, SECRET_A "\n", out, sizeof out, "put", "github/token",
                             "--bound-host", "api.github.com"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "version 1 stored"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(
        run_cli(state, SECRET_B, out, sizeof out, "rotate", "github/token", NULL, NULL), 0);
    /* a wildcard over a public suffix: refused before the value is read, the rule named */
    ck_assert_int_eq(
        run_cli(state, SECRET_A, out, sizeof out, "put", "x/psl", "--bound-host", "*.co.uk"), 2);
    ck_assert_ptr_nonnull(strstr(out, "wildcard_public_suffix"));
    ck_assert_ptr_nonnull(strstr(out, "co.uk"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    /* reading back is not a thing */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "get", "github/token", NULL, NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "write-only"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "put", "x", "--value", SECRET_A), 2);
    ck_assert_ptr_nonnull(strstr(out, "never taken from the command line"));
    ck_assert_ptr_null(strstr(out, "ghp_"));
    /* a value pasted as the name is not echoed */
    ck_assert_int_eq(run_cli(state, "v", out, sizeof out, "put", SECRET_A, NULL, NULL), 2);
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(run_cli(state, "v", out, sizeof out, "put", "a", SECRET_A, NULL), 2);
    ck_assert_ptr_null(strstr(out, "ghp_"));
    ck_assert_int_eq(run_cli(state, "", out, sizeof out, "put", "empty/one", NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "empty"));
    /* metadata only */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "show", "github/token", "--json", NULL),
                     0);
    json_t *j = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, NULL);
    ck_assert_ptr_nonnull(j);
    const char *sid = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "versions"), 0), "secret_id"));
    char want_sid[64];
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    json_decref(j);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "ls", NULL, NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "history", "github/token", NULL, NULL),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "rotate"));
    /* the auditor's tool gives the same id for the same value */
    ck_assert_int_eq(
        run_cli(state, SECRET_B "\n", out, sizeof out, "hash-secret", NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, want_sid));
    /* and so does the audit group's, which is the vault's command run for it */
    char bin[600];
    bin_path(bin, sizeof bin, "airlock");
    ck_assert_int_eq(run_cli_exe(bin, state, "audit", SECRET_B "\n", out, sizeof out, "hash-secret",
                                 NULL, NULL, NULL),
                     0);
    ck_assert_ptr_nonnull(strstr(out, want_sid));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "check", NULL, NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "log", "verify", NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "INTACT"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "log", "tail", "-n", "50"), 0);
    ck_assert_ptr_nonnull(strstr(out, "rotate"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "rm", "github/token", NULL, NULL), 0);
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "show", "github/token", NULL, NULL), 1);
    ck_assert_ptr_nonnull(strstr(out, "no secret named"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "frobnicate", NULL, NULL, NULL), 2);
    /* an option that means nothing to a command is an error, not silently ignored */
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "ls", "--bound-host", "a.com", NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "does not apply"));
    ck_assert_int_eq(run_cli(state, NULL, out, sizeof out, "put", "x", "--keep", NULL), 2);
    ck_assert_ptr_nonnull(strstr(out, "needs a value"));

    /* nothing under the state directory holds either value in any encoding */
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(state, grep_cb, 16, FTW_PHYS);
    g_grep_secret = SECRET_B;
    nftw(state, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

START_TEST(no_value_in_logs_or_errors)
{
    /* everything the process logs goes to a file we grep afterwards */
    char logp[600];
    snprintf(logp, sizeof logp, "%s/process.log", tdir("nolog"));
    al_mkdir_p(tdir("nolog"), 0700);
    int lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(lfd, 0);
    al_log_init("test", AL_LOG_JSON, AL_LOG_DEBUG);
    al_log_set_fd(lfd);
    struct svc_env e;
    env_open(&e, "nolog-vault");
    json_t *out;
    struct vault_fetched f;
    json_t *answers = json_array();
    ck_assert_int_eq(
        create_b64(&e, &ROOT, "gh/token", SECRET_A, ",\"bound_hosts\":[\"api.github.com\"]"), 201);
    ck_assert_int_eq(create_b64(&e, &OTHER, "x", SECRET_A, NULL), 403);
    ck_assert_int_eq(create_b64(&e, &ROOT, "gh/token", SECRET_A, NULL), 409);
    int sts[] = {fetch(&e, &EGRESS, "gh/token", "evil.com", &f, &out), 0};
    json_array_append_new(answers, out);
    sts[1] = fetch(&e, &EGRESS, "gh/token", "api.github.com", &f, &out);
    ck_assert_int_eq(sts[0], 403);
    ck_assert_int_eq(sts[1], 200);
    json_array_append_new(answers, out); /* the metadata part of the answer */
    vault_value_free(&f.value);
    ck_assert_int_eq(
        api(&e, &ROOT, "PUT", "/v1/secrets/gh/token", "", "{\"value_b64\":\"!!\"}", &out, NULL),
        400);
    json_array_append_new(answers, out);
    ck_assert_int_eq(api(&e, &ROOT, "GET", "/v1/history/gh/token", "", NULL, &out, NULL), 200);
    json_array_append_new(answers, out);
    env_close(&e);
    close(lfd);
    al_log_set_fd(2);

    char *a = json_dumps(answers, 0);
    ck_assert(!al_audit_line_contains_secret(a, strlen(a), SECRET_A, strlen(SECRET_A)));
    free(a);
    json_decref(answers);
    ck_assert(!file_has_secret(logp, SECRET_A));
    size_t ll;
    char *logs = slurp(logp, &ll);
    ck_assert_ptr_nonnull(strstr(logs, "refused")); /* something was logged */
    free(logs);
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(e.dir, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

START_TEST(no_core_dumps)
{
    const char *d = tdir("core");
    al_mkdir_p(d, 0700);
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(d) != 0)
            _exit(3);
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        setrlimit(RLIMIT_CORE, &rl); /* as permissive as a careless admin */
        vault_harden_process();
        struct rlimit now;
        getrlimit(RLIMIT_CORE, &now);
        if (now.rlim_cur != 0 || now.rlim_max != 0)
            _exit(4);
        if (prctl(PR_GET_DUMPABLE) != 0)
            _exit(5);
        struct vault_value v;
        vault_value_set(&v, SECRET_A, strlen(SECRET_A));
        signal(SIGABRT, SIG_DFL);
        abort(); /* would dump core with the value in it */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child exit %d", WEXITSTATUS(st));
    ck_assert(!WCOREDUMP(st));
    g_grep_secret = SECRET_A;
    g_grep_hits = 0;
    nftw(d, grep_cb, 16, FTW_PHYS);
    ck_assert_int_eq(g_grep_hits, 0);
}
END_TEST

/* A process with another uid cannot get at the vault's files (the daemon's socket test, with
 * SO_PEERCRED, is in the http suite below). */
START_TEST(other_uid_cannot_open_the_files)
{
    const char *d = vdir("otheruid");
    chmod(g_root, 0755);
    pid_t pid = fork();
    if (pid == 0) {
        uid_t uid = 2000000000u + (uid_t)(getpid() % 100000);
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(3);
        struct vault_store *s = NULL;
        struct al_error e = {0};
        int rc = vault_store_open(d, NULL, &s, &e);
        if (rc != -EACCES)
            _exit(4);
        if (!strstr(e.msg, "permission denied"))
            _exit(5);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit %d", WEXITSTATUS(st));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vault_hygiene");
    TCase *t = vault_tcase("hygiene");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, cli_is_write_only_and_never_echoes);
    tcase_add_test(t, cli_without_airlock_vault_says_so);
    tcase_add_test(t, no_value_in_logs_or_errors);
    tcase_add_test(t, no_core_dumps);
    tcase_add_test(t, other_uid_cannot_open_the_files);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
