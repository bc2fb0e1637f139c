/* vmm/kvm/virtio_vsock: virtio-vsock implemented in the VMM (virtio 1.2, section 5.10),
 * bridging unix sockets on the host to stream ports in the guest: the agent channel.
 *
 * Owns: for each configured (guest port, host unix socket path) pair a listening unix
 * socket; each accepted host connection becomes a vsock stream that the VMM opens to the
 * guest port (host CID 2, an ephemeral host port). Bytes flow both ways with vsock credit
 * flow control; the guest cannot make us buffer more than VSOCK_BUF_ALLOC per connection
 * (it is told so, and a guest that overruns its credit gets a reset). Connections the
 * guest tries to open towards the host are refused (RST): the host side never listens on
 * vsock. Packets whose source CID is not the guest's, whose destination is not the host,
 * or whose lengths disagree with their buffers are dropped and counted.
 * The event queue carries TRANSPORT_RESET after a restore (vsock_transport_reset).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/devices_int.h"

#define VSOCK_HOST_CID          2
#define VSOCK_TYPE_STREAM       1
#define VSOCK_OP_REQUEST        1
#define VSOCK_OP_RESPONSE       2
#define VSOCK_OP_RST            3
#define VSOCK_OP_SHUTDOWN       4
#define VSOCK_OP_RW             5
#define VSOCK_OP_CREDIT_UPDATE  6
#define VSOCK_OP_CREDIT_REQUEST 7
#define VSOCK_SHUTDOWN_RCV      1
#define VSOCK_SHUTDOWN_SEND     2

#define VSOCK_RXQ 0
#define VSOCK_TXQ 1
#define VSOCK_EVQ 2

#define VSOCK_BUF_ALLOC (256u * 1024)
#define VSOCK_MAX_PKT   (64u * 1024)
#define VSOCK_MAX_CONNS 64
#define VSOCK_CTL_MAX   256
#define VSOCK_PORT_BASE 0x40000000u
/* A connection request the guest neither accepts nor refuses within this is reset (as
 * Firecracker does, 2 s), so the host side sees its connection end instead of hanging. */
#define VSOCK_CONNECT_TIMEOUT_NS (2000ull * 1000000)

struct vsock_hdr {
    uint64_t src_cid;
    uint64_t dst_cid;
    uint32_t src_port;
    uint32_t dst_port;
    uint32_t len;
    uint16_t type;
    uint16_t op;
    uint32_t flags;
    uint32_t buf_alloc;
    uint32_t fwd_cnt;
} __attribute__((packed));

enum vconn_state { VCONN_FREE = 0, VCONN_CONNECTING, VCONN_OPEN };

struct vsock;

struct vconn {
    struct vsock *vs;
    struct ev_handler ev;
    enum vconn_state state;
    uint32_t local_port; /* host side */
    uint32_t peer_port;  /* guest side */
    uint32_t peer_buf_alloc, peer_fwd_cnt;
    uint32_t tx_cnt;  /* bytes sent to the guest */
    uint32_t fwd_cnt; /* guest bytes delivered to the host socket */
    uint32_t fwd_advertised;
    bool host_eof;   /* the host side sent EOF; SHUTDOWN(SEND) queued */
    bool guest_done; /* the guest will send no more */
    uint32_t events; /* current epoll interest */
    bool registered; /* in the epoll set (removed when interest is empty: a hung-up
                            * socket would otherwise report EPOLLHUP forever) */
    uint8_t *out;    /* guest -> host bytes not yet written */
    uint32_t out_len;
    uint64_t connect_deadline_ns; /* CONNECTING: reset at this time */
};

struct vsock_ctl {
    uint32_t local_port, peer_port;
    uint16_t op;
    uint32_t flags;
};

struct vsock_listener {
    struct ev_handler ev;
    uint32_t port;
    int dir_fd;     /* O_PATH of the socket's directory: unlink works after pivot_root */
    char name[108]; /* the socket's name in that directory */
    bool bound;     /* we created the socket file (only then is it ours to unlink) */
    struct vsock *vs;
};

