/* egress/egress: the airlock-egress daemon as a library (the binary, tests and benchmarks
 * start it through this header).
 *
 * Owns: the configuration (defaults, command line, checks) and the lifecycle of one proxy
 * instance: workers (one libuv loop per core), the sandbox registry, the resolver, the
 * audit sink, and the admin API.
 */
#ifndef AIRLOCK_EGRESS_EGRESS_H
#define AIRLOCK_EGRESS_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "common/error.h"

#define EGRESS_MAX_LISTEN 4

enum egress_relay_mode { EGRESS_RELAY_SPLICE = 0, EGRESS_RELAY_COPY = 1 };

/* How the listening sockets are laid out over the workers.
 *   REUSEPORT  one socket per worker in a SO_REUSEPORT group per address: the kernel spreads
 *              connections (and DNS datagrams) over the workers.
 *   SHARED     one socket per address without SO_REUSEPORT, polled by every worker (accept4
 *              and recvmsg are non-blocking; a worker that loses the race sees EAGAIN).
 *              Needed where the vswitch hands packets with bpf_sk_assign and the kernel is
 *              older than 6.5: there, bpf_sk_assign refuses any socket with SO_REUSEPORT, so
 *              every sandbox connection would be dropped (assign_failed).
 *   AUTO       SHARED when the vswitch may be used (--vswitch auto|on) and the kernel cannot
 *              assign SO_REUSEPORT sockets (egress_listener_mode_pick), else REUSEPORT. */
enum egress_listener_mode {
    EGRESS_LISTENER_AUTO = 0,
    EGRESS_LISTENER_REUSEPORT = 1,
    EGRESS_LISTENER_SHARED = 2,
};
const char *egress_listener_mode_name(enum egress_listener_mode m);

struct egress_config {
    char state_dir[512];
    char admin_socket[512]; /* default <state>/run/egress.sock; "" = no admin API */
    char audit_dir[512];    /* default <state>/audit */
    /* TLS interception and credential injection (inspect.c, egress/intercept/). */
    char upstream_ca[512];  /* roots upstream certificates are verified against;
                                      default /etc/ssl/certs/ca-certificates.crt */
    char vault_socket[512]; /* airlock-vault; default <state>/run/vault.sock */
    bool no_vault;          /* --vault-socket none: injecting rules are refused */
    /* Transparent TCP listeners (IP_TRANSPARENT; original destination = local address). */
    struct sockaddr_storage tcp_listen[EGRESS_MAX_LISTEN];
    size_t n_tcp_listen;
    /* DNS listeners (UDP and TCP on the same address). */
    struct sockaddr_storage dns_listen[EGRESS_MAX_LISTEN];
    size_t n_dns_listen;
    struct sockaddr_storage resolver; /* upstream resolver (port 53 by default) */
    bool have_resolver;
    unsigned workers;                        /* 0 = one per online CPU */
    enum egress_listener_mode listener_mode; /* --listener-mode (or the environment's
                                                AIRLOCK_EGRESS_LISTENER_MODE); default auto */
    bool listener_mode_set;                  /* given on the command line (beats the environment) */
    uint32_t upstream_mark;                  /* SO_MARK on upstream sockets (0 = none) */
    enum egress_relay_mode relay;

    /* Limits. */
    uint32_t max_conns_per_sandbox; /* default 256 (a policy's limits may lower it) */
    uint32_t max_conns;             /* all sandboxes; default 16384 */
    uint64_t memory_budget;         /* buffers of all connections; default 256 MiB */
    uint64_t sandbox_memory;        /* one sandbox's share; default budget / 4 */
    uint32_t max_header_bytes;      /* request line + headers; default 32 KiB */
    uint64_t max_body_bytes;        /* per request; default 1 GiB (policy may lower) */
    uint32_t header_timeout_ms;     /* first bytes / complete header block: 10 s */
    uint32_t connect_timeout_ms;    /* upstream connect: 10 s */
    uint32_t response_timeout_ms;   /* upstream response headers: 60 s */
    uint32_t idle_timeout_ms;       /* no byte either way on a tunnel: 300 s */
    uint32_t keepalive_timeout_ms;  /* between requests from a client: 60 s */
    uint32_t body_timeout_ms;       /* longest gap inside a body: 30 s */

