/* vmm/jail/seccomp: see seccomp.h. The program is made by the one generator,
 * common/seccomp (whose header says why it is not libseccomp); this file is the policy. */
#include "seccomp.h"

#include <errno.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/netlink.h>

#include "common/cleanup.h"

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

#define SC_NS_FLAGS                                                                               \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
     CLONE_NEWNET)

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

int jail_seccomp_build(struct sock_filter **out, size_t *len)
{
    struct al_sc_policy pol;
    struct al_sc_prog s = {0}, t = {0};
    /* Unknown numbers: ENOSYS, as an older kernel would answer. The order of precedence:
     * the allow list, the deny list over it, the argument blocks over both. */
    al_sc_policy_init(&pol, AL_SC_ERRNO(ENOSYS), AL_SC_KILL);
    al_sc_policy_set(&pol, sc__allow, AL_ARRAY_SIZE(sc__allow), AL_SC_ALLOW);
    al_sc_policy_set(&pol, sc__deny, AL_ARRAY_SIZE(sc__deny), AL_SC_ERRNO(EPERM));

    /* ioctl(fd, cmd, ...): cmd is an unsigned int; the kernel ignores the high bits. */
    al_sc_ld_arg(&s, 1);
    al_sc_ret_if_eq(&s, TIOCSTI, AL_SC_ERRNO(EPERM));
    al_sc_ret_if_eq(&s, TIOCLINUX, AL_SC_ERRNO(EPERM));
    al_sc_ret_if_eq(&s, TIOCSETD, AL_SC_ERRNO(EPERM));
    al_sc_ret(&s, AL_SC_ALLOW);
    al_sc_policy_block(&pol, __NR_ioctl, &s);

    /* clone(flags, ...): no new namespaces. */
    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_any(&s, SC_NS_FLAGS, AL_SC_ERRNO(EPERM));
    al_sc_ret(&s, AL_SC_ALLOW);
    al_sc_policy_block(&pol, __NR_clone, &s);

    /* clone3: its flags live in memory the filter cannot read; libc falls back to clone. */
    al_sc_ret(&s, AL_SC_ERRNO(ENOSYS));
    al_sc_policy_block(&pol, __NR_clone3, &s);

    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_any(&s, SC_NS_FLAGS | CLONE_NEWTIME, AL_SC_ERRNO(EPERM));
    al_sc_ret(&s, AL_SC_ALLOW);
    al_sc_policy_block(&pol, __NR_unshare, &s);

    /* socket(domain, type, protocol) */
    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_eq(&s, AF_UNIX, AL_SC_ALLOW);
    /* inet: type & SOCK_TYPE_MASK (0xf; the rest are SOCK_NONBLOCK/SOCK_CLOEXEC) */
    al_sc_ld_arg(&t, 1);
    al_sc_and(&t, 0xf);
    al_sc_ret_if_eq(&t, SOCK_STREAM, AL_SC_ALLOW);
    al_sc_ret_if_eq(&t, SOCK_DGRAM, AL_SC_ALLOW);
    al_sc_ret_if_eq(&t, SOCK_SEQPACKET, AL_SC_ALLOW);
    al_sc_ret(&t, AL_SC_ERRNO(EPERM));
    al_sc_block_if_eq(&s, AF_INET, &t);
    al_sc_block_if_eq(&s, AF_INET6, &t);
    al_sc_prog_free(&t);
    al_sc_ld_arg(&t, 2);
    al_sc_ret_if_eq(&t, NETLINK_ROUTE, AL_SC_ALLOW);
    al_sc_ret_if_eq(&t, NETLINK_SOCK_DIAG, AL_SC_ALLOW);
    al_sc_ret(&t, AL_SC_ERRNO(EPROTONOSUPPORT));
    al_sc_block_if_eq(&s, AF_NETLINK, &t);
    al_sc_prog_free(&t);
    al_sc_ret(&s, AL_SC_ERRNO(EAFNOSUPPORT));
    al_sc_policy_block(&pol, __NR_socket, &s);

    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_eq(&s, AF_UNIX, AL_SC_ALLOW);
    al_sc_ret(&s, AL_SC_ERRNO(EAFNOSUPPORT));
    al_sc_policy_block(&pol, __NR_socketpair, &s);

    /* personality: the values Docker allows. */
    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_eq(&s, 0x0, AL_SC_ALLOW);        /* PER_LINUX */
    al_sc_ret_if_eq(&s, 0x8, AL_SC_ALLOW);        /* PER_LINUX32 */
    al_sc_ret_if_eq(&s, 0x20000, AL_SC_ALLOW);    /* UNAME26 */
    al_sc_ret_if_eq(&s, 0x20008, AL_SC_ALLOW);    /* UNAME26 | PER_LINUX32 */
    al_sc_ret_if_eq(&s, 0xffffffff, AL_SC_ALLOW); /* query */
    al_sc_ret(&s, AL_SC_ERRNO(EPERM));
    al_sc_policy_block(&pol, __NR_personality, &s);

    /* ptrace(request, ...): no attaching; PTRACE_TRACEME and requests on one's own
     * tracees stay possible. */
    al_sc_ld_arg(&s, 0);
    al_sc_ret_if_eq(&s, 16 /* PTRACE_ATTACH */, AL_SC_ERRNO(EPERM));
    al_sc_ret_if_eq(&s, 0x4206 /* PTRACE_SEIZE */, AL_SC_ERRNO(EPERM));
    al_sc_ret(&s, AL_SC_ALLOW);
    al_sc_policy_block(&pol, __NR_ptrace, &s);

    return al_sc_build(&pol, out, len);
}
