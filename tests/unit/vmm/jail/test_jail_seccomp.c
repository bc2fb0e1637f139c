/* Unit tests: vmm/jail/seccomp. The program is run by a small classic-BPF interpreter
 * (the instructions the seccomp subset allows) over crafted seccomp_data, so every verdict
 * is checked without a kernel; one test also installs it in a child and makes real calls. */
#include "al_test.h"
#include "bpf_run.h"
#include "vmm/jail/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static struct sock_filter *prog;
static size_t prog_len;

static void setup(void)
{
    ck_assert_int_eq(jail_seccomp_build(&prog, &prog_len), 0);
    ck_assert_uint_gt(prog_len, 100);
    ck_assert_uint_le(prog_len, BPF_MAXINSNS);
}

static void teardown(void)
{
    free(prog);
}

static int last_steps; /* instructions the last run() executed */

static uint32_t run(uint32_t arch, int nr, uint64_t a0, uint64_t a1, uint64_t a2)
{
    return al_test_bpf_run(prog, prog_len, arch, nr, a0, a1, a2, &last_steps);
}

#define X86_64 AUDIT_ARCH_X86_64
#define ALLOW  SECCOMP_RET_ALLOW
#define ERR(e) (SECCOMP_RET_ERRNO | (e))
#define KILL   SECCOMP_RET_KILL_PROCESS

START_TEST(arch_and_x32_are_killed)
{
    ck_assert_uint_eq(run(AUDIT_ARCH_I386, 1, 0, 0, 0), KILL);
    ck_assert_uint_eq(run(AUDIT_ARCH_AARCH64, __NR_read, 0, 0, 0), KILL);
    ck_assert_uint_eq(run(X86_64, 0x40000000 | __NR_read, 0, 0, 0), KILL);
    ck_assert_uint_eq(run(X86_64, 0x40000000 | 165 /* mount */, 0, 0, 0), KILL);
    ck_assert_uint_eq(run(X86_64, __NR_read, 0, 0, 0), ALLOW);
}
END_TEST

START_TEST(denied_syscalls_are_eperm)
{
    static const int nrs[] = {
        __NR_mount,
        __NR_umount2,
        __NR_pivot_root,
        __NR_move_mount,
        __NR_open_tree,
        __NR_fsopen,
        __NR_fsmount,
        __NR_fsconfig,
        __NR_fspick,
        __NR_mount_setattr,
        __NR_bpf,
        __NR_perf_event_open,
        __NR_kexec_load,
        __NR_kexec_file_load,
        __NR_init_module,
        __NR_finit_module,
        __NR_delete_module,
        __NR_keyctl,
        __NR_add_key,
        __NR_request_key,
        __NR_userfaultfd,
        __NR_io_uring_setup,
        __NR_io_uring_enter,
        __NR_io_uring_register,
        __NR_setns,
        __NR_open_by_handle_at,
        __NR_iopl,
        __NR_ioperm,
        __NR_reboot,
        __NR_swapon,
        __NR_swapoff,
        __NR_settimeofday,
        __NR_clock_settime,
        __NR_clock_adjtime,
        __NR_adjtimex,
        __NR_acct,
        __NR_quotactl,
        __NR_syslog,
        __NR_sethostname,
        __NR_setdomainname,
        __NR_chroot,
        __NR_process_vm_writev,
        __NR_process_vm_readv,
        __NR_kcmp,
        __NR_pidfd_getfd,
        __NR_modify_ldt,
        __NR_lookup_dcookie,
        __NR_fanotify_init,
        __NR_vhangup,
        __NR_uselib,
    };
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
        ck_assert_msg(run(X86_64, nrs[i], 0, 0, 0) == ERR(EPERM), "syscall %d is not EPERM",
                      nrs[i]);
}
END_TEST

START_TEST(namespaces_cannot_be_created)
{
    ck_assert_uint_eq(run(X86_64, __NR_unshare, CLONE_NEWUSER, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_unshare, CLONE_NEWNS | CLONE_FILES, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_unshare, CLONE_NEWNET, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_unshare, 0x80 /* CLONE_NEWTIME */, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_unshare, CLONE_FILES | CLONE_FS, 0, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_clone, SIGCHLD, 0, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_clone,
                          CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                              CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                              CLONE_CHILD_CLEARTID,
                          0, 0),
                      ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_clone, CLONE_NEWUSER | SIGCHLD, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_clone, CLONE_NEWPID | SIGCHLD, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_clone, CLONE_NEWCGROUP, 0, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_clone3, 0, 0, 0), ERR(ENOSYS));
    ck_assert_uint_eq(run(X86_64, __NR_setns, 3, 0, 0), ERR(EPERM));
}
END_TEST

