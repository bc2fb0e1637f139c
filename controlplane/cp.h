/* controlplane/cp: airlockd, the control plane, as one object on one libuv loop.
 *
 * Owns: the live sandbox registry (by id and by access-token digest), the components it
 * wires together (state store, backend, network provider, egress registrar, helper-daemon
 * supervisor, HTTP servers, the client pool to agents and airlock-vmm), authentication of
 * API keys, and start/stop of the whole. The pieces live in their own files:
 *   lifecycle.c  create, kill, pause/resume, timeouts, crash detection, re-adoption
 *   rest.c       the E2B REST API (and the admin/CLI routes on the unix socket)
 *   proxy.c      data-plane routing to a sandbox's agent (E2b-Sandbox-Id / X-Access-Token)
 *   policysel.c  which policy a sandbox gets, narrowed by its E2B network fields
 *   metrics.c    per-sandbox samples (getMetrics) and Prometheus /metrics
 *   egressreg.c  registration of sandboxes with airlock-egress
 *   supervise.c  airlock-egress and airlock-vault as supervised child processes
 *   hostcheck.c  what the host offers (kernel, cgroups, KVM, user namespaces)
 *   templates.c  the templates directory and first-start builds
 *   events.c     lifecycle events: recorded, listed, streamed
 *   webhooks.c   lifecycle events POSTed, signed, to the URLs API keys register
 *   warm.c       warm sandboxes: started ahead, claimed by creations
 *   cluster.c    cluster.role: a node's lease in the cluster database, the node list, cordons
 *   cluster_gw.c a gateway: creations placed on nodes, every sandbox request routed to its node
 * Threading: everything runs on the loop's thread except blocking network-provider calls,
 * which run on libuv's thread pool and report back to the loop, and the cluster database's
 * calls, on cluster.c's own thread.
 */
#ifndef AIRLOCK_CP_H
#define AIRLOCK_CP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "backendsel.h"
#include "common/error.h"
#include "common/http.h"
#include "config.h"
#include "disk.h"
#include "ids.h"
#include "map.h"
#include "net.h"
#include "proc.h"
#include "record.h"

struct cp;
struct cp_sandbox;
struct cp_egress;
struct cp_supervisor;
struct cp_metrics;
struct cp_events;
struct cp_webhooks;
struct cp_warm;
struct cp_cluster;
struct cp_cluster_tls;

/* An operation queued on a sandbox (one runs at a time, in order). */
enum cp_op_kind {
    CP_OP_PAUSE = 1,
    CP_OP_RESUME, /* connect / resume of a paused sandbox */
    CP_OP_KILL,
    CP_OP_EXPIRE,   /* the timeout fired: kill or pause */
    CP_OP_SNAPSHOT, /* POST /sandboxes/{id}/snapshots (snapshots.c) */
    CP_OP_ROLLBACK, /* POST /sandboxes/{id}/rollback (snapshots.c) */
    CP_OP_FORK,     /* POST /sandboxes/{id}/fork (snapshots.c) */
    CP_OP_PARK,     /* after a restart: completes a pause without memory that was cut short */
};

struct cp_op {
    enum cp_op_kind kind;
    struct al_http_req *req; /* who waits for the answer, or NULL */
    int api;                 /* how to answer (rest.c's CP_ANSWER_*) */
    uint64_t timeout_s;      /* resume/connect: new lifetime (0 = default) */
    bool auto_pause;         /* resume: autoPause */
    /* pause and resume/connect: E2B's "memory" (-1 not given, 0 false, 1 true). A pause
     * without memory keeps only the files; a resume without it boots the sandbox again
     * over its files (onResume: 'reboot'). */
    int memory;
    /* Instead of (or besides) an HTTP answer: called when the operation is over, rc 0 on
     * success (auto-resume on traffic continues the request that woke the sandbox). */
    void (*done)(struct cp_sandbox *sb, int rc, void *arg);
    void *done_arg;
    int cause;           /* enum cp_event_cause: why (the lifecycle event says so) */
    char key_id[32];     /* the API key that asked ("" when not asked through the API) */
    char name[128];      /* snapshot: its name, or ""; rollback: the snapshot's id */
    unsigned count;      /* fork: the copies to start */
    bool timeout_given;  /* fork: timeout_s is the copies' lifetime */
    char policies[1024]; /* fork: the policies of the key that asked */
    struct cp_op *next;
};

