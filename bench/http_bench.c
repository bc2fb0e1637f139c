/* bench/http_bench: what common/http costs, printed as JSON lines.
 *
 *   keep-alive GET round trips over a unix socket and over TCP loopback, one request at a
 *   time from a blocking client thread: requests/s, p50 and p99 latency; the same client
 *   against a reference server in the same run (libuv, answers a fixed response to each
 *   read, no parsing at all) gives the price of HTTP itself as a ratio;
 *   the asynchronous client with a keep-alive pool, 16 requests in flight: requests/s;
 *   heap bytes held per idle keep-alive connection (1000 of them, mallinfo2 delta).
 *
 * Usage: http_bench [requests]   (default 20000 per measurement)
 * Figures: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&
 *          build/bench/http_bench 50000
 */
#include "common/http.h"
#include "common/http_internal.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

int main(int argc, char **argv);

static const char RESPONSE_BODY[] = "hello";

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"http\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", metric, value,
           unit);
    fflush(stdout);
}

static void die(const char *what)
{
    fprintf(stderr, "http_bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- servers on a thread ----------------------------------------------------------- */
static void on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    al_http_reply(req, 200, "text/plain", RESPONSE_BODY, sizeof RESPONSE_BODY - 1);
}

/* The reference: accept, and answer every read with the same bytes. */
static char ref_response[256];
static size_t ref_len;

static void ref_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)h;
    (void)s;
    static char buf[65536];
    *b = uv_buf_init(buf, sizeof buf);
}

static void ref_closed(uv_handle_t *h)
{
    free(h);
}

static void ref_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0) {
        uv_close((uv_handle_t *)st, ref_closed);
        return;
    }
    if (n > 0) {
        uv_buf_t r = uv_buf_init(ref_response, (unsigned)ref_len);
        uv_try_write(st, &r, 1);
    }
}

static void ref_conn(uv_stream_t *ls, int status)
{
    if (status < 0)
        return;
    uv_pipe_t *c = malloc(sizeof *c);
    uv_pipe_init(ls->loop, c, 0);
    if (uv_accept(ls, (uv_stream_t *)c) == 0)
        uv_read_start((uv_stream_t *)c, ref_alloc, ref_read);
}

struct srv {
    pthread_t th;
    uv_loop_t loop;
    uv_async_t stop;
    struct al_http_server *http;
    uv_pipe_t ref;
    char sock[108], ref_sock[108];
    int port;
    atomic_int ready;
};

static void srv_stop_cb(uv_async_t *a)
{
    struct srv *s = a->data;
    al_http_server_close(s->http, NULL, NULL);
    uv_close((uv_handle_t *)&s->ref, NULL);
    uv_close((uv_handle_t *)a, NULL);
}

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    uv_loop_init(&s->loop);
    struct al_http_server_opts o = {.on_request = on_request};
    struct al_error err = {0};
    if (al_http_server_new(&s->loop, &o, &s->http) ||
        al_http_server_listen_unix(s->http, s->sock, 0600, &err) ||
        al_http_server_listen_tcp(s->http, "127.0.0.1", 0, &err)) {
        fprintf(stderr, "http_bench: %s\n", err.msg);
        exit(1);
    }
    s->port = al_http_server_port(s->http);
    uv_pipe_init(&s->loop, &s->ref, 0);
    unlink(s->ref_sock);
    if (uv_pipe_bind(&s->ref, s->ref_sock) || uv_listen((uv_stream_t *)&s->ref, 128, ref_conn))
        die("reference listen");
    uv_async_init(&s->loop, &s->stop, srv_stop_cb);
    s->stop.data = s;
    atomic_store(&s->ready, 1);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- blocking keep-alive client ---------------------------------------------------- */
static int connect_unix(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0)
        die("connect unix");
    return fd;
}

static int connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0)
        die("connect tcp");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Reads one response (headers, then Content-Length bytes). */
static void read_response(int fd)
{
    char buf[4096];
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            die("recv");
        len += (size_t)n;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        char *cl = strcasestr(buf, "content-length:");
        size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
        if (len >= want)
            return;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Returns requests/s; fills p50/p99 in microseconds. */
static double roundtrips(int fd, int n, double *p50, double *p99)
{
    static const char req[] = "GET /hello HTTP/1.1\r\nHost: bench\r\nUser-Agent: http_bench\r\n"
                              "Accept: */*\r\n\r\n";
    uint64_t *lat = malloc(sizeof *lat * (size_t)n);
    for (int i = 0; i < 200; i++) { /* warm up */
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) < 0)
            die("send");
        read_response(fd);
    }
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t a = now_ns();
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) < 0)
            die("send");
        read_response(fd);
        lat[i] = now_ns() - a;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    *p50 = (double)lat[n / 2] / 1000.0;
    *p99 = (double)lat[(size_t)n * 99 / 100] / 1000.0;
    free(lat);
    return n / secs;
}

