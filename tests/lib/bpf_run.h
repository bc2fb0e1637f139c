/* tests/lib/bpf_run: a classic-BPF interpreter of the instructions seccomp filters made by
 * common/seccomp use, so unit tests check every verdict of a filter without a kernel. Fails
 * the test on any other instruction, an out-of-bounds load or a jump out of the program. */
#ifndef AIRLOCK_TESTS_BPF_RUN_H
#define AIRLOCK_TESTS_BPF_RUN_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <string.h>

#include "al_test.h"

/* The action the filter returns for one call; *steps: the instructions it executed. */
static inline uint32_t al_test_bpf_run(const struct sock_filter *prog, size_t len, uint32_t arch,
                                       int nr, uint64_t a0, uint64_t a1, uint64_t a2, int *steps)
{
    struct seccomp_data d = {.nr = nr, .arch = arch};
    d.args[0] = a0;
    d.args[1] = a1;
    d.args[2] = a2;
    uint32_t A = 0;
    size_t pc = 0;
    for (int n = 0; n < 100000; n++) {
        ck_assert_uint_lt(pc, len);
        struct sock_filter f = prog[pc];
        switch (f.code) {
        case BPF_LD | BPF_W | BPF_ABS:
            ck_assert_uint_le(f.k + 4, sizeof d);
            ck_assert_uint_eq(f.k % 4, 0);
            memcpy(&A, (const char *)&d + f.k, 4);
            pc++;
            break;
        case BPF_ALU | BPF_AND | BPF_K:
            A &= f.k;
            pc++;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
            pc += 1 + (A == f.k ? f.jt : f.jf);
            break;
        case BPF_JMP | BPF_JGE | BPF_K:
            pc += 1 + (A >= f.k ? f.jt : f.jf);
            break;
        case BPF_JMP | BPF_JSET | BPF_K:
            pc += 1 + ((A & f.k) ? f.jt : f.jf);
            break;
        case BPF_JMP | BPF_JA:
            pc += 1 + f.k;
            break;
        case BPF_RET | BPF_K:
            if (steps)
                *steps = n + 1;
            return f.k;
        default:
            ck_abort_msg("unexpected BPF instruction 0x%x at %zu", f.code, pc);
        }
    }
    ck_abort_msg("the filter did not return");
    return 0;
}

#endif
