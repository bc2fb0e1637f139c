/* vmm/kvm/boot: the 64-bit Linux boot protocol (see boot.h). */
#include "vmm/kvm/boot.h"

#include <errno.h>
#include <string.h>

static uint16_t boot__r16(const uint8_t *p, size_t off)
{
    return (uint16_t)(p[off] | p[off + 1] << 8);
}
static uint32_t boot__r32(const uint8_t *p, size_t off)
{
    return (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
           (uint32_t)p[off + 3] << 24;
}
static void boot__w16(uint8_t *p, size_t off, uint16_t v)
{
    p[off] = (uint8_t)v;
    p[off + 1] = (uint8_t)(v >> 8);
}
static void boot__w32(uint8_t *p, size_t off, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[off + i] = (uint8_t)(v >> (8 * i));
}

int kvm_boot_parse_bzimage(const uint8_t *img, size_t len, struct bzimage_info *out,
                           struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (len < 0x264)
        return al_error_set(err, -EINVAL, "kernel image is %zu bytes: too small to be a bzImage",
                            len);
    if (boot__r16(img, BP_BOOT_FLAG) != 0xaa55 || memcmp(img + BP_HEADER, "HdrS", 4) != 0)
        return al_error_set(err, -EINVAL,
                            "kernel image is not a bzImage (no 'HdrS' setup header); "
                            "use arch/x86/boot/bzImage, not vmlinux");
    out->version = boot__r16(img, BP_VERSION);
    if (out->version < 0x020c)
        return al_error_set(err, -EINVAL,
                            "bzImage boot protocol %u.%02u is too old: 2.12 (Linux 3.8) or newer "
                            "is needed for the 64-bit entry point",
                            out->version >> 8, out->version & 0xff);
    unsigned sects = img[BP_SETUP_SECTS] ? img[BP_SETUP_SECTS] : 4;
    out->setup_size = (sects + 1) * 512;
    if (out->setup_size >= len)
        return al_error_set(err, -EINVAL,
                            "bzImage is truncated: setup (%u bytes) covers the whole file",
                            out->setup_size);
    out->kernel_size = len - out->setup_size;
    out->loadflags = img[BP_LOADFLAGS];
    out->xloadflags = boot__r16(img, BP_XLOADFLAGS);
    out->initrd_addr_max = boot__r32(img, BP_INITRD_ADDR_MAX);
    out->cmdline_size = boot__r32(img, BP_CMDLINE_SIZE);
    out->init_size = boot__r32(img, BP_INIT_SIZE);
    /* The header ends where the 2-byte jump at 0x200 lands. */
    out->hdr_end = 0x202 + img[BP_JUMP + 1];
    if (out->hdr_end > 0x290)
        out->hdr_end = 0x290;
    if (!(out->xloadflags & XLF_KERNEL_64))
        return al_error_set(err, -EINVAL,
                            "bzImage has no 64-bit entry point (XLF_KERNEL_64 unset): "
                            "build an x86_64 kernel");
    if (!(out->loadflags & LOADFLAG_LOADED_HIGH))
        return al_error_set(err, -EINVAL, "bzImage is a zImage (not loaded high): unsupported");
    if (out->init_size < out->kernel_size)
        return al_error_set(err, -EINVAL,
                            "bzImage header is inconsistent: init_size %u < kernel %llu bytes",
                            out->init_size, (unsigned long long)out->kernel_size);
    return 0;
}

int kvm_boot_e820(const struct guest_mem *gm, struct e820_entry *out, int max)
{
    int n = 0;
#define E820_ADD(a, s, t)                                                          \
    do {                                                                           \
        if (n < max)                                                               \
            out[n++] = (struct e820_entry){.addr = (a), .size = (s), .type = (t)}; \
    } while (0)
    /* Base memory up to the EBDA (which holds the MP table), the legacy BIOS hole, then
     * everything from 1 MiB up to the gap, then RAM above 4 GiB. */
    E820_ADD(0, BOOT_EBDA_START, E820_RAM);
    E820_ADD(BOOT_EBDA_START, 0xa0000 - BOOT_EBDA_START, E820_RESERVED);
    E820_ADD(0xf0000, 0x10000, E820_RESERVED);
    uint64_t low = kvm_gm_low_end(gm);
    if (low > BOOT_HIMEM_START)
        E820_ADD(BOOT_HIMEM_START, low - BOOT_HIMEM_START, E820_RAM);
    if (gm->n > 1)
        E820_ADD(gm->r[1].gpa, gm->r[1].size, E820_RAM);
#undef E820_ADD
    return n;
}

int kvm_boot_load_linux(const struct guest_mem *gm, const struct kvm_boot_linux *l, uint64_t *entry,
                        struct al_error *err)
{
    const uint8_t *kernel = l->kernel, *initrd = l->initrd;
    size_t klen = l->klen, ilen = l->ilen;
    const char *cmdline = l->cmdline;
    struct bzimage_info bi;
    int rc = kvm_boot_parse_bzimage(kernel, klen, &bi, err);
    if (rc < 0)
        return rc;
    uint64_t low = kvm_gm_low_end(gm);
    if (BOOT_HIMEM_START + bi.init_size > low)
        return al_error_set(err, -ENOMEM,
                            "guest memory too small: the kernel needs %u MiB above 1 MiB to "
                            "decompress; give the VM more memory",
                            (bi.init_size >> 20) + 1);

    size_t clen = cmdline ? strlen(cmdline) : 0;
    uint64_t cmax = bi.cmdline_size ? bi.cmdline_size : 255;
    if (clen > cmax || clen + 1 > BOOT_CMDLINE_MAX)
        return al_error_set(err, -E2BIG,
                            "kernel command line is %zu bytes; this kernel accepts %llu", clen,
                            (unsigned long long)cmax);

    /* Protected-mode kernel at 1 MiB. */
    uint8_t *kdst = kvm_gm_ptr(gm, BOOT_HIMEM_START, bi.kernel_size);
    if (!kdst)
        return al_error_set(err, -ENOMEM, "guest memory too small for a %llu-byte kernel",
                            (unsigned long long)bi.kernel_size);
    memcpy(kdst, kernel + bi.setup_size, bi.kernel_size);

    /* Initrd: as high as allowed, page aligned, above the kernel's working area. */
    uint64_t initrd_addr = 0;
    if (initrd && ilen) {
        uint64_t limit = (uint64_t)bi.initrd_addr_max + 1;
        if (limit > low)
            limit = low;
        uint64_t floor = BOOT_HIMEM_START + ((bi.init_size + 0xfffull) & ~0xfffull);
        if (ilen > limit || ((limit - ilen) & ~0xfffull) < floor)
            return al_error_set(
                err, -ENOMEM,
                "initrd of %zu bytes does not fit below %llu MiB next to the kernel; "
                "give the VM more memory",
                ilen, (unsigned long long)(limit >> 20));
        initrd_addr = (limit - ilen) & ~0xfffull;
        memcpy(kvm_gm_ptr(gm, initrd_addr, ilen), initrd, ilen);
    }

    uint8_t *cl = kvm_gm_ptr(gm, BOOT_CMDLINE_ADDR, clen + 1);
    uint8_t *zp = kvm_gm_ptr(gm, BOOT_ZERO_PAGE, 4096);
    if (!cl || !zp)
        return al_error_set(err, -ENOMEM, "guest memory too small for the boot structures");
    memcpy(cl, cmdline ? cmdline : "", clen);
    cl[clen] = 0;

    memset(zp, 0, 4096);
    memcpy(zp + BP_SETUP_SECTS, kernel + BP_SETUP_SECTS, bi.hdr_end - BP_SETUP_SECTS);
    zp[BP_TYPE_OF_LOADER] = 0xff; /* "undefined" boot loader */
    zp[BP_LOADFLAGS] = (uint8_t)(bi.loadflags | LOADFLAG_CAN_USE_HEAP);
    boot__w16(zp, BP_HEAP_END_PTR, 0xfe00);
    boot__w32(zp, BP_CMD_LINE_PTR, (uint32_t)BOOT_CMDLINE_ADDR);
    boot__w32(zp, BP_RAMDISK_IMAGE, (uint32_t)initrd_addr);
    boot__w32(zp, BP_RAMDISK_SIZE, (uint32_t)ilen);
    boot__w32(zp, BP_EXT_RAMDISK_IMAGE, (uint32_t)(initrd_addr >> 32));
    boot__w32(zp, BP_EXT_RAMDISK_SIZE, (uint32_t)((uint64_t)ilen >> 32));

    struct e820_entry map[E820_MAX];
    int n = kvm_boot_e820(gm, map, E820_MAX);
    zp[BP_E820_ENTRIES] = (uint8_t)n;
    memcpy(zp + BP_E820_TABLE, map, n * sizeof map[0]);

    /* The 64-bit entry is 0x200 bytes into the protected-mode kernel. */
    *entry = BOOT_HIMEM_START + 0x200;
    return 0;
}
