/* vmm/jail/seccomp: see seccomp.h.
 *
 * The program is written by hand rather than with libseccomp because the policy needs
 * per-syscall fallbacks libseccomp cannot express (it refuses two comparisons of one
 * argument and overlapping rules with different actions), e.g. "socket: these families
 * are allowed, raw types are EPERM, every other family is EAFNOSUPPORT".
 *
 * Shape: [arch check][x32 check][a binary search on the syscall number]. Every syscall
 * number below SC_NR_LIMIT gets one action (allow, EPERM, ENOSYS, or an argument block such
 * as socket's); runs of numbers with the same action are ranges, and the program is a
 * balanced tree of "nr >= k" comparisons over the ranges whose leaves return (or run the
 * argument block, which returns). Any call takes about 8 comparisons, where a list of
 * every allowed and denied number took up to ~700 instructions for the numbers at its end.
 * This matters twice: when the filter is installed the kernel runs it for every syscall
 * number to build its cache of constant results (with interrupts off, on every sandbox
 * creation: a linear list made that a large part of the creation's CPU time), and at run
 * time for each call the cache does not cover (denied ones and argument blocks).
 * Jumps over more than 255 instructions go through a BPF_JA (32-bit offset).
 */
#include "seccomp.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/netlink.h>

/* Syscalls newer than Debian 12's headers (x86_64 numbers). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_futex_wake
#define __NR_futex_wake 454
#endif
#ifndef __NR_futex_wait
#define __NR_futex_wait 455
#endif
#ifndef __NR_futex_requeue
#define __NR_futex_requeue 456
#endif
#ifndef __NR_statmount
#define __NR_statmount 457
#endif
#ifndef __NR_listmount
#define __NR_listmount 458
#endif
#ifndef __NR_lsm_get_self_attr
#define __NR_lsm_get_self_attr 459
#endif
#ifndef __NR_lsm_set_self_attr
#define __NR_lsm_set_self_attr 460
#endif
#ifndef __NR_lsm_list_modules
#define __NR_lsm_list_modules 461
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef NETLINK_SOCK_DIAG
#define NETLINK_SOCK_DIAG 4
#endif

#define SC_RET_ALLOW       SECCOMP_RET_ALLOW
#define SC_RET_KILL        SECCOMP_RET_KILL_PROCESS
#define SC_RET_ERRNO(e)    (SECCOMP_RET_ERRNO | ((e)&SECCOMP_RET_DATA))
#define SC_X32_SYSCALL_BIT 0x40000000u
#define SC_NS_FLAGS                                                                               \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
     CLONE_NEWNET)

#define SC_OFF_NR     0u
#define SC_OFF_ARCH   4u
#define SC_OFF_ARG(i) (16u + 8u * (i)) /* low 32 bits (little-endian) */

/* clang-format off */
/* Denied with EPERM. */
static const int sc__deny[] = {
    __NR_mount, __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_move_mount, __NR_open_tree,
    __NR_fsopen, __NR_fsconfig, __NR_fsmount, __NR_fspick, __NR_mount_setattr,
    __NR_statmount, __NR_listmount,
    __NR_bpf, __NR_perf_event_open, __NR_kexec_load, __NR_kexec_file_load,
    __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_create_module,
    __NR_get_kernel_syms, __NR_query_module,
    __NR_keyctl, __NR_add_key, __NR_request_key, __NR_userfaultfd,
    __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register,
    __NR_setns, __NR_open_by_handle_at, __NR_iopl, __NR_ioperm, __NR_reboot,
    __NR_swapon, __NR_swapoff, __NR_settimeofday, __NR_clock_settime, __NR_clock_adjtime,
    __NR_adjtimex, __NR_acct, __NR_quotactl, __NR_quotactl_fd, __NR_syslog,
    __NR_sethostname, __NR_setdomainname, __NR_process_vm_readv, __NR_process_vm_writev,
    __NR_kcmp, __NR_pidfd_getfd, __NR_mbind, __NR_set_mempolicy, __NR_migrate_pages,
    __NR_move_pages, __NR_set_mempolicy_home_node, __NR_modify_ldt, __NR_vhangup,
    __NR_lookup_dcookie, __NR_fanotify_init, __NR_lsm_get_self_attr,
    __NR_lsm_set_self_attr, __NR_lsm_list_modules, __NR_uselib, __NR_ustat, __NR_sysfs,
    __NR__sysctl, __NR_nfsservctl, __NR_afs_syscall, __NR_tuxcall, __NR_security,
    __NR_getpmsg, __NR_putpmsg, __NR_vserver, __NR_remap_file_pages,
};
/* clang-format on */

