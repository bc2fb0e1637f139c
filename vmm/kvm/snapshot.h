/* vmm/kvm/snapshot: saving a running VM to a directory and rebuilding a VM from it.
 *
 * A snapshot directory holds:
 *   vm.state       every vCPU's registers, special registers, XSAVE, XCRs, debug registers,
 *                  LAPIC, MSRs, events and MP state; the irqchip (PIC x2, IOAPIC), PIT and
 *                  kvmclock; the serial port and every virtio transport; the disk bitmap.
 *                  Sections of (tag, index, length); every length is checked on load.
 *   memory         guest RAM (sparse: only pages the guest touched); a restore maps it
 *                  MAP_PRIVATE, so pages load on demand and writes stay private to the VM.
 *   disk.overlay   the copy-on-write overlay of the root disk (sparse).
 * A restored VM is independent of the snapshot and of any other VM restored from it.
 */
#ifndef AIRLOCK_VMM_KVM_SNAPSHOT_H
#define AIRLOCK_VMM_KVM_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct vmm_kvm;
struct vcpu;

#define SNAP_MAGIC     "ALKVMSS1"
#define SNAP_VERSION   1
#define SNAP_MAX_STATE (64u << 20)

struct snap_state {
    uint8_t *data; /* the whole vm.state file */
    size_t len;
    uint32_t nvcpus;
    uint64_t mem_bytes;
};

/* Reads and checks dir/vm.state (header, section framing). */
int kvm_snap_read(const char *dir, struct snap_state *st, struct al_error *err);
void kvm_snap_free(struct snap_state *st);
/* The section (tag, index) if present with exactly `len` bytes (or any length when len is
 * 0, returned in *got). NULL otherwise. */
const void *kvm_snap_find(const struct snap_state *st, uint32_t tag, uint32_t index, size_t len,
                          size_t *got);

/* Restores one vCPU (after its CPUID is set). */
int kvm_snap_restore_vcpu(struct vmm_kvm *vm, struct vcpu *c, const struct snap_state *st,
                          struct al_error *err);
/* Restores irqchip, PIT, clock, serial and devices (after kvm_devices_create). */
int kvm_snap_restore_vm(struct vmm_kvm *vm, const struct snap_state *st, const char *dir,
                        struct al_error *err);

#endif
