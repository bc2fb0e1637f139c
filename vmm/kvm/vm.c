/* vmm/kvm/vm: the VM core of the KVM backend.
 *
 * Owns: /dev/kvm and the capability checks, the VM (TSS, in-kernel irqchip and PIT), guest
 * memory (a memfd, mapped shared, so it can be snapshotted), kernel loading, per-vCPU setup
 * (CPUID, MSRs, registers, FPU, LAPIC), the vCPU threads and their KVM_RUN loops, dispatch
 * of port-I/O and MMIO exits to the devices, and the orderly end of the VM (first exit
 * reason wins; every vCPU is kicked out of KVM_RUN with a signal and immediate_exit).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/boot.h"
#include "vmm/kvm/confine.h"
#include "vmm/kvm/devices.h"
#include "vmm/kvm/snapshot.h"
#include "vmm/kvm/vm.h"
#include "vmm/kvm/x86.h"

#define VM_TSS_ADDR          0xfffbd000ull
#define VM_IDENTITY_MAP_ADDR 0xfffbc000ull
#define VM_KICK_SIGNAL       SIGUSR1
#define VM_DEFAULT_CMDLINE                                                                   \
    "console=ttyS0 reboot=k panic=-1 pci=off nomodules i8042.noaux i8042.nomux i8042.nopnp " \
    "i8042.dumbkbd tsc=reliable quiet"

static const struct {
    int cap;
    const char *name;
} vm__required_caps[] = {
    {KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP"},
    {KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY"},
    {KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"},
    {KVM_CAP_PIT2, "KVM_CAP_PIT2"},
    {KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD"},
    {KVM_CAP_IRQFD, "KVM_CAP_IRQFD"},
    {KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID"},
    {KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT"},
    {KVM_CAP_ADJUST_CLOCK, "KVM_CAP_ADJUST_CLOCK"},
    {KVM_CAP_VCPU_EVENTS, "KVM_CAP_VCPU_EVENTS"},
    {KVM_CAP_XSAVE, "KVM_CAP_XSAVE"},
};

const char *vmm_kvm_exit_str(enum vmm_kvm_exit e)
{
    switch (e) {
    case VMM_KVM_EXIT_NONE:
        return "running";
    case VMM_KVM_EXIT_RESET:
        return "guest reset";
    case VMM_KVM_EXIT_POWEROFF:
        return "guest powered off";
    case VMM_KVM_EXIT_STOPPED:
        return "stopped";
    case VMM_KVM_EXIT_ERROR:
        return "error";
    }
    return "?";
}

static int vm__open_kvm(struct al_error *err)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int e = -errno;
        return al_error_set(err, e,
                            "cannot open /dev/kvm: %s (the KVM backend needs hardware "
                            "virtualisation; use the jail backend on this host)",
                            strerror(-e));
    }
    int api = ioctl(fd, KVM_GET_API_VERSION, 0);
    if (api != KVM_API_VERSION) {
        close(fd);
        return al_error_set(err, -ENOTSUP, "/dev/kvm speaks API version %d, airlock needs %d", api,
                            KVM_API_VERSION);
    }
    for (size_t i = 0; i < AL_ARRAY_SIZE(vm__required_caps); i++) {
        if (ioctl(fd, KVM_CHECK_EXTENSION, vm__required_caps[i].cap) <= 0) {
            close(fd);
            return al_error_set(err, -ENOTSUP, "/dev/kvm lacks %s, which the KVM backend needs",
                                vm__required_caps[i].name);
        }
    }
    return fd;
}

int vmm_kvm_check_device(struct al_error *err)
{
    int fd = vm__open_kvm(err);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* The probe's guest: 64-bit code at 0x1000: out 0xf1, al (al = 0x42); hlt. Some hosts offer
 * a /dev/kvm that passes every capability check but cannot run an ordinary guest (e.g. a
 * paravirtual "PVM" KVM that only runs specially built kernels), so the probe runs one. */
struct vm__probe {
    int fd;
    struct kvm_run *run;
    int result; /* 1 = saw the OUT then HLT */
    char why[128];
};

static void vm__kick_handler(int sig);

