/* vmm/kvm/confine: the VM process's per-thread system-call policies (see confine.h). */
#include "vmm/kvm/confine.h"

#include <errno.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "common/seccomp.h"
#include "common/cleanup.h"

static bool confine__seccomp;

void kvm_confine_enable_seccomp(bool on)
{
    confine__seccomp = on;
}

bool kvm_confine_seccomp_enabled(void)
{
    return confine__seccomp;
}

/* Calls every thread needs: memory, futexes, signals for the kick, exit, time. */
static const int confine__common[] = {
    __NR_read,
    __NR_write,
    __NR_close,
    __NR_futex,
    __NR_rt_sigreturn,
    __NR_rt_sigprocmask,
    __NR_sigaltstack,
    __NR_exit,
    __NR_exit_group,
    __NR_mmap,
    __NR_munmap,
    __NR_madvise,
    __NR_mprotect,
    __NR_brk,
    __NR_mremap,
    __NR_clock_gettime,
    __NR_clock_nanosleep,
    __NR_nanosleep,
    __NR_gettid,
    __NR_getpid,
    __NR_tgkill,
    __NR_sched_yield,
    __NR_restart_syscall,
    __NR_rseq,
    __NR_set_robust_list,
    __NR_getrandom,
    __NR_gettimeofday,
    __NR_time,
};

static const int confine__devices[] = {
    __NR_epoll_wait, __NR_epoll_pwait, __NR_epoll_ctl, __NR_readv,    __NR_writev,
    __NR_pread64,    __NR_pwrite64,    __NR_preadv,    __NR_pwritev,  __NR_fdatasync,
    __NR_sendto,     __NR_recvfrom,    __NR_accept4,   __NR_shutdown, __NR_lseek,
};

static const int confine__control[] = {
    __NR_poll,    __NR_ppoll,    __NR_accept4,    __NR_openat,          __NR_mkdir,
    __NR_mkdirat, __NR_fsync,    __NR_fdatasync,  __NR_rename,          __NR_renameat,
    __NR_unlink,  __NR_unlinkat, __NR_pread64,    __NR_pwrite64,        __NR_ftruncate,
    __NR_lseek,   __NR_fstat,    __NR_newfstatat, __NR_fchmod,          __NR_sendto,
    __NR_readv,   __NR_writev,   __NR_epoll_ctl,  __NR_copy_file_range,
};

int kvm_confine_filter(enum confine_role role, uint32_t deny, struct sock_filter **prog,
                       size_t *len)
{
    struct al_sc_policy pol;
    struct al_sc_prog io = {0};
    al_sc_policy_init(&pol, deny, AL_SC_KILL);
    al_sc_policy_set(&pol, confine__common, AL_ARRAY_SIZE(confine__common), AL_SC_ALLOW);
    switch (role) {
    case CONFINE_VCPU:
        /* KVM_RUN on its vCPU, KVM_IRQ_LINE for the UART's interrupt: nothing else. */
        al_sc_ld_arg(&io, 1);
        al_sc_ret_if_eq(&io, KVM_RUN, AL_SC_ALLOW);
        al_sc_ret_if_eq(&io, KVM_IRQ_LINE, AL_SC_ALLOW);
        al_sc_ret(&io, deny);
        al_sc_policy_block(&pol, __NR_ioctl, &io);
        break;
    case CONFINE_DEVICES:
        al_sc_policy_set(&pol, confine__devices, AL_ARRAY_SIZE(confine__devices), AL_SC_ALLOW);
        break;
    case CONFINE_CONTROL:
        al_sc_policy_set(&pol, confine__control, AL_ARRAY_SIZE(confine__control), AL_SC_ALLOW);
        /* KVM ioctls (type 0xAE) for pause and snapshot; no other device's ioctls. */
        al_sc_ld_arg(&io, 1);
        al_sc_and(&io, 0xff00);
        al_sc_ret_if_eq(&io, KVMIO << 8, AL_SC_ALLOW);
        al_sc_ret(&io, deny);
        al_sc_policy_block(&pol, __NR_ioctl, &io);
        break;
    }
    return al_sc_build(&pol, prog, len);
}

int kvm_confine_thread(enum confine_role role, struct al_error *err)
{
    if (!confine__seccomp)
        return 0;
#ifdef AIRLOCK_SANITIZED
    /* The sanitizer runtimes (leak check at exit, reports) need calls no filter here
     * allows; log instead of killing so the tests see violations in the kernel log. */
    uint32_t deny = AL_SC_LOG;
#else
    uint32_t deny = AL_SC_KILL;
#endif
    struct sock_filter *prog = NULL;
    size_t len = 0;
    int rc = kvm_confine_filter(role, deny, &prog, &len);
    if (rc < 0)
        return al_error_set(err, rc, "building the seccomp filter: %s", strerror(-rc));
    rc = al_sc_install(prog, len, 0, err); /* this thread only: no TSYNC */
    free(prog);
    return rc;
}