    /* DNS. */
    uint32_t dns_min_ttl, dns_max_ttl; /* clamp of answers: 5 s .. 300 s */
    uint32_t dns_neg_ttl;              /* negative/failure cache: 30 s (max) */
    uint32_t dns_remember_s;           /* answers kept for the destination check: 600 s */
    uint32_t dns_timeout_ms;           /* one upstream attempt: 2 s (two attempts) */
    uint32_t dns_max_name;             /* longer names are an exfiltration shape: 200 */
    uint32_t dns_max_label;            /* longer labels likewise: 52 */
    uint32_t dns_entropy_min_len;      /* labels this long are checked for entropy: 24 */
    double dns_entropy_max;            /* bits/char above which they are refused: 4.0 */
    uint32_t dns_rate;                 /* queries per second per sandbox: 200 (0 = no limit) */
    uint32_t dns_burst;                /* ... of which at once: 400 */
    uint32_t dns_inflight;             /* upstream resolutions one sandbox may wait on: 64 */

    /* vswitch: register the listening sockets with the switch of this state directory
     * (auto: when one exists), and mark replies toward sandboxes with its reply mark. */
    int vswitch_mode;       /* 0 auto, 1 on, 2 off */
    char vswitch_pins[512]; /* pin dir of the switch (default: from its state) */
    uint32_t reply_mark;    /* SO_MARK of sockets that answer sandboxes (0 none) */

    /* Audit. */
    bool audit_fail_open;     /* default false: an audit failure denies traffic */
    bool audit_query_strings; /* default false: paths are logged without query */
    /* Audit budgets per sandbox (audit_budget.h): records written one by one per second
     * and at once; beyond, counted into aggregate records of audit_aggregate_ms. A rate of
     * 0 writes every record. */
    uint32_t audit_allow_rate, audit_allow_burst; /* allowed decisions: 50/s, 200 */
    uint32_t audit_deny_rate, audit_deny_burst;   /* denials: 100/s, 400 */
    uint32_t audit_aggregate_ms;                  /* interval of an aggregate: 1 s */
    /* The log's files (common/auditlog): a new file beyond this size or age; the oldest
     * deleted while all are larger, older, or more (0 = that rule off). */
    uint64_t audit_rotate_bytes; /* 64 MiB */
    uint64_t audit_rotate_ms;    /* 1 day */
    uint64_t audit_retain_bytes; /* 4 GiB */
    uint64_t audit_retain_ms;    /* 90 days */
    uint32_t audit_retain_files; /* 0 */
};

/* Defaults as documented above (state dir from common/paths). */
void egress_config_defaults(struct egress_config *cfg);
/* Parses the daemon's command line into cfg (after defaults). Unknown options are errors.
 * Returns 0, 1 if --help was printed, or < 0 with err set. */
int egress_config_parse_args(struct egress_config *cfg, int argc, char **argv,
                             struct al_error *err);
/* Checks a configuration and fills derived defaults (paths under the state dir). */
int egress_config_finish(struct egress_config *cfg, struct al_error *err);
void egress_config_usage(FILE *f);
/* "ADDR:PORT" or "[V6]:PORT" into ss. */
int egress_parse_sockaddr(const char *s, uint16_t default_port, struct sockaddr_storage *ss);

struct egress;

/* Creates the instance: opens the audit log, binds every listener (so that errors such as
 * EADDRINUSE surface here), but starts no thread. */
int egress_new(const struct egress_config *cfg, struct egress **out, struct al_error *err);
/* Starts the workers and the admin API; returns at once. */
int egress_start(struct egress *e, struct al_error *err);
/* Runs the control loop (admin API, signals) on the calling thread until egress_stop. */
int egress_run(struct egress *e);
/* Asks the instance to stop (any thread, async-signal-safe). */
void egress_stop(struct egress *e);
/* Joins workers, closes everything (open connections are closed and audited). */
void egress_free(struct egress *e);

/* ---- control (admin API, tests) ------------------------------------------------------ */
struct egress_ip;
struct json_t;
struct uv_loop_s;

/* Where a policy comes from: YAML text (yaml, len bytes, origin naming it in errors) or a
 * file (file) that reloads re-read. */
struct egress_policy_src {
    const char *yaml;
    size_t len;
    const char *origin;
    const char *file;
};

/* Registers a sandbox: its source addresses (the vswitch guarantees them), template, and
 * policy, narrowed by the sandbox's E2B network fields when given (network; kept for every
 * later policy of the sandbox). On an invalid policy or network nothing is registered and
 * err says why (file:line:col). */
