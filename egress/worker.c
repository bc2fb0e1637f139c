/* egress/worker: one libuv loop per core. Each worker polls its listening sockets (one
 * member of every SO_REUSEPORT group, or in the shared listener mode the one socket per
 * address that all workers poll), owns the connections it accepted, a pool of pipes for
 * splice, and a resolver client. Workers share nothing mutable but the registry, the
 * resolver cache and the audit log, which are thread-safe. Also: the listening sockets
 * themselves and the choice of their layout (egress_listener_mode_pick). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/utsname.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define ACCEPT_BATCH 64
/* A shared listener wakes every worker: the first one takes at most this many before it
 * goes back to its loop, so that a burst is spread over the workers that race for it. */
#define SHARED_ACCEPT_BATCH 8
#define PIPE_SIZE           (64 * 1024)

/* Linux 6.5 ("bpf, net: Support SO_REUSEPORT sockets with bpf_sk_assign") is the first
 * kernel whose bpf_sk_assign takes a socket with SO_REUSEPORT set; before it the helper
 * answers -ESOCKTNOSUPPORT for any such socket, even a group of one. A distribution kernel
 * that backports the change can be told so with --listener-mode reuseport (the vswitch
 * refuses the registration if it is wrong, so the mistake cannot pass silently). */
enum egress_listener_mode egress_listener_mode_pick(const struct egress_config *cfg, char *why,
                                                    size_t whylen)
{
    if (cfg->listener_mode != EGRESS_LISTENER_AUTO) {
        snprintf(why, whylen, "%s%s",
                 cfg->listener_mode_set ? "--listener-mode " : "AIRLOCK_EGRESS_LISTENER_MODE=",
                 egress_listener_mode_name(cfg->listener_mode));
        return cfg->listener_mode;
    }
    if (cfg->vswitch_mode == 2) {
        snprintf(why, whylen, "auto; --vswitch off: no bpf_sk_assign involved");
        return EGRESS_LISTENER_REUSEPORT;
    }
    struct utsname u;
    int maj = 0, min = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &maj, &min) != 2) {
        snprintf(why, whylen,
                 "auto; the kernel version is unknown, so the layout that works "
                 "on every kernel");
        return EGRESS_LISTENER_SHARED;
    }
    if (maj > 6 || (maj == 6 && min >= 5)) {
        snprintf(why, whylen, "auto; kernel %s >= 6.5: bpf_sk_assign takes SO_REUSEPORT sockets",
                 u.release);
        return EGRESS_LISTENER_REUSEPORT;
    }
    snprintf(why, whylen,
             "auto; kernel %s < 6.5: bpf_sk_assign refuses SO_REUSEPORT sockets, "
             "so the vswitch could not hand them any connection",
             u.release);
    return EGRESS_LISTENER_SHARED;
}

int egress_listen_tcp(const struct sockaddr_storage *ss, bool transparent, bool reuseport,
                      int backlog, uint16_t *port, struct al_error *err)
{
    int fam = ss->ss_family;
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(err, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    /* Accepted connections inherit it (one setsockopt per listener, not per connection). */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (transparent) {
        int rc = fam == AF_INET6 ? setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one)
                                 : setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
        if (rc < 0) {
            int e = errno;
            close(fd);
            return al_error_set(err, -e, "IP_TRANSPARENT: %s (the proxy needs CAP_NET_ADMIN)",
                                strerror(e));
        }
    }
    struct sockaddr_storage a = *ss;
    if (*port) {
        if (fam == AF_INET)
            ((struct sockaddr_in *)&a)->sin_port = htons(*port);
        else
            ((struct sockaddr_in6 *)&a)->sin6_port = htons(*port);
    }
    if (bind(fd, (struct sockaddr *)&a,
             fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) < 0)
        goto fail;
    if (listen(fd, backlog) < 0)
        goto fail;
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(fam == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                 : ((struct sockaddr_in6 *)&a)->sin6_port);
    return fd;
fail:;
    int e = errno;
    close(fd);
    char t[80];
    struct egress_ip ip;
    uint16_t p;
    egress_ip_from_sockaddr((const struct sockaddr *)ss, &ip, &p);
    egress_endpoint_text(&ip, *port ? *port : p, t, sizeof t);
    return al_error_set(err, -e, "cannot listen on %s: %s", t, strerror(e));
}

