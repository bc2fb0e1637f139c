/* vmm/kvm/virtio_blk: virtio-blk over a copy-on-write disk (virtio 1.2, section 5.2).
 *
 * Owns: request parsing (header, data, status byte, each located by byte offset in the
 * chain, whatever the guest's descriptor framing), the bounds of every request (sector
 * range, data a multiple of 512, the status byte present and writable), and the answers:
 * OK, IOERR (I/O failure or out of range) or UNSUPP. Requests run synchronously on the
 * device thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/log.h"
#include "vmm/kvm/devices_int.h"

#define VIRTIO_BLK_F_SEG_MAX  2
#define VIRTIO_BLK_F_RO       5
#define VIRTIO_BLK_F_BLK_SIZE 6
#define VIRTIO_BLK_F_FLUSH    9

#define VIRTIO_BLK_T_IN     0
#define VIRTIO_BLK_T_OUT    1
#define VIRTIO_BLK_T_FLUSH  4
#define VIRTIO_BLK_T_GET_ID 8

#define VIRTIO_BLK_S_OK     0
#define VIRTIO_BLK_S_IOERR  1
#define VIRTIO_BLK_S_UNSUPP 2

struct virtio_blk_config {
    uint64_t capacity;
    uint32_t size_max;
    uint32_t seg_max;
    uint16_t cylinders;
    uint8_t heads;
    uint8_t sectors;
    uint32_t blk_size;
} __attribute__((packed));

struct vblk {
    struct virtio_dev dev;
    struct disk disk;
    struct virtio_blk_config cfg;
    uint64_t requests;
};

static void vblk__config_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
    struct vblk *b = d->priv;
    kvm_virtio_config_copy(&b->cfg, sizeof b->cfg, off, data, len);
}

/* Handles one chain; returns the number of bytes written into the guest's buffers. */
static uint32_t vblk__request(struct vblk *b, const struct virtq_chain *c)
{
    struct {
        uint32_t type;
        uint32_t reserved;
        uint64_t sector;
    } hdr;
    if (c->n_in == 0 || c->in_len == 0)
        return 0; /* nowhere to put the status: drop */
    uint8_t status = VIRTIO_BLK_S_IOERR;
    uint64_t data_in = c->in_len - 1; /* writable bytes before the status byte */
    uint32_t written = 0;
    struct iovec src[VIRTQ_MAX_SEGS], v[VIRTQ_MAX_SEGS];

    if (kvm_virtq_chain_read(c, 0, &hdr, sizeof hdr) != sizeof hdr)
        goto done;
    switch (hdr.type) {
    case VIRTIO_BLK_T_IN: {
        for (unsigned i = 0; i < c->n_in; i++)
            src[i] = (struct iovec){c->seg[c->n_out + i].p, c->seg[c->n_out + i].len};
        int n = kvm_iov_slice(src, c->n_in, 0, data_in, v, VIRTQ_MAX_SEGS);
        if (n < 0 || data_in % DISK_SECTOR)
            goto done;
        if (kvm_disk_read(&b->disk, hdr.sector, v, n, data_in) == 0) {
            status = VIRTIO_BLK_S_OK;
            written = (uint32_t)data_in;
        }
        break;
    }
    case VIRTIO_BLK_T_OUT: {
        uint64_t data_out = c->out_len - sizeof hdr;
        for (unsigned i = 0; i < c->n_out; i++)
            src[i] = (struct iovec){c->seg[i].p, c->seg[i].len};
        int n = kvm_iov_slice(src, c->n_out, sizeof hdr, data_out, v, VIRTQ_MAX_SEGS);
        if (n < 0 || data_out % DISK_SECTOR)
            goto done;
        if (kvm_disk_write(&b->disk, hdr.sector, v, n, data_out) == 0)
            status = VIRTIO_BLK_S_OK;
        break;
    }
    case VIRTIO_BLK_T_FLUSH:
        status = kvm_disk_flush(&b->disk) == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
        break;
    case VIRTIO_BLK_T_GET_ID: {
        char id[20] = "airlock-root";
        uint64_t n = data_in < sizeof id ? data_in : sizeof id;
        written = (uint32_t)kvm_virtq_chain_write(c, 0, id, n);
        status = VIRTIO_BLK_S_OK;
        break;
    }
    default:
        status = VIRTIO_BLK_S_UNSUPP;
        break;
    }
done:
    kvm_virtq_chain_write(c, c->in_len - 1, &status, 1);
    return written + 1;
}

