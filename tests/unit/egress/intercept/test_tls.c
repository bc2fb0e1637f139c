/* tests/unit/egress/intercept/test_tls: TLS toward sandboxes (the proxy as server with a leaf of
 * the sandbox CA, against OpenSSL clients) and toward upstreams (the proxy as client verifying
 * against test roots, against OpenSSL servers), on non-blocking loopback sockets. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <psa/crypto.h>
#include <sodium.h>

#include "al_test.h"
#include "egress/intercept/ca.h"
#include "egress/intercept/intercept.h"
#include "egress/intercept/tls.h"

static char dir[256];

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    ck_assert_msg(st == 0, "command failed (%d): %s", st, cmd);
}

static void setup(void)
{
    al_test_tmpdir(dir, sizeof dir, "icpt-tls");
}

static void teardown(void)
{
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}

static const char *peer_script(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/tests/unit/egress/intercept/tls_peer.py", al_test_srcdir());
    return p;
}

static void write_text(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* ---- blocking helpers over the non-blocking API ---------------------------------------- */

static void wait_want(struct intercept_tls *t, int ms)
{
    int w = intercept_tls_want(t);
    struct pollfd p = {.fd = intercept_tls_fd(t),
                       .events = (short)(((w & INTERCEPT_TLS_WANT_READ) ? POLLIN : 0) |
                                         ((w & INTERCEPT_TLS_WANT_WRITE) ? POLLOUT : 0))};
    if (!p.events)
        p.events = POLLIN;
    poll(&p, 1, ms);
}

static int hs(struct intercept_tls *t)
{
    for (int i = 0; i < 2000; i++) {
        int r = intercept_tls_handshake(t);
        if (r == 0) {
            while (intercept_tls_out_pending(t)) {
                int f = intercept_tls_flush(t);
                if (f < 0 && f != -EAGAIN)
                    return f;
                if (f == -EAGAIN)
                    wait_want(t, 100);
            }
            return 0;
        }
        if (r != -EAGAIN)
            return r;
        wait_want(t, 100);
    }
    return -ETIMEDOUT;
}

static ssize_t rd(struct intercept_tls *t, void *buf, size_t len)
{
    for (int i = 0; i < 2000; i++) {
        ssize_t n = intercept_tls_read(t, buf, len);
        if (n != -EAGAIN)
            return n;
        wait_want(t, 100);
    }
    return -ETIMEDOUT;
}

/* Reads until a newline (or close). */
static ssize_t rd_line(struct intercept_tls *t, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len - 1) {
        ssize_t n = rd(t, buf + got, len - 1 - got);
        if (n <= 0) {
            buf[got] = 0;
            return got ? (ssize_t)got : n;
        }
        got += (size_t)n;
        buf[got] = 0;
        if (memchr(buf, '\n', got))
            break;
    }
    return (ssize_t)got;
}

static int wr_all(struct intercept_tls *t, const void *buf, size_t len)
{
    size_t off = 0;
    for (int i = 0; off < len && i < 100000; i++) {
        ssize_t n = intercept_tls_write(t, (const char *)buf + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n != -EAGAIN)
            return (int)n;
        wait_want(t, 100);
    }
    while (intercept_tls_out_pending(t)) {
        int f = intercept_tls_flush(t);
        if (f < 0 && f != -EAGAIN)
            return f;
        if (f == -EAGAIN)
            wait_want(t, 100);
    }
    return off == len ? 0 : -ETIMEDOUT;
}

static void finish_close(struct intercept_tls *t)
{
    intercept_tls_close_notify(t);
    for (int i = 0; i < 50 && intercept_tls_out_pending(t); i++) {
        wait_want(t, 100);
        intercept_tls_flush(t);
    }
}

static int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static int accept_nb(int lfd)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 15000), 1);
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    return fd;
}

/* ---- the sandbox side ------------------------------------------------------------------- */

struct sbx {
    struct intercept_ca *ca;
    struct intercept_tls_server *srv;
    char ca_file[512];
};

static void sbx_init(struct sbx *s, bool no_tls13)
{
    const char *names[] = {"api.github.test", "*.example.test"};
    struct intercept_ca_opts o = {.sandbox_id = "sb-tls", .names = names, .n_names = 2};
    struct al_error err = {0};
    ck_assert_int_eq(intercept_ca_new(&o, &s->ca, &err), 0);
    struct intercept_tls_server_opts so = {.ca = s->ca, .no_tls13 = no_tls13};
    ck_assert_msg(intercept_tls_server_new(&so, &s->srv, &err) == 0, "%s", err.msg);
    write_text("sandbox-ca.pem", intercept_ca_pem(s->ca));
    snprintf(s->ca_file, sizeof s->ca_file, "%s/sandbox-ca.pem", dir);
}

static void sbx_free(struct sbx *s)
{
    intercept_tls_server_unref(s->srv);
    intercept_ca_unref(s->ca);
}

static FILE *start_client(uint16_t port, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s client --port %u %s", peer_script(), port, extra);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    return f;
}

/* Reads the client's JSON lines (one per connection). */
static json_t *client_results(FILE *f)
{
    json_t *arr = json_array();
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        if (j)
            json_array_append_new(arr, j);
    }
    pclose(f);
    return arr;
}

