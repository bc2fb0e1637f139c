/* Unit tests: the agent's Connect-RPC services as envd's clients see them (vmm/guest/rpc.c,
 * proc.c, watch.c). The agent's router (agent_on_request) serves on 127.0.0.1 on one loop
 * thread, with the SIGCHLD handling of main.c; the test thread talks to it with the
 * blocking client or a raw socket, as airlockd does over the agent channel.
 *
 * Covered: deadlines as connect-go applies them (Connect-Timeout-Ms on every call; a bad
 * one is invalid_argument; a stream open at its deadline ends with deadline_exceeded
 * "context deadline exceeded"; Start's deadline kills the process without sending its end
 * event; Connect's ends the stream only; WatchDir's ends the watch; a deadline already
 * passed starts nothing); the polled watchers (CreateWatcher, GetWatcherEvents,
 * RemoveWatcher: ids, events taken once, not_found after removal, envd's errors, the bound
 * on buffered events, removal of a watcher nobody polls).
 *
 * Where a test needs the agent not to run for a while (the kernel to queue inotify events
 * for one read; the idle timer to be due before the next request is read), it holds the loop
 * thread inside a callback: libuv runs due timers before it reads sockets, so what follows
 * the release is ordered, not timed. */
#include "al_test.h"
#include "common/http.h"
#include "common/json.h"
#include "common/cleanup.h"
#include "vmm/guest/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

static uv_loop_t L;
static pthread_t g_th;
static uv_async_t g_stop;
static uv_signal_t g_chld;
static uv_async_t g_hold;
static pthread_mutex_t g_hm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_hc = PTHREAD_COND_INITIALIZER;
static bool g_held, g_release;
static struct agent_limits g_lim; /* what setup() gives the agent */
static struct agent A;
static struct al_http_server *g_srv;
static char g_target[64];
static int g_port;
static char g_home[96];

/* ---- the loop thread ---------------------------------------------------------------------- */

static void closed_cb(void *arg)
{
    (void)arg;
}

static void on_stop(uv_async_t *h)
{
    al_http_server_close(g_srv, closed_cb, NULL);
    uv_close((uv_handle_t *)&g_chld, NULL);
    uv_close((uv_handle_t *)&g_hold, NULL);
    uv_close((uv_handle_t *)h, NULL);
}

static void on_sigchld(uv_signal_t *h, int sig)
{
    (void)h;
    (void)sig;
    agent_reap_children(&A);
}

static void on_hold(uv_async_t *h)
{
    (void)h;
    pthread_mutex_lock(&g_hm);
    g_held = true;
    pthread_cond_broadcast(&g_hc);
    while (!g_release)
        pthread_cond_wait(&g_hc, &g_hm);
    g_held = g_release = false;
    pthread_mutex_unlock(&g_hm);
}

/* The loop thread stops (inside a callback) until loop_release(). */
static void loop_hold(void)
{
    uv_async_send(&g_hold);
    pthread_mutex_lock(&g_hm);
    while (!g_held)
        pthread_cond_wait(&g_hc, &g_hm);
    pthread_mutex_unlock(&g_hm);
}

static void loop_release(void)
{
    pthread_mutex_lock(&g_hm);
    g_release = true;
    pthread_cond_broadcast(&g_hc);
    pthread_mutex_unlock(&g_hm);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&L, UV_RUN_DEFAULT);
    return NULL;
}

static void setup_with(const struct agent_limits *lim)
{
    al_test_tmpdir(g_home, sizeof g_home, "agent-rpc");
    ck_assert_int_eq(uv_loop_init(&L), 0);
    memset(&A, 0, sizeof A);
    A.lim = *lim;
    A.home_override = strdup(g_home);
    A.default_user = NULL;
    struct al_error e = {0};
    ck_assert_msg(agent_init(&A, &L, &e) == 0, "%s", e.msg);
    /* Act as ourselves whoever runs the test (root would otherwise pick "user"). */
    A.can_switch_user = false;
    struct al_http_server_opts so = {.on_request = agent_on_request, .ctx = &A};
    ck_assert_int_eq(al_http_server_new(&L, &so, &g_srv), 0);
    ck_assert_int_eq(al_http_server_listen_tcp(g_srv, "127.0.0.1", 0, NULL), 0);
    g_port = al_http_server_port(g_srv);
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", g_port);
    uv_signal_init(&L, &g_chld);
    uv_signal_start(&g_chld, on_sigchld, SIGCHLD);
    uv_async_init(&L, &g_stop, on_stop);
    uv_async_init(&L, &g_hold, on_hold);
    ck_assert_int_eq(pthread_create(&g_th, NULL, loop_main, NULL), 0);
}

