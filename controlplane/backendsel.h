/* controlplane/backendsel: which sandbox backend airlockd runs, and why.
 *
 * Owns: running `airlock-vmm --probe-kvm` (bounded in time: the probe is killed at its
 * deadline), reading its one-line JSON answer, and the choice sandboxes.backend implies:
 *   auto  kvm when /dev/kvm exists and the probe says this host boots airlock's guest
 *         kernel, else jail (the reason is kept for the host report);
 *   kvm   kvm, or a start-up error naming the probe's reason;
 *   jail  jail (no probe);
 *   test  the test backend (no probe).
 * A /dev/kvm that opens and creates VMs is not enough: a paravirtual (PVM) KVM does both and
 * cannot boot a Linux guest; only the probe, which boots the guest kernel, decides.
 * Blocking (airlockd's start sequence; the probe takes milliseconds to a few seconds).
 */
#ifndef AIRLOCK_CP_BACKENDSEL_H
#define AIRLOCK_CP_BACKENDSEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define CP_KVM_DEV "/dev/kvm"
/* How long the probe process may run beyond its own boot deadline before it is killed. */
#define CP_KVM_PROBE_GRACE_MS 5000

struct cp_kvm_probe {
    bool ran;    /* the probe process was started */
    bool usable; /* it exited 0 and answered {"usable":true} */
    uint64_t elapsed_ms;
    char reason[768]; /* the probe's "reason", or what went wrong running it */
};

/* Runs `vmm_bin --probe-kvm [--kernel K] --timeout-ms T` (kernel NULL or "": airlock-vmm's
 * default) and kills it if it has not exited after kill_after_ms. Never fails: whatever
 * goes wrong (missing binary, timeout, garbage) is an unusable verdict with its reason. */
void cp_kvm_probe_run(const char *vmm_bin, const char *kernel, uint64_t timeout_ms,
                      uint64_t kill_after_ms, struct cp_kvm_probe *out);

struct cp_backend_sel_opts {
    int choice;             /* enum cp_backend_choice */
    const char *vmm_bin;    /* airlock-vmm */
    const char *kvm_dev;    /* NULL: CP_KVM_DEV */
    const char *kernel;     /* the guest kernel (sandboxes.kvm_kernel), NULL/"" = default */
    uint64_t timeout_ms;    /* the probe's boot deadline */
    uint64_t kill_after_ms; /* 0: timeout_ms + CP_KVM_PROBE_GRACE_MS */
};

struct cp_backend_sel {
    char kind[8];   /* "kvm", "jail" or "test" */
    char why[1024]; /* one line for the host report: how the choice was made */
    struct cp_kvm_probe probe;
};

/* Chooses the backend. 0, or -ENODEV with err set when sandboxes.backend is kvm and the
 * probe says this host cannot run KVM sandboxes (err names the reason). */
int cp_backend_select(const struct cp_backend_sel_opts *o, struct cp_backend_sel *out,
                      struct al_error *err);

#endif