struct vsock {
    struct virtio_dev dev;
    uint64_t guest_cid;
    struct vsock_listener lst[VMM_KVM_MAX_VSOCK_PORTS];
    int n_lst;
    struct vconn conns[VSOCK_MAX_CONNS];
    struct vsock_ctl ctl[VSOCK_CTL_MAX];
    unsigned ctl_head, ctl_len;
    uint32_t next_port;
    bool reset_event_pending;
    uint64_t dropped; /* packets dropped as invalid */
    uint64_t refused, refused_logged_ns;
    uint64_t timed_out; /* connection requests the guest never answered */
    struct ev_timer connect_timer;
};

static void vsock__pump(struct vsock *vs);
static void vsock__on_conn(struct ev_handler *h, uint32_t events);

static void vsock__config_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
    struct vsock *vs = d->priv;
    kvm_virtio_config_copy(&vs->guest_cid, sizeof vs->guest_cid, off, data, len);
}

static bool vsock__queue_ctl(struct vsock *vs, uint32_t local_port, uint32_t peer_port, uint16_t op,
                             uint32_t flags)
{
    if (vs->ctl_len >= VSOCK_CTL_MAX)
        return false;
    unsigned i = (vs->ctl_head + vs->ctl_len++) % VSOCK_CTL_MAX;
    vs->ctl[i] = (struct vsock_ctl){local_port, peer_port, op, flags};
    return true;
}

static struct vconn *vsock__find(struct vsock *vs, uint32_t local_port, uint32_t peer_port)
{
    for (int i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct vconn *c = &vs->conns[i];
        if (c->state != VCONN_FREE && c->local_port == local_port && c->peer_port == peer_port)
            return c;
    }
    return NULL;
}

/* A slot's vs and handler (fn, ctx) never change: an event the device thread already took
 * from epoll for a connection closed meanwhile (by an earlier event of the same batch, or
 * by a vCPU resetting the device) finds a FREE slot and is ignored (vsock__on_conn), never
 * a zeroed handler. */
static void vsock__slot_clear(struct vconn *c)
{
    struct vsock *vs = c->vs;
    memset(c, 0, sizeof *c);
    c->vs = vs;
    c->ev = (struct ev_handler){.fd = -1, .fn = vsock__on_conn, .ctx = c};
}

static void vsock__close(struct vconn *c)
{
    if (c->state == VCONN_FREE)
        return;
    if (c->registered)
        kvm_evloop_del(&c->vs->dev.vm->loop, &c->ev);
    close(c->ev.fd);
    free(c->out);
    vsock__slot_clear(c);
}

/* Closes c and tells the guest (RST). */
static void vsock__reset_conn(struct vconn *c)
{
    vsock__queue_ctl(c->vs, c->local_port, c->peer_port, VSOCK_OP_RST, 0);
    vsock__close(c);
}

static uint32_t vsock__peer_credit(const struct vconn *c)
{
    uint32_t in_flight = c->tx_cnt - c->peer_fwd_cnt;
    return in_flight >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - in_flight;
}

/* The header of a packet to the guest: what k says, len bytes of payload, and c's credit. */
static void vsock__fill_hdr(struct vsock *vs, struct vsock_hdr *h, const struct vsock_ctl *k,
                            uint32_t len, struct vconn *c)
{
    memset(h, 0, sizeof *h);
    h->src_cid = VSOCK_HOST_CID;
    h->dst_cid = vs->guest_cid;
    h->src_port = k->local_port;
    h->dst_port = k->peer_port;
    h->len = len;
    h->type = VSOCK_TYPE_STREAM;
    h->op = k->op;
    h->flags = k->flags;
    h->buf_alloc = VSOCK_BUF_ALLOC;
    h->fwd_cnt = c ? c->fwd_cnt : 0;
    if (c)
        c->fwd_advertised = c->fwd_cnt;
}

/* Writes buffered guest bytes to the host socket. Returns false if c was closed. */
static bool vsock__flush_out(struct vconn *c)
{
    while (c->out_len) {
        ssize_t w = send(c->ev.fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return true;
            vsock__reset_conn(c); /* the host side went away */
            return false;
        }
        memmove(c->out, c->out + w, c->out_len - (uint32_t)w);
        c->out_len -= (uint32_t)w;
        c->fwd_cnt += (uint32_t)w;
    }
    if (c->guest_done) {
        shutdown(c->ev.fd, SHUT_WR);
        if (c->host_eof) {
            vsock__reset_conn(c); /* both directions finished */
            return false;
        }
    }
    /* Tell the guest about the room we made once half the window is free again. */
    if (c->fwd_cnt - c->fwd_advertised >= VSOCK_BUF_ALLOC / 2)
        vsock__queue_ctl(c->vs, c->local_port, c->peer_port, VSOCK_OP_CREDIT_UPDATE, 0);
    return true;
}