static void setup(void)
{
    agent_limits_default(&g_lim);
    setup_with(&g_lim);
}

static void teardown(void)
{
    uv_async_send(&g_stop);
    pthread_join(g_th, NULL);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    ck_assert_int_eq(al_test_rmtree(g_home), 0);
}

/* ---- calls --------------------------------------------------------------------------------- */

struct resp {
    int status;
    json_t *body;  /* unary: the JSON body */
    json_t *msgs;  /* streams: the messages */
    json_t *end;   /* streams: the end-stream message */
    char raw[512]; /* the start of the body, for messages */
};

static int collect(void *ctx, uint8_t flags, const uint8_t *data, size_t len)
{
    struct resp *r = ctx;
    json_t *j = json_loadb((const char *)data, len, 0, NULL);
    ck_assert_ptr_nonnull(j);
    if (flags & AGENT_CONNECT_FLAG_END_STREAM) {
        ck_assert_ptr_null(r->end);
        r->end = j;
    } else {
        ck_assert_ptr_null(r->end); /* nothing after the end */
        json_array_append_new(r->msgs, j);
    }
    return 0;
}

static void call(struct resp *r, const char *method, bool stream, const char *timeout,
                 const char *json)
{
    char path[128];
    snprintf(path, sizeof path, "/%s", method);
    struct al_http_header h[4];
    size_t n = 0;
    h[n++] = (struct al_http_header){"Content-Type",
                                     stream ? "application/connect+json" : "application/json"};
    h[n++] = (struct al_http_header){"Connect-Protocol-Version", "1"};
    if (timeout)
        h[n++] = (struct al_http_header){"Connect-Timeout-Ms", timeout};
    struct al_buf body;
    al_buf_init(&body, 0);
    if (stream)
        ck_assert_int_eq(agent_connect_frame_append(&body, 0, json, strlen(json)), 0);
    else
        ck_assert_int_eq(al_buf_append(&body, json, strlen(json)), 0);
    struct al_http_resp raw;
    struct al_error e = {0};
    memset(r, 0, sizeof *r);
    struct al_http_call_opts o = {.target = g_target,
                                  .method = "POST",
                                  .path = path,
                                  .headers = h,
                                  .n_headers = n,
                                  .body = body.data,
                                  .body_len = body.len,
                                  .timeout_ms = 20000,
                                  .max_body = 16u << 20};
    int rc = al_http_call(&o, &raw, &e);
    al_buf_free(&body);
    ck_assert_msg(rc == 0, "%s: %s", method, e.msg);
    r->status = raw.status;
    snprintf(r->raw, sizeof r->raw, "%.*s", (int)AL_MIN(raw.body.len, sizeof r->raw - 1),
             raw.body.data ? raw.body.data : "");
    if (stream) {
        r->msgs = json_array();
        struct agent_connect_decoder d;
        agent_connect_decoder_init(&d, 1u << 20);
        ck_assert_int_eq(agent_connect_decoder_feed(&d, raw.body.data, raw.body.len, collect, r),
                         0);
        ck_assert(agent_connect_decoder_idle(&d));
        agent_connect_decoder_free(&d);
    } else if (raw.body.len) {
        r->body = json_loadb(raw.body.data, raw.body.len, 0, NULL);
    }
    al_http_resp_free(&raw);
}

static void resp_free(struct resp *r)
{
    json_decref(r->body);
    json_decref(r->msgs);
    json_decref(r->end);
}

static const char *jpath_str(const json_t *o, const char *a, const char *b)
{
    json_t *x = json_object_get(o, a);
    return json_string_value(b ? json_object_get(x, b) : x);
}

