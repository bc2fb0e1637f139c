/* vmm/kvm/x86: CPU state at the 64-bit entry point, CPUID, MSRs, LAPIC, MP table
 * (see x86.h). */
#include "vmm/kvm/x86.h"

#include <errno.h>
#include <string.h>

#include "vmm/kvm/boot.h"

uint64_t kvm_x86_gdt_entry(uint16_t flags, uint32_t base, uint32_t limit)
{
    return (((uint64_t)base & 0xff000000u) << (56 - 24)) | (((uint64_t)flags & 0x0000f0ffu) << 40) |
           (((uint64_t)limit & 0x000f0000u) << (48 - 16)) | (((uint64_t)base & 0x00ffffffu) << 16) |
           ((uint64_t)limit & 0x0000ffffu);
}

void kvm_x86_segment_from_gdt(uint64_t e, uint16_t selector, struct kvm_segment *s)
{
    memset(s, 0, sizeof *s);
    s->base = (uint32_t)(((e >> 16) & 0xffffff) | (((e >> 56) & 0xff) << 24));
    uint32_t limit = (uint32_t)((e & 0xffff) | (((e >> 48) & 0xf) << 16));
    s->g = (e >> 55) & 1;
    s->limit = s->g ? (limit << 12) | 0xfff : limit;
    s->selector = selector;
    s->type = (e >> 40) & 0xf;
    s->s = (e >> 44) & 1;
    s->dpl = (e >> 45) & 3;
    s->present = (e >> 47) & 1;
    s->avl = (e >> 52) & 1;
    s->l = (e >> 53) & 1;
    s->db = (e >> 54) & 1;
    s->unusable = !s->present;
}

int kvm_x86_setup_long_mode(const struct guest_mem *gm, struct kvm_sregs *sregs)
{
    uint64_t gdt[5] = {
        0,
        0,
        kvm_x86_gdt_entry(0xa09b, 0, 0xfffff), /* 0x10: 64-bit code */
        kvm_x86_gdt_entry(0xc093, 0, 0xfffff), /* 0x18: data */
        kvm_x86_gdt_entry(0x808b, 0, 0xfffff), /* 0x20: TSS (busy) */
    };
    uint64_t *g = kvm_gm_ptr(gm, BOOT_GDT_ADDR, sizeof gdt);
    uint64_t *pml4 = kvm_gm_ptr(gm, BOOT_PML4_ADDR, 4096);
    uint64_t *pdpt = kvm_gm_ptr(gm, BOOT_PDPT_ADDR, 4096);
    uint64_t *pd = kvm_gm_ptr(gm, BOOT_PD_ADDR, 4 * 4096);
    if (!g || !pml4 || !pdpt || !pd)
        return -ENOMEM;
    memcpy(g, gdt, sizeof gdt);

    /* 4 GiB identity map with 2 MiB pages: the kernel, zero page, command line and initrd
     * are all below 4 GiB. */
    memset(pml4, 0, 4096);
    memset(pdpt, 0, 4096);
    pml4[0] = BOOT_PDPT_ADDR | 0x3;
    for (uint64_t i = 0; i < 4; i++) {
        pdpt[i] = (BOOT_PD_ADDR + i * 4096) | 0x3;
        for (uint64_t j = 0; j < 512; j++)
            pd[i * 512 + j] = ((i * 512 + j) << 21) | 0x83; /* present, writable, 2 MiB */
    }

    struct kvm_segment code, data, tss;
    kvm_x86_segment_from_gdt(gdt[2], X86_BOOT_CS, &code);
    kvm_x86_segment_from_gdt(gdt[3], X86_BOOT_DS, &data);
    kvm_x86_segment_from_gdt(gdt[4], X86_BOOT_TSS, &tss);
    sregs->cs = code;
    sregs->ds = sregs->es = sregs->fs = sregs->gs = sregs->ss = data;
    sregs->tr = tss;
    sregs->gdt.base = BOOT_GDT_ADDR;
    sregs->gdt.limit = sizeof gdt - 1;
    sregs->idt.base = 0;
    sregs->idt.limit = 0;
    memset(&sregs->ldt, 0, sizeof sregs->ldt);
    sregs->ldt.unusable = 1;
    sregs->cr0 =
        X86_CR0_PE | X86_CR0_MP | X86_CR0_ET | X86_CR0_NE | X86_CR0_WP | X86_CR0_AM | X86_CR0_PG;
    sregs->cr3 = BOOT_PML4_ADDR;
    sregs->cr4 = X86_CR4_PAE;
    sregs->efer = X86_EFER_LME | X86_EFER_LMA;
    return 0;
}

