/* vmm/kvm/boot: loading a Linux bzImage with the 64-bit boot protocol
 * (Documentation/arch/x86/boot.rst) into guest memory.
 *
 * Owns: parsing and checking the bzImage setup header (the image is untrusted input: a
 * template may bring its own kernel), placing the protected-mode kernel at 1 MiB, the
 * initrd as high as the kernel allows, the command line, and the zero page (boot_params:
 * the setup header copy, loader fields, the e820 map). Pure functions on guest_mem: the
 * unit tests run them without /dev/kvm.
 */
#ifndef AIRLOCK_VMM_KVM_BOOT_H
#define AIRLOCK_VMM_KVM_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "vmm/kvm/guest_mem.h"

/* Fixed guest-physical addresses of the boot structures (all below 640 KiB). */
#define BOOT_GDT_ADDR     0x500ull
#define BOOT_ZERO_PAGE    0x7000ull
#define BOOT_STACK_TOP    0x8ff0ull
#define BOOT_PML4_ADDR    0x9000ull
#define BOOT_PDPT_ADDR    0xa000ull
#define BOOT_PD_ADDR      0xb000ull /* 4 pages: identity map of the first 4 GiB */
#define BOOT_CMDLINE_ADDR 0x20000ull
#define BOOT_CMDLINE_MAX  0x10000ull
#define BOOT_EBDA_START   0x9fc00ull  /* MP table lives here ("last KiB of base memory") */
#define BOOT_HIMEM_START  0x100000ull /* where the protected-mode kernel is loaded */

/* e820 types */
#define E820_RAM      1
#define E820_RESERVED 2
#define E820_MAX      128

struct e820_entry {
    uint64_t addr;
    uint64_t size;
    uint32_t type;
} __attribute__((packed));

/* What the loader needs to know from a bzImage's setup header. */
struct bzimage_info {
    uint16_t version;     /* boot protocol version, e.g. 0x020f */
    uint32_t setup_size;  /* bytes of real-mode setup (incl. the boot sector) */
    uint64_t kernel_size; /* protected-mode part that follows it */
    uint8_t loadflags;
    uint16_t xloadflags;
    uint32_t initrd_addr_max; /* highest address the initrd may end at (inclusive) */
    uint32_t cmdline_size;    /* longest command line, without the NUL */
    uint32_t init_size;       /* memory the kernel needs from its load address */
    uint32_t hdr_end;         /* end offset of the setup header in the image */
};

/* Checks the setup header; -EINVAL with a message saying what is wrong (not a bzImage,
 * too old a boot protocol, not a 64-bit kernel, truncated). */
int kvm_boot_parse_bzimage(const uint8_t *img, size_t len, struct bzimage_info *out,
                           struct al_error *err);

/* Fills e820 from the memory layout; returns the number of entries. */
int kvm_boot_e820(const struct guest_mem *gm, struct e820_entry *out, int max);

/* What kvm_boot_load_linux loads. */
struct kvm_boot_linux {
    const uint8_t *kernel; /* bzImage */
    size_t klen;
    const uint8_t *initrd; /* may be NULL/0 */
    size_t ilen;
    const char *cmdline; /* may be NULL */
};

/* Loads l's kernel, initrd and cmdline into guest memory and writes the zero page at
 * BOOT_ZERO_PAGE. On success *entry is the 64-bit entry point. */
int kvm_boot_load_linux(const struct guest_mem *gm, const struct kvm_boot_linux *l, uint64_t *entry,
                        struct al_error *err);

/* Offsets into the zero page / setup header that the loader and tests use. */
#define BP_EXT_RAMDISK_IMAGE 0x0c0
#define BP_EXT_RAMDISK_SIZE  0x0c4
#define BP_EXT_CMD_LINE_PTR  0x0c8
#define BP_E820_ENTRIES      0x1e8
#define BP_SETUP_SECTS       0x1f1
#define BP_BOOT_FLAG         0x1fe
#define BP_JUMP              0x200
#define BP_HEADER            0x202
#define BP_VERSION           0x206
#define BP_TYPE_OF_LOADER    0x210
#define BP_LOADFLAGS         0x211
#define BP_RAMDISK_IMAGE     0x218
#define BP_RAMDISK_SIZE      0x21c
#define BP_HEAP_END_PTR      0x224
#define BP_CMD_LINE_PTR      0x228
#define BP_INITRD_ADDR_MAX   0x22c
#define BP_XLOADFLAGS        0x236
#define BP_CMDLINE_SIZE      0x238
#define BP_INIT_SIZE         0x260
#define BP_E820_TABLE        0x2d0

#define LOADFLAG_LOADED_HIGH  0x01
#define LOADFLAG_CAN_USE_HEAP 0x80
#define XLF_KERNEL_64         0x01

#endif
