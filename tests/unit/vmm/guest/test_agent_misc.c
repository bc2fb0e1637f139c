/* Unit tests: vmm/guest path resolution, users from passwd/group files, envd exit statuses,
 * Go file-mode strings, NDJSON lines and UTF-8 repair. */
#include "al_test.h"
#include "vmm/guest/agent.h"
#include "vmm/guest/fspath.h"
#include "vmm/guest/ndjson.h"
#include "vmm/guest/spawn.h"
#include "vmm/guest/users.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void resolve_eq(const char *in, const char *workdir, const char *want)
{
    char out[PATH_MAX];
    struct al_error e = {0};
    ck_assert_msg(agent_path_resolve(in, "/home/user", workdir, out, sizeof out, &e) == 0, "%s: %s",
                  in, e.msg);
    ck_assert_msg(strcmp(out, want) == 0, "%s -> %s (want %s)", in, out, want);
}

START_TEST(paths_resolve_like_envd)
{
    resolve_eq("", NULL, "/home/user");
    resolve_eq("", "/code", "/code");
    resolve_eq("file.txt", "/code", "/home/user/file.txt"); /* relative: home, never workdir */
    resolve_eq("a/../b/./c/", NULL, "/home/user/b/c");
    resolve_eq("~", NULL, "/home/user");
    resolve_eq("~/x", NULL, "/home/user/x");
    resolve_eq("/tmp//x/", NULL, "/tmp/x");
    resolve_eq("/../../etc", NULL, "/etc");
    resolve_eq("../..", NULL, "/");
    char out[PATH_MAX];
    struct al_error e = {0};
    ck_assert_int_eq(agent_path_resolve("~root/x", "/home/user", NULL, out, sizeof out, &e),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "~root"));
    char *longp = malloc(PATH_MAX + 10);
    memset(longp, 'a', PATH_MAX + 5);
    longp[PATH_MAX + 5] = '\0';
    ck_assert_int_eq(agent_path_resolve(longp, "/home/user", NULL, out, sizeof out, &e),
                     -ENAMETOOLONG);
    free(longp);
}
END_TEST

START_TEST(path_parts)
{
    char d[PATH_MAX];
    ck_assert_str_eq(agent_path_base("/a/b.txt"), "b.txt");
    ck_assert_str_eq(agent_path_base("/"), "/");
    agent_path_dir("/a/b.txt", d, sizeof d);
    ck_assert_str_eq(d, "/a");
    agent_path_dir("/a", d, sizeof d);
    ck_assert_str_eq(d, "/");
    ck_assert_int_eq(agent_path_rel("/w", "/w/x/y", d, sizeof d), 0);
    ck_assert_str_eq(d, "x/y");
    ck_assert_int_eq(agent_path_rel("/", "/etc", d, sizeof d), 0);
    ck_assert_str_eq(d, "etc");
    ck_assert_int_eq(agent_path_rel("/w", "/wx/y", d, sizeof d), -EINVAL);
}
END_TEST

static const char passwd[] = "root:x:0:0:root:/root:/bin/bash\n"
                             "# a comment\n"
                             "broken line without fields\n"
                             "user:x:1000:1000:User,,,:/home/user:/bin/bash\n"
                             "svc:x:abc:1:bad uid:/:/bin/false\n"
                             "nohome:x:1001:1001:::/bin/sh\r\n";
static const char group[] = "root:x:0:\n"
                            "user:x:1000:\n"
                            "docker:x:999:other,user\n"
                            "audio:x:29:user\n"
                            "users:x:100:\n";

