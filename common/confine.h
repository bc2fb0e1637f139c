/* common/confine: the one jailer. The process-level locks every confined airlock process
 * takes: the jail backend's sandbox (vmm/jail/jail.c, in the sandbox's first process before
 * it execs the agent), the KVM monitor confining itself once its VM is built
 * (vmm/kvm/confine.c), and any helper that handles hostile input (al_confine_self).
 *
 * Owns: cgroup joining; a private mount namespace rooted at a directory (pivot_root, or
 * for an initramfs root, moving the directory over / and chroot as switch_root does);
 * capabilities (the bounding set, ambient and inheritable cleared, permitted = effective =
 * a given set); switching to an unprivileged identity with a check that no capability
 * survived; no_new_privs; the Landlock ruleset; resource limits; no core dumps and not
 * dumpable, for every process that holds secrets (airlock-vault and its CLI, airlock-egress). The system-call filters
 * are made by the generator next door (common/seccomp.h) from a policy owned by each user.
 *
 * Not here, and why: creating cgroups and their limits is vmm/jail/cgroup.c's (both
 * backends use it; v1 and v2); namespaces for a sandbox are created by its clone3 in
 * vmm/jail/jail.c (user, mount, PID, IPC, UTS and network namespaces of a process that is
 * not yet running a program); starting a process is common/spawn's.
 *
 * Landlock (ABI detected at run time; the constants are defined here because Debian 12's
 * headers stop at ABI 2): every filesystem right except creating character and block
 * device nodes beneath "/", and on ABI >= 6 the signal and abstract-unix-socket scopes, so
 * the process and its descendants can neither signal, nor connect to an abstract socket
 * of, a process outside their domain even if some other layer failed.
 *
 * A confined helper started by airlockd (al_spawn) either calls al_confine_self first thing
 * (its own directory as root_dir, an unprivileged uid/gid, rlimits, Landlock) or, like the
 * template unpacker (controlplane/templates/unpack_main.c, in namespaces of its own), the
 * steps one by one; then it installs a filter made by common/seccomp.h (al_sc_install) and
 * only then reads its input.
 */
#ifndef AIRLOCK_COMMON_CONFINE_H
#define AIRLOCK_COMMON_CONFINE_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/capability.h>
#include <sys/types.h>

#include "common/error.h"

/* Writes pid (0: the caller) into <dir>/cgroup.procs (cgroup v1 and v2). */
int al_confine_join_cgroup(const char *dir, pid_t pid, struct al_error *err);

/* A private mount namespace whose root is dir (bind-mounted nosuid, nodev, noexec): nothing
 * else of the host file system stays reachable. */
int al_confine_pivot(const char *dir, struct al_error *err);
/* In a mount namespace of the caller's own, with the new root as the current directory:
 * pivot_root(".", ".") and detach the old root (initramfs: move "." over / and chroot);
 * then chdir("/"). */
int al_confine_pivot_cwd(struct al_error *err);

/* What root keeps in a build sandbox (the sandbox a template build's RUN step runs in,
 * controlplane/buildsb.c; never an ordinary sandbox): what a package manager running as root
 * needs to install files of other users (dpkg's chown and chmod of what it unpacks, apt
 * switching to its _apt user, maintainer scripts' chown and kill). Capabilities of the
 * sandbox's own user namespace, over its own ids only: none of them reaches a file or process
 * whose owner the namespace does not map. Not in it: CAP_SETFCAP (file capabilities in the
 * template), CAP_MKNOD, CAP_SYS_*, CAP_NET_*, CAP_SETPCAP. The jail keeps them in the agent's
 * bounding set (vmm/jail/jail.c), the agent hands them to uid 0's processes of the build
 * sandbox only (vmm/guest/spawn.c). */
#define AL_BUILD_ROOT_CAPS                                                     \
    ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) | \
     (1ull << CAP_FSETID) | (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID))

/* Drops every capability not in keep (bit mask of CAP_* numbers) from the bounding set,
 * clears ambient and inheritable, sets permitted = effective = keep. */
int al_confine_caps(uint64_t keep, struct al_error *err);
/* Empties the bounding set, drops the supplementary groups, switches to uid/gid (real,
 * effective, saved) and checks that no capability is left. uid must not be 0. */
int al_confine_identity(uid_t uid, gid_t gid, struct al_error *err);
int al_confine_no_new_privs(struct al_error *err);

/* Landlock ABI version of the running kernel (0 = unavailable). */
int al_landlock_abi(void);
/* Applies the ruleset described above. With abi 0 it does nothing and returns 0. */
int al_confine_landlock(int abi, struct al_error *err);
/* The same rights beneath dirfd only: nothing of the file system outside it can be read or
 * written any more (the confined unpacker of controlplane/templates, on the root it fills). */
int al_confine_landlock_beneath(int abi, int dirfd, struct al_error *err);

struct al_rlimits {
    uint64_t nofile;     /* RLIMIT_NOFILE */
    uint64_t nproc;      /* RLIMIT_NPROC */
    uint64_t fsize;      /* RLIMIT_FSIZE: largest file */
    uint64_t memlock;    /* RLIMIT_MEMLOCK */
    uint64_t msgqueue;   /* RLIMIT_MSGQUEUE */
    uint64_t sigpending; /* RLIMIT_SIGPENDING */
    uint64_t core;       /* RLIMIT_CORE (0 is applied: no core files) */
    uint64_t as;         /* RLIMIT_AS */
};
/* Sets soft = hard = each value (0 = leave as inherited, except core), but never raises a
 * hard limit (that needs CAP_SYS_RESOURCE); a value above the current hard limit is
 * clamped. */
int al_confine_rlimits(const struct al_rlimits *r, struct al_error *err);

/* For a process that holds secrets in memory: no core file (RLIMIT_CORE 0, soft and hard)
 * and not dumpable (PR_SET_DUMPABLE 0: no core even past a limit raised again, and no
 * ptrace or /proc/PID/mem by other processes of the same user). Call first thing in main,
 * before any secret exists. */
int al_confine_no_dumps(struct al_error *err);

#define AL_CONFINE_MAX_CGROUPS 8

struct al_confine_opts {
    const char *cgroups[AL_CONFINE_MAX_CGROUPS]; /* cgroup directories to join */
    int n_cgroups;
    const char *root_dir;             /* NULL: keep the file system view */
    const struct al_rlimits *rlimits; /* NULL: keep them */
    uid_t uid;                        /* 0: keep the identity (development only) */
    gid_t gid;
    bool landlock; /* the ruleset above, when the kernel has Landlock */
};

/* The whole sequence for a process confining itself, in this order: glibc's lazy
 * initialisation that would need files later (the time zone), the cgroups, the root, the
 * rlimits, the identity, no_new_privs, Landlock. The caller installs its seccomp filter
 * afterwards (per thread, or with SECCOMP_FILTER_FLAG_TSYNC for all). */
int al_confine_self(const struct al_confine_opts *o, struct al_error *err);

#endif
