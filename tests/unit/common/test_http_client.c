/* Unit tests: common/http clients (the asynchronous client against the server on the same
 * loop, a scripted raw server for the odd cases, and the blocking client). */
#include "test_http_fixture.h"

/* ---- a loop with a server on it ----------------------------------------------------- */
static uv_loop_t L;
static struct al_http_server *S;
static int S_port;
static char S_dir[64], S_sock[128], S_target_unix[160], S_target_tcp[64];

static void loop_setup(const struct al_http_limits *lim)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    struct al_http_server_opts o = {.on_request = t_handler};
    if (lim)
        o.limits = *lim;
    ck_assert_int_eq(al_http_server_new(&L, &o, &S), 0);
    struct al_error err = {0};
    ck_assert_int_eq(al_http_server_listen_tcp(S, "127.0.0.1", 0, &err), 0);
    al_test_tmpdir(S_dir, sizeof S_dir, "httpc");
    snprintf(S_sock, sizeof S_sock, "%s/s.sock", S_dir);
    ck_assert_int_eq(al_http_server_listen_unix(S, S_sock, 0600, &err), 0);
    S_port = al_http_server_port(S);
    snprintf(S_target_unix, sizeof S_target_unix, "unix:%s", S_sock);
    snprintf(S_target_tcp, sizeof S_target_tcp, "127.0.0.1:%d", S_port);
}

static bool S_closed;

static void t_done_flag_fn(void *arg)
{
    *(bool *)arg = true;
}

static void loop_server_closed(void *arg)
{
    (void)arg;
    S_closed = true;
}

static void loop_teardown(struct al_http_pool *pool)
{
    if (pool)
        al_http_pool_close(pool);
    if (S)
        al_http_server_close(S, loop_server_closed, NULL);
    uv_run(&L, UV_RUN_DEFAULT);
    ck_assert(!S || S_closed);
    ck_assert_int_eq(uv_loop_close(&L), 0);
    ck_assert_int_eq(al_test_rmtree(S_dir), 0);
    ck_assert_int_eq(atomic_load(&http__live_creqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_cconns), 0);
    ck_assert_int_eq(atomic_load(&http__live_reqs), 0);
    ck_assert_int_eq(atomic_load(&http__live_conns), 0);
}

/* Runs the loop until *flag or ms pass. */
static void run_until(bool *flag, int ms)
{
    uint64_t end = t_now_ms() + (uint64_t)ms;
    while (!*flag && t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(100);
    ck_assert_msg(*flag, "timed out waiting");
}

static void run_for(int ms)
{
    uint64_t end = t_now_ms() + (uint64_t)ms;
    while (t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(200);
}

/* ---- a request recorder ------------------------------------------------------------ */
struct rec {
    int status;
    int err;
    bool done;
    char body[256];
    size_t total;
    int pieces;
    int pause_every; /* pause after every piece, resume from a timer */
    int paused;
    uv_timer_t resume;
    struct al_http_creq *c;
    char errmsg[256];
    char content_length[32];
    char first[64]; /* body seen when the first piece arrived */
};

static int rec_on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    (void)c;
    struct rec *r = arg;
    r->status = status;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "content-length") == 0)
            snprintf(r->content_length, sizeof r->content_length, "%s", h[i].value);
    return 0;
}

static void rec_resume(uv_timer_t *t)
{
    struct rec *r = t->data;
    if (r->c)
        al_http_creq_resume(r->c);
}

static int rec_on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct rec *r = arg;
    if (r->total + len < sizeof r->body) {
        memcpy(r->body + r->total, data, len);
        r->body[r->total + len] = '\0';
    }
    r->total += len;
    r->pieces++;
    if (r->pieces == 1)
        snprintf(r->first, sizeof r->first, "%.*s", (int)AL_MIN(len, 63), data);
    if (r->pause_every) {
        r->paused++;
        uv_timer_start(&r->resume, rec_resume, 1, 0);
        (void)c;
        return 1;
    }
    return 0;
}