static const char *jstr(json_t *arr, size_t i, const char *k)
{
    json_t *o = json_array_get(arr, i);
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static bool jtrue(json_t *arr, size_t i, const char *k)
{
    return json_is_true(json_object_get(json_array_get(arr, i), k));
}

/* Serves one connection: optional prefix read first (like egress's peek), handshake, one
 * line, answer "hello:<line>", close_notify. Returns the handshake result. */
static int serve_one(struct sbx *s, int lfd, const char *name, size_t prefix, bool *resumed,
                     struct intercept_tls **keep)
{
    int fd = accept_nb(lfd);
    char pre[4096];
    size_t pl = 0;
    while (pl < prefix) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 5000);
        ssize_t n = recv(fd, pre + pl, prefix - pl, 0);
        if (n <= 0)
            break;
        pl += (size_t)n;
    }
    struct intercept_tls *t = NULL;
    struct al_error err = {0};
    int r = intercept_tls_accept(s->srv, fd, name, pre, pl, &t, &err);
    ck_assert_msg(r == 0, "accept: %s", err.msg);
    r = hs(t);
    if (r == 0) {
        ck_assert(intercept_tls_handshake_done(t));
        if (resumed)
            *resumed = intercept_tls_resumed(t);
        char line[1024];
        ssize_t n = rd_line(t, line, sizeof line);
        if (n > 0) {
            char ans[1100];
            snprintf(ans, sizeof ans, "hello:%s", line);
            ck_assert_int_eq(wr_all(t, ans, strlen(ans)), 0);
        }
        finish_close(t);
    }
    if (keep) {
        *keep = t;
    } else {
        intercept_tls_free(t);
        close(fd);
    }
    return r;
}

START_TEST(sandbox_tls13_alpn_and_data)
{
    struct sbx s;
    sbx_init(&s, false);
    uint16_t port;
    int lfd = listen_any(&port);
    char extra[1024];
    snprintf(extra, sizeof extra,
             "--name api.github.test --ca %s --alpn h2,http/1.1 --send 'GET /\n'", s.ca_file);
    FILE *cf = start_client(port, extra);
    struct intercept_tls *t = NULL;
    ck_assert_int_eq(serve_one(&s, lfd, "api.github.test", 0, NULL, &t), 0);
    ck_assert_str_eq(intercept_tls_version(t), "TLSv1.3");
    ck_assert_str_eq(intercept_tls_alpn(t), "http/1.1");
    ck_assert_str_eq(intercept_tls_sni(t), "api.github.test");
    ck_assert_uint_gt(intercept_tls_bytes_in(t), 0);
    ck_assert_uint_gt(intercept_tls_bytes_out(t), 0);
    close(intercept_tls_fd(t));
    intercept_tls_free(t);
    json_t *res = client_results(cf);
    ck_assert_uint_eq(json_array_size(res), 1);
    ck_assert_msg(jtrue(res, 0, "ok"), "client: %s", jstr(res, 0, "error"));
    ck_assert_str_eq(jstr(res, 0, "version"), "TLSv1.3");
    ck_assert_str_eq(jstr(res, 0, "alpn"), "http/1.1");
    ck_assert_str_eq(jstr(res, 0, "reply"), "hello:GET /\n");
    json_decref(res);
    close(lfd);
    sbx_free(&s);
}
END_TEST

START_TEST(sandbox_tls12_and_wildcard_name)
{
    struct sbx s;
    sbx_init(&s, false);
    uint16_t port;
    int lfd = listen_any(&port);
    char extra[1024];
    snprintf(extra, sizeof extra, "--name a.example.test --ca %s --max12 --send 'x\n'", s.ca_file);
    FILE *cf = start_client(port, extra);
    struct intercept_tls *t = NULL;
    ck_assert_int_eq(serve_one(&s, lfd, "a.example.test", 0, NULL, &t), 0);
    ck_assert_str_eq(intercept_tls_version(t), "TLSv1.2");
    ck_assert_ptr_nonnull(strstr(intercept_tls_ciphersuite(t), "ECDHE-ECDSA"));
    ck_assert_ptr_null(intercept_tls_alpn(t)); /* the client offered none */
    close(intercept_tls_fd(t));
    intercept_tls_free(t);
    json_t *res = client_results(cf);
    ck_assert_msg(jtrue(res, 0, "ok"), "client: %s", jstr(res, 0, "error"));
    ck_assert_str_eq(jstr(res, 0, "version"), "TLSv1.2");
    ck_assert_str_eq(jstr(res, 0, "reply"), "hello:x\n");
    json_decref(res);
    close(lfd);
    sbx_free(&s);
}
END_TEST

/* The proxy read part of the ClientHello (or all of it) before handing over. */
START_TEST(sandbox_prefix_bytes)
{
    struct sbx s;
    sbx_init(&s, false);
    size_t prefixes[] = {1, 5, 200};
    for (size_t i = 0; i < 3; i++) {
        uint16_t port;
        int lfd = listen_any(&port);
        char extra[1024];
        snprintf(extra, sizeof extra, "--name api.github.test --ca %s --send 'p\n'", s.ca_file);
        FILE *cf = start_client(port, extra);
        ck_assert_int_eq(serve_one(&s, lfd, "api.github.test", prefixes[i], NULL, NULL), 0);
        json_t *res = client_results(cf);
        ck_assert_msg(jtrue(res, 0, "ok"), "prefix %zu: %s", prefixes[i], jstr(res, 0, "error"));
        ck_assert_str_eq(jstr(res, 0, "reply"), "hello:p\n");
        json_decref(res);
        close(lfd);
    }
    sbx_free(&s);
}
END_TEST

START_TEST(sandbox_session_resumption)
{
    for (int v = 0; v < 2; v++) {
        struct sbx s;
        sbx_init(&s, false);
        uint16_t port;
        int lfd = listen_any(&port);
        char extra[1024];
        snprintf(extra, sizeof extra, "--name api.github.test --ca %s --conns 3 --send 'r\n' %s",
                 s.ca_file, v ? "--max12" : "");
        FILE *cf = start_client(port, extra);
        bool resumed[3] = {0};
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(serve_one(&s, lfd, "api.github.test", 0, &resumed[i], NULL), 0);
        json_t *res = client_results(cf);
        ck_assert_uint_eq(json_array_size(res), 3);
        ck_assert(!resumed[0]);
        ck_assert_msg(resumed[1] && resumed[2], "tls%s: not resumed", v ? "1.2" : "1.3");
        ck_assert(jtrue(res, 1, "reused"));
        ck_assert_str_eq(jstr(res, 2, "reply"), "hello:r\n");
        json_decref(res);
        close(lfd);
        sbx_free(&s);
    }
}
END_TEST

