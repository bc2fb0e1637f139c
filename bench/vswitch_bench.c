/* bench/vswitch_bench: what a sandbox's network costs, in JSON lines.
 *
 *   vswitch_bench [-n NETWORKS] [-p POOL] [-m MEGABYTES] [-c CONNECTIONS] [-a tcx|clsact]
 *
 * Runs as root, entirely inside a network namespace of its own (the "host" of the switch),
 * with pins and state under unique per-PID paths that it removes at the end. Measures:
 *   net_create_*      vswitch_net_create without a pool: network namespace, veth pair,
 *                     addresses, routes, neighbour entry, programs attached (target p50 <= 2 ms)
 *   net_create_pool_* vswitch_net_create handing out a pre-created network
 *   pool_fill_per_net cost of preparing one pooled network (off the critical path)
 *   net_destroy_*     vswitch_net_destroy (the kernel's synchronous interface deletion)
 *   tcp_throughput_*  one TCP stream from a sandbox to 203.0.113.7:443 through the switch
 *                     into a stand-in proxy (a transparent listener registered in the
 *                     sockmap), against the same stream over loopback in the same run
 *   tcp_connect_rate_* sequential connect+accept+close, same two paths
 * Every figure is printed as {"bench":"vswitch","metric":...,"value":...,"unit":...}.
 */
#include "common/log.h"
#include "vswitch/vswitch.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <net/if.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"vswitch\",\"metric\":\"%s\",\"value\":%.4g,\"unit\":\"%s\"}\n", metric,
           value, unit);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void die(const char *what, const struct al_error *e)
{
    fprintf(stderr, "vswitch_bench: %s: %s\n", what, e ? al_error_str(e) : strerror(errno));
    exit(1);
}

/* ---- stand-in proxy and clients --------------------------------------------------------- */

struct sink {
    int lfd;
    size_t expect; /* bytes per connection (0: accept and close) */
    size_t conns;  /* connections to serve */
    size_t received;
};

static void *sink_thread(void *arg)
{
    struct sink *s = arg;
    char *buf = malloc(1 << 20);
    for (size_t i = 0; i < s->conns; i++) {
        int c = accept(s->lfd, NULL, NULL);
        if (c < 0)
            break;
        size_t got = 0;
        ssize_t n;
        while (got < s->expect && (n = read(c, buf, 1 << 20)) > 0)
            got += (size_t)n;
        s->received += got;
        close(c);
    }
    free(buf);
    return NULL;
}

struct client {
    int netns_fd; /* -1: stay in the host namespace */
    struct sockaddr_in dst;
    size_t bytes; /* per connection */
    size_t conns;
    double seconds;
    int failed;
};

static void *client_thread(void *arg)
{
    struct client *c = arg;
    if (c->netns_fd >= 0 && setns(c->netns_fd, CLONE_NEWNET) != 0) {
        c->failed = errno;
        return NULL;
    }
    char *buf = calloc(1, 1 << 20);
    double t0 = now_s();
    for (size_t i = 0; i < c->conns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&c->dst, sizeof c->dst) != 0) {
            c->failed = errno;
            close(fd);
            break;
        }
        size_t sent = 0;
        while (sent < c->bytes) {
            size_t chunk = c->bytes - sent < (1u << 20) ? c->bytes - sent : (1u << 20);
            ssize_t n = write(fd, buf, chunk);
            if (n <= 0) {
                c->failed = errno ? errno : EPIPE;
                break;
            }
            sent += (size_t)n;
        }
        shutdown(fd, SHUT_WR);
        char tmp[16];
        while (read(fd, tmp, sizeof tmp) > 0) {
        }
        close(fd);
    }
    c->seconds = now_s() - t0;
    free(buf);
    return NULL;
}

static int listener(uint32_t addr, int port, bool transparent)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (transparent && setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0)
        die("IP_TRANSPARENT", NULL);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = addr};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0)
        die("listen", NULL);
    return fd;
}

