/* bench/cluster_tls_bench: what the cluster's mutual TLS (controlplane/cluster_tls.c) costs
 * the data plane, printed as JSON lines.
 *
 * One process, one loop: a node's TLS front in front of an HTTP server, and a gateway's
 * connector to it (the unix socket its HTTP client dials), with certificates made by
 * deploy/cluster-certs in a temporary directory. A blocking client thread moves bodies
 * through the connector on one keep-alive connection: GET of a body (node -> gateway) and
 * POST of one (gateway -> node), each through both TLS ends and both relays:
 *   tls_download_mib_s, tls_upload_mib_s          MiB of body per second of wall time
 *   tls_download_cpu_s_per_gib, tls_upload_...    the process's CPU time (every thread) per
 *                                                 GiB: steadier than wall time on a shared
 *                                                 machine
 * The reference, same run: the same transfers straight to the node's HTTP server over TCP
 * loopback, without TLS (plain_*): what HTTP and the sockets cost by themselves.
 *
 * Usage: cluster_tls_bench [MiB per transfer] [transfers]   (default 8 and 16)
 * Figures: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&
 *          build/bench/cluster_tls_bench 8 32
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/http.h"
#include "common/log.h"
#include "controlplane/cluster_tls.h"
#include "controlplane/cp.h"

#ifndef AIRLOCK_SOURCE_DIR
#error "AIRLOCK_SOURCE_DIR: the tree's root (deploy/cluster-certs)"
#endif

int main(int argc, char **argv);

static char *body;
static size_t body_len;

static void die(const char *what)
{
    fprintf(stderr, "cluster_tls_bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"cluster_tls\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", metric,
           value, unit);
    fflush(stdout);
}

/* ---- the node's HTTP server ------------------------------------------------------------ */
static int sink_data(struct al_http_req *req, const char *data, size_t len)
{
    (void)req, (void)data, (void)len;
    return 0;
}

static void sink_end(struct al_http_req *req, int err)
{
    if (err)
        al_http_resp_abort(req);
    else
        al_http_reply(req, 204, NULL, NULL, 0);
}

static void on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    if (strcmp(req->method, "POST") == 0)
        al_http_req_stream_body(req, sink_data, sink_end);
    else
        al_http_reply(req, 200, "application/octet-stream", body, body_len);
}