START_TEST(sandbox_refusals)
{
    struct sbx s;
    sbx_init(&s, false);
    struct al_error err = {0};
    struct intercept_tls *t;
    /* No leaf outside the CA's constraints: refused before any byte. */
    ck_assert_int_eq(intercept_tls_accept(s.srv, -1, "evil.test", NULL, 0, &t, &err), -EPERM);

    /* h2 only: no common application protocol. */
    uint16_t port;
    int lfd = listen_any(&port);
    char extra[1024];
    snprintf(extra, sizeof extra, "--name api.github.test --ca %s --alpn h2", s.ca_file);
    FILE *cf = start_client(port, extra);
    int fd = accept_nb(lfd);
    ck_assert_int_eq(intercept_tls_accept(s.srv, fd, "api.github.test", NULL, 0, &t, &err), 0);
    int r = hs(t);
    ck_assert_int_eq(r, -EPROTO);
    ck_assert_str_eq(intercept_tls_reason(t), "no_application_protocol");
    intercept_tls_free(t);
    close(fd);
    json_t *res = client_results(cf);
    ck_assert(!jtrue(res, 0, "ok"));
    json_decref(res);

    /* A client that does not trust the sandbox CA (system roots only). */
    snprintf(extra, sizeof extra, "--name api.github.test");
    cf = start_client(port, extra);
    fd = accept_nb(lfd);
    ck_assert_int_eq(intercept_tls_accept(s.srv, fd, "api.github.test", NULL, 0, &t, &err), 0);
    r = hs(t);
    if (r == 0) {
        /* TLS 1.3: the client's alert arrives after our Finished. */
        char b[16];
        r = (int)rd(t, b, sizeof b);
    }
    ck_assert_int_lt(r, 0);
    ck_assert_msg(strcmp(intercept_tls_reason(t), "peer_alert") == 0 &&
                      strstr(intercept_tls_error(t), "unknown_ca"),
                  "reason %s: %s", intercept_tls_reason(t), intercept_tls_error(t));
    intercept_tls_free(t);
    close(fd);
    res = client_results(cf);
    ck_assert(!jtrue(res, 0, "ok"));
    ck_assert_ptr_nonnull(strstr(jstr(res, 0, "error"), "CERTIFICATE_VERIFY_FAILED"));
    json_decref(res);

    /* SNI other than the decided name (the hello the proxy decided on said otherwise). */
    snprintf(extra, sizeof extra, "--name b.example.test --ca %s", s.ca_file);
    cf = start_client(port, extra);
    fd = accept_nb(lfd);
    ck_assert_int_eq(intercept_tls_accept(s.srv, fd, "api.github.test", NULL, 0, &t, &err), 0);
    ck_assert_int_eq(hs(t), -EPROTO);
    ck_assert_str_eq(intercept_tls_reason(t), "sni_mismatch");
    intercept_tls_free(t);
    close(fd);
    json_decref(client_results(cf));
    close(lfd);
    sbx_free(&s);
}
END_TEST

/* A deny after interception: a fatal alert the client reports. */
START_TEST(sandbox_alert_after_handshake)
{
    struct sbx s;
    sbx_init(&s, false);
    uint16_t port;
    int lfd = listen_any(&port);
    char extra[1024];
    snprintf(extra, sizeof extra, "--name api.github.test --ca %s --send 'q\n'", s.ca_file);
    FILE *cf = start_client(port, extra);
    int fd = accept_nb(lfd);
    struct intercept_tls *t;
    ck_assert_int_eq(intercept_tls_accept(s.srv, fd, "api.github.test", NULL, 0, &t, NULL), 0);
    ck_assert_int_eq(hs(t), 0);
    char line[64];
    ck_assert_int_gt(rd_line(t, line, sizeof line), 0);
    ck_assert_int_eq(intercept_tls_send_alert(t, MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED), 0);
    intercept_tls_free(t);
    close(fd);
    json_t *res = client_results(cf);
    ck_assert_ptr_nonnull(strstr(jstr(res, 0, "read_error"), "ACCESS_DENIED"));
    json_decref(res);
    close(lfd);
    sbx_free(&s);
}
END_TEST

/* ---- the upstream side ------------------------------------------------------------------ */

static void make_upstream_pki(void)
{
    sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "
       "ca.key "
       "-out roots.pem -days 2 -subj '/CN=airlock test upstream CA' >/dev/null 2>&1",
       dir);
    sh("cd %s && printf 'subjectAltName=DNS:upstream.test\\n' > san.ext && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout up.key -out up.csr "
       "-subj '/CN=upstream.test' >/dev/null 2>&1 && "
       "openssl x509 -req -in up.csr -CA roots.pem -CAkey ca.key -CAcreateserial -out up.pem -days "
       "2 "
       "-extfile san.ext >/dev/null 2>&1",
       dir);
    sh("cd %s && openssl req -newkey rsa:2048 -nodes -keyout uprsa.key -out uprsa.csr "
       "-subj '/CN=upstream.test' >/dev/null 2>&1 && "
       "openssl x509 -req -in uprsa.csr -CA roots.pem -CAkey ca.key -CAcreateserial -out uprsa.pem "
       "-days 2 "
       "-extfile san.ext >/dev/null 2>&1",
       dir);
    /* A server certificate from a CA the proxy does not trust. */
    sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "
       "self.key "
       "-out self.pem -days 2 -subj '/CN=upstream.test' -addext subjectAltName=DNS:upstream.test "
       ">/dev/null 2>&1",
       dir);
}

