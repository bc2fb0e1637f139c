/* vmm/kvm/confine: the VM process confines itself once the VM is built, because it is the
 * next line of defence if a guest escapes into it.
 *
 * Owns: the VM process's system-call policies, one per thread role. The process-wide steps
 * come first, from the one jailer (common/confine.h, al_confine_self, called by main.c):
 * joining the cgroups the caller prepared for this VM; a private mount namespace whose
 * root is the jail directory (nothing else of the host file system remains reachable);
 * dropping every capability from the bounding set; an unprivileged uid/gid with no
 * supplementary groups, checked to have no capability left; no_new_privs. Then each thread
 * installs its own filter (kvm_confine_thread), made by common/seccomp's generator: a vCPU may
 * only run KVM_RUN and raise an interrupt line; the device thread only does I/O on
 * descriptors it already holds; the control thread adds what a snapshot needs. A forbidden
 * call kills the process (Release builds) or is logged (sanitizer builds, whose runtimes
 * need more calls at exit). Logging must not need a terminal check once confined: use the
 * JSON log format (no isatty per line).
 */
#ifndef AIRLOCK_VMM_KVM_CONFINE_H
#define AIRLOCK_VMM_KVM_CONFINE_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum confine_role { CONFINE_VCPU, CONFINE_DEVICES, CONFINE_CONTROL };

/* The filter of a role (*prog malloc'ed, caller frees); deny: the action for a call the
 * role does not make (AL_SC_KILL, or AL_SC_LOG in sanitizer builds). */
int kvm_confine_filter(enum confine_role role, uint32_t deny, struct sock_filter **prog,
                       size_t *len);
/* Installs the filter for the calling thread's role (no-op unless enabled with
 * kvm_confine_enable_seccomp). */
int kvm_confine_thread(enum confine_role role, struct al_error *err);
void kvm_confine_enable_seccomp(bool on);
bool kvm_confine_seccomp_enabled(void);

#endif
