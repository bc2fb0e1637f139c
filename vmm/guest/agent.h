/* vmm/guest/agent: the in-sandbox agent's shared state and the interfaces between its
 * modules (internal to vmm/guest; nothing outside includes this).
 *
 *   main.c         PID 1 duties, arguments, channels (listen fd, init fd)
 *   agent.c        state, configuration (/init), users, routing, /health /envs /metrics
 *   rpc.c          Connect unary calls and server streams over common/http
 *   proc.c         process.Process (pipes, ptys, stdin, signals, timeouts, retained exits)
 *   fs.c           filesystem.Filesystem unary calls and EntryInfo
 *   watch.c        filesystem.Filesystem's watches: WatchDir, CreateWatcher... (inotify)
 *   files.c        GET/POST /files
 *   interp.c       code interpreter: /execute, /contexts, kernels
 *   forward.c      the sandbox's other ports (getHost): forwarded to its own loopback
 *   startcmd.c     the template's startCmd and readyCmd, GET /ready
 *   sudo.c         root on request for the sandbox's own processes (the `sudo` program)
 *   connect.c protojson.c multipart.c users.c fspath.c spawn.c fdio.c ndjson.c: pure helpers
 */
#ifndef AIRLOCK_GUEST_AGENT_H
#define AIRLOCK_GUEST_AGENT_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/error.h"
#include "common/http.h"
#include "common/trust.h"
#include "connect.h"
#include "users.h"

/* The envd version this agent implements (see README.md for what it means). */
#define AGENT_ENVD_VERSION "0.6.4"
#define AGENT_ENVD_PORT    "49983"
#define AGENT_INTERP_PORT  "49999"

struct agent_limits {
    size_t rpc_max_body;       /* a Connect request message */
    size_t json_max_body;      /* /init, /execute, /contexts bodies */
    size_t max_procs;          /* live processes started through process.Process */
    size_t max_subscribers;    /* streams attached to one process */
    size_t stream_high_water;  /* queued response bytes that pause a producer */
    size_t stdin_max_queued;   /* bytes waiting for a slow stdin reader */
    size_t max_watchers;       /* WatchDir streams and polled watchers at once */
    size_t max_watches;        /* inotify watches per recursive WatchDir */
    size_t max_watcher_events; /* events a polled watcher (CreateWatcher) keeps */
    uint64_t watcher_idle_ms;  /* a polled watcher nobody asks for events goes after this */
    size_t max_contexts;       /* code-interpreter contexts */
    size_t max_pending_exec;   /* queued executions per context */
    size_t kernel_max_frame;   /* one message from a kernel */
    size_t max_list_entries;   /* ListDir */
    uint64_t max_upload_bytes; /* one /files upload, after decompression */
    size_t max_retained_exits;
    uint32_t forward_timeout_ms; /* a forwarded port's answer must start within this */
};

struct agent_procs;
struct agent_watchers;
struct agent_interp;
struct agent_sudo;
struct agent_sudo_req;
struct agent_start;

struct agent {
    uv_loop_t *loop;
    struct al_http_server *server;
    struct agent_limits lim;
    struct agent_userdb users;

    /* Configuration (template defaults, init channel, POST /init). */
    char *default_user;    /* NULL: "user" when it exists and we may switch, else ourselves */
    char *default_workdir; /* NULL: the user's home */
    json_t *env;           /* envVars from init: name -> value (values never logged) */
    char *token;           /* sodium_malloc'd, NUL-terminated; NULL when unset */
    size_t token_len;
    char *sandbox_id, *template_id, *hostname;
    bool code_interpreter;       /* init's agent.code_interpreter: default contexts start at once */
    char *start_cmd, *ready_cmd; /* init's startCmd / readyCmd (the template's) */
    struct agent_start *start;   /* startcmd.c, once begun */

    /* Who we are. */
    bool pid1;
    bool vm_guest; /* PID 1 of a KVM guest: init may set clock, entropy, network (vmguest.c) */
    uid_t self_uid;
    gid_t self_gid;
    bool can_switch_user;
    /* --build-sandbox: what uid 0's processes keep (AL_BUILD_ROOT_CAPS); 0 in every other
     * sandbox, whose processes have no capability at all. */
    uint64_t root_caps;
    char *home_override;    /* --home: the home of the agent's own user (tests) */
    char *path_env;         /* PATH handed to children */
    char lib_dir[PATH_MAX]; /* holds airlock_kernel.py, airlock_kernel.js and friends */
    char *python;           /* interpreter for Python contexts */
    char *node;             /* Node.js for JavaScript and TypeScript contexts */

