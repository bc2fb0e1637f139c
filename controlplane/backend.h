/* controlplane/backend: what airlockd needs from a sandbox backend.
 *
 * Owns nothing; it is the narrow interface between the lifecycle (lifecycle.c) and the
 * thing that runs a sandbox:
 *   - "vmm" (backend_vmm.c): one airlock-vmm process per sandbox (jail or kvm),
 *     driven through its spec, its ready line and its unix-socket API. The product.
 *   - "test" (backend_test.c): the agent as a plain host process on a unix socket, with NO
 *     isolation, no network namespace and no cgroup: for the control plane's own tests on
 *     machines where sandboxes cannot be built. Not part of airlockd: only airlockd-test,
 *     the test build's airlockd (main_test.c), has it (cp_backend_register_test). Never
 *     chosen automatically; airlockd-test says so loudly when it is configured.
 * Every operation is asynchronous on airlockd's loop and reports through its callback
 * exactly once. The backend reports the sandbox's process (pid, start time, pidfd): the
 * lifecycle watches it, and its exit means the sandbox is gone.
 */
#ifndef AIRLOCK_CP_BACKEND_H
#define AIRLOCK_CP_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct cp;
struct cp_sandbox;

/* What the lifecycle hands to start(). */
struct cp_start_args {
    const char *template_dir; /* resolved template directory (vmm) */
    const char *template_name;
    json_t *env_vars; /* E2B envVars (borrowed; may hold secrets) */
    int netns_fd;     /* jail: the sandbox's network namespace, or -1 (loopback only) */
    /* kvm: the sandbox's vswitch tap (IFF_VNET_HDR), or -1 (no network), with the MAC its
     * guest NIC must have and the guest's address (addr/prefix_len; the gateway is dns). */
    int tap_fd;
    const char *tap_mac;
    const char *addr;
    unsigned prefix_len;
    const char *dns; /* the sandbox's DNS server (= its gateway), or NULL */
    const char *hostname;
    /* The sandbox's CA of the egress proxy's interception (PEM), for the agent to install in
     * the sandbox's trust stores, or NULL. */
    const char *ca_cert_pem;
    /* jail: a snapshot's directory whose files the sandbox starts with (controlplane/
     * snapshots.c), or NULL. */
    const char *restore_dir;
    /* A warm sandbox (warm.c): its identity comes later, with its claim's POST /init. */
    bool warm;
    /* A build sandbox (buildsb.c, a template build's RUN step; never a sandbox of the API):
     * the jail lets its root keep what a package manager needs (spec.jail.build). */
    bool build;
    /* The template's start and ready commands, or NULL (the agent runs them; the test
     * backend hands them in its init, airlock-vmm reads them from template.json). */
    const char *start_cmd, *ready_cmd;
};

typedef void (*cp_backend_cb)(struct cp_sandbox *sb, int rc, const char *msg);
typedef void (*cp_backend_stats_cb)(struct cp_sandbox *sb, int rc, json_t *stats, void *arg);
/* res: the backend's account of the snapshot (borrowed), msg: why it failed. */
typedef void (*cp_backend_snap_cb)(struct cp_sandbox *sb, int rc, json_t *res, const char *msg,
                                   void *arg);