static void vblk__notify(struct virtio_dev *d, int qi)
{
    struct vblk *b = d->priv;
    struct virtq *q = &d->vq[qi];
    static __thread struct virtq_chain c;
    int rc, done = 0;
    while ((rc = kvm_virtq_pop(q, &d->vm->gm, &c)) != 0) {
        if (rc < 0) {
            kvm_virtio_dev_bad_chain(d, qi, rc == -EIO ? "queue broken" : "bad descriptor chain");
            if (rc == -EIO)
                break;
            done++;
            continue;
        }
        uint32_t len = vblk__request(b, &c);
        kvm_virtq_push(q, c.head, len);
        b->requests++;
        done++;
    }
    if (done)
        kvm_virtio_dev_used(d, qi);
}

static const struct virtio_dev_ops vblk__ops = {
    .name = "blk",
    .device_id = VIRTIO_ID_BLOCK,
    .nqueues = 1,
    .config_read = vblk__config_read,
    .notify = vblk__notify,
};

struct virtio_dev *kvm_vblk_create(struct vmm_kvm *vm, uint64_t base, uint32_t irq,
                                   struct al_error *err)
{
    struct vblk *b = calloc(1, sizeof *b);
    if (!b) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    const char *overlay = vm->cfg.disk_readonly ? NULL : vm->cfg.disk_overlay;
    if (!vm->cfg.disk_readonly && !overlay) {
        al_error_set(err, -EINVAL,
                     "a writable disk needs an overlay file (--overlay) for its writes");
        free(b);
        return NULL;
    }
    if (kvm_disk_open(&b->disk, vm->cfg.disk, overlay, err) < 0) {
        free(b);
        return NULL;
    }
    b->cfg.capacity = b->disk.sectors;
    b->cfg.seg_max = VIRTQ_MAX_SEGS - 2;
    b->cfg.blk_size = DISK_SECTOR;
    uint64_t features = (1ull << VIRTIO_BLK_F_SEG_MAX) | (1ull << VIRTIO_BLK_F_BLK_SIZE) |
                        (1ull << VIRTIO_BLK_F_FLUSH);
    if (b->disk.readonly)
        features |= 1ull << VIRTIO_BLK_F_RO;
    if (kvm_virtio_dev_init(
            &b->dev, vm,
            &(struct virtio_dev_opts){
                .ops = &vblk__ops, .priv = b, .features = features, .base = base, .irq = irq},
            err) < 0) {
        kvm_vblk_destroy(&b->dev);
        return NULL;
    }
    return &b->dev;
}

void kvm_vblk_destroy(struct virtio_dev *d)
{
    if (!d)
        return;
    struct vblk *b = d->priv;
    kvm_virtio_dev_free(d);
    kvm_disk_close(&b->disk);
    free(b);
}

int kvm_vblk_save(struct virtio_dev *d, const char *dir, const uint8_t **bitmap, size_t *len,
                  struct al_error *err)
{
    struct vblk *b = d->priv;
    *bitmap = b->disk.bitmap;
    *len = b->disk.bitmap ? (b->disk.sectors + 7) / 8 : 0;
    if (b->disk.over_fd < 0)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/disk.overlay", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", path, strerror(errno));
    int rc = kvm_disk_copy_sparse(b->disk.over_fd, fd, b->disk.sectors * DISK_SECTOR);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc < 0)
        return al_error_set(err, rc, "cannot save the disk overlay to %s: %s", path, strerror(-rc));
    return 0;
}

int kvm_vblk_load(struct virtio_dev *d, const char *dir, const uint8_t *bitmap, size_t len,
                  struct al_error *err)
{
    struct vblk *b = d->priv;
    size_t want = b->disk.bitmap ? (b->disk.sectors + 7) / 8 : 0;
    if (len != want)
        return al_error_set(err, -EINVAL,
                            "snapshot disk has %zu bitmap bytes, this disk needs %zu: was the "
                            "snapshot taken with another root image?",
                            len, want);
    if (!want)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/disk.overlay", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    int rc = kvm_disk_copy_sparse(fd, b->disk.over_fd, b->disk.sectors * DISK_SECTOR);
    close(fd);
    if (rc < 0)
        return al_error_set(err, rc, "cannot restore the disk overlay from %s: %s", path,
                            strerror(-rc));
    memcpy(b->disk.bitmap, bitmap, len);
    return 0;
}
