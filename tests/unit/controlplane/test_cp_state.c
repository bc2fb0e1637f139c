/* tests/unit/controlplane/test_cp_state: ids and credentials, the hash map, sandbox records,
 * the SQLite store (round trips, crash safety across a kill -9, concurrent writers, API keys
 * and their digests), and the body of a registration with airlock-egress. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/builds.h"
#include "controlplane/cp.h"
#include "controlplane/egressreg.h"
#include "controlplane/ids.h"
#include "controlplane/map.h"
#include "controlplane/proc.h"
#include "controlplane/record.h"
#include "controlplane/store.h"

static char tmpdir[256];
static char dbpath[300];

static void setup(void)
{
    ck_assert_int_ge(sodium_init(), 0);
    al_test_tmpdir(tmpdir, sizeof tmpdir, "cp-state");
    snprintf(dbpath, sizeof dbpath, "%s/airlockd.db", tmpdir);
}

static void teardown(void)
{
    ck_assert_int_eq(al_test_rmtree(tmpdir), 0);
}

START_TEST(ids_shapes)
{
    char id[CP_ID_LEN + 1], id2[CP_ID_LEN + 1];
    cp_sandbox_id_new(id);
    cp_sandbox_id_new(id2);
    ck_assert_uint_eq(strlen(id), CP_ID_LEN);
    ck_assert(id[0] >= 'a' && id[0] <= 'z');
    ck_assert(cp_sandbox_id_valid(id));
    ck_assert_str_ne(id, id2);
    ck_assert(!cp_sandbox_id_valid(""));
    ck_assert(!cp_sandbox_id_valid("ABC"));
    ck_assert(!cp_sandbox_id_valid("a/b"));
    ck_assert(!cp_sandbox_id_valid("a b"));
    ck_assert(
        !cp_sandbox_id_valid("0123456789012345678901234567890123456789012345678901234567890123"));
    ck_assert(cp_sandbox_id_valid("debug_sandbox_id"));

    char key[CP_APIKEY_LEN + 1];
    cp_apikey_new(key);
    ck_assert_uint_eq(strlen(key), CP_APIKEY_LEN);
    ck_assert(cp_apikey_wellformed(key));
    ck_assert(cp_apikey_wellformed("e2b_0000000000000000000000000000000000000000"));
    ck_assert(!cp_apikey_wellformed("e2b_"));
    ck_assert(!cp_apikey_wellformed("e2b_ABCDEF0123"));
    ck_assert(!cp_apikey_wellformed("xyz_0123456789"));

    char tok[CP_TOKEN_LEN + 1];
    cp_token_new(tok);
    ck_assert_uint_eq(strlen(tok), CP_TOKEN_LEN);
    char kid[CP_KEYID_LEN + 1];
    cp_keyid_new(kid);
    ck_assert_int_eq(strncmp(kid, "key_", 4), 0);
    ck_assert_uint_eq(strlen(kid), CP_KEYID_LEN);
}
END_TEST

START_TEST(secret_compare)
{
    const char *a = "0123456789abcdef";
    ck_assert(cp_secret_equal(a, strlen(a), "0123456789abcdef", 16));
    ck_assert(!cp_secret_equal(a, strlen(a), "0123456789abcdeF", 16));
    ck_assert(!cp_secret_equal(a, strlen(a), "0123456789abcde", 15));
    ck_assert(!cp_secret_equal("", 0, a, strlen(a)));
    uint8_t d1[CP_DIGEST_LEN], d2[CP_DIGEST_LEN];
    cp_digest("x", 1, d1);
    cp_digest("x", 1, d2);
    ck_assert(cp_digest_equal(d1, d2));
    d2[31] ^= 1;
    ck_assert(!cp_digest_equal(d1, d2));
    char hex[2 * CP_DIGEST_LEN + 1];
    cp_digest_hex(d1, hex);
    ck_assert_uint_eq(strlen(hex), 64);
}
END_TEST

static int count_cb(void *v, void *arg)
{
    (void)v;
    (*(int *)arg)++;
    return 0;
}

START_TEST(map_basics)
{
    struct cp_map m;
    cp_map_init(&m);
    static int vals[5000];
    char k[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        ck_assert_int_eq(cp_map_put(&m, k, strlen(k), &vals[i]), 0);
    }
    ck_assert_int_eq(cp_map_put(&m, "key-7", 5, &vals[0]), -EEXIST);
    ck_assert_uint_eq(cp_map_count(&m), 5000);
    for (int i = 0; i < 5000; i += 7) {
        snprintf(k, sizeof k, "key-%d", i);
        ck_assert_ptr_eq(cp_map_get(&m, k, strlen(k)), &vals[i]);
    }
    ck_assert_ptr_null(cp_map_get(&m, "key-5000", 8));
    ck_assert_ptr_eq(cp_map_del(&m, "key-10", 6), &vals[10]);
    ck_assert_ptr_null(cp_map_del(&m, "key-10", 6));
    ck_assert_ptr_null(cp_map_get(&m, "key-10", 6));
    int n = 0;
    cp_map_foreach(&m, count_cb, &n);
    ck_assert_int_eq(n, 4999);
    cp_map_free(&m);
    ck_assert_uint_eq(cp_map_count(&m), 0);
    ck_assert_ptr_null(cp_map_get(&m, "key-1", 5));
}
END_TEST

static void fill_record(struct cp_sb_record *r, const char *id, uint64_t seq)
{
    cp_sb_record_init(r);
    snprintf(r->id, sizeof r->id, "%s", id);
    r->seq = seq;
    r->state = CP_SB_RUNNING;
    snprintf(r->template_id, sizeof r->template_id, "base");
    snprintf(r->backend, sizeof r->backend, "jail");
    snprintf(r->key_id, sizeof r->key_id, "key_01234567");
    cp_token_new(r->token);
    r->created_ns = 1000;
    r->started_ns = 2000 + seq;
    r->end_ns = 3000000000000ull;
    r->on_timeout_pause = true;
    r->auto_resume = false;
    r->allow_internet = 0;
    r->cpu_count = 2;
    r->memory_mb = 512;
    r->disk_mb = 1024;
    json_object_set_new(r->metadata, "owner", json_string("agent x"));
    json_object_set_new(r->metadata, "ünï", json_string("çödé&=%"));
    r->network = json_pack("{s:[s]}", "allowOut", "pypi.org");
    snprintf(r->policy_name, sizeof r->policy_name, "default");
    memset(r->policy_hash, 'a', 64);
    r->pid = 4242;
    r->pid_start = 987654321;
    snprintf(r->addr, sizeof r->addr, "10.200.0.6");
    r->intercept = json_pack("{s:s,s:s,s:s,s:{s:s}}", "caCertPem", "-----BEGIN CERTIFICATE-----\n",
                             "caFingerprint", "sha256:ab", "agentCaFingerprint", "sha256:cd",
                             "placeholders", "SERVICE_KEY", "alph_0123");
}

START_TEST(record_doc_roundtrip)
{
    struct cp_sb_record a, b;
    fill_record(&a, "abc123", 7);
    json_t *doc = cp_sb_record_doc(&a);
    cp_sb_record_init(&b);
    struct al_error err = {0};
    ck_assert_int_eq(cp_sb_record_from_doc(&b, doc, &err), 0);
    ck_assert_str_eq(b.template_id, "base");
    ck_assert_str_eq(b.token, a.token);
    ck_assert_uint_eq(b.started_ns, a.started_ns);
    ck_assert_uint_eq(b.end_ns, a.end_ns);
    ck_assert(b.on_timeout_pause);
    ck_assert_int_eq(b.allow_internet, 0);
    ck_assert_int_eq(b.memory_mb, 512);
    ck_assert(json_equal(a.metadata, b.metadata));
    ck_assert(json_equal(a.network, b.network));
    /* The interception CA and placeholders survive a restart of airlockd. */
    ck_assert(json_equal(a.intercept, b.intercept));
    ck_assert_int_eq(b.pid, 4242);
    ck_assert_uint_eq(b.pid_start, 987654321);
    ck_assert_str_eq(b.addr, "10.200.0.6");
    /* allow_internet absent = not given. */
    json_object_del(doc, "allow_internet");
    ck_assert_int_eq(cp_sb_record_from_doc(&b, doc, &err), 0);
    ck_assert_int_eq(b.allow_internet, -1);
    /* A wrong type is an error that names the field. */
    json_object_set_new(doc, "memory_mb", json_string("x"));
    ck_assert_int_lt(cp_sb_record_from_doc(&b, doc, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "memory_mb"));
    json_decref(doc);
    cp_sb_record_free(&a);
    cp_sb_record_free(&b);

    enum cp_sb_state st;
    ck_assert_int_eq(cp_sb_state_parse("paused", &st), 0);
    ck_assert_int_eq(st, CP_SB_PAUSED);
    ck_assert_int_eq(cp_sb_state_parse("zombie", &st), -EINVAL);
    ck_assert_str_eq(cp_sb_state_name(CP_SB_STOPPING), "stopping");
}
END_TEST