/* Takes `len` data bytes of a guest RW packet (at byte `off` of the chain). */
static void vsock__guest_data(struct vconn *c, const struct virtq_chain *ch, uint64_t off,
                              uint32_t len)
{
    if (c->out_len + (uint64_t)len > VSOCK_BUF_ALLOC) {
        vsock__reset_conn(c); /* the guest ignored the credit we gave it */
        return;
    }
    if (!c->out) {
        c->out = malloc(VSOCK_BUF_ALLOC);
        if (!c->out) {
            vsock__reset_conn(c);
            return;
        }
    }
    kvm_virtq_chain_read(ch, off, c->out + c->out_len, len);
    c->out_len += len;
    vsock__flush_out(c);
}

static void vsock__tx_packet(struct vsock *vs, const struct virtq_chain *ch)
{
    struct vsock_hdr h;
    if (kvm_virtq_chain_read(ch, 0, &h, sizeof h) != sizeof h || ch->n_in) {
        vs->dropped++;
        return;
    }
    /* Identity: the guest may only speak as itself, and only to the host. */
    if (h.src_cid != vs->guest_cid || h.dst_cid != VSOCK_HOST_CID) {
        vs->dropped++;
        return;
    }
    if (h.len > VSOCK_MAX_PKT || h.len > ch->out_len - sizeof h) {
        vs->dropped++;
        return;
    }
    if (h.type != VSOCK_TYPE_STREAM) {
        if (h.op != VSOCK_OP_RST)
            vsock__queue_ctl(vs, h.dst_port, h.src_port, VSOCK_OP_RST, 0);
        return;
    }
    struct vconn *c = vsock__find(vs, h.dst_port, h.src_port);
    if (!c) {
        /* No such connection; this includes every guest-initiated REQUEST: refused. */
        if (h.op != VSOCK_OP_RST)
            vsock__queue_ctl(vs, h.dst_port, h.src_port, VSOCK_OP_RST, 0);
        return;
    }
    c->peer_buf_alloc = h.buf_alloc;
    c->peer_fwd_cnt = h.fwd_cnt;
    switch (h.op) {
    case VSOCK_OP_RESPONSE:
        if (c->state == VCONN_CONNECTING)
            c->state = VCONN_OPEN;
        else
            vsock__reset_conn(c);
        break;
    case VSOCK_OP_RW:
        if (c->state != VCONN_OPEN || c->guest_done) {
            vsock__reset_conn(c);
            break;
        }
        if (h.len)
            vsock__guest_data(c, ch, sizeof h, h.len);
        break;
    case VSOCK_OP_CREDIT_UPDATE:
        break; /* credit already taken from the header */
    case VSOCK_OP_CREDIT_REQUEST:
        vsock__queue_ctl(vs, c->local_port, c->peer_port, VSOCK_OP_CREDIT_UPDATE, 0);
        break;
    case VSOCK_OP_SHUTDOWN:
        if (h.flags & VSOCK_SHUTDOWN_SEND) {
            c->guest_done = true;
            vsock__flush_out(c); /* may close c */
        }
        break;
    case VSOCK_OP_RST:
        vsock__close(c);
        break;
    default:
        vsock__reset_conn(c);
        break;
    }
}