static pid_t start_server(const char *cert, const char *key, const char *extra, uint16_t *port)
{
    char pf[512];
    snprintf(pf, sizeof pf, "%s/port", dir);
    unlink(pf);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "exec python3 %s server --port-file %s --cert %s/%s --key %s/%s %s", peer_script(),
                 pf, dir, cert, dir, key, extra);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(pf, "r");
        if (f) {
            unsigned p = 0;
            if (fscanf(f, "%u", &p) == 1 && p) {
                fclose(f);
                *port = (uint16_t)p;
                return pid;
            }
            fclose(f);
        }
        usleep(50000);
    }
    ck_abort_msg("the test TLS server did not start");
    return -1;
}

static void stop_server(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static int connect_nb(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int r = connect(fd, (struct sockaddr *)&a, sizeof a);
    ck_assert(r == 0 || errno == EINPROGRESS);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    ck_assert_int_eq(poll(&p, 1, 5000), 1);
    return fd;
}

static struct intercept_tls_client *client_cfg(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/roots.pem", dir);
    struct intercept_tls_client_opts o = {.ca_file = path};
    struct intercept_tls_client *c = NULL;
    struct al_error err = {0};
    ck_assert_msg(intercept_tls_client_new(&o, &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(intercept_tls_client_roots(c), 1);
    return c;
}

START_TEST(upstream_verified_exchange)
{
    make_upstream_pki();
    struct intercept_tls_client *c = client_cfg();
    const char *certs[][2] = {{"up.pem", "up.key"}, {"uprsa.pem", "uprsa.key"}};
    for (int k = 0; k < 2; k++) {
        for (int v = 0; v < 2; v++) {
            uint16_t port;
            pid_t pid = start_server(certs[k][0], certs[k][1],
                                     v ? "--max12 --alpn http/1.1" : "--alpn http/1.1", &port);
            int fd = connect_nb(port);
            struct intercept_tls *t;
            ck_assert_int_eq(intercept_tls_connect(c, fd, "upstream.test", 0, &t, NULL), 0);
            int r = hs(t);
            if (r == -EPROTO && k == 1 && v == 1) {
                /* TLS 1.2 only with an RSA key: OpenSSL signs with PSS; retry as 1.2. */
                ck_assert_str_eq(intercept_tls_reason(t), "retry_tls12");
                intercept_tls_free(t);
                close(fd);
                stop_server(pid);
                pid = start_server(certs[k][0], certs[k][1], "--max12 --alpn http/1.1", &port);
                fd = connect_nb(port);
                ck_assert_int_eq(intercept_tls_connect(c, fd, "upstream.test",
                                                       INTERCEPT_TLS_CONNECT_TLS12, &t, NULL),
                                 0);
                r = hs(t);
            }
            ck_assert_msg(r == 0, "k=%d v=%d %s: %s", k, v, intercept_tls_reason(t),
                          intercept_tls_error(t));
            ck_assert_str_eq(intercept_tls_version(t), v ? "TLSv1.2" : "TLSv1.3");
            ck_assert_str_eq(intercept_tls_alpn(t), "http/1.1");
            ck_assert_int_eq(wr_all(t, "ping\n", 5), 0);
            char buf[256];
            ck_assert_int_gt(rd_line(t, buf, sizeof buf), 0);
            ck_assert_str_eq(buf, "echo:ping\n");
            /* close_notify from the server: a clean end */
            ck_assert_int_eq(rd(t, buf, sizeof buf), 0);
            intercept_tls_free(t);
            close(fd);
            stop_server(pid);
        }
    }
    intercept_tls_client_unref(c);
}
END_TEST

START_TEST(upstream_verification_failures)
{
    make_upstream_pki();
    struct intercept_tls_client *c = client_cfg();
    /* Wrong name. */
    uint16_t port;
    pid_t pid = start_server("up.pem", "up.key", "", &port);
    int fd = connect_nb(port);
    struct intercept_tls *t;
    ck_assert_int_eq(intercept_tls_connect(c, fd, "other.test", 0, &t, NULL), 0);
    ck_assert_int_eq(hs(t), -EPROTO);
    ck_assert_str_eq(intercept_tls_reason(t), "certificate_verify_failed");
    ck_assert_msg(strstr(intercept_tls_error(t), "other.test") &&
                      strstr(intercept_tls_error(t), "CN"),
                  "%s", intercept_tls_error(t));
    intercept_tls_free(t);
    close(fd);
    stop_server(pid);
    /* Untrusted issuer. */
    pid = start_server("self.pem", "self.key", "", &port);
    fd = connect_nb(port);
    ck_assert_int_eq(intercept_tls_connect(c, fd, "upstream.test", 0, &t, NULL), 0);
    ck_assert_int_eq(hs(t), -EPROTO);
    ck_assert_str_eq(intercept_tls_reason(t), "certificate_verify_failed");
    ck_assert_msg(strstr(intercept_tls_error(t), "not correctly signed by the trusted CA"), "%s",
                  intercept_tls_error(t));
    intercept_tls_free(t);
    close(fd);
    stop_server(pid);
    intercept_tls_client_unref(c);
}
END_TEST

START_TEST(upstream_truncation_and_big_transfer)
{
    make_upstream_pki();
    struct intercept_tls_client *c = client_cfg();
    uint16_t port;
    pid_t pid = start_server("up.pem", "up.key", "--no-close-notify --big 3000000", &port);
    int fd = connect_nb(port);
    struct intercept_tls *t;
    ck_assert_int_eq(intercept_tls_connect(c, fd, "upstream.test", 0, &t, NULL), 0);
    ck_assert_int_eq(hs(t), 0);
    ck_assert_int_eq(wr_all(t, "big\n", 4), 0);
    size_t total = 0;
    char *buf = malloc(65536);
    ssize_t n;
    while ((n = rd(t, buf, 65536)) > 0)
        total += (size_t)n;
    ck_assert_uint_eq(total, 3000000 + 4);
    ck_assert_int_eq(n, -EPIPE); /* no close_notify */
    ck_assert_str_eq(intercept_tls_reason(t), "peer_closed");
    free(buf);
    intercept_tls_free(t);
    close(fd);
    stop_server(pid);
    intercept_tls_client_unref(c);
}
END_TEST

START_TEST(client_roots_loading)
{
    struct intercept_tls_client *c = NULL;
    struct al_error err = {0};
    struct intercept_tls_client_opts o = {.ca_file = "/nonexistent/roots.pem"};
    ck_assert_int_eq(intercept_tls_client_new(&o, &c, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/roots.pem"));
    struct intercept_tls_client_opts o2 = {.ca_pem = "not a certificate"};
    ck_assert_int_eq(intercept_tls_client_new(&o2, &c, &err), -EINVAL);
    /* The host's bundle (as in production), when installed. */
    if (access(INTERCEPT_TLS_DEFAULT_CA, R_OK) == 0) {
        ck_assert_int_eq(intercept_tls_client_new(NULL, &c, &err), 0);
        ck_assert_uint_gt(intercept_tls_client_roots(c), 50);
        intercept_tls_client_unref(c);
    }
}
END_TEST

/* ---- X25519: libsodium's, registered with mbedtls (deploy/mbedtls/01-x25519-impl.patch) -- */

static psa_key_id_t x25519_import(const unsigned char priv[32])
{
    psa_key_attributes_t a = PSA_KEY_ATTRIBUTES_INIT;
    psa_set_key_type(&a, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_MONTGOMERY));
    psa_set_key_bits(&a, 255);
    psa_set_key_usage_flags(&a, PSA_KEY_USAGE_DERIVE | PSA_KEY_USAGE_EXPORT);
    psa_set_key_algorithm(&a, PSA_ALG_ECDH);
    psa_key_id_t k = 0;
    ck_assert_int_eq(psa_import_key(&a, priv, 32, &k), PSA_SUCCESS);
    return k;
}

/* The public key and the shared secret with peer, as TLS 1.3 gets them (PSA). */
static int x25519_psa(const unsigned char priv[32], const unsigned char peer[32],
                      unsigned char pub[32], unsigned char shared[32])
{
    psa_key_id_t k = x25519_import(priv);
    size_t n = 0;
    ck_assert_int_eq(psa_export_public_key(k, pub, 32, &n), PSA_SUCCESS);
    ck_assert_uint_eq(n, 32);
    psa_status_t st = psa_raw_key_agreement(PSA_ALG_ECDH, k, peer, 32, shared, 32, &n);
    psa_destroy_key(k);
    return st == PSA_SUCCESS && n == 32 ? 0 : -1;
}

static void unhex(const char *h, unsigned char out[32])
{
    ck_assert_int_eq(sodium_hex2bin(out, 32, h, 64, NULL, NULL, NULL), 0);
}

START_TEST(x25519_is_rfc7748)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    unsigned char a[32], b[32], A[32], B[32], K[32], pub[32], shared[32];
    unhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", a);
    unhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a", A);
    unhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb", b);
    unhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f", B);
    unhex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742", K);
    for (int builtin = 0; builtin < 2; builtin++) {
        /* libsodium's (what intercept_init registers), then mbedtls' own ladder. */
        mbedtls_ecp_set_x25519_impl(builtin ? NULL : intercept_x25519);
        ck_assert_int_eq(x25519_psa(a, B, pub, shared), 0);
        ck_assert_mem_eq(pub, A, 32);
        ck_assert_mem_eq(shared, K, 32);
        ck_assert_int_eq(x25519_psa(b, A, pub, shared), 0);
        ck_assert_mem_eq(pub, B, 32);
        ck_assert_mem_eq(shared, K, 32);
    }
}
END_TEST

START_TEST(x25519_matches_builtin_ladder)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    for (int i = 0; i < 64; i++) {
        unsigned char priv[32], peer[32], pub1[32], pub2[32], s1[32], s2[32];
        randombytes_buf(priv, sizeof priv);
        randombytes_buf(peer, sizeof peer);
        if (i & 1)
            peer[31] |= 0x80; /* bit 255 set: ignored (RFC 7748 5) by both */
        mbedtls_ecp_set_x25519_impl(intercept_x25519);
        int r1 = x25519_psa(priv, peer, pub1, s1);
        mbedtls_ecp_set_x25519_impl(NULL);
        int r2 = x25519_psa(priv, peer, pub2, s2);
        ck_assert_int_eq(r1, 0);
        ck_assert_int_eq(r2, 0);
        ck_assert_mem_eq(pub1, pub2, 32);
        ck_assert_mem_eq(s1, s2, 32);
    }
}
END_TEST

START_TEST(x25519_small_order_point_fails)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    unsigned char priv[32], zero[32] = {0}, one[32] = {1}, pub[32], shared[32];
    randombytes_buf(priv, sizeof priv);
    for (int builtin = 0; builtin < 2; builtin++) {
        mbedtls_ecp_set_x25519_impl(builtin ? NULL : intercept_x25519);
        ck_assert_int_lt(x25519_psa(priv, zero, pub, shared), 0);
        ck_assert_int_lt(x25519_psa(priv, one, pub, shared), 0);
    }
}
END_TEST

/* ---- ECDSA signing: OpenSSL's P-256 through EVP, registered with mbedtls
 * (02-ecdsa-sign-impl.patch) ---------------------------------------------------------------- */

static int ecdsa_calls, ecdsa_signed;
static int ecdsa_counting(mbedtls_ecp_group_id id, const unsigned char *d, size_t len,
                          const unsigned char *hash, size_t hlen, unsigned char *rs)
{
    ecdsa_calls++;
    int r = intercept_ecdsa_sign(id, d, len, hash, hlen, rs);
    if (r == 0)
        ecdsa_signed++;
    return r;
}

/* A signer whose r is zero: mbedtls must refuse its result. */
static int ecdsa_broken(mbedtls_ecp_group_id id, const unsigned char *d, size_t len,
                        const unsigned char *hash, size_t hlen, unsigned char *rs)
{
    (void)id, (void)d, (void)hash, (void)hlen;
    memset(rs, 0, len);
    memset(rs + len, 1, len);
    return 0;
}

/* A key pair made by mbedtls itself: no signer exists for it. */
static void ecdsa_key(mbedtls_pk_context *pk, mbedtls_ecp_group_id id)
{
    mbedtls_pk_init(pk);
    ck_assert_int_eq(mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
    ck_assert_int_eq(mbedtls_ecp_gen_key(id, mbedtls_pk_ec(*pk), intercept_rng, NULL), 0);
}

/* Signs a random SHA-256 sized hash with pk and checks it with mbedtls' own verifier (and that
 * another hash does not verify). */
static void ecdsa_sign_verify(mbedtls_pk_context *pk)
{
    unsigned char hash[32], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t sl = 0;
    randombytes_buf(hash, sizeof hash);
    ck_assert_int_eq(
        mbedtls_pk_sign(pk, MBEDTLS_MD_SHA256, hash, 32, sig, sizeof sig, &sl, intercept_rng, NULL),
        0);
    ck_assert_int_eq(mbedtls_pk_verify(pk, MBEDTLS_MD_SHA256, hash, 32, sig, sl), 0);
    hash[0] ^= 1;
    ck_assert_int_ne(mbedtls_pk_verify(pk, MBEDTLS_MD_SHA256, hash, 32, sig, sl), 0);
}

START_TEST(ecdsa_p256_signatures_verify)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    mbedtls_pk_context pk;
    mbedtls_pk_init(&pk);
    struct intercept_signer *signer = NULL;
    ck_assert_int_eq(intercept_key_gen_p256(&pk, &signer), 0);
    ck_assert_ptr_nonnull(signer);
    mbedtls_ecdsa_set_sign_impl(ecdsa_counting);
    ecdsa_calls = ecdsa_signed = 0;
    for (int i = 0; i < 64; i++) {
        /* SHA-256 and SHA-384 sized hashes (the latter truncated to 256 bits by both). */
        mbedtls_md_type_t md = i & 1 ? MBEDTLS_MD_SHA384 : MBEDTLS_MD_SHA256;
        size_t hl = i & 1 ? 48 : 32;
        unsigned char hash[48], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE],
            sig2[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
        size_t sl = 0, sl2 = 0;
        randombytes_buf(hash, sizeof hash);
        ck_assert_int_eq(
            mbedtls_pk_sign(&pk, md, hash, hl, sig, sizeof sig, &sl, intercept_rng, NULL), 0);
        ck_assert_int_eq(mbedtls_pk_verify(&pk, md, hash, hl, sig, sl), 0);
        /* A fresh nonce each time: the same hash signed twice gives two signatures. */
        ck_assert_int_eq(
            mbedtls_pk_sign(&pk, md, hash, hl, sig2, sizeof sig2, &sl2, intercept_rng, NULL), 0);
        ck_assert(sl != sl2 || memcmp(sig, sig2, sl) != 0);
        ck_assert_int_eq(mbedtls_pk_verify(&pk, md, hash, hl, sig2, sl2), 0);
        /* Another hash does not verify. */
        hash[0] ^= 1;
        ck_assert_int_ne(mbedtls_pk_verify(&pk, md, hash, hl, sig, sl), 0);
    }
    ck_assert_int_eq(ecdsa_calls, 128);
    ck_assert_int_eq(ecdsa_signed, 128); /* every one by libcrypto */
    /* Once the signer is freed, mbedtls signs that key itself (and still correctly). */
    intercept_signer_free(signer);
    ecdsa_calls = ecdsa_signed = 0;
    ecdsa_sign_verify(&pk);
    ck_assert_int_eq(ecdsa_calls, 1);
    ck_assert_int_eq(ecdsa_signed, 0);
    mbedtls_ecdsa_set_sign_impl(intercept_ecdsa_sign);
    mbedtls_pk_free(&pk);
}
END_TEST

START_TEST(ecdsa_keys_without_signer_fall_back)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    mbedtls_ecdsa_set_sign_impl(ecdsa_counting);
    /* Another curve, and a P-256 key libcrypto has no copy of: asked, declined, signed by
     * mbedtls itself. */
    mbedtls_pk_context pk;
    ecdsa_key(&pk, MBEDTLS_ECP_DP_SECP384R1);
    ecdsa_calls = ecdsa_signed = 0;
    unsigned char hash[48], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t sl = 0;
    randombytes_buf(hash, sizeof hash);
    ck_assert_int_eq(mbedtls_pk_sign(&pk, MBEDTLS_MD_SHA384, hash, 48, sig, sizeof sig, &sl,
                                     intercept_rng, NULL),
                     0);
    ck_assert_int_eq(mbedtls_pk_verify(&pk, MBEDTLS_MD_SHA384, hash, 48, sig, sl), 0);
    ck_assert_int_eq(ecdsa_calls, 1);
    ck_assert_int_eq(ecdsa_signed, 0);
    mbedtls_pk_free(&pk);
    ecdsa_key(&pk, MBEDTLS_ECP_DP_SECP256R1);
    ecdsa_calls = ecdsa_signed = 0;
    ecdsa_sign_verify(&pk);
    ck_assert_int_eq(ecdsa_calls, 1);
    ck_assert_int_eq(ecdsa_signed, 0);
    /* With a signer made from mbedtls' key pair, libcrypto signs it. */
    struct intercept_signer *signer = NULL;
    struct al_error err = {0};
    ck_assert_msg(intercept_signer_new(&pk, &signer, &err) == 0, "%s", al_error_str(&err));
    ecdsa_calls = ecdsa_signed = 0;
    for (int i = 0; i < 8; i++)
        ecdsa_sign_verify(&pk);
    ck_assert_int_eq(ecdsa_calls, 8);
    ck_assert_int_eq(ecdsa_signed, 8);
    /* Two signers of one key (two mints parsing the CA key at once): either signs, and the
     * key stays signed by libcrypto until the last is freed. */
    struct intercept_signer *again = NULL;
    ck_assert_int_eq(intercept_signer_new(&pk, &again, NULL), 0);
    intercept_signer_free(signer);
    ecdsa_calls = ecdsa_signed = 0;
    ecdsa_sign_verify(&pk);
    ck_assert_int_eq(ecdsa_signed, 1);
    intercept_signer_free(again);
    ecdsa_calls = ecdsa_signed = 0;
    ecdsa_sign_verify(&pk);
    ck_assert_int_eq(ecdsa_calls, 1);
    ck_assert_int_eq(ecdsa_signed, 0);
    mbedtls_ecdsa_set_sign_impl(intercept_ecdsa_sign);
    mbedtls_pk_free(&pk);
}
END_TEST

