/* controlplane/config: airlockd's configuration.
 *
 * Owns: the configuration table (every key, its default, range, environment variable and
 * help line: `airlockd --help-config` prints it), loading in increasing precedence:
 * embedded defaults, the file (/etc/airlock/airlockd.yaml if it exists, or --config FILE,
 * which must exist), environment variables, then --listen/--state-dir; and the derived
 * values (paths under the state directory when not set).
 * The file is strict (common/config: unknown keys are errors with file:line:col).
 */
#ifndef AIRLOCK_CP_CONFIG_H
#define AIRLOCK_CP_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "common/yaml.h"

#define CP_DEFAULT_CONFIG_FILE "/etc/airlock/airlockd.yaml"

enum cp_backend_choice { CP_BACKEND_AUTO = 0, CP_BACKEND_JAIL, CP_BACKEND_KVM, CP_BACKEND_TEST };
enum cp_on_shutdown { CP_SHUTDOWN_KILL = 0, CP_SHUTDOWN_KEEP };
enum cp_tri { CP_TRI_AUTO = 0, CP_TRI_ON, CP_TRI_OFF };
enum cp_cluster_role { CP_CLUSTER_STANDALONE = 0, CP_CLUSTER_NODE, CP_CLUSTER_GATEWAY };

struct cp_config {
    char *listen; /* ADDR:PORT of the E2B API */
    char *state_dir;
    char *sandbox_url; /* what E2B_SANDBOX_URL should be ("" = the API's URL) */
    char *domain;      /* "domain" in Sandbox responses ("" = null) */
    int log_level;     /* enum al_log_level */
    int log_format;    /* enum al_log_format */

    /* sandboxes */
    int backend;                   /* enum cp_backend_choice */
    char *kvm_kernel;              /* kvm: guest bzImage ("" = airlock-vmm's default) */
    uint64_t kvm_probe_timeout_ms; /* airlock-vmm --probe-kvm --timeout-ms */
    uint64_t default_timeout_ms;
    uint64_t max_timeout_ms;
    int64_t cpu_count;
    uint64_t memory_bytes;
    uint64_t disk_bytes;
    int64_t pids;
    int64_t max_sandboxes;
    int64_t total_pids;          /* all sandboxes together (0 = from kernel.pid_max) */
    uint64_t total_memory_bytes; /* all sandboxes together (0 = from MemTotal) */
    int64_t max_creating;        /* creations in flight */
    int64_t max_fork;            /* copies one fork may ask for */
    int64_t start_concurrency;   /* of those, starting their sandbox at once (0: 4 per CPU) */
    uint64_t start_timeout_ms;
    uint64_t ready_timeout_ms; /* the template's readyCmd, after the agent is healthy */
    uint64_t log_max_bytes;
    uint64_t metrics_interval_ms;
    int on_shutdown;          /* enum cp_on_shutdown */
    char *cgroup_parent;      /* jail: cgroup parent */
    int64_t warm_pool;        /* airlock-vmm processes kept waiting for a spec */
    uint64_t refill_quiet_ms; /* the pools refill once no creation was asked for this long */
    bool runtime_tmpfs;       /* <state>/sandboxes on a tmpfs */
    /* warm sandboxes (warm.c) */
    int64_t warm_min, warm_max;           /* per template not listed in warm_templates */
    struct al_cfg_strlist warm_templates; /* "NAME=MIN..MAX" */
    uint64_t warm_memory_bytes;           /* all of them together */
    uint64_t warm_window_ms;              /* demand remembered this long */

    int64_t uid_base; /* jail: first host uid of the sandboxes (0 = default) */
    int64_t uid_slots;

    /* policies and templates */
    char *policies_dir; /* "" = <state>/policies */
    char *default_policy;
    char *templates_dir; /* "" = <state>/templates */
    struct al_cfg_strlist default_templates;
    int build_templates;    /* enum cp_tri: auto = build missing defaults at start */
    char *template_builder; /* "" = deploy/templates/build next to the binaries */
    /* images from registries (templates/oci.h) */
    struct al_cfg_strlist registries;
    struct al_cfg_strlist insecure_registries;
    char *registry_ca;     /* "" = the system's roots */
    char *image_cache_dir; /* "" = <state>/cache/oci */
    uint64_t pull_timeout_ms;
    uint64_t max_image_bytes;
    uint64_t max_unpacked_bytes;
    int64_t max_image_entries;
    int64_t max_builds;        /* template builds at once (builds.c) */
    char *build_policy;        /* egress policy of RUN steps' sandboxes (buildsb.c) */
    uint64_t step_timeout_ms;  /* longest RUN step */
    uint64_t max_step_output;  /* bytes of a RUN step's output in the build log */
    uint64_t max_upload_bytes; /* one COPY archive (builds.c) */
    uint64_t volume_bytes;     /* a volume's quota when its creation names none (volumes.c) */
    uint64_t volume_max_bytes; /* the most a creation may ask for */
    int64_t max_volumes;       /* per API key */
    /* snapshot retention (snapshots.c): 0 is no bound */
    int64_t snap_keep_per_sandbox;
    int64_t snap_keep_per_key;
    uint64_t snap_max_age_ms;
    uint64_t snap_quota_per_key; /* bytes of one key's snapshots together (0: no bound) */
    uint64_t cache_max;          /* the blob and step caches together (templates/cachegc.h) */
    /* encryption at rest of snapshots, paused sandboxes' files and volumes (atrest.h) */
    int at_rest_encrypt;    /* enum cp_tri */
    char *at_rest_key_file; /* their one key ("" or NULL: <state>/at_rest.key) */

