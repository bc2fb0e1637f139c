/* common/seccomp: the one generator of seccomp filters (classic BPF, x86_64), used by the
 * jail's sandbox filter (vmm/jail/seccomp.c), the KVM monitor's per-thread filters
 * (vmm/kvm/confine.c) and any confined helper.
 *
 * Owns: turning a policy (an action per syscall number, argument blocks for the calls that
 * need their arguments checked, an action for everything else) into a program, and
 * installing it. A policy is data its user owns; this file knows no syscall by name.
 *
 * Why a generator of our own and not libseccomp:
 *   - Expressiveness: the jail's policy needs per-syscall fallbacks libseccomp cannot state
 *     (it refuses two comparisons of one argument and overlapping rules with different
 *     actions), e.g. "socket: these families are allowed, raw types are EPERM, every other
 *     family is EAFNOSUPPORT". Argument blocks here are small BPF fragments built with the
 *     al_sc_* calls below, so any such decision is one block.
 *   - Installing after clone: the program is a plain array built before the sandbox's first
 *     process is cloned; the child only calls seccomp(2) with it (no allocation, no library
 *     state in a process that is about to exec).
 *   - The static-PIE airlock-vmm links no libseccomp (one library less to load and relocate
 *     at each of its starts, one dependency less on the host).
 *   - Auditability: the program's shape is fixed and short (below), and the unit tests run
 *     it through a BPF interpreter for every verdict.
 *   - Speed: a filter is built per sandbox start and per KVM monitor thread. Building the
 *     jail's filter takes about 5 us and each of the KVM monitor's 2-7 us, where libseccomp
 *     took 30-90 us to build and export the same KVM filters (2,000 builds each, Release,
 *     the 2-core development VM). The same verdicts for every number and the ioctl
 *     requests of the KVM filters; another architecture now kills the process (libseccomp
 *     killed the thread).
 *
 * Shape: [arch check][x32 check][a binary search on the syscall number]. Every number below
 * AL_SC_NR_LIMIT has one action (a return value, or an argument block); runs of numbers
 * with the same action are ranges, and the program is a balanced tree of "nr >= k"
 * comparisons over the ranges whose leaves return (or run the block, which returns). Any
 * call takes about 8 comparisons. This matters twice: when the filter is installed the
 * kernel runs it for every syscall number to build its cache of constant results (with
 * interrupts off, on every sandbox creation), and at run time for each call the cache does
 * not cover (denied ones and argument blocks). Jumps over more than 255 instructions go
 * through a BPF_JA (32-bit offset). Arguments are compared in their low 32 bits.
 */
#ifndef AIRLOCK_COMMON_SECCOMP_H
#define AIRLOCK_COMMON_SECCOMP_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define AL_SC_NR_LIMIT   512 /* actions are per number below this; above, `otherwise` */
#define AL_SC_MAX_BLOCKS 16

#define AL_SC_ALLOW    SECCOMP_RET_ALLOW
#define AL_SC_KILL     SECCOMP_RET_KILL_PROCESS
#define AL_SC_LOG      SECCOMP_RET_LOG
#define AL_SC_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e)&SECCOMP_RET_DATA))

/* A program or a fragment of one (an argument block). Zero-initialise; errors stick. */
struct al_sc_prog {
    struct sock_filter *ins;
    size_t n, cap;
    int err;
};

/* A = the low 32 bits of argument i / A &= k. */
void al_sc_ld_arg(struct al_sc_prog *p, unsigned i);
void al_sc_and(struct al_sc_prog *p, uint32_t k);
/* return action / if (A == k) return action / if (A & mask) return action */
void al_sc_ret(struct al_sc_prog *p, uint32_t action);
void al_sc_ret_if_eq(struct al_sc_prog *p, uint32_t k, uint32_t action);
void al_sc_ret_if_any(struct al_sc_prog *p, uint32_t mask, uint32_t action);
/* if (A == k) { sub } (sub must end in a return; at most 255 instructions). */
void al_sc_block_if_eq(struct al_sc_prog *p, uint32_t k, const struct al_sc_prog *sub);
void al_sc_prog_free(struct al_sc_prog *p);

struct al_sc_policy {
    uint32_t otherwise; /* every number with no action set */
    uint32_t bad_arch;  /* another architecture (i386 via int 0x80) or the x32 ABI */
    uint32_t act[AL_SC_NR_LIMIT];
    uint8_t block[AL_SC_NR_LIMIT]; /* 0, or 1 + index into blocks */
    struct al_sc_prog blocks[AL_SC_MAX_BLOCKS];
    size_t n_blocks;
    int err;
};

/* Every number of the policy gets `otherwise`. */
void al_sc_policy_init(struct al_sc_policy *pol, uint32_t otherwise, uint32_t bad_arch);
/* Each listed number gets action (a later call overrides an earlier one). */
void al_sc_policy_set(struct al_sc_policy *pol, const int *nrs, size_t n, uint32_t action);
/* Syscall nr runs sub (moved into the policy; *sub is left empty), over any action. */
void al_sc_policy_block(struct al_sc_policy *pol, int nr, struct al_sc_prog *sub);
/* Builds the program (*out malloc'ed, caller frees; *len instructions) and releases the
 * policy's blocks. -ERANGE for a number out of range, -E2BIG, -ENOMEM. */
int al_sc_build(struct al_sc_policy *pol, struct sock_filter **out, size_t *len);
/* Installs it on the calling thread (flags: SECCOMP_FILTER_FLAG_*; needs no_new_privs or
 * CAP_SYS_ADMIN). Async-signal-safe apart from the error message. */
int al_sc_install(const struct sock_filter *prog, size_t len, unsigned flags, struct al_error *err);

#endif