static void rec_on_done(struct al_http_creq *c, int err, void *arg)
{
    struct rec *r = arg;
    r->err = err;
    r->done = true;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", al_http_creq_strerror(c));
    r->c = NULL;
}

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    uv_timer_init(&L, &r->resume);
    r->resume.data = r;
}

static void rec_closed(uv_handle_t *h)
{
    *(bool *)h->data = true;
}

static void rec_fini(struct rec *r)
{
    bool closed = false;
    r->resume.data = &closed;
    uv_close((uv_handle_t *)&r->resume, rec_closed);
    run_until(&closed, 1000);
}

static struct al_http_creq_opts rec_opts(struct rec *r, const char *target, const char *method,
                                         const char *path)
{
    struct al_http_creq_opts o = {
        .target = target,
        .method = method,
        .path = path,
        .on_response = rec_on_response,
        .on_data = rec_on_data,
        .on_done = rec_on_done,
        .arg = r,
    };
    return o;
}

static void do_request(struct al_http_creq_opts *o, struct rec *r)
{
    ck_assert_int_eq(al_http_creq_start(&L, o, &r->c), 0);
    run_until(&r->done, 10000);
}

/* ---- async client ------------------------------------------------------------------ */
START_TEST(get_over_tcp_unix_and_url_targets)
{
    loop_setup(NULL);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ignored", S_port);
    const char *targets[] = {S_target_tcp, S_target_unix, url};
    for (int i = 0; i < 3; i++) {
        struct rec r;
        rec_init(&r);
        struct al_http_creq_opts o = rec_opts(&r, targets[i], "GET", "/hello");
        do_request(&o, &r);
        ck_assert_msg(r.err == 0, "%s: %s", targets[i], r.errmsg);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "hello");
        ck_assert_str_eq(r.content_length, "5");
        rec_fini(&r);
    }
    loop_teardown(NULL);
}
END_TEST

START_TEST(post_whole_body_and_json_error_reply)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_unix, "POST", "/echo");
    o.body = "some body";
    o.body_len = 9;
    do_request(&o, &r);
    ck_assert_int_eq(r.err, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "some body");
    rec_fini(&r);
    rec_init(&r);
    o = rec_opts(&r, S_target_unix, "GET", "/error");
    do_request(&o, &r);
    ck_assert_int_eq(r.status, 409);
    ck_assert_str_eq(r.body, "{\"code\":409,\"message\":\"conflict on \\\"x\\\"\"}");
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(streamed_response_arrives_in_pieces)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/chunks?n=5&delay=20");
    do_request(&o, &r);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(r.body, "chunk-0;chunk-1;chunk-2;chunk-3;chunk-4;");
    ck_assert_str_eq(r.first, "chunk-0;"); /* the first piece came alone */
    ck_assert_int_ge(r.pieces, 5);
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

/* Streams an upload in pieces paced by the client's own flow control, to the streaming
 * echo: both directions stream at once. */
struct upload {
    struct al_http_creq *c;
    size_t left;
    char piece[65536];
    int drains;
};

static void upload_pump(struct al_http_creq *c, void *arg);

static void upload_pump_rec(struct al_http_creq *c, void *arg)
{
    (void)arg;
    upload_pump(c, NULL);
}

static struct upload U;

static void upload_pump(struct al_http_creq *c, void *arg)
{
    (void)arg;
    while (U.left) {
        if (al_http_creq_queued(c) > 256 * 1024) {
            U.drains++;
            al_http_creq_on_drain(c, 64 * 1024, upload_pump_rec);
            return;
        }
        size_t n = AL_MIN(U.left, sizeof U.piece);
        ck_assert_int_eq(al_http_creq_write(c, U.piece, n), 0);
        U.left -= n;
    }
    ck_assert_int_eq(al_http_creq_end(c), 0);
}