START_TEST(passwd_and_group_parsing)
{
    struct agent_user u;
    ck_assert_int_eq(agent_passwd_parse(passwd, strlen(passwd), "user", 0, &u), 0);
    ck_assert_uint_eq(u.uid, 1000);
    ck_assert_uint_eq(u.gid, 1000);
    ck_assert_str_eq(u.home, "/home/user");
    ck_assert_str_eq(u.shell, "/bin/bash");
    agent_group_members(group, strlen(group), &u);
    ck_assert_uint_eq(u.ngroups, 3);
    ck_assert_uint_eq(u.groups[0], 1000);
    ck_assert_uint_eq(u.groups[1], 999);
    ck_assert_uint_eq(u.groups[2], 29);
    ck_assert_int_eq(agent_passwd_parse(passwd, strlen(passwd), NULL, 0, &u), 0);
    ck_assert_str_eq(u.name, "root");
    ck_assert_int_eq(agent_passwd_parse(passwd, strlen(passwd), "svc", 0, &u), -ENOENT);
    ck_assert_int_eq(agent_passwd_parse(passwd, strlen(passwd), "use", 0, &u), -ENOENT);
    ck_assert_int_eq(agent_passwd_parse(passwd, strlen(passwd), "nohome", 0, &u), 0);
    ck_assert_str_eq(u.home, "/");
    ck_assert_str_eq(u.shell, "/bin/sh");
    char name[64];
    ck_assert_int_eq(agent_group_parse_name(group, strlen(group), 999, name, sizeof name), 0);
    ck_assert_str_eq(name, "docker");
    ck_assert_int_eq(agent_group_parse_name(group, strlen(group), 4242, name, sizeof name),
                     -ENOENT);
}
END_TEST

START_TEST(userdb_from_files_reloads_on_change)
{
    char dir[64];
    al_test_tmpdir(dir, sizeof dir, "agent-users");
    char pw[PATH_MAX], gr[PATH_MAX];
    snprintf(pw, sizeof pw, "%s/passwd", dir);
    snprintf(gr, sizeof gr, "%s/group", dir);
    FILE *f = fopen(pw, "w");
    fputs(passwd, f);
    fclose(f);
    f = fopen(gr, "w");
    fputs(group, f);
    fclose(f);
    struct agent_userdb db;
    agent_userdb_init(&db, pw, gr);
    struct agent_user u;
    struct al_error e = {0};
    ck_assert_int_eq(agent_user_by_name(&db, "user", &u, &e), 0);
    ck_assert_uint_eq(u.ngroups, 3);
    ck_assert_int_eq(agent_user_by_name(&db, "ghost", &u, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "ghost"));
    char n[64];
    agent_uid_name(&db, 1000, n, sizeof n);
    ck_assert_str_eq(n, "user");
    agent_uid_name(&db, 4242, n, sizeof n);
    ck_assert_str_eq(n, "4242");
    agent_gid_name(&db, 29, n, sizeof n);
    ck_assert_str_eq(n, "audio");
    f = fopen(pw, "a");
    fputs("ghost:x:2000:2000::/home/ghost:/bin/sh\n", f);
    fclose(f);
    ck_assert_int_eq(agent_user_by_name(&db, "ghost", &u, &e), 0);
    ck_assert_uint_eq(u.uid, 2000);
    /* An image's USER: uid, uid:gid, name:group, a uid nobody has. */
    ck_assert_int_eq(agent_user_by_spec(&db, "user", &u, &e), 0);
    ck_assert_uint_eq(u.ngroups, 3);
    ck_assert_int_eq(agent_user_by_spec(&db, "1000", &u, &e), 0);
    ck_assert_str_eq(u.name, "user");
    ck_assert_str_eq(u.home, "/home/user");
    ck_assert_uint_eq(u.ngroups, 3);
    ck_assert_int_eq(agent_user_by_spec(&db, "1000:1000", &u, &e), 0);
    ck_assert_str_eq(u.name, "user");
    ck_assert_uint_eq(u.gid, 1000);
    ck_assert_uint_eq(u.ngroups, 1);
    ck_assert_int_eq(agent_user_by_spec(&db, "user:docker", &u, &e), 0);
    ck_assert_uint_eq(u.uid, 1000);
    ck_assert_uint_eq(u.gid, 999);
    ck_assert_uint_eq(u.groups[0], 999);
    ck_assert_uint_eq(u.ngroups, 1);
    ck_assert_int_eq(agent_user_by_spec(&db, "4242:100", &u, &e), 0);
    ck_assert_str_eq(u.name, "4242");
    ck_assert_uint_eq(u.uid, 4242);
    ck_assert_uint_eq(u.gid, 100);
    ck_assert_str_eq(u.home, "/");
    ck_assert_int_eq(agent_user_by_spec(&db, "4243", &u, &e), 0);
    ck_assert_uint_eq(u.gid, 4243);
    ck_assert_int_eq(agent_user_by_spec(&db, "user:nogroup", &u, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "group 'nogroup' does not exist"));
    ck_assert_int_eq(agent_user_by_spec(&db, "nobody:100", &u, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "user 'nobody' does not exist"));
    ck_assert_int_eq(agent_user_by_spec(&db, "who", &u, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "user 'who' does not exist"));
    ck_assert_int_eq(agent_user_by_spec(&db, "99999999999", &u, &e), -ENOENT);
    agent_userdb_free(&db);
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}
END_TEST

