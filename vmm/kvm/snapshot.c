/* vmm/kvm/snapshot: snapshot and restore of a VM (see snapshot.h). */
#include "vmm/kvm/snapshot.h"
#include "vmm/kvm/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/devices_int.h"
#include "vmm/kvm/vm.h"

enum {
    SNAP_VCPU_REGS = 1,
    SNAP_VCPU_SREGS,
    SNAP_VCPU_XSAVE,
    SNAP_VCPU_XCRS,
    SNAP_VCPU_DEBUGREGS,
    SNAP_VCPU_LAPIC,
    SNAP_VCPU_MSRS,
    SNAP_VCPU_EVENTS,
    SNAP_VCPU_MP_STATE,
    SNAP_IRQCHIP = 20,
    SNAP_PIT,
    SNAP_CLOCK,
    SNAP_SERIAL,
    SNAP_VIRTIO = 30, /* index = device slot: 0 blk, 1 net, 2 vsock, 3 rng */
    SNAP_BLK_BITMAP,
};

struct snap_hdr {
    char magic[8];
    uint32_t version;
    uint32_t nvcpus;
    uint64_t mem_bytes;
} __attribute__((packed));

struct snap_sec {
    uint32_t tag;
    uint32_t index;
    uint64_t len;
} __attribute__((packed));

struct snap_out {
    uint8_t *data;
    size_t len, cap;
    int err;
};

static void snap__add(struct snap_out *o, uint32_t tag, uint32_t index, const void *p, size_t len)
{
    size_t need = o->len + sizeof(struct snap_sec) + len;
    if (o->err)
        return;
    if (need > SNAP_MAX_STATE) {
        o->err = -E2BIG;
        return;
    }
    if (need > o->cap) {
        size_t cap = o->cap ? o->cap : 65536;
        while (cap < need)
            cap *= 2;
        uint8_t *n = realloc(o->data, cap);
        if (!n) {
            o->err = -ENOMEM;
            return;
        }
        o->data = n;
        o->cap = cap;
    }
    struct snap_sec s = {.tag = tag, .index = index, .len = len};
    memcpy(o->data + o->len, &s, sizeof s);
    memcpy(o->data + o->len + sizeof s, p, len);
    o->len = need;
}

/* ---- saving ------------------------------------------------------------------------------ */

static int snap__msr_list(struct vmm_kvm *vm, struct kvm_msr_list **out)
{
    struct kvm_msr_list probe = {.nmsrs = 0};
    if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
        return -errno;
    struct kvm_msr_list *l = calloc(1, sizeof *l + probe.nmsrs * sizeof(uint32_t));
    if (!l)
        return -ENOMEM;
    l->nmsrs = probe.nmsrs;
    if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, l) < 0) {
        free(l);
        return -errno;
    }
    *out = l;
    return 0;
}

