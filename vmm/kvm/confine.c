/* vmm/kvm/confine: self-confinement of the VM process (see confine.h). */
#include "vmm/kvm/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/kvm.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

static bool confine__seccomp;

void confine_enable_seccomp(bool on)
{
    confine__seccomp = on;
}

bool confine_seccomp_enabled(void)
{
    return confine__seccomp;
}

static int confine__join_cgroup(const char *dir, struct al_error *err)
{
    /* cgroup v2 and v1 both take "0" (= the writer) in cgroup.procs. */
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot join cgroup %s: %s", dir, strerror(errno));
    ssize_t w = write(fd, "0", 1);
    int e = errno;
    close(fd);
    if (w != 1)
        return al_error_set(err, -e, "cannot join cgroup %s: %s", dir, strerror(e));
    return 0;
}

static int confine__pivot(const char *dir, struct al_error *err)
{
    if (unshare(CLONE_NEWNS) < 0)
        return al_error_set(err, -errno, "unshare(CLONE_NEWNS): %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return al_error_set(err, -errno, "making / private: %s", strerror(errno));
    if (mount(dir, dir, NULL, MS_BIND | MS_REC, NULL) < 0)
        return al_error_set(err, -errno, "bind-mounting %s: %s", dir, strerror(errno));
    if (mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return al_error_set(err, -errno, "remounting %s nosuid,nodev,noexec: %s", dir,
                            strerror(errno));
    if (chdir(dir) < 0)
        return al_error_set(err, -errno, "chdir %s: %s", dir, strerror(errno));
    /* pivot_root(".", "."): the old root ends up on top of the new one; detach it. */
    if (syscall(SYS_pivot_root, ".", ".") == 0) {
        if (umount2(".", MNT_DETACH) < 0)
            return al_error_set(err, -errno, "detaching the old root: %s", strerror(errno));
    } else if (errno == EINVAL) {
        /* The root is an initramfs (rootfs cannot be pivoted): move the jail over it, as
         * switch_root does, and chroot. The old root is covered, capabilities are dropped
         * below and the filters forbid chroot and mount, so it stays out of reach. */
        if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
            return al_error_set(err, -errno, "moving %s over /: %s", dir, strerror(errno));
        if (chroot(".") < 0)
            return al_error_set(err, -errno, "chroot %s: %s", dir, strerror(errno));
    } else {
        return al_error_set(err, -errno, "pivot_root into %s: %s", dir, strerror(errno));
    }
    if (chdir("/") < 0)
        return al_error_set(err, -errno, "chdir /: %s", strerror(errno));
    return 0;
}

int confine_process(const struct confine_opts *o, struct al_error *err)
{
    int rc;
    /* Lazy initialisation that would need files or calls the filters forbid later: glibc
     * reads the time-zone data on the first gmtime_r/localtime_r. */
    time_t t0 = 0;
    struct tm tm;
    gmtime_r(&t0, &tm);
    localtime_r(&t0, &tm);
    for (int i = 0; i < o->n_cgroups; i++) {
        rc = confine__join_cgroup(o->cgroups[i], err);
        if (rc < 0)
            return rc;
    }
    if (o->jail_dir) {
        rc = confine__pivot(o->jail_dir, err);
        if (rc < 0)
            return rc;
    }
    if (o->uid) {
        for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                return al_error_set(err, -errno, "dropping capability %d: %s", cap,
                                    strerror(errno));
        if (setgroups(0, NULL) < 0)
            return al_error_set(err, -errno, "setgroups: %s", strerror(errno));
        if (setresgid(o->gid, o->gid, o->gid) < 0)
            return al_error_set(err, -errno, "setresgid %u: %s", o->gid, strerror(errno));
        if (setresuid(o->uid, o->uid, o->uid) < 0)
            return al_error_set(err, -errno, "setresuid %u: %s", o->uid, strerror(errno));
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return al_error_set(err, -errno, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
    if (o->uid) {
        /* Verify: nothing effective, permitted or inheritable, nothing ambient. */
        struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
        struct __user_cap_data_struct d[2];
        if (syscall(SYS_capget, &h, d) < 0)
            return al_error_set(err, -errno, "capget: %s", strerror(errno));
        for (int i = 0; i < 2; i++)
            if (d[i].effective || d[i].permitted || d[i].inheritable)
                return al_error_set(err, -EPERM, "capabilities survived the uid switch");
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    }
    return 0;
}

/* Calls every thread needs: memory, futexes, signals for the kick, exit, time. */
static const int confine__common[] = {
    SCMP_SYS(read),
    SCMP_SYS(write),
    SCMP_SYS(close),
    SCMP_SYS(futex),
    SCMP_SYS(rt_sigreturn),
    SCMP_SYS(rt_sigprocmask),
    SCMP_SYS(sigaltstack),
    SCMP_SYS(exit),
    SCMP_SYS(exit_group),
    SCMP_SYS(mmap),
    SCMP_SYS(munmap),
    SCMP_SYS(madvise),
    SCMP_SYS(mprotect),
    SCMP_SYS(brk),
    SCMP_SYS(mremap),
    SCMP_SYS(clock_gettime),
    SCMP_SYS(clock_nanosleep),
    SCMP_SYS(nanosleep),
    SCMP_SYS(gettid),
    SCMP_SYS(getpid),
    SCMP_SYS(tgkill),
    SCMP_SYS(sched_yield),
    SCMP_SYS(restart_syscall),
    SCMP_SYS(rseq),
    SCMP_SYS(set_robust_list),
    SCMP_SYS(getrandom),
    SCMP_SYS(gettimeofday),
    SCMP_SYS(time),
};

static const int confine__devices[] = {
    SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_ctl), SCMP_SYS(readv),
    SCMP_SYS(writev),     SCMP_SYS(pread64),     SCMP_SYS(pwrite64),  SCMP_SYS(preadv),
    SCMP_SYS(pwritev),    SCMP_SYS(fdatasync),   SCMP_SYS(sendto),    SCMP_SYS(recvfrom),
    SCMP_SYS(accept4),    SCMP_SYS(shutdown),    SCMP_SYS(lseek),
};

static const int confine__control[] = {
    SCMP_SYS(poll),    SCMP_SYS(ppoll),      SCMP_SYS(accept4),   SCMP_SYS(openat),
    SCMP_SYS(mkdir),   SCMP_SYS(mkdirat),    SCMP_SYS(fsync),     SCMP_SYS(fdatasync),
    SCMP_SYS(rename),  SCMP_SYS(renameat),   SCMP_SYS(unlink),    SCMP_SYS(unlinkat),
    SCMP_SYS(pread64), SCMP_SYS(pwrite64),   SCMP_SYS(ftruncate), SCMP_SYS(lseek),
    SCMP_SYS(fstat),   SCMP_SYS(newfstatat), SCMP_SYS(fchmod),    SCMP_SYS(sendto),
    SCMP_SYS(readv),   SCMP_SYS(writev),     SCMP_SYS(epoll_ctl), SCMP_SYS(copy_file_range),
};

/* ioctl allowed when its request (argument 1) compares: EQ a, or MASKED_EQ (mask a) == b. */
static int confine__allow_ioctl(scmp_filter_ctx ctx, enum scmp_compare op, scmp_datum_t a,
                                scmp_datum_t b)
{
    struct scmp_arg_cmp cmp = {.arg = 1, .op = op, .datum_a = a, .datum_b = b};
    return seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, &cmp);
}

int confine_thread(enum confine_role role, struct al_error *err)
{
    if (!confine__seccomp)
        return 0;
#ifdef AIRLOCK_SANITIZED
    /* The sanitizer runtimes (leak check at exit, reports) need calls no filter here
     * allows; log instead of killing so the tests see violations in the kernel log. */
    uint32_t deny = SCMP_ACT_LOG;
#else
    uint32_t deny = SCMP_ACT_KILL_PROCESS;
#endif
    scmp_filter_ctx ctx = seccomp_init(deny);
    if (!ctx)
        return al_error_set(err, -ENOMEM, "seccomp_init failed");
    int rc = 0;
    for (size_t i = 0; i < sizeof confine__common / sizeof confine__common[0] && rc == 0; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, confine__common[i], 0);
    switch (role) {
    case CONFINE_VCPU:
        /* KVM_RUN on its vCPU, KVM_IRQ_LINE for the UART's interrupt: nothing else. */
        if (rc == 0)
            rc = confine__allow_ioctl(ctx, SCMP_CMP_EQ, KVM_RUN, 0);
        if (rc == 0)
            rc = confine__allow_ioctl(ctx, SCMP_CMP_EQ, KVM_IRQ_LINE, 0);
        break;
    case CONFINE_DEVICES:
        for (size_t i = 0; i < sizeof confine__devices / sizeof confine__devices[0] && rc == 0; i++)
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, confine__devices[i], 0);
        break;
    case CONFINE_CONTROL:
        for (size_t i = 0; i < sizeof confine__control / sizeof confine__control[0] && rc == 0; i++)
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, confine__control[i], 0);
        /* KVM ioctls (type 0xAE) for pause and snapshot; no other device's ioctls. */
        if (rc == 0)
            rc = confine__allow_ioctl(ctx, SCMP_CMP_MASKED_EQ, 0xff00, KVMIO << 8);
        break;
    }
    if (rc == 0)
        rc = seccomp_load(ctx); /* this thread only: no TSYNC */
    seccomp_release(ctx);
    if (rc < 0)
        return al_error_set(err, rc, "installing the seccomp filter: %s", strerror(-rc));
    return 0;
}
