/* vmm/kvm/virtio_mmio: the virtio-mmio transport (see virtio.h). */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/kvm/virtio.h"

#define VMMIO_MAGIC             0x000
#define VMMIO_VERSION           0x004
#define VMMIO_DEVICE_ID         0x008
#define VMMIO_VENDOR_ID         0x00c
#define VMMIO_DEVICE_FEATURES   0x010
#define VMMIO_DEVICE_FEAT_SEL   0x014
#define VMMIO_DRIVER_FEATURES   0x020
#define VMMIO_DRIVER_FEAT_SEL   0x024
#define VMMIO_QUEUE_SEL         0x030
#define VMMIO_QUEUE_NUM_MAX     0x034
#define VMMIO_QUEUE_NUM         0x038
#define VMMIO_QUEUE_READY       0x044
#define VMMIO_QUEUE_NOTIFY      0x050
#define VMMIO_INT_STATUS        0x060
#define VMMIO_INT_ACK           0x064
#define VMMIO_STATUS            0x070
#define VMMIO_QUEUE_DESC_LOW    0x080
#define VMMIO_QUEUE_DESC_HIGH   0x084
#define VMMIO_QUEUE_DRIVER_LOW  0x090
#define VMMIO_QUEUE_DRIVER_HIGH 0x094
#define VMMIO_QUEUE_DEVICE_LOW  0x0a0
#define VMMIO_QUEUE_DEVICE_HIGH 0x0a4
#define VMMIO_CONFIG_GEN        0x0fc
#define VMMIO_CONFIG            0x100

#define VMMIO_VENDOR 0x4c524941u /* "AIRL" */

void kvm_virtio_dev_interrupt(struct virtio_dev *d, uint32_t bits)
{
    atomic_fetch_or(&d->int_status, bits);
    if (d->irqfd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(d->irqfd, &one, sizeof one);
        (void)w;
    }
}

void kvm_virtio_dev_used(struct virtio_dev *d, int qi)
{
    if (kvm_virtq_should_notify(&d->vq[qi]))
        kvm_virtio_dev_interrupt(d, VIRTIO_INT_USED);
}

void kvm_virtio_dev_bad_chain(struct virtio_dev *d, int qi, const char *why)
{
    d->bad_chains++;
    /* 1, 2, 4, 8, ...: a hostile guest cannot flood the log. */
    if ((d->bad_chains & (d->bad_chains - 1)) == 0)
        al_warn("virtio-%s queue %d: malformed request from the guest (%s); %llu so far",
                d->ops->name, qi, why, (unsigned long long)d->bad_chains);
}

/* Warnings a guest can trigger at will are rate-limited: the 1st, 2nd, 4th, 8th, ... */
static bool virtio__guest_warn_due(struct virtio_dev *d)
{
    d->guest_warnings++;
    return (d->guest_warnings & (d->guest_warnings - 1)) == 0;
}

static void virtio__reset(struct virtio_dev *d)
{
    if (d->ops->reset)
        d->ops->reset(d);
    for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
        kvm_virtq_reset(&d->vq[i]);
    d->status = 0;
    d->driver_features = 0;
    d->dev_feat_sel = d->drv_feat_sel = d->queue_sel = 0;
    atomic_store(&d->int_status, 0);
    d->active = false;
}

static struct virtq *virtio__sel_queue(struct virtio_dev *d)
{
    if (d->queue_sel >= (uint32_t)d->ops->nqueues)
        return NULL;
    return &d->vq[d->queue_sel];
}

void kvm_virtio_mmio_read(struct virtio_dev *d, uint64_t off, uint8_t *data, uint32_t size)
{
    memset(data, 0, size);
    pthread_mutex_lock(&d->lock);
    if (off >= VMMIO_CONFIG) {
        if (d->ops->config_read && off - VMMIO_CONFIG < 0x1000)
            d->ops->config_read(d, (uint32_t)(off - VMMIO_CONFIG), data, size);
        goto out;
    }
    if (size != 4 || (off & 3))
        goto out; /* registers are 32-bit only */
    uint32_t v = 0;
    struct virtq *q = virtio__sel_queue(d);
    switch (off) {
    case VMMIO_MAGIC:
        v = 0x74726976;
        break; /* "virt" */
    case VMMIO_VERSION:
        v = 2;
        break;
    case VMMIO_DEVICE_ID:
        v = d->ops->device_id;
        break;
    case VMMIO_VENDOR_ID:
        v = VMMIO_VENDOR;
        break;
    case VMMIO_DEVICE_FEATURES:
        v = d->dev_feat_sel == 0   ? (uint32_t)d->features
            : d->dev_feat_sel == 1 ? (uint32_t)(d->features >> 32)
                                   : 0;
        break;
    case VMMIO_QUEUE_NUM_MAX:
        v = q ? VIRTQ_MAX_SIZE : 0;
        break;
    case VMMIO_QUEUE_READY:
        v = q ? q->ready : 0;
        break;
    case VMMIO_INT_STATUS:
        v = atomic_load(&d->int_status);
        break;
    case VMMIO_STATUS:
        v = d->status;
        break;
    case VMMIO_CONFIG_GEN:
        v = d->config_gen;
        break;
    default:
        break;
    }
    memcpy(data, &v, 4);
out:
    pthread_mutex_unlock(&d->lock);
}