/* Delivers queued control packets into receive buffers; false when out of buffers. */
static bool vsock__rx_ctl(struct vsock *vs, int *done)
{
    struct virtio_dev *d = &vs->dev;
    static __thread struct virtq_chain ch;
    while (vs->ctl_len) {
        int rc = kvm_virtq_pop(&d->vq[VSOCK_RXQ], &d->vm->gm, &ch);
        if (rc == 0 || rc == -EIO)
            return false;
        (*done)++;
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, VSOCK_RXQ, "bad descriptor chain");
            continue;
        }
        if (ch.n_out || ch.in_len < sizeof(struct vsock_hdr)) {
            kvm_virtio_dev_bad_chain(d, VSOCK_RXQ, "receive buffer too small");
            kvm_virtq_push(&d->vq[VSOCK_RXQ], ch.head, 0);
            continue;
        }
        struct vsock_ctl *k = &vs->ctl[vs->ctl_head];
        vs->ctl_head = (vs->ctl_head + 1) % VSOCK_CTL_MAX;
        vs->ctl_len--;
        struct vconn *c = vsock__find(vs, k->local_port, k->peer_port);
        struct vsock_hdr h;
        vsock__fill_hdr(vs, &h, k, 0, c);
        kvm_virtq_chain_write(&ch, 0, &h, sizeof h);
        kvm_virtq_push(&d->vq[VSOCK_RXQ], ch.head, sizeof h);
    }
    return true;
}

/* Moves host bytes of c into receive buffers while there are buffers and credit. */
static bool vsock__rx_data(struct vsock *vs, struct vconn *c, int *done)
{
    struct virtio_dev *d = &vs->dev;
    static __thread struct virtq_chain ch;
    while (c->state == VCONN_OPEN && !c->host_eof) {
        uint32_t credit = vsock__peer_credit(c);
        if (credit == 0)
            return true;
        int rc = kvm_virtq_pop(&d->vq[VSOCK_RXQ], &d->vm->gm, &ch);
        if (rc == 0 || rc == -EIO)
            return false;
        if (rc < 0) {
            (*done)++;
            kvm_virtio_dev_bad_chain(d, VSOCK_RXQ, "bad descriptor chain");
            continue;
        }
        if (ch.n_out || ch.in_len <= sizeof(struct vsock_hdr)) {
            (*done)++;
            kvm_virtio_dev_bad_chain(d, VSOCK_RXQ, "receive buffer too small");
            kvm_virtq_push(&d->vq[VSOCK_RXQ], ch.head, 0);
            continue;
        }
        uint64_t room = ch.in_len - sizeof(struct vsock_hdr);
        uint32_t want = credit < VSOCK_MAX_PKT ? credit : VSOCK_MAX_PKT;
        if (room < want)
            want = (uint32_t)room;
        struct iovec src[VIRTQ_MAX_SEGS], v[VIRTQ_MAX_SEGS];
        for (unsigned i = 0; i < ch.n_in; i++)
            src[i] = (struct iovec){ch.seg[i].p, ch.seg[i].len};
        int n = kvm_iov_slice(src, ch.n_in, sizeof(struct vsock_hdr), want, v, VIRTQ_MAX_SEGS);
        ssize_t r = n < 0 ? -1 : readv(c->ev.fd, v, n);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            kvm_virtq_unpop(&d->vq[VSOCK_RXQ]);
            return true;
        }
        if (r <= 0) {
            kvm_virtq_unpop(&d->vq[VSOCK_RXQ]);
            if (r == 0) {
                c->host_eof = true; /* half-close: the guest may still answer */
                vsock__queue_ctl(vs, c->local_port, c->peer_port, VSOCK_OP_SHUTDOWN,
                                 VSOCK_SHUTDOWN_SEND);
                if (c->guest_done && !c->out_len)
                    vsock__reset_conn(c);
            } else {
                vsock__reset_conn(c);
            }
            return true;
        }
        struct vsock_hdr h;
        const struct vsock_ctl rw = {
            .local_port = c->local_port, .peer_port = c->peer_port, .op = VSOCK_OP_RW};
        vsock__fill_hdr(vs, &h, &rw, (uint32_t)r, c);
        kvm_virtq_chain_write(&ch, 0, &h, sizeof h);
        c->tx_cnt += (uint32_t)r;
        kvm_virtq_push(&d->vq[VSOCK_RXQ], ch.head, (uint32_t)(sizeof h + (uint64_t)r));
        (*done)++;
    }
    return true;
}

static void vsock__set_events(struct vconn *c, uint32_t ev)
{
    struct evloop *l = &c->vs->dev.vm->loop;
    if (ev == 0) {
        if (c->registered)
            kvm_evloop_del(l, &c->ev);
        c->registered = false;
    } else if (!c->registered) {
        c->registered = kvm_evloop_add(l, &c->ev, ev) == 0;
    } else if (ev != c->events) {
        kvm_evloop_mod(l, &c->ev, ev);
    }
    c->events = ev;
}