int egress_listen_udp(const struct sockaddr_storage *ss, bool reuseport, uint16_t *port,
                      struct al_error *err)
{
    int fam = ss->ss_family;
    int fd = socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(err, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    int rc;
    if (fam == AF_INET6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        rc = setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one);
        if (rc == 0)
            rc = setsockopt(fd, SOL_IPV6, IPV6_RECVORIGDSTADDR, &one, sizeof one);
        if (rc == 0)
            rc = setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
    } else {
        rc = setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
        if (rc == 0)
            rc = setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one);
        if (rc == 0)
            rc = setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
    }
    if (rc < 0) {
        int e = errno;
        close(fd);
        return al_error_set(err, -e,
                            "DNS socket options (IP_TRANSPARENT, IP_RECVORIGDSTADDR): %s "
                            "(the proxy needs CAP_NET_ADMIN)",
                            strerror(e));
    }
    struct sockaddr_storage a = *ss;
    if (*port) {
        if (fam == AF_INET)
            ((struct sockaddr_in *)&a)->sin_port = htons(*port);
        else
            ((struct sockaddr_in6 *)&a)->sin6_port = htons(*port);
    }
    if (bind(fd, (struct sockaddr *)&a,
             fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) < 0) {
        int e = errno;
        close(fd);
        char t[80];
        struct egress_ip ip;
        uint16_t p;
        egress_ip_from_sockaddr((const struct sockaddr *)ss, &ip, &p);
        egress_endpoint_text(&ip, *port ? *port : p, t, sizeof t);
        return al_error_set(err, -e, "cannot bind DNS on %s: %s", t, strerror(e));
    }
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(fam == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                 : ((struct sockaddr_in6 *)&a)->sin6_port);
    return fd;
}

/* ---- pipes ------------------------------------------------------------------------- */

int egress_pipe_get(struct egress_worker *w, int fd[2])
{
    if (w->n_pipes) {
        w->n_pipes--;
        fd[0] = w->pipes[w->n_pipes][0];
        fd[1] = w->pipes[w->n_pipes][1];
        return 0;
    }
    if (pipe2(fd, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    fcntl(fd[0], F_SETPIPE_SZ, PIPE_SIZE);
    return 0;
}

void egress_pipe_put(struct egress_worker *w, int fd[2])
{
    if (w->n_pipes >= EGRESS_PIPE_POOL || w->stopping) {
        close(fd[0]);
        close(fd[1]);
        return;
    }
    w->pipes[w->n_pipes][0] = fd[0];
    w->pipes[w->n_pipes][1] = fd[1];
    w->n_pipes++;
}

static void worker__free_pipes(struct egress_worker *w)
{
    while (w->n_pipes) {
        w->n_pipes--;
        close(w->pipes[w->n_pipes][0]);
        close(w->pipes[w->n_pipes][1]);
    }
}

/* ---- listeners ------------------------------------------------------------------------ */

static void worker__on_listener(uv_poll_t *h, int status, int events)
{
    struct egress_listener *l = h->data;
    struct egress_worker *w = l->w;
    if (status < 0 || w->stopping)
        return;
    if (l->kind == 1) {
        egress_dns_udp_readable(w, l);
        return;
    }
    int batch = l->shared ? SHARED_ACCEPT_BATCH : ACCEPT_BATCH;
    for (int i = 0; i < batch; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN) /* EAGAIN: none left (a shared listener: another worker won) */
                al_warn("accept: %s", strerror(errno));
            /* EMFILE/ENFILE: the listen backlog holds the rest until fds are freed. */
            return;
        }
        if (l->kind == 0)
            egress_conn_accept(w, fd, &peer);
        else
            egress_dns_tcp_accept(w, fd);
    }
}

/* ---- slots ---------------------------------------------------------------------------- */

/* token: generation << 32 | index << 1 | 1; an end's address is even. */
static struct egress_slot *worker__slot(struct egress_worker *w, uint64_t t)
{
    uint32_t i = (uint32_t)(t & 0xffffffffu) >> 1;
    if (!(t & 1) || i >= w->n_slots || !w->slots[i].used || w->slots[i].gen != (uint32_t)(t >> 32))
        return NULL;
    return &w->slots[i];
}

uint64_t egress_slot_new(struct egress_worker *w)
{
    if (!w->free_slot) {
        if (w->n_slots >= (1u << 30))
            return 0;
        uint32_t n = w->n_slots ? w->n_slots * 2 : 64;
        struct egress_slot *s = realloc(w->slots, n * sizeof *s);
        if (!s)
            return 0;
        for (uint32_t i = w->n_slots; i < n; i++)
            s[i] = (struct egress_slot){.next_free = i + 2 <= n ? i + 2 : 0};
        w->free_slot = w->n_slots + 1;
        w->slots = s;
        w->n_slots = n;
    }
    uint32_t i = w->free_slot - 1;
    struct egress_slot *s = &w->slots[i];
    w->free_slot = s->next_free;
    s->used = true;
    s->end = NULL;
    return ((uint64_t)s->gen << 32) | ((uint64_t)i << 1) | 1;
}

