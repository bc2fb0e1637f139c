/* vmm/jail/seccomp: the system-call filter every process of a jail sandbox runs under.
 *
 * Owns: the sandbox's policy, made into a program by common/seccomp's generator before the
 * clone and installed (al_sc_install) by the sandbox's first process right before it execs
 * the agent, so it covers the agent and everything the agent starts; filters are inherited
 * and cannot be removed.
 *
 * Policy, in the order the program checks it:
 *   1. Architecture: anything but AUDIT_ARCH_X86_64 (i386 via int 0x80) kills the process;
 *      so does the x32 ABI (syscall numbers with bit 30 set).
 *   2. Syscalls with argument checks:
 *        clone      namespace flags (CLONE_NEW*) -> EPERM, otherwise allowed
 *        clone3     ENOSYS (its flags live in memory the filter cannot read; libc falls
 *                   back to clone)
 *        unshare    namespace flags (incl. CLONE_NEWTIME) -> EPERM, otherwise allowed
 *        ioctl      TIOCSTI, TIOCLINUX, TIOCSETD -> EPERM (terminal injection, line
 *                   disciplines); everything else allowed
 *        socket     AF_UNIX; AF_INET/AF_INET6 stream, datagram, seqpacket (raw and packet
 *                   types -> EPERM); AF_NETLINK route and sock_diag only; other families
 *                   -> EAFNOSUPPORT
 *        socketpair AF_UNIX only
 *        personality  the values Docker allows (0, PER_LINUX32, UNAME26, both, query)
 *        ptrace     PTRACE_ATTACH and PTRACE_SEIZE -> EPERM: a process can be traced only
 *                   by its parent after PTRACE_TRACEME (debuggers and strace of a child
 *                   work, attaching to anything else does not)
 *   3. Denied with EPERM (so the error is explicit): the mount family and pivot_root,
 *      chroot, bpf, perf_event_open, kexec_*, *_module, keyctl/add_key/request_key,
 *      userfaultfd, io_uring_*, setns, open_by_handle_at, iopl/ioperm, reboot, swapon/off,
 *      settimeofday/clock_settime/clock_adjtime/adjtimex, acct, quotactl*, syslog,
 *      sethostname/setdomainname, process_vm_*, kcmp, pidfd_getfd, NUMA policy setters,
 *      modify_ldt, vhangup, lookup_dcookie, fanotify_init, statmount/listmount, lsm_*,
 *      and the obsolete ones (uselib, ustat, sysfs, _sysctl, ...).
 *   4. An allowlist of everything ordinary programs need (file, process, memory, signal,
 *      time, socket, IPC calls; the identity calls the agent needs: setresuid, setgroups,
 *      capset, chown; prctl; inotify; ptys via ioctl; landlock).
 *   5. Anything else: ENOSYS, so a syscall newer than this list fails like an old kernel
 *      would and programs take their fallback.
 */
#ifndef AIRLOCK_VMM_JAIL_SECCOMP_H
#define AIRLOCK_VMM_JAIL_SECCOMP_H

#include "common/seccomp.h"

/* Builds the program. *out is malloc'ed (caller frees), *len its instruction count. */
int jail_seccomp_build(struct sock_filter **out, size_t *len);

#endif
