/* vmm/kvm/virtio: the virtio-mmio transport (virtio 1.2, section 4.2, version 2 "modern")
 * and the interface a device back-end implements.
 *
 * Owns: the register file of one virtio-mmio window (accessed from vCPU threads under the
 * device lock), feature negotiation (the driver may only accept offered features and must
 * accept VIRTIO_F_VERSION_1), queue configuration and activation (kvm_virtq_activate checks
 * every ring address), device reset, queue notifications (an ioeventfd per queue, handled
 * on the device thread), and interrupts (an irqfd; InterruptStatus bits). Config-space
 * accesses are bounded by the device's config size.
 */
#ifndef AIRLOCK_VMM_KVM_VIRTIO_H
#define AIRLOCK_VMM_KVM_VIRTIO_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/kvm/virtq.h"
#include "vmm/kvm/vm.h"

#define VIRTIO_MAX_QUEUES 3

#define VIRTIO_F_VERSION_1 (1ull << 32)

#define VIRTIO_STATUS_ACKNOWLEDGE 1
#define VIRTIO_STATUS_DRIVER      2
#define VIRTIO_STATUS_DRIVER_OK   4
#define VIRTIO_STATUS_FEATURES_OK 8
#define VIRTIO_STATUS_NEEDS_RESET 64
#define VIRTIO_STATUS_FAILED      128

#define VIRTIO_INT_USED   1
#define VIRTIO_INT_CONFIG 2

#define VIRTIO_ID_NET   1
#define VIRTIO_ID_BLOCK 2
#define VIRTIO_ID_RNG   4
#define VIRTIO_ID_VSOCK 19

struct virtio_dev;

struct virtio_dev_ops {
    const char *name;
    uint32_t device_id;
    int nqueues;
    /* Config space: the transport copies from/to this buffer with bounds checks. */
    void (*config_read)(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len);
    /* Queue qi was notified (device thread, device lock held). */
    void (*notify)(struct virtio_dev *d, int qi);
    /* The driver set DRIVER_OK (vCPU thread, lock held): start the back-end. */
    void (*activate)(struct virtio_dev *d);
    /* The driver reset the device (vCPU thread, lock held): drop in-flight state. */
    void (*reset)(struct virtio_dev *d);
    /* The device was rebuilt from a snapshot (lock held): resume its back-end. */
    void (*restored)(struct virtio_dev *d);
};

/* Transport state in a snapshot (plain data, fixed layout). */
struct virtio_snap {
    uint32_t device_id;
    uint32_t status, dev_feat_sel, drv_feat_sel, queue_sel, config_gen, int_status;
    uint32_t active;
    uint64_t features, driver_features;
    struct {
        uint16_t size, last_avail, used_idx;
        uint8_t ready, broken;
        uint64_t desc_gpa, avail_gpa, used_gpa;
    } q[VIRTIO_MAX_QUEUES];
};

struct virtio_dev {
    const struct virtio_dev_ops *ops;
    void *priv;
    struct vmm_kvm *vm;
    struct mmio_dev mmio;
    pthread_mutex_t lock;
    uint64_t features;        /* offered */
    uint64_t driver_features; /* accepted */
    uint32_t status;
    uint32_t dev_feat_sel, drv_feat_sel, queue_sel;
    uint32_t config_gen;
    _Atomic uint32_t int_status;
    uint32_t irq;
    int irqfd; /* eventfd wired to irq with KVM_IRQFD */
    struct virtq vq[VIRTIO_MAX_QUEUES];
    struct ev_handler notify_ev[VIRTIO_MAX_QUEUES]; /* ioeventfd per queue */
    bool active;                                    /* DRIVER_OK and not reset since */
    uint64_t bad_chains;     /* malformed chains seen (logged, rate-limited) */
    uint64_t guest_warnings; /* other guest errors (logged, rate-limited) */
};

/* What a transport is set up with. */
struct virtio_dev_opts {
    const struct virtio_dev_ops *ops;
    void *priv;        /* the device's state, d->priv */
    uint64_t features; /* offered, besides VIRTIO_F_VERSION_1 */
    uint64_t base;     /* guest-physical address of the MMIO window */
    uint32_t irq;      /* interrupt line */
};

/* Sets up the transport at o->base with interrupt line o->irq: registers the MMIO window, an
 * ioeventfd per queue and the irqfd. 0 or -errno (err says what). */
int kvm_virtio_dev_init(struct virtio_dev *d, struct vmm_kvm *vm, const struct virtio_dev_opts *o,
                        struct al_error *err);
void kvm_virtio_dev_free(struct virtio_dev *d);

/* Raises InterruptStatus bit(s) and pulses the irqfd. Any thread. */
void kvm_virtio_dev_interrupt(struct virtio_dev *d, uint32_t bits);
/* After pushing used buffers on queue qi: interrupts unless the driver suppressed them. */
void kvm_virtio_dev_used(struct virtio_dev *d, int qi);
/* Logs a malformed chain (rate-limited) for device d. */
void kvm_virtio_dev_bad_chain(struct virtio_dev *d, int qi, const char *why);

/* Snapshot support (lock taken inside). Load checks that the snapshot describes this
 * device (type, offered features) and re-validates every queue against guest memory. */
void kvm_virtio_dev_save(struct virtio_dev *d, struct virtio_snap *s);
int kvm_virtio_dev_load(struct virtio_dev *d, const struct virtio_snap *s, struct al_error *err);

/* Copies [off, off+len) of a device's config structure into data, zero beyond its end. */
void kvm_virtio_config_copy(const void *cfg, uint32_t cfg_len, uint32_t off, uint8_t *data,
                            uint32_t len);

/* Register-level access, exposed for the unit tests and the fuzzer (no KVM needed when
 * vm->vm_fd is -1: ioeventfds/irqfd are then plain eventfds). */
void kvm_virtio_mmio_read(struct virtio_dev *d, uint64_t off, uint8_t *data, uint32_t size);
void kvm_virtio_mmio_write(struct virtio_dev *d, uint64_t off, const uint8_t *data, uint32_t size);

#endif
