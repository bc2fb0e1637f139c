/* Unit tests: the sandbox's sudo (vmm/guest/sudo.c, sudoproto.c, sudo_main.c).
 *
 * Covered: the wire format (encoding, the parser's refusals, headers' bounds, sudo's quoting
 * for -s/-i); who may (root, members of "sudo", nobody else, uids outside passwd); the
 * environment by sudo's rules; and, end to end, the agent's service on a loop thread with
 * the real client (airlock-sudo-dev) run as root and as other users of a passwd/group pair
 * made here: `id -u` as root, -u, exit statuses, stdin, the working directory, -i, a command
 * that is not found, refusals, a signal passed on, the command killed with its client, and
 * requests that break the protocol.
 *
 * The agent reaps every child of this process (waitpid(-1), as PID 1 does), so each client
 * runs under a "runner" child that waits for it and reports its pid and status through a
 * pipe. Every wait is for an event (EOF, a line, a status), bounded by a poll timeout. The
 * end-to-end tests need root (to switch users); as another user they fail saying so. */
#include "al_test.h"
#include "common/cleanup.h"
#include "vmm/guest/agent.h"
#include "vmm/guest/sudoproto.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

/* ---- the wire format ------------------------------------------------------------------------ */

static size_t build(uint8_t *buf, size_t cap, const char *const *items)
{
    size_t len = 0;
    for (; items[0]; items += 2)
        ck_assert_int_eq(agent_sudo_req_add(buf, cap, &len, items[0][0], items[1]), 0);
    return len;
}

START_TEST(a_request_round_trips)
{
    uint8_t buf[512];
    const char *items[] = {"v", "1",  "m",   "r",   "u",     "nobody",     "E",
                           "",  "p",  "FOO", "s",   "A=b=c", "a",          "id",
                           "a", "-u", "e",   "X=1", "e",     "TERM=xterm", NULL};
    size_t len = build(buf, sizeof buf, items);
    struct agent_sudo_req r;
    const char *why = NULL;
    ck_assert_int_eq(agent_sudo_req_parse((char *)buf, len, &r, &why), 0);
    ck_assert_int_eq(r.mode, AGENT_SUDO_RUN);
    ck_assert_str_eq(r.user, "nobody");
    ck_assert(r.preserve_env);
    ck_assert_uint_eq(r.argc, 2);
    ck_assert_str_eq(r.argv[0], "id");
    ck_assert_str_eq(r.argv[1], "-u");
    ck_assert_ptr_null(r.argv[2]);
    ck_assert_uint_eq(r.envc, 2);
    ck_assert_str_eq(r.env[1], "TERM=xterm");
    ck_assert_uint_eq(r.setenvc, 1);
    ck_assert_str_eq(r.setenv[0], "A=b=c");
    ck_assert_uint_eq(r.keepc, 1);
    ck_assert_str_eq(r.keep[0], "FOO");
    agent_sudo_req_free(&r);

    /* Many items: the arrays grow, stay NULL-terminated. */
    static uint8_t big[1 << 20];
    size_t bl = 0;
    ck_assert_int_eq(agent_sudo_req_add(big, sizeof big, &bl, 'v', "1"), 0);
    ck_assert_int_eq(agent_sudo_req_add(big, sizeof big, &bl, 'm', "r"), 0);
    for (int i = 0; i < 3000; i++)
        ck_assert_int_eq(agent_sudo_req_add(big, sizeof big, &bl, 'a', i % 2 ? "x" : "yy"), 0);
    ck_assert_int_eq(agent_sudo_req_parse((char *)big, bl, &r, &why), 0);
    ck_assert_uint_eq(r.argc, 3000);
    ck_assert_str_eq(r.argv[2999], "x");
    ck_assert_ptr_null(r.argv[3000]);
    ck_assert_ptr_nonnull(r.env);
    ck_assert_ptr_null(r.env[0]);
    agent_sudo_req_free(&r);

    /* The encoder's bound. */
    size_t l = 0;
    ck_assert_int_eq(agent_sudo_req_add(buf, 4, &l, 'a', "abc"), -E2BIG);
    ck_assert_uint_eq(l, 0);
}
END_TEST