/* One sample of a sandbox's resource use (getMetrics). */
struct cp_sample {
    uint64_t wall_ns;
    float cpu_pct;
    int cpu_count;
    uint64_t mem_used, mem_total, mem_cache, disk_used, disk_total;
};

/* The stages of a creation, timed one after the other (the log line of each creation and
 * airlock_sandbox_create_stage_duration_seconds): the request's checks and its record;
 * the sandbox's network (a pooled one, or one made on the thread pool, and the wait for a
 * thread); its registration with the egress proxy; its wait for a turn to start
 * (sandboxes.start_concurrency); the backend's start until the agent is healthy (airlock-vmm's
 * ready line). */
enum cp_create_stage {
    CP_CREATE_ACCEPT = 0,
    CP_CREATE_NETWORK,
    CP_CREATE_EGRESS,
    CP_CREATE_QUEUE,
    CP_CREATE_START,
    CP_CREATE_STAGES
};

struct cp_sandbox {
    struct cp *cp;
    struct cp_sb_record rec;
    uint8_t token_digest[CP_DIGEST_LEN];
    int refs;
    bool registered;    /* in cp->sandboxes */
    bool token_indexed; /* in cp->by_token */

    /* what is set up (each undone on failure or kill, in reverse) */
    bool has_net;
    struct cp_net net;
    bool egress_registered;
    bool mounts_audited;    /* its volumes' "mount" records were written (before its start) */
    bool ca_pushing;        /* a new CA of the egress proxy is on its way to the agent */
    void *netupdate;        /* the network update waiting for the proxy (netupdate.c) */
    bool started;           /* the backend started it (or adopted it) */
    bool backend_attempted; /* start was called (a failed start may need cleanup) */
    bool watching;
    struct cp_proc_watch watch;
    int pidfd;
    bool timer_init;
    uv_timer_t timer;

    /* operations */
    bool busy;   /* an operation runs */
    void *opctx; /* its context (lifecycle.c) */
    struct cp_op *ops, **ops_tail;
    struct al_http_req *create_req; /* the create request waiting for its 201 */
    int create_api;
    uint64_t create_t0_ns;
    uint64_t create_mark_ns;                  /* when the current stage began */
    double create_stage_ms[CP_CREATE_STAGES]; /* each stage's time (metrics, log) */
    const char *start_how;         /* the backend's word on its start, for the log ("warm") */
    struct cp_sandbox *start_next; /* in cp->start_queue while it waits for its turn */
    bool gone;                     /* the process exited (crash) */
    /* A pause without memory (or a failed boot of a resume) is stopping its processes and
     * releasing its network: its process's exit is expected. */
    bool parking;
    /* warm sandboxes (warm.c) */
    void *warm;        /* its pool entry while it is warm */
    void *build_step;  /* a template build's RUN step it runs (buildsb.c) */
    bool warm_taken;   /* a creation took it: it is claimed, not started */
    bool warm_claimed; /* and it was */
    json_t *warm_env;  /* its template's env, for the claim */
    /* The snapshot a rollback of it is copying from (its deletion waits), or "". */
    char rolling_back[64];

    /* backend */
    char agent_sock[108];
    char vmm_sock[108];
    void *bpriv;

    /* metrics */
    struct cp_sample *samples;
    size_t n_samples, sample_head;
    uint64_t last_cpu_ns, last_cpu_wall_ns;
    bool sampling;
};

struct cp {
    uv_loop_t *loop;
    struct cp_config cfg;
    struct cp_store *store;
    struct al_http_server *api;   /* TCP: the E2B API and the data plane */
    struct al_http_server *local; /* <state>/run/airlockd.sock: the same, for the CLI */
    struct al_http_pool *pool;    /* keep-alive connections to agents and airlock-vmm */
    const struct cp_backend_ops *backend;
    char backend_kind[16];             /* "jail", "kvm", "test": recorded with each sandbox */
    struct cp_backend_sel backend_sel; /* how it was chosen (the console's overview) */
    const struct cp_net_ops *net;
    void *net_priv;
    struct cp_egress *egress;
    struct cp_supervisor *sup;
    struct cp_metrics *metrics;
    struct cp_events *events;           /* lifecycle events (events.c) */
    struct cp_webhooks *webhooks;       /* their deliveries to registered URLs (webhooks.c) */
    struct cp_warm *warm;               /* warm sandboxes (warm.c) */
    struct cp_cluster *cluster;         /* the cluster database's thread (cluster.c), or NULL */
    struct cp_cluster_tls *cluster_tls; /* mutual TLS of gateways and nodes, or NULL */

