/* vmm/kvm/devices: the VM's virtio devices (see devices.h). */
#include "vmm/kvm/devices.h"

#include <errno.h>

#include "vmm/kvm/vm.h"

int devices_create(struct vmm_kvm *vm, struct al_error *err)
{
    if (vm->cfg.disk || vm->cfg.tap || vm->cfg.guest_cid)
        return al_error_set(err, -ENOTSUP, "virtio devices are not built yet");
    return 0;
}

void devices_destroy(struct vmm_kvm *vm)
{
    (void)vm;
}