START_TEST(bad_requests_are_refused_with_a_reason)
{
    struct {
        const char *bytes;
        size_t len;
        const char *why;
    } cases[] = {
        {"", 0, "an empty request"},
        {"v2\0mr\0aid", 10, "not a version 1"},
        {"mr\0v1\0", 6, "not a version 1"},
        {"v1\0mr\0aid", 9, "without its terminating NUL"},
        {"v1\0", 3, "no mode"},
        {"v1\0mx\0", 6, "an unknown mode"},
        {"v1\0mrr\0", 7, "an unknown mode"},
        {"v1\0mr\0mr\0aid\0", 13, "two modes"},
        {"v1\0mr\0", 6, "no command"},
        {"v1\0mr\0a\0", 8, "no command"},
        {"v1\0mr\0u\0aid\0", 12, "an empty target user"},
        {"v1\0mr\0ua\0ub\0aid\0", 16, "two target users"},
        {"v1\0mr\0sNOEQUALS\0aid\0", 20, "without NAME="},
        {"v1\0mr\0s=x\0aid\0", 14, "without NAME="},
        {"v1\0mr\0Zx\0aid\0", 13, "an unknown item"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64];
        memcpy(buf, cases[i].bytes, cases[i].len);
        struct agent_sudo_req r;
        const char *why = NULL;
        ck_assert_msg(agent_sudo_req_parse(buf, cases[i].len, &r, &why) == -EPROTO,
                      "case %zu parsed", i);
        ck_assert_msg(why && strstr(why, cases[i].why), "case %zu: '%s', expected '%s'", i,
                      why ? why : "(null)", cases[i].why);
        ck_assert_ptr_null(r.argv);
    }
    /* Validation needs no command; shells take one optionally. */
    char v[] = "v1\0mv\0";
    struct agent_sudo_req r;
    ck_assert_int_eq(agent_sudo_req_parse(v, 6, &r, NULL), 0);
    ck_assert_int_eq(r.mode, AGENT_SUDO_VALIDATE);
    ck_assert_uint_eq(r.argc, 0);
    agent_sudo_req_free(&r);

    /* Frame headers: known types and their bounds only. */
    uint8_t h[AGENT_SUDO_HDR], type;
    uint32_t len;
    agent_sudo_hdr(AGENT_SUDO_F_REQ, AGENT_SUDO_MAX_REQ, h);
    ck_assert_int_eq(agent_sudo_hdr_parse(h, &type, &len), 0);
    ck_assert_uint_eq(len, AGENT_SUDO_MAX_REQ);
    agent_sudo_hdr(AGENT_SUDO_F_REQ, AGENT_SUDO_MAX_REQ + 1, h);
    ck_assert_int_eq(agent_sudo_hdr_parse(h, &type, &len), -EPROTO);
    agent_sudo_hdr(AGENT_SUDO_F_SIG, 5, h);
    ck_assert_int_eq(agent_sudo_hdr_parse(h, &type, &len), -EPROTO);
    agent_sudo_hdr(AGENT_SUDO_F_REFUSE, AGENT_SUDO_MAX_MSG + 1, h);
    ck_assert_int_eq(agent_sudo_hdr_parse(h, &type, &len), -EPROTO);
    agent_sudo_hdr('?', 0, h);
    ck_assert_int_eq(agent_sudo_hdr_parse(h, &type, &len), -EPROTO);
}
END_TEST

START_TEST(shell_commands_are_quoted_as_sudo_does)
{
    const char *argv[] = {"echo", "a b", "$HOME", "it's", "x_y-z", "é"};
    char *q = NULL;
    ck_assert_int_eq(agent_sudo_shell_quote(argv, 6, &q), 0);
    ck_assert_str_eq(q, "echo a\\ b $HOME it\\'s x_y-z \\\xc3\\\xa9");
    free(q);
    ck_assert_int_eq(agent_sudo_shell_quote(argv, 0, &q), 0);
    ck_assert_str_eq(q, "");
    free(q);
}
END_TEST

/* ---- a sandbox's users ---------------------------------------------------------------------- */