/* The end-stream's error code ("" for none). */
static const char *end_code(const struct resp *r)
{
    ck_assert_msg(r->end, "no end-stream message: %s", r->raw);
    const char *c = jpath_str(r->end, "error", "code");
    return c ? c : "";
}

static bool msgs_have_event(const struct resp *r, const char *kind)
{
    size_t i;
    json_t *m;
    json_array_foreach(r->msgs, i,
                       m) if (json_object_get(json_object_get(m, "event"), kind)) return true;
    return false;
}

static bool proc_listed(pid_t pid)
{
    struct resp r;
    call(&r, "process.Process/List", false, NULL, "{}");
    ck_assert_int_eq(r.status, 200);
    bool found = false;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(r.body, "processes"), i,
                       p) if (json_integer_value(json_object_get(p, "pid")) == pid) found = true;
    resp_free(&r);
    return found;
}

static void wait_unlisted(pid_t pid)
{
    for (int i = 0; i < 1000 && proc_listed(pid); i++)
        usleep(10000);
    ck_assert_msg(!proc_listed(pid), "process %d is still running", (int)pid);
}

/* Starts a command on a raw connection and returns its pid once the start event came; the
 * connection is closed (the process goes on, as with envd). */
static pid_t start_detached(const char *cmd)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    char msg[512];
    int ml = snprintf(msg, sizeof msg,
                      "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"%s\"]}}", cmd);
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /process.Process/Start HTTP/1.1\r\nHost: a\r\n"
                     "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
                     "%c%c%c%c%c%s",
                     ml + 5, 0, 0, 0, 0, (char)ml, msg);
    /* the envelope header holds NULs: send the exact byte count */
    ck_assert_int_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char buf[4096];
    size_t len = 0;
    buf[0] = '\0';
    char *at = NULL;
    for (int i = 0; i < 200 && !(at = memmem(buf, len, "\"pid\":", 6)); i++) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        ck_assert_int_gt(k, 0);
        len += (size_t)k;
    }
    ck_assert_ptr_nonnull(at);
    int pid = atoi(at + 6);
    ck_assert_int_gt(pid, 0);
    close(fd);
    return (pid_t)pid;
}

/* ---- deadlines ----------------------------------------------------------------------------- */

START_TEST(start_deadline_ends_the_stream_and_kills_the_process)
{
    setup();
    struct resp r;
    call(&r, "process.Process/Start", true, "400",
         "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo hi; exec sleep 60\"]},"
         "\"stdin\":false}");
    ck_assert_int_eq(r.status, 200);
    ck_assert(msgs_have_event(&r, "start"));
    /* envd: the stream's context ends first; the kill's end event is never sent. */
    ck_assert_msg(!msgs_have_event(&r, "end"), "%s", r.raw);
    ck_assert_str_eq(end_code(&r), "deadline_exceeded");
    ck_assert_str_eq(jpath_str(r.end, "error", "message"), "context deadline exceeded");
    pid_t pid = (pid_t)json_integer_value(json_object_get(
        json_object_get(json_object_get(json_array_get(r.msgs, 0), "event"), "start"), "pid"));
    ck_assert_int_gt(pid, 0);
    resp_free(&r);
    wait_unlisted(pid);
    teardown();
}
END_TEST

START_TEST(connect_deadline_ends_the_stream_only)
{
    setup();
    pid_t pid = start_detached("exec sleep 60");
    struct resp r;
    char sel[64];
    snprintf(sel, sizeof sel, "{\"process\":{\"pid\":%d}}", (int)pid);
    call(&r, "process.Process/Connect", true, "300", sel);
    ck_assert_int_eq(r.status, 200);
    ck_assert(msgs_have_event(&r, "start"));
    ck_assert(!msgs_have_event(&r, "end"));
    ck_assert_str_eq(end_code(&r), "deadline_exceeded");
    resp_free(&r);
    ck_assert(proc_listed(pid)); /* the process goes on */
    char sig[96];
    snprintf(sig, sizeof sig, "{\"process\":{\"pid\":%d},\"signal\":\"SIGNAL_SIGKILL\"}", (int)pid);
    call(&r, "process.Process/SendSignal", false, "60000", sig);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    wait_unlisted(pid);
    teardown();
}
END_TEST