START_TEST(tiocsti_and_friends_are_blocked)
{
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCSTI, 0), ERR(EPERM));
    /* The kernel reads cmd as an unsigned int: high bits must not hide it. */
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, 0xffffffff00000000ull | TIOCSTI, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCLINUX, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCSETD, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TCGETS, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCSWINSZ, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCSCTTY, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, TIOCGPTN, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ioctl, 0, FIONREAD, 0), ALLOW);
}
END_TEST

START_TEST(sockets)
{
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_UNIX, SOCK_STREAM, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_INET6, SOCK_DGRAM, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_INET, SOCK_RAW, 1), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_INET6, SOCK_RAW | SOCK_CLOEXEC, 58), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_INET, SOCK_PACKET, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_PACKET, SOCK_RAW, 0), ERR(EAFNOSUPPORT));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_ALG, SOCK_SEQPACKET, 0), ERR(EAFNOSUPPORT));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_VSOCK, SOCK_STREAM, 0), ERR(EAFNOSUPPORT));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_NETLINK, SOCK_DGRAM, 4), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_NETLINK, SOCK_RAW, NETLINK_AUDIT),
                      ERR(EPROTONOSUPPORT));
    ck_assert_uint_eq(run(X86_64, __NR_socket, AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT),
                      ERR(EPROTONOSUPPORT));
    ck_assert_uint_eq(run(X86_64, __NR_socketpair, AF_UNIX, SOCK_STREAM, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_socketpair, AF_INET, SOCK_STREAM, 0), ERR(EAFNOSUPPORT));
}
END_TEST

START_TEST(ptrace_only_of_children)
{
    ck_assert_uint_eq(run(X86_64, __NR_ptrace, PTRACE_ATTACH, 1, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_ptrace, PTRACE_SEIZE, 1, 0), ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_ptrace, PTRACE_TRACEME, 0, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ptrace, PTRACE_PEEKDATA, 42, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_ptrace, PTRACE_CONT, 42, 0), ALLOW);
}
END_TEST

START_TEST(personality)
{
    ck_assert_uint_eq(run(X86_64, __NR_personality, 0xffffffff, 0, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_personality, 0, 0, 0), ALLOW);
    ck_assert_uint_eq(run(X86_64, __NR_personality, 0x0040000 /* ADDR_NO_RANDOMIZE */, 0, 0),
                      ERR(EPERM));
    ck_assert_uint_eq(run(X86_64, __NR_personality, 0x0400000 /* READ_IMPLIES_EXEC */, 0, 0),
                      ERR(EPERM));
}
END_TEST

START_TEST(what_the_agent_and_programs_need_is_allowed)
{
    static const int nrs[] = {
        __NR_read,
        __NR_write,
        __NR_openat,
        __NR_close,
        __NR_mmap,
        __NR_execve,
        __NR_fork,
        __NR_vfork,
        __NR_wait4,
        __NR_exit_group,
        __NR_setresuid,
        __NR_setresgid,
        __NR_setgroups,
        __NR_setuid,
        __NR_setgid,
        __NR_chown,
        __NR_fchown,
        __NR_fchownat,
        __NR_lchown,
        __NR_capget,
        __NR_capset,
        __NR_prctl,
        __NR_inotify_init1,
        __NR_inotify_add_watch,
        __NR_inotify_rm_watch,
        __NR_epoll_create1,
        __NR_epoll_pwait,
        __NR_eventfd2,
        __NR_signalfd4,
        __NR_timerfd_create,
        __NR_pipe2,
        __NR_accept4,
        __NR_getrandom,
        __NR_memfd_create,
        __NR_statx,
        __NR_renameat2,
        __NR_kill,
        __NR_pidfd_open,
        __NR_pidfd_send_signal,
        __NR_waitid,
        __NR_futex,
        __NR_rseq,
        __NR_set_robust_list,
        __NR_clock_nanosleep,
        __NR_sched_getaffinity,
        __NR_setsid,
        __NR_setpgid,
        __NR_getdents64,
        __NR_unlinkat,
        __NR_mkdirat,
        __NR_fchmodat,
        __NR_utimensat,
        __NR_copy_file_range,
        __NR_sendfile,
        __NR_close_range,
        __NR_landlock_create_ruleset,
        __NR_seccomp,
        __NR_mknodat,
        __NR_shmget,
        __NR_sched_yield,
        __NR_getpriority,
        __NR_setrlimit,
        __NR_prlimit64,
    };
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
        ck_assert_msg(run(X86_64, nrs[i], 0, 0, 0) == ALLOW, "syscall %d is not allowed", nrs[i]);
}
END_TEST

