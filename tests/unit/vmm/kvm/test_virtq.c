/* Unit tests: vmm/kvm virtqueues (hostile descriptors), the virtio-mmio transport
 * (negotiation, queue activation), virtio-blk requests and the copy-on-write disk. */
#include "al_test.h"
#include "vq_driver.h"
#include "vmm/kvm/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define MEM   (1u << 20)
#define DESC  0x1000ull
#define AVAIL 0x2000ull
#define USED  0x3000ull
#define DATA  0x10000ull
#define QSZ   8

static struct vmm_kvm *vm;
static struct virtq q;

static void setup(void)
{
    vm = vqd_fake_vm(MEM);
    kvm_virtq_reset(&q);
    q.size = QSZ;
    q.desc_gpa = DESC;
    q.avail_gpa = AVAIL;
    q.used_gpa = USED;
    ck_assert_int_eq(kvm_virtq_activate(&q, &vm->gm), 0);
    q.ready = true;
}

static void teardown(void)
{
    vqd_free_vm(vm);
}

START_TEST(pop_simple_chain)
{
    struct virtq_chain c;
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), 0); /* nothing available */
    vqd_desc(vm, DESC, 0, DATA, 16, VIRTQ_DESC_F_NEXT, 1);
    vqd_desc(vm, DESC, 1, DATA + 16, 100, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 2);
    vqd_desc(vm, DESC, 2, DATA + 200, 1, VIRTQ_DESC_F_WRITE, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert(kvm_virtq_has_avail(&q));
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), 1);
    ck_assert_uint_eq(c.head, 0);
    ck_assert_uint_eq(c.n_out, 1);
    ck_assert_uint_eq(c.n_in, 2);
    ck_assert_uint_eq(c.out_len, 16);
    ck_assert_uint_eq(c.in_len, 101);
    ck_assert_ptr_eq(c.seg[0].p, vm->gm.base + DATA);
    /* chain helpers copy across segments and stop at the end */
    uint8_t buf[200];
    memset(vm->gm.base + DATA, 7, 16);
    ck_assert_uint_eq(kvm_virtq_chain_read(&c, 10, buf, 100), 6);
    memset(buf, 9, sizeof buf);
    ck_assert_uint_eq(kvm_virtq_chain_write(&c, 99, buf, 10), 2);
    ck_assert_uint_eq(vm->gm.base[DATA + 16 + 99], 9);
    ck_assert_uint_eq(vm->gm.base[DATA + 200], 9);
    kvm_virtq_push(&q, c.head, 101);
    ck_assert_uint_eq(vqd_used_idx(vm, USED), 1);
    uint32_t id, len;
    vqd_used_elem(vm, USED, QSZ, 0, &id, &len);
    ck_assert_uint_eq(id, 0);
    ck_assert_uint_eq(len, 101);
    ck_assert(!kvm_virtq_has_avail(&q));
}
END_TEST

START_TEST(pop_rejects_loops)
{
    struct virtq_chain c;
    vqd_desc(vm, DESC, 0, DATA, 16, VIRTQ_DESC_F_NEXT, 1);
    vqd_desc(vm, DESC, 1, DATA, 16, VIRTQ_DESC_F_NEXT, 0); /* 0 -> 1 -> 0 ... */
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    ck_assert_uint_eq(vqd_used_idx(vm, USED), 1); /* handed back with length 0 */
    /* self loop */
    vqd_desc(vm, DESC, 3, DATA, 16, VIRTQ_DESC_F_NEXT, 3);
    vqd_avail(vm, AVAIL, QSZ, 3);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    ck_assert(!q.broken); /* a bad chain does not break the queue */
}
END_TEST