static void virtio__set_status(struct virtio_dev *d, uint32_t v)
{
    if (v == 0) {
        virtio__reset(d);
        return;
    }
    v |= d->status & VIRTIO_STATUS_NEEDS_RESET; /* ours to set; only a reset clears it */
    if ((v & VIRTIO_STATUS_FEATURES_OK) && !(d->status & VIRTIO_STATUS_FEATURES_OK)) {
        /* Accept only what we offered, and only the modern interface. */
        if ((d->driver_features & ~d->features) || !(d->driver_features & VIRTIO_F_VERSION_1)) {
            if (virtio__guest_warn_due(d))
                al_warn("virtio-%s: driver accepted features 0x%llx, offered 0x%llx: refused "
                        "(%llu guest errors so far)",
                        d->ops->name, (unsigned long long)d->driver_features,
                        (unsigned long long)d->features, (unsigned long long)d->guest_warnings);
            v &= ~(uint32_t)VIRTIO_STATUS_FEATURES_OK;
        }
    }
    if ((v & VIRTIO_STATUS_DRIVER_OK) && !(d->status & VIRTIO_STATUS_DRIVER_OK)) {
        if (!(v & VIRTIO_STATUS_FEATURES_OK)) {
            v &= ~(uint32_t)VIRTIO_STATUS_DRIVER_OK;
        } else {
            d->status = v;
            d->active = true;
            if (d->ops->activate)
                d->ops->activate(d);
            return;
        }
    }
    d->status = v;
}

void kvm_virtio_mmio_write(struct virtio_dev *d, uint64_t off, const uint8_t *data, uint32_t size)
{
    pthread_mutex_lock(&d->lock);
    if (off >= VMMIO_CONFIG || size != 4 || (off & 3))
        goto out; /* config space is read-only for our devices; registers are 32-bit */
    uint32_t v;
    memcpy(&v, data, 4);
    struct virtq *q = virtio__sel_queue(d);
    /* Queue layout may change only while the queue is not ready (spec 4.2.2.2). */
    bool q_writable = q && !q->ready;
    switch (off) {
    case VMMIO_DEVICE_FEAT_SEL:
        d->dev_feat_sel = v;
        break;
    case VMMIO_DRIVER_FEATURES:
        if (d->status & VIRTIO_STATUS_FEATURES_OK)
            break;
        if (d->drv_feat_sel == 0)
            d->driver_features = (d->driver_features & ~0xffffffffull) | v;
        else if (d->drv_feat_sel == 1)
            d->driver_features = (d->driver_features & 0xffffffffull) | ((uint64_t)v << 32);
        break;
    case VMMIO_DRIVER_FEAT_SEL:
        d->drv_feat_sel = v;
        break;
    case VMMIO_QUEUE_SEL:
        d->queue_sel = v;
        break;
    case VMMIO_QUEUE_NUM:
        if (q_writable)
            q->size = v > 0xffff ? 0 : (uint16_t)v;
        break;
    case VMMIO_QUEUE_READY:
        if (!q)
            break;
        if (v == 1 && !q->ready) {
            if (kvm_virtq_activate(q, &d->vm->gm) < 0) {
                if (virtio__guest_warn_due(d))
                    al_warn("virtio-%s queue %u: invalid layout (size %u, rings "
                            "0x%llx/0x%llx/0x%llx; %llu guest errors so far)",
                            d->ops->name, d->queue_sel, q->size, (unsigned long long)q->desc_gpa,
                            (unsigned long long)q->avail_gpa, (unsigned long long)q->used_gpa,
                            (unsigned long long)d->guest_warnings);
                d->status |= VIRTIO_STATUS_NEEDS_RESET;
                kvm_virtio_dev_interrupt(d, VIRTIO_INT_CONFIG);
            } else {
                q->ready = true;
            }
        } else if (v == 0) {
            q->ready = false;
        }
        break;
    case VMMIO_QUEUE_NOTIFY:
        /* Normally caught by KVM's ioeventfd and never seen here; without KVM (tests) or
         * for a value no ioeventfd matches, handle it inline. */
        if (v < (uint32_t)d->ops->nqueues && d->active && d->ops->notify)
            d->ops->notify(d, (int)v);
        break;
    case VMMIO_INT_ACK:
        atomic_fetch_and(&d->int_status, ~v);
        break;
    case VMMIO_STATUS:
        virtio__set_status(d, v);
        break;
    case VMMIO_QUEUE_DESC_LOW:
        if (q_writable)
            q->desc_gpa = (q->desc_gpa & ~0xffffffffull) | v;
        break;
    case VMMIO_QUEUE_DESC_HIGH:
        if (q_writable)
            q->desc_gpa = (q->desc_gpa & 0xffffffffull) | ((uint64_t)v << 32);
        break;
    case VMMIO_QUEUE_DRIVER_LOW:
        if (q_writable)
            q->avail_gpa = (q->avail_gpa & ~0xffffffffull) | v;
        break;
    case VMMIO_QUEUE_DRIVER_HIGH:
        if (q_writable)
            q->avail_gpa = (q->avail_gpa & 0xffffffffull) | ((uint64_t)v << 32);
        break;
    case VMMIO_QUEUE_DEVICE_LOW:
        if (q_writable)
            q->used_gpa = (q->used_gpa & ~0xffffffffull) | v;
        break;
    case VMMIO_QUEUE_DEVICE_HIGH:
        if (q_writable)
            q->used_gpa = (q->used_gpa & 0xffffffffull) | ((uint64_t)v << 32);
        break;
    default:
        break;
    }
out:
    pthread_mutex_unlock(&d->lock);
}