START_TEST(streamed_upload_both_ways_with_flow_control)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_unix, "POST", "/stream");
    o.stream_body = true;
    memset(U.piece, 'u', sizeof U.piece);
    U.left = 8 * 1024 * 1024;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    U.c = r.c;
    upload_pump(r.c, NULL);
    run_until(&r.done, 30000);
    ck_assert_msg(r.err == 0, "%s", r.errmsg);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.total, 8 * 1024 * 1024);
    ck_assert_int_gt(U.drains, 0);
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(slow_reader_pauses_and_resumes)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    r.pause_every = 1;
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/bulk?kib=32768");
    /* 32 MiB in pieces, each resumed by a timer: hundreds of loop turns, which a loaded
     * machine and ASan stretch well past do_request's bound; this one only guards a hang. */
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    run_until(&r.done, 120000);
    ck_assert_msg(r.err == 0, "%s", r.errmsg);
    ck_assert_uint_eq(r.total, 32768 * 1024);
    ck_assert_int_gt(r.paused, 10);
    ck_assert_int_gt(atomic_load(&t_drains), 0); /* the server had to wait for us */
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

static void cancel_cb(uv_timer_t *t)
{
    struct rec *r = t->data;
    if (r->c)
        al_http_creq_cancel(r->c);
}

static int resume_inside(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct rec *r = arg;
    r->total += len;
    r->pieces++;
    (void)data;
    al_http_creq_resume(c); /* cancels the pause asked for below */
    return 1;
}

START_TEST(resume_from_inside_on_data_cancels_the_pause)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/chunks?n=5&delay=5");
    o.on_data = resume_inside;
    do_request(&o, &r); /* nothing else resumes it: it must complete on its own */
    ck_assert_int_eq(r.err, 0);
    ck_assert_uint_eq(r.total, strlen("chunk-0;chunk-1;chunk-2;chunk-3;chunk-4;"));
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(cancel_reports_ecanceled_and_server_sees_close)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/slow?ms=10000");
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    uv_timer_start(&r.resume, cancel_cb, 50, 0);
    run_until(&r.done, 5000);
    ck_assert_int_eq(r.err, -ECANCELED);
    ck_assert_str_eq(r.errmsg, "canceled");
    uint64_t end = t_now_ms() + 3000;
    while (atomic_load(&t_on_close) == 0 && t_now_ms() < end)
        uv_run(&L, UV_RUN_NOWAIT), usleep(500);
    ck_assert_int_eq(atomic_load(&t_on_close), 1);
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

static int cancel_in_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct rec *r = arg;
    r->pieces++;
    (void)data;
    (void)len;
    al_http_creq_cancel(c); /* from inside a callback: finished when it returns */
    return 0;
}

START_TEST(cancel_from_inside_on_data)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/chunks?n=50&delay=1");
    o.on_data = cancel_in_data;
    do_request(&o, &r);
    ck_assert_int_eq(r.err, -ECANCELED);
    ck_assert_int_eq(r.pieces, 1);
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(timeout_waiting_for_headers)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_unix, "GET", "/slow?ms=5000");
    o.timeout_ms = 100;
    uint64_t start = t_now_ms();
    do_request(&o, &r);
    ck_assert_int_eq(r.err, -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "no response headers"));
    ck_assert_uint_lt(t_now_ms() - start, 2000);
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(connect_failure_says_what_and_where)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    char target[200];
    snprintf(target, sizeof target, "unix:%s/missing.sock", S_dir);
    struct al_http_creq_opts o = rec_opts(&r, target, "GET", "/");
    do_request(&o, &r);
    ck_assert_int_eq(r.err, UV_ENOENT);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "connect unix:"));
    ck_assert_ptr_nonnull(strstr(r.errmsg, "missing.sock"));
    rec_fini(&r);
    /* bad options are refused at once */
    struct al_http_creq *c;
    o = rec_opts(&r, S_target_tcp, "GE T", "/");
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    o = rec_opts(&r, S_target_tcp, "GET", "/a b");
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    o = rec_opts(&r, "127.0.0.1", "GET", "/");
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    struct al_http_header bad[] = {{"X-A", "a\r\nX-Injected: 1"}};
    o = rec_opts(&r, S_target_tcp, "GET", "/");
    o.headers = bad;
    o.n_headers = 1;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    loop_teardown(NULL);
}
END_TEST

