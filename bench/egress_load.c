/* bench/egress_load: the load generator and the fake upstreams of the egress benchmarks
 * (bench/egress_bench.sh runs them in a namespace world). Single-threaded epoll, so that
 * what is measured is the path between them, not this tool.
 *
 *   serve-http ADDR PORT                       HTTP/1.1 keep-alive, 200 with a 64-byte body
 *   serve-tls ADDR PORT [--bytes N]            reads a TLS ClientHello, sends N bytes (the
 *                                              "server flight") and closes; N=0: streams
 *                                              until the client goes
 *   http ADDR PORT --host H [--conns C] [--duration S] [--rate R] [--name NAME]
 *        keep-alive requests; closed loop (as fast as possible) or, with --rate, R requests/s
 *        in all on a fixed schedule (latency counted from the scheduled time, so a stall is
 *        not hidden); prints requests/s and latency p50/p90/p99/max
 *   http-conns ADDR PORT --host H [--conns C] [--duration S] [--name NAME]
 *        one request per connection (no keep-alive): connect, a request with
 *        "Connection: close", the whole response, close; C connections at a time, closed
 *        loop; prints requests/s (= connections/s) and latency from the connect
 *   tls-conns ADDR PORT --sni H [--conns C] [--duration S] [--name NAME]
 *        new connection, ClientHello, wait for the server's bytes, close: connections/s and
 *        latency
 *   tls-bulk ADDR PORT --sni H [--conns C] [--duration S] [--name NAME]   MB/s downloaded
 *   idle ADDR PORT --sni H --count N [--hold S]
 *        opens N passthrough connections, waits until each got its server flight, prints
 *        "READY n", holds them S seconds
 * Output: JSON lines {"bench":NAME,"metric":...,"value":...,"unit":...}.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "egress/clienthello.h"

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", ip);
        exit(2);
    }
    return a;
}

static int nb_connect(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)a, sizeof *a) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static void raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

/* ---- latency statistics ---------------------------------------------------------------- */

struct lat {
    uint32_t *v; /* microseconds */
    size_t n, cap;
};

static void lat_add(struct lat *l, uint64_t ns)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 65536;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (uint32_t)(ns / 1000 > UINT32_MAX ? UINT32_MAX : ns / 1000);
}

static int lat_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double lat_pct(struct lat *l, double p)
{
    if (!l->n)
        return 0;
    size_t i = (size_t)(p * (double)(l->n - 1));
    return l->v[i] / 1000.0;
}

static const char *g_name = "egress";

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", g_name, metric,
           value, unit);
    fflush(stdout);
}

static void emit_lat(const char *prefix, struct lat *l)
{
    qsort(l->v, l->n, sizeof *l->v, lat_cmp);
    char m[64];
    snprintf(m, sizeof m, "%s_p50", prefix);
    emit(m, lat_pct(l, 0.50), "ms");
    snprintf(m, sizeof m, "%s_p90", prefix);
    emit(m, lat_pct(l, 0.90), "ms");
    snprintf(m, sizeof m, "%s_p99", prefix);
    emit(m, lat_pct(l, 0.99), "ms");
    snprintf(m, sizeof m, "%s_max", prefix);
    emit(m, l->n ? l->v[l->n - 1] / 1000.0 : 0, "ms");
}

/* ---- servers ----------------------------------------------------------------------------- */

struct sconn {
    int fd;
    char buf[16384];
    size_t len;
    bool streaming;
    bool hello_done;
};

static int listen_on(const char *ip, int port)
{
    struct sockaddr_in a = addr_of(ip, port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4096) < 0)
        die("listen");
    return fd;
}