static void virtio__mmio_read(struct mmio_dev *m, uint64_t off, uint8_t *data, uint32_t size)
{
    kvm_virtio_mmio_read(m->ctx, off, data, size);
}

static void virtio__mmio_write(struct mmio_dev *m, uint64_t off, const uint8_t *data, uint32_t size)
{
    kvm_virtio_mmio_write(m->ctx, off, data, size);
}

static void virtio__on_notify(struct ev_handler *h, uint32_t events)
{
    struct virtio_dev *d = h->ctx;
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof v);
    (void)r;
    int qi = (int)(h - d->notify_ev);
    pthread_mutex_lock(&d->lock);
    if (d->active && d->ops->notify)
        d->ops->notify(d, qi);
    pthread_mutex_unlock(&d->lock);
}

int kvm_virtio_dev_init(struct virtio_dev *d, struct vmm_kvm *vm, const struct virtio_dev_opts *o,
                        struct al_error *err)
{
    const struct virtio_dev_ops *ops = o->ops;
    uint32_t irq = o->irq;
    memset(d, 0, sizeof *d);
    d->ops = ops;
    d->priv = o->priv;
    d->vm = vm;
    d->features = o->features | VIRTIO_F_VERSION_1;
    d->irq = irq;
    d->irqfd = -1;
    for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
        d->notify_ev[i].fd = -1;
    /* Recursive: a snapshot holds every device lock while it saves each device. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&d->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    d->mmio = (struct mmio_dev){.base = o->base,
                                .len = VM_MMIO_SIZE,
                                .read = virtio__mmio_read,
                                .write = virtio__mmio_write,
                                .ctx = d};
    if (vm->vm_fd < 0)
        return 0; /* unit tests: no KVM, notifications handled inline */

    d->irqfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (d->irqfd < 0)
        return al_error_set(err, -errno, "eventfd: %s", strerror(errno));
    struct kvm_irqfd irqfd = {.fd = (uint32_t)d->irqfd, .gsi = irq};
    if (ioctl(vm->vm_fd, KVM_IRQFD, &irqfd) < 0)
        return al_error_set(err, -errno, "KVM_IRQFD for virtio-%s: %s", ops->name, strerror(errno));
    for (int i = 0; i < ops->nqueues; i++) {
        struct ev_handler *h = &d->notify_ev[i];
        h->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (h->fd < 0)
            return al_error_set(err, -errno, "eventfd: %s", strerror(errno));
        h->fn = virtio__on_notify;
        h->ctx = d;
        struct kvm_ioeventfd io = {
            .datamatch = (uint64_t)i,
            .addr = o->base + VMMIO_QUEUE_NOTIFY,
            .len = 4,
            .fd = h->fd,
            .flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
        };
        if (ioctl(vm->vm_fd, KVM_IOEVENTFD, &io) < 0)
            return al_error_set(err, -errno, "KVM_IOEVENTFD for virtio-%s: %s", ops->name,
                                strerror(errno));
        int rc = kvm_evloop_add(&vm->loop, h, EPOLLIN);
        if (rc < 0)
            return al_error_set(err, rc, "epoll: %s", strerror(-rc));
    }
    kvm_vm_register_mmio(vm, &d->mmio);
    return 0;
}