START_TEST(pool_reuses_one_connection)
{
    loop_setup(NULL);
    struct al_http_pool *pool;
    ck_assert_int_eq(al_http_pool_new(&L, NULL, &pool), 0);
    char first[256] = "";
    for (int i = 0; i < 5; i++) {
        struct rec r;
        rec_init(&r);
        struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "GET", "/peer");
        o.pool = pool;
        do_request(&o, &r);
        ck_assert_int_eq(r.err, 0);
        ck_assert_int_eq(r.status, 200);
        if (i == 0)
            snprintf(first, sizeof first, "%s", r.body);
        ck_assert_int_eq(al_http_pool_idle(pool), 1);
        ck_assert_int_eq(al_http_server_connections(S), 1);
        rec_fini(&r);
    }
    /* HEAD (no body despite Content-Length) keeps the connection usable too. */
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "HEAD", "/length");
    o.pool = pool;
    do_request(&o, &r);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(r.content_length, "10");
    ck_assert_uint_eq(r.total, 0);
    ck_assert_int_eq(al_http_pool_idle(pool), 1);
    rec_fini(&r);
    ck_assert_int_eq(al_http_server_connections(S), 1);
    loop_teardown(pool);
}
END_TEST

START_TEST(pool_idle_connections_expire)
{
    loop_setup(NULL);
    struct al_http_pool *pool;
    struct al_http_pool_opts po = {.idle_timeout_ms = 100};
    ck_assert_int_eq(al_http_pool_new(&L, &po, &pool), 0);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_unix, "GET", "/hello");
    o.pool = pool;
    do_request(&o, &r);
    ck_assert_int_eq(al_http_pool_idle(pool), 1);
    run_for(400);
    ck_assert_int_eq(al_http_pool_idle(pool), 0);
    rec_fini(&r);
    loop_teardown(pool);
}
END_TEST

START_TEST(pool_drops_connections_the_server_closed)
{
    struct al_http_limits lim = {.idle_timeout_ms = 100};
    loop_setup(&lim);
    struct al_http_pool *pool;
    ck_assert_int_eq(al_http_pool_new(&L, NULL, &pool), 0);
    for (int i = 0; i < 2; i++) {
        struct rec r;
        rec_init(&r);
        struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "POST", "/echo");
        o.pool = pool;
        o.body = "x";
        o.body_len = 1;
        do_request(&o, &r);
        ck_assert_msg(r.err == 0, "%s", r.errmsg);
        ck_assert_str_eq(r.body, "x");
        rec_fini(&r);
        run_for(400); /* the server closes its idle side; the pool notices */
        ck_assert_int_eq(al_http_pool_idle(pool), 0);
    }
    loop_teardown(pool);
}
END_TEST

START_TEST(idle_pool_does_not_keep_the_loop_alive)
{
    loop_setup(NULL);
    struct al_http_pool *pool;
    ck_assert_int_eq(al_http_pool_new(&L, NULL, &pool), 0);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_unix, "GET", "/hello");
    o.pool = pool;
    do_request(&o, &r);
    rec_fini(&r);
    bool closed = false;
    al_http_server_close(S, t_done_flag_fn, &closed);
    S = NULL;
    uv_run(&L, UV_RUN_DEFAULT); /* returns although the pooled connection is open */
    ck_assert(closed);
    loop_teardown(pool);
}
END_TEST

/* ---- scripted raw server ----------------------------------------------------------- */
struct raw {
    pthread_t th;
    int lfd;
    int port;
    const char *const *script; /* per connection: the bytes to send after each request */
    int n_conns;
    atomic_int accepted;
};

static bool raw_read_request(int fd)
{
    char buf[4096];
    size_t len = 0;
    while (len < sizeof buf - 1) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return true;
    }
    return false;
}

