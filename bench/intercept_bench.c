/* bench/intercept_bench: what TLS interception with credential injection costs, as JSON lines,
 * with squid (Debian's squid-openssl, ssl-bump, request_header_add) doing the same job on the
 * same machine as the reference.
 *
 *   leaf_mint          minting a leaf certificate (P-256 key + signature), p50/p99 us
 *   keepalive          intercepted keep-alive requests (TLS both ways, policy per request,
 *                      injected header from the vault cache, response scrubbing) per second
 *                      of the proxy's CPU time (= per core); wall requests/s too
 *   handshakes         new intercepted TLS connections (full handshake, one request each,
 *                      upstream reused) per second of the proxy's CPU time
 *   resumed_handshakes the same, resuming the previous session (TLS 1.2 session ticket)
 *   latency            p50/p99 at 1,000 requests/s (10 keep-alive connections, one request
 *                      every 10 ms each) through the proxy, direct to the upstream, and the
 *                      difference ("added")
 *
 * The proxy is icpt-proxy (tests/unit/egress/intercept: the session engine, one thread = one core);
 * the upstream is an mbedtls HTTPS server in this process; the fake vault answers over a unix
 * socket here too. Per-core figures divide by the proxy process's own CPU time
 * (/proc/PID/stat), so other load on the machine slows the wall figures, not those.
 *
 * Usage: intercept_bench [--seconds N] [--conns N] [--no-squid] [--quick] [--only LIST] [--wrap CMD]
 *   --only LIST  a comma-separated subset of: mint, keepalive, handshakes, resumed, latency
 *   --wrap CMD   runs icpt-proxy under CMD (split on spaces), e.g. for an instruction profile:
 *                --wrap "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p" or
 *                --wrap "perf record -g -o /tmp/perf.data --" (the per-core figures then
 *                include the wrapper's own CPU)
 * Figures: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&
 *          build/bench/intercept_bench --seconds 10
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <sodium.h>
#include <uv.h>

#include "common/http.h"
#include "egress/intercept/ca.h"
#include "egress/intercept/intercept.h"

int main(int argc, char **argv);

#define NAME  "api.bench.test"
#define TOKEN "ghp_BenchToken_0123456789abcdefABCDEFxyz"

static char dir[256];
static int seconds = 5;
static int conns = 4;
static const char *only; /* NULL: everything */
static char *wrap;       /* command prefix for icpt-proxy, or NULL */

static bool want(const char *what)
{
    if (!only)
        return true;
    size_t n = strlen(what);
    for (const char *p = only; (p = strstr(p, what)); p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) {
        fprintf(stderr, "intercept_bench: failed: %s\n", cmd);
        exit(1);
    }
}

static void emit(const char *bench, const char *metric, double v, const char *unit)
{
    printf("{\"bench\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", bench, metric,
           v, unit);
    fflush(stdout);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- CPU time of a process tree --------------------------------------------------------- */

static double proc_cpu_one(pid_t pid, pid_t *ppid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *r = strrchr(buf, ')');
    if (!r)
        return 0;
    unsigned long utime = 0, stime = 0;
    int pp = 0;
    /* after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(r + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &pp, &utime, &stime) !=
        3)
        return 0;
    if (ppid)
        *ppid = pp;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The process and its direct children (squid's helpers). */
static double tree_cpu(pid_t root)
{
    double t = proc_cpu_one(root, NULL);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        pid_t pp = 0;
        if (pid <= 0 || pid == root)
            continue;
        double c = proc_cpu_one(pid, &pp);
        if (pp == root)
            t += c;
    }
    if (d)
        closedir(d);
    return t;
}

/* ---- the upstream: mbedtls HTTPS, one thread per connection -------------------------------- */

static mbedtls_ssl_config up_conf;
static mbedtls_x509_crt up_crt;
static mbedtls_pk_context up_key;
static struct intercept_signer *up_signer;
static int up_lfd;
static uint16_t up_port;

static int fd_send(void *ctx, const unsigned char *b, size_t n)
{
    ssize_t r = send(*(int *)ctx, b, n, MSG_NOSIGNAL);
    return r < 0 ? MBEDTLS_ERR_SSL_CONN_EOF : (int)r;
}

static int fd_recv(void *ctx, unsigned char *b, size_t n)
{
    ssize_t r = recv(*(int *)ctx, b, n, 0);
    return r < 0 ? MBEDTLS_ERR_SSL_CONN_EOF : (int)r;
}

static void *up_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_init(&ssl);
    mbedtls_ssl_setup(&ssl, &up_conf);
    mbedtls_ssl_set_bio(&ssl, &fd, fd_send, fd_recv, NULL);
    if (mbedtls_ssl_handshake(&ssl) == 0) {
        char buf[8192];
        size_t have = 0;
        static const char resp[] =
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
        for (;;) {
            int n = mbedtls_ssl_read(&ssl, (unsigned char *)buf + have, sizeof buf - 1 - have);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = 0;
            char *end;
            while ((end = strstr(buf, "\r\n\r\n"))) {
                size_t used = (size_t)(end + 4 - buf);
                if (mbedtls_ssl_write(&ssl, (const unsigned char *)resp, sizeof resp - 1) < 0)
                    goto out;
                memmove(buf, buf + used, have - used);
                have -= used;
                buf[have] = 0;
            }
            if (have == sizeof buf - 1)
                break;
        }
    }
out:
    mbedtls_ssl_free(&ssl);
    close(fd);
    return NULL;
}