START_TEST(watch_dir_deadline_ends_the_watch)
{
    setup();
    struct resp r;
    char m[256];
    snprintf(m, sizeof m, "{\"path\":\"%s\"}", g_home);
    call(&r, "filesystem.Filesystem/WatchDir", true, "300", m);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(json_object_get(json_array_get(r.msgs, 0), "start"));
    ck_assert_str_eq(end_code(&r), "deadline_exceeded");
    ck_assert_str_eq(jpath_str(r.end, "error", "message"), "context deadline exceeded");
    resp_free(&r);
    teardown(); /* the loop ends only if the watch was closed */
}
END_TEST

START_TEST(a_deadline_that_has_passed_starts_nothing)
{
    setup();
    struct resp r;
    char file[300];
    snprintf(file, sizeof file, "%s/ran", g_home);
    char m[512];
    snprintf(m, sizeof m, "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"touch %s\"]}}",
             file);
    call(&r, "process.Process/Start", true, "0", m);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(r.msgs), 0);
    ck_assert_str_eq(end_code(&r), "deadline_exceeded");
    resp_free(&r);
    call(&r, "process.Process/Start", true, "-5", m);
    ck_assert_str_eq(end_code(&r), "deadline_exceeded");
    resp_free(&r);
    struct stat st;
    ck_assert_int_eq(stat(file, &st), -1);
    teardown();
}
END_TEST

START_TEST(bad_timeouts_are_invalid_argument_on_every_call)
{
    setup();
    struct resp r;
    const char *bad[] = {"abc", "12345678901", "1.5", "+", "10ms", "- 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        call(&r, "process.Process/List", false, bad[i], "{}");
        ck_assert_msg(r.status == 400, "'%s': %d %s", bad[i], r.status, r.raw);
        ck_assert_str_eq(jpath_str(r.body, "code", NULL), "invalid_argument");
        ck_assert_ptr_nonnull(strstr(jpath_str(r.body, "message", NULL), "parse timeout"));
        resp_free(&r);
        call(&r, "process.Process/Start", true, bad[i], "{\"process\":{\"cmd\":\"/bin/true\"}}");
        ck_assert_int_eq(r.status, 200);
        ck_assert_uint_eq(json_array_size(r.msgs), 0);
        ck_assert_str_eq(end_code(&r), "invalid_argument");
        resp_free(&r);
    }
    /* What the SDKs send: fine on unary calls too (the Python SDK sends it on all). */
    call(&r, "process.Process/List", false, "60000", "{}");
    ck_assert_msg(r.status == 200, "%s", r.raw);
    resp_free(&r);
    call(&r, "process.Process/List", false, "+9999999999", "{}");
    ck_assert_int_eq(r.status, 400); /* 11 characters */
    resp_free(&r);
    call(&r, "process.Process/List", false, "9999999999", "{}");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    call(&r, "process.Process/List", false, "", "{}"); /* empty = none, as in Go */
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    teardown();
}
END_TEST

/* ---- polled watchers ----------------------------------------------------------------------- */

static void touch(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_home, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
}

static char *create_watcher(const char *extra)
{
    char m[512];
    snprintf(m, sizeof m, "{\"path\":\"%s\"%s}", g_home, extra);
    struct resp r;
    call(&r, "filesystem.Filesystem/CreateWatcher", false, "60000", m);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    const char *id = jpath_str(r.body, "watcherId", NULL);
    ck_assert_ptr_nonnull(id);
    char *out = strdup(id);
    resp_free(&r);
    return out;
}

static void watcher_call(struct resp *r, const char *method, const char *id)
{
    char m[128];
    snprintf(m, sizeof m, "{\"watcherId\":\"%s\"}", id);
    char path[64];
    snprintf(path, sizeof path, "filesystem.Filesystem/%s", method);
    call(r, path, false, "60000", m);
}