START_TEST(apikey_policies)
{
    ck_assert(cp_apikey_allows_policy("*", "anything"));
    ck_assert(cp_apikey_allows_policy("default,pypi", "pypi"));
    ck_assert(cp_apikey_allows_policy("default,pypi", "default"));
    ck_assert(!cp_apikey_allows_policy("default,pypi", "py"));
    ck_assert(!cp_apikey_allows_policy("default,pypi", "pypi2"));
    ck_assert(!cp_apikey_allows_policy("default", "*"));
    struct al_error err = {0};
    ck_assert_int_eq(cp_apikey_policies_check("*", &err), 0);
    ck_assert_int_eq(cp_apikey_policies_check("a,b-c,d.e_f", &err), 0);
    ck_assert_int_lt(cp_apikey_policies_check("", &err), 0);
    ck_assert_int_lt(cp_apikey_policies_check("a,,b", &err), 0);
    ck_assert_int_lt(cp_apikey_policies_check("a, b", &err), 0);
    ck_assert_int_lt(cp_apikey_policies_check("../x", &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "policy name"));
}
END_TEST

START_TEST(proc_start_time)
{
    uint64_t t = cp_proc_start_time(getpid());
    ck_assert_uint_gt(t, 0);
    ck_assert_uint_eq(cp_proc_start_time(getpid()), t);
    ck_assert_uint_eq(cp_proc_start_time(0), 0);
    ck_assert_uint_eq(cp_proc_start_time(0x3fffffff), 0);
}
END_TEST