static void *up_accept(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(up_lfd, NULL, NULL);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_create(&t, &at, up_conn, (void *)(intptr_t)fd);
        pthread_attr_destroy(&at);
    }
    return NULL;
}

static int listen_lo(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1024) < 0) {
        perror("listen");
        exit(1);
    }
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static void upstream_start(void)
{
    char p[512];
    mbedtls_ssl_config_init(&up_conf);
    mbedtls_x509_crt_init(&up_crt);
    mbedtls_pk_init(&up_key);
    snprintf(p, sizeof p, "%s/up.pem", dir);
    if (mbedtls_x509_crt_parse_file(&up_crt, p) != 0) {
        fprintf(stderr, "intercept_bench: cannot load %s\n", p);
        exit(1);
    }
    snprintf(p, sizeof p, "%s/up.key", dir);
    struct al_error err = {0};
    if (mbedtls_pk_parse_keyfile(&up_key, p, NULL, intercept_rng, NULL) != 0) {
        fprintf(stderr, "intercept_bench: cannot load %s\n", p);
        exit(1);
    }
    /* libcrypto signs the upstream's handshakes too, as it does the proxy's (the process
     * lives as long as the key: the signer is not freed). */
    if (intercept_signer_new(&up_key, &up_signer, &err) < 0) {
        fprintf(stderr, "intercept_bench: %s: %s\n", p, al_error_str(&err));
        exit(1);
    }
    mbedtls_ssl_config_defaults(&up_conf, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_TRANSPORT_STREAM,
                                MBEDTLS_SSL_PRESET_DEFAULT);
    mbedtls_ssl_conf_rng(&up_conf, intercept_rng, NULL);
    mbedtls_ssl_conf_own_cert(&up_conf, &up_crt, &up_key);
    up_lfd = listen_lo(&up_port);
    pthread_t t;
    pthread_create(&t, NULL, up_accept, NULL);
}

/* ---- the fake vault (its own loop and thread) ----------------------------------------------- */

static uv_loop_t vault_loop;
static char vault_sock[512];

struct parked {
    struct al_http_req *req;
    uv_timer_t t;
};

static void parked_closed(uv_handle_t *h)
{
    free(h->data);
}

static void parked_fire(uv_timer_t *t)
{
    struct parked *p = t->data;
    json_t *a = json_pack("{s:I,s:I,s:b,s:[]}", "since", (json_int_t)1, "generation", (json_int_t)1,
                          "full", 0, "changed");
    al_http_reply_json(p->req, 200, a);
    uv_close((uv_handle_t *)&p->t, parked_closed);
}

