/* common/seccomp: see seccomp.h. */
#include "common/seccomp.h"

#include <errno.h>
#include <linux/audit.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SC_X32_SYSCALL_BIT 0x40000000u
#define SC_OFF_NR          0u
#define SC_OFF_ARCH        4u
#define SC_OFF_ARG(i)      (16u + 8u * (i)) /* low 32 bits (little-endian) */

static void sc__emit(struct al_sc_prog *b, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
    if (b->err)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
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

static void sc__ld(struct al_sc_prog *b, uint32_t off)
{
    sc__emit(b, BPF_LD | BPF_W | BPF_ABS, 0, 0, off);
}

void al_sc_ld_arg(struct al_sc_prog *p, unsigned i)
{
    if (i > 5) {
        p->err = p->err ? p->err : -ERANGE;
        return;
    }
    sc__ld(p, SC_OFF_ARG(i));
}

void al_sc_and(struct al_sc_prog *p, uint32_t k)
{
    sc__emit(p, BPF_ALU | BPF_AND | BPF_K, 0, 0, k);
}

void al_sc_ret(struct al_sc_prog *p, uint32_t action)
{
    sc__emit(p, BPF_RET | BPF_K, 0, 0, action);
}

void al_sc_ret_if_eq(struct al_sc_prog *p, uint32_t k, uint32_t action)
{
    sc__emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, k);
    al_sc_ret(p, action);
}

void al_sc_ret_if_any(struct al_sc_prog *p, uint32_t mask, uint32_t action)
{
    sc__emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 1, mask);
    al_sc_ret(p, action);
}

static void sc__append(struct al_sc_prog *b, const struct al_sc_prog *sub)
{
    if (sub->err && !b->err)
        b->err = sub->err;
    for (size_t i = 0; i < sub->n && !b->err; i++)
        sc__emit(b, sub->ins[i].code, sub->ins[i].jt, sub->ins[i].jf, sub->ins[i].k);
}

void al_sc_block_if_eq(struct al_sc_prog *p, uint32_t k, const struct al_sc_prog *sub)
{
    if (sub->err || sub->n > 255) {
        p->err = p->err ? p->err : sub->err ? sub->err : -E2BIG;
        return;
    }
    sc__emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)sub->n, k);
    sc__append(p, sub);
}

void al_sc_prog_free(struct al_sc_prog *p)
{
    free(p->ins);
    memset(p, 0, sizeof *p);
}

/* ---- the policy and its search tree ------------------------------------------------- */

void al_sc_policy_init(struct al_sc_policy *pol, uint32_t otherwise, uint32_t bad_arch)
{
    memset(pol, 0, sizeof *pol);
    pol->otherwise = otherwise;
    pol->bad_arch = bad_arch;
    for (size_t i = 0; i < AL_SC_NR_LIMIT; i++)
        pol->act[i] = otherwise;
}

void al_sc_policy_set(struct al_sc_policy *pol, const int *nrs, size_t n, uint32_t action)
{
    for (size_t i = 0; i < n; i++) {
        if (nrs[i] < 0 || nrs[i] >= AL_SC_NR_LIMIT) {
            pol->err = pol->err ? pol->err : -ERANGE;
            continue;
        }
        pol->act[nrs[i]] = action;
        pol->block[nrs[i]] = 0;
    }
}

void al_sc_policy_block(struct al_sc_policy *pol, int nr, struct al_sc_prog *sub)
{
    if (pol->err || sub->err || nr < 0 || nr >= AL_SC_NR_LIMIT ||
        pol->n_blocks == AL_SC_MAX_BLOCKS) {
        if (!pol->err)
            pol->err = sub->err ? sub->err : (pol->n_blocks == AL_SC_MAX_BLOCKS) ? -E2BIG : -ERANGE;
        al_sc_prog_free(sub);
        return;
    }
    pol->blocks[pol->n_blocks] = *sub;
    pol->block[nr] = (uint8_t)(++pol->n_blocks);
    memset(sub, 0, sizeof *sub);
}

struct sc__range {
    uint32_t lo; /* up to the next range's lo */
    uint32_t act;
    uint8_t block;
};

/* Emits the decision for ranges r[0..n) (A holds the syscall number). */
static void sc__tree(struct al_sc_prog *b, const struct sc__range *r, size_t n,
                     const struct al_sc_policy *pol)
{
    if (n == 1) {
        if (r->block)
            sc__append(b, &pol->blocks[r->block - 1]);
        else
            al_sc_ret(b, r->act);
        return;
    }
    size_t m = n / 2;
    struct al_sc_prog left = {0}, right = {0};
    sc__tree(&left, r, m, pol);
    sc__tree(&right, r + m, n - m, pol);
    if (left.err || right.err) {
        b->err = b->err ? b->err : left.err ? left.err : right.err;
    } else if (left.n <= 255) {
        /* if (nr >= r[m].lo) goto right; (else fall into left, which ends in returns) */
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

int al_sc_build(struct al_sc_policy *pol, struct sock_filter **out, size_t *len)
{
    struct al_sc_prog b = {0};
    sc__ld(&b, SC_OFF_ARCH);
    sc__emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH_X86_64);
    al_sc_ret(&b, pol->bad_arch);
    sc__ld(&b, SC_OFF_NR);
    sc__emit(&b, BPF_JMP | BPF_JGE | BPF_K, 0, 1, SC_X32_SYSCALL_BIT);
    al_sc_ret(&b, pol->bad_arch);

    int rc = pol->err;
    if (!rc) {
        struct sc__range r[AL_SC_NR_LIMIT + 1];
        size_t nr = 0;
        for (uint32_t k = 0; k < AL_SC_NR_LIMIT; k++)
            if (nr == 0 || r[nr - 1].act != pol->act[k] || r[nr - 1].block != pol->block[k])
                r[nr++] = (struct sc__range){k, pol->act[k], pol->block[k]};
        /* everything from AL_SC_NR_LIMIT up */
        if (r[nr - 1].block || r[nr - 1].act != pol->otherwise)
            r[nr++] = (struct sc__range){AL_SC_NR_LIMIT, pol->otherwise, 0};
        sc__tree(&b, r, nr, pol);
    }
    for (size_t i = 0; i < pol->n_blocks; i++)
        al_sc_prog_free(&pol->blocks[i]);
    pol->n_blocks = 0;
    if (!rc)
        rc = b.err ? b.err : b.n > BPF_MAXINSNS ? -E2BIG : 0;
    if (rc) {
        free(b.ins);
        return rc;
    }
    *out = b.ins;
    *len = b.n;
    return 0;
}

int al_sc_install(const struct sock_filter *prog, size_t len, unsigned flags, struct al_error *err)
{
    struct sock_fprog fp = {.len = (unsigned short)len, .filter = (struct sock_filter *)prog};
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fp) < 0) {
        if (errno == ENOSYS || errno == EINVAL)
            return al_error_set(err, -errno,
                                "seccomp filters are not supported by this kernel (%s): "
                                "CONFIG_SECCOMP_FILTER is required",
                                strerror(errno));
        return al_error_set(err, -errno, "cannot install the seccomp filter: %s", strerror(errno));
    }
    return 0;
}