START_TEST(ecdsa_signer_refuses_bad_keys)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    struct intercept_signer *signer = NULL;
    struct al_error err = {0};
    /* Another curve. */
    mbedtls_pk_context pk;
    ecdsa_key(&pk, MBEDTLS_ECP_DP_SECP384R1);
    ck_assert_int_eq(intercept_signer_new(&pk, &signer, &err), -EINVAL);
    ck_assert_ptr_null(signer);
    ck_assert_msg(strstr(al_error_str(&err), "not on P-256"), "%s", al_error_str(&err));
    mbedtls_pk_free(&pk);
    /* A private key corrupted to the group order n (outside [1, n-1]). */
    ecdsa_key(&pk, MBEDTLS_ECP_DP_SECP256R1);
    mbedtls_ecp_keypair *kp = mbedtls_pk_ec(pk);
    ck_assert_int_eq(mbedtls_mpi_copy(&kp->MBEDTLS_PRIVATE(d), &kp->MBEDTLS_PRIVATE(grp).N), 0);
    al_error_clear(&err);
    ck_assert_int_eq(intercept_signer_new(&pk, &signer, &err), -EINVAL);
    ck_assert_ptr_null(signer);
    ck_assert_msg(strstr(al_error_str(&err), "private key is out of range"), "%s",
                  al_error_str(&err));
    /* And zero. */
    ck_assert_int_eq(mbedtls_mpi_lset(&kp->MBEDTLS_PRIVATE(d), 0), 0);
    al_error_clear(&err);
    ck_assert_int_lt(intercept_signer_new(&pk, &signer, &err), 0);
    ck_assert_ptr_null(signer);
    ck_assert_msg(strstr(al_error_str(&err), "out of range") ||
                      strstr(al_error_str(&err), "no private part"),
                  "%s", al_error_str(&err));
    mbedtls_pk_free(&pk);
    /* A public key only (a certificate's). */
    mbedtls_pk_context full, pub;
    ecdsa_key(&full, MBEDTLS_ECP_DP_SECP256R1);
    unsigned char der[256];
    int n = mbedtls_pk_write_pubkey_der(&full, der, sizeof der);
    ck_assert_int_gt(n, 0);
    mbedtls_pk_init(&pub);
    ck_assert_int_eq(mbedtls_pk_parse_public_key(&pub, der + sizeof der - n, (size_t)n), 0);
    al_error_clear(&err);
    ck_assert_int_eq(intercept_signer_new(&pub, &signer, &err), -EINVAL);
    ck_assert_msg(strstr(al_error_str(&err), "no private part"), "%s", al_error_str(&err));
    mbedtls_pk_free(&pub);
    mbedtls_pk_free(&full);
    /* Not an EC key at all. */
    mbedtls_pk_init(&pk);
    al_error_clear(&err);
    ck_assert_int_eq(intercept_signer_new(&pk, &signer, &err), -EINVAL);
    ck_assert_msg(strstr(al_error_str(&err), "not an EC key"), "%s", al_error_str(&err));
}
END_TEST