static void *vm__probe_thread(void *arg)
{
    struct vm__probe *p = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    bool saw_out = false;
    for (int i = 0; i < 16; i++) {
        if (ioctl(p->fd, KVM_RUN, 0) < 0) {
            snprintf(p->why, sizeof p->why, "KVM_RUN: %s", strerror(errno));
            return NULL;
        }
        if (p->run->exit_reason == KVM_EXIT_IO && p->run->io.port == 0xf1 &&
            p->run->io.direction == KVM_EXIT_IO_OUT &&
            *((uint8_t *)p->run + p->run->io.data_offset) == 0x42) {
            saw_out = true;
        } else if (p->run->exit_reason == KVM_EXIT_HLT) {
            p->result = saw_out;
            if (!saw_out)
                snprintf(p->why, sizeof p->why, "the test guest halted without its port write");
            return NULL;
        } else {
            snprintf(p->why, sizeof p->why, "the test guest exited with reason %u",
                     p->run->exit_reason);
            return NULL;
        }
    }
    snprintf(p->why, sizeof p->why, "the test guest did not halt");
    return NULL;
}

int vmm_kvm_probe(struct al_error *err)
{
    al_autoclose int kvm = vm__open_kvm(err);
    if (kvm < 0)
        return kvm;
    al_autoclose int vmfd = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vmfd < 0)
        return al_error_set(err, -errno, "KVM_CREATE_VM: %s", strerror(errno));
    size_t memsz = 0x10000;
    uint8_t *mem = mmap(NULL, memsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return al_error_set(err, -errno, "mmap: %s", strerror(errno));
    static const uint8_t code[] = {0xb0, 0x42, 0xe6, 0xf1,
                                   0xf4}; /* mov al,0x42; out 0xf1,al; hlt */
    memcpy(mem + 0x1000, code, sizeof code);
    int rc = 0;
    struct vm__probe p = {.fd = -1};
    int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
    struct kvm_userspace_memory_region r = {
        .slot = 0, .guest_phys_addr = 0, .memory_size = memsz, .userspace_addr = (uintptr_t)mem};
    if (ioctl(vmfd, KVM_SET_USER_MEMORY_REGION, &r) < 0 ||
        ioctl(vmfd, KVM_SET_TSS_ADDR, VM_TSS_ADDR) < 0) {
        rc = al_error_set(err, -errno, "cannot set up a test VM: %s", strerror(errno));
        goto out;
    }
    p.fd = ioctl(vmfd, KVM_CREATE_VCPU, 0);
    if (p.fd < 0 || run_size <= 0) {
        rc = al_error_set(err, -errno, "KVM_CREATE_VCPU: %s", strerror(errno));
        goto out;
    }
    p.run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, 0);
    if (p.run == MAP_FAILED) {
        p.run = NULL;
        rc = al_error_set(err, -errno, "mmap kvm_run: %s", strerror(errno));
        goto out;
    }
    struct kvm_sregs sregs;
    struct kvm_regs regs = {.rip = 0x1000, .rflags = 2};
    if (ioctl(p.fd, KVM_GET_SREGS, &sregs) < 0) {
        rc = al_error_set(err, -errno, "KVM_GET_SREGS: %s", strerror(errno));
        goto out;
    }
    /* Long mode with the same page tables and GDT a Linux guest gets. */
    struct guest_mem gm = {.fd = -1};
    kvm_gm_layout(&gm, mem, memsz);
    if (kvm_x86_setup_long_mode(&gm, &sregs) < 0) {
        rc = al_error_set(err, -ENOMEM, "probe memory too small");
        goto out;
    }
    if (ioctl(p.fd, KVM_SET_SREGS, &sregs) < 0 || ioctl(p.fd, KVM_SET_REGS, &regs) < 0) {
        rc = al_error_set(err, -errno, "cannot set the test vCPU's registers: %s", strerror(errno));
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = vm__kick_handler;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, vm__probe_thread, &p) != 0) {
        rc = al_error_set(err, -EAGAIN, "cannot start the probe thread");
        goto out;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    if (pthread_timedjoin_np(t, NULL, &deadline) != 0) {
        __atomic_store_n(&p.run->immediate_exit, 1, __ATOMIC_SEQ_CST);
        pthread_kill(t, SIGUSR1);
        pthread_join(t, NULL);
        snprintf(p.why, sizeof p.why, "the test guest did not finish within 2 s");
    }
    if (!p.result)
        rc = al_error_set(err, -ENOTSUP,
                          "/dev/kvm cannot run an ordinary guest (%s); this host's KVM is "
                          "not usable for the KVM backend: use the jail backend",
                          p.why);
out:
    if (p.run)
        munmap(p.run, (size_t)run_size);
    if (p.fd >= 0)
        close(p.fd);
    munmap(mem, memsz);
    return rc;
}

void kvm_vm_register_pio(struct vmm_kvm *vm, struct pio_dev *d)
{
    if (vm->n_pio >= VM_MAX_PIO)
        al_die("too many port-I/O devices");
    vm->pio[vm->n_pio++] = d;
}

