/* vmm/kvm/disk: copy-on-write block image (see disk.h). */
#include "vmm/kvm/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISK_MAX_IOV 130

int kvm_iov_slice(const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len,
                  struct iovec *out, int max)
{
    int n = 0;
    for (int i = 0; i < iovcnt && len > 0; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        if (n >= max)
            return -1;
        uint64_t take = iov[i].iov_len - off;
        if (take > len)
            take = len;
        out[n].iov_base = (uint8_t *)iov[i].iov_base + off;
        out[n].iov_len = take;
        n++;
        len -= take;
        off = 0;
    }
    return len ? -1 : n;
}

int kvm_disk_open(struct disk *d, const char *base, const char *overlay, struct al_error *err)
{
    memset(d, 0, sizeof *d);
    d->base_fd = d->over_fd = -1;
    d->base_fd = open(base, O_RDONLY | O_CLOEXEC);
    if (d->base_fd < 0)
        return al_error_set(err, -errno, "cannot open disk image %s: %s", base, strerror(errno));
    struct stat st;
    if (fstat(d->base_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        kvm_disk_close(d);
        return al_error_set(err, -EINVAL, "disk image %s is not a regular file", base);
    }
    if (st.st_size == 0 || st.st_size % DISK_SECTOR) {
        kvm_disk_close(d);
        return al_error_set(err, -EINVAL,
                            "disk image %s is %lld bytes: not a non-zero multiple of %u", base,
                            (long long)st.st_size, DISK_SECTOR);
    }
    d->sectors = (uint64_t)st.st_size / DISK_SECTOR;
    if (!overlay) {
        d->readonly = true;
        return 0;
    }
    d->over_fd = open(overlay, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (d->over_fd < 0) {
        int e = -errno;
        kvm_disk_close(d);
        return al_error_set(err, e, "cannot create overlay %s: %s", overlay, strerror(-e));
    }
    if (ftruncate(d->over_fd, st.st_size) < 0) {
        int e = -errno;
        kvm_disk_close(d);
        return al_error_set(err, e, "cannot size overlay %s: %s", overlay, strerror(-e));
    }
    d->bitmap = calloc((d->sectors + 7) / 8, 1);
    if (!d->bitmap) {
        kvm_disk_close(d);
        return al_error_set(err, -ENOMEM, "out of memory for the overlay bitmap");
    }
    return 0;
}

void kvm_disk_close(struct disk *d)
{
    if (d->base_fd >= 0)
        close(d->base_fd);
    if (d->over_fd >= 0)
        close(d->over_fd);
    free(d->bitmap);
    d->bitmap = NULL;
    d->base_fd = d->over_fd = -1;
}

static bool disk__in_overlay(const struct disk *d, uint64_t s)
{
    return d->bitmap && (d->bitmap[s >> 3] >> (s & 7)) & 1;
}

static int disk__range_ok(const struct disk *d, uint64_t sector, uint64_t len)
{
    if (len % DISK_SECTOR)
        return -EINVAL;
    uint64_t n = len / DISK_SECTOR;
    if (sector > d->sectors || n > d->sectors - sector)
        return -ERANGE;
    return 0;
}

static int disk__xfer(int fd, bool write, const struct iovec *iov, int iovcnt, uint64_t off,
                      uint64_t len)
{
    struct iovec v[DISK_MAX_IOV];
    uint64_t done = 0;
    while (done < len) {
        int n = kvm_iov_slice(iov, iovcnt, done, len - done, v, DISK_MAX_IOV);
        if (n < 0)
            return -EINVAL;
        ssize_t r =
            write ? pwritev(fd, v, n, (off_t)(off + done)) : preadv(fd, v, n, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0) {
            if (write)
                return -EIO;
            /* Reading past a short file: zeros (cannot happen after the size check). */
            return -EIO;
        }
        done += (uint64_t)r;
    }
    return 0;
}

int kvm_disk_read(struct disk *d, uint64_t sector, const struct iovec *iov, int iovcnt,
                  uint64_t len)
{
    int rc = disk__range_ok(d, sector, len);
    if (rc < 0)
        return rc;
    uint64_t n = len / DISK_SECTOR, i = 0;
    while (i < n) {
        bool over = disk__in_overlay(d, sector + i);
        uint64_t j = i + 1;
        while (j < n && disk__in_overlay(d, sector + j) == over)
            j++;
        struct iovec v[DISK_MAX_IOV];
        int vn =
            kvm_iov_slice(iov, iovcnt, i * DISK_SECTOR, (j - i) * DISK_SECTOR, v, DISK_MAX_IOV);
        if (vn < 0)
            return -EINVAL;
        rc = disk__xfer(over ? d->over_fd : d->base_fd, false, v, vn, (sector + i) * DISK_SECTOR,
                        (j - i) * DISK_SECTOR);
        if (rc < 0)
            return rc;
        i = j;
    }
    return 0;
}

int kvm_disk_write(struct disk *d, uint64_t sector, const struct iovec *iov, int iovcnt,
                   uint64_t len)
{
    if (d->readonly)
        return -EROFS;
    int rc = disk__range_ok(d, sector, len);
    if (rc < 0)
        return rc;
    rc = disk__xfer(d->over_fd, true, iov, iovcnt, sector * DISK_SECTOR, len);
    if (rc < 0)
        return rc;
    for (uint64_t s = sector; s < sector + len / DISK_SECTOR; s++)
        d->bitmap[s >> 3] |= (uint8_t)(1u << (s & 7));
    return 0;
}

int kvm_disk_flush(struct disk *d)
{
    if (d->over_fd >= 0 && fdatasync(d->over_fd) < 0)
        return -errno;
    return 0;
}

int kvm_disk_copy_sparse(int src, int dst, uint64_t size)
{
    if (ftruncate(dst, 0) < 0 || ftruncate(dst, (off_t)size) < 0)
        return -errno;
    /* Heap, not thread-local: a static TLS array costs its size in RSS in every thread. */
    enum { BUF = 1 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    bool use_cfr = true;
    off_t pos = 0;
    while ((uint64_t)pos < size) {
        off_t data = lseek(src, pos, SEEK_DATA);
        if (data < 0) {
            if (errno != ENXIO) /* ENXIO: only holes remain */
                rc = -errno;
            break;
        }
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0) {
            rc = -errno;
            break;
        }
        if ((uint64_t)hole > size)
            hole = (off_t)size;
        for (off_t o = data; o < hole && rc == 0;) {
            size_t n = (size_t)(hole - o) < BUF ? (size_t)(hole - o) : BUF;
            /* In the kernel when it can (one copy, no buffer); read + write otherwise. */
            if (use_cfr) {
                off_t in = o, out = o;
                ssize_t c = copy_file_range(src, &in, dst, &out, n, 0);
                if (c > 0) {
                    o += c;
                    continue;
                }
                if (c < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
                    errno != EOPNOTSUPP) {
                    rc = -errno;
                    break;
                }
                use_cfr = false; /* c == 0 (short source) falls back too */
            }
            ssize_t r = pread(src, buf, n, o);
            if (r <= 0) {
                rc = r < 0 ? -errno : -EIO;
                break;
            }
            ssize_t w = pwrite(dst, buf, (size_t)r, o);
            if (w != r) {
                rc = w < 0 ? -errno : -EIO;
                break;
            }
            o += r;
        }
        if (rc < 0)
            break;
        pos = hole;
    }
    free(buf);
    return rc;
}