void kvm_virtio_dev_free(struct virtio_dev *d)
{
    for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
        if (d->notify_ev[i].fd >= 0) {
            if (d->vm && d->vm->loop.epfd >= 0)
                kvm_evloop_del(&d->vm->loop, &d->notify_ev[i]);
            close(d->notify_ev[i].fd);
            d->notify_ev[i].fd = -1;
        }
    }
    if (d->irqfd >= 0)
        close(d->irqfd);
    d->irqfd = -1;
    pthread_mutex_destroy(&d->lock);
}

void kvm_virtio_config_copy(const void *cfg, uint32_t cfg_len, uint32_t off, uint8_t *data,
                            uint32_t len)
{
    memset(data, 0, len);
    if (off >= cfg_len)
        return;
    uint32_t n = cfg_len - off < len ? cfg_len - off : len;
    memcpy(data, (const uint8_t *)cfg + off, n);
}

void kvm_virtio_dev_save(struct virtio_dev *d, struct virtio_snap *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&d->lock);
    s->device_id = d->ops->device_id;
    s->status = d->status;
    s->dev_feat_sel = d->dev_feat_sel;
    s->drv_feat_sel = d->drv_feat_sel;
    s->queue_sel = d->queue_sel;
    s->config_gen = d->config_gen;
    s->int_status = atomic_load(&d->int_status);
    s->active = d->active;
    s->features = d->features;
    s->driver_features = d->driver_features;
    for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
        struct virtq *q = &d->vq[i];
        s->q[i].size = q->size;
        s->q[i].last_avail = q->last_avail;
        s->q[i].used_idx = q->used_idx;
        s->q[i].ready = q->ready;
        s->q[i].broken = q->broken;
        s->q[i].desc_gpa = q->desc_gpa;
        s->q[i].avail_gpa = q->avail_gpa;
        s->q[i].used_gpa = q->used_gpa;
    }
    pthread_mutex_unlock(&d->lock);
}

int kvm_virtio_dev_load(struct virtio_dev *d, const struct virtio_snap *s, struct al_error *err)
{
    if (s->device_id != d->ops->device_id || s->features != d->features ||
        (s->driver_features & ~s->features))
        return al_error_set(err, -EINVAL,
                            "snapshot of virtio-%s does not match this device (features 0x%llx, "
                            "this VM offers 0x%llx)",
                            d->ops->name, (unsigned long long)s->features,
                            (unsigned long long)d->features);
    pthread_mutex_lock(&d->lock);
    d->status = s->status;
    d->dev_feat_sel = s->dev_feat_sel;
    d->drv_feat_sel = s->drv_feat_sel;
    d->queue_sel = s->queue_sel;
    d->config_gen = s->config_gen;
    atomic_store(&d->int_status, s->int_status);
    d->driver_features = s->driver_features;
    d->active = s->active != 0;
    int rc = 0;
    for (int i = 0; i < VIRTIO_MAX_QUEUES && rc == 0; i++) {
        struct virtq *q = &d->vq[i];
        kvm_virtq_reset(q);
        q->size = s->q[i].size;
        q->desc_gpa = s->q[i].desc_gpa;
        q->avail_gpa = s->q[i].avail_gpa;
        q->used_gpa = s->q[i].used_gpa;
        q->last_avail = s->q[i].last_avail;
        q->used_idx = s->q[i].used_idx;
        if (s->q[i].ready) {
            if (i >= d->ops->nqueues || kvm_virtq_activate(q, &d->vm->gm) < 0)
                rc = al_error_set(err, -EINVAL, "snapshot of virtio-%s: queue %d is invalid",
                                  d->ops->name, i);
            q->ready = true;
            q->broken = s->q[i].broken;
        }
    }
    if (rc == 0 && d->active && d->ops->restored)
        d->ops->restored(d);
    pthread_mutex_unlock(&d->lock);
    if (rc == 0 && d->irqfd >= 0 && atomic_load(&d->int_status)) {
        uint64_t one = 1; /* an interrupt was pending when the snapshot was taken */
        ssize_t w = write(d->irqfd, &one, sizeof one);
        (void)w;
    }
    return rc;
}