static const char http_resp[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 64\r\n\r\n"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";

static char stream_chunk[65536];

static _Noreturn void serve(const char *ip, int port, bool tls, long bytes)
{
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_on(ip, port);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    memset(stream_chunk, 'x', sizeof stream_chunk);
    char *flight = malloc(bytes > 0 ? (size_t)bytes : 1);
    memset(flight, 'y', bytes > 0 ? (size_t)bytes : 1);
    if (bytes > 0)
        flight[0] = 0x16; /* looks like a TLS record to the client */
    printf("LISTEN %s:%d\n", ip, port);
    fflush(stdout);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            struct sconn *c = evs[i].data.ptr;
            if (!c) {
                for (;;) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = calloc(1, sizeof *c);
                    c->fd = fd;
                    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e2);
                }
                continue;
            }
            bool drop = false;
            if (c->streaming && (evs[i].events & EPOLLOUT)) {
                for (;;) {
                    ssize_t w = send(c->fd, stream_chunk, sizeof stream_chunk, MSG_NOSIGNAL);
                    if (w < 0) {
                        if (errno != EAGAIN)
                            drop = true;
                        break;
                    }
                }
            }
            if (!drop && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
                if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
                    drop = true;
                } else if (r > 0) {
                    c->len += (size_t)r;
                    if (!tls) {
                        /* Answer every complete request head (no bodies in this benchmark). */
                        char *p = c->buf, *end = c->buf + c->len, *h;
                        while ((h = memmem(p, (size_t)(end - p), "\r\n\r\n", 4))) {
                            if (send(c->fd, http_resp, sizeof http_resp - 1, MSG_NOSIGNAL) < 0)
                                drop = true;
                            p = h + 4;
                        }
                        memmove(c->buf, p, (size_t)(end - p));
                        c->len = (size_t)(end - p);
                        if (c->len == sizeof c->buf)
                            drop = true;
                    } else if (!c->hello_done) {
                        struct egress_clienthello ch;
                        int rc = egress_clienthello_parse((uint8_t *)c->buf, c->len, &ch);
                        if (rc == EGRESS_CH_OK) {
                            c->hello_done = true;
                            if (bytes > 0) {
                                send(c->fd, flight, (size_t)bytes, MSG_NOSIGNAL);
                                shutdown(c->fd, SHUT_WR);
                            } else {
                                c->streaming = true;
                                struct epoll_event e2 = {.events = EPOLLIN | EPOLLOUT,
                                                         .data.ptr = c};
                                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e2);
                            }
                        } else if (rc < 0 || c->len == sizeof c->buf) {
                            drop = true;
                        }
                        c->len = c->hello_done ? 0 : c->len;
                    } else {
                        c->len = 0; /* ignore what the client sends after */
                    }
                }
            }
            if (drop) {
                close(c->fd);
                free(c);
            }
        }
    }
}

/* ---- a ClientHello --------------------------------------------------------------------- */

static size_t build_hello(const char *sni, uint8_t *out)
{
    uint8_t ext[512];
    size_t e = 0, n = strlen(sni);
    ext[e++] = 0;
    ext[e++] = 0;
    ext[e++] = (uint8_t)((n + 5) >> 8);
    ext[e++] = (uint8_t)(n + 5);
    ext[e++] = (uint8_t)((n + 3) >> 8);
    ext[e++] = (uint8_t)(n + 3);
    ext[e++] = 0;
    ext[e++] = (uint8_t)(n >> 8);
    ext[e++] = (uint8_t)n;
    memcpy(ext + e, sni, n);
    e += n;
    static const uint8_t versions[] = {0, 43, 0, 3, 2, 3, 4};
    memcpy(ext + e, versions, sizeof versions);
    e += sizeof versions;
    uint8_t body[1024];
    size_t b = 0;
    body[b++] = 3;
    body[b++] = 3;
    for (int i = 0; i < 32; i++)
        body[b++] = (uint8_t)(i * 7);
    body[b++] = 0;
    body[b++] = 0;
    body[b++] = 2;
    body[b++] = 0x13;
    body[b++] = 0x01;
    body[b++] = 1;
    body[b++] = 0;
    body[b++] = (uint8_t)(e >> 8);
    body[b++] = (uint8_t)e;
    memcpy(body + b, ext, e);
    b += e;
    size_t o = 0;
    out[o++] = 0x16;
    out[o++] = 3;
    out[o++] = 1;
    out[o++] = (uint8_t)((b + 4) >> 8);
    out[o++] = (uint8_t)(b + 4);
    out[o++] = 1;
    out[o++] = 0;
    out[o++] = (uint8_t)(b >> 8);
    out[o++] = (uint8_t)b;
    memcpy(out + o, body, b);
    return o + b;
}

/* ---- clients ------------------------------------------------------------------------------- */

struct cconn {
    int fd;
    bool connecting;
    bool busy;         /* a request in flight */
    uint64_t t_sched;  /* when the current request was due */
    uint64_t next_due; /* rate mode */
    char buf[4096];
    size_t len;
    size_t got; /* tls: bytes received */
};

struct opts {
    const char *ip, *host, *sni;
    int port, conns, count;
    double duration, rate, hold;
};

/* (Re)connects c: a new connection whose request is sent once the connect completes. */
static bool http_connect(int ep, const struct sockaddr_in *a, struct cconn *c)
{
    c->fd = nb_connect(a);
    if (c->fd < 0)
        return false;
    c->connecting = true;
    c->busy = false;
    c->len = 0;
    c->t_sched = now_ns();
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    return true;
}

