/* tests/lib/vq_driver: a minimal virtio driver for tests and the fuzzer: a fake VM (no /dev/kvm:
 * vm_fd = -1, so queue notifications are handled inline) over a plain buffer as guest memory,
 * register helpers, and descriptor/ring writers. */
#ifndef AIRLOCK_TESTS_VQ_DRIVER_H
#define AIRLOCK_TESTS_VQ_DRIVER_H

#include <stdlib.h>
#include <string.h>

#include "vmm/kvm/devices_int.h"
#include "vmm/kvm/virtio.h"
#include "vmm/kvm/vm.h"

static inline struct vmm_kvm *vqd_fake_vm(size_t mem_size)
{
    struct vmm_kvm *vm = calloc(1, sizeof *vm);
    uint8_t *mem = calloc(1, mem_size);
    vm->kvm_fd = vm->vm_fd = vm->mem_fd = vm->console_fd = vm->exit_fd = -1;
    kvm_gm_layout(&vm->gm, mem, mem_size);
    vm->gm.fd = -1;
    kvm_evloop_init(&vm->loop);
    return vm;
}

static inline void vqd_free_vm(struct vmm_kvm *vm)
{
    kvm_evloop_free(&vm->loop);
    free(vm->gm.base);
    free(vm);
}

static inline uint32_t vqd_r(struct virtio_dev *d, uint64_t off)
{
    uint32_t v;
    kvm_virtio_mmio_read(d, off, (uint8_t *)&v, 4);
    return v;
}

static inline void vqd_w(struct virtio_dev *d, uint64_t off, uint32_t v)
{
    kvm_virtio_mmio_write(d, off, (const uint8_t *)&v, 4);
}

/* For qi 0: resets and negotiates VERSION_1 (+ extra low features); then sets up queue qi
 * and sets DRIVER_OK. Returns the status. */
static inline uint32_t vqd_setup(struct virtio_dev *d, int qi, uint16_t size, uint64_t desc,
                                 uint64_t avail, uint64_t used, uint32_t feat_lo)
{
    if (qi == 0) { /* queue 0 starts from a reset device */
        vqd_w(d, 0x70, 0);
        vqd_w(d, 0x70, 1);
        vqd_w(d, 0x70, 3);
        vqd_w(d, 0x24, 0);
        vqd_w(d, 0x20, feat_lo);
        vqd_w(d, 0x24, 1);
        vqd_w(d, 0x20, 1); /* VIRTIO_F_VERSION_1 */
        vqd_w(d, 0x70, 0xb);
    }
    vqd_w(d, 0x30, (uint32_t)qi);
    vqd_w(d, 0x38, size);
    vqd_w(d, 0x80, (uint32_t)desc);
    vqd_w(d, 0x84, (uint32_t)(desc >> 32));
    vqd_w(d, 0x90, (uint32_t)avail);
    vqd_w(d, 0x94, (uint32_t)(avail >> 32));
    vqd_w(d, 0xa0, (uint32_t)used);
    vqd_w(d, 0xa4, (uint32_t)(used >> 32));
    vqd_w(d, 0x44, 1);
    vqd_w(d, 0x70, 0xf);
    return vqd_r(d, 0x70);
}

static inline void vqd_desc(struct vmm_kvm *vm, uint64_t table, uint16_t i, uint64_t addr,
                            uint32_t len, uint16_t flags, uint16_t next)
{
    struct virtq_desc *d = kvm_gm_ptr(&vm->gm, table + 16ull * i, 16);
    d->addr = addr;
    d->len = len;
    d->flags = flags;
    d->next = next;
}

/* Appends head to the available ring (size entries) and bumps its index. */
static inline void vqd_avail(struct vmm_kvm *vm, uint64_t avail, uint16_t size, uint16_t head)
{
    uint16_t *a = kvm_gm_ptr(&vm->gm, avail, 4 + 2ull * size);
    a[2 + (a[1] % size)] = head;
    a[1]++;
}

static inline uint16_t vqd_used_idx(struct vmm_kvm *vm, uint64_t used)
{
    uint16_t *u = kvm_gm_ptr(&vm->gm, used, 4);
    return u[1];
}

static inline void vqd_used_elem(struct vmm_kvm *vm, uint64_t used, uint16_t size, uint16_t i,
                                 uint32_t *id, uint32_t *len)
{
    uint32_t *e = kvm_gm_ptr(&vm->gm, used + 4 + 8ull * (i % size), 8);
    *id = e[0];
    *len = e[1];
}

#endif