/* Polls until an event of type for name arrived (all events seen go into seen). */
static json_t *event_of(json_t *seen, const char *name, const char *type)
{
    size_t i;
    json_t *ev;
    json_array_foreach(seen, i, ev) if (strcmp(jpath_str(ev, "name", NULL), name) == 0 &&
                                        strcmp(jpath_str(ev, "type", NULL), type) == 0) return ev;
    return NULL;
}

static json_t *poll_for(const char *id, json_t *seen, const char *name, const char *type)
{
    for (int i = 0; i < 1000 && !event_of(seen, name, type); i++) {
        struct resp r;
        watcher_call(&r, "GetWatcherEvents", id);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
        json_array_extend(seen, json_object_get(r.body, "events")
                                    ? json_object_get(r.body, "events")
                                    : json_array());
        resp_free(&r);
        if (!event_of(seen, name, type))
            usleep(10000);
    }
    json_t *ev = event_of(seen, name, type);
    ck_assert_msg(ev, "no %s event for %s", type, name);
    return ev;
}

START_TEST(polled_watchers_as_envd_serves_them)
{
    setup();
    char *id = create_watcher("");
    ck_assert_uint_eq(strlen(id), 21);
    ck_assert_int_eq(id[0], 'w');
    for (const char *c = id + 1; *c; c++)
        ck_assert_msg((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'), "%s", id);
    char *other = create_watcher(",\"recursive\":true,\"include_entry\":true");
    ck_assert_str_ne(id, other);
    touch("a.txt");
    json_t *seen = json_array();
    poll_for(id, seen, "a.txt", "EVENT_TYPE_CREATE");
    poll_for(id, seen, "a.txt", "EVENT_TYPE_WRITE");
    ck_assert_ptr_null(json_object_get(event_of(seen, "a.txt", "EVENT_TYPE_CREATE"), "entry"));
    /* Taken once: nothing new, and envd's empty answer has no "events". */
    struct resp r;
    watcher_call(&r, "GetWatcherEvents", id);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(json_object_get(r.body, "events"));
    resp_free(&r);
    /* The recursive one with entries sees below its root. */
    char sub[512];
    snprintf(sub, sizeof sub, "%s/sub", g_home);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    json_t *seen2 = json_array();
    poll_for(other, seen2, "sub", "EVENT_TYPE_CREATE");
    touch("sub/b.txt");
    json_t *ev = poll_for(other, seen2, "sub/b.txt", "EVENT_TYPE_CREATE");
    ck_assert_str_eq(jpath_str(json_object_get(ev, "entry"), "name", NULL), "b.txt");
    ck_assert(event_of(seen2, "a.txt", "EVENT_TYPE_CREATE"));
    /* Removed: not found from then on. */
    watcher_call(&r, "RemoveWatcher", id);
    ck_assert_msg(r.status == 200, "%s", r.raw);
    resp_free(&r);
    watcher_call(&r, "GetWatcherEvents", id);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(jpath_str(r.body, "code", NULL), "not_found");
    ck_assert_ptr_nonnull(strstr(jpath_str(r.body, "message", NULL), id));
    resp_free(&r);
    watcher_call(&r, "RemoveWatcher", id);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    watcher_call(&r, "RemoveWatcher", other);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* envd's answers for a bad path. */
    call(&r, "filesystem.Filesystem/CreateWatcher", false, NULL,
         "{\"path\":\"/nonexistent/al-test\"}");
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(jpath_str(r.body, "code", NULL), "not_found");
    resp_free(&r);
    char m[600];
    snprintf(m, sizeof m, "{\"path\":\"%s/a.txt\"}", g_home);
    call(&r, "filesystem.Filesystem/CreateWatcher", false, NULL, m);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(jpath_str(r.body, "code", NULL), "invalid_argument");
    resp_free(&r);
    json_decref(seen);
    json_decref(seen2);
    free(id);
    free(other);
    teardown(); /* the loop ends only if both watchers were closed */
}
END_TEST

/* A directory created with its contents before the agent reads the first event: the watch on it
 * comes too late for the events inside it, which the agent then reports from a scan. */
START_TEST(a_recursive_watcher_sees_what_was_created_in_a_new_directory_at_once)
{
    setup();
    char *id = create_watcher(",\"recursive\":true,\"include_entry\":true");
    char p[600];
    loop_hold();
    snprintf(p, sizeof p, "%s/new", g_home);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    touch("new/c.txt");
    snprintf(p, sizeof p, "%s/new/deep", g_home);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    touch("new/deep/d.txt");
    loop_release();
    json_t *seen = json_array();
    poll_for(id, seen, "new", "EVENT_TYPE_CREATE");
    json_t *ev = poll_for(id, seen, "new/c.txt", "EVENT_TYPE_CREATE");
    ck_assert_str_eq(jpath_str(json_object_get(ev, "entry"), "type", NULL), "FILE_TYPE_FILE");
    ev = poll_for(id, seen, "new/deep", "EVENT_TYPE_CREATE");
    ck_assert_str_eq(jpath_str(json_object_get(ev, "entry"), "type", NULL), "FILE_TYPE_DIRECTORY");
    poll_for(id, seen, "new/deep/d.txt", "EVENT_TYPE_CREATE");
    /* ... and what comes later below it, from the watches the scan added. */
    touch("new/deep/e.txt");
    poll_for(id, seen, "new/deep/e.txt", "EVENT_TYPE_CREATE");
    struct resp r;
    watcher_call(&r, "RemoveWatcher", id);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    json_decref(seen);
    free(id);
    teardown();
}
END_TEST

START_TEST(a_watcher_keeps_a_bounded_number_of_events)
{
    agent_limits_default(&g_lim);
    g_lim.max_watcher_events = 5;
    setup_with(&g_lim);
    char *id = create_watcher("");
    /* Twenty files while the agent does not run: it reads their events at once. */
    loop_hold();
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "f%d", i);
        touch(name);
    }
    loop_release();
    struct resp r;
    for (int k = 0; k < 2; k++) { /* the error stays, as envd's FileWatcher.Error does */
        watcher_call(&r, "GetWatcherEvents", id);
        ck_assert_msg(r.status == 500, "%d %s", r.status, r.raw);
        ck_assert_str_eq(jpath_str(r.body, "code", NULL), "internal");
        ck_assert_ptr_nonnull(strstr(jpath_str(r.body, "message", NULL), "more than 5 events"));
        resp_free(&r);
    }
    watcher_call(&r, "RemoveWatcher", id);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    free(id);
    teardown();
}
END_TEST