/* ---- async client with a pool ------------------------------------------------------ */
struct pooled {
    uv_loop_t loop;
    struct al_http_pool *pool;
    char target[160];
    int left, inflight, done, failed;
};

static void pooled_start(struct pooled *p);

static void pooled_done(struct al_http_creq *c, int err, void *arg)
{
    (void)c;
    struct pooled *p = arg;
    p->inflight--;
    p->done++;
    if (err)
        p->failed++;
    pooled_start(p);
}

static void pooled_start(struct pooled *p)
{
    while (p->left > 0 && p->inflight < 16) {
        struct al_http_creq_opts o = {.target = p->target,
                                      .method = "GET",
                                      .path = "/hello",
                                      .on_done = pooled_done,
                                      .arg = p,
                                      .pool = p->pool};
        struct al_http_creq *c;
        if (al_http_creq_start(&p->loop, &o, &c) != 0)
            die("creq_start");
        p->left--;
        p->inflight++;
    }
}

static double pooled_rps(const char *target, int n)
{
    struct pooled p = {.left = n};
    snprintf(p.target, sizeof p.target, "%s", target);
    uv_loop_init(&p.loop);
    al_http_pool_new(&p.loop, &(struct al_http_pool_opts){.max_idle_per_target = 16}, &p.pool);
    uint64_t t0 = now_ns();
    pooled_start(&p);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    double secs = (double)(now_ns() - t0) / 1e9;
    al_http_pool_close(p.pool);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    uv_loop_close(&p.loop);
    if (p.failed)
        fprintf(stderr, "http_bench: %d pooled requests failed\n", p.failed);
    return p.done / secs;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < 100)
        n = 100;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);

    ref_len = (size_t)snprintf(ref_response, sizeof ref_response,
                               "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                               "5\r\nDate: Mon, 30 Nov 2026 00:00:00 GMT\r\nConnection: "
                               "keep-alive\r\n\r\nhello");
    static struct srv s;
    snprintf(s.sock, sizeof s.sock, "/tmp/al-http-bench-%d.sock", (int)getpid());
    snprintf(s.ref_sock, sizeof s.ref_sock, "/tmp/al-http-bench-ref-%d.sock", (int)getpid());
    pthread_create(&s.th, NULL, srv_main, &s);
    while (!atomic_load(&s.ready))
        usleep(1000);

    double p50, p99, rps;
    int fd = connect_unix(s.sock);
    rps = roundtrips(fd, n, &p50, &p99);
    close(fd);
    emit("keepalive_unix_rps", rps, "req/s");
    emit("keepalive_unix_p50_us", p50, "us");
    emit("keepalive_unix_p99_us", p99, "us");

    double rp50, rp99;
    fd = connect_unix(s.ref_sock);
    double ref = roundtrips(fd, n, &rp50, &rp99);
    close(fd);
    emit("reference_raw_unix_rps", ref, "req/s");
    emit("reference_raw_unix_p50_us", rp50, "us");
    emit("http_vs_raw_rps_ratio", rps / ref, "ratio");

    fd = connect_tcp(s.port);
    rps = roundtrips(fd, n, &p50, &p99);
    close(fd);
    emit("keepalive_tcp_rps", rps, "req/s");
    emit("keepalive_tcp_p50_us", p50, "us");
    emit("keepalive_tcp_p99_us", p99, "us");

    char target[160];
    snprintf(target, sizeof target, "unix:%s", s.sock);
    emit("async_client_pool16_unix_rps", pooled_rps(target, n), "req/s");

    /* Heap per idle keep-alive connection: each has served one request. */
    enum { IDLE = 1000 };
    static int fds[IDLE];
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < IDLE; i++) {
        fds[i] = connect_unix(s.sock);
        static const char req[] = "GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n";
        if (send(fds[i], req, sizeof req - 1, MSG_NOSIGNAL) < 0)
            die("send");
        read_response(fds[i]);
    }
    usleep(100000);
    struct mallinfo2 after = mallinfo2();
    emit("heap_bytes_per_idle_connection",
         (double)((long)after.uordblks - (long)before.uordblks) / IDLE, "bytes");
    for (int i = 0; i < IDLE; i++)
        close(fds[i]);

    uv_async_send(&s.stop);
    pthread_join(s.th, NULL);
    unlink(s.sock);
    unlink(s.ref_sock);
    return 0;
}