    struct cp_map sandboxes; /* id -> struct cp_sandbox */
    struct cp_map by_token;  /* token digest -> struct cp_sandbox */
    size_t n_creating;
    size_t n_starting;              /* creations whose sandbox is starting (at most start_limit) */
    size_t start_limit;             /* sandboxes.start_concurrency, resolved */
    struct cp_sandbox *start_queue; /* the others, oldest request first */
    size_t n_live;                  /* in the registry, any state */

    /* API keys */
    struct cp_map key_cache; /* digest -> struct cp_apikey (copies) */
    bool has_env_key;
    uint8_t env_key_digest[CP_DIGEST_LEN];

    char vmm_bin[4096];
    char agent_bin[4096]; /* test backend */
    char api_url[128];
    uint64_t started_ns;
    bool stopping;
    bool adopting;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;            /* metrics sampling, pool refill */
    uv_timer_t refill;          /* the pools' refill, once creations are quiet */
    struct cp_disk disk;        /* the disk reserve (disk.c) */
    struct cp_console *console; /* the web console's sessions (console.c), made at first use */
    void (*on_stopped)(struct cp *cp);
};

/* ---- the daemon (daemon.c) ----------------------------------------------------------- */
struct cp_opts {
    const char *config_file; /* NULL: /etc/airlock/airlockd.yaml if it exists */
    const char *listen;      /* overrides */
    const char *state_dir;
    bool quiet; /* no banner (tests) */
};
int cp_main(int argc, char **argv);
/* A burst of creations is over (none in flight): refill the network pool, the warm
 * airlock-vmm pool and the warm sandboxes once none was asked for sandboxes.refill_quiet, or
 * now when one of them is below half its size (daemon.c). */
void cp_pools_refill(struct cp *cp);

/* ---- registry -------------------------------------------------------------------------- */
struct cp_sandbox *cp_sandbox_get(struct cp *cp, const char *id);
struct cp_sandbox *cp_sandbox_by_token(struct cp *cp, const char *token, size_t len);
void cp_sb_ref(struct cp_sandbox *sb);
void cp_sb_unref(struct cp_sandbox *sb);
/* Saves sb->rec (logs failures: state writes never fail a request that already happened). */
int cp_sb_save(struct cp_sandbox *sb);

/* ---- authentication (auth.c) ------------------------------------------------------------ */
struct cp_principal {
    char key_id[32];
    char policies[1024];
    unsigned role; /* enum cp_role (record.h); 0 (none) until authenticated */
};
/* Checks X-API-KEY (or the unix socket's peer, or a console session: console.h). 0, or
 * -EACCES with err saying why (-EPERM: a console session's request without its CSRF token). */
int cp_auth(struct cp *cp, const struct al_http_req *req, struct cp_principal *who,
            struct al_error *err);
/* The same for a key known by its digest (a console session's key, checked again at every
 * request: a revoked key's sessions stop at once). */
int cp_auth_digest(struct cp *cp, const uint8_t d[CP_DIGEST_LEN], struct cp_principal *who,
                   struct al_error *err);
void cp_auth_free(struct cp *cp);
/* Drops the cache of keys: after airlockd's own change of a key (its own writes are not
 * another connection's, which cp_store_changed reports). */
void cp_auth_flush(struct cp *cp);
/* Whether who's role may make this request (the table of docs/api.md, "Roles", in auth.c):
 * 0, or -EPERM with err naming the role, the route and the roles it needs. */
int cp_auth_role_check(const struct cp_principal *who, const char *method, const char *path,
                       struct al_error *err);
/* Whether who may hold a sandbox's access tokens (and so reach its data plane: commands,
 * files, the ports it serves). A role without it sees sandboxes without their tokens. */
bool cp_auth_data_plane(const struct cp_principal *who);