START_TEST(pop_rejects_bad_buffers)
{
    struct virtq_chain c;
    /* outside guest memory */
    vqd_desc(vm, DESC, 0, MEM - 8, 16, 0, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    /* wrapping address */
    vqd_desc(vm, DESC, 0, UINT64_MAX - 4, 16, 0, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    /* readable after writable */
    vqd_desc(vm, DESC, 0, DATA, 16, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 1);
    vqd_desc(vm, DESC, 1, DATA, 16, 0, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    /* indirect (not offered) */
    vqd_desc(vm, DESC, 0, DATA, 16, VIRTQ_DESC_F_INDIRECT, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    /* next out of range */
    vqd_desc(vm, DESC, 0, DATA, 16, VIRTQ_DESC_F_NEXT, QSZ);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    /* head out of range: nothing to return */
    uint16_t before = vqd_used_idx(vm, USED);
    vqd_avail(vm, AVAIL, QSZ, 100);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EINVAL);
    ck_assert_uint_eq(vqd_used_idx(vm, USED), before);
    /* still usable afterwards */
    vqd_desc(vm, DESC, 0, DATA, 16, 0, 0);
    vqd_avail(vm, AVAIL, QSZ, 0);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), 1);
}
END_TEST

START_TEST(avail_index_jump_breaks_queue)
{
    struct virtq_chain c;
    uint16_t *a = kvm_gm_ptr(&vm->gm, AVAIL, 4);
    a[1] = QSZ + 1; /* claims more entries than the ring holds */
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EIO);
    ck_assert(q.broken);
    ck_assert_int_eq(kvm_virtq_pop(&q, &vm->gm, &c), -EIO);
    ck_assert(!kvm_virtq_has_avail(&q));
}
END_TEST

START_TEST(activate_checks_layout)
{
    struct virtq b;
    kvm_virtq_reset(&b);
    b.size = 3; /* not a power of two */
    b.desc_gpa = DESC;
    b.avail_gpa = AVAIL;
    b.used_gpa = USED;
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), -EINVAL);
    b.size = 512; /* above the maximum */
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), -EINVAL);
    b.size = 8;
    b.desc_gpa = DESC + 8; /* misaligned */
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), -EINVAL);
    b.desc_gpa = MEM - 16; /* ring runs past RAM */
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), -EINVAL);
    b.desc_gpa = DESC;
    b.used_gpa = USED + 2;
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), -EINVAL);
    b.used_gpa = USED;
    ck_assert_int_eq(kvm_virtq_activate(&b, &vm->gm), 0);
}
END_TEST

START_TEST(no_interrupt_flag)
{
    uint16_t *a = kvm_gm_ptr(&vm->gm, AVAIL, 4);
    ck_assert(kvm_virtq_should_notify(&q));
    a[0] = VIRTQ_AVAIL_F_NO_INTERRUPT;
    ck_assert(!kvm_virtq_should_notify(&q));
}
END_TEST

/* ---- transport + virtio-blk ------------------------------------------------------------ */

static char base_path[64], over_path[64];

