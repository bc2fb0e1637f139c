/* Unit tests: common/ basics (error, buf, json, util, log). */
#include "al_test.h"
#include "common/buf.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

START_TEST(error_set_and_prefix)
{
    struct al_error e = {0};
    ck_assert_int_eq(al_error_set(&e, -EINVAL, "port %d out of range", 70000), -EINVAL);
    ck_assert_str_eq(e.msg, "port 70000 out of range");
    al_error_prefix(&e, "policy %s", "x.yaml");
    ck_assert_str_eq(al_error_str(&e), "policy x.yaml: port 70000 out of range");
    ck_assert_int_eq(al_error_set(NULL, -ENOENT, "ignored"), -ENOENT);
    al_error_clear(&e);
    e.code = -ENOENT;
    ck_assert_str_eq(al_error_str(&e), strerror(ENOENT));
}
END_TEST

START_TEST(buf_cap_is_enforced)
{
    struct al_buf b;
    al_buf_init(&b, 8);
    ck_assert_int_eq(al_buf_appends(&b, "12345"), 0);
    ck_assert_int_eq(al_buf_appends(&b, "6789"), -E2BIG);
    ck_assert_uint_eq(b.len, 5); /* unchanged after a refused append */
    ck_assert_str_eq(b.data, "12345");
    ck_assert_int_eq(al_buf_printf(&b, "%d", 678), 0);
    ck_assert_str_eq(b.data, "12345678");
    al_buf_consume(&b, 3);
    ck_assert_str_eq(b.data, "45678");
    al_buf_free_wipe(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(json_escape_controls_and_bad_utf8)
{
    char out[64];
    al_json_escape("a\"b\\c\n\x01\xff\xc3\xa9", out, sizeof out);
    ck_assert_str_eq(out, "a\\\"b\\\\c\\n\\u0001\\ufffd\xc3\xa9");
    /* truncation never splits an escape */
    char small[5];
    al_json_escape("\"\"\"", small, sizeof small);
    ck_assert_str_eq(small, "\\\"\\\"");
}
END_TEST

START_TEST(json_strict_getters)
{
    struct al_error e = {0};
    const char *doc = "{\"a\":\"x\",\"n\":5,\"b\":true,\"z\":1}";
    json_t *o = al_json_parse(doc, strlen(doc), &e);
    ck_assert_ptr_nonnull(o);
    const char *s = NULL;
    int64_t n = 0;
    bool b = false;
    ck_assert_int_eq(al_json_get_str(o, "a", true, &s, "spec", &e), 0);
    ck_assert_str_eq(s, "x");
    ck_assert_int_eq(al_json_get_int(o, "n", true, 0, 10, &n, "spec", &e), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(al_json_get_int(o, "n", true, 6, 10, &n, "spec", &e), -ERANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "out of range 6..10"));
    ck_assert_int_eq(al_json_get_bool(o, "b", true, &b, "spec", &e), 0);
    ck_assert(b);
    ck_assert_int_eq(al_json_get_str(o, "n", true, &s, "spec", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "spec: \"n\" must be a string");
    ck_assert_int_eq(al_json_get_str(o, "missing", true, &s, "spec", &e), -EINVAL);
    ck_assert_int_eq(al_json_get_str(o, "missing", false, &s, "spec", &e), 0);
    static const char *const allowed[] = {"a", "n", "b", NULL};
    ck_assert_int_eq(al_json_check_keys(o, allowed, "spec", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "spec: unknown field \"z\"");
    json_decref(o);
    ck_assert_ptr_null(al_json_parse("{\"a\":1,\"a\":2}", 13, &e));
    ck_assert_ptr_null(al_json_parse("{bad", 4, &e));
    ck_assert_ptr_nonnull(strstr(e.msg, "line 1"));
}
END_TEST

START_TEST(util_sizes_and_durations)
{
    uint64_t v;
    ck_assert_int_eq(al_parse_size("10MiB", &v), 0);
    ck_assert_uint_eq(v, 10485760);
    ck_assert_int_eq(al_parse_size("512", &v), 0);
    ck_assert_uint_eq(v, 512);
    ck_assert_int_eq(al_parse_size("1G", &v), 0);
    ck_assert_uint_eq(v, 1000000000);
    ck_assert_int_eq(al_parse_size("10 MiB", &v), -EINVAL);
    ck_assert_int_eq(al_parse_size("-1", &v), -EINVAL);
    ck_assert_int_eq(al_parse_size("99999999999999999999", &v), -ERANGE);
    ck_assert_int_eq(al_parse_duration_ms("250ms", &v), 0);
    ck_assert_uint_eq(v, 250);
    ck_assert_int_eq(al_parse_duration_ms("5m", &v), 0);
    ck_assert_uint_eq(v, 300000);
    ck_assert_int_eq(al_parse_duration_ms("5y", &v), -EINVAL);
}
END_TEST

START_TEST(util_rfc3339_round_trip)
{
    uint64_t t;
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T01:02:03.456Z", &t), 0);
    char out[40];
    al_time_rfc3339(out, sizeof out, t);
    ck_assert_str_eq(out, "2026-11-30T01:02:03.456Z");
    uint64_t t2;
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T03:02:03.456+02:00", &t2), 0);
    ck_assert_uint_eq(t, t2);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-13-30T00:00:00Z", &t2), -EINVAL);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30T00:00:00", &t2), -EINVAL);
    ck_assert_int_eq(al_time_parse_rfc3339("2026-11-30", &t2), 0);
}
END_TEST

START_TEST(util_atomic_write_and_read)
{
    char dir[] = "/tmp/al-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/state.json", dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    ck_assert_int_eq(al_mkdir_p(sub, 0700), 0);
    struct al_error e = {0};
    ck_assert_int_eq(al_write_file_atomic(path, "hello", 5, 0600, &e), 0);
    ck_assert_int_eq(al_write_file_atomic(path, "world!", 6, 0600, &e), 0);
    char *data;
    size_t len;
    ck_assert_int_eq(al_read_file(path, 100, &data, &len, &e), 0);
    ck_assert_uint_eq(len, 6);
    ck_assert_str_eq(data, "world!");
    free(data);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(al_read_file(path, 3, &data, &len, &e), -EFBIG);
    ck_assert_int_eq(al_read_file(sub, 100, &data, &len, &e), -EISDIR);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* FDSize of /proc/self/status: the size of the descriptor table. */
static long fd_table_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "FDSize: %ld", &v) == 1)
            break;
    fclose(f);
    return v;
}

