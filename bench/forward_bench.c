/* bench/forward_bench: what forwarding a sandbox's other port costs (vmm/guest/forward.c),
 * printed as JSON lines, each forwarded figure next to its reference measured in the same run
 * (the same client straight to the same server):
 *
 *   keep-alive GET round trips, one at a time from a blocking client: requests/s and p50/p99
 *   latency, straight to the server (TCP loopback) and through the agent (over a unix socket,
 *   as airlockd reaches it, with E2b-Sandbox-Port), and the ratio;
 *   a large download (Content-Length) straight and through the agent: MB/s and the ratio;
 *   an upgraded connection (a server streaming raw bytes after its 101) through the agent's
 *   relay: MB/s.
 *
 * Usage: forward_bench [requests] [MiB]   (default 20000 round trips, 512 MiB)
 * Figures: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&
 *          build/bench/forward_bench 50000 1024
 */
#include "common/http.h"
#include "vmm/guest/agent.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

int main(int argc, char **argv);

static uv_loop_t L;
static struct agent A;
static struct al_http_server *g_up, *g_agent;
static uv_async_t g_stop;
static int g_up_port;
static char g_sock[108];
static size_t g_big;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"forward\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", metric,
           value, unit);
    fflush(stdout);
}

static void die(const char *what)
{
    fprintf(stderr, "forward_bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- the server a sandbox would run ------------------------------------------------------ */
static char g_piece[256 * 1024];

struct bulk {
    size_t left;
};

static void bulk_pump(struct al_http_req *req)
{
    struct bulk *b = req->user;
    while (b->left) {
        if (al_http_resp_queued(req) > 1u << 20) {
            al_http_resp_on_drain(req, 256u << 10, bulk_pump);
            return;
        }
        size_t n = b->left < sizeof g_piece ? b->left : sizeof g_piece;
        if (al_http_resp_write(req, g_piece, n) < 0)
            break;
        b->left -= n;
    }
    req->user = NULL;
    free(b);
    al_http_resp_end(req);
}

static void bulk_closed(struct al_http_req *req)
{
    free(req->user);
}

struct raw_stream {
    size_t left;
};

static void raw_pump(struct al_http_tunnel *t, void *arg)
{
    struct raw_stream *r = arg;
    while (r->left && al_http_tunnel_queued(t) <= (1u << 20)) {
        size_t n = r->left < sizeof g_piece ? r->left : sizeof g_piece;
        if (al_http_tunnel_write(t, g_piece, n) < 0) {
            r->left = 0;
            break;
        }
        r->left -= n;
    }
    if (r->left) {
        al_http_tunnel_on_drain(t, 256u << 10, raw_pump);
        return;
    }
    al_http_tunnel_shutdown(t, NULL);
}

static int raw_data(struct al_http_tunnel *t, const char *d, size_t n, void *arg)
{
    (void)t;
    (void)d;
    (void)n;
    (void)arg;
    return 0;
}

static void raw_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)err;
    free(arg);
    al_http_tunnel_close(t);
}

static void up_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    if (strcmp(req->path, "/big") == 0) {
        struct bulk *b = calloc(1, sizeof *b);
        b->left = g_big;
        req->user = b;
        al_http_req_on_close(req, bulk_closed);
        al_http_resp_start(req, 200, NULL, 0, (int64_t)g_big);
        bulk_pump(req);
    } else if (strcmp(req->path, "/raw") == 0) {
        struct al_http_header h[] = {{"Upgrade", "raw"}};
        struct al_http_tunnel *t;
        if (al_http_req_upgrade(req, h, 1, &t) != 0) {
            al_http_reply(req, 400, "text/plain", "no", 2);
            return;
        }
        struct raw_stream *r = calloc(1, sizeof *r);
        r->left = g_big;
        al_http_tunnel_start(t, raw_data, raw_end, r);
        raw_pump(t, r);
    } else {
        al_http_reply(req, 200, "text/plain", "hello", 5);
    }
}

static void closed(void *arg)
{
    (void)arg;
}

static void on_stop(uv_async_t *h)
{
    al_http_server_close(g_agent, closed, NULL);
    al_http_server_close(g_up, closed, NULL);
    agent_forward_free(&A);
    uv_close((uv_handle_t *)h, NULL);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&L, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- a blocking keep-alive client ----------------------------------------------------------- */
struct cli {
    int fd;
    char buf[1 << 16];
    size_t len;
};

static void cli_tcp(struct cli *c, int port)
{
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&sin, sizeof sin) < 0)
        die("connect");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void cli_unix(struct cli *c, const char *path)
{
    c->len = 0;
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    if (connect(c->fd, (struct sockaddr *)&sun, sizeof sun) < 0)
        die("connect unix");
}

static void cli_send(struct cli *c, const char *s)
{
    size_t n = strlen(s);
    if (send(c->fd, s, n, MSG_NOSIGNAL) != (ssize_t)n)
        die("send");
}

static void cli_fill(struct cli *c)
{
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n <= 0)
        die("recv (closed)");
    c->len += (size_t)n;
}