/* new_conns: one request per connection, the client closing it after the response. */
static int http_client(const struct opts *o, bool new_conns)
{
    struct sockaddr_in a = addr_of(o->ip, o->port);
    char req[512];
    int rl = snprintf(req, sizeof req,
                      "GET /bench HTTP/1.1\r\nHost: %s\r\nUser-Agent: egress-bench\r\n%s\r\n",
                      o->host, new_conns ? "Connection: close\r\n" : "");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct cconn *cs = calloc((size_t)o->conns, sizeof *cs);
    uint64_t start = now_ns(), end = start + (uint64_t)(o->duration * 1e9);
    uint64_t interval = o->rate > 0 ? (uint64_t)(1e9 * o->conns / o->rate) : 0;
    for (int i = 0; i < o->conns; i++) {
        if (!http_connect(ep, &a, &cs[i]))
            die("connect");
        cs[i].next_due = start + (interval ? interval * (uint64_t)i / (uint64_t)o->conns : 0);
    }
    struct lat l = {0};
    uint64_t done = 0, errors = 0;
    struct epoll_event evs[256];
    while (now_ns() < end) {
        uint64_t now = now_ns();
        /* Send what is due. The wait until the next due request is exact to the
         * microsecond (epoll_pwait2): a millisecond timeout would either oversleep (and
         * count it as latency) or spin, taking the CPU the proxy needs. */
        uint64_t timeout_ns = 10000000;
        for (int i = 0; i < o->conns; i++) {
            struct cconn *c = &cs[i];
            if (new_conns && c->fd < 0 && !http_connect(ep, &a, c)) {
                errors++;
                continue;
            }
            if (c->connecting || c->busy || c->fd < 0)
                continue;
            if (interval && c->next_due > now) {
                if (c->next_due - now < timeout_ns)
                    timeout_ns = c->next_due - now;
                continue;
            }
            if (!new_conns) /* a new connection's latency counts from its connect */
                c->t_sched = interval ? c->next_due : now;
            if (interval)
                c->next_due += interval;
            if (send(c->fd, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
                errors++;
                close(c->fd);
                c->fd = -1;
                continue;
            }
            c->busy = true;
        }
        struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                              .tv_nsec = (long)(timeout_ns % 1000000000ull)};
        int n = epoll_pwait2(ep, evs, 256, &ts, NULL);
        for (int k = 0; k < n; k++) {
            struct cconn *c = evs[k].data.ptr;
            if (c->fd < 0)
                continue;
            if (c->connecting) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    errors++;
                    close(c->fd);
                    c->fd = -1;
                    continue;
                }
                c->connecting = false;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                continue;
            }
            ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                errors++;
                close(c->fd);
                c->fd = -1;
                continue;
            }
            c->len += (size_t)r;
            char *h = memmem(c->buf, c->len, "\r\n\r\n", 4);
            if (!h)
                continue;
            char *cl = memmem(c->buf, (size_t)(h - c->buf), "Content-Length: ", 16);
            size_t body = cl ? (size_t)atol(cl + 16) : 0;
            size_t total = (size_t)(h + 4 - c->buf) + body;
            if (c->len < total)
                continue;
            if (strncmp(c->buf, "HTTP/1.1 200", 12) != 0)
                errors++;
            memmove(c->buf, c->buf + total, c->len - total);
            c->len -= total;
            c->busy = false;
            lat_add(&l, now_ns() - c->t_sched);
            done++;
            if (new_conns) {
                close(c->fd);
                c->fd = -1;
            }
        }
    }
    double secs = (double)(now_ns() - start) / 1e9;
    emit("requests_per_s", (double)done / secs, "req/s");
    emit("requests", (double)done, "count");
    /* The client's own CPU per request: on these veths the receiving side's kernel work runs
     * in the sender's context, so this shows what each path costs the sandbox side. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
    if (done)
        emit("client_cpu_us_per_request", cpu / (double)done * 1e6, "us");
    emit("errors", (double)errors, "count");
    emit_lat("latency", &l);
    for (int i = 0; i < o->conns; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    close(ep);
    free(cs);
    free(l.v);
    return errors && !done ? 1 : 0;
}

static int tls_conns(const struct opts *o, bool bulk)
{
    struct sockaddr_in a = addr_of(o->ip, o->port);
    uint8_t hello[1024];
    size_t hl = build_hello(o->sni, hello);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct cconn *cs = calloc((size_t)o->conns, sizeof *cs);
    uint64_t start = now_ns(), end = start + (uint64_t)(o->duration * 1e9);
    struct lat l = {0};
    uint64_t done = 0, errors = 0, bytes = 0;
    for (int i = 0; i < o->conns; i++)
        cs[i].fd = -1;
    struct epoll_event evs[256];
    static char sink[65536];
    while (now_ns() < end) {
        for (int i = 0; i < o->conns; i++) {
            struct cconn *c = &cs[i];
            if (c->fd >= 0)
                continue;
            c->fd = nb_connect(&a);
            if (c->fd < 0) {
                errors++;
                continue;
            }
            c->connecting = true;
            c->got = 0;
            c->t_sched = now_ns();
            struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        }
        int n = epoll_wait(ep, evs, 256, 10);
        for (int k = 0; k < n; k++) {
            struct cconn *c = evs[k].data.ptr;
            if (c->connecting) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || send(c->fd, hello, hl, MSG_NOSIGNAL) != (ssize_t)hl) {
                    errors++;
                    close(c->fd);
                    c->fd = -1;
                    continue;
                }
                c->connecting = false;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                continue;
            }
            for (;;) {
                ssize_t r = recv(c->fd, sink, sizeof sink, 0);
                if (r > 0) {
                    if (c->got == 0 && !bulk)
                        lat_add(&l, now_ns() - c->t_sched);
                    c->got += (size_t)r;
                    bytes += (uint64_t)r;
                    if (bulk)
                        continue;
                    continue;
                }
                if (r < 0 && errno == EAGAIN)
                    break;
                /* EOF (the server flight is complete) or a reset. */
                if (r == 0 && c->got > 0)
                    done++;
                else
                    errors++;
                close(c->fd);
                c->fd = -1;
                break;
            }
        }
    }
    double secs = (double)(now_ns() - start) / 1e9;
    if (bulk) {
        emit("throughput", (double)bytes / secs / 1e6, "MB/s");
    } else {
        emit("connections", (double)done, "count");
        emit("connections_per_s", (double)done / secs, "conn/s");
        emit_lat("first_byte", &l);
    }
    emit("errors", (double)errors, "count");
    for (int i = 0; i < o->conns; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    close(ep);
    free(cs);
    free(l.v);
    return 0;
}