static void vsock__update_interest(struct vconn *c, bool have_buffers)
{
    if (c->state == VCONN_FREE)
        return;
    uint32_t ev = 0;
    if (have_buffers && c->state == VCONN_OPEN && !c->host_eof && vsock__peer_credit(c) > 0)
        ev |= EPOLLIN;
    if (c->out_len)
        ev |= EPOLLOUT;
    vsock__set_events(c, ev);
}

/* The one place work happens: transmit queue, control packets, data, fd interest. */
static void vsock__pump(struct vsock *vs)
{
    struct virtio_dev *d = &vs->dev;
    if (!d->active)
        return;
    static __thread struct virtq_chain ch;
    int tx_done = 0, rx_done = 0;
    /* Guest packets, as long as our control queue has room for the answers. */
    while (vs->ctl_len + 2 < VSOCK_CTL_MAX) {
        int rc = kvm_virtq_pop(&d->vq[VSOCK_TXQ], &d->vm->gm, &ch);
        if (rc == 0)
            break;
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, VSOCK_TXQ,
                                     rc == -EIO ? "queue broken" : "bad descriptor chain");
            if (rc == -EIO)
                break;
            tx_done++;
            continue;
        }
        vsock__tx_packet(vs, &ch);
        kvm_virtq_push(&d->vq[VSOCK_TXQ], ch.head, 0);
        tx_done++;
    }
    if (tx_done)
        kvm_virtio_dev_used(d, VSOCK_TXQ);

    bool have_buffers = vsock__rx_ctl(vs, &rx_done);
    for (int i = 0; i < VSOCK_MAX_CONNS && have_buffers; i++) {
        if (vs->conns[i].state == VCONN_OPEN)
            have_buffers = vsock__rx_data(vs, &vs->conns[i], &rx_done);
    }
    /* Data reads may have queued SHUTDOWN/RST packets. */
    if (have_buffers)
        vsock__rx_ctl(vs, &rx_done);
    if (rx_done)
        kvm_virtio_dev_used(d, VSOCK_RXQ);

    /* Without receive buffers, stop reading host sockets until the guest adds some. */
    for (int i = 0; i < VSOCK_MAX_CONNS; i++)
        vsock__update_interest(&vs->conns[i], have_buffers);
}

static void vsock__on_conn(struct ev_handler *h, uint32_t events)
{
    struct vconn *c = h->ctx;
    struct vsock *vs = c->vs;
    pthread_mutex_lock(&vs->dev.lock);
    if (c->state == VCONN_FREE) {
        pthread_mutex_unlock(&vs->dev.lock); /* closed after epoll reported it */
        return;
    }
    if (c->state != VCONN_FREE && (events & EPOLLOUT))
        vsock__flush_out(c);
    if (c->state != VCONN_FREE && (events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN) &&
        !(c->events & EPOLLIN))
        vsock__reset_conn(c); /* gone, and nothing left for us to read */
    vsock__pump(vs);
    pthread_mutex_unlock(&vs->dev.lock);
}

/* Resets the connections whose request the guest left unanswered; re-arms for the next. */
static void vsock__on_connect_timer(struct ev_timer *t)
{
    struct vsock *vs = t->ctx;
    pthread_mutex_lock(&vs->dev.lock);
    uint64_t now = al_now_ns(), next = 0;
    for (int i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct vconn *c = &vs->conns[i];
        if (c->state != VCONN_CONNECTING)
            continue;
        if (c->connect_deadline_ns <= now &&
            __atomic_load_n(&vs->dev.vm->paused, __ATOMIC_ACQUIRE)) {
            c->connect_deadline_ns = now + VSOCK_CONNECT_TIMEOUT_NS; /* it cannot answer now */
        }
        if (c->connect_deadline_ns <= now) {
            vs->timed_out++;
            al_warn("vsock: the guest answered no connection request to port %u within %llu ms: "
                    "reset (%llu so far)",
                    c->peer_port, VSOCK_CONNECT_TIMEOUT_NS / 1000000,
                    (unsigned long long)vs->timed_out);
            vsock__reset_conn(c);
        } else if (!next || c->connect_deadline_ns < next) {
            next = c->connect_deadline_ns;
        }
    }
    t->at_ns = next;
    vsock__pump(vs);
    pthread_mutex_unlock(&vs->dev.lock);
}