/* ---- the client ------------------------------------------------------------------------ */
static void write_all(int fd, const char *d, size_t n)
{
    while (n) {
        ssize_t w = send(fd, d, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("send");
        d += w;
        n -= (size_t)w;
    }
}

/* Reads a response: its head, then the Content-Length bytes of its body. */
static int read_response(int fd)
{
    static char buf[256 * 1024];
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (n <= 0)
            die("recv (head)");
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    int status = atoi(buf + 9);
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    size_t want = cl ? strtoull(cl + 17, NULL, 10) : 0;
    size_t got = have - (size_t)(end + 4 - buf);
    while (got < want) {
        size_t room = want - got < sizeof buf ? want - got : sizeof buf;
        ssize_t n = recv(fd, buf, room, 0);
        if (n <= 0)
            die("recv (body)");
        got += (size_t)n;
    }
    if (got != want) {
        fprintf(stderr, "cluster_tls_bench: %zu body bytes, %zu expected\n", got, want);
        exit(1);
    }
    return status;
}

static int dial(const char *unix_path, int port)
{
    int fd;
    if (unix_path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect (connector)");
    } else {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect (plain)");
    }
    return fd;
}

/* n transfers one way on one connection: emits MiB/s and CPU s per GiB. */
static void measure(const char *name, const char *unix_path, int port, bool upload, int n)
{
    int fd = dial(unix_path, port);
    char head[256];
    int hl = upload ? snprintf(head, sizeof head,
                               "POST /sink HTTP/1.1\r\nHost: node-1\r\nContent-Length: %zu\r\n\r\n",
                               body_len)
                    : snprintf(head, sizeof head, "GET /body HTTP/1.1\r\nHost: node-1\r\n\r\n");
    /* One transfer first: the handshake and the first buffers are not what is measured. */
    double t0 = 0, c0 = 0;
    for (int i = 0; i <= n; i++) {
        if (i == 1) {
            t0 = now_s();
            c0 = cpu_s();
        }
        write_all(fd, head, (size_t)hl);
        if (upload)
            write_all(fd, body, body_len);
        int status = read_response(fd);
        if (status != (upload ? 204 : 200)) {
            fprintf(stderr, "cluster_tls_bench: %s: status %d\n", name, status);
            exit(1);
        }
    }
    double wall = now_s() - t0, cpu = cpu_s() - c0;
    close(fd);
    double mib = (double)body_len * n / (1024.0 * 1024.0);
    char m[96];
    snprintf(m, sizeof m, "%s_mib_s", name);
    emit(m, mib / wall, "MiB/s");
    snprintf(m, sizeof m, "%s_cpu_s_per_gib", name);
    emit(m, cpu / (mib / 1024.0), "s");
}

/* ---- setup ------------------------------------------------------------------------------ */
static void *loop_main(void *arg)
{
    uv_run(arg, UV_RUN_DEFAULT);
    return NULL;
}

static void stop_cb(uv_async_t *a)
{
    struct cp **cps = a->data;
    cp_cluster_tls_close(cps[0]);
    cp_cluster_tls_close(cps[1]);
    al_http_server_close(cps[0]->api, NULL, NULL);
    uv_close((uv_handle_t *)a, NULL);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 8;
    int n = argc > 2 ? atoi(argv[2]) : 16;
    if (!mib || n <= 0) {
        fprintf(stderr, "usage: cluster_tls_bench [MiB per transfer] [transfers]\n");
        return 2;
    }
    body_len = mib << 20;
    if (!(body = malloc(body_len)))
        die("malloc");
    for (size_t i = 0; i < body_len; i++)
        body[i] = (char)(i * 2654435761u >> 13);

    char dir[] = "/tmp/cluster-tls-bench.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "set -e; m=%s/deploy/cluster-certs; d=%s/certs; { \"$m\" \"$d\" ca && "
             "\"$m\" \"$d\" node node-1 && \"$m\" \"$d\" gateway gw-1; } >/dev/null",
             AIRLOCK_SOURCE_DIR, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cluster_tls_bench: cannot make certificates (needs openssl)\n");
        return 1;
    }
    char ca[256], ncert[256], nkey[256], gcert[256], gkey[256];
    snprintf(ca, sizeof ca, "%s/certs/ca.pem", dir);
    snprintf(ncert, sizeof ncert, "%s/certs/node-node-1.pem", dir);
    snprintf(nkey, sizeof nkey, "%s/certs/node-node-1.key", dir);
    snprintf(gcert, sizeof gcert, "%s/certs/gateway-gw-1.pem", dir);
    snprintf(gkey, sizeof gkey, "%s/certs/gateway-gw-1.key", dir);

    al_log_set_level(AL_LOG_WARN);
    uv_loop_t loop;
    uv_loop_init(&loop);
    static struct cp node, gw;
    node.loop = gw.loop = &loop;
    node.cfg.cluster_role = CP_CLUSTER_NODE;
    gw.cfg.cluster_role = CP_CLUSTER_GATEWAY;
    node.cfg.cluster_tls_ca = gw.cfg.cluster_tls_ca = ca;
    node.cfg.cluster_tls_cert = ncert;
    node.cfg.cluster_tls_key = nkey;
    gw.cfg.cluster_tls_cert = gcert;
    gw.cfg.cluster_tls_key = gkey;
    node.cfg.state_dir = gw.cfg.state_dir = dir;

    struct al_error err = {0};
    struct al_http_server_opts so = {.on_request = on_request};
    so.limits.max_body_bytes = body_len;
    int port = 0, plain_port;
    if (al_http_server_new(&loop, &so, &node.api) ||
        al_http_server_listen_tcp(node.api, "127.0.0.1", 0, &err) ||
        cp_cluster_tls_open(&node, &err) || cp_cluster_tls_open(&gw, &err) ||
        cp_cluster_tls_listen(&node, "127.0.0.1", 0, &port, &err)) {
        fprintf(stderr, "cluster_tls_bench: %s\n", err.msg);
        return 1;
    }
    plain_port = al_http_server_port(node.api);
    char address[64], target[CP_CLUSTER_TARGET_MAX];
    snprintf(address, sizeof address, "127.0.0.1:%d", port);
    if (cp_cluster_tls_target(&gw, "node-1", address, target, sizeof target) ||
        strncmp(target, "unix:", 5) != 0) {
        fprintf(stderr, "cluster_tls_bench: no connector for %s\n", address);
        return 1;
    }
    struct cp *cps[2] = {&node, &gw};
    uv_async_t stop;
    uv_async_init(&loop, &stop, stop_cb);
    stop.data = cps;
    pthread_t th;
    if (pthread_create(&th, NULL, loop_main, &loop))
        die("pthread_create");

    measure("tls_download", target + 5, 0, false, n);
    measure("plain_download", NULL, plain_port, false, n);
    measure("tls_upload", target + 5, 0, true, n);
    measure("plain_upload", NULL, plain_port, true, n);

    uv_async_send(&stop);
    pthread_join(th, NULL);
    uv_loop_close(&loop);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cluster_tls_bench: cannot remove %s\n", dir);
    free(body);
    return 0;
}
