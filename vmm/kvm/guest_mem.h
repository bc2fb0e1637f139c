/* vmm/kvm/guest_mem: the guest's physical memory as the VMM sees it.
 *
 * Owns: the map from guest-physical addresses to host pointers, and the only sanctioned way
 * to turn a guest-supplied address into a host pointer (kvm_gm_ptr), which checks that the whole
 * range lies inside one RAM region without wrapping. Every device goes through it: a guest
 * address is hostile until kvm_gm_ptr said otherwise.
 *
 * Layout (x86): RAM from 0 up to the 32-bit MMIO gap (AL_GM_GAP_START), the rest above 4 GiB.
 */
#ifndef AIRLOCK_VMM_KVM_GUEST_MEM_H
#define AIRLOCK_VMM_KVM_GUEST_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GM_MAX_REGIONS 2
#define GM_GAP_START   0xc0000000ull /* 3 GiB: MMIO devices, IOAPIC, LAPIC above here */
#define GM_4G          0x100000000ull

struct gm_region {
    uint64_t gpa;
    uint64_t size;
    uint8_t *hva;
    uint64_t file_off; /* offset of this region in the memory file */
};

struct guest_mem {
    struct gm_region r[GM_MAX_REGIONS];
    int n;
    uint64_t total; /* bytes of RAM */
    uint8_t *base;  /* one mapping of the whole memory file */
    int fd;         /* memfd (or snapshot file), -1 for test buffers */
};

/* Splits `size` bytes of RAM around the gap, backed by one buffer at base (size bytes). */
void kvm_gm_layout(struct guest_mem *gm, uint8_t *base, uint64_t size);

/* Host pointer for [gpa, gpa+len) if it lies wholly in one region; NULL otherwise.
 * len 0 is valid (returns the pointer for gpa if gpa is inside or at the end of a region). */
static inline void *kvm_gm_ptr(const struct guest_mem *gm, uint64_t gpa, uint64_t len)
{
    for (int i = 0; i < gm->n; i++) {
        const struct gm_region *r = &gm->r[i];
        if (gpa < r->gpa)
            continue;
        uint64_t off = gpa - r->gpa;
        if (off > r->size || len > r->size - off)
            continue;
        return r->hva + off;
    }
    return NULL;
}

/* The highest guest-physical address of RAM below 4 GiB (exclusive). */
uint64_t kvm_gm_low_end(const struct guest_mem *gm);

#endif