void kvm_x86_setup_regs(struct kvm_regs *regs, uint64_t entry, uint64_t zero_page)
{
    memset(regs, 0, sizeof *regs);
    regs->rflags = 0x2;
    regs->rip = entry;
    regs->rsi = zero_page;
    regs->rsp = BOOT_STACK_TOP;
    regs->rbp = BOOT_STACK_TOP;
}

void kvm_x86_setup_fpu(struct kvm_fpu *fpu)
{
    memset(fpu, 0, sizeof *fpu);
    fpu->fcw = 0x37f;
    fpu->mxcsr = 0x1f80;
}

int kvm_x86_boot_msrs(struct kvm_msr_entry *e, int max)
{
    static const struct {
        uint32_t index;
        uint64_t data;
    } init[] = {
        {0x174, 0},              /* IA32_SYSENTER_CS */
        {0x175, 0},              /* IA32_SYSENTER_ESP */
        {0x176, 0},              /* IA32_SYSENTER_EIP */
        {0xc0000081, 0},         /* STAR */
        {0xc0000082, 0},         /* LSTAR */
        {0xc0000083, 0},         /* CSTAR */
        {0xc0000084, 0},         /* SYSCALL_MASK */
        {0xc0000102, 0},         /* KERNEL_GS_BASE */
        {0x1a0, 1},              /* IA32_MISC_ENABLE: fast strings */
        {0x2ff, (1u << 11) | 6}, /* MTRRdefType: MTRRs on, default write-back */
    };
    int n = 0;
    for (size_t i = 0; i < sizeof init / sizeof init[0] && n < max; i++, n++) {
        memset(&e[n], 0, sizeof e[n]);
        e[n].index = init[i].index;
        e[n].data = init[i].data;
    }
    return n;
}

static unsigned x86__bits_for(uint32_t count)
{
    unsigned b = 0;
    while ((1u << b) < count)
        b++;
    return b;
}

void kvm_x86_cpuid_fixup(struct kvm_cpuid2 *c, uint32_t index, uint32_t count)
{
    uint32_t apic_id = index;
    for (uint32_t i = 0; i < c->nent; i++) {
        struct kvm_cpuid_entry2 *e = &c->entries[i];
        switch (e->function) {
        case 0x1:
            /* EBX: CLFLUSH size kept, logical processor count, initial APIC id. */
            e->ebx = (e->ebx & 0x0000ffffu) | ((count & 0xff) << 16) | (apic_id << 24);
            e->ecx |= 1u << 31; /* running under a hypervisor */
            if (count > 1)
                e->edx |= 1u << 28; /* HTT: the count above is meaningful */
            else
                e->edx &= ~(1u << 28);
            break;
        case 0x4:
            /* Intel deterministic cache leaf: cores per package - 1 in EAX[31:26]. */
            e->eax = (e->eax & 0x03ffffffu) | (((count - 1) & 0x3f) << 26);
            break;
        case 0xa:
            /* No PMU: the guest would program counters we do not virtualise for it. */
            e->eax = e->ebx = e->ecx = e->edx = 0;
            break;
        case 0xb:
        case 0x1f:
            /* x2APIC topology: one thread per core, `count` cores in one package. */
            e->edx = apic_id;
            if (e->index == 0) {
                e->eax = 0;
                e->ebx = 1;
                e->ecx = (1u << 8) | 0; /* level type SMT */
            } else if (e->index == 1) {
                e->eax = x86__bits_for(count);
                e->ebx = count;
                e->ecx = (2u << 8) | 1; /* level type core */
            } else {
                e->eax = e->ebx = 0;
                e->ecx = e->index; /* invalid level */
            }
            break;
        case 0x80000008:
            /* AMD: number of cores - 1 in ECX[7:0], APIC id size in ECX[15:12]. */
            e->ecx = (e->ecx & ~0xf0ffu) | ((count - 1) & 0xff) | (x86__bits_for(count) << 12);
            break;
        default:
            break;
        }
    }
}

void kvm_x86_lapic_setup(struct kvm_lapic_state *lapic)
{
    uint32_t v;
    memcpy(&v, &lapic->regs[0x350], 4); /* LVT LINT0 */
    v = (v & ~0x700u) | (7u << 8);      /* ExtINT */
    memcpy(&lapic->regs[0x350], &v, 4);
    memcpy(&v, &lapic->regs[0x360], 4); /* LVT LINT1 */
    v = (v & ~0x700u) | (4u << 8);      /* NMI */
    memcpy(&lapic->regs[0x360], &v, 4);
}