/* clang-format off */
/* Allowed without argument checks. */
static const int sc__allow[] = {
    /* files and directories */
    __NR_read, __NR_write, __NR_open, __NR_openat, __NR_openat2, __NR_close, __NR_close_range,
    __NR_creat, __NR_stat, __NR_fstat, __NR_lstat, __NR_newfstatat, __NR_statx, __NR_lseek,
    __NR_pread64, __NR_pwrite64, __NR_readv, __NR_writev, __NR_preadv, __NR_pwritev,
    __NR_preadv2, __NR_pwritev2, __NR_access, __NR_faccessat, __NR_faccessat2, __NR_dup,
    __NR_dup2, __NR_dup3, __NR_fcntl, __NR_flock, __NR_fsync, __NR_fdatasync, __NR_sync,
    __NR_syncfs, __NR_sync_file_range, __NR_truncate, __NR_ftruncate, __NR_fallocate,
    __NR_fadvise64, __NR_readahead, __NR_getdents, __NR_getdents64, __NR_getcwd, __NR_chdir,
    __NR_fchdir, __NR_rename, __NR_renameat, __NR_renameat2, __NR_mkdir, __NR_mkdirat,
    __NR_rmdir, __NR_link, __NR_linkat, __NR_unlink, __NR_unlinkat, __NR_symlink,
    __NR_symlinkat, __NR_readlink, __NR_readlinkat, __NR_chmod, __NR_fchmod, __NR_fchmodat,
    __NR_fchmodat2, __NR_chown, __NR_fchown, __NR_lchown, __NR_fchownat, __NR_umask,
    __NR_mknod, __NR_mknodat, __NR_utime, __NR_utimes, __NR_utimensat, __NR_futimesat,
    __NR_statfs, __NR_fstatfs, __NR_setxattr, __NR_lsetxattr, __NR_fsetxattr, __NR_getxattr,
    __NR_lgetxattr, __NR_fgetxattr, __NR_listxattr, __NR_llistxattr, __NR_flistxattr,
    __NR_removexattr, __NR_lremovexattr, __NR_fremovexattr, __NR_name_to_handle_at,
    __NR_sendfile, __NR_splice, __NR_tee, __NR_vmsplice, __NR_copy_file_range,
    __NR_inotify_init, __NR_inotify_init1, __NR_inotify_add_watch, __NR_inotify_rm_watch,
    __NR_fanotify_mark, __NR_memfd_create, __NR_memfd_secret, __NR_cachestat,
    __NR_io_setup, __NR_io_destroy, __NR_io_getevents, __NR_io_pgetevents, __NR_io_submit,
    __NR_io_cancel, __NR_ioprio_get, __NR_ioprio_set,
    /* memory */
    __NR_brk, __NR_mmap, __NR_mprotect, __NR_munmap, __NR_mremap, __NR_msync, __NR_mincore,
    __NR_madvise, __NR_mlock, __NR_mlock2, __NR_munlock, __NR_mlockall, __NR_munlockall,
    __NR_membarrier, __NR_pkey_mprotect, __NR_pkey_alloc, __NR_pkey_free,
    __NR_get_mempolicy, __NR_process_mrelease, __NR_map_shadow_stack, __NR_mseal,
    /* processes, threads, identity */
    __NR_fork, __NR_vfork, __NR_execve, __NR_execveat, __NR_exit, __NR_exit_group,
    __NR_wait4, __NR_waitid, __NR_getpid, __NR_getppid, __NR_gettid, __NR_getpgrp,
    __NR_getpgid, __NR_setpgid, __NR_getsid, __NR_setsid, __NR_getuid, __NR_geteuid,
    __NR_getgid, __NR_getegid, __NR_getresuid, __NR_getresgid, __NR_getgroups, __NR_setuid,
    __NR_setgid, __NR_setreuid, __NR_setregid, __NR_setresuid, __NR_setresgid,
    __NR_setfsuid, __NR_setfsgid, __NR_setgroups, __NR_capget, __NR_capset, __NR_prctl,
    __NR_arch_prctl, __NR_set_tid_address, __NR_set_robust_list, __NR_get_robust_list,
    __NR_rseq, __NR_futex, __NR_futex_waitv, __NR_futex_wake, __NR_futex_wait,
    __NR_futex_requeue, __NR_getrlimit, __NR_setrlimit, __NR_prlimit64, __NR_getrusage,
    __NR_times, __NR_getpriority, __NR_setpriority, __NR_sched_yield, __NR_sched_setparam,
    __NR_sched_getparam, __NR_sched_setscheduler, __NR_sched_getscheduler,
    __NR_sched_get_priority_max, __NR_sched_get_priority_min, __NR_sched_rr_get_interval,
    __NR_sched_setaffinity, __NR_sched_getaffinity, __NR_sched_setattr, __NR_sched_getattr,
    __NR_getcpu, __NR_uname, __NR_sysinfo, __NR_seccomp, __NR_restart_syscall, __NR_getrandom,
    __NR_pidfd_open, __NR_pidfd_send_signal, __NR_landlock_create_ruleset,
    __NR_landlock_add_rule, __NR_landlock_restrict_self, __NR_get_thread_area,
    __NR_set_thread_area,
    /* signals */
    __NR_rt_sigaction, __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_rt_sigpending,
    __NR_rt_sigtimedwait, __NR_rt_sigqueueinfo, __NR_rt_tgsigqueueinfo, __NR_rt_sigsuspend,
    __NR_sigaltstack, __NR_kill, __NR_tkill, __NR_tgkill, __NR_pause, __NR_signalfd,
    __NR_signalfd4,
    /* time */
    __NR_nanosleep, __NR_clock_nanosleep, __NR_clock_gettime, __NR_clock_getres,
    __NR_gettimeofday, __NR_time, __NR_alarm, __NR_getitimer, __NR_setitimer,
    __NR_timer_create, __NR_timer_settime, __NR_timer_gettime, __NR_timer_getoverrun,
    __NR_timer_delete, __NR_timerfd_create, __NR_timerfd_settime, __NR_timerfd_gettime,
    /* polling and events */
    __NR_poll, __NR_ppoll, __NR_select, __NR_pselect6, __NR_epoll_create,
    __NR_epoll_create1, __NR_epoll_ctl, __NR_epoll_wait, __NR_epoll_pwait,
    __NR_epoll_pwait2, __NR_eventfd, __NR_eventfd2, __NR_pipe, __NR_pipe2,
    /* sockets (socket and socketpair have argument blocks) */
    __NR_connect, __NR_accept, __NR_accept4, __NR_bind, __NR_listen, __NR_sendto,
    __NR_recvfrom, __NR_sendmsg, __NR_recvmsg, __NR_sendmmsg, __NR_recvmmsg, __NR_shutdown,
    __NR_getsockname, __NR_getpeername, __NR_setsockopt, __NR_getsockopt,
    /* System V and POSIX IPC (the sandbox has its own IPC namespace) */
    __NR_shmget, __NR_shmat, __NR_shmctl, __NR_shmdt, __NR_semget, __NR_semop, __NR_semctl,
    __NR_semtimedop, __NR_msgget, __NR_msgsnd, __NR_msgrcv, __NR_msgctl, __NR_mq_open,
    __NR_mq_unlink, __NR_mq_timedsend, __NR_mq_timedreceive, __NR_mq_notify,
    __NR_mq_getsetattr,
};
/* clang-format on */