void kvm_vm_register_mmio(struct vmm_kvm *vm, struct mmio_dev *d)
{
    if (vm->n_mmio >= VM_MAX_MMIO)
        al_die("too many MMIO devices");
    vm->mmio[vm->n_mmio++] = d;
}

void kvm_vm_irq_line(struct vmm_kvm *vm, uint32_t irq, int level)
{
    struct kvm_irq_level l = {.irq = irq, .level = (uint32_t)level};
    if (ioctl(vm->vm_fd, KVM_IRQ_LINE, &l) < 0)
        al_warn("KVM_IRQ_LINE %u: %s", irq, strerror(errno));
}

static void vm__kick_all(struct vmm_kvm *vm)
{
    for (int i = 0; i < vm->nvcpus; i++) {
        struct vcpu *c = &vm->vcpus[i];
        if (c->run)
            __atomic_store_n(&c->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
        if (c->started)
            pthread_kill(c->thread, VM_KICK_SIGNAL);
    }
}

int kvm_vm_pause(struct vmm_kvm *vm)
{
    pthread_mutex_lock(&vm->pause_lock);
    vm->pause_req = true;
    pthread_mutex_unlock(&vm->pause_lock);
    vm__kick_all(vm);
    int started = 0;
    for (int i = 0; i < vm->nvcpus; i++)
        started += vm->vcpus[i].started;
    pthread_mutex_lock(&vm->pause_lock);
    while (vm->paused < started && atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE)
        pthread_cond_wait(&vm->pause_cond, &vm->pause_lock);
    int rc = atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE ? 0 : -ECANCELED;
    pthread_mutex_unlock(&vm->pause_lock);
    return rc;
}

void kvm_vm_resume(struct vmm_kvm *vm)
{
    pthread_mutex_lock(&vm->pause_lock);
    vm->pause_req = false;
    pthread_cond_broadcast(&vm->pause_cond);
    pthread_mutex_unlock(&vm->pause_lock);
}

/* vCPU side of a pause: called after KVM_RUN returned EINTR. */
static void vm__maybe_park(struct vmm_kvm *vm)
{
    pthread_mutex_lock(&vm->pause_lock);
    if (vm->pause_req) {
        vm->paused++;
        pthread_cond_broadcast(&vm->pause_cond);
        while (vm->pause_req && atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE)
            pthread_cond_wait(&vm->pause_cond, &vm->pause_lock);
        vm->paused--;
    }
    pthread_mutex_unlock(&vm->pause_lock);
}

void kvm_vm_request_exit(struct vmm_kvm *vm, enum vmm_kvm_exit why)
{
    int none = VMM_KVM_EXIT_NONE;
    if (!atomic_compare_exchange_strong(&vm->exit_reason, &none, (int)why))
        return;
    vm__kick_all(vm);
    pthread_mutex_lock(&vm->pause_lock);
    pthread_cond_broadcast(&vm->pause_cond);
    pthread_mutex_unlock(&vm->pause_lock);
    uint64_t one = 1;
    ssize_t w = write(vm->exit_fd, &one, sizeof one);
    (void)w;
}

void vmm_kvm_stop(struct vmm_kvm *vm)
{
    kvm_vm_request_exit(vm, VMM_KVM_EXIT_STOPPED);
}

/* ---- guest memory and boot ------------------------------------------------------------ */

static int vm__map_file(const char *path, const char *what, uint8_t **data, size_t *len,
                        struct al_error *err)
{
    al_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return al_error_set(err, -EINVAL, "%s %s is not a non-empty regular file", what, path);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return al_error_set(err, -errno, "cannot map %s %s: %s", what, path, strerror(errno));
    *data = p;
    *len = (size_t)st.st_size;
    return 0;
}

/* Lays guest memory out over base (size bytes, backed by vm->mem_fd) and gives each region
 * to KVM as one memory slot. */
static int vm__map_slots(struct vmm_kvm *vm, void *base, uint64_t size, struct al_error *err)
{
    kvm_gm_layout(&vm->gm, base, size);
    vm->gm.fd = vm->mem_fd;
    for (int i = 0; i < vm->gm.n; i++) {
        struct kvm_userspace_memory_region r = {
            .slot = (uint32_t)i,
            .guest_phys_addr = vm->gm.r[i].gpa,
            .memory_size = vm->gm.r[i].size,
            .userspace_addr = (uint64_t)(uintptr_t)vm->gm.r[i].hva,
        };
        if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0)
            return al_error_set(err, -errno, "KVM_SET_USER_MEMORY_REGION: %s", strerror(errno));
    }
    return 0;
}

