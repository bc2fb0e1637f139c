/* vmm/kvm/kvm: the KVM backend of airlock-vmm, a minimal microVM monitor on /dev/kvm.
 *
 * One VM per process: one thread per vCPU, one event-loop thread for the devices (virtio
 * queues, the tap, the agent channel), the caller's thread for control. Devices: 16550
 * serial (console captured to a log file), i8042 (reset = clean exit), virtio-mmio
 * virtio-blk (root file system, copy-on-write over a read-only image), virtio-net (tap),
 * virtio-vsock (the agent channel, bridged to unix sockets on the host).
 *
 * Life cycle: vmm_kvm_create (checks /dev/kvm, builds the VM, loads the kernel) ->
 * vmm_kvm_start -> vmm_kvm_wait (returns when the guest resets or powers off, or after
 * vmm_kvm_stop) -> vmm_kvm_destroy. vmm_kvm_pause/resume/snapshot are for the control API.
 *
 * Names: every function a vmm/kvm header declares starts with kvm_ (the monitor's internals:
 * kvm_<unit>_<verb>, e.g. kvm_disk_read, kvm_evloop_add) or vmm_kvm_ (this header's API for
 * supervisors), so that no symbol of the library can meet one of libc, the kernel headers or
 * another backend at link time. File-local helpers are static and need none.
 */
#ifndef AIRLOCK_VMM_KVM_KVM_H
#define AIRLOCK_VMM_KVM_KVM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define VMM_KVM_MAX_VCPUS       16
#define VMM_KVM_MAX_VSOCK_PORTS 4

/* Descriptors handed in by a supervisor (airlock-vmm) are used when the matching path is
 * NULL and the fd is > 2 (stdio is never one of them, so a zeroed config means "none").
 * The VMM owns and closes them. */
struct vmm_kvm_vsock_port {
    uint32_t port;    /* guest vsock port the agent listens on */
    const char *path; /* unix socket on the host bridged to it (created, removed at exit) */
    int fd;           /* or: an already-listening unix socket (path NULL) */
};

struct vmm_kvm_config {
    const char *kernel;  /* bzImage */
    const char *initrd;  /* optional */
    const char *cmdline; /* NULL: a default for the airlock guest */
    uint64_t mem_bytes;  /* guest RAM */
    uint32_t vcpus;
    const char *console_log; /* serial output appended here; NULL: console_fd or stderr */
    int console_fd;          /* (> 2) where serial output goes when console_log is NULL */
    /* Root disk: a read-only image; writes go to a per-VM copy-on-write overlay. */
    const char *disk;         /* NULL: no virtio-blk */
    const char *disk_overlay; /* sparse file created for this VM's writes (required unless
                                * disk_readonly) */
    bool disk_readonly;
    /* Network: a tap device (created by the caller or by name). */
    const char *tap; /* NULL: tap_fd, or no virtio-net */
    int tap_fd;      /* (> 2) a tap opened with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR */
    /* A virtio-net device with no tap behind it (frames sent are dropped, none arrive):
     * template snapshots have the NIC that sandboxes restored from them are given a tap
     * for, and a sandbox without network keeps the same device layout. */
    bool net_unplugged;
    uint8_t mac[6];
    /* Agent channel: virtio-vsock with these port bridges. */
    uint32_t guest_cid; /* 0: no vsock device */
    struct vmm_kvm_vsock_port vsock[VMM_KVM_MAX_VSOCK_PORTS];
    int n_vsock;
    /* Restore from this snapshot directory instead of booting kernel/initrd (memory size
     * and vCPU count come from the snapshot; devices must match it). */
    const char *restore_dir;
};

struct vmm_kvm;

/* How the guest ended. */
enum vmm_kvm_exit {
    VMM_KVM_EXIT_NONE = 0,
    VMM_KVM_EXIT_RESET,    /* i8042 reset, triple fault, or KVM system reset */
    VMM_KVM_EXIT_POWEROFF, /* KVM system event shutdown */
    VMM_KVM_EXIT_STOPPED,  /* vmm_kvm_stop */
    VMM_KVM_EXIT_ERROR,    /* internal error, failed entry, emulation failure */
};

/* Checks that /dev/kvm is usable for this backend (API version and every capability we
 * rely on); the message says what is missing. Used by airlockd to pick a backend. */
int vmm_kvm_probe(struct al_error *err);
/* The cheapest check: /dev/kvm opens, speaks our API version and has every capability. */
int vmm_kvm_check_device(struct al_error *err);
/* The stronger check: boots `kernel` (no initrd) until it writes to its console, within
 * timeout_ms. Some hosts run the tiny probe guest but not a Linux kernel. */
int vmm_kvm_probe_kernel(const char *kernel, unsigned timeout_ms, struct al_error *err);

int vmm_kvm_create(const struct vmm_kvm_config *cfg, struct vmm_kvm **out, struct al_error *err);
int vmm_kvm_start(struct vmm_kvm *vm, struct al_error *err);
/* Blocks until the VM has ended; returns how. */
enum vmm_kvm_exit vmm_kvm_wait(struct vmm_kvm *vm);
/* Asks the VM to stop (thread-safe, async-signal-safe). */
void vmm_kvm_stop(struct vmm_kvm *vm);
void vmm_kvm_destroy(struct vmm_kvm *vm);
/* Pause/resume the vCPUs (devices keep serving host sockets; the guest does not run). */
int vmm_kvm_pause(struct vmm_kvm *vm, struct al_error *err);
void vmm_kvm_resume(struct vmm_kvm *vm);
/* Writes a snapshot into dir (created if needed); the VM is paused while it is taken and
 * continues afterwards unless it was paused before. See snapshot.h for the layout. */
int vmm_kvm_snapshot(struct vmm_kvm *vm, const char *dir, struct al_error *err);
/* An fd that becomes readable once the VM has ended (for poll loops). */
int vmm_kvm_exit_fd(const struct vmm_kvm *vm);
const char *vmm_kvm_exit_str(enum vmm_kvm_exit e);

#endif