START_TEST(ecdsa_bad_signer_result_fails)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    mbedtls_pk_context pk;
    mbedtls_pk_init(&pk);
    struct intercept_signer *signer = NULL;
    ck_assert_int_eq(intercept_key_gen_p256(&pk, &signer), 0);
    mbedtls_ecdsa_set_sign_impl(ecdsa_broken);
    unsigned char hash[32] = {1}, sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t sl = 0;
    ck_assert_int_ne(mbedtls_pk_sign(&pk, MBEDTLS_MD_SHA256, hash, 32, sig, sizeof sig, &sl,
                                     intercept_rng, NULL),
                     0);
    mbedtls_ecdsa_set_sign_impl(intercept_ecdsa_sign);
    /* And the registered signer is what intercept_init left in place. */
    ck_assert_int_eq(mbedtls_pk_sign(&pk, MBEDTLS_MD_SHA256, hash, 32, sig, sizeof sig, &sl,
                                     intercept_rng, NULL),
                     0);
    ck_assert_int_eq(mbedtls_pk_verify(&pk, MBEDTLS_MD_SHA256, hash, 32, sig, sl), 0);
    intercept_signer_free(signer);
    mbedtls_pk_free(&pk);
}
END_TEST

/* mbedtls does not parse X.509 name constraints (critical in the CA): accepted unread here,
 * the signature is what this test checks (test_ca checks the constraints with OpenSSL). */