static void vault_fetch_done(struct al_http_req *req, int err)
{
    if (err < 0)
        return;
    char b64[256];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)TOKEN, strlen(TOKEN),
                      sodium_base64_VARIANT_ORIGINAL);
    json_t *o =
        json_pack("{s:s,s:i,s:I,s:s,s:i,s:[s],s:s}", "name", "bench/token", "version", 1,
                  "generation", (json_int_t)1, "secret_id", "b2k:0123456789abcdef0123456789abcdef",
                  "max_age_ms", 3600000, "bound_hosts", NAME, "value_b64", b64);
    al_http_reply_json(req, 200, o);
}

static void vault_on_request(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    if (strcmp(req->path, "/v1/fetch") == 0) {
        al_http_req_read_body(req, 0, vault_fetch_done);
        return;
    }
    char w[32] = "0";
    al_http_query_get(req->query, "wait_ms", w, sizeof w);
    struct parked *p = calloc(1, sizeof *p);
    p->req = req;
    uv_timer_init(&vault_loop, &p->t);
    p->t.data = p;
    uv_timer_start(&p->t, parked_fire, (uint64_t)atoi(w), 0);
}

static void *vault_main(void *arg)
{
    (void)arg;
    uv_run(&vault_loop, UV_RUN_DEFAULT);
    return NULL;
}

static void vault_start(void)
{
    uv_loop_init(&vault_loop);
    struct al_http_server *srv;
    struct al_http_server_opts o = {.on_request = vault_on_request};
    snprintf(vault_sock, sizeof vault_sock, "%s/vault.sock", dir);
    if (al_http_server_new(&vault_loop, &o, &srv) < 0 ||
        al_http_server_listen_unix(srv, vault_sock, 0600, NULL) < 0) {
        fprintf(stderr, "intercept_bench: cannot start the fake vault\n");
        exit(1);
    }
    pthread_t t;
    pthread_create(&t, NULL, vault_main, NULL);
}

/* ---- clients --------------------------------------------------------------------------------- */

static mbedtls_ssl_config cli_conf;

static mbedtls_ssl_config cli_conf12; /* TLS 1.2 with session tickets: resumption */

struct client {
    int fd;
    mbedtls_ssl_context ssl;
    bool open;
    bool resume;
    bool have_session;
    mbedtls_ssl_session session;
};

enum target { T_DIRECT, T_PROXY, T_SQUID };
static uint16_t proxy_port, squid_port;

static int tcp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int client_open(struct client *c, enum target t)
{
    bool resume = c->resume, have = c->have_session;
    mbedtls_ssl_session keep = c->session;
    memset(c, 0, sizeof *c);
    c->resume = resume;
    c->have_session = have;
    c->session = keep;
    uint16_t port = t == T_DIRECT ? up_port : t == T_PROXY ? proxy_port : squid_port;
    c->fd = tcp_connect(port);
    if (c->fd < 0)
        return -1;
    if (t == T_SQUID) {
        char req[256], buf[1024];
        int n = snprintf(req, sizeof req, "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\n\r\n", NAME,
                         up_port, NAME, up_port);
        send(c->fd, req, (size_t)n, MSG_NOSIGNAL);
        size_t have = 0;
        while (have < sizeof buf - 1) {
            ssize_t r = recv(c->fd, buf + have, sizeof buf - 1 - have, 0);
            if (r <= 0) {
                close(c->fd);
                return -1;
            }
            have += (size_t)r;
            buf[have] = 0;
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
            close(c->fd);
            return -1;
        }
    }
    mbedtls_ssl_init(&c->ssl);
    mbedtls_ssl_setup(&c->ssl, c->resume ? &cli_conf12 : &cli_conf);
    mbedtls_ssl_set_hostname(&c->ssl, NAME);
    mbedtls_ssl_set_bio(&c->ssl, &c->fd, fd_send, fd_recv, NULL);
    if (c->resume && c->have_session)
        mbedtls_ssl_set_session(&c->ssl, &c->session);
    if (mbedtls_ssl_handshake(&c->ssl) != 0) {
        mbedtls_ssl_free(&c->ssl);
        close(c->fd);
        return -1;
    }
    if (c->resume) {
        if (c->have_session)
            mbedtls_ssl_session_free(&c->session);
        mbedtls_ssl_session_init(&c->session);
        c->have_session = mbedtls_ssl_get_session(&c->ssl, &c->session) == 0;
    }
    c->open = true;
    return 0;
}

