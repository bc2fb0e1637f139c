/* vmm/kvm/x86: the x86-64 CPU state a Linux guest expects at its 64-bit entry point.
 *
 * Owns: identity page tables and the GDT in guest memory, special registers (long mode,
 * paging), general registers, FPU, the MSRs we initialise, CPUID as presented to each
 * vCPU (topology, hypervisor bit, no PMU), the LAPIC's LINT0/LINT1 wiring, and the Intel
 * MP table that tells the guest about vCPUs and the IOAPIC. Pure functions on structures
 * from <linux/kvm.h> and guest memory: unit-tested without /dev/kvm.
 */
#ifndef AIRLOCK_VMM_KVM_X86_H
#define AIRLOCK_VMM_KVM_X86_H

#include <linux/kvm.h>
#include <stdint.h>

#include "vmm/kvm/guest_mem.h"

#define X86_CR0_PE   0x1ull
#define X86_CR0_MP   0x2ull
#define X86_CR0_ET   0x10ull
#define X86_CR0_NE   0x20ull
#define X86_CR0_WP   0x10000ull
#define X86_CR0_AM   0x40000ull
#define X86_CR0_PG   0x80000000ull
#define X86_CR4_PAE  0x20ull
#define X86_EFER_LME 0x100ull
#define X86_EFER_LMA 0x400ull

#define X86_BOOT_CS  0x10 /* __BOOT_CS of the boot protocol */
#define X86_BOOT_DS  0x18 /* __BOOT_DS */
#define X86_BOOT_TSS 0x20

#define X86_IOAPIC_ADDR 0xfec00000u
#define X86_LAPIC_ADDR  0xfee00000u
#define X86_IOAPIC_PINS 24

/* A GDT entry from flags/base/limit (Linux's GDT_ENTRY) and the kvm_segment it describes. */
uint64_t kvm_x86_gdt_entry(uint16_t flags, uint32_t base, uint32_t limit);
void kvm_x86_segment_from_gdt(uint64_t entry, uint16_t selector, struct kvm_segment *seg);

/* Writes the GDT and 4 GiB identity page tables into guest memory and sets *sregs for
 * 64-bit mode (sregs should come from KVM_GET_SREGS so other fields keep KVM's values).
 * -ENOMEM if guest memory cannot hold them. */
int kvm_x86_setup_long_mode(const struct guest_mem *gm, struct kvm_sregs *sregs);
/* Registers at the entry point: rip, rsi = zero page, rsp, rflags = 2. */
void kvm_x86_setup_regs(struct kvm_regs *regs, uint64_t entry, uint64_t zero_page);
void kvm_x86_setup_fpu(struct kvm_fpu *fpu);
/* Fills up to max MSR entries for a vCPU at boot; returns the count. */
int kvm_x86_boot_msrs(struct kvm_msr_entry *e, int max);
/* Adjusts KVM's supported CPUID for vCPU `index` of `count`: APIC ids, topology leaves,
 * hypervisor bit, PMU hidden. */
void kvm_x86_cpuid_fixup(struct kvm_cpuid2 *c, uint32_t index, uint32_t count);
/* LINT0 = ExtINT (the PIC), LINT1 = NMI, as a BIOS leaves them. */
void kvm_x86_lapic_setup(struct kvm_lapic_state *lapic);
/* Writes an MP table (floating pointer + configuration table) at BOOT_EBDA_START for
 * `ncpus` CPUs and the IOAPIC; -E2BIG if it does not fit in the EBDA. */
int kvm_x86_write_mptable(const struct guest_mem *gm, uint32_t ncpus);

#endif