static int vm__setup_memory(struct vmm_kvm *vm, struct al_error *err)
{
    uint64_t size = vm->cfg.mem_bytes;
    vm->mem_fd = memfd_create("airlock-guest-ram", MFD_CLOEXEC);
    if (vm->mem_fd < 0)
        return al_error_set(err, -errno, "memfd_create: %s", strerror(errno));
    if (ftruncate(vm->mem_fd, (off_t)size) < 0)
        return al_error_set(err, -errno, "cannot size guest memory to %llu MiB: %s",
                            (unsigned long long)(size >> 20), strerror(errno));
    void *base =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, vm->mem_fd, 0);
    if (base == MAP_FAILED)
        return al_error_set(err, -errno, "cannot map guest memory: %s", strerror(errno));
    return vm__map_slots(vm, base, size, err);
}

static int vm__restore_memory(struct vmm_kvm *vm, const char *dir, struct al_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/memory", dir);
    vm->mem_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (vm->mem_fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    uint64_t size = vm->cfg.mem_bytes;
    if (fstat(vm->mem_fd, &st) < 0 || (uint64_t)st.st_size != size)
        return al_error_set(err, -EINVAL, "%s does not hold %llu bytes of guest memory", path,
                            (unsigned long long)size);
    /* Private: pages come from the file on first touch; the guest's writes stay ours. */
    void *base =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, vm->mem_fd, 0);
    if (base == MAP_FAILED)
        return al_error_set(err, -errno, "cannot map %s: %s", path, strerror(errno));
    int rc = vm__map_slots(vm, base, size, err);
    if (rc < 0)
        return rc;
    /* A snapshot of this VM copies the file and then only the pages written since (private
     * copies), which the pagemap tells; opened now, before confinement hides /proc. */
    vm->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (vm->pagemap_fd < 0)
        al_debug("no /proc/self/pagemap (%s): snapshots of this VM scan all of its memory",
                 strerror(errno));
    return 0;
}

static int vm__load_kernel(struct vmm_kvm *vm, uint64_t *entry, struct al_error *err)
{
    uint8_t *k = NULL, *i = NULL;
    size_t klen = 0, ilen = 0;
    int rc = vm__map_file(vm->cfg.kernel, "kernel", &k, &klen, err);
    if (rc < 0)
        return rc;
    if (vm->cfg.initrd) {
        rc = vm__map_file(vm->cfg.initrd, "initrd", &i, &ilen, err);
        if (rc < 0) {
            munmap(k, klen);
            return rc;
        }
    }
    char cmdline[4096], devs[512];
    if (kvm_devices_cmdline(&vm->cfg, devs, sizeof devs) < 0 ||
        snprintf(cmdline, sizeof cmdline, "%s%s",
                 vm->cfg.cmdline ? vm->cfg.cmdline : VM_DEFAULT_CMDLINE,
                 devs) >= (int)sizeof cmdline) {
        rc = al_error_set(err, -E2BIG, "kernel command line too long");
    } else {
        rc = kvm_boot_load_linux(
            &vm->gm,
            &(struct kvm_boot_linux){
                .kernel = k, .klen = klen, .initrd = i, .ilen = ilen, .cmdline = cmdline},
            entry, err);
    }
    munmap(k, klen);
    if (i)
        munmap(i, ilen);
    if (rc < 0)
        return al_error_prefix(err, "loading %s", vm->cfg.kernel);
    rc = kvm_x86_write_mptable(&vm->gm, (uint32_t)vm->nvcpus);
    if (rc < 0)
        return al_error_set(err, rc, "cannot write the MP table for %d vCPUs", vm->nvcpus);
    return 0;
}

/* ---- vCPUs ------------------------------------------------------------------------------ */

