/* vmm/jail/harden: the process-level locks a sandbox's first process takes before it execs
 * the agent: Landlock, capabilities, resource limits.
 *
 * Capabilities: the agent (uid 0 of the sandbox's user namespace) keeps exactly
 *   CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP
 * in its bounding, permitted and effective sets (none inheritable or ambient); every other
 * capability is dropped from the bounding set, so nothing started inside can get it back.
 * They are capabilities in the sandbox's user namespace only: over the host they are
 * nothing. The agent clears them all (and sets no_new_privs) before it runs user code.
 *
 * Landlock (ABI detected at run time; the constants are defined here because Debian 12's
 * headers stop at ABI 2): every filesystem right except creating character and block
 * device nodes beneath "/", and on ABI >= 6 the signal and abstract-unix-socket scopes, so
 * no process of the sandbox can signal, or connect to an abstract socket of, a process
 * outside it even if some other layer failed. The user namespace already forbids device
 * nodes and the PID and network namespaces hide outside processes and sockets; Landlock is
 * a second lock on each, enforced by a different kernel subsystem.
 */
#ifndef AIRLOCK_VMM_JAIL_HARDEN_H
#define AIRLOCK_VMM_JAIL_HARDEN_H

#include <stdint.h>

#include "common/error.h"

/* The capabilities the agent keeps (bit mask of CAP_* numbers). */
uint64_t jail_caps_agent_mask(void);
/* Drops every capability not in keep from the bounding set, clears ambient and
 * inheritable, sets permitted = effective = keep. */
int jail_caps_limit(uint64_t keep, struct al_error *err);

/* Landlock ABI version of the running kernel (0 = unavailable). */
int jail_landlock_abi(void);
/* Applies the ruleset described above. With abi 0 it does nothing and returns 0. */
int jail_landlock_apply(int abi, struct al_error *err);

struct jail_rlimits {
    uint64_t nofile;     /* RLIMIT_NOFILE */
    uint64_t nproc;      /* RLIMIT_NPROC: per sandbox user (ids are per sandbox) */
    uint64_t fsize;      /* RLIMIT_FSIZE: largest file */
    uint64_t memlock;    /* RLIMIT_MEMLOCK */
    uint64_t msgqueue;   /* RLIMIT_MSGQUEUE */
    uint64_t sigpending; /* RLIMIT_SIGPENDING */
    uint64_t core;       /* RLIMIT_CORE */
};
/* Sets soft = hard = each value, but never raises a hard limit (that needs
 * CAP_SYS_RESOURCE on the host); a value above the current hard limit is clamped. */
int jail_rlimits_apply(const struct jail_rlimits *r, struct al_error *err);

#endif
