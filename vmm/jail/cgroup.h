/* vmm/jail/cgroup: the cgroups of one sandbox, on cgroup v1 or v2 (detected at start).
 *
 * Owns: reading the host's cgroup layout from /proc/self/mountinfo, the per-sandbox
 * directories (<root>/<parent>/<id> in every hierarchy that carries a controller we use),
 * their limits (memory incl. tmpfs pages written by the sandbox, pids, CPU quota), the
 * parent's limits (all sandboxes together) and whether a new sandbox has room under them, moving
 * the sandbox's first process in, freezing/thawing, killing every process in the group,
 * statistics, and removing the directories.
 *
 * Layouts:
 *   v2: one unified hierarchy with memory, pids and cpu enabled; freezing is cgroup.freeze.
 *   v1: a hierarchy for each of memory, pids, cpu and freezer (cpuacct optional, for CPU
 *       usage). Controllers mounted together ("cpu,cpuacct") share one directory.
 * A machine that offers neither completely (e.g. a v2 hierarchy without the memory
 * controller and no v1 memory hierarchy) is refused with a message naming what is missing.
 *
 * The plan (which file gets which value) is computed by a pure function so that tests can
 * check it against a fake cgroupfs; the apply step writes it.
 */
#ifndef AIRLOCK_VMM_JAIL_CGROUP_H
#define AIRLOCK_VMM_JAIL_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

enum jail_cg_ctrl {
    JAIL_CG_MEMORY = 0,
    JAIL_CG_PIDS,
    JAIL_CG_CPU,
    JAIL_CG_CPUACCT, /* v1 only, optional */
    JAIL_CG_FREEZER, /* v1 controller; v2 uses cgroup.freeze */
    JAIL_CG_NCTRL
};

#define JAIL_CG_PATH_MAX 512

struct jail_cg_layout {
    int version;                                   /* 1 or 2 */
    char v2_root[JAIL_CG_PATH_MAX];                /* mount point of the unified hierarchy, or "" */
    char v1_root[JAIL_CG_NCTRL][JAIL_CG_PATH_MAX]; /* mount point per controller, or "" */
};

/* Parses the text of a mountinfo file. prefer_v2: use v2 when it carries memory, pids and
 * cpu (v2_controllers is the content of its root cgroup.controllers, or NULL if unknown). */
int jail_cg_layout_parse(const char *mountinfo, const char *v2_controllers,
                         struct jail_cg_layout *out, struct al_error *err);
/* Reads /proc/self/mountinfo and the v2 root's cgroup.controllers. */
int jail_cg_layout_detect(struct jail_cg_layout *out, struct al_error *err);

struct jail_cg_limits {
    uint64_t memory_bytes; /* 0 = no limit */
    uint32_t pids;         /* 0 = no limit */
    double cpus;           /* 0 = no quota; 1.5 = one and a half CPUs */
};

/* One write of the plan: path = dir/file. */
struct jail_cg_write {
    char path[JAIL_CG_PATH_MAX + 64];
    char value[64];
    bool optional; /* missing file is not an error (e.g. memory.memsw.* without swap accounting) */
};

#define JAIL_CG_MAX_DIRS   JAIL_CG_NCTRL
#define JAIL_CG_MAX_WRITES 16

struct jail_cg {
    struct jail_cg_layout layout;
    char parent[128]; /* relative, e.g. "airlock" */
    char id[64];
    char dir[JAIL_CG_NCTRL][JAIL_CG_PATH_MAX];     /* per controller; "" if absent */
    char uniq[JAIL_CG_MAX_DIRS][JAIL_CG_PATH_MAX]; /* distinct directories to create/remove */
    size_t n_uniq;
};

/* Checks parent and id and computes the directories (no I/O). parent is a relative path
 * of plain components ("airlock", "airlock/test-42"). */
int jail_cg_init(struct jail_cg *cg, const struct jail_cg_layout *layout, const char *parent,
                 const char *id, struct al_error *err);
