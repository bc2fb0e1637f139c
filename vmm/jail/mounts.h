/* vmm/jail/mounts: the file system a jail sandbox sees.
 *
 * Owns: the mount plan (a list of steps computed by a pure function, so tests can check
 * it) and its execution inside the sandbox's mount namespace, before pivot_root.
 *
 * The root is an overlay: the template's rootfs, read-only and id-mapped into the sandbox's
 * user namespace (so its root- and user-owned files appear as root and user), below a
 * tmpfs "upper" capped at the sandbox's disk size. The tmpfs also holds /tmp and /dev/shm
 * (bind mounts of its tmp/ and shm/ directories), so one cap bounds every byte the sandbox
 * can write, and tmpfs pages are charged to the memory cgroup of the process that writes
 * them (the sandbox's). A tmpfs rather than an ext4 image: no mkfs or loop device on the
 * creation path (it costs microseconds), nothing on the host disk, and it vanishes with
 * the mount namespace, so a crash cannot leak it. The price: the sandbox's disk is RAM and
 * counts against its memory limit.
 *
 * Then, in order: /proc (the sandbox's PID namespace; kcore, keys, timer_list, sched_debug,
 * cmdline (the host's boot command line), ... masked with /dev/null, acpi/scsi/... with an empty read-only tmpfs, sys, bus, fs,
 * irq, sysrq-trigger read-only), a minimal /dev (a small tmpfs made read-only after it is
 * populated: null, zero, full, random, urandom, tty bound from the host; a new devpts
 * instance with ptmx; shm; fd/stdin/stdout/stderr links), /sys as an empty read-only tmpfs
 * (the sandbox gets no sysfs: it would show host devices), /tmp, the agent directory at
 * /.airlock (read-only), and the spec's read-only binds (both handed in as read-only overlays
 * of the host directory, so the mount table names no host path: see jail.c child__ro_tree). Every mount is nosuid; every mount
 * is nodev except the bound device nodes and devpts (their nodes must work); /proc, /sys,
 * /dev and /dev/shm are noexec.
 */
#ifndef AIRLOCK_VMM_JAIL_MOUNTS_H
#define AIRLOCK_VMM_JAIL_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum jail_mnt_kind {
    JAIL_MNT_PROC = 1,   /* new procfs at target */
    JAIL_MNT_MASK_FILE,  /* the host's /dev/null bound over a file (skipped if absent) */
    JAIL_MNT_MASK_DIR,   /* an empty read-only tmpfs over a directory (skipped if absent) */
    JAIL_MNT_RO_SELF,    /* bind target onto itself, read-only (skipped if absent) */
    JAIL_MNT_TMPFS,      /* a tmpfs with options data */
    JAIL_MNT_DEV_NODE,   /* host device file source bound onto target (a new empty file) */
    JAIL_MNT_DEVPTS,     /* a new devpts instance */
    JAIL_MNT_SYMLINK,    /* target -> source */
    JAIL_MNT_UPPER_BIND, /* a directory (source) of the upper tmpfs bound at target */
    JAIL_MNT_FD,         /* a detached mount handed in by airlock-vmm (fds[fd_index]) */
    JAIL_MNT_READONLY,   /* make the mount at target read-only (after it is populated) */
};

/* Mount attributes (the MOUNT_ATTR_* values of mount_setattr(2)). */
#define JAIL_MA_RDONLY 0x1u
#define JAIL_MA_NOSUID 0x2u
#define JAIL_MA_NODEV  0x4u
#define JAIL_MA_NOEXEC 0x8u

struct jail_mnt_step {
    enum jail_mnt_kind kind;
    char target[256]; /* relative to the new root, no leading '/' */
    char source[64];
    char data[128];
    unsigned attr; /* JAIL_MA_* */
    int fd_index;  /* JAIL_MNT_FD */
};

#define JAIL_MNT_MAX 64

struct jail_mnt_plan {
    struct jail_mnt_step steps[JAIL_MNT_MAX];
    size_t n;
};

struct jail_mnt_opts {
    bool agent;                   /* the agent tree is fds[0] */
    size_t n_binds;               /* spec binds are fds[1..n] */
    const char *bind_targets[16]; /* absolute, normalised */
};

/* Fills plan; returns 0 or -E2BIG / -EINVAL. */
int jail_mnt_plan_build(const struct jail_mnt_opts *o, struct jail_mnt_plan *plan);

/* Executes plan under rootfd (the overlay's root, attached in this mount namespace).
 * upperfd is the upper tmpfs's root (for UPPER_BIND); fds the detached mounts. Runs in the
 * sandbox's first process, as root of its user namespace, before pivot_root. */
int jail_mnt_plan_exec(const struct jail_mnt_plan *plan, int rootfd, int upperfd, const int *fds,
                       size_t nfds, struct al_error *err);

/* Pieces of the root file system, also used by the child (see child.c). */
/* tmpfs with options, detached; returns the mount fd. */
int jail_mnt_tmpfs(const char *opts, unsigned attr, struct al_error *err);
/* Resolves (and if create, creates) rel under rootfd without leaving it; returns an O_PATH
 * fd. dir: create a directory (else an empty regular file). */
int jail_mnt_resolve(int rootfd, const char *rel, bool create, bool dir, struct al_error *err);
/* Writes a small file under rootfd (replacing a symlink or file there). */
int jail_mnt_write_file(int rootfd, const char *rel, const char *content, struct al_error *err);

#endif
