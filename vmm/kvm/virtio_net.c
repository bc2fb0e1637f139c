/* vmm/kvm/virtio_net: virtio-net on a tap device (virtio 1.2, section 5.1).
 *
 * Owns: the tap (or none: an unplugged NIC drops what the guest sends) (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, 12-byte header, no offloads), moving
 * frames between it and the guest's queues on the device thread. No offload feature is
 * offered, and the virtio-net header the guest sends is never passed on: the tap gets a
 * zeroed header of our own, so a guest cannot ask the host for GSO or checksum work.
 * Frames are bounded (VNET_MAX_FRAME); a guest without receive buffers makes us stop
 * reading the tap (the kernel queue then drops), never buffer without bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/kvm/devices_int.h"

#define VIRTIO_NET_F_MAC 5
#define VNET_HDR_LEN     12
#define VNET_MAX_FRAME   (65535 + 14)
#define VNET_RXQ         0
#define VNET_TXQ         1

struct virtio_net_config {
    uint8_t mac[6];
    uint16_t status;
    uint16_t max_virtqueue_pairs;
    uint16_t mtu;
} __attribute__((packed));

struct vnet {
    struct virtio_dev dev;
    struct virtio_net_config cfg;
    struct ev_handler tap_ev;
    bool tap_polling;
    uint64_t rx_frames, tx_frames, tx_dropped, rx_truncated;
};

static void vnet__config_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
    struct vnet *n = d->priv;
    kvm_virtio_config_copy(&n->cfg, sizeof n->cfg, off, data, len);
}

static void vnet__poll_tap(struct vnet *n, bool on)
{
    if (n->tap_polling == on || n->tap_ev.fd < 0)
        return;
    if (kvm_evloop_mod(&n->dev.vm->loop, &n->tap_ev, on ? EPOLLIN : 0) == 0)
        n->tap_polling = on;
}

static void vnet__tx(struct vnet *n)
{
    struct virtio_dev *d = &n->dev;
    struct virtq *q = &d->vq[VNET_TXQ];
    static __thread struct virtq_chain c;
    int rc, done = 0;
    while ((rc = kvm_virtq_pop(q, &d->vm->gm, &c)) != 0) {
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, VNET_TXQ,
                                     rc == -EIO ? "queue broken" : "bad descriptor chain");
            if (rc == -EIO)
                break;
            done++;
            continue;
        }
        done++;
        if (c.out_len < VNET_HDR_LEN + 14 || c.out_len > VNET_HDR_LEN + VNET_MAX_FRAME || c.n_in) {
            kvm_virtio_dev_bad_chain(d, VNET_TXQ, "frame length out of bounds");
            kvm_virtq_push(q, c.head, 0);
            continue;
        }
        struct iovec src[VIRTQ_MAX_SEGS], v[VIRTQ_MAX_SEGS + 1];
        for (unsigned i = 0; i < c.n_out; i++)
            src[i] = (struct iovec){c.seg[i].p, c.seg[i].len};
        uint8_t hdr[VNET_HDR_LEN] = {0}; /* ours, not the guest's */
        v[0] = (struct iovec){hdr, sizeof hdr};
        int k = kvm_iov_slice(src, c.n_out, VNET_HDR_LEN, c.out_len - VNET_HDR_LEN, v + 1,
                              VIRTQ_MAX_SEGS);
        if (k >= 0 && n->tap_ev.fd >= 0 && writev(n->tap_ev.fd, v, k + 1) >= 0)
            n->tx_frames++;
        else
            n->tx_dropped++; /* tap full or gone: a NIC drops too */
        kvm_virtq_push(q, c.head, 0);
    }
    if (done)
        kvm_virtio_dev_used(d, VNET_TXQ);
}

/* Moves frames from the tap into receive buffers while both exist. Lock held. */
static void vnet__rx(struct vnet *n)
{
    struct virtio_dev *d = &n->dev;
    struct virtq *q = &d->vq[VNET_RXQ];
    static __thread struct virtq_chain c;
    int done = 0;
    for (;;) {
        if (!d->active || !kvm_virtq_has_avail(q)) {
            vnet__poll_tap(n, false); /* resumed by the guest's next rx notify */
            break;
        }
        int rc = kvm_virtq_pop(q, &d->vm->gm, &c);
        if (rc == 0)
            break;
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, VNET_RXQ,
                                     rc == -EIO ? "queue broken" : "bad descriptor chain");
            if (rc == -EIO)
                break;
            done++;
            continue;
        }
        if (c.n_out || c.in_len < VNET_HDR_LEN + 14) {
            kvm_virtio_dev_bad_chain(d, VNET_RXQ, "receive buffer too small or readable");
            kvm_virtq_push(q, c.head, 0);
            done++;
            continue;
        }
        struct iovec v[VIRTQ_MAX_SEGS];
        for (unsigned i = 0; i < c.n_in; i++)
            v[i] = (struct iovec){c.seg[c.n_out + i].p, c.seg[c.n_out + i].len};
        ssize_t got = readv(n->tap_ev.fd, v, c.n_in);
        if (got < 0) {
            /* Nothing waiting (EAGAIN): give the buffer back unused. */
            kvm_virtq_unpop(q);
            break;
        }
        uint16_t one = 1;
        kvm_virtq_chain_write(&c, 10, &one, 2); /* num_buffers */
        if ((uint64_t)got > c.in_len)
            n->rx_truncated++;
        kvm_virtq_push(q, c.head, (uint32_t)((uint64_t)got < c.in_len ? (uint64_t)got : c.in_len));
        n->rx_frames++;
        done++;
    }
    if (done)
        kvm_virtio_dev_used(d, VNET_RXQ);
}

