/* vmm/vmm: the airlock-vmm process: one sandbox from start to reclaim.
 *
 * Owns: the sandbox's state directory <state>/sandboxes/<id>/ (vmm.lock, vmm.json,
 * agent.sock, vmm.sock, agent.log), the lock that says "an airlock-vmm owns this id", the
 * record a crash cleanup reads, the agent channel socket, the event loop (API, log
 * capture, health probe, the sandbox's exit), the stop sequence, and --cleanup / --sweep.
 * The backend (backend.h) does the sandbox itself.
 */
#ifndef AIRLOCK_VMM_VMM_H
#define AIRLOCK_VMM_VMM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "backend.h"
#include "common/error.h"
#include "logcap.h"
#include "spec.h"

/* Exit codes of airlock-vmm run. */
#define VMM_EXIT_STOPPED     0 /* stopped on request (API or SIGTERM), everything reclaimed */
#define VMM_EXIT_SETUP       1 /* could not start; nothing left behind */
#define VMM_EXIT_USAGE       2
#define VMM_EXIT_AGENT_DIED  3 /* the agent exited on its own; everything reclaimed */
#define VMM_EXIT_UNHEALTHY   4 /* the agent never answered /health; everything reclaimed */
#define VMM_EXIT_NOT_CLEANED 5 /* could not reclaim everything: run airlock-vmm --cleanup ID */

enum vmm_state { VMM_STARTING = 0, VMM_RUNNING, VMM_PAUSED, VMM_STOPPING, VMM_STOPPED };

struct vmm_opts {
    const char *spec_path; /* "-" = standard input (keeps the access token off the disk) */
    int ready_fd;          /* -1, or where one JSON line reports ready / failed */
    /* Warm start: do the spec-independent work (the jail backend: its cgroups) first, say
     * {"warm":true,...} on ready_fd, then wait for the spec on standard input. */
    bool warm;
    const json_t *warm_opts; /* e.g. {"cgroup_parent": "airlock"} */
};

struct vmm_probe;
struct vmm_api;

struct vmm {
    struct vmm_spec spec;
    const struct vmm_backend *backend;
    void *priv;
    char dir[4096];
    char agent_sock[108];
    char api_sock[108];
    char log_path[4200];
    int lock_fd;
    int ready_fd;
    enum vmm_state state;
    int exit_code;
    bool agent_alive;
    int agent_status; /* wait status once reaped */
    struct vmm_started started;
    uint64_t t_begin_ns;   /* when airlock-vmm started */
    uint64_t t_mark[5];    /* steps before the backend starts (see the ready line) */
    uint64_t t_exec_ns;    /* agent exec'd */
    uint64_t t_healthy_ns; /* /health answered */
    uint64_t started_wall_ns;
    bool healthy;

    uv_loop_t *loop;
    uv_poll_t pid_poll;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t stop_timer; /* grace period, then the reap poll */
    uint64_t stop_deadline_ns;
    bool killed;
    struct vmm_logcap log;
    struct vmm_probe *probe;
    struct vmm_api *api;
    /* A rollback whose new agent is not healthy yet: called once it is (or is not). */
    void (*rollback_done)(struct vmm *v, int rc, json_t *info, const char *msg);
    json_t *rollback_info;
    /* The spec carried the agent's token: without one (a warm start) the agent got its
     * identity later from airlockd (its /init), which a rollback cannot give again. */
    bool spec_token;
};

/* Runs one sandbox; returns the process exit code (VMM_EXIT_*). */
int vmm_run(const struct vmm_opts *o);
/* Reclaims what a crashed airlock-vmm left for sandbox id: what its record names and, for
 * one that died before it wrote its record, its cgroups and id slot by name (defaults: as
 * for vmm_sweep). Refuses if it is still running; wait_ms > 0 waits that long for its lock
 * first (the processes of a killed airlock-vmm that had not yet exec'd hold it until they
 * die). Returns 0 (also when there was nothing to do). */
int vmm_cleanup(const char *id, const json_t *defaults, bool keep_logs, unsigned wait_ms,
                struct al_error *err);
/* Reclaims every sandbox of the state directory that has no live airlock-vmm, then the
 * backends' orphans (defaults: backend options such as the cgroup parent); keep_logs keeps
 * the agent logs of the reclaimed sandboxes. Returns the
 * number of sandboxes reclaimed, or a negative errno. */
int vmm_sweep(const json_t *defaults, bool keep_logs, struct al_error *err);
/* true if an airlock-vmm holds the lock of sandbox id. */
bool vmm_is_live(const char *id, void *arg);

/* For the API (api.c). */
const char *vmm_state_name(enum vmm_state s);
int vmm_pause(struct vmm *v, struct al_error *err);
int vmm_resume(struct vmm *v, struct al_error *err);
/* POST /rollback: the running sandbox's file system replaced by the snapshot dir (one of
 * its own; backends that can: jail) and its agent started again (access_token: the
 * agent's, which this process does not keep). The backend's part blocks (kill, copy);
 * done(v, rc, info, msg) runs once the new agent answers /health (rc 0, info stolen) or
 * it does not, or the sandbox stops meanwhile (rc < 0, msg). Returns < 0 with err if
 * refused at once: -ENOTSUP no rollback in this backend, -EBUSY not running or another
 * rollback under way, -EALREADY paused, -EINVAL a snapshot it cannot roll back to (the
 * sandbox is unchanged), else the backend failed (if after the kill, the sandbox stops). */
int vmm_rollback(struct vmm *v, const char *dir, const char *access_token,
                 void (*done)(struct vmm *v, int rc, json_t *info, const char *msg),
                 struct al_error *err);
/* Starts the stop sequence (idempotent); grace_ms > 0 sends SIGTERM first. */
void vmm_stop(struct vmm *v, uint32_t grace_ms, int exit_code);
json_t *vmm_status_json(const struct vmm *v);
json_t *vmm_stats_json(const struct vmm *v);

/* API server on <dir>/vmm.sock (api.c). */
int vmm_api_start(struct vmm *v, struct al_error *err);
/* Answers pending stop requests and closes the server; done() runs when all is closed. */
void vmm_api_finish(struct vmm *v, void (*done)(struct vmm *v));

/* Health probe of the agent socket (health.c): GET /health until a 2xx or the deadline. */
int vmm_probe_start(struct vmm *v, uint32_t timeout_ms, void (*done)(struct vmm *v, int rc));
void vmm_probe_cancel(struct vmm *v);

#endif
