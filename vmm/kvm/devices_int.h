/* vmm/kvm/devices_int: constructors of the virtio back-ends, for devices.c and the tests. */
#ifndef AIRLOCK_VMM_KVM_DEVICES_INT_H
#define AIRLOCK_VMM_KVM_DEVICES_INT_H

#include "vmm/kvm/disk.h"
#include "vmm/kvm/virtio.h"

struct virtio_dev *kvm_vblk_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err);
void kvm_vblk_destroy(struct virtio_dev *d);
/* Snapshot: copies the overlay into dir/disk.overlay and points at the bitmap (borrowed). */
int kvm_vblk_save(struct virtio_dev *d, const char *dir, const uint8_t **bitmap, size_t *len,
                  struct al_error *err);
/* Restore: fills this VM's (fresh) overlay from dir/disk.overlay and takes the bitmap. */
int kvm_vblk_load(struct virtio_dev *d, const char *dir, const uint8_t *bitmap, size_t len,
                  struct al_error *err);
struct virtio_dev *kvm_vnet_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err);
void kvm_vnet_destroy(struct virtio_dev *d);
struct virtio_dev *kvm_vrng_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err);
void kvm_vrng_destroy(struct virtio_dev *d);
struct virtio_dev *kvm_vsock_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                    struct al_error *err);
void kvm_vsock_destroy(struct virtio_dev *d);

#endif
