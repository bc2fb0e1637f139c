/* tests/unit/egress/intercept/icpt_proxy: a one-sandbox intercepting proxy around the session
 * engine (egress/intercept/session.c), for the unit tests and the benchmarks of the interception
 * library. It is not airlock-egress: no transparent listener, no ClientHello parsing (the decided
 * name is given with --name, and the TLS library checks that the client's SNI says the same), no
 * destination check (the upstream address is given). What it exercises is the library: the sandbox
 * CA and leaves, TLS both ways, HTTP inside, the policy per request, the vault client, injection,
 * scrubbing, the upstream pool.
 *
 *   icpt-proxy --listen 127.0.0.1:0 --port-file F --name api.github.test
 *              --upstream 127.0.0.1:PORT --upstream-ca roots.pem --policy p.yaml
 *              [--vault-socket S] [--audit FILE] [--ca-out FILE] [--placeholders-out FILE]
 *              [--sandbox ID] [--no-pool] [--plaintext]
 *
 * --plaintext: plain HTTP both ways (the engine's mode for rules with allow_plaintext_inject);
 * the connection is bound to --name as egress binds plain-HTTP connections to their host.
 *
 * One thread, one libuv loop; sockets are watched through one epoll set (as egress does).
 * SIGTERM stops it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/log.h"
#include "common/util.h"
#include "egress/audit.h"
#include "egress/intercept/session.h"

struct proxy;

struct pend {
    struct pconn *c;
    int which;
    int fd;
    bool registered;
    int events;
};

struct pconn {
    struct proxy *p;
    struct pend ends[2];
    uv_timer_t timer;
    struct intercept_session *s;
    bool done, freed;
    int cfd;
};

struct proxy {
    uv_loop_t loop;
    int lfd, ep;
    uv_poll_t lpoll, eppoll;
    uv_signal_t sig;
    struct sockaddr_storage up;
    socklen_t up_len;
    char name[256], sandbox[128];
    struct policy *pol;
    struct intercept_ca *ca;
    struct intercept_tls_server *srv;
    struct intercept_tls_client *cli;
    struct intercept_pool *pool;
    struct intercept_secrets *secrets;
    struct intercept_fetcher *fetcher;
    struct intercept_placeholders *ph;
    FILE *audit;
    bool plaintext;
    unsigned long rid;
    unsigned long active;
};

static void watch_fd(struct pend *e, int fd, int events)
{
    struct proxy *p = e->c->p;
    if (e->registered && e->fd != fd) {
        epoll_ctl(p->ep, EPOLL_CTL_DEL, e->fd, NULL); /* may already be gone with the fd */
        e->registered = false;
    }
    e->fd = fd;
    if (fd < 0)
        return;
    struct epoll_event ev = {.events =
                                 ((events & INTERCEPT_TLS_WANT_READ) ? EPOLLIN | EPOLLRDHUP : 0) |
                                 ((events & INTERCEPT_TLS_WANT_WRITE) ? EPOLLOUT : 0),
                             .data.ptr = e};
    if (!events) {
        if (e->registered)
            epoll_ctl(p->ep, EPOLL_CTL_DEL, fd, NULL);
        e->registered = false;
    } else if (e->registered) {
        if (e->events != events)
            epoll_ctl(p->ep, EPOLL_CTL_MOD, fd, &ev);
    } else if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &ev) == 0) {
        e->registered = true;
    }
    e->events = events;
}

static void op_watch(void *ctx, int end, int fd, int events)
{
    struct pconn *c = ctx;
    watch_fd(&c->ends[end], fd, events);
}

static void on_timer(uv_timer_t *t)
{
    struct pconn *c = t->data;
    if (!c->done && c->s)
        intercept_session_on_timeout(c->s);
}

static void op_deadline(void *ctx, uint32_t ms)
{
    struct pconn *c = ctx;
    if (ms)
        uv_timer_start(&c->timer, on_timer, ms, 0);
    else
        uv_timer_stop(&c->timer);
}