/* script entries: "" = read a request and close without answering; otherwise read a
 * request and send the text; NULL ends a connection (close). */
static void *raw_main(void *arg)
{
    struct raw *r = arg;
    const char *const *s = r->script;
    for (int i = 0; i < r->n_conns; i++) {
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0)
            break;
        atomic_fetch_add(&r->accepted, 1);
        for (; *s; s++) {
            if (!raw_read_request(fd))
                break;
            if (!**s)
                break;
            (void)!send(fd, *s, strlen(*s), MSG_NOSIGNAL); /* the client may be gone */
        }
        while (*s)
            s++;
        s++;
        usleep(20000);
        close(fd);
    }
    return NULL;
}

static void raw_start(struct raw *r, const char *const *script, int n_conns)
{
    memset(r, 0, sizeof *r);
    r->script = script;
    r->n_conns = n_conns;
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(r->lfd, (struct sockaddr *)&sin, sizeof sin), 0);
    ck_assert_int_eq(listen(r->lfd, 8), 0);
    socklen_t sl = sizeof sin;
    getsockname(r->lfd, (struct sockaddr *)&sin, &sl);
    r->port = ntohs(sin.sin_port);
    pthread_create(&r->th, NULL, raw_main, r);
}

static void raw_stop(struct raw *r)
{
    shutdown(r->lfd, SHUT_RDWR);
    pthread_join(r->th, NULL);
    close(r->lfd);
}

static void raw_request(struct raw *srv, struct al_http_pool *pool, const char *method,
                        struct rec *r)
{
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", srv->port);
    rec_init(r);
    struct al_http_creq_opts o = rec_opts(r, target, method, "/");
    o.pool = pool;
    do_request(&o, r);
    rec_fini(r);
}

START_TEST(stale_pooled_connection_is_retried_for_idempotent_requests)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    static const char *const script[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", "",   NULL, /* conn 1 */
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo", NULL,       /* conn 2 */
    };
    struct raw srv;
    raw_start(&srv, script, 2);
    struct al_http_pool *pool;
    ck_assert_int_eq(al_http_pool_new(&L, NULL, &pool), 0);
    struct rec r;
    raw_request(&srv, pool, "GET", &r);
    ck_assert_str_eq(r.body, "one");
    raw_request(&srv, pool, "GET", &r); /* the pooled one dies unanswered: retried */
    ck_assert_msg(r.err == 0, "%s", r.errmsg);
    ck_assert_str_eq(r.body, "two");
    ck_assert_int_eq(atomic_load(&srv.accepted), 2);
    raw_stop(&srv);
    S = NULL;
    loop_teardown(pool);
}
END_TEST

START_TEST(stale_pooled_connection_is_not_retried_for_post)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    static const char *const script[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none",
        "",
        NULL,
    };
    struct raw srv;
    raw_start(&srv, script, 1);
    struct al_http_pool *pool;
    ck_assert_int_eq(al_http_pool_new(&L, NULL, &pool), 0);
    struct rec r;
    raw_request(&srv, pool, "POST", &r);
    ck_assert_str_eq(r.body, "one");
    raw_request(&srv, pool, "POST", &r);
    ck_assert_int_eq(r.err, -ECONNRESET);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "without answering"));
    raw_stop(&srv);
    S = NULL;
    loop_teardown(pool);
}
END_TEST

static void raw_one(const char *response, const char *method, struct rec *r)
{
    ck_assert_int_eq(uv_loop_init(&L), 0);
    const char *const script[] = {response, NULL};
    struct raw srv;
    raw_start(&srv, script, 1);
    raw_request(&srv, NULL, method, r);
    raw_stop(&srv);
    S = NULL;
    loop_teardown(NULL);
}