static char g_dir[64];
static char g_passwd[128], g_group[128], g_sock[128], g_home[128];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void make_users(bool with_sudo_group)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "agent-sudo");
    ck_assert_int_eq(chmod(g_dir, 0755), 0);
    snprintf(g_passwd, sizeof g_passwd, "%s/passwd", g_dir);
    snprintf(g_group, sizeof g_group, "%s/group", g_dir);
    snprintf(g_sock, sizeof g_sock, "%s/run/sudo.sock", g_dir);
    snprintf(g_home, sizeof g_home, "%s/home", g_dir);
    ck_assert_int_eq(mkdir(g_home, 0755), 0);
    char pw[1024];
    snprintf(pw, sizeof pw,
             "root:x:0:0:root:%s:/bin/sh\n"
             "u1:x:1500:1500:in sudo:%s:/bin/sh\n"
             "u2:x:1600:1600:not in sudo:%s:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             g_home, g_home, g_home);
    write_file(g_passwd, pw);
    write_file(g_group, with_sudo_group ? "root:x:0:\nsudo:x:27:u2x,u1\nu1:x:1500:\nu2:x:1600:\n"
                                          "nogroup:x:65534:\n"
                                        : "root:x:0:\nu1:x:1500:\nu2:x:1600:\nnogroup:x:65534:\n");
}

static void remove_users(void)
{
    ck_assert_int_eq(al_test_rmtree(g_dir), 0);
}

START_TEST(root_and_the_sudo_group_may_and_nobody_else)
{
    make_users(_i == 0);
    struct agent a;
    memset(&a, 0, sizeof a);
    agent_userdb_init(&a.users, g_passwd, g_group);
    struct agent_user u;
    struct al_error e = {0};
    ck_assert_int_eq(agent_sudo_authorize(&a, 0, &u, &e), 0);
    ck_assert_str_eq(u.name, "root");
    int r = agent_sudo_authorize(&a, 1500, &u, &e);
    if (_i == 0) {
        ck_assert_int_eq(r, 0);
        ck_assert_str_eq(u.name, "u1");
    } else {
        ck_assert_int_eq(r, -EPERM); /* no group "sudo" in this sandbox */
    }
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(agent_sudo_authorize(&a, 1600, &u, &e), -EPERM);
    ck_assert_msg(strstr(e.msg, "u2 is not allowed") && strstr(e.msg, "'sudo'"), "%s", e.msg);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(agent_sudo_authorize(&a, 4242, &u, &e), -EPERM);
    ck_assert_msg(strstr(e.msg, "uid 4242 is not in"), "%s", e.msg);
    agent_userdb_free(&a.users);
    remove_users();
}
END_TEST

