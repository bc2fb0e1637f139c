/* vmm/kvm/virtio_rng: virtio-rng (virtio 1.2, section 5.4): fresh host entropy for the guest.
 *
 * Owns: filling the guest's writable buffers from getrandom(2), at most VRNG_MAX_PER_REQ
 * bytes per buffer and VRNG_MAX_PER_NOTIFY per notification (a guest cannot make the VMM
 * spin). The guest's hwrng driver feeds this into its pool continuously, so VMs restored
 * from one snapshot stop sharing random state within seconds; the agent still reseeds
 * explicitly after a restore (POST /init).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "vmm/kvm/devices_int.h"

#define VRNG_MAX_PER_REQ    4096u
#define VRNG_MAX_PER_NOTIFY (64u * 1024)

struct vrng {
    struct virtio_dev dev;
    uint64_t bytes;
};

static void vrng__notify(struct virtio_dev *d, int qi)
{
    struct vrng *r = d->priv;
    struct virtq *q = &d->vq[qi];
    static __thread struct virtq_chain c;
    uint8_t buf[VRNG_MAX_PER_REQ];
    uint32_t budget = VRNG_MAX_PER_NOTIFY;
    int rc, done = 0;
    while (budget > 0 && (rc = kvm_virtq_pop(q, &d->vm->gm, &c)) != 0) {
        done++;
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, qi, rc == -EIO ? "queue broken" : "bad descriptor chain");
            if (rc == -EIO)
                break;
            continue;
        }
        uint64_t want = c.in_len < VRNG_MAX_PER_REQ ? c.in_len : VRNG_MAX_PER_REQ;
        if (want > budget)
            want = budget;
        ssize_t got = want ? getrandom(buf, want, 0) : 0;
        uint32_t n = got > 0 ? (uint32_t)kvm_virtq_chain_write(&c, 0, buf, (uint64_t)got) : 0;
        kvm_virtq_push(q, c.head, n);
        budget -= n ? n : 1;
        r->bytes += n;
    }
    explicit_bzero(buf, sizeof buf);
    if (done)
        kvm_virtio_dev_used(d, qi);
}

static void vrng__config_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
    memset(data, 0, len); /* no configuration space */
}

static const struct virtio_dev_ops vrng__ops = {
    .name = "rng",
    .device_id = VIRTIO_ID_RNG,
    .nqueues = 1,
    .config_read = vrng__config_read,
    .notify = vrng__notify,
};

struct virtio_dev *kvm_vrng_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err)
{
    struct vrng *r = calloc(1, sizeof *r);
    if (!r) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if (kvm_virtio_dev_init(
            &r->dev, vm,
            &(struct virtio_dev_opts){.ops = &vrng__ops, .priv = r, .base = base, .irq = irq},
            err) < 0) {
        kvm_vrng_destroy(&r->dev);
        return NULL;
    }
    return &r->dev;
}

void kvm_vrng_destroy(struct virtio_dev *d)
{
    if (!d)
        return;
    struct vrng *r = d->priv;
    kvm_virtio_dev_free(d);
    free(r);
}