START_TEST(informational_responses_are_skipped)
{
    struct rec r;
    raw_one("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Real: 1\r\n\r\nok",
            "GET", &r);
    ck_assert_int_eq(r.err, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok");
}
END_TEST

START_TEST(close_delimited_response_is_complete_at_eof)
{
    struct rec r;
    raw_one("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", "GET", &r);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(r.body, "until the end");
}
END_TEST

START_TEST(truncated_response_is_an_error)
{
    struct rec r;
    raw_one("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "GET", &r);
    ck_assert_int_eq(r.err, -ECONNRESET);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "in the middle of the response"));
}
END_TEST

START_TEST(malformed_responses_are_refused)
{
    struct rec r;
    raw_one("HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", "GET", &r);
    ck_assert_int_eq(r.err, -EPROTO);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "folding"));
    raw_one("HTTP/1.1 200 OK\nContent-Length: 0\n\n", "GET", &r);
    ck_assert_int_eq(r.err, -EPROTO);
    raw_one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "GET", &r);
    ck_assert_int_eq(r.err, -EPROTO);
    raw_one("SSH-2.0-OpenSSH\r\n\r\n", "GET", &r);
    ck_assert_int_eq(r.err, -EPROTO);
    static char big[80000];
    snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nX-Big: %0*d\r\n\r\n", 70000, 0);
    raw_one(big, "GET", &r);
    ck_assert_int_eq(r.err, -E2BIG);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "header block too large"));
}
END_TEST

/* ---- streamed bodies with a Content-Length, upgrades -------------------------------- */
static int sl_write(struct rec *r, const char *s)
{
    return al_http_creq_write(r->c, s, strlen(s));
}

START_TEST(streamed_body_with_content_length)
{
    loop_setup(NULL);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, S_target_tcp, "POST", "/framing");
    o.stream_body = true;
    o.stream_length = 11;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    ck_assert_int_eq(sl_write(&r, "hello "), 0);
    ck_assert_int_eq(sl_write(&r, "world!"), -EINVAL); /* past the length: refused, not sent */
    ck_assert_int_eq(sl_write(&r, "world"), 0);
    ck_assert_int_eq(al_http_creq_end(r.c), 0);
    run_until(&r.done, 10000);
    ck_assert_msg(r.err == 0, "%s", r.errmsg);
    ck_assert_str_eq(r.body, "cl=11 chunked=0 body=hello world");
    rec_fini(&r);
    /* Without a length: chunked, as before. */
    rec_init(&r);
    o = rec_opts(&r, S_target_tcp, "POST", "/framing");
    o.stream_body = true;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    ck_assert_int_eq(sl_write(&r, "abc"), 0);
    ck_assert_int_eq(al_http_creq_end(r.c), 0);
    run_until(&r.done, 10000);
    ck_assert_str_eq(r.body, "cl=-1 chunked=1 body=abc");
    rec_fini(&r);
    /* Ending short of the length fails the request and says why. */
    rec_init(&r);
    o = rec_opts(&r, S_target_tcp, "POST", "/framing");
    o.stream_body = true;
    o.stream_length = 10;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &r.c), 0);
    ck_assert_int_eq(sl_write(&r, "abc"), 0);
    ck_assert_int_eq(al_http_creq_end(r.c), -EPROTO);
    run_until(&r.done, 10000);
    ck_assert_int_eq(r.err, -EPROTO);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "7 bytes short"));
    rec_fini(&r);
    loop_teardown(NULL);
}
END_TEST

START_TEST(unasked_switching_protocols_is_an_error)
{
    struct rec r;
    raw_one("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nraw",
            "GET", &r);
    ck_assert_int_eq(r.err, -EPROTO);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "no upgrade was asked for"));
}
END_TEST

/* ---- blocking client --------------------------------------------------------------- */
static struct tsrv T;

static void tsrv_setup(void)
{
    memset(&T, 0, sizeof T);
    T.opts.on_request = t_handler;
    tsrv_start(&T);
}

/* The blocking client's options for target GET path, bounded by timeout_ms. */
static struct al_http_call_opts call_get(const char *target, const char *path, uint32_t timeout_ms)
{
    return (struct al_http_call_opts){
        .target = target, .method = "GET", .path = path, .timeout_ms = timeout_ms};
}