static const char *env_get(char **env, const char *name)
{
    size_t n = strlen(name);
    for (; *env; env++)
        if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

START_TEST(the_environment_follows_sudos_rules)
{
    make_users(true);
    struct agent a;
    memset(&a, 0, sizeof a);
    agent_userdb_init(&a.users, g_passwd, g_group);
    a.path_env = strdup("/home/user/.local/bin:/usr/bin");
    a.env = json_pack("{s:s, s:s}", "PIP_BREAK_SYSTEM_PACKAGES", "1", "LANG", "C.UTF-8");
    struct agent_user caller, target;
    ck_assert_int_eq(agent_user_by_uid(&a.users, 1500, &caller, NULL), 0);
    ck_assert_int_eq(agent_user_by_uid(&a.users, 0, &target, NULL), 0);
    const char *env[] = {"TERM=xterm-256color",
                         "LANG=en_US.UTF-8",
                         "LC_ALL=../../x",
                         "FOO=bar",
                         "HOME=/home/u1",
                         "LD_PRELOAD=/tmp/evil.so",
                         "BASH_FUNC_f%%=() { :; }",
                         "PATH=/evil",
                         "SHELL=/bin/zsh",
                         "TZ=/etc/passwd",
                         "KEEPME=1",
                         "not a name=1",
                         NULL};
    const char *setenv[] = {"CMDLINE=yes", NULL};
    const char *keep[] = {"KEEPME", NULL};
    const char *none[] = {NULL};
    struct agent_sudo_req req = {.mode = AGENT_SUDO_RUN,
                                 .env = env,
                                 .envc = 12,
                                 .setenv = setenv,
                                 .setenvc = 1,
                                 .keep = none};

    char **v = agent_sudo_env(&a, &(struct agent_sudo_env_opts){.caller = &caller,
                                                                .caller_uid = 1500,
                                                                .caller_gid = 1500,
                                                                .target = &target,
                                                                .req = &req,
                                                                .shell = "/bin/sh",
                                                                .command = "/usr/bin/id -u"});
    ck_assert_str_eq(env_get(v, "TERM"), "xterm-256color");
    ck_assert_str_eq(env_get(v, "LANG"), "en_US.UTF-8"); /* the caller's kept one wins */
    ck_assert_ptr_null(env_get(v, "LC_ALL"));            /* a '/' in it */
    ck_assert_ptr_null(env_get(v, "FOO"));
    ck_assert_ptr_null(env_get(v, "LD_PRELOAD"));
    ck_assert_ptr_null(env_get(v, "TZ"));
    ck_assert_ptr_null(env_get(v, "KEEPME"));
    ck_assert_str_eq(env_get(v, "HOME"), g_home); /* root's, from passwd */
    ck_assert_str_eq(env_get(v, "SHELL"), "/bin/sh");
    ck_assert_str_eq(env_get(v, "USER"), "root");
    ck_assert_str_eq(env_get(v, "LOGNAME"), "root");
    ck_assert_str_eq(env_get(v, "MAIL"), "/var/mail/root");
    ck_assert_str_eq(env_get(v, "PATH"), AGENT_SUDO_SECURE_PATH);
    ck_assert_str_eq(env_get(v, "SUDO_USER"), "u1");
    ck_assert_str_eq(env_get(v, "SUDO_UID"), "1500");
    ck_assert_str_eq(env_get(v, "SUDO_GID"), "1500");
    ck_assert_str_eq(env_get(v, "SUDO_COMMAND"), "/usr/bin/id -u");
    ck_assert_str_eq(env_get(v, "CMDLINE"), "yes");
    ck_assert_str_eq(env_get(v, "PIP_BREAK_SYSTEM_PACKAGES"), "1"); /* the sandbox's own */
    agent_free_strv(v);

    /* --preserve-env=KEEPME keeps that one. */
    req.keep = keep;
    req.keepc = 1;
    v = agent_sudo_env(&a, &(struct agent_sudo_env_opts){.caller = &caller,
                                                         .caller_uid = 1500,
                                                         .caller_gid = 1500,
                                                         .target = &target,
                                                         .req = &req,
                                                         .shell = "/bin/sh",
                                                         .command = "x"});
    ck_assert_str_eq(env_get(v, "KEEPME"), "1");
    ck_assert_ptr_null(env_get(v, "FOO"));
    agent_free_strv(v);

    /* -E: everything but the unsafe variables; HOME and SHELL stay the caller's; PATH and
     * the target's names are still set. */
    req.preserve_env = true;
    v = agent_sudo_env(&a, &(struct agent_sudo_env_opts){.caller = &caller,
                                                         .caller_uid = 1500,
                                                         .caller_gid = 1500,
                                                         .target = &target,
                                                         .req = &req,
                                                         .shell = "/bin/sh",
                                                         .command = "x"});
    ck_assert_str_eq(env_get(v, "FOO"), "bar");
    ck_assert_str_eq(env_get(v, "HOME"), "/home/u1");
    ck_assert_str_eq(env_get(v, "SHELL"), "/bin/zsh");
    ck_assert_str_eq(env_get(v, "USER"), "root");
    ck_assert_str_eq(env_get(v, "PATH"), AGENT_SUDO_SECURE_PATH);
    ck_assert_ptr_null(env_get(v, "LD_PRELOAD"));
    ck_assert_ptr_null(env_get(v, "BASH_FUNC_f%%"));
    agent_free_strv(v);

    /* -i: a login: HOME is the target's even with -E. */
    req.mode = AGENT_SUDO_LOGIN;
    v = agent_sudo_env(&a, &(struct agent_sudo_env_opts){.caller = &caller,
                                                         .caller_uid = 1500,
                                                         .caller_gid = 1500,
                                                         .target = &target,
                                                         .req = &req,
                                                         .shell = "/bin/sh",
                                                         .command = "x"});
    ck_assert_str_eq(env_get(v, "HOME"), g_home);
    ck_assert_str_eq(env_get(v, "SHELL"), "/bin/sh");
    agent_free_strv(v);

    char out[256];
    ck_assert_int_eq(agent_sudo_find("sh", "relative:/nonexistent::/bin", out, sizeof out), 0);
    ck_assert_str_eq(out, "/bin/sh");
    ck_assert_int_eq(
        agent_sudo_find("no-such-command-here", AGENT_SUDO_SECURE_PATH, out, sizeof out), -ENOENT);
    ck_assert_int_eq(agent_sudo_find("passwd", "/etc", out, sizeof out), -ENOENT); /* no x bit */
    json_decref(a.env);
    free(a.path_env);
    agent_userdb_free(&a.users);
    remove_users();
}
END_TEST

/* ---- end to end: the agent's service and the real client ---------------------------------- */

static uv_loop_t L;
static pthread_t g_th;
static uv_async_t g_stop;
static uv_signal_t g_chld;
static struct agent A;
static char g_client[PATH_MAX];

static void on_stop(uv_async_t *h)
{
    agent_sudo_close(&A);
    uv_close((uv_handle_t *)&g_chld, NULL);
    uv_close((uv_handle_t *)h, NULL);
}

static void on_sigchld(uv_signal_t *h, int sig)
{
    (void)h;
    (void)sig;
    agent_reap_children(&A);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&L, UV_RUN_DEFAULT);
    return NULL;
}