/* Counts the lines of /proc/self/maps (the spawn's blocks are mappings of their own). */
static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* Waits for a child through its pidfd: its exit status (-1 if not exited normally). */
static int wait_pidfd(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 10000), 1);
    int st = -1;
    ck_assert_int_eq(cp_proc_reap(pidfd, &st), 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Both ways of spawning (posix_spawn, and returning before the exec): the child gets
 * exactly the descriptors asked for (0 from a pipe, 1 to a pipe, 3 to another, 2 to
 * /dev/null when -1), its own session, default signal dispositions; its exit status comes
 * through the pidfd. Many spawns in a row leave no mapping behind (the blocks the children
 * ran in before their exec are reclaimed), and a failed exec is a child exiting 127. */
START_TEST(proc_spawn_descriptors)
{
    signal(SIGUSR1, SIG_IGN); /* the child must not inherit this (bit 0x200 of SigIgn) */
    int maps0 = 0;
    for (int i = 0; i < 120; i++) {
        bool nowait = i % 2 == 0;
        if (i == 20)
            maps0 = count_maps();
        int in[2], out[2], extra[2];
        ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(extra, O_CLOEXEC), 0);
        char *argv[] = {"/bin/sh", "-c",
                        "read x; echo \"$x-$(ps -o sid= -p $$ | tr -d ' ')-$$\"; "
                        "echo three >&3; "
                        "ign=$(sed -n 's/^SigIgn:\\t//p' /proc/$$/status); "
                        "[ $((0x$ign & 0x200)) -eq 0 ] || exit 9; "
                        "exec 2>/dev/full; exit 3",
                        NULL};
        struct al_spawn sp = {.path = "/bin/sh",
                              .argv = argv,
                              .fds = {in[0], out[1], -1, extra[1]},
                              .nfds = 4,
                              .new_session = true,
                              .no_wait_exec = nowait};
        pid_t pid = 0;
        int pidfd = -1;
        struct al_error err = {0};
        ck_assert_msg(al_spawn(&sp, &pid, &pidfd, &err) == 0, "%s", err.msg);
        close(in[0]);
        close(out[1]);
        close(extra[1]);
        ck_assert_int_eq(write(in[1], "hi\n", 3), 3);
        close(in[1]);
        char buf[128] = "";
        ssize_t n = read(out[0], buf, sizeof buf - 1);
        ck_assert_int_gt(n, 0);
        buf[n] = '\0';
        char want[64];
        snprintf(want, sizeof want, "hi-%d-%d\n", (int)pid, (int)pid); /* session leader */
        ck_assert_str_eq(buf, want);
        n = read(extra[0], buf, sizeof buf - 1);
        ck_assert_int_eq(n, 6);
        ck_assert_int_eq(memcmp(buf, "three\n", 6), 0);
        close(out[0]);
        close(extra[0]);
        ck_assert_int_eq(wait_pidfd(pidfd), 3);
        close(pidfd);
    }
    signal(SIGUSR1, SIG_DFL);
    /* (A few mappings may remain: children whose pipe was not polled since they exec'd.) */
    ck_assert_int_le(count_maps(), maps0 + 4);

    /* An executable path that cannot be exec'd (a directory passes access(X_OK)). */
    char *argv[] = {"/tmp", NULL};
    for (int nowait = 0; nowait < 2; nowait++) {
        struct al_spawn sp = {
            .path = "/tmp", .argv = argv, .fds = {-1, -1, -1}, .nfds = 3, .no_wait_exec = nowait};
        pid_t pid;
        int pidfd = -1;
        struct al_error err = {0};
        int rc = al_spawn(&sp, &pid, &pidfd, &err);
        if (nowait) {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(wait_pidfd(pidfd), 127);
            close(pidfd);
        } else {
            ck_assert_int_eq(rc, -EACCES);
        }
    }
    /* Not there at all: an error at once, either way. */
    char *argv2[] = {"/nonexistent/airlock-vmm", NULL};
    struct al_spawn sp = {.path = argv2[0], .argv = argv2, .nfds = 0, .no_wait_exec = true};
    pid_t pid;
    struct al_error err = {0};
    ck_assert_int_eq(al_spawn(&sp, &pid, NULL, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/airlock-vmm"));
}
END_TEST

struct collect {
    char ids[16][64];
    uint64_t seqs[16];
    int n;
    int bad;
};

static int collect_cb(const struct cp_sb_record *r, void *arg)
{
    struct collect *c = arg;
    snprintf(c->ids[c->n], sizeof c->ids[0], "%s", r->id);
    c->seqs[c->n++] = r->seq;
    return 0;
}

static void bad_cb(const char *id, const char *why, void *arg)
{
    (void)id;
    (void)why;
    ((struct collect *)arg)->bad++;
}

static int count_rows_cb(const struct cp_sb_record *r, void *arg)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

/* The checkpoints run on the store's thread: the saves (one transaction each) never
 * checkpoint by themselves, yet the WAL is written back once it holds 1000 frames, and
 * everything is there afterwards. */
START_TEST(store_checkpoints_off_the_caller)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct stat before;
    ck_assert_int_eq(stat(dbpath, &before), 0);
    ck_assert_uint_eq(cp_store_checkpoints(s), 0);
    enum { N = 1500 };
    for (int i = 0; i < N; i++) {
        struct cp_sb_record r;
        char id[32];
        snprintf(id, sizeof id, "ck%04d", i);
        fill_record(&r, id, (uint64_t)i + 1);
        ck_assert_msg(cp_store_sb_save(s, &r, &err) == 0, "%s", err.msg);
        cp_sb_record_free(&r);
    }
    /* One frame per save at least: the thread was woken at the 1000th. */
    for (int i = 0; i < 1000 && cp_store_checkpoints(s) == 0; i++)
        usleep(10000);
    ck_assert_uint_ge(cp_store_checkpoints(s), 1);
    struct stat after;
    ck_assert_int_eq(stat(dbpath, &after), 0);
    ck_assert_int_gt(after.st_size, before.st_size); /* pages written back */
    /* A checkpoint is no change by another connection (airlockd would reload its state). */
    ck_assert(!cp_store_changed(s));
    int n = 0;
    ck_assert_int_eq(cp_store_sb_foreach(s, count_rows_cb, NULL, &n, &err), 0);
    ck_assert_int_eq(n, N);
    cp_store_close(s);
    /* Reopened: all rows. */
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    n = 0;
    ck_assert_int_eq(cp_store_sb_foreach(s, count_rows_cb, NULL, &n, &err), 0);
    ck_assert_int_eq(n, N);
    cp_store_close(s);
}
END_TEST

START_TEST(store_sandboxes)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct stat st;
    ck_assert_int_eq(stat(dbpath, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);

    uint64_t s1, s2;
    ck_assert_int_eq(cp_store_next_seq(s, &s1, &err), 0);
    ck_assert_int_eq(cp_store_next_seq(s, &s2, &err), 0);
    ck_assert_uint_eq(s2, s1 + 1);

    struct cp_sb_record a, b, c;
    fill_record(&a, "aaaa", 3);
    fill_record(&b, "bbbb", 1);
    ck_assert_int_eq(cp_store_sb_save(s, &a, &err), 0);
    ck_assert_int_eq(cp_store_sb_save(s, &b, &err), 0);
    /* seq is unique: another sandbox with seq 3 is refused. */
    fill_record(&c, "cccc", 3);
    ck_assert_int_eq(cp_store_sb_save(s, &c, &err), -EEXIST);
    cp_sb_record_free(&c);

    a.state = CP_SB_PAUSED;
    json_object_set_new(a.metadata, "k", json_string("v"));
    ck_assert_int_eq(cp_store_sb_save(s, &a, &err), 0);

    struct collect col = {0};
    ck_assert_int_eq(cp_store_sb_foreach(s, collect_cb, bad_cb, &col, &err), 0);
    ck_assert_int_eq(col.n, 2);
    ck_assert_str_eq(col.ids[0], "bbbb"); /* by seq */
    ck_assert_str_eq(col.ids[1], "aaaa");

    struct cp_sb_record r;
    cp_sb_record_init(&r);
    ck_assert_int_eq(cp_store_sb_load(s, "aaaa", &r, &err), 0);
    ck_assert_int_eq(r.state, CP_SB_PAUSED);
    ck_assert_str_eq(json_string_value(json_object_get(r.metadata, "k")), "v");
    ck_assert_str_eq(r.token, a.token);
    cp_sb_record_free(&r);

    ck_assert_int_eq(cp_store_sb_delete(s, "aaaa", &err), 0);
    cp_sb_record_init(&r);
    ck_assert_int_eq(cp_store_sb_load(s, "aaaa", &r, &err), -ENOENT);
    cp_sb_record_free(&r);
    cp_store_close(s);

    /* Reopen: what was written is there, the sequence continues. */
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    memset(&col, 0, sizeof col);
    ck_assert_int_eq(cp_store_sb_foreach(s, collect_cb, bad_cb, &col, &err), 0);
    ck_assert_int_eq(col.n, 1);
    ck_assert_str_eq(col.ids[0], "bbbb");
    uint64_t s3;
    ck_assert_int_eq(cp_store_next_seq(s, &s3, &err), 0);
    ck_assert_uint_eq(s3, s2 + 1);
    cp_store_close(s);
    cp_sb_record_free(&a);
    cp_sb_record_free(&b);
}
END_TEST

START_TEST(store_bad_rows_are_reported)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    struct cp_sb_record a;
    fill_record(&a, "good", 1);
    ck_assert_int_eq(cp_store_sb_save(s, &a, &err), 0);
    cp_sb_record_free(&a);
    cp_store_close(s);
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute(\\\"INSERT INTO "
             "sandboxes VALUES('evil', 9, 'running', '{not json')\\\"); c.execute(\\\"INSERT INTO "
             "sandboxes VALUES('odd', 10, 'zombie', '{}')\\\"); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    struct collect col = {0};
    ck_assert_int_eq(cp_store_sb_foreach(s, collect_cb, bad_cb, &col, &err), 0);
    ck_assert_int_eq(col.n, 1);
    ck_assert_int_eq(col.bad, 2);
    cp_store_close(s);
}
END_TEST

/* Lifecycle events: filtered by sandbox and type, both orders, offset and limit; pruned by
 * age and count; numbers never reused after pruning; a schema-1 database gains the table. */
static int ev_collect(uint64_t seq, int type, const char *doc, void *arg)
{
    char *out = arg;
    ck_assert_int_eq(type, doc[1] - '0'); /* the docs below name their type */
    size_t n = strlen(out);
    snprintf(out + n, 512 - n, "%s%llu:%s", n ? " " : "", (unsigned long long)seq, doc);
    return 0;
}

static void ev_query(struct cp_store *s, const char *sb, uint64_t mask, uint64_t after,
                     uint64_t limit, uint64_t offset, bool asc, char out[512])
{
    struct al_error err = {0};
    out[0] = '\0';
    struct cp_store_event_query q = {.sandbox_id = sb,
                                     .type_mask = mask,
                                     .after_seq = after,
                                     .limit = limit,
                                     .offset = offset,
                                     .ascending = asc};
    ck_assert_msg(cp_store_event_query(s, &q, ev_collect, out, &err) == 0, "%s", err.msg);
}

START_TEST(store_events)
{
    /* A database as schema 1 left it: no events table. */
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute('CREATE TABLE "
             "meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)'); c.execute('PRAGMA "
             "user_version=1'); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    uint64_t seq = 0;
    /* type 0 = created, 1 = killed, 3 = paused */
    ck_assert_int_eq(cp_store_event_add(s, "a", 0, 100, "a0", &seq, &err), 0);
    ck_assert_uint_eq(seq, 1);
    ck_assert_int_eq(cp_store_event_add(s, "b", 0, 200, "b0", &seq, &err), 0);
    ck_assert_int_eq(cp_store_event_add(s, "a", 3, 300, "a3", &seq, &err), 0);
    ck_assert_int_eq(cp_store_event_add(s, "a", 1, 400, "a1", &seq, &err), 0);
    ck_assert_uint_eq(seq, 4);
    char out[512];
    ev_query(s, NULL, ~0ull, 0, 10, 0, true, out);
    ck_assert_str_eq(out, "1:a0 2:b0 3:a3 4:a1");
    ev_query(s, "a", ~0ull, 0, 10, 0, false, out);
    ck_assert_str_eq(out, "4:a1 3:a3 1:a0");
    ev_query(s, "a", 1u << 0 | 1u << 1, 0, 10, 0, true, out);
    ck_assert_str_eq(out, "1:a0 4:a1");
    ev_query(s, NULL, ~0ull, 0, 2, 1, true, out);
    ck_assert_str_eq(out, "2:b0 3:a3");
    ev_query(s, NULL, ~0ull, 2, 10, 0, true, out);
    ck_assert_str_eq(out, "3:a3 4:a1");
    ev_query(s, "nobody", ~0ull, 0, 10, 0, true, out);
    ck_assert_str_eq(out, "");
    uint64_t deleted = 0;
    ck_assert_int_eq(cp_store_event_prune(s, 250, 0, &deleted, &err), 0);
    ck_assert_uint_eq(deleted, 2);
    ck_assert_int_eq(cp_store_event_prune(s, 0, 1, &deleted, &err), 0);
    ck_assert_uint_eq(deleted, 1);
    ev_query(s, NULL, ~0ull, 0, 10, 0, true, out);
    ck_assert_str_eq(out, "4:a1");
    ck_assert_int_eq(cp_store_event_prune(s, 1000, 0, &deleted, &err), 0);
    ck_assert_int_eq(cp_store_event_add(s, "c", 0, 500, "c0", &seq, &err), 0);
    ck_assert_uint_eq(seq, 5); /* not 1 again: a stream's Last-Event-ID stays meaningful */
    cp_store_close(s);
}
END_TEST

/* Templates and their builds (schema 3): a schema-2 database gains the tables; builds are
 * listed newest first; a build's log is numbered in order and filtered by level; deleting a
 * template takes its builds and their logs with it. */
static int build_names(const struct cp_store_build *b, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%s%s:%s", n ? " " : "", b->id, b->status);
    return 0;
}

static int log_lines(const struct cp_store_build_log_entry *e, void *arg)
{
    char *out = arg;
    size_t l = strlen(out);
    snprintf(out + l, 256 - l, "%s%llu/%llu/%d/%s/%s", l ? " " : "", (unsigned long long)e->n,
             (unsigned long long)e->time_ns, e->level, e->step ? e->step : "-", e->message);
    return 0;
}

START_TEST(store_template_builds)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute('CREATE TABLE "
             "meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)'); c.execute('PRAGMA "
             "user_version=2'); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    json_t *doc = json_pack("{s:s}", "created_by", "key_1");
    ck_assert_int_eq(cp_store_tpl_save(s, "t1", 10, doc, &err), 0);
    json_object_set_new(doc, "updated_ns", json_integer(20));
    ck_assert_int_eq(cp_store_tpl_save(s, "t1", 99, doc, &err), 0);
    json_decref(doc);
    uint64_t created = 0;
    ck_assert_int_eq(cp_store_tpl_load(s, "t1", &created, &doc, &err), 0);
    ck_assert_uint_eq(created, 10); /* kept from the first save */
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "updated_ns")), 20);
    json_decref(doc);
    ck_assert_int_eq(cp_store_tpl_load(s, "t2", &created, &doc, NULL), -ENOENT);

    const char *ids[] = {"b-one", "b-two", "b-other"};
    for (int i = 0; i < 3; i++) {
        struct cp_store_build b = {.created_ns = 100 + (uint64_t)i, .doc = json_object()};
        snprintf(b.id, sizeof b.id, "%s", ids[i]);
        snprintf(b.template_id, sizeof b.template_id, "%s", i == 2 ? "t2" : "t1");
        snprintf(b.status, sizeof b.status, "waiting");
        ck_assert_int_eq(cp_store_build_save(s, &b, &err), 0);
        cp_store_build_free(&b);
    }
    struct cp_store_build b;
    ck_assert_int_eq(cp_store_build_load(s, "b-one", &b, &err), 0);
    snprintf(b.status, sizeof b.status, "ready");
    json_object_set_new(b.doc, "reason", json_string("r"));
    ck_assert_int_eq(cp_store_build_save(s, &b, &err), 0);
    cp_store_build_free(&b);
    ck_assert_int_eq(cp_store_build_load(s, "b-one", &b, &err), 0);
    ck_assert_str_eq(b.status, "ready");
    ck_assert_str_eq(b.template_id, "t1");
    ck_assert_uint_eq(b.created_ns, 100);
    ck_assert_str_eq(json_string_value(json_object_get(b.doc, "reason")), "r");
    cp_store_build_free(&b);
    ck_assert_int_eq(cp_store_build_load(s, "b-none", &b, NULL), -ENOENT);
    char out[256] = "";
    ck_assert_int_eq(cp_store_build_foreach(s, "t1", build_names, out, &err), 0);
    ck_assert_str_eq(out, "b-two:waiting b-one:ready");

    ck_assert_int_eq(
        cp_store_build_log_add(s, "b-one",
                               &(struct cp_store_build_log_entry){
                                   .time_ns = 5, .level = 1, .step = NULL, .message = "first"},
                               &err),
        0);
    ck_assert_int_eq(
        cp_store_build_log_add(s, "b-one",
                               &(struct cp_store_build_log_entry){
                                   .time_ns = 6, .level = 0, .step = "1", .message = "second"},
                               &err),
        0);
    ck_assert_int_eq(
        cp_store_build_log_add(s, "b-one",
                               &(struct cp_store_build_log_entry){
                                   .time_ns = 7, .level = 3, .step = "2", .message = "third"},
                               &err),
        0);
    ck_assert_int_eq(
        cp_store_build_log_add(s, "b-other",
                               &(struct cp_store_build_log_entry){
                                   .time_ns = 8, .level = 1, .step = NULL, .message = "elsewhere"},
                               &err),
        0);
    out[0] = '\0';
    ck_assert_int_eq(cp_store_build_log_query(s, "b-one",
                                              &(struct cp_store_build_log_page){0, 0, 10},
                                              log_lines, out, &err),
                     0);
    ck_assert_str_eq(out, "0/5/1/-/first 1/6/0/1/second 2/7/3/2/third");
    out[0] = '\0';
    ck_assert_int_eq(cp_store_build_log_query(s, "b-one",
                                              &(struct cp_store_build_log_page){1, 1, 10},
                                              log_lines, out, &err),
                     0);
    ck_assert_str_eq(out, "2/7/3/2/third");
    out[0] = '\0';
    ck_assert_int_eq(cp_store_build_log_query(s, "b-one",
                                              &(struct cp_store_build_log_page){0, 1, 1}, log_lines,
                                              out, &err),
                     0);
    ck_assert_str_eq(out, "1/6/0/1/second");

    ck_assert_int_eq(cp_store_tpl_delete(s, "t1", &err), 0);
    ck_assert_int_eq(cp_store_tpl_load(s, "t1", &created, &doc, NULL), -ENOENT);
    ck_assert_int_eq(cp_store_build_load(s, "b-one", &b, NULL), -ENOENT);
    out[0] = '\0';
    ck_assert_int_eq(cp_store_build_log_query(s, "b-one",
                                              &(struct cp_store_build_log_page){0, 0, 10},
                                              log_lines, out, &err),
                     0);
    ck_assert_str_eq(out, "");
    /* Another template's build and log stay. */
    ck_assert_int_eq(cp_store_build_load(s, "b-other", &b, &err), 0);
    cp_store_build_free(&b);
    ck_assert_int_eq(cp_store_build_log_query(s, "b-other",
                                              &(struct cp_store_build_log_page){0, 0, 10},
                                              log_lines, out, &err),
                     0);
    ck_assert_str_eq(out, "0/8/1/-/elsewhere");
    cp_store_close(s);
}
END_TEST

