/* vmm/kvm/devices: creates and tears down the virtio devices a VM's config asks for
 * (virtio-mmio windows at VM_MMIO_BASE + n * VM_MMIO_SIZE, IRQ VM_MMIO_IRQ0 + n) and
 * builds the matching virtio_mmio.device= kernel parameters. */
#ifndef AIRLOCK_VMM_KVM_DEVICES_H
#define AIRLOCK_VMM_KVM_DEVICES_H

#include <stddef.h>

#include "common/error.h"

struct vmm_kvm;
struct vmm_kvm_config;
/* The virtio_mmio.device= parameters for the devices cfg asks for (leading space each). */
int kvm_devices_cmdline(const struct vmm_kvm_config *cfg, char *out, size_t outlen);
int kvm_devices_create(struct vmm_kvm *vm, struct al_error *err);
void kvm_devices_destroy(struct vmm_kvm *vm);

#endif