static int vm__setup_vcpu(struct vmm_kvm *vm, struct vcpu *c, const struct kvm_cpuid2 *supported,
                          uint64_t entry, const struct snap_state *snap, struct al_error *err)
{
    c->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, (unsigned long)c->index);
    if (c->fd < 0)
        return al_error_set(err, -errno, "KVM_CREATE_VCPU %d: %s", c->index, strerror(errno));
    c->run = mmap(NULL, vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (c->run == MAP_FAILED) {
        c->run = NULL;
        return al_error_set(err, -errno, "mmap kvm_run: %s", strerror(errno));
    }

    size_t csz = sizeof(struct kvm_cpuid2) + supported->nent * sizeof(struct kvm_cpuid_entry2);
    al_autofree struct kvm_cpuid2 *cpuid = malloc(csz);
    if (!cpuid)
        return al_error_set(err, -ENOMEM, "out of memory");
    memcpy(cpuid, supported, csz);
    kvm_x86_cpuid_fixup(cpuid, (uint32_t)c->index, (uint32_t)vm->nvcpus);
    if (ioctl(c->fd, KVM_SET_CPUID2, cpuid) < 0)
        return al_error_set(err, -errno, "KVM_SET_CPUID2: %s", strerror(errno));
    if (snap)
        return kvm_snap_restore_vcpu(vm, c, snap, err);

    al_autofree struct kvm_msrs *msrs = calloc(1, sizeof *msrs + 16 * sizeof(struct kvm_msr_entry));
    if (!msrs)
        return al_error_set(err, -ENOMEM, "out of memory");
    msrs->nmsrs = (uint32_t)kvm_x86_boot_msrs(msrs->entries, 16);
    int set = ioctl(c->fd, KVM_SET_MSRS, msrs);
    if (set < 0)
        return al_error_set(err, -errno, "KVM_SET_MSRS: %s", strerror(errno));
    if ((uint32_t)set != msrs->nmsrs)
        al_debug("vCPU %d: KVM accepted %d of %u boot MSRs (MSR 0x%x refused)", c->index, set,
                 msrs->nmsrs, msrs->entries[set].index);

    struct kvm_lapic_state lapic;
    if (ioctl(c->fd, KVM_GET_LAPIC, &lapic) < 0)
        return al_error_set(err, -errno, "KVM_GET_LAPIC: %s", strerror(errno));
    kvm_x86_lapic_setup(&lapic);
    if (ioctl(c->fd, KVM_SET_LAPIC, &lapic) < 0)
        return al_error_set(err, -errno, "KVM_SET_LAPIC: %s", strerror(errno));

    if (c->index != 0)
        return 0; /* application processors wait for INIT/SIPI from the boot CPU */

    struct kvm_sregs sregs;
    if (ioctl(c->fd, KVM_GET_SREGS, &sregs) < 0)
        return al_error_set(err, -errno, "KVM_GET_SREGS: %s", strerror(errno));
    if (kvm_x86_setup_long_mode(&vm->gm, &sregs) < 0)
        return al_error_set(err, -ENOMEM, "guest memory too small for page tables");
    if (ioctl(c->fd, KVM_SET_SREGS, &sregs) < 0)
        return al_error_set(err, -errno, "KVM_SET_SREGS: %s", strerror(errno));
    struct kvm_regs regs;
    kvm_x86_setup_regs(&regs, entry, BOOT_ZERO_PAGE);
    if (ioctl(c->fd, KVM_SET_REGS, &regs) < 0)
        return al_error_set(err, -errno, "KVM_SET_REGS: %s", strerror(errno));
    struct kvm_fpu fpu;
    kvm_x86_setup_fpu(&fpu);
    if (ioctl(c->fd, KVM_SET_FPU, &fpu) < 0)
        return al_error_set(err, -errno, "KVM_SET_FPU: %s", strerror(errno));
    return 0;
}

static void vm__pio(struct vmm_kvm *vm, struct kvm_run *run)
{
    uint8_t *data = (uint8_t *)run + run->io.data_offset;
    uint32_t size = run->io.size;
    if (size != 1 && size != 2 && size != 4)
        return;
    for (uint32_t n = 0; n < run->io.count; n++, data += size) {
        if ((uint8_t *)data + size > (uint8_t *)run + vm->run_size)
            return;
        struct pio_dev *d = NULL;
        for (int i = 0; i < vm->n_pio; i++) {
            struct pio_dev *p = vm->pio[i];
            if (run->io.port >= p->base && run->io.port < p->base + p->len) {
                d = p;
                break;
            }
        }
        uint16_t off = d ? (uint16_t)(run->io.port - d->base) : 0;
        if (run->io.direction == KVM_EXIT_IO_OUT) {
            if (d)
                d->out(d, off, data, size);
        } else {
            if (d)
                d->in(d, off, data, size);
            else
                memset(data, 0xff, size); /* nothing there: the bus floats high */
        }
    }
}

static void vm__mmio(struct vmm_kvm *vm, struct kvm_run *run)
{
    uint64_t addr = run->mmio.phys_addr;
    uint32_t len = run->mmio.len;
    if (len == 0 || len > 8)
        return;
    for (int i = 0; i < vm->n_mmio; i++) {
        struct mmio_dev *d = vm->mmio[i];
        if (addr >= d->base && addr - d->base < d->len && len <= d->len - (addr - d->base)) {
            if (run->mmio.is_write)
                d->write(d, addr - d->base, run->mmio.data, len);
            else
                d->read(d, addr - d->base, run->mmio.data, len);
            return;
        }
    }
    if (!run->mmio.is_write)
        memset(run->mmio.data, 0xff, len);
}

static void vm__kick_handler(int sig)
{
    (void)sig;
}