/* ---- lifecycle (lifecycle.c) ---------------------------------------------------------- */
struct cp_create {
    char template_id[CP_TEMPLATE_MAX];
    uint64_t timeout_s;
    bool timeout_given;
    json_t *metadata;   /* borrowed */
    json_t *env_vars;   /* borrowed */
    json_t *network;    /* borrowed, or NULL */
    json_t *volumes;    /* borrowed: volumeMounts as cp_volumes_resolve made them, or NULL */
    int allow_internet; /* -1 not given */
    bool auto_pause;
    bool auto_pause_fs; /* autoPauseMemory: false */
    bool auto_resume;
    struct cp_principal who;
    /* A fork's copy (snapshots.c): the checkpoint's files, template_id being the version
     * they apply to ("ID" or "ID:BUILD"), and the sandbox forked (its created event names
     * it); NULL otherwise. */
    const char *restore_dir;
    const char *forked_from;
    /* When set, the answer goes here instead of to req (NULL): called once, possibly before
     * cp_lifecycle_create returns, with 201 and the E2B Sandbox object (the callee's), or
     * the error's status and message (sandbox NULL). */
    void (*done)(int status, json_t *sandbox, const char *msg, void *arg);
    void *done_arg;
};
/* Starts a creation; the answer (201 or an error) goes to req (or c->done) when it is done. */
void cp_lifecycle_create(struct cp *cp, const struct cp_create *c, struct al_http_req *req,
                         int api);
/* Queues an operation; answers req when done. cause (enum cp_event_cause) and key_id (the
 * API key that asked, or NULL) go into the lifecycle event of the change. */
void cp_lifecycle_op(struct cp_sandbox *sb, enum cp_op_kind kind, struct al_http_req *req, int api,
                     uint64_t timeout_s, bool auto_pause, int cause, const char *key_id);
/* An operation asked through the API (pause, resume/connect) with all its fields. */
struct cp_op_args {
    struct al_http_req *req;
    int api;
    uint64_t timeout_s;
    bool auto_pause;
    int memory; /* -1 not given, 0, 1 */
    const char *key_id;
};
void cp_lifecycle_api_op(struct cp_sandbox *sb, enum cp_op_kind kind, const struct cp_op_args *a);
/* Queues a snapshot of sb (kind CP_OP_SNAPSHOT, named name, "" for none) or a rollback of it
 * (CP_OP_ROLLBACK to the snapshot whose id is name) (controlplane/snapshots.c); answers req. */
void cp_lifecycle_snapshot(struct cp_sandbox *sb, enum cp_op_kind kind, struct al_http_req *req,
                           const char *name, const char *key_id);
/* Queues a fork of sb (CP_OP_FORK, controlplane/snapshots.c): count copies, each with a
 * lifetime of timeout_s when timeout_given, asked by who; answers req. */
void cp_lifecycle_fork(struct cp_sandbox *sb, struct al_http_req *req, unsigned count,
                       bool timeout_given, uint64_t timeout_s, const struct cp_principal *who);
/* Resumes a paused sandbox (auto-resume on traffic) and calls done afterwards. */
void cp_lifecycle_resume_then(struct cp_sandbox *sb,
                              void (*done)(struct cp_sandbox *sb, int rc, void *arg), void *arg);
/* Sets the expiry to now + seconds (E2B setTimeout / refreshes). */
void cp_lifecycle_set_timeout(struct cp_sandbox *sb, uint64_t seconds, const char *key_id);
/* PUT /sandboxes/{id}/network once rest.c checked its shape: fields holds the egress
 * fields given (allowOut, denyOut, rules; egressProxy already refused), allow_internet
 * -1/0/1. Answers req (204 with the new generation as ETag, 400, 409, 412, 500, 502) when
 * done (netupdate.c). */
void cp_network_update(struct cp_sandbox *sb, struct al_http_req *req, const json_t *fields,
                       int allow_internet, const char *key_id);
/* An If-Match header (NULL: absent) against the network generation: 1 it matches ("N", N,
 * *, or a comma-separated list of them naming generation; absent matches), 0 it does not,
 * -EINVAL malformed. */
int cp_network_if_match(const char *v, uint64_t generation);
/* A new sandbox object (one reference, the caller's), not yet in the registry. */
struct cp_sandbox *cp_sb_new(struct cp *cp);
/* Tears down a sandbox that is not in the registry (a warm one): backend, network, record;
 * done (may be NULL) once it is gone. */