/* At start, builds that had not ended when airlockd stopped become errors saying so, and
 * the files they were making go; ended builds and templates stay as they are. */
static int status_of(const struct cp_store_build *b, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);
    const char *step =
        json_string_value(json_object_get(json_object_get(b->doc, "reason"), "step"));
    snprintf(out + n, 256 - n, "%s%s:%s:%s", n ? " " : "", b->id, b->status, step ? step : "-");
    return 0;
}

START_TEST(builds_recover_after_a_stop)
{
    struct cp cp;
    memset(&cp, 0, sizeof cp);
    struct al_error err = {0};
    ck_assert_int_eq(cp_store_open(dbpath, &cp.store, &err), 0);
    snprintf(cp.cfg.templates_path, sizeof cp.cfg.templates_path, "%s/templates", tmpdir);
    json_t *doc = json_object();
    ck_assert_int_eq(cp_store_tpl_save(cp.store, "t1", 1, doc, &err), 0);
    json_decref(doc);
    const char *st[] = {"ready", "building", "waiting", "error"};
    for (int i = 0; i < 4; i++) {
        struct cp_store_build b = {.created_ns = 10 + (uint64_t)i, .doc = json_object()};
        snprintf(b.id, sizeof b.id, "b%d", i);
        snprintf(b.template_id, sizeof b.template_id, "t1");
        snprintf(b.status, sizeof b.status, "%s", st[i]);
        ck_assert_int_eq(cp_store_build_save(cp.store, &b, &err), 0);
        cp_store_build_free(&b);
    }
    char half[400], keep[400], other[400];
    snprintf(half, sizeof half, "%s/.t1.build-b1/rootfs/etc", cp.cfg.templates_path);
    ck_assert_int_eq(al_mkdir_p(half, 0755), 0);
    snprintf(half, sizeof half, "%s/.t1.build-b1", cp.cfg.templates_path);
    snprintf(keep, sizeof keep, "%s/t1/rootfs", cp.cfg.templates_path);
    ck_assert_int_eq(al_mkdir_p(keep, 0755), 0);
    snprintf(other, sizeof other, "%s/.t1.prev-b0", cp.cfg.templates_path);
    ck_assert_int_eq(al_mkdir_p(other, 0755), 0);
    cp_builds_recover(&cp);
    char out[256] = "";
    ck_assert_int_eq(cp_store_build_foreach(cp.store, "t1", status_of, out, &err), 0);
    ck_assert_str_eq(out, "b3:error:- b2:error:base b1:error:base b0:ready:-");
    struct cp_store_build b;
    ck_assert_int_eq(cp_store_build_load(cp.store, "b1", &b, &err), 0);
    ck_assert_ptr_nonnull(
        strstr(json_string_value(json_object_get(json_object_get(b.doc, "reason"), "message")),
               "airlockd stopped while the build ran"));
    cp_store_build_free(&b);
    struct stat sb;
    ck_assert_int_lt(stat(half, &sb), 0);
    ck_assert_int_eq(stat(keep, &sb), 0);
    ck_assert_int_eq(stat(other, &sb), 0);
    cp_store_close(cp.store);
}
END_TEST

