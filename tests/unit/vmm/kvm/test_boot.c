/* Unit tests: vmm/kvm boot (bzImage header checks, zero page, initrd placement, e820) and
 * x86 setup (GDT, page tables, CPUID, MSRs, LAPIC, MP table). No /dev/kvm needed. */
#include "al_test.h"
#include "vmm/kvm/boot.h"
#include "vmm/kvm/x86.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MEM (64u << 20)

static uint8_t *mem;
static struct guest_mem gm;

static void setup(void)
{
    mem = calloc(1, MEM);
    kvm_gm_layout(&gm, mem, MEM);
    gm.fd = -1;
}

static void teardown(void)
{
    free(mem);
}

/* A synthetic bzImage: 4 setup sectors + 1 boot sector, then `payload` bytes. */
static uint8_t *fake_bzimage(size_t payload, size_t *len)
{
    *len = 5 * 512 + payload;
    uint8_t *k = calloc(1, *len);
    k[BP_SETUP_SECTS] = 4;
    k[BP_BOOT_FLAG] = 0x55;
    k[BP_BOOT_FLAG + 1] = 0xaa;
    k[BP_JUMP] = 0xeb;
    k[BP_JUMP + 1] = 0x66; /* header ends at 0x268 */
    memcpy(k + BP_HEADER, "HdrS", 4);
    k[BP_VERSION] = 0x0f;
    k[BP_VERSION + 1] = 0x02; /* 2.15 */
    k[BP_LOADFLAGS] = LOADFLAG_LOADED_HIGH;
    k[BP_XLOADFLAGS] = XLF_KERNEL_64;
    uint32_t v = 0x37ffffff;
    memcpy(k + BP_INITRD_ADDR_MAX, &v, 4);
    v = 2047;
    memcpy(k + BP_CMDLINE_SIZE, &v, 4);
    v = (uint32_t)(payload + (4u << 20)); /* init_size */
    memcpy(k + BP_INIT_SIZE, &v, 4);
    for (size_t i = 0; i < payload; i++)
        k[5 * 512 + i] = (uint8_t)(i * 13);
    return k;
}

START_TEST(bzimage_valid_header)
{
    size_t len;
    uint8_t *k = fake_bzimage(4096, &len);
    struct bzimage_info bi;
    struct al_error err = {0};
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), 0);
    ck_assert_uint_eq(bi.version, 0x020f);
    ck_assert_uint_eq(bi.setup_size, 5 * 512);
    ck_assert_uint_eq(bi.kernel_size, 4096);
    ck_assert_uint_eq(bi.hdr_end, 0x268);
    free(k);
}
END_TEST

START_TEST(bzimage_rejects_bad_images)
{
    size_t len;
    struct bzimage_info bi;
    struct al_error err = {0};
    uint8_t *k = fake_bzimage(4096, &len);

    ck_assert_int_eq(kvm_boot_parse_bzimage(k, 100, &bi, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too small"));

    k[BP_HEADER] = 'X';
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a bzImage"));
    k[BP_HEADER] = 'H';

    k[BP_VERSION] = 0x0b; /* 2.11 */
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too old"));
    k[BP_VERSION] = 0x0f;

    k[BP_XLOADFLAGS] = 0;
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "64-bit"));
    k[BP_XLOADFLAGS] = XLF_KERNEL_64;

    k[BP_SETUP_SECTS] = 200; /* setup larger than the file */
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
    k[BP_SETUP_SECTS] = 4;

    uint32_t small = 16; /* init_size below the kernel size */
    memcpy(k + BP_INIT_SIZE, &small, 4);
    ck_assert_int_eq(kvm_boot_parse_bzimage(k, len, &bi, &err), -EINVAL);
    free(k);
}
END_TEST

static uint32_t r32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