struct egress_register {
    const char *id;
    const char *template_name;
    const struct egress_ip *addrs;
    size_t n_addrs;
    struct egress_policy_src policy;
    /* Placeholders handed out at an earlier registration (a JSON object ENV -> value) that
     * the sandbox's processes still hold: kept (interception, docs/egress-intercept.md). */
    const struct json_t *placeholders;
    /* E2B network fields {"allow_internet_access"?, "allow_out"?, "deny_out"?} or NULL
     * (egress_network_check; copied). */
    const struct json_t *network;
};
int egress_register_sandbox(struct egress *e, const struct egress_register *r,
                            struct al_error *err);
/* Removes it and closes its connections (each audited). -ENOENT if unknown. */
int egress_unregister_sandbox(struct egress *e, const char *id);
/* Replaces a sandbox's policy atomically (narrowed by the sandbox's network fields, as at
 * registration); src NULL (or with neither yaml nor file): the sandbox's policy file read
 * again. On error the old policy stays and err says why. */
int egress_set_policy(struct egress *e, const char *id, const struct egress_policy_src *src,
                      struct al_error *err);
/* Who asked for a network update, for its audit records: the update's id and the API key's
 * (either may be NULL) and the control plane's number of the update (< 0 when none). */
struct egress_net_update {
    const char *id;
    const char *key_id;
    int64_t generation;
};
/* Replaces a sandbox's E2B network fields (network: {"allow_internet_access"?,
 * "allow_out"?, "deny_out"?}, or NULL for none; copied) atomically: its policy becomes the
 * policy under its previous narrowing narrowed by these, for every connection, request and
 * DNS query decided from now on, and every worker judges the sandbox's established
 * connections again (one the new narrowing no longer lets through is reset, its end record
 * naming u->id). Audited (event network_update, with u's fields; u may be NULL). -ENOENT
 * unknown sandbox, -EINVAL bad fields (the old ones stay; err says why). */
int egress_set_network(struct egress *e, const char *id, const struct json_t *network,
                       const struct egress_net_update *u, struct al_error *err);
/* Re-reads every file-based policy; returns how many failed (each audited and logged; the
 * old policy stays). */
int egress_reload(struct egress *e, struct json_t *report);
/* Figures for operators (global, per sandbox when id != NULL). NULL when unknown. */
struct json_t *egress_stats_json(struct egress *e, const char *id);
struct json_t *egress_sandboxes_json(struct egress *e);
/* What the control plane hands a sandbox's agent (docs/egress-intercept.md): {"caCertPem",
 * "caFingerprint", "caNames", "placeholders": {ENV: value}}. NULL when unknown. */
struct json_t *egress_sandbox_intercept_json(struct egress *e, const char *id);
/* The control loop (admin API runs on it). */
struct uv_loop_s *egress_ctl_loop(struct egress *e);
/* Appends a record of the control plane (airlockd) to the audit log, in the chain with the
 * proxy's: rec is {"type": "volume", "event": "create", ...} (the types docs/audit.md
 * lists), copied. -EINVAL (err says why) for another type, a malformed event or a field of
 * the log's envelope; -EIO when the log cannot be written. */
int egress_audit_controlplane(struct egress *e, const struct json_t *rec, struct al_error *err);
/* Blocks until audit records appended so far are durable. */
int egress_sync_audit(struct egress *e, uint32_t timeout_ms);
/* A signed checkpoint of the audit log now. */
int egress_checkpoint_audit(struct egress *e);

/* The listening sockets of one kind (0 transparent TCP, 1 DNS UDP, 2 DNS TCP) of
 * listener index i: one per worker (a SO_REUSEPORT group), or the single shared socket in
 * the shared listener mode. Returns how many. */
size_t egress_listener_fds(const struct egress *e, int kind, size_t i, int *fds, size_t max);
/* The listener layout egress_new chose (REUSEPORT or SHARED, never AUTO). */
enum egress_listener_mode egress_listener_mode(const struct egress *e);
/* Applies SO_MARK to every listening socket (answers to sandboxes carry it). */
int egress_set_reply_mark(struct egress *e, uint32_t mark);

/* Ports actually bound (for port 0 listeners): index into tcp_listen / dns_listen. */
uint16_t egress_tcp_port(const struct egress *e, size_t i);
uint16_t egress_dns_port(const struct egress *e, size_t i);

#endif