static void vsock__on_accept(struct ev_handler *h, uint32_t events)
{
    struct vsock_listener *l = h->ctx;
    struct vsock *vs = l->vs;
    int fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    pthread_mutex_lock(&vs->dev.lock);
    struct vconn *c = NULL;
    for (int i = 0; i < VSOCK_MAX_CONNS && !c; i++)
        if (vs->conns[i].state == VCONN_FREE)
            c = &vs->conns[i];
    if (!c || !vs->dev.active) {
        /* At most one line per 5 s: clients retry while the guest boots. */
        uint64_t now = al_now_ns();
        vs->refused++;
        if (now - vs->refused_logged_ns > 5000000000ull) {
            al_warn("vsock: refusing connections to guest port %u (%s; %llu refused so far)",
                    l->port, c ? "the guest driver is not ready" : "too many connections",
                    (unsigned long long)vs->refused);
            vs->refused_logged_ns = now;
        }
        close(fd);
        pthread_mutex_unlock(&vs->dev.lock);
        return;
    }
    vsock__slot_clear(c);
    kvm_evloop_forget(&vs->dev.vm->loop, &c->ev); /* the slot's old events are not this fd's */
    c->ev.fd = fd;
    c->state = VCONN_CONNECTING;
    c->peer_port = l->port;
    c->local_port = VSOCK_PORT_BASE + (vs->next_port++ & 0x3fffffff);
    c->connect_deadline_ns = al_now_ns() + VSOCK_CONNECT_TIMEOUT_NS;
    if (!vs->connect_timer.at_ns || c->connect_deadline_ns < vs->connect_timer.at_ns)
        vs->connect_timer.at_ns = c->connect_deadline_ns; /* (this is the device thread) */
    vsock__queue_ctl(vs, c->local_port, c->peer_port, VSOCK_OP_REQUEST, 0);
    vsock__pump(vs);
    pthread_mutex_unlock(&vs->dev.lock);
}

static void vsock__notify(struct virtio_dev *d, int qi)
{
    struct vsock *vs = d->priv;
    if (qi == VSOCK_EVQ) {
        if (vs->reset_event_pending) {
            static __thread struct virtq_chain ch;
            if (kvm_virtq_pop(&d->vq[VSOCK_EVQ], &d->vm->gm, &ch) == 1) {
                uint32_t id = 0; /* VIRTIO_VSOCK_EVENT_TRANSPORT_RESET */
                uint32_t n = (uint32_t)kvm_virtq_chain_write(&ch, 0, &id, sizeof id);
                kvm_virtq_push(&d->vq[VSOCK_EVQ], ch.head, n);
                vs->reset_event_pending = false;
                kvm_virtio_dev_used(d, VSOCK_EVQ);
            }
        }
        return;
    }
    vsock__pump(vs);
}

static void vsock__drop_all(struct vsock *vs)
{
    for (int i = 0; i < VSOCK_MAX_CONNS; i++)
        vsock__close(&vs->conns[i]);
    vs->ctl_len = vs->ctl_head = 0;
}

static void vsock__reset(struct virtio_dev *d)
{
    vsock__drop_all(d->priv);
}

static void vsock__activate(struct virtio_dev *d)
{
    vsock__pump(d->priv);
}

/* After a restore the guest's connections refer to host sockets that no longer exist:
 * tell it the transport was reset (it drops them and re-reads its CID). */
static void vsock__restored(struct virtio_dev *d)
{
    struct vsock *vs = d->priv;
    vs->reset_event_pending = true;
    vsock__notify(d, VSOCK_EVQ);
    vsock__pump(vs);
}

static const struct virtio_dev_ops vsock__ops = {
    .name = "vsock",
    .device_id = VIRTIO_ID_VSOCK,
    .nqueues = 3,
    .config_read = vsock__config_read,
    .notify = vsock__notify,
    .activate = vsock__activate,
    .reset = vsock__reset,
    .restored = vsock__restored,
};

