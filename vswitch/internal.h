/* vswitch/internal: what the files of vswitch/ share and nobody else may use.
 *
 * Owns: the definitions of struct vswitch and struct vswitch_view, and the split of the
 * loader into files: loader.c (open/close/destroy, re-adoption, attach/detach), net.c
 * (address plan, netns + veth, taps, pool), host.c (host checks, bpffs, nftables guard,
 * sysctls), view.c (pinned-state readers, proxy registration), cli.c (`airlock vswitch`).
 *
 * Names: every function of vswitch/ starts with vswitch_. Those shared only between its
 * files take vswitch__ (declared here) or vswitch_nl_ (nl.h), so a reader sees at the call
 * which ones are not the public API of vswitch.h.
 */
#ifndef AIRLOCK_VSWITCH_INTERNAL_H
#define AIRLOCK_VSWITCH_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "vswitch/nl.h"
#include "vswitch/vswitch.h"

#define VS_INSTANCE_FILE "vswitch/instance.json"
#define VS_LOCK_FILE     "vswitch/lock"
#define VS_BPFFS_ROOT    "/sys/fs/bpf"
#define VS_RTPROT        0xa1 /* rtm_protocol of every route the switch installs */
#define VS_TABLE_MAIN    254
/* tc handle/priority of the legacy (clsact) filters. */
#define VS_TC_HANDLE   0xa1
#define VS_TC_PRIORITY 1

struct vswitch_view {
    int map_config;
    int map_ifaces;
    int map_addrs;
    int map_counters;
    int map_sockets;
    bool owns_fds; /* false when the fds belong to a loaded skeleton */
    int ncpus;
    char pin_dir[PATH_MAX];
};

struct vswitch_bpf;

/* How many networks the switch keeps half-made (vs__stage_*): at most this, and never more
 * than the pool (no pool, no networks made ahead). */
#define VS_STAGE_MAX 4

/* A half-made network: its namespace, the veth pair (link down) and the host side's clsact
 * qdisc, but no programs, no identity, no address. The invariant holds (down and
 * unattached: the guard covers it; a restart deletes it as an orphan). Why: the kernel
 * waits for an RCU grace period when the first filter goes onto a clsact qdisc younger than
 * one grace period (mini_qdisc_pair_swap), and it waits holding the RTNL, so every other
 * network waits too; a qdisc made a few networks ahead is old enough. */
struct vs_staged {
    uint32_t slot;
    int ifindex;
    int nsfd;
    struct vs_nl nl; /* bound to its namespace (the sandbox side is configured through it) */
};

struct vswitch {
    pthread_mutex_t mu;
    struct vswitch_bpf *skel;
    struct vswitch_view view;
    struct vs_nl nl;      /* bound to the switch's namespace */
    struct vs_config cfg; /* effective configuration (also in vs_config[0]) */
    char state_dir[PATH_MAX];
    int lock_fd;
    uint32_t range_host; /* range address, host order */
    uint32_t max_ifaces; /* entries of the interface tables */
    uint32_t nslots;     /* address slots: the range's, at most max_ifaces */
    uint8_t *slot_used;  /* one byte per slot */
    unsigned pool_size;
    struct vswitch_net *pool; /* ready, unassigned networks (netns_fd open) */
    size_t pool_n;
    /* vswitch_pool_fill drops mu between networks: closing the switch sets pool_stop and
     * waits on pool_cv until no fill is running (pool_fillers == 0). */
    unsigned pool_fillers;
    bool pool_stop;
    pthread_cond_t pool_cv;
    /* Called by vswitch_pool_fill after each network it made, with mu released: a test
     * pauses the fill there to show what others can do while it is provably in progress.
     * NULL outside tests (set before the fill starts). */
    void (*fill_step)(struct vswitch *vs, void *arg);
    void *fill_step_arg;
    /* Half-made networks, oldest first (min(VS_STAGE_MAX, pool_size) of them). */
    struct vs_staged stage[VS_STAGE_MAX];
    size_t stage_n;
    /* Callers waiting for mu to work on a sandbox's network (vswitch__lock_for_sandbox): a fill
     * lets them go first between its networks. An unlock followed by a lock does not: the
     * filling thread usually takes mu back before a waiter wakes. */
    atomic_uint sandbox_waiters;
    bool allow_ip_forward;
    dev_t netns_dev; /* the namespace vswitch_open ran in */
    ino_t netns_ino;
};