struct sc__bld {
    struct sock_filter *ins;
    size_t n, cap;
    int err;
};

static void sc__emit(struct sc__bld *b, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
    if (b->err)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        struct sock_filter *ni = realloc(b->ins, nc * sizeof *ni);
        if (!ni) {
            b->err = -ENOMEM;
            return;
        }
        b->ins = ni;
        b->cap = nc;
    }
    b->ins[b->n++] = (struct sock_filter)BPF_JUMP(code, k, jt, jf);
}

static void sc__ld(struct sc__bld *b, uint32_t off)
{
    sc__emit(b, BPF_LD | BPF_W | BPF_ABS, 0, 0, off);
}

static void sc__ret(struct sc__bld *b, uint32_t action)
{
    sc__emit(b, BPF_RET | BPF_K, 0, 0, action);
}

/* if (A == k) return action; */
static void sc__ret_if_eq(struct sc__bld *b, uint32_t k, uint32_t action)
{
    sc__emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, k);
    sc__ret(b, action);
}

/* if (A == k) { sub } -- sub must end in a return. */
static void sc__block_if_eq(struct sc__bld *b, uint32_t k, const struct sc__bld *sub)
{
    if (sub->err || sub->n > 255) {
        b->err = sub->err ? sub->err : -E2BIG;
        return;
    }
    sc__emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)sub->n, k);
    for (size_t i = 0; i < sub->n && !b->err; i++)
        sc__emit(b, sub->ins[i].code, sub->ins[i].jt, sub->ins[i].jf, sub->ins[i].k);
}

