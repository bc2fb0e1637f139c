/* vmm/jail/jail: the jail backend of airlock-vmm: a sandbox made of Linux namespaces, an
 * overlay root, cgroups, seccomp, Landlock and no capabilities, with the agent as PID 1.
 *
 * Owns: building the sandbox (jail_start), pausing and resuming it (freezer), killing the
 * whole tree, statistics, and reclaiming every host-side resource it took: the cgroups and
 * the id slot. Mounts, the PID/IPC/UTS/user namespaces and a "none"-mode network namespace
 * live only as long as the sandbox's processes, so the kernel reclaims them.
 *
 * Creation, in the airlock-vmm process (host root) and the sandbox's first process ("the
 * child"):
 *   parent: cgroups + limits, id slot, seccomp program, mount plan; join the sandbox's
 *           network namespace (or create one) just for the clone; clone3 with new user,
 *           mount, PID, IPC and UTS namespaces; write uid/gid maps (0..65535 -> the slot);
 *           move the child into the cgroups; clone the template rootfs and the agent
 *           directory as id-mapped, read-only, nosuid, nodev mounts and pass them over a
 *           socketpair; write the init JSON into the init pipe.
 *   child:  become root of its user namespace, new cgroup namespace, hostname; build the
 *           root (tmpfs upper with /etc/hostname, /etc/hosts, /etc/resolv.conf already in
 *           it, overlay, the mount plan); pivot_root; rlimits; arrange fds (0 /dev/null, 1+2 the log
 *           pipe, 3 the agent listen socket, 4 the init pipe; nothing else survives);
 *           Landlock; capabilities down to the agent's seven; no_new_privs; seccomp;
 *           PR_SET_PDEATHSIG(SIGKILL); a last handshake (so a parent that died before the
 *           death signal was armed is noticed); execve the agent.
 * Any failure in the child is reported over a close-on-exec pipe with the step that failed.
 *
 * Crash safety: if airlock-vmm dies (even SIGKILL), the death signal kills the agent, which
 * is PID 1 of the sandbox's PID namespace, so the kernel kills every process in it and the
 * namespaces and mounts go with them. What stays on the host (the cgroup directories and
 * the id slot file) is described by the record (jail_record) airlock-vmm writes before
 * the sandbox starts and is removed by jail_cleanup_record (airlock-vmm --cleanup ID).
 */
#ifndef AIRLOCK_VMM_JAIL_JAIL_H
#define AIRLOCK_VMM_JAIL_JAIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup.h"
#include "common/error.h"
#include "idmap.h"
#include "vmm/spec.h"

/* The child's own account of its steps (microseconds), sent with its 'R' message. */
struct jail_child_timing {
    uint32_t rootfs_us;      /* credentials, upper tmpfs, overlay */
    uint32_t plan_us;        /* /proc, /dev, /sys, /tmp, /.airlock, binds, /etc files */
    uint32_t pivot_us;       /* pivot_root, rlimits, descriptors */
    uint32_t cgroup_wait_us; /* waiting for the parent's cgroup move */
    uint32_t locks_us;       /* cgroup ns, Landlock, capabilities, no_new_privs, seccomp */
};

/* Where the creation time goes (nanoseconds), for the benchmark and debug logs. */
struct jail_timing {
    uint64_t prepare_ns;       /* cgroups, id slot, filter, plan */
    uint64_t clone_ns;         /* netns switch + clone3 */
    uint64_t setup_ns;         /* maps, id-mapped mounts, init data, cgroup attach */
    uint64_t cgroup_attach_ns; /* part of setup: moving the child into the cgroups */
    uint64_t child_ns;         /* after setup until the child is ready to exec */
    uint64_t exec_ns;          /* handshake until execve succeeded */
    uint64_t restore_ns;       /* part of setup: filling the upper layer from a snapshot */
    uint64_t total_ns;
    struct jail_child_timing child;
};

struct jail {
    const struct vmm_spec *spec;
    struct jail_cg cg;
    bool cg_created;
    bool cg_inherited; /* warm start: the cgroups were this process's; no move needed */
    char ids_dir[512];
    struct jail_idmap_cfg ids;
    uint32_t slot;
    bool have_slot;
    uint32_t host_uid; /* host id of the sandbox's root */
    pid_t pid;         /* the agent (PID 1 of the sandbox), as seen on the host */
    int pidfd;
    int log_fd; /* read end of the agent's stdout + stderr */
    /* Its write end, kept so that the agent of a rollback (jail_rollback) writes into the
     * same pipe, which airlock-vmm's log capture goes on reading. */
    int log_w;
    /* The overlay's upper directory in the sandbox's tmpfs (the child hands it over before
     * the overlay exists): what a snapshot copies, what a restore fills. -1 before. */
    int upper_fd;
    const char *restore;      /* the snapshot jail_start fills the upper layer from, or NULL */
    uint32_t restore_id_base; /* the host id of root in that snapshot */
    /* jail_rollback: the network namespace of the sandbox it replaces (the spec's path
     * names a descriptor of airlockd's that is long closed), and the cgroups it keeps. */
    int restart_net_fd;
    const char *restart_token; /* and the agent's access token, for its init data */
    bool restarting;
    struct jail_timing timing;
};