START_TEST(blocking_call_and_json)
{
    tsrv_setup();
    char target[160];
    snprintf(target, sizeof target, "unix:%s", T.sock);
    struct al_http_resp resp;
    struct al_error err = {0};
    struct al_http_call_opts o = call_get(target, "/hello", 5000);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), 0);
    ck_assert_int_eq(resp.status, 200);
    ck_assert_str_eq(resp.body.data, "hello");
    ck_assert_str_eq(al_http_resp_header(&resp, "CONTENT-LENGTH"), "5");
    al_http_resp_free(&resp);

    /* Headers and a body, with and without wipe (the same exchange either way). */
    struct al_http_header h[] = {{"X-Test", "v1"}};
    for (int wipe = 0; wipe < 2; wipe++) {
        o = (struct al_http_call_opts){.target = target,
                                       .method = "POST",
                                       .path = "/echo",
                                       .headers = h,
                                       .n_headers = 1,
                                       .body = "secret",
                                       .body_len = 6,
                                       .wipe = wipe};
        ck_assert_int_eq(al_http_call(&o, &resp, &err), 0);
        ck_assert_int_eq(resp.status, 200);
        ck_assert_str_eq(resp.body.data, "secret");
        al_http_resp_free(&resp);
    }
    o = call_get(target, "/headers", 5000);
    o.headers = h;
    o.n_headers = 1;
    ck_assert_int_eq(al_http_call(&o, &resp, &err), 0);
    ck_assert_ptr_nonnull(strstr(resp.body.data, "x-test=v1 count=1 method=GET"));
    al_http_resp_free(&resp);

    int status = 0;
    json_t *out = NULL;
    json_t *in = json_pack("{s:s}", "k", "v");
    o = (struct al_http_call_opts){.target = target, .method = "POST", .path = "/echo"};
    ck_assert_int_eq(al_http_call_json(&o, in, &status, &out, &err), 0);
    ck_assert_int_eq(status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(out, "k")), "v");
    json_decref(out);
    o.wipe = true;
    ck_assert_int_eq(al_http_call_json(&o, in, &status, &out, &err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(out, "k")), "v");
    json_decref(out);
    /* JSON text the caller encoded goes as it is; with a JSON body beside it: refused. */
    o.body = "{\"t\":\"text\"}";
    o.body_len = strlen(o.body);
    ck_assert_int_eq(al_http_call_json(&o, NULL, &status, &out, &err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(out, "t")), "text");
    json_decref(out);
    ck_assert_int_eq(al_http_call_json(&o, in, &status, &out, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not both"));
    ck_assert_ptr_null(out);
    json_decref(in);

    o = call_get(target, "/hello", 5000);
    ck_assert_int_eq(al_http_call_json(&o, NULL, &status, &out, &err), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err.msg, "not JSON"));
    /* The caller's headers go out beside Accept (the error quotes the text answer). */
    o = call_get(target, "/headers", 5000);
    o.headers = h;
    o.n_headers = 1;
    ck_assert_int_eq(al_http_call_json(&o, NULL, &status, &out, &err), -EBADMSG);
    ck_assert_msg(strstr(err.msg, "x-test=v1 count=1 method=GET"), "%s", err.msg);
    o = call_get(target, "/nocontent", 5000);
    ck_assert_int_eq(al_http_call_json(&o, NULL, &status, &out, &err), 0);
    ck_assert_int_eq(status, 204);
    ck_assert_ptr_null(out);
    tsrv_stop(&T);
}
END_TEST

