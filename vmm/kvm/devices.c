/* vmm/kvm/devices: the VM's virtio devices (see devices.h).
 *
 * Fixed slots, so a guest always sees the same layout: 0 = virtio-blk (root disk),
 * 1 = virtio-net, 2 = virtio-vsock (agent channel), 3 = virtio-rng (always present). Slot n is the 4 KiB window at
 * VM_MMIO_BASE + n * VM_MMIO_SIZE with interrupt VM_MMIO_IRQ0 + n; the guest kernel learns
 * of each through a virtio_mmio.device= parameter (kvm_devices_cmdline).
 */
#include "vmm/kvm/devices.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "vmm/kvm/devices_int.h"
#include "vmm/kvm/vm.h"

enum { SLOT_BLK = 0, SLOT_NET = 1, SLOT_VSOCK = 2, SLOT_RNG = 3, SLOTS };

static uint64_t devices__base(int slot)
{
    return VM_MMIO_BASE + (uint64_t)slot * VM_MMIO_SIZE;
}

int kvm_devices_cmdline(const struct vmm_kvm_config *cfg, char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = 0;
    bool present[SLOTS] = {cfg->disk != NULL,
                           cfg->tap != NULL || cfg->tap_fd > 2 || cfg->net_unplugged,
                           cfg->guest_cid != 0, true};
    for (int slot = 0; slot < SLOTS; slot++) {
        if (!present[slot])
            continue;
        int w = snprintf(out + n, outlen - n, " virtio_mmio.device=4K@0x%llx:%d",
                         (unsigned long long)devices__base(slot), VM_MMIO_IRQ0 + slot);
        if (w < 0 || (size_t)w >= outlen - n)
            return -E2BIG;
        n += (size_t)w;
    }
    return 0;
}

int kvm_devices_create(struct vmm_kvm *vm, struct al_error *err)
{
    if (vm->cfg.disk) {
        vm->blk = kvm_vblk_create(vm, devices__base(SLOT_BLK), VM_MMIO_IRQ0 + SLOT_BLK, err);
        if (!vm->blk)
            return err ? err->code : -EINVAL;
    }
    if (vm->cfg.tap || vm->cfg.tap_fd > 2 || vm->cfg.net_unplugged) {
        vm->net = kvm_vnet_create(vm, devices__base(SLOT_NET), VM_MMIO_IRQ0 + SLOT_NET, err);
        if (!vm->net)
            return err ? err->code : -EINVAL;
    }
    vm->rng = kvm_vrng_create(vm, devices__base(SLOT_RNG), VM_MMIO_IRQ0 + SLOT_RNG, err);
    if (!vm->rng)
        return err ? err->code : -EINVAL;
    if (vm->cfg.guest_cid) {
        vm->vsock = kvm_vsock_create(vm, devices__base(SLOT_VSOCK), VM_MMIO_IRQ0 + SLOT_VSOCK, err);
        if (!vm->vsock)
            return err ? err->code : -EINVAL;
    }
    return 0;
}

void kvm_devices_destroy(struct vmm_kvm *vm)
{
    kvm_vblk_destroy(vm->blk);
    kvm_vnet_destroy(vm->net);
    kvm_vsock_destroy(vm->vsock);
    kvm_vrng_destroy(vm->rng);
    vm->blk = vm->net = vm->vsock = vm->rng = NULL;
}