START_TEST(exit_statuses_as_envd_reports_them)
{
    char st[96];
    int code;
    bool exited;
    agent_exit_status(0, st, sizeof st, &code, &exited); /* exit 0 */
    ck_assert_str_eq(st, "exit status 0");
    ck_assert_int_eq(code, 0);
    ck_assert(exited);
    agent_exit_status(3 << 8, st, sizeof st, &code, &exited);
    ck_assert_str_eq(st, "exit status 3");
    ck_assert_int_eq(code, 3);
    agent_exit_status(SIGKILL, st, sizeof st, &code, &exited);
    ck_assert_str_eq(st, "signal: killed");
    ck_assert_int_eq(code, -1);
    ck_assert(!exited);
    agent_exit_status(SIGTERM, st, sizeof st, &code, &exited);
    ck_assert_str_eq(st, "signal: terminated");
    agent_exit_status(SIGSEGV | 0x80, st, sizeof st, &code, &exited);
    ck_assert_str_eq(st, "signal: segmentation fault (core dumped)");
    agent_exit_status(40, st, sizeof st, &code, &exited);
    ck_assert_str_eq(st, "signal: signal 40");
}
END_TEST

START_TEST(go_mode_strings)
{
    char s[32];
    agent_go_mode_string(S_IFREG | 0644, s, sizeof s);
    ck_assert_str_eq(s, "-rw-r--r--");
    agent_go_mode_string(S_IFDIR | 0755, s, sizeof s);
    ck_assert_str_eq(s, "drwxr-xr-x");
    agent_go_mode_string(S_IFDIR | S_ISVTX | 0777, s, sizeof s);
    ck_assert_str_eq(s, "dtrwxrwxrwx");
    agent_go_mode_string(S_IFLNK | 0777, s, sizeof s);
    ck_assert_str_eq(s, "Lrwxrwxrwx");
    agent_go_mode_string(S_IFCHR | 0666, s, sizeof s);
    ck_assert_str_eq(s, "Dcrw-rw-rw-");
    agent_go_mode_string(S_IFREG | S_ISUID | 0755, s, sizeof s);
    ck_assert_str_eq(s, "urwxr-xr-x");
    agent_go_mode_string(S_IFIFO | 0600, s, sizeof s);
    ck_assert_str_eq(s, "prw-------");
}
END_TEST

START_TEST(ndjson_lines_are_ascii_and_newline_terminated)
{
    json_t *o = json_pack("{s:s, s:s}", "type", "stdout", "text", "h\xc3\xa9\n\"x\"");
    struct al_buf b;
    al_buf_init(&b, 0);
    ck_assert_int_eq(agent_ndjson_append(&b, o), 0);
    ck_assert_str_eq(b.data, "{\"type\":\"stdout\",\"text\":\"h\\u00E9\\n\\\"x\\\"\"}\n");
    ck_assert_ptr_null(memchr(b.data, '\n', b.len - 1)); /* exactly one line */
    json_t *arr = json_array();
    ck_assert_int_eq(agent_ndjson_append(&b, arr), -EINVAL);
    json_decref(arr);
    json_decref(o);
    al_buf_free(&b);
}
END_TEST