static void setup(void)
{
    ck_assert_msg(geteuid() == 0, "the end-to-end sudo tests switch users: run them as root");
    const char *bd = getenv("AIRLOCK_BINARY_DIR");
    snprintf(g_client, sizeof g_client, "%s/bin/airlock-sudo-dev", bd ? bd : ".");
    ck_assert_msg(access(g_client, X_OK) == 0, "%s is not built", g_client);
    make_users(true);
    ck_assert_int_eq(uv_loop_init(&L), 0);
    memset(&A, 0, sizeof A);
    agent_limits_default(&A.lim);
    agent_userdb_init(&A.users, g_passwd, g_group);
    struct al_error e = {0};
    ck_assert_msg(agent_init(&A, &L, &e) == 0, "%s", e.msg);
    ck_assert(A.can_switch_user);
    ck_assert_msg(agent_sudo_listen(&A, g_sock, &e) == 0, "%s", e.msg);
    struct stat st;
    ck_assert_int_eq(stat(g_sock, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0666);
    uv_signal_init(&L, &g_chld);
    uv_signal_start(&g_chld, on_sigchld, SIGCHLD);
    uv_async_init(&L, &g_stop, on_stop);
    ck_assert_int_eq(pthread_create(&g_th, NULL, loop_main, NULL), 0);
}

static void teardown(void)
{
    uv_async_send(&g_stop);
    pthread_join(g_th, NULL);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    ck_assert_int_eq(access(g_sock, F_OK), -1); /* the socket is removed */
    remove_users();
}

/* poll(2) and read(2) again when the agent's SIGCHLD handler interrupted them (libuv's
 * handler may run on this thread). */
static int poll_one_or_two(struct pollfd *p, nfds_t n, int ms)
{
    int r;
    while ((r = poll(p, n, ms)) < 0 && errno == EINTR) {
    }
    return r;
}

static ssize_t read_retry(int fd, void *b, size_t n)
{
    ssize_t r;
    while ((r = read(fd, b, n)) < 0 && errno == EINTR) {
    }
    return r;
}

struct client {
    pid_t runner, pid;
    int in, out, err, st; /* our ends: stdin (write), stdout, stderr, the runner's reports */
    char obuf[16384], ebuf[4096];
    size_t olen, elen;
};

/* Starts the client as uid with argv (after the program), in cwd, through a runner. */
static void client_start(struct client *c, uid_t uid, const char *cwd, const char *const *args)
{
    int pi[2], po[2], pe[2], ps[2];
    ck_assert_int_eq(pipe2(pi, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(po, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(pe, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(ps, O_CLOEXEC), 0);
    const char *argv[32] = {"sudo"};
    size_t n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char sockenv[200];
    snprintf(sockenv, sizeof sockenv, "AIRLOCK_SUDO_SOCKET=%s", g_sock);
    const char *envp[] = {sockenv, "TERM=dumb", "FOO=from-caller", "ASAN_OPTIONS=detect_leaks=0",
                          NULL};
    memset(c, 0, sizeof *c);
    c->runner = fork();
    ck_assert_int_ge(c->runner, 0);
    if (c->runner == 0) {
        pid_t p = fork();
        if (p == 0) {
            dup2(pi[0], 0);
            dup2(po[1], 1);
            dup2(pe[1], 2);
            if (chdir(cwd) < 0 || setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
                setresuid(uid, uid, uid) < 0)
                _exit(120);
            execve(g_client, (char *const *)argv, (char *const *)envp);
            _exit(121);
        }
        /* The runner keeps none of the client's pipes open (EOF must mean the end). */
        close(pi[0]);
        close(pi[1]);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        close(ps[0]);
        int rep[2] = {p, 0};
        ssize_t w = write(ps[1], rep, sizeof rep[0]);
        int st = 0;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
        }
        w = write(ps[1], &st, sizeof st);
        (void)w;
        _exit(0);
    }
    close(pi[0]);
    close(po[1]);
    close(pe[1]);
    close(ps[1]);
    c->in = pi[1];
    c->out = po[0];
    c->err = pe[0];
    c->st = ps[0];
    ck_assert_int_eq(read_retry(c->st, &c->pid, sizeof(int)), (ssize_t)sizeof(int));
}

/* Reads stdout and stderr until stdout holds want (NULL: until both end). */
static void client_read(struct client *c, const char *want)
{
    while (c->out >= 0 || c->err >= 0) {
        if (want && memmem(c->obuf, c->olen, want, strlen(want)))
            return;
        struct pollfd p[2] = {{c->out, POLLIN, 0}, {c->err, POLLIN, 0}};
        int n = poll_one_or_two(p, 2, 30000);
        ck_assert_msg(n > 0, "no output for 30 s (stdout so far: '%.*s', stderr '%.*s')",
                      (int)c->olen, c->obuf, (int)c->elen, c->ebuf);
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int *fd = i ? &c->err : &c->out;
            char *b = i ? c->ebuf : c->obuf;
            size_t *len = i ? &c->elen : &c->olen, cap = (i ? sizeof c->ebuf : sizeof c->obuf) - 1;
            ssize_t r = read_retry(*fd, b + *len, cap - *len);
            if (r <= 0) {
                close(*fd);
                *fd = -1;
            } else {
                *len += (size_t)r;
            }
            b[*len] = '\0';
        }
    }
    ck_assert_msg(!want, "stdout ended without '%s': '%s'", want, c->obuf);
}

/* Closes stdin, reads everything, returns the client's wait status. */
static int client_finish(struct client *c)
{
    if (c->in >= 0)
        close(c->in);
    c->in = -1;
    client_read(c, NULL);
    struct pollfd p = {c->st, POLLIN, 0};
    ck_assert_int_eq(poll_one_or_two(&p, 1, 30000), 1);
    int st;
    ck_assert_int_eq(read_retry(c->st, &st, sizeof st), (ssize_t)sizeof st);
    close(c->st);
    return st;
}

/* Runs the client to its end; returns its exit status (128+N when killed by N). */
static int run(struct client *c, uid_t uid, const char *cwd, const char *input,
               const char *const *args)
{
    client_start(c, uid, cwd, args);
    if (input) {
        ssize_t w;
        while ((w = write(c->in, input, strlen(input))) < 0 && errno == EINTR) {
        }
        ck_assert_int_eq(w, (ssize_t)strlen(input));
    }
    int st = client_finish(c);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

START_TEST(commands_run_as_root_with_the_callers_files)
{
    struct client c;
    /* u1 (in "sudo") becomes root. */
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("id", "-u")), 0);
    ck_assert_str_eq(c.obuf, "0\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-u", "nobody", "id", "-un")), 0);
    ck_assert_str_eq(c.obuf, "nobody\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-u", "#1600", "id", "-u")), 0);
    ck_assert_str_eq(c.obuf, "1600\n");
    /* Exit statuses, stdin, stderr, the working directory. */
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("sh", "-c", "echo oops >&2; exit 7")), 7);
    ck_assert_str_eq(c.ebuf, "oops\n");
    ck_assert_int_eq(run(&c, 1500, g_home, "piped\nlines\n", ARGS("cat")), 0);
    ck_assert_str_eq(c.obuf, "piped\nlines\n");
    ck_assert_int_eq(run(&c, 1500, "/usr/share", NULL, ARGS("pwd")), 0);
    ck_assert_str_eq(c.obuf, "/usr/share\n");
    /* -i starts in the target's home; -s runs the shell with the quoted command. */
    ck_assert_int_eq(run(&c, 1500, "/usr/share", NULL, ARGS("-i", "pwd")), 0);
    char home_nl[200];
    snprintf(home_nl, sizeof home_nl, "%s\n", g_home);
    ck_assert_str_eq(c.obuf, home_nl);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-s", "echo", "a  b", "$0")), 0);
    ck_assert_str_eq(c.obuf, "a  b /bin/sh\n");
    /* The environment is reset; -E keeps it; NAME=value sets a variable. */
    ck_assert_int_eq(run(&c, 1500, g_home, NULL,
                         ARGS("BAR=cmdline", "sh", "-c", "echo $TERM.$FOO.$BAR.$SUDO_USER.$PATH")),
                     0);
    ck_assert_str_eq(c.obuf, "dumb..cmdline.u1." AGENT_SUDO_SECURE_PATH "\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-E", "sh", "-c", "echo $FOO")), 0);
    ck_assert_str_eq(c.obuf, "from-caller\n");
    /* -v, -l, -k answer without running anything. */
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-v")), 0);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-l")), 0);
    ck_assert_msg(strstr(c.obuf, "(ALL : ALL) NOPASSWD: ALL"), "%s", c.obuf);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-l", "id")), 0);
    ck_assert_str_eq(c.obuf, "/usr/bin/id\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-k")), 0);
    /* Root may too. */
    ck_assert_int_eq(run(&c, 0, g_home, NULL, ARGS("-u", "u2", "id", "-u")), 0);
    ck_assert_str_eq(c.obuf, "1600\n");
}
END_TEST