static struct virtio_dev *make_blk(bool ro)
{
    snprintf(base_path, sizeof base_path, "/tmp/al-vblk-base-%d", getpid());
    snprintf(over_path, sizeof over_path, "/tmp/al-vblk-over-%d", getpid());
    int fd = open(base_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    uint8_t sector[512];
    for (int s = 0; s < 16; s++) {
        memset(sector, 'A' + s, sizeof sector);
        ck_assert_int_eq(write(fd, sector, 512), 512);
    }
    close(fd);
    vm->cfg.disk = base_path;
    vm->cfg.disk_overlay = ro ? NULL : over_path;
    vm->cfg.disk_readonly = ro;
    struct al_error err = {0};
    struct virtio_dev *d = kvm_vblk_create(vm, 0, 5, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    return d;
}

static void drop_blk(struct virtio_dev *d)
{
    kvm_vblk_destroy(d);
    unlink(base_path);
    unlink(over_path);
}

struct blk_hdr {
    uint32_t type, reserved;
    uint64_t sector;
};

/* Queues one request: header at DATA, data at DATA+0x100 (len), status at DATA+0x80. */
static uint8_t blk_request(struct virtio_dev *d, uint32_t type, uint64_t sector, uint32_t len,
                           uint16_t head)
{
    struct blk_hdr *h = kvm_gm_ptr(&vm->gm, DATA, sizeof *h);
    h->type = type;
    h->sector = sector;
    uint8_t *st = kvm_gm_ptr(&vm->gm, DATA + 0x80, 1);
    *st = 0xee;
    uint16_t data_flags = VIRTQ_DESC_F_NEXT | (type == 0 ? VIRTQ_DESC_F_WRITE : 0);
    vqd_desc(vm, DESC, head, DATA, 16, VIRTQ_DESC_F_NEXT, (uint16_t)(head + 1));
    vqd_desc(vm, DESC, (uint16_t)(head + 1), DATA + 0x100, len, data_flags, (uint16_t)(head + 2));
    vqd_desc(vm, DESC, (uint16_t)(head + 2), DATA + 0x80, 1, VIRTQ_DESC_F_WRITE, 0);
    vqd_avail(vm, AVAIL, QSZ, head);
    vqd_w(d, 0x50, 0); /* QueueNotify */
    return *st;
}

START_TEST(transport_negotiation)
{
    struct virtio_dev *d = make_blk(false);
    ck_assert_uint_eq(vqd_r(d, 0x0), 0x74726976);
    ck_assert_uint_eq(vqd_r(d, 0x4), 2);
    ck_assert_uint_eq(vqd_r(d, 0x8), VIRTIO_ID_BLOCK);
    vqd_w(d, 0x14, 1);
    ck_assert_uint_eq(vqd_r(d, 0x10), 1); /* VERSION_1 in the high word */
    /* capacity in config space, read byte-wise and beyond the end */
    uint8_t b[8];
    kvm_virtio_mmio_read(d, 0x100, b, 8);
    uint64_t cap;
    memcpy(&cap, b, 8);
    ck_assert_uint_eq(cap, 16);
    kvm_virtio_mmio_read(d, 0x100 + 4000, b, 4);
    ck_assert_uint_eq(b[0], 0);
    /* a driver that does not accept VERSION_1 does not get FEATURES_OK */
    vqd_w(d, 0x70, 0);
    vqd_w(d, 0x70, 3);
    vqd_w(d, 0x70, 0xb);
    ck_assert_uint_eq(vqd_r(d, 0x70) & 8, 0);
    /* nor one that accepts a feature we never offered */
    vqd_w(d, 0x70, 0);
    vqd_w(d, 0x70, 3);
    vqd_w(d, 0x24, 0);
    vqd_w(d, 0x20, 1u << 28);
    vqd_w(d, 0x24, 1);
    vqd_w(d, 0x20, 1);
    vqd_w(d, 0x70, 0xb);
    ck_assert_uint_eq(vqd_r(d, 0x70) & 8, 0);
    /* a queue whose rings lie outside RAM is not made ready: NEEDS_RESET */
    uint32_t st = vqd_setup(d, 0, QSZ, MEM + 0x1000, AVAIL, USED, 0);
    ck_assert(st & VIRTIO_STATUS_NEEDS_RESET);
    vqd_w(d, 0x30, 0);
    ck_assert_uint_eq(vqd_r(d, 0x44), 0);
    /* a good setup */
    st = vqd_setup(d, 0, QSZ, DESC, AVAIL, USED, 0);
    ck_assert_uint_eq(st, 0xf);
    ck_assert_uint_eq(vqd_r(d, 0x44), 1);
    /* queue registers cannot change while ready */
    vqd_w(d, 0x80, 0x5000);
    ck_assert_uint_eq(d->vq[0].desc_gpa, DESC);
    /* selecting a queue that does not exist reads as absent */
    vqd_w(d, 0x30, 7);
    ck_assert_uint_eq(vqd_r(d, 0x34), 0);
    /* odd-sized register accesses are ignored */
    uint8_t one = 0;
    kvm_virtio_mmio_write(d, 0x70, &one, 1);
    ck_assert_uint_eq(vqd_r(d, 0x70), 0xf);
    drop_blk(d);
}
END_TEST

START_TEST(blk_read_write_cow)
{
    struct virtio_dev *d = make_blk(false);
    ck_assert_uint_eq(vqd_setup(d, 0, QSZ, DESC, AVAIL, USED, 0), 0xf);
    uint8_t *data = kvm_gm_ptr(&vm->gm, DATA + 0x100, 2048);
    ck_assert_uint_eq(blk_request(d, 0, 2, 1024, 0), 0); /* read sectors 2,3 */
    ck_assert_uint_eq(data[0], 'C');
    ck_assert_uint_eq(data[1023], 'D');
    memset(data, 'z', 512);
    ck_assert_uint_eq(blk_request(d, 1, 3, 512, 3), 0); /* write sector 3 */
    memset(data, 0, 2048);
    ck_assert_uint_eq(blk_request(d, 0, 2, 1536, 0), 0); /* read 2,3,4: base, overlay, base */
    ck_assert_uint_eq(data[0], 'C');
    ck_assert_uint_eq(data[512], 'z');
    ck_assert_uint_eq(data[1024], 'E');
    /* the base image is untouched */
    int fd = open(base_path, O_RDONLY);
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, 3 * 512), 1);
    ck_assert_uint_eq(c, 'D');
    close(fd);
    /* out of range, partial sectors, unknown types */
    ck_assert_uint_eq(blk_request(d, 0, 15, 1024, 3), 1); /* IOERR: past the end */
    ck_assert_uint_eq(blk_request(d, 0, UINT64_MAX, 512, 0), 1);
    ck_assert_uint_eq(blk_request(d, 1, 0, 100, 3), 1);  /* not a multiple of 512 */
    ck_assert_uint_eq(blk_request(d, 77, 0, 512, 0), 2); /* UNSUPP */
    ck_assert_uint_eq(blk_request(d, 4, 0, 512, 3), 0);  /* FLUSH */
    drop_blk(d);
}
END_TEST