START_TEST(a_watcher_nobody_polls_is_removed)
{
    agent_limits_default(&g_lim);
    g_lim.watcher_idle_ms = 200;
    setup_with(&g_lim);
    char *id = create_watcher("");
    struct resp r;
    /* The loop stands still for longer than the idle time: once it runs again, the idle
     * timers are due before the next request is read. */
    loop_hold();
    usleep(300 * 1000);
    loop_release();
    watcher_call(&r, "GetWatcherEvents", id);
    ck_assert_msg(r.status == 404, "%d %s", r.status, r.raw);
    ck_assert_ptr_nonnull(strstr(jpath_str(r.body, "message", NULL), "without GetWatcherEvents"));
    resp_free(&r);
    free(id);
    teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_rpc");
    TCase *t = tcase_create("deadlines");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, start_deadline_ends_the_stream_and_kills_the_process);
    tcase_add_test(t, connect_deadline_ends_the_stream_only);
    tcase_add_test(t, watch_dir_deadline_ends_the_watch);
    tcase_add_test(t, a_deadline_that_has_passed_starts_nothing);
    tcase_add_test(t, bad_timeouts_are_invalid_argument_on_every_call);
    suite_add_tcase(s, t);
    TCase *w = tcase_create("watchers");
    tcase_set_timeout(w, 120);
    tcase_add_test(w, polled_watchers_as_envd_serves_them);
    tcase_add_test(w, a_recursive_watcher_sees_what_was_created_in_a_new_directory_at_once);
    tcase_add_test(w, a_watcher_keeps_a_bounded_number_of_events);
    tcase_add_test(w, a_watcher_nobody_polls_is_removed);
    suite_add_tcase(s, w);
    return s;
}

AL_SUITE_MAIN(suite)