START_TEST(utf8_prefix_and_repair)
{
    ck_assert_uint_eq(agent_utf8_complete_prefix("abc", 3), 3);
    ck_assert_uint_eq(agent_utf8_complete_prefix("ab\xc3", 3), 2);            /* cut 2-byte */
    ck_assert_uint_eq(agent_utf8_complete_prefix("a\xe2\x82", 3), 1);         /* cut 3-byte */
    ck_assert_uint_eq(agent_utf8_complete_prefix("a\xf0\x9f\x99", 4), 1);     /* cut 4-byte */
    ck_assert_uint_eq(agent_utf8_complete_prefix("a\xf0\x9f\x99\x82", 5), 5); /* complete */
    ck_assert_uint_eq(agent_utf8_complete_prefix("a\xff", 2), 2);             /* invalid, not cut */
    struct al_buf b;
    al_buf_init(&b, 0);
    ck_assert_int_eq(agent_utf8_sanitize("a\xff"
                                         "b\xc0\xaf"
                                         "c\xed\xa0\x80"
                                         "d\xc3\xa9",
                                         13, &b),
                     0);
    ck_assert_str_eq(b.data, "a\xef\xbf\xbd"
                             "b\xef\xbf\xbd\xef\xbf\xbd"
                             "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                             "d\xc3\xa9");
    al_buf_free(&b);
}
END_TEST

START_TEST(spawn_drops_privileges_and_reports_setup_errors)
{
    /* Runs as whoever runs the tests: the child must end with no capabilities at all,
     * no_new_privs set, a new session and only fds 0-2. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    char *argv[] = {"/bin/sh", "-c",
                    "grep -E '^(CapEff|CapPrm|CapInh|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status; "
                    "ls /proc/self/fd | wc -l; ps -o sid= -p $$ 2>/dev/null | tr -d ' '; echo $$",
                    NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    struct agent a = {.can_switch_user = false};
    struct agent_user u = {.uid = getuid(), .gid = getgid()};
    struct al_spawn o = {0};
    agent_spawn_user(&a, &o, "/bin/sh", argv, envp, &u);
    o.cwd = "/";
    o.fds[0] = -1;
    o.fds[1] = p[1];
    o.fds[2] = -1;
    o.nfds = 3;
    pid_t pid;
    struct al_error e = {0};
    ck_assert_msg(al_spawn(&o, &pid, NULL, &e) == 0, "%s", e.msg);
    close(p[1]);
    char out[4096] = "";
    size_t n = 0;
    ssize_t r;
    while ((r = read(p[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_ptr_nonnull(strstr(out, "CapEff:\t0000000000000000"));
    ck_assert_ptr_nonnull(strstr(out, "CapPrm:\t0000000000000000"));
    ck_assert_ptr_nonnull(strstr(out, "CapInh:\t0000000000000000"));
    ck_assert_ptr_nonnull(strstr(out, "CapAmb:\t0000000000000000"));
    ck_assert_ptr_nonnull(strstr(out, "NoNewPrivs:\t1"));
    if (agent_can_switch_user())
        ck_assert_ptr_nonnull(strstr(out, "CapBnd:\t0000000000000000"));
    /* a missing working directory is a setup error with a message */
    o.fds[1] = -1; /* (p[1] is closed) */
    o.cwd = "/definitely/not/here";
    int rc = al_spawn(&o, &pid, NULL, &e);
    ck_assert_msg(rc == -ENOENT, "%d: %s", rc, e.msg);
    ck_assert_ptr_nonnull(strstr(e.msg, "/definitely/not/here"));
    /* a missing program is exit 127 from the child, as a shell reports it */
    o.cwd = "/";
    o.path = "no-such-program-xyz";
    ck_assert_int_eq(al_spawn(&o, &pid, NULL, &e), 0);
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 127);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_misc");
    TCase *t = tcase_create("misc");
    tcase_add_test(t, paths_resolve_like_envd);
    tcase_add_test(t, path_parts);
    tcase_add_test(t, passwd_and_group_parsing);
    tcase_add_test(t, userdb_from_files_reloads_on_change);
    tcase_add_test(t, exit_statuses_as_envd_reports_them);
    tcase_add_test(t, go_mode_strings);
    tcase_add_test(t, ndjson_lines_are_ascii_and_newline_terminated);
    tcase_add_test(t, utf8_prefix_and_repair);
    tcase_add_test(t, spawn_drops_privileges_and_reports_setup_errors);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
