/* Unit tests: vmm/kvm/confine, the VM process's per-thread filters (made by common/seccomp),
 * each verdict checked through the BPF interpreter of tests/lib, and the vCPU filter once in
 * a real kernel. */
#include "al_test.h"
#include "bpf_run.h"
#include "common/seccomp.h"
#include "vmm/kvm/confine.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define X86_64 AUDIT_ARCH_X86_64

static uint32_t verdict(enum confine_role role, int nr, uint64_t a1)
{
    struct sock_filter *prog = NULL;
    size_t len = 0;
    ck_assert_int_eq(kvm_confine_filter(role, AL_SC_KILL, &prog, &len), 0);
    uint32_t v = al_test_bpf_run(prog, len, X86_64, nr, 3, a1, 0, NULL);
    free(prog);
    return v;
}

START_TEST(vcpu_runs_and_raises_interrupts_only)
{
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_ioctl, KVM_RUN), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_ioctl, KVM_IRQ_LINE), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_ioctl, KVM_GET_REGS), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_ioctl, 0x5401 /* TCGETS */), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_futex, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_openat, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_epoll_wait, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, __NR_execve, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_VCPU, 1000, 0), AL_SC_KILL);
}
END_TEST

START_TEST(devices_do_io_on_what_they_hold)
{
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_epoll_wait, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_preadv, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_accept4, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_ioctl, KVM_RUN), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_openat, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_socket, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_DEVICES, __NR_connect, 0), AL_SC_KILL);
}
END_TEST

START_TEST(control_adds_kvm_ioctls_and_snapshot_files)
{
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_ioctl, KVM_GET_REGS), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_ioctl, KVM_GET_DIRTY_LOG), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_ioctl, 0x5401 /* TCGETS */), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_ioctl, 0x8912 /* SIOCGIFCONF */), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_openat, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_renameat, 0), AL_SC_ALLOW);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_execve, 0), AL_SC_KILL);
    ck_assert_uint_eq(verdict(CONFINE_CONTROL, __NR_socket, 0), AL_SC_KILL);
}
END_TEST

START_TEST(other_architectures_are_killed)
{
    struct sock_filter *prog = NULL;
    size_t len = 0;
    ck_assert_int_eq(kvm_confine_filter(CONFINE_DEVICES, AL_SC_LOG, &prog, &len), 0);
    ck_assert_uint_eq(al_test_bpf_run(prog, len, AUDIT_ARCH_I386, 3, 0, 0, 0, NULL), AL_SC_KILL);
    ck_assert_uint_eq(al_test_bpf_run(prog, len, X86_64, 0x40000000 | __NR_read, 0, 0, 0, NULL),
                      AL_SC_KILL);
    /* the deny action asked for (the sanitizer builds' logging) */
    ck_assert_uint_eq(al_test_bpf_run(prog, len, X86_64, __NR_openat, 0, 0, 0, NULL), AL_SC_LOG);
    free(prog);
}
END_TEST

/* The vCPU filter in a real kernel: a forbidden call kills the process. */
START_TEST(kernel_kills_a_forbidden_call)
{
    struct sock_filter *prog = NULL;
    size_t len = 0;
    ck_assert_int_eq(kvm_confine_filter(CONFINE_VCPU, AL_SC_KILL, &prog, &len), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || al_sc_install(prog, len, 0, NULL) < 0)
            syscall(__NR_exit_group, 10);
        syscall(__NR_getpid);               /* allowed */
        syscall(__NR_openat, -100, "/", 0); /* killed here */
        syscall(__NR_exit_group, 11);
    }
    free(prog);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "status %#x", st);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vmm_kvm_confine");
    TCase *t = tcase_create("filters");
    tcase_add_test(t, vcpu_runs_and_raises_interrupts_only);
    tcase_add_test(t, devices_do_io_on_what_they_hold);
    tcase_add_test(t, control_adds_kvm_ioctls_and_snapshot_files);
    tcase_add_test(t, other_architectures_are_killed);
    tcase_add_test(t, kernel_kills_a_forbidden_call);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