/* Reads one response with a Content-Length body; returns its status and body length. */
static int cli_response(struct cli *c, size_t *body_len, const char *skip_until)
{
    char *end;
    while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
        cli_fill(c);
    size_t hl = (size_t)(end - c->buf) + 4;
    int status = atoi(c->buf + 9);
    size_t cl = 0;
    const char *p = strcasestr(c->buf, "\r\ncontent-length:");
    if (p && p < end)
        cl = strtoull(p + 17, NULL, 10);
    if (skip_until) /* an upgrade: everything until the peer closes */
        cl = SIZE_MAX;
    memmove(c->buf, c->buf + hl, c->len - hl);
    c->len -= hl;
    size_t got = 0;
    while (got < cl) {
        if (c->len == 0) {
            ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
            if (n <= 0) {
                if (skip_until)
                    break;
                die("recv body");
            }
            c->len = (size_t)n;
        }
        size_t take = c->len < cl - got ? c->len : cl - got;
        got += take;
        memmove(c->buf, c->buf + take, c->len - take);
        c->len -= take;
    }
    *body_len = got;
    return status;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* n keep-alive round trips; returns requests/s, fills p50/p99 (us). */
static double round_trips(struct cli *c, const char *req, int n, double *p50, double *p99)
{
    uint64_t *lat = malloc(sizeof *lat * (size_t)n);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t a = now_ns();
        cli_send(c, req);
        size_t bl;
        if (cli_response(c, &bl, NULL) != 200 || bl != 5)
            die("unexpected answer");
        lat[i] = now_ns() - a;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    *p50 = (double)lat[n / 2] / 1000.0;
    *p99 = (double)lat[(size_t)n * 99 / 100] / 1000.0;
    free(lat);
    return n / secs;
}

static double download(struct cli *c, const char *req, const char *upgrade)
{
    uint64_t t0 = now_ns();
    cli_send(c, req);
    size_t bl;
    int st = cli_response(c, &bl, upgrade);
    double secs = (double)(now_ns() - t0) / 1e9;
    if ((upgrade ? st != 101 : st != 200) || bl != g_big) {
        fprintf(stderr, "forward_bench: download: status %d, %zu of %zu bytes\n", st, bl, g_big);
        exit(1);
    }
    return (double)g_big / (1024.0 * 1024.0) / secs;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    g_big = (size_t)(argc > 2 ? atoi(argv[2]) : 512) << 20;
    if (n < 10 || g_big == 0) {
        fprintf(stderr, "usage: forward_bench [requests >= 10] [MiB >= 1]\n");
        return 2;
    }
    memset(g_piece, 'b', sizeof g_piece);
    if (uv_loop_init(&L))
        die("uv_loop_init");
    A.loop = &L;
    agent_limits_default(&A.lim);
    struct al_http_server_opts uo = {.on_request = up_request};
    struct al_http_server_opts ao = {.on_request = agent_on_request, .ctx = &A};
    if (al_http_server_new(&L, &uo, &g_up) || al_http_server_listen_tcp(g_up, "127.0.0.1", 0, NULL))
        die("upstream server");
    g_up_port = al_http_server_port(g_up);
    snprintf(g_sock, sizeof g_sock, "/tmp/al-fwd-bench-%d.sock", (int)getpid());
    if (al_http_server_new(&L, &ao, &g_agent) ||
        al_http_server_listen_unix(g_agent, g_sock, 0600, NULL))
        die("agent server");
    uv_async_init(&L, &g_stop, on_stop);
    pthread_t th;
    pthread_create(&th, NULL, loop_main, NULL);

    char direct[128], fwd[192];
    snprintf(direct, sizeof direct, "GET /small HTTP/1.1\r\nHost: app\r\n\r\n");
    snprintf(fwd, sizeof fwd, "GET /small HTTP/1.1\r\nHost: app\r\nE2b-Sandbox-Port: %d\r\n\r\n",
             g_up_port);
    struct cli c;
    double p50, p99;
    cli_tcp(&c, g_up_port);
    round_trips(&c, direct, n / 10 + 1, &p50, &p99); /* warm-up */
    double rps_d = round_trips(&c, direct, n, &p50, &p99);
    close(c.fd);
    emit("get_rps_direct", rps_d, "req/s");
    emit("get_p50_us_direct", p50, "us");
    emit("get_p99_us_direct", p99, "us");
    cli_unix(&c, g_sock);
    round_trips(&c, fwd, n / 10 + 1, &p50, &p99);
    double rps_f = round_trips(&c, fwd, n, &p50, &p99);
    close(c.fd);
    emit("get_rps_forwarded", rps_f, "req/s");
    emit("get_p50_us_forwarded", p50, "us");
    emit("get_p99_us_forwarded", p99, "us");
    emit("get_rps_ratio_forwarded_to_direct", rps_f / rps_d, "ratio");

    snprintf(direct, sizeof direct, "GET /big HTTP/1.1\r\nHost: app\r\n\r\n");
    snprintf(fwd, sizeof fwd, "GET /big HTTP/1.1\r\nHost: app\r\nE2b-Sandbox-Port: %d\r\n\r\n",
             g_up_port);
    cli_tcp(&c, g_up_port);
    double mb_d = download(&c, direct, NULL);
    close(c.fd);
    cli_unix(&c, g_sock);
    double mb_f = download(&c, fwd, NULL);
    close(c.fd);
    emit("download_MBps_direct", mb_d, "MB/s");
    emit("download_MBps_forwarded", mb_f, "MB/s");
    emit("download_ratio_forwarded_to_direct", mb_f / mb_d, "ratio");
    snprintf(fwd, sizeof fwd,
             "GET /raw HTTP/1.1\r\nHost: app\r\nE2b-Sandbox-Port: %d\r\nConnection: upgrade\r\n"
             "Upgrade: raw\r\n\r\n",
             g_up_port);
    cli_unix(&c, g_sock);
    double mb_r = download(&c, fwd, "raw");
    close(c.fd);
    emit("upgraded_relay_MBps_forwarded", mb_r, "MB/s");

    uv_async_send(&g_stop);
    pthread_join(th, NULL);
    uv_loop_close(&L);
    unlink(g_sock);
    return 0;
}