/* ---- the search tree ---------------------------------------------------------------- */

#define SC_NR_LIMIT   512 /* actions are listed below this; every number above is ENOSYS */
#define SC_MAX_BLOCKS 16

enum { SC_ACT_ENOSYS = 0, SC_ACT_ALLOW, SC_ACT_EPERM, SC_ACT_BLOCK /* + block index */ };

struct sc__block {
    int nr;
    struct sc__bld b; /* loads what it needs, ends in a return */
};

struct sc__range {
    uint32_t lo; /* up to the next range's lo */
    uint16_t act;
};

static int sc__set(uint16_t *act, int nr, uint16_t a)
{
    if (nr < 0 || nr >= SC_NR_LIMIT)
        return -ERANGE;
    act[nr] = a;
    return 0;
}

/* Moves sub into the next argument block of syscall nr. */
static void sc__block_syscall(struct sc__block *blocks, size_t *n, int nr, struct sc__bld *sub)
{
    if (*n == SC_MAX_BLOCKS) {
        sub->err = -E2BIG;
        return;
    }
    blocks[*n].nr = nr;
    blocks[*n].b = *sub;
    (*n)++;
    memset(sub, 0, sizeof *sub);
}

static void sc__append(struct sc__bld *b, const struct sc__bld *sub)
{
    if (sub->err && !b->err)
        b->err = sub->err;
    for (size_t i = 0; i < sub->n && !b->err; i++)
        sc__emit(b, sub->ins[i].code, sub->ins[i].jt, sub->ins[i].jf, sub->ins[i].k);
}

/* Emits the decision for ranges r[0..n) (A holds the syscall number). */
static void sc__tree(struct sc__bld *b, const struct sc__range *r, size_t n,
                     const struct sc__block *blocks)
{
    if (n == 1) {
        switch (r->act) {
        case SC_ACT_ENOSYS:
            sc__ret(b, SC_RET_ERRNO(ENOSYS));
            return;
        case SC_ACT_ALLOW:
            sc__ret(b, SC_RET_ALLOW);
            return;
        case SC_ACT_EPERM:
            sc__ret(b, SC_RET_ERRNO(EPERM));
            return;
        default:
            sc__append(b, &blocks[r->act - SC_ACT_BLOCK].b);
            return;
        }
    }
    size_t m = n / 2;
    struct sc__bld left = {0}, right = {0};
    sc__tree(&left, r, m, blocks);
    sc__tree(&right, r + m, n - m, blocks);
    /* if (nr >= r[m].lo) goto right; (else fall into left, which ends in returns) */
    if (left.n <= 255) {
        sc__emit(b, BPF_JMP | BPF_JGE | BPF_K, (uint8_t)left.n, 0, r[m].lo);
    } else {
        sc__emit(b, BPF_JMP | BPF_JGE | BPF_K, 0, 1, r[m].lo);
        sc__emit(b, BPF_JMP | BPF_JA, 0, 0, (uint32_t)left.n);
    }
    sc__append(b, &left);
    sc__append(b, &right);
    free(left.ins);
    free(right.ins);
}

