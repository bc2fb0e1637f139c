/* vmm/kvm/guest_mem: guest-physical layout (see guest_mem.h). */
#include "vmm/kvm/guest_mem.h"

#include <string.h>

void kvm_gm_layout(struct guest_mem *gm, uint8_t *base, uint64_t size)
{
    memset(gm->r, 0, sizeof gm->r);
    gm->base = base;
    gm->total = size;
    uint64_t low = size < GM_GAP_START ? size : GM_GAP_START;
    gm->r[0] = (struct gm_region){.gpa = 0, .size = low, .hva = base, .file_off = 0};
    gm->n = 1;
    if (size > low) {
        gm->r[1] = (struct gm_region){
            .gpa = GM_4G, .size = size - low, .hva = base + low, .file_off = low};
        gm->n = 2;
    }
}

uint64_t kvm_gm_low_end(const struct guest_mem *gm)
{
    return gm->r[0].size;
}