static void client_close(struct client *c)
{
    if (!c->open)
        return;
    mbedtls_ssl_close_notify(&c->ssl);
    mbedtls_ssl_free(&c->ssl);
    close(c->fd);
    c->open = false;
}

/* One request, one whole response (Content-Length framed). */
static int client_request(struct client *c, enum target t)
{
    char req[256];
    int n =
        t == T_SQUID
            ? snprintf(req, sizeof req, "GET /bench HTTP/1.1\r\nHost: %s:%u\r\n\r\n", NAME, up_port)
            : snprintf(req, sizeof req, "GET /bench HTTP/1.1\r\nHost: %s\r\n\r\n", NAME);
    if (mbedtls_ssl_write(&c->ssl, (const unsigned char *)req, (size_t)n) != n)
        return -1;
    char buf[4096];
    size_t have = 0;
    for (;;) {
        int r = mbedtls_ssl_read(&c->ssl, (unsigned char *)buf + have, sizeof buf - 1 - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        char *cl = strcasestr(buf, "Content-Length:");
        size_t want = (size_t)(end + 4 - buf) + (cl ? (size_t)atoi(cl + 15) : 0);
        if (have >= want)
            return strncmp(buf + 9, "200", 3) == 0 ? 0 : -1;
    }
}

/* ---- measurements ---------------------------------------------------------------------------- */

struct run {
    enum target t;
    bool new_conn; /* one connection per request */
    bool resume;   /* ... resuming the previous session (TLS 1.2 ticket) */
    uint64_t end_ns;
    uint64_t interval_ns; /* paced (latency), 0 = closed loop */
    atomic_ulong done, errors;
    uint64_t *lat;
    size_t n_lat, cap_lat;
    pthread_mutex_t lk;
};

static void *run_thread(void *arg)
{
    struct run *r = arg;
    struct client c = {0};
    c.resume = r->resume;
    uint64_t next = now_ns();
    while (now_ns() < r->end_ns) {
        if (r->interval_ns) {
            uint64_t now = now_ns();
            if (now < next) {
                struct timespec ts = {0, (long)(next - now)};
                nanosleep(&ts, NULL);
            }
            next += r->interval_ns;
        }
        if (!c.open && client_open(&c, r->t) < 0) {
            atomic_fetch_add(&r->errors, 1);
            usleep(1000);
            continue;
        }
        uint64_t t0 = now_ns();
        if (client_request(&c, r->t) < 0) {
            atomic_fetch_add(&r->errors, 1);
            client_close(&c);
            continue;
        }
        uint64_t dt = now_ns() - t0;
        atomic_fetch_add(&r->done, 1);
        if (r->lat) {
            pthread_mutex_lock(&r->lk);
            if (r->n_lat < r->cap_lat)
                r->lat[r->n_lat++] = dt;
            pthread_mutex_unlock(&r->lk);
        }
        if (r->new_conn)
            client_close(&c);
    }
    client_close(&c);
    if (c.have_session)
        mbedtls_ssl_session_free(&c.session);
    return NULL;
}

static void measure(struct run *r, int threads, int secs)
{
    r->end_ns = now_ns() + (uint64_t)secs * 1000000000ull;
    pthread_mutex_init(&r->lk, NULL);
    pthread_t th[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, run_thread, r);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
}

static void throughput(const char *who, enum target t, pid_t pid)
{
    for (int mode = 0; mode < 3; mode++) {
        if (!want(mode == 0 ? "keepalive" : mode == 1 ? "handshakes" : "resumed"))
            continue;
        struct run r = {.t = t, .new_conn = mode >= 1, .resume = mode == 2};
        /* warm up: leaves minted, upstream pooled, vault cached */
        struct run w = {.t = t, .new_conn = false};
        measure(&w, 1, 1);
        double c0 = tree_cpu(pid);
        uint64_t t0 = now_ns();
        measure(&r, conns, seconds);
        double cpu = tree_cpu(pid) - c0;
        double wall = (double)(now_ns() - t0) / 1e9;
        char bench[64];
        snprintf(bench, sizeof bench, "%s_%s", who,
                 mode == 0   ? "keepalive"
                 : mode == 1 ? "handshakes"
                             : "resumed_handshakes");
        emit(bench, "per_core_per_s", cpu > 0 ? (double)r.done / cpu : 0,
             mode ? "handshakes/s" : "requests/s");
        emit(bench, "wall_per_s", (double)r.done / wall, mode ? "handshakes/s" : "requests/s");
        emit(bench, "proxy_cpu", cpu / wall, "cores");
        emit(bench, "errors", (double)atomic_load(&r.errors), "count");
    }
}

/* p50/p99 at 1,000 requests/s. */
static void latency(enum target t, double *p50, double *p99)
{
    struct run r = {.t = t, .interval_ns = 10000000ull, .cap_lat = 200000};
    r.lat = calloc(r.cap_lat, sizeof *r.lat);
    measure(&r, 10, seconds);
    qsort(r.lat, r.n_lat, sizeof *r.lat, cmp_u64);
    *p50 = r.n_lat ? (double)r.lat[r.n_lat / 2] / 1000.0 : 0;
    *p99 = r.n_lat ? (double)r.lat[(size_t)((double)r.n_lat * 0.99)] / 1000.0 : 0;
    free(r.lat);
}

static void leaf_mint(void)
{
    const char *names[] = {"**.bench.test"};
    struct intercept_ca_opts o = {
        .sandbox_id = "bench", .names = names, .n_names = 1, .max_leaves = 1000};
    struct intercept_ca *ca;
    if (intercept_ca_new(&o, &ca, NULL) < 0)
        return;
    int n = 200;
    uint64_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "h%d.bench.test", i);
        struct intercept_leaf *l;
        uint64_t t0 = now_ns();
        intercept_ca_leaf(ca, name, &l, NULL);
        t[i] = now_ns() - t0;
        intercept_leaf_unref(l);
    }
    qsort(t, (size_t)n, sizeof *t, cmp_u64);
    emit("leaf_mint", "p50_us", (double)t[n / 2] / 1000.0, "us");
    emit("leaf_mint", "p99_us", (double)t[n * 99 / 100] / 1000.0, "us");
    uint64_t t0 = now_ns();
    for (int i = 0; i < 10000; i++) {
        struct intercept_leaf *l;
        intercept_ca_leaf(ca, "h7.bench.test", &l, NULL);
        intercept_leaf_unref(l);
    }
    emit("leaf_cache_hit", "mean_us", (double)(now_ns() - t0) / 10000.0 / 1000.0, "us");
    free(t);
    intercept_ca_unref(ca);
}

