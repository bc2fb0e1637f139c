/* Unit tests: common/spawn's waiting before the exec (before_exec), the death signal, the
 * capabilities a child keeps (keep_caps), and the descriptor map (what airlockd's spawns
 * need is covered by test_cp_state). */
#include "al_test.h"
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int wait_status(pid_t pid)
{
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return st;
}

struct seen {
    char exe[PATH_MAX];
    int calls;
    int fail;
};

static int record_exe(pid_t pid, void *arg, struct al_error *err)
{
    struct seen *s = arg;
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(p, s->exe, sizeof s->exe - 1);
    s->exe[n > 0 ? n : 0] = '\0';
    s->calls++;
    return s->fail ? al_error_set(err, -EPERM, "refused by the test") : 0;
}

/* The callback runs while the child still is this program, not yet the one it execs. */
START_TEST(before_exec_runs_before_the_program)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    struct seen seen = {0};
    char *argv[] = {"/bin/true", NULL};
    struct al_spawn s = {.path = "/bin/true",
                         .argv = argv,
                         .fds = {-1, 2, 2},
                         .nfds = 3,
                         .before_exec = record_exe,
                         .arg = &seen};
    pid_t pid;
    int pidfd = -1;
    struct al_error err = {0};
    ck_assert_msg(al_spawn(&s, &pid, &pidfd, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_str_eq(seen.exe, self);
    int st = wait_status(pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(pidfd);

    /* A refusal kills the child before its exec and is the spawn's error. */
    seen.fail = 1;
    ck_assert_int_eq(al_spawn(&s, &pid, &pidfd, &err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err.msg, "refused by the test"));
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* reaped already */
    ck_assert_int_eq(errno, ECHILD);
}
END_TEST

/* A failed exec after the callback is the spawn's error, as without it. */
START_TEST(exec_failure_is_the_error)
{
    struct seen seen = {0};
    char *argv[] = {"/tmp", NULL};
    struct al_spawn s = {.path = "/tmp", .argv = argv, .before_exec = record_exe, .arg = &seen};
    pid_t pid;
    struct al_error err = {0};
    ck_assert_int_eq(al_spawn(&s, &pid, NULL, &err), -EACCES);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot execute /tmp"));
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
}
END_TEST

/* Only the mapped descriptors reach the program, even one left without close-on-exec. */
START_TEST(only_the_mapped_descriptors_survive)
{
    int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC */
    ck_assert_int_ge(leak, 3);
    int out[2];
    ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
    char *argv[] = {"/bin/sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '", NULL};
    struct al_spawn s = {.path = "/bin/sh", .argv = argv, .fds = {-1, out[1], 2}, .nfds = 3};
    pid_t pid;
    struct al_error err = {0};
    ck_assert_msg(al_spawn(&s, &pid, NULL, &err) == 0, "%s", err.msg);
    close(out[1]);
    char buf[256] = "";
    size_t got = 0;
    ssize_t n;
    while ((n = read(out[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    close(out[0]);
    close(leak);
    ck_assert_int_eq(WEXITSTATUS(wait_status(pid)), 0);
    /* 0, 1, 2, and the directory ls reads (3) */
    ck_assert_str_eq(buf, "0 1 2 3 ");
}
END_TEST

/* die_with_parent: the child is killed when the process that spawned it dies. */
START_TEST(dies_with_its_parent)
{
    int rep[2];
    ck_assert_int_eq(pipe2(rep, O_CLOEXEC), 0);
    pid_t mid = fork();
    ck_assert_int_ge(mid, 0);
    if (mid == 0) {
        char *argv[] = {"/bin/sleep", "1000", NULL};
        struct al_spawn s = {
            .path = "/bin/sleep", .argv = argv, .nfds = 0, .die_with_parent = true};
        pid_t pid;
        int pidfd;
        if (al_spawn(&s, &pid, &pidfd, NULL) < 0)
            _exit(1);
        if (write(rep[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(2);
        _exit(0); /* the sleeper's parent dies here */
    }
    close(rep[1]);
    pid_t child = 0;
    ck_assert_int_eq(read(rep[0], &child, sizeof child), (ssize_t)sizeof child);
    close(rep[0]);
    ck_assert_int_eq(WEXITSTATUS(wait_status(mid)), 0);
    /* It is reparented and killed: wait (generously) until /proc says it is gone. */
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)child);
    bool gone = false;
    for (int i = 0; i < 10000 && !gone; i++) {
        FILE *f = fopen(p, "r");
        char st = 'R';
        if (f) {
            if (fscanf(f, "%*d (%*[^)]) %c", &st) != 1)
                st = 'X';
            fclose(f);
        }
        gone = !f || st == 'Z' || st == 'X';
        if (!gone)
            poll(NULL, 0, 2);
    }
    ck_assert_msg(gone, "the child of a dead parent is still running");
}
END_TEST

/* Runs argv with s's options and returns its exit status, its stdout+stderr in out. */
static int run_capture(struct al_spawn *s, char *out, size_t len)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    s->fds[0] = -1;
    s->fds[1] = s->fds[2] = p[1];
    s->nfds = 3;
    pid_t pid;
    struct al_error err = {0};
    ck_assert_msg(al_spawn(s, &pid, NULL, &err) == 0, "%s", err.msg);
    close(p[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(p[0], out + got, len - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(p[0]);
    return wait_status(pid);
}

/* as_shell: a PATH search in the child's environment, /bin/sh for a script without "#!",
 * and a failed exec said as a shell says it, in the exit status. */
START_TEST(as_shell_searches_and_reports_like_a_shell)
{
    char dir[PATH_MAX];
    al_test_tmpdir(dir, sizeof dir, "spawn");
    char script[PATH_MAX];
    snprintf(script, sizeof script, "%s/hello", dir);
    FILE *f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    fputs("echo \"hi $1\"\n", f); /* no "#!": ENOEXEC, run by /bin/sh */
    fclose(f);
    ck_assert_int_eq(chmod(script, 0755), 0);
    char path[PATH_MAX + 16], out[512];
    snprintf(path, sizeof path, "PATH=/nonexistent::%s", dir);
    char *envp[] = {path, NULL};
    char *argv[] = {"hello", "there", NULL};
    struct al_spawn s = {.path = "hello", .argv = argv, .envp = envp, .as_shell = "t"};
    int st = run_capture(&s, out, sizeof out);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_str_eq(out, "hi there\n");

    s.path = "no-such-program-xyz";
    st = run_capture(&s, out, sizeof out);
    ck_assert_int_eq(WEXITSTATUS(st), 127);
    ck_assert_str_eq(out, "t: no-such-program-xyz: command not found\n");
    s.path = "/no/such/file";
    st = run_capture(&s, out, sizeof out);
    ck_assert_int_eq(WEXITSTATUS(st), 127);
    ck_assert_str_eq(out, "t: /no/such/file: No such file or directory\n");
    ck_assert_int_eq(chmod(script, 0644), 0);
    s.path = script;
    st = run_capture(&s, out, sizeof out);
    ck_assert_int_eq(WEXITSTATUS(st), 126);
    ck_assert_ptr_nonnull(strstr(out, ": Permission denied\n"));
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

/* The working directory (a path or a descriptor), oom_score_adj, a failed step named. */
START_TEST(cwd_oom_and_a_named_failed_step)
{
    char out[512];
    char *argv[] = {"/bin/sh", "-c", "pwd; cat /proc/self/oom_score_adj", NULL};
    struct al_spawn s = {.path = "/bin/sh",
                         .argv = argv,
                         .cwd = "/usr",
                         .set_oom_score_adj = true,
                         .oom_score_adj = 500};
    int st = run_capture(&s, out, sizeof out);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ck_assert_str_eq(out, "/usr\n500\n");
    int d = open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(d, 0);
    s.cwd = NULL;
    s.use_cwd_fd = true;
    s.cwd_fd = d;
    s.set_oom_score_adj = false;
    st = run_capture(&s, out, sizeof out);
    close(d);
    ck_assert_str_eq(strtok(out, "\n"), "/etc");
    s.use_cwd_fd = false;
    s.nfds = 0; /* (run_capture's pipe is closed) */
    s.cwd = "/definitely/not/here";
    pid_t pid;
    struct al_error err = {0};
    ck_assert_int_eq(al_spawn(&s, &pid, NULL, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "working directory '/definitely/not/here'"));
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
}
END_TEST

/* drop_privileges with keep_caps: a child that stays root keeps those capabilities after its
 * exec (bounding = permitted = effective, no_new_privs set); one that switches to another
 * user keeps none, nor does a child without keep_caps. (Needs root: skipped otherwise.) */
START_TEST(keep_caps_for_root_only)
{
    if (geteuid() != 0)
        return;
    char out[1024];
    char *argv[] = {"/bin/sh", "-c",
                    "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status", NULL};
    const uint64_t keep = (1ull << 0) | (1ull << 3); /* CAP_CHOWN, CAP_FOWNER */
    struct al_spawn s = {
        .path = "/bin/sh", .argv = argv, .drop_privileges = true, .keep_caps = keep};
    ck_assert_int_eq(WEXITSTATUS(run_capture(&s, out, sizeof out)), 0);
    ck_assert_str_eq(out, "CapPrm:\t0000000000000009\nCapEff:\t0000000000000009\n"
                          "CapBnd:\t0000000000000009\nNoNewPrivs:\t1\n");
    s.keep_caps = 0;
    ck_assert_int_eq(WEXITSTATUS(run_capture(&s, out, sizeof out)), 0);
    ck_assert_str_eq(out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
                          "CapBnd:\t0000000000000000\nNoNewPrivs:\t1\n");
    s.keep_caps = keep;
    s.set_user = true;
    s.uid = s.gid = 65534;
    ck_assert_int_eq(WEXITSTATUS(run_capture(&s, out, sizeof out)), 0);
    ck_assert_msg(strstr(out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"), "%s", out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("spawn");
    TCase *t = tcase_create("spawn");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, before_exec_runs_before_the_program);
    tcase_add_test(t, exec_failure_is_the_error);
    tcase_add_test(t, only_the_mapped_descriptors_survive);
    tcase_add_test(t, dies_with_its_parent);
    tcase_add_test(t, as_shell_searches_and_reports_like_a_shell);
    tcase_add_test(t, cwd_oom_and_a_named_failed_step);
    tcase_add_test(t, keep_caps_for_root_only);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