void egress_slot_set(struct egress_worker *w, uint64_t t, struct egress_end *end)
{
    struct egress_slot *s = worker__slot(w, t);
    if (s)
        s->end = end;
}

void egress_slot_free(struct egress_worker *w, uint64_t t)
{
    struct egress_slot *s = worker__slot(w, t);
    if (!s)
        return;
    s->used = false;
    s->end = NULL;
    s->gen++;
    s->next_free = w->free_slot;
    w->free_slot = (uint32_t)(s - w->slots) + 1;
}

/* The connections' epoll set is readable: dispatch what it reports. */
static void worker__on_ep(uv_poll_t *h, int status, int events)
{
    struct egress_worker *w = h->data;
    struct epoll_event evs[128];
    for (int round = 0; round < 4; round++) {
        int n = epoll_wait(w->ep, evs, 128, 0);
        if (n <= 0)
            return;
        for (int i = 0; i < n; i++) {
            uint64_t d = evs[i].data.u64;
            if (!(d & 1)) {
                egress_conn_on_events(evs[i].data.ptr, evs[i].events);
                continue;
            }
            struct egress_slot *s = worker__slot(w, d);
            if (s && s->end)
                egress_conn_on_events(s->end, evs[i].events);
            else if (s)
                egress_inspect_pool_event(w, d);
        }
        if (n < 128)
            return;
    }
}

static void worker__on_wake(uv_async_t *a)
{
    struct egress_worker *w = a->data;
    if (atomic_exchange(&w->kick_removed, false))
        egress_worker_reap_removed(w);
    if (atomic_exchange(&w->kick_rejudge, false))
        egress_worker_rejudge(w);
    if (!atomic_load(&w->e->stopping) || w->stopping)
        return;
    /* Stop: close listeners, connections (each audited), DNS, resolver. */
    w->stopping = true;
    for (size_t i = 0; i < w->n_listeners; i++)
        uv_close((uv_handle_t *)&w->listeners[i].poll, NULL);
    while (w->conns)
        egress_conn_close(w->conns, true, "proxy_stopping");
    egress_inspect_worker_stop(w); /* after the sessions: they may hand upstreams to the pool */
    free(w->slots);                /* the pool held the last ones */
    w->slots = NULL;
    w->n_slots = w->free_slot = 0;
    uv_close((uv_handle_t *)&w->ep_poll, NULL);
    egress_dns_close_all(w);
    if (w->resolver) {
        egress_resolver_close(w->resolver);
        w->resolver = NULL;
    }
    worker__free_pipes(w);
    uv_close((uv_handle_t *)&w->wake, NULL);
}

static void worker__main(void *arg)
{
    struct egress_worker *w = arg;
    uv_run(&w->loop, UV_RUN_DEFAULT);
    /* Listener fds were closed after their handles (by the owner, egress_free). */
}

int egress_worker_start(struct egress_worker *w)
{
    if (uv_poll_start(&w->ep_poll, UV_READABLE, worker__on_ep) < 0)
        return -EIO;
    for (size_t i = 0; i < w->n_listeners; i++) {
        struct egress_listener *l = &w->listeners[i];
        l->w = w;
        int rc = uv_poll_init(&w->loop, &l->poll, l->fd);
        if (rc < 0)
            return rc;
        l->poll.data = l;
        if ((rc = uv_poll_start(&l->poll, UV_READABLE, worker__on_listener)) < 0)
            return rc;
    }
    int rc = uv_thread_create(&w->thread, worker__main, w);
    if (rc == 0)
        w->started = true;
    return rc;
}

int egress_worker_init(struct egress_worker *w, struct egress *e, unsigned index);
int egress_worker_init(struct egress_worker *w, struct egress *e, unsigned index)
{
    memset(w, 0, sizeof *w);
    w->ep = -1;
    w->e = e;
    w->index = index;
    int rc = uv_loop_init(&w->loop);
    if (rc < 0)
        return rc;
    w->loop.data = w;
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    if (w->ep < 0)
        return -errno;
    uv_poll_init(&w->loop, &w->ep_poll, w->ep);
    w->ep_poll.data = w;
    uv_async_init(&w->loop, &w->wake, worker__on_wake);
    w->wake.data = w;
    if (e->cfg.have_resolver && (rc = egress_resolver_new(&w->loop, &e->cfg, &w->resolver)) < 0)
        return rc;
    if ((rc = egress_inspect_worker_init(w)) < 0)
        return rc;
    return 0;
}

void egress_worker_fini(struct egress_worker *w);
void egress_worker_fini(struct egress_worker *w)
{
    /* The thread has returned from uv_run: every handle is closed. */
    uv_loop_close(&w->loop);
    if (w->ep >= 0)
        close(w->ep);
}
