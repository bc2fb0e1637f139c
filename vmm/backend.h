/* vmm/backend: what airlock-vmm needs from a sandbox backend (jail, kvm).
 *
 * Owns nothing; it is the contract. A backend builds the sandbox, starts the agent in it
 * with the agent channel handed in as a listening socket, and reports the agent's
 * process (a pidfd that becomes readable when the sandbox is gone) and a pipe carrying
 * the agent's stdout and stderr. airlock-vmm owns everything around it: the spec, the
 * state directory, the API, logs, health, stop and crash cleanup. Every call except
 * start and cleanup_record/sweep runs on the event loop and must not block for long.
 */
#ifndef AIRLOCK_VMM_BACKEND_H
#define AIRLOCK_VMM_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "spec.h"

struct vmm_started {
    pid_t pid;      /* the process whose exit means the sandbox is gone (host pid) */
    int pidfd;      /* its pidfd; owned by the backend */
    int log_fd;     /* read end of the agent's stdout+stderr; owned by the backend */
    json_t *timing; /* optional breakdown of the start (new reference or NULL) */
};

struct vmm_sweep_opts {
    const char *state_dir;
    const json_t *defaults; /* backend defaults (e.g. jail: cgroup_parent, uid_base) */
    bool (*is_live)(const char *id, void *arg);
    void *arg;
    /* Non-NULL: only what sandbox `only` left (and dead warm processes' cgroups), for a
     * --cleanup of one sandbox that crashed before its record existed. */
    const char *only;
};

/* What a rollback reports. */
struct vmm_rolled_back {
    struct vmm_started started; /* the new agent, as start reports it */
    json_t *info;               /* what to answer (new reference) */
    bool stopped;               /* whether the sandbox's processes are gone */
};

struct vmm_backend {
    const char *name;
    size_t priv_size;
    /* Optional: work that needs no spec, done by a warm airlock-vmm before its spec
     * arrives (opts: the backend's settings, e.g. jail: {"cgroup_parent": ...}). */
    int (*warm)(const json_t *opts, struct al_error *err);
    /* Optional: called once the agent is healthy (e.g. leave the warm cgroups). */
    void (*settle)(void *priv);
    /* Checks the host, reserves what must be reserved before the record is written. */
    int (*prepare)(void *priv, const struct vmm_spec *spec, const char *state_dir,
                   struct al_error *err);
    /* What cleanup_record needs after a crash (new reference). */
    json_t *(*record)(const void *priv);
    int (*start)(void *priv, int agent_listen_fd, struct vmm_started *out, struct al_error *err);
    int (*pause)(void *priv, struct al_error *err);
    int (*resume)(void *priv, struct al_error *err);
    /* Graceful: ask the agent to exit. */
    int (*terminate)(void *priv);
    /* Kill everything now (returns without waiting). */
    int (*kill)(void *priv, struct al_error *err);
    /* Processes of the sandbox still alive (0 when all are gone). */
    int (*nprocs)(const void *priv);
    /* Releases host resources once the sandbox is dead; idempotent. */
    int (*reclaim)(void *priv, struct al_error *err);
    json_t *(*stats)(const void *priv);
    /* Optional (kvm): writes the sandbox's full state into dest, a new directory; info:
     * what to answer (new reference). Blocks while the snapshot is written. */
    int (*snapshot)(void *priv, const char *dest, json_t **info, struct al_error *err);
    /* Optional (jail): replaces the running sandbox's file system by the snapshot dir (one
     * of its own): its processes are killed and its agent started again on agent_listen_fd
     * (access_token: the agent's); out: the new agent and what to answer. Blocks for the
     * kill and the copy. A failure with out->stopped false changed nothing; with it true the
     * sandbox's processes are gone. */
    int (*rollback)(void *priv, const char *dir, const char *access_token, int agent_listen_fd,
                    struct vmm_rolled_back *out, struct al_error *err);
    /* After a crash of airlock-vmm: undo what the record describes. Blocking. */
    int (*cleanup_record)(const json_t *record, unsigned timeout_ms, struct al_error *err);
    /* Reclaims resources of sandboxes that have no live airlock-vmm. Blocking. */
    int (*sweep)(const struct vmm_sweep_opts *o, struct al_error *err);
};

extern const struct vmm_backend vmm_backend_jail;
extern const struct vmm_backend vmm_backend_kvm;

/* The backend of a name ("jail", "kvm"), or NULL. */
const struct vmm_backend *vmm_backend_find(const char *name);

/* Whether this host can run KVM sandboxes (kvm/backend.c): /dev/kvm, its capabilities, not a
 * paravirtual PVM KVM, a tiny test guest, then the guest kernel (kernel, or
 * $AIRLOCK_KVM_KERNEL, or the installed one) booting to its first console output within
 * timeout_ms. {"usable":bool,"reason":"...","kernel":"...","checks":{...},"elapsed_ms":N}. */
json_t *vmm_kvm_probe_json(const char *kernel, unsigned timeout_ms);

/* A unix socket listening at path (any old file there replaced), mode 0600 from the start
 * (bound under umask 0177): the agent channels of both backends. fd, or -errno with err. */
int vmm_listen_unix(const char *path, int backlog, struct al_error *err);

#endif