void cp_lifecycle_discard(struct cp_sandbox *sb, void (*done)(struct cp_sandbox *sb, void *arg),
                          void *arg);
/* Re-adopts what the store says was running (at start). */
void cp_lifecycle_adopt_all(struct cp *cp, void (*done)(struct cp *cp));
/* Kills every sandbox (SIGTERM with on_shutdown: kill); done when all are gone. */
void cp_lifecycle_kill_all(struct cp *cp, void (*done)(struct cp *cp));
/* Releases the in-memory state of every sandbox without stopping them (on_shutdown: keep). */
void cp_lifecycle_detach_all(struct cp *cp);

/* ---- answers (rest.c) ----------------------------------------------------------------- */
/* The envd version airlock's agent speaks, as Sandbox and Template objects report it. */
#define CP_ENVD_VERSION "0.6.4"

enum {
    CP_ANSWER_NONE = 0,
    CP_ANSWER_CREATED,
    CP_ANSWER_CONNECT,
    CP_ANSWER_RESUME,
    CP_ANSWER_EMPTY
};
/* The E2B Sandbox object of a running sandbox. */
json_t *cp_rest_sandbox_json(const struct cp_sandbox *sb);
json_t *cp_rest_detail_json(const struct cp_sandbox *sb);
/* A non-negative integer query parameter: true with *has set (false when absent or empty),
 * or false after answering 400 naming it. */
bool cp_rest_u64_param(struct al_http_req *req, const char *name, uint64_t *out, bool *has);
/* A boolean query parameter (true or false; absent or empty: false): true with *out set, or
 * false after answering 400 naming it. */
bool cp_rest_bool_param(struct al_http_req *req, const char *name, bool *out);
/* The path segment at *pp (up to the next '/' or the end), percent-decoded, into out; *pp
 * then points at that '/' or the end. False for an empty or too long segment or a bad
 * escape. */
bool cp_rest_path_part(const char **pp, char *out, size_t len);
/* Answers 200 with one page of a list (arr, stolen) and, unless next is "", the x-next-token
 * header the SDKs' paginators read. */
void cp_rest_reply_page(struct al_http_req *req, json_t *arr, const char *next);
/* Wipes a request body that carries a secret: the parsed string body[field] (body NULL: only
 * the raw bytes) and the raw bytes. */
void cp_rest_wipe_body(struct al_http_req *req, json_t *body, const char *field);
/* Answers an error in the E2B shape {"code":status,"message":...}. */
void cp_rest_error(struct al_http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- servers -------------------------------------------------------------------------- */
void cp_on_request(struct al_http_req *req, void *ctx); /* router (rest.c) */
/* Forwards req to the sandbox's agent (proxy.c); port non-NULL adds the E2b-Sandbox-Id and
 * E2b-Sandbox-Port headers of a request routed by its Host. */
void cp_proxy(struct cp *cp, struct cp_sandbox *sb, struct al_http_req *req, const char *port);
/* Routes data-plane requests; returns false if req is not one (proxy.c). */
bool cp_proxy_route(struct cp *cp, struct al_http_req *req);
/* Whether req's Host is a getHost(port) name "<port>-<id>.<api.domain>": port and id (not
 * checked further) into port[portlen] and id[idlen]. */
bool cp_proxy_host_parse(const struct cp *cp, const struct al_http_req *req, char *port,
                         size_t portlen, char *id, size_t idlen);
/* E2B's proxy's answer for traffic to a sandbox that does not exist (any more): 502
 * {"sandboxId","message":"The sandbox was not found","code":502}. */
void cp_proxy_not_found(struct cp *cp, struct al_http_req *req, const char *id);
/* A Set-Cookie value from a sandbox without its Domain attributes (any case, any value,
 * with or without a leading dot): the cookie stays host-only, bound to the one origin
 * "<port>-<id>.<domain>" it came from, never to a domain that spans other sandboxes' origins
 * or the API. out (outlen >= strlen(in) + 1; a smaller one gets "") receives it; returns
 * true if one was dropped (or out was too small). */
bool cp_proxy_cookie_host_only(const char *in, char *out, size_t outlen);

#endif