int jail_seccomp_build(struct sock_filter **out, size_t *len)
{
    struct sc__bld b = {0}, s = {0}, t = {0};
    struct sc__block blocks[SC_MAX_BLOCKS];
    size_t n_blocks = 0;

    sc__ld(&b, SC_OFF_ARCH);
    sc__emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH_X86_64);
    sc__ret(&b, SC_RET_KILL);
    sc__ld(&b, SC_OFF_NR);
    sc__emit(&b, BPF_JMP | BPF_JGE | BPF_K, 0, 1, SC_X32_SYSCALL_BIT);
    sc__ret(&b, SC_RET_KILL);

    /* ioctl(fd, cmd, ...): cmd is an unsigned int; the kernel ignores the high bits. */
    sc__ld(&s, SC_OFF_ARG(1));
    sc__ret_if_eq(&s, TIOCSTI, SC_RET_ERRNO(EPERM));
    sc__ret_if_eq(&s, TIOCLINUX, SC_RET_ERRNO(EPERM));
    sc__ret_if_eq(&s, TIOCSETD, SC_RET_ERRNO(EPERM));
    sc__ret(&s, SC_RET_ALLOW);
    sc__block_syscall(blocks, &n_blocks, __NR_ioctl, &s);

    /* clone(flags, ...): no new namespaces. */
    sc__ld(&s, SC_OFF_ARG(0));
    sc__emit(&s, BPF_JMP | BPF_JSET | BPF_K, 0, 1, SC_NS_FLAGS);
    sc__ret(&s, SC_RET_ERRNO(EPERM));
    sc__ret(&s, SC_RET_ALLOW);
    sc__block_syscall(blocks, &n_blocks, __NR_clone, &s);

    sc__ret(&s, SC_RET_ERRNO(ENOSYS));
    sc__block_syscall(blocks, &n_blocks, __NR_clone3, &s);

    sc__ld(&s, SC_OFF_ARG(0));
    sc__emit(&s, BPF_JMP | BPF_JSET | BPF_K, 0, 1, SC_NS_FLAGS | CLONE_NEWTIME);
    sc__ret(&s, SC_RET_ERRNO(EPERM));
    sc__ret(&s, SC_RET_ALLOW);
    sc__block_syscall(blocks, &n_blocks, __NR_unshare, &s);

    /* socket(domain, type, protocol) */
    sc__ld(&s, SC_OFF_ARG(0));
    sc__ret_if_eq(&s, AF_UNIX, SC_RET_ALLOW);
    /* inet: type & SOCK_TYPE_MASK (0xf; the rest are SOCK_NONBLOCK/SOCK_CLOEXEC) */
    sc__ld(&t, SC_OFF_ARG(1));
    sc__emit(&t, BPF_ALU | BPF_AND | BPF_K, 0, 0, 0xf);
    sc__ret_if_eq(&t, SOCK_STREAM, SC_RET_ALLOW);
    sc__ret_if_eq(&t, SOCK_DGRAM, SC_RET_ALLOW);
    sc__ret_if_eq(&t, SOCK_SEQPACKET, SC_RET_ALLOW);
    sc__ret(&t, SC_RET_ERRNO(EPERM));
    sc__block_if_eq(&s, AF_INET, &t);
    sc__block_if_eq(&s, AF_INET6, &t);
    free(t.ins);
    memset(&t, 0, sizeof t);
    sc__ld(&t, SC_OFF_ARG(2));
    sc__ret_if_eq(&t, NETLINK_ROUTE, SC_RET_ALLOW);
    sc__ret_if_eq(&t, NETLINK_SOCK_DIAG, SC_RET_ALLOW);
    sc__ret(&t, SC_RET_ERRNO(EPROTONOSUPPORT));
    sc__block_if_eq(&s, AF_NETLINK, &t);
    free(t.ins);
    memset(&t, 0, sizeof t);
    sc__ret(&s, SC_RET_ERRNO(EAFNOSUPPORT));
    sc__block_syscall(blocks, &n_blocks, __NR_socket, &s);

    sc__ld(&s, SC_OFF_ARG(0));
    sc__ret_if_eq(&s, AF_UNIX, SC_RET_ALLOW);
    sc__ret(&s, SC_RET_ERRNO(EAFNOSUPPORT));
    sc__block_syscall(blocks, &n_blocks, __NR_socketpair, &s);

    /* personality: the values Docker allows. */
    sc__ld(&s, SC_OFF_ARG(0));
    sc__ret_if_eq(&s, 0x0, SC_RET_ALLOW);        /* PER_LINUX */
    sc__ret_if_eq(&s, 0x8, SC_RET_ALLOW);        /* PER_LINUX32 */
    sc__ret_if_eq(&s, 0x20000, SC_RET_ALLOW);    /* UNAME26 */
    sc__ret_if_eq(&s, 0x20008, SC_RET_ALLOW);    /* UNAME26 | PER_LINUX32 */
    sc__ret_if_eq(&s, 0xffffffff, SC_RET_ALLOW); /* query */
    sc__ret(&s, SC_RET_ERRNO(EPERM));
    sc__block_syscall(blocks, &n_blocks, __NR_personality, &s);

    /* ptrace(request, ...): no attaching; PTRACE_TRACEME and requests on one's own
     * tracees stay possible. */
    sc__ld(&s, SC_OFF_ARG(0));
    sc__ret_if_eq(&s, 16 /* PTRACE_ATTACH */, SC_RET_ERRNO(EPERM));
    sc__ret_if_eq(&s, 0x4206 /* PTRACE_SEIZE */, SC_RET_ERRNO(EPERM));
    sc__ret(&s, SC_RET_ALLOW);
    sc__block_syscall(blocks, &n_blocks, __NR_ptrace, &s);

    /* The action of every number: allow list, then the deny list over it, then the
     * argument blocks over both (the order of precedence of the old linear program). */
    uint16_t act[SC_NR_LIMIT];
    memset(act, 0, sizeof act); /* SC_ACT_ENOSYS */
    int rc = 0;
    for (size_t i = 0; i < sizeof sc__allow / sizeof sc__allow[0]; i++)
        rc |= sc__set(act, sc__allow[i], SC_ACT_ALLOW);
    for (size_t i = 0; i < sizeof sc__deny / sizeof sc__deny[0]; i++)
        rc |= sc__set(act, sc__deny[i], SC_ACT_EPERM);
    for (size_t i = 0; i < n_blocks; i++)
        rc |= sc__set(act, blocks[i].nr, (uint16_t)(SC_ACT_BLOCK + i));
    struct sc__range r[SC_NR_LIMIT + 1];
    size_t nr = 0;
    for (uint32_t k = 0; k < SC_NR_LIMIT; k++)
        if (nr == 0 || r[nr - 1].act != act[k])
            r[nr++] = (struct sc__range){k, act[k]};
    if (r[nr - 1].act != SC_ACT_ENOSYS) /* everything from SC_NR_LIMIT up */
        r[nr++] = (struct sc__range){SC_NR_LIMIT, SC_ACT_ENOSYS};
    if (!rc)
        sc__tree(&b, r, nr, blocks);
    for (size_t i = 0; i < n_blocks; i++)
        free(blocks[i].b.ins);

    if (rc || b.err || s.err || t.err || b.n > BPF_MAXINSNS) {
        int e = rc ? rc : b.err ? b.err : s.err ? s.err : t.err ? t.err : -E2BIG;
        free(b.ins);
        free(s.ins);
        free(t.ins);
        return e;
    }
    free(s.ins);
    free(t.ins);
    *out = b.ins;
    *len = b.n;
    return 0;
}

int jail_seccomp_install(const struct sock_filter *prog, size_t len, struct al_error *err)
{
    struct sock_fprog fp = {.len = (unsigned short)len, .filter = (struct sock_filter *)prog};
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) < 0) {
        if (errno == ENOSYS || errno == EINVAL)
            return al_error_set(err, -errno,
                                "seccomp filters are not supported by this kernel (%s): "
                                "CONFIG_SECCOMP_FILTER is required",
                                strerror(errno));
        return al_error_set(err, -errno, "cannot install the seccomp filter: %s", strerror(errno));
    }
    return 0;
}