START_TEST(load_linux_fills_zero_page)
{
    size_t len;
    uint8_t *k = fake_bzimage(8192, &len);
    uint8_t initrd[10000];
    memset(initrd, 0x5a, sizeof initrd);
    uint64_t entry = 0;
    struct al_error err = {0};
    ck_assert_int_eq(kvm_boot_load_linux(&gm,
                                         &(struct kvm_boot_linux){.kernel = k,
                                                                  .klen = len,
                                                                  .initrd = initrd,
                                                                  .ilen = sizeof initrd,
                                                                  .cmdline = "console=ttyS0 x=1"},
                                         &entry, &err),
                     0);
    ck_assert_uint_eq(entry, BOOT_HIMEM_START + 0x200);
    /* The protected-mode kernel is at 1 MiB. */
    ck_assert_int_eq(memcmp(mem + BOOT_HIMEM_START, k + 5 * 512, 8192), 0);
    uint8_t *zp = mem + BOOT_ZERO_PAGE;
    ck_assert_int_eq(memcmp(zp + BP_HEADER, "HdrS", 4), 0);
    ck_assert_uint_eq(zp[BP_TYPE_OF_LOADER], 0xff);
    ck_assert(zp[BP_LOADFLAGS] & LOADFLAG_CAN_USE_HEAP);
    ck_assert_uint_eq(r32(zp + BP_CMD_LINE_PTR), BOOT_CMDLINE_ADDR);
    ck_assert_str_eq((char *)mem + BOOT_CMDLINE_ADDR, "console=ttyS0 x=1");
    /* Initrd: page aligned, as high as possible, above the kernel's working area. */
    uint32_t ia = r32(zp + BP_RAMDISK_IMAGE);
    ck_assert_uint_eq(r32(zp + BP_RAMDISK_SIZE), sizeof initrd);
    ck_assert_uint_eq(ia & 0xfff, 0);
    ck_assert_uint_le(ia + sizeof initrd, MEM);
    ck_assert_uint_gt(ia + sizeof initrd + 4096, MEM);
    ck_assert_int_eq(memcmp(mem + ia, initrd, sizeof initrd), 0);
    /* e820 in the zero page. */
    ck_assert_uint_eq(zp[BP_E820_ENTRIES], 4);
    struct e820_entry e;
    memcpy(&e, zp + BP_E820_TABLE + 3 * sizeof e, sizeof e);
    ck_assert_uint_eq(e.addr, BOOT_HIMEM_START);
    ck_assert_uint_eq(e.size, MEM - BOOT_HIMEM_START);
    ck_assert_uint_eq(e.type, E820_RAM);
    free(k);
}
END_TEST

START_TEST(load_linux_errors_are_explained)
{
    size_t len;
    uint8_t *k = fake_bzimage(8192, &len);
    uint64_t entry;
    struct al_error err = {0};
    char *longcmd = malloc(3000);
    memset(longcmd, 'a', 2999);
    longcmd[2999] = 0;
    ck_assert_int_eq(
        kvm_boot_load_linux(
            &gm,
            &(struct kvm_boot_linux){
                .kernel = k, .klen = len, .initrd = NULL, .ilen = 0, .cmdline = longcmd},
            &entry, &err),
        -E2BIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "command line"));
    free(longcmd);

    /* An initrd that cannot fit between the kernel and the end of RAM. */
    size_t big = MEM - (5u << 20);
    uint8_t *initrd = calloc(1, big);
    ck_assert_int_eq(
        kvm_boot_load_linux(
            &gm,
            &(struct kvm_boot_linux){
                .kernel = k, .klen = len, .initrd = initrd, .ilen = big, .cmdline = ""},
            &entry, &err),
        -ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "initrd"));
    free(initrd);

    /* Memory too small for the kernel's init_size. */
    uint32_t huge = 200u << 20;
    memcpy(k + BP_INIT_SIZE, &huge, 4);
    ck_assert_int_eq(
        kvm_boot_load_linux(&gm,
                            &(struct kvm_boot_linux){
                                .kernel = k, .klen = len, .initrd = NULL, .ilen = 0, .cmdline = ""},
                            &entry, &err),
        -ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "memory too small"));
    free(k);
}
END_TEST

START_TEST(e820_splits_around_the_gap)
{
    struct guest_mem big;
    kvm_gm_layout(&big, (uint8_t *)0x1000, 4ull << 30); /* never dereferenced */
    ck_assert_int_eq(big.n, 2);
    ck_assert_uint_eq(big.r[0].size, GM_GAP_START);
    ck_assert_uint_eq(big.r[1].gpa, GM_4G);
    ck_assert_uint_eq(big.r[1].size, (4ull << 30) - GM_GAP_START);
    struct e820_entry e[E820_MAX];
    int n = kvm_boot_e820(&big, e, E820_MAX);
    ck_assert_int_eq(n, 5);
    ck_assert_uint_eq(e[0].addr, 0);
    ck_assert_uint_eq(e[0].size, BOOT_EBDA_START);
    ck_assert_uint_eq(e[1].type, E820_RESERVED);
    ck_assert_uint_eq(e[3].addr + e[3].size, GM_GAP_START);
    ck_assert_uint_eq(e[4].addr, GM_4G);
    ck_assert_uint_eq(e[4].type, E820_RAM);
}
END_TEST