START_TEST(refusals_say_why_and_run_nothing)
{
    struct client c;
    char marker[256];
    snprintf(marker, sizeof marker, "%s/ran", g_dir);
    char touch[300];
    snprintf(touch, sizeof touch, "touch %s", marker);
    ck_assert_int_eq(run(&c, 1600, g_home, NULL, ARGS("sh", "-c", touch)), 1);
    ck_assert_msg(strstr(c.ebuf, "sudo: u2 is not allowed"), "%s", c.ebuf);
    ck_assert_int_eq(run(&c, 65534, g_home, NULL, ARGS("-v")), 1);
    ck_assert_msg(strstr(c.ebuf, "nobody is not allowed"), "%s", c.ebuf);
    ck_assert_int_eq(run(&c, 4242, g_home, NULL, ARGS("sh", "-c", touch)), 1);
    ck_assert_msg(strstr(c.ebuf, "uid 4242 is not in"), "%s", c.ebuf);
    ck_assert_int_eq(access(marker, F_OK), -1);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("no-such-command-here")), 1);
    ck_assert_str_eq(c.ebuf, "sudo: no-such-command-here: command not found\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("./no-such-file")), 1);
    ck_assert_str_eq(c.ebuf, "sudo: ./no-such-file: command not found\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-u", "nosuchuser", "id")), 1);
    ck_assert_str_eq(c.ebuf, "sudo: unknown user nosuchuser\n");
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-i", "-s", "id")), 1);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("-g", "root", "id")), 1);
    ck_assert_msg(strstr(c.ebuf, "not supported"), "%s", c.ebuf);
    ck_assert_int_eq(run(&c, 1500, g_home, NULL, ARGS("--no-such-option")), 1);
}
END_TEST