/* One run: the sink serves conns connections of bytes each; returns seconds. */
static double run_pair(int lfd, int netns_fd, const char *dst, int port, size_t bytes, size_t conns)
{
    struct sink s = {.lfd = lfd, .expect = bytes, .conns = conns};
    struct client c = {.netns_fd = netns_fd, .bytes = bytes, .conns = conns};
    c.dst.sin_family = AF_INET;
    c.dst.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, dst, &c.dst.sin_addr);
    pthread_t ts, tc;
    pthread_create(&ts, NULL, sink_thread, &s);
    pthread_create(&tc, NULL, client_thread, &c);
    pthread_join(tc, NULL);
    if (c.failed) {
        fprintf(stderr, "vswitch_bench: client to %s:%d failed: %s\n", dst, port,
                strerror(c.failed));
        exit(1);
    }
    pthread_join(ts, NULL);
    if (s.received != bytes * conns) {
        fprintf(stderr, "vswitch_bench: sink got %zu of %zu bytes\n", s.received, bytes * conns);
        exit(1);
    }
    return c.seconds;
}

/* ---- cleanup ---------------------------------------------------------------------------- */

static char g_pin[128], g_state[128];
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Between steps: a Ctrl-C ends the run through exit(), so the pins are removed. */
static void check_stop(void)
{
    if (g_stop) {
        fprintf(stderr, "vswitch_bench: interrupted\n");
        exit(1);
    }
}

static int rm_cb(const char *p, const struct stat *st, int f, struct FTW *w)
{
    (void)st, (void)f, (void)w;
    remove(p);
    return 0;
}