static int vsock__listen(struct vsock_listener *l, const char *path, struct al_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return al_error_set(err, -ENAMETOOLONG, "agent socket path %s is too long", path);
    strcpy(sa.sun_path, path);
    const char *slash = strrchr(path, '/');
    char dir[108];
    if (slash) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
        if (!dir[0])
            strcpy(dir, "/");
    } else {
        strcpy(dir, ".");
    }
    snprintf(l->name, sizeof l->name, "%s", slash ? slash + 1 : path);
    l->dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (l->dir_fd < 0)
        return al_error_set(err, -errno, "cannot open directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return al_error_set(err, -EEXIST, "%s exists and is not a socket; not replacing it",
                                path);
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(err, -errno, "socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        l->bound = true;
    if (!l->bound || chmod(path, 0600) < 0 || listen(fd, 64) < 0) {
        int e = -errno;
        close(fd);
        return al_error_set(err, e, "cannot listen on %s: %s", path, strerror(-e));
    }
    return fd;
}

struct virtio_dev *kvm_vsock_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                    struct al_error *err)
{
    if (vm->cfg.guest_cid < 3 || vm->cfg.guest_cid > 0xfffffffeu) {
        al_error_set(err, -EINVAL, "guest CID %u is reserved: use 3 or more", vm->cfg.guest_cid);
        return NULL;
    }
    struct vsock *vs = calloc(1, sizeof *vs);
    if (!vs) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    vs->guest_cid = vm->cfg.guest_cid;
    for (int i = 0; i < VSOCK_MAX_CONNS; i++) {
        vs->conns[i].vs = vs;
        vsock__slot_clear(&vs->conns[i]);
    }
    for (int i = 0; i < VMM_KVM_MAX_VSOCK_PORTS; i++)
        vs->lst[i].ev.fd = vs->lst[i].dir_fd = -1;
    if (kvm_virtio_dev_init(
            &vs->dev, vm,
            &(struct virtio_dev_opts){.ops = &vsock__ops, .priv = vs, .base = base, .irq = irq},
            err) < 0)
        goto fail;
    vs->connect_timer = (struct ev_timer){.fn = vsock__on_connect_timer, .ctx = vs};
    if (kvm_evloop_timer_add(&vm->loop, &vs->connect_timer) < 0) {
        al_error_set(err, -ENOSPC, "vsock: no timer left in the device loop");
        goto fail;
    }
    for (int i = 0; i < vm->cfg.n_vsock; i++) {
        struct vsock_listener *l = &vs->lst[i];
        l->vs = vs;
        l->port = vm->cfg.vsock[i].port;
        vs->n_lst++;
        int fd;
        if (vm->cfg.vsock[i].path) {
            fd = vsock__listen(l, vm->cfg.vsock[i].path, err);
        } else if (vm->cfg.vsock[i].fd > 2) {
            fd = vm->cfg.vsock[i].fd; /* handed in, already listening; not ours to unlink */
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
                al_error_set(err, -errno, "agent socket fd %d: %s", fd, strerror(errno));
                goto fail;
            }
        } else {
            al_error_set(err, -EINVAL, "vsock port %u has neither a socket path nor a descriptor",
                         l->port);
            goto fail;
        }
        if (fd < 0)
            goto fail;
        l->ev = (struct ev_handler){.fd = fd, .fn = vsock__on_accept, .ctx = l};
        if (kvm_evloop_add(&vm->loop, &l->ev, EPOLLIN) < 0) {
            al_error_set(err, -errno, "epoll: %s", strerror(errno));
            goto fail;
        }
    }
    return &vs->dev;
fail:
    kvm_vsock_destroy(&vs->dev);
    return NULL;
}

void kvm_vsock_destroy(struct virtio_dev *d)
{
    if (!d)
        return;
    struct vsock *vs = d->priv;
    kvm_evloop_timer_del(&d->vm->loop, &vs->connect_timer);
    vsock__drop_all(vs);
    for (int i = 0; i < vs->n_lst; i++) {
        if (vs->lst[i].ev.fd >= 0) {
            kvm_evloop_del(&d->vm->loop, &vs->lst[i].ev);
            close(vs->lst[i].ev.fd);
        }
        if (vs->lst[i].dir_fd >= 0) {
            if (vs->lst[i].bound)
                unlinkat(vs->lst[i].dir_fd, vs->lst[i].name, 0);
            close(vs->lst[i].dir_fd);
        }
    }
    kvm_virtio_dev_free(d);
    free(vs);
}