START_TEST(gm_ptr_bounds)
{
    ck_assert_ptr_eq(kvm_gm_ptr(&gm, 0, MEM), mem);
    ck_assert_ptr_null(kvm_gm_ptr(&gm, 0, MEM + 1ull));
    ck_assert_ptr_null(kvm_gm_ptr(&gm, MEM, 1));
    ck_assert_ptr_nonnull(kvm_gm_ptr(&gm, MEM, 0));
    ck_assert_ptr_null(kvm_gm_ptr(&gm, UINT64_MAX, 2));      /* wraps */
    ck_assert_ptr_null(kvm_gm_ptr(&gm, 16, UINT64_MAX - 8)); /* wraps */
}
END_TEST

START_TEST(long_mode_state)
{
    struct kvm_sregs s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(kvm_x86_setup_long_mode(&gm, &s), 0);
    ck_assert(s.cr0 & X86_CR0_PG);
    ck_assert(s.cr0 & X86_CR0_PE);
    ck_assert(s.cr4 & X86_CR4_PAE);
    ck_assert_uint_eq(s.efer, X86_EFER_LME | X86_EFER_LMA);
    ck_assert_uint_eq(s.cs.selector, X86_BOOT_CS);
    ck_assert_uint_eq(s.cs.l, 1);
    ck_assert_uint_eq(s.cs.present, 1);
    ck_assert_uint_eq(s.ds.selector, X86_BOOT_DS);
    ck_assert_uint_eq(s.ds.limit, 0xffffffff);
    ck_assert_uint_eq(s.cr3, BOOT_PML4_ADDR);
    uint64_t *pml4 = (uint64_t *)(mem + BOOT_PML4_ADDR);
    uint64_t *pdpt = (uint64_t *)(mem + BOOT_PDPT_ADDR);
    uint64_t *pd = (uint64_t *)(mem + BOOT_PD_ADDR);
    ck_assert_uint_eq(pml4[0], BOOT_PDPT_ADDR | 3);
    ck_assert_uint_eq(pdpt[3], (BOOT_PD_ADDR + 3 * 4096) | 3);
    ck_assert_uint_eq(pd[0], 0x83);
    ck_assert_uint_eq(pd[2047], (2047ull << 21) | 0x83); /* last 2 MiB below 4 GiB */
    /* The GDT entry for CS decodes back to the segment. */
    uint64_t *gdt = (uint64_t *)(mem + BOOT_GDT_ADDR);
    struct kvm_segment seg;
    kvm_x86_segment_from_gdt(gdt[2], 0x10, &seg);
    ck_assert_uint_eq(seg.type, 0xb);
    ck_assert_uint_eq(seg.s, 1);
    ck_assert_uint_eq(seg.g, 1);
}
END_TEST

START_TEST(regs_fpu_msrs)
{
    struct kvm_regs r;
    kvm_x86_setup_regs(&r, 0x100200, BOOT_ZERO_PAGE);
    ck_assert_uint_eq(r.rip, 0x100200);
    ck_assert_uint_eq(r.rsi, BOOT_ZERO_PAGE);
    ck_assert_uint_eq(r.rflags, 2);
    struct kvm_fpu f;
    kvm_x86_setup_fpu(&f);
    ck_assert_uint_eq(f.fcw, 0x37f);
    ck_assert_uint_eq(f.mxcsr, 0x1f80);
    struct kvm_msr_entry e[16];
    int n = kvm_x86_boot_msrs(e, 16);
    ck_assert_int_ge(n, 8);
    int saw_misc = 0, saw_mtrr = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].index == 0x1a0) {
            saw_misc = 1;
            ck_assert_uint_eq(e[i].data, 1);
        }
        if (e[i].index == 0x2ff) {
            saw_mtrr = 1;
            ck_assert_uint_eq(e[i].data, (1u << 11) | 6);
        }
    }
    ck_assert(saw_misc && saw_mtrr);
    ck_assert_int_eq(kvm_x86_boot_msrs(e, 3), 3); /* bounded by max */
}
END_TEST