static void cleanup(void)
{
    if (g_pin[0])
        nftw(g_pin, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
    if (g_state[0])
        nftw(g_state, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
    size_t nnets = 100, pool = 32, megabytes = 256, nconns = 1000;
    enum vswitch_attach_mode mode = VSWITCH_ATTACH_AUTO;
    int opt;
    while ((opt = getopt(argc, argv, "n:p:m:c:a:h")) != -1) {
        switch (opt) {
        case 'a':
            mode = strcmp(optarg, "clsact") == 0 ? VSWITCH_ATTACH_CLSACT
                   : strcmp(optarg, "tcx") == 0  ? VSWITCH_ATTACH_TCX
                                                 : VSWITCH_ATTACH_AUTO;
            break;
        case 'n':
            nnets = strtoul(optarg, NULL, 10);
            break;
        case 'p':
            pool = strtoul(optarg, NULL, 10);
            break;
        case 'm':
            megabytes = strtoul(optarg, NULL, 10);
            break;
        case 'c':
            nconns = strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: vswitch_bench [-n NETWORKS] [-p POOL] [-m MEGABYTES] "
                            "[-c CONNECTIONS] [-a tcx|clsact]\n");
            return 2;
        }
    }
    if (nnets < 1 || nnets > 2000 || pool < 1 || pool > 2000 || megabytes < 1 || megabytes > 8192 ||
        nconns < 1 || nconns > 100000) {
        fprintf(stderr, "vswitch_bench: bounds: -n 1..2000, -p 1..2000, -m 1..8192, "
                        "-c 1..100000\n");
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "vswitch_bench: needs root (network namespaces, eBPF)\n");
        return 1;
    }
    al_log_init("vswitch_bench", AL_LOG_TEXT, AL_LOG_WARN);
    /* The whole benchmark lives in a namespace of its own: the switch's rule, route table
     * and guard never touch the real host. */
    if (unshare(CLONE_NEWNET) != 0)
        die("unshare(CLONE_NEWNET)", NULL);
    snprintf(g_pin, sizeof g_pin, "/sys/fs/bpf/airlock-bench-%d", (int)getpid());
    snprintf(g_state, sizeof g_state, "/tmp/airlock-bench-%d", (int)getpid());
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not skip the cleanup */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    struct al_error e = {0};
    struct vswitch_opts o = {.state_dir = g_state,
                             .pin_dir = g_pin,
                             .ifname_prefix = "bn",
                             .attach_mode = mode,
                             .pool_size = (unsigned)pool};
    struct vswitch *vs;
    if (vswitch_open(&o, &vs, &e) != 0)
        die("vswitch_open", &e);
    /* lo up for the loopback reference (a new namespace starts with it down). */
    int sfd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (sfd < 0 || ioctl(sfd, SIOCSIFFLAGS, &ifr) != 0)
        die("setting lo up", NULL);
    close(sfd);

    /* 1. create without a pool. */
    size_t cap = nnets > pool ? nnets : pool;
    double *t = calloc(cap, sizeof *t);
    struct vswitch_net *nets = calloc(cap, sizeof *nets);
    for (size_t i = 0; i < nnets; i++) {
        check_stop();
        struct vswitch_sandbox sb = {.id = 1000 + i};
        double t0 = now_s();
        if (vswitch_net_create(vs, &sb, &nets[i], &e) != 0)
            die("vswitch_net_create", &e);
        t[i] = (now_s() - t0) * 1e3;
    }
    emit("net_create_p50_ms", pct(t, nnets, 0.50), "ms");
    emit("net_create_p99_ms", pct(t, nnets, 0.99), "ms");
    emit("net_create_max_ms", t[nnets - 1], "ms");

    /* 2. throughput and connection rate through the switch vs loopback. */
    int proxy = listener(htonl(INADDR_LOOPBACK), 15001, true);
    if (vswitch_proxy_register(vswitch_get_view(vs), VSWITCH_PROXY_TCP, proxy, &e) != 0)
        die("vswitch_proxy_register", &e);
    int direct = listener(htonl(INADDR_LOOPBACK), 16001, false);
    size_t bytes = megabytes << 20;
    run_pair(proxy, nets[0].netns_fd, "203.0.113.7", 443, 1 << 20, 1); /* warm up */
    run_pair(direct, -1, "127.0.0.1", 16001, 1 << 20, 1);
    double sw = run_pair(proxy, nets[0].netns_fd, "203.0.113.7", 443, bytes, 1);
    double lo = run_pair(direct, -1, "127.0.0.1", 16001, bytes, 1);
    double sw_mb = (double)megabytes / sw, lo_mb = (double)megabytes / lo;
    emit("tcp_throughput_switch", sw_mb, "MB/s");
    emit("tcp_throughput_loopback", lo_mb, "MB/s");
    emit("tcp_throughput_ratio", sw_mb / lo_mb, "ratio");
    double swc = run_pair(proxy, nets[0].netns_fd, "203.0.113.7", 443, 0, nconns);
    double loc = run_pair(direct, -1, "127.0.0.1", 16001, 0, nconns);
    emit("tcp_connect_rate_switch", (double)nconns / swc, "conn/s");
    emit("tcp_connect_rate_loopback", (double)nconns / loc, "conn/s");
    emit("tcp_connect_rate_ratio", ((double)nconns / swc) / ((double)nconns / loc), "ratio");
    close(proxy);
    close(direct);

    /* 3. destroy. */
    for (size_t i = 0; i < nnets; i++) {
        check_stop();
        double t0 = now_s();
        if (vswitch_net_destroy(vs, nets[i].sandbox_id, &e) != 0)
            die("vswitch_net_destroy", &e);
        t[i] = (now_s() - t0) * 1e3;
        vswitch_net_close_fds(&nets[i]);
    }
    emit("net_destroy_p50_ms", pct(t, nnets, 0.50), "ms");
    emit("net_destroy_p99_ms", pct(t, nnets, 0.99), "ms");

    /* 4. the pool: preparing is off the critical path, handing out is a map update. */
    double t0 = now_s();
    int ready = vswitch_pool_fill(vs, &e);
    if (ready < 0)
        die("vswitch_pool_fill", &e);
    emit("pool_fill_per_net_ms", (now_s() - t0) * 1e3 / (double)ready, "ms");
    size_t np = (size_t)ready;
    for (size_t i = 0; i < np; i++) {
        struct vswitch_sandbox sb = {.id = 5000 + i};
        double t1 = now_s();
        if (vswitch_net_create(vs, &sb, &nets[i], &e) != 0)
            die("vswitch_net_create (pool)", &e);
        t[i] = (now_s() - t1) * 1e6;
    }
    emit("net_create_pool_p50_us", pct(t, np, 0.50), "us");
    emit("net_create_pool_p99_us", pct(t, np, 0.99), "us");
    for (size_t i = 0; i < np; i++)
        vswitch_net_close_fds(&nets[i]);

    if (vswitch_destroy(vs, true, &e) != 0)
        die("vswitch_destroy", &e);
    free(t);
    free(nets);
    return 0;
}