/* ---- the proxies ----------------------------------------------------------------------------- */

static pid_t spawn(const char *log, char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (wrap) {
            char *args[64];
            int n = 0;
            for (char *tok = strtok(wrap, " "); tok && n < 40; tok = strtok(NULL, " "))
                args[n++] = tok;
            for (int i = 0; argv[i] && n < 63; i++)
                args[n++] = argv[i];
            args[n] = NULL;
            execvp(args[0], args);
            _exit(127);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static uint16_t wait_port_file(const char *path)
{
    for (int i = 0; i < 2400; i++) { /* a minute: under --wrap valgrind it starts slowly */
        FILE *f = fopen(path, "r");
        unsigned p = 0;
        if (f) {
            if (fscanf(f, "%u", &p) != 1)
                p = 0;
            fclose(f);
        }
        if (p)
            return (uint16_t)p;
        usleep(25000);
    }
    return 0;
}

static pid_t proxy_start(void)
{
    char bin[512], pol[512], pf[512], roots[512], log[512], up[64];
    snprintf(bin, sizeof bin, "%s/icpt-proxy", AIRLOCK_BIN_DIR);
    snprintf(pol, sizeof pol, "%s/policy.yaml", dir);
    snprintf(pf, sizeof pf, "%s/proxy.port", dir);
    snprintf(roots, sizeof roots, "%s/roots.pem", dir);
    snprintf(log, sizeof log, "%s/proxy.log", dir);
    snprintf(up, sizeof up, "127.0.0.1:%u", up_port);
    FILE *f = fopen(pol, "w");
    fprintf(f,
            "version: 1\nname: bench\nrules:\n  - name: api\n    hosts: [%s]\n    methods: [GET]\n"
            "    inject:\n      - header: Authorization\n        value: \"Bearer "
            "${secret:bench/token}\"\n",
            NAME);
    fclose(f);
    char *argv[] = {bin, "--listen",       "127.0.0.1:0", "--port-file",
                    pf,  "--name",         NAME,          "--upstream",
                    up,  "--upstream-ca",  roots,         "--policy",
                    pol, "--vault-socket", vault_sock,    NULL};
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "intercept_bench: %s not built\n", bin);
        exit(1);
    }
    pid_t pid = spawn(log, argv);
    proxy_port = wait_port_file(pf);
    if (!proxy_port) {
        fprintf(stderr, "intercept_bench: icpt-proxy did not start (see %s)\n", log);
        exit(1);
    }
    usleep(200000);
    return pid;
}