START_TEST(blk_readonly)
{
    struct virtio_dev *d = make_blk(true);
    vqd_w(d, 0x14, 0);
    ck_assert(vqd_r(d, 0x10) & (1u << 5)); /* VIRTIO_BLK_F_RO offered */
    ck_assert_uint_eq(vqd_setup(d, 0, QSZ, DESC, AVAIL, USED, 1u << 5), 0xf);
    ck_assert_uint_eq(blk_request(d, 1, 0, 512, 0), 1); /* write refused */
    ck_assert_uint_eq(blk_request(d, 0, 0, 512, 3), 0);
    drop_blk(d);
}
END_TEST

START_TEST(rng_fills_buffers)
{
    struct al_error err = {0};
    struct virtio_dev *d = kvm_vrng_create(vm, 0, 8, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    ck_assert_uint_eq(vqd_r(d, 0x8), VIRTIO_ID_RNG);
    ck_assert_uint_eq(vqd_setup(d, 0, QSZ, DESC, AVAIL, USED, 0), 0xf);
    vqd_desc(vm, DESC, 0, DATA, 64, VIRTQ_DESC_F_WRITE, 0);
    vqd_desc(vm, DESC, 1, DATA + 0x100, 16, 0, 0); /* readable: nothing written */
    vqd_desc(vm, DESC, 2, DATA + 0x200, 100000, VIRTQ_DESC_F_WRITE, 0); /* capped */
    vqd_avail(vm, AVAIL, QSZ, 0);
    vqd_avail(vm, AVAIL, QSZ, 1);
    vqd_avail(vm, AVAIL, QSZ, 2);
    vqd_w(d, 0x50, 0);
    ck_assert_uint_eq(vqd_used_idx(vm, USED), 3);
    uint32_t id, len;
    vqd_used_elem(vm, USED, QSZ, 0, &id, &len);
    ck_assert_uint_eq(len, 64);
    vqd_used_elem(vm, USED, QSZ, 1, &id, &len);
    ck_assert_uint_eq(len, 0);
    vqd_used_elem(vm, USED, QSZ, 2, &id, &len);
    ck_assert_uint_eq(len, 4096);
    int nonzero = 0;
    for (int i = 0; i < 64; i++)
        nonzero += vm->gm.base[DATA + i] != 0;
    ck_assert_int_gt(nonzero, 32);
    kvm_vrng_destroy(d);
}
END_TEST

START_TEST(iov_slice_bounds)
{
    uint8_t a[10], b[20];
    struct iovec v[2] = {{a, 10}, {b, 20}}, out[4];
    ck_assert_int_eq(kvm_iov_slice(v, 2, 5, 10, out, 4), 2);
    ck_assert_ptr_eq(out[0].iov_base, a + 5);
    ck_assert_uint_eq(out[0].iov_len, 5);
    ck_assert_uint_eq(out[1].iov_len, 5);
    ck_assert_int_eq(kvm_iov_slice(v, 2, 25, 10, out, 4), -1); /* runs past the end */
    ck_assert_int_eq(kvm_iov_slice(v, 2, 0, 30, out, 1), -1);  /* does not fit in max */
    ck_assert_int_eq(kvm_iov_slice(v, 2, 30, 0, out, 4), 0);
}
END_TEST

static Suite *virtq_suite(void)
{
    Suite *s = suite_create("vmm_kvm_virtq");
    TCase *tc = tcase_create("virtq");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pop_simple_chain);
    tcase_add_test(tc, pop_rejects_loops);
    tcase_add_test(tc, pop_rejects_bad_buffers);
    tcase_add_test(tc, avail_index_jump_breaks_queue);
    tcase_add_test(tc, activate_checks_layout);
    tcase_add_test(tc, no_interrupt_flag);
    tcase_add_test(tc, transport_negotiation);
    tcase_add_test(tc, blk_read_write_cow);
    tcase_add_test(tc, blk_readonly);
    tcase_add_test(tc, rng_fills_buffers);
    tcase_add_test(tc, iov_slice_bounds);
    suite_add_tcase(s, tc);
    return s;
}

AL_SUITE_MAIN(virtq_suite)