START_TEST(signals_are_passed_on_and_the_command_ends_with_its_client)
{
    struct client c;
    /* SIGTERM to the client reaches the command's process group (the shell's trap and its
     * background child), and the client ends with the command's status. (The signal goes
     * once both have said they run: the child is a new shell by then, without the trap.) */
    client_start(&c, 1500, g_home,
                 ARGS("sh", "-c",
                      "trap 'echo got-term; exit 3' TERM; sh -c 'echo child-up; exec sleep 300' & "
                      "echo parent-up; wait"));
    client_read(&c, "child-up\n");
    client_read(&c, "parent-up\n");
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    int st = client_finish(&c); /* stdout ends: the background child is gone too */
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status 0x%x", st);
    ck_assert_msg(strstr(c.obuf, "got-term\n"), "%s", c.obuf);

    /* A command killed by a signal: the client dies of the same signal. */
    client_start(&c, 1500, g_home, ARGS("sh", "-c", "echo ready; exec sleep 300"));
    client_read(&c, "ready\n");
    ck_assert_int_eq(kill(c.pid, SIGINT), 0);
    st = client_finish(&c);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "status 0x%x", st);

    /* The client is killed (it cannot pass SIGKILL on): the command goes with it. Its stdout
     * ends only when the command (which holds it) is gone. */
    client_start(&c, 1500, g_home, ARGS("sh", "-c", "echo ready; exec sleep 300"));
    client_read(&c, "ready\n");
    ck_assert_int_eq(kill(c.pid, SIGKILL), 0);
    st = client_finish(&c);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
    ck_assert_str_eq(c.obuf, "ready\n");
}
END_TEST