START_TEST(unknown_syscalls_are_enosys)
{
    ck_assert_uint_eq(run(X86_64, 999, 0, 0, 0), ERR(ENOSYS));
    ck_assert_uint_eq(run(X86_64, 0x3fffffff, 0, 0, 0), ERR(ENOSYS));
    /* Every number below the x32 bit gets exactly one of the defined verdicts. */
    for (int nr = 0; nr < 1024; nr++) {
        uint32_t r = run(X86_64, nr, 0, 0, 0);
        ck_assert_msg(r == ALLOW || r == ERR(EPERM) || r == ERR(ENOSYS) || r == ERR(EAFNOSUPPORT),
                      "syscall %d: unexpected verdict 0x%x", nr, r);
    }
}
END_TEST

/* The same program in a real kernel: a child installs it and makes the calls. */
/* A binary search on the number: every call is decided in a few instructions (the kernel
 * runs the filter for every number when it is installed, and for every uncached call). */
START_TEST(every_call_is_decided_in_a_few_steps)
{
    int worst = 0;
    for (int nr = 0; nr < 1024; nr++) {
        uint32_t v = run(X86_64, nr, 0, 0, 0);
        ck_assert(v == ALLOW || v == ERR(EPERM) || v == ERR(ENOSYS) || v == ERR(EAFNOSUPPORT));
        worst = last_steps > worst ? last_steps : worst;
    }
    ck_assert_msg(worst <= 32, "a call took %d instructions", worst);
    ck_assert_uint_eq(run(X86_64, 0x3fffffff, 0, 0, 0), ERR(ENOSYS));
    ck_assert_uint_eq(run(X86_64, 511, 0, 0, 0), ERR(ENOSYS));
    ck_assert_uint_eq(run(X86_64, 512, 0, 0, 0), ERR(ENOSYS));
}
END_TEST

START_TEST(kernel_enforces_it)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            _exit(10);
        if (al_sc_install(prog, prog_len, 0, NULL) < 0)
            _exit(11);
        if (syscall(__NR_mount, "none", "/mnt", "tmpfs", 0, NULL) != -1 || errno != EPERM)
            _exit(12);
        if (unshare(CLONE_NEWUSER) != -1 || errno != EPERM)
            _exit(13);
        if (socket(AF_PACKET, SOCK_RAW, 0) != -1 || errno != EAFNOSUPPORT)
            _exit(14);
        if (syscall(__NR_clone3, NULL, 0) != -1 || errno != ENOSYS)
            _exit(15);
        char c = 'x';
        if (ioctl(0, TIOCSTI, &c) != -1 || errno != EPERM)
            _exit(16);
        if (syscall(999) != -1 || errno != ENOSYS)
            _exit(17);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            _exit(18);
        close(fd);
        pid_t c2 = fork(); /* glibc: clone3 -> ENOSYS -> clone */
        if (c2 < 0)
            _exit(19);
        if (c2 == 0)
            _exit(0);
        int st;
        if (waitpid(c2, &st, 0) != c2 || !WIFEXITED(st))
            _exit(20);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed at step %d (signal %d)",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jail_seccomp");
    TCase *t = tcase_create("filter");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, arch_and_x32_are_killed);
    tcase_add_test(t, denied_syscalls_are_eperm);
    tcase_add_test(t, namespaces_cannot_be_created);
    tcase_add_test(t, tiocsti_and_friends_are_blocked);
    tcase_add_test(t, sockets);
    tcase_add_test(t, ptrace_only_of_children);
    tcase_add_test(t, personality);
    tcase_add_test(t, what_the_agent_and_programs_need_is_allowed);
    tcase_add_test(t, unknown_syscalls_are_enosys);
    tcase_add_test(t, every_call_is_decided_in_a_few_steps);
    tcase_add_test(t, kernel_enforces_it);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