    /* The sandbox CA (trust.c): where trust stores live ("/" as init; --ca-root in tests;
     * NULL: installing is refused), and whether children get the CA variables. */
    char *ca_root;
    bool ca_installed;

    struct agent_procs *procs;
    struct agent_watchers *watchers;
    struct agent_interp *interp;
    struct agent_sudo *sudo;       /* the sandbox's sudo (sudo.c); NULL when off */
    struct al_http_pool *fwd_pool; /* keep-alive connections to the sandbox's own servers */

    uint64_t start_ns;
    bool stopping;
};

void agent_limits_default(struct agent_limits *lim);

/* ---- agent.c ------------------------------------------------------------------------ */
int agent_init(struct agent *a, uv_loop_t *loop, struct al_error *err);
void agent_free(struct agent *a);
/* Applies an init object (envVars, accessToken, defaultUser, defaultWorkdir, sandboxID,
 * templateID, hostname, timestamp). authorized = came from the init fd or carried the
 * current token. */
int agent_apply_init(struct agent *a, json_t *init, struct al_error *err);
/* ---- vmguest.c: init fields only a KVM guest's PID 1 applies ------------------------- */
struct agent_vm_init {
    bool have_ts;
    uint64_t ts_ns;    /* "timestamp" (wall clock, ns since the epoch) */
    uint8_t seed[512]; /* "seed" (wiped after use) */
    size_t seed_len;
    bool have_net; /* "network" */
    char address[48], gateway[40], mac[24], dns[160];
    char hostname[64]; /* "hostname" ("" = absent) */
};
/* true when airlock-kvm-init exec'd us as PID 1 of a KVM guest (AIRLOCK_AGENT_VM=kvm). */
bool agent_vm_guest_detect(void);
/* Validates timestamp, seed, network and hostname (nothing is changed). */
int agent_vm_parse(const json_t *init, struct agent_vm_init *v, struct al_error *err);
/* Applies them in a KVM guest (clock, RNG reseed, network and hostname through
 * airlock-kvm-init configure); elsewhere a no-op with a debug log. */
int agent_vm_apply(struct agent *a, const struct agent_vm_init *v, struct al_error *err);

/* Resolves name (NULL = the default user) and checks we may act as that user.
 * -ENOENT: no such user; -EPERM: we lack the capability to switch. */
int agent_resolve_user(struct agent *a, const char *name, struct agent_user *u,
                       struct al_error *err);
/* The Basic-auth user of a request, or NULL (into buf). -EINVAL on a malformed header. */
int agent_basic_auth_user(const struct al_http_req *req, char *buf, size_t buflen);
/* Constant-time check of X-Access-Token (true when no token is configured). */
bool agent_token_ok(const struct agent *a, const char *presented);
/* The environment for a child: PATH, HOME, USER, LOGNAME, init envVars, then extra (an
 * object of strings, may be NULL), later entries winning. NULL-terminated, malloc'd. */
char **agent_child_env(struct agent *a, const struct agent_user *u, const json_t *extra,
                       const char *const *more);