struct cp_backend_ops {
    const char *name; /* "vmm", "test" */
    /* The agent runs as a host process: no root file system (templates are labels), no
     * network, no runtime tmpfs. Only the test backend. */
    bool host_process;
    /* Starts the sandbox and calls cb once its agent answers /health (rc 0: sb->rec.pid,
     * pid_start, sb->pidfd and the socket paths are set) or starting failed (nothing left
     * behind). */
    int (*start)(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb);
    /* Stops it and reclaims everything (also after its process died). cb rc 0 = gone. */
    int (*stop)(struct cp_sandbox *sb, cp_backend_cb cb);
    int (*pause)(struct cp_sandbox *sb, cp_backend_cb cb);
    int (*resume)(struct cp_sandbox *sb, cp_backend_cb cb);
    /* {"cpu_usage_ns","cpus","memory_bytes","memory_limit_bytes","memory_cache_bytes",
     *  "disk_used_bytes","disk_total_bytes"} (missing keys = unknown). */
    int (*stats)(struct cp_sandbox *sb, cp_backend_stats_cb cb, void *arg);
    /* Captures the sandbox's file system into the new directory path (jail: airlock-vmm's
     * POST /snapshot; res is its answer); NULL: the backend has no snapshots. */
    int (*snapshot)(struct cp_sandbox *sb, const char *path, cp_backend_snap_cb cb, void *arg);
    /* Replaces the running sandbox's file system by its own snapshot in directory path, in
     * place (jail: airlock-vmm's POST /rollback, which kills its processes and starts its
     * agent again; res is its answer); NULL: the backend has no rollback. */
    int (*rollback)(struct cp_sandbox *sb, const char *path, cp_backend_snap_cb cb, void *arg);
    /* After an airlockd restart: sb->rec names a sandbox that was running. Checks that it
     * still runs (cb rc 0, sb->pidfd set, *paused reported through sb->rec.state) or not
     * (-ESRCH). */
    int (*adopt)(struct cp_sandbox *sb, cp_backend_cb cb);
    /* Reclaims what a dead sandbox left (crash cleanup). */
    int (*cleanup)(struct cp_sandbox *sb, cp_backend_cb cb);
    /* Sweeps leftovers of sandboxes airlockd no longer knows (at start, blocking). */
    int (*sweep)(struct cp *cp, struct al_error *err);
    /* Sets the limits of all sandboxes together (at start, blocking); NULL: the backend has
     * none to set. *pids_current receives the processes the sandboxes have now. */
    int (*limit_all)(struct cp *cp, uint64_t pids, uint64_t memory_bytes, uint64_t *pids_current,
                     struct al_error *err);
    /* The agent's log file of a sandbox (for GET .../logs), or "" when there is none. */
    void (*log_path)(const struct cp_sandbox *sb, char *out, size_t len);
};

extern const struct cp_backend_ops cp_backend_vmm;
/* kvm: the descriptor airlock-vmm inherits the sandbox's tap as. */
#define CP_VMM_TAP_FD 4
/* The spec the vmm backend writes for sb (new reference; it holds the sandbox's token and
 * borrowed env values: wipe its text). Jail: network through netns_fd (a descriptor of
 * airlockd, named by /proc path), or none. Kvm (cp->backend_kind): network through a->tap_fd
 * as CP_VMM_TAP_FD, and the kvm section (sandboxes.kvm_kernel). The sandbox's volumes are
 * mounted on the host for it; NULL (logged) when one cannot be. */
json_t *cp_vmm_spec(struct cp_sandbox *sb, const struct cp_start_args *a, int netns_fd);
/* The vmm backend's pool of warm airlock-vmm processes (sandboxes.warm_pool). */
void cp_vmm_pool_start(struct cp *cp);
/* Tops the pool up (does nothing while creations are in flight). */
void cp_vmm_pool_refill(struct cp *cp);
void cp_vmm_pool_stop(void);
/* After the loop has ended: waits (up to timeout_ms) until the warm processes released by
 * cp_vmm_pool_stop have exited, so that nothing of the pool outlives airlockd. */
void cp_vmm_pool_wait(unsigned timeout_ms);
/* Warm airlock-vmm processes ready to take a spec, and how many the pool keeps (0 when the
 * backend has no warm pool: kvm, test). */
void cp_vmm_pool_counts(const struct cp *cp, size_t *ready, size_t *size);
/* The test backend (backend_test.c), linked only into airlockd-test, which registers it
 * before cp_main; sandboxes.backend: test is refused by an airlockd without it. */
extern const struct cp_backend_ops cp_backend_test;
void cp_backend_register_test(const struct cp_backend_ops *ops);

#endif