/* Warm start (airlock-vmm --warm): creates <cgroup_parent>/warm-<pid> with the limits the
 * sandbox is expected to get (lim; a spec that asks for others has them rewritten) and moves
 * this process into it, so that a later jail_prepare (same parent) renames it to the
 * sandbox's cgroups and the sandbox is cloned inside them: no cgroup move and no limit
 * writes on the creation path. Also builds what needs no spec (the seccomp program). */
int jail_warm(const char *cgroup_parent, const struct jail_cg_limits *lim, struct al_error *err);
/* Moves this process back to where it was (once the sandbox runs); idempotent. Removes
 * the warm cgroups if no sandbox claimed them. */
void jail_warm_release(void);

/* Fills in what the record needs, checks the host (cgroup layout) and reserves the id slot
 * (and the warm cgroups, if any). */
int jail_prepare(struct jail *j, const struct vmm_spec *spec, const char *state_dir,
                 struct al_error *err);
/* What airlock-vmm --cleanup needs to undo a crashed sandbox (new reference). Valid after
 * jail_prepare; includes the slot once allocated. */
json_t *jail_record(const struct jail *j);
/* Builds and starts the sandbox. agent_listen_fd: the listening socket the agent gets.
 * On failure everything taken so far is released. */
int jail_start(struct jail *j, int agent_listen_fd, struct al_error *err);

int jail_pause(struct jail *j, struct al_error *err);
int jail_resume(struct jail *j, struct al_error *err);
bool jail_is_paused(const struct jail *j);
/* SIGKILL to the whole tree (thaws first if paused). Returns at once; the caller waits
 * for jail_nprocs() == 0 and the pidfd. */
int jail_kill(struct jail *j, struct al_error *err);
/* SIGTERM to the agent (graceful stop). */
int jail_terminate(struct jail *j);
int jail_nprocs(const struct jail *j);
/* Releases cgroups and the id slot; the sandbox must be dead. Idempotent. */
int jail_reclaim(struct jail *j, struct al_error *err);
/* cgroup statistics + disk usage of the writable layer. */
json_t *jail_stats(const struct jail *j);

/* ---- snapshots of the file system (snapshot.c) -------------------------------------
 *
 * A jail snapshot is a directory: snapshot.json (JAIL_SNAPSHOT_FORMAT, the host id of the
 * sandbox's root when it was taken, what was copied) and upper/, a copy of the overlay's
 * upper directory (fscopy.h says what it keeps), owned by the sandbox's host ids of then.
 * The identity files (/etc/hostname, /etc/hosts, /etc/resolv.conf) are never in it: a
 * sandbox made from a snapshot gets its own. Memory is not kept: processes start afresh. */
#define JAIL_SNAPSHOT_FORMAT "airlock-jail-fs-1"
/* Reads and checks the snapshot.json of snapshot dir (jail.restore in jail_prepare; own: a
 * rollback's, which must be of this very sandbox and its template directory). */
int jail_snapshot_check(struct jail *j, const char *dir, bool own, struct al_error *err);
/* jail_start: fills j->upper_fd from j->restore (before the overlay is mounted). */
int jail_snapshot_fill(struct jail *j, struct al_error *err);
/* POST /snapshot: the upper directory into dest (a new directory; its parent must exist),
 * written as .tmp-<name>.<pid> beside it and renamed into place once complete and synced.
 * The sandbox is frozen while it is copied (and stays frozen if it was paused). info: what
 * to answer (new reference). Blocking. */
int jail_snapshot(struct jail *j, const char *dest, json_t **info, struct al_error *err);

/* POST /rollback: replaces the running sandbox's file system by snapshot dir (one of its
 * own, jail_snapshot_check): checks it, kills every process of the sandbox, then builds the
 * sandbox again in its cgroups, id slot and network namespace with the snapshot's files
 * (the same id, hostname, environment; access_token: the agent's, which airlock-vmm does
 * not keep) and a new agent on agent_listen_fd. Blocking (the kill, then the copy). A
 * failure before the kill changes nothing; after it the sandbox is gone (the caller stops).
 * info: what to answer (new reference). */
int jail_rollback(struct jail *j, const char *dir, const char *access_token, int agent_listen_fd,
                  json_t **info, struct al_error *err);

/* Undoes what a record describes: kills what is left in the cgroups, waits for them to
 * empty (up to timeout_ms), removes them, releases the id slot. Idempotent. */
int jail_cleanup_record(const json_t *record, unsigned timeout_ms, struct al_error *err);

/* The id-slot and cgroup defaults a sweep uses when no record exists. */
struct jail_sweep_opts {
    const char *state_dir;
    const char *cgroup_parent;
    uint32_t uid_base, uid_slots;
    /* true if a live airlock-vmm owns sandbox id */
    bool (*is_live)(const char *id, void *arg);
    void *arg;
    const char *only; /* non-NULL: that sandbox's only (vmm_sweep_opts) */
};
/* Reclaims cgroups and id slots of sandboxes that have no live airlock-vmm. Returns the
 * number of sandboxes reclaimed. */
int jail_sweep(const struct jail_sweep_opts *o, struct al_error *err);

/* airlock-vmm --limit-parent: sets the limits of all sandboxes together on cgroup_parent
 * (jail and KVM sandboxes alike live under it) and returns what the parent now has
 * ({"parent","cgroup_version","pids_max","pids_current","memory_max","memory_current"};
 * a limit of "max" is null). */
json_t *jail_limit_parent(const char *cgroup_parent, const struct jail_cg_limits *lim,
                          struct al_error *err);

#endif