void agent_free_strv(char **v);
/* Request router (the al_http on_request handler). */
void agent_on_request(struct al_http_req *req, void *ctx);
/* envd-style JSON error: {"code": status, "message": ...}. */
void agent_reply_error(struct al_http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- trust.c: the sandbox's airlock CA ------------------------------------------------ */
#define AGENT_CA_DIR    AL_TRUST_CA_DIR
#define AGENT_CA_FILE   AL_TRUST_CA_FILE
#define AGENT_CA_BUNDLE AL_TRUST_CA_BUNDLE
struct al_buf;
/* One PEM certificate, printable, at most 64 KiB. */
int agent_ca_check(const char *pem, size_t len, struct al_error *err);
/* The bundle old with the airlock block (between marker lines) replaced by pem, or added. */
int agent_ca_bundle_merge(const char *old, size_t old_len, const char *pem, size_t len,
                          struct al_buf *out);
/* Writes AGENT_CA_FILE and merges AGENT_CA_BUNDLE under a->ca_root; sets ca_installed. */
int agent_install_ca(struct agent *a, const char *pem, size_t len, struct al_error *err);

/* ---- children (main.c) ------------------------------------------------------------- */
/* Called by the SIGCHLD handler for every reaped child; returns true when the pid was one
 * of ours (processes, kernels). Unknown pids (orphans reparented to us) are just reaped. */
typedef void (*agent_child_exit_fn)(void *arg, pid_t pid, int wstatus);
int agent_child_watch(struct agent *a, pid_t pid, agent_child_exit_fn fn, void *arg);
void agent_child_unwatch(struct agent *a, pid_t pid);
void agent_reap_children(struct agent *a);

/* ---- startcmd.c --------------------------------------------------------------------- */
/* Starts the start command and the ready checks init named (once per agent; no-op if none). */
void agent_start_begin(struct agent *a);
/* GET /ready's body: {"state": "none"|"starting"|"ready"|"failed", "startCmd", "readyCmd",
 * "startPid", "attempts", "lastStatus", "lastOutput", "error"}. */
json_t *agent_start_status(const struct agent *a);
void agent_start_shutdown(struct agent *a, int sig);
void agent_start_free(struct agent *a);

/* ---- proc.c ------------------------------------------------------------------------- */
struct agent_shell_opts {
    const char *cmdline;
    const char *tag;
    agent_child_exit_fn on_end; /* may be NULL */
    void *arg;                  /* on_end's */
};
/* Starts `/bin/bash -l -c o->cmdline` as the default user in the default workdir, tracked as
 * a process Start made (process.List shows it, Connect attaches to it by pid or tag);
 * o->on_end is told of its exit. */
int agent_proc_start_shell(struct agent *a, const struct agent_shell_opts *o, pid_t *pid,
                           struct al_error *err);

/* ---- rpc.c -------------------------------------------------------------------------- */
struct agent_call {
    struct agent *a;
    struct al_http_req *req;
    const char *method; /* "Start", ... */
    json_t *msg;        /* the request message (owned by the call) */
    bool has_user;      /* Basic auth named a user */
    char user[256];
    bool has_deadline; /* Connect-Timeout-Ms, as connect-go applies it to every call */
    uint64_t deadline; /* the loop time (uv_now, ms) at which it passes */
};

struct agent_stream;
typedef void (*agent_stream_fn)(struct agent_stream *s);

struct agent_stream {
    struct agent *a;
    struct al_http_req *req;
    uv_timer_t keepalive;
    uint64_t keepalive_ms;
    const char *keepalive_json; /* the service's keepalive message */
    uv_timer_t deadline;        /* the call's Connect-Timeout-Ms (when it has one) */
    bool has_deadline;
    int handles; /* timers not yet closed */
    bool ended;
    bool peer_gone;
    /* The stream ends without its owner (the peer left, or the deadline passed): the owner
     * must drop the stream inside this callback. */
    agent_stream_fn on_gone;
    agent_stream_fn on_drain; /* queued bytes fell below the low-water mark */
    void *owner;
    bool drain_armed;
};

/* Replies to a unary call with msg (stolen; NULL = {}), or with an error. */
void agent_rpc_reply(struct agent_call *c, json_t *msg);
void agent_rpc_error(struct agent_call *c, enum agent_connect_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agent_call_free(struct agent_call *c);
/* Milliseconds until the call's deadline (0 once it has passed); -1 when it has none. */
int64_t agent_call_time_left(const struct agent_call *c);
/* Begins a server stream (200, application/connect+json). Keepalive-Ping-Interval from
 * the request, keepalive_json sent after that much silence. A call with a deadline ends
 * there as envd's do: the owner is detached (on_gone) and the stream ends with
 * deadline_exceeded "context deadline exceeded", whatever it was waiting for. */
struct agent_stream *agent_stream_start(struct agent_call *c, const char *keepalive_json);
/* Sends one message (stolen). -EPIPE when the peer is gone. */
int agent_stream_send(struct agent_stream *s, json_t *msg);
size_t agent_stream_queued(const struct agent_stream *s);
/* Ends with the end-stream frame and releases the stream (do not touch it afterwards). */
void agent_stream_end(struct agent_stream *s, enum agent_connect_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The deadline passes now (a process whose own deadline killed it ends its Start stream
 * first, so that the kill's end event never reaches it). */
void agent_stream_expire(struct agent_stream *s);
/* Asks for on_drain once the queue is below low water. */
void agent_stream_want_drain(struct agent_stream *s);
/* A stream that fails before it starts: 200 + end-stream frame carrying the error. */
void agent_stream_fail(struct agent_call *c, enum agent_connect_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agent_rpc_dispatch(struct agent *a, struct al_http_req *req, const char *service,
                        const char *method);

/* ---- services ----------------------------------------------------------------------- */
int agent_procs_init(struct agent *a);
void agent_procs_free(struct agent *a);
void agent_procs_shutdown(struct agent *a, int sig);
void agent_process_call(struct agent_call *c);

void agent_fs_call(struct agent_call *c);
/* EntryInfo of a path (lstat semantics, envd's field rules). -ENOENT etc. */
int agent_entry_info(struct agent *a, const char *path, json_t **out, struct al_error *err);
/* mkdir -p owned by uid/gid for every directory created. */
int agent_ensure_dirs(const char *path, uid_t uid, gid_t gid, bool chown_new, struct al_error *err);

int agent_watchers_init(struct agent *a);
void agent_watchers_free(struct agent *a);
void agent_watch_call(struct agent_call *c);

void agent_files_request(struct agent *a, struct al_http_req *req);

int agent_interp_init(struct agent *a);
void agent_interp_free(struct agent *a);
void agent_interp_request(struct agent *a, struct al_http_req *req);
void agent_interp_shutdown(struct agent *a, int sig);
/* Creates the default contexts (python, then the other languages the template provides),
 * once; later calls do nothing. Every interpreter request makes them first, so that they
 * come before any context a client creates. */
void agent_interp_start_defaults(struct agent *a);

/* ---- sudo.c ------------------------------------------------------------------------- */
/* Listens on path (mode 0666 in a directory made 0755) for the sandbox's `sudo`. */
int agent_sudo_listen(struct agent *a, const char *path, struct al_error *err);
/* Signals the process group of every command started through sudo. */
void agent_sudo_shutdown(struct agent *a, int sig);
/* Kills what runs (SIGKILL), closes every session and the socket (removed). */
void agent_sudo_close(struct agent *a);
/* May the process with this uid use sudo? Root, and users whose groups (passwd, group)
 * include "sudo". caller is filled in; -EPERM with the reason. */
int agent_sudo_authorize(struct agent *a, uid_t uid, struct agent_user *caller,
                         struct al_error *err);
/* The command's environment by sudo's rules (reset to sudo's kept variables unless -E, the
 * unsafe ones dropped even then; the target's USER, LOGNAME, MAIL, and HOME and SHELL unless
 * -E; PATH the secure path; SUDO_USER, SUDO_UID, SUDO_GID, SUDO_COMMAND; the command line's
 * NAME=value last) over what a process the API starts as the target gets (the sandbox's
 * variables and CA settings). */
struct agent_sudo_env_opts {
    const struct agent_user *caller;
    uid_t caller_uid; /* the calling process's ids (SUDO_UID, SUDO_GID) */
    gid_t caller_gid;
    const struct agent_user *target;
    const struct agent_sudo_req *req;
    const char *shell;   /* SHELL */
    const char *command; /* SUDO_COMMAND */
};
char **agent_sudo_env(struct agent *a, const struct agent_sudo_env_opts *o);
/* An executable (regular, some x bit) called file in the absolute entries of path. */
int agent_sudo_find(const char *file, const char *path, char *out, size_t outlen);

/* ---- forward.c ---------------------------------------------------------------------- */
/* Forwards a request for another port of the sandbox (port_str: E2b-Sandbox-Port) to that
 * port on the sandbox's loopback, after checking agent_traffic_ok. */
void agent_forward_request(struct agent *a, struct al_http_req *req, const char *port_str);
/* A port as E2b-Sandbox-Port carries it: decimal 1..65535 without leading zeros; -EINVAL. */
int agent_forward_port(const char *s);
/* The origin-form of a request-target the server admitted (common/http_head.h): itself, or
 * the path and query of an absolute URI ("http://h/p?q" -> "/p?q", "http://h" -> "/",
 * "http://h?q" -> "/?q", written to buf; NULL when that does not fit in len bytes). */
const char *agent_forward_origin_form(const char *target, char *buf, size_t len);
/* May this request use the forwarded ports? E2B-Traffic-Access-Token = the traffic token
 * derived from the access token (al_http_traffic_token), or X-Access-Token = the access
 * token, each compared in constant time; true while no access token is configured. */
bool agent_traffic_ok(const struct agent *a, const struct al_http_req *req);
void agent_forward_free(struct agent *a);

#endif