static int idle_conns(const struct opts *o)
{
    raise_nofile();
    struct sockaddr_in a = addr_of(o->ip, o->port);
    uint8_t hello[1024];
    size_t hl = build_hello(o->sni, hello);
    int *fds = calloc((size_t)o->count, sizeof *fds);
    int ready = 0;
    for (int i = 0; i < o->count; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct timeval tv = {5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
            send(fd, hello, hl, MSG_NOSIGNAL) != (ssize_t)hl) {
            close(fd);
            fds[i] = -1;
            continue;
        }
        char b[256];
        if (recv(fd, b, sizeof b, 0) <= 0) { /* the first byte of the server flight */
            close(fd);
            fds[i] = -1;
            continue;
        }
        fds[i] = fd;
        ready++;
    }
    printf("READY %d\n", ready);
    fflush(stdout);
    usleep((useconds_t)(o->hold * 1e6));
    for (int i = 0; i < o->count; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(
            stderr,
            "usage: egress_load serve-http|serve-tls|http|http-conns|tls-conns|tls-bulk|idle ADDR "
            "PORT [options]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct opts o = {.ip = argv[2],
                     .port = atoi(argv[3]),
                     .host = "allowed.test",
                     .sni = "allowed.test",
                     .conns = 16,
                     .duration = 5,
                     .count = 1000,
                     .hold = 10};
    long bytes = 1024;
    for (int i = 4; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--host"))
            o.host = v;
        else if (!strcmp(k, "--sni"))
            o.sni = v;
        else if (!strcmp(k, "--conns"))
            o.conns = atoi(v);
        else if (!strcmp(k, "--duration"))
            o.duration = atof(v);
        else if (!strcmp(k, "--rate"))
            o.rate = atof(v);
        else if (!strcmp(k, "--count"))
            o.count = atoi(v);
        else if (!strcmp(k, "--hold"))
            o.hold = atof(v);
        else if (!strcmp(k, "--bytes"))
            bytes = atol(v);
        else if (!strcmp(k, "--name"))
            g_name = v;
        else {
            fprintf(stderr, "egress_load: unknown option %s\n", k);
            return 2;
        }
    }
    raise_nofile();
    const char *m = argv[1];
    if (!strcmp(m, "serve-http"))
        serve(o.ip, o.port, false, 0);
    if (!strcmp(m, "serve-tls"))
        serve(o.ip, o.port, true, bytes);
    if (!strcmp(m, "http"))
        return http_client(&o, false);
    if (!strcmp(m, "http-conns")) {
        if (o.rate > 0) {
            fprintf(stderr, "egress_load: http-conns is a closed loop (no --rate)\n");
            return 2;
        }
        return http_client(&o, true);
    }
    if (!strcmp(m, "tls-conns"))
        return tls_conns(&o, false);
    if (!strcmp(m, "tls-bulk"))
        return tls_conns(&o, true);
    if (!strcmp(m, "idle"))
        return idle_conns(&o);
    fprintf(stderr, "egress_load: unknown mode %s\n", m);
    return 2;
}
