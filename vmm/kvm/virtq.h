/* vmm/kvm/virtq: split virtqueues (virtio 1.x, section 2.7), device side.
 *
 * Owns: turning the guest's rings into chains of host buffers and returning used buffers.
 * Every field the guest wrote is hostile: ring addresses are checked once at activation
 * (alignment, inside RAM), each descriptor is copied out of guest memory before it is
 * checked (the guest can rewrite it concurrently), buffer ranges must lie in RAM, chains
 * may not loop or exceed the queue size or VIRTQ_MAX_SEGS, readable buffers must come
 * before writable ones, indirect descriptors are refused (the feature is not offered), and
 * an available index that runs more than the queue size ahead marks the queue broken.
 * A broken queue stays broken until the driver resets the device.
 */
#ifndef AIRLOCK_VMM_KVM_VIRTQ_H
#define AIRLOCK_VMM_KVM_VIRTQ_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/kvm/guest_mem.h"

#define VIRTQ_MAX_SIZE 256
#define VIRTQ_MAX_SEGS 128

#define VIRTQ_DESC_F_NEXT          1
#define VIRTQ_DESC_F_WRITE         2
#define VIRTQ_DESC_F_INDIRECT      4
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1

struct virtq_desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};

struct virtq {
    /* Set by the driver through the transport. */
    uint16_t size; /* QueueNum: a power of two, 1..VIRTQ_MAX_SIZE */
    bool ready;
    uint64_t desc_gpa, avail_gpa, used_gpa;
    /* Device state. */
    uint16_t last_avail; /* next available-ring slot to consume */
    uint16_t used_idx;   /* our copy of used->idx */
    bool broken;
    /* Host pointers resolved by kvm_virtq_activate. */
    volatile struct virtq_desc *desc;
    volatile uint16_t *avail; /* flags, idx, ring[size] */
    volatile uint8_t *used;   /* flags u16, idx u16, ring[size] of {u32 id, u32 len} */
};

struct virtq_seg {
    uint8_t *p;
    uint32_t len;
};

struct virtq_chain {
    uint16_t head;
    uint16_t n_out; /* readable (driver -> device) segments: seg[0 .. n_out) */
    uint16_t n_in;  /* writable segments: seg[n_out .. n_out + n_in) */
    uint64_t out_len;
    uint64_t in_len;
    struct virtq_seg seg[VIRTQ_MAX_SEGS];
};

/* Checks the ring addresses and resolves them; -EINVAL (and nothing resolved) if the size
 * is not a power of two within bounds, a ring is misaligned or outside RAM. */
int kvm_virtq_activate(struct virtq *q, const struct guest_mem *gm);
void kvm_virtq_reset(struct virtq *q);

/* Takes the next available chain. Returns 1 with *c filled, 0 when none is available,
 * -EINVAL for a malformed chain (already returned to the used ring with length 0, the
 * queue stays usable), -EIO if the queue is (now) broken. */
int kvm_virtq_pop(struct virtq *q, const struct guest_mem *gm, struct virtq_chain *c);
/* Undoes the last successful kvm_virtq_pop (the chain was not used and goes back to the
 * available ring's view, e.g. a receive buffer taken when no data turned out to wait). */
void kvm_virtq_unpop(struct virtq *q);
/* Puts head back on the used ring with `len` bytes written. */
void kvm_virtq_push(struct virtq *q, uint16_t head, uint32_t len);
/* Whether the driver wants an interrupt for what was pushed (VIRTQ_AVAIL_F_NO_INTERRUPT). */
bool kvm_virtq_should_notify(const struct virtq *q);
/* Whether chains are waiting (without consuming them). */
bool kvm_virtq_has_avail(const struct virtq *q);

/* Copies up to len bytes of the chain's readable part, starting at byte `off`, into dst;
 * returns the count copied. */
uint64_t kvm_virtq_chain_read(const struct virtq_chain *c, uint64_t off, void *dst, uint64_t len);
/* Copies up to len bytes into the chain's writable part starting at byte `off`; returns
 * the count copied. */
uint64_t kvm_virtq_chain_write(const struct virtq_chain *c, uint64_t off, const void *src,
                               uint64_t len);

#endif