static void *vm__vcpu_thread(void *arg)
{
    struct vcpu *c = arg;
    struct vmm_kvm *vm = c->vm;
    char name[16];
    snprintf(name, sizeof name, "vcpu%d", c->index);
    pthread_setname_np(pthread_self(), name);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, VM_KICK_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);

    struct al_error err = {0};
    if (kvm_confine_thread(CONFINE_VCPU, &err) < 0) {
        al_error("vCPU %d: %s", c->index, al_error_str(&err));
        kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
        return NULL;
    }

    while (atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE) {
        int rc = ioctl(c->fd, KVM_RUN, 0);
        if (rc < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                __atomic_store_n(&c->run->immediate_exit, 0, __ATOMIC_SEQ_CST);
                vm__maybe_park(vm);
                continue;
            }
            al_error("vCPU %d: KVM_RUN: %s", c->index, strerror(errno));
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            break;
        }
        struct kvm_run *run = c->run;
        switch (run->exit_reason) {
        case KVM_EXIT_IO:
            vm__pio(vm, run);
            break;
        case KVM_EXIT_MMIO:
            vm__mmio(vm, run);
            break;
        case KVM_EXIT_SHUTDOWN:
            al_info("vCPU %d: guest shutdown (triple fault): treating as reset", c->index);
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_RESET);
            break;
        case KVM_EXIT_SYSTEM_EVENT:
            if (run->system_event.type == KVM_SYSTEM_EVENT_SHUTDOWN)
                kvm_vm_request_exit(vm, VMM_KVM_EXIT_POWEROFF);
            else
                kvm_vm_request_exit(vm, VMM_KVM_EXIT_RESET);
            break;
        case KVM_EXIT_HLT:
            /* With the in-kernel LAPIC, HLT does not exit; if it does, nothing will wake us. */
            al_error("vCPU %d: halted with no way to wake", c->index);
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            break;
        case KVM_EXIT_FAIL_ENTRY:
            al_error("vCPU %d: KVM_EXIT_FAIL_ENTRY, hardware reason 0x%llx", c->index,
                     (unsigned long long)run->fail_entry.hardware_entry_failure_reason);
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            break;
        case KVM_EXIT_INTERNAL_ERROR:
            al_error("vCPU %d: KVM internal error, suberror %u", c->index, run->internal.suberror);
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            break;
        case KVM_EXIT_INTR:
            break;
        default:
            al_error("vCPU %d: unexpected exit reason %u", c->index, run->exit_reason);
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            break;
        }
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------- */