START_TEST(store_newer_schema_refused)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    cp_store_close(s);
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute('PRAGMA "
             "user_version=99'); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), -EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "newer"));
}
END_TEST

/* A writer killed with SIGKILL in the middle of a stream of transactions leaves a database
 * that opens and holds every transaction it had committed. */
START_TEST(store_survives_kill9)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        struct cp_store *s;
        struct al_error err = {0};
        if (cp_store_open(dbpath, &s, &err))
            _exit(1);
        for (uint64_t i = 1;; i++) {
            struct cp_sb_record r;
            char id[32];
            snprintf(id, sizeof id, "sb%llu", (unsigned long long)i);
            fill_record(&r, id, i);
            if (cp_store_sb_save(s, &r, &err))
                _exit(1);
            cp_sb_record_free(&r);
            /* Tell the parent this one is committed. */
            uint32_t v = (uint32_t)i;
            if (write(pfd[1], &v, sizeof v) != sizeof v)
                _exit(1);
        }
    }
    close(pfd[1]);
    uint32_t last = 0, v;
    while (last < 300 && read(pfd[0], &v, sizeof v) == sizeof v)
        last = v;
    kill(pid, SIGKILL);
    while (read(pfd[0], &v, sizeof v) == sizeof v)
        last = v;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status));

    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct cp_sb_record r;
    char id[32];
    snprintf(id, sizeof id, "sb%u", last);
    cp_sb_record_init(&r);
    ck_assert_msg(cp_store_sb_load(s, id, &r, &err) == 0, "committed %s lost: %s", id, err.msg);
    cp_sb_record_free(&r);
    cp_store_close(s);
}
END_TEST