static void vnet__on_tap(struct ev_handler *h, uint32_t events)
{
    struct vnet *n = h->ctx;
    pthread_mutex_lock(&n->dev.lock);
    vnet__rx(n);
    pthread_mutex_unlock(&n->dev.lock);
}

static void vnet__notify(struct virtio_dev *d, int qi)
{
    struct vnet *n = d->priv;
    if (qi == VNET_TXQ) {
        vnet__tx(n);
    } else if (qi == VNET_RXQ) {
        vnet__poll_tap(n, true);
        vnet__rx(n);
    }
}

static void vnet__activate(struct virtio_dev *d)
{
    struct vnet *n = d->priv;
    vnet__poll_tap(n, true);
}

static void vnet__reset(struct virtio_dev *d)
{
    struct vnet *n = d->priv;
    vnet__poll_tap(n, false);
}

static const struct virtio_dev_ops vnet__ops = {
    .name = "net",
    .device_id = VIRTIO_ID_NET,
    .nqueues = 2,
    .config_read = vnet__config_read,
    .notify = vnet__notify,
    .activate = vnet__activate,
    .reset = vnet__reset,
    .restored = vnet__activate,
};

/* Header size and no offloads; takes ownership of fd (closed on failure). */
static int vnet__setup_tap(int fd, const char *name, struct al_error *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    if (ioctl(fd, TUNGETIFF, &ifr) < 0 || !(ifr.ifr_flags & IFF_TAP) ||
        !(ifr.ifr_flags & IFF_NO_PI) || !(ifr.ifr_flags & IFF_VNET_HDR)) {
        close(fd);
        return al_error_set(err, -EINVAL,
                            "%s is not a tap opened with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR", name);
    }
    int hdr = VNET_HDR_LEN;
    if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0 || ioctl(fd, TUNSETOFFLOAD, 0) < 0) {
        int e = -errno;
        close(fd);
        return al_error_set(err, e, "cannot configure tap %s: %s", name, strerror(-e));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = -errno;
        close(fd);
        return al_error_set(err, e, "cannot make tap %s non-blocking: %s", name, strerror(-e));
    }
    return fd;
}

static int vnet__open_tap(const char *name, struct al_error *err)
{
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open /dev/net/tun: %s", strerror(errno));
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (strlen(name) >= IFNAMSIZ) {
        close(fd);
        return al_error_set(err, -EINVAL, "tap name '%s' is longer than %d characters", name,
                            IFNAMSIZ - 1);
    }
    strcpy(ifr.ifr_name, name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        int e = -errno;
        close(fd);
        return al_error_set(err, e,
                            "cannot attach to tap %s: %s (create it first, owned by this user)",
                            name, strerror(-e));
    }
    return vnet__setup_tap(fd, name, err);
}

struct virtio_dev *kvm_vnet_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err)
{
    struct vnet *n = calloc(1, sizeof *n);
    if (!n) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if (vm->cfg.tap)
        n->tap_ev.fd = vnet__open_tap(vm->cfg.tap, err);
    else if (vm->cfg.tap_fd > 2)
        n->tap_ev.fd = vnet__setup_tap(vm->cfg.tap_fd, "the tap handed in", err);
    else
        n->tap_ev.fd = -1; /* unplugged */
    if (n->tap_ev.fd < 0 && !vm->cfg.net_unplugged) {
        free(n);
        return NULL;
    }
    n->tap_ev.fn = vnet__on_tap;
    n->tap_ev.ctx = n;
    memcpy(n->cfg.mac, vm->cfg.mac, 6);
    static const uint8_t zero[6];
    if (memcmp(n->cfg.mac, zero, 6) == 0) {
        /* None given: a random locally administered unicast address. */
        n->cfg.mac[0] = 0x02;
        if (getrandom(n->cfg.mac + 1, 5, 0) != 5)
            n->cfg.mac[5] = 1;
    }
    if (kvm_virtio_dev_init(&n->dev, vm,
                            &(struct virtio_dev_opts){.ops = &vnet__ops,
                                                      .priv = n,
                                                      .features = 1ull << VIRTIO_NET_F_MAC,
                                                      .base = base,
                                                      .irq = irq},
                            err) < 0 ||
        (n->tap_ev.fd >= 0 && kvm_evloop_add(&vm->loop, &n->tap_ev, 0) < 0)) {
        kvm_vnet_destroy(&n->dev);
        return NULL;
    }
    return &n->dev;
}

void kvm_vnet_destroy(struct virtio_dev *d)
{
    if (!d)
        return;
    struct vnet *n = d->priv;
    if (n->tap_ev.fd >= 0) {
        kvm_evloop_del(&d->vm->loop, &n->tap_ev);
        close(n->tap_ev.fd);
    }
    kvm_virtio_dev_free(d);
    free(n);
}