static int ca_ext_name_constraints(void *ctx, mbedtls_x509_crt const *crt,
                                   mbedtls_x509_buf const *oid, int critical,
                                   const unsigned char *p, const unsigned char *end)
{
    (void)ctx, (void)crt, (void)critical, (void)p, (void)end;
    return MBEDTLS_OID_CMP(MBEDTLS_OID_NAME_CONSTRAINTS, oid) == 0 ? 0 : -1;
}

/* The CA's key (parsed from guarded memory at each mint) signs the leaf certificate, the
 * leaf's key signs handshakes: both by libcrypto, both verified by mbedtls. */
START_TEST(ecdsa_ca_and_leaf_keys_sign_by_libcrypto)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    const char *names[] = {"example.test"};
    struct intercept_ca_opts o = {.sandbox_id = "sb-ecdsa", .names = names, .n_names = 1};
    struct intercept_ca *ca = NULL;
    struct al_error err = {0};
    mbedtls_ecdsa_set_sign_impl(ecdsa_counting);
    ecdsa_calls = ecdsa_signed = 0;
    ck_assert_msg(intercept_ca_new(&o, &ca, &err) == 0, "%s", al_error_str(&err));
    ck_assert_int_eq(ecdsa_calls, 1); /* the CA's own certificate */
    ck_assert_int_eq(ecdsa_signed, 1);
    mbedtls_x509_crt root;
    mbedtls_x509_crt_init(&root);
    size_t der_len = 0;
    const unsigned char *der = intercept_ca_der(ca, &der_len);
    ck_assert_int_eq(mbedtls_x509_crt_parse_der_with_ext_cb(&root, der, der_len, 1,
                                                            ca_ext_name_constraints, NULL),
                     0);
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "h%d.example.test", i);
        struct intercept_leaf *l = NULL;
        ecdsa_calls = ecdsa_signed = 0;
        ck_assert_msg(intercept_ca_leaf(ca, name, &l, &err) == 0, "%s", al_error_str(&err));
        ck_assert_int_eq(ecdsa_calls, 1);
        ck_assert_int_eq(ecdsa_signed, 1);
        /* The CA's signature on the leaf verifies (mbedtls, chain of one to the CA). */
        uint32_t flags = 0;
        ck_assert_int_eq(
            mbedtls_x509_crt_verify(intercept_leaf_crt(l), &root, NULL, name, &flags, NULL, NULL),
            0);
        ck_assert_uint_eq(flags, 0);
        /* The leaf's key signs by libcrypto, and the certificate's public key verifies it. */
        unsigned char hash[32], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
        size_t sl = 0;
        randombytes_buf(hash, sizeof hash);
        ecdsa_calls = ecdsa_signed = 0;
        ck_assert_int_eq(mbedtls_pk_sign(intercept_leaf_key(l), MBEDTLS_MD_SHA256, hash, 32, sig,
                                         sizeof sig, &sl, intercept_rng, NULL),
                         0);
        ck_assert_int_eq(ecdsa_signed, 1);
        ck_assert_int_eq(
            mbedtls_pk_verify(&intercept_leaf_crt(l)->pk, MBEDTLS_MD_SHA256, hash, 32, sig, sl), 0);
        intercept_leaf_unref(l);
    }
    mbedtls_ecdsa_set_sign_impl(intercept_ecdsa_sign);
    mbedtls_x509_crt_free(&root);
    intercept_ca_unref(ca);
}
END_TEST

