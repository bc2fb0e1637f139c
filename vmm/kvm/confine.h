/* vmm/kvm/confine: the VM process confines itself once the VM is built, because it is the
 * next line of defence if a guest escapes into it.
 *
 * Owns, in order (confine_process): joining the cgroups the caller prepared for this VM;
 * a private mount namespace whose root is the jail directory (pivot_root; nothing else of
 * the host file system remains reachable); dropping every capability from the bounding
 * set; switching to an unprivileged uid/gid with no supplementary groups; no_new_privs;
 * and a check that no capability survived. Then each thread installs its own seccomp
 * filter (confine_thread): a vCPU may only run KVM_RUN and raise an interrupt line; the
 * device thread only does I/O on descriptors it already holds; the control thread adds
 * what a snapshot needs. A forbidden call kills the process (Release builds) or is logged
 * (sanitizer builds, whose runtimes need more calls at exit). Logging must not need a
 * terminal check once confined: use the JSON log format (no isatty per line).
 */
#ifndef AIRLOCK_VMM_KVM_CONFINE_H
#define AIRLOCK_VMM_KVM_CONFINE_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"

#define CONFINE_MAX_CGROUPS 8

struct confine_opts {
    const char *jail_dir; /* NULL: keep the file system view */
    uid_t uid;            /* 0: keep the identity (only for development) */
    gid_t gid;
    const char *cgroups[CONFINE_MAX_CGROUPS]; /* cgroup directories to join */
    int n_cgroups;
    bool seccomp;
};

enum confine_role { CONFINE_VCPU, CONFINE_DEVICES, CONFINE_CONTROL };

int confine_process(const struct confine_opts *o, struct al_error *err);
/* Installs the filter for the calling thread's role (no-op unless enabled with
 * confine_enable_seccomp). */
int confine_thread(enum confine_role role, struct al_error *err);
void confine_enable_seccomp(bool on);
bool confine_seccomp_enabled(void);

#endif