int vmm_kvm_create(const struct vmm_kvm_config *cfg, struct vmm_kvm **out, struct al_error *err)
{
    *out = NULL;
    struct snap_state snap_st = {0}, *snap = NULL;
    struct vmm_kvm_config c2 = *cfg;
    if (cfg->restore_dir) {
        int rc = kvm_snap_read(cfg->restore_dir, &snap_st, err);
        if (rc < 0)
            return rc;
        snap = &snap_st;
        c2.mem_bytes = snap->mem_bytes;
        c2.vcpus = snap->nvcpus;
        cfg = &c2;
    } else if (!cfg->kernel) {
        return al_error_set(err, -EINVAL, "no kernel given");
    }
    if (cfg->vcpus < 1 || cfg->vcpus > VMM_KVM_MAX_VCPUS)
        return al_error_set(err, -EINVAL, "vcpus must be 1..%d, not %u", VMM_KVM_MAX_VCPUS,
                            cfg->vcpus);
    if (cfg->mem_bytes < (32ull << 20) || cfg->mem_bytes > (256ull << 30) ||
        (cfg->mem_bytes & 0xfff))
        return al_error_set(err, -EINVAL,
                            "guest memory must be a multiple of 4 KiB between 32 MiB and 256 GiB");

    struct vmm_kvm *vm = calloc(1, sizeof *vm);
    if (!vm) {
        kvm_snap_free(&snap_st);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    vm->restored = snap != NULL;
    vm->cfg = *cfg;
    vm->kvm_fd = vm->vm_fd = vm->mem_fd = vm->console_fd = vm->exit_fd = -1;
    vm->pagemap_fd = -1;
    vm->nvcpus = (int)cfg->vcpus;
    for (int i = 0; i < VMM_KVM_MAX_VCPUS; i++) {
        vm->vcpus[i].fd = -1;
        vm->vcpus[i].index = i;
        vm->vcpus[i].vm = vm;
    }
    atomic_init(&vm->exit_reason, VMM_KVM_EXIT_NONE);
    pthread_mutex_init(&vm->pause_lock, NULL);
    pthread_cond_init(&vm->pause_cond, NULL);
    vm->loop.epfd = vm->loop.stop_fd = -1;
    vm->exit_fd = eventfd(0, EFD_CLOEXEC);
    int rc;
    if (vm->exit_fd < 0) {
        rc = al_error_set(err, -errno, "eventfd: %s", strerror(errno));
        goto fail;
    }

    vm->kvm_fd = vm__open_kvm(err);
    if (vm->kvm_fd < 0) {
        rc = vm->kvm_fd;
        goto fail;
    }
    vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
    if (vm->vm_fd < 0) {
        rc = al_error_set(err, -errno, "KVM_CREATE_VM: %s", strerror(errno));
        goto fail;
    }
    if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, VM_TSS_ADDR) < 0) {
        rc = al_error_set(err, -errno, "KVM_SET_TSS_ADDR: %s", strerror(errno));
        goto fail;
    }
    uint64_t idmap = VM_IDENTITY_MAP_ADDR;
    if (ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &idmap) < 0)
        al_debug("KVM_SET_IDENTITY_MAP_ADDR: %s (only Intel needs it)", strerror(errno));
    if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0) {
        rc = al_error_set(err, -errno, "KVM_CREATE_IRQCHIP: %s", strerror(errno));
        goto fail;
    }
    struct kvm_pit_config pit = {.flags = KVM_PIT_SPEAKER_DUMMY};
    if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
        rc = al_error_set(err, -errno, "KVM_CREATE_PIT2: %s", strerror(errno));
        goto fail;
    }
    int run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
    if (run_size < (int)sizeof(struct kvm_run)) {
        rc = al_error_set(err, -EINVAL, "KVM_GET_VCPU_MMAP_SIZE: %s", strerror(errno));
        goto fail;
    }
    vm->run_size = (size_t)run_size;

    uint64_t entry = 0;
    if (snap) {
        rc = vm__restore_memory(vm, cfg->restore_dir, err);
        if (rc < 0)
            goto fail;
    } else {
        rc = vm__setup_memory(vm, err);
        if (rc < 0)
            goto fail;
        rc = vm__load_kernel(vm, &entry, err);
        if (rc < 0)
            goto fail;
    }

    /* CPUID as KVM supports it on this host, adjusted per vCPU. */
    struct kvm_cpuid2 *supported = NULL;
    for (uint32_t nent = 64; nent <= 1024; nent *= 2) {
        free(supported);
        supported = calloc(1, sizeof *supported + nent * sizeof(struct kvm_cpuid_entry2));
        if (!supported) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            goto fail;
        }
        supported->nent = nent;
        if (ioctl(vm->kvm_fd, KVM_GET_SUPPORTED_CPUID, supported) == 0)
            break;
        if (errno != E2BIG) {
            rc = al_error_set(err, -errno, "KVM_GET_SUPPORTED_CPUID: %s", strerror(errno));
            free(supported);
            goto fail;
        }
    }
    for (int i = 0; i < vm->nvcpus; i++) {
        rc = vm__setup_vcpu(vm, &vm->vcpus[i], supported, entry, snap, err);
        if (rc < 0) {
            free(supported);
            goto fail;
        }
    }
    free(supported);

    rc = kvm_evloop_init(&vm->loop);
    if (rc < 0) {
        al_error_set(err, rc, "event loop: %s", strerror(-rc));
        goto fail;
    }

    /* Devices. */
    if (cfg->console_log) {
        vm->console_fd = open(cfg->console_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (vm->console_fd < 0) {
            rc = al_error_set(err, -errno, "cannot open console log %s: %s", cfg->console_log,
                              strerror(errno));
            goto fail;
        }
    }
    if (!cfg->console_log && cfg->console_fd > 2)
        vm->console_fd = cfg->console_fd; /* handed in; closed with the VM */
    vm->serial = kvm_serial_new(vm, 0x3f8, 4, vm->console_fd >= 0 ? vm->console_fd : STDERR_FILENO);
    if (!vm->serial) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    kvm_legacy_register(vm);
    rc = kvm_devices_create(vm, err);
    if (rc < 0)
        goto fail;
    if (snap) {
        rc = kvm_snap_restore_vm(vm, snap, cfg->restore_dir, err);
        if (rc < 0)
            goto fail;
        kvm_snap_free(snap);
    }

    *out = vm;
    return 0;
fail:
    kvm_snap_free(&snap_st);
    vmm_kvm_destroy(vm);
    return rc;
}

