/* controlplane/hostcheck: what this host offers airlockd, said plainly at start.
 *
 * Owns: the checks (kernel release, cgroup v1/v2, user namespaces, seccomp, Landlock, whether
 * /dev/kvm opens and creates a VM) and the summary airlockd prints. Whether KVM can run
 * sandboxes is not decided here (a paravirtual KVM creates VMs but boots no Linux guest):
 * backendsel.c runs airlock-vmm --probe-kvm for that.
 */
#ifndef AIRLOCK_CP_HOSTCHECK_H
#define AIRLOCK_CP_HOSTCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct cp_host {
    char kernel[128];
    int kmajor, kminor;
    bool cgroup2_unified; /* cgroup v2 only */
    bool cgroup2_present; /* any cgroup2 mount */
    bool cgroup1;         /* v1 controllers mounted */
    bool userns;
    bool seccomp;
    int landlock_abi; /* 0 = none */
    bool kvm_present;
    bool kvm_usable; /* opens, expected API, KVM_CREATE_VM works (not: boots a guest) */
    char kvm_detail[128];
    bool root;
};

void cp_host_probe(struct cp_host *h);
/* Prints the summary lines ("  kernel     6.1.0 ..."). */
void cp_host_print(const struct cp_host *h, FILE *f);

#endif