static pid_t squid_start(void)
{
    if (access("/usr/sbin/squid", X_OK) != 0 ||
        access("/usr/lib/squid/security_file_certgen", X_OK) != 0)
        return -1;
    sh("mkdir -p %s/squid && cd %s && cp ca.key squid/bump.key && cp ca.pem squid/bump.pem && "
       "printf '127.0.0.1 %s\\n' > squid/hosts && "
       "/usr/lib/squid/security_file_certgen -c -s squid/ssl_db -M 16MB >/dev/null 2>&1 && "
       "chown -R proxy:proxy squid && chmod 755 %s",
       dir, dir, NAME, dir);
    uint16_t port;
    int lfd = listen_lo(&port); /* reserve a free port number */
    close(lfd);
    squid_port = port;
    char conf[512];
    snprintf(conf, sizeof conf, "%s/squid/squid.conf", dir);
    FILE *f = fopen(conf, "w");
    fprintf(f,
            "http_port 127.0.0.1:%u ssl-bump tls-cert=%s/squid/bump.pem tls-key=%s/squid/bump.key "
            "generate-host-certificates=on dynamic_cert_mem_cache_size=16MB\n"
            "sslcrtd_program /usr/lib/squid/security_file_certgen -s %s/squid/ssl_db -M 16MB\n"
            "sslcrtd_children 2\n"
            "acl step1 at_step SslBump1\nssl_bump peek step1\nssl_bump bump all\n"
            "tls_outgoing_options cafile=%s/roots.pem\n"
            "hosts_file %s/squid/hosts\n"
            "acl all_ports port 1-65535\nhttp_access allow all\n"
            "request_header_add Authorization \"Bearer " TOKEN "\" all\n"
            "cache deny all\ncache_mem 8 MB\naccess_log none\ncache_log %s/squid/cache.log\n"
            "pid_filename %s/squid/squid.pid\ncoredump_dir %s/squid\nworkers 1\n"
            "shutdown_lifetime 1 seconds\nserver_persistent_connections "
            "on\nclient_persistent_connections on\n",
            port, dir, dir, dir, dir, dir, dir, dir, dir);
    fclose(f);
    char log[512];
    snprintf(log, sizeof log, "%s/squid/out.log", dir);
    char *argv[] = {"/usr/sbin/squid", "-N", "-f", conf, NULL};
    pid_t pid = spawn(log, argv);
    for (int i = 0; i < 200; i++) {
        int fd = tcp_connect(port);
        if (fd >= 0) {
            close(fd);
            usleep(200000);
            return pid;
        }
        usleep(50000);
    }
    fprintf(stderr, "intercept_bench: squid did not start (see %s)\n", log);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return -1;
}