int vmm_kvm_start(struct vmm_kvm *vm, struct al_error *err)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = vm__kick_handler;
    sigaction(VM_KICK_SIGNAL, &sa, NULL);

    /* vCPU threads unblock the kick signal themselves; every other thread keeps it blocked
     * so a kick never lands on the wrong thread. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, VM_KICK_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, &old);

    int rc = kvm_evloop_start(&vm->loop);
    if (rc < 0)
        return al_error_set(err, rc, "cannot start the device thread: %s", strerror(-rc));
    for (int i = 0; i < vm->nvcpus; i++) {
        struct vcpu *c = &vm->vcpus[i];
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, VM_THREAD_STACK);
        rc = pthread_create(&c->thread, &attr, vm__vcpu_thread, c);
        pthread_attr_destroy(&attr);
        if (rc) {
            kvm_vm_request_exit(vm, VMM_KVM_EXIT_ERROR);
            return al_error_set(err, -rc, "cannot start vCPU thread %d: %s", i, strerror(rc));
        }
        c->started = true;
    }
    return 0;
}

enum vmm_kvm_exit vmm_kvm_wait(struct vmm_kvm *vm)
{
    uint64_t v;
    while (atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE) {
        if (read(vm->exit_fd, &v, sizeof v) < 0 && errno != EINTR)
            break;
    }
    for (int i = 0; i < vm->nvcpus; i++) {
        struct vcpu *c = &vm->vcpus[i];
        if (c->started) {
            pthread_join(c->thread, NULL);
            c->started = false;
        }
    }
    kvm_evloop_stop(&vm->loop);
    return (enum vmm_kvm_exit)atomic_load(&vm->exit_reason);
}

void vmm_kvm_destroy(struct vmm_kvm *vm)
{
    if (!vm)
        return;
    if (atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE)
        kvm_vm_request_exit(vm, VMM_KVM_EXIT_STOPPED);
    vmm_kvm_wait(vm);
    kvm_devices_destroy(vm);
    kvm_serial_free(vm->serial);
    kvm_evloop_free(&vm->loop);
    for (int i = 0; i < vm->nvcpus; i++) {
        struct vcpu *c = &vm->vcpus[i];
        if (c->run)
            munmap(c->run, vm->run_size);
        if (c->fd >= 0)
            close(c->fd);
    }
    if (vm->gm.base)
        munmap(vm->gm.base, vm->gm.total);
    if (vm->mem_fd >= 0)
        close(vm->mem_fd);
    if (vm->pagemap_fd >= 0)
        close(vm->pagemap_fd);
    if (vm->vm_fd >= 0)
        close(vm->vm_fd);
    if (vm->kvm_fd >= 0)
        close(vm->kvm_fd);
    if (vm->console_fd >= 0)
        close(vm->console_fd);
    if (vm->exit_fd >= 0)
        close(vm->exit_fd);
    pthread_mutex_destroy(&vm->pause_lock);
    pthread_cond_destroy(&vm->pause_cond);
    free(vm);
}

int vmm_kvm_pause(struct vmm_kvm *vm, struct al_error *err)
{
    int rc = kvm_vm_pause(vm);
    if (rc < 0)
        return al_error_set(err, rc, "the VM has ended");
    return 0;
}

void vmm_kvm_resume(struct vmm_kvm *vm)
{
    kvm_vm_resume(vm);
}

int vmm_kvm_exit_fd(const struct vmm_kvm *vm)
{
    return vm->exit_fd;
}

int vmm_kvm_probe_kernel(const char *kernel, unsigned timeout_ms, struct al_error *err)
{
    int rc = vmm_kvm_probe(err);
    if (rc < 0)
        return rc;
    struct vmm_kvm_config cfg = {
        .kernel = kernel,
        .mem_bytes = 128ull << 20,
        .vcpus = 1,
        .console_log = "/dev/null",
        .cmdline = "console=ttyS0 earlyprintk=serial,ttyS0,115200 reboot=k panic=-1 loglevel=8",
    };
    struct vmm_kvm *vm;
    rc = vmm_kvm_create(&cfg, &vm, err);
    if (rc < 0)
        return rc;
    rc = vmm_kvm_start(vm, err);
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (rc == 0 && atomic_load(&vm->console_bytes) == 0 &&
           atomic_load(&vm->exit_reason) == VMM_KVM_EXIT_NONE && al_now_ns() < deadline)
        usleep(10000);
    bool spoke = atomic_load(&vm->console_bytes) > 0;
    vmm_kvm_destroy(vm);
    if (rc < 0)
        return rc;
    if (!spoke)
        return al_error_set(err, -ENOTSUP,
                            "/dev/kvm passes the checks but the guest kernel %s printed nothing "
                            "within %u ms: this host's KVM cannot run airlock guests (use the "
                            "jail backend)",
                            kernel, timeout_ms);
    return 0;
}