/* ---- host.c ---- */
struct vs_settings {
    char state_dir[PATH_MAX];
    char pin_dir[PATH_MAX];
    uint32_t range_addr; /* network order */
    unsigned range_len;
    unsigned prefix_len;
    char ifname_prefix[16];
    char nft_table[32];
    uint32_t steer_mark, reply_mark, route_table, rule_priority;
    unsigned max_ifaces;
    enum vswitch_attach_mode attach_mode;
    bool allow_ip_forward;
};
/* Validates opts and fills in the defaults. */
int vswitch__settings(const struct vswitch_opts *opts, struct vs_settings *s, struct al_error *err);
/* Reads an integer sysctl of the calling thread's namespace ("net/ipv4/ip_forward"). */
int vswitch__sysctl_read(const char *path, long *value);
int vswitch__sysctl_write(const char *path, const char *value);
/* Runs every host check; returns the number of failures (results as in vswitch.h). */
int vswitch__host_checks(const struct vs_settings *s, struct vswitch_check *res, size_t max,
                         size_t *n);
/* Mounts bpffs at /sys/fs/bpf if pin_dir lives there and it is not mounted. */
int vswitch__bpffs_ensure(const char *pin_dir, struct al_error *err);
int vswitch__guard_install(const struct vs_settings *s, struct al_error *err);
int vswitch__guard_remove(const char *nft_table, struct al_error *err);
int vswitch__guard_present(const char *nft_table, bool *present, struct al_error *err);

/* ---- view.c ---- */
int vswitch__view_open_fds(struct vswitch_view *v, const char *pin_dir, struct al_error *err);
void vswitch__view_release(struct vswitch_view *v);
int vswitch__read_instance(const char *state_dir, char *pin_dir, size_t len, struct al_error *err);
/* max_entries of the map pinned at path: -ENOENT when none is pinned there. */
int vswitch__pinned_max_entries(const char *path, unsigned *out);

/* ---- net.c ---- */
/* Slot i's addresses (network order). */
void vswitch__slot_addrs(const struct vswitch *vs, uint32_t slot, uint32_t *gateway,
                         uint32_t *addr);
int vswitch__slot_alloc(struct vswitch *vs, uint32_t *slot, struct al_error *err);
void vswitch__slot_free(struct vswitch *vs, uint32_t slot);
void vswitch__slot_macs(uint32_t slot, uint8_t host[6], uint8_t guest[6]);
bool vswitch__mac_is_ours(const uint8_t mac[6]);
/* Under mu: stops and waits for running pool fills, then frees the pooled and the
 * half-made networks. */
void vswitch__pool_drain(struct vswitch *vs);
/* Takes mu for work a sandbox waits for (create, destroy, taps, attach; and the pool's
 * count): ahead of a pool fill, which waits between its networks while such callers wait. */
void vswitch__lock_for_sandbox(struct vswitch *vs);

/* ---- loader.c ---- */
/* vswitch_open; for_teardown skips the host checks (see `airlock vswitch teardown`). */
int vswitch__open(const struct vswitch_opts *opts, bool for_teardown, struct vswitch **out,
                  struct al_error *err);
/* Attaches both programs to ifindex and records the identity (caller holds vs->mu). */
int vswitch__attach_locked(struct vswitch *vs, int ifindex, const struct vs_iface *ifc,
                           struct al_error *err);
int vswitch__detach_locked(struct vswitch *vs, int ifindex, struct al_error *err);
/* Drops the identity, pins and slot of an interface that is going away by itself (its
 * namespace is being destroyed), without deleting it. */
void vswitch__forget_locked(struct vswitch *vs, int ifindex);
/* Makes the clsact qdisc that vswitch__attach_locked will put the filters on (nothing in TCX
 * mode), ahead of time: see struct vs_staged. */
int vswitch__qdisc_ahead(struct vswitch *vs, int ifindex, struct al_error *err);
/* Sets addresses and the flags of a fresh vs_iface for slot. */
void vswitch__iface_init(struct vswitch *vs, struct vs_iface *ifc, uint32_t slot,
                         const struct vswitch_sandbox *sb, const char *ifname, uint32_t flags);
/* Host-side route and neighbour entry toward the sandbox of ifc (after link up). */
int vswitch__host_routes(struct vswitch *vs, int ifindex, const struct vs_iface *ifc,
                         struct al_error *err);
int vswitch__set_identity_locked(struct vswitch *vs, int ifindex, struct vs_iface *ifc,
                                 struct al_error *err);

#endif