static int raw_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_sock);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* The agent's one answer to a raw session: its type, the text in msg. */
static uint8_t raw_answer(int fd, char *msg, size_t len)
{
    struct pollfd p = {fd, POLLIN, 0};
    ck_assert_int_eq(poll_one_or_two(&p, 1, 30000), 1);
    uint8_t buf[AGENT_SUDO_HDR + AGENT_SUDO_MAX_MSG];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, MSG_WAITALL)) < 0 && errno == EINTR) {
    }
    ck_assert_int_ge(n, AGENT_SUDO_HDR);
    uint8_t type;
    uint32_t l;
    ck_assert_int_eq(agent_sudo_hdr_parse(buf, &type, &l), 0);
    ck_assert_int_eq(n, (ssize_t)(AGENT_SUDO_HDR + l));
    snprintf(msg, len, "%.*s", (int)l, (char *)buf + AGENT_SUDO_HDR);
    return type;
}

START_TEST(broken_requests_are_refused)
{
    char msg[AGENT_SUDO_MAX_MSG + 1];
    /* Garbage. */
    int fd = raw_connect();
    ck_assert_int_eq(write(fd, "GET / HTTP/1.1\r\n\r\n", 18), 18);
    ck_assert_int_eq(raw_answer(fd, msg, sizeof msg), AGENT_SUDO_F_REFUSE);
    ck_assert_msg(strstr(msg, "malformed request"), "%s", msg);
    close(fd);
    /* A well-formed request without its descriptors. */
    uint8_t body[256];
    size_t bl =
        build(body, sizeof body, (const char *const[]){"v", "1", "m", "r", "a", "id", NULL});
    uint8_t frame[AGENT_SUDO_HDR + 256];
    agent_sudo_hdr(AGENT_SUDO_F_REQ, (uint32_t)bl, frame);
    memcpy(frame + AGENT_SUDO_HDR, body, bl);
    fd = raw_connect();
    ck_assert_int_eq(write(fd, frame, AGENT_SUDO_HDR + bl), (ssize_t)(AGENT_SUDO_HDR + bl));
    ck_assert_int_eq(raw_answer(fd, msg, sizeof msg), AGENT_SUDO_F_REFUSE);
    ck_assert_msg(strstr(msg, "without its 4 file descriptors"), "%s", msg);
    close(fd);
    /* A bad request body. */
    agent_sudo_hdr(AGENT_SUDO_F_REQ, 3, frame);
    memcpy(frame + AGENT_SUDO_HDR, "v9", 3);
    fd = raw_connect();
    ck_assert_int_eq(write(fd, frame, AGENT_SUDO_HDR + 3), AGENT_SUDO_HDR + 3);
    ck_assert_int_eq(raw_answer(fd, msg, sizeof msg), AGENT_SUDO_F_REFUSE);
    ck_assert_msg(strstr(msg, "bad request: not a version 1 request"), "%s", msg);
    close(fd);
    /* Descriptors other than 4. */
    agent_sudo_hdr(AGENT_SUDO_F_REQ, (uint32_t)bl, frame);
    fd = raw_connect();
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 2)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {frame, AGENT_SUDO_HDR + bl};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * 2);
    int two[2] = {0, 1};
    memcpy(CMSG_DATA(cm), two, sizeof two);
    ck_assert_int_eq(sendmsg(fd, &m, 0), (ssize_t)(AGENT_SUDO_HDR + bl));
    ck_assert_int_eq(raw_answer(fd, msg, sizeof msg), AGENT_SUDO_F_REFUSE);
    ck_assert_msg(strstr(msg, "exactly 4 file descriptors"), "%s", msg);
    close(fd);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_sudo");
    TCase *p = tcase_create("protocol");
    tcase_add_test(p, a_request_round_trips);
    tcase_add_test(p, bad_requests_are_refused_with_a_reason);
    tcase_add_test(p, shell_commands_are_quoted_as_sudo_does);
    tcase_add_loop_test(p, root_and_the_sudo_group_may_and_nobody_else, 0, 2);
    tcase_add_test(p, the_environment_follows_sudos_rules);
    suite_add_tcase(s, p);
    TCase *e = tcase_create("end_to_end");
    tcase_add_checked_fixture(e, setup, teardown);
    tcase_set_timeout(e, 120);
    tcase_add_test(e, commands_run_as_root_with_the_callers_files);
    tcase_add_test(e, refusals_say_why_and_run_nothing);
    tcase_add_test(e, signals_are_passed_on_and_the_command_ends_with_its_client);
    tcase_add_test(e, broken_requests_are_refused);
    suite_add_tcase(s, e);
    return s;
}

AL_SUITE_MAIN(suite)