static void stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        for (int i = 0; i < 100; i++) {
            if (waitpid(pid, NULL, WNOHANG) == pid)
                return;
            usleep(20000);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

int main(int argc, char **argv)
{
    bool squid = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-squid") == 0)
            squid = false;
        else if (strcmp(argv[i], "--quick") == 0)
            seconds = 1;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--wrap") == 0 && i + 1 < argc)
            wrap = argv[++i];
        else {
            fprintf(stderr,
                    "usage: intercept_bench [--seconds N] [--conns N] [--no-squid] [--quick] "
                    "[--only mint,keepalive,handshakes,resumed,latency] [--wrap CMD]\n");
            return 2;
        }
    }
    if (conns < 1 || conns > 64 || seconds < 1)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    if (intercept_init(NULL) < 0)
        return 1;
    snprintf(dir, sizeof dir, "/tmp/al-icpt-bench-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(dir))
        return 1;
    sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "
       "ca.key -out ca.pem "
       "-days 2 -subj '/CN=airlock bench CA' -addext basicConstraints=critical,CA:TRUE "
       "-addext keyUsage=critical,keyCertSign,cRLSign >/dev/null 2>&1 && cp ca.pem roots.pem && "
       "printf 'subjectAltName=DNS:%s\\n' > san.ext && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout up.key -out up.csr "
       "-subj '/CN=%s' "
       ">/dev/null 2>&1 && openssl x509 -req -in up.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
       "-out up.pem "
       "-days 2 -extfile san.ext >/dev/null 2>&1",
       dir, NAME, NAME);
    upstream_start();
    vault_start();
    /* Clients do not verify (the proxy's CA has name constraints mbedtls cannot parse; the
     * tests check verification): the cost measured is the proxy's. */
    mbedtls_ssl_config_init(&cli_conf);
    mbedtls_ssl_config_defaults(&cli_conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                MBEDTLS_SSL_PRESET_DEFAULT);
    mbedtls_ssl_conf_rng(&cli_conf, intercept_rng, NULL);
    mbedtls_ssl_conf_authmode(&cli_conf, MBEDTLS_SSL_VERIFY_NONE);
    mbedtls_ssl_config_init(&cli_conf12);
    mbedtls_ssl_config_defaults(&cli_conf12, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                MBEDTLS_SSL_PRESET_DEFAULT);
    mbedtls_ssl_conf_rng(&cli_conf12, intercept_rng, NULL);
    mbedtls_ssl_conf_authmode(&cli_conf12, MBEDTLS_SSL_VERIFY_NONE);
    mbedtls_ssl_conf_max_tls_version(&cli_conf12, MBEDTLS_SSL_VERSION_TLS1_2);
    mbedtls_ssl_conf_session_tickets(&cli_conf12, MBEDTLS_SSL_SESSION_TICKETS_ENABLED);

    if (want("mint"))
        leaf_mint();
    double d50 = 0, d99 = 0, p50, p99;
    if (want("latency")) {
        latency(T_DIRECT, &d50, &d99);
        emit("direct_latency_1000rps", "p50_us", d50, "us");
        emit("direct_latency_1000rps", "p99_us", d99, "us");
    }

    pid_t proxy = proxy_start();
    throughput("intercept", T_PROXY, proxy);
    if (want("latency")) {
        latency(T_PROXY, &p50, &p99);
        emit("intercept_latency_1000rps", "p50_us", p50, "us");
        emit("intercept_latency_1000rps", "p99_us", p99, "us");
        emit("intercept_latency_1000rps", "added_p50_ms", (p50 - d50) / 1000.0, "ms");
        emit("intercept_latency_1000rps", "added_p99_ms", (p99 - d99) / 1000.0, "ms");
    }
    stop(proxy);

    if (squid) {
        pid_t sq = squid_start();
        if (sq > 0) {
            throughput("squid_sslbump", T_SQUID, sq);
            if (want("latency")) {
                latency(T_SQUID, &p50, &p99);
                emit("squid_sslbump_latency_1000rps", "p50_us", p50, "us");
                emit("squid_sslbump_latency_1000rps", "p99_us", p99, "us");
                emit("squid_sslbump_latency_1000rps", "added_p50_ms", (p50 - d50) / 1000.0, "ms");
                emit("squid_sslbump_latency_1000rps", "added_p99_ms", (p99 - d99) / 1000.0, "ms");
            }
            stop(sq);
        } else {
            fprintf(stderr, "intercept_bench: squid (squid-openssl) not available: no reference\n");
        }
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "intercept_bench: cleanup of %s failed\n", dir);
    return 0;
}