START_TEST(store_keys)
{
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_int_eq(cp_store_open(dbpath, &s, &err), 0);
    size_t n = 99;
    ck_assert_int_eq(cp_store_key_count_valid(s, &n, &err), 0);
    ck_assert_uint_eq(n, 0);

    struct cp_apikey k = {0};
    cp_keyid_new(k.id);
    snprintf(k.name, sizeof k.name, "ci");
    snprintf(k.policies, sizeof k.policies, "default,pypi");
    k.role = CP_ROLE_OPERATOR;
    k.created_ns = 5;
    char key[CP_APIKEY_LEN + 1];
    cp_apikey_new(key);
    cp_digest(key, strlen(key), k.digest);
    ck_assert_int_eq(cp_store_key_insert(s, &k, &err), 0);
    /* The same digest twice is refused. */
    struct cp_apikey k2 = k;
    cp_keyid_new(k2.id);
    ck_assert_int_eq(cp_store_key_insert(s, &k2, &err), -EEXIST);

    /* Nothing in the database file is the key itself. */
    char *data = NULL;
    size_t len = 0;
    ck_assert_int_eq(al_read_file(dbpath, 1 << 24, &data, &len, NULL), 0);
    ck_assert_ptr_null(memmem(data, len, key + 4, 40));
    free(data);
    char wal[320];
    snprintf(wal, sizeof wal, "%s-wal", dbpath);
    if (al_read_file(wal, 1 << 24, &data, &len, NULL) == 0) {
        ck_assert_ptr_null(memmem(data, len, key + 4, 40));
        free(data);
    }

    struct cp_apikey f;
    uint8_t d[CP_DIGEST_LEN];
    cp_digest(key, strlen(key), d);
    ck_assert_int_eq(cp_store_key_find(s, d, &f, &err), 0);
    ck_assert_str_eq(f.id, k.id);
    ck_assert_str_eq(f.policies, "default,pypi");
    ck_assert_uint_eq(f.role, CP_ROLE_OPERATOR);
    ck_assert_uint_eq(f.revoked_ns, 0);
    d[0] ^= 1;
    ck_assert_int_eq(cp_store_key_find(s, d, &f, &err), -ENOENT);

    ck_assert_int_eq(cp_store_key_get(s, "ci", &f, &err), 0);
    ck_assert_str_eq(f.id, k.id);
    ck_assert_int_eq(cp_store_key_get(s, k.id, &f, &err), 0);
    ck_assert_int_eq(cp_store_key_get(s, "nope", &f, &err), -ENOENT);

    /* Two keys named alike: the name is ambiguous, the ids are not. */
    struct cp_apikey k3 = {0};
    cp_keyid_new(k3.id);
    snprintf(k3.name, sizeof k3.name, "ci");
    snprintf(k3.policies, sizeof k3.policies, "*");
    k3.created_ns = 6;
    /* A key without a role is refused (0 is no role, never admin by accident). */
    ck_assert_int_eq(cp_store_key_insert(s, &k3, &err), -EINVAL);
    k3.role = CP_ROLE_AUDITOR;
    cp_digest("other", 5, k3.digest);
    ck_assert_int_eq(cp_store_key_insert(s, &k3, &err), 0);
    ck_assert_int_eq(cp_store_key_get(s, "ci", &f, &err), -EEXIST);
    ck_assert_int_eq(cp_store_key_get(s, k3.id, &f, &err), 0);

    ck_assert(!cp_store_changed(s));
    /* A second connection (the CLI) revokes: the first one notices. */
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(dbpath, &s2, &err), 0);
    ck_assert_int_eq(cp_store_key_revoke(s2, k.id, 77, &err), 0);
    ck_assert_int_eq(cp_store_key_revoke(s2, k.id, 78, &err), -EALREADY);
    cp_store_close(s2);
    ck_assert(cp_store_changed(s));
    ck_assert(!cp_store_changed(s));
    cp_digest(key, strlen(key), d);
    ck_assert_int_eq(cp_store_key_find(s, d, &f, &err), 0);
    ck_assert_uint_eq(f.revoked_ns, 77);

    ck_assert_int_eq(cp_store_key_touch(s, k3.id, 99), 0);
    struct cp_apikey *all;
    ck_assert_int_eq(cp_store_key_list(s, &all, &n, &err), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(all[0].id, k.id);
    ck_assert_uint_eq(all[1].last_used_ns, 99);
    free(all);
    ck_assert_int_eq(cp_store_key_count_valid(s, &n, &err), 0);
    ck_assert_uint_eq(n, 1);

    char buf[64];
    ck_assert_int_eq(cp_store_meta_get(s, "x", buf, sizeof buf), -ENOENT);
    ck_assert_int_eq(cp_store_meta_set(s, "x", "y", &err), 0);
    ck_assert_int_eq(cp_store_meta_get(s, "x", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "y");
    cp_store_close(s);
}
END_TEST

/* A database of schema 5 (before roles): its keys could do everything and stay admin keys;
 * the database is at the current schema after, opens again, and takes keys of each role. */
START_TEST(store_keys_role_migration)
{
    char key[CP_APIKEY_LEN + 1];
    cp_apikey_new(key);
    uint8_t d[CP_DIGEST_LEN];
    cp_digest(key, strlen(key), d);
    char hex[2 * CP_DIGEST_LEN + 1];
    sodium_bin2hex(hex, sizeof hex, d, sizeof d);
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute('CREATE TABLE "
             "api_keys(id TEXT PRIMARY KEY, name TEXT NOT NULL, digest BLOB NOT NULL UNIQUE, "
             "created_ns INTEGER NOT NULL, last_used_ns INTEGER NOT NULL, revoked_ns INTEGER NOT "
             "NULL, policies TEXT NOT NULL)'); c.execute(\\\"INSERT INTO api_keys VALUES("
             "'k_old', 'old', x'%s', 1, 0, 0, 'default')\\\"); c.execute('PRAGMA "
             "user_version=5'); c.commit()\"",
             dbpath, hex);
    ck_assert_int_eq(system(cmd), 0);
    struct cp_store *s;
    struct al_error err = {0};
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct cp_apikey f;
    ck_assert_msg(cp_store_key_find(s, d, &f, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(f.id, "k_old");
    ck_assert_str_eq(f.policies, "default");
    ck_assert_uint_eq(f.role, CP_ROLE_ADMIN);
    struct cp_apikey k = {.role = CP_ROLE_AUDITOR, .created_ns = 2};
    snprintf(k.id, sizeof k.id, "k_new");
    snprintf(k.name, sizeof k.name, "new");
    snprintf(k.policies, sizeof k.policies, "*");
    cp_digest("new", 3, k.digest);
    ck_assert_int_eq(cp_store_key_insert(s, &k, &err), 0);
    cp_store_close(s);
    /* Opened again: nothing is migrated twice, both roles are kept. */
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    struct cp_apikey *all;
    size_t n = 0;
    ck_assert_int_eq(cp_store_key_list(s, &all, &n, &err), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(all[0].role, CP_ROLE_ADMIN);
    ck_assert_uint_eq(all[1].role, CP_ROLE_AUDITOR);
    free(all);
    cp_store_close(s);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); "
             "assert c.execute('PRAGMA user_version').fetchone()[0] == %d; "
             "assert c.execute(\\\"SELECT role FROM api_keys WHERE id = 'k_new'\\\")"
             ".fetchone()[0] == 'auditor'\"",
             dbpath, CP_STORE_SCHEMA_VERSION);
    ck_assert_int_eq(system(cmd), 0);
    /* A role this airlockd does not know reads as none (auth.c refuses such a key). */
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c=sqlite3.connect('%s'); c.execute(\\\"UPDATE "
             "api_keys SET role = 'root' WHERE id = 'k_old'\\\"); c.commit()\"",
             dbpath);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(cp_store_open(dbpath, &s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cp_store_key_find(s, d, &f, &err), 0);
    ck_assert_uint_eq(f.role, 0);
    cp_store_close(s);
}
END_TEST

/* What airlockd sends airlock-egress: the policy file, the E2B fields for the proxy to narrow
 * it with (every combination, never a stand-in policy), and the placeholders the sandbox
 * holds when it is registered again. */
START_TEST(egress_registration_body)
{
    struct cp *cp = calloc(1, sizeof *cp);
    snprintf(cp->cfg.policies_path, sizeof cp->cfg.policies_path, "%s", tmpdir);
    char pf[400];
    snprintf(pf, sizeof pf, "%s/default.yaml", tmpdir);
    FILE *f = fopen(pf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("version: 1\nname: default\nrules: []\n", f);
    fclose(f);
    struct cp_sandbox *sb = calloc(1, sizeof *sb);
    fill_record(&sb->rec, "sbx1", 1);
    json_decref(sb->rec.intercept);
    sb->rec.intercept = NULL;

    /* allow_internet_access false and no other field: the proxy narrows to nothing. */
    json_decref(sb->rec.network);
    sb->rec.network = NULL;
    json_t *b = cp_egress_body(cp, sb);
    ck_assert_str_eq(json_string_value(json_object_get(b, "policy_file")), pf);
    ck_assert_ptr_null(json_object_get(b, "policy"));
    json_t *want = json_pack("{s:b}", "allow_internet_access", 0);
    ck_assert(json_equal(json_object_get(b, "network"), want));
    json_decref(want);
    ck_assert_ptr_null(json_object_get(b, "placeholders"));
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(b, "addresses"), 0)),
                     "10.200.0.6");
    json_decref(b);

    /* allowOut and denyOut together, as E2B names them, in the proxy's names. */
    sb->rec.allow_internet = -1;
    sb->rec.network = json_pack("{s:[s],s:[s,s],s:b}", "allowOut", "*.github.com", "denyOut",
                                "0.0.0.0/0", "evil.example", "allowPublicTraffic", 0);
    b = cp_egress_body(cp, sb);
    want = json_pack("{s:[s],s:[s,s]}", "allow_out", "*.github.com", "deny_out", "0.0.0.0/0",
                     "evil.example");
    ck_assert(json_equal(json_object_get(b, "network"), want));
    json_decref(want);
    json_decref(b);

    /* No E2B fields: no network member (the policy as it is). */
    json_decref(sb->rec.network);
    sb->rec.network = NULL;
    b = cp_egress_body(cp, sb);
    ck_assert_ptr_null(json_object_get(b, "network"));
    json_decref(b);

    /* Registered again: the placeholders it holds go back to the proxy. */
    sb->rec.intercept = json_pack("{s:s,s:{s:s}}", "caCertPem", "-----BEGIN CERTIFICATE-----",
                                  "placeholders", "SERVICE_KEY", "alph_00");
    b = cp_egress_body(cp, sb);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(b, "placeholders"), "SERVICE_KEY")),
        "alph_00");
    ck_assert_ptr_null(json_object_get(b, "caCertPem"));
    json_decref(b);
    cp_sb_record_free(&sb->rec);
    free(sb);
    free(cp);

    /* A CA constrained to nothing (the policy intercepts nothing) is not installed. */
    json_t *ix = json_pack("{s:s,s:[s]}", "caCertPem", "pem", "caNames", "invalid");
    ck_assert(!cp_egress_ca_useful(ix));
    json_object_set_new(ix, "caNames", json_pack("[s,s]", "invalid", "api.github.com"));
    ck_assert(cp_egress_ca_useful(ix));
    json_object_del(ix, "caNames");
    ck_assert(cp_egress_ca_useful(ix)); /* an answer that does not say: installed */
    json_object_del(ix, "caCertPem");
    ck_assert(!cp_egress_ca_useful(ix));
    json_decref(ix);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_state");
    TCase *t = tcase_create("ids");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, ids_shapes);
    tcase_add_test(t, secret_compare);
    tcase_add_test(t, map_basics);
    tcase_add_test(t, record_doc_roundtrip);
    tcase_add_test(t, apikey_policies);
    tcase_add_test(t, proc_start_time);
    tcase_add_test(t, proc_spawn_descriptors);
    tcase_add_test(t, egress_registration_body);
    suite_add_tcase(s, t);
    t = tcase_create("store");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, store_sandboxes);
    tcase_add_test(t, store_bad_rows_are_reported);
    tcase_add_test(t, store_newer_schema_refused);
    tcase_add_test(t, store_template_builds);
    tcase_add_test(t, builds_recover_after_a_stop);
    tcase_add_test(t, store_events);
    tcase_add_test(t, store_survives_kill9);
    tcase_add_test(t, store_keys);
    tcase_add_test(t, store_keys_role_migration);
    tcase_add_test(t, store_checkpoints_off_the_caller);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
