/* tests/fuzz/fuzz_virtqueue: hostile guests against the virtqueue code.
 *
 * Input: byte 0 picks the target, byte 1 the queue size (log2), the rest is guest memory
 * (64 KiB; rings at fixed addresses, descriptors and data wherever the input points).
 *   0: raw kvm_virtq_pop/push and the chain copy helpers
 *   1: virtio-blk requests through the transport (a small scratch disk)
 *   2: virtio-vsock packets (transmit and receive queues)
 *   3: register writes: (u16 offset, u32 value) records replayed on a virtio-blk device,
 *      with queue notifications, against guest memory
 * Must never crash, read or write outside guest memory (ASan), or loop without bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vq_driver.h"

#define FZ_MEM   0x10000u
#define FZ_DESC  0x0000ull
#define FZ_AVAIL 0x1000ull
#define FZ_USED  0x2000ull
/* vsock's three queues */
#define FZ_Q(i) (0x3000ull + (i)*0x1000ull)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_disk[64], fz_over[64];

static void fz_make_disk(void)
{
    if (fz_disk[0])
        return;
    snprintf(fz_disk, sizeof fz_disk, "/tmp/al-fuzz-vq-base-%d", getpid());
    snprintf(fz_over, sizeof fz_over, "/tmp/al-fuzz-vq-over-%d", getpid());
    int fd = open(fz_disk, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 64 * 512) < 0)
        abort();
    close(fd);
}

static void fz_cleanup(void)
{
    if (fz_disk[0]) {
        unlink(fz_disk);
        unlink(fz_over);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int registered;
    if (!registered) {
        atexit(fz_cleanup);
        registered = 1;
    }
    if (size < 2)
        return 0;
    uint8_t mode = data[0] % 4;
    uint16_t qsz = (uint16_t)(1u << (data[1] % 9)); /* 1..256 */
    data += 2;
    size -= 2;
    struct vmm_kvm *vm = vqd_fake_vm(FZ_MEM);
    memcpy(vm->gm.base, data, size < FZ_MEM ? size : FZ_MEM);

    if (mode == 0) {
        struct virtq q;
        kvm_virtq_reset(&q);
        q.size = qsz;
        q.desc_gpa = FZ_DESC;
        q.avail_gpa = FZ_AVAIL;
        q.used_gpa = FZ_USED;
        if (kvm_virtq_activate(&q, &vm->gm) == 0) {
            q.ready = true;
            static struct virtq_chain c;
            uint8_t scratch[512];
            for (int i = 0; i < 600; i++) {
                int rc = kvm_virtq_pop(&q, &vm->gm, &c);
                if (rc == 0 || rc == -EIO)
                    break;
                if (rc < 0)
                    continue;
                kvm_virtq_chain_read(&c, i % 7, scratch, sizeof scratch);
                kvm_virtq_chain_write(&c, i % 5, scratch, sizeof scratch);
                kvm_virtq_push(&q, c.head, (uint32_t)c.in_len);
                (void)kvm_virtq_should_notify(&q);
            }
        }
    } else if (mode == 1 || mode == 3) {
        fz_make_disk();
        vm->cfg.disk = fz_disk;
        vm->cfg.disk_overlay = fz_over;
        struct virtio_dev *d = kvm_vblk_create(vm, 0, 5, NULL);
        if (d) {
            if (mode == 1) {
                vqd_setup(d, 0, qsz, FZ_DESC, FZ_AVAIL, FZ_USED, 1u << 9);
                for (int i = 0; i < 4; i++)
                    vqd_w(d, 0x50, 0);
            } else {
                for (size_t off = 0; off + 6 <= size && off < 6 * 256; off += 6) {
                    uint16_t reg;
                    uint32_t val;
                    memcpy(&reg, data + off, 2);
                    memcpy(&val, data + off + 2, 4);
                    vqd_w(d, reg % 0x200, val);
                    uint32_t r = vqd_r(d, (reg * 7u) % 0x200);
                    (void)r;
                }
            }
            kvm_vblk_destroy(d);
        }
    } else {
        vm->cfg.guest_cid = 3;
        struct virtio_dev *d = kvm_vsock_create(vm, 0, 7, NULL);
        if (d) {
            for (int qi = 0; qi < 3; qi++)
                vqd_setup(d, qi, qsz, FZ_Q(qi), FZ_Q(qi) + 0x400, FZ_Q(qi) + 0x800, 0);
            vqd_w(d, 0x50, 1); /* transmit */
            vqd_w(d, 0x50, 0); /* receive */
            vqd_w(d, 0x50, 2); /* event */
            vqd_w(d, 0x50, 1);
            kvm_vsock_destroy(d);
        }
    }
    vqd_free_vm(vm);
    return 0;
}