/* ---- MP table (Intel MultiProcessor Specification 1.4) ------------------------------ */

static uint8_t x86__checksum(const uint8_t *p, size_t n)
{
    uint8_t s = 0;
    for (size_t i = 0; i < n; i++)
        s = (uint8_t)(s + p[i]);
    return (uint8_t)(0x100 - s);
}

int kvm_x86_write_mptable(const struct guest_mem *gm, uint32_t ncpus)
{
    const size_t fp_len = 16, hdr_len = 44, cpu_len = 20, bus_len = 8, ioapic_len = 8, irq_len = 8;
    size_t n_irq = X86_IOAPIC_PINS + 2; /* every pin, plus LINT0/LINT1 */
    size_t total = fp_len + hdr_len + ncpus * cpu_len + bus_len + ioapic_len + n_irq * irq_len;
    if (ncpus == 0 || ncpus > 254 || total > 0xa0000 - BOOT_EBDA_START)
        return -E2BIG;
    uint8_t *base = kvm_gm_ptr(gm, BOOT_EBDA_START, total);
    if (!base)
        return -ENOMEM;
    memset(base, 0, total);
    uint8_t *fp = base, *hdr = base + fp_len, *p = hdr + hdr_len;
    uint32_t hdr_gpa = (uint32_t)(BOOT_EBDA_START + fp_len);
    uint8_t ioapic_id = (uint8_t)ncpus;

    for (uint32_t i = 0; i < ncpus; i++, p += cpu_len) {
        p[0] = 0;                           /* processor entry */
        p[1] = (uint8_t)i;                  /* local APIC id */
        p[2] = 0x14;                        /* local APIC version */
        p[3] = 0x01 | (i == 0 ? 0x02 : 0);  /* enabled, bootstrap processor */
        uint32_t sig = 0x600, feat = 0x201; /* family 6; FPU + APIC */
        memcpy(p + 4, &sig, 4);
        memcpy(p + 8, &feat, 4);
    }
    p[0] = 1; /* bus entry: ISA bus 0 */
    p[1] = 0;
    memcpy(p + 2, "ISA   ", 6);
    p += bus_len;
    p[0] = 2; /* IOAPIC entry */
    p[1] = ioapic_id;
    p[2] = 0x11;
    p[3] = 0x01; /* enabled */
    uint32_t ioapic_addr = X86_IOAPIC_ADDR;
    memcpy(p + 4, &ioapic_addr, 4);
    p += ioapic_len;
    for (uint8_t pin = 0; pin < X86_IOAPIC_PINS; pin++, p += irq_len) {
        p[0] = 3;   /* I/O interrupt assignment */
        p[1] = 0;   /* INT */
        p[2] = 0;   /* flags: conforming polarity/trigger */
        p[4] = 0;   /* source bus */
        p[5] = pin; /* source bus irq */
        p[6] = ioapic_id;
        p[7] = pin;
    }
    for (uint8_t lint = 0; lint < 2; lint++, p += irq_len) {
        p[0] = 4;                 /* local interrupt assignment */
        p[1] = lint == 0 ? 3 : 1; /* ExtINT, NMI */
        p[4] = 0;
        p[5] = 0;
        p[6] = 0xff; /* every local APIC */
        p[7] = lint;
    }

    size_t table_len = (size_t)(p - hdr);
    memcpy(hdr, "PCMP", 4);
    uint16_t tl = (uint16_t)table_len, count = (uint16_t)(ncpus + 2 + n_irq);
    memcpy(hdr + 4, &tl, 2);
    hdr[6] = 4; /* spec revision 1.4 */
    memcpy(hdr + 8, "AIRLOCK ", 8);
    memcpy(hdr + 16, "MICROVM     ", 12);
    memcpy(hdr + 34, &count, 2);
    uint32_t lapic = X86_LAPIC_ADDR;
    memcpy(hdr + 36, &lapic, 4);
    hdr[7] = x86__checksum(hdr, table_len);

    memcpy(fp, "_MP_", 4);
    memcpy(fp + 4, &hdr_gpa, 4);
    fp[8] = 1; /* length in 16-byte units */
    fp[9] = 4;
    fp[10] = x86__checksum(fp, fp_len);
    return 0;
}