/* The writes that set the limits, in order (pure). Returns the count or a negative errno. */
int jail_cg_plan(const struct jail_cg *cg, const struct jail_cg_limits *lim,
                 struct jail_cg_write *out, size_t max);

/* Creates the parent (once, kept) and sandbox directories and applies the limits. If the
 * sandbox directories already exist and are empty, they are reused. */
int jail_cg_create(struct jail_cg *cg, const struct jail_cg_limits *lim, struct al_error *err);
/* Applies lim to existing directories (a warm process's, renamed), skipping the writes if
 * prev (the limits they were created with, may be NULL) equals lim. */
int jail_cg_relimit(const struct jail_cg *cg, const struct jail_cg_limits *lim,
                    const struct jail_cg_limits *prev, struct al_error *err);
bool jail_cg_limits_equal(const struct jail_cg_limits *a, const struct jail_cg_limits *b);
/* Moves pid (the whole thread group) into every hierarchy. */
int jail_cg_attach(const struct jail_cg *cg, pid_t pid, struct al_error *err);
/* Freezes or thaws, waiting (up to timeout_ms) until the state is reached. */
int jail_cg_freeze(const struct jail_cg *cg, bool frozen, unsigned timeout_ms,
                   struct al_error *err);
/* true if frozen (or freezing). */
bool jail_cg_is_frozen(const struct jail_cg *cg);
/* Sends SIGKILL to every process in the group (v2: cgroup.kill; v1: freeze, kill each,
 * thaw). Returns the number of processes signalled (v1) or 0, or a negative errno. */
int jail_cg_kill_all(const struct jail_cg *cg, struct al_error *err);
/* Number of processes still in the group (any hierarchy); negative errno on error. */
int jail_cg_nprocs(const struct jail_cg *cg);
/* Removes the sandbox directories (they must be empty). Missing directories are fine. */
int jail_cg_destroy(const struct jail_cg *cg, struct al_error *err);
/* Does any sandbox directory exist? */
bool jail_cg_exists(const struct jail_cg *cg);

struct jail_cg_stats {
    uint64_t memory_bytes;      /* current usage, including tmpfs pages */
    uint64_t memory_peak_bytes; /* 0 if unknown */
    uint64_t memory_limit_bytes;
    uint64_t cpu_usage_ns;
    uint64_t pids;
    uint64_t pids_limit;
    uint64_t oom_kills;
};
int jail_cg_stats(const struct jail_cg *cg, struct jail_cg_stats *st);

/* Lists the sandbox ids present under parent (the union over hierarchies), for sweeps.
 * Calls fn for each; stops early if fn returns non-zero. */
int jail_cg_list(const struct jail_cg_layout *layout, const char *parent,
                 int (*fn)(const char *id, void *arg), void *arg);
/* The parent: the limits of all sandboxes together (airlockd sets them at start, through
 * airlock-vmm --limit-parent), so that no number of busy sandboxes takes the processes or
 * the memory the host and airlock's own daemons need. Creates the parent if missing. */
int jail_cg_parent_limit(const struct jail_cg_layout *layout, const char *parent,
                         const struct jail_cg_limits *lim, struct al_error *err);
/* The parent's usage and limits (every sandbox, warm airlock-vmm processes included). */
int jail_cg_parent_usage(const struct jail_cg_layout *layout, const char *parent,
                         struct jail_cg_stats *st, struct al_error *err);
/* Processes a sandbox needs to start: its first process, the agent and the agent's first
 * children (the airlock-vmm process itself is already counted). */
#define JAIL_CG_START_PIDS 8
/* -EAGAIN with the reason when the parent of cg has fewer than pids processes left under
 * its pids.max (the sandboxes together are at their limit); 0 otherwise (also when the
 * parent has no limit or cannot be read: the kernel's fork then decides). */
int jail_cg_parent_room(const struct jail_cg *cg, uint32_t pids, struct al_error *err);
/* Removes the parent directories if they are empty (tests). */
void jail_cg_remove_parent(const struct jail_cg_layout *layout, const char *parent);

#endif