    /* network (vswitch) */
    int network; /* enum cp_tri: auto = on when the host allows it */
    char *net_range;
    int64_t net_prefix_len;
    char *net_ifname_prefix;
    int64_t net_pool_size;
    int64_t net_max_ifaces;

    /* the egress audit log (passed to airlock-egress; docs/audit.md) */
    int64_t audit_allow_rate, audit_allow_burst, audit_deny_rate, audit_deny_burst;
    uint64_t audit_aggregate_ms;
    uint64_t audit_rotate_bytes, audit_rotate_ms;
    uint64_t audit_retain_bytes, audit_retain_ms;
    int64_t audit_retain_files;

    /* lifecycle events (events.c) */
    uint64_t events_retention_ms;
    int64_t events_max;

    /* webhooks (webhooks.c) */
    bool webhooks_allow_http;    /* http:// URLs (else https only) */
    bool webhooks_allow_private; /* targets on internal addresses (loopback, private, ...) */
    char *webhooks_ca_file;      /* trusted roots for https ("": the system's) */
    uint64_t webhooks_timeout_ms;
    int64_t webhooks_attempts;
    uint64_t webhooks_backoff_ms, webhooks_backoff_max_ms;
    int64_t webhooks_queue;
    int64_t webhooks_history;
    int64_t webhooks_per_key;

    /* the web console (console.c) */
    bool console_enabled;
    uint64_t console_session_ms;
    int console_secure_cookie; /* enum cp_tri: auto = when the request came over https */

    /* the disk reserve (disk.c) */
    uint64_t disk_reserve_bytes;
    uint64_t disk_check_ms;

    /* the cluster (cluster.c, docs/cluster.md) */
    int cluster_role;         /* enum cp_cluster_role */
    char *cluster_database;   /* libpq conninfo ("" = none: never connects) */
    char *cluster_node_id;    /* "" = the host name */
    char *cluster_advertise;  /* HOST:PORT gateways reach this node at ("" = the API's) */
    char *cluster_token_file; /* the cluster token (cluster.c; AIRLOCK_CLUSTER_TOKEN wins) */
    char *cluster_tls_ca;     /* mutual TLS between gateways and nodes (cluster_tls.c): */
    char *cluster_tls_cert;   /* the cluster CA, this airlockd's certificate and key; */
    char *cluster_tls_key;    /* "" = none (all three, or none) */
    uint64_t cluster_lease_ms;
    uint64_t cluster_heartbeat_ms; /* 0 = a third of the lease */

    /* helper daemons */
    int egress; /* enum cp_tri */
    struct al_cfg_strlist egress_args;
    int vault; /* enum cp_tri */
    struct al_cfg_strlist vault_args;
    char *bin_dir;   /* where airlock-vmm/-egress/-vault/-agent live ("" = ours) */
    char *agent_dir; /* jail: the agent directory mounted at /.airlock */

    /* derived (not keys) */
    char listen_host[64];
    int listen_port;
    char policies_path[4096];
    char templates_path[4096];
    char image_cache_path[4096];
    char bin_path[4096];
    char config_file[4096]; /* the file that was loaded, "" = none */
};

extern const struct al_cfg_field cp_config_fields[];

/* Loads the configuration. file NULL = the default path if it exists; listen/state_dir
 * (may be NULL) override the file. Prints diagnostics to f. */
int cp_config_load(struct cp_config *c, const char *file, const char *listen, const char *state_dir,
                   FILE *f);
/* Derives listen_host/port, the paths, and checks combinations. */
int cp_config_finish(struct cp_config *c, struct al_diags *d);
void cp_config_free(struct cp_config *c);
/* The airlock-egress options that the audit.* keys stand for, into argv (at most max
 * entries; their strings live in buf). Returns how many. */
size_t cp_config_egress_audit_args(const struct cp_config *c, char **argv, size_t max, char *buf,
                                   size_t buflen);
/* Splits "127.0.0.1:3000" or "[::1]:3000". */
int cp_parse_listen(const char *s, char *host, size_t hostlen, int *port);

#endif
