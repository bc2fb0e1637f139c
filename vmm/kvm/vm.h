/* vmm/kvm/vm: internal structures shared by the VM core and its devices.
 *
 * Owns: nothing by itself; declares the VM object (vm.c), the port-I/O and MMIO buses the
 * vCPU threads dispatch exits to, and the event loop the devices register fds with.
 */
#ifndef AIRLOCK_VMM_KVM_VM_H
#define AIRLOCK_VMM_KVM_VM_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/kvm/guest_mem.h"
#include "vmm/kvm/kvm.h"

/* Stack of the VMM's threads: small, so that it is never backed by a transparent huge page
 * (a 2 MiB page per thread would double the VMM's memory overhead). */
#define VM_THREAD_STACK (256u * 1024)

/* ---- event loop (evloop.c) --------------------------------------------------------- */
struct ev_handler;
typedef void (*ev_fn)(struct ev_handler *h, uint32_t events);
struct ev_handler {
    int fd;
    ev_fn fn;
    void *ctx;
};
#define EVLOOP_MAX_DEAD 32
/* A deadline on the device thread: fn runs there once at_ns (CLOCK_MONOTONIC, al_now_ns) has
 * passed. Registered before the loop starts; armed and run on the device thread only. */
struct ev_timer {
    uint64_t at_ns; /* 0: not armed */
    void (*fn)(struct ev_timer *t);
    void *ctx;
};
#define EVLOOP_MAX_TIMERS 4
struct evloop {
    int epfd;
    int stop_fd; /* eventfd: ends the loop */
    pthread_t thread;
    bool running;
    /* Handlers removed by a handler during the current batch of events: their remaining
     * events in the batch are stale (the memory may already serve another fd). */
    struct ev_handler *dead[EVLOOP_MAX_DEAD];
    int ndead;
    bool dead_overflow;
    struct ev_timer *timers[EVLOOP_MAX_TIMERS];
    int ntimers;
};
int kvm_evloop_init(struct evloop *l);
int kvm_evloop_add(struct evloop *l, struct ev_handler *h, uint32_t events);
int kvm_evloop_mod(struct evloop *l, struct ev_handler *h, uint32_t events);
void kvm_evloop_del(struct evloop *l, struct ev_handler *h);
/* Events already taken for h (from the device thread) are stale: h now serves another fd. */
void kvm_evloop_forget(struct evloop *l, struct ev_handler *h);
/* Registers t (before kvm_evloop_start); -ENOSPC past EVLOOP_MAX_TIMERS. */
int kvm_evloop_timer_add(struct evloop *l, struct ev_timer *t);
/* Unregisters t (the loop stopped, or from the device thread); idempotent. */
void kvm_evloop_timer_del(struct evloop *l, struct ev_timer *t);
int kvm_evloop_start(struct evloop *l);
void kvm_evloop_stop(struct evloop *l);
void kvm_evloop_free(struct evloop *l);

/* ---- buses ---------------------------------------------------------------------------- */
struct pio_dev {
    uint16_t base, len;
    void (*in)(struct pio_dev *d, uint16_t off, uint8_t *data, uint32_t size);
    void (*out)(struct pio_dev *d, uint16_t off, const uint8_t *data, uint32_t size);
    void *ctx;
};
struct mmio_dev {
    uint64_t base, len;
    void (*read)(struct mmio_dev *d, uint64_t off, uint8_t *data, uint32_t size);
    void (*write)(struct mmio_dev *d, uint64_t off, const uint8_t *data, uint32_t size);
    void *ctx;
};

#define VM_MAX_PIO  8
#define VM_MAX_MMIO 8

/* virtio-mmio windows and their interrupt lines */
#define VM_MMIO_BASE 0xd0000000ull
#define VM_MMIO_SIZE 0x1000ull
#define VM_MMIO_IRQ0 5

struct vcpu {
    struct vmm_kvm *vm;
    int index;
    int fd;
    struct kvm_run *run;
    pthread_t thread;
    bool started;
};

struct vmm_kvm {
    struct vmm_kvm_config cfg;
    int kvm_fd;
    int vm_fd;
    int mem_fd;
    int pagemap_fd; /* restored VMs: /proc/self/pagemap, to tell written pages (snapshots) */
    struct guest_mem gm;
    size_t run_size;
    struct vcpu vcpus[VMM_KVM_MAX_VCPUS];
    int nvcpus;

    struct pio_dev *pio[VM_MAX_PIO];
    int n_pio;
    struct mmio_dev *mmio[VM_MAX_MMIO];
    int n_mmio;

    struct evloop loop;
    /* Pause: vCPU threads park on pause_cond while pause_req is set. */
    pthread_mutex_t pause_lock;
    pthread_cond_t pause_cond;
    bool pause_req;
    int paused;             /* vCPU threads parked */
    bool restored;          /* built from a snapshot rather than booted */
    atomic_int exit_reason; /* enum vmm_kvm_exit, first one wins */
    int exit_fd;            /* eventfd signalled when exit_reason is set */

    struct serial *serial;
    atomic_ulong console_bytes; /* bytes the guest wrote to its console (probe) */
    struct virtio_dev *blk, *net, *vsock, *rng;
    int console_fd;
};

void kvm_vm_register_pio(struct vmm_kvm *vm, struct pio_dev *d);
void kvm_vm_register_mmio(struct vmm_kvm *vm, struct mmio_dev *d);
/* Records why the VM ends (the first reason wins) and kicks every vCPU out of KVM_RUN. */
void kvm_vm_request_exit(struct vmm_kvm *vm, enum vmm_kvm_exit why);
/* Parks every vCPU outside KVM_RUN with its state consistent (pending I/O completed);
 * 0, or -ECANCELED if the VM ended meanwhile. kvm_vm_resume lets them run again. */
int kvm_vm_pause(struct vmm_kvm *vm);
void kvm_vm_resume(struct vmm_kvm *vm);
/* Level of an interrupt line of the in-kernel irqchip (PIC + IOAPIC). */
void kvm_vm_irq_line(struct vmm_kvm *vm, uint32_t irq, int level);

/* ---- legacy devices (legacy.c) --------------------------------------------------------- */
struct serial;
struct serial *kvm_serial_new(struct vmm_kvm *vm, uint16_t base, uint32_t irq, int out_fd);
void kvm_serial_free(struct serial *s);
void kvm_legacy_register(struct vmm_kvm *vm); /* i8042, CMOS, POST port */
struct serial_snap {
    uint8_t ier, lcr, mcr, scr, dll, dlm, fcr, thri_pending;
};
void kvm_serial_save(struct serial *s, struct serial_snap *out);
void kvm_serial_load(struct serial *s, const struct serial_snap *in);

#endif