static int op_connect(void *ctx)
{
    struct pconn *c = ctx;
    int fd = socket(c->p->up.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&c->p->up, c->p->up_len) < 0 && errno != EINPROGRESS) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static const struct policy *op_policy(void *ctx)
{
    return ((struct pconn *)ctx)->p->pol;
}

static bool op_audit(void *ctx, json_t *rec)
{
    struct pconn *c = ctx;
    json_object_set_new(rec, "sandbox", json_string(c->p->sandbox));
    if (c->p->audit) {
        json_dumpf(rec, c->p->audit, JSON_COMPACT);
        fputc('\n', c->p->audit);
        fflush(c->p->audit);
    }
    json_decref(rec);
    return true;
}

/* A request's record as the proxy writes it (egress_http_rec_write), with the sandbox. */
static bool op_audit_request(void *ctx, const struct egress_http_rec *r)
{
    struct pconn *c = ctx;
    struct egress_recw w;
    egress_recw_begin(&w, "http_request");
    egress_recw_str(&w, "sandbox", c->p->sandbox);
    egress_recw_str(&w, "request_id", r->request_id);
    egress_recw_str(&w, "proto", r->proto);
    egress_http_rec_write(&w, r, al_now_ns());
    const char *out;
    size_t len;
    if (egress_recw_end(&w, &out, &len) == 0 && c->p->audit) {
        fwrite(out, 1, len, c->p->audit);
        fputc('\n', c->p->audit);
        fflush(c->p->audit);
    }
    egress_recw_free(&w);
    return true;
}

static void op_request_id(void *ctx, char out[32])
{
    struct pconn *c = ctx;
    snprintf(out, 32, "icpt-%lu", ++c->p->rid);
}

static void conn_closed(uv_handle_t *h)
{
    struct pconn *c = h->data;
    free(c);
}

static void op_done(void *ctx, const char *why, const char *detail)
{
    struct pconn *c = ctx;
    c->done = true;
    if (c->p->audit) {
        json_t *r = json_pack("{s:s,s:s,s:s,s:s}", "type", "connection_end", "sandbox",
                              c->p->sandbox, "end", why, "detail", detail ? detail : "");
        json_dumpf(r, c->p->audit, JSON_COMPACT);
        fputc('\n', c->p->audit);
        fflush(c->p->audit);
        json_decref(r);
    }
}

static const struct intercept_host_ops ops = {
    .watch = op_watch,
    .deadline = op_deadline,
    .connect = op_connect,
    .policy = op_policy,
    .audit = op_audit,
    .audit_request = op_audit_request,
    .request_id = op_request_id,
    .done = op_done,
};

static void conn_free(struct pconn *c)
{
    if (c->freed)
        return;
    c->freed = true;
    watch_fd(&c->ends[0], -1, 0);
    watch_fd(&c->ends[1], -1, 0);
    intercept_session_free(c->s);
    close(c->cfd);
    c->p->active--;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void on_epoll(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    struct proxy *p = h->data;
    struct epoll_event evs[64];
    int n = epoll_wait(p->ep, evs, 64, 0);
    /* Sessions that finish in this batch are freed after it. */
    struct pconn *finished[64];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        struct pend *e = evs[i].data.ptr;
        struct pconn *c = e->c;
        if (c->done)
            continue;
        int ev = 0;
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            ev |= INTERCEPT_TLS_WANT_READ;
        if (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
            ev |= INTERCEPT_TLS_WANT_WRITE;
        intercept_session_on_events(c->s, e->which, ev);
        if (c->done && nf < 64)
            finished[nf++] = c;
    }
    for (int i = 0; i < nf; i++)
        conn_free(finished[i]);
}

/* Sessions that end from a timer: freed on the next turn. */
static void on_check(uv_check_t *h);
static uv_check_t reaper;
static struct pconn *all_conns[65536];
static size_t n_all;

static void on_accept(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    struct proxy *p = h->data;
    for (;;) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct pconn *c = calloc(1, sizeof *c);
        c->p = p;
        c->cfd = fd;
        for (int k = 0; k < 2; k++)
            c->ends[k] = (struct pend){.c = c, .which = k, .fd = -1};
        uv_timer_init(&p->loop, &c->timer);
        c->timer.data = c;
        p->active++;
        struct intercept_session_opts o = {
            .ops = &ops,
            .ctx = c,
            .srv = p->srv,
            .cli = p->cli,
            .pool = p->pool,
            .fetcher = p->fetcher,
            .ph = p->ph,
            .sandbox_id = p->sandbox,
            .name = p->name,
            .port = p->plaintext ? 80 : 443,
            .client_fd = fd,
            .plaintext = p->plaintext,
        };
        struct al_error err = {0};
        if (intercept_session_start(&o, &c->s, &err) < 0) {
            fprintf(stderr, "icpt-proxy: session refused: %s\n", al_error_str(&err));
            c->s = NULL;
            conn_free(c);
            continue;
        }
        if (c->done) {
            conn_free(c);
            continue;
        }
        if (n_all < sizeof all_conns / sizeof *all_conns)
            all_conns[n_all++] = c;
    }
}