static int open_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* In a child of its own: the test changes its limits and its table for good. */
START_TEST(util_fd_table_reserve)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int code = 0;
        long before = fd_table_size();
        int open_before = open_fd_count();
        if (before <= 0 || before >= 3000)
            _exit(10); /* a fresh test process starts with a small table */
        if (al_fd_table_reserve(3000) != 3000)
            code = 11;
        else if (fd_table_size() < 3000)
            code = 12;
        else if (open_fd_count() != open_before)
            code = 13; /* nothing left open */
        /* A limit below the size asked for: the size is lowered to it (the table, larger
         * already, stays as it is: it never shrinks). */
        struct rlimit r = {200, 200};
        if (!code && setrlimit(RLIMIT_NOFILE, &r) == 0) {
            long grown = fd_table_size();
            if (al_fd_table_reserve(100000) != 200)
                code = 14;
            else if (fd_table_size() != grown)
                code = 15; /* already larger: unchanged */
        }
        /* A soft limit below the hard one is raised to it. */
        struct rlimit r2 = {64, 200}, now;
        if (!code && setrlimit(RLIMIT_NOFILE, &r2) == 0 &&
            (al_fd_table_reserve(150) != 150 || getrlimit(RLIMIT_NOFILE, &now) < 0 ||
             now.rlim_cur != 200))
            code = 16;
        _exit(code);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child step %d failed",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

START_TEST(log_json_lines)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    al_log_init("test", AL_LOG_JSON, AL_LOG_INFO);
    al_log_set_fd(p[1]);
    al_debug("hidden");
    al_warn("quote \" and newline \n here");
    close(p[1]);
    char buf[1024] = {0};
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_null(strstr(buf, "hidden"));
    struct al_error e;
    json_t *line = al_json_parse(buf, (size_t)n, &e);
    ck_assert_ptr_nonnull(line);
    ck_assert_str_eq(json_string_value(json_object_get(line, "level")), "warn");
    ck_assert_str_eq(json_string_value(json_object_get(line, "msg")),
                     "quote \" and newline \n here");
    ck_assert_str_eq(json_string_value(json_object_get(line, "component")), "test");
    json_decref(line);
}
END_TEST

static Suite *common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("basics");
    tcase_add_test(tc, error_set_and_prefix);
    tcase_add_test(tc, buf_cap_is_enforced);
    tcase_add_test(tc, json_escape_controls_and_bad_utf8);
    tcase_add_test(tc, json_strict_getters);
    tcase_add_test(tc, util_sizes_and_durations);
    tcase_add_test(tc, util_rfc3339_round_trip);
    tcase_add_test(tc, util_atomic_write_and_read);
    tcase_add_test(tc, util_fd_table_reserve);
    tcase_add_test(tc, log_json_lines);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(common_suite)