START_TEST(blocking_call_limits_and_errors)
{
    tsrv_setup();
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", T.port);
    struct al_http_resp resp;
    struct al_error err = {0};
    struct al_http_call_opts o = call_get(target, "/bulk?kib=64", 5000);
    o.max_body = 1000;
    ck_assert_int_eq(al_http_call(&o, &resp, &err), -EFBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "larger than 1000 bytes"));
    o = call_get(target, "/chunks?n=100&delay=20", 200);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "within 200 ms"));
    o = call_get("nohost", "/", 1000);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing port"));
    o = call_get("https://127.0.0.1:1", "/", 1000);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), -EPROTONOSUPPORT);
    o = call_get(target, "no-slash", 1000);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "must start with '/'"));
    /* The server's own errors come back as responses, not failures. */
    o = call_get(target, "/nope", 5000);
    ck_assert_int_eq(al_http_call(&o, &resp, &err), 0);
    ck_assert_int_eq(resp.status, 404);
    al_http_resp_free(&resp);
    tsrv_stop(&T);
}
END_TEST

/* connect_addr: the name is never resolved (.invalid cannot be), the address given is
 * dialled, and the name is what the request carries. */
START_TEST(pinned_address_is_dialled_instead_of_the_name)
{
    loop_setup(NULL);
    char url[96];
    snprintf(url, sizeof url, "http://pinned.invalid:%d", S_port);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(1)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct rec r;
    rec_init(&r);
    struct al_http_creq_opts o = rec_opts(&r, url, "GET", "/hello");
    o.connect_addr = (const struct sockaddr *)&sa;
    do_request(&o, &r);
    ck_assert_msg(r.err == 0, "%s", r.errmsg);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "hello");
    rec_fini(&r);
    /* Without the pin the name is looked up, and fails. */
    rec_init(&r);
    o = rec_opts(&r, url, "GET", "/hello");
    do_request(&o, &r);
    ck_assert_int_ne(r.err, 0);
    ck_assert_ptr_nonnull(strstr(r.errmsg, "pinned.invalid"));
    rec_fini(&r);
    /* A pin for a unix socket, or of another family, is refused. */
    struct al_http_creq *c = NULL;
    o = rec_opts(&r, S_target_unix, "GET", "/hello");
    o.connect_addr = (const struct sockaddr *)&sa;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    struct sockaddr un = {.sa_family = AF_UNIX};
    o = rec_opts(&r, url, "GET", "/hello");
    o.connect_addr = &un;
    ck_assert_int_eq(al_http_creq_start(&L, &o, &c), -EINVAL);
    loop_teardown(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_client");
    TCase *tc = tcase_create("client");
    tcase_set_timeout(tc, 60);
    T_ADD(tc, get_over_tcp_unix_and_url_targets);
    T_ADD(tc, post_whole_body_and_json_error_reply);
    T_ADD(tc, streamed_response_arrives_in_pieces);
    T_ADD(tc, streamed_upload_both_ways_with_flow_control);
    T_ADD(tc, slow_reader_pauses_and_resumes);
    T_ADD(tc, resume_from_inside_on_data_cancels_the_pause);
    T_ADD(tc, cancel_reports_ecanceled_and_server_sees_close);
    T_ADD(tc, cancel_from_inside_on_data);
    T_ADD(tc, timeout_waiting_for_headers);
    T_ADD(tc, connect_failure_says_what_and_where);
    T_ADD(tc, pool_reuses_one_connection);
    T_ADD(tc, pool_idle_connections_expire);
    T_ADD(tc, pool_drops_connections_the_server_closed);
    T_ADD(tc, idle_pool_does_not_keep_the_loop_alive);
    T_ADD(tc, stale_pooled_connection_is_retried_for_idempotent_requests);
    T_ADD(tc, stale_pooled_connection_is_not_retried_for_post);
    T_ADD(tc, informational_responses_are_skipped);
    T_ADD(tc, close_delimited_response_is_complete_at_eof);
    T_ADD(tc, truncated_response_is_an_error);
    T_ADD(tc, malformed_responses_are_refused);
    T_ADD(tc, streamed_body_with_content_length);
    T_ADD(tc, unasked_switching_protocols_is_an_error);
    T_ADD(tc, pinned_address_is_dialled_instead_of_the_name);
    T_ADD(tc, blocking_call_and_json);
    T_ADD(tc, blocking_call_limits_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