static int snap__save_vcpu(struct vmm_kvm *vm, struct vcpu *c, const struct kvm_msr_list *ml,
                           struct snap_out *o, struct al_error *err)
{
    uint32_t i = (uint32_t)c->index;
#define SAVE(ioc, type, tag)                                                               \
    do {                                                                                   \
        type v;                                                                            \
        memset(&v, 0, sizeof v);                                                           \
        if (ioctl(c->fd, ioc, &v) < 0)                                                     \
            return al_error_set(err, -errno, "vCPU %u: " #ioc ": %s", i, strerror(errno)); \
        snap__add(o, tag, i, &v, sizeof v);                                                \
    } while (0)
    SAVE(KVM_GET_REGS, struct kvm_regs, SNAP_VCPU_REGS);
    SAVE(KVM_GET_SREGS, struct kvm_sregs, SNAP_VCPU_SREGS);
    SAVE(KVM_GET_XSAVE, struct kvm_xsave, SNAP_VCPU_XSAVE);
    SAVE(KVM_GET_XCRS, struct kvm_xcrs, SNAP_VCPU_XCRS);
    SAVE(KVM_GET_DEBUGREGS, struct kvm_debugregs, SNAP_VCPU_DEBUGREGS);
    SAVE(KVM_GET_LAPIC, struct kvm_lapic_state, SNAP_VCPU_LAPIC);
    SAVE(KVM_GET_VCPU_EVENTS, struct kvm_vcpu_events, SNAP_VCPU_EVENTS);
    SAVE(KVM_GET_MP_STATE, struct kvm_mp_state, SNAP_VCPU_MP_STATE);
#undef SAVE
    /* Every MSR KVM lists that can be read; one that cannot is skipped. */
    size_t n = ml->nmsrs;
    struct kvm_msrs *m = calloc(1, sizeof *m + n * sizeof(struct kvm_msr_entry));
    if (!m)
        return al_error_set(err, -ENOMEM, "out of memory");
    uint32_t got = 0;
    for (size_t k = 0; k < n;) {
        uint32_t batch = (uint32_t)(n - k);
        struct kvm_msrs *b = calloc(1, sizeof *b + batch * sizeof(struct kvm_msr_entry));
        if (!b) {
            free(m);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        b->nmsrs = batch;
        for (uint32_t j = 0; j < batch; j++)
            b->entries[j].index = ml->indices[k + j];
        int r = ioctl(c->fd, KVM_GET_MSRS, b);
        if (r < 0) {
            free(b);
            free(m);
            return al_error_set(err, -errno, "vCPU %u: KVM_GET_MSRS: %s", i, strerror(errno));
        }
        memcpy(&m->entries[got], b->entries, (size_t)r * sizeof(struct kvm_msr_entry));
        got += (uint32_t)r;
        k += (size_t)r + 1; /* skip the one that failed (if any) */
        free(b);
    }
    m->nmsrs = got;
    snap__add(o, SNAP_VCPU_MSRS, i, m, sizeof *m + got * sizeof(struct kvm_msr_entry));
    free(m);
    return 0;
}

/* Writes guest RAM to path, sparse: only ranges with data (memfd: SEEK_DATA; a restored
 * VM's private mapping: pages that are not all zero). */
/* Guest memory of a restored VM: the file it was restored from (the pages nobody wrote
 * since), then every page the guest wrote (a private copy: in the pagemap, present or
 * swapped and not file-backed). Untouched pages are never faulted in. */
static int snap__save_restored(struct vmm_kvm *vm, int fd, uint64_t size)
{
    int rc = kvm_disk_copy_sparse(vm->mem_fd, fd, size);
    if (rc < 0)
        return rc;
    enum { CHUNK = 4096 };
    uint64_t *pm = malloc(CHUNK * sizeof *pm);
    if (!pm)
        return -ENOMEM;
    uint64_t pages = size / 4096;
    uintptr_t base = (uintptr_t)vm->gm.base;
    for (uint64_t p0 = 0; p0 < pages && rc == 0; p0 += CHUNK) {
        uint64_t n = pages - p0 < CHUNK ? pages - p0 : CHUNK;
        off_t at = (off_t)((base / 4096 + p0) * sizeof *pm);
        if (pread(vm->pagemap_fd, pm, n * sizeof *pm, at) != (ssize_t)(n * sizeof *pm)) {
            rc = -EIO;
            break;
        }
        for (uint64_t i = 0; i < n; i++) {
            bool resident = pm[i] & (3ull << 62); /* present or swapped */
            bool file = pm[i] & (1ull << 61);
            if (!resident || file)
                continue;
            uint64_t off = (p0 + i) * 4096;
            if (pwrite(fd, vm->gm.base + off, 4096, (off_t)off) != 4096) {
                rc = -EIO;
                break;
            }
        }
    }
    free(pm);
    return rc;
}

static int snap__save_memory(struct vmm_kvm *vm, const char *path, struct al_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", path, strerror(errno));
    int rc = 0;
    uint64_t size = vm->gm.total;
    if (ftruncate(fd, (off_t)size) < 0) {
        rc = -errno;
        goto out;
    }
    if (!vm->restored) {
        off_t pos = 0;
        while ((uint64_t)pos < size) {
            off_t data = lseek(vm->mem_fd, pos, SEEK_DATA);
            if (data < 0) {
                if (errno != ENXIO)
                    rc = -errno;
                break;
            }
            off_t hole = lseek(vm->mem_fd, data, SEEK_HOLE);
            if (hole < 0 || (uint64_t)hole > size)
                hole = (off_t)size;
            if (pwrite(fd, vm->gm.base + data, (size_t)(hole - data), data) != hole - data) {
                rc = -EIO;
                break;
            }
            pos = hole;
        }
    } else if (vm->pagemap_fd >= 0) {
        rc = snap__save_restored(vm, fd, size);
    } else {
        static const uint8_t zero[4096];
        for (uint64_t off = 0; off < size; off += 4096) {
            if (memcmp(vm->gm.base + off, zero, 4096) == 0)
                continue;
            if (pwrite(fd, vm->gm.base + off, 4096, (off_t)off) != 4096) {
                rc = -EIO;
                break;
            }
        }
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
out:
    close(fd);
    if (rc < 0)
        return al_error_set(err, rc, "cannot write guest memory to %s: %s", path, strerror(-rc));
    return 0;
}

#define SNAP_SLOTS 4

static struct virtio_dev *snap__slot(struct vmm_kvm *vm, int slot)
{
    switch (slot) {
    case 0:
        return vm->blk;
    case 1:
        return vm->net;
    case 2:
        return vm->vsock;
    default:
        return vm->rng;
    }
}

int vmm_kvm_snapshot(struct vmm_kvm *vm, const char *dir, struct al_error *err)
{
    uint64_t t0 = al_now_ns();
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return al_error_set(err, -errno, "cannot create snapshot directory %s: %s", dir,
                            strerror(errno));
    bool was_paused = vm->pause_req;
    int rc = kvm_vm_pause(vm);
    if (rc < 0)
        return al_error_set(err, rc, "the VM ended before it could be paused");
    /* Hold every device still: the device thread must not touch guest memory or queue
     * state while we copy them. */
    for (int slot = 0; slot < SNAP_SLOTS; slot++)
        if (snap__slot(vm, slot))
            pthread_mutex_lock(&snap__slot(vm, slot)->lock);

    struct snap_out o = {0};
    struct snap_hdr h = {
        .version = SNAP_VERSION, .nvcpus = (uint32_t)vm->nvcpus, .mem_bytes = vm->gm.total};
    memcpy(h.magic, SNAP_MAGIC, 8);
    struct kvm_msr_list *ml = NULL;
    rc = snap__msr_list(vm, &ml);
    if (rc < 0) {
        al_error_set(err, rc, "KVM_GET_MSR_INDEX_LIST: %s", strerror(-rc));
        goto out;
    }
    for (int i = 0; i < vm->nvcpus && rc == 0; i++)
        rc = snap__save_vcpu(vm, &vm->vcpus[i], ml, &o, err);
    if (rc < 0)
        goto out;
    for (uint32_t chip = 0; chip < 3; chip++) {
        struct kvm_irqchip ic = {.chip_id = chip};
        if (ioctl(vm->vm_fd, KVM_GET_IRQCHIP, &ic) < 0) {
            rc = al_error_set(err, -errno, "KVM_GET_IRQCHIP %u: %s", chip, strerror(errno));
            goto out;
        }
        snap__add(&o, SNAP_IRQCHIP, chip, &ic, sizeof ic);
    }
    struct kvm_pit_state2 pit;
    if (ioctl(vm->vm_fd, KVM_GET_PIT2, &pit) < 0) {
        rc = al_error_set(err, -errno, "KVM_GET_PIT2: %s", strerror(errno));
        goto out;
    }
    snap__add(&o, SNAP_PIT, 0, &pit, sizeof pit);
    struct kvm_clock_data clk;
    memset(&clk, 0, sizeof clk);
    if (ioctl(vm->vm_fd, KVM_GET_CLOCK, &clk) < 0) {
        rc = al_error_set(err, -errno, "KVM_GET_CLOCK: %s", strerror(errno));
        goto out;
    }
    snap__add(&o, SNAP_CLOCK, 0, &clk, sizeof clk);
    struct serial_snap ss;
    kvm_serial_save(vm->serial, &ss);
    snap__add(&o, SNAP_SERIAL, 0, &ss, sizeof ss);
    for (int slot = 0; slot < SNAP_SLOTS; slot++) {
        struct virtio_dev *d = snap__slot(vm, slot);
        if (!d)
            continue;
        struct virtio_snap vs;
        kvm_virtio_dev_save(d, &vs);
        snap__add(&o, SNAP_VIRTIO, (uint32_t)slot, &vs, sizeof vs);
    }
    if (vm->blk) {
        const uint8_t *bm;
        size_t bl;
        rc = kvm_vblk_save(vm->blk, dir, &bm, &bl, err);
        if (rc < 0)
            goto out;
        snap__add(&o, SNAP_BLK_BITMAP, 0, bm, bl);
    }
    if (o.err) {
        rc = al_error_set(err, o.err, "snapshot state: %s", strerror(-o.err));
        goto out;
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/memory", dir);
    rc = snap__save_memory(vm, path, err);
    if (rc < 0)
        goto out;
    /* vm.state last and atomically: its presence means the snapshot is complete. */
    size_t total = sizeof h + o.len;
    uint8_t *file = malloc(total);
    if (!file) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    memcpy(file, &h, sizeof h);
    memcpy(file + sizeof h, o.data, o.len);
    snprintf(path, sizeof path, "%s/vm.state", dir);
    rc = al_write_file_atomic(path, file, total, 0600, err);
    free(file);
out:
    free(ml);
    free(o.data);
    for (int slot = SNAP_SLOTS - 1; slot >= 0; slot--)
        if (snap__slot(vm, slot))
            pthread_mutex_unlock(&snap__slot(vm, slot)->lock);
    if (!was_paused)
        kvm_vm_resume(vm);
    if (rc == 0)
        al_info("snapshot of %llu MiB guest written to %s in %.1f ms",
                (unsigned long long)(vm->gm.total >> 20), dir, (double)(al_now_ns() - t0) / 1e6);
    return rc;
}

/* ---- loading ----------------------------------------------------------------------------- */

int kvm_snap_read(const char *dir, struct snap_state *st, struct al_error *err)
{
    memset(st, 0, sizeof *st);
    char path[4096];
    snprintf(path, sizeof path, "%s/vm.state", dir);
    char *data = NULL;
    size_t len = 0;
    int rc = al_read_file(path, SNAP_MAX_STATE, &data, &len, err);
    if (rc < 0)
        return al_error_prefix(err, "snapshot %s", dir);
    struct snap_hdr h;
    if (len < sizeof h) {
        free(data);
        return al_error_set(err, -EINVAL, "%s is truncated", path);
    }
    memcpy(&h, data, sizeof h);
    if (memcmp(h.magic, SNAP_MAGIC, 8) != 0 || h.version != SNAP_VERSION) {
        free(data);
        return al_error_set(err, -EINVAL, "%s is not an airlock KVM snapshot of version %d", path,
                            SNAP_VERSION);
    }
    if (h.nvcpus < 1 || h.nvcpus > VMM_KVM_MAX_VCPUS || h.mem_bytes < (32ull << 20) ||
        h.mem_bytes > (256ull << 30) || (h.mem_bytes & 0xfff)) {
        free(data);
        return al_error_set(err, -EINVAL, "%s: implausible header (%u vCPUs, %llu bytes)", path,
                            h.nvcpus, (unsigned long long)h.mem_bytes);
    }
    /* Section framing must cover the file exactly. */
    size_t off = sizeof h;
    while (off < len) {
        struct snap_sec s;
        if (len - off < sizeof s) {
            free(data);
            return al_error_set(err, -EINVAL, "%s: truncated section header", path);
        }
        memcpy(&s, data + off, sizeof s);
        if (s.len > len - off - sizeof s) {
            free(data);
            return al_error_set(err, -EINVAL, "%s: section %u overruns the file", path, s.tag);
        }
        off += sizeof s + s.len;
    }
    st->data = (uint8_t *)data;
    st->len = len;
    st->nvcpus = h.nvcpus;
    st->mem_bytes = h.mem_bytes;
    return 0;
}

void kvm_snap_free(struct snap_state *st)
{
    free(st->data);
    st->data = NULL;
}

const void *kvm_snap_find(const struct snap_state *st, uint32_t tag, uint32_t index, size_t len,
                          size_t *got)
{
    size_t off = sizeof(struct snap_hdr);
    while (off + sizeof(struct snap_sec) <= st->len) {
        struct snap_sec s;
        memcpy(&s, st->data + off, sizeof s);
        if (s.tag == tag && s.index == index) {
            if (len && s.len != len)
                return NULL;
            if (got)
                *got = s.len;
            return st->data + off + sizeof s;
        }
        off += sizeof s + s.len;
    }
    return NULL;
}

#define SNAP_NEED(var, type, tag, idx, what)                                                  \
    type var;                                                                                 \
    do {                                                                                      \
        const void *p_ = kvm_snap_find(st, tag, idx, sizeof(type), NULL);                     \
        if (!p_)                                                                              \
            return al_error_set(err, -EINVAL, "snapshot lacks %s (or it has the wrong size)", \
                                what);                                                        \
        memcpy(&var, p_, sizeof(type));                                                       \
    } while (0)

int kvm_snap_restore_vcpu(struct vmm_kvm *vm, struct vcpu *c, const struct snap_state *st,
                          struct al_error *err)
{
    uint32_t i = (uint32_t)c->index;
    SNAP_NEED(sregs, struct kvm_sregs, SNAP_VCPU_SREGS, i, "special registers");
    SNAP_NEED(regs, struct kvm_regs, SNAP_VCPU_REGS, i, "registers");
    SNAP_NEED(xsave, struct kvm_xsave, SNAP_VCPU_XSAVE, i, "XSAVE state");
    SNAP_NEED(xcrs, struct kvm_xcrs, SNAP_VCPU_XCRS, i, "XCRs");
    SNAP_NEED(dregs, struct kvm_debugregs, SNAP_VCPU_DEBUGREGS, i, "debug registers");
    SNAP_NEED(lapic, struct kvm_lapic_state, SNAP_VCPU_LAPIC, i, "LAPIC");
    SNAP_NEED(events, struct kvm_vcpu_events, SNAP_VCPU_EVENTS, i, "vCPU events");
    SNAP_NEED(mp, struct kvm_mp_state, SNAP_VCPU_MP_STATE, i, "MP state");
    size_t mlen = 0;
    const void *mraw = kvm_snap_find(st, SNAP_VCPU_MSRS, i, 0, &mlen);
    struct kvm_msrs mhdr;
    if (!mraw || mlen < sizeof mhdr)
        return al_error_set(err, -EINVAL, "snapshot MSRs of vCPU %u are missing", i);
    memcpy(&mhdr, mraw, sizeof mhdr);
    if (mhdr.nmsrs > (mlen - sizeof mhdr) / sizeof(struct kvm_msr_entry))
        return al_error_set(err, -EINVAL, "snapshot MSRs of vCPU %u are malformed", i);
    if (xcrs.nr_xcrs > KVM_MAX_XCRS)
        return al_error_set(err, -EINVAL, "snapshot XCRs of vCPU %u are malformed", i);

#define LOAD(ioc, ptr)                                                                     \
    do {                                                                                   \
        if (ioctl(c->fd, ioc, ptr) < 0)                                                    \
            return al_error_set(err, -errno, "vCPU %u: " #ioc ": %s", i, strerror(errno)); \
    } while (0)
    LOAD(KVM_SET_SREGS, &sregs);
    LOAD(KVM_SET_REGS, &regs);
    LOAD(KVM_SET_XSAVE, &xsave);
    LOAD(KVM_SET_XCRS, &xcrs);
    LOAD(KVM_SET_DEBUGREGS, &dregs);
    LOAD(KVM_SET_LAPIC, &lapic);
    /* MSRs: a copy, since KVM_SET_MSRS wants a writable buffer. */
    struct kvm_msrs *mc = malloc(mlen);
    if (!mc)
        return al_error_set(err, -ENOMEM, "out of memory");
    memcpy(mc, mraw, mlen); /* also aligns it */
    int set = ioctl(c->fd, KVM_SET_MSRS, mc);
    if (set < 0) {
        free(mc);
        return al_error_set(err, -errno, "vCPU %u: KVM_SET_MSRS: %s", i, strerror(errno));
    }
    if ((uint32_t)set < mc->nmsrs)
        al_warn("vCPU %u: KVM refused MSR 0x%x on restore (%d of %u set)", i,
                mc->entries[set].index, set, mc->nmsrs);
    free(mc);
    LOAD(KVM_SET_MP_STATE, &mp);
    LOAD(KVM_SET_VCPU_EVENTS, &events);
#undef LOAD
    return 0;
}

int kvm_snap_restore_vm(struct vmm_kvm *vm, const struct snap_state *st, const char *dir,
                        struct al_error *err)
{
    for (uint32_t chip = 0; chip < 3; chip++) {
        SNAP_NEED(ic, struct kvm_irqchip, SNAP_IRQCHIP, chip, "irqchip state");
        if (ic.chip_id != chip)
            return al_error_set(err, -EINVAL, "snapshot irqchip %u is mislabelled", chip);
        if (ioctl(vm->vm_fd, KVM_SET_IRQCHIP, &ic) < 0)
            return al_error_set(err, -errno, "KVM_SET_IRQCHIP %u: %s", chip, strerror(errno));
    }
    SNAP_NEED(pit, struct kvm_pit_state2, SNAP_PIT, 0, "PIT state");
    if (ioctl(vm->vm_fd, KVM_SET_PIT2, &pit) < 0)
        return al_error_set(err, -errno, "KVM_SET_PIT2: %s", strerror(errno));
    SNAP_NEED(ss, struct serial_snap, SNAP_SERIAL, 0, "serial state");
    kvm_serial_load(vm->serial, &ss);
    for (int slot = 0; slot < SNAP_SLOTS; slot++) {
        struct virtio_dev *d = snap__slot(vm, slot);
        const struct virtio_snap *vs =
            kvm_snap_find(st, SNAP_VIRTIO, (uint32_t)slot, sizeof *vs, NULL);
        if (!d && !vs)
            continue;
        if (!d || !vs)
            return al_error_set(err, -EINVAL,
                                "snapshot and configuration disagree on virtio slot %d (%s): "
                                "restore with the same devices the snapshot had",
                                slot,
                                slot == 0   ? "disk"
                                : slot == 1 ? "network"
                                : slot == 2 ? "vsock"
                                            : "rng");
        struct virtio_snap copy;
        memcpy(&copy, vs, sizeof copy);
        if (slot == 0) {
            size_t bl = 0;
            const uint8_t *bm = kvm_snap_find(st, SNAP_BLK_BITMAP, 0, 0, &bl);
            int rc = kvm_vblk_load(d, dir, bm, bm ? bl : 0, err);
            if (rc < 0)
                return rc;
        }
        int rc = kvm_virtio_dev_load(d, &copy, err);
        if (rc < 0)
            return rc;
    }
    /* kvmclock last, so guest time continues from the moment of the snapshot. */
    SNAP_NEED(clk, struct kvm_clock_data, SNAP_CLOCK, 0, "clock");
    struct kvm_clock_data set = {.clock = clk.clock};
    if (ioctl(vm->vm_fd, KVM_SET_CLOCK, &set) < 0)
        return al_error_set(err, -errno, "KVM_SET_CLOCK: %s", strerror(errno));
    return 0;
}