static void on_check(uv_check_t *h)
{
    (void)h;
    size_t k = 0;
    for (size_t i = 0; i < n_all; i++) {
        struct pconn *c = all_conns[i];
        if (c->freed)
            continue;
        if (c->done) {
            conn_free(c);
            continue;
        }
        all_conns[k++] = c;
    }
    n_all = k;
}

static void stop_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void on_signal(uv_signal_t *s, int sig)
{
    (void)sig;
    struct proxy *p = s->data;
    uv_stop(&p->loop);
}

static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[128];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof host)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    int port = atoi(colon + 1);
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof *ss);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
        return -1;
    *len = sizeof *a;
    return 0;
}

static void write_file(const char *path, const char *text)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    rename(tmp, path);
}

int main(int argc, char **argv)
{
    const char *listen_s = "127.0.0.1:0", *port_file = NULL, *upstream = NULL, *roots = NULL,
               *policy = NULL;
    const char *vault = NULL, *audit = NULL, *ca_out = NULL, *ph_out = NULL, *name = NULL;
    const char *sandbox = "sb-test";
    bool no_pool = false, plaintext = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(n, var)               \
    if (strcmp(a, n) == 0 && v) { \
        var = v;                  \
        i++;                      \
        continue;                 \
    }
        OPT("--listen", listen_s);
        OPT("--port-file", port_file);
        OPT("--upstream", upstream);
        OPT("--upstream-ca", roots);
        OPT("--policy", policy);
        OPT("--vault-socket", vault);
        OPT("--audit", audit);
        OPT("--ca-out", ca_out);
        OPT("--placeholders-out", ph_out);
        OPT("--name", name);
        OPT("--sandbox", sandbox);
        if (strcmp(a, "--no-pool") == 0) {
            no_pool = true;
            continue;
        }
        if (strcmp(a, "--plaintext") == 0) {
            plaintext = true;
            continue;
        }
        fprintf(stderr, "icpt-proxy: unknown option %s\n", a);
        return 2;
    }
    if (!upstream || !policy || !name) {
        fprintf(stderr, "usage: icpt-proxy --name NAME --upstream IP:PORT --policy FILE "
                        "[--upstream-ca FILE] ...\n");
        return 2;
    }
    al_log_init("icpt-proxy", AL_LOG_TEXT, AL_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    struct proxy p = {0};
    p.plaintext = plaintext;
    snprintf(p.name, sizeof p.name, "%s", name);
    snprintf(p.sandbox, sizeof p.sandbox, "%s", sandbox);
    if (parse_addr(upstream, &p.up, &p.up_len) < 0) {
        fprintf(stderr, "icpt-proxy: bad --upstream %s\n", upstream);
        return 2;
    }
    struct al_diags *dg = NULL;
    (void)dg;
    p.pol = policy_load_file(policy, NULL);
    if (!p.pol) {
        fprintf(stderr, "icpt-proxy: the policy %s does not load (airlock policy lint it)\n",
                policy);
        return 1;
    }
    size_t nn = 0;
    const char *const *names = policy_intercepted_names(p.pol, &nn);
    struct al_error err = {0};
    struct intercept_ca_opts co = {.sandbox_id = p.sandbox, .names = names, .n_names = nn};
    if (intercept_ca_new(&co, &p.ca, &err) < 0 ||
        intercept_tls_server_new(&(struct intercept_tls_server_opts){.ca = p.ca}, &p.srv, &err) <
            0 ||
        intercept_tls_client_new(&(struct intercept_tls_client_opts){.ca_file = roots}, &p.cli,
                                 &err) < 0 ||
        intercept_placeholders_new(p.pol, NULL, &p.ph, &err) < 0) {
        fprintf(stderr, "icpt-proxy: %s\n", al_error_str(&err));
        return 1;
    }
    if (!no_pool)
        intercept_pool_new(NULL, &p.pool);
    uv_loop_init(&p.loop);
    if (vault) {
        struct intercept_secrets_opts so = {.socket = vault, .retry_ms = 100};
        if (intercept_secrets_new(&so, &p.secrets, &err) < 0) {
            fprintf(stderr, "icpt-proxy: %s\n", al_error_str(&err));
            return 1;
        }
        intercept_secrets_start(p.secrets, &p.loop);
        intercept_fetcher_new(p.secrets, &p.loop, &p.fetcher);
    }
    if (audit && !(p.audit = fopen(audit, "a"))) {
        perror(audit);
        return 1;
    }
    if (ca_out)
        write_file(ca_out, intercept_ca_pem(p.ca));
    if (ph_out) {
        json_t *env = intercept_placeholders_env_json(p.ph);
        char *t = json_dumps(env, JSON_COMPACT);
        write_file(ph_out, t);
        free(t);
        json_decref(env);
    }
    struct sockaddr_storage ls;
    socklen_t ll;
    if (parse_addr(listen_s, &ls, &ll) < 0) {
        fprintf(stderr, "icpt-proxy: bad --listen %s\n", listen_s);
        return 2;
    }
    p.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(p.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(p.lfd, (struct sockaddr *)&ls, ll) < 0 || listen(p.lfd, 1024) < 0) {
        perror("icpt-proxy: listen");
        return 1;
    }
    if (port_file) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        getsockname(p.lfd, (struct sockaddr *)&a, &al);
        char t[16];
        snprintf(t, sizeof t, "%u", ntohs(a.sin_port));
        write_file(port_file, t);
    }
    p.ep = epoll_create1(EPOLL_CLOEXEC);
    uv_poll_init(&p.loop, &p.lpoll, p.lfd);
    p.lpoll.data = &p;
    uv_poll_start(&p.lpoll, UV_READABLE, on_accept);
    uv_poll_init(&p.loop, &p.eppoll, p.ep);
    p.eppoll.data = &p;
    uv_poll_start(&p.eppoll, UV_READABLE, on_epoll);
    uv_check_init(&p.loop, &reaper);
    uv_check_start(&reaper, on_check);
    uv_signal_init(&p.loop, &p.sig);
    p.sig.data = &p;
    uv_signal_start(&p.sig, on_signal, SIGTERM);
    uv_run(&p.loop, UV_RUN_DEFAULT);

    /* Stop: every session aborted, handles closed, the loop drained. */
    for (size_t i = 0; i < n_all; i++) {
        struct pconn *c = all_conns[i];
        if (!c->freed) {
            if (!c->done)
                intercept_session_abort(c->s, "proxy_stopping");
            conn_free(c);
        }
    }
    if (p.fetcher)
        intercept_fetcher_close(p.fetcher);
    if (p.secrets)
        intercept_secrets_stop(p.secrets, NULL, NULL);
    uv_walk(&p.loop, stop_walk, NULL);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    uv_loop_close(&p.loop);
    intercept_secrets_free(p.secrets);
    intercept_pool_free(p.pool);
    intercept_placeholders_unref(p.ph);
    intercept_tls_client_unref(p.cli);
    intercept_tls_server_unref(p.srv);
    intercept_ca_unref(p.ca);
    policy_unref(p.pol);
    close(p.ep);
    close(p.lfd);
    if (p.audit)
        fclose(p.audit);
    return 0;
}