START_TEST(cpuid_topology)
{
    struct kvm_cpuid2 *c = calloc(1, sizeof *c + 6 * sizeof(struct kvm_cpuid_entry2));
    c->nent = 6;
    c->entries[0] = (struct kvm_cpuid_entry2){.function = 1, .ebx = 0xff0a0800, .edx = 1u << 28};
    c->entries[1] = (struct kvm_cpuid_entry2){.function = 0xb, .index = 0};
    c->entries[2] = (struct kvm_cpuid_entry2){.function = 0xb, .index = 1};
    c->entries[3] = (struct kvm_cpuid_entry2){.function = 0xb, .index = 2};
    c->entries[4] = (struct kvm_cpuid_entry2){.function = 0xa, .eax = 0x7300403};
    c->entries[5] = (struct kvm_cpuid_entry2){.function = 0x80000008, .ecx = 0x7007};
    kvm_x86_cpuid_fixup(c, 2, 4);
    ck_assert_uint_eq(c->entries[0].ebx >> 24, 2);          /* APIC id */
    ck_assert_uint_eq((c->entries[0].ebx >> 16) & 0xff, 4); /* logical count */
    ck_assert_uint_eq(c->entries[0].ebx & 0xffff, 0x0800);  /* CLFLUSH size kept */
    ck_assert(c->entries[0].ecx & (1u << 31));              /* hypervisor */
    ck_assert(c->entries[0].edx & (1u << 28));
    ck_assert_uint_eq(c->entries[1].edx, 2);
    ck_assert_uint_eq(c->entries[1].ebx, 1);
    ck_assert_uint_eq(c->entries[2].eax, 2); /* 4 CPUs: 2 bits */
    ck_assert_uint_eq(c->entries[2].ebx, 4);
    ck_assert_uint_eq(c->entries[2].ecx, (2u << 8) | 1);
    ck_assert_uint_eq(c->entries[3].ecx, 2);
    ck_assert_uint_eq(c->entries[4].eax, 0); /* no PMU */
    ck_assert_uint_eq(c->entries[5].ecx & 0xff, 3);
    kvm_x86_cpuid_fixup(c, 0, 1);
    ck_assert(!(c->entries[0].edx & (1u << 28))); /* one CPU: no HTT */
    free(c);
}
END_TEST

START_TEST(lapic_lints)
{
    struct kvm_lapic_state l;
    memset(&l, 0xff, sizeof l);
    kvm_x86_lapic_setup(&l);
    uint32_t v0, v1;
    memcpy(&v0, &l.regs[0x350], 4);
    memcpy(&v1, &l.regs[0x360], 4);
    ck_assert_uint_eq((v0 >> 8) & 7, 7);
    ck_assert_uint_eq((v1 >> 8) & 7, 4);
}
END_TEST

static uint8_t sum(const uint8_t *p, size_t n)
{
    uint8_t s = 0;
    for (size_t i = 0; i < n; i++)
        s = (uint8_t)(s + p[i]);
    return s;
}

START_TEST(mptable_is_valid)
{
    ck_assert_int_eq(kvm_x86_write_mptable(&gm, 4), 0);
    uint8_t *fp = mem + BOOT_EBDA_START;
    ck_assert_int_eq(memcmp(fp, "_MP_", 4), 0);
    ck_assert_uint_eq(sum(fp, 16), 0);
    uint32_t hdr_addr;
    memcpy(&hdr_addr, fp + 4, 4);
    uint8_t *hdr = mem + hdr_addr;
    ck_assert_int_eq(memcmp(hdr, "PCMP", 4), 0);
    uint16_t tl, count;
    memcpy(&tl, hdr + 4, 2);
    memcpy(&count, hdr + 34, 2);
    ck_assert_uint_eq(sum(hdr, tl), 0);
    ck_assert_uint_eq(count, 4 + 1 + 1 + 24 + 2);
    uint8_t *p = hdr + 44;
    for (int i = 0; i < 4; i++, p += 20) {
        ck_assert_uint_eq(p[0], 0);
        ck_assert_uint_eq(p[1], i);
        ck_assert_uint_eq(p[3] & 2, i == 0 ? 2 : 0); /* only CPU 0 is the BSP */
    }
    ck_assert_uint_eq(p[0], 1); /* bus */
    ck_assert_uint_eq(p[8], 2); /* IOAPIC */
    ck_assert_uint_eq(p[9], 4); /* its id follows the CPUs */
    ck_assert_int_eq(kvm_x86_write_mptable(&gm, 0), -E2BIG);
    ck_assert_int_eq(kvm_x86_write_mptable(&gm, 255), -E2BIG);
}
END_TEST

static Suite *boot_suite(void)
{
    Suite *s = suite_create("vmm_kvm_boot");
    TCase *tc = tcase_create("boot");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, bzimage_valid_header);
    tcase_add_test(tc, bzimage_rejects_bad_images);
    tcase_add_test(tc, load_linux_fills_zero_page);
    tcase_add_test(tc, load_linux_errors_are_explained);
    tcase_add_test(tc, e820_splits_around_the_gap);
    tcase_add_test(tc, gm_ptr_bounds);
    tcase_add_test(tc, long_mode_state);
    tcase_add_test(tc, regs_fpu_msrs);
    tcase_add_test(tc, cpuid_topology);
    tcase_add_test(tc, lapic_lints);
    tcase_add_test(tc, mptable_is_valid);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(boot_suite)
