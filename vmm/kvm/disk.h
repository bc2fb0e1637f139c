/* vmm/kvm/disk: a block device image with a per-VM copy-on-write overlay.
 *
 * Owns: the read-only base image (a template's root file system image, shared by every
 * sandbox of that template), the sparse overlay file that receives this VM's writes, and
 * the per-sector bitmap saying which sectors live in the overlay. Reads are split into
 * runs served from the base or the overlay; writes go only to the overlay. Requests are
 * bounds-checked against the capacity before any I/O.
 */
#ifndef AIRLOCK_VMM_KVM_DISK_H
#define AIRLOCK_VMM_KVM_DISK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/error.h"

#define DISK_SECTOR 512u

struct disk {
    int base_fd;
    int over_fd; /* -1: read-only disk */
    uint64_t sectors;
    uint8_t *bitmap; /* 1 bit per sector: 1 = in the overlay */
    bool readonly;
};

/* overlay NULL: read-only disk. The overlay is created (or truncated) here. */
int kvm_disk_open(struct disk *d, const char *base, const char *overlay, struct al_error *err);
void kvm_disk_close(struct disk *d);
/* Both return 0 or -errno (-ERANGE beyond the end, -EROFS on a read-only disk). len must be
 * a multiple of DISK_SECTOR. iov describes exactly len bytes. */
int kvm_disk_read(struct disk *d, uint64_t sector, const struct iovec *iov, int iovcnt,
                  uint64_t len);
int kvm_disk_write(struct disk *d, uint64_t sector, const struct iovec *iov, int iovcnt,
                   uint64_t len);
int kvm_disk_flush(struct disk *d);

/* Copies the first `size` bytes of src to dst, leaving holes where src has them (SEEK_DATA/
 * SEEK_HOLE); dst is truncated to size. */
int kvm_disk_copy_sparse(int src, int dst, uint64_t size);

/* kvm_iov_slice: the part [off, off+len) of iov as a new iovec array (at most max entries);
 * returns the count, or -1 if it does not fit in max or iov is shorter. */
int kvm_iov_slice(const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len,
                  struct iovec *out, int max);

#endif