/* ---- P-256 key generation by libcrypto (intercept_key_gen_p256) ---------------------- */

START_TEST(key_gen_p256_pairs_are_consistent_and_fresh)
{
    ck_assert_int_eq(intercept_init(NULL), 0);
    unsigned char prev[32] = {0};
    for (int i = 0; i < 16; i++) {
        mbedtls_pk_context pk;
        mbedtls_pk_init(&pk);
        struct intercept_signer *signer = NULL;
        ck_assert_int_eq(intercept_key_gen_p256(&pk, &signer), 0);
        mbedtls_ecp_keypair *kp = mbedtls_pk_ec(pk);
        ck_assert_int_eq(mbedtls_ecp_keypair_get_group_id(kp), MBEDTLS_ECP_DP_SECP256R1);
        /* Q = d*G, recomputed by mbedtls itself. */
        ck_assert_int_eq(mbedtls_ecp_check_pub_priv(kp, kp, intercept_rng, NULL), 0);
        /* A signature by the private key (libcrypto's copy) verifies with mbedtls' public
         * key. */
        ecdsa_sign_verify(&pk);
        /* A fresh private key each time. */
        unsigned char d[32];
        size_t dl = 0;
        ck_assert_int_eq(mbedtls_ecp_write_key_ext(kp, &dl, d, sizeof d), 0);
        ck_assert_uint_eq(dl, 32);
        ck_assert(memcmp(d, prev, 32) != 0);
        memcpy(prev, d, 32);
        intercept_signer_free(signer);
        mbedtls_pk_free(&pk);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("intercept_tls");
    TCase *tx = tcase_create("x25519");
    tcase_add_test(tx, x25519_is_rfc7748);
    tcase_add_test(tx, x25519_matches_builtin_ladder);
    tcase_add_test(tx, x25519_small_order_point_fails);
    suite_add_tcase(s, tx);
    TCase *te = tcase_create("ecdsa");
    tcase_add_test(te, ecdsa_p256_signatures_verify);
    tcase_add_test(te, ecdsa_keys_without_signer_fall_back);
    tcase_add_test(te, ecdsa_signer_refuses_bad_keys);
    tcase_add_test(te, ecdsa_bad_signer_result_fails);
    tcase_add_test(te, ecdsa_ca_and_leaf_keys_sign_by_libcrypto);
    tcase_add_test(te, key_gen_p256_pairs_are_consistent_and_fresh);
    suite_add_tcase(s, te);
    TCase *tc = tcase_create("tls");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sandbox_tls13_alpn_and_data);
    tcase_add_test(tc, sandbox_tls12_and_wildcard_name);
    tcase_add_test(tc, sandbox_prefix_bytes);
    tcase_add_test(tc, sandbox_session_resumption);
    tcase_add_test(tc, sandbox_refusals);
    tcase_add_test(tc, sandbox_alert_after_handshake);
    tcase_add_test(tc, upstream_verified_exchange);
    tcase_add_test(tc, upstream_verification_failures);
    tcase_add_test(tc, upstream_truncation_and_big_transfer);
    tcase_add_test(tc, client_roots_loading);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(suite)
